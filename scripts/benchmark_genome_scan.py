#!/usr/bin/env python
"""Benchmark genome scanning: write benchmarks/genome_scan.json and the tables of benchmarks/genome_scan.md.

Every scan runs ``scripts/scan_genome.py`` in a subprocess under ``/usr/bin/time -v`` (wall time and peak
resident memory of the whole process, imports included), with the load average before and after:

- **chr22**: the 1 Mb human fragment, model (``--model``, the CTCF recipe's) and PWM (JASPAR MA0139.2,
  relative score >= 0.85) tracks; model vs PWM precision/recall/F1 of exact and overlapping spans (the PWM
  track made non-overlapping the way the recipe labels its training data).
- **window table**: the first ``--slice`` bases of the fragment at each ``--windows`` length: bases/s,
  F1 vs PWM, and exact-span agreement with the run at the trained length (first entry).
- **E. coli** (``ecoli``): the whole genome from its gzip FASTA to BED (model), checked: sorted, in bounds,
  strands, and against the issue's targets (<= 5 minutes, <= 2 GB peak); ``ecoli-pwm`` the PWM track.

Each run adds its parts to ``--out``'s genome_scan.json (the parts it did not run stay as they were) and writes
genome_scan.md from all of them: the tables, also printed. The committed benchmarks/genome_scan.md is these tables
with the analysis written around them by hand: a run into benchmarks/ replaces that file with the tables alone
(carry the analysis over from git).

The E. coli model row alone (the 5-minute target), e.g. to re-time it on an idle host::

    python scripts/benchmark_genome_scan.py --model outputs/motif-ctcf --parts ecoli --out outputs/bench-genome
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from hf_sparse.genome.fasta_index import FastaFile  # noqa: E402
from hf_sparse.genome.tracks import compare_tracks, read_bed, resolve_overlaps  # noqa: E402
from hf_sparse.utils.io import atomic_write  # noqa: E402

GENOMICS = os.path.join(REPO, "..", "shared", "data", "genomics")
CHR22 = os.path.join(GENOMICS, "human_chr22_fragment", "22_20-21M.fa")
ECOLI = os.path.join(GENOMICS, "ecoli_k12_mg1655_genome", "GCF_000005845.2_ASM584v2_genomic.fna.gz")
JASPAR = os.path.join(GENOMICS, "jaspar2024_core_vertebrates_non_redundant",
                      "JASPAR2024_CORE_vertebrates_non-redundant_pfms_transfac.txt")  # fmt: skip


PARTS = ("chr22", "windows", "ecoli", "ecoli-pwm")
#: The issue's E. coli targets: whole genome, gzip FASTA to BED, on 2 cores.
TARGET_WALL_S, TARGET_RSS_MB = 300, 2048


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Benchmark scripts/scan_genome.py on chr22 and E. coli.")
    p.add_argument(
        "--model", required=True, help="The CTCF recipe model folder (scripts/finetune.py output)."
    )
    p.add_argument("--work", default=os.path.join(REPO, "outputs", "bench-genome"), help="BED files go here.")
    p.add_argument(
        "--out",
        default=os.path.join(REPO, "benchmarks"),
        help="Folder of genome_scan.json (merged: parts not run keep their figures) and genome_scan.md (its tables).",
    )
    p.add_argument(
        "--window", type=int, default=None, help="Model window for chr22 and E. coli (default: the script's)."
    )
    p.add_argument(
        "--attention-backend", default=None, help="Attention kernel for the chr22 and E. coli model runs."
    )
    p.add_argument("--windows", type=int, nargs="+", default=[254, 1024, 4096, 16384],
                   help="Window lengths of the table; the first is the trained length.")  # fmt: skip
    p.add_argument("--slice", type=int, default=100_000, help="Bases of chr22 for the window table.")
    p.add_argument(
        "--batch-size", type=int, default=None, help="Windows per forward pass (default: the script's)."
    )
    p.add_argument("--workers", type=int, default=None, help="Batches at once (default: the script's).")
    p.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS,
                   help="Which parts to run (ecoli: the model row alone).")  # fmt: skip
    return p.parse_args(argv)


def timed(cmd: list[str], log: str) -> dict:
    """Run ``cmd`` under /usr/bin/time -v; wall seconds, peak RSS (MB), load averages, its JSON summary."""
    before = os.getloadavg()
    t = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=subprocess.PIPE, stderr=f, text=True)
    wall = time.perf_counter() - t
    err = open(log).read()
    if proc.returncode:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({proc.returncode}); see {log}:\n{err[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1)) / 1024
    cpu = sum(
        float(re.search(rf"{kind} time \(seconds\): ([\d.]+)", err).group(1)) for kind in ("User", "System")
    )
    summary = json.loads(proc.stdout[proc.stdout.index("{") :])
    return {"command": shlex.join(["python", *[os.path.relpath(c, REPO) if c.startswith(REPO) else c for c in cmd[1:]]]),
            "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "peak_rss_mb": round(rss), "load_before": [round(x, 1) for x in before],
            "load_after": [round(x, 1) for x in os.getloadavg()], "summary": summary}  # fmt: skip


def scan(
    args, fasta: str, out: str, model: bool, window: int | None = None, backend: str | None = None
) -> dict:
    cmd = [sys.executable, os.path.join(REPO, "scripts", "scan_genome.py")]
    if model:
        cmd += [args.model, fasta, "--out", out] + (["--window", str(window)] if window else [])
        cmd += ["--attention-backend", backend] if backend else []
        cmd += ["--batch-size", str(args.batch_size)] if args.batch_size else []
        cmd += ["--workers", str(args.workers)] if args.workers else []
    else:
        cmd += [fasta, "--pwm", JASPAR, "--motif-ids", "MA0139.2", "--out", out]
    return timed(cmd + ["--no-progress"], out + ".log")


def check_bed(path: str, fasta: str) -> dict:
    lengths = {r.name: r.length for r in FastaFile(fasta).records}
    order = list(lengths)
    hits = read_bed(path)
    keys = [(order.index(h["chrom"]), h["start"]) for h in hits]
    return {"hits": len(hits), "sorted": keys == sorted(keys),
            "in_bounds": all(0 <= h["start"] < h["end"] <= lengths[h["chrom"]] for h in hits),
            "strands": sorted({h["strand"] for h in hits})}  # fmt: skip


def agreement(reference: str, predicted: str) -> dict:
    return compare_tracks(resolve_overlaps(read_bed(reference)), read_bed(predicted))


def _n(x) -> str:
    return "-" if x is None else f"{x:,}"


def _f(x) -> str:
    return f"{x:.3f}"


def _run_row(name: str, r: dict) -> str:
    part = r["summary"].get("model") or r["summary"]["pwm"]
    return (f"| {name} | {r['summary']['bases']:,} | {part['hits']} | {r['wall_s']} | {r.get('cpu_s', '-')} | "
            f"{part['scan_s']} | {part['bases_per_s']:,} | {r['peak_rss_mb']} | {r['load_before'][0]} / {r['load_after'][0]} |")  # fmt: skip


def _model_name(r: dict) -> str:
    m = r["summary"]["model"]
    return (f"model, window {m['window']:,}, batch {m['batch_size']}, {m.get('workers', 1)} worker(s) x "
            f"{m.get('threads', '?')} thread(s)")  # fmt: skip


def verdict(r: dict) -> str:
    """The E. coli run against the issue's targets (wall time of the whole process, peak RSS)."""
    ok = r["wall_s"] <= TARGET_WALL_S and r["peak_rss_mb"] <= TARGET_RSS_MB
    return (f"{'meets' if ok else 'misses'} the targets: {r['wall_s']} s wall (<= {TARGET_WALL_S}), "
            f"{r['peak_rss_mb']} MB peak (<= {TARGET_RSS_MB}); {r.get('cpu_s', '-')} CPU s; load average "
            f"{r['load_before'][0]} before, {r['load_after'][0]} after")  # fmt: skip


