#!/usr/bin/env python
"""Learned-sparsity benchmark: the same small causal LM with one thing changed per variant, trained for the
same number of steps on the same batches; writes ``benchmarks/learned_sparsity.{json,md}``.

The shared model and data are the ``causal-lm`` task's (:mod:`hf_sparse.tasks.lm`): a word-level tokenizer
and 128-token blocks of ScisummNet paper text, and a SparseTransformerForCausalLM sized by :data:`BASE`
(the model keys of ``pipelines/lm/dense.yaml``). A variant is one entry of :data:`VARIANTS`: the
``SparseTransformerConfig`` keys it changes (``config``) and, optionally, a function reporting the attention
spans it learned. Adding a variant is adding an entry.

Per variant: validation loss (token cross-entropy, without auxiliary losses) after ``--steps`` steps, the
median training step time (forward + backward + optimizer, ``--timing-rounds`` steps per variant taken round-robin after training), the parameter count
(total, and active per token: a token runs ``num_experts_per_tok`` of ``num_experts`` experts) and the
learned spans. Step times are taken round-robin, so every variant runs under the same load (the table gives the load average).

Examples::

    python scripts/benchmark_learned_sparsity.py                              # every variant, write the files
    python scripts/benchmark_learned_sparsity.py --variants dense moe --steps 50 --out /tmp/ls
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO.parent / "shared" / "data" / "summarization" / "scisummnet"


@dataclass(frozen=True)
class Variant:
    """One row of the table: what it changes in :data:`BASE` and how to read its learned spans.

    Attributes:
        description: one line for the table.
        config: ``SparseTransformerConfig`` keys that differ from :data:`BASE` (``model_kwargs`` of the
            ``causal-lm`` task, or its size keys).
        learned_spans: ``fn(model) -> str`` describing the attention spans the model learned (per layer and
            head), or None for a variant without learned spans.
    """

    description: str
    config: dict = field(default_factory=dict)
    learned_spans: Callable | None = None


#: the shared model: keys of the causal-lm task's arguments (pipelines/lm/dense.yaml)
BASE = dict(
    hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=256, attention_window=64,
    position_embedding_type="rotary", hidden_dropout_prob=0.0, attention_dropout=0.0, block_size=128,
    vocab_min_frequency=3, vocab_size=8000,
)  # fmt: skip

#: variant name -> Variant; ``--variants`` picks among these
VARIANTS: dict[str, Variant] = {
    "dense": Variant("dense feed-forward (256 wide), causal window 64"),
    "moe": Variant(
        "mixture of 4 experts (each 256 wide), top-1 in every layer, causal window 64",
        # Switch-style top-1: weight = router probability (norm_topk_prob=False), so the router also learns
        # from the LM loss; the same active parameters per token as `dense`
        config=dict(
            num_experts=4,
            num_experts_per_tok=1,
            norm_topk_prob=False,
            router_aux_loss_coef=0.01,
            router_z_loss_coef=0.001,
        ),
    ),
    "window": Variant(
        "fixed causal window 32 in every head (pipelines/lm/window.yaml)", config=dict(attention_window=32)
    ),
    "adaptive_span": Variant(
        "adaptive span per head in [0, 128], ramp 32, init 32, causal (pipelines/lm/adaptive_span.yaml)",
        config=dict(
            attention_pattern={"type": "causal"},
            adaptive_span={"max_span": 128, "ramp": 32, "init": 32, "loss_coef": 2e-6},
        ),
        learned_spans=lambda model: learned_spans(model),
    ),  # fmt: skip
}


def learned_spans(model) -> str:
    """``L0: 12/40/3/96; L1: ...`` (tokens per head, layer by layer) and the mean."""
    layers = [
        layer.attention.self.adaptive_span.spans().tolist()
        for layer in model.sparse_transformer.encoder.layer
    ]
    flat = [s for row in layers for s in row]
    per_layer = "; ".join(f"L{i}: " + "/".join(f"{s:.0f}" for s in row) for i, row in enumerate(layers))
    return f"{per_layer} (mean {sum(flat) / len(flat):.1f})"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Train the small causal LM per variant; write benchmarks/learned_sparsity.*"
    )
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                        help="Variants to run, in this order.")  # fmt: skip
    parser.add_argument(
        "--data-dir", default=str(DATA_DIR), help="causal-lm data folder (train/validation.jsonl)."
    )
    parser.add_argument("--train-documents", type=int, default=100, help="First N training documents.")
    parser.add_argument("--eval-documents", type=int, default=20, help="First N validation documents.")
    parser.add_argument(
        "--eval-blocks", type=int, default=64, help="Validation blocks the loss averages over."
    )
    parser.add_argument("--steps", type=int, default=200, help="Training steps per variant.")
    parser.add_argument(
        "--warmup-steps", type=int, default=5, help="Steps left out of the sequential step-time median."
    )
    parser.add_argument(
        "--timing-rounds",
        type=int,
        default=20,
        help="Round-robin steps per variant for the step-time column.",
    )
    parser.add_argument("--batch-size", type=int, default=16, help="Blocks per training step.")
    parser.add_argument(
        "--learning-rate", type=float, default=2e-3, help="AdamW peak learning rate (cosine decay)."
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed of the weights and of the batch order.")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's).")
    parser.add_argument("--save-dir", default=None,
                        help="Save each trained model to SAVE_DIR/<variant> (e.g. for the adaptive-span plot).")  # fmt: skip
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "learned_sparsity"),
                        help="Output prefix: PREFIX.json and PREFIX.md.")  # fmt: skip
    args = parser.parse_args(argv)
    for name in ("train_documents", "eval_documents", "eval_blocks", "steps", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.timing_rounds < 1:
        parser.error(f"--timing-rounds must be >= 1, got {args.timing_rounds}")
    if not 0 <= args.warmup_steps < args.steps:
        parser.error(f"--warmup-steps must be in [0, --steps), got {args.warmup_steps}")
    return args


def parameter_counts(model) -> tuple[int, int]:
    """(total, active per token) parameters; a mixture-of-experts layer counts ``num_experts_per_tok`` of
    its experts as active (the input embedding matrix counts in both: it is the tied output projection)."""
    from hf_sparse.models.sparse_transformer.moe_sparse_transformer import count_parameters

    return count_parameters(model)


def build_data(args):
    """(tokenizer, train blocks, validation blocks) of the causal-lm task; ``ValueError`` if the training blocks
    do not fill one batch of ``--batch-size``."""
    from hf_sparse.tasks.lm.data import lm_blocks, load_documents, train_word_tokenizer

    train_rows = load_documents(Path(args.data_dir) / "train.jsonl", limit=args.train_documents)
    val_rows = load_documents(Path(args.data_dir) / "validation.jsonl", limit=args.eval_documents)
    tokenizer = train_word_tokenizer(
        train_rows["document"], min_frequency=BASE["vocab_min_frequency"], vocab_size=BASE["vocab_size"]
    )
    train = lm_blocks(train_rows, tokenizer, BASE["block_size"]).with_format("torch")
    if len(train) < args.batch_size:  # the training loader drops the incomplete batch: it would hold none
        raise ValueError(
            f"--batch-size {args.batch_size} is more than the {len(train)} training blocks of --train-documents "
            f"{args.train_documents}: lower --batch-size or raise --train-documents"
        )
    val = lm_blocks(val_rows, tokenizer, BASE["block_size"], max_blocks=args.eval_blocks).with_format("torch")
    return tokenizer, train, val


def validation_loss(model, val, batch_size: int) -> float:
    """Mean token cross-entropy of the language model over ``val`` (no auxiliary losses)."""
    import torch

    from hf_sparse.tasks.lm.task import lm_metrics

    class _Loader:  # lm_metrics reads batches from a trainer's eval dataloader and gathers its sums
        accelerator = SimpleNamespace(gather_for_metrics=lambda sums: sums)  # one process: nothing to gather

        def get_eval_dataloader(self, dataset):
            return torch.utils.data.DataLoader(dataset, batch_size=batch_size)

    return lm_metrics(model, val, _Loader(), "eval")["eval_lm_loss"]


def run_variant(name: str, variant: Variant, args, tokenizer, train, val) -> dict:
    import torch
    from transformers import get_cosine_schedule_with_warmup

    from hf_sparse.models.sparse_transformer import SparseTransformerForCausalLM
    from hf_sparse.tasks.lm.task import CausalLMArguments

    keys = {k: v for k, v in BASE.items() if k not in ("vocab_min_frequency", "vocab_size")}
    task_keys = set(keys) | {"attention_pattern"}  # CausalLMArguments fields; the rest go to model_kwargs
    size = {k: v for k, v in variant.config.items() if k in task_keys}
    extra = {k: v for k, v in variant.config.items() if k not in task_keys}
    task_args = CausalLMArguments(data_dir=args.data_dir, **{**keys, **size}, model_kwargs=extra or None)
    torch.manual_seed(args.seed)
    model = SparseTransformerForCausalLM(task_args.model_config(tokenizer))
    total, active = parameter_counts(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.01)
    schedule = get_cosine_schedule_with_warmup(optimizer, max(1, args.steps // 10), args.steps)
    order = torch.Generator().manual_seed(args.seed)
    loader = torch.utils.data.DataLoader(
        train, batch_size=args.batch_size, shuffle=True, generator=order, drop_last=True
    )

    def train_step(batch) -> float:
        start = time.perf_counter()
        out = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        )
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        return out.loss.item()

    times, losses, step = [], [], 0
    model.train()
    while step < args.steps:
        for batch in loader:
            if step == args.steps:
                break
            losses.append(train_step(batch))
            step += 1
    val_loss = validation_loss(model, val, args.batch_size)
    if args.save_dir:
        model.save_pretrained(Path(args.save_dir) / name)
    row = {
        "variant": name,
        "description": variant.description,
        "config": variant.config,
        "steps": args.steps,
        "validation_loss": val_loss,
        "validation_perplexity": math.exp(val_loss),
        "final_train_loss": statistics.fmean(losses[-10:]),
        "step_time_sequential_s": statistics.median(times[args.warmup_steps :]),
        "parameters_total": total,
        "parameters_active": active,
        "learned_spans": variant.learned_spans(model) if variant.learned_spans is not None else None,
    }
    print(json.dumps(row), flush=True)
    timing = {"times": times, "step": train_step, "batch": next(iter(loader))}
    return row, timing


def interleaved_step_times(rows, timings, rounds: int) -> None:
    """Step time of every variant from ``rounds`` more steps taken round-robin (one step of each variant in
    turn, on one fixed batch, after the validation loss and the save): every variant sees the same load, so
    the times compare on a shared host. Sets ``step_time_s`` (the median)."""
    for timing in timings:
        timing["times"].clear()
    for _ in range(rounds):
        for timing in timings:
            timing["step"](timing["batch"])
    for row, timing in zip(rows, timings):
        row["step_time_s"] = statistics.median(timing["times"])


def seed_caveat(seed: int) -> str:
    """The markdown's warning that its loss gaps come from one seed."""
    return (
        f"One training run per variant, seed {seed}: at this size another seed moves the validation losses by "
        "several tenths of a nat and can reverse the ranking of two variants, so differences under ~0.7 nats "
        "are within the seed spread, not a ranking."
    )


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        "# Learned sparsity: dense vs mixture-of-experts feed-forward, fixed window vs adaptive span",
        "",
        f"`{meta['command']}` ({meta['wall_s'] / 60:.1f} min wall).",
        "",
        f"The same small causal LM ({meta['base']}) trained from scratch on {meta['train_blocks']} blocks of "
        f"{meta['block_size']} tokens of ScisummNet paper text (the `causal-lm` task's data, first "
        f"{meta['train_documents']} training documents), {meta['steps']} AdamW steps of {meta['batch_size']} blocks, "
        f"same seed and batch order for every variant; validation loss = token cross-entropy (no auxiliary "
        f"losses) over {meta['eval_blocks']} validation blocks. Active parameters: what one token runs "
        "(a mixture-of-experts layer counts its top-k experts only).",
        "",
        seed_caveat(meta["seed"]),
        "",
        f"Step time: median of {meta['timing_rounds']} training steps (forward, backward, optimizer) per variant "
        "taken round-robin after training (one step of each variant in turn, one fixed batch), so every variant "
        f"ran under the same load: {meta['machine']}, load average {meta['load_before']} before, "
        f"{meta['load_after']} after (a shared host: compare the times within this table).",
        "",
        "| variant | description | validation loss | perplexity | step time (s) | parameters (total) | parameters (active) | learned spans |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['description']} | {r['validation_loss']:.3f} | {r['validation_perplexity']:.1f} | "
            f"{r['step_time_s']:.3f} | {r['parameters_total']:,} | {r['parameters_active']:,} | "
            f"{r['learned_spans'] or '—'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from hf_sparse.utils.io import atomic_write

    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.time()
    load_before = os.getloadavg()[0]
    try:
        tokenizer, train, val = build_data(args)
    except ValueError as e:  # too little data for the arguments: one line, argparse's exit status
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows, timings = zip(
        *(run_variant(name, VARIANTS[name], args, tokenizer, train, val) for name in args.variants)
    )
    interleaved_step_times(rows, timings, args.timing_rounds)
    rows = list(rows)
    meta = {
        "command": "python scripts/benchmark_learned_sparsity.py "
        + shlex.join(sys.argv[1:] if argv is None else argv),
        "wall_s": time.time() - started,
        "base": ", ".join(f"{k}={v}" for k, v in BASE.items()),
        "block_size": BASE["block_size"],
        "train_blocks": len(train),
        "train_documents": args.train_documents,
        "eval_blocks": len(val),
        "steps": args.steps,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "timing_rounds": args.timing_rounds,
        "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads",
        "load_before": round(load_before, 1),
        "load_after": round(os.getloadavg()[0], 1),
    }
    json_path, md_path = f"{args.out}.json", f"{args.out}.md"  # a prefix: run_v1.5 -> run_v1.5.json
    atomic_write(json_path, json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    atomic_write(md_path, markdown(rows, meta))
    print(f"wrote {md_path} and {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
