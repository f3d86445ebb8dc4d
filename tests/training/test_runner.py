"""run() end to end on the toy task, in-process: training, evaluation, outputs, LoRA, CLI errors, push."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from hf_sparse.training import RecipeError, get_task, latest_checkpoint, load_recipe, run, validate_checkpoint
from tests.test_hub import _no_manifest
from tests.training.helpers import load_finetune_module, toy_recipe, write_recipe
from tests.training.toy_task import ToyArguments, make_texts, save_toy_model

REPO = Path(__file__).resolve().parents[2]

try:
    from hf_sparse import hub
except ImportError:  # written concurrently; the runner skips the card without it
    hub = None


def _accuracy(model_dir, n=128):
    """Validation accuracy of a saved model folder, reloaded with the Auto classes."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    texts, labels = make_texts(n, ToyArguments(), seed=2)  # the validation split's seed
    with torch.no_grad():
        logits = model(**tokenizer(texts, return_tensors="pt", padding=True)).logits
    return float((logits.argmax(-1).numpy() == np.array(labels)).mean())


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """One full run: 3 epochs x 16 steps, TensorBoard on, card on (when hf_sparse.hub exists)."""
    out = tmp_path_factory.mktemp("toy_run") / "out"
    recipe = toy_recipe(out, report_to="tensorboard", model_card=True)
    results = run(write_recipe(out.parent / "toy.yaml", recipe))
    return out, results


def test_trains_and_evaluates_each_epoch(toy_run):
    out, results = toy_run
    assert results["eval_accuracy"] >= 0.9 and results["test_accuracy"] >= 0.9  # chance is 0.5
    assert results["global_step"] == 48 and results["epoch"] == 3.0
    history = json.loads((out / "log_history.json").read_text())
    per_epoch = [e for e in history if "eval_accuracy" in e and "train_runtime" not in e]
    assert [e["epoch"] for e in per_epoch][:3] == [1.0, 2.0, 3.0]  # + the final evaluation
    assert any("test_accuracy" in e for e in history)
    train_losses = [e["loss"] for e in history if "loss" in e]
    assert len(train_losses) >= 9 and train_losses[-1] < train_losses[0] - 0.2


def test_all_results(toy_run):
    out, results = toy_run
    saved = json.loads((out / "all_results.json").read_text())
    for key in ("train_loss", "train_runtime", "eval_loss", "eval_accuracy", "test_loss", "test_accuracy"):
        assert isinstance(saved[key], float), key
    assert saved["world_size"] == 1 and saved["distributed_type"] == "NO"
    assert saved["num_parameters"] == saved["num_trainable_parameters"] > 10_000
    assert saved["wall_time_s"] > 0 and saved["start_step"] == 0 and saved["steps_this_run"] == 48
    assert saved["resumed_from"] is None
    assert saved["recipe"]["values"]["learning_rate"] == 3e-3
    assert saved["recipe"]["source"] == "toy.yaml"  # no folder of this machine (see the test below)
    assert saved["eval_accuracy"] == results["eval_accuracy"]


