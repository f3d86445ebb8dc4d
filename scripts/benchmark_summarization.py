"""Extractive long-document summarization: Lead-3, Random-3, the greedy oracle and a trained tiny model.

For each dataset (ScisummNet papers, QMSum meetings; their ``test`` splits):

1. baselines with ``hf_sparse.metrics``: Lead-3 (first 3 sentences), Random-3 (3 sentences drawn with
   ``seed=0``, in document order) and the greedy ROUGE-2 oracle (3 sentences chosen *with* the reference:
   an upper bound for 3-sentence extracts);
2. trains ``pipelines/summarization/tiny-extractive.yaml`` on the dataset's train split (``data_dir`` and
   ``output_dir`` overridden, plus ``--override`` values), in this process, timing wall clock and CPU time;
3. summarizes every test document through ``pipeline("long-document-summarization")`` with the trained
   folder (3 sentences, the same budget as the baselines).

ROUGE-1/2/L/Lsum F-measures (``hf_sparse.tasks.summarization.rouge``: rouge_score with stemming, our sentence
splitter for Lsum). Writes ``<out>.json`` and ``<out>.md``.

    nice -n 10 python scripts/benchmark_summarization.py        # -> benchmarks/summarization.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATASETS = ("scisummnet", "qmsum")
ROUGE_KEYS = ("rouge1", "rouge2", "rougeL", "rougeLsum")
BUDGET = 3


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), help="Dataset folders under --data-root.")
    p.add_argument(
        "--data-root",
        default=os.path.join(ROOT, "..", "shared", "data", "summarization"),
        help="Folder holding <dataset>/{train,validation,test}.jsonl.",
    )
    p.add_argument(
        "--recipe",
        default=os.path.join(ROOT, "pipelines", "summarization", "tiny-extractive.yaml"),
        help="Extractive recipe to train.",
    )
    p.add_argument(
        "--override", nargs="*", default=[], metavar="KEY=VALUE", help="Recipe overrides for every dataset."
    )
    p.add_argument(
        "--dataset-override",
        nargs="*",
        default=[],
        metavar="DATASET:KEY=VALUE",
        help="Recipe overrides for one dataset, e.g. qmsum:num_train_epochs=1.",
    )
    p.add_argument(
        "--output-dir",
        default=os.path.join(ROOT, "outputs", "bench-summarization"),
        help="Trained models go here.",
    )
    p.add_argument(
        "--out",
        default=os.path.join(ROOT, "benchmarks", "summarization"),
        help="Result path without extension.",
    )
    p.add_argument("--skip-training", action="store_true", help="Reuse the trained folders in --output-dir.")
    return p.parse_args(argv)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _scores(predictions, references) -> dict:
    from hf_sparse.tasks.summarization.rouge import rouge

    return {k: round(v, 4) for k, v in rouge(predictions, references).items()}


def baselines(rows) -> dict:
    from hf_sparse.tasks.summarization.metrics import greedy_oracle, lead_k, random_k
    from hf_sparse.tasks.summarization.sentences import split_sentences

    sentences = [split_sentences(r["document"]) for r in rows]
    refs = [r["references"] for r in rows]
    methods = {
        "Lead-3": lambda s, ref: lead_k(s, BUDGET),
        "Random-3 (seed 0)": lambda s, ref: random_k(s, BUDGET, seed=0),
        "Oracle-3 (greedy ROUGE-2, uses the reference)": lambda s, ref: [
            s[i] for i in greedy_oracle(s, ref, BUDGET, "rouge2")
        ],
    }
    out = {}
    for name, pick in methods.items():
        start = time.perf_counter()
        preds = [" ".join(" ".join(x.split()) for x in pick(s, ref)) for s, ref in zip(sentences, refs)]
        out[name] = {**_scores(preds, refs), "wall_s": round(time.perf_counter() - start, 2)}
    return out


def train(dataset: str, args) -> tuple[str, dict]:
    from hf_sparse.training import run

    folder = os.path.join(args.output_dir, dataset)
    overrides = [f"data_dir={os.path.abspath(os.path.join(args.data_root, dataset))}", f"output_dir={folder}",
                 "overwrite_output_dir=true", *args.override]  # fmt: skip
    overrides += [o.split(":", 1)[1] for o in args.dataset_override if o.split(":", 1)[0] == dataset]
    if args.skip_training:
        with open(os.path.join(folder, "all_results.json")) as f:
            results = json.load(f)
        return folder, {"overrides": overrides, "reused": True, **_training_summary(results)}
    wall, cpu = time.perf_counter(), _cpu_seconds()
    results = run(args.recipe, overrides)
    return folder, {
        "overrides": overrides,
        "wall_s": round(time.perf_counter() - wall, 1),
        "cpu_s": round(_cpu_seconds() - cpu, 1),
        **_training_summary(results),
    }


def _training_summary(results: dict) -> dict:
    keep = (
        "train_runtime",
        "global_step",
        "epoch",
        "num_parameters",
        "test_rouge1",
        "test_rouge2",
        "test_rougeL",
    )
    return {k: results[k] for k in keep if k in results}


def summarize(folder: str, rows) -> dict:
    from transformers import pipeline

    import hf_sparse  # noqa: F401  (registers the pipeline task)

    pipe = pipeline("long-document-summarization", model=folder, trust_remote_code=True)
    start, cpu = time.perf_counter(), _cpu_seconds()
    outputs = [pipe(r["document"], max_sentences=BUDGET) for r in rows]
    scores = _scores([o["summary_text"] for o in outputs], [r["references"] for r in rows])
    return {
        **scores,
        "wall_s": round(time.perf_counter() - start, 2),
        "cpu_s": round(_cpu_seconds() - cpu, 2),
        "mean_chunks": round(sum(o["chunks"] for o in outputs) / len(outputs), 2),
        "mean_sentences": round(sum(o["num_sentences"] for o in outputs) / len(outputs), 1),
    }


def write_markdown(result: dict, path: str) -> None:
    lines = [
        "# Extractive long-document summarization: tiny model vs Lead-3, Random-3, Oracle",
        "",
        f"Command: `{result['command']}`  ",
        f"Machine: {result['machine']}  ",
        f"Total wall time: {result['wall_s'] / 60:.1f} min. Produced by `scripts/benchmark_summarization.py`.",
        "",
        "Every method picks **3 sentences** per test document (in document order); ROUGE F-measures of",
        "`hf_sparse.tasks.summarization.rouge` (rouge_score, Porter stemming; ROUGE-Lsum on our sentence splitter).",
        "The oracle sees the reference (an upper bound for 3-sentence extracts); the model does not.",
        "",
    ]
    for ds, r in result["datasets"].items():
        t = r["training"]
        lines += [f"## {ds} (test split, {r['documents']} documents)", "",
                  "| method | ROUGE-1 | ROUGE-2 | ROUGE-L | ROUGE-Lsum | wall time |", "|---|---|---|---|---|---|"]  # fmt: skip
        for name, s in r["baselines"].items():
            lines.append(f"| {name} | {s['rouge1']:.4f} | {s['rouge2']:.4f} | {s['rougeL']:.4f} | "
                         f"{s['rougeLsum']:.4f} | {s['wall_s']:.1f} s |")  # fmt: skip
        m = r["model"]
        lines.append(f"| **tiny-extractive model** (pipeline) | {m['rouge1']:.4f} | **{m['rouge2']:.4f}** | "
                     f"{m['rougeL']:.4f} | {m['rougeLsum']:.4f} | {m['wall_s']:.1f} s |")  # fmt: skip
        lead = r["baselines"]["Lead-3"]["rouge2"]
        verdict = "beats" if m["rouge2"] > lead else "does **not** beat"
        train_time = (
            f"trained in {t['wall_s'] / 60:.1f} min wall clock, {t['cpu_s'] / 60:.1f} min CPU time "
            f"({t.get('global_step')} steps, {t.get('num_parameters')} parameters)"
            if not t.get("reused")
            else "reused a trained folder"
        )
        lines += [
            "",
            f"The model {verdict} Lead-3 on ROUGE-2 ({m['rouge2']:.4f} vs {lead:.4f}); {train_time}. Overrides: "
            f"`{' '.join(t['overrides'][1:])}`. Test documents were encoded in {m['mean_chunks']} chunks on "
            f"average ({m['mean_sentences']} sentences each), every sentence scored.",
            "",
        ]
    lines += result.get("notes", [])
    from hf_sparse.utils.io import atomic_write

    atomic_write(path, "\n".join(lines).rstrip() + "\n")


def main(argv=None) -> int:
    args = parse_args(argv)
    from hf_sparse.tasks.summarization.data import load_summarization_examples

    started = time.perf_counter()
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    import torch

    result = {
        "command": (
            f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} " if "OMP_NUM_THREADS" in os.environ else ""
        )
        + "python scripts/benchmark_summarization.py "
        + " ".join(map(shlex.quote, argv or sys.argv[1:])),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), load average {load:.1f} at the start (shared machine)",
        "datasets": {},
    }
    for ds in args.datasets:
        rows = list(load_summarization_examples(os.path.join(args.data_root, ds, "test.jsonl")))
        entry = {"documents": len(rows), "baselines": baselines(rows)}
        print(ds, json.dumps(entry["baselines"]), flush=True)
        folder, entry["training"] = train(ds, args)
        entry["model"] = summarize(folder, rows)
        print(ds, json.dumps(entry["model"]), json.dumps(entry["training"]), flush=True)
        result["datasets"][ds] = entry
    result["wall_s"] = round(time.perf_counter() - started, 1)
    beats = [
        ds
        for ds, e in result["datasets"].items()
        if e["model"]["rouge2"] > e["baselines"]["Lead-3"]["rouge2"]
    ]
    result["beats_lead3_rouge2"] = beats
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    from hf_sparse.utils.io import atomic_write

    atomic_write(args.out + ".json", json.dumps(result, indent=2))
    write_markdown(result, args.out + ".md")
    print(f"wrote {args.out}.json and {args.out}.md ({result['wall_s'] / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
