"""The fine-tuning runner: recipe -> ``transformers.Trainer`` run -> a finished model folder.

:func:`run` is all a fine-tuning script needs (``scripts/finetune.py`` wraps it). Everything
task-specific comes from the recipe's :class:`~hf_sparse.training.tasks.Task`; everything about the
training loop (mixed precision, gradient accumulation, activation checkpointing, DDP/FSDP through
``accelerate launch``) comes from ``transformers.Trainer`` and the recipe's ``TrainingArguments``.

What ``output_dir`` holds at the end (written by the main process only):

- the final model (``config.json``, ``model.safetensors``) and tokenizer, loadable with
  ``AutoModel*.from_pretrained(output_dir)``. With LoRA the adapter weights are **merged** into the
  base weights (``merge_lora: true``, the default), so the folder is a plain model, and the adapter
  alone is in ``output_dir/adapter``; with ``merge_lora: false`` (or under FSDP, where sharded
  weights cannot be merged in place) ``output_dir`` holds the adapter only (``merge_lora: false`` needs a
  ``model_name_or_path`` that loads as the model trained, the base the adapter names; see :func:`_adapter_base`:
  otherwise ``adapter/`` names no base and loads on the task's model as built). A resumed run saving the other
  format deletes the earlier one (:func:`_drop_other_format`);
- ``checkpoint-N/`` folders (saved atomically, see :mod:`~hf_sparse.training.checkpoints`);
  a rerun over an ``output_dir`` holding checkpoints or a trained model is an error unless it resumes
  (``resume``, ``resume_from_checkpoint``) or sets ``overwrite_output_dir``, which deletes them and the
  earlier run's other outputs (model, card, plots, results; printed) right before training, once every check
  has passed;
- ``all_results.json``: train/eval/test metrics (flat ``train_*``, ``eval_*``, ``test_*`` keys as in
  the HF example scripts), ``wall_time_s``, ``world_size``, ``distributed_type``,
  ``num_parameters``, ``num_trainable_parameters``, ``global_step``, ``start_step``,
  ``steps_this_run``, ``resumed_from``, the task's ``extras`` and the resolved ``recipe``. It is pushed with
  the model, so it names no folder of this machine: a path inside ``output_dir`` is relative to it
  (``model_card``: ``README.md``), one inside the working directory relative to that (``output_dir``, the
  recipe's ``source``), one in the home directory ``~/...``, any other is its name alone;
- ``log_history.json`` (kept current during training), ``loss.png`` (``plots``), ``runs/``
  (TensorBoard), ``README.md`` (``model_card``, via ``hf_sparse.hub``).

With ``push_to_hub: true`` the folder is pushed once at the end through ``hf_sparse.hub.push_to_hub``, to
the branch ``hub_revision`` if set (the Trainer's own per-save pushing is switched off, and a ``hub_strategy``
other than ``end`` is an error before training); if the push fails (the Hub unreachable, or anything else),
:class:`HubPushError` is raised *after* everything local is written.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import fnmatch
import json
import logging
import math
import os
import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .callbacks import BestMetricCheckCallback, LogHistoryCallback, loss_series
from .checkpoints import (
    RESUME_FIXED_RECIPE_KEYS,
    atomic_trainer_class,
    changed_settings,
    changed_training_args,
    latest_checkpoint,
    list_checkpoints,
    make_shareable,
    validate_checkpoint,
    write_json_atomic,
)
from .recipe import _PATH_METAVAR, RecipeError, load_recipe
from .secrets import is_secret_key, redact
from .tasks import get_task, metric_prefix

__all__ = ["HubPushError", "TrainingDivergedError", "run"]

logger = logging.getLogger(__name__)


class HubPushError(RuntimeError):
    """Training finished and the output folder is complete, but pushing it to the Hub failed."""


class TrainingDivergedError(RecipeError):
    """The model's evaluation predictions hold NaN: training diverged (e.g. a learning rate far too high)."""


# --- helpers ------------------------------------------------------------------------------------


