"""FlexAttention backend: a ``BlockMask`` built from the pattern's block layout (never by evaluating
n^2 pairs), executed by the compiled ``flex_attention`` (Triton on GPU, C++ on CPU).

FlexAttention has no backward on CPU: the dispatcher never sends CPU training here. Compiled
functions are cached by torch.compile per shape; set ``HF_SPARSE_FLEX_COMPILE=0`` to run the eager
(reference, O(n^2)) implementation instead, which is what the CPU tests use.
"""

from __future__ import annotations

import copy
import functools
import os
import shutil
import warnings
from dataclasses import dataclass

import torch

from hf_sparse.patterns.base import all_geometry, holds_tensors


def flex_available() -> bool:
    try:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def compile_enabled() -> bool:
    return os.environ.get("HF_SPARSE_FLEX_COMPILE", "1") not in ("0", "false", "False")


def can_compile_on(device: torch.device) -> bool:
    """torch.compile needs a C++ compiler on CPU and Triton on GPU."""
    return _has_cxx() if device.type == "cpu" else True


@functools.cache
def _has_cxx() -> bool:  # looked up once: PATH searches took ~0.1 ms of every CPU call
    return any(shutil.which(cc) for cc in ("g++", "c++", "clang++"))


# Compiled with dynamic=False, FlexAttention compiles once per shape (sequence length) and mask structure;
# past dynamo's recompile_limit (8 by default) it would run eagerly, materialising n^2 scores. Automatic
# dynamic shapes are no way out (H200, torch 2.11, SlidingWindow(512) and BigBird(64) at 64k: 1.5-1.6x
# slower, and still a compile per length), so every new length compiles (seconds), up to this many.
FLEX_RECOMPILE_LIMIT = 256


@functools.cache
def _compiled():
    from torch.nn.attention.flex_attention import flex_attention

    compiled = torch.compile(flex_attention, dynamic=False)

    def run(*args, **kwargs):
        limit = max(torch._dynamo.config.recompile_limit, FLEX_RECOMPILE_LIMIT)
        with torch._dynamo.config.patch(recompile_limit=limit):
            return compiled(*args, **kwargs)

    return run


def build_block_mask(
    layout, mask_mod, q_len: int, kv_len: int, B: int, H: int, device, partial_everywhere: bool
):
    """BlockMask from a BlockLayout: kept tiles, split into full and partial ones."""
    from torch.nn.attention.flex_attention import BlockMask

    idx = layout.kv_index.to(device)
    full = layout.full.to(device) & (idx >= 0)
    if partial_everywhere:
        full = torch.zeros_like(full)
    partial = (idx >= 0) & ~full
    nkb = layout.num_kv_blocks

    def compact(keep):  # BlockMask wants (B, H, num_q_blocks, num_kv_blocks) index rows
        key = torch.where(keep, idx, torch.full_like(idx, nkb))
        key, _ = key.sort(dim=-1)
        width = key.shape[-1]
        if width < nkb:
            key = torch.cat([key, key.new_full((*key.shape[:-1], nkb - width), nkb)], dim=-1)
        num = keep.sum(-1).to(torch.int32)
        rows = key[..., :nkb].clamp(max=nkb - 1).to(torch.int32)
        return num.expand(B, H, -1).contiguous(), rows.expand(B, H, -1, -1).contiguous()

    kv_num, kv_idx = compact(partial)
    full_num, full_idx = compact(full)
    return BlockMask.from_kv_blocks(
        kv_num,
        kv_idx,
        full_num,
        full_idx,
        BLOCK_SIZE=layout.block,
        mask_mod=mask_mod,
        seq_lengths=(q_len, kv_len),
    )


def flex_block_mask(
    pattern,
    key_valid,
    B: int,
    H: int,
    q_len: int,
    kv_len: int,
    block: int,
    device,
    grad: bool = True,
    partial: bool = False,
):
    """The ``BlockMask`` of a bound pattern (and padding, if ``key_valid`` is given): built from its block
    layout (over ``flex_tile``'s tiles on CUDA), with the pattern's ``mask_mod`` for the partial tiles (every
    tile if ``partial``: a mask that adds dropout to it must be evaluated everywhere). Queries sit at the end
    of the keys. Without padding it is built once per pattern, shape, device, tile and ``partial``, and kept
    on the pattern."""
    device = torch.device(device)
    tile = flex_tile(pattern, device, grad)
    if key_valid is None:
        key = ("flex_block_mask", B, H, q_len, kv_len, block, str(device), tile, partial)
        return pattern.derived(
            key, lambda: _block_mask(pattern, None, B, H, q_len, kv_len, block, device, tile, partial)
        )
    return _block_mask(pattern, key_valid, B, H, q_len, kv_len, block, device, tile, True)


