"""Response-selection metrics: recall@k (R10@k) and mean reciprocal rank.

``scores`` has shape ``(n_examples, n_candidates)`` (higher = better); ``positive_index`` is the
column of the correct candidate, one int for all examples (default 0, the Ubuntu/DSTC convention of
putting the true response first) or an int array of shape ``(n_examples,)``.

Ties are broken *pessimistically*: the rank of the positive is
``1 + #{j: scores[j] > scores[pos]} + #{j != pos: scores[j] == scores[pos]}``, i.e. it comes after
every candidate with an equal score. A model that gives all candidates the same score therefore gets
rank ``n_candidates`` (R@1 = 0), never a lucky R@1 = 1. NaN scores raise ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def _check(scores, positive_index) -> tuple[np.ndarray, np.ndarray]:
    if hasattr(scores, "detach"):
        scores = scores.detach().cpu().numpy()
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] == 0 or s.shape[1] == 0:
        raise ValueError(f"scores must have shape (n_examples, n_candidates) with both > 0, got {s.shape}")
    if np.isnan(s).any():
        raise ValueError("scores contains NaN")
    if hasattr(positive_index, "detach"):
        positive_index = positive_index.detach().cpu().numpy()
    pos = np.asarray(positive_index)
    if pos.ndim == 0:
        pos = np.full(s.shape[0], pos)
    if pos.shape != (s.shape[0],) or not np.issubdtype(pos.dtype, np.integer):
        raise ValueError(
            f"positive_index must be an int or an int array of shape ({s.shape[0]},), got {positive_index!r}"
        )
    if (pos < 0).any() or (pos >= s.shape[1]).any():
        raise ValueError(
            f"positive_index must be in [0, {s.shape[1]}), got values outside it: {pos[(pos < 0) | (pos >= s.shape[1])][:5].tolist()}"
        )
    return s, pos


def ranks(scores, positive_index=0) -> np.ndarray:
    """1-based rank of the positive candidate in each row, ties counted against it. Shape ``(n_examples,)``."""
    s, pos = _check(scores, positive_index)
    positive = s[np.arange(s.shape[0]), pos][:, None]  # (n, 1)
    return (s >= positive).sum(axis=1).astype(np.int64)  # counts the positive itself once


def recall_at_k(scores, k: int, positive_index=0) -> float:
    """Fraction of examples whose positive has (pessimistic) rank ``<= k``.

    ``k >= n_candidates`` gives 1.0 by definition; ``k < 1`` raises ``ValueError``.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    return float(np.mean(ranks(scores, positive_index) <= k))


def mrr(scores, positive_index=0) -> float:
    """Mean reciprocal rank: mean over examples of ``1 / rank`` (pessimistic ranks)."""
    return float(np.mean(1.0 / ranks(scores, positive_index)))


def ranking_metrics(scores, positive_index=0, ks=(1, 2, 5)) -> dict[str, float]:
    """``{"r@1", "r@2", "r@5", "mrr"}`` (one ``r@k`` per entry of ``ks``, an int or a sequence of ints)
    from one ranking pass.

    With 10 candidates per example these are the R10@1, R10@2, R10@5 of response selection.
    """
    if isinstance(ks, (int, np.integer)) and not isinstance(ks, bool):
        ks = (ks,)  # one k
    elif isinstance(ks, (str, bytes)) or not isinstance(ks, Iterable):
        raise TypeError(f"ks must be an int or a sequence of ints >= 1, got {ks!r}")
    r = ranks(scores, positive_index)
    out = {}
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"ks must hold ints >= 1, got {k!r}")
        out[f"r@{k}"] = float(np.mean(r <= k))
    out["mrr"] = float(np.mean(1.0 / r))
    return out


__all__ = ["mrr", "ranking_metrics", "ranks", "recall_at_k"]
