"""PWM reference scan of a genome: JASPAR/TRANSFAC matrices, both strands, relative-score threshold.

The same rule as the motif recipes' labels (:func:`hf_sparse.tasks.motif.data.scan`, as ``pipelines/motif/ctcf.yaml``
uses it with ``scan_threshold: 0.85``): a site passes iff ``(score - min) / (max - min) >= threshold``, scores
in bits of log-odds against a uniform background, N scoring 0 (a window made only of N is not a site). The genome is read in pieces of ``chunk``
bases that overlap by the longest motif less one, over the same segments (N runs skipped) as the model
scan; each site is reported once, by the piece in which it starts. Vectorised over positions
(:func:`~hf_sparse.tasks.motif.scanning.scan_arrays` sums the motif's columns over whole arrays); a piece's
hits are held as arrays (about 30 bytes a hit) and made into dicts one at a time as they are taken, so
memory depends on ``chunk`` and the number of motifs, not on how many sites pass the threshold.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence

import numpy as np

from ..pipelines.progress import check_progress, wants_progress
from ..tasks.motif.data import Motif, read_motifs
from ..tasks.motif.scanning import scan_arrays
from .fasta_index import DEFAULT_CHUNK, FastaFile, MemoryFasta
from .windows import DEFAULT_SKIP_N, check_positive, iter_windows

DEFAULT_THRESHOLD = 0.85  # pipelines/motif/ctcf.yaml: scan_threshold
_BLOCK = 1 << 16  # hits turned into Python values at once


def select_motifs(
    path, motif_ids: Sequence[str] | None = None, names: Sequence[str] | None = None
) -> list[Motif]:
    """Motifs of a JASPAR/TRANSFAC file chosen by matrix id (``MA0139.2``) or, failing ids, by name
    (``CTCF``); ``ValueError`` naming what is missing, an id given twice (its sites would be reported
    twice), a name that several matrices share (JASPAR 2024 has three named CTCF: pass their ids), or when
    neither is given."""
    if motif_ids:
        repeated = sorted({i for i in motif_ids if list(motif_ids).count(i) > 1})
        if repeated:
            raise ValueError(f"motif ids given more than once: {repeated}; give each id once")
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
            # the piece's hits as arrays (start, on the - strand, motif, bits); a dict is made per hit taken
            starts, minus, which, scores = [], [], [], []
            for order, motif in enumerate(motifs):
                found, on_minus, bits = scan_arrays(bases, motif, threshold)
                keep = found < w.final - w.start  # the next piece reports the others
                starts.append(found[keep] + w.start)
                minus.append(on_minus[keep])
                which.append(np.full(int(keep.sum()), order, dtype=np.int32))
                scores.append(bits[keep])
            starts, minus, which, scores = (np.concatenate(a) for a in (starts, minus, which, scores))
            by_position = np.lexsort((which, minus, starts))  # (start, strand, motif)
            for k in range(0, len(by_position), _BLOCK):
                block = by_position[k : k + _BLOCK]
                for start, is_minus, order, bits in zip(
                    starts[block].tolist(),
                    minus[block].tolist(),
                    which[block].tolist(),
                    scores[block].tolist(),
                ):
                    motif, (worst, best) = motifs[order], ranges[order]
                    yield {"chrom": w.record, "start": start, "end": start + len(motif), "motif": motif.name,
                           "score": round((bits - worst) / (best - worst), 4), "strand": "-" if is_minus else "+",
                           "bits": round(bits, 3), "matrix_id": motif.matrix_id}  # fmt: skip
            del starts, minus, which, scores, by_position
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
