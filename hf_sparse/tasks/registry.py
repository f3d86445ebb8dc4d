"""Task descriptors: everything the package registers for one task, under one name.

A task folder (``hf_sparse/tasks/<task>/``, or any package of your own) defines one
:class:`TaskDescriptor` per task and :func:`register` makes it known everywhere at once:

- the model: ``AutoConfig`` / the Auto model classes (``auto_classes``), peft's default LoRA targets,
  the tokenizer with ``AutoTokenizer``, and the remote-code bundle ``save_pretrained`` writes (the
  modules of the model and of its pipeline, ``auto_map``, ``custom_pipelines``: the pipelines the saved
  model serves, see :func:`serves`);
- the inference pipeline: ``transformers``' ``PIPELINE_REGISTRY`` under ``pipeline``;
- the recipes: ``task: <name>`` runs ``task_class`` (a :class:`hf_sparse.training.Task`, imported on
  first use) with its ``Arguments`` dataclass;
- the model card: ``card`` (template, title, description, Hub pipeline tag, tags, citations).

The name is the one a recipe's ``task:`` and the card use; where the task has an inference pipeline of
its own the name is the pipeline task's (``dna-motif-detection``). Two tasks may share a pipeline (the
abstractive and extractive summarizers both serve ``long-document-summarization``) and a configuration
class (both dialogue tasks train ``LongformerDialogueConfig``). The ``model_type`` a configuration
writes into ``config.json`` is its own identifier and never changes, so saved models keep loading.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_DESCRIPTORS: dict[str, TaskDescriptor] = {}


# pipeline tasks transformers v5 removed: registering a custom pipeline under one of them raises, or shadows
# the name users of earlier versions know
_REMOVED_PIPELINES = ("question-answering", "summarization", "text2text-generation", "translation")


def _builtin_pipelines() -> set[str]:
    """transformers' own pipeline task names (and aliases, ``"ner"``), without those registered since (a class
    defined outside transformers, as hf_sparse's), and the ones v5 removed."""
    from transformers.pipelines import PIPELINE_REGISTRY

    own = {
        task
        for task, entry in PIPELINE_REGISTRY.supported_tasks.items()
        if isinstance(entry.get("impl"), str) or entry.get("impl").__module__.split(".")[0] == "transformers"
    }
    return own | set(PIPELINE_REGISTRY.task_aliases) | set(_REMOVED_PIPELINES)


@dataclass(frozen=True)
class CardInfo:
    """What a model card says about a task.

    Attributes:
        template: a template file name in the package's ``model_cards/`` (``"dna-motif-detection.jinja"``), or the
            path of a template of your own (it may ``{% extends "_base.jinja" %}``).
        title: the task's title (``"DNA motif detection"``).
        description: the card's first paragraph.
        hub_pipeline_tag: the Hub's pipeline tag (``"token-classification"``), or None.
        tags: extra Hub tags.
        citations: keys of :data:`hf_sparse.hub.cards.CITATIONS` the card cites.
    """

    template: str
    title: str
    description: str
    hub_pipeline_tag: str | None = None
    tags: tuple[str, ...] = ()
    citations: tuple[str, ...] = ()


