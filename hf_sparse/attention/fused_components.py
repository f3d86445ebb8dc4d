"""Components on the compiled CPU kernels of ``fused.py``: which kernel runs a component (``_fused_kind``,
the measured default rule ``FUSED_DEFAULT``), the tables and band arguments the kernels take, and their
autograd functions: the band kernel (``_FusedBand``: one contiguous key window per tile of
``FUSED_BAND_ROWS`` queries) and the table kernel (``_FusedBlockSparse``: key-block tables and partial
0/1 tiles built here, the rule evaluated only in tiles that are not full)."""

from __future__ import annotations

import torch

from . import fused
from .prepare import _Prep, _row_dot

# Query rows per tile of the compiled band kernel (its keys: FUSED_BAND_ROWS + band width - 1). 64 over 32
# and 128 at 8k, window 512 (contended, same process, alternating): forward 1.50 s vs 1.85 / 1.48 s,
# backward 2.00 s vs 2.28 / 2.32 s.
FUSED_BAND_ROWS = 64
# Widest band (key offsets) for that kernel: one tile's scores, FUSED_BAND_ROWS x (rows + width) floats,
# should stay in cache; wider bands (e.g. a window as long as the sequence) run on the table kernel.
FUSED_BAND_MAX_WIDTH = 4096


# Where the compiled kernels run by default: (kind, with gradients). Measured, B=1 H=12 D=64 float32,
# both paths in one process, alternating (``scripts/compare_kernel_paths.py --paths fused fallback``,
# idle host, 2 threads, matmul 186-193 GFLOP/s), seconds compiled / pure-PyTorch path of ``blocked.py``:
#
# * n=16384 forward+backward: SlidingWindow(512) 0.704 / 1.247, causal window 0.716 / 1.265,
#   BigBird(64) 1.154 / 2.317, Strided(128) 0.742 / 1.180, Fixed(128, 8) 1.011 / 3.637,
#   Dilated(256, 2) 0.631 / 1.382, Longformer(512) + a global token 1.025 / 1.736;
# * n=16384 forward (no grad): SlidingWindow 0.206 / 0.301, BigBird 0.403 / 0.759, Strided 0.256 / 0.435;
# * n=1024 and 4096 forward+backward: SlidingWindow 0.044 / 0.101 and 0.167 / 0.322, BigBird
#   0.061 / 0.137 and 0.256 / 0.540, Strided 0.030 / 0.053 and 0.138 / 0.223.
#
# So the compiled kernels run everywhere they apply. (Before their exp and row passes were written with
# explicit vectors, GCC had left them scalar and only the table kernel's forward+backward won.)
FUSED_DEFAULT = {("band", False), ("band", True), ("tables", False), ("tables", True)}


def _fused_kind(p: _Prep, q: torch.Tensor, grad: bool) -> str | None:
    """Which compiled kernel (``fused.py``) runs this component: ``"band"`` for translation-invariant
    bands (sliding windows: one contiguous key window per ``FUSED_BAND_ROWS``-row query tile),
    ``"tables"`` for gathered, dense and other band components, None for the pure-PyTorch path (not
    CPU, dropout, half precision, the kernel not built / ``HF_SPARSE_FUSED=0``, or, by default, a
    (kind, grad) the measurements above do not put in ``FUSED_DEFAULT``). ``grad``: the call needs a
    backward."""
    if q.device.type != "cpu" or p.dropout_p > 0.0 or q.dtype not in (torch.float32, torch.float64):
        return None
    if p.mode == "band" and p.offsets is not None and p.offsets[1] - p.offsets[0] < FUSED_BAND_MAX_WIDTH:
        kind = "band"
    else:
        kind = "tables"
    if fused.mode() != "all" and (kind, grad) not in FUSED_DEFAULT:
        return None  # decided before loading: a process that never runs the kernel never loads it
    return kind if fused.available() else None


