"""Pictures: pattern heatmaps, grids of attention weights, training curves. Needs matplotlib
(``pip install hf-sparse[viz]``); every function returns the Figure and, given a path, saves it in the
format its extension names (``.png``, ``.pdf``, ``.svg``, ``.jpg``, ...; PNG without one) and closes it: pyplot
lets go of it (figures saved in a loop do not pile up), ``plt.show()`` no longer shows it, and the returned
Figure can still be read, changed and saved again. A figure drawn into the caller's ``ax`` is the caller's:
saved, never closed."""

from __future__ import annotations

import math
import os
from dataclasses import replace

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


def _tile_counts(mask, h: int, n: int, c: int, qb, kb):
    """Allowed pairs of head ``h`` (``mask(b, h, i, j)`` over positions) in each tile (qb[t], kb[t]) of c x c
    positions (clipped to n), ``_CHUNK`` pairs at a time."""
    out = torch.zeros(qb.shape[0], dtype=torch.long)
    ar = torch.arange(c)
    step = max(1, _CHUNK // (c * c))
    for s in range(0, qb.shape[0], step):
        i = qb[s : s + step, None, None] * c + ar[:, None]  # (T, c, 1) query positions
        j = kb[s : s + step, None, None] * c + ar[None, :]  # (T, 1, c) key positions
        allowed = mask(0, h, i.clamp(max=n - 1), j.clamp(max=n - 1)) & (i < n) & (j < n)
        out[s : s + step] = allowed.sum((1, 2))
    return out


def _tiles_by_rule(mask, h: int, n: int, c: int, qb, kb, invariant: bool):
    """``_tile_counts``, of one tile per block diagonal among the whole c x c tiles where the rule depends on
    i - j only (``invariant``)."""
    m = -(-n // c)
    out = torch.zeros(qb.shape[0], dtype=torch.long)
    rest = torch.ones_like(qb, dtype=torch.bool)
    if invariant:
        inner = ((qb < m - 1) & (kb < m - 1)) | (n % c == 0)  # tiles of c x c positions
        d, which = torch.unique(qb[inner] - kb[inner], return_inverse=True)
        out[inner] = _tile_counts(mask, h, n, c, d.clamp(min=0), (-d).clamp(min=0))[which]
        rest = ~inner
    out[rest] = _tile_counts(mask, h, n, c, qb[rest], kb[rest])
    return out


def _first(t, h: int | None = None):
    """Batch element 0 of a layout, index or validity tensor (and its head ``h``), its leading dims 1 where they
    broadcast."""
    t = t[0]
    return t if h is None else t[min(h, t.shape[0] - 1)]


def _cells(index, valid, rows: int, size: int, h: int, c: int, none: int):
    """(rows,) the plot cell (block of c positions) of each row of a component: row r is position ``index[r]`` of
    ``size`` rows (r itself without an index); ``none`` where there is no such row (past ``size``, not valid)."""
    r = torch.arange(rows)
    pos = r.clamp(max=size - 1)
    ok = r < size
    if valid is not None:
        ok &= _first(valid)[pos]
    if index is not None:
        pos = _first(index, h)[pos]
    return torch.where(ok, torch.div(pos, c, rounding_mode="floor"), none)


def _spread(x, block, cell, cells: int):
    """(cells, x.shape[1]): row g sums ``x[block[t]]`` over the t with ``cell[t] == g`` (a 0/1 matrix of rows
    times ``x``), ``_CHUNK`` values at a time."""
    key, weight = torch.unique(block * cells + cell, return_counts=True)
    out = torch.zeros(cells, x.shape[1], dtype=x.dtype)
    step = max(1, _CHUNK // max(x.shape[1], 1))
    for s in range(0, key.shape[0], step):
        k = key[s : s + step]
        out.index_add_(0, k % cells, x[k // cells] * weight[s : s + step, None])
    return out


def _component_counts(comp, h: int, n: int, c: int):
    """((m + 1)^2,) allowed pairs of head ``h`` that one plan component adds to each cell (qc, kc) of c x c
    positions, row-major (row and column m take the rows that do not exist): its full tiles counted whole, the
    rule evaluated in its other kept tiles only (as ``Plan.num_pairs`` counts), wherever its rows and keys sit."""
    m = -(-n // c)
    cells = m + 1
    out = torch.zeros(cells * cells, dtype=torch.long)
    lay, cb = comp.layout, comp.layout.block
    li = _first(lay.kv_index, h)  # (nqb, K) key blocks of each query block, -1 = none
    lf = _first(lay.full, h) & (li >= 0)
    nq = comp.q_index.shape[-1] if comp.q_index is not None else n
    nk = comp.k_index.shape[-1] if comp.k_index is not None else n
    qcell = _cells(comp.q_index, comp.q_valid, lay.num_q_blocks * cb, nq, h, c, m)  # (nqb * cb,)
    kcell = _cells(comp.k_index, comp.k_valid, lay.num_kv_blocks * cb, nk, h, c, m)  # (nkb * cb,)
    # full tiles: (cells of rows) x (full map of blocks) x (cells of keys), the smaller product first
    if bool(lf.any()):
        full = torch.zeros(lay.num_q_blocks, lay.num_kv_blocks + 1, dtype=torch.long)
        full.scatter_(1, torch.where(lf, li, lay.num_kv_blocks), 1)
        full = full[:, :-1]  # (nqb, nkb)
        q_block, k_block = torch.arange(qcell.shape[0]) // cb, torch.arange(kcell.shape[0]) // cb
        if full.shape[0] <= full.shape[1]:  # fewer query blocks (global rows)
            keys = _spread(full.T, k_block, kcell, cells).T  # (nqb, cells)
            out += _spread(keys, q_block, qcell, cells).flatten()
        else:  # fewer key blocks (global columns)
            rows = _spread(full, q_block, qcell, cells)  # (cells, nkb)
            out += _spread(rows.T, k_block, kcell, cells).T.flatten()
    # the other kept tiles, each row's first (-1 after)
    part = torch.where((li >= 0) & ~lf, li, lay.num_kv_blocks).sort(-1).values
    width = int((part < lay.num_kv_blocks).sum(-1).max()) if part.numel() else 0
    if width == 0:
        return out
    part = torch.where(part[:, :width] < lay.num_kv_blocks, part[:, :width], -1)
    if comp.identity and cb == c and comp.q_offset == 0 and comp.q_valid is None and comp.k_valid is None:
        qb, slot = torch.nonzero(part >= 0, as_tuple=True)  # component tiles are the plot's cells
        kb = part[qb, slot]
        out[qb * cells + kb] += _tiles_by_rule(comp.mask, h, n, c, qb, kb, comp.translation_invariant)
        return out
    ar = torch.arange(cb)
    slots = max(1, _CHUNK // (cb * cb))  # partial tiles of a query block at a time
    for t in range(0, width, slots):
        kbs = part[:, t : t + slots]  # (nqb, w)
        none_full = torch.zeros_like(kbs, dtype=torch.bool)[None, None]
        partial = replace(comp, layout=replace(lay, kv_index=kbs[None, None], full=none_full))
        todo = torch.nonzero(kbs[:, 0] >= 0).flatten()  # query blocks with a partial tile there
        step = max(1, _CHUNK // (cb * cb * kbs.shape[1]))
        for s in range(0, todo.shape[0], step):
            qbs = todo[s : s + step]
            allowed = partial.tile_allowed(0, h, qbs, n, n)  # (g, cb, w * cb)
            qc = qcell[qbs[:, None] * cb + ar]  # (g, cb)
            kc = kcell[(kbs[qbs].clamp(min=0)[..., None] * cb + ar).flatten(1)]  # (g, w * cb)
            out += torch.bincount((qc[:, :, None] * cells + kc[:, None, :])[allowed], minlength=cells * cells)
    return out


def _diagonal_counts(p, h: int, n: int, c: int, size):
    """(m, m) allowed pairs of head ``h`` in each cell of c x c positions, of a pattern whose rule depends on
    i - j only: the tiles of its block layout (at block c) that are kept and marked full counted whole, one tile
    per block diagonal evaluated among the other whole tiles (those clipped to n one by one)."""
    layout = p.block_layout(n, block=c)
    kv_index, full = _first(layout.kv_index, h), _first(layout.full, h)  # (m, K)
    counts = torch.zeros(size.shape[0], size.shape[0], dtype=torch.long)
    qb, slot = torch.nonzero(kv_index >= 0, as_tuple=True)
    kb, whole = kv_index[qb, slot], full[qb, slot]
    counts[qb[whole], kb[whole]] = size[qb[whole]] * size[kb[whole]]
    qb, kb = qb[~whole], kb[~whole]
    counts[qb, kb] = _tiles_by_rule(p.mask_mod, h, n, c, qb, kb, invariant=True)
    return counts


def _pooled_mask(bound, n: int, head: int):
    """Head ``head`` of a bound pattern on ``n`` positions, pooled: ((m, m) fraction of allowed pairs in each
    block of c x c positions, c, exact number of allowed pairs), m = ceil(n / c) <= PLOT_CELLS.

    The rule is evaluated pair by pair only in tiles that are neither empty nor full, ``_CHUNK`` pairs at a
    time: where it depends on i - j only, in one tile per block diagonal of its block layout; else in the
    partial tiles of the components of its plan at block c (``Pattern.plan``: disjoint components, what the
    kernels run), where gathered rows and keys (global tokens, summary positions, permuted classes) make thin
    tiles, not the m^2 / 8 partial tiles (n^2 / 8 pairs) that ``Global(every=512)`` or ``Fixed`` leave over
    blocks of positions. A pattern without a plan is evaluated in every tile. Memory stays
    O(n + m^2 + _CHUNK), where the dense mask takes n^2 bytes."""
    per_head = bound.heads()
    p, h = (per_head[head], 0) if per_head is not None else (bound, head)
    c = -(-n // PLOT_CELLS)
    m = -(-n // c)
    size = torch.full((m,), c)
    size[-1] = n - (m - 1) * c  # positions in each block
    try:
        if p.translation_invariant:
            counts = _diagonal_counts(p, h, n, c, size)
        else:
            plan = p.plan(n, block=c)
            plan = plan.per_head[h] if plan.per_head is not None else plan
            counts = torch.zeros((m + 1) * (m + 1), dtype=torch.long)
            for comp in plan.components:
                counts += _component_counts(comp, h, n, c)
            counts = counts.view(m + 1, m + 1)[:m, :m]
    except NotImplementedError:  # a pattern without a plan: every tile is evaluated
        qb, kb = torch.arange(m).repeat_interleave(m), torch.arange(m).repeat(m)
        counts = _tiles_by_rule(p.mask_mod, h, n, c, qb, kb, p.translation_invariant).view(m, m)
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
        image, cell, pairs = _pooled_mask(bound, n, head)
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
