"""Inference pipelines, registered with transformers' ``PIPELINE_REGISTRY`` on ``import hf_sparse``.

Each task module defines one ``Pipeline`` subclass; :data:`PIPELINES` names it with the Auto classes
its models load through. A model family that declares its pipeline tasks (``register_auto(...,
pipelines=[...])`` in :mod:`hf_sparse.models`) writes ``custom_pipelines`` into its saved
``config.json`` and bundles the pipeline module with its remote code, so both
``pipeline(model=folder)`` (with hf-sparse imported) and ``pipeline(model=folder,
trust_remote_code=True)`` (without it) find the task.
"""

from __future__ import annotations

import importlib
import re

#: task name -> (module, class name, Auto class names of its models, input type)
PIPELINES: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "dialogue-response-selection": (
        "hf_sparse.tasks.dialogue.pipeline",
        "DialogueResponseSelectionPipeline",
        ("AutoModel",),
        "text",
    ),
    "dialogue-state-tracking": (
        "hf_sparse.tasks.dialogue.pipeline",
        "DialogueStateTrackingPipeline",
        ("AutoModel",),
        "text",
    ),
    "dna-motif-detection": (
        "hf_sparse.tasks.motif.pipeline",
        "DNAMotifDetectionPipeline",
        ("AutoModelForTokenClassification",),
        "text",
    ),
    "long-document-summarization": (
        "hf_sparse.tasks.summarization.pipeline",
        "LongDocumentSummarizationPipeline",
        ("AutoModelForSeq2SeqLM", "AutoModel"),
        "text",
    ),
}

_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def pipeline_class(task: str) -> type:
    """The ``Pipeline`` subclass of a registered hf-sparse task."""
    if task not in PIPELINES:
        raise KeyError(f"unknown hf-sparse pipeline task {task!r}; known: {sorted(PIPELINES)}")
    module, name, _, _ = PIPELINES[task]
    return getattr(importlib.import_module(module), name)


def custom_pipelines_entry(task: str) -> dict:
    """The ``config.json`` ``custom_pipelines`` entry of ``task``, naming the flat bundled module."""
    from ..hub import flat_module_name

    cls = pipeline_class(task)
    _, _, autos, kind = PIPELINES[task]
    return {
        "impl": f"{flat_module_name(cls.__module__)}.{cls.__name__}",
        "pt": list(autos),
        "tf": [],
        "type": kind,
    }


def register_pipeline(task: str, module: str, class_name: str, auto_classes, type: str = "text") -> None:
    """Add a task to :data:`PIPELINES` and register it with transformers (lowercase, hyphenated name;
    ``KeyError`` if the name is taken by another class)."""
    if not isinstance(task, str) or not _NAME_RE.match(task):
        raise ValueError(f"task must be a lowercase hyphenated name, got {task!r}")
    entry = (module, class_name, tuple(auto_classes), type)
    if PIPELINES.get(task, entry) != entry:
        raise KeyError(f"pipeline task {task!r} is already registered as {PIPELINES[task]}")
    PIPELINES[task] = entry
    _register_with_transformers(task)


def _register_with_transformers(task: str) -> None:
    import transformers
    from transformers.pipelines import PIPELINE_REGISTRY

    _, _, autos, kind = PIPELINES[task]
    cls = pipeline_class(task)
    if PIPELINE_REGISTRY.supported_tasks.get(task, {}).get("impl") is cls:
        return
    pt = tuple(getattr(transformers, a) for a in autos)
    PIPELINE_REGISTRY.register_pipeline(task, pipeline_class=cls, pt_model=pt, type=kind)


def register_pipelines() -> None:
    """Register every task in :data:`PIPELINES` (idempotent; called by ``import hf_sparse``)."""
    for task in PIPELINES:
        _register_with_transformers(task)


__all__ = ["PIPELINES", "custom_pipelines_entry", "pipeline_class", "register_pipeline", "register_pipelines"]
