"""Label conventions shared by the task heads, their data code, metrics and pipelines.

- :data:`IGNORE_INDEX` (``-100``): the label of a position or turn that takes no loss and no score
  (the ``ignore_index`` of ``torch.nn.CrossEntropyLoss`` and of transformers' collators).
- BIO tags: ``O`` outside spans, ``B-X`` on the first position of a span of type ``X``, ``I-X`` on
  its other positions. :func:`spans_from_bio` turns one sequence of tags into spans.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

IGNORE_INDEX = -100


def _parse_tag(tag, position: int) -> tuple[str, str | None]:
    """``"B-X"`` -> ``("B", "X")``, ``"I-X"`` -> ``("I", "X")``, ``"O"`` -> ``("O", None)``.

    Bare ``"B"``/``"I"`` have the type ``""``.
    """
    if not isinstance(tag, str):
        raise TypeError(f"tags[{position}] must be a str like 'B-X', 'I-X' or 'O', got {tag!r}")
    if tag == "O":
        return "O", None
    prefix, sep, kind = tag.partition("-")
    if prefix not in ("B", "I") or (sep and not kind):
        raise ValueError(f"tags[{position}] is not a BIO tag ('B-X', 'I-X' or 'O'): {tag!r}")
    return prefix, kind


def spans_from_bio(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The spans ``(type, start, end)`` (end exclusive) encoded by one sequence of BIO tags.

    ``B-X`` starts a span of type X; ``I-X`` continues the current span if it has type X; ``O``
    ends it. Tolerance (the conlleval convention): an ``I-X`` that does not continue a span of type
    X (after ``O``, at the start, or after a span of another type) starts a new span of type X.
    Anything but ``O``, ``B[-X]`` and ``I[-X]`` is an error (``ValueError``; ``TypeError`` for a
    non-str tag), naming its position.

    Example:
        >>> spans_from_bio(["O", "B-TF", "I-TF", "I-CTCF", "O", "I-TF"])
        [('TF', 1, 3), ('CTCF', 3, 4), ('TF', 5, 6)]
    """
    if isinstance(tags, str) or not isinstance(tags, (Sequence, np.ndarray)):
        raise TypeError(f"tags must be a list of str, got {type(tags).__name__}")
    spans = []
    current, start = None, 0
    for i, tag in enumerate(tags):
        prefix, kind = _parse_tag(tag, i)
        if prefix == "I" and kind == current:
            continue
        if current is not None:
            spans.append((current, start, i))
        current, start = (kind, i) if prefix != "O" else (None, i)
    if current is not None:
        spans.append((current, start, len(tags)))
    return spans


__all__ = ["IGNORE_INDEX", "spans_from_bio"]
