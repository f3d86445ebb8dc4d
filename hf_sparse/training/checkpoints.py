"""Checkpoints: find the latest, check it is complete, and save them atomically.

``transformers.Trainer._save_checkpoint`` (v5) writes straight into ``output_dir/checkpoint-N``:
weights first, then optimizer, scheduler, RNG states and ``trainer_state.json`` last. A run killed
in between leaves a ``checkpoint-N`` folder that *looks* like the latest one, and the Trainer's own
``get_last_checkpoint`` would pick it. :class:`AtomicCheckpointMixin` makes the save atomic: the
Trainer writes the checkpoint into a hidden staging folder ``output_dir/.checkpoint-N.incomplete``
and, once every process has finished writing, the main process renames it to ``checkpoint-N``
(``os.replace``, atomic on one filesystem). A killed save leaves only the hidden staging folder,
which no lookup matches and the next save of that step removes. :func:`validate_checkpoint` checks
what is inside a folder before a resume, so a checkpoint damaged later (deleted weights, garbage
state) fails with a message naming it instead of an obscure traceback.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import logging
import math
import os
import re
import shutil

from transformers import TrainerCallback

from ..utils.io import write_json_atomic

__all__ = [
    "CheckpointError",
    "AtomicCheckpointMixin",
    "RESUME_FIXED_ARGS",
    "RESUME_FIXED_RECIPE_KEYS",
    "as_write_error",
    "atomic_trainer_class",
    "changed_settings",
    "changed_training_args",
    "latest_checkpoint",
    "list_checkpoints",
    "make_shareable",
    "resume_training_args",
    "validate_checkpoint",
    "write_json_atomic",
]

logger = logging.getLogger(__name__)

_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
_STAGING_SUFFIX = ".incomplete"

# Files the Trainer writes (transformers/trainer.py, accelerate FSDP helpers, peft adapters).
_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "adapter_model.safetensors",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "adapter_model.bin",
    "pytorch_model_fsdp.bin",
    "pytorch_model_fsdp_0",  # FSDP sharded state dict (a folder)
)
_OPTIMIZER_FILES = ("optimizer.pt", "optimizer.bin", "optimizer_0")
_SCHEDULER_FILE = "scheduler.pt"
_TRAINER_STATE = "trainer_state.json"
_HF_SPARSE_STATE = "hf_sparse_state.json"  # the loss sum up to this checkpoint (for train_loss)


# A save that fails for want of space reads differently per writer: safetensors names the OS error in its message
# ("I/O error: No space left on device (os error 28)"); torch's zip writer (torch.save: optimizer, scheduler, RNG
# states) has no errno at all ("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534", raised
# while handling "basic_ios::clear: iostream error").
_OS_ERROR_IN_MESSAGE = re.compile(r"\(os error (\d+)\)")
_TORCH_WRITER_FAILURES = ("inline_container", "PytorchStreamWriter", "iostream error")
_ALMOST_FULL = 1 << 20  # bytes still free to the user on a file system a failed write filled (0 on tmpfs)


class CheckpointError(ValueError):
    """A checkpoint folder is incomplete or corrupt; the message names the folder and what is wrong."""


# TrainingArguments a resume takes from the checkpoint whatever the recipe says now: the optimizer state restores
# the learning rate and the optimizer's settings, the scheduler state the base learning rate (the schedule is
# rebuilt from the recipe: another type or warmup would switch schedules mid-run), and the data (its order, the
# task's generated samples) follows the seed. The total batch size (per_device_train_batch_size x
# gradient_accumulation_steps x processes) is compared too: the step count places the data in its epoch.
RESUME_FIXED_ARGS = (
    "learning_rate",
    "lr_scheduler_type",
    "lr_scheduler_kwargs",
    "warmup_steps",
    "warmup_ratio",  # where the installed TrainingArguments has it
    "optim",
    "optim_args",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "seed",
    "data_seed",
)
_BATCH_FACTORS = ("per_device_train_batch_size", "gradient_accumulation_steps", "world_size")
# Recipe keys of the run itself (RecipeArguments) that define the data trained on and the model (its LoRA adapters).
# With them the task's own arguments are saved with each checkpoint (``settings`` in hf_sparse_state.json, set by
# the runner), except paths (a folder may move) and those the task says a resume may change
# (Task.resume_free_arguments: evaluation-only and output settings).
RESUME_FIXED_RECIPE_KEYS = (
    "task",
    "max_train_samples",
    "lora",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "lora_target_parameters",
    "lora_modules_to_save",
)


def _plain(value):
    """A JSON value (enums by their value), as it reads back from ``hf_sparse_state.json``."""
    return json.loads(json.dumps(getattr(value, "value", value), default=str))


def resume_training_args(args) -> dict:
    """The values of :data:`RESUME_FIXED_ARGS` (those the installed ``TrainingArguments`` has) and the total
    batch size's factors, as saved with every checkpoint (``hf_sparse_state.json``)."""
    keys = [k for k in RESUME_FIXED_ARGS if hasattr(args, k)] + list(_BATCH_FACTORS)
    return {k: _plain(getattr(args, k)) for k in keys}