def _block_mask(pattern, key_valid, B, H, q_len, kv_len, block, device, tile, partial):
    if tile is None:
        layout = pattern.block_layout(q_len, block=block, kv_len=kv_len)
    else:
        layout = cuda_layout(pattern, q_len, kv_len, block, tile)
    rule = None
    if tile is not None and holds_tensors(pattern):  # CUDA
        fine = _finest_block(pattern, block)
        own = layout if layout.block == fine else pattern.block_layout(q_len, block=fine, kv_len=kv_len)
        rule = _lookup_rule(own, device)
    if rule is None:
        off = kv_len - q_len
        pattern_rule = pattern.to(device).mask_mod  # the mask's tables on the kernel's device

        def rule(b, h, q_idx, kv_idx):
            return pattern_rule(b, h, q_idx + off, kv_idx)

    if key_valid is None:
        mask_mod = rule
    else:
        valid = key_valid.to(device)

        def mask_mod(b, h, q_idx, kv_idx):
            return rule(b, h, q_idx, kv_idx) & valid[b, kv_idx]

    return build_block_mask(layout, mask_mod, q_len, kv_len, B, H, device, partial)


def _finest_block(pattern, block: int) -> int:
    """The pattern's own block where the kernel's is a multiple of it (BigBird(16) runs on blocks of 64),
    down to 16 (the lookup table grows as its square), else the kernel's."""
    fine = min(all_geometry(pattern), default=block)
    return fine if 16 <= fine < block and block % fine == 0 else block


