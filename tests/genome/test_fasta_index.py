"""Indexed FASTA: samtools-compatible .fai, random access in plain and BGZF files, streamed gzip, and
clear errors (file and line) for FASTA the index cannot describe."""

import gzip
import io
import os
import random
import re
import shutil
import struct
import subprocess
import warnings

import numpy as np
import pytest

from hf_sparse.data.fasta import read_fasta
from hf_sparse.genome import fasta_index
from hf_sparse.genome.bgzf import BgzfReader, build_gzi, is_bgzf, iter_blocks, read_gzi, write_bgzf, write_gzi
from hf_sparse.genome.fasta_index import (
    FaiRecord,
    FastaFile,
    MemoryFasta,
    build_fai,
    parse_lines,
    read_fai,
    write_fai,
)


def fasta_text(records, width=7):
    lines = []
    for name, seq in records:
        lines.append(f">{name} some description")
        lines += [seq[i : i + width] for i in range(0, len(seq), width)]
    return "\n".join(lines) + "\n"


def random_records(seed=0, n=4, max_len=300):
    rng = random.Random(seed)
    return [
        (f"chr{k}", "".join(rng.choice("ACGTNacgtn") for _ in range(rng.randint(0, max_len))))
        for k in range(n)
    ]


def write_all(tmp_path, text):
    """The same FASTA as plain, gzip and BGZF files."""
    plain = tmp_path / "g.fa"
    plain.write_text(text)
    gz = tmp_path / "g.fa.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    bgz = tmp_path / "g.fa.bgz"
    write_bgzf(text.encode(), bgz)
    return {"plain": plain, "gzip": gz, "bgzf": bgz}


def test_formats_are_detected_and_stream_the_same_bases(tmp_path):
    records = random_records()
    paths = write_all(tmp_path, fasta_text(records))
    for kind, path in paths.items():
        fa = FastaFile(path)
        assert fa.kind == kind
        assert [(r.name, r.length) for r in fa.records] == [(n, len(s)) for n, s in records]
        joined = {}
        for name, start, bases in fa.iter_chunks(size=37):
            assert len(bases) <= 37 and start == len(joined.get(name, ""))
            joined[name] = joined.get(name, "") + bases
        assert joined == {n: s for n, s in records if s}


@pytest.mark.parametrize("kind", ["plain", "bgzf"])
def test_random_access_matches_the_record(tmp_path, kind):
    records = random_records(seed=1, max_len=2000)
    fa = FastaFile(write_all(tmp_path, fasta_text(records, width=61))[kind])
    rng = random.Random(2)
    for name, seq in records:
        for _ in range(30):
            a = rng.randint(0, len(seq))
            b = rng.randint(a, len(seq))
            assert fa.fetch(name, a, b) == seq[a:b]


def test_bgzf_reads_cross_blocks_and_the_gzi_round_trips(tmp_path):
    seq = "".join(random.Random(3).choice("ACGT") for _ in range(200_000))  # several 64 KiB blocks
    paths = write_all(tmp_path, fasta_text([("big", seq)], width=60))
    blocks = build_gzi(paths["bgzf"])
    assert len(blocks) > 3 and blocks[0] == (0, 0)
    write_gzi(blocks, tmp_path / "x.gzi")
    assert read_gzi(tmp_path / "x.gzi") == blocks
    fa = FastaFile(paths["bgzf"], write_index=True)
    assert os.path.isfile(str(paths["bgzf"]) + ".gzi") and os.path.isfile(str(paths["bgzf"]) + ".fai")
    for a in (0, 65_000, 65_279, 130_000, 199_990):
        assert fa.fetch("big", a, min(a + 1000, len(seq))) == seq[a : a + 1000]
    with BgzfReader(paths["bgzf"]) as r:  # the index built from the headers alone
        assert r.read(0, 10) == b">big some "
    assert is_bgzf(paths["bgzf"]) and not is_bgzf(paths["gzip"]) and not is_bgzf(paths["plain"])


