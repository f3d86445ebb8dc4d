"""Multi-reference ROUGE on ``rouge_score``, offline: an ``evaluate`` metric."""

import datasets
import evaluate

from hf_sparse.metrics import info
from hf_sparse.metrics.info import metric_info
from hf_sparse.tasks.summarization.rouge import rouge

_DESCRIPTION = """\
ROUGE-1, ROUGE-2, ROUGE-L and ROUGE-Lsum F-measures of Google's rouge_score, averaged over examples,
without the Hub (evaluate.load("rouge") downloads its script). Several references per example: each
ROUGE type keeps the reference with the highest F-measure (RougeScorer.score_multi). For ROUGE-Lsum both
texts are put one sentence per line: every line break stays a sentence boundary and hf_sparse's sentence
splitter splits within lines (no nltk punkt download).
`hf_sparse.tasks.summarization.rouge.rouge` on the same inputs.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: one summary (str) per example.
    references: one reference (str) or a non-empty list of references per example; one call (or batch) may
        mix both: a str reference is read as a list of one.
    use_stemmer: Porter-stem words longer than 3 characters (default True).
    sentence_split: for ROUGE-Lsum, split sentences with hf_sparse's splitter within the texts' lines (default
        True); False uses the texts' own line breaks only.
    precision_recall: also return <type>_precision and <type>_recall (default False).
    tokenizer: "default" (rouge_score's: only the letters a-z and digits 0-9 count, so text in other scripts
        scores 0) or "unicode" (the letters and digits of every script, CJK characters one token each; the same
        tokens as "default" on ASCII text).
Returns:
    rouge1, rouge2, rougeL, rougeLsum: fractions in [0, 1]. No examples at all is a ValueError, as in
    `hf_sparse.tasks.summarization.rouge.rouge`.
Examples:
    >>> import hf_sparse.metrics
    >>> metric = hf_sparse.metrics.load("rouge")
    >>> metric.compute(predictions=["the cat sat"], references=[["a cat sat down", "the cat sat"]])["rouge1"]
    1.0
"""


def _as_list(reference):
    """A str reference as a list of one, so that every example of a call takes the several-references
    feature (evaluate picks one feature per call from the first example: a str after a list would be read
    as a list of characters, a list after a str as its repr)."""
    return [reference] if isinstance(reference, str) else reference


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Rouge(info.CheckedMetric):
    def _info(self):
        text = datasets.Value("string")
        # several references per example, or one
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, text, datasets.Sequence(text), text)

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """``evaluate.Metric.add_batch`` with every str reference read as a list of one."""
        if references is not None and not isinstance(references, str):
            references = [_as_list(r) for r in references]
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """``evaluate.Metric.add`` with a str reference read as a list of one."""
        return super().add(prediction=prediction, reference=_as_list(reference), **kwargs)

    def _infer_feature_from_batch(self, batch):
        # every reference is a list by now: the several-references layout, also for an empty batch (evaluate
        # reads the layout off the first example, which an empty batch lacks)
        return self.features[0]

    def _compute(
        self, predictions, references, use_stemmer=True, sentence_split=True, precision_recall=False,
        tokenizer="default",
    ):  # fmt: skip
        return rouge(predictions, references, use_stemmer, sentence_split, precision_recall, tokenizer)