def _tile_blocks(p: _Prep, b: int, h: int, device):
    """Key block and full flag of every (query block, slot) of one group: (nqb, K) int64 (-1: none)
    and (nqb, K) bool, for every mode (band slots are ``qb + lo + slot``)."""
    lay, nqb = p.comp.layout, p.nqb
    pick = lambda t: t[min(b, t.shape[0] - 1), min(h, t.shape[1] - 1)].to(device)  # noqa: E731
    if p.mode == "gather":
        return pick(lay.kv_index), pick(lay.full)
    if p.mode == "dense":
        K = lay.num_kv_blocks
        return torch.arange(K, device=device).expand(nqb, K), pick(lay.full)
    lo, hi = lay.band  # kv_index rows are compacted at the edges: put full flags back in window slots
    idx, flags = pick(lay.kv_index), pick(lay.full)
    slot = idx - (torch.arange(nqb, device=device)[:, None] + lo)
    ok = (idx >= 0) & (slot >= 0) & (slot <= hi - lo)
    full = torch.zeros(nqb, hi - lo + 1, dtype=torch.bool, device=device)
    full.scatter_(1, torch.where(ok, slot, torch.zeros_like(slot)), flags & ok)
    return torch.arange(nqb, device=device)[:, None] + lo + torch.arange(hi - lo + 1, device=device), full


