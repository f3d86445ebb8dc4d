"""Bad input raises an error that names the argument and the value."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention


def additive(value, dtype=torch.float32):
    """A (1, 8) additive mask: 0 on the first six keys, ``value`` on the last two (padding)."""
    return torch.tensor([[0, 0, 0, 0, 0, 0, value, value]], dtype=dtype)


def qkv(B=1, H=2, n=8, D=4):
    return torch.randn(B, H, n, D), torch.randn(B, H, n, D), torch.randn(B, H, n, D)


@pytest.mark.parametrize(
    "change, exc, words",
    [
        (lambda q, k, v: (q[0], k, v), ValueError, "query must be (batch, heads, seq, head_dim)"),
        (lambda q, k, v: (q, k.double(), v), TypeError, "share a dtype"),
        (lambda q, k, v: (q, k[..., :3], v), ValueError, "head_dim differ"),
        (lambda q, k, v: (q, k, v[:, :, :5]), ValueError, "lengths differ"),
        (lambda q, k, v: (q, torch.randn(2, 2, 8, 4), v), ValueError, "batch sizes differ"),
        (lambda q, k, v: (q.long(), k.long(), v.long()), TypeError, "floating point"),
        (lambda q, k, v: ([1, 2], k, v), TypeError, "query must be a torch.Tensor"),
        (lambda q, k, v: (torch.randn(1, 3, 8, 4), k, v), ValueError, "divide query heads"),
        (lambda q, k, v: (q, k[:, :0], v[:, :0]), ValueError, "divide query heads"),  # no key heads
        (lambda q, k, v: (torch.randn(1, 2, 9, 4), k, v), ValueError, "query is longer than key"),
    ],
)
def test_bad_tensors(change, exc, words):
    q, k, v = change(*qkv())
    with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)")):
        sparse_attention(q, k, v, P.SlidingWindow(window=4))


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (
            {"attention_mask": torch.ones(1, 7)},
            ValueError,
            r"attention_mask must have shape \(batch, seq\) = \(1, 8\), got \(1, 7\)",
        ),
        ({"global_attention_mask": torch.ones(8)}, ValueError, "global_attention_mask must have shape"),
        ({"attention_mask": [1] * 8}, TypeError, "attention_mask must be a torch.Tensor"),
        ({"backend": "fast"}, ValueError, "backend must be one of .* got 'fast'"),
        ({"scale": -1.0}, ValueError, "scale must be a positive number, got -1.0"),
        *[({"scale": bad}, ValueError, f"scale must be a positive number, got {got}")
          for bad, got in [(0, "0"), (True, "True"), (float("nan"), "nan"), (float("inf"), "inf"), ("0.5", "'0.5'"),
                           (torch.tensor(-0.5), r"tensor\(-0.5000\)")]],
        ({"scale": torch.tensor([0.5, 0.5])}, ValueError, r"0-dim real tensor, got a torch.float32 tensor of shape \(2,\)"),
        ({"scale": torch.tensor(True)}, ValueError, "0-dim real tensor, got a torch.bool tensor"),
        ({"scale": torch.tensor(0.5, requires_grad=True)}, ValueError, "scale must not require grad"),
        ({"dropout_p": 1.5}, ValueError, r"dropout_p must be in \[0, 1\), got 1.5"),
        ({"dropout_p": float("nan")}, ValueError, r"dropout_p must be in \[0, 1\), got nan"),
        ({"dropout_p": True}, TypeError, r"dropout_p must be a number in \[0, 1\), got True"),
        ({"dropout_p": torch.tensor(0.1)}, TypeError, r"dropout_p must be a number in \[0, 1\), got tensor\(0.1000\)"),
        ({"dropout_p": 0.1, "seed": 1.5}, TypeError, "seed must be an int or None, got 1.5"),
        ({"block_size": 0}, ValueError, "block_size must be > 0, got 0"),
        # additive masks (0 = attend, large negative = masked) would be read inverted as 1/0 masks
        *[
            ({"attention_mask": additive(big)}, ValueError, rf"attention_mask must hold 0/1 values .* got {got}: additive")
            for big, got in [(torch.finfo(torch.float32).min, r"-3\.40\d*e\+38"), (-10000.0, "-10000.0"),
                             (float("-inf"), "-inf")]
        ],
        ({"attention_mask": additive(-10000, torch.long)}, ValueError, "attention_mask must hold 0/1 values .* got -10000:"),
        ({"global_attention_mask": additive(2.0)}, ValueError, "global_attention_mask must hold 0/1 values .* got 2.0"),
        # an additive mask of a batch without padding is all zeros: read as 1/0, every token would be padding
        *[
            ({"attention_mask": torch.zeros(1, 8, dtype=dtype)}, ValueError,
             rf"attention_mask is all 0 \({dtype}\): as a 1/0 mask .* additive mask without padding")
            for dtype in (torch.float32, torch.bfloat16, torch.long)
        ],
    ],
)  # fmt: skip
def test_bad_arguments(kwargs, exc, words):
    with pytest.raises(exc, match=words):
        sparse_attention(*qkv(), P.SlidingWindow(window=4), **kwargs)


def test_all_false_bool_padding_and_all_zero_global_masks_are_accepted():
    """Unambiguous: a bool mask of all False makes every token padding (zeros out); no global token is all zeros."""
    q, k, v = qkv()
    out = sparse_attention(
        q, k, v, P.SlidingWindow(window=4), attention_mask=torch.zeros(1, 8, dtype=torch.bool)
    )
    assert torch.equal(out, torch.zeros_like(out))
    torch.testing.assert_close(
        sparse_attention(q, k, v, P.SlidingWindow(window=4), global_attention_mask=torch.zeros(1, 8)),
        sparse_attention(q, k, v, P.SlidingWindow(window=4)),
    )


@pytest.mark.parametrize("backend", ["dense", "sdpa", "blocked", "flex"])
@pytest.mark.parametrize("seed", [-1, 2**32, 2**63 + 1, 2**70])
def test_a_seed_outside_0_to_2_32_is_refused_on_every_backend(seed, backend):
    """The dropout hash reads 32 bits of the seed: seeds 2**32 apart drew one mask, -5 was 2**32 - 5, and 2**63 + 1
    or 2**70 failed in the compiled kernel's or torch's argument parsing, or not at all (dense)."""
    with pytest.raises(ValueError, match=rf"seed must be in \[0, 2\*\*32 - 1\] .* got {seed}$"):
        sparse_attention(*qkv(), P.SlidingWindow(window=4), dropout_p=0.1, seed=seed, backend=backend)


@pytest.mark.parametrize("fused", ["0", "all"])
def test_the_largest_seed_draws_one_mask_on_every_path(fused, monkeypatch):
    monkeypatch.setenv("HF_SPARSE_FUSED", fused)
    q, k, v = (t.double() for t in qkv(n=40))
    kw = dict(dropout_p=0.3, seed=2**32 - 1)
    want = sparse_attention(q, k, v, P.SlidingWindow(window=8), backend="dense", **kw)
    got = sparse_attention(q, k, v, P.SlidingWindow(window=8), backend="blocked", **kw)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    assert not torch.allclose(
        got, sparse_attention(q, k, v, P.SlidingWindow(window=8), backend="dense", dropout_p=0.3, seed=0)
    )
    assert sparse_attention(q, k, v, P.SlidingWindow(window=8), backend="sdpa", **kw).shape == q.shape


@pytest.mark.parametrize("backend", ["dense", "blocked"])
def test_numpy_dropout_seed_and_block_size_are_their_python_numbers(backend):
    """dropout_p=np.float32(0.25) was refused as outside [0, 1) and seed=np.int64(3) as not an int, while
    np.float64 and block_size=np.int64 were accepted."""
    np = pytest.importorskip("numpy")
    q, k, v = qkv(n=40)
    pattern = P.SlidingWindow(window=8)
    want = sparse_attention(q, k, v, pattern, dropout_p=0.25, seed=3, block_size=16, backend=backend)
    for dropout_p in (np.float32(0.25), np.float64(0.25)):
        for seed in (np.int64(3), np.uint32(3), np.int8(3)):
            got = sparse_attention(
                q, k, v, pattern, dropout_p=dropout_p, seed=seed, block_size=np.int64(16), backend=backend
            )
            assert torch.equal(got, want)


def test_scale_takes_numpy_numbers_and_0_dim_tensors():
    """scale=np.float32(0.5) or torch.tensor(0.5) is the float 0.5 (both were refused as not positive numbers)."""
    np = pytest.importorskip("numpy")
    q, k, v = qkv()
    want = sparse_attention(q, k, v, P.SlidingWindow(window=4), scale=0.5)
    for scale in (
        np.float32(0.5),
        np.float64(0.5),
        torch.tensor(0.5),
        torch.tensor(0.5, dtype=torch.float64),
    ):
        torch.testing.assert_close(sparse_attention(q, k, v, P.SlidingWindow(window=4), scale=scale), want)
    torch.testing.assert_close(
        sparse_attention(q, k, v, P.SlidingWindow(window=4), scale=np.int64(2)),
        sparse_attention(q, k, v, P.SlidingWindow(window=4), scale=2.0),
    )


@pytest.mark.parametrize("dims", [(0, 4), (4, 0), (0, 0)])
def test_head_dim_0_is_an_error_naming_it(dims):
    D, Dv = dims
    q, k, v = torch.randn(1, 2, 8, D), torch.randn(1, 2, 8, D), torch.randn(1, 2, 8, Dv)
    with pytest.raises(
        ValueError, match=f"head_dim must be at least 1, got query/key head_dim {D} and value head_dim {Dv}"
    ):
        sparse_attention(q, k, v, P.SlidingWindow(window=4))


def test_bool_int_and_float_padding_masks_agree():
    q, k, v = qkv(B=2)
    keep = torch.ones(2, 8, dtype=torch.bool)
    keep[1, 5:] = False
    outs = [
        sparse_attention(q, k, v, P.SlidingWindow(window=5), attention_mask=m)
        for m in (keep, keep.long(), keep.float())
    ]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def test_a_block_size_that_straddles_the_patterns_blocks_is_exact():
    """Kernel tiles of 48 over BigBird's blocks of 32 are partial where they cross a block edge (refused before)."""
    q, k, v = qkv(n=128)
    pattern = P.BigBird(block=32, seed=0)
    want = sparse_attention(q, k, v, pattern, backend="dense")
    torch.testing.assert_close(sparse_attention(q, k, v, pattern, block_size=48), want)


