"""What the hub modules share: atomic writes that follow the umask, the package version, repo ids."""

from __future__ import annotations

import re

from ..utils.io import atomic_write as _atomic_write


def _version() -> str:
    from .. import __version__

    return __version__


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


__all__ = ["_atomic_write", "_check_repo_id", "_version"]
