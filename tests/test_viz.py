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
    "block_local_no_cell_size": (P.BlockLocal(block=97), 0),  # no block near 7 divides 97: every tile
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
