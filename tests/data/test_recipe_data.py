"""Every recipe's data is the same as before it went through 🤗 datasets: split sizes, the first and
last example and a hash of every example of each split (tokenized ids, labels, features), plus the
task's side tables (references, chunks, documents, truncation counts).

The expected values were recorded from the code before the change (commit 164ebad, the hand-written
JSONL readers and ``ExampleDataset`` classes) with the same canonical form as :func:`_canonical`.
The selection recipe is built with a fresh word-level tokenizer (``model_name_or_path=null``: the
recipe itself continues from the tracking run's output). Recipes that need ``../shared/data`` skip
without it.
"""

import hashlib
import json
from pathlib import Path

import pytest

from hf_sparse.training.recipe import load_recipe
from hf_sparse.training.tasks import get_task

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("input_ids", "attention_mask", "global_attention_mask", "labels", "sequence_labels", "sentence_features",
        "turn_positions", "act_labels", "intent_labels", "candidate_positions", "turn_index", "intents",
        "dialogue_id", "turn")  # fmt: skip


def _canonical(value):
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float):
        return round(value, 5)
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(value[k]) for k in sorted(value)}
    return value


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


RECIPES = [
    pytest.param(
        "pipelines/motif/tiny.yaml",
        [],
        {
            "train": (4000, "78b52341c276be79", "69c7dc044c82f839", "b839fac7f3ca6747"),
            "validation": (300, "a258e56761cb1ead", "a834e8d3c5e6aa34", "cab0bbdebd77e936"),
            "test": (300, "7dfb0a8ec6572eac", "c3895d78385969ad", "628224913faba934"),
        },
        {},
        id="motif/tiny",
    ),
    pytest.param(
        "pipelines/motif/ctcf.yaml",
        [],
        {
            "train": (1400, "a2f09bddb4fa3354", "a137feadc8f42bde", "206fbe8f7716907a"),
            "validation": (100, "28363323738f3961", "1ccfb88fc87ffb96", "de3fabdfb0954a5e"),
            "test": (200, "1843e47a5f6fc244", "35207170698d570a", "042c58673e98d83c"),
        },
        {},
        id="motif/ctcf",
    ),
    pytest.param(
        "pipelines/motif/promoters.yaml",
        [],
        {
            "train": (14068, "393a59c17cc2822e", "938f75cefb6d3755", "89c838f12da0be1d"),
            "validation": (1000, "33ea949abf11f81e", "a19535fb4b9268b1", "074242b6dd7d807e"),
            "test": (1000, "5721206724b54063", "88030b68e75274ee", "0750125283bc6cde"),
        },
        {},
        id="motif/promoters",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        "pipelines/summarization/tiny-extractive.yaml",
        [],
        {
            "train": (200, "a6014eaa59442ef3", "29eea156f7cd7ea4", "47277c4eb05ace66"),
            "validation": (44, "1aa3fc1e1817a73d", "0bbae65a9bb68a19", "c3d428f943aba92d"),
            "test": (48, "d0bdb11c57b1c037", "e16331baa2580cb0", "90b9da72bf6a77c2"),
        },
        {"chunks": "d57b1a404cf21f9e", "documents": "94e845b8c3484646", "references": "94e83c8320213aae"},
        id="summarization/tiny-extractive",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        "pipelines/summarization/tiny-abstractive.yaml",
        [],
        {
            "train": (200, "8a196abf17201e37", "f4ac425d25ac531f", "11fd51332ff9d1da"),
            "validation": (40, "9aee74911a061b53", "11c59c91cb717eae", "a13a3d5402a2bdb3"),
            "test": (40, "0913c6fede113d06", "d5739c0554be4005", "c133f261889833af"),
        },
        {"references": "94e83c8320213aae", "truncated": "653795a417e3012e"},
        id="summarization/tiny-abstractive",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        "pipelines/dialogue/tiny-tracking.yaml",
        [],
        {
            "train": (7200, "6c36f0866cd04b64", "9abfee73041ca2b2", "754f905ea2952d65"),
            "validation": (5334, "fa13a7ce26708c8c", "e93e4408b45999c6", "72da9bf9ca91c69f"),
            "test": (5084, "3155803dead5b47a", "ace64d978dce808b", "45d86b807f33f70a"),
        },
        {},
        id="dialogue/tiny-tracking",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        "pipelines/dialogue/tiny-selection.yaml",
        ["model_name_or_path=null"],
        {
            "train": (21944, "5da459458e8e0d07", "797b6bc087beae67", "ecf8aaa39a654075"),
            "validation": (2667, "8b18e8f210fbc52f", "52320512c1d048b2", "d96accbe398fd5e4"),
            "test": (2542, "aa85ac2e7b32f3d3", "9f5cc61dfee80594", "8a78a4c17a3198dd"),
        },
        {},
        id="dialogue/tiny-selection",
        marks=pytest.mark.slow,
    ),
]


@pytest.mark.parametrize("recipe, overrides, expected, side_tables", RECIPES)
def test_recipe_data_is_unchanged(recipe, overrides, expected, side_tables, tmp_path):
    if "shared/data" in (ROOT / recipe).read_text() and not (ROOT.parent / "shared" / "data").is_dir():
        pytest.skip("../shared/data is not available")
    recipe_args, task_args, _ = load_recipe(
        ROOT / recipe, [*overrides, f"output_dir={tmp_path}", "report_to=none"]
    )
    task = get_task(recipe_args.task)()
    task.check_arguments(task_args)
    tokenizer = task.build_tokenizer(task_args)
    task.build_model(task_args, tokenizer)
    datasets = task.build_datasets(task_args, tokenizer)
    got = {}
    for split, dataset in datasets.items():
        rows = [{k: _canonical(row[k]) for k in KEYS if k in row} for row in dataset]
        got[split] = (len(rows), _hash(rows[0]), _hash(rows[-1]), _hash(rows))
    assert {s: v[0] for s, v in got.items()} == {s: v[0] for s, v in expected.items()}  # split sizes
    assert {s: v[1:3] for s, v in got.items()} == {s: v[1:3] for s, v in expected.items()}  # first, last
    assert got == expected  # every example
    for name, value in side_tables.items():
        assert _hash(_canonical(getattr(task, name))) == value, name
