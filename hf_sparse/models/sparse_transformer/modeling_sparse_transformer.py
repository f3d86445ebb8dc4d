"""SparseTransformer: a BERT/RoBERTa-style transformer whose self-attention is any hf-sparse pattern.

Module names follow BERT/RoBERTa/Longformer (``embeddings``, ``encoder.layer.N.attention.self.query``,
...), so their checkpoints convert by renaming a prefix (``hf_sparse.conversion``). Attention goes
through transformers' attention interface (``ALL_ATTENTION_FUNCTIONS[config._attn_implementation]``)
as in ``models/mistral``: ``"hf_sparse"`` (the default: :func:`hf_sparse.sparse_attention`, exact,
block-sparse, O(n) memory), ``"sdpa"`` (torch's SDPA with the pattern's mask materialised) or
``"eager"`` (the dense reference). Each layer's mask is a :class:`PatternMask` handed to the mask
interface of the same name. Decoders cache only the keys their pattern can still attend
(:class:`SparsePatternCache`) and read the cache under either name transformers passes it
(``cache``, or ``past_key_values`` in older transformers 5 releases).
"""

import dataclasses
import inspect
import json
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache
from transformers.integrations.moe import use_experts_implementation
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    CausalLMOutputWithCrossAttentions,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils.output_capturing import OutputRecorder

from ...attention.adaptive_span import AdaptiveSpan, adaptive_span_attention, adaptive_span_reference
from ...attention.dense import all_true
from ...attention.dispatch import check_exportable
from ...attention.integration import ATTN_IMPLEMENTATION, PatternMask, register_attention
from ...patterns.local import SlidingWindow
from ...patterns.per_head import PerHead as PerHeadPattern
from .cache_sparse_transformer import SparsePatternCache
from .configuration_sparse_transformer import SparseTransformerConfig
from .moe_sparse_transformer import (
    SparseTransformerCausalLMOutput,
    SparseTransformerExpertsBase,
    SparseTransformerMaskedLMOutput,
    SparseTransformerModelOutput,
    SparseTransformerMoeFeedForward,
    SparseTransformerMultipleChoiceOutput,
    SparseTransformerQuestionAnsweringOutput,
    SparseTransformerRouter,
    SparseTransformerSequenceClassifierOutput,
    SparseTransformerTokenClassifierOutput,
    add_router_losses,
    init_experts,
    router_fields,
    router_losses,
    wants_router_logits,
)

register_attention()  # "hf_sparse" in AttentionInterface/AttentionMaskInterface (also in a remote-code copy)

# transformers 5 renamed `past_key_values` to `cache` (outputs and forward arguments) in a minor release
CACHE_FIELD = (
    "cache"
    if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithCrossAttentions)}
    else "past_key_values"
)
_MASK_TAKES_Q_LENGTH = "q_length" in inspect.signature(sdpa_mask).parameters

# ----------------------------------------------------------------------------- helpers


def _pick_cache(cache, past_key_values):
    """The cache under whichever name the installed transformers passed it."""
    if cache is not None and past_key_values is not None and cache is not past_key_values:
        raise ValueError("give the cache as `cache` or `past_key_values`, not both")
    return cache if cache is not None else past_key_values


def left_padding(attention_mask):
    """(batch,) number of leading padding tokens per row, or None when no row starts with padding."""
    if attention_mask is None:
        return None
    lead = (attention_mask.cumsum(-1) == 0).sum(-1)  # (B,)
    return None if all_true(lead == 0) else lead


def build_mask(impl, mask_function: PatternMask, batch_size: int, dtype, device):
    """The mask of ``impl``'s ``AttentionMaskInterface`` function for one layer's rule:
    a ``SparseMask`` for ``"hf_sparse"``, a materialised 4D mask for ``"sdpa"``/``"eager"``."""
    impl = impl or ATTN_IMPLEMENTATION
    if impl not in ALL_MASK_ATTENTION_FUNCTIONS:
        raise ValueError(
            f"attn_implementation={impl!r} has no mask function; SparseTransformer supports "
            f"{ATTN_IMPLEMENTATION!r}, 'sdpa' and 'eager'"
        )
    if impl != ATTN_IMPLEMENTATION and isinstance(mask_function.pattern, PerHeadPattern):
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
    return ALL_MASK_ATTENTION_FUNCTIONS[impl](**kw)


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