@dataclass(frozen=True)
class TaskDescriptor:
    """One task: its name, model, inference pipeline, recipe task and model card.

    Attributes:
        name: lowercase, hyphenated (``"dna-motif-detection"``): the recipes' ``task:`` and the card's.
        config_class: the model's ``PretrainedConfig`` subclass (its ``model_type`` is what
            ``config.json`` stores).
        auto_classes: Auto class name -> model class, e.g. ``{"AutoModelForTokenClassification":
            LongformerForMotifDetection}``; the first is the one the model card's snippet loads with.
        task_class: ``"package.module:ClassName"`` of the :class:`hf_sparse.training.Task` that
            recipes run (imported on first use, so ``import hf_sparse`` does not load the training stack).
        card: the model card (:class:`CardInfo`).
        pipeline: the inference pipeline's task name for ``pipeline(...)``, or None; never one of transformers'
            own (``"text-classification"``, ``"ner"``) or one v5 removed (``"summarization"``): ``ValueError``.
        pipeline_class: the ``transformers.Pipeline`` subclass of ``pipeline``.
        pipeline_auto_classes: the Auto class names the pipeline loads models with (default: the
            first of ``auto_classes``).
        lora_target_modules: peft's default LoRA targets for the model type.
        tokenizer_class: a slow tokenizer to register with ``AutoTokenizer`` for the config, or None.
    """

    name: str
    config_class: type
    auto_classes: Mapping[str, type]
    task_class: str
    card: CardInfo
    pipeline: str | None = None
    pipeline_class: type | None = None
    pipeline_auto_classes: tuple[str, ...] = ()
    lora_target_modules: tuple[str, ...] = ()
    tokenizer_class: type | None = field(default=None)

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(
                f"name must be a lowercase hyphenated name such as 'dna-motif-detection', got {self.name!r}"
            )
        if not isinstance(self.config_class, type) or not getattr(self.config_class, "model_type", ""):
            raise TypeError(
                f"config_class must be a PretrainedConfig subclass with a model_type, got {self.config_class!r}"
            )
        if not isinstance(self.auto_classes, Mapping) or not self.auto_classes:
            raise ValueError(
                f"auto_classes must map Auto class names to model classes, got {self.auto_classes!r}"
            )
        import transformers

        for auto, model_cls in self.auto_classes.items():
            if not isinstance(auto, str) or not auto.startswith("Auto") or not hasattr(transformers, auto):
                raise ValueError(f"auto_classes keys must be transformers Auto class names, got {auto!r}")
            if not isinstance(model_cls, type):
                raise TypeError(f"auto_classes[{auto!r}] must be a model class, got {model_cls!r}")
        if not isinstance(self.task_class, str) or self.task_class.count(":") != 1:
            raise ValueError(f"task_class must be 'package.module:ClassName', got {self.task_class!r}")
        if not isinstance(self.card, CardInfo):
            raise TypeError(f"card must be a CardInfo, got {type(self.card).__name__}")
        if (self.pipeline is None) != (self.pipeline_class is None):
            raise ValueError(
                f"pipeline and pipeline_class go together, got {self.pipeline!r} and {self.pipeline_class!r}"
            )
        if self.pipeline is not None and not _NAME_RE.match(self.pipeline):
            raise ValueError(f"pipeline must be a lowercase hyphenated task name, got {self.pipeline!r}")
        if self.pipeline is not None and self.pipeline in _builtin_pipelines():
            raise ValueError(
                f"pipeline {self.pipeline!r} is a transformers pipeline task (or one transformers v5 removed): "
                "registering it would replace transformers' own pipeline for every model; name the task's "
                f"pipeline after the task instead (e.g. {self.name!r})"
            )
        if self.pipeline is not None and not self.pipeline_auto_classes:
            object.__setattr__(self, "pipeline_auto_classes", (next(iter(self.auto_classes)),))
        object.__setattr__(self, "auto_classes", dict(self.auto_classes))
        object.__setattr__(self, "lora_target_modules", tuple(self.lora_target_modules))

    @property
    def model_type(self) -> str:
        return self.config_class.model_type

    @property
    def auto_class(self) -> str:
        """The Auto class name a user loads the model with (the first of ``auto_classes``)."""
        return next(iter(self.auto_classes))

    def load_task_class(self) -> type:
        """The :class:`hf_sparse.training.Task` subclass (imports its module), named after this task."""
        module_name, _, attr = self.task_class.partition(":")
        cls = getattr(importlib.import_module(module_name), attr, None)
        if cls is None:
            raise KeyError(f"task {self.name!r}: module {module_name!r} has no attribute {attr!r}")
        if cls.__dict__.get("descriptor") not in (None, self):  # a second task runs the same class
            return type(
                cls.__name__, (cls,), {"name": self.name, "descriptor": self, "__module__": cls.__module__}
            )
        cls.name, cls.descriptor = self.name, self
        return cls


def register(descriptor: TaskDescriptor) -> TaskDescriptor:
    """Register a task with transformers (Auto classes, tokenizer, pipeline, remote code) and the
    recipes and cards (by ``descriptor.name``). Idempotent for the same descriptor.

    Raises:
        TypeError: ``descriptor`` is not a :class:`TaskDescriptor`; or its configuration, model and pipeline
            classes are not all in one top-level package (:func:`hf_sparse.models.register_auto`).
        ValueError: a task of the same configuration maps one of its Auto classes to another model class.
        KeyError: another task has this name, or this pipeline task with another class.
    """
    if not isinstance(descriptor, TaskDescriptor):
        raise TypeError(f"register takes a TaskDescriptor, got {type(descriptor).__name__}")
    old = _DESCRIPTORS.get(descriptor.name)
    if old is not None and old != descriptor:
        raise KeyError(f"task {descriptor.name!r} is already registered (model type {old.model_type!r})")
    if descriptor.pipeline is not None:
        for other in _DESCRIPTORS.values():
            if (
                other.pipeline == descriptor.pipeline
                and other.pipeline_class is not descriptor.pipeline_class
            ):
                raise KeyError(
                    f"pipeline task {descriptor.pipeline!r} is already registered with "
                    f"{other.pipeline_class.__qualname__} (task {other.name!r})"
                )
    _DESCRIPTORS[descriptor.name] = descriptor
    try:
        _register_model(descriptor.config_class)
    except Exception:  # e.g. a model class that saves without its remote code: the task stays unregistered
        if old is None:
            del _DESCRIPTORS[descriptor.name]
        raise
    if descriptor.pipeline is not None:
        register_pipeline(descriptor.pipeline)
    return descriptor


