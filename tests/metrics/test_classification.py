"""Accuracy, precision/recall/F1, AUROC (ties) and multi-label F1 on hand-computed cases."""

import itertools

import numpy as np
import pytest
import torch
from sklearn import metrics as skm

from hf_sparse.metrics import accuracy, auroc, multilabel_f1, per_class_f1, precision_recall_f1


def test_accuracy_accepts_lists_arrays_tensors():
    assert accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    assert accuracy(np.array(["a", "b"]), ["a", "b"]) == 1.0
    assert accuracy(torch.tensor([0, 1, 2]), torch.tensor([0, 1, 1])) == pytest.approx(2 / 3)


def test_binary_prf():
    # TP = 2 (idx 0, 2), FP = 1 (idx 3), FN = 1 (idx 4)
    out = precision_recall_f1([1, 0, 1, 0, 1], [1, 0, 1, 1, 0])
    assert out == pytest.approx({"precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3})
    assert precision_recall_f1([1, 1], [0, 0]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert precision_recall_f1([1, 1], [0, 0], zero_division=1.0)["precision"] == 1.0


def test_multiclass_macro_micro_weighted():
    y_true = [0, 0, 1, 1, 2, 2]
    y_pred = [0, 1, 1, 1, 0, 2]
    # class 0: TP1 FP1 FN1 -> F 0.5; class 1: TP2 FP1 FN0 -> F 0.8; class 2: TP1 FP0 FN1 -> F 2/3
    macro = precision_recall_f1(y_true, y_pred, average="macro")
    assert macro["f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert macro["precision"] == pytest.approx((0.5 + 2 / 3 + 1.0) / 3)
    micro = precision_recall_f1(y_true, y_pred, average="micro")
    assert micro["f1"] == pytest.approx(accuracy(y_true, y_pred))
    weighted = precision_recall_f1(y_true, y_pred, average="weighted")
    assert weighted["recall"] == pytest.approx(accuracy(y_true, y_pred))  # support-weighted recall
    assert per_class_f1(y_true, y_pred) == pytest.approx({0: 0.5, 1: 0.8, 2: 2 / 3})
    assert per_class_f1(["x", "y"], ["x", "x"]) == pytest.approx({"x": 2 / 3, "y": 0.0})


def _auroc_pairwise(labels, scores):
    pos = [s for y, s in zip(labels, scores) if y == 1]
    neg = [s for y, s in zip(labels, scores) if y == 0]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize(
    "labels, scores, expected",
    [
        ([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8], 0.75),
        ([0, 1], [0.5, 0.5], 0.5),
        ([1, 0, 1, 0, 1], [0.9, 0.9, 0.5, 0.5, 0.1], None),
        ([True, False, False], [3, 2, 2], 1.0),
        ([0, 1, 0, 1], [0.9, 0.1, 0.8, 0.2], 0.0),
    ],
)
def test_auroc_with_ties_matches_pairwise_count(labels, scores, expected):
    value = auroc(labels, scores)
    assert value == pytest.approx(_auroc_pairwise(labels, scores))
    if expected is not None:
        assert value == pytest.approx(expected)


def test_auroc_random_with_ties_matches_pairwise():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 200)
    scores = rng.integers(0, 10, 200)  # many ties
    assert auroc(labels, scores) == pytest.approx(_auroc_pairwise(labels.tolist(), scores.tolist()))


@pytest.mark.parametrize(
    "labels, scores",
    [
        ([0, 1, 1], [-np.inf, 0.9, 0.5]),
        ([0, 1, 0, 1], [np.inf, np.inf, -np.inf, 0.2]),  # tied infinities stay ties
        ([1, 0, 1, 0], [-np.inf, -np.inf, 0.3, 0.1]),
    ],
)
def test_auroc_takes_infinite_scores_by_rank(labels, scores):
    """A masked logit (-inf) ranks below every finite score; scikit-learn alone refuses it."""
    assert auroc(labels, scores) == pytest.approx(_auroc_pairwise(labels, scores))
    assert auroc(labels, torch.tensor(scores)) == pytest.approx(_auroc_pairwise(labels, scores))


def test_auroc_one_class_is_nan_with_warning():
    with pytest.warns(RuntimeWarning, match="one class"):
        assert np.isnan(auroc([1, 1, 1], [0.1, 0.2, 0.3]))


def test_multilabel_f1():
    y_true = [[1, 0, 0, 1], [0, 1, 0, 0], [1, 0, 0, 0]]
    y_pred = [[1, 0, 0, 0], [0, 1, 1, 0], [1, 0, 0, 0]]
    # col0 TP2, col1 TP1, col2 FP1, col3 FN1, -> micro 2*3/(2*3+1+1) = 0.75
    assert multilabel_f1(y_true, y_pred) == pytest.approx(0.75)
    # macro over present classes 0..3: (1 + 1 + 0 + 0) / 4
    assert multilabel_f1(y_true, y_pred, average="macro") == pytest.approx(0.5)
    # a column absent from truth and prediction is skipped by macro, nan per class
    t = np.c_[np.array(y_true), np.zeros(3, int)]
    p = np.c_[np.array(y_pred), np.zeros(3, int)]
    assert multilabel_f1(t, p, average="macro") == pytest.approx(0.5)
    per = per_class_f1(t, p)
    assert per[0] == 1.0 and per[2] == 0.0 and np.isnan(per[4])
    assert multilabel_f1(np.zeros((2, 3)), np.zeros((2, 3))) == 0.0


@pytest.mark.parametrize(
    "y_true, y_pred, micro, per_class",
    [
        # scikit-learn reads one column as a binary vector and would score the absent class too (0.75)
        ([[1], [0], [0], [0]], [[0], [0], [0], [0]], 0.0, 0.0),  # TP 0, FP 0, FN 1
        ([[1], [0], [1], [0]], [[1], [1], [0], [0]], 0.5, 0.5),  # TP 1, FP 1, FN 1
        ([[1], [0]], [[1], [0]], 1.0, 1.0),
        ([[0], [0]], [[0], [0]], 0.0, float("nan")),  # no positive at all: zero_division, class left out
    ],
)
def test_multilabel_f1_one_class(y_true, y_pred, micro, per_class):
    assert multilabel_f1(y_true, y_pred) == micro
    assert multilabel_f1(y_true, y_pred, average="macro") == (0.0 if np.isnan(per_class) else per_class)
    assert per_class_f1(y_true, y_pred, labels=["motif"]) == pytest.approx({"motif": per_class}, nan_ok=True)


def test_multilabel_f1_matches_sklearn_with_two_or_more_classes():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, k = rng.integers(1, 20), rng.integers(2, 6)
        t, p = rng.integers(0, 2, (n, k)), rng.integers(0, 2, (n, k))
        t[:, rng.integers(0, k)] = 0  # often a class with no true positive
        p[:, rng.integers(0, k)] = 0
        present = (t | p).any(axis=0)
        want = skm.f1_score(t, p, average=None, zero_division=0.0)
        got = np.array(list(per_class_f1(t, p).values()))
        np.testing.assert_allclose(got[present], want[present], rtol=0, atol=1e-12)
        assert np.isnan(got[~present]).all()
        assert multilabel_f1(t, p) == pytest.approx(skm.f1_score(t, p, average="micro", zero_division=0.0))
        if present.any():
            assert multilabel_f1(t, p, average="macro") == pytest.approx(want[present].mean())


def test_pos_label_of_another_kind_than_the_labels_raises():
    """String labels with the default pos_label=1 silently scored 0."""
    with pytest.raises(ValueError, match=r"pos_label 1 can never match labels like \['neg', 'pos'\]"):
        precision_recall_f1(["neg", "pos"], ["neg", "pos"])
    with pytest.raises(ValueError, match="pos_label '1' can never match"):
        precision_recall_f1([0, 1], [0, 1], pos_label="1")
    assert precision_recall_f1(["neg", "pos"], ["neg", "pos"], pos_label="pos")["f1"] == 1.0
    # a pos_label of the labels' kind that does not occur stays allowed (zero_division)
    assert precision_recall_f1(["neg", "pos"], ["neg", "pos"], pos_label="other")["f1"] == 0.0
    assert precision_recall_f1([0, 2], [0, 2])["f1"] == 0.0
    assert precision_recall_f1(np.array([0.0, 1.0]), [0, 1], pos_label=np.int64(1))["f1"] == 1.0
    assert precision_recall_f1([False, True], [False, True])["f1"] == 1.0
    with pytest.raises(ValueError, match="pos_label 1 can never match"):
        precision_recall_f1(np.array(["neg", "pos"], dtype=object), ["neg", "pos"])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_low_precision_tensors(dtype):
    labels, scores = torch.tensor([0, 1, 1, 0]), torch.tensor([0.1, 0.9, 0.6, 0.4])
    assert auroc(labels, scores.to(dtype)) == 1.0
    assert accuracy(labels.to(dtype), torch.tensor([0, 1, 0, 0]).to(dtype)) == 0.75
    assert precision_recall_f1(labels.to(dtype), labels.to(dtype))["f1"] == 1.0
    t, p = torch.tensor([[1, 0], [0, 1]]).to(dtype), torch.tensor([[1, 0], [1, 1]]).to(dtype)
    assert multilabel_f1(t, p) == pytest.approx(0.8)  # TP 2, FP 1
    assert per_class_f1(t, p) == pytest.approx({0: 2 / 3, 1: 1.0})


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: accuracy([1, 2], [1]), ValueError, r"differ in shape: \(2,\) != \(1,\)"),
        (lambda: accuracy([], []), ValueError, "y_true is empty"),
        (lambda: accuracy([[1]], [[1]]), ValueError, r"y_true must be 1-D, got shape \(1, 1\)"),
        (lambda: precision_recall_f1([1], [1], average="samples"), ValueError, "average must be"),
        (lambda: auroc([0, 2], [0.1, 0.2]), ValueError, "labels must be 0/1"),
        (lambda: auroc([0, 1], [0.1, float("nan")]), ValueError, "scores contains NaN"),
        (lambda: auroc([0, 1], [0.1]), ValueError, "labels and scores differ in shape"),
        (lambda: multilabel_f1([[0, 2]], [[0, 1]]), ValueError, "y_true must contain only 0 and 1"),
        (lambda: multilabel_f1([0, 1], [0, 1]), ValueError, "y_true must be a 2-D"),
        (lambda: multilabel_f1([[0, 1]], [[0, 1, 1]]), ValueError, "differ in shape"),
        (lambda: multilabel_f1([[0, 1]], [[0, 1]], average="weighted"), ValueError, "average must be"),
    ],
)
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