def _count_parameters(model, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def _inside(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or lies below it (both absolute); never below the file system's root."""
    if folder == os.path.dirname(folder):
        return False
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:  # another drive (Windows)
        return False


def _portable_path(path: str, output_dir: str) -> str:
    """``path`` (absolute) as ``all_results.json`` records it: without this machine's folders, since the file is
    pushed to the Hub with the model. A path inside ``output_dir`` relative to it (``README.md``), one inside the
    working directory relative to that (``pipelines/motif/tiny.yaml``, ``outputs/motif-tiny``), one in the home
    directory as ``~/...``, any other as its name alone."""
    path, output_dir = os.path.abspath(path), os.path.abspath(output_dir)
    home = os.path.abspath(os.path.expanduser("~"))
    if path != output_dir and _inside(path, output_dir):
        return Path(os.path.relpath(path, output_dir)).as_posix()
    if _inside(path, os.getcwd()):
        return Path(os.path.relpath(path, os.getcwd())).as_posix()
    if _inside(path, home):
        return "~" if path == home else "~/" + Path(os.path.relpath(path, home)).as_posix()
    return os.path.basename(path)


def _portable_paths(value, output_dir: str):
    """``value`` (the results, nested) with every absolute path made portable (:func:`_portable_path`), also
    the value of a ``key=/abs/path`` override string."""
    if isinstance(value, dict):
        return {k: _portable_paths(v, output_dir) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_portable_paths(v, output_dir) for v in value]
    if isinstance(value, str):
        if os.path.isabs(value):
            return _portable_path(value, output_dir)
        key, sep, rest = value.partition("=")
        if sep and re.fullmatch(r"[\w.-]+", key) and os.path.isabs(rest):
            return f"{key}={_portable_path(rest, output_dir)}"
    return value


def _resume_checkpoint(recipe_args, training_args) -> str | None:
    """The validated checkpoint to resume from, or None. Deletes nothing.

    ``resume_from_checkpoint: PATH`` resumes from that folder, ``resume`` from the latest ``checkpoint-N`` in
    ``output_dir``; a fresh run needs an ``output_dir`` without an earlier run's checkpoints or trained model
    unless ``overwrite_output_dir`` is set (:func:`_check_output_dir`; :func:`_clear_output_dir` deletes them once
    every other check has passed). Runs on every process without collectives, so a user error is raised by all
    of them alike; what is resumed is printed by the main process.
    """
    output_dir = training_args.output_dir
    main = training_args.process_index == 0
    given = training_args.resume_from_checkpoint
    if given is not None:
        src = recipe_args.source
        if recipe_args.resume:
            raise RecipeError(
                f"{src}: resume (the latest checkpoint in output_dir) and resume_from_checkpoint={given!r} are "
                "both set; give one"
            )
        checkpoint = os.path.abspath(os.path.expanduser(given))
        if not os.path.isdir(checkpoint):
            raise RecipeError(
                f"{src}: resume_from_checkpoint={given!r}: folder not found ({checkpoint}); give a checkpoint-N "
                "folder, or --resume to continue from the latest one in output_dir"
            )
        inside = os.path.commonpath([os.path.realpath(checkpoint), os.path.realpath(output_dir)]) == (
            os.path.realpath(output_dir)
        )
        if inside and recipe_args.overwrite_output_dir:
            raise RecipeError(
                f"{src}: overwrite_output_dir would delete {checkpoint}, the resume_from_checkpoint to resume from; "
                "drop one of them"
            )
        state = validate_checkpoint(checkpoint)
        if not inside:  # another run's checkpoint: output_dir is this run's, as for a fresh run
            _check_output_dir(recipe_args, training_args)
        if main:
            logger.warning("resuming from %s (step %s)", checkpoint, state.get("global_step"))
        return checkpoint
    if recipe_args.resume:
        latest = latest_checkpoint(output_dir)  # transformers' get_last_checkpoint
        if latest is None:
            trained = _trained_model_files(output_dir)
            if trained:
                raise RecipeError(
                    f"output_dir {output_dir} holds a trained model ({', '.join(trained)}) but no checkpoint-N to "
                    "resume from; nothing was deleted. Pass --overwrite_output_dir instead of --resume to delete it "
                    "and train again from step 0 (or choose another --output_dir)"
                )
            if main:
                logger.warning("resume: no checkpoint in %s yet; training from scratch", output_dir)
            return None
        state = validate_checkpoint(latest)
        if main:
            logger.warning("resuming from %s (step %s)", latest, state.get("global_step"))
        return latest
    _check_output_dir(recipe_args, training_args)
    return None


def _check_output_dir(recipe_args, training_args) -> None:
    """The ``output_dir`` of a run that starts from step 0 (or from another run's checkpoint): checkpoints or a
    trained model of an earlier run there are an error naming them (nothing is deleted) unless
    ``overwrite_output_dir`` is set (then :func:`_clear_output_dir` deletes them, after every other check)."""
    output_dir = training_args.output_dir
    if not recipe_args.overwrite_output_dir:
        existing = list_checkpoints(output_dir)
        if existing:
            names = ", ".join(os.path.basename(p) for p in existing)
            raise RecipeError(
                f"output_dir {output_dir} already holds checkpoints ({names}); nothing was deleted. Pass --resume "
                f"to continue from {os.path.basename(existing[-1])}, or --overwrite_output_dir to delete them and "
                "start over (or choose another --output_dir)"
            )
        trained = _trained_model_files(output_dir)
        if trained:
            raise RecipeError(
                f"output_dir {output_dir} already holds a trained model ({', '.join(trained)}); nothing was "
                "deleted. Pass --overwrite_output_dir to delete it and train again (or choose another --output_dir)"
            )


def _clear_output_dir(recipe_args, training_args) -> None:
    """With ``overwrite_output_dir``: delete an earlier run's checkpoints in ``output_dir``, with everything else
    that run left behind (:func:`_previous_run_files`), and print what was deleted. *Collective.*

    Called once every check has passed (recipe values, the model's config, the data, the checkpoint to resume
    from, the Trainer's own argument checks), right before training: a run that stops on a user error leaves the
    earlier run as it was, and a killed overwriting run never leaves the earlier run's model, card or
    ``all_results.json`` looking like its own.
    """
    output_dir = training_args.output_dir
    if not recipe_args.overwrite_output_dir:
        return
    if training_args.should_save:
        existing = list_checkpoints(output_dir)
        if existing:
            names = ", ".join(os.path.basename(p) for p in existing)
            for path in existing:
                shutil.rmtree(path)
            logger.warning(
                "overwrite_output_dir: deleted %d old checkpoint(s) in %s (%s); training from step 0",
                len(existing),
                output_dir,
                names,
            )
        # an earlier run's outputs, only where one ran here (checkpoints, a trained model, its log): a folder
        # without any is the user's, whose README.md, images or tokenizer files are not a run's to delete
        ran = (
            existing
            or _trained_model_files(output_dir)
            or os.path.isfile(os.path.join(output_dir, "log_history.json"))
        )
        previous = _previous_run_files(output_dir) if ran else []
        if previous:
            for name in previous:
                path = os.path.join(output_dir, name)
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
            code = [n for n in previous if n.endswith(".py")]  # the remote-code bundle: dozens of files
            shown = [n for n in previous if n not in code] + (
                [f"{len(code)} .py files of its remote code"] if code else []
            )
            logger.warning(
                "overwrite_output_dir: deleted the previous run's outputs in %s (%s)",
                output_dir,
                ", ".join(shown),
            )
    from accelerate import PartialState

    PartialState().wait_for_everyone()  # on every process alike: none starts before the deletion is done


# Weights next to a config.json (or adapter_config.json) that make output_dir hold a trained model.
_MODEL_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
# What a run writes besides the files hf_sparse.hub pushes: transformers' save_metrics / save_state names.
_RESULT_FILE = re.compile(r"^(all_results|[\w.-]+_results|trainer_state|log_history)\.json$")


def _trained_model_files(output_dir) -> list[str]:
    """The files that show an earlier run's trained model in ``output_dir``: ``all_results.json`` (a finished
    run), a ``config.json`` with model weights, an ``adapter_config.json`` with adapter weights; [] if none."""

    def present(names):
        return [n for n in names if os.path.isfile(os.path.join(output_dir, n))]

    found = present(["all_results.json"])
    for config, weights in (("config.json", _MODEL_WEIGHTS), ("adapter_config.json", _ADAPTER_WEIGHTS)):
        if present([config]) and present(weights):
            found += [config, present(weights)[0]]
    return found


def _previous_run_files(output_dir) -> list[str]:
    """What an earlier run left in ``output_dir`` besides its checkpoints (names in it, sorted): the files
    ``hf_sparse.hub`` would push from it (model or adapter, tokenizer, card, remote code, results, plots), the
    result files (``all_results.json``, ``*_results.json``, ``trainer_state.json``, ``log_history.json``) and the
    LoRA ``adapter/`` folder. Other files (the user's), ``runs/`` (TensorBoard: one folder per run) and hidden
    files stay."""
    from hf_sparse import hub

    if not os.path.isdir(output_dir):
        return []
    names = {name.split("/", 1)[0] for name in hub.upload_file_list(output_dir)}  # adapter/x: the folder
    for entry in os.scandir(output_dir):
        if entry.is_file() and _RESULT_FILE.match(entry.name):
            names.add(entry.name)
    if os.path.isfile(os.path.join(output_dir, "adapter", "adapter_config.json")):
        names.add("adapter")
    return sorted(names)


# config.json keys that say nothing about the weights' shapes (bookkeeping written at save time, runtime flags)
_CONFIG_BOOKKEEPING = (
    "transformers_version",
    "architectures",
    "_name_or_path",
    "dtype",
    "torch_dtype",
    "auto_map",
    "custom_pipelines",  # the remote code's pipelines, written with it
    "use_cache",  # switched off by the Trainer for training
)


def _checkpoint_shapes(folder: str) -> dict[str, tuple] | None:
    """``{tensor name: shape}`` of a checkpoint's safetensors weights (read from the headers), or None for
    weights in another format."""
    from safetensors import safe_open

    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):  # sharded
        with open(index, encoding="utf-8") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = [
            n
            for n in ("model.safetensors", "adapter_model.safetensors")
            if os.path.isfile(os.path.join(folder, n))
        ]
    if not files:
        return None
    shapes = {}
    for name in files:
        with safe_open(os.path.join(folder, name), framework="pt") as f:
            for key in f.keys():
                shapes[key] = tuple(f.get_slice(key).get_shape())
    return shapes


def _check_checkpoint_fits(model, checkpoint: str, recipe_args) -> None:
    """Before training: the checkpoint's weights have the shapes of the recipe's model (else the Trainer's
    ``load_state_dict`` fails with a page of size mismatches). One error naming the ``config.json`` keys that
    differ between the checkpoint and the model (the recipe changed since), or the first tensor that does not fit."""
    saved = _checkpoint_shapes(checkpoint)
    if saved is None:
        return
    if hasattr(model, "peft_config"):  # the adapter file holds the adapter's tensors, under peft's names
        from peft import get_peft_model_state_dict

        expected = get_peft_model_state_dict(model)
    else:
        expected = model.state_dict()
    misfits = [k for k in saved if k in expected and saved[k] != tuple(expected[k].shape)]
    if not misfits:
        return
    config = getattr(model.get_base_model() if hasattr(model, "get_base_model") else model, "config", None)
    try:
        with open(os.path.join(checkpoint, "config.json"), encoding="utf-8") as f:
            before = json.load(f)
    except (OSError, ValueError):
        before = {}
    now = json.loads(config.to_json_string(use_diff=False)) if config is not None else {}
    differing = [
        f"{k}={before[k]!r} in the checkpoint, {now.get(k)!r} now"
        for k in sorted(before)
        if k not in _CONFIG_BOOKKEEPING and before[k] != now.get(k)
    ]
    name = misfits[0]
    what = "; ".join(differing) or (
        f"{name} is {list(saved[name])} in the checkpoint, {list(expected[name].shape)} in the model"
    )
    raise RecipeError(
        f"{recipe_args.source}: cannot resume from {checkpoint}: its weights do not fit the recipe's model ({what}); "
        "resume with the settings it was trained with, or start over with --overwrite_output_dir"
    )


def _check_checkpoint_tokenizer(tokenizer, checkpoint: str, recipe_args) -> None:
    """Before the data is prepared: the tokenizer the task built now maps every token to the id it had in the
    checkpoint's saved tokenizer. A task that builds its vocabulary from the data (a word-level tokenizer) builds
    another one when the data or its settings changed since (e.g. ``max_train_documents``): with as many tokens
    the weights still fit, and every embedding row would silently mean another token. One error naming the
    differences. Nothing to compare if the checkpoint holds no tokenizer (or the task uses none)."""
    if tokenizer is None or not hasattr(tokenizer, "get_vocab"):
        return
    names = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt")
    if not any(os.path.isfile(os.path.join(checkpoint, n)) for n in names):
        return
    from transformers import AutoTokenizer

    try:
        before = AutoTokenizer.from_pretrained(checkpoint).get_vocab()
    except (OSError, ValueError, KeyError) as e:  # e.g. a tokenizer class this environment cannot import
        logger.warning(
            "resume: cannot read the tokenizer of %s to compare it with the one built now (%s)", checkpoint, e
        )
        return
    now = tokenizer.get_vocab()
    if before == now:
        return
    moved = sorted((t for t in before if t in now and now[t] != before[t]), key=before.get)
    what = [f"{len(before)} tokens in the checkpoint, {len(now)} now"]
    if moved:
        t = moved[0]
        what.append(f"{len(moved)} with another id, e.g. {t!r} {before[t]} in the checkpoint, {now[t]} now")
    gone = sorted((t for t in before if t not in now), key=before.get)
    if gone:
        what.append(f"{len(gone)} missing now, e.g. {gone[0]!r}")
    new = sorted((t for t in now if t not in before), key=now.get)
    if new:
        what.append(f"{len(new)} new, e.g. {new[0]!r}")
    raise RecipeError(
        f"{recipe_args.source}: cannot resume from {checkpoint}: the tokenizer built now differs from the one it "
        f"was trained with ({'; '.join(what)}): the data or the tokenizer settings changed since (e.g. "
        "max_train_documents, vocab_size); resume with the settings it was trained with, or start over with "
        "--overwrite_output_dir"
    )


def _resume_settings(task_args, recipe_args) -> dict[str, Any]:
    """The recipe's data and model settings, saved with every checkpoint and compared on resume: the keys of
    :data:`~hf_sparse.training.checkpoints.RESUME_FIXED_RECIPE_KEYS` and the task's arguments but its paths and
    secret-named ones (written to no file)."""
    settings = {key: getattr(recipe_args, key) for key in RESUME_FIXED_RECIPE_KEYS}
    for f in dataclasses.fields(task_args):
        if f.init and f.metadata.get("metavar") != _PATH_METAVAR and not is_secret_key(f.name):
            settings[f.name] = getattr(task_args, f.name)
    return settings


def _check_checkpoint_args(checkpoint: str, recipe_args, training_args) -> None:
    """Before anything is built: the training settings a resume cannot change are those the checkpoint was trained
    with (:func:`~hf_sparse.training.checkpoints.changed_training_args`). The checkpoint's optimizer and scheduler
    states would silently keep its learning rate and optimizer settings while the card and ``all_results.json``
    reported the new ones, and another total batch size or seed would resume at another place in the data."""
    changed = changed_training_args(checkpoint, training_args)
    if changed:
        raise RecipeError(
            f"{recipe_args.source}: cannot resume from {checkpoint} with other training settings "
            f"({'; '.join(changed)}): its optimizer, scheduler and data position keep the ones it was trained "
            "with; resume with those (max_steps, num_train_epochs and the logging, evaluation and saving settings "
            "may change), or start over with --overwrite_output_dir"
        )


def _check_checkpoint_settings(checkpoint: str, task, task_args, recipe_args) -> None:
    """Before the data is prepared: the data and model settings (:func:`_resume_settings`, but the task's
    ``resume_free_arguments``) are those the checkpoint was trained with; else the run would silently go on
    training on other data (another ``dataset_seed`` or ``num_train``) from the checkpoint's place in it. Runs after
    :func:`_check_checkpoint_tokenizer`, whose message says more where the vocabulary was built from other data."""
    changed = changed_settings(
        checkpoint, _resume_settings(task_args, recipe_args), task.resume_free_arguments
    )
    if changed:
        free = ", ".join(task.resume_free_arguments)
        raise RecipeError(
            f"{recipe_args.source}: cannot resume from {checkpoint} with other data or model settings "
            f"({'; '.join(changed)}): it was trained on the data and model they define, and would go on with other "
            f"ones from its place in them; resume with those (paths, max_eval_samples, max_test_samples and the "
            f"task's {free} may change), or start over with --overwrite_output_dir"
        )


def _check_writable(recipe_args, training_args) -> None:
    """Before anything is built: ``output_dir`` (or the nearest folder above it that exists, where it will be
    created) is a folder this process may write in. A read-only file system, a missing permission or a file in
    the way is one error here, not a traceback once the model and the data are built."""
    output_dir = training_args.output_dir
    existing = os.path.abspath(output_dir)
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    where = existing if existing == os.path.abspath(output_dir) else f"{existing}, where it would be created,"
    if not os.path.isdir(existing):
        raise RecipeError(
            f"{recipe_args.source}: output_dir {output_dir} cannot be created: {existing} is a file"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        try:
            read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
        except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
            read_only = False
        why = "is on a read-only file system" if read_only else "is not writable by this user"
        raise RecipeError(
            f"{recipe_args.source}: output_dir {output_dir} cannot be written: {where} {why}; choose another "
            "--output_dir"
        )


# config keys that change how a model trains or which kernel runs it, not what it computes: an adapter's base may
# differ in them from the model trained
_RUNTIME_KEY = re.compile(r"dropout|attention_backend$")


def _adapter_base(model, task_args) -> tuple[str | None, str]:
    """The base model an adapter of ``model`` (the task's model before LoRA) can name: ``model_name_or_path`` where
    it loads as that model (same model type, same config but for bookkeeping, dropout and kernel keys), else None;
    and why not ("" if it does). A model trained from random initialisation, a task model built on an encoder
    checkpoint (new heads), one loaded from a saved model of another task (another head) or with settings the task
    changed (other labels, a new token) has no such base: peft would name the checkpoint, which loads without the
    trained heads."""
    path = getattr(task_args, "model_name_or_path", None)
    if not path:
        return None, "model_name_or_path is not set (a new model, trained from random initialisation)"
    from transformers import AutoConfig

    config = getattr(model, "config", None)
    if not hasattr(config, "to_dict"):
        return None, f"the task's model ({type(model).__name__}) has no config to compare with {path!r}"
    saved = AutoConfig.from_pretrained(path).to_dict()
    now = config.to_dict()
    if saved.get("model_type") != now.get("model_type"):
        return None, (
            f"model_name_or_path={path!r} is a {saved.get('model_type')!r} model, and the task trains a "
            f"{now.get('model_type')!r} model built on it (its heads are new)"
        )
    keys = sorted(
        k for k in set(saved) | set(now) if k not in _CONFIG_BOOKKEEPING and not _RUNTIME_KEY.search(k)
    )
    differing = [k for k in keys if saved.get(k) != now.get(k)]
    if differing:
        shown = ", ".join(differing[:4]) + (f" and {len(differing) - 4} more" if len(differing) > 4 else "")
        key = differing[0]
        example = f"{key}={saved.get(key)!r} there, {now.get(key)!r} in the model trained"
        return None, (
            f"model_name_or_path={path!r} loads as another model than the one trained, whose config the task "
            f"changed ({shown}" + (f"; {example}" if len(example) <= 100 else "") + ")"
        )
    return path, ""


def _check_adapter_base(base: str | None, why: str, recipe_args, training_args) -> None:
    """An adapter saved alone (``merge_lora: false``, or LoRA under FSDP) loads only on the base model it names:
    one error before training where the task's model has none (:func:`_adapter_base`)."""
    if base is not None or (recipe_args.merge_lora and not training_args.fsdp):
        return
    how = "merge_lora: false" if not recipe_args.merge_lora else "FSDP (sharded weights are not merged)"
    raise RecipeError(
        f"{recipe_args.source}: lora: true with {how} saves the adapter alone, which loads only on top of the base "
        f"model it names, and no saved model is the one trained: {why}; keep merge_lora: true (the default) or "
        "set model_name_or_path to a saved model of this task"
    )


def _name_matches(names, wanted: str) -> bool:
    """peft's rule for a name in a list of ``target_modules`` (and ``target_parameters``): the full name or its
    last dotted parts."""
    return any(n == wanted or n.endswith("." + wanted) for n in names)


def _check_lora_names(model, recipe_args) -> None:
    """Every name the recipe lists in ``lora_target_modules``, ``lora_modules_to_save`` and
    ``lora_target_parameters`` matches a module (or parameter) of the model: a misspelt one would silently adapt
    or train nothing (peft only refuses a list that matches nothing at all)."""
    modules = [name for name, _ in model.named_modules() if name]
    parameters = [name for name, _ in model.named_parameters()]
    for key, names in (("lora_target_modules", modules), ("lora_modules_to_save", modules),
                       ("lora_target_parameters", parameters)):  # fmt: skip
        for wanted in getattr(recipe_args, key) or []:
            if not _name_matches(names, wanted):
                leaves = sorted({n.rsplit(".", 1)[-1] for n in names})
                close = difflib.get_close_matches(wanted, leaves, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                what = "parameter" if key == "lora_target_parameters" else "module"
                raise RecipeError(
                    f"{recipe_args.source}: {key}: {wanted!r} names no {what} of the model{hint}"
                )


def _lora_settings(task, model, recipe_args) -> tuple[list[str] | str, list[str] | None]:
    """The ``target_modules`` and ``modules_to_save`` LoRA uses: the recipe's ``lora_target_modules``, else the
    task's; the task's ``modules_to_save`` (its new heads, which must train) followed by the recipe's
    ``lora_modules_to_save``."""
    targets = recipe_args.lora_target_modules or task.lora_target_modules(model)
    to_save = list(task.lora_modules_to_save(model) or [])
    to_save += [name for name in recipe_args.lora_modules_to_save or [] if name not in to_save]
    return targets, to_save or None


def _apply_lora(task, model, recipe_args, training_args, base: str | None = None):
    """Wrap ``model`` with peft LoRA adapters (only adapters, ``modules_to_save`` and the task's
    :meth:`~hf_sparse.training.Task.lora_trainable_token_indices` rows train). The saved adapter names ``base``
    (:func:`_adapter_base`) as its base model, or none."""
    import peft
    from peft import LoraConfig, get_peft_model

    _check_lora_names(model, recipe_args)
    targets, to_save = _lora_settings(task, model, recipe_args)
    tokens = task.lora_trainable_token_indices(model)
    if (
        getattr(training_args, "activation_checkpointing", False) or training_args.gradient_checkpointing
    ) and hasattr(model, "enable_input_require_grads"):
        model.enable_input_require_grads()  # checkpointed blocks need an input that requires grad
    values = dict(
        r=recipe_args.lora_r,
        lora_alpha=recipe_args.lora_alpha,
        lora_dropout=recipe_args.lora_dropout,
        target_modules=targets,
        target_parameters=recipe_args.lora_target_parameters,
        modules_to_save=to_save,
        task_type=task.lora_task_type,
    )
    if tokens is not None:
        values["trainable_token_indices"] = tokens
    # target_parameters: peft 0.17, trainable_token_indices: peft 0.15 (the declared floor, 0.21.2: LED + LoRA)
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(LoraConfig)})
    if unknown:
        raise RecipeError(
            f"{recipe_args.source}: lora: true needs peft >= 0.21.2, as pyproject.toml declares (the installed "
            f"{peft.__version__} has no LoraConfig {', '.join(unknown)}); pip install -U peft"
        )
    config = LoraConfig(**values)
    # peft names it in adapter_config.json (base_model_name_or_path; "": none)
    if hasattr(model, "name_or_path"):
        model.name_or_path = base or ""
    try:
        return get_peft_model(model, config)
    except ValueError as e:
        keys = f"lora_target_modules={targets!r}"
        if recipe_args.lora_target_parameters:
            keys += f", lora_target_parameters={recipe_args.lora_target_parameters!r}"
        raise RecipeError(f"{recipe_args.source}: {keys}: {e}") from e


def _drop_previous_results(output_dir: str) -> None:
    """Before the final model files replace a finished run's (a run continued with ``--resume``): delete that run's
    ``all_results.json`` with the files it names, its model card and the task's figures (``extras``), and its
    ``loss.png``, so that a run killed while saving leaves the new weights without results (as a killed new run
    does), never next to the earlier run's."""
    path = os.path.join(output_dir, "all_results.json")
    if not os.path.isfile(path):
        return
    try:
        with open(path, encoding="utf-8") as f:
            results = json.load(f)
        named = [results.get("model_card"), *_strings(results.get("extras"))]
    except (OSError, ValueError, AttributeError):  # unreadable: delete it all the same
        named = []
    os.remove(path)
    root = os.path.abspath(output_dir)
    for name in [n for n in named if isinstance(n, str) and n and not os.path.isabs(n)] + ["loss.png"]:
        file = os.path.abspath(os.path.join(root, name))
        if file != root and _inside(file, root) and os.path.isfile(file):
            os.remove(file)
    logger.info(
        "deleted the earlier run's results, card and plots in %s: new weights replace its model", output_dir
    )


# A sharded model's weight files (next to their index)
_WEIGHT_SHARD = re.compile(r"^(model|pytorch_model)-\d+-of-\d+\.(safetensors|bin)$")


def _drop_other_format(output_dir: str, adapter_only: bool) -> None:
    """Before the final model is saved over an earlier run's (``--resume`` with ``merge_lora`` changed): delete the
    earlier model in the other format, so that the folder never holds both (transformers would load the merged
    weights and apply the adapter on top of them again, and the push would send both). Before an adapter alone:
    a model (``config.json`` with weights: those, ``generation_config.json``, shards and index, the remote code
    with its manifest) and ``adapter/``; before a model: an adapter in the folder itself."""
    if not os.path.isdir(output_dir):
        return
    present = set(os.listdir(output_dir))
    if adapter_only:
        adapter = os.path.isfile(os.path.join(output_dir, "adapter", "adapter_config.json"))
        names = ["adapter"] if adapter else []
        shards = sorted(n for n in present if _WEIGHT_SHARD.match(n))
        if "config.json" in present and (present & set(_MODEL_WEIGHTS) or shards):
            from hf_sparse import hub

            # the remote code, found while config.json (its auto_map) is still there
            code = [n for n in hub.upload_file_list(output_dir) if n.endswith(".py")]
            names += ["config.json", "generation_config.json", "hf_sparse_bundle.json", *_MODEL_WEIGHTS]
            names += code + shards
    else:
        names = ["adapter_config.json", *_ADAPTER_WEIGHTS] if "adapter_config.json" in present else []
    dropped = []
    for name in names:
        path = os.path.join(output_dir, name)
        if name == "adapter":
            shutil.rmtree(path)
        elif os.path.isfile(path):
            os.remove(path)
        else:
            continue
        dropped.append(name)
    if dropped:
        code = [n for n in dropped if n.endswith(".py")]  # the remote-code bundle: dozens of files
        shown = [n for n in dropped if n not in code] + (
            [f"{len(code)} .py files of its remote code"] if code else []
        )
        logger.warning(
            "deleted the earlier run's %s in %s (%s): this run saves %s there",
            "model" if adapter_only else "adapter",
            output_dir,
            ", ".join(shown),
            "the adapter alone" if adapter_only else "a model",
        )


def _strings(value) -> list[str]:
    """Every string in ``value`` (nested dicts and lists)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def _save_final_model(trainer, task, recipe_args, tokenizer, output_dir: str):
    """Save the final model (merged LoRA if requested) and the task's extras; returns the saved model. The earlier
    run's results and card go first (:func:`_drop_previous_results`), and its model in the other format
    (:func:`_drop_other_format`)."""
    model = trainer.model
    merge = recipe_args.lora and recipe_args.merge_lora and not trainer.is_fsdp_enabled
    if trainer.is_world_process_zero():
        _drop_previous_results(output_dir)
        _drop_other_format(output_dir, adapter_only=recipe_args.lora and not merge)
    if merge:
        trainer.save_model(os.path.join(output_dir, "adapter"))  # collective; main process writes
        saved = None
        if trainer.is_world_process_zero():
            saved = copy.deepcopy(model).merge_and_unload()  # the trained model stays a PeftModel
            saved.save_pretrained(output_dir)
    else:
        if recipe_args.lora and recipe_args.merge_lora:
            logger.warning("LoRA under FSDP: saving the adapter only (sharded weights are not merged)")
        trainer.save_model(output_dir)
        saved = model
    if trainer.is_world_process_zero():
        task.save_extras(output_dir, tokenizer, saved)
        _remove_pickles(output_dir)
    trainer.accelerator.wait_for_everyone()
    return saved


# Pickles the Trainer writes next to a saved model; only checkpoint-N folders need them (for resume).
_FINAL_FOLDER_PICKLES = ("training_args.bin",)


def _remove_pickles(output_dir: str) -> None:
    """Delete the Trainer's pickles from the final model folder (and its adapter folder)."""
    for folder in (output_dir, os.path.join(output_dir, "adapter")):
        for name in _FINAL_FOLDER_PICKLES:
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                os.remove(path)


def _mixed_precision(training_args) -> str:
    """The precision accelerate trains in: ``fp16`` only off the CPU (there it trains in fp32, and
    :func:`_check_precision` refuses it), ``bf16`` on any device."""
    if training_args.bf16:
        return "bf16"
    if training_args.fp16 and training_args.device.type != "cpu":
        return "fp16"
    return "no"


def _training_config(recipe_args, training_args, lora: dict | None = None) -> dict[str, Any]:
    """The settings a model card reports; with LoRA, the targets and the modules trained in full as the saved
    adapter's config ``lora`` has them (the task's defaults included), else as the recipe gives them."""
    config = {
        "learning_rate": training_args.learning_rate,
        "num_train_epochs": training_args.num_train_epochs,
        "max_steps": training_args.max_steps,
        "per_device_train_batch_size": training_args.per_device_train_batch_size,
        "gradient_accumulation_steps": training_args.gradient_accumulation_steps,
        "world_size": training_args.world_size,
        "total_train_batch_size": training_args.per_device_train_batch_size
        * training_args.gradient_accumulation_steps
        * training_args.world_size,
        "lr_scheduler_type": str(
            getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type)
        ),
        "warmup_steps": training_args.warmup_steps,
        "weight_decay": training_args.weight_decay,
        "seed": training_args.seed,
        "mixed_precision": _mixed_precision(training_args),
    }
    if recipe_args.lora:
        lora = {
            k: sorted(v) if k.startswith("target_") and isinstance(v, list) else v
            for k, v in (lora or {}).items()
        }
        config.update(
            lora_r=recipe_args.lora_r,
            lora_alpha=recipe_args.lora_alpha,
            lora_dropout=recipe_args.lora_dropout,
            lora_target_modules=lora.get("target_modules", recipe_args.lora_target_modules),
            lora_target_parameters=lora.get("target_parameters", recipe_args.lora_target_parameters),
            lora_modules_to_save=lora.get("modules_to_save", recipe_args.lora_modules_to_save),
            merge_lora=recipe_args.merge_lora,
        )
        if lora.get("trainable_token_indices"):
            config["lora_trainable_token_indices"] = lora["trainable_token_indices"]
    return config


