"""Atomic writes: the file appears whole or not at all, with the usual mode, and no temporary file
is left behind on success or failure."""

import json
import os
import stat

import pytest

from hf_sparse.utils.io import atomic_write, write_json_atomic, write_jsonl


def test_write_json_atomic_round_trip(tmp_path):
    path = tmp_path / "sub" / "results.json"
    write_json_atomic(path, {"a": 1, "when": tmp_path})  # default=str for odd values, folder made
    assert json.loads(path.read_text()) == {"a": 1, "when": str(tmp_path)}
    assert path.read_text().endswith("}\n")
    assert os.listdir(path.parent) == ["results.json"]


def test_write_jsonl(tmp_path):
    rows = [{"x": "é"}, {"y": [1, 2]}]
    write_jsonl(tmp_path / "x.jsonl", rows)
    text = (tmp_path / "x.jsonl").read_text(encoding="utf-8")
    assert "é" in text
    assert [json.loads(line) for line in text.splitlines()] == rows


def test_failed_write_keeps_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "a.json"
    atomic_write(path, "old")
    with pytest.raises(TypeError):
        write_json_atomic(path, {"bad": object()}, default=None)
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["a.json"]


def test_mode_follows_umask(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "m.txt", b"bytes")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "m.txt").st_mode) == 0o644
    assert (tmp_path / "m.txt").read_bytes() == b"bytes"
