"""The recipes' splits through 🤗 ``datasets``: JSON Lines folders, row validation inside ``map``,
seeded splits by group, and deterministic ``map`` fingerprints (so a second run reuses the cache).

``datasets`` is imported inside the functions: importing ``hf_sparse`` does not need the ``train``
extra.

- :func:`load_jsonl_splits`: ``{split}.jsonl`` of a folder, each with :func:`load_jsonl`
  (``load_dataset("json", ...)``).
- :func:`validate_rows`: ``dataset.map(check)`` where ``check(row, where)`` raises ``ValueError``;
  ``where`` is ``"<file>: row <n>"`` (``n`` counts the file's rows from 1, blank lines skipped),
  so every error names the file, the row and (by the check) the field.
- :func:`split_by_group`: seeded test / validation / train split of a dataset of *groups* (e.g. one
  row per ChIP-seq peak), before each group becomes rows, so a group never straddles two splits.
- :func:`fingerprint`: a stable ``new_fingerprint`` for ``map`` from the input's fingerprint, the
  JSON-able parameters of the step (a tokenizer enters through :func:`tokenizer_fingerprint`) and a hash of
  the package's source (changed code preprocesses again).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

#: ``num_proc`` of the preprocessing ``map`` calls when a recipe does not set it: the machine's
#: cores, at most 4 (small datasets gain nothing from more processes).
#: the recipes' split names, in order
SPLITS = ("train", "validation", "test")

DEFAULT_NUM_PROC = max(1, min(4, os.cpu_count() or 1))


def num_proc_for(num_proc: int | None, rows: int, min_rows_per_proc: int = 200) -> int | None:
    """``num_proc`` for ``map`` over ``rows`` rows: None (in process) when there are fewer than
    ``min_rows_per_proc`` rows per process (starting processes costs more than it saves)."""
    n = DEFAULT_NUM_PROC if num_proc is None else num_proc
    n = min(n, rows // min_rows_per_proc)
    return n if n > 1 else None


#: the folder whose Python files :func:`fingerprint` hashes: the ``hf_sparse`` package, or the flat folder of a
#: remote-code bundle (``data_loading.py`` next to the other modules)
_SOURCE_DIR = os.path.dirname(os.path.abspath(__file__))  # bundle: reads no data file
if __name__ == "hf_sparse.data.loading":
    _SOURCE_DIR = os.path.dirname(_SOURCE_DIR)


@functools.cache
def _source_hash(folder: str) -> str:
    """A hash of every ``.py`` file under ``folder`` (path and content; ``__pycache__`` left out), once per process."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, folder).encode("utf-8") + b"\0")
            with open(path, "rb") as f:
                digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()[:16]


def fingerprint(*parts: Any) -> str:
    """A 16-hex-digit hash of JSON-able ``parts`` (the input dataset's ``_fingerprint`` first) and of the
    package's source (:data:`_SOURCE_DIR`): a ``map`` keyed by the name and arguments of its function runs again,
    rather than reusing examples cached by older code, once any file of the package has changed."""
    text = json.dumps([_source_hash(_SOURCE_DIR), parts], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of what a tokenizer does: its full serialisation (fast) or vocabulary and settings. A fast
    tokenizer's ``truncation`` and ``padding`` are left out: they are the state of its last call (every call
    sets its own), so they would make an identical rerun miss the cache."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        state.pop("truncation", None)
        state.pop("padding", None)
    else:
        state = json.dumps(sorted(tokenizer.get_vocab().items()))
    special = sorted(str(t) for t in getattr(tokenizer, "all_special_tokens", []))
    return fingerprint(type(tokenizer).__name__, state, special)


