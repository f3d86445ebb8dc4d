"""Intent accuracy on all turns and on turns of seen / unseen intents: an ``evaluate`` metric."""

import datasets
import evaluate

from hf_sparse.metrics import info
from hf_sparse.metrics.info import metric_info
from hf_sparse.tasks.dialogue.metrics import intent_accuracy

_DESCRIPTION = """\
Intent accuracy over turns, on all of them and separately on turns whose reference intent was seen in
training ("seen") and the others ("unseen": zero-shot intents of new services, as in the Schema-Guided
Dialogue test split). Turns whose reference intent is None (system turns) are skipped; an empty group
has accuracy nan. `hf_sparse.tasks.dialogue.metrics.intent_accuracy` on the same inputs.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: the predicted intent of each turn (str).
    references: the true intent of each turn (str, or None for a turn not to score).
    seen_intents: the intents seen in training (required).
Returns:
    all, seen, unseen (accuracies), n_seen, n_unseen (turns scored in each group).
Examples:
    >>> import hf_sparse.metrics
    >>> metric = hf_sparse.metrics.load("intent_accuracy")
    >>> metric.compute(predictions=["A", "B"], references=["A", "C"], seen_intents=["A"])["unseen"]
    0.0
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class IntentAccuracy(info.CheckedMetric):
    none_ok = True  # a None reference: a turn not to score

    def _info(self):
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, datasets.Value("string"))

    def _compute(self, predictions, references, seen_intents=None):
        if seen_intents is None:
            raise ValueError("intent_accuracy needs seen_intents= (the intents seen in training)")
        return intent_accuracy(predictions, references, seen_intents)
