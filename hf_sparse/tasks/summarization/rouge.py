"""ROUGE on Google's ``rouge_score`` package, offline (``evaluate.load("rouge")`` needs the Hub).

Scores are those of ``rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"],
use_stemmer=...)``: lowercase, non-alphanumerics become spaces, Porter stemming of words longer than
3 characters. ``rougeLsum`` in ``rouge_score`` treats each line as a sentence, so both texts are first
put one sentence per line (:func:`lsum_text`): every line break of the text stays a sentence boundary (a
text already one sentence per line is scored as it is), and each line is split further with
:func:`~hf_sparse.tasks.summarization.sentences.split_sentences` with ``case_sensitive=False`` (terminal
punctuation and whitespace end a sentence whatever the next word's case, as in lowercased summaries; the
splitter's abbreviation rules stay). Pass ``sentence_split=False`` to use the texts' own lines only.

Several references per example (SQuALITY has 4): each ROUGE type is scored against every reference
and the reference with the highest F-measure is kept, per type and per example (``max``, the
convention of ``rouge_score.RougeScorer.score_multi``, SQuALITY and ``evaluate``); precision and
recall are those of that reference. Dataset-level scores are means of the per-example scores.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from .sentences import split_sentences

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


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
    """``rouge_score``'s default tokenizer (``tokenize.tokenize``) with a cached stemmer."""

    def __init__(self, use_stemmer: bool):
        _, self._tokenize = _require_rouge_score()
        self._stemmer = _CachedStemmer() if use_stemmer else None

    def tokenize(self, text: str) -> list[str]:
        return self._tokenize.tokenize(text, self._stemmer)


@functools.lru_cache(maxsize=2)
def _tokenizer(use_stemmer: bool) -> _Tokenizer:
    return _Tokenizer(use_stemmer)


@functools.lru_cache(maxsize=4)
def _scorer(use_stemmer: bool, rouge_types: tuple[str, ...]):
    rouge_scorer, _ = _require_rouge_score()
    return rouge_scorer.RougeScorer(list(rouge_types), tokenizer=_tokenizer(use_stemmer))


def rouge_tokenize(text: str, use_stemmer: bool = True) -> list[str]:
    """The tokens ``rouge_score`` scores: ``DefaultTokenizer(use_stemmer).tokenize(text)``."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return _tokenizer(bool(use_stemmer)).tokenize(text)


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
    """
    refs = _check_inputs(predictions, references)
    scorer = _scorer(bool(use_stemmer), ("rouge1", "rouge2", "rougeL"))
    lsum_scorer = _scorer(bool(use_stemmer), ("rougeLsum",))
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
) -> dict[str, float]:
    """Mean ROUGE F-measure over examples: ``{"rouge1", "rouge2", "rougeL", "rougeLsum"}``.

    Each value is the mean over examples of the per-example F-measure of :func:`rouge_per_example`
    (max over references when there are several). ``precision_recall=True`` adds the means of
    ``<type>_precision`` and ``<type>_recall``. Scores are fractions in [0, 1], not percentages.

    Example:
        >>> rouge(["the cat sat"], [["a cat sat down", "the cat sat"]])["rouge1"]
        1.0
    """
    per_example = rouge_per_example(predictions, references, use_stemmer, sentence_split)
    keys = [k for k in per_example if precision_recall or k in ROUGE_TYPES]
    return {k: float(per_example[k].mean()) for k in keys}


__all__ = ["ROUGE_TYPES", "lsum_text", "rouge", "rouge_per_example", "rouge_tokenize"]
