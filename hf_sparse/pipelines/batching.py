"""What the hf-sparse pipelines share to let transformers' ``Pipeline`` base batch their inputs.

``preprocess`` returns (or yields) one item per model row: ``(1, seq)`` tensors that the base's collate
(``pad_collate_fn``) pads on the right to the longest row of a batch (``input_ids`` with the tokenizer's
pad id, other keys with 0; on the right whatever the tokenizer's ``padding_side``, see
:class:`RightPaddedBatches`) and moves to the device; everything else (ints, strings, lists) it gathers into
lists and hands back per item after the forward. ``_forward`` then pads the batch further with
:func:`pad_to_multiple` (Longformer reads a multiple of its window) and runs the model; the base moves the
outputs back to the CPU and splits them per item.
"""

from __future__ import annotations

import torch

__all__ = ["RightPaddedBatches", "pad_to_multiple", "right_padded"]


class RightPaddedBatches:
    """Pipeline mixin: the base's collate pads every batch on the right, also for a tokenizer with
    ``padding_side="left"`` (the pipelines read global tokens, candidate and turn positions as offsets from
    the start of a row, and pad further on the right with :func:`pad_to_multiple`).

    ``pad_collate_fn`` reads ``tokenizer.padding_side`` once, when ``get_iterator`` builds the collate; the
    tokenizer's own setting is put back right after, so the user's tokenizer is left as it was."""

    def get_iterator(self, *args, **kwargs):
        tokenizer = self.tokenizer
        side = tokenizer.padding_side
        tokenizer.padding_side = "right"
        try:
            return super().get_iterator(*args, **kwargs)
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
