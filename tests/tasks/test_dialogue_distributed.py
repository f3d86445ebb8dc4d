"""The dialogue recipes' Trainer under ``accelerate launch`` with two CPU processes: ``eval_loss`` of a split whose
last batch the processes even out with repeated examples, and a training step of two per-process micro-batches,
equal those of one process reading every example in one batch."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import TrainingArguments

from hf_sparse.tasks.dialogue.collator import DialogueTrackingCollator, ResponseSelectionCollator
from hf_sparse.tasks.dialogue.data import build_selection_examples
from hf_sparse.training import get_task
from tests.models.dialogue_tiny import synthetic_dialogues, tokenizer_and_formatter
from tests.tasks.test_dialogue_losses import TRACKING, _model, _tracking_examples
from tests.training.helpers import REPO_ROOT, subprocess_env

WORKER = """
import json, sys
from pathlib import Path
import torch
from datasets import Dataset
from transformers import TrainingArguments
from hf_sparse.tasks.dialogue.collator import DialogueTrackingCollator, ResponseSelectionCollator
from hf_sparse.tasks.dialogue.modeling_dialogue import LongformerForDialogue
from hf_sparse.training import get_task

torch.set_num_threads(1)
folder = Path(sys.argv[1])
pad = json.loads((folder / "pad.json").read_text())
result = {}
for name, collator in (("dialogue-state-tracking", DialogueTrackingCollator(pad, 16)),
                       ("dialogue-response-selection", ResponseSelectionCollator(pad, 16))):
    data = Dataset.from_list(json.loads((folder / f"{name}.json").read_text()))
    result[name] = {}
    for step in ("train", "evaluate") if name == "dialogue-state-tracking" else ("evaluate",):
        args = TrainingArguments(str(folder / name), per_device_eval_batch_size=2, per_device_train_batch_size=2,
                                 max_steps=1, learning_rate=0.0, logging_steps=1, use_cpu=True, report_to=[],
                                 save_strategy="no", disable_tqdm=True)
        model = LongformerForDialogue.from_pretrained(folder / name)
        trainer = get_task(name).trainer_class(model=model, args=args, data_collator=collator)
        if step == "evaluate":
            result[name]["eval_loss"] = trainer.evaluate(data)["eval_loss"]
            continue
        trainer.train_dataset = Dataset.from_list(data.to_list()[:4])
        trainer.train()
        logged = next(entry for entry in trainer.state.log_history if "loss" in entry)
        result[name].update(loss=logged["loss"], grad_norm=logged["grad_norm"])
result["world_size"] = trainer.args.world_size
(folder / f"rank-{trainer.args.process_index}.json").write_text(json.dumps(result))
"""


def _single_process(name, model, collator, examples, tmp_path) -> dict:
    args = TrainingArguments(str(tmp_path / name), per_device_eval_batch_size=len(examples), per_device_train_batch_size=4,
                             max_steps=1, learning_rate=0.0, logging_steps=1, use_cpu=True, report_to=[],
                             save_strategy="no", disable_tqdm=True)  # fmt: skip
    trainer = get_task(name).trainer_class(model=model, args=args, data_collator=collator)
    out = {"eval_loss": trainer.evaluate(Dataset.from_list(examples))["eval_loss"]}
    if name == "dialogue-state-tracking":  # the step of one batch of the 4 examples the 2 processes share
        trainer.train_dataset = Dataset.from_list(examples[:4])
        trainer.train()
        logged = next(entry for entry in trainer.state.log_history if "loss" in entry)
        out.update(loss=logged["loss"], grad_norm=logged["grad_norm"])
    return out


# 30-60 s on 2 busy cores (a launcher and two workers importing torch/transformers/hf_sparse, and the one-process
# runs to compare with): slow, as tests/tasks/test_summarization_ddp.py
@pytest.mark.slow
def test_eval_loss_and_training_step_under_two_process_ddp_equal_one_process(tmp_path):
    torch.set_num_threads(1)
    tokenizer, formatter = tokenizer_and_formatter(max_length=64)
    # 5 and 7 examples in batches of 2 per process: the last batch of one process repeats an example (alone, or
    # next to a real one)
    tracking = _tracking_examples(formatter) + _tracking_examples(formatter)[1:2]
    selection = build_selection_examples(synthetic_dialogues(4), n_negatives=3, formatter=formatter)[:7]
    expected = {}
    for name, heads, collator, examples in (
        ("dialogue-state-tracking", TRACKING, DialogueTrackingCollator(tokenizer.pad_token_id, 16), tracking),
        ("dialogue-response-selection", {"selection_head": True},
         ResponseSelectionCollator(tokenizer.pad_token_id, 16), selection),
    ):  # fmt: skip
        model = _model(tokenizer, formatter, heads)
        model.save_pretrained(tmp_path / name)
        (tmp_path / f"{name}.json").write_text(json.dumps(examples))
        expected[name] = _single_process(name, model, collator, examples, tmp_path / "single")
    (tmp_path / "pad.json").write_text(json.dumps(tokenizer.pad_token_id))
    (tmp_path / "worker.py").write_text(WORKER)

    accelerate = Path(sys.executable).parent / "accelerate"
    cmd = [
        str(accelerate), "launch", "--config_file", str(REPO_ROOT / "configs" / "accelerate" / "cpu_ddp.yaml"),
        str(tmp_path / "worker.py"), str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank in (0, 1):
        result = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        assert result.pop("world_size") == 2
        wrong = [(name, key, result[name][key], value) for name, values in expected.items()
                 for key, value in values.items() if result[name][key] != pytest.approx(value, rel=1e-4)]  # fmt: skip
        assert not wrong, (rank, wrong)
