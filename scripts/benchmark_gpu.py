"""Attention kernels and models on a CUDA GPU, bfloat16: hf-sparse (FlexAttention, blocked) vs SDPA
(full: FlashAttention; and with the band as a mask), compiled FlexAttention with a prebuilt BlockMask,
``flash_attn``'s ``window_size`` (where that package is installed) and transformers' Longformer.

For n = 4k .. 64k tokens (B=1, H=12, D=64) the median forward and forward+backward time (CUDA events,
after a warm-up call that compiles) and the peak memory above the inputs, each time also as a multiple
of its FLOP bound (matmul FLOPs of exactly the allowed pairs, forward 4*pairs*D, forward+backward 3x,
at the bf16 8192^3 matmul rate measured before and after every kernel); also with attention dropout 0.1
(FlexAttention, and the blocked path that ``auto`` runs dropout on). Then one training step (forward+backward,
bf16 autocast) of SparseTransformerForMaskedLM vs LongformerForMaskedLM (hidden 768, 12 heads, 2 layers,
window 512) in tokens/s, without and with attention dropout 0.1.

    python scripts/benchmark_gpu.py --out benchmarks        # -> attention_gpu.{json,md}
    python scripts/benchmark_gpu.py --sizes 4096 --only flex --out outputs/bench-gpu   # a quick look

A partial run (``--only``, ``--models``, ``--sizes``, ``--model-sizes``, ``--device cpu``) must name its folder with
``--out``: the default, benchmarks/, holds the committed results.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmark_attention import size_label  # noqa: E402  (scripts/ is on sys.path when run as a script)

from hf_sparse.utils.io import atomic_write  # noqa: E402

H, D, WINDOW = 12, 64, 512
OUT = "benchmarks"  # the committed results
SIZES = [4096, 16384, 32768, 65536]
MODEL_SIZES = [4096, 16384]
PATTERNS = {
    "SlidingWindow(512)": {"type": "sliding_window", "window": WINDOW},
    "SlidingWindow(512, causal)": {"type": "sliding_window", "window": WINDOW, "causal": True},
    "BigBird(64)": {"type": "bigbird", "block": 64},
    "Strided(128)": {"type": "strided", "stride": 128},
}
BAND = PATTERNS["SlidingWindow(512)"]
# benchmark_models' names: the last two train with attention dropout 0.1 (the configs' default)
MODELS = [
    "SparseTransformerForMaskedLM",
    "LongformerForMaskedLM",
    "SparseTransformerForMaskedLM (attention dropout 0.1)",
    "LongformerForMaskedLM (attention dropout 0.1)",
]
DEVICE = "cuda"  # --device cpu: a dry run of the script itself (no events, no memory figures)


def _kernels():
    """name -> (what it computes: a pattern spec or None for full attention, the runner's builder), the
    most wanted first (``--deadline`` cuts the tail)."""
    ks = {
        "SDPA full (FlashAttention)": (None, _sdpa_full),
        "hf-sparse flex SlidingWindow(512)": (BAND, lambda q, k, v: _hf(q, k, v, BAND, "flex")),
        "FlexAttention, prebuilt BlockMask, SlidingWindow(512)": (
            BAND,
            lambda q, k, v: _prebuilt(q, k, v, BAND),
        ),
        "flash_attn window_size (SlidingWindow(512))": (BAND, _flash_attn_window),
        "Longformer core (SlidingWindow(512))": (BAND, _longformer_core),
        "SDPA band mask": (BAND, _sdpa_band),
    }
    for name, spec in list(PATTERNS.items())[1:]:
        ks[f"hf-sparse flex {name}"] = (spec, lambda q, k, v, s=spec: _hf(q, k, v, s, "flex"))
        ks[f"FlexAttention, prebuilt BlockMask, {name}"] = (
            spec,
            lambda q, k, v, s=spec: _prebuilt(q, k, v, s),
        )
    for name, spec in PATTERNS.items():
        ks[f"hf-sparse blocked {name}"] = (spec, lambda q, k, v, s=spec: _hf(q, k, v, s, "blocked"))
    # what a model trains with by default: attention dropout 0.1 (the blocked path once: it is slow)
    for name, spec in PATTERNS.items():
        ks[f"hf-sparse flex {name} (dropout 0.1)"] = (
            spec,
            lambda q, k, v, s=spec: _hf(q, k, v, s, "flex", 0.1),
        )
    ks["hf-sparse blocked SlidingWindow(512) (dropout 0.1)"] = (
        BAND,
        lambda q, k, v: _hf(q, k, v, BAND, "blocked", 0.1),
    )
    return ks


# ----------------------------------------------------------------------------- runners: (q, k, v) -> fn()


def _hf(q, k, v, spec, backend, dropout_p=0.0):
    from hf_sparse import sparse_attention

    return lambda: sparse_attention(q, k, v, spec, backend=backend, dropout_p=dropout_p)


def _prebuilt(q, k, v, spec):
    """The compiled FlexAttention call alone, with the BlockMask built once (what the wrapper builds per call)."""
    from hf_sparse.attention.dispatch import choose_block, resolve_pattern
    from hf_sparse.attention.flex import flex_block_mask, run_flex

    n = q.shape[-2]
    bound = resolve_pattern(spec).bind(n, n, query=q, key=k)
    mask = flex_block_mask(bound, None, 1, H, n, n, choose_block(bound, n), q.device)
    return lambda: run_flex(q, k, v, mask, 1 / math.sqrt(D))


def _sdpa_full(q, k, v):
    import torch.nn.functional as F

    return lambda: F.scaled_dot_product_attention(q, k, v)


def _sdpa_band(q, k, v):
    import torch
    import torch.nn.functional as F

    i = torch.arange(q.shape[-2], device=q.device)
    mask = (i[:, None] - i[None, :]).abs() <= WINDOW // 2
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _flash_attn_window(q, k, v):
    from flash_attn import flash_attn_func  # raises ImportError where the package is not installed

    q, k, v = (t.detach().transpose(1, 2).contiguous().requires_grad_(t.requires_grad) for t in (q, k, v))
    return lambda: flash_attn_func(q, k, v, window_size=(WINDOW // 2, WINDOW // 2))


def _longformer_core(q, k, v):
    """LongformerSelfAttention's attention on already-projected q/k/v: the layer's forward with its
    query/key/value projections replaced by the identity on a (1, n, H*D) input."""
    import torch
    from transformers import LongformerConfig
    from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

    class Take(torch.nn.Module):  # stands in for a projection: gives its own (1, n, H*D) tensor
        def __init__(self, t):
            super().__init__()
            self.t = t.detach().transpose(1, 2).reshape(1, n, H * D).requires_grad_(t.requires_grad)

        def forward(self, hidden):
            return self.t.clone()  # Longformer scales the query in place

    n = q.shape[-2]
    cfg = LongformerConfig(hidden_size=H * D, num_attention_heads=H, attention_window=[WINDOW])
    layer = LongformerSelfAttention(cfg, 0).to(q.device, q.dtype)
    layer.query, layer.key, layer.value = Take(q), Take(k), Take(v)
    hidden = torch.empty(1, n, H * D, device=q.device, dtype=q.dtype)
    mask = torch.zeros(1, n, device=q.device)
    kw = dict(
        attention_mask=mask, is_index_masked=mask < 0, is_index_global_attn=mask > 0, is_global_attn=False
    )
    return lambda: layer(hidden, **kw)[0]


# ----------------------------------------------------------------------------- measuring


def matmul_tflops() -> float:
    """bf16 8192^3 matmul rate (median of 10 after 3 warm-ups, CUDA events), TFLOP/s."""
    import torch

    size = 8192 if DEVICE == "cuda" else 1024
    a, b = (torch.randn(size, size, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    return 2 * size**3 / _time(lambda: a @ b, reps=10) / 1e12


def _time(fn, reps: int) -> float:
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        if DEVICE != "cuda":
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def _first_call(fn) -> float:
    import torch

    t0 = time.perf_counter()
    fn()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def _peak_mb(fn, above_inputs=True) -> float:
    """Peak device memory of one call, MB (above what was allocated before it, or in all)."""
    import torch

    if DEVICE != "cuda":
        return float("nan")
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if above_inputs else 0
    fn()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def allowed_pairs(spec, n: int) -> int:
    from hf_sparse import patterns as P

    return n * n if spec is None else round(P.from_dict(spec).density(n) * n * n)


def measure(name: str, n: int, grad: bool, budget_s: float) -> dict:
    import torch

    spec, build = _kernels()[name]
    torch.manual_seed(0)
    q, k, v = (
        torch.randn(1, H, n, D, device=DEVICE, dtype=torch.bfloat16, requires_grad=grad) for _ in range(3)
    )
    run = build(q, k, v)
    leaves = [t for t in (q, k, v) if t.requires_grad]
    if grad:  # the runner may have made its own leaves (layouts of other libraries): take theirs
        probe = run()
        leaves = [t for t in _leaves(probe) if t.requires_grad] or leaves
        dout = torch.randn_like(probe)
        del probe

        def fn():
            for t in leaves:
                t.grad = None
            run().backward(dout)
    else:

        def fn():
            with torch.no_grad():
                run()

    rate0 = matmul_tflops()
    first = _first_call(fn)
    peak = _peak_mb(fn)
    t = _time(fn, reps=max(3, min(20, int(budget_s / max(first, 1e-3)))))
    rate1 = matmul_tflops()
    flops = 4 * allowed_pairs(spec, n) * D * H * (3 if grad else 1)
    rate = (rate0 + rate1) / 2
    return {
        "kernel": name,
        "n": n,
        "mode": "fwd+bwd" if grad else "fwd",
        "time_s": t,
        "first_call_s": first,
        "peak_mb": peak,
        "tflops_before": rate0,
        "tflops_after": rate1,
        "x_bound": t / (flops / (rate * 1e12)),
        "tokens_per_s": n / t,
    }


def _free():
    import torch

    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def _leaves(out):
    """The leaf tensors an output depends on (walks the autograd graph)."""
    seen, stack, found = set(), [out.grad_fn], []
    while stack:
        f = stack.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        if hasattr(f, "variable"):
            found.append(f.variable)
        stack.extend(g for g, _ in f.next_functions)
    return found


def model_step(name: str, n: int, budget_s: float) -> dict:
    """One masked-LM training step (forward+backward) under bf16 autocast, tokens/s and x its FLOP bound."""
    import torch

    from scripts.benchmark_models import build, step_flops

    torch.manual_seed(0)
    model = build(name, n).to(DEVICE).train()
    ids = torch.randint(5, 1024, (1, n), device=DEVICE)
    gm = torch.zeros_like(ids)
    gm[:, 0] = 1

    def step():
        model.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids, global_attention_mask=gm).loss
        loss.backward()

    rate0 = matmul_tflops()
    first = _first_call(step)
    peak = _peak_mb(step, above_inputs=False)
    t = _time(step, reps=max(3, min(10, int(budget_s / max(first, 1e-3)))))
    rate1 = matmul_tflops()
    flops = step_flops(name, model, n)["step_flops"]
    return {
        "model": name,
        "n": n,
        "time_s": t,
        "first_call_s": first,
        "tokens_per_s": n / t,
        "peak_mb": peak,
        "tflops_before": rate0,
        "tflops_after": rate1,
        "x_bound": t / (flops / ((rate0 + rate1) / 2 * 1e12)),
    }


# ----------------------------------------------------------------------------- report


def merge_runs(paths: list[str]) -> dict:
    """One result from several runs' attention_gpu.json, in order: a later run's row replaces an earlier
    one's (same kernel and mode: a row's figures all come from one run); every figure keeps the number
    of its run, every run its machine."""
    runs, kernels, models, notes = [], {}, {}, []
    results = []
    for path in paths:
        with open(path) as f:
            results += _split_runs(json.load(f))
    for i, res in enumerate(results, 1):
        runs.append(res["env"])
        rows = {(r["kernel"], r["mode"]) for r in res["kernels"]}
        kernels = {key: r for key, r in kernels.items() if (key[0], key[2]) not in rows}
        kernels.update({(r["kernel"], r["n"], r["mode"]): dict(r, run=i) for r in res["kernels"]})
        models.update({(r["model"], r["n"]): dict(r, run=i) for r in res["models"]})
        notes += [(i, note) for note in res["notes"]]
    order = {name: i for i, name in enumerate(_kernels())}  # the script's order of rows, not the runs'
    final = sorted(kernels.values(), key=lambda r: (order.get(r["kernel"], len(order)), r["n"]))
    kept = [  # a run's note on a failure stays where that run's figure is the one shown
        f"run {i}: {note}"
        for i, note in notes
        if any(
            r["run"] == i and "error" in r and note.startswith(r["kernel"])
            and ("at n=" not in note or f"at n={r['n']} ({r['mode']})" in note)
            for r in final
        )
    ]  # fmt: skip
    return {"runs": runs, "kernels": final, "models": list(models.values()), "notes": kept}


def _split_runs(res: dict) -> list[dict]:
    """A run's result as it is; an earlier merge's (``runs``) as its runs again, in order, each with its rows
    and notes, so that a new run can be merged into the committed table."""
    if "runs" not in res:
        return [res]
    return [
        {
            "env": env,
            "kernels": [r for r in res["kernels"] if r["run"] == i],
            "models": [r for r in res["models"] if r["run"] == i],
            "notes": [n.split(": ", 1)[1] for n in res["notes"] if n.startswith(f"run {i}: ")],
        }
        for i, env in enumerate(res["runs"], 1)
    ]


def write_markdown(res: dict, path: str):
    runs = res.get("runs") or [res["env"]]
    several = len(runs) > 1
    lines = ["# Attention and models on a GPU (bf16)", ""]
    for i, env in enumerate(runs, 1):
        lines.append(
            f"{f'Run {i}: ' if several else ''}{env['device']}; torch {env['torch']}, transformers "
            f"{env['transformers']}, flash_attn {env['flash_attn']}; bf16 8192^3 matmul "
            f"{env['tflops_min']:.0f}-{env['tflops_max']:.0f} TFLOP/s over the run.{'  ' if several else ''}"
        )
    lines += [
        "",
        "Written by `python scripts/benchmark_gpu.py --out benchmarks` (B=1, H=12, D=64; CUDA events, median "
        "after a warm-up call that compiles; each figure's own before/after matmul rates are in "
        "attention_gpu.json). Each cell: time, (x FLOP bound of the allowed pairs at that rate), peak MB "
        "above the inputs. `-`: not run."
        + (
            " A row from an earlier run than the last names it; runs were merged with `--merge`."
            if several
            else ""
        ),
        "",
    ]
    sizes = sorted({r["n"] for r in res["kernels"]})
    for mode in ("fwd", "fwd+bwd"):
        lines += [f"## {mode}", "", "| kernel | " + " | ".join(size_label(n) for n in sizes) + " |"]
        lines.append("|---" * (len(sizes) + 1) + "|")
        for name in dict.fromkeys(r["kernel"] for r in res["kernels"]):
            row = {r["n"]: r for r in res["kernels"] if (r["kernel"], r["mode"]) == (name, mode)}
            cells = []
            for n in sizes:
                r = row.get(n)
                if r is None:
                    cells.append("-")
                elif "error" in r:
                    cells.append(r["error"])
                else:
                    cells.append(f"{r['time_s'] * 1e3:.2f} ms ({r['x_bound']:.1f}x), {r['peak_mb']:.0f} MB")
            run = {r.get("run", len(runs)) for r in row.values()}
            label = f"{name} (run {min(run)})" if several and max(run) < len(runs) else name
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    if res["models"]:
        lines += ["## Models: one masked-LM training step, bf16 autocast", "",
                  "| model | n | step | tokens/s | x FLOP bound | peak MB |", "|---|---|---|---|---|---|"]  # fmt: skip
        for r in res["models"]:
            if "error" in r:
                lines.append(f"| {r['model']} | {r['n']} | {r['error']} | | | |")
            else:
                lines.append(
                    f"| {r['model']} | {r['n']} | {r['time_s'] * 1e3:.1f} ms | {r['tokens_per_s']:,.0f} | "
                    f"{r['x_bound']:.1f}x | {r['peak_mb']:.0f} |"
                )
        lines.append("")
    if res["notes"]:
        lines += ["## Notes", ""] + [f"- {n}" for n in res["notes"]]
    atomic_write(path, "\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out",
        help=f"folder for attention_gpu.{{json,md}} (default {OUT}, the committed results; a partial run must "
        "name its own folder)",
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=SIZES, help="sequence lengths of the kernels")
    ap.add_argument("--model-sizes", type=int, nargs="*", default=MODEL_SIZES, help="none: no model steps")
    ap.add_argument("--only", nargs="*", help="kernels whose name contains one of these strings")
    ap.add_argument("--models", nargs="*", help="models whose name contains one of these strings")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per figure")
    ap.add_argument(
        "--device",
        default="cuda",
        choices=("cuda", "cpu"),
        help="cuda; cpu only to dry-run this script at small sizes",
    )
    ap.add_argument(
        "--deadline", type=float, default=float("inf"), help="stop starting new figures after this many s"
    )
    ap.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="write --out from earlier runs' attention_gpu.json (a run's, or an earlier merge's)",
    )
    args = ap.parse_args(argv)
    out = args.out or OUT
    if args.merge:
        res = merge_runs(args.merge)
        atomic_write(os.path.join(out, "attention_gpu.json"), json.dumps(res, indent=1))
        write_markdown(res, os.path.join(out, "attention_gpu.md"))
        return
    import torch
    import transformers

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error(
            f"--device cuda: torch {torch.__version__} sees no CUDA device here (a CPU-only build or no GPU); "
            "--device cpu dry-runs the script"
        )
    partial = args.only or args.models or args.sizes != SIZES or args.model_sizes != MODEL_SIZES
    if args.out is None and (partial or args.device != "cuda"):
        ap.error(
            f"--only, --models, --sizes, --model-sizes and --device cpu write a partial table: give --out (the "
            f"default, {OUT}, holds the committed results)"
        )
    global DEVICE
    DEVICE = args.device

    torch._dynamo.config.recompile_limit = 256  # one compile per pattern x size x grad mode, never eager
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        import flash_attn

        fa = flash_attn.__version__
    except ImportError:
        fa = "not installed"
    start = time.perf_counter()
    res = {"env": {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE, "torch": torch.__version__,
                   "transformers": transformers.__version__, "flash_attn": fa},
           "kernels": [], "models": [], "notes": []}  # fmt: skip
    if args.model_sizes:
        for n in args.model_sizes:
            for model in MODELS:
                if args.models and not any(s in model for s in args.models):
                    continue
                if time.perf_counter() - start > args.deadline:
                    break
                try:
                    rec = model_step(model, n, args.budget * 3)
                except Exception as e:
                    rec = {"model": model, "n": n, "error": f"{type(e).__name__}: {str(e)[:200]}"}
                _free()
                res["models"].append(rec)
                save(res, out)
                print(json.dumps(rec), flush=True)
    names = [k for k in _kernels() if not args.only or any(s in k for s in args.only)]
    for name in names:
        for n in args.sizes:
            for grad in (False, True):
                if time.perf_counter() - start > args.deadline:
                    break
                try:
                    rec = measure(name, n, grad, args.budget)
                except ImportError as e:
                    rec = {
                        "kernel": name,
                        "n": n,
                        "mode": "fwd+bwd" if grad else "fwd",
                        "error": "not installed",
                    }
                    if f"{name}: {e}" not in res["notes"]:
                        res["notes"].append(f"{name}: {e}")
                except torch.OutOfMemoryError:
                    rec = {
                        "kernel": name,
                        "n": n,
                        "mode": "fwd+bwd" if grad else "fwd",
                        "error": "out of memory",
                    }
                except Exception as e:  # recorded, so one failing kernel does not lose the others
                    msg = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                    rec = {"kernel": name, "n": n, "mode": "fwd+bwd" if grad else "fwd", "error": "failed"}
                    res["notes"].append(f"{name} at n={n} ({rec['mode']}): {msg}")
                _free()
                res["kernels"].append(rec)
                save(res, out)
                print(json.dumps(rec), flush=True)
    save(res, out)
    print(open(os.path.join(out, "attention_gpu.md")).read())


def save(res: dict, out: str):
    """attention_gpu.{json,md} as they stand (after every figure: a run cut short keeps what it measured)."""
    rates = [
        r[k] for r in res["kernels"] + res["models"] for k in ("tflops_before", "tflops_after") if k in r
    ]
    res["env"].update(
        tflops_min=min(rates, default=float("nan")), tflops_max=max(rates, default=float("nan"))
    )
    atomic_write(os.path.join(out, "attention_gpu.json"), json.dumps(res, indent=1))
    write_markdown(res, os.path.join(out, "attention_gpu.md"))


if __name__ == "__main__":
    main()
