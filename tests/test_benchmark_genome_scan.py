"""scripts/benchmark_genome_scan.py: where it writes (the scans stubbed: no subprocess, no genome)."""

import json

import pytest

from tests.script_loader import load_script

RUN = {"wall_s": 10.0, "cpu_s": 9.0, "peak_rss_mb": 500, "load_before": [1.0], "load_after": [1.5],
       "summary": {"bases": 3000, "model": {"window": 254, "batch_size": 8, "workers": 2, "threads": 1, "hits": 4,
                                            "scan_s": 1.5, "bases_per_s": 2000}}}  # fmt: skip
BED = {"hits": 4, "sorted": True, "in_bounds": True, "strands": ["+", "-"]}


@pytest.fixture
def bench(monkeypatch):
    module = load_script("benchmark_genome_scan")
    monkeypatch.setattr(module, "scan", lambda *a, **k: json.loads(json.dumps(RUN)))
    monkeypatch.setattr(module, "check_bed", lambda path, fasta: dict(BED))
    return module


def test_a_new_out_folder_gets_the_json_and_the_md_of_its_tables(bench, tmp_path, capsys):
    out = tmp_path / "new" / "bench"
    bench.main(
        ["--model", str(tmp_path / "m"), "--parts", "ecoli", "--work", str(tmp_path / "w"), "--out", str(out)]
    )
    results = json.loads((out / "genome_scan.json").read_text())
    assert results["ecoli"] == {"model": RUN, "bed": BED}
    md = (out / "genome_scan.md").read_text()
    tables = bench.markdown(results)
    assert md.startswith("# Genome-scale motif scanning\n") and md.endswith("## Results\n\n" + tables + "\n")
    assert "| model, window 254, batch 8, 2 worker(s) x 1 thread(s) | 3,000 | 4 | 10.0 |" in md
    assert tables in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["genome_scan.json", "genome_scan.md"]


def test_a_run_adds_its_part_and_an_interrupted_write_replaces_nothing(bench, tmp_path, monkeypatch):
    argv = ["--model", str(tmp_path / "m"), "--work", str(tmp_path / "w"), "--out", str(tmp_path)]
    bench.main([*argv, "--parts", "ecoli"])
    bench.main([*argv, "--parts", "ecoli-pwm"])  # merged into the json: the model row stays
    before = {p.name: p.read_text() for p in tmp_path.glob("genome_scan.*")}
    assert set(json.loads(before["genome_scan.json"])["ecoli"]) == {"model", "bed", "pwm"}

    def rename_fails(src, dst):
        raise OSError("no space left on device")

    monkeypatch.setattr("os.replace", rename_fails)
    with pytest.raises(OSError, match="no space left"):
        bench.main([*argv, "--parts", "ecoli"])
    assert {p.name: p.read_text() for p in tmp_path.glob("genome_scan.*")} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["genome_scan.json", "genome_scan.md", "w"]
