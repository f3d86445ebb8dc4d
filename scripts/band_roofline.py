#!/usr/bin/env python
"""How close can an exact block-sparse sliding window get to the FLOP bound on this CPU?

Times the pieces of a band attention (window +-256, n = 16,384, H = 12, D = 64, float32; interior
query blocks only, keys as zero-copy strided windows) with query blocks of ``c`` tokens: each matmul
shape the blocked kernel's forward and backward run (as torch.bmm over all blocks of a head), one
exp pass over the scores, the fused CPU flash forward, and the cheapest backward there is (probabilities
stored by an explicit forward, so no recomputation: 4 matmuls and 2 elementwise passes). The FLOP bound
is the benchmark's: matmul FLOPs of exactly the allowed pairs at the measured 4096^2 matmul rate
(``--gflops``; forward+backward = 3x forward).

    python scripts/band_roofline.py --block 128 64 32
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

N, H, D, HALF = 16384, 12, 64, 256


def _median(fn, repeats=3):
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def key_span(c: int) -> tuple[int, int]:
    """(L, pad) for query blocks of ``c`` tokens: the keys padded by ``pad`` (the window's half rounded up to
    whole blocks) on each side, and the ``L = c + 2 * pad`` keys each query block computes, which hold every key
    of its queries' windows."""
    pad = -(-HALF // c) * c
    return c + 2 * pad, pad


def roofline(c: int, gflops: float) -> None:
    (L, pad), nqb = key_span(c), N // c
    q, k, v, d_out = (torch.randn(H, N, D) for _ in range(4))
    kp, vp = F.pad(k, (0, 0, pad, pad)), F.pad(v, (0, 0, pad, pad))

    def window(x, h):  # (nqb, L, D) zero-copy view of query block b's keys
        return x[h].as_strided((nqb, L, D), (c * D, D, 1), x[h].storage_offset())

    allowed = (torch.arange(c)[:, None] + pad - torch.arange(L)[None, :]).abs() <= HALF
    bias = torch.zeros(c, L).masked_fill(~allowed, float("-inf"))
    bound = 4 * N * (2 * HALF + 1) * D * H / (gflops * 1e9)  # forward
    mm = 2 * N * L * D * H / 1e9  # GFLOP of one matmul over the computed (blocked) area
    P, S = torch.rand(nqb, c, L), torch.empty(nqb, c, L)
    rows = []

    def per_head(fn):
        return lambda: [fn(h) for h in range(H)]

    for name, fn in (
        ("S = Q K^T", lambda h: torch.bmm(q[h].view(nqb, c, D), window(kp, h).transpose(1, 2), out=S)),
        ("O = P V / dQ = dS K", lambda h: torch.bmm(P, window(vp, h))),
        ("dV = P^T dO / dK = dS^T Q", lambda h: torch.bmm(P.transpose(1, 2), d_out[h].view(nqb, c, D))),
    ):
        t = _median(per_head(fn))
        rows.append((name, t, f"{mm / t:.0f} GFLOP/s"))
    rows.append(("exp pass over the scores", _median(per_head(lambda h: S.clamp_(-87, 0).exp_())), ""))

    def flash(h):
        Q = q[h : h + 1].view(1, nqb, c, D)
        K, V = window(kp, h)[None], window(vp, h)[None]
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            Q, K, V, attn_mask=bias[None, None].expand(1, nqb, c, L), scale=D**-0.5
        )

    with torch.no_grad():
        t_flash = _median(per_head(flash))
    rows.append(("fused flash forward", t_flash, f"{t_flash / bound:.2f}x forward bound"))
    stored, out = torch.rand(H, nqb, c, L), torch.randn(H, nqb, c, D)
    dP = torch.empty(nqb, c, L)

    def backward_stored(h):
        dO = d_out[h].view(nqb, c, D)
        delta = (dO * out[h]).sum(-1, keepdim=True)
        torch.bmm(stored[h].transpose(1, 2), dO)
        torch.bmm(dO, window(vp, h).transpose(1, 2), out=dP)
        dP.sub_(delta).mul_(stored[h])
        torch.bmm(dP, window(kp, h))
        torch.bmm(dP.transpose(1, 2), q[h].view(nqb, c, D))

    t_bwd = _median(per_head(backward_stored))
    rows.append(("backward, probabilities stored", t_bwd, ""))
    total = t_flash + t_bwd
    print(
        f"\nblock {c}: {L} keys per query block for {2 * HALF + 1} allowed ({L / (2 * HALF + 1):.2f}x the FLOPs)"
    )
    print(f"forward bound {bound:.3f} s, forward+backward bound {3 * bound:.3f} s")
    for name, t, extra in rows:
        print(f"  {name:32s} {t:.3f} s  {extra}")
    print(
        f"  flash forward + stored backward   {total:.3f} s = {total / (3 * bound):.2f}x the forward+backward bound"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--block",
        type=int,
        nargs="+",
        default=[128, 64, 32],
        help=f"Query block sizes (divisors of n = {N}).",
    )
    parser.add_argument("--gflops", type=float, default=128.0, help="Matmul rate of the FLOP bound.")
    args = parser.parse_args(argv)
    for c in args.block:
        if c < 1 or N % c:
            parser.error(
                f"--block {c}: a query block must be a positive divisor of n = {N} (e.g. 32, 64, 128)"
            )
    if args.gflops <= 0:
        parser.error(f"--gflops must be > 0, got {args.gflops}")
    torch.manual_seed(0)
    for c in args.block:
        roofline(c, args.gflops)


if __name__ == "__main__":
    main()
