"""Response-selection ranking: recall@k and mean reciprocal rank, an ``evaluate`` metric."""

import datasets
import evaluate

from hf_sparse.metrics import info
from hf_sparse.metrics.info import metric_info
from hf_sparse.tasks.dialogue.ranking import ranking_metrics

_DESCRIPTION = """\
Recall@k (the fraction of examples whose positive candidate ranks in the top k; R10@k with 10
candidates) and mean reciprocal rank. Ties are broken pessimistically: the positive comes after every
candidate with an equal score, so equal scores for all candidates give rank n_candidates.
`hf_sparse.tasks.dialogue.ranking.ranking_metrics` on the same inputs.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: per example, the scores of its candidates (higher = better; the same number per example).
    references: per example, the index of the correct candidate.
    ks: the k of each recall@k: a list of ints, or one int (default (1, 2, 5)).
Returns:
    r@k for each k, and mrr.
Examples:
    >>> import hf_sparse.metrics
    >>> metric = hf_sparse.metrics.load("ranking")
    >>> metric.compute(predictions=[[0.9, 0.1, 0.3], [0.2, 0.8, 0.5]], references=[0, 0], ks=[1, 2])
    {'r@1': 0.5, 'r@2': 0.5, 'mrr': 0.6666666666666666}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Ranking(info.CheckedMetric):
    def _info(self):
        scores, true_index = datasets.Sequence(datasets.Value("float64")), datasets.Value("int64")
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, scores, true_index)

    def _compute(self, predictions, references, ks=(1, 2, 5)):
        lengths = sorted({len(scores) for scores in predictions})
        if len(lengths) > 1:
            raise ValueError(
                f"predictions must hold the same number of candidate scores per example, got lengths {lengths}"
            )
        return ranking_metrics(predictions, references, ks=ks)
