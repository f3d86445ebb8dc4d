"""Task registry: names, duplicates, lookups by name and by 'module:Class', defaults."""

import pytest

from hf_sparse.training import Task, get_task, list_tasks, metric_prefix, register_task, tasks
from tests.training.toy_task import ToyTask


@pytest.fixture
def registry(monkeypatch):
    """An empty registry for the test (the real one is left untouched)."""
    monkeypatch.setattr(tasks, "_TASKS", {})
    monkeypatch.setattr(tasks, "TASK_PACKAGES", ())
    return tasks._TASKS


def test_register_and_get(registry):
    @register_task("my-task_2")
    class MyTask(Task):
        pass

    assert get_task("my-task_2") is MyTask
    assert MyTask.name == "my-task_2"
    assert list_tasks() == ["my-task_2"]


def test_duplicate_name_is_a_key_error(registry):
    @register_task("dup")
    class First(Task):
        pass

    with pytest.raises(KeyError, match="'dup' is already registered"):

        @register_task("dup")
        class Second(Task):
            pass

    assert get_task("dup") is First


@pytest.mark.parametrize("name", ["Toy", "1task", "", "a.b", "mod:Class", "with space", None, 3])
def test_bad_names_are_value_errors(registry, name):
    with pytest.raises(ValueError, match="task name must be lowercase"):
        register_task(name)


def test_only_task_subclasses_register(registry):
    with pytest.raises(TypeError, match="decorates a Task subclass"):
        register_task("plain")(object)


def test_unknown_name_lists_registered_tasks(registry):
    register_task("alpha")(type("Alpha", (Task,), {}))
    with pytest.raises(KeyError, match=r"unknown task 'beta'; registered tasks: alpha"):
        get_task("beta")


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
    assert Task().data_collator(args, None) is None and Task().compute_metrics(args) is None
    assert Task.model_accepts_loss_kwargs is False
    with pytest.raises(NotImplementedError, match="build_model"):
        Task().build_model(args, None)
    assert metric_prefix("validation") == "eval" and metric_prefix("test") == "test"
