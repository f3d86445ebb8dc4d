"""A KV cache that keeps only the keys a layer's pattern can still attend.

Each layer stores its keys and values with their absolute positions and, after every update, drops
the positions no later query can see according to ``pattern.cache_keep`` (causal SlidingWindow(w):
the last w - 1 positions, so memory stays constant in the generated length; Fixed: the summary
positions and the current block; Strided and Causal: everything). With a left-padded batch the
pattern counts positions from each row's first token, so a key is kept if some row still needs it.
Adaptive-span layers also pass their current reach (``floor(max span + ramp)``): keys farther from
the next query than that are dropped, so the cache is bounded by the learned spans.
Built on transformers' cache classes, so ``generate()`` handles it like any other cache (beam-search
reordering included); ``crop`` (assisted decoding) works whenever no key the cropped cache would
need has been dropped, and raises otherwise.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer


class PatternCacheLayer(DynamicLayer):
    """One layer's cache: keys/values (B, H, kept, D) and their positions (kept,)."""

    def __init__(self, pattern=None, **kwargs):
        super().__init__()
        self.pattern = pattern
        self.positions = None  # positions of the stored keys
        self.last_positions = None  # positions of the keys returned by the last update
        self.cumulative_length = 0
        self.dropped_until = 0  # a query before this position may need a key that was dropped

    def lazy_initialization(self, key_states, value_states, *args, **kwargs):
        super().lazy_initialization(key_states, value_states)
        self.positions = torch.zeros(0, dtype=torch.long, device=key_states.device)

    def key_positions(self, new_positions: torch.Tensor) -> torch.Tensor:
        """Positions of the keys the next update returns: the stored ones, then ``new_positions``."""
        if self.positions is None or not self.is_initialized:
            return new_positions
        return torch.cat([self.positions, new_positions.to(self.positions.device)])

    def update(self, key_states, value_states, cache_kwargs=None, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        cache_kwargs = cache_kwargs or kwargs.get("kwargs") or {}
        positions = cache_kwargs.get("positions")
        if positions is None:
            positions = torch.arange(
                self.cumulative_length, self.cumulative_length + n, device=key_states.device
            )
        self.cumulative_length += n
        keys = torch.cat([self.keys, key_states], dim=-2)
        values = torch.cat([self.values, value_states], dim=-2)
        pos = torch.cat([self.positions, positions.to(self.positions.device)])
        self.last_positions = pos
        keep = self._keep(pos, self.cumulative_length, cache_kwargs.get("row_offsets"))
        reach = cache_kwargs.get("span_reach")
        if reach is not None:  # adaptive span: the next query sees keys at distance <= reach only
            near = pos >= self.cumulative_length - reach
            keep = near if keep is None else keep & near
        if keep is None or bool(keep.all()):
            self.keys, self.values, self.positions = keys, values, pos
        else:
            idx = torch.nonzero(keep).flatten()
            self.keys, self.values, self.positions = keys[..., idx, :], values[..., idx, :], pos[idx]
            self.dropped_until = self.cumulative_length
        return keys, values

    def _keep(self, pos, next_pos: int, row_offsets):
        if self.pattern is None:
            return None
        if row_offsets is None:
            return self.pattern.cache_keep(pos, next_pos)
        keep = torch.zeros_like(pos, dtype=torch.bool)
        for off in torch.unique(row_offsets).tolist():  # rows count positions from their first token
            keep |= self.pattern.cache_keep(pos - off, next_pos - off)
        return keep

    def get_seq_length(self, *args) -> int:
        """Tokens seen so far (not the number stored): what generate() uses for positions."""
        return self.cumulative_length

    def get_mask_sizes(self, query_length, *args):
        q = query_length if isinstance(query_length, int) else query_length.shape[0]
        return self.stored_length() + q, 0

    def stored_length(self) -> int:
        return 0 if self.keys is None or not self.is_initialized else self.keys.shape[-2]

    def reset(self):
        super().reset()
        self.positions = self.last_positions = None
        self.cumulative_length = 0
        self.dropped_until = 0

    def crop(self, max_length: int):
        """Negative ``max_length``: drop that many tokens from the end (the ``crop`` convention of recent transformers;
        0 is a no-op); positive: keep the first ``max_length`` (the older convention). Raises if the
        pattern already dropped a key that a query at the new end could attend (window caches past
        their window): continuing would give wrong tokens."""
        if max_length == 0:
            return
        if max_length < 0:
            max_length = self.cumulative_length - abs(max_length)
        if self.cumulative_length <= max_length:
            return
        if max_length < self.dropped_until:
            raise NotImplementedError(
                f"cannot crop the {self.pattern!r} cache to {max_length} tokens: it already dropped keys that a "
                f"query at position {max_length} attends (the cache keeps only what positions >= {self.dropped_until} "
                "need); assisted decoding needs a pattern whose cache keeps every key (Causal, Strided) or "
                "generate(..., use_cache=False)"
            )
        if self.is_initialized and self.positions is not None:
            idx = torch.nonzero(self.positions < max_length).flatten()
            self.keys, self.values, self.positions = (
                self.keys[..., idx, :],
                self.values[..., idx, :],
                self.positions[idx],
            )
        self.cumulative_length = max_length


class SparsePatternCache(Cache):
    """One :class:`PatternCacheLayer` per layer, each with that layer's attention pattern."""

    def __init__(self, config):
        super().__init__(
            layers=[PatternCacheLayer(config.layer_pattern(i)) for i in range(config.num_hidden_layers)]
        )

    def positions(self, layer_idx: int) -> torch.Tensor:
        return self.layers[layer_idx].last_positions

    def key_positions(self, layer_idx: int, new_positions: torch.Tensor) -> torch.Tensor:
        """Positions of the keys layer ``layer_idx`` returns when given tokens at ``new_positions``."""
        return self.layers[layer_idx].key_positions(new_positions)

    def stored_length(self, layer_idx: int = 0) -> int:
        """Number of key positions currently held by a layer."""
        return self.layers[layer_idx].stored_length()


__all__ = ["PatternCacheLayer", "SparsePatternCache"]
