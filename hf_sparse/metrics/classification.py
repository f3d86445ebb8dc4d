"""Classification metrics on scikit-learn: accuracy, precision/recall/F1, AUROC, multi-label F1.

The scores are scikit-learn's (``accuracy_score``, ``precision_recall_fscore_support``, ``f1_score``,
``roc_auc_score``), except multi-label F1, counted here with the same formula (scikit-learn reads a
one-column 0/1 matrix as a binary vector and scores the absent class too); this module adds the input
checks (``ValueError``/``TypeError`` naming the argument), accepts torch tensors (any dtype, bfloat16
included), and keeps two conventions of its own:

- AUROC of labels holding one class is ``nan`` with a ``RuntimeWarning`` (scikit-learn raises), so an
  evaluation over many small groups can skip them with ``np.nanmean``.
- Multi-label ``"macro"`` F1 and :func:`per_class_f1` of 0/1 matrices leave out (``nan``) a class with no
  true and no predicted positive, instead of scoring it ``zero_division``.

``zero_division`` (default 0.0, as scikit-learn) is returned for a precision, recall or F1 whose
denominator is zero.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn import metrics as skm
from sklearn.exceptions import UndefinedMetricWarning


def _to_numpy(values):
    """A torch tensor as a numpy array (bfloat16/float16 as float32: numpy has no bfloat16); else as given."""
    if hasattr(values, "detach"):  # torch tensor
        values = values.detach().cpu()
        if values.is_floating_point() and values.element_size() < 4:
            values = values.float()
        values = values.numpy()
    return values


def _as_1d(name: str, values) -> np.ndarray:
    arr = np.asarray(_to_numpy(values))
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
    arr = np.asarray(_to_numpy(values))
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D 0/1 matrix (n_samples, n_classes), got shape {arr.shape}")
    if arr.size and not np.isin(arr, (0, 1)).all():
        raise ValueError(f"{name} must contain only 0 and 1 (or booleans)")
    return arr.astype(int)


def _indicator_pair(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    t, p = _as_indicator("y_true", y_true), _as_indicator("y_pred", y_pred)
    if t.shape != p.shape:
        raise ValueError(f"y_true and y_pred differ in shape: {t.shape} != {p.shape}")
    if t.size == 0:
        raise ValueError(f"y_true is empty (shape {t.shape})")
    return t, p


def _labels(a: np.ndarray, b: np.ndarray, labels) -> np.ndarray:
    labels = np.unique(np.concatenate([a, b])) if labels is None else np.asarray(labels)
    if labels.size == 0:
        raise ValueError("labels is empty")
    return labels


def _same_kind(label, values: np.ndarray) -> bool:
    """Whether ``label`` is of a kind ``values`` hold: a str among strings, a number among numbers."""
    if values.dtype.kind == "O":
        return any(isinstance(v, str) == isinstance(label, str) for v in values)
    if values.dtype.kind in "US":
        return isinstance(label, str)
    return isinstance(label, (numbers.Number, np.number, np.bool_))


def accuracy(y_true, y_pred) -> float:
    """Fraction of positions where ``y_pred == y_true`` (1-D, same shape, non-empty)."""
    a, b = _pair_1d(y_true, y_pred)
    return float(skm.accuracy_score(a, b))


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
        average: ``"binary"`` (class ``pos_label`` alone), ``"macro"`` (unweighted mean over ``labels``),
            ``"micro"`` (from TP, FP, FN summed over ``labels``; with all labels this is accuracy) or
            ``"weighted"`` (mean weighted by support in ``y_true``), as scikit-learn.
        pos_label: the positive class for ``"binary"`` (need not occur in the data, but must be of their
            kind: a str for string labels, a number for numeric ones; else a ValueError).
        labels: the classes to average over (default: every label in ``y_true`` or ``y_pred``).
        zero_division: value for a zero denominator.
    """
    a, b = _pair_1d(y_true, y_pred)
    if average == "binary":
        values = np.concatenate([a, b])
        if not _same_kind(pos_label, values):
            raise ValueError(
                f"pos_label {pos_label!r} can never match labels like {list(dict.fromkeys(values.tolist()))[:5]}"
                f" (dtype {values.dtype}); pass pos_label= the positive class"
            )
        # scikit-learn's "binary" refuses more than two classes or a pos_label absent from the data:
        # the same scores are those of class pos_label alone.
        labels, average = [pos_label], "micro"
    elif average not in ("macro", "micro", "weighted"):
        raise ValueError(f"average must be 'binary', 'macro', 'micro' or 'weighted', got {average!r}")
    labels = _labels(a, b, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        p, r, f, _ = skm.precision_recall_fscore_support(
            a, b, labels=labels, average=average, zero_division=zero_division
        )
    return {"precision": float(p), "recall": float(r), "f1": float(f)}


def per_class_f1(y_true, y_pred, labels=None, zero_division: float = 0.0) -> dict:
    """F1 of each class: ``{label: f1}``.

    Single-label (1-D arrays): keys are ``labels`` (default: every label in ``y_true`` or ``y_pred``).
    Multi-label (2-D 0/1 matrices ``(n_samples, n_classes)``): keys are the column indices, or
    ``labels[j]`` if given; a class with no true and no predicted positive gets ``nan`` (undefined,
    and left out of :func:`multilabel_f1`'s macro average).
    """
    if np.ndim(y_true) == 2 or np.ndim(y_pred) == 2:
        t, p = _indicator_pair(y_true, y_pred)
        names = range(t.shape[1]) if labels is None else list(labels)
        if len(names) != t.shape[1]:
            raise ValueError(f"labels has {len(names)} entries but the matrices have {t.shape[1]} columns")
        return dict(zip(names, _multilabel_f1s(t, p).tolist()))
    a, b = _pair_1d(y_true, y_pred)
    labels = _labels(a, b, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        f1 = skm.f1_score(a, b, labels=labels, average=None, zero_division=zero_division)
    return {label.item() if hasattr(label, "item") else label: float(v) for label, v in zip(labels, f1)}


def _multilabel_counts(t: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column: the F1 numerator 2·TP and denominator 2·TP + FP + FN.

    Counted here rather than by scikit-learn, which reads a one-column matrix as a binary vector
    and scores the absent class too.
    """
    t, p = t.astype(bool), p.astype(bool)
    tp, fp, fn = (t & p).sum(axis=0), (p & ~t).sum(axis=0), (t & ~p).sum(axis=0)
    return 2 * tp, 2 * tp + fp + fn


def _multilabel_f1s(t: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Per-column F1, ``nan`` for a column with no true and no predicted positive."""
    num, den = _multilabel_counts(t, p)
    f1 = np.full(den.shape, np.nan)
    present = den > 0
    f1[present] = num[present] / den[present]
    return f1


def auroc(labels, scores) -> float:
    """Area under the ROC curve of binary ``labels`` (0/1 or bool) ranked by ``scores``.

    scikit-learn's ``roc_auc_score``: the trapezoidal area, tied scores forming one diagonal step, which
    equals P(score of a random positive > score of a random negative) + 0.5·P(equal). If ``labels``
    holds a single class the AUROC is undefined: ``nan`` and a ``RuntimeWarning`` (rather than an error,
    so that an evaluation over many small groups can skip such groups with ``np.nanmean``). NaN scores
    raise ``ValueError``; ``±inf`` (a masked logit) ranks below / above every finite score.
    """
    y, s = _pair_1d(labels, scores, ("labels", "scores"))
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"labels must be 0/1 or booleans, got values {np.unique(y)[:5].tolist()}")
    s = s.astype(np.float64)
    if np.isnan(s).any():
        raise ValueError("scores contains NaN")
    if np.isinf(s).any():  # scikit-learn refuses inf; the area depends on the order (and ties) only
        s = np.unique(s, return_inverse=True)[1].reshape(s.shape).astype(np.float64)
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
    return float(skm.roc_auc_score(y, s))


def multilabel_f1(y_true, y_pred, average: str = "micro", zero_division: float = 0.0) -> float:
    """F1 of multi-label predictions given as 0/1 matrices of shape ``(n_samples, n_classes)``.

    - ``"micro"``: 2·ΣTP / (2·ΣTP + ΣFP + ΣFN) over all cells; ``zero_division`` if there is no
      true and no predicted positive at all.
    - ``"macro"``: mean of the per-class F1 over the classes that have at least one true *or*
      predicted positive. A class absent from both has an undefined F1 and is left out (so that
      classes a split never uses do not drag the mean to 0); a class predicted but never true
      counts with F1 = 0. ``zero_division`` if no class is present.
    """
    if average not in ("micro", "macro"):
        raise ValueError(f"average must be 'micro' or 'macro', got {average!r}")
    t, p = _indicator_pair(y_true, y_pred)
    if average == "micro":
        num, den = _multilabel_counts(t, p)
        return float(num.sum() / den.sum()) if den.sum() else float(zero_division)
    f1 = _multilabel_f1s(t, p)
    return float(zero_division) if np.isnan(f1).all() else float(np.nanmean(f1))


__all__ = ["accuracy", "auroc", "multilabel_f1", "per_class_f1", "precision_recall_f1"]
