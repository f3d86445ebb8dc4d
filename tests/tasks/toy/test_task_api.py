"""What register() refuses from a task of your own: a transformers pipeline task, a model type of
transformers' own, classes the remote-code bundle cannot flatten (outside an importable package, or outside
the package of the configuration), and a second model class for an Auto class of a shared configuration."""

import dataclasses

import pytest
from transformers import AutoConfig, AutoModel, PretrainedConfig

from hf_sparse.models import register_auto
from hf_sparse.tasks import register, registry
from hf_sparse.tasks.motif import LongformerForMotifDetection, LongformerMotifConfig
from hf_sparse.tasks.motif.pipeline import DNAMotifDetectionPipeline
from tests.tasks.toy import TOY_TASK
from tests.tasks.toy.configuration_toy import ToyPresenceConfig
from tests.tasks.toy.modeling_toy import ToyPresenceModel


@pytest.mark.parametrize(
    "pipeline",
    ["text-classification", "token-classification", "fill-mask", "ner", "summarization", "translation"],
)
def test_a_transformers_pipeline_task_is_refused(pipeline):
    """Registered, it replaced transformers' own pipeline for every model (top_k ignored on a plain BERT)."""
    from transformers.pipelines import PIPELINE_REGISTRY

    before = dict(PIPELINE_REGISTRY.supported_tasks.get(pipeline, {}))
    with pytest.raises(ValueError, match=f"pipeline '{pipeline}' is a transformers pipeline task"):
        dataclasses.replace(TOY_TASK, name="toy-hijack", pipeline=pipeline)
    assert dict(PIPELINE_REGISTRY.supported_tasks.get(pipeline, {})) == before
    dataclasses.replace(TOY_TASK, name="toy-again")  # a pipeline registered by a task is no built-in


def test_a_model_type_of_transformers_own_is_refused():
    """AutoConfig's "'bert' is already used" was taken for a re-registration: a saved folder loaded as BERT."""

    class BertNamedConfig(ToyPresenceConfig):
        model_type = "bert"

    class BertNamedModel(ToyPresenceModel):
        config_class = BertNamedConfig

    with pytest.raises(
        ValueError, match="model_type 'bert' of .*BertNamedConfig is already used by BertConfig"
    ):
        register_auto(BertNamedConfig, {AutoModel: BertNamedModel})
    assert AutoConfig.for_model("bert").__class__.__name__ == "BertConfig"
    register(TOY_TASK)  # registering the same classes again stays fine


def test_classes_outside_an_importable_package_are_refused(tmp_path, monkeypatch):
    """The bundle flattens the task's package: a single module or __main__ failed at the first save."""
    (tmp_path / "single_module_task.py").write_text(
        "from tests.tasks.toy.configuration_toy import ToyPresenceConfig\n\n"
        "class SingleConfig(ToyPresenceConfig):\n    model_type = 'hf_sparse_test_single_module'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from single_module_task import SingleConfig

    class MainConfig(PretrainedConfig):
        model_type = "hf_sparse_test_main"

    MainConfig.__module__ = "__main__"  # as in a script or a notebook
    for config_cls in (SingleConfig, MainConfig):
        with pytest.raises(TypeError, match=f"{config_cls.__name__} .* is not in an importable package"):
            model_cls = type(f"{config_cls.__name__}Model", (ToyPresenceModel,), {"config_class": config_cls})
            register_auto(config_cls, {AutoModel: model_cls})
        with pytest.raises(ValueError):  # nothing was registered
            AutoConfig.for_model(config_cls.model_type)


@pytest.fixture
def descriptors(monkeypatch):
    """A copy of the task registry for the test (the real one is left as it was)."""
    monkeypatch.setattr(registry, "_DESCRIPTORS", dict(registry._DESCRIPTORS))
    monkeypatch.setattr(ToyPresenceModel, "export_code_hook", ToyPresenceModel.export_code_hook)
    return registry._DESCRIPTORS


class ToyOnMotifConfig(ToyPresenceModel):
    config_class = LongformerMotifConfig


class OtherToyModel(ToyPresenceModel):
    pass


def _on_motif_config(auto):
    return dict(config_class=LongformerMotifConfig, auto_classes={auto: ToyOnMotifConfig}, pipeline=None,
                pipeline_class=None)  # fmt: skip


@pytest.mark.parametrize(
    "change, error, match",
    [
        # an outside head on hf-sparse's configuration: every later save of the built-in motif model raised
        (
            _on_motif_config("AutoModelForSequenceClassification"),
            TypeError,
            r"ToyOnMotifConfig \(model type 'longformer_motif'\) is not in 'hf_sparse', the package of its configuration",
        ),
        # ... on an Auto class the built-in task maps: it also replaced the built-in model in AutoModel
        (
            _on_motif_config("AutoModel"),
            ValueError,
            "task 'toy-reuse' maps AutoModel of LongformerMotifConfig",
        ),
        # hf-sparse's pipeline class for an outside model: the toy's saves raised, leaving config and weights only
        (
            dict(pipeline="toy-motif-pipeline", pipeline_class=DNAMotifDetectionPipeline),
            TypeError,
            r"DNAMotifDetectionPipeline \(model type 'hf_sparse_test_toy_presence'\) is not in 'tests'",
        ),
        # two tasks of one configuration, one Auto class, two model classes: the second silently won
        (
            dict(auto_classes={"AutoModel": OtherToyModel}, pipeline=None, pipeline_class=None),
            ValueError,
            "task 'toy-reuse' maps AutoModel of ToyPresenceConfig to OtherToyModel, task 'toy-token-presence' to "
            "ToyPresenceModel",
        ),
    ],
)
def test_classes_that_would_break_another_tasks_saves_are_refused(descriptors, change, error, match):
    """register() accepted them, then rebound the Auto classes and export hooks of the configuration's other
    task (the built-in motif task, or the toy): its save_pretrained raised (config.json and weights written,
    no bundle), or AutoModel loaded the wrong class."""
    from transformers import AutoModelForSequenceClassification
    from transformers.pipelines import PIPELINE_REGISTRY

    hooks = (LongformerForMotifDetection.export_code_hook, ToyPresenceModel.export_code_hook)
    autos = {
        auto: dict(auto._model_mapping._extra_content)
        for auto in (AutoModel, AutoModelForSequenceClassification)
    }
    with pytest.raises(error, match=match):
        register(dataclasses.replace(TOY_TASK, name="toy-reuse", **change))
    assert (
        "toy-reuse" not in registry.names() and "toy-motif-pipeline" not in PIPELINE_REGISTRY.supported_tasks
    )
    assert (LongformerForMotifDetection.export_code_hook, ToyPresenceModel.export_code_hook) == hooks
    assert {auto: dict(auto._model_mapping._extra_content) for auto in autos} == autos
    assert AutoModel._model_mapping[LongformerMotifConfig] is LongformerForMotifDetection


def test_two_tasks_of_one_package_share_a_configuration(descriptors):
    """The dialogue tasks' way (README 'Adding a task'): a second task of the toy's configuration and model."""
    second = register(dataclasses.replace(TOY_TASK, name="toy-second", pipeline=None, pipeline_class=None))
    assert registry.get("toy-second") is second
    assert AutoModel._model_mapping[ToyPresenceConfig] is ToyPresenceModel
