"""Padding helpers the task collators share: round a length up to a block multiple (Longformer needs a
multiple of its window, the sparse kernels work in blocks) and right-pad ragged int rows."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def padded_length(length: int, multiple: int | None) -> int:
    """``length`` rounded up to a multiple of ``multiple`` (unchanged for None or 0)."""
    return length if not multiple else -(-length // multiple) * multiple


def pad_rows(rows: Sequence[Sequence[int]], length: int, value: int) -> torch.Tensor:
    """``(len(rows), length)`` int64 tensor, each row right-padded with ``value``."""
    out = torch.full((len(rows), length), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(list(row), dtype=torch.long)
    return out


__all__ = ["pad_rows", "padded_length"]
