"""Child et al. (2019), "Generating Long Sequences with Sparse Transformers": strided and fixed."""

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
    diagonal_layout,
    merge_layouts,
    register_pattern,
    segment_layout,
)
from .local import residue_order


def _floor(x, s):
    return torch.div(x, s, rounding_mode="floor")


@register_pattern("strided")
class Strided(Pattern):
    """Strided attention (Child et al.).

    Causal: query i attends key j iff ``j <= i`` and (``i - j < stride`` or ``(i - j) % stride == 0``).
    Bidirectional: iff ``|i - j| < stride`` or ``(i - j) % stride == 0``.
    Executed as a local band plus the strided columns, which become contiguous per residue class.
    """

    def __init__(self, stride: int = 128, causal: bool = True):
        self.stride = check_positive_int("stride", stride)
        self.causal = check_bool("causal", causal)
        self.is_causal = self.causal
        self.translation_invariant = True

    def _local_bounds(self):
        s = self.stride
        return (0, s - 1) if self.causal else (-(s - 1), s - 1)

    def _local(self, b, h, i, j):
        lo, hi = self._local_bounds()
        d = i - j
        return (d >= lo) & (d <= hi)

    def _columns(self, b, h, i, j):
        d = i - j
        on = torch.remainder(d, self.stride) == 0
        return on & (d > 0) if self.causal else on & (d != 0)

    def _mask(self, b, h, i, j):
        return self._local(b, h, i, j) | self._columns(b, h, i, j)

    def _plan(self, q_len, kv_len, block):
        lo, hi = self._local_bounds()
        off = kv_len - q_len
        local = Component(
            band_layout(lo, hi, q_len, kv_len, block, q_offset=off),
            self._local,
            q_offset=off,
            translation_invariant=True,
            name=f"{self.__name__}_local",
        )
        if q_len != kv_len:
            cols = Component(
                self._columns_layout(q_len, kv_len, block),
                self._columns,
                q_offset=off,
                name=f"{self.__name__}_columns",
            )
            return Plan([local, cols])
        perm, cls = residue_order(q_len, self.stride)
        m = q_len // self.stride  # rows per class when the classes are equal: earlier rows of a class
        band = (-(m - 1), -1) if self.causal and q_len % self.stride == 0 and m > 1 else None
        layout = segment_layout(cls, cls, block, causal="strict" if self.causal else None)
        if not self.causal:  # the diagonal (i == j) belongs to the local part
            qb = torch.arange(layout.num_q_blocks)[:, None]
            layout.full &= layout.kv_index != qb
        idx = perm[None, None]
        return Plan(
            [
                local,
                Component(
                    layout,
                    self._columns,
                    q_index=idx,
                    k_index=idx,
                    class_band=band,
                    name=f"{self.__name__}_columns",
                ),
            ]
        )

    def _columns_layout(self, q_len, kv_len, block):
        s, c = self.stride, block
        off = kv_len - q_len
        if off:  # decoding: every earlier tile may hold a column; the rule is checked inside
            layout = band_layout(1 if self.causal else -math.inf, math.inf, q_len, kv_len, c, q_offset=off)
            layout.full[:] = False
            return layout

        def keep(d):  # some nonzero multiple of s in the tile's difference range (d = qb - kb)
            lo, hi = d * c - (c - 1), d * c + (c - 1)
            pos = (hi >= 1) & (_floor(hi, s) >= -_floor(-lo.clamp(min=1), s))
            neg = (lo <= -1) & (_floor(hi.clamp(max=-1), s) >= -_floor(-lo, s))
            return pos if self.causal else pos | neg

        return diagonal_layout(keep, lambda d: torch.zeros_like(d, dtype=torch.bool), q_len, kv_len, c)

    def _original_layout(self, q_len, kv_len, block):
        lo, hi = self._local_bounds()
        local = band_layout(lo, hi, q_len, kv_len, block, q_offset=kv_len - q_len)
        out = merge_layouts(local, self._columns_layout(q_len, kv_len, block))
        out.band = None
        return out

    def _params(self):
        return {"stride": self.stride, "causal": self.causal}


