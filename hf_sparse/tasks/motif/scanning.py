"""Scanning a sequence for motif instances (log-odds windows over both strands) and per-base BIO labels
from the hits. Coordinates and tags follow the conventions in :mod:`.motifs`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...utils.validation import check_fraction
from .motifs import Motif, encode_sequence
from .pwm import DEFAULT_PSEUDOCOUNT

DEFAULT_THRESHOLD = 0.8
_SCORE_TOLERANCE = 1e-9  # bits; lets threshold=1.0 find the consensus despite float rounding


def _window_scores(codes: np.ndarray, log_odds: np.ndarray) -> np.ndarray:
    """Score of every window ``codes[s : s + L]``: sum over motif columns, vectorised over positions."""
    L = log_odds.shape[1]
    n = len(codes) - L + 1
    if n <= 0:
        return np.empty(0)
    table = np.vstack([log_odds, np.zeros((1, L))])  # (5, L): code 4 (N) scores 0
    scores = np.zeros(n)
    for j in range(L):  # over motif columns, not sequence positions
        scores += table[codes[j : j + n], j]  # (n,)
    return scores


def scan_arrays(
    sequence: str,
    motif: Motif,
    threshold: float | None = None,
    *,
    min_score: float | None = None,
    background: Sequence[float] | Mapping[str, float] | None = None,
    pseudocount: float = DEFAULT_PSEUDOCOUNT,
    both_strands: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The hits of :func:`scan` (same arguments, same order) as three arrays: ``(starts, minus, scores)``,
    the start (int64), whether on the ``-`` strand (bool) and the score in bits (float64) of each hit. About
    17 bytes a hit where a dict takes hundreds: what a genome scan at a low cut-off needs."""
    if threshold is not None and min_score is not None:
        raise ValueError(
            f"pass threshold or min_score, not both (got threshold={threshold}, min_score={min_score})"
        )
    codes = encode_sequence(sequence)
    lo = motif.log_odds(background, pseudocount)
    if min_score is not None:
        cutoff = float(min_score)
    else:
        t = check_fraction("threshold", DEFAULT_THRESHOLD if threshold is None else threshold)
        best, worst = float(lo.max(axis=0).sum()), float(lo.min(axis=0).sum())
        if not math.isfinite(worst):
            raise ValueError(
                f"motif {motif.name!r} has zero-probability bases at pseudocount={pseudocount}, so a relative "
                "threshold is undefined; use pseudocount > 0 or min_score"
            )
        if best <= worst:
            raise ValueError(
                f"motif {motif.name!r} scores every window alike; use min_score instead of threshold"
            )
        cutoff = worst + t * (best - worst)
    n_before = np.concatenate([[0], np.cumsum(codes == 4)])  # (len + 1,) N/ambiguity codes before each base
    L = lo.shape[1]
    some_base = n_before[L:] - n_before[: max(len(n_before) - L, 0)] < L  # (windows,) not all N
    strands = [(False, lo), (True, lo[::-1, ::-1])] if both_strands else [(False, lo)]
    starts, minus, scores = [], [], []
    for is_minus, matrix in strands:
        window_scores = _window_scores(codes, matrix)
        found = np.flatnonzero((window_scores >= cutoff - _SCORE_TOLERANCE) & some_base)  # (hits,)
        starts.append(found)
        minus.append(np.full(len(found), is_minus))
        scores.append(window_scores[found])
    starts, minus, scores = np.concatenate(starts), np.concatenate(minus), np.concatenate(scores)
    order = np.lexsort((minus, starts))  # by start, then strand (+ first)
    return starts[order], minus[order], scores[order]


