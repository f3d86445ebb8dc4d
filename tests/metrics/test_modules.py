"""The ``evaluate`` modules of ``hf_sparse/metrics/``: offline loading from a fresh cache, ``evaluate.combine``,
argument errors, and shipping in a wheel."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import hf_sparse.metrics as metrics

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPAN = [[{"type": "CTCF", "start": 3, "end": 9}], [{"type": "SP1", "start": 0, "end": 4}]]
SHIFTED = [[{"type": "CTCF", "start": 4, "end": 10}], []]

# Loads and computes every module in a process whose Hugging Face cache is empty and offline: evaluate reads
# HF_EVALUATE_OFFLINE / HF_HUB_OFFLINE when imported, so this needs its own process.
_LOAD_ALL = """
import json, sys
import hf_sparse.metrics as m
inputs = {
    "span_f1": dict(predictions=[[{"type": "A", "start": 0, "end": 2}]], references=[[{"type": "A", "start": 0, "end": 2}]]),
    "span_overlap_f1": dict(predictions=[[{"type": "A", "start": 1, "end": 3}]], references=[[{"type": "A", "start": 0, "end": 2}]]),
    "per_base_f1": dict(predictions=[["B-A", "I-A"]], references=[["B-A", "I-A"]]),
    "dialogue_act_f1": dict(predictions=[["INFORM"]], references=[["INFORM"]]),
    "intent_accuracy": dict(predictions=["x"], references=["x"], seen_intents=["x"]),
    "ranking": dict(predictions=[[2.0, 1.0]], references=[0], ks=[1]),
    "rouge": dict(predictions=["the cat sat"], references=[["the cat sat", "a dog"]]),
}
out = {name: m.load(name).compute(**inputs[name]) for name in m.MODULES}
json.dump({k: v.get("f1", v.get("all", v.get("micro", v.get("mrr", v.get("rouge1"))))) for k, v in out.items()}, sys.stdout)
"""


def _run_offline(tmp_path, code, pythonpath=None):
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf_home"),
        "HF_HUB_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    env.pop("HF_HUB_CACHE", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)


def test_every_module_loads_and_computes_offline_in_a_fresh_cache(tmp_path):
    proc = _run_offline(tmp_path, _LOAD_ALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == '{"dialogue_act_f1": 1.0, "intent_accuracy": 1.0, "per_base_f1": 1.0, "ranking": 1.0, "rouge": 1.0, "span_f1": 1.0, "span_overlap_f1": 1.0}'  # fmt: skip
    assert not os.path.exists(tmp_path / "hf_home" / "hub"), (
        "loading a local module must not touch the Hub cache"
    )


def test_modules_combine_with_evaluate_combine():
    import evaluate

    combined = evaluate.combine([metrics.load("span_f1"), metrics.load("span_overlap_f1")])
    out = combined.compute(predictions=SHIFTED, references=SPAN)
    assert out["span_f1_f1"] == 0.0  # no span matches exactly
    assert out["span_overlap_f1_precision"] == 1.0  # the one prediction overlaps its true span
    assert out["span_overlap_f1_recall"] == 0.5  # one of two true spans is hit
    assert out["span_f1_n_true"] == out["span_overlap_f1_n_true"] == 2


def test_modules_accumulate_batches():
    metric = metrics.load("ranking")
    metric.add_batch(predictions=[[0.9, 0.1]], references=[0])
    metric.add_batch(predictions=[[0.9, 0.1]], references=[1])
    assert metric.compute(ks=[1]) == {"r@1": 0.5, "mrr": 0.75}


def test_intent_accuracy_skips_a_none_reference_first():
    want = {"all": 0.5, "seen": 0.5, "unseen": float("nan"), "n_seen": 2, "n_unseen": 0}
    kwargs = dict(predictions=["x", "A", "B"], references=[None, "A", "A"], seen_intents=["A"])
    assert metrics.load("intent_accuracy").compute(**kwargs) == pytest.approx(want, nan_ok=True)
    metric = metrics.load("intent_accuracy")
    metric.add_batch(predictions=["x"], references=[None])
    metric.add_batch(predictions=["A", "B"], references=["A", "A"])
    assert metric.compute(seen_intents=["A"]) == pytest.approx(want, nan_ok=True)
    metric = metrics.load("intent_accuracy")
    for prediction, reference in zip(kwargs["predictions"], kwargs["references"]):
        metric.add(prediction=prediction, reference=reference)
    assert metric.compute(seen_intents=["A"]) == pytest.approx(want, nan_ok=True)


def test_dialogue_act_f1_multilabel_configuration_equals_act_names():
    names = metrics.load("dialogue_act_f1").compute(
        predictions=[["INFORM"], ["REQUEST"]], references=[["INFORM", "REQUEST"], ["REQUEST"]]
    )
    rows = metrics.load("dialogue_act_f1", "multilabel").compute(
        predictions=[[1, 0], [0, 1]], references=[[1, 1], [0, 1]], labels=["INFORM", "REQUEST"]
    )
    assert rows == names


@pytest.mark.parametrize(
    "rows",
    [
        [[2, 0]],  # a count
        [[1, -100]],  # label padding
        [[0.7, 0.2]],  # probabilities (an int feature truncated them to 0)
        [[-3.2, 1.5]],  # logits (bool() made them 1)
        [[1, 0], [0.5, 1]],  # in a later row
    ],
)
@pytest.mark.parametrize("column", ["predictions", "references"])
def test_dialogue_act_f1_multilabel_rejects_values_other_than_0_and_1(rows, column):
    inputs = {"predictions": [[1, 0]] * len(rows), "references": [[1, 0]] * len(rows), column: rows}
    bad = next(i for i, row in enumerate(rows) if row != [1, 0])
    with pytest.raises(
        ValueError, match=rf"{column}\[{bad}\] must contain only 0 and 1 \(or booleans\), got \["
    ):
        metrics.load("dialogue_act_f1", "multilabel").compute(**inputs, labels=["INFORM", "REQUEST"])


def test_dialogue_act_f1_multilabel_takes_bools_floats_and_tensors_of_0_and_1():
    import torch

    metric = metrics.load("dialogue_act_f1", "multilabel")
    want = metric.compute(predictions=[[1, 0], [0, 1]], references=[[1, 1], [0, 1]])
    assert want["micro"] == pytest.approx(0.8)
    for predictions in ([[True, False], [False, True]], [[1.0, 0.0], [0.0, 1.0]], torch.eye(2)):
        assert metric.compute(predictions=predictions, references=[[1, 1], [0, 1]]) == want
    with pytest.raises(ValueError, match=r"predictions\[1\] has 3 columns, predictions\[0\] has 2"):
        metric.compute(predictions=[[1, 0], [0, 1, 0]], references=[[1, 1], [0, 1]])


_STR_ROW = {  # (module, good row, the same row as one str: evaluate split it into characters)
    "dialogue_act_f1": (["REQUEST"], "REQUEST"),
    "per_base_f1": (["O", "O"], "OO"),
    "span_f1": ([{"type": "A", "start": 0, "end": 2}], "A02"),
    "ranking": ([0.1, 0.9], "19"),
}


@pytest.mark.parametrize("name", list(_STR_ROW))
@pytest.mark.parametrize("column", ["predictions", "references"])
def test_a_str_where_a_list_is_expected_raises_naming_its_row(name, column):
    """evaluate checks only a column's first row: a str in a later one was split into characters."""
    if name == "ranking" and column == "references":
        pytest.skip("ranking's references are indices")
    good, bad = _STR_ROW[name]
    refs = [0, 1] if name == "ranking" else [good, good]
    inputs = {"predictions": [good, good], "references": refs}
    inputs[column] = [good, bad]
    with pytest.raises(TypeError, match=rf"{column}\[1\] must be a list.*, got '{bad}'"):
        metrics.load(name).compute(**inputs)
    metric = metrics.load(name)  # in a later batch, and with add()
    metric.add_batch(**{k: v[:1] for k, v in inputs.items()})
    with pytest.raises(TypeError, match=rf"{column}\[0\] must be a list.*, got '{bad}'"):
        metric.add_batch(**{k: v[1:] for k, v in inputs.items()})
    with pytest.raises(TypeError, match=rf"{column[:-1]} must be a list.*, got '{bad}'"):
        metric.add(**{k[:-1]: v[1] for k, v in inputs.items()})


