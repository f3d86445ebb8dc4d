"""Secrets never reach a saved record: which keys are secret, and redaction of values that hold them.

A recipe may carry a Hub token (``hub_token``), and the environment one (``HF_TOKEN``). Everything
the runner writes (``all_results.json``, the model card, ``training_args.bin``, TensorBoard's
hyper-parameters) goes through :func:`redact` or never sees the value; the Hub upload takes an
allow-list of files (:func:`hf_sparse.hub.upload_file_list`) and refuses a file that still holds a
known secret (:func:`which_secret` names which, never showing it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "MIN_ENV_SECRET_LENGTH",
    "REDACTED",
    "SECRET_ENV_VARS",
    "find_secrets",
    "is_secret_key",
    "known_secrets",
    "redact",
    "which_secret",
]

REDACTED = "<redacted>"

#: Environment variables whose values are secrets (huggingface_hub's and the usual trackers').
SECRET_ENV_VARS = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HUGGINGFACE_TOKEN",
    "WANDB_API_KEY",
    "COMET_API_KEY",
    "NEPTUNE_API_TOKEN",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
)

#: The shortest value of a :data:`SECRET_ENV_VARS` variable that :func:`which_secret` looks for in a file: a
#: shorter one (a local MLflow password ``test``) occurs in words (``test_accuracy``), so any file would match.
MIN_ENV_SECRET_LENGTH = 8

# A name part (between underscores/dashes) that marks a secret: hub_token, HF_TOKEN, api_key,
# password, client_secret, ... but not tokenizer_name or average_tokens_across_devices.
_SECRET_KEY = re.compile(
    r"(^|[_\-.])(token|password|passwd|pwd|secret|api_?key|access_?key|private_?key|credentials?)($|[_\-.])"
    r"|(^|[_\-.])key$",
    re.IGNORECASE,
)
# Token-shaped strings whatever the key: Hugging Face (hf_...), and "Bearer ..." headers.
_TOKEN_VALUE = re.compile(r"\bhf_[A-Za-z0-9]{16,}\b|\bBearer\s+[A-Za-z0-9._\-]{16,}")
# A "key=" inside a text (a message): "b.yaml: hub_token={'value': 'x'} is not a valid str".
_KEY_IN_TEXT = re.compile(r"(?<![\w.\-])([A-Za-z_][\w.\-]*)=")
_BARE_KEY = re.compile(r"[\w.\-]+")
_CLOSING = {"(": ")", "[": "]", "{": "}"}


def is_secret_key(name) -> bool:
    """True if ``name`` reads like a token, password, secret or key (``hub_token``, ``HF_TOKEN``)."""
    return isinstance(name, str) and bool(_SECRET_KEY.search(name))


def known_secrets(*values) -> list[str]:
    """The non-empty secret strings among ``values`` and the secret environment variables."""
    found = [v for v in values if isinstance(v, str) and v]
    found += [os.environ[k] for k in SECRET_ENV_VARS if os.environ.get(k)]
    return sorted(set(found), key=len, reverse=True)


def _value_end(text: str, start: int) -> int:
    """Where the value starting at ``text[start]`` ends: after its closing quote (a quoted string), after its
    closing bracket (a repr: nested brackets and quotes counted), else at the first whitespace or unopened
    closing bracket; the end of ``text`` if it is not closed."""
    closers, quote, i = [], None, start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
                if not closers:
                    return i + 1
        elif ch in "'\"":
            quote = ch
        elif ch in _CLOSING:
            closers.append(_CLOSING[ch])
        elif ch in ")]}":
            if not closers:
                return i
            if ch == closers[-1]:
                closers.pop()
                if not closers:
                    return i + 1
        elif ch.isspace() and not closers:
            return i
        i += 1
    return len(text)


def _redact_pairs(text: str) -> str:
    """``text`` with the value of every secret-named ``key=value`` in it masked (up to the end of the value,
    see :func:`_value_end`), and that value wherever else it occurs (an error's own message may repeat it)."""
    parts, values, pos = [], [], 0
    while match := _KEY_IN_TEXT.search(text, pos):
        if not is_secret_key(match.group(1)) or match.group(1).lower() == "key":  # "of the form key=value"
            parts.append(text[pos : match.end()])
            pos = match.end()
            continue
        end = _value_end(text, match.end())
        parts += [text[pos : match.end()], REDACTED]
        values.append(text[match.end() : end])
        pos = end
    parts.append(text[pos:])
    text = "".join(parts)
    hidden = {v for value in values for v in (value, value.strip("'\"")) if len(v) >= 4}
    for value in sorted(hidden, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def _redact_text(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return _TOKEN_VALUE.sub(REDACTED, text)


def redact(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of ``obj`` (dicts, lists, strings) without secrets.

    Values under a secret-named key become ``"<redacted>"`` (``None`` stays ``None``); a
    ``"key=value"`` string with a secret key keeps its key; in other strings (messages) the value after a
    secret key's ``key=`` is masked up to its end (a quoted string, a bracketed repr, else the next whitespace),
    and so is that value wherever else it occurs, the rest of the message kept; ``secrets`` (and the values of
    :data:`SECRET_ENV_VARS`) and token-shaped strings are masked wherever they occur.
    """
    secrets = known_secrets(*secrets)

    def walk(x):
        if isinstance(x, Mapping):
            return {
                k: (REDACTED if v is not None else None) if is_secret_key(k) else walk(v)
                for k, v in x.items()
            }
        if isinstance(x, (list, tuple)):
            return type(x)(walk(v) for v in x) if isinstance(x, list) else tuple(walk(v) for v in x)
        if isinstance(x, str):
            key, sep, _ = x.partition("=")
            if sep and _BARE_KEY.fullmatch(key.strip()) and is_secret_key(key.strip()):
                return f"{key}={REDACTED}"
            return _redact_text(_redact_pairs(x), secrets)
        return x

    return walk(obj)


def which_secret(text: str | bytes, secrets: Mapping[str, str] | Iterable[str] = ()) -> str | None:
    """What secret ``text`` holds, named without its value, or None.

    In order: one of ``secrets`` (of 4 characters or more; its key if ``secrets`` is a mapping of
    names to values, else ``"a given secret"``), the value of a :data:`SECRET_ENV_VARS` variable of
    :data:`MIN_ENV_SECRET_LENGTH` characters or more (``"the value of WANDB_API_KEY"``), a token-shaped
    string (``"an hf_... or Bearer token"``).
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    named = secrets.items() if isinstance(secrets, Mapping) else (("a given secret", s) for s in secrets)
    for name, secret in named:
        if isinstance(secret, str) and len(secret) >= 4 and secret in text:
            return name
    for var in SECRET_ENV_VARS:
        value = os.environ.get(var, "")
        if len(value) >= MIN_ENV_SECRET_LENGTH and value in text:
            return f"the value of {var}"
    if _TOKEN_VALUE.search(text):
        return "an hf_... or Bearer token"
    return None


def find_secrets(text: str | bytes, secrets: Mapping[str, str] | Iterable[str] = ()) -> bool:
    """True if ``text`` holds a secret :func:`which_secret` names (one of ``secrets``, a long enough secret
    environment variable's value, or an ``hf_...`` / ``Bearer`` token)."""
    return which_secret(text, secrets) is not None