def _lookup_rule(layout, device):
    """The mask of a layout whose kept tiles are all full (BigBird, Random, TopKBlocks after binding: whole
    blocks) as one lookup in its block map, or None. On CUDA this replaces a mask that reads several
    tables where a tile is partial: in BlockMask tiles coarser than the pattern's blocks, and everywhere
    with padding (H200, torch 2.11, bf16, BigBird(64) through sparse_attention, forward+backward, the code
    before and after on one machine: 16k 4.12 -> 3.43 ms, 64k 16.0 -> 13.0 ms)."""
    if not bool((layout.full | (layout.kv_index < 0)).all()):
        return None
    c, table = layout.block, layout.to_dense().to(device)
    Bl, Hl = table.shape[:2]

    def rule(b, h, q_idx, kv_idx):
        return table[b if Bl > 1 else 0, h if Hl > 1 else 0, q_idx // c, kv_idx // c]

    return rule


# CUDA: the BlockMask's tile. Triton's flex kernels tile by BLOCK_M x BLOCK_N = 128 x 64 or 128 x 128
# and refuse a mask whose block they do not divide (H200, torch 2.11: blocks of 16 and 64 raised
# "Q and KV block size must be divisible by BLOCK_M and BLOCK_N"); the backward's tiles (64 x 128 and
# 128 x 64 for head size 64) need blocks of 128 too (blocks of 64: NoValidChoicesError, also with
# kernel_options bwd_BLOCK_* = 64).
CUDA_BLOCK = 128
# Without gradients, masks that read tables run on 64 x 64 Triton tiles (kernel_options), so their
# BlockMask keeps blocks of 64: BigBird's tiles are then all full and its mask is never evaluated (H200,
# torch 2.11, bf16, BigBird(64) forward, the code before and after on one machine: 16k 1.52 -> 0.70 ms,
# 64k 5.42 -> 1.56 ms; benchmarks/attention_gpu.md's run 5: 0.47 and 1.38 ms).
CUDA_INFERENCE_BLOCK = 64


def flex_tile(pattern, device, grad: bool) -> int | None:
    """The BlockMask's tile on CUDA: ``CUDA_INFERENCE_BLOCK`` for a mask that reads tables when no gradient
    is taken, else ``CUDA_BLOCK``; None elsewhere (the pattern's own block)."""
    if torch.device(device).type != "cuda":
        return None
    return CUDA_INFERENCE_BLOCK if not grad and kernel_options(pattern, device) else CUDA_BLOCK


def cuda_layout(pattern, q_len: int, kv_len: int, block: int, tile: int = CUDA_BLOCK):
    """The pattern's block layout over ``tile``-wide tiles (or ``block``, if larger): any tile is exact, those that
    straddle the pattern's own blocks (e.g. blocks of 48) being partial."""
    return pattern.block_layout(q_len, block=max(block, tile), kv_len=kv_len)


def coarsen(layout, factor: int):
    """The layout over tiles ``factor`` times larger: a tile is kept if any of its sub-tiles is, and full
    if all ``factor^2`` are (sub-tiles past the sequence's end count as not full)."""
    from hf_sparse.patterns.base import BlockLayout

    Bl, Hl, nqb, _ = layout.kv_index.shape
    nkb = layout.num_kv_blocks
    kept, full = layout.to_dense(), layout.to_dense(full=True)
    Q, K = -(-nqb // factor), -(-nkb // factor)

    def tiles(m):  # (Bl, Hl, Q, factor, K, factor)
        m = torch.nn.functional.pad(m, (0, K * factor - nkb, 0, Q * factor - nqb))
        return m.view(Bl, Hl, Q, factor, K, factor)

    kept = tiles(kept).any(5).any(3)
    full = tiles(full).all(5).all(3) & kept
    key, order = torch.where(kept, torch.arange(K, device=kept.device), K).sort(dim=-1)
    width = max(int(kept.sum(-1).max()), 1)
    kv_index = torch.where(key[..., :width] < K, key[..., :width], -1)
    return BlockLayout(
        layout.block * factor, Q, K, kv_index, full.gather(-1, order)[..., :width] & (kv_index >= 0)
    )


# From this length on, bands inside residue classes run in class order (a call of their own, merged by
# log-sum-exp; FlexAttention returns it on CUDA, and in eager mode, which the CPU tests run). Shorter
# inputs are launch-bound there: Strided(128), H200, bf16, torch 2.11, position order vs class order:
# 4k forward 0.23 vs 1.26 ms, forward+backward 0.77 vs 2.91 ms; 16k 1.94 vs 0.87 ms and 6.76 vs 2.58 ms
# (benchmarks/attention_gpu.md; the 4k figures from a run before the lerp merge, as the 16k ones at 1.20 / 2.47).
FLEX_CLASS_ORDER_MIN_LEN = 12288


def flex_attention_forward(
    query, key, value, pattern, key_valid, scale: float, block: int, dropout_p: float = 0.0, seed: int = 0
):
    """Exact attention of a bound pattern with FlexAttention: (B, H, q_len, Dv). Patterns with a band
    inside residue classes (``Component.class_band``: Strided's causal columns, Dilated) run that part in
    class order, where it is a band, as a call of its own, merged by log-sum-exp (where FlexAttention
    returns it: on CUDA and eager); else one call with the pattern's mask over its position-order tiles.
    With dropout: ``_with_dropout``."""
    B, H, q_len, _ = query.shape
    kv_len = key.shape[-2]
    eager = not compile_enabled()
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))

    def calls(partial: bool) -> list[_Part]:
        if key_valid is None and (eager or query.device.type != "cpu" and q_len >= FLEX_CLASS_ORDER_MIN_LEN):
            parts = class_order_parts(pattern, B, H, q_len, kv_len, block, query.device, partial)
            if parts is not None:
                return parts
        block_mask = flex_block_mask(
            pattern, key_valid, B, H, q_len, kv_len, block, query.device, grad, partial
        )
        return [_Part(block_mask, 0, kernel_options(pattern, query.device))]

    parts = calls(False)
    if dropout_p > 0.0:
        return _with_dropout(query, key, value, parts, calls(True), scale, dropout_p, seed)
    if len(parts) == 1 and not parts[0].d:
        return run_flex(query, key, value, parts[0].block_mask, scale, parts[0].options)
    return run_parts(query, key, value, parts, scale)[0]


def _with_dropout(query, key, value, parts, partial_parts, scale: float, dropout_p: float, seed: int):
    """Attention dropout in FlexAttention, which has none: the probabilities of the kept pairs (the mask the
    blocked kernels and the dense backend draw for ``seed``: ``dropout.keep_pairs``) are ``exp(s - lse)``
    with ``lse`` over every allowed pair, so the result is one call over the kept pairs (their softmax,
    ``out`` and ``lse_kept``) rescaled by ``exp(lse_kept - lse) / (1 - p)``, with ``lse`` from a call over
    all pairs (``parts``); both log-sum-exps carry gradients, so the backward is exact. Every tile of the
    kept call evaluates the mask (``partial_parts``: the same calls with no full tiles). About twice a call
    without dropout."""
    from hf_sparse.attention.dropout import threshold
    from hf_sparse.attention.prepare import to_classes

    B, H, nq = query.shape[:3]
    rows, cols = _dropout_tables(seed, B, H, nq, key.shape[2], query.device)
    limit = threshold(dropout_p)
    kept_parts = []
    for part in partial_parts:
        r, c = (to_classes(rows, part.d, 2), to_classes(cols, part.d, 0)) if part.d else (rows, cols)
        block_mask = copy.copy(part.block_mask)
        block_mask.mask_mod = _kept_mod(part.block_mask.mask_mod, r, c, limit)
        kept_parts.append(_Part(block_mask, part.d, part.options))
    _, lse = run_parts(query, key, value, parts, scale)
    out, lse_kept = run_parts(query, key, value, kept_parts, scale)
    # rows with no allowed key (both -inf) get 0, with no NaN in their gradients
    log_share = torch.where(torch.isfinite(lse), lse_kept - lse, float("-inf"))
    return out * (torch.exp(log_share) / (1.0 - dropout_p))[..., None].to(out.dtype)


