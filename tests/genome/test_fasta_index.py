"""Indexed FASTA: samtools-compatible .fai, random access in plain and BGZF files, streamed gzip, and
clear errors (file and line) for FASTA the index cannot describe."""

import gzip
import os
import random
import shutil
import subprocess

import pytest

from hf_sparse.genome.bgzf import BgzfReader, build_gzi, is_bgzf, read_gzi, write_bgzf, write_gzi
from hf_sparse.genome.fasta_index import FaiRecord, FastaFile, MemoryFasta, read_fai


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


def test_an_existing_index_is_used_and_a_stale_one_rebuilt(tmp_path):
    path = tmp_path / "s.fa"
    path.write_text(">a\nACGT\n")
    (tmp_path / "s.fa.fai").write_text("a\t2\t3\t4\t5\n")
    os.utime(tmp_path / "s.fa", (1, 1))  # the index is newer than the file: trusted as samtools does
    assert FastaFile(path).records == [FaiRecord("a", 2, 3, 4, 5)]
    os.utime(tmp_path / "s.fa.fai", (0, 0))  # older: rebuilt
    assert FastaFile(path).records == [FaiRecord("a", 4, 3, 4, 5)]


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
        (">a\nACGT\nAC\nACGT\n", r"g\.fa:4: record 'a' has lines of different lengths"),
        (">a\nACGT\nACGTA\n", r"g\.fa:3: record 'a' has lines of different lengths"),
        (">a\nACGT\n\nACGT\n", r"g\.fa:4: blank line inside record 'a'"),
        (">a\nAC\n>a\nAC\n", r"g\.fa:3: duplicate record name 'a'"),
        (">\nACGT\n", r"g\.fa:1: header without a record name"),
    ],
)
@pytest.mark.parametrize("kind", ["plain", "gzip", "bgzf"])
def test_bad_fasta_names_file_and_line(tmp_path, text, match, kind):
    path = write_all(tmp_path, text)[kind]
    match = match.replace(r"g\.fa", {"plain": r"g\.fa", "gzip": r"g\.fa\.gz", "bgzf": r"g\.fa\.bgz"}[kind])
    with pytest.raises(ValueError, match=match):
        FastaFile(path)


def test_bad_arguments_are_clear_errors(tmp_path):
    path = tmp_path / "s.fa"
    path.write_text(">a\nACGT\n")
    fa = FastaFile(path)
    with pytest.raises(KeyError, match="no record 'b'"):
        fa.fetch("b")
    with pytest.raises(ValueError, match=r"range \[2, 9\) is outside record 'a' of length 4"):
        fa.fetch("a", 2, 9)
    with pytest.raises(ValueError, match="size must be a positive int"):
        next(fa.iter_chunks(0))
    with pytest.raises(FileNotFoundError, match="no such FASTA file"):
        FastaFile(tmp_path / "missing.fa")
    with pytest.raises(TypeError, match="path must be"):
        FastaFile(3)
    with pytest.raises(ValueError, match="invalid character '-'"):
        MemoryFasta([("a", "AC-")])