def make_position_ids(config, input_ids, inputs_embeds, past_length: int) -> torch.LongTensor:
    """(batch, seq) position ids: counted from 0 ("bert"), or RoBERTa's padding-aware ids."""
    shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
    device = input_ids.device if input_ids is not None else inputs_embeds.device
    if config.position_ids_style == "roberta":
        pad = config.pad_token_id
        if input_ids is not None:
            mask = input_ids.ne(pad).long()
            return (torch.cumsum(mask, dim=1) + past_length) * mask + pad
        return torch.arange(pad + 1 + past_length, pad + 1 + past_length + shape[1], device=device).expand(
            shape
        )
    return torch.arange(past_length, past_length + shape[1], device=device).expand(shape)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    """RoPE: cos/sin (batch, seq, head_dim) for position ids."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        self.register_buffer("inv_freq", self.compute_inv_freq(), persistent=False)

    def compute_inv_freq(self) -> torch.Tensor:
        """(D/2,) RoPE frequencies ``theta ** (-2i / D)``."""
        return 1.0 / (self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))

    def forward(self, position_ids, dtype):
        freqs = position_ids[..., None].float() * self.inv_freq  # (B, n, D/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (B, n, D)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(q, k, cos, sin):
    # cos/sin follow q's dtype: under autocast q and k are bf16/fp16 while the rotary table is
    # float32, and the product would promote q and k (not v) back to float32.
    cos, sin = cos[:, None].to(q.dtype), sin[:, None].to(q.dtype)  # (B, 1, n, D)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def first_token_global(input_ids, inputs_embeds):
    shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
    device = input_ids.device if input_ids is not None else inputs_embeds.device
    g = torch.zeros(shape, dtype=torch.long, device=device)
    g[:, 0] = 1
    return g


# ----------------------------------------------------------------------------- modules


class SparseTransformerEmbeddings(nn.Module):
    """Word (+ learned position) (+ token type) embeddings, layer norm, dropout."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.position_embeddings = None
        if config.position_embedding_type == "absolute":
            pad = config.pad_token_id if config.position_ids_style == "roberta" else None
            self.position_embeddings = nn.Embedding(
                config.max_position_embeddings, config.hidden_size, padding_idx=pad
            )
        self.token_type_embeddings = (
            nn.Embedding(config.type_vocab_size, config.hidden_size) if config.type_vocab_size > 0 else None
        )
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.max_positions = config.max_position_embeddings

    def forward(self, input_ids, token_type_ids, position_ids, inputs_embeds):
        x = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros(x.shape[:-1], dtype=torch.long, device=x.device)
            x = x + self.token_type_embeddings(token_type_ids)
        if self.position_embeddings is not None:
            if (
                not torch.compiler.is_compiling()
            ):  # a data-dependent check: skipped under torch.export/compile
                self._check_positions(position_ids)
            x = x + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(x))

    def _check_positions(self, position_ids):
        top = int(position_ids.max()) if position_ids.numel() else 0
        if top >= self.max_positions:
            raise ValueError(
                f"position id {top} is out of range: max_position_embeddings is {self.max_positions} "
                f"(input of length {position_ids.shape[-1]}); extend the model with hf_sparse.conversion or truncate"
            )