def _saved_training_args(folder: str) -> dict:
    """The :func:`resume_training_args` saved with a checkpoint. A checkpoint without them (written before they
    were saved, or by another tool) gives the learning rate its scheduler state holds, where every parameter
    group has the same one; else nothing ({})."""
    try:
        with open(os.path.join(folder, _HF_SPARSE_STATE), encoding="utf-8") as f:
            saved = json.load(f).get("training_args")
        if isinstance(saved, dict):
            return saved
    except (OSError, ValueError, AttributeError):
        pass
    import torch

    try:
        base_lrs = torch.load(os.path.join(folder, _SCHEDULER_FILE), map_location="cpu", weights_only=True)[
            "base_lrs"
        ]
    except Exception:  # no scheduler.pt (DeepSpeed), another format: nothing to compare
        return {}
    if base_lrs and all(lr == base_lrs[0] for lr in base_lrs):
        return {"learning_rate": float(base_lrs[0])}
    return {}


def changed_training_args(folder, args) -> list[str]:
    """What ``args`` change among the settings a resume from checkpoint ``folder`` cannot change
    (:data:`RESUME_FIXED_ARGS`, the total batch size): ``"key=old in the checkpoint, new now"`` strings, [] if
    nothing (or nothing saved to compare with)."""
    saved, now = _saved_training_args(os.fspath(folder)), resume_training_args(args)
    changed = [
        f"{k}={saved[k]!r} in the checkpoint, {now[k]!r} now"
        for k in RESUME_FIXED_ARGS
        if k in saved and k in now and saved[k] != now[k]
    ]
    if all(isinstance(saved.get(k), int) for k in _BATCH_FACTORS):
        before, after = ([v[k] for k in _BATCH_FACTORS] for v in (saved, now))
        if math.prod(before) != math.prod(after):
            changed.append(
                f"total batch size {' x '.join(map(str, before))} = {math.prod(before)} in the checkpoint, "
                f"{' x '.join(map(str, after))} = {math.prod(after)} now (per_device_train_batch_size x "
                "gradient_accumulation_steps x processes)"
            )
    return changed


def changed_settings(folder, settings: dict, free=()) -> list[str]:
    """What ``settings`` (the recipe's data and model settings, see :data:`RESUME_FIXED_RECIPE_KEYS`) change among
    those saved with checkpoint ``folder``: ``"key=old in the checkpoint, new now"`` strings, [] if nothing (or
    nothing saved to compare with). Keys matching a pattern of ``free`` may change, and so may a key only one side
    has (another version of the task)."""
    try:
        with open(os.path.join(os.fspath(folder), _HF_SPARSE_STATE), encoding="utf-8") as f:
            saved = json.load(f).get("settings")
    except (OSError, ValueError, AttributeError):
        saved = None
    if not isinstance(saved, dict):
        return []
    now = _plain(settings)
    return [
        f"{k}={saved[k]!r} in the checkpoint, {now[k]!r} now"
        for k in now
        if k in saved and saved[k] != now[k] and not any(fnmatch.fnmatchcase(k, p) for p in free)
    ]


