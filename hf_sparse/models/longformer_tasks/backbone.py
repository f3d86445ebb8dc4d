"""The encoder under every task head: transformers' ``LongformerModel`` (default) or an hf-sparse
``SparseTransformerModel``, chosen by the ``model_type`` of the backbone config a task config holds."""

from __future__ import annotations

import inspect
import math

import torch
from transformers import LongformerConfig, LongformerModel, PretrainedConfig

from ..sparse_transformer import SparseTransformerConfig, SparseTransformerModel
from ..sparse_transformer.moe_sparse_transformer import add_router_losses

BACKBONES = {
    "longformer": (LongformerConfig, LongformerModel),
    "sparse_transformer": (SparseTransformerConfig, SparseTransformerModel),
}


#: the encoder layer of each backbone: one FSDP unit / never split across devices (``_no_split_modules``)
BACKBONE_LAYERS = {"longformer": "LongformerLayer", "sparse_transformer": "SparseTransformerLayer"}

#: peft's default LoRA ``target_modules`` for the task models (what a recipe's ``lora: true`` adapts): the local
#: projections and the global ones. Their heads read global tokens ([CLS], sentence markers, [RSP], turn separators),
#: whose outputs Longformer (and a SparseTransformer with ``global_projections``) computes with ``query_global`` /
#: ``key_global`` / ``value_global``: with ``query`` and ``value`` alone, the last layer's adapters got no gradient. A
#: backbone without global projections has no such modules (peft needs only one name to match).
TASK_LORA_TARGET_MODULES = ("query", "value", "query_global", "key_global", "value_global")

#: ``from_pretrained``'s ``key_mapping`` for a backbone checkpoint saved with a head (``LongformerForMaskedLM``, as
#: ``allenai/longformer-base-4096``: ``longformer.*``; ``SparseTransformerFor*``: ``sparse_transformer.*``): its encoder
#: is the task model's ``backbone``
BACKBONE_KEY_MAPPING = {r"^longformer\.": "backbone.", r"^sparse_transformer\.": "backbone."}


class BackboneConfigMixin:
    """Put before ``PretrainedConfig`` in a task config's bases: the backbone's size attributes read from (and
    ``vocab_size`` written to) the ``backbone`` dict, so that code reading ``config.vocab_size`` -- transformers'
    ``resize_token_embeddings`` sets it -- and the saved ``config.backbone`` always agree. A top-level
    ``vocab_size`` in an older ``config.json`` lands in the backbone when loaded."""

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        """A backbone's own config (a Longformer or SparseTransformer checkpoint) becomes this config's ``backbone``,
        with the task arguments taken from ``kwargs``: ``LongformerForDialogue.from_pretrained(
        "allenai/longformer-base-4096", act_labels=[...])`` starts from the pretrained encoder (new heads).
        ``kwargs`` that set the backbone (``hidden_dropout_prob=0.5``: keys of ``config.backbone`` that are no
        attribute of the task config itself) go into ``backbone``, as ``LongformerModel.from_pretrained`` takes
        them (before: a ``TypeError`` from the model's ``__init__``, and ``AutoConfig`` dropped them)."""
        params = set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}
        if config_dict.get("model_type") in BACKBONES:
            task = {k: kwargs.pop(k) for k in list(kwargs) if k in params}
            config_dict = {"backbone": dict(config_dict), **task}
        backbone = config_dict.get("backbone")
        if isinstance(backbone, dict):
            own = params | set(PretrainedConfig().to_dict()) | set(config_dict)
            routed = {k: kwargs.pop(k) for k in list(kwargs) if k in backbone and k not in own}
            if routed:
                config_dict = {**config_dict, "backbone": {**backbone, **routed}}
        return super().from_dict(config_dict, **kwargs)

    def validate_task(self) -> None:
        """Run ``__init__``'s checks again on the current values (:func:`recheck_config`); the task models call it
        before they build anything."""
        recheck_config(self)

    @property
    def vocab_size(self) -> int | None:
        return self.__dict__.get("backbone", {}).get("vocab_size")

    @vocab_size.setter
    def vocab_size(self, value: int) -> None:
        self.backbone["vocab_size"] = int(value)

    @property
    def num_hidden_layers(self) -> int | None:
        return self.__dict__.get("backbone", {}).get("num_hidden_layers")

    @property
    def num_attention_heads(self) -> int | None:
        return self.__dict__.get("backbone", {}).get("num_attention_heads")


