"""Same figures: every metric function, its ``evaluate`` module and the tasks' Trainer metrics give the
figures recorded at 164ebad, before the move to ``evaluate`` and scikit-learn (``reference/reference.json``,
written by ``reference/record.py`` on seeded inputs with empty predictions, zero divisions, AUROC ties and
several references), within 1e-12."""

from __future__ import annotations

import json
import math
import os
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import hf_sparse.metrics as metrics
from hf_sparse.metrics.spans import span_dicts
from hf_sparse.tasks.dialogue import metrics as dialogue_metrics
from hf_sparse.tasks.dialogue import ranking
from hf_sparse.tasks.dialogue.task import _from_labels, ranking_scores
from hf_sparse.tasks.motif import metrics as motif_metrics
from hf_sparse.tasks.motif.task import sequence_metrics, tag_metrics
from hf_sparse.tasks.summarization import rouge

with open(os.path.join(os.path.dirname(__file__), "reference", "reference.json")) as f:
    REFERENCE = json.load(f)

CASES = [(group, i, c) for group, cases in REFERENCE.items() for i, c in enumerate(cases)]
IDS = [f"{group}-{i}-{c['fn']}" for group, i, c in CASES]


def assert_same(got, want, path="out"):
    """Equal structure; floats within 1e-12 (NaN equals NaN); dict keys compared as JSON writes them."""
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{path}: {got!r} is not a dict"
        got = {str(k): v for k, v in got.items()}
        assert list(got) == list(want), f"{path}: keys {list(got)} != {list(want)}"
        for k in want:
            assert_same(got[k], want[k], f"{path}[{k!r}]")
    elif isinstance(want, list):
        assert len(got) == len(want), f"{path}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{path}[{i}]")
    elif isinstance(want, float) and math.isnan(want):
        assert isinstance(got, float) and math.isnan(got), f"{path}: {got!r} != nan"
    else:
        assert type(got) is type(want) or {type(got), type(want)} <= {int, float}, (
            f"{path}: {got!r} vs {want!r}"
        )
        assert abs(got - want) <= 1e-12, f"{path}: {got!r} != {want!r}"


FUNCTIONS = {
    **{n: getattr(metrics, n) for n in ("accuracy", "auroc", "multilabel_f1", "per_class_f1", "precision_recall_f1")},
    "span_f1": lambda true_spans, pred_spans, **kw: motif_metrics.span_f1(_tuples(true_spans), _tuples(pred_spans), **kw),
    "span_overlap_f1": lambda true_spans, pred_spans, **kw: motif_metrics.span_overlap_f1(
        _tuples(true_spans), _tuples(pred_spans), **kw
    ),
    "per_base_f1": motif_metrics.per_base_f1,
    "dialogue_act_f1": dialogue_metrics.dialogue_act_f1,
    "intent_accuracy": dialogue_metrics.intent_accuracy,
    "ranking_metrics": ranking.ranking_metrics,
    "rouge": rouge.rouge,
    "rouge_per_example": lambda **kw: {k: v.tolist() for k, v in rouge.rouge_per_example(**kw).items()},
    "tag_metrics": lambda logits, labels, config: tag_metrics(
        np.asarray(logits), np.asarray(labels), SimpleNamespace(**{**config, "id2label": _int_keys(config["id2label"])})
    ),
    "sequence_metrics": lambda logits, labels, sequence_task: sequence_metrics(
        np.asarray(logits), np.asarray(labels), sequence_task
    ),
    "ranking_scores": lambda scores, labels: ranking_scores(scores, labels),
    "_from_labels": lambda threshold, **arrays: _from_labels(
        **{k: np.asarray(v) for k, v in arrays.items()}, threshold=threshold
    ),
}  # fmt: skip


def _tuples(batch):
    return [[tuple(s) for s in seq] for seq in batch]


def _int_keys(d):
    return {int(k): v for k, v in d.items()}


@pytest.mark.parametrize("group, index, case", CASES, ids=IDS)
def test_function_gives_the_recorded_figures(group, index, case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = FUNCTIONS[case["fn"]](**case["args"], **case["kwargs"])
    assert_same(got, case["out"])


def _module_call(case):
    """(module name, config name, compute keywords) of a case, or None when no module covers it."""
    fn, a, kw = case["fn"], case["args"], case["kwargs"]
    if fn in ("span_f1", "span_overlap_f1"):
        return (
            fn,
            None,
            {"predictions": span_dicts(a["pred_spans"]), "references": span_dicts(a["true_spans"]), **kw},
        )
    if fn == "per_base_f1":
        return fn, None, {"predictions": a["pred_tags"], "references": a["true_tags"], **kw}
    if fn == "dialogue_act_f1":
        rows = [v for row in a["true_acts"] for v in row]
        config = "multilabel" if rows and isinstance(rows[0], bool) else None
        return fn, config, {"predictions": a["pred_acts"], "references": a["true_acts"], **kw}
    if fn == "intent_accuracy":
        return (
            fn,
            None,
            {"predictions": a["pred"], "references": a["gold"], "seen_intents": a["seen_intents"]},
        )
    if fn == "ranking_metrics":
        positive = a.get("positive_index", 0)
        refs = positive if isinstance(positive, list) else [positive] * len(a["scores"])
        return "ranking", None, {"predictions": a["scores"], "references": refs, **kw}
    if fn == "rouge":
        return "rouge", None, {"predictions": a["predictions"], "references": a["references"], **kw}
    return None


MODULE_CASES = [(g, i, c) for g, i, c in CASES if _module_call(c) is not None]


@pytest.mark.parametrize(
    "group, index, case", MODULE_CASES, ids=[f"{g}-{i}-{c['fn']}" for g, i, c in MODULE_CASES]
)
def test_evaluate_module_gives_the_recorded_figures(group, index, case):
    name, config, kwargs = _module_call(case)
    assert_same(metrics.load(name, config).compute(**kwargs), case["out"])


def test_every_module_is_checked_against_the_reference():
    assert {_module_call(c)[0] for _, _, c in MODULE_CASES} == set(metrics.MODULES)
