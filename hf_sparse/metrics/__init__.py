"""Offline metrics more than one task uses (classification: accuracy, P/R/F1, AUROC).

A metric that only one task uses lives in that task's folder (``hf_sparse/tasks/<task>/``): span F1 in
``tasks/motif/metrics.py``, ROUGE in ``tasks/summarization/rouge.py``, per-turn act F1 and R@k in
``tasks/dialogue/``. Everything runs without network access.
"""

from .classification import accuracy, auroc, multilabel_f1, per_class_f1, precision_recall_f1

__all__ = ["accuracy", "auroc", "multilabel_f1", "per_class_f1", "precision_recall_f1"]
