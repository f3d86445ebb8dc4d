"""Global(indices=...) on a sequence that holds none of its indices is a clear error at call time
(it used to be ignored silently: no token was global)."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention


@pytest.mark.parametrize("backend", ["auto", "dense", "blocked", "sdpa"])
@pytest.mark.parametrize(
    "pattern", [P.Global(indices=[500]), P.SlidingWindow(window=8) | P.Global(indices=[500])]
)
def test_indices_out_of_range_name_the_index_and_the_length(pattern, backend):
    q = torch.randn(1, 2, 128, 8)
    with pytest.raises(ValueError, match=r"index 500 is out of range for a sequence of 128 tokens"):
        sparse_attention(q, q, q, pattern, backend=backend)


def test_dense_mask_and_plan_check_too():
    with pytest.raises(ValueError, match="index 500"):
        P.Global(indices=[500]).dense_mask(128)
    with pytest.raises(ValueError, match="index 500"):
        P.Global(indices=[500]).plan(128)


def test_an_index_inside_the_sequence_is_fine():
    q = torch.randn(1, 2, 128, 8)
    out = sparse_attention(q, q, q, P.SlidingWindow(window=8) | P.Global(indices=[0, 500]))
    assert out.shape == q.shape and torch.isfinite(out).all()
    assert P.Global(indices=[0, 5]).dense_mask(3)[:, 0].all()  # positions past a short input: not there yet