class SparseTransformerSelfAttention(nn.Module):
    """Multi-head self-attention restricted to the layer's pattern (Longformer-style globals optional)."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.pattern = config.layer_pattern(layer_idx)
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
            return out.transpose(1, 2).reshape(B, n, -1), weights
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
                self.config._attn_implementation, eager_attention_forward
            )
        elif self.config._attn_implementation in (
            None,
            "eager",
        ):  # older transformers 5 releases: no get_interface
            attention = eager_attention_forward
        else:
            attention = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
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
        if cfg.global_projections and global_attention_mask is not None and bool(global_attention_mask.any()):
            out = self._global_rows(
                hidden_states, out.transpose(1, 2), query_mask, global_attention_mask, dropout
            )
            out = out.transpose(1, 2)
        if query_mask is not None:  # padding queries output zeros (Longformer convention)
            out = out * query_mask.to(out.dtype)[:, :, None, None]
        return out.reshape(B, n, -1), (weights if output_attentions else None)

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

    def _global_rows(self, hidden, out, attention_mask, global_attention_mask, dropout):
        """Longformer: global tokens' outputs from their own projections, over every key."""
        out = out.clone()
        kg = self._heads(self.key_global(hidden))
        vg = self._heads(self.value_global(hidden))
        for b in range(hidden.shape[0]):
            rows = torch.nonzero(global_attention_mask[b]).flatten()
            if rows.numel() == 0:
                continue
            qg = self._heads(self.query_global(hidden[b : b + 1, rows]))  # (1, H, G, D)
            scores = torch.matmul(qg, kg[b : b + 1].transpose(-1, -2)) * self.scale  # (1, H, G, n)
            if attention_mask is not None:
                scores = scores.masked_fill(~attention_mask[b : b + 1, None, None, :].bool(), float("-inf"))
            probs = F.dropout(
                torch.softmax(scores.float(), dim=-1).to(qg.dtype), p=dropout, training=dropout > 0
            )
            out[b, :, rows] = torch.matmul(probs, vg[b : b + 1])[0]
        return out


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


class SparseTransformerIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class SparseTransformerOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


@use_experts_implementation(has_gate=False, has_bias=True)
class SparseTransformerExperts(SparseTransformerExpertsBase):
    """The experts of a MoE layer (``moe_sparse_transformer``), dispatched on ``config._experts_implementation``."""


class SparseTransformerLayer(GradientCheckpointingLayer):
    """Post-layer-norm block: sparse self-attention, feed-forward (dense, or a mixture of experts in the
    layers ``config.is_moe_layer`` names). Returns (hidden states, attention weights, router logits or None)."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.attention = SparseTransformerAttention(config, layer_idx)
        if config.is_moe_layer(layer_idx):
            self.moe = SparseTransformerMoeFeedForward(config, SparseTransformerExperts(config))
        else:
            self.intermediate = SparseTransformerIntermediate(config)
            self.output = SparseTransformerOutput(config)

    def forward(self, hidden_states, **kwargs):
        attn, weights = self.attention(hidden_states, **kwargs)
        if hasattr(self, "moe"):
            out, router_logits = self.moe(attn, kwargs.get("query_mask"))
            return out, weights, router_logits
        return self.output(self.intermediate(attn), attn), weights, None


class SparseTransformerEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList(
            [SparseTransformerLayer(config, i) for i in range(config.num_hidden_layers)]
        )

    def forward(
        self, hidden_states, layer_masks, output_hidden_states=False, output_attentions=False, **kwargs
    ):
        all_hidden, all_attn, all_router_logits = [], [], []
        for layer, mask in zip(self.layer, layer_masks):
            if output_hidden_states:
                all_hidden.append(hidden_states)
            hidden_states, weights, router_logits = layer(
                hidden_states, attention_mask=mask, output_attentions=output_attentions, **kwargs
            )
            if output_attentions:
                all_attn.append(weights)
            if router_logits is not None:
                all_router_logits.append(router_logits)
        if output_hidden_states:
            all_hidden.append(hidden_states)
        return (
            hidden_states,
            (tuple(all_hidden) if output_hidden_states else None),
            (tuple(all_attn) if output_attentions else None),
            tuple(all_router_logits),
        )


class SparseTransformerPooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        return self.activation(self.dense(hidden_states[:, 0]))


class SparseTransformerLMHead(nn.Module):
    """dense -> gelu -> layer norm -> vocabulary projection (RoBERTa's head). With
    ``tie_word_embeddings`` the projection's weight is the input embedding matrix and its bias is
    ``lm_head.bias`` (declared in ``_tied_weights_keys``, tied by ``PreTrainedModel.tie_weights``); untied,
    ``decoder.weight`` and ``decoder.bias`` are parameters of their own, saved and loaded as such."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, features):
        return self.decoder(self.layer_norm(F.gelu(self.dense(features))))


class SparseTransformerClassificationHead(nn.Module):
    """RoBERTa's sentence head on the first token: dense -> tanh -> projection."""

    def __init__(self, config):
        super().__init__()
        rate = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(rate)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, features):
        x = self.dropout(features[:, 0])
        x = self.dropout(torch.tanh(self.dense(x)))
        return self.out_proj(x)


