"""Checkpoints: latest, validation of damaged folders, atomic saves (a killed save leaves no checkpoint)."""

import json
import os
import shutil

import pytest
from transformers import Trainer, TrainingArguments

from hf_sparse.training import (
    CheckpointError,
    atomic_trainer_class,
    latest_checkpoint,
    list_checkpoints,
    validate_checkpoint,
)
from tests.training.toy_task import ToyArguments, ToyTask


def _toy_trainer(trainer_cls, output_dir, **kwargs):
    task, args = ToyTask(), ToyArguments(num_train=128, num_validation=64, num_test=0)
    tokenizer = task.build_tokenizer(args)
    data = task.build_datasets(args, tokenizer)
    defaults = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=16,
        learning_rate=3e-3,
        max_steps=6,
        save_strategy="steps",
        save_steps=2,
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
    )
    defaults.update(kwargs)
    return trainer_cls(
        model=task.build_model(args, tokenizer),
        args=TrainingArguments(**defaults),
        train_dataset=data["train"],
        eval_dataset=data["validation"],
        processing_class=tokenizer,
        compute_metrics=task.compute_metrics(args),
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A run of 6 steps with atomic saves every 2, keeping the best 2 by eval loss."""
    out = tmp_path_factory.mktemp("atomic")
    trainer = _toy_trainer(
        atomic_trainer_class(),
        out,
        save_total_limit=2,
        eval_strategy="steps",
        eval_steps=2,
        load_best_model_at_end=True,
        metric_for_best_model="eval_loss",
    )
    trainer.train()
    return out, trainer


def test_atomic_saves_rotate_and_keep_final_paths(saved):
    out, trainer = saved
    names = sorted(os.listdir(out))
    assert not [n for n in names if n.startswith(".")], names  # no staging folders left
    kept = [os.path.basename(p) for p in list_checkpoints(out)]
    assert len(kept) == 2 and "checkpoint-6" in kept  # save_total_limit applied in output_dir
    assert trainer.state.best_model_checkpoint in [str(out / k) for k in kept]
    for name in kept:
        state = validate_checkpoint(out / name)
        assert state["global_step"] == int(name.split("-")[1])
        assert ".incomplete" not in json.dumps(state)  # best_model_checkpoint points at final paths


def test_latest_checkpoint(tmp_path):
    assert latest_checkpoint(tmp_path / "missing") is None
    assert latest_checkpoint(tmp_path) is None
    for name in [
        "checkpoint-2",
        "checkpoint-10",
        "checkpoint-9",
        ".checkpoint-20.incomplete",
        "checkpoint-x",
    ]:
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint-30").write_text("a file, not a folder")
    assert latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")  # numeric, not lexicographic
    assert [os.path.basename(p) for p in list_checkpoints(tmp_path)] == [
        "checkpoint-2",
        "checkpoint-9",
        "checkpoint-10",
    ]


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda c: (c / "model.safetensors").unlink(), "no model weights"),
        (lambda c: _truncate(c / "model.safetensors"), "model.safetensors is unreadable"),
        (lambda c: (c / "trainer_state.json").write_text("{garbage"), "trainer_state.json is not valid JSON"),
        (lambda c: (c / "trainer_state.json").unlink(), "trainer_state.json is missing"),
        (lambda c: (c / "trainer_state.json").write_text("{}"), "no integer global_step"),
        (lambda c: (c / "optimizer.pt").unlink(), "no optimizer state"),
        (lambda c: (c / "scheduler.pt").unlink(), "scheduler.pt is missing"),
        (lambda c: shutil.rmtree(c) or c.write_text("x"), "it is not a folder"),
    ],
)
def test_validate_names_folder_and_problem(saved, tmp_path, damage, problem):
    source = latest_checkpoint(saved[0])
    copy = tmp_path / "checkpoint-6"
    shutil.copytree(source, copy)
    validate_checkpoint(copy)
    damage(copy)
    with pytest.raises(CheckpointError, match=problem) as info:
        validate_checkpoint(copy)
    assert str(copy) in str(info.value)


class _Killed(Exception):
    pass


def _dies_while_saving_step_4(base):
    """A Trainer that 'is killed' after writing weights and optimizer of checkpoint-4."""

    class Dying(base):
        def _save_rng_state(self, output_dir):
            if self.state.global_step == 4:
                raise _Killed
            return super()._save_rng_state(output_dir)

    return Dying


@pytest.mark.parametrize("atomic", [False, True])
def test_a_killed_save_leaves_no_checkpoint(tmp_path, atomic):
    base = atomic_trainer_class() if atomic else Trainer
    trainer = _toy_trainer(_dies_while_saving_step_4(base), tmp_path)
    with pytest.raises(_Killed):
        trainer.train()
    if not atomic:  # what the plain Trainer leaves: a latest checkpoint that cannot be resumed
        assert latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint-4")
        with pytest.raises(CheckpointError, match="trainer_state.json is missing"):
            validate_checkpoint(tmp_path / "checkpoint-4")
        return
    assert latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    validate_checkpoint(tmp_path / "checkpoint-2")
    staging = tmp_path / ".checkpoint-4.incomplete" / "checkpoint-4"
    assert (staging / "model.safetensors").is_file()  # the save really was interrupted midway
    # the next save of that step clears the leftover and completes
    trainer = _toy_trainer(atomic_trainer_class(), tmp_path)
    trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert not (tmp_path / ".checkpoint-4.incomplete").exists()
    assert validate_checkpoint(tmp_path / "checkpoint-4")["global_step"] == 4
    assert latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint-6")