def _fused_tables(p: _Prep, BH: int, device):
    """The component as tables for the kernel: kv (G, nqb, K) key blocks (-1: none), tidx (G, nqb, K)
    (-1: full tile, else an index into tiles (T, c, c) uint8), group (BH,) mask group of each row.

    Tiles the layout marks full and that hold no padding or sequence edge are full without looking
    inside; the rule (and padding) is evaluated only in the other kept tiles, which become partial
    tiles, full ones, or are dropped when they allow no pair. (Evaluating every tile's rule was a third
    of BigBird's forward at 16k.)"""
    c, nqb, comp = p.c, p.nqb, p.comp
    K = p.L // c
    G = len(p.groups)
    kv = torch.full((G, nqb, K), -1, dtype=torch.int32)
    tidx = torch.full((G, nqb, K), -1, dtype=torch.int32)
    group = torch.empty(BH, dtype=torch.int32)
    tiles, count = [], 0
    nkb = -(-p.nk // c)
    ar = torch.arange(c, device=device)
    for gi, (b, h, r0, r1) in enumerate(p.groups):
        group[r0:r1] = gi
        blocks, full = _tile_blocks(p, b, h, device)
        # row validity, padded to whole blocks (False past the end)
        q_ok = torch.zeros(nqb * c, dtype=torch.bool, device=device)
        q_ok[: p.nq] = True if p.q_valid is None else p.q_valid[b].to(device)
        k_ok = torch.zeros(nkb * c, dtype=torch.bool, device=device)
        k_ok[: p.nk] = True if p.key_valid is None else p.key_valid[b, min(h, p.key_valid.shape[1] - 1)]
        kept = (blocks >= 0) & (blocks < nkb)
        kb = blocks.clamp(0, max(nkb - 1, 0))
        clean = full & q_ok.view(nqb, c).all(-1)[:, None] & k_ok.view(nkb, c).all(-1)[kb]
        keep = kept & clean
        tile_id = torch.full((nqb, K), -1, dtype=torch.int64, device=device)
        look = (kept & ~clean).nonzero()  # (T, 2): (query block, slot) whose inside must be evaluated
        step = max(1, (1 << 22) // (c * c))
        for s in range(0, look.shape[0], step):
            qb, sl = look[s : s + step].unbind(1)
            rows, cols = qb[:, None] * c + ar, kb[qb, sl][:, None] * c + ar  # (T, c) component rows
            qr, kr = rows.clamp(max=p.nq - 1), cols.clamp(max=p.nk - 1)
            if comp.q_index is not None:
                qi = comp.q_index
                qr = qi[min(b, qi.shape[0] - 1), min(h, qi.shape[1] - 1)].to(device)[qr]
            if comp.k_index is not None:
                ki = comp.k_index
                kr = ki[min(b, ki.shape[0] - 1), min(h, ki.shape[1] - 1)].to(device)[kr]
            rule = comp.mask(b, h, (qr + comp.q_offset)[:, :, None], kr[:, None, :])
            allowed = (rule | full[qb, sl][:, None, None]) & q_ok[rows][:, :, None] & k_ok[cols][:, None, :]
            some, every = allowed.any(-1).any(-1), allowed.all(-1).all(-1)
            keep[qb[some], sl[some]] = True
            part = some & ~every
            n_part = int(part.sum())
            if n_part:
                tile_id[qb[part], sl[part]] = torch.arange(count, count + n_part, device=device)
                tiles.append(allowed[part].to(torch.uint8).cpu())
                count += n_part
        kv[gi] = torch.where(keep, blocks, -1).to(torch.int32).cpu()
        tidx[gi] = tile_id.to(torch.int32).cpu()
    tiles = torch.cat(tiles) if tiles else torch.zeros(1, c, c, dtype=torch.uint8)
    return kv, tidx, tiles.contiguous(), group


def _fused_band_args(p: _Prep, B: int, H: int, device):
    """The band as the kernel takes it: allowed offsets (uint8, from dmin), dmin, and key / query
    validity per flattened row ((B*H, n) uint8, or empty where every row is valid)."""
    dmin, _, allowed = p.offsets
    none = torch.empty(0, dtype=torch.uint8, device=device)
    kv = none
    if p.key_valid is not None:
        kv = p.key_valid.expand(B, H, p.nk).reshape(B * H, p.nk).to(torch.uint8).contiguous()
    qv = none
    if p.q_valid is not None:
        qv = p.q_valid[:, None].expand(B, H, p.nq).reshape(B * H, p.nq).to(torch.uint8).contiguous()
    return allowed.to(device=device, dtype=torch.uint8).contiguous(), dmin, kv, qv


def _delta(d_out: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, d_lse) -> torch.Tensor:
    """delta_i = sum_d dO * O - dlse, 0 on rows with no allowed key (their outputs are constants)."""
    delta = _row_dot(d_out, out, out.dtype)  # in cache-sized steps
    if d_lse is not None:
        delta = delta - d_lse.to(delta.dtype)
    return torch.where(torch.isinf(lse), torch.zeros_like(delta), delta).contiguous()


class _FusedBand(torch.autograd.Function):
    """A translation-invariant band through the compiled kernel: q (BH, nq, D), k/v (BH, nk, D)."""

    @staticmethod
    def forward(ctx, q, k, v, p: _Prep, band_args):
        out, lse = fused.ops().band_forward(q, k, v, *band_args, FUSED_BAND_ROWS, p.scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.p, ctx.band_args = p, band_args
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        d_out = torch.zeros_like(out) if d_out is None else d_out.contiguous().to(out.dtype)
        delta = _delta(d_out, out, lse, d_lse)
        dq, dk, dv = fused.ops().band_backward(
            q, k, v, d_out, lse, delta, *ctx.band_args, FUSED_BAND_ROWS, ctx.p.scale
        )
        return dq, dk, dv, None, None


class _FusedBlockSparse(torch.autograd.Function):
    """One component through the compiled kernel: q (BH, nq, D), k/v (BH, nk, D), unpadded."""

    @staticmethod
    def forward(ctx, q, k, v, p: _Prep):
        tables = _fused_tables(p, q.shape[0], q.device)
        out, lse = fused.ops().forward(q, k, v, *tables, p.c, p.scale)
        ctx.save_for_backward(q, k, v, out, lse, *tables)
        ctx.p = p
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse, *tables = ctx.saved_tensors
        p: _Prep = ctx.p
        d_out = torch.zeros_like(out) if d_out is None else d_out.contiguous().to(out.dtype)
        delta = _delta(d_out, out, lse, d_lse)
        dq, dk, dv = fused.ops().backward(q, k, v, d_out, lse, delta, *tables, p.c, p.scale)
        return dq, dk, dv, None
