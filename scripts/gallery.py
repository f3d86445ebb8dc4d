"""Pattern gallery (``make gallery``): a heatmap of every pattern family and a quick benchmark.

Writes outputs/gallery/*.png (one heatmap per pattern + a grid), outputs/gallery/patterns.md
(rule, density at 4k and 16k tokens), and outputs/bench/attention.{md,json,png}.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

OUT = os.environ.get("HF_SPARSE_OUT", "outputs")


def gallery_patterns() -> dict:
    """The gallery's patterns by label (imported here, so that ``--help`` loads no torch)."""
    from hf_sparse import patterns as P

    return {
        "SlidingWindow(window=32)": P.SlidingWindow(window=32),
        "SlidingWindow(window=16, causal=True)": P.SlidingWindow(window=16, causal=True),
        "Causal()": P.Causal(),
        "Strided(stride=16)": P.Strided(stride=16),
        "Fixed(block=32, summary=4)": P.Fixed(block=32, summary=4),
        "Dilated(window=16, dilation=3)": P.Dilated(window=16, dilation=3),
        "BlockLocal(block=32)": P.BlockLocal(block=32),
        "Global(indices=[0, 64])": P.Global(indices=[0, 64]),
        "Random(block=16, num_blocks=2)": P.Random(block=16, num_blocks=2, seed=0),
        "BigBird(block=8, random_blocks=2)": P.BigBird(block=8, random_blocks=2, seed=0),
        "SlidingWindow(32) | Global(every=40)": P.SlidingWindow(window=32) | P.Global(every=40),
        "Strided(16) & SlidingWindow(48, causal)": P.Strided(stride=16)
        & P.SlidingWindow(window=48, causal=True),
    }


#: each gallery pattern's rule, "query i attends key j iff ...", for these parameters (patterns.md's rule column)
RULES = {
    "SlidingWindow(window=32)": "`|i - j| <= 16`",
    "SlidingWindow(window=16, causal=True)": "`0 <= i - j < 16`",
    "Causal()": "`j <= i`",
    "Strided(stride=16)": "`j <= i` and (`i - j < 16` or `(i - j) % 16 == 0`)",
    "Fixed(block=32, summary=4)": "`j <= i` and (`i // 32 == j // 32` or `j % 32 >= 28`)",
    "Dilated(window=16, dilation=3)": "`|i - j| <= 24` and `(i - j) % 3 == 0`",
    "BlockLocal(block=32)": "`i // 32 == j // 32`",
    "Global(indices=[0, 64])": "i or j is 0 or 64",
    "Random(block=16, num_blocks=2)": "`j // 16` is one of the 2 seeded random blocks drawn for `i // 16`",
    "BigBird(block=8, random_blocks=2)": "`|i // 8 - j // 8| <= 1`, or `j // 8` is one of the 2 seeded random "
    "blocks drawn for `i // 8`, or i or j is in the first or the last block of 8",
    "SlidingWindow(32) | Global(every=40)": "`|i - j| <= 16` or `i % 40 == 0` or `j % 40 == 0`",
    "Strided(16) & SlidingWindow(48, causal)": "`0 <= i - j < 48` and (`i - j < 16` or `(i - j) % 16 == 0`)",
    "LSH(bucket_size=16)": "i's query and j's key fall in the same angular-LSH bucket (about n / 16 buckets)",
    "TopKBlocks(block=16, k=3)": "`j // 16` is `i // 16` or one of the 2 other key blocks whose mean key scores "
    "highest against block `i // 16`'s mean query",
}


def content_examples(n):
    """LSH and top-k blocks need queries and keys: random vectors, seeded."""
    import torch

    from hf_sparse import patterns as P

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1, n, 16, generator=g)
    return {
        "LSH(bucket_size=16)": P.LSH(bucket_size=16).bind(n, query=x, key=x),
        "TopKBlocks(block=16, k=3)": P.TopKBlocks(block=16, k=3).bind(n, query=x, key=x),
    }


def table_row(*cells: str) -> str:
    """One row of a Markdown table; a ``|`` inside a cell (``a | b``, ``|i - j|``) escaped so it splits no cell."""
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def gallery(n=128):
    from hf_sparse.utils.io import atomic_write
    from hf_sparse.viz import _save, plot_pattern, pyplot

    out = os.path.join(OUT, "gallery")
    os.makedirs(out, exist_ok=True)
    items = {**gallery_patterns(), **content_examples(n)}
    plt = pyplot()
    cols = 4
    rows = -(-len(items) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.4 * rows), squeeze=False)
    lines = [
        "# Pattern gallery",
        "",
        "| pattern | query i attends key j iff | density n=4,096 | density n=16,384 |",
        "|---|---|---|---|",
    ]
    for ax, (name, p) in zip(axes.flat, items.items()):
        plot_pattern(p, n, ax=ax, title=name)
        slug = "".join(ch if ch.isalnum() else "_" for ch in name).strip("_")
        plot_pattern(p, n, path=os.path.join(out, f"{slug}.png"), title=name)
        dens = (
            ["(content-based)"] * 2
            if name in ("LSH(bucket_size=16)", "TopKBlocks(block=16, k=3)")
            else [f"{p.density(m):.2%}" for m in (4096, 16384)]
        )
        lines.append(table_row(f"`{name}`", RULES[name], *dens))
    for ax in list(axes.flat)[len(items) :]:
        ax.axis("off")
    fig.tight_layout()
    _save(fig, os.path.join(out, "gallery.png"))
    atomic_write(os.path.join(out, "patterns.md"), "\n".join(lines) + "\n")
    print(f"gallery: {len(items)} patterns -> {out}/gallery.png, {out}/patterns.md")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Pattern gallery (a heatmap per pattern family, patterns.md) and a quick attention "
        "benchmark (make gallery)."
    )
    parser.add_argument(
        "--out", default=OUT, help="Output folder (default: $HF_SPARSE_OUT or outputs): gallery/ and bench/."
    )
    parser.add_argument("--no-bench", action="store_true", help="Draw the gallery only, skip the benchmark.")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    global OUT
    args = parse_args(argv)
    OUT = args.out
    t0 = time.time()
    gallery()
    if args.no_bench:
        print(f"\nDone in {time.time() - t0:.0f} s. Open {OUT}/gallery/gallery.png")
        return 0
    bench = os.path.join(OUT, "bench")
    script = os.path.join(os.path.dirname(__file__), "benchmark_attention.py")
    subprocess.run([sys.executable, script, "--quick", "--out", bench], check=True)
    print(f"\nDone in {time.time() - t0:.0f} s. Open {OUT}/gallery/gallery.png and {bench}/attention.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
