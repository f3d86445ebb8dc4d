"""Every pattern x backend x length x masking equals the dense reference (outputs and gradients)."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention
from tests.cases import all_patterns, make_masks

PATTERNS = all_patterns()
LENGTHS = [1, 7, 64, 129, 1000]
MODES = ["none", "padding", "global"]


def _inputs(n, dtype=torch.float32, B=2, H=3, D=16, grad=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, n, D, generator=g).to(dtype).requires_grad_(grad) for _ in range(3))
    return q, k, v


def _run(q, k, v, pattern, mode, backend, **kw):
    am, gm = make_masks(mode, q.shape[0], q.shape[2])
    return sparse_attention(
        q, k, v, pattern, attention_mask=am, global_attention_mask=gm, backend=backend, **kw
    )


@pytest.mark.parametrize("backend", ["blocked", "sdpa"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("name", list(PATTERNS))
def test_kernel_matches_dense_float32(name, n, mode, backend):
    pattern = PATTERNS[name]
    q, k, v = _inputs(n)
    ref = _run(q, k, v, pattern, mode, "dense")
    out = _run(q, k, v, pattern, mode, backend)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    grad = torch.randn_like(ref)
    g_ref = torch.autograd.grad(ref, (q, k, v), grad)
    g_out = torch.autograd.grad(out, (q, k, v), grad)
    for a, b, what in zip(g_out, g_ref, "qkv"):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=lambda m, w=what: f"d{w}: {m}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [7, 129])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_blocked_other_block_size(name, n, mode):
    """A kernel block size other than the default (smaller than the pattern blocks) is exact too."""
    pattern = PATTERNS[name]
    q, k, v = _inputs(n, grad=False)
    ref = _run(q, k, v, pattern, mode, "dense")
    torch.testing.assert_close(_run(q, k, v, pattern, mode, "blocked", block_size=8), ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("name", list(PATTERNS))
def test_flex_forward_matches_dense(name, n, mode, monkeypatch):
    """FlexAttention (eager on CPU, where it has no backward) with the BlockMask from the layout."""
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    pattern = PATTERNS[name]
    q, k, v = _inputs(n, grad=False)
    ref = _run(q, k, v, pattern, mode, "dense")
    out = _run(q, k, v, pattern, mode, "flex")
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", ["blocked", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(PATTERNS))
def test_kernel_low_precision(name, mode, dtype, backend):
    """Same inputs (rounded to the low precision) as the float32 reference: kernel error only."""
    pattern = PATTERNS[name]
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in _inputs(129))
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    if pattern.content_based:  # select once, so both runs attend the same pairs
        pattern = pattern.bind(129, query=q32, key=k32)
    ref = _run(q32, k32, v32, pattern, mode, "dense")
    out = _run(q, k, v, pattern, mode, backend)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)  # bf16 rounds to 3 digits
    grad = torch.randn_like(ref)
    g_ref = torch.autograd.grad(ref, (q32, k32, v32), grad)
    g_out = torch.autograd.grad(out, (q, k, v), grad.to(dtype))
    for a, b in zip(g_out, g_ref):
        assert a.dtype == dtype
        torch.testing.assert_close(a.float(), b, atol=2e-2 * max(1.0, b.abs().max().item()), rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["strided", "bigbird", "union"])
def test_low_precision_merges_in_float32(name, dtype):
    """Patterns of several components in half precision: the parts are computed and merged in float32 and
    rounded once, so the blocked kernel's error is the dense reference's (which rounds once), not 1.5-3x it
    (each part, its merge weight and the running sum were rounded)."""
    pattern = PATTERNS[name]
    x = [t.detach().double().requires_grad_() for t in _inputs(200, D=64)]
    grad = torch.randn_like(x[0])
    exact = sparse_attention(*x, pattern, backend="dense")
    g_exact = torch.autograd.grad(exact, x, grad)
    errors = {}
    for backend in ("dense", "blocked"):
        low = [t.detach().to(dtype).requires_grad_() for t in x]
        out = sparse_attention(*low, pattern, backend=backend)
        grads = torch.autograd.grad(out, low, grad.to(dtype))
        errors[backend] = [
            (a.double() - b).abs().max().item() for a, b in zip((out, *grads), (exact, *g_exact))
        ]
    for got, ref in zip(errors["blocked"], errors["dense"]):
        assert got <= 1.05 * ref, errors


@pytest.mark.parametrize("backend", ["dense", "sdpa", "blocked", "flex"])
def test_rows_without_keys_are_zero_not_nan(backend, monkeypatch):
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    q, k, v = _inputs(40, grad=backend != "flex")
    am = torch.ones(2, 40)
    am[1] = 0  # every key of the second sequence is padding
    pattern = P.BlockLocal(block=8) & P.Global(indices=[3])  # also rows with no key at all
    out = sparse_attention(q, k, v, pattern, attention_mask=am, backend=backend)
    assert not torch.isnan(out).any()
    assert torch.count_nonzero(out[1]) == 0
    allowed = pattern.dense_mask(40).any(-1)
    assert torch.count_nonzero(out[0, :, ~allowed]) == 0
    if backend != "flex":
        out.sum().backward()
        assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
        assert torch.count_nonzero(v.grad[1]) == 0  # padding keys are never attended


def test_padding_keys_get_no_gradient():
    q, k, v = _inputs(100)
    am = torch.ones(2, 100)
    am[0, 70:] = 0
    out = sparse_attention(q, k, v, P.SlidingWindow(window=64), attention_mask=am, backend="blocked")
    out.square().sum().backward()
    assert torch.count_nonzero(k.grad[0, :, 70:]) == 0
    assert torch.count_nonzero(v.grad[0, :, 70:]) == 0


def test_float64_gradcheck():
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, 1, 11, 2, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3)
    )
    pattern = P.SlidingWindow(window=4) | P.Global(indices=[4])  # two components merged by log-sum-exp

    def f(q, k, v):
        return sparse_attention(q, k, v, pattern, backend="blocked", block_size=4)

    assert torch.autograd.gradcheck(f, (q, k, v))


@pytest.mark.parametrize("path", ["fused", "fallback"])
@pytest.mark.parametrize(
    "pattern",
    [P.SlidingWindow(window=8), P.SlidingWindow(window=4) | P.Global(indices=[4])],
    ids=["one", "merged"],
)
def test_second_derivative_through_the_block_kernels_is_an_error(pattern, path, monkeypatch):
    """A gradient penalty or a Hessian-vector product through backend="blocked" raises an error naming
    backend="dense" (the kernels' backward is written out) instead of silently leaving out the second-order
    terms (the compiled kernels gave dL/dq without a graph; torch's once_differentiable: zeros in hvp, nothing
    marked for a constant dL/dout), also where the incoming gradient is a constant; backend="dense" computes it."""
    from hf_sparse.attention import fused

    if path == "fused" and not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.setenv("HF_SPARSE_FUSED", "all" if path == "fused" else "0")
    q, k, v = (t.double().detach().requires_grad_() for t in _inputs(40, B=1, H=2, D=4))
    w = torch.randn(1, 2, 40, 4, dtype=torch.float64)
    for loss in (lambda o: o.square().sum(), lambda o: (o * w).sum()):  # the second: a constant dL/do
        for backend in ("dense", "blocked"):
            out = sparse_attention(q, k, v, pattern, backend=backend, block_size=4)
            (gq,) = torch.autograd.grad(loss(out), q, create_graph=True)
            penalty = loss(out) + gq.square().sum()
            if backend == "dense":
                penalty.backward()
                assert k.grad.abs().sum() > 0
                continue
            with pytest.raises(RuntimeError, match="no second derivative.*backend='dense'"):
                penalty.backward()
            with pytest.raises(RuntimeError, match="no second derivative"):
                torch.autograd.functional.hvp(
                    lambda k, f=loss: f(sparse_attention(q, k, v, pattern, backend="blocked")), k, w
                )


def test_dropout_is_exact_in_backward():
    """With dropout the kernel's gradient is the gradient of its own (seeded) forward."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, 1, 11, 2, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3)
    )

    def f(q, k, v):
        return sparse_attention(
            q, k, v, P.SlidingWindow(window=8), dropout_p=0.3, seed=123, backend="blocked", block_size=4
        )

    assert not torch.equal(
        f(q, k, v), sparse_attention(q, k, v, P.SlidingWindow(window=8), backend="blocked")
    )
    torch.testing.assert_close(f(q, k, v), f(q, k, v))
    assert torch.autograd.gradcheck(f, (q, k, v))


