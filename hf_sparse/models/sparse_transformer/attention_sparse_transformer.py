"""SparseTransformer's self-attention: the mask each layer hands to transformers' mask interface,
the dense reference (``eager``) and the attention module that routes through transformers'
attention interface (or the adaptive-span kernel)."""

import copy
import inspect
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from ...attention.adaptive_span import AdaptiveSpan, adaptive_span_attention, adaptive_span_reference
from ...attention.dense import all_true
from ...attention.dispatch import check_exportable
from ...attention.integration import ATTN_IMPLEMENTATION, OWN_ATTN_IMPLEMENTATION, PatternMask
from ...patterns import Pattern, from_dict
from ...patterns.local import SlidingWindow
from .embeddings_sparse_transformer import apply_rotary

_MASK_TAKES_Q_LENGTH = "q_length" in inspect.signature(sdpa_mask).parameters


def left_padding(attention_mask):
    """(batch,) number of leading padding tokens per row, or None when no row starts with padding."""
    if attention_mask is None:
        return None
    lead = (attention_mask.cumsum(-1) == 0).sum(-1)  # (B,)
    return None if all_true(lead == 0) else lead


def _registered_name(impl):
    """The interface name of ``config._attn_implementation``: ``"hf_sparse"`` means this copy's own functions
    (:data:`~hf_sparse.attention.integration.OWN_ATTN_IMPLEMENTATION`), not those of whichever copy (another
    remote-code bundle's, possibly of another hf-sparse version) holds ``"hf_sparse"``."""
    return OWN_ATTN_IMPLEMENTATION if impl == ATTN_IMPLEMENTATION else impl


