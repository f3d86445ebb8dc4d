"""Collators of the dialogue examples: pad each batch (to a multiple of the attention window when
asked), tracking labels with ``IGNORE_INDEX``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...data.padding import pad_rows, padded_length
from ...utils.labels import IGNORE_INDEX
from ...utils.validation import check_positive_int

# ---------------------------------------------------------------- collators


def _check_pad_args(pad_token_id: Any, pad_to_multiple_of: Any) -> None:
    if isinstance(pad_token_id, bool) or not isinstance(pad_token_id, int):
        raise TypeError(
            f"pad_token_id must be an int, got {pad_token_id!r} (a tokenizer without a pad token: set "
            "tokenizer.pad_token first, e.g. to its eos token)"
        )
    check_positive_int("pad_to_multiple_of", pad_to_multiple_of, allow_none=True)


@dataclass
class DialogueTrackingCollator:
    """Pad tracking examples into tensors.

    Returns ``input_ids`` (pad ``pad_token_id``), ``attention_mask`` and ``global_attention_mask`` (pad 0), all
    ``(batch, seq)`` with ``seq`` rounded up to ``pad_to_multiple_of`` (Longformer needs a multiple of its
    ``attention_window``; set it to that); ``turn_positions`` ``(batch, max_turns)`` padded with -1; and, when
    the examples have them, ``intent_labels`` ``(batch, max_turns)`` and ``act_labels``
    ``(batch, max_turns, n_acts)`` padded with -100 (int64). Other fields are dropped.
    """

    pad_token_id: int
    pad_to_multiple_of: int | None = 64
    label_pad_id: int = IGNORE_INDEX

    def __post_init__(self) -> None:
        _check_pad_args(self.pad_token_id, self.pad_to_multiple_of)

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if len(features) == 0:
            raise ValueError("features is empty: cannot collate an empty batch")
        length = padded_length(max(len(f["input_ids"]) for f in features), self.pad_to_multiple_of)
        batch = {
            "input_ids": pad_rows([f["input_ids"] for f in features], length, self.pad_token_id),
            "attention_mask": pad_rows([f["attention_mask"] for f in features], length, 0),
            "global_attention_mask": pad_rows([f["global_attention_mask"] for f in features], length, 0),
        }
        n_turns = max(len(f["turn_positions"]) for f in features)
        batch["turn_positions"] = pad_rows([f["turn_positions"] for f in features], n_turns, -1)
        if all("intent_labels" in f for f in features):
            batch["intent_labels"] = pad_rows(
                [f["intent_labels"] for f in features], n_turns, self.label_pad_id
            )
        if all("act_labels" in f for f in features):
            batch["act_labels"] = self._pad_acts([f["act_labels"] for f in features], n_turns)
        return batch

    def _pad_acts(self, act_labels: Sequence[Sequence[Sequence[int]]], n_turns: int) -> torch.Tensor:
        n_acts = max((len(row) for rows in act_labels for row in rows), default=0)
        out = torch.full((len(act_labels), n_turns, n_acts), self.label_pad_id, dtype=torch.long)  # (B, T, A)
        for i, rows in enumerate(act_labels):
            if len(rows):
                out[i, : len(rows)] = torch.as_tensor([list(r) for r in rows], dtype=torch.long)
        return out


@dataclass
class ResponseSelectionCollator:
    """Pad response-selection examples (``encode_candidates`` fields) into ``(batch, n_candidates, seq)``.

    Returns ``input_ids`` (pad ``pad_token_id``), ``attention_mask`` and ``global_attention_mask`` (pad 0) of
    shape ``(batch, n_candidates, seq)``, ``seq`` rounded up to ``pad_to_multiple_of``; ``candidate_positions``
    ``(batch, n_candidates)``; ``labels`` ``(batch,)`` when every example has one. Every example must have the
    same number of candidates. Other fields are dropped.
    """

    pad_token_id: int
    pad_to_multiple_of: int | None = 64

    def __post_init__(self) -> None:
        _check_pad_args(self.pad_token_id, self.pad_to_multiple_of)

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if len(features) == 0:
            raise ValueError("features is empty: cannot collate an empty batch")
        n_candidates = len(features[0]["input_ids"])
        for i, f in enumerate(features):
            if len(f["input_ids"]) != n_candidates:
                raise ValueError(
                    f"features[{i}] has {len(f['input_ids'])} candidates, features[0] has {n_candidates}: "
                    "every example in a batch needs the same number of candidates"
                )
        length = padded_length(
            max(len(ids) for f in features for ids in f["input_ids"]), self.pad_to_multiple_of
        )
        batch = {}
        for key, value in (
            ("input_ids", self.pad_token_id),
            ("attention_mask", 0),
            ("global_attention_mask", 0),
        ):
            rows = [row for f in features for row in f[key]]
            batch[key] = pad_rows(rows, length, value).view(len(features), n_candidates, length)  # (B, C, L)
        batch["candidate_positions"] = torch.tensor(
            [list(f["candidate_positions"]) for f in features], dtype=torch.long
        )  # (B, C)
        if all("labels" in f for f in features):
            batch["labels"] = torch.tensor([int(f["labels"]) for f in features], dtype=torch.long)  # (B,)
        return batch


__all__ = ["DialogueTrackingCollator", "ResponseSelectionCollator"]
