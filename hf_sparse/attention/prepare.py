"""A plan component prepared for the blocked kernels (``_Prep``): its mode (band / dense / gather),
key and query validity, which (batch, head) rows share one mask, and for translation-invariant bands the
shared interior tile, its forward sub-tiling and the key offsets it allows."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ..patterns.base import Component

_NEG_INF = float("-inf")
# Interior band queries go through the fused forward in sub-blocks of this many rows, each with its own
# narrower key window (fewer masked scores: 32 + 512 keys instead of 128 + 512 for a window of 512).
FORWARD_SUB_BLOCK = 32


@dataclass
class _Prep:
    comp: Component
    c: int
    nq: int  # component query rows
    nk: int  # component key rows
    nqb: int
    mode: str  # "band" | "dense" | "gather"
    L: int  # keys seen by one query block
    win0: int  # key row where query block 0's window starts (band; may be negative)
    key_valid: torch.Tensor | None  # (B, Hk, nk) bool in component key rows, or None (all valid)
    q_valid: torch.Tensor | None  # (B, nq) bool, or None
    groups: list  # (b, h, row0, row1) over flattened batch*heads
    scale: float
    dropout_p: float
    # translation-invariant bands only:
    shared_bias: torch.Tensor | None = None  # (c, L) bias of an interior chunk
    shared_any: torch.Tensor | None = None  # (c,) rows of that tile with at least one key
    shared_mask01: torch.Tensor | None = None  # (c, L) that tile as 0/1 floats
    sub: tuple | None = None  # (rows, first column, (rows, width) bias) forward sub-tiling of the tile
    offsets: tuple | None = None  # (dmin, dmax, allowed (W,) bool): the key offsets j - i it allows


# Rows per step of ``_row_dot``: its products stay cache-sized (1 MB in float32 at head size 64).
ROW_DOT_ELEMENTS = 1 << 18


def _tensor_rows(p: _Prep, b: int, h: int, rows: torch.Tensor, cols: torch.Tensor, device):
    """Component query rows and key rows of group (b, h) (any shapes; rows past the ends, block padding,
    clamped to the last) -> the tensors' rows, through the component's orders where it has them."""
    comp = p.comp
    pick = lambda t: t[min(b, t.shape[0] - 1), min(h, t.shape[1] - 1)].to(device)  # noqa: E731
    qr, kr = rows.clamp(max=p.nq - 1), cols.clamp(0, p.nk - 1)
    qr = qr if comp.q_index is None else pick(comp.q_index)[qr]
    kr = kr if comp.k_index is None else pick(comp.k_index)[kr]
    return qr, kr


def _row_dot(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """sum(a * b, -1) in ``dtype``, (..., X) -> (...), over row chunks of ``ROW_DOT_ELEMENTS`` elements.
    One product of a whole head (16 MB at 64k tokens) per step left ~14 MB resident per head after it
    was freed (glibc keeps such frees in its heap): 150 MB more peak memory at 64k, in about half the
    processes."""
    X = a.shape[-1]
    a2, b2 = a.reshape(-1, X), b.reshape(-1, X)
    out = torch.empty(a2.shape[0], dtype=dtype, device=a.device)
    step = max(1, ROW_DOT_ELEMENTS // max(X, 1))
    for s in range(0, a2.shape[0], step):
        torch.sum(a2[s : s + step].to(dtype) * b2[s : s + step].to(dtype), -1, out=out[s : s + step])
    return out.view(a.shape[:-1])


def once_differentiable(backward):
    """For the kernels' written-out backwards (``torch.autograd.Function.backward``): run without recording, and
    under ``create_graph=True`` (gradient penalties, Hessian-vector products) return gradients whose own derivative
    raises (``_NoSecondDerivative``) instead of leaving the second-order terms out. The gradients stay tied to what
    they depend on (the node's saved inputs), so ``torch.autograd.grad(penalty, q)`` and ``hvp`` raise too, where
    ``torch.autograd.function.once_differentiable`` answers "unused" (zeros in ``hvp``) and marks nothing when the
    incoming gradients are constants."""

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with torch.no_grad():
            outs = backward(ctx, *grads)
        if not torch.is_grad_enabled():  # an ordinary backward
            return outs
        ties = [t for t in (*grads, *ctx.saved_tensors) if isinstance(t, torch.Tensor) and t.requires_grad]
        given = [o for o in outs if o is not None]
        if not ties or not given:
            return outs
        wrapped = iter(_NoSecondDerivative.apply(len(given), *given, *ties))
        return tuple(None if o is None else next(wrapped) for o in outs)

    return wrapper


class _NoSecondDerivative(torch.autograd.Function):
    """The first ``n`` tensors unchanged, as outputs that depend on all the tensors given; their backward raises."""

    @staticmethod
    def forward(ctx, n, *tensors):
        return tuple(t.view_as(t) for t in tensors[:n])

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(
            "hf_sparse's attention kernels (the block kernels of backend='blocked', and of 'auto' where it runs "
            "them; adaptive-span attention) have no second derivative: their backward is written out. A gradient "
            "of a gradient (create_graph=True: gradient penalties, Hessian-vector products) needs backend='dense' "
            "(attn_implementation='eager' for an adaptive-span model)"
        )


def to_classes(x: torch.Tensor, d: int, dim: int) -> torch.Tensor:
    """Rows along ``dim`` in residue-class order of stride d (row r * (n // d) + t is row t * d + r; n % d
    == 0): a contiguous copy."""
    n = x.shape[dim]
    return x.unflatten(dim, (n // d, d)).transpose(dim, dim + 1).reshape(x.shape)


def from_classes(x: torch.Tensor, d: int, dim: int, copy: bool = True) -> torch.Tensor:
    """The inverse of ``to_classes``: a contiguous copy, or (``copy=False``) a strided view with ``dim`` split
    into (n // d, d)."""
    n = x.shape[dim]
    view = x.unflatten(dim, (d, n // d)).transpose(dim, dim + 1)
    return view.reshape(x.shape) if copy else view


def _is_dense(layout) -> bool:
    idx = layout.kv_index
    if idx.shape[-1] != layout.num_kv_blocks:
        return False
    return bool((idx == torch.arange(layout.num_kv_blocks, device=idx.device)).all())


def _prepare(comp: Component, B: int, H: int, nq: int, nk: int, key_valid, scale, dropout_p, device) -> _Prep:
    lay = comp.layout
    c = lay.block
    nqb = lay.num_q_blocks
    if lay.band is not None and comp.identity:
        lo, hi = lay.band
        mode, L = "band", (hi - lo + 1) * c
    elif _is_dense(lay):
        mode, L = "dense", lay.num_kv_blocks * c
    else:
        mode, L = "gather", lay.max_blocks * c
    # Key validity in component rows: padding mask, then the component's own ragged index set.
    kv = None
    if key_valid is not None:
        kv = key_valid[:, None, :]  # (B, 1, nk_tensor)
        if comp.k_index is not None:
            idx = comp.k_index.to(device).expand(B, -1, -1)
            kv = kv.expand(B, idx.shape[1], -1).gather(-1, idx)
    if comp.k_valid is not None:
        kvc = comp.k_valid.to(device)[:, None, :].expand(B, 1, -1)
        kv = kvc if kv is None else kv & kvc
    qv = None if comp.q_valid is None else comp.q_valid.to(device).expand(B, -1)
    # Which (batch, head) rows can share one bias.
    per_bh = comp.per_batch_head
    heads_vary = per_bh and any(
        t is not None and t.shape[1] > 1 for t in (lay.kv_index, comp.q_index, comp.k_index)
    )
    heads_vary = heads_vary or (kv is not None and kv.shape[1] > 1) or comp.head_dependent
    batch_vary = per_bh or kv is not None or qv is not None or comp.batch_dependent
    if heads_vary:
        groups = [(b, h, b * H + h, b * H + h + 1) for b in range(B) for h in range(H)]
    elif batch_vary:
        groups = [(b, 0, b * H, (b + 1) * H) for b in range(B)]
    else:
        groups = [(0, 0, 0, B * H)]
    win0 = comp.layout.band[0] * c if mode == "band" else 0
    prep = _Prep(comp, c, nq, nk, nqb, mode, L, win0, kv, qv, groups, scale, dropout_p)
    if mode == "band" and comp.translation_invariant:
        prep.shared_bias = _shared_band_bias(prep, device)
        prep.shared_any = (prep.shared_bias > _NEG_INF).any(-1)
        prep.shared_mask01 = (prep.shared_bias == 0).float()
        prep.sub = _sub_tile(prep.shared_bias, FORWARD_SUB_BLOCK)
        prep.offsets = _band_offsets(prep.shared_bias, comp.layout.band[0])
    return prep


def _shared_band_bias(p: _Prep, device) -> torch.Tensor:
    """(c, L) bias of query block qb against keys starting at (qb + lo) * c: depends only on i - j."""
    c, lo = p.c, p.comp.layout.band[0]
    qb = max(-lo, 0)
    i = (qb * c + torch.arange(c, device=device))[:, None] + p.comp.q_offset
    j = ((qb + lo) * c + torch.arange(p.L, device=device))[None, :]
    allowed = p.comp.mask(0, 0, i, j)
    return torch.zeros(allowed.shape, device=device).masked_fill(~allowed, _NEG_INF)


def _band_offsets(bias: torch.Tensor, lo: int):
    """The key offsets j - i the shared (c, L) tile allows: (dmin, dmax, allowed (dmax - dmin + 1,) bool),
    or None if the tile's rule is not a function of the offset alone."""
    c, L = bias.shape
    allowed = (bias > _NEG_INF).cpu()
    d = lo * c + torch.arange(L)[None, :] - torch.arange(c)[:, None]  # (c, L) offset of each tile entry
    if not bool(allowed.any()):
        return None
    dmin, dmax = int(d[allowed].min()), int(d[allowed].max())
    cols = torch.zeros(dmax - dmin + 1, dtype=torch.bool)
    cols[d[allowed] - dmin] = True
    inside = (d >= dmin) & (d <= dmax)
    if not torch.equal(inside & cols[(d - dmin).clamp(0, dmax - dmin)], allowed):
        return None
    return dmin, dmax, cols.to(bias.device)


def _sub_tile(bias: torch.Tensor, rows: int):
    """Split the shared (c, L) tile into c // rows sub-blocks that each see the same narrower window
    shifted by ``rows`` columns: (rows, first column, (rows, width) bias), or None where the tile does
    not split that way (every row must keep all its allowed keys)."""
    c, L = bias.shape
    if c % rows or c == rows:
        return None
    allowed = bias > _NEG_INF
    cols = allowed[:rows].any(0).nonzero().flatten().tolist()
    if not cols:
        return None
    a, w = cols[0], cols[-1] + 1 - cols[0]
    for j in range(c // rows):
        block, shift = allowed[j * rows : (j + 1) * rows], a + j * rows
        if shift + w > L or block.sum() != block[:, shift : shift + w].sum():
            return None
        if not torch.equal(block[:, shift : shift + w], allowed[:rows, a : a + w]):
            return None
    return rows, a, bias[:rows, a : a + w].contiguous()


def _runs(clean: list, clean_limit: int, dirty_limit: int) -> list:
    """(s, e, flag) runs of equal ``clean`` flags, at most ``clean_limit`` / ``dirty_limit`` long."""
    out, s = [], 0
    while s < len(clean):
        e, flag = s, clean[s]
        limit = clean_limit if flag else dirty_limit
        while e < len(clean) and clean[e] == flag and e - s < limit:
            e += 1
        out.append((s, e, flag))
        s = e
    return out
