"""Sparse mixture-of-experts feed-forward of SparseTransformer: router, expert computation, auxiliary losses.

A MoE layer (``config.is_moe_layer(i)``) replaces the block's dense feed-forward (``intermediate`` +
``output``) with :class:`SparseTransformerMoeFeedForward`: a linear router picks ``num_experts_per_tok`` of
``num_experts`` expert feed-forwards per token (softmax in float32, top-k, weights renormalised to sum to 1
unless ``norm_topk_prob=False``), the experts run on the tokens routed to them, and their weighted sum goes
through the block's dropout, residual and layer norm as the dense feed-forward's output does.

Conventions follow transformers' MoE models (``models/mixtral``, ``models/qwen2_moe``,
``integrations/moe.py``): experts are 3D parameters (``up_proj`` (E, I, H), ``down_proj`` (E, H, I) and their
biases, non-gated: ``down(act(up(x)))``), whose eager forward (:func:`experts_forward`) groups the
token-expert assignments by expert (one sort, one matmul per expert that has tokens, no loop over tokens);
the experts class in ``modeling_sparse_transformer`` takes transformers' ``@use_experts_implementation``
(``batched_mm``/``grouped_mm`` give the same result). Router logits are float32, (batch * seq, E) per layer.

Auxiliary losses (:func:`load_balancing_loss`, :func:`router_z_loss`) are computed by the base model from
every layer's router logits, over non-padding tokens only, and every head adds
``router_aux_loss_coef * aux_loss + router_z_loss_coef * router_z_loss`` to its loss (:func:`add_router_losses`).

Expert capacity (``expert_capacity_factor``, training only): each expert takes at most
``ceil(factor * tokens * k / E)`` assignments per forward (``tokens``: non-padding tokens of the batch).
Assignments are served in priority order: every token's first choice before any second choice, and within
one choice in position order (batch row, then sequence position). An assignment beyond its expert's capacity
is dropped: its weight becomes 0 (the token's other assignments keep their weights), so a token dropped by
all its experts passes through the block's residual unchanged. At inference every assignment is served, so
cached generation equals a full forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN
from transformers.modeling_outputs import (
    BaseModelOutputWithPoolingAndCrossAttentions,
    CausalLMOutputWithCrossAttentions,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

# ----------------------------------------------------------------------------- routing


def route(logits: torch.Tensor, top_k: int, normalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, E) float32 router logits -> (T, k) weights and (T, k) expert indices: softmax, top-k, and (with
    ``normalize``) weights renormalised to sum to 1 per token."""
    probs = torch.softmax(logits.float(), dim=-1)  # (T, E)
    weights, index = torch.topk(probs, top_k, dim=-1)  # (T, k)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, index


def expert_capacity(num_tokens: int, num_experts: int, top_k: int, factor: float) -> int:
    """Assignments one expert may take: ``ceil(factor * num_tokens * top_k / num_experts)`` (at least 1)."""
    return max(1, math.ceil(factor * num_tokens * top_k / num_experts))


def capacity_keep(index: torch.Tensor, num_experts: int, capacity: int, token_mask=None) -> torch.Tensor:
    """(T, k) bool: which assignments fit their expert's capacity. Priority: all first choices (slot 0) in
    token order, then all second choices, ...; padding tokens (``token_mask`` 0) take no capacity (and are
    kept: their outputs are never used)."""
    T, k = index.shape
    slot_major = index.t().reshape(-1)  # (k*T,) slot 0 of every token first
    onehot = F.one_hot(slot_major, num_experts)  # (k*T, E)
    if token_mask is not None:
        onehot = onehot * token_mask.reshape(1, T, 1).expand(k, T, 1).reshape(k * T, 1).to(onehot.dtype)
    rank = (torch.cumsum(onehot, dim=0) * onehot).sum(
        -1
    )  # (k*T,) 1-based place in its expert's queue, 0: padding
    return (rank <= capacity).view(k, T).t()  # (T, k)


