"""FASTA and motif readers, the PWM scanner, BIO labels and the synthetic motif generator."""

import gzip
import os

import numpy as np
import pytest

from hf_sparse.data import iter_fasta, read_fasta
from hf_sparse.tasks.motif.data import (
    Motif,
    SyntheticMotifGenerator,
    bio_label_names,
    builtin_motifs,
    generate_motif_dataset,
    label_sequence,
    read_jaspar,
    read_motifs,
    read_transfac,
    scan,
    spans_to_tags,
    synthetic_dataset,
)
from hf_sparse.tokenization_dna import reverse_complement

JASPAR = """\
>MA0001.1\tTOY
A  [ 10  0  0  1 ]
C  [  0 10  0  2 ]
G  [  0  0 10  3 ]
T  [  0  0  0  4 ]

>MA0002.1 UNLABELLED
1 2
3 4
5 6
7 8
"""

TRANSFAC = """\
AC MA0001.1
XX
ID TOY
XX
DE MA0001.1 TOY ; From JASPAR
PO\tA\tC\tG\tT
01\t10.0\t0.0\t0.0\t0.0
02\t0.0\t10.0\t0.0\t0.0
03\t0.0\t0.0\t10.0\t0.0
04\t1.0\t2.0\t3.0\t4.0
XX
CC tax_group:vertebrates
XX
//
AC MA0003.1
ID OTHER
P0 T G C A
01 1 2 3 4 A
//
"""

TOY_COUNTS = [[10, 0, 0, 1], [0, 10, 0, 2], [0, 0, 10, 3], [0, 0, 0, 4]]


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def _toy(name="TOY", consensus="ACGTTGCA"):
    counts = np.full((4, len(consensus)), 1.0)
    for i, b in enumerate(consensus):
        counts["ACGT".index(b), i] = 97.0
    return Motif(name, "MA9999.1", counts)


# ---------------------------------------------------------------- FASTA


def test_read_fasta_plain_and_gzip(tmp_path):
    text = ">seq1 first record\nACGT\nacgt\n\n>seq2\nNNNN\n>empty\n"
    plain = _write(tmp_path, "x.fa", text)
    packed = tmp_path / "x.fa.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    want = [("seq1 first record", "ACGTacgt"), ("seq2", "NNNN"), ("empty", "")]
    assert read_fasta(plain) == want
    assert read_fasta(packed) == want
    assert list(iter_fasta(str(packed))) == want
    assert read_fasta(_write(tmp_path, "e.fa", "")) == []


def test_read_fasta_rejects_data_before_header(tmp_path):
    path = _write(tmp_path, "bad.fa", "\nACGT\n>x\nAC\n")
    with pytest.raises(ValueError, match=r"bad\.fa:2"):
        read_fasta(path)


# ---------------------------------------------------------------- readers


def test_read_jaspar(tmp_path):
    motifs = read_jaspar(_write(tmp_path, "m.jaspar", JASPAR))
    assert [(m.matrix_id, m.name, len(m)) for m in motifs] == [
        ("MA0001.1", "TOY", 4),
        ("MA0002.1", "UNLABELLED", 2),
    ]
    np.testing.assert_array_equal(motifs[0].counts, TOY_COUNTS)
    np.testing.assert_array_equal(motifs[1].counts, [[1, 2], [3, 4], [5, 6], [7, 8]])
    assert motifs[0].consensus == "ACGT"


def test_read_transfac(tmp_path):
    motifs = read_transfac(_write(tmp_path, "m.txt", TRANSFAC))
    assert [(m.matrix_id, m.name) for m in motifs] == [("MA0001.1", "TOY"), ("MA0003.1", "OTHER")]
    np.testing.assert_array_equal(motifs[0].counts, TOY_COUNTS)
    np.testing.assert_array_equal(motifs[1].counts[:, 0], [4, 3, 2, 1])  # columns named T G C A


