"""Checkpoints after an interruption: a moved output folder keeps its best checkpoint, save_total_limit holds when
nothing is left to train, and a checkpoint save that fills the disk is an ``OSError`` whatever wrote the file."""

import errno
import logging
import os
import shutil

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from hf_sparse.training import atomic_trainer_class, list_checkpoints
from tests.training.test_checkpoints import _toy_trainer

BEST_OF_EVERY_2 = dict(
    save_total_limit=2,
    eval_strategy="steps",
    eval_steps=2,
    load_best_model_at_end=True,
    metric_for_best_model="eval_loss",
    greater_is_better=True,  # the loss falls: the first checkpoint is the best one, not the last
)


def _names(folder):
    return [os.path.basename(p) for p in list_checkpoints(folder)]


def test_a_resume_after_the_output_folder_moved_keeps_its_best_checkpoint(tmp_path, caplog):
    """trainer_state.json records the best checkpoint by its absolute path: after a move transformers ignored it
    ("does not exist anymore"), rotation deleted it and the run ended with the last step's model."""
    first = _toy_trainer(atomic_trainer_class(), tmp_path / "run", max_steps=4, **BEST_OF_EVERY_2)
    first.train()
    assert first.state.best_model_checkpoint == str(tmp_path / "run" / "checkpoint-2")  # the test's premise
    moved = tmp_path / "moved"
    shutil.move(tmp_path / "run", moved)

    resumed = _toy_trainer(atomic_trainer_class(), moved, max_steps=6, **BEST_OF_EVERY_2)
    with caplog.at_level(logging.INFO):
        resumed.train(resume_from_checkpoint=str(moved / "checkpoint-4"))
    assert resumed.state.best_model_checkpoint == str(moved / "checkpoint-2")
    assert _names(moved) == ["checkpoint-2", "checkpoint-6"]  # the best one kept by rotation
    best = load_file(moved / "checkpoint-2" / "model.safetensors")
    final = {k: v for k, v in resumed.model.state_dict().items() if k in best}
    assert final and all(torch.equal(final[k], best[k]) for k in final)  # the best model loaded at the end
    assert "does not exist anymore" not in caplog.text
    assert f"is {moved / 'checkpoint-2'} now" in caplog.text


def test_save_total_limit_holds_after_a_resume_with_nothing_left_to_train(tmp_path):
    """A run killed after its last checkpoint was renamed into place, before rotation, resumed: nothing is
    trained, and nothing rotated (checkpoint-2, -4 and -6 with save_total_limit=2)."""
    _toy_trainer(atomic_trainer_class(), tmp_path, max_steps=6).train()  # no limit: the killed run's folder
    assert _names(tmp_path) == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    resumed = _toy_trainer(atomic_trainer_class(), tmp_path, max_steps=6, save_total_limit=2)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-6"))
    assert resumed.state.global_step == 6
    assert _names(tmp_path) == ["checkpoint-4", "checkpoint-6"]


def _torch_writer_failure():
    """What torch.save raises on a full disk: no errno, the stream error as its context."""
    try:
        raise RuntimeError("basic_ios::clear: iostream error")
    except RuntimeError:
        try:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
        except RuntimeError as e:
            return e


def _statvfs_with(free_bytes, read_only=False):
    real = os.statvfs(os.getcwd())

    class Fs:
        f_frsize, f_bavail = 4096, free_bytes // 4096
        f_flag = (real.f_flag | os.ST_RDONLY) if read_only else (real.f_flag & ~os.ST_RDONLY)

    return lambda path: Fs()


@pytest.mark.parametrize(
    "error, free, read_only, expected",
    [
        (SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"), 10**9, False, errno.ENOSPC),
        (SafetensorError("Error while serializing: I/O error: Read-only file system (os error 30)"), 10**9, False, errno.EROFS),
        (SafetensorError("Error while serializing: header too large"), 0, False, None),
        (_torch_writer_failure(), 0, False, errno.ENOSPC),
        (_torch_writer_failure(), 10**9, True, errno.EROFS),
        (_torch_writer_failure(), 10**9, False, None),  # space left: not the disk, keeps its traceback
        (RuntimeError("CUDA error: an illegal memory access"), 0, False, None),  # not a writer failure
        (ValueError("basic_ios::clear: iostream error"), 0, False, None),
    ],
)  # fmt: skip
def test_a_failed_checkpoint_write_is_an_os_error_only_when_the_disk_is(
    error, free, read_only, expected, tmp_path, monkeypatch
):
    from hf_sparse.training.checkpoints import as_write_error

    monkeypatch.setattr(os, "statvfs", _statvfs_with(free, read_only))
    found = as_write_error(error, tmp_path / ".checkpoint-2.incomplete")
    assert (found and found.errno) == expected
    if expected is not None:
        assert str(tmp_path / ".checkpoint-2.incomplete") in str(found)
