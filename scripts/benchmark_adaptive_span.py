"""Adaptive span: forward+backward time of the kernel against the span, and the spans a model learned.

Time: one process, the same (B, H, n, D) float32 inputs, every span measured round-robin in each
repeat (so load on a shared host hits all spans alike); the median of the repeats is reported with
its ratio to the largest span, next to the ratio of key blocks the kernel computes (the work it
should scale with). The spans are set on all heads (the kernel's cost follows the largest).

Spans: ``--model DIR`` (a SparseTransformer trained with ``adaptive_span``, a decoder or an encoder of any task,
e.g. the output of ``pipelines/lm/adaptive_span.yaml``) adds a layer x head heatmap of its learned spans, with
``--note`` saying where the model comes from. ``--skip-timing`` keeps the timing table of an earlier run.

    python scripts/benchmark_adaptive_span.py                      # n = 16k -> benchmarks/adaptive_span.{json,md}
    python scripts/benchmark_adaptive_span.py --model outputs/lm-adaptive-span --skip-timing
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import time
from pathlib import Path

import torch

from hf_sparse.attention.adaptive_span import adaptive_span_attention, span_reach
from hf_sparse.utils.io import atomic_open, atomic_write


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq-len", type=int, default=16384, help="tokens n (queries = keys)")
    p.add_argument("--heads", type=int, default=4, help="attention heads H")
    p.add_argument("--head-dim", type=int, default=64, help="head size D")
    p.add_argument("--spans", default="0,256,512,1024,2048,4096", help="comma-separated spans (tokens)")
    p.add_argument("--ramp", type=int, default=32, help="ramp length R")
    p.add_argument("--block-size", type=int, default=128, help="kernel query block")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats per span (median reported)")
    p.add_argument("--causal", type=int, default=1, help="1: causal, 0: bidirectional")
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: no oversubscription on a shared host)"
    )
    p.add_argument("--model", default=None, help="trained adaptive-span model directory: plot its spans")
    p.add_argument("--note", default=None, help="with --model: a sentence on where the model comes from")
    p.add_argument(
        "--skip-timing",
        action="store_true",
        help="only the spans plot (with --model); the timing table stays",
    )
    p.add_argument(
        "--out",
        default="benchmarks/adaptive_span",
        help="output prefix: PREFIX.json, PREFIX.md, PREFIX_spans.png",
    )
    args = p.parse_args(argv)
    try:
        args.spans = [int(s) for s in args.spans.split(",")]
    except ValueError:
        raise ValueError(f"--spans must be comma-separated ints, got {args.spans!r}") from None
    for name in ("seq_len", "heads", "head_dim", "ramp", "block_size", "repeats", "threads"):
        if getattr(args, name) <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if any(s < 0 for s in args.spans):
        raise ValueError(f"--spans must be >= 0, got {args.spans}")
    if args.skip_timing and args.model is None:
        raise ValueError("--skip-timing without --model leaves nothing to do")
    if args.note is not None and args.model is None:
        raise ValueError("--note describes the --model: give --model too")
    return args


def key_blocks(n, reach, block, causal):
    """Key positions the kernel computes: per query block, its reach rounded out to the block."""
    total = 0
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        j0 = max(0, i0 - reach) // block * block
        hi = min(n - 1, i1 - 1 + (0 if causal else reach))
        total += (i1 - i0) * (min(n, -(-(hi + 1) // block) * block) - j0)
    return total


def time_spans(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    B, H, n, D = 1, args.heads, args.seq_len, args.head_dim
    q, k, v = (torch.randn(B, H, n, D, requires_grad=True) for _ in range(3))
    go = torch.randn(B, H, n, D)
    times = {s: [] for s in args.spans}

    def run(span):
        z = torch.full((H,), float(span), requires_grad=True)
        out = adaptive_span_attention(
            q, k, v, z, ramp=args.ramp, causal=bool(args.causal), block_size=args.block_size
        )
        torch.autograd.grad(out, (q, k, v, z), go)

    run(args.spans[0])  # warm-up
    for _ in range(args.repeats):
        for s in args.spans:  # round-robin: contention hits every span alike
            t = time.perf_counter()
            run(s)
            times[s].append(time.perf_counter() - t)
    top = max(args.spans)
    top_keys = key_blocks(n, span_reach(torch.tensor([float(top)]), args.ramp), args.block_size, args.causal)
    top_time = statistics.median(times[top])
    rows = []
    for s in args.spans:
        reach = span_reach(torch.tensor([float(s)]), args.ramp)
        keys = key_blocks(n, reach, args.block_size, args.causal)
        med = statistics.median(times[s])
        rows.append(
            {
                "span": s,
                "reach": reach,
                "computed_pairs": keys,
                "pairs_ratio": keys / top_keys,
                "fwd_bwd_s": med,
                "time_ratio": med / top_time,
                "all_s": times[s],
            }
        )
    return rows


def model_spans(path):
    """(spans per layer and head, the ``adaptive_span`` spec) of the SparseTransformer saved in ``path``, with
    the head it was saved with (its config's ``architectures``: a causal LM, a masked LM, a task head...);
    ``ValueError`` if it is not a SparseTransformer or has no adaptive span."""
    from transformers import AutoConfig

    from hf_sparse.models import sparse_transformer

    config = AutoConfig.from_pretrained(path)
    if not isinstance(config, sparse_transformer.SparseTransformerConfig):
        raise ValueError(
            f"--model {path}: a {config.model_type!r} model, not a SparseTransformer: it has no adaptive span"
        )
    if config.adaptive_span is None:
        raise ValueError(
            f"--model {path}: the model has no adaptive span (its config's adaptive_span is None), so no "
            "spans to plot; give a model trained with adaptive_span (e.g. pipelines/lm/adaptive_span.yaml)"
        )
    name = (config.architectures or ["SparseTransformerModel"])[0]
    model = getattr(sparse_transformer, name, sparse_transformer.SparseTransformerModel).from_pretrained(path)
    return [
        [round(float(x), 2) for x in layer.attention.self.adaptive_span.spans().detach()]
        for layer in model.base_model.encoder.layer
    ], config.adaptive_span


def plot_spans(spans, spec, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = torch.tensor(spans)
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * data.shape[1], 1.0 + 0.6 * data.shape[0]))
    im = ax.imshow(data, cmap="viridis", vmin=0, vmax=spec["max_span"], aspect="auto")
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            val = data[i, j].item()
            ax.text(
                j, i, f"{val:.0f}", ha="center", va="center", color="w" if val < spec["max_span"] / 2 else "k"
            )
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(data.shape[1]))
    ax.set_yticks(range(data.shape[0]))
    ax.set_title(f"learned spans (tokens; max_span={spec['max_span']}, ramp={spec['ramp']})")
    fig.colorbar(im, ax=ax, label="span")
    fig.tight_layout()
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)


def code(text: str) -> str:
    """``text`` as a markdown code span (fenced by two backticks if it holds one, e.g. a --note's)."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def markdown(args, rows, spans):
    lines = ["# Adaptive span", ""]
    if rows:
        lines += [
            f"Forward+backward of `adaptive_span_attention` at n={args.seq_len} (B=1, H={args.heads}, "
            f"D={args.head_dim}, float32, {'causal' if args.causal else 'bidirectional'}, ramp {args.ramp}, "
            f"block {args.block_size}), median of {args.repeats} round-robin repeats in one process on a "
            f"shared, contended CPU host ({platform.processor() or platform.machine()}, "
            f"{args.threads} torch thread(s)): compare the ratios, not the seconds.",
            "",
            "| span | reach (keys) | computed pairs / largest | time / largest | fwd+bwd (s) |",
            "|---:|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {r['span']} | {r['reach']} | {r['pairs_ratio']:.3f} | {r['time_ratio']:.3f} | {r['fwd_bwd_s']:.2f} |"
            for r in rows
        ]
        lines += ["", f"Command: `{args.command}`", ""]
    if spans:
        lines += ["## Learned spans (tokens), layer x head", ""]
        lines += [args.note, ""] if args.note else []
        lines += [f"Model: `{args.model}` (`adaptive_span={args.span_spec}`)", ""]
        lines += [f"Command: {code(args.spans_command)}", ""] if args.spans_command else []
        lines += ["| layer | " + " | ".join(f"head {h}" for h in range(len(spans[0]))) + " |"]
        lines += ["|---|" + "---:|" * len(spans[0])]
        lines += [f"| {i} | " + " | ".join(f"{s:.1f}" for s in row) + " |" for i, row in enumerate(spans)]
        lines += ["", f"![spans]({Path(args.out).name}_spans.png)", ""]
    return "\n".join(lines)


def main(argv=None):
    import sys

    args = parse_args(argv)
    args.command = "python scripts/benchmark_adaptive_span.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    spans = None
    if args.model is not None:  # first: a model without spans is an error before minutes of timing
        spans, spec = model_spans(args.model)
    args.spans_command = args.command
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = Path(f"{out}.json"), Path(f"{out}.md")  # a prefix: run_v1.5 -> run_v1.5.json
    old = json.loads(json_path.read_text()) if json_path.exists() else {}
    result = dict(old)
    rows = None
    if not args.skip_timing:
        rows = time_spans(args)
        result["timing"] = {
            "command": args.command,
            "seq_len": args.seq_len,
            "heads": args.heads,
            "head_dim": args.head_dim,
            "ramp": args.ramp,
            "block_size": args.block_size,
            "causal": bool(args.causal),
            "threads": args.threads,
            "rows": rows,
        }
    elif "timing" in old:
        rows = old["timing"]["rows"]
        args.command = old["timing"]["command"]
        for key in ("seq_len", "heads", "head_dim", "ramp", "block_size", "causal", "threads"):
            setattr(args, key, old["timing"][key])
        args.repeats = len(rows[0]["all_s"])
    if args.model is not None:
        args.span_spec = spec
        plot_spans(spans, spec, f"{out}_spans.png")
        result["learned_spans"] = {"model": args.model, "spans": spans, "adaptive_span": spec,
                                   "command": args.spans_command, "note": args.note}  # fmt: skip
    elif "learned_spans" in old:
        spans = old["learned_spans"]["spans"]
        args.model = old["learned_spans"]["model"]
        args.span_spec = old["learned_spans"]["adaptive_span"]
        args.spans_command = old["learned_spans"].get("command")
        args.note = old["learned_spans"].get("note")
    atomic_write(json_path, json.dumps(result, indent=2) + "\n")
    atomic_write(md_path, markdown(args, rows, spans))
    print(md_path.read_text())


if __name__ == "__main__":
    main()
