"""Adding a task is one folder plus one line: the toy task of this folder (config, model, data, metric,
pipeline, card template, descriptor; ``register(TOY_TASK)`` in ``__init__.py``) fine-tunes through
``scripts/finetune.py``, and its saved folder loads with ``AutoModel`` and ``pipeline()`` in a process
where neither hf_sparse nor this test package can be imported, with its own model card."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]

LOAD_WITHOUT_PACKAGES = """
import json, sys
sys.modules["hf_sparse"] = None  # importing hf_sparse (or the toy package) now raises ImportError
sys.modules["tests"] = None
from transformers import AutoModel, pipeline
folder = sys.argv[1]
model = AutoModel.from_pretrained(folder, trust_remote_code=True)
pipe = pipeline("toy-token-presence", model=folder, trust_remote_code=True)
print(json.dumps({
    "model_class": type(model).__module__ + "." + type(model).__name__,
    "pipeline_class": type(pipe).__module__ + "." + type(pipe).__name__,
    "with": pipe("t1 t7 t3 t2 t5 t0 t4 t8"),
    "without": pipe("t1 t2 t3 t2 t5 t0 t4 t8"),
}))
"""


def test_a_task_defined_in_a_test_folder_trains_saves_and_loads_without_the_package(tmp_path):
    out = tmp_path / "toy"
    recipe = tmp_path / "toy.yaml"
    recipe.write_text(yaml.safe_dump({
        "task": "tests.tasks.toy:TOY_TASK", "output_dir": str(out), "hidden_size": 16, "num_train": 256,
        "max_steps": 40, "per_device_train_batch_size": 16, "learning_rate": 0.05, "warmup_steps": 0,
        "eval_strategy": "no", "save_strategy": "no", "logging_steps": 10, "report_to": "none",
        "use_cpu": True, "plots": False, "seed": 0,
    }))  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    train = subprocess.run([sys.executable, str(REPO / "scripts" / "finetune.py"), str(recipe)],
                           capture_output=True, text=True, cwd=REPO, env=env, timeout=900)  # fmt: skip
    assert train.returncode == 0, train.stderr[-4000:]

    results = json.loads((out / "all_results.json").read_text())
    assert results["task"] == "toy-token-presence" and results["global_step"] == 40
    assert results["test_presence_accuracy"] >= 0.9  # the toy's own metric, through the Trainer
    card = (out / "README.md").read_text()
    assert "TOY-TASK-CARD" in card and 'print(pipe("t1 t7 t3"))' in card  # its template and description
    assert 'pipeline("toy-token-presence", model=' in card and "text-classification" in card
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "hf_sparse_test_toy_presence"
    assert config["auto_map"]["AutoModel"] == "modeling_toy.ToyPresenceModel"
    assert (
        config["custom_pipelines"]["toy-token-presence"]["impl"] == "tasks_toy_pipeline.ToyPresencePipeline"
    )

    load = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_PACKAGES, str(out)], capture_output=True,
                          text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": ""}, timeout=600)  # fmt: skip
    assert load.returncode == 0, load.stderr[-4000:]
    loaded = json.loads(load.stdout.strip().splitlines()[-1])
    assert loaded["model_class"].startswith("transformers_modules.") and loaded["model_class"].endswith(
        "modeling_toy.ToyPresenceModel"
    )
    assert loaded["pipeline_class"].endswith("tasks_toy_pipeline.ToyPresencePipeline")
    assert loaded["with"]["label"] == "present" and loaded["without"]["label"] == "absent"


def test_a_model_class_that_saves_without_its_remote_code_is_not_registered():
    """transformers' own save_pretrained never calls export_code_hook: registered as it was, a task's folders had
    no auto_map or custom_pipelines, while its card said trust_remote_code=True loads them."""
    import pytest
    import torch
    from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel

    from hf_sparse.models import register_auto
    from hf_sparse.models.longformer_tasks import ExportCodeMixin
    from tests.tasks.toy.modeling_toy import ToyPresenceModel

    class NoHookConfig(PretrainedConfig):
        model_type = "hf_sparse_test_no_hook"

    class NoHookModel(PreTrainedModel):
        config_class = NoHookConfig

        def forward(self, input_ids):
            return torch.zeros(1)

    with pytest.raises(TypeError) as raised:
        register_auto(NoHookConfig, {AutoModel: NoHookModel})
    message = str(raised.value)
    for needle in ("NoHookModel", "'hf_sparse_test_no_hook'", "never calls export_code_hook",
                   "class NoHookModel(ExportCodeMixin, PreTrainedModel)", "README 'Adding a task'"):  # fmt: skip
        assert needle in message, (needle, message)
    with pytest.raises(ValueError):  # nothing was registered
        AutoConfig.for_model("hf_sparse_test_no_hook")
    from hf_sparse.tasks import CardInfo, TaskDescriptor, register, registry

    descriptor = TaskDescriptor(
        name="no-hook-task", config_class=NoHookConfig, auto_classes={"AutoModel": NoHookModel},
        task_class="tests.tasks.toy.task:ToyTask", card=CardInfo(template="x.jinja", title="t", description="d"),
    )  # fmt: skip
    with pytest.raises(TypeError, match="never calls export_code_hook"):
        register(descriptor)
    with pytest.raises(KeyError):  # not left half-registered
        registry.get("no-hook-task")

    class MixinModel(ExportCodeMixin, NoHookModel):
        pass

    # the mixin's save_pretrained, or one of the model's own that calls the hook (the toy's)
    from hf_sparse.models import _calls_export_code_hook

    assert _calls_export_code_hook(MixinModel) and _calls_export_code_hook(ToyPresenceModel)
