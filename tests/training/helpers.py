"""Helpers shared by the training tests."""

import os
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
FINETUNE = REPO_ROOT / "scripts" / "finetune.py"


def toy_recipe(output_dir, **values) -> dict:
    """A recipe dict for the toy task: 3 epochs of 16 steps, no TensorBoard, no card."""
    recipe = {
        "task": "tests.training.toy_task:ToyTask",
        "output_dir": str(output_dir),
        "num_train_epochs": 3,
        "learning_rate": 3.0e-3,
        "per_device_train_batch_size": 32,
        "logging_steps": 5,
        "report_to": "none",
        "model_card": False,
        "seed": 0,
    }
    recipe.update(values)
    return recipe


def write_recipe(path, recipe: dict) -> Path:
    path = Path(path)
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    return path


def subprocess_env() -> dict:
    """Environment for scripts started by tests: the repo importable, one thread, offline (inherited)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    env.pop("WORLD_SIZE", None)
    return env


def load_finetune_module():
    """scripts/finetune.py as a module (scripts/ is not a package)."""
    from tests.script_loader import load_script

    return load_script("finetune")


PYTHON = sys.executable
