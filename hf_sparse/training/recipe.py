"""Recipes: one YAML file holds every setting of a fine-tuning run.

A recipe is a flat mapping parsed with ``transformers.HfArgumentParser`` into three dataclasses:
:class:`RecipeArguments` (this module: task, resume, LoRA, plots, card), the task's own
``Arguments`` and ``TrainingArguments`` (or the task's ``training_arguments_class``)::

    # pipelines/motif/tiny.yaml
    task: dna-motif-detection          # registered task name, or "package.module:NAME"
    data_dir: ../data              # a task path field: relative to this file's folder
    output_dir: outputs/motif-tiny # relative to the working directory (as in every HF script)
    num_train_epochs: 3
    learning_rate: 1.0e-3
    lora: true

Rules:

- Unknown keys are an error naming the key and the recipe file (with a close match if any).
- Values are converted to the field's type, so ``learning_rate: 1e-4`` (a *string* in YAML 1.1)
  works; a value that does not convert is an error naming key, value and type. Inside a mapping or list
  (``lr_scheduler_kwargs: {min_lr: 1e-5}``, ``model_kwargs``) a value of a typed mapping takes the type, and an
  untyped one in exponent form (``1e-5``) is a float too, as YAML 1.2 reads it.
- Overrides are ``key=value`` strings applied on top (``--override num_train_epochs=1``); the value
  is typed by the field: ``true``/``false`` for bools, ``none``/``null`` for optional fields,
  ``[a,b]`` (or ``a,b`` for list-only fields and ``report_to``) for lists, ``{k: v}`` for dicts.
- Paths: task fields declared with :func:`path_field` resolve relative to the **recipe file's
  folder** (so a recipe works from any working directory and can sit next to its data); ``~`` and
  ``$VARS`` expand. ``output_dir`` follows the usual HF convention: relative to the working
  directory (made absolute when the recipe is loaded). A recipe given as a dict resolves paths
  against the working directory.
- ``TrainingArguments`` keys that transformers renamed within the supported range
  (:data:`TRAINING_RENAMES`: ``activation_checkpointing``, ``gradient_checkpointing`` before 5.24) may be
  spelled either way: the loader passes the name the installed version has (the current one where both
  exist, so no deprecation warning).
- Defaults that differ from ``TrainingArguments``: ``report_to=["tensorboard"]``,
  ``eval_strategy="epoch"``, ``save_strategy="epoch"``, ``logging_steps=10``,
  ``disable_tqdm=False``, ``output_dir="outputs/<recipe file stem>"``; ``dataloader_pin_memory=False``
  on a machine without a GPU (pinning needs one; torch warns otherwise); in a distributed launch on a
  machine without GPUs ``use_cpu=True`` (otherwise the Trainer sees ``DistributedType.NO``, and
  every process trains alone as "rank 0" although ``torch.distributed`` is initialized).
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import logging
import math
import os
import re
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from ..tasks.arguments import RENAMED_KEYS
from ..utils.validation import check_positive_int
from .secrets import is_secret_key, redact
from .tasks import get_task

__all__ = [
    "TRAINING_DEFAULTS",
    "TRAINING_RENAMES",
    "RecipeArguments",
    "RecipeError",
    "given_keys",
    "load_recipe",
    "parse_overrides",
    "path_field",
    "require_model",
    "require_path",
]

logger = logging.getLogger(__name__)

#: ``TrainingArguments`` defaults a recipe gets unless it sets the key itself.
TRAINING_DEFAULTS: dict[str, Any] = {
    "report_to": ["tensorboard"],
    "eval_strategy": "epoch",
    "save_strategy": "epoch",
    "logging_steps": 10,
    "disable_tqdm": False,
}


#: ``TrainingArguments`` keys renamed within the supported transformers range: current name -> the name before
TRAINING_RENAMES = {"activation_checkpointing": "gradient_checkpointing"}


class RecipeError(ValueError):
    """A recipe (file, key, value or override) is invalid. The message names the file and the key."""


def _installed_spelling(values: dict, hints, source: str, where: str) -> dict:
    """``values`` with each key of :data:`TRAINING_RENAMES` under the name the installed TrainingArguments
    has (the current one where it has both)."""
    out = dict(values)
    for new, old in TRAINING_RENAMES.items():
        if new in out and old in out:
            raise RecipeError(f"{source}: {where} keys {new!r} and {old!r} are one setting; give one")
        spelled = new if new in hints else old
        for name in (new, old):
            if name in out and name != spelled:
                out[spelled] = out.pop(name)
    return out


_PATH_METAVAR = "PATH"


def path_field(default: str | None = None, *, help: str) -> Any:
    """A dataclass field holding a path that resolves relative to the recipe file's folder.

    Marked with ``metadata={"metavar": "PATH"}`` (``HfArgumentParser`` passes metadata on to
    ``argparse.add_argument``, so the marker must be an argparse keyword).
    """
    return field(default=default, metadata={"help": help, "metavar": _PATH_METAVAR})


def require_path(key: str, path, *, kind: str = "file", contains: tuple[str, ...] = ()) -> None:
    """For :meth:`Task.check_arguments`: ``path`` (the value of recipe key ``key``) exists.

    Raises:
        FileNotFoundError: naming the key, the path and what was expected there.
    """
    if path is None:
        return
    path = os.fspath(path)
    exists = os.path.isdir(path) if kind == "folder" else os.path.isfile(path)
    if not exists:
        what = "folder" if kind == "folder" else "file"
        raise FileNotFoundError(f"{key}: {what} not found: {path}")
    missing = [name for name in contains if not os.path.exists(os.path.join(path, name))]
    if missing:
        raise FileNotFoundError(f"{key}: folder {path} has no {', '.join(missing)}")


def require_model(key: str, name, *, hint: str = "") -> None:
    """For :meth:`Task.check_arguments`: ``name`` (the value of recipe key ``key``, e.g.
    ``model_name_or_path``) is a folder, or may be a Hub model id.

    A name that can only be a path (absolute, ``./``, ``../``, ``~``, more than one ``/``) must be a folder;
    offline, any other name must be a folder or a Hub model in the local cache (transformers would fail later
    with "couldn't connect to huggingface.co"). Online, a Hub id is left to transformers.

    Raises:
        FileNotFoundError: naming the key, the value, the folder looked for and ``hint``.
    """
    from ..hub.common import require_local_or_cached

    if not name:
        return
    require_local_or_cached(key, name, files=("config.json", "tokenizer_config.json"), hint=hint)


@dataclass
class RecipeArguments:
    """Settings of the run itself (not of the task, not of the Trainer)."""

    task: str = field(
        metadata={"help": "Registered task name (e.g. 'dna-motif-detection') or 'package.module:NAME'."}
    )
    resume: bool = field(
        default=False,
        metadata={
            "help": "Resume from the latest checkpoint-N in output_dir (validated first; a run with no "
            "checkpoint yet starts from scratch with a warning, an output_dir holding a trained model but no "
            "checkpoint is an error). resume_from_checkpoint: PATH resumes from that checkpoint instead."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start a fresh run even if output_dir already holds checkpoints or a trained model (they "
            "are deleted, with the earlier run's card, plots and results, and the deletion is printed). Without "
            "it (and without resume) such an output_dir is an error. Meant for the command line "
            "(finetune.py --overwrite_output_dir), not for a recipe file."
        },
    )
    lora: bool = field(
        default=False, metadata={"help": "Fine-tune LoRA adapters (peft) instead of all weights."}
    )
    lora_r: int = field(default=8, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(
        default=16, metadata={"help": "LoRA scaling numerator (scale = lora_alpha / lora_r)."}
    )
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA input, in [0, 1)."})
    lora_target_modules: list[str] | None = field(
        default=None,
        metadata={"help": "Module names to adapt; None: the task's default (peft's map for the model type)."},
    )
    lora_target_parameters: list[str] | None = field(
        default=None,
        metadata={
            "help": "Parameter names to adapt besides the modules (peft's target_parameters), e.g. "
            "[up_proj, down_proj] for the 3D expert weights of a mixture-of-experts model; None: none."
        },
    )
    lora_modules_to_save: list[str] | None = field(
        default=None,
        metadata={
            "help": "Modules trained in full next to the adapters besides the task's own (its new heads and "
            "the like, which train either way), e.g. [embeddings]; None: the task's alone."
        },
    )
    merge_lora: bool = field(
        default=True,
        metadata={
            "help": "Save the final model with the LoRA weights merged (a plain model); the adapter alone "
            "is saved in output_dir/adapter either way. False: save only the adapter in output_dir (needs "
            "a model_name_or_path that loads as the model trained: a saved model of this task, the base it "
            "names)."
        },
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use at most this many training examples (the first ones)."}
    )
    max_eval_samples: int | None = field(
        default=None,
        metadata={
            "help": "Use at most this many validation examples (the first ones; documents for extractive "
            "summarization, whose examples are chunks)."
        },
    )
    max_test_samples: int | None = field(
        default=None,
        metadata={
            "help": "Use at most this many test examples (the first ones; documents, as max_eval_samples)."
        },
    )
    num_proc: int | None = field(
        default=None,
        metadata={
            "help": "Processes for the datasets.map preprocessing (tokenization, labelling); None: up to "
            "4 (the machine's cores), only for splits large enough to gain; 1: in process."
        },
    )
    plots: bool = field(default=True, metadata={"help": "Write loss.png (train and eval loss curves)."})
    model_card: bool = field(
        default=True, metadata={"help": "Write README.md (model card via hf_sparse.hub) into output_dir."}
    )
    model_name: str | None = field(
        default=None,
        metadata={"help": "Model name for the card; None: hub_model_id, else the output_dir folder name."},
    )
    hub_private: bool = field(
        default=False,
        metadata={
            "help": "Create the Hub repository as private (with push_to_hub). hub_private_repo also works."
        },
    )
    # Set by load_recipe (not recipe keys): where the recipe came from and what it resolved to.
    source: str | None = field(default=None, init=False, repr=False, metadata={"help": "Recipe file."})
    values: dict | None = field(default=None, init=False, repr=False, metadata={"help": "Resolved mapping."})

    def __post_init__(self):
        if not isinstance(self.task, str) or not self.task.strip():
            raise ValueError(f"task must be a non-empty string, got {self.task!r}")
        check_positive_int("lora_r", self.lora_r)
        if self.lora_alpha <= 0:
            raise ValueError(f"lora_alpha must be positive, got {self.lora_alpha!r}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout!r}")
        if self.lora_target_parameters and self.lora_dropout != 0:  # peft's ParamWrapper has no dropout
            raise ValueError(
                f"lora_target_parameters={self.lora_target_parameters!r} needs lora_dropout: 0 (peft adapts "
                f"parameters without dropout), got lora_dropout={self.lora_dropout!r}"
            )
        for name in ("max_train_samples", "max_eval_samples", "max_test_samples", "num_proc"):
            check_positive_int(name, getattr(self, name), allow_none=True)
        empty = {
            "lora_target_modules": "would adapt no module; remove it for the task's default targets",
            "lora_target_parameters": "adapts no parameter; remove it",
            "lora_modules_to_save": "adds no module to the task's own (which train in full either way); remove it",
        }
        for name, why in empty.items():
            value = getattr(self, name)
            if value is not None and not value:
                raise ValueError(f"{name}={value!r} {why}")


# --- typed values -------------------------------------------------------------------------------

# Fields of type ``str | list[str]`` whose names never hold a comma: ``a,b`` is the list [a, b] (as for a
# list-only field), not one name ("tensorboard,wandb" is no integration).
_COMMA_LIST_KEYS = ("report_to",)
# A float in exponent form that YAML 1.1 (PyYAML) reads as a string: no dot (1e-5) or an unsigned exponent (1.0e5)
_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)[eE][-+]?\d+")
_NONE_WORDS = ("none", "null", "~")
_TRUE_WORDS = ("true", "yes", "y", "on", "1")
_FALSE_WORDS = ("false", "no", "n", "off", "0")


def _type_name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _is_union(hint) -> bool:
    return get_origin(hint) in (Union, types.UnionType)


def _member_rank(hint) -> int:
    """Order in which union members are tried for a value: specific scalars first, str late."""
    origin = get_origin(hint)
    if hint is bool:
        return 0
    if hint is int:
        return 1
    if hint is float:
        return 2
    if origin is Literal:
        return 3
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return 4
    if hint is str:
        return 5
    if origin in (list, tuple) or hint in (list, tuple):
        return 6
    return 7


def _yaml12_floats(value: Any) -> Any:
    """``value`` (untyped, e.g. inside a mapping; nested mappings and lists too) with every string in exponent
    form (``"1e-5"``) as a float: YAML 1.2 reads it so, and so does a typed float field (``learning_rate``)."""
    if isinstance(value, dict):
        return {k: _yaml12_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_yaml12_floats(v) for v in value]
    if isinstance(value, str) and _EXPONENT_FLOAT.fullmatch(value.strip()):
        return float(value)
    return value


def _coerce(value: Any, hint: Any) -> Any:
    """Convert ``value`` (from YAML or an override string) to the type ``hint``; ValueError if it can't."""
    if hint is Any or hint is None:
        return _yaml12_floats(value)
    if _is_union(hint):
        members = [m for m in get_args(hint) if m is not type(None)]
        optional = len(members) < len(get_args(hint))
        # "null"/"~" mean None; "none" too unless the field takes strings (report_to: none).
        none_words = _NONE_WORDS if str not in members else _NONE_WORDS[1:]
        if value is None or (optional and isinstance(value, str) and value.strip().lower() in none_words):
            if optional:
                return None
            raise ValueError("None is not allowed")
        if (
            isinstance(value, str)
            and value.strip()[:1] in ("[", "{")
            and any(_member_rank(m) >= 6 for m in members)
        ):
            value = yaml.safe_load(value)
        for member in sorted(members, key=_member_rank):
            try:
                return _coerce(value, member)
            except (ValueError, TypeError):
                continue
        raise ValueError(f"not a valid {_type_name(hint)}")
    origin = get_origin(hint)
    if value is None:
        raise ValueError("None is not allowed")
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS + _FALSE_WORDS:
            return value.strip().lower() in _TRUE_WORDS
        raise ValueError(f"{value!r} is not a bool (true/false)")
    if hint is int:
        if isinstance(value, bool):
            raise ValueError(f"{value!r} is not an int")
        if isinstance(value, int):
            return value
        if isinstance(value, str) and "." in value and float(value).is_integer():  # "10.0", as YAML's 10.0
            value = float(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            return int(value.strip())
        raise ValueError(f"{value!r} is not an int")
    if hint is float:
        if isinstance(value, bool):
            raise ValueError(f"{value!r} is not a float")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return float(value.strip())
        raise ValueError(f"{value!r} is not a float")
    if hint is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise ValueError(f"{value!r} is not a string")
    if origin is Literal:
        for choice in get_args(hint):
            if value == choice or (isinstance(value, str) and str(choice) == value):
                return choice
        raise ValueError(f"{value!r} is not one of {list(get_args(hint))}")
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return value if isinstance(value, hint) else hint(value)
    if origin in (list, tuple) or hint in (list, tuple):
        if isinstance(value, str):
            text = value.strip()
            value = (
                yaml.safe_load(text)
                if text.startswith("[")
                else [v.strip() for v in text.split(",") if v.strip()]
            )
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{value!r} is not a list")
        (item,) = get_args(hint)[:1] or (Any,)
        items = [_coerce(v, item) for v in value]
        return tuple(items) if origin is tuple or hint is tuple else items
    if origin is dict or hint is dict:
        if isinstance(value, str):
            value = yaml.safe_load(value)
        if not isinstance(value, dict):
            raise ValueError(f"{value!r} is not a mapping")
        (item,) = get_args(hint)[1:2] or (Any,)
        return {k: _coerce(v, item) for k, v in value.items()}
    return value


# --- loading ------------------------------------------------------------------------------------


def parse_overrides(overrides) -> dict[str, str]:
    """``["key=value", ...]`` -> ``{"key": "value"}`` (values stay strings; later ones win).

    Raises:
        RecipeError: an override without ``=`` or with an empty key.
    """
    if isinstance(overrides, str):
        raise RecipeError(f"overrides must be a list of 'key=value' strings, got the string {overrides!r}")
    parsed = {}
    for item in overrides or ():
        if not isinstance(item, str) or "=" not in item:  # may be a token given as its own item: masked
            raise RecipeError(f"override {redact(item)!r} is not of the form key=value")
        key, _, value = item.partition("=")
        key = key.strip()
        if not key:
            raise RecipeError(f"override {redact(item)!r} has an empty key")
        parsed[key] = value
    return parsed


def _read_recipe(recipe) -> tuple[dict, str, Path | None]:
    if isinstance(recipe, dict):
        return dict(recipe), "<recipe dict>", None
    if not isinstance(recipe, (str, os.PathLike)):
        raise RecipeError(f"recipe must be a YAML file path or a dict, got {type(recipe).__name__}")
    path = Path(recipe).expanduser().resolve()
    if not path.is_file():
        raise RecipeError(f"recipe file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise RecipeError(f"recipe {path} is not valid YAML: {e}") from e
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {path} must be a mapping of key: value, got {type(data).__name__}")
    return data, str(path), path


def _cpu_only_distributed_launch() -> bool:
    """True in a multi-process launch (torchrun / accelerate launch) on a machine without GPUs."""
    try:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return False
    if world_size <= 1:
        return False
    import torch

    xpu = getattr(torch, "xpu", None)
    return not (torch.cuda.is_available() or (xpu is not None and xpu.is_available()))


def _has_accelerator() -> bool:
    """True if torch sees a GPU (CUDA, XPU or MPS)."""
    import torch

    for name in ("cuda", "xpu", "mps"):
        backend = getattr(torch, name, None)
        if backend is not None and getattr(backend, "is_available", lambda: False)():
            return True
    return False


def _check_field_clashes(dataclass_types, source: str, task_name) -> None:
    """A recipe key belongs to one dataclass: a field two of them define (a task's ``Arguments`` field
    ``label_names``, ``seed`` or ``lora``) would make ``HfArgumentParser`` fail with conflicting option strings."""
    owner: dict[str, type] = {}
    for dtype in dataclass_types:
        for f in dataclasses.fields(dtype):
            if not f.init:
                continue
            if f.name in owner and owner[f.name] is not dtype:
                raise RecipeError(
                    f"{source}: task {task_name!r}: {owner[f.name].__name__} and {dtype.__name__} both define the "
                    f"field {f.name!r}, and a recipe key names one setting: rename it in the task's Arguments"
                )
            owner[f.name] = dtype


def load_recipe(recipe, overrides=()) -> tuple[RecipeArguments, Any, Any]:
    """Parse a recipe (YAML path or dict) and ``key=value`` overrides.

    Returns:
        ``(recipe_args, task_args, training_args)``: a :class:`RecipeArguments`, the task's
        ``Arguments`` and its ``TrainingArguments`` (class). ``recipe_args.source`` is the recipe
        file and ``recipe_args.values`` the resolved mapping (after defaults and overrides);
        :func:`given_keys` of ``task_args`` is the set of keys the recipe and the overrides state, even
        where a value equals the default.

    Raises:
        RecipeError: missing file, invalid YAML, missing/unknown task, unknown key, a value of the
            wrong type, or a value a dataclass rejects; the message names the recipe and the key.
    """
    from transformers import HfArgumentParser, TrainingArguments

    data, source, path = _read_recipe(recipe)
    override_values = parse_overrides(overrides)
    base_dir = path.parent if path is not None else Path.cwd()

    task_name = override_values.get("task", data.get("task"))
    if task_name is None:
        raise RecipeError(
            f"{source}: missing required key 'task' (a registered task name or 'module:ClassName')"
        )
    try:
        task_cls = get_task(task_name)
    except (KeyError, TypeError, ValueError) as e:
        raise RecipeError(f"{source}: task: {e.args[0] if e.args else e}") from e
    training_cls = task_cls.training_arguments_class or TrainingArguments
    dataclass_types = (RecipeArguments, task_cls.Arguments, training_cls)
    _check_field_clashes(dataclass_types, source, task_name)

    # Every key must belong to one of the dataclasses.
    hints, path_keys = {}, set()
    for dtype in dataclass_types:
        type_hints = get_type_hints(dtype)
        for f in dataclasses.fields(dtype):
            if f.init:
                hints.setdefault(f.name, type_hints.get(f.name, Any))
                if f.metadata.get("metavar") == _PATH_METAVAR:
                    path_keys.add(f.name)
    data = _installed_spelling(data, hints, source, "recipe")
    override_values = _installed_spelling(override_values, hints, source, "override")
    for key, where in [(k, "recipe") for k in data] + [(k, "override") for k in override_values]:
        if key in RENAMED_KEYS and key not in hints:
            raise RecipeError(
                f"{source}: {where} key {key!r} is now spelled {RENAMED_KEYS[key]!r} (one name for every task's "
                f"backbone keys); rename it"
            )
        if not isinstance(key, str) or key not in hints:
            close = difflib.get_close_matches(str(key), hints, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            names = ", ".join(d.__name__ for d in dataclass_types)
            raise RecipeError(
                f"{source}: unknown {where} key {key!r}{hint}; valid keys are the fields of {names}"
            )

    values = dict(TRAINING_DEFAULTS)
    if "output_dir" not in data:
        values["output_dir"] = os.path.join(
            "outputs", path.stem if path is not None else task_cls.name or "run"
        )
    if "dataloader_pin_memory" in hints and not _has_accelerator():
        values["dataloader_pin_memory"] = False  # pinning needs a GPU; torch warns on every loader
    if _cpu_only_distributed_launch() and "use_cpu" in hints and "use_cpu" not in data:
        logger.info("distributed launch without GPUs: use_cpu=True (gloo DDP on CPU)")
        values["use_cpu"] = True
    values.update(data)
    values.update(override_values)
    for key in list(values):
        if key not in hints:  # a default for a field this TrainingArguments class lacks
            del values[key]
            continue
        value = values[key]
        if key in _COMMA_LIST_KEYS and isinstance(value, str) and "," in value and value.strip()[:1] != "[":
            values[key] = list(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
        try:
            values[key] = _coerce(values[key], hints[key])
        except (ValueError, TypeError) as e:
            shown = override_values.get(key, values[key])
            secrets = [v for k, v in values.items() if is_secret_key(k) and isinstance(v, str)]
            raise RecipeError(
                redact(f"{source}: {key}={shown!r} is not a valid {_type_name(hints[key])} ({e})", secrets)
            ) from e
        if isinstance(values[key], float) and not math.isfinite(values[key]):  # inf trains NaNs
            shown = override_values.get(key, values[key])
            raise RecipeError(f"{source}: {key}={shown!r} is not a finite number")
        if key in path_keys and isinstance(values[key], str) and values[key]:
            p = Path(os.path.expandvars(os.path.expanduser(values[key])))
            values[key] = str(p if p.is_absolute() else (base_dir / p).resolve())
    if not isinstance(values["output_dir"], str) or not values["output_dir"].strip():
        # "" would mean the working directory: the run would overwrite its README.md, config.json, ...
        raise RecipeError(
            f"{source}: output_dir={values['output_dir']!r} is empty; give the folder for the run "
            "(e.g. --output_dir outputs/my-run)"
        )
    values["output_dir"] = os.path.abspath(os.path.expanduser(values["output_dir"]))

    try:
        recipe_args, task_args, training_args = HfArgumentParser(dataclass_types).parse_dict(
            values, allow_extra_keys=False
        )
    except (ValueError, TypeError) as e:
        raise RecipeError(f"{source}: {e}") from e
    recipe_args.source = source
    recipe_args.values = values
    # not a field (the task's Arguments may be a frozen dataclass): read through given_keys
    object.__setattr__(task_args, "_recipe_keys", frozenset(data) | frozenset(override_values))
    return recipe_args, task_args, training_args


def given_keys(task_args) -> frozenset[str] | None:
    """The keys the recipe and its overrides state (:func:`load_recipe` records them on the task arguments), or
    None for task arguments built in Python, where a value that equals its default cannot be told from one left
    out."""
    return getattr(task_args, "_recipe_keys", None)
