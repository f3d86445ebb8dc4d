"""Long-document summarization data: row checks and query expansion (for ``datasets.map``), tokenizers, sentence features, encoders, collators.

Token layouts (exact). ``P`` is the tokenizer's prefix token (``bos_token``, else ``cls_token``, else
nothing), ``S`` its suffix token (``eos_token``, else ``sep_token``, else nothing), ``<sent>`` the sentence
marker and ``<query_sep>`` the query separator (:data:`SENTENCE_TOKEN`, :data:`QUERY_SEPARATOR_TOKEN`)::

    encode_abstractive:                 P  document tokens ...                           S
    ... with sentence markers:          P  <sent> sentence 1 <sent> sentence 2 ...       S
    ... with a query:                   P  query tokens <query_sep> <sent> sentence 1 ... S
    encode_extractive (every chunk):    P  [query tokens <query_sep>] <sent> s_i <sent> s_i+1 ...  S

Sentences come from :func:`hf_sparse.tasks.summarization.sentences.split_sentences` (rule-based, offline). Text is tokenized
with ``add_special_tokens=False, split_special_tokens=True``: a literal ``"<sent>"`` (or ``"</s>"``) in a document
or query is text, never a marker.

Long documents are never cut silently:

- :func:`encode_abstractive` truncates the *document* tokens (the query is kept whole, up to
  ``max_query_tokens``) and reports it: ``num_tokens`` (before truncation) and ``truncated``.
- A query longer than ``max_query_tokens`` keeps its first tokens; both encoders report how many were cut
  (``truncated_query_tokens`` / ``ExtractiveChunk.cut_query_tokens``).
- :func:`encode_extractive` splits the document into *chunks* of whole sentences, each at most
  ``max_length`` tokens with the prefix (and the query) repeated, so every sentence is scored. A
  sentence longer than ``max_sentence_tokens`` is represented by its first ``max_sentence_tokens``
  tokens (the summary still contains the whole sentence); ``cut_sentences`` counts them.

Sentence features (:func:`sentence_features`, by name, for the extractive head): ``position`` (i / n),
``first_sentences`` (1 / (1 + i)), ``length`` (log(1 + words) / log(101), clipped to 1), ``centrality``
(cosine of the sentence's TF-IDF vector with the whole document's, IDF over the document's sentences)
and ``query_similarity`` (the same cosine with the query; 0 without a query). Words are lowercase
alphanumeric runs.
"""

from __future__ import annotations

import functools
import math
import os
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...data.padding import pad_rows, padded_length
from ...utils.labels import IGNORE_INDEX
from ...utils.validation import check_positive_int
from .sentences import split_sentences

SENTENCE_TOKEN = "<sent>"
QUERY_SEPARATOR_TOKEN = "<query_sep>"
#: Special tokens of :func:`train_summarization_tokenizer`, in id order (BART's first four ids).
SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>", SENTENCE_TOKEN, QUERY_SEPARATOR_TOKEN)
SENTENCE_FEATURES = ("position", "first_sentences", "length", "centrality", "query_similarity")
QUERY_MODES = ("none", "summary_query", "specific")
_WORD_RE = re.compile(r"[a-z0-9]+")


# ---------------------------------------------------------------- validation helpers


