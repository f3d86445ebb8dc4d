"""scripts/benchmark_attention.py: what it refuses before measuring anything."""

import sys

import pytest

from tests.script_loader import load_script, usage_error


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
        (["--sizes", "0", "--out", "x"], "--sizes must be >= 1, got 0"),
        (["--sizes", "1024", "-512", "--out", "x"], "--sizes must be >= 1, got -512"),
        (["--quick", "--budget-s", "-1", "--out", "x"], "--budget-s must be >= 0 (0: one timed call), got -1.0"),
        (["--max-call-s", "0", "--out", "x"], "--max-call-s must be > 0, got 0.0"),
        (["--attempts", "0", "--out", "x"], "--attempts must be >= 1, got 0"),
        (["--only", "Longformer", "--sizes", "1000", "--out", "x"], "--sizes 1000: Longformer layer (0 global) needs a multiple of its window 512"),
        (["--quick", "--sizes", "1000", "--out", "x"], "--sizes 1000: Longformer layer (0 global) needs a multiple of its window 512"),
    ],
)  # fmt: skip
def test_a_typo_or_a_partial_run_into_the_committed_results_is_refused(
    tmp_path, monkeypatch, capsys, argv, message
):
    bench = load_script("benchmark_attention")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench, "run_all", lambda args: pytest.fail("measured"))
    monkeypatch.setattr(sys, "argv", ["benchmark_attention.py", *argv])
    assert message in usage_error(lambda argv: bench.main(), argv, capsys).splitlines()[-1]
    assert list(tmp_path.iterdir()) == []  # no folder, no empty attention.json


def _args_of_run(bench, monkeypatch, argv) -> dict:
    """What main would measure (run_all stubbed: nothing runs, nothing is written)."""
    seen = {}

    def run_all(args):
        seen.update(sizes=args.sizes, budget_s=args.budget_s, only=args.only)
        raise SystemExit(0)

    monkeypatch.setattr(bench, "run_all", run_all)
    with pytest.raises(SystemExit):
        bench.main(argv)
    return seen


def test_quick_sets_defaults_only_for_what_was_not_given(tmp_path, monkeypatch):
    bench = load_script("benchmark_attention")
    out = ["--out", str(tmp_path)]
    given = _args_of_run(
        bench, monkeypatch, ["--quick", "--sizes", "2048", "--budget-s", "10", "--only", "flex", *out]
    )
    assert given == {"sizes": [2048], "budget_s": 10.0, "only": ["flex"]}
    quick = _args_of_run(bench, monkeypatch, ["--quick", *out])
    assert quick == {
        "sizes": [1024, 4096],
        "budget_s": 1.0,
        "only": ["blocked SlidingWindow", "Longformer layer (0"],
    }
    full = _args_of_run(bench, monkeypatch, [])
    assert full == {"sizes": bench.SIZES, "budget_s": 20.0, "only": None}  # fmt: skip


def test_the_hf_sparse_kernels_take_any_size_from_1(tmp_path, monkeypatch):
    """Only LongformerSelfAttention needs a multiple of its window; --budget-s 0 is one timed call."""
    bench = load_script("benchmark_attention")
    argv = ["--only", "hf-sparse", "SDPA", "--sizes", "1", "1000", "--budget-s", "0", "--out", str(tmp_path)]
    assert _args_of_run(bench, monkeypatch, argv)["sizes"] == [1, 1000]


def test_cuda_without_a_cuda_device_is_one_clear_error(monkeypatch, capsys):
    bench = load_script("benchmark_attention")
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(bench, "run_all", lambda args: pytest.fail("measured"))
    assert (
        "--device cuda: torch "
        in usage_error(bench.main, ["--device", "cuda", "--out", "x"], capsys).splitlines()[-1]
    )


@pytest.mark.parametrize(
    "n, label", [(256, "256"), (512, "512"), (1024, "1k"), (1536, "1536"), (65536, "64k")]
)
def test_size_labels(n, label):
    assert load_script("benchmark_attention").size_label(n) == label


def test_a_partial_run_reports_the_sizes_it_ran(tmp_path):
    """--sizes 256 512: targets say t(1k)/t(512) (not t(1k)/t(0k)), the scaling table has the step 256->512."""
    bench = load_script("benchmark_attention")
    kernel = "hf-sparse blocked SlidingWindow(512)"
    records = [
        {"kernel": kernel, "n": n, "mode": mode, "time_s": t, "peak_mb": 1.0, "x_bound": 1.0,
         "matmul_before": 100.0, "matmul_after": 100.0}
        for n, t in ((256, 0.1), (512, 0.3)) for mode in ("fwd", "fwd+bwd")
    ]  # fmt: skip
    results = {"machine": {"processor": "cpu", "threads": 1, "torch": "t", "device": "cpu"},
               "matmul_gflops": 100.0, "records": records}  # fmt: skip
    bench.write_markdown(results, str(tmp_path / "attention.md"))
    md = (tmp_path / "attention.md").read_text()
    assert "| SlidingWindow(512) fwd t(1k)/t(512) | — |" in md and "0k" not in md
    assert "| kernel | mode | 256->512 | matmul (GFLOP/s) |\n|---|---|---|---|" in md
    assert f"| {kernel} | fwd | 3.00 | 100 -> 100 |" in md
