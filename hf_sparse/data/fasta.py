"""FASTA reading: plain or gzip, multi-record, streaming or all at once.

Rules (exact):

- Compression is detected from the content (gzip magic bytes ``1f 8b``), not from the file name, so a ``.gz``
  file and a plain file both work under any name.
- A record starts at a line beginning with ``>``; its name is the rest of that line with surrounding whitespace
  removed (the whole description, e.g. ``"NC_000913.3 Escherichia coli ..."``; take ``name.split()[0]`` for the
  identifier). Bytes of a header that are not UTF-8 (a Latin-1 description) are read as U+FFFD.
- The sequence is the concatenation of the following lines up to the next header, each with surrounding
  whitespace removed. Case and characters are kept as they are (no validation of the alphabet here: the tokenizer
  and the motif scanner check what they consume), but bytes that are not UTF-8 raise ``ValueError`` naming the
  file and the line.
- Blank lines are skipped anywhere. A record may have an empty sequence. An empty file has no records.
- A non-blank line before the first header raises ``ValueError`` naming the file and the line number.
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterator
from typing import IO

PathLike = str | os.PathLike

_GZIP_MAGIC = b"\x1f\x8b"


def open_text(path: PathLike, errors: str = "strict") -> IO[str]:
    """Open ``path`` for reading as UTF-8 text, decompressing it if it starts with the gzip magic bytes;
    ``errors`` as for :func:`open`."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == _GZIP_MAGIC:
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors=errors)
    return open(path, encoding="utf-8", errors=errors)


def iter_fasta(path: PathLike) -> Iterator[tuple[str, str]]:
    """Yield ``(name, sequence)`` for each record of a FASTA file, one record in memory at a time."""
    with open_text(path, errors="surrogateescape") as f:  # bytes that are not UTF-8 kept, as surrogates
        name: str | None = None
        chunks: list[str] = []
        for lineno, line in enumerate(f, start=1):
            line = line.strip()
            if not line:
                continue
            if line.startswith(">"):
                if name is not None:
                    yield name, "".join(chunks)
                name = line[1:].strip().encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                chunks = []
            elif name is None:
                raise ValueError(
                    f"{os.fspath(path)}:{lineno}: sequence data before the first '>' header: {line[:40]!r}"
                )
            else:
                if not line.isascii():
                    try:
                        line.encode("utf-8")
                    except UnicodeEncodeError:
                        raise ValueError(
                            f"{os.fspath(path)}:{lineno}: a sequence line holds bytes that are not UTF-8: {line[:40]!r}"
                        ) from None
                chunks.append(line)
        if name is not None:
            yield name, "".join(chunks)


def read_fasta(path: PathLike) -> list[tuple[str, str]]:
    """All records of a FASTA file as a list of ``(name, sequence)``, in file order."""
    return list(iter_fasta(path))


__all__ = ["iter_fasta", "open_text", "read_fasta"]
