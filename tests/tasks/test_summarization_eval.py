"""The summarization tasks' evaluations count every document once: ``eval_loss`` over the whole split (the same
for any evaluation batch size, and with a distributed run's repeated examples dropped), and one generated summary
per document when the last step of a distributed evaluation repeats examples to even out the shards."""

import pytest
import torch
from accelerate.utils import recursively_apply
from datasets import Dataset
from transformers import Seq2SeqTrainingArguments, TrainingArguments

from hf_sparse.tasks.summarization.data import AbstractiveCollator, ExtractiveCollator
from hf_sparse.tasks.summarization.modeling_summarization import sentence_loss_terms
from hf_sparse.tasks.summarization.task import (
    AbstractiveArguments,
    AbstractiveSummarizationTask,
    ExtractiveSummarizationTask,
)
from hf_sparse.training import atomic_trainer_class
from tests.models.summarization_tiny import tiny_extractive, tiny_led, tiny_tokenizer

# five chunks; the second and fourth hold no oracle sentence
CHUNK_LABELS = [[0, 1, 0], [0, 0], [1, 0], [0, 0, 0, 0], [0, 1]]


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _chunks(tokenizer) -> list[dict]:
    sent, words = (
        tokenizer.convert_tokens_to_ids("<sent>"),
        tokenizer.convert_tokens_to_ids(["the", "model", "reads"]),
    )
    rows = []
    for k, labels in enumerate(CHUNK_LABELS):
        ids = [tokenizer.bos_token_id]
        for s in range(len(labels)):
            ids += [sent] + words[: 1 + (k + s) % 3]
        rows.append({"input_ids": ids + [tokenizer.eos_token_id], "labels": [float(x) for x in labels]})
    return rows


def repeat_last_step(trainer, monkeypatch):
    """``trainer.accelerator.gather`` as in a two-process run whose last step repeats an example to even out the
    shards: the last step's gathered tensors carry one extra row (``gather_for_metrics`` drops it)."""
    gather = trainer.accelerator.gather

    def gather_with_repeats(data):
        data = gather(data)
        if trainer.accelerator.gradient_state.end_of_dataloader:
            return recursively_apply(lambda t: torch.cat([t, t[:1]]), data)
        return data

    monkeypatch.setattr(trainer.accelerator, "gather", gather_with_repeats)


@pytest.mark.parametrize("loss", ["listwise", "bce"])
def test_sentence_loss_terms_sum_to_the_batch_loss(tokenizer, loss):
    """The model's loss is the sum of the per-row terms over their count, for chunks and whole documents."""
    model = tiny_extractive(tokenizer, sentence_features=[], loss=loss, positive_weight=2.0)
    batch = ExtractiveCollator(tokenizer.pad_token_id, 8)(_chunks(tokenizer))
    for document_index in (None, torch.tensor([0, 0, 1, 2, 2])):
        with torch.no_grad():
            out = model(**batch, document_index=document_index)
        sums, counts = sentence_loss_terms(
            out.logits, batch["labels"], loss=loss, positive_weight=2.0, document_index=document_index
        )
        assert out.loss.item() == pytest.approx((sums.sum() / counts.sum()).item(), rel=1e-6)
        if loss == "listwise" and document_index is None:
            assert counts.tolist() == [1, 0, 1, 0, 1]  # one term per chunk with an oracle sentence


@pytest.mark.parametrize("loss", ["listwise", "bce"])
def test_extractive_eval_loss_is_independent_of_the_eval_batch_size(tokenizer, tmp_path, loss, monkeypatch):
    """eval_loss over the split's chunks (listwise: those with an oracle sentence; bce: their sentences) is the
    same for evaluation batches of 1, 2 and 4 chunks and with a distributed run's repeated last example; it was
    the mean of one loss per batch (2.233 / 3.521 / 4.157 at batch sizes 1 / 2 / 4 on the tiny recipe)."""
    model = tiny_extractive(tokenizer, sentence_features=[], loss=loss, positive_weight=3.0)
    rows = _chunks(tokenizer)
    collate = ExtractiveCollator(tokenizer.pad_token_id, 8)
    sums, counts = 0.0, 0.0
    with torch.no_grad():
        for row in rows:  # one chunk at a time
            batch = collate([row])
            s, c = sentence_loss_terms(model(**batch).logits, batch["labels"], loss=loss, positive_weight=3.0)
            sums, counts = sums + s.sum().item(), counts + c.sum().item()
    expected = sums / counts
    dataset = Dataset.from_list(rows)
    trainer_class = atomic_trainer_class(ExtractiveSummarizationTask.trainer_class)
    for batch_size, repeats in ((1, False), (2, False), (4, False), (2, True)):
        args = TrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=batch_size, use_cpu=True,
                                 report_to="none", disable_tqdm=True)  # fmt: skip
        trainer = trainer_class(model=model, args=args, data_collator=collate)
        if repeats:
            repeat_last_step(trainer, monkeypatch)
        loss_value = trainer.evaluate(dataset)["eval_loss"]
        assert loss_value == pytest.approx(expected, rel=1e-5), (batch_size, repeats)


