"""Different patterns for different heads (DeepSpeed's ``different_layout_per_head``)."""

from __future__ import annotations

import torch

from .base import Pattern, Plan, bind_part, from_dict, merge_layouts, register_pattern


@register_pattern("per_head")
class PerHead(Pattern):
    """Head h uses ``patterns[h]``: query i of head h attends key j iff ``patterns[h]`` allows it.

    The number of heads of the input must equal ``len(patterns)``. Child et al.'s incremental
    strides: ``PerHead([SlidingWindow(window=h + 1, causal=True) for h in range(4)])``.
    """

    def __init__(self, patterns):
        if isinstance(patterns, Pattern) or not isinstance(patterns, (list, tuple)) or not patterns:
            raise TypeError(f"PerHead takes a non-empty list of patterns, got {patterns!r}")
        self.patterns = tuple(from_dict(p) for p in patterns)
        if any(p.heads() is not None for p in self.patterns):
            raise ValueError("PerHead patterns cannot be nested")
        self.parts = self.patterns
        self.length_dependent = any(p.length_dependent for p in self.patterns)
        self.content_based = any(p.content_based for p in self.patterns)
        self.translation_invariant = all(p.translation_invariant for p in self.patterns)
        self.is_causal = all(p.is_causal for p in self.patterns)

    @property
    def num_heads(self) -> int:
        return len(self.patterns)

    def heads(self):
        return self.patterns

    def check_combinable(self, op):
        # each head is combined: PerHead([Longformer(w), ...]) & x holds Longformer(w) & x
        for p in self.patterns:
            p.check_combinable(op)

    def __eq__(self, other):
        """Head by head with ``==``: ``PerHead([a | b, c]) == PerHead([b | a, c])`` (unions and intersections compare
        up to the order and repeats of their operands), with equal hashes. A bound PerHead equals one bound from
        an equal pattern to equal heads."""
        if not isinstance(other, Pattern):
            return NotImplemented
        if type(other) is not type(self) or len(other.patterns) != len(self.patterns):
            return False
        src, other_src = getattr(self, "_source", None), getattr(other, "_source", None)
        if (src is None) != (other_src is None) or (src is not None and src != other_src):
            return False
        return all(a == b for a, b in zip(self.patterns, other.patterns))

    def __hash__(self):
        return hash((type(self).__qualname__, tuple(hash(p) for p in self.patterns)))

    def over_heads(self, patterns):
        return PerHead(patterns)

    def bind(self, q_len, kv_len=None, *, query=None, key=None, causal=False, key_valid=None):
        bound = []
        for h, p in enumerate(self.patterns):
            qh = None if query is None else query[:, h : h + 1]
            kh = None if key is None else key[:, h : h + 1]
            bound.append(
                bind_part(
                    p,
                    q_len,
                    kv_len,
                    query=qh if p.content_based else None,
                    key=kh if p.content_based else None,
                    causal=causal or self.is_causal,
                    key_valid=key_valid,
                )
            )
        if all(b is p for b, p in zip(bound, self.patterns)):
            return self
        out = PerHead(bound)
        out._source = self
        return out

    def cache_keep(self, kv_pos, next_pos):
        out = self.patterns[0].cache_keep(kv_pos, next_pos)
        for p in self.patterns[1:]:
            out = out | p.cache_keep(kv_pos, next_pos)
        return out

    def _mask(self, b, h, i, j):
        if isinstance(h, int):
            return self.patterns[h]._mask(b, 0, i, j)
        masks = [p._mask(b, 0, i, j) for p in self.patterns]
        out = masks[-1]
        for k in range(len(masks) - 2, -1, -1):  # pointwise selects: a compiled mask_mod cannot index a stack
            out = torch.where(h == k, masks[k], out)
        return out

    def _dense(self, i, j):
        masks = [p._dense(i, j) for p in self.patterns]
        if any(m.dim() == 4 for m in masks):  # content-based heads: (B, 1, q, kv)
            masks = [m if m.dim() == 4 else m[None, None] for m in masks]
            B = max(m.shape[0] for m in masks)
            return torch.cat([m.expand(B, 1, -1, -1) for m in masks], dim=1)
        return torch.stack([m.expand(i.shape[0], j.shape[1]) for m in masks])

    def _plan(self, q_len, kv_len, block):
        return Plan(per_head=[p._plan(q_len, kv_len, block) for p in self.patterns])

    def _original_layout(self, q_len, kv_len, block):
        """The heads' tiles united; full only where every head's tile is (one layout, one mask for all heads)."""
        layouts = [p._original_layout(q_len, kv_len, block) for p in self.patterns]
        out = layouts[0]
        for lay in layouts[1:]:
            out = merge_layouts(out, lay)
        if len(layouts) > 1:
            every = layouts[0].to_dense(full=True)  # (Bl, Hl, nqb, nkb) block map of the full tiles
            for lay in layouts[1:]:
                every = every & lay.to_dense(full=True)
            idx = out.kv_index.expand(*every.shape[:2], -1, -1)
            out.full = out.full & every.gather(-1, idx.clamp(min=0)) & (idx >= 0)
        return out

    def _params(self):
        return {"patterns": [p.to_dict() for p in self.patterns]}

    @classmethod
    def _from_params(cls, patterns):
        return cls(patterns)


__all__ = ["PerHead"]
