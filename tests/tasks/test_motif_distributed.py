"""The tiny motif recipe (few steps) under ``accelerate launch`` with two CPU processes, and killed after
its first checkpoint then resumed with ``--resume`` (plus a corrupt checkpoint named in the error).

Both start fresh interpreters (torch + transformers + hf_sparse imports in every process), so they
are marked ``slow``; the generic machinery has fast versions on the toy task in ``tests/training``.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_sparse.training import latest_checkpoint
from tests.training.helpers import FINETUNE, PYTHON, REPO_ROOT, load_finetune_module, subprocess_env

TINY = REPO_ROOT / "pipelines" / "motif" / "tiny.yaml"
SMALL = [
    "num_validation=16",
    "num_test=16",
    "hidden_size=32",
    "intermediate_size=64",
    "num_attention_heads=2",
    "report_to=none",
    "disable_tqdm=true",
    "logging_steps=2",
]


@pytest.mark.slow
def test_tiny_recipe_under_accelerate_launch_with_two_cpu_processes(tmp_path):
    out = tmp_path / "out"
    accelerate = Path(sys.executable).parent / "accelerate"
    cmd = [
        str(accelerate), "launch", "--config_file", str(REPO_ROOT / "configs" / "accelerate" / "cpu_ddp.yaml"),
        str(FINETUNE), str(TINY), "--output_dir", str(out),
        "--override", *SMALL, "num_train=64", "per_device_train_batch_size=8", "num_train_epochs=2",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "all_results.json").read_text())
    assert results["world_size"] == 2 and results["distributed_type"] == "MULTI_CPU"
    assert results["global_step"] == 8  # 64 examples / (8 per process x 2 processes) x 2 epochs
    assert "test_span_f1" in results and "eval_accuracy" in results  # evaluated on both ranks' shards
    assert (out / "model.safetensors").is_file() and (out / "modeling_motif.py").is_file()
    assert (out / "checkpoint-8" / "rng_state_1.pth").is_file()  # rank 1 took part in the checkpoint
    history = json.loads((out / "log_history.json").read_text())
    losses = [e["loss"] for e in history if "loss" in e]
    assert losses and all(0 < v < 5 for v in losses)  # a per-example mean, not scaled by the world size


MAX_STEPS, SAVE_STEPS = 12, 4


@pytest.mark.slow
def test_tiny_recipe_killed_after_a_checkpoint_resumes_to_the_planned_step(tmp_path, capsys):
    out = tmp_path / "out"
    overrides = [*SMALL, "num_train=512", "per_device_train_batch_size=8", f"max_steps={MAX_STEPS}",
                 "save_strategy=steps", f"save_steps={SAVE_STEPS}", "save_total_limit=null", "eval_strategy=no",
                 "plots=false", "attention_plot=false"]  # fmt: skip
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(
        [PYTHON, str(FINETUNE), str(TINY), "--output_dir", str(out), "--override", *overrides],
        cwd=REPO_ROOT, env=subprocess_env(), stdout=log, stderr=log,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not (out / f"checkpoint-{SAVE_STEPS}").is_dir():
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint after 300 s"
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
    finally:
        first.kill()
        first.wait()
        log.close()
    assert first.returncode == -signal.SIGKILL
    assert not (out / "all_results.json").exists()
    latest = latest_checkpoint(out)
    resumed_step = int(latest.rsplit("-", 1)[1])
    assert SAVE_STEPS <= resumed_step < MAX_STEPS

    finetune = load_finetune_module()
    args = [str(TINY), "--output_dir", str(out), "--resume", "--override", *overrides]
    assert finetune.main(args) == 0
    results = json.loads((out / "all_results.json").read_text())
    assert results["global_step"] == MAX_STEPS and results["resumed_from"] == os.path.basename(latest)
    assert results["start_step"] == resumed_step and results["steps_this_run"] == MAX_STEPS - resumed_step
    assert "test_span_f1" in results

    # a corrupt latest checkpoint: --resume refuses it with one error line naming the folder
    corrupt = Path(latest_checkpoint(out))
    (corrupt / "model.safetensors").write_bytes(b"not a safetensors file")
    capsys.readouterr()
    assert finetune.main(args) == 2  # a user error: one line, exit 2 (as every one-line error of the script)
    err = capsys.readouterr().err
    assert f"checkpoint {corrupt} is incomplete or corrupt" in err and "model.safetensors" in err
