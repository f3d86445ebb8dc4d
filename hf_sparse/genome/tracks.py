"""Hit tracks: BED6 and GFF3 writers, a BED reader, and model-vs-reference agreement.

BED6 lines are ``chrom start end name score strand``, tab-separated, 0-based half-open; ``score`` is the
hit's score in [0, 1] scaled to the integer 0-1000 that genome browsers shade by; ``strand`` is ``.``
when unknown. GFF3 features are 1-based, closed, of type ``TF_binding_site`` (SO:0000235), with the
score as a float and ``Name``/``motif_id`` attributes. As the GFF3 specification requires, the seqid is
percent-encoded outside ``[a-zA-Z0-9.:^*$@!+_?|-]``, and the source and attribute values wherever they hold
``; = & , %``, a tab, newline or other control character.
"""

from __future__ import annotations

import os
import string
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import IO

from ..tasks.motif.metrics import span_f1, span_overlap_f1


def bed_line(hit: dict) -> str:
    score = max(0, min(1000, round(1000 * float(hit["score"]))))
    return (
        f"{hit['chrom']}\t{hit['start']}\t{hit['end']}\t{hit['motif']}\t{score}\t{hit.get('strand') or '.'}\n"
    )


def write_bed(hits: Iterable[dict], out: IO[str], track: str | None = None) -> int:
    """Write ``hits`` as BED6 lines (after a ``track`` line when ``track`` names it); returns the count.
    Hits must come sorted (the scanners yield them in file order, by position)."""
    if track:
        out.write(f'track name="{track}" description="{track}" useScore=1\n')
    n = 0
    for hit in hits:
        out.write(bed_line(hit))
        n += 1
    return n


_SEQID_SAFE = frozenset(string.ascii_letters + string.digits + ".:^*$@!+_?|-")
_VALUE_RESERVED = frozenset(";=&,%\x7f") | {chr(i) for i in range(32)}


def _percent(text: str, keep) -> str:
    """``text`` with each character for which ``keep`` is false percent-encoded (its UTF-8 bytes)."""
    return "".join(c if keep(c) else "".join(f"%{b:02X}" for b in c.encode()) for c in str(text))


def _gff3_seqid(name: str) -> str:
    """A record name as a GFF3 seqid: percent-encoded outside ``[a-zA-Z0-9.:^*$@!+_?|-]``."""
    return _percent(name, _SEQID_SAFE.__contains__)


def _gff3_value(value: str) -> str:
    """A GFF3 source or attribute value: ``; = & , %``, tabs, newlines and control characters percent-encoded."""
    return _percent(value, lambda c: c not in _VALUE_RESERVED)


def write_gff3(
    hits: Iterable[dict], out: IO[str], source: str, sequences: Iterable[tuple[str, int]] = ()
) -> int:
    """Write ``hits`` as GFF3 (``##sequence-region`` for each ``(name, length)`` in ``sequences`` of at
    least one base: the region is 1-based and closed, so an empty record has none)."""
    out.write("##gff-version 3\n")
    for name, length in sequences:
        if length > 0:
            out.write(f"##sequence-region {_gff3_seqid(name)} 1 {length}\n")
    source = _gff3_value(source)
    n = 0
    for h in hits:
        n += 1
        attrs = f"ID={source}_{n};Name={_gff3_value(h['motif'])}"
        if h.get("matrix_id"):
            attrs += f";motif_id={_gff3_value(h['matrix_id'])}"
        out.write(f"{_gff3_seqid(h['chrom'])}\t{source}\tTF_binding_site\t{h['start'] + 1}\t{h['end']}"
                  f"\t{float(h['score']):.4g}\t{h.get('strand') or '.'}\t.\t{attrs}\n")  # fmt: skip
    return n


def read_bed(path: str | os.PathLike) -> list[dict]:
    """Hits of a BED file written by :func:`write_bed` (``track``/``#`` lines skipped; score back in [0, 1])."""
    hits = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip() or line.startswith(("track", "#", "browser")):
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 6:
                raise ValueError(
                    f"{os.fspath(path)}:{lineno}: BED6 needs 6 tab-separated fields, got {len(fields)}"
                )
            hits.append({"chrom": fields[0], "start": int(fields[1]), "end": int(fields[2]), "motif": fields[3],
                         "score": int(fields[4]) / 1000, "strand": fields[5]})  # fmt: skip
    return hits


def _clusters(hits: list[dict]) -> Iterator[list[dict]]:
    """Runs of hits (sorted by chrom order of appearance, then start) chained by overlap."""
    group, chrom, end = [], None, -1
    for h in hits:
        if group and (h["chrom"] != chrom or h["start"] >= end):
            yield group
            group = []
        if not group:
            chrom, end = h["chrom"], h["end"]
        group.append(h)
        end = max(end, h["end"])
    if group:
        yield group


def resolve_overlaps(hits: Iterable[dict]) -> list[dict]:
    """Non-overlapping hits as the motif recipes label them (:func:`hf_sparse.tasks.motif.data.label_sequence`):
    greedily by decreasing score (``bits`` when there; ties: earlier start, motif name, ``+`` before ``-``), a hit kept only if none of
    its bases is taken. Done per chain of overlapping hits, which gives the same result as over the whole
    sequence. ``hits`` must be sorted by position within each chrom."""
    kept = []
    for group in _clusters(list(hits)):
        taken = []
        for h in sorted(
            group, key=lambda h: (-h.get("bits", h["score"]), h["start"], h["motif"], h["strand"] == "-")
        ):
            if all(h["end"] <= t["start"] or t["end"] <= h["start"] for t in taken):
                taken.append(h)
        kept += sorted(taken, key=lambda h: h["start"])
    return kept


def compare_tracks(reference: Iterable[dict], predicted: Iterable[dict]) -> dict:
    """Precision, recall and F1 of ``predicted`` against ``reference`` hits, exact spans (same motif, start
    and end) and overlapping spans (same motif, at least one base shared), per chrom and pooled; strand is
    not compared (the model's strand is read off the PWM)."""
    by_chrom: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for k, hits in enumerate((reference, predicted)):
        for h in hits:
            by_chrom[h["chrom"]][k].append((h["motif"], h["start"], h["end"]))
    chroms = sorted(by_chrom)
    true = [by_chrom[c][0] for c in chroms]
    pred = [by_chrom[c][1] for c in chroms]
    keep = ("precision", "recall", "f1", "n_true", "n_pred")
    return {
        "exact": {k: v for k, v in span_f1(true, pred).items() if k in keep},
        "overlap": {k: v for k, v in span_overlap_f1(true, pred).items() if k in keep},
    }


__all__ = ["bed_line", "compare_tracks", "read_bed", "resolve_overlaps", "write_bed", "write_gff3"]
