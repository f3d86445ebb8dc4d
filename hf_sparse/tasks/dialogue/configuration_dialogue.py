"""Configuration of the dialogue model (response selection and per-turn act / intent tracking)."""

from __future__ import annotations

from transformers import PretrainedConfig

from ...models.longformer_tasks.backbone import BackboneConfigMixin, backbone_config
from ...utils.validation import check_fraction
from .formatter import GLOBAL_ON_NAMES

TURN_POOLING = ("separator", "separator+mean")
DEFAULT_FORMATTER = {
    "max_length": 4096,
    "speaker_tokens": {"USER": "[USR]", "SYSTEM": "[SYS]"},
    "turn_separator": None,
    "candidate_separator": "[RSP]",
    "global_on": list(GLOBAL_ON_NAMES),
}


def _str_list(name: str, values) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} must be a list of str, got {type(values).__name__}: {values!r}")
    for i, v in enumerate(values):
        if not isinstance(v, str) or not v:
            raise TypeError(f"{name}[{i}] must be a non-empty str, got {v!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} has duplicates: {list(values)}")
    return list(values)


def _check_formatter(formatter) -> dict:
    if formatter is None:
        return {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
                for k, v in DEFAULT_FORMATTER.items()}  # fmt: skip
    if not isinstance(formatter, dict):
        raise TypeError(
            f"formatter must be a dict of DialogueFormatter arguments, got {type(formatter).__name__}"
        )
    unknown = sorted(set(formatter) - set(DEFAULT_FORMATTER))
    if unknown:
        raise ValueError(f"formatter has unknown keys {unknown}; valid keys: {sorted(DEFAULT_FORMATTER)}")
    out = {**DEFAULT_FORMATTER, **formatter}
    max_length = out["max_length"]
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 8:
        raise ValueError(f"formatter['max_length'] must be an int >= 8, got {max_length!r}")
    speakers = out["speaker_tokens"]
    if not isinstance(speakers, dict) or not speakers:
        raise ValueError(f"formatter['speaker_tokens'] must be a non-empty dict, got {speakers!r}")
    bad = sorted(set(out["global_on"]) - set(GLOBAL_ON_NAMES))
    if isinstance(out["global_on"], str) or bad:
        raise ValueError(
            f"formatter['global_on'] must be a list of {list(GLOBAL_ON_NAMES)}, got {out['global_on']!r}"
        )
    out["speaker_tokens"] = dict(speakers)
    out["global_on"] = sorted(out["global_on"])
    return out


