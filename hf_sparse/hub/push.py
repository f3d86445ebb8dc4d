"""Pushing a saved folder: :func:`push_to_hub` is ``HfApi.create_repo`` + ``upload_folder`` of the
:func:`upload_file_list` allow-list, after checking that no file holds the token; its first (usually only)
commit deletes what an earlier push left that this one replaces (:func:`stale_patterns`; remote code only where
the repository's bundle manifest lists it). Without a network it raises one
:class:`HubUnavailableError` saying that the local folder is intact and which command pushes it later;
rejected credentials raise :class:`HubAuthError`, any other failure :class:`HubError` with the same advice.
The token is never printed or logged.

Command line: ``python -m hf_sparse.hub FOLDER REPO_ID [--private] [--token-env NAME] [--revision BRANCH]
[--commit-message MESSAGE] [--endpoint URL]`` (also ``scripts/push_to_hub.py``)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import socket
import sys
import tempfile
from pathlib import Path

from .bundle import BUNDLE_MANIFEST
from .common import _COMMIT_MESSAGE, PUSH_COMMAND, _check_repo_id
from .common import offline_reason as _offline_reason
from .common import push_command as _push_command

logger = logging.getLogger(__name__)


class HubError(RuntimeError):
    """Pushing to the Hub failed; the local folder is untouched."""


class HubUnavailableError(HubError):
    """The Hub could not be reached (offline mode, no network, DNS failure, timeout, 5xx)."""


class HubAuthError(HubError):
    """The Hub rejected the credentials (no token, invalid or expired token, no write access)."""


# tokenizer and processor files (sent, and replaced as a whole, see _REPLACED)
_PREPROCESSOR_NAMES = frozenset(
    {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.txt",
        "vocab.json",
        "merges.txt",
        "tokenizer.model",
        "spiece.model",
        "sentencepiece.bpe.model",
        "chat_template.jinja",
        "chat_template.json",
        "preprocessor_config.json",
        "processor_config.json",
    }
)
# What an upload sends: an ALLOW-list (a model folder also holds checkpoints with pickled optimizer
# states and training arguments, TensorBoard runs, logs; none of them belongs on the Hub).
_UPLOAD_NAMES = frozenset(
    {
        # model
        "config.json",
        "generation_config.json",
        # a PEFT adapter saved at the top (a recipe run with lora: true, merge_lora: false)
        "adapter_config.json",
        "adapter_model.safetensors",
        # tokenizer / processor
        *_PREPROCESSOR_NAMES,
        # card, remote-code manifest, results (the runner writes them without secrets)
        "README.md",
        BUNDLE_MANIFEST,
        "all_results.json",
        "log_history.json",
    }
)
# Model weights as ``save_pretrained`` names them: ``model.safetensors``, shards
# ``model-00001-of-00003.safetensors`` and their ``model.safetensors.index.json``; with ``variant="fp16"``:
# ``model.fp16.safetensors``, ``model.fp16-00001-of-00003.safetensors``, ``model.safetensors.index.fp16.json``.
_WEIGHTS = re.compile(r"^model(\.[\w-]+)?(-\d+-of-\d+)?\.safetensors$")
_WEIGHTS_INDEX = re.compile(r"^model\.safetensors\.index(\.[\w-]+)?\.json$")
_UPLOAD_PATTERNS = (_WEIGHTS, _WEIGHTS_INDEX, re.compile(r"^[\w.-]+\.png$"))
_UPLOAD_ADAPTER = frozenset({"adapter_config.json", "adapter_model.safetensors", "README.md"})
_BINARY_SUFFIXES = (".safetensors", ".png", ".model")


# What an upload replaces: files of these kinds already in the repository (an earlier push) that it does
# not send are deleted with its first commit (upload_folder's ``delete_patterns``; it never deletes a file it
# uploads, nor .gitattributes), so the repository loads what was pushed: an old ``model.safetensors`` next
# to new shards would win, an old ``adapter_config.json`` would turn a full model into base + adapter. Globs
# (``*`` also matches ``/``); README.md, images and files of other kinds stay.
_REPLACED = (
    # the model or the adapter, whichever this upload sends, and its weights in any format
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model.*.safetensors",
    "model-*-of-*.safetensors",
    "model.safetensors.index.json",
    "model.safetensors.index.*.json",
    "pytorch_model*.bin",
    "pytorch_model.bin.index*.json",
    "tf_model*.h5",
    "tf_model.h5.index*.json",
    "flax_model*.msgpack",
    "flax_model.msgpack.index*.json",
    "adapter_config.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
    "adapter/adapter_config.json",
    "adapter/adapter_model.safetensors",
    "adapter/adapter_model.bin",
    "adapter/README.md",
    # the results of the run that trained the weights
    "all_results.json",
    "log_history.json",
)
# _PREPROCESSOR_NAMES are replaced only by an upload that sends one of them (a tokenizer may have been pushed on
# its own), and with them the remote-code bundle of an earlier push: the .py files its manifest (BUNDLE_MANIFEST)
# lists, and the manifest. Only those: a .py file no manifest lists (modeling_x.py, utils.py) is the user's, and
# without a tokenizer in the upload the repository's tokenizer config may name a module of the bundle.
_BUNDLE_FILE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.py")  # a flat module: an exact name, no glob characters


def stale_patterns(files: list[str], bundle_files=()) -> list[str]:
    """The ``delete_patterns`` of an upload of ``files`` (from :func:`upload_file_list`): what an earlier push
    left in the repository that this one replaces. Always the model or adapter (config, weights of any format,
    shards and index), ``adapter/`` and results; if ``files`` hold a tokenizer or processor file, also the other
    tokenizer and processor files, the remote-code manifest and ``bundle_files``, the ``.py`` files the
    repository's manifest lists (an earlier push's bundle). A file the upload sends is overwritten, not
    deleted; README.md, images and files of other kinds (``.py`` files no manifest lists) stay.

    Raises:
        ValueError: a name in ``bundle_files`` that is not a flat module file (``patterns_base.py``).
    """
    bundle_files = [bundle_files] if isinstance(bundle_files, str) else list(bundle_files)
    for name in bundle_files:
        if not isinstance(name, str) or not _BUNDLE_FILE.fullmatch(name):
            raise ValueError(
                f"bundle_files must name flat module files such as 'patterns_base.py', got {name!r}"
            )
    patterns = list(_REPLACED)
    if _PREPROCESSOR_NAMES & set(files):
        patterns += sorted(_PREPROCESSOR_NAMES) + [BUNDLE_MANIFEST] + sorted(bundle_files)
    sent = set(files)
    return [p for p in dict.fromkeys(patterns) if p not in sent]


def _remote_bundle_files(api, repo_id: str, revision: str | None, token: str | None) -> list[str]:
    """The ``.py`` files the bundle manifest in ``repo_id`` at ``revision`` lists (what an earlier push of a
    remote-code bundle sent). None where the repository, the branch or the manifest is missing, or the manifest
    is unreadable (a warning). Any other failure (network, credentials) is raised, for :func:`push_to_hub` to
    classify."""
    from huggingface_hub.errors import (
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    with tempfile.TemporaryDirectory(prefix="hf_sparse_push_") as cache:  # the user's cache stays as it was
        try:
            path = api.hf_hub_download(
                repo_id, BUNDLE_MANIFEST, revision=revision, token=token, cache_dir=cache
            )
        except (RemoteEntryNotFoundError, RevisionNotFoundError, RepositoryNotFoundError):
            return []
        try:
            listed = json.loads(Path(path).read_text(encoding="utf-8"))["files"]
            names = [n for n in listed if isinstance(n, str) and _BUNDLE_FILE.fullmatch(n)]
        except (OSError, ValueError, TypeError, KeyError):
            logger.warning(
                "%s in %s lists no files: no remote code there is deleted", BUNDLE_MANIFEST, repo_id
            )
            return []
    return sorted(names)


# the files whose ``auto_map`` names remote code: the model's, a custom tokenizer's, processor's, feature extractor's
_AUTO_MAP_FILES = (
    "config.json",
    "tokenizer_config.json",
    "processor_config.json",
    "preprocessor_config.json",
)


def _remote_code_files(folder: Path) -> set[str]:
    """The ``.py`` files of the remote-code bundle (from its manifest), those the ``auto_map`` of the model,
    tokenizer or processor configs names (``"module.Class"`` or ``"repo--module.Class"``, alone or in a list
    such as ``[slow, fast]`` with ``None`` for a missing one) or ``config.json``'s ``custom_pipelines``
    (``impl``), and the files of the folder these import relatively (``from .utils import pool``), recursively:
    transformers loads each of them (a folder saved by transformers alone has no manifest)."""
    names: set[str] = set()
    try:
        manifest = json.loads((folder / BUNDLE_MANIFEST).read_text(encoding="utf-8"))
        names.update(n for n in manifest.get("files", {}) if isinstance(n, str))
    except (OSError, ValueError, AttributeError):
        pass
    refs = []
    for config_name in _AUTO_MAP_FILES:
        try:
            config = json.loads((folder / config_name).read_text(encoding="utf-8"))
            auto_map = config.get("auto_map") or {}
        except (OSError, ValueError, AttributeError):
            continue
        # an older tokenizer_config.json holds the [slow, fast] list itself
        refs += list(auto_map.values()) if isinstance(auto_map, dict) else [auto_map]
        pipelines = config.get("custom_pipelines") if config_name == "config.json" else None
        if isinstance(pipelines, dict):
            refs += [entry.get("impl") for entry in pipelines.values() if isinstance(entry, dict)]
    for ref in refs:
        for item in ref if isinstance(ref, (list, tuple)) else [ref]:
            if isinstance(item, str) and "." in item:
                names.add(item.split("--")[-1].rsplit(".", 1)[0] + ".py")
    names = {n for n in names if "/" not in n and n.endswith(".py")}
    from transformers.dynamic_module_utils import get_relative_imports

    todo = sorted(names)
    while todo:
        name = todo.pop()
        try:
            imported = get_relative_imports(folder / name)
        except (OSError, ValueError):  # not there (a warning said so), or not text
            continue
        for module in imported:
            needed = f"{module}.py"
            if needed not in names and _BUNDLE_FILE.fullmatch(needed):
                names.add(needed)
                todo.append(needed)
                if not (folder / needed).is_file():
                    logger.warning(
                        "%s imports .%s, which is not in %s: the pushed repository will not load",
                        name,
                        module,
                        folder,
                    )
    return names


def _lora_run(folder: Path) -> bool:
    """False if the folder's ``all_results.json`` (written by a recipe run) says the model was trained without
    LoRA: an ``adapter/`` there was left by an earlier LoRA run in the same output_dir."""
    try:
        results = json.loads((folder / "all_results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True  # not a recipe run's folder: the adapter/ is the user's
    return not isinstance(results, dict) or results.get("lora") is not False


def upload_file_list(folder: str | os.PathLike) -> list[str]:
    """The files :func:`push_to_hub` sends from ``folder`` (paths relative to it, sorted).

    An allow-list: the model (``config.json``, safetensors weights, sharded or not, with or without a
    ``variant``), a PEFT adapter saved in the folder itself (``adapter_config.json``,
    ``adapter_model.safetensors``), tokenizer and processor files, the card ``README.md``, the
    remote-code bundle (the ``.py`` files its manifest, ``auto_map`` or ``custom_pipelines`` names, those they
    import relatively, and the manifest), results (``all_results.json``, ``log_history.json``, ``*.png``) and a
    LoRA adapter in ``adapter/`` (unless ``all_results.json`` says the model was trained without LoRA: then
    ``adapter/`` is an earlier run's). Everything else stays local: ``checkpoint-*/``, ``runs/``,
    ``training_args.bin`` and any other pickle, temporary and hidden files.
    """
    folder = Path(folder)
    code = _remote_code_files(folder)
    files = []
    for entry in sorted(folder.iterdir()):
        name = entry.name
        if not entry.is_file() or name.startswith("."):
            continue
        if name in _UPLOAD_NAMES or name in code or any(p.match(name) for p in _UPLOAD_PATTERNS):
            files.append(name)
    adapter = folder / "adapter"
    if adapter.is_dir() and not _lora_run(folder):
        logger.warning("%s left out: all_results.json says this model was trained without LoRA", adapter)
    elif adapter.is_dir():
        files += [f"adapter/{n}" for n in sorted(_UPLOAD_ADAPTER) if (adapter / n).is_file()]
    return files


def _check_no_secrets(folder: Path, files: list[str], token: str | None) -> None:
    """Refuse to upload a file that holds the token (or any ``hf_...`` token or secret env value of
    :data:`~hf_sparse.training.secrets.MIN_ENV_SECRET_LENGTH` characters or more); the message names
    which, never the value."""
    from ..training.secrets import which_secret

    for name in files:
        if name.endswith(_BINARY_SUFFIXES):
            continue
        found = which_secret((folder / name).read_bytes(), {"the Hub token": token} if token else {})
        if found is not None:
            raise HubError(
                f"Refusing to push {folder}: {name} contains a token or secret ({found}); remove it from the "
                "file (or leave the file out of the folder) and push again. Nothing was uploaded."
            )


def _check_folder(folder) -> Path:
    """A saved model (``config.json``) or PEFT adapter (``adapter_config.json``) folder."""
    path = Path(folder)
    if not path.is_dir():
        raise ValueError(f"folder {str(folder)!r} does not exist or is not a directory")
    if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        raise ValueError(
            f"folder {str(folder)!r} has no config.json (nor adapter_config.json); save the model there first"
        )
    return path


def _check_weights(folder: Path, files: list[str]) -> None:
    """Refuse an upload without weights (a model's or an adapter's): the repository would not load."""
    names = [f.rsplit("/", 1)[-1] for f in files]
    if any(_WEIGHTS.match(n) or n == "adapter_model.safetensors" for n in names):
        return
    suffixes = (".safetensors", ".bin", ".pt", ".pth")
    left = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix in suffixes)
    raise ValueError(
        f"folder {str(folder)!r} holds no weights to push (model*.safetensors or adapter_model.safetensors)"
        + (f"; left out: {', '.join(left)} (pickles and unknown names are not pushed)" if left else "")
        + "; save the model there with save_pretrained first. Nothing was uploaded."
    )


def _scrub(text: str, token: str | None) -> str:
    """One line of at most 300 characters with the token (and any ``hf_...`` token) masked."""
    if token:
        text = text.replace(token, "***")
    text = re.sub(r"\bhf_[A-Za-z0-9]{8,}", "hf_***", text)
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def _network_error_types() -> tuple[type, ...]:
    from huggingface_hub.errors import OfflineModeIsEnabled

    types: list[type] = [OfflineModeIsEnabled, ConnectionError, TimeoutError, socket.gaierror]
    for module, names in (
        ("httpx2", ("TransportError",)),  # huggingface_hub >= 2
        ("httpx", ("TransportError",)),  # huggingface_hub 1.x
        ("requests.exceptions", ("ConnectionError", "Timeout")),  # huggingface_hub < 1
    ):
        try:
            mod = __import__(module, fromlist=list(names))
        except ImportError:
            continue
        types.extend(getattr(mod, n) for n in names if isinstance(getattr(mod, n, None), type))
    return tuple(types)


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def push_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool = False,
    commit_message: str = _COMMIT_MESSAGE,
    revision: str | None = None,
    token_env: str = "HF_TOKEN",
    endpoint: str | None = None,
) -> str:
    """Create ``repo_id`` (if needed) and upload ``folder`` to it; return the repo URL.

    The upload sends :func:`upload_file_list` and deletes what an earlier push left and this one replaces
    (:func:`stale_patterns`: another model's or adapter's weights and config, ``adapter/``, results, and when
    ``folder`` holds a tokenizer the tokenizer files and the remote code the repository's bundle manifest
    lists); the repository's README.md (unless ``folder`` has one), images and other files stay. The deletions
    ride the first commit; with ``hf_xet`` installed huggingface_hub may commit a large upload (over 250 files,
    over 100 MiB of small non-LFS files, or a commit retried in smaller parts) in several commits (``... (part
    N)``): a push that fails part-way leaves the repository holding the deletions and the files committed so
    far, and running it again finishes it (committed files are skipped).

    Args:
        folder: a saved model folder (``config.json``, or ``adapter_config.json`` for a PEFT adapter, and
            weights); it is only read.
        repo_id: ``"user/name"`` or ``"org/name"``.
        token: a Hub token with write access. Default: the environment variable ``token_env``,
            then huggingface_hub's own lookup (``HF_TOKEN``, the token saved by ``hf auth login``).
            The token is never printed, logged or put in an error message.
        private: create the repo private (ignored if it already exists).
        commit_message: message of the upload commit.
        revision: branch to push to (created from the default branch if missing).
        token_env: environment variable to read the token from.
        endpoint: Hub URL (default: ``HF_ENDPOINT`` or https://huggingface.co).

    Raises:
        ValueError: a malformed ``repo_id``, or a ``folder`` that is missing, has no config.json (nor
            adapter_config.json) or no weights to upload.
        HubUnavailableError: the Hub cannot be reached (``HF_HUB_OFFLINE=1``, no network, DNS
            failure, timeout, 5xx); the message names the intact local folder and the command that
            pushes it later.
        HubAuthError: no token, or the Hub answered 401/403.
        HubError: a file holds a token or secret (nothing is sent), any other refusal by the Hub, or any
            other failure of the push (the message names the intact local folder and the command that
            pushes it later).
    """
    repo_id = _check_repo_id(repo_id)
    path = _check_folder(folder)
    files = upload_file_list(path)
    _check_weights(path, files)
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise ValueError(f"revision must be a branch name, got {revision!r}")
    if not isinstance(token_env, str) or not token_env:
        raise ValueError(f"token_env must name an environment variable, got {token_env!r}")
    if token is not None and (not isinstance(token, str) or not token):
        raise ValueError("token must be a non-empty str")  # never echo a token, even a bad one
    token = token or os.environ.get(token_env) or None
    command = _push_command(path, repo_id, private, revision, token_env, commit_message, endpoint)
    intact = f"the local output at {path} is intact; push it later with: {command}"

    def unavailable(reason: str) -> HubUnavailableError:
        return HubUnavailableError(
            f"Could not reach the Hugging Face Hub to push to {repo_id} ({_scrub(reason, token)}); {intact}"
        )

    reason = _offline_reason()
    if reason is not None:
        raise unavailable(reason)

    from huggingface_hub import HfApi, get_token
    from huggingface_hub.errors import HfHubHTTPError

    if token is None and get_token() is None:
        raise HubAuthError(
            f"No Hugging Face token found to push to {repo_id}: pass token=..., set {token_env}, "
            f"or run `hf auth login`; {intact}"
        )

    _check_no_secrets(path, files, token)
    api = HfApi(endpoint=endpoint, token=token)
    network_errors = _network_error_types()
    try:
        api.create_repo(repo_id, exist_ok=True, private=private, token=token)
        if revision is not None:
            api.create_branch(repo_id, branch=revision, exist_ok=True, token=token)
        # the remote code an earlier push of ours left: no other .py file is deleted
        replaces_code = bool(_PREPROCESSOR_NAMES & set(files))
        bundle_files = _remote_bundle_files(api, repo_id, revision, token) if replaces_code else []
        info = api.upload_folder(
            folder_path=str(path),
            repo_id=repo_id,
            commit_message=commit_message,
            revision=revision,
            token=token,
            allow_patterns=files,  # exact relative paths: the allow-list, nothing else
            delete_patterns=stale_patterns(files, bundle_files),  # with the first commit: this model only
        )
    except Exception as e:  # classify; never let the token or a multi-line trace through
        http = next((x for x in _chain(e) if isinstance(x, HfHubHTTPError)), None)
        status = getattr(getattr(http, "response", None), "status_code", None)
        if status in (401, 403):
            hint = (
                "the token is missing, invalid or expired"
                if status == 401
                else "the token has no write access to this namespace"
            )
            raise HubAuthError(
                f"The Hugging Face Hub rejected the credentials for {repo_id} (HTTP {status}: {hint}; "
                f"use a write token in {token_env} or token=...); {intact}"
            ) from None
        if status is not None and (status >= 500 or status in (408, 429)):
            raise unavailable(f"the Hub answered HTTP {status}") from None
        net = next((x for x in _chain(e) if isinstance(x, network_errors)), None)
        if net is not None and http is None:
            raise unavailable(f"{type(net).__name__}: {net}") from None
        if http is not None:
            raise HubError(
                f"The Hugging Face Hub refused the upload to {repo_id} (HTTP {status}: "
                f"{_scrub(str(http), token)}); {intact}"
            ) from None
        # anything else (a full disk, a bug): the same one line, the cause chained unless it shows the token
        leaks = bool(token) and any(token in str(x) for x in _chain(e))
        raise HubError(
            f"Pushing to {repo_id} failed ({type(e).__name__}: {_scrub(str(e), token)}); {intact}"
        ) from (None if leaks else e)
    url = str(getattr(info, "repo_url", "") or f"{api.endpoint}/{repo_id}")
    logger.info("pushed %d files of %s to %s: %s", len(files), path, url, ", ".join(files))
    return url


def parse_args(argv=None) -> argparse.Namespace:
    """Arguments of ``python -m hf_sparse.hub`` / ``scripts/push_to_hub.py``."""
    parser = argparse.ArgumentParser(
        prog="push_to_hub",
        description="Upload a saved hf-sparse model folder to the Hugging Face Hub.",
    )
    parser.add_argument(
        "folder", help="saved model folder (with config.json, or adapter_config.json); it is only read"
    )
    parser.add_argument("repo_id", help="target repository, 'user/name' or 'org/name'")
    parser.add_argument("--private", action="store_true", help="create the repository private")
    parser.add_argument(
        "--token-env",
        default="HF_TOKEN",
        metavar="NAME",
        help="environment variable holding the Hub token (default: HF_TOKEN, then the token saved "
        "by `hf auth login`); the token is never printed",
    )
    parser.add_argument("--revision", default=None, help="branch to push to (created if missing)")
    parser.add_argument("--commit-message", default=_COMMIT_MESSAGE, help="message of the upload commit")
    parser.add_argument("--endpoint", default=None, help="Hub URL (default: HF_ENDPOINT or huggingface.co)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    """Push a folder; print its URL. A one-line ``error:`` message and exit code 2 for invalid
    arguments (folder, repo id, an unset ``--token-env``), 1 when the Hub is unreachable or refuses, or the push
    fails otherwise (the line names the command that pushes later)."""
    args = parse_args(argv)
    if args.token_env != "HF_TOKEN" and not os.environ.get(args.token_env):
        print(f"error: environment variable {args.token_env} (--token-env) is not set", file=sys.stderr)
        return 2
    try:
        url = push_to_hub(
            args.folder,
            args.repo_id,
            private=args.private,
            commit_message=args.commit_message,
            revision=args.revision,
            token_env=args.token_env,
            endpoint=args.endpoint,
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except HubError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(url)
    return 0


__all__ = [
    "PUSH_COMMAND",
    "HubAuthError",
    "HubError",
    "HubUnavailableError",
    "main",
    "parse_args",
    "push_to_hub",
    "stale_patterns",
    "upload_file_list",
]
