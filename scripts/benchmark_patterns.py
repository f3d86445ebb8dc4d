"""Every pattern family on the CPU path ``auto`` picks at 16k tokens, as a multiple of its FLOP bound.

``scripts/benchmark_attention.py`` follows three patterns over every length against Longformer and
SDPA; this one takes one instance of every family (content-based ones included) at one length,
B=1, H=12, D=64, float32, each in a fresh process: the median forward (no grad) and forward+backward
(a training step: gradients unset before each call, the incoming gradient made once) through
``sparse_attention(..., backend="blocked")``, which is what ``auto`` runs on CPU past
``SDPA_CPU_MAX_PAIRS``. The bound counts the matmul FLOPs of exactly the allowed (query, key) pairs
(forward 4 * pairs * D, forward+backward 3x that) at the matmul rate measured before and after the
pattern's runs (repeated where it moved by more than 10%); content-based patterns bind on the same
q and k first. LSH also hashes q and k (two products of n x D by D x buckets/2 per round, which
at 16k cost more FLOPs than its attention): its row also shows the bound with those FLOPs, counted
once (no gradient flows through the buckets).

    python scripts/benchmark_patterns.py        # -> benchmarks/patterns.{json,md}
    python scripts/benchmark_patterns.py --only LSH BigBird --out outputs/bench   # a subset: --out required
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from benchmark_attention import _backward, _cpu_name, _measure, matmul_gflops  # scripts/ is on sys.path

from hf_sparse.utils.io import atomic_write

H, D = 12, 64
N = 16384
OUT = "benchmarks"  # the committed results of a full run
MAX_RATE_MOVE = 0.10
PATTERNS = {
    "SlidingWindow(512)": {"type": "sliding_window", "window": 512},
    "SlidingWindow(512, causal)": {"type": "sliding_window", "window": 512, "causal": True},
    "BlockLocal(128)": {"type": "block_local", "block": 128},
    "Dilated(512, 2)": {"type": "dilated", "window": 512, "dilation": 2},
    "Strided(128)": {"type": "strided", "stride": 128},
    "Fixed(128, 8)": {"type": "fixed", "block": 128, "summary": 8},
    "BigBird(64)": {"type": "bigbird", "block": 64},
    "Random(64, 3)": {"type": "random", "block": 64, "num_blocks": 3},
    "SlidingWindow(512) | Global(every 512)": {
        "type": "union",
        "parts": [{"type": "sliding_window", "window": 512}, {"type": "global", "every": 512}],
    },
    "SlidingWindow(512) | Strided(128)": {
        "type": "union",
        "parts": [{"type": "sliding_window", "window": 512}, {"type": "strided", "stride": 128}],
    },
    "LSH(64)": {"type": "lsh", "bucket_size": 64},
    "TopKBlocks(64, 4)": {"type": "topk_blocks", "block": 64, "k": 4},
}


def _pairs_and_extra_flops(spec, q, k) -> tuple[int, int]:
    """(allowed pairs over all heads, FLOPs of the selection itself): counted on the plan's tiles."""
    from hf_sparse.patterns import LSH, from_dict
    from hf_sparse.patterns.base import count_component_pairs

    pattern = from_dict(spec)
    n = q.shape[-2]
    plan = pattern.bind(n, query=q, key=k).plan(n)
    pairs = 0
    for p in plan.per_head or [plan]:
        for c in p.components:
            heads = max(
                [c.layout.kv_index.shape[1]] + [t.shape[1] for t in (c.q_index, c.k_index) if t is not None]
            )
            pairs += count_component_pairs(c, n, n) * (1 if plan.per_head else H // heads)
    extra = 0
    if isinstance(pattern, LSH):  # q and k, each (n * H) x D by D x buckets / 2, per round
        extra = 2 * 2 * n * H * D * (pattern.num_buckets(n) // 2) * pattern.num_hashes
    return pairs, extra


def worker(name: str, mode: str, budget_s: float) -> dict:
    import torch

    from hf_sparse import sparse_attention

    torch.manual_seed(0)
    spec = PATTERNS[name]
    q, k, v = (torch.randn(1, H, N, D) for _ in range(3))
    pairs, extra = _pairs_and_extra_flops(spec, q, k)
    if mode == "fwd":

        def fn():
            with torch.no_grad():
                sparse_attention(q, k, v, spec, backend="blocked")

    else:
        leaves = [t.requires_grad_() for t in (q, k, v)]

        def fn():
            _backward(sparse_attention(*leaves, spec, backend="blocked"), leaves)

    return {**_measure(fn, "cpu", budget_s), "pairs": pairs, "extra_flops": extra}


def _spawn(name, mode, budget_s) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps([name, mode, budget_s])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return {"error": tail[0][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(names, budget_s: float, attempts: int) -> dict:
    import torch

    results = {
        "n": N,
        "heads": H,
        "head_dim": D,
        "processor": _cpu_name(),
        "torch": torch.__version__,
        "rows": [],
    }
    for name in names:
        for attempt in range(1, attempts + 1):
            before = matmul_gflops("cpu")
            recs = {mode: _spawn(name, mode, budget_s) for mode in ("fwd", "fwd+bwd")}
            after = matmul_gflops("cpu")
            moved = (after - before) / before
            still_moved = abs(moved) > MAX_RATE_MOVE
            if not still_moved or attempt == attempts:
                break
            print(f"{name}: the matmul rate moved {moved:+.0%}: repeating", flush=True)
        row = {"pattern": name, "matmul_before": before, "matmul_after": after, "attempt": attempt}
        if still_moved:
            row["rate_moved"] = moved
        for mode, rec in recs.items():
            row[mode] = _with_ratios(rec, mode, (before + after) / 2 * 1e9)
        row["pairs_per_query"] = recs["fwd"].get("pairs", 0) / (H * N)
        print(_line(row), flush=True)
        results["rows"].append(row)
    return results


def _with_ratios(rec: dict, mode: str, rate: float) -> dict:
    """rec with its time as a multiple of the bound at ``rate`` FLOP/s: the pairs' products (3x for
    forward+backward) and, where the pattern selects keys by hashing, those products once (buckets are
    discrete: no gradient flows through them, so the backward does not repeat them)."""
    if "time_s" not in rec:
        return rec
    bound = 4 * rec["pairs"] * D * (3 if mode == "fwd+bwd" else 1) / rate
    rec["x_bound"] = rec["time_s"] / bound
    if rec["extra_flops"]:
        rec["x_bound_with_selection"] = rec["time_s"] / (bound + rec["extra_flops"] / rate)
    return rec


def _cell(rec, key):
    return f"{rec[key]:.2f}" if key in rec else "—"


def _line(row):
    f, b = row["fwd"], row["fwd+bwd"]
    if "time_s" not in f or "time_s" not in b:
        return f"{row['pattern']}: {f.get('error') or b.get('error')}"
    return (
        f"{row['pattern']:<40} fwd {f['time_s']:.3f}s x{f['x_bound']:.2f}  fwd+bwd {b['time_s']:.3f}s "
        f"x{b['x_bound']:.2f}  matmul {row['matmul_before']:.0f} -> {row['matmul_after']:.0f}"
    )


def report(results) -> str:
    lines = [
        "# Every pattern family at 16k tokens (CPU)",
        "",
        f"{results['processor']}, torch {results['torch']}, B=1, H={H}, D={D}, float32, n = {results['n']:,}; "
        "`python scripts/benchmark_patterns.py` (part of `make bench`).",
        "",
        'Each pattern runs through `sparse_attention(..., backend="blocked")` (what `auto` picks on CPU at this '
        "length) in a fresh process; times are medians. `x bound` = time / (matmul FLOPs of the allowed pairs, "
        "forward 4 * pairs * D, forward+backward 3x, at the mean of the matmul rates measured before and after "
        "the pattern's runs, GFLOP/s; a pattern whose rate moved by more than 10% was run again). "
        "Content-based patterns bind on the same q, k first (inside the timed call: hashing and block "
        "selection are part of the time); LSH's `with hashing` column adds its hashing products to the bound "
        "(once: no gradient flows through the buckets).",
        "",
        "| pattern | pairs / query | fwd (s) | fwd x bound | fwd+bwd (s) | fwd+bwd x bound | x bound with hashing (fwd / fwd+bwd) | matmul (GFLOP/s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        f, b = row["fwd"], row["fwd+bwd"]
        hashing = "—"
        if "x_bound_with_selection" in f:
            hashing = f"{_cell(f, 'x_bound_with_selection')} / {_cell(b, 'x_bound_with_selection')}"
        lines.append(
            f"| {row['pattern'].replace('|', chr(92) + '|')} | {row['pairs_per_query']:.1f} | "
            f"{f.get('time_s', float('nan')):.3f} | {_cell(f, 'x_bound')} | {b.get('time_s', float('nan')):.3f} | "
            f"{_cell(b, 'x_bound')} | {hashing} | {row['matmul_before']:.0f} -> {row['matmul_after']:.0f}"
            f"{'*' if 'rate_moved' in row else ''} |"
        )
    lines += ["", "\\* the matmul rate still moved by more than 10% in the pattern's last run."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out",
        help=f"folder for patterns.json and patterns.md (default {OUT}, the committed results of a full run; "
        "a run with --only must name its own folder)",
    )
    ap.add_argument(
        "--only", nargs="+", help=f"patterns whose name contains one of these (from {'; '.join(PATTERNS)})"
    )
    ap.add_argument("--budget-s", type=float, default=6.0, help="time per (pattern, mode) for timed calls")
    ap.add_argument("--attempts", type=int, default=2, help="runs of a pattern whose matmul rate moved")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*json.loads(args.worker))))
        return
    if args.attempts < 1:
        ap.error(f"--attempts must be >= 1, got {args.attempts}")
    unmatched = [s for s in args.only or [] if not any(s in p for p in PATTERNS)]
    if unmatched:
        ap.error(f"--only {' '.join(unmatched)} matches no pattern; choose from {'; '.join(PATTERNS)}")
    names = [p for p in PATTERNS if not args.only or any(s in p for s in args.only)]
    if args.only and args.out is None:
        ap.error(
            f"--only writes a partial table: give --out (the default, {OUT}, holds the full run's results)"
        )
    out = args.out or OUT
    t0 = time.time()
    results = run(names, args.budget_s, args.attempts)
    atomic_write(os.path.join(out, "patterns.json"), json.dumps(results, indent=1))
    atomic_write(os.path.join(out, "patterns.md"), report(results))
    print(f"wrote {out}/patterns.md in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