def test_read_motifs_detects_format(tmp_path):
    assert [m.name for m in read_motifs(_write(tmp_path, "a", JASPAR))] == ["TOY", "UNLABELLED"]
    packed = tmp_path / "b.gz"
    packed.write_bytes(gzip.compress(TRANSFAC.encode()))
    assert [m.name for m in read_motifs(packed)] == ["TOY", "OTHER"]
    with pytest.raises(ValueError, match="cannot detect"):
        read_motifs(_write(tmp_path, "c", "hello\n"))


@pytest.mark.parametrize(
    "reader, text, where, what",
    [
        (read_jaspar, ">MA1 X\nA [1 2]\nC [1 2]\nG [1 2]\n>MA2 Y\n", ":1:", "3 count rows"),
        (read_jaspar, ">MA1 X\nA [1 2]\nC [1 2]\nG [1 x]\nT [1 2]\n", ":4:", "expected numbers"),
        (read_jaspar, ">MA1 X\nA [1 2]\nC [1 2]\nG [1 2]\nT [1 2 3]\n", ":1:", "differ in length"),
        (read_jaspar, ">MA1\nA [1]\nC [1]\nG [1]\nT [1]\n", ":1:", "MATRIX_ID NAME"),
        (read_jaspar, ">MA1 X\nA [1]\nC [1]\nA [1]\nT [1]\n", ":4:", "repeated"),
        (read_jaspar, ">MA1 X\nA [1]\nC [1]\nZ [1]\nT [1]\n", ":4:", "row label"),
        (read_jaspar, "A [1]\n", ":1:", "before the first"),
        (read_transfac, "AC M1\nID X\nP0 A C G T\n01 1 2 3 4\n03 1 2 3 4\n//\n", ":5:", "numbered 03"),
        (read_transfac, "AC M1\nID X\nP0 A C G T\n01 1 2 3\n//\n", ":4:", "matrix row"),
        (read_transfac, "AC M1\nID X\nP0 A C G T\n01 1 2 3 4\n", ":1:", "not terminated"),
        (read_transfac, "AC M1\nP0 A C G T\n01 1 2 3 4\n//\n", ":4:", "lacks"),
        (read_transfac, "AC M1\nID X\nP0 A C G U\n//\n", ":3:", "P0 line"),
        (read_transfac, "AC M1\nID X\n01 1 2 3 4\n//\n", ":3:", "outside a P0"),
        (read_transfac, "AC M1\nID X\nP0 A C G T\n01 0 0 0 0\n//\n", ":1:", "zero total"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path, reader, text, where, what):
    path = _write(tmp_path, "bad.txt", text)
    with pytest.raises(ValueError) as err:
        reader(path)
    assert f"bad.txt{where}" in str(err.value) and what in str(err.value)


def test_shared_jaspar_file_has_ctcf(shared_data):
    path = os.path.join(
        shared_data,
        "genomics/jaspar2024_core_vertebrates_non_redundant/JASPAR2024_CORE_vertebrates_non-redundant_pfms_transfac.txt",
    )
    motifs = read_motifs(path)
    assert len(motifs) == 879
    ctcf = next(m for m in motifs if m.matrix_id.startswith("MA0139"))
    # JASPAR 2024 ships MA0139.2 (15 columns); the older MA0139.1 had 19.
    assert (ctcf.matrix_id, ctcf.name, len(ctcf)) == ("MA0139.2", "CTCF", 15)
    assert ctcf.counts[:, 0].tolist() == [281.0, 49.0, 449.0, 134.0]
    builtin = builtin_motifs(["CTCF"])[0]
    np.testing.assert_array_equal(builtin.counts, ctcf.counts)


# ---------------------------------------------------------------- Motif


def test_motif_matrices():
    m = Motif("TOY", "MA0001.1", TOY_COUNTS)
    np.testing.assert_allclose(m.pwm(0.0)[:, 0], [1, 0, 0, 0])
    np.testing.assert_allclose(m.pwm(1.0)[:, 3], [2 / 14, 3 / 14, 4 / 14, 5 / 14])
    np.testing.assert_allclose(m.pwm().sum(axis=0), 1.0)
    np.testing.assert_allclose(m.log_odds(pseudocount=1.0)[:, 3], np.log2(np.array([2, 3, 4, 5]) / 14 / 0.25))
    bg = {"A": 0.3, "C": 0.2, "G": 0.2, "T": 0.3}
    np.testing.assert_allclose(m.log_odds(bg, 1.0)[0, 3], np.log2(2 / 14 / 0.3))
    assert m.consensus == "ACGT"
    assert m.reverse_complement().consensus == reverse_complement("ACGT")
    assert Motif.from_dict(m.to_dict()).counts.tolist() == m.counts.tolist()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(counts=np.ones((3, 4))), "shape"),
        (dict(counts=-np.ones((4, 2))), "finite"),
        (dict(counts=np.zeros((4, 2))), "zero total"),
        (dict(name="two words"), "name"),
    ],
)
def test_motif_validation(kwargs, match):
    args = dict(name="X", matrix_id="M1", counts=np.ones((4, 3)))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        Motif(**args)


