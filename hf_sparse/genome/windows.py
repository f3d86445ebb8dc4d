"""Which bases of a genome get scanned, and in which windows.

- **Segments**: each record minus its runs of at least ``skip_n`` N (either case); shorter N runs stay
  inside a segment and are scanned as N. Found in one streaming pass (:func:`find_segments`).
- **Windows** of a segment of ``n`` bases follow the ``dna-motif-detection`` pipeline exactly: starts
  ``0, stride, 2 * stride, ...`` while a whole window fits, plus one window aligned to the segment's end
  when the last one stops short of it; a segment shorter than ``window`` is one window.
- **Reading**: :func:`iter_windows` streams the bases of every window through a cursor over
  :meth:`FastaFile.iter_chunks`, holding at most one window plus one chunk.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from .fasta_index import DEFAULT_CHUNK, FastaFile

DEFAULT_SKIP_N = 100


def check_positive(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def n_runs(chunks: Iterable[tuple[str, int, str]], min_run: int) -> dict[str, list[tuple[int, int]]]:
    """``{record: [(start, end), ...]}``: the runs of at least ``min_run`` N/n in contiguous chunks
    ``(record, start, bases)`` as :meth:`FastaFile.iter_chunks` yields them."""
    min_run = check_positive("min_run", min_run)
    runs: dict[str, list[tuple[int, int]]] = {}
    name, open_start, pos = None, None, 0  # open_start: a run reaching the end of the last chunk

    for rec, start, bases in chunks:
        if rec != name or open_start is not None and bases[:1] not in ("N", "n"):
            if open_start is not None and pos - open_start >= min_run:
                runs[name].append((open_start, pos))
            open_start = None
        if rec != name:
            name = rec
            runs.setdefault(rec, [])
        arr = np.frombuffer(bases.encode("ascii"), dtype=np.uint8)
        is_n = np.concatenate([[False], (arr | 0x20) == ord("n"), [False]])  # (n + 2,)
        edges = (start + np.flatnonzero(is_n[1:] != is_n[:-1])).tolist()  # run starts and ends, alternating
        pos = start + len(arr)
        for a, b in zip(edges[::2], edges[1::2]):
            if open_start is not None:  # the chunk starts with N: the open run goes on
                a, open_start = open_start, None
            if b == pos:
                open_start = a
            elif b - a >= min_run:
                runs[rec].append((a, b))
    if open_start is not None and pos - open_start >= min_run:
        runs[name].append((open_start, pos))
    return runs


def segments(length: int, runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The stretches of ``[0, length)`` outside ``runs`` (sorted, disjoint), empty ones dropped."""
    out, pos = [], 0
    for a, b in runs:
        if a > pos:
            out.append((pos, a))
        pos = max(pos, b)
    if pos < length:
        out.append((pos, length))
    return out


def window_starts(n: int, window: int, stride: int) -> list[int]:
    """Window starts over ``n`` bases, as the ``dna-motif-detection`` pipeline places them."""
    starts = list(range(0, max(n - window, 0) + 1, stride))
    if starts[-1] + window < n:
        starts.append(n - window)
    return starts


@dataclass(frozen=True)
class Window:
    """One window: bases ``[start, end)`` of ``record``, inside the segment ``[seg_start, seg_end)``;
    ``final`` is where the bases this window settles end (the next window's start, or the segment end)."""

    record: str
    seg_start: int
    seg_end: int
    start: int
    end: int
    final: int

    @property
    def last(self) -> bool:
        return self.final == self.seg_end


def find_segments(fasta: FastaFile, skip_n: int = DEFAULT_SKIP_N) -> list[tuple[str, int, int]]:
    """``(record, start, end)`` of every segment of the file, in file order (one streaming pass)."""
    runs = n_runs(fasta.iter_chunks(), skip_n)
    return [(r.name, a, b) for r in fasta.records for a, b in segments(r.length, runs.get(r.name, []))]


def plan_windows(segs: Iterable[tuple[str, int, int]], window: int, stride: int) -> Iterator[Window]:
    """The windows of every segment, in order."""
    window, stride = check_positive("window", window), check_positive("stride", stride)
    if stride > window:
        raise ValueError(f"stride must be <= window, got stride={stride}, window={window}")
    for rec, a, b in segs:
        starts = [a + s for s in window_starts(b - a, window, stride)]
        for k, s in enumerate(starts):
            final = starts[k + 1] if k + 1 < len(starts) else b
            yield Window(rec, a, b, s, min(s + window, b), final)


class _Cursor:
    """Reads ``[start, end)`` ranges, in non-decreasing order within each record, from a chunk stream."""

    def __init__(self, chunks: Iterator[tuple[str, int, str]]):
        self._chunks = chunks
        self._name, self._start, self._buf = None, 0, ""

    def read(self, name: str, start: int, end: int) -> str:
        """Bases ``[start, end)`` of ``name``, holding fewer than ``end - start`` plus one chunk of bases:
        what lies before ``start`` is dropped, before and while the chunks that reach ``end`` are read."""
        if self._name == name and start >= self._start:
            cut = min(start - self._start, len(self._buf))
            self._buf, self._start = self._buf[cut:], self._start + cut
        while self._name != name or self._start + len(self._buf) < end:
            rec, s, bases = next(self._chunks)
            if rec != self._name or s != self._start + len(self._buf):
                self._name, self._start, self._buf = rec, s, bases
            else:
                self._buf += bases
            if rec != name or self._start + len(self._buf) <= start:  # a skipped N run or all-N record
                self._start, self._buf = self._start + len(self._buf), ""
        if start < self._start:
            raise ValueError(f"cursor moved backwards in {name!r}: {start} < {self._start}")
        cut = start - self._start
        self._buf, self._start = self._buf[cut:], start  # drop what no later window needs
        return self._buf[: end - start]


def iter_windows(
    fasta: FastaFile, window: int, stride: int, skip_n: int = DEFAULT_SKIP_N, chunk: int = DEFAULT_CHUNK
) -> Iterator[tuple[Window, str]]:
    """``(Window, bases)`` for every window of the file (two streaming passes: N runs, then bases)."""
    cursor = _Cursor(fasta.iter_chunks(chunk))
    for w in plan_windows(find_segments(fasta, skip_n), window, stride):
        yield w, cursor.read(w.record, w.start, w.end)


__all__ = [
    "DEFAULT_SKIP_N",
    "Window",
    "find_segments",
    "iter_windows",
    "n_runs",
    "plan_windows",
    "segments",
    "window_starts",
]
