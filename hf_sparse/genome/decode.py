"""Streaming merge of overlapping windows and streaming span decoding, exact and bounded in memory.

:class:`WindowMerger` gives every base the prediction of the window in which it lies farthest from an
edge (the earlier window on ties), as the ``dna-motif-detection`` pipeline does; a base is settled as
soon as no later window covers it.

:class:`SpanDecoder` decodes settled bases into spans with the pipeline's :func:`decode_spans` but only
over the few regions that can hold a span, so nothing proportional to the segment is kept:

- ``"bio"``: a span never crosses a base whose best tag is ``O``, so each maximal run of non-``O``
  bases is decoded alone.
- ``"fixed_length"``: a labelling's log-probability is that of all-``O`` plus, per span, its *gain*
  (log P of its ``B``/``I`` tags minus log P of ``O`` on its bases). An optimal labelling therefore uses
  only spans of positive gain, and groups of such candidate spans that do not overlap each other are
  independent: each group (a chain of overlapping candidates) is decoded alone, with the same result as
  one pass over the whole sequence (up to exact ties and float rounding).

A region still open after ``max_pending`` bases (only a model that finds motifs everywhere does that) is
decoded as it stands, with a warning. Pending bases are appended to a buffer that doubles when full (not
copied whole on every push), so a long open region costs time in proportion to its length.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..tasks.motif.pipeline import check_span_decoding, decode_spans, span_tags, strand_of
from .windows import Window

MAX_PENDING = 1 << 20


class WindowMerger:
    """Per-base probabilities of one segment from its windows, in order (see the module docstring)."""

    def __init__(self, seg_start: int, num_tags: int):
        self.start = seg_start  # first base not settled yet
        self.probs = np.zeros((0, num_tags))  # (pending, tags)
        self.margin = np.zeros(0)
        self.bases = ""

    def add(self, w: Window, probs: np.ndarray, bases: str) -> tuple[int, np.ndarray, str]:
        """Take window ``w`` (``probs``: ``(w.end - w.start, tags)``) and return the bases it settles:
        ``(first base, probabilities, bases)`` of ``[previous settled end, w.final)``."""
        have = self.start + len(self.margin)
        if w.end > have:
            new = w.end - have
            self.probs = np.concatenate([self.probs, np.zeros((new, self.probs.shape[1]))])
            self.margin = np.concatenate([self.margin, np.full(new, -1.0)])
            self.bases += bases[len(bases) - new :]
        pos = np.arange(w.start, w.end)
        m = np.minimum(pos - w.start, w.end - 1 - pos).astype(float)
        idx = pos - self.start
        take = m > self.margin[idx]
        self.probs[idx[take]] = probs[take]
        self.margin[idx[take]] = m[take]
        k, first = w.final - self.start, self.start
        out = (first, self.probs[:k], self.bases[:k])
        self.probs, self.margin, self.bases, self.start = (
            self.probs[k:],
            self.margin[k:],
            self.bases[k:],
            w.final,
        )
        return out


class _Pending:
    """Per-base probabilities and bases ``[start, start + len)``, appended at the end and dropped from the
    front, each in time proportional to the bases appended or dropped (amortised): a full buffer moves its
    live rows into one twice as large."""

    def __init__(self, start: int, probs: np.ndarray):
        self.start, self._lo, self._hi = start, 0, 0
        self._probs = np.empty((0, probs.shape[1]), dtype=probs.dtype)  # (capacity, tags)
        self._bases = np.empty(0, dtype=np.uint8)  # (capacity,) ASCII codes

    def __len__(self) -> int:
        return self._hi - self._lo

    def append(self, probs: np.ndarray, bases: str) -> None:
        n = len(probs)
        if self._hi + n > len(self._probs):
            live = self._hi - self._lo
            size = max(2 * (live + n), 1024)
            new_probs = np.empty((size, self._probs.shape[1]), dtype=self._probs.dtype)
            new_bases = np.empty(size, dtype=np.uint8)
            new_probs[:live] = self._probs[self._lo : self._hi]
            new_bases[:live] = self._bases[self._lo : self._hi]
            self._probs, self._bases, self._lo, self._hi = new_probs, new_bases, 0, live
        self._probs[self._hi : self._hi + n] = probs
        self._bases[self._hi : self._hi + n] = np.frombuffer(bases.encode("ascii"), dtype=np.uint8)
        self._hi += n

    def probs(self, a: int, b: int | None = None) -> np.ndarray:
        """The probabilities of bases ``[a, b)`` (default to the end), a view."""
        hi = self._hi if b is None else self._lo + b - self.start
        return self._probs[self._lo + a - self.start : hi]

    def bases(self, a: int, b: int | None = None) -> str:
        hi = self._hi if b is None else self._lo + b - self.start
        return self._bases[self._lo + a - self.start : hi].tobytes().decode("ascii")

    def drop_before(self, pos: int) -> None:
        self._lo, self.start = self._lo + pos - self.start, pos


class SpanDecoder:
    """Spans of one segment from its settled per-base probabilities, pushed in order.

    Args:
        config: the motif model's config (``id2label``, ``label2id``, ``span_decoding``, ``motif_lengths``,
            ``motifs``).
        start: the segment's first base (spans are in these coordinates).
        span_decoding: ``"bio"`` or ``"fixed_length"`` (default the config's).
        min_score: drop spans whose mean tag probability is lower.
    """

    def __init__(self, config, start: int, span_decoding: str | None = None, min_score: float = 0.0,
                 max_pending: int = MAX_PENDING):  # fmt: skip
        self.config = config
        self.how = check_span_decoding(config, span_decoding)
        self.min_score, self.max_pending = min_score, max_pending
        self.o = int(config.label2id["O"])
        names = sorted({t[2:] for t in config.label2id if t[:2] in ("B-", "I-")})
        if self.how == "fixed_length":
            self.motifs = [(n, int(config.motif_lengths[n]), config.label2id[f"B-{n}"], config.label2id[f"I-{n}"])
                           for n in names]  # fmt: skip
            self.span = max(length for _, length, _, _ in self.motifs) if self.motifs else 1
        else:
            self.span = 1
        self.touch = 1 if self.how == "bio" else 0  # bio: adjacent non-O bases belong to one region
        self.buf_start, self._pending = start, None  # a _Pending from the first push
        self.scanned = start  # candidates are known for starts < scanned
        self.region: list[int] | None = None  # the open region [a, b)

    # ---------------------------------------------------------------- candidates

    def _candidates(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Candidate spans ``(start, end)`` with ``lo <= start < hi``, sorted by start."""
        p = self._pending.probs(lo)
        if self.how == "bio":
            nz = np.flatnonzero(p[: hi - lo].argmax(-1) != self.o)
            return [(lo + int(i), lo + int(i) + 1) for i in nz]
        logp = np.log(np.clip(p, 1e-12, None))
        n, out = logp.shape[0], []
        cum_o = np.concatenate([[0.0], np.cumsum(logp[:, self.o])])
        for _, length, b, i in self.motifs:
            last = min(hi - lo, n - length + 1)
            if last <= 0:
                continue
            cum_i = np.concatenate([[0.0], np.cumsum(logp[:, i])])
            s = np.arange(last)
            gain = logp[s, b] + (cum_i[s + length] - cum_i[s + 1]) - (cum_o[s + length] - cum_o[s])
            out += [(lo + int(k), lo + int(k) + length) for k in np.flatnonzero(gain > 0)]
        return sorted(out)

    # ---------------------------------------------------------------- decoding

    def _decode(self, a: int, b: int) -> list[dict]:
        cfg = self.config
        probs, bases = self._pending.probs(a, b), self._pending.bases(a, b)
        spans = []
        for motif, s, e in decode_spans(probs, cfg, self.how):
            score = float(probs[np.arange(s, e), span_tags(probs, cfg, self.how, motif, s, e)].mean())
            if score < self.min_score:
                continue
            counts = (cfg.motifs or {}).get(motif)
            strand = strand_of(bases[s:e].upper(), counts) if counts else None
            spans.append(
                {"motif": motif, "start": a + s, "end": a + e, "strand": strand, "score": round(score, 4)}
            )
        return spans

    def _advance(self, final: bool) -> list[dict]:
        end = self.buf_start + len(self._pending)
        hi = end if final else end - self.span + 1
        out = []
        if hi > self.scanned:
            for s, e in self._candidates(self.scanned, hi):
                if self.region is not None and s < self.region[1] + self.touch:
                    self.region[1] = max(self.region[1], e)
                else:
                    if self.region is not None:
                        out += self._decode(*self.region)
                    self.region = [s, e]
            self.scanned = hi
        if self.region is not None and (final or self.region[1] + self.touch <= self.scanned):
            out += self._decode(*self.region)
            self.region = None
        elif self.region is not None and end - self.region[0] > self.max_pending:
            warnings.warn(
                f"a candidate motif region has grown past {self.max_pending} bases; decoding it in pieces "
                "(spans at the cut may differ from one pass over the sequence)",
                stacklevel=3,
            )
            out += self._decode(*self.region)
            self.region = None
        keep = min(self.scanned, self.region[0] if self.region is not None else self.scanned)
        if keep > self.buf_start:
            self._pending.drop_before(keep)
            self.buf_start = keep
        return out

    def push(self, start: int, probs: np.ndarray, bases: str) -> list[dict]:
        """Add the settled bases ``[start, start + len(bases))`` (contiguous with the previous push) and
        return the spans that are now final."""
        expected = self.buf_start + (len(self._pending) if self._pending is not None else 0)
        if start != expected:
            raise ValueError(f"bases must arrive in order: got {start}, expected {expected}")
        if self._pending is None:
            self._pending = _Pending(self.buf_start, probs)
        self._pending.append(probs, bases)
        return self._advance(final=False)

    def finish(self) -> list[dict]:
        """The remaining spans, at the end of the segment."""
        if self._pending is None:
            return []
        return self._advance(final=True)

    @property
    def pending(self) -> int:
        """Bases held (not yet decoded or past every candidate): bounded by the open region and a window."""
        return len(self._pending) if self._pending is not None else 0


__all__ = ["SpanDecoder", "WindowMerger"]
