"""Recipes: YAML -> (RecipeArguments, task arguments, TrainingArguments), typed overrides, errors."""

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from hf_sparse.tasks.arguments import RENAMED_KEYS, BackboneArguments
from hf_sparse.training import RecipeArguments, RecipeError, load_recipe, parse_overrides
from hf_sparse.training.recipe import _coerce, _cpu_only_distributed_launch, _installed_spelling, given_keys
from tests.training.helpers import toy_recipe, write_recipe
from tests.training.toy_task import ToyArguments, ToyTask

REPO = Path(__file__).resolve().parents[2]


def test_yaml_types_and_defaults(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text(
        "task: tests.training.toy_task:ToyTask\n"
        f"output_dir: {tmp_path / 'out'}\n"
        "learning_rate: 1e-4        # a string in YAML 1.1\n"
        "num_train_epochs: 2        # int for a float field\n"
        "lora: true\n"
        "lora_target_modules: [query, key]\n"
        "seq_len: 8                 # a task key\n",
        encoding="utf-8",
    )
    recipe_args, task_args, training_args = load_recipe(path)
    assert isinstance(recipe_args, RecipeArguments) and isinstance(task_args, ToyArguments)
    assert training_args.learning_rate == 1e-4 and isinstance(training_args.learning_rate, float)
    assert training_args.num_train_epochs == 2.0
    assert recipe_args.lora is True and recipe_args.lora_target_modules == ["query", "key"]
    assert task_args.seq_len == 8
    # the recipe defaults that differ from TrainingArguments'
    assert training_args.report_to == ["tensorboard"]
    assert training_args.eval_strategy == "epoch" and training_args.save_strategy == "epoch"
    assert training_args.logging_steps == 10 and training_args.disable_tqdm is False
    assert recipe_args.source == str(path.resolve())
    assert recipe_args.values["learning_rate"] == 1e-4


def test_recipe_overrides_defaults(tmp_path):
    _, _, training_args = load_recipe(toy_recipe(tmp_path, eval_strategy="no", save_strategy="steps"))
    assert training_args.eval_strategy == "no" and training_args.save_strategy == "steps"
    assert training_args.report_to == []  # "none"


def test_the_task_arguments_record_the_keys_the_recipe_and_overrides_state(tmp_path):
    """A key stated at its default value counts as given (a saved model's settings yield only to stated keys);
    task arguments built in Python record none."""
    _, task_args, _ = load_recipe(toy_recipe(tmp_path, seq_len=10), ["hidden_size=32"])  # both the defaults
    stated = given_keys(task_args)
    assert {"seq_len", "hidden_size", "task", "learning_rate"} <= stated and "num_layers" not in stated
    assert given_keys(ToyArguments()) is None


def test_unknown_key_names_key_and_file(tmp_path):
    path = write_recipe(tmp_path / "bad.yaml", toy_recipe(tmp_path, learning_rat=0.1))
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    message = str(info.value)
    assert "'learning_rat'" in message and str(path) in message and "did you mean 'learning_rate'" in message


def test_overrides_are_typed_by_the_field(tmp_path):
    recipe_args, task_args, training_args = load_recipe(
        toy_recipe(tmp_path),
        [
            "num_train_epochs=1",
            "learning_rate=2e-3",
            "lora=true",
            "lora_target_modules=[query,value]",
            "max_train_samples=100",
            "report_to=tensorboard",
            "seq_len=6",
            "run_name=123",
        ],
    )
    assert training_args.num_train_epochs == 1.0 and training_args.learning_rate == 2e-3
    assert recipe_args.lora is True and recipe_args.lora_target_modules == ["query", "value"]
    assert recipe_args.max_train_samples == 100 and task_args.seq_len == 6
    assert training_args.report_to == ["tensorboard"]
    assert training_args.run_name == "123"  # a str field keeps the string
    recipe_args, _, _ = load_recipe(toy_recipe(tmp_path, max_train_samples=5), ["max_train_samples=null"])
    assert recipe_args.max_train_samples is None
    recipe_args, _, _ = load_recipe(toy_recipe(tmp_path), ["lora_target_modules=query,dense"])
    assert recipe_args.lora_target_modules == ["query", "dense"]
    recipe_args, _, _ = load_recipe(
        toy_recipe(tmp_path), ["lora_target_parameters=up_proj,down_proj", "lora_dropout=0"]
    )
    assert recipe_args.lora_target_parameters == ["up_proj", "down_proj"]


@pytest.mark.parametrize(
    "override, match",
    [
        ("lora_r=abc", r"lora_r='abc' is not a valid int"),
        ("lora=maybe", r"lora='maybe' is not a valid bool"),
        ("no_such_key=1", r"unknown override key 'no_such_key'"),
        ("lora_dropout=1.5", r"lora_dropout must be in \[0, 1\), got 1.5"),
        ("lora_target_parameters=[up_proj]", r"lora_target_parameters=\['up_proj'\] needs lora_dropout: 0"),
        ("eval_strategy=sometimes", r"sometimes"),
        ("task=tests.training.toy_task:Nope", r"task: task 'tests.training.toy_task:Nope'"),
    ],
)
def test_bad_overrides_name_the_key(tmp_path, override, match):
    with pytest.raises(RecipeError, match=match) as info:
        load_recipe(toy_recipe(tmp_path), [override])
    assert "<recipe dict>" in str(info.value)


@pytest.mark.parametrize("bad", ["novalue", "=3", 7])
def test_malformed_overrides(bad):
    with pytest.raises(RecipeError, match="key=value|empty key"):
        parse_overrides([bad])
    with pytest.raises(RecipeError, match="list of 'key=value'"):
        parse_overrides("lora=true")


def test_paths(tmp_path, monkeypatch):
    folder = tmp_path / "pipelines" / "toy"
    folder.mkdir(parents=True)
    path = write_recipe(folder / "tiny.yaml", toy_recipe("rel_out", data_dir="../data", record_ranks_to=None))
    monkeypatch.chdir(tmp_path)
    _, task_args, training_args = load_recipe(path)
    assert task_args.data_dir == str(tmp_path / "pipelines" / "data")  # relative to the recipe's folder
    assert training_args.output_dir == str(tmp_path / "rel_out")  # relative to the working directory
    recipe = toy_recipe("x")
    del recipe["output_dir"]
    _, _, training_args = load_recipe(write_recipe(folder / "named.yaml", recipe))
    assert training_args.output_dir == str(tmp_path / "outputs" / "named")
    monkeypatch.setenv("TOY_DATA", str(tmp_path / "abs"))
    _, task_args, _ = load_recipe(toy_recipe("o"), ["data_dir=$TOY_DATA/x"])
    assert task_args.data_dir == str(tmp_path / "abs" / "x")


@pytest.mark.parametrize(
    "content, match",
    [
        (None, "recipe file not found"),
        ("- a\n- b\n", "must be a mapping"),
        ("task: [unclosed\n", "not valid YAML"),
        ("learning_rate: 0.1\n", "missing required key 'task'"),
        ("task: no-such-task\n", "unknown task 'no-such-task'"),
    ],
)
def test_recipe_file_errors(tmp_path, content, match):
    path = tmp_path / "r.yaml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(RecipeError, match=match) as info:
        load_recipe(path)
    assert str(path) in str(info.value)


def test_coerce_rules():
    assert _coerce("none", int | None) is None
    assert _coerce("none", str | None) == "none"  # report_to: none stays a string
    assert _coerce("null", str | None) is None
    assert _coerce("0.5", float | None) == 0.5
    assert _coerce(3, float) == 3.0 and _coerce(4.0, int) == 4
    assert _coerce("10.0", int) == 10 and _coerce(" 10.00 ", int) == 10  # an override, as YAML's 10.0
    with pytest.raises(ValueError):
        _coerce("4.5", int)
    with pytest.raises(ValueError):
        _coerce(4.5, int)
    with pytest.raises(ValueError):
        _coerce(True, int)
    assert _coerce("{a: 1}", dict | str | None) == {"a": 1}


def test_exponent_floats_inside_mappings_are_floats(tmp_path):
    """lr_scheduler_kwargs: {min_lr: 1e-5} (a string in YAML 1.1) reaches the scheduler as a float, from the
    recipe file and from an override, as learning_rate: 1e-4 does; nested untyped values too."""
    path = write_recipe(
        tmp_path / "r.yaml", toy_recipe(tmp_path / "out", lr_scheduler_type="cosine_with_min_lr")
    )
    path.write_text(
        path.read_text(encoding="utf-8") + "lr_scheduler_kwargs:\n  min_lr: 1e-5\n", encoding="utf-8"
    )
    _, _, training_args = load_recipe(path)
    assert training_args.lr_scheduler_kwargs == {"min_lr": 1e-5}
    assert isinstance(training_args.lr_scheduler_kwargs["min_lr"], float)
    _, _, training_args = load_recipe(path, ["lr_scheduler_kwargs={min_lr: 2E-6, name: x1e5}"])
    assert training_args.lr_scheduler_kwargs == {"min_lr": 2e-6, "name": "x1e5"}
    nested = _coerce({"a": {"b": "1e-5", "c": ["3e2", "-.5e1", "e5"]}, "d": "1.0e5", "e": "7"}, dict | None)
    assert nested == {"a": {"b": 1e-5, "c": [300.0, -5.0, "e5"]}, "d": 1e5, "e": "7"}
    assert _coerce({"on": "1e-3"}, dict[str, float]) == {"on": 1e-3}  # a typed mapping types its values
    with pytest.raises(ValueError):
        _coerce({"on": "x"}, dict[str, float])


@pytest.mark.parametrize(
    "value, expected",
    [
        ("tensorboard,wandb", ["tensorboard", "wandb"]),
        (" tensorboard , tensorboard ", ["tensorboard"]),
        ("[tensorboard,wandb]", ["tensorboard", "wandb"]),
        ("tensorboard", ["tensorboard"]),
    ],
)
def test_report_to_a_comma_list_is_a_list(tmp_path, value, expected):
    """report_to=tensorboard,wandb is two integrations (as lora_target_modules=a,b), not one named
    "tensorboard,wandb"; in the recipe file too."""
    _, _, training_args = load_recipe(toy_recipe(tmp_path), [f"report_to={value}"])
    assert training_args.report_to == expected
    _, _, training_args = load_recipe(toy_recipe(tmp_path, report_to=value))
    assert training_args.report_to == expected


def test_cpu_ddp_detection(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not _cpu_only_distributed_launch()
    monkeypatch.setenv("WORLD_SIZE", "2")
    import torch

    assert _cpu_only_distributed_launch() == (not torch.cuda.is_available())
    assert os.environ["WORLD_SIZE"] == "2"


@pytest.mark.parametrize("old, new", sorted(RENAMED_KEYS.items()))
@pytest.mark.parametrize("where", ["recipe", "override"])
def test_an_old_backbone_key_names_its_new_spelling(tmp_path, old, new, where):
    text = (REPO / "pipelines" / "motif" / "tiny.yaml").read_text()
    recipe = tmp_path / "old.yaml"
    recipe.write_text(text + (f"\n{old}: 0.1\n" if where == "recipe" else ""))
    overrides = [f"{old}=0.1"] if where == "override" else []
    with pytest.raises(RecipeError, match=rf"{where} key '{old}' is now spelled '{new}'"):
        load_recipe(recipe, overrides)


@pytest.mark.parametrize("key", ["activation_checkpointing", "gradient_checkpointing"])
def test_checkpointing_key_is_spelled_as_the_installed_transformers_spells_it(key, tmp_path):
    """transformers 5.24 renamed TrainingArguments' ``gradient_checkpointing`` to ``activation_checkpointing``
    (the old name warns); a recipe may give either, on either side of the rename."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        _, _, training_args = load_recipe(toy_recipe(tmp_path / "out"), [f"{key}=true"])
    installed = (
        "activation_checkpointing"
        if hasattr(training_args, "activation_checkpointing")
        else "gradient_checkpointing"
    )
    assert getattr(training_args, installed) is True
    both = {"activation_checkpointing": 1, "gradient_checkpointing": 1}  # the hints of 5.24, then of 5.10
    assert _installed_spelling({key: True}, both, "r", "recipe") == {"activation_checkpointing": True}
    assert _installed_spelling({key: True}, {"gradient_checkpointing": 1}, "r", "recipe") == {
        "gradient_checkpointing": True
    }
    with pytest.raises(
        RecipeError, match="r: recipe keys 'activation_checkpointing' and 'gradient_checkpointing'"
    ):
        _installed_spelling(
            {"activation_checkpointing": True, "gradient_checkpointing": False}, both, "r", "recipe"
        )


@pytest.mark.parametrize("recipe", sorted((REPO / "pipelines").glob("*/*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_recipe_uses_the_shared_backbone_keys(recipe):
    _, task_args, _ = load_recipe(recipe, ["bf16=false", "fp16=false"])  # GPU recipes, parsed on CPU
    assert isinstance(task_args, BackboneArguments)
    assert not set(yaml.safe_load(recipe.read_text())) & set(RENAMED_KEYS)


@pytest.mark.parametrize(
    "recipe, override",
    [
        ("summarization/tiny-extractive.yaml", "attention_pattern={type: bigbird, block_size: 16}"),
        ("summarization/tiny-extractive.yaml", "attention_backend=flex"),
        ("summarization/tiny-extractive.yaml", "position_embedding_type=rotary"),
        (
            "dialogue/base-selection.yaml",
            "attention_pattern={type: sliding_window, window: 64}",
        ),  # longformer default
    ],
)
def test_sparse_keys_with_a_longformer_backbone_are_an_error_not_ignored(recipe, override):
    key = override.partition("=")[0]
    with pytest.raises(RecipeError, match=rf"{key}=.* has no effect with backbone: longformer"):
        load_recipe(REPO / "pipelines" / recipe, [override, "bf16=false", "fp16=false"])


def test_sparse_keys_still_work_with_other_backbones():
    pattern = "attention_pattern={type: sliding_window, window: 16}"
    _, args, _ = load_recipe(
        REPO / "pipelines/summarization/tiny-extractive.yaml", [pattern, "backbone=sparse_transformer"]
    )
    assert args.attention_pattern == {"type": "sliding_window", "window": 16}
    _, args, _ = load_recipe(
        REPO / "pipelines/summarization/tiny-abstractive.yaml", [pattern]
    )  # LED's encoder
    assert args.backbone == "led" and args.attention_pattern == {"type": "sliding_window", "window": 16}
    _, args, _ = load_recipe(
        REPO / "pipelines/motif/tiny.yaml", ["backbone=longformer", "attention_window=32"]
    )
    assert args.position_embedding_type == "rotary"  # the motif task's default, not given: no error


@dataclass
class _ClashArguments(ToyArguments):
    label_names: list[str] = field(default_factory=lambda: ["absent", "present"])  # also TrainingArguments'


class _ClashTask(ToyTask):
    Arguments = _ClashArguments


@dataclass
class _LoraClashArguments(ToyArguments):
    lora: bool = False  # also RecipeArguments'


class _LoraClashTask(ToyTask):
    Arguments = _LoraClashArguments


@pytest.mark.parametrize(
    "task, both",
    [
        ("_ClashTask", "_ClashArguments and TrainingArguments"),
        ("_LoraClashTask", "RecipeArguments and _LoraClash"),
    ],
)
def test_a_task_field_named_like_another_dataclass_field_is_a_recipe_error(tmp_path, task, both):
    """HfArgumentParser failed every run with 'argparse.ArgumentError: conflicting option strings'."""
    with pytest.raises(
        RecipeError, match=f"{both}.* both define the field .*: rename it in the task's Arguments"
    ):
        load_recipe(toy_recipe(tmp_path, task=f"{__name__}:{task}"))
