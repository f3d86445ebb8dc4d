"""``dialogue-response-selection`` and ``dialogue-state-tracking``: a dialogue history in, ranked candidate
responses / per-turn acts and the current intent out.

Both take one dialogue as a dict: ``{"turns": [...], "speakers": [...]}`` (``speakers`` optional: turns then
alternate between the model's user and response speakers, starting with the user, as in SGD), plus
``"candidates": [...]`` for selection (or ``candidates=`` in the call). A list of such dicts is a batch.

The history is laid out exactly as in training (``hf_sparse.tasks.dialogue.formatter.DialogueFormatter`` with the arguments stored
in ``model.config.formatter``): speaker-tagged turns, each starting with its separator token, global attention
on the separators, the latest turn and the candidate. A history longer than ``formatter["max_length"]`` is
**left-truncated**: the oldest turns are dropped whole, the newest turns are kept (and if the newest turn
alone is too long, its oldest tokens are cut); outputs say how much was dropped (``truncated_turns``,
``truncated_tokens``) and every per-turn output carries the turn's index in the input. A candidate too long to
fit next to the newest turn keeps its first tokens: selection outputs say how many were cut
(``truncated_candidate_tokens``) and a ``UserWarning`` names the candidates.

Bad input raises ``TypeError``/``ValueError`` naming the field: no candidates, an empty history, ``speakers``
and ``turns`` of different lengths, a turn or candidate that is not a str or is empty (blank, or giving no
token, e.g. only zero-width characters), an unknown speaker or key; an unknown (misspelled) option, or one given
by position, is a ``TypeError`` naming it. Options given to the constructor are the defaults of every call: an
input dict's own ``candidates`` / ``speakers`` replace them (a call's conflict with them).

The model is put in eval mode when the pipeline is built, so scores are deterministic.

Batching is transformers' ``Pipeline`` base's: ``batch_size=`` (in the constructor or the call) is the number
of model rows per forward pass, one row per (history, candidate) pair for selection (pairs of several
dialogues share a pass) and one per dialogue for tracking; outputs do not depend on it beyond float rounding (a
model with random-block attention runs one row per pass: :mod:`hf_sparse.pipelines.batching`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import torch
from transformers.pipelines.base import ChunkPipeline, Pipeline

from ...models.longformer_tasks.backbone import backbone_config, block_multiple
from ...pipelines.batching import RightPaddedBatches, pad_to_multiple, right_padded
from ...pipelines.progress import check_progress, progress_bar
from ...pipelines.saving import SaveModelMixin
from ...utils.validation import check_fraction
from .data import pack_candidates
from .formatter import DialogueFormatter

_KEYS = ("turns", "speakers", "candidates")  # the keys of an input dialogue (candidates: selection only)

#: (history, candidate) pairs per forward pass of response selection when no ``batch_size`` is given
DEFAULT_BATCH_SIZE = 16


def formatter_for(model, tokenizer) -> DialogueFormatter:
    """The :class:`DialogueFormatter` a dialogue model was trained with (from ``model.config.formatter``)."""
    formatter = DialogueFormatter(tokenizer, **model.config.formatter)
    formatter._marker_ids()  # ValueError now if the tokenizer lacks the markers (not the model's tokenizer)
    return formatter


def _default_speakers(config, n: int) -> list[str]:
    pair = (config.user_speaker, config.response_speaker)
    return [pair[i % 2] for i in range(n)]


def _check_batch_size(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _check_not_blank(name: str, texts: Sequence[str]) -> None:
    """An empty (or whitespace-only) turn or candidate has no words to score: a ValueError naming it."""
    for i, text in enumerate(texts):
        if not text.strip():
            raise ValueError(f"{name}[{i}] is empty ({text!r}): every {name[:-1]} needs some text")


def _check_has_tokens(name: str, texts: Sequence[str], token_ids: Sequence[Sequence[int]]) -> None:
    """A turn or candidate the tokenizer reads as nothing (only zero-width or control characters, such as
    ``"\\u200b"`` or ``"\\x00"``) is as empty as a blank one: a ValueError naming it."""
    for i, (text, ids) in enumerate(zip(texts, token_ids)):
        if not ids:
            raise ValueError(
                f"{name}[{i}] is empty: {text!r} gives no token with the model's tokenizer; every "
                f"{name[:-1]} needs some text"
            )


def _merge_candidate_batch_size(kwargs: dict, candidate_batch_size) -> None:
    """``candidate_batch_size`` (the older name of ``batch_size``) put into ``kwargs["batch_size"]``."""
    if candidate_batch_size is None:
        return
    _check_batch_size("candidate_batch_size", candidate_batch_size)
    if kwargs.get("batch_size") not in (None, candidate_batch_size):
        raise ValueError(
            f"candidate_batch_size={candidate_batch_size} and batch_size={kwargs['batch_size']}: they are "
            "the same option (pairs per forward pass); give batch_size only"
        )
    kwargs["batch_size"] = candidate_batch_size


def _row(ids, mask, global_mask) -> dict[str, torch.Tensor]:
    """One model row as the base collate pads it: ``(1, seq)`` int64 tensors."""
    return {
        "input_ids": torch.tensor([ids], dtype=torch.long),
        "attention_mask": torch.tensor([mask], dtype=torch.long),
        "global_attention_mask": torch.tensor([global_mask], dtype=torch.long),
    }


class _DialogueMixin(SaveModelMixin, RightPaddedBatches):
    """Shared input checks, layout and saving; subclasses do the forward and the output."""

    _needs_candidates = False
    #: every option a call takes; any other keyword is a TypeError (a misspelled option must not run with defaults)
    _CALL_OPTIONS: tuple[str, ...] = ()

    def __init__(self, *args, progress=None, **kwargs):
        self._progress = check_progress(progress)  # the default of every call
        super().__init__(*args, **kwargs)
        if getattr(self.model.config, "model_type", None) != "longformer_dialogue":
            raise ValueError(
                f"{type(self).__name__} needs a LongformerForDialogue model, got model_type="
                f"{getattr(self.model.config, 'model_type', None)!r}"
            )
        if self.tokenizer is None:
            raise ValueError(f"{type(self).__name__} needs the model's tokenizer (tokenizer=...)")
        self.model.eval()  # dropout off: deterministic scores
        self.formatter = formatter_for(self.model, self.tokenizer)
        self.pad_multiple = block_multiple(backbone_config(self.model.config.backbone))
        # the constructor's candidates / speakers are defaults: an input dict's own take their place (a call's
        # conflict with the input's, see _dialogue)
        self._input_defaults = {
            name: self._preprocess_params.pop(name)
            for name in ("candidates", "speakers")
            if name in self._preprocess_params
        }

    def __call__(self, inputs, *args, progress=None, **kwargs):
        if args:
            raise TypeError(
                f"{self.task or type(self).__name__} takes one positional argument (the inputs), got {len(args)} "
                f"more {list(args)}; give options by name: {list(self._CALL_OPTIONS)}"
            )
        progress = self._progress if check_progress(progress) is None else progress
        if isinstance(inputs, (list, tuple)):
            if not inputs:
                raise ValueError("no dialogues: pass a dialogue (dict) or a non-empty list of them")
            bar = progress_bar(len(inputs), self.task or type(self).__name__, progress)
            if bar is not None:  # the base batches a generator as a list (batch_size) and yields per dialogue
                try:
                    results = []
                    for result in super().__call__((d for d in inputs), **kwargs):
                        results.append(result)
                        bar.update(1)
                    return results
                finally:
                    bar.close()
            inputs = list(inputs)  # the base batches lists (a tuple would be one input)
        return super().__call__(inputs, **kwargs)

    def _check_options(self, unknown: Mapping) -> None:
        """``_sanitize_parameters``' left-over keywords (of the call or the constructor): a TypeError naming them."""
        if unknown:
            raise TypeError(
                f"{self.task or type(self).__name__} got unknown option(s) {sorted(unknown)}; the call options "
                f"are {list(self._CALL_OPTIONS)}"
            )

    def _dialogue(
        self, inputs, candidates=None, speakers=None
    ) -> tuple[list[str], list[str], list[str] | None]:
        """Validated ``(speakers, turns, candidates)``; errors name the field. ``candidates`` / ``speakers``:
        the call's (a ValueError when the input has its own too); without either, the constructor's."""
        if not isinstance(inputs, Mapping):
            raise TypeError(
                "inputs must be a dict {'turns': [...], 'speakers': [...]"
                + (", 'candidates': [...]}" if self._needs_candidates else "}")
                + f" (or a list of them), got {type(inputs).__name__}"
            )
        keys = list(_KEYS if self._needs_candidates else _KEYS[:2])
        unknown = sorted(set(inputs) - set(keys))
        if unknown:
            raise ValueError(f"inputs has unknown key(s) {unknown}; expected {keys}")
        if "turns" not in inputs:
            raise ValueError("inputs has no 'turns': the dialogue history (a list of str) is required")
        turns = inputs["turns"]
        if isinstance(turns, str) or not isinstance(turns, Sequence):
            raise TypeError(f"turns must be a list of str, got {type(turns).__name__}")
        turns = list(turns)
        for name, value in (("speakers", speakers), ("candidates", candidates)):
            if value is not None and inputs.get(name) is not None:
                raise ValueError(f"{name} given both in inputs and as a call argument")
        speakers = inputs.get("speakers", speakers)
        if speakers is None:
            speakers = self._input_defaults.get("speakers")
        if speakers is None:
            speakers = _default_speakers(self.model.config, len(turns))
        if isinstance(speakers, str) or not isinstance(speakers, Sequence):
            raise TypeError(f"speakers must be a list of str, got {type(speakers).__name__}")
        self.formatter.check_dialogue(list(speakers), turns)  # names turns / speakers / the index at fault
        _check_not_blank("turns", turns)
        if not self._needs_candidates:
            return list(speakers), turns, None
        candidates = inputs.get("candidates", candidates)
        if candidates is None:
            candidates = self._input_defaults.get("candidates")
        if candidates is None:
            raise ValueError("no candidates: pass inputs['candidates'] or candidates=[...] (a list of str)")
        if isinstance(candidates, str) or not isinstance(candidates, Sequence):
            raise TypeError(f"candidates must be a list of str, got {type(candidates).__name__}")
        candidates = list(candidates)
        if not candidates:
            raise ValueError("candidates is empty: response selection needs at least one candidate")
        for i, c in enumerate(candidates):
            if not isinstance(c, str):
                raise TypeError(f"candidates[{i}] must be a str, got {type(c).__name__}: {c!r}")
        _check_not_blank("candidates", candidates)
        return list(speakers), turns, candidates


