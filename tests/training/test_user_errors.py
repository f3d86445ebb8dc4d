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
from tests.training.toy_task import save_toy_model

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
        ("motif/tiny.yaml", ["seed=-1"], ["seed=-1", "2**32 - 1"]),
        ("motif/tiny.yaml", ["data_seed=-1"], ["data_seed=-1", "2**64 - 1"]),
        (
            "motif/tiny.yaml",
            ["max_length=10"],
            ["tiny.yaml: ", "max_position_embeddings=10"],
        ),  # the model's check
        # flags of the HF example scripts a run cannot honour: an error saying what to do instead, not ignored
        ("motif/tiny.yaml", ["do_train=false"], ["do_train=false is not supported", "always trains"]),
        ("motif/tiny.yaml", ["do_eval=false"], ["do_eval=false is not supported", "eval_strategy"]),
        ("motif/tiny.yaml", ["do_predict=false"], ["do_predict=false is not supported", "max_test_samples"]),
        (
            "motif/tiny.yaml",
            ["resume_from_checkpoint=/nonexistent/checkpoint-6"],
            ["resume_from_checkpoint='/nonexistent/checkpoint-6'", "folder not found", "--resume"],
        ),
        # transformers' Trainer checked these once the model and data were built: a traceback, exit 1
        ("motif/tiny.yaml", ["save_strategy=best"], ["save_strategy='best' needs metric_for_best_model"]),
        (
            "motif/tiny.yaml",
            ["save_strategy=best", "metric_for_best_model=loss", "eval_strategy=no"],
            ["save_strategy='best'", "eval_strategy='no' runs none"],
        ),
        # accelerate turns fp16 off on the CPU: it trained in fp32 while the card said fp16
        ("motif/tiny.yaml", ["fp16=true", "use_cpu=true"], ["fp16=true needs a GPU", "use bf16=true"]),
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


def _toy_argv(tmp_path, out, name="r.yaml", **values) -> list[str]:
    return [str(write_recipe(tmp_path / name, toy_recipe(out, **values)))]


def test_overwrite_deletes_the_previous_runs_outputs_not_the_users(finetune, tmp_path, caplog):
    """A LoRA run with a merged model, card and plots, then --overwrite_output_dir with an adapter-only run
    without card or plots: none of the first run's model, adapter, card, plots or results are left to be
    pushed or loaded with the new one; a file of the user's stays; the deletion is printed."""
    from hf_sparse.hub.push import upload_file_list

    out = tmp_path / "out"
    first = dict(max_steps=2, save_strategy="steps", save_steps=2, eval_strategy="no", num_test=0, lora=True,
                 model_card=True)  # fmt: skip
    assert finetune.main(_toy_argv(tmp_path, out, **first)) == 0
    assert {"model.safetensors", "loss.png", "all_results.json", "adapter"} <= {p.name for p in out.iterdir()}
    (out / "notes.txt").write_text("mine")
    base = save_toy_model(tmp_path / "base")  # an adapter alone loads on the base model it names
    second = dict(max_steps=1, save_strategy="no", eval_strategy="no", num_test=0, lora=True, merge_lora=False,
                  plots=False, model_card=False, model_name_or_path=str(base))  # fmt: skip
    with caplog.at_level(logging.INFO, logger="hf_sparse"):
        assert finetune.main([*_toy_argv(tmp_path, out, **second), "--overwrite_output_dir"]) == 0
    err = caplog.text
    assert f"deleted 1 old checkpoint(s) in {out} (checkpoint-2)" in err
    assert f"deleted the previous run's outputs in {out} (" in err and "model.safetensors" in err
    names = {p.name for p in out.iterdir()}
    for stale in ("model.safetensors", "config.json", "adapter", "loss.png", "checkpoint-2"):
        assert stale not in names, stale
    assert "hf-sparse" not in (out / "README.md").read_text()  # peft's adapter card, not the first run's card
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "all_results.json").read_text())["global_step"] == 1
    assert sorted(f for f in upload_file_list(out) if not f.startswith("tokenizer")) == [
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
        "all_results.json",
        "log_history.json",
    ]