def backbone_config(spec) -> PretrainedConfig:
    """A Longformer or SparseTransformer config from a config object or its dict (``model_type`` decides)."""
    if isinstance(spec, PretrainedConfig):
        if spec.model_type not in BACKBONES:
            raise ValueError(
                f"backbone must be one of {sorted(BACKBONES)}, got model_type={spec.model_type!r}"
            )
        return spec
    if not isinstance(spec, dict):
        raise TypeError(f"backbone must be a config or a dict, got {type(spec).__name__}")
    spec = dict(spec)
    kind = spec.pop("model_type", "longformer")
    if kind not in BACKBONES:
        raise ValueError(f"backbone model_type must be one of {sorted(BACKBONES)}, got {kind!r}")
    for key in ("transformers_version", "architectures", "auto_map"):
        spec.pop(key, None)
    return BACKBONES[kind][0](**spec)


def recheck_config(config: PretrainedConfig) -> PretrainedConfig:
    """``config`` built again from its current values, ``type(config)(**config.to_dict())`` (what its saved
    ``config.json`` reloads as), so that ``__init__``'s checks see what was set since: ``from_pretrained(path,
    key=value)`` sets such attributes after ``__init__``, and so does ``config.key = value``. Raises ``__init__``'s
    error naming the field; otherwise the arguments of ``__init__`` take the new config's normalised values, and the
    new config is returned."""
    fresh = type(config)(**config.to_dict())
    for name in inspect.signature(type(config).__init__).parameters:
        if name not in ("self", "kwargs") and name in fresh.__dict__:
            setattr(config, name, getattr(fresh, name))
    return fresh