# ----------------------------------------------------------------------------- pretrained base


class SparseTransformerPreTrainedModel(PreTrainedModel):
    config_class = SparseTransformerConfig
    config: SparseTransformerConfig
    base_model_prefix = "sparse_transformer"
    supports_gradient_checkpointing = True
    _no_split_modules = ["SparseTransformerEmbeddings", "SparseTransformerLayer"]
    # attention goes through ALL_ATTENTION_FUNCTIONS: "hf_sparse" (default), "sdpa" and "eager"; flash and
    # flex attention cannot take an arbitrary materialised pattern mask
    _supports_sdpa = True
    _supports_flash_attn = False
    _supports_flex_attn = False
    _supports_attention_backend = True
    # MoE layers' router logits: the first output of every router (returned with output_router_logits=True)
    _can_record_outputs = {"router_logits": OutputRecorder(SparseTransformerRouter, index=0)}

    def get_correct_attn_implementation(self, requested_attention, is_init_check=False):
        """``"hf_sparse"`` unless another implementation is asked for."""
        requested = ATTN_IMPLEMENTATION if requested_attention is None else requested_attention
        return super().get_correct_attn_implementation(requested, is_init_check)

    def get_correct_experts_implementation(self, requested_experts):
        """``"eager"`` (experts grouped by expert, one matmul each) unless another is asked for: on CPU
        transformers' ``"grouped_mm"`` default runs 4x and ``"batched_mm"`` 11x slower (forward + backward of
        pipelines/lm/moe.yaml's model); on GPU ask for ``experts_implementation="grouped_mm"``."""
        return super().get_correct_experts_implementation(
            "eager" if requested_experts is None else requested_experts
        )

    @torch.no_grad()
    def _init_weights(self, module):
        # transformers.initialization skips parameters already loaded from a checkpoint (a tied bias too)
        super()._init_weights(module)
        if isinstance(module, SparseTransformerLMHead):
            init.zeros_(module.bias)
        if isinstance(module, AdaptiveSpan):
            init.constant_(module.span, module.init_fraction)
        if isinstance(module, SparseTransformerExpertsBase):
            init_experts(module, self.config.initializer_range)
        if isinstance(module, SparseTransformerRouter):
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
        if isinstance(module, RotaryEmbedding):
            # non-persistent, so never in a checkpoint: from_pretrained leaves it uninitialised otherwise
            module.inv_freq.copy_(module.compute_inv_freq())  # deterministic: always recomputed

    #: set by ``hf_sparse`` on import: writes a self-contained copy of the modelling code and
    #: ``auto_map`` next to the weights (unset in that copy itself, which needs no hf-sparse)
    export_code_hook = None

    def save_pretrained(self, save_directory, *args, **kwargs):
        out = super().save_pretrained(save_directory, *args, **kwargs)
        if type(self).export_code_hook is not None and kwargs.get("is_main_process", True):
            type(self).export_code_hook(self, save_directory)
        return out


def with_span_penalty(model, loss):
    """A head's loss plus the adaptive-span penalty, in training mode only (evaluation losses stay
    the task's loss, comparable across models)."""
    if loss is None or not model.training or model.config.adaptive_span is None:
        return loss
    return loss + model.sparse_transformer.adaptive_span_loss().to(loss.dtype)


def _return(return_dict, output, config):
    use = config.return_dict if return_dict is None else return_dict
    return output if use else output.to_tuple()