def make_shareable(folder) -> None:
    """Give files in ``folder`` (recursively; or the file ``folder``) that only their owner can read
    the mode the umask gives.

    ``save_pretrained`` (transformers 5) and ``tempfile.mkstemp`` create files with mode 0600, so
    ``model.safetensors`` and ``config.json`` were unreadable to the user's group and to a web server
    even under umask 022; ``open()`` would have made them 0644.
    """
    umask = os.umask(0)
    os.umask(umask)
    mode = 0o666 & ~umask
    folder = os.fspath(folder)
    paths = [folder] if os.path.isfile(folder) else []
    for root, _, files in os.walk(folder):
        paths += [os.path.join(root, name) for name in files]
    for path in paths:
        try:
            st = os.stat(path, follow_symlinks=False)
            if st.st_mode & 0o077 == 0 and st.st_uid == os.getuid() and (st.st_mode & 0o777) != mode:
                os.chmod(path, mode)
        except OSError:
            continue


def _exception_chain(e: BaseException) -> list[BaseException]:
    chain = []
    while e is not None and all(e is not seen for seen in chain):
        chain.append(e)
        e = e.__cause__ or e.__context__
    return chain


def as_write_error(e: BaseException, folder=None) -> OSError | None:
    """The ``OSError`` that ``e``, raised while writing files into ``folder``, stands for; None if it is no
    failure to write.

    ``e`` itself if it is an ``OSError``; a ``SafetensorError`` whose message names an OS error
    (``"... No space left on device (os error 28)"``) gives that error. A ``RuntimeError`` of torch's zip writer
    (``torch.save``; its message, or one it was raised from, names ``inline_container``, ``PytorchStreamWriter``
    or ``iostream error``) carries no errno: it gives ``EROFS`` where ``folder``'s file system is read-only and
    ``ENOSPC`` where it has (almost) no space left (under 1 MiB free to the user), else None (also without
    ``folder``), as does any other exception.
    """
    if isinstance(e, OSError):
        return e
    where = None if folder is None else os.fspath(folder)
    if type(e).__name__ == "SafetensorError":
        found = _OS_ERROR_IN_MESSAGE.search(str(e))
        return OSError(int(found[1]), os.strerror(int(found[1])), where) if found else None
    chain = _exception_chain(e)
    if where is None or not all(isinstance(x, RuntimeError) for x in chain):
        return None
    if not any(marker in str(x) for x in chain for marker in _TORCH_WRITER_FAILURES):
        return None
    probe = where
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        fs = os.statvfs(probe)
    except OSError:
        return None
    if fs.f_flag & os.ST_RDONLY:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), where)
    if fs.f_bavail * fs.f_frsize < _ALMOST_FULL:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), where)
    return None


def list_checkpoints(output_dir) -> list[str]:
    """Paths of the ``checkpoint-N`` folders in ``output_dir``, sorted by step (transformers'
    ``sort_checkpoints``; staging folders and other ``checkpoint-*`` names excluded)."""
    from transformers.trainer_utils import sort_checkpoints

    output_dir = os.fspath(output_dir)
    if not os.path.isdir(output_dir):
        return []
    return [p for p in sort_checkpoints(output_dir) if _CHECKPOINT_RE.match(os.path.basename(p))]


def latest_checkpoint(output_dir) -> str | None:
    """The ``checkpoint-N`` folder with the highest N in ``output_dir`` (transformers'
    ``get_last_checkpoint``), or None (also if ``output_dir`` is missing)."""
    from transformers.trainer_utils import get_last_checkpoint

    output_dir = os.fspath(output_dir)
    return get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None


def _check_safetensors(path: str) -> None:
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:  # parses the header and checks the file covers it
        f.keys()


