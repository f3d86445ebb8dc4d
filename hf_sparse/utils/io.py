"""Atomic file writes: readers see the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Any


def _file_mode() -> int:
    """The mode ``open()`` gives a new file under the current umask (0644 under umask 022)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """A file (``"w"``: text, UTF-8; ``"wb"``: bytes) written to a temporary file in the folder of ``path`` and
    renamed to ``path`` (atomic on one filesystem) only when the block ends without an error; on any error
    (KeyboardInterrupt and SystemExit included) it is removed. The folder is created if missing; the file gets
    the mode a plain ``open()`` would give it."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    path = os.path.abspath(os.fspath(path))
    folder, name = os.path.split(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as f:
            os.fchmod(f.fileno(), _file_mode())  # mkstemp makes 0600
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically (:func:`atomic_open`)."""
    with atomic_open(path, "w" if isinstance(data, str) else "wb") as f:
        f.write(data)


def write_json_atomic(path: str | os.PathLike, obj: Any, **dump_kwargs: Any) -> None:
    """Write ``obj`` as JSON (``indent=2``, ``default=str`` unless given, trailing newline) atomically."""
    dump_kwargs.setdefault("indent", 2)
    dump_kwargs.setdefault("default", str)
    atomic_write(path, json.dumps(obj, **dump_kwargs) + "\n")


def write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> None:
    """Write ``rows`` as JSON Lines (one object per line, non-ASCII kept) atomically."""
    atomic_write(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


__all__ = ["atomic_open", "atomic_write", "write_json_atomic", "write_jsonl"]
