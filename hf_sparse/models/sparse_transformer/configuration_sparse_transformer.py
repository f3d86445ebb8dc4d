"""SparseTransformer configuration."""

from __future__ import annotations

import math

import numpy as np
from transformers import PretrainedConfig
from transformers.activations import ACT2FN

from ...attention.dispatch import BACKENDS
from ...patterns import Pattern, from_dict
from ...patterns.compose import Intersection, Union
from ...patterns.local import Causal, SlidingWindow
from ...patterns.per_head import PerHead

POSITION_TYPES = ("absolute", "rotary")
POSITION_STYLES = ("bert", "roberta")
#: global_tokens_from_sep values: the tokens before each row's first sep_token_id, or after it and the next
SEP_GLOBAL_SIDES = ("before", "after")
_DEFAULT_PATTERN = "default"  # attention_pattern not given (None is an error: a config.json with null)
#: adaptive_span keys and their defaults (max_span has none)
ADAPTIVE_SPAN_DEFAULTS = {"ramp": 32, "init": 0.0, "loss_coef": 2e-6}
#: the mixture-of-experts keys and their defaults; a config with num_experts=0 (dense) stores none of them
MOE_DEFAULTS = {
    "num_experts_per_tok": 2,
    "moe_layer_frequency": 1,
    "moe_intermediate_size": None,
    "norm_topk_prob": True,
    "router_jitter_noise": 0.0,
    "router_aux_loss_coef": 0.01,
    "router_z_loss_coef": 0.001,
    "expert_capacity_factor": None,
    "output_router_logits": False,
}


def _leaves(p: Pattern):
    if isinstance(p, (Union, Intersection, PerHead)):
        return [leaf for q in p.parts for leaf in _leaves(q)]
    return [p]


