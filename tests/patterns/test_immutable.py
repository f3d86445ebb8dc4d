"""Patterns are immutable once built: what a call derives from one (plans, block masks) is kept on it."""

import copy
import pickle

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention
from tests.cases import all_patterns

PATTERNS = all_patterns()


def _public_attribute(p):
    return next((k for k in vars(p) if not k.startswith("_")), "is_causal")


@pytest.mark.parametrize("name", list(PATTERNS))
def test_setting_or_deleting_a_public_attribute_raises(name):
    p = PATTERNS[name]
    attr = _public_attribute(p)
    before = p.to_dict()
    with pytest.raises(
        AttributeError, match=rf"cannot set '{attr}' of .*patterns are immutable.*build a new pattern"
    ):
        setattr(p, attr, getattr(p, attr))
    with pytest.raises(AttributeError, match="patterns are immutable"):
        delattr(p, attr)
    assert p.to_dict() == before


def test_a_changed_window_cannot_leave_the_cached_plan_on_the_old_rule():
    """SlidingWindow(4) run once, then ``window = 32``: the blocked kernels kept the window-4 plan while the
    dense backend read the new window."""
    q = k = v = torch.randn(1, 1, 64, 8, dtype=torch.float64)
    p = P.SlidingWindow(window=4)
    first = sparse_attention(q, k, v, p, backend="blocked")
    with pytest.raises(AttributeError, match="patterns are immutable"):
        p.window = 32
    assert p.window == 4
    torch.testing.assert_close(sparse_attention(q, k, v, p, backend="dense"), first)
    wide = P.from_dict({**p.to_dict(), "window": 32})
    torch.testing.assert_close(
        sparse_attention(q, k, v, wide, backend="blocked"), sparse_attention(q, k, v, wide, backend="dense")
    )


@pytest.mark.parametrize("name", ["bigbird", "longformer", "per_head", "global_indices", "lsh"])
def test_copies_pickles_and_bound_patterns_stay_equal_and_immutable(name):
    p = PATTERNS[name]
    for other in (copy.copy(p), copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert other == p
        with pytest.raises(AttributeError, match="patterns are immutable"):
            setattr(other, _public_attribute(other), None)
    q = k = torch.randn(1, 3, 40, 4)
    bound = p.bind(40, query=q, key=k) if p.content_based else p.bind(40)
    with pytest.raises(AttributeError, match="patterns are immutable"):
        setattr(bound, _public_attribute(bound), None)
    # a part of a causal pattern is bound past its global positions: a copy the library builds
    late = (P.SlidingWindow(window=3) | P.Global(indices=[50])) & P.Causal()
    assert late.bind(20).dense_mask(20).shape == (20, 20)


def test_a_subclass_sets_its_attributes_in_init_only():
    class Wider(P.SlidingWindow):
        def __init__(self, window: int = 4):
            super().__init__(window=2 * window)
            self.extra = window  # still building: allowed

    p = Wider(3)
    assert (p.window, p.extra) == (6, 3)
    with pytest.raises(AttributeError, match="cannot set 'extra'"):
        p.extra = 1
