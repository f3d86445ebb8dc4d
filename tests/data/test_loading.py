"""hf_sparse.data.loading: JSON Lines splits, row checks naming file/row/field, seeded group splits
(the permutation the recipes used before), deterministic map fingerprints (a second run hits the cache)."""

import functools
import json

import numpy as np
import pytest
from datasets import Dataset

from hf_sparse.data.loading import (
    fingerprint,
    load_jsonl,
    load_jsonl_splits,
    num_proc_for,
    split_by_group,
    tokenizer_fingerprint,
)
from hf_sparse.tasks.motif.task import MotifArguments, MotifTask
from hf_sparse.tokenization_dna import DNATokenizer


def _old_split(n, test_fraction, validation_fraction, seed):
    """The split code the motif scan data had before datasets (kept here as the reference)."""
    order = np.random.default_rng(seed).permutation(n)
    n_test, n_val = int(round(test_fraction * n)), int(round(validation_fraction * n))
    parts = {
        "test": order[:n_test],
        "validation": order[n_test : n_test + n_val],
        "train": order[n_test + n_val :],
    }
    return {k: sorted(v.tolist()) for k, v in parts.items() if len(v)}


@pytest.mark.parametrize(
    "n, test_fraction, validation_fraction, seed",
    [
        (500, 0.2, 0.1, 0),
        (20, 0.2, 0.2, 3),
        (7, 0.0, 0.3, 1),
        (7, 0.3, 0.0, 2),
        (9, 0.0, 0.0, 0),
        (101, 0.15, 0.05, 9),
    ],
)
def test_split_by_group_is_the_old_permutation_split(n, test_fraction, validation_fraction, seed):
    groups = Dataset.from_dict({"record": list(range(n))})
    got = split_by_group(groups, test_fraction, validation_fraction, seed)
    assert {k: v["record"] for k, v in got.items()} == _old_split(n, test_fraction, validation_fraction, seed)
    assert all(v.column_names == ["record"] for v in got.values())


def test_split_by_group_needs_training_data():
    with pytest.raises(ValueError, match="leave no training data of 4 groups"):
        split_by_group(Dataset.from_dict({"record": [0, 1, 2, 3]}), 0.5, 0.5, 0)


def _check(row, where):
    if not isinstance(row.get("x"), int):
        raise ValueError(f"{where}: field 'x' must be an int, got {row.get('x')!r}")


def test_load_jsonl_splits_checks_rows_and_names_file_row_field(tmp_path):
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"x": i}) + "\n" for i in range(3)))
    (tmp_path / "validation.jsonl").write_text('{"x": 1}\n{"y": 2}\n')
    with pytest.raises(ValueError, match=r"validation.jsonl: row 2: field 'x' must be an int, got None"):
        load_jsonl_splits(str(tmp_path), check=_check)
    (tmp_path / "validation.jsonl").write_text('{"x": 1}\n')
    splits = load_jsonl_splits(str(tmp_path), check=_check)
    assert sorted(splits) == ["train", "validation"] and splits["train"]["x"] == [0, 1, 2]  # test optional
    with pytest.raises(FileNotFoundError, match="data_dir=.* has no test.jsonl"):
        load_jsonl_splits(str(tmp_path), optional=())


def _text_check(row, where, text_field="document"):
    if not isinstance(row.get(text_field), str):
        raise ValueError(f"{where}: field {text_field!r} must be a string, got {row.get(text_field)!r}")


def _row_check(row, where):  # a field read as row[...]: a KeyError on a missing column
    if not isinstance(row["x"], int):
        raise ValueError(f"{where}: field 'x' must be an int")


