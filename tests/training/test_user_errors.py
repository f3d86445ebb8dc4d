"""Every user error of scripts/finetune.py is one ``error:`` line naming the key/file/value, exit code 2,
no traceback (``--debug`` shows it); a rerun never deletes checkpoints silently."""

import json
import logging
import shutil
import subprocess

import pytest

from tests.training.helpers import (
    FINETUNE,
    PYTHON,
    REPO_ROOT,
    load_finetune_module,
    subprocess_env,
    toy_recipe,
    write_recipe,
)

RECIPES = REPO_ROOT / "pipelines"


@pytest.fixture(scope="module")
def finetune():
    return load_finetune_module()


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A finished toy run with checkpoint-2 and checkpoint-4."""
    out = tmp_path_factory.mktemp("saved") / "out"
    recipe = toy_recipe(out, max_steps=4, save_strategy="steps", save_steps=2, eval_strategy="no", num_test=0,
                        plots=False)  # fmt: skip
    assert load_finetune_module().main([str(write_recipe(out.parent / "r.yaml", recipe))]) == 0
    return out


def _one_error_line(err: str, *needles: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    "recipe, overrides, needles",
    [
        ("motif/tiny.yaml", ["motifs=[CTCF,NOTAMOTIF]"], ["NOTAMOTIF", "available"]),
        ("motif/tiny.yaml", ["data=classification", "data_dir=/nonexistent"], ["data_dir", "/nonexistent"]),
        (
            "motif/ctcf.yaml",
            ["motif_file=/nonexistent/jaspar.txt"],
            ["motif_file", "/nonexistent/jaspar.txt"],
        ),
        ("motif/ctcf.yaml", ["fasta=/nonexistent/peaks.fa"], ["fasta", "/nonexistent/peaks.fa"]),
        ("dialogue/tiny-tracking.yaml", ["data_dir=/nonexistent"], ["data_dir", "/nonexistent"]),
        ("summarization/tiny-extractive.yaml", ["data_dir=/nonexistent"], ["data_dir", "/nonexistent"]),
        ("motif/tiny.yaml", ["report_to=wandb"], ["report_to='wandb'", "not installed"]),
        ("motif/tiny.yaml", ["num_train_epochs=-1"], ["num_train_epochs=-1", "trains nothing"]),
        ("motif/tiny.yaml", ["num_train_epochs=0"], ["num_train_epochs=0"]),
        ("motif/tiny.yaml", ["max_steps=0"], ["max_steps=0"]),
        ("motif/tiny.yaml", ["per_device_train_batch_size=0"], ["per_device_train_batch_size=0"]),
        ("motif/tiny.yaml", ["learning_rate=-1e-3"], ["learning_rate=-0.001"]),
        ("motif/tiny.yaml", ["learning_rate=inf"], ["learning_rate='inf'", "not a finite number"]),
        ("motif/tiny.yaml", ["num_train_epochs=inf"], ["num_train_epochs='inf'", "not a finite number"]),
        ("motif/tiny.yaml", ["dataloader_num_workers=-1"], ["dataloader_num_workers=-1", ">= 0"]),
        (
            "motif/tiny.yaml",
            ["attention_pattern={type: sliding_window, windw: 16}"],
            ["attention_pattern=", "'windw'"],
        ),
        (
            "dialogue/tiny-tracking.yaml",
            ["global_on=[cls,nonsense]"],
            ["global_on", "['nonsense']", "latest_turn"],
        ),
        (
            "lm/dense.yaml",
            ["model_kwargs={num_expert: 4}"],
            ["model_kwargs", "'num_expert'", "'num_experts'"],
        ),
        (
            "lm/dense.yaml",
            ["model_kwargs={num_experts: 4, num_experts_per_tok: 8}"],
            ["num_experts_per_tok", "8"],
        ),
    ],
)
def test_user_errors_are_one_line_exit_2(recipe, overrides, needles, finetune, tmp_path, capsys):
    argv = [str(RECIPES / recipe), "--output_dir", str(tmp_path / "out"), "--override", *overrides]
    assert finetune.main(argv) == 2
    _one_error_line(capsys.readouterr().err, *needles)
    assert not (tmp_path / "out" / "config.json").exists()  # stopped before training


def test_debug_shows_the_traceback(finetune, tmp_path):
    argv = [
        str(RECIPES / "motif/tiny.yaml"),
        "--output_dir",
        str(tmp_path),
        "--override",
        "motifs=[NOTAMOTIF]",
    ]
    with pytest.raises(Exception, match="NOTAMOTIF"):
        finetune.main([*argv, "--debug"])


@pytest.mark.parametrize(
    "env, name", [("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DeepSpeed")]
)
def test_fsdp_or_deepspeed_without_cuda_is_a_clear_error(env, name, finetune, tmp_path, capsys, monkeypatch):
    """What `accelerate launch --config_file configs/accelerate/{fsdp,deepspeed_zero*}.yaml` sets in each
    worker; without a GPU accelerate would quietly run gloo DDP instead."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA machine can run FSDP/DeepSpeed")
    monkeypatch.setenv(env, "true")
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(tmp_path / "out"))
    assert finetune.main([str(recipe)]) == 2
    _one_error_line(capsys.readouterr().err, name, "no CUDA GPU", "cpu_ddp.yaml")


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth"])
def test_resume_validates_every_file(name, saved_run, finetune, tmp_path, capsys):
    copy = tmp_path / "out"
    shutil.copytree(saved_run / "checkpoint-4", copy / "checkpoint-4")
    path = copy / "checkpoint-4" / name
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])  # truncated
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(copy, max_steps=6, eval_strategy="no", num_test=0))
    assert finetune.main([str(recipe), "--resume"]) == 2
    _one_error_line(capsys.readouterr().err, str(copy / "checkpoint-4"), name, "does not load")


