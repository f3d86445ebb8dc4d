"""Per-turn dialogue-act F1 and intent accuracy on seen/unseen intents."""

import json
import math
import os

import numpy as np
import pytest

from hf_sparse.metrics import multilabel_f1
from hf_sparse.tasks.dialogue.metrics import dialogue_act_f1, intent_accuracy


def test_dialogue_act_f1_from_act_names():
    true = [["INFORM", "INFORM_INTENT"], ["REQUEST"], ["GOODBYE"]]
    pred = [["INFORM"], ["REQUEST", "OFFER"], ["GOODBYE"]]
    out = dialogue_act_f1(true, pred)
    # TP 3 (INFORM, REQUEST, GOODBYE), FP 1 (OFFER), FN 1 (INFORM_INTENT)
    assert out["micro"] == pytest.approx(6 / 8)
    # acts present: GOODBYE 1, INFORM 1, INFORM_INTENT 0, OFFER 0, REQUEST 1
    assert out["macro"] == pytest.approx(3 / 5)
    assert out["per_act"] == pytest.approx(
        {"GOODBYE": 1, "INFORM": 1, "INFORM_INTENT": 0, "OFFER": 0, "REQUEST": 1}
    )


def test_dialogue_act_f1_matrices_and_fixed_labels():
    t = np.array([[1, 0, 1], [0, 1, 0]])
    p = np.array([[1, 0, 0], [0, 1, 1]])
    out = dialogue_act_f1(t, p, labels=["A", "B", "C"])
    assert out["micro"] == pytest.approx(multilabel_f1(t, p))
    assert set(out["per_act"]) == {"A", "B", "C"}
    fixed = dialogue_act_f1([["A"]], [["A"]], labels=["A", "B"])
    assert fixed["macro"] == 1.0 and math.isnan(fixed["per_act"]["B"])
    with pytest.raises(ValueError, match=r"pred_acts\[0\] has act 'Z', which is not in labels"):
        dialogue_act_f1([["A"]], [["Z"]], labels=["A"])
    with pytest.raises(ValueError, match="differ in length: 1 != 2"):
        dialogue_act_f1([["A"]], [["A"], []])


def test_dialogue_act_f1_one_act():
    # one act is a one-column matrix: only that act is scored, not its absence
    out = dialogue_act_f1([["INFORM"], [], [], []], [[], [], [], []])
    assert out == {"micro": 0.0, "macro": 0.0, "per_act": {"INFORM": 0.0}}
    out = dialogue_act_f1([["INFORM"], [], ["INFORM"]], [["INFORM"], ["INFORM"], []])
    assert out == {"micro": 0.5, "macro": 0.5, "per_act": {"INFORM": 0.5}}  # TP 1, FP 1, FN 1


def test_dialogue_act_f1_without_any_act_is_a_zero_division():
    assert dialogue_act_f1([[], []], [[], []]) == {"micro": 0.0, "macro": 0.0, "per_act": {}}
    fixed = dialogue_act_f1([[], []], [[], []], labels=["INFORM"])
    assert fixed["micro"] == fixed["macro"] == 0.0 and math.isnan(fixed["per_act"]["INFORM"])
    with pytest.raises(TypeError, match=r"pred_acts\[1\] must be a collection of act names, got 'INFORM'"):
        dialogue_act_f1([[], []], [[], "INFORM"])


def test_intent_accuracy_seen_unseen():
    gold = ["FindRestaurants", None, "BookFlight", "PlayMusic", None, "PlayMusic"]
    pred = ["FindRestaurants", "x", "BookHotel", "PlayMusic", "y", "PlayMovie"]
    out = intent_accuracy(pred, gold, seen_intents={"FindRestaurants", "BookFlight"})
    assert out == pytest.approx({"all": 0.5, "seen": 0.5, "unseen": 0.5, "n_seen": 2, "n_unseen": 2})
    only_seen = intent_accuracy(["a"], ["a"], seen_intents={"a"})
    assert only_seen["seen"] == 1.0 and math.isnan(only_seen["unseen"]) and only_seen["n_unseen"] == 0


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((["a"], ["a", "b"], set()), ValueError, "pred and gold differ in length: 1 != 2"),
        (([None], [None], set()), ValueError, "gold has no intent to score"),
        (("ab", ["a", "b"], set()), TypeError, "pred must be a list"),
        ((["a"], ["a"], "a"), TypeError, "seen_intents must be a set"),
    ],
)
def test_intent_accuracy_errors(args, error, match):
    with pytest.raises(error, match=match):
        intent_accuracy(*args)


def test_sgd_gold_against_itself(shared_data):
    path = os.path.join(shared_data, "dialogue", "schema_guided_dialogue", "test.jsonl")
    if not os.path.exists(path):
        pytest.skip("SGD test split is not available")
    with open(path) as f:
        rows = [json.loads(line) for _, line in zip(range(30), f)]
    acts = [turn for r in rows for turn in r["acts"]]
    intents = [i for r in rows for i in r["active_intent"]]
    perfect = dialogue_act_f1(acts, acts)
    assert perfect["micro"] == perfect["macro"] == 1.0 and set(perfect["per_act"].values()) == {1.0}
    dropped = dialogue_act_f1(acts, [turn[:1] for turn in acts])  # keep only the first act per turn
    n_true, n_kept = sum(map(len, acts)), sum(min(len(t), 1) for t in acts)
    assert dropped["micro"] == pytest.approx(2 * n_kept / (n_true + n_kept))
    out = intent_accuracy(intents, intents, seen_intents=set(intents[: len(intents) // 2]) - {None})
    assert out["all"] == 1.0 and out["n_seen"] + out["n_unseen"] == sum(i is not None for i in intents)
