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

    # (cs, Lw) tile mask: row r sees column t iff offset t - r is allowed
    off = torch.arange(Lw, device=dev)[None, :] - torch.arange(cs, device=dev)[:, None]
    tile01 = ((off >= 0) & (off < W) & cols[off.clamp(0, W - 1)]).to(cdt)
    # columns a row never writes stay zero: rows keep their residue mod cs when the buffers slide
    P, dS = (torch.zeros((cap + 1) * pitch, device=dev, dtype=cdt) for _ in range(2))
    S = torch.empty(step, cs, Lw, device=dev, dtype=cdt)
    dP = torch.empty(step, cs, Lw, device=dev, dtype=cdt)
    neg_lse = (-lse4).view(BH, nb, cs)
    neg_delta = (-delta).view(BH, nb, cs, 1)
    scale = p.scale
    for b, h, r0, r1 in p.groups:
        chunks = _band_chunks(p, b, h, cs, step, dmin, F_k, k_rows, tile01)
        for r in range(r0, r1):
            # one head's rows, read in place (copied only from another dtype); windows past the
            # sequence's ends are built per chunk (``_windows``): no padded copy of the head
            kr, vr = k[r].to(cdt), v[r].to(cdt)
            qr, dOr = q[r].reshape(nq_pad, D).to(cdt), d_out[r].reshape(nq_pad, -1).to(cdt)
            Qt, dOt = qr.view(nb, cs, D), dOr.view(nb, cs, -1)
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
                kw = _windows(kr, s * cs + dmin, e - s, cs, Lw)  # keys of query tiles s..e
                vw = _windows(vr, s * cs + dmin, e - s, cs, Lw)
                # scale q k^T - lse in one op; masked and underflowing entries are clamped (fast exp),
                # then zeroed
                neg_l = neg_lse[r, s:e, :, None].expand(e - s, cs, Lw)
                torch.baddbmm(neg_l, Qt[s:e], kw.transpose(1, 2), alpha=scale, out=Sx)
                torch.mul(Sx.clamp_(-87.0, 0.0).exp_(), mask, out=Pq)
                # scale (dO v^T - delta): dS = P (dP - delta) comes out scaled, so dQ = dS K and
                # dK = dS^T Q need no further pass
                neg_d = neg_delta[r, s:e].expand(e - s, cs, Lw)
                torch.baddbmm(neg_d, dOt[s:e], vw.transpose(1, 2), beta=scale, alpha=scale, out=dPx)
                torch.mul(dPx, Pq, out=dSq)
                torch.bmm(dSq, kw, out=dqr[s:e])  # while it is in cache
                # key tiles whose queries (down to row (kb + 1) cs - 1 - dmin) are all done
                ready = nkb if last else min(nkb, max(done, (e * cs + dmin) // cs))
                if ready > done:  # the queries of key tile kb: rows kb * cs - dmax ..
                    dOw = _windows(dOr, done * cs - dmax, ready - done, cs, Lw)
                    qw = _windows(qr, done * cs - dmax, ready - done, cs, Lw)
                    torch.bmm(kmajor(P, base, done, ready), dOw, out=dvr[done:ready])
                    torch.bmm(kmajor(dS, base, done, ready), qw, out=dkr[done:ready])
                    done = ready


def _windows(x: torch.Tensor, first: int, n: int, cs: int, Lw: int) -> torch.Tensor:
    """(n, Lw, X) windows of x's rows (x: (rows, X), contiguous), window i from row first + i cs; rows
    outside x read as zeros. A zero-copy view where every window lies inside x (all chunks but those at
    the sequence's ends), else a copy of just the rows these windows span."""
    rows, X = x.shape
    last = first + (n - 1) * cs + Lw  # one past the last row read
    if first >= 0 and last <= rows:
        return x.as_strided((n, Lw, X), (cs * X, X, 1), x.storage_offset() + first * X)
    buf = x.new_zeros(last - first, X)
    lo, hi = max(first, 0), min(last, rows)
    if hi > lo:
        buf[lo - first : hi - first] = x[lo:hi]
    return buf.as_strided((n, Lw, X), (cs * X, X, 1))


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
