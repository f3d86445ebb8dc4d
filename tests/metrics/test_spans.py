"""Exact and overlap span F1, per-base F1 with -100 positions."""

import numpy as np
import pytest
import torch

from hf_sparse.tasks.motif.metrics import per_base_f1, span_f1, span_overlap_f1


def test_span_f1_hand_case():
    true = [[("A", 0, 3), ("B", 5, 7)], [("A", 1, 2)]]
    pred = [[("A", 0, 3), ("B", 5, 8)], [("A", 1, 2), ("A", 4, 6)]]
    out = span_f1(true, pred)
    # TP = 2 (A 0-3, A 1-2); 3 true, 4 predicted
    assert out["precision"] == pytest.approx(0.5)
    assert out["recall"] == pytest.approx(2 / 3)
    assert out["f1"] == pytest.approx(4 / 7)
    assert out["n_true"] == 3 and out["n_pred"] == 4
    assert out["per_type"]["A"]["f1"] == pytest.approx(2 * 2 / (2 + 3))
    assert out["per_type"]["B"]["f1"] == 0.0


def test_span_f1_sequences_do_not_mix_and_strand_counts():
    # Same span in different sequences does not match.
    assert span_f1([[("A", 0, 2)], []], [[], [("A", 0, 2)]])["f1"] == 0.0
    # Single sequence form, with a strand field.
    assert span_f1([("M", 0, 5, "+")], [("M", 0, 5, "-")])["f1"] == 0.0
    assert span_f1([("M", 0, 5, "+")], [("M", 0, 5, "+")])["f1"] == 1.0
    # Duplicated predictions match once.
    out = span_f1([("A", 0, 2)], [("A", 0, 2), ("A", 0, 2)])
    assert out["precision"] == 0.5 and out["recall"] == 1.0
    # Nothing true and nothing predicted -> zero_division.
    assert span_f1([], [])["f1"] == 0.0
    assert span_f1([], [], zero_division=1.0)["f1"] == 1.0


def test_span_overlap_f1():
    true = [("A", 0, 5), ("A", 10, 12)]
    pred = [("A", 3, 8), ("A", 5, 10), ("B", 10, 12)]
    out = span_overlap_f1(true, pred)
    # A 3-8 overlaps A 0-5; A 5-10 touches nothing (end exclusive); B is a different type.
    assert out["precision"] == pytest.approx(1 / 3)
    assert out["recall"] == pytest.approx(1 / 2)
    assert out["f1"] == pytest.approx(0.4)
    assert span_f1(true, pred)["f1"] == 0.0


def _overlap_counts_quadratic(true, pred):
    """The definition, pair by pair: (predicted spans hitting some true span, true spans hit by some
    prediction) per type, with the fields after end (strand) compared too."""
    hit_pred, hit_true = {}, {}
    for p in pred:
        hit = any(u[0] == p[0] and u[3:] == p[3:] and u[1] < p[2] and p[1] < u[2] for u in true)
        hit_pred[p[0]] = hit_pred.get(p[0], 0) + hit
    for u in true:
        hit = any(u[0] == p[0] and u[3:] == p[3:] and u[1] < p[2] and p[1] < u[2] for p in pred)
        hit_true[u[0]] = hit_true.get(u[0], 0) + hit
    return hit_pred, hit_true


@pytest.mark.parametrize("seed", range(20))
def test_span_overlap_f1_matches_pairwise_definition(seed):
    """The sorted sweep counts exactly what comparing every pair counts: duplicates, nested, adjacent
    (end == start: no overlap) and one-base spans, two types and two strands."""
    rng = np.random.default_rng(seed)

    def spans(n):
        out = []
        for _ in range(n):
            kind, strand = str(rng.choice(["A", "B"])), str(rng.choice(["+", "-"]))
            start = int(rng.integers(0, 40))
            out.append((kind, start, start + int(rng.integers(1, 8)), strand))
        out += [out[i] for i in rng.integers(0, len(out), 3)]  # duplicates
        out += [(s[0], s[2], s[2] + 1, s[3]) for s in out[:3]]  # adjacent one-base spans
        out += [(s[0], s[1], s[1] + 1, s[3]) for s in out[:3]]  # nested
        return out

    true, pred = spans(int(rng.integers(1, 25))), spans(int(rng.integers(1, 25)))
    out = span_overlap_f1(true, pred)
    hit_pred, hit_true = _overlap_counts_quadratic(true, pred)
    for k, scores in out["per_type"].items():
        if scores["n_pred"]:
            assert scores["precision"] == hit_pred[k] / scores["n_pred"]
        if scores["n_true"]:
            assert scores["recall"] == hit_true[k] / scores["n_true"]
    assert out["precision"] == sum(hit_pred.values()) / len(pred)
    assert out["recall"] == sum(hit_true.values()) / len(true)


