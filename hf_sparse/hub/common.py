"""What the hub modules (and the recipes) share: atomic writes that follow the umask, the package version, repo
ids, offline mode, the command line that pushes a folder."""

from __future__ import annotations

import os
import re
import shlex

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


def require_local_or_cached(label: str, name, files=("config.json",), hint: str = "") -> None:
    """``name`` is a folder, or may be a Hub model id: a name that can only be a path (absolute, ``./``, ``../``,
    ``~``, more than one ``/``) must be a folder; offline, any other name must be a folder or a Hub model in the
    local cache holding one of ``files`` (transformers would report a missing folder as a bad repo id, or as
    "couldn't connect to huggingface.co"). Online, a Hub id is left to transformers.

    Raises:
        FileNotFoundError: ``"<label>: folder not found: <folder>"`` or ``"<label>: <name> is neither a folder
        ... nor a Hub model in the local cache (<why offline>)"``, then ``hint``.
    """
    folder = os.path.abspath(os.path.expanduser(os.fspath(name)))
    if os.path.isdir(folder):
        return
    hint = f"; {hint}" if hint else ""
    name = os.fspath(name)
    if os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1 or "\\" in name:
        raise FileNotFoundError(f"{label}: folder not found: {folder}{hint}")
    reason = offline_reason()
    if reason is None:
        return
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = any(isinstance(try_to_load_from_cache(name, f), str) for f in files)
    except ValueError:  # not a valid repo id either (huggingface_hub's HFValidationError)
        cached = False
    if not cached:
        raise FileNotFoundError(
            f"{label}: {name!r} is neither a folder ({folder} not found) nor a Hub model in the local cache "
            f"({reason}){hint}"
        )


PUSH_COMMAND = "python -m hf_sparse.hub"
_COMMIT_MESSAGE = "Upload hf-sparse model"


def push_command(
    folder,
    repo_id,
    private=False,
    revision=None,
    token_env="HF_TOKEN",
    commit_message=_COMMIT_MESSAGE,
    endpoint=None,
) -> str:
    """The command line that repeats a push of ``folder`` (every option that differs from its default)."""
    cmd = f"{PUSH_COMMAND} {shlex.quote(str(folder))} {shlex.quote(repo_id)}"
    if private:
        cmd += " --private"
    if revision:
        cmd += f" --revision {shlex.quote(revision)}"
    if token_env != "HF_TOKEN":
        cmd += f" --token-env {shlex.quote(token_env)}"
    if commit_message != _COMMIT_MESSAGE:
        cmd += f" --commit-message {shlex.quote(commit_message)}"
    if endpoint:
        cmd += f" --endpoint {shlex.quote(endpoint)}"
    return cmd


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


__all__ = ["PUSH_COMMAND", "_atomic_write", "_check_repo_id", "_version", "push_command"]
