"""Genome scans end to end: a planted-motif FASTA of several records with N runs, through the model
scanner, the PWM scan and scripts/scan_genome.py; plain, gzip and BGZF give the same BED, which is
sorted, in bounds, strand-aware and identical to scanning each sequence as one string."""

import gzip
import io
import itertools
import os
import random
import signal
import tracemalloc
import urllib.parse
import warnings

import numpy as np
import pytest
import torch
from transformers import pipeline

import hf_sparse  # noqa: F401  (registers the model, tokenizer and pipeline)
from hf_sparse.genome import FastaFile, GenomeScanner, MemoryFasta
from hf_sparse.genome.bgzf import write_bgzf
from hf_sparse.genome.pwm_scan import pwm_scan, select_motifs
from hf_sparse.genome.tracks import compare_tracks, read_bed, resolve_overlaps, write_gff3
from hf_sparse.genome.windows import find_segments
from hf_sparse.tasks.motif.data import Motif, builtin_motifs, scan
from hf_sparse.tokenization_dna import DNATokenizer, reverse_complement
from tests.models.motif_tiny import motif_model
from tests.script_loader import load_script

scan_genome = load_script("scan_genome")

G = DNATokenizer().convert_tokens_to_ids("G")
CTCF = builtin_motifs(["CTCF"])[0]


def rule_model(first_tag=1, **kwargs):
    """Tags every G as CTCF (``first_tag`` on the first G of a run in the window, 1: B-, 2: I-; I- after):
    the spans are G runs."""
    model = motif_model(max_tokens=130, **kwargs)

    def forward(input_ids=None, attention_mask=None, **_):
        is_g = input_ids == G
        prev = torch.cat([torch.zeros_like(is_g[:, :1]), is_g[:, :-1]], 1)
        logits = torch.full((*input_ids.shape, 5), -5.0)
        logits[..., 0] = 5.0
        first = torch.full((5,), -5.0)
        first[first_tag] = 5.0
        logits[is_g & ~prev] = first
        logits[is_g & prev] = torch.tensor([-5.0, -5.0, 5.0, -5.0, -5.0])
        return type("Out", (), {"logits": logits, "sequence_logits": None})()

    model.forward = forward
    return model


def planted_genome(seed=0):
    """Records of A/C/T background with G runs (the rule model's motif) and CTCF sites on both strands at
    record starts and ends, next to N runs, and every few dozen bases (so across window overlaps)."""
    rng = random.Random(seed)
    site = CTCF.consensus

    def bg(n):
        return "".join(rng.choice("ACT") for _ in range(n))

    recs = []
    for k in range(3):
        parts = ["GGG" + bg(5), site]
        for j in range(12):
            parts += [bg(rng.randint(10, 60)), "G" * rng.randint(1, 9)]
            parts += [bg(rng.randint(5, 30)), site if j % 2 else reverse_complement(site)]
        parts += [bg(20), "N" * 150, "GG", bg(40).lower(), "NNN", bg(30), "N" * 120, bg(50), site, "GGGG"]
        recs.append((f"chr{k + 1}", "".join(parts)))
    recs.append(("tiny", "GAG"))
    recs.append(("gap", "N" * 200))
    return recs


def write_fasta(tmp_path, records, width=60):
    text = "".join(
        f">{n}\n" + "".join(s[i : i + width] + "\n" for i in range(0, len(s), width)) for n, s in records
    )
    paths = {"plain": tmp_path / "g.fa", "gzip": tmp_path / "g.fa.gz", "bgzf": tmp_path / "g.fa.bgz"}
    paths["plain"].write_text(text)
    paths["gzip"].write_bytes(gzip.compress(text.encode()))
    write_bgzf(text.encode(), paths["bgzf"])
    return paths


def g_runs(records, skip_n=100):
    """Expected rule-model hits: G runs inside segments (runs of >= skip_n N are not scanned)."""
    out = []
    for rec, a, b in find_segments(MemoryFasta(records), skip_n):
        seq = dict(records)[rec]
        i = a
        while i < b:
            if seq[i] in "Gg":
                j = i
                while j < b and seq[j] in "Gg":
                    j += 1
                out.append((rec, i, j))
                i = j
            else:
                i += 1
    return out


@pytest.mark.parametrize("kind", ["plain", "gzip", "bgzf"])
def test_every_planted_run_found_once_across_windows_and_record_boundaries(tmp_path, kind):
    records = planted_genome()
    scanner = GenomeScanner(rule_model(), DNATokenizer(), window=40, stride=30, batch_size=5)
    hits = list(scanner.scan(write_fasta(tmp_path, records)[kind]))
    expected = g_runs(records)
    assert len(expected) > 40 and any(s == 0 for _, s, _ in expected)  # runs at record starts ...
    assert any(e == len(dict(records)[r]) for r, _, e in expected)  # ... and ends
    assert [(h["chrom"], h["start"], h["end"]) for h in hits] == expected  # each exactly once, in order


@pytest.mark.parametrize("how, min_score", [("fixed_length", 0.0), ("bio", 0.22)])
def test_scan_equals_the_pipeline_on_each_segment(tmp_path, how, min_score):
    """The random model's bio spans (scores about 0.2-0.24, many started by an I- tag) straddle min_score."""
    motifs = {m.name: m.counts.tolist() for m in builtin_motifs(["CTCF", "SP1"])}
    model = motif_model(max_tokens=130, motifs=motifs, span_decoding=how)
    records = planted_genome(seed=1)
    path = write_fasta(tmp_path, records)["bgzf"]
    scanner = GenomeScanner(model, DNATokenizer(), window=96, stride=70, batch_size=3, min_score=min_score)
    hits = list(scanner.scan(path))
    pipe = pipeline("dna-motif-detection", model=model, tokenizer=DNATokenizer())
    expected = []
    for rec, a, b in find_segments(FastaFile(path)):
        seg = dict(records)[rec][a:b]
        for s in pipe(seg, window=96, stride=70, min_score=min_score, progress=False)["spans"]:
            expected.append((rec, a + s["start"], a + s["end"], s["motif"], s["strand"], s["score"]))
    assert len(expected) > 10
    got = [(h["chrom"], h["start"], h["end"], h["motif"], h["strand"], h["score"]) for h in hits]
    assert got == expected


