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
    layout, with the pattern's ``mask_mod`` for the partial tiles. Queries sit at the end of the keys."""
    layout = pattern.block_layout(q_len, block=block, kv_len=kv_len)
    off = kv_len - q_len
    rule = pattern.mask_mod
    if key_valid is None:

        def mask_mod(b, h, q_idx, kv_idx):
            return rule(b, h, q_idx + off, kv_idx)
    else:
        valid = key_valid.to(device)

        def mask_mod(b, h, q_idx, kv_idx):
            return rule(b, h, q_idx + off, kv_idx) & valid[b, kv_idx]

    return build_block_mask(layout, mask_mod, q_len, kv_len, B, H, device, key_valid is not None)


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
    "build_block_mask",
    "can_compile_on",
    "compile_enabled",
    "flex_attention_forward",
    "flex_available",
    "flex_block_mask",
    "run_flex",
]
