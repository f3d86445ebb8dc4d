"""Progress bars for long inference: a pipeline call over many windows, chunks or inputs shows one.

Every hf-sparse pipeline takes ``progress=`` in the call: ``True`` always shows a bar, ``False`` never,
``None`` (default) shows one when the work has at least :data:`AUTO_MIN_STEPS` steps (windows of one
sequence, candidate batches, items of a list). ``transformers.utils.logging.disable_progress_bar()``
or ``HF_SPARSE_DISABLE_PROGRESS_BARS=1`` turns the automatic ones off. Bars go to stderr (tqdm).
"""

from __future__ import annotations

import os

__all__ = ["AUTO_MIN_STEPS", "check_progress", "progress_bar", "wants_progress"]

#: The fewest steps for which ``progress=None`` shows a bar.
AUTO_MIN_STEPS = 16


def check_progress(progress):
    """``progress`` validated: None, True or False (a ValueError naming the value otherwise)."""
    if progress is not None and not isinstance(progress, bool):
        raise ValueError(f"progress must be True, False or None (automatic), got {progress!r}")
    return progress


def wants_progress(progress, total: int) -> bool:
    """Whether to show a bar for ``total`` steps (see the module docstring)."""
    if progress is not None:
        return bool(progress)
    if os.environ.get("HF_SPARSE_DISABLE_PROGRESS_BARS", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    from transformers.utils import logging as hf_logging

    return hf_logging.is_progress_bar_enabled() and total >= AUTO_MIN_STEPS


def progress_bar(total: int, desc: str, progress=None):
    """A tqdm bar of ``total`` steps, or None when :func:`wants_progress` says no."""
    if not wants_progress(progress, total):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step", leave=False)
