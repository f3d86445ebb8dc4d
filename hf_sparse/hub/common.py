"""What the hub modules share: atomic writes that follow the umask, the package version, repo ids."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path


def _version() -> str:
    from .. import __version__

    return __version__


def _file_mode() -> int:
    """The mode ``open()`` gives a new file under the current umask (0644 under umask 022)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``:
    readers see the old file or the new one, never half of one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            os.fchmod(f.fileno(), _file_mode())  # mkstemp makes 0600; a saved file follows the umask
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def _check_repo_id(repo_id) -> str:
    if not isinstance(repo_id, str):
        raise ValueError(f"repo_id must be a 'user/name' string, got {repo_id!r}")
    name = repo_id.split("/")[-1]
    if (
        not _REPO_ID.match(repo_id)
        or "--" in repo_id
        or ".." in repo_id
        or name.endswith((".", "-"))
        or len(name) > 96
    ):
        raise ValueError(
            f"repo_id must look like 'user/name' (letters, digits, '-', '_', '.'; no '--' or '..'; "
            f"name up to 96 characters), got {repo_id!r}"
        )
    return repo_id


__all__ = ["_atomic_write", "_check_repo_id", "_file_mode", "_version"]
