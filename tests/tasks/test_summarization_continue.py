"""Continuing from a saved extractive summarizer: it keeps its own scorer settings unless the recipe sets them, and
it is the base an adapter saved alone can name (an encoder checkpoint is not)."""

import pytest

from hf_sparse.tasks.summarization.data import SENTENCE_FEATURES
from hf_sparse.tasks.summarization.task import ExtractiveArguments
from hf_sparse.training import get_task, load_recipe
from hf_sparse.training.runner import _adapter_base
from tests.tasks.test_summarization import copy_data

TINY = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, max_length=256,
            vocab_min_frequency=1)  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved extractive model with a 16-wide scorer on the position feature alone, bce loss and 16 tokens per
    sentence (not the defaults)."""
    folder = tmp_path_factory.mktemp("ext")
    data = copy_data(folder / "data", 4)
    task = get_task("extractive-summarization")()
    args = ExtractiveArguments(data_dir=data, head_hidden_size=16, loss="bce", max_sentence_tokens=16,
                               sentence_features=["position"], **TINY)  # fmt: skip
    tokenizer = task.build_tokenizer(args)
    task.build_model(args, tokenizer).save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    return data, str(folder / "model")


def _build(args):
    task = get_task("extractive-summarization")()
    return task.build_model(args, task.build_tokenizer(args))


def test_a_saved_extractive_model_keeps_its_scorer_settings_unless_the_recipe_sets_them(saved):
    """A recipe that does not restate head_hidden_size (or loss, ...) keeps the saved model's (the defaults would
    not fit its scorer's weights); one it sets (positive_weight) replaces the saved value."""
    data, path = saved
    args = ExtractiveArguments(data_dir=data, model_name_or_path=path, max_length=256)
    config = _build(args).config
    assert (config.head_hidden_size, config.loss, config.max_sentence_tokens) == (16, "bce", 16)
    args = ExtractiveArguments(data_dir=data, model_name_or_path=path, max_length=256, positive_weight=3.0)
    model = _build(args)
    assert (model.config.head_hidden_size, model.config.positive_weight) == (16, 3.0)


def test_a_recipe_scorer_width_that_does_not_fit_the_saved_model_is_an_error_naming_it(saved):
    data, path = saved
    args = ExtractiveArguments(data_dir=data, model_name_or_path=path, max_length=256, head_hidden_size=32)
    with pytest.raises(ValueError, match=r"^head_hidden_size=32 is a setting of a new scorer.*=16"):
        _build(args)


def _from_recipe(data, path, recipe_keys, overrides=()):
    recipe = {"task": "extractive-summarization", "data_dir": data, "model_name_or_path": path, "max_length": 256,
              **recipe_keys}  # fmt: skip
    return load_recipe(recipe, overrides)[1]


@pytest.mark.parametrize(
    "recipe_keys, overrides",
    [({"loss": "listwise"}, ()), ({}, ("loss=listwise",))],
    ids=["recipe", "override"],
)
def test_a_stated_default_scorer_setting_replaces_the_saved_one(saved, recipe_keys, overrides):
    """loss: listwise (the default) stated in the recipe or an override applies to a saved bce scorer; the settings
    it leaves out stay the saved ones."""
    data, path = saved
    config = _build(_from_recipe(data, path, recipe_keys, overrides)).config
    assert (config.loss, config.head_hidden_size, config.sentence_features) == ("listwise", 16, ["position"])


@pytest.mark.parametrize(
    "recipe_keys, overrides, key",
    [
        ({"head_hidden_size": 64}, (), "head_hidden_size"),
        ({}, ("head_hidden_size=64",), "head_hidden_size"),
        ({"sentence_features": list(SENTENCE_FEATURES)}, (), "sentence_features"),
    ],
    ids=["width-recipe", "width-override", "features-recipe"],
)
def test_a_stated_default_scorer_shape_that_does_not_fit_is_an_error(saved, recipe_keys, overrides, key):
    """head_hidden_size: 64 or all five sentence_features (the defaults, as the shipped tiny-extractive.yaml states
    them) against a saved 16-wide scorer on [position]: an error naming the key, not the saved scorer kept."""
    data, path = saved
    args = _from_recipe(data, path, recipe_keys, overrides)
    with pytest.raises(ValueError, match=rf"^{key}=.* is a setting of a new scorer"):
        _build(args)


def test_the_adapter_base_of_an_extractive_model(saved, tmp_path):
    """The saved extractive model loads as the model trained from it: an adapter saved alone names it. A task model
    built on an encoder checkpoint (its scorer is new) has no such base."""
    from transformers import LongformerConfig, LongformerModel

    data, path = saved
    args = ExtractiveArguments(data_dir=data, model_name_or_path=path, max_length=256)
    assert _adapter_base(_build(args), args) == (path, "")
    encoder = LongformerConfig(vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64, attention_window=8, max_position_embeddings=258, pad_token_id=1)  # fmt: skip
    LongformerModel(encoder).save_pretrained(tmp_path / "encoder")
    args = ExtractiveArguments(data_dir=data, model_name_or_path=str(tmp_path / "encoder"), **TINY)
    base, why = _adapter_base(_build(args), args)
    assert base is None and "is a 'longformer' model" in why