def _dropout_tables(seed: int, B: int, H: int, nq: int, nk: int, device):
    """The hash's row part, (B, H, nq), and key part, (nk,), in position order (``dropout.row_terms``,
    ``key_terms``): tensors the mask reads, so a new seed compiles nothing."""
    from hf_sparse.attention.dropout import key_terms, row_terms

    arange = lambda n: torch.arange(n, dtype=torch.int64, device=device)  # noqa: E731
    return row_terms(seed, arange(B * H)[:, None], arange(nq)).view(B, H, nq), key_terms(arange(nk))


def _kept_mod(rule, rows, cols, limit: int):
    """``rule`` and the dropout mask: ``dropout.kept`` of the (B, H, q) ``rows`` and the ``cols`` of the
    hash, in the call's index order (closure cells, which the compiled FlexAttention guards on)."""
    from hf_sparse.attention.dropout import kept

    def mask_mod(b, h, q_idx, kv_idx):
        return rule(b, h, q_idx, kv_idx) & kept(rows[b, h, q_idx], cols[kv_idx], limit)

    return mask_mod


def kernel_options(pattern, device) -> dict | None:
    """Triton tiles of 64 x 64 for masks that read tables, on CUDA. At 128 x 128 (the default on an H200,
    torch 2.11) such a mask ran 20x slower than the same tiles without it: BigBird(64) at 16k, bf16,
    forward 31.2 ms, 0.54 ms with a no-op mask on the same BlockMask, 1.37 ms with 64 x 64 tiles
    (2.28 ms with 128 x 64). Arithmetic masks (bands, strides) keep the default."""
    if torch.device(device).type != "cuda" or not holds_tensors(pattern):
        return None
    return {"BLOCK_M": 64, "BLOCK_N": 64}


@dataclass
class _Part:
    """One FlexAttention call: its BlockMask, in residue-class order of stride d (0: position order), with
    its Triton ``kernel_options``."""

    block_mask: object
    d: int = 0
    options: dict | None = None


def class_order_parts(
    pattern, B, H, q_len, kv_len, block, device, partial: bool = False
) -> list[_Part] | None:
    """The calls of a pattern whose plan is position-order components plus bands inside residue classes
    (``Component.class_band``; equal classes, rules without tables), kept on the pattern; else None.
    In position order Strided(128)'s columns touch every earlier tile (as many as causal full attention);
    in class order they are one band per class (benchmarks/attention_gpu.md, H200, bf16: 16k forward 1.94 ->
    0.87 ms, forward+backward 6.76 -> 2.58 ms; 64k 25.4 -> 1.40 ms and 96.5 -> 5.18 ms)."""
    if q_len != kv_len:
        return None
    device = torch.device(device)
    key = ("flex_class_parts", B, H, q_len, block, str(device), partial)
    return pattern.derived(key, lambda: _class_order_parts(pattern, B, H, q_len, block, device, partial))


