"""Fine-tuning tasks that recipes name with ``task:`` (see :mod:`hf_sparse.training.tasks`).

Importing this package imports every task module below, and each registers itself with
``@register_task(name)``; ``hf_sparse.training.get_task`` imports it on a registry miss.
"""

from importlib import import_module

#: one module per task family
TASK_MODULES = ("dialogue", "motif", "summarization")

for _module in TASK_MODULES:
    import_module(f"{__name__}.{_module}")

__all__ = ["TASK_MODULES"]
