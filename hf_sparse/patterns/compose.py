"""Union (``a | b``) and intersection (``a & b``) of patterns.

Planning keeps components disjoint, which the kernels need (each allowed pair is counted once when
their partial softmaxes are merged):

* union: all components that run in position order merge into one (tiles united, masks or-ed);
  every other component (permuted orders, gathered key sets, global rows/columns) then excludes
  the pairs of the components before it, by mask;
* intersection: the cheapest operand's components are restricted by the other operands' rules,
  and tiles are intersected where both sides run in position order.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from .base import (
    BlockLayout,
    Component,
    Pattern,
    Plan,
    bind_part,
    from_dict,
    intersect_layouts,
    merge_layouts,
    register_pattern,
)


def _flatten(cls, parts):
    out = []
    for p in parts:
        if not isinstance(p, Pattern):
            raise TypeError(f"can only combine patterns, got {type(p).__name__}")
        out.extend(p.parts if type(p) is cls else [p])
    return out


def _terms(p: Pattern, cls) -> list[Pattern]:
    """The distinct operands of ``p`` under ``cls``'s operator, in order (``[p]`` if ``p`` is not a ``cls``): what
    ``==`` and ``hash`` of a combination compare."""
    out = []
    for q in p.parts if type(p) is cls else [p]:
        if not any(q == r for r in out):
            out.append(q)
    return out


class _Combination(Pattern):
    operator = ""

    def __init__(self, *patterns: Pattern, parts=None):
        if parts is not None:  # the spec's keyword: Union(parts=[...]), patterns.get("union", parts=[...])
            if patterns:
                raise TypeError(
                    f"{type(self).__name__} takes its patterns either positionally or as parts=, not both"
                )
            if not isinstance(parts, (list, tuple)):
                raise TypeError(f"parts must be a list of patterns, got {type(parts).__name__}")
            patterns = (tuple(parts),)
        parts = patterns
        if len(parts) == 1 and isinstance(parts[0], (list, tuple)):
            parts = tuple(parts[0])
        parts = tuple(from_dict(p) for p in parts)
        self.parts = tuple(_flatten(type(self), parts))
        if len(self.parts) < 2:
            raise ValueError(f"{type(self).__name__} needs at least two patterns, got {len(self.parts)}")
        self.length_dependent = any(p.length_dependent for p in self.parts)
        self.content_based = any(p.content_based for p in self.parts)
        self.translation_invariant = all(p.translation_invariant for p in self.parts)
        for p in self.parts:
            p.check_combinable(self.operator)
        sizes = sorted({len(h) for h in (p.heads() for p in self.parts) if h is not None})
        if len(sizes) > 1:
            raise ValueError(
                f"per-head patterns combined with | or & must have the same number of heads, got {sizes}"
            )

    def bind(self, q_len, kv_len=None, *, query=None, key=None, causal=False, key_valid=None):
        # the parts of a causal pattern: positions past the input are a decoder's positions still to come
        causal = causal or self.is_causal
        split = self._per_head_split() if self.content_based else None
        if split is not None:  # a content-based part selects per head: from that head's queries and keys
            out = split.bind(q_len, kv_len, query=query, key=key, causal=causal, key_valid=key_valid)
            out._source = self
            return out
        bound = [
            bind_part(p, q_len, kv_len, query=query, key=key, causal=causal, key_valid=key_valid)
            for p in self.parts
        ]
        if all(b is p for b, p in zip(bound, self.parts)):
            return self
        out = type(self)(*bound)
        out._source = self
        return out

    def _spec(self):
        """None where a part's spec does not describe it (bound, a table, call-time tokens): then the combination
        is compared by its parts."""
        return None if any(p._spec() is None for p in self.parts) else super()._spec()

    def __eq__(self, other):
        """Structural equality up to the order and repeats of the operands: ``a | b == b | a``, ``a | a == a``,
        ``(a | b) | c == a | (b | c)`` (nested operands of one operator are flattened when built), with equal hashes.
        Not equality of rules: ``Longformer(w) != SlidingWindow(w) | Global()``, ``a | Causal() != Causal()`` for a
        causal ``a``. ``to_dict`` and the order the parts are evaluated in stay as written. A bound combination
        equals one bound from an equal pattern to equal parts."""
        if not isinstance(other, Pattern):
            return NotImplemented
        mine, theirs = _terms(self, type(self)), _terms(other, type(self))
        if len(mine) == 1 or len(theirs) == 1:
            return len(mine) == len(theirs) and mine[0] == theirs[0]
        src, other_src = getattr(self, "_source", None), getattr(other, "_source", None)
        if (src is None) != (other_src is None) or (src is not None and src != other_src):
            return False
        return len(mine) == len(theirs) and all(any(a == b for b in theirs) for a in mine)

    def __hash__(self):
        terms = _terms(self, type(self))
        if len(terms) == 1:
            return hash(terms[0])
        return hash((type(self).__qualname__, frozenset(hash(t) for t in terms)))

    def __repr__(self):
        if getattr(self, "_source", None) is None and self._spec() is None:
            return f"{type(self).__name__}({', '.join(repr(p) for p in self.parts)})"
        return super().__repr__()

    def check_combinable(self, op):
        for p in self.parts:
            p.check_combinable(op)

    def heads(self):
        """A combination holding a per-head pattern (also nested) is per-head: head h's combination of the parts."""
        split = self._per_head_split()
        return None if split is None else split.heads()

    def over_heads(self, patterns):
        split = self._per_head_split()
        return super().over_heads(patterns) if split is None else split.over_heads(patterns)

    def _per_head_split(self):
        """If a part assigns patterns to heads, the combination distributed over heads (else None)."""
        split = [p.heads() for p in self.parts]
        lead = next((p for p, s in zip(self.parts, split) if s is not None), None)
        if lead is None:
            return None
        rows = [
            type(self)(*[p if s is None else s[h] for p, s in zip(self.parts, split)])
            for h in range(len(lead.heads()))
        ]
        return lead.over_heads(rows)

    def _dense(self, i, j):
        split = self._per_head_split()
        if split is not None:
            return split._dense(i, j)
        masks = [p._dense(i, j) for p in self.parts]
        out = masks[0]
        for m in masks[1:]:
            out = self._combine(out, m)
        return out

    def _params(self):
        return {"parts": [p.to_dict() for p in self.parts]}

    @classmethod
    def _from_params(cls, parts):
        return cls(*[from_dict(p) for p in parts])

    @property
    def geometry(self):
        return tuple(g for p in self.parts for g in p.geometry)


