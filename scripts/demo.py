#!/usr/bin/env python
"""The main job (``make demo``): fine-tune a DNA motif detector on CPU, evaluate it, reload it, use it.

1. Fine-tunes ``pipelines/motif/tiny.yaml`` (synthetic sequences with built-in JASPAR motifs planted
   in them; no download) with the recipe runner, which evaluates on the held-out validation and
   test splits and saves the model, tokenizer, remote code, model card and plots to
   ``outputs/motif-tiny/``.
2. Reloads the folder with ``AutoModel`` and ``pipeline()`` and prints the motifs detected in an
   example sequence longer than the model's window (so the pipeline windows it), next to the
   planted ones (a model without motifs, e.g. from a classification recipe, shows no example).
3. Prints the test metrics table (and the motif span F1 where the model has motifs) and where the PNGs and
   the model card are.

Options: ``--recipe`` (default ``pipelines/motif/tiny.yaml``), ``--output_dir``, ``--override
key=value ...`` (any recipe key), ``--example_length`` (bases of the example sequence, room for 8 motifs:
at least 160, checked before training). A second run over the same output folder stops (nothing is
deleted) unless given ``--resume`` or ``--overwrite_output_dir``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_SPAN_F1 = 0.90
MAX_ROWS = 25  # detected spans printed
INSTANCES = (6, 8)  # fewest and most motif instances planted in the example sequence


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="hf-sparse main job: fine-tune and use a DNA motif detector."
    )
    parser.add_argument(
        "--recipe", default=os.path.join(REPO, "pipelines", "motif", "tiny.yaml"), help="Recipe to fine-tune."
    )
    parser.add_argument(
        "--output_dir", default=None, help="Where the model goes (default: the recipe's, outputs/motif-tiny)."
    )
    parser.add_argument(
        "--override", nargs="+", default=[], metavar="KEY=VALUE", help="Recipe values to override."
    )
    parser.add_argument(
        "--resume", action="store_true", help="Continue from the latest checkpoint in the output folder."
    )
    parser.add_argument(
        "--overwrite_output_dir",
        action="store_true",
        help="Delete the checkpoints of an earlier run in the output folder and train from step 0.",
    )
    parser.add_argument("--debug", action="store_true", help="Show the traceback of a user error.")
    parser.add_argument(
        "--example_length",
        type=int,
        default=3000,
        help=f"Bases of the example sequence given to the pipeline (at least room for {INSTANCES[1]} motifs).",
    )
    args = parser.parse_args(argv)
    from hf_sparse.tasks.motif.data import builtin_motifs

    longest = max(len(m) for m in builtin_motifs())
    if args.example_length < INSTANCES[1] * longest:  # checked before training, not after
        parser.error(
            f"--example_length must be at least {INSTANCES[1] * longest} bases ({INSTANCES[1]} instances of the "
            f"longest built-in motif, {longest} bases), got {args.example_length}"
        )
    return args


def example_sequence(model, length: int, seed: int = 12345) -> dict:
    """A synthetic sequence with planted instances of the model's motifs (a seed no split used)."""
    from hf_sparse.tasks.motif.data import Motif, SyntheticMotifGenerator

    motifs = [Motif(name, "", counts) for name, counts in (model.config.motifs or {}).items()]
    gen = SyntheticMotifGenerator(
        motifs,
        length=length,
        min_instances=INSTANCES[0],
        max_instances=INSTANCES[1],
        negative_fraction=0.0,
        seed=seed,
    )
    return gen.example(0)


