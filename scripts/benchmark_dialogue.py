#!/usr/bin/env python
"""Dialogue benchmark: train the tiny SGD recipes on CPU and write ``benchmarks/dialogue.{md,json}``.

Runs ``pipelines/dialogue/tiny-tracking.yaml`` (per-turn acts, active intents) and then
``pipelines/dialogue/tiny-selection.yaml`` (response selection, 9 negatives from other dialogues; it starts
from the tracking model's encoder), records their test metrics, the long-history check (last turn of each
test dialogue: full history vs only its last 2 turns) and the wall times, and writes a Markdown table with
the targets next to the results. Nothing is hard-coded: every number comes from the runs' ``all_results.json``.

Examples::

    OMP_NUM_THREADS=1 nice -n 10 python scripts/benchmark_dialogue.py            # train both, write the files
    python scripts/benchmark_dialogue.py --skip-training                         # re-read finished runs
    python scripts/benchmark_dialogue.py --override num_train_epochs=1 --out /tmp/dialogue
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"recall@1": 0.6, "act_macro_f1": 0.8, "intent_accuracy_seen": 0.8}


def random_ranking(candidates: int) -> dict[str, float]:
    """Expected recall@1/2/5 and MRR of a random order of ``candidates`` (one of them true)."""
    recall = {f"recall@{k}": min(k, candidates) / candidates for k in (1, 2, 5)}
    return {**recall, "mrr": sum(1 / k for k in range(1, candidates + 1)) / candidates}


def _candidates(selection: dict) -> int:
    """Candidates per evaluation example of the selection run: its recipe's ``n_negatives`` (or the default)
    + 1."""
    from hf_sparse.tasks.dialogue.task import SelectionArguments

    default = SelectionArguments.__dataclass_fields__["n_negatives"].default
    return selection["recipe"].get("values", {}).get("n_negatives", default) + 1


def _data(results: dict) -> str:
    """The data folder of a run and its dialogues per split, from its results (``extras.data``)."""
    data_dir = results["recipe"].get("values", {}).get("data_dir")
    where = (
        f"`{os.path.relpath(data_dir, REPO)}`" if data_dir else "a data folder not recorded in the results"
    )
    counts = results["extras"].get("data", {}).get("dialogues")
    if not counts:
        return f"{where} (dialogue counts not recorded)"
    return f"{where} ({' / '.join(f'{n:,} {split}' for split, n in counts.items())} dialogues)"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Train the tiny dialogue recipes and write benchmarks/dialogue.*"
    )
    parser.add_argument(
        "--tracking-recipe",
        default=str(REPO / "pipelines/dialogue/tiny-tracking.yaml"),
        help="Recipe of the tracking run (trained first).",
    )
    parser.add_argument(
        "--selection-recipe",
        default=str(REPO / "pipelines/dialogue/tiny-selection.yaml"),
        help="Recipe of the response-selection run (trained second; its model_name_or_path may point at the "
        "tracking run's output_dir).",
    )
    parser.add_argument(
        "--out", default=str(REPO / "benchmarks/dialogue"), help="Output path without suffix (.md and .json)."
    )
    parser.add_argument(
        "--skip-training",
        action="store_true",
        help="Do not train: read the all_results.json the recipes' output_dirs already hold.",
    )
    parser.add_argument(
        "--override",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="Overrides applied to both recipes (e.g. num_train_epochs=1).",
    )
    return parser.parse_args(argv)


def _results(recipe: str, overrides: list[str], skip: bool) -> dict:
    from hf_sparse.training import run
    from hf_sparse.training.recipe import load_recipe

    _, _, training_args = load_recipe(recipe, overrides)
    path = Path(training_args.output_dir) / "all_results.json"
    if skip:
        if not path.is_file():
            raise FileNotFoundError(f"--skip-training: {path} does not exist; train {recipe} first")
        return json.loads(path.read_text())
    started = time.perf_counter()
    results = run(recipe, overrides)
    results["benchmark_wall_time_s"] = time.perf_counter() - started
    return results


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _check(value, target) -> str:
    return "yes" if value >= target else "**no**"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def _machine() -> dict:
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def write_report(tracking: dict, selection: dict, out: str, command: str) -> dict:
    """Write ``<out>.json`` and ``<out>.md`` from the two runs' results; returns the JSON dict."""
    t, s = tracking, selection
    t_long, s_long = t["extras"].get("long_history", {}), s["extras"].get("long_history", {})
    n = _candidates(s)
    random = random_ranking(n)
    acts = t["extras"].get("data", {}).get("acts")
    t_data, s_data = _data(t), _data(s)
    data = t_data if t_data == s_data else f"{t_data} (tracking) and {s_data} (selection)"
    report = {
        "command": command,
        "machine": _machine(),
        "selection": {k: s.get(f"test_{k}") for k in ("recall@1", "recall@2", "recall@5", "mrr")},
        "selection_validation": {k: s.get(f"eval_{k}") for k in ("recall@1", "recall@2", "recall@5", "mrr")},
        "tracking": {
            k: t.get(f"test_{k}")
            for k in (
                "act_micro_f1",
                "act_macro_f1",
                "intent_accuracy",
                "intent_accuracy_seen",
                "intent_accuracy_unseen",
                "n_intent_seen",
                "n_intent_unseen",
            )  # fmt: skip
        },
        "tracking_validation": {
            k: t.get(f"eval_{k}") for k in ("act_micro_f1", "act_macro_f1", "intent_accuracy_seen")
        },
        "long_history": {"selection": s_long, "tracking": t_long},
        "wall_time_s": {"tracking": t.get("wall_time_s"), "selection": s.get("wall_time_s")},
        "candidates": n,
        "random": random,
        "runs": {
            name: {
                "recipe": r["recipe"]["source"],
                "output_dir": r["output_dir"],
                "overrides": r["recipe"]["overrides"],
                "num_parameters": r["num_parameters"],
                "global_step": r["global_step"],
                "epochs": r["epoch"],
                "train_runtime_s": r.get("train_runtime"),
            }
            for name, r in (("tracking", t), ("selection", s))
        },
        "targets": TARGETS,
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    from hf_sparse.utils.io import atomic_write

    atomic_write(f"{out}.json", json.dumps(report, indent=2) + "\n")

    sel, trk, m = report["selection"], report["tracking"], report["machine"]
    lines = [
        "# Dialogue: response selection and per-turn act / intent tracking on Schema-Guided Dialogue",
        "",
        "Small randomly initialised encoders with Longformer attention (no pretrained weights; a word-level "
        "tokenizer built from the training turns; the recipes name the backbone) trained on CPU on the "
        f"dialogues in {data}. Test split results.",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {m['cpu']}, {m['cpu_count']} cores, torch {m['torch']} ({m['torch_threads']} threads), "
        f"transformers {m['transformers']}.",
        "",
        "## Results (test)",
        "",
        "| metric | result | target | met | random |",
        "|---|---|---|---|---|",
        f"| R{n}@1 (1 true + {n - 1} responses of other dialogues) | {_fmt(sel['recall@1'])} | >= 0.6 | "
        f"{_check(sel['recall@1'], 0.6)} | {random['recall@1']:.3f} |",
        f"| R{n}@2 | {_fmt(sel['recall@2'])} | | | {random['recall@2']:.3f} |",
        f"| R{n}@5 | {_fmt(sel['recall@5'])} | | | {random['recall@5']:.3f} |",
        f"| MRR | {_fmt(sel['mrr'])} | | | {random['mrr']:.3f} |",
        f"| per-turn act micro-F1 | {_fmt(trk['act_micro_f1'])} | | | |",
        f"| per-turn act macro-F1{f' ({acts} acts)' if acts else ''} | {_fmt(trk['act_macro_f1'])} | >= 0.8 | "
        f"{_check(trk['act_macro_f1'], 0.8)} | |",
        f"| intent accuracy, intents seen in training ({trk['n_intent_seen']} user turns) | "
        f"{_fmt(trk['intent_accuracy_seen'])} | >= 0.8 | {_check(trk['intent_accuracy_seen'], 0.8)} | |",
        f"| intent accuracy, intents unseen in training ({trk['n_intent_unseen']} user turns) | "
        f"{_fmt(trk['intent_accuracy_unseen'])} | reported | | |",
        "",
        "Tracking is evaluated online: the acts and intent of turn t are predicted from turns 0..t only "
        "(`eval_mode: prefix`). Unseen intents belong to services absent from training; a closed-set intent "
        "classifier cannot name them, so their accuracy is 0 by construction.",
        "",
        "## Long-history check (test, last turn of each dialogue)",
        "",
        "The same model, the same candidates; the history is either the whole dialogue before the turn or only "
        "its last 2 turns.",
        "",
        "| task | metric | full history | last 2 turns | dialogues |",
        "|---|---|---|---|---|",
    ]
    for key, label in (("recall@1", f"R{n}@1"), ("mrr", "MRR")):
        if s_long:
            lines.append(
                f"| response selection: last response | {label} | {_fmt(s_long['full_history'][key])} | "
                f"{_fmt(s_long['last_2_turns'][key])} | {s_long['full_history']['n']} |"
            )
    for key, label in (("intent_accuracy_seen", "intent accuracy (seen)"), ("act_macro_f1", "act macro-F1"),
                       ("act_micro_f1", "act micro-F1")):  # fmt: skip
        if t_long and key in t_long["full_history"]:
            lines.append(
                f"| tracking: last user turn | {label} | {_fmt(t_long['full_history'][key])} | "
                f"{_fmt(t_long['last_2_turns'][key])} | {t_long['full_history']['n']} |"
            )
    lines += [
        "",
        "## Runs",
        "",
        "| run | recipe | parameters | epochs | steps | wall time (training + evaluation) |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("tracking", "selection"):
        r = report["runs"][name]
        wall = report["wall_time_s"][name]
        lines.append(
            f"| {name} | `{os.path.relpath(r['recipe'], REPO)}` | {r['num_parameters']:,} | {_fmt(r['epochs'])} | "
            f"{r['global_step']} | {_minutes(wall) if wall else '-'} |"
        )
    lines += [
        "",
        f"Validation (per-epoch model selection is not used; the last epoch is reported): R{n}@1 "
        f"{_fmt(report['selection_validation']['recall@1'])}, act macro-F1 "
        f"{_fmt(report['tracking_validation']['act_macro_f1'])}, seen-intent accuracy "
        f"{_fmt(report['tracking_validation']['intent_accuracy_seen'])}.",
        "",
    ]
    from hf_sparse.utils.io import atomic_write

    atomic_write(f"{out}.md", "\n".join(lines))
    return report


def main(argv=None) -> int:
    args = parse_args(argv)
    command = " ".join(
        shlex.quote(a) for a in ["python", "scripts/benchmark_dialogue.py", *(argv or sys.argv[1:])]
    )
    tracking = _results(args.tracking_recipe, args.override, args.skip_training)
    selection = _results(args.selection_recipe, args.override, args.skip_training)
    report = write_report(tracking, selection, args.out, command)
    print(json.dumps({k: report[k] for k in ("selection", "tracking", "wall_time_s")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
