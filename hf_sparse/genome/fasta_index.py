"""Indexed FASTA: a samtools-compatible ``.fai`` index, random access to any ``[start, end)`` of any record
without loading the record, for plain and BGZF-compressed files; sequential streaming for plain gzip.

Formats (detected from the content, not the file name):

- **plain** text: random access through the ``.fai``.
- **BGZF** (``bgzip``): random access through the ``.fai`` (uncompressed offsets, as samtools writes them)
  and the ``.gzi`` block index (read when present, else built from the block headers; see :mod:`.bgzf`).
- **plain gzip** (not BGZF): a gzip stream cannot be entered in the middle, so :meth:`FastaFile.fetch`
  raises; :meth:`FastaFile.iter_chunks` (all that a genome scan needs) streams it. Recompress with
  ``bgzip`` for random access.

An existing ``.fai`` (``<path>.fai`` or ``index_path``) no older than the FASTA is used, as samtools
does, once a few reads show that it fits the file (a FASTA copied over with its old time stamp, by
``cp -p``, ``rsync -a``, ``tar x`` or ``wget``, keeps an older version's index "fresh"): its last record
ends where the file does (but for line ends), its first and last records start right after their header
line, and, for BGZF, the ``.gzi`` agrees with the blocks at its first and last entries. An index that does
not fit is rebuilt, with a warning naming it and what does not fit; an empty ``.fai`` is an error. A
missing or older index is built in one pass that also checks the file (below); with ``write_index=True``
a built index is saved. Validation rules (``ValueError`` naming the file and the 1-based line):

- the file has at least one record; nothing but blank lines before the first ``>`` header;
- a header names the record (``>name description``: the name is the first word) and names are unique;
- sequence lines hold only IUPAC nucleotide codes (``ACGTN`` and ``RYSWKMBDHV``, either case);
- within a record every line has the same length except the last, which may be shorter (the rule that makes
  ``.fai`` offsets computable); blank lines only at the end of a record;
- lines end in LF or CRLF, alike within a record: a CR not followed by LF (old Mac line endings) is an error;
- a compressed file must be whole: a gzip stream cut short or corrupt, or a BGZF file without its
  end-of-file block (cut at a block boundary, which would otherwise read as a shorter genome), is an error
  naming the file.

Lines are read in pieces of at most :data:`PIECE` bytes, so a record on one line (an unwrapped FASTA) is
never held whole either.

Coordinates are 0-based, half-open; sequences come back with their case as in the file.
"""

from __future__ import annotations

import contextlib
import gzip
import numbers
import os
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from ..utils.io import atomic_write
from .bgzf import BgzfReader, build_gzi, check_eof, is_bgzf, read_gzi, uncompressed_size, write_gzi

PathLike = str | os.PathLike

_VALID = b"ACGTNRYSWKMBDHVacgtnryswkmbdhv"
_NEWLINES = b"\r\n"
DEFAULT_CHUNK = 1 << 20  # bases per chunk when streaming
PIECE = 1 << 20  # bytes read at once when indexing or streaming: a line of any length is read in pieces