def metrics_table(results: dict) -> str:
    rows = [("metric", "validation", "test"), ("---", "---", "---")]
    names = sorted(
        {k.split("_", 1)[1] for k in results if k.startswith(("eval_", "test_"))}
        - {"loss", "runtime", "samples_per_second", "steps_per_second"}
    )
    for name in names:
        cells = [results.get(f"{p}_{name}") for p in ("eval", "test")]
        rows.append((name, *("" if c is None else f"{c:.4f}" for c in cells)))
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    import logging

    from hf_sparse.training import CheckpointError, RecipeError, run
    from hf_sparse.utils.console import print_error

    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    overrides = list(args.override)
    if args.output_dir:
        overrides.append(f"output_dir={args.output_dir}")
    if args.overwrite_output_dir:
        overrides.append("overwrite_output_dir=true")
    print(f"== 1. fine-tuning {os.path.relpath(args.recipe)} on CPU ==", flush=True)
    try:
        results = run(args.recipe, overrides, resume=True if args.resume else None)
    except (RecipeError, CheckpointError, FileNotFoundError) as e:
        if args.debug:
            raise
        print_error(" ".join(str(e).split()))
        return 2
    out = results["output_dir"]
    train_s = time.perf_counter() - started

    print(f"\n== 2. reloading {out} with AutoModel and pipeline() ==", flush=True)
    from transformers import AutoModel, pipeline

    model = AutoModel.from_pretrained(out)
    # the task (dna-motif-detection) and its code come from the saved folder's config.json
    pipe = pipeline(model=out, trust_remote_code=True)
    print(
        f"{type(model).__name__} ({model.config.backbone['model_type']} backbone, "
        f"{sum(p.numel() for p in model.parameters()):,} parameters); pipeline task {pipe.task!r}"
    )
    lengths = (
        model.config.motif_lengths
    )  # of the motifs whose counts the model keeps (what the example plants)
    if not model.config.motif_names:
        print("no example: the model has no motif head (a sequence classifier)")
    elif not lengths:
        print("no example: the model keeps no motif counts to plant")
    elif INSTANCES[1] * max(lengths.values()) > args.example_length:
        print(
            f"no example: --example_length={args.example_length} cannot hold {INSTANCES[1]} instances of "
            f"motifs of up to {max(lengths.values())} bases"
        )
    else:
        show_example(pipe, example_sequence(model, args.example_length))

    print("\n== 3. held-out metrics ==")
    print(metrics_table(results))
    f1 = results.get("test_span_f1", results.get("eval_span_f1"))
    if f1 is not None:
        verdict = "met" if f1 >= TARGET_SPAN_F1 else "NOT met"
        print(f"\nmotif span F1 (test) = {f1:.4f}  (target >= {TARGET_SPAN_F1:.2f}: {verdict})")
    print("\nfiles:")
    for name in ("loss.png", "motif_f1.png", "attention.png", "README.md", "all_results.json"):
        path = os.path.join(out, name)
        if os.path.exists(path):
            print(f"  {os.path.relpath(path)}")
    print(
        f"\nDone in {time.perf_counter() - started:.0f} s (fine-tuning and evaluation {train_s:.0f} s). "
        f"Reload anywhere: AutoModel.from_pretrained({os.path.relpath(out)!r}) or "
        f"pipeline(model={os.path.relpath(out)!r}, trust_remote_code=True)."
    )
    return 0


def show_example(pipe, example: dict) -> None:
    """The spans ``pipe`` detects in ``example``, next to the planted ones."""
    found = pipe(example["sequence"])
    print(
        f"example: {len(example['sequence']):,} bases (the model reads {pipe.max_bases():,} per window: "
        f"{found['windows']} overlapping windows)"
    )
    planted = {(s["motif"], s["start"], s["end"]) for s in example["spans"]}
    detected = {(s["motif"], s["start"], s["end"]) for s in found["spans"]}
    print(f"{'motif':8} {'start':>6} {'end':>6} {'strand':>6} {'score':>6}  planted?")
    for s in found["spans"][:MAX_ROWS]:
        mark = "yes" if (s["motif"], s["start"], s["end"]) in planted else "no"
        print(
            f"{s['motif']:8} {s['start']:6d} {s['end']:6d} {s['strand'] or '?':>6} {s['score']:6.3f}  {mark}"
        )
    if len(found["spans"]) > MAX_ROWS:
        print(f"... and {len(found['spans']) - MAX_ROWS} more")
    missed = sorted(planted - detected, key=lambda t: t[1])
    print(f"planted {len(planted)}, detected {len(detected)}, exact matches {len(planted & detected)}"
          + (f"; missed {missed}" if missed else ""))  # fmt: skip
    print("sequence scores:", found["sequence_scores"])


if __name__ == "__main__":
    sys.exit(main())
