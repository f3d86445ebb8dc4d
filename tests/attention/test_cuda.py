"""The kernel tables on a CUDA device (``make test-gpu``; skipped where there is none).

Every pattern x mask mode (none, padding, global, grouped-query heads) x backend (the blocked
PyTorch path, compiled FlexAttention), forward and backward, against the dense reference computed in
float64 from the same inputs: float64 to 1e-10 (blocked), float32 near its rounding, bfloat16 to
bf16 tolerances. ``HF_SPARSE_TEST_DEVICE=cpu`` runs the device-independent part (no flex backward)
here, to check the tables themselves.
"""

import os

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention
from tests.cases import all_patterns, make_masks

DEVICE = os.environ.get("HF_SPARSE_TEST_DEVICE", "cuda")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device"),
]

PATTERNS = all_patterns()
MODES = ["none", "padding", "global", "gqa"]
# (atol, rtol) of output and gradients against the float64 reference, per input dtype
TOLERANCE = {torch.float64: (1e-10, 1e-10), torch.float32: (2e-4, 2e-4), torch.bfloat16: (3e-2, 3e-2)}


def _inputs(n, dtype, mode, seed=0, B=2, H=3, D=32):  # H = 3: the PerHead case has 3 patterns
    g = torch.Generator().manual_seed(seed)
    kv_heads = 1 if mode == "gqa" else H
    shapes = [(B, H, n, D), (B, kv_heads, n, D), (B, kv_heads, n, D)]
    return [torch.randn(s, generator=g).to(DEVICE, dtype).requires_grad_() for s in shapes]


def _attend(q, k, v, pattern, mode, backend, **kw):
    am, gm = make_masks("none" if mode == "gqa" else mode, q.shape[0], q.shape[2])
    am, gm = (None if m is None else m.to(q.device) for m in (am, gm))
    return sparse_attention(
        q, k, v, pattern, attention_mask=am, global_attention_mask=gm, backend=backend, **kw
    )


