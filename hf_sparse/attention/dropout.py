"""The compiled CPU kernels' attention dropout mask, in PyTorch: a counter-based hash of the call's seed and
each (flattened row ``b * H + h``, query ``i``, key ``j``) of the tensors, so the forward and the backward draw
the same mask without storing it, and every path draws the same one: the compiled kernels (``csrc``'s
``Drop``, bit for bit), the blocked kernel's PyTorch path (``keep_pairs`` per chunk) and the dense backend
(``keep_mask``). So a seed gives the same result with and without the compiled kernel, and the dense
reference checks dropout exactly."""

from __future__ import annotations

import math

import torch

_M32 = 0xFFFFFFFF
_MIX1, _MIX2 = 0x85EBCA6B, 0xC2B2AE35  # fmix32's multipliers (``csrc``'s kMix1, kMix2)
_HEAD_MUL, _ROW_MUL, _KEY_MUL = 0x9E3779B9, 0x85EBCA77, 0x27D4EB2F  # of the head, query and key positions


def _mul32(x, c: int):
    """x * c mod 2^32 for x in [0, 2^32) (an int or an int64 tensor), without overflowing int64: c in two
    16-bit halves."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _M32


def _fmix32(x):
    """murmur3's 32-bit finaliser (``csrc``'s ``fmix32``)."""
    x = x ^ (x >> 16)
    x = _mul32(x, _MIX1)
    x = x ^ (x >> 13)
    x = _mul32(x, _MIX2)
    return x ^ (x >> 16)


def threshold(p: float) -> int:
    """A pair is kept where its hash is >= this (p * 2^32, rounded down)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {p!r}")
    return min(_M32, math.floor(p * 4294967296.0))


def row_terms(seed: int, bh: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    """The part of a pair's hash that depends on its seed and row (flattened row ``bh`` = b * H + h, query
    ``i``; int64 tensors that broadcast), to be combined with ``key_terms`` by ``kept``."""
    head = _fmix32((_fmix32(seed & _M32) + _mul32(bh + 1, _HEAD_MUL)) & _M32)
    return _fmix32(head ^ _mul32(i + 1, _ROW_MUL))


def key_terms(j: torch.Tensor) -> torch.Tensor:
    """The part of a pair's hash that depends on its key position ``j`` (int64)."""
    return _mul32(j + 1, _KEY_MUL)


def kept(rows: torch.Tensor, keys: torch.Tensor, limit: int) -> torch.Tensor:
    """Bool: the pairs of ``row_terms`` and ``key_terms`` whose hash is >= ``limit`` (``threshold``). One
    finaliser per pair, so FlexAttention's mask reads two small tables instead of hashing three times: every
    xor-shift reuses its input, and inductor's CPU flex template wrote out the whole hash inside a mask that
    way for over 10 minutes without finishing (torch 2.13)."""
    return _fmix32((rows + keys) & _M32) >= limit


def keep_pairs(seed: int, p: float, bh: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """Bool: which (flattened row ``bh`` = b * H + h, query ``i``, key ``j``) pairs the kernels keep with
    dropout ``p`` and ``seed``; the three int64 tensors broadcast against each other."""
    return kept(row_terms(seed, bh, i), key_terms(j), threshold(p))


def keep_mask(seed: int, p: float, B: int, H: int, nq: int, nk: int, device=None) -> torch.Tensor:
    """(B, H, nq, nk) bool: which attention probabilities the blocked kernels keep with dropout ``p`` and
    ``seed`` (kept ones are scaled by 1 / (1 - p))."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    arange = lambda n: torch.arange(n, dtype=torch.int64, device=device)  # noqa: E731
    return keep_pairs(seed, p, arange(B * H)[:, None, None], arange(nq)[:, None], arange(nk)).view(
        B, H, nq, nk
    )


__all__ = ["keep_mask", "keep_pairs", "kept", "key_terms", "row_terms", "threshold"]
