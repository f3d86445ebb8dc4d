"""The dialogue recipes' Trainer reports and trains on the loss of the whole batch: ``eval_loss`` does not depend on
the evaluation batch size, and accumulated micro-batches give the step of one larger batch (the heads average
over labelled turns, and dialogues have different numbers of them)."""

import pytest
import torch
from datasets import Dataset
from transformers import TrainingArguments

from hf_sparse.tasks.dialogue.collator import DialogueTrackingCollator, ResponseSelectionCollator
from hf_sparse.tasks.dialogue.configuration_dialogue import LongformerDialogueConfig
from hf_sparse.tasks.dialogue.data import DialogueLabels, build_selection_examples, build_tracking_examples
from hf_sparse.tasks.dialogue.modeling_dialogue import LongformerForDialogue
from hf_sparse.training import get_task
from tests.models.dialogue_tiny import ACTS, synthetic_dialogues, tiny_backbone, tokenizer_and_formatter

INTENTS = ("NONE", "FindRestaurants", "SearchFlights")
TRACKING = {"selection_head": False, "act_labels": ACTS, "intent_labels": list(INTENTS)}


@pytest.fixture(scope="module")
def tok_fmt():
    return tokenizer_and_formatter(max_length=64)


def _model(tokenizer, formatter, heads):
    """A tiny model without dropout (micro-batches then see the same network as one batch)."""
    backbone = {**tiny_backbone(tokenizer, "sparse_transformer", 64), "num_hidden_layers": 1,
                "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}  # fmt: skip
    torch.manual_seed(0)
    config = LongformerDialogueConfig(
        backbone=backbone, formatter=formatter.to_dict(), classifier_dropout=0.0, **heads
    )
    model = LongformerForDialogue(config)
    with torch.no_grad():  # examples' and turns' losses far apart, so how they are weighted shows
        if model.intent_classifier is not None:  # leaning to NONE
            model.intent_classifier.out_proj.bias[0] = 4.0
        if model.selection_scorer is not None:  # confident scores
            model.selection_scorer.out_proj.weight.mul_(1e4)
    return model


def _tracking_examples(formatter):
    """Whole dialogues of 6, 2, 5 and 4 turns: every way of pairing them gives micro-batches with different
    numbers of labelled turns."""
    dialogues = synthetic_dialogues(4)
    cut = [{k: (v[:n] if isinstance(v, list) and len(v) == 6 else v) for k, v in d.items()}
           for d, n in zip(dialogues, (6, 2, 5, 4))]  # fmt: skip
    labels = DialogueLabels(tuple(ACTS), INTENTS, frozenset(INTENTS))
    return build_tracking_examples(cut, formatter, labels)


def _setup(task_name, tokenizer, formatter):
    if task_name == "dialogue-state-tracking":
        examples = _tracking_examples(formatter) + _tracking_examples(formatter)[:1]
        return examples, TRACKING, DialogueTrackingCollator(tokenizer.pad_token_id, 16)
    examples = build_selection_examples(synthetic_dialogues(4), n_negatives=3, formatter=formatter)[:5]
    return examples, {"selection_head": True}, ResponseSelectionCollator(tokenizer.pad_token_id, 16)


def _trainer(task_name, model, collator, tmp_path, **training):
    args = TrainingArguments(
        str(tmp_path), report_to=[], use_cpu=True, disable_tqdm=True, save_strategy="no", **training
    )
    return get_task(task_name).trainer_class(model=model, args=args, data_collator=collator)


@pytest.mark.parametrize("task_name", ["dialogue-state-tracking", "dialogue-response-selection"])
def test_eval_loss_is_the_loss_of_the_whole_split_whatever_the_batch_size(task_name, tok_fmt, tmp_path):
    tokenizer, formatter = tok_fmt
    examples, heads, collator = _setup(task_name, tokenizer, formatter)
    model = _model(tokenizer, formatter, heads).eval()
    with torch.no_grad():  # one batch of every example: the model's own loss is the split's
        expected = float(model(**collator(examples)).loss)
    data = Dataset.from_list(examples)
    for batch_size in (1, 2, 3):  # 5 examples: the last batch is short
        trainer = _trainer(task_name, model, collator, tmp_path, per_device_eval_batch_size=batch_size)
        assert trainer.evaluate(data)["eval_loss"] == pytest.approx(expected, rel=1e-5), batch_size


def _first_step(tokenizer, formatter, examples, batch, accumulation, tmp_path):
    trainer = _trainer(
        "dialogue-state-tracking", _model(tokenizer, formatter, TRACKING), DialogueTrackingCollator(tokenizer.pad_token_id, 16),
        tmp_path / f"b{batch}", per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation,
        max_steps=1, learning_rate=0.0, logging_steps=1, train_sampling_strategy="sequential",
    )  # fmt: skip
    trainer.train_dataset = Dataset.from_list(examples)
    trainer.train()
    logged = next(entry for entry in trainer.state.log_history if "loss" in entry)
    return logged["loss"], logged["grad_norm"]


def test_accumulated_micro_batches_give_the_step_of_the_whole_batch(tok_fmt, tmp_path):
    tokenizer, formatter = tok_fmt
    examples = _tracking_examples(formatter)
    whole = _first_step(tokenizer, formatter, examples, 4, 1, tmp_path)
    for batch, accumulation in ((2, 2), (1, 4)):
        step = _first_step(tokenizer, formatter, examples, batch, accumulation, tmp_path)
        assert step == pytest.approx(whole, rel=1e-4), (batch, accumulation)


def test_the_model_divides_each_head_by_the_items_it_is_given(tok_fmt):
    """num_items_in_batch: a mapping by label name (the recipes' Trainer), a number for selection labels (what
    transformers' Trainer counts), None for the batch's own items."""
    tokenizer, formatter = tok_fmt
    model = _model(tokenizer, formatter, TRACKING).eval()
    batch = DialogueTrackingCollator(tokenizer.pad_token_id, 16)(_tracking_examples(formatter))
    acts = int((batch["act_labels"] != -100).any(-1).sum())
    intents = int((batch["intent_labels"] != -100).sum())
    with torch.no_grad():
        mean = model(**batch).loss
        halved = model(
            **batch, num_items_in_batch={"act_labels": 2 * acts, "intent_labels": 2 * intents}
        ).loss
    torch.testing.assert_close(halved, mean / 2)
    assert model.accepts_loss_kwargs
