"""Overlap span F1 of BIO-tagged sequences (DNA motifs, entities): an ``evaluate`` metric."""

import datasets
import evaluate

from hf_sparse.metrics.spans import SPAN_FEATURES, span_tuples
from hf_sparse.tasks.motif.metrics import span_overlap_f1

_DESCRIPTION = """\
Relaxed span scores: a predicted and a reference span match when their types are equal and their
[start, end) intervals share at least one position. Precision = fraction of predicted spans that match
some reference span, recall = fraction of reference spans matched by some predicted span, F1 their
harmonic mean; micro over types and per type. `hf_sparse.tasks.motif.metrics.span_overlap_f1` on the
same inputs.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: one list per sequence of spans `{"type": str, "start": int, "end": int}` (end exclusive).
    references: the true spans, same layout.
    zero_division: value of a score whose denominator is zero (default 0.0).
Returns:
    precision, recall, f1, n_true, n_pred, and per_type: {type: {precision, recall, f1, n_true, n_pred}}.
Examples:
    >>> import hf_sparse.metrics
    >>> metric = hf_sparse.metrics.load("span_overlap_f1")
    >>> metric.compute(predictions=[[{"type": "CTCF", "start": 4, "end": 10}]],
    ...                references=[[{"type": "CTCF", "start": 3, "end": 9}]])["f1"]
    1.0
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SpanOverlapF1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": [SPAN_FEATURES], "references": [SPAN_FEATURES]}),
        )

    def _compute(self, predictions, references, zero_division=0.0):
        return span_overlap_f1(span_tuples(references), span_tuples(predictions), zero_division=zero_division)
