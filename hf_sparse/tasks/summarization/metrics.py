"""Extractive summarization: Lead-k and Random-k baselines, the greedy ROUGE oracle, budgeted selection.

A *document* is either a string (split with :func:`~hf_sparse.tasks.summarization.sentences.split_sentences`) or
a list of sentence strings. Selected sentences are always returned in document order.

The oracle (Nallapati et al. 2017, SummaRuNNer; Liu & Lapata 2019, BertSum ``greedy_selection``)
starts from the empty selection and repeatedly adds the sentence whose addition most increases the
ROUGE of the selection against the reference; it stops when no sentence strictly increases it or when
``max_sentences`` are selected. Ties go to the earlier sentence. ROUGE-n here is computed
incrementally with n-gram *multisets* (clipped counts, as real ROUGE, whereas BertSum uses sets),
with ``rouge_score``'s tokenizer (or ``tokenizer="unicode"``, see :mod:`~hf_sparse.tasks.summarization.rouge`)
and stemmer; n-grams do not cross sentence boundaries, so ROUGE-2 may differ slightly from ``rouge_score`` on
the joined text. The objective for ``metric``:

- ``"rouge1"`` / ``"rouge2"``: that F-measure;
- ``"rouge1+rouge2"``: F(ROUGE-1) + F(ROUGE-2) (BertSum's criterion).

With several references the objective is the mean over references.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from .rouge import rouge_tokenize
from .sentences import split_sentences

ORACLE_METRICS = {"rouge1": (1,), "rouge2": (2,), "rouge1+rouge2": (1, 2)}


def _sentences(document, name: str = "document") -> list[str]:
    if isinstance(document, str):
        return split_sentences(document)
    if not isinstance(document, Sequence):
        raise TypeError(f"{name} must be a str or a list of str, got {type(document).__name__}")
    for i, s in enumerate(document):
        if not isinstance(s, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(s).__name__}")
    return list(document)


def _check_budget(name: str, value, allow_none: bool = True) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return int(value)


def lead_k(document: str | Sequence[str], k: int = 3) -> list[str]:
    """The first ``k`` sentences of ``document`` (all of them if it has fewer)."""
    k = _check_budget("k", k, allow_none=False)
    return _sentences(document)[:k]


def random_k(document: str | Sequence[str], k: int = 3, seed: int = 0) -> list[str]:
    """``k`` sentences drawn uniformly without replacement (``np.random.default_rng(seed)``), in document order."""
    k = _check_budget("k", k, allow_none=False)
    sentences = _sentences(document)
    if len(sentences) <= k:
        return sentences
    picked = np.sort(np.random.default_rng(seed).choice(len(sentences), size=k, replace=False))
    return [sentences[i] for i in picked]


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def _f1(overlap: int, n_pred: int, n_ref: int) -> float:
    if overlap == 0:
        return 0.0
    precision, recall = overlap / n_pred, overlap / n_ref
    return 2 * precision * recall / (precision + recall)


def greedy_oracle(
    document_sentences: str | Sequence[str],
    reference: str | Sequence[str],
    max_sentences: int | None = 3,
    metric: str = "rouge2",
    use_stemmer: bool = True,
    tokenizer: str = "default",
) -> list[int]:
    """Indices (ascending) of the sentences chosen by the greedy ROUGE oracle (see the module docstring).

    Args:
        document_sentences: the document's sentences (a string is split with :func:`split_sentences`).
        reference: the reference summary, or a list of references (the objective is their mean).
        max_sentences: the most sentences to select; ``None`` for no limit (stop when no gain).
        metric: ``"rouge1"``, ``"rouge2"`` or ``"rouge1+rouge2"``.
        use_stemmer: as in ``rouge_score``.
        tokenizer: ``"default"`` (``rouge_score``'s: ``a-z0-9`` only, so text in other scripts has no token and
            nothing is selected) or ``"unicode"`` (the letters and digits of every script; see
            :func:`~hf_sparse.tasks.summarization.rouge.rouge_tokenize`).

    Cost: tokenization once per sentence, then O(total tokens) per selected sentence.
    """
    sentences = _sentences(document_sentences, "document_sentences")
    refs = [reference] if isinstance(reference, str) else _sentences(reference, "reference")
    if not refs:
        raise ValueError("reference is an empty list")
    max_sentences = _check_budget("max_sentences", max_sentences)
    if metric not in ORACLE_METRICS:
        raise ValueError(f"metric must be one of {sorted(ORACLE_METRICS)}, got {metric!r}")
    orders = ORACLE_METRICS[metric]

    sent_tokens = [rouge_tokenize(s, use_stemmer, tokenizer) for s in sentences]
    sent_grams = {n: [_ngrams(t, n) for t in sent_tokens] for n in orders}
    sent_sizes = {n: [max(len(t) - n + 1, 0) for t in sent_tokens] for n in orders}
    ref_grams = [{n: _ngrams(rouge_tokenize(r, use_stemmer, tokenizer), n) for n in orders} for r in refs]
    ref_sizes = [{n: sum(g[n].values()) for n in orders} for g in ref_grams]

    # Running state of the selection, per reference and order: clipped overlap, selected n-gram counts.
    selected_grams = {n: Counter() for n in orders}
    selected_size = dict.fromkeys(orders, 0)
    overlap = [dict.fromkeys(orders, 0) for _ in refs]

    def gain_overlap(i: int, r: int, n: int) -> int:
        """How much adding sentence i raises the clipped n-gram overlap with reference r."""
        ref, sel, extra = ref_grams[r][n], selected_grams[n], 0
        for gram, count in sent_grams[n][i].items():
            cap = ref.get(gram, 0)
            if cap:
                have = sel.get(gram, 0)
                extra += min(have + count, cap) - min(have, cap)
        return extra

    def objective(i: int | None) -> float:
        total = 0.0
        for r in range(len(refs)):
            for n in orders:
                o = overlap[r][n] + (gain_overlap(i, r, n) if i is not None else 0)
                size = selected_size[n] + (sent_sizes[n][i] if i is not None else 0)
                total += _f1(o, size, ref_sizes[r][n])
        return total / len(refs)

    chosen: list[int] = []
    current = 0.0
    budget = len(sentences) if max_sentences is None else min(max_sentences, len(sentences))
    remaining = set(range(len(sentences)))
    while len(chosen) < budget:
        best, best_score = None, current
        for i in sorted(remaining):
            score = objective(i)
            if score > best_score + 1e-12:
                best, best_score = i, score
        if best is None:
            break
        for r in range(len(refs)):
            for n in orders:
                overlap[r][n] += gain_overlap(best, r, n)
        for n in orders:
            selected_grams[n].update(sent_grams[n][best])
            selected_size[n] += sent_sizes[n][best]
        chosen.append(best)
        remaining.discard(best)
        current = best_score
    return sorted(chosen)


def oracle_labels(
    document_sentences: str | Sequence[str],
    reference: str | Sequence[str],
    max_sentences: int | None = 3,
    metric: str = "rouge2",
    use_stemmer: bool = True,
    tokenizer: str = "default",
) -> np.ndarray:
    """0/1 int64 array, one entry per sentence: 1 iff :func:`greedy_oracle` selects that sentence."""
    sentences = _sentences(document_sentences, "document_sentences")
    labels = np.zeros(len(sentences), dtype=np.int64)
    labels[greedy_oracle(sentences, reference, max_sentences, metric, use_stemmer, tokenizer)] = 1
    return labels


def select_in_order(
    scores,
    sentences: Sequence[str],
    max_sentences: int | None = None,
    max_words: int | None = None,
    return_indices: bool = False,
) -> list[str] | list[int]:
    """The highest-scoring sentences within the budget, returned in document order.

    Sentences are visited by descending score (ties: earlier sentence first). A sentence is taken
    if it fits: the number taken stays ``<= max_sentences`` and the total word count (``len(s.split())``)
    stays ``<= max_words``; a sentence that does not fit the word budget is skipped and the next
    one tried, so the result is empty only when every sentence is longer than ``max_words``. At
    least one budget must be given; a budget ``<= 0`` raises ``ValueError``.

    Args:
        scores: one finite score per sentence (array-like of shape ``(n_sentences,)``).
        sentences: the sentences.
        max_sentences: the most sentences to take.
        max_words: the most words in total.
        return_indices: return the ascending indices instead of the sentences.
    """
    sentences = _sentences(sentences, "sentences")
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (len(sentences),):
        raise ValueError(f"scores must have shape ({len(sentences)},) like sentences, got {scores.shape}")
    if not np.isfinite(scores).all():
        raise ValueError("scores contains NaN or infinite values")
    max_sentences = _check_budget("max_sentences", max_sentences)
    max_words = _check_budget("max_words", max_words)
    if max_sentences is None and max_words is None:
        raise ValueError("select_in_order needs max_sentences or max_words (both are None)")

    order = np.argsort(-scores, kind="stable")
    taken, words = [], 0
    for i in order:
        if max_sentences is not None and len(taken) >= max_sentences:
            break
        n_words = len(sentences[i].split())
        if max_words is not None and words + n_words > max_words:
            continue
        taken.append(int(i))
        words += n_words
    taken.sort()
    return taken if return_indices else [sentences[i] for i in taken]


__all__ = ["ORACLE_METRICS", "greedy_oracle", "lead_k", "oracle_labels", "random_k", "select_in_order"]
