"""A plain ``transformers.Trainer``'s loss over the project's models.

Gradient accumulation: one step of 4 accumulated micro-batches of 2 gives the loss and gradient norm of one batch
of 8.

transformers takes a ``forward(**kwargs)`` as a loss that divides by the ``num_items_in_batch`` it hands over, and
then does not divide by the accumulation steps: for a head that averages its own loss, loss and gradients were
``gradient_accumulation_steps`` times too large (BERT's and LED's own heads in transformers 5.24 are). The recipes
set this on their Trainer; these models say it themselves (``accepts_loss_kwargs``).

Label smoothing: the Trainer shifts the labels of the models it knows as causal LMs by class name, which the
Auto-class registration does not give; hf_sparse adds it.
"""

import pytest
import torch
from datasets import Dataset
from transformers import Trainer, TrainingArguments

from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import (
    SparseTransformerForCausalLM,
    SparseTransformerForMaskedLM,
    SparseTransformerForSequenceClassification,
)
from tests.models.motif_tiny import motif_model
from tests.models.summarization_tiny import tiny_led, tiny_tokenizer
from tests.models.tiny import tiny_config, tiny_decoder_config

IDS = torch.randint(5, 10, (8, 32), generator=torch.Generator().manual_seed(0))
MASKED = torch.where(torch.arange(32) % 3 == 0, IDS, -100)  # a third of the tokens carry a label
WINDOW = P.SlidingWindow(window=8, causal=True)

CASES = {  # name: (model factory, labels)
    "masked_lm": (lambda: SparseTransformerForMaskedLM(tiny_config()), MASKED),
    "causal_lm": (lambda: SparseTransformerForCausalLM(tiny_decoder_config(WINDOW)), IDS),
    "causal_lm_moe": (
        lambda: SparseTransformerForCausalLM(
            tiny_decoder_config(WINDOW, num_experts=4, num_experts_per_tok=2)
        ),
        IDS,
    ),
    "masked_lm_adaptive_span": (
        lambda: SparseTransformerForMaskedLM(
            tiny_config(
                attention_pattern=P.SlidingWindow(window=30), adaptive_span={"max_span": 12, "ramp": 4}
            )
        ),
        MASKED,
    ),
    "sequence_classification": (
        lambda: SparseTransformerForSequenceClassification(tiny_config()),
        torch.tensor([0, 1, 2, 0, 1, 2, 0, 1]),
    ),
    "motif_longformer": (
        lambda: motif_model("longformer"),
        MASKED.clamp(max=4).masked_fill(MASKED < 0, -100),
    ),
    "led_summarization": (lambda: tiny_led(tiny_tokenizer()), IDS[:, :6]),
}


def _first_step(model, labels, batch, accumulation, tmp_path, **training):
    data = Dataset.from_dict({"input_ids": IDS.tolist(), "labels": labels.tolist()})
    args = TrainingArguments(
        str(tmp_path / f"b{batch}"), per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation,
        max_steps=1, learning_rate=0.0, logging_steps=1, report_to=[], use_cpu=True, disable_tqdm=True,
        save_strategy="no", **training,
    )  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    logged = next(entry for entry in trainer.state.log_history if "loss" in entry)
    return float(logged["loss"]), float(logged["grad_norm"])


@pytest.mark.parametrize("name", CASES)
def test_accumulated_micro_batches_give_the_full_batch_step(name, tmp_path):
    make, labels = CASES[name]
    torch.manual_seed(0)
    whole = _first_step(make(), labels, 8, 1, tmp_path)
    torch.manual_seed(0)
    accumulated = _first_step(make(), labels, 2, 4, tmp_path)
    # MoE: each micro-batch's router balances its own tokens, so its auxiliary loss differs slightly
    torch.testing.assert_close(accumulated, whole, rtol=1e-3 if "moe" in name else 1e-5, atol=0)


def test_label_smoothing_scores_a_causal_lm_against_the_next_token(tmp_path):
    from transformers.trainer_pt_utils import LabelSmoother

    torch.manual_seed(0)
    model = SparseTransformerForCausalLM(tiny_decoder_config(WINDOW))
    loss, _ = _first_step(model, IDS, 8, 1, tmp_path, label_smoothing_factor=0.1)
    with torch.no_grad():
        logits = model.train()(IDS).logits
    smoothed = LabelSmoother(epsilon=0.1)
    assert loss == pytest.approx(smoothed([logits], IDS, shift_labels=True).item(), rel=1e-5)
    assert loss != pytest.approx(smoothed([logits], IDS).item(), rel=1e-5)  # the unshifted targets
