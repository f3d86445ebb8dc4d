import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse.viz import plot_curves, plot_pattern, show_heatmaps


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