def test_fai_is_samtools_compatible(tmp_path):
    text = ">a desc\nACGTA\nCG\n>b\nAAAAAA\nAAAAAA\nA\n>c\n"
    path = tmp_path / "s.fa"
    path.write_text(text)
    FastaFile(path, write_index=True)
    expected = [FaiRecord("a", 7, 8, 5, 6), FaiRecord("b", 13, 20, 6, 7), FaiRecord("c", 0, 39, 0, 0)]
    assert read_fai(str(path) + ".fai") == expected
    if shutil.which("samtools"):
        os.remove(str(path) + ".fai")
        subprocess.run(["samtools", "faidx", str(path)], check=True)
        assert read_fai(str(path) + ".fai")[:2] == expected[:2]


@pytest.mark.parametrize(
    "text, expected",
    [
        (">a\nACGT", [FaiRecord("a", 4, 3, 4, 5)]),
        (">a\r\nACGT", [FaiRecord("a", 4, 4, 4, 5)]),
        (">a\nACGTAC\nGT", [FaiRecord("a", 8, 3, 6, 7)]),
        (">a\nACGT\n>b\nAC", [FaiRecord("a", 4, 3, 4, 5), FaiRecord("b", 2, 11, 2, 3)]),
    ],
)
def test_fai_counts_a_newline_where_the_last_line_has_none(tmp_path, text, expected):
    """samtools faidx counts every sequence line's bytes plus one, newline or not."""
    path = tmp_path / "s.fa"
    path.write_bytes(text.encode())
    FastaFile(path, write_index=True)
    assert read_fai(str(path) + ".fai") == expected
    if shutil.which("samtools"):
        os.remove(str(path) + ".fai")
        subprocess.run(["samtools", "faidx", str(path)], check=True)
        assert read_fai(str(path) + ".fai") == expected


class ReadSizes:
    """A byte stream that records the size of everything read from it."""

    def __init__(self, stream, sizes):
        self.stream, self.sizes = stream, sizes

    def _seen(self, data):
        self.sizes.append(len(data))
        return data

    def readline(self, size=-1):
        return self._seen(self.stream.readline(size))

    def read(self, size=-1):
        return self._seen(self.stream.read(size))

    def __iter__(self):
        return iter(self.readline, b"")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stream.close()


@pytest.mark.parametrize("kind", ["plain", "gzip", "bgzf"])
def test_a_record_on_one_line_is_read_in_bounded_pieces(tmp_path, monkeypatch, kind):
    """An unwrapped FASTA (a record on one line) is indexed and streamed without reading a line whole."""
    n = 2 * (1 << 20) + 12_345  # over two pieces of fasta_index.PIECE bytes
    seq = np.random.default_rng(0).choice(np.frombuffer(b"ACGTN", np.uint8), n).tobytes().decode()
    text = f">big\n{seq}\n>small\nACGT\nAC\n".encode()
    path = tmp_path / f"g.fa.{kind}"
    if kind == "plain":
        path.write_bytes(text)
    elif kind == "gzip":
        path.write_bytes(gzip.compress(text, compresslevel=1))
    else:
        write_bgzf(text, path)
    sizes = []
    opened = fasta_index._open_stream
    monkeypatch.setattr(fasta_index, "_open_stream", lambda *a: ReadSizes(opened(*a), sizes))
    fa = FastaFile(path)
    assert fa.records == [FaiRecord("big", n, 5, n, n + 1), FaiRecord("small", 6, n + 13, 4, 5)]
    chunks = list(fa.iter_chunks(size=500_000))
    assert "".join(b for name, _, b in chunks if name == "big") == seq
    assert [s for name, s, _ in chunks if name == "big"] == list(range(0, n, 500_000))
    if kind != "gzip":
        assert fa.fetch("big", n - 7) == seq[-7:] and fa.fetch("small", 2, 5) == "GTA"
    assert 0 < max(sizes) <= (1 << 20) + 1  # a piece (and one byte, for a CRLF cut in two)
    assert fasta_index.PIECE == 1 << 20