class SparseTransformerModel(SparseTransformerPreTrainedModel):
    """The bare encoder (or decoder, with ``is_decoder=True``) outputting hidden states."""

    def __init__(self, config: SparseTransformerConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = SparseTransformerEmbeddings(config)
        self.rotary = (
            RotaryEmbedding(config.head_dim, config.rope_theta)
            if config.position_embedding_type == "rotary"
            else None
        )
        self.encoder = SparseTransformerEncoder(config)
        self.pooler = SparseTransformerPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        global_attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        past_key_values=None,
        use_cache=None,
        cache_position=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        cache=None,
        output_router_logits=None,
        **kwargs,
    ) -> SparseTransformerModelOutput:
        r"""
        attention_mask (`(batch, seq)`): 1 for tokens, 0 for padding (with a cache: over past + new tokens).
            With left padding, patterns count positions from each row's first token.
        global_attention_mask (`(batch, seq)`): 1 for global tokens (attend and are attended everywhere).
        cache (`SparsePatternCache`): decoder cache (also accepted as `past_key_values`, the name older
            transformers 5 releases use); created when `use_cache` and none is given.
        cache_position (`(seq,)`): positions of the new tokens (default: after the cached ones).
        output_router_logits (`bool`): return the MoE layers' router logits (default: the config's).
        """
        cfg = self.config
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids or inputs_embeds")
        output_attentions = cfg.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        use_cache = bool(cfg.is_decoder and (cfg.use_cache if use_cache is None else use_cache))
        cache = self._cache(_pick_cache(cache, past_key_values), use_cache)
        ref = input_ids if input_ids is not None else inputs_embeds[..., 0]
        B, n = ref.shape
        past = cache.get_seq_length() if cache is not None else 0
        device = ref.device
        if cache_position is None:
            cache_position = torch.arange(past, past + n, device=device)
        if position_ids is None:
            position_ids = make_position_ids(cfg, input_ids, inputs_embeds, past)
        if attention_mask is not None:
            attention_mask = attention_mask.to(device).long()
            if attention_mask.shape[-1] != past + n:
                raise ValueError(
                    f"attention_mask covers {attention_mask.shape[-1]} positions, expected {past + n} (cached + new)"
                )
        if global_attention_mask is not None and all_true(global_attention_mask == 0):
            global_attention_mask = None
        if global_attention_mask is not None and past > 0:
            raise ValueError("global_attention_mask cannot be combined with a KV cache; pass use_cache=False")
        row_offsets = left_padding(attention_mask) if cfg.is_decoder else None
        hidden = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)
        rope = self.rotary(position_ids, hidden.dtype) if self.rotary is not None else None
        masks = self._layer_masks(
            B,
            n,
            past,
            cache,
            cache_position,
            attention_mask,
            global_attention_mask,
            row_offsets,
            hidden.dtype,
            output_attentions,
        )
        hidden, all_hidden, all_attn, all_router_logits = self.encoder(
            hidden,
            masks,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            query_mask=None if attention_mask is None else attention_mask[:, -n:],
            global_attention_mask=global_attention_mask,
            position_embeddings=rope,
            cache=cache,
            cache_position=cache_position,
            row_offsets=row_offsets,
            key_padding_mask=attention_mask,
        )
        pooled = self.pooler(hidden) if self.pooler is not None else None
        token_mask = None if attention_mask is None else attention_mask[:, -n:]
        aux_loss, z_loss = router_losses(cfg, all_router_logits, token_mask)
        out = SparseTransformerModelOutput(
            last_hidden_state=hidden,
            pooler_output=pooled,
            hidden_states=all_hidden,
            attentions=all_attn,
            aux_loss=aux_loss,
            router_z_loss=z_loss,
            router_logits=all_router_logits
            if all_router_logits and wants_router_logits(cfg, output_router_logits)
            else None,
            **{CACHE_FIELD: cache if use_cache else None},
        )
        return _return(return_dict, out, cfg)

    def adaptive_span_loss(self):
        """The paper's L1 span penalty: ``adaptive_span.loss_coef`` times the sum over layers of the mean
        span (tokens); ``None`` without adaptive span."""
        if self.config.adaptive_span is None:
            return None
        total = sum(layer.attention.self.adaptive_span.penalty() for layer in self.encoder.layer)
        return self.config.adaptive_span["loss_coef"] * total

    def _layer_masks(
        self,
        B,
        n,
        past,
        cache,
        cache_position,
        attention_mask,
        global_attention_mask,
        row_offsets,
        dtype,
        weights,
    ):
        """One mask per layer from the mask interface of ``config._attn_implementation``; layers with
        the same pattern share it (their caches hold the same positions)."""
        impl = self.config._attn_implementation
        if weights and impl not in (None, "eager", ATTN_IMPLEMENTATION):
            impl = "eager"  # the layers fall back to eager attention to return weights
        specs = self.config.attention_pattern
        padding = None if attention_mask is None else attention_mask.bool()  # (B, past + n)
        g = None if global_attention_mask is None else global_attention_mask.to(cache_position.device).bool()
        masks, made = [], {}
        for i, layer in enumerate(self.encoder.layer):
            key = json.dumps(specs[i], sort_keys=True, default=str) if isinstance(specs, list) else ""
            if key not in made:
                kpos = cache.key_positions(i, cache_position) if cache is not None else cache_position
                rule = PatternMask(
                    layer.attention.self.pattern, past, n, kpos,
                    padding=None if padding is None else padding[:, kpos], global_tokens=g, row_offsets=row_offsets,
                    key_start=0 if past == 0 else None,  # no data-dependent check without cached keys
                )  # fmt: skip
                made[key] = build_mask(impl, rule, B, dtype, cache_position.device)
            masks.append(made[key])
        return masks

    def _cache(self, past_key_values, use_cache):
        """The pattern-aware cache; an empty generic Cache (what generate() makes) is replaced."""
        if not use_cache:
            return None
        if past_key_values is None:
            return SparsePatternCache(self.config)
        if isinstance(past_key_values, SparsePatternCache):
            return past_key_values
        if isinstance(past_key_values, Cache) and past_key_values.get_seq_length() == 0:
            return SparsePatternCache(self.config)
        raise TypeError(
            f"the cache must be a SparsePatternCache (keys are kept per pattern), got {type(past_key_values).__name__}"
        )


