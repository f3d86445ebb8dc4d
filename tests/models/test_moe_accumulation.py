"""Gradient accumulation with a plain ``transformers.Trainer`` over the LMs with a per-batch penalty (MoE router
losses, the adaptive-span penalty): micro-batches are weighted by their labels, as in the whole batch, and each
penalty counts once per step, not once per micro-batch. Labels are uneven: the first row has few."""

import pytest
import torch
from datasets import Dataset
from transformers import Trainer, TrainerCallback, TrainingArguments

from hf_sparse.models.sparse_transformer import SparseTransformerForCausalLM, SparseTransformerForMaskedLM
from tests.models.tiny import tiny_config, tiny_decoder_config

IDS = torch.randint(2, 97, (4, 16), generator=torch.Generator().manual_seed(1))
LABELS = IDS.clone()
LABELS[0, :11] = -100  # micro-batch 1 (rows 0, 1) has fewer labels than micro-batch 2
CAUSAL = {"type": "causal"}
MOE = dict(num_experts=4, num_experts_per_tok=1)
SPAN = {"max_span": 8, "ramp": 2, "init": 3}

CASES = {  # name: (head, config); "exact": the whole batch's loss is the accumulated one
    "moe_no_penalty": (SparseTransformerForCausalLM, tiny_decoder_config(CAUSAL, **MOE, router_aux_loss_coef=0.0,
                                                                         router_z_loss_coef=0.0)),
    "span_no_penalty": (SparseTransformerForCausalLM, tiny_decoder_config(CAUSAL, adaptive_span={**SPAN, "loss_coef": 0.0})),
    # the span penalty does not depend on the data: the whole batch's exactly
    "span_penalty": (SparseTransformerForCausalLM, tiny_decoder_config(CAUSAL, adaptive_span={**SPAN, "loss_coef": 0.5})),
    "masked_lm_span_penalty": (
        SparseTransformerForMaskedLM,
        tiny_config(attention_pattern={"type": "sliding_window", "window": 30}, adaptive_span={**SPAN, "loss_coef": 0.5}),
    ),
    # router losses are statistics of each micro-batch's tokens: weighted by the micro-batch's labels
    "moe_penalty": (SparseTransformerForCausalLM, tiny_decoder_config(CAUSAL, **MOE, router_aux_loss_coef=0.5,
                                                                      router_z_loss_coef=0.1)),
}  # fmt: skip


class _Grads(TrainerCallback):
    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _trainer_step(make, batch, accumulation, tmp_path):
    torch.manual_seed(0)
    model, grads = make(), _Grads()
    args = TrainingArguments(
        str(tmp_path / f"b{batch}"), per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation,
        max_steps=1, learning_rate=0.0, max_grad_norm=0.0, logging_steps=1, report_to=[], use_cpu=True,
        disable_tqdm=True, save_strategy="no",
    )  # fmt: skip
    data = Dataset.from_dict({"input_ids": IDS.tolist(), "labels": LABELS.tolist()})
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[grads])
    trainer.train()
    return next(e["loss"] for e in trainer.state.log_history if "loss" in e), grads.grads


def _reference(make, head, micro_batches):
    """The whole batch's token loss (one mean over every label) plus each micro-batch's penalty weighted by its
    share of the labels, and its gradient."""
    torch.manual_seed(0)
    model = make().train()
    shift = 1 if head is SparseTransformerForCausalLM else 0
    count = lambda labels: (labels[:, shift:] != -100).sum()  # noqa: E731
    loss = 0.0
    for rows in torch.arange(4).chunk(micro_batches):
        out = model(IDS[rows], labels=LABELS[rows])
        logits = out.logits[:, :-1] if shift else out.logits
        ce = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), LABELS[rows][:, shift:].flatten(), ignore_index=-100, reduction="sum"
        )
        penalty = out.loss - ce / count(LABELS[rows])  # the micro-batch's penalties, as the head adds them
        loss = loss + ce / count(LABELS) + count(LABELS[rows]) / count(LABELS) * penalty
    loss.backward()
    return loss.item(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", CASES)
def test_accumulated_step_weights_micro_batches_by_their_labels(name, tmp_path):
    head, config = CASES[name]
    make = lambda: head(config)  # noqa: E731
    whole_loss, whole = _trainer_step(make, 4, 1, tmp_path)
    loss, grads = _trainer_step(make, 2, 2, tmp_path)
    ref_loss, ref = _reference(make, head, 2)
    for n in ref:
        torch.testing.assert_close(grads[n], ref[n], rtol=1e-4, atol=1e-6, msg=lambda m, n=n: f"{n}: {m}")
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    if name != "moe_penalty":  # the penalties do not depend on how the batch is split
        for n in whole:
            torch.testing.assert_close(
                grads[n], whole[n], rtol=1e-4, atol=1e-6, msg=lambda m, n=n: f"{n}: {m}"
            )
        assert loss == pytest.approx(whole_loss, rel=1e-5)
