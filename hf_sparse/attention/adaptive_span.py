"""Adaptive attention span (Sukhbaatar et al. 2019, "Adaptive Attention Span in Transformers").

Each head h has a learnable span ``z_h`` in ``[0, max_span]``. A key at distance ``d = |i - j|`` from
the query is weighted by the soft ramp mask

    m_h(d) = clamp((R + z_h - d) / R, 0, 1)        (R: the ramp length, 32 in the paper)

applied as in the paper: the softmax weights are multiplied by ``m`` and renormalised, which is
``softmax(q k^T * scale + log m)`` over the allowed keys. Causal (``0 <= i - j``) or bidirectional.

Why a layer option and not a pattern: hf-sparse patterns are stateless, serialisable rules shared by
every backend, while a span is a *parameter* of a layer, trained with the model (and penalised in the
loss); its rule changes after every optimizer step. So the span lives in :class:`AdaptiveSpan` (an
``nn.Module`` in each attention layer) and the kernel below reads it.

The kernel (:func:`adaptive_span_attention`) shrinks with the spans: with ``reach = floor(max_h z_h + R)``
only keys at distance ``<= reach`` (rounded out to the block) are computed, one query block at a
time, so time and memory are O(n * reach). A custom autograd Function keeps only the output and the
row log-sum-exp and recomputes each block in the backward pass (no (n, n) tensor, no (n, reach) tensor
kept between passes), including the gradient into the spans:

    dL/dz_h = 1/R * sum over keys on the ramp (0 <= (R + z_h - d)/R <= 1) of exp(s - lse) * (dP - Delta)

(``s``: scaled scores, ``lse``: the row log-sum-exp of ``s + log m``, ``dP = dO v^T``,
``Delta = rowsum(dO * O)``), which is what autograd gives for the paper's clamp (inclusive at both
ends). :func:`adaptive_span_reference` is the readable dense version that tests compare against.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .dense import compute_dtype
from .prepare import once_differentiable


# ----------------------------------------------------------------------------- helpers
def _positions(n: int, start: int, device) -> torch.Tensor:
    return torch.arange(start, start + n, device=device)


def _ramp(span: torch.Tensor, dist: torch.Tensor, ramp: int) -> torch.Tensor:
    """(H, q, k) ramp value ``(R + z_h - d) / R`` (before the clamp) for distances ``dist`` (q, k)."""
    return (ramp + span[:, None, None] - dist) / ramp


def span_reach(span: torch.Tensor, ramp: int) -> int:
    """Largest key distance any head can see (or needs for the span gradient): ``floor(max z + R)``."""
    return int(math.floor(float(span.detach().max()) + ramp)) if span.numel() else 0


def _hard_allowed(qpos, kpos, causal: bool, max_distance, key_padding):
    """(B or 1, 1, q, k) bool: causal / band / padding rule, without the soft mask."""
    d = qpos[:, None] - kpos[None, :]  # (q, k)
    allowed = d >= 0 if causal else torch.ones_like(d, dtype=torch.bool)
    if max_distance is not None:
        allowed = allowed & (d.abs() <= max_distance)
    allowed = allowed[None, None]  # (1, 1, q, k)
    if key_padding is not None:
        allowed = allowed & key_padding[:, None, None, :]  # (B, 1, q, k)
    return allowed, d.abs().to(torch.float64)


def _check(q, k, v, span, ramp, key_padding, dropout_p):
    if (
        q.dim() != 4
        or k.shape != v.shape
        or k.dim() != 4
        or q.shape[:2] != k.shape[:2]
        or q.shape[-1] != k.shape[-1]
    ):
        raise ValueError(
            f"query (B, H, q, D) and key/value (B, H, k, D) shapes do not match: {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if span.dim() != 1 or span.shape[0] != q.shape[1]:
        raise ValueError(f"span must have one value per head, shape ({q.shape[1]},), got {tuple(span.shape)}")
    if bool((span.detach() < 0).any()):
        raise ValueError(f"span must be >= 0 (clamp it to [0, max_span]), got {span.detach().tolist()}")
    if isinstance(ramp, bool) or not isinstance(ramp, int) or ramp <= 0:
        raise ValueError(f"ramp must be a positive int, got {ramp!r}")
    if key_padding is not None and tuple(key_padding.shape) != (k.shape[0], k.shape[2]):
        raise ValueError(
            f"key_padding_mask must be (batch, keys) = {(k.shape[0], k.shape[2])}, got {tuple(key_padding.shape)}"
        )
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p!r}")


# ----------------------------------------------------------------------------- reference
def adaptive_span_reference(
    query, key, value, span, *, ramp: int = 32, causal: bool = True, key_padding_mask=None,
    q_start: int | None = None, k_start: int = 0, max_distance: int | None = None, scale=None,
    return_weights: bool = False,
):  # fmt: skip
    """Dense O(q * k) reference: softmax over the allowed keys, times the soft mask, renormalised
    (rows whose mask is zero on every allowed key give zeros). Same arguments as
    :func:`adaptive_span_attention`; ``return_weights`` also returns the (B, H, q, k) weights."""
    B, H, nq, D = query.shape
    nk = key.shape[2]
    q_start = nk - nq + k_start if q_start is None else q_start
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    dt = compute_dtype(query.dtype)
    qpos, kpos = _positions(nq, q_start, query.device), _positions(nk, k_start, query.device)
    pad = None if key_padding_mask is None else key_padding_mask.bool()
    allowed, dist = _hard_allowed(qpos, kpos, causal, max_distance, pad)
    m = _ramp(span.to(dt), dist.to(dt), ramp).clamp(0, 1)  # (H, q, k)
    s = torch.matmul(query.to(dt), key.to(dt).transpose(-1, -2)) * scale  # (B, H, q, k)
    s = s.masked_fill(~allowed, float("-inf"))
    top = s.detach().amax(-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    w = torch.exp(s - top) * m  # softmax numerator times the mask
    z = w.sum(-1, keepdim=True)
    p = torch.where(z > 0, w / torch.where(z > 0, z, torch.ones_like(z)), torch.zeros_like(w))
    out = torch.matmul(p, value.to(dt)).to(query.dtype)  # (B, H, q, D)
    return (out, p.to(query.dtype)) if return_weights else out


# ----------------------------------------------------------------------------- kernel
class _Geometry:
    """Query blocks and, for each, the key range it can reach (rounded out to the block)."""

    def __init__(self, nq, nk, q_start, k_start, reach, causal, block, device):
        self.qpos, self.kpos = _positions(nq, q_start, device), _positions(nk, k_start, device)
        self.blocks = []
        for i0 in range(0, nq, block):
            i1 = min(nq, i0 + block)
            lo = q_start + i0 - reach - k_start  # first key index within reach
            hi = q_start + i1 - 1 - k_start + (0 if causal else reach)  # last one
            j0 = max(0, lo) // block * block
            j1 = min(nk, -(-(min(hi, nk - 1) + 1) // block) * block)
            self.blocks.append((i0, i1, j0, j1) if j1 > j0 else (i0, i1, 0, 0))  # (0, 0): no key, zeros


class _BlockBias:
    """Additive (H, bq, bk) terms of one block: ``log m`` (-inf outside the causal/band rule) and the
    ramp region (0 where the span gradient flows, -inf elsewhere). They depend only on the offset
    between the block's first query and first key, so consecutive blocks with the same offset (every
    block away from the sequence start) share one computation."""

    def __init__(self, geom, span, ramp, causal, max_distance, dt):
        self.geom, self.span, self.ramp, self.causal, self.max_distance, self.dt = (
            geom, span.detach().to(dt), ramp, causal, max_distance, dt,
        )  # fmt: skip
        self.key, self.value = None, None

    def __call__(self, i0, i1, j0, j1):
        g = self.geom
        key = (int(g.qpos[i0] - g.kpos[j0]), i1 - i0, j1 - j0)
        if key != self.key:  # one entry: blocks come in order, equal offsets are consecutive
            allowed, dist = _hard_allowed(g.qpos[i0:i1], g.kpos[j0:j1], self.causal, self.max_distance, None)
            x = _ramp(self.span, dist.to(self.dt), self.ramp)  # (H, bq, bk)
            allowed = allowed[0]  # (1, bq, bk)
            log_m = torch.where(allowed, torch.log(x.clamp(0, 1)), -math.inf)  # log 0 = -inf off the span
            on_ramp = torch.where(allowed & (x >= 0) & (x <= 1), 0.0, -math.inf).to(self.dt)
            self.key, self.value = key, (log_m, on_ramp)
        return self.value


def _block_scores(q, k, scale, pad, j0, j1, dt):
    """(B, H, bq, bk) scaled scores, -inf at padding keys."""
    s = torch.matmul(q.to(dt) * scale, k.to(dt).transpose(-1, -2))
    if pad is not None:
        s = s.masked_fill(~pad[:, None, None, j0:j1], -math.inf)
    return s


def _dropout_keep(shape, p, seed, index, device):
    g = torch.Generator(device=device)
    g.manual_seed(seed + index)
    return torch.rand(shape, generator=g, device=device) >= p


class _AdaptiveSpanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, span, pad, geom, ramp, causal, max_distance, scale, dropout_p, seed):
        dt = compute_dtype(q.dtype)
        B, H, nq, D = q.shape
        out = torch.zeros(B, H, nq, D, dtype=dt, device=q.device)
        lse = torch.full((B, H, nq), math.inf, dtype=dt, device=q.device)  # +inf: row without keys
        bias = _BlockBias(geom, span, ramp, causal, max_distance, dt)
        for b, (i0, i1, j0, j1) in enumerate(geom.blocks):
            if j1 == j0:
                continue
            logits = _block_scores(q[:, :, i0:i1], k[:, :, j0:j1], scale, pad, j0, j1, dt)
            logits += bias(i0, i1, j0, j1)[0]  # + log m
            row = torch.logsumexp(logits, dim=-1)  # (B, H, bq)
            row = torch.where(torch.isfinite(row), row, math.inf)
            p = torch.exp(logits - row[..., None])  # (B, H, bq, bk)
            if dropout_p > 0:
                p = p * _dropout_keep(p.shape, dropout_p, seed, b, q.device) / (1 - dropout_p)
            out[:, :, i0:i1] = torch.matmul(p, v[:, :, j0:j1].to(dt))
            lse[:, :, i0:i1] = row
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, span, out, lse, *([] if pad is None else [pad]))
        ctx.args = (geom, ramp, causal, max_distance, scale, dropout_p, seed, pad is not None)
        return out

    @staticmethod
    @once_differentiable  # written out: a second derivative through it would leave terms out
    def backward(ctx, grad_out):
        q, k, v, span, out, lse, *rest = ctx.saved_tensors
        geom, ramp, causal, max_distance, scale, dropout_p, seed, has_pad = ctx.args
        pad = rest[0] if has_pad else None
        dt = compute_dtype(q.dtype)
        dq, dk, dv = (torch.zeros(t.shape, dtype=dt, device=t.device) for t in (q, k, v))
        dspan = torch.zeros(span.shape, dtype=dt, device=span.device)
        grad_out = grad_out.to(dt)
        delta = (grad_out * out.to(dt)).sum(-1)  # (B, H, nq)
        bias = _BlockBias(geom, span, ramp, causal, max_distance, dt)
        for b, (i0, i1, j0, j1) in enumerate(geom.blocks):
            if j1 == j0:
                continue
            qb, kb, vb = q[:, :, i0:i1].to(dt), k[:, :, j0:j1].to(dt), v[:, :, j0:j1].to(dt)
            log_m, on_ramp = bias(i0, i1, j0, j1)
            s = _block_scores(qb, kb, scale, pad, j0, j1, dt) - lse[:, :, i0:i1, None]  # s - lse
            p = torch.exp(s + log_m)  # (B, H, bq, bk)
            go = grad_out[:, :, i0:i1]  # (B, H, bq, D)
            dp = torch.matmul(go, vb.transpose(-1, -2))  # (B, H, bq, bk)
            if dropout_p > 0:
                keep = _dropout_keep(p.shape, dropout_p, seed, b, q.device) / (1 - dropout_p)
                dv[:, :, j0:j1] += torch.matmul((p * keep).transpose(-1, -2), go)
                dp = dp * keep
            else:
                dv[:, :, j0:j1] += torch.matmul(p.transpose(-1, -2), go)
            g = dp - delta[:, :, i0:i1, None]
            if ctx.needs_input_grad[3]:  # softmax weight before the mask, on the ramp
                dspan += (torch.exp(s + on_ramp) * g).sum(dim=(0, 2, 3)) / ramp
            ds = p * g  # (B, H, bq, bk)
            dq[:, :, i0:i1] += torch.matmul(ds, kb) * scale
            dk[:, :, j0:j1] += torch.matmul(ds.transpose(-1, -2), qb) * scale
        return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dspan.to(span.dtype)) + (None,) * 8


def adaptive_span_attention(
    query, key, value, span, *, ramp: int = 32, causal: bool = True, key_padding_mask=None,
    q_start: int | None = None, k_start: int = 0, max_distance: int | None = None, scale=None,
    dropout_p: float = 0.0, dropout_seed: int | None = None, block_size: int = 128,
):  # fmt: skip
    """Attention with a soft, per-head span, computed only over the keys the spans reach.

    Args:
        query: (B, H, q, D); key, value: (B, H, k, D).
        span: (H,) spans in tokens, ``>= 0`` (differentiable; clamp to ``[0, max_span]`` first).
        ramp: ramp length R of the soft mask.
        causal: keys after the query are excluded; otherwise the distance is ``|i - j|``.
        key_padding_mask: (B, k), 1 for tokens, 0 for padding keys (never attended).
        q_start, k_start: absolute positions of the first query and key (the distance is computed from
            positions); ``q_start`` defaults to the last ``q`` of the keys' positions (a KV cache).
        max_distance: a hard bound on the distance as well (a sliding-window pattern around the span).
        dropout_p, dropout_seed: attention dropout; the seed (drawn from torch's RNG when not given)
            makes the backward pass regenerate the same dropout masks.
        block_size: query block size; key ranges are rounded out to multiples of it.

    Returns (B, H, q, D); a query with no allowed key gets zeros.
    """
    _check(query, key, value, span, ramp, key_padding_mask, dropout_p)
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    B, H, nq, D = query.shape
    nk = key.shape[2]
    q_start = nk - nq + k_start if q_start is None else int(q_start)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    reach = span_reach(span, ramp)
    if max_distance is not None:
        reach = min(reach, int(max_distance))
    geom = _Geometry(nq, nk, q_start, k_start, reach, causal, block_size, query.device)
    pad = None if key_padding_mask is None else key_padding_mask.to(query.device).bool()
    seed = 0
    if dropout_p > 0:
        seed = int(torch.randint(0, 2**62, (1,)).item()) if dropout_seed is None else int(dropout_seed)
    return _AdaptiveSpanFunction.apply(
        query, key, value, span, pad, geom, ramp, causal, max_distance, scale, dropout_p, seed
    )


# ----------------------------------------------------------------------------- the layer's spans
class AdaptiveSpan(nn.Module):
    """One learnable span per head, stored as a fraction of ``max_span`` (the paper's ``current_val``).

    :meth:`spans` returns ``clamp(fraction, 0, 1) * max_span`` in tokens; the clamp passes gradients
    straight through, so a span pushed against a bound can move back (the paper clamps the parameter
    after each optimizer step instead). :meth:`penalty` is the paper's L1 term, the mean span of the
    layer in tokens (the model multiplies it by ``loss_coef``).
    """

    def __init__(self, num_heads: int, max_span: int, ramp: int = 32, init: float = 0.0):
        super().__init__()
        self.max_span, self.ramp = int(max_span), int(ramp)
        self.span = nn.Parameter(torch.full((num_heads,), float(init) / self.max_span))
        self.init_fraction = float(init) / self.max_span

    def spans(self) -> torch.Tensor:
        """(H,) spans in tokens, in [0, max_span]."""
        frac = self.span + (self.span.clamp(0, 1) - self.span).detach()  # straight-through clamp
        return frac * self.max_span

    def reach(self) -> int:
        """Largest key distance this layer attends (what the KV cache must keep)."""
        return span_reach(self.spans(), self.ramp)

    def penalty(self) -> torch.Tensor:
        return self.spans().mean()

    def extra_repr(self) -> str:
        return f"heads={self.span.shape[0]}, max_span={self.max_span}, ramp={self.ramp}"


__all__ = ["AdaptiveSpan", "adaptive_span_attention", "adaptive_span_reference", "span_reach"]
