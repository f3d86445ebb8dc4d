"""Schema-Guided Dialogue data: the JSON Lines reader and its labels (acts, intents), a tokenizer
trained on the training turns, and the examples of per-turn tracking and response selection (laid out
by :class:`~.formatter.DialogueFormatter`; batched by :mod:`.collator`)."""

from __future__ import annotations

import heapq
import random
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...utils.labels import IGNORE_INDEX
from ...utils.validation import check_positive_int
from .formatter import (
    _PARALLEL_FIELDS,
    DEFAULT_SPEAKER_TOKENS,
    NONE_INTENT,
    SGD_FIELDS,
    DialogueFormatter,
    _group,
    _normalize_text,
)

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
    are split into pieces instead of becoming ``[UNK]`` (:func:`wordpiece_vocab`: every character, then merges of
    pieces seen at least ``min_frequency`` times).

    Either vocabulary is a function of ``texts`` and the arguments alone, the same in every process (a rank of a
    distributed run, a resumed run builds it again).

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
    normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase or None)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    if kind == "word":
        tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        trainer = trainers.WordLevelTrainer(
            vocab_size=(vocab_size or 10**9) + len(specials),
            min_frequency=min_frequency,
            special_tokens=specials,
        )
        tok.normalizer, tok.pre_tokenizer = normalizer, pre_tokenizer
        tok.train_from_iterator(checked, trainer)
    else:
        # tokenizers' WordPieceTrainer breaks ties between equally frequent merges differently in every process
        words = Counter(
            w for text in checked for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))
        )
        vocab = wordpiece_vocab(words, vocab_size or 8000, min_frequency, specials)
        tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
        tok.decoder = decoders.WordPiece()
        tok.normalizer, tok.pre_tokenizer = normalizer, pre_tokenizer
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


def wordpiece_vocab(
    word_counts: Mapping[str, int], vocab_size: int, min_frequency: int = 2, specials: Sequence[str] = ()
) -> dict[str, int]:
    """A WordPiece vocabulary ``{piece: id}`` of at most ``vocab_size`` pieces (more only if ``specials`` and the
    characters alone exceed it) from ``{word: count}``, trained as tokenizers' ``WordPieceTrainer`` trains one,
    but deterministically.

    Ids: ``specials``, every character of the words (sorted), every character after a word's first as a
    ``##`` continuation (sorted), then one piece per merge. Each word starts as its first character followed by
    ``##`` continuations; each merge joins the adjacent pair of pieces with the highest count (occurrences
    weighted by the word counts; ties: the pair whose texts sort first) into one piece, ``a`` + ``##b`` ->
    ``ab``, and stops at ``vocab_size`` pieces or when no pair is seen ``min_frequency`` times."""
    check_positive_int("vocab_size", vocab_size)
    check_positive_int("min_frequency", min_frequency)
    chars = sorted({c for word in word_counts for c in word})
    continuations = sorted({f"##{c}" for word in word_counts for c in word[1:]})
    vocab = list(dict.fromkeys([*specials, *chars, *continuations]))
    known = set(vocab)
    ordered = sorted(word_counts)
    weights = [word_counts[word] for word in ordered]
    pieces = [[word[0], *(f"##{c}" for c in word[1:])] for word in ordered]
    counts: Counter[tuple[str, str]] = Counter()
    where: dict[tuple[str, str], set[int]] = defaultdict(set)  # pair -> words that held it (some still do)
    for i, word in enumerate(pieces):
        for pair in zip(word, word[1:]):
            counts[pair] += weights[i]
            where[pair].add(i)
    heap = [(-n, a, b) for (a, b), n in counts.items()]  # highest count first, ties by the pieces' text
    heapq.heapify(heap)
    while len(vocab) < vocab_size and heap:
        negative, a, b = heapq.heappop(heap)
        n = counts[a, b]
        if n != -negative:  # a stale entry: the count went down since (an entry with a higher one was pushed)
            if 0 < n < -negative:
                heapq.heappush(heap, (-n, a, b))
            continue
        if n < min_frequency:
            break
        merged = a + b.removeprefix("##")
        if merged not in known:  # two pairs can make the same piece ("a" "##bc", "ab" "##c")
            vocab.append(merged)
            known.add(merged)
        change: Counter[tuple[str, str]] = Counter()
        for i in where.pop((a, b)):
            old, new, j = pieces[i], [], 0
            while j < len(old):  # left to right, as tokenizers merges
                if j + 1 < len(old) and old[j] == a and old[j + 1] == b:
                    new.append(merged)
                    j += 2
                else:
                    new.append(old[j])
                    j += 1
            if len(new) == len(old):
                continue
            for pair in zip(old, old[1:]):
                change[pair] -= weights[i]
            for pair in zip(new, new[1:]):
                change[pair] += weights[i]
                where[pair].add(i)
            pieces[i] = new
        for pair, delta in change.items():
            counts[pair] += delta
            if delta > 0:
                heapq.heappush(heap, (-counts[pair], *pair))
    return {piece: i for i, piece in enumerate(vocab)}


