"""The project's metrics as ``evaluate`` modules shipped in the package, and classification metrics on
scikit-learn.

Each folder here is an ``evaluate`` module (``<name>/<name>.py``, an ``evaluate.Metric``): :func:`load`
loads one by its local path, so it works offline and in a wheel install (``evaluate.load("rouge")`` needs
the Hub), and the modules combine with ``evaluate.combine``::

    import evaluate
    import hf_sparse.metrics

    span = hf_sparse.metrics.load("span_f1")
    span.compute(predictions=[[{"type": "CTCF", "start": 3, "end": 9}]],
                 references=[[{"type": "CTCF", "start": 3, "end": 9}]])
    evaluate.combine([hf_sparse.metrics.load("span_f1"), hf_sparse.metrics.load("span_overlap_f1")])

The modules wrap the functions of the tasks that own them (span F1 and per-base F1 in
``tasks/motif/metrics.py``, ROUGE in ``tasks/summarization/rouge.py``, act F1 and intent accuracy in
``tasks/dialogue/metrics.py``, R@k / MRR in ``tasks/dialogue/ranking.py``), so both give the same figures.
Classification metrics (accuracy, P/R/F1, AUROC, multi-label F1) are in :mod:`.classification`.
"""

from __future__ import annotations

import os

from .classification import accuracy, auroc, multilabel_f1, per_class_f1, precision_recall_f1

#: the ``evaluate`` modules shipped here (folder names)
MODULES = (
    "dialogue_act_f1",
    "intent_accuracy",
    "per_base_f1",
    "ranking",
    "rouge",
    "span_f1",
    "span_overlap_f1",
)


def module_path(name: str) -> str:
    """The folder of the ``evaluate`` module ``name`` (what ``evaluate.load`` takes)."""
    if name not in MODULES:
        raise ValueError(f"unknown hf-sparse metric {name!r}; known: {list(MODULES)}")
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)


def load(name: str, config_name: str | None = None, **kwargs):
    """``evaluate.load`` of the shipped module ``name`` (offline: a local path), kept in memory.

    ``config_name`` picks a module's configuration (``dialogue_act_f1``: ``"multilabel"`` for 0/1 rows; every
    module has ``"default"``, and another name is a ValueError listing the valid ones); other keywords go to
    ``evaluate.load``. With ``num_process > 1`` (evaluate's distributed mode: each process
    adds its examples, process 0 computes over all) the inputs go through cache files in ``cache_dir``, which
    every process must share, with one ``experiment_id``; it is not kept in memory there.
    """
    import evaluate

    if kwargs.get("num_process", 1) == 1:
        kwargs.setdefault("keep_in_memory", True)  # no cache file or lock: safe in every Trainer process
    return evaluate.load(module_path(name), config_name, **kwargs)


__all__ = [
    "MODULES",
    "accuracy",
    "auroc",
    "load",
    "module_path",
    "multilabel_f1",
    "per_class_f1",
    "precision_recall_f1",
]