def check_positions(config: PretrainedConfig, input_ids=None, inputs_embeds=None, position_ids=None) -> None:
    """``ValueError`` when a Longformer backbone would look a position up past its table (it raises a bare
    ``IndexError``). Its RoBERTa-style ids count the non-padding tokens of a row from ``pad_token_id + 1``;
    ``inputs_embeds`` without ``position_ids`` take one per position of the input padded to a multiple of
    ``attention_window`` (given ``position_ids``, as :func:`embeds_position_ids` builds, the window padding takes
    ``pad_token_id``). A SparseTransformer backbone checks its own positions. Skipped under ``torch.compile`` (a
    data-dependent check)."""
    if config.model_type != "longformer" or torch.compiler.is_compiling():
        return
    pad, limit = config.pad_token_id or 0, config.max_position_embeddings
    if position_ids is not None:
        length = position_ids.shape[-1]
        top = int(position_ids.max()) if position_ids.numel() else pad
    elif input_ids is not None:
        length = input_ids.shape[-1]
        top = pad + (int((input_ids != pad).sum(-1).max()) if input_ids.numel() else 0)
    else:
        length = tokens = inputs_embeds.shape[-2]
        w = config.attention_window
        w = int(max(w) if isinstance(w, (list, tuple)) else w)
        top = pad + -(-tokens // w) * w  # padded to a multiple of the window first
    if top >= limit:
        raise ValueError(
            f"position id {top} is out of range: max_position_embeddings is {limit} (input of length {length}; "
            f"Longformer's positions start at pad_token_id + 1 = {pad + 1}); truncate the input"
        )


def embeds_position_ids(config: PretrainedConfig, input_ids=None, attention_mask=None, inputs_embeds=None):
    """``position_ids`` to pass a Longformer backbone with ``inputs_embeds`` (None for a SparseTransformer backbone,
    or without ``inputs_embeds``): the RoBERTa-style ids its ``input_ids`` path numbers, ``pad_token_id`` plus the
    running count of real tokens, ``pad_token_id`` at padding. Real tokens: ``input_ids != pad_token_id`` where the
    ids are known, else ``attention_mask`` (else every column). Left to itself, Longformer numbers every column of
    ``inputs_embeds`` from ``pad_token_id + 1``, padding and the padding to a multiple of ``attention_window``
    included, so a batch padded to full length runs past the position table."""
    if inputs_embeds is None or config.model_type != "longformer":
        return None
    pad = config.pad_token_id or 0
    if input_ids is not None:
        real = (input_ids != pad).long()  # (B, N)
    elif attention_mask is not None:
        real = (attention_mask != 0).long()
    else:
        real = torch.ones(inputs_embeds.shape[:-1], dtype=torch.long, device=inputs_embeds.device)
    return (pad + real.cumsum(-1) * real).to(inputs_embeds.device)  # (B, N)


def add_backbone_losses(model: torch.nn.Module, loss, output):
    """A task head's ``loss`` plus what a SparseTransformer backbone (``model.backbone``, whose forward gave
    ``output``) adds to the losses of its own heads: the MoE router losses (``router_aux_loss_coef * aux_loss +
    router_z_loss_coef * router_z_loss``) and, in training mode, the adaptive-span penalty (evaluation losses stay
    the task's). Unchanged without a loss or with a Longformer backbone."""
    config = model.backbone.config
    if loss is None or config.model_type != "sparse_transformer":
        return loss
    if model.training and config.adaptive_span is not None:
        loss = loss + model.backbone.adaptive_span_loss().to(loss.device, loss.dtype)
    return add_router_losses(loss, config, output)


def build_backbone(config: PretrainedConfig, attn_implementation: str | None = None) -> torch.nn.Module:
    """The encoder without pooler. A SparseTransformer backbone runs ``attn_implementation`` where one was asked
    for (``"eager"``, ``"sdpa"``, ``"hf_sparse"``), else its own default (``"hf_sparse"``); Longformer runs its own
    attention (the task models take only ``"eager"`` for it: ``get_correct_attn_implementation``)."""
    if attn_implementation is not None and config.model_type == "sparse_transformer":
        config._attn_implementation = attn_implementation
    return BACKBONES[config.model_type][1](config, add_pooling_layer=False)


def block_multiple(config: PretrainedConfig) -> int:
    """Sequence lengths a collator or pipeline pads to. Longformer needs a multiple of its window (its padding
    takes the padding position, never one past the table). SparseTransformer takes any length: 64, or with
    absolute positions (padding takes positions too) the largest divisor of 64 that divides
    ``max_position_embeddings``, so that an input the table holds, padded, still fits it
    (``max_position_embeddings=100``: 4, not 64, which padded 82 tokens to 128)."""
    if config.model_type == "longformer":
        w = config.attention_window
        return int(max(w) if isinstance(w, (list, tuple)) else w)
    if getattr(config, "position_embedding_type", None) == "absolute":
        return math.gcd(64, int(config.max_position_embeddings))
    return 64


def card_pattern(backbone: dict, global_spec: dict | None = None) -> dict | list | None:
    """The attention pattern a model card shows for an encoder's config dict (``config.backbone``; LED's encoder:
    ``{"attention_pattern": ..., "attention_window": ...}``): its hf-sparse ``attention_pattern`` (a spec, or one per
    layer), else Longformer's ``{"type": "longformer", "window": w}`` from ``attention_window``, one spec per layer
    where the windows differ; None where it records neither. ``global_spec`` (the tokens the model makes global) is
    united with each spec, except ``{"type": "global"}`` with a Longformer spec, one of whose parts it is."""
    pattern = None if backbone.get("model_type") == "longformer" else backbone.get("attention_pattern")
    windows = backbone.get("attention_window")
    if pattern is None and windows is not None:
        windows = list(windows) if isinstance(windows, (list, tuple)) else [windows]
        pattern = [{"type": "longformer", "window": int(w)} for w in windows]
        pattern = pattern[0] if len(set(windows)) == 1 else pattern
    if pattern is None or global_spec is None:
        return pattern

    def with_global(spec):
        if global_spec == {"type": "global"} and isinstance(spec, dict) and spec.get("type") == "longformer":
            return spec
        return {"type": "union", "parts": [spec, global_spec]}

    return [with_global(p) for p in pattern] if isinstance(pattern, list) else with_global(pattern)


def every_k_global(input_ids, attention_mask, every: int | None, first: bool = True) -> torch.Tensor:
    """Global attention mask (1 = global): the first token and every ``every``-th position
    (counted from 0, real tokens only)."""
    g = torch.zeros_like(input_ids, dtype=torch.long)
    if first:
        g[:, 0] = 1
    if every:
        g[:, ::every] = 1
    if attention_mask is not None:
        g = g * attention_mask.long()
    return g


__all__ = [
    "BACKBONES",
    "BACKBONE_KEY_MAPPING",
    "BACKBONE_LAYERS",
    "BackboneConfigMixin",
    "TASK_LORA_TARGET_MODULES",
    "add_backbone_losses",
    "backbone_config",
    "block_multiple",
    "build_backbone",
    "card_pattern",
    "check_positions",
    "embeds_position_ids",
    "every_k_global",
    "recheck_config",
]
