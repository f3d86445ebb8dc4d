"""Overlap span F1 of BIO-tagged sequences (DNA motifs, entities): an ``evaluate`` metric."""

import evaluate

from hf_sparse.metrics import spans
from hf_sparse.metrics.info import metric_info
from hf_sparse.metrics.spans import SPAN_FEATURES, SPAN_INPUTS_DESCRIPTION, span_tuples
from hf_sparse.tasks.motif.metrics import span_overlap_f1

_DESCRIPTION = """\
Relaxed span scores: a predicted and a reference span match when their types (and strands) are equal and
their [start, end) intervals share at least one position. Precision = fraction of predicted spans that
match some reference span, recall = fraction of reference spans matched by some predicted span, F1 their
harmonic mean; micro over types and per type. `hf_sparse.tasks.motif.metrics.span_overlap_f1` on the
same inputs.
"""

_KWARGS_DESCRIPTION = (
    SPAN_INPUTS_DESCRIPTION
    + """Examples:
    >>> import hf_sparse.metrics
    >>> metric = hf_sparse.metrics.load("span_overlap_f1")
    >>> metric.compute(predictions=[[{"type": "CTCF", "start": 4, "end": 10}]],
    ...                references=[[{"type": "CTCF", "start": 3, "end": 9}]])["f1"]
    1.0
"""
)


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SpanOverlapF1(spans.SpanMetric):
    def _info(self):
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, [SPAN_FEATURES])

    def _compute(self, predictions, references, zero_division=0.0):
        return span_overlap_f1(span_tuples(references), span_tuples(predictions), zero_division=zero_division)
