"""scripts/benchmark_attention.py: what it refuses before measuring anything."""

import sys

import pytest

from tests.script_loader import load_script


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--only", "blockd", "--out", "x"],
            "--only blockd matches no kernel; choose from hf-sparse blocked SlidingWindow(512); ",
        ),
        (["--only", "blocked"], "write a partial table: give --out (the default, benchmarks, holds"),
        (["--sizes", "1024"], "write a partial table: give --out"),
        (["--quick"], "write a partial table: give --out"),
    ],
)
def test_a_typo_or_a_partial_run_into_the_committed_results_is_refused(
    tmp_path, monkeypatch, capsys, argv, message
):
    bench = load_script("benchmark_attention")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench, "run_all", lambda args: pytest.fail("measured"))
    monkeypatch.setattr(sys, "argv", ["benchmark_attention.py", *argv])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2 and message in capsys.readouterr().err.splitlines()[-1]
    assert list(tmp_path.iterdir()) == []  # no folder, no empty attention.json