class SparseTransformerConfig(PretrainedConfig):
    r"""
    Configuration of a [`SparseTransformerModel`]: a BERT/RoBERTa-style transformer (post-layer-norm
    blocks) whose self-attention is an hf-sparse pattern, as encoder or as causal decoder.

    Args:
        vocab_size (`int`, *optional*, defaults to 30522):
            Size of the token vocabulary.
        hidden_size (`int`, *optional*, defaults to 768):
            Width of the hidden states; must be divisible by `num_attention_heads`.
        num_hidden_layers (`int`, *optional*, defaults to 12):
            Number of transformer blocks.
        num_attention_heads (`int`, *optional*, defaults to 12):
            Attention heads per block.
        intermediate_size (`int`, *optional*, defaults to 3072):
            Width of the feed-forward layer.
        hidden_act (`str`, *optional*, defaults to `"gelu"`):
            Feed-forward activation (any key of `transformers.activations.ACT2FN`).
        hidden_dropout_prob (`float`, *optional*, defaults to 0.1):
            Dropout on embeddings and block outputs.
        attention_probs_dropout_prob (`float`, *optional*, defaults to 0.1):
            Dropout on attention probabilities (exact in the sparse kernels' backward too).
        max_position_embeddings (`int`, *optional*, defaults to 4096):
            Longest sequence the model is meant for; the size of the learned position table.
        type_vocab_size (`int`, *optional*, defaults to 2):
            Number of token types (segments); 0 disables token-type embeddings.
        initializer_range (`float`, *optional*, defaults to 0.02):
            Standard deviation of the weight initialisation.
        layer_norm_eps (`float`, *optional*, defaults to 1e-12):
            Layer-norm epsilon.
        position_embedding_type (`str`, *optional*, defaults to `"absolute"`):
            `"absolute"` (a learned table) or `"rotary"` (RoPE on queries and keys, no table).
        position_ids_style (`str`, *optional*, defaults to `"bert"`):
            How position ids are made when none are passed: `"bert"` counts from 0; `"roberta"` counts
            from `pad_token_id + 1` over non-padding tokens and gives padding `pad_token_id` (RoBERTa,
            Longformer).
        rope_theta (`float`, *optional*, defaults to 10000.0):
            RoPE base frequency (rotary positions only).
        is_decoder (`bool`, *optional*, defaults to `False`):
            A causal decoder: every layer's pattern must be causal (`j <= i` for every allowed pair). A
            decoder-only one: the layers have no cross-attention, so `add_cross_attention=True` (BERT's option,
            which `EncoderDecoderModel` sets on its decoder's config) is a `ValueError`.
        attention_pattern (`dict`, `str`, `Pattern` or `list`, *optional*):
            The attention pattern, as a spec dict (`{"type": "sliding_window", "window": 512}`), a
            registered name, a `hf_sparse.patterns.Pattern`, or a list with one of those per layer.
            Stored as dicts in `config.json`. Defaults to `SlidingWindow(window=512)` for encoders and
            `SlidingWindow(window=512, causal=True)` for decoders when not given; where that window would
            reach past `max_position_embeddings`, the default shrinks it to the largest window the table
            allows (`2 * max_position_embeddings + 1`, decoders `max_position_embeddings + 1`), which still
            spans every position. A window given explicitly that reaches past the table is a `ValueError`,
            and so is `None` (`null` in a config.json).
        attention_backend (`str`, *optional*, defaults to `"auto"`):
            Kernel used by `hf_sparse.sparse_attention`: `"auto"`, `"blocked"`, `"flex"` or `"dense"`.
        attention_block_size (`int`, *optional*):
            Kernel block size; `None` lets the kernel choose.
        global_projections (`bool`, *optional*, defaults to `False`):
            Longformer's separate query/key/value projections for global tokens: global tokens'
            outputs are computed with `query_global`/`key_global`/`value_global` over all tokens.
        global_first_token (`bool`, *optional*, defaults to `True`):
            Classification, multiple-choice and question-answering heads make the first token global
            when the caller passes no `global_attention_mask` (the Longformer convention for [CLS]);
            the base, masked-LM, causal-LM and token-classification models never add globals.
        global_tokens_from_sep (`str`, *optional*):
            Those heads' global tokens, when the caller passes no `global_attention_mask`, taken from each
            row's first `sep_token_id` at position `s` instead of the first token (Longformer's rules;
            `hf_sparse.conversion.from_longformer` sets it): `"before"` makes positions `i < s` global (the
            question: `LongformerForQuestionAnswering`), `"after"` positions `i > s + 1` (past the `</s></s>`
            pair: `LongformerForMultipleChoice`). Needs `sep_token_id`, and `input_ids` at run time (with
            `inputs_embeds` only, pass a `global_attention_mask`); a row without `sep_token_id` is a
            `ValueError` (Longformer asks for exactly three per row, `<s> q </s></s> c </s>`; here one is
            enough). `None` (the default): `global_first_token` decides.
        max_attention_weights_length (`int`, *optional*, defaults to 4096):
            `output_attentions=True` materialises dense (batch, heads, n, n) weights; longer inputs raise.
        adaptive_span (`dict`, *optional*):
            Adaptive attention span (Sukhbaatar et al. 2019) in every layer: one learnable span per head,
            keys at distance d weighted by the soft mask `clamp((ramp + span - d) / ramp, 0, 1)` (softmax
            renormalised over them). Keys: `max_span` (int, required: spans are clamped to
            [0, max_span]), `ramp` (int, default 32), `init` (initial span in tokens, default 0),
            `loss_coef` (float, default 2e-6: the training loss gets `loss_coef` times the sum over
            layers of the mean span). Each layer's pattern must be `Causal()` or a `SlidingWindow`
            (the span works inside it); no global tokens (`global_first_token` has no effect, a
            `global_attention_mask` raises), no `global_projections` or `global_tokens_from_sep`. A layer
            option rather than a pattern because the span is a trained parameter of the layer, not a
            stateless rule.
        use_cache (`bool`, *optional*, defaults to `True`):
            Decoders return a `SparsePatternCache` for incremental decoding.
        tie_word_embeddings (`bool`, *optional*, defaults to `True`):
            The language-model heads share the input embedding matrix.
        lm_head_act (`str`, *optional*, defaults to `"gelu"`):
            Activation of the language-model heads' transform (dense -> activation -> layer norm), any key of
            `transformers.activations.ACT2FN`. RoBERTa's head uses gelu; BERT's uses its `hidden_act`
            (`hf_sparse.conversion.from_bert` copies it).
        classifier_dropout (`float`, *optional*):
            Dropout of classification heads; defaults to `hidden_dropout_prob`.
        pad_token_id, bos_token_id, eos_token_id (`int`, *optional*):
            Special token ids (defaults 0, None, None).
        num_experts (`int`, *optional*, defaults to 0):
            Experts of the sparse mixture-of-experts feed-forward; 0 keeps every feed-forward dense (and the
            config carries none of the keys below). See `moe_sparse_transformer.py` for routing and capacity.
        num_experts_per_tok (`int`, *optional*, defaults to 2):
            Experts each token is sent to (top-k), 1 <= k <= `num_experts`.
        moe_layer_frequency (`int` or `list[int]`, *optional*, defaults to 1):
            Which layers are MoE layers: an int `f` makes every `f`-th layer one (layers `f - 1, 2f - 1, ...`;
            1 = all), a list names the layer indices.
        moe_intermediate_size (`int`, *optional*):
            Width of each expert's feed-forward; defaults to `intermediate_size`.
        norm_topk_prob (`bool`, *optional*, defaults to `True`):
            Renormalise the top-k router probabilities to sum to 1 per token. With top-1 that makes every
            weight 1 and the router learns from the auxiliary losses only; `False` weights each expert by its
            router probability (Switch Transformers).
        router_jitter_noise (`float`, *optional*, defaults to 0.0):
            Training only: the router's input is multiplied by uniform noise in `[1 - eps, 1 + eps]`.
        router_aux_loss_coef (`float`, *optional*, defaults to 0.01):
            Weight of the load-balancing loss (`aux_loss`, padding excluded) added to every head's loss.
        router_z_loss_coef (`float`, *optional*, defaults to 0.001):
            Weight of the router z-loss (mean squared log-sum-exp of the router logits) added to the loss.
        expert_capacity_factor (`float`, *optional*):
            Training only: each expert takes at most `ceil(factor * tokens * k / num_experts)` assignments per
            forward, first choices first, then in position order; the rest are dropped (the token passes
            through the residual). `None`: no capacity limit, nothing dropped.
        output_router_logits (`bool`, *optional*, defaults to `False`):
            Return every MoE layer's router logits (`router_logits`); the auxiliary losses are computed and
            added to the loss either way.

    Example:

    ```python
    >>> from hf_sparse import SparseTransformerConfig, SparseTransformerForMaskedLM
    >>> config = SparseTransformerConfig(
    ...     hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
    ...     max_position_embeddings=16384, attention_pattern={"type": "longformer", "window": 512},
    ... )
    >>> model = SparseTransformerForMaskedLM(config)
    ```
    """

    model_type = "sparse_transformer"
    num_experts = 0  # dense unless set (old config.json files have no MoE keys)

    def __init__(
        self,
        vocab_size: int = 30522,
        hidden_size: int = 768,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        intermediate_size: int = 3072,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.1,
        attention_probs_dropout_prob: float = 0.1,
        max_position_embeddings: int = 4096,
        type_vocab_size: int = 2,
        initializer_range: float = 0.02,
        layer_norm_eps: float = 1e-12,
        position_embedding_type: str = "absolute",
        position_ids_style: str = "bert",
        rope_theta: float = 10000.0,
        is_decoder: bool = False,
        attention_pattern=_DEFAULT_PATTERN,
        attention_backend: str = "auto",
        attention_block_size: int | None = None,
        global_projections: bool = False,
        global_first_token: bool = True,
        global_tokens_from_sep: str | None = None,
        max_attention_weights_length: int = 4096,
        classifier_dropout: float | None = None,
        adaptive_span: dict | None = None,
        use_cache: bool = True,
        tie_word_embeddings: bool = True,
        pad_token_id: int | None = 0,
        bos_token_id: int | None = None,
        eos_token_id: int | None = None,
        num_experts: int = 0,
        lm_head_act: str = "gelu",
        **kwargs,
    ):
        moe = {key: kwargs.pop(key) for key in list(kwargs) if key in MOE_DEFAULTS}
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.position_embedding_type = position_embedding_type
        self.position_ids_style = position_ids_style
        self.rope_theta = rope_theta
        self.attention_backend = attention_backend
        self.attention_block_size = attention_block_size
        self.global_projections = global_projections
        self.global_first_token = global_first_token
        self.global_tokens_from_sep = global_tokens_from_sep
        self.max_attention_weights_length = max_attention_weights_length
        self.classifier_dropout = classifier_dropout
        self.adaptive_span = _adaptive_span_spec(adaptive_span)
        self.use_cache = use_cache
        self.tie_word_embeddings = tie_word_embeddings
        self.lm_head_act = lm_head_act
        if attention_pattern is None:
            raise ValueError(
                "attention_pattern is None (null in config.json): give a pattern spec, e.g. "
                '{"type": "sliding_window", "window": 512}, or leave the key out for that default'
            )
        if isinstance(attention_pattern, str) and attention_pattern == _DEFAULT_PATTERN:
            attention_pattern = _default_pattern(max_position_embeddings, bool(is_decoder))
        self.attention_pattern = _to_specs(attention_pattern)
        self._set_moe(num_experts, moe)
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            is_decoder=is_decoder,
            **kwargs,
        )
        self.validate_sparse()

    def _set_moe(self, num_experts, moe: dict):
        _check_num_experts(num_experts)
        if num_experts == 0:
            _check_dense(moe)
            return
        self.num_experts = num_experts
        for key, default in MOE_DEFAULTS.items():
            setattr(self, key, moe.get(key, default))
        if isinstance(self.moe_layer_frequency, tuple):
            self.moe_layer_frequency = list(self.moe_layer_frequency)

    def _check_moe(self):
        _check_num_experts(self.num_experts)
        if not self.num_experts:
            _check_dense({k: v for k, v in vars(self).items() if k in MOE_DEFAULTS})
            return
        # num_experts set after __init__ (from_pretrained(path, num_experts=4)): the keys it lacks get their defaults
        for key, default in MOE_DEFAULTS.items():
            if key not in vars(self):
                setattr(self, key, default)
        if isinstance(self.moe_layer_frequency, tuple):
            self.moe_layer_frequency = list(self.moe_layer_frequency)
        k = self.num_experts_per_tok
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.num_experts:
            raise ValueError(
                f"num_experts_per_tok must be an int in [1, num_experts={self.num_experts}], got {k!r}"
            )
        freq = self.moe_layer_frequency
        if isinstance(freq, list):
            bad = [
                i
                for i in freq
                if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.num_hidden_layers
            ]
            if bad or not freq or len(set(freq)) != len(freq):
                raise ValueError(
                    f"moe_layer_frequency as a list must hold distinct layer indices in [0, {self.num_hidden_layers}), "
                    f"got {freq!r}"
                )
        elif isinstance(freq, bool) or not isinstance(freq, int) or not 1 <= freq <= self.num_hidden_layers:
            raise ValueError(
                f"moe_layer_frequency must be an int in [1, num_hidden_layers={self.num_hidden_layers}] or a list of "
                f"layer indices, got {freq!r}"
            )
        size = self.moe_intermediate_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size <= 0):
            raise ValueError(f"moe_intermediate_size must be a positive int or None, got {size!r}")
        if not isinstance(self.norm_topk_prob, bool):
            raise ValueError(f"norm_topk_prob must be a bool, got {self.norm_topk_prob!r}")
        if not isinstance(self.output_router_logits, bool):
            raise ValueError(f"output_router_logits must be a bool, got {self.output_router_logits!r}")
        jitter = self.router_jitter_noise
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0.0 <= jitter < 1.0:
            raise ValueError(f"router_jitter_noise must be in [0, 1), got {jitter!r}")
        for name in ("router_aux_loss_coef", "router_z_loss_coef"):
            value = getattr(self, name)
            if not _finite(value) or not value >= 0.0:
                raise ValueError(f"{name} must be a finite float >= 0, got {value!r}")
        factor = self.expert_capacity_factor
        if factor is not None and (not _finite(factor) or not factor > 0):
            raise ValueError(
                f"expert_capacity_factor must be a finite float > 0 or None (no capacity limit), got {factor!r}"
            )

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer ``layer`` has the mixture-of-experts feed-forward."""
        if not self.num_experts:
            return False
        freq = self.moe_layer_frequency
        return layer in freq if isinstance(freq, list) else (layer + 1) % freq == 0

    # ----------------------------------------------------------------------------------------- checks
    def validate(self):
        """transformers' checks where the installed release has them (``save_pretrained`` runs this), then
        :meth:`validate_sparse`."""
        parent = getattr(super(), "validate", None)
        if parent is not None:
            parent()
        self.validate_sparse()

    def validate_sparse(self):
        """Check every field this config adds; errors name the field (and the layer). Run by ``__init__``, by
        ``save_pretrained`` and by the models' ``__init__``, so that what was set since (``from_pretrained(path,
        key=value)`` sets attributes after ``__init__``, and so does ``config.key = value``) is checked before a
        model is built from it: specs are normalised again, and MoE keys missing after ``num_experts`` was set get
        their defaults."""
        for name, value in list(
            vars(self).items()
        ):  # numpy scalars (np.float32(0.1), np.int64(128)): plain ones
            if isinstance(value, np.generic):
                setattr(self, name, value.item())
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads ({self.num_attention_heads})"
            )
        if self.position_embedding_type not in POSITION_TYPES:
            raise ValueError(
                f"position_embedding_type must be one of {POSITION_TYPES}, got {self.position_embedding_type!r}"
            )
        if self.position_ids_style not in POSITION_STYLES:
            raise ValueError(
                f"position_ids_style must be one of {POSITION_STYLES}, got {self.position_ids_style!r}"
            )
        if self.position_embedding_type == "rotary" and (self.hidden_size // self.num_attention_heads) % 2:
            raise ValueError(
                f"rotary positions need an even head size, got {self.hidden_size // self.num_attention_heads}"
            )
        for name in ("hidden_act", "lm_head_act"):
            act = getattr(self, name)
            if not isinstance(act, str) or act not in ACT2FN:
                raise ValueError(
                    f"{name} must be a key of transformers.activations.ACT2FN (e.g. 'gelu', 'relu'), got {act!r}"
                )
        if self.attention_backend not in BACKENDS:
            raise ValueError(f"attention_backend must be one of {BACKENDS}, got {self.attention_backend!r}")
        for p, rate in (
            ("hidden_dropout_prob", self.hidden_dropout_prob),
            ("attention_probs_dropout_prob", self.attention_probs_dropout_prob),
        ):
            if not _finite(rate) or not 0.0 <= rate < 1.0:
                raise ValueError(f"{p} must be in [0, 1), got {rate!r}")
        for name in ("layer_norm_eps", "rope_theta"):  # 0, negative or NaN: NaN outputs
            value = getattr(self, name)
            if not _finite(value) or not value > 0:
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        limit = self.max_attention_weights_length
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise ValueError(f"max_attention_weights_length must be a positive int, got {limit!r}")
        types = self.type_vocab_size
        if isinstance(types, bool) or not isinstance(types, int) or types < 0:
            raise ValueError(
                f"type_vocab_size must be an int >= 0 (0: no token-type embeddings), got {types!r}"
            )
        for name in ("global_first_token", "global_projections"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        pad = self.pad_token_id
        if self.position_ids_style == "roberta" and (
            isinstance(pad, bool) or not isinstance(pad, int) or pad < 0
        ):
            raise ValueError(
                "position_ids_style='roberta' counts positions from pad_token_id + 1 and gives padding "
                f"pad_token_id: it needs an int pad_token_id >= 0, got pad_token_id={pad!r}"
            )
        if "attention_window" in vars(self):  # Longformer's name: stored, never read
            raise ValueError(
                f"attention_window={self.attention_window!r} is Longformer's option, which SparseTransformer does "
                "not read: give attention_pattern instead, e.g. attention_pattern={'type': 'longformer', 'window': w} "
                "or {'type': 'sliding_window', 'window': w}"
            )
        self.attention_pattern = specs = _to_specs(self.attention_pattern)
        if isinstance(specs, list) and len(specs) != self.num_hidden_layers:
            raise ValueError(
                f"attention_pattern has {len(specs)} entries but num_hidden_layers is {self.num_hidden_layers}; "
                "give one pattern for all layers or exactly one per layer"
            )
        for layer in range(self.num_hidden_layers):
            where = "attention_pattern" if not isinstance(specs, list) else f"attention_pattern[{layer}]"
            try:
                pattern = self.layer_pattern(layer)
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{where}: {e}") from e
            self._check_pattern(pattern, where)
            self._check_span_pattern(pattern, where)
            if not isinstance(specs, list):
                break
        if getattr(self, "add_cross_attention", False):
            raise ValueError(
                f"add_cross_attention={self.add_cross_attention!r}: SparseTransformer layers have no cross-attention, "
                "so encoder_hidden_states would be ignored (EncoderDecoderModel sets it on its decoder's config); "
                "use a decoder-only SparseTransformerForCausalLM (add_cross_attention=False) or an encoder-decoder "
                "model such as LEDForSummarization"
            )
        self._check_sep_globals()
        self._check_adaptive_span()
        self._check_moe()

    def _check_sep_globals(self):
        side = self.global_tokens_from_sep
        if side is None:
            return
        if side not in SEP_GLOBAL_SIDES:
            raise ValueError(
                f"global_tokens_from_sep must be one of {SEP_GLOBAL_SIDES} or None, got {side!r}"
            )
        sep = getattr(self, "sep_token_id", None)
        if isinstance(sep, bool) or not isinstance(sep, int):
            raise ValueError(
                f"global_tokens_from_sep={side!r} picks global tokens around sep_token_id, which must be an int, "
                f"got sep_token_id={sep!r}"
            )

    def _check_adaptive_span(self):
        self.adaptive_span = a = _adaptive_span_spec(self.adaptive_span)
        if a is None:
            return
        if a["max_span"] > self.max_position_embeddings:
            raise ValueError(
                f"adaptive_span.max_span={a['max_span']} is larger than max_position_embeddings="
                f"{self.max_position_embeddings}"
            )
        if self.global_projections:
            raise ValueError(
                "adaptive_span has no global tokens: it cannot be combined with global_projections=True"
            )
        if self.global_tokens_from_sep is not None:
            raise ValueError(
                "adaptive_span has no global tokens: it cannot be combined with "
                f"global_tokens_from_sep={self.global_tokens_from_sep!r}"
            )

    def _check_span_pattern(self, pattern: Pattern, where: str):
        if self.adaptive_span is not None and type(pattern) not in (Causal, SlidingWindow):
            raise ValueError(
                f"{where}: adaptive_span works inside a Causal() or SlidingWindow pattern, got {pattern!r}"
            )

    def _check_pattern(self, pattern: Pattern, where: str):
        """Geometry must fit the model: a window reaching past every position, or a stride/block
        longer than the longest input, is a configuration mistake."""
        limit = self.max_position_embeddings
        for leaf in _leaves(pattern):
            window = getattr(leaf, "window", None)
            if isinstance(window, int):
                causal = getattr(leaf, "causal", False)
                reach = (window - 1 if causal else window // 2) * getattr(leaf, "dilation", 1)
                if reach > limit:
                    raise ValueError(
                        f"{where}: {type(leaf).__name__}.window={window} reaches {reach} positions, beyond "
                        f"max_position_embeddings={limit}"
                    )
            for field in ("stride", "block"):
                value = getattr(leaf, field, None)
                if isinstance(value, int) and value > limit:
                    raise ValueError(
                        f"{where}: {type(leaf).__name__}.{field}={value} is larger than max_position_embeddings={limit}"
                    )
        if self.is_decoder:
            if not pattern.is_causal:
                raise ValueError(
                    f"{where}: {pattern!r} is not causal but is_decoder=True; use a causal pattern "
                    "(e.g. causal=True or `& Causal()`)"
                )
            if pattern.length_dependent or pattern.content_based:
                raise ValueError(
                    f"{where}: {pattern!r} depends on the sequence length or content and cannot be decoded "
                    "incrementally; is_decoder=True needs a static causal pattern"
                )
        heads = pattern.heads()  # a PerHead, also inside | or &
        if heads is not None and len(heads) != self.num_attention_heads:
            raise ValueError(
                f"{where}: PerHead has {len(heads)} patterns but num_attention_heads is {self.num_attention_heads}"
                + ("" if isinstance(pattern, PerHead) else f" (in {pattern!r})")
            )

    def layer_pattern(self, layer: int) -> Pattern:
        """The attention pattern of layer ``layer`` as a Pattern object."""
        spec = (
            self.attention_pattern[layer]
            if isinstance(self.attention_pattern, list)
            else self.attention_pattern
        )
        return from_dict(spec)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def _default_pattern(max_position_embeddings, causal: bool) -> dict:
    """``SlidingWindow(window=512)`` (causal for decoders), its window shrunk to the largest that
    ``_check_pattern`` lets reach ``max_position_embeddings`` positions (a bad table size is left to
    ``validate_sparse``, which names it)."""
    window = 512
    if isinstance(max_position_embeddings, int) and not isinstance(max_position_embeddings, bool):
        largest = max_position_embeddings + 1 if causal else 2 * max_position_embeddings + 1
        window = min(window, largest)
    return {"type": "sliding_window", "window": window, "causal": causal}


def _adaptive_span_spec(value):
    """The adaptive_span option with its defaults filled in, checked (None: off)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"adaptive_span must be a dict (e.g. {{'max_span': 1024}}) or None, got {value!r}")
    unknown = set(value) - {"max_span", *ADAPTIVE_SPAN_DEFAULTS}
    if unknown:
        raise ValueError(
            f"adaptive_span has unknown keys {sorted(unknown)}; allowed: max_span, {', '.join(ADAPTIVE_SPAN_DEFAULTS)}"
        )
    if "max_span" not in value:
        raise ValueError(f"adaptive_span needs max_span (the largest span in tokens), got {value!r}")
    spec = {"max_span": value["max_span"], **ADAPTIVE_SPAN_DEFAULTS, **value}
    for key in ("max_span", "ramp"):
        v = spec[key]
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"adaptive_span.{key} must be a positive int, got {v!r}")
    for key in ("init", "loss_coef"):
        v = spec[key]
        if not _finite(v) or v < 0:
            raise ValueError(f"adaptive_span.{key} must be a finite number >= 0, got {v!r}")
        spec[key] = float(v)
    if spec["init"] > spec["max_span"]:
        raise ValueError(f"adaptive_span.init={spec['init']} must be in [0, max_span={spec['max_span']}]")
    return spec


