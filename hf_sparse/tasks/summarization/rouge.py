"""ROUGE on Google's ``rouge_score`` package, offline (``evaluate.load("rouge")`` needs the Hub).

Scores are those of ``rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"],
use_stemmer=...)``: lowercase, non-alphanumerics become spaces, Porter stemming of words longer than
3 characters. ``rougeLsum`` in ``rouge_score`` treats each line as a sentence, so both texts are first
put one sentence per line (:func:`lsum_text`): every line break of the text stays a sentence boundary (a
text already one sentence per line is scored as it is), and each line is split further with
:func:`~hf_sparse.tasks.summarization.sentences.split_sentences` with ``case_sensitive=False`` (terminal
punctuation and whitespace end a sentence whatever the next word's case, as in lowercased summaries; the
splitter's abbreviation rules stay). Pass ``sentence_split=False`` to use the texts' own lines only.

``rouge_score``'s tokenizer keeps only the letters ``a-z`` and the digits ``0-9``: text in other scripts
(Cyrillic, Greek, Arabic, CJK, accented letters) loses those words, and a Russian summary scores 0 even against
itself. ``tokenizer="unicode"`` keeps the letters and digits of every script instead (:func:`unicode_words`: runs of
letters, combining marks and digits, lowercased; kana and CJK ideographs, written without spaces, one token per
character; other scripts written without spaces, such as Thai, need their words separated beforehand) and stems
only ASCII words; on ASCII text both tokenizers give the same tokens, so English scores do not change.

Several references per example (SQuALITY has 4): each ROUGE type is scored against every reference
and the reference with the highest F-measure is kept, per type and per example (``max``, the
convention of ``rouge_score.RougeScorer.score_multi``, SQuALITY and ``evaluate``); precision and
recall are those of that reference. Dataset-level scores are means of the per-example scores.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence

import numpy as np

from .sentences import split_sentences

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
#: ``"default"``: ``rouge_score``'s (``a-z0-9`` only); ``"unicode"``: letters and digits of every script
ROUGE_TOKENIZERS = ("default", "unicode")
# kana and CJK ideographs: written without spaces, one token per character
_CJK = ((0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3134F))


@functools.lru_cache(maxsize=65536)
def _char_kind(ch: str) -> int:
    """0: separator, 1: part of a word (a letter, combining mark or digit), 2: a token of its own (CJK)."""
    if any(lo <= ord(ch) <= hi for lo, hi in _CJK):
        return 2
    return 1 if unicodedata.category(ch)[0] in "LMN" else 0


def unicode_words(text: str) -> list[str]:
    """``text`` lowercased, as runs of letters, combining marks and digits of any script (Unicode categories
    L, M, N; everything else separates), each kana or CJK ideograph a token of its own. On ASCII text: the runs
    of ``a-z0-9``, as ``rouge_score``'s tokenizer."""
    tokens, start = [], None
    text = text.lower()
    for i, ch in enumerate(text):
        kind = _char_kind(ch)
        if kind != 1 and start is not None:
            tokens.append(text[start:i])
            start = None
        if kind == 2:
            tokens.append(ch)
        elif kind == 1 and start is None:
            start = i
    if start is not None:
        tokens.append(text[start:])
    return tokens


def _require_rouge_score():
    try:
        from rouge_score import rouge_scorer, tokenize
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "hf_sparse.tasks.summarization.rouge needs the rouge-score package: pip install 'hf-sparse[train]'"
        ) from e
    return rouge_scorer, tokenize


class _CachedStemmer:
    """Porter stemmer with a memo: tokenizing long documents re-stems the same words many times."""

    def __init__(self):
        from nltk.stem import porter  # a dependency of rouge_score

        self._stem = functools.lru_cache(maxsize=200_000)(porter.PorterStemmer().stem)

    def stem(self, word: str) -> str:
        return self._stem(word)


class _Tokenizer:
    """``rouge_score``'s default tokenizer (``tokenize.tokenize``) with a cached stemmer, or (``kind="unicode"``)
    the letters and digits of every script (see the module docstring)."""

    def __init__(self, use_stemmer: bool, kind: str = "default"):
        _, self._tokenize = _require_rouge_score()
        self._stemmer = _CachedStemmer() if use_stemmer else None
        self._kind = kind

    def tokenize(self, text: str) -> list[str]:
        if self._kind == "default":
            return self._tokenize.tokenize(text, self._stemmer)
        tokens = unicode_words(text)
        if self._stemmer is None:
            return tokens
        return [self._stemmer.stem(t) if len(t) > 3 and t.isascii() else t for t in tokens]  # as rouge_score


def _check_tokenizer(tokenizer: str) -> str:
    if tokenizer not in ROUGE_TOKENIZERS:
        raise ValueError(f"tokenizer must be one of {ROUGE_TOKENIZERS}, got {tokenizer!r}")
    return tokenizer


@functools.lru_cache(maxsize=4)
def _tokenizer(use_stemmer: bool, kind: str = "default") -> _Tokenizer:
    return _Tokenizer(use_stemmer, kind)


@functools.lru_cache(maxsize=8)
def _scorer(use_stemmer: bool, rouge_types: tuple[str, ...], kind: str = "default"):
    rouge_scorer, _ = _require_rouge_score()
    return rouge_scorer.RougeScorer(list(rouge_types), tokenizer=_tokenizer(use_stemmer, kind))


