"""DDP on CPU: accelerate launch with configs/accelerate/cpu_ddp.yaml starts two gloo processes."""

import json
import subprocess
import sys
from pathlib import Path

from tests.training.helpers import FINETUNE, REPO_ROOT, subprocess_env, toy_recipe, write_recipe

ACCELERATE_CONFIGS = REPO_ROOT / "configs" / "accelerate"


# ~25 s on 2 idle cores (launcher + two workers each importing torch/transformers/hf_sparse): under
# the 30 s line for the `slow` marker, so it runs with `make test`.
def test_two_process_ddp_on_cpu(tmp_path):
    accelerate = Path(sys.executable).parent / "accelerate"
    out, ranks = tmp_path / "out", tmp_path / "ranks"
    recipe = write_recipe(
        tmp_path / "ddp.yaml",
        toy_recipe(out, per_device_train_batch_size=16, record_ranks_to=str(ranks), plots=False),
    )
    proc = subprocess.run(
        [
            str(accelerate),
            "launch",
            "--config_file",
            str(ACCELERATE_CONFIGS / "cpu_ddp.yaml"),
            str(FINETUNE),
            str(recipe),
        ],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # two real processes, each in a world of 2 (recorded by the task itself, from torch.distributed)
    seen = sorted(json.loads(p.read_text())["rank"] for p in ranks.glob("rank-*.json"))
    assert seen == [0, 1]
    assert {json.loads(p.read_text())["world_size"] for p in ranks.glob("rank-*.json")} == {2}
    assert len({json.loads(p.read_text())["pid"] for p in ranks.glob("rank-*.json")}) == 2
    results = json.loads((out / "all_results.json").read_text())
    assert results["world_size"] == 2 and results["distributed_type"] == "MULTI_CPU"
    # 512 examples / (16 per process x 2 processes) = 16 steps per epoch, 3 epochs
    assert results["global_step"] == 48
    assert results["eval_accuracy"] >= 0.9
    # the loss is a per-example mean, not multiplied by the world size (Task.model_accepts_loss_kwargs)
    history = json.loads((out / "log_history.json").read_text())
    first_loss = next(e["loss"] for e in history if "loss" in e)
    assert 0.6 < first_loss < 0.8  # ln 2 = 0.69 for a fresh binary classifier
    assert (out / "model.safetensors").is_file() and (out / "checkpoint-48" / "trainer_state.json").is_file()
    assert (out / "checkpoint-48" / "rng_state_1.pth").is_file()  # rank 1 wrote into the atomic checkpoint


def test_accelerate_configs_parse():
    """The three shipped configs load with accelerate's config loader and launch validation."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType

    expected = {
        "cpu_ddp": DistributedType.MULTI_GPU,  # torchrun launcher; gloo/MULTI_CPU without GPUs
        "multi_gpu_ddp": DistributedType.MULTI_GPU,
        "fsdp": DistributedType.FSDP,
    }
    for name, kind in expected.items():
        config = load_config_from_file(str(ACCELERATE_CONFIGS / f"{name}.yaml"))
        assert config.distributed_type == kind and config.num_processes == 2, name
    fsdp = load_config_from_file(str(ACCELERATE_CONFIGS / "fsdp.yaml")).fsdp_config
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_state_dict_type"] == "FULL_STATE_DICT"


def test_deepspeed_configs_parse():
    """ZeRO-2 and ZeRO-3 configs for GPUs: batch size and accumulation left to the recipe ("auto")."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType

    for stage in (2, 3):
        config = load_config_from_file(str(ACCELERATE_CONFIGS / f"deepspeed_zero{stage}.yaml"))
        assert config.distributed_type == DistributedType.DEEPSPEED and config.num_processes == 2
        ds = config.deepspeed_config
        assert ds["zero_stage"] == stage and "gradient_accumulation_steps" not in ds
        assert config.mixed_precision == "bf16" and not config.use_cpu
    assert load_config_from_file(str(ACCELERATE_CONFIGS / "deepspeed_zero3.yaml")).deepspeed_config[
        "zero3_save_16bit_model"
    ]


def test_fsdp_config_builds_a_plugin(monkeypatch):
    """fsdp.yaml goes through `accelerate launch`'s validation into a FullyShardedDataParallelPlugin."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_multi_gpu_env

    args = launch_command_parser().parse_args(
        ["--config_file", str(ACCELERATE_CONFIGS / "fsdp.yaml"), str(FINETUNE), "recipe.yaml"]
    )
    args, _, _ = _validate_launch_command(args)
    assert args.use_fsdp and args.num_processes == 2
    env = prepare_multi_gpu_env(args)
    for key, value in env.items():
        if key.startswith(("FSDP_", "ACCELERATE_")):
            monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
    assert "FULL_STATE_DICT" in str(plugin.state_dict_type) and plugin.cpu_ram_efficient_loading
    assert plugin.auto_wrap_policy is not None  # transformer blocks from the model's _no_split_modules