@pytest.mark.parametrize("first_tag", [1, 2])
def test_bio_spans_started_by_an_i_tag_score_as_in_the_pipeline(first_tag):
    """A span whose first base is tagged I- (no B- before it) is scored with the I- probability there, as
    the pipeline scores it; min_score then keeps or drops the same spans (1-base ones included)."""
    model = rule_model(first_tag, span_decoding="bio")
    seq = "ACTAT" * 4 + "GGGG" + "ACTTA" * 4 + "G" + "ACTTA" * 3 + "GG" + "TTA"
    pipe = pipeline("dna-motif-detection", model=model, tokenizer=DNATokenizer())
    for min_score in (0.0, 0.5):
        expected = pipe(seq, window=64, min_score=min_score, progress=False)["spans"]
        got = GenomeScanner(model, DNATokenizer(), window=64, min_score=min_score).scan_sequence(seq)
        assert [(s["start"], s["end"]) for s in expected] == [(20, 24), (44, 45), (60, 62)]
        assert [s["score"] for s in expected] == [0.9998] * 3
        assert [{k: v for k, v in h.items() if k != "chrom"} for h in got] == expected


def test_span_decoding_is_checked_when_the_scanner_is_made():
    no_lengths = motif_model(max_tokens=130)  # no motif PWMs: no motif lengths
    with pytest.raises(
        ValueError, match=r"fixed-length decoding needs the length of every motif; missing \['CTCF', 'SP1'\]"
    ):
        GenomeScanner(no_lengths, DNATokenizer(), window=64, span_decoding="fixed_length")
    with pytest.raises(ValueError, match="span_decoding must be 'bio' or 'fixed_length', got 'viterbi'"):
        GenomeScanner(no_lengths, DNATokenizer(), window=64, span_decoding="viterbi")
    assert GenomeScanner(no_lengths, DNATokenizer(), window=64).span_decoding == "bio"  # the model's


def test_ids_are_the_tokenizers():
    tok = DNATokenizer()
    scanner = GenomeScanner(motif_model(max_tokens=130), tok, window=64)
    seq = "ACGTNacgtnRYkm"
    ids, mask = scanner.encode([seq, "AC"])
    assert ids[0].tolist() == tok(seq)["input_ids"]
    assert ids[1, :4].tolist() == tok("AC")["input_ids"] and mask[1].sum() == 4


def test_window_limits_and_bad_arguments():
    tok = DNATokenizer()
    absolute = motif_model(max_tokens=130, backbone_overrides={"position_embedding_type": "absolute"})
    assert GenomeScanner(absolute, tok).window == 128  # capped at the position table
    with pytest.raises(ValueError, match="longer than the model's position table allows"):
        GenomeScanner(absolute, tok, window=500)
    rotary = motif_model(max_tokens=130)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the trained length (the default) does not warn
        assert GenomeScanner(rotary, tok).window == 128
    with pytest.warns(UserWarning, match="longer than the 128 bases the model was trained on"):
        assert GenomeScanner(rotary, tok, window=4096).window == 4096  # rotary: any length on request
    with pytest.raises(ValueError, match="stride must be <= window"):
        GenomeScanner(motif_model(), tok, window=10, stride=11)
    with pytest.raises(ValueError, match="min_score must be a number in"):
        GenomeScanner(motif_model(), tok, min_score=2)
    with pytest.raises(ValueError, match="attention_backend must be one of"):
        GenomeScanner(motif_model(), tok, attention_backend="fast")


def test_attention_backends_give_the_same_hits():
    motifs = {m.name: m.counts.tolist() for m in builtin_motifs(["CTCF", "SP1"])}
    model = motif_model(max_tokens=130, motifs=motifs, span_decoding="fixed_length")
    seq = dict(planted_genome(seed=3))["chr1"]
    runs = [GenomeScanner(model, DNATokenizer(), window=300, attention_backend=b).scan_sequence(seq)
            for b in ("blocked", "sdpa")]  # fmt: skip
    assert len(runs[0]) > 5 and [h["start"] for h in runs[0]] == [h["start"] for h in runs[1]]


@pytest.mark.parametrize("workers", [1, 3])
def test_attention_backend_is_the_scanners_not_the_models_for_good(workers):
    """The forward passes run on the scanner's kernel; the caller's model keeps its own backend (what
    save_pretrained and later calls see), also between batches and after a scan in several threads."""
    model = motif_model(max_tokens=130)
    config = model.backbone.config
    seen = []
    model.backbone.register_forward_pre_hook(
        lambda module, args: seen.append(module.config.attention_backend)
    )
    scanner = GenomeScanner(model, DNATokenizer(), window=40, stride=30, batch_size=2, workers=workers,
                            attention_backend="dense")  # fmt: skip
    assert config.attention_backend == "auto" and scanner.attention_backend == "dense"
    hits = scanner.scan(MemoryFasta([("a", "ACGT" * 60)]), progress=False)
    next(hits, None)
    if workers == 1:  # (with more, the next batches are running)
        assert config.attention_backend == "auto"  # between batches too
    list(hits)
    assert len(seen) >= 4 and set(seen) == {"dense"} and config.attention_backend == "auto"
    assert GenomeScanner(model, DNATokenizer(), window=40).attention_backend == "auto"  # the model's


