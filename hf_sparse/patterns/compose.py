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

from .base import Component, Pattern, Plan, from_dict, intersect_layouts, merge_layouts, register_pattern


def _flatten(cls, parts):
    out = []
    for p in parts:
        if not isinstance(p, Pattern):
            raise TypeError(f"can only combine patterns, got {type(p).__name__}")
        out.extend(p.parts if type(p) is cls else [p])
    return out


class _Combination(Pattern):
    operator = ""

    def __init__(self, *parts: Pattern):
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

    def bind(self, q_len, kv_len=None, *, query=None, key=None):
        bound = [p.bind(q_len, kv_len, query=query, key=key) for p in self.parts]
        if all(b is p for b, p in zip(bound, self.parts)):
            return self
        out = type(self)(*bound)
        out._source = self
        return out

    def check_combinable(self, op):
        for p in self.parts:
            p.check_combinable(op)

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
        merged.append(
            c.restricted(lambda b, h, i, j, es=tuple(earlier): ~_any(es, b, h, i, j)) if earlier else c
        )
    return Plan(merged)


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