def test_abstractive_evaluation_drops_the_repeats_of_a_distributed_last_step(
    tokenizer, tmp_path, monkeypatch
):
    """Two processes evaluating 5 documents in steps of 2 each: the last step repeats documents to even out the
    shards. Seq2SeqTrainer gathered them (accelerator.gather) and the task's metrics failed: "Mismatch in the
    number of predictions (48) and references (40)" under the shipped launcher. Every document now gives one
    summary, and eval_loss is the summary tokens' mean cross-entropy over the split."""
    model = tiny_led(tokenizer)
    docs = [" ".join(["the model reads long papers"] * (1 + k % 3)) for k in range(5)]
    summaries = [
        "the model reads",
        "long papers",
        "we propose a new method",
        "summaries of documents",
        "the model",
    ]
    rows = [{"input_ids": tokenizer(d)["input_ids"], "labels": tokenizer(s)["input_ids"]}
            for d, s in zip(docs, summaries)]  # fmt: skip
    collate = AbstractiveCollator(tokenizer.pad_token_id, 8)
    total, count = 0.0, 0
    with torch.no_grad():
        for row in rows:
            batch = collate([row])
            loss = model(**batch).loss.item()
            total, count = total + loss * len(row["labels"]), count + len(row["labels"])
    task, task_args = AbstractiveSummarizationTask(), AbstractiveArguments(data_dir=str(tmp_path))
    task._tokenizer = tokenizer
    task.references["validation"] = [[s] for s in summaries]
    trainer_class = atomic_trainer_class(AbstractiveSummarizationTask.trainer_class)
    results = []
    for batch_size in (2, 4):
        args = Seq2SeqTrainingArguments(
            output_dir=str(tmp_path), per_device_eval_batch_size=batch_size, use_cpu=True, report_to="none",
            predict_with_generate=True, generation_max_length=8, disable_tqdm=True,
        )  # fmt: skip
        trainer = trainer_class(model=model, args=args, data_collator=collate, processing_class=tokenizer,
                                compute_metrics=task.compute_metrics(task_args))  # fmt: skip
        repeat_last_step(trainer, monkeypatch)
        out = trainer.predict(Dataset.from_list(rows), metric_key_prefix="eval")
        assert len(out.predictions) == 5
        assert out.metrics["eval_loss"] == pytest.approx(total / count, rel=1e-5)
        results.append(out.metrics["eval_rouge1"])
    assert results[0] == results[1]


def test_label_smoothing_trains_and_evaluates_on_the_summary_positions(tokenizer, tmp_path):
    """With label_smoothing_factor the Trainer pops the labels before the forward, and LED then shifted the
    encoder's input_ids into its decoder: an IndexError past the decoder's positions at the first step. The
    decoder now reads the labels' shift, and eval_loss is the smoothed cross-entropy of the summary tokens."""
    model = tiny_led(tokenizer)
    rows = [
        {"input_ids": tokenizer(" ".join(["the model reads long papers"] * 16))["input_ids"],
         "labels": tokenizer("the model reads")["input_ids"]}
        for _ in range(4)
    ]  # fmt: skip
    assert len(rows[0]["input_ids"]) > model.config.max_decoder_position_embeddings
    collate = AbstractiveCollator(tokenizer.pad_token_id, 8)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, per_device_eval_batch_size=2, max_steps=1,
        label_smoothing_factor=0.1, use_cpu=True, report_to="none", disable_tqdm=True, save_strategy="no",
        predict_with_generate=True, generation_max_length=4,
    )  # fmt: skip
    trainer_class = atomic_trainer_class(AbstractiveSummarizationTask.trainer_class)
    trainer = trainer_class(
        model=model, args=args, data_collator=collate, train_dataset=Dataset.from_list(rows)
    )
    trainer.train()
    loss = trainer.evaluate(Dataset.from_list(rows))["eval_loss"]
    batch = collate(rows)
    with torch.no_grad():
        logits = model(**batch).logits
    expected = torch.nn.functional.cross_entropy(
        logits.transpose(1, 2), batch["labels"], ignore_index=-100, label_smoothing=0.1
    )
    assert loss == pytest.approx(expected.item(), rel=1e-4)
