"""IGNORE_INDEX and BIO decoding: the one definition the motif data, metrics and pipeline share."""

import numpy as np
import pytest

from hf_sparse.tasks.motif import metrics, pipeline
from hf_sparse.tasks.motif.data import spans_to_tags
from hf_sparse.utils.labels import IGNORE_INDEX, spans_from_bio


@pytest.mark.parametrize(
    "tags, expected",
    [
        (["O", "B-TF", "I-TF", "O"], [("TF", 1, 3)]),
        (["B-TF", "I-TF"], [("TF", 0, 2)]),
        (["B-A", "B-A", "I-A"], [("A", 0, 1), ("A", 1, 3)]),
        (["I-A", "I-A", "O", "I-A"], [("A", 0, 2), ("A", 3, 4)]),  # I- without B- starts a span
        (["B-A", "I-B", "I-B"], [("A", 0, 1), ("B", 1, 3)]),  # type change starts a span
        (["B", "I", "O"], [("", 0, 2)]),
        (["O", "B-A", "I-A", "I-B", "O", "I-A"], [("A", 1, 3), ("B", 3, 4), ("A", 5, 6)]),
        ([], []),
        (["O", "O"], []),
        (np.array(["B-A", "I-A"]), [("A", 0, 2)]),
    ],
)
def test_spans_from_bio(tags, expected):
    assert spans_from_bio(tags) == expected


@pytest.mark.parametrize(
    "tags, error, match",
    [
        (["O", "X-A"], ValueError, r"tags\[1\] is not a BIO tag"),
        (["B-"], ValueError, r"tags\[0\] is not a BIO tag"),
        (["O", "o"], ValueError, r"tags\[1\] is not a BIO tag"),
        ([0, 1], TypeError, r"tags\[0\] must be a str"),
        ("B-A", TypeError, "tags must be a list of str"),
    ],
)
def test_spans_from_bio_rejects_bad_tags(tags, error, match):
    with pytest.raises(error, match=match):
        spans_from_bio(tags)


def test_spans_round_trip_through_tags():
    """spans_to_tags (motif data) and spans_from_bio invert each other on non-overlapping spans."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        cuts = np.sort(rng.choice(n + 1, size=2 * int(rng.integers(0, n // 2 + 1)), replace=False))
        spans = [
            {"motif": str(rng.choice(["A", "B"])), "start": int(a), "end": int(b)}
            for a, b in zip(cuts[::2], cuts[1::2])
        ]
        expected = [(s["motif"], s["start"], s["end"]) for s in spans]
        assert spans_from_bio(spans_to_tags(n, spans)) == expected


def test_one_definition():
    """The metrics and the pipeline decode with the shared function, not copies of their own."""
    assert metrics.spans_from_bio is spans_from_bio
    assert pipeline.spans_from_bio is spans_from_bio
    assert IGNORE_INDEX == -100