def test_overwrite_of_a_folder_no_run_wrote_deletes_nothing(finetune, tmp_path):
    """--overwrite_output_dir into a folder of the user's (no checkpoint, model or run log there): its README.md,
    images and results-like files are not an earlier run's outputs, and stay."""
    out = tmp_path / "out"
    out.mkdir()
    mine = {"README.md": "my project", "figure.png": "png", "my_results.json": "{}", "vocab.txt": "a\nb"}
    for name, text in mine.items():
        (out / name).write_text(text)
    values = dict(
        max_steps=1, save_strategy="no", eval_strategy="no", num_test=0, plots=False, model_card=False
    )
    assert finetune.main([*_toy_argv(tmp_path, out, **values), "--overwrite_output_dir"]) == 0
    assert {name: (out / name).read_text() for name in mine} == mine


def test_data_seed_takes_a_torch_generator_seed(finetune, tmp_path):
    """data_seed only seeds torch generators: values past numpy's 2**32 - 1 are valid."""
    values = dict(max_steps=1, save_strategy="no", eval_strategy="no", num_test=0, plots=False)
    assert (
        finetune.main(
            [*_toy_argv(tmp_path, tmp_path / "out", **values), "--override", "data_seed=4294967296"]
        )
        == 0
    )


def _break_trainer_init(monkeypatch):
    """The last check before training: transformers' own, when the Trainer is built (after the model and data)."""
    from transformers import Trainer

    def fail(self):
        raise ValueError("the Trainer's own check failed")

    monkeypatch.setattr(Trainer, "_validate_args", fail)


@pytest.mark.parametrize(
    "overrides, breaks, needle",
    [
        (["hidden_size=33"], None, "hidden size (33)"),  # the model's config rejects it
        (["save_strategy=best"], None, "needs metric_for_best_model"),  # transformers' Trainer checked it
        ([], _break_trainer_init, None),
    ],
)
def test_a_failed_overwrite_keeps_the_earlier_run(
    overrides, breaks, needle, finetune, tmp_path, capsys, monkeypatch
):
    """--overwrite_output_dir deletes the earlier run only once every check has passed: a rerun that stops on an
    error (here: a value the model rejects, a Trainer argument, a failing Trainer check) leaves it as it was."""
    out = tmp_path / "out"
    values = dict(
        max_steps=2, save_strategy="steps", save_steps=2, eval_strategy="no", num_test=0, plots=False
    )
    assert finetune.main(_toy_argv(tmp_path, out, **values)) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert {"all_results.json", "model.safetensors", "config.json"} <= set(before)
    if breaks is not None:
        breaks(monkeypatch)
    argv = [
        *_toy_argv(tmp_path, out, **values),
        "--overwrite_output_dir",
        "--override",
        "max_steps=1",
        *overrides,
    ]
    if needle is None:
        with pytest.raises(ValueError, match="the Trainer's own check failed"):
            finetune.main(argv)
    else:
        assert finetune.main(argv) == 2
        _one_error_line(capsys.readouterr().err, needle)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert (out / "checkpoint-2" / "model.safetensors").is_file()


