"""Attention kernels behind one dispatcher: dense reference, fused SDPA with the mask (short inputs),
blocked (pure torch), flex."""

from .blocked import blocked_attention, merge_partials
from .dense import allowed_mask, dense_attention, dense_weights, sdpa_attention
from .dispatch import BACKENDS, choose_block, resolve_pattern, sparse_attention, with_runtime_globals

__all__ = [
    "BACKENDS",
    "allowed_mask",
    "blocked_attention",
    "choose_block",
    "dense_attention",
    "dense_weights",
    "merge_partials",
    "resolve_pattern",
    "sdpa_attention",
    "sparse_attention",
    "with_runtime_globals",
]
