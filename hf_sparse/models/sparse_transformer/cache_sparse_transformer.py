"""A KV cache that keeps only the keys a layer's pattern can still attend.

Each layer stores its keys and values with their absolute positions and, after every update, drops
the positions no later query can see according to ``pattern.cache_keep`` (causal SlidingWindow(w):
the last w - 1 positions, so memory stays constant in the generated length; Fixed: the summary
positions and the current block; Strided and Causal: everything). Built on transformers' cache
classes, so ``generate()`` handles it like any other cache.
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

    def lazy_initialization(self, key_states, value_states):
        super().lazy_initialization(key_states, value_states)
        self.positions = torch.zeros(0, dtype=torch.long, device=key_states.device)

    def update(self, key_states, value_states, cache_kwargs=None, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        positions = None if cache_kwargs is None else cache_kwargs.get("positions")
        if positions is None:
            positions = torch.arange(
                self.cumulative_length, self.cumulative_length + n, device=key_states.device
            )
        self.cumulative_length += n
        keys = torch.cat([self.keys, key_states], dim=-2)
        values = torch.cat([self.values, value_states], dim=-2)
        pos = torch.cat([self.positions, positions.to(self.positions.device)])
        self.last_positions = pos
        keep = self.pattern.cache_keep(pos, int(pos.max()) + 1) if self.pattern is not None else None
        if keep is None or bool(keep.all()):
            self.keys, self.values, self.positions = keys, values, pos
        else:
            idx = torch.nonzero(keep).flatten()
            self.keys, self.values, self.positions = keys[..., idx, :], values[..., idx, :], pos[idx]
        return keys, values

    def get_seq_length(self) -> int:
        """Tokens seen so far (not the number stored): what generate() uses for positions."""
        return self.cumulative_length

    def get_mask_sizes(self, query_length: int):
        return self.get_seq_length() + query_length, 0

    def stored_length(self) -> int:
        return 0 if self.keys is None or not self.is_initialized else self.keys.shape[-2]

    def reset(self):
        super().reset()
        self.positions = self.last_positions = None
        self.cumulative_length = 0

    def crop(self, tokens_to_remove: int):
        raise NotImplementedError("a pattern-aware cache drops keys as it goes and cannot be cropped")


class SparsePatternCache(Cache):
    """One :class:`PatternCacheLayer` per layer, each with that layer's attention pattern."""

    def __init__(self, config):
        super().__init__(
            layers=[PatternCacheLayer(config.layer_pattern(i)) for i in range(config.num_hidden_layers)]
        )

    def positions(self, layer_idx: int) -> torch.Tensor:
        return self.layers[layer_idx].last_positions

    def stored_length(self, layer_idx: int = 0) -> int:
        """Number of key positions currently held by a layer."""
        return self.layers[layer_idx].stored_length()


__all__ = ["PatternCacheLayer", "SparsePatternCache"]
