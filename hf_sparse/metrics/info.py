"""What every shipped ``evaluate`` module (``<name>/<name>.py``) shares: the ``MetricInfo`` its ``_info``
returns, and :class:`CheckedMetric`, the base that checks every row of its inputs.

Each module differs only in its texts and its input features; the rest (no citation, the
``predictions`` / ``references`` columns, one ``Features`` per accepted reference layout) is here.
"""

from __future__ import annotations

from collections.abc import Mapping

import datasets
import evaluate
import numpy as np


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


def _scalar(x):
    """A 0-d array or tensor (a row of a 1-D one) as its Python value; else ``x``."""
    return x.item() if getattr(x, "ndim", None) == 0 and hasattr(x, "item") else x


def _is_int(feature: datasets.Value) -> bool:
    return feature.dtype.startswith(("int", "uint"))


def _kind(x) -> str | None:
    """The numpy kind letter of an array's or a tensor's dtype ("i", "u", "f", "b", "U", "O", ...); None for
    anything else."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return None
    if isinstance(dtype, np.dtype):
        return dtype.kind
    if getattr(dtype, "is_complex", False):  # a torch dtype
        return "c"
    return "f" if getattr(dtype, "is_floating_point", False) else "b" if str(dtype) == "torch.bool" else "i"


def check_row(schema, row, where: str, none_ok: bool = False) -> None:
    """TypeError / ValueError naming ``where`` (``"predictions[3]"``) unless ``row`` fits the ``datasets``
    feature ``schema``: a list (not a str, which Arrow would split into characters) for a list feature, a dict
    with exactly its fields for a dict, a str for a string (``None`` too with ``none_ok``), an int (not a
    float, which Arrow truncates) for an integer. Arrays and tensors are checked by their dtype."""
    if isinstance(schema, (list, datasets.List, datasets.LargeList)):
        feature = schema[0] if isinstance(schema, list) else schema.feature
        if (
            isinstance(row, (str, bytes, Mapping))
            or not hasattr(row, "__len__")
            or getattr(row, "ndim", 1) == 0
        ):
            raise TypeError(f"{where} must be a list, got {row!r}")
        if isinstance(feature, datasets.Value) and _kind(row) not in (None, "O"):  # an array or a tensor
            want = "U" if feature.dtype == "string" else "iu" if _is_int(feature) else None
            if want is not None and _kind(row) not in want:
                raise TypeError(f"{where} must hold {feature.dtype} values, got an array of {row.dtype}")
        elif not (isinstance(feature, datasets.Value) and feature.dtype.startswith("float")):
            for j, x in enumerate(row):
                check_row(feature, x, f"{where}[{j}]", none_ok)
    elif isinstance(schema, Mapping):
        if not isinstance(row, Mapping):
            raise TypeError(f"{where} must be a dict with the fields {list(schema)}, got {row!r}")
        if set(row) != set(schema):
            raise ValueError(
                f"{where} must have exactly the fields {list(schema)}, got {row!r}"
                f" (missing: {[k for k in schema if k not in row]}, unknown: {[k for k in row if k not in schema]})"
            )
        for k, feature in schema.items():
            check_row(feature, row[k], f"{where}[{k!r}]", none_ok)
    elif isinstance(schema, datasets.Value):
        value = _scalar(row)
        if value is None and none_ok:
            return
        if schema.dtype == "string" and not isinstance(value, str):
            raise TypeError(f"{where} must be a str, got {row!r}")
        if _is_int(schema) and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
            raise TypeError(f"{where} must be an int, got {row!r}")


class CheckedMetric(evaluate.Metric):
    """An ``evaluate.Metric`` that checks every row of its inputs with :func:`check_row` before evaluate
    stores them, raising a TypeError / ValueError that names the row.

    evaluate checks only a column's first row against the features: a str in a later row where a list is
    expected was split into characters, a float truncated to an int. A module whose inputs need more than
    their features say (spans) overrides :meth:`_prepare_row`.

    An unknown ``config_name`` (none of :attr:`config_names`) is a ValueError.

    A module subclasses it as ``info.CheckedMetric`` (``from hf_sparse.metrics import info``): ``evaluate.load``
    takes the first Metric class in the module's namespace, which must be the module's own.
    """

    #: rows (or values inside them) may be None, e.g. a turn not to score
    none_ok = False
    #: the module's configurations (``config_name``; None is ``"default"``)
    config_names = ("default",)

    def __init__(self, config_name=None, **kwargs):
        if config_name is not None and config_name not in self.config_names:
            module = type(self).__module__.rsplit(".", 1)[-1]  # the module's file name
            raise ValueError(
                f"config_name must be one of {list(self.config_names)} for the {module} metric, got {config_name!r}"
            )
        super().__init__(config_name=config_name, **kwargs)

    def _prepare_row(self, column: str, row, where: str):
        """``row`` of ``column`` ("predictions" or "references") checked, as evaluate is to store it."""
        schemas = self.features if isinstance(self.features, list) else [self.features]
        errors = []
        for schema in schemas:  # the row fits one of the module's layouts
            try:
                check_row(schema[column], row, where, self.none_ok)
                return row
            except (TypeError, ValueError) as e:
                errors.append(e)
        raise errors[0]

    def _prepare_column(self, column: str, rows):
        if rows is None:
            return None
        if isinstance(rows, (str, bytes, Mapping)) or not hasattr(rows, "__len__"):
            raise TypeError(f"{column} must be a list with one entry per example, got {rows!r}")
        prepared = [self._prepare_row(column, row, f"{column}[{i}]") for i, row in enumerate(rows)]
        return rows if all(p is r for p, r in zip(prepared, rows)) else prepared

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """``evaluate.Metric.add_batch`` after checking every row of ``predictions`` and ``references``."""
        # (a docstring is needed: evaluate appends the module's inputs_description to it)
        predictions = self._prepare_column("predictions", predictions)
        references = self._prepare_column("references", references)
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """``evaluate.Metric.add`` after checking ``prediction`` and ``reference``."""
        if prediction is not None:
            prediction = self._prepare_row("predictions", prediction, "prediction")
        if reference is not None:
            reference = self._prepare_row("references", reference, "reference")
        return super().add(prediction=prediction, reference=reference, **kwargs)

    def _enforce_nested_string_type(self, schema, obj):
        # evaluate's own check of a column's first value: a None there is let through as everywhere else
        if obj is None and self.none_ok:
            return None
        return super()._enforce_nested_string_type(schema, obj)


__all__ = ["CheckedMetric", "check_row", "metric_info"]
