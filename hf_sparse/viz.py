"""Pictures: pattern heatmaps, grids of attention weights, training curves. Needs matplotlib
(``pip install hf-sparse[viz]``); every function returns the Figure and, given a path, saves it in the
format its extension names (``.png``, ``.pdf``, ``.svg``, ``.jpg``, ...; PNG without one) and closes it: pyplot
lets go of it (figures saved in a loop do not pile up), ``plt.show()`` no longer shows it, and the returned
Figure can still be read, changed and saved again. A figure drawn into the caller's ``ax`` is the caller's:
saved, never closed."""

from __future__ import annotations

import math
import os

import torch

from .utils.io import atomic_open


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend unless one was chosen; ImportError naming the extra without it."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plots need matplotlib: pip install 'hf-sparse[viz]'") from e
    return plt


#: a pattern plot has at most this many cells a side: a longer sequence is pooled, each cell showing the
#: fraction of allowed pairs in its block of positions (a 480-pixel figure shows no more anyway)
PLOT_CELLS = 1024
#: (query, key) pairs a pooled plot evaluates at a time
_CHUNK = 1 << 22


def _save(fig, path, close: bool = True):
    """Save ``fig`` to ``path`` (if given) and then close it, unless ``close`` is False (the caller's figure)."""
    if path is None:
        return fig
    try:
        path = os.fspath(path)
        fmt = os.path.splitext(path)[1][1:].lower() or "png"
        formats = fig.canvas.get_supported_filetypes()
        if fmt not in formats:
            raise ValueError(
                f"cannot save a figure as {path!r}: matplotlib writes {', '.join('.' + f for f in sorted(formats))}"
            )
        with atomic_open(path, "wb") as f:  # never a half-written file, no temporary file left on an error
            fig.savefig(f, format=fmt, dpi=120, bbox_inches="tight")
    finally:
        if close:  # also when saving failed: the figure was only made to be saved
            pyplot().close(fig)
    return fig


def _percent(fraction: float) -> str:
    """``fraction`` as a percentage with one decimal (13.6%), or two significant digits of its distance to 0%
    or 100% where one decimal would round it to 0.0% or 100.0% (SlidingWindow(64) at 200k positions:
    0.032%)."""
    rest = min(fraction, 1 - fraction) * 100
    digits = 1 if rest <= 0 or rest >= 0.1 else 1 - math.floor(math.log10(rest))
    return f"{fraction:.{digits}%}"


def _check_head(pattern, head, shape) -> int:
    """The number of heads a mask of ``shape`` ((q, kv), (H, q, kv) or (B, H, q, kv)) tells apart; ValueError
    unless ``head`` is one of them."""
    heads = shape[-3] if len(shape) > 2 else 1
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < heads:
        raise ValueError(
            f"head must be an int in 0..{heads - 1} ({pattern!r} has {heads} head(s)), got {head!r}"
        )
    return heads


