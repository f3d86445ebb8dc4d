"""The adaptive-span kernel equals the soft-masked dense reference (forward and every gradient,
the spans' included) and computes only the keys the spans reach."""

import math

import pytest
import torch

from hf_sparse.attention import adaptive_span as AS
from hf_sparse.attention.adaptive_span import (
    AdaptiveSpan,
    adaptive_span_attention,
    adaptive_span_reference,
    span_reach,
)

SPANS = {
    "zero": [0.0, 0.0, 0.0],
    "mixed": [0.0, 3.5, 11.0],
    "integer_edges": [4.0, 8.0, 2.0],  # ramp ends land exactly on key distances
    "max": [24.0, 24.0, 24.0],
}


def _inputs(B=2, H=3, nq=29, nk=29, D=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, nq, D, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(B, H, nk, D, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    go = torch.randn(B, H, nq, D, generator=g, dtype=torch.float64)
    return q, k, v, go


def _both(q, k, v, go, span, **kw):
    z = torch.tensor(span, dtype=torch.float64, requires_grad=True)
    block = kw.pop("block_size", 8)
    fast = adaptive_span_attention(q, k, v, z, block_size=block, **kw)
    ref = adaptive_span_reference(q, k, v, z, **kw)
    gf = torch.autograd.grad(fast, (q, k, v, z), go)
    gr = torch.autograd.grad(ref, (q, k, v, z), go)
    return (fast, *gf), (ref, *gr)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("spans", list(SPANS.values()), ids=list(SPANS))
@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
def test_kernel_equals_soft_masked_reference_float64(causal, spans, padded):
    q, k, v, go = _inputs()
    pad = None
    if padded:
        pad = torch.ones(2, 29, dtype=torch.bool)
        pad[0, :6] = False  # left padding
        pad[1, -7:] = False  # right padding
    fast, ref = _both(q, k, v, go, spans, ramp=4, causal=causal, key_padding_mask=pad)
    for name, a, b in zip(("out", "dq", "dk", "dv", "dspan"), fast, ref):
        assert torch.allclose(a, b, atol=1e-6, rtol=0), (name, (a - b).abs().max())


@pytest.mark.parametrize(
    "kw",
    [
        dict(nq=1, nk=40),  # one decoding step against a cache
        dict(nq=7, nk=40),  # a chunk of queries after cached keys
    ],
    ids=["one_query", "chunk"],
)
def test_kernel_with_offset_positions_equals_reference(kw):
    q, k, v, go = _inputs(**kw)
    fast, ref = _both(q, k, v, go, [1.0, 6.0, 13.0], ramp=5, causal=True, k_start=100)
    for a, b in zip(fast, ref):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)


def test_kernel_inside_a_sliding_window_band():
    q, k, v, go = _inputs()
    fast, ref = _both(q, k, v, go, [2.0, 9.0, 20.0], ramp=4, causal=False, max_distance=6)
    for a, b in zip(fast, ref):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)


def test_span_gradient_matches_finite_differences():
    """The reference's span gradient is itself the true derivative (off the clamp's kinks)."""
    q, k, v, go = _inputs(H=2, nq=17, nk=17)
    z = torch.tensor([2.3, 5.6], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda z: adaptive_span_attention(q.detach(), k.detach(), v.detach(), z, ramp=3, block_size=4), (z,)
    )


def test_reference_is_the_papers_mask_then_renormalise():
    q, k, v, _ = _inputs(B=1, H=1, nq=9, nk=9)
    z = torch.tensor([2.0], dtype=torch.float64)
    out, w = adaptive_span_reference(q, k, v, z, ramp=2, causal=True, return_weights=True)
    d = torch.arange(9)[:, None] - torch.arange(9)[None, :]
    m = ((2 + 2.0 - d) / 2).clamp(0, 1) * (d >= 0)
    soft = torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(5)).masked_fill(d < 0, -math.inf), -1) * m
    expected = soft / soft.sum(-1, keepdim=True)
    assert torch.allclose(w, expected)
    assert torch.allclose(out, expected @ v)


def test_rows_without_keys_are_zero_not_nan():
    q, k, v, go = _inputs(B=1, nq=10, nk=10)
    pad = torch.zeros(1, 10, dtype=torch.bool)
    pad[0, 5:] = True
    fast, ref = _both(q, k, v, go, [0.0, 1.0, 2.0], ramp=2, causal=True, key_padding_mask=pad)
    assert torch.isfinite(fast[0]).all() and (fast[0][:, :, :5] == 0).all()
    for a, b in zip(fast, ref):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)