@pytest.mark.parametrize(
    "text",
    [
        ">a desc\nACGTACGTAC\nACGTACGTAC\nACG\n>b\n>c x\nAAAAAAAAAAAAAAAAAAAAAAAA\n\n\n",
        ">a\r\nACGTACG\r\nACGTACG\r\nAC\r\n>bb\r\nGGGGGGGGGGGGGGGGGGGGGG\r\n",
        ">a\nACGTACGTAC\nACG",
        ">a\nACGTACGTACACGTACGTAC",
    ],
)
def test_lines_read_in_small_pieces_give_the_same_index_and_bases(text):
    data = text.encode()
    expected = build_fai(io.BytesIO(data), "x")
    bases = [v for k, v, *_ in parse_lines(io.BytesIO(data), "x") if k == "bases"]
    for piece in (1, 2, 3, 7):
        assert build_fai(io.BytesIO(data), "x", piece) == expected
        events = list(parse_lines(io.BytesIO(data), "x", piece))
        assert max(len(v) for k, v, *_ in events if k == "bases") <= piece
        assert b"".join(v for k, v, *_ in events if k == "bases") == b"".join(bases)
    with pytest.raises(ValueError, match="x:3: invalid character 'U' at column 8"):
        build_fai(io.BytesIO(b">a\nACGTACGTAC\nACGTACGU\n"), "x", 3)
    with pytest.raises(ValueError, match="x:3: record 'a' has lines of different lengths \\(5 bases here"):
        build_fai(io.BytesIO(b">a\nACGT\nACGTA\n"), "x", 2)


def test_an_index_is_written_whole_or_not_at_all(tmp_path):
    """A .fai (or .gzi) newer than its FASTA is trusted, so a failed write must not leave part of one."""
    with pytest.raises(AttributeError):
        write_fai([FaiRecord("a", 4, 3, 4, 5), None], tmp_path / "g.fa.fai")
    with pytest.raises(struct.error):
        write_gzi([(0, 0), (100, 65280), (-1, 0)], tmp_path / "g.fa.gzi")
    assert os.listdir(tmp_path) == []


def test_an_existing_index_is_used_and_a_stale_one_rebuilt(tmp_path, monkeypatch):
    path = tmp_path / "s.fa"
    path.write_text(">a\nACGT\n")
    (tmp_path / "s.fa.fai").write_text("a\t4\t3\t4\t5\n")
    os.utime(tmp_path / "s.fa", (1, 1))  # the index is newer than the file: used as samtools does
    build = fasta_index.build_fai
    monkeypatch.setattr(fasta_index, "build_fai", None)  # not rebuilt
    assert FastaFile(path).records == [FaiRecord("a", 4, 3, 4, 5)]
    monkeypatch.setattr(fasta_index, "build_fai", build)
    (tmp_path / "s.fa.fai").write_text("a\t2\t3\t4\t5\n")
    os.utime(tmp_path / "s.fa.fai", (0, 0))  # older: rebuilt
    assert FastaFile(path).records == [FaiRecord("a", 4, 3, 4, 5)]


def replace_keeping_the_index_fresh(path, text):
    """Write ``text`` (str: plain, bytes: BGZF) over ``path`` with an old time stamp, as ``cp -p``, ``rsync -a``,
    ``tar x`` or ``wget`` do: the index of the file it replaces stays newer."""
    if isinstance(text, bytes):
        write_bgzf(text, path)
    else:
        path.write_bytes(text.encode())
    os.utime(path, (1, 1))


GROWN = [("chr1", "ACGT" * 30), ("chr2", "GGCA" * 100)]  # chr2 grew from 120 bases
APPENDED = [("chr1", "ACGT" * 30), ("chr2", "GGCA" * 30), ("chrM", "TTAG" * 50)]


