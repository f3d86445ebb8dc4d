"""scripts/band_roofline.py: every query block's keys hold its whole window, for any block; bad blocks refused."""

import pytest
import torch

from tests.script_loader import load_script, usage_error


@pytest.mark.parametrize("c", [32, 128, 256, 384, 512, 1024])
def test_each_query_block_computes_every_key_of_its_windows(c):
    roofline = load_script("band_roofline")
    L, pad = roofline.key_span(c)
    assert L % c == 0 and pad % c == 0 and pad >= roofline.HALF
    # query i of the block sits at padded position i + pad; the block's keys are padded positions 0 .. L - 1
    allowed = (torch.arange(c)[:, None] + pad - torch.arange(L)[None, :]).abs() <= roofline.HALF
    assert (allowed.sum(1) == 2 * roofline.HALF + 1).all()


def test_a_block_above_the_half_window_runs(monkeypatch, capsys):
    roofline = load_script("band_roofline")
    monkeypatch.setattr(roofline, "N", 1024)
    roofline.main(["--block", "512"])
    assert "block 512: 1536 keys per query block for 513 allowed (2.99x the FLOPs)" in capsys.readouterr().out


@pytest.mark.parametrize("block", ["0", "-64", "96"])
def test_a_block_that_does_not_divide_n_is_refused(block, capsys):
    roofline = load_script("band_roofline")
    err = usage_error(roofline.main, ["--block", "128", block], capsys)
    assert f"--block {block}: a query block must be a positive divisor of n = 16384" in err
