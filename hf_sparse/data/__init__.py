"""Data readers every task shares: FASTA (plain or gzipped) and text files.

Each task's own data preparation lives in its folder (``hf_sparse/tasks/<task>/data.py``).
"""

from .fasta import iter_fasta, open_text, read_fasta

__all__ = ["iter_fasta", "open_text", "read_fasta"]