def test_rows_of_the_wrong_type_raise_naming_them():
    with pytest.raises(TypeError, match=r"predictions\[1\]\[1\] must be a str, got 5"):
        metrics.load("per_base_f1").compute(predictions=[["O"], ["O", 5]], references=[["O"], ["O", "O"]])
    with pytest.raises(TypeError, match=r"references\[1\] must be an int, got 1.5"):
        metrics.load("ranking").compute(predictions=[[0.1, 0.2], [0.1, 0.2]], references=[0, 1.5])


def _span(start=3, end=9, **fields):
    return {"type": "CTCF", "start": start, "end": end, **fields}


@pytest.mark.parametrize("name", ["span_f1", "span_overlap_f1"])
def test_span_modules_match_on_strand_as_the_task_functions_do(name):
    from hf_sparse.tasks.motif import metrics as motif

    cases = [
        ([_span(strand="+")], [_span(strand="+")]),
        ([_span(strand="-")], [_span(strand="+")]),
        ([_span()], [_span(strand="+")]),
        ([_span(strand="+"), _span(20, 30)], [_span(4, 9, strand="+"), _span(21, 30)]),
    ]
    for predictions, references in cases:
        got = metrics.load(name).compute(predictions=[predictions], references=[references])
        tuples = [[tuple(s.values()) for s in spans] for spans in (references, predictions)]
        assert got == getattr(motif, name)(*tuples)
    assert metrics.load(name).compute(predictions=[cases[1][0]], references=[cases[1][1]])["f1"] == 0.0