def test_unknown_pattern_name():
    with pytest.raises(ValueError, match="unknown pattern 'swa'; known patterns: .*sliding_window"):
        sparse_attention(*qkv(), "swa")
    with pytest.raises(TypeError, match="pattern must be a Pattern"):
        sparse_attention(*qkv(), 3)


def test_flex_cannot_train_on_cpu_and_says_so():
    q, k, v = (t.requires_grad_() for t in qkv())
    with pytest.raises(ValueError, match=r"backend='flex' cannot run SlidingWindow\(window=4.*CPU backward"):
        sparse_attention(q, k, v, P.SlidingWindow(window=4), backend="flex")


def test_flex_runs_under_no_grad_with_inputs_that_require_grad(monkeypatch):
    """Forward only on CPU: under ``torch.no_grad()`` inputs that require grad (a model's parameters) run, as on the
    other backends (torch's FlexAttention raised its "does not support backward on CPU" there, and compiled, left
    later calls slow: the inputs are detached before it, the same line for the eager and the compiled one)."""
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    q, k, v = (t.requires_grad_() for t in qkv())
    with torch.no_grad():
        out = sparse_attention(q, k, v, P.SlidingWindow(window=4), backend="flex")
        want = sparse_attention(q, k, v, P.SlidingWindow(window=4), backend="dense")
    assert not out.requires_grad
    torch.testing.assert_close(out, want)


