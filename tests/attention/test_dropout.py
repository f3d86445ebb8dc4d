"""Attention dropout: one mask per (seed, row, query, key) on every path (``hf_sparse.attention.dropout``)."""

import copy
import math

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention
from hf_sparse.attention.dropout import keep_mask, keep_pairs, threshold
from tests.attention.test_kernels import PATTERNS, _assert_matches_dense, _count_paths, _inputs
from tests.cases import make_masks


def test_keep_mask_keeps_one_minus_p_independently_of_position():
    keep = keep_mask(7, 0.3, 2, 3, 256, 256)
    assert keep.shape == (2, 3, 256, 256) and keep.dtype == torch.bool
    assert abs(keep.float().mean().item() - 0.7) < 0.005
    # no structure along any axis: every head, row and column keeps about the same share
    for dim in (1, 2, 3):
        share = keep.float().mean(dim=[d for d in range(4) if d != dim])
        assert (share - 0.7).abs().max() < 0.06, dim  # 5 standard deviations of a row's 1,536 draws
    # neighbouring pairs are independent: P(both kept) ~ 0.49
    assert abs((keep[..., 1:] & keep[..., :-1]).float().mean().item() - 0.49) < 0.005
    assert not torch.equal(keep, keep_mask(8, 0.3, 2, 3, 256, 256))
    assert torch.equal(keep, keep_mask(7, 0.3, 2, 3, 256, 256))
    assert keep_mask(7, 0.0, 1, 1, 8, 8).all()


def test_keep_pairs_is_keep_mask_at_those_pairs():
    keep = keep_mask(123, 0.25, 2, 2, 40, 50)
    bh, i, j = (torch.randint(0, n, (500,)) for n in (4, 40, 50))
    torch.testing.assert_close(keep_pairs(123, 0.25, bh, i, j), keep.view(4, 40, 50)[bh, i, j])


def test_bad_dropout_probability_and_seed():
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1.0"):
        threshold(1.0)
    with pytest.raises(TypeError, match="seed must be an int, got float"):
        keep_mask(1.5, 0.1, 1, 1, 4, 4)


@pytest.mark.parametrize("path", ["fused", "fallback"])
@pytest.mark.parametrize("mode", ["none", "padding", "global"])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_dropout_matches_dense_with_the_same_seed_float64(name, mode, path, monkeypatch):
    """With dropout, both paths of the blocked kernel keep exactly the probabilities the dense reference keeps
    for the same seed: outputs and gradients to 1e-10 in float64. On the compiled path every component runs on
    a kernel that draws the mask inside its tiles from the tensor positions: in float64 the band, the range (LSH's
    first round, through its bucket orders) and the table kernel, through the component's row maps where its
    rows are gathered (global rows and columns, LSH's later rounds) or residue classes (Strided, Dilated)."""
    from hf_sparse.attention import fused

    if path == "fused" and not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.setenv("HF_SPARSE_FUSED", "all" if path == "fused" else "0")
    calls = _count_paths(monkeypatch)
    q, k, v = (t.double().detach().requires_grad_() for t in _inputs(129, D=8))
    am, gm = make_masks(mode, q.shape[0], q.shape[2])
    kw = dict(attention_mask=am, global_attention_mask=gm, dropout_p=0.3, seed=2024)
    ref = sparse_attention(q, k, v, PATTERNS[name], backend="dense", **kw)
    out = sparse_attention(q, k, v, PATTERNS[name], backend="blocked", **kw)
    assert not torch.allclose(
        ref, sparse_attention(q, k, v, PATTERNS[name], backend="dense", **{**kw, "dropout_p": 0.0})
    )
    _assert_matches_dense(q, k, v, out, ref)
    if path == "fused":  # every component on a compiled kernel (each draws dropout)
        assert calls["torch"] == 0 and calls["band"] + calls["tables"] + calls["range"], calls
    if path == "fallback":
        assert calls["band"] + calls["tables"] + calls["class_band"] + calls["range"] == 0, calls