def _register_model(config_class: type) -> None:
    """Auto classes, LoRA targets, tokenizer and remote-code hook of a configuration, from every
    registered task that trains it (one model type may serve several tasks)."""
    import transformers

    from ..models import register_auto, register_tokenizer

    tasks = [d for d in _DESCRIPTORS.values() if d.config_class is config_class]
    mapping, lora, pipelines, owner = {}, [], {}, {}
    for d in tasks:
        for auto, cls in d.auto_classes.items():
            first = owner.setdefault(auto, d)  # an Auto class loads one model class per configuration
            if first.auto_classes[auto] is not cls:
                raise ValueError(
                    f"task {d.name!r} maps {auto} of {config_class.__qualname__} to {cls.__qualname__}, task "
                    f"{first.name!r} to {first.auto_classes[auto].__qualname__}: an Auto class loads one model "
                    "class per configuration; map another Auto class, or give the task a configuration of its own"
                )
            mapping[getattr(transformers, auto)] = cls
        lora += [m for m in d.lora_target_modules if m not in lora]
        if d.pipeline is not None:
            pipelines[d.pipeline] = (d.pipeline_class, pipeline_auto_classes(d.pipeline))
    tokenizers = [d.tokenizer_class for d in tasks if d.tokenizer_class is not None]
    register_auto(config_class, mapping, lora or None, pipelines=pipelines)
    # a saved folder lists only the pipelines its model serves (pipeline(model=folder) infers the task from them)
    if pipelines or tokenizers:
        hook = _export_served(config_class, mapping, pipelines, tokenizers)
        for model_cls in mapping.values():
            model_cls.export_code_hook = staticmethod(hook)
    for tokenizer_class in tokenizers:
        register_tokenizer(config_class, tokenizer_class)


def serves(pipeline_cls: type, config) -> bool:
    """Whether the pipeline class serves a model of ``config``: its ``supports_config(config)`` (a
    classmethod a pipeline defines when it needs a head not every model of its configuration has, as the
    dialogue pipelines do), True for a pipeline class without one."""
    supports = getattr(pipeline_cls, "supports_config", None)
    return True if supports is None else bool(supports(config))


def _export_served(config_class: type, mapping: dict, pipelines: dict, tokenizers=()):
    """The ``export_code_hook`` of ``config_class``'s models: :func:`hf_sparse.models.export_code_hook` with
    the ``pipelines`` (``{task: (Pipeline subclass, Auto class names)}``) the saved model :func:`serves`, so
    that ``custom_pipelines`` names no task its model cannot run, and the ``tokenizers`` of its tasks."""
    from ..models import export_code_hook

    def export(model, folder, dry_run=False):
        served = {task: entry for task, entry in pipelines.items() if serves(entry[0], model.config)}
        export_code_hook(config_class, mapping, served, tokenizers)(model, folder, dry_run=dry_run)

    export.check = lambda model, folder: export(model, folder, dry_run=True)
    return export


def get(name: str) -> TaskDescriptor:
    """The registered task called ``name`` (``KeyError`` listing the registered ones)."""
    if name not in _DESCRIPTORS:
        raise KeyError(
            f"unknown task {name!r}; registered tasks: {', '.join(sorted(_DESCRIPTORS)) or 'none'}"
        )
    return _DESCRIPTORS[name]


def names() -> list[str]:
    """The registered task names, sorted."""
    return sorted(_DESCRIPTORS)


def pipeline_tasks() -> dict[str, list[TaskDescriptor]]:
    """Pipeline task name -> the registered tasks that serve it."""
    out: dict[str, list[TaskDescriptor]] = {}
    for d in _DESCRIPTORS.values():
        if d.pipeline is not None:
            out.setdefault(d.pipeline, []).append(d)
    return out


def _serving(task: str) -> list[TaskDescriptor]:
    serving = pipeline_tasks().get(task)
    if not serving:
        raise KeyError(f"unknown hf-sparse pipeline task {task!r}; known: {sorted(pipeline_tasks())}")
    return serving


def pipeline_class(task: str) -> type:
    """The ``Pipeline`` subclass of a registered pipeline task."""
    return _serving(task)[0].pipeline_class


def pipeline_auto_classes(task: str) -> tuple[str, ...]:
    """The Auto class names the models of a pipeline task load with (over every task serving it)."""
    autos: list[str] = []
    for d in _serving(task):
        autos += [a for a in d.pipeline_auto_classes if a not in autos]
    return tuple(autos)


def register_pipeline(task: str) -> None:
    """Register a pipeline task of the registered descriptors with transformers' ``PIPELINE_REGISTRY``
    (idempotent; a second task serving it updates its Auto classes quietly)."""
    import transformers
    from transformers.pipelines import PIPELINE_REGISTRY

    cls = pipeline_class(task)
    pt = tuple(getattr(transformers, a) for a in pipeline_auto_classes(task))
    current = PIPELINE_REGISTRY.supported_tasks.get(task, {})
    if current.get("impl") is cls:
        if tuple(current.get("pt", ())) == pt:
            return
        del PIPELINE_REGISTRY.supported_tasks[task]
    PIPELINE_REGISTRY.register_pipeline(task, pipeline_class=cls, pt_model=pt, type="text")


__all__ = [
    "CardInfo",
    "TaskDescriptor",
    "get",
    "names",
    "pipeline_auto_classes",
    "pipeline_class",
    "pipeline_tasks",
    "register",
    "register_pipeline",
    "serves",
]
