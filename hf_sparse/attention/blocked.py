"""Block-sparse attention in plain PyTorch: exact forward and backward, any device, O(n) memory.

A plan (see ``patterns.base``) is a list of disjoint components. Each runs here as one
``torch.autograd.Function`` that walks its query blocks in chunks:

* the keys of a chunk are a zero-copy strided view for bands (``look-around``), the whole key
  sequence for dense rows, or a gather of the listed key blocks otherwise;
* a chunk's bias (0 / -inf) comes from the tiles' full flags, the rule evaluated in partial tiles,
  and key padding; one shared tile serves every interior chunk of a translation-invariant band;
* forward returns the output and the log-sum-exp of every row (rows with no allowed key: zeros
  and -inf), so components are merged exactly; backward recomputes probabilities chunk by chunk
  (FlashAttention style) and never stores a score matrix.

On CPU the forward of each chunk is the fused flash kernel behind ``scaled_dot_product_attention``
(fast, and it returns the log-sum-exp); elsewhere, or with dropout, it is three matmuls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..patterns.base import Component, Plan

_NEG_INF = float("-inf")
# Scores materialised per chunk (elements); small enough to stay in cache and to reuse allocations.
CHUNK_ELEMENTS = 1 << 19


def _flash_cpu_available() -> bool:
    return hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")


def pad_rows(x: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """Zero rows before/after along dim -2."""
    return F.pad(x, (0, 0, before, after)) if before or after else x


# ----------------------------------------------------------------------------- preparation


@dataclass
class _Prep:
    comp: Component
    c: int
    nq: int  # component query rows
    nk: int  # component key rows
    nqb: int
    mode: str  # "band" | "dense" | "gather"
    L: int  # keys seen by one query block
    pad_left: int  # rows of zeros before the keys (band)
    key_valid: torch.Tensor | None  # (B, Hk, nk) bool in component key rows, or None (all valid)
    q_valid: torch.Tensor | None  # (B, nq) bool, or None
    groups: list  # (b, h, row0, row1) over flattened batch*heads
    shared_bias: torch.Tensor | None  # (c, L) bias of an interior chunk of a translation-invariant band
    shared_any: torch.Tensor | None  # (c,) rows of that tile with at least one key
    scale: float
    dropout_p: float
    seed: int


def _is_dense(layout) -> bool:
    idx = layout.kv_index
    if idx.shape[-1] != layout.num_kv_blocks:
        return False
    return bool((idx == torch.arange(layout.num_kv_blocks, device=idx.device)).all())


def _prepare(comp: Component, B: int, H: int, nq: int, nk: int, key_valid, scale, dropout_p, seed, device) -> _Prep:
    lay = comp.layout
    c = lay.block
    nqb = lay.num_q_blocks
    if lay.band is not None and comp.identity:
        lo, hi = lay.band
        mode, L, pad_left = "band", (hi - lo + 1) * c, max(0, -lo) * c
    elif _is_dense(lay):
        mode, L, pad_left = "dense", lay.num_kv_blocks * c, 0
    else:
        mode, L, pad_left = "gather", lay.max_blocks * c, 0
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
    heads_vary = per_bh and any(t is not None and t.shape[1] > 1 for t in (lay.kv_index, comp.q_index, comp.k_index))
    heads_vary = heads_vary or (kv is not None and kv.shape[1] > 1) or comp.head_dependent
    batch_vary = per_bh or kv is not None or qv is not None or comp.batch_dependent
    if heads_vary:
        groups = [(b, h, b * H + h, b * H + h + 1) for b in range(B) for h in range(H)]
    elif batch_vary:
        groups = [(b, 0, b * H, (b + 1) * H) for b in range(B)]
    else:
        groups = [(0, 0, 0, B * H)]
    prep = _Prep(comp, c, nq, nk, nqb, mode, L, pad_left, kv, qv, groups, None, None, scale, dropout_p, seed)
    if mode == "band" and comp.translation_invariant:
        prep.shared_bias = _shared_band_bias(prep, device)
        prep.shared_any = (prep.shared_bias > _NEG_INF).any(-1)
    return prep


def _shared_band_bias(p: _Prep, device) -> torch.Tensor:
    """(c, L) bias of query block qb against keys starting at (qb + lo) * c: depends only on i - j."""
    c, lo = p.c, p.comp.layout.band[0]
    qb = max(-lo, 0)
    i = (qb * c + torch.arange(c, device=device))[:, None] + p.comp.q_offset
    j = ((qb + lo) * c + torch.arange(p.L, device=device))[None, :]
    allowed = p.comp.mask(0, 0, i, j)
    return torch.zeros(allowed.shape, device=device).masked_fill(~allowed, _NEG_INF)


# ----------------------------------------------------------------------------- per-chunk pieces


def _key_rows(p: _Prep, b: int, h: int, s: int, e: int, device) -> torch.Tensor:
    """(g, L) component key rows seen by query blocks s..e (padding rows point past nk)."""
    c = p.c
    if p.mode == "band":
        lo = p.comp.layout.band[0]
        return ((torch.arange(s, e, device=device) + lo) * c)[:, None] + torch.arange(p.L, device=device)
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
        full = lay.full[min(b, lay.full.shape[0] - 1), min(h, lay.full.shape[1] - 1), s:e].to(device).repeat_interleave(c, dim=1)
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
        qr, kr = rows.clamp(max=p.nq - 1), cols.clamp(0, p.nk - 1)
        if comp.q_index is not None:
            qi = comp.q_index
            qr = qi[min(b, qi.shape[0] - 1), min(h, qi.shape[1] - 1)].to(device)[qr]
        if comp.k_index is not None:
            ki = comp.k_index
            kr = ki[min(b, ki.shape[0] - 1), min(h, ki.shape[1] - 1)].to(device)[kr]
        rule = comp.mask(b, h, (qr + comp.q_offset)[:, :, None], kr[:, None, :])
        allowed = (rule | full[:, None, :]) & ok_q[:, :, None] & ok_k[:, None, :]
    bias = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, _NEG_INF)
    return bias[None], allowed.any(-1)


def _chunk_keys(p: _Prep, X: torch.Tensor, r0: int, r1: int, b: int, h: int, s: int, e: int):
    """Keys (or values) of query blocks s..e for rows r0..r1: (Gh, g, L, D)."""
    c, D = p.c, X.shape[-1]
    if p.mode == "band":
        return X.as_strided((r1 - r0, e - s, p.L, D), (X.stride(0), c * D, D, 1), X.storage_offset() + r0 * X.stride(0) + s * c * D)
    if p.mode == "dense":
        return X[r0:r1, None].expand(-1, e - s, -1, -1)
    rows = _key_rows(p, b, h, s, e, X.device).clamp(max=X.shape[1] - 1)  # padding slots -> zero block
    return X[r0:r1][:, rows]


def _chunk_size(p: _Prep, heads: int) -> int:
    return max(1, min(p.nqb, CHUNK_ELEMENTS // max(1, heads * p.c * p.L)))


def _dropout_mask(p: _Prep, shape, group_i: int, s: int, device) -> torch.Tensor:
    gen = torch.Generator(device=device)
    gen.manual_seed((p.seed * 1_000_003 + group_i * 65_537 + s) % (2**63 - 1))
    return torch.rand(shape, generator=gen, device=device) >= p.dropout_p


# ----------------------------------------------------------------------------- the autograd function


class _BlockSparse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, p: _Prep):
        # q: (BH, nq_pad, D); k, v: (BH, rows, D) already padded for the mode
        BH, nq_pad, D = q.shape
        c = p.c
        out = torch.zeros(BH, p.nqb, c, v.shape[-1], dtype=q.dtype, device=q.device)
        lse = torch.full((BH, p.nqb, c), _NEG_INF, dtype=torch.float32, device=q.device)
        qb = q.view(BH, p.nqb, c, D)
        use_flash = q.device.type == "cpu" and p.dropout_p == 0.0 and _flash_cpu_available()
        for gi, (b, h, r0, r1) in enumerate(p.groups):
            step = _chunk_size(p, r1 - r0)
            for s in range(0, p.nqb, step):
                e = min(s + step, p.nqb)
                bias, any_key = _chunk_bias(p, b, h, s, e, q.dtype if use_flash else torch.float32, q.device)
                if not bool(any_key.any()):
                    continue
                Q, K, V = qb[r0:r1, s:e], _chunk_keys(p, k, r0, r1, b, h, s, e), _chunk_keys(p, v, r0, r1, b, h, s, e)
                if use_flash:
                    o, l = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(Q, K, V, attn_mask=bias, scale=p.scale)
                else:
                    S = torch.matmul(Q.float(), K.float().transpose(-1, -2)).mul_(p.scale).add_(bias)
                    l = torch.logsumexp(S, dim=-1)
                    P = torch.exp(S - torch.where(any_key, l, torch.zeros_like(l))[..., None])
                    if p.dropout_p > 0.0:
                        P = P * _dropout_mask(p, P.shape, gi, s, q.device) / (1.0 - p.dropout_p)
                    o = torch.matmul(P, V.float()).to(q.dtype)
                out[r0:r1, s:e] = o
                lse[r0:r1, s:e] = torch.where(any_key, l.float(), _NEG_INF)
        out = out.view(BH, p.nqb * c, -1)
        lse = lse.view(BH, p.nqb * c)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.p = p
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        p: _Prep = ctx.p
        BH, nq_pad, D = q.shape
        c = p.c
        f32 = torch.float32
        dq = torch.zeros(BH, p.nqb, c, D, dtype=f32, device=q.device)
        dk = torch.zeros(k.shape, dtype=f32, device=q.device)
        dv = torch.zeros(v.shape, dtype=f32, device=q.device)
        if d_out is None:
            d_out = torch.zeros_like(out)
        d_out = d_out.view(BH, p.nqb, c, -1)
        o4 = out.view(BH, p.nqb, c, -1)
        # delta_i = sum_d dO * O - dlse (the log-sum-exp output's own gradient folds in here)
        delta = (d_out.float() * o4.float()).sum(-1)
        if d_lse is not None:
            delta = delta - d_lse.view(BH, p.nqb, c).float()
        lse4 = lse.view(BH, p.nqb, c)
        lse_safe = torch.where(torch.isinf(lse4), torch.full_like(lse4, float("inf")), lse4)
        qb4 = q.view(BH, p.nqb, c, D)
        dq_dtype = q.dtype
        for gi, (b, h, r0, r1) in enumerate(p.groups):
            step = _chunk_size(p, r1 - r0)
            for s in range(0, p.nqb, step):
                e = min(s + step, p.nqb)
                bias, any_key = _chunk_bias(p, b, h, s, e, f32, q.device)
                if not bool(any_key.any()):
                    continue
                Q = qb4[r0:r1, s:e].float()
                K = _chunk_keys(p, k, r0, r1, b, h, s, e).float()
                V = _chunk_keys(p, v, r0, r1, b, h, s, e).float()
                dO = d_out[r0:r1, s:e].float()
                S = torch.matmul(Q, K.transpose(-1, -2)).mul_(p.scale).add_(bias)
                P = torch.exp(S.sub_(lse_safe[r0:r1, s:e, :, None]))  # (Gh, g, c, L)
                dP = torch.matmul(dO, V.transpose(-1, -2))
                if p.dropout_p > 0.0:
                    keep = _dropout_mask(p, P.shape, gi, s, q.device) / (1.0 - p.dropout_p)
                    dV = torch.matmul((P * keep).transpose(-1, -2), dO)
                    dP = dP * keep
                else:
                    dV = torch.matmul(P.transpose(-1, -2), dO)
                dS = P.mul_(dP.sub_(delta[r0:r1, s:e, :, None])).mul_(p.scale)
                dq[r0:r1, s:e] = torch.matmul(dS, K)
                dK = torch.matmul(dS.transpose(-1, -2), Q)
                _accumulate(p, dk, dK, r0, r1, b, h, s, e)
                _accumulate(p, dv, dV, r0, r1, b, h, s, e)
        return dq.view(BH, nq_pad, D).to(dq_dtype), dk.to(k.dtype), dv.to(v.dtype), None


def _accumulate(p: _Prep, dX: torch.Tensor, chunk: torch.Tensor, r0, r1, b, h, s, e):
    """Add a chunk's key gradients (Gh, g, L, D) back to the key rows they came from."""
    c, g = p.c, e - s
    if p.mode == "band":
        nblk = p.L // c
        for o in range(nblk):
            start = s * c + o * c
            dX[r0:r1, start : start + g * c].view(r1 - r0, g, c, -1).add_(chunk[:, :, o * c : (o + 1) * c])
    elif p.mode == "dense":
        dX[r0:r1, : p.L] += chunk.sum(1)
    else:
        rows = _key_rows(p, b, h, s, e, dX.device).clamp(max=dX.shape[1] - 1).flatten()
        dX[r0:r1].index_add_(1, rows, chunk.reshape(r1 - r0, -1, chunk.shape[-1]))


