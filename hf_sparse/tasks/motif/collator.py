"""Batching tokenized DNA examples: pad to a block multiple, build global attention masks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ...data.padding import padded_length
from ...utils.labels import IGNORE_INDEX
from ...utils.validation import check_positive_int


class MotifCollator:
    """Collate examples ``{"input_ids", ["labels"], ["sequence_labels"]}`` into padded tensors.

    - ``input_ids`` are right-padded with ``pad_token_id`` to the longest example rounded up to a
      multiple of ``pad_to_multiple_of`` (Longformer needs a multiple of its window; the sparse kernels
      work in blocks); ``attention_mask`` is 1 on real tokens.
    - ``labels`` (one id per token, ``-100`` where no loss is taken) are padded with ``-100``.
    - ``sequence_labels``: a list of floats per example (multi-hot motif presence) becomes a float
      tensor ``(batch, motifs)``; an int per example (a class id) a long tensor ``(batch,)``.
    - ``global_attention_mask`` is 1 on the first token (``global_first_token``) and on positions
      ``0, k, 2k, ...`` (``global_every=k``; None or 0: none), on real tokens only: the same mask
      :class:`~hf_sparse.models.longformer_tasks.LongformerForMotifDetection` builds by default.

    Every example must have the same keys; a label list whose length differs from its ``input_ids``
    is a ``ValueError`` naming the example.
    """

    def __init__(
        self,
        pad_token_id: int = 0,
        pad_to_multiple_of: int | None = 64,
        global_every: int | None = 100,
        global_first_token: bool = True,
    ):
        if isinstance(pad_token_id, bool) or not isinstance(pad_token_id, int) or pad_token_id < 0:
            raise ValueError(f"pad_token_id must be an int >= 0, got {pad_token_id!r}")
        self.pad_token_id = pad_token_id
        self.pad_to_multiple_of = check_positive_int(
            "pad_to_multiple_of", pad_to_multiple_of, allow_none=True
        )
        if global_every is not None and (
            isinstance(global_every, bool) or not isinstance(global_every, int) or global_every < 0
        ):
            raise ValueError(f"global_every must be an int >= 0 or None, got {global_every!r}")
        self.global_every = global_every or None
        self.global_first_token = bool(global_first_token)

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not isinstance(features, Sequence) or not features:
            raise ValueError("features must be a non-empty list of examples")
        keys = set(features[0])
        if "input_ids" not in keys:
            raise ValueError(f"examples need 'input_ids', got keys {sorted(keys)}")
        for i, f in enumerate(features):
            if set(f) != keys:
                raise ValueError(f"example {i} has keys {sorted(f)}, example 0 has {sorted(keys)}")
        lengths = [len(f["input_ids"]) for f in features]
        if min(lengths) == 0:
            raise ValueError(f"example {lengths.index(0)} has no tokens")
        n = padded_length(max(lengths), self.pad_to_multiple_of)
        batch = len(features)
        input_ids = torch.full((batch, n), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((batch, n), dtype=torch.long)
        labels = torch.full((batch, n), IGNORE_INDEX, dtype=torch.long) if "labels" in keys else None
        for i, (f, length) in enumerate(zip(features, lengths)):
            input_ids[i, :length] = torch.as_tensor(f["input_ids"], dtype=torch.long)
            attention_mask[i, :length] = 1
            if labels is not None:
                if len(f["labels"]) != length:
                    raise ValueError(
                        f"example {i}: {len(f['labels'])} labels for {length} input_ids (one label per token)"
                    )
                labels[i, :length] = torch.as_tensor(f["labels"], dtype=torch.long)
        glob = torch.zeros((batch, n), dtype=torch.long)  # (B, N)
        if self.global_first_token:
            glob[:, 0] = 1
        if self.global_every:
            glob[:, :: self.global_every] = 1
        out = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "global_attention_mask": glob * attention_mask,
        }
        if labels is not None:
            out["labels"] = labels
        if "sequence_labels" in keys:
            values = [f["sequence_labels"] for f in features]
            if all(isinstance(v, (int,)) and not isinstance(v, bool) for v in values):
                out["sequence_labels"] = torch.tensor(values, dtype=torch.long)  # (B,)
            else:
                try:
                    out["sequence_labels"] = torch.tensor(values, dtype=torch.float)  # (B, M)
                except (TypeError, ValueError) as e:
                    raise ValueError(
                        f"sequence_labels must be one int (class id) or one equal-length list of numbers "
                        f"(multi-hot) per example: {e}"
                    ) from None
        return out


__all__ = ["IGNORE_INDEX", "MotifCollator"]
