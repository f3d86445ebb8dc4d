"""scripts/benchmark_models.py: the FLOP bound's count, what it refuses before measuring, its report."""

import json
import sys

import pytest
import torch

from tests.script_loader import load_script, usage_error

SMALL = dict(hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=2, vocab_size=64)


@pytest.mark.parametrize(
    "name",
    [
        "SparseTransformerForMaskedLM",
        "SparseTransformerForMaskedLM (converted Longformer)",
        "LongformerForMaskedLM",
        "RobertaForMaskedLM (dense SDPA)",
    ],
)
def test_linear_flops_are_the_ones_a_forward_runs(name, monkeypatch):
    """Every nn.Linear over the n tokens, except Longformer's query_global: it runs on the global token only."""
    bench = load_script("benchmark_models")
    monkeypatch.setattr(bench, "SHAPE", SMALL)
    n = bench.WINDOW  # one attention window: Longformer pads nothing
    torch.manual_seed(0)
    model = bench.build(name, n).eval()
    done = []
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.register_forward_hook(lambda mod, i, o: done.append(2 * i[0].numel() * mod.out_features))
    ids = torch.randint(5, SMALL["vocab_size"], (1, n))
    gm = torch.zeros_like(ids)
    gm[:, 0] = 1
    with torch.no_grad():
        model(input_ids=ids, **({} if name.startswith("Roberta") else {"global_attention_mask": gm}))
    assert bench.step_flops(name, model, n)["linear_flops"] == sum(done)


def _refused(bench, argv, monkeypatch, capsys):
    monkeypatch.setattr(bench, "_measure", lambda *a: pytest.fail("measured"))
    monkeypatch.setattr(sys, "argv", ["benchmark_models.py", *argv])
    return usage_error(bench.main, argv, capsys).splitlines()[-1]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--only", "Nomatch", "--out", "x"], "--only Nomatch matches no model; choose from SparseTransformerForMaskedLM; "),
        (["--only", "Roberta"], "--only and --sizes write a partial table: give --out (the default, benchmarks, holds"),
        (["--sizes", "512"], "--only and --sizes write a partial table: give --out"),
        (["--sizes", "0", "--out", "x"], "--sizes must be >= 1, got 0"),
        (["--sizes", "4096", "-512", "--out", "x"], "--sizes must be >= 1, got -512"),
        (["--budget-s", "-1", "--out", "x"], "--budget-s must be >= 0 (0: one timed call), got -1.0"),
        (["--attempts", "0", "--out", "x"], "--attempts must be >= 1, got 0"),
        (["--sizes", "4096", "253", "--out", "x"], "--sizes 253 is too short for SparseTransformerForMaskedLM (n + 2 positions): attention_pattern: "),
    ],
)  # fmt: skip
def test_a_typo_or_a_partial_run_into_the_committed_results_is_refused(
    argv, message, tmp_path, monkeypatch, capsys
):
    bench = load_script("benchmark_models")
    monkeypatch.chdir(tmp_path)
    assert message in _refused(bench, argv, monkeypatch, capsys)
    assert list(tmp_path.iterdir()) == []


def test_sizes_needs_a_value(tmp_path, monkeypatch, capsys):
    bench = load_script("benchmark_models")
    monkeypatch.chdir(tmp_path)
    assert "--sizes: expected at least one argument" in _refused(bench, ["--sizes"], monkeypatch, capsys)


def _record(bench, name, n):
    return {"model": name, "n": n, "matmul_before": 100.0, "matmul_after": 100.0, "time_s": 1.0,
            "tokens_per_s": n / 1.0, "reps": 1, "peak_rss_mb": 1.0, "profile_s": {"matmul": 0.5},
            "bound_s": 0.5, "x_bound": 2.0}  # fmt: skip


def test_a_partial_run_writes_its_folder_and_the_report_renders_from_the_json(tmp_path, monkeypatch):
    bench = load_script("benchmark_models")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench, "_measure", lambda name, n, budget, env: _record(bench, name, n))
    bench.main(["--sizes", "512", "--only", "Longformer", "--out", "subset"])
    results = json.loads((tmp_path / "subset" / "models.json").read_text())
    assert [r["model"] for r in results["records"]] == [
        "SparseTransformerForMaskedLM (converted Longformer)",
        "LongformerForMaskedLM",
        "LongformerForMaskedLM (attention dropout 0.1)",
    ]
    assert (tmp_path / "subset" / "models.md").read_text() == bench.report(results)
    assert "| LongformerForMaskedLM | 512 | 512 | 1.00 | 2.00x |" in bench.report(results)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["subset"]  # benchmarks/ untouched


def test_the_shortest_sizes_each_model_takes_reach_the_measurement(tmp_path, monkeypatch):
    """254 tokens for SparseTransformerForMaskedLM (window 512: positions to 256), any n >= 1 for the others."""
    bench = load_script("benchmark_models")
    monkeypatch.chdir(tmp_path)
    measured = []
    monkeypatch.setattr(
        bench, "_measure", lambda name, n, budget, env: measured.append((name, n)) or _record(bench, name, n)
    )
    bench.main(["--sizes", "254", "--only", "SparseTransformerForMaskedLM", "--out", "a"])
    bench.main(["--sizes", "1", "--only", "LongformerForMaskedLM", "RobertaForMaskedLM", "--out", "b"])
    assert {n for name, n in measured if name.startswith("SparseTransformer")} == {254}
    assert {n for name, n in measured if not name.startswith("SparseTransformer")} == {1}
