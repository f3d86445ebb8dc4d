"""scripts/benchmark_dialogue.py writes the Markdown/JSON report from the runs' results (no training here)."""

import json
from pathlib import Path

import pytest

from tests import script_loader

REPO = Path(__file__).resolve().parents[2]


def load_script():
    return script_loader.load_script("benchmark_dialogue")


SGD = {"train": 2400, "validation": 300, "test": 300}


def fake_results(name, metrics, long_history, data=None, values=None):
    data = (
        {"dialogues": SGD, **({"acts": 18, "intents": 30} if name == "tracking" else {})}
        if data is None
        else data
    )
    return {
        **metrics,
        "extras": {"long_history": long_history, "data": data},
        "wall_time_s": 600.0,
        "train_runtime": 500.0,
        "output_dir": f"/tmp/{name}",
        "num_parameters": 123456,
        "global_step": 100,
        "epoch": 2.0,
        "recipe": {"source": str(REPO / "pipelines" / "dialogue" / f"tiny-{name}.yaml"), "overrides": [],
                   "values": {"data_dir": str(REPO / "data" / "sgd"), **(values or {})}},
    }  # fmt: skip


def both_results(**selection_values):
    tracking = fake_results(
        "tracking",
        {"test_act_micro_f1": 0.9, "test_act_macro_f1": 0.75, "test_intent_accuracy": 0.8,
         "test_intent_accuracy_seen": 0.85, "test_intent_accuracy_unseen": 0.0, "test_n_intent_seen": 90,
         "test_n_intent_unseen": 10, "eval_act_macro_f1": 0.7, "eval_act_micro_f1": 0.9,
         "eval_intent_accuracy_seen": 0.8},
        {"full_history": {"intent_accuracy_seen": 0.8, "act_macro_f1": 0.7, "act_micro_f1": 0.9, "n": 300},
         "last_2_turns": {"intent_accuracy_seen": 0.5, "act_macro_f1": 0.6, "act_micro_f1": 0.8, "n": 300}},
    )  # fmt: skip
    selection = fake_results(
        "selection",
        {"test_recall@1": 0.65, "test_recall@2": 0.8, "test_recall@5": 0.95, "test_mrr": 0.77,
         "eval_recall@1": 0.6, "eval_recall@2": 0.7, "eval_recall@5": 0.9, "eval_mrr": 0.7},
        {"full_history": {"recall@1": 0.7, "mrr": 0.8, "n": 300}, "last_2_turns": {"recall@1": 0.6, "mrr": 0.7, "n": 300}},
        values=selection_values,
    )  # fmt: skip
    return tracking, selection


def test_report_states_results_targets_and_misses(tmp_path):
    script = load_script()
    tracking, selection = both_results()
    out = tmp_path / "dialogue"
    report = script.write_report(tracking, selection, str(out), "python scripts/benchmark_dialogue.py")
    md = (tmp_path / "dialogue.md").read_text()
    assert json.loads((tmp_path / "dialogue.json").read_text()) == report
    assert "| R10@1 (1 true + 9 responses of other dialogues) | 0.650 | >= 0.6 | yes | 0.100 |" in md
    assert "| per-turn act macro-F1 (18 acts) | 0.750 | >= 0.8 | **no** |" in md  # a miss is shown as one
    assert "intents unseen in training (10 user turns) | 0.000 | reported" in md
    assert "| response selection: last response | R10@1 | 0.700 | 0.600 | 300 |" in md
    assert "| tracking: last user turn | intent accuracy (seen) | 0.800 | 0.500 | 300 |" in md
    assert "`pipelines/dialogue/tiny-tracking.yaml` | 123,456 | 2.000 | 100 | 10.0 min |" in md
    assert "on the dialogues in `data/sgd` (2,400 train / 300 validation / 300 test dialogues)" in md
    assert report["random"]["mrr"] == sum(1 / k for k in range(1, 11)) / 10


def test_report_takes_counts_acts_and_candidates_from_the_runs(tmp_path):
    """Nothing about the data is fixed text: other data, other limits, other n_negatives."""
    script = load_script()
    tracking, selection = both_results(n_negatives=4)
    tracking["extras"]["data"] = {
        "dialogues": {"train": 40, "validation": 10, "test": 10},
        "acts": 5,
        "intents": 3,
    }
    selection["extras"]["data"] = {"dialogues": {"train": 40, "validation": 10}}
    report = script.write_report(tracking, selection, str(tmp_path / "dialogue"), "cmd")
    md = (tmp_path / "dialogue.md").read_text()
    assert "`data/sgd` (40 train / 10 validation / 10 test dialogues) (tracking) and `data/sgd` (40 train / " \
        "10 validation dialogues) (selection)" in md  # fmt: skip
    assert "| per-turn act macro-F1 (5 acts) | 0.750 |" in md
    assert "| R5@1 (1 true + 4 responses of other dialogues) | 0.650 | >= 0.6 | yes | 0.200 |" in md
    assert "| R5@5 | 0.950 | | | 1.000 |" in md and "| response selection: last response | R5@1 |" in md
    assert "R10" not in md and "2,400" not in md and "18 acts" not in md
    assert report["candidates"] == 5 and report["random"]["mrr"] == pytest.approx(
        (1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 5
    )


def test_a_failed_report_write_keeps_the_previous_report(tmp_path, monkeypatch):
    """The report files are replaced whole (a temporary file renamed over them), never truncated in place."""
    import os

    script = load_script()
    out = tmp_path / "dialogue"
    for name in ("dialogue.json", "dialogue.md"):
        (tmp_path / name).write_text("previous")
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        script.write_report(*both_results(), str(out), "cmd")
    assert (tmp_path / "dialogue.json").read_text() == "previous"
    assert (tmp_path / "dialogue.md").read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dialogue.json", "dialogue.md"]
