"""Configurations of the long-document summarizers: abstractive (LED) and extractive (Longformer encoder)."""

from __future__ import annotations

from transformers import LEDConfig, PretrainedConfig

from ...attention.dispatch import BACKENDS as ENCODER_BACKENDS
from ...models.longformer_tasks.backbone import BackboneConfigMixin, backbone_config, recheck_config
from ...patterns import Pattern, from_dict
from ...utils.validation import check_fraction
from .data import SENTENCE_FEATURES

GLOBAL_ATTENTION = ("first", "sentences", "query")
EXTRACTIVE_LOSSES = ("bce", "listwise")


def _pattern_specs(pattern, name: str):
    """A spec dict (or a list of them) from a Pattern, a spec dict, a registered name or a list of those."""
    if pattern is None:
        return None
    if isinstance(pattern, (list, tuple)):
        return [_pattern_specs(p, f"{name}[{i}]") for i, p in enumerate(pattern)]
    try:
        if isinstance(pattern, Pattern):
            return pattern.to_dict()
        if isinstance(pattern, (str, dict)):
            return from_dict(pattern).to_dict()
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{name}: {e}") from e
    raise ValueError(f"{name} must be a pattern spec (dict, name or Pattern), got {type(pattern).__name__}")


def _check_global_attention(
    global_attention, sentence_token_id, query_separator_token_id, vocab_size
) -> list:
    if isinstance(global_attention, str) or not isinstance(global_attention, (list, tuple)):
        raise ValueError(
            f"global_attention must be a list drawn from {GLOBAL_ATTENTION}, got {global_attention!r}"
        )
    bad = [g for g in global_attention if g not in GLOBAL_ATTENTION]
    if bad:
        raise ValueError(f"global_attention entries must be in {GLOBAL_ATTENTION}, got {bad}")
    for name, value, needed in (
        ("sentence_token_id", sentence_token_id, "sentences" in global_attention),
        ("query_separator_token_id", query_separator_token_id, "query" in global_attention),
    ):
        if value is None:
            if needed:
                raise ValueError(f"global_attention={list(global_attention)} needs {name}")
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab_size:
            raise ValueError(f"{name} must be a token id in [0, {vocab_size}), got {value!r}")
    return [g for g in GLOBAL_ATTENTION if g in global_attention]