class SparseTransformerForMaskedLM(SparseTransformerPreTrainedModel):
    _tied_weights_keys = {
        "lm_head.decoder.weight": "sparse_transformer.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config):
        super().__init__(config)
        self.sparse_transformer = SparseTransformerModel(config, add_pooling_layer=False)
        self.lm_head = SparseTransformerLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new):
        self.lm_head.decoder = new

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None, return_dict=None,
                output_router_logits=None, **kwargs) -> SparseTransformerMaskedLMOutput:  # fmt: skip
        """``labels`` (batch, seq): token ids to predict, -100 where no loss is taken."""
        out = self.sparse_transformer(
            input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, return_dict=True,
            output_router_logits=output_router_logits,
        )  # fmt: skip
        logits = self.lm_head(out.last_hidden_state)
        loss = None
        if labels is not None:
            loss = CrossEntropyLoss()(
                logits.view(-1, self.config.vocab_size), labels.to(logits.device).view(-1)
            )
        loss = with_span_penalty(self, loss)
        res = SparseTransformerMaskedLMOutput(
            loss=add_router_losses(loss, self.config, out),
            logits=logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            **router_fields(out),
        )
        return _return(return_dict, res, self.config)


class SparseTransformerForCausalLM(SparseTransformerPreTrainedModel, GenerationMixin):
    """Decoder language model (``is_decoder=True``, causal patterns) with pattern-aware caching."""

    _tied_weights_keys = {
        "lm_head.decoder.weight": "sparse_transformer.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config):
        if not config.is_decoder:
            raise ValueError(
                "SparseTransformerForCausalLM needs a config with is_decoder=True (and causal patterns)"
            )
        super().__init__(config)
        self.sparse_transformer = SparseTransformerModel(config, add_pooling_layer=False)
        self.lm_head = SparseTransformerLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new):
        self.lm_head.decoder = new

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, past_key_values=None, use_cache=None, cache_position=None, labels=None,
                output_attentions=None, output_hidden_states=None, return_dict=None, logits_to_keep=0, cache=None,
                output_router_logits=None, **kwargs) -> SparseTransformerCausalLMOutput:  # fmt: skip
        """``labels`` (batch, seq): the input ids (shifted inside), -100 where no loss is taken. The cache
        is read as ``cache`` (recent transformers) or ``past_key_values``; ``logits_to_keep``: an int (the
        last that many positions, 0 = all) or a 1D tensor of positions."""
        out = self.sparse_transformer(
            input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, cache=_pick_cache(cache, past_key_values), use_cache=use_cache,
            cache_position=cache_position, output_attentions=output_attentions, output_hidden_states=output_hidden_states,
            return_dict=True, output_router_logits=output_router_logits,
        )  # fmt: skip
        hidden = out.last_hidden_state
        if isinstance(logits_to_keep, int):
            hidden = hidden[:, -logits_to_keep:] if logits_to_keep > 0 else hidden
        else:
            hidden = hidden[:, logits_to_keep]
        logits = self.lm_head(hidden)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        loss = with_span_penalty(self, loss)
        res = SparseTransformerCausalLMOutput(
            loss=add_router_losses(loss, self.config, out),
            logits=logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            **router_fields(out),
            **{CACHE_FIELD: out.get(CACHE_FIELD)},
        )
        return _return(return_dict, res, self.config)


