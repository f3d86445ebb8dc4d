"""What FlexAttention gets, checked on CPU: the block layouts (at the pattern's own block, and over CUDA's
tiles of 64 and 128, directly or coarsened) cover every allowed pair and call a tile full only where every
pair is allowed; CUDA's BlockMasks give the dense result in eager FlexAttention; patterns moved to a device
carry every table there."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention
from hf_sparse.attention.dispatch import choose_block
from hf_sparse.attention.flex import CUDA_BLOCK, CUDA_INFERENCE_BLOCK, coarsen, cuda_layout
from tests.cases import all_patterns, make_masks

PATTERNS = all_patterns()


def _bound(name, n):
    pattern = PATTERNS[name]
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, n, 8, generator=g), torch.randn(2, 3, n, 8, generator=g)
    return pattern.bind(n, query=q, key=k)


def _check_covers(layout, bound, n):
    """Every allowed pair lies in a kept tile; every full tile is all allowed."""
    allowed = bound.dense_mask(n)
    allowed = allowed.reshape((1,) * (4 - allowed.dim()) + tuple(allowed.shape))  # (Ba, Ha, n, n)
    b = layout.block
    dense, full = layout.to_dense(), layout.to_dense(full=True)  # (Bl, Hl, nqb, nkb)
    expand = lambda m: m.repeat_interleave(b, -2).repeat_interleave(b, -1)[..., :n, :n]  # noqa: E731
    kept_pairs, full_pairs = expand(dense), expand(full)
    assert not (allowed & ~kept_pairs).any(), "an allowed pair lies outside every kept tile"
    assert not (full_pairs & ~allowed).any(), "a tile marked full holds a pair that is not allowed"


@pytest.mark.parametrize("tile", [None, CUDA_INFERENCE_BLOCK, CUDA_BLOCK])
@pytest.mark.parametrize("n", [129, 1000])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_layouts_cover_the_pattern(name, n, tile):
    """What FlexAttention's BlockMask is built from: the layout at the pattern's own block (CPU; tile
    None) and over CUDA's tiles (directly or coarsened): every allowed pair in a kept tile, only allowed
    pairs in a full one (FlexAttention skips the mask there)."""
    bound = _bound(name, n)
    block = choose_block(bound, n)
    if tile is None:
        layout = bound.block_layout(n, block=block)
    else:
        layout = cuda_layout(bound, n, n, block, tile)
        assert layout.block % tile == 0
    _check_covers(layout, bound, n)


@pytest.mark.parametrize("factor", [2, 4, 8])
@pytest.mark.parametrize("name", ["sliding_window", "causal", "bigbird", "fixed", "topk_blocks", "per_head"])
def test_coarsen_keeps_every_pair_and_only_true_full_tiles(name, factor):
    n = 1000
    bound = _bound(name, n)
    layout = bound.block_layout(n, block=16)
    coarse = coarsen(layout, factor)
    assert coarse.block == 16 * factor and coarse.num_kv_blocks == -(-layout.num_kv_blocks // factor)
    _check_covers(coarse, bound, n)
    if name == "causal":  # below the diagonal tiles stay full, except in the last row, which runs past n
        Q = coarse.num_q_blocks
        assert int(coarse.full.sum()) == (Q - 1) * (Q - 2) // 2


def test_pattern_to_device_moves_every_table():
    bound = _bound("bigbird", 1000) | P.Global.from_mask(torch.tensor([[1] + [0] * 999]))
    moved = bound.to("meta")

    def tensors(obj, seen):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            yield obj
        elif isinstance(obj, P.Pattern):
            for v in vars(obj).values():
                yield from tensors(v, seen)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                yield from tensors(v, seen)

    moved_tensors = list(tensors(moved, set()))
    assert moved_tensors and all(t.device.type == "meta" for t in moved_tensors)
    assert all(t.device.type == "cpu" for t in tensors(bound, set()))  # the original is left as it was
    assert bound.to("cpu") is bound  # nothing to move: the same object


@pytest.mark.parametrize(
    ("name", "n", "calls"),
    [("strided", 64, [0, 8]), ("strided", 1000, [0, 8]), ("dilated", 129, [3]), ("strided", 65, None)],
)
def test_bands_inside_classes_run_as_calls_in_class_order(name, n, calls):
    """Strided's causal columns and Dilated (equal residue classes) run as a band in class order, beside
    the position-order rest; unequal classes keep one call. The flex tables (test_kernels) check the
    result against the dense reference on this path."""
    from hf_sparse.attention.flex import class_order_parts

    bound = _bound(name, n)
    parts = class_order_parts(bound, 2, 3, n, n, choose_block(bound, n), "cpu")
    assert (parts and [p.d for p in parts]) == calls


def test_masks_reading_tables_get_small_triton_tiles_on_cuda_only():
    from hf_sparse.attention.flex import class_order_parts, kernel_options

    bigbird, window = _bound("bigbird", 1024), _bound("sliding_window", 1024)
    assert kernel_options(bigbird, "cuda") == {"BLOCK_M": 64, "BLOCK_N": 64}
    assert kernel_options(_bound("global_indices", 1024), "cuda") == {"BLOCK_M": 64, "BLOCK_N": 64}
    assert kernel_options(bigbird, "cpu") is None and kernel_options(window, "cuda") is None
    # a pattern whose rule reads tables keeps one call (its mask in class order would need them too)
    with_global = P.Strided(stride=8) | P.Global(indices=[3])
    assert class_order_parts(with_global, 1, 1, 64, 64, 64, "cpu") is None


def test_whole_block_patterns_have_only_full_tiles():
    """BigBird's tiles (window, random and global blocks) are all full at its block, so on CUDA its
    inference BlockMask evaluates no mask and its training mask is one block-map lookup."""
    from hf_sparse.attention.flex import _lookup_rule

    bigbird = _bound("bigbird", 1024).block_layout(1024, block=16)
    assert bool((bigbird.full | (bigbird.kv_index < 0)).all())
    assert _lookup_rule(bigbird, "cpu") is not None
    window = _bound("sliding_window", 1024).block_layout(1024, block=16)
    assert _lookup_rule(window, "cpu") is None


@pytest.mark.parametrize("mode", ["none", "padding", "global"])
@pytest.mark.parametrize("tile", [CUDA_INFERENCE_BLOCK, CUDA_BLOCK])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_cuda_block_masks_give_the_dense_result(name, tile, mode, monkeypatch):
    """The BlockMasks CUDA gets (tiles of 64 or 128; a mask that reads tables as one block-map lookup
    where the pattern's tiles are whole blocks), run here by FlexAttention's eager implementation, which
    evaluates the mask at every pair: the dense reference's output. n = 1024: whole blocks (the lookup
    is only taken where every kept tile is full, and tiles past the end are not)."""
    from hf_sparse.attention import flex

    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    monkeypatch.setattr(flex, "flex_tile", lambda pattern, device, grad: tile)
    n, B, H = 1024, 2, 3
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, n, 8, generator=g, dtype=torch.float64) for _ in range(3))
    pattern = PATTERNS[name]
    if pattern.content_based:
        pattern = pattern.bind(n, query=q, key=k)
    am, gm = make_masks(mode, B, n)
    kw = dict(attention_mask=am, global_attention_mask=gm)
    out = sparse_attention(q, k, v, pattern, backend="flex", **kw)
    ref = sparse_attention(q, k, v, pattern, backend="dense", **kw)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)