@pytest.mark.parametrize("kind", ["plain", "bgzf"])
@pytest.mark.parametrize(
    "new, index, misfit",
    [
        (GROWN, None, r"its last record 'chr2' ends at byte 289 but the file goes on to byte 575"),
        (APPENDED, None, r"its last record 'chr2' ends at byte 289 but the file goes on to byte 517"),
        (APPENDED[:2], "first line only", r"its last record 'chr1' ends at byte 144 but the file goes on"),
        (APPENDED[:2], "cut mid-line", r"record 'chr2' has 60 bases in lines of 6 bytes"),
        ([("chr1", "ACGT" * 30), ("chrX", "GGCA" * 30)], None, r"no header line '>chr2' right before record"),
        (
            [("chr1", "ACGT" * 30 + "A"), ("chr2", "GGCA" * 29 + "GG")],
            None,
            r"no header line '>chr2' right before",
        ),
        (
            [("chr1", "ACGT" * 30)],
            None,
            r"its last record 'chr2' ends at byte 289, past the end of the file \(145 bytes\)",
        ),
    ],
)
def test_a_fresh_index_that_does_not_fit_the_file_is_rebuilt_with_a_warning(
    tmp_path, kind, new, index, misfit
):
    """An index of another version of the FASTA (copied over with its old time stamp) or one cut short is
    noticed by its size and headers, and rebuilt (and saved with write_index) rather than read through."""
    path = tmp_path / ("g.fa" if kind == "plain" else "g.fa.bgz")
    old = fasta_text([("chr1", "ACGT" * 30), ("chr2", "GGCA" * 30)], width=60)
    replace_keeping_the_index_fresh(path, old if kind == "plain" else old.encode())
    FastaFile(path, write_index=True).close()
    fai = tmp_path / (path.name + ".fai")
    if index == "first line only":
        fai.write_text(fai.read_text().splitlines(True)[0])
    elif index == "cut mid-line":
        fai.write_text(fai.read_text()[:-2])
    text = fasta_text(new, width=60)
    replace_keeping_the_index_fresh(path, text if kind == "plain" else text.encode())
    with pytest.warns(UserWarning) as caught:  # BGZF: the .gzi does not fit either
        fa = FastaFile(path)
    expected = rf"{fai} does not fit {path} \({misfit}.*it is rebuilt in memory"
    assert any(re.match(expected, str(w.message)) for w in caught), [str(w.message) for w in caught]
    with fa:
        assert [(r.name, r.length) for r in fa.records] == [(n, len(s)) for n, s in new]
        assert {name: fa.fetch(name) for name in fa.names} == dict(new)
    with pytest.warns(UserWarning, match=r"rebuilt and saved"):
        FastaFile(path, write_index=True).close()
    assert read_fai(fai) == build_fai(io.BytesIO(text.encode()), "x")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FastaFile(path).close()  # the saved index fits


@pytest.mark.parametrize("kind", ["plain", "bgzf"])
@pytest.mark.parametrize(
    "text",
    [
        ">a desc\nACGTA\nCG\n>b\nAAAAAA\nAAAAAA\nA\n>c\n",
        ">a\nACGT\n>b\nAC",
        ">a\r\nACGTACG\r\nAC\r\n>bb " + "long description " * 40 + "\r\nGGGG\r\n\r\n\r\n",
        "\n\n>a\nACGT\n>b\nAC\n\n\n\n",
        ">a\n>b\n",
    ],
)
def test_an_index_that_fits_is_used_without_a_warning(tmp_path, monkeypatch, kind, text):
    """Line ends after the last base (none, CRLF, blank lines), long headers, empty records: the checks that
    catch a stale index accept every index of the file itself."""
    path = tmp_path / "g.fa"
    replace_keeping_the_index_fresh(path, text if kind == "plain" else text.encode())
    FastaFile(path, write_index=True).close()
    monkeypatch.setattr(fasta_index, "build_fai", None)  # not rebuilt
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with FastaFile(path) as fa:
            assert fa.records == read_fai(str(path) + ".fai")
            assert [fa.fetch(name) for name in fa.names] == [r[1] for r in read_fasta(path)]


