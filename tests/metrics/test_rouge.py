"""ROUGE against rouge_score itself, multi-reference max, Lsum sentence splitting, validation."""

import json
import os

import numpy as np
import pytest
from rouge_score import rouge_scorer

from hf_sparse.tasks.summarization.metrics import lead_k
from hf_sparse.tasks.summarization.rouge import rouge, rouge_per_example, rouge_tokenize

PRED = "The cats were sitting on the mat. Dogs ran away quickly."
REF = "A cat sat on the mat. The dog ran away."


def _reference_scores(ref, pred):
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    plain = scorer.score(ref, pred)
    # rougeLsum wants one sentence per line; these two texts split into two sentences each.
    lsum = scorer.score(ref.replace(". ", ".\n"), pred.replace(". ", ".\n"))["rougeLsum"]
    return plain, lsum


def test_matches_rouge_score():
    plain, lsum = _reference_scores(REF, PRED)
    out = rouge([PRED], [REF], precision_recall=True)
    for t in ("rouge1", "rouge2", "rougeL"):
        assert out[t] == pytest.approx(plain[t].fmeasure)
        assert out[f"{t}_precision"] == pytest.approx(plain[t].precision)
        assert out[f"{t}_recall"] == pytest.approx(plain[t].recall)
    assert out["rougeLsum"] == pytest.approx(lsum.fmeasure)
    assert out["rougeLsum"] != pytest.approx(plain["rougeLsum"].fmeasure)  # the split matters here


def test_hand_computed_rouge1():
    # tokens (stemmed): pred "the cat sat", ref "the cat sat down": overlap 3, P = 1, R = 3/4.
    out = rouge(["The cats sat"], ["the cat sat down"], precision_recall=True)
    assert out["rouge1_precision"] == pytest.approx(1.0)
    assert out["rouge1_recall"] == pytest.approx(0.75)
    assert out["rouge1"] == pytest.approx(2 * 0.75 / 1.75)
    assert rouge(["The cats sat"], ["the cat sat down"], use_stemmer=False)["rouge1"] == pytest.approx(
        2 * 2 / 7
    )


def test_keys_and_mean_over_examples():
    out = rouge(["a b c", "x y"], ["a b c", "p q"])
    assert set(out) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    assert out["rouge1"] == pytest.approx(0.5)
    per = rouge_per_example(["a b c", "x y"], ["a b c", "p q"])
    np.testing.assert_allclose(per["rouge1"], [1.0, 0.0])
    assert per["rouge2_precision"].shape == (2,)


def test_multi_reference_takes_the_max_per_example():
    refs = [["completely different words", "the cat sat on the mat", "a cat"]]
    per = rouge_per_example(["the cat sat on the mat"], refs)
    assert per["rouge1"][0] == pytest.approx(1.0)
    single = [rouge_per_example(["the cat sat on the mat"], [r])["rouge2"][0] for r in refs[0]]
    assert per["rouge2"][0] == pytest.approx(max(single))
    # Mixed: plain strings and lists in the same call.
    assert rouge(["x", "a cat"], ["x", ["dog", "a cat"]])["rouge1"] == pytest.approx(1.0)


def test_tokenizer_is_rouge_scores():
    from rouge_score import tokenizers

    text = "Running quickly, the U.S.-based runners' 3.5km race!"
    assert rouge_tokenize(text) == tokenizers.DefaultTokenizer(use_stemmer=True).tokenize(text)
    assert rouge_tokenize(text, use_stemmer=False) == tokenizers.DefaultTokenizer().tokenize(text)


@pytest.mark.parametrize(
    "predictions, references, error, match",
    [
        ("a string", ["x"], TypeError, "predictions must be a list"),
        (["a"], "x", TypeError, "references must be a list"),
        ([], [], ValueError, "predictions is empty"),
        (["a", "b"], ["x"], ValueError, "differ in length: 2 != 1"),
        ([1], ["x"], TypeError, r"predictions\[0\] must be a str"),
        (["a"], [[]], ValueError, r"references\[0\] is an empty list"),
        (["a"], [["x", 3]], TypeError, r"references\[0\]\[1\] must be a str"),
        (["a"], [None], TypeError, r"references\[0\] must be a str or a list"),
    ],
)
def test_validation(predictions, references, error, match):
    with pytest.raises(error, match=match):
        rouge(predictions, references)


def test_lead3_on_scisummnet_is_sane(shared_data):
    path = os.path.join(shared_data, "summarization", "scisummnet", "test.jsonl")
    if not os.path.exists(path):
        pytest.skip("scisummnet test split is not available")
    with open(path) as f:
        rows = [json.loads(line) for line in f][:20]
    preds = [" ".join(lead_k(r["document"], 3)) for r in rows]
    out = rouge(preds, [r["summary"] for r in rows])
    assert 0.1 < out["rouge1"] < 0.6
    assert 0.0 < out["rouge2"] < out["rouge1"]
