"""Inference pipelines, registered with transformers' ``PIPELINE_REGISTRY`` on ``import hf_sparse``.

Each task's ``Pipeline`` subclass lives in its folder (``hf_sparse/tasks/<task>/pipeline.py``) and is
named by its :class:`~hf_sparse.tasks.TaskDescriptor` (``pipeline``, ``pipeline_class``,
``pipeline_auto_classes``); :func:`hf_sparse.tasks.register` registers it with transformers and makes
the saved models carry it (``custom_pipelines`` and its module in the remote code), so
``pipeline(model=folder, trust_remote_code=True)`` finds the task, with or without hf-sparse installed
(a folder with ``custom_pipelines`` always needs ``trust_remote_code=True``: transformers' rule). Without
``trust_remote_code``, with hf-sparse imported, build the pipeline from the model and tokenizer loaded from
the folder: ``pipeline("dna-motif-detection", model=AutoModelForTokenClassification.from_pretrained(folder),
tokenizer=AutoTokenizer.from_pretrained(folder))``. ``pipe.save_pretrained(folder)`` writes such a folder
(:mod:`.saving`). What every pipeline shares (progress bars, batching) is in :mod:`.progress` and
:mod:`.batching`.
"""

from __future__ import annotations


def register_pipelines() -> None:
    """Register the pipeline task of every registered task (idempotent; called by ``import hf_sparse``)."""
    from ..tasks import registry

    for task in registry.pipeline_tasks():
        registry.register_pipeline(task)


__all__ = ["register_pipelines"]
