import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse.viz import plot_curves, plot_pattern, pyplot, show_heatmaps


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    pyplot().close("all")


def test_show_heatmaps_grid(tmp_path):
    w = torch.softmax(torch.randn(2, 3, 10, 10), -1)
    fig = show_heatmaps(w, titles=["h0", "h1", "h2"], path=tmp_path / "w.png")
    assert len([a for a in fig.axes if a.get_images()]) == 6
    assert (tmp_path / "w.png").stat().st_size > 1000


def test_figures_made_to_be_saved_are_closed(tmp_path):
    """Saved in a loop, plots do not pile up in pyplot; the returned figure still reads and saves; a figure drawn
    into the caller's axes stays the caller's (open); without a path the figure stays open to be shown."""
    from hf_sparse.viz import plot_bars

    plt = pyplot()
    plt.close("all")
    for i in range(3):
        fig = P.SlidingWindow(window=8).plot(64, path=tmp_path / f"p{i}.png")
        show_heatmaps(torch.rand(2, 2, 4, 4), path=tmp_path / f"h{i}.png")
        plot_curves({"train": [(0, 1.0), (1, 0.5)]}, path=tmp_path / f"c{i}.png")
        plot_bars({"a": 0.5}, path=tmp_path / f"b{i}.png")
    with pytest.raises(ValueError, match="cannot save"):
        plot_pattern(P.Causal(), 8, path=tmp_path / "p.xyz")
    assert plt.get_fignums() == []
    assert fig.axes[0].get_title().startswith("sliding_window_8\n")
    fig.savefig(tmp_path / "again.png")
    assert (tmp_path / "again.png").stat().st_size > 1000
    caller, ax = plt.subplots()
    plot_pattern(P.Causal(), 8, ax=ax, path=tmp_path / "mine.png")
    shown = plot_pattern(P.Causal(), 8)
    assert plt.get_fignums() == [caller.number, shown.number]


def test_show_heatmaps_rejects_bad_shapes():
    with pytest.raises(ValueError, match="2 to 4 dims"):
        show_heatmaps(torch.zeros(5))


def test_plot_pattern_and_curves(tmp_path):
    plot_pattern(P.Strided(stride=4), 32, path=tmp_path / "p.png")
    plot_curves({"train": [(0, 1.0), (1, 0.5)]}, path=tmp_path / "c.png")
    assert (tmp_path / "p.png").exists() and (tmp_path / "c.png").exists()
    with pytest.raises(ValueError, match="n must be a positive int"):
        plot_pattern(P.Causal(), 0)


PNG, PDF, SVG, JPG = b"\x89PNG", b"%PDF", b"<?xml", b"\xff\xd8\xff"


def _image(fig):
    return torch.from_numpy(fig.axes[0].get_images()[0].get_array().data).float()


def _qk(seed=0):
    return torch.randn(1, 2, 100, 16, generator=torch.Generator().manual_seed(seed))


POOLED = {
    "sliding_window": (P.SlidingWindow(window=8), 0),
    "causal": (P.Causal(), 0),
    "strided": (P.Strided(stride=8), 0),
    "fixed": (P.Fixed(block=8, summary=2), 0),
    "dilated": (P.Dilated(window=8, dilation=2), 0),
    "block_local_odd": (P.BlockLocal(block=7), 0),
    "block_local_no_cell_size": (P.BlockLocal(block=97), 0),  # cells of 7 straddle its blocks: partial tiles
    "global_indices": (P.Global(indices=[0, 5, 61]), 0),
    "global_every": (P.Global(every=10), 0),
    "random": (P.Random(block=8, num_blocks=2, seed=0), 0),
    "bigbird": (P.BigBird(block=8, seed=0), 0),
    "longformer": (P.Longformer(window=8), 0),
    "intersection": (P.Strided(stride=4) & P.SlidingWindow(window=16, causal=True), 0),
    "per_head_1": (P.PerHead([P.SlidingWindow(window=4), P.Causal()]), 1),
    "per_head_union_1": (P.PerHead([P.SlidingWindow(window=4), P.Causal()]) | P.Global(indices=[3]), 1),
    "lsh_bound_1": (P.LSH(bucket_size=8).bind(100, query=_qk(), key=_qk()), 1),
    "topk_bound_1": (P.TopKBlocks(block=8, k=2).bind(100, query=_qk(), key=_qk(1)), 1),
}


