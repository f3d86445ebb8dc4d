"""Model families, and their registration with the transformers Auto classes (on import)."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from .sparse_transformer import (
    LORA_TARGET_MODULES,
    SparseTransformerConfig,
    SparseTransformerForCausalLM,
    SparseTransformerForMaskedLM,
    SparseTransformerForMultipleChoice,
    SparseTransformerForQuestionAnswering,
    SparseTransformerForSequenceClassification,
    SparseTransformerForTokenClassification,
    SparseTransformerModel,
)

#: Auto class -> model class, for every SparseTransformer head (also written to ``auto_map``).
SPARSE_TRANSFORMER_AUTO = {
    AutoModel: SparseTransformerModel,
    AutoModelForMaskedLM: SparseTransformerForMaskedLM,
    AutoModelForCausalLM: SparseTransformerForCausalLM,
    AutoModelForSequenceClassification: SparseTransformerForSequenceClassification,
    AutoModelForTokenClassification: SparseTransformerForTokenClassification,
    AutoModelForMultipleChoice: SparseTransformerForMultipleChoice,
    AutoModelForQuestionAnswering: SparseTransformerForQuestionAnswering,
}


def remote_code_auto_map(config_cls, mapping: dict) -> dict[str, str]:
    """``auto_map`` of a model family, naming the flat modules :func:`hf_sparse.hub.export_remote_code`
    writes (``modeling_x.XModel``), for a family defined in any top-level package (hf_sparse's own, or a
    task package of your own)."""
    from ..hub.bundle import flat_module_name

    package = config_cls.__module__.split(".")[0]

    def ref(cls):
        return f"{flat_module_name(cls.__module__, package)}.{cls.__name__}"

    return {"AutoConfig": ref(config_cls), **{auto.__name__: ref(cls) for auto, cls in mapping.items()}}


def custom_pipelines_entry(pipeline_cls: type, auto_classes, package: str = "hf_sparse") -> dict:
    """A ``config.json`` ``custom_pipelines`` entry: the pipeline class in the flat bundled module (of
    ``package``, the top-level package the bundle flattens) and the Auto class names it loads with."""
    from ..hub.bundle import flat_module_name

    return {
        "impl": f"{flat_module_name(pipeline_cls.__module__, package)}.{pipeline_cls.__name__}",
        "pt": list(auto_classes),
        "tf": [],
        "type": "text",
    }


def export_code_hook(config_cls, mapping: dict, pipelines=None, tokenizers=()):
    """The ``export_code_hook`` of a family's models: after ``save_pretrained``, write the
    self-contained modelling code (and the modules of its inference ``pipelines``, ``{task:
    (Pipeline subclass, Auto class names)}``), ``auto_map`` and ``custom_pipelines``, so that
    ``trust_remote_code=True`` loads the folder, and ``pipeline(model=folder)`` finds its task, where
    hf-sparse is not installed. The modules of ``tokenizers`` (their own ``save_pretrained`` copies them)
    count toward the requirements the bundle's manifest lists.

    ``hook.check(model, folder)`` checks the same bundle and writes nothing: ``ExportCodeMixin`` calls it
    before the weights are written, so a bundle that cannot be made leaves no half-written folder."""
    pipelines = dict(pipelines or {})

    def export(model, folder, dry_run=False):
        from ..hub.bundle import export_remote_code

        package = config_cls.__module__.split(".")[0]
        modules = {config_cls.__module__, *(cls.__module__ for cls in mapping.values())}
        modules |= {cls.__module__ for cls, _ in pipelines.values()}
        entries = {
            task: custom_pipelines_entry(cls, autos, package) for task, (cls, autos) in pipelines.items()
        }
        updates = {"custom_pipelines": entries}
        export_remote_code(
            folder,
            sorted(modules),
            remote_code_auto_map(config_cls, mapping),
            package=package,
            exclude=(f"{package}.hub",),  # hf_sparse.hub: save-time helpers, never in the remote world
            config_updates=updates if pipelines else None,
            companions=sorted({cls.__module__ for cls in tokenizers}),
            dry_run=dry_run,
        )

    export.check = lambda model, folder: export(model, folder, dry_run=True)
    return export


def _calls_export_code_hook(model_cls) -> bool:
    """True if a ``save_pretrained`` of ``model_cls`` or of a base class calls ``export_code_hook``
    (``ExportCodeMixin``'s does; so does the one ``tests/tasks/toy/modeling_toy.py`` defines)."""
    for klass in model_cls.__mro__:
        code = getattr(vars(klass).get("save_pretrained"), "__code__", None)
        if code is not None and "export_code_hook" in code.co_names:
            return True
    return False


def _in_a_package(cls) -> bool:
    """True if ``cls`` is defined in a module of a package Python can import (the folder the remote-code
    bundle flattens), not in ``__main__`` (a script, a notebook) or a top-level single-file module."""
    import importlib.util

    top = cls.__module__.split(".")[0]
    if top == "__main__":
        return False
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):  # ValueError: a module whose __spec__ is None
        return False
    return spec is not None and bool(spec.submodule_search_locations)