def test_pwm_scan_finds_planted_sites_on_both_strands_once(tmp_path):
    records = planted_genome()
    path = write_fasta(tmp_path, records)["gzip"]
    hits = list(pwm_scan(path, [CTCF], threshold=0.85, chunk=50))  # pieces much shorter than the records
    expected = []
    for rec, a, b in find_segments(MemoryFasta(records)):
        for h in scan(dict(records)[rec][a:b], CTCF, 0.85):
            expected.append((rec, a + h["start"], a + h["end"], h["strand"]))
    assert [(h["chrom"], h["start"], h["end"], h["strand"]) for h in hits] == expected
    for rec, seq in records:
        for k in range(len(seq) - len(CTCF) + 1):
            piece = seq[k : k + len(CTCF)]
            for strand, want in (("+", CTCF.consensus), ("-", reverse_complement(CTCF.consensus))):
                if piece == want:
                    assert (
                        sum(h["chrom"] == rec and h["start"] == k and h["strand"] == strand for h in hits)
                        == 1
                    )
    assert {h["strand"] for h in hits} == {"+", "-"}
    assert all(0.85 <= h["score"] <= 1 for h in hits)


def test_pwm_scan_memory_does_not_follow_the_number_of_hits():
    """At threshold 0 every window is a hit (two a base per matrix): a piece's hits are held as arrays and
    made into dicts as they are taken, not all at once (about 600 bytes a hit before, twice as dicts)."""
    seq = "".join(random.Random(0).choices("ACGTN", weights=[5, 5, 5, 5, 1], k=12_000))
    motifs = [CTCF, builtin_motifs(["SP1"])[0]]
    expected = sorted(
        (h["start"], h["strand"] == "-", k, h["end"], round(h["score"], 3))
        for k, m in enumerate(motifs)
        for h in scan(seq, m, 0.0)
    )
    expected = [(start, minus, motifs[k].name, end, bits) for start, minus, k, end, bits in expected]
    tracemalloc.start()
    try:
        hits = pwm_scan(MemoryFasta([("a", seq)]), motifs, 0.0, chunk=len(seq))  # one piece
        for h, want in itertools.zip_longest(hits, expected):
            assert (h["start"], h["strand"] == "-", h["motif"], h["end"], h["bits"]) == want
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(expected) > 40_000 and peak < 300 * len(expected)


def test_pwm_scan_progress_bar_ends_at_the_genome_length(monkeypatch):
    """Skipped N runs (and an all-N record) count as done: the bar reaches its total, never passes it."""
    import tqdm.auto

    bars = []

    class Bar:
        def __init__(self, total, **kwargs):
            self.total, self.steps = total, []
            bars.append(self)

        def update(self, n):
            self.steps.append(n)

        def close(self):
            pass

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    records = planted_genome()
    list(pwm_scan(MemoryFasta(records), [CTCF], chunk=50, progress=True))
    (bar,) = bars
    assert bar.total == sum(len(s) for _, s in records)
    assert min(bar.steps) >= 0 and sum(bar.steps) == bar.total


def test_pwm_scan_scores_each_matrix_with_its_own_range():
    """Matrices may share a TF name (JASPAR 2024 has three CTCF): each hit's relative score is its own
    matrix's, the same as when that matrix is scanned alone."""
    records = planted_genome()
    other = Motif("CTCF", "MA1929.2", builtin_motifs(["REST"])[0].counts)  # another range than MA0139.2
    alone = list(pwm_scan(MemoryFasta(records), [CTCF], progress=False))
    both = list(pwm_scan(MemoryFasta(records), [CTCF, other], progress=False))
    assert len(alone) > 30
    assert [h for h in both if h["matrix_id"] == "MA0139.2"] == alone
    assert all(0.85 <= h["score"] <= 1 for h in both)


def test_pwm_scan_reports_no_site_made_only_of_n():
    """N scores 0 bits, a relative 0.774 for CTCF: a short N run (kept, below skip_n) passes threshold 0.75
    but holds no site; windows with some bases still count (N scoring 0)."""
    seq = "ACGTTGCA" * 5 + "N" * 50 + "TTGACCAT" * 5 + "n" * 10 + CTCF.consensus[5:] + "RYN" * 4
    hits = list(pwm_scan(MemoryFasta([("chr1", seq)]), [CTCF], threshold=0.75, progress=False))
    assert hits and all(set(seq[h["start"] : h["end"]].upper()) - set("NRY") for h in hits)
    assert any("N" in seq[h["start"] : h["end"]] for h in hits)  # partly N: still scanned
    assert any(h["end"] > len(seq) - 12 for h in hits) and hits[-1]["end"] < len(
        seq
    )  # the ambiguity-code tail
    assert scan("N" * 40, CTCF, min_score=-1.0) == []
    assert len(scan("A" + "N" * 39, CTCF, min_score=-20.0)) == 2  # the one window with a base, both strands


def write_jaspar(path, motifs):
    text = ""
    for m in motifs:
        text += f">{m.matrix_id} {m.name}\n"
        text += "".join(f"{b} [ {' '.join(str(int(x)) for x in row)} ]\n" for b, row in zip("ACGT", m.counts))
    path.write_text(text)
    return path


def test_select_motifs_by_a_name_that_several_matrices_share_asks_for_ids(tmp_path):
    other = Motif("CTCF", "MA1929.2", builtin_motifs(["REST"])[0].counts)
    jaspar = write_jaspar(tmp_path / "m.jaspar", [CTCF, other, builtin_motifs(["SP1"])[0]])
    with pytest.raises(ValueError, match=r"2 motifs named 'CTCF': \['MA0139.2', 'MA1929.2'\].*--motif-ids"):
        select_motifs(jaspar, names=["CTCF", "SP1"])
    assert [m.matrix_id for m in select_motifs(jaspar, names=["SP1"])] == ["MA0079.5"]
    assert [m.matrix_id for m in select_motifs(jaspar, ["MA1929.2", "MA0139.2"])] == ["MA1929.2", "MA0139.2"]


