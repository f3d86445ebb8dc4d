"""The motif recipes' data from real sequences: FASTA records as a ``datasets.Dataset``, labelled by
scanning (:func:`scan_rows`, with dinucleotide-shuffled negatives), and the row check of sequence
classification files.

The motif code is split by what it owns: :mod:`.motifs` (``Motif``, JASPAR/TRANSFAC readers, the
shipped motifs), :mod:`.scanning` (PWM scan, BIO labels), :mod:`.synthetic` (the synthetic data
generator); this module re-exports their public names, so ``hf_sparse.tasks.motif.data`` stays the
one import path of the motif data API.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...data.fasta import PathLike, iter_fasta
from .motifs import (
    BASES,
    Motif,
    builtin_motifs,
    encode_sequence,
    read_jaspar,
    read_motifs,
    read_transfac,
)
from .scanning import bio_label_names, label_sequence, scan, spans_to_tags
from .synthetic import SyntheticMotifGenerator, generate_motif_dataset, synthetic_dataset


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
    """A sequence-classification row: ``sequence`` a str, ``label`` an int class id (a whole float too: a float
    in another row of the file makes the whole column float, so ``1`` arrives as ``1.0``)."""
    if not isinstance(row.get("sequence"), str):
        raise ValueError(f"{where}: field 'sequence' must be a str, got {row.get('sequence')!r:.60}")
    label = row.get("label")
    if isinstance(label, float) and label.is_integer():
        return
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
