"""Comparing pipeline outputs: batched and unbatched calls must agree."""

from __future__ import annotations

import math


def assert_same_outputs(got, want, tol: float = 1e-5, path: str = "out") -> None:
    """``got`` equals ``want``: same structure, keys, strings, ints and order; floats within ``tol``."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), f"{path}: keys {list(got)} != {list(want)}"
        for k in want:
            assert_same_outputs(got[k], want[k], tol, f"{path}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), f"{path}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_outputs(g, w, tol, f"{path}[{i}]")
    elif isinstance(want, float):
        assert isinstance(got, float) and math.isclose(got, want, rel_tol=0, abs_tol=tol), (
            f"{path}: {got} != {want}"
        )
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"
