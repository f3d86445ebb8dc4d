"""Global(indices=...) on a sequence that holds none of its indices is a clear error at call time
(it used to be ignored silently: no token was global)."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention
from hf_sparse.patterns.base import plan_dense_mask


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


_WINDOW = P.SlidingWindow(window=3, causal=True)
_CAUSAL_GLOBAL = [  # (pattern, what it is on the first 12 positions)
    ((_WINDOW | P.Global(indices=[500])) & P.Causal(), _WINDOW),
    (P.Causal() | (P.Global(indices=[500]) & P.Causal()), P.Causal()),
    (
        P.PerHead([P.Causal(), (_WINDOW | P.Global(indices=[500])) & P.Causal()]),
        P.PerHead([P.Causal(), _WINDOW]),
    ),
    (
        P.PerHead([P.Causal(), _WINDOW | P.Global(indices=[500])]) & P.Causal(),
        P.PerHead([P.Causal(), _WINDOW]),
    ),
]


@pytest.mark.parametrize("pattern, same", _CAUSAL_GLOBAL, ids=repr)
@pytest.mark.parametrize("backend", ["dense", "blocked"])
def test_in_a_causal_pattern_indices_past_the_input_are_still_to_come(pattern, same, backend):
    """A decoder's prompt may end before its first global position (it raised "index 500 is out of range"): there
    the global part allows nothing yet."""
    q = torch.randn(1, 2, 12, 8)
    bound = pattern.bind(12)
    assert torch.equal(bound.dense_mask(12), same.dense_mask(12))
    assert bound == pattern.bind(12) and bound.to_dict() == pattern.to_dict()
    got = sparse_attention(q, q, q, pattern, backend=backend)
    torch.testing.assert_close(got, sparse_attention(q, q, q, same, backend=backend))


@pytest.mark.parametrize("pattern, same", _CAUSAL_GLOBAL, ids=repr)
def test_in_a_causal_pattern_the_views_take_indices_past_the_input(pattern, same):
    """``dense_mask`` and ``plan`` of the unbound pattern agree with ``sparse_attention``, which runs it (they
    raised "index 500 is out of range"; only ``bind(n).dense_mask(n)`` worked)."""
    assert torch.equal(pattern.dense_mask(12), same.dense_mask(12))
    assert torch.equal(pattern.dense_mask(5, 12), same.dense_mask(5, 12))
    for block in (4, 5):
        got, want = pattern.plan(12, block=block), same.plan(12, block=block)
        assert torch.equal(plan_dense_mask(got, 1, 2, 12, 12), plan_dense_mask(want, 1, 2, 12, 12))


def test_a_top_level_global_still_refuses_indices_past_the_input():
    """Outside a causal pattern (an encoder) no token would be global: still an error."""
    q = torch.randn(1, 1, 12, 8)
    for pattern in (
        P.Global(indices=[500]),
        P.SlidingWindow(window=3, causal=True) | P.Global(indices=[500]),
    ):
        with pytest.raises(ValueError, match="index 500 is out of range for a sequence of 12 tokens"):
            sparse_attention(q, q, q, pattern)
        for view in (pattern.bind, pattern.dense_mask, pattern.plan):
            with pytest.raises(ValueError, match="index 500"):
                view(12)


def test_cache_keeps_every_key_while_a_later_row_is_global():
    pos = torch.arange(6)
    assert P.Global(indices=[4]).cache_keep(pos, 4).all()  # row 4 still to come: it attends keys 0..3
    assert P.Global(indices=[4]).cache_keep(pos, 5).tolist() == [False] * 4 + [True, False]
    assert P.Global(every=5).cache_keep(pos, 6).all()
