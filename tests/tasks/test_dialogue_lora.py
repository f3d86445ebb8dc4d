"""LoRA on the dialogue tasks: what trains in full next to the adapters (heads, a new vocabulary's embeddings, rows
added for the formatter's tokens), and which saved model an adapter can name as its base."""

import pytest

from hf_sparse.tasks.dialogue.data import train_dialogue_tokenizer
from hf_sparse.tasks.dialogue.task import DialogueSelectionTask, DialogueTrackingTask, SelectionArguments
from hf_sparse.training.runner import _adapter_base
from tests.models.dialogue_tiny import synthetic_dialogues, write_sgd

TINY = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, attention_window=16,
            max_length=64, vocab_min_frequency=1)  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    dialogues = synthetic_dialogues(8, seed=1)
    return write_sgd(tmp_path_factory.mktemp("sgd"), {"train": dialogues, "validation": dialogues[:2]})


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """A tiny Longformer encoder checkpoint (300 rows) and a word tokenizer without the formatter's tokens."""
    from transformers import LongformerConfig, LongformerModel

    folder = tmp_path_factory.mktemp("encoder")
    tokenizer = train_dialogue_tokenizer(
        [t for d in synthetic_dialogues(20, seed=4) for t in d["turns"]], min_frequency=1
    )
    tokenizer.save_pretrained(folder / "tokenizer")
    config = LongformerConfig(vocab_size=300, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                              intermediate_size=32, attention_window=16, max_position_embeddings=130,
                              pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    LongformerModel(config, add_pooling_layer=False).save_pretrained(folder / "model")
    return folder


def _built(task, args):
    tokenizer = task.build_tokenizer(args)
    return task.build_model(args, tokenizer), tokenizer


def test_a_vocabulary_built_from_the_data_trains_in_full_under_lora(data, encoder):
    """On an encoder checkpoint without tokenizer_name the task builds a word vocabulary from the data and cuts the
    checkpoint's table to it: every row now means another word, so the embeddings train in full next to the heads
    (LoRA would freeze them at rows of another vocabulary)."""
    task = DialogueTrackingTask()
    args = DialogueTrackingTask.Arguments(data_dir=data, model_name_or_path=str(encoder / "model"), **TINY)
    model, tokenizer = _built(task, args)
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer) != 300
    to_save = task.lora_modules_to_save(model)
    assert to_save == ["act_classifier", "intent_classifier", "backbone.embeddings.word_embeddings"]
    assert task.lora_trainable_token_indices(model) is None


def test_rows_added_to_a_checkpoints_table_train_alone_under_lora(data, encoder):
    """With a pretrained tokenizer (tokenizer_name), only the rows of the tokens the formatter adds are new: they
    train (peft's trainable tokens), the checkpoint's rows of the tokenizer's own tokens stay frozen."""
    task = DialogueTrackingTask()
    args = DialogueTrackingTask.Arguments(data_dir=data, model_name_or_path=str(encoder / "model"),
                                          tokenizer_name=str(encoder / "tokenizer"), **TINY)  # fmt: skip
    model, tokenizer = _built(task, args)
    from transformers import AutoTokenizer

    before = len(AutoTokenizer.from_pretrained(encoder / "tokenizer"))
    assert task.lora_modules_to_save(model) == ["act_classifier", "intent_classifier"]
    # the formatter's [TURN] ...: ids past the tokenizer's own, rows of the checkpoint's table
    assert len(tokenizer) > before
    assert task.lora_trainable_token_indices(model) == list(range(before, len(tokenizer)))


def test_a_selection_model_built_on_a_tracking_model_has_no_base_an_adapter_can_name(data, tmp_path):
    """Response selection continued from a saved tracking model: the selection head is new and trains in full,
    and the tracking model (without it) is no base for an adapter saved alone (merge_lora: false is refused)."""
    tracking = DialogueTrackingTask()
    args = DialogueTrackingTask.Arguments(data_dir=data, backbone="sparse_transformer", **TINY)
    model, tokenizer = _built(tracking, args)
    model.save_pretrained(tmp_path / "tracking")
    tokenizer.save_pretrained(tmp_path / "tracking")
    path = str(tmp_path / "tracking")
    assert _adapter_base(model, SelectionArguments(data_dir=data, model_name_or_path=path)) == (path, "")
    selection = DialogueSelectionTask()
    args = SelectionArguments(data_dir=data, model_name_or_path=path, max_length=64)
    model, _ = _built(selection, args)
    assert selection.lora_modules_to_save(model) == ["selection_scorer"]
    assert selection.lora_trainable_token_indices(model) is None
    base, why = _adapter_base(model, args)
    assert base is None and "selection_head" in why
