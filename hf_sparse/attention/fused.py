"""Loader of the fused CPU kernel (``csrc/block_sparse.cpp``): compiled on first use with
``torch.utils.cpp_extension.load`` (cached in torch's extensions directory, so later processes only
load it), against the BLAS that torch itself links (MKL's ``sgemm_``/``dgemm_``).

Where it cannot be built (no C++ compiler, no headers, a BLAS that does not export those symbols),
or with ``HF_SPARSE_FUSED=0``, ``available()`` is False, one line says so, and the blocked kernel
runs its pure-PyTorch path: same results. Where it is built, ``blocked._fused_kind`` runs it only for
the components and modes where it was measured faster (``HF_SPARSE_FUSED=all``: everywhere).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import warnings

import torch

from ..patterns import content

# Files this module reads, relative to it: ``hf_sparse.hub.bundle`` embeds them in the remote-code bundle's copy
# of this module as ``BUNDLED_FILES`` ({path: text}), so a model loaded with ``trust_remote_code`` where
# hf-sparse is not installed builds the same kernel.
BUNDLE_FILES = ("csrc/block_sparse.cpp",)
_SOURCE = os.path.join(os.path.dirname(__file__), *BUNDLE_FILES[0].split("/"))


def _source() -> bytes:
    """The kernel's C++ source: the package's file, or the remote-code bundle's embedded copy."""
    if os.path.isfile(_SOURCE):
        with open(_SOURCE, "rb") as f:
            return f.read()
    bundled = globals().get("BUNDLED_FILES", {})
    if BUNDLE_FILES[0] in bundled:
        return bundled[BUNDLE_FILES[0]].encode("utf-8")
    raise FileNotFoundError(f"{_SOURCE} does not exist")


def _build_source(source: bytes, build_dir: str) -> str:
    """The path the kernel is compiled from: a copy of its source in its own build folder (whose name
    holds the source's hash), the same path for the package and a remote-code bundle, so neither
    rebuilds the other's build (ninja rebuilds when a source path changes)."""
    path = os.path.join(build_dir, "block_sparse.cpp")
    if not os.path.isfile(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(source)
        os.replace(tmp, path)
    return path


_MODES = {"0": "off", "false": "off", "off": "off", "1": "auto", "true": "auto", "auto": "auto", "all": "all"}


def mode() -> str:
    """``HF_SPARSE_FUSED`` (read on every call: tests and benchmarks flip it): ``auto`` (default, also
    ``1``) runs the compiled kernels only where the measured dispatch rule says they win
    (``blocked._fused_kind``), ``all`` wherever they apply (tests, benchmarks), ``0`` nowhere."""
    value = os.environ.get("HF_SPARSE_FUSED", "auto")
    if value.strip().lower() not in _MODES:
        raise ValueError(f"HF_SPARSE_FUSED must be one of 0, 1, auto, all; got {value!r}")
    return _MODES[value.strip().lower()]


def enabled() -> bool:
    """``HF_SPARSE_FUSED=0`` forces the pure-PyTorch path."""
    return mode() != "off"


def _arch_flags() -> list[str]:
    """Vector flags for this CPU, with the ``CPU_CAPABILITY_*`` macro that makes ATen's vector type
    (``at::vec::Vectorized``, which the kernel's exp and row passes use) 16 or 8 floats wide; without
    either it is ATen's scalar default."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        return []
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"} <= flags:
        return [
            "-mavx512f",
            "-mavx512bw",
            "-mavx512vl",
            "-mavx512dq",
            "-mavx2",
            "-mfma",
            "-DCPU_CAPABILITY=AVX512",
            "-DCPU_CAPABILITY_AVX512",
        ]
    if {"avx2", "fma"} <= flags:
        return ["-mavx2", "-mfma", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"]
    return []


def _find_ninja() -> None:
    """Put the ``ninja`` package's executable on ``PATH`` where no ninja is there: torch's extension builder
    looks for it on ``PATH``, which holds an environment's ``bin/`` only while it is activated (the package is
    a dependency; ``.venv/bin/python`` run directly did not find it, and the kernel fell back)."""
    if shutil.which("ninja"):
        return
    try:
        import ninja
    except ImportError:
        return
    bin_dir = getattr(ninja, "BIN_DIR", None)
    if bin_dir and shutil.which("ninja", path=bin_dir):
        os.environ["PATH"] = os.pathsep.join(p for p in (os.environ.get("PATH"), bin_dir) if p)


@functools.cache
def _load():
    """The compiled op namespace, or None (with a one-line notice) where it cannot be built."""
    limit = pool_limit_bytes()  # a bad value is an error, not a reason to fall back
    if not any(shutil.which(cc) for cc in ("c++", "g++", "clang++")):
        warnings.warn(
            "hf_sparse: no C++ compiler found; the blocked kernel uses its pure-PyTorch path", stacklevel=2
        )
        return None
    _find_ninja()
    try:
        from torch.utils import cpp_extension

        # -fopenmp: ATen's parallel_for is OpenMP in the header; without it the kernel runs on one
        # thread (libgomp.so.1 resolves to the copy torch has already loaded). It also makes the
        # ``omp simd`` reductions (row max, exp sum) vectorise.
        cflags = ["-O3", "-ffp-contract=fast", "-fopenmp", *_arch_flags()]
        # the hash of the source and flags in the name: checkouts with different sources keep separate
        # builds instead of rebuilding over each other in the shared extensions directory
        source = _source()
        digest = hashlib.sha256(source + " ".join(cflags).encode()).hexdigest()[:10]
        name = f"hf_sparse_fused_{digest}"
        build_dir = cpp_extension._get_build_directory(name, False)
        if not os.path.exists(os.path.join(build_dir, name + ".so")):
            logging.getLogger(__name__).warning(
                "hf_sparse: compiling the fused CPU attention kernel (once per environment, about a minute)"
            )
        cpp_extension.load(
            name=name,
            sources=[_build_source(source, build_dir)],
            extra_cflags=cflags,
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=False,
        )
        torch.ops.hf_sparse_fused.pool_limit(limit)
        return torch.ops.hf_sparse_fused
    except Exception as exc:  # noqa: BLE001 - any build failure means: use the fallback
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        warnings.warn(
            f"hf_sparse: fused CPU kernel not built ({first}); using the pure-PyTorch path", stacklevel=2
        )
        return None


def pool_limit_bytes() -> int:
    """``HF_SPARSE_POOL_MB`` (default 512): how much memory of freed kernel outputs the compiled kernel
    keeps for its next outputs of the same size (``0``: none). Large blocks freed to glibc go back to
    the system and cost their page faults again on every step (~11 ms per 50 MB)."""
    value = os.environ.get("HF_SPARSE_POOL_MB", "512")
    try:
        mb = int(value)
    except ValueError:
        mb = -1
    if mb < 0:
        raise ValueError(f"HF_SPARSE_POOL_MB must be a whole number of megabytes >= 0; got {value!r}")
    return mb << 20


def empty(size, like: torch.Tensor) -> torch.Tensor:
    """An uninitialised contiguous tensor of ``size`` with like's dtype and device, from the kernel's pool
    of freed outputs where it is built (CPU)."""
    lib = _load() if like.device.type == "cpu" and enabled() else None
    return like.new_empty(size) if lib is None else lib.pool_empty(list(size), like)


def zeros_like(x: torch.Tensor) -> torch.Tensor:
    """Zeros shaped like ``x`` (contiguous), from the kernel's pool where it is built."""
    return empty(x.shape, x).zero_()