@functools.cache
def _file_hash(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def _callable_key(fn) -> list:
    """A stable description of a function or a ``functools.partial`` of one (for fingerprints): its name and
    a hash of its module's source, so that a changed check (a stricter one) runs again over cached data."""
    if isinstance(fn, functools.partial):
        return [*_callable_key(fn.func), list(fn.args), fn.keywords]
    source = getattr(sys.modules.get(fn.__module__), "__file__", None)  # bundle: reads no data file
    code = _file_hash(source) if source else None
    return [fn.__module__, fn.__qualname__, code]


def jsonl_files(
    data_dir: str,
    splits: Sequence[str] = SPLITS,
    optional: Sequence[str] = ("test",),
    key: str = "data_dir",
) -> dict[str, str]:
    """``{split: path}`` of ``data_dir/{split}.jsonl`` (or ``.jsonl.gz``). A split in ``optional`` may
    be missing; any other missing file is ``FileNotFoundError`` naming ``key`` and the folder."""
    files = {}
    for split in splits:
        for name in (f"{split}.jsonl", f"{split}.jsonl.gz"):
            if os.path.isfile(os.path.join(data_dir, name)):
                files[split] = os.path.join(data_dir, name)
                break
        else:
            if split not in optional:
                raise FileNotFoundError(f"{key}={data_dir!r} has no {split}.jsonl")
    return files


def load_jsonl_splits(
    data_dir: str,
    splits: Sequence[str] = SPLITS,
    optional: Sequence[str] = ("test",),
    key: str = "data_dir",
    check: Callable[[dict, str], None] | None = None,
) -> dict[str, Any]:
    """``{split: datasets.Dataset}`` of the :func:`jsonl_files` of ``data_dir``, each read with
    :func:`load_jsonl` (rows checked with ``check`` when given)."""
    return {
        split: load_jsonl(path, check) for split, path in jsonl_files(data_dir, splits, optional, key).items()
    }


def load_jsonl(path: str, check: Callable[[dict, str], None] | None = None):
    """One JSON Lines file (plain or gzip) as a ``datasets.Dataset`` (``load_dataset("json")``), every
    row checked with ``check`` (:func:`validate_rows`) when given. ``ValueError`` naming the file if
    it is empty or ``load_dataset`` cannot read it (and the first line that is not a JSON object, counted
    from 1), and the row too if its text is not UTF-8."""
    from datasets import load_dataset

    path = os.path.abspath(os.fspath(path))
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise ValueError(f"{path}: empty file: a JSON Lines file needs one JSON object per row")
    try:
        dataset = load_dataset("json", data_files={"rows": path}, split="rows")
    except Exception as e:  # datasets wraps JSON and Arrow errors in its own types
        bad = _first_bad_line(path)  # pyarrow's "in row <n>" counts from 0 within a block of the file
        if bad is not None:
            raise ValueError(f"{path}: line {bad[0]}: not a readable JSON Lines file: {bad[1]}") from e
        cause = e.__cause__ or e
        raise ValueError(
            f"{path}: not a readable JSON Lines file: {str(cause) or type(cause).__name__}"
        ) from e
    _check_utf8(dataset, path)
    return dataset if check is None else validate_rows(dataset, check, path)


def _first_bad_line(path: str) -> tuple[int, str] | None:
    """``(n, reason)`` of the first line of ``path`` (plain or gzip) that is not a JSON object, ``n`` counting
    every line from 1 (blank ones too); None if every line is one."""
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    with (gzip.open if gzipped else open)(path, "rb") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except UnicodeDecodeError as e:
                return n, f"text is not UTF-8 ({e})"
            except json.JSONDecodeError as e:
                return n, f"column {e.colno}: {e.msg}"
            if not isinstance(row, dict):
                return n, f"a JSON {type(row).__name__}, not an object (one JSON object per line)"
    return None


def _check_utf8(dataset, path: str, batch_size: int = 1000) -> None:
    """``ValueError`` naming ``path`` and the row of the first text that is not UTF-8: the JSON reader
    copies such bytes unchecked, and decoding them later fails naming neither."""
    import pyarrow as pa

    try:
        dataset.data.table.validate(full=True)
        return
    except pa.ArrowInvalid as e:
        invalid = e
    for start in range(0, len(dataset), batch_size):
        stop = min(start + batch_size, len(dataset))
        try:
            dataset[start:stop]
            continue
        except UnicodeDecodeError:
            pass
        for index in range(start, stop):
            try:
                dataset[index]
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}: row {index + 1}: text is not UTF-8 ({e})") from e
    raise ValueError(f"{path}: not a readable JSON Lines file: {invalid}") from invalid


