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

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

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


__all__ = ["DEFAULT_SPEAKER_TOKENS", "GLOBAL_ON_NAMES", "NONE_INTENT", "DialogueFormatter"]
