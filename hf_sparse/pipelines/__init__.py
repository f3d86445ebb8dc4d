"""Inference pipelines, registered with transformers' ``PIPELINE_REGISTRY`` on ``import hf_sparse``.

Each task's ``Pipeline`` subclass lives in its folder (``hf_sparse/tasks/<task>/pipeline.py``) and is
named by its :class:`~hf_sparse.tasks.TaskDescriptor` (``pipeline``, ``pipeline_class``,
``pipeline_auto_classes``); this module turns the registered descriptors into ``PIPELINE_REGISTRY``
entries and the ``custom_pipelines`` entries a saved ``config.json`` carries, so both
``pipeline(model=folder)`` (with hf-sparse imported) and ``pipeline(model=folder,
trust_remote_code=True)`` (without it) find the task. What every pipeline shares (progress bars) is
in :mod:`.progress`.
"""

from __future__ import annotations


def _serving(task: str) -> list:
    from ..tasks import registry

    serving = registry.pipeline_tasks().get(task)
    if not serving:
        raise KeyError(
            f"unknown hf-sparse pipeline task {task!r}; known: {sorted(registry.pipeline_tasks())}"
        )
    return serving


def pipeline_class(task: str) -> type:
    """The ``Pipeline`` subclass of a registered hf-sparse pipeline task."""
    return _serving(task)[0].pipeline_class


def pipeline_auto_classes(task: str) -> tuple[str, ...]:
    """The Auto class names the models of a pipeline task load with (over every task serving it)."""
    autos: list[str] = []
    for d in _serving(task):
        autos += [a for a in d.pipeline_auto_classes if a not in autos]
    return tuple(autos)


def custom_pipelines_entry(task: str, package: str = "hf_sparse") -> dict:
    """The ``config.json`` ``custom_pipelines`` entry of ``task``, naming the flat bundled module (of
    ``package``, the top-level package the bundle flattens)."""
    from ..hub.bundle import flat_module_name

    cls = pipeline_class(task)
    return {
        "impl": f"{flat_module_name(cls.__module__, package)}.{cls.__name__}",
        "pt": list(pipeline_auto_classes(task)),
        "tf": [],
        "type": "text",
    }


def register_pipeline_task(task: str) -> None:
    """Register a pipeline task of the registered descriptors with transformers (idempotent)."""
    import transformers
    from transformers.pipelines import PIPELINE_REGISTRY

    cls = pipeline_class(task)
    pt = tuple(getattr(transformers, a) for a in pipeline_auto_classes(task))
    current = PIPELINE_REGISTRY.supported_tasks.get(task, {})
    if current.get("impl") is cls:
        if tuple(current.get("pt", ())) == pt:
            return
        del PIPELINE_REGISTRY.supported_tasks[task]  # a second task serving it: ours, updated quietly
    PIPELINE_REGISTRY.register_pipeline(task, pipeline_class=cls, pt_model=pt, type="text")


def register_pipelines() -> None:
    """Register the pipeline task of every registered task (idempotent; called by ``import hf_sparse``)."""
    from ..tasks import registry

    for task in registry.pipeline_tasks():
        register_pipeline_task(task)


__all__ = [
    "custom_pipelines_entry",
    "pipeline_auto_classes",
    "pipeline_class",
    "register_pipeline_task",
    "register_pipelines",
]