@pytest.mark.parametrize("name", list(POOLED))
def test_pooled_plot_is_the_pooled_dense_mask(name, monkeypatch):
    """Past PLOT_CELLS positions each cell is the fraction of allowed pairs in its block, density exact."""
    import hf_sparse.viz as viz

    pattern, head = POOLED[name]
    n = 100
    dense = (pattern.bind(n) if not pattern.content_based else pattern).dense_mask(n)
    while dense.dim() > 2:
        dense = dense[0] if dense.dim() == 4 else dense[head]
    monkeypatch.setattr(viz, "PLOT_CELLS", 16)
    fig = plot_pattern(pattern, n, head=head)
    image = _image(fig)
    m = image.shape[0]
    c = -(-n // m)
    assert m <= 16 and image.shape == (m, m) and m == -(-n // c)
    padded = torch.nn.functional.pad(dense.float(), (0, m * c - n, 0, m * c - n))
    size = torch.full((m,), float(c))
    size[-1] = n - (m - 1) * c
    expect = padded.view(m, c, m, c).sum((1, 3)) / (size[:, None] * size[None, :])
    torch.testing.assert_close(image, expect)
    assert f"{dense.float().mean().item():.1%} of pairs" in fig.axes[0].get_title()


def test_plot_of_a_long_sequence_never_builds_the_dense_mask(monkeypatch):
    """SlidingWindow(512) at 65536 positions: an n x n mask would take 4 GiB (32 GiB as floats)."""
    import hf_sparse.viz as viz
    from hf_sparse.patterns.base import Pattern

    dense_mask = Pattern.dense_mask

    def small_only(self, q_len, kv_len=None, device=None):
        assert q_len <= viz.PLOT_CELLS, f"dense_mask({q_len}) in a plot"
        return dense_mask(self, q_len, kv_len, device)

    monkeypatch.setattr(Pattern, "dense_mask", small_only)
    n, pattern = 65536, P.SlidingWindow(window=512)
    fig = plot_pattern(pattern, n)
    image = _image(fig)
    assert image.shape == (1024, 1024)
    pairs = image.double().sum().item() * (n // 1024) ** 2
    assert pairs == pytest.approx(pattern.density(n) * n * n, rel=1e-9)
    assert f"{pattern.density(n):.1%} of pairs" in fig.axes[0].get_title()


def test_small_plot_is_the_dense_mask():
    fig = plot_pattern(P.SlidingWindow(window=8), 64)
    torch.testing.assert_close(_image(fig), P.SlidingWindow(window=8).dense_mask(64).float())
    assert fig.axes[0].get_title() == "sliding_window_8\n13.6% of pairs"


@pytest.mark.parametrize("ext, magic", [("png", PNG), ("pdf", PDF), ("svg", SVG), ("jpg", JPG), ("PDF", PDF)])
def test_plot_saves_in_the_format_of_its_extension(ext, magic, tmp_path):
    path = tmp_path / f"fig.{ext}"
    P.SlidingWindow(window=4).plot(16, path=path)
    assert path.read_bytes().startswith(magic)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_plot_rejects_a_format_matplotlib_cannot_write(tmp_path):
    with pytest.raises(ValueError, match=r"fig\.xyz.*\.png"):
        P.SlidingWindow(window=4).plot(16, path=tmp_path / "fig.xyz")


def test_bound_patterns_are_titled_by_the_pattern_they_came_from():
    x = torch.randn(1, 1, 64, 16, generator=torch.Generator().manual_seed(0))
    lsh, topk = P.LSH(bucket_size=8), P.TopKBlocks(block=8, k=2)
    for pattern in (lsh, topk):
        bound = pattern.bind(64, query=x, key=x)
        assert bound.__name__ == pattern.__name__ != ""
        assert bound.plot(64).axes[0].get_title().startswith(pattern.__name__ + "\n")


def test_plot_per_head_shows_the_head_asked_for():
    pattern = P.PerHead([P.SlidingWindow(window=4), P.Causal()])
    fig = pattern.plot(32, head=1)
    torch.testing.assert_close(_image(fig), P.Causal().dense_mask(32).float())
    assert (
        fig.axes[0].get_title()
        == f"per_head\nhead 1: {P.Causal().dense_mask(32).float().mean():.1%} of pairs"
    )
    for bad in (2, -1, True, "0"):
        with pytest.raises(ValueError, match="head must be an int in 0..1"):
            pattern.plot(32, head=bad)
    with pytest.raises(ValueError, match=r"head must be an int in 0..0 \(SlidingWindow"):
        P.SlidingWindow(window=4).plot(32, head=1)


def test_gallery_table_escapes_the_pipes_in_its_cells(tmp_path, monkeypatch):
    """`SlidingWindow(32) | Global(every=40)` is one cell of patterns.md, not two."""
    import re

    from tests.script_loader import load_script

    gallery = load_script("gallery")
    union = "SlidingWindow(32) | Global(every=40)"
    monkeypatch.setattr(gallery, "OUT", str(tmp_path))
    monkeypatch.setattr(
        gallery, "gallery_patterns", lambda: {union: P.SlidingWindow(window=32) | P.Global(every=40)}
    )
    monkeypatch.setattr(gallery, "content_examples", lambda n: {})
    gallery.gallery(n=32)
    rows = (tmp_path / "gallery" / "patterns.md").read_text().splitlines()[2:]
    cells = [re.split(r"(?<!\\)\|", row.strip().strip("|")) for row in rows]  # GFM splits at unescaped pipes
    assert [len(c) for c in cells] == [4, 4, 4]  # header, rule, the union's row
    assert cells[2][0].strip() == "`SlidingWindow(32) \\| Global(every=40)`"


def test_show_heatmaps_panels_share_one_colour_scale():
    """Each panel was scaled on its own while the one colorbar showed the last panel's scale."""
    a, b = torch.zeros(4, 4), torch.zeros(4, 4)
    a[0, 0], b[0, 0], b[1, 1] = 1.0, 0.01, -0.5
    fig = show_heatmaps(torch.stack([a, b])[None], titles=["max 1.0", "max 0.01"])
    images = [im for ax in fig.axes for im in ax.get_images()]
    assert len(images) == 2
    assert [im.get_clim() for im in images] == [(-0.5, 1.0), (-0.5, 1.0)]
    (colorbar,) = [ax for ax in fig.axes if not ax.get_images()]
    assert colorbar.get_ylim() == (-0.5, 1.0)
    fig = show_heatmaps(
        torch.tensor([[float("nan"), 2.0], [0.5, 1.0]])
    )  # NaN cells are left out of the scale
    assert fig.axes[0].get_images()[0].get_clim() == (0.5, 2.0)


@pytest.mark.parametrize(
    "shape, titles, match",
    [
        (
            (1, 3, 4, 4),
            ["a"],
            r"titles must hold 3 titles \(one per column\) for matrices of shape \(1, 3, 4, 4\)",
        ),
        ((2, 2, 4, 4), ["a", "b", "c"], r"titles must hold 2 titles \(one per column\)"),
        ((2, 2, 4, 4), [["a", "b"], ["c"]], r"titles must hold 2 lists of 2 titles \(one per row\)"),
        ((2, 2, 4, 4), [["a", "b"]], r"titles must hold 2 lists of 2 titles"),
    ],
)
def test_show_heatmaps_titles_must_fit_the_grid(shape, titles, match):
    with pytest.raises(ValueError, match=match):
        show_heatmaps(torch.rand(shape), titles=titles)


def test_show_heatmaps_titles_per_column_or_per_panel():
    fig = show_heatmaps(torch.rand(2, 2, 4, 4), titles=[["a", "b"], ["c", "d"]])
    assert [ax.get_title() for ax in fig.axes if ax.get_images()] == ["a", "b", "c", "d"]
    fig = show_heatmaps(torch.rand(2, 2, 4, 4), titles=["h0", "h1"])
    assert [ax.get_title() for ax in fig.axes if ax.get_images()] == ["h0", "h1", "h0", "h1"]


def test_save_leaves_no_temporary_file_and_shares_no_temporary_name(tmp_path):
    """The figure went to '<path>.tmp', left behind when the rename failed, and shared by concurrent writers."""
    target = tmp_path / "fig.png"
    target.mkdir()  # the rename onto it fails
    with pytest.raises(OSError):
        show_heatmaps(torch.rand(3, 3), path=target)
    assert [p.name for p in tmp_path.iterdir()] == ["fig.png"]
    other = tmp_path / "other.png"
    (tmp_path / "other.png.tmp").mkdir()  # the old fixed temporary name is taken
    show_heatmaps(torch.rand(3, 3), path=other)
    assert other.read_bytes().startswith(PNG)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png", "other.png", "other.png.tmp"]


def test_density_in_the_title_keeps_two_significant_digits():
    from hf_sparse.viz import _percent

    assert [_percent(x) for x in (0.136, 0.0, 1.0, 0.001, 0.00025, 0.999975, 1.2e-7)] == [
        "13.6%",
        "0.0%",
        "100.0%",
        "0.1%",
        "0.025%",
        "99.9975%",
        "0.000012%",
    ]
    n, pattern = 20_000, P.SlidingWindow(window=2)  # 3 keys a query: 0.015% of pairs, shown as 0.0%
    title = plot_pattern(pattern, n).axes[0].get_title()
    assert pattern.density(n) == pytest.approx(0.00015, rel=1e-3)
    assert title.splitlines()[1].startswith("0.015% of pairs")


@pytest.mark.parametrize("n", [32, 100, 2048])
@pytest.mark.parametrize("name", ["lsh", "topk_blocks"])
def test_plot_of_a_content_based_pattern_bound_at_another_length_raises(name, n):
    """It plotted a crop of the bound mask (n < 64), invented rows (clamped indices) or failed in a reshape."""
    x = torch.randn(1, 1, 64, 16, generator=torch.Generator().manual_seed(0))
    pattern = P.LSH(bucket_size=16) if name == "lsh" else P.TopKBlocks(block=16, k=2)
    bound = pattern.bind(64, query=x, key=x)
    with pytest.raises(
        ValueError, match=rf"n={n}, but {pattern.__name__} was bound to 64 queries and 64 keys"
    ):
        bound.plot(n)
    assert bound.plot(64).axes[0].get_images()[0].get_array().shape == (64, 64)
    if name == "lsh":
        with pytest.raises(
            ValueError, match=rf"was bound to 64 queries and 64 keys, got q_len={n}, kv_len={n}"
        ):
            bound.dense_mask(n)
        torch.testing.assert_close(
            bound.dense_mask(1, 64), bound.dense_mask(64)[..., -1:, :]
        )  # the last query


def test_gallery_keeps_the_previous_table_when_writing_it_fails(tmp_path, monkeypatch):
    """patterns.md was truncated before it was written: an error while writing lost the previous table."""
    from tests.script_loader import load_script

    gallery = load_script("gallery")

    import hf_sparse.viz as viz

    monkeypatch.setattr(viz, "_save", lambda fig, path, close=True: fig)  # the table only
    monkeypatch.setattr(gallery, "OUT", str(tmp_path))
    monkeypatch.setattr(gallery, "content_examples", lambda n: {})
    monkeypatch.setattr(gallery, "gallery_patterns", lambda: {"SlidingWindow(4)": P.SlidingWindow(window=4)})
    monkeypatch.setattr(gallery, "RULES", {"SlidingWindow(4)": "`|i - j| <= 2`"})
    gallery.gallery(n=16)
    table = tmp_path / "gallery" / "patterns.md"
    before = table.read_text()
    monkeypatch.setattr(gallery, "RULES", {"SlidingWindow(4)": "A rule that UTF-8 cannot encode: \ud800."})
    with pytest.raises(UnicodeEncodeError):
        gallery.gallery(n=16)
    assert table.read_text() == before
    assert not [p.name for p in table.parent.iterdir() if p.name.endswith(".tmp")]


class _RuleOnly(P.Pattern):
    """A pattern with a rule and no plan (a user's subclass): the pooled plot evaluates every tile."""

    type_name = "rule_only"

    def _mask(self, b, h, i, j):
        return (i * 7 + j * 3) % 5 == 0

    def _params(self):
        return {}


def _bound_qk(n, heads=2, seed=0):
    return torch.randn(1, heads, n, 16, generator=torch.Generator().manual_seed(seed))


# name -> (pattern at n, head): every family through each path of the pooled count (a rule of i - j only, a plan's
# components in position order or gathered, every tile), composites and per-head patterns included
COUNTED = {
    "sliding_window": (lambda n: P.SlidingWindow(window=8), 0),
    "causal": (lambda n: P.Causal(), 0),
    "strided": (lambda n: P.Strided(stride=8), 0),
    "strided_bidirectional": (lambda n: P.Strided(stride=8, causal=False), 0),
    "dilated_causal": (lambda n: P.Dilated(window=5, dilation=3, causal=True), 0),
    "block_local": (lambda n: P.BlockLocal(block=7), 0),
    "fixed": (lambda n: P.Fixed(block=8, summary=2), 0),
    "fixed_bidirectional": (lambda n: P.Fixed(block=10, summary=3, causal=False), 0),
    "global_indices": (lambda n: P.Global(indices=[0, 5, 61]), 0),
    "global_every": (lambda n: P.Global(every=10), 0),
    "global_from_mask": (lambda n: P.Global.from_mask(torch.arange(n)[None] % 13 == 4), 0),
    "sliding_window_or_global_every": (lambda n: P.SlidingWindow(window=8) | P.Global(every=10), 0),
    "fixed_or_global": (lambda n: P.Fixed(block=8, summary=2) | P.Global(indices=[3, 50]), 0),
    "global_and_causal": (lambda n: P.Global(every=7) & P.Causal(), 0),
    "window_or_global_and_causal": (
        lambda n: (P.SlidingWindow(window=6, causal=True) | P.Global(every=9)) & P.Causal(),
        0,
    ),
    "intersection": (lambda n: P.Strided(stride=4) & P.SlidingWindow(window=16, causal=True), 0),
    "random": (lambda n: P.Random(block=8, num_blocks=2, seed=0), 0),
    "bigbird": (lambda n: P.BigBird(block=8, seed=0), 0),
    "bigbird_odd_block": (lambda n: P.BigBird(block=5, window_blocks=1, seed=1), 0),
    "longformer": (lambda n: P.Longformer(window=8), 0),
    "per_head_0": (lambda n: P.PerHead([P.Fixed(block=8, summary=2), P.Global(every=9)]), 0),
    "per_head_1": (lambda n: P.PerHead([P.Fixed(block=8, summary=2), P.Global(every=9)]), 1),
    "per_head_union_1": (
        lambda n: P.PerHead([P.SlidingWindow(window=4), P.Causal()]) | P.Global(indices=[3]),
        1,
    ),
    "lsh_bound_1": (lambda n: P.LSH(bucket_size=8).bind(n, query=_bound_qk(n), key=_bound_qk(n)), 1),
    "lsh_two_hashes_causal": (
        lambda n: P.LSH(bucket_size=8, num_hashes=2, causal=True).bind(
            n, query=_bound_qk(n), key=_bound_qk(n)
        ),
        0,
    ),
    "topk_bound_1": (
        lambda n: P.TopKBlocks(block=8, k=2).bind(n, query=_bound_qk(n), key=_bound_qk(n, seed=1)),
        1,
    ),
    "rule_only": (lambda n: _RuleOnly(), 0),
}


# cells of 6 positions (dividing n), 9 (a few pairs evaluated at a time: every loop over chunks runs) and 63
@pytest.mark.parametrize("n, chunk", [(96, None), (131, 100), (1000, None)], ids=["96", "131-chunks", "1000"])
@pytest.mark.parametrize("name", list(COUNTED))
def test_pooled_counts_are_the_dense_mask_counted_cell_by_cell(name, n, chunk, monkeypatch):
    """The pooled plot's allowed pairs per cell (read from the pattern's layout or plan, the rule evaluated only in
    partial tiles) are exactly the dense mask's, summed over each cell; their total is the title's density."""
    import hf_sparse.viz as viz

    if chunk is not None:
        monkeypatch.setattr(viz, "_CHUNK", chunk)
    make, head = COUNTED[name]
    pattern = make(n)
    bound = pattern.bind(n) if not pattern.content_based else pattern
    dense = bound.dense_mask(n)
    while dense.dim() > 2:
        dense = dense[0] if dense.dim() == 4 else dense[head]
    monkeypatch.setattr(viz, "PLOT_CELLS", 16)
    fraction, c, pairs = viz._pooled_mask(bound, n, head)
    m = fraction.shape[0]
    assert c == -(-n // 16) and fraction.shape == (m, m) and m == -(-n // c)
    size = torch.full((m,), c)
    size[-1] = n - (m - 1) * c
    counts = (fraction.double() * (size[:, None] * size[None, :])).round().long()
    padded = torch.nn.functional.pad(dense.long(), (0, m * c - n, 0, m * c - n))
    expect = padded.view(m, c, m, c).sum((1, 3))
    assert torch.equal(counts, expect), (counts - expect).nonzero()[:5].tolist()
    assert pairs == int(dense.sum())
    assert 0 < pairs < n * n  # a pattern that allows some pairs, not all: a count can be wrong either way
