"""Content-based patterns: the allowed pairs are chosen from the queries and keys themselves.

Both are "bind, then exact": ``bind(n, query=q, key=k)`` computes the selection (hash buckets or
top-k blocks) once, and every kernel then runs exact attention within that selection.
"""

from __future__ import annotations

import math

import torch

from .base import (
    BlockLayout,
    Component,
    Pattern,
    Plan,
    check_bool,
    check_lengths,
    check_positive_int,
    check_seed,
    register_pattern,
    segment_layout,
)
from .block_table import BlockSet


def _check_qk(pattern, query, key):
    if query is None or key is None:
        raise ValueError(
            f"{type(pattern).__name__} is content-based: bind(n, query=q, key=k) needs both tensors"
        )
    if query.dim() != 4 or key.dim() != 4:
        raise ValueError(
            f"query and key must be (batch, heads, seq, head_dim), got {tuple(query.shape)} and {tuple(key.shape)}"
        )


def _check_key_valid(pattern, key_valid, key):
    """``key_valid`` (see :meth:`Pattern.bind`) checked against ``key`` (batch, heads, kv_len, head_dim), on its
    device; None stays None."""
    if key_valid is None:
        return None
    name = type(pattern).__name__
    if not isinstance(key_valid, torch.Tensor):
        raise TypeError(
            f"{name}.bind: key_valid must be a (batch, kv_len) bool tensor or None, got {type(key_valid).__name__}"
        )
    if key_valid.dtype != torch.bool:
        raise TypeError(
            f"{name}.bind: key_valid must be a bool tensor (True = token, False = padding), got dtype {key_valid.dtype}"
        )
    want = (key.shape[0], key.shape[-2])
    if tuple(key_valid.shape) != want:
        raise ValueError(
            f"{name}.bind: key_valid must have shape (batch, kv_len) = {want}, got {tuple(key_valid.shape)}"
        )
    return key_valid.to(key.device)


# The compiled kernel's hash, ``fn(x, rot, rounds) -> bucket ids`` or None where it does not run (product and
# argmax in cache, same ids): ``hf_sparse.attention.fused`` installs it when imported, so that patterns
# import nothing from attention.
hash_kernel = None
# Its bucket order, ``fn(hq, hk, causal, off) -> (q_index, k_index, lo, hi)`` or None (``LSHBuckets._order``:
# a counting sort, same results), installed alike.
order_kernel = None


