"""scripts/benchmark_gpu.py --merge: runs merged into one table, also into an earlier merge."""

import json

from tests.script_loader import load_script

ENV = {
    "device": "GPU",
    "torch": "t",
    "transformers": "x",
    "flash_attn": "no",
    "tflops_min": 1,
    "tflops_max": 2,
}


def _run(path, rows, models=(), notes=()):
    kernels = [  # a time of None: a figure that failed
        {"kernel": k, "n": n, "mode": "fwd", **({"error": "failed"} if t is None else {"time_s": t})}
        for k, n, t in rows
    ]
    models = [{"model": m, "n": n, "time_s": t} for m, n, t in models]
    path.write_text(json.dumps({"env": ENV, "kernels": kernels, "models": models, "notes": list(notes)}))
    return str(path)


def test_merging_into_an_earlier_merge_keeps_its_runs_and_replaces_whole_rows(tmp_path):
    bench = load_script("benchmark_gpu")
    sdpa, flex = "SDPA full (FlashAttention)", "hf-sparse flex BigBird(64)"
    one = _run(tmp_path / "1.json", [(sdpa, 4096, 1.0), (flex, 4096, 2.0), (flex, 65536, 3.0)])
    note = f"{flex} at n=65536 (fwd): out of time"
    two = _run(tmp_path / "2.json", [(flex, 16384, 4.0), (flex, 65536, None)], [("M", 4096, 5.0)], [note])
    merged = tmp_path / "merged.json"
    merged.write_text(json.dumps(bench.merge_runs([one, two])))
    three = _run(tmp_path / "3.json", [(sdpa, 16384, 6.0)])

    res = bench.merge_runs([str(merged), three])
    assert len(res["runs"]) == 3
    rows = {(r["kernel"], r["n"]): (r.get("time_s"), r["run"]) for r in res["kernels"]}
    # run 3 replaces SDPA's whole row (its 4k figure from run 1 goes); BigBird's row stays run 2's
    assert rows == {(sdpa, 16384): (6.0, 3), (flex, 16384): (4.0, 2), (flex, 65536): (None, 2)}
    assert [(m["model"], m["run"]) for m in res["models"]] == [("M", 2)]
    assert res["notes"] == [f"run 2: {note}"]
