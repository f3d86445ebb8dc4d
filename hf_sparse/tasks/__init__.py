"""The fine-tuning tasks, one folder each, after transformers' ``models/<name>/`` and peft's
``tuners/<method>/``: ``hf_sparse/tasks/<task>/`` holds the configuration and model
(``configuration_<task>.py``, ``modeling_<task>.py``), data preparation (``data.py``), the metrics only
it uses, the inference pipeline (``pipeline.py``), the recipes' :class:`~hf_sparse.training.Task`
(``task.py``, imported on first use) and, in its ``__init__.py``, ``TASKS``: its
:class:`TaskDescriptor` (s), which registration, recipes, model cards and the remote-code bundle read.

Adding a task is a folder plus one line: its name in :data:`TASKS` (or
``hf_sparse.tasks.register(MY_TASK)`` from a package of your own).
"""

from importlib import import_module

from . import registry
from .registry import CardInfo, TaskDescriptor, register

#: the task folders of the package; each ``__init__`` defines ``TASKS``, a tuple of descriptors
TASKS = ("dialogue", "lm", "motif", "summarization")


def register_tasks() -> None:
    """Register every descriptor of the folders in :data:`TASKS` (idempotent; ``import hf_sparse`` does)."""
    for folder in TASKS:
        for descriptor in import_module(f"{__name__}.{folder}").TASKS:
            register(descriptor)


get_descriptor = registry.get

__all__ = ["TASKS", "CardInfo", "TaskDescriptor", "get_descriptor", "register", "register_tasks", "registry"]