def _check_text(name: str, value: Any, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise ValueError(f"{name} is empty")
    return value


# ---------------------------------------------------------------- rows (🤗 datasets)


def check_summarization_row(row: dict[str, Any], where: str, query_mode: str = "none") -> None:
    """A summarization row (``ValueError`` naming ``where`` and the field otherwise): ``document`` a
    non-empty str, ``summary`` a str, ``references`` (optional) a list of str; ``query_mode``
    ``"summary_query"`` needs a non-empty ``summary_query`` str, ``"specific"`` a ``specific_queries``
    list of ``{"query": str, "answer": str}``."""
    if query_mode not in QUERY_MODES:
        raise ValueError(f"query_mode must be one of {QUERY_MODES}, got {query_mode!r}")
    for key in ("document", "summary"):
        if not isinstance(row.get(key), str):
            raise ValueError(f"{where}: field {key!r} must be a string, got {row.get(key)!r:.60}")
    if not row["document"].strip():
        raise ValueError(f"{where}: field 'document' is empty")
    refs = row.get("references") or [row["summary"]]
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise ValueError(f"{where}: field 'references' must be a list of strings")
    if query_mode == "specific":
        items = row.get("specific_queries")
        if not isinstance(items, list):
            raise ValueError(f"{where}: query_mode='specific' needs a 'specific_queries' list")
        for k, item in enumerate(items):
            if not (isinstance(item, dict) and isinstance(item.get("query"), str)
                    and isinstance(item.get("answer"), str)):  # fmt: skip
                raise ValueError(f"{where}: specific_queries[{k}] needs string 'query' and 'answer'")
    if query_mode == "summary_query":
        query = row.get("summary_query")
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"{where}: query_mode='summary_query' needs a 'summary_query' string")


def summarization_examples(
    batch: dict[str, list], indices: list[int], query_mode: str = "none"
) -> dict[str, list]:
    """Batched ``map`` (``with_indices=True``) from checked rows to examples ``{"id", "document",
    "summary", "references", "query"}``: ``id`` is the row's ``id``, else its row number from 1;
    ``references`` the row's list when present (SQuALITY's four), else ``[summary]``; ``query`` None
    unless ``query_mode`` adds one:

    - ``"none"``: one example per row, no query;
    - ``"summary_query"``: one example per row with the row's ``summary_query`` (QMSum: "Summarize the
      whole meeting.") as query;
    - ``"specific"``: one example per ``specific_queries`` item (QMSum's query-focused pairs):
      ``query`` -> ``answer``, id ``<row id>/<k>``.
    """
    out: dict[str, list] = {"id": [], "document": [], "summary": [], "references": [], "query": []}

    def add(id_, document, summary, references, query):
        for key, value in zip(out, (id_, document, summary, references, query)):
            out[key].append(value)

    for j, index in enumerate(indices):
        row = {key: values[j] for key, values in batch.items()}
        row_id = row.get("id")
        row_id = str(index + 1 if row_id is None else row_id)
        if query_mode == "specific":
            for k, item in enumerate(row["specific_queries"]):
                add(f"{row_id}/{k}", row["document"], item["answer"], [item["answer"]], item["query"])
            continue
        query = row["summary_query"] if query_mode == "summary_query" else None
        add(row_id, row["document"], row["summary"], list(row.get("references") or [row["summary"]]), query)
    return out


def load_summarization_examples(path: str | os.PathLike, query_mode: str = "none", limit: int | None = None):
    """The examples of one summarization JSON Lines file (a ``datasets.Dataset``): rows read with
    ``load_dataset("json")`` and checked (:func:`check_summarization_row`: ``ValueError`` naming file,
    row and field), the first ``limit`` rows (documents) kept, then expanded by ``query_mode``
    (:func:`summarization_examples`)."""
    from ...data.loading import fingerprint, load_jsonl

    check = functools.partial(check_summarization_row, query_mode=query_mode)
    rows = load_jsonl(path, check)
    if limit and limit < len(rows):
        rows = rows.select(range(limit))
    return rows.map(
        summarization_examples, batched=True, with_indices=True, fn_kwargs={"query_mode": query_mode},
        remove_columns=rows.column_names, desc=f"examples of {os.path.basename(os.fspath(path))}",
        new_fingerprint=fingerprint(rows._fingerprint, "summarization_examples", query_mode),
    )  # fmt: skip


# ---------------------------------------------------------------- tokenizers


