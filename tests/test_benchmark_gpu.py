"""scripts/benchmark_gpu.py --merge: runs merged into one table, also into an earlier merge."""

import json

import pytest

from tests.script_loader import load_script, usage_error

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


def _refused(bench, argv, monkeypatch, capsys, cuda=True):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(bench, "measure", lambda *a: pytest.fail("measured"))
    monkeypatch.setattr(bench, "model_step", lambda *a: pytest.fail("measured"))
    return usage_error(bench.main, argv, capsys).splitlines()[-1]


@pytest.mark.parametrize(
    "argv",
    [
        ["--only", "flex"],
        ["--models", "Longformer"],
        ["--sizes", "4096"],
        ["--model-sizes"],
        ["--device", "cpu"],
    ],
)
def test_a_partial_run_into_the_committed_results_is_refused(argv, tmp_path, monkeypatch, capsys):
    bench = load_script("benchmark_gpu")
    monkeypatch.chdir(tmp_path)
    assert "write a partial table: give --out (the default, benchmarks, holds" in _refused(
        bench, argv, monkeypatch, capsys
    )
    assert list(tmp_path.iterdir()) == []


def test_cuda_without_a_cuda_device_is_one_clear_error(tmp_path, monkeypatch, capsys):
    bench = load_script("benchmark_gpu")
    err = _refused(bench, ["--out", str(tmp_path)], monkeypatch, capsys, cuda=False)
    assert "--device cuda: torch " in err and "--device cpu dry-runs the script" in err


def test_sizes_need_a_value(monkeypatch, capsys):
    bench = load_script("benchmark_gpu")
    assert "--sizes: expected at least one argument" in _refused(bench, ["--sizes"], monkeypatch, capsys)


def test_sizes_below_1k_are_labelled_as_they_are(tmp_path):
    bench = load_script("benchmark_gpu")
    rows = [("SDPA full (FlashAttention)", 512, 1.0), ("SDPA full (FlashAttention)", 4096, 2.0)]
    res = json.loads(open(_run(tmp_path / "1.json", rows)).read())
    for r in res["kernels"]:
        r.update(x_bound=1.0, peak_mb=1.0)
    bench.write_markdown(res, str(tmp_path / "attention_gpu.md"))
    assert "| kernel | 512 | 4k |" in (tmp_path / "attention_gpu.md").read_text()


def test_an_interrupted_save_leaves_the_previous_tables_whole(tmp_path, monkeypatch):
    """save() runs after every figure: a run cut short while saving keeps the last whole files."""
    bench = load_script("benchmark_gpu")
    for name in ("attention_gpu.json", "attention_gpu.md"):
        (tmp_path / name).write_text("old")

    def rename_fails(src, dst):
        raise OSError("no space left on device")

    monkeypatch.setattr("os.replace", rename_fails)
    res = {"env": dict(ENV), "kernels": [], "models": [], "notes": []}
    with pytest.raises(OSError, match="no space left"):
        bench.save(res, str(tmp_path))
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {
        "attention_gpu.json": "old",
        "attention_gpu.md": "old",
    }