class _ReadKeys(dict):
    """A row that records the keys a check looks up (``row[k]``, ``row.get(k)``, ``k in row``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read = []

    def __getitem__(self, key):
        self.read.append(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.append(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.read.append(key)
        return super().__contains__(key)


def _check_columns(dataset, check: Callable[[dict, str], None], source: str, absent=()) -> None:
    """``ValueError`` naming the column the file lacks and the columns it has, where ``check`` rejects the first
    row for a field that is no column of the file at all (another dataset's names: ``article`` for ``document``).
    The field is one the check looked up and names in its message; where ``check`` is a ``functools.partial``
    whose keyword holds that name (``text_field='document'``), the keyword is named too. The first row is
    checked as :func:`validate_rows` checks it (without the ``absent`` columns, null in every row)."""
    if len(dataset) == 0:
        return
    row = _ReadKeys((k, v) for k, v in dataset[0].items() if k not in absent)
    try:
        check(row, f"{source}: row 1")
        return
    except Exception as e:  # a KeyError too (row[field]); anything else is the row check's to report
        message = str(e)
    columns = dataset.column_names
    missing = [
        k for k in dict.fromkeys(row.read) if isinstance(k, str) and k not in columns and repr(k) in message
    ]
    if not missing:
        return  # the row's values are wrong, not its columns: the row check says which
    keywords = check.keywords if isinstance(check, functools.partial) else {}
    keys = [k for k, v in keywords.items() if v in missing]
    hint = f"; set {' or '.join(keys)} to the column that holds it" if keys else ""
    names = ", ".join(repr(k) for k in missing)
    raise ValueError(
        f"{source}: no column{'s' if len(missing) > 1 else ''} {names} (the file's columns: "
        f"{', '.join(map(repr, columns)) or 'none'}){hint}"
    )


def validate_rows(dataset, check: Callable[[dict, str], None], source: str):
    """``check(row, where)`` on every row, inside ``dataset.map`` (cached under a fingerprint of
    the data and the check, so a second run skips it); returns the (unchanged) rows.

    ``where`` is ``"<source>: row <n>"`` with ``n`` from 1; ``check`` raises ``ValueError`` naming
    the field. A column that is null in every row is left out of the rows ``check`` sees (as if no row
    had the field); a row that lacks a field other rows have sees it as null. A field the file has no
    column for at all is one error first, naming it and the columns the file has (:func:`_check_columns`).
    """
    from datasets import Value

    absent = {name for name, feature in dataset.features.items() if feature == Value("null")}
    _check_columns(dataset, check, source, absent)

    def run(row, index):
        check({k: v for k, v in row.items() if k not in absent}, f"{source}: row {index + 1}")
        return {}

    return dataset.map(
        run,
        with_indices=True,
        new_fingerprint=fingerprint(dataset._fingerprint, "validate", _callable_key(check)),
        desc=f"checking {os.path.basename(source)}",
    )


def split_by_group(dataset, test_fraction: float, validation_fraction: float, seed: int) -> dict[str, Any]:
    """Seeded ``{"train", "validation", "test"}`` split of a dataset with one row per group.

    ``round(test_fraction * n)`` groups go to test and ``round(validation_fraction * n)`` to
    validation: the first and the next ones of ``numpy.random.default_rng(seed).permutation(n)``
    (``train_test_split``'s permutation), the rest to train; each split keeps the dataset's order.
    Empty splits are left out.
    """
    import numpy as np

    n = len(dataset)
    n_test = int(round(test_fraction * n))
    n_val = int(round(validation_fraction * n))
    if n_test + n_val >= n:
        raise ValueError(
            f"test_fraction={test_fraction} and validation_fraction={validation_fraction} leave no training "
            f"data of {n} groups"
        )
    dataset = dataset.add_column("_group", list(range(n)))
    rest = dataset
    out = {}
    if n_test:
        parts = dataset.train_test_split(test_size=n_test, seed=seed, shuffle=True)
        out["test"], rest = parts["test"], parts["train"]
    elif n_val:
        rest = dataset.select(np.random.default_rng(seed).permutation(n))
    if n_val:  # the validation groups are the next ones of the same permutation
        parts = rest.train_test_split(train_size=n_val, shuffle=False)
        out["validation"], rest = parts["train"], parts["test"]
    out["train"] = rest
    return {
        split: out[split].select(np.argsort(out[split]["_group"])).remove_columns("_group")
        for split in SPLITS
        if split in out
    }


__all__ = [
    "DEFAULT_NUM_PROC",
    "SPLITS",
    "fingerprint",
    "jsonl_files",
    "load_jsonl",
    "load_jsonl_splits",
    "num_proc_for",
    "split_by_group",
    "tokenizer_fingerprint",
    "validate_rows",
]