@pytest.mark.parametrize(
    "span, error, match",
    [
        (_span(end=9.7), TypeError, r"predictions\[0\]\[0\]\['end'\] must be an int, got 9.7"),
        (_span(start=True), TypeError, r"predictions\[0\]\[0\]\['start'\] must be an int, got True"),
        ({"type": "CTCF", "start": 3}, ValueError, r"predictions\[0\]\[0\] has no 'end' field"),
        (_span(score=0.9), ValueError, r"predictions\[0\]\[0\] has unknown field 'score'"),
        (_span(strand=1), TypeError, r"predictions\[0\]\[0\]\['strand'\] must be a str, got 1"),
        (("CTCF", 3, 9), TypeError, r"predictions\[0\]\[0\] must be a span dict"),
    ],
)
def test_span_modules_reject_bad_span_fields_naming_them(span, error, match):
    with pytest.raises(error, match=match):
        metrics.load("span_f1").compute(predictions=[[span]], references=[[_span()]])


def test_load_in_evaluate_distributed_mode(tmp_path):
    """num_process=2: each process adds its examples to a cache file, process 0 computes over all (here the two
    processes are threads). load kept every module in memory, which evaluate refuses with num_process > 1."""
    import threading

    inputs = {0: ([[_span(0, 2)]], [[_span(0, 2)]]), 1: ([[_span(5, 7)]], [[_span(1, 3)]])}
    out = {}

    def process(rank):
        metric = metrics.load(
            "span_f1", num_process=2, process_id=rank, cache_dir=str(tmp_path), experiment_id="t"
        )
        predictions, references = inputs[rank]
        metric.add_batch(predictions=predictions, references=references)
        out[rank] = metric.compute()

    threads = [threading.Thread(target=process, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    want = metrics.load("span_f1").compute(
        predictions=inputs[0][0] + inputs[1][0], references=inputs[0][1] + inputs[1][1]
    )
    assert out == {0: want, 1: None} and want["f1"] == 0.5


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: metrics.load("bleu"), ValueError, "unknown hf-sparse metric 'bleu'"),
        (lambda: metrics.module_path("rouge/../span_f1"), ValueError, "unknown hf-sparse metric"),
        (
            lambda: metrics.load("intent_accuracy").compute(predictions=["a"], references=["a"]),
            ValueError,
            "seen_intents",
        ),
        (
            lambda: metrics.load("ranking").compute(predictions=[[0.1, 0.2]], references=[2]),
            ValueError,
            "positive_index",
        ),
        (
            lambda: metrics.load("ranking").compute(
                predictions=[[0.1, 0.2], [0.1, 0.2, 0.3]], references=[0, 0]
            ),
            ValueError,
            r"predictions must hold the same number of candidate scores per example, got lengths \[2, 3\]",
        ),
        (
            lambda: metrics.load("intent_accuracy").compute(
                predictions=["a"], references=[["a"]], seen_intents=["a"]
            ),
            TypeError,
            r"references\[0\] must be a str, got \['a'\]",
        ),
        (
            lambda: metrics.load("span_f1").compute(
                predictions=[[{"type": "A", "start": 5, "end": 2}]], references=[[]]
            ),
            ValueError,
            "start >= end",
        ),
    ],
)
def test_bad_arguments_raise_naming_them(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("name", metrics.MODULES)
def test_load_refuses_an_unknown_configuration(name):
    """evaluate takes any config_name: a typo ("multi_label") silently loaded the default."""
    valid = ["default", "multilabel"] if name == "dialogue_act_f1" else ["default"]
    for config_name in valid:
        assert metrics.load(name, config_name).config_name == config_name
    match = re.escape(f"config_name must be one of {valid} for the {name} metric, got 'multi_label'")
    with pytest.raises(ValueError, match=match):
        metrics.load(name, "multi_label")


def _source_modules(root):
    """The package's .py files as a wheel names them (``model_cards/`` ships as ``hf_sparse.model_cards``)."""
    names = {p.relative_to(root).as_posix() for p in (root / "hf_sparse").rglob("*.py")}
    return names | {f"hf_sparse/model_cards/{p.name}" for p in (root / "model_cards").glob("*.py")}


@pytest.mark.slow
def test_wheel_ships_the_modules_and_they_load_from_the_install(tmp_path):
    """Build the wheel, check the module scripts are in it, and load them from an install of it (offline).

    It builds from a copy of the source tree: setuptools' build/lib (in the tree it builds) only ever grows, so a
    wheel built in the repository would also ship modules deleted since an earlier build (and leave build/
    there); the wheel holds exactly the source's modules."""
    src = tmp_path / "src"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(".*", "build", "dist", "outputs", "*.egg-info", "__pycache__"),
    )
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(src),
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("hf_sparse-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"hf_sparse/metrics/{m}/{m}.py" for m in metrics.MODULES} <= names
    assert {n for n in names if n.endswith(".py")} == _source_modules(Path(REPO))
    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    code = (
        f"import hf_sparse.metrics as m; assert m.__file__.startswith({str(target)!r}), m.__file__\n"
        + _LOAD_ALL
    )
    proc = _run_offline(tmp_path, code, pythonpath=str(target))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"rouge": 1.0' in proc.stdout