def test_bad_background():
    m = _toy()
    for bg in ([0.5, 0.5, 0, 0], [0.25] * 3, {"A": 1.0}, [0.3] * 4):
        with pytest.raises(ValueError, match="background"):
            m.log_odds(bg)


def test_builtin_motifs():
    motifs = builtin_motifs()
    assert 4 <= len(motifs) <= 6
    names = [m.name for m in motifs]
    assert "CTCF" in names and len(set(names)) == len(names)
    ctcf = builtin_motifs(["CTCF"])[0]
    assert ctcf.matrix_id == "MA0139.2" and len(ctcf) == 15
    assert builtin_motifs()[0].counts is not motifs[0].counts
    with pytest.raises(KeyError, match="NOPE"):
        builtin_motifs(["NOPE"])


# ---------------------------------------------------------------- scanning


def test_scan_finds_planted_consensus_on_both_strands():
    m = builtin_motifs(["CTCF"])[0]
    site = m.consensus
    seq = "A" * 20 + site + "T" * 13 + reverse_complement(site).lower() + "A" * 7
    best = float(m.log_odds().max(axis=0).sum())
    hits = scan(seq, m, threshold=1.0)
    assert [(h["start"], h["end"], h["strand"]) for h in hits] == [(20, 35, "+"), (48, 63, "-")]
    for h in hits:
        assert h["score"] == pytest.approx(best) and h["motif"] == "CTCF"
    assert scan(seq, m, threshold=1.0, both_strands=False) == hits[:1]
    assert scan(seq, m, min_score=best - 1e-6) == hits


def test_scan_scores_match_a_direct_sum():
    m = _toy(consensus="ACGTTGCA")
    rng = np.random.default_rng(0)
    seq = "".join(rng.choice(list("ACGTN"), size=60))
    lo = m.log_odds()
    hits = scan(seq, m, min_score=-1e9)
    assert len(hits) == 2 * (60 - len(m) + 1)
    for h in hits:
        window = seq[h["start"] : h["end"]]
        if h["strand"] == "-":
            window = reverse_complement(window)
        want = sum(0.0 if b == "N" else lo["ACGT".index(b), i] for i, b in enumerate(window))
        assert h["score"] == pytest.approx(want)


def test_scan_relative_threshold_and_n():
    m = _toy(consensus="ACGTTGCA")
    best = float(m.log_odds().max(axis=0).sum())
    worst = float(m.log_odds().min(axis=0).sum())
    one_n = "ACGTNGCA"  # the N scores 0 (background)
    (hit,) = scan(one_n, m, threshold=0.5, both_strands=False)
    assert hit["score"] == pytest.approx(best - m.log_odds().max(axis=0)[4])
    rel = (hit["score"] - worst) / (best - worst)
    assert scan(one_n, m, threshold=rel - 1e-6, both_strands=False)
    assert not scan(one_n, m, threshold=rel + 1e-6, both_strands=False)
    assert scan("ACG", m) == []  # shorter than the motif


def test_scan_errors():
    m = _toy()
    with pytest.raises(ValueError, match=r"'X' at position 3"):
        scan("ACGXACGTACGT", m)
    with pytest.raises(ValueError, match="not both"):
        scan("ACGTACGT", m, threshold=0.5, min_score=1.0)
    with pytest.raises(ValueError, match="threshold"):
        scan("ACGTACGT", m, threshold=1.5)
    with pytest.raises(TypeError, match="int"):
        scan(12, m)


