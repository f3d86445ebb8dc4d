"""Span metrics for BIO tagging (DNA motifs, entities): per-base F1, exact span F1, overlap span F1.

A *span* is a tuple ``(type, start, end)`` with ``end`` exclusive, optionally with more fields such
as a strand, ``(type, start, end, strand)``; spans match only when the whole tuples are equal. Span
arguments take one sequence's spans (a list of tuples) or a batch (a list of such lists, one per
sequence; spans of different sequences never match).

Every result is ``{"precision", "recall", "f1", "n_true", "n_pred", "per_type": {type: {...}}}``
with micro-averaged scores over types and ``zero_division`` (default 0.0) for zero denominators.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from ...utils.labels import spans_from_bio


def _is_span(x) -> bool:
    return isinstance(x, tuple) and len(x) >= 3


def _as_batch(name: str, spans) -> list[list[tuple]]:
    """One list of span tuples per sequence."""
    if isinstance(spans, (str, bytes)) or not isinstance(spans, Sequence):
        raise TypeError(
            f"{name} must be a list of span tuples or a list of such lists, got {type(spans).__name__}"
        )
    if all(_is_span(s) for s in spans):
        batch = [list(spans)]  # one sequence (or an empty list)
    else:
        batch = []
        for i, seq in enumerate(spans):
            if isinstance(seq, (str, bytes, tuple)) or not isinstance(seq, Sequence):
                raise TypeError(
                    f"{name}[{i}] must be a list of span tuples (type, start, end[, ...]), got {seq!r}"
                )
            batch.append(list(seq))
    for i, seq in enumerate(batch):
        for j, s in enumerate(seq):
            if not _is_span(s):
                raise TypeError(f"{name}[{i}][{j}] must be a tuple (type, start, end[, ...]), got {s!r}")
            if not s[1] < s[2]:
                raise ValueError(f"{name}[{i}][{j}] has start >= end: {s!r}")
    return batch


def _pair_batches(true_spans, pred_spans):
    t, p = _as_batch("true_spans", true_spans), _as_batch("pred_spans", pred_spans)
    if len(t) == 1 and not t[0] and len(p) > 1:
        t = [[] for _ in p]  # an empty list pairs with a batch of any size
    if len(p) == 1 and not p[0] and len(t) > 1:
        p = [[] for _ in t]
    if len(t) != len(p):
        raise ValueError(
            f"true_spans and pred_spans hold different numbers of sequences: {len(t)} != {len(p)}"
        )
    return t, p


def _result(tp: Counter, n_true: Counter, n_pred: Counter, zero_division: float) -> dict:
    def scores(tp_, nt, np_):
        precision = tp_ / np_ if np_ else float(zero_division)
        recall = tp_ / nt if nt else float(zero_division)
        f1 = 2 * tp_ / (nt + np_) if nt + np_ else float(zero_division)
        return {"precision": float(precision), "recall": float(recall), "f1": float(f1)}

    types = sorted(set(n_true) | set(n_pred), key=str)
    per_type = {
        k: {**scores(tp[k], n_true[k], n_pred[k]), "n_true": n_true[k], "n_pred": n_pred[k]} for k in types
    }
    total_true, total_pred = sum(n_true.values()), sum(n_pred.values())
    return {
        **scores(sum(tp.values()), total_true, total_pred),
        "n_true": total_true,
        "n_pred": total_pred,
        "per_type": per_type,
    }


def span_f1(true_spans, pred_spans, zero_division: float = 0.0) -> dict:
    """Exact-match span precision, recall and F1 (micro over types, and per type).

    A predicted span is a true positive iff an identical tuple is among the true spans of the same
    sequence (multiset matching: a duplicated prediction matches at most as many copies as exist).
    Precision = TP / #predicted spans, recall = TP / #true spans, F1 = 2·TP / (#true + #predicted).
    """
    t_batch, p_batch = _pair_batches(true_spans, pred_spans)
    tp, n_true, n_pred = Counter(), Counter(), Counter()
    for t, p in zip(t_batch, p_batch):
        tc, pc = Counter(t), Counter(p)
        for span, count in tc.items():
            n_true[span[0]] += count
            tp[span[0]] += min(count, pc.get(span, 0))
        for span, count in pc.items():
            n_pred[span[0]] += count
    return _result(tp, n_true, n_pred, zero_division)


def span_overlap_f1(true_spans, pred_spans, zero_division: float = 0.0) -> dict:
    """Relaxed span scores: spans match when they overlap by at least one position.

    Two spans *match* when all fields but start and end are equal (type, strand, ...) and
    ``[start, end)`` intervals intersect. Precision = fraction of predicted spans that match some
    true span, recall = fraction of true spans matched by some predicted span, F1 their harmonic
    mean (one prediction may cover several true spans and vice versa; duplicates count each time).
    O(n log n) in the spans of a sequence.
    """
    t_batch, p_batch = _pair_batches(true_spans, pred_spans)
    hit_pred, hit_true = Counter(), Counter()
    n_true, n_pred = Counter(), Counter()
    for t, p in zip(t_batch, p_batch):
        t_by_key, p_by_key = defaultdict(list), defaultdict(list)
        for s in t:
            t_by_key[(s[0], *s[3:])].append((s[1], s[2]))
            n_true[s[0]] += 1
        for s in p:
            p_by_key[(s[0], *s[3:])].append((s[1], s[2]))
            n_pred[s[0]] += 1
        for key, ps in p_by_key.items():
            ts = t_by_key.get(key, [])
            hit_pred[key[0]] += _n_intersecting(ps, ts)
            hit_true[key[0]] += _n_intersecting(ts, ps)

    out = {}
    for k in sorted(set(n_true) | set(n_pred), key=str):
        out[k] = _harmonic(hit_pred[k], n_pred[k], hit_true[k], n_true[k], zero_division)
        out[k].update(n_true=n_true[k], n_pred=n_pred[k])
    total = _harmonic(
        sum(hit_pred.values()),
        sum(n_pred.values()),
        sum(hit_true.values()),
        sum(n_true.values()),
        zero_division,
    )
    return {**total, "n_true": sum(n_true.values()), "n_pred": sum(n_pred.values()), "per_type": out}


def _n_intersecting(intervals, others) -> int:
    """How many ``(start, end)`` of ``intervals`` intersect at least one of ``others``: with ``others``
    sorted by start, those starting before ``end`` are a prefix, and one of them reaches past ``start``
    iff the largest end of that prefix does."""
    if not others:
        return 0
    others = sorted(others)
    starts = [s for s, _ in others]
    reach = list(accumulate((e for _, e in others), max))  # reach[k]: largest end of others[: k + 1]
    n = 0
    for start, end in intervals:
        k = bisect_left(starts, end)  # others[:k] start before end
        if k and reach[k - 1] > start:
            n += 1
    return n


def _harmonic(hit_pred, n_pred, hit_true, n_true, zero_division) -> dict:
    precision = hit_pred / n_pred if n_pred else float(zero_division)
    recall = hit_true / n_true if n_true else float(zero_division)
    if not (n_pred or n_true):
        f1 = float(zero_division)
    elif precision + recall == 0:
        f1 = 0.0
    else:
        f1 = 2 * precision * recall / (precision + recall)
    return {"precision": float(precision), "recall": float(recall), "f1": float(f1)}


def _base_type(tag, outside):
    """The class of one position: its type without the B-/I- prefix (``""`` for bare B, I), None for outside."""
    if isinstance(tag, str):
        if tag == outside or tag == "O":
            return None
        if tag in ("B", "I"):  # untyped BIO: type "", as spans_from_bio
            return ""
        if tag[:2] in ("B-", "I-"):
            return tag[2:]
        return tag
    return None if tag == outside else tag


def _flatten_tags(name: str, tags) -> list[list]:
    """One list of tags per sequence (accepts one sequence, a batch of lists, or a 2-D array)."""
    if hasattr(tags, "detach"):
        tags = tags.detach().cpu().numpy()
    if isinstance(tags, np.ndarray):
        if tags.ndim == 1:
            return [tags.tolist()]
        if tags.ndim == 2:
            return tags.tolist()
        raise ValueError(f"{name} must be 1-D or 2-D, got shape {tags.shape}")
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise TypeError(f"{name} must be a list of tags or a list of such lists, got {type(tags).__name__}")
    if tags and all(isinstance(x, (str, int, np.integer)) for x in tags):
        return [list(tags)]
    out = []
    for i, seq in enumerate(tags):
        if hasattr(seq, "detach"):
            seq = seq.detach().cpu().numpy()
        if isinstance(seq, str) or not isinstance(seq, (Sequence, np.ndarray)):
            raise TypeError(f"{name}[{i}] must be a list of tags, got {seq!r}")
        out.append(list(np.asarray(seq).tolist()) if isinstance(seq, np.ndarray) else list(seq))
    return out


def per_base_f1(
    true_tags,
    pred_tags,
    id2label=None,
    ignore_index: int = -100,
    outside="O",
    zero_division: float = 0.0,
) -> dict:
    """Per-position (per-base) precision, recall and F1 ignoring the outside class.

    Each position's class is its tag without the ``B-``/``I-`` prefix (``"B-CTCF"`` and ``"I-CTCF"``
    are both ``"CTCF"``; bare ``"B"`` and ``"I"`` are both ``""``, as in ``spans_from_bio``); ``"O"``
    (or ``outside``) is no class. For each type X: TP = positions where truth and prediction are X,
    FP = prediction X and truth not X, FN = truth X and prediction not X; the totals are
    micro-averaged over types (``"O"`` positions contribute only through FP/FN of other types).

    Args:
        true_tags, pred_tags: BIO tag strings or integer label ids, for one sequence or a batch
            (lists of lists, or 2-D arrays/tensors), same lengths.
        id2label: maps integer ids to tag strings (a dict or list, e.g. ``model.config.id2label``).
            Without it integer ids are the classes themselves and ``outside`` is the outside id.
        ignore_index: positions whose *true* id equals it (HF's -100 for special tokens, padding,
            non-first subwords) are skipped, whatever is predicted there.
        outside: the outside tag or id when not ``"O"`` (e.g. ``0`` for raw ids).
        zero_division: value for zero denominators.
    """
    t_batch, p_batch = _flatten_tags("true_tags", true_tags), _flatten_tags("pred_tags", pred_tags)
    if len(t_batch) != len(p_batch):
        raise ValueError(
            f"true_tags and pred_tags hold different numbers of sequences: {len(t_batch)} != {len(p_batch)}"
        )

    def label(tag):
        if id2label is not None and not isinstance(tag, str):
            try:
                return id2label[int(tag)]
            except (KeyError, IndexError):
                raise ValueError(f"label id {tag!r} is not in id2label") from None
        return tag

    tp, n_true, n_pred = Counter(), Counter(), Counter()
    for i, (t, p) in enumerate(zip(t_batch, p_batch)):
        if len(t) != len(p):
            raise ValueError(f"sequence {i}: true_tags has length {len(t)} but pred_tags has length {len(p)}")
        for j, (a, b) in enumerate(zip(t, p)):
            if not isinstance(a, str) and a == ignore_index:
                continue
            if not isinstance(b, str) and b == ignore_index:
                raise ValueError(
                    f"pred_tags[{i}][{j}] is ignore_index ({ignore_index}) where true_tags is {a!r}"
                )
            ta, tb = _base_type(label(a), outside), _base_type(label(b), outside)
            if ta is not None:
                n_true[ta] += 1
            if tb is not None:
                n_pred[tb] += 1
            if ta is not None and ta == tb:
                tp[ta] += 1
    return _result(tp, n_true, n_pred, zero_division)


__all__ = ["per_base_f1", "span_f1", "span_overlap_f1", "spans_from_bio"]
