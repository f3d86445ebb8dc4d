"""scripts/benchmark_motif.py --skip-training: the tables from runs already there, each file replaced whole."""

import json

import pytest

from tests.script_loader import load_script


def test_tables_from_existing_runs_and_an_interrupted_write_replaces_nothing(tmp_path, monkeypatch):
    bench = load_script("benchmark_motif")
    run = tmp_path / "outputs" / "bench-motif-tiny"
    run.mkdir(parents=True)
    results = {"wall_time_s": 60.0, "global_step": 10, "num_parameters": 1000, "test_span_f1": 0.95}
    (run / "all_results.json").write_text(json.dumps(results))
    argv = [
        "--recipes",
        "tiny",
        "--skip-training",
        "--outputs",
        str(tmp_path / "outputs"),
        "--out",
        str(tmp_path / "b"),
    ]
    assert bench.main(argv) == 0
    written = {p.name: p.read_text() for p in (tmp_path / "b").iterdir()}
    assert set(written) == {"motif.json", "motif.md"} and "| test_span_f1 | 0.9500 |" in written["motif.md"]
    assert json.loads(written["motif.json"])["runs"]["tiny"]["target"]["met"] is True

    def rename_fails(src, dst):
        raise OSError("no space left on device")

    monkeypatch.setattr("os.replace", rename_fails)
    (run / "all_results.json").write_text(json.dumps(dict(results, test_span_f1=0.5)))
    with pytest.raises(OSError, match="no space left"):
        bench.main(argv)
    assert {p.name: p.read_text() for p in (tmp_path / "b").iterdir()} == written