class SparseTransformerRouter(nn.Module):
    """Linear router: (T, H) hidden states -> (T, E) float32 logits, (T, k) weights, (T, k) expert indices.

    ``router_jitter_noise`` > 0 multiplies the router's input by uniform noise in [1 - eps, 1 + eps] during
    training (Switch Transformers; the experts see the unchanged states)."""

    def __init__(self, config):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.num_experts = config.num_experts
        self.normalize = config.norm_topk_prob
        self.jitter = config.router_jitter_noise
        self.weight = nn.Parameter(torch.empty(config.num_experts, config.hidden_size))

    def forward(self, hidden_states):
        if self.training and self.jitter > 0:
            noise = torch.empty_like(hidden_states).uniform_(1.0 - self.jitter, 1.0 + self.jitter)
            hidden_states = hidden_states * noise
        logits = F.linear(hidden_states.float(), self.weight.float())  # (T, E) in float32
        weights, index = route(logits, self.top_k, self.normalize)
        return logits, weights, index


# ----------------------------------------------------------------------------- experts


class SparseTransformerExpertsBase(nn.Module):
    """``num_experts`` feed-forwards ``down(act(up(x)))`` stored as 3D parameters (transformers' layout with
    ``has_gate=False, has_bias=True``). The decorated subclass in ``modeling_sparse_transformer`` dispatches
    on ``config._experts_implementation``; ``"eager"`` is :func:`experts_forward`."""

    def __init__(self, config):
        super().__init__()
        self.num_experts = config.num_experts
        self.top_k = config.num_experts_per_tok
        inner = config.moe_intermediate_size or config.intermediate_size
        self.up_proj = nn.Parameter(torch.empty(config.num_experts, inner, config.hidden_size))
        self.up_proj_bias = nn.Parameter(torch.empty(config.num_experts, inner))
        self.down_proj = nn.Parameter(torch.empty(config.num_experts, config.hidden_size, inner))
        self.down_proj_bias = nn.Parameter(torch.empty(config.num_experts, config.hidden_size))
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states, top_k_index, top_k_weights):
        return experts_forward(self, hidden_states, top_k_index, top_k_weights)


def experts_forward(experts, hidden_states, top_k_index, top_k_weights):
    """(T, H) states, (T, k) indices and weights -> (T, H) sum of the weighted expert outputs. The T*k
    assignments are sorted by expert; each expert with assignments runs once on its contiguous rows."""
    T, k = top_k_index.shape
    flat = top_k_index.reshape(-1)  # (T*k,)
    order = torch.argsort(flat, stable=True)  # assignments grouped by expert
    token = order // k  # (T*k,) token of each sorted assignment
    counts = torch.bincount(flat, minlength=experts.num_experts).tolist()
    x = hidden_states[token]  # (T*k, H)
    outs, start = [], 0
    for e, count in enumerate(counts):
        if count == 0:
            continue
        rows = x[start : start + count]  # (count, H)
        h = experts.act_fn(F.linear(rows, experts.up_proj[e], experts.up_proj_bias[e]))  # (count, I)
        outs.append(F.linear(h, experts.down_proj[e], experts.down_proj_bias[e]))  # (count, H)
        start += count
    if not outs:  # no tokens
        return torch.zeros_like(hidden_states)
    y = torch.cat(outs) * top_k_weights.reshape(-1)[order, None].to(hidden_states.dtype)  # (T*k, H)
    return torch.zeros_like(hidden_states).index_add_(0, token, y)


# ----------------------------------------------------------------------------- the block


class SparseTransformerMoeFeedForward(nn.Module):
    """The MoE feed-forward of one block: ``LayerNorm(dropout(sum_k w_k * expert_k(x)) + x)`` (post-layer-norm,
    as the dense ``intermediate`` + ``output``). ``experts``: the experts module (built by the modeling file)."""

    def __init__(self, config, experts: nn.Module):
        super().__init__()
        self.config = config
        self.router = SparseTransformerRouter(config)
        self.experts = experts
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, token_mask=None):
        """(B, n, H) states, (B, n) ``token_mask`` (1 token, 0 padding) -> (B, n, H), (B*n, E) router logits."""
        B, n, H = hidden_states.shape
        flat = hidden_states.reshape(B * n, H)  # (T, H)
        logits, weights, index = self.router(flat)
        factor = self.config.expert_capacity_factor
        if factor is not None and self.training:
            mask = None if token_mask is None else token_mask.reshape(-1)
            tokens = B * n if mask is None else int(mask.sum())
            capacity = expert_capacity(tokens, self.router.num_experts, self.router.top_k, factor)
            weights = weights * capacity_keep(index, self.router.num_experts, capacity, mask)
        out = self.experts(flat, index, weights.to(flat.dtype)).reshape(B, n, H)
        return self.LayerNorm(self.dropout(out) + hidden_states), logits