def train_word_level(tok, texts, special_tokens, min_frequency: int, vocab_size: int | None) -> None:
    """Train ``tok``'s ``WordLevel`` vocabulary on ``texts`` (an iterable of str; arguments checked): the
    ``special_tokens`` first, then every word seen ``min_frequency`` times, at most ``vocab_size`` of them.
    ``ValueError`` if no word is frequent enough."""
    from tokenizers import trainers

    check_positive_int("min_frequency", min_frequency)
    check_positive_int("vocab_size", vocab_size, allow_none=True)
    if isinstance(texts, str) or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be an iterable of str, got {type(texts).__name__}")
    checked = (_check_text(f"texts[{i}]", t, allow_empty=True) for i, t in enumerate(texts))
    trainer = trainers.WordLevelTrainer(
        vocab_size=(vocab_size or 10**9) + len(special_tokens),
        min_frequency=min_frequency,
        special_tokens=list(special_tokens),
    )
    tok.train_from_iterator(checked, trainer)
    if tok.get_vocab_size() <= len(special_tokens):
        raise ValueError("texts has no word seen min_frequency times: the vocabulary would be empty")


def train_summarization_tokenizer(
    texts: Iterable[str], *, min_frequency: int = 2, vocab_size: int | None = None, lowercase: bool = True
):
    """A word-level fast tokenizer trained on ``texts``, for models trained from scratch (no Hub access).

    Special tokens in BART/LED order: ``<s>`` 0 (bos), ``<pad>`` 1, ``</s>`` 2 (eos), ``<unk>`` 3,
    ``<mask>`` 4, then :data:`SENTENCE_TOKEN` 5 and :data:`QUERY_SEPARATOR_TOKEN` 6 (registered as
    additional special tokens, so ``decode(..., skip_special_tokens=True)`` drops them). BERT's normalizer
    and pre-tokenizer (punctuation split off, lowercased if ``lowercase``); words seen fewer than
    ``min_frequency`` times, or beyond the ``vocab_size`` most frequent, become ``<unk>``. Encoding adds
    ``<s> ... </s>``. A word-level vocabulary keeps a small model's sequences short (one token per word).
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase or None)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)  # joins words with spaces, tidies punctuation
    train_word_level(tok, texts, SPECIAL_TOKENS, min_frequency, vocab_size)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        mask_token="<mask>",
        additional_special_tokens=[SENTENCE_TOKEN, QUERY_SEPARATOR_TOKEN],
        clean_up_tokenization_spaces=False,
    )


def add_summarization_tokens(tokenizer, sentences: bool = True, query: bool = True) -> dict[str, int | None]:
    """Register :data:`SENTENCE_TOKEN` / :data:`QUERY_SEPARATOR_TOKEN` as special tokens of ``tokenizer``
    (where missing) and return ``{"sentence_token_id", "query_separator_token_id"}`` (None for one not
    asked for). If the vocabulary grew, resize the model: ``model.resize_token_embeddings(len(tokenizer))``.
    """
    wanted = [t for t, on in ((SENTENCE_TOKEN, sentences), (QUERY_SEPARATOR_TOKEN, query)) if on]
    vocab = tokenizer.get_vocab()
    new = [t for t in wanted if t not in vocab]
    if new:
        tokenizer.add_special_tokens({"additional_special_tokens": new}, replace_extra_special_tokens=False)
    return {
        "sentence_token_id": tokenizer.convert_tokens_to_ids(SENTENCE_TOKEN) if sentences else None,
        "query_separator_token_id": tokenizer.convert_tokens_to_ids(QUERY_SEPARATOR_TOKEN) if query else None,
    }


def _affixes(
    tokenizer, query: str | None, query_separator_token_id: int | None, max_query_tokens: int
) -> tuple[list[int], list[int], int]:
    """The token ids before the body (prefix token, then the query's first ``max_query_tokens`` tokens and
    its separator when ``query`` is given) and after it (suffix token) of a sequence (see the module
    docstring), and the number of query tokens cut."""
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
    end = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    prefix = [start] if start is not None else []
    cut = 0
    if query is not None:
        if query_separator_token_id is None:
            raise ValueError("a query needs query_separator_token_id (the model has no query support)")
        query_ids = _token_ids(tokenizer, [_check_text("query", query)])[0]
        cut = max(len(query_ids) - max_query_tokens, 0)
        prefix += query_ids[:max_query_tokens]
        prefix.append(query_separator_token_id)
    return prefix, ([end] if end is not None else []), cut


def _token_ids(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, without special tokens; special-token strings in the text (a literal
    ``"<sent>"`` or ``"</s>"``) stay text, never a marker."""
    if not texts:
        return []
    return tokenizer(list(texts), add_special_tokens=False, split_special_tokens=True)["input_ids"]


