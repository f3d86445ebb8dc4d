"""Synthetic motif-labelling data: a seeded generator that plants PWM-sampled motif instances into
background DNA, and the recipes' ``datasets.Dataset`` of its examples."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...data.fasta import PathLike, read_fasta
from ...tokenization_dna import reverse_complement
from ...utils.validation import check_fraction, check_int
from .motifs import Motif, base_codes, builtin_motifs, check_pseudocount
from .scanning import bio_label_names, spans_to_tags


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
        self.pseudocount = check_pseudocount(pseudocount)
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
            codes = base_codes(seq)
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
    the motifs and the generator's arguments, with ``background_fasta`` the file's absolute path, size
    and modification time, and reused by the next run)."""
    from datasets import Dataset

    SyntheticMotifGenerator(list(motifs), **kwargs)  # argument errors here, not inside the generator
    config_name = None
    if kwargs.get("background_fasta") is not None:
        # the cache key includes the file's size and time, so an edited background is read again
        path = os.path.abspath(os.fspath(kwargs["background_fasta"]))
        stat = os.stat(path)
        kwargs = {**kwargs, "background_fasta": path}
        config_name = f"background-{stat.st_size}-{stat.st_mtime_ns}"
    params = {"motifs": [m.to_dict() for m in motifs], "kwargs": kwargs}
    return Dataset.from_generator(
        _synthetic_rows, features=_motif_features(), gen_kwargs={"params": params, "start": start, "n": n},
        config_name=config_name,
    )  # fmt: skip


__all__ = ["SyntheticMotifGenerator", "generate_motif_dataset", "synthetic_dataset"]
