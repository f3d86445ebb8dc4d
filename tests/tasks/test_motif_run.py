"""The tiny motif recipe as a user runs it: bf16 on CPU, files readable under the umask, no pickles in the
final model folder, no pin_memory warning."""

import os
import stat
import warnings

import pytest

from tests.tasks.test_motif import FAST, RECIPES
from tests.training.helpers import load_finetune_module


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bf16") / "out"
    old = os.umask(0o022)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            code = load_finetune_module().main([
                str(RECIPES / "tiny.yaml"), "--output_dir", str(out), "--override", *FAST,
                "bf16=true", "use_cpu=true", "max_steps=3", "save_strategy=steps", "save_steps=3",
                "eval_strategy=no", "report_to=none", "attention_plot=false",
            ])  # fmt: skip
    finally:
        os.umask(old)
    return out, code, [str(w.message) for w in caught]


def test_bf16_recipe_finishes_on_cpu(bf16_run):
    import json

    out, code, _ = bf16_run
    assert code == 0
    results = json.loads((out / "all_results.json").read_text())
    assert results["global_step"] == 3 and results["recipe"]["values"]["bf16"] is True
    assert results["train_loss"] == results["train_loss"]  # not NaN


def test_saved_files_follow_the_umask(bf16_run):
    out, _, _ = bf16_run
    for name in ("config.json", "model.safetensors", "README.md", "hf_sparse_bundle.json", "all_results.json",
                 "tokenizer_config.json", "checkpoint-3/model.safetensors", "checkpoint-3/config.json"):  # fmt: skip
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644, name


def test_no_pickles_in_the_final_model_folder(bf16_run):
    out, _, _ = bf16_run
    pickles = [p.name for p in out.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl")]
    assert pickles == []
    assert (out / "checkpoint-3" / "training_args.bin").is_file()  # the Trainer's resume needs its own


def test_no_pin_memory_warning_without_a_gpu(bf16_run):
    _, _, messages = bf16_run
    assert not [m for m in messages if "pin_memory" in m]


def test_without_matplotlib_the_run_finishes_without_its_plots(tmp_path, monkeypatch, caplog):
    """matplotlib comes with the ``viz`` extra only: a run without it skips the plots with a warning, after
    which nothing is lost (results, card, model)."""
    import json
    import sys

    for name in ("matplotlib", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, name, None)  # `import matplotlib` raises ImportError
    out = tmp_path / "out"
    code = load_finetune_module().main([
        str(RECIPES / "tiny.yaml"), "--output_dir", str(out), "--override", *FAST, "max_steps=2",
        "eval_strategy=no", "save_strategy=no", "report_to=none", "plots=true",
    ])  # fmt: skip
    assert code == 0
    assert json.loads((out / "all_results.json").read_text())["global_step"] == 2
    assert (out / "README.md").is_file() and (out / "model.safetensors").is_file()
    assert not list(out.glob("*.png"))
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert any("loss plot skipped" in m for m in skipped) and any("motif plots skipped" in m for m in skipped)
    assert all("pip install 'hf-sparse[viz]'" in m for m in skipped), skipped
