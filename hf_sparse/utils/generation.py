"""Generation lengths against a model's absolute position table, for ``_prepare_generated_length`` overrides."""

from __future__ import annotations


def fit_max_length(generation_config, total: int, limit: int, has_default_max_length: bool) -> str | None:
    """Fit a generation of ``total`` tokens to a position table that takes sequences of at most ``limit``.

    Returns None when it fits, or when ``max_length`` was transformers' default (no ``max_new_tokens``): then it is
    shortened in ``generation_config`` by the excess. Otherwise what the user asked for (``"max_new_tokens=N"`` or
    ``"max_length=N"``), for the caller's ``ValueError``: past the table, generate would fail only at the step
    that reaches it, after all the steps before it.
    """
    if total <= limit:
        return None
    if has_default_max_length and generation_config.max_new_tokens is None:
        generation_config.max_length -= total - limit
        return None
    if generation_config.max_new_tokens is not None:
        return f"max_new_tokens={generation_config.max_new_tokens}"
    return f"max_length={total}"


__all__ = ["fit_max_length"]