@register_pattern("lsh")
class LSH(Pattern):
    """Reformer-style LSH attention: query i attends key j iff, in some hashing round, they fall in
    the same angular-LSH bucket (random rotations seeded with ``seed``; about ``seq / bucket_size``
    buckets, ``seq`` the number of real keys of the row where ``bind`` gets ``key_valid``, so a padded row
    hashes as it would alone); with ``causal`` also ``j <= i``. Executed exactly: positions are sorted by
    bucket and each bucket becomes a contiguous block-diagonal run."""

    content_based = True

    def __init__(self, bucket_size: int = 64, num_hashes: int = 1, seed: int = 0, causal: bool = False):
        self.bucket_size = check_positive_int("bucket_size", bucket_size)
        self.num_hashes = check_positive_int("num_hashes", num_hashes)
        self.seed = check_seed(seed)
        self.causal = check_bool("causal", causal)
        self.is_causal = self.causal

    def num_buckets(self, n: int) -> int:
        return max(2, 2 * round(n / (2 * self.bucket_size)))

    def hash(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """(B, H, L, D) -> (B, H, L, num_hashes) bucket ids, for a sequence of length n: in each round
        the argmax of ``[x R, -x R]`` for a random rotation R (D, buckets / 2), the first of equal
        maxima (x and x / |x| hash alike, so x is not normalised)."""
        nb = self.num_buckets(n)
        gen = torch.Generator().manual_seed(self.seed)
        rot = torch.randn(self.num_hashes, x.shape[-1], nb // 2, generator=gen).to(x.device)
        rot = rot.permute(1, 0, 2).reshape(x.shape[-1], -1).contiguous()  # every round in one product
        x = x.detach().float()
        if hash_kernel is not None and (ids := hash_kernel(x, rot, self.num_hashes)) is not None:
            return ids
        # the max of proj and of -proj without concatenating them
        proj = x @ rot
        proj = proj.view(*proj.shape[:-1], self.num_hashes, nb // 2)
        hi, hi_at = proj.max(-1)
        lo, lo_at = proj.min(-1)
        return torch.where(hi >= -lo, hi_at, lo_at + nb // 2)

    def bind(self, q_len, kv_len=None, *, query=None, key=None, key_valid=None):
        _check_qk(self, query, key)
        kv_len = key.shape[-2] if kv_len is None else kv_len
        key_valid = _check_key_valid(self, key_valid, key)
        if key_valid is None or key.shape[0] == 0:
            return LSHBuckets(self.hash(query, kv_len), self.hash(key, kv_len), self.causal, source=self)
        # the number of buckets follows each row's real keys, not the padded length (padding keys, hashed
        # too, are masked by the kernels)
        real = key_valid.sum(-1)  # (B,)
        hq, hk = [None] * key.shape[0], [None] * key.shape[0]
        for n in real.unique().tolist():
            rows = (real == n).nonzero().flatten()
            for b, q_ids, k_ids in zip(rows.tolist(), self.hash(query[rows], n), self.hash(key[rows], n)):
                hq[b], hk[b] = q_ids, k_ids
        return LSHBuckets(torch.stack(hq), torch.stack(hk), self.causal, source=self)

    def _params(self):
        return {
            "bucket_size": self.bucket_size,
            "num_hashes": self.num_hashes,
            "seed": self.seed,
            "causal": self.causal,
        }


class LSHBuckets(Pattern):
    """Bound LSH: ``hq`` (B, H, q_len, R) and ``hk`` (B, H, kv_len, R) bucket ids."""

    def __init__(self, hq: torch.Tensor, hk: torch.Tensor, causal: bool, source: Pattern | None = None):
        self.hq, self.hk, self.causal, self._source = hq, hk, causal, source
        self.is_causal = causal

    def _same(self, b, h, i, j, rounds):
        off = self.hk.shape[2] - self.hq.shape[2]
        hq, hk = self.hq[b, h], self.hk[b, h]
        qi = (i - off).clamp(min=0, max=hq.shape[0] - 1)
        jj = j.clamp(min=0, max=hk.shape[0] - 1)
        return (hq[qi][..., rounds] == hk[jj][..., rounds]).any(-1)

    @property
    def bound_lengths(self) -> tuple[int, int]:
        """The (query, key) lengths the buckets were computed for."""
        return self.hq.shape[2], self.hk.shape[2]

    def dense_mask(self, q_len, kv_len=None, device=None):
        # positions past the buckets would read the last bucket (the indices are clamped): refuse other lengths
        q_len, kv_len = check_lengths(q_len, kv_len)
        bound_q, bound_kv = self.bound_lengths
        if kv_len != bound_kv or q_len > bound_q:
            raise ValueError(
                f"{self.__name__} was bound to {bound_q} queries and {bound_kv} keys, got q_len={q_len}, "
                f"kv_len={kv_len}: bind it to queries and keys of the length wanted"
            )
        return super().dense_mask(q_len, kv_len, device)

    def varies(self):
        return self.hq.shape[0] > 1, self.hq.shape[1] > 1

    def _mask(self, b, h, i, j):
        out = self._same(b, h, i, j, slice(None))
        return out & (j <= i) if self.causal else out

    def _dense(self, i, j):
        B, H = self.hq.shape[:2]
        return torch.stack([torch.stack([self._mask(b, h, i, j) for h in range(H)]) for b in range(B)])

    def _plan(self, q_len, kv_len, block):
        off = kv_len - q_len
        comps = []
        for r in range(self.hq.shape[-1]):
            hq, hk = self.hq[..., r], self.hk[..., r]  # (B, H, n)
            q_index, k_index, key_range = self._order(hq, hk, off, ranges=r == 0)
            layout = segment_layout(hq.gather(-1, q_index).cpu(), hk.gather(-1, k_index).cpu(), block)
            if r > 0 or self.causal:
                layout.full[:] = False

            def mask(b, h, i, j, r=r):
                m = self._same(b, h, i, j, slice(r, r + 1))
                if r:
                    m = m & ~self._same(b, h, i, j, slice(0, r))
                return m & (j <= i) if self.causal else m

            comps.append(
                Component(
                    layout,
                    mask,
                    q_index=q_index,
                    k_index=k_index,
                    q_offset=off,
                    key_range=key_range,
                    name=f"lsh_round{r}",
                )
            )
        return Plan(comps)

    def _order(self, hq, hk, off, ranges):
        """One round's bucket order: q_index (B, H, nq) and k_index (B, H, nk), positions sorted by bucket and
        then position, and with ``ranges`` the key rows [lo, hi) in that order of each query row (its
        bucket's keys; with ``causal``, those up to the query's position: keys are in position order inside a
        bucket), one contiguous run (``Component.key_range``), else None."""
        if order_kernel is not None and (got := order_kernel(hq, hk, self.causal, off)) is not None:
            q_index, k_index, lo, hi = got
            return q_index, k_index, (lo, hi) if ranges else None
        q_len, kv_len = hq.shape[-1], hk.shape[-1]
        q_index = torch.argsort(hq * q_len + torch.arange(q_len, device=hq.device), dim=-1)
        k_index = torch.argsort(hk * kv_len + torch.arange(kv_len, device=hk.device), dim=-1)
        return q_index, k_index, self._key_range(hq, hk, q_index, k_index, off) if ranges else None

    def _key_range(self, hq, hk, q_index, k_index, off):
        kv_len = hk.shape[-1]
        stride = kv_len + 1  # (bucket, position) as one number, in the component's (sorted) key order
        keys = (hk * stride + torch.arange(kv_len, device=hk.device)).gather(-1, k_index)
        first = hq.gather(-1, q_index) * stride
        last = first + (q_index + off if self.causal else kv_len)
        return torch.searchsorted(keys, first), torch.searchsorted(keys, last, right=True)

    def _original_layout(self, q_len, kv_len, block):
        c = block
        nqb, nkb = math.ceil(q_len / c), math.ceil(kv_len / c)
        nbk = int(max(self.hq.max(), self.hk.max())) + 1
        B, H = self.hq.shape[:2]
        keep = torch.zeros(B, H, nqb, nkb, dtype=torch.bool)
        for r in range(self.hq.shape[-1]):
            qi = torch.zeros(B, H, nqb, nbk)
            qi.scatter_(
                -1,
                torch.nn.functional.pad(self.hq[..., r].cpu(), (0, nqb * c - q_len), value=0).view(
                    B, H, nqb, c
                ),
                1.0,
            )
            ki = torch.zeros(B, H, nkb, nbk)
            ki.scatter_(
                -1,
                torch.nn.functional.pad(self.hk[..., r].cpu(), (0, nkb * c - kv_len), value=0).view(
                    B, H, nkb, c
                ),
                1.0,
            )
            keep |= (qi @ ki.transpose(-1, -2)) > 0
        if self.causal:  # tiles whose first key lies after their last query hold no pair j <= i
            last_q = torch.clamp(torch.arange(nqb) * c + c - 1, max=q_len - 1) + (kv_len - q_len)
            keep &= (torch.arange(nkb) * c)[None, :] <= last_q[:, None]
        order = torch.argsort((~keep).to(torch.int8), dim=-1, stable=True)
        idx = torch.where(keep, torch.arange(nkb).expand_as(keep), -1).gather(-1, order)
        width = max(int(keep.sum(-1).max()), 1)
        idx = idx[..., :width]
        return BlockLayout(c, nqb, nkb, idx, torch.zeros_like(idx, dtype=torch.bool))

    def _params(self):
        return {}


@register_pattern("topk_blocks")
class TopKBlocks(Pattern):
    """Content-based block selection (MoBA / NSA style): each query block of ``block`` positions
    attends its own block and the ``k - 1`` other key blocks whose mean key has the largest dot
    product with the block's mean query (``k`` blocks in all, fewer if there are fewer). With
    ``causal``, only key blocks before the query block compete, scored against the block's *first*
    query (its first real one given: with a cache, the first query of the call in that block) instead of
    the mean, and ``j <= i``: the blocks a query sees then depend on no later position, so output i does
    not change when a token after i does. Query i attends key j iff ``j // block`` is selected for
    ``i // block``. The selection is not differentiated. Bound with ``key_valid`` (padding), the means are
    over real positions only and a key block of padding only is never selected (other than as a query
    block's own), so a right-padded row selects as it would alone."""

    content_based = True

    def __init__(self, block: int = 64, k: int = 4, causal: bool = False):
        self.block = check_positive_int("block", block)
        self.k = check_positive_int("k", k)
        self.causal = check_bool("causal", causal)
        self.is_causal = self.causal
        self.geometry = (self.block,)

    def select(
        self, query: torch.Tensor, key: torch.Tensor, key_valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, H, num position blocks, k) selected key blocks (ascending, -1 = none).

        ``key_valid`` (B, kv_len) bool, False at padding keys: block means over the real keys and queries
        only, and key blocks without a real key left out (see the class). The queries are taken to be the
        last ``q_len`` positions of the keys' sequence (self-attention, the library's convention), so query
        i is real iff ``key_valid[:, kv_len - q_len + i]``."""
        q_len, kv_len = query.shape[-2], key.shape[-2]
        p = self.block
        nb = max(math.ceil(kv_len / p), 1)
        B, H, _, D = query.shape
        dev = query.device
        key_valid = _check_key_valid(self, key_valid, key)

        def block_mean(x, offset, real):  # real: (B, len) bool or None; -> (B, H, nb, D), (B|1, nb) counts
            blk = torch.div(torch.arange(offset, offset + x.shape[-2], device=dev), p, rounding_mode="floor")
            x = x.detach().float()
            if real is None:
                weight = torch.ones(1, x.shape[-2], device=dev)
            else:
                weight = real.float()
                x = x.masked_fill(~real[:, None, :, None], 0.0)  # not x * 0: padding may hold inf or nan
            s = torch.zeros(B, H, nb, D, device=dev).index_add_(2, blk, x)
            cnt = torch.zeros(weight.shape[0], nb, device=dev).index_add_(1, blk, weight)
            return s / cnt.clamp(min=1)[:, None, :, None], cnt

        def block_first(x, offset, real):  # each block's first real row (zeros where none) -> (B, H, nb, D)
            blk = torch.div(torch.arange(offset, offset + x.shape[-2], device=dev), p, rounding_mode="floor")
            row = torch.arange(x.shape[-2], device=dev).expand(1 if real is None else B, -1)
            row = row if real is None else torch.where(real, row, x.shape[-2])  # padding: past the last row
            first = torch.full((row.shape[0], nb), x.shape[-2], device=dev)
            first = first.scatter_reduce_(1, blk.expand_as(row), row, "amin")  # (B|1, nb)
            x = torch.nn.functional.pad(x.detach().float(), (0, 0, 0, 1))  # (B, H, len + 1, D): zeros last
            return x.gather(2, first.expand(B, -1)[:, None, :, None].expand(B, H, nb, D))

        real_q = None if key_valid is None else key_valid[:, kv_len - q_len :]
        if self.causal:  # the first query: what a block selects depends on no later position
            q_stat = block_first(query, kv_len - q_len, real_q)
        else:
            q_stat, _ = block_mean(query, kv_len - q_len, real_q)
        k_mean, k_count = block_mean(key, 0, key_valid)
        scores = q_stat @ k_mean.transpose(-1, -2)  # (B, H, nb, nb)
        if key_valid is not None:  # a block of padding only is never another block's choice
            scores = scores.masked_fill((k_count == 0)[:, None, None, :], float("-inf"))
        qb = torch.arange(nb, device=dev)
        if self.causal:
            scores = scores.masked_fill(qb[None, :] > qb[:, None], float("-inf"))
        scores = scores.masked_fill(torch.eye(nb, dtype=torch.bool, device=dev), float("inf"))
        kk = min(self.k, nb)
        val, idx = scores.topk(kk, dim=-1)
        idx = torch.where(val == float("-inf"), torch.full_like(idx, nb), idx).sort(-1).values
        return torch.where(idx >= nb, torch.full_like(idx, -1), idx)

    def bind(self, q_len, kv_len=None, *, query=None, key=None, causal=False, key_valid=None):
        """``causal``: a part of a causal pattern (``TopKBlocks(...) & Causal()``, see :meth:`Pattern.bind`) selects
        as ``causal=True`` does, from no later position (block means over every position would let a later
        token change what an earlier query sees)."""
        _check_qk(self, query, key)
        causal = check_bool("causal", causal) and not self.causal
        chooser = TopKBlocks(self.block, self.k, causal=True) if causal else self
        bound = BlockSet(
            self.block, chooser.select(query, key, key_valid).cpu(), causal=chooser.causal, source=self
        )
        # what a plot checks its n against (patterns are immutable once built: set as their own bind does)
        object.__setattr__(bound, "bound_lengths", (query.shape[-2], key.shape[-2]))
        return bound

    def _params(self):
        return {"block": self.block, "k": self.k, "causal": self.causal}


__all__ = ["LSH", "LSHBuckets", "TopKBlocks"]
