"""Block-table patterns: the shared "block set" rule and BigBird's seeded random blocks."""

from __future__ import annotations

import math

import torch

from .base import (
    Component,
    Pattern,
    Plan,
    check_lengths,
    check_positive_int,
    check_seed,
    pattern_block_layout,
    register_pattern,
)


class BlockSet(Pattern):
    """Query i attends key j iff ``j // block`` is listed in ``table[b, h, i // block]``.

    The bound form of block-table patterns (Random, BigBird's local part, TopKBlocks). ``table``:
    (Bt, Ht, num query blocks, K) key-block ids, -1 = none; optionally also ``j <= i``.
    """

    def __init__(self, block: int, table: torch.Tensor, causal: bool = False, source: Pattern | None = None):
        self.block = block
        self.table = table.long()
        self.causal = causal
        self.is_causal = causal
        self.geometry = (block,)
        self._source = source
        # (Bt, Ht, num query blocks, nkb + 1) bool: key block kb is listed for query block qb; the last
        # column (nkb = 1 + the largest listed block) answers every block past the table: False. The rule
        # (``_map_rule``, what the blocked kernel and FlexAttention evaluate) is one lookup per pair in it.
        # FlexAttention's masks cannot reduce (pytorch/pytorch#141627): comparing with the K listed blocks
        # and ``any()`` does not lower on CUDA and was silently miscompiled on CPU (torch 2.13, compiled
        # forward: BigBird(16) at 129 tokens 0.39 off the dense result, wherever the mask ran: partial
        # tiles, padding), for no speed (BigBird(64) at 16k, B=1 H=2 D=64, one thread: 0.110 s with the
        # comparisons, 0.108 s with the lookup).
        t = self.table
        nkb = int(t.max()) + 1 if t.numel() else 0
        self.block_map = torch.zeros(*t.shape[:-1], nkb + 1, dtype=torch.bool)
        self.block_map.scatter_(-1, torch.where(t < 0, torch.full_like(t, nkb), t), True)
        self.block_map[..., nkb] = False

    def _mask(self, b, h, i, j):
        return self._map_rule(b, h, i, j)

    def _map_rule(self, b, h, i, j):
        m = self.block_map.to(i.device) if isinstance(i, torch.Tensor) else self.block_map
        rows = m[b if m.shape[0] > 1 else 0, h if m.shape[1] > 1 else 0]  # (nqb, nkb + 1)
        qb = torch.div(i, self.block, rounding_mode="floor").clamp(max=rows.shape[0] - 1)
        kb = torch.div(j, self.block, rounding_mode="floor").clamp(min=0, max=rows.shape[1] - 1)
        out = rows[qb, kb]
        return out & (j <= i) if self.causal else out

    def varies(self):
        return self.table.shape[0] > 1, self.table.shape[1] > 1

    def _dense(self, i, j):
        Bt, Ht = self.table.shape[:2]
        if Bt == 1 and Ht == 1:
            return super()._dense(i, j)
        return torch.stack(
            [
                torch.stack([self._mask(b, h, i, j).expand(i.shape[0], j.shape[1]) for h in range(Ht)])
                for b in range(Bt)
            ]
        )

    def _layout(self, q_len, kv_len, block):
        layout = pattern_block_layout(self.table, self.block, q_len, kv_len, block, q_offset=kv_len - q_len)
        if self.causal:
            layout.full[:] = False
        return layout

    def _plan(self, q_len, kv_len, block):
        return Plan(
            [
                Component(
                    self._layout(q_len, kv_len, block),
                    self._map_rule,
                    q_offset=kv_len - q_len,
                    name="block_set",
                )
            ]
        )

    def _original_layout(self, q_len, kv_len, block):
        return self._layout(q_len, kv_len, block)

    def _params(self):
        return {"block": self.block}

    def to_dict(self):
        if self._source is None:
            raise TypeError(
                "a BlockSet built from a table is not serialisable; serialise the pattern it came from"
            )
        return super().to_dict()


def draw_blocks(gen, sizes: torch.Tensor, k: int) -> torch.Tensor:
    """For each row r, ``k`` of ``0 .. sizes[r] - 1`` drawn without replacement from ``gen`` (all of them if
    fewer): (rows, k) int64 in drawing order, -1 past a row's last.

    Row by row, ``torch.randperm(sizes[r], generator=gen)[:k]`` where ``sizes[r] > k`` (no draw otherwise): the
    draws a seed has always given (bound models attend as they were trained), and the only per-row work.
    """
    out = torch.arange(k).expand(sizes.numel(), k).clone()  # (rows, k)
    out[out >= sizes[:, None]] = -1
    if k:
        for r, m in enumerate(sizes.tolist()):
            if m > k:
                out[r] = torch.randperm(m, generator=gen)[:k]
    return out


def sorted_rows(blocks: torch.Tensor, none: int) -> torch.Tensor:
    """Each row of ``blocks`` (key blocks, ``none`` or -1 for no block) ascending with -1 after: a block table's
    rows. Rows of distinct blocks."""
    blocks = torch.where(blocks < 0, none, blocks).sort(-1).values
    return torch.where(blocks == none, -1, blocks)


@register_pattern("random")
class Random(Pattern):
    """BigBird random attention: every query block of ``block`` positions attends ``num_blocks``
    key blocks drawn without replacement (all of them if there are fewer), from a generator seeded
    with ``seed``: the same seed and length always give the same blocks. Query i attends key j
    iff ``j // block`` is among the blocks drawn for ``i // block``. Needs ``bind(n)``."""

    length_dependent = True

    def __init__(self, block: int = 64, num_blocks: int = 3, seed: int = 0):
        self.block = check_positive_int("block", block)
        self.num_blocks = check_positive_int("num_blocks", num_blocks, allow_zero=True)
        self.seed = check_seed(seed)
        self.geometry = (self.block,)

    def bind(self, q_len, kv_len=None, *, query=None, key=None, key_valid=None):
        q_len, kv_len = check_lengths(q_len, kv_len)
        nb = max(math.ceil(kv_len / self.block), 1)
        gen = torch.Generator().manual_seed(self.seed)
        drawn = draw_blocks(gen, torch.full((nb,), nb), self.num_blocks)  # (nb, num_blocks)
        table = torch.full((nb, max(self.num_blocks, 1)), -1, dtype=torch.long)  # (nb, K)
        table[:, : self.num_blocks] = sorted_rows(drawn, nb)
        return BlockSet(self.block, table[None, None], source=self)

    def _params(self):
        return {"block": self.block, "num_blocks": self.num_blocks, "seed": self.seed}


__all__ = ["BlockSet", "Random", "draw_blocks", "sorted_rows"]
