"""Classification metrics in numpy: accuracy, precision/recall/F1, AUROC, multi-label F1.

Conventions shared by every function here:

- Inputs are array-likes (lists, numpy arrays, torch tensors) converted with ``np.asarray``.
- ``zero_division`` (default 0.0, as scikit-learn) is returned for a precision, recall or F1 whose
  denominator is zero.
- F1 = 2·TP / (2·TP + FP + FN), which equals the harmonic mean of precision and recall.
"""

from __future__ import annotations

import warnings

import numpy as np


def _as_1d(name: str, values) -> np.ndarray:
    if hasattr(values, "detach"):  # torch tensor
        values = values.detach().cpu().numpy()
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    return arr


def _pair_1d(y_true, y_pred, names=("y_true", "y_pred")) -> tuple[np.ndarray, np.ndarray]:
    a, b = _as_1d(names[0], y_true), _as_1d(names[1], y_pred)
    if a.shape != b.shape:
        raise ValueError(f"{names[0]} and {names[1]} differ in shape: {a.shape} != {b.shape}")
    return a, b


def _as_indicator(name: str, values) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    arr = np.asarray(values)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D 0/1 matrix (n_samples, n_classes), got shape {arr.shape}")
    if arr.size and not np.isin(arr, (0, 1)).all():
        raise ValueError(f"{name} must contain only 0 and 1 (or booleans)")
    return arr.astype(bool)


def _safe_div(num: float, den: float, zero_division: float) -> float:
    return float(num) / float(den) if den else float(zero_division)


def _prf(tp: float, fp: float, fn: float, zero_division: float) -> tuple[float, float, float]:
    precision = _safe_div(tp, tp + fp, zero_division)
    recall = _safe_div(tp, tp + fn, zero_division)
    f1 = _safe_div(2 * tp, 2 * tp + fp + fn, zero_division)
    return precision, recall, f1


def accuracy(y_true, y_pred) -> float:
    """Fraction of positions where ``y_pred == y_true`` (1-D, same shape, non-empty)."""
    a, b = _pair_1d(y_true, y_pred)
    return float(np.mean(a == b))


