"""Record the figures of hf-sparse's metric functions on fixed, seeded inputs (``reference.json``).

Run once on the code before a metric is reimplemented (``reference.json`` was written at 164ebad, before
the metrics moved to ``evaluate`` modules and scikit-learn); ``tests/metrics/test_reference.py`` checks
that the current code gives the same figures (1e-12). Inputs are stored next to the outputs, so the test
does not depend on this file's random draws.

    .venv/bin/python tests/metrics/reference/record.py
"""

from __future__ import annotations

import json
import os
import warnings
from types import SimpleNamespace

import numpy as np

from hf_sparse.metrics.classification import accuracy, auroc, multilabel_f1, per_class_f1, precision_recall_f1
from hf_sparse.tasks.dialogue.metrics import dialogue_act_f1, intent_accuracy
from hf_sparse.tasks.dialogue.ranking import ranking_metrics
from hf_sparse.tasks.dialogue.task import _from_labels, ranking_scores
from hf_sparse.tasks.motif.metrics import per_base_f1, span_f1, span_overlap_f1
from hf_sparse.tasks.motif.task import sequence_metrics, tag_metrics
from hf_sparse.tasks.summarization.rouge import rouge, rouge_per_example

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(17)


def ints(n, k):
    return rng.integers(0, k, n).tolist()