def _check_weights(folder: str) -> str | None:
    """None if a readable weights file is present, else what is wrong."""
    present = [name for name in _WEIGHT_FILES if os.path.exists(os.path.join(folder, name))]
    if not present:
        return f"no model weights (expected one of {', '.join(_WEIGHT_FILES)})"
    name = present[0]
    path = os.path.join(folder, name)
    try:
        if name.endswith(".index.json"):
            with open(path, encoding="utf-8") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            for shard in shards:
                shard_path = os.path.join(folder, shard)
                if not os.path.isfile(shard_path):
                    return f"weight shard {shard} listed in {name} is missing"
                if shard.endswith(".safetensors"):
                    _check_safetensors(shard_path)
        elif name.endswith(".safetensors"):
            _check_safetensors(path)
        elif os.path.isfile(path) and os.path.getsize(path) == 0:
            return f"{name} is empty"
    except Exception as e:  # any parse failure means unreadable weights
        return f"{name} is unreadable ({type(e).__name__}: {e})"
    return None


def _check_torch_file(path: str) -> str | None:
    """None if ``path`` loads the way the Trainer loads it (``torch.load(weights_only=True)``)."""
    import torch

    try:
        from transformers.trainer_pt_utils import safe_globals  # numpy RNG states, as the Trainer allows
    except ImportError:  # pragma: no cover - older transformers
        import contextlib

        safe_globals = contextlib.nullcontext
    try:
        with safe_globals():
            _torch_load(torch, path)
    except Exception as e:  # truncated zip, garbage, unpicklable: all mean "cannot resume from it"
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return f"{os.path.basename(path)} does not load ({type(e).__name__}: {first[:200]})"
    return None


def _torch_load(torch, path: str) -> None:
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as e:  # legacy (non-zip) files cannot be memory-mapped
        if "mmap" not in str(e):
            raise
        torch.load(path, map_location="cpu", weights_only=True)


def _check_all_files(folder: str) -> str | None:
    """Every file of the checkpoint loads: torch states (``*.pt``, ``*.pth``, ``*.bin``), JSON files,
    every safetensors file. None if all do, else the first problem.

    DeepSpeed's own state (``global_stepN/``, loaded by DeepSpeed with its own rules) is only checked
    to be non-empty.
    """
    for root, _, files in sorted(os.walk(folder)):
        deepspeed_state = os.path.relpath(root, folder).split(os.sep)[0].startswith("global_step")
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder)
            if deepspeed_state:
                problem = f"{rel} is empty" if os.path.getsize(path) == 0 else None
            elif name.endswith((".pt", ".pth", ".bin")) and name != "training_args.bin":
                problem = _check_torch_file(path)
            elif name.endswith(".json"):
                try:
                    with open(path, encoding="utf-8") as f:
                        json.load(f)
                    problem = None
                except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                    problem = f"{rel} is not valid JSON ({e})"
            elif name.endswith(".safetensors"):
                try:
                    _check_safetensors(path)
                    problem = None
                except Exception as e:
                    problem = f"{rel} is unreadable ({type(e).__name__}: {e})"
            else:
                continue
            if problem:
                return problem if problem.startswith(rel) else f"{rel}: {problem}"
    return None


