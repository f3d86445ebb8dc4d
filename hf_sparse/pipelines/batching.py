"""What the hf-sparse pipelines share to let transformers' ``Pipeline`` base batch their inputs.

``preprocess`` returns (or yields) one item per model row: ``(1, seq)`` tensors that the base's collate
(``pad_collate_fn``) pads on the right to the longest row of a batch (``input_ids`` with the tokenizer's
pad id, other keys with 0; on the right whatever the tokenizer's ``padding_side``, see
:class:`RightPaddedBatches`) and moves to the device; everything else (ints, strings, lists) it gathers into
lists and hands back per item after the forward. ``_forward`` then pads the batch further with
:func:`pad_to_multiple` (Longformer reads a multiple of its window) and runs the model; the base moves the
outputs back to the CPU and splits them per item.

Padding a row to the longest row of its batch leaves its outputs as they are alone (the models mask the
padding), except where an attention pattern depends on the sequence length: BigBird's random blocks are drawn
for the padded length, so a row would attend other keys in a batch than alone. For such a model
(:func:`length_dependent_attention`) the pipelines run one row per forward pass whatever ``batch_size`` says,
so outputs never depend on it.
"""

from __future__ import annotations

import torch

__all__ = ["RightPaddedBatches", "length_dependent_attention", "pad_to_multiple", "right_padded"]


def length_dependent_attention(model) -> bool:
    """Whether an attention layer of ``model`` has a pattern whose rule depends on the sequence length
    (:attr:`~hf_sparse.patterns.Pattern.length_dependent`: random blocks, drawn for the padded length of a
    batch): a layer that exposes it as ``pattern`` (SparseTransformer, LED's encoder with hf-sparse kernels)."""
    from ..patterns import Pattern

    for module in model.modules():
        pattern = getattr(module, "pattern", None)
        if isinstance(pattern, Pattern) and pattern.length_dependent:
            return True
    return False


class RightPaddedBatches:
    """Pipeline mixin: the base's collate pads every batch on the right, also for a tokenizer with
    ``padding_side="left"`` (the pipelines read global tokens, candidate and turn positions as offsets from
    the start of a row, and pad further on the right with :func:`pad_to_multiple`).

    ``pad_collate_fn`` reads ``tokenizer.padding_side`` once, when ``get_iterator`` builds the collate; the
    tokenizer's own setting is put back right after, so the user's tokenizer is left as it was.

    A model with :func:`length_dependent_attention` runs one row per forward pass (``batch_size`` 1), so that
    padding never changes its outputs."""

    def get_iterator(self, inputs, num_workers, batch_size, *args, **kwargs):
        if batch_size != 1 and length_dependent_attention(self.model):
            batch_size = 1  # random blocks drawn for a batch's padded length would differ from a row's own
        tokenizer = self.tokenizer
        side = tokenizer.padding_side
        tokenizer.padding_side = "right"
        try:
            return super().get_iterator(inputs, num_workers, batch_size, *args, **kwargs)
        finally:
            tokenizer.padding_side = side


def pad_to_multiple(batch: dict, multiple: int | None, pad_token_id: int) -> dict:
    """``batch``'s ``(B, seq)`` token tensors padded on the right to a multiple of ``multiple``:
    ``input_ids`` with ``pad_token_id``, ``attention_mask`` and ``global_attention_mask`` with 0; other
    entries unchanged."""
    length = batch["input_ids"].shape[1]
    extra = -length % multiple if multiple else 0
    if not extra:
        return dict(batch)
    out = dict(batch)
    for key, value in (("input_ids", pad_token_id), ("attention_mask", 0), ("global_attention_mask", 0)):
        if out.get(key) is not None:
            out[key] = torch.nn.functional.pad(out[key], (0, extra), value=value)  # (B, seq + extra)
    return out


def right_padded(positions: torch.Tensor, counts: torch.Tensor, fill: int = -1) -> torch.Tensor:
    """``positions`` ``(B, n)`` with the entries past each row's ``counts`` ``(B,)`` set to ``fill``: the
    base collate pads such rows with 0, a real position; the models read -1 as padding."""
    index = torch.arange(positions.shape[1], device=positions.device)  # (n,)
    return torch.where(index[None, :] < counts[:, None].to(positions.device), positions, fill)  # (B, n)