def case(fn, args: dict, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = fn(**args, **kwargs)
    return {"fn": fn.__name__, "args": args, "kwargs": kwargs, "out": out}


def classification():
    y3, p3 = ints(60, 3), ints(60, 3)
    y2, p2 = ints(40, 2), ints(40, 2)
    strings_t = [["cat", "dog", "eel"][i] for i in ints(30, 3)]
    strings_p = [["cat", "dog", "eel"][i] for i in ints(30, 3)]
    out = [
        case(accuracy, {"y_true": y3, "y_pred": p3}),
        case(accuracy, {"y_true": strings_t, "y_pred": strings_p}),
    ]
    for average in ("binary", "macro", "micro", "weighted"):
        out.append(case(precision_recall_f1, {"y_true": y2, "y_pred": p2}, average=average))
        if average != "binary":
            out.append(case(precision_recall_f1, {"y_true": y3, "y_pred": p3}, average=average))
            out.append(case(precision_recall_f1, {"y_true": strings_t, "y_pred": strings_p}, average=average))
            # a label with no support and no prediction: zero division inside the average
            out.append(
                case(precision_recall_f1, {"y_true": y3, "y_pred": p3}, average=average, labels=[0, 1, 2, 5])
            )
    zeros = [0] * 10
    out += [
        case(
            precision_recall_f1, {"y_true": y2[:10], "y_pred": zeros}, average="binary"
        ),  # no predicted positive
        case(
            precision_recall_f1, {"y_true": zeros, "y_pred": zeros}, average="binary"
        ),  # nothing positive at all
        case(precision_recall_f1, {"y_true": zeros, "y_pred": zeros}, average="binary", zero_division=1.0),
        case(precision_recall_f1, {"y_true": y2, "y_pred": p2}, average="binary", pos_label=0),
        case(precision_recall_f1, {"y_true": y3, "y_pred": p3}, average="weighted", labels=[5, 6]),
        case(
            precision_recall_f1,
            {"y_true": y3, "y_pred": p3},
            average="weighted",
            labels=[5],
            zero_division=1.0,
        ),
        case(per_class_f1, {"y_true": y3, "y_pred": p3}),
        case(per_class_f1, {"y_true": strings_t, "y_pred": strings_p}),
        case(per_class_f1, {"y_true": y3, "y_pred": p3}, labels=[2, 0, 7]),
    ]
    mt = (rng.random((25, 5)) < 0.3).astype(int)
    mp = (rng.random((25, 5)) < 0.3).astype(int)
    mt[:, 4] = 0
    mp[:, 4] = 0  # a class absent from both: undefined F1, left out of macro
    mp[:, 3] = 0  # a class never predicted
    for average in ("micro", "macro"):
        out.append(case(multilabel_f1, {"y_true": mt.tolist(), "y_pred": mp.tolist()}, average=average))
        out.append(case(multilabel_f1, {"y_true": np.zeros((4, 3), int).tolist(), "y_pred": np.zeros((4, 3), int).tolist()}, average=average))  # fmt: skip
        out.append(case(multilabel_f1, {"y_true": np.zeros((4, 3), int).tolist(), "y_pred": np.zeros((4, 3), int).tolist()}, average=average, zero_division=1.0))  # fmt: skip
    out.append(case(per_class_f1, {"y_true": mt.tolist(), "y_pred": mp.tolist()}))
    out.append(case(per_class_f1, {"y_true": mt.tolist(), "y_pred": mp.tolist()}, labels=list("abcde")))
    scores = rng.random(50).tolist()
    labels = ints(50, 2)
    out += [
        case(auroc, {"labels": labels, "scores": scores}),
        case(auroc, {"labels": labels, "scores": np.round(scores, 1).tolist()}),  # ties
        case(auroc, {"labels": labels, "scores": [0.5] * 50}),  # all tied: 0.5
        case(auroc, {"labels": [1, 1, 0, 0], "scores": [0.9, 0.1, 0.9, 0.1]}),
        case(auroc, {"labels": [1] * 5, "scores": rng.random(5).tolist()}),  # one class: nan
    ]
    return out


def spans(n_seq=12, length=80, types=("CTCF", "SP1", "TP53")):
    def draw():
        out = []
        for _ in range(n_seq):
            seq = []
            for _ in range(int(rng.integers(0, 5))):
                a = int(rng.integers(0, length - 10))
                seq.append([types[int(rng.integers(0, len(types)))], a, a + int(rng.integers(1, 10))])
            out.append(seq)
        return out

    t = draw()
    p = [[list(s) for s in seq] for seq in t]  # predictions: the truth, jittered, dropped and with extras
    for seq in p:
        for s in seq:
            if rng.random() < 0.4:
                shift = int(rng.integers(-3, 4))
                s[1], s[2] = max(0, s[1] + shift), max(0, s[1] + shift) + (s[2] - s[1])
        if seq and rng.random() < 0.3:
            seq.pop()
        if rng.random() < 0.4:
            a = int(rng.integers(0, length - 10))
            seq.append([types[int(rng.integers(0, len(types)))], a, a + 5])
    if p[0]:
        p[0].append(list(p[0][0]))  # a duplicated prediction
    return t, p


def tuples(batch):
    return [[tuple(s) for s in seq] for seq in batch]


def span_cases():
    t, p = spans()
    empty = [[] for _ in t]
    out = []
    for fn in (span_f1, span_overlap_f1):
        # the functions take tuples; the recorded inputs are lists (JSON) and the test converts them back
        for true, pred, kwargs in (
            (t, p, {}),
            (t, empty, {}),  # empty predictions
            (empty, p, {}),
            (empty, empty, {}),  # nothing at all: zero division
            (empty, empty, {"zero_division": 1.0}),
        ):
            out.append(
                {
                    "fn": fn.__name__,
                    "args": {"true_spans": true, "pred_spans": pred},
                    "kwargs": kwargs,
                    "out": fn(tuples(true), tuples(pred), **kwargs),
                }
            )
    tags = ["O", "B-CTCF", "I-CTCF", "B-SP1", "I-SP1"]
    true_tags = [[tags[i] for i in rng.integers(0, 5, int(rng.integers(5, 40)))] for _ in range(10)]
    pred_tags = [[tags[i] if rng.random() < 0.3 else x for x, i in zip(seq, rng.integers(0, 5, len(seq)))] for seq in true_tags]  # fmt: skip
    out += [
        case(per_base_f1, {"true_tags": true_tags, "pred_tags": pred_tags}),
        case(per_base_f1, {"true_tags": true_tags, "pred_tags": [["O"] * len(s) for s in true_tags]}),
        case(per_base_f1, {"true_tags": [["O"] * 4], "pred_tags": [["O"] * 4]}),
        case(per_base_f1, {"true_tags": [["O"] * 4], "pred_tags": [["O"] * 4]}, zero_division=1.0),
    ]
    return out


def dialogue_cases():
    acts = ["INFORM", "REQUEST", "CONFIRM", "OFFER", "GOODBYE", "THANK_YOU"]

    def draw(n):
        return [sorted({acts[i] for i in rng.integers(0, 5, int(rng.integers(0, 3)))}) for _ in range(n)]

    t, p = draw(40), draw(40)
    mt = (rng.random((30, 6)) < 0.25).astype(int)
    mp = (rng.random((30, 6)) < 0.25).astype(int)
    mt[:, 5] = mp[:, 5] = 0
    intents = ["FindRestaurants", "BookHotel", "GetWeather", "PlayMusic"]
    gold = [intents[i] if i < 4 else None for i in rng.integers(0, 5, 50)]
    pred = [intents[i] for i in rng.integers(0, 4, 50)]
    pred = [g if g is not None and rng.random() < 0.6 else x for g, x in zip(gold, pred)]
    return [
        case(dialogue_act_f1, {"true_acts": t, "pred_acts": p}),
        case(dialogue_act_f1, {"true_acts": t, "pred_acts": p}, labels=acts),  # THANK_YOU never occurs: nan
        case(dialogue_act_f1, {"true_acts": t, "pred_acts": [[] for _ in t]}),  # empty predictions
        case(
            dialogue_act_f1,
            {"true_acts": mt.astype(bool).tolist(), "pred_acts": mp.astype(bool).tolist()},
            labels=acts,
        ),  # fmt: skip
        case(intent_accuracy, {"pred": pred, "gold": gold, "seen_intents": intents[:2]}),
        case(intent_accuracy, {"pred": pred, "gold": gold, "seen_intents": intents}),  # no unseen turn: nan
    ]


def ranking_cases():
    scores = rng.normal(size=(40, 10))
    tied = np.round(scores, 0)  # many ties, counted against the positive
    pos = rng.integers(0, 10, 40)
    return [
        case(ranking_metrics, {"scores": scores.tolist()}),
        case(ranking_metrics, {"scores": tied.tolist()}),
        case(ranking_metrics, {"scores": tied.tolist(), "positive_index": pos.tolist()}, ks=[1, 3, 10]),
        case(ranking_metrics, {"scores": np.zeros((5, 4)).tolist()}),  # all tied: rank n
    ]


def rouge_cases():
    words = "the cat sat on a mat while dogs were running in the park and birds sang loudly".split()

    def text(n_sent):
        return " ".join(
            " ".join(rng.choice(words, int(rng.integers(3, 10)))).capitalize() + "." for _ in range(n_sent)
        )

    preds = [text(int(rng.integers(1, 4))) for _ in range(8)] + [""]
    refs = [[text(int(rng.integers(1, 4))) for _ in range(int(rng.integers(1, 5)))] for _ in preds]
    refs[0] = [preds[0], text(2)]  # one reference equals the prediction
    refs[1] = [refs[1][0], refs[1][0]]  # tied references
    single = [r[0] for r in refs]
    return [
        case(rouge, {"predictions": preds, "references": refs}),
        case(rouge, {"predictions": preds, "references": refs}, precision_recall=True),
        case(rouge, {"predictions": preds, "references": single}),
        case(rouge, {"predictions": preds, "references": refs}, use_stemmer=False, sentence_split=False),
    ]


def rouge_per_example_cases():
    cases = rouge_cases()[:1]
    args = cases[0]["args"]
    out = rouge_per_example(**args)
    return [
        {
            "fn": "rouge_per_example",
            "args": args,
            "kwargs": {},
            "out": {k: v.tolist() for k, v in out.items()},
        }
    ]


def task_cases():
    """The tasks' Trainer metrics (keys and values) on seeded logits and labels."""
    tags = ["O", "B-CTCF", "I-CTCF", "B-SP1", "I-SP1"]
    id2label = dict(enumerate(tags))
    out = []
    labels = rng.integers(0, 5, (6, 30))
    labels[:, 0] = labels[:, -4:] = -100  # special tokens and padding
    logits = rng.normal(size=(6, 30, 5)) + 3 * np.eye(5)[np.clip(labels, 0, 4)] * (
        rng.random((6, 30, 1)) < 0.7
    )
    for decoding in ("bio", "fixed_length"):
        config = SimpleNamespace(
            id2label=id2label,
            motif_names=["CTCF", "SP1"],
            span_decoding=decoding,
            motif_lengths={"CTCF": 3, "SP1": 2},
        )
        out.append(
            {
                "fn": "tag_metrics",
                "args": {"logits": logits.tolist(), "labels": labels.tolist(), "config": vars(config)},
                "kwargs": {},
                "out": tag_metrics(logits, labels, config),
            }
        )
    for task, shape in (
        ("classification", (30, 2)),
        ("classification", (30, 3)),
        ("motif_presence", (30, 3)),
    ):
        x = rng.normal(size=shape)
        y = rng.integers(0, shape[1], shape[0]) if task == "classification" else rng.integers(0, 2, shape)
        if task == "motif_presence":
            y[:, 2] = 0  # one motif never present: its AUROC is undefined and left out
        out.append(
            {
                "fn": "sequence_metrics",
                "args": {"logits": x.tolist(), "labels": y.tolist(), "sequence_task": task},
                "kwargs": {},
                "out": sequence_metrics(x, y, task),
            }
        )
    scores, pos = rng.normal(size=(20, 6)), rng.integers(0, 6, 20)
    out.append({"fn": "ranking_scores", "args": {"scores": np.round(scores, 1).tolist(), "labels": pos.tolist()},
                "kwargs": {}, "out": ranking_scores(np.round(scores, 1), pos)})  # fmt: skip
    act_labels = (rng.random((4, 7, 5)) < 0.3).astype(int)
    act_labels[:, -2:] = -100
    intent_labels = rng.integers(0, 4, (4, 7))
    intent_labels[:, -2:] = -100
    act_logits, intent_logits = rng.normal(size=(4, 7, 5)), rng.normal(size=(4, 7, 4))
    args = {"act_logits": act_logits.tolist(), "intent_logits": intent_logits.tolist(),
            "act_labels": act_labels.tolist(), "intent_labels": intent_labels.tolist(), "threshold": 0.5}  # fmt: skip
    out.append({"fn": "_from_labels", "args": args, "kwargs": {},
                "out": _from_labels(act_logits, intent_logits, act_labels, intent_labels, 0.5)})  # fmt: skip
    return out


def main():
    data = {
        "rouge_per_example": rouge_per_example_cases(),
        "tasks": task_cases(),
        "classification": classification(),
        "spans": span_cases(),
        "dialogue": dialogue_cases(),
        "ranking": ranking_cases(),
        "rouge": rouge_cases(),
    }
    path = os.path.join(HERE, "reference.json")
    write(data, path)
    print(f"wrote {path}: {sum(len(v) for v in data.values())} cases")


def write(data: dict, path: str) -> None:
    """JSON with one case per line (Python's float repr round-trips exactly)."""

    def dump(x):
        return json.dumps(x, default=lambda v: v.item() if hasattr(v, "item") else str(v))

    groups = [f"{dump(g)}: [\n" + ",\n".join(dump(c) for c in cases) + "\n]" for g, cases in data.items()]
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(groups) + "\n}\n")


if __name__ == "__main__":
    main()