def validate_checkpoint(path) -> dict:
    """Check that a checkpoint folder holds everything a resume needs; return its trainer state.

    Checks: ``trainer_state.json`` parses and has an integer ``global_step``; a weights file
    (``model.safetensors``, sharded index, peft adapter, ``.bin`` or FSDP state) is present and its
    header readable; optimizer and scheduler states are present (DeepSpeed checkpoints: its
    ``latest`` tag instead); and every file in the folder loads as the Trainer will load it
    (``optimizer.pt``, ``scheduler.pt``, ``rng_state*.pth``, ``scaler.pt`` with
    ``torch.load(weights_only=True)``, JSON files, safetensors headers), so a damaged file fails
    here, in seconds, not after the model and data are built.

    Raises:
        CheckpointError: naming the folder and the first problem found.
    """
    folder = os.path.abspath(os.fspath(path))

    def fail(problem):
        raise CheckpointError(
            f"checkpoint {folder} is incomplete or corrupt: {problem}. Delete this folder to resume from "
            "the previous checkpoint, or start a new run."
        )

    if not os.path.isdir(folder):
        fail("it is not a folder")
    state_path = os.path.join(folder, _TRAINER_STATE)
    if not os.path.isfile(state_path):
        fail(f"{_TRAINER_STATE} is missing")
    try:
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"{_TRAINER_STATE} is not valid JSON ({e})")
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        fail(f"{_TRAINER_STATE} has no integer global_step")
    problem = _check_weights(folder)
    if problem:
        fail(problem)
    deepspeed = os.path.isfile(os.path.join(folder, "latest"))
    if not deepspeed:
        if not any(os.path.exists(os.path.join(folder, name)) for name in _OPTIMIZER_FILES):
            fail(
                f"no optimizer state (expected one of {', '.join(_OPTIMIZER_FILES)}; was save_only_model set?)"
            )
        if not os.path.isfile(os.path.join(folder, _SCHEDULER_FILE)):
            fail(f"{_SCHEDULER_FILE} is missing")
    problem = _check_all_files(folder)
    if problem:
        fail(problem)
    return state