# ----------------------------------------------------------------------------- running plans


def _gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x (B, H, n, D), index (Bl, Hl, m) -> (B, H, m, D)."""
    B, H, _, D = x.shape
    idx = index.to(x.device).expand(B, H, -1)
    return x.gather(2, idx[..., None].expand(-1, -1, -1, D))


def run_component(q, k, v, comp: Component, key_valid, scale, dropout_p=0.0, seed=0):
    """One component -> (out (B, H, nq, Dv), lse (B, H, nq)) in the query tensor's rows."""
    B, H, nq_t, D = q.shape
    nk_t = k.shape[-2]
    device = q.device
    qs = q if comp.q_index is None else _gather_rows(q, comp.q_index)
    ks = k if comp.k_index is None else _gather_rows(k, comp.k_index)
    vs = v if comp.k_index is None else _gather_rows(v, comp.k_index)
    nq, nk = qs.shape[-2], ks.shape[-2]
    p = _prepare(comp, B, H, nq, nk, key_valid, scale, dropout_p, seed, device)
    c = p.c
    # flatten (B, H) and pad rows to whole blocks (plus the band's look-around margins)
    qf = pad_rows(qs.reshape(B * H, nq, D), 0, p.nqb * c - nq)
    if p.mode == "band":
        lo, hi = comp.layout.band
        right = p.nqb * c - nk + max(0, hi) * c
        kf = pad_rows(ks.reshape(B * H, nk, D), p.pad_left, right)
        vf = pad_rows(vs.reshape(B * H, nk, -1), p.pad_left, right)
    elif p.mode == "dense":
        kf = pad_rows(ks.reshape(B * H, nk, D), 0, p.L - nk)
        vf = pad_rows(vs.reshape(B * H, nk, -1), 0, p.L - nk)
    else:  # one extra zero block at the end serves the -1 slots
        extra = comp.layout.num_kv_blocks * c - nk + c
        kf = pad_rows(ks.reshape(B * H, nk, D), 0, extra)
        vf = pad_rows(vs.reshape(B * H, nk, -1), 0, extra)
    if not (qf.is_contiguous() and kf.is_contiguous() and vf.is_contiguous()):
        qf, kf, vf = qf.contiguous(), kf.contiguous(), vf.contiguous()
    out, lse = _BlockSparse.apply(qf, kf, vf, p)
    out = out[:, :nq].view(B, H, nq, -1)
    lse = lse[:, :nq].view(B, H, nq)
    if comp.q_index is None:
        return out, lse
    # back to the query tensor's rows; rows outside the component get zeros and -inf
    idx = comp.q_index.to(device).expand(B, H, -1)
    valid = torch.ones(idx.shape, dtype=torch.bool, device=device) if comp.q_valid is None else comp.q_valid.to(device)[:, None, :].expand(B, H, -1)
    # ragged index sets point their unused slots at row 0: they add zeros and are not "covered"
    keep = valid & torch.isfinite(lse)
    out = out * keep[..., None]
    full_out = torch.zeros(B, H, nq_t, out.shape[-1], dtype=out.dtype, device=device).scatter_add(2, idx[..., None].expand_as(out), out)
    full_lse = torch.zeros(B, H, nq_t, dtype=lse.dtype, device=device).scatter_add(2, idx, torch.where(keep, lse, torch.zeros_like(lse)))
    covered = torch.zeros(B, H, nq_t, dtype=torch.int32, device=device).scatter_add(2, idx, keep.int()) > 0
    return full_out, torch.where(covered, full_lse, torch.full_like(full_lse, _NEG_INF))


