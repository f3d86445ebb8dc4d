"""BGZF (blocked gzip, as written by ``bgzip``): detection, block index (``.gzi``), random reads, writing.

A BGZF file is a series of gzip members of at most 64 KiB each whose header carries a ``BC`` extra field
holding the member's size, followed by an empty end-of-file member. Any gzip reader decompresses it; the
block sizes make random access possible: the ``.gzi`` index (htslib's format, little-endian ``uint64``:
the number of entries, then ``(compressed offset, uncompressed offset)`` of every block start but the
first, which is ``(0, 0)``) maps an uncompressed offset to the block that holds it. When no ``.gzi`` is
there, one is built by walking the block headers (no decompression: each header gives the block size
and each block ends with its uncompressed size). A file that does not end with the end-of-file member was
cut short (:func:`check_eof`).
"""

from __future__ import annotations

import bisect
import itertools
import os
import struct
import zlib
from collections.abc import Iterator

from ..utils.io import atomic_write

PathLike = str | os.PathLike

#: The empty block ``bgzip`` appends to every file.
EOF_BLOCK = bytes.fromhex("1f8b08040000000000ff0600424302001b0003000000000000000000")
MAX_BLOCK_DATA = 0xFF00  # uncompressed bytes per block, as bgzip writes them
_HEADER = struct.Struct("<4BI2BH")  # magic1, magic2, CM, FLG, MTIME, XFL, OS, XLEN


def _block_size(head: bytes, where: str) -> tuple[int, int]:
    """(total block size in bytes, header length) from the first bytes of a BGZF block."""
    if len(head) < _HEADER.size:
        raise ValueError(f"{where}: truncated BGZF block header")
    m1, m2, cm, flg, _, _, _, xlen = _HEADER.unpack_from(head)
    if (m1, m2, cm) != (0x1F, 0x8B, 8) or not flg & 4:
        raise ValueError(f"{where}: not a BGZF block (gzip member without the extra field)")
    extra = head[_HEADER.size : _HEADER.size + xlen]
    i = 0
    while i + 4 <= len(extra):
        si1, si2, slen = extra[i], extra[i + 1], struct.unpack_from("<H", extra, i + 2)[0]
        if (si1, si2, slen) == (66, 67, 2) and i + 6 <= len(extra):
            return struct.unpack_from("<H", extra, i + 4)[0] + 1, _HEADER.size + xlen
        i += 4 + slen
    raise ValueError(f"{where}: gzip member without the BGZF 'BC' field")


def is_bgzf(path: PathLike) -> bool:
    """Whether ``path`` starts with a BGZF block (a plain gzip file or a text file gives False)."""
    with open(path, "rb") as f:
        head = f.read(64)
    try:
        _block_size(head, os.fspath(path))
    except ValueError:
        return False
    return True


def check_eof(path: PathLike) -> None:
    """``ValueError`` naming ``path`` when a BGZF file does not end with the end-of-file block (a download or
    copy cut short: the blocks before the cut read as a shorter file; htslib warns, we stop)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(f.tell() - len(EOF_BLOCK), 0))
        if f.read() != EOF_BLOCK:
            raise ValueError(
                f"{os.fspath(path)}: truncated: the BGZF end-of-file marker is missing (an interrupted download "
                "or copy?); fetch or compress the file again"
            )


def iter_blocks(path: PathLike, start: int = 0) -> Iterator[tuple[int, int]]:
    """``(compressed offset, uncompressed size)`` of every block from the one at byte ``start`` (the first by
    default), from the headers and size trailers only."""
    where = os.fspath(path)
    with open(path, "rb") as f:
        offset = start
        while True:
            f.seek(offset)
            head = f.read(64)
            if not head:
                return
            size, _ = _block_size(head, f"{where} (byte {offset})")
            f.seek(offset + size - 4)
            tail = f.read(4)
            if len(tail) != 4:
                raise ValueError(f"{where} (byte {offset}): BGZF block runs past the end of the file")
            yield offset, struct.unpack("<I", tail)[0]
            offset += size


def build_gzi(path: PathLike) -> list[tuple[int, int]]:
    """The block index of a BGZF file: ``(compressed offset, uncompressed offset)`` of every block start."""
    entries, uoffset = [], 0
    for coffset, usize in iter_blocks(path):
        entries.append((coffset, uoffset))
        uoffset += usize
    return entries


def uncompressed_size(path: PathLike, index: list[tuple[int, int]]) -> int:
    """Uncompressed size of the BGZF file ``path``: the last entry of its block ``index`` (:func:`build_gzi`,
    :func:`read_gzi`) plus the sizes of the blocks from there on (their trailers only). Checks on the way that
    the index fits the file, cheaply: entries in increasing order, the second where the first block ends
    (holding as many bytes as it does), the last at a block start; ``ValueError`` saying what does not fit
    (a ``.gzi`` of another version of the file)."""
    where = os.fspath(path)
    if any(b[0] <= a[0] or b[1] < a[1] for a, b in zip(index, index[1:])) or index[:1] != [(0, 0)]:
        raise ValueError(f"{where}: block index entries not in increasing order from (0, 0)")
    head = list(itertools.islice(iter_blocks(path), 2))
    if len(index) > 1 and (len(head) < 2 or index[1] != (head[1][0], head[0][1])):
        raise ValueError(
            f"{where}: the block index puts the second block at {index[1]}, the file at "
            f"{(head[1][0], head[0][1]) if len(head) > 1 else 'none'} (compressed, uncompressed offset)"
        )
    coffset, uoffset = index[-1]
    if coffset >= os.path.getsize(path):
        raise ValueError(f"{where}: the block index has a block at byte {coffset}, past the end of the file")
    try:
        return uoffset + sum(size for _, size in iter_blocks(path, coffset))
    except ValueError as e:
        raise ValueError(
            f"{where}: the block index's last entry {index[-1]} is not a block start ({e})"
        ) from e


def read_gzi(path: PathLike) -> list[tuple[int, int]]:
    """Entries of a ``.gzi`` file (htslib format), with the implicit first block ``(0, 0)`` put back."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{os.fspath(path)}: too short for a .gzi index ({len(data)} bytes)")
    (n,) = struct.unpack_from("<Q", data)
    if len(data) != 8 + 16 * n:
        raise ValueError(f"{os.fspath(path)}: .gzi says {n} entries but holds {(len(data) - 8) / 16:g}")
    pairs = struct.unpack_from(f"<{2 * n}Q", data, 8)
    return [(0, 0), *zip(pairs[::2], pairs[1::2])]