@dataclass(frozen=True)
class FaiRecord:
    """One line of a ``.fai``: name, length in bases, byte offset of the first base, bases per line,
    bytes per line (newline included)."""

    name: str
    length: int
    offset: int
    line_bases: int
    line_bytes: int

    def byte_offset(self, position: int) -> int:
        """Byte offset (uncompressed) of base ``position`` of this record."""
        if self.line_bases == 0:
            return self.offset
        return self.offset + (position // self.line_bases) * self.line_bytes + position % self.line_bases


def _check_path(path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such FASTA file: {os.fspath(path)!r}")
    return os.fspath(path)


def _bad_character(line: bytes, where: str, lineno: int, column: int = 0) -> ValueError:
    col = next(i for i, c in enumerate(line) if c not in _VALID)
    return ValueError(
        f"{where}:{lineno}: invalid character {chr(line[col])!r} at column {column + col + 1} of a sequence "
        "line (allowed: IUPAC nucleotide codes ACGTN RYSWKMBDHV, either case)"
    )


def _line_pieces(
    stream: IO[bytes], where: str, piece: int
) -> Iterator[tuple[int, int, int, bytes, bytes | None]]:
    """``(lineno, offset, column, data, eol)`` for every piece of at most ``piece`` bytes of every line:
    ``data`` starts at byte ``offset`` of the stream and ``column`` of its line; ``eol`` is None on all
    but a line's last piece, there its line end (``b"\\n"``, ``b"\\r\\n"``, or ``b""`` at the end of the
    file). ``ValueError`` naming ``where`` and the line for a CR not followed by LF."""
    lineno, offset, column = 1, 0, 0
    while True:
        raw = stream.readline(piece)
        if raw[-1:] == b"\r":
            raw += stream.read(1)  # a CRLF cut between two pieces
        if raw[-1:] == b"\n":
            eol = b"\r\n" if raw[-2:-1] == b"\r" else b"\n"
            data = raw[: -len(eol)]
        elif raw:
            eol, data = None, raw
        else:
            if column:  # the last line has no line end
                yield lineno, offset, column, b"", b""
            return
        if b"\r" in data:
            raise ValueError(
                f"{where}:{lineno}: carriage return not followed by a newline (old Mac line endings?); "
                "convert the file to LF line endings, e.g. tr '\\r' '\\n'"
            )
        yield lineno, offset, column, data, eol
        offset += len(raw)
        if eol is None:
            column += len(raw)
        else:
            lineno, column = lineno + 1, 0


def parse_lines(
    stream: IO[bytes], where: str, piece: int = PIECE
) -> Iterator[tuple[str, object, int, int, int]]:
    """Check a FASTA byte stream line by line, reading at most ``piece`` bytes at once, and yield its events:
    ``("record", name, lineno, offset after the header line, 0)`` and ``("bases", bases, lineno, offset,
    line_bytes)`` for each piece of a sequence line, ``line_bytes`` being 0 but on the line's last piece:
    there the bytes of the whole line with its newline (one newline byte where the file's last line has
    none, as samtools counts). ``ValueError`` naming ``where`` and the line on anything the module
    docstring rules out."""
    names = set()
    name, line_bases, line_bytes, short, blank = None, 0, 0, False, False
    header, n, lineno = None, 0, 0  # the header line read so far (None on others); bases of the line so far
    for lineno, offset, column, data, eol in _line_pieces(stream, where, piece):
        if column == 0:  # a line starts
            n = 0
            if data[:1] == b">":
                header = bytearray()
            elif eol is not None and not data.strip():
                if data:
                    raise ValueError(f"{where}:{lineno}: line of only whitespace")
                blank = name is not None
                continue
        if header is not None:
            header += data
            if eol is None:
                continue
            words = header[1:].split()
            if not words:
                raise ValueError(f"{where}:{lineno}: header without a record name")
            name = words[0].decode("utf-8", errors="replace")
            if name in names:
                raise ValueError(f"{where}:{lineno}: duplicate record name {name!r}")
            names.add(name)
            header, line_bases, line_bytes, short, blank = None, 0, 0, False, False
            yield "record", name, lineno, offset + len(data) + len(eol), 0
            continue
        if name is None:
            raise ValueError(f"{where}:{lineno}: sequence data before the first '>' header: {data[:40]!r}")
        if data.translate(None, _VALID):
            raise _bad_character(data, where, lineno, column)
        if blank:
            raise ValueError(f"{where}:{lineno}: blank line inside record {name!r} (only allowed at its end)")
        n += len(data)
        if eol is None:
            yield "bases", data, lineno, offset, 0
            continue
        nbytes = column + len(data) + (len(eol) or 1)
        if line_bases == 0:
            line_bases, line_bytes = n, nbytes
        elif not short and n == line_bases and eol and nbytes != line_bytes:
            here, first = ("CRLF", "LF") if eol == b"\r\n" else ("LF", "CRLF")
            raise ValueError(
                f"{where}:{lineno}: record {name!r} mixes line endings ({here} here, {first} on its first "
                "line); all lines must end alike for the index (convert the file, e.g. with dos2unix)"
            )
        elif short:  # the line before was shorter than the first, yet not the record's last
            short_line, short_n = short
            raise ValueError(
                f"{where}:{short_line}: record {name!r} has lines of different lengths ({short_n} bases here, "
                f"{line_bases} on its first line); all lines but the last must be equally long for the index"
            )
        elif n > line_bases:
            raise ValueError(
                f"{where}:{lineno}: record {name!r} has lines of different lengths ({n} bases here, "
                f"{line_bases} on its first line); all lines but the last must be equally long for the index"
            )
        short = (lineno, n) if n < line_bases else False
        yield "bases", data, lineno, offset, nbytes
    if not names:
        raise ValueError(f"{where}: no FASTA records ({'empty file' if lineno == 0 else 'no > header'})")


def build_fai(stream: IO[bytes], where: str, piece: int = PIECE) -> list[FaiRecord]:
    """The ``.fai`` records of a FASTA byte stream (validated as :func:`parse_lines` does)."""
    records, name, length, first, line_bases, line_bytes = [], None, 0, 0, 0, 0
    for kind, value, _, offset, nbytes in parse_lines(stream, where, piece):
        if kind == "record":
            if name is not None:
                records.append(FaiRecord(name, length, first, line_bases, line_bytes))
            # a blank line between a header and its bases is an error: the first base follows the header
            name, length, first, line_bases, line_bytes = value, 0, offset, 0, 0
            continue
        length += len(value)
        if nbytes and not line_bases:  # the end of the record's first line
            line_bases, line_bytes = length, nbytes
    records.append(FaiRecord(name, length, first, line_bases, line_bytes))
    return records


def read_fai(path: PathLike) -> list[FaiRecord]:
    """Records of a ``.fai`` file (5 tab-separated columns, at least one line); ``ValueError`` naming file and
    line otherwise."""
    records = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 5:
                raise ValueError(
                    f"{os.fspath(path)}:{lineno}: expected 5 tab-separated fields, got {len(fields)}"
                )
            try:
                records.append(FaiRecord(fields[0], *(int(x) for x in fields[1:])))
            except ValueError:
                raise ValueError(
                    f"{os.fspath(path)}:{lineno}: fields 2-5 must be integers: {line!r}"
                ) from None
    if not records:
        raise ValueError(
            f"{os.fspath(path)}: empty index (no records; an interrupted samtools faidx?); delete it to rebuild it"
        )
    return records


def write_fai(records: list[FaiRecord], path: PathLike) -> None:
    """Write ``records`` as a samtools ``.fai``, atomically (a partial index would be trusted by the next run)."""
    atomic_write(
        path, "".join(f"{r.name}\t{r.length}\t{r.offset}\t{r.line_bases}\t{r.line_bytes}\n" for r in records)
    )


@contextlib.contextmanager
def _decompressing(path: str) -> Iterator[None]:
    """A gzip stream of ``path`` cut short or corrupt: one ``ValueError`` naming the file, not a raw
    ``EOFError``/``zlib.error``/``gzip.BadGzipFile``."""
    try:
        yield
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise ValueError(f"{path}: truncated or corrupt gzip file ({e})") from e


def _open_stream(path: str, kind: str) -> IO[bytes]:
    return gzip.open(path, "rb") if kind in ("gzip", "bgzf") else open(path, "rb")


def _is_fresh(index: str, path: str) -> bool:
    return os.path.isfile(index) and os.path.getmtime(index) >= os.path.getmtime(path)


def _data_end(rec: FaiRecord) -> int:
    """Byte offset (uncompressed) just past the last base of ``rec`` (its offset for an empty record)."""
    return rec.byte_offset(rec.length - 1) + 1 if rec.length else rec.offset


class FastaFile:
    """A FASTA file (plain, BGZF or gzip; one or many records) read through its index.

    Args:
        path: the FASTA file.
        index_path: the ``.fai`` to read or write (default ``<path>.fai``).
        write_index: save a built ``.fai`` (and, for BGZF, ``<path>.gzi``) for the next run; by default an
            index that is missing, older than the file, or does not fit it is built in memory only.

    Attributes:
        kind: ``"plain"``, ``"bgzf"`` or ``"gzip"``.
        records: the :class:`FaiRecord` of every record, in file order.

    Example::

        fa = FastaFile("genome.fa.gz")                   # bgzip'ed: random access
        fa.fetch("chr22", 20_000_000, 20_000_100)         # 100 bases, the record is not loaded
        for name, start, bases in fa.iter_chunks():       # the whole genome, 1 Mb at a time
            ...
    """

    def __init__(self, path: PathLike, index_path: PathLike | None = None, write_index: bool = False):
        self.path = _check_path(path)
        with open(self.path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        self.kind = ("bgzf" if is_bgzf(self.path) else "gzip") if gz else "plain"
        if self.kind == "bgzf":
            check_eof(self.path)
        fai = os.fspath(index_path) if index_path is not None else self.path + ".fai"
        self._reader, size = None, None  # size: uncompressed bytes
        if self.kind == "bgzf":
            gzi, blocks = self.path + ".gzi", None
            if _is_fresh(gzi, self.path):
                blocks = read_gzi(gzi)
                try:
                    size = uncompressed_size(self.path, blocks)
                except ValueError as e:
                    self._rebuilding(gzi, str(e).removeprefix(f"{self.path}: "), write_index)
                    blocks = None
            if blocks is None:
                blocks = build_gzi(self.path)
                size = uncompressed_size(self.path, blocks)
                if write_index:
                    write_gzi(blocks, gzi)
            self._reader = BgzfReader(self.path, blocks)
        elif self.kind == "plain":
            size = os.path.getsize(self.path)
            self._reader = open(self.path, "rb")
        try:
            self.records = None
            if self.kind != "gzip" and _is_fresh(fai, self.path):
                self.records = read_fai(fai)
                misfit = self._misfit(self.records, size)
                if misfit:
                    self._rebuilding(fai, misfit, write_index)
                    self.records = None
            if self.records is None:
                with _open_stream(self.path, self.kind) as stream, _decompressing(self.path):
                    self.records = build_fai(stream, self.path)
                if write_index and self.kind != "gzip":
                    write_fai(self.records, fai)
        except BaseException:
            self.close()
            raise
        self._by_name = {r.name: r for r in self.records}

    def _rebuilding(self, index: str, problem: str, write_index: bool) -> None:
        warnings.warn(
            f"{index} does not fit {self.path} ({problem}): an index of another version of the file (copied "
            "with its old time stamp?) or cut short; it is rebuilt"
            + (" and saved" if write_index else " in memory (write_index=True, --write-index, saves it)"),
            stacklevel=3,
        )

    def _misfit(self, records: list[FaiRecord], size: int) -> str | None:
        """Why an existing ``.fai`` cannot be this file's index, or None. Cheap checks (a few reads): entries
        in file order with possible line sizes; the last record's bases end where the file does (but for its
        last newline and blank lines); the first and last records start right after their header line."""
        end = 0
        for rec in records:
            if rec.length and (rec.line_bases < 1 or rec.line_bytes - rec.line_bases not in (1, 2)):
                return f"record {rec.name!r} has {rec.line_bases} bases in lines of {rec.line_bytes} bytes"
            if rec.length < 0 or rec.offset < end + 3:  # 3: the shortest header line, ">a\n"
                return f"record {rec.name!r} starts at byte {rec.offset}, inside the record before it"
            end = _data_end(rec)
        last = records[-1]
        if end > size:
            return (
                f"its last record {last.name!r} ends at byte {end}, past the end of the file ({size} bytes)"
            )
        while end < size:  # what follows the last base: line ends (a final newline, blank lines) only
            tail = self._read(end, min(size - end, PIECE))
            if not tail or tail.translate(None, _NEWLINES):
                return (
                    f"its last record {last.name!r} ends at byte {end} but the file goes on to byte {size}: "
                    "records missing or cut short"
                )
            end += len(tail)
        for rec in {records[0].name: records[0], last.name: last}.values():
            # the bytes before the record's first base, back to the start of its header line
            start, before = rec.offset, b""
            while start > 0 and b"\n" not in before[:-1]:
                step = min(max(256, 2 * len(before)), start)
                start -= step
                before = self._read(start, step) + before
            header = before[:-1].rsplit(b"\n", 1)[-1].rstrip(b"\r")
            words = header[1:].split()
            if (
                before[-1:] != b"\n"
                or header[:1] != b">"
                or not words
                or words[0].decode("utf-8", errors="replace") != rec.name
            ):
                return f"no header line '>{rec.name}' right before record {rec.name!r} at byte {rec.offset}"
        return None

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.records]

    def length(self, name: str) -> int:
        """Length in bases of record ``name`` (``KeyError`` naming the known records otherwise)."""
        return self._record(name).length

    def _record(self, name: str) -> FaiRecord:
        if name not in self._by_name:
            known = self.names
            raise KeyError(
                f"{self.path}: no record {name!r}; records: {known[:10]}{' ...' if len(known) > 10 else ''}"
            )
        return self._by_name[name]

    def _read(self, offset: int, size: int) -> bytes:
        if self.kind == "bgzf":
            return self._reader.read(offset, size)
        self._reader.seek(offset)
        return self._reader.read(size)

    def fetch(self, name: str, start: int = 0, end: int | None = None) -> str:
        """Bases ``[start, end)`` of record ``name`` (``end`` defaults to the record's length), reading only
        the bytes that hold them (any integers, numpy's included). ``ValueError`` for a plain gzip file or a
        range outside the record."""
        rec = self._record(name)
        end = rec.length if end is None else end
        for arg, value in (("start", start), ("end", end)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{arg} must be an int, got {type(value).__name__}: {value!r}")
        start, end = int(start), int(end)
        if not 0 <= start <= end <= rec.length:
            raise ValueError(f"range [{start}, {end}) is outside record {name!r} of length {rec.length}")
        if self.kind == "gzip":
            raise ValueError(
                f"{self.path} is gzip but not BGZF, so it has no random access; stream it with iter_chunks() or "
                "recompress it with `bgzip` (zcat file.gz | bgzip > file.bgz)"
            )
        if start == end:
            return ""
        first, last = rec.byte_offset(start), rec.byte_offset(end - 1) + 1
        raw = self._read(first, last - first)
        bases = raw.translate(None, _NEWLINES)
        if len(bases) != end - start or bases.translate(None, _VALID):
            bad = next((i for i, c in enumerate(bases) if c not in _VALID), len(bases))
            raise ValueError(
                f"{self.path}: record {name!r} does not match its index near base {start + bad} "
                f"(byte {first + bad}): stale or foreign .fai, or an invalid character; delete the .fai to rebuild it"
            )
        return bases.decode("ascii")

    def iter_chunks(self, size: int = DEFAULT_CHUNK) -> Iterator[tuple[str, int, str]]:
        """``(record name, start, bases)`` covering every record in file order, at most ``size`` bases each
        (records of length 0 yield nothing). Indexed files are read through :meth:`fetch`; plain gzip is
        decompressed once, sequentially, with the checks of :func:`parse_lines`."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        if self.kind != "gzip":
            for rec in self.records:
                for start in range(0, rec.length, size):
                    yield rec.name, start, self.fetch(rec.name, start, min(start + size, rec.length))
            return
        with _open_stream(self.path, "gzip") as stream, _decompressing(self.path):
            name, start, held = None, 0, bytearray()  # held: fewer than size + PIECE bases
            for kind, value, _, _, _ in parse_lines(stream, self.path):
                if kind == "record":
                    if held:
                        yield name, start, held.decode("ascii")
                    name, start, held = value, 0, bytearray()
                elif kind == "bases":
                    held += value
                    if len(held) >= size:
                        cut = len(held) - len(held) % size
                        for k in range(0, cut, size):
                            yield name, start + k, held[k : k + size].decode("ascii")
                        start += cut
                        del held[:cut]
            if held:
                yield name, start, held.decode("ascii")


class MemoryFasta:
    """Records held as strings, with the reading interface of :class:`FastaFile` (``records``, ``fetch``,
    ``iter_chunks``): scanning a sequence "as one string" goes through the same code as a file."""

    kind = "memory"

    def __init__(self, records: list[tuple[str, str]]):
        if not records:
            raise ValueError("records must hold at least one (name, sequence) pair")
        self._seqs = {}
        for name, seq in records:
            if not isinstance(name, str) or not isinstance(seq, str):
                raise TypeError(
                    f"records must be (str, str) pairs, got ({type(name).__name__}, {type(seq).__name__})"
                )
            if name in self._seqs:
                raise ValueError(f"duplicate record name {name!r}")
            if seq.encode("utf-8").translate(None, _VALID):
                valid = _VALID.decode("ascii")
                at = next(i for i, c in enumerate(seq) if c not in valid)
                raise ValueError(f"record {name!r}: invalid character {seq[at]!r} at position {at}")
            self._seqs[name] = seq
        self.records = [FaiRecord(n, len(s), 0, len(s), len(s) + 1) for n, s in self._seqs.items()]
        self.names = list(self._seqs)

    def fetch(self, name: str, start: int = 0, end: int | None = None) -> str:
        seq = self._seqs[name]
        end = len(seq) if end is None else end
        if not 0 <= start <= end <= len(seq):
            raise ValueError(f"range [{start}, {end}) is outside record {name!r} of length {len(seq)}")
        return seq[start:end]

    def iter_chunks(self, size: int = DEFAULT_CHUNK) -> Iterator[tuple[str, int, str]]:
        for name, seq in self._seqs.items():
            for start in range(0, len(seq), size):
                yield name, start, seq[start : start + size]


__all__ = ["FaiRecord", "FastaFile", "MemoryFasta", "build_fai", "parse_lines", "read_fai", "write_fai"]