def init_experts(module: nn.Module, std: float) -> None:
    """Initialise an experts module as the dense feed-forward's linears are (normal weights, zero biases)."""
    from transformers import initialization as init

    init.normal_(module.up_proj, mean=0.0, std=std)
    init.normal_(module.down_proj, mean=0.0, std=std)
    init.zeros_(module.up_proj_bias)
    init.zeros_(module.down_proj_bias)


# ----------------------------------------------------------------------------- losses


def load_balancing_loss(router_logits, num_experts: int, top_k: int, token_mask=None) -> torch.Tensor:
    """Switch Transformers' load-balancing loss over every MoE layer: ``E * sum_e f_e * P_e``, where ``f_e`` is
    the fraction of top-k assignments sent to expert ``e`` and ``P_e`` the mean router probability of ``e``,
    both over the non-padding tokens of all layers (``token_mask`` (B, n), 1 token, 0 padding). 1.0 when
    perfectly balanced (for top-1; ``top_k`` for top-k). Same value as transformers'
    ``load_balancing_loss_func``."""
    logits = torch.cat([layer.float() for layer in router_logits], dim=0)  # (L*T, E)
    probs = torch.softmax(logits, dim=-1)
    _, index = torch.topk(probs, top_k, dim=-1)  # (L*T, k)
    assigned = F.one_hot(index, num_experts).sum(1).float()  # (L*T, E)
    if token_mask is None:
        weight = torch.ones(logits.shape[0], 1, device=logits.device)
    else:
        weight = (
            token_mask.reshape(-1).float().to(logits.device).repeat(len(router_logits))[:, None]
        )  # (L*T, 1)
    total = weight.sum().clamp_min(1.0)
    fraction = (assigned * weight).sum(0) / total  # (E,)
    prob = (probs * weight).sum(0) / total  # (E,)
    return num_experts * torch.sum(fraction * prob)


def router_z_loss(router_logits, token_mask=None) -> torch.Tensor:
    """ST-MoE's router z-loss: mean over non-padding tokens and layers of ``logsumexp(logits) ** 2``."""
    logits = torch.cat([layer.float() for layer in router_logits], dim=0)  # (L*T, E)
    z = torch.logsumexp(logits, dim=-1) ** 2  # (L*T,)
    if token_mask is None:
        return z.mean()
    weight = token_mask.reshape(-1).float().to(z.device).repeat(len(router_logits))
    return (z * weight).sum() / weight.sum().clamp_min(1.0)


def router_losses(config, router_logits, token_mask=None):
    """(aux_loss, router_z_loss) of a forward's router logits, or (None, None) without MoE layers."""
    if not router_logits:
        return None, None
    return (
        load_balancing_loss(router_logits, config.num_experts, config.num_experts_per_tok, token_mask),
        router_z_loss(router_logits, token_mask),
    )


def add_router_losses(loss, config, output, weight=1.0):
    """A head's ``loss`` plus ``weight * (router_aux_loss_coef * aux_loss + router_z_loss_coef * router_z_loss)``
    of the base ``output`` (unchanged without MoE layers or without a loss). ``weight``: 1, or a number or 0-dim
    tensor (the micro-batch's share of an accumulated batch's labels: ``batch_share``)."""
    if loss is None or getattr(output, "aux_loss", None) is None:
        return loss
    extra = config.router_aux_loss_coef * output.aux_loss + config.router_z_loss_coef * output.router_z_loss
    return loss + (weight * extra).to(loss.device, loss.dtype)