class _PooledCopy(torch.autograd.Function):
    """A contiguous copy of ``x`` in the pool; its gradient goes back in x's own memory layout (pooled too)."""

    @staticmethod
    def forward(ctx, x):
        ctx.layout = x.shape, x.stride()
        return empty(x.shape, x).copy_(x)

    @staticmethod
    def backward(ctx, g):
        shape, stride = ctx.layout
        return empty((g.numel(),), g).as_strided(shape, stride).copy_(g)


def _dense(x: torch.Tensor) -> bool:
    """Whether x's elements fill its memory exactly once, in some order of its dimensions (a transposed
    view of a contiguous tensor: yes; a slice: no)."""
    expected = 1
    for size, stride in sorted((d for d in zip(x.shape, x.stride()) if d[0] != 1), key=lambda d: d[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def contiguous(x: torch.Tensor) -> torch.Tensor:
    """``x.contiguous()``, copied into the pool where it is built (CPU). The copy into fresh memory costs
    its page faults: (1, 16384, 12, 64) float32 from a transposed view, 2 threads, 25-29 ms into a new
    tensor, 5-7 ms into a reused one. A transposed view's gradient comes back in the view's own layout, so
    the (B, n, H * D) projection output it was viewed from takes it without the copy autograd's reshape
    made (a 16k SparseTransformerForMaskedLM step copied q, k, v and the attention output this way: 0.31 s)."""
    if (
        x.is_contiguous()
        or x.device.type != "cpu"
        or torch.compiler.is_compiling()
        or not _dense(x)
        or not (_load.cache_info().currsize and available())  # never the reason to build the kernel
    ):
        return x.contiguous()
    return _PooledCopy.apply(x)


def empty_cache() -> None:
    """Releases the freed kernel outputs the pool holds (as ``torch.cuda.empty_cache`` does on CUDA)."""
    if _load.cache_info().currsize and (lib := _load()) is not None:
        lib.pool_limit(0)
        lib.pool_limit(pool_limit_bytes())


def available() -> bool:
    return enabled() and _load() is not None


def ops():
    return _load()


def _lsh_hash(x: torch.Tensor, rot: torch.Tensor, rounds: int) -> torch.Tensor | None:
    """``LSH.hash`` on the compiled kernel (256 rows at a time, product and argmax in cache), or None
    where it does not run."""
    if x.device.type != "cpu" or x.dim() != 4 or x.stride(-1) != 1 or not available():
        return None
    return _load().lsh_hash(x, rot, rounds)


def _lsh_order(hq: torch.Tensor, hk: torch.Tensor, causal: bool, off: int) -> tuple | None:
    """``LSHBuckets._order`` on the compiled kernel (a counting sort), or None where it does not run."""
    if hq.device.type != "cpu" or hq.shape[:-1] != hk.shape[:-1] or not available():
        return None
    lead = hq.shape[:-1]
    nb = int(max(hq.max(), hk.max())) + 1 if hq.numel() and hk.numel() else 1
    flat = (t.reshape(-1, t.shape[-1]).contiguous() for t in (hq, hk))
    q_index, k_index, lo, hi = _load().lsh_order(*flat, nb, causal, off)
    return tuple(t.view(*lead, t.shape[-1]) for t in (q_index, k_index, lo, hi))


content.hash_kernel = _lsh_hash
content.order_kernel = _lsh_order


__all__ = [
    "available",
    "contiguous",
    "empty",
    "empty_cache",
    "enabled",
    "mode",
    "ops",
    "pool_limit_bytes",
    "zeros_like",
]
