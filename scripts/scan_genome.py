#!/usr/bin/env python
"""Scan a genome for motifs: FASTA in (plain, bgzip or gzip; any number of records), BED6 out.

    # the model's track (a motif model saved by scripts/finetune.py, e.g. pipelines/motif/ctcf.yaml)
    python scripts/scan_genome.py outputs/ctcf genome.fa.gz --out ctcf.bed --gff ctcf.gff3
    # the PWM reference track alone (no model)
    python scripts/scan_genome.py genome.fa.gz --pwm JASPAR.txt --motif-ids MA0139.2 --out pwm.bed
    # both, from one read of the genome per track
    python scripts/scan_genome.py outputs/ctcf genome.fa --out ctcf.bed --pwm JASPAR.txt --pwm-out pwm.bed

Windows of ``--window`` bases, ``--stride`` apart, are streamed from an indexed reader (records are never
loaded whole), runs of at least ``--skip-n`` N are skipped, and every base is predicted by the window in
which it lies farthest from an edge (hf_sparse.genome). BED lines are 0-based, half-open, in FASTA order
and by position; the score column is the hit's score x 1000 (model: mean tag probability; PWM: relative
score). A JSON summary (bases, hits, wall time, bases per second, peak memory) goes to stdout and, with
``--summary``, to a file. The PWM options are checked before any scan, and so are the outputs: none may be a
folder, share a path with another, or replace an input of the run (the FASTA, its ``.fai``/``.gzi``, the
``--pwm`` file, a file in the MODEL folder). The options of a track that is
not scanned (model options without a MODEL, PWM options without ``--pwm``) are errors; each output is
written to a temporary file next to it and renamed when complete, so a failed or interrupted run (an
exception, Ctrl-C, SIGTERM) leaves no partial file at its path.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from hf_sparse.genome.fasta_index import FastaFile  # noqa: E402
from hf_sparse.genome.pwm_scan import DEFAULT_THRESHOLD, pwm_scan, select_motifs  # noqa: E402
from hf_sparse.genome.tracks import bed_line, write_bed, write_gff3  # noqa: E402
from hf_sparse.genome.windows import DEFAULT_SKIP_N  # noqa: E402
from hf_sparse.tasks.motif.data import read_motifs  # noqa: E402
from hf_sparse.utils.io import atomic_open, atomic_write  # noqa: E402

MAX_DEFAULT_WORKERS = 8
BATCH_SIZE = 8
#: Options of the model scan (default None): refused without a MODEL rather than ignored.
MODEL_OPTIONS = (
    "window",
    "stride",
    "batch_size",
    "min_score",
    "device",
    "attention_backend",
    "workers",
    "threads",
)
PWM_OPTIONS = ("motif_ids", "threshold", "pwm_out")  # the same, without --pwm
OUTPUTS = ("out", "gff", "pwm_out", "summary")


def same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name one file: the same path once symlinks and ``..`` are resolved, or
    (both existing) the same inode, as a hard link is."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Scan a genome FASTA with a motif model and/or a PWM; write BED6 (and GFF3).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="[MODEL] FASTA",
        help="A saved motif model (folder) and the FASTA; the FASTA alone with --pwm scans the PWM only.",
    )
    p.add_argument(
        "--out", required=True, help="BED6 file of the model's hits (of the PWM's without a model)."
    )
    p.add_argument("--gff", help="Also write the model's hits (PWM's without a model) as GFF3 here.")
    p.add_argument("--window", type=int, default=None,
                   help="Bases per window (default: the length the model was trained on; longer only with rotary "
                        "positions).")  # fmt: skip
    p.add_argument(
        "--stride",
        type=int,
        default=None,
        help="Bases between window starts (default: window - min(window // 4, 128)).",
    )
    p.add_argument("--batch-size", type=int, default=None,
                   help=f"Windows per forward pass (default {BATCH_SIZE}); a model with random attention blocks "
                        "batches only windows of one length, so its hits do not depend on it.")  # fmt: skip
    p.add_argument("--skip-n", type=int, default=DEFAULT_SKIP_N, help="Skip runs of at least this many N.")
    p.add_argument(
        "--min-score",
        type=float,
        default=None,
        help="Drop model hits with a lower mean tag probability (default 0).",
    )
    p.add_argument("--device", default=None, help="Torch device for the model (default: cpu).")
    p.add_argument(
        "--attention-backend",
        default=None,
        help="SparseTransformer attention kernel for the scan (auto, sdpa, blocked, flex, dense; all exact).",
    )
    p.add_argument("--workers", type=int, default=None,
                   help="Batches run at once, one thread each (default: the CPU cores this process may use, at "
                        "most 8, on CPU; 1 on an accelerator).")  # fmt: skip
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (default: 1 with several workers, else torch's).")  # fmt: skip
    p.add_argument("--pwm", help="JASPAR or TRANSFAC matrix file for the PWM reference scan.")
    p.add_argument(
        "--motif-ids",
        nargs="+",
        default=None,
        help="Matrix ids to scan with --pwm (default: the model's motif names).",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=None,
        help=f"PWM relative-score threshold (default {DEFAULT_THRESHOLD}, the ctcf recipe's scan_threshold).",
    )
    p.add_argument("--pwm-out", help="BED6 file of the PWM hits when a model is scanned too (a MODEL only).")
    p.add_argument(
        "--write-index",
        action="store_true",
        help="Save the .fai (and .gzi) next to the FASTA for later runs.",
    )
    p.add_argument("--no-progress", action="store_true", help="No progress bar.")
    p.add_argument("--summary", help="Also write the JSON summary to this file.")
    p.add_argument("--debug", action="store_true", help="Show the traceback of an input error.")
    args = p.parse_args(argv)
    for flag in ("workers", "threads", "batch_size", "skip_n"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    if args.threshold is not None and not 0 <= args.threshold <= 1:
        p.error(f"--threshold must be a relative score in [0, 1], got {args.threshold}")
    for flag in OUTPUTS:  # checked now, not after a scan
        path = getattr(args, flag)
        folder = os.path.dirname(os.path.abspath(path or "."))
        if path and not os.path.isdir(folder):
            p.error(f"--{flag.replace('_', '-')} {path}: no such folder {folder}")
        if path and os.path.isdir(path):
            p.error(f"--{flag.replace('_', '-')} {path} is a folder; name a file")
    if len(args.inputs) > 2:
        p.error(f"give [MODEL] FASTA, got {len(args.inputs)} positional arguments")
    args.model, args.fasta = (None, args.inputs[0]) if len(args.inputs) == 1 else args.inputs
    # one file each: a second output would overwrite the first, and an output replaces an input of the run
    # once the scan ends (the FASTA, the index read or written next to it, the matrix file, the model's files)
    taken = [(args.fasta, "the FASTA"), (args.fasta + ".fai", "the FASTA's index"),
             (args.fasta + ".gzi", "the FASTA's .gzi index")]  # fmt: skip
    if args.pwm:
        taken.append((args.pwm, "--pwm"))
    model_dir = os.path.realpath(args.model) if args.model and os.path.isdir(args.model) else None
    for flag in OUTPUTS:
        path, name = getattr(args, flag), f"--{flag.replace('_', '-')}"
        if not path:
            continue
        for other, what in taken:
            if same_file(path, other):
                p.error(f"{what} and {name} name the same file {path}")
        if model_dir and os.path.commonpath([os.path.realpath(path), model_dir]) == model_dir:
            p.error(
                f"MODEL and {name}: {path} is inside the model folder {args.model}, whose files it would replace"
            )
        taken.append((path, name))
    if args.model is None and not args.pwm:
        p.error("without a MODEL, --pwm is required (the PWM scan is then the only track)")
    if args.model is None:  # options a PWM-only run would drop without a word
        given = [f"--{flag.replace('_', '-')}" for flag in MODEL_OPTIONS if getattr(args, flag) is not None]
        if given:
            p.error(f"{' '.join(given)}: option(s) of the model scan, given without a MODEL")
        if args.pwm_out:
            p.error(
                "--pwm-out names the PWM track's file next to a MODEL's; without a MODEL it goes to --out"
            )
    if not args.pwm:
        given = [f"--{flag.replace('_', '-')}" for flag in PWM_OPTIONS if getattr(args, flag) is not None]
        if given:
            p.error(f"{' '.join(given)}: option(s) of the PWM scan, given without --pwm")
    if args.threshold is None:
        args.threshold = DEFAULT_THRESHOLD
    if args.batch_size is None:
        args.batch_size = BATCH_SIZE
    if args.min_score is None:
        args.min_score = 0.0
    if args.device is not None:  # now, not after the model is loaded
        import torch

        try:
            torch.empty(0, device=args.device)
        except (RuntimeError, AssertionError) as e:  # a bad name; a device this torch build or host lacks
            p.error(f"--device {args.device}: {str(e).strip().splitlines()[0]}")
        if torch.device(args.device).type == "meta":
            p.error(f"--device {args.device}: a meta device holds no data, the model cannot run there")
    if args.model is not None and args.pwm and not args.pwm_out:
        p.error("with both a MODEL and --pwm, name the PWM track's file with --pwm-out")
    if args.model is None and not args.motif_ids:
        p.error("without a MODEL, choose the PWM's motifs with --motif-ids (e.g. MA0139.2)")
    return args


def default_parallelism(
    workers: int | None, threads: int | None, device: str | None
) -> tuple[int, int | None]:
    """``(workers, torch threads or None to leave torch's)``. On CPU: one worker per usable core (at most 8),
    each on one torch thread. Two torch threads on a two-core host that other jobs share spin in their
    barriers (7x the CPU time of one thread in benchmarks/genome_scan.md); one thread per batch and two
    batches at once use both cores without that."""
    if workers is None:
        on_cpu = device is None or str(device).startswith("cpu")
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        workers = min(cores, MAX_DEFAULT_WORKERS) if on_cpu else 1
    if threads is None and workers > 1:
        threads = 1
    return workers, threads


def pwm_motifs(args: argparse.Namespace) -> list:
    """The ``--pwm`` motifs: by ``--motif-ids``, else by the model's motif names (read from its config, so
    that a name missing from the file stops the run before the model scan)."""
    names = None
    if not args.motif_ids:
        from transformers import AutoConfig

        names = AutoConfig.from_pretrained(args.model).motif_names
    try:
        return select_motifs(args.pwm, args.motif_ids, names)
    except ValueError as e:
        if not args.motif_ids:
            raise
        motifs = read_motifs(args.pwm)
        ids = {m.matrix_id for m in motifs}
        for wanted in args.motif_ids:  # a motif name (CTCF) where an id (MA0139.2) belongs
            named = [m.matrix_id for m in motifs if m.name == wanted]
            if wanted not in ids and named:
                raise ValueError(
                    f"{args.pwm}: --motif-ids takes matrix ids, and {wanted!r} is the name of "
                    f"{len(named)} motif(s): {named}; pass their ids"
                ) from e
        raise


def _raise_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # unwinds as Ctrl-C does, so unfinished outputs are removed


def _write(path: str, hits, gff: str | None, fasta: FastaFile, source: str) -> int:
    """Write ``hits`` as BED (and GFF3) in one pass over them: memory does not grow with their number."""
    with atomic_open(path) as f:
        if not gff:
            return write_bed(hits, f)
        with atomic_open(gff) as g:  # inside: a failed GFF leaves no BED either

            def to_bed(hits):  # each hit goes to the BED as the GFF3 writer takes it
                for hit in hits:
                    f.write(bed_line(hit))
                    yield hit

            return write_gff3(to_bed(hits), g, source, [(r.name, r.length) for r in fasta.records])


def main(argv=None) -> dict:
    args = parse_args(argv)
    t0 = time.perf_counter()
    progress = False if args.no_progress else None
    if args.model is not None:
        from hf_sparse.genome.model_scan import check_model_path

        check_model_path(args.model, "MODEL")  # a missing folder, not a Hub error
    motifs = pwm_motifs(args) if args.pwm else None  # before any scan: a typo must not cost a model scan
    fasta = FastaFile(args.fasta, write_index=args.write_index)
    total = sum(r.length for r in fasta.records)
    summary = {"fasta": args.fasta, "format": fasta.kind, "records": len(fasta.records), "bases": total}
    if args.model is not None:
        import torch

        from hf_sparse.genome.model_scan import load_scanner

        workers, threads = default_parallelism(args.workers, args.threads, args.device)
        before = torch.get_num_threads()  # restored after the scan (main() is also called as a function)
        if threads:
            torch.set_num_threads(threads)
        try:
            scanner = load_scanner(args.model, device=args.device, window=args.window, stride=args.stride,
                                   batch_size=args.batch_size, skip_n=args.skip_n, min_score=args.min_score,
                                   attention_backend=args.attention_backend, workers=workers)  # fmt: skip
            t, cpu = time.perf_counter(), time.process_time()
            n = _write(args.out, scanner.scan(fasta, progress=progress), args.gff, fasta, "hf_sparse")
            wall, cpu = time.perf_counter() - t, time.process_time() - cpu
            summary["model"] = {"path": args.model, "out": args.out, "hits": n, "window": scanner.window,
                                "stride": scanner.stride, "batch_size": scanner.batch_size, "workers": workers,
                                "threads": threads or before,
                                "attention_backend": scanner.attention_backend, "scan_s": round(wall, 2),
                                "scan_cpu_s": round(cpu, 2), "bases_per_s": round(total / wall),
                                "bases_per_cpu_s": round(total / max(cpu, 1e-9))}  # fmt: skip
        finally:
            torch.set_num_threads(before)
    if args.pwm:
        out = args.pwm_out or args.out
        t = time.perf_counter()
        hits = pwm_scan(fasta, motifs, args.threshold, args.skip_n, progress=progress)
        n = _write(out, hits, args.gff if args.model is None else None, fasta, "pwm")
        wall = time.perf_counter() - t
        summary["pwm"] = {"motifs": [m.matrix_id for m in motifs], "threshold": args.threshold, "out": out,
                          "hits": n, "scan_s": round(wall, 2), "bases_per_s": round(total / wall)}  # fmt: skip
    fasta.close()
    summary["wall_s"] = round(time.perf_counter() - t0, 2)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    summary["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 1)  # all threads, imports included
    summary["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)
    summary["load_average"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(summary, indent=2)
    print(text)
    if args.summary:
        atomic_write(args.summary, text + "\n")
    return summary


def cli(argv=None) -> int:
    """``main`` for the command line: an input error (bad FASTA, motif file or option, a missing file) is one
    ``error:`` line and exit code 2; ``--debug`` shows its traceback."""
    try:
        main(argv)
    except (ValueError, OSError) as e:
        if "--debug" in (sys.argv[1:] if argv is None else argv):
            raise
        print(f"{os.path.basename(sys.argv[0])}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    sys.exit(cli())