def _counts(a: np.ndarray, b: np.ndarray, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-label TP, FP, FN for single-label arrays ``a`` (truth) and ``b`` (prediction)."""
    tp = np.array([np.sum((a == c) & (b == c)) for c in labels], dtype=np.float64)
    fp = np.array([np.sum((a != c) & (b == c)) for c in labels], dtype=np.float64)
    fn = np.array([np.sum((a == c) & (b != c)) for c in labels], dtype=np.float64)
    return tp, fp, fn


def precision_recall_f1(
    y_true,
    y_pred,
    average: str = "binary",
    pos_label=1,
    labels=None,
    zero_division: float = 0.0,
) -> dict[str, float]:
    """Precision, recall and F1 of single-label predictions: ``{"precision", "recall", "f1"}``.

    Args:
        y_true, y_pred: 1-D arrays of class labels (ints or strings), same shape.
        average:
            - ``"binary"``: the scores of class ``pos_label`` alone (TP = truth and prediction are
              ``pos_label``, ...).
            - ``"macro"``: unweighted mean of the per-class scores over ``labels`` (default: every
              label that occurs in ``y_true`` or ``y_pred``).
            - ``"micro"``: scores from TP, FP, FN summed over ``labels``; with all labels this equals
              accuracy.
            - ``"weighted"``: per-class scores averaged with weights = support in ``y_true``.
        pos_label: the positive class for ``"binary"``.
        labels: the classes to average over (``macro``/``micro``/``weighted``).
        zero_division: value for a zero denominator.
    """
    a, b = _pair_1d(y_true, y_pred)
    if average == "binary":
        tp, fp, fn = _counts(a, b, [pos_label])
        p, r, f = _prf(tp[0], fp[0], fn[0], zero_division)
        return {"precision": p, "recall": r, "f1": f}
    if average not in ("macro", "micro", "weighted"):
        raise ValueError(f"average must be 'binary', 'macro', 'micro' or 'weighted', got {average!r}")
    labels = np.unique(np.concatenate([a, b])) if labels is None else np.asarray(labels)
    if labels.size == 0:
        raise ValueError("labels is empty")
    tp, fp, fn = _counts(a, b, labels)
    if average == "micro":
        p, r, f = _prf(tp.sum(), fp.sum(), fn.sum(), zero_division)
        return {"precision": p, "recall": r, "f1": f}
    per_class = np.array([_prf(*c, zero_division) for c in zip(tp, fp, fn)])  # (n_labels, 3)
    if average == "macro":
        mean = per_class.mean(axis=0)
    else:
        support = tp + fn
        if support.sum() == 0:
            mean = np.full(3, float(zero_division))
        else:
            mean = (per_class * support[:, None]).sum(axis=0) / support.sum()
    return {"precision": float(mean[0]), "recall": float(mean[1]), "f1": float(mean[2])}


def per_class_f1(y_true, y_pred, labels=None, zero_division: float = 0.0) -> dict:
    """F1 of each class: ``{label: f1}``.

    Single-label (1-D arrays): keys are ``labels`` (default: every label in ``y_true`` or ``y_pred``).
    Multi-label (2-D 0/1 matrices ``(n_samples, n_classes)``): keys are the column indices, or
    ``labels[j]`` if given; a class with no true and no predicted positive gets ``nan`` (undefined,
    and left out of :func:`multilabel_f1`'s macro average).
    """
    if np.ndim(y_true) == 2 or np.ndim(y_pred) == 2:
        t, p = _indicator_pair(y_true, y_pred)
        tp, fp, fn = _indicator_counts(t, p)
        names = range(t.shape[1]) if labels is None else list(labels)
        if len(names) != t.shape[1]:
            raise ValueError(f"labels has {len(names)} entries but the matrices have {t.shape[1]} columns")
        return {
            name: (
                float("nan") if tp[j] + fp[j] + fn[j] == 0 else _prf(tp[j], fp[j], fn[j], zero_division)[2]
            )
            for j, name in enumerate(names)
        }
    a, b = _pair_1d(y_true, y_pred)
    labels = np.unique(np.concatenate([a, b])) if labels is None else np.asarray(labels)
    tp, fp, fn = _counts(a, b, labels)
    return {
        label.item() if hasattr(label, "item") else label: _prf(*c, zero_division)[2]
        for label, c in zip(labels, zip(tp, fp, fn))
    }


def auroc(labels, scores) -> float:
    """Area under the ROC curve of binary ``labels`` (0/1 or bool) ranked by ``scores``.

    Defined as the Mann-Whitney probability P(score of a random positive > score of a random
    negative) + 0.5·P(equal), computed from midranks; this equals the trapezoidal area under the ROC
    curve with tied scores forming one diagonal step. If ``labels`` holds a single class the AUROC
    is undefined: the function returns ``nan`` and emits a ``RuntimeWarning`` (rather than raising,
    so that an evaluation over many small groups can skip such groups with ``np.nanmean``).
    NaN scores raise ``ValueError``.
    """
    y, s = _pair_1d(labels, scores, ("labels", "scores"))
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"labels must be 0/1 or booleans, got values {np.unique(y)[:5].tolist()}")
    s = s.astype(np.float64)
    if np.isnan(s).any():
        raise ValueError("scores contains NaN")
    y = y.astype(bool)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        warnings.warn(
            f"auroc is undefined when labels hold one class only ({n_pos} positives, {n_neg} negatives); returning nan",
            RuntimeWarning,
            stacklevel=2,
        )
        return float("nan")
    # Midranks (1-based): tied scores share the mean of the ranks they occupy.
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_s)) + 1]
    ends = np.r_[starts[1:], s.size]
    group_rank = (starts + ends + 1) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(s.size)
    ranks[order] = np.repeat(group_rank, ends - starts)
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def _indicator_pair(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    t, p = _as_indicator("y_true", y_true), _as_indicator("y_pred", y_pred)
    if t.shape != p.shape:
        raise ValueError(f"y_true and y_pred differ in shape: {t.shape} != {p.shape}")
    if t.size == 0:
        raise ValueError(f"y_true is empty (shape {t.shape})")
    return t, p


def _indicator_counts(t: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tp = (t & p).sum(axis=0).astype(np.float64)
    fp = (~t & p).sum(axis=0).astype(np.float64)
    fn = (t & ~p).sum(axis=0).astype(np.float64)
    return tp, fp, fn


def multilabel_f1(y_true, y_pred, average: str = "micro", zero_division: float = 0.0) -> float:
    """F1 of multi-label predictions given as 0/1 matrices of shape ``(n_samples, n_classes)``.

    - ``"micro"``: 2·ΣTP / (2·ΣTP + ΣFP + ΣFN) over all cells; ``zero_division`` if there is no
      true and no predicted positive at all.
    - ``"macro"``: mean of the per-class F1 over the classes that have at least one true *or*
      predicted positive. A class absent from both has an undefined F1 and is left out (so that
      classes a split never uses do not drag the mean to 0); a class predicted but never true
      counts with F1 = 0. ``zero_division`` if no class is present.
    """
    t, p = _indicator_pair(y_true, y_pred)
    tp, fp, fn = _indicator_counts(t, p)
    if average == "micro":
        return _prf(tp.sum(), fp.sum(), fn.sum(), zero_division)[2]
    if average == "macro":
        present = (tp + fp + fn) > 0
        if not present.any():
            return float(zero_division)
        f1 = 2 * tp[present] / (2 * tp[present] + fp[present] + fn[present])
        return float(f1.mean())
    raise ValueError(f"average must be 'micro' or 'macro', got {average!r}")


__all__ = ["accuracy", "auroc", "multilabel_f1", "per_class_f1", "precision_recall_f1"]
