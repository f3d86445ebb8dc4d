"""Masked-LM training throughput: SparseTransformer vs transformers' Longformer and dense RoBERTa.

Tokens per second of one forward+backward step of ``*ForMaskedLM`` models of the same size
(hidden 768, 12 heads, FFN 3072, 2 layers, window 512, one global token), B=1, at 4k and 16k tokens,
each (model, n) in a fresh process. The vocabulary is small (1024) so that the language-model head,
identical in every model, does not hide the difference between the attention layers; two layers
keep the 16k Longformer step under a minute on 2 cores (the ratio does not depend on depth).
Also measured: SparseTransformerForMaskedLM converted from the Longformer checkpoint
(``hf_sparse.conversion.from_longformer``, global projections included), and both models with attention
dropout 0.1 (``DROPOUT``: the default of their configs; the other rows run without dropout), each compared
with the Longformer of the same setting.

Each step is also compared with its FLOP bound: the matmul FLOPs the model must do (every
``nn.Linear`` applied to the n tokens, plus QK^T and PV over exactly the allowed (query, key) pairs
of every layer, forward; forward+backward = 3x forward) at this host's fp32 4096^2 matmul rate,
measured before and after each (model, n) (one where it moved by more than ``MAX_RATE_MOVE`` runs again, up to
``--attempts`` times; each bound uses that record's own rates). One extra profiled step per (model, n) says
where the time goes: matmuls, the attention kernels, copies, the rest (elementwise).

    python scripts/benchmark_models.py            # -> benchmarks/models.{json,md}
    python scripts/benchmark_models.py --sizes 16384 --only SparseTransformerForMaskedLM Longformer --out outputs/bench

A partial run (``--only``, ``--sizes``) must name its folder with ``--out``: the default, benchmarks/, holds the
committed results of a full run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from hf_sparse.utils.io import atomic_write

SIZES = [4096, 16384]
OUT = "benchmarks"  # the committed results of a full run
MODELS = [
    "SparseTransformerForMaskedLM",
    "SparseTransformerForMaskedLM (converted Longformer)",
    "LongformerForMaskedLM",
    "RobertaForMaskedLM (dense SDPA)",
    "SparseTransformerForMaskedLM (attention dropout 0.1)",
    "LongformerForMaskedLM (attention dropout 0.1)",
]
DROPOUT = " (attention dropout 0.1)"  # a model name ending so runs with attention_probs_dropout_prob=0.1
SHAPE = dict(
    hidden_size=768, num_attention_heads=12, intermediate_size=3072, num_hidden_layers=2, vocab_size=1024
)
WINDOW = 512
MAX_RATE_MOVE = 0.10  # a (model, n) whose matmul rate moved by more than this runs again
# ``--malloc-no-mmap``: glibc serves every allocation from its heap and keeps freed memory, so the large
# activations of one step reuse the pages of the last instead of new, zero-filled mmaps (glibc maps anything
# above 32 MB afresh and the kernel faults it in page by page on every step).
NO_MMAP_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 36)}


def sparse_config(n: int, **common):
    """SparseTransformerForMaskedLM's config at ``n`` tokens (a converted Longformer's has the same positions and
    window): its checks refuse an ``n`` whose positions the window would reach past (n below 254)."""
    from hf_sparse import SparseTransformerConfig, patterns

    return SparseTransformerConfig(max_position_embeddings=n + 2, attention_pattern=patterns.Longformer(window=WINDOW),
                                   position_ids_style="roberta", pad_token_id=1, global_first_token=False, **common)  # fmt: skip


def build(name: str, n: int):
    import torch
    from transformers import LongformerConfig, LongformerForMaskedLM, RobertaConfig, RobertaForMaskedLM

    common = dict(
        SHAPE, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.1 if name.endswith(DROPOUT) else 0.0
    )
    if name.startswith("SparseTransformerForMaskedLM"):
        from hf_sparse import SparseTransformerForMaskedLM
        from hf_sparse.conversion import from_longformer

        if "converted" in name:
            src = LongformerForMaskedLM(
                LongformerConfig(max_position_embeddings=n + 2, attention_window=WINDOW, **common)
            )
            return from_longformer(src)
        return SparseTransformerForMaskedLM(sparse_config(n, **common))
    if name.startswith("Longformer"):
        return LongformerForMaskedLM(
            LongformerConfig(max_position_embeddings=n + 2, attention_window=WINDOW, **common)
        )
    cfg = RobertaConfig(max_position_embeddings=n + 2, **common)
    torch.backends.cuda.enable_flash_sdp(True)
    return RobertaForMaskedLM._from_config(cfg, attn_implementation="sdpa")


def matmul_gflops() -> float:
    """fp32 4096^2 matmul rate of this host (median of 6)."""
    import torch

    a, b, out = (torch.randn(4096, 4096) for _ in range(3))
    times = []
    for _ in range(6):
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        times.append(time.perf_counter() - t0)
    times.sort()
    return 2 * 4096**3 / times[len(times) // 2] / 1e9


def step_flops(name: str, model, n: int, num_global: int = 1) -> dict:
    """Forward FLOPs a step must do: linear layers (each nn.Linear over the n tokens, ``query_global`` over the
    ``num_global`` global tokens it runs on) and attention (4 * allowed pairs * head_dim per head and layer);
    forward+backward is 3x the sum."""
    import torch

    from hf_sparse import patterns as P

    linear = sum(
        2 * (num_global if key.endswith("query_global") else n) * m.in_features * m.out_features
        for key, m in model.named_modules()
        if isinstance(m, torch.nn.Linear)
    )
    H, L = SHAPE["num_attention_heads"], SHAPE["num_hidden_layers"]
    D = SHAPE["hidden_size"] // H
    if name.startswith("Roberta"):
        pairs = n * n
    else:  # window plus the first token global (what every sparse model here computes)
        pairs = round((P.SlidingWindow(window=WINDOW) | P.Global(indices=[0])).density(n) * n * n)
    attention = 4 * pairs * D * H * L
    return {"linear_flops": linear, "attention_flops": attention, "step_flops": 3 * (linear + attention)}


_MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")
_COPY_OPS = ("aten::copy_", "aten::clone", "aten::contiguous", "aten::cat", "aten::index", "aten::gather",
             "aten::scatter_add", "aten::index_add_", "aten::pad", "aten::constant_pad_nd", "aten::repeat_interleave")  # fmt: skip


# hf_sparse's attention as autograd functions (their events, forward and backward, include every op they run)
_ATTENTION_FUNCTIONS = ("_BlockSparse", "_FusedPlan", "_Merge")


def profile_step(step) -> dict:
    """Self CPU time of one step by category (seconds), plus the inclusive time of hf_sparse's attention
    functions (kernels, their matmuls and elementwise work, the merge of components; forward and backward)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    cats = {"matmul": 0.0, "attention kernels": 0.0, "copies": 0.0, "elementwise and other": 0.0}
    sparse = 0.0
    for e in prof.key_averages():
        t = e.self_cpu_time_total / 1e6
        if e.key.removesuffix("Backward") in _ATTENTION_FUNCTIONS:
            sparse += e.cpu_time_total / 1e6
        if e.key in _MATMUL_OPS:
            cats["matmul"] += t
        elif "hf_sparse_fused" in e.key or "flash_attention" in e.key or "scaled_dot_product" in e.key:
            cats["attention kernels"] += t
        elif e.key in _COPY_OPS:
            cats["copies"] += t
        else:
            cats["elementwise and other"] += t
    cats["hf_sparse attention, inclusive"] = sparse
    return cats


