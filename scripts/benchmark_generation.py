"""Decoding speed: SparseTransformerForCausalLM's pattern cache vs transformers' Llama with its DynamicCache.

Milliseconds per generated token (B=1, greedy, one token per forward, after a prefill of n tokens) of causal
LMs of the same size as ``benchmark_models.py`` (hidden 768, 12 heads, FFN 3072, 2 layers, vocabulary 1024),
for Causal, Strided(128), SlidingWindow(512) and Fixed(128, 16) with ``hf_sparse.SparsePatternCache``, each
also with the cache concatenating every token onto a copy of the stored keys (what transformers'
``DynamicLayer.update`` does; the rows marked ``concatenating``), and LlamaForCausalLM (dense SDPA,
``DynamicCache``; its SwiGLU feed-forward has 1.5x the FFN weights). The variants of one n run in one
process, alternating, from copies of the same prefilled cache; each figure is the median of ``--repeats``
runs of ``--steps`` tokens.

A decoding step at B=1 reads every weight and every stored key and value once, so ``x bytes`` divides the
time by (weight bytes + stored key/value bytes) / the host's read rate (``torch.sum`` over 1 GB, measured
before and after each n, as the 4096^2 matmul rate is).

    python scripts/benchmark_generation.py               # -> benchmarks/generation.{json,md}
    python scripts/benchmark_generation.py --sizes 8192 --steps 16 --out outputs/bench

A partial run (``--sizes``) must name its folder with ``--out``: the default, benchmarks/, holds the committed
results of a full run.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import time

from benchmark_attention import matmul_gflops  # scripts/ is on sys.path when run as a script
from benchmark_models import SHAPE

from hf_sparse.utils.io import atomic_write

OUT = "benchmarks"  # the committed results of a full run
SIZES = [1024, 8192, 32768]
PATTERNS = {
    "Causal": lambda P: P.Causal(),
    "Strided(128)": lambda P: P.Strided(stride=128, causal=True),
    "SlidingWindow(512)": lambda P: P.SlidingWindow(window=512, causal=True),
    "Fixed(128, 16)": lambda P: P.Fixed(block=128, summary=16, causal=True),
}
CONCATENATING = " (concatenating)"
LLAMA = "LlamaForCausalLM (dense SDPA, DynamicCache)"


def read_gbs() -> float:
    """fp32 read rate of ``torch.sum`` over 1 GB, GB/s (median of 5)."""
    import torch

    x = torch.ones(1 << 28)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - t0)
    return x.numel() * 4 / statistics.median(times) / 1e9


def config(name: str, n: int):
    """The config of model ``name`` for an ``n``-token prompt (``ValueError`` where its pattern does not fit)."""
    from transformers import LlamaConfig

    from hf_sparse import SparseTransformerConfig
    from hf_sparse import patterns as P

    if name == LLAMA:
        return LlamaConfig(
            **SHAPE, num_key_value_heads=SHAPE["num_attention_heads"], max_position_embeddings=2 * n
        )
    return SparseTransformerConfig(
        **SHAPE,
        attention_pattern=PATTERNS[name](P),
        max_position_embeddings=2 * n,
        is_decoder=True,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def build(name: str, n: int):
    import torch
    from transformers import LlamaForCausalLM

    from hf_sparse import SparseTransformerForCausalLM

    torch.manual_seed(0)
    cls = LlamaForCausalLM if name == LLAMA else SparseTransformerForCausalLM
    return cls(config(name, n)).eval()


def _stored_bytes(cache) -> int:
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


def decode(model, cache, token, steps: int, concatenating: bool):
    """ms per token over ``steps`` greedy steps from (a copy of) ``cache``; the stored bytes at the end."""
    import torch

    from hf_sparse.models.sparse_transformer.cache_sparse_transformer import PatternCacheLayer

    append = PatternCacheLayer._append
    if concatenating:
        PatternCacheLayer._append = lambda self, stored, new, which: torch.cat([stored, new], dim=-2)
    try:
        cache = copy.deepcopy(cache)
        with torch.no_grad():
            t0 = time.perf_counter()
            for _ in range(steps):
                token = model(token, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
            elapsed = time.perf_counter() - t0
    finally:
        PatternCacheLayer._append = append
    return elapsed / steps * 1e3, _stored_bytes(cache)


def run_size(names, n: int, steps: int, repeats: int) -> list[dict]:
    import torch

    rates = {"matmul_before": matmul_gflops("cpu"), "read_before": read_gbs()}
    runs, prefilled = {}, {}
    for name in names:
        if name.endswith(CONCATENATING):  # the same model and prefilled cache as its pattern's row
            prefilled[name] = prefilled[name.removesuffix(CONCATENATING)]
            continue
        model = build(name, n)
        ids = torch.randint(5, SHAPE["vocab_size"], (1, n))
        with torch.no_grad():
            t0 = time.perf_counter()
            out = model(ids, use_cache=True)
            prefill = time.perf_counter() - t0
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        prefilled[name] = (model, out.past_key_values, out.logits[:, -1:].argmax(-1), prefill, weights)
    for _ in range(repeats):  # alternate the variants, so a slower phase of the host touches them all
        for name in names:
            model, cache, token, _, _ = prefilled[name]
            ms, stored = decode(model, cache, token, steps, name.endswith(CONCATENATING))
            runs.setdefault(name, []).append(ms)
            runs[name + " bytes"] = stored
    rates.update(matmul_after=matmul_gflops("cpu"), read_after=read_gbs())
    read = (rates["read_before"] + rates["read_after"]) / 2 * 1e9
    rows = []
    for name in names:
        _, _, _, prefill, weights = prefilled[name]
        ms = statistics.median(runs[name])
        stored = runs[name + " bytes"]
        rows.append(
            dict(
                model=name, n=n, ms_per_token=ms, runs_ms=runs[name], prefill_s=prefill, stored_mb=stored / 2**20,
                x_bytes=ms / 1e3 / ((weights + stored) / read), **rates,
            )
        )  # fmt: skip
    base = next((r["ms_per_token"] for r in rows if r["model"] == LLAMA), None)
    for row in rows:
        row["speedup_vs_llama"] = base / row["ms_per_token"] if base else None
    return rows


def report(results) -> str:
    lines = [
        "# Decoding: ms per generated token after an n-token prompt (CPU)",
        "",
        f"{results['processor']}, torch {results['torch']}, transformers {results['transformers']}, "
        f"{results['threads']} threads; `python scripts/benchmark_generation.py` (part of `make bench`, "
        f"{results['wall_s'] / 60:.0f} min).",
        "",
        "B=1, hidden 768, 12 heads, FFN 3072, 2 layers, vocabulary 1024, float32, greedy, one token per forward. "
        f"Median of {results['repeats']} runs of {results['steps']} tokens, the variants of one n alternating in one "
        "process from copies of one prefilled cache. `concatenating`: the same cache copying its stored keys at "
        "every token, as transformers' `DynamicLayer.update` does. `x bytes`: the time over (weights + stored "
        "keys and values) / the read rate. Matmul GFLOP/s and read GB/s before -> after each n.",
        "",
        "| model | n | ms/token | x bytes | stored K/V (MB) | speed-up vs Llama | prefill (s) | matmul (GFLOP/s) | read (GB/s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        lines.append(
            f"| {r['model']} | {r['n']:,} | {r['ms_per_token']:.2f} | {r['x_bytes']:.2f}x | {r['stored_mb']:.1f} | "
            f"{r['speedup_vs_llama']:.2f}x | {r['prefill_s']:.2f} | {r['matmul_before']:.0f} -> "
            f"{r['matmul_after']:.0f} | {r['read_before']:.1f} -> {r['read_after']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out",
        help=f"folder for generation.json and generation.md (default {OUT}, the committed results of a full run; "
        "a partial run, with --sizes, must name its own folder)",
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=SIZES, help="prompt lengths")
    ap.add_argument("--steps", type=int, default=32, help="tokens per timed run")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per model and n")
    args = ap.parse_args(argv)
    for flag in ("steps", "repeats"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    for n in args.sizes:
        if n < 1:
            ap.error(f"--sizes must be >= 1, got {n}")
        for name in PATTERNS:  # before measuring anything: each pattern must fit the model's positions
            try:
                config(name, n)
            except ValueError as e:
                ap.error(f"--sizes {n} is too short for {name} (the models hold 2 x n positions): {e}")
    if args.out is None and args.sizes != SIZES:
        ap.error(
            f"--sizes writes a partial table: give --out (the default, {OUT}, holds the full run's results)"
        )
    out = args.out or OUT
    import torch
    import transformers

    names = [LLAMA] + [p + suffix for p in PATTERNS for suffix in ("", CONCATENATING)]
    t0 = time.time()
    rows = []
    for n in args.sizes:
        rows += run_size(names, n, args.steps, args.repeats)
        for r in rows[-len(names) :]:
            print(f"{r['model']:<45} n={n:>6,} {r['ms_per_token']:8.2f} ms/token  x{r['x_bytes']:.2f} bytes")
    results = dict(
        processor=platform.processor() or platform.machine(), torch=torch.__version__,
        transformers=transformers.__version__, threads=torch.get_num_threads(), steps=args.steps,
        repeats=args.repeats, wall_s=time.time() - t0, rows=rows,
    )  # fmt: skip
    atomic_write(os.path.join(out, "generation.json"), json.dumps(results, indent=1))
    atomic_write(os.path.join(out, "generation.md"), report(results))
    print(f"wrote {out}/generation.md in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
