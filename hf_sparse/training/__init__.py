"""The code every fine-tuning recipe shares: recipe -> task -> ``transformers.Trainer`` run.

- :mod:`.recipe`: :class:`RecipeArguments` and :func:`load_recipe` (YAML + ``key=value`` overrides,
  parsed with ``HfArgumentParser`` into recipe, task and training arguments).
- :mod:`.tasks`: the :class:`Task` base class, :func:`get_task` (a task's Task class, by name).
- :mod:`.runner`: :func:`run` (train, evaluate, save, card, push).
- :mod:`.checkpoints`: :func:`latest_checkpoint`, :func:`validate_checkpoint`, atomic checkpoint saves.
- :mod:`.callbacks`: :class:`LogHistoryCallback` (``log_history.json`` kept current).
- :mod:`.split_loss`: :class:`~.split_loss.SplitLossMixin` (``eval_loss`` over the whole split, any batches).

Needs the ``train`` extra (``pip install 'hf-sparse[train]'``): peft for LoRA, tensorboard for the
default ``report_to``.
"""

from .callbacks import LogHistoryCallback, loss_series
from .checkpoints import (
    AtomicCheckpointMixin,
    CheckpointError,
    atomic_trainer_class,
    latest_checkpoint,
    list_checkpoints,
    validate_checkpoint,
    write_json_atomic,
)
from .recipe import TRAINING_DEFAULTS, RecipeArguments, RecipeError, load_recipe, parse_overrides, path_field
from .runner import HubPushError, TrainingDivergedError, run
from .tasks import Task, TaskArguments, get_task, list_tasks, metric_prefix

__all__ = [
    "TRAINING_DEFAULTS",
    "AtomicCheckpointMixin",
    "CheckpointError",
    "HubPushError",
    "LogHistoryCallback",
    "RecipeArguments",
    "RecipeError",
    "Task",
    "TaskArguments",
    "TrainingDivergedError",
    "atomic_trainer_class",
    "get_task",
    "latest_checkpoint",
    "list_checkpoints",
    "list_tasks",
    "load_recipe",
    "loss_series",
    "metric_prefix",
    "parse_overrides",
    "path_field",
    "run",
    "validate_checkpoint",
    "write_json_atomic",
]
