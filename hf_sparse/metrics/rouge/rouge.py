"""Multi-reference ROUGE on ``rouge_score``, offline: an ``evaluate`` metric."""

import datasets
import evaluate

from hf_sparse.metrics.info import metric_info
from hf_sparse.tasks.summarization.rouge import rouge

_DESCRIPTION = """\
ROUGE-1, ROUGE-2, ROUGE-L and ROUGE-Lsum F-measures of Google's rouge_score, averaged over examples,
without the Hub (evaluate.load("rouge") downloads its script). Several references per example: each
ROUGE type keeps the reference with the highest F-measure (RougeScorer.score_multi). For ROUGE-Lsum both
texts are put one sentence per line with hf_sparse's sentence splitter (no nltk punkt download).
`hf_sparse.tasks.summarization.rouge.rouge` on the same inputs.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: one summary (str) per example.
    references: one reference (str) or a non-empty list of references per example.
    use_stemmer: Porter-stem words longer than 3 characters (default True).
    sentence_split: for ROUGE-Lsum, split sentences with hf_sparse's splitter (default True); False uses the
        texts' own line breaks.
    precision_recall: also return <type>_precision and <type>_recall (default False).
Returns:
    rouge1, rouge2, rougeL, rougeLsum: fractions in [0, 1].
Examples:
    >>> import hf_sparse.metrics
    >>> metric = hf_sparse.metrics.load("rouge")
    >>> metric.compute(predictions=["the cat sat"], references=[["a cat sat down", "the cat sat"]])["rouge1"]
    1.0
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Rouge(evaluate.Metric):
    def _info(self):
        text = datasets.Value("string")
        # several references per example, or one
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, text, datasets.Sequence(text), text)

    def _compute(
        self, predictions, references, use_stemmer=True, sentence_split=True, precision_recall=False
    ):
        return rouge(predictions, references, use_stemmer, sentence_split, precision_recall)