def test_label_sequence_higher_score_wins():
    strong = _toy("STRONG", "ACGTTGCA")
    weak = _toy("WEAK", "ACGTTG")  # overlaps STRONG's site with a lower score
    seq = "GG" + "ACGTTGCA" + "GG"
    tags = label_sequence(seq, [weak, strong], min_score=3.0)
    assert tags == ["O", "O", "B-STRONG"] + ["I-STRONG"] * 7 + ["O", "O"]
    assert len(label_sequence("", [strong])) == 0


def test_spans_to_tags_and_names():
    spans = [{"motif": "X", "start": 3, "end": 5}, {"motif": "Y", "start": 0, "end": 2}]
    assert spans_to_tags(6, spans) == ["B-Y", "I-Y", "O", "B-X", "I-X", "O"]
    with pytest.raises(ValueError, match="overlaps"):
        spans_to_tags(6, spans + [{"motif": "Z", "start": 4, "end": 6}])
    with pytest.raises(ValueError, match="outside"):
        spans_to_tags(4, spans)
    assert bio_label_names(["X", "Y"]) == ["O", "B-X", "I-X", "B-Y", "I-Y"]


# ---------------------------------------------------------------- synthetic data


def _check_example(ex, gen):
    seq, tags, spans = ex["sequence"], ex["tags"], ex["spans"]
    assert len(seq) == len(tags) == len(ex["tag_ids"]) == gen.length
    assert set(seq) <= set("ACGT")
    assert tags == spans_to_tags(gen.length, spans)  # consistent and non-overlapping
    assert [gen.label_names[i] for i in ex["tag_ids"]] == tags
    assert ex["motif_labels"] == [int(any(s["motif"] == n for s in spans)) for n in gen.motif_names]
    by_name = {m.name: m for m in gen.motifs}
    for s in spans:
        site = seq[s["start"] : s["end"]]
        if s["strand"] == "-":
            site = reverse_complement(site)
        motif = by_name[s["motif"]]
        assert s["end"] - s["start"] == len(motif)
        # sampled from the PWM (pseudocount 0): every base has a non-zero count at its position
        assert all(motif.counts["ACGT".index(b), i] > 0 for i, b in enumerate(site))
    starts = [s["start"] for s in spans]
    assert starts == sorted(starts)


def test_generator_is_deterministic_and_consistent():
    gen = SyntheticMotifGenerator(length=400, seed=7, negative_fraction=0.3)
    a = gen.generate(40)
    assert a == SyntheticMotifGenerator(length=400, seed=7, negative_fraction=0.3).generate(40)
    assert gen.example(13) == a[13]
    assert a != SyntheticMotifGenerator(length=400, seed=8, negative_fraction=0.3).generate(40)
    for ex in a:
        _check_example(ex, gen)
    counts = [len(ex["spans"]) for ex in a]
    assert 0 in counts and max(counts) <= 3 and sum(c > 0 for c in counts) > 20
    strands = {s["strand"] for ex in a for s in ex["spans"]}
    assert strands == {"+", "-"}


def test_generator_samples_from_the_pwm_not_only_the_consensus():
    gen = SyntheticMotifGenerator(
        builtin_motifs(["TP53"]),
        length=60,
        min_instances=1,
        max_instances=1,
        negative_fraction=0.0,
        reverse_prob=0.0,
    )
    sites = {ex["sequence"][ex["spans"][0]["start"] : ex["spans"][0]["end"]] for ex in gen.generate(30)}
    assert len(sites) > 5


