"""PWM reference scan of a genome: JASPAR/TRANSFAC matrices, both strands, relative-score threshold.

The same rule as the motif recipes' labels (:func:`hf_sparse.tasks.motif.data.scan`, as ``pipelines/motif/ctcf.yaml``
uses it with ``scan_threshold: 0.85``): a site passes iff ``(score - min) / (max - min) >= threshold``, scores
in bits of log-odds against a uniform background, N scoring 0 (a window made only of N is not a site). The genome is read in pieces of ``chunk``
bases that overlap by the longest motif less one, over the same segments (N runs skipped) as the model
scan; each site is reported once, by the piece in which it starts. Vectorised over positions
(:func:`~hf_sparse.tasks.motif.data.scan` sums the motif's columns over whole arrays).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence

from ..pipelines.progress import check_progress, wants_progress
from ..tasks.motif.data import Motif, read_motifs, scan
from .fasta_index import DEFAULT_CHUNK, FastaFile, MemoryFasta
from .windows import DEFAULT_SKIP_N, check_positive, iter_windows

DEFAULT_THRESHOLD = 0.85  # pipelines/motif/ctcf.yaml: scan_threshold


def select_motifs(
    path, motif_ids: Sequence[str] | None = None, names: Sequence[str] | None = None
) -> list[Motif]:
    """Motifs of a JASPAR/TRANSFAC file chosen by matrix id (``MA0139.2``) or, failing ids, by name
    (``CTCF``); ``ValueError`` naming what is missing, a name that several matrices share (JASPAR 2024
    has three named CTCF: pass their ids), or when neither is given."""
    motifs = read_motifs(path)
    if motif_ids:
        by_id = {m.matrix_id: m for m in motifs}
        missing = [i for i in motif_ids if i not in by_id]
        if missing:
            raise ValueError(f"{os.fspath(path)} has no motif {missing}")
        return [by_id[i] for i in motif_ids]
    if names:
        chosen = [m for m in motifs if m.name in set(names)]
        found = {m.name for m in chosen}
        missing = [n for n in names if n not in found]
        if missing:
            raise ValueError(f"{os.fspath(path)} has no motif named {missing}; pass motif ids instead")
        for name in found:
            ids = [m.matrix_id for m in chosen if m.name == name]
            if len(ids) > 1:
                raise ValueError(
                    f"{os.fspath(path)} has {len(ids)} motifs named {name!r}: {ids}; choose by matrix id "
                    "(motif_ids, --motif-ids)"
                )
        return chosen
    raise ValueError("choose motifs by matrix id (motif_ids, e.g. ['MA0139.2']) or by name")


def _relative(motif: Motif) -> tuple[float, float]:
    lo = motif.log_odds()
    return float(lo.min(axis=0).sum()), float(lo.max(axis=0).sum())


def pwm_scan(fasta, motifs: Sequence[Motif], threshold: float = DEFAULT_THRESHOLD, skip_n: int = DEFAULT_SKIP_N,
             chunk: int = DEFAULT_CHUNK, progress=None) -> Iterator[dict]:  # fmt: skip
    """Sites of ``motifs`` in every record of ``fasta`` (a path, :class:`FastaFile` or
    :class:`MemoryFasta`), streamed in file order and by position: ``{"chrom", "start", "end", "motif",
    "score", "strand", "bits", "matrix_id"}`` with ``score`` the relative score in ``[threshold, 1]``.
    Several motifs or strands at one position come out in the order (start, strand, motif)."""
    if not motifs:
        raise ValueError("motifs is empty: give at least one Motif")
    chunk = check_positive("chunk", chunk)
    progress = check_progress(progress)
    if not isinstance(fasta, (FastaFile, MemoryFasta)):
        with FastaFile(fasta) as opened:
            yield from pwm_scan(opened, motifs, threshold, skip_n, chunk, progress)
        return
    span = max(len(m) for m in motifs)
    ranges = [_relative(m) for m in motifs]  # per motif: several matrices may share a name
    offsets, total = {}, 0  # bases before each record, for the progress bar
    for r in fasta.records:
        offsets[r.name], total = total, total + r.length
    bar, done = None, 0
    if wants_progress(progress, math.ceil(total / chunk)):
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="pwm scan", unit="bp", unit_scale=True, dynamic_ncols=True)
    try:
        for w, bases in iter_windows(fasta, chunk + span - 1, chunk, skip_n, chunk):
            hits = []
            for order, motif in enumerate(motifs):
                worst, best = ranges[order]
                for h in scan(bases, motif, threshold):
                    start = w.start + h["start"]
                    if start >= w.final:
                        continue  # the next piece reports it
                    hits.append((start, h["strand"] == "-", order, {
                        "chrom": w.record, "start": start, "end": w.start + h["end"], "motif": motif.name,
                        "score": round((h["score"] - worst) / (best - worst), 4), "strand": h["strand"],
                        "bits": round(h["score"], 3), "matrix_id": motif.matrix_id}))  # fmt: skip
            for *_, h in sorted(hits, key=lambda x: x[:3]):
                yield h
            if bar is not None:
                # bases settled so far, N runs included, so the bar ends at the genome's length
                bar.update(max(0, offsets[w.record] + w.final - done))
                done = max(done, offsets[w.record] + w.final)
        if bar is not None:
            bar.update(total - done)  # N runs and empty records after the last piece
    finally:
        if bar is not None:
            bar.close()


__all__ = ["DEFAULT_THRESHOLD", "pwm_scan", "select_motifs"]
