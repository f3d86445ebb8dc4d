"""Mixed precision: bf16/fp16 autocast and bf16 weights on every attention backend, CPU.

Rotary and absolute positions; forward and backward under autocast equal the float32 result within
bf16 tolerance (flex has no CPU backward: forward only).
"""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention
from hf_sparse.attention import blocked, fused
from hf_sparse.models.sparse_transformer import SparseTransformerForMaskedLM
from tests.models.tiny import tiny_config

BACKENDS = ["dense", "blocked", "flex", "sdpa", "auto"]
POSITIONS = ["rotary", "absolute"]


def _model(backend, position):
    torch.manual_seed(0)
    config = tiny_config(
        attention_backend=backend,
        position_embedding_type=position,
        attention_pattern={"type": "sliding_window", "window": 8},
    )
    return SparseTransformerForMaskedLM(config).eval()


def _batch(n=37):  # not a multiple of any block size
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 97, (2, n), generator=g)
    mask = torch.ones_like(ids)
    mask[1, -5:] = 0
    return ids, mask


SCALE = 1024.0


def loss(logits, ids):
    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.flatten())


def _rel_err(a, b):
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_matches_float32(backend, position, dtype):
    model = _model(backend, position)
    ids, mask = _batch()
    grad = backend != "flex"  # FlexAttention has no CPU backward
    with torch.set_grad_enabled(grad):
        ref = model(input_ids=ids, attention_mask=mask).logits
        if grad:
            loss(ref, ids).backward()
            ref_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype):
            out = model(input_ids=ids, attention_mask=mask).logits
        assert out.dtype == dtype
        keep = mask.bool()
        assert _rel_err(out[keep], ref[keep]) < 3e-2
        if grad:
            (loss(out, ids) * SCALE).backward()  # fp16 needs a loss scale (GradScaler's job)
            for name, p in model.named_parameters():
                if name in ref_grads and ref_grads[name].norm() > 1e-6:
                    assert _rel_err(p.grad / SCALE, ref_grads[name]) < 1e-1, name


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_bf16_weights(backend, position):
    model = _model(backend, position)
    ids, mask = _batch()
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask).logits
        out = model.to(torch.bfloat16)(input_ids=ids, attention_mask=mask).logits
    assert out.dtype == torch.bfloat16
    keep = mask.bool()
    assert _rel_err(out[keep], ref[keep]) < 3e-2


HALF_PATTERNS = {
    "window": P.SlidingWindow(window=16),  # the band kernel
    "strided": P.Strided(stride=8, causal=True),  # class bands
    "bigbird": P.BigBird(block=16, window_blocks=3, random_blocks=1, global_blocks=1),  # block tables
    "lsh": P.LSH(bucket_size=16, num_hashes=2),  # key ranges
}


@pytest.mark.skipif(not fused.available(), reason="the compiled CPU kernel is not built here")
@pytest.mark.parametrize("name", HALF_PATTERNS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_inputs_run_on_the_compiled_kernel(name, dtype, monkeypatch):
    """bf16/fp16 q, k, v run on the compiled CPU kernel (float32 copies; before, the 1.5-3x slower PyTorch path):
    output and gradients in the input dtype, equal to the dense reference's (float32 arithmetic, rounded once)."""
    calls = []
    plan_node = blocked._FusedPlan

    class Spy(plan_node):
        @staticmethod
        def forward(ctx, q, *rest):
            calls.append(q.dtype)
            return plan_node.forward(ctx, q, *rest)

    monkeypatch.setattr(blocked, "_FusedPlan", Spy)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 100, 16, generator=g).to(dtype).requires_grad_() for _ in range(3))
    mask = torch.ones(2, 100, dtype=torch.bool)
    mask[1, 90:] = 0
    d_out = torch.randn(2, 2, 100, 16, generator=g).to(dtype)
    results = {}
    for backend in ("blocked", "dense"):
        out = sparse_attention(q, k, v, HALF_PATTERNS[name], mask, backend=backend)
        results[backend] = (out, *torch.autograd.grad(out, (q, k, v), d_out))
    assert calls and set(calls) == {torch.float32}
    for what, a, b in zip(("out", "dq", "dk", "dv"), results["blocked"], results["dense"]):
        assert a.dtype == dtype, what
        torch.testing.assert_close(a, b, rtol=0, atol=2e-2 if dtype == torch.bfloat16 else 2e-3, msg=what)