def test_keys_beyond_the_reach_are_never_computed(monkeypatch):
    """Keys per query block = reach + the block, rounded out to the block: not the sequence length."""
    seen = []
    real = AS._block_scores

    def spy(q, k, *args):
        seen.append(k.shape[2])
        return real(q, k, *args)

    monkeypatch.setattr(AS, "_block_scores", spy)
    q, k, v, _ = _inputs(B=1, H=2, nq=256, nk=256, D=4)
    z = torch.tensor([3.0, 20.0], dtype=torch.float64)  # reach = floor(20 + 8) = 28
    adaptive_span_attention(q, k, v, z, ramp=8, causal=True, block_size=16)
    assert max(seen) <= 16 * math.ceil((28 + 16) / 16) + 16  # 48 + one block of rounding
    assert sum(seen) < 256 * 256 // 16 / 3  # far less than every key for every block
    seen.clear()
    adaptive_span_attention(q, k, v, z * 0, ramp=8, causal=False, block_size=16)
    assert max(seen) <= 16 * 3  # reach 8 both sides: the block and its two neighbours


def test_dropout_backward_regenerates_the_forward_masks():
    q, k, v, _ = _inputs(B=1, H=2, nq=12, nk=12)
    z = torch.tensor([2.2, 6.7], dtype=torch.float64, requires_grad=True)  # off the kinks

    def f(q, k, v, z):
        return adaptive_span_attention(q, k, v, z, ramp=3, dropout_p=0.3, dropout_seed=7, block_size=4)

    assert torch.autograd.gradcheck(f, (q, k, v, z))
    a, b = f(q, k, v, z), adaptive_span_attention(q, k, v, z, ramp=3, block_size=4)
    assert not torch.allclose(a, b)  # dropout did something


def test_float32_matches_float64_reference():
    q, k, v, _ = _inputs()
    z = torch.tensor([1.0, 5.0, 9.0])
    fast = adaptive_span_attention(q.float(), k.float(), v.float(), z, ramp=4, block_size=8)
    ref = adaptive_span_reference(q, k, v, z.double(), ramp=4)
    assert torch.allclose(fast.double(), ref, atol=1e-5)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(span=torch.tensor([1.0, 2.0])), "one value per head"),
        (dict(span=torch.tensor([1.0, -1.0, 2.0])), "span must be >= 0"),
        (dict(ramp=0), "ramp must be a positive int"),
        (dict(key_padding_mask=torch.ones(2, 5, dtype=torch.bool)), "key_padding_mask"),
        (dict(dropout_p=1.0), "dropout_p"),
        (dict(block_size=0), "block_size"),
    ],
)
def test_bad_arguments_raise(kw, match):
    q, k, v, _ = _inputs()
    args = dict(span=torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    args.update(kw)
    span = args.pop("span")
    with pytest.raises(ValueError, match=match):
        adaptive_span_attention(q, k, v, span, **args)


def test_spans_are_clamped_but_gradients_pass_the_clamp():
    mod = AdaptiveSpan(num_heads=3, max_span=100, ramp=8, init=50.0)
    with torch.no_grad():
        mod.span.copy_(torch.tensor([-0.5, 0.25, 1.5]))
    spans = mod.spans()
    assert spans.tolist() == [0.0, 25.0, 100.0]
    spans.sum().backward()
    assert mod.span.grad.tolist() == [100.0, 100.0, 100.0]
    assert mod.reach() == 108 and span_reach(torch.tensor([0.0]), 8) == 8


def test_second_derivative_through_the_kernel_is_an_error():
    """Its backward is written out: a gradient of a gradient would leave terms out (q's and k's Hessian-vector
    products were off against the reference by 45%, silently)."""
    q, k, v, _ = _inputs(B=1, H=2, nq=13, nk=13, D=4)
    z = torch.tensor([5.0, 9.0], dtype=torch.float64, requires_grad=True)
    (gq,) = torch.autograd.grad(adaptive_span_attention(q, k, v, z, ramp=4, block_size=4).pow(2).sum(), q,
                                create_graph=True)  # fmt: skip
    with pytest.raises(RuntimeError, match="no second derivative"):
        torch.autograd.grad(gq.pow(2).sum(), (q, k, v))
    (gq,) = torch.autograd.grad(
        adaptive_span_reference(q, k, v, z, ramp=4).pow(2).sum(), q, create_graph=True
    )
    assert all(
        g.isfinite().all() for g in torch.autograd.grad(gq.pow(2).sum(), (q, k, v))
    )  # the reference can