def test_a_stale_gzi_is_rebuilt_with_a_warning(tmp_path):
    path = tmp_path / "g.fa.bgz"
    rng = random.Random(5)
    old = fasta_text([("a", "".join(rng.choices("ACGT", k=150_000)))], width=60)
    replace_keeping_the_index_fresh(path, old.encode())
    FastaFile(path, write_index=True).close()
    new = fasta_text([("a", "".join(rng.choices("ACGT", k=150_000)))], width=50)  # other block boundaries
    replace_keeping_the_index_fresh(path, new.encode())
    with pytest.warns(UserWarning) as caught:
        with FastaFile(path, write_index=True) as fa:
            assert fa.fetch("a") == "".join(new.splitlines()[1:])
    assert re.search(
        r"g\.fa\.bgz\.gzi does not fit .*the block index puts the second", str(caught[0].message)
    )
    assert re.search(r"g\.fa\.bgz\.fai does not fit .*its last record 'a' ends", str(caught[1].message))
    assert read_gzi(str(path) + ".gzi") == build_gzi(path)


def test_an_empty_fai_is_an_error_naming_it(tmp_path):
    """An empty .fai (samtools faidx killed, a full disk, touch) is not an index of no records."""
    path = tmp_path / "g.fa"
    replace_keeping_the_index_fresh(path, ">a\nACGT\n")
    (tmp_path / "g.fa.fai").write_text("")
    with pytest.raises(ValueError, match=r"g\.fa\.fai: empty index \(no records.*delete it to rebuild it"):
        FastaFile(path)


def test_plain_gzip_streams_but_has_no_random_access(tmp_path):
    fa = FastaFile(write_all(tmp_path, fasta_text([("a", "ACGT" * 10)]))["gzip"])
    with pytest.raises(ValueError, match="not BGZF.*bgzip"):
        fa.fetch("a", 0, 4)


@pytest.mark.parametrize(
    "text, match",
    [
        ("", r"g\.fa: no FASTA records \(empty file\)"),
        ("\n\n", r"g\.fa: no FASTA records"),
        ("ACGT\n>a\nACGT\n", r"g\.fa:1: sequence data before the first '>' header"),
        (">a\nACGT\nAC-T\n", r"g\.fa:3: invalid character '-' at column 3"),
        (">a\nACGT\n>b\nACGU\n", r"g\.fa:4: invalid character 'U' at column 4"),
        (
            ">a\nACGT\nAC\nACGT\n",
            r"g\.fa:3: record .a. has lines of different lengths \(2 bases here, 4 on its first",
        ),
        (">a\nACGT\nACGTA\n", r"g\.fa:3: record 'a' has lines of different lengths"),
        (">a\nACGT\n\nACGT\n", r"g\.fa:4: blank line inside record 'a'"),
        (">a\nAC\n>a\nAC\n", r"g\.fa:3: duplicate record name 'a'"),
        (">\nACGT\n", r"g\.fa:1: header without a record name"),
        (">a desc\rACGT\rAC\r", r"g\.fa:1: carriage return not followed by a newline"),
        (">a\nAC\rGT\n", r"g\.fa:2: carriage return not followed by a newline"),
        (">a\nACGT\r", r"g\.fa:2: carriage return not followed by a newline"),
        (
            ">a\nACG\r\nACG\nA\n",
            r"g\.fa:3: record 'a' mixes line endings \(LF here, CRLF on its first line\)",
        ),
        (
            ">a\nACG\nACG\r\nA\n",
            r"g\.fa:3: record 'a' mixes line endings \(CRLF here, LF on its first line\)",
        ),
    ],
)
@pytest.mark.parametrize("kind", ["plain", "gzip", "bgzf"])
def test_bad_fasta_names_file_and_line(tmp_path, text, match, kind):
    path = write_all(tmp_path, text)[kind]
    match = match.replace(r"g\.fa", {"plain": r"g\.fa", "gzip": r"g\.fa\.gz", "bgzf": r"g\.fa\.bgz"}[kind])
    with pytest.raises(ValueError, match=match):
        FastaFile(path)