class AtomicCheckpointMixin:
    """Mixin for a ``transformers.Trainer`` subclass: checkpoints appear complete or not at all.

    ``Trainer._save_checkpoint`` builds the checkpoint path from ``self._get_output_dir(trial)``;
    during a save this mixin points that at a hidden staging folder, lets the Trainer write
    everything there (weights, optimizer, scheduler, RNG states of every process, trainer state),
    waits for all processes, then the main process renames the finished folder to
    ``output_dir/checkpoint-N`` and applies ``save_total_limit`` rotation in ``output_dir``. The
    ``best_model_checkpoint`` recorded in the trainer state is rewritten to the final path.
    Limitation: the rename is atomic on one filesystem; a multi-node run saving on each node renames
    per node.
    """

    _staging_run_dir: str | None = None
    #: the recipe's data and model settings, saved with every checkpoint (set by the runner; see
    #: :func:`changed_settings`)
    resume_settings: dict | None = None
    _loss_sum_before: float = 0.0  # sum of per-step train losses up to the checkpoint resumed from
    _log_state: dict | None = None  # the loss not logged yet at that checkpoint, restored at on_train_begin

    def _loss_state(self) -> dict | None:
        """What a resume needs to report the losses of an uninterrupted run (collective under DDP):
        ``train_loss_sum``, the sum of the per-step training losses from step 0 to now; ``pending_loss_sum``, the
        part of it since the last logged loss; ``last_logged_step``, the step of that log. None before training.
        """
        total = getattr(self, "_total_loss_scalar", None)
        if total is None:
            return None
        state = {"train_loss_sum": self._loss_sum_before + total}
        pending = getattr(self, "_tr_loss", None)  # steps since the last log (transformers >= 5)
        if pending is not None:
            from transformers.trainer_pt_utils import nested_gather

            pending = nested_gather(pending.detach().clone(), self.args.parallel_mode).mean().item()
            state["train_loss_sum"] += pending
            last = getattr(self, "_globalstep_last_logged", None)
            if isinstance(last, int):
                state.update(pending_loss_sum=pending, last_logged_step=last)
        return state

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """``Trainer.train``; after a resume, the logged losses and ``train_loss`` are those of an uninterrupted run.

        transformers reports this ``train()`` call's loss sum (``_total_loss_scalar``) over its own steps
        (5.24) or over every step (5.10), and its first logged loss after a resume averages only the steps
        since the resume. Each checkpoint saves the loss sum up to it, the part not logged yet and the step of
        the last log (``hf_sparse_state.json``); here the sum is added back to ``train_loss``, and the unlogged
        part is handed back to the Trainer when training begins (:meth:`_restore_log_state`), so the first log
        averages over the same steps as without the interruption.

        At the end ``save_total_limit`` is applied once more: a run killed after a save renamed its checkpoint into
        place but before it rotated, resumed with nothing left to train, kept one checkpoint too many.
        """
        self._loss_sum_before, self._log_state = 0.0, None
        start = 0
        if isinstance(resume_from_checkpoint, str):
            saved = _loss_state_of_checkpoint(resume_from_checkpoint)
            self._loss_sum_before, start = saved["train_loss_sum"], saved["global_step"]
            if "pending_loss_sum" in saved:
                self._log_state = saved
                if not any(isinstance(c, RestoreLogStateCallback) for c in self.callback_handler.callbacks):
                    self.add_callback(RestoreLogStateCallback(self))
        self._resumed_at = start
        output = super().train(resume_from_checkpoint, *args, **kwargs)
        if self.args.should_save:  # a run killed after a save's rename, before its rotation
            trial = kwargs.get("trial", args[0] if args else None)
            self._rotate_checkpoints_in(super()._get_output_dir(trial))
        if not start or "train_loss" not in output.metrics:
            return output
        from transformers.trainer_utils import TrainOutput

        train_loss = self._train_loss_of_every_step()
        return TrainOutput(output.global_step, train_loss, {**output.metrics, "train_loss": train_loss})

    _resumed_at = 0  # the step this train() call resumed from (0: not a resume)

    def _train_loss_of_every_step(self) -> float:
        return (self._loss_sum_before + self._total_loss_scalar) / max(self.state.global_step, 1)

    def log(self, logs, *args, **kwargs):
        """``Trainer.log``; the summary logged at the end of a resumed run (printed, kept in ``log_history``) gets
        the ``train_loss`` of every step, not transformers' figure for this call's steps (after a resume from the
        last checkpoint it divided by 0.001 steps: 1,000 times too large)."""
        if self._resumed_at and "train_loss" in logs:
            logs = {**logs, "train_loss": self._train_loss_of_every_step()}
        return super().log(logs, *args, **kwargs)

    def _restore_log_state(self) -> None:
        """At ``on_train_begin`` of a resumed run (the Trainer has just zeroed its logging state): the loss of the
        steps after the checkpoint's last log is pending again, and the next log averages from that log's step.
        Left alone (the first log then averages only the resumed steps, as in transformers) if the Trainer's
        logging state is not the one this was written for."""
        saved, self._log_state = self._log_state, None
        pending = getattr(self, "_tr_loss", None)
        last = saved and saved.get("last_logged_step")
        if (
            saved is None
            or not isinstance(last, int)
            or not 0 <= last <= self.state.global_step
            or getattr(self, "_globalstep_last_logged", None) != self.state.global_step
            or getattr(pending, "ndim", None) != 0
        ):
            return
        pending += float(saved["pending_loss_sum"])  # in place: the tensor the training loop adds to
        self._globalstep_last_logged = last
        self._loss_sum_before -= float(saved["pending_loss_sum"])  # counted when the Trainer logs it

    def _init_training_state(
        self, max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
    ):
        """``Trainer._init_training_state``; the recipe's ``logging_steps``, ``eval_steps`` and ``save_steps`` apply
        after a resume too (transformers kept the checkpoint's, with a warning); a checkpoint of the last step (or
        later) trains nothing more.

        The best checkpoint the resumed state records (``load_best_model_at_end``) is an absolute path: after the
        output folder moved (another disk or machine) transformers ignored it, rotation then deleted it and the
        run ended with the last step's model. Here the checkpoint of that name next to the resumed one is taken
        instead, where the recorded path is gone (:func:`_moved_best_checkpoint`).

        From a checkpoint at ``global_step >= max_steps`` (a run killed during its final evaluation or save,
        or a finished run resumed) transformers (5.10-5.24) skips ``global_step % steps_per_epoch`` batches
        and then trains one more step whenever ``max_steps`` is not a multiple of the epoch length. Here the
        epoch loop is skipped instead: the checkpoint's weights and state are the final ones.
        """
        recorded, moved = (
            (None, None) if resume_from_checkpoint is None else _moved_best_checkpoint(resume_from_checkpoint)
        )
        dropped = _DropRecord(f"The best checkpoint {recorded} recorded in the resumed state does not exist")
        trainer_logger = logging.getLogger("transformers.trainer")
        if moved is not None:
            trainer_logger.addFilter(dropped)  # "... Ignoring it": it is found, below
        try:
            epochs_trained, steps_trained = super()._init_training_state(
                max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
            )
        finally:
            trainer_logger.removeFilter(dropped)
        # transformers 5.24 drops the missing path (None), 5.10 keeps it as it was recorded
        if moved is not None and self.state.best_model_checkpoint in (None, recorded):
            run_dir = super()._get_output_dir(trial)
            if os.path.isdir(run_dir) and os.path.samefile(os.path.dirname(moved), run_dir):
                moved = os.path.join(run_dir, os.path.basename(moved))  # as rotation names it, to keep it
            self.state.best_model_checkpoint = moved
            if self.is_world_process_zero():
                logger.info(
                    "the best checkpoint %s recorded in %s is %s now", recorded, resume_from_checkpoint, moved
                )
        if resume_from_checkpoint is not None:
            self.state.compute_steps(self.args, max_steps)  # the loaded state held the checkpoint's
        if resume_from_checkpoint is not None and self.state.global_step >= max_steps:
            if self.is_world_process_zero():
                logger.warning(
                    "%s is at step %d of %d: nothing left to train",
                    resume_from_checkpoint,
                    self.state.global_step,
                    max_steps,
                )
            return num_train_epochs, 0
        return epochs_trained, steps_trained

    def _get_output_dir(self, trial):
        if self._staging_run_dir is not None:
            return self._staging_run_dir
        return super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial):
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        run_dir = super()._get_output_dir(trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        final = os.path.join(run_dir, name)
        staging_run_dir = os.path.join(run_dir, f".{name}{_STAGING_SUFFIX}")
        if self.args.should_save and os.path.exists(staging_run_dir):
            shutil.rmtree(staging_run_dir)  # left over by a run killed while saving this step
        self.accelerator.wait_for_everyone()

        loss_state = self._loss_state()  # collective: before any process-0-only branch
        self._staging_run_dir = staging_run_dir
        try:
            super()._save_checkpoint(model, trial)
        except Exception as e:  # a full disk: an OSError, whatever the writer (see as_write_error)
            error = as_write_error(e, staging_run_dir)
            if error is None or error is e:
                raise
            raise error from e
        finally:
            self._staging_run_dir = None
        self.accelerator.wait_for_everyone()  # every process has written its files (e.g. RNG states)

        if self.args.should_save:
            staged = os.path.join(staging_run_dir, name)
            write_json_atomic(
                os.path.join(staged, _HF_SPARSE_STATE),
                {
                    "global_step": self.state.global_step,
                    **(loss_state or {}),
                    "training_args": resume_training_args(self.args),
                    **(
                        {"settings": _plain(self.resume_settings)} if self.resume_settings is not None else {}
                    ),
                },
            )
            best = self.state.best_model_checkpoint
            if best is not None and os.path.abspath(best).startswith(os.path.abspath(staging_run_dir)):
                self.state.best_model_checkpoint = final
                self.state.save_to_json(os.path.join(staged, _TRAINER_STATE))
            if os.path.exists(final):  # same step saved again (e.g. overwrite_output_dir): swap it out
                os.replace(final, os.path.join(staging_run_dir, "replaced"))
            make_shareable(staged)
            os.replace(staged, final)
            shutil.rmtree(staging_run_dir, ignore_errors=True)
            self._rotate_checkpoints_in(run_dir)
        self.accelerator.wait_for_everyone()

    def _rotate_checkpoints_in(self, run_dir: str) -> None:
        """Apply ``save_total_limit`` in ``run_dir`` (transformers' rotation: the latest checkpoint and the best one
        are kept)."""
        from transformers.trainer_utils import rotate_checkpoints

        rotate_checkpoints(
            output_dir=run_dir,
            save_total_limit=self.args.save_total_limit,
            best_model_checkpoint=self.state.best_model_checkpoint,
            use_mtime=True,
        )


def _moved_best_checkpoint(folder: str) -> tuple[str | None, str | None]:
    """The ``best_model_checkpoint`` recorded in checkpoint ``folder``'s trainer state and, where that path does
    not exist and a checkpoint of the same name is next to ``folder`` (its output folder was moved or renamed),
    that checkpoint's path; else ``(recorded, None)``."""
    try:
        with open(os.path.join(folder, _TRAINER_STATE), encoding="utf-8") as f:
            recorded = json.load(f).get("best_model_checkpoint")
    except (OSError, ValueError, AttributeError):
        return None, None
    if not isinstance(recorded, str) or not recorded or os.path.isdir(recorded):
        return recorded, None
    name = os.path.basename(os.path.normpath(recorded))
    moved = os.path.join(os.path.dirname(os.path.normpath(folder)), name)
    return recorded, moved if _CHECKPOINT_RE.match(name) and os.path.isdir(moved) else None


class _DropRecord(logging.Filter):
    """Drops the log records whose message starts with ``prefix``."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def _loss_state_of_checkpoint(folder: str) -> dict:
    """The loss bookkeeping saved with a checkpoint: ``global_step``, ``train_loss_sum`` (the sum of the per-step
    training losses up to it) and, where saved, ``pending_loss_sum`` and ``last_logged_step`` (see
    :meth:`AtomicCheckpointMixin._loss_state`).

    From ``hf_sparse_state.json``; for a checkpoint without it (written by another tool), the sum is estimated
    from the logged losses in ``trainer_state.json`` (each a mean over its logging interval; the steps after
    the last log count at the last logged mean).
    """
    try:
        with open(os.path.join(folder, _HF_SPARSE_STATE), encoding="utf-8") as f:
            saved = json.load(f)
        state = {"train_loss_sum": float(saved["train_loss_sum"]), "global_step": int(saved["global_step"])}
        if "pending_loss_sum" in saved and "last_logged_step" in saved:
            state.update(
                pending_loss_sum=float(saved["pending_loss_sum"]),
                last_logged_step=int(saved["last_logged_step"]),
            )
        return state
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        with open(os.path.join(folder, _TRAINER_STATE), encoding="utf-8") as f:
            state = json.load(f)
        step = int(state["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return {"train_loss_sum": 0.0, "global_step": 0}
    total, last_step, last_loss = 0.0, 0, None
    for entry in state.get("log_history", ()):
        if "loss" in entry and isinstance(entry.get("step"), int) and entry["step"] <= step:
            total += float(entry["loss"]) * (entry["step"] - last_step)
            last_step, last_loss = entry["step"], float(entry["loss"])
    if last_loss is not None:
        total += last_loss * (step - last_step)
    return {"train_loss_sum": total, "global_step": step}


def atomic_trainer_class(base=None) -> type:
    """``base`` (default ``transformers.Trainer``) with :class:`AtomicCheckpointMixin` mixed in."""
    if base is None:
        from transformers import Trainer

        base = Trainer
    if issubclass(base, AtomicCheckpointMixin):
        return base
    return type(f"Atomic{base.__name__}", (AtomicCheckpointMixin, base), {"__module__": __name__})


class RestoreLogStateCallback(TrainerCallback):
    """Calls :meth:`AtomicCheckpointMixin._restore_log_state` of ``trainer`` at
    ``on_train_begin``: the first event after the Trainer has reset its logging state, before the first step
    (transformers 5.10 to 5.24). Added by the mixin to a run that resumes."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        self.trainer._restore_log_state()
