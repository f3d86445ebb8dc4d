"""ROUGE against rouge_score itself, multi-reference max, Lsum sentence splitting, validation."""

import json
import os

import numpy as np
import pytest
from rouge_score import rouge_scorer

from hf_sparse.tasks.summarization.metrics import lead_k
from hf_sparse.tasks.summarization.rouge import lsum_text, rouge, rouge_per_example, rouge_tokenize

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


@pytest.mark.parametrize(
    "pred, ref",
    [
        # one sentence per line already, lowercase: every line stays a sentence (rouge_score's convention)
        ("the cat sat on the mat.\nthe dog ran in the park.\na bird sang.",
         "a bird sang.\nthe dog ran in the park.\nthe cat sat on the mat."),
        ("The cat sat on the mat\nThe dog ran in the park", "the dog ran in the park\nthe cat sat on the mat"),
    ],
)  # fmt: skip
def test_lsum_keeps_the_texts_line_breaks(pred, ref):
    scorer = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True)
    want = scorer.score(ref, pred)["rougeLsum"].fmeasure
    assert rouge([pred], [ref])["rougeLsum"] == pytest.approx(want)
    assert rouge([pred], [ref], sentence_split=False)["rougeLsum"] == pytest.approx(want)


def test_lsum_splits_lowercased_sentences_within_a_line():
    """A lowercased summary on one line ends a sentence at terminal punctuation whatever the next word's
    case; abbreviations still do not end one."""
    pred = "a bird sang . the dog ran in the park . the cat sat on the mat , e.g. the red one ."
    ref = "The cat sat on the mat, e.g. the red one. The dog ran in the park. A bird sang."
    assert lsum_text(pred).split("\n") == [
        "a bird sang .", "the dog ran in the park .", "the cat sat on the mat , e.g. the red one ."
    ]  # fmt: skip
    scorer = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True)
    want = scorer.score(ref.replace(". ", ".\n"), lsum_text(pred))["rougeLsum"].fmeasure
    assert rouge([pred], [ref])["rougeLsum"] == pytest.approx(want)
    assert rouge([pred], [ref])["rougeLsum"] != pytest.approx(rouge([pred], [ref])["rougeL"])


def test_module_takes_references_mixing_lists_and_strings():
    """The evaluate module reads a str reference next to lists as one reference (not as its characters)."""
    import hf_sparse.metrics

    metric = hf_sparse.metrics.load("rouge")
    preds = ["The cat sat on the mat.", "A dog barked loudly."]
    want = rouge(preds, [["The cat sat on the mat."], ["The dog barked."]])
    for refs in ([["The cat sat on the mat."], "The dog barked."], ["The cat sat on the mat.", ["The dog barked."]],
                 [["The cat sat on the mat."], ["x y", "The dog barked."]]):  # fmt: skip
        assert metric.compute(predictions=preds, references=refs) == pytest.approx(want)
    metric.add_batch(predictions=preds[:1], references=["The cat sat on the mat."])
    metric.add_batch(predictions=preds[1:], references=[["The dog barked.", "x y"]])
    metric.add(prediction=preds[0], reference="The cat sat on the mat.")
    got = metric.compute()
    assert got["rouge1"] == pytest.approx((2 * 1.0 + rouge(preds[1:], ["The dog barked."])["rouge1"]) / 3)


@pytest.mark.parametrize(
    "predictions, references, match",
    [
        (["a cat", ["the dog"]], ["a cat", "the dog"], r"predictions\[1\] must be a str, got \['the dog'\]"),
        (["a cat", 7], ["a cat", "7"], r"predictions\[1\] must be a str, got 7"),
        (["a cat", "the dog"], [["a cat"], [["the", "dog"]]], r"references\[1\]\[0\] must be a str"),
    ],
)
def test_module_checks_every_row(predictions, references, match):
    """evaluate checks only a column's first row: a later row of another type was stringified and scored."""
    import hf_sparse.metrics

    with pytest.raises(TypeError, match=match):
        hf_sparse.metrics.load("rouge").compute(predictions=predictions, references=references)
    metric = hf_sparse.metrics.load("rouge")  # in a later batch too
    metric.add_batch(predictions=predictions[:1], references=references[:1])
    with pytest.raises(TypeError, match=match.replace(r"\[1\]", r"\[0\]", 1)):
        metric.add_batch(predictions=predictions[1:], references=references[1:])


def test_module_on_no_examples_raises_as_the_function():
    import hf_sparse.metrics

    with pytest.raises(ValueError, match="predictions is empty"):
        rouge([], [])
    with pytest.raises(ValueError, match="predictions is empty"):
        hf_sparse.metrics.load("rouge").compute(predictions=[], references=[])
