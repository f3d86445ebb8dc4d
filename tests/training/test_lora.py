"""LoRA runs (``lora: true``): which base model the saved adapter names, what trains in full next to the adapters,
and a resume that changes ``merge_lora``."""

import json
from types import SimpleNamespace

import pytest
import torch

from hf_sparse.training import RecipeError, run
from hf_sparse.training.runner import _lora_settings
from tests.training.helpers import toy_recipe
from tests.training.toy_task import ToyTask, save_toy_model

FAST = dict(max_steps=2, save_strategy="no", eval_strategy="no", num_test=0, num_train=64, num_validation=32,
            plots=False, lora=True)  # fmt: skip


class NewHeadTask(ToyTask):
    """Loads the saved toy model with a new 3-label head: the saved model is not the model trained."""

    def build_model(self, args, tokenizer):
        from transformers import BertForSequenceClassification

        return BertForSequenceClassification.from_pretrained(
            args.model_name_or_path, num_labels=3, ignore_mismatched_sizes=True
        )


NEW_HEAD = f"{__name__}:NewHeadTask"


def test_an_adapter_alone_needs_a_base_that_loads_as_the_model_trained(tmp_path):
    """merge_lora: false where model_name_or_path is not the model trained (here: a new head): the adapter would
    name a checkpoint that loads without the trained head. One error before training, naming merge_lora and what
    differs; nothing is written."""
    base = save_toy_model(tmp_path / "base")
    out = tmp_path / "out"
    recipe = toy_recipe(out, task=NEW_HEAD, model_name_or_path=str(base), merge_lora=False, **FAST)
    with pytest.raises(RecipeError, match=r"merge_lora: false.*model_name_or_path=.*config the task changed"):
        run(recipe)
    assert not out.exists() or not any(out.iterdir())


def test_the_adapter_of_a_merged_run_names_no_base_that_is_not_the_model_trained(tmp_path):
    """merge_lora: true (the default) on such a model: adapter/ names no base model (not the checkpoint, which
    loads without the trained head) and loads on the task's model as built."""
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    base = save_toy_model(tmp_path / "base")
    out = tmp_path / "out"
    run(toy_recipe(out, task=NEW_HEAD, model_name_or_path=str(base), **FAST))
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] is None
    built = NewHeadTask().build_model(SimpleNamespace(model_name_or_path=str(base)), None)
    adapted = PeftModel.from_pretrained(built, out / "adapter").merge_and_unload()
    merged = AutoModelForSequenceClassification.from_pretrained(out)
    ids = torch.tensor([[2, 5, 11, 3]])
    assert torch.allclose(adapted(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-5)


@pytest.mark.parametrize(
    "key, value, needle",
    [
        (
            "lora_modules_to_save",
            ["clasifier"],
            "'clasifier' names no module of the model (did you mean 'classifier'?)",
        ),
        (
            "lora_target_modules",
            ["query", "vlaue"],
            "'vlaue' names no module of the model (did you mean 'value'?)",
        ),
        ("lora_target_parameters", ["up_prj"], "'up_prj' names no parameter"),
        ("lora_target_modules", [], "lora_target_modules=[] would adapt no module"),
        ("lora_modules_to_save", [], "lora_modules_to_save=[] adds no module"),
        ("lora_target_parameters", [], "lora_target_parameters=[] adapts no parameter"),
    ],
)
def test_a_lora_name_that_matches_nothing_is_an_error_before_training(tmp_path, key, value, needle):
    """A misspelt name in a LoRA list would silently adapt or train nothing (peft refuses only a list of which no
    name matches), and an empty list would silently mean the task's default."""
    out = tmp_path / "out"
    extra = {"lora_dropout": 0} if key == "lora_target_parameters" else {}
    with pytest.raises(RecipeError, match="^[^\n]*$") as info:
        run(toy_recipe(out, **{**FAST, key: value, **extra}))
    assert needle in str(info.value) and key in str(info.value)
    assert not out.exists() or not any(out.iterdir())


def test_the_recipes_modules_to_save_add_to_the_tasks_own():
    """lora_modules_to_save adds modules to the task's (its new heads must train); it does not replace them."""

    class Heads:
        def lora_target_modules(self, model):
            return ["query"]

        def lora_modules_to_save(self, model):
            return ["token_classifier", "sequence_head"]

    recipe = SimpleNamespace(lora_target_modules=None, lora_modules_to_save=["embeddings", "sequence_head"])
    targets, to_save = _lora_settings(Heads(), None, recipe)
    assert targets == ["query"] and to_save == ["token_classifier", "sequence_head", "embeddings"]


@pytest.mark.parametrize("first, second", [(False, True), (True, False)])
def test_a_resume_that_changes_merge_lora_leaves_one_format(tmp_path, first, second):
    """A finished run continued with --resume and merge_lora changed: the final folder holds the new format only
    (an adapter left next to a merged model would load on top of it again: the adapter applied twice; a merged
    model left next to an adapter would be pushed with it)."""
    from transformers import AutoModelForSequenceClassification

    base = save_toy_model(tmp_path / "base")
    out = tmp_path / "out"
    values = {**FAST, "save_strategy": "steps", "save_steps": 2, "model_name_or_path": str(base)}
    run(toy_recipe(out, merge_lora=first, **values))
    run(toy_recipe(out, merge_lora=second, **values), resume=True)
    names = {p.name for p in out.iterdir()}
    if second:  # a merged model, with its adapter in adapter/
        assert {"config.json", "model.safetensors", "adapter"} <= names
        assert not names & {"adapter_config.json", "adapter_model.safetensors"}
        model = AutoModelForSequenceClassification.from_pretrained(out)
        assert not any("lora" in name for name, _ in model.named_parameters())
    else:  # the adapter alone
        assert {"adapter_config.json", "adapter_model.safetensors"} <= names
        assert not names & {"config.json", "model.safetensors", "adapter"}


def test_the_card_of_an_adapter_alone_says_so_and_reports_the_lora_settings_used(tmp_path):
    """merge_lora: false: the card says the repository holds an adapter alone (no model, no modelling code) whose
    base loads first, is tagged peft, and reports the targets and modules trained in full that were used (the
    task's defaults), not the recipe's unset None."""
    base = save_toy_model(tmp_path / "base")
    out = tmp_path / "out"
    run(toy_recipe(out, model_name_or_path=str(base), merge_lora=False, model_card=True, **FAST))
    card = (out / "README.md").read_text()
    assert "| LoRA adapter | this repository holds a LoRA adapter alone" in card
    assert "- peft\n" in card.split("---")[1]  # a tag of the front matter
    assert "| lora_target_modules | None |" not in card
    assert '| lora_target_modules | ["query", "value"] |' in card
    assert '| lora_modules_to_save | ["classifier", "score"] |' in card and "| merge_lora | False |" in card