for _key, _default in MOE_DEFAULTS.items():
    # class defaults, as for num_experts: transformers sets from_pretrained(path, key=value) only for keys the
    # config has, so these reach a dense config too (and are checked), in any order; a dense config stores none.
    # Not output_router_logits: transformers reads hasattr(config, "output_router_logits") as "has routers"
    if _key != "output_router_logits":
        setattr(SparseTransformerConfig, _key, _default)


def _check_dense(moe: dict):
    given = {k: v for k, v in moe.items() if v != MOE_DEFAULTS[k]}
    if given:
        raise ValueError(
            f"{', '.join(f'{k}={v!r}' for k, v in given.items())} given but num_experts=0 (dense "
            "feed-forward): set num_experts >= 1 for a mixture-of-experts feed-forward"
        )


def _check_num_experts(num_experts):
    if isinstance(num_experts, bool) or not isinstance(num_experts, int) or num_experts < 0:
        raise ValueError(f"num_experts must be an int >= 0 (0: dense feed-forward), got {num_experts!r}")


def _finite(value) -> bool:
    """A real number that is not NaN or +-inf (a bool is not a number here)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _to_specs(pattern):
    if isinstance(pattern, (list, tuple)):
        return [_spec(p, f"attention_pattern[{layer}]") for layer, p in enumerate(pattern)]
    return _spec(pattern, "attention_pattern")


def _spec(p, where: str):
    """One pattern entry as plain JSON. A dict is stored normalised (``from_dict(p).to_dict()``): one that holds
    Pattern objects would fail ``save_pretrained`` and ``repr``; one that does not build is kept as given, for
    ``validate_sparse`` to report with the field (and layer) it belongs to. A pattern that no spec describes
    (a block table, ``Global.from_mask``) is a ValueError: it would be saved as another pattern."""
    if isinstance(p, str):
        p = from_dict(p)
    elif isinstance(p, dict):
        try:
            p = from_dict(p)
        except (ValueError, TypeError, KeyError):
            return dict(p)
    if not isinstance(p, Pattern):
        raise ValueError(
            f"attention_pattern entries must be pattern specs (dict, name or Pattern), got {type(p).__name__}"
        )
    try:
        return p.to_dict()
    except TypeError as e:
        raise ValueError(f"{where}: {p!r} cannot be stored in a config: {e}") from e


def config_arguments() -> set[str]:
    """The keyword arguments a SparseTransformerConfig takes: its own, the mixture-of-experts ones and
    ``PreTrainedConfig``'s (others would be stored as unused attributes)."""
    import dataclasses
    import inspect

    params = inspect.signature(SparseTransformerConfig.__init__).parameters.values()
    keys = {p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "self"}
    keys |= set(MOE_DEFAULTS) | {f.name for f in dataclasses.fields(PretrainedConfig)}
    return keys | {"output_attentions", "attn_implementation", "num_labels"}


__all__ = ["SparseTransformerConfig", "config_arguments"]
