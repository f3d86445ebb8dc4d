"""A KV cache that keeps only the keys a layer's pattern can still attend.

Each layer stores its keys and values with their absolute positions and, after every update, drops
the positions no later query can see according to ``pattern.cache_keep`` (causal SlidingWindow(w):
the last w - 1 positions, so memory stays constant in the generated length; Fixed: the summary
positions and the current block; Strided and Causal: everything). With a left-padded batch the
pattern counts positions from each row's first token, so a key is kept if some row still needs it.
Adaptive-span layers also pass their current reach (``floor(max span + ramp)``): keys farther from
the next query than that are dropped, so the cache is bounded by the learned spans.
Built on transformers' cache classes, so ``generate()`` handles it like any other cache (beam-search
reordering included), and an empty ``DynamicCache`` given to the model gets its layers (``sharing_layers``).
A token's keys are written after the stored ones in a buffer with room to spare (a window cache's kept keys are a
slice of it, moved to a smaller buffer when they fill under half of it), instead of a concatenated copy of the
whole cache at every token. For assisted decoding, which crops the keys of rejected draft tokens, it follows
transformers' past-recording protocol: after ``activate_past_recording()`` it keeps what the queries since
the last ``crop`` need until the next one (generate() turns it on for assisted and prompt-lookup decoding, and off
for any other decoding: a cache an assisted call returned keeps only what its pattern needs again); without it,
``crop`` works whenever no key the cropped cache would need has been dropped, and raises otherwise.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

MIN_SPARE = 16  # positions a new buffer has to spare at least (a quarter of what it holds otherwise)


class PatternCacheLayer(DynamicLayer):
    """One layer's cache: keys/values (B, H, kept, D) and their positions (kept,)."""

    def __init__(self, pattern=None, **kwargs):
        super().__init__()
        self.pattern = pattern
        self.positions = None  # positions of the stored keys
        self.last_positions = None  # positions of the keys returned by the last update
        self.cumulative_length = 0
        self.dropped_until = 0  # a query before this position may need a key that was dropped
        self.record_past = False  # keep what queries since the last crop need (assisted decoding rolls back)
        self.recorded_from = 0  # with record_past: the length at the last crop
        self.row_offsets = self.span_reach = None  # of the last update: what the next trim needs
        self._buffers = [None, None]  # keys, values: the stored ones are their front (see _append)

    def activate_past_recording(self):
        """Until the next ``crop``, keep every key a query after the last crop could attend (transformers'
        protocol for caches that drop keys: assisted decoding verifies draft tokens, then crops the rejected)."""
        self.record_past = True
        self.recorded_from = self.cumulative_length

    def deactivate_past_recording(self):
        """Stop recording: keep only what the next query can attend again, dropping at once the keys kept for a
        rollback (``generate`` does this before decoding without assistance with a cache an assisted call returned)."""
        self.record_past = False
        self.recorded_from = self.cumulative_length
        self._drop_unreachable(self.cumulative_length)

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
        self.keys = keys = self._append(self.keys, key_states, 0)
        self.values = values = self._append(self.values, value_states, 1)
        self.positions = self.last_positions = torch.cat(
            [self.positions, positions.to(self.positions.device)]
        )
        self.row_offsets = cache_kwargs.get("row_offsets")
        self.span_reach = cache_kwargs.get("span_reach")
        self._drop_unreachable(self.recorded_from if self.record_past else self.cumulative_length)
        return keys, values

    def _append(self, stored: torch.Tensor, new: torch.Tensor, which: int) -> torch.Tensor:
        """``stored`` then ``new`` along the sequence, written in place after ``stored`` where it is a slice of
        this layer's own buffer with room behind it: each token then copies only itself, not the whole cache as
        ``torch.cat`` does (transformers' ``DynamicLayer``; at 8k keys 70% of a Causal decoding step). A window
        cache's kept keys are a slice too (``_keep_only``). Anything else (a beam reorder, a gather) starts a
        new buffer with a quarter to spare. Never while autograd records: attention saved the stored keys for
        backward (they are a view of the buffer), even where they need no gradient (LoRA on queries and values)."""
        if torch.is_grad_enabled():
            return torch.cat([stored, new], dim=-2)
        if stored.numel() == 0:  # lazy_initialization's empty start
            stored = new[..., :0, :]
        if stored.shape[:-2] != new.shape[:-2] or stored.device != new.device:
            return torch.cat([stored, new], dim=-2)  # (raises as before)
        n, end = stored.shape[-2], stored.shape[-2] + new.shape[-2]
        buffer, start = self._buffers[which], 0
        if (
            buffer is not None
            and stored._base is buffer
            and stored.shape == buffer.shape[:-2] + stored.shape[-2:]
        ):
            start, rest = divmod(stored.storage_offset() - buffer.storage_offset(), buffer.stride(-2))
            in_place = rest == 0 and stored.stride() == buffer.stride() and start + end <= buffer.shape[-2]
        else:
            in_place = False
        if not in_place or new.dtype != buffer.dtype:
            dtype = torch.promote_types(stored.dtype, new.dtype)
            buffer, start = self._new_buffer(stored, end, which, dtype), 0
        buffer[..., start + n : start + end, :] = new
        return buffer[..., start : start + end, :]

    def _new_buffer(self, stored: torch.Tensor, length: int, which: int, dtype=None) -> torch.Tensor:
        """A new buffer for ``length`` keys and a quarter more (at least ``MIN_SPARE``), ``stored`` at its front."""
        size = (*stored.shape[:-2], length + max(length // 4, MIN_SPARE), stored.shape[-1])
        buffer = stored.new_empty(size, dtype=dtype)
        buffer[..., : stored.shape[-2], :] = stored
        self._buffers[which] = buffer
        return buffer

    def _keep_only(self, idx: torch.Tensor):
        """Keep the stored keys at ``idx`` (sorted): a slice where they are consecutive (a window's newest keys, a
        crop), so the next tokens are still written in place; a gather otherwise. Kept keys that fill under half of
        their buffer move to a buffer sized for them (a window's few keys after a long prompt), and a gather's copy
        lets the old buffer go: memory follows what is kept."""
        if idx.numel() and int(idx[-1]) - int(idx[0]) + 1 == idx.numel():
            idx = slice(int(idx[0]), int(idx[-1]) + 1)
        self.keys, self.values, self.positions = (
            self._shrink(self.keys[..., idx, :], 0),
            self._shrink(self.values[..., idx, :], 1),
            self.positions[idx],
        )

    def _shrink(self, kept: torch.Tensor, which: int) -> torch.Tensor:
        """``kept`` (keys or values), in a buffer of their own size where they fill under half of this layer's."""
        buffer = self._buffers[which]
        if buffer is None or kept._base is not buffer:
            self._buffers[which] = None  # a gather's copy (or keys from torch.cat): the buffer is not theirs
            return kept
        n = kept.shape[-2]
        if 2 * (n + max(n // 4, MIN_SPARE)) >= buffer.shape[-2]:
            return kept
        return self._new_buffer(kept, n, which)[..., :n, :]

    def _drop_unreachable(self, next_pos: int):
        """Drop the stored keys that no query at a position >= ``next_pos`` can attend."""
        if self.positions is None or not self.is_initialized:
            return
        pos = self.positions
        keep = self._keep(pos, next_pos, self.row_offsets)
        if self.span_reach is not None:  # adaptive span: a query sees keys at distance <= reach only
            near = pos >= next_pos - self.span_reach
            keep = near if keep is None else keep & near
        if keep is None or bool(keep.all()):
            return
        self._keep_only(torch.nonzero(keep).flatten())
        self.dropped_until = max(self.dropped_until, next_pos)

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
        # dropped, not zeroed (transformers 5.10's DynamicLayer.reset keeps them: the next update then failed)
        self.keys = self.values = None
        self.is_initialized = False
        super().reset()
        self.positions = self.last_positions = None
        self.cumulative_length = self.dropped_until = self.recorded_from = 0
        self.record_past = False
        self.row_offsets = self.span_reach = None
        self._buffers = [None, None]

    def crop(self, max_length: int):
        """Negative ``max_length``: drop that many tokens from the end (the ``crop`` convention of recent transformers;
        0 drops none); positive: keep the first ``max_length`` (the older convention). Then, as transformers'
        sliding-window layers do, the keys the next query cannot attend are dropped (those kept while recording).
        Raises if the pattern already dropped a key that a query at the new end could attend (a window cache past
        its window without past recording): continuing would give wrong tokens."""
        if max_length <= 0:
            max_length = self.cumulative_length - abs(max_length)
        if max_length < self.cumulative_length:
            if max_length < self.dropped_until:
                raise NotImplementedError(
                    f"cannot crop the {self.pattern!r} cache to {max_length} tokens: it already dropped keys that a "
                    f"query at position {max_length} attends (the cache keeps only what positions >= "
                    f"{self.dropped_until} need); call cache.activate_past_recording() before the forward passes "
                    "to roll back (generate's assisted decoding does), or generate(..., use_cache=False)"
                )
            if self.is_initialized and self.positions is not None:
                self._keep_only(torch.nonzero(self.positions < max_length).flatten())
            self.cumulative_length = max_length
        self.recorded_from = self.cumulative_length
        self._drop_unreachable(self.cumulative_length)


class SparsePatternCache(Cache):
    """One :class:`PatternCacheLayer` per layer, each with that layer's attention pattern."""

    def __init__(self, config):
        super().__init__(
            layers=[PatternCacheLayer(config.layer_pattern(i)) for i in range(config.num_hidden_layers)]
        )

    @classmethod
    def sharing_layers(cls, cache: Cache, config) -> SparsePatternCache:
        """A SparsePatternCache on the layer list of ``cache`` (an empty DynamicCache, or one this has filled
        before), which gets ``config``'s pattern layers where it holds none. What the model caches then shows in
        ``cache`` itself, and what is done to ``cache`` (``crop``, ``reorder_cache``) reaches the pattern layers:
        transformers' manual decoding loop passes the same DynamicCache at every step."""
        if not holds_pattern_layers(cache):
            cache.layers[:] = cls(config).layers  # the same list: ``cache`` sees every later change too
        view = cls.__new__(cls)
        Cache.__init__(view, layers=cache.layers)
        return view

    def positions(self, layer_idx: int) -> torch.Tensor:
        return self.layers[layer_idx].last_positions

    def key_positions(self, layer_idx: int, new_positions: torch.Tensor) -> torch.Tensor:
        """Positions of the keys layer ``layer_idx`` returns when given tokens at ``new_positions``."""
        return self.layers[layer_idx].key_positions(new_positions)

    def stored_length(self, layer_idx: int = 0) -> int:
        """Number of key positions currently held by a layer."""
        return self.layers[layer_idx].stored_length()

    def activate_past_recording(self):
        """Every layer keeps what queries since the last ``crop`` need (also where transformers' Cache lacks it)."""
        for layer in self.layers:
            layer.activate_past_recording()

    def deactivate_past_recording(self):
        """Every layer keeps only what the next query can attend again (see ``PatternCacheLayer``)."""
        for layer in self.layers:
            layer.deactivate_past_recording()


def holds_pattern_layers(cache) -> bool:
    """Whether ``cache`` (another Cache class) holds pattern layers a model put there (``sharing_layers``)."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(isinstance(layer, PatternCacheLayer) for layer in layers)


__all__ = ["PatternCacheLayer", "SparsePatternCache"]