def register_auto(config_cls, mapping: dict, lora_targets=None, pipelines=None):
    """Register a config with AutoConfig and its heads with the Auto model classes (idempotent),
    set their :func:`export_code_hook` (saving ``pipelines``, ``{task: (Pipeline subclass, Auto class
    names)}``, with the model), and tell peft the default LoRA target modules of the model type.

    Raises:
        TypeError: a model class whose ``save_pretrained`` never calls ``export_code_hook`` (transformers'
            own does not): its saved folders would lack the remote code, ``auto_map`` and
            ``custom_pipelines`` that ``trust_remote_code=True`` loads. Put ``ExportCodeMixin``
            (``hf_sparse.models.longformer_tasks``) before ``PreTrainedModel`` in its bases, or (a task
            outside hf_sparse whose saved code must not import it) define a ``save_pretrained`` that calls
            ``type(self).export_code_hook(self, save_directory)``, as ``tests/tasks/toy/modeling_toy.py``; or a
            configuration, model or pipeline class outside an importable package (defined in ``__main__``, a
            notebook, or a single-file module), which the bundle cannot flatten; or model and pipeline classes
            outside the top-level package of the configuration class (an outside model on hf-sparse's
            configuration, hf-sparse's pipeline for an outside model): the bundle flattens that one package.
        ValueError: the configuration's ``model_type`` is transformers' own (``"bert"``).
    """
    model_type = config_cls.model_type
    for model_cls in mapping.values():
        if not _calls_export_code_hook(model_cls):
            raise TypeError(
                f"{model_cls.__module__}.{model_cls.__qualname__} (model type {model_type!r}) would be saved without "
                "the remote code, auto_map and custom_pipelines that trust_remote_code=True loads: its "
                "save_pretrained never calls export_code_hook. Subclass ExportCodeMixin (from "
                "hf_sparse.models.longformer_tasks import ExportCodeMixin; class "
                f"{model_cls.__name__}(ExportCodeMixin, PreTrainedModel); outside hf_sparse the saved code then "
                "imports hf_sparse), or define a save_pretrained that calls type(self).export_code_hook(self, "
                "save_directory) after super().save_pretrained (README 'Adding a task')"
            )
    pipeline_classes = [cls for cls, _ in dict(pipelines or {}).values()]
    for cls in [config_cls, *mapping.values(), *pipeline_classes]:
        if not _in_a_package(cls):
            raise TypeError(
                f"{cls.__module__}.{cls.__qualname__} (model type {model_type!r}) is not in an importable package: "
                "save_pretrained bundles the modules of the task's package as its remote code, and a class "
                "defined in a script, a notebook or a single module has none. Move the configuration, model and "
                "pipeline classes into a package (a folder with __init__.py, installed or on PYTHONPATH) and "
                "import them from there (README 'Adding a task')"
            )
    package = config_cls.__module__.split(".")[0]
    for cls in [*mapping.values(), *pipeline_classes]:
        if cls.__module__.split(".")[0] != package:
            raise TypeError(
                f"{cls.__module__}.{cls.__qualname__} (model type {model_type!r}) is not in {package!r}, the "
                f"package of its configuration {config_cls.__module__}.{config_cls.__qualname__}: save_pretrained "
                "bundles the modules of one package as the remote code (and an Auto class maps a configuration "
                "to one model class: a model of another package would replace the configuration's own). Define "
                "the configuration, model and pipeline classes in one package; to build on hf-sparse's, subclass "
                "them there (a configuration with a model_type of its own) (README 'Adding a task')"
            )
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        AutoConfig.register(model_type, config_cls)
    except ValueError as e:  # transformers' own model type, or (older transformers) an earlier registration
        registered = CONFIG_MAPPING[model_type] if model_type in CONFIG_MAPPING else None  # lazy: no .get
        if registered is not config_cls:  # else an earlier import registered this very class
            raise ValueError(
                f"model_type {model_type!r} of {config_cls.__module__}.{config_cls.__qualname__} is already "
                f"used by {getattr(registered, '__name__', registered)}, transformers' own: a saved config.json would "
                "load as that model; give the configuration a model_type of its own (e.g. 'my_bert')"
            ) from e
    hook = export_code_hook(config_cls, mapping, pipelines)
    for model_cls in mapping.values():
        model_cls.export_code_hook = staticmethod(hook)
    for auto_cls, model_cls in mapping.items():
        try:
            auto_cls.register(config_cls, model_cls, exist_ok=True)
        except TypeError:  # older transformers without exist_ok
            auto_cls.register(config_cls, model_cls)
    if AutoModelForCausalLM in mapping:
        # transformers tells causal LMs by class name in this table, which register() leaves alone: without the
        # name, Trainer's label smoothing scored each position's logits against its own token, not the next one.
        # The lazy Auto mapping that shares the table only reads model types of transformers' own configs.
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.setdefault(model_type, mapping[AutoModelForCausalLM].__name__)
    if lora_targets:
        try:
            from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as targets
        except ImportError:
            return
        targets.setdefault(model_type, list(lora_targets))


def register_tokenizer(config_cls, tokenizer_cls):
    """Register a slow tokenizer with AutoTokenizer for a config (and by class name, for folders that
    hold only the tokenizer), and make its ``save_pretrained`` write its module and ``auto_map`` so
    ``AutoTokenizer.from_pretrained(folder, trust_remote_code=True)`` works without hf-sparse."""
    tokenizer_cls.register_for_auto_class("AutoTokenizer")
    AutoTokenizer.register(config_cls, slow_tokenizer_class=tokenizer_cls, exist_ok=True)


def register_models():
    """Register the SparseTransformer family with the Auto classes (idempotent; ``import hf_sparse`` calls
    it, and :func:`hf_sparse.tasks.register_tasks` for the task models)."""
    register_auto(SparseTransformerConfig, SPARSE_TRANSFORMER_AUTO, LORA_TARGET_MODULES)


__all__ = [
    "custom_pipelines_entry",
    "SPARSE_TRANSFORMER_AUTO",
    "export_code_hook",
    "register_auto",
    "register_models",
    "register_tokenizer",
    "remote_code_auto_map",
]