def merge_partials(parts):
    """Exact combination of softmax partials over disjoint key sets: [(out, lse)] -> out, lse."""
    if len(parts) == 1:
        return parts[0]
    lses = torch.stack([l for _, l in parts])  # (P, B, H, n)
    lse = torch.logsumexp(lses, dim=0)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    out = 0
    for o, l in parts:
        w = torch.exp(l - safe)  # 0 where l = -inf
        out = out + o * w[..., None].to(o.dtype)
    return out, lse


def blocked_attention(q, k, v, plan: Plan, key_valid=None, scale=None, dropout_p=0.0, seed=0, return_lse=False):
    """Run a plan. q: (B, H, nq, D), k/v: (B, H, nk, D), key_valid: (B, nk) bool or None."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if plan.per_head is not None:
        outs = [
            blocked_attention(q[:, h : h + 1], k[:, h : h + 1], v[:, h : h + 1], ph, key_valid, scale, dropout_p, seed + h, True)
            for h, ph in enumerate(plan.per_head)
        ]
        out, lse = torch.cat([o for o, _ in outs], 1), torch.cat([l for _, l in outs], 1)
        return (out, lse) if return_lse else out
    parts = [run_component(q, k, v, comp, key_valid, scale, dropout_p, seed + i) for i, comp in enumerate(plan.components)]
    if not parts:
        B, H, nq, _ = q.shape
        out = q.new_zeros(B, H, nq, v.shape[-1]) + 0 * (q.sum() + k.sum() + v.sum())
        lse = torch.full((B, H, nq), _NEG_INF, device=q.device)
        return (out, lse) if return_lse else out
    out, lse = merge_partials(parts)
    return (out, lse) if return_lse else out


__all__ = ["blocked_attention", "merge_partials", "run_component"]
