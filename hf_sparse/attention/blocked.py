"""Block-sparse attention: exact forward and backward, any device, O(n) memory; compiled CPU kernels.

A plan (see ``patterns.base``) is a list of disjoint components, each prepared by ``prepare.py``. Each
runs here as one
``torch.autograd.Function`` that walks its query blocks in chunks:

* the keys of a chunk are a zero-copy strided view for bands (``look-around``), the whole key
  sequence for dense rows, or a gather of the listed key blocks otherwise;
* a chunk's bias (0 / -inf) comes from the tiles' full flags, the rule evaluated in partial tiles,
  and key padding; one shared tile serves every interior chunk of a translation-invariant band;
* forward returns the output and the log-sum-exp of every row (rows with no allowed key: zeros
  and -inf), so components are merged exactly; backward recomputes probabilities chunk by chunk
  (FlashAttention style) and never stores a score matrix.

On CPU the forward of each chunk is the fused flash kernel behind ``scaled_dot_product_attention``
(fast, and it returns the log-sum-exp), interior band blocks head by head in sub-blocks of
``prepare.FORWARD_SUB_BLOCK`` rows that each see only their own narrower key window; elsewhere, or with
dropout, it is three matmuls.

The backward of a translation-invariant band (sliding windows, causal or not) runs head by head on
buffers indexed by key offset (``band_backward.py``): query tiles of ``BAND_TILE`` rows write their
probabilities there, and the same memory read with other strides gives each key tile the queries
that see it, so key and value gradients are plain matmuls written to their own rows.

On CPU in float32/float64 without dropout, components run the compiled kernels of ``fused.py``
instead (``fused_components.py``; no padded or gathered copies of q/k/v/dO): translation-invariant
bands the band kernel, bands inside residue classes (``Component.class_band``) the class-band kernel,
everything else the table kernel (``_fused_kind``, by the measured rule ``FUSED_DEFAULT``). Every such
component of a plan runs in one autograd node (``_FusedPlan``) whose backward gives each kernel the
merged log-sum-exp and delta, so the kernels accumulate the final gradients in one set of buffers and
no merge has a backward. Where the kernels cannot be built, or with ``HF_SPARSE_FUSED=0``, the
pure-PyTorch path above runs: same results.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..patterns.base import Component, Plan, kept
from . import fused
from .band_backward import BAND_BACKWARD_MIN_BLOCKS, _backward_band, _band_tile
from .dense import compute_dtype
from .dropout import keep_pairs
from .fused_components import (
    _class_band_args,
    _fused_band_args,
    _fused_kind,
    _fused_tables,
    _FusedPlan,
    _range_args,
    _Rows,
    _Run,
)
from .merge import merge_partials
from .prepare import (
    _NEG_INF,
    _Prep,
    _prepare,
    _row_dot,
    _runs,
    _tensor_rows,
    from_classes,
    once_differentiable,
    to_classes,
)

# Scores materialised per chunk (elements): small enough to stay in cache and to reuse allocations.
CHUNK_ELEMENTS = 1 << 19
FORWARD_ELEMENTS = 1 << 24  # per head, per fused-flash call over interior blocks


def _flash_cpu_available() -> bool:
    return hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")


def pad_rows(x: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """Zero rows before/after along dim -2."""
    return F.pad(x, (0, 0, before, after)) if before or after else x


def _flash_band_clean(p: _Prep, qb, k, v, r: int, s: int, e: int):
    """Fused forward of one head over the clean band blocks s..e, in sub-blocks (see ``_sub_tile``):
    (out (g, c, Dv), lse (g, c))."""
    rows, a, bias = p.sub
    D, Dv, g = qb.shape[-1], v.shape[-1], e - s
    m = g * p.c // rows  # sub-blocks
    start = p.win0 + s * p.c + a

    def window(X, width):
        offset = X.storage_offset() + r * X.stride(0) + start * width
        return X.as_strided((m, 1, bias.shape[1], width), (rows * width, 0, width, 1), offset)

    # sub-blocks as the batch dimension: the output comes back contiguous
    o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        qb[r, s:e].reshape(m, 1, rows, D),
        window(k, D),
        window(v, Dv),
        attn_mask=bias.to(qb.dtype)[None, None].expand(m, 1, rows, bias.shape[1]),
        scale=p.scale,
    )
    return o.view(g, p.c, Dv), lse.view(g, p.c)


# ----------------------------------------------------------------------------- per-chunk pieces


def _key_rows(p: _Prep, b: int, h: int, s: int, e: int, device) -> torch.Tensor:
    """(g, L) component key rows seen by query blocks s..e (padding rows point past nk)."""
    c = p.c
    if p.mode == "band":
        return (torch.arange(s, e, device=device) * c + p.win0)[:, None] + torch.arange(p.L, device=device)
    if p.mode == "dense":
        return torch.arange(p.L, device=device).expand(e - s, -1)
    idx = p.comp.layout.kv_index
    idx = idx[min(b, idx.shape[0] - 1), min(h, idx.shape[1] - 1), s:e].to(device)  # (g, K)
    rows = idx.clamp(min=0)[..., None] * c + torch.arange(c, device=device)
    return torch.where((idx >= 0)[..., None], rows, torch.full_like(rows, 1 << 40)).flatten(1)


def _chunk_bias(p: _Prep, b: int, h: int, s: int, e: int, dtype, device):
    """Bias (1, g, c, L) in ``dtype`` and rows-with-a-key (g, c) for query blocks s..e."""
    c, comp = p.c, p.comp
    g = e - s
    cols = _key_rows(p, b, h, s, e, device)  # (g, L)
    rows = torch.arange(s * c, e * c, device=device).view(g, c)
    ok_k = (cols >= 0) & (cols < p.nk)
    if p.key_valid is not None:
        kv = p.key_valid[b, min(h, p.key_valid.shape[1] - 1)]
        ok_k = ok_k & kv[cols.clamp(0, p.nk - 1)]
    ok_q = rows < p.nq
    if p.q_valid is not None:
        ok_q = ok_q & p.q_valid[b][rows.clamp(max=p.nq - 1)]
    if p.shared_bias is not None and bool(ok_k.all()) and bool(ok_q.all()):
        bias = p.shared_bias.to(dtype)[None, None].expand(1, g, c, p.L)
        return bias, p.shared_any.expand(g, c)
    # tiles marked full need no rule evaluation
    if p.mode == "gather":
        lay = comp.layout
        full = lay.full[min(b, lay.full.shape[0] - 1), min(h, lay.full.shape[1] - 1), s:e].to(device)
        full = full.repeat_interleave(c, dim=1)  # (g, L)
    elif p.mode == "dense":
        lay = comp.layout
        full = (
            lay.full[min(b, lay.full.shape[0] - 1), min(h, lay.full.shape[1] - 1), s:e]
            .to(device)
            .repeat_interleave(c, dim=1)
        )
    else:  # band: kv_index rows are compacted at the edges; put full flags back in window slots
        lay = comp.layout
        lo, hi = lay.band
        idx, flags = lay.kv_index[0, 0, s:e].to(device), lay.full[0, 0, s:e].to(device)
        slot = idx - (torch.arange(s, e, device=device)[:, None] + lo)
        ok = (idx >= 0) & (slot >= 0) & (slot <= hi - lo)
        full_w = torch.zeros(g, hi - lo + 1, dtype=torch.bool, device=device)
        full_w.scatter_(1, torch.where(ok, slot, torch.zeros_like(slot)), flags & ok)
        full = full_w.repeat_interleave(c, dim=1)
    if bool(full.all()):
        allowed = ok_q[:, :, None] & ok_k[:, None, :]
    else:
        qr, kr = _tensor_rows(p, b, h, rows, cols, device)
        rule = comp.mask(b, h, (qr + comp.q_offset)[:, :, None], kr[:, None, :])
        allowed = (rule | full[:, None, :]) & ok_q[:, :, None] & ok_k[:, None, :]
    bias = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, _NEG_INF)
    return bias[None], allowed.any(-1)


def _chunk_keys(
    p: _Prep, X: torch.Tensor, r0: int, r1: int, b: int, h: int, s: int, e: int, clean: bool = False
):
    """Keys (or values) of query blocks s..e for rows r0..r1: (Gh, g, L, D). Clean band chunks are
    zero-copy strided views; everything else is a gather (rows out of range are clamped, and
    masked by the chunk's bias)."""
    c, D = p.c, X.shape[-1]
    if p.mode == "band" and clean:
        offset = X.storage_offset() + r0 * X.stride(0) + (p.win0 + s * c) * D
        return X.as_strided((r1 - r0, e - s, p.L, D), (X.stride(0), c * D, D, 1), offset)
    if p.mode == "dense":  # every query block sees all keys: one (L, D) per head (see _flat_rows)
        return X[r0:r1, None]
    rows = _key_rows(p, b, h, s, e, X.device).clamp(0, X.shape[1] - 1)
    return X[r0:r1][:, rows]


def _flat_rows(p: _Prep, x: torch.Tensor) -> torch.Tensor:
    """Dense mode: (..., g, c, X) -> (..., 1, g * c, X), so a chunk is one matmul against its single
    key block instead of g small ones against an expanded (copied) one. Other modes: unchanged."""
    if p.mode != "dense":
        return x
    return x.reshape(*x.shape[:-3], 1, x.shape[-3] * x.shape[-2], x.shape[-1])


def _schedule(p: _Prep, b: int, h: int, clean_blocks: int, dirty_blocks: int, device):
    """Chunks (s, e, clean) of query blocks for one group. ``clean`` chunks use the shared band
    tile (no padding, no sequence edge in their window); the others get their own bias."""
    if p.shared_bias is None:
        return [(s, min(s + dirty_blocks, p.nqb), False) for s in range(0, p.nqb, dirty_blocks)]
    c, L = p.c, p.L
    # a block is clean if its whole key window lies inside the sequence and holds no padding
    start = torch.arange(p.nqb, device=device) * c + p.win0
    clean = (start >= 0) & (start + L <= p.nk)
    if p.key_valid is not None:
        bad = (~p.key_valid[b, min(h, p.key_valid.shape[1] - 1)]).int()
        csum = torch.cat([torch.zeros(1, dtype=torch.int64, device=device), bad.cumsum(0)])
        lo_i, hi_i = start.clamp(0, p.nk), (start + L).clamp(0, p.nk)
        clean &= (csum[hi_i] - csum[lo_i]) == 0
    clean &= (torch.arange(p.nqb, device=device) + 1) * c <= p.nq
    if p.q_valid is not None:
        qv = torch.nn.functional.pad(p.q_valid[b], (0, p.nqb * c - p.nq)).view(p.nqb, c).all(-1)
        clean &= qv
    return _runs(clean.tolist(), clean_blocks, dirty_blocks)


def _chunk_mask(p: _Prep, b, h, s, e, clean, device, dtype=torch.float32):
    """(allowed as 0/1 in ``dtype``, broadcastable to (g, c, L); rows-with-a-key (g, c) bool)."""
    if clean:
        return p.shared_mask01.to(dtype)[None], p.shared_any.expand(e - s, p.c)
    bias, any_key = _chunk_bias(p, b, h, s, e, torch.float32, device)
    return (bias[0] == 0).to(dtype), any_key


def _dropout_scale(p: _Prep, drop: tuple, b: int, h: int, r0: int, r1: int, s: int, e: int, dtype, device):
    """keep / (1 - p) of the chunk of query blocks s..e of rows r0..r1 (as its scores, ``_flat_rows``), keep
    drawn from each pair's tensor rows (``dropout.keep_pairs``): forward and backward draw the same mask
    without storing it, and so do the compiled kernels."""
    c = p.c
    rows = torch.arange(s * c, e * c, device=device).view(e - s, c)
    rows, cols = _tensor_rows(p, b, h, rows, _key_rows(p, b, h, s, e, device), device)
    _, seed, head_mul, head_add = drop  # ``NO_DROPOUT``
    bh = torch.arange(r0, r1, device=device)[:, None, None, None] * head_mul + head_add
    keep = keep_pairs(seed, p.dropout_p, bh, rows[None, :, :, None], cols[None, :, None, :])
    return _flat_rows(p, keep.to(dtype) / (1.0 - p.dropout_p))


def _budget(p: _Prep, heads: int, elements: int) -> int:
    return max(1, min(p.nqb, elements // max(1, heads * p.c * p.L)))


# ----------------------------------------------------------------------------- the autograd function


class _BlockSparse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, p: _Prep, drop: tuple):
        # q: (BH, nq_pad, D); k, v: (BH, rows, D) already padded for the mode
        BH, nq_pad, D = q.shape
        c, dev = p.c, q.device
        out = torch.zeros(BH, p.nqb, c, v.shape[-1], dtype=q.dtype, device=dev)
        lse = torch.full((BH, p.nqb, c), _NEG_INF, dtype=compute_dtype(q.dtype), device=dev)
        qb = q.view(BH, p.nqb, c, D)
        # torch's CPU flash kernel needs one head size for q, k and v
        use_flash = dev.type == "cpu" and p.dropout_p == 0.0 and v.shape[-1] == D and _flash_cpu_available()
        cdt = compute_dtype(q.dtype)
        for b, h, r0, r1 in p.groups:
            heads = r1 - r0
            clean_n = _budget(p, 1, FORWARD_ELEMENTS) if use_flash else _budget(p, heads, CHUNK_ELEMENTS)
            for s, e, clean in _schedule(p, b, h, clean_n, _budget(p, heads, CHUNK_ELEMENTS), dev):
                if clean and use_flash and p.sub is not None:  # heads one by one: cache-sized outputs
                    for r in range(r0, r1):
                        out[r, s:e], lse[r, s:e] = _flash_band_clean(p, qb, k, v, r, s, e)
                    continue
                if clean:
                    bias = p.shared_bias.to(q.dtype if use_flash else cdt)[None, None].expand(
                        1, e - s, c, p.L
                    )
                    any_key = p.shared_any.expand(e - s, c)
                else:
                    bias, any_key = _chunk_bias(p, b, h, s, e, q.dtype if use_flash else cdt, dev)
                    if not bool(any_key.any()):
                        continue
                Q, bias = (
                    _flat_rows(p, qb[r0:r1, s:e]),
                    _flat_rows(p, bias),
                )  # (Gh, g', c', D), (1, g', c', L)
                K, V = (
                    _chunk_keys(p, k, r0, r1, b, h, s, e, clean),
                    _chunk_keys(p, v, r0, r1, b, h, s, e, clean),
                )
                if use_flash:
                    o, l = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                        Q, K, V, attn_mask=bias, scale=p.scale
                    )
                else:
                    S = torch.matmul(Q.to(cdt), K.to(cdt).transpose(-1, -2)).mul_(p.scale).add_(bias)
                    l = torch.logsumexp(S, dim=-1)
                    has_key = any_key.reshape(l.shape[-2:])
                    P = torch.exp(S - torch.where(has_key, l, torch.zeros_like(l))[..., None])
                    if p.dropout_p > 0.0:
                        P = P * _dropout_scale(p, drop, b, h, r0, r1, s, e, cdt, dev)
                    o = torch.matmul(P, V.to(cdt)).to(q.dtype)
                out[r0:r1, s:e] = o.view(heads, e - s, c, -1)
                lse[r0:r1, s:e] = torch.where(any_key, l.view(heads, e - s, c).to(lse.dtype), _NEG_INF)
        out = out.view(BH, p.nqb * c, -1)
        lse = lse.view(BH, p.nqb * c)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.p, ctx.drop = p, drop
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        p: _Prep = ctx.p
        BH, nq_pad, D = q.shape
        f32 = compute_dtype(q.dtype)
        # contiguous: the band backward reads windows of it with as_strided (``out.sum().backward()``
        # hands in an expanded, stride-0 gradient)
        d_out = torch.zeros_like(out) if d_out is None else d_out.contiguous()
        d_out = d_out.view(BH, p.nqb, p.c, -1)
        # delta_i = sum_d dO * O - dlse (the log-sum-exp output's own gradient folds in here)
        delta = _row_dot(d_out, out.view(BH, p.nqb, p.c, -1), f32)  # in cache-sized steps
        if d_lse is not None:
            delta = delta - d_lse.view(BH, p.nqb, p.c).to(f32)
        lse4 = lse.view(BH, p.nqb, p.c)
        # a row with no allowed key has constant outputs (zeros, -inf): no gradient reaches q, k or v
        # whatever flows into it (dS = P (dP - delta) with P = 0 must not meet an infinite delta)
        delta = torch.where(torch.isinf(lse4), torch.zeros_like(delta), delta)
        # rows without keys: +inf makes every probability exp(s - inf) = 0
        lse4 = torch.where(torch.isinf(lse4), torch.full_like(lse4, float("inf")), lse4)
        dq = torch.empty(BH, p.nqb, p.c, D, dtype=f32, device=q.device)
        # the per-head band path pays off on long sequences; short ones batch all heads per chunk
        band = p.offsets is not None and p.dropout_p == 0.0 and p.nqb >= BAND_BACKWARD_MIN_BLOCKS
        rows = k.shape[1]
        if band:  # key gradients: room for whole key tiles, every row of which the band path writes
            rows = -(-rows // _band_tile(p)) * _band_tile(p)
        alloc = torch.empty if band else torch.zeros
        dk = alloc(BH, rows, D, dtype=f32, device=q.device)
        dv = alloc(BH, rows, v.shape[-1], dtype=f32, device=q.device)
        if band:
            _backward_band(p, q.view(BH, p.nqb, p.c, D), k, v, d_out, delta, lse4, dq, dk, dv)
        else:
            dq.zero_()
            qs = (q.to(f32) * p.scale).view(BH, p.nqb, p.c, D)  # scaled queries: S = qs k^T
            _backward_generic(p, ctx.drop, qs, k, v, d_out, delta, lse4, dq, dk, dv)
            dq.mul_(p.scale)
        nk = k.shape[1]
        return dq.view(BH, nq_pad, D).to(q.dtype), dk[:, :nk].to(k.dtype), dv[:, :nk].to(v.dtype), None, None


def _probabilities(S, lse, mask01):  # noqa: D401
    """exp(S - lse) on allowed entries, exactly 0 elsewhere. Clamping keeps exp on its fast path
    (masked and underflowing entries make the vectorised exp ~6x slower); allowed entries are
    always <= 0 and those below -87 contribute less than 1e-37."""
    return S.sub_(lse).clamp_(-87.0, 0.0).exp_().mul_(mask01)


def _backward_generic(p, drop, qs, k, v, d_out, delta, lse4, dq, dk, dv):
    """Any layout: all heads of a group at once per chunk; key gradients scattered back."""
    dev = qs.device
    for b, h, r0, r1 in p.groups:
        step = _budget(p, r1 - r0, CHUNK_ELEMENTS)
        for s, e, clean in _schedule(p, b, h, step, step, dev):
            mask01, any_key = _chunk_mask(p, b, h, s, e, clean, dev, qs.dtype)
            if not bool(any_key.any()):
                continue
            g = e - s
            Q, dO = _flat_rows(p, qs[r0:r1, s:e]), _flat_rows(p, d_out[r0:r1, s:e].to(qs.dtype))
            mask01 = _flat_rows(p, mask01.expand(g, p.c, p.L))
            lse_c, delta_c = (_flat_rows(p, t[r0:r1, s:e, :, None]) for t in (lse4, delta))
            K = _chunk_keys(p, k, r0, r1, b, h, s, e, clean).to(qs.dtype)
            V = _chunk_keys(p, v, r0, r1, b, h, s, e, clean).to(qs.dtype)
            P = _probabilities(torch.matmul(Q, K.transpose(-1, -2)), lse_c, mask01)
            dP = torch.matmul(dO, V.transpose(-1, -2))
            if p.dropout_p > 0.0:
                keep = _dropout_scale(p, drop, b, h, r0, r1, s, e, qs.dtype, dev)
                dV = torch.matmul((P * keep).transpose(-1, -2), dO)
                dP = dP * keep
            else:
                dV = torch.matmul(P.transpose(-1, -2), dO)
            dS = P.mul_(dP.sub_(delta_c))
            dq[r0:r1, s:e] = torch.matmul(dS, K).view(r1 - r0, g, p.c, -1)
            _accumulate(p, dk, torch.matmul(dS.transpose(-1, -2), Q), r0, r1, b, h, s, e)
            _accumulate(p, dv, dV, r0, r1, b, h, s, e)


def _accumulate(p: _Prep, dX: torch.Tensor, chunk: torch.Tensor, r0, r1, b, h, s, e):
    """Add a chunk's key gradients (Gh, g, L, D) (g = 1 in dense mode) back to the key rows they came from."""
    if p.mode == "dense":
        dX[r0:r1, : p.L] += chunk.sum(1)
    else:
        rows = _key_rows(p, b, h, s, e, dX.device).clamp(0, dX.shape[1] - 1).flatten()
        dX[r0:r1].index_add_(1, rows, chunk.reshape(r1 - r0, -1, chunk.shape[-1]))


# ----------------------------------------------------------------------------- running plans


def _gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x (B, H, n, D), index (Bl, Hl, m) -> (B, H, m, D)."""
    B, H, n, D = x.shape
    d = _class_stride(index, n)
    if d:  # a transpose, not a gather
        return to_classes(x, d, 2)
    idx = index.to(x.device).expand(B, H, -1)
    return x.gather(2, idx[..., None].expand(-1, -1, -1, D))


def _class_stride(index: torch.Tensor | None, n: int) -> int:
    """d if ``index`` (1, 1, n) is the residue-class order of all n rows with n % d == 0 (``residue_order``:
    row r * (n // d) + t of the component is row t * d + r), else 0. Then the component's rows are the
    (n // d, d) transpose of the tensor's: one copy each way instead of a gather and a scatter (at 16k
    tokens, Strided(128)'s gathers, scatters and their backward were ~30% of its forward+backward)."""
    if index is None or tuple(index.shape) != (1, 1, n) or n < 2:
        return 0
    d = int(index[0, 0, 1])
    if d < 2 or d >= n or n % d:
        return 0
    order = torch.arange(n, device=index.device).view(n // d, d).t().flatten()
    return d if torch.equal(index[0, 0], order) else 0


def _component_rows(index, valid, n: int, B: int, H: int, device, in_place: int = 0) -> _Rows:
    """Where a component's rows are in a tensor of n rows (``fused_components._Rows``); class rows are
    read in place where ``in_place`` (the block) divides the rows per class."""
    if index is None:
        return _Rows()
    d = _class_stride(index, n) if valid is None else 0
    if d:
        return _Rows(d=d, strided=bool(in_place) and (n // d) % in_place == 0)
    flat = index.to(device).expand(B, H, -1).reshape(B * H, -1)
    if valid is not None:
        valid = valid.to(device)[:, None, :].expand(B, H, -1).reshape(B * H, -1)
    return _Rows(index=flat, valid=valid)


def _kept_key(q, k, key_valid, scale, dropout_p):
    """What a component's preparation and kernel arguments depend on besides the component: the input's
    shape, the dropout probability (the seed is an argument of each call) and its padding mask (by its bytes;
    on CPU only). None where they cannot be kept (a GPU mask would have to be read back)."""
    if key_valid is not None and key_valid.device.type != "cpu":
        return None
    mask = None if key_valid is None else key_valid.numpy().tobytes()
    return (*q.shape[:3], k.shape[2], scale, dropout_p, q.device, mask)


def _plan_run(q, k, v, comp: Component, key_valid, scale, dropout_p, kept_key=None):
    """(run, prep): the component as a run of the plan's one compiled node (``_FusedPlan``), or None
    where it runs on the PyTorch path (``run_component``, which takes the preparation). Both are kept on the
    component under ``kept_key`` (``_kept_key``) where it is given: a model's later calls (every layer that
    shares the pattern and the mask, every step without padding) skip them. BigBird(64) forward+backward,
    H=12 D=64, the code before and after in alternating processes: n = 256 (H=2) 2.8-3.9 -> 1.5 ms,
    n = 4,096 176-194 -> 164-166 ms; 15 ms of a 16k SparseTransformerForMaskedLM step; with padding (B=2,
    n = 4,096, the same mask again) planning 6.9 -> 0.1 ms of a ~320 ms call. Which kernel runs is still
    decided on every call."""
    B, H, n = q.shape[:3]
    nq = n if comp.q_index is None else comp.q_index.shape[-1]
    nk = k.shape[2] if comp.k_index is None else comp.k_index.shape[-1]

    def keep(key, make):
        return make() if kept_key is None else kept(comp, (key, *kept_key), make)

    def prepare():
        d = 0  # the class stride of a band inside residue classes, where its rows are all classes
        if comp.class_band is not None and k.shape[2] == n:
            d = _class_stride(comp.q_index, n)
            d = d if _class_stride(comp.k_index, n) == d else 0
        kv = key_valid  # a kept preparation holds its own copy: the caller's mask may change
        if kept_key is not None and key_valid is not None:
            kv = key_valid.clone()
        return _prepare(comp, B, H, nq, nk, kv, scale, dropout_p, q.device), d

    p, d = keep("prep", prepare)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    kind = _fused_kind(p, q, grad, v.shape[-1], d)
    if kind is None:
        return None, p
    return keep(kind, lambda: _new_run(kind, q, k, p, d)), p


def _new_run(kind: str, q, k, p: _Prep, d: int) -> _Run:
    """The kernel's arguments for one prepared component (``d``: its class stride, or 0)."""
    B, H, n = q.shape[:3]
    if kind == "class_band":  # the kernel reads and writes the tensors' rows itself
        return _Run(kind, p, _class_band_args(p, B, H, q.device, d))
    if kind == "range":  # so does this one
        return _Run(kind, p, _range_args(p, B, H, q.device))
    if kind == "band":
        args = _fused_band_args(p, B, H, q.device)
    else:
        args = _fused_tables(p, B * H, q.device)
    in_place = p.c if kind == "tables" else 0  # the table kernel reads class rows with a row stride
    q_rows = _component_rows(p.comp.q_index, p.comp.q_valid, n, B, H, q.device, in_place)
    k_rows = _component_rows(p.comp.k_index, None, k.shape[2], B, H, q.device, in_place)
    return _Run(kind, p, args, q_rows, k_rows)


def _flat(q, k, v):
    """(B, H, n, D) -> contiguous (B * H, n, D): a view, or a copy in the kernel's pool."""
    return tuple(fused.contiguous(t).view(-1, *t.shape[2:]) for t in (q, k, v))


def run_component(
    q, k, v, comp: Component, key_valid, scale, dropout_p=0.0, seed=0, p: _Prep | None = None, head=(1, 0)
):
    """One component on the PyTorch path -> (out (B, H, nq, Dv), lse (B, H, nq)) in the query tensor's
    rows (``p``: its preparation, where the caller has it)."""
    B, H, nq_t, D = q.shape
    device = q.device
    qs = q if comp.q_index is None else _gather_rows(q, comp.q_index)
    ks = k if comp.k_index is None else _gather_rows(k, comp.k_index)
    vs = v if comp.k_index is None else _gather_rows(v, comp.k_index)
    nq, nk = qs.shape[-2], ks.shape[-2]
    p = p or _prepare(comp, B, H, nq, nk, key_valid, scale, dropout_p, device)
    c = p.c
    # flatten (B, H) and pad rows to whole blocks (plus the band's look-around margins)
    qf = pad_rows(qs.reshape(B * H, nq, D), 0, p.nqb * c - nq)
    if p.mode == "band":  # edges are gathered with clamped rows; interior windows are views
        kf, vf = ks.reshape(B * H, nk, D), vs.reshape(B * H, nk, -1)
    elif p.mode == "dense":
        kf = pad_rows(ks.reshape(B * H, nk, D), 0, p.L - nk)
        vf = pad_rows(vs.reshape(B * H, nk, -1), 0, p.L - nk)
    else:  # one extra zero block at the end serves the -1 slots
        extra = comp.layout.num_kv_blocks * c - nk + c
        kf = pad_rows(ks.reshape(B * H, nk, D), 0, extra)
        vf = pad_rows(vs.reshape(B * H, nk, -1), 0, extra)
    if not (qf.is_contiguous() and kf.is_contiguous() and vf.is_contiguous()):
        qf, kf, vf = qf.contiguous(), kf.contiguous(), vf.contiguous()
    out, lse = _BlockSparse.apply(qf, kf, vf, p, (float(dropout_p), int(seed), *head))
    out = out[:, :nq].view(B, H, nq, -1)
    lse = lse[:, :nq].view(B, H, nq)
    return _to_query_rows(comp, out, lse, nq_t)


def _to_query_rows(comp: Component, out, lse, nq_t: int):
    """A component's (out, lse) in its own query rows -> the query tensor's rows."""
    if comp.q_index is None:
        return out, lse
    B, H, device = out.shape[0], out.shape[1], out.device
    d = _class_stride(comp.q_index, nq_t) if comp.q_valid is None and out.shape[2] == nq_t else 0
    if d:  # a permutation of all rows: its inverse is the transpose back (rows without keys: 0, -inf)
        return from_classes(out, d, 2), from_classes(lse, d, 2)
    # back to the query tensor's rows; rows outside the component get zeros and -inf
    idx = comp.q_index.to(device).expand(B, H, -1)
    valid = (
        torch.ones(idx.shape, dtype=torch.bool, device=device)
        if comp.q_valid is None
        else comp.q_valid.to(device)[:, None, :].expand(B, H, -1)
    )
    # ragged index sets point their unused slots at row 0: they add zeros and are not "covered"
    keep = valid & torch.isfinite(lse)
    out = out * keep[..., None]
    full_out = torch.zeros(B, H, nq_t, out.shape[-1], dtype=out.dtype, device=device).scatter_add(
        2, idx[..., None].expand_as(out), out
    )
    full_lse = torch.zeros(B, H, nq_t, dtype=lse.dtype, device=device).scatter_add(
        2, idx, torch.where(keep, lse, torch.zeros_like(lse))
    )
    covered = torch.zeros(B, H, nq_t, dtype=torch.int32, device=device).scatter_add(2, idx, keep.int()) > 0
    return full_out, torch.where(covered, full_lse, torch.full_like(full_lse, _NEG_INF))


def blocked_attention(
    q, k, v, plan: Plan, key_valid=None, scale=None, dropout_p=0.0, seed=0, return_lse=False, head=(1, 0)
):
    """Run a plan. q: (B, H, nq, D), k/v: (B, H, nk, D), key_valid: (B, nk) bool or None. ``head``: (m, a)
    where row r of the flattened (B * H) rows is row r * m + a of the caller's (a head run alone: its dropout
    is that head's)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if q.dtype in (torch.float16, torch.bfloat16) and q.device.type == "cpu" and fused.available():
        # the compiled kernels take float32 and float64: half precision runs on float32 copies (the kernels and
        # the PyTorch path compute in float32 either way), rounded once at the end, gradients too (the casts'
        # backward). Before, it ran on the PyTorch path: SlidingWindow(256), B=1 H=4 D=64, 4,096 tokens,
        # forward+backward, one thread: bf16 98 ms, fp16 136 ms, float32 50 ms; now about float32's time
        out = blocked_attention(
            q.float(), k.float(), v.float(), plan, key_valid, scale, dropout_p, seed, return_lse, head
        )
        return (out[0].to(q.dtype), out[1]) if return_lse else out.to(q.dtype)
    if plan.per_head is not None:
        H, (m, a) = q.shape[1], head
        outs = [
            blocked_attention(
                q[:, h : h + 1],
                k[:, h : h + 1],
                v[:, h : h + 1],
                ph,
                key_valid,
                scale,
                dropout_p,
                seed,
                True,
                (H * m, h * m + a),
            )
            for h, ph in enumerate(plan.per_head)
        ]
        out, lse = torch.cat([o for o, _ in outs], 1), torch.cat([l for _, l in outs], 1)
        return (out, lse) if return_lse else out
    # components on the compiled kernels run as one node (shared gradients, no merge backward)
    runs, parts = [], []
    kept_key = _kept_key(q, k, key_valid, scale, dropout_p)
    # parts to be merged run in the compute dtype, half precision on float32 copies of q, k, v (as the dense
    # reference and SDPA compute; their gradients summed there), and are cast once after the merge; float32 and
    # float64: no copy. bf16 Strided(8), n=200: error 0.0111 when each part, its weight and the sum were rounded,
    # 0.0074 rounding each part's output, 0.0039 now (dense 0.0039, sdpa 0.0050)
    dt = compute_dtype(q.dtype) if len(plan.components) > 1 else q.dtype
    qc, kc, vc = q.to(dt), k.to(dt), v.to(dt)
    for comp in plan.components:
        run, p = _plan_run(q, k, v, comp, key_valid, scale, dropout_p, kept_key)
        if run is not None:
            runs.append(run)
        else:
            parts.append(run_component(qc, kc, vc, comp, key_valid, scale, dropout_p, seed, p, head))
    if runs:
        B, H, nq = q.shape[:3]
        out, lse = _FusedPlan.apply(*_flat(q, k, v), runs, (float(dropout_p), int(seed), *head))
        parts.append((out.view(B, H, nq, -1), lse.view(B, H, nq)))
    if not parts:
        B, H, nq, _ = q.shape
        out = q.new_zeros(B, H, nq, v.shape[-1]) + 0 * (q.sum() + k.sum() + v.sum())
        lse = torch.full((B, H, nq), _NEG_INF, device=q.device)
        return (out, lse) if return_lse else out
    out, lse = merge_partials(parts)
    out = out.to(q.dtype)
    return (out, lse) if return_lse else out


__all__ = ["blocked_attention", "merge_partials", "run_component"]