def rouge_tokenize(text: str, use_stemmer: bool = True, tokenizer: str = "default") -> list[str]:
    """The tokens ROUGE scores: ``rouge_score``'s ``DefaultTokenizer(use_stemmer).tokenize(text)``, or with
    ``tokenizer="unicode"`` the letters and digits of every script (see the module docstring)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return _tokenizer(bool(use_stemmer), _check_tokenizer(tokenizer)).tokenize(text)


def lsum_text(text: str) -> str:
    r"""``text`` as ``rougeLsum`` wants it: one sentence per line. Every line of ``text`` ends a sentence;
    within a line, :func:`split_sentences` (``case_sensitive=False``) splits further.

    Example:
        >>> lsum_text("the cat sat. the dog ran!\nA bird sang. See e.g. the park.")
        'the cat sat.\nthe dog ran!\nA bird sang.\nSee e.g. the park.'
    """
    sentences = (s for line in text.split("\n") for s in split_sentences(line, case_sensitive=False))
    return "\n".join(" ".join(s.split()) for s in sentences)


def _check_inputs(predictions, references) -> list[list[str]]:
    """Validate; return the references as one non-empty list of strings per example."""
    for name, value in (("predictions", predictions), ("references", references)):
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise TypeError(f"{name} must be a list, got {type(value).__name__}")
        if len(value) == 0:
            raise ValueError(f"{name} is empty")
    if len(predictions) != len(references):
        raise ValueError(
            f"predictions and references differ in length: {len(predictions)} != {len(references)}"
        )
    for i, p in enumerate(predictions):
        if not isinstance(p, str):
            raise TypeError(f"predictions[{i}] must be a str, got {type(p).__name__}")
    refs = []
    for i, r in enumerate(references):
        if isinstance(r, str):
            refs.append([r])
            continue
        if not isinstance(r, Sequence):
            raise TypeError(f"references[{i}] must be a str or a list of str, got {type(r).__name__}")
        if len(r) == 0:
            raise ValueError(f"references[{i}] is an empty list of references")
        for j, rj in enumerate(r):
            if not isinstance(rj, str):
                raise TypeError(f"references[{i}][{j}] must be a str, got {type(rj).__name__}")
        refs.append(list(r))
    return refs


def rouge_per_example(
    predictions: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    use_stemmer: bool = True,
    sentence_split: bool = True,
    tokenizer: str = "default",
) -> dict[str, np.ndarray]:
    """Per-example ROUGE, each value a float array of shape ``(n_examples,)``.

    Keys: ``rouge1``, ``rouge2``, ``rougeL``, ``rougeLsum`` (F-measure) and ``<type>_precision``,
    ``<type>_recall``. With several references for an example, each type takes the reference with
    the highest F-measure (and its precision and recall).

    Args:
        predictions: one generated summary per example.
        references: one reference per example, or a non-empty list of references per example.
        use_stemmer: Porter-stem words longer than 3 characters (``rouge_score``'s option).
        sentence_split: for ``rougeLsum``, put one sentence per line with :func:`lsum_text` (the texts'
            line breaks and :func:`split_sentences` within lines); ``False`` uses the texts' own line breaks
            only.
        tokenizer: ``"default"`` (``rouge_score``'s: ``a-z0-9`` only) or ``"unicode"`` (the letters and digits of
            every script; the same tokens on ASCII text).
    """
    refs = _check_inputs(predictions, references)
    kind = _check_tokenizer(tokenizer)
    scorer = _scorer(bool(use_stemmer), ("rouge1", "rouge2", "rougeL"), kind)
    lsum_scorer = _scorer(bool(use_stemmer), ("rougeLsum",), kind)
    n = len(predictions)
    out = {f"{t}{s}": np.zeros(n) for t in ROUGE_TYPES for s in ("", "_precision", "_recall")}
    prep = lsum_text if sentence_split else (lambda x: x)
    for i, (pred, ref_list) in enumerate(zip(predictions, refs)):
        best = scorer.score_multi(ref_list, pred)  # per type, the first reference of highest F-measure
        best.update(lsum_scorer.score_multi([prep(r) for r in ref_list], prep(pred)))
        for t in ROUGE_TYPES:
            out[t][i] = best[t].fmeasure
            out[f"{t}_precision"][i] = best[t].precision
            out[f"{t}_recall"][i] = best[t].recall
    return out


def rouge(
    predictions: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    use_stemmer: bool = True,
    sentence_split: bool = True,
    precision_recall: bool = False,
    tokenizer: str = "default",
) -> dict[str, float]:
    """Mean ROUGE F-measure over examples: ``{"rouge1", "rouge2", "rougeL", "rougeLsum"}``.

    Each value is the mean over examples of the per-example F-measure of :func:`rouge_per_example`
    (max over references when there are several). ``precision_recall=True`` adds the means of
    ``<type>_precision`` and ``<type>_recall``. Scores are fractions in [0, 1], not percentages. ``tokenizer``:
    ``"default"`` (``rouge_score``'s, ``a-z0-9`` only) or ``"unicode"`` (every script; see the module docstring).

    Example:
        >>> rouge(["the cat sat"], [["a cat sat down", "the cat sat"]])["rouge1"]
        1.0
    """
    per_example = rouge_per_example(predictions, references, use_stemmer, sentence_split, tokenizer)
    keys = [k for k in per_example if precision_recall or k in ROUGE_TYPES]
    return {k: float(per_example[k].mean()) for k in keys}


__all__ = [
    "ROUGE_TOKENIZERS",
    "ROUGE_TYPES",
    "lsum_text",
    "rouge",
    "rouge_per_example",
    "rouge_tokenize",
    "unicode_words",
]
