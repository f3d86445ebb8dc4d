"""scripts/benchmark_genome_scan.py: the E. coli row alone (the 5-minute target), run end to end on a small
stand-in genome, and its verdict against the targets."""

import json
import shutil

import pytest

from tests.genome.test_scan import planted_genome, save_model, write_fasta
from tests.script_loader import load_script

bench = load_script("benchmark_genome_scan")


def run(r_wall, r_rss):
    return {"wall_s": r_wall, "cpu_s": 1.0, "peak_rss_mb": r_rss, "load_before": [1.0], "load_after": [2.0]}


def test_verdict_checks_both_targets():
    assert bench.verdict(run(300, 2048)).startswith("meets the targets")
    assert bench.verdict(run(300.1, 500)).startswith("misses")
    assert bench.verdict(run(100, 2049)).startswith("misses")


@pytest.mark.skipif(shutil.which("/usr/bin/time") is None, reason="needs /usr/bin/time -v")
def test_parts_ecoli_runs_only_the_model_row(tmp_path, monkeypatch, capsys):
    genome = write_fasta(tmp_path, planted_genome(seed=6))["gzip"]
    monkeypatch.setattr(bench, "ECOLI", str(genome))
    out = tmp_path / "bench"
    out.mkdir()
    bench.main(["--model", str(save_model(tmp_path)), "--parts", "ecoli", "--work", str(tmp_path / "w"),
                "--out", str(out), "--workers", "2"])  # fmt: skip
    results = json.loads((out / "genome_scan.json").read_text())
    assert set(results) == {"model", "ecoli"} and set(results["ecoli"]) == {"model", "bed"}
    model = results["ecoli"]["model"]
    assert model["summary"]["model"]["workers"] == 2 and model["cpu_s"] > 0 and model["peak_rss_mb"] > 0
    assert results["ecoli"]["bed"]["sorted"] and results["ecoli"]["bed"]["in_bounds"]
    assert "E. coli model run meets the targets" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse_args(["--model", "m", "--parts", "yeast"])
