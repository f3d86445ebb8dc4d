"""Transcription-factor motifs: the count matrix (:class:`Motif`), its JASPAR/TRANSFAC readers and the
motifs shipped with the package.

Conventions of the motif code (here, :mod:`.scanning`, :mod:`.synthetic`, :mod:`.data`), exact:

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
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from ...data.fasta import PathLike, open_text
from ...tokenization_dna import AMBIGUITY_CODES, IUPAC_CODES, NUCLEOTIDES
from .pwm import DEFAULT_PSEUDOCOUNT
from .pwm import log_odds as pwm_log_odds
from .pwm import probabilities as pwm_probabilities

BASES = NUCLEOTIDES  # A, C, G, T: the row order of every count matrix

# Code of every ASCII character: A C G T -> 0..3, N and ambiguity codes -> 4, others -> -1 (invalid).
_CODES = np.full(128, -1, dtype=np.int8)
for _i, _b in enumerate(BASES):
    _CODES[ord(_b)] = _CODES[ord(_b.lower())] = _i
for _b in "N" + AMBIGUITY_CODES:
    _CODES[ord(_b)] = _CODES[ord(_b.lower())] = 4


# ---------------------------------------------------------------- helpers


def base_codes(sequence: str) -> np.ndarray:
    """``int8`` code of every character of ``sequence``: A C G T -> 0 1 2 3, N and ambiguity codes -> 4
    (either case), anything else -> -1."""
    points = np.frombuffer(sequence.encode("utf-32-le"), dtype="<u4")
    return np.where(points < 128, _CODES[np.minimum(points, 127)], -1).astype(np.int8)


def encode_sequence(sequence: str) -> np.ndarray:
    """``int8`` codes of ``sequence``: A C G T -> 0 1 2 3, N/ambiguity codes -> 4 (either case)."""
    if not isinstance(sequence, str):
        raise TypeError(f"sequence must be a str, got {type(sequence).__name__}")
    codes = base_codes(sequence)
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


def check_pseudocount(pseudocount: Any) -> float:
    """``pseudocount`` as a float; ``ValueError`` unless it is a number >= 0."""
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
        return pwm_probabilities(self.counts, check_pseudocount(pseudocount))

    def log_odds(
        self,
        background: Sequence[float] | Mapping[str, float] | None = None,
        pseudocount: float = DEFAULT_PSEUDOCOUNT,
    ) -> np.ndarray:
        """``(4, L)`` log2 odds ``log2(pwm(pseudocount) / background)``; ``-inf`` where a probability is 0."""
        return pwm_log_odds(self.counts, _background(background), check_pseudocount(pseudocount))

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


def _lines(path: PathLike) -> Iterator[tuple[int, str, str]]:
    """``(line number, "file:line", stripped line)`` of every non-blank line of a text file (plain or gzip)."""
    where_file = os.fspath(path)
    with open_text(path) as f:
        for lineno, raw in enumerate(f, start=1):
            if raw.strip():
                yield lineno, f"{where_file}:{lineno}", raw.strip()


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

    for lineno, where, line in _lines(path):
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

    for lineno, where, line in _lines(path):
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
    first = next((line for _, _, line in _lines(path)), "")
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


__all__ = [
    "BASES",
    "Motif",
    "base_codes",
    "builtin_motifs",
    "check_pseudocount",
    "encode_sequence",
    "read_jaspar",
    "read_motifs",
    "read_transfac",
]
