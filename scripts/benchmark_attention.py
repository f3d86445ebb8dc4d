"""Attention kernels side by side: hf-sparse (blocked, flex) vs transformers' Longformer and dense SDPA.

One run measures, for n = 1k .. 64k tokens (B=1, H=12, D=64, float32), the median forward and
forward+backward time and the peak memory of each kernel, every (kernel, n) in a fresh process so
peak RSS is its own. It also measures this machine's matmul throughput and reports every time as a
multiple of the FLOP bound (the matmul FLOPs of exactly the allowed (query, key) pairs at that
throughput: forward 4*pairs*D, forward+backward 3x that).

Longformer's "core" is ``LongformerSelfAttention`` minus its own q/k/v projections, measured in the
same worker: hf-sparse kernels get the same already-projected q/k/v.

    python scripts/benchmark_attention.py                 # full run -> benchmarks/attention.{json,md,png}
    python scripts/benchmark_attention.py --quick --out outputs/bench   # 1k and 4k only (make gallery)

A partial run (``--only``, ``--sizes``, ``--quick``) must name its folder with ``--out``: the default,
benchmarks/, holds the committed results of a full run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

from benchmark_models import NO_MMAP_ENV  # scripts/ is on sys.path when run as a script

from hf_sparse.utils.io import atomic_write

H, D, WINDOW = 12, 64, 512
SIZES = [1024, 4096, 16384, 32768, 65536]
QUICK_SIZES = [1024, 4096]  # --quick (make gallery), with QUICK_BUDGET_S
BUDGET_S, QUICK_BUDGET_S = 20.0, 1.0
HEADLINE = 16384
OUT = "benchmarks"  # the committed results of a full run
MAX_RATE_MOVE = 0.10  # a kernel whose runs saw the matmul rate move by more than this is repeated

# name -> (family, spec); family decides how the worker builds and runs it
KERNELS = {
    "hf-sparse blocked SlidingWindow(512)": (
        "hf",
        {"backend": "blocked", "pattern": {"type": "sliding_window", "window": WINDOW}},
    ),
    "hf-sparse blocked BigBird(64)": (
        "hf",
        {"backend": "blocked", "pattern": {"type": "bigbird", "block": 64}},
    ),
    "hf-sparse blocked Strided(128)": (
        "hf",
        {"backend": "blocked", "pattern": {"type": "strided", "stride": 128}},
    ),
    "hf-sparse flex SlidingWindow(512)": (
        "hf",
        {"backend": "flex", "pattern": {"type": "sliding_window", "window": WINDOW}},
    ),
    "hf-sparse flex BigBird(64)": ("hf", {"backend": "flex", "pattern": {"type": "bigbird", "block": 64}}),
    "hf-sparse flex Strided(128)": ("hf", {"backend": "flex", "pattern": {"type": "strided", "stride": 128}}),
    "Longformer layer (0 global)": ("longformer", {"globals": 0}),
    "Longformer layer (1 global)": ("longformer", {"globals": 1}),
    "SDPA dense (full)": ("sdpa", {"band": False}),
    "SDPA dense (band mask)": ("sdpa", {"band": True}),
}
# what each kernel computes, for the FLOP bound (pattern spec of the allowed pairs)
BOUND_PATTERN = {
    "Longformer": {"type": "sliding_window", "window": WINDOW},
    "SDPA dense (band mask)": {"type": "sliding_window", "window": WINDOW},
}


# ----------------------------------------------------------------------------- worker (one kernel, one n)


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _peak_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


_GRADS = {}


def _backward(outs, leaves):
    """A training step's backward: the leaves' gradients unset first (``zero_grad(set_to_none=True)``, as
    torch's optimizers and the GPU benchmark do, so no call adds into the previous call's gradients) and the
    incoming gradient made once (upstream layers' work, not the kernel's)."""
    import torch

    outs = outs if isinstance(outs, list) else [outs]
    for t in leaves:
        t.grad = None
    for o in outs:
        if (o.shape, o.dtype) not in _GRADS:
            _GRADS[o.shape, o.dtype] = torch.ones_like(o)
    grads = [_GRADS[o.shape, o.dtype] for o in outs]
    torch.autograd.backward(outs, grads)


def _measure(fn, device, budget_s: float):
    """Peak memory of the first (warm-up) call, then the median of timed calls within a budget."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() / 2**20
    else:
        _reset_peak()
        base = _rss_mb()
    t0 = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else _peak_mb()) - base
    reps = max(1, min(5, int(budget_s / max(first, 1e-3))))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    return {"time_s": times[len(times) // 2], "reps": reps, "first_call_s": first, "peak_mb": peak}


def worker(kernel: str, n: int, mode: str, device: str, budget_s: float) -> dict:
    import torch

    torch.manual_seed(0)
    family, spec = KERNELS[kernel]
    grad = mode == "fwd+bwd"
    dev = torch.device(device)

    if family == "hf":
        from hf_sparse import sparse_attention

        q, k, v = (torch.randn(1, H, n, D, device=dev, requires_grad=grad) for _ in range(3))

        def run():
            out = sparse_attention(q, k, v, spec["pattern"], backend=spec["backend"])
            if grad:
                _backward(out, [q, k, v])

        if not grad:
            with torch.no_grad():
                return _measure(run, device, budget_s)
        return _measure(run, device, budget_s)

    if family == "sdpa":
        import torch.nn.functional as F

        q, k, v = (torch.randn(1, H, n, D, device=dev, requires_grad=grad) for _ in range(3))
        mask = None
        if spec["band"]:
            i = torch.arange(n, device=dev)
            mask = (i[:, None] - i[None, :]).abs() <= WINDOW // 2

        def run():
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            if grad:
                _backward(out, [q, k, v])

        if not grad:
            with torch.no_grad():
                return _measure(run, device, budget_s)
        return _measure(run, device, budget_s)

    # Longformer: the layer, and its projections alone, in this same process
    from transformers import LongformerConfig
    from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

    cfg = LongformerConfig(hidden_size=H * D, num_attention_heads=H, attention_window=[WINDOW])
    layer = LongformerSelfAttention(cfg, 0).to(dev)
    hidden = torch.randn(1, n, H * D, device=dev, requires_grad=grad)
    g = spec["globals"]
    mask = torch.zeros(1, n, device=dev)
    mask[:, :g] = 1  # extended-mask convention of LongformerModel: >0 global
    kw = dict(
        attention_mask=mask, is_index_masked=mask < 0, is_index_global_attn=mask > 0, is_global_attn=g > 0
    )
    projections = [layer.query, layer.key, layer.value] + (
        [layer.key_global, layer.value_global] if g else []
    )

    leaves = [hidden, *layer.parameters()]

    def run_layer():
        out = layer(hidden, **kw)[0]
        if grad:
            _backward(out, leaves)

    def run_proj():
        outs = [lin(hidden) for lin in projections]
        if grad:
            _backward(outs, leaves)

    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx:
        res = _measure(run_layer, device, budget_s)
        proj = _measure(run_proj, device, budget_s / 2)
    res["projections_s"] = proj["time_s"]
    res["core_s"] = res["time_s"] - proj["time_s"]
    return res


# ----------------------------------------------------------------------------- driver


def matmul_gflops(device: str) -> float:
    import torch

    a, b = torch.randn(4096, 4096, device=device), torch.randn(4096, 4096, device=device)
    out = torch.empty(4096, 4096, device=device)
    times = []
    for _ in range(6):
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    return 2 * 4096**3 / times[len(times) // 2] / 1e9


def allowed_pairs(kernel: str, n: int) -> int:
    from hf_sparse import patterns as P

    if kernel.startswith("hf-sparse"):
        spec = KERNELS[kernel][1]["pattern"]
    else:
        spec = next((v for k, v in BOUND_PATTERN.items() if kernel.startswith(k)), None)
        if spec is None:  # dense
            return n * n
    return round(P.from_dict(spec).density(n) * n * n)


def mem_available_mb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return float("inf")


def estimated_mb(kernel: str, n: int, mode: str) -> float:
    """Rough peak memory, to skip what cannot fit instead of taking the machine down."""
    per = 4 * H * n * D / 2**20  # one (1, H, n, D) float32 tensor, MB
    if kernel == "SDPA dense (band mask)":
        return 5 * n * n / 2**20 * (2 if mode == "fwd+bwd" else 1) + 10 * per  # bool + float n x n mask
    if kernel.startswith("Longformer"):
        return 4 * H * n * (WINDOW + 1) * 4 / 2**20 * (3 if mode == "fwd+bwd" else 1) + 20 * per
    return 20 * per


def run_all(args) -> dict:
    device = args.device
    results = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "processor": _cpu_name(),
            "device": device,
        },
        "shape": {"batch": 1, "heads": H, "head_dim": D, "dtype": "float32", "window": WINDOW},
        "records": [],
    }
    import torch

    results["machine"]["torch"] = torch.__version__
    results["machine"]["threads"] = torch.get_num_threads()
    results["matmul_gflops"] = matmul_gflops(device)
    print(f"matmul fp32 4096^2: {results['matmul_gflops']:.1f} GFLOP/s", flush=True)
    kernels = [k for k in KERNELS if not args.only or any(s in k for s in args.only)]
    for kernel in kernels:
        # the host's speed moves: measure the matmul rate before and after each kernel's runs, repeat
        # the kernel where it moved by more than MAX_RATE_MOVE, and take each bound at that kernel's rate
        for attempt in range(1, args.attempts + 1):
            before = matmul_gflops(device)
            records = _run_kernel(kernel, args, device, before)
            after = matmul_gflops(device)
            moved = (after - before) / before
            print(f"{kernel}: matmul {before:.1f} -> {after:.1f} GFLOP/s ({moved:+.0%})", flush=True)
            if abs(moved) <= MAX_RATE_MOVE or attempt == args.attempts:
                break
            print(f"{kernel}: the matmul rate moved by more than {MAX_RATE_MOVE:.0%}: repeating", flush=True)
        rate = (before + after) / 2
        for rec in records:
            rec.update(matmul_before=before, matmul_after=after, attempt=attempt)
            if abs(moved) > MAX_RATE_MOVE:
                rec["rate_moved"] = moved
            if "time_s" in rec:
                rec["flop_bound_s"] = rec["flops"] / (rate * 1e9)
                rec["x_bound"] = rec.get("core_s", rec["time_s"]) / rec["flop_bound_s"]
        results["records"] += records
    return results


def _run_kernel(kernel: str, args, device: str, rate: float) -> list[dict]:
    """Every mode and size of one kernel (``rate``: the matmul rate now, for the progress lines)."""
    records = []
    for mode in ("fwd", "fwd+bwd"):
        prev = None
        for n in args.sizes:
            rec = {"kernel": kernel, "n": n, "mode": mode}
            if "flex" in kernel and mode == "fwd+bwd" and device == "cpu":
                rec["skipped"] = "FlexAttention has no backward on CPU"
            elif estimated_mb(kernel, n, mode) > 0.7 * mem_available_mb():
                rec["skipped"] = (
                    f"needs about {estimated_mb(kernel, n, mode) / 1024:.0f} GB, more than this machine has"
                )
            elif prev is not None and prev.get("time_s") and _projected(prev, n) > args.max_call_s:
                rec["skipped"] = (
                    f"projected {_projected(prev, n):.0f} s per call > --max-call-s {args.max_call_s:.0f}"
                )
            elif prev is not None and "skipped" in prev:
                rec["skipped"] = prev["skipped"]
            else:
                env = dict(os.environ, **NO_MMAP_ENV) if args.malloc_no_mmap else None
                rec.update(_spawn(kernel, n, mode, device, args.budget_s, args.max_call_s * 6, env))
            if "time_s" in rec:
                rec["flops"] = 4 * allowed_pairs(kernel, n) * D * H * (3 if mode == "fwd+bwd" else 1)
                rec["x_bound"] = rec.get("core_s", rec["time_s"]) / (rec["flops"] / (rate * 1e9))
            print(_fmt(rec), flush=True)
            records.append(rec)
            prev = rec
    return records


def _projected(prev, n):
    quadratic = prev["kernel"].startswith("SDPA")
    return prev["time_s"] * (n / prev["n"]) ** (2 if quadratic else 1.1)


def _spawn(kernel, n, mode, device, budget_s, timeout_s, env=None) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        json.dumps([kernel, n, mode, device, budget_s]),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"skipped": f"took longer than {timeout_s:.0f} s"}
    if proc.returncode != 0:
        if proc.returncode in (-9, 137):
            return {"skipped": "out of memory (killed)"}
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return {"error": tail[0][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fmt(rec):
    if "time_s" in rec:
        core = f" core {rec['core_s']:.3f}s" if "core_s" in rec else ""
        return f"{rec['kernel']:<38} n={rec['n']:>6} {rec['mode']:<8} {rec['time_s']:.3f}s{core} peak {rec['peak_mb']:.0f} MB x{rec['x_bound']:.2f} bound"
    return f"{rec['kernel']:<38} n={rec['n']:>6} {rec['mode']:<8} {rec.get('skipped') or rec.get('error')}"


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


# ----------------------------------------------------------------------------- reports


def size_label(n: int) -> str:
    """A sequence length as the tables name it: whole multiples of 1024 as ``16k``, others as they are (``512``)."""
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def _get(results, kernel, n, mode, key="time_s"):
    for r in results["records"]:
        if r["kernel"] == kernel and r["n"] == n and r["mode"] == mode:
            return r.get(key)
    return None


def _rates(results, kernel) -> str:
    """The matmul rates measured before and after a kernel's runs, as "before -> after" (* moved > 10%)."""
    rec = next((r for r in results["records"] if r["kernel"] == kernel and "matmul_before" in r), None)
    if rec is None:
        return "—"
    return f"{rec['matmul_before']:.0f} -> {rec['matmul_after']:.0f}" + ("*" if "rate_moved" in rec else "")


# what issue 21 asks of the kernels (figure, kernel, mode, value, target, how the value compares)
PATTERN_NAMES = ("SlidingWindow(512)", "BigBird(64)", "Strided(128)")


def _targets(results, n) -> list[tuple]:
    """Every figure issue 21 requires, computed from the records: (figure, value, target, met, rates)."""
    rows = []

    def blocked(name):
        return f"hf-sparse blocked {name}"

    def add(figure, value, target, ok, kernels):
        rates = "; ".join(_rates(results, k) for k in kernels)
        rows.append((figure, value, target, None if value is None else ok(value), rates))

    sw = blocked("SlidingWindow(512)")
    add(
        "SlidingWindow(512) fwd+bwd x bound",
        _get(results, sw, n, "fwd+bwd", "x_bound"),
        "<= 1.4",
        lambda x: x <= 1.4,
        [sw],
    )
    add(
        "SlidingWindow(512) fwd x bound",
        _get(results, sw, n, "fwd", "x_bound"),
        "<= 1.3",
        lambda x: x <= 1.3,
        [sw],
    )
    lf = "Longformer layer (0 global)"
    for mode in ("fwd", "fwd+bwd"):
        t, core = _get(results, sw, n, mode), _get(results, lf, n, mode, "core_s")
        target = ">= 20" if mode == "fwd+bwd" else "—"
        add(
            f"SlidingWindow(512) {mode} speed-up vs Longformer core",
            None if not (t and core) else core / t,
            target,
            (lambda x: x >= 20) if mode == "fwd+bwd" else (lambda x: True),
            [sw, lf],
        )
    # a kernel that keeps no scores (memory linear in n) recomputes q k^T in the backward: 7 matmuls of the
    # allowed pairs where the bound counts 6, so its speed-up is at most Longformer core's x bound / (7/6)
    lf_bound = _get(results, lf, n, "fwd+bwd", "x_bound")
    add(
        "fwd+bwd speed-up vs Longformer core of a kernel at 7/6 x bound (q k^T recomputed in the backward)",
        None if lf_bound is None else lf_bound / (7 / 6),
        "—",
        lambda x: True,
        [lf],
    )
    for name in ("BigBird(64)", "Strided(128)"):
        k = blocked(name)
        add(
            f"{name} fwd+bwd x bound",
            _get(results, k, n, "fwd+bwd", "x_bound"),
            "<= 2.0",
            lambda x: x <= 2.0,
            [k],
        )
    for name in PATTERN_NAMES:  # the fastest forward (inference) path of each pattern
        cands = [
            k for k in (blocked(name), f"hf-sparse flex {name}") if _get(results, k, n, "fwd", "x_bound")
        ]
        best = min(cands, key=lambda k: _get(results, k, n, "fwd", "x_bound"), default=None)
        value = None if best is None else _get(results, best, n, "fwd", "x_bound")
        label = "—" if best is None else best.split()[1]
        add(f"{name} fwd x bound, fastest path ({label})", value, "<= 2.0", lambda x: x <= 2.0, cands)
    for name in PATTERN_NAMES:
        k = blocked(name)
        # Strided's allowed pairs grow faster than n (each query also sees ~i / stride columns): its time
        # ratio is also shown per allowed pair, against the same target re-expressed (2.1 / 2)
        growth = allowed_pairs(k, 2 * n) / allowed_pairs(k, n)
        for mode in ("fwd", "fwd+bwd"):
            a, b = _get(results, k, n, mode), _get(results, k, 2 * n, mode)
            ratio = None if not (a and b) else b / a
            step = f"t({size_label(2 * n)})/t({size_label(n)})"
            add(f"{name} {mode} {step}", ratio, "<= 2.1", lambda x: x <= 2.1, [k])
            if abs(growth - 2) > 0.05:
                add(
                    f"{name} {mode} {step} / pair growth ({growth:.2f})",
                    None if ratio is None else ratio / growth,
                    "<= 1.05",
                    lambda x: x <= 1.05,
                    [k],
                )
    big = max(SIZES)  # the issue's target is at 64k, whichever sizes ran
    add(
        f"SlidingWindow(512) fwd+bwd peak memory at {size_label(big)} (MB)",
        _get(results, sw, big, "fwd+bwd", "peak_mb"),
        "<= 1090",
        lambda x: x <= 1090,
        [sw],
    )
    return rows


def _target_lines(results, n) -> list[str]:
    lines = [
        "",
        f"## Issue 21's required figures (n = {n:,} unless named)",
        "",
        "| figure | value | target | met | matmul (GFLOP/s) |",
        "|---|---|---|---|---|",
    ]
    for figure, value, target, ok, rates in _targets(results, n):
        shown = "—" if value is None else f"{value:.2f}"
        met = "—" if ok is None or target == "—" else ("yes" if ok else "**no**")
        lines.append(f"| {figure} | {shown} | {target} | {met} | {rates} |")
    return lines


def write_markdown(results, path):
    lines = ["# Attention kernels on this machine", ""]
    m = results["machine"]
    lines += [
        f"{m['processor']}, {m['threads']} threads, torch {m['torch']}, device {m['device']}; "
        f"B=1, H={H}, D={D}, float32; measured fp32 matmul throughput **{results['matmul_gflops']:.0f} GFLOP/s** (4096^2) at the start.",
        "",
        "Times are medians; every (kernel, n) ran in a fresh process (peak memory = its peak RSS growth).",
        "The matmul rate was measured before and after each kernel's runs (`matmul` columns, GFLOP/s, before -> after);",
        f"a kernel whose runs saw it move by more than {MAX_RATE_MOVE:.0%} was run again (up to `--attempts`; rows still marked * moved).",
        "`x bound` = time / (matmul FLOPs of the allowed pairs at the mean of that kernel's two rates; fwd+bwd counts 3x fwd).",
        "fwd+bwd is a training step's: the inputs' gradients unset before each call (`zero_grad(set_to_none=True)`),",
        "the incoming gradient (ones) made once.",
        "Longformer's *core* = `LongformerSelfAttention` minus its q/k/v projections measured in the same process;",
        "hf-sparse kernels get the same already-projected q/k/v, so they are compared with the core.",
        *(
            [
                "Every kernel ran with glibc's "
                + ", ".join(f"`{k}={v}`" for k, v in NO_MMAP_ENV.items())
                + " (`--malloc-no-mmap`): large allocations reuse heap memory instead of fresh mmaps.",
            ]
            if results.get("malloc_no_mmap")
            else []
        ),
        "",
    ]
    n = (
        HEADLINE
        if HEADLINE in [r["n"] for r in results["records"]]
        else max(r["n"] for r in results["records"])
    )
    lf = {
        mode: _get(results, "Longformer layer (0 global)", n, mode, "core_s") for mode in ("fwd", "fwd+bwd")
    }
    lines += [
        f"## n = {n:,}",
        "",
        "| kernel | fwd (s) | fwd+bwd (s) | peak fwd+bwd (MB) | fwd x bound | fwd+bwd x bound | fwd speed-up vs Longformer core | fwd+bwd speed-up vs Longformer core | matmul (GFLOP/s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kernel in dict.fromkeys(r["kernel"] for r in results["records"]):
        row = [kernel]
        for key, mode in (
            ("time_s", "fwd"),
            ("time_s", "fwd+bwd"),
            ("peak_mb", "fwd+bwd"),
            ("x_bound", "fwd"),
            ("x_bound", "fwd+bwd"),
        ):
            val = _get(
                results,
                kernel,
                n,
                mode,
                "core_s" if key == "time_s" and kernel.startswith("Longformer") else key,
            )
            row.append(
                "—"
                if val is None
                else (f"{val:.0f}" if key == "peak_mb" else f"{val:.3f}" if key == "time_s" else f"{val:.2f}")
            )
        for mode in ("fwd", "fwd+bwd"):
            t = _get(results, kernel, n, mode, "core_s" if kernel.startswith("Longformer") else "time_s")
            row.append("—" if (t is None or lf[mode] is None) else f"{lf[mode] / t:.1f}x")
        row.append(_rates(results, kernel))
        lines.append("| " + " | ".join(row) + " |")
    if lf["fwd"] is not None:
        lines += ["", f"Longformer core's matmul: {_rates(results, 'Longformer layer (0 global)')}."]
    lines += _target_lines(results, n)
    lines += ["", "Longformer rows show the core; the full layer and its projections:", ""]
    for kernel in ("Longformer layer (0 global)", "Longformer layer (1 global)"):
        for mode in ("fwd", "fwd+bwd"):
            layer, proj = _get(results, kernel, n, mode), _get(results, kernel, n, mode, "projections_s")
            if layer is not None:
                lines.append(f"- {kernel}, {mode}: layer {layer:.3f} s, projections {proj:.3f} s")
    sizes = sorted({r["n"] for r in results["records"]})  # the sizes this run measured
    lines += [
        "",
        "## Scaling: t(next n) / t(n)",
        "",
        "| kernel | mode | "
        + " | ".join(f"{size_label(a)}->{size_label(b)}" for a, b in zip(sizes, sizes[1:]))
        + " | matmul (GFLOP/s) |",
        "|---|---|" + "---|" * len(sizes),
    ]
    for kernel in dict.fromkeys(r["kernel"] for r in results["records"]):
        for mode in ("fwd", "fwd+bwd"):
            cells = []
            for a, b in zip(sizes, sizes[1:]):
                ta = _get(results, kernel, a, mode, "core_s" if kernel.startswith("Longformer") else "time_s")
                tb = _get(results, kernel, b, mode, "core_s" if kernel.startswith("Longformer") else "time_s")
                cells.append("—" if not (ta and tb) else f"{tb / ta:.2f}")
            lines.append(f"| {kernel} | {mode} | " + " | ".join(cells) + f" | {_rates(results, kernel)} |")
    lines += [
        "",
        "## All measurements",
        "",
        "| kernel | n | mode | time (s) | Longformer core (s) | peak (MB) | x bound | matmul (GFLOP/s) | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["records"]:
        lines.append(
            f"| {r['kernel']} | {r['n']} | {r['mode']} | {r.get('time_s', float('nan')):.3f} | "
            f"{r.get('core_s', float('nan')):.3f} | {r.get('peak_mb', float('nan')):.0f} | {r.get('x_bound', float('nan')):.2f} | "
            f"{_rates(results, r['kernel'])} | {r.get('skipped') or r.get('error') or ''} |".replace(
                "nan", "—"
            )
        )
    atomic_write(path, "\n".join(lines) + "\n")


def write_plot(results, path):
    from hf_sparse.viz import _save, pyplot

    plt = pyplot()
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(13, 5))
    for kernel in dict.fromkeys(r["kernel"] for r in results["records"]):
        for mode, style in (("fwd+bwd", "-"), ("fwd", "--")):
            key = "core_s" if kernel.startswith("Longformer") else "time_s"
            pts = [
                (r["n"], r[key])
                for r in results["records"]
                if r["kernel"] == kernel and r["mode"] == mode and key in r
            ]
            if pts:
                xs, ys = zip(*pts)
                label = f"{kernel}{' core' if key == 'core_s' else ''} [{mode}]"
                ax_t.plot(xs, ys, style, marker="o", label=label)
        pts = [
            (r["n"], r["peak_mb"])
            for r in results["records"]
            if r["kernel"] == kernel and r["mode"] == "fwd+bwd" and "peak_mb" in r
        ]
        pts = pts or [
            (r["n"], r["peak_mb"]) for r in results["records"] if r["kernel"] == kernel and "peak_mb" in r
        ]
        if pts:
            xs, ys = zip(*pts)
            ax_m.plot(xs, [max(y, 1) for y in ys], marker="o", label=kernel)
    for ax, title in ((ax_t, "time per call (s)"), (ax_m, "peak memory (MB), fwd+bwd where available")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_title(title)
        ax.grid(alpha=0.3, which="both")
    ax_t.legend(fontsize=6)
    ax_m.legend(fontsize=6)
    _save(fig, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out",
        help=f"folder for attention.json/.md/.png (default {OUT}, the committed results of a full run; a "
        "partial run, with --only, --sizes or --quick, must name its own folder)",
    )
    ap.add_argument("--sizes", type=int, nargs="+", help=f"sequence lengths (default {SIZES})")
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"defaults for make gallery: sizes {QUICK_SIZES}, --budget-s {QUICK_BUDGET_S}, two kernels "
        "(--sizes, --budget-s and --only still apply)",
    )
    ap.add_argument(
        "--only",
        nargs="+",
        help=f"run kernels whose name contains one of these strings (from {'; '.join(KERNELS)})",
    )
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="cpu or cuda")
    ap.add_argument(
        "--budget-s",
        type=float,
        help=f"time budget for the timed repetitions of one measurement (default {BUDGET_S})",
    )
    ap.add_argument(
        "--max-call-s", type=float, default=60.0, help="skip sizes whose projected single call exceeds this"
    )
    ap.add_argument(
        "--attempts",
        type=int,
        default=2,
        help="runs of a kernel at most, while the matmul rate moves by more than 10%% during its runs",
    )
    ap.add_argument(
        "--malloc-no-mmap",
        action="store_true",
        help="run every kernel with glibc's "
        + " ".join(f"{k}={v}" for k, v in NO_MMAP_ENV.items())
        + " (large allocations reuse heap memory instead of fresh, page-faulting mmaps; see the README)",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.attempts < 1:
        ap.error(f"--attempts must be >= 1, got {args.attempts}")
    for n in args.sizes or []:
        if n < 1:
            ap.error(f"--sizes must be >= 1, got {n}")
    if args.budget_s is not None and args.budget_s < 0:
        ap.error(f"--budget-s must be >= 0 (0: one timed call), got {args.budget_s}")
    if args.max_call_s <= 0:
        ap.error(f"--max-call-s must be > 0, got {args.max_call_s}")
    if args.worker:
        kernel, n, mode, device, budget = json.loads(args.worker)
        print(json.dumps(worker(kernel, n, mode, device, budget)))
        return
    unmatched = [s for s in args.only or [] if not any(s in k for k in KERNELS)]
    if unmatched:
        ap.error(f"--only {' '.join(unmatched)} matches no kernel; choose from {'; '.join(KERNELS)}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            ap.error(
                f"--device cuda: torch {torch.__version__} sees no CUDA device here (a CPU-only build or no GPU)"
            )
    if args.out is None and (args.only or args.quick or args.sizes not in (None, SIZES)):
        ap.error(
            f"--only, --sizes and --quick write a partial table: give --out (the default, {OUT}, holds the "
            "full run's results)"
        )
    out = args.out or OUT
    if args.quick:  # defaults only: what the user gave stands
        args.only = args.only or ["blocked SlidingWindow", "Longformer layer (0"]
    args.sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    args.budget_s = args.budget_s if args.budget_s is not None else QUICK_BUDGET_S if args.quick else BUDGET_S
    kernels = [k for k in KERNELS if not args.only or any(s in k for s in args.only)]
    longformer = [k for k in kernels if KERNELS[k][0] == "longformer"]
    for n in args.sizes:
        if longformer and n % WINDOW:
            ap.error(
                f"--sizes {n}: {longformer[0]} needs a multiple of its window {WINDOW} (LongformerSelfAttention "
                "pads nothing); leave it out with --only"
            )
    results = run_all(args)
    results["malloc_no_mmap"] = args.malloc_no_mmap
    atomic_write(os.path.join(out, "attention.json"), json.dumps(results, indent=1))
    write_markdown(results, os.path.join(out, "attention.md"))
    write_plot(results, os.path.join(out, "attention.png"))
    print(f"wrote {out}/attention.json, attention.md, attention.png")


if __name__ == "__main__":
    main()