@pytest.mark.parametrize("mode", ["none", "padding", "global"])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_flex_dropout_keeps_the_pairs_the_dense_reference_keeps(name, mode, monkeypatch):
    """FlexAttention has no dropout: ``flex._with_dropout`` runs a call over the kept pairs and rescales it by
    the log-sum-exps of that call and of one over every allowed pair. Eager here (compiled CPU flex returns
    no log-sum-exp, and no backward: ``tests/attention/test_cuda.py`` checks gradients on CUDA), with the
    class-order calls of Strided and Dilated at every length: the dense result for the same seed."""
    from hf_sparse.attention import flex

    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    monkeypatch.setattr(flex, "FLEX_CLASS_ORDER_MIN_LEN", 0)
    q, k, v = (t.double().detach() for t in _inputs(256, D=8, grad=False))
    am, gm = make_masks(mode, q.shape[0], q.shape[2])
    pattern = PATTERNS[name]
    if pattern.content_based:  # select once, so both backends attend the same pairs
        pattern = pattern.bind(256, query=q, key=k)
    kw = dict(attention_mask=am, global_attention_mask=gm, dropout_p=0.3, seed=2024)
    ref = sparse_attention(q, k, v, pattern, backend="dense", **kw)
    out = sparse_attention(q, k, v, pattern, backend="flex", **kw)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    assert not torch.allclose(out, sparse_attention(q, k, v, pattern, backend="flex", **{**kw, "seed": 2025}))


def _differentiable_flex(query, key, value, block_mask, scale, kernel_options=None, return_lse=False):
    """FlexAttention's eager reference (``math_attention``: the mask_mod over every pair, then softmax) called
    directly, so autograd differentiates it on CPU, where FlexAttention itself has no backward."""
    from torch._higher_order_ops.flex_attention import math_attention

    out, lse, _ = math_attention(query, key, value, lambda s, b, h, i, j: s, block_mask.as_tuple(), scale, {})
    return (out, lse * math.log(2)) if return_lse else out  # its log-sum-exp is in base 2


@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
@pytest.mark.parametrize("mode", ["none", "padding", "global"])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_flex_calls_are_combined_with_exact_gradients(name, mode, dropout_p, monkeypatch):
    """What hf-sparse adds around FlexAttention (dropout's two calls and their rescale by log-sum-exps, the
    class-order calls of Strided and Dilated and their merge) is differentiated exactly: with FlexAttention's
    kernel replaced by its differentiable eager reference, outputs and gradients equal the dense backend's
    for the same seed to 1e-10 in float64. FlexAttention's own backward is tested on CUDA (test_cuda.py)."""
    from hf_sparse.attention import dispatch, flex

    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    monkeypatch.setattr(flex, "FLEX_CLASS_ORDER_MIN_LEN", 0)
    monkeypatch.setattr(flex, "run_flex", _differentiable_flex)
    monkeypatch.setattr(dispatch, "_check_flex", lambda *a: None)  # which refuses gradients on CPU
    q, k, v = (t.double().detach().requires_grad_() for t in _inputs(96, D=8))
    am, gm = make_masks(mode, q.shape[0], q.shape[2])
    pattern = PATTERNS[name]
    if pattern.content_based:  # select once, so both backends attend the same pairs
        pattern = pattern.bind(96, query=q, key=k)
    kw = dict(attention_mask=am, global_attention_mask=gm, dropout_p=dropout_p, seed=2024)
    ref = sparse_attention(q, k, v, pattern, backend="dense", **kw)
    _assert_matches_dense(q, k, v, sparse_attention(q, k, v, pattern, backend="flex", **kw), ref)


@pytest.mark.parametrize(
    ("name", "n"),
    [
        *(
            (name, 384)
            for name in ("sliding_window", "sliding_window_causal", "block_local", "bigbird", "longformer")
        ),
        ("strided", 384),  # a multiple of both strides: whole residue classes
        ("dilated", 384),
        ("bigbird", 1100),  # global rows that see more than 1,024 keys: the BLAS tiles, 16 keys at a time
        ("lsh", 384),  # the range kernel's first round, through its bucket orders
    ],
)
def test_dropout_on_the_register_blocked_kernels_float32(name, n, monkeypatch):
    """float32 with a head size of 64 runs the AVX-512 register-blocked kernels where the CPU has them (the
    mask drawn 16 rows at a time; Strided's and Dilated's residue classes on the class band, row i of class c
    at position i * d + c; long global rows 16 keys at a time): the same probabilities as the dense reference,
    to float32 rounding."""
    from hf_sparse.attention import fused

    if not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.setenv("HF_SPARSE_FUSED", "all")
    calls = _count_paths(monkeypatch)
    q, k, v = _inputs(n, D=64)
    am, _ = make_masks("padding", q.shape[0], q.shape[2])
    kw = dict(attention_mask=am, dropout_p=0.1, seed=5)
    ref = sparse_attention(q, k, v, PATTERNS[name], backend="dense", **kw)
    out = sparse_attention(q, k, v, PATTERNS[name], backend="blocked", **kw)
    if name in ("strided", "dilated") and fused.ops().class_band_runs(64, 64):
        assert calls["class_band"] == 1 and calls["torch"] == 0, calls
    if name == "lsh":
        assert calls["range"] == 1 and calls["torch"] == 0, calls
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=0)
    grad = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(ref, (q, k, v), grad)):
        torch.testing.assert_close(a, b, atol=5e-5, rtol=0)