def test_a_motif_id_given_twice_is_an_error_not_every_site_twice(tmp_path):
    jaspar = write_jaspar(tmp_path / "m.jaspar", [CTCF, builtin_motifs(["SP1"])[0]])
    with pytest.raises(
        ValueError, match=r"motif ids given more than once: \['MA0139.2'\]; give each id once"
    ):
        select_motifs(jaspar, ["MA0139.2", "MA0079.5", "MA0139.2"])
    path = write_fasta(tmp_path, planted_genome())["plain"]
    argv = [str(path), "--pwm", str(jaspar), "--out", str(tmp_path / "x.bed"), "--no-progress"]
    with pytest.raises(ValueError, match=r"given more than once: \['MA0139.2'\]"):
        scan_genome.main(argv + ["--motif-ids", "MA0139.2", "MA0139.2"])
    assert not os.path.exists(tmp_path / "x.bed")


def save_model(tmp_path):
    motifs = {m.name: m.counts.tolist() for m in builtin_motifs(["CTCF", "SP1"])}
    folder = tmp_path / "model"
    motif_model(max_tokens=130, motifs=motifs, span_decoding="fixed_length").save_pretrained(folder)
    DNATokenizer(model_max_length=130).save_pretrained(folder)
    return folder


def test_script_writes_the_same_sorted_bed_for_plain_gzip_and_bgzip(tmp_path):
    records = planted_genome(seed=2)
    paths = write_fasta(tmp_path, records)
    model = save_model(tmp_path)
    beds = {}
    for kind, path in paths.items():
        out = tmp_path / f"{kind}.bed"
        args = [
            str(model),
            str(path),
            "--out",
            str(out),
            "--window",
            "100",
            "--stride",
            "80",
            "--no-progress",
        ]
        threads = torch.get_num_threads()
        summary = scan_genome.main(args + ["--gff", str(tmp_path / f"{kind}.gff3"), "--workers", "2"])
        assert summary["model"]["hits"] > 0 and summary["format"] == kind
        assert summary["model"]["threads"] == 1 and torch.get_num_threads() == threads  # restored
        beds[kind] = out.read_text()
    assert beds["plain"] == beds["gzip"] == beds["bgzf"]
    hits = read_bed(tmp_path / "plain.bed")
    lengths = dict((n, len(s)) for n, s in records)
    order = [n for n, _ in records]
    keys = [(order.index(h["chrom"]), h["start"], h["end"]) for h in hits]
    assert keys == sorted(keys)  # FASTA order, then position
    assert all(0 <= h["start"] < h["end"] <= lengths[h["chrom"]] for h in hits)
    assert {h["strand"] for h in hits} <= {"+", "-"} and len({h["strand"] for h in hits}) == 2
    # strand-aware: "-" hits are those whose reverse complement scores higher on the motif's PWM
    from hf_sparse.tasks.motif.pipeline import strand_of

    motifs = {m.name: m.counts for m in builtin_motifs(["CTCF", "SP1"])}
    for h in hits:
        assert h["strand"] == strand_of(
            dict(records)[h["chrom"]][h["start"] : h["end"]].upper(), motifs[h["motif"]]
        )
    # identical to scanning each record as one in-memory string
    from hf_sparse.genome import load_scanner

    scanner = load_scanner(str(model), window=100, stride=80)
    one = [h for n, s in records for h in scanner.scan_sequence(s, name=n)]
    assert [(h["chrom"], h["start"], h["end"], h["motif"], h["strand"]) for h in one] == [
        (h["chrom"], h["start"], h["end"], h["motif"], h["strand"]) for h in hits
    ]
    gff = (tmp_path / "plain.gff3").read_text().splitlines()
    assert gff[0] == "##gff-version 3" and sum(not line.startswith("#") for line in gff) == len(hits)


def test_script_pwm_track_and_agreement(tmp_path):
    records = planted_genome()
    path = write_fasta(tmp_path, records)["plain"]
    jaspar = tmp_path / "m.jaspar"
    rows = "\n".join(f"{b} [ {' '.join(str(int(x)) for x in CTCF.counts[i])} ]" for i, b in enumerate("ACGT"))
    jaspar.write_text(f">MA0139.2 CTCF\n{rows}\n")
    out = tmp_path / "pwm.bed"
    summary = scan_genome.main([str(path), "--pwm", str(jaspar), "--motif-ids", "MA0139.2", "--out", str(out),
                                "--no-progress"])  # fmt: skip
    hits = read_bed(out)
    assert summary["pwm"]["hits"] == len(hits) > 30
    same = compare_tracks(resolve_overlaps(hits), hits)
    assert same["overlap"]["recall"] == 1.0 and same["exact"]["recall"] == 1.0


def test_script_checks_pwm_options_before_any_scan(tmp_path, capsys):
    path = write_fasta(tmp_path, planted_genome())["plain"]
    model, out = str(save_model(tmp_path)), tmp_path / "model.bed"
    jaspar = str(write_jaspar(tmp_path / "m.jaspar", [CTCF]))  # the model's SP1 is missing
    both = [model, str(path), "--out", str(out), "--pwm", jaspar, "--pwm-out", str(tmp_path / "pwm.bed"),
            "--window", "100", "--no-progress"]  # fmt: skip
    with pytest.raises(ValueError, match=r"has no motif \['MA0139.3'\]"):
        scan_genome.main(both + ["--motif-ids", "MA0139.3"])
    with pytest.raises(ValueError, match=r"has no motif named \['SP1'\]"):
        scan_genome.main(both)
    assert sorted(os.listdir(tmp_path)) == ["g.fa", "g.fa.bgz", "g.fa.gz", "m.jaspar", "model"]  # no scan ran
    for flag, value, message in [("--threshold", "85", "--threshold must be a relative score in [0, 1], got 85.0"),
                                 ("--threshold", "nan", "--threshold must be"),
                                 ("--skip-n", "0", "--skip-n must be >= 1, got 0"),
                                 ("--gff", str(tmp_path / "no" / "x.gff3"), f"no such folder {tmp_path / 'no'}")]:  # fmt: skip
        with pytest.raises(SystemExit):
            scan_genome.parse_args(
                [str(path), "--pwm", jaspar, "--motif-ids", "MA0139.2", "--out", "x.bed", flag, value]
            )
        assert message in capsys.readouterr().err