class LongformerDialogueConfig(BackboneConfigMixin, PretrainedConfig):
    r"""
    Configuration of [`LongformerForDialogue`]: a long-context encoder over a whole dialogue history with
    a response-selection head and per-turn dialogue-act and active-intent heads.

    Inputs are laid out by `hf_sparse.tasks.dialogue.formatter.DialogueFormatter` (speaker-tagged turns, each starting with its
    separator token; `[RSP]` before a candidate response); `formatter` holds its arguments so that the
    pipelines rebuild exactly the layout the model was trained on.

    Args:
        backbone (`dict` or `PretrainedConfig`, *optional*):
            The encoder: a `LongformerConfig` (default, `model_type="longformer"`) or an hf-sparse
            `SparseTransformerConfig` (`model_type="sparse_transformer"`), as a config or its dict.
        selection_head (`bool`, *optional*, defaults to `True`):
            Score (history, candidate) pairs from the hidden state of the `[RSP]` token (a candidate that
            attends to the whole history through global attention).
        act_labels (`list[str]`, *optional*):
            Dialogue acts of the multi-label per-turn act head (e.g. SGD's 18 `acts`); empty: no act head.
        intent_labels (`list[str]`, *optional*):
            Active intents of the per-user-turn intent head; the first must be `none_intent`. Empty: no
            intent head.
        seen_intents (`list[str]`, *optional*):
            Intents seen in training (for seen/unseen evaluation); defaults to `intent_labels`.
        none_intent (`str`, *optional*, defaults to `"NONE"`):
            The "no active intent" label (SGD's).
        act_field (`str`, *optional*, defaults to `"acts"`):
            The per-turn field the act labels come from (`"acts"` or `"act_slots"`), for the record.
        user_speaker (`str`, *optional*, defaults to `"USER"`):
            The speaker whose turns carry an active intent.
        response_speaker (`str`, *optional*, defaults to `"SYSTEM"`):
            The speaker whose turns are the responses to select.
        formatter (`dict`, *optional*):
            `DialogueFormatter` arguments: `max_length` (tokens, prefix/suffix included; histories longer
            than this are left-truncated, keeping the newest turns; default 4096, or what the backbone
            embeds if that is less), `speaker_tokens`, `turn_separator`,
            `candidate_separator`, `global_on` (subset of `"cls"`, `"separators"`, `"latest_turn"`,
            `"candidate"`). With a `turn_separator` (e.g. `"[TURN]"`), each turn starts with it and then its
            speaker token, and the per-turn heads read both: the turn separator (global with
            `"separators"`: it sees the whole dialogue) and the speaker token (it attends within its window).
        act_threshold (`float`, *optional*, defaults to 0.5):
            A turn has an act when its sigmoid probability is at least this.
        act_thresholds (`list[float]`, *optional*):
            One threshold per act (e.g. tuned on validation data), used instead of `act_threshold`.
        act_loss_weight (`float`, *optional*, defaults to 1.0):
            Weight of the act loss (binary cross-entropy summed over acts, averaged over labelled turns).
        intent_loss_weight (`float`, *optional*, defaults to 1.0):
            Weight of the intent loss (cross-entropy over labelled user turns).
        classifier_dropout (`float`, *optional*, defaults to 0.1):
            Dropout before every head.
        turn_pooling (`str`, *optional*, defaults to `"separator"`):
            What the heads read. `"separator"`: a turn's separator state(s), and `[RSP]` for selection.
            `"separator+mean"`: also the mean of the span's token states, which gives the heads every word of
            the turn from the start of training instead of only what attention routed to the separator. A turn
            runs from its separator to the next turn's separator, the latest turn to the last real token. The
            selection head reads `[RSP]`, the candidate's mean (from `[RSP]` to the last real token) and its
            elementwise product with the history's mean (the tokens before `[RSP]`): a direct match signal.
        global_first_token (`bool`, *optional*, defaults to `True`):
            When no `global_attention_mask` is passed, the first token is global (the pipelines always pass
            the formatter's mask).

    Example:

    ```python
    >>> from hf_sparse.tasks.dialogue import LongformerDialogueConfig, LongformerForDialogue
    >>> config = LongformerDialogueConfig(
    ...     backbone={"model_type": "longformer", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
    ...               "num_attention_heads": 4, "intermediate_size": 128, "attention_window": 32,
    ...               "max_position_embeddings": 514},
    ...     act_labels=["INFORM", "REQUEST"], intent_labels=["NONE", "FindRestaurants"],
    ...     formatter={"max_length": 512},
    ... )
    >>> model = LongformerForDialogue(config)
    ```
    """

    model_type = "longformer_dialogue"

    def __init__(
        self,
        backbone=None,
        selection_head: bool = True,
        act_labels=None,
        intent_labels=None,
        seen_intents=None,
        none_intent: str = "NONE",
        act_field: str = "acts",
        user_speaker: str = "USER",
        response_speaker: str = "SYSTEM",
        formatter=None,
        act_threshold: float = 0.5,
        act_thresholds=None,
        act_loss_weight: float = 1.0,
        intent_loss_weight: float = 1.0,
        classifier_dropout: float = 0.1,
        turn_pooling: str = "separator",
        global_first_token: bool = True,
        **kwargs,
    ):
        self.backbone = backbone_config(
            backbone if backbone is not None else {"model_type": "longformer"}
        ).to_dict()
        if not isinstance(selection_head, bool):
            raise TypeError(f"selection_head must be a bool, got {selection_head!r}")
        self.selection_head = selection_head
        self.act_labels = _str_list("act_labels", act_labels)
        if not isinstance(none_intent, str) or not none_intent:
            raise ValueError(f"none_intent must be a non-empty str, got {none_intent!r}")
        self.none_intent = none_intent
        self.intent_labels = _str_list("intent_labels", intent_labels)
        if self.intent_labels and self.intent_labels[0] != none_intent:
            raise ValueError(
                f"intent_labels must start with none_intent={none_intent!r}, got {self.intent_labels[:1]}"
            )
        self.seen_intents = (
            _str_list("seen_intents", seen_intents) if seen_intents is not None else list(self.intent_labels)
        )
        if act_field not in ("acts", "act_slots"):
            raise ValueError(f"act_field must be 'acts' or 'act_slots', got {act_field!r}")
        self.act_field = act_field
        for name, value in (("user_speaker", user_speaker), ("response_speaker", response_speaker)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty str, got {value!r}")
        self.user_speaker = user_speaker
        self.response_speaker = response_speaker
        if formatter is None or (isinstance(formatter, dict) and "max_length" not in formatter):
            # the default length fits the backbone (Longformer's default embeds 510 tokens)
            limit = min(DEFAULT_FORMATTER["max_length"], self.max_input_length)
            formatter = {**(formatter or {}), "max_length": limit}
        self.formatter = _check_formatter(formatter)
        for name in (user_speaker, response_speaker):
            if name not in self.formatter["speaker_tokens"]:
                raise ValueError(
                    f"speaker {name!r} has no token in formatter['speaker_tokens']={self.formatter['speaker_tokens']}"
                )
        self.act_threshold = check_fraction(
            "act_threshold", act_threshold, closed_low=False, closed_high=False
        )
        if act_thresholds is not None:
            if isinstance(act_thresholds, str) or not isinstance(act_thresholds, (list, tuple)):
                raise TypeError(f"act_thresholds must be a list of floats, got {act_thresholds!r}")
            if len(act_thresholds) != len(self.act_labels):
                raise ValueError(
                    f"act_thresholds has {len(act_thresholds)} values for {len(self.act_labels)} act_labels"
                )
            act_thresholds = [
                check_fraction(f"act_thresholds[{i}]", t, closed_low=False, closed_high=False)
                for i, t in enumerate(act_thresholds)
            ]
        self.act_thresholds = act_thresholds
        for name, value in (("act_loss_weight", act_loss_weight), ("intent_loss_weight", intent_loss_weight)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")
        self.act_loss_weight = float(act_loss_weight)
        self.intent_loss_weight = float(intent_loss_weight)
        self.classifier_dropout = check_fraction("classifier_dropout", classifier_dropout, closed_high=False)
        if turn_pooling not in TURN_POOLING:
            raise ValueError(f"turn_pooling must be one of {TURN_POOLING}, got {turn_pooling!r}")
        self.turn_pooling = turn_pooling
        self.global_first_token = bool(global_first_token)
        if not (selection_head or self.act_labels or self.intent_labels):
            raise ValueError("the model needs a head: set selection_head=True, act_labels or intent_labels")
        max_positions = self.max_input_length
        if self.formatter["max_length"] > max_positions:
            raise ValueError(
                f"formatter['max_length']={self.formatter['max_length']} exceeds what the backbone can embed "
                f"({max_positions} tokens from max_position_embeddings="
                f"{self.backbone['max_position_embeddings']})"
            )
        super().__init__(**kwargs)

    @property
    def hidden_size(self) -> int:
        return self.backbone["hidden_size"]

    @property
    def max_input_length(self) -> int:
        """Longest input the backbone embeds: RoBERTa-style positions (Longformer) start at pad_token_id + 1."""
        bb = self.backbone
        limit = bb["max_position_embeddings"]
        if bb.get("model_type") == "longformer" or bb.get("position_ids_style") == "roberta":
            limit -= (bb.get("pad_token_id") or 0) + 1
        return limit

    def thresholds(self) -> list[float]:
        """The probability threshold of each act: ``act_thresholds``, else ``act_threshold`` for all."""
        return (
            list(self.act_thresholds) if self.act_thresholds else [self.act_threshold] * len(self.act_labels)
        )

    @property
    def turn_tokens(self) -> int:
        """Tokens a turn's representation is read from: its separator, and with a ``turn_separator`` also the
        speaker token after it."""
        return 1 if self.formatter.get("turn_separator") is None else 2

    @property
    def pools_spans(self) -> bool:
        """Whether the heads also read the mean of each turn's (candidate's) token states."""
        return self.turn_pooling == "separator+mean"

    @property
    def num_acts(self) -> int:
        return len(self.act_labels)

    @property
    def num_intents(self) -> int:
        return len(self.intent_labels)


__all__ = ["LongformerDialogueConfig"]