@register_pattern("union")
class Union(_Combination):
    """Query i attends key j iff any part allows it."""

    operator = "|"

    @property
    def is_causal(self):
        return all(p.is_causal for p in self.parts)

    @staticmethod
    def _combine(a, b):
        return a | b

    def _mask(self, b, h, i, j):
        out = self.parts[0]._mask(b, h, i, j)
        for p in self.parts[1:]:
            out = out | p._mask(b, h, i, j)
        return out

    def cache_keep(self, kv_pos, next_pos):
        out = self.parts[0].cache_keep(kv_pos, next_pos)
        for p in self.parts[1:]:
            out = out | p.cache_keep(kv_pos, next_pos)
        return out

    def _plan(self, q_len, kv_len, block):
        split = self._per_head_split()
        if split is not None:
            return split._plan(q_len, kv_len, block)
        return union_plans([p._plan(q_len, kv_len, block) for p in self.parts])

    def _original_layout(self, q_len, kv_len, block):
        out = None
        for p in self.parts:
            lay = p._original_layout(q_len, kv_len, block)
            out = lay if out is None else merge_layouts(out, lay)
        return out


def union_plans(plans: list[Plan]) -> Plan:
    comps = [c for p in plans for c in p.components]
    base = next((c.layout for c in comps if c.identity), None)
    comps = [_columns_in_order(c, base) or c for c in comps]
    ident = [c for c in comps if c.identity]
    others = [c for c in comps if not c.identity]
    merged: list[Component] = []
    if ident:
        m = ident[0]
        for c in ident[1:]:
            ma, mb = m.mask, c.mask
            m = replace(
                m,
                layout=merge_layouts(m.layout, c.layout),
                mask=lambda b, h, i, j, ma=ma, mb=mb: ma(b, h, i, j) | mb(b, h, i, j),
                translation_invariant=m.translation_invariant and c.translation_invariant,
                name=f"{m.name}|{c.name}",
            )
        merged.append(m)
    for c in others:
        earlier = [e.mask for e in merged]
        if not earlier:
            merged.append(c)
            continue
        rule = lambda b, h, i, j, es=tuple(earlier): ~_any(es, b, h, i, j)  # noqa: E731
        merged.append(c.restricted(rule, keep_full=_clear_of(c, merged)))
    return Plan(merged)


