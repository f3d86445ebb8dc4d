"""The scripts' one ``error:`` line on stderr."""

from __future__ import annotations

import sys


def print_error(message: str) -> None:
    """Print ``error: <message>`` on a line of its own. Progress bars the error left open (an evaluation's,
    under the training bar) are closed first, and as a closed bar can leave the cursor after its last update (a
    bar that does not stay moves the cursor up to the one above), the line then starts on a new line."""
    from tqdm import tqdm

    bars = sorted(tqdm._instances, key=lambda bar: -abs(getattr(bar, "pos", 0)))  # the lowest bar first
    for bar in bars:
        bar.close()
    sys.stderr.flush()
    start = "\n" if bars else ""
    print(f"{start}error: {message}", file=sys.stderr)