def _checked_text(i: int, text: Any) -> str:
    if not isinstance(text, str):
        raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}: {text!r}")
    return text


# ---------------------------------------------------------------- SGD rows and labels


_STR = ("a str", lambda v: isinstance(v, str))
_STR_LIST = ("a list of str", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v))
#: per-turn field -> (what each of its entries must be, the test)
_TURN_ENTRIES = {
    "speakers": _STR,
    "turns": _STR,
    "acts": _STR_LIST,
    "act_slots": _STR_LIST,
    "active_intent": ("a str or null", lambda v: v is None or isinstance(v, str)),
    "services_per_turn": _STR_LIST,
}


def check_sgd_record(
    dialogue: Any, where: str, speakers: Collection[str] = tuple(DEFAULT_SPEAKER_TOKENS)
) -> None:
    """A Schema-Guided Dialogue row (``ValueError`` naming ``where`` and the field otherwise): it has
    ``dialogue_id``, ``speakers`` (each one of ``speakers``) and ``turns`` (each a str), and the per-turn
    fields that are present have one entry per turn: ``acts``, ``act_slots`` and ``services_per_turn`` a
    list of str per turn, ``active_intent`` a str or null per turn.

    A per-turn field is in every row of a file or in none: a field that is null in every row counts as
    absent, but a row without one (``datasets`` fills it with null) in a file whose other rows have it is
    an error, since its labels would be missing (:func:`~hf_sparse.data.loading.validate_rows` leaves out
    the columns that are null in every row, so a key that is present and null here is such a row)."""
    if not isinstance(dialogue, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(dialogue).__name__}")
    missing = [k for k in SGD_FIELDS if dialogue.get(k) is None]
    if missing:
        raise ValueError(f"{where}: missing field(s) {missing}")
    for name in _PARALLEL_FIELDS:
        if name in dialogue and dialogue[name] is None:
            raise ValueError(
                f"{where}: field {name!r} is missing (null) while other rows of the file have it"
            )
        if dialogue.get(name) is not None and not isinstance(dialogue[name], list):
            raise ValueError(f"{where}: field {name!r} must be a list, got {dialogue[name]!r:.60}")
    n = len(dialogue["turns"])
    for name in _PARALLEL_FIELDS:
        values = dialogue.get(name)
        if values is None:
            continue
        if len(values) != n:
            raise ValueError(f"{where}: field {name!r} has {len(values)} entries for {n} turns")
        kind, ok = _TURN_ENTRIES[name]
        bad = next((t for t, value in enumerate(values) if not ok(value)), None)
        if bad is not None:
            raise ValueError(f"{where}: field {name!r}[{bad}] must be {kind}, got {values[bad]!r:.60}")
    unknown = sorted({s for s in dialogue["speakers"] if s not in speakers})
    if unknown:
        raise ValueError(
            f"{where}: field 'speakers' has unknown speaker(s) {unknown}; known: {sorted(speakers)}"
        )