# ---------------------------------------------------------------- sentence features


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(text.lower())


def _tfidf(counts: Counter, idf: dict[str, float]) -> tuple[dict[str, float], float]:
    vec = {w: c * idf.get(w, 0.0) for w, c in counts.items()}
    return vec, math.sqrt(sum(v * v for v in vec.values()))


def _cosine(a: dict[str, float], a_norm: float, b: dict[str, float], b_norm: float) -> float:
    if a_norm == 0.0 or b_norm == 0.0:
        return 0.0
    if len(a) > len(b):
        a, b = b, a
    return sum(v * b.get(w, 0.0) for w, v in a.items()) / (a_norm * b_norm)


def sentence_features(
    sentences: Sequence[str], query: str | None = None, names: Sequence[str] = SENTENCE_FEATURES
) -> np.ndarray:
    """``(n_sentences, len(names))`` float32 features of each sentence (definitions: module docstring).

    They depend on the document (and the query) only, never on a reference, so the pipeline computes
    exactly what training saw.
    """
    unknown = [n for n in names if n not in SENTENCE_FEATURES]
    if unknown:
        raise ValueError(f"unknown sentence features {unknown}; known: {list(SENTENCE_FEATURES)}")
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of str, got a str (split it with split_sentences)")
    n = len(sentences)
    tokens = [_words(s) for s in sentences]
    df = Counter(w for t in tokens for w in set(t))
    idf = {w: math.log((1 + n) / (1 + c)) + 1.0 for w, c in df.items()}
    doc_vec, doc_norm = _tfidf(Counter(w for t in tokens for w in t), idf)
    sent_vecs = [_tfidf(Counter(t), idf) for t in tokens]
    q_vec, q_norm = _tfidf(Counter(_words(query)), idf) if query else ({}, 0.0)
    columns = {
        "position": lambda i: i / max(n, 1),
        "first_sentences": lambda i: 1.0 / (1.0 + i),
        "length": lambda i: min(math.log1p(len(sentences[i].split())) / math.log(101.0), 1.0),
        "centrality": lambda i: _cosine(*sent_vecs[i], doc_vec, doc_norm),
        "query_similarity": lambda i: _cosine(*sent_vecs[i], q_vec, q_norm),
    }
    out = np.zeros((n, len(names)), dtype=np.float32)
    for j, name in enumerate(names):
        out[:, j] = [columns[name](i) for i in range(n)]
    return out


# ---------------------------------------------------------------- encoders


@dataclass
class ExtractiveChunk:
    """One encoded chunk of a document: ``input_ids`` and the document indices of its sentences (one
    :data:`SENTENCE_TOKEN` each, in order); ``cut_sentences`` counts its sentences represented by their
    first tokens only, ``cut_query_tokens`` the query tokens cut (past ``max_query_tokens``)."""

    input_ids: list[int]
    sentence_indices: list[int]
    cut_sentences: int = 0
    cut_query_tokens: int = 0


