"""The shared argument validators: accepted values come back as plain numbers, others raise
ValueError naming the argument and the value."""

import math

import numpy as np
import pytest

from hf_sparse.utils.validation import check_fraction, check_int, check_positive_int


@pytest.mark.parametrize(
    "call, expected",
    [
        (lambda: check_int("n", 0, 0), 0),
        (lambda: check_int("n", np.int64(3), 1, 3), 3),
        (lambda: check_int("n", None, 1, allow_none=True), None),
        (lambda: check_positive_int("n", 7), 7),
        (lambda: check_fraction("p", 0), 0.0),
        (lambda: check_fraction("p", np.float32(0.5)), 0.5),
        (lambda: check_fraction("p", 1, closed_low=False), 1.0),
        (lambda: check_fraction("p", 0.999, closed_low=False, closed_high=False), 0.999),
        (lambda: check_fraction("dropout", 0, closed_high=False), 0.0),
    ],
)
def test_accepts(call, expected):
    value = call()
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: check_positive_int("max_length", 0), "max_length must be a positive int, got 0"),
        (lambda: check_positive_int("n", True), "n must be a positive int, got True"),
        (lambda: check_positive_int("n", 2.0), "n must be a positive int, got 2.0"),
        (lambda: check_positive_int("n", None), "n must be a positive int, got None"),
        (lambda: check_positive_int("n", -1, allow_none=True), "n must be a positive int or None, got -1"),
        (lambda: check_int("seed", -1, 0), "seed must be an int >= 0, got -1"),
        (lambda: check_int("k", 9, 0, 8), r"k must be an int in \[0, 8\], got 9"),
        (lambda: check_int("k", "3", 0, 8), r"k must be an int in \[0, 8\], got '3'"),
        (lambda: check_fraction("gc", 1.5), r"gc must be a number in \[0, 1\], got 1.5"),
        (lambda: check_fraction("gc", math.nan), r"gc must be a number in \[0, 1\], got nan"),
        (lambda: check_fraction("gc", False), r"gc must be a number in \[0, 1\], got False"),
        (lambda: check_fraction("p", 0, closed_low=False), r"p must be a number in \(0, 1\], got 0"),
        (
            lambda: check_fraction("dropout", 1.0, closed_high=False),
            r"dropout must be a number in \[0, 1\), got 1.0",
        ),
        (
            lambda: check_fraction("act_threshold", 1, closed_low=False, closed_high=False),
            r"act_threshold must be a number in \(0, 1\), got 1",
        ),
    ],
)
def test_rejects_with_name_and_value(call, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        call()
