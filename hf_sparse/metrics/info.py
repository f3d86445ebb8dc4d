"""The ``MetricInfo`` that every shipped ``evaluate`` module (``<name>/<name>.py``) returns from ``_info``.

Each module differs only in its texts and its input features; the rest (no citation, the
``predictions`` / ``references`` columns, one ``Features`` per accepted reference layout) is here.
"""

from __future__ import annotations

import datasets
import evaluate


def metric_info(description: str, inputs_description: str, predictions, *references) -> evaluate.MetricInfo:
    """``evaluate.MetricInfo`` of a shipped module whose inputs are ``predictions`` and ``references``.

    Args:
        description: what the metric computes (``_DESCRIPTION``).
        inputs_description: its arguments, returns and examples (``_KWARGS_DESCRIPTION``).
        predictions: the ``datasets`` feature type of one prediction.
        references: the feature type of one reference; several types give one ``Features`` each (evaluate
            takes the first the inputs fit, e.g. one reference or a list of them); none: as ``predictions``.
    """
    features = [
        datasets.Features({"predictions": predictions, "references": ref})
        for ref in references or (predictions,)
    ]
    return evaluate.MetricInfo(
        description=description,
        citation="",
        inputs_description=inputs_description,
        features=features[0] if len(features) == 1 else features,
    )


__all__ = ["metric_info"]
