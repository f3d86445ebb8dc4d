"""The exact merge of softmax partials (``blocked._Merge``) and the residue-class transpose of Strided/Dilated."""

import torch

from hf_sparse.attention import blocked
from hf_sparse.attention.blocked import _class_stride, merge_partials
from hf_sparse.patterns.local import residue_order


def _reference(parts):
    lse = torch.logsumexp(torch.stack([l for _, l in parts]), 0)
    return sum(o * torch.exp(l - lse)[..., None] for o, l in parts), lse


def test_merge_gradients_match_autograd_reference_including_lse():
    g = torch.Generator().manual_seed(0)
    parts = [
        (
            torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64).requires_grad_(),
            torch.randn(2, 3, 5, generator=g, dtype=torch.float64).requires_grad_(),
        )
        for _ in range(3)
    ]
    flat = [t for p in parts for t in p]
    go, gl = (
        torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64),
        torch.randn(2, 3, 5, generator=g, dtype=torch.float64),
    )
    got = torch.autograd.grad(merge_partials(parts), flat, (go, gl))
    want = torch.autograd.grad(_reference(parts), flat, (go, gl))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_merge_rows_without_keys_give_zeros_and_no_nan_gradients():
    o1, o2 = (torch.randn(1, 1, 3, 2, dtype=torch.float64, requires_grad=True) for _ in range(2))
    l1 = torch.tensor([[[0.5, float("-inf"), float("-inf")]]], dtype=torch.float64, requires_grad=True)
    l2 = torch.tensor([[[-1.0, 0.25, float("-inf")]]], dtype=torch.float64, requires_grad=True)
    out, lse = merge_partials([(o1 * 1, l1 * 1), (o2 * 1, l2 * 1)])
    assert torch.equal(out[0, 0, 2], torch.zeros(2, dtype=torch.float64)) and lse[0, 0, 2] == float("-inf")
    torch.testing.assert_close(out[0, 0, 1], o2[0, 0, 1].detach())  # only part 2 has keys there
    (out.sum() + torch.where(torch.isinf(lse), 0.0, lse).sum()).backward()
    for t in (o1, o2, l1, l2):
        assert torch.isfinite(t.grad).all()
    assert float(l1.grad[0, 0, 1].abs() + l1.grad[0, 0, 2].abs() + l2.grad[0, 0, 2].abs()) == 0.0
    assert torch.autograd.gradcheck(
        lambda a, b: merge_partials([(a, l1.detach()), (b, l2.detach())])[0], (o1, o2)
    )


def test_residue_order_is_taken_by_a_transpose(monkeypatch):
    perm, _ = residue_order(96, 8)
    assert _class_stride(perm[None, None], 96) == 8
    assert _class_stride(residue_order(100, 8)[0][None, None], 100) == 0  # ragged classes: gathered
    assert _class_stride(torch.randperm(96)[None, None], 96) == 0
    x = torch.randn(2, 3, 96, 4)
    torch.testing.assert_close(blocked._gather_rows(x, perm[None, None]), x[:, :, perm], atol=0, rtol=0)
    # Strided's columns component goes through it (no gather call), and matches the dense reference
    from hf_sparse import patterns as P
    from hf_sparse import sparse_attention

    calls = []
    real = torch.Tensor.gather
    monkeypatch.setattr(
        torch.Tensor, "gather", lambda self, *a, **k: calls.append(self.shape) or real(self, *a, **k)
    )
    q, k, v = (torch.randn(1, 2, 96, 8, dtype=torch.float64) for _ in range(3))
    out = sparse_attention(q, k, v, P.Strided(stride=8), backend="blocked", block_size=4)
    assert not [s for s in calls if s[-1] == 8], calls  # no gather of q/k/v rows
    torch.testing.assert_close(
        out, sparse_attention(q, k, v, P.Strided(stride=8), backend="dense"), atol=1e-12, rtol=0
    )