class DialogueResponseSelectionPipeline(_DialogueMixin, ChunkPipeline):
    """Rank candidate responses to a dialogue history.

    Input: ``{"turns": [...], "speakers": [...], "candidates": [...]}``. Output::

        {"ranking": [{"index": i, "candidate": str, "score": float, "probability": float}, ...],
         "truncated_turns": int, "truncated_tokens": int, "truncated_candidate_tokens": int}

    ``ranking`` holds every candidate exactly once, best first (highest ``score``, the model's logit for the
    pair; ties keep input order); ``index`` is the candidate's position in the input, ``probability`` the
    softmax of the scores over the given candidates. Every candidate is scored against the same history: when
    it does not fit next to the longest candidate, the oldest turns are dropped for all (``truncated_turns``);
    ``truncated_tokens`` is the most tokens any candidate's pairing cut from the newest turn (only when that
    turn alone is too long). A candidate longer than the room left next to the newest turn's separator and
    one of its tokens is scored on its first tokens: ``truncated_candidate_tokens`` is the most tokens cut
    from any candidate, and a ``UserWarning`` names the candidates cut (they may tie with candidates that
    differ only in the cut part).

    Call options: ``candidates``, ``speakers`` (instead of the dict keys), ``batch_size`` (pairs per forward
    pass, default :data:`DEFAULT_BATCH_SIZE`; ``candidate_batch_size`` is its older name; neither changes the
    scores beyond float rounding), ``progress`` (a bar over the dialogues of a list: None = when there are
    many, True, False). Any other keyword is a ``TypeError``. Options given to the constructor are the
    defaults of every call.
    """

    _needs_candidates = True
    _CALL_OPTIONS = ("candidates", "speakers", "batch_size", "candidate_batch_size", "progress")

    def __init__(self, *args, candidate_batch_size=None, **kwargs):
        _merge_candidate_batch_size(kwargs, candidate_batch_size)
        super().__init__(*args, **kwargs)
        if not self.supports_config(self.model.config):
            raise ValueError("this model has no response-selection head (config.selection_head=False)")
        if self._batch_size is None:
            self._batch_size = DEFAULT_BATCH_SIZE

    @classmethod
    def supports_config(cls, config) -> bool:
        """Whether a dialogue model of ``config`` has a response-selection head (its saved folder lists this
        pipeline in ``custom_pipelines`` only then: :func:`hf_sparse.tasks.registry.serves`)."""
        return bool(getattr(config, "selection_head", False))

    def __call__(self, inputs, *args, candidate_batch_size=None, **kwargs):
        _merge_candidate_batch_size(kwargs, candidate_batch_size)
        if kwargs.get("batch_size") is not None:
            _check_batch_size("batch_size", kwargs["batch_size"])
        return super().__call__(inputs, *args, **kwargs)

    def _sanitize_parameters(self, candidates=None, speakers=None, **kwargs):
        self._check_options(kwargs)
        pre = {}
        if candidates is not None:
            pre["candidates"] = candidates
        if speakers is not None:
            pre["speakers"] = speakers
        return pre, {}, {}

    def preprocess(self, inputs, candidates=None, speakers=None):
        """One row per (history, candidate) pair, the history the same for every candidate."""
        speakers, turns, candidates = self._dialogue(inputs, candidates, speakers)  # validated
        tokenize = self.formatter.tokenize_turns
        turn_ids, candidate_ids = tokenize(turns), tokenize(candidates)
        _check_has_tokens("turns", turns, turn_ids)
        _check_has_tokens("candidates", candidates, candidate_ids)
        # laid out as in training: pack_candidates
        encoded = pack_candidates(self.formatter, speakers, turn_ids, candidate_ids)
        truncated_turns, truncated_tokens = max(encoded["truncated_turns"]), max(encoded["truncated_tokens"])
        cut = encoded["truncated_candidate_tokens"]
        if any(cut):
            warnings.warn(
                f"dialogue-response-selection: candidate(s) {[i for i, n in enumerate(cut) if n]} do not fit in "
                f"max_length={self.formatter.max_length} tokens next to the newest turn; they were scored on their "
                f"first tokens (up to {max(cut)} cut, truncated_candidate_tokens in the output), so candidates "
                "that differ only after the cut get the same score.",
                UserWarning,
                stacklevel=2,
            )
        for k, candidate in enumerate(candidates):
            row = _row(
                encoded["input_ids"][k], encoded["attention_mask"][k], encoded["global_attention_mask"][k]
            )
            yield {
                **row,
                "candidate_positions": torch.tensor(
                    [encoded["candidate_positions"][k]], dtype=torch.long
                ),  # (1,)
                "candidate": candidate,
                "truncated_turns": truncated_turns,
                "truncated_tokens": truncated_tokens,
                "truncated_candidate_tokens": max(cut),
                "is_last": k == len(candidates) - 1,
            }

    def _forward(self, model_inputs):
        batch = pad_to_multiple(model_inputs, self.pad_multiple, self.tokenizer.pad_token_id)
        out = self.model(
            input_ids=batch["input_ids"],  # (B, seq): one (history, candidate) pair per row
            attention_mask=batch["attention_mask"],
            global_attention_mask=batch["global_attention_mask"],
            candidate_positions=batch["candidate_positions"],  # (B,)
        )
        meta = ("candidate", "truncated_turns", "truncated_tokens", "truncated_candidate_tokens", "is_last")
        return {"scores": out.selection_logits.float(), **{k: model_inputs[k] for k in meta}}  # scores (B,)

    def postprocess(self, model_outputs):
        scores = torch.cat([o["scores"].reshape(1) for o in model_outputs])  # (n_candidates,)
        probs = torch.softmax(scores, 0)
        order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
        ranking = [
            {
                "index": i,
                "candidate": model_outputs[i]["candidate"],
                "score": float(scores[i]),
                "probability": float(probs[i]),
            }
            for i in order
        ]
        return {
            "ranking": ranking,
            "truncated_turns": int(model_outputs[0]["truncated_turns"]),
            "truncated_tokens": int(model_outputs[0]["truncated_tokens"]),
            "truncated_candidate_tokens": int(model_outputs[0]["truncated_candidate_tokens"]),
        }


