"""Global tokens (Longformer, ETC, BigBird): rows and columns that are full."""

from __future__ import annotations

import math
import numbers

import torch

from .base import BlockLayout, Component, Pattern, Plan, check_positive_int, full_layout, register_pattern


def every_kth(positions: torch.Tensor, every: int) -> torch.Tensor:
    """Bool mask of the positions ``p`` with ``p % every == 0``: the global tokens of
    ``Global(every=...)`` (Longformer-style "a global token every k positions")."""
    return torch.remainder(positions, every) == 0


def _check_indices(indices) -> list[int]:
    """``Global``'s ``indices``: an int or a non-empty list (tuple, set, range, tensor, array) of ints >= 0,
    as a sorted list without repeats. TypeError for anything else (a float, a bool or a str is not a position:
    ``int()`` would truncate 1.9, and make "105" the positions 1, 0, 5)."""
    given = indices
    if isinstance(indices, torch.Tensor) or type(indices).__module__ == "numpy":  # also numpy ints
        indices = indices.tolist()  # ints stay ints, floats and bools are refused below
    if _is_int(indices):
        indices = [indices]
    if not isinstance(indices, (list, tuple, set, frozenset, range)):
        raise TypeError(
            f"indices must be an int or a list of ints (positions), got {type(indices).__name__} ({given!r})"
        )
    for i in indices:
        if not _is_int(i):
            raise TypeError(f"indices must be ints (positions), got {type(i).__name__} {i!r} in {given!r}")
    if not indices:
        raise ValueError(
            "indices must name at least one position, got an empty list (no token would be global; leave Global out)"
        )
    indices = sorted({int(i) for i in indices})
    if indices[0] < 0:
        raise ValueError(f"global indices must be >= 0, got {indices[0]} in {given!r}")
    return indices


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _ragged(rows_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, n) bool -> (B, 1, G) row indices of the True entries (padded with 0) and (B, G) validity."""
    count = rows_mask.sum(-1)
    g = max(int(count.max()) if rows_mask.numel() else 0, 1)
    order = torch.argsort((~rows_mask).to(torch.int8), dim=-1, stable=True)[:, :g]
    valid = torch.arange(g, device=rows_mask.device)[None, :] < count[:, None]
    return torch.where(valid, order, torch.zeros_like(order))[:, None, :], valid


def _thin_block(count: int, block: int) -> int:
    """Block size for ``count`` global rows or columns: the next power of two >= count, at least 16
    and at most ``block``."""
    return min(block, max(16, 1 << max(count - 1, 0).bit_length()))


@register_pattern("global")
class Global(Pattern):
    """Global tokens: query i attends key j iff i or j is a global position.

    ``Global(indices=[0, 5])``: these positions (ints >= 0, at least one; repeats count once; a sequence
    that holds none of them is a ValueError at call time, naming the index and the length, except inside a
    causal pattern, where they are a decoder's positions still to come); ``Global(every=100)``: positions
    ``p % 100 == 0``; ``Global()``: the positions marked in ``global_attention_mask`` at call time (Longformer
    convention: 1 = global). Global rows attend every key, every query attends global keys.
    """

    def __init__(self, indices=None, every: int | None = None):
        if indices is not None and every is not None:
            raise ValueError("give Global either indices=... or every=..., not both")
        self.every = None if every is None else check_positive_int("every", every)
        self.indices = None
        self._table = None  # (Bt, Lt) bool: position p of batch b is global
        self._in_causal = False  # bound as a part of a causal pattern before its first global position
        if indices is not None:
            indices = _check_indices(indices)
            self.indices = indices
            # explicit device: from_pretrained builds the model (and its pattern) under torch.device("meta")
            table = torch.zeros(1, max(indices) + 1, dtype=torch.bool, device="cpu")
            table[0, indices] = True
            self._table = table

    def _check_in_range(self, kv_len: int) -> None:
        """ValueError when no index lies in a sequence of ``kv_len`` tokens: the pattern would have no
        global token at all (indices past the end of a shorter input are fine while one is inside,
        e.g. a decoder's later positions). Not for a part of a causal pattern (see :meth:`bind`)."""
        if self.indices and self.indices[0] >= kv_len and not self._in_causal:
            raise ValueError(
                f"Global(indices={self.indices}): index {self.indices[0]} is out of range for a sequence of "
                f"{kv_len} tokens (positions 0..{kv_len - 1}), so no token would be global"
            )

    def bind(self, q_len, kv_len=None, *, query=None, key=None, causal=False, key_valid=None):
        """Checks the indices against the input (see :meth:`_check_in_range`). A part of a causal pattern
        (``causal=True``, e.g. ``(SlidingWindow(3) | Global(indices=[4])) & Causal()``) takes any length: a
        decoder's prompt, or its left-padded rows, may end before the first global position, which is
        then still to come; bound there, it is a copy that makes no token global yet. ``key_valid`` (padding)
        is ignored: global positions do not depend on it."""
        kv_len = q_len if kv_len is None else kv_len
        if not causal or not self.indices or self.indices[0] < kv_len:
            self._check_in_range(kv_len)
            return self
        return self if self._in_causal else self.derived("in a causal pattern", self._future)

    def _future(self) -> Global:
        out = Global(indices=self.indices)
        out._table, out._in_causal, out._source = self._table, True, self  # the table where self has it
        return out

    @property
    def runtime(self) -> bool:
        return self.indices is None and self.every is None and self._table is None

    def check_combinable(self, op):
        if op == "&" and self.runtime:
            raise ValueError(
                "Global() takes its tokens from global_attention_mask at call time and can only be combined "
                "with '|'; use Global(indices=...) or Global(every=...) inside '&'"
            )

    @classmethod
    def from_mask(cls, global_attention_mask: torch.Tensor) -> Global:
        """Per-batch global positions from a (batch, seq) mask (nonzero = global): call-time tokens, which a spec
        cannot describe (``to_dict`` raises; ``Global(indices=...)`` is the serialisable form)."""
        g = cls()
        g._table = global_attention_mask.bool()
        return g

    @property
    def _from_mask(self) -> bool:
        return self.indices is None and self.every is None and self._table is not None

    def to_dict(self):
        if self._from_mask and getattr(self, "_source", None) is None:
            raise TypeError(
                f"a Global.from_mask holds call-time global tokens (a {tuple(self._table.shape)} mask) that no spec "
                "describes (saved, it would be Global(): the tokens of global_attention_mask); use "
                "Global(indices=[...]) for fixed positions"
            )
        return super().to_dict()

    def _spec(self):
        return None if self._from_mask else super()._spec()  # compared by its table

    def __repr__(self):
        if self._from_mask and getattr(self, "_source", None) is None:
            return f"Global.from_mask(<{tuple(self._table.shape)} mask, {int(self._table.sum())} global>)"
        return super().__repr__()

    def is_global(self, b, p):
        if self.every is not None:
            return every_kth(p, self.every)
        if self._table is None:
            return torch.zeros_like(p, dtype=torch.bool)
        t = self._table.to(p.device) if isinstance(p, torch.Tensor) else self._table
        if t.shape[0] == 1:
            row = t[0]
        else:
            row = t[b] if isinstance(b, torch.Tensor) else t[min(b, t.shape[0] - 1)]
        last = row.shape[-1] - 1
        return row[p.clamp(min=0, max=last)] & (p <= last)

    def _mask(self, b, h, i, j):
        return self.is_global(b, i) | self.is_global(b, j)

    def cache_keep(self, kv_pos, next_pos):
        """The global keys stay visible to every later query, and every key while a later query can be global
        (a global row attends every key): a position ``>= next_pos`` among ``indices``, ``every=`` or
        call-time (or per-batch) tokens."""
        t = self._table
        if self.every is not None or t is None or t.shape[0] > 1 or bool(t[0, max(next_pos, 0) :].any()):
            return torch.ones_like(kv_pos, dtype=torch.bool)
        return self.is_global(0, kv_pos)

    def varies(self):
        return self._table is not None and self._table.shape[0] > 1, False

    def _dense(self, i, j):
        self._check_in_range(j.shape[-1])
        if self._table is not None and self._table.shape[0] > 1:
            B = self._table.shape[0]
            return torch.stack([self._mask(b, 0, i, j).expand(i.shape[0], j.shape[1]) for b in range(B)])[
                :, None
            ]
        return super()._dense(i, j)

    def _rows(self, n: int, offset: int, device=None) -> torch.Tensor:
        """(Bt, n) bool: which rows (positions offset + row) are global."""
        pos = torch.arange(offset, offset + n, device=device)
        if self.every is not None:
            return every_kth(pos, self.every)[None]
        if self._table is None:
            return torch.zeros(1, n, dtype=torch.bool, device=device)
        return torch.stack([self.is_global(b, pos) for b in range(self._table.shape[0])])

    def _plan(self, q_len, kv_len, block):
        self._check_in_range(kv_len)
        if self.runtime:
            return Plan([])
        off = kv_len - q_len
        q_global = self._rows(q_len, off)
        qrows, qvalid = _ragged(q_global)
        krows, kvalid = _ragged(self._rows(kv_len, 0))
        is_g = self.is_global
        # The G global rows (columns) are one thin block: with the pattern's block a single global
        # token would pad out to block x n tiles of wasted work.
        rows = Component(
            full_layout(qrows.shape[-1], kv_len, _thin_block(qrows.shape[-1], block)),
            lambda b, h, i, j: is_g(b, i) & (j >= 0),
            q_index=qrows,
            q_valid=qvalid,
            q_offset=off,
            name="global_rows",
        )
        # columns: full in the query blocks that hold no global row (of any batch element)
        cols_layout = full_layout(q_len, krows.shape[-1], _thin_block(krows.shape[-1], block), full=False)
        c = cols_layout.block
        free = ~torch.nn.functional.pad(
            q_global.any(0), (0, cols_layout.num_q_blocks * c - q_len), value=True
        )
        cols_layout.full[:] = free.view(-1, c).all(-1)[:, None]
        cols = Component(
            cols_layout,
            lambda b, h, i, j: ~is_g(b, i) & is_g(b, j),
            k_index=krows,
            k_valid=kvalid,
            q_offset=off,
            name="global_columns",
        )
        return Plan([c for c, v in ((rows, qvalid), (cols, kvalid)) if bool(v.any())])

    def _original_layout(self, q_len, kv_len, block):
        c = block
        nqb, nkb = math.ceil(q_len / c), math.ceil(kv_len / c)
        qg, kg = self._rows(q_len, kv_len - q_len), self._rows(kv_len, 0)

        def blocks(g, num, any_):  # (Bt, len) -> (num,): a block holds a global position in some batch
            # element (any_), or only global positions in every one (a block past the end is not all global)
            g = torch.nn.functional.pad(g, (0, num * c - g.shape[-1]), value=False).view(-1, num, c)
            return g.any(-1).any(0) if any_ else g.all(-1).all(0)

        keep = blocks(qg, nqb, True)[:, None] | blocks(kg, nkb, True)[None, :]
        # full: every query of the block is global, or every key is (FlexAttention skips the mask there)
        full = blocks(qg, nqb, False)[:, None] | blocks(kg, nkb, False)[None, :]
        order = torch.argsort((~keep).to(torch.int8), dim=-1, stable=True)
        idx = torch.where(keep, torch.arange(nkb)[None].expand(nqb, -1), -1).gather(-1, order)
        width = max(int(keep.sum(-1).max()), 1)
        idx, full = idx[:, :width], (full & keep).gather(-1, order)[:, :width]
        return BlockLayout(c, nqb, nkb, idx[None, None], full[None, None])

    def _params(self):
        if self.indices is not None:
            return {"indices": list(self.indices)}
        if self.every is not None:
            return {"every": self.every}
        return {}


__all__ = ["Global", "every_kth"]