def test_generator_options():
    gen = SyntheticMotifGenerator(
        length=200, min_instances=2, max_instances=2, negative_fraction=0.0, reverse_prob=1.0, gc_content=0.9
    )
    exs = gen.generate(10)
    assert all(len(ex["spans"]) == 2 and {s["strand"] for s in ex["spans"]} == {"-"} for ex in exs)
    assert gen.generate(10, start=5)[0] == exs[5]
    neg = SyntheticMotifGenerator(length=100, negative_fraction=1.0).generate(5)
    assert all(ex["spans"] == [] and set(ex["tags"]) == {"O"} and sum(ex["motif_labels"]) == 0 for ex in neg)
    gc = np.mean(
        [
            ch in "GC"
            for ch in SyntheticMotifGenerator(length=2000, negative_fraction=1.0, gc_content=0.9).example(0)[
                "sequence"
            ]
        ]
    )
    assert 0.85 < gc < 0.95
    pois = generate_motif_dataset(
        30, seed=1, length=300, poisson_mean=1.0, min_instances=0, max_instances=5, negative_fraction=0.0
    )
    assert {len(ex["spans"]) for ex in pois} >= {0, 1, 2}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(length=30), "cannot hold"),
        (dict(reverse_prob=1.5), "reverse_prob"),
        (dict(min_instances=3, max_instances=2), "max_instances"),
        (dict(poisson_mean=-1.0), "poisson_mean"),
        (dict(gc_content=0.5, background_fasta="x.fa"), "not both"),
        (dict(motifs=[_toy("A"), _toy("A")]), "unique"),
        (dict(motifs=[]), "non-empty"),
    ],
)
def test_generator_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SyntheticMotifGenerator(**kwargs)


def test_generator_gzip_fasta_background(tmp_path):
    rng = np.random.default_rng(0)
    chrom = (
        "".join(rng.choice(list("acgt"), size=3000)) + "N" * 500 + "".join(rng.choice(list("ACGT"), size=200))
    )
    path = tmp_path / "bg.fa.gz"
    path.write_bytes(gzip.compress(f">chr\n{chrom}\n>short\nACGT\n".encode()))
    gen = SyntheticMotifGenerator(length=150, background_fasta=path, negative_fraction=0.5, seed=3)
    exs = gen.generate(20)
    assert exs == SyntheticMotifGenerator(
        length=150, background_fasta=path, negative_fraction=0.5, seed=3
    ).generate(20)
    upper = chrom.upper()
    for ex in exs:
        _check_example(ex, gen)
        if not ex["spans"]:
            assert ex["sequence"] in upper  # an exact window of the FASTA, N runs avoided
    with pytest.raises(ValueError, match="no record"):
        SyntheticMotifGenerator(length=5000, background_fasta=path)


def test_synthetic_dataset_reads_an_edited_background_again(tmp_path):
    """The datasets cache key includes the background file's size and time: a replaced genome is used."""
    path = tmp_path / "bg.fa"
    motifs = [m for m in builtin_motifs() if m.name == "CTCF"]
    kwargs = {"length": 60, "negative_fraction": 1.0, "background_fasta": path}
    path.write_text(">chr\n" + "A" * 400 + "\n")
    assert synthetic_dataset(motifs, 0, 2, **kwargs)["sequence"] == ["A" * 60] * 2
    path.write_text(">chr\n" + "C" * 400 + "\n")  # same size; a new time
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    assert synthetic_dataset(motifs, 0, 2, **kwargs)["sequence"] == ["C" * 60] * 2


def test_dinucleotide_shuffle_keeps_dinucleotides_and_ends():
    from collections import Counter

    from hf_sparse.tasks.motif.data import dinucleotide_shuffle

    rng = np.random.default_rng(0)

    def pairs(s):
        return Counter(zip(s, s[1:]))

    seen = set()
    for _ in range(200):
        seq = "".join(rng.choice(list("ACGTn"), size=int(rng.integers(3, 80))))
        out = dinucleotide_shuffle(seq, rng)
        assert pairs(out) == pairs(seq) and (out[0], out[-1]) == (seq[0], seq[-1]) and len(out) == len(seq)
        seen.add(out != seq)
    assert True in seen  # it does shuffle
    seq = "ACGTTGCAACGGATCCGATTACAGGCT" * 4
    assert dinucleotide_shuffle(seq, np.random.default_rng(5)) == dinucleotide_shuffle(
        seq, np.random.default_rng(5)
    )
    assert dinucleotide_shuffle("AC", rng) == "AC"
    with pytest.raises(TypeError, match="rng"):
        dinucleotide_shuffle("ACGT", 0)
