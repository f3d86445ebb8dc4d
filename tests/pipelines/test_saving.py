"""``save_pretrained`` of every hf-sparse pipeline built from an in-memory model: the folder it writes loads
with ``pipeline(model=folder, trust_remote_code=True)`` and gives the same outputs; such a folder is refused
without ``trust_remote_code`` (transformers' rule for ``custom_pipelines``, kept as it is)."""

import json

import pytest
import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

import hf_sparse  # noqa: F401  (registers the pipeline tasks)
from hf_sparse.tasks.summarization.data import synthetic_copy_documents
from hf_sparse.tasks.summarization.pipeline import LongDocumentSummarizationPipeline
from hf_sparse.tokenization_dna import DNATokenizer
from tests.models.dialogue_tiny import ACTS, tiny_model, tokenizer_and_formatter
from tests.models.motif_tiny import motif_model
from tests.models.summarization_tiny import tiny_extractive, tiny_led, tiny_tokenizer
from tests.pipelines.outputs import assert_same_outputs

DIALOGUE = {"turns": ["find me a restaurant please", "which city ?", "in paris"]}


def _motif():
    model = motif_model(max_tokens=66, motif_names=["CTCF", "SP1"])
    with torch.no_grad():  # a spread-out tag head, so that an untrained model predicts spans
        for p in model.token_classifier.parameters():
            p.normal_(0.0, 2.0)
    return model, DNATokenizer(), ["ACGTTGCA" * 20, "GGGACT"]


def _dialogue():
    tokenizer, formatter = tokenizer_and_formatter(max_length=40)
    model = tiny_model(
        tokenizer, formatter, selection_head=True, act_labels=ACTS, intent_labels=["NONE", "X"]
    )
    return model, tokenizer


def _selection():
    return (*_dialogue(), [{**DIALOGUE, "candidates": ["in rome", "goodbye"]}])


def _tracking():
    return (*_dialogue(), [DIALOGUE])


def _documents():
    docs = synthetic_copy_documents(2, num_sentences=(4, 12), seed=3)
    return [" ".join(d["document"].split()) for d in docs]


def _extractive():
    tok = tiny_tokenizer()
    return tiny_extractive(tok, max_chunk_length=40), tok, _documents()


def _abstractive():
    tok = tiny_tokenizer()
    return tiny_led(tok), tok, _documents()[:1]


@pytest.mark.parametrize(
    "task,build",
    [
        ("dna-motif-detection", _motif),
        ("dialogue-response-selection", _selection),
        ("dialogue-state-tracking", _tracking),
        ("long-document-summarization", _extractive),
        ("long-document-summarization", _abstractive),
    ],
    ids=["motif", "selection", "tracking", "extractive", "abstractive"],
)
def test_saved_pipeline_reloads_with_remote_code_and_gives_the_same_outputs(tmp_path, task, build):
    model, tokenizer, inputs = build()
    pipe = pipeline(task, model=model, tokenizer=tokenizer)
    want = pipe(inputs)
    pipe.save_pretrained(tmp_path / "saved")
    assert task in json.loads((tmp_path / "saved" / "config.json").read_text())["custom_pipelines"]
    # the dialogue model serves two tasks: its folder needs the task name
    name = task if task.startswith("dialogue") else None
    loaded = pipeline(name, model=str(tmp_path / "saved"), trust_remote_code=True)
    assert type(loaded).__name__ == type(pipe).__name__
    assert_same_outputs(loaded(inputs), want)
    loaded.save_pretrained(tmp_path / "again")  # a pipeline of the remote code saves too
    assert_same_outputs(pipeline(name, model=str(tmp_path / "again"), trust_remote_code=True)(inputs), want)


def test_save_pretrained_into_a_file_is_a_clear_error(tmp_path):
    pipe = pipeline("dna-motif-detection", model=motif_model(max_tokens=66), tokenizer=DNATokenizer())
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="save_directory must be a folder"):
        pipe.save_pretrained(tmp_path / "file")


def test_saved_folder_needs_trust_remote_code_or_an_in_memory_model(tmp_path):
    """What the docs promise: a folder's ``custom_pipelines`` run only with ``trust_remote_code=True``; with
    hf-sparse imported, the model and tokenizer loaded from the folder make the pipeline without it."""
    pipeline(
        "dna-motif-detection", model=motif_model(max_tokens=66), tokenizer=DNATokenizer()
    ).save_pretrained(tmp_path)
    for task in ("dna-motif-detection", None):
        with pytest.raises(ValueError, match="trust_remote_code=True"):
            pipeline(task, model=str(tmp_path))
    model = AutoModelForTokenClassification.from_pretrained(tmp_path)
    pipe = pipeline("dna-motif-detection", model=model, tokenizer=AutoTokenizer.from_pretrained(tmp_path))
    assert pipe("ACGGGT")["windows"] == 1
    documented = [hf_sparse.pipelines.__doc__, LongDocumentSummarizationPipeline.__doc__]
    assert all("trust_remote_code=True" in doc for doc in documented)
    assert "pipeline(model=folder)`` (with hf-sparse imported)" not in hf_sparse.pipelines.__doc__