def scan(
    sequence: str,
    motif: Motif,
    threshold: float | None = None,
    *,
    min_score: float | None = None,
    background: Sequence[float] | Mapping[str, float] | None = None,
    pseudocount: float = DEFAULT_PSEUDOCOUNT,
    both_strands: bool = True,
) -> list[dict[str, Any]]:
    """Every window of ``sequence`` whose log-odds score passes the cut-off.

    The score of a window is the sum of ``motif.log_odds(background, pseudocount)`` over its bases (bits; N and
    ambiguity codes add 0). The cut-off is either

    - relative (``threshold``, default 0.8 when neither argument is given): a window passes iff
      ``(score - min) / (max - min) >= threshold``, with ``min``/``max`` the lowest/highest possible scores; or
    - absolute (``min_score``): a window passes iff ``score >= min_score``.

    Passing both is a ``ValueError``. Comparisons allow 1e-9 bits of rounding. A window made only of N (and
    other ambiguity codes) is never reported: it scores 0 bits, which a low cut-off would pass (a relative
    0.774 for CTCF), though it holds no site. With ``both_strands`` the reverse strand is scanned too; its
    hits are reported in forward coordinates with strand ``"-"`` (a palindromic site gives one hit per strand).
    :func:`scan_arrays` gives the same hits as arrays.

    Returns:
        ``[{"motif": name, "start": int, "end": int, "strand": "+" | "-", "score": float}]`` sorted by start,
        then strand (``+`` first).
    """
    starts, minus, scores = scan_arrays(
        sequence,
        motif,
        threshold,
        min_score=min_score,
        background=background,
        pseudocount=pseudocount,
        both_strands=both_strands,
    )
    return [
        {"motif": motif.name, "start": s, "end": s + len(motif), "strand": "-" if m else "+", "score": x}
        for s, m, x in zip(starts.tolist(), minus.tolist(), scores.tolist())
    ]


def bio_label_names(motif_names: Sequence[str]) -> list[str]:
    """``["O", "B-<m1>", "I-<m1>", "B-<m2>", ...]``: the tag vocabulary, in this order (``tag_ids`` index it)."""
    names = ["O"]
    for m in motif_names:
        names += [f"B-{m}", f"I-{m}"]
    return names


def spans_to_tags(length: int, spans: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per-base BIO tags for non-overlapping ``spans`` (``{"motif", "start", "end", ...}``) in a sequence of
    ``length`` bases. ``ValueError`` if a span is empty, out of range, or overlaps another."""
    tags = ["O"] * length
    for span in sorted(spans, key=lambda s: s["start"]):
        start, end, name = span["start"], span["end"], span["motif"]
        if not 0 <= start < end <= length:
            raise ValueError(f"span {dict(span)} is empty or outside [0, {length})")
        if any(t != "O" for t in tags[start:end]):
            raise ValueError(f"span {dict(span)} overlaps another span")
        tags[start] = f"B-{name}"
        tags[start + 1 : end] = [f"I-{name}"] * (end - start - 1)
    return tags


def label_sequence(
    sequence: str,
    motifs: Sequence[Motif],
    threshold: float | None = None,
    *,
    min_score: float | None = None,
    background: Sequence[float] | Mapping[str, float] | None = None,
    pseudocount: float = DEFAULT_PSEUDOCOUNT,
    both_strands: bool = True,
) -> list[str]:
    """Per-base BIO tags from :func:`scan` hits of every motif (same cut-off arguments).

    Overlaps: hits are taken greedily by decreasing score (ties: earlier start, then earlier motif in
    ``motifs``, then ``+`` before ``-``); a hit is kept only if none of its bases is already tagged, so the
    higher-scoring of two overlapping hits wins and the other is dropped entirely.
    """
    names = [m.name for m in motifs]
    if len(set(names)) != len(names):
        raise ValueError(f"motif names must be unique, got {names}")
    hits = []
    for k, motif in enumerate(motifs):
        for h in scan(
            sequence,
            motif,
            threshold,
            min_score=min_score,
            background=background,
            pseudocount=pseudocount,
            both_strands=both_strands,
        ):
            hits.append((-h["score"], h["start"], k, h["strand"] == "-", h))
    taken = np.zeros(len(sequence), dtype=bool)
    kept = []
    for *_, h in sorted(hits, key=lambda x: x[:4]):
        if not taken[h["start"] : h["end"]].any():
            taken[h["start"] : h["end"]] = True
            kept.append(h)
    return spans_to_tags(len(sequence), kept)


__all__ = ["DEFAULT_THRESHOLD", "bio_label_names", "label_sequence", "scan", "scan_arrays", "spans_to_tags"]
