"""A PerHead inside ``|`` and ``&``: checked as a top-level PerHead is (head count, operands), compared up to the
order of its heads' operands."""

import pytest
import torch

from hf_sparse import SparseTransformerConfig
from hf_sparse import patterns as P

PER_HEAD = P.PerHead([P.SlidingWindow(window=3), P.Causal()])


@pytest.mark.parametrize(
    "pattern",
    [PER_HEAD, PER_HEAD | P.Global(indices=[0]), PER_HEAD & P.SlidingWindow(window=5), P.Causal() & PER_HEAD],
    ids=["per_head", "or_global", "and_window", "causal_and"],
)
def test_config_refuses_a_per_head_with_the_wrong_number_of_heads(pattern):
    """Refused when the config is built, also nested (the model crashed in its first forward)."""
    with pytest.raises(ValueError, match="PerHead has 2 patterns but num_attention_heads is 4"):
        SparseTransformerConfig(
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=4,
            intermediate_size=32,
            attention_pattern=pattern,
        )


@pytest.mark.parametrize(
    "build",
    [
        lambda: P.PerHead([P.Longformer(window=4), P.SlidingWindow(window=4)]) & P.BlockLocal(block=4),
        lambda: P.BlockLocal(block=4) & P.PerHead([P.Causal(), P.SlidingWindow(window=4) | P.Global()]),
        lambda: P.from_dict(
            {
                "type": "intersection",
                "parts": [P.PerHead([P.Longformer(window=4), P.Causal()]).to_dict(), "causal"],
            }
        ),
    ],
    ids=["per_head_and", "and_per_head", "from_dict"],
)
def test_runtime_global_in_a_per_head_is_refused_under_and_when_built(build):
    """As ``Longformer(4) & BlockLocal(4)`` is: it was built, serialised and saved in configs, and refused at
    first use only."""
    with pytest.raises(
        ValueError,
        match=r"Global\(\) takes its tokens from global_attention_mask .* only be combined with '\|'",
    ):
        build()


def test_runtime_global_in_a_per_head_combines_under_or():
    pattern = P.PerHead([P.Longformer(window=4), P.Causal()]) | P.BlockLocal(block=4)
    assert pattern.heads()[0] == P.Longformer(window=4) | P.BlockLocal(block=4)


A, B, C = P.SlidingWindow(window=3), P.Causal(), P.Strided(stride=2)


@pytest.mark.parametrize(
    "left, right",
    [
        (P.PerHead([A | B, C]), P.PerHead([B | A, C])),
        (P.PerHead([A | A, C]), P.PerHead([A, C])),
        (P.PerHead([(A | B) & C, C]), P.PerHead([C & (B | A), C])),
        (P.PerHead([A | B, C]) | A, A | P.PerHead([B | A, C])),
    ],
)
def test_per_head_compares_its_heads_up_to_the_order_of_their_operands(left, right):
    """``a | b == b | a`` holds inside a PerHead too, with equal hashes (and equal masks)."""
    assert left == right and right == left and hash(left) == hash(right)
    assert torch.equal(left.dense_mask(6), right.dense_mask(6))
    assert len({left, right}) == 1


@pytest.mark.parametrize(
    "other",
    [P.PerHead([C, A | B]), P.PerHead([A | B]), P.PerHead([A | B, C, C]), A | B, P.PerHead([A & B, C])],
    ids=["heads_swapped", "fewer_heads", "more_heads", "not_per_head", "other_operator"],
)
def test_per_head_differs_from_other_patterns(other):
    pattern = P.PerHead([A | B, C])
    assert pattern != other and other != pattern


def test_bound_per_head_equals_one_bound_alike_only():
    pattern = P.PerHead([P.BigBird(block=4, seed=1), A])
    assert pattern.bind(16) == pattern.bind(16) and hash(pattern.bind(16)) == hash(pattern.bind(16))
    assert pattern.bind(16) != pattern and pattern != pattern.bind(16)
    assert pattern.bind(16) != P.PerHead([P.BigBird(block=4, seed=2), A]).bind(16)