def build_mask(impl, mask_function: PatternMask, batch_size: int, dtype, device):
    """The mask of ``impl``'s ``AttentionMaskInterface`` function for one layer's rule:
    a ``SparseMask`` for ``"hf_sparse"`` (this copy's function), a materialised 4D mask for ``"sdpa"``/``"eager"``."""
    impl = impl or ATTN_IMPLEMENTATION
    if impl not in ALL_MASK_ATTENTION_FUNCTIONS:
        raise ValueError(
            f"attn_implementation={impl!r} has no mask function; SparseTransformer supports "
            f"{ATTN_IMPLEMENTATION!r}, 'sdpa' and 'eager'"
        )
    if (
        impl != ATTN_IMPLEMENTATION and mask_function.pattern.heads() is not None
    ):  # a PerHead, or one combined
        raise NotImplementedError(
            f"attn_implementation={impl!r} builds one mask for all heads; {mask_function.pattern!r} differs per "
            f"head: use attn_implementation={ATTN_IMPLEMENTATION!r}"
        )
    pattern = mask_function.pattern
    if impl != ATTN_IMPLEMENTATION and not pattern.bound:  # materialised here, before the attention runs
        check_exportable(pattern)
        if pattern.content_based:
            raise NotImplementedError(
                f"attn_implementation={impl!r} materialises the mask before attention, but {pattern!r} is chosen "
                f"from the queries and keys: use attn_implementation={ATTN_IMPLEMENTATION!r}"
            )
        # random blocks etc. fixed for this length, as the hf_sparse kernels fix them
        mask_function.pattern = pattern.bind(mask_function.q_length, mask_function.key_positions.shape[0])
    mask_function.padding_queries_attend_self = impl == "sdpa"
    kw = dict(
        batch_size=batch_size, kv_length=mask_function.key_positions.shape[0], kv_offset=0,
        mask_function=mask_function, attention_mask=None, allow_is_causal_skip=False,
        allow_is_bidirectional_skip=False, dtype=dtype, use_vmap=False,
    )  # fmt: skip
    if _MASK_TAKES_Q_LENGTH:
        kw.update(q_length=mask_function.q_length, q_offset=mask_function.q_offset, device=device)
    else:  # older transformers 5 releases: queries given by their positions
        start = mask_function.q_offset
        kw["cache_position"] = torch.arange(start, start + mask_function.q_length, device=device)
    return ALL_MASK_ATTENTION_FUNCTIONS[_registered_name(impl)](**kw)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """The dense reference: softmax over the keys the (materialised, additive) mask allows, computed
    in float32; a query with no allowed key outputs zeros (hf-sparse's convention)."""
    scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * scaling  # (B, H, q, kv)
    any_key = None
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            allowed = attention_mask
        else:
            allowed = attention_mask > torch.finfo(attention_mask.dtype).min / 2
        scores = scores.masked_fill(~allowed, float("-inf"))
        any_key = allowed.any(-1, keepdim=True)
        scores = scores.masked_fill(~any_key, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if any_key is not None:
        weights = weights * any_key
    weights = F.dropout(weights, p=dropout, training=module.training).to(query.dtype)
    out = torch.matmul(weights, value)  # (B, H, q, D)
    return out.transpose(1, 2).contiguous(), weights


class SparseTransformerSelfAttention(nn.Module):
    """Multi-head self-attention restricted to the layer's pattern (Longformer-style globals optional)."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.scale = 1.0 / math.sqrt(self.head_dim)
        # the spec last read from the config, and its pattern; parsed now, so that a compiled forward finds it
        # parsed (a first trace that parsed it guarded on _pattern being None: a recompile on the second call)
        self._spec, self._pattern = None, None
        self._pattern = self.pattern
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        if config.global_projections:
            self.query_global = nn.Linear(config.hidden_size, config.hidden_size)
            self.key_global = nn.Linear(config.hidden_size, config.hidden_size)
            self.value_global = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob
        span = config.adaptive_span
        self.adaptive_span = (
            None
            if span is None
            else AdaptiveSpan(self.num_heads, span["max_span"], span["ramp"], span["init"])
        )

    @property
    def pattern(self) -> Pattern:
        """This layer's pattern as ``config.attention_pattern`` gives it now: an edit of the config after the
        model was built takes effect (as transformers models read ``config.sliding_window``), and is what
        ``save_pretrained`` stores. Parsed again only when the spec changed (the same object otherwise);
        :meth:`SparseTransformerModel.forward` validates an edit first."""
        specs = self.config.attention_pattern
        spec = specs[self.layer_idx] if isinstance(specs, list) else specs
        if self._pattern is None or spec != self._spec:
            self._pattern, self._spec = from_dict(spec), copy.deepcopy(spec)
        return self._pattern

    def _heads(self, x):  # (B, n, hidden) -> (B, H, n, D)
        B, n, _ = x.shape
        return x.view(B, n, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        query_mask=None,
        global_attention_mask=None,
        position_embeddings=None,
        cache=None,
        cache_position=None,
        row_offsets=None,
        output_attentions=False,
        key_padding_mask=None,
    ):
        """``attention_mask``: this layer's mask from the mask interface (``build_mask``);
        ``query_mask`` (B, n): 1 for tokens, 0 for padding queries (their outputs are zeros);
        ``key_padding_mask`` (B, past + n): the model's padding mask (read by adaptive-span layers)."""
        B, n, _ = hidden_states.shape
        q, k, v = (
            self._heads(lin(hidden_states)) for lin in (self.query, self.key, self.value)
        )  # (B, H, n, D)
        if position_embeddings is not None:
            q, k = apply_rotary(q, k, *position_embeddings)
        reach = None
        if self.adaptive_span is not None:
            if global_attention_mask is not None:
                raise ValueError(
                    "adaptive_span layers have no global tokens; pass global_attention_mask=None"
                )
            reach = self.adaptive_span.reach()  # the cache keeps only keys this close
        if cache is not None:
            k, v = cache.update(
                k,
                v,
                self.layer_idx,
                {"positions": cache_position, "row_offsets": row_offsets, "span_reach": reach},
            )
        if self.adaptive_span is not None:
            kpos = cache.positions(self.layer_idx) if cache is not None else cache_position
            out, weights = self._adaptive_span(
                q, k, v, kpos, cache_position, key_padding_mask, output_attentions
            )
            if query_mask is not None:
                out = out * query_mask.to(out.dtype)[:, None, :, None]
            return out.transpose(1, 2).flatten(2), weights
        if output_attentions and k.shape[-2] > self.config.max_attention_weights_length:
            raise ValueError(
                f"output_attentions=True materialises (batch, heads, {n}, {k.shape[-2]}) weights; inputs longer than "
                f"max_attention_weights_length={self.config.max_attention_weights_length} are refused"
            )
        dropout = self.dropout_p if self.training else 0.0
        if output_attentions and self.config._attn_implementation not in (None, "eager", ATTN_IMPLEMENTATION):
            attention = (
                eager_attention_forward  # e.g. sdpa returns no weights; the eager mask is the same rule
            )
            attention_mask = _additive(attention_mask, q.dtype)
        elif hasattr(ALL_ATTENTION_FUNCTIONS, "get_interface"):
            attention = ALL_ATTENTION_FUNCTIONS.get_interface(
                _registered_name(self.config._attn_implementation), eager_attention_forward
            )
        elif self.config._attn_implementation in (
            None,
            "eager",
        ):  # older transformers 5 releases: no get_interface
            attention = eager_attention_forward
        else:
            attention = ALL_ATTENTION_FUNCTIONS[_registered_name(self.config._attn_implementation)]
        out, weights = attention(
            self,
            q,
            k,
            v,
            attention_mask,
            dropout=dropout,
            scaling=self.scale,
            output_attentions=output_attentions,
        )  # (B, n, H, D)
        cfg = self.config
        weights = weights if output_attentions else None
        if cfg.global_projections and global_attention_mask is not None and bool(global_attention_mask.any()):
            out, weights = self._global_rows(
                hidden_states, out, query_mask, global_attention_mask, dropout, weights
            )
        if query_mask is not None:  # padding queries output zeros (Longformer convention)
            out = out * query_mask.to(out.dtype)[:, :, None, None]
        return out.flatten(2), weights

    def _adaptive_span(self, q, k, v, kpos, qpos, key_padding_mask, output_attentions):
        """Adaptive-span attention inside the layer's Causal/SlidingWindow band: the blocked kernel, or
        the dense reference for ``attn_implementation="eager"`` and ``output_attentions``."""
        k_start = int(kpos[0])
        if int(kpos[-1]) - k_start + 1 != kpos.shape[0]:
            raise RuntimeError(f"adaptive span needs consecutive key positions, got {kpos.tolist()}")
        p = self.pattern
        band = None
        if isinstance(p, SlidingWindow):
            band = p.window - 1 if p.causal else p.window // 2
        pad = None if key_padding_mask is None else key_padding_mask[:, kpos].bool()
        kw = dict(
            ramp=self.adaptive_span.ramp, causal=p.is_causal, key_padding_mask=pad, q_start=int(qpos[0]),
            k_start=k_start, max_distance=band, scale=self.scale,
        )  # fmt: skip
        spans = self.adaptive_span.spans().to(q.dtype)
        if output_attentions or self.config._attn_implementation == "eager":
            _, w = adaptive_span_reference(q, k, v, spans, return_weights=True, **kw)
            w = F.dropout(w, p=self.dropout_p, training=self.training)
            return torch.matmul(w, v), (w if output_attentions else None)
        dropout = self.dropout_p if self.training else 0.0
        block = self.config.attention_block_size or 128
        return adaptive_span_attention(q, k, v, spans, dropout_p=dropout, block_size=block, **kw), None

    def _global_rows(self, hidden, out, attention_mask, global_attention_mask, dropout, weights=None):
        """Longformer: global tokens' outputs from their own projections, over every key (with a causal pattern,
        and in a PerHead's causal heads, every key up to the token), in place of their rows of ``out``
        (B, n, H, D). One out-of-place ``index_copy`` over the (B * n) rows: a clone
        and the rows' index_put in place on a (B, H, n, D) view made autograd copy every row of out
        about six times (16k tokens, 12 heads: 0.3 s of a 2-layer step, now 0.1 s). ``weights`` (B, H, n, n;
        ``output_attentions``) are returned with the global rows' probabilities from these projections in
        place of those the local ones gave: the weights that made the output."""
        B, n = out.shape[:2]
        kg = self._heads(self.key_global(hidden))
        vg = self._heads(self.value_global(hidden))
        # per sequence: whole tensors for one; for several, unbind's backward stacks every gradient once
        # (a slice's backward writes a zero-filled copy of the whole batch per sequence)
        kgs = (kg,) if B == 1 else [t[None] for t in kg.unbind(0)]
        vgs = (vg,) if B == 1 else [t[None] for t in vg.unbind(0)]
        causal_heads = [p.is_causal for p in self.pattern.heads() or (self.pattern,)]
        index, values, global_probs = [], [], []
        for b, kb, vb in zip(range(B), kgs, vgs):
            rows = torch.nonzero(global_attention_mask[b]).flatten()
            if rows.numel() == 0:
                continue
            qg = self._heads(self.query_global(hidden[b : b + 1, rows]))  # (1, H, G, D)
            scores = torch.matmul(qg, kb.transpose(-1, -2)) * self.scale  # (1, H, G, n)
            if attention_mask is not None:
                scores = scores.masked_fill(~attention_mask[b : b + 1, None, None, :].bool(), float("-inf"))
            # a causal pattern's global token (a PerHead's, in its causal heads) attends no later key
            if any(causal_heads):
                future = torch.arange(n, device=rows.device)[None, :] > rows[:, None]  # (G, n)
                causal = torch.tensor(causal_heads, device=rows.device)[:, None, None]  # (H or 1, 1, 1)
                scores = scores.masked_fill((future & causal)[None], float("-inf"))  # (1, H, G, n)
            # a row with no key (a decoder's global padding token before the row's first token): zeros, not NaN
            empty = torch.isneginf(scores).all(-1, keepdim=True)  # (1, H, G, 1)
            probs = torch.softmax(scores.masked_fill(empty, 0.0).float(), dim=-1).masked_fill(empty, 0.0)
            probs = F.dropout(probs.to(qg.dtype), p=dropout, training=dropout > 0)
            values.append(torch.matmul(probs, vb)[0].transpose(0, 1))  # (G, H, D)
            index.append(rows + b * n)
            global_probs.append((b, rows, probs[0]))  # (H, G, n)
        if not index:
            return out, weights
        if weights is not None:
            weights = weights.clone()
            for b, rows, probs in global_probs:
                weights[b, :, rows] = probs.to(weights.dtype)
        flat = out.reshape(B * n, *out.shape[2:])
        return flat.index_copy(0, torch.cat(index), torch.cat(values).to(out.dtype)).view(out.shape), weights


def _additive(mask, dtype):
    """A bool (sdpa) mask as eager's additive one."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros((), dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


class SparseTransformerSelfOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class SparseTransformerAttention(nn.Module):
    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.self = SparseTransformerSelfAttention(config, layer_idx)
        self.output = SparseTransformerSelfOutput(config)

    def forward(self, hidden_states, **kwargs):
        attn, weights = self.self(hidden_states, **kwargs)
        return self.output(attn, hidden_states), weights
