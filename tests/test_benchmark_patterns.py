"""scripts/benchmark_patterns.py: a time as a multiple of its FLOP bound."""

import pytest

from tests.script_loader import load_script, usage_error


@pytest.mark.parametrize("mode, times", [("fwd", 1), ("fwd+bwd", 3)])
def test_bound_counts_the_pairs_per_pass_and_the_hashing_once(mode, times):
    bench = load_script("benchmark_patterns")
    pairs, hashing, rate = 1000, 5e6, 1e9
    rec = bench._with_ratios({"time_s": 1.0, "pairs": pairs, "extra_flops": hashing}, mode, rate)
    attention = 4 * pairs * bench.D * times / rate
    assert rec["x_bound"] == pytest.approx(1.0 / attention)
    assert rec["x_bound_with_selection"] == pytest.approx(1.0 / (attention + hashing / rate))
    assert "x_bound_with_selection" not in bench._with_ratios(
        {"time_s": 1.0, "pairs": 1, "extra_flops": 0}, mode, rate
    )


def test_only_matching_nothing_is_an_error_before_any_measurement(tmp_path, monkeypatch, capsys):
    bench = load_script("benchmark_patterns")
    monkeypatch.setattr(bench, "run", lambda *a: pytest.fail("measured"))
    argv = ["--only", "LSH", "SlidingWindw", "--out", str(tmp_path)]  # one typo is enough
    err = usage_error(bench.main, argv, capsys).splitlines()[-1]
    assert "--only SlidingWindw matches no pattern; choose from SlidingWindow(512); " in err
    assert list(tmp_path.iterdir()) == []


def test_a_subset_needs_its_own_out_folder(tmp_path, monkeypatch, capsys):
    bench = load_script("benchmark_patterns")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench, "run", lambda *a: pytest.fail("measured"))
    # would replace benchmarks/patterns.md's full table with one row
    assert "--only writes a partial table: give --out" in usage_error(bench.main, ["--only", "LSH"], capsys)
    rows = []
    monkeypatch.setattr(bench, "run", lambda names, *a: {"names": names, "rows": rows})
    monkeypatch.setattr(bench, "report", lambda results: "table\n")
    bench.main(["--only", "LSH", "--out", "subset"])
    assert (tmp_path / "subset" / "patterns.md").read_text() == "table\n"
    assert not (tmp_path / "benchmarks").exists()


def test_zero_attempts_is_an_error_before_any_measurement(tmp_path, monkeypatch, capsys):
    bench = load_script("benchmark_patterns")
    monkeypatch.setattr(bench, "_spawn", lambda *a: pytest.fail("measured"))
    err = usage_error(bench.main, ["--only", "LSH", "--attempts", "0", "--out", str(tmp_path)], capsys)
    assert "--attempts must be >= 1, got 0" in err.splitlines()[-1]


def test_an_interrupted_write_leaves_the_previous_tables_whole(tmp_path, monkeypatch):
    """The files are replaced whole (written aside, then renamed): a write that fails replaces nothing."""
    bench = load_script("benchmark_patterns")
    for name in ("patterns.json", "patterns.md"):
        (tmp_path / name).write_text("old")
    monkeypatch.setattr(bench, "run", lambda names, *a: {"names": names, "rows": []})
    monkeypatch.setattr(bench, "report", lambda results: "table\n")

    def rename_fails(src, dst):
        raise OSError("no space left on device")

    monkeypatch.setattr("os.replace", rename_fails)
    with pytest.raises(OSError, match="no space left"):
        bench.main(["--only", "LSH", "--out", str(tmp_path)])
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {
        "patterns.json": "old",
        "patterns.md": "old",
    }
