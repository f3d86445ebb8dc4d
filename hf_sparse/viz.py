"""Pictures: pattern heatmaps, grids of attention weights, training curves. Needs matplotlib
(``pip install hf-sparse[viz]``); every function returns the Figure and saves a PNG if given a path."""

from __future__ import annotations

import os

import torch


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend unless one was chosen; ImportError naming the extra without it."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plots need matplotlib: pip install 'hf-sparse[viz]'") from e
    return plt


def _save(fig, path):
    if path is not None:
        path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = path + ".tmp.png"
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
        os.replace(tmp, path)  # atomic: never a half-written PNG
    return fig


def plot_pattern(pattern, n: int, path=None, ax=None, title: str | None = None, head: int = 0):
    """Heatmap of which (query, key) pairs a pattern allows on ``n`` positions, with its density."""
    plt = pyplot()
    if not isinstance(n, int) or n <= 0:
        raise ValueError(f"n must be a positive int, got {n!r}")
    bound = pattern.bind(n) if not pattern.content_based else pattern
    mask = bound.dense_mask(n)
    while mask.dim() > 2:
        mask = mask[0] if mask.dim() == 4 else mask[head]
    fig = ax.figure if ax is not None else plt.figure(figsize=(4, 4))
    ax = ax or fig.add_subplot(1, 1, 1)
    ax.imshow(mask.float().numpy(), cmap="Blues", interpolation="nearest", vmin=0, vmax=1)
    density = mask.float().mean().item()
    ax.set_title(f"{title or pattern.__name__}\n{density:.1%} of pairs", fontsize=9)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    return _save(fig, path)


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
    3-D tensor is promoted to one row.
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
    fig, axes = plt.subplots(
        rows, cols, figsize=(figsize[0] * cols, figsize[1] * rows), sharex=True, sharey=True, squeeze=False
    )
    for i in range(rows):
        for j in range(cols):
            ax = axes[i][j]
            pcm = ax.imshow(m[i, j].numpy(), cmap=cmap, interpolation="nearest")
            if i == rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(ylabel)
            if titles is not None:
                ax.set_title(
                    titles[j] if rows == 1 or not isinstance(titles[0], (list, tuple)) else titles[i][j]
                )
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
