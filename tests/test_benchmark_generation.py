"""scripts/benchmark_generation.py: what it refuses before measuring anything, and where it writes."""

import json

import pytest

from tests.script_loader import load_script, usage_error


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "0", "--out", "x"], "--steps must be >= 1, got 0"),
        (["--repeats", "0", "--out", "x"], "--repeats must be >= 1, got 0"),
        (["--sizes", "0", "--out", "x"], "--sizes must be >= 1, got 0"),
        (["--sizes", "1024", "255", "--out", "x"], "--sizes 255 is too short for SlidingWindow(512) (the models hold 2 x n positions): "),
        (["--sizes"], "--sizes: expected at least one argument"),
        (["--sizes", "1024"], "--sizes writes a partial table: give --out (the default, benchmarks, holds"),
    ],
)  # fmt: skip
def test_bad_arguments_and_a_partial_run_into_the_committed_results_are_refused(
    argv, message, tmp_path, monkeypatch, capsys
):
    bench = load_script("benchmark_generation")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench, "run_size", lambda *a: pytest.fail("measured"))
    assert message in usage_error(bench.main, argv, capsys).splitlines()[-1]
    assert list(tmp_path.iterdir()) == []


def test_the_smallest_size_every_pattern_fits_runs_into_its_folder(tmp_path, monkeypatch):
    bench = load_script("benchmark_generation")
    monkeypatch.chdir(tmp_path)
    row = dict(model="m", n=256, ms_per_token=1.0, x_bytes=1.0, stored_mb=1.0, speedup_vs_llama=1.0, prefill_s=1.0,
               matmul_before=1.0, matmul_after=1.0, read_before=1.0, read_after=1.0)  # fmt: skip
    monkeypatch.setattr(
        bench, "run_size", lambda names, n, steps, repeats: [dict(row, model=m) for m in names]
    )
    bench.main(["--sizes", "256", "--steps", "1", "--repeats", "1", "--out", "quick"])
    results = json.loads((tmp_path / "quick" / "generation.json").read_text())
    assert len(results["rows"]) == 9 and (tmp_path / "quick" / "generation.md").read_text() == bench.report(
        results
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quick"]


def test_an_interrupted_write_leaves_the_previous_tables_whole(tmp_path, monkeypatch):
    bench = load_script("benchmark_generation")
    for name in ("generation.json", "generation.md"):
        (tmp_path / name).write_text("old")
    monkeypatch.setattr(bench, "run_size", lambda *a: [])

    def rename_fails(src, dst):
        raise OSError("no space left on device")

    monkeypatch.setattr("os.replace", rename_fails)
    with pytest.raises(OSError, match="no space left"):
        bench.main(["--sizes", "256", "--out", str(tmp_path)])
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {
        "generation.json": "old",
        "generation.md": "old",
    }
