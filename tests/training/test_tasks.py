"""Task registry: descriptors by name (the package's own and new ones), duplicates, bad names,
lookups by name and by 'module:NAME', defaults."""

import dataclasses

import pytest

from hf_sparse.tasks import TaskDescriptor, register, registry
from hf_sparse.tasks.motif import DNA_MOTIF_DETECTION
from hf_sparse.tasks.motif.task import MotifTask
from hf_sparse.training import Task, get_task, list_tasks, metric_prefix
from tests.training.toy_task import ToyTask


@pytest.fixture
def descriptors(monkeypatch):
    """A copy of the registry for the test (the real one is left as it was)."""
    monkeypatch.setattr(registry, "_DESCRIPTORS", dict(registry._DESCRIPTORS))
    return registry._DESCRIPTORS


def test_every_package_task_is_registered_under_one_name():
    from importlib import import_module

    import hf_sparse.tasks

    package_tasks = [
        d.name for f in hf_sparse.tasks.TASKS for d in import_module(f"hf_sparse.tasks.{f}").TASKS
    ]
    assert sorted(package_tasks) == [
        "abstractive-summarization",
        "causal-lm",
        "dialogue-response-selection",
        "dialogue-state-tracking",
        "dna-motif-detection",
        "extractive-summarization",
    ]
    assert set(package_tasks) <= set(list_tasks())  # (tests may register more, e.g. tests/tasks/toy)
    assert get_task("dna-motif-detection") is MotifTask
    assert MotifTask.name == "dna-motif-detection" and MotifTask.descriptor is DNA_MOTIF_DETECTION


def test_register_and_get(descriptors):
    mine = register(dataclasses.replace(DNA_MOTIF_DETECTION, name="my-motifs"))
    assert registry.get("my-motifs") is mine
    assert "my-motifs" in list_tasks()
    assert register(mine) is mine  # the same descriptor again: nothing happens


def test_duplicate_name_is_a_key_error(descriptors):
    other = dataclasses.replace(DNA_MOTIF_DETECTION, task_class="tests.training.toy_task:ToyTask")
    with pytest.raises(KeyError, match="'dna-motif-detection' is already registered"):
        register(other)
    assert registry.get("dna-motif-detection") is DNA_MOTIF_DETECTION


def test_a_pipeline_task_has_one_class(descriptors):
    clash = dataclasses.replace(DNA_MOTIF_DETECTION, name="clash", pipeline_class=ToyTask)
    with pytest.raises(KeyError, match="pipeline task 'dna-motif-detection' is already registered"):
        register(clash)


@pytest.mark.parametrize("name", ["Toy", "1task", "", "a.b", "mod:Class", "with space", "a_b", None, 3])
def test_bad_names_are_value_errors(name):
    with pytest.raises(ValueError, match="name must be a lowercase hyphenated name"):
        dataclasses.replace(DNA_MOTIF_DETECTION, name=name)


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"config_class": object}, TypeError, "config_class must be a PretrainedConfig subclass"),
        ({"auto_classes": {}}, ValueError, "auto_classes must map"),
        ({"auto_classes": {"AutoNope": MotifTask}}, ValueError, "'AutoNope'"),
        ({"task_class": "hf_sparse.tasks.motif.task.MotifTask"}, ValueError, "task_class must be"),
        ({"pipeline_class": None}, ValueError, "pipeline and pipeline_class go together"),
        ({"card": "motif.jinja"}, TypeError, "card must be a CardInfo"),
    ],
)
def test_bad_descriptors_name_the_field(change, error, match):
    with pytest.raises(error, match=match):
        dataclasses.replace(DNA_MOTIF_DETECTION, **change)


def test_only_descriptors_register():
    with pytest.raises(TypeError, match="register takes a TaskDescriptor"):
        register(MotifTask)


def test_unknown_name_lists_registered_tasks():
    with pytest.raises(KeyError, match=r"unknown task 'motif-detection'; registered tasks: abstractive-summ"):
        get_task("motif-detection")


def test_module_descriptor_path_registers_it(descriptors, tmp_path, monkeypatch):
    (tmp_path / "my_task_pkg.py").write_text(
        "import dataclasses\n"
        "from hf_sparse.tasks.motif import DNA_MOTIF_DETECTION\n"
        "MINE = dataclasses.replace(DNA_MOTIF_DETECTION, name='motifs-again')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = get_task("my_task_pkg:MINE")
    assert issubclass(cls, MotifTask) and cls.name == "motifs-again"
    assert get_task("dna-motif-detection").name == "dna-motif-detection"  # the package's task is unchanged
    assert isinstance(registry.get("motifs-again"), TaskDescriptor)


def test_module_class_path():
    assert get_task("tests.training.toy_task:ToyTask") is ToyTask
    with pytest.raises(KeyError, match="cannot import module 'tests.training.nope'"):
        get_task("tests.training.nope:ToyTask")
    with pytest.raises(KeyError, match="has no attribute 'Nope'"):
        get_task("tests.training.toy_task:Nope")
    with pytest.raises(TypeError, match="not a subclass"):
        get_task("tests.training.toy_task:ToyArguments")
    with pytest.raises(ValueError, match="task must be"):
        get_task("  ")


def test_defaults_of_the_base_class():
    from tests.training.toy_task import ToyArguments

    task, args = ToyTask(), ToyArguments()
    model = task.build_model(args, task.build_tokenizer(args))
    assert Task().lora_target_modules(model) == ["query", "value"]  # peft's map for BERT
    assert Task().lora_target_modules(object()) == "all-linear"
    assert Task().lora_modules_to_save(model) is None  # nothing of its own to train in full
    assert Task().data_collator(args, None) is None and Task().compute_metrics(args) is None
    assert Task.model_accepts_loss_kwargs is False
    with pytest.raises(NotImplementedError, match="build_model"):
        Task().build_model(args, None)
    assert metric_prefix("validation") == "eval" and metric_prefix("test") == "test"


def test_lora_trains_the_moe_routers_and_adaptive_spans_in_full_by_default():
    """LoRA freezes them otherwise, and their losses (router auxiliary and z losses, span penalty) train nothing."""
    from hf_sparse.models.sparse_transformer import SparseTransformerForCausalLM
    from tests.models.tiny import tiny_decoder_config

    moe = {"num_experts": 2, "num_experts_per_tok": 1}
    spans = {"max_span": 8, "ramp": 2}
    model = SparseTransformerForCausalLM(tiny_decoder_config({"type": "causal"}, **moe))
    assert Task().lora_modules_to_save(model) == ["router"]
    model = SparseTransformerForCausalLM(tiny_decoder_config({"type": "causal"}, adaptive_span=spans, **moe))
    assert Task().lora_modules_to_save(model) == ["adaptive_span", "router"]
