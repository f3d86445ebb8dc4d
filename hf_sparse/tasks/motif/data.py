"""Transcription-factor motifs: count matrices, JASPAR/TRANSFAC readers, a PWM scanner, BIO labels, and a
seeded generator of synthetic motif-labelling data.

Conventions used throughout (exact):

- A ``Motif`` holds raw counts, shape ``(4, L)``, rows in the order A, C, G, T.
- ``pwm(pseudocount)``: ``p[b, i] = (counts[b, i] + pseudocount) / (sum_b counts[b, i] + 4 * pseudocount)``
  (the pseudocount is added to every cell).
- ``log_odds(background, pseudocount)``: ``log2(p[b, i] / background[b])``, in bits. ``background`` defaults to
  uniform (0.25 each); otherwise 4 positive probabilities for A, C, G, T summing to 1 (a sequence or a mapping).
- Sequences to scan or label may contain ``A C G T N`` and the IUPAC ambiguity codes, in either case; ``N`` and
  ambiguity codes score as background (log-odds 0) at every motif position. Anything else (whitespace and ``U``
  included) raises ``ValueError`` naming the character and its 0-based position.
- Coordinates are 0-based, half-open ``[start, end)`` on the forward strand, also for ``-`` strand hits and
  spans. A ``-`` strand hit/span at ``start`` means that ``reverse_complement(sequence[start:end])`` matches the
  motif as written.
- BIO tags: ``O`` outside motifs, ``B-<name>`` at the first forward-strand base of an instance, ``I-<name>`` on
  its other bases, whatever its strand.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from ...data.fasta import PathLike, iter_fasta, open_text, read_fasta
from ...tokenization_dna import AMBIGUITY_CODES, IUPAC_CODES, reverse_complement
from ...utils.validation import check_fraction, check_int
from .pwm import DEFAULT_PSEUDOCOUNT
from .pwm import log_odds as pwm_log_odds
from .pwm import probabilities as pwm_probabilities

BASES = "ACGT"
DEFAULT_THRESHOLD = 0.8
_SCORE_TOLERANCE = 1e-9  # bits; lets threshold=1.0 find the consensus despite float rounding

# Code of every ASCII character: A C G T -> 0..3, N and ambiguity codes -> 4, others -> -1 (invalid).
_CODES = np.full(128, -1, dtype=np.int8)
for _i, _b in enumerate(BASES):
    _CODES[ord(_b)] = _CODES[ord(_b.lower())] = _i
for _b in "N" + AMBIGUITY_CODES:
    _CODES[ord(_b)] = _CODES[ord(_b.lower())] = 4


# ---------------------------------------------------------------- helpers


def encode_sequence(sequence: str) -> np.ndarray:
    """``int8`` codes of ``sequence``: A C G T -> 0 1 2 3, N/ambiguity codes -> 4 (either case)."""
    if not isinstance(sequence, str):
        raise TypeError(f"sequence must be a str, got {type(sequence).__name__}")
    points = np.frombuffer(sequence.encode("utf-32-le"), dtype="<u4")
    codes = np.where(points < 128, _CODES[np.minimum(points, 127)], -1).astype(np.int8)
    bad = np.flatnonzero(codes < 0)
    if bad.size:
        pos = int(bad[0])
        raise ValueError(
            f"invalid character {sequence[pos]!r} at position {pos} of the sequence; "
            f"expected IUPAC nucleotide codes {IUPAC_CODES} (either case)"
        )
    return codes


def _background(background: Sequence[float] | Mapping[str, float] | np.ndarray | None) -> np.ndarray:
    if background is None:
        return np.full(4, 0.25)
    if isinstance(background, Mapping):
        if sorted(background) != list(BASES):
            raise ValueError(
                f"background mapping must have exactly the keys A, C, G, T, got {sorted(background)}"
            )
        background = [background[b] for b in BASES]
    bg = np.asarray(background, dtype=np.float64)
    if bg.shape != (4,) or not np.all(np.isfinite(bg)) or np.any(bg <= 0) or abs(bg.sum() - 1.0) > 1e-6:
        raise ValueError(
            f"background must be 4 positive probabilities (A, C, G, T) summing to 1, got {background!r}"
        )
    return bg


def _check_pseudocount(pseudocount: Any) -> float:
    if isinstance(pseudocount, bool) or not isinstance(pseudocount, (int, float)) or not pseudocount >= 0:
        raise ValueError(f"pseudocount must be a number >= 0, got {pseudocount!r}")
    return float(pseudocount)


# ---------------------------------------------------------------- Motif


@dataclass(eq=False)
class Motif:
    """A position frequency matrix.

    Args:
        name: transcription factor name without whitespace, e.g. ``"CTCF"`` (used in BIO tags ``B-CTCF``/``I-CTCF``).
        matrix_id: database identifier, e.g. ``"MA0139.2"``.
        counts: ``(4, L)`` array of non-negative finite counts, rows A, C, G, T; every column must have a
            positive sum. Stored as a float64 copy.
    """

    name: str
    matrix_id: str
    counts: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or any(c.isspace() for c in self.name):
            raise ValueError(f"name must be a non-empty str without whitespace, got {self.name!r}")
        if not isinstance(self.matrix_id, str):
            raise TypeError(f"matrix_id must be a str, got {type(self.matrix_id).__name__}")
        counts = np.array(self.counts, dtype=np.float64)
        if counts.ndim != 2 or counts.shape[0] != 4 or counts.shape[1] < 1:
            raise ValueError(
                f"counts of motif {self.name!r} must have shape (4, L) with L >= 1, got {counts.shape}"
            )
        if not np.all(np.isfinite(counts)) or np.any(counts < 0):
            raise ValueError(f"counts of motif {self.name!r} must be finite and >= 0")
        empty = np.flatnonzero(counts.sum(axis=0) <= 0)
        if empty.size:
            raise ValueError(f"counts of motif {self.name!r} have columns with zero total: {empty.tolist()}")
        self.counts = counts

    def __len__(self) -> int:
        return self.counts.shape[1]

    def pwm(self, pseudocount: float = DEFAULT_PSEUDOCOUNT) -> np.ndarray:
        """``(4, L)`` probabilities: ``(counts + pseudocount) / (column total + 4 * pseudocount)``."""
        return pwm_probabilities(self.counts, _check_pseudocount(pseudocount))

    def log_odds(
        self,
        background: Sequence[float] | Mapping[str, float] | None = None,
        pseudocount: float = DEFAULT_PSEUDOCOUNT,
    ) -> np.ndarray:
        """``(4, L)`` log2 odds ``log2(pwm(pseudocount) / background)``; ``-inf`` where a probability is 0."""
        return pwm_log_odds(self.counts, _background(background), _check_pseudocount(pseudocount))

    @property
    def consensus(self) -> str:
        """The most frequent base of every column (ties go to the first of A, C, G, T)."""
        return "".join(BASES[i] for i in self.counts.argmax(axis=0))

    def reverse_complement(self) -> Motif:
        """The motif of the opposite strand: rows complemented (A<->T, C<->G), columns reversed."""
        return Motif(self.name, self.matrix_id, self.counts[::-1, ::-1])

    def sample(self, rng: np.random.Generator, pseudocount: float = 0.0) -> str:
        """One instance: each position drawn independently from ``pwm(pseudocount)``."""
        cum = np.cumsum(self.pwm(pseudocount), axis=0)  # (4, L)
        u = rng.random(len(self)) * cum[-1]  # (L,)
        idx = np.minimum((u[None, :] >= cum).sum(axis=0), 3)
        return "".join(BASES[i] for i in idx)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``{"name", "matrix_id", "counts": {"A": [...], "C": [...], "G": [...], "T": [...]}}``."""
        return {
            "name": self.name,
            "matrix_id": self.matrix_id,
            "counts": {b: self.counts[i].tolist() for i, b in enumerate(BASES)},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Motif:
        """Inverse of :meth:`to_dict`."""
        counts = data["counts"]
        if not isinstance(counts, Mapping) or sorted(counts) != list(BASES):
            raise ValueError(f"counts must be a mapping with keys A, C, G, T, got {counts!r:.80}")
        return cls(data["name"], data["matrix_id"], np.array([counts[b] for b in BASES]))


# ---------------------------------------------------------------- readers


def _parse_numbers(fields: list[str], where: str) -> list[float]:
    try:
        return [float(x) for x in fields]
    except ValueError:
        raise ValueError(f"{where}: expected numbers, got {' '.join(fields)!r}") from None


def read_jaspar(path: PathLike) -> list[Motif]:
    """Motifs of a JASPAR-format file (plain or gzip).

    Each motif is a header ``>MATRIX_ID NAME`` (name required) followed by exactly 4 count rows, either labelled
    ``A [ 1 2 ... ]`` (each of A, C, G, T once, any order, brackets optional) or unlabelled (just numbers, in
    the order A, C, G, T). Blank lines are skipped. ``ValueError`` with file and line number otherwise.
    """
    where_file = os.fspath(path)
    motifs: list[Motif] = []
    header: tuple[str, str, int] | None = None
    rows: dict[str, list[float]] = {}
    header_labelled = False

    def finish() -> None:
        mid, name, hline = header
        if len(rows) != 4:
            raise ValueError(
                f"{where_file}:{hline}: motif {mid} has {len(rows)} count rows, expected 4 (A, C, G, T)"
            )
        lengths = {len(v) for v in rows.values()}
        if len(lengths) != 1:
            raise ValueError(
                f"{where_file}:{hline}: count rows of motif {mid} differ in length: {sorted(lengths)}"
            )
        try:
            motifs.append(Motif(name, mid, np.array([rows[b] for b in BASES])))
        except ValueError as e:
            raise ValueError(f"{where_file}:{hline}: {e}") from None

    with open_text(path) as f:
        for lineno, raw in enumerate(f, start=1):
            line = raw.strip()
            where = f"{where_file}:{lineno}"
            if not line:
                continue
            if line.startswith(">"):
                if header is not None:
                    finish()
                parts = line[1:].split(None, 1)
                if len(parts) != 2:
                    raise ValueError(f"{where}: header must be '>MATRIX_ID NAME', got {line!r}")
                header, rows = (parts[0], parts[1].strip(), lineno), {}
                continue
            if header is None:
                raise ValueError(f"{where}: count row before the first '>' header: {line[:40]!r}")
            fields = line.replace("[", " ").replace("]", " ").split()
            labelled = fields[0].isalpha()
            if labelled:
                label, fields = fields[0].upper(), fields[1:]
                if label not in BASES:
                    raise ValueError(f"{where}: row label must be one of A, C, G, T, got {label!r}")
            else:
                label = BASES[len(rows)] if len(rows) < 4 else None
            if rows and labelled != header_labelled:
                raise ValueError(f"{where}: labelled and unlabelled count rows mixed in motif {header[0]}")
            if label is None or label in rows:
                raise ValueError(
                    f"{where}: more than 4 count rows, or row {label} repeated, in motif {header[0]}"
                )
            header_labelled = labelled
            rows[label] = _parse_numbers(fields, where)
    if header is not None:
        finish()
    return motifs


_TRANSFAC_TAGS = frozenset("AC ID NA DE XX VV BF BA CC P0 PO // SD ST RN RA".split())


def read_transfac(path: PathLike) -> list[Motif]:
    """Motifs of a TRANSFAC-format file (plain or gzip), as exported by JASPAR.

    A record is terminated by ``//``; ``AC`` gives ``matrix_id`` and ``ID`` gives ``name`` (both required).
    The matrix starts at a ``P0`` (or ``PO``) line naming the columns (a permutation of A C G T), followed by rows
    ``NN count count count count [consensus]`` numbered 1, 2, ... consecutively. Other tags (``XX``, ``DE``,
    ``CC``, ``BF``, ...) are ignored. ``ValueError`` with file and line number on anything else, including a last
    record without ``//``.
    """
    where_file = os.fspath(path)
    motifs: list[Motif] = []
    rec: dict[str, Any] = {}
    order: list[int] | None = None  # column -> base index, while inside a matrix block

    with open_text(path) as f:
        for lineno, raw in enumerate(f, start=1):
            line = raw.strip()
            where = f"{where_file}:{lineno}"
            if not line:
                continue
            rec.setdefault("line", lineno)
            fields = line.split()
            tag = fields[0]
            if tag == "//":
                if "AC" not in rec or "ID" not in rec or "rows" not in rec:
                    missing = [k for k in ("AC", "ID", "rows") if k not in rec]
                    raise ValueError(f"{where}: record starting at line {rec['line']} lacks {missing}")
                try:
                    motifs.append(Motif(rec["ID"], rec["AC"], np.array(rec["rows"]).T))
                except ValueError as e:
                    raise ValueError(f"{where_file}:{rec['line']}: {e}") from None
                rec, order = {}, None
            elif tag.isdigit() and order is not None:
                if int(tag) != len(rec["rows"]) + 1:
                    raise ValueError(f"{where}: matrix row numbered {tag}, expected {len(rec['rows']) + 1}")
                extra = fields[5:]
                if len(fields) < 5 or len(extra) > 1 or (extra and not extra[0].isalpha()):
                    raise ValueError(f"{where}: matrix row must be 'NN a c g t [consensus]', got {line!r}")
                values = _parse_numbers(fields[1:5], where)
                rec["rows"].append([values[order.index(b)] for b in range(4)])
            elif tag.isdigit():
                raise ValueError(f"{where}: matrix row outside a P0 block: {line!r}")
            elif tag in ("P0", "PO"):
                if "rows" in rec:
                    raise ValueError(f"{where}: second matrix in the record starting at line {rec['line']}")
                cols = [c.upper() for c in fields[1:]]
                if sorted(cols) != list(BASES):
                    raise ValueError(f"{where}: P0 line must name the columns A C G T, got {line!r}")
                order, rec["rows"] = [BASES.index(c) for c in cols], []
            elif tag in ("AC", "ID"):
                if len(fields) < 2:
                    raise ValueError(f"{where}: {tag} line without a value")
                rec[tag] = fields[1]
                order = None
            elif len(tag) == 2 and tag.isalpha() and tag.isupper():
                order = None
            else:
                raise ValueError(f"{where}: unexpected line {line!r}")
    if rec:
        raise ValueError(f"{where_file}:{rec['line']}: record not terminated by '//'")
    return motifs


def read_motifs(path: PathLike) -> list[Motif]:
    """Read a JASPAR or TRANSFAC file, chosen from its first non-blank line (``>``: JASPAR; a TRANSFAC tag
    such as ``AC``/``ID``/``XX``/``P0``: TRANSFAC). ``ValueError`` if neither (or the file is empty)."""
    with open_text(path) as f:
        first = next((line.strip() for line in f if line.strip()), "")
    if first.startswith(">"):
        return read_jaspar(path)
    if first[:2] in _TRANSFAC_TAGS:
        return read_transfac(path)
    raise ValueError(
        f"{os.fspath(path)}: cannot detect the motif format (expected JASPAR '>' or TRANSFAC tags), "
        f"first line {first[:40]!r}"
    )


def builtin_motifs(names: Sequence[str] | None = None) -> list[Motif]:
    """Six vertebrate motifs shipped with the package (JASPAR 2024 CORE, CC BY 4.0; see the JSON's ``source``):
    CTCF MA0139.2, SP1 MA0079.5, GATA1 MA0035.5, REST MA0138.3, TP53 MA0106.3, CREB1 MA0018.5.

    ``names`` selects and orders a subset (``KeyError`` naming an unknown name). Each call returns new objects.
    """
    text = resources.files(__package__).joinpath("builtin_motifs.json").read_text(encoding="utf-8")
    motifs = [Motif.from_dict(d) for d in json.loads(text)["motifs"]]
    if names is None:
        return motifs
    by_name = {m.name: m for m in motifs}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise KeyError(f"unknown builtin motif(s) {unknown}; available: {sorted(by_name)}")
    return [by_name[n] for n in names]


# ---------------------------------------------------------------- scanning


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

    Passing both is a ``ValueError``. Comparisons allow 1e-9 bits of rounding. With ``both_strands`` the reverse
    strand is scanned too; its hits are reported in forward coordinates with strand ``"-"`` (a palindromic site
    gives one hit per strand).

    Returns:
        ``[{"motif": name, "start": int, "end": int, "strand": "+" | "-", "score": float}]`` sorted by start,
        then strand (``+`` first).
    """
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
    hits: list[dict[str, Any]] = []
    strands = [("+", lo), ("-", lo[::-1, ::-1])] if both_strands else [("+", lo)]
    for strand, matrix in strands:
        scores = _window_scores(codes, matrix)
        for s in np.flatnonzero(scores >= cutoff - _SCORE_TOLERANCE):
            hits.append(
                {
                    "motif": motif.name,
                    "start": int(s),
                    "end": int(s) + len(motif),
                    "strand": strand,
                    "score": float(scores[s]),
                }
            )
    hits.sort(key=lambda h: (h["start"], h["strand"] == "-"))
    return hits


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


def dinucleotide_shuffle(sequence: str, rng: np.random.Generator) -> str:
    """A random permutation of ``sequence`` with exactly the same dinucleotide counts (and first and last base).

    Altschul & Erickson (1985): a random Eulerian path through the graph whose edges are the sequence's
    dinucleotides, drawn by choosing a random last exit edge per base (forming a tree towards the final base),
    shuffling the other exits, and walking from the first base. Works on any characters (case kept);
    sequences shorter than 3 are returned unchanged. Deterministic for a seeded ``rng``.
    """
    if not isinstance(sequence, str):
        raise TypeError(f"sequence must be a str, got {type(sequence).__name__}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    n = len(sequence)
    if n < 3:
        return sequence
    edges: dict[str, list[str]] = {}
    for a, b in zip(sequence, sequence[1:]):
        edges.setdefault(a, []).append(b)
    last = sequence[-1]
    # random arborescence of "last exits" towards `last` (Wilson-style loop-erased random walks)
    in_tree = {last}
    last_exit: dict[str, str] = {}
    for start in sorted(edges):
        v, path = start, {}
        while v not in in_tree:
            path[v] = edges[v][int(rng.integers(len(edges[v])))]
            v = path[v]
        v = start
        while v not in in_tree:
            in_tree.add(v)
            last_exit[v] = path[v]
            v = path[v]
    order: dict[str, list[str]] = {}
    for v, outs in edges.items():
        outs = list(outs)
        if v in last_exit:
            outs.remove(last_exit[v])
        outs = [outs[i] for i in rng.permutation(len(outs))]
        if v in last_exit:
            outs.append(last_exit[v])
        order[v] = outs[::-1]  # pop() from the end takes them in order
    out, v = [sequence[0]], sequence[0]
    for _ in range(n - 1):
        v = order[v].pop()
        out.append(v)
    return "".join(out)


# ---------------------------------------------------------------- synthetic data


class SyntheticMotifGenerator:
    """Plants motif instances sampled from PWMs into background DNA, with per-base and per-sequence labels.

    Example ``index`` is drawn from ``numpy.random.default_rng([seed, index])``, so it is the same whatever order
    or subset is generated. For each example, in this order:

    1. Background of ``length`` bases (uppercase): i.i.d. with ``P(G) = P(C) = gc_content / 2`` and
       ``P(A) = P(T) = (1 - gc_content) / 2``; or, with ``background_fasta`` (plain or gzip), a window chosen
       uniformly among all windows of the records at least ``length`` long, redrawn (up to 1000 times, then
       ``ValueError``) while it contains anything but A/C/G/T (any case; N runs are avoided). Motif-like sites
       already in real background are not labelled.
    2. With probability ``negative_fraction`` the example is negative (no instance). Otherwise it gets ``k``
       instances, ``k`` uniform in ``[min_instances, max_instances]``, or ``Poisson(poisson_mean)`` clipped to
       that range when ``poisson_mean`` is given.
    3. Each instance: a motif chosen uniformly, a strand (``-`` with probability ``reverse_prob``), and a site
       sampled position by position from ``motif.pwm(pseudocount)`` (reverse-complemented on ``-``).
    4. Instances are placed uniformly at random without overlap (adjacent is allowed) and overwrite the
       background.

    Each example is ``{"sequence": str, "tags": list[str] (BIO, one per base), "tag_ids": list[int] (index into
    label_names), "spans": [{"motif", "start", "end", "strand"}] sorted by start, "motif_labels": list[int]
    (multi-hot over motif_names)}``.
    """

    def __init__(
        self,
        motifs: Sequence[Motif] | None = None,
        length: int = 1000,
        min_instances: int = 1,
        max_instances: int = 3,
        poisson_mean: float | None = None,
        reverse_prob: float = 0.5,
        negative_fraction: float = 0.2,
        gc_content: float | None = None,
        background_fasta: PathLike | None = None,
        pseudocount: float = 0.0,
        seed: int = 0,
    ):
        self.motifs = list(builtin_motifs() if motifs is None else motifs)
        if not self.motifs or not all(isinstance(m, Motif) for m in self.motifs):
            raise ValueError("motifs must be a non-empty sequence of Motif")
        self.motif_names = [m.name for m in self.motifs]
        if len(set(self.motif_names)) != len(self.motif_names):
            raise ValueError(f"motif names must be unique, got {self.motif_names}")
        self.label_names = bio_label_names(self.motif_names)
        self.label2id = {name: i for i, name in enumerate(self.label_names)}
        self.length = check_int("length", length, 1)
        self.min_instances = check_int("min_instances", min_instances, 0)
        self.max_instances = check_int("max_instances", max_instances, self.min_instances)
        if poisson_mean is not None and (
            isinstance(poisson_mean, bool)
            or not isinstance(poisson_mean, (int, float))
            or not 0 < poisson_mean < math.inf
        ):
            raise ValueError(f"poisson_mean must be a positive number or None, got {poisson_mean!r}")
        self.poisson_mean = poisson_mean
        self.reverse_prob = check_fraction("reverse_prob", reverse_prob)
        self.negative_fraction = check_fraction("negative_fraction", negative_fraction)
        self.pseudocount = _check_pseudocount(pseudocount)
        self.seed = check_int("seed", seed, 0)
        longest = max(len(m) for m in self.motifs)
        if self.max_instances * longest > self.length:
            raise ValueError(
                f"length={self.length} cannot hold max_instances={self.max_instances} motifs of up to {longest} bases"
            )
        if background_fasta is not None and gc_content is not None:
            raise ValueError("pass gc_content (i.i.d. background) or background_fasta, not both")
        self.gc_content = check_fraction("gc_content", 0.41 if gc_content is None else gc_content)
        self.background_fasta = background_fasta
        self._records: list[tuple[str, np.ndarray]] = []
        if background_fasta is not None:
            self._load_background(background_fasta)

    def _load_background(self, path: PathLike) -> None:
        for _name, seq in read_fasta(path):
            if len(seq) < self.length:
                continue
            points = np.frombuffer(seq.encode("utf-32-le"), dtype="<u4")
            codes = np.where(points < 128, _CODES[np.minimum(points, 127)], -1)
            bad = np.concatenate([[0], np.cumsum((codes < 0) | (codes == 4), dtype=np.int64)])
            self._records.append((seq, bad))
        if not self._records:
            raise ValueError(
                f"background_fasta {os.fspath(path)!r} has no record of at least length={self.length} bases"
            )
        self._windows = np.array([len(s) - self.length + 1 for s, _ in self._records], dtype=np.float64)

    def _draw_background(self, rng: np.random.Generator) -> bytearray:
        if not self._records:
            g = self.gc_content
            codes = rng.choice(4, size=self.length, p=[(1 - g) / 2, g / 2, g / 2, (1 - g) / 2])
            return bytearray(np.frombuffer(b"ACGT", dtype=np.uint8)[codes].tobytes())
        for _ in range(1000):
            r = int(rng.choice(len(self._records), p=self._windows / self._windows.sum()))
            seq, bad = self._records[r]
            start = int(rng.integers(0, len(seq) - self.length + 1))
            if bad[start + self.length] == bad[start]:
                return bytearray(seq[start : start + self.length].upper().encode("ascii"))
        raise ValueError(
            f"no window of {self.length} A/C/G/T-only bases found in {os.fspath(self.background_fasta)!r} "
            "after 1000 draws"
        )

    def _num_instances(self, rng: np.random.Generator) -> int:
        if rng.random() < self.negative_fraction:
            return 0
        if self.poisson_mean is None:
            return int(rng.integers(self.min_instances, self.max_instances + 1))
        return int(np.clip(rng.poisson(self.poisson_mean), self.min_instances, self.max_instances))

    def example(self, index: int) -> dict[str, Any]:
        """Example number ``index`` (``int >= 0``), deterministic for ``(seed, index)``."""
        rng = np.random.default_rng([self.seed, check_int("index", index, 0)])
        seq = self._draw_background(rng)
        k = self._num_instances(rng)
        which = rng.integers(len(self.motifs), size=k)
        minus = rng.random(k) < self.reverse_prob
        lengths = np.array([len(self.motifs[i]) for i in which], dtype=np.int64)
        free = self.length - int(lengths.sum())
        gaps = np.sort(rng.integers(0, free + 1, size=k))  # uniform non-overlapping placement
        starts = gaps + np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        spans = []
        for i, start, is_minus in zip(which, starts.tolist(), minus.tolist()):
            motif = self.motifs[i]
            site = motif.sample(rng, self.pseudocount)
            if is_minus:
                site = reverse_complement(site)
            seq[start : start + len(motif)] = site.encode("ascii")
            spans.append(
                {
                    "motif": motif.name,
                    "start": start,
                    "end": start + len(motif),
                    "strand": "-" if is_minus else "+",
                }
            )
        tags = spans_to_tags(self.length, spans)
        present = {s["motif"] for s in spans}
        return {
            "sequence": seq.decode("ascii"),
            "tags": tags,
            "tag_ids": [self.label2id[t] for t in tags],
            "spans": spans,
            "motif_labels": [int(m in present) for m in self.motif_names],
        }

    def generate(self, n: int, start: int = 0) -> list[dict[str, Any]]:
        """Examples ``start, ..., start + n - 1``."""
        n, start = check_int("n", n, 0), check_int("start", start, 0)
        return [self.example(i) for i in range(start, start + n)]


def generate_motif_dataset(n: int, seed: int = 0, start: int = 0, **kwargs: Any) -> list[dict[str, Any]]:
    """``SyntheticMotifGenerator(seed=seed, **kwargs).generate(n, start)``."""
    return SyntheticMotifGenerator(seed=seed, **kwargs).generate(n, start)


# ---------------------------------------------------------------- recipe datasets (🤗 datasets)


def _motif_features():
    from datasets import Features, List, Value

    span = {
        "motif": Value("string"),
        "start": Value("int64"),
        "end": Value("int64"),
        "strand": Value("string"),
    }
    return Features(
        {
            "sequence": Value("string"),
            "tags": List(Value("string")),
            "tag_ids": List(Value("int64")),
            "spans": List(span),
            "motif_labels": List(Value("int64")),
        }
    )


def _synthetic_rows(params: dict[str, Any], start: int, n: int):
    """Generator of :meth:`SyntheticMotifGenerator.example` ``start .. start + n - 1`` (motifs as dicts)."""
    gen = SyntheticMotifGenerator([Motif.from_dict(m) for m in params["motifs"]], **params["kwargs"])
    for i in range(start, start + n):
        yield gen.example(i)


def synthetic_dataset(motifs: Sequence[Motif], start: int, n: int, **kwargs: Any):
    """Examples ``start .. start + n - 1`` of ``SyntheticMotifGenerator(motifs, **kwargs)`` as a
    ``datasets.Dataset`` (``Dataset.from_generator``: written once to the datasets cache, keyed by
    the motifs and the generator's arguments, and reused by the next run)."""
    from datasets import Dataset

    params = {"motifs": [m.to_dict() for m in motifs], "kwargs": kwargs}
    SyntheticMotifGenerator(list(motifs), **kwargs)  # argument errors here, not inside the generator
    return Dataset.from_generator(
        _synthetic_rows, features=_motif_features(), gen_kwargs={"params": params, "start": start, "n": n}
    )


def _fasta_rows(path: str):
    for record, (name, sequence) in enumerate(iter_fasta(path)):
        yield {"record": record, "name": name, "sequence": sequence}


def fasta_dataset(path: PathLike):
    """The records of a FASTA file (plain or gzip) as a ``datasets.Dataset`` with columns ``record``
    (0-based index), ``name`` and ``sequence`` (``Dataset.from_generator`` over :func:`iter_fasta`).
    ``ValueError`` if the file has no records."""
    from datasets import Dataset, Features, Value

    features = Features({"record": Value("int64"), "name": Value("string"), "sequence": Value("string")})
    path = os.path.abspath(os.fspath(path))
    stat = os.stat(path)
    try:
        dataset = Dataset.from_generator(
            _fasta_rows,
            features=features,
            gen_kwargs={"path": path},
            # the cache key includes the file's size and time, so an edited file is read again
            config_name=f"fasta-{stat.st_size}-{stat.st_mtime_ns}",
        )
    except Exception as e:
        raise ValueError(f"{path}: cannot read FASTA records: {e.__cause__ or e}") from e
    if len(dataset) == 0:
        raise ValueError(f"fasta {path!r} has no records")
    return dataset


def scan_rows(
    batch: dict[str, list],
    *,
    motifs: list[dict[str, Any]],
    threshold: float,
    shuffle_negatives: bool,
    seed: int,
) -> dict[str, list]:
    """Batched ``map`` over FASTA records: each record (uppercased) labelled per base by scanning
    ``motifs`` (:func:`label_sequence`, relative ``threshold``), ``label`` 1; with
    ``shuffle_negatives`` followed by its dinucleotide shuffle (``default_rng([seed, record])``),
    labelled by the same scan, ``label`` 0. Columns: ``sequence``, ``tags``, ``name``, ``label``,
    ``motif_labels`` (1 where the motif's ``B-`` tag occurs)."""
    found = [Motif.from_dict(m) for m in motifs]
    out: dict[str, list] = {"sequence": [], "tags": [], "name": [], "label": [], "motif_labels": []}
    for record, name, seq in zip(batch["record"], batch["name"], batch["sequence"]):
        variants = [(seq.upper(), 1)]
        if shuffle_negatives:
            rng = np.random.default_rng([seed, int(record)])
            variants.append((dinucleotide_shuffle(seq.upper(), rng), 0))
        for s, is_peak in variants:
            tags = label_sequence(s, found, threshold)
            out["sequence"].append(s)
            out["tags"].append(tags)
            out["name"].append(name)
            out["label"].append(is_peak)
            out["motif_labels"].append([int(f"B-{m.name}" in tags) for m in found])
    return out


def check_classification_row(row: Mapping[str, Any], where: str) -> None:
    """A sequence-classification row: ``sequence`` a str, ``label`` an int class id."""
    if not isinstance(row.get("sequence"), str):
        raise ValueError(f"{where}: field 'sequence' must be a str, got {row.get('sequence')!r:.60}")
    label = row.get("label")
    if isinstance(label, bool) or not isinstance(label, int):
        raise ValueError(f"{where}: field 'label' must be an int class id, got {label!r}")


__all__ = [
    "BASES",
    "Motif",
    "SyntheticMotifGenerator",
    "bio_label_names",
    "builtin_motifs",
    "check_classification_row",
    "fasta_dataset",
    "dinucleotide_shuffle",
    "encode_sequence",
    "generate_motif_dataset",
    "label_sequence",
    "read_jaspar",
    "read_motifs",
    "read_transfac",
    "scan",
    "scan_rows",
    "spans_to_tags",
    "synthetic_dataset",
]