def test_rerun_without_resume_keeps_the_checkpoints(saved_run, tmp_path):
    """The rerun stops with one line naming the folder and both ways forward; nothing is deleted."""
    copy = tmp_path / "out"
    shutil.copytree(saved_run, copy)
    before = sorted(p.name for p in copy.glob("checkpoint-*"))
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(copy, max_steps=4, eval_strategy="no", num_test=0))
    proc = subprocess.run([PYTHON, str(FINETUNE), str(recipe)], cwd=REPO_ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    _one_error_line(proc.stderr, str(copy), "already holds checkpoints", "--resume", "--overwrite_output_dir")
    assert sorted(p.name for p in copy.glob("checkpoint-*")) == before == ["checkpoint-2", "checkpoint-4"]
    # the explicit way forward: the deletion is printed on the console (stderr), not only logged
    proc = subprocess.run([PYTHON, str(FINETUNE), str(recipe), "--overwrite_output_dir", "--override", "max_steps=1",
                           "save_strategy=no", "plots=false"],
                          cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"deleted 2 old checkpoint(s) in {copy} (checkpoint-2, checkpoint-4)" in proc.stderr
    assert "pin_memory" not in proc.stderr  # no GPU here: no pinning, no warning about it
    assert not list(copy.glob("checkpoint-*"))


def test_overwrite_and_resume_are_printed(saved_run, finetune, tmp_path, caplog):
    copy = tmp_path / "out"
    shutil.copytree(saved_run, copy)
    recipe = write_recipe(
        tmp_path / "r.yaml",
        toy_recipe(
            copy,
            max_steps=2,
            save_strategy="steps",
            save_steps=2,
            eval_strategy="no",
            num_test=0,
            plots=False,
        ),
    )
    with caplog.at_level(logging.INFO, logger="hf_sparse"):
        assert finetune.main([str(recipe), "--overwrite_output_dir"]) == 0
    assert "deleted 2 old checkpoint(s)" in caplog.text and "checkpoint-2, checkpoint-4" in caplog.text
    caplog.clear()
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(copy, max_steps=4, eval_strategy="no", num_test=0,
                                                           plots=False))  # fmt: skip
    with caplog.at_level(logging.INFO, logger="hf_sparse"):
        assert finetune.main([str(recipe), "--resume"]) == 0
    assert f"resuming from {copy / 'checkpoint-2'}" in caplog.text
    assert json.loads((copy / "all_results.json").read_text())["global_step"] == 4


def test_the_shipped_recipes_do_not_overwrite():
    import yaml

    for path in sorted(RECIPES.rglob("*.yaml")):
        values = yaml.safe_load(path.read_text())
        assert not values.get("overwrite_output_dir"), path  # would delete checkpoints on a rerun
        assert not values.get("disable_tqdm"), path  # progress bars in every recipe


@pytest.mark.parametrize(
    "argv",
    [
        ["--output_dir", ""],
        ["--output_dir", "  "],
        ["--override", "output_dir="],
        ["--override", "output_dir=null"],
    ],
)
def test_an_empty_output_dir_is_an_error_not_the_working_directory(
    argv, finetune, tmp_path, monkeypatch, capsys
):
    """`--output_dir "$UNSET"` would write the run into the working directory, over its README.md."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("# my project\n")
    recipe = write_recipe(
        tmp_path / "r.yaml", toy_recipe("unused", max_steps=1, eval_strategy="no", num_test=0)
    )
    assert finetune.main([str(recipe), *argv]) == 2
    _one_error_line(capsys.readouterr().err, "output_dir=", "is empty")
    assert (tmp_path / "README.md").read_text() == "# my project\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "r.yaml"]


def test_resume_in_the_recipe_excludes_overwrite_on_the_command_line(saved_run, finetune, tmp_path, capsys):
    copy = tmp_path / "out"
    shutil.copytree(saved_run, copy)
    values = dict(max_steps=6, eval_strategy="no", num_test=0, resume=True)
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(copy, **values))
    assert finetune.main([str(recipe), "--overwrite_output_dir"]) == 2
    _one_error_line(capsys.readouterr().err, "resume", "overwrite_output_dir", "exclude each other")
    assert sorted(p.name for p in copy.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert json.loads((copy / "all_results.json").read_text())["global_step"] == 4  # not resumed either


@pytest.mark.parametrize(
    "name, needles",
    [
        ("outputs/no-such-tracking-run", ["is neither a folder", "offline", "tiny-tracking.yaml run first"]),
        ("./outputs/no-such-tracking-run", ["folder not found", "tiny-tracking.yaml run first"]),
    ],
)
def test_a_missing_model_folder_is_named_before_anything_is_built(name, needles, finetune, tmp_path, capsys):
    """tiny-selection.yaml starts from tiny-tracking.yaml's output_dir; run before it, transformers would try the
    Hub and say it "couldn't connect to huggingface.co" (offline), with a traceback."""
    for split in ("train", "validation"):
        (tmp_path / f"{split}.jsonl").write_text("")
    argv = [str(RECIPES / "dialogue/tiny-selection.yaml"), "--output_dir", str(tmp_path / "out"), "--override",
            f"data_dir={tmp_path}", f"model_name_or_path={name}"]  # fmt: skip
    assert finetune.main(argv) == 2
    _one_error_line(capsys.readouterr().err, "model_name_or_path: ", "outputs/no-such-tracking-run", *needles)
    assert not (tmp_path / "out").exists()


def test_a_diverged_run_is_one_error_line_and_keeps_the_model(finetune, tmp_path, capsys):
    """learning_rate=1e30 is finite and positive, so it passes the checks; the weights blow up to NaN."""
    out = tmp_path / "out"
    values = dict(
        max_steps=3, learning_rate=1e30, eval_strategy="no", save_strategy="no", num_test=0, plots=False
    )
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(out, **values))
    assert finetune.main([str(recipe)]) == 2
    _one_error_line(capsys.readouterr().err, "training diverged", "NaN", "learning_rate=1e+30", str(out))
    assert (out / "model.safetensors").is_file() and (out / "log_history.json").is_file()
    assert not (out / "all_results.json").exists()  # not a finished run


def test_a_diverged_run_without_a_metric_function_is_an_error_too(finetune, tmp_path, capsys, monkeypatch):
    """A task whose evaluation only reports the loss (as causal-lm's does) diverges with eval_loss = NaN."""
    from tests.training.toy_task import ToyTask

    monkeypatch.setattr(ToyTask, "compute_metrics", lambda self, args: None)
    out = tmp_path / "out"
    values = dict(
        max_steps=3, learning_rate=1e30, eval_strategy="no", save_strategy="no", num_test=0, plots=False
    )
    assert finetune.main([str(write_recipe(tmp_path / "r.yaml", toy_recipe(out, **values)))]) == 2
    _one_error_line(capsys.readouterr().err, "training diverged", "eval_loss = NaN", "learning_rate=1e+30")
    assert (out / "model.safetensors").is_file() and not (out / "all_results.json").exists()
