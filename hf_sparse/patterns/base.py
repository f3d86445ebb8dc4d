"""The pattern language: what a pattern is, how it is planned for the kernels, and how patterns compose.

A pattern answers one question: may query position ``i`` attend key position ``j``? Every pattern
gives that answer three ways that always agree:

* ``mask_mod(b, h, q_idx, kv_idx)``: the rule, vectorised over index tensors (FlexAttention and
  transformers ``masking_utils`` signature);
* ``dense_mask(q_len)``: the rule materialised (only for tests, plots and small inputs);
* ``plan(q_len, block)``: how the block-sparse kernels execute it, as a list of disjoint
  :class:`Component` s, each a block layout built analytically (never by evaluating n^2 pairs),
  possibly in a permuted order of positions (Child et al.'s strided attention, dilation and LSH
  buckets become contiguous after a permutation).

Positions: with ``q_len < kv_len`` (decoding with a cache) query ``i`` sits at position
``kv_len - q_len + i``; every rule is written in positions.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch

MaskMod = Callable[..., torch.Tensor]

# ----------------------------------------------------------------------------- block layouts


@dataclass
class BlockLayout:
    """Which key blocks each query block may see, in some order of positions.

    ``kv_index[b, h, qb, :]`` lists the key blocks of query block ``qb`` (ascending, ``-1`` = none);
    the leading two dims are 1 when the layout is the same for every batch element / head.
    ``full`` marks blocks whose every (query, key) pair is allowed, so no mask is evaluated there.
    ``band = (lo, hi)`` says that query block ``qb`` sees exactly key blocks ``qb+lo .. qb+hi``
    (clipped to the sequence): the kernels then use zero-copy strided views instead of gathers.
    """

    block: int
    num_q_blocks: int
    num_kv_blocks: int
    kv_index: torch.Tensor  # (Bl, Hl, nqb, K) int64
    full: torch.Tensor  # (Bl, Hl, nqb, K) bool
    band: tuple[int, int] | None = None

    @property
    def max_blocks(self) -> int:
        return self.kv_index.shape[-1]

    def num_kept(self) -> int:
        """Number of (query block, key block) tiles kept, summed over the leading dims."""
        return int((self.kv_index >= 0).sum())

    def to(self, device) -> BlockLayout:
        return replace(self, kv_index=self.kv_index.to(device), full=self.full.to(device))

    def to_dense(self, full: bool = False) -> torch.Tensor:
        """(Bl, Hl, nqb, nkb) bool block map of the kept tiles (``full=True``: of the full ones); block-level,
        small: for plots, tests and reasoning over whole layouts."""
        Bl, Hl, nqb, _ = self.kv_index.shape
        out = torch.zeros(Bl, Hl, nqb, self.num_kv_blocks + 1, dtype=torch.bool, device=self.kv_index.device)
        idx = self.kv_index.clone()
        idx[idx < 0] = self.num_kv_blocks
        out.scatter_(-1, idx, self.full.expand_as(idx) if full else True)
        return out[..., : self.num_kv_blocks]


def layout_from_lists(
    rows: Sequence[Sequence[int]], full_rows: Sequence[Sequence[bool]], block: int, num_kv_blocks: int
) -> BlockLayout:
    """Build a layout from per-query-block python lists (used by the analytic factories)."""
    k = max([len(r) for r in rows] + [1])
    idx = torch.full((1, 1, len(rows), k), -1, dtype=torch.long)
    full = torch.zeros((1, 1, len(rows), k), dtype=torch.bool)
    for qb, (r, f) in enumerate(zip(rows, full_rows)):
        if r:
            order = sorted(range(len(r)), key=r.__getitem__)
            idx[0, 0, qb, : len(r)] = torch.tensor([r[o] for o in order])
            full[0, 0, qb, : len(r)] = torch.tensor([f[o] for o in order])
    return BlockLayout(block, len(rows), num_kv_blocks, idx, full)


def band_layout(
    lo_diff: float, hi_diff: float, q_len: int, kv_len: int, block: int, q_offset: int = 0
) -> BlockLayout:
    """Layout of ``lo_diff <= pos_i - pos_j <= hi_diff`` (a diagonal band; bounds may be +-inf).

    Query row r sits at position ``q_offset + r``. Built in O(kept tiles): tile (qb, kb) holds the
    differences ``q_offset + (qb - kb) * c + [-(c-1), c-1]``; it is kept if that meets the band and
    full if it lies inside it.
    """
    c = block
    nqb, nkb = math.ceil(q_len / c), math.ceil(kv_len / c)
    qb = torch.arange(nqb)[:, None]
    # kb range: q_offset + (qb-kb)*c - (c-1) <= hi  and  q_offset + (qb-kb)*c + (c-1) >= lo
    if hi_diff == math.inf:
        lo_kb = torch.zeros_like(qb)
    else:
        lo_kb = qb + torch.tensor(math.ceil((q_offset - (c - 1) - hi_diff) / c))
    if lo_diff == -math.inf:
        hi_kb = torch.full_like(qb, nkb - 1)
    else:
        hi_kb = qb + torch.tensor(math.floor((q_offset + (c - 1) - lo_diff) / c))
    lo_kb, hi_kb = lo_kb.clamp(min=0), hi_kb.clamp(max=nkb - 1)
    width = max(int((hi_kb - lo_kb + 1).clamp(min=0).max()) if nqb else 0, 1)
    kb = lo_kb + torch.arange(width)[None, :]
    kept = kb <= hi_kb
    d = q_offset + (qb - kb) * c
    full = kept & (d - (c - 1) >= lo_diff) & (d + (c - 1) <= hi_diff)
    kv_index = torch.where(kept, kb, torch.full_like(kb, -1))
    band = None
    if q_len == kv_len and q_offset == 0 and math.isfinite(hi_diff) and math.isfinite(lo_diff):
        band = (math.ceil((-(c - 1) - hi_diff) / c), math.floor(((c - 1) - lo_diff) / c))
    return BlockLayout(c, nqb, nkb, kv_index[None, None], full[None, None], band=band)


def diagonal_layout(keep_diag, full_diag, q_len: int, kv_len: int, block: int) -> BlockLayout:
    """Layout whose kept tiles depend only on d = qb - kb: ``keep_diag(d)``/``full_diag(d)`` on a
    LongTensor of block differences. O(number of block diagonals + kept tiles)."""
    c = block
    nqb, nkb = math.ceil(q_len / c), math.ceil(kv_len / c)
    d = torch.arange(-(nkb - 1), nqb)
    keep = keep_diag(d)
    ds = d[keep]
    full = full_diag(ds) if ds.numel() else torch.zeros(0, dtype=torch.bool)
    qb = torch.arange(nqb)[:, None]
    kb = qb - ds[None, :]  # (nqb, nd) descending in d -> ascending kb after flip
    kb, full = kb.flip(-1), full.flip(-1)[None, :].expand_as(kb)
    ok = (kb >= 0) & (kb < nkb)
    # compact each row: kept entries first (ascending), -1 after
    order = torch.argsort((~ok).to(torch.int8), dim=-1, stable=True)
    kb, ok, full = kb.gather(-1, order), ok.gather(-1, order), full.gather(-1, order)
    width = max(int(ok.sum(-1).max()) if nqb else 0, 1)
    kb, ok, full = kb[:, :width], ok[:, :width], full[:, :width]
    kv_index = torch.where(ok, kb, torch.full_like(kb, -1))
    return BlockLayout(c, nqb, nkb, kv_index[None, None], (full & ok)[None, None])


def segment_layout(
    q_seg: torch.Tensor, k_seg: torch.Tensor, block: int, causal: str | None = None
) -> BlockLayout:
    """Layout of "row i may see key row j iff they are in the same segment" where segments are
    contiguous runs of equal, non-decreasing ids (``q_seg``: (..., nq), ``k_seg``: (..., nk)).

    ``causal``: None, ``"strict"`` (key row < query row) or ``"inclusive"`` (<=), within a segment,
    for orders where rows of one segment keep their position order (residue classes). Tiles are
    marked full only when both sides lie in one segment and the causal condition holds for all pairs.
    Used for Child et al.'s strided columns, dilation classes and LSH buckets after sorting.
    """
    c = block
    lead = q_seg.shape[:-1]
    nq, nk = q_seg.shape[-1], k_seg.shape[-1]
    nqb, nkb = math.ceil(nq / c), math.ceil(nk / c)

    def take(seg, idx):  # seg[..., idx] with idx (..., m) broadcast over the leading dims
        flat = (
            idx.expand(*lead, *idx.shape[-2:]).flatten(-2)
            if idx.dim() > 1
            else idx.expand(*lead, idx.shape[-1])
        )
        return seg.gather(-1, flat).view(*lead, *idx.shape[-2:]) if idx.dim() > 1 else seg.gather(-1, flat)

    first_row = torch.arange(nqb) * c
    last_row = torch.clamp(first_row + c - 1, max=nq - 1)
    q_first, q_last = take(q_seg, first_row), take(q_seg, last_row)  # (..., nqb)
    # key row range of a segment id: [searchsorted left, right)
    k_lo = torch.searchsorted(k_seg.contiguous(), q_first.contiguous(), right=False)
    if causal is None:
        k_hi = torch.searchsorted(k_seg.contiguous(), q_last.contiguous(), right=True)
    else:
        k_hi = torch.minimum(
            last_row + (1 if causal == "inclusive" else 0),
            torch.searchsorted(k_seg.contiguous(), q_last.contiguous(), right=True),
        )
    lo_kb = k_lo // c
    hi_kb = (k_hi - 1).clamp(min=0) // c
    empty = k_hi <= k_lo
    width = max(int((hi_kb - lo_kb + 1).max()) if nqb else 1, 1)
    kb = lo_kb[..., None] + torch.arange(width)
    kept = (kb <= hi_kb[..., None]) & ~empty[..., None] & (kb < nkb)
    # full tiles: one segment on both sides (+ causal margin)
    k_first = take(k_seg, torch.clamp(kb * c, max=nk - 1))
    k_last = take(k_seg, torch.clamp(kb * c + c - 1, max=nk - 1))
    one_q = (q_first == q_last) & (last_row - first_row == c - 1)
    full = kept & one_q[..., None] & (k_first == q_first[..., None]) & (k_last == q_first[..., None])
    full = full & (kb * c + c - 1 < nk)
    if causal is not None:
        margin = 1 if causal == "strict" else 0
        full = full & (kb * c + c - 1 <= first_row[:, None] - margin)
    kv_index = torch.where(kept, kb, torch.full_like(kb, -1))
    while kv_index.dim() < 4:
        kv_index, full = kv_index.unsqueeze(0), full.unsqueeze(0)
    return BlockLayout(c, nqb, nkb, kv_index, full)


def pattern_block_layout(
    table: torch.Tensor, pblock: int, q_len: int, kv_len: int, block: int, q_offset: int = 0
) -> BlockLayout:
    """Layout at kernel block ``block`` of "query position i attends key position j iff ``j // pblock`` is
    listed in ``table[..., i // pblock, :]``".

    ``table``: (Bl, Hl, nqb_p, K) pattern-block indices (-1 = none) over the positions; query row r sits at
    position ``q_offset + r``. Any kernel block: a tile is kept where a pattern block it touches lists one it
    touches, and full where it lies in one query pattern block and one listed key pattern block (with ``block``
    dividing ``pblock`` and no offset, every kept tile); the tiles that straddle pattern blocks are partial
    (the rule decides inside). O(kept tiles).
    """
    c, p = block, pblock
    nqb, nkb = math.ceil(q_len / c), math.ceil(kv_len / c)
    first = q_offset + torch.arange(nqb) * c  # first and last position of each query tile
    last = q_offset + torch.clamp(torch.arange(nqb) * c + c, max=q_len) - 1
    r_lo, r_hi = first // p, last // p
    m_q = max(int((r_hi - r_lo).max()) + 1 if nqb else 1, 1)
    r = r_lo[:, None] + torch.arange(m_q)  # (nqb, m_q) pattern query blocks a tile touches
    r_ok = r <= r_hi[:, None]
    # (Bl, Hl, nqb, m_q, K) listed key pattern blocks; past the table, its last row (as the rule reads it)
    kbp = table[..., r.clamp(max=max(table.shape[-2] - 1, 0)), :]
    kbp = torch.where(r_ok[..., None], kbp, torch.full_like(kbp, -1)).flatten(-2)  # (.., nqb, m_q*K)
    m_k = -(-p // c) + 1  # kernel key tiles a pattern block touches, at most
    kb = (kbp.clamp(min=0) * p // c)[..., None] + torch.arange(m_k)  # (.., nqb, m_q*K, m_k)
    ok = (kbp >= 0)[..., None] & (kb <= ((kbp.clamp(min=0) + 1) * p - 1)[..., None] // c) & (kb < nkb)
    inside = (kb * c >= (kbp * p)[..., None]) & (kb * c + c <= ((kbp + 1) * p)[..., None])
    full = ok & inside & (r_lo == r_hi)[:, None, None]
    # one entry per kept tile, full if any entry says so; -1 slots last
    key = torch.where(ok, kb, torch.full_like(kb, nkb)).flatten(-2) * 2 + (~full).flatten(-2).long()
    key, _ = key.sort(dim=-1)
    kb, full = key // 2, key % 2 == 0
    dup = torch.zeros_like(kb, dtype=torch.bool)
    dup[..., 1:] = kb[..., 1:] == kb[..., :-1]
    key, _ = (torch.where(dup, torch.full_like(kb, nkb), kb) * 2 + (~full).long()).sort(dim=-1)
    kb, full = key // 2, key % 2 == 0
    width = max(int((kb < nkb).sum(-1).max()) if kb.numel() else 0, 1)
    kb, full = kb[..., :width], full[..., :width]
    ok = kb < nkb
    return BlockLayout(c, nqb, nkb, torch.where(ok, kb, torch.full_like(kb, -1)), full & ok)


def full_layout(q_len: int, kv_len: int, block: int, full: bool = True) -> BlockLayout:
    """Every query block sees every key block."""
    c = block
    nqb, nkb = math.ceil(q_len / c), math.ceil(kv_len / c)
    idx = torch.arange(nkb).expand(1, 1, nqb, nkb).clone()
    return BlockLayout(c, nqb, nkb, idx, torch.full_like(idx, full, dtype=torch.bool))


def merge_layouts(a: BlockLayout, b: BlockLayout) -> BlockLayout:
    """Union of two layouts over the same positions (kept tiles and their full flags)."""
    if a.block != b.block or a.num_q_blocks != b.num_q_blocks or a.num_kv_blocks != b.num_kv_blocks:
        raise ValueError("cannot merge layouts of different geometry")
    Bl, Hl = max(a.kv_index.shape[0], b.kv_index.shape[0]), max(a.kv_index.shape[1], b.kv_index.shape[1])
    nkb = a.num_kv_blocks
    idx = torch.cat([a.kv_index.expand(Bl, Hl, -1, -1), b.kv_index.expand(Bl, Hl, -1, -1)], dim=-1)
    full = torch.cat([a.full.expand(Bl, Hl, -1, -1), b.full.expand(Bl, Hl, -1, -1)], dim=-1)
    # A tile kept by both is full if either says so; sort, drop duplicates and -1s.
    key = torch.where(idx < 0, torch.full_like(idx, nkb), idx) * 2 + (~full).long()
    key, _ = key.sort(dim=-1)
    kb, not_full = key // 2, key % 2
    dup = torch.zeros_like(kb, dtype=torch.bool)
    dup[..., 1:] = kb[..., 1:] == kb[..., :-1]
    kb = torch.where(dup | (kb >= nkb), torch.full_like(kb, nkb), kb)
    full = (not_full == 0) & ~dup
    key2, order = (kb * 2 + (~full).long()).sort(dim=-1)
    kb, full = key2 // 2, (key2 % 2 == 0)
    width = max(int((kb < nkb).sum(-1).max()), 1)
    kb, full = kb[..., :width], full[..., :width]
    full = full & (kb < nkb)
    kb = torch.where(kb >= nkb, torch.full_like(kb, -1), kb)
    band = a.band if a.band is not None and a.band == b.band else None
    if a.band is not None and b.band is not None and band is None:
        band = (min(a.band[0], b.band[0]), max(a.band[1], b.band[1]))
        contiguous = (kb[..., 1:] - kb[..., :-1] == 1) | (kb[..., 1:] < 0)
        band = band if bool(contiguous.all()) else None
    return BlockLayout(a.block, a.num_q_blocks, nkb, kb, full, band=band)


def intersect_layouts(a: BlockLayout, b: BlockLayout) -> BlockLayout:
    """Tiles kept by both layouts (full where both are full)."""
    nkb = a.num_kv_blocks
    Bl, Hl = max(a.kv_index.shape[0], b.kv_index.shape[0]), max(a.kv_index.shape[1], b.kv_index.shape[1])
    ai, af = a.kv_index.expand(Bl, Hl, -1, -1), a.full.expand(Bl, Hl, -1, -1)
    bi, bf = b.kv_index.expand(Bl, Hl, -1, -1), b.full.expand(Bl, Hl, -1, -1)
    match = (ai[..., :, None] == bi[..., None, :]) & (ai[..., :, None] >= 0)  # (.., Ka, Kb)
    keep = match.any(-1)
    full = af & (match & bf[..., None, :]).any(-1)
    kb = torch.where(keep, ai, torch.full_like(ai, nkb))
    key, order = (kb * 2 + (~full).long()).sort(dim=-1)
    kb, full = key // 2, key % 2 == 0
    width = max(int((kb < nkb).sum(-1).max()), 1)
    kb, full = kb[..., :width], full[..., :width] & (kb[..., :width] < nkb)
    kb = torch.where(kb >= nkb, torch.full_like(kb, -1), kb)
    band = None
    if a.band is not None and b.band is not None:
        band = (max(a.band[0], b.band[0]), min(a.band[1], b.band[1]))
        if band[0] > band[1]:
            band = None
    return BlockLayout(a.block, a.num_q_blocks, nkb, kb, full, band=band)


# ----------------------------------------------------------------------------- components / plans


def kept(obj, key, make):
    """``make()``, kept on ``obj`` (a pattern or a component) under ``key`` (the last 8 keys)."""
    memo = obj.__dict__.setdefault("_derived", {})
    if key not in memo:
        if len(memo) >= 8:
            memo.pop(next(iter(memo)))
        memo[key] = make()
    return memo[key]


@dataclass
class Component:
    """One disjoint piece of a pattern, executed by one kernel call.

    The component works in its own order of rows: its query row ``r`` is row ``q_index[..., r]`` of
    the query tensor (identity when ``None``), its key row ``s`` is row ``k_index[..., s]`` of the
    key tensor. Query row ``x`` of the tensor sits at position ``q_offset + x``; key row ``y`` at
    position ``y``. ``layout`` is over blocks of the component's rows. The exact allowed set is:
    kept tiles, and inside tiles not marked full, ``mask(b, h, pos_i, pos_j)``.
    ``translation_invariant``: identity order and a mask that depends only on ``pos_i - pos_j``, so
    one bias tile serves every interior block of a band.
    """

    layout: BlockLayout
    mask: MaskMod
    q_index: torch.Tensor | None = None  # (Bl, Hl, nq) rows of the query tensor, or None
    k_index: torch.Tensor | None = None  # (Bl, Hl, nk) rows of the key tensor, or None
    q_valid: torch.Tensor | None = None  # (Bl, nq) component rows that exist (ragged index sets)
    k_valid: torch.Tensor | None = None  # (Bl, nk)
    q_offset: int = 0
    translation_invariant: bool = False
    # (lo, hi): q_index = k_index = ``residue_order`` of n rows with equal classes (n % d == 0), and the
    # rule is exactly "same class and lo <= s - r <= hi" for component rows r, s (Strided's causal columns,
    # Dilated): a band inside each class, which the compiled class-band kernel runs without tables
    class_band: tuple[int, int] | None = None
    # (lo, hi), each (Bl, Hl, nq) int64: the rule is exactly "lo[r] <= s < hi[r]" for component rows r, s
    # (LSH's first round in bucket order: every row's keys are one contiguous run), which the compiled
    # range kernel runs without tables
    key_range: tuple[torch.Tensor, torch.Tensor] | None = None
    name: str = ""
    # the rule itself differs between batch elements / heads (per-batch global tokens, LSH buckets)
    batch_dependent: bool = False
    head_dependent: bool = False

    @property
    def identity(self) -> bool:
        return self.q_index is None and self.k_index is None

    def tile_allowed(self, b: int, h: int, qbs: torch.Tensor, q_len: int, kv_len: int) -> torch.Tensor:
        """:func:`tile_allowed` of this component (for modules that ``patterns`` imports, such as ``viz``)."""
        return tile_allowed(self, b, h, qbs, q_len, kv_len)

    @property
    def per_batch_head(self) -> bool:
        """Layout or index sets differ between batch elements or heads."""
        shapes = [self.layout.kv_index.shape[:2]]
        shapes += [t.shape[:2] for t in (self.q_index, self.k_index) if t is not None]
        shapes += [t.shape[:1] + (1,) for t in (self.q_valid, self.k_valid) if t is not None]
        return any(s[0] > 1 or s[1] > 1 for s in shapes)

    def to(self, device) -> Component:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return replace(
            self,
            layout=self.layout.to(device),
            q_index=move(self.q_index),
            k_index=move(self.k_index),
            q_valid=move(self.q_valid),
            k_valid=move(self.k_valid),
            key_range=None if self.key_range is None else tuple(t.to(device) for t in self.key_range),
        )

    def restricted(self, extra: MaskMod, name: str = "", keep_full: torch.Tensor | None = None) -> Component:
        """The same component with ``mask & extra``: every tile is re-evaluated, except full tiles where
        ``keep_full`` (shaped like ``layout.full``) says ``extra`` allows every pair."""
        base = self.mask
        full = torch.zeros_like(self.layout.full) if keep_full is None else self.layout.full & keep_full
        return replace(
            self,
            mask=lambda b, h, i, j: base(b, h, i, j) & extra(b, h, i, j),
            layout=replace(self.layout, full=full),
            translation_invariant=False,
            class_band=None,
            key_range=None,
            name=name or self.name,
        )


@dataclass
class Plan:
    """How the kernels run a pattern on one input: disjoint components (or one plan per head)."""

    components: list[Component] = field(default_factory=list)
    per_head: list[Plan] | None = None  # PerHead: plan h is for head h
    q_len: int = 0
    kv_len: int = 0

    def num_pairs(self) -> int:
        """Exact number of allowed (query, key) pairs, counted tile by tile (O(kept pairs)); of a per-head
        plan, summed over its heads (the pairs every head computes: what FLOP counts need)."""
        if self.per_head is not None:
            return sum(p.num_pairs() for p in self.per_head)
        return sum(count_component_pairs(c, self.q_len, self.kv_len) for c in self.components)


def _pick(t: torch.Tensor, b: int, h: int | None = None) -> torch.Tensor:
    t = t[min(b, t.shape[0] - 1)]
    return t if h is None else t[min(h, t.shape[0] - 1)]


def tile_allowed(comp: Component, b: int, h: int, qbs: torch.Tensor, q_len: int, kv_len: int) -> torch.Tensor:
    """Allowed map of the kept tiles of query blocks ``qbs``: (g, c, K*c) bool (exact rule).

    ``q_len``/``kv_len``: number of rows of the query and key tensors. Reference helper used for
    counting, dense views and tests; the kernels evaluate the same thing in their own loops.
    """
    lay = comp.layout
    c = lay.block
    li, lf = _pick(lay.kv_index, b, h)[qbs], _pick(lay.full, b, h)[qbs]
    ar = torch.arange(c, device=li.device)
    rows = qbs[:, None] * c + ar  # (g, c) component rows
    cols = (li.clamp(min=0)[..., None] * c + ar).flatten(1)  # (g, K*c)
    nq = comp.q_index.shape[-1] if comp.q_index is not None else q_len
    nk = comp.k_index.shape[-1] if comp.k_index is not None else kv_len
    ok_q = rows < nq
    ok_k = (li >= 0).repeat_interleave(c, dim=1) & (cols < nk)
    if comp.q_valid is not None:
        ok_q = ok_q & _pick(comp.q_valid, b)[rows.clamp(max=nq - 1)]
    if comp.k_valid is not None:
        ok_k = ok_k & _pick(comp.k_valid, b)[cols.clamp(max=nk - 1)]
    qr = rows.clamp(max=nq - 1)
    kr = cols.clamp(max=nk - 1)
    if comp.q_index is not None:
        qr = _pick(comp.q_index, b, h)[qr]
    if comp.k_index is not None:
        kr = _pick(comp.k_index, b, h)[kr]
    allowed = comp.mask(b, h, (qr + comp.q_offset)[:, :, None], kr[:, None, :])
    allowed = allowed | lf.repeat_interleave(c, dim=1)[:, None, :]
    return allowed & ok_q[:, :, None] & ok_k[:, None, :]


def count_component_pairs(comp: Component, q_len: int, kv_len: int) -> int:
    """Exact number of pairs a component allows: its full tiles counted whole (valid rows x valid keys), the rule
    evaluated in the other kept tiles only (``tile_allowed``)."""
    lay = comp.layout
    c = lay.block
    Bl = max(
        [lay.kv_index.shape[0]]
        + [t.shape[0] for t in (comp.q_index, comp.k_index, comp.q_valid, comp.k_valid) if t is not None]
    )
    Hl = max([lay.kv_index.shape[1]] + [t.shape[1] for t in (comp.q_index, comp.k_index) if t is not None])
    nq = comp.q_index.shape[-1] if comp.q_index is not None else q_len
    nk = comp.k_index.shape[-1] if comp.k_index is not None else kv_len
    total = 0
    for b in range(Bl):
        # valid rows of each query block, valid keys of each key block
        rows, cols = torch.arange(lay.num_q_blocks * c), torch.arange(lay.num_kv_blocks * c)
        q_ok, k_ok = rows < nq, cols < nk
        if comp.q_valid is not None:
            q_ok = q_ok & _pick(comp.q_valid, b)[rows.clamp(max=nq - 1)]
        if comp.k_valid is not None:
            k_ok = k_ok & _pick(comp.k_valid, b)[cols.clamp(max=nk - 1)]
        q_rows, k_rows = q_ok.view(-1, c).sum(-1), k_ok.view(-1, c).sum(-1)  # (nqb,), (nkb,)
        for h in range(Hl):
            li, lf = _pick(lay.kv_index, b, h), _pick(lay.full, b, h) & (_pick(lay.kv_index, b, h) >= 0)
            total += int((q_rows[:, None] * k_rows[li.clamp(min=0)])[lf].sum())
            # the other kept tiles, each row's first (-1 after), evaluated by the rule
            part = torch.where((li >= 0) & ~lf, li, lay.num_kv_blocks).sort(-1).values
            width = int((part < lay.num_kv_blocks).sum(-1).max()) if part.numel() else 0
            if width == 0:
                continue
            part = torch.where(part[:, :width] < lay.num_kv_blocks, part[:, :width], -1)
            none_full = torch.zeros_like(part, dtype=torch.bool)[None, None]
            partial = replace(comp, layout=replace(lay, kv_index=part[None, None], full=none_full))
            chunk = max(1, (1 << 22) // (c * c * width))
            for s in range(0, lay.num_q_blocks, chunk):
                qbs = torch.arange(s, min(s + chunk, lay.num_q_blocks))
                total += int(tile_allowed(partial, b, h, qbs, q_len, kv_len).sum())
    return total


def plan_dense_mask(plan: Plan, B: int, H: int, q_len: int, kv_len: int) -> torch.Tensor:
    """(B, H, q_len, kv_len) allowed map assembled from a plan's tiles (tests: plan == rule).

    Also returns overlap counts > 1 as True in a second tensor so tests can check disjointness.
    """
    out = torch.zeros(B, H, q_len, kv_len, dtype=torch.int32)
    for b in range(B):
        for h in range(H):
            p = plan.per_head[h] if plan.per_head is not None else plan
            for comp in p.components:
                lay = comp.layout
                qbs = torch.arange(lay.num_q_blocks)
                allowed = tile_allowed(comp, b, h, qbs, q_len, kv_len)  # (nqb, c, K*c)
                c = lay.block
                rows = (qbs[:, None] * c + torch.arange(c)).expand(-1, -1)
                li = _pick(lay.kv_index, b, h)
                cols = (li.clamp(min=0)[..., None] * c + torch.arange(c)).flatten(1)
                nq = comp.q_index.shape[-1] if comp.q_index is not None else q_len
                nk = comp.k_index.shape[-1] if comp.k_index is not None else kv_len
                qr, kr = rows.clamp(max=nq - 1), cols.clamp(max=nk - 1)
                if comp.q_index is not None:
                    qr = _pick(comp.q_index, b, h)[qr]
                if comp.k_index is not None:
                    kr = _pick(comp.k_index, b, h)[kr]
                qq = qr[:, :, None].expand_as(allowed)[allowed]
                kk = kr[:, None, :].expand_as(allowed)[allowed]
                out[b, h].index_put_((qq, kk), torch.ones_like(qq, dtype=torch.int32), accumulate=True)
    return out


# ----------------------------------------------------------------------------- the pattern base class

_REGISTRY: dict[str, type[Pattern]] = {}


def register_pattern(name: str):
    """Class decorator: make a pattern reachable as ``patterns.get(name)`` and ``from_dict``."""
    if not isinstance(name, str) or not name or name != name.lower() or not name.replace("_", "").isalnum():
        raise ValueError(f"pattern names are lowercase identifiers, got {name!r}")

    def deco(cls):
        if name in _REGISTRY:
            raise KeyError(f"a pattern named {name!r} is already registered ({_REGISTRY[name].__name__})")
        _REGISTRY[name] = cls
        cls.type_name = name
        return cls

    return deco


def check_positive_int(name: str, value, *, allow_zero: bool = False) -> int:
    """``value`` as a plain int (a Python or numpy integer, not a bool), > 0 (or >= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    value = int(value)
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value


def check_bool(name: str, value) -> bool:
    """``value`` as a bool: a Python (or numpy) bool, else TypeError (``bool("false")`` is True)."""
    if isinstance(value, bool) or (
        type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")
    ):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {type(value).__name__} ({value!r})")


#: the seeds ``torch.Generator.manual_seed`` takes (a negative seed s is the seed 2**64 + s)
SEED_RANGE = (-(2**63), 2**64 - 1)


def check_seed(value) -> int:
    """A random generator's ``seed``: an int (Python or numpy, kept as a plain int) that
    ``torch.Generator.manual_seed`` takes."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(value).__name__} ({value!r})")
    value = int(value)
    if not SEED_RANGE[0] <= value <= SEED_RANGE[1]:
        raise ValueError(f"seed must be in [-2**63, 2**64 - 1] (torch.Generator.manual_seed), got {value}")
    return value


def check_lengths(q_len, kv_len=None, q_name: str = "q_len") -> tuple[int, int]:
    """``(q_len, kv_len)`` of an input (kv_len defaults to q_len): ints >= 0, and ``q_len <= kv_len`` (queries
    sit at the end of the keys). ``q_name``: the caller's name for q_len."""
    q_len = check_positive_int(q_name, q_len, allow_zero=True)
    kv_len = q_len if kv_len is None else check_positive_int("kv_len", kv_len, allow_zero=True)
    if q_len > kv_len:
        raise ValueError(
            f"{q_name} ({q_len}) must be <= kv_len ({kv_len}): the queries are the last {q_name} of the kv_len "
            "positions"
        )
    return q_len, kv_len


def bind_part(part, q_len, kv_len=None, *, query=None, key=None, causal: bool = False, key_valid=None):
    """``part.bind(...)`` for a part of a combination or a head of ``PerHead`` (and for a whole pattern, which
    dispatch binds the same way), told whether the pattern holding it is causal and which keys are padding
    (``key_valid``, see :meth:`Pattern.bind`); a pattern whose ``bind`` takes no ``causal`` or ``key_valid``
    keyword (one written before them) is bound without it."""
    kw = {}
    if causal and _bind_takes(type(part), "causal"):
        kw["causal"] = True
    if key_valid is not None and _bind_takes(type(part), "key_valid"):
        kw["key_valid"] = key_valid
    return part.bind(q_len, kv_len, query=query, key=key, **kw)


@functools.cache
def _bind_takes(cls, name: str) -> bool:
    params = inspect.signature(cls.bind).parameters
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


_BUILDING = "_building"  # set in a pattern's __dict__ while its __init__ runs


def _building(init):
    """``init`` with the pattern's attributes settable while it (and the ``__init__`` s it calls) runs."""

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        d = self.__dict__
        d[_BUILDING] = d.get(_BUILDING, 0) + 1
        try:
            init(self, *args, **kwargs)
        finally:
            d[_BUILDING] -= 1
            if not d[_BUILDING]:
                del d[_BUILDING]

    return __init__


class Pattern:
    """Base class of all attention patterns. Subclasses define ``_mask`` and ``_plan``.

    A pattern is immutable once built: its public attributes (the parameters of its rule) are set in
    ``__init__`` only. What dispatch derives from it (``derived``: plans, bound random blocks, block masks) is kept
    on it, and ``sparse_attention`` hands one object to every call with an equal spec, so a changed attribute
    would leave those on the old rule: build a new pattern instead. Private attributes (``_source``, ...) stay
    settable for the copies the library builds (``bind``).
    """

    type_name: str = ""
    #: every allowed pair has j <= i
    is_causal: bool = False
    #: the rule needs the sequence length (random blocks): use ``bind(n)`` before ``mask_mod``
    length_dependent: bool = False
    #: the rule needs queries and keys (LSH, top-k): use ``bind(n, query=q, key=k)``
    content_based: bool = False
    #: the rule depends only on i - j
    translation_invariant: bool = False
    #: block sizes this pattern is built from: a kernel block that divides or is a multiple of each keeps every
    #: tile inside whole pattern blocks (``block_fits``); any other runs too, the tiles that straddle a pattern
    #: block's edge partial (the rule evaluated inside)
    geometry: tuple[int, ...] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _building(cls.__dict__["__init__"])

    def __setattr__(self, name: str, value) -> None:
        self._check_mutable(name)
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._check_mutable(name)
        object.__delattr__(self, name)

    def _check_mutable(self, name: str) -> None:
        if name.startswith("_") or self.__dict__.get(_BUILDING):
            return
        raise AttributeError(
            f"cannot set {name!r} of {self!r}: patterns are immutable (what a call derives from a pattern, its plan "
            f"and block masks, is kept on it and shared by every call with an equal spec); build a new pattern, "
            f"e.g. {type(self).__name__}(...) or patterns.from_dict({{**pattern.to_dict(), {name!r}: ...}})"
        )

    # -- the rule -------------------------------------------------------------------------------
    def _mask(self, b, h, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @property
    def mask_mod(self) -> MaskMod:
        """``(b, h, q_idx, kv_idx) -> bool``: may query position q_idx attend key position kv_idx.

        A plain function of those four arguments (not a bound method, whose ``self`` FlexAttention would count
        as a fifth and take it for a ``score_mod``): ``create_block_mask(pattern.mask_mod, ...)`` and
        ``masking_utils`` take it as it is."""
        pattern = self

        def mask_mod(b, h, q_idx, kv_idx):
            pattern._check_bound("mask_mod")
            return pattern._mask(b, h, q_idx, kv_idx)

        return mask_mod

    @property
    def bound(self) -> bool:
        return not (self.length_dependent or self.content_based)

    def _check_bound(self, what: str):
        if not self.bound:
            need = "query=..., key=..." if self.content_based else "the sequence length"
            raise RuntimeError(
                f"{self!r} depends on {need}; call pattern.bind(q_len{', query=q, key=k' if self.content_based else ''})"
                f" and use the bound pattern's {what}"
            )

    def cache_keep(self, kv_pos: torch.Tensor, next_pos: int) -> torch.Tensor:
        """For incremental decoding: which cached key positions some query at a position
        ``>= next_pos`` may still attend (everything, unless a pattern knows better). A KV cache may
        drop the others without changing any future output."""
        return torch.ones_like(kv_pos, dtype=torch.bool)

    def derived(self, key, make):
        """``make()``, kept on this pattern under ``key`` (the last 8 keys): what dispatch derives from a
        pattern that is the same on every call (bound random blocks, plans, FlexAttention block masks,
        the pattern with a model's causal mask or global tokens added)."""
        return kept(self, key, make)

    def __getstate__(self) -> dict:
        """Pickled and copied without what dispatch derived from it (``derived``: plans whose masks are closures,
        which pickle cannot take); the copy derives it again on its first call."""
        return _own_fields(self)

    def to(self, device) -> Pattern:
        """The pattern with its tensors (block tables, global positions, hashes) on ``device``: what a
        compiled ``mask_mod`` must capture there (a GPU kernel cannot copy a CPU table in its mask)."""
        return _to_device(self, torch.device(device), {})

    def bind(
        self,
        q_len: int,
        kv_len: int | None = None,
        *,
        query=None,
        key=None,
        causal: bool = False,
        key_valid: torch.Tensor | None = None,
    ) -> Pattern:
        """The pattern with its data-dependent parts (random blocks, buckets) fixed for this input.

        ``causal``: the pattern is bound as a part of a causal pattern (combinations and ``PerHead`` pass
        ``causal or self.is_causal`` on to their parts through :func:`bind_part`), where positions past the
        input are the future positions of a decoder (``Global(indices=...)`` raises only outside one).
        ``key_valid``: ``(batch, kv_len)`` bool, False at padding keys (None: no padding), what
        ``sparse_attention`` gets as ``attention_mask``; content-based patterns choose from the real tokens only
        (so a padded row selects as it would alone), the others ignore it (padding keys are masked anyway)."""
        return self

    # -- execution ------------------------------------------------------------------------------
    def _plan(self, q_len: int, kv_len: int, block: int) -> Plan:
        raise NotImplementedError

    def plan(self, q_len: int, kv_len: int | None = None, block: int = 64) -> Plan:
        """Disjoint components for the block-sparse kernels (bind first if data-dependent); of the pattern bound to
        these lengths, as ``sparse_attention`` plans it (a causal pattern's global positions still to come)."""
        q_len, kv_len = check_lengths(q_len, kv_len)
        self._check_bound("plan")
        check_block(self, block)
        plan = self.bind(q_len, kv_len)._plan(q_len, kv_len, block)
        by_batch, by_head = self.varies()
        for p in [plan, *(plan.per_head or [])]:
            p.q_len, p.kv_len = q_len, kv_len
            for comp in p.components:
                comp.batch_dependent |= by_batch
                comp.head_dependent |= by_head and plan.per_head is None
        return plan

    def varies(self) -> tuple[bool, bool]:
        """Whether the rule differs between batch elements, and between heads."""
        parts = getattr(self, "parts", None)
        if parts:
            flags = [p.varies() for p in parts]
            return any(f[0] for f in flags), any(f[1] for f in flags)
        return False, False

    def block_layout(self, n: int, block: int = 128, kv_len: int | None = None) -> BlockLayout:
        """Layout over blocks of the original positions (a superset of the allowed tiles).

        This is what FlexAttention's ``BlockMask`` is built from. Components that run in a permuted
        order are mapped back to original blocks analytically by their pattern.
        """
        n, kv_len = check_lengths(n, kv_len, q_name="n")
        self._check_bound("block_layout")
        check_block(self, block)
        return self._original_layout(n, kv_len, block)

    def _original_layout(self, q_len: int, kv_len: int, block: int) -> BlockLayout:
        plan = self._plan(q_len, kv_len, block)
        layouts = [c.layout for c in plan.components if c.identity]
        if any(not c.identity for c in plan.components):
            raise NotImplementedError(f"{type(self).__name__} must map its permuted components to blocks")
        out = layouts[0]
        for lay in layouts[1:]:
            out = merge_layouts(out, lay)
        return out

    # -- materialised views ---------------------------------------------------------------------
    def dense_mask(self, q_len: int, kv_len: int | None = None, device=None) -> torch.Tensor:
        """The rule as a bool tensor ``(q_len, kv_len)`` (``(H, q, kv)`` per head, ``(B, H, q, kv)``
        for content-based patterns), of the pattern bound to these lengths as ``sparse_attention`` binds it. O(n^2):
        for tests, plots and small inputs."""
        q_len, kv_len = check_lengths(q_len, kv_len)
        self._check_bound("dense_mask")
        i = torch.arange(kv_len - q_len, kv_len, device=device)[:, None]
        j = torch.arange(kv_len, device=device)[None, :]
        return self.bind(q_len, kv_len)._dense(i, j)

    def _dense(self, i, j):
        return self._mask(0, 0, i, j).expand(i.shape[0], j.shape[1])

    def density(self, n: int) -> float:
        """Fraction of the n x n (query, key) pairs that are allowed, averaged over the heads where they
        differ (``dense_mask(n).double().mean()``); counted on the kept tiles."""
        check_positive_int("n", n)
        if self.content_based:
            raise RuntimeError(f"{self!r} is content-based: bind it to queries and keys first")
        bound = self.bind(n)
        plan = bound.plan(n, n, block=_density_block(bound, n))
        return plan.num_pairs() / float(n * n * len(plan.per_head or [plan]))

    def plot(self, n: int, path=None, ax=None, title: str | None = None, head: int = 0):
        """Heatmap of the pattern on n positions, of head ``head`` where heads differ (matplotlib Figure;
        saved to ``path`` if given, in the format its extension names: .png, .pdf, .svg, ..., and then closed
        unless drawn into the caller's ``ax``: see ``hf_sparse.viz``)."""
        from ..viz import plot_pattern

        return plot_pattern(self, n, path=path, ax=ax, title=title, head=head)

    # -- composition ----------------------------------------------------------------------------
    def __or__(self, other: Pattern) -> Pattern:
        if not isinstance(other, Pattern):
            return NotImplemented
        return _registered_class("union")(self, other)

    def __and__(self, other: Pattern) -> Pattern:
        if not isinstance(other, Pattern):
            return NotImplemented
        return _registered_class("intersection")(self, other)

    def check_combinable(self, op: str) -> None:
        """Raise ``ValueError`` if this pattern cannot be an operand of ``op`` (``"|"`` or ``"&"``).

        The hook through which a combination asks its parts; every pattern can be combined unless it
        says otherwise (``Global()`` with call-time tokens only under ``|``).
        """

    def heads(self) -> tuple[Pattern, ...] | None:
        """The pattern of each head if this pattern assigns one pattern per head, else None.

        Combinations distribute over heads through this hook and :meth:`over_heads`:
        ``PerHead([a, b]) | c`` runs as ``PerHead([a | c, b | c])``.
        """
        return None

    def over_heads(self, patterns: Sequence[Pattern]) -> Pattern:
        """A per-head pattern of this pattern's kind over ``patterns`` (one per head)."""
        raise TypeError(f"{self!r} does not assign patterns to heads")

    # -- serialisation --------------------------------------------------------------------------
    def _params(self) -> dict:
        raise NotImplementedError

    def to_dict(self) -> dict:
        """JSON-able spec; ``Pattern.from_dict(p.to_dict()) == p``. A bound pattern serialises as
        the pattern it was bound from."""
        src = getattr(self, "_source", None)
        if src is not None:
            return src.to_dict()
        return {"type": self.type_name, **self._params()}

    @staticmethod
    def from_dict(spec) -> Pattern:
        return from_dict(spec)

    def _spec(self) -> dict | None:
        """``to_dict()`` of a pattern that its spec describes completely; None for a bound pattern (its random
        blocks, buckets or tables fixed for an input) and for one its class cannot serialise."""
        if getattr(self, "_source", None) is not None or _REGISTRY.get(self.type_name) is not type(self):
            return None
        return self.to_dict()

    def __eq__(self, other):
        """Patterns built from specs are equal when their specs are (``to_dict``); a bound pattern equals a
        pattern of its type with equal fields: bound from an equal pattern, to equal tables (never the
        unbound pattern, whose other bindings differ). Unions and intersections compare up to the order and
        repeats of their operands (``compose``)."""
        if not isinstance(other, Pattern) or type(other).__eq__ is not Pattern.__eq__:
            return NotImplemented  # a combination compares itself (up to the order of its operands)
        a, b = self._spec(), other._spec()
        if a is not None or b is not None:
            return a == b
        return type(self) is type(other) and _same(_own_fields(self), _own_fields(other))

    def __hash__(self):
        spec = self._spec()
        if spec is not None:
            return hash(_frozen(spec))
        src = getattr(self, "_source", None)
        return hash((type(self).__qualname__, None if src is None else hash(src)))

    def __repr__(self):
        src = getattr(self, "_source", None)
        if src is not None:
            return f"{src!r}.bind(...)"
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"

    @property
    def __name__(self) -> str:
        """attention-gym style readable name (the default plot title): the type, then each int parameter's value,
        each bool that is not its default as the parameter's name (``not_`` before it where False), each list of
        ints as its name and values: ``sliding_window_512``, ``sliding_window_4_causal``, ``strided_4_not_causal``,
        ``global_indices_3_9``. A bound pattern is named as the pattern it was bound from."""
        src = getattr(self, "_source", None)
        if src is not None:
            return src.__name__
        defaults = inspect.signature(type(self).__init__).parameters
        words = [self.type_name]
        for key, v in self._params().items():
            if isinstance(v, bool):
                default = defaults[key].default if key in defaults else inspect.Parameter.empty
                if v is not default:
                    words.append(key if v else f"not_{key}")
            elif isinstance(v, int):
                words.append(str(v))
            elif isinstance(v, (list, tuple)) and all(type(x) is int for x in v):
                shown = [str(x) for x in v] if len(v) <= 4 else [*map(str, v[:3]), f"and_{len(v) - 3}_more"]
                words += [key, *shown]
        return "_".join(words)


def _density_block(p: Pattern, n: int) -> int:
    return next((c for c in (64, 32, 16) if block_fits(p, c)), 64)


def _frozen(x):
    """A hashable copy of a JSON-like value (dicts and lists as sorted tuples and tuples)."""
    if isinstance(x, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_frozen(v) for v in x)
    return x


def _same(a, b) -> bool:
    """Field-by-field equality of bound patterns: tensors by value, patterns by ``==``, containers item by item."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.equal(a, b.to(a.device))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _own_fields(p: Pattern) -> dict:
    """A pattern's attributes, without what dispatch derived from it (``Pattern.derived``)."""
    return {k: v for k, v in vars(p).items() if k != "_derived"}


def holds_tensors(obj) -> bool:
    """Does a pattern (or a pattern it holds) keep tensors: block tables, global positions, buckets, which
    its rule reads? The attributes ``Pattern.to`` moves."""
    if isinstance(obj, torch.Tensor):
        return True
    if isinstance(obj, Pattern):
        return any(holds_tensors(v) for v in _own_fields(obj).values())
    return isinstance(obj, (tuple, list)) and any(holds_tensors(x) for x in obj)


def _to_device(obj, device, memo):
    """Copy of a pattern (and the patterns it holds) with every tensor attribute on ``device``; shared
    objects stay shared (``memo``), and an object with nothing to move is returned as it is."""
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, torch.Tensor):
        out = obj.to(device)
    elif isinstance(obj, Pattern):
        fields = _own_fields(obj)  # what was derived stays behind
        moved = {k: _to_device(v, device, memo) for k, v in fields.items()}
        if all(moved[k] is v for k, v in fields.items()):
            out = obj
        else:
            out = object.__new__(type(obj))
            out.__dict__.update(moved)
    elif isinstance(obj, (tuple, list)) and any(isinstance(x, (Pattern, torch.Tensor)) for x in obj):
        items = [_to_device(x, device, memo) for x in obj]
        out = obj if all(a is b for a, b in zip(items, obj)) else type(obj)(items)
    else:
        out = obj
    memo[id(obj)] = out
    return out


def all_geometry(p: Pattern) -> tuple[int, ...]:
    parts = getattr(p, "parts", None)
    if parts:
        return tuple(g for q in parts for g in all_geometry(q))
    return tuple(p.geometry)


def check_block(p: Pattern, block: int):
    """A kernel block size: a positive int. Any block runs every pattern exactly (see ``Pattern.geometry``)."""
    check_positive_int("block_size", block)


def block_fits(p: Pattern, block: int) -> bool:
    """Does ``block`` divide, or is it a multiple of, each of the pattern's own block sizes (no kernel tile
    straddles a pattern block's edge)?"""
    return all(g % block == 0 or block % g == 0 for g in all_geometry(p))


def _registered_class(name: str) -> type[Pattern]:
    """The class registered under ``name`` (how ``|`` and ``&`` reach ``compose`` without importing it)."""
    if name not in _REGISTRY:
        raise RuntimeError(
            f"no pattern registered as {name!r}; import hf_sparse.patterns to register the built-ins"
        )
    return _REGISTRY[name]


def get(name: str, **kwargs) -> Pattern:
    """Build a registered pattern by name: ``get("sliding_window", window=512)``."""
    if not isinstance(name, str):
        raise TypeError(f"pattern name must be a str, got {type(name).__name__}")
    key = name.lower().replace("-", "_")
    if key not in _REGISTRY:
        raise ValueError(f"unknown pattern {name!r}; known patterns: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[key](**kwargs)


def from_dict(spec) -> Pattern:
    """Inverse of ``Pattern.to_dict``; also accepts a Pattern (returned as is) or a name."""
    if isinstance(spec, Pattern):
        return spec
    if isinstance(spec, str):
        return get(spec)
    if not isinstance(spec, dict):
        raise TypeError(f"a pattern spec must be a dict, str or Pattern, got {type(spec).__name__}")
    if "type" not in spec:
        raise ValueError(f"pattern spec {spec!r} has no 'type'")
    spec = dict(spec)
    name = spec.pop("type")
    key = str(name).lower().replace("-", "_")
    if key not in _REGISTRY:
        raise ValueError(f"unknown pattern {name!r}; known patterns: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[key]._from_params(**spec)


def registered() -> list[str]:
    return sorted(_REGISTRY)


def _from_params_default(cls, **params):
    return cls(**params)


Pattern._from_params = classmethod(_from_params_default)