@pytest.mark.parametrize("kind", ["gzip", "bgzf"])
@pytest.mark.parametrize("cut", ["half", "block boundary", "end of file", "corrupt"])
def test_a_compressed_file_cut_short_or_corrupt_is_an_error_naming_it(tmp_path, kind, cut):
    """A download cut anywhere (BGZF: also exactly at a block boundary, which gzip readers take for the end
    of a shorter file) or a flipped byte is one ValueError naming the file, never a shorter genome."""
    rng = random.Random(3)
    text = fasta_text([("a", "".join(rng.choices("ACGT", k=150_000))), ("b", "ACGT" * 100)], width=60)
    path = write_all(tmp_path, text)[kind]
    data = path.read_bytes()
    keep = {"half": len(data) // 2, "block boundary": len(data) - 8, "end of file": len(data) - 4}
    if kind == "bgzf":
        blocks = [offset for offset, _ in iter_blocks(path)]
        assert len(blocks) >= 4  # 3 of data, the end-of-file block
        keep["block boundary"], keep["end of file"] = (
            blocks[-2],
            blocks[-1],
        )  # a data block lost; the EOF block
    data = data[: keep.get(cut, len(data))]
    if cut == "corrupt":
        data = data[:200] + bytes([data[200] ^ 0xFF]) + data[201:]
    path.write_bytes(data)
    if kind == "bgzf" and cut != "corrupt":
        match = "truncated: the BGZF end-of-file marker is missing"
    else:
        match = "truncated or corrupt gzip file"
    with pytest.raises(ValueError, match=f"^{path}: {match}"):
        with FastaFile(path) as fa:
            for _ in fa.iter_chunks():
                pass


def test_a_corrupt_bgzf_block_read_through_a_fresh_index_names_the_file(tmp_path):
    path = write_all(tmp_path, fasta_text([("a", "ACGT" * 40_000)], width=60))["bgzf"]
    FastaFile(path, write_index=True).close()  # .fai and .gzi: the file is not decompressed as a stream
    second = build_gzi(path)[1][0]
    data = bytearray(path.read_bytes())
    data[second + 30] ^= 0xFF  # inside the second block's deflate data
    stat = os.stat(path)
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the indexes stay fresh
    with (
        FastaFile(path) as fa,
        pytest.raises(ValueError, match=rf"^{path} \(byte {second}\): corrupt or truncated BGZF"),
    ):
        fa.fetch("a")


def test_bad_arguments_are_clear_errors(tmp_path):
    path = tmp_path / "s.fa"
    path.write_text(">a\nACGT\n")
    fa = FastaFile(path)
    with pytest.raises(KeyError, match="no record 'b'"):
        fa.fetch("b")
    with pytest.raises(ValueError, match=r"range \[2, 9\) is outside record 'a' of length 4"):
        fa.fetch("a", 2, 9)
    assert fa.fetch("a", np.int64(1), np.int32(3)) == "CG"  # e.g. coordinates from a numpy array
    with pytest.raises(TypeError, match="start must be an int, got float"):
        fa.fetch("a", 1.0, 3)
    with pytest.raises(TypeError, match="end must be an int, got bool"):
        fa.fetch("a", 0, True)
    with pytest.raises(ValueError, match="size must be a positive int"):
        next(fa.iter_chunks(0))
    with pytest.raises(FileNotFoundError, match="no such FASTA file"):
        FastaFile(tmp_path / "missing.fa")
    with pytest.raises(TypeError, match="path must be"):
        FastaFile(3)
    with pytest.raises(ValueError, match="invalid character '-'"):
        MemoryFasta([("a", "AC-")])


@pytest.mark.parametrize("packed", [False, True])
def test_a_header_that_is_not_utf8_is_read_by_both_fasta_readers(tmp_path, packed):
    """A Latin-1 description (``Universit\\xe9``) is no error for FastaFile nor hf_sparse.data.fasta; bytes
    that are not UTF-8 in a sequence line are a ValueError naming the file and line."""
    path = tmp_path / "g.fa"
    data = b">chr1 sequenced at Universit\xe9 X\nACGTACGT\nAC\n>chr2\nGG\n"
    path.write_bytes(gzip.compress(data) if packed else data)
    assert [r.name for r in FastaFile(path).records] == ["chr1", "chr2"]
    assert read_fasta(path) == [("chr1 sequenced at Universit\ufffd X", "ACGTACGTAC"), ("chr2", "GG")]
    path.write_bytes(b">chr1\nACGT\nA\xe9GT\n")
    with pytest.raises(ValueError, match=r"g\.fa:3: a sequence line holds bytes that are not UTF-8"):
        read_fasta(path)