def write_gzi(entries: list[tuple[int, int]], path: PathLike) -> None:
    """Write ``entries`` (as :func:`build_gzi` returns them) in htslib's ``.gzi`` format, atomically."""
    rest = [e for e in entries if e != (0, 0)]
    atomic_write(path, struct.pack("<Q", len(rest)) + b"".join(struct.pack("<QQ", c, u) for c, u in rest))


def write_bgzf(data: bytes, path: PathLike, level: int = 6) -> None:
    """Compress ``data`` into a BGZF file at ``path`` (what ``bgzip`` writes: blocks of 65280 bytes, then
    the empty end-of-file block)."""
    with open(path, "wb") as f:
        for i in range(0, len(data), MAX_BLOCK_DATA):
            chunk = data[i : i + MAX_BLOCK_DATA]
            comp = zlib.compressobj(level, zlib.DEFLATED, -15)
            body = comp.compress(chunk) + comp.flush()
            size = 18 + len(body) + 8  # header with its 6-byte extra field, deflate data, CRC32 + ISIZE
            f.write(_HEADER.pack(0x1F, 0x8B, 8, 4, 0, 0, 0xFF, 6) + b"BC" + struct.pack("<HH", 2, size - 1))
            f.write(body + struct.pack("<II", zlib.crc32(chunk), len(chunk)))
        f.write(EOF_BLOCK)


class BgzfReader:
    """Random reads of uncompressed bytes from a BGZF file through its block index.

    Args:
        path: the BGZF file.
        index: ``(compressed offset, uncompressed offset)`` of the block starts (:func:`build_gzi` or
            :func:`read_gzi`); built from the headers when None.
    """

    def __init__(self, path: PathLike, index: list[tuple[int, int]] | None = None):
        self.path = os.fspath(path)
        self.index = sorted(index if index is not None else build_gzi(path))
        self._uoffsets = [u for _, u in self.index]
        self._file = open(path, "rb")
        self._cached: tuple[int, bytes, int] | None = None  # (offset, data, size) of the last block read

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _block(self, coffset: int) -> tuple[bytes, int]:
        """(uncompressed data, compressed size) of the block at ``coffset``; ``(b"", 0)`` past the end."""
        if self._cached is not None and self._cached[0] == coffset:
            return self._cached[1], self._cached[2]
        self._file.seek(coffset)
        head = self._file.read(64)
        if not head:
            return b"", 0
        size, header_len = _block_size(head, f"{self.path} (byte {coffset})")
        self._file.seek(coffset)
        raw = self._file.read(size)
        try:
            data = zlib.decompress(raw[header_len:-8], -15)
        except zlib.error as e:
            raise ValueError(f"{self.path} (byte {coffset}): corrupt or truncated BGZF block ({e})") from e
        self._cached = (coffset, data, size)
        return data, size

    def read(self, offset: int, size: int) -> bytes:
        """``size`` uncompressed bytes from uncompressed ``offset`` (fewer at the end of the file)."""
        k = max(bisect.bisect_right(self._uoffsets, offset) - 1, 0)
        coffset, uoffset = self.index[k]
        out, skip = [], offset - uoffset
        while size > 0:
            data, csize = self._block(coffset)
            if csize == 0:
                break
            piece = data[skip : skip + size]
            out.append(piece)
            size -= len(piece)
            skip = max(0, skip - len(data))
            coffset += csize
        return b"".join(out)


__all__ = [
    "BgzfReader",
    "EOF_BLOCK",
    "build_gzi",
    "check_eof",
    "is_bgzf",
    "iter_blocks",
    "read_gzi",
    "uncompressed_size",
    "write_bgzf",
    "write_gzi",
]
