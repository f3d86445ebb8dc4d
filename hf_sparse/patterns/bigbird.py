"""BigBird (Zaheer et al. 2020): window and random key blocks united with global blocks."""

from __future__ import annotations

import math

import torch

from .base import Pattern, check_lengths, check_positive_int, check_seed, register_pattern
from .block_table import BlockSet, draw_blocks, sorted_rows
from .compose import Union
from .global_tokens import Global


@register_pattern("bigbird")
class BigBird(Pattern):
    """BigBird (Zaheer et al. 2020, ITC form) over blocks of ``block`` positions.

    Query block q attends: key blocks ``|q - k| <= window_blocks // 2`` (sliding window);
    ``random_blocks`` seeded random key blocks outside the window and the global blocks; and the
    global blocks — the first ``ceil(global_blocks / 2)`` and last ``global_blocks // 2`` blocks —
    whose positions attend, and are attended by, everything. Needs ``bind(n)``.
    """

    length_dependent = True

    def __init__(
        self,
        block: int = 64,
        window_blocks: int = 3,
        random_blocks: int = 3,
        global_blocks: int = 2,
        seed: int = 0,
    ):
        self.block = check_positive_int("block", block)
        self.window_blocks = check_positive_int("window_blocks", window_blocks)
        if self.window_blocks % 2 == 0:
            raise ValueError(f"window_blocks must be odd (centred on the query block), got {window_blocks}")
        self.random_blocks = check_positive_int("random_blocks", random_blocks, allow_zero=True)
        self.global_blocks = check_positive_int("global_blocks", global_blocks, allow_zero=True)
        self.seed = check_seed(seed)
        self.geometry = (self.block,)

    def global_block_ids(self, nb: int) -> list[int]:
        first = list(range(min(math.ceil(self.global_blocks / 2), nb)))
        last = list(range(max(nb - self.global_blocks // 2, 0), nb))
        return sorted(set(first + last))

    def bind(self, q_len, kv_len=None, *, query=None, key=None, key_valid=None):
        q_len, kv_len = check_lengths(q_len, kv_len)
        nb = max(math.ceil(kv_len / self.block), 1)
        glob = self.global_block_ids(nb)
        w = self.window_blocks // 2
        gen = torch.Generator().manual_seed(self.seed)
        q = torch.arange(nb)
        lo, hi = (q - w).clamp(min=0)[:, None], (q + w).clamp(max=nb - 1)[:, None]
        window = lo + torch.arange(min(self.window_blocks, nb))  # (nb, W); nb = no block
        window = torch.where(window <= hi, window, nb)
        gb = torch.tensor(glob, dtype=torch.long)
        outside = torch.where((gb < lo) | (gb > hi), gb, nb)  # (nb, G) global blocks outside the window
        banned = torch.cat([window, outside], -1).sort(-1).values  # (nb, W + G)
        # random blocks: candidate c of a query block is the c-th key block neither in its window nor global
        pick = draw_blocks(gen, nb - (banned < nb).sum(-1), self.random_blocks)  # (nb, random_blocks)
        rand = pick.clone()
        for col in banned.unbind(-1):  # ascending: step past each banned block at or before it
            rand += (col[:, None] <= rand).long()
        rows = sorted_rows(torch.cat([window, torch.where(pick >= 0, rand, nb)], -1), nb)
        table = rows[None, None, :, : int((rows >= 0).sum(-1).max())].contiguous()
        local = BlockSet(self.block, table)
        positions = [p for g in glob for p in range(g * self.block, min((g + 1) * self.block, kv_len))]
        if not positions:  # no global blocks, or an empty sequence
            local._source = self
            return local
        out = Union(local, Global(indices=positions))
        out._source = self
        return out

    def _params(self):
        return {
            "block": self.block,
            "window_blocks": self.window_blocks,
            "random_blocks": self.random_blocks,
            "global_blocks": self.global_blocks,
            "seed": self.seed,
        }


__all__ = ["BigBird"]