def encode_extractive(
    tokenizer,
    sentences: Sequence[str],
    query: str | None = None,
    *,
    max_length: int,
    sentence_token_id: int,
    query_separator_token_id: int | None = None,
    max_sentence_tokens: int = 64,
    max_query_tokens: int = 64,
) -> list[ExtractiveChunk]:
    """Encode a document's sentences as chunks of at most ``max_length`` tokens (layout: module docstring).

    Chunks hold consecutive whole sentences; each sentence is represented by its marker and its first
    ``max_sentence_tokens`` tokens. Every sentence is in exactly one chunk.

    Raises:
        ValueError: no sentences, a query without ``query_separator_token_id``, or ``max_length`` too
            small for the prefix, the query and one sentence of one token.
    """
    check_positive_int("max_length", max_length)
    check_positive_int("max_sentence_tokens", max_sentence_tokens)
    check_positive_int("max_query_tokens", max_query_tokens)
    if isinstance(sentences, str) or not sentences:
        raise ValueError("sentences must be a non-empty list of str")
    prefix, end, cut_query = _affixes(tokenizer, query, query_separator_token_id, max_query_tokens)
    room = max_length - len(prefix) - len(end)
    if room < 2:
        raise ValueError(
            f"max_length={max_length} leaves no room for a sentence after the prefix and query "
            f"({len(prefix) + len(end)} tokens)"
        )
    chunks: list[ExtractiveChunk] = []
    body: list[int] = []
    indices: list[int] = []
    cut = 0
    for i, ids in enumerate(_token_ids(tokenizer, list(sentences))):
        piece = [sentence_token_id] + ids[: min(max_sentence_tokens, room - 1)]
        if body and len(body) + len(piece) > room:
            chunks.append(ExtractiveChunk(prefix + body + end, indices, cut, cut_query))
            body, indices, cut = [], [], 0
        cut += len(ids) > len(piece) - 1
        body += piece
        indices.append(i)
    chunks.append(ExtractiveChunk(prefix + body + end, indices, cut, cut_query))
    return chunks


def encode_abstractive(
    tokenizer,
    document: str,
    query: str | None = None,
    *,
    max_length: int,
    sentence_token_id: int | None = None,
    query_separator_token_id: int | None = None,
    max_query_tokens: int = 128,
) -> dict[str, Any]:
    """Encode a document (and a query) for an encoder-decoder (layout: module docstring).

    With ``sentence_token_id`` every sentence starts with that marker. Returns ``input_ids`` (at most
    ``max_length`` tokens), ``num_tokens`` (the length before truncation, the whole query included),
    ``truncated`` (True when document tokens were cut from the end) and ``truncated_query_tokens`` (the
    query tokens cut past ``max_query_tokens``).
    """
    check_positive_int("max_length", max_length)
    check_positive_int("max_query_tokens", max_query_tokens)
    _check_text("document", document)
    prefix, end, cut_query = _affixes(tokenizer, query, query_separator_token_id, max_query_tokens)
    if sentence_token_id is not None:
        body = [
            t for ids in _token_ids(tokenizer, split_sentences(document)) for t in [sentence_token_id, *ids]
        ]
    else:
        body = _token_ids(tokenizer, [document])[0]
    room = max_length - len(prefix) - len(end)
    if room < 1:
        raise ValueError(f"max_length={max_length} leaves no room for the document after the query")
    num_tokens = len(prefix) + cut_query + len(body) + len(end)
    return {
        "input_ids": prefix + body[:room] + end,
        "num_tokens": num_tokens,
        "truncated": len(body) > room,
        "truncated_query_tokens": cut_query,
    }


# ---------------------------------------------------------------- collators


@dataclass
class ExtractiveCollator:
    """Pads ``input_ids`` (with ``pad_token_id``; ``attention_mask`` 0 there) to the longest row, rounded
    up to ``pad_to_multiple_of``; per-sentence ``labels`` (-100) and ``sentence_features`` (0) to the most
    sentences in the batch.

    An item is one chunk (``input_ids`` a list of ids, ``labels`` / ``sentence_features`` per sentence) or
    one whole document (``input_ids`` a list of chunks, ``labels`` / ``sentence_features`` one list per
    chunk): a document's chunks become consecutive rows and ``document_index`` (one entry per row) says which
    item each row came from, so the listwise loss ranks a document's sentences across its chunks.
    """

    pad_token_id: int
    pad_to_multiple_of: int | None = None

    def __call__(self, features: Sequence[dict]) -> dict[str, torch.Tensor]:
        if features and features[0]["input_ids"] and isinstance(features[0]["input_ids"][0], (list, tuple)):
            rows, owner = [], []
            for d, f in enumerate(features):
                for c in range(len(f["input_ids"])):
                    rows.append({k: v[c] for k, v in f.items()})
                    owner.append(d)
            batch = self(rows)
            batch["document_index"] = torch.tensor(owner, dtype=torch.long)
            return batch
        length = padded_length(max(len(f["input_ids"]) for f in features), self.pad_to_multiple_of)
        ids = torch.full((len(features), length), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(features), length), dtype=torch.long)
        for b, f in enumerate(features):
            n = len(f["input_ids"])
            ids[b, :n] = torch.as_tensor(f["input_ids"], dtype=torch.long)
            mask[b, :n] = 1
        batch = {"input_ids": ids, "attention_mask": mask}
        n_sent = max(_count(f) for f in features)
        if "labels" in features[0]:
            labels = torch.full((len(features), n_sent), float(IGNORE_INDEX))
            for b, f in enumerate(features):
                labels[b, : len(f["labels"])] = torch.as_tensor(f["labels"], dtype=torch.float)
            batch["labels"] = labels
        if "sentence_features" in features[0]:
            width = len(features[0]["sentence_features"][0]) if len(features[0]["sentence_features"]) else 0
            feats = torch.zeros((len(features), n_sent, width))
            for b, f in enumerate(features):
                x = torch.as_tensor(np.asarray(f["sentence_features"], dtype=np.float32))
                feats[b, : x.shape[0]] = x
            batch["sentence_features"] = feats
        return batch


