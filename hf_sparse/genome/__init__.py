"""Genome-scale motif scanning: an indexed FASTA reader (plain, BGZF, gzip), window streaming that skips
runs of N, a model scanner that merges overlapping windows exactly once, a vectorised PWM scan, and
BED/GFF3 writers. ``scripts/scan_genome.py`` is the command line."""

from .fasta_index import FaiRecord, FastaFile, MemoryFasta, build_fai, read_fai, write_fai
from .model_scan import GenomeScanner, load_scanner

__all__ = [
    "FaiRecord",
    "FastaFile",
    "GenomeScanner",
    "MemoryFasta",
    "build_fai",
    "load_scanner",
    "read_fai",
    "write_fai",
]