class LEDSummarizationConfig(LEDConfig):
    r"""
    Configuration of [`LEDForSummarization`]: transformers' LED (Longformer encoder, BART decoder) whose
    encoder builds its own global attention mask and may run on hf-sparse kernels. Every `LEDConfig`
    argument (`d_model`, `encoder_layers`, `attention_window`, `max_encoder_position_embeddings`, ...)
    is accepted as well; any LED checkpoint's config loads into it.

    Args:
        global_attention (`list[str]`, *optional*, defaults to `["first"]`):
            Tokens given global attention when the caller passes no `global_attention_mask` (in `forward`
            and in `generate`): `"first"` the first token (`<s>`), `"sentences"` every `sentence_token_id`
            (a marker the tokenization puts before each sentence), `"query"` every token up to and
            including the first `query_separator_token_id` (a query prefix, QMSum-style). Rows without the
            separator get no query globals. Padding is never global.
        sentence_token_id (`int`, *optional*):
            Id of the sentence marker (`"<sent>"`); required with `"sentences"`.
        query_separator_token_id (`int`, *optional*):
            Id of the token ending a query prefix (`"<query_sep>"`); required with `"query"`. A model
            without it does not take queries.
        encoder_attention_pattern (`dict`, `str`, `Pattern` or `list`, *optional*):
            `None`: LED's own chunked Longformer attention. Otherwise the encoder's self-attention runs
            `hf_sparse.sparse_attention` with this pattern (one for all layers or one per layer; any
            hf-sparse pattern), plus the global tokens, using LED's own projections (global tokens use
            `query_global`/`key_global`/`value_global` as in Longformer). With
            `{"type": "longformer", "window": attention_window}` the outputs equal LED's. Inputs are then
            not padded to a multiple of `attention_window`.
        encoder_attention_backend (`str`, *optional*, defaults to `"auto"`):
            Kernel for `encoder_attention_pattern`: `"auto"`, `"blocked"`, `"flex"` or `"dense"`.

    Example:

    ```python
    >>> from hf_sparse.tasks.summarization import LEDSummarizationConfig, LEDForSummarization
    >>> config = LEDSummarizationConfig(
    ...     vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    ...     decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, attention_window=16,
    ...     max_encoder_position_embeddings=2048, max_decoder_position_embeddings=256,
    ...     global_attention=["first", "sentences"], sentence_token_id=5,
    ...     encoder_attention_pattern={"type": "bigbird", "block": 16},
    ... )
    >>> model = LEDForSummarization(config)
    ```
    """

    model_type = "led_summarization"

    def __init__(
        self,
        global_attention=("first",),
        sentence_token_id: int | None = None,
        query_separator_token_id: int | None = None,
        encoder_attention_pattern=None,
        encoder_attention_backend: str = "auto",
        **kwargs,
    ):
        kwargs.pop("model_type", None)
        if isinstance(global_attention, str) or not isinstance(global_attention, (list, tuple)):
            raise ValueError(
                f"global_attention must be a list drawn from {GLOBAL_ATTENTION}, got {global_attention!r}"
            )
        self.global_attention = list(global_attention)
        self.sentence_token_id = sentence_token_id
        self.query_separator_token_id = query_separator_token_id
        self.encoder_attention_pattern = _pattern_specs(
            encoder_attention_pattern, "encoder_attention_pattern"
        )
        self.encoder_attention_backend = encoder_attention_backend
        super().__init__(**kwargs)
        self.global_attention = _check_global_attention(
            self.global_attention, sentence_token_id, query_separator_token_id, self.vocab_size
        )
        if encoder_attention_backend not in ENCODER_BACKENDS:
            raise ValueError(
                f"encoder_attention_backend must be one of {ENCODER_BACKENDS}, got {encoder_attention_backend!r}"
            )
        specs = self.encoder_attention_pattern
        if isinstance(specs, list) and len(specs) != self.encoder_layers:
            raise ValueError(
                f"encoder_attention_pattern has {len(specs)} entries but encoder_layers is {self.encoder_layers}; "
                "give one pattern for all layers or exactly one per layer"
            )

    def validate_task(self) -> None:
        """Run ``__init__``'s checks again on the current values (:func:`recheck_config`: ``from_pretrained(path,
        key=value)`` sets them after ``__init__``, and so does ``config.key = value``); the model calls it before it
        builds anything."""
        recheck_config(self)

    @property
    def supports_query(self) -> bool:
        """Whether inputs may start with a query prefix (a `query_separator_token_id` is set)."""
        return self.query_separator_token_id is not None

    def encoder_layer_pattern(self, layer: int) -> Pattern | None:
        """The hf-sparse pattern of encoder layer ``layer`` (None: LED's own attention)."""
        specs = self.encoder_attention_pattern
        if specs is None:
            return None
        return from_dict(specs[layer] if isinstance(specs, list) else specs)