def test_grouped_query_attention_heads():
    q, _, _ = _inputs(33, H=4, grad=False)
    _, k, v = _inputs(33, H=2, grad=False, seed=1)
    out = sparse_attention(q, k, v, P.SlidingWindow(window=8), backend="blocked")
    ref = sparse_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), P.SlidingWindow(window=8), backend="dense"
    )
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)


def test_decoding_queries_align_to_the_end():
    """q_len < kv_len: query i sits at position kv_len - q_len + i (a KV cache)."""
    q, k, v = _inputs(50, grad=False)
    for pattern in (P.SlidingWindow(window=8, causal=True), P.Strided(stride=7), P.Fixed(block=8, summary=2)):
        full = sparse_attention(q, k, v, pattern, backend="dense")
        for backend in ("dense", "blocked"):
            last = sparse_attention(q[:, :, -3:], k, v, pattern, backend=backend)
            torch.testing.assert_close(last, full[:, :, -3:], atol=1e-5, rtol=0)


def test_auto_uses_blocked_on_cpu_and_never_dense(monkeypatch):
    import hf_sparse.attention.dispatch as d

    called = []
    monkeypatch.setattr(d, "dense_attention", lambda *a, **k: called.append("dense"))
    q, k, v = _inputs(64)
    out = sparse_attention(q, k, v, P.Causal())
    assert called == [] and out.shape == q.shape


def test_band_backward_zeroes_query_blocks_without_keys(monkeypatch):
    """Long padding: whole chunks of the band backward have no key. Their dq comes from an
    uninitialised buffer and must be written as zeros (here torch.empty returns NaN-filled memory).
    The pure-PyTorch band path (the compiled band kernel's fallback)."""
    import hf_sparse.attention.band_backward as band_backward

    monkeypatch.setenv("HF_SPARSE_FUSED", "0")

    monkeypatch.setattr(band_backward, "BACKWARD_ELEMENTS", 16 * 16 * 48)  # a few query blocks per chunk
    real_empty = torch.empty

    def nan_empty(*size, **kw):
        t = real_empty(*size, **kw)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", nan_empty)
    q, k, v = (t.double().detach().requires_grad_() for t in _inputs(600, H=2, D=4))
    am = torch.ones(2, 600)
    am[1, 200:] = 0  # queries past 200 + 8 see no key of the second sequence
    pattern = P.SlidingWindow(window=16)
    grads = {}
    for backend in ("dense", "blocked"):
        out = sparse_attention(q, k, v, pattern, attention_mask=am, backend=backend)
        grads[backend] = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    for a, b in zip(grads["blocked"], grads["dense"]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    assert torch.count_nonzero(grads["blocked"][0][1, :, 220:]) == 0


@pytest.mark.parametrize(
    "pattern, block, mode",
    [(P.SlidingWindow(window=64), 128, mode) for mode in MODES]
    + [(P.SlidingWindow(window=50, causal=True), 128, mode) for mode in ("none", "padding")]
    + [(P.SlidingWindow(window=100), 64, "padding")],
)
def test_band_forward_sub_blocks_match_dense(pattern, block, mode, monkeypatch):
    """Interior band blocks run the fused forward in sub-blocks with narrower key windows; the
    output, its gradients and the log-sum-exp the backward reads stay exact. The pure-PyTorch band
    path (the compiled band kernel's fallback)."""
    import hf_sparse.attention.blocked as blocked
    import hf_sparse.attention.prepare as prepare

    monkeypatch.setenv("HF_SPARSE_FUSED", "0")

    calls = []
    real = blocked._flash_band_clean
    monkeypatch.setattr(blocked, "_flash_band_clean", lambda p, *a: calls.append(p.sub) or real(p, *a))
    q, k, v = _inputs(700)
    ref = _run(q, k, v, pattern, mode, "dense")
    out = _run(q, k, v, pattern, mode, "blocked", block_size=block)
    assert calls and calls[0][0] == prepare.FORWARD_SUB_BLOCK
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    grad = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(ref, (q, k, v), grad)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_sub_tile_windows():
    """A (128, 640) tile of a +-256 band splits into 32-row sub-blocks seeing 544 keys each; a tile
    whose rows do not shift with the sub-block (or that is one sub-block already) does not split."""
    from hf_sparse.attention.prepare import _sub_tile

    i, j = torch.arange(128)[:, None], torch.arange(640)[None, :]
    bias = torch.zeros(128, 640).masked_fill((i + 256 - j).abs() > 256, float("-inf"))
    rows, first, sub = _sub_tile(bias, 32)
    assert (rows, first, tuple(sub.shape)) == (32, 0, (32, 544))
    torch.testing.assert_close(sub, bias[:32, :544])
    assert _sub_tile(bias[:32], 32) is None
    assert _sub_tile(torch.zeros(128, 640).masked_fill(j > 300, float("-inf")), 32) is None


@pytest.mark.parametrize(
    "pattern, mode",
    [(P.SlidingWindow(window=40), mode) for mode in MODES]
    + [(P.SlidingWindow(window=24, causal=True), mode) for mode in ("padding", "global")]
    + [(P.Longformer(window=30), "global")],
)
def test_band_backward_sliding_buffers_match_dense(pattern, mode, monkeypatch):
    """The band backward keeps only a sliding window of probability rows per head (chunks of a few
    query tiles here, so the buffers slide many times); gradients stay exact, edges and padding too.
    The pure-PyTorch band path (the compiled band kernel's fallback)."""
    import hf_sparse.attention.band_backward as band_backward
    import hf_sparse.attention.blocked as blocked

    monkeypatch.setenv("HF_SPARSE_FUSED", "0")

    monkeypatch.setattr(band_backward, "BACKWARD_ELEMENTS", 4 * 32 * 80)
    calls = []
    real = blocked._backward_band
    monkeypatch.setattr(blocked, "_backward_band", lambda p, *a: calls.append(p.offsets) or real(p, *a))
    q, k, v = (t.double().detach().requires_grad_() for t in _inputs(1000, D=8))
    ref = _run(q, k, v, pattern, mode, "dense")
    out = _run(q, k, v, pattern, mode, "blocked", block_size=16)
    grad = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(ref, (q, k, v), grad)):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    assert calls and all(c is not None for c in calls)