def router_fields(output) -> dict:
    """The MoE fields a head copies from the base model's ``output`` (which returned ``router_logits`` only
    when asked)."""
    return {name: getattr(output, name, None) for name in ("aux_loss", "router_z_loss", "router_logits")}


def wants_router_logits(config, output_router_logits) -> bool:
    """An explicit ``output_router_logits`` argument wins over ``config.output_router_logits``."""
    if output_router_logits is not None:
        return bool(output_router_logits)
    return bool(getattr(config, "output_router_logits", False))


# ----------------------------------------------------------------------------- parameter counts


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(total, active per token) parameters of a model: an experts module counts ``k / E`` of its parameters
    as active (each token runs ``num_experts_per_tok`` of them); shared (tied) parameters count once."""
    seen, total, inactive = set(), 0, 0
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            total += p.numel()
            if isinstance(module, SparseTransformerExpertsBase):
                k = module.top_k
                inactive += p.numel() * (module.num_experts - k) // module.num_experts
    return total, total - inactive


# ----------------------------------------------------------------------------- outputs


@dataclass
class SparseTransformerModelOutput(BaseModelOutputWithPoolingAndCrossAttentions):
    """The base model's output; with MoE layers also ``aux_loss`` (load balancing, unscaled),
    ``router_z_loss`` and, when asked, ``router_logits`` (one (batch * seq, num_experts) float32 tensor per
    MoE layer)."""

    aux_loss: torch.FloatTensor | None = None
    router_z_loss: torch.FloatTensor | None = None
    router_logits: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class SparseTransformerCausalLMOutput(CausalLMOutputWithCrossAttentions):
    """Causal-LM output with the MoE fields of :class:`SparseTransformerModelOutput` (``loss`` includes the
    scaled router losses)."""

    aux_loss: torch.FloatTensor | None = None
    router_z_loss: torch.FloatTensor | None = None
    router_logits: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class SparseTransformerMaskedLMOutput(MaskedLMOutput):
    """Masked-LM output with the MoE fields (``loss`` includes the scaled router losses)."""

    aux_loss: torch.FloatTensor | None = None
    router_z_loss: torch.FloatTensor | None = None
    router_logits: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class SparseTransformerSequenceClassifierOutput(SequenceClassifierOutput):
    """Sequence-classification output with the MoE fields (``loss`` includes the scaled router losses)."""

    aux_loss: torch.FloatTensor | None = None
    router_z_loss: torch.FloatTensor | None = None
    router_logits: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class SparseTransformerTokenClassifierOutput(TokenClassifierOutput):
    """Token-classification output with the MoE fields (``loss`` includes the scaled router losses)."""

    aux_loss: torch.FloatTensor | None = None
    router_z_loss: torch.FloatTensor | None = None
    router_logits: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class SparseTransformerMultipleChoiceOutput(MultipleChoiceModelOutput):
    """Multiple-choice output with the MoE fields (``loss`` includes the scaled router losses)."""

    aux_loss: torch.FloatTensor | None = None
    router_z_loss: torch.FloatTensor | None = None
    router_logits: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class SparseTransformerQuestionAnsweringOutput(QuestionAnsweringModelOutput):
    """Question-answering output with the MoE fields (``loss`` includes the scaled router losses)."""

    aux_loss: torch.FloatTensor | None = None
    router_z_loss: torch.FloatTensor | None = None
    router_logits: tuple[torch.FloatTensor, ...] | None = None


__all__ = [
    "SparseTransformerCausalLMOutput",
    "SparseTransformerExpertsBase",
    "SparseTransformerMaskedLMOutput",
    "SparseTransformerModelOutput",
    "SparseTransformerMoeFeedForward",
    "SparseTransformerMultipleChoiceOutput",
    "SparseTransformerQuestionAnsweringOutput",
    "SparseTransformerRouter",
    "SparseTransformerSequenceClassifierOutput",
    "SparseTransformerTokenClassifierOutput",
    "add_router_losses",
    "capacity_keep",
    "count_parameters",
    "expert_capacity",
    "experts_forward",
    "init_experts",
    "load_balancing_loss",
    "route",
    "router_fields",
    "router_losses",
    "router_z_loss",
    "wants_router_logits",
]
