"""Local patterns: sliding windows (bidirectional and causal), causal, block-local and dilated."""

from __future__ import annotations

import math

import torch

from .base import (
    BlockLayout,
    Component,
    Pattern,
    Plan,
    band_layout,
    check_bool,
    check_positive_int,
    register_pattern,
    segment_layout,
)


class _Band(Pattern):
    """Patterns of the form ``lo <= i - j <= hi``: one translation-invariant band component."""

    translation_invariant = True

    def _bounds(self) -> tuple[float, float]:
        raise NotImplementedError

    def _plan(self, q_len, kv_len, block):
        lo, hi = self._bounds()
        layout = band_layout(lo, hi, q_len, kv_len, block, q_offset=kv_len - q_len)
        return Plan(
            [
                Component(
                    layout,
                    self._mask,
                    q_offset=kv_len - q_len,
                    translation_invariant=True,
                    name=self.__name__,
                )
            ]
        )

    def _original_layout(self, q_len, kv_len, block):
        lo, hi = self._bounds()
        return band_layout(lo, hi, q_len, kv_len, block, q_offset=kv_len - q_len)


@register_pattern("sliding_window")
class SlidingWindow(_Band):
    """Local attention.

    Bidirectional: query i attends key j iff ``|i - j| <= window // 2``.
    Causal: query i attends key j iff ``0 <= i - j < window`` (``window`` keys including itself).
    """

    def __init__(self, window: int = 512, causal: bool = False):
        self.window = check_positive_int("window", window)
        self.causal = check_bool("causal", causal)
        self.is_causal = self.causal

    def _bounds(self):
        return (0, self.window - 1) if self.causal else (-(self.window // 2), self.window // 2)

    def _mask(self, b, h, i, j):
        d = i - j
        if self.causal:
            return (d >= 0) & (d < self.window)
        return d.abs() <= self.window // 2

    def cache_keep(self, kv_pos, next_pos):
        return kv_pos > next_pos - self.window if self.causal else super().cache_keep(kv_pos, next_pos)

    def _params(self):
        return {"window": self.window, "causal": self.causal}


@register_pattern("causal")
class Causal(_Band):
    """Causal (decoder) attention: query i attends key j iff ``j <= i``."""

    is_causal = True

    def _bounds(self):
        return (0, math.inf)

    def _mask(self, b, h, i, j):
        return j <= i

    def _params(self):
        return {}


@register_pattern("block_local")
class BlockLocal(Pattern):
    """Block-diagonal attention: query i attends key j iff ``i // block == j // block``."""

    def __init__(self, block: int = 128):
        self.block = check_positive_int("block", block)
        self.geometry = (self.block,)

    def _mask(self, b, h, i, j):
        return torch.div(i, self.block, rounding_mode="floor") == torch.div(
            j, self.block, rounding_mode="floor"
        )

    def _layout(self, q_len, kv_len, c):
        off = kv_len - q_len
        seg_q = torch.div(torch.arange(q_len) + off, self.block, rounding_mode="floor")
        seg_k = torch.div(torch.arange(kv_len), self.block, rounding_mode="floor")
        layout = segment_layout(seg_q, seg_k, c)
        if off == 0 and q_len == kv_len and c == self.block:
            layout.band = (0, 0)
        return layout

    def _plan(self, q_len, kv_len, block):
        layout = self._layout(q_len, kv_len, block)
        return Plan([Component(layout, self._mask, q_offset=kv_len - q_len, name=self.__name__)])

    def _original_layout(self, q_len, kv_len, block):
        return self._layout(q_len, kv_len, block)

    def cache_keep(self, kv_pos, next_pos):
        return torch.div(kv_pos, self.block, rounding_mode="floor") >= next_pos // self.block

    def _params(self):
        return {"block": self.block}


def residue_order(n: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows sorted by (position % d, position // d) and the class id of each sorted row.

    In this order every residue class is one contiguous run, which turns "same class" rules
    (Child et al.'s strided columns, dilation) into block-diagonal structure.
    """
    pos = torch.arange(n)
    perm = torch.argsort(pos % d * n + pos)
    return perm, perm % d


@register_pattern("dilated")
class Dilated(Pattern):
    """Dilated sliding window.

    Bidirectional: query i attends key j iff ``|i - j| <= (window // 2) * dilation`` and
    ``(i - j) % dilation == 0``. Causal: ``0 <= i - j <= (window - 1) * dilation`` and
    ``(i - j) % dilation == 0``. Executed as a plain window inside each residue class.
    """

    def __init__(self, window: int = 512, dilation: int = 2, causal: bool = False):
        self.window = check_positive_int("window", window)
        self.dilation = check_positive_int("dilation", dilation)
        self.causal = check_bool("causal", causal)
        self.is_causal = self.causal
        self.translation_invariant = True

    def _reach(self):
        return (
            (0, (self.window - 1) * self.dilation)
            if self.causal
            else (
                -(self.window // 2) * self.dilation,
                (self.window // 2) * self.dilation,
            )
        )

    def _mask(self, b, h, i, j):
        d = i - j
        lo, hi = self._reach()
        return (d >= lo) & (d <= hi) & (torch.remainder(d, self.dilation) == 0)

    def _plan(self, q_len, kv_len, block):
        lo, hi = self._reach()
        if self.dilation == 1 or q_len != kv_len:
            # a band in position order, the residue rule checked inside the tiles
            layout = band_layout(lo, hi, q_len, kv_len, block, q_offset=kv_len - q_len)
            layout.full &= self.dilation == 1
            return Plan(
                [
                    Component(
                        layout,
                        self._mask,
                        q_offset=kv_len - q_len,
                        translation_invariant=True,
                        name=self.__name__,
                    )
                ]
            )
        perm, cls = residue_order(q_len, self.dilation)
        # within one class consecutive rows are `dilation` positions apart: a band of window rows
        layout = band_layout(lo // self.dilation, hi // self.dilation, q_len, kv_len, block)
        c = block
        # A band tile is full only if query and key tiles sit in one class (no class boundary).
        first = cls[torch.clamp(torch.arange(layout.num_q_blocks) * c, max=q_len - 1)]
        last = cls[torch.clamp(torch.arange(layout.num_q_blocks) * c + c - 1, max=q_len - 1)]
        kb = layout.kv_index[0, 0].clamp(min=0)
        kfirst = cls[torch.clamp(kb * c, max=kv_len - 1)]
        klast = cls[torch.clamp(kb * c + c - 1, max=kv_len - 1)]
        same = (first == last)[:, None] & (kfirst == first[:, None]) & (klast == first[:, None])
        layout.full = layout.full & same[None, None] & (kb * c + c - 1 < kv_len)[None, None]
        idx = perm[None, None]
        # key offsets j - i in [-hi, -lo] positions: [-hi, -lo] / dilation rows of the class
        band = (-hi // self.dilation, -lo // self.dilation) if q_len % self.dilation == 0 else None
        return Plan(
            [Component(layout, self._mask, q_index=idx, k_index=idx, class_band=band, name=self.__name__)]
        )

    def _original_layout(self, q_len, kv_len, block):
        lo, hi = self._reach()
        layout = band_layout(lo, hi, q_len, kv_len, block, q_offset=kv_len - q_len)
        layout.full &= self.dilation == 1
        layout.band = layout.band if self.dilation == 1 else None
        return layout

    def cache_keep(self, kv_pos, next_pos):
        if not self.causal:
            return super().cache_keep(kv_pos, next_pos)
        return kv_pos >= next_pos - (self.window - 1) * self.dilation

    def _params(self):
        return {"window": self.window, "dilation": self.dilation, "causal": self.causal}


__all__ = ["BlockLocal", "Causal", "Dilated", "SlidingWindow", "residue_order", "BlockLayout"]