def test_span_errors():
    with pytest.raises(ValueError, match="different numbers of sequences: 2 != 3"):
        span_f1([[("A", 0, 1)], []], [[], [], [("A", 0, 1)]])
    with pytest.raises(ValueError, match="start >= end"):
        span_f1([("A", 3, 3)], [])
    with pytest.raises(TypeError, match=r"true_spans\[0\]\[0\] must be a tuple"):
        span_f1([[["A", 0, 1]]], [[]])


def test_per_base_f1_strings():
    true = ["O", "B-A", "I-A", "O", "B-B", "I-B"]
    pred = ["O", "B-A", "O", "I-A", "I-B", "B-A"]
    out = per_base_f1(true, pred)
    # A: TP1 (pos1) FN1 (pos2) FP2 (pos3, pos5); B: TP1 (pos4) FN1 (pos5)
    assert out["per_type"]["A"]["f1"] == pytest.approx(2 / (2 + 2 + 1))
    assert out["per_type"]["B"]["f1"] == pytest.approx(2 / 3)
    assert out["f1"] == pytest.approx(2 * 2 / (4 + 4))
    assert out["n_true"] == 4 and out["n_pred"] == 4


def test_per_base_f1_bare_bio_tags_are_one_type():
    # bare B and I are the type "" (as spans_from_bio), so B vs I at a position is a match
    out = per_base_f1([["O", "B", "I", "I", "O"]], [["O", "I", "I", "I", "O"]])
    assert out["f1"] == 1.0 and list(out["per_type"]) == [""]
    typed = per_base_f1([["O", "B-X", "I-X", "I-X", "O"]], [["O", "I-X", "I-X", "I-X", "O"]])
    assert typed["f1"] == out["f1"]
    assert per_base_f1(["B", "I", "O"], ["B", "O", "B"])["f1"] == pytest.approx(2 / 4)  # TP 1, FP 1, FN 1


def test_per_base_f1_ids_with_ignore_index():
    id2label = {0: "O", 1: "B-M", 2: "I-M"}
    true = torch.tensor([[-100, 0, 1, 2, -100], [-100, 1, 2, 0, 0]])
    pred = torch.tensor([[1, 0, 1, 1, 1], [2, 1, 0, 0, 2]])  # predictions at -100 positions are ignored
    out = per_base_f1(true, pred, id2label=id2label)
    # positions kept: seq0 (0,1,2 vs 0,1,1) -> TP2; seq1 (1,2,0,0 vs 1,0,0,2) -> TP1 FN1 FP1
    assert out["precision"] == pytest.approx(3 / 4)
    assert out["recall"] == pytest.approx(3 / 4)
    # without id2label: raw ids are classes, 0 is outside, 1 and 2 separate classes
    raw = per_base_f1(np.array([0, 1, 2, -100]), [0, 1, 1, 5], outside=0)
    assert raw["per_type"][1]["precision"] == 0.5 and raw["per_type"][2]["recall"] == 0.0


def test_per_base_f1_errors():
    with pytest.raises(ValueError, match="sequence 0: true_tags has length 2 but pred_tags has length 1"):
        per_base_f1([["O", "B-A"]], [["O"]])
    with pytest.raises(ValueError, match="label id 7 is not in id2label"):
        per_base_f1([0, 7], [0, 0], id2label={0: "O"})
    with pytest.raises(ValueError, match=r"pred_tags\[0\]\[1\] is ignore_index"):
        per_base_f1([0, 1], [0, -100], outside=0)