def test_outputs_and_reload(toy_run):
    out, results = toy_run
    png = (out / "loss.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert list((out / "runs").rglob("events.out.tfevents.*"))  # TensorBoard, the default report_to
    assert [os.path.basename(p) for p in sorted(out.glob("checkpoint-*"))] == [
        "checkpoint-16",
        "checkpoint-32",
        "checkpoint-48",
    ]  # save_strategy "epoch"
    validate_checkpoint(latest_checkpoint(out))
    assert _accuracy(out) == pytest.approx(results["eval_accuracy"])  # the saved model is the trained one
    if hub is not None:
        card = (out / "README.md").read_text()
        assert "eval_accuracy" in card or "accuracy" in card
        assert results["model_card"] == str(out / "README.md")


@pytest.mark.skipif(hub is None, reason="hf_sparse.hub is not available yet")
def test_no_pushed_file_names_a_folder_of_this_machine(tmp_path, monkeypatch):
    """all_results.json is pushed with the model, and it held output_dir, the card's path, the task's plot paths,
    the recipe file and the overrides as absolute paths (home folder, user name): now relative ones."""
    from tests.training.toy_task import ToyTask

    work, home = tmp_path / "work", tmp_path / "home"
    (work / "recipes").mkdir(parents=True)
    (home / "data").mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    out = work / "runs" / "out"

    def after_training(self, trainer, args, output_dir):
        return {"plot_png": os.path.join(output_dir, "plot.png"), "data": args.data_dir,
                "elsewhere": str(tmp_path / "other" / "file.txt")}  # fmt: skip

    monkeypatch.setattr(ToyTask, "after_training", after_training)
    values = dict(max_steps=1, eval_strategy="no", save_strategy="no", num_test=0, model_card=True)
    recipe = write_recipe(work / "recipes" / "r.yaml", toy_recipe(tmp_path / "unused", **values))
    results = run(str(recipe), [f"output_dir={out}", f"data_dir={home / 'data'}"])
    files = hub.upload_file_list(out)
    assert "all_results.json" in files and "README.md" in files
    for name in files:
        if name.endswith((".json", ".md")):
            text = (out / name).read_text()
            for local in (str(tmp_path), str(REPO)):
                assert local not in text, (name, local)
    saved = json.loads((out / "all_results.json").read_text())
    assert saved["output_dir"] == "runs/out" and saved["model_card"] == "README.md"
    assert saved["extras"] == {"plot_png": "plot.png", "data": "~/data", "elsewhere": "file.txt"}
    assert saved["recipe"]["source"] == "recipes/r.yaml"
    assert saved["recipe"]["overrides"] == ["output_dir=runs/out", "data_dir=~/data"]
    values = saved["recipe"]["values"]
    assert values["output_dir"] == "runs/out" and values["data_dir"] == "~/data"
    assert results["output_dir"] == str(out)  # run() returns the paths as they are
    assert results["model_card"] == str(out / "README.md")


def test_existing_checkpoints_need_resume_or_overwrite(toy_run, tmp_path):
    out, _ = toy_run
    copy = tmp_path / "out"
    shutil.copytree(out / "checkpoint-16", copy / "checkpoint-16")
    with pytest.raises(RecipeError, match="already holds checkpoints.*--resume.*--overwrite_output_dir"):
        run(toy_recipe(copy))
    assert (copy / "checkpoint-16").is_dir()


def test_lora_with_activation_checkpointing(tmp_path):
    out = tmp_path / "lora"
    recipe = toy_recipe(out, lora=True, lora_r=8, learning_rate=3e-2, num_train_epochs=2, plots=False)
    results = run(recipe, ["activation_checkpointing=true"])
    assert results["extras"]["activation_checkpointing"] is True
    assert results["eval_accuracy"] >= 0.75  # LoRA on q/v of a random tiny BERT still learns
    trainable = results["extras"]["trainable_parameters"]
    assert trainable and all("lora_" in n or "modules_to_save" in n for n in trainable), trainable
    assert any(".query.lora_A" in n for n in trainable) and any(".value.lora_B" in n for n in trainable)
    assert not any(".key." in n or "embeddings" in n for n in trainable)  # only q/v adapters + the head
    assert results["num_trainable_parameters"] < results["num_parameters"] / 2
    # output_dir: a plain (merged) model; output_dir/adapter: the adapter alone
    assert (out / "adapter" / "adapter_config.json").is_file()
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert not [k for k in f.keys() if "lora" in k]
    assert _accuracy(out) == pytest.approx(results["eval_accuracy"])  # merged == trained adapter model


# --- the script ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finetune():
    return load_finetune_module()


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda c: (c / "trainer_state.json").write_text("not json"), "trainer_state.json is not valid JSON"),
        (lambda c: (c / "model.safetensors").unlink(), "no model weights"),
    ],
)
def test_resume_from_a_corrupt_checkpoint_exits_2(toy_run, tmp_path, finetune, capsys, damage, problem):
    out, _ = toy_run
    copy = tmp_path / "out"
    shutil.copytree(out / "checkpoint-32", copy / "checkpoint-32")
    damage(copy / "checkpoint-32")
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(copy))
    assert finetune.main([str(recipe), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: checkpoint ") and str(copy / "checkpoint-32") in err and problem in err
    assert "Traceback" not in err


def test_user_errors_and_usage_errors_exit_2(tmp_path, finetune, capsys):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(tmp_path / "o", bogus_key=1))
    assert finetune.main([str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe key 'bogus_key'" in err and str(recipe) in err
    assert finetune.main([str(tmp_path / "missing.yaml")]) == 2
    assert "recipe file not found" in capsys.readouterr().err
    recipe = write_recipe(tmp_path / "ok.yaml", toy_recipe(tmp_path / "o"))
    assert finetune.main([str(recipe), "--override", "lora_r=x"]) == 2
    assert "lora_r='x'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        finetune.main([str(recipe), "--no-such-flag"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        finetune.main([])
    assert info.value.code == 2


def test_every_flag_has_help(finetune):
    import argparse

    actions = [a for a in finetune.build_parser()._actions if not isinstance(a, argparse._HelpAction)]
    assert {a.dest for a in actions} == {
        "recipe", "resume", "override", "output_dir", "overwrite_output_dir", "debug"
    }  # fmt: skip
    assert all(a.help for a in actions)
    args = finetune.parse_args(["r.yaml", "--override", "a=1", "b=2", "--override", "c=3", "--resume"])
    assert args.override == ["a=1", "b=2", "c=3"] and args.resume and args.output_dir is None


@pytest.mark.skipif(hub is None, reason="hf_sparse.hub is not available yet")
def test_push_with_the_hub_unreachable(tmp_path, finetune, capsys):
    out = tmp_path / "out"
    recipe = write_recipe(
        tmp_path / "r.yaml",
        toy_recipe(
            out,
            push_to_hub=True,
            hub_model_id="someone/toy",
            max_steps=2,
            eval_strategy="no",
            save_strategy="no",
            plots=False,
            num_test=0,
        ),
    )
    assert finetune.main([str(recipe)]) == 3  # HF_HUB_OFFLINE=1 (tests/conftest.py)
    err = capsys.readouterr().err.strip().splitlines()  # progress bars, then the message
    errors = [line for line in err if line.startswith("error")]
    assert errors == [err[-1]], err  # one line, last, no traceback
    assert "someone/toy" in errors[0] and "intact" in errors[0] and "Traceback" not in "\n".join(err)
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    results = json.loads((out / "all_results.json").read_text())
    assert results["global_step"] == 2


@pytest.fixture
def hub_calls(monkeypatch):
    """Online, with a token, and HfApi's create_repo/create_branch/upload_folder recorded instead of sent."""
    from huggingface_hub import constants

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", "hf_FaKeToKeN0123456789abcdefXYZ")
    calls = {}
    monkeypatch.setattr("huggingface_hub.HfApi.create_repo", lambda self, repo_id, **k: None)
    monkeypatch.setattr("huggingface_hub.HfApi.hf_hub_download", _no_manifest)  # no earlier push's bundle
    monkeypatch.setattr(
        "huggingface_hub.HfApi.create_branch", lambda self, repo_id, branch, **k: calls.update(branch=branch)
    )

    def upload_folder(self, **k):
        calls["upload"] = k
        return type("Info", (), {"repo_url": "https://huggingface.co/someone/toy"})()

    monkeypatch.setattr("huggingface_hub.HfApi.upload_folder", upload_folder)
    return calls


def _push_recipe(out, **values):
    return toy_recipe(
        out, push_to_hub=True, hub_model_id="someone/toy", max_steps=1, eval_strategy="no",
        save_strategy="no", plots=False, num_test=0, **values,
    )  # fmt: skip


@pytest.mark.skipif(hub is None, reason="hf_sparse.hub is not available yet")
def test_push_goes_to_hub_revision(tmp_path, hub_calls):
    run(_push_recipe(tmp_path / "out", hub_revision="dev"))
    assert hub_calls["branch"] == "dev"  # created if missing (exist_ok)
    assert hub_calls["upload"]["revision"] == "dev"


@pytest.mark.skipif(hub is None, reason="hf_sparse.hub is not available yet")
def test_an_unmerged_lora_adapter_is_pushed(tmp_path, hub_calls):
    """lora: true, merge_lora: false on a saved model: output_dir holds the adapter alone (no config.json), which
    names its base model and loads on it; it is pushed."""
    from peft import AutoPeftModelForSequenceClassification

    base = save_toy_model(tmp_path / "base")
    out = tmp_path / "out"
    results = run(_push_recipe(out, lora=True, merge_lora=False, model_name_or_path=str(base)))
    assert not (out / "config.json").exists()
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base)
    AutoPeftModelForSequenceClassification.from_pretrained(out)  # the base it names, with the adapter
    sent = hub_calls["upload"]["allow_patterns"]
    assert "adapter_config.json" in sent and "adapter_model.safetensors" in sent
    assert results["hub_url"] == "https://huggingface.co/someone/toy"


def test_an_unmerged_lora_adapter_of_a_new_model_is_an_error_before_training(tmp_path, finetune, capsys):
    """lora: true, merge_lora: false without model_name_or_path: the adapter alone would name no base model (the
    model trains from random initialisation) and load nowhere. One error line naming both keys, nothing trained."""
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(out, lora=True, merge_lora=False, max_steps=1))
    assert finetune.main([str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        err[-1].startswith("error: ") and "merge_lora: false" in err[-1] and "model_name_or_path" in err[-1]
    )
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.skipif(hub is None, reason="hf_sparse.hub is not available yet")
def test_any_push_failure_exits_3_with_one_line(tmp_path, hub_calls, finetune, monkeypatch, capsys):
    """Not only an unreachable Hub: whatever the push raises, the run ends with one error line and exit code 3."""

    def upload_folder(self, **k):
        raise RuntimeError("something unexpected\nin two lines")

    monkeypatch.setattr("huggingface_hub.HfApi.upload_folder", upload_folder)
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", _push_recipe(out, hub_revision="dev"))
    assert finetune.main([str(recipe)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error")]
    assert errors == [err[-1]] and "Traceback" not in "\n".join(err), err
    assert "RuntimeError: something unexpected in two lines" in errors[0]
    assert f"the local output at {out} is intact" in errors[0]
    assert errors[0].endswith(f"push it later with: python -m hf_sparse.hub {out} someone/toy --revision dev")
    assert (out / "model.safetensors").is_file()


@pytest.mark.parametrize("strategy", ["every_save", "checkpoint", "all_checkpoints"])
def test_a_hub_strategy_the_run_does_not_honour_is_an_error_before_training(tmp_path, strategy):
    from hf_sparse.training.runner import _check_push

    out = tmp_path / "out"
    with pytest.raises(RecipeError, match=f"hub_strategy='{strategy}' is not supported: the run pushes"):
        run(_push_recipe(out, hub_strategy=strategy))
    assert not out.exists() or not any(out.iterdir())  # nothing trained
    recipe_args, _, training_args = load_recipe(_push_recipe(out, hub_strategy="end"))
    _check_push(recipe_args, training_args)  # the one it honours: push once at the end
    with pytest.raises(RecipeError, match="hub_revision must be a branch name, got ' '"):
        run(_push_recipe(out, hub_revision=" "))


def test_push_needs_a_namespaced_repo_id(tmp_path):
    with pytest.raises(RecipeError, match="hub_model_id: 'user/name'"):
        run(toy_recipe(tmp_path, push_to_hub=True))


@pytest.mark.skipif(hub is None, reason="hf_sparse.hub is not available yet")
@pytest.mark.parametrize(
    "recipe, overrides, base_model",
    [
        ("dialogue/base-selection.yaml", [], "allenai/longformer-base-4096"),
        ("dialogue/base-tracking.yaml", ["data_dir={tmp}"], "allenai/longformer-base-4096"),
        ("dialogue/tiny-selection.yaml", ["model_name_or_path={tmp}/tracking"], None),  # a local folder
        ("summarization/led-base.yaml", [], "allenai/led-base-16384"),
        ("summarization/tiny-extractive.yaml", [], None),  # a new model
        ("lm/dense.yaml", [], None),
    ],
)
def test_model_card_names_the_hub_base_model_and_no_local_path(recipe, overrides, base_model, tmp_path):
    """The card (pushed to the Hub) says which Hub model was fine-tuned and holds no path of this machine."""
    from hf_sparse.training.runner import _write_model_card

    (tmp_path / "tracking").mkdir()
    overrides = [o.format(tmp=tmp_path) for o in overrides] + ["bf16=false", "fp16=false"]
    recipe_args, task_args, training_args = load_recipe(REPO / "pipelines" / recipe, overrides)
    task = get_task(recipe_args.task)()
    results = {"eval_loss": 1.0}
    card = Path(_write_model_card(task, task_args, recipe_args, training_args, results, str(tmp_path), None))
    text = card.read_text()
    meta = yaml.safe_load(text.split("---")[1])
    assert meta.get("base_model") == base_model
    for path in (task_args.data_dir, str(tmp_path), str(REPO), os.path.dirname(task_args.data_dir)):
        assert path not in text, path
    assert os.path.basename(task_args.data_dir) in meta["model-index"][0]["results"][0]["dataset"]["name"]


@pytest.mark.skipif(hub is None, reason="hf_sparse.hub is not available yet")
def test_a_metric_that_is_not_finite_is_left_out_of_the_card_not_the_card(tmp_path, caplog):
    """AUROC of a split holding one class is NaN: the card is written without it, and says so."""
    from hf_sparse.training.runner import _write_model_card

    recipe_args, task_args, training_args = load_recipe(toy_recipe(tmp_path))
    task = get_task(recipe_args.task)()
    results = {"eval_accuracy": 0.5, "eval_auroc": float("nan"), "test_loss": float("inf")}
    with caplog.at_level("WARNING"):
        path = _write_model_card(task, task_args, recipe_args, training_args, results, str(tmp_path), None)
    assert path == str(tmp_path / "README.md") and "model_card_error" not in results
    text = (tmp_path / "README.md").read_text()
    assert "| eval_accuracy | 0.5 |" in text
    assert "| metrics left out (not finite) | eval_auroc = nan, test_loss = inf |" in text
    meta = yaml.safe_load(text.split("---")[1])
    assert [r["type"] for r in meta["model-index"][0]["results"][0]["metrics"]] == ["accuracy"]
    assert "metrics left out because they are not finite: eval_auroc=nan, test_loss=inf" in caplog.text


@pytest.mark.skipif(hub is None, reason="hf_sparse.hub is not available yet")
def test_the_card_gives_each_split_a_result_and_publishes_no_count_as_a_metric(tmp_path):
    """eval_ and test_ values sat in one model-index result without a split; the task's counts (n_*: the turns
    an accuracy is over) were published as metrics."""
    from hf_sparse.training.runner import _write_model_card

    recipe_args, task_args, training_args = load_recipe(toy_recipe(tmp_path))
    task = get_task(recipe_args.task)()
    results = {"eval_accuracy": 0.5, "eval_n_seen": 5, "test_accuracy": 0.75, "test_num_turns": 8,
               "test_runtime": 1.0}  # fmt: skip
    path = _write_model_card(task, task_args, recipe_args, training_args, results, str(tmp_path), None)
    text = Path(path).read_text()
    meta = yaml.safe_load(text.split("---")[1])
    assert [(r["dataset"]["split"], r["metrics"]) for r in meta["model-index"][0]["results"]] == [
        ("validation", [{"type": "accuracy", "value": 0.5, "name": "eval_accuracy"}]),
        ("test", [{"type": "accuracy", "value": 0.75, "name": "test_accuracy"}]),
    ]
    assert "| eval_n_seen | 5 |" in text and "| test_num_turns | 8 |" in text  # listed as counts
    assert "n_seen" not in text.split("---")[1] and "runtime" not in text


@pytest.mark.skipif(hub is None, reason="hf_sparse.hub is not available yet")
def test_the_card_reads_the_remote_code_requirements_from_the_bundle(tmp_path):
    """A task outside hf_sparse whose model uses ExportCodeMixin saves code that imports hf_sparse (its manifest
    says so): the card said it loads without installing hf-sparse."""
    from hf_sparse.hub.bundle import BUNDLE_MANIFEST
    from hf_sparse.training.runner import _write_model_card

    recipe_args, task_args, training_args = load_recipe(toy_recipe(tmp_path))
    task = get_task(recipe_args.task)()

    def card(requirements):
        (tmp_path / BUNDLE_MANIFEST).write_text(json.dumps({"requirements": requirements}))
        path = _write_model_card(task, task_args, recipe_args, training_args, {}, str(tmp_path), None)
        return Path(path).read_text()

    text = card(["hf_sparse", "torch", "transformers"])
    assert "(`pip install hf-sparse`)" in text and "without installing hf-sparse" not in text
    text = card(["torch", "transformers"])
    assert "without\ninstalling hf-sparse" in text and "pip install hf-sparse" not in text


@pytest.mark.skipif(hub is None, reason="hf_sparse.hub is not available yet")
def test_a_per_layer_attention_pattern_reaches_the_card(tmp_path):
    from types import SimpleNamespace

    from hf_sparse import patterns as P
    from hf_sparse.training.runner import _write_model_card
    from tests.models.tiny import tiny_decoder_config

    config = tiny_decoder_config([P.SlidingWindow(window=8, causal=True), P.Strided(stride=4, causal=True)])
    assert isinstance(config.attention_pattern, list)
    recipe_args, task_args, training_args = load_recipe(toy_recipe(tmp_path))
    task = get_task(recipe_args.task)()
    model = SimpleNamespace(config=config)
    path = _write_model_card(task, task_args, recipe_args, training_args, {}, str(tmp_path), model)
    text = Path(path).read_text()
    assert "No attention pattern was recorded" not in text
    assert (
        "per layer: layer 0: sliding_window(window=8, causal=true) · layer 1: strided(stride=4, causal=true)"
        in text
    )
    assert "# layer 1: " in text and "child2019sparse" in text
    # the spec is a list: from_dict rebuilds one layer from each entry, not the pattern from the list
    assert "one entry per layer (`hf_sparse.patterns.from_dict(entry)` rebuilds that layer's pattern)" in text
    assert "from_dict(spec)` rebuilds the pattern" not in text


def test_the_card_reports_the_precision_trained_in():
    """accelerate turns fp16 off on the CPU (the run refuses it there): the card said fp16 for an fp32 run."""
    from types import SimpleNamespace

    import torch

    from hf_sparse.training.runner import _training_config

    def precision(device, **flags):
        values = dict(learning_rate=1e-3, num_train_epochs=1, max_steps=-1, per_device_train_batch_size=8,
                      gradient_accumulation_steps=1, world_size=1, lr_scheduler_type="linear", warmup_steps=0,
                      weight_decay=0.0, seed=0, bf16=False, fp16=False, device=torch.device(device))  # fmt: skip
        config = _training_config(SimpleNamespace(lora=False), SimpleNamespace(**{**values, **flags}))
        return config["mixed_precision"]

    assert precision("cpu", fp16=True) == "no" and precision("cuda", fp16=True) == "fp16"
    assert precision("cpu", bf16=True) == precision("cuda", bf16=True) == "bf16"
    assert precision("cpu") == "no"
