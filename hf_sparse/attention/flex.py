"""FlexAttention backend: a ``BlockMask`` built from the pattern's block layout (never by evaluating
n^2 pairs), executed by the compiled ``flex_attention`` (Triton on GPU, C++ on CPU).

FlexAttention has no backward on CPU: the dispatcher never sends CPU training here. Compiled
functions are cached by torch.compile per shape; set ``HF_SPARSE_FLEX_COMPILE=0`` to run the eager
(reference, O(n^2)) implementation instead, which is what the CPU tests use.
"""

from __future__ import annotations

import functools
import os
import shutil
import warnings

import torch


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
    if device.type == "cpu":
        return any(shutil.which(cc) for cc in ("g++", "c++", "clang++"))
    return True


@functools.cache
def _compiled():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


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


def flex_block_mask(pattern, key_valid, B: int, H: int, q_len: int, kv_len: int, block: int, device):
    """The ``BlockMask`` of a bound pattern (and padding, if ``key_valid`` is given): built from its block
    layout, with the pattern's ``mask_mod`` for the partial tiles. Queries sit at the end of the keys.
    Without padding it is built once per pattern, shape and device and kept on the pattern."""
    device = torch.device(device)
    if key_valid is None:
        key = ("flex_block_mask", B, H, q_len, kv_len, block, str(device))
        return pattern.derived(key, lambda: _block_mask(pattern, None, B, H, q_len, kv_len, block, device))
    return _block_mask(pattern, key_valid, B, H, q_len, kv_len, block, device)


def _block_mask(pattern, key_valid, B, H, q_len, kv_len, block, device):
    if device.type == "cuda":
        layout = cuda_layout(pattern, q_len, kv_len, block)
    else:
        layout = pattern.block_layout(q_len, block=block, kv_len=kv_len)
    off = kv_len - q_len
    rule = pattern.to(device).mask_mod  # the mask's tables on the kernel's device
    if key_valid is None:

        def mask_mod(b, h, q_idx, kv_idx):
            return rule(b, h, q_idx + off, kv_idx)
    else:
        valid = key_valid.to(device)

        def mask_mod(b, h, q_idx, kv_idx):
            return rule(b, h, q_idx + off, kv_idx) & valid[b, kv_idx]

    return build_block_mask(layout, mask_mod, q_len, kv_len, B, H, device, key_valid is not None)


# CUDA: the BlockMask's tile. Triton's flex kernels tile by BLOCK_M x BLOCK_N = 128 x 64 or 128 x 128
# and refuse a mask whose block they do not divide (H200, torch 2.11: blocks of 16 and 64 raised
# "Q and KV block size must be divisible by BLOCK_M and BLOCK_N").
CUDA_BLOCK = 128


def cuda_layout(pattern, q_len: int, kv_len: int, block: int):
    """The pattern's block layout over ``CUDA_BLOCK`` tiles (or ``block``, if larger): directly where the
    pattern's geometry allows that block, else the layout at ``block`` coarsened."""
    if block >= CUDA_BLOCK:
        return pattern.block_layout(q_len, block=block, kv_len=kv_len)
    try:
        return pattern.block_layout(q_len, block=CUDA_BLOCK, kv_len=kv_len)
    except ValueError:  # a geometry (e.g. blocks of 48) that 128 is no multiple of
        if CUDA_BLOCK % block:
            raise
        return coarsen(pattern.block_layout(q_len, block=block, kv_len=kv_len), CUDA_BLOCK // block)


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


def flex_attention_forward(query, key, value, pattern, key_valid, scale: float, block: int):
    """Exact attention of a bound pattern with FlexAttention: (B, H, q_len, Dv). The log-sum-exp is not
    requested: compiled FlexAttention on CPU cannot return it."""
    B, H, q_len, _ = query.shape
    block_mask = flex_block_mask(pattern, key_valid, B, H, q_len, key.shape[-2], block, query.device)
    return run_flex(query, key, value, block_mask, scale)


def run_flex(query, key, value, block_mask, scale: float):
    """FlexAttention with a ``BlockMask``: compiled (once per shape and mask structure), or eager where
    ``HF_SPARSE_FLEX_COMPILE=0``."""
    from torch.nn.attention.flex_attention import flex_attention

    if compile_enabled():
        fn = _compiled()
    else:
        fn = flex_attention
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
    return fn(query, key, value, block_mask=block_mask, scale=scale)


__all__ = [
    "CUDA_BLOCK",
    "build_block_mask",
    "can_compile_on",
    "coarsen",
    "cuda_layout",
    "compile_enabled",
    "flex_attention_forward",
    "flex_available",
    "flex_block_mask",
    "run_flex",
]