@pytest.mark.parametrize(
    "rows, check, message",
    [
        ([{"y": 2}], _check, "rows.jsonl: no column 'x' (the file's columns: 'y')"),
        ([{"x": None, "y": 2}], _check, "rows.jsonl: row 1: field 'x' must be an int, got None"),  # all null
        (
            [{"x": "1"}],
            _check,
            "rows.jsonl: row 1: field 'x' must be an int, got '1'",
        ),  # a value, not a column
        ([{"y": 1}], _row_check, "rows.jsonl: no column 'x' (the file's columns: 'y')"),
        (
            [{"seq": "ACGT", "labels": 1}],
            "motif",
            "rows.jsonl: no column 'sequence' (the file's columns: 'seq', 'labels')",
        ),
        (
            [{"id": "x", "speaker": ["USER"], "utterances": ["hi"]}],
            "dialogue",
            "no columns 'dialogue_id', 'speakers', 'turns' (the file's columns: 'id', 'speaker', 'utterances')",
        ),
        (
            [{"text": "A b."}],
            functools.partial(_text_check, text_field="document"),
            "no column 'document' (the file's columns: 'text'); set text_field to the column that holds it",
        ),
    ],
)
def test_a_column_the_file_lacks_is_named_with_the_columns_it_has(tmp_path, rows, check, message):
    """Data with another dataset's column names (article/highlights, seq/labels): one error naming the missing
    column and the file's columns (and the recipe key that names the column), not "field 'x' ... got None"."""
    if check == "motif":
        from hf_sparse.tasks.motif.data import check_classification_row as check
    elif check == "dialogue":
        from hf_sparse.tasks.dialogue.data import check_sgd_record as check
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(ValueError) as info:
        load_jsonl(str(path), check)
    assert str(info.value).endswith(message), str(info.value)
    assert str(info.value).startswith(str(path))


@pytest.mark.parametrize(
    "data, match",
    [
        (b"", r"bad.jsonl: empty file"),
        (b'{"x": 1}\n\n{"x": 2, "t": ["caf\xe9"]}\n', r"bad.jsonl: row 2: text is not UTF-8 \('utf-8' codec"),
        (b"\n\n", r"bad.jsonl: not a readable JSON Lines file: \S"),  # a reason, not an empty message
    ],
)
def test_load_jsonl_unreadable_text_names_file_and_row(tmp_path, data, match):
    (tmp_path / "bad.jsonl").write_bytes(data)
    with pytest.raises(ValueError, match=match):
        load_jsonl(str(tmp_path / "bad.jsonl"), _check)


@pytest.mark.parametrize("gzipped", [False, True])
def test_load_jsonl_names_the_line_that_is_not_json(tmp_path, gzipped):
    """The file's own line number (from 1, blank lines counted), not pyarrow's 0-based row of its block."""
    import gzip

    lines = ['{"x": 1}', '{"x": 2}', "", '{"x": 3}', '{"x": 4,}', '{"x": 5}']
    text = "\n".join(lines) + "\n"
    path = tmp_path / ("bad.jsonl.gz" if gzipped else "bad.jsonl")
    path.write_bytes(gzip.compress(text.encode()) if gzipped else text.encode())
    with pytest.raises(
        ValueError, match=r"bad.jsonl(.gz)?: line 5: not a readable JSON Lines file: column 9: Expecting"
    ):
        load_jsonl(str(path))
    (tmp_path / "list.jsonl").write_text('{"x": 1}\n[{"x": 2}]\n')
    with pytest.raises(
        ValueError, match=r"list.jsonl: line 2: not a readable JSON Lines file: a JSON list, not an object"
    ):
        load_jsonl(str(tmp_path / "list.jsonl"))


def test_a_changed_row_check_runs_again_over_cached_rows(tmp_path, monkeypatch):
    """The row check's cache key holds its module's source: a stricter check after an upgrade is not skipped."""
    import importlib

    from hf_sparse.data import loading

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "row_check_mod.py").write_text("def check(row, where):\n    pass\n")
    (tmp_path / "train.jsonl").write_text('{"x": 1}\n')
    module = importlib.import_module("row_check_mod")
    assert len(load_jsonl(str(tmp_path / "train.jsonl"), check=module.check)) == 1  # cached
    (tmp_path / "row_check_mod.py").write_text(
        "def check(row, where):\n    raise ValueError(f'{where}: stricter')\n"
    )
    loading._file_hash.cache_clear()
    module = importlib.reload(module)
    with pytest.raises(ValueError, match="row 1: stricter"):
        load_jsonl(str(tmp_path / "train.jsonl"), check=module.check)


