"""Exact merge of softmax partials over disjoint key sets through their log-sum-exp: ``merge_partials``
(autograd), ``merge_forward`` (values only)."""

from __future__ import annotations

import torch

from .prepare import _NEG_INF, _row_dot, once_differentiable


def merge_partials(parts):
    """Exact combination of softmax partials over disjoint key sets: [(out, lse)] -> out, lse."""
    if len(parts) == 1:
        return parts[0]
    return _Merge.apply(*[t for part in parts for t in part])


def _merge_weights(lses, lse):
    """w_i = exp(lse_i - lse), 0 where lse_i = -inf (also where every part is -inf: a row with no key)."""
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    return [torch.exp(l - safe) for l in lses]


def merge_forward(outs, lses):
    """out = sum_i w_i o_i, lse = log sum_i exp(lse_i) (no autograd: ``_Merge`` and the fused plan's
    forward, whose backward needs no merge, share it)."""
    stacked = torch.stack(lses)  # (P, ..., n)
    m = stacked.amax(0)
    empty = torch.isinf(m)
    m = torch.where(empty, torch.zeros_like(m), m)
    total = torch.exp(stacked - m).sum(0)
    lse = torch.where(empty, torch.full_like(m, _NEG_INF), m + torch.log(torch.where(empty, 1.0, total)))
    out = None  # o_1 w_1, then one addcmul per further part: no extra passes over the output
    for o, w in zip(outs, _merge_weights(lses, lse)):
        w = w[..., None].to(o.dtype)
        out = o * w if out is None else out.addcmul_(o, w)
    return out, lse


class _Merge(torch.autograd.Function):
    """out = sum_i w_i o_i, lse = log sum_i exp(lse_i), w_i = exp(lse_i - lse). The backward is written
    out (FlashAttention's identity): d o_i = g w_i, d lse_i = w_i (g . o_i - g . out + d lse), with the
    row dots in cache-sized steps; autograd's version made two full-size products per part and reduced
    them, and its log-sum-exp needed care where every part is -inf (torch.logsumexp's gradient is NaN)."""

    @staticmethod
    def forward(ctx, *flat):
        out, lse = merge_forward(list(flat[0::2]), list(flat[1::2]))
        ctx.save_for_backward(out, lse, *flat)
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, g, g_lse):
        out, lse, *flat = ctx.saved_tensors
        outs, lses = flat[0::2], flat[1::2]
        dt = lse.dtype
        if g is None:
            g = torch.zeros_like(out)
        g_out = _row_dot(g, out, dt)  # g . out
        if g_lse is not None:
            g_out = g_out - g_lse.to(dt)
        grads = []
        for o, w in zip(outs, _merge_weights(lses, lse)):
            grads.append(g * w[..., None].to(g.dtype))
            grads.append(w * (_row_dot(g, o, dt) - g_out))
        return tuple(grads)


__all__ = ["merge_forward", "merge_partials"]