def worker(name: str, n: int, budget_s: float) -> dict:
    import torch

    torch.manual_seed(0)
    model = build(name, n).train()
    ids = torch.randint(5, SHAPE["vocab_size"], (1, n))
    labels = ids.clone()
    gm = torch.zeros_like(ids)
    gm[:, 0] = 1
    kw = {} if name.startswith("Roberta") else {"global_attention_mask": gm}

    def step():
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=labels, **kw).loss.backward()

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    peak = _status("VmHWM")
    reps = max(1, min(3, int(budget_s / first)))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    times.sort()
    t = times[len(times) // 2]
    rec = {"time_s": t, "tokens_per_s": n / t, "reps": reps, "peak_rss_mb": peak}
    rec.update(step_flops(name, model, n))
    rec["profile_s"] = profile_step(step)
    return rec


def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _measure(name: str, n: int, budget_s: float, env=None) -> dict:
    """One (model, n) in a fresh process, between two measurements of the matmul rate; its FLOP bound at
    the mean of the two."""
    rec = {"model": name, "n": n, "matmul_before": matmul_gflops()}
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps([name, n, budget_s])]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    rec["matmul_after"] = matmul_gflops()
    rate = (rec["matmul_before"] + rec["matmul_after"]) / 2
    if proc.returncode != 0:
        rec["error"] = (
            "out of memory (killed)"
            if proc.returncode in (-9, 137)
            else (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
        )
        print(f"{name:<52} n={n:>6} {rec['error']}", flush=True)
        return rec
    rec.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    rec["bound_s"] = rec["step_flops"] / (rate * 1e9)
    rec["x_bound"] = rec["time_s"] / rec["bound_s"]
    prof = ", ".join(f"{k} {v:.2f} s" for k, v in rec["profile_s"].items())
    print(
        f"{name:<52} n={n:>6} {rec['tokens_per_s']:8.0f} tokens/s ({rec['time_s']:.2f} s/step, peak "
        f"{rec['peak_rss_mb']:.0f} MB); {rec['x_bound']:.2f}x its FLOP bound ({rec['bound_s']:.2f} s at "
        f"{rec['matmul_before']:.0f} -> {rec['matmul_after']:.0f} GFLOP/s); {prof}",
        flush=True,
    )
    return rec


def report(results: dict) -> str:
    """models.md from the results (``models.json``)."""
    shape, window, command, wall = results["shape"], results["window"], results["command"], results["wall_s"]
    rate_before, rate_after, records = results["matmul_gflops_before"], results["matmul_gflops_after"], results["records"]  # fmt: skip
    lines = [
        "# Masked-LM training throughput (forward + backward)",
        "",
        f"`{command.strip()}` ({wall / 60:.0f} min); {results['cpu_count']} CPU cores.",
        "",
        f"B=1, hidden {shape['hidden_size']}, {shape['num_attention_heads']} heads, FFN {shape['intermediate_size']}, "
        f"{shape['num_hidden_layers']} layers, vocabulary {shape['vocab_size']}, window {window}, first token global, float32, CPU. "
        "Each (model, n) ran in a fresh process; median step time. No dropout except in the rows marked "
        f"`{DROPOUT.strip()}`, which are compared with the Longformer of that setting. See the script's docstring for "
        "why the vocabulary is small.",
        *(
            [
                "",
                "Every model ran with glibc's "
                + ", ".join(f"`{k}={v}`" for k, v in NO_MMAP_ENV.items())
                + " (`--malloc-no-mmap`): large allocations reuse heap memory instead of fresh mmaps.",
            ]
            if results["malloc_no_mmap"]
            else []
        ),
        "",
        "FLOP bound of each row at the fp32 4096^2 matmul rate measured just before and after it (`matmul`, "
        f"GFLOP/s; a row where it moved by more than {MAX_RATE_MOVE:.0%} ran again, up to `--attempts`; rows still "
        f"marked * moved). Host rate at the start {rate_before:.0f}, at the end {rate_after:.0f} GFLOP/s. "
        "Profile: self CPU time of one extra step (matmul / attention kernels / copies / elementwise and other), then "
        "the inclusive time of hf_sparse's attention functions, forward and backward (their matmuls and elementwise "
        "work included; 0 for the other models).",
        "",
        "| model | n | tokens/s | s/step | x FLOP bound | matmul (GFLOP/s) | peak RSS (MB) | speed-up vs LongformerForMaskedLM | profile (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n in dict.fromkeys(r["n"] for r in records):  # the sizes, in the order they ran
        timed = {r["model"]: r for r in records if r["n"] == n and "tokens_per_s" in r}
        for r in (r for r in records if r["n"] == n):
            if "tokens_per_s" in r:  # against the Longformer of the same dropout setting
                base = timed.get("LongformerForMaskedLM" + (DROPOUT if r["model"].endswith(DROPOUT) else ""))
                speed = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x" if base else "—"
                prof = " / ".join(f"{v:.2f}" for v in r["profile_s"].values())
                rates = f"{r['matmul_before']:.0f} -> {r['matmul_after']:.0f}" + (
                    "*" if "rate_moved" in r else ""
                )
                lines.append(
                    f"| {r['model']} | {n:,} | {r['tokens_per_s']:.0f} | {r['time_s']:.2f} | {r['x_bound']:.2f}x | "
                    f"{rates} | {r['peak_rss_mb']:.0f} | {speed} | {prof} |"
                )
            else:
                lines.append(f"| {r['model']} | {n:,} | — | — | — | — | — | {r['error']} | — |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out",
        help=f"folder for models.json and models.md (default {OUT}, the committed results of a full run; a "
        "partial run, with --only or --sizes, must name its own folder)",
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=SIZES, help="sequence lengths")
    ap.add_argument("--budget-s", type=float, default=60.0, help="time budget for the timed repetitions")
    ap.add_argument("--only", nargs="*", help="run models whose name contains one of these strings")
    ap.add_argument("--attempts", type=int, default=3, help="runs of a (model, n) whose matmul rate moved")
    ap.add_argument(
        "--malloc-no-mmap",
        action="store_true",
        help=f"run every model with glibc's {' '.join(f'{k}={v}' for k, v in NO_MMAP_ENV.items())} (see NO_MMAP_ENV)",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.attempts < 1:
        ap.error(f"--attempts must be >= 1, got {args.attempts}")
    if args.budget_s < 0:
        ap.error(f"--budget-s must be >= 0 (0: one timed call), got {args.budget_s}")
    if args.worker:
        name, n, budget = json.loads(args.worker)
        print(json.dumps(worker(name, n, budget)))
        return
    unmatched = [s for s in args.only or [] if not any(s in m for m in MODELS)]
    if unmatched:
        ap.error(f"--only {' '.join(unmatched)} matches no model; choose from {'; '.join(MODELS)}")
    models = [m for m in MODELS if not args.only or any(s in m for s in args.only)]
    for n in args.sizes:  # before measuring anything
        if n < 1:
            ap.error(f"--sizes must be >= 1, got {n}")
        if any(m.startswith("SparseTransformerForMaskedLM") for m in models):
            try:
                sparse_config(n, **SHAPE)
            except ValueError as e:
                ap.error(f"--sizes {n} is too short for SparseTransformerForMaskedLM (n + 2 positions): {e}")
    if args.out is None and (args.only or args.sizes != SIZES):
        ap.error(
            f"--only and --sizes write a partial table: give --out (the default, {OUT}, holds the full run's results)"
        )
    out = args.out or OUT
    records, started = [], time.perf_counter()
    env = dict(os.environ, **NO_MMAP_ENV) if args.malloc_no_mmap else None
    for n in args.sizes:
        for name in models:
            for attempt in range(1, args.attempts + 1):
                rec = _measure(name, n, args.budget_s, env)
                moved = rec["matmul_after"] / rec["matmul_before"] - 1
                if abs(moved) <= MAX_RATE_MOVE or attempt == args.attempts or "error" in rec:
                    break
                print(f"{name} n={n}: the matmul rate moved by {moved:+.0%}: repeating", flush=True)
            if abs(moved) > MAX_RATE_MOVE:
                rec["rate_moved"] = moved
            records.append(rec)
    command = "python scripts/benchmark_models.py " + " ".join(sys.argv[1:] if argv is None else argv)
    results = {"shape": SHAPE, "window": WINDOW, "command": command, "wall_s": time.perf_counter() - started,
               "cpu_count": os.cpu_count(), "malloc_no_mmap": args.malloc_no_mmap,
               "matmul_gflops_before": records[0]["matmul_before"], "matmul_gflops_after": records[-1]["matmul_after"],
               "records": records}  # fmt: skip
    atomic_write(os.path.join(out, "models.json"), json.dumps(results, indent=1))
    atomic_write(os.path.join(out, "models.md"), report(results))
    print(f"wrote {out}/models.json and models.md")


if __name__ == "__main__":
    main()
