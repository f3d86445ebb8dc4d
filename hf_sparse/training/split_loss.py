"""``<prefix>_loss`` over the whole evaluated split, whatever its batches: :class:`SplitLossMixin`."""

from __future__ import annotations

from typing import ClassVar


class SplitLossMixin:
    """Mixin for a ``transformers.Trainer`` subclass: ``<prefix>_loss`` over the whole evaluated split.

    The Trainer reports the mean of one loss per evaluation batch, so a split's loss depended on how it was
    batched (a smaller last batch, or a batch whose loss is 0 because it holds nothing to score, weighed as much
    as a full one) and, in a distributed run, counted the examples the last step repeats to even out the shards.
    Here every evaluation step adds each head's per-example loss terms (:meth:`split_loss_terms`: sums and
    counts), gathered with ``accelerator.gather_for_metrics``, which drops those repeats; the split's loss is
    the weighted sum over the heads (:meth:`split_loss_weights`) of each head's total sum over its total count:
    the same for any ``per_device_eval_batch_size`` and any number of processes. Only the terms the subclass
    returns count (the dialogue Trainer leaves out an MoE backbone's router losses, which depend on the batch).

    The terms are read from the batch as given to ``compute_loss``, before the Trainer pops ``labels`` (with a
    label smoother)."""

    #: gather the predictions too with ``gather_for_metrics`` (``Seq2SeqTrainer`` gathers them with
    #: ``accelerator.gather``, which keeps the repeats: 48 generated summaries for 40 documents)
    gather_predictions_for_metrics: ClassVar[bool] = False
    _split_loss: dict[str, list[float]] | None = None  # head -> [sum, count] while evaluation_loop runs

    def split_loss_terms(self, outputs, inputs) -> dict:
        """``{head: (sums, counts)}``, both ``(batch,)``: each example's loss terms of each head, summed, and how
        many; ``{}`` where the batch adds none. ``inputs`` still holds the labels."""
        raise NotImplementedError

    def split_loss_weights(self) -> dict[str, float]:
        """The weight of each head's loss (by the names of :meth:`split_loss_terms`); 1 for a head not named."""
        return {}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        given = dict(inputs)  # the Trainer pops the labels with a label smoother
        loss, outputs = super().compute_loss(
            model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
        )
        if self._split_loss is not None:
            for name, (sums, counts) in self.split_loss_terms(outputs, given).items():
                sums, counts = self.accelerator.gather_for_metrics((sums.detach().double(), counts.double()))
                total = self._split_loss.setdefault(name, [0.0, 0.0])
                total[0] += float(sums.sum())
                total[1] += float(counts.sum())
        return (loss, outputs) if return_outputs else loss

    def evaluation_loop(self, dataloader, description, prediction_loss_only=None, ignore_keys=None,
                        metric_key_prefix="eval"):  # fmt: skip
        if self.gather_predictions_for_metrics:
            self.gather_function = self.accelerator.gather_for_metrics
        self._split_loss = {}
        try:
            out = super().evaluation_loop(
                dataloader, description, prediction_loss_only=prediction_loss_only, ignore_keys=ignore_keys,
                metric_key_prefix=metric_key_prefix,
            )  # fmt: skip
        finally:
            totals, self._split_loss = self._split_loss, None
        key = f"{metric_key_prefix}_loss"
        if totals and key in out.metrics:  # the whole split's loss, not the mean of the batches'
            weights = self.split_loss_weights()
            out.metrics[key] = sum(
                weights.get(name, 1.0) * total / max(count, 1.0) for name, (total, count) in totals.items()
            )
        return out


__all__ = ["SplitLossMixin"]
