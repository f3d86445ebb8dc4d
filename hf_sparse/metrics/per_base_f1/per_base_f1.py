"""Per-base (per-position) F1 of BIO tag sequences: an ``evaluate`` metric."""

import datasets
import evaluate

from hf_sparse.metrics import info
from hf_sparse.metrics.info import metric_info
from hf_sparse.tasks.motif.metrics import per_base_f1

_DESCRIPTION = """\
Per-position precision, recall and F1 ignoring the outside class. Each position's class is its tag
without the B-/I- prefix ("B-CTCF" and "I-CTCF" are both "CTCF"); "O" is no class. For each type X:
TP = positions where reference and prediction are X, FP = prediction X and reference not X, FN =
reference X and prediction not X; micro-averaged over types, and per type.
`hf_sparse.tasks.motif.metrics.per_base_f1` on the same inputs.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: one list of BIO tags (str) per sequence.
    references: the true tags, same lengths.
    outside: the outside tag (default "O").
    zero_division: value of a score whose denominator is zero (default 0.0).
Returns:
    precision, recall, f1, n_true, n_pred (positions), and per_type: {type: {...}}.
Examples:
    >>> import hf_sparse.metrics
    >>> metric = hf_sparse.metrics.load("per_base_f1")
    >>> metric.compute(predictions=[["O", "B-TF", "I-TF"]], references=[["O", "B-TF", "O"]])["f1"]
    0.6666666666666666
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class PerBaseF1(info.CheckedMetric):
    def _info(self):
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, datasets.Sequence(datasets.Value("string")))

    def _compute(self, predictions, references, outside="O", zero_division=0.0):
        return per_base_f1(references, predictions, outside=outside, zero_division=zero_division)
