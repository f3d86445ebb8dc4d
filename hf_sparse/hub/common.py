"""What the hub modules (and the recipes) share: atomic writes that follow the umask, the package version, repo
ids, offline mode."""

from __future__ import annotations

import os
import re

from ..utils.io import atomic_write as _atomic_write


def offline_reason() -> str | None:
    """Why the Hub cannot be reached (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` set now, or when
    huggingface_hub was imported), or None."""
    from huggingface_hub import constants

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "on", "yes", "true"):
            return f"offline mode is on: {var}={os.environ[var]}"
    if constants.HF_HUB_OFFLINE:
        return "offline mode is on (HF_HUB_OFFLINE was set when huggingface_hub was imported)"
    return None


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
