"""scripts/benchmark_dialogue.py writes the Markdown/JSON report from the runs' results (no training here)."""

import json
from pathlib import Path

import pytest

from tests import script_loader

REPO = Path(__file__).resolve().parents[2]


def load_script():
    return script_loader.load_script("benchmark_dialogue")


def fake_results(name, metrics, long_history):
    return {
        **metrics,
        "extras": {"long_history": long_history},
        "wall_time_s": 600.0,
        "train_runtime": 500.0,
        "output_dir": f"/tmp/{name}",
        "num_parameters": 123456,
        "global_step": 100,
        "epoch": 2.0,
        "recipe": {"source": str(REPO / "pipelines" / "dialogue" / f"tiny-{name}.yaml"), "overrides": []},
    }


def both_results():
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
    assert report["random_r10"]["mrr"] == sum(1 / k for k in range(1, 11)) / 10


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
