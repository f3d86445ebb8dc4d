"""The span layout of the span metrics' ``evaluate`` modules (``span_f1``, ``span_overlap_f1``).

``evaluate`` stores inputs in Arrow, which has no mixed-type tuples: a span is a dict
``{"type": str, "start": int, "end": int}`` there, and a tuple ``(type, start, end)`` in
:mod:`hf_sparse.tasks.motif.metrics`.
"""

from __future__ import annotations

from datasets import Value

#: one span in an ``evaluate`` input column
SPAN_FEATURES = {"type": Value("string"), "start": Value("int64"), "end": Value("int64")}

#: the arguments and returns of both span modules (their ``_KWARGS_DESCRIPTION`` adds an example)
SPAN_INPUTS_DESCRIPTION = """
Args:
    predictions: one list per sequence of spans `{"type": str, "start": int, "end": int}` (end exclusive).
    references: the true spans, same layout.
    zero_division: value of a score whose denominator is zero (default 0.0).
Returns:
    precision, recall, f1, n_true, n_pred, and per_type: {type: {precision, recall, f1, n_true, n_pred}}.
"""


def span_dicts(batch) -> list[list[dict]]:
    """``(type, start, end)`` tuples, one list per sequence -> the modules' dicts."""
    return [[{"type": s[0], "start": int(s[1]), "end": int(s[2])} for s in seq] for seq in batch]


def span_tuples(batch) -> list[list[tuple]]:
    """The modules' dicts -> ``(type, start, end)`` tuples, one list per sequence."""
    return [[(s["type"], s["start"], s["end"]) for s in seq] for seq in batch]


__all__ = ["SPAN_FEATURES", "SPAN_INPUTS_DESCRIPTION", "span_dicts", "span_tuples"]