def test_a_stopped_overwriting_run_leaves_no_finished_looking_run(finetune, tmp_path, monkeypatch):
    """Once training starts the earlier run is gone: a run that stops while training leaves no all_results.json or
    model of another run behind it."""
    from transformers import Trainer

    out = tmp_path / "out"
    values = dict(max_steps=1, save_strategy="no", eval_strategy="no", num_test=0, plots=False)
    assert finetune.main(_toy_argv(tmp_path, out, **values)) == 0

    def killed(self, *args, **kwargs):
        raise RuntimeError("killed while training")

    monkeypatch.setattr(Trainer, "train", killed)
    with pytest.raises(RuntimeError, match="killed while training"):
        finetune.main([*_toy_argv(tmp_path, out, **values), "--overwrite_output_dir"])
    assert not {"all_results.json", "model.safetensors", "config.json"} & {p.name for p in out.iterdir()}


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["learning_rate=0.03"], "learning_rate=0.003 in the checkpoint, 0.03 now"),
        (["weight_decay=0.1"], "weight_decay=0.0 in the checkpoint, 0.1 now"),
        (["lr_scheduler_type=constant"], "lr_scheduler_type='linear' in the checkpoint, 'constant' now"),
        (["warmup_steps=2"], "warmup_steps=0 in the checkpoint, 2.0 now"),
        (["adam_beta2=0.99"], "adam_beta2=0.999 in the checkpoint, 0.99 now"),
        (["seed=1"], "seed=0 in the checkpoint, 1 now"),
        (
            ["per_device_train_batch_size=16"],
            "total batch size 32 x 1 x 1 = 32 in the checkpoint, 16 x 1 x 1 = 16 now",
        ),
    ],
)
def test_a_resume_with_other_training_settings_is_one_error(
    overrides, needle, saved_run, finetune, tmp_path, capsys
):
    """The checkpoint's optimizer and scheduler states keep its learning rate and optimizer settings, and its step
    count its place in the data: a resume with other ones trained on with the old values while the card and
    all_results.json reported the new ones. One error line naming the key, before anything is built."""
    copy = tmp_path / "out"
    shutil.copytree(saved_run / "checkpoint-4", copy / "checkpoint-4")
    argv = _toy_argv(tmp_path, copy, max_steps=6, eval_strategy="no", num_test=0, plots=False)
    assert finetune.main([*argv, "--resume", "--override", *overrides]) == 2
    _one_error_line(capsys.readouterr().err, f"cannot resume from {copy / 'checkpoint-4'}", needle,
                    "--overwrite_output_dir")  # fmt: skip
    assert sorted(p.name for p in copy.iterdir()) == ["checkpoint-4"]


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["num_train=256"], "num_train=512 in the checkpoint, 256 now"),
        (["seq_len=12"], "seq_len=10 in the checkpoint, 12 now"),
        (["num_train=256", "seq_len=12"], "seq_len=10 in the checkpoint, 12 now; num_train=512 in the"),
        (["max_train_samples=64"], "max_train_samples=None in the checkpoint, 64 now"),
        (["lora=true"], "lora=False in the checkpoint, True now"),
    ],
)
def test_a_resume_with_other_data_or_model_settings_is_one_error(
    overrides, needle, saved_run, finetune, tmp_path, capsys
):
    """The task's arguments that define the data (e.g. the motif task's dataset_seed, num_train) and the model:
    a resume with other ones trained on other data from the checkpoint's place, and exited 0. One error line
    naming the key, the old and the new value, before the data is prepared."""
    copy = tmp_path / "out"
    shutil.copytree(saved_run / "checkpoint-4", copy / "checkpoint-4")
    argv = _toy_argv(tmp_path, copy, max_steps=6, eval_strategy="no", num_test=0, plots=False)
    assert finetune.main([*argv, "--resume", "--override", *overrides]) == 2
    _one_error_line(capsys.readouterr().err, f"cannot resume from {copy / 'checkpoint-4'} with other data or model",
                    needle, "--overwrite_output_dir")  # fmt: skip
    assert sorted(p.name for p in copy.iterdir()) == ["checkpoint-4"]
    saved = json.loads((copy / "checkpoint-4" / "hf_sparse_state.json").read_text())["settings"]
    assert saved["seq_len"] == 10 and "target_token" not in saved  # a secret-like name is written nowhere


