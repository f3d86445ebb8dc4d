"""The pure-PyTorch backward of translation-invariant bands (sliding windows), head by head on buffers
indexed by key offset (``_backward_band``), used by ``blocked._BlockSparse`` on long sequences."""

from __future__ import annotations

import torch

from .prepare import _Prep, _runs

BACKWARD_ELEMENTS = 1 << 19  # per head, per chunk of the band backward (S and dP; measured best at 16k)
BAND_BACKWARD_MIN_BLOCKS = 16
BAND_TILE = 32  # query rows per tile of the band backward (keys per tile: BAND_TILE + band width - 1)


def _backward_band(p, q, k, v, d_out, delta, lse4, dq, dk, dv):
    """Translation-invariant bands, head by head, in "skewed" storage: row i of a buffer holds the
    probabilities (or score gradients) of query i against keys i + dmin .. i + dmax, one column per
    offset. Query tiles of ``BAND_TILE`` rows see that many plus W - 1 keys, so few masked scores
    are computed; the same storage read with other strides is the key-major tile (tile rows are
    keys, columns the queries that see them), so dK and dV are matmuls over a long inner dimension
    written straight to their rows: no per-window gradients to fold, no edge cases to gather."""
    dmin, dmax, cols = p.offsets
    BH, nqb, c, D = q.shape
    nq_pad, nk, dev, cdt = nqb * c, k.shape[1], q.device, dq.dtype
    cs = _band_tile(p)
    W, nb, nkb = dmax - dmin + 1, nq_pad // cs, -(-nk // cs)
    Lw = cs + W - 1  # keys of a query tile, queries of a key tile
    pitch = -(-(2 * cs + W - 3) // 16) * 16 + 1  # >= 2 cs + W - 2 columns: every offset a tile reads
    top = max(0, dmax)  # storage row of query i is i + top - base (key tiles read queries down to -dmax)
    end = top + max(nq_pad, nkb * cs - dmin)  # storage rows of the whole head
    F_k = max(0, -dmin)  # padded key row of key j is j + F_k
    k_rows = F_k + max(nk, nq_pad + dmax)
    step = max(1, min(nb, BACKWARD_ELEMENTS // (cs * Lw)))
    # the buffers slide along the head: they keep only the rows that unfinished key tiles still read
    cap = min(end, top + step * cs + 2 * (W + 2 * cs))

    def qmajor(buf, base, s, e):  # (e - s, cs, Lw): query tile qb against keys qb * cs + dmin + t
        return buf.as_strided(
            (e - s, cs, Lw), (cs * pitch, pitch - 1, 1), (s * cs + top - base) * pitch + cs - 1
        )

    def kmajor(buf, base, s, e):  # (e - s, cs, Lw): key tile kb against queries kb * cs - dmax + t
        offset = (s * cs - dmax + top - base) * pitch + W + cs - 2
        return buf.as_strided((e - s, cs, Lw), (cs * pitch, 1, pitch - 1), offset)

    def windows(x, n):  # (n, Lw, X) zero-copy windows of x's rows, starting every cs rows
        return x.as_strided((n, Lw, x.shape[-1]), (cs * x.shape[-1], x.shape[-1], 1))

    # (cs, Lw) tile mask: row r sees column t iff offset t - r is allowed
    off = torch.arange(Lw, device=dev)[None, :] - torch.arange(cs, device=dev)[:, None]
    tile01 = ((off >= 0) & (off < W) & cols[off.clamp(0, W - 1)]).to(cdt)
    # columns a row never writes stay zero: rows keep their residue mod cs when the buffers slide
    P, dS = (torch.zeros((cap + 1) * pitch, device=dev, dtype=cdt) for _ in range(2))
    S = torch.empty(step, cs, Lw, device=dev, dtype=cdt)
    dP = torch.empty(step, cs, Lw, device=dev, dtype=cdt)
    # one head's keys, values, queries and output gradients with zero rows around them
    kp, vp = (
        torch.zeros(k_rows, D, device=dev, dtype=cdt),
        torch.zeros(k_rows, v.shape[-1], device=dev, dtype=cdt),
    )
    qp, dOp = torch.zeros(end, D, device=dev, dtype=cdt), torch.zeros(end, v.shape[-1], device=dev, dtype=cdt)
    neg_lse = (-lse4).view(BH, nb, cs)
    neg_delta = (-delta).view(BH, nb, cs, 1)
    for b, h, r0, r1 in p.groups:
        chunks = _band_chunks(p, b, h, cs, step, dmin, F_k, k_rows, tile01)
        for r in range(r0, r1):
            kp[F_k : F_k + nk], vp[F_k : F_k + nk] = k[r], v[r]
            # scaled queries: S = qp k^T and dK = dS^T qp need no further scaling
            torch.mul(q[r].reshape(nq_pad, D), p.scale, out=qp[top : top + nq_pad])
            dOp[top : top + nq_pad] = d_out[r].reshape(nq_pad, -1)
            kw, vw = windows(kp, nb), windows(vp, nb)  # (nb, Lw, D)
            Qt, dOt = qp[top : top + nq_pad].view(nb, cs, D), dOp[top : top + nq_pad].view(nb, cs, -1)
            dOw, qw = windows(dOp, nkb), windows(qp, nkb)
            dqr, dkr, dvr = dq[r].view(nb, cs, D), dk[r, : nkb * cs].view(nkb, cs, D), dv[r, : nkb * cs]
            dvr = dvr.view(nkb, cs, -1)
            base, done = 0, 0  # storage row of the buffers' first row; key tiles finished
            for buf in (P, dS):  # queries before the sequence
                buf[: top * pitch].zero_()
            for s, e, mask in chunks:
                last = e == nb
                if (end if last else e * cs + top) - base > cap:  # slide, keeping what key tile `done` reads
                    keep = (done * cs - dmax + top) // cs * cs
                    n = s * cs + top - keep
                    for buf in (P, dS):
                        src = buf[(keep - base) * pitch : (keep - base + n) * pitch]
                        buf[: n * pitch].copy_(src if keep - base >= n else src.clone())
                    base = keep
                if last:  # queries after the sequence: zero rows for the last key tiles
                    for buf in (P, dS):
                        buf[(nq_pad + top - base) * pitch : (end - base) * pitch].zero_()
                Pq, dSq = qmajor(P, base, s, e), qmajor(dS, base, s, e)
                Sx, dPx = S[: e - s], dP[: e - s]
                # S - lse in one op; masked and underflowing entries are clamped (fast exp) then zeroed
                torch.baddbmm(
                    neg_lse[r, s:e, :, None].expand(e - s, cs, Lw),
                    Qt[s:e],
                    kw[s:e].transpose(1, 2),
                    out=Sx,
                )
                torch.mul(Sx.clamp_(-87.0, 0.0).exp_(), mask, out=Pq)
                torch.baddbmm(
                    neg_delta[r, s:e].expand(e - s, cs, Lw), dOt[s:e], vw[s:e].transpose(1, 2), out=dPx
                )
                torch.mul(dPx, Pq, out=dSq)
                torch.bmm(dSq, kw[s:e], out=dqr[s:e]).mul_(p.scale)  # while it is in cache
                # key tiles whose queries (down to row (kb + 1) cs - 1 - dmin) are all done
                ready = nkb if last else min(nkb, max(done, (e * cs + dmin) // cs))
                if ready > done:
                    torch.bmm(kmajor(P, base, done, ready), dOw[done:ready], out=dvr[done:ready])
                    torch.bmm(kmajor(dS, base, done, ready), qw[done:ready], out=dkr[done:ready])
                    done = ready


def _band_tile(p: _Prep) -> int:
    """Query rows per tile of the band backward."""
    return BAND_TILE if (p.nqb * p.c) % BAND_TILE == 0 else p.c


def _band_chunks(p: _Prep, b, h, cs, step, dmin, F_k, k_rows, tile01):
    """(s, e, mask) runs of at most ``step`` query tiles for one group: tiles whose keys and queries
    are all valid share ``tile01``; the others (sequence edges, padding) get their own mask."""
    nb, Lw, dev, dt = p.nqb * p.c // cs, tile01.shape[1], tile01.device, tile01.dtype
    kv = torch.zeros(k_rows, device=dev, dtype=dt)  # padded key rows: 1 = a real, unmasked key
    kv[F_k : F_k + p.nk] = (
        1.0 if p.key_valid is None else p.key_valid[b, min(h, p.key_valid.shape[1] - 1)].to(dt)
    )
    qv = torch.zeros(nb * cs, device=dev, dtype=dt)
    qv[: p.nq] = 1.0 if p.q_valid is None else p.q_valid[b].to(dt)
    kwin = kv.as_strided((nb, Lw), (cs, 1), F_k + dmin)  # keys of query tile qb
    qv = qv.view(nb, cs)
    clean = ((kwin.min(-1).values > 0) & (qv.min(-1).values > 0)).tolist()
    return [
        (s, e, tile01 if flag else tile01[None] * kwin[s:e, None, :] * qv[s:e, :, None])
        for s, e, flag in _runs(clean, step, step)
    ]