def _class_order_parts(pattern, B, H, n, block, device, partial):
    from hf_sparse.attention.blocked import _class_stride
    from hf_sparse.patterns.base import merge_layouts

    if holds_tensors(pattern):  # its rule in class order would need its tables permuted too
        return None
    plan = pattern.plan(n, n, block=block)
    bands = [c for c in plan.components if c.class_band is not None]
    rest = [c for c in plan.components if c.class_band is None]
    strides = [_class_stride(c.q_index, n) for c in bands]
    if plan.per_head or not bands or any(not c.identity or c.q_offset for c in rest):
        return None
    for c, d in zip(bands, strides):
        if not d or c.q_offset or c.q_valid is not None or c.k_valid is not None:
            return None
        if not torch.equal(c.q_index, c.k_index):
            return None

    def tile(layout):  # Triton's tiles on CUDA
        return (
            layout if device.type != "cuda" or block >= CUDA_BLOCK else coarsen(layout, CUDA_BLOCK // block)
        )

    parts = []
    if rest:
        layout = rest[0].layout
        for c in rest[1:]:
            layout = merge_layouts(layout, c.layout)
        rules = [c.mask for c in rest]

        def mask_mod(b, h, q_idx, kv_idx):
            out = rules[0](b, h, q_idx, kv_idx)
            for r in rules[1:]:
                out = out | r(b, h, q_idx, kv_idx)
            return out

        parts.append(_Part(build_block_mask(tile(layout), mask_mod, n, n, B, H, device, partial)))
    for c, d in zip(bands, strides):
        band_mod = _class_band_mod(n // d, *c.class_band)
        parts.append(_Part(build_block_mask(tile(c.layout), band_mod, n, n, B, H, device, partial), d))
    return parts


def _class_band_mod(m: int, lo: int, hi: int):
    """The mask of a band inside residue classes in class order: rows r, s of one class (m rows each), lo <=
    s - r <= hi. The bounds are closure cells, which the compiled FlexAttention guards on: as default
    arguments they were not (H200, torch 2.11: Dilated after Strided(128) in one process, 16k, reused
    Strided's compiled mask, max error 1.34)."""

    def band_mod(b, h, q_idx, kv_idx):
        diff = kv_idx - q_idx
        return (q_idx // m == kv_idx // m) & (diff >= lo) & (diff <= hi)

    return band_mod


def run_parts(query, key, value, parts: list[_Part], scale: float):
    """The calls of ``class_order_parts`` (or one call), each with its log-sum-exp, merged: the softmax over
    the union is the outputs weighted by their shares of its sum, ``lerp(a, b, sigmoid(lse_b - lse_a))``;
    rows no call gives a key get 0 (as one FlexAttention call gives them). Returns (out, lse)."""
    from hf_sparse.attention.prepare import from_classes, to_classes

    out = lse = None
    for part in parts:
        d = part.d
        q, k, v = (to_classes(t, d, 2) if d else t for t in (query, key, value))
        o, l = run_flex(q, k, v, part.block_mask, scale, part.options, return_lse=True)
        if out is None:
            out, lse = (from_classes(o, d, 2), from_classes(l, d, 2)) if d else (o, l)
            continue
        if d:  # merged through (n // d, d) views: no copy back to position order first
            o, l = from_classes(o, d, 2, copy=False), from_classes(l, d, 2, copy=False)
            out, lse = out.unflatten(2, l.shape[2:4]), lse.unflatten(2, l.shape[2:4])
        share = torch.sigmoid(l - lse).nan_to_num(0.5)  # nan: no key in either call, both outputs are 0
        out, lse = torch.lerp(out, o, share[..., None].to(out.dtype)), torch.logaddexp(lse, l)
        if d:
            out, lse = out.flatten(2, 3), lse.flatten(2, 3)
    return out, lse


def run_flex(query, key, value, block_mask, scale: float, kernel_options=None, return_lse: bool = False):
    """FlexAttention with a ``BlockMask``: compiled (once per shape and mask structure), or eager where
    ``HF_SPARSE_FLEX_COMPILE=0``. Under ``torch.no_grad()`` the inputs are detached: FlexAttention on CPU refuses
    inputs that require grad even there, and a compiled call that saw them left every later one slow."""
    from torch.nn.attention.flex_attention import flex_attention

    if not torch.is_grad_enabled():  # no graph is built: none of its inputs require grad
        query, key, value = query.detach(), key.detach(), value.detach()
    if compile_enabled():
        fn = _compiled()
    else:
        fn = flex_attention
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
    kw = {"kernel_options": kernel_options} if kernel_options else {}
    if not return_lse:
        return fn(query, key, value, block_mask=block_mask, scale=scale, **kw)
    try:  # torch >= 2.9 asks for the log-sum-exp this way (return_lse is deprecated)
        from torch.nn.attention.flex_attention import AuxRequest
    except ImportError:
        return fn(query, key, value, block_mask=block_mask, scale=scale, return_lse=True, **kw)
    out, aux = fn(
        query, key, value, block_mask=block_mask, scale=scale, return_aux=AuxRequest(lse=True), **kw
    )
    return out, aux.lse


__all__ = [
    "CUDA_BLOCK",
    "CUDA_INFERENCE_BLOCK",
    "FLEX_CLASS_ORDER_MIN_LEN",
    "FLEX_RECOMPILE_LIMIT",
    "build_block_mask",
    "can_compile_on",
    "class_order_parts",
    "coarsen",
    "cuda_layout",
    "compile_enabled",
    "flex_attention_forward",
    "flex_available",
    "flex_block_mask",
    "flex_tile",
    "kernel_options",
    "run_flex",
    "run_parts",
]