def test_a_changed_package_source_changes_every_fingerprint(tmp_path, monkeypatch):
    """The map fingerprints hold the name and arguments of a step, not its code: they also hash the package's
    source, so examples cached by older code are built again after an upgrade that fixes a step."""
    import os
    import shutil

    from hf_sparse.data import loading

    package = os.path.dirname(os.path.dirname(os.path.abspath(loading.__file__)))
    old, new = tmp_path / "old" / "hf_sparse", tmp_path / "new" / "hf_sparse"
    for folder in (old, new):
        shutil.copytree(package, folder, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    step = new / "tasks" / "motif" / "task.py"
    step.write_text(step.read_text() + "\n# a fix to encode_rows\n")
    key = ("abc123", "encode_rows", {"max_length": 8})
    monkeypatch.setattr(loading, "_SOURCE_DIR", str(old), raising=False)
    before = fingerprint(*key)
    assert fingerprint(*key) == before  # the same code: the same key (the cache is reused)
    monkeypatch.setattr(loading, "_SOURCE_DIR", str(new), raising=False)
    assert fingerprint(*key) != before


def test_num_proc_for():
    assert num_proc_for(1, 10_000) is None
    assert num_proc_for(4, 10_000) == 4
    assert num_proc_for(4, 500, min_rows_per_proc=200) == 2  # no more processes than the rows justify
    assert num_proc_for(None, 10) is None


def test_fingerprints_are_stable():
    assert fingerprint("a", {"b": 1, "c": [2]}) == fingerprint("a", {"c": [2], "b": 1})
    assert fingerprint("a", 1) != fingerprint("a", 2)
    assert tokenizer_fingerprint(DNATokenizer()) == tokenizer_fingerprint(DNATokenizer())
    assert tokenizer_fingerprint(DNATokenizer()) != tokenizer_fingerprint(DNATokenizer(kmer=3))


def test_tokenizer_fingerprint_ignores_the_last_calls_truncation_and_padding():
    """A fast tokenizer keeps its last call's truncation/padding in its serialisation: not part of the key."""
    from hf_sparse.tasks.summarization.data import train_summarization_tokenizer

    tok = train_summarization_tokenizer(["a b c d e f g"] * 3, min_frequency=1)
    before = tokenizer_fingerprint(tok)
    tok("a b c d e f g", max_length=3, truncation=True)
    assert tokenizer_fingerprint(tok) == before
    tok(["a b", "a b c d"], padding="max_length", max_length=8, truncation=True)
    assert tokenizer_fingerprint(tok) == before
    assert (
        tokenizer_fingerprint(train_summarization_tokenizer(["a b c d e f"] * 3, min_frequency=1)) != before
    )


def test_second_build_reuses_the_cache():
    """A second task built from the same arguments maps to the same fingerprints, so datasets loads the
    cached Arrow files instead of preprocessing again."""
    args = MotifArguments(motifs=["REST"], sequence_length=60, num_train=30, num_validation=10, num_test=0,
                          max_length=64)  # fmt: skip
    built = []
    for _ in range(2):
        task = MotifTask()
        tok = task.build_tokenizer(args)
        task.build_model(args, tok)
        built.append(task.build_datasets(args, tok))
    for split in ("train", "validation"):
        first, second = built[0][split], built[1][split]
        assert first._fingerprint == second._fingerprint
        assert first.cache_files and first.cache_files == second.cache_files
        assert first[:] == second[:]


def test_hf_sparse_imports_without_datasets():
    """datasets is a train extra: the package and its data modules import without it."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['datasets'] = None\n"  # makes `import datasets` raise ImportError
        "import hf_sparse, hf_sparse.data.loading, hf_sparse.tasks.motif.data, hf_sparse.tasks.dialogue.data\n"
        "import hf_sparse.tasks.summarization.data\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