def test_flex_dropout_on_cpu_needs_the_eager_flex_and_says_so(monkeypatch):
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "1")
    with (
        torch.no_grad(),
        pytest.raises(ValueError, match=r"dropout_p=0.1 on CPU: compiled there.*log-sum-exp"),
    ):
        sparse_attention(*qkv(), P.SlidingWindow(window=4), backend="flex", dropout_p=0.1)


def test_compiled_flex_on_cpu_refuses_float64_and_says_so(monkeypatch):
    """Compiled on CPU, FlexAttention takes float32/16 and bfloat16 (float64 failed deep inside inductor); the eager
    FlexAttention (HF_SPARSE_FLEX_COMPILE=0) runs float64."""
    q, k, v = (t.double() for t in qkv())
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "1")
    with (
        torch.no_grad(),
        pytest.raises(ValueError, match=r"backend='flex' cannot run SlidingWindow.*torch.float64 on CPU"),
    ):
        sparse_attention(q, k, v, P.SlidingWindow(window=4), backend="flex")
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    with torch.no_grad():
        out = sparse_attention(q, k, v, P.SlidingWindow(window=4), backend="flex")
    torch.testing.assert_close(out, sparse_attention(q, k, v, P.SlidingWindow(window=4), backend="dense"))


def test_per_head_needs_matching_heads():
    with pytest.raises(ValueError, match="PerHead has 3 patterns but the input has 2 heads"):
        sparse_attention(*qkv(), P.PerHead([P.Causal()] * 3))


@pytest.mark.parametrize("backend", ["auto", "blocked", "sdpa", "dense", "flex"])
@pytest.mark.parametrize(
    "combine",
    [
        lambda ph: ph | P.Global(indices=[0]),
        lambda ph: ph & P.SlidingWindow(window=5),
        lambda ph: P.Causal() & ph,
    ],
    ids=["or_global", "and_window", "causal_and"],
)
@pytest.mark.parametrize("H", [1, 3, 4])
def test_per_head_inside_a_combination_needs_matching_heads(H, combine, backend, monkeypatch):
    """A PerHead inside ``|`` or ``&`` gets the top-level check on every backend: never an output with the PerHead's
    head count (blocked), the last head's pattern for the extra heads (flex) or an expand error (sdpa, dense)."""
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    pattern = combine(P.PerHead([P.SlidingWindow(window=3), P.Causal()]))
    q = torch.randn(1, H, 8, 4)
    with (
        torch.no_grad(),
        pytest.raises(ValueError, match=f"PerHead has 2 patterns but the input has {H} heads"),
    ):
        sparse_attention(q, q, q, pattern, backend=backend)


def test_per_head_inside_a_combination_needs_matching_heads_on_large_inputs():
    """Past the sdpa size on CPU ``auto`` runs the block kernels, which returned 2 of the 4 heads."""
    pattern = P.PerHead([P.SlidingWindow(window=3), P.Causal()]) | P.Global(indices=[0])
    q = torch.randn(1, 4, 256, 16)
    with pytest.raises(ValueError, match="PerHead has 2 patterns but the input has 4 heads"):
        sparse_attention(q, q, q, pattern)
