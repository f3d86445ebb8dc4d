"""The bundled pipelines (``trust_remote_code``, hf_sparse blocked) batch through the ``Pipeline`` base too:
batch_size 1 and 3 give the same outputs on inputs of different lengths."""

import json
import os
import subprocess
import sys

import torch

from hf_sparse.tasks.summarization.data import synthetic_copy_documents
from tests.models.dialogue_tiny import ACTS, tiny_model, tokenizer_and_formatter
from tests.models.summarization_tiny import tiny_extractive, tiny_tokenizer
from tests.pipelines.outputs import assert_same_outputs

SCRIPT = """
import sys; sys.modules['hf_sparse'] = None; sys.dont_write_bytecode = True
import json
from transformers import pipeline
try:
    import hf_sparse
except ImportError:
    print("hf_sparse unavailable")
pipe = pipeline({task!r}, model={folder!r}, trust_remote_code=True)
inputs = json.loads({inputs!r})
print(type(pipe).__module__)
print(json.dumps([pipe(inputs, batch_size=1), pipe(inputs, batch_size=3)]))
"""


def _run(tmp_path, task, folder, inputs):
    script = SCRIPT.format(task=task, folder=str(folder), inputs=json.dumps(inputs))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_MODULES_CACHE=str(tmp_path / "modules"), OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "hf_sparse unavailable" and lines[1].startswith("transformers_modules")
    return json.loads(lines[-1])


def test_bundled_response_selection_batches(tmp_path):
    tokenizer, formatter = tokenizer_and_formatter(max_length=40)
    torch.manual_seed(0)
    model = tiny_model(tokenizer, formatter, selection_head=True, act_labels=ACTS, intent_labels=["NONE"])
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    dialogues = [
        {
            "turns": ["find me a restaurant please", "which city ?", "in paris"],
            "candidates": ["ok", "in rome", "bye"],
        },
        {"turns": ["hi"], "candidates": ["hello , how can i help ?", "goodbye"]},
    ]
    one, batched = _run(tmp_path, "dialogue-response-selection", tmp_path / "model", dialogues)
    assert [len(o["ranking"]) for o in one] == [3, 2]
    assert_same_outputs(batched, one)


def test_bundled_extractive_summarization_batches(tmp_path):
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    model = tiny_extractive(tok, max_chunk_length=40)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    docs = [
        " ".join(d["document"].split()) for d in synthetic_copy_documents(3, num_sentences=(3, 20), seed=5)
    ]
    one, batched = _run(tmp_path, "long-document-summarization", tmp_path / "model", docs)
    assert max(o["chunks"] for o in one) > 1
    assert_same_outputs(batched, one)