def _columns_in_order(c: Component, base: BlockLayout | None) -> Component | None:
    """A component of gathered key columns that are whole blocks of positions (BigBird's global blocks)
    as the same component in position order, which then joins the others' kernel call instead of
    running alone and being merged over every row; None where the columns are not whole blocks."""
    index = c.k_index
    if base is None or c.q_index is not None or index is None:
        return None
    block = base.block
    if c.layout.block != block or c.layout.num_q_blocks != base.num_q_blocks:
        return None
    if (
        index.shape[:2] != (1, 1)
        or index.shape[-1] % block
        or (c.k_valid is not None and not c.k_valid.all())
    ):
        return None
    runs = index.reshape(-1, block)
    if (runs[:, 0] % block).any() or not torch.equal(runs, runs[:, :1] + torch.arange(block)):
        return None
    position_block = runs[:, 0] // block  # component key block -> block of positions
    kv = c.layout.kv_index
    kv_index = torch.where(kv >= 0, position_block[kv.clamp(min=0)], kv)
    if (kv_index[..., 1:] < kv_index[..., :-1]).any():  # the runs out of order: keep it as it is
        return None
    layout = BlockLayout(block, base.num_q_blocks, base.num_kv_blocks, kv_index, c.layout.full)
    return replace(c, layout=layout, k_index=None, k_valid=None, class_band=None, key_range=None)


def _clear_of(c: Component, earlier: list[Component]) -> torch.Tensor | None:
    """Which tiles of component ``c`` no kept tile of the ``earlier`` components overlaps (shaped like
    ``c.layout.full``): there the earlier ones allow no pair, so c's full tiles stay full (BigBird's and
    Longformer's global rows and columns: all but the few tiles that meet the window or a random block).
    Worked out over blocks of positions of the first component in position order; None where there is
    none, or for a component permuted on both sides (nothing is kept full then)."""
    base = next((e.layout for e in earlier if e.identity), None)
    if base is None or (c.q_index is not None) == (c.k_index is not None):
        return None
    if any(base.block % e.layout.block for e in [c, *earlier]):
        return None
    kept = None
    for e in earlier:
        m = _position_map(e, base)
        if m is None:
            return None
        kept = m if kept is None else kept | m
    return _gathered_tiles(c, ~kept, base.block)


def _block_of(blocks: int, block: int, base: int) -> torch.Tensor:
    """Base-block index of each of ``blocks`` blocks of size ``block`` (which divides ``base``)."""
    return torch.arange(blocks) * block // base


def _position_map(comp: Component, base: BlockLayout) -> torch.Tensor | None:
    """(Bl, Hl, nqb, nkb) bool over ``base``'s blocks of positions: where ``comp`` keeps a tile; None for
    a component permuted on both sides."""
    if comp.q_index is not None and comp.k_index is not None:
        return None
    lay, blk = comp.layout, comp.layout.block
    kept = lay.to_dense().to(torch.uint8)  # over the component's own blocks (rows or keys gathered)
    for dim, index, nb in ((2, comp.q_index, base.num_q_blocks), (3, comp.k_index, base.num_kv_blocks)):
        if index is None:  # in position order: own block -> base block
            pos = _block_of(kept.shape[dim], blk, base.block)[None, None]
        else:  # gathered: own row -> its position's base block
            kept = kept.repeat_interleave(blk, dim).narrow(dim, 0, index.shape[-1])
            pos = index // base.block
        Bl, Hl = max(kept.shape[0], pos.shape[0]), max(kept.shape[1], pos.shape[1])
        kept, pos = kept.expand(Bl, Hl, -1, -1), pos.expand(Bl, Hl, -1)
        shape = list(kept.shape)
        idx = pos[..., :, None].expand(shape) if dim == 2 else pos[..., None, :].expand(shape)
        shape[dim] = nb
        kept = torch.zeros(shape, dtype=torch.uint8).scatter_reduce(dim, idx, kept, "amax")
    return kept.bool()


