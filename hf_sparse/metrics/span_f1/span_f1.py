"""Exact-match span F1 of BIO-tagged sequences (DNA motifs, entities): an ``evaluate`` metric."""

import evaluate

from hf_sparse.metrics import spans
from hf_sparse.metrics.info import metric_info
from hf_sparse.metrics.spans import SPAN_FEATURES, SPAN_INPUTS_DESCRIPTION, span_tuples
from hf_sparse.tasks.motif.metrics import span_f1

_DESCRIPTION = """\
Exact-match span precision, recall and F1, micro-averaged over span types and per type. A predicted span
is a true positive iff an identical span (type, start, end, and strand if any) is among the reference spans
of the same sequence (multiset matching: a duplicated prediction matches at most as many copies as exist).
F1 = 2·TP / (#reference + #predicted spans). `hf_sparse.tasks.motif.metrics.span_f1` on the same inputs.
"""

_KWARGS_DESCRIPTION = (
    SPAN_INPUTS_DESCRIPTION
    + """Examples:
    >>> import hf_sparse.metrics
    >>> metric = hf_sparse.metrics.load("span_f1")
    >>> metric.compute(predictions=[[{"type": "CTCF", "start": 3, "end": 9}]],
    ...                references=[[{"type": "CTCF", "start": 3, "end": 9}]])["f1"]
    1.0
"""
)


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SpanF1(spans.SpanMetric):
    def _info(self):
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, [SPAN_FEATURES])

    def _compute(self, predictions, references, zero_division=0.0):
        return span_f1(span_tuples(references), span_tuples(predictions), zero_division=zero_division)