def _saved_adapter_config(output_dir: str) -> tuple[dict | None, bool]:
    """The saved adapter's ``adapter_config.json`` (in ``output_dir`` itself, else in ``adapter/``), or None; and
    whether it is the adapter alone (in ``output_dir``: no model there)."""
    for folder, alone in ((output_dir, True), (os.path.join(output_dir, "adapter"), False)):
        try:
            with open(os.path.join(folder, "adapter_config.json"), encoding="utf-8") as f:
                return json.load(f), alone
        except (OSError, ValueError):
            continue
    return None, False


def _is_hub_id(name) -> bool:
    """Whether ``name`` (an adapter's ``base_model_name_or_path``) is a Hub model id rather than a local folder."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not isinstance(name, str) or not name.strip() or os.path.isabs(name) or os.path.isdir(name):
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def _write_model_card(task, task_args, recipe_args, training_args, results, output_dir, model) -> str | None:
    """README.md via ``hf_sparse.hub``; skipped with a warning if that module is unavailable or the
    card cannot be rendered (the error is recorded as ``model_card_error`` in the results). A metric that
    is not finite (e.g. AUROC NaN on a split holding one class) is left out of the card, which names it;
    the task's :attr:`~hf_sparse.training.Task.count_metrics` are listed as counts, outside the model-index. The
    remote code's ``requirements`` come from the bundle's manifest: the card says whether loading needs hf-sparse."""
    try:
        from hf_sparse import hub
        from hf_sparse.hub.bundle import BUNDLE_MANIFEST
    except ImportError as e:
        logger.warning("model card skipped: hf_sparse.hub is not available (%s)", e)
        return None
    metrics, counts, undefined = {}, {}, {}
    for k, v in results.items():
        if (
            k.startswith(("eval_", "test_"))
            and not k.endswith(("_runtime", "_per_second"))
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
        ):
            name = k.split("_", 1)[1]
            if not math.isfinite(v):
                undefined[k] = v
            elif any(fnmatch.fnmatchcase(name, pattern) for pattern in task.count_metrics):
                counts[k] = v
            else:
                metrics[k] = v
    if undefined:
        listed = ", ".join(f"{k}={v}" for k, v in undefined.items())
        logger.warning("model card: metrics left out because they are not finite: %s", listed)
    pattern = getattr(getattr(model, "config", None), "attention_pattern", None)
    kwargs = {
        "model_name": recipe_args.model_name or training_args.hub_model_id or Path(output_dir).name,
        "metrics": metrics,
        "counts": counts,
        "dataset_name": f"{task.name} evaluation data",
        "pattern": pattern if isinstance(pattern, (str, dict, list)) else None,  # a list: one per layer
    }
    lora, adapter_only = _saved_adapter_config(output_dir) if recipe_args.lora else (None, False)
    kwargs["training_config"] = _training_config(recipe_args, training_args, lora)
    start = getattr(task_args, "model_name_or_path", None)
    if (
        isinstance(start, str) and start.strip() and not os.path.isdir(start)
    ):  # a Hub id (a local path stays out)
        kwargs["base_model"] = start
    if training_args.hub_model_id:
        kwargs["repo_id"] = training_args.hub_model_id
    info = dict(task.card_info(task_args, metrics) or {})
    if isinstance(info.get("training_config"), dict):  # the task's settings (block_size, ...) join the run's
        info["training_config"] = {**kwargs["training_config"], **info["training_config"]}
    kwargs.update(info)
    if undefined:
        kwargs["extra"] = {
            **(kwargs.get("extra") or {}),
            "metrics left out (not finite)": ", ".join(f"{k} = {v}" for k, v in undefined.items()),
        }
    if adapter_only:  # no model, no modelling code: the card's loading code loads the base the adapter names
        base = (lora or {}).get("base_model_name_or_path")
        hub_id = _is_hub_id(base)
        named = f"`{base}`" if hub_id else "named in adapter_config.json (a local folder)"
        kwargs["adapter_only"] = True  # library_name: peft; How to use: the base model, then PeftModel
        kwargs.pop("base_model", None)  # the base the adapter loads on, where a Hub id (no local path)
        if hub_id:
            kwargs["base_model"] = base
        kwargs["tags"] = [*(kwargs.get("tags") or []), "peft", "lora"]
        kwargs["extra"] = {
            **(kwargs.get("extra") or {}),
            "LoRA adapter": "this repository holds a LoRA adapter alone (adapter_config.json, "
            "adapter_model.safetensors; merge_lora: false), not a model: no config.json and no modelling code of "
            f"its own. With peft installed, from_pretrained loads its base model {named} with that model's code, "
            "then the adapter (or: PeftModel.from_pretrained(base_model, repo_id))",
        }
    try:
        manifest = os.path.join(output_dir, BUNDLE_MANIFEST)  # the remote code's imports: hf_sparse too?
        if os.path.isfile(manifest):
            with open(manifest, encoding="utf-8") as f:
                bundle = json.load(f)
            if not isinstance(bundle, dict):
                raise ValueError(f"{BUNDLE_MANIFEST} does not hold a JSON object")
            kwargs["requirements"] = bundle.get("requirements")
        card = hub.render_model_card(task.descriptor or "sparse_transformer", **kwargs)
    except (ValueError, TypeError, FileNotFoundError) as e:  # a template error included (hf_sparse.hub.cards)
        logger.warning("model card skipped: %s", e)
        results["model_card_error"] = str(e)
        return None
    return str(hub.save_model_card(card, output_dir))


def _check_push(recipe_args, training_args) -> None:
    """Before training: a push needs a ``user/name`` hub_model_id (hf_sparse.hub requires the namespace), a
    hub_revision that names a branch, and no hub_strategy other than ``end``: the run pushes the final folder
    once, at the end (never checkpoints during training)."""
    src = recipe_args.source
    repo_id = training_args.hub_model_id
    if not repo_id or repo_id.count("/") != 1:
        raise RecipeError(f"{src}: push_to_hub: true needs hub_model_id: 'user/name' (got {repo_id!r})")
    revision = training_args.hub_revision
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise RecipeError(f"{src}: hub_revision must be a branch name, got {revision!r}")
    strategy = (recipe_args.values or {}).get("hub_strategy")  # set by the recipe or an override
    strategy = getattr(strategy, "value", strategy)
    if strategy is not None and strategy != "end":
        raise RecipeError(
            f"{src}: hub_strategy={strategy!r} is not supported: the run pushes output_dir once when it ends "
            "(checkpoints stay local); drop hub_strategy or set it to 'end'"
        )


def _push(output_dir, recipe_args, training_args, token=None) -> str:
    """Push ``output_dir`` with ``hf_sparse.hub.push_to_hub`` (to the branch ``hub_revision``, created if
    missing); any failure is a HubPushError with a one-line message (the cause chained, for ``--debug``)."""
    try:
        from hf_sparse import hub
        from hf_sparse.hub.common import push_command
    except ImportError as e:
        raise HubPushError(
            f"push_to_hub needs hf_sparse.hub, which cannot be imported ({e}); the local output at "
            f"{output_dir} is intact"
        ) from e
    repo_id, revision = training_args.hub_model_id, training_args.hub_revision
    private = recipe_args.hub_private or bool(training_args.hub_private_repo)
    try:
        return hub.push_to_hub(output_dir, repo_id, token=token, private=private, revision=revision)
    except hub.HubError as e:  # unreachable (HubUnavailableError), rejected credentials, refusal
        lines = str(e).strip().splitlines()
        raise HubPushError(lines[0] if lines else type(e).__name__) from e
    except Exception as e:  # the folder cannot be pushed as it is (ValueError), or an unexpected failure
        reason = " ".join(redact(f"{type(e).__name__}: {e}", [token] if token else []).split())
        command = push_command(output_dir, repo_id, private, revision)
        raise HubPushError(
            f"pushing {output_dir} to {repo_id} failed ({reason}); the local output at {output_dir} is intact; "
            f"push it later with: {command}"
        ) from e


def _take_secrets(training_args) -> dict[str, Any]:
    """Remove secret-named values (``hub_token``) from ``training_args`` and return them.

    ``Trainer`` pickles its ``TrainingArguments`` into ``training_args.bin`` in every checkpoint;
    with the token cleared there, the only copy lives in this process until the push.
    """
    taken = {}
    for f in dataclasses.fields(training_args):
        if is_secret_key(f.name) and getattr(training_args, f.name, None) is not None:
            taken[f.name] = getattr(training_args, f.name)
            setattr(training_args, f.name, None)
    return taken


def _accelerator_available() -> bool:
    import torch

    if torch.cuda.is_available():
        return True
    for name in ("xpu", "mps", "npu"):
        backend = getattr(torch, name, None) or getattr(torch.backends, name, None)
        if backend is not None and getattr(backend, "is_available", lambda: False)():
            return True
    return False


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on", "y", "t")


def _check_launch(source, fsdp=False, deepspeed=False) -> None:
    """FSDP or DeepSpeed requested (accelerate config or recipe) where they cannot run: a clear error.

    Without CUDA, ``accelerate launch --config_file configs/accelerate/fsdp.yaml`` (or a DeepSpeed
    config) would otherwise start gloo DDP processes and train unsharded without saying so. Runs
    before ``TrainingArguments`` is built (which already needs the deepspeed package).
    """
    wanted = []
    if _env_flag("ACCELERATE_USE_FSDP") or fsdp:
        wanted.append("FSDP")
    if _env_flag("ACCELERATE_USE_DEEPSPEED") or deepspeed:
        wanted.append("DeepSpeed")
    if not wanted:
        return
    import torch

    if not torch.cuda.is_available():
        raise RecipeError(
            f"{source}: {' and '.join(wanted)} requested (accelerate config or recipe) but this machine has no "
            "CUDA GPU; it would run as plain gloo DDP instead. Launch with configs/accelerate/cpu_ddp.yaml "
            "(or without --config_file) on CPU"
        )
    if "DeepSpeed" in wanted:
        import importlib.util

        if importlib.util.find_spec("deepspeed") is None:
            raise RecipeError(
                f"{source}: DeepSpeed requested but deepspeed is not installed (pip install deepspeed)"
            )


# TrainingArguments flags of the HF example scripts that a run cannot honour when false: what to do instead.
_UNUSED_FLAGS = {
    "do_train": "a recipe run always trains, then evaluates; drop do_train (the metrics of a finished run are in "
    "its all_results.json)",
    "do_eval": "the validation split is always evaluated at the end; drop do_eval (eval_strategy: 'no' skips the "
    "evaluations during training, max_eval_samples shortens the split)",
    "do_predict": "the test split is evaluated at the end when the task has one; drop do_predict "
    "(max_test_samples shortens the split)",
}


def _check_training_values(recipe_args, training_args) -> None:
    """Values ``TrainingArguments`` accepts but that train nothing or nonsense, or that a run would ignore
    (``do_train: false`` and the like): one clear error."""
    src = recipe_args.source
    if training_args.max_steps == 0 or (
        training_args.max_steps < 0 and not training_args.num_train_epochs > 0
    ):
        key, value = (
            ("max_steps", training_args.max_steps)
            if training_args.max_steps == 0
            else ("num_train_epochs", training_args.num_train_epochs)
        )
        raise RecipeError(
            f"{src}: {key}={value!r} trains nothing; set num_train_epochs > 0 (or max_steps > 0)"
        )
    positive = ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps")
    for key in positive:
        value = getattr(training_args, key, 1)
        if value is not None and value <= 0:
            raise RecipeError(f"{src}: {key}={value!r} must be a positive int")
    for key in ("learning_rate", "weight_decay", "warmup_steps", "max_grad_norm", "dataloader_num_workers"):
        value = getattr(training_args, key, 0)
        if value is not None and not (value >= 0):  # also NaN (load_recipe rejects inf)
            raise RecipeError(f"{src}: {key}={value!r} must be >= 0")
    for strategy, steps in (("save_strategy", "save_steps"), ("eval_strategy", "eval_steps"),
                            ("logging_strategy", "logging_steps")):  # fmt: skip
        mode = getattr(
            getattr(training_args, strategy, None), "value", getattr(training_args, strategy, None)
        )
        value = getattr(training_args, steps, None)
        if mode == "steps" and value is not None and value <= 0:
            raise RecipeError(f"{src}: {steps}={value!r} must be positive with {strategy}: steps")
    # seed: numpy's range (set_seed seeds numpy too); data_seed only seeds torch generators (up to 2**64 - 1)
    for key, bits in (("seed", 32), ("data_seed", 64)):
        value = getattr(training_args, key, None)
        if value is not None and not 0 <= value <= 2**bits - 1:
            raise RecipeError(f"{src}: {key}={value!r} must be in 0 .. 2**{bits} - 1")
    # transformers' Trainer checks these only when it is built, after the model and the data
    save_strategy = getattr(training_args.save_strategy, "value", training_args.save_strategy)
    eval_strategy = getattr(training_args.eval_strategy, "value", training_args.eval_strategy)
    if save_strategy == "best" and training_args.metric_for_best_model is None:
        raise RecipeError(
            f"{src}: save_strategy='best' needs metric_for_best_model (e.g. metric_for_best_model: loss, or a "
            "metric the task reports)"
        )
    if save_strategy == "best" and eval_strategy == "no":
        raise RecipeError(
            f"{src}: save_strategy='best' saves at evaluations, and eval_strategy='no' runs none: set "
            "eval_strategy: steps (or epoch)"
        )
    values = recipe_args.values or {}
    for key, instead in _UNUSED_FLAGS.items():  # set to false in the recipe or an override
        if values.get(key) is False:
            raise RecipeError(f"{src}: {key}=false is not supported: {instead}")


def _check_lora(recipe_args, task_args) -> None:
    """``lora: true, merge_lora: false`` saves the adapter alone, which loads only on top of the base model its
    ``adapter_config.json`` names: a model trained from random initialisation (no ``model_name_or_path``) has no
    such name, and the folder would load nowhere (transformers and peft look for ``None`` on the Hub)."""
    if recipe_args.lora and not recipe_args.merge_lora and not getattr(task_args, "model_name_or_path", None):
        raise RecipeError(
            f"{recipe_args.source}: lora: true with merge_lora: false saves the adapter alone, which loads only on "
            "top of its base model, and model_name_or_path is not set (a new model, trained from random "
            "initialisation, that no adapter can name): keep merge_lora: true (the default; the adapter is in "
            "adapter/ too) or set model_name_or_path to a saved model"
        )


def _check_precision(recipe_args, training_args) -> None:
    """``fp16`` on the CPU (``use_cpu``, or no GPU): accelerate would switch it off and train in fp32 while the
    card said fp16. Runs after :func:`_check_launch` (the device is set up here)."""
    if training_args.fp16 and training_args.device.type == "cpu":
        raise RecipeError(
            f"{recipe_args.source}: fp16=true needs a GPU: on the CPU accelerate turns fp16 off and trains in "
            "fp32; use bf16=true on the CPU (or drop fp16)"
        )


def _check_report_to(recipe_args, training_args) -> None:
    """Every ``report_to`` integration is installed (else transformers raises deep in ``Trainer``)."""
    from transformers.integrations import get_available_reporting_integrations

    wanted = training_args.report_to or []
    if isinstance(wanted, str):
        wanted = [wanted]
    wanted = [w for w in wanted if w not in ("none", "all")]
    available = set(get_available_reporting_integrations())
    missing = [w for w in wanted if w not in available]
    if missing:
        raise RecipeError(
            f"{recipe_args.source}: report_to={missing[0]!r} but {missing[0]} is not installed "
            f"(pip install {missing[0]}), or set report_to: none (installed: {sorted(available) or 'none'})"
        )


def _check_task_arguments(task, task_args, recipe_args) -> None:
    """The task's own checks that need the file system (data folders and files exist, known names)."""
    try:
        task.check_arguments(task_args)
    except (ValueError, KeyError, FileNotFoundError, NotADirectoryError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        raise RecipeError(f"{recipe_args.source}: {message}") from e


def _check_card_template(task, recipe_args) -> None:
    """With ``model_card``: the task's card template (its :class:`~hf_sparse.tasks.CardInfo`) exists and parses,
    before anything trains (a card that cannot be rendered at the end is only a warning)."""
    if not recipe_args.model_card:
        return
    try:
        from hf_sparse.hub.cards import check_template
    except ImportError:  # the card is skipped with a warning at the end
        return
    try:
        check_template(task.descriptor or "sparse_transformer")
    except (ValueError, FileNotFoundError) as e:
        raise RecipeError(f"{recipe_args.source}: task {task.name!r}: {e} (or set model_card: false)") from e


def _has_nan(x) -> bool:
    """True if ``x`` (an array, or tuples/lists/dicts of arrays, as in ``EvalPrediction.predictions``) holds NaN."""
    import numpy as np

    if isinstance(x, dict):
        return any(_has_nan(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(_has_nan(v) for v in x)
    x = np.asarray(x) if x is not None else None
    return x is not None and x.dtype.kind in "fc" and bool(np.isnan(x).any())


# the prefixes the Trainer and the runner put before a metric's name (``metric_prefix``)
_SPLIT_PREFIXES = ("eval_", "test_")


def _check_computed_metrics(task, result) -> None:
    """What the task's ``compute_metrics`` function returned: a dict of unprefixed metric names (the Trainer adds
    ``eval_``/``test_``), none of them ``loss`` (it would replace the model's ``eval_loss``)."""
    if not isinstance(result, dict):
        raise TypeError(
            f"task {task.name!r}: compute_metrics must return a dict of metric name -> value, got "
            f"{type(result).__name__}"
        )
    for key in result:
        if not isinstance(key, str):
            raise TypeError(
                f"task {task.name!r}: compute_metrics returned the metric name {key!r}, not a string"
            )
        if key == "loss":
            raise ValueError(
                f"task {task.name!r}: compute_metrics returned the key 'loss', which would replace the model's own "
                "loss (eval_loss, test_loss); name the metric otherwise"
            )
        if key.startswith(_SPLIT_PREFIXES):
            raise ValueError(
                f"task {task.name!r}: compute_metrics returned the key {key!r}: the Trainer adds the split's prefix "
                f"itself ('eval_', 'test_'); return {key.split('_', 1)[1]!r}"
            )


def _check_evaluated_metrics(task, split: str, result) -> None:
    """What the task's ``evaluate`` returned for ``split``: a dict whose keys carry the split's prefix (else the
    test metrics overwrote the validation ones), as ``trainer.evaluate(dataset, metric_key_prefix=...)`` does."""
    if not isinstance(result, dict):
        raise TypeError(
            f"task {task.name!r}: evaluate must return a dict of metrics (trainer.evaluate's), got "
            f"{type(result).__name__} for the {split!r} split"
        )
    prefix = metric_prefix(split) + "_"
    wrong = [k for k in result if k != "epoch" and not (isinstance(k, str) and k.startswith(prefix))]
    if wrong:
        raise ValueError(
            f"task {task.name!r}: evaluate returned the key {wrong[0]!r} for the {split!r} split: every key must "
            f"start with {prefix!r} (trainer.evaluate(dataset, metric_key_prefix=metric_prefix(split)))"
        )


def _checked_metrics(trainer, recipe_args, task):
    """The trainer's ``compute_metrics``, first checking the predictions for NaN: a diverged run gets one clear
    :class:`TrainingDivergedError` instead of whatever a metric raises on NaN scores; then what the task's
    function returned (:func:`_check_computed_metrics`)."""
    compute_metrics = trainer.compute_metrics
    if compute_metrics is None:
        return None

    def metrics(pred, **kwargs):
        if _has_nan(pred.predictions):
            raise _diverged(trainer, recipe_args, "the model's predictions hold NaN at the evaluation")
        result = compute_metrics(pred, **kwargs)
        # batch_eval_metrics: only the last batch's call (compute_result=True) returns the dict
        if kwargs.get("compute_result", True):
            _check_computed_metrics(task, result)
        return result

    return metrics


def _diverged(trainer, recipe_args, what: str) -> TrainingDivergedError:
    args = trainer.args
    return TrainingDivergedError(
        f"{recipe_args.source}: training diverged: {what} after step {trainer.state.global_step} "
        f"(learning_rate={args.learning_rate!r}, max_grad_norm={args.max_grad_norm!r}); lower learning_rate and "
        f"start over (checkpoints saved before it stay in {args.output_dir})"
    )


def _close_tensorboard(trainer) -> None:
    """The final evaluations reopen TensorBoard's writer after on_train_end: flush and close it."""
    for callback in trainer.callback_handler.callbacks:
        writer = getattr(callback, "tb_writer", None)
        if writer is not None and hasattr(writer, "close"):
            writer.close()
            callback.tb_writer = None


# --- the run ------------------------------------------------------------------------------------


def run(recipe, overrides=(), *, resume: bool | None = None) -> dict[str, Any]:
    """Fine-tune as a recipe says; return the results also written to ``all_results.json``.

    Args:
        recipe: path of a YAML recipe, or a dict with the same keys.
        overrides: ``"key=value"`` strings applied on top of the recipe.
        resume: overrides the recipe's ``resume`` (True: continue from the latest valid
            ``checkpoint-N`` in ``output_dir``). ``resume_from_checkpoint: PATH`` (a recipe key) continues
            from that checkpoint instead, with the same checks.

    Returns:
        The results dict (on every process of a distributed run), with the paths of this machine that
        ``all_results.json`` records portably (``output_dir``, ``model_card``, ...).

    Raises:
        RecipeError: invalid recipe/overrides (also a value the model's config rejects, a
            ``metric_for_best_model`` the first evaluation does not report, ``fp16`` on the CPU), an
            ``output_dir`` that cannot be written or that already holds checkpoints or a trained model while
            neither ``resume`` nor ``overwrite_output_dir`` is set, or a checkpoint whose weights do not fit the
            recipe's model, whose tokenizer differs from the one the task builds now (a vocabulary built from
            changed data) or that was trained with other settings a resume cannot change (learning rate,
            schedule, optimizer, seed, total batch size; the task's data and model settings, LoRA,
            ``max_train_samples``). ``overwrite_output_dir`` deletes nothing before every such check has passed.
        CheckpointError: the checkpoint to resume from is incomplete or corrupt.
        HubPushError: ``push_to_hub`` failed (everything local was written first).
        TrainingDivergedError: NaN predictions at an evaluation (a :class:`RecipeError`); at the final
            evaluation the trained model is saved in ``output_dir`` first.
    """
    started = time.perf_counter()
    from transformers import set_seed
    from transformers.utils import logging as hf_logging

    _check_launch(recipe if isinstance(recipe, (str, os.PathLike)) else "<recipe dict>")  # accelerate config
    recipe_args, task_args, training_args = load_recipe(recipe, overrides)
    if resume is not None:
        recipe_args.resume = bool(resume)
    if recipe_args.resume and recipe_args.overwrite_output_dir:  # e.g. resume: true in the recipe
        raise RecipeError(
            f"{recipe_args.source}: resume and overwrite_output_dir are both true, and they exclude each other: "
            "drop overwrite_output_dir to continue from the latest checkpoint, or set resume=false to delete the "
            "checkpoints and start over"
        )
    task = get_task(recipe_args.task)()
    task.num_proc = recipe_args.num_proc
    output_dir = training_args.output_dir
    push = training_args.push_to_hub
    training_args.push_to_hub = False  # pushed once at the end through hf_sparse.hub, not by the Trainer
    log_level = training_args.get_process_log_level()
    # This module's messages (what is resumed or deleted) reach the console on the main process even
    # when transformers' own verbosity stays at warning ("passive").
    logger.setLevel(min(log_level, logging.INFO) if training_args.should_log else log_level)
    hf_logging.set_verbosity(log_level)

    secrets = _take_secrets(training_args)  # out of training_args.bin before the Trainer pickles it
    if push:
        _check_push(recipe_args, training_args)
    _check_training_values(recipe_args, training_args)
    _check_launch(recipe_args.source, bool(training_args.fsdp), bool(training_args.deepspeed))  # recipe keys
    _check_precision(recipe_args, training_args)
    _check_report_to(recipe_args, training_args)
    _check_task_arguments(task, task_args, recipe_args)
    _check_card_template(task, recipe_args)
    _check_lora(recipe_args, task_args)
    _check_writable(recipe_args, training_args)
    checkpoint = _resume_checkpoint(recipe_args, training_args)  # deletes nothing (see _clear_output_dir)
    if checkpoint is not None:
        _check_checkpoint_args(checkpoint, recipe_args, training_args)
    set_seed(training_args.seed)

    # --- task: tokenizer, model, data ---
    try:  # a value the model's config rejects (e.g. a max_length shorter than the attention pattern's reach)
        tokenizer = task.build_tokenizer(task_args)
        model = task.build_model(task_args, tokenizer)
    except RecipeError:
        raise
    except ValueError as e:
        raise RecipeError(f"{recipe_args.source}: {e}") from e
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"task {task.name!r}: build_model must return the model (a torch.nn.Module, e.g. a PreTrainedModel), "
            f"got {type(model).__name__}"
        )
    if recipe_args.lora:  # before the data: an adapter saved alone needs a base that is the model trained
        base, why = _adapter_base(model, task_args)
        _check_adapter_base(base, why, recipe_args, training_args)
    if checkpoint is not None:
        _check_checkpoint_tokenizer(tokenizer, checkpoint, recipe_args)
        _check_checkpoint_settings(checkpoint, task, task_args, recipe_args)
    with training_args.main_process_first(desc=f"{task.name} datasets"):
        datasets = task.build_datasets(task_args, tokenizer)
    if not isinstance(datasets, Mapping):
        raise TypeError(
            f"task {task.name!r}: build_datasets must return a dict of split name ('train', 'validation', 'test') "
            f"-> dataset, got {type(datasets).__name__}"
        )
    datasets = dict(datasets)
    if datasets.get("train") is None:
        raise ValueError(
            f"task {task.name!r}: build_datasets returned no 'train' split (keys: {sorted(datasets)})"
        )
    eval_strategy = getattr(training_args.eval_strategy, "value", training_args.eval_strategy)
    if datasets.get("validation") is None and eval_strategy != "no":
        raise RecipeError(
            f"{recipe_args.source}: task {task.name!r} has no 'validation' split but "
            f"eval_strategy={eval_strategy!r}; set eval_strategy: 'no'"
        )
    limits = {
        "train": recipe_args.max_train_samples,
        "validation": recipe_args.max_eval_samples,
        "test": recipe_args.max_test_samples,
    }
    datasets = {
        split: task.limit_samples(split, ds, limits.get(split))
        for split, ds in datasets.items()
        if ds is not None
    }
    num_parameters = _count_parameters(model)
    if recipe_args.lora:
        model = _apply_lora(task, model, recipe_args, training_args, base)
    if checkpoint is not None:
        _check_checkpoint_fits(model, checkpoint, recipe_args)

    # --- train ---
    compute_metrics = task.compute_metrics(task_args)
    if compute_metrics is not None and not callable(compute_metrics):
        raise TypeError(
            f"task {task.name!r}: compute_metrics must return a function (EvalPrediction -> dict of metrics) or "
            f"None, got {type(compute_metrics).__name__}"
        )
    log_callback = LogHistoryCallback(output_dir)
    trainer = atomic_trainer_class(task.trainer_class)(
        model=model,
        args=training_args,
        train_dataset=datasets["train"],
        eval_dataset=datasets.get("validation"),
        processing_class=tokenizer,
        data_collator=task.data_collator(task_args, tokenizer),
        compute_metrics=compute_metrics,
        callbacks=[log_callback, BestMetricCheckCallback(recipe_args.source)],
    )
    trainer.compute_metrics = _checked_metrics(trainer, recipe_args, task)
    trainer.resume_settings = _resume_settings(task_args, recipe_args)  # saved with every checkpoint
    if task.model_accepts_loss_kwargs is not None:  # see Task.model_accepts_loss_kwargs
        trainer.model_accepts_loss_kwargs = task.model_accepts_loss_kwargs
    num_trainable = _count_parameters(trainer.model, trainable_only=True)
    _clear_output_dir(recipe_args, training_args)  # overwrite_output_dir: only now, every check has passed
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    metrics = dict(train_result.metrics)
    trainer.log_metrics("train", train_result.metrics)

    # --- final evaluation ---
    try:
        for split in ("validation", "test"):
            if split in datasets:
                split_metrics = task.evaluate(trainer, datasets[split], split)
                _check_evaluated_metrics(task, split, split_metrics)
                trainer.log_metrics(metric_prefix(split), split_metrics)
                metrics.update(split_metrics)
        nan = [k for k, v in metrics.items() if k.endswith("loss") and isinstance(v, float) and math.isnan(v)]
        if nan:  # where no metric function saw the predictions (e.g. causal-lm)
            raise _diverged(trainer, recipe_args, f"{', '.join(nan)} = NaN")
    except TrainingDivergedError as e:  # the trained model stays on disk, for a look at what went wrong
        _save_final_model(trainer, task, recipe_args, tokenizer, output_dir)
        raise TrainingDivergedError(f"{e}; the final model (not evaluated) is saved there") from e

    # --- save, artifacts ---
    final_model = _save_final_model(trainer, task, recipe_args, tokenizer, output_dir)
    extras = task.after_training(trainer, task_args, output_dir) or {}
    _close_tensorboard(trainer)
    trainer.accelerator.wait_for_everyone()

    results: dict[str, Any] = {
        **metrics,
        "task": task.name,
        "global_step": trainer.state.global_step,
        "epoch": trainer.state.epoch,
        "start_step": log_callback.start_step,
        "steps_this_run": log_callback.steps_this_run,
        "resumed_from": checkpoint,
        "world_size": trainer.args.world_size,
        "distributed_type": str(getattr(trainer.accelerator.distributed_type, "value", "")),
        "num_parameters": num_parameters,
        "num_trainable_parameters": num_trainable,
        "lora": recipe_args.lora,
        "output_dir": output_dir,
        "extras": extras,
        "recipe": redact(
            {"source": recipe_args.source, "overrides": list(overrides), "values": recipe_args.values},
            secrets.values(),
        ),
    }
    if not trainer.is_world_process_zero():
        results["wall_time_s"] = time.perf_counter() - started
        return redact(results, secrets.values())

    write_json_atomic(os.path.join(output_dir, "log_history.json"), trainer.state.log_history)
    if recipe_args.plots:
        try:
            from hf_sparse.viz import plot_curves, pyplot

            plot_curves(
                loss_series(trainer.state.log_history),
                title=f"{task.name}: loss",
                path=os.path.join(output_dir, "loss.png"),
            )
            pyplot().close("all")
        except ImportError as e:
            logger.warning("loss plot skipped: %s", e)
    if recipe_args.model_card:
        results["model_card"] = _write_model_card(
            task, task_args, recipe_args, training_args, results, output_dir, final_model
        )
    results["wall_time_s"] = time.perf_counter() - started
    results = redact(results, secrets.values())
    write_json_atomic(os.path.join(output_dir, "all_results.json"), _portable_paths(results, output_dir))
    for entry in os.scandir(output_dir):  # the final model files (checkpoints were done when saved)
        if entry.is_file() or entry.name == "adapter":
            make_shareable(entry.path)
    if not recipe_args.lora and os.path.isdir(os.path.join(output_dir, "adapter")):
        logger.warning("%s/adapter is an earlier LoRA run's, not this model's (it is not pushed)", output_dir)
    if push:
        results["hub_url"] = _push(output_dir, recipe_args, training_args, token=secrets.get("hub_token"))
        write_json_atomic(os.path.join(output_dir, "all_results.json"), _portable_paths(results, output_dir))
    return results
