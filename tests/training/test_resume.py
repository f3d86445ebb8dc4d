"""Resume: kill scripts/finetune.py (SIGKILL) after a checkpoint, rerun it with --resume."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hf_sparse.training import latest_checkpoint
from tests.training.helpers import (
    FINETUNE,
    PYTHON,
    REPO_ROOT,
    load_finetune_module,
    subprocess_env,
    toy_recipe,
    write_recipe,
)

MAX_STEPS, SAVE_STEPS = 40, 10


def test_killed_run_resumes_from_its_latest_checkpoint(tmp_path):
    out = tmp_path / "out"
    recipe = write_recipe(
        tmp_path / "resume.yaml",
        toy_recipe(
            out,
            max_steps=MAX_STEPS,
            save_strategy="steps",
            save_steps=SAVE_STEPS,
            eval_strategy="no",
            num_test=0,
            plots=False,
            step_delay=0.05,  # >= 1.5 s between checkpoint-10 and the end of the run: time to kill it
        ),
    )
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(
        [PYTHON, str(FINETUNE), str(recipe)], cwd=REPO_ROOT, env=subprocess_env(), stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 180
        while not (out / f"checkpoint-{SAVE_STEPS}").is_dir():
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint after 180 s"
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
    finally:
        first.kill()
        first.wait()
        log.close()
    assert first.returncode == -signal.SIGKILL  # killed, not finished
    assert not (out / "all_results.json").exists()
    latest = latest_checkpoint(out)
    resumed_step = int(latest.rsplit("-", 1)[1])
    assert SAVE_STEPS <= resumed_step < MAX_STEPS

    # The resumed run goes through the same CLI entry point, in-process (saves a ~9 s interpreter start).
    assert load_finetune_module().main([str(recipe), "--resume"]) == 0
    results = json.loads((out / "all_results.json").read_text())
    assert results["global_step"] == MAX_STEPS
    assert results["resumed_from"] == os.path.basename(latest)  # inside output_dir: relative to it
    # The Trainer state at on_train_begin came from the checkpoint, and only the rest was trained:
    assert results["start_step"] == resumed_step
    assert results["steps_this_run"] == MAX_STEPS - resumed_step
    state = json.loads((out / f"checkpoint-{MAX_STEPS}" / "trainer_state.json").read_text())
    assert state["global_step"] == MAX_STEPS
    logged = [e["step"] for e in state["log_history"] if "loss" in e]
    assert logged == list(range(5, MAX_STEPS + 1, 5))  # history before the kill kept, nothing twice

    # train_loss covers all MAX_STEPS steps, as in an uninterrupted run (transformers alone reports
    # the mean over the resumed steps only)
    straight = tmp_path / "straight"
    recipe_straight = write_recipe(
        tmp_path / "straight.yaml",
        toy_recipe(
            straight, max_steps=MAX_STEPS, save_strategy="no", eval_strategy="no", num_test=0, plots=False
        ),
    )
    assert load_finetune_module().main([str(recipe_straight)]) == 0
    uninterrupted = json.loads((straight / "all_results.json").read_text())["train_loss"]
    assert abs(results["train_loss"] - uninterrupted) <= 1e-3 * uninterrupted, (
        results["train_loss"],
        uninterrupted,
    )
    summary = [e for e in json.loads((out / "log_history.json").read_text()) if "train_loss" in e]
    assert summary and summary[-1]["train_loss"] == results["train_loss"]


def test_resuming_from_the_last_checkpoint_trains_nothing_more(tmp_path, capsys):
    """A run killed after its last checkpoint (during the final evaluation or save), or a finished run, resumed:
    nothing more is trained and the results equal the uninterrupted run's. The final step (5) is not a multiple
    of the epoch length (3 steps), where transformers would skip 2 batches and train a 6th step."""
    finished = tmp_path / "finished"
    values = dict(num_train=96, num_validation=32, num_test=32, max_steps=5, save_strategy="steps", save_steps=5,
                  eval_strategy="no", plots=False, lr_scheduler_type="constant")  # fmt: skip
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(finished, **values))
    assert load_finetune_module().main([str(recipe)]) == 0
    resumed = tmp_path / "resumed"
    shutil.copytree(finished / "checkpoint-5", resumed / "checkpoint-5")  # as left by a kill after it
    recipe = write_recipe(tmp_path / "resumed.yaml", toy_recipe(resumed, **values))
    capsys.readouterr()
    assert load_finetune_module().main([str(recipe), "--resume"]) == 0
    printed = capsys.readouterr()

    a = json.loads((finished / "all_results.json").read_text())
    b = json.loads((resumed / "all_results.json").read_text())
    # the summary the Trainer prints says so too (it printed 1,000 times the loss: this call trained 0 steps)
    assert f"'train_loss': '{a['train_loss']:.4g}'" in printed.out + printed.err
    assert b["global_step"] == 5 and b["start_step"] == 5 and b["steps_this_run"] == 0
    for key in ("epoch", "train_loss", "eval_loss", "eval_accuracy", "test_loss", "test_accuracy"):
        assert b[key] == pytest.approx(a[key], rel=1e-6), key
    wa, wb = load_file(finished / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


class _Killed(BaseException):
    """A SIGKILL in the middle of the final save (past the runner's and the CLI's exception handlers)."""


def test_a_continued_run_killed_in_its_final_save_keeps_no_results_of_the_earlier_run(tmp_path, monkeypatch):
    """A finished run (max_steps=4) continued with --resume (max_steps=6) and killed right after the final
    model.safetensors is written: output_dir holds the step-6 weights without the step-4 run's all_results.json,
    card and plots (the loss curves, the task's figures), as after a killed new run; --resume then finishes it."""
    from transformers import PreTrainedModel

    from tests.training.toy_task import ToyTask

    after_training = ToyTask.after_training

    def with_a_figure(self, trainer, args, output_dir):  # a task's figure, named in the results' extras
        (Path(output_dir) / "toy.png").write_bytes(b"png")
        return {**after_training(self, trainer, args, output_dir), "figure_png": "toy.png"}

    monkeypatch.setattr(ToyTask, "after_training", with_a_figure)
    out = tmp_path / "out"
    values = dict(num_train=64, num_validation=16, num_test=0, save_strategy="steps", save_steps=2,
                  eval_strategy="no", plots=True, model_card=True)  # fmt: skip
    finetune = load_finetune_module()
    recipe = write_recipe(tmp_path / "a.yaml", toy_recipe(out, max_steps=4, **values))
    assert finetune.main([str(recipe)]) == 0
    earlier = ["all_results.json", "README.md", "loss.png", "toy.png"]
    assert all((out / name).is_file() for name in earlier)
    save_pretrained = PreTrainedModel.save_pretrained

    def killed(self, folder, *args, **kwargs):
        save_pretrained(self, folder, *args, **kwargs)
        if os.path.abspath(folder) == str(out):
            raise _Killed

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", killed)
    recipe = write_recipe(tmp_path / "b.yaml", toy_recipe(out, max_steps=6, **values))
    with pytest.raises(_Killed):
        finetune.main([str(recipe), "--resume"])
    final, step6 = load_file(out / "model.safetensors"), load_file(out / "checkpoint-6" / "model.safetensors")
    assert all(torch.equal(final[k], step6[k]) for k in final)  # the new weights, without the old results
    assert [name for name in earlier if (out / name).exists()] == []
    monkeypatch.setattr(PreTrainedModel, "save_pretrained", save_pretrained)
    assert finetune.main([str(recipe), "--resume"]) == 0
    assert json.loads((out / "all_results.json").read_text())["global_step"] == 6
    assert all((out / name).is_file() for name in earlier)


def test_the_first_logged_loss_after_a_resume_covers_the_whole_logging_interval(tmp_path):
    """logging_steps=4, checkpoint-2 resumed: the loss logged at step 4 is the mean over steps 1-4, as in the
    uninterrupted run (transformers alone logs the mean over steps 3-4 there)."""
    values = dict(max_steps=8, logging_steps=4, save_strategy="steps", save_steps=2, eval_strategy="no", num_test=0,
                  plots=False)  # fmt: skip
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert (
        load_finetune_module().main([str(write_recipe(tmp_path / "a.yaml", toy_recipe(straight, **values)))])
        == 0
    )
    shutil.copytree(straight / "checkpoint-2", resumed / "checkpoint-2")  # as left by a kill after it
    recipe = write_recipe(tmp_path / "b.yaml", toy_recipe(resumed, **values))
    assert load_finetune_module().main([str(recipe), "--resume"]) == 0

    def losses(out):
        history = json.loads((out / "log_history.json").read_text())
        return [(e["step"], e["loss"]) for e in history if "loss" in e], [
            e["train_loss"] for e in history if "train_loss" in e
        ]

    (logged_a, train_a), (logged_b, train_b) = losses(straight), losses(resumed)
    assert [s for s, _ in logged_b] == [s for s, _ in logged_a] == [4, 8]
    assert [v for _, v in logged_b] == pytest.approx([v for _, v in logged_a], rel=1e-5)
    assert train_b == pytest.approx(train_a, rel=1e-5)


def test_a_checkpoint_whose_tokenizer_maps_tokens_to_other_ids_is_not_resumed(tmp_path, capsys):
    """A task that builds its vocabulary from the data builds another one when the data changed: as many tokens
    (the weights fit), other ids. Resuming would silently train every embedding row on another token: one error
    line naming the difference, before the data is prepared."""
    out = tmp_path / "out"
    values = dict(max_steps=1, save_strategy="steps", save_steps=1, eval_strategy="no", num_train=32,
                  num_validation=16, num_test=0, plots=False)  # fmt: skip
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(out, **values))
    assert load_finetune_module().main([str(recipe)]) == 0
    path = out / "checkpoint-1" / "tokenizer.json"  # as if built from other data: t0 and t1 swapped
    saved = json.loads(path.read_text())
    vocab = saved["model"]["vocab"]
    vocab["t0"], vocab["t1"] = vocab["t1"], vocab["t0"]
    path.write_text(json.dumps(saved))
    capsys.readouterr()
    assert load_finetune_module().main([str(recipe), "--resume"]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "Traceback" not in err, err
    assert (
        f"cannot resume from {out / 'checkpoint-1'}: the tokenizer built now differs from the one it was trained "
        "with (16 tokens in the checkpoint, 16 now; 2 with another id, e.g. 't1' 4 in the checkpoint, 5 now)"
    ) in last, last