def _gathered_tiles(c: Component, clear: torch.Tensor, base: int) -> torch.Tensor:
    """``clear`` (Bl, Hl, nqb, nkb) over blocks of positions of size ``base``, read at the tiles of ``c``
    (rows or keys gathered): a tile is clear if every base block its rows and keys fall in is; shaped
    like ``c.layout.full`` (batch elements / heads it does not have must all agree)."""
    lay, blk = c.layout, c.layout.block
    Bl = max(
        clear.shape[0], lay.kv_index.shape[0], *(t.shape[0] for t in (c.q_index, c.k_index) if t is not None)
    )
    Hl = max(
        clear.shape[1], lay.kv_index.shape[1], *(t.shape[1] for t in (c.q_index, c.k_index) if t is not None)
    )
    per = clear.expand(Bl, Hl, -1, -1)
    for dim, index, nb in ((2, c.q_index, lay.num_q_blocks), (3, c.k_index, lay.num_kv_blocks)):
        if index is None:  # own block -> its base block
            pos = _block_of(nb, blk, base).expand(Bl, Hl, -1)
        else:  # own row -> its position's base block
            pos = (index // base).expand(Bl, Hl, -1)
        shape = list(per.shape)
        shape[dim] = pos.shape[-1]
        idx = pos[..., :, None].expand(shape) if dim == 2 else pos[..., None, :].expand(shape)
        per = per.gather(dim, idx)
        if index is not None:  # rows (keys) -> blocks of them: clear if all are (none past the end)
            pad = [0, 0, 0, nb * blk - per.shape[2]] if dim == 2 else [0, nb * blk - per.shape[3]]
            per = torch.nn.functional.pad(per, pad, value=True)
            per = (
                per.reshape(Bl, Hl, nb, blk, -1).all(3)
                if dim == 2
                else per.reshape(Bl, Hl, -1, nb, blk).all(4)
            )
    out = per.gather(-1, lay.kv_index.expand(Bl, Hl, -1, -1).clamp(0, per.shape[-1] - 1))
    out = out & (lay.kv_index >= 0)
    for dim, size in ((0, lay.full.shape[0]), (1, lay.full.shape[1])):
        if size == 1 and out.shape[dim] > 1:
            out = out.all(dim, keepdim=True)
    return out


def _any(masks, b, h, i, j):
    out = masks[0](b, h, i, j)
    for m in masks[1:]:
        out = out | m(b, h, i, j)
    return out


@register_pattern("intersection")
class Intersection(_Combination):
    """Query i attends key j iff every part allows it."""

    operator = "&"

    @property
    def is_causal(self):
        return any(p.is_causal for p in self.parts)

    @staticmethod
    def _combine(a, b):
        return a & b

    def cache_keep(self, kv_pos, next_pos):
        out = self.parts[0].cache_keep(kv_pos, next_pos)
        for p in self.parts[1:]:
            out = out & p.cache_keep(kv_pos, next_pos)
        return out

    def _mask(self, b, h, i, j):
        out = self.parts[0]._mask(b, h, i, j)
        for p in self.parts[1:]:
            out = out & p._mask(b, h, i, j)
        return out

    def _plan(self, q_len, kv_len, block):
        split = self._per_head_split()
        if split is not None:
            return split._plan(q_len, kv_len, block)
        plans = [p._plan(q_len, kv_len, block) for p in self.parts]
        cost = [sum(c.layout.num_kept() for c in pl.components) for pl in plans]
        base = min(range(len(plans)), key=cost.__getitem__)
        comps = plans[base].components
        for k, pl in enumerate(plans):
            if k == base:
                continue
            rule = self.parts[k]._mask
            single = pl.components[0] if len(pl.components) == 1 and pl.components[0].identity else None
            new = []
            for c in comps:
                if single is not None and c.identity:
                    ma = c.mask
                    new.append(
                        replace(
                            c,
                            layout=intersect_layouts(c.layout, single.layout),
                            mask=lambda b, h, i, j, ma=ma, r=rule: ma(b, h, i, j) & r(b, h, i, j),
                            translation_invariant=c.translation_invariant and single.translation_invariant,
                        )
                    )
                else:
                    new.append(c.restricted(rule))
            comps = new
        return Plan(comps)

    def _original_layout(self, q_len, kv_len, block):
        out = None
        for p in self.parts:
            lay = p._original_layout(q_len, kv_len, block)
            out = lay if out is None else intersect_layouts(out, lay)
        return out


__all__ = ["Intersection", "Union", "union_plans"]