def test_a_checkpoint_without_saved_settings_is_checked_for_its_learning_rate(
    saved_run, finetune, tmp_path, capsys
):
    """A checkpoint written before the settings were saved with it (or by another tool): its scheduler state
    still holds the learning rate it was trained with."""
    copy = tmp_path / "out"
    shutil.copytree(saved_run / "checkpoint-4", copy / "checkpoint-4")
    state = copy / "checkpoint-4" / "hf_sparse_state.json"
    saved = json.loads(state.read_text())
    del saved["training_args"]
    state.write_text(json.dumps(saved))
    argv = _toy_argv(tmp_path, copy, max_steps=6, eval_strategy="no", num_test=0, plots=False)
    assert finetune.main([*argv, "--resume", "--override", "learning_rate=0.03"]) == 2
    _one_error_line(capsys.readouterr().err, "learning_rate=0.003 in the checkpoint, 0.03 now")


def test_a_resume_may_change_the_length_the_logging_and_the_batch_split(saved_run, finetune, tmp_path):
    """What a resume may change, and what then applies: max_steps, logging_steps (transformers kept the
    checkpoint's), per-device batch x gradient accumulation with the same total batch, the evaluation data and
    paths."""
    copy = tmp_path / "out"
    shutil.copytree(saved_run / "checkpoint-2", copy / "checkpoint-2")
    argv = _toy_argv(tmp_path, copy, max_steps=5, eval_strategy="no", num_test=0, plots=False, save_strategy="no",
                     logging_steps=1, per_device_train_batch_size=16, gradient_accumulation_steps=2,
                     num_validation=64, max_eval_samples=32, data_dir=str(tmp_path))  # fmt: skip
    assert finetune.main([*argv, "--resume"]) == 0
    history = json.loads((copy / "log_history.json").read_text())
    assert [e["step"] for e in history if "loss" in e] == [3, 4, 5]  # logging_steps=5 in the checkpoint
    assert json.loads((copy / "all_results.json").read_text())["global_step"] == 5


@pytest.mark.parametrize("case", ["read-only", "file in the way"])
def test_an_output_dir_that_cannot_be_written_is_one_error_before_anything_is_built(
    case, finetune, tmp_path, capsys, monkeypatch
):
    """The Trainer created output_dir once the model and the data were built: a read-only file system was an
    OSError traceback there."""
    import os

    from tests.training.toy_task import ToyTask

    def never(*args, **kwargs):
        raise AssertionError("the model was built")

    monkeypatch.setattr(ToyTask, "build_model", never)
    parent = tmp_path / "parent"
    if case == "read-only":
        parent.mkdir()
        access = os.access

        def no_write_permission(path, mode, **kwargs):  # another user's folder (root may write anywhere)
            return os.fspath(path) != str(parent) and access(path, mode, **kwargs)

        monkeypatch.setattr(os, "access", no_write_permission)
        needles = [f"output_dir {parent / 'out'} cannot be written: {parent}, where it would be created,",
                   "is not writable by this user", "choose another --output_dir"]  # fmt: skip
    else:
        parent.write_text("a file")
        needles = [f"output_dir {parent / 'out'} cannot be created: {parent} is a file"]
    assert finetune.main(_toy_argv(tmp_path, parent / "out", max_steps=1)) == 2
    _one_error_line(capsys.readouterr().err, *needles)


