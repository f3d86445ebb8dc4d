"""Dialogue formatting for long-context (Longformer-style) encoders, SGD readers and labels, example builders
and collators for per-turn tracking and response selection.

Token layout (exact). ``P`` is the tokenizer's prefix token: ``cls_token`` if it has one, else ``bos_token``,
else nothing. ``S`` is its suffix token: ``sep_token``, else ``eos_token``, else nothing. Every turn starts with
its *separator*, which is the turn's speaker token (``[USR]``/``[SYS]``) by default, or ``turn_separator``
followed by the speaker token when one is given::

    encode_dialogue:  P  [USR] hi there  [SYS] hello  [USR] book a table ...  S
    encode_pair:      P  [USR] hi there  [SYS] hello  [USR] book a table  [RSP] what time ?  S
    turn_separator="[TURN]":  P  [TURN] [USR] hi there  [TURN] [SYS] hello ...  S

e.g. BERT: ``[CLS] [USR] hi there [SYS] hello [SEP]``; RoBERTa: ``<s> [USR] hi there [SYS] hello </s>``; a
tokenizer with none of cls/bos/sep/eos: ``[USR] hi there [SYS] hello``. ``turn_positions[k]`` is the index of
the first token of kept turn ``k`` (its separator), where per-turn heads read the turn's representation;
``candidate_position`` is the index of the candidate separator ``[RSP]``. Turn text is tokenized with
``add_special_tokens=False, split_special_tokens=True``: a literal ``"[SYS]"`` (or ``"[CLS]"``) typed in a turn
is text, never a separator.

Truncation (left, never silent): turns are kept newest first while they fit in ``max_length``; the first turn
that does not fit and every older one are dropped whole (``truncated_turns`` says how many, always present). The
newest turn is never dropped: if it alone does not fit, its *oldest* text tokens are cut (its separator stays;
``truncated_tokens`` says how many, always present). In ``encode_pair`` the candidate is placed first and keeps
all its tokens unless it alone would leave no room for the newest turn's separator and one of its tokens; then
its *last* tokens are cut (``truncated_candidate_tokens``).

Global attention mask (1 = global, Longformer convention), by the names in ``global_on``: ``"cls"`` the prefix
token; ``"separators"`` every turn separator and ``[RSP]``; ``"latest_turn"`` every token of the newest kept
turn; ``"candidate"`` ``[RSP]`` and the candidate's tokens. The suffix token and padding are never global.

New tokens: :meth:`DialogueFormatter.add_special_tokens` registers the speaker tokens, ``turn_separator`` and
``candidate_separator`` as special tokens of any Hugging Face tokenizer and returns how many were new; the model
must then be resized: ``model.resize_token_embeddings(len(tokenizer))``.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ...data.padding import pad_rows, padded_length
from ...utils.labels import IGNORE_INDEX
from ...utils.validation import check_positive_int

NONE_INTENT = "NONE"
GLOBAL_ON_NAMES = ("cls", "separators", "latest_turn", "candidate")
DEFAULT_SPEAKER_TOKENS = {"USER": "[USR]", "SYSTEM": "[SYS]"}
SGD_FIELDS = ("dialogue_id", "speakers", "turns")
_PARALLEL_FIELDS = ("speakers", "turns", "acts", "act_slots", "active_intent", "services_per_turn")


# ---------------------------------------------------------------- validation helpers


def _check_str_list(name: str, values: Any) -> None:
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a list of str, got {type(values).__name__}")
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(v).__name__}: {v!r}")


def _normalize_text(text: str) -> str:
    """Whitespace-collapsed, case-folded text: the identity used to keep negatives distinct from the positive."""
    return " ".join(text.split()).casefold()


# ---------------------------------------------------------------- formatter


class DialogueFormatter:
    """Turn a dialogue (speakers + turns) into token ids, a global attention mask and turn positions.

    See the module docstring for the exact layout, truncation and global-attention rules.

    Args:
        tokenizer: any Hugging Face tokenizer (fast or Python). Call :meth:`add_special_tokens` once before
            encoding, then ``model.resize_token_embeddings(len(tokenizer))``.
        max_length: total length budget, prefix/suffix tokens included.
        speaker_tokens: speaker name -> its token; these are the turn separators unless ``turn_separator``
            is given. Speakers not in this mapping are rejected.
        turn_separator: optional extra token put before each speaker token; then it is the separator that
            ``turn_positions`` point to.
        candidate_separator: token before the candidate response in :meth:`encode_pair`.
        global_on: which tokens get global attention, a subset of ``("cls", "separators", "latest_turn",
            "candidate")``.

    Example::

        formatter = DialogueFormatter(tokenizer, max_length=4096)
        formatter.add_special_tokens(tokenizer)
        model.resize_token_embeddings(len(tokenizer))
        enc = formatter.encode_dialogue(["USER", "SYSTEM"], ["hi there", "hello"])
    """

    def __init__(
        self,
        tokenizer: Any,
        max_length: int = 4096,
        speaker_tokens: Mapping[str, str] | None = None,
        turn_separator: str | None = None,
        candidate_separator: str = "[RSP]",
        global_on: Collection[str] = GLOBAL_ON_NAMES,
    ) -> None:
        speaker_tokens = dict(DEFAULT_SPEAKER_TOKENS if speaker_tokens is None else speaker_tokens)
        if not speaker_tokens:
            raise ValueError("speaker_tokens must map at least one speaker to a token, got {}")
        for speaker, token in speaker_tokens.items():
            if not isinstance(speaker, str) or not isinstance(token, str) or not token:
                raise TypeError(f"speaker_tokens must map str to non-empty str, got {speaker!r}: {token!r}")
        markers = [*speaker_tokens.values(), turn_separator, candidate_separator]
        markers = [m for m in markers if m is not None]
        if not isinstance(candidate_separator, str) or not candidate_separator:
            raise TypeError(f"candidate_separator must be a non-empty str, got {candidate_separator!r}")
        if turn_separator is not None and (not isinstance(turn_separator, str) or not turn_separator):
            raise TypeError(f"turn_separator must be a non-empty str or None, got {turn_separator!r}")
        if len(set(markers)) != len(markers):
            raise ValueError(
                f"speaker tokens, turn_separator and candidate_separator must differ, got {markers}"
            )
        if isinstance(global_on, str) or not isinstance(global_on, Iterable):
            raise TypeError(f"global_on must be a collection of names, got {global_on!r}")
        unknown = sorted(set(global_on) - set(GLOBAL_ON_NAMES))
        if unknown:
            raise ValueError(f"global_on has unknown names {unknown}; choose from {list(GLOBAL_ON_NAMES)}")
        self.tokenizer = tokenizer
        self.speaker_tokens = speaker_tokens
        self.turn_separator = turn_separator
        self.candidate_separator = candidate_separator
        self.global_on = frozenset(global_on)
        self.prefix_ids = _first_id(tokenizer, ("cls_token_id", "bos_token_id"))
        self.suffix_ids = _first_id(tokenizer, ("sep_token_id", "eos_token_id"))
        self.separator_length = 1 if turn_separator is None else 2
        minimum = self.min_length
        check_positive_int("max_length", max_length)
        if max_length < minimum:
            raise ValueError(
                f"max_length={max_length} is too small: a pair needs the prefix/suffix tokens, one turn "
                f"separator with one token, [RSP] and one candidate token ({minimum} tokens)"
            )
        self.max_length = max_length
        self._ids_cache: tuple[int, dict[str, int]] | None = None

    # -- configuration -------------------------------------------------

    @property
    def min_length(self) -> int:
        """Smallest ``max_length`` that fits a pair: prefix, suffix, one turn (separator + 1 token), [RSP] + 1."""
        return len(self.prefix_ids) + len(self.suffix_ids) + self.separator_length + 1 + 2

    @property
    def marker_tokens(self) -> list[str]:
        """The tokens this formatter adds: speaker tokens, then ``turn_separator``, then ``candidate_separator``."""
        extra = [] if self.turn_separator is None else [self.turn_separator]
        return [*self.speaker_tokens.values(), *extra, self.candidate_separator]

    def to_dict(self) -> dict[str, Any]:
        """Constructor arguments except the tokenizer (JSON-serialisable, e.g. for a model config)."""
        return {
            "max_length": self.max_length,
            "speaker_tokens": dict(self.speaker_tokens),
            "turn_separator": self.turn_separator,
            "candidate_separator": self.candidate_separator,
            "global_on": sorted(self.global_on),
        }

    def add_special_tokens(self, tokenizer: Any | None = None) -> int:
        """Register :attr:`marker_tokens` as special tokens of ``tokenizer`` (default: this formatter's).

        Works with any Hugging Face tokenizer (BERT-like, RoBERTa-like, none with cls/sep); tokens already
        present are not added again, existing extra special tokens are kept. Returns the number of tokens
        added to the vocabulary; when it is not 0, resize the model:
        ``model.resize_token_embeddings(len(tokenizer))``.
        """
        tokenizer = self.tokenizer if tokenizer is None else tokenizer
        added = tokenizer.add_special_tokens(
            {"extra_special_tokens": self.marker_tokens}, replace_extra_special_tokens=False
        )
        self._ids_cache = None
        return int(added)

    def _marker_ids(self) -> dict[str, int]:
        """Token id of every marker token; ``ValueError`` if one is not a single token of the vocabulary."""
        size = len(self.tokenizer)
        if self._ids_cache is not None and self._ids_cache[0] == size:
            return self._ids_cache[1]
        vocab = self.tokenizer.get_vocab()
        missing = [t for t in self.marker_tokens if t not in vocab]
        if missing:
            raise ValueError(
                f"tokens {missing} are not in the tokenizer's vocabulary: call "
                "formatter.add_special_tokens(tokenizer), then model.resize_token_embeddings(len(tokenizer))"
            )
        ids = {t: int(vocab[t]) for t in self.marker_tokens}
        self._ids_cache = (size, ids)
        return ids

    # -- validation and tokenization -----------------------------------

    def check_dialogue(self, speakers: Sequence[str], turns: Sequence[str]) -> None:
        """``TypeError``/``ValueError`` naming the field (and index/value) of the first problem found."""
        _check_str_list("speakers", speakers)
        _check_str_list("turns", turns)
        if len(turns) == 0:
            raise ValueError("turns is empty: a dialogue (history) needs at least one turn")
        if len(speakers) != len(turns):
            raise ValueError(
                f"speakers and turns must have the same length, got {len(speakers)} and {len(turns)}"
            )
        for i, speaker in enumerate(speakers):
            if speaker not in self.speaker_tokens:
                raise ValueError(
                    f"speakers[{i}] is {speaker!r}, not a known speaker; known: {sorted(self.speaker_tokens)}"
                )

    def tokenize_turns(self, turns: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens; special-token strings in the text stay text."""
        _check_str_list("turns", turns)
        if not turns:
            return []
        encoded = self.tokenizer(
            list(turns),
            add_special_tokens=False,
            split_special_tokens=True,
            return_attention_mask=False,
            return_token_type_ids=False,
            verbose=False,
        )
        return [list(ids) for ids in encoded["input_ids"]]

    # -- encoding ------------------------------------------------------

    def encode_dialogue(self, speakers: Sequence[str], turns: Sequence[str]) -> dict[str, Any]:
        """Encode a whole dialogue for per-turn tracking.

        Returns ``input_ids``, ``attention_mask`` (all 1), ``global_attention_mask``, ``turn_positions`` (index
        of each kept turn's separator), ``turn_index`` (original index of each kept turn), ``truncated_turns``
        (oldest turns dropped) and ``truncated_tokens`` (oldest tokens cut from the newest turn).
        """
        self.check_dialogue(speakers, turns)
        return self.pack(speakers, self.tokenize_turns(turns))

    def encode_pair(self, speakers: Sequence[str], turns: Sequence[str], candidate: str) -> dict[str, Any]:
        """Encode a history and one candidate response after ``[RSP]`` for response selection.

        Same fields as :meth:`encode_dialogue` plus ``candidate_position`` (index of ``[RSP]``) and
        ``truncated_candidate_tokens``. Truncation keeps the candidate and the newest turns.
        """
        self.check_dialogue(speakers, turns)
        if not isinstance(candidate, str):
            raise TypeError(f"candidate must be a str, got {type(candidate).__name__}: {candidate!r}")
        (candidate_ids,) = self.tokenize_turns([candidate])
        return self.pack(speakers, self.tokenize_turns(turns), candidate_ids)

    def encode_candidates(
        self, speakers: Sequence[str], turns: Sequence[str], candidates: Sequence[str]
    ) -> dict[str, list]:
        """Encode one history with each candidate: every field of :meth:`encode_pair` as a list over candidates
        (``candidate_position`` becomes ``candidate_positions``), the format :class:`ResponseSelectionCollator`
        takes. The history is tokenized once."""
        self.check_dialogue(speakers, turns)
        _check_str_list("candidates", candidates)
        if len(candidates) == 0:
            raise ValueError("candidates is empty: response selection needs at least one candidate")
        turn_ids = self.tokenize_turns(turns)
        return _group([self.pack(speakers, turn_ids, c) for c in self.tokenize_turns(candidates)])

    def pack(
        self,
        speakers: Sequence[str],
        turn_ids: Sequence[Sequence[int]],
        candidate_ids: Sequence[int] | None = None,
    ) -> dict[str, Any]:
        """Lay out already-tokenized turns (and optionally a candidate): the step shared by every ``encode_*``.

        ``speakers`` must be validated already (see :meth:`check_dialogue`); ``turn_ids`` holds each turn's
        text ids without special tokens, as :meth:`tokenize_turns` returns them.
        """
        if len(turn_ids) == 0 or len(turn_ids) != len(speakers):
            raise ValueError(
                f"need one token list per speaker, got {len(turn_ids)} for {len(speakers)} speakers"
            )
        ids = self._marker_ids()
        budget = self.max_length - len(self.prefix_ids) - len(self.suffix_ids)
        candidate, cut_candidate = None, 0
        if candidate_ids is not None:
            room = budget - 1 - (self.separator_length + 1)  # leave the newest turn its separator + 1 token
            candidate = list(candidate_ids[:room])
            cut_candidate = len(candidate_ids) - len(candidate)
            budget -= 1 + len(candidate)
        kept, cut_tokens = self._keep_newest(turn_ids, budget)

        builder = _SequenceBuilder()
        builder.add(self.prefix_ids, is_global="cls" in self.global_on)
        turn_positions = []
        for k, i in enumerate(kept):
            latest = k == len(kept) - 1 and "latest_turn" in self.global_on
            body = list(turn_ids[i][cut_tokens:] if k == len(kept) - 1 else turn_ids[i])
            speaker_id = ids[self.speaker_tokens[speakers[i]]]
            turn_positions.append(builder.length)
            if self.turn_separator is None:
                builder.add([speaker_id], is_global=latest or "separators" in self.global_on)
            else:
                builder.add([ids[self.turn_separator]], is_global=latest or "separators" in self.global_on)
                builder.add([speaker_id], is_global=latest)
            builder.add(body, is_global=latest)
        candidate_position = builder.length
        if candidate is not None:
            rsp_global = bool({"separators", "candidate"} & self.global_on)
            builder.add([ids[self.candidate_separator]], is_global=rsp_global)
            builder.add(candidate, is_global="candidate" in self.global_on)
        builder.add(self.suffix_ids, is_global=False)
        out: dict[str, Any] = {
            "input_ids": builder.input_ids,
            "attention_mask": [1] * builder.length,
            "global_attention_mask": builder.global_mask,
            "turn_positions": turn_positions,
            "turn_index": kept,
            "truncated_turns": kept[0],
            "truncated_tokens": cut_tokens,
        }
        if candidate is not None:
            out["candidate_position"] = candidate_position
            out["truncated_candidate_tokens"] = cut_candidate
        return out

    def _keep_newest(self, turn_ids: Sequence[Sequence[int]], budget: int) -> tuple[list[int], int]:
        """Indices of the turns kept (newest first while they fit, a contiguous suffix) and the number of
        oldest tokens cut from the newest turn when it alone exceeds ``budget``."""
        kept: list[int] = []
        cut = 0
        for i in range(len(turn_ids) - 1, -1, -1):
            cost = self.separator_length + len(turn_ids[i])
            if cost <= budget:
                kept.append(i)
                budget -= cost
            elif not kept:  # the newest turn alone is too long: keep its separator and newest tokens
                cut = cost - budget
                kept.append(i)
                break
            else:
                break
        return kept[::-1], cut


class _SequenceBuilder:
    """Accumulates token ids and their global-attention flags."""

    def __init__(self) -> None:
        self.input_ids: list[int] = []
        self.global_mask: list[int] = []

    @property
    def length(self) -> int:
        return len(self.input_ids)

    def add(self, token_ids: Sequence[int], is_global: bool) -> None:
        self.input_ids.extend(map(int, token_ids))
        self.global_mask.extend([int(is_global)] * len(token_ids))


def _first_id(tokenizer: Any, attributes: Sequence[str]) -> list[int]:
    """``[id]`` of the first of ``attributes`` the tokenizer sets (e.g. cls, then bos), else ``[]``."""
    for attribute in attributes:
        token_id = getattr(tokenizer, attribute, None)
        if token_id is not None:
            return [int(token_id)]
    return []


def _group(encodings: Sequence[Mapping[str, Any]]) -> dict[str, list]:
    """Per-candidate encodings -> one dict of lists (``candidate_position`` -> ``candidate_positions``)."""
    rename = {"candidate_position": "candidate_positions"}
    return {rename.get(k, k): [e[k] for e in encodings] for k in encodings[0]}


# ---------------------------------------------------------------- a tokenizer from the training dialogues


def train_dialogue_tokenizer(
    texts: Iterable[str],
    *,
    kind: str = "word",
    min_frequency: int = 2,
    vocab_size: int | None = None,
    lowercase: bool = True,
) -> Any:
    """A BERT-style fast tokenizer (``[PAD] [UNK] [CLS] [SEP] [MASK]``) trained on ``texts`` (e.g. every turn of
    the training dialogues), for models trained from scratch where no pretrained tokenizer is available.

    ``kind="word"``: one token per word (BERT's normalizer and pre-tokenizer: accents stripped, punctuation split
    off; lowercased if ``lowercase``); words seen fewer than ``min_frequency`` times, or beyond the ``vocab_size``
    most frequent ones, become ``[UNK]``. A word-level vocabulary keeps a small model's sequences short and every
    token meaningful. ``kind="wordpiece"``: a WordPiece vocabulary of ``vocab_size`` (default 8000), so rare words
    are split into pieces instead of becoming ``[UNK]``.

    The dialogue markers (``[USR]``, ``[SYS]``, ``[RSP]``) are not added here: call
    :meth:`DialogueFormatter.add_special_tokens`.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if kind not in ("word", "wordpiece"):
        raise ValueError(f"kind must be 'word' or 'wordpiece', got {kind!r}")
    check_positive_int("min_frequency", min_frequency)
    check_positive_int("vocab_size", vocab_size, allow_none=True)
    if isinstance(texts, str) or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be an iterable of str, got {type(texts).__name__}")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    checked = (_checked_text(i, t) for i, t in enumerate(texts))
    if kind == "word":
        tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        trainer = trainers.WordLevelTrainer(
            vocab_size=(vocab_size or 10**9) + len(specials),
            min_frequency=min_frequency,
            special_tokens=specials,
        )
    else:
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size or 8000, min_frequency=min_frequency, special_tokens=specials
        )
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase or None)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(checked, trainer)
    if tok.get_vocab_size() <= len(specials):
        raise ValueError("texts has no word seen min_frequency times: the vocabulary would be empty")
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        do_lower_case=lowercase,
    )


def _checked_text(i: int, text: Any) -> str:
    if not isinstance(text, str):
        raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}: {text!r}")
    return text


# ---------------------------------------------------------------- SGD rows and labels


def check_sgd_record(dialogue: Any, where: str) -> None:
    """A Schema-Guided Dialogue row (``ValueError`` naming ``where`` and the field otherwise): it has
    ``dialogue_id``, ``speakers`` and ``turns``, and the per-turn fields that are present
    (``speakers``, ``turns``, ``acts``, ``act_slots``, ``active_intent``, ``services_per_turn``) have one
    entry per turn. A field that is null counts as absent (``datasets`` fills a field some rows lack
    with null)."""
    if not isinstance(dialogue, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(dialogue).__name__}")
    missing = [k for k in SGD_FIELDS if dialogue.get(k) is None]
    if missing:
        raise ValueError(f"{where}: missing field(s) {missing}")
    n = len(dialogue["turns"])
    for name in _PARALLEL_FIELDS:
        if dialogue.get(name) is not None and len(dialogue[name]) != n:
            raise ValueError(f"{where}: field {name!r} has {len(dialogue[name])} entries for {n} turns")


@dataclass(frozen=True)
class DialogueLabels:
    """Label vocabularies for per-turn tracking, built from training dialogues.

    - ``acts``: sorted act names over *all* turns (USER and SYSTEM: SGD annotates both; SYSTEM-only acts such
      as ``OFFER`` are part of the vocabulary). Read from the per-turn field ``act_field`` (``"acts"`` or
      the finer ``"act_slots"``).
    - ``intents``: ``none_intent`` (``"NONE"``) at id 0, then the sorted ``active_intent`` values of USER turns.
      A USER turn whose intent is ``None`` or ``""`` counts as ``none_intent``; SGD itself labels USER turns
      without an active intent ``"NONE"``. SYSTEM turns have no intent (``null`` in SGD).
    - ``seen_intents``: the intents that occur in the training dialogues, so evaluation can report seen vs
      unseen intents (SGD's dev/test contain services, hence intents, not in train).
    """

    acts: tuple[str, ...]
    intents: tuple[str, ...]
    seen_intents: frozenset[str]
    none_intent: str = NONE_INTENT
    act_field: str = "acts"
    act_to_id: dict[str, int] = field(init=False, repr=False, compare=False)
    intent_to_id: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.intents or self.intents[0] != self.none_intent:
            raise ValueError(
                f"intents must start with none_intent {self.none_intent!r}, got {self.intents[:1]}"
            )
        for name in ("acts", "intents"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"{name} has duplicates: {list(values)}")
        object.__setattr__(self, "act_to_id", {a: i for i, a in enumerate(self.acts)})
        object.__setattr__(self, "intent_to_id", {a: i for i, a in enumerate(self.intents)})

    @classmethod
    def from_dialogues(
        cls,
        dialogues: Iterable[Mapping[str, Any]],
        act_field: str = "acts",
        user_speaker: str = "USER",
        none_intent: str = NONE_INTENT,
    ) -> DialogueLabels:
        """Vocabularies from (training) dialogues with per-turn ``act_field`` and ``active_intent``."""
        acts: set[str] = set()
        seen: set[str] = set()
        n = 0
        for d, dialogue in enumerate(dialogues):
            n += 1
            if act_field not in dialogue:
                raise ValueError(f"dialogues[{d}] has no field {act_field!r}")
            for turn_acts in dialogue[act_field]:
                acts.update(turn_acts)
            for speaker, intent in zip(dialogue["speakers"], dialogue.get("active_intent") or []):
                if speaker == user_speaker:
                    seen.add(intent or none_intent)
        if n == 0:
            raise ValueError("dialogues is empty: cannot build label vocabularies")
        intents = (none_intent, *sorted(seen - {none_intent}))
        return cls(tuple(sorted(acts)), intents, frozenset(seen), none_intent, act_field)

    @property
    def n_acts(self) -> int:
        return len(self.acts)

    @property
    def n_intents(self) -> int:
        return len(self.intents)

    def intent_id(self, intent: str | None) -> int:
        """Id of a USER turn's intent (``None``/``""`` -> ``none_intent``); ``-100`` if not in the vocabulary."""
        return self.intent_to_id.get(intent or self.none_intent, IGNORE_INDEX)

    def act_vector(self, acts: Iterable[str]) -> tuple[list[int], list[str]]:
        """Multi-hot ``(n_acts,)`` row for one turn's acts, and the acts not in the vocabulary (sorted)."""
        row = [0] * self.n_acts
        unknown = set()
        for act in acts:
            j = self.act_to_id.get(act)
            if j is None:
                unknown.add(act)
            else:
                row[j] = 1
        return row, sorted(unknown)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (lists), e.g. to store in a model config."""
        return {
            "acts": list(self.acts),
            "intents": list(self.intents),
            "seen_intents": sorted(self.seen_intents),
            "none_intent": self.none_intent,
            "act_field": self.act_field,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DialogueLabels:
        """Inverse of :meth:`to_dict`."""
        missing = [k for k in ("acts", "intents", "seen_intents") if k not in data]
        if missing:
            raise ValueError(f"DialogueLabels.from_dict: missing key(s) {missing}")
        return cls(
            acts=tuple(data["acts"]),
            intents=tuple(data["intents"]),
            seen_intents=frozenset(data["seen_intents"]),
            none_intent=data.get("none_intent", NONE_INTENT),
            act_field=data.get("act_field", "acts"),
        )


# ---------------------------------------------------------------- tracking examples


def build_tracking_examples(
    dialogues: Sequence[Mapping[str, Any]],
    formatter: DialogueFormatter,
    labels: DialogueLabels,
    *,
    mode: str = "dialogue",
    act_speakers: Collection[str] | None = None,
    user_speaker: str = "USER",
) -> list[dict[str, Any]]:
    """Per-turn act and intent examples, labels aligned to ``turn_positions``.

    ``mode="dialogue"``: one example per dialogue, every kept turn labelled (a bidirectional encoder then also
    sees the turns after each labelled one). ``mode="prefix"``: one example per turn ``t`` from ``turns[:t+1]``,
    only turn ``t`` labelled (what a tracker sees online); turns with no label at all are skipped.

    Each example has the :meth:`DialogueFormatter.encode_dialogue` fields plus ``dialogue_id``, ``act_labels``
    (``n_kept_turns x n_acts`` 0/1; rows of ``-100`` for turns not labelled or whose speaker is not in
    ``act_speakers``, default all speakers), ``intent_labels`` (id per kept turn; ``-100`` for non-USER turns
    and for intents outside ``labels.intents``), ``intents`` (gold intent name per kept turn, ``None`` for
    non-USER turns, for seen/unseen evaluation) and ``unknown_acts`` (sorted acts outside the vocabulary,
    normally empty). Prefix examples also have ``turn`` (the labelled turn's index).
    """
    if mode not in ("dialogue", "prefix"):
        raise ValueError(f"mode must be 'dialogue' or 'prefix', got {mode!r}")
    examples = []
    for d, (dialogue, turn_ids) in enumerate(zip(dialogues, _tokenize_dialogues(formatter, dialogues))):
        speakers, turns = dialogue["speakers"], dialogue["turns"]
        rows = _turn_labels(dialogue, labels, act_speakers, user_speaker)
        dialogue_id = dialogue.get("dialogue_id", str(d))
        if mode == "dialogue":
            examples.append(_tracking_example(formatter, dialogue_id, speakers, turn_ids, rows, None))
            continue
        for t in range(len(turns)):
            if any(v != IGNORE_INDEX for v in rows[t][0]) or rows[t][1] != IGNORE_INDEX:
                examples.append(_tracking_example(formatter, dialogue_id, speakers, turn_ids, rows, t))
    return examples


def _tokenize_dialogues(
    formatter: DialogueFormatter, dialogues: Sequence[Mapping[str, Any]], chunk: int = 4096
) -> list[list[list[int]]]:
    """Validate every dialogue, then tokenize all turns in batches of ``chunk`` texts (one tokenizer call per
    batch instead of one per dialogue); returns each dialogue's per-turn ids."""
    for dialogue in dialogues:
        formatter.check_dialogue(dialogue["speakers"], dialogue["turns"])
    texts = [text for dialogue in dialogues for text in dialogue["turns"]]
    ids = [row for i in range(0, len(texts), chunk) for row in formatter.tokenize_turns(texts[i : i + chunk])]
    out, start = [], 0
    for dialogue in dialogues:
        out.append(ids[start : start + len(dialogue["turns"])])
        start += len(dialogue["turns"])
    return out


def _turn_labels(
    dialogue: Mapping[str, Any],
    labels: DialogueLabels,
    act_speakers: Collection[str] | None,
    user_speaker: str,
) -> list[tuple[list[int], int, str | None, list[str]]]:
    """Per turn: (multi-hot acts or a -100 row, intent id or -100, gold intent name or None, unknown acts)."""
    if labels.act_field not in dialogue:
        raise ValueError(f"dialogue {dialogue.get('dialogue_id')!r} has no field {labels.act_field!r}")
    intents = dialogue.get("active_intent") or [None] * len(dialogue["turns"])
    rows = []
    for speaker, turn_acts, intent in zip(dialogue["speakers"], dialogue[labels.act_field], intents):
        if act_speakers is None or speaker in act_speakers:
            act_row, unknown = labels.act_vector(turn_acts)
        else:
            act_row, unknown = [IGNORE_INDEX] * labels.n_acts, []
        if speaker == user_speaker:
            name = intent or labels.none_intent
            rows.append((act_row, labels.intent_id(name), name, unknown))
        else:
            rows.append((act_row, IGNORE_INDEX, None, unknown))
    return rows


def _tracking_example(
    formatter: DialogueFormatter,
    dialogue_id: str,
    speakers: Sequence[str],
    turn_ids: Sequence[Sequence[int]],
    rows: Sequence[tuple[list[int], int, str | None, list[str]]],
    target: int | None,
) -> dict[str, Any]:
    """Encode ``turns[:target+1]`` (all when ``target`` is None) and attach the kept turns' labels."""
    end = len(turn_ids) if target is None else target + 1
    example: dict[str, Any] = {"dialogue_id": dialogue_id}
    example.update(formatter.pack(speakers[:end], turn_ids[:end]))
    n_acts = len(rows[0][0])
    act_labels, intent_labels, intents, unknown = [], [], [], set()
    for i in example["turn_index"]:
        act_row, intent_id, name, bad = rows[i]
        labelled = target is None or i == target
        act_labels.append(list(act_row) if labelled else [IGNORE_INDEX] * n_acts)
        intent_labels.append(intent_id if labelled else IGNORE_INDEX)
        intents.append(name)
        unknown.update(bad if labelled else ())
    example.update(
        act_labels=act_labels, intent_labels=intent_labels, intents=intents, unknown_acts=sorted(unknown)
    )
    if target is not None:
        example["turn"] = target
    return example


# ---------------------------------------------------------------- response-selection examples


def build_selection_examples(
    dialogues: Sequence[Mapping[str, Any]],
    n_negatives: int = 9,
    seed: int = 0,
    *,
    formatter: DialogueFormatter | None = None,
    response_turns: str | int = "all",
    history_window: int | None = None,
    response_speaker: str = "SYSTEM",
    pool: Sequence[tuple[str, int, str]] | None = None,
) -> list[dict[str, Any]]:
    """Response-selection examples: a history, the true next response and ``n_negatives`` negatives.

    Response points are the ``response_speaker`` turns with at least one turn before them: ``"all"`` of them,
    the ``"last"`` one, or an int ``k`` for every k-th (the 1st, (k+1)-th, ... of the dialogue's response
    points). The positive is the true turn. Negatives are ``response_speaker`` turns of *other* dialogues,
    drawn uniformly over those turns, all different from the positive and from each other after
    whitespace-collapsing and case-folding. The candidates are shuffled; ``labels`` is the positive's index.
    Every draw uses ``random.Random(f"{seed}/{dialogue_id}/{turn}")`` over a pool sorted by
    ``(dialogue_id, turn)``: deterministic for a seed, and independent of the order of ``dialogues`` (not of
    their content: adding dialogues changes the pool). Dialogues are told apart by ``dialogue_id`` (their index
    when it is missing), so two dialogues with the same id count as the same dialogue.
    ``history_window=k`` keeps only the last ``k`` turns before the response (``None``: the full history).
    ``pool`` (:func:`selection_pool` of a larger set of dialogues) draws the negatives from those instead of
    ``dialogues``: the examples of a batch of dialogues then equal those of the whole set.

    Each example has ``dialogue_id``, ``response_turn``, ``history_start`` (original index of the first history
    turn), ``speakers`` and ``turns`` (the history), ``candidates`` and ``labels``; with a ``formatter`` also the
    :meth:`DialogueFormatter.encode_candidates` fields (``turn_index`` in original dialogue indices).
    """
    check_positive_int("n_negatives", n_negatives)
    check_positive_int("history_window", history_window, allow_none=True)
    is_step = isinstance(response_turns, int) and not isinstance(response_turns, bool) and response_turns >= 1
    if not (is_step or response_turns in ("all", "last")):
        raise ValueError(f"response_turns must be 'all', 'last' or a positive int, got {response_turns!r}")
    if len(dialogues) == 0:
        raise ValueError("dialogues is empty: there is nothing to build examples from")
    keys = [_dialogue_key(dialogue, d) for d, dialogue in enumerate(dialogues)]
    if pool is None:
        pool = selection_pool(dialogues, response_speaker)
    tokenized = _tokenize_dialogues(formatter, dialogues) if formatter is not None else None
    text_ids = {}  # every candidate is some dialogue's turn: look its ids up instead of re-tokenizing
    for dialogue, turn_ids in zip(dialogues, tokenized or ()):
        text_ids.update(zip(dialogue["turns"], turn_ids))
    examples = []
    for d, (dialogue_id, dialogue) in enumerate(zip(keys, dialogues)):
        for t in _response_points(dialogue["speakers"], response_speaker, response_turns):
            rng = random.Random(f"{seed}/{dialogue_id}/{t}")
            positive = dialogue["turns"][t]
            negatives = _draw_negatives(
                pool, dialogue_id, positive, n_negatives, rng, f"{dialogue_id} turn {t}"
            )
            candidates = [positive, *negatives]
            rng.shuffle(candidates)
            start = 0 if history_window is None else max(0, t - history_window)
            example = {
                "dialogue_id": dialogue_id,
                "response_turn": t,
                "history_start": start,
                "speakers": list(dialogue["speakers"][start:t]),
                "turns": list(dialogue["turns"][start:t]),
                "candidates": candidates,
                "labels": candidates.index(positive),
            }
            if formatter is not None:
                missing = [c for c in dict.fromkeys(candidates) if c not in text_ids]
                if missing:  # negatives from dialogues outside `dialogues` (a shared pool)
                    text_ids.update(zip(missing, formatter.tokenize_turns(missing)))
                history = tokenized[d][start:t]
                encoded = _group(
                    [formatter.pack(example["speakers"], history, text_ids[c]) for c in candidates]
                )
                encoded["turn_index"] = [[i + start for i in ti] for ti in encoded["turn_index"]]
                example.update(encoded)
            examples.append(example)
    return examples


def _dialogue_key(dialogue: Mapping[str, Any], index: int) -> str:
    dialogue_id = dialogue.get("dialogue_id")
    return str(index if dialogue_id is None else dialogue_id)


def selection_pool(
    dialogues: Iterable[Mapping[str, Any]], response_speaker: str = "SYSTEM"
) -> list[tuple[str, int, str]]:
    """The negatives pool of :func:`build_selection_examples`: ``(dialogue_id, turn, text)`` of every
    ``response_speaker`` turn, sorted (so draws do not depend on the order of the dialogues)."""
    return sorted(
        (_dialogue_key(dialogue, d), t, text)
        for d, dialogue in enumerate(dialogues)
        for t, (speaker, text) in enumerate(zip(dialogue["speakers"], dialogue["turns"]))
        if speaker == response_speaker
    )


def _response_points(speakers: Sequence[str], response_speaker: str, response_turns: str | int) -> list[int]:
    points = [t for t, s in enumerate(speakers) if s == response_speaker and t > 0]
    if response_turns == "all":
        return points
    if response_turns == "last":
        return points[-1:]
    return points[:: int(response_turns)]


def _draw_negatives(
    pool: Sequence[tuple[str, int, str]],
    dialogue_id: str,
    positive: str,
    n: int,
    rng: random.Random,
    where: str,
) -> list[str]:
    """``n`` texts of dialogues other than ``dialogue_id``, distinct (normalized) from the positive and each
    other. ``pool`` holds ``(dialogue_id, turn, text)``.

    Rejection sampling over ``pool`` (uniform over turns); if that stalls, a uniform sample of the remaining
    valid distinct texts; ``ValueError`` if the pool cannot supply ``n``."""
    used = {_normalize_text(positive)}
    chosen: list[str] = []
    for _ in range(50 * n + 1000 if pool else 0):
        if len(chosen) == n:
            return chosen
        other, _, text = pool[rng.randrange(len(pool))]
        key = _normalize_text(text)
        if other != dialogue_id and key not in used:
            used.add(key)
            chosen.append(text)
    if len(chosen) == n:
        return chosen
    rest: dict[str, str] = {}
    for other, _, text in pool:
        key = _normalize_text(text)
        if other != dialogue_id and key not in used:
            rest.setdefault(key, text)
    if len(rest) < n - len(chosen):
        raise ValueError(
            f"{where}: only {len(chosen) + len(rest)} distinct negatives available from other dialogues, "
            f"need n_negatives={n}"
        )
    return chosen + rng.sample(list(rest.values()), n - len(chosen))


# ---------------------------------------------------------------- collators


def _check_pad_args(pad_token_id: Any, pad_to_multiple_of: Any) -> None:
    if isinstance(pad_token_id, bool) or not isinstance(pad_token_id, int):
        raise TypeError(
            f"pad_token_id must be an int, got {pad_token_id!r} (a tokenizer without a pad token: set "
            "tokenizer.pad_token first, e.g. to its eos token)"
        )
    check_positive_int("pad_to_multiple_of", pad_to_multiple_of, allow_none=True)


@dataclass
class DialogueTrackingCollator:
    """Pad tracking examples into tensors.

    Returns ``input_ids`` (pad ``pad_token_id``), ``attention_mask`` and ``global_attention_mask`` (pad 0), all
    ``(batch, seq)`` with ``seq`` rounded up to ``pad_to_multiple_of`` (Longformer needs a multiple of its
    ``attention_window``; set it to that); ``turn_positions`` ``(batch, max_turns)`` padded with -1; and, when
    the examples have them, ``intent_labels`` ``(batch, max_turns)`` and ``act_labels``
    ``(batch, max_turns, n_acts)`` padded with -100 (int64). Other fields are dropped.
    """

    pad_token_id: int
    pad_to_multiple_of: int | None = 64
    label_pad_id: int = IGNORE_INDEX

    def __post_init__(self) -> None:
        _check_pad_args(self.pad_token_id, self.pad_to_multiple_of)

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if len(features) == 0:
            raise ValueError("features is empty: cannot collate an empty batch")
        length = padded_length(max(len(f["input_ids"]) for f in features), self.pad_to_multiple_of)
        batch = {
            "input_ids": pad_rows([f["input_ids"] for f in features], length, self.pad_token_id),
            "attention_mask": pad_rows([f["attention_mask"] for f in features], length, 0),
            "global_attention_mask": pad_rows([f["global_attention_mask"] for f in features], length, 0),
        }
        n_turns = max(len(f["turn_positions"]) for f in features)
        batch["turn_positions"] = pad_rows([f["turn_positions"] for f in features], n_turns, -1)
        if all("intent_labels" in f for f in features):
            batch["intent_labels"] = pad_rows(
                [f["intent_labels"] for f in features], n_turns, self.label_pad_id
            )
        if all("act_labels" in f for f in features):
            batch["act_labels"] = self._pad_acts([f["act_labels"] for f in features], n_turns)
        return batch

    def _pad_acts(self, act_labels: Sequence[Sequence[Sequence[int]]], n_turns: int) -> torch.Tensor:
        n_acts = max((len(row) for rows in act_labels for row in rows), default=0)
        out = torch.full((len(act_labels), n_turns, n_acts), self.label_pad_id, dtype=torch.long)  # (B, T, A)
        for i, rows in enumerate(act_labels):
            if len(rows):
                out[i, : len(rows)] = torch.as_tensor([list(r) for r in rows], dtype=torch.long)
        return out


@dataclass
class ResponseSelectionCollator:
    """Pad response-selection examples (``encode_candidates`` fields) into ``(batch, n_candidates, seq)``.

    Returns ``input_ids`` (pad ``pad_token_id``), ``attention_mask`` and ``global_attention_mask`` (pad 0) of
    shape ``(batch, n_candidates, seq)``, ``seq`` rounded up to ``pad_to_multiple_of``; ``candidate_positions``
    ``(batch, n_candidates)``; ``labels`` ``(batch,)`` when every example has one. Every example must have the
    same number of candidates. Other fields are dropped.
    """

    pad_token_id: int
    pad_to_multiple_of: int | None = 64

    def __post_init__(self) -> None:
        _check_pad_args(self.pad_token_id, self.pad_to_multiple_of)

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if len(features) == 0:
            raise ValueError("features is empty: cannot collate an empty batch")
        n_candidates = len(features[0]["input_ids"])
        for i, f in enumerate(features):
            if len(f["input_ids"]) != n_candidates:
                raise ValueError(
                    f"features[{i}] has {len(f['input_ids'])} candidates, features[0] has {n_candidates}: "
                    "every example in a batch needs the same number of candidates"
                )
        length = padded_length(
            max(len(ids) for f in features for ids in f["input_ids"]), self.pad_to_multiple_of
        )
        batch = {}
        for key, value in (
            ("input_ids", self.pad_token_id),
            ("attention_mask", 0),
            ("global_attention_mask", 0),
        ):
            rows = [row for f in features for row in f[key]]
            batch[key] = pad_rows(rows, length, value).view(len(features), n_candidates, length)  # (B, C, L)
        batch["candidate_positions"] = torch.tensor(
            [list(f["candidate_positions"]) for f in features], dtype=torch.long
        )  # (B, C)
        if all("labels" in f for f in features):
            batch["labels"] = torch.tensor([int(f["labels"]) for f in features], dtype=torch.long)  # (B,)
        return batch


__all__ = [
    "DEFAULT_SPEAKER_TOKENS",
    "GLOBAL_ON_NAMES",
    "IGNORE_INDEX",
    "NONE_INTENT",
    "DialogueFormatter",
    "DialogueLabels",
    "DialogueTrackingCollator",
    "ResponseSelectionCollator",
    "build_selection_examples",
    "build_tracking_examples",
    "check_sgd_record",
    "selection_pool",
    "train_dialogue_tokenizer",
]