def test_script_input_errors_are_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.fa"
    bad.write_text(">a\nACGTXX\n")
    jaspar = str(write_jaspar(tmp_path / "m.jaspar", [CTCF]))
    argv = [str(bad), "--pwm", jaspar, "--motif-ids", "MA0139.2", "--out", str(tmp_path / "x.bed")]
    assert scan_genome.cli(argv) == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: {bad}:2: invalid character 'X' at column 5 "
                                                             "of a sequence line (allowed: IUPAC nucleotide codes "
                                                             "ACGTN RYSWKMBDHV, either case)")  # fmt: skip
    assert scan_genome.cli([str(tmp_path / "none.fa")] + argv[1:]) == 2
    assert "error: no such FASTA file" in capsys.readouterr().err
    cut = tmp_path / "cut.fa.gz"  # an interrupted download
    cut.write_bytes(gzip.compress((">a\n" + "ACGT" * 1000 + "\n").encode())[:-6])
    assert scan_genome.cli([str(cut)] + argv[1:]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].endswith(
        f" error: {cut}: truncated or corrupt gzip file (Compressed file ended before the end-of-stream marker "
        "was reached)"
    )
    with pytest.raises(ValueError, match="invalid character"):
        scan_genome.cli(argv + ["--debug"])
    assert not os.path.exists(tmp_path / "x.bed")


