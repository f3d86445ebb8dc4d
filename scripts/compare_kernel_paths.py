"""Two or more execution paths of the blocked kernel side by side, in one process, runs alternating.

On a shared host the machine's speed moves from minute to minute; timing path A now and path B later
compares the host, not the paths. Here every repetition runs each path once in turn (forward +
backward, B=1, H=12, D=64, float32), the matmul rate is measured before and after (a run where it
moved by more than 10% says so), and each median is also given as a multiple of the FLOP bound
(matmul FLOPs of exactly the allowed pairs at the rate measured before: forward+backward = 12 *
pairs * D).

Paths:

* ``new``: the dispatch as it is (``blocked._fused_kind``, ``HF_SPARSE_FUSED=auto``);
* ``fused``: every component on the compiled kernels wherever they apply (``HF_SPARSE_FUSED=all``);
* ``tables``: translation-invariant bands on the pure-PyTorch band path, everything else on the
  compiled table kernel (the dispatch before the compiled band kernel);
* ``fallback``: pure PyTorch everywhere (``HF_SPARSE_FUSED=0``);
* ``ref``: ``hf_sparse/attention/blocked.py`` as it is at git revision ``--ref`` (default ``main``),
  loaded next to the current one (it runs the current compiled kernel where it calls one).

    python scripts/compare_kernel_paths.py --patterns sliding_window strided --sizes 8192 16384
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from hf_sparse import patterns as P  # noqa: E402
from hf_sparse import sparse_attention  # noqa: E402
from hf_sparse.attention import blocked, dispatch  # noqa: E402

H, D = 12, 64
SPECS = {
    "sliding_window": {"type": "sliding_window", "window": 512},
    "causal_window": {"type": "sliding_window", "window": 512, "causal": True},
    "bigbird": {"type": "bigbird", "block": 64},
    "strided": {"type": "strided", "stride": 128},
    "fixed": {"type": "fixed", "block": 128, "summary": 8},
    "dilated": {"type": "dilated", "window": 256, "dilation": 2},
    "longformer": {"type": "longformer", "window": 512},
}
PATHS = ("new", "fused", "tables", "fallback", "ref")
ROOT = os.path.join(os.path.dirname(__file__), "..")


def matmul_gflops() -> float:
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    out = torch.empty(4096, 4096)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        times.append(time.perf_counter() - t0)
    return 2 * 4096**3 / statistics.median(times) / 1e9


def load_ref(ref: str):
    """``blocked.py`` at git revision ``ref`` as module ``hf_sparse.attention.blocked_ref``."""
    source = subprocess.run(
        ["git", "-C", ROOT, "show", f"{ref}:hf_sparse/attention/blocked.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    name = "hf_sparse.attention.blocked_ref"
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "hf_sparse.attention"
    sys.modules[name] = module
    exec(compile(source, f"{ref}:blocked.py", "exec"), module.__dict__)
    return module


def _set_path(path: str, original, ref_module=None):
    os.environ["HF_SPARSE_FUSED"] = {"fallback": "0", "new": "auto"}.get(path, "all")
    dispatch.blocked_attention = ref_module.blocked_attention if path == "ref" else blocked.blocked_attention
    if path == "tables":

        def tables(*args):  # the dispatch's own arguments, whatever they are
            kind = original(*args)
            return None if kind == "band" else kind

        blocked._fused_kind = tables
    else:
        blocked._fused_kind = original


def _run_once(q, k, v, pattern, kw: dict, forward: bool) -> None:
    if forward:
        with torch.no_grad():
            sparse_attention(q, k, v, pattern, backend="blocked", **kw)
    else:
        sparse_attention(q, k, v, pattern, backend="blocked", **kw).sum().backward()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--patterns", nargs="+", default=["sliding_window", "bigbird", "strided"], choices=SPECS)
    ap.add_argument("--sizes", nargs="+", type=int, default=[8192, 16384], help="sequence lengths")
    ap.add_argument("--paths", nargs="+", default=["new", "tables"], choices=PATHS, help="paths to compare")
    ap.add_argument("--ref", default="main", help="git revision whose blocked.py the 'ref' path runs")
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions of each path (after one warm-up)")
    ap.add_argument("--forward", action="store_true", help="time the forward only (no grad)")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (1 on a shared host: a 2-thread run of many small ops waits on descheduled threads)",
    )
    args = ap.parse_args(argv)
    if args.reps < 1:
        raise ValueError(f"--reps must be >= 1, got {args.reps}")
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    original = blocked._fused_kind
    ref_module = load_ref(args.ref) if "ref" in args.paths else None
    rate0 = matmul_gflops()
    print(
        f"matmul before: {rate0:.1f} GFLOP/s; threads {torch.get_num_threads()}; contended host", flush=True
    )
    for name in args.patterns:
        pattern = P.from_dict(SPECS[name])
        for n in args.sizes:
            pairs = pattern.density(n) * n * n * H  # every head
            bound = (4 if args.forward else 12) * pairs * D / (rate0 * 1e9)
            g = torch.Generator().manual_seed(0)
            q, k, v = (
                torch.randn(1, H, n, D, generator=g).requires_grad_(not args.forward) for _ in range(3)
            )
            gm = torch.zeros(1, n, dtype=torch.long)
            gm[0, 0] = 1  # longformer: one global token

            kw = {"global_attention_mask": gm} if name == "longformer" else {}
            times = {p: [] for p in args.paths}
            for rep in range(args.reps + 1):
                for path in args.paths if rep % 2 == 0 else args.paths[::-1]:
                    _set_path(path, original, ref_module)
                    t0 = time.perf_counter()
                    _run_once(q, k, v, pattern, kw, args.forward)
                    if rep:  # the first round warms up (tables, allocations)
                        times[path].append(time.perf_counter() - t0)
            med = {p: statistics.median(t) for p, t in times.items()}
            cells = "  ".join(f"{p} {med[p]:.3f} s ({med[p] / bound:.2f}x)" for p in args.paths)
            ratio = med[args.paths[0]] / med[args.paths[1]] if len(args.paths) > 1 else float("nan")
            print(
                f"{name:15s} n={n:6d} {'fwd' if args.forward else 'fwd+bwd'}  {cells}  "
                f"{args.paths[0]}/{args.paths[1] if len(args.paths) > 1 else '-'} = {ratio:.2f}",
                flush=True,
            )
    _set_path("new", original)
    rate1 = matmul_gflops()
    moved = (rate1 - rate0) / rate0
    print(
        f"matmul after: {rate1:.1f} GFLOP/s ({moved:+.0%} vs before{'; MOVED >10%: repeat' if abs(moved) > 0.1 else ''})"
    )


if __name__ == "__main__":
    main()