def test_a_seed_gives_the_same_result_with_and_without_the_compiled_kernel(monkeypatch):
    """The seed drawn from torch's generator (no ``seed``) and the mask it gives do not depend on the path."""
    q, k, v = _inputs(200, D=64, grad=False)
    outs = []
    for mode in ("all", "0"):
        monkeypatch.setenv("HF_SPARSE_FUSED", mode)
        torch.manual_seed(11)
        outs.append(sparse_attention(q, k, v, P.BigBird(block=16, seed=0), dropout_p=0.2, backend="blocked"))
    torch.testing.assert_close(outs[0], outs[1], atol=2e-5, rtol=0)


def test_calls_with_dropout_reuse_the_kernel_arguments_and_draw_a_new_mask(monkeypatch):
    """The seed is an argument of each call, not of the kept preparation: a model's later calls with dropout
    (every layer, every step) reuse each component's preparation and kernel tables, draw the mask of their own
    seed, and stay exact; another dropout probability prepares again."""
    import hf_sparse.attention.blocked as blocked
    from hf_sparse.attention import fused

    made = []
    for name in ("_prepare", "_fused_tables"):
        real = getattr(blocked, name)
        monkeypatch.setattr(blocked, name, lambda *a, real=real, name=name: made.append(name) or real(*a))
    pattern = P.BigBird(
        block=16, window_blocks=3, random_blocks=2, global_blocks=2, seed=0
    )  # nothing kept yet
    q, k, v = (t.double().detach().requires_grad_() for t in _inputs(129, D=8))
    outs = []
    for seed, p, reused in ((1, 0.3, False), (2, 0.3, True), (2, 0.1, False), (3, 0.3, True)):
        made.clear()
        out = sparse_attention(q, k, v, pattern, dropout_p=p, seed=seed, backend="blocked")
        ref = sparse_attention(q, k, v, pattern, dropout_p=p, seed=seed, backend="dense")
        assert (made == []) == reused, (seed, p, made)
        assert "_fused_tables" in made or reused or not fused.available(), made
        _assert_matches_dense(q, k, v, out, ref)
        outs.append(out)
    assert not torch.allclose(outs[0], outs[1])


def test_compiled_flex_dropout_mask_is_exact_and_compiles_once(monkeypatch):
    """The mask of FlexAttention's kept call compiled (inductor's CPU template; forward only, where compiled
    CPU flex runs): it equals the eager one, and a new seed compiles nothing (its hash tables are inputs).
    With the whole hash inside the mask this compile did not finish in 10 minutes; with ``dropout.kept``
    reading the row and key tables it takes seconds."""
    from torch._dynamo.utils import counters

    from hf_sparse.attention import flex
    from hf_sparse.attention.dropout import threshold

    if not flex.can_compile_on(torch.device("cpu")):
        pytest.skip("no C++ compiler for torch.compile")
    B, H, n, D = 1, 2, 256, 16
    q, k, v = _inputs(n, B=B, H=H, D=D, grad=False)
    bound = P.SlidingWindow(window=64).bind(n, n)
    base = flex.flex_block_mask(bound, None, B, H, n, n, 64, "cpu", False, partial=True)
    outs = []
    for seed in (3, 4):
        block_mask = copy.copy(base)
        rows, cols = flex._dropout_tables(seed, B, H, n, n, "cpu")
        block_mask.mask_mod = flex._kept_mod(base.mask_mod, rows, cols, threshold(0.3))
        graphs = counters["stats"]["unique_graphs"]
        monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "1")
        compiled = flex.run_flex(q, k, v, block_mask, D**-0.5)
        if seed == 4:
            assert counters["stats"]["unique_graphs"] == graphs
        monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
        torch.testing.assert_close(compiled, flex.run_flex(q, k, v, block_mask, D**-0.5), atol=1e-5, rtol=0)
        outs.append(compiled)
    assert not torch.allclose(outs[0], outs[1])