class _FirstTokenGlobalMixin:
    """Heads that read the first token make it global unless the caller gives global tokens."""

    def _globals(self, global_attention_mask, input_ids, inputs_embeds):
        if (
            global_attention_mask is None
            and self.config.global_first_token
            and self.config.adaptive_span is None
        ):
            return first_token_global(input_ids, inputs_embeds)
        return global_attention_mask


class SparseTransformerForSequenceClassification(_FirstTokenGlobalMixin, SparseTransformerPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.sparse_transformer = SparseTransformerModel(config, add_pooling_layer=False)
        self.classifier = SparseTransformerClassificationHead(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None, return_dict=None,
                output_router_logits=None, **kwargs) -> SparseTransformerSequenceClassifierOutput:  # fmt: skip
        """``labels``: class ids (single-label), floats (regression) or multi-hot floats (multi-label)."""
        out = self.sparse_transformer(
            input_ids, attention_mask=attention_mask, global_attention_mask=self._globals(global_attention_mask, input_ids, inputs_embeds),
            token_type_ids=token_type_ids, position_ids=position_ids, inputs_embeds=inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, return_dict=True,
            output_router_logits=output_router_logits,
        )  # fmt: skip
        logits = self.classifier(out.last_hidden_state)
        loss = None if labels is None else sequence_loss(self.config, logits, labels.to(logits.device))
        loss = with_span_penalty(self, loss)
        res = SparseTransformerSequenceClassifierOutput(
            loss=add_router_losses(loss, self.config, out),
            logits=logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            **router_fields(out),
        )
        return _return(return_dict, res, self.config)


def sequence_loss(config, logits, labels):
    """Regression / single-label / multi-label loss, chosen as transformers' heads do."""
    if config.problem_type is None:
        if config.num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        return (
            MSELoss()(logits.squeeze(-1), labels.squeeze(-1).to(logits.dtype))
            if config.num_labels == 1
            else MSELoss()(logits, labels)
        )
    if config.problem_type == "single_label_classification":
        return CrossEntropyLoss()(logits.view(-1, config.num_labels), labels.view(-1))
    return BCEWithLogitsLoss()(logits, labels.to(logits.dtype))


class SparseTransformerForTokenClassification(SparseTransformerPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.sparse_transformer = SparseTransformerModel(config, add_pooling_layer=False)
        rate = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(rate)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None, return_dict=None,
                output_router_logits=None, **kwargs) -> SparseTransformerTokenClassifierOutput:  # fmt: skip
        """``labels`` (batch, seq): class ids, -100 where no loss is taken."""
        out = self.sparse_transformer(
            input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, return_dict=True,
            output_router_logits=output_router_logits,
        )  # fmt: skip
        logits = self.classifier(self.dropout(out.last_hidden_state))
        loss = None
        if labels is not None:
            loss = CrossEntropyLoss()(logits.view(-1, self.num_labels), labels.to(logits.device).view(-1))
        loss = with_span_penalty(self, loss)
        res = SparseTransformerTokenClassifierOutput(
            loss=add_router_losses(loss, self.config, out),
            logits=logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            **router_fields(out),
        )
        return _return(return_dict, res, self.config)


class SparseTransformerForMultipleChoice(_FirstTokenGlobalMixin, SparseTransformerPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.sparse_transformer = SparseTransformerModel(config)
        rate = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(rate)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None, return_dict=None,
                output_router_logits=None, **kwargs) -> SparseTransformerMultipleChoiceOutput:  # fmt: skip
        """Inputs are (batch, num_choices, seq); ``labels`` (batch,) is the index of the right choice."""
        ref = input_ids if input_ids is not None else inputs_embeds
        choices = ref.shape[1]

        def flat(t):
            return None if t is None else t.reshape(-1, *t.shape[2:])

        flat_ids, flat_embeds = flat(input_ids), flat(inputs_embeds)
        out = self.sparse_transformer(
            flat_ids, attention_mask=flat(attention_mask),
            global_attention_mask=self._globals(flat(global_attention_mask), flat_ids, flat_embeds),
            token_type_ids=flat(token_type_ids), position_ids=flat(position_ids), inputs_embeds=flat_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, return_dict=True,
            output_router_logits=output_router_logits,
        )  # fmt: skip
        logits = self.classifier(self.dropout(out.pooler_output)).view(-1, choices)
        loss = None if labels is None else CrossEntropyLoss()(logits, labels.to(logits.device))
        loss = with_span_penalty(self, loss)
        res = SparseTransformerMultipleChoiceOutput(
            loss=add_router_losses(loss, self.config, out),
            logits=logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            **router_fields(out),
        )
        return _return(return_dict, res, self.config)


class SparseTransformerForQuestionAnswering(_FirstTokenGlobalMixin, SparseTransformerPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.sparse_transformer = SparseTransformerModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, start_positions=None, end_positions=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, output_router_logits=None,
                **kwargs) -> SparseTransformerQuestionAnsweringOutput:  # fmt: skip
        """Extractive QA: start/end logits per token; positions outside the input are clamped (ignored)."""
        out = self.sparse_transformer(
            input_ids, attention_mask=attention_mask, global_attention_mask=self._globals(global_attention_mask, input_ids, inputs_embeds),
            token_type_ids=token_type_ids, position_ids=position_ids, inputs_embeds=inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, return_dict=True,
            output_router_logits=output_router_logits,
        )  # fmt: skip
        start_logits, end_logits = (
            t.squeeze(-1).contiguous() for t in self.qa_outputs(out.last_hidden_state).split(1, dim=-1)
        )
        loss = None
        if start_positions is not None and end_positions is not None:
            n = start_logits.shape[1]
            fn = CrossEntropyLoss(ignore_index=n)
            loss = (
                fn(start_logits, start_positions.clamp(0, n).to(start_logits.device))
                + fn(end_logits, end_positions.clamp(0, n).to(end_logits.device))
            ) / 2
        loss = with_span_penalty(self, loss)
        res = SparseTransformerQuestionAnsweringOutput(
            loss=add_router_losses(loss, self.config, out),
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            **router_fields(out),
        )
        return _return(return_dict, res, self.config)


#: Default LoRA target modules for every SparseTransformer head (also registered with peft).
LORA_TARGET_MODULES = ["query", "key", "value", "dense"]

__all__ = [
    "LORA_TARGET_MODULES",
    "SparsePatternCache",
    "SparseTransformerForCausalLM",
    "SparseTransformerForMaskedLM",
    "SparseTransformerForMultipleChoice",
    "SparseTransformerForQuestionAnswering",
    "SparseTransformerForSequenceClassification",
    "SparseTransformerForTokenClassification",
    "SparseTransformerModel",
    "SparseTransformerPreTrainedModel",
]