def test_script_reports_a_missing_model_folder_as_such(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write_fasta(tmp_path, [("chrA", "ACGTACGTAAACCACCAGGGGGCGCTAACGT")])["plain"]
    argv = [str(path), "--out", str(tmp_path / "x.bed"), "--no-progress"]
    assert scan_genome.cli(["./nosuchdir", *argv]) == 2  # a path: must be a folder
    assert capsys.readouterr().err.endswith(
        f"error: MODEL ./nosuchdir: folder not found: {tmp_path / 'nosuchdir'}\n"
    )
    assert scan_genome.cli(["outputs/nosuchdir", *argv]) == 2  # a folder, or (offline) a cached Hub model
    assert capsys.readouterr().err.endswith(
        f"error: MODEL outputs/nosuchdir: 'outputs/nosuchdir' is neither a folder ({tmp_path / 'outputs' / 'nosuchdir'} not found) nor a "
        "Hub model in the local cache (offline mode is on: HF_HUB_OFFLINE=1)\n"
    )
    from hf_sparse.genome import load_scanner

    with pytest.raises(FileNotFoundError, match="model_path ./nosuchdir: folder not found"):
        load_scanner("./nosuchdir")
    assert not os.path.exists(tmp_path / "x.bed")


def test_script_motif_ids_given_a_motif_name_lists_its_ids(tmp_path):
    other = Motif("CTCF", "MA1929.2", builtin_motifs(["REST"])[0].counts)
    jaspar = str(write_jaspar(tmp_path / "m.jaspar", [CTCF, other, builtin_motifs(["SP1"])[0]]))
    path = write_fasta(tmp_path, planted_genome())["plain"]
    argv = [str(path), "--pwm", jaspar, "--out", str(tmp_path / "x.bed"), "--no-progress", "--motif-ids"]
    message = (
        r"--motif-ids takes matrix ids, and 'CTCF' is the name of 2 motif\(s\): \['MA0139.2', 'MA1929.2'\]"
    )
    with pytest.raises(ValueError, match=message):
        scan_genome.main(argv + ["MA0079.5", "CTCF"])
    with pytest.raises(ValueError, match=r"has no motif \['MA0000.1'\]"):  # not a name either: as before
        scan_genome.main(argv + ["MA0000.1"])


def test_default_window_is_the_length_the_model_was_trained_on(tmp_path):
    tok = DNATokenizer()
    rotary = motif_model(max_tokens=130, trained_length=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert GenomeScanner(rotary, tok).window == 100  # not the 128 bases of the position range
    with pytest.warns(UserWarning, match="longer than the 100 bases the model was trained on: rotary"):
        GenomeScanner(rotary, tok, window=128)
    absolute = motif_model(
        max_tokens=130, trained_length=100, backbone_overrides={"position_embedding_type": "absolute"}
    )
    assert GenomeScanner(absolute, tok).window == 100
    with pytest.warns(
        UserWarning, match="longer than the 100 bases the model was trained on: its position table"
    ):
        assert GenomeScanner(absolute, tok, window=128).window == 128  # still within the table
    with pytest.raises(ValueError, match="position table allows"):
        GenomeScanner(absolute, tok, window=129)
    rotary.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    from hf_sparse.genome import load_scanner

    assert load_scanner(str(tmp_path / "model")).window == 100  # saved with the model
    with pytest.raises(ValueError, match="trained_length must be a positive int"):
        motif_model(trained_length=0)


def test_the_motif_task_records_the_training_sequence_length():
    from hf_sparse.tasks.motif.task import MotifArguments, MotifTask

    args = MotifArguments(motifs=["REST"], sequence_length=60, num_train=4, num_validation=2, num_test=0,
                          max_length=130)  # fmt: skip
    task = MotifTask()
    model = task.build_model(args, task.build_tokenizer(args))
    assert model.config.trained_length == 60  # the scan's default window, not max_length - 2 = 128
    assert GenomeScanner(model, DNATokenizer()).window == 60


@pytest.mark.parametrize("stop", ["error", "ctrl-c", "sigterm", "gff"])
def test_script_leaves_no_partial_output_when_a_run_fails(tmp_path, monkeypatch, stop):
    """A run stopped while writing the BED (an exception, Ctrl-C, SIGTERM as the script handles it) or the
    GFF3 leaves no file at --out or --gff, nor a temporary file."""
    path = write_fasta(tmp_path, planted_genome())["plain"]
    jaspar = str(write_jaspar(tmp_path / "m.jaspar", [CTCF]))

    def failing_scan(*args, **kwargs):
        for k, hit in enumerate(pwm_scan(*args, **kwargs)):
            if k == 5 and stop == "error":
                raise RuntimeError("disk on fire")
            if k == 5 and stop == "ctrl-c":
                raise KeyboardInterrupt
            if k == 5 and stop == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
            yield hit

    def failing_gff3(hits, out, *args):
        out.write("##gff-version 3\n")
        raise OSError("disk full")

    monkeypatch.setattr(scan_genome, "pwm_scan", failing_scan)
    monkeypatch.setattr(scan_genome, "write_gff3", failing_gff3)
    argv = [
        str(path),
        "--pwm",
        jaspar,
        "--motif-ids",
        "MA0139.2",
        "--out",
        str(tmp_path / "pwm.bed"),
        "--no-progress",
    ]
    argv += ["--gff", str(tmp_path / "pwm.gff3")] if stop == "gff" else []
    handler = scan_genome._raise_on_sigterm if stop == "sigterm" else signal.SIG_DFL
    before = signal.signal(signal.SIGTERM, handler)  # as `python scripts/scan_genome.py` does
    try:
        with pytest.raises((RuntimeError, KeyboardInterrupt, SystemExit, OSError)) as e:
            scan_genome.main(argv)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert stop != "sigterm" or e.value.code == 128 + signal.SIGTERM
    assert sorted(os.listdir(tmp_path)) == ["g.fa", "g.fa.bgz", "g.fa.gz", "m.jaspar"]


def test_script_writes_bed_and_gff3_in_one_pass_over_the_hits(tmp_path, monkeypatch):
    """With --gff no hit is held: each is written before the next is scanned (memory does not grow with the
    number of hits), and the BED is the one written without --gff."""
    path = write_fasta(tmp_path, planted_genome())["plain"]
    jaspar = str(write_jaspar(tmp_path / "m.jaspar", [CTCF]))
    argv = [str(path), "--pwm", jaspar, "--motif-ids", "MA0139.2", "--no-progress"]
    scan_genome.main(argv + ["--out", str(tmp_path / "alone.bed")])
    held, written = [], [0]

    def counted_scan(*args, **kwargs):
        for k, hit in enumerate(pwm_scan(*args, **kwargs)):
            held.append(k - written[0])  # hits scanned but not yet written
            yield hit

    def counted_gff3(hits, out, *args):
        def each():
            for hit in hits:
                yield hit
                written[0] += 1

        return write_gff3(each(), out, *args)

    monkeypatch.setattr(scan_genome, "pwm_scan", counted_scan)
    monkeypatch.setattr(scan_genome, "write_gff3", counted_gff3)
    summary = scan_genome.main(
        argv + ["--out", str(tmp_path / "pwm.bed"), "--gff", str(tmp_path / "pwm.gff3")]
    )
    assert summary["pwm"]["hits"] == len(held) == written[0] > 30 and max(held) == 0
    assert (tmp_path / "pwm.bed").read_text() == (tmp_path / "alone.bed").read_text()
    gff = [line for line in (tmp_path / "pwm.gff3").read_text().splitlines() if not line.startswith("#")]
    assert len(gff) == len(held)


def test_script_rejects_two_outputs_at_one_path_and_a_bad_device(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    base = ["model", "g.fa", "--out", "x.bed"]
    for extra, message in [
        (["--gff", "x.bed"], "--out and --gff name the same file x.bed"),
        (["--gff", "./sub/../x.bed"], "--out and --gff name the same file ./sub/../x.bed"),
        (
            ["--pwm", "m.txt", "--pwm-out", str(tmp_path / "x.bed")],
            f"--out and --pwm-out name the same file {tmp_path / 'x.bed'}",
        ),
        (["--gff", "y.gff3", "--summary", "y.gff3"], "--gff and --summary name the same file y.gff3"),
        (["--summary", "g.fa"], "the FASTA and --summary name the same file g.fa"),
        (["--device", "nosuch"], "--device nosuch: Expected one of cpu, cuda"),
    ]:
        (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(SystemExit) as e:
            scan_genome.parse_args(base + extra)
        last = capsys.readouterr().err.splitlines()[-1]
        assert e.value.code == 2 and f": error: {message}" in last
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            scan_genome.parse_args(base + ["--device", "cuda"])
        assert "error: --device cuda: " in capsys.readouterr().err
    assert scan_genome.parse_args(base + ["--gff", "x.gff3", "--device", "cpu"]).device == "cpu"


def test_script_help_and_argument_errors(capsys):
    with pytest.raises(SystemExit) as e:
        scan_genome.parse_args(["--help"])
    assert e.value.code == 0 and "BED6" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        scan_genome.parse_args(["g.fa", "--out", "x.bed"])
    assert "--pwm is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        scan_genome.parse_args(["model", "g.fa", "--out", "x.bed", "--pwm", "m.txt"])
    assert "--pwm-out" in capsys.readouterr().err


def test_script_refuses_the_options_of_a_track_it_does_not_scan(tmp_path, monkeypatch, capsys):
    """Model options without a MODEL and PWM options without --pwm (given, even at their default value) are
    errors, not dropped without a word; --pwm-out is the PWM file next to a model's, never unused."""
    monkeypatch.chdir(tmp_path)
    pwm_only = ["g.fa", "--pwm", "m.txt", "--motif-ids", "MA0139.2", "--out", "x.bed"]
    model_only = ["model", "g.fa", "--out", "x.bed"]
    for argv, message in [
        (pwm_only + ["--window", "50", "--stride", "10"], "--window --stride: option(s) of the model scan, given without a MODEL"),
        (pwm_only + ["--batch-size", "8", "--min-score", "0"], "--batch-size --min-score: option(s) of the model scan"),
        (pwm_only + ["--workers", "3", "--threads", "2", "--attention-backend", "nonsense", "--device", "cpu"],
         "--device --attention-backend --workers --threads: option(s) of the model scan, given without a MODEL"),
        (pwm_only + ["--pwm-out", "p.bed"], "--pwm-out names the PWM track's file next to a MODEL's; without a MODEL it goes to --out"),
        (model_only + ["--motif-ids", "MA0139.2", "--threshold", "0.85"], "--motif-ids --threshold: option(s) of the PWM scan, given without --pwm"),
        (model_only + ["--pwm-out", "p.bed"], "--pwm-out: option(s) of the PWM scan, given without --pwm"),
    ]:  # fmt: skip
        with pytest.raises(SystemExit) as e:
            scan_genome.parse_args(argv)
        assert e.value.code == 2 and f": error: {message}" in capsys.readouterr().err.splitlines()[-1]
    args = scan_genome.parse_args(pwm_only + ["--skip-n", "50", "--gff", "x.gff3"])  # options of both tracks
    assert (args.threshold, args.batch_size, args.min_score, args.skip_n) == (0.85, 8, 0.0, 50)
    args = scan_genome.parse_args(model_only + ["--batch-size", "3", "--pwm", "m.txt", "--pwm-out", "p.bed"])
    assert (args.threshold, args.batch_size, args.min_score, args.window) == (0.85, 3, 0.0, None)


def test_resolve_overlaps_keeps_the_best_of_each_chain():
    hits = [
        {"chrom": "a", "start": 0, "end": 10, "motif": "M", "score": 0.9, "strand": "+"},
        {"chrom": "a", "start": 0, "end": 10, "motif": "M", "score": 0.9, "strand": "-"},
        {"chrom": "a", "start": 5, "end": 15, "motif": "M", "score": 0.95, "strand": "+"},
        {"chrom": "a", "start": 12, "end": 22, "motif": "M", "score": 0.91, "strand": "+"},
        {"chrom": "b", "start": 12, "end": 22, "motif": "M", "score": 0.5, "strand": "-"},
    ]
    assert [(h["chrom"], h["start"], h["strand"]) for h in resolve_overlaps(hits)] == [
        ("a", 5, "+"),
        ("b", 12, "-"),
    ]
    assert np.isclose(compare_tracks(hits[2:3], hits)["exact"]["precision"], 1 / 5)


def test_gff3_escapes_reserved_characters_and_skips_empty_regions():
    hit = {"chrom": "Uniq1;size=100 é", "start": 0, "end": 5, "motif": "NFE2,MAF\t1", "score": 0.9, "strand": "+",
           "matrix_id": "X=1%&"}  # fmt: skip
    out = io.StringIO()
    assert write_gff3([hit], out, "pwm", [(hit["chrom"], 50), ("empty", 0), ("chr|1.2", 7)]) == 1
    lines = out.getvalue().splitlines()
    assert lines[:3] == [
        "##gff-version 3",
        "##sequence-region Uniq1%3Bsize%3D100%20%C3%A9 1 50",
        "##sequence-region chr|1.2 1 7",
    ]
    fields = lines[3].split("\t")
    assert len(lines) == 4 and len(fields) == 9
    assert fields[0] == "Uniq1%3Bsize%3D100%20%C3%A9" and urllib.parse.unquote(fields[0]) == hit["chrom"]
    attrs = dict(kv.split("=") for kv in fields[8].split(";"))  # as a GFF3 reader splits them
    assert {k: urllib.parse.unquote(v) for k, v in attrs.items()} == {
        "ID": "pwm_1",
        "Name": "NFE2,MAF\t1",
        "motif_id": "X=1%&",
    }
    assert "," not in attrs["Name"]


def test_worker_threads_give_the_same_hits_in_the_same_order():
    motifs = {m.name: m.counts.tolist() for m in builtin_motifs(["CTCF", "SP1"])}
    model = motif_model(max_tokens=130, motifs=motifs, span_decoding="fixed_length")
    records = planted_genome(seed=4)
    runs = [list(GenomeScanner(model, DNATokenizer(), window=60, stride=45, batch_size=2, workers=w)
                 .scan(MemoryFasta(records), progress=False)) for w in (1, 3)]  # fmt: skip
    assert len(runs[0]) > 20 and runs[1] == runs[0]
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        GenomeScanner(model, DNATokenizer(), workers=0)


def test_a_batch_of_equal_windows_predicts_as_with_padding():
    """Equal windows go without an attention mask; each must still get what it gets next to a shorter one
    (padded, with a mask) and alone."""
    scanner = GenomeScanner(motif_model(max_tokens=130), DNATokenizer(), window=64)
    rng = random.Random(5)
    full = ["".join(rng.choice("ACGT") for _ in range(64)) for _ in range(2)]
    unmasked = scanner.predict(full)
    padded = scanner.predict([full[0], full[1][:23]])
    alone = scanner.predict([full[1][:23]])
    np.testing.assert_allclose(unmasked[0], padded[0], atol=1e-6)
    np.testing.assert_allclose(padded[1], alone[0], atol=1e-6)
    assert padded[1].shape == (23, 5)


def test_script_parallelism_defaults_and_errors(capsys):
    cores = len(scan_genome.os.sched_getaffinity(0))
    assert scan_genome.default_parallelism(None, None, None) == (min(cores, 8), 1 if cores > 1 else None)
    assert scan_genome.default_parallelism(None, None, "cuda") == (1, None)
    assert scan_genome.default_parallelism(2, 3, None) == (2, 3)
    assert scan_genome.default_parallelism(1, None, "cpu") == (1, None)
    with pytest.raises(SystemExit):
        scan_genome.parse_args(["model", "g.fa", "--out", "x.bed", "--workers", "0"])
    assert "--workers must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    "pattern",
    [
        {"type": "random", "block": 8, "num_blocks": 2, "seed": 0},
        {
            "type": "bigbird",
            "block": 8,
            "window_blocks": 3,
            "random_blocks": 2,
            "global_blocks": 1,
            "seed": 0,
        },
    ],
)
def test_random_block_models_give_the_same_hits_whatever_the_batch_size(pattern):
    """Random blocks are drawn for a batch's padded length: a short segment's window batched with full ones
    would attend other keys than alone. Windows of each length run apart, so nothing depends on the batch."""
    torch.manual_seed(0)
    model = motif_model(
        max_tokens=130, span_decoding="bio", backbone_overrides={"attention_pattern": pattern}
    )
    with torch.no_grad():  # sharp attention, as a trained model's: which blocks a query sees matters
        for name, param in model.named_parameters():
            if any(k in name for k in ("query", "key", "value", "classifier")) and name.endswith("weight"):
                param.mul_(10)
    rng = random.Random(1)
    records = [
        (f"r{k}", "".join(rng.choice("ACGT") for _ in range(n))) for k, n in enumerate([300, 77, 250, 90])
    ]
    runs = [list(GenomeScanner(model, DNATokenizer(), window=128, batch_size=b)
                 .scan(MemoryFasta(records), progress=False)) for b in (1, 8)]  # fmt: skip
    assert len(runs[0]) > 5 and runs[1] == runs[0]
    full, short = records[0][1][:128], records[1][1][:70]
    scanner = GenomeScanner(model, DNATokenizer(), window=128, batch_size=8)
    assert np.array_equal(scanner.predict([full, short, full])[1], scanner.predict([short])[0])


def test_script_refuses_an_output_that_would_replace_an_input_or_is_a_folder(tmp_path, monkeypatch, capsys):
    """Checked before any scan: the FASTA's index, the --pwm file, a file in the MODEL folder (also through a
    symlink, a hard link or ``..``), and an existing folder are no output paths."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "m.jaspar").write_text(">MA0139.2 CTCF\n")
    (tmp_path / "link.jaspar").symlink_to(tmp_path / "m.jaspar")
    os.link(tmp_path / "m.jaspar", tmp_path / "hard.jaspar")
    (tmp_path / "dir").mkdir()
    pwm = ["g.fa", "--pwm", "m.jaspar", "--motif-ids", "MA0139.2", "--out", "x.bed"]
    model = ["model", "g.fa", "--out", "x.bed"]
    for argv, message in [
        (pwm + ["--summary", "m.jaspar"], "--pwm and --summary name the same file m.jaspar"),
        (pwm[:-1] + ["link.jaspar"], "--pwm and --out name the same file link.jaspar"),
        (pwm + ["--gff", "hard.jaspar"], "--pwm and --gff name the same file hard.jaspar"),
        (pwm[:-1] + ["g.fa.fai", "--write-index"], "the FASTA's index and --out name the same file g.fa.fai"),
        (
            pwm + ["--summary", "./g.fa.gzi"],
            "the FASTA's .gzi index and --summary name the same file ./g.fa.gzi",
        ),
        (
            model + ["--summary", "model/config.json"],
            "MODEL and --summary: model/config.json is inside the model",
        ),
        (model[:-1] + ["dir/../model/new.bed"], "MODEL and --out: dir/../model/new.bed is inside the model"),
        (model + ["--pwm", "m.jaspar", "--pwm-out", "m.jaspar"], "--pwm and --pwm-out name the same file"),
        (model[:-1] + ["dir"], "--out dir is a folder; name a file"),
        (
            model + ["--summary", str(tmp_path / "dir")],
            f"--summary {tmp_path / 'dir'} is a folder; name a file",
        ),
        (model + ["--device", "meta"], "--device meta: a meta device holds no data"),
    ]:
        with pytest.raises(SystemExit) as e:
            scan_genome.parse_args(argv)
        last = capsys.readouterr().err.splitlines()[-1]
        assert e.value.code == 2 and f": error: {message}" in last, (argv, last)
    assert scan_genome.parse_args(model + ["--summary", "model.json", "--gff", "dir/x.gff3"]).out == "x.bed"


def test_scan_sequence_names_an_invalid_character_and_its_position():
    scanner = GenomeScanner(motif_model(max_tokens=130), DNATokenizer(), window=64)
    for seq, message in [
        ("ACGTAé" + "ACGT" * 10, "record 'sequence': invalid character 'é' at position 5"),
        ("ACGT" * 10 + "\nACGT", r"record 'sequence': invalid character '\\n' at position 40"),
        ("ACGT" * 3 + "✓X", "record 'sequence': invalid character '✓' at position 12"),
    ]:
        with pytest.raises(ValueError, match=message):
            scanner.scan_sequence(seq)
    with pytest.raises(ValueError, match="device='meta': a meta tensor holds no data"):
        GenomeScanner(motif_model(max_tokens=130), DNATokenizer(), device="meta")
