"""Recall@k and MRR with pessimistic ties."""

import numpy as np
import pytest
import torch

from hf_sparse.tasks.dialogue.ranking import mrr, ranking_metrics, ranks, recall_at_k


def test_ranks_and_recall_with_ties():
    scores = np.array(
        [
            [0.9, 0.1, 0.2, 0.3],  # positive best -> rank 1
            [0.5, 0.5, 0.1, 0.0],  # tie with one -> pessimistic rank 2
            [0.1, 0.2, 0.3, 0.4],  # worst -> rank 4
            [0.7, 0.7, 0.7, 0.7],  # all tied -> rank 4
        ]
    )
    np.testing.assert_array_equal(ranks(scores), [1, 2, 4, 4])
    assert recall_at_k(scores, 1) == 0.25
    assert recall_at_k(scores, 2) == 0.5
    assert recall_at_k(scores, 4) == 1.0
    assert recall_at_k(scores, 10) == 1.0
    assert mrr(scores) == pytest.approx((1 + 1 / 2 + 1 / 4 + 1 / 4) / 4)


def test_positive_index_per_example_and_tensors():
    scores = torch.tensor([[0.1, 0.9, 0.0], [0.3, 0.2, 0.1]])
    assert recall_at_k(scores, 1, positive_index=1) == 0.5
    assert recall_at_k(scores, 1, positive_index=np.array([1, 0])) == 1.0


def test_ranking_metrics_r10():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(50, 10))
    scores[:20, 0] = 10.0  # the first 20 examples rank the positive first
    out = ranking_metrics(scores)
    assert set(out) == {"r@1", "r@2", "r@5", "mrr"}
    assert out["r@1"] >= 0.4
    assert out["r@1"] <= out["r@2"] <= out["r@5"] <= 1.0
    assert out["mrr"] == pytest.approx(mrr(scores))
    assert out["r@5"] == recall_at_k(scores, 5)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ranks(np.zeros(5)), r"scores must have shape \(n_examples, n_candidates\)"),
        (lambda: ranks(np.zeros((2, 0))), "scores must have shape"),
        (lambda: ranks([[0.1, np.nan]]), "scores contains NaN"),
        (lambda: ranks(np.zeros((2, 3)), positive_index=3), r"positive_index must be in \[0, 3\)"),
        (
            lambda: ranks(np.zeros((2, 3)), positive_index=[0]),
            "positive_index must be an int or an int array of shape",
        ),
        (lambda: ranks(np.zeros((2, 3)), positive_index=0.5), "positive_index must be an int"),
        (lambda: recall_at_k(np.zeros((2, 3)), 0), "k must be an int >= 1"),
        (lambda: ranking_metrics(np.zeros((2, 3)), ks=(0,)), "ks must hold ints >= 1"),
    ],
)
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_ks_may_be_one_int():
    """ks=1 was iterated and raised a bare "'int' object is not iterable"."""
    import hf_sparse.metrics

    scores = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert ranking_metrics(scores, ks=1) == ranking_metrics(scores, ks=[1]) == {"r@1": 0.5, "mrr": 0.75}
    assert ranking_metrics(scores, ks=np.int64(2))["r@2"] == 1.0
    module = hf_sparse.metrics.load("ranking")
    assert module.compute(predictions=scores.tolist(), references=[0, 0], ks=1) == {"r@1": 0.5, "mrr": 0.75}


@pytest.mark.parametrize("ks", [1.0, True, "12", None])
def test_ks_of_another_type_raises_naming_it(ks):
    with pytest.raises(TypeError, match=r"ks must be an int or a sequence of ints >= 1, got"):
        ranking_metrics(np.zeros((2, 3)), ks=ks)