@register_pattern("fixed")
class Fixed(Pattern):
    """Fixed attention (Child et al.).

    Query i attends key j iff ``i // block == j // block`` or ``j % block >= block - summary``
    (the last ``summary`` positions of every block summarise it); with ``causal`` also ``j <= i``.
    Executed as block-local attention plus attention to the gathered summary positions.
    """

    def __init__(self, block: int = 128, summary: int = 8, causal: bool = True):
        self.block = check_positive_int("block", block)
        self.summary = check_positive_int("summary", summary)
        if self.summary > self.block:
            raise ValueError(f"summary must be <= block, got summary={summary}, block={block}")
        self.causal = check_bool("causal", causal)
        self.is_causal = self.causal
        self.geometry = (self.block,)

    def _same_block(self, b, h, i, j):
        m = _floor(i, self.block) == _floor(j, self.block)
        return m & (j <= i) if self.causal else m

    def _summary(self, b, h, i, j):
        is_sum = torch.remainder(j, self.block) >= self.block - self.summary
        bi, bj = _floor(i, self.block), _floor(j, self.block)
        return is_sum & (bj < bi) if self.causal else is_sum & (bj != bi)

    def _mask(self, b, h, i, j):
        return self._same_block(b, h, i, j) | self._summary(b, h, i, j)

    def _local_layout(self, q_len, kv_len, block):
        off = kv_len - q_len
        seg_q = _floor(torch.arange(q_len) + off, self.block)
        seg_k = _floor(torch.arange(kv_len), self.block)
        if self.causal and off == 0:
            return segment_layout(seg_q, seg_k, block, causal="inclusive")
        layout = segment_layout(seg_q, seg_k, block)
        if self.causal:
            layout.full[:] = False
        return layout

    def _summary_positions(self, kv_len):
        j = torch.arange(kv_len)
        return j[torch.remainder(j, self.block) >= self.block - self.summary]

    def _plan(self, q_len, kv_len, block):
        off = kv_len - q_len
        local = Component(
            self._local_layout(q_len, kv_len, block),
            self._same_block,
            q_offset=off,
            name=f"{self.__name__}_local",
        )
        keys = self._summary_positions(kv_len)
        c, l, s = block, self.block, self.summary
        nqb, nkb = math.ceil(q_len / c), math.ceil(max(len(keys), 1) / c)
        first = torch.arange(nqb) * c + off  # first and last position of each query block
        last = torch.clamp(first + c - 1, max=kv_len - 1)
        kb = torch.arange(nkb)
        tile_lo, tile_hi = kb * c, torch.clamp(kb * c + c, max=len(keys))  # compact key rows
        if self.causal:  # row i may see compact keys m < (i // l) * s
            hi_cnt, lo_cnt = (_floor(last, l) * s)[:, None], (_floor(first, l) * s)[:, None]
            kept = tile_lo[None] < hi_cnt
            full = (tile_hi[None] <= lo_cnt) & (tile_hi - tile_lo == c)[None]
        else:  # all but the summary keys of the row's own block
            ex_lo, ex_hi = (_floor(first, l) * s)[:, None], ((_floor(last, l) + 1) * s)[:, None]
            kept = torch.ones(nqb, nkb, dtype=torch.bool)
            full = ((tile_hi[None] <= ex_lo) | (tile_lo[None] >= ex_hi)) & (tile_hi - tile_lo == c)[None]
        kept &= len(keys) > 0
        order = torch.argsort((~kept).to(torch.int8), dim=-1, stable=True)
        idx = torch.where(kept, kb[None].expand(nqb, -1), -1).gather(-1, order)
        full = (full & kept).gather(-1, order)
        width = max(int(kept.sum(-1).max()), 1)
        layout = BlockLayout(c, nqb, nkb, idx[None, None, :, :width], full[None, None, :, :width])
        if not len(keys):
            return Plan([local])
        summary = Component(
            layout, self._summary, k_index=keys[None, None], q_offset=off, name=f"{self.__name__}_summary"
        )
        return Plan([local, summary])

    def _original_layout(self, q_len, kv_len, block):
        off = kv_len - q_len
        rest = band_layout(1 if self.causal else -math.inf, math.inf, q_len, kv_len, block, q_offset=off)
        rest.full[:] = False
        out = merge_layouts(self._local_layout(q_len, kv_len, block), rest)
        out.band = None
        return out

    def cache_keep(self, kv_pos, next_pos):
        """Future queries see their own block and the summary positions of earlier blocks."""
        if not self.causal:
            return super().cache_keep(kv_pos, next_pos)
        same = _floor(kv_pos, self.block) >= next_pos // self.block
        return same | (torch.remainder(kv_pos, self.block) >= self.block - self.summary)

    def _params(self):
        return {"block": self.block, "summary": self.summary, "causal": self.causal}


__all__ = ["Fixed", "Strided"]