def markdown(results: dict) -> str:
    """The tables of genome_scan.md from the results (the prose around them is written by hand)."""
    head = ("| run | bases | hits | wall s (process) | CPU s (process) | scan s | bases/s (scan) | peak RSS MB | "
            "load 1-min before / after |\n|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    out = []
    if "chr22" in results:
        c = results["chr22"]
        out += ["### chr22 fragment (1 Mb)", "", head, _run_row("PWM MA0139.2", c["pwm"]),
                _run_row(_model_name(c["model"]), c["model"]), "", "| model vs PWM | precision | recall | F1 | PWM sites | model hits |",
                "|---|---|---|---|---|---|"]  # fmt: skip
        for kind in ("exact", "overlap"):
            v = c["vs_pwm"][kind]
            out.append(
                f"| {kind} spans | {_f(v['precision'])} | {_f(v['recall'])} | {_f(v['f1'])} | {v['n_true']} | {v['n_pred']} |"
            )
        out += ["", f"Model BED check: {c['bed']}", ""]
    if "windows" in results:
        wnd = results["windows"]
        out += [f"### Window length (first {wnd['slice']:,} bases of the fragment)", "",
                "| window | stride | scan s | bases/s (scan) | scan CPU s | bases per CPU s | peak RSS MB | F1 vs PWM exact | "
                "F1 vs PWM overlap | agreement with the trained length (exact F1) | hits |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for k, r in wnd.items():
            if k in ("slice", "pwm"):
                continue
            m = r["summary"]["model"]
            out.append(f"| {k} | {m['stride']} | {m['scan_s']} | {m['bases_per_s']:,} | {m.get('scan_cpu_s', '-')} | "
                       f"{_n(m.get('bases_per_cpu_s'))} | {r['peak_rss_mb']} | "
                       f"{_f(r['vs_pwm']['exact']['f1'])} | {_f(r['vs_pwm']['overlap']['f1'])} | "
                       f"{_f(r['vs_trained_length']['exact']['f1'])} | {m['hits']} |")  # fmt: skip
        out.append("")
    if "ecoli" in results:
        e = results["ecoli"]
        out += ["### E. coli K-12 MG1655 (4.64 Mb, gzip FASTA)", "", head]
        out += [_run_row(_model_name(e["model"]), e["model"])] if "model" in e else []
        out += [_run_row("PWM MA0139.2", e["pwm"])] if "pwm" in e else []
        out += (
            ["", f"Model BED check: {e['bed']}", f"Model run {verdict(e['model'])}", ""]
            if "model" in e
            else []
        )
    return "\n".join(out)


def write_results(results: dict, out: str) -> None:
    """genome_scan.json and genome_scan.md (a heading and :func:`markdown`'s tables) in ``out``, each replaced
    whole."""
    atomic_write(os.path.join(out, "genome_scan.json"), json.dumps(results, indent=1))
    head = ["# Genome-scale motif scanning", "",
            f"Tables of `genome_scan.json` (model `{results['model']}`), written by `scripts/benchmark_genome_scan.py`; "
            "every command, time, CPU time, memory and load average is in the json.", "", "## Results", ""]  # fmt: skip
    atomic_write(os.path.join(out, "genome_scan.md"), "\n".join([*head, markdown(results)]) + "\n")


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)  # now: a folder that cannot be made fails before minutes of scans
    path = os.path.join(args.out, "genome_scan.json")
    results = json.load(open(path)) if os.path.isfile(path) else {}
    results["model"] = os.path.relpath(args.model, REPO)
    w = lambda name: os.path.join(args.work, name)  # noqa: E731
    if "chr22" in args.parts:
        pwm = scan(args, CHR22, w("chr22_pwm.bed"), model=False)
        model = scan(
            args, CHR22, w("chr22_model.bed"), model=True, window=args.window, backend=args.attention_backend
        )
        results["chr22"] = {"pwm": pwm, "model": model, "vs_pwm": agreement(w("chr22_pwm.bed"), w("chr22_model.bed")),
                            "bed": check_bed(w("chr22_model.bed"), CHR22)}  # fmt: skip
        write_results(results, args.out)
    if "windows" in args.parts:
        fa = FastaFile(CHR22)
        name = fa.records[0].name
        piece = w("chr22_slice.fa")
        with open(piece, "w") as f:
            bases = fa.fetch(name, 0, args.slice)
            f.write(f">{name}\n" + "".join(bases[i : i + 60] + "\n" for i in range(0, len(bases), 60)))
        rows = {"pwm": scan(args, piece, w("slice_pwm.bed"), model=False)}
        for win in args.windows:
            run = scan(args, piece, w(f"slice_w{win}.bed"), model=True, window=win)
            run["vs_pwm"] = agreement(w("slice_pwm.bed"), w(f"slice_w{win}.bed"))
            run["vs_trained_length"] = compare_tracks(read_bed(w(f"slice_w{args.windows[0]}.bed")),
                                                      read_bed(w(f"slice_w{win}.bed")))  # fmt: skip
            rows[win] = run
            results["windows"] = {"slice": args.slice, **{str(k): v for k, v in rows.items()}}
            write_results(results, args.out)
    if "ecoli" in args.parts:
        model = scan(
            args, ECOLI, w("ecoli_model.bed"), model=True, window=args.window, backend=args.attention_backend
        )
        results["ecoli"] = {
            **results.get("ecoli", {}),
            "model": model,
            "bed": check_bed(w("ecoli_model.bed"), ECOLI),
        }
        write_results(results, args.out)
        print(f"E. coli model run {verdict(model)}", file=sys.stderr)
    if "ecoli-pwm" in args.parts:
        results["ecoli"] = {
            **results.get("ecoli", {}),
            "pwm": scan(args, ECOLI, w("ecoli_pwm.bed"), model=False),
        }
        write_results(results, args.out)
    print(markdown(results))


if __name__ == "__main__":
    main()