@dataclass
class AbstractiveCollator:
    """Pads ``input_ids`` (with ``pad_token_id``; ``attention_mask`` 0 there) to the longest row, rounded
    up to ``pad_to_multiple_of`` (the encoder's attention window), and ``labels`` (with -100) to the longest
    summary of the batch only: the decoder runs on the summary's positions (``decoder_input_ids`` come from
    ``labels``), never on a multiple of the encoder's window."""

    pad_token_id: int
    pad_to_multiple_of: int | None = None

    def __call__(self, features: Sequence[dict]) -> dict[str, torch.Tensor]:
        length = padded_length(max(len(f["input_ids"]) for f in features), self.pad_to_multiple_of)
        batch = {
            "input_ids": pad_rows([f["input_ids"] for f in features], length, self.pad_token_id),
            "attention_mask": pad_rows([[1] * len(f["input_ids"]) for f in features], length, 0),
        }
        if "labels" in features[0]:
            labels = [f["labels"] for f in features]
            batch["labels"] = pad_rows(labels, max(len(x) for x in labels), IGNORE_INDEX)
        return batch


def _count(feature: dict) -> int:
    for key in ("labels", "sentence_features"):
        if key in feature:
            return len(feature[key])
    return 0


# ---------------------------------------------------------------- synthetic data


def synthetic_copy_documents(
    n: int,
    *,
    num_sentences: tuple[int, int] = (4, 8),
    sentence_words: tuple[int, int] = (5, 9),
    vocab_size: int = 60,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """``n`` synthetic documents whose summary is their first sentence (a seq2seq sanity task).

    Words are ``w0 .. w{vocab_size-1}``; each sentence starts with a capitalised word and ends with a
    period, so :func:`split_sentences` finds the sentences. Deterministic for a ``seed``.
    """
    check_positive_int("n", n)
    check_positive_int("vocab_size", vocab_size)
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        sentences = []
        for _ in range(rng.randint(*num_sentences)):
            words = [f"w{rng.randrange(vocab_size)}" for _ in range(rng.randint(*sentence_words))]
            sentences.append(words[0].capitalize() + " " + " ".join(words[1:]) + ".")
        rows.append({"id": f"copy-{seed}-{i}", "document": " ".join(sentences), "summary": sentences[0]})
    return rows


__all__ = [
    "IGNORE_INDEX",
    "QUERY_MODES",
    "QUERY_SEPARATOR_TOKEN",
    "SENTENCE_FEATURES",
    "SENTENCE_TOKEN",
    "SPECIAL_TOKENS",
    "AbstractiveCollator",
    "ExtractiveChunk",
    "ExtractiveCollator",
    "add_summarization_tokens",
    "encode_abstractive",
    "encode_extractive",
    "load_summarization_examples",
    "check_summarization_row",
    "sentence_features",
    "summarization_examples",
    "synthetic_copy_documents",
    "train_summarization_tokenizer",
]
