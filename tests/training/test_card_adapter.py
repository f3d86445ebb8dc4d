"""The model card of an adapter alone (``lora: true, merge_lora: false``): a peft card whose loading code loads the
base model, then the adapter on it, and names no local folder."""

import re
from pathlib import Path

import pytest
import torch
import yaml

from hf_sparse.training import run
from hf_sparse.training import runner as runner_module
from tests.training.helpers import toy_recipe
from tests.training.toy_task import save_toy_model

RECIPES = Path(__file__).resolve().parents[2] / "pipelines" / "motif"

#: the tiny motif recipe in seconds (tests/tasks/test_motif.py's FAST), no plots
MOTIF_FAST = ["num_train=48", "num_validation=16", "num_test=16", "hidden_size=32", "intermediate_size=64",
              "num_attention_heads=2", "num_train_epochs=1", "per_device_train_batch_size=16", "report_to=none",
              "disable_tqdm=true", "plots=false", "attention_plot=false", "save_strategy=no"]  # fmt: skip


def _front_matter(card: str) -> dict:
    return yaml.safe_load(card.split("---\n")[1])


def _how_to_use(card: str) -> str:
    return card.split("## How to use\n")[1].split("\n## ")[0]


def test_the_card_of_an_adapter_alone_loads_the_base_model_then_the_adapter_with_peft(tmp_path):
    """A motif adapter on a local base: ``library_name: peft``, no ``base_model`` (the base is a local folder, which
    the card does not name), a How to use that installs peft and claims no modelling code of the repository's own;
    its code, with the repository and the base replaced by the local folders, loads the adapter trained."""
    from peft import PeftModel, get_peft_model_state_dict
    from safetensors.torch import load_file

    base, out = tmp_path / "base", tmp_path / "adapter"
    run(RECIPES / "tiny.yaml", [*MOTIF_FAST, f"output_dir={base}", "model_card=false"])
    run(RECIPES / "tiny.yaml", [*MOTIF_FAST, f"output_dir={out}", "lora=true", "merge_lora=false",
                                f"model_name_or_path={base}"])  # fmt: skip
    assert not (out / "config.json").exists()
    card = (out / "README.md").read_text()
    meta = _front_matter(card)
    assert meta["library_name"] == "peft" and "base_model" not in meta
    assert {"peft", "lora"} <= set(meta["tags"])
    assert str(tmp_path) not in card
    how = _how_to_use(card)
    assert "pip install peft" in how and "hf_sparse_bundle.json" not in how and "custom_pipelines" not in how
    snippet = re.search(r"```python\n(.*?)```", how, re.S).group(1)
    assert 'PeftModel.from_pretrained(base_model, "hf-sparse-motif-tiny")' in snippet
    assert 'ForTokenClassification.from_pretrained("path/to/base-model", trust_remote_code=True)' in snippet

    code = snippet.replace('"path/to/base-model"', repr(str(base)))
    code = code.replace('"hf-sparse-motif-tiny"', repr(str(out)))  # the repository: the output folder
    scope = {}
    exec(code, scope)  # noqa: S102 - the card's own loading code
    model = scope["model"]
    assert isinstance(model, PeftModel)
    saved = load_file(out / "adapter_model.safetensors")
    loaded = get_peft_model_state_dict(model)
    assert saved.keys() == loaded.keys()
    assert all(torch.equal(saved[k], loaded[k].cpu()) for k in saved)


def test_the_card_of_an_adapter_alone_names_its_hub_base_model(tmp_path, monkeypatch):
    """An adapter whose base is a Hub id: the card's ``base_model`` and its loading code name it."""
    saved_adapter_config = runner_module._saved_adapter_config

    def on_a_hub_base(output_dir):  # trained offline on a local base: the adapter names a Hub id instead
        config, alone = saved_adapter_config(output_dir)
        return {**config, "base_model_name_or_path": "someone/toy-base"}, alone

    monkeypatch.setattr(runner_module, "_saved_adapter_config", on_a_hub_base)
    base = save_toy_model(tmp_path / "base")
    out = tmp_path / "out"
    run(toy_recipe(out, model_name_or_path=str(base), lora=True, merge_lora=False, model_card=True, max_steps=2,
                   save_strategy="no", eval_strategy="no", num_test=0, num_train=64, num_validation=32, plots=False))  # fmt: skip
    card = (out / "README.md").read_text()
    meta = _front_matter(card)
    assert meta["library_name"] == "peft" and meta["base_model"] == "someone/toy-base"
    how = _how_to_use(card)
    assert "[someone/toy-base](https://huggingface.co/someone/toy-base)" in how
    assert 'AutoModel.from_pretrained("someone/toy-base", trust_remote_code=True)' in how
    assert 'PeftModel.from_pretrained(base_model, "out")' in how
    assert str(tmp_path) not in card


@pytest.mark.parametrize("merge_lora", [True, False])
def test_only_the_card_of_an_adapter_alone_is_a_peft_card(tmp_path, merge_lora):
    """merge_lora: true saves a model (with the adapter in adapter/): its card stays a transformers card."""
    base = save_toy_model(tmp_path / "base")
    out = tmp_path / "out"
    run(toy_recipe(out, model_name_or_path=str(base), lora=True, merge_lora=merge_lora, model_card=True,
                   max_steps=2, save_strategy="no", eval_strategy="no", num_test=0, num_train=64, num_validation=32,
                   plots=False))  # fmt: skip
    card = (out / "README.md").read_text()
    assert _front_matter(card)["library_name"] == ("transformers" if merge_lora else "peft")
    assert ("PeftModel.from_pretrained" in _how_to_use(card)) != merge_lora
