"""The fine-tuning tasks, one folder each (``hf_sparse/tasks/<task>/``): configuration, model, data
preparation, metrics, inference pipeline and the :class:`~hf_sparse.training.Task` a recipe names
with ``task:`` (``<task>/task.py``).

Importing this package imports none of them: ``import hf_sparse`` loads the configurations, models
and pipelines it registers, and ``hf_sparse.training.get_task`` imports the task modules
(:data:`hf_sparse.training.TASK_PACKAGES`, which register themselves with ``@register_task``) on a
registry miss.
"""
