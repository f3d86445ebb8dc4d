"""Lead-k, Random-k, the greedy ROUGE oracle and budgeted in-order selection."""

import random
import time

import numpy as np
import pytest
from rouge_score import rouge_scorer

from hf_sparse.tasks.summarization.metrics import (
    greedy_oracle,
    lead_k,
    oracle_labels,
    random_k,
    select_in_order,
)

DOC = "Dr. Smith studies cats. The weather was cold. Cats sleep a lot of the day. Stocks fell sharply. Cats also purr."


def test_lead_k():
    assert lead_k(DOC, 2) == ["Dr. Smith studies cats.", "The weather was cold."]
    assert lead_k(["a", "b"], k=3) == ["a", "b"]


def test_random_k_is_seeded_and_in_document_order():
    sentences = [f"s{i}" for i in range(20)]
    a, b, c = random_k(sentences, 5, seed=1), random_k(sentences, 5, seed=1), random_k(sentences, 5, seed=2)
    assert a == b and a != c
    assert a == sorted(a, key=sentences.index) and len(set(a)) == 5
    assert random_k(sentences[:2], 5) == sentences[:2]


def test_oracle_picks_the_matching_sentences():
    sentences = [
        "The weather was cold.",
        "Cats sleep most of the day.",
        "Stocks fell sharply.",
        "Cats purr when they are happy.",
        "The train was late.",
    ]
    reference = "Cats sleep most of the day and purr when they are happy."
    assert greedy_oracle(sentences, reference, max_sentences=3) == [1, 3]  # stops: no further gain
    assert greedy_oracle(sentences, reference, max_sentences=1) == [1]
    assert greedy_oracle(sentences, reference, metric="rouge1+rouge2") == [1, 3]
    np.testing.assert_array_equal(oracle_labels(sentences, reference), [0, 1, 0, 1, 0])
    assert greedy_oracle(sentences, "nothing in common here", max_sentences=3) == []


def test_oracle_rouge1_agrees_with_rouge_score():
    """Each greedy step maximizes rouge_score's ROUGE-1 F of the joined selection."""
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(30)]
    sentences = [" ".join(rng.choice(vocab) for _ in range(rng.randint(3, 9))) for _ in range(12)]
    reference = " ".join(rng.choice(vocab) for _ in range(25))
    scorer = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)

    def f(sel):
        return scorer.score(reference, " ".join(sentences[i] for i in sorted(sel)))["rouge1"].fmeasure

    chosen = greedy_oracle(sentences, reference, max_sentences=4, metric="rouge1")
    selection = []
    for _ in range(len(chosen)):
        best = max(
            (i for i in range(len(sentences)) if i not in selection), key=lambda i: (f([*selection, i]), -i)
        )
        selection.append(best)
    assert chosen == sorted(selection)


def test_oracle_multi_reference_uses_the_mean():
    sentences = ["alpha beta gamma", "delta epsilon zeta"]
    both = greedy_oracle(
        sentences, ["alpha beta gamma", "delta epsilon zeta"], max_sentences=2, metric="rouge1"
    )
    assert both == [0, 1]


def test_oracle_is_fast_on_500_sentences():
    rng = random.Random(0)
    vocab = [f"word{i}" for i in range(3000)]
    sentences = [" ".join(rng.choice(vocab) for _ in range(25)) + "." for _ in range(500)]
    reference = " ".join(sentences[42].split()[:15] + sentences[317].split() + sentences[480].split()[5:])
    start = time.perf_counter()
    chosen = greedy_oracle(sentences, reference, max_sentences=5, metric="rouge1+rouge2")
    assert time.perf_counter() - start < 2.0
    assert {42, 317, 480} <= set(chosen)


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"max_sentences": 2}, ["s0 a", "s2 a b c"]),
        ({"max_sentences": 10}, ["s0 a", "s1", "s2 a b c", "s3 a"]),
        ({"max_words": 3}, ["s0 a", "s1"]),  # s2 (4 words) is skipped, s0 and s1 fit
        ({"max_words": 6, "max_sentences": 2}, ["s0 a", "s2 a b c"]),
        ({"max_words": 1}, ["s1"]),
    ],
)
def test_select_in_order(kwargs, expected):
    sentences = ["s0 a", "s1", "s2 a b c", "s3 a"]
    scores = [0.5, 0.1, 0.9, 0.2]
    assert select_in_order(scores, sentences, **kwargs) == expected


def test_select_in_order_ties_and_indices():
    assert select_in_order([1, 1, 1], ["a", "b", "c"], max_sentences=2, return_indices=True) == [0, 1]


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda: select_in_order([1, 2], ["a", "b"], max_sentences=0),
            ValueError,
            "max_sentences must be positive",
        ),
        (lambda: select_in_order([1, 2], ["a", "b"], max_words=-1), ValueError, "max_words must be positive"),
        (lambda: select_in_order([1, 2], ["a", "b"]), ValueError, "needs max_sentences or max_words"),
        (
            lambda: select_in_order([1], ["a", "b"], max_sentences=1),
            ValueError,
            r"scores must have shape \(2,\)",
        ),
        (lambda: select_in_order([1, np.nan], ["a", "b"], max_sentences=1), ValueError, "NaN"),
        (lambda: lead_k("a. b.", 0), ValueError, "k must be positive"),
        (lambda: random_k("a. b.", 1.5), TypeError, "k must be an int"),
        (lambda: greedy_oracle(["a"], "a", metric="rougeL"), ValueError, "metric must be one of"),
        (lambda: greedy_oracle(["a"], "a", max_sentences=0), ValueError, "max_sentences must be positive"),
        (lambda: greedy_oracle(["a", 3], "a"), TypeError, r"document_sentences\[1\] must be a str"),
        (lambda: greedy_oracle(["a"], []), ValueError, "reference is an empty list"),
    ],
)
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