def test_a_full_disk_during_the_run_is_one_error_line(finetune, tmp_path, capsys, monkeypatch):
    """No space left while saving a checkpoint: one error line, exit 2 (the checkpoint stays hidden and
    incomplete, --resume continues from the latest complete one); other OSErrors keep their traceback."""
    import errno

    from transformers import Trainer

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Trainer, "_save_checkpoint", full)
    out = tmp_path / "out"
    argv = _toy_argv(tmp_path, out, max_steps=2, save_strategy="steps", save_steps=1, eval_strategy="no",
                     num_test=0, plots=False, disable_tqdm=True)  # fmt: skip
    assert finetune.main(argv) == 2
    _one_error_line(capsys.readouterr().err, "cannot write the run's files: [Errno 28] No space left on device",
                    "--resume continues from the latest complete checkpoint")  # fmt: skip
    assert not list(out.glob("checkpoint-*"))

    def broken(self, *args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(Trainer, "_save_checkpoint", broken)
    with pytest.raises(OSError, match="Input/output error"):
        finetune.main([*argv, "--overwrite_output_dir"])


@pytest.mark.parametrize("writer", ["model.safetensors", "optimizer.pt"])
def test_a_disk_filling_up_in_a_checkpoints_weights_or_optimizer_state_is_one_error_line(
    writer, finetune, tmp_path, capsys, monkeypatch
):
    """safetensors and torch.save report a full disk without an OSError (a SafetensorError naming 'os error 28',
    a RuntimeError of torch's zip writer): a traceback and exit 1. A writer failure with space left keeps it."""
    import os

    import torch
    import transformers.modeling_utils
    from safetensors import SafetensorError

    out = tmp_path / "out"
    real_torch_save = torch.save

    def full_safetensors(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    def full_torch_save(obj, f, *args, **kwargs):
        if str(f).endswith("optimizer.pt"):
            try:
                raise RuntimeError("basic_ios::clear: iostream error")
            except RuntimeError:
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")  # noqa: B904
        return real_torch_save(obj, f, *args, **kwargs)

    if writer == "model.safetensors":
        monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full_safetensors)
    else:
        monkeypatch.setattr(torch, "save", full_torch_save)
    real_statvfs = os.statvfs
    free = {"bytes": 0}

    def statvfs(path):  # the file system the failed write filled up
        fs = real_statvfs(path)
        if not os.fspath(path).startswith(str(out)):
            return fs
        return os.statvfs_result((*fs[:4], free["bytes"] // fs.f_frsize, *fs[5:]))

    monkeypatch.setattr(os, "statvfs", statvfs)
    argv = _toy_argv(tmp_path, out, max_steps=2, save_strategy="steps", save_steps=1, eval_strategy="no",
                     num_test=0, plots=False, disable_tqdm=True)  # fmt: skip
    assert finetune.main(argv) == 2
    _one_error_line(capsys.readouterr().err, "cannot write the run's files: [Errno 28] No space left on device",
                    str(out / ".checkpoint-1.incomplete"), "--resume continues")  # fmt: skip
    assert not list(out.glob("checkpoint-*"))
    if writer == "optimizer.pt":
        free["bytes"] = 1 << 30
        with pytest.raises(RuntimeError, match="inline_container"):
            finetune.main([*argv, "--overwrite_output_dir"])


def test_a_rerun_over_a_trained_model_without_checkpoints_keeps_it(finetune, tmp_path, capsys):
    """save_strategy: no leaves no checkpoint: the finished model alone stops a rerun, and --resume too."""
    out = tmp_path / "out"
    values = dict(max_steps=1, save_strategy="no", eval_strategy="no", num_test=0, plots=False)
    assert finetune.main(_toy_argv(tmp_path, out, **values)) == 0
    weights = (out / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert finetune.main([*_toy_argv(tmp_path, out, **values), "--override", "seed=1"]) == 2
    _one_error_line(capsys.readouterr().err, f"output_dir {out} already holds a trained model",
                    "all_results.json, config.json, model.safetensors", "--overwrite_output_dir")  # fmt: skip
    assert finetune.main([*_toy_argv(tmp_path, out, **values), "--resume"]) == 2
    _one_error_line(capsys.readouterr().err, "no checkpoint-N to resume from", "--overwrite_output_dir")
    assert (out / "model.safetensors").read_bytes() == weights


def test_resume_from_checkpoint_resumes_from_that_folder(saved_run, finetune, tmp_path, capsys):
    """resume_from_checkpoint (the HF example scripts' key) was accepted and ignored: it trained from step 0."""
    out = tmp_path / "out"
    checkpoint = saved_run / "checkpoint-2"
    values = dict(max_steps=4, eval_strategy="no", num_test=0, plots=False, save_strategy="no")
    argv = [*_toy_argv(tmp_path, out, **values), "--override", f"resume_from_checkpoint={checkpoint}"]
    assert finetune.main(argv) == 0
    results = json.loads((out / "all_results.json").read_text())
    assert results["resumed_from"] == "checkpoint-2"  # outside output_dir and the working folder: its name
    assert (results["start_step"], results["steps_this_run"], results["global_step"]) == (2, 2, 4)
    assert finetune.main([*argv, "--resume"]) == 2  # the latest in output_dir, or that one: which?
    _one_error_line(capsys.readouterr().err, "resume", "resume_from_checkpoint=", "give one")


def test_resume_from_a_checkpoint_of_another_model_size_is_one_error(saved_run, finetune, tmp_path, capsys):
    """The recipe changed since the checkpoint: one line naming the keys, not load_state_dict's size mismatches."""
    copy = tmp_path / "out"
    shutil.copytree(saved_run / "checkpoint-4", copy / "checkpoint-4")
    argv = _toy_argv(tmp_path, copy, max_steps=6, eval_strategy="no", num_test=0, hidden_size=64)
    assert finetune.main([*argv, "--resume"]) == 2
    _one_error_line(capsys.readouterr().err, f"cannot resume from {copy / 'checkpoint-4'}",
                    "hidden_size=32 in the checkpoint, 64 now", "--overwrite_output_dir")  # fmt: skip
    # a checkpoint saved without the recipe's settings: the config keys that differ, once the model is built
    state = copy / "checkpoint-4" / "hf_sparse_state.json"
    state.write_text(json.dumps({k: v for k, v in json.loads(state.read_text()).items() if k != "settings"}))
    assert finetune.main([*argv, "--resume"]) == 2
    _one_error_line(capsys.readouterr().err, f"cannot resume from {copy / 'checkpoint-4'}",
                    "hidden_size=32 in the checkpoint, 64 now", "intermediate_size=64 in the checkpoint, 128 now",
                    "--overwrite_output_dir")  # fmt: skip


def test_a_metric_for_best_model_the_task_does_not_report_is_one_error(finetune, tmp_path, capsys):
    """Raised at the first evaluation (the task's metric names are known once its metric function ran), as a
    RecipeError listing them, not transformers' KeyError with a traceback."""
    out = tmp_path / "out"
    values = dict(max_steps=4, eval_strategy="steps", eval_steps=1, save_strategy="steps", save_steps=1, num_test=0,
                  metric_for_best_model="nope", load_best_model_at_end=True, disable_tqdm=True)  # fmt: skip
    assert finetune.main(_toy_argv(tmp_path, out, **values)) == 2
    _one_error_line(
        capsys.readouterr().err, "metric_for_best_model='nope'", "(it reports eval_accuracy, eval_loss)"
    )
    assert not list(out.glob("checkpoint-*"))  # stopped before the first checkpoint


def test_what_is_resumed_is_printed_by_the_main_process_only(saved_run, caplog):
    """Every process of a distributed run validates the checkpoint; rank 0 alone prints it."""
    from types import SimpleNamespace

    from hf_sparse.training.runner import _resume_checkpoint

    recipe_args = SimpleNamespace(resume=True, overwrite_output_dir=False, source="r.yaml")
    for rank in (1, 0):
        training_args = SimpleNamespace(
            output_dir=str(saved_run), resume_from_checkpoint=None, process_index=rank
        )
        with caplog.at_level(logging.INFO, logger="hf_sparse"):
            assert _resume_checkpoint(recipe_args, training_args) == str(saved_run / "checkpoint-4")
        assert ("resuming from" in caplog.text) == (rank == 0), rank