@dataclass(frozen=True)
class DialogueLabels:
    """Label vocabularies for per-turn tracking, built from training dialogues.

    - ``acts``: sorted act names over *all* turns (USER and SYSTEM: SGD annotates both; SYSTEM-only acts such
      as ``OFFER`` are part of the vocabulary). Read from the per-turn field ``act_field`` (``"acts"`` or
      the finer ``"act_slots"``).
    - ``intents``: ``none_intent`` (``"NONE"``) at id 0, then the sorted ``active_intent`` values of USER turns.
      A USER turn whose intent is ``None`` or ``""`` counts as ``none_intent``; SGD itself labels USER turns
      without an active intent ``"NONE"``. SYSTEM turns have no intent (``null`` in SGD). Empty when the
      dialogues name no intent (no ``active_intent`` field, or only ``none_intent``): there is nothing to
      classify, so a tracking model gets no intent head (every intent label is ``-100``).
    - ``seen_intents``: the intents that occur in the training dialogues, so evaluation can report seen vs
      unseen intents (SGD's dev/test contain services, hence intents, not in train); empty with ``intents``.
    """

    acts: tuple[str, ...]
    intents: tuple[str, ...]
    seen_intents: frozenset[str]
    none_intent: str = NONE_INTENT
    act_field: str = "acts"
    act_to_id: dict[str, int] = field(init=False, repr=False, compare=False)
    intent_to_id: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.intents and self.intents[0] != self.none_intent:
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
        """Vocabularies from (training) dialogues with per-turn ``act_field`` and (optionally) ``active_intent``."""
        acts: set[str] = set()
        seen: set[str] = set()
        n = 0
        for d, dialogue in enumerate(dialogues):
            n += 1
            if dialogue.get(act_field) is None:
                raise ValueError(f"dialogues[{d}] has no field {act_field!r}")
            for turn_acts in dialogue[act_field]:
                acts.update(turn_acts)
            for speaker, intent in zip(dialogue["speakers"], dialogue.get("active_intent") or []):
                if speaker == user_speaker:
                    seen.add(intent or none_intent)
        if n == 0:
            raise ValueError("dialogues is empty: cannot build label vocabularies")
        named = sorted(seen - {none_intent})
        intents, seen = ((none_intent, *named), frozenset(seen)) if named else ((), frozenset())
        return cls(tuple(sorted(acts)), intents, seen, none_intent, act_field)

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
    if dialogue.get(labels.act_field) is None:
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
    :meth:`DialogueFormatter.encode_candidates` fields laid out by :func:`pack_candidates` (the same history
    for every candidate, as in the pipeline; ``turn_index`` in original dialogue indices).
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
                encoded = pack_candidates(
                    formatter, example["speakers"], history, [text_ids[c] for c in candidates]
                )
                encoded["turn_index"] = [[i + start for i in ti] for ti in encoded["turn_index"]]
                example.update(encoded)
            examples.append(example)
    return examples


def pack_candidates(
    formatter: DialogueFormatter,
    speakers: Sequence[str],
    turn_ids: Sequence[Sequence[int]],
    candidate_ids: Sequence[Sequence[int]],
) -> dict[str, list]:
    """:meth:`DialogueFormatter.pack` of one history with each candidate, every candidate with the same
    turns: when the history does not fit next to some candidate, the oldest turns the longest candidate
    leaves no room for are dropped for all (only the newest turn's cut tokens, when that turn alone is too
    long, can differ). Fields of :meth:`DialogueFormatter.encode_candidates`; ``turn_index`` and
    ``truncated_turns`` count from the first turn of ``turn_ids``. Training, evaluation and the
    ``dialogue-response-selection`` pipeline all lay candidates out with this."""
    packed = [formatter.pack(speakers, turn_ids, c) for c in candidate_ids]
    dropped = max(p["truncated_turns"] for p in packed)
    if dropped != min(p["truncated_turns"] for p in packed):
        packed = [formatter.pack(speakers[dropped:], turn_ids[dropped:], c) for c in candidate_ids]
        for p in packed:  # the re-packed history starts at turn `dropped`
            p["turn_index"] = [i + dropped for i in p["turn_index"]]
            p["truncated_turns"] += dropped
    return _group(packed)


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


__all__ = [
    "DialogueLabels",
    "build_selection_examples",
    "build_tracking_examples",
    "check_sgd_record",
    "pack_candidates",
    "selection_pool",
    "train_dialogue_tokenizer",
    "wordpiece_vocab",
]