def _tile_counts(p, h: int, n: int, c: int, qb, kb):
    """Allowed pairs of head ``h`` in each tile (qb[t], kb[t]) of c x c positions (clipped to n), ``_CHUNK``
    pairs at a time."""
    out = torch.zeros(qb.shape[0], dtype=torch.long)
    ar = torch.arange(c)
    step = max(1, _CHUNK // (c * c))
    for s in range(0, qb.shape[0], step):
        i = qb[s : s + step, None, None] * c + ar[:, None]  # (T, c, 1) query positions
        j = kb[s : s + step, None, None] * c + ar[None, :]  # (T, 1, c) key positions
        allowed = p.mask_mod(0, h, i.clamp(max=n - 1), j.clamp(max=n - 1)) & (i < n) & (j < n)
        out[s : s + step] = allowed.sum((1, 2))
    return out


def _pooled_mask(bound, n: int, head: int, heads: int):
    """Head ``head`` of a bound pattern on ``n`` positions, pooled: ((m, m) fraction of allowed pairs in each
    block of c x c positions, c, exact number of allowed pairs), m = ceil(n / c) <= about PLOT_CELLS.

    Only the tiles of the pattern's block layout (at block c) that are kept and not marked full are evaluated
    (one per block diagonal where the rule depends on i - j only), ``_CHUNK`` pairs at a time: memory stays
    O(m^2 + _CHUNK), where the dense mask takes n^2 bytes."""
    per_head = bound.heads()
    p, h = (per_head[head], 0) if per_head is not None else (bound, head)
    first = -(-n // PLOT_CELLS)
    layout = None
    for c in range(first, 2 * first + 1):  # the first cell size the pattern's block geometry accepts
        try:
            layout = p.block_layout(n, block=c)
            break
        except ValueError:
            continue
        except NotImplementedError:  # a pattern without a layout: every tile is evaluated
            break
    if layout is None:
        c, m = first, -(-n // first)
        kv_index, full = torch.arange(m).expand(m, m), torch.zeros(m, m, dtype=torch.bool)
    else:
        m = layout.num_q_blocks
        kv_index = layout.kv_index[0, min(h, layout.kv_index.shape[1] - 1)]  # (m, K)
        full = layout.full[0, min(h, layout.full.shape[1] - 1)]
        # a layout merged over heads (a union holding a PerHead) marks a tile full where any head's is
        full = full & (per_head is not None or heads == 1)
    size = torch.full((m,), c)
    size[-1] = n - (m - 1) * c  # positions in each block
    counts = torch.zeros(m, m, dtype=torch.long)
    qb, slot = torch.nonzero(kv_index >= 0, as_tuple=True)
    kb, whole = kv_index[qb, slot], full[qb, slot]
    counts[qb[whole], kb[whole]] = size[qb[whole]] * size[kb[whole]]
    qb, kb = qb[~whole], kb[~whole]
    if p.translation_invariant:  # the rule depends on i - j only: one tile per block diagonal
        inner = ((qb < m - 1) & (kb < m - 1)) | (n % c == 0)  # tiles of c x c positions
        d, which = torch.unique(qb[inner] - kb[inner], return_inverse=True)
        counts[qb[inner], kb[inner]] = _tile_counts(p, h, n, c, d.clamp(min=0), (-d).clamp(min=0))[which]
        qb, kb = qb[~inner], kb[~inner]
    counts[qb, kb] = _tile_counts(p, h, n, c, qb, kb)
    return counts / (size[:, None] * size[None, :]), c, int(counts.sum())


def plot_pattern(pattern, n: int, path=None, ax=None, title: str | None = None, head: int = 0):
    """Heatmap of which (query, key) pairs a pattern allows on ``n`` positions (of head ``head`` for a pattern
    that differs between heads), with its exact density. Past ``PLOT_CELLS`` positions a cell shows the
    fraction of allowed pairs in its block of positions (the n x n mask is never built). Drawn into ``ax`` if
    given, else into a new Figure, which is closed once saved to ``path``."""
    plt = pyplot()
    if not isinstance(n, int) or n <= 0:
        raise ValueError(f"n must be a positive int, got {n!r}")
    bound = pattern.bind(n) if not pattern.content_based else pattern
    lengths = getattr(bound, "bound_lengths", None)  # a content-based pattern bound to queries and keys
    if lengths is not None and tuple(lengths) != (n, n):
        raise ValueError(
            f"n={n}, but {pattern.__name__} was bound to {lengths[0]} queries and {lengths[1]} keys: plot it at "
            f"n={lengths[1]}, or bind it to queries and keys of length {n}"
        )
    if n <= PLOT_CELLS:
        mask = bound.dense_mask(n)
        heads = _check_head(pattern, head, mask.shape)
        while mask.dim() > 2:
            mask = mask[0] if mask.dim() == 4 else mask[head]
        image, cell, density = mask.float(), 1, mask.float().mean().item()
    else:
        heads = _check_head(pattern, head, bound.dense_mask(1, n).shape)  # one row: the shape
        image, cell, pairs = _pooled_mask(bound, n, head, heads)
        density = pairs / (n * n)
    own = ax is None  # a figure made here, closed once saved
    fig = ax.figure if ax is not None else plt.figure(figsize=(4, 4))
    ax = ax or fig.add_subplot(1, 1, 1)
    extent = None if cell == 1 else (-0.5, image.shape[1] * cell - 0.5, image.shape[0] * cell - 0.5, -0.5)
    ax.imshow(image.numpy(), cmap="Blues", interpolation="nearest", vmin=0, vmax=1, extent=extent)
    if cell > 1:
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_ylim(n - 0.5, -0.5)
    which = f"head {head}: " if heads > 1 else ""
    pooled = f" ({cell}x{cell} positions a cell)" if cell > 1 else ""
    ax.set_title(f"{title or pattern.__name__}\n{which}{_percent(density)} of pairs{pooled}", fontsize=9)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    return _save(fig, path, close=own)


def show_heatmaps(
    matrices,
    xlabel: str = "Keys",
    ylabel: str = "Queries",
    titles=None,
    figsize=(2.5, 2.5),
    cmap: str = "Reds",
    path=None,
):
    """Grid of heatmaps (as in d2l's ``show_heatmaps``).

    ``matrices``: (rows, cols, queries, keys), e.g. (layers, heads, q, k) attention weights; a 2-D or
    3-D tensor is promoted to one row. ``titles``: one per column (the same in every row), or one list of
    titles per row. Every panel shares one colour scale (the range of all the finite values), which the
    colorbar shows.
    """
    plt = pyplot()
    m = torch.as_tensor(matrices).detach().float().cpu()
    if m.dim() < 2 or m.dim() > 4:
        raise ValueError(
            f"matrices must have 2 to 4 dims (rows, cols, queries, keys), got shape {tuple(m.shape)}"
        )
    while m.dim() < 4:
        m = m.unsqueeze(0)
    rows, cols = m.shape[:2]
    nested = titles is not None and len(titles) > 0 and isinstance(titles[0], (list, tuple))
    if titles is not None and (
        len(titles) != (rows if nested else cols) or nested and any(len(t) != cols for t in titles)
    ):
        want = f"{rows} lists of {cols} titles (one per row)" if nested else f"{cols} titles (one per column)"
        raise ValueError(f"titles must hold {want} for matrices of shape {tuple(m.shape)}, got {titles!r}")
    finite = m[torch.isfinite(m)]
    norm = plt.Normalize(finite.min().item(), finite.max().item()) if finite.numel() else plt.Normalize()
    fig, axes = plt.subplots(
        rows, cols, figsize=(figsize[0] * cols, figsize[1] * rows), sharex=True, sharey=True, squeeze=False
    )
    for i in range(rows):
        for j in range(cols):
            ax = axes[i][j]
            pcm = ax.imshow(m[i, j].numpy(), cmap=cmap, norm=norm, interpolation="nearest")
            if i == rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(ylabel)
            if titles is not None:
                ax.set_title(titles[i][j] if nested else titles[j])
    fig.colorbar(pcm, ax=axes, shrink=0.6)
    return _save(fig, path)


def plot_curves(
    series: dict, xlabel: str = "step", ylabel: str = "loss", title: str = "", path=None, logy: bool = False
):
    """Line plot of named series: ``{"train": [(x, y), ...], "eval": [...]}``."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, points in series.items():
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o" if len(points) < 30 else None, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_bars(values: dict, ylabel: str = "", title: str = "", path=None):
    """Bar chart of ``{name: value}`` (e.g. per-motif F1)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4, 0.6 * len(values)), 3.5))
    ax.bar(list(values), list(values.values()), color="tab:blue")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, max([1.0, *values.values()]))
    if title:
        ax.set_title(title)
    ax.tick_params(axis="x", rotation=45)
    return _save(fig, path)


__all__ = ["plot_bars", "plot_curves", "plot_pattern", "pyplot", "show_heatmaps"]
