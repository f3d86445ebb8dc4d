"""Per-turn dialogue-act F1 (multi-label): an ``evaluate`` metric."""

import datasets
import evaluate
import numpy as np

from hf_sparse.metrics import info
from hf_sparse.metrics.info import metric_info
from hf_sparse.tasks.dialogue.metrics import dialogue_act_f1

_DESCRIPTION = """\
Multi-label dialogue-act F1 over turns: micro (over all turn x act cells), macro (mean over the acts that
occur in the references or the predictions) and the F1 of each act (nan for an act that occurs in
neither). `hf_sparse.tasks.dialogue.metrics.dialogue_act_f1` on the same inputs.

Configurations: "default" takes the act names of each turn; "multilabel" takes one 0/1 row per turn
(columns in the order of `labels`; a value other than 0 or 1, e.g. a probability, a logit or a -100
padding, is a ValueError).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: per turn, the predicted act names ("default") or a 0/1 row ("multilabel").
    references: the true acts, same layout.
    labels: the act inventory (default: every act seen in either input, sorted); an act outside it is a
        ValueError. With "multilabel" it names the columns.
Returns:
    micro, macro, per_act: {act: f1}.
Examples:
    >>> import hf_sparse.metrics
    >>> metric = hf_sparse.metrics.load("dialogue_act_f1")
    >>> metric.compute(predictions=[["INFORM"], []], references=[["INFORM"], ["REQUEST"]])["micro"]
    0.6666666666666666
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class DialogueActF1(info.CheckedMetric):
    config_names = ("default", "multilabel")

    def _info(self):
        # "multilabel" rows are stored as floats: an int feature would truncate a probability to 0
        value = datasets.Value("float64" if self.config_name == "multilabel" else "string")
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, datasets.Sequence(value))

    def _compute(self, predictions, references, labels=None):
        if self.config_name == "multilabel":
            predictions, references = (
                _indicator("predictions", predictions),
                _indicator("references", references),
            )
        return dialogue_act_f1(references, predictions, labels=labels)


def _indicator(name: str, rows) -> np.ndarray:
    """The 0/1 rows of ``name`` as one (turns, acts) matrix; ValueError naming a row of other values or width."""
    for i, row in enumerate(rows):
        if len(row) != len(rows[0]):
            raise ValueError(f"{name}[{i}] has {len(row)} columns, {name}[0] has {len(rows[0])}")
        if not all(v in (0, 1) for v in row):
            raise ValueError(f"{name}[{i}] must contain only 0 and 1 (or booleans), got {row!r}")
    return np.asarray(rows, dtype=bool).reshape(len(rows), len(rows[0]) if rows else 0)
