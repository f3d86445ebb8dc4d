"""What register() refuses from a task of your own: a transformers pipeline task, a model type of
transformers' own, and classes the remote-code bundle cannot flatten (outside an importable package)."""

import dataclasses

import pytest
from transformers import AutoConfig, AutoModel, PretrainedConfig

from hf_sparse.models import register_auto
from hf_sparse.tasks import register
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
