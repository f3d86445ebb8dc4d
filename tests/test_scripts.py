"""Every script's --help prints its help and does nothing else (no training, no benchmark, no files)."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.script_loader import load_script, usage_error
from tests.training.helpers import subprocess_env

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "scripts").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_prints_help_and_does_nothing_else(script, tmp_path):
    proc = subprocess.run([sys.executable, str(script), "--help"], cwd=tmp_path, env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:"), proc.stdout[:500]
    assert list(tmp_path.iterdir()) == []  # wrote nothing


def test_demo_user_error_is_one_line(tmp_path, capsys):
    demo = load_script("demo")
    argv = ["--output_dir", str(tmp_path / "out"), "--override", "motifs=[NOTAMOTIF]"]
    assert demo.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "NOTAMOTIF" in err and "Traceback" not in err


def test_demo_example_length_is_checked_before_training(tmp_path, capsys):
    """The example plants up to 8 motifs of up to 20 bases: a shorter one is refused before training."""
    demo = load_script("demo")
    err = usage_error(demo.main, ["--output_dir", str(tmp_path / "out"), "--example_length", "100"], capsys)
    assert "--example_length must be at least 160 bases" in err and "got 100" in err
    assert not (tmp_path / "out").exists()


def test_demo_with_a_classification_recipe_shows_no_motif_example(tmp_path, capsys):
    """A sequence classifier (no motifs): no example spans, no span F1 line, exit 0."""
    import json

    data = tmp_path / "data"
    data.mkdir()
    for split, n in (("train", 8), ("validation", 4), ("test", 4)):
        rows = [{"sequence": ("GC" if i % 2 else "AT") * 15, "label": i % 2} for i in range(n)]
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = {"task": "dna-motif-detection", "data": "classification", "data_dir": str(data), "max_length": 64,
              "attention_window": 16, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
              "intermediate_size": 32, "max_steps": 1, "eval_strategy": "no", "save_strategy": "no",
              "report_to": "none", "disable_tqdm": True, "plots": False, "model_card": False,
              "attention_plot": False, "output_dir": str(tmp_path / "out")}  # fmt: skip
    (tmp_path / "recipe.yaml").write_text(json.dumps(recipe))  # JSON is YAML
    demo = load_script("demo")
    assert demo.main(["--recipe", str(tmp_path / "recipe.yaml")]) == 0
    out = capsys.readouterr().out
    assert "no example: the model has no motif head" in out and "span F1" not in out
    assert "| accuracy |" in out
