"""Argument checks shared by configs, data code, collators and pipelines.

Each raises ``ValueError`` naming the argument and the value it got, and returns the value as a
plain Python number (numpy integers become ``int``). ``bool`` is never accepted as a number.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _int_range(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"an int in [{minimum}, {maximum}]"
    if minimum == 1:
        return "a positive int"
    if minimum is not None:
        return f"an int >= {minimum}"
    if maximum is not None:
        return f"an int <= {maximum}"
    return "an int"


def check_int(
    name: str,
    value: Any,
    minimum: int | None = None,
    maximum: int | None = None,
    *,
    allow_none: bool = False,
) -> int | None:
    """``value`` as an ``int`` in ``[minimum, maximum]`` (either bound may be None: open).

    Raises:
        ValueError: ``value`` is not an int (bools and floats included) or is out of range, e.g.
            ``"max_length must be a positive int, got 0"``.
    """
    if value is None and allow_none:
        return None
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    ok = ok and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    if not ok:
        what = _int_range(minimum, maximum) + (" or None" if allow_none else "")
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return int(value)


def check_positive_int(name: str, value: Any, *, allow_none: bool = False) -> int | None:
    """``check_int(name, value, 1, allow_none=allow_none)``: an int >= 1."""
    return check_int(name, value, 1, allow_none=allow_none)


def check_fraction(name: str, value: Any, *, closed_low: bool = True, closed_high: bool = True) -> float:
    """``value`` as a ``float`` in ``[0, 1]``; ``closed_low=False`` leaves 0 out, ``closed_high=False``
    leaves 1 out (``(0, 1)`` a threshold, ``[0, 1)`` a dropout probability).

    Raises:
        ValueError: not a finite number in the interval, e.g. ``"gc_content must be a number in
            [0, 1], got 1.5"``.
    """
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    ok = ok and math.isfinite(value)
    ok = (
        ok
        and (0.0 <= value if closed_low else 0.0 < value)
        and (value <= 1.0 if closed_high else value < 1.0)
    )
    if not ok:
        interval = ("[" if closed_low else "(") + "0, 1" + ("]" if closed_high else ")")
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")
    return float(value)


__all__ = ["check_fraction", "check_int", "check_positive_int"]
