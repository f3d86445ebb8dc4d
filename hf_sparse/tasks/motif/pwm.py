"""Position weight matrices: counts -> probabilities -> log-odds (bits), the one definition that the
motif data code (:class:`~hf_sparse.tasks.motif.motifs.Motif`, the scanner) and the inference
pipeline (strand of a found span) share.

- ``probabilities(counts, pseudocount)``: ``p[b, i] = (counts[b, i] + pseudocount) /
  (sum_b counts[b, i] + 4 * pseudocount)``;
- ``log_odds(counts, background, pseudocount)``: ``log2(p[b, i] / background[b])``; ``background``
  is 4 probabilities (A, C, G, T), uniform when None; ``-inf`` where a probability is 0.

Rows are A, C, G, T; ``counts`` has shape ``(4, L)``. Numpy only (the pipeline ships as remote code).
"""

from __future__ import annotations

import numpy as np

DEFAULT_PSEUDOCOUNT = 0.25


def probabilities(counts, pseudocount: float = DEFAULT_PSEUDOCOUNT) -> np.ndarray:
    """``(4, L)`` column probabilities of ``counts`` with ``pseudocount`` added to every cell."""
    c = np.asarray(counts, dtype=np.float64) + pseudocount
    return c / c.sum(axis=0, keepdims=True)


def log_odds(counts, background=None, pseudocount: float = DEFAULT_PSEUDOCOUNT) -> np.ndarray:
    """``(4, L)`` log2 odds of ``probabilities(counts, pseudocount)`` against ``background``."""
    bg = np.full(4, 0.25) if background is None else np.asarray(background, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.log2(probabilities(counts, pseudocount) / bg[:, None])


__all__ = ["DEFAULT_PSEUDOCOUNT", "log_odds", "probabilities"]
