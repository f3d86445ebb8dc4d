"""Inference pipelines, registered with transformers' ``PIPELINE_REGISTRY`` on ``import hf_sparse``.

Each task's ``Pipeline`` subclass lives in its folder (``hf_sparse/tasks/<task>/pipeline.py``) and is
named by its :class:`~hf_sparse.tasks.TaskDescriptor` (``pipeline``, ``pipeline_class``,
``pipeline_auto_classes``); :func:`hf_sparse.tasks.register` registers it with transformers and makes
the saved models carry it (``custom_pipelines`` and its module in the remote code), so both
``pipeline(model=folder)`` (with hf-sparse imported) and ``pipeline(model=folder,
trust_remote_code=True)`` (without it) find the task. What every pipeline shares (progress bars) is
in :mod:`.progress`.
"""

from __future__ import annotations


def register_pipelines() -> None:
    """Register the pipeline task of every registered task (idempotent; called by ``import hf_sparse``)."""
    from ..tasks import registry

    for task in registry.pipeline_tasks():
        registry.register_pipeline(task)


__all__ = ["register_pipelines"]