def _check(name, n, mode, backend, dtype, **kw):
    pattern = PATTERNS[name]
    q, k, v = _inputs(n, dtype, mode)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    if pattern.content_based:  # select once, on the float64 inputs, so both runs attend the same pairs
        pattern = pattern.bind(n, query=q64, key=k64.repeat_interleave(q.shape[1] // k.shape[1], dim=1))
    ref = _attend(q64, k64, v64, pattern, mode, "dense", **kw)
    out = _attend(q, k, v, pattern, mode, backend, **kw)
    assert out.dtype == dtype and out.device.type == torch.device(DEVICE).type
    assert torch.isfinite(out).all()
    atol, rtol = TOLERANCE[dtype]
    scale = max(1.0, ref.abs().max().item())
    torch.testing.assert_close(out.double(), ref, atol=atol * scale, rtol=rtol)
    grad = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(DEVICE)
    g_ref = torch.autograd.grad(ref, (q64, k64, v64), grad)
    g_out = torch.autograd.grad(out, (q, k, v), grad.to(dtype))
    for a, b, what in zip(g_out, g_ref, "qkv"):
        assert a.dtype == dtype
        scale = max(1.0, b.abs().max().item())
        torch.testing.assert_close(
            a.double(), b, atol=atol * scale, rtol=rtol, msg=lambda m, w=what: f"d{w}: {m}"
        )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [129, 1000])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_blocked_matches_dense(name, n, mode, dtype):
    _check(name, n, mode, "blocked", dtype)


# One compile (forward and backward) per pattern type x mask, so the table is cut to what differs: every
# pattern with padding (its mask_mod and the key mask together), six with global tokens and in bf16.
SOME = ["sliding_window", "sliding_window_causal", "strided", "bigbird", "longformer", "topk_blocks"]
FLEX_CASES = [(name, "padding", torch.float32) for name in PATTERNS]
FLEX_CASES += [(name, "global", torch.float32) for name in SOME]
FLEX_CASES += [(name, "none", torch.bfloat16) for name in SOME]
FLEX_CASES += [("bigbird", "none", torch.float32)]  # 64 x 64 Triton tiles for masks reading tables


@pytest.mark.skipif(DEVICE != "cuda", reason="FlexAttention has no backward off CUDA")
@pytest.mark.parametrize(("name", "mode", "dtype"), FLEX_CASES, ids=str)
def test_compiled_flex_matches_dense(name, mode, dtype):
    torch._dynamo.config.recompile_limit = 1024  # one compile per pattern type x mask; never eager
    _check(name, 1000, mode, "flex", dtype)


@pytest.mark.skipif(DEVICE != "cuda", reason="FlexAttention has no backward off CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["strided", "dilated"])
def test_compiled_flex_in_class_order_matches_dense(name, dtype, monkeypatch):
    """Bands inside residue classes run in class order (calls merged by log-sum-exp), here from n = 1000."""
    from hf_sparse.attention import flex

    monkeypatch.setattr(flex, "FLEX_CLASS_ORDER_MIN_LEN", 0)
    torch._dynamo.config.recompile_limit = 1024
    _check(name, 1000, "none", "flex", dtype)


@pytest.mark.skipif(DEVICE != "cuda", reason="FlexAttention has no backward off CUDA")
def test_compiled_flex_class_bands_of_several_patterns_in_one_process_match_dense(monkeypatch):
    """Class-order bands of different patterns at one shape: each must compile its own mask (one whose
    bounds were default arguments reused the first pattern's compiled kernel: Dilated after Strided)."""
    from hf_sparse.attention import flex

    monkeypatch.setattr(flex, "FLEX_CLASS_ORDER_MIN_LEN", 0)
    torch._dynamo.config.recompile_limit = 1024
    q, k, v = _inputs(2048, torch.float32, "none", B=1, H=2)
    for pattern in (
        P.Strided(stride=128),
        P.Dilated(window=256, dilation=2),
        P.Dilated(window=256, dilation=4),
    ):
        with torch.no_grad():
            out = sparse_attention(q, k, v, pattern, backend="flex")
            ref = sparse_attention(q.double(), k.double(), v.double(), pattern, backend="dense")
        torch.testing.assert_close(
            out.double(), ref, atol=2e-4, rtol=2e-4, msg=lambda m, p=pattern: f"{p}: {m}"
        )


def test_auto_runs_flex_on_cuda_for_position_order_patterns():
    """On CUDA, ``auto`` gives long position-order inputs to FlexAttention; its result is exact."""
    if DEVICE != "cuda":
        pytest.skip("auto picks flex on CUDA only")
    import hf_sparse.attention.dispatch as dispatch

    picked = []
    original = dispatch.flex_attention_forward
    try:
        dispatch.flex_attention_forward = lambda *a, **kw: picked.append(1) or original(*a, **kw)
        q, k, v = _inputs(4096, torch.bfloat16, "none", B=1, H=2)
        out = sparse_attention(q, k, v, P.SlidingWindow(window=256))
    finally:
        dispatch.flex_attention_forward = original
    assert picked, "auto did not choose FlexAttention"
    ref = sparse_attention(*(t.float() for t in (q, k, v)), P.SlidingWindow(window=256), backend="blocked")
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)
    out.float().square().sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_model_trains_and_generates_on_device(dtype):
    """A tiny SparseTransformer: a training step under autocast (bf16) or in float32, then generate()."""
    from hf_sparse import SparseTransformerForCausalLM
    from tests.models.tiny import tiny_decoder_config

    pattern = {"type": "sliding_window", "window": 64, "causal": True}
    cfg = tiny_decoder_config(pattern, hidden_size=64, intermediate_size=128, max_position_embeddings=4096)
    model = SparseTransformerForCausalLM(cfg).to(DEVICE)
    ids = torch.randint(
        1, 97, (2, 4000), device=DEVICE
    )  # no pad token (0); above SDPA_MAX_PAIRS: auto runs the block kernels
    with torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    model.eval()
    out = model.generate(ids[:, :20], max_new_tokens=8, do_sample=False)
    with torch.no_grad():  # greedy decoding with the cache equals the argmax of a full forward
        logits = model(input_ids=out[:, :-1]).logits
    torch.testing.assert_close(out[:, 20:], logits[:, 19:].argmax(-1))


# Without gradients, masks that read tables get BlockMasks of 64 (their tiles whole: no mask evaluated);
# at n = 1024 (whole blocks) masks of whole-block patterns are one block-map lookup, with gradients too.
INFERENCE_CASES = [
    (name, mode)
    for name in ["bigbird", "random", "topk_blocks", "global_indices", "longformer", "sliding_window"]
    for mode in ("none", "padding", "gqa")
]


@pytest.mark.skipif(DEVICE != "cuda", reason="compiled FlexAttention on CUDA")
@pytest.mark.parametrize(("name", "mode"), INFERENCE_CASES, ids=str)
def test_compiled_flex_without_gradients_matches_dense(name, mode):
    torch._dynamo.config.recompile_limit = 1024
    pattern = PATTERNS[name]
    q, k, v = (t.detach() for t in _inputs(1024, torch.float32, mode))
    q64, k64, v64 = (t.double() for t in (q, k, v))
    if pattern.content_based:
        pattern = pattern.bind(1024, query=q64, key=k64.repeat_interleave(q.shape[1] // k.shape[1], dim=1))
    with torch.no_grad():
        out = _attend(q, k, v, pattern, mode, "flex")
    ref = _attend(q64, k64, v64, pattern, mode, "dense")
    atol, rtol = TOLERANCE[torch.float32]
    torch.testing.assert_close(out.double(), ref, atol=atol * max(1.0, ref.abs().max().item()), rtol=rtol)


@pytest.mark.skipif(DEVICE != "cuda", reason="FlexAttention has no backward off CUDA")
@pytest.mark.parametrize("mode", ["none", "padding"])
@pytest.mark.parametrize("name", ["bigbird", "topk_blocks"])
def test_compiled_flex_with_block_map_lookup_matches_dense(name, mode):
    torch._dynamo.config.recompile_limit = 1024
    _check(name, 1024, mode, "flex", torch.float32)


# Attention dropout: the blocked path's PyTorch hash and FlexAttention's two calls (``flex._with_dropout``)
# keep the pairs the dense backend keeps for a seed; flex only where its log-sum-exp is returned (CUDA).
DROPOUT_CASES = [(name, mode, "blocked", torch.float64) for name in PATTERNS for mode in ("none", "global")]
DROPOUT_CASES += [(name, "padding", "flex", torch.float32) for name in SOME + ["per_head", "lsh"]]
DROPOUT_CASES += [(name, "global", "flex", torch.float32) for name in ("sliding_window", "bigbird")]
DROPOUT_CASES += [(name, "none", "flex", torch.bfloat16) for name in ("sliding_window", "bigbird")]


@pytest.mark.parametrize(("name", "mode", "backend", "dtype"), DROPOUT_CASES, ids=str)
def test_dropout_matches_dense_with_the_same_seed(name, mode, backend, dtype):
    if backend == "flex" and DEVICE != "cuda":
        pytest.skip("FlexAttention has no backward off CUDA")
    torch._dynamo.config.recompile_limit = 1024
    _check(name, 1000, mode, backend, dtype, dropout_p=0.2, seed=77)


@pytest.mark.skipif(DEVICE != "cuda", reason="FlexAttention has no backward off CUDA")
@pytest.mark.parametrize("name", ["strided", "dilated"])
def test_flex_dropout_in_class_order_matches_dense(name, monkeypatch):
    from hf_sparse.attention import flex

    monkeypatch.setattr(flex, "FLEX_CLASS_ORDER_MIN_LEN", 0)
    torch._dynamo.config.recompile_limit = 1024
    _check(name, 1000, "none", "flex", torch.float32, dropout_p=0.2, seed=77)


@pytest.mark.skipif(DEVICE != "cuda", reason="compiled FlexAttention on CUDA")
def test_flex_dropout_compiles_once_for_every_seed():
    """The seed reaches the compiled mask as a tensor: later calls with new seeds compile nothing, and draw
    their own mask."""
    from torch._dynamo.utils import counters

    torch._dynamo.config.recompile_limit = 1024
    q, k, v = _inputs(2048, torch.bfloat16, "none", B=1, H=2)
    outs = []
    for seed in range(4):
        if seed == 2:
            graphs = counters["stats"]["unique_graphs"]
        out = sparse_attention(q, k, v, P.SlidingWindow(window=256), dropout_p=0.1, seed=seed, backend="flex")
        out.float().sum().backward()
        outs.append(out.detach())
    assert counters["stats"]["unique_graphs"] == graphs
    assert not torch.equal(outs[2], outs[3])


@pytest.mark.skipif(DEVICE != "cuda", reason="compiled FlexAttention on CUDA")
def test_model_with_attention_dropout_trains_on_flex_as_on_the_blocked_path():
    """A MaskedLM training step with attention dropout 0.1 (the configs' default) on FlexAttention gives, for one
    torch seed, the blocked path's loss and gradients (``auto`` runs the blocked path with dropout)."""
    from hf_sparse import SparseTransformerConfig, SparseTransformerForMaskedLM

    torch._dynamo.config.recompile_limit = 1024
    cfg = SparseTransformerConfig(
        vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=4100, attention_pattern={"type": "sliding_window", "window": 128},
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.1,
    )  # fmt: skip
    torch.manual_seed(0)
    model = SparseTransformerForMaskedLM(cfg).to(DEVICE).train()
    ids = torch.randint(1, 97, (2, 4000), device=DEVICE)  # above SDPA_MAX_PAIRS: the block kernels
    runs = {}
    for backend in ("flex", "blocked"):
        model.config.attention_backend = backend
        model.zero_grad(set_to_none=True)
        torch.manual_seed(1)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        runs[backend] = (loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None])
    torch.testing.assert_close(runs["flex"][0], runs["blocked"][0], atol=1e-4, rtol=1e-4)
    for a, b in zip(runs["flex"][1], runs["blocked"][1]):
        torch.testing.assert_close(a, b, atol=1e-3 * max(1.0, b.abs().max().item()), rtol=1e-3)
    torch.manual_seed(2)
    model.config.attention_backend = "flex"
    assert not torch.equal(model(input_ids=ids, labels=ids).loss.detach(), runs["flex"][0])