def test_band_offsets():
    """The offsets j - i a shared band tile allows: a +-2 window, a dilated one with holes, and a
    tile whose rule is not a function of the offset (block-diagonal) gives None."""
    from hf_sparse.attention.prepare import _band_offsets

    i, j = torch.arange(4)[:, None], torch.arange(12)[None, :]  # block 4, key window from block -1
    d = j - 4 - i
    dmin, dmax, cols = _band_offsets(torch.zeros(4, 12).masked_fill(d.abs() > 2, float("-inf")), -1)
    assert (dmin, dmax, cols.tolist()) == (-2, 2, [True] * 5)
    dilated = (d.abs() > 4) | (d % 2 != 0)
    dmin, dmax, cols = _band_offsets(torch.zeros(4, 12).masked_fill(dilated, float("-inf")), -1)
    assert (dmin, dmax, cols.tolist()) == (-4, 4, [True, False] * 4 + [True])
    assert _band_offsets(torch.zeros(4, 12).masked_fill((j // 4) != 1, float("-inf")), -1) is None


@pytest.mark.slow
def test_compiled_flex_forward_on_cpu_matches_dense():
    """The compiled path users get by default (the CPU tests above run FlexAttention eagerly)."""
    q, k, v = _inputs(300, grad=False)
    am = torch.ones(2, 300)
    am[1, 200:] = 0
    pattern = P.SlidingWindow(window=32) | P.Strided(stride=50, causal=False)
    ref = sparse_attention(q, k, v, pattern, attention_mask=am, backend="dense")
    with torch.no_grad():
        out = sparse_attention(q, k, v, pattern, attention_mask=am, backend="flex")
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_compiled_flex_compiles_every_new_length_instead_of_falling_back_to_eager():
    """Past dynamo's recompile limit (8) compiled FlexAttention would run eagerly (n^2 scores)."""
    from torch._dynamo.utils import counters

    pattern = P.SlidingWindow(window=8)
    lengths = range(40, 40 + 10 * 9, 9)
    before = counters["frames"]["ok"]  # frames dynamo compiled
    for n in lengths:
        q, k, v = _inputs(n, grad=False)
        with torch.no_grad():
            out = sparse_attention(q, k, v, pattern, backend="flex")
        torch.testing.assert_close(
            out, sparse_attention(q, k, v, pattern, backend="dense"), atol=1e-5, rtol=0
        )
    assert counters["frames"]["ok"] - before == len(lengths)


def _spy_backends(monkeypatch):
    """Calls of the sdpa and blocked paths and of the n x n mask, in order."""
    import hf_sparse.attention.dispatch as dispatch

    calls = []
    for name in ("sdpa_attention", "blocked_attention", "allowed_mask"):
        real = getattr(dispatch, name)
        monkeypatch.setattr(
            dispatch, name, lambda *a, _r=real, _n=name, **kw: calls.append(_n) or _r(*a, **kw)
        )
    return calls


def test_auto_runs_tiny_inputs_on_sdpa_and_the_rest_blocked_on_cpu(monkeypatch):
    """auto on CPU: the fused SDPA kernel up to SDPA_CPU_MAX_PAIRS query-key pairs without dropout (measured:
    ``dispatch.py``), the blocked kernel past it and with dropout."""
    import hf_sparse.attention.dispatch as dispatch

    calls = _spy_backends(monkeypatch)
    q, k, v = _inputs(64)
    pattern = P.SlidingWindow(window=8)
    ref = sparse_attention(q, k, v, pattern, backend="dense")
    pairs = 2 * 3 * 64 * 64
    for limit, want in ((pairs, ["allowed_mask", "sdpa_attention"]), (pairs - 1, ["blocked_attention"])):
        monkeypatch.setattr(dispatch, "SDPA_CPU_MAX_PAIRS", limit)
        calls.clear()
        torch.testing.assert_close(sparse_attention(q, k, v, pattern), ref, atol=1e-5, rtol=0)
        assert calls == want
    monkeypatch.setattr(dispatch, "SDPA_CPU_MAX_PAIRS", pairs)
    calls.clear()
    sparse_attention(q, k, v, pattern, dropout_p=0.1)
    assert calls == ["blocked_attention"]


def test_auto_never_takes_the_n_squared_path_for_a_long_sparse_input(monkeypatch):
    """B=1 H=1 n=4096 SlidingWindow(64) is 2^24 query-key pairs, inside the former sdpa limit (SDPA_MAX_PAIRS):
    auto built the whole mask and ran SDPA over it, 650 ms against the blocked kernel's 1 ms (decoding one query
    over 16k keys: 2.7 against 0.2 ms)."""
    calls = _spy_backends(monkeypatch)
    q, k, v = (torch.randn(1, 1, 4096, 4) for _ in range(3))
    sparse_attention(q, k, v, P.SlidingWindow(window=64))
    q, k, v = (torch.randn(1, 4, n, 4) for n in (1, 4096, 4096))  # decoding one query (4 heads)
    sparse_attention(q, k, v, P.SlidingWindow(window=64, causal=True))
    assert calls == ["blocked_attention", "blocked_attention"]


def test_sdpa_dropout_is_seeded():
    q, k, v = _inputs(64, grad=False)
    run = lambda seed: sparse_attention(  # noqa: E731
        q, k, v, P.SlidingWindow(window=8), dropout_p=0.3, seed=seed, backend="sdpa"
    )
    torch.testing.assert_close(run(5), run(5))
    assert not torch.equal(run(5), run(6))


def _count_paths(monkeypatch):
    """Forward calls per path: the compiled band / table kernels, the pure-PyTorch component."""
    import hf_sparse.attention.blocked as blocked
    import hf_sparse.attention.fused_components as fused_components

    calls = {"band": 0, "class_band": 0, "range": 0, "tables": 0, "torch": 0}

    def count(kind):
        calls[kind] += 1

    real_kernel, real_torch = fused_components._kernel_forward, blocked._BlockSparse.apply
    monkeypatch.setattr(
        fused_components,
        "_kernel_forward",
        lambda run, *a, **kw: count(run.kind) or real_kernel(run, *a, **kw),
    )
    monkeypatch.setattr(blocked._BlockSparse, "apply", lambda *a: count("torch") or real_torch(*a))
    return calls


@pytest.mark.parametrize("path", ["fused", "fallback"])
@pytest.mark.parametrize("mode", [*MODES, "gqa"])
@pytest.mark.parametrize("n", [7, 129, 1000])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_fused_and_fallback_paths_match_dense_float64(name, n, mode, path, monkeypatch):
    """Both paths of the blocked kernel: the compiled ones (``fused.py``: the band kernel for sliding
    windows, the table kernel for gathered, dense and irregular band components; ``HF_SPARSE_FUSED=all``
    runs them wherever they apply) and the pure-PyTorch one (``HF_SPARSE_FUSED=0``, or no compiler). Outputs and gradients equal the
    dense reference to 1e-10 in float64. ``gqa``: one key/value head for three query heads, with
    padding and global tokens."""
    _assert_path_matches_dense_float64(name, n, mode, path, monkeypatch)


def _assert_matches_dense(q, k, v, out, ref):
    """float64 outputs and input gradients (for a random output gradient) equal the reference's to 1e-10."""
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    grad = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(ref, (q, k, v), grad)):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


def _assert_path_matches_dense_float64(name, n, mode, path, monkeypatch):
    from hf_sparse.attention import fused

    if path == "fused" and not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.setenv("HF_SPARSE_FUSED", "all" if path == "fused" else "0")
    calls = _count_paths(monkeypatch)
    pattern = PATTERNS[name]
    q, k, v = (t.double().detach().requires_grad_() for t in _inputs(n, D=8))
    if mode == "gqa":
        k, v = (t[:, :1].detach().requires_grad_() for t in (k, v))
        am, gm = make_masks("padding", q.shape[0], n)[0], make_masks("global", q.shape[0], n)[1]
        kw = {"attention_mask": am, "global_attention_mask": gm}
        ref = sparse_attention(q, k, v, pattern, backend="dense", **kw)
        out = sparse_attention(q, k, v, pattern, backend="blocked", **kw)
    else:
        ref = _run(q, k, v, pattern, mode, "dense")
        out = _run(q, k, v, pattern, mode, "blocked")
    _assert_matches_dense(q, k, v, out, ref)
    assert (calls["band"] + calls["class_band"] + calls["range"] + calls["tables"] > 0) == (
        path == "fused"
    ), calls


@pytest.fixture
def threads(request):
    """torch's intra-op threads for one test (the suite gives each xdist worker its share: conftest.py)."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@pytest.mark.parametrize("threads", [3], indirect=True)
@pytest.mark.parametrize("mode", ["none", "gqa"])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_fused_kernels_match_dense_on_several_threads(name, mode, threads, monkeypatch):
    """The compiled kernels split query blocks, heads and key groups into tasks over threads (4 per thread) and
    add gradients per key group without locks; the suite may run on one thread per worker, so the float64
    table runs here on 3."""
    assert torch.get_num_threads() == threads
    _assert_path_matches_dense_float64(name, 1000, mode, "fused", monkeypatch)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mode", [*MODES, "decode"])
@pytest.mark.parametrize("n", [7, 129, 1000])
def test_lsh_first_round_runs_on_the_range_kernel(causal, mode, n, monkeypatch):
    """LSH's first hashing round in bucket order is one contiguous run of keys per query (its bucket; with
    causal, up to the query's position): the range kernel runs it (not tables) and equals the dense
    reference to 1e-10 in float64, outputs and gradients, with padding and when decoding (a query shorter
    than the keys) and with global tokens (causal ones restrict the rule: it may go back to the tables)."""
    from hf_sparse.attention import fused

    if not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.setenv("HF_SPARSE_FUSED", "all")
    calls = _count_paths(monkeypatch)
    pattern = P.LSH(bucket_size=8, causal=causal, seed=3)
    q, k, v = (t.double().detach().requires_grad_() for t in _inputs(n))
    if mode == "decode":
        q = q[:, :, -max(1, n // 3) :].detach().requires_grad_()
        ref = sparse_attention(q, k, v, pattern, backend="dense")
        out = sparse_attention(q, k, v, pattern, backend="blocked")
    else:
        ref = _run(q, k, v, pattern, mode, "dense")
        out = _run(q, k, v, pattern, mode, "blocked")
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    grad = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(ref, (q, k, v), grad)):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    assert calls["range"] == 1 or mode == "global", calls


def _range_reference(q, k, v, qidx, kidx, lo, hi, kvalid, scale):
    """The range kernel's rule as a dense mask in the tensors' rows: component row i (tensor row qidx[i])
    sees the component key rows [lo[i], hi[i]) (tensor rows kidx[j]) that are valid -> (out, lse)."""
    BH, n = qidx.shape
    allowed = torch.zeros(BH, n, k.shape[1], dtype=torch.bool)
    j = torch.arange(kidx.shape[1])
    for r in range(BH):
        in_range = (j >= lo[r, :, None]) & (j < hi[r, :, None])
        if kvalid.numel():
            in_range &= kvalid[r].bool()
        allowed[r, qidx[r, :, None], kidx[r][None, :]] = in_range
    s = (q @ k.transpose(-1, -2) * scale).masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.where(allowed, torch.exp(s - lse[..., None].clamp(min=-1e300)), torch.zeros_like(s))
    return p @ v, lse


def _fused_or_skip():
    from hf_sparse.attention import fused

    if not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    return fused


@pytest.mark.parametrize("path", ["blas", "register_blocked"])
@pytest.mark.parametrize("rows", [1, 3, 64])
@pytest.mark.parametrize("ordered", [True, False])
def test_range_kernel_matches_dense_with_its_own_row_orders(ordered, rows, path):
    """The range kernel reads q, k, v and writes out, lse, dq, dk, dv through its row orders (permutations),
    with tiles of up to ``rows`` rows of one range start grouped by disjoint key windows. Against a dense
    reference of the same rule, outputs and gradients: LSH-like ranges (sorted buckets, some rows without
    keys, some invalid keys) and arbitrary ones (overlapping, out of order: one group per row). ``blas``:
    float64 to 1e-10 (and float32 with the register-blocked kernels off); ``register_blocked``: float32,
    D = 16, where the build has them (AVX-512), to 1e-5."""
    fused = _fused_or_skip()
    g = torch.Generator().manual_seed(1)
    BH, n, nk, D = 3, 50, 40, 16
    dtype, tol = (torch.float64, 1e-10) if path == "blas" else (torch.float32, 1e-5)
    q, k, v = (torch.randn(BH, m, D, generator=g, dtype=torch.float64) for m in (n, nk, nk))
    qidx = torch.stack([torch.randperm(n, generator=g) for _ in range(BH)])
    kidx = torch.stack([torch.randperm(nk, generator=g) for _ in range(BH)])
    if ordered:  # buckets: sorted runs, as LSH's bucket order gives
        qb = torch.randint(0, 8, (BH, n), generator=g).sort(-1).values  # buckets 6, 7: no key
        kb = torch.randint(0, 6, (BH, nk), generator=g).sort(-1).values
        lo = torch.searchsorted(kb, qb)
        hi = torch.searchsorted(kb, qb, right=True)
    else:
        lo = torch.randint(0, nk, (BH, n), generator=g)
        hi = (lo + torch.randint(-3, 15, (BH, n), generator=g)).clamp(max=nk)
    lo, hi = lo.to(torch.int32), hi.to(torch.int32)
    kvalid = (torch.rand(BH, nk, generator=g) > 0.1).to(torch.uint8)
    ref_out, ref_lse = _range_reference(q, k, v, qidx, kidx, lo, hi, kvalid, 0.3)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    d_out = torch.randn_like(ref_out)
    ref = torch.autograd.grad(_range_reference(q, k, v, qidx, kidx, lo, hi, kvalid, 0.3)[0], (q, k, v), d_out)
    qx, kx, vx, d_out = (t.detach().to(dtype) for t in (q, k, v, d_out))
    if path == "register_blocked" and not fused.ops().range_register_blocked(True):
        pytest.skip("this build has no register-blocked range kernels (AVX-512)")
    fused.ops().range_register_blocked(path == "register_blocked")
    try:
        out, lse = fused.ops().range_forward(qx, kx, vx, qidx, kidx, lo, hi, kvalid, rows, 0.3)
        delta = torch.where(torch.isinf(lse), 0.0, (d_out * out).sum(-1))
        grads = [torch.zeros_like(t) for t in (qx, kx, vx)]
        fused.ops().range_backward(
            qx, kx, vx, d_out, lse, delta, qidx, kidx, lo, hi, kvalid, rows, 0.3, *grads
        )
    finally:
        fused.ops().range_register_blocked(True)
    torch.testing.assert_close(out, ref_out.to(dtype), atol=tol, rtol=0)
    torch.testing.assert_close(lse, ref_lse.to(dtype), atol=tol, rtol=0)
    assert bool(torch.isneginf(lse).any()) and bool(torch.isfinite(lse).any())  # both kinds of row were met
    for a, b in zip(grads, ref):
        torch.testing.assert_close(a, b.to(dtype), atol=tol, rtol=0)


def test_range_kernel_rejects_orders_that_are_not_permutations():
    """A row order that repeats a row would leave output rows unwritten: refused."""
    fused = _fused_or_skip()
    q = k = v = torch.randn(1, 4, 8)
    lo = hi = torch.zeros(1, 4, dtype=torch.int32)
    none = torch.empty(0, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="permutations"):
        fused.ops().range_forward(
            q, k, v, torch.tensor([[0, 1, 1, 3]]), torch.arange(4)[None], lo, hi, none, 8, 1.0
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_range_kernel_tile_without_keys(dtype):
    """A tile of the range kernel where no row has a key (LSH: a 1-token query whose key hashed to
    another bucket) has output 0, log-sum-exp -inf and no gradient, and touches no memory outside its
    tensors: each tensor here is preceded by a NaN row (the empty union of the rows' ranges once made
    the tile's window overflow to one key row before the tensor, read forward and added to backward)."""
    fused = _fused_or_skip()
    BH, n, D = 2, 3, 16

    def after_nan_row(x):  # x as a view whose storage holds a NaN row just before it
        big = torch.full((BH * n + 1, D), float("nan"), dtype=dtype)
        big[1:] = x.reshape(-1, D)
        return big, big[1:].view(BH, n, D)

    (qb, q), (kb, k), (vb, v), (_, d_out) = (after_nan_row(torch.randn(BH, n, D)) for _ in range(4))
    lo = hi = torch.zeros(BH, n, dtype=torch.int32)  # every range empty
    order = torch.arange(n).expand(BH, n).contiguous()
    none = torch.empty(0, dtype=torch.uint8)
    out, lse = fused.ops().range_forward(q, k, v, order, order, lo, hi, none, 32, 0.25)
    assert bool((out == 0).all()) and bool(torch.isneginf(lse).all())
    grads = [after_nan_row(torch.zeros(BH, n, D)) for _ in range(3)]
    delta = torch.zeros(BH, n, dtype=dtype)
    fused.ops().range_backward(
        q, k, v, d_out, lse, delta, order, order, lo, hi, none, 32, 0.25, *(g for _, g in grads)
    )
    for big, g in grads:
        assert bool((g == 0).all()) and bool(torch.isnan(big[0]).all())


@pytest.mark.parametrize("path", ["fused", "fallback"])
@pytest.mark.parametrize("mode", ["none", "padding", "global"])
def test_whole_global_blocks_join_the_position_order_component(mode, path, monkeypatch):
    """BigBird's global key blocks are whole blocks of positions: its plan runs them with the window and
    random blocks in position order (one component, no merge over every row), and the global rows keep
    their full tiles; the result is exact on both paths."""
    from hf_sparse.attention import fused

    if path == "fused" and not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.setenv("HF_SPARSE_FUSED", "all" if path == "fused" else "0")
    n, pattern = 256, PATTERNS["bigbird"]  # blocks of 16; n a multiple: the last global block is whole
    plan = pattern.bind(n).plan(n, block=16)
    assert [c.name for c in plan.components] == ["block_set|global_columns", "global_rows"]
    assert bool(plan.components[1].layout.full.any())
    q, k, v = (t.double().detach().requires_grad_() for t in _inputs(n, D=8))
    ref, out = (_run(q, k, v, pattern, mode, backend) for backend in ("dense", "blocked"))
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    grad = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(ref, (q, k, v), grad)):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", ["sliding_window", "sliding_window_causal", "longformer", "strided"])
def test_fused_band_kernel_runs_sliding_windows(name, monkeypatch):
    """Translation-invariant bands (sliding windows, alone, in Longformer or in Strided) run the compiled band
    kernel (with ``HF_SPARSE_FUSED=all``), not the table kernel or the pure-PyTorch band path."""
    from hf_sparse.attention import fused

    if not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.setenv("HF_SPARSE_FUSED", "all")
    calls = _count_paths(monkeypatch)
    q, k, v = _inputs(300)
    _run(q, k, v, PATTERNS[name], "padding", "blocked").sum().backward()
    assert calls["band"] == 1 and calls["torch"] == 0, calls  # Strided: its columns run on tables


def _assert_float32_blocked_matches_float64_dense(q, k, v, pattern, g, grad_atol=1e-5, **kw):
    """Outputs and input gradients (for a random output gradient from ``g``) of the blocked kernel in float32
    equal the dense reference of the same inputs in float64."""
    x32 = [t.clone().requires_grad_() for t in (q, k, v)]
    x64 = [t.double().requires_grad_() for t in (q, k, v)]
    out = sparse_attention(*x32, pattern, backend="blocked", **kw)
    ref = sparse_attention(*x64, pattern, backend="dense", **kw)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    grad = torch.randn(out.shape, generator=g)
    for a, b, what in zip(
        torch.autograd.grad(out, x32, grad), torch.autograd.grad(ref, x64, grad.double()), "qkv"
    ):
        torch.testing.assert_close(
            a.double(), b, atol=grad_atol, rtol=1e-5, msg=lambda m, w=what: f"d{w}: {m}"
        )


# the fused path at a runtime head size (16) and a compiled one with a different value size (64, 48), at
# lengths that end inside a part and a tile, and (n = 1000) where the classes are equal for stride 8; the
# fallback where it differed (torch's CPU flash kernel raised for Dv != D, at any length)
BAND_CASES = [("fused", 16, 16, n) for n in (7, 129, 1000)] + [("fused", 64, 48, n) for n in (7, 129, 1000)]
BAND_CASES += [("fallback", 64, 48, n) for n in (7, 129)]


@pytest.mark.parametrize("path, D, Dv, n", BAND_CASES)
@pytest.mark.parametrize("mode", [*MODES, "gqa"])
@pytest.mark.parametrize(
    "name",
    ["sliding_window", "sliding_window_causal", "longformer", "strided_bidirectional", "strided", "dilated"],
)
def test_band_kernels_float32_match_dense(name, D, Dv, n, mode, path, monkeypatch):
    """Bands in float32 on both paths. The compiled band kernel runs register-blocked on AVX-512
    (``band_forward_rb`` / ``band_backward_rb`` in ``csrc/block_sparse.cpp``: no BLAS, 64-row tiles in
    parts of 16 rows with their own key ranges), which the float64 tables above never reach, and so do
    bands inside residue classes (Strided's causal columns, Dilated: ``class_band_*``, where the classes
    are equal: n = 1000 for stride 8, n = 129 for dilation 3; merged into the local band's output in
    place); the pure-PyTorch path takes torch's CPU flash kernel only where v has q's head size.
    Outputs and gradients equal the float64 dense reference of the same inputs, with padding, global
    tokens and grouped-query heads, at lengths that end inside a part and a tile."""
    from hf_sparse.attention import fused

    if path == "fused" and not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.setenv("HF_SPARSE_FUSED", "all" if path == "fused" else "0")
    calls = _count_paths(monkeypatch)
    g = torch.Generator().manual_seed(n)
    kv_heads = 1 if mode == "gqa" else 3
    q = torch.randn(2, 3, n, D, generator=g)
    k = torch.randn(2, kv_heads, n, D, generator=g)
    v = torch.randn(2, kv_heads, n, Dv, generator=g)
    if mode == "gqa":
        masks = make_masks("padding", 2, n)[0], make_masks("global", 2, n)[1]
    else:
        masks = make_masks(mode, 2, n)
    kw = {"attention_mask": masks[0], "global_attention_mask": masks[1]}
    # a global key's dv sums ~1000 float32 terms up to ~100 each: 2e-5 of rounding on both paths
    _assert_float32_blocked_matches_float64_dense(q, k, v, PATTERNS[name], g, grad_atol=5e-5, **kw)
    if mode in ("none", "padding"):  # global tokens can move short inputs onto the table kernel
        classes = {"strided": 8, "dilated": 3}.get(name)
        if classes is None:
            assert calls["band"] == (path == "fused"), calls
        else:
            assert calls["class_band"] == (path == "fused" and n % classes == 0), calls


@pytest.mark.parametrize("D", [16, 64])
@pytest.mark.parametrize("window", range(2, 10))
def test_band_kernel_scores_every_count_of_keys_left_after_groups_of_8(window, D, monkeypatch):
    """The register-blocked band kernel scores a part's keys 8 at a time, then the 1-7 left in one call
    (``scores_part_d`` in ``csrc/block_sparse.cpp``): a 16-row part of a causal window w has 15 + w keys,
    so windows 2-9 leave every count 1-7 and 0 (at a runtime head size, 16, and a compiled one, 64)."""
    from hf_sparse.attention import fused

    if not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.setenv("HF_SPARSE_FUSED", "all")
    calls = _count_paths(monkeypatch)
    q, k, v = _inputs(160, B=1, H=2, D=D, grad=False)
    g = torch.Generator().manual_seed(window)
    _assert_float32_blocked_matches_float64_dense(q, k, v, P.SlidingWindow(window=window, causal=True), g)
    assert calls["band"] == 1, calls


def test_bands_wider_than_the_band_kernel_run_on_tables(monkeypatch):
    """A band wider than FUSED_BAND_MAX_WIDTH key offsets goes to the table kernel, still exact."""
    import hf_sparse.attention.fused_components as fused_components
    from hf_sparse.attention import fused

    if not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.setenv("HF_SPARSE_FUSED", "all")
    monkeypatch.setattr(fused_components, "FUSED_BAND_MAX_WIDTH", 8)
    calls = _count_paths(monkeypatch)
    q, k, v = (t.double().detach().requires_grad_() for t in _inputs(200, D=8))
    for window, used in ((7, 1), (9, 0)):  # offsets -3..3 fit, -4..4 do not
        pattern = P.SlidingWindow(window=window)
        calls.update(band=0, tables=0, torch=0)
        out = _run(q, k, v, pattern, "padding", "blocked")
        assert calls["band"] == used and calls["tables"] == 1 - used, calls
        torch.testing.assert_close(out, _run(q, k, v, pattern, "padding", "dense"), atol=1e-10, rtol=0)


def test_fused_kernel_runs_gathered_components(monkeypatch):
    """BigBird's and Strided's gathered components go through the compiled table kernel where it is built
    (the default rule, ``fused_components.FUSED_DEFAULT``), every component of the plan in one autograd
    node: its backward needs no merge and shares one set of gradient buffers."""
    from hf_sparse.attention import fused

    if not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.delenv("HF_SPARSE_FUSED", raising=False)
    calls = _count_paths(monkeypatch)
    q, k, v = _inputs(300)
    for name, components in (("bigbird", 3), ("strided", 2)):  # 300 rows: Strided(8)'s classes are unequal
        calls.update(band=0, class_band=0, tables=0, torch=0)
        out = sparse_attention(q, k, v, PATTERNS[name], backend="blocked")
        assert calls["tables"] >= 1 and calls["band"] + calls["tables"] == components, (name, calls)
        assert calls["torch"] == 0
        node = out.grad_fn  # the dispatch's reshapes, then the plan's node
        while type(node).__name__ == "ViewBackward0":
            node = node.next_functions[0][0]
        assert type(node).__name__ == "_FusedPlanBackward", node


def test_repeated_calls_reuse_the_kernel_arguments(monkeypatch):
    """A pattern called again at the same shape and padding (every layer of a model that shares it, every
    step) reuses each component's preparation and kernel tables; another padding mask or shape gets its own
    (a mask changed in place after a call included); the kernel is still chosen on every call; and every
    call stays exact."""
    import hf_sparse.attention.blocked as blocked
    from hf_sparse.attention import fused

    if not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.delenv("HF_SPARSE_FUSED", raising=False)
    made = []
    for name in ("_prepare", "_fused_tables", "_fused_band_args"):
        real = getattr(blocked, name)
        monkeypatch.setattr(blocked, name, lambda *a, real=real, name=name: made.append(name) or real(*a))
    calls = _count_paths(monkeypatch)
    calls_in_order = [  # (mask, n, batch, prepared before)
        ("none", 300, 2, False),
        ("none", 300, 2, True),
        ("padding", 300, 2, False),
        ("padding", 300, 2, True),
        ("other padding", 300, 2, False),  # the same mask tensor as the last call, changed in place
        ("padding", 300, 2, True),
        ("none", 300, 1, False),
        ("none", 300, 2, True),
        ("none", 256, 2, False),
    ]
    for name, builds in (("sliding_window", "_fused_band_args"), ("bigbird", "_fused_tables")):
        pattern = all_patterns()[name]  # a fresh one: nothing kept on it yet
        mask = torch.ones(2, 300, dtype=torch.bool)
        for seed, (mode, n, B, reused) in enumerate(calls_in_order):
            made.clear()
            q, k, v = (t.double().detach().requires_grad_() for t in _inputs(n, B=B, seed=seed))
            if mode != "none":
                mask.fill_(True)
                mask[-1, 151 if mode == "padding" else 200 :] = False
            am = mask if mode != "none" else None
            out = sparse_attention(q, k, v, pattern, attention_mask=am, backend="blocked")
            assert made == [] if reused else {"_prepare", builds} <= set(made), (name, mode, n, B, made)
            _assert_matches_dense(
                q, k, v, out, sparse_attention(q, k, v, pattern, attention_mask=am, backend="dense")
            )
        calls.update(band=0, tables=0, torch=0)
        monkeypatch.setenv("HF_SPARSE_FUSED", "0")  # chosen per call: the kept run does not force its kernel
        q, k, v = (t.double().detach().requires_grad_() for t in _inputs(300, B=2, seed=9))
        out = _run(q, k, v, pattern, "none", "blocked")
        assert calls["torch"] == len(pattern.bind(300).plan(300).components), calls
        assert calls["band"] + calls["tables"] == 0, calls
        _assert_matches_dense(q, k, v, out, _run(q, k, v, pattern, "none", "dense"))
        monkeypatch.delenv("HF_SPARSE_FUSED")


@pytest.mark.parametrize(
    "name, grad, expected",
    [
        ("sliding_window", False, {"band": 1, "tables": 0, "torch": 0}),
        ("sliding_window", True, {"band": 1, "tables": 0, "torch": 0}),
        ("bigbird", False, {"band": 0, "torch": 0}),
        ("bigbird", True, {"band": 0, "torch": 0}),
    ],
)
def test_default_dispatch_follows_the_measured_rule(name, grad, expected, monkeypatch):
    """By default (``HF_SPARSE_FUSED`` unset) the compiled kernels run where ``FUSED_DEFAULT`` says they
    were measured faster (every kind, with and without gradients), and the rule is what decides: a kind
    taken out of it runs on the PyTorch path."""
    import hf_sparse.attention.fused_components as fused_components
    from hf_sparse.attention import fused

    if not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.delenv("HF_SPARSE_FUSED", raising=False)
    calls = _count_paths(monkeypatch)
    q, k, v = _inputs(300, grad=grad)
    out = sparse_attention(q, k, v, PATTERNS[name], backend="blocked")
    if grad:
        out.sum().backward()
    assert {kind: calls[kind] for kind in expected} == expected, calls
    assert calls["tables"] > 0 or name != "bigbird", calls
    monkeypatch.setattr(fused_components, "FUSED_DEFAULT", FUSED_DEFAULT_WITHOUT_BANDS)
    calls.update(band=0, tables=0, torch=0)
    with torch.no_grad():
        sparse_attention(q, k, v, PATTERNS["sliding_window"], backend="blocked")
    assert calls == {"band": 0, "class_band": 0, "range": 0, "tables": 0, "torch": 1}


FUSED_DEFAULT_WITHOUT_BANDS = {("tables", False), ("tables", True)}


def test_fused_mode_rejects_unknown_values(monkeypatch):
    from hf_sparse.attention import fused

    monkeypatch.setenv("HF_SPARSE_FUSED", "sometimes")
    with pytest.raises(ValueError, match="HF_SPARSE_FUSED.*'sometimes'"):
        fused.mode()
    for value, expected in (("0", "off"), ("1", "auto"), ("ALL", "all"), ("auto", "auto")):
        monkeypatch.setenv("HF_SPARSE_FUSED", value)
        assert fused.mode() == expected


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_band_backward_takes_a_broadcast_output_gradient(dtype, monkeypatch):
    """``out.sum().backward()`` hands the kernel an expanded (stride-0) gradient; the band backward reads
    windows of it with ``as_strided`` and must not assume its own layout (it raised "out of bounds for
    storage" once the buffers slide). The pure-PyTorch band path (the compiled band kernel's fallback)."""
    import hf_sparse.attention.band_backward as band_backward
    import hf_sparse.attention.blocked as blocked

    monkeypatch.setenv("HF_SPARSE_FUSED", "0")
    monkeypatch.setattr(band_backward, "BACKWARD_ELEMENTS", 4 * 32 * 128)  # chunks of 4 query tiles
    calls = []
    real = blocked._backward_band
    monkeypatch.setattr(blocked, "_backward_band", lambda p, *a: calls.append(p.offsets) or real(p, *a))
    q, k, v = (t.to(dtype).detach().requires_grad_() for t in _inputs(1024, D=16))
    pattern = P.SlidingWindow(window=96)
    sparse_attention(q, k, v, pattern, backend="blocked", block_size=32).sum().backward()
    q2, k2, v2 = (t.detach().requires_grad_() for t in (q, k, v))
    sparse_attention(q2, k2, v2, pattern, backend="dense").sum().backward()
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    for a, b in zip((q.grad, k.grad, v.grad), (q2.grad, k2.grad, v2.grad)):
        torch.testing.assert_close(a, b, atol=tol, rtol=0)
    assert calls


def test_repeated_calls_plan_once(monkeypatch):
    """A spec dict resolves to one pattern object, whose bound random blocks and plan serve every later call
    with the same lengths; the same global tokens give the same combined pattern, other tokens another."""
    from hf_sparse.attention.dispatch import resolve_pattern, with_runtime_globals

    spec = {"type": "bigbird", "block": 16, "seed": 3}
    assert resolve_pattern(spec) is resolve_pattern(dict(reversed(spec.items())))
    planned, bound = [], []
    real_plan, real_bind = P.Pattern.plan, P.BigBird.bind
    monkeypatch.setattr(
        P.Pattern, "plan", lambda self, *a, **k: planned.append(1) or real_plan(self, *a, **k)
    )
    monkeypatch.setattr(P.BigBird, "bind", lambda self, *a, **k: bound.append(1) or real_bind(self, *a, **k))
    q, k, v = _inputs(200, grad=False)
    outs = [sparse_attention(q, k, v, spec, backend="blocked") for _ in range(3)]
    assert len(planned) == 1 and len(bound) == 1
    assert all(torch.equal(o, outs[0]) for o in outs)
    sparse_attention(q[..., :100, :], k[..., :100, :], v[..., :100, :], spec, backend="blocked")
    assert len(planned) == 2  # another length: planned again
    base = P.SlidingWindow(window=8)
    gm = torch.zeros(2, 50)
    gm[0, 3] = 1
    first = with_runtime_globals(base, gm)
    assert with_runtime_globals(base, gm.clone()) is first
    gm[1, 7] = 1
    assert with_runtime_globals(base, gm) is not first


@pytest.mark.parametrize(
    "pattern", [P.SlidingWindow(window=9), P.BigBird(block=8, seed=1)], ids=["band", "tables"]
)
def test_fused_gradients_through_the_log_sum_exp(pattern, monkeypatch):
    """A caller that uses the log-sum-exp too (``return_lse``: merges with other attention) gets its gradient:
    the kernels' delta subtracts it (``row_delta``'s dlse). Against autograd through a dense masked softmax,
    float64, with padding (rows without keys: lse -inf, no gradient)."""
    from hf_sparse.attention.blocked import blocked_attention

    _fused_or_skip()
    monkeypatch.setenv("HF_SPARSE_FUSED", "all")
    calls = _count_paths(monkeypatch)
    n = 70
    q, k, v = (t.double().detach().requires_grad_() for t in _inputs(n))
    key_valid = torch.ones(2, n, dtype=torch.bool)
    key_valid[1, 40:] = False
    out, lse = blocked_attention(q, k, v, pattern.bind(n).plan(n), key_valid=key_valid, return_lse=True)
    allowed = pattern.bind(n).dense_mask(n).bool() & key_valid[:, None, None, :]
    s = (q @ k.transpose(-1, -2) / 4.0).masked_fill(~allowed, float("-inf"))
    ref_lse = torch.logsumexp(s, -1)
    ref_out = torch.softmax(s, -1).nan_to_num() @ v
    finite = torch.isfinite(ref_lse)
    torch.testing.assert_close(out, ref_out, atol=1e-10, rtol=0)
    g_out, g_lse = torch.randn_like(out), torch.randn_like(lse)
    loss = lambda o, l: (o * g_out).sum() + (l.masked_fill(~finite, 0) * g_lse).sum()  # noqa: E731, E741
    got = torch.autograd.grad(loss(out, lse), (q, k, v))
    ref = torch.autograd.grad(loss(ref_out, ref_lse), (q, k, v))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    assert calls["band"] + calls["tables"] >= 1 and calls["torch"] == 0, calls