class LongformerExtractiveSummarizationConfig(BackboneConfigMixin, PretrainedConfig):
    r"""
    Configuration of [`LongformerForExtractiveSummarization`]: a long encoder reads the document with a
    marker token before every sentence; the marker's final state (with optional per-sentence features)
    gives one score per sentence; a summary is the best sentences, in document order, within a budget.

    Args:
        backbone (`dict` or `PretrainedConfig`, *optional*):
            The encoder: a `LongformerConfig` (default, `model_type="longformer"`) or an hf-sparse
            `SparseTransformerConfig` (`model_type="sparse_transformer"`), as a config or its dict.
        sentence_token_id (`int`, *optional*, defaults to 5):
            Id of the sentence marker (`"<sent>"`): every sentence starts with it, and its state is
            scored. Markers always get global attention (with the first token).
        query_separator_token_id (`int`, *optional*):
            Id of the token ending a query prefix (`"<query_sep>"`): the query tokens get global
            attention. `None`: the model takes no queries.
        sentence_features (`list[str]`, *optional*, defaults to `[]`):
            Per-sentence features concatenated to the marker state before scoring (names of
            `hf_sparse.tasks.summarization.data.SENTENCE_FEATURES`: `position`, `first_sentences`, `length`,
            `centrality`, `query_similarity`). The pipeline computes them from the text.
        head_hidden_size (`int`, *optional*, defaults to 64):
            Width of the scoring MLP (`Linear -> GELU -> Linear(1)`).
        classifier_dropout (`float`, *optional*, defaults to 0.1):
            Dropout before the scoring head.
        loss (`str`, *optional*, defaults to `"listwise"`):
            `"bce"`: binary cross-entropy of each sentence's score against its oracle label;
            `"listwise"`: cross-entropy of the softmax over a document chunk's sentences against the
            uniform distribution over its oracle sentences (chunks without one are skipped), which
            ranks directly.
        positive_weight (`float`, *optional*, defaults to 1.0):
            `"bce"` only: weight of the oracle sentences' terms (`pos_weight`; a few positives per hundreds of
            sentences learn slowly at 1.0).
        max_sentence_tokens (`int`, *optional*, defaults to 64):
            Tokens kept per sentence when encoding (longer sentences are represented by their start).
        max_chunk_length (`int`, *optional*):
            Tokens per encoded chunk; defaults to the backbone's position limit. Longer documents are
            encoded as several chunks of whole sentences (every sentence is scored).

    Example:

    ```python
    >>> from hf_sparse.tasks.summarization import (
    ...     LongformerExtractiveSummarizationConfig, LongformerForExtractiveSummarization)
    >>> config = LongformerExtractiveSummarizationConfig(
    ...     backbone={"model_type": "longformer", "vocab_size": 5000, "hidden_size": 64, "num_hidden_layers": 2,
    ...               "num_attention_heads": 4, "intermediate_size": 128, "attention_window": 32,
    ...               "max_position_embeddings": 4098},
    ...     sentence_token_id=5, sentence_features=["position", "centrality"],
    ... )
    >>> model = LongformerForExtractiveSummarization(config)
    ```
    """

    model_type = "longformer_extractive_summarization"

    def __init__(
        self,
        backbone=None,
        sentence_token_id: int = 5,
        query_separator_token_id: int | None = None,
        sentence_features=(),
        head_hidden_size: int = 64,
        classifier_dropout: float = 0.1,
        loss: str = "listwise",
        positive_weight: float = 1.0,
        max_sentence_tokens: int = 64,
        max_chunk_length: int | None = None,
        **kwargs,
    ):
        self.backbone = backbone_config(
            backbone if backbone is not None else {"model_type": "longformer"}
        ).to_dict()
        vocab = self.backbone["vocab_size"]
        global_attention = ["first", "sentences"] + (
            ["query"] if query_separator_token_id is not None else []
        )
        self.global_attention = _check_global_attention(
            global_attention, sentence_token_id, query_separator_token_id, vocab
        )
        self.sentence_token_id = sentence_token_id
        self.query_separator_token_id = query_separator_token_id
        if isinstance(sentence_features, str):
            raise ValueError(f"sentence_features must be a list of names, got {sentence_features!r}")
        bad = [f for f in sentence_features if f not in SENTENCE_FEATURES]
        if bad or len(set(sentence_features)) != len(sentence_features):
            raise ValueError(
                f"sentence_features must be distinct names from {SENTENCE_FEATURES}, got {list(sentence_features)}"
            )
        self.sentence_features = list(sentence_features)
        for name, value in (
            ("head_hidden_size", head_hidden_size),
            ("max_sentence_tokens", max_sentence_tokens),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.head_hidden_size = head_hidden_size
        self.classifier_dropout = check_fraction("classifier_dropout", classifier_dropout, closed_high=False)
        if loss not in EXTRACTIVE_LOSSES:
            raise ValueError(f"loss must be one of {EXTRACTIVE_LOSSES}, got {loss!r}")
        self.loss = loss
        if (
            isinstance(positive_weight, bool)
            or not isinstance(positive_weight, (int, float))
            or not positive_weight > 0
        ):
            raise ValueError(f"positive_weight must be a positive number, got {positive_weight!r}")
        self.positive_weight = float(positive_weight)
        self.max_sentence_tokens = max_sentence_tokens
        limit = self.position_limit
        if max_chunk_length is not None and (
            isinstance(max_chunk_length, bool)
            or not isinstance(max_chunk_length, int)
            or not 8 <= max_chunk_length <= limit
        ):
            raise ValueError(
                f"max_chunk_length must be an int in [8, {limit}] (the backbone's limit), got {max_chunk_length!r}"
            )
        self.max_chunk_length = max_chunk_length
        super().__init__(**kwargs)

    @property
    def hidden_size(self) -> int:
        return self.backbone["hidden_size"]

    @property
    def supports_query(self) -> bool:
        return self.query_separator_token_id is not None

    @property
    def position_limit(self) -> int:
        """The longest input the backbone's position table allows (RoBERTa-style ids start after padding)."""
        bb = self.backbone
        limit = bb["max_position_embeddings"]
        if bb.get("model_type", "longformer") == "longformer" or bb.get("position_ids_style") == "roberta":
            limit -= (bb.get("pad_token_id") or 0) + 1
        return limit

    @property
    def chunk_length(self) -> int:
        """Tokens per encoded chunk: ``max_chunk_length``, else the backbone's limit."""
        return self.max_chunk_length or self.position_limit


__all__ = ["GLOBAL_ATTENTION", "LEDSummarizationConfig", "LongformerExtractiveSummarizationConfig"]
