"""The span layout of the span metrics' ``evaluate`` modules (``span_f1``, ``span_overlap_f1``).

``evaluate`` stores inputs in Arrow, which has no mixed-type tuples: a span is a dict
``{"type": str, "start": int, "end": int}``, optionally with ``"strand": str`` (``"+"`` / ``"-"``), there,
and a tuple ``(type, start, end)`` or ``(type, start, end, strand)`` in :mod:`hf_sparse.tasks.motif.metrics`,
whose spans match only when the whole tuples are equal (a span with a strand never matches one without).
"""

from __future__ import annotations

from collections.abc import Mapping

from datasets import Value

from .info import CheckedMetric, check_row

#: one span in an ``evaluate`` input column (``strand``: None for a span without one)
SPAN_FEATURES = {
    "type": Value("string"),
    "start": Value("int64"),
    "end": Value("int64"),
    "strand": Value("string"),
}

#: the arguments and returns of both span modules (their ``_KWARGS_DESCRIPTION`` adds an example)
SPAN_INPUTS_DESCRIPTION = """
Args:
    predictions: one list per sequence of spans `{"type": str, "start": int, "end": int}` (end exclusive),
        optionally with `"strand": str` ("+" / "-"; spans match only when their strands are equal too).
    references: the true spans, same layout.
    zero_division: value of a score whose denominator is zero (default 0.0).
Returns:
    precision, recall, f1, n_true, n_pred, and per_type: {type: {precision, recall, f1, n_true, n_pred}}.
"""

_REQUIRED = ("type", "start", "end")


def span_dict(span, where: str) -> dict:
    """``span`` (a dict of the modules' layout) with its ``strand`` (None when absent); TypeError / ValueError
    naming ``where`` and the field for a missing or unknown field or a value of the wrong type (a float
    ``end`` is not truncated)."""
    if not isinstance(span, Mapping):
        raise TypeError(f"{where} must be a span dict {{'type', 'start', 'end'[, 'strand']}}, got {span!r}")
    missing = [k for k in _REQUIRED if k not in span]
    if missing:
        raise ValueError(
            f"{where} has no {missing[0]!r} field (a span is {{'type', 'start', 'end'[, 'strand']}}): {span!r}"
        )
    unknown = [k for k in span if k not in SPAN_FEATURES]
    if unknown:
        raise ValueError(
            f"{where} has unknown field {unknown[0]!r} (a span is {{'type', 'start', 'end'[, 'strand']}}): {span!r}"
        )
    out = {**span, "strand": span.get("strand")}
    for key in _REQUIRED:
        check_row(SPAN_FEATURES[key], out[key], f"{where}[{key!r}]")
    check_row(SPAN_FEATURES["strand"], out["strand"], f"{where}['strand']", none_ok=True)
    return out


class SpanMetric(CheckedMetric):
    """The base of the span modules: every span of every row checked by :func:`span_dict`."""

    def _prepare_row(self, column, row, where):
        if isinstance(row, (str, bytes, Mapping)) or not hasattr(row, "__len__"):
            raise TypeError(f"{where} must be a list of span dicts (one sequence's spans), got {row!r}")
        return [span_dict(s, f"{where}[{j}]") for j, s in enumerate(row)]


def span_dicts(batch) -> list[list[dict]]:
    """``(type, start, end[, strand])`` tuples, one list per sequence -> the modules' dicts."""
    out = []
    for i, seq in enumerate(batch):
        out.append([])
        for j, s in enumerate(seq):
            if len(s) not in (3, 4):
                raise ValueError(f"batch[{i}][{j}] must be (type, start, end[, strand]), got {s!r}")
            out[-1].append(
                {"type": s[0], "start": int(s[1]), "end": int(s[2]), "strand": s[3] if len(s) == 4 else None}
            )
    return out


def span_tuples(batch) -> list[list[tuple]]:
    """The modules' dicts -> ``(type, start, end[, strand])`` tuples (no strand where it is None), one list per
    sequence."""
    return [
        [
            (s["type"], s["start"], s["end"]) + ((s["strand"],) if s.get("strand") is not None else ())
            for s in seq
        ]
        for seq in batch
    ]


__all__ = ["SPAN_FEATURES", "SPAN_INPUTS_DESCRIPTION", "SpanMetric", "span_dict", "span_dicts", "span_tuples"]