class DialogueStateTrackingPipeline(_DialogueMixin, Pipeline):
    """Per-turn dialogue acts and the user's current active intent for a dialogue history.

    Input: ``{"turns": [...], "speakers": [...]}``. Output::

        {"turns": [{"turn": i, "speaker": str, "text": str, "acts": [...], "act_scores": {act: p},
                    "intent": str | None, "intent_score": float | None}, ...],
         "intent": str | None, "intent_score": float | None,
         "truncated_turns": int, "truncated_tokens": int}

    ``turns`` lists the kept turns (``turn`` = index in the input; left-truncated turns are absent). ``acts``:
    the acts with probability ``>= act_threshold`` (default: the model's per-act ``config.act_thresholds`` if it
    has them, else ``config.act_threshold``), in the model's label
    order; ``intent``: the most probable intent of a user turn (``None`` for other speakers). The top-level
    ``intent`` is that of the newest user turn (the current intent), ``None`` if the kept history has no user
    turn. All turns are read in one pass over the history: the newest turn (and so the current intent) sees
    only the past, an earlier turn also sees the turns after it.

    Call options: ``speakers`` (instead of the dict key), ``act_threshold``, ``batch_size``, ``progress`` (a bar
    over the dialogues of a list: None = when there are many, True, False). Any other keyword is a
    ``TypeError``. Options given to the constructor are the defaults of every call.
    """

    _CALL_OPTIONS = ("speakers", "act_threshold", "batch_size", "progress")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.supports_config(self.model.config):
            raise ValueError(
                "this model has no act or intent head (config.act_labels / intent_labels are empty)"
            )

    @classmethod
    def supports_config(cls, config) -> bool:
        """Whether a dialogue model of ``config`` has an act or intent head (its saved folder lists this
        pipeline in ``custom_pipelines`` only then: :func:`hf_sparse.tasks.registry.serves`)."""
        return bool(getattr(config, "act_labels", None) or getattr(config, "intent_labels", None))

    def _sanitize_parameters(self, speakers=None, act_threshold=None, **kwargs):
        self._check_options(kwargs)
        pre, post = {}, {}
        if speakers is not None:
            pre["speakers"] = speakers
        if act_threshold is not None:
            post["act_threshold"] = check_fraction(
                "act_threshold", act_threshold, closed_low=False, closed_high=False
            )
        return pre, {}, post

    def preprocess(self, inputs, speakers=None):
        speakers, turns, _ = self._dialogue(inputs, None, speakers)
        turn_ids = self.formatter.tokenize_turns(turns)
        _check_has_tokens("turns", turns, turn_ids)
        encoded = self.formatter.pack(speakers, turn_ids)  # as encode_dialogue (the dialogue is checked)
        return {
            "n_turns": torch.tensor([len(encoded["turn_positions"])], dtype=torch.long),  # (1,)
            **_row(encoded["input_ids"], encoded["attention_mask"], encoded["global_attention_mask"]),
            "turn_positions": torch.tensor([encoded["turn_positions"]], dtype=torch.long),  # (1, n_turns)
            "speakers": speakers,
            "turns": turns,
            "turn_index": encoded["turn_index"],
            "truncated_turns": encoded["truncated_turns"],
            "truncated_tokens": encoded["truncated_tokens"],
        }

    def _forward(self, model_inputs):
        batch = pad_to_multiple(model_inputs, self.pad_multiple, self.tokenizer.pad_token_id)
        out = self.model(
            input_ids=batch["input_ids"],  # (B, seq)
            attention_mask=batch["attention_mask"],
            global_attention_mask=batch["global_attention_mask"],
            turn_positions=right_padded(
                batch["turn_positions"], batch["n_turns"]
            ),  # (B, max_turns), -1 = none
        )
        res = {k: model_inputs[k] for k in ("n_turns", "speakers", "turns", "turn_index", "truncated_turns",
                                            "truncated_tokens")}  # fmt: skip
        if out.act_logits is not None:
            res["act_probs"] = torch.sigmoid(out.act_logits.float())  # (B, max_turns, A)
        if out.intent_logits is not None:
            res["intent_probs"] = torch.softmax(out.intent_logits.float(), -1)  # (B, max_turns, I)
        return res

    def postprocess(self, model_outputs, act_threshold=None):
        cfg = self.model.config
        thresholds = cfg.thresholds() if act_threshold is None else [act_threshold] * len(cfg.act_labels)
        rows, current, current_score = [], None, None
        for k, i in enumerate(model_outputs["turn_index"]):
            speaker = model_outputs["speakers"][i]
            row = {"turn": i, "speaker": speaker, "text": model_outputs["turns"][i]}
            if "act_probs" in model_outputs:
                p = model_outputs["act_probs"][0, k]
                row["acts"] = [a for a, v, t in zip(cfg.act_labels, p, thresholds) if float(v) >= t]
                row["act_scores"] = {a: round(float(v), 4) for a, v in zip(cfg.act_labels, p)}
            if "intent_probs" in model_outputs:
                row["intent"], row["intent_score"] = None, None
                if speaker == cfg.user_speaker:
                    p = model_outputs["intent_probs"][0, k]
                    j = int(p.argmax())
                    row["intent"], row["intent_score"] = cfg.intent_labels[j], round(float(p[j]), 4)
                    current, current_score = row["intent"], row["intent_score"]
            rows.append(row)
        return {
            "turns": rows,
            "intent": current,
            "intent_score": current_score,
            "truncated_turns": int(model_outputs["truncated_turns"]),
            "truncated_tokens": int(model_outputs["truncated_tokens"]),
        }


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DialogueResponseSelectionPipeline",
    "DialogueStateTrackingPipeline",
    "formatter_for",
]
