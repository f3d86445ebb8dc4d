"""The pattern language: rules, plans, layouts, composition, serialisation, registry."""

import json
import math

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse.patterns.base import plan_dense_mask
from tests.cases import all_patterns

PATTERNS = all_patterns()


def _bound(p, n, B=2, H=3, D=8):
    if p.content_based:
        g = torch.Generator().manual_seed(0)
        return p.bind(n, query=torch.randn(B, H, n, D, generator=g), key=torch.randn(B, H, n, D, generator=g))
    return p.bind(n)


def _dense4(p, n, B=2, H=3):
    m = p.dense_mask(n)
    while m.dim() < 4:
        m = m.unsqueeze(0)
    return m.expand(B, H, n, n)


@pytest.mark.parametrize("block", [4, 16])
@pytest.mark.parametrize("n", [1, 7, 64, 129])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_plan_is_exact_and_disjoint(name, n, block):
    """The kernels' components cover exactly the rule, each pair once."""
    p = _bound(PATTERNS[name], n)
    counts = plan_dense_mask(p.plan(n, block=block), 2, 3, n, n)
    assert counts.max() <= 1, "a pair is covered by two components"
    assert torch.equal(counts > 0, _dense4(p, n))


@pytest.mark.parametrize("block", [4, 16])
@pytest.mark.parametrize("n", [7, 129])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_original_layout_covers_rule_and_full_flags_are_exact(name, n, block):
    """The block layout FlexAttention uses keeps every allowed tile; 'full' tiles are truly full."""
    p = _bound(PATTERNS[name], n)
    lay = p.block_layout(n, block=block)
    dense = (
        _dense4(p, n).any(1, keepdim=True).any(0, keepdim=True) if isinstance(p, P.PerHead) else _dense4(p, n)
    )
    kept = lay.to_dense().repeat_interleave(block, -2).repeat_interleave(block, -1)[..., :n, :n]
    assert not (dense & ~kept).any()
    idx = lay.kv_index.clone()
    idx[(idx < 0) | ~lay.full] = lay.num_kv_blocks
    full = torch.zeros(*idx.shape[:-1], lay.num_kv_blocks + 1, dtype=torch.bool).scatter_(-1, idx, True)[
        ..., :-1
    ]
    full = full.repeat_interleave(block, -2).repeat_interleave(block, -1)[..., :n, :n]
    assert not (full & ~dense).any()


STRADDLED = {
    "block_local_13": P.BlockLocal(block=13),
    "fixed_10": P.Fixed(block=10, summary=2),
    "fixed_10_bidirectional": P.Fixed(block=10, summary=3, causal=False),
    "random_6": P.Random(block=6, num_blocks=2, seed=2),
    "bigbird_5": P.BigBird(block=5, window_blocks=3, random_blocks=1, global_blocks=2, seed=3),
    "topk_blocks_5": P.TopKBlocks(block=5, k=2),
    "topk_blocks_7_causal": P.TopKBlocks(block=7, k=2, causal=True),
    "per_head": P.PerHead([P.BlockLocal(block=6), P.Random(block=5, num_blocks=1), P.Causal()]),
}


@pytest.mark.parametrize("block", [3, 4, 16])
@pytest.mark.parametrize("q_len, kv_len", [(1, 1), (37, 37), (5, 37), (20, 53)])
@pytest.mark.parametrize("name", list(STRADDLED))
def test_kernel_blocks_that_straddle_pattern_blocks_are_exact(name, q_len, kv_len, block):
    """A kernel block that neither divides nor is a multiple of the pattern's own block: the tiles across a
    pattern block's edge are partial, the plan still covers the rule exactly, and the layout's full tiles are
    full (also with queries at an offset, decoding with a cache)."""
    p = STRADDLED[name]
    g = torch.Generator().manual_seed(0)
    if p.content_based:
        p = p.bind(
            q_len,
            kv_len,
            query=torch.randn(2, 3, q_len, 8, generator=g),
            key=torch.randn(2, 3, kv_len, 8, generator=g),
        )
    else:
        p = p.bind(q_len, kv_len)
    want = p.dense_mask(q_len, kv_len)
    want = want.reshape((1,) * (4 - want.dim()) + tuple(want.shape)).expand(2, 3, q_len, kv_len)
    counts = plan_dense_mask(p.plan(q_len, kv_len, block=block), 2, 3, q_len, kv_len)
    assert counts.max() <= 1 and torch.equal(counts > 0, want)
    if isinstance(p, P.PerHead):
        return
    lay = p.block_layout(q_len, block=block, kv_len=kv_len)
    expand = lambda m: m.repeat_interleave(block, -2).repeat_interleave(block, -1)[..., :q_len, :kv_len]  # noqa: E731
    assert not (want & ~expand(lay.to_dense())).any() and not (expand(lay.to_dense(full=True)) & ~want).any()


@pytest.mark.parametrize(
    "pattern, rule",
    [
        (P.SlidingWindow(window=6), lambda i, j: (i - j).abs() <= 3),
        (P.SlidingWindow(window=4, causal=True), lambda i, j: (i - j >= 0) & (i - j < 4)),
        (P.Causal(), lambda i, j: j <= i),
        (P.Strided(stride=4), lambda i, j: (j <= i) & (((i - j) < 4) | ((i - j) % 4 == 0))),
        (P.Fixed(block=4, summary=1), lambda i, j: (j <= i) & ((i // 4 == j // 4) | (j % 4 >= 3))),
        (P.Dilated(window=4, dilation=2), lambda i, j: ((i - j).abs() <= 4) & ((i - j) % 2 == 0)),
        (P.BlockLocal(block=5), lambda i, j: i // 5 == j // 5),
        (P.Global(indices=[2]), lambda i, j: (i == 2) | (j == 2)),
        (P.Global(every=5), lambda i, j: (i % 5 == 0) | (j % 5 == 0)),
    ],
)
def test_documented_rules(pattern, rule):
    n = 23
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    assert torch.equal(pattern.dense_mask(n), rule(i, j).expand(n, n))
    assert torch.equal(pattern.mask_mod(0, 0, i, j).expand(n, n), rule(i, j).expand(n, n))


def test_union_and_intersection_follow_the_parts():
    a, b = P.SlidingWindow(window=4), P.Strided(stride=5, causal=False)
    n = 40
    assert torch.equal((a | b).dense_mask(n), a.dense_mask(n) | b.dense_mask(n))
    assert torch.equal((a & b).dense_mask(n), a.dense_mask(n) & b.dense_mask(n))
    assert (P.SlidingWindow(window=8) & P.Causal()).is_causal
    assert not (P.SlidingWindow(window=8) | P.Causal()).is_causal


def test_per_head_uses_each_heads_pattern():
    p = P.PerHead([P.SlidingWindow(window=h + 1, causal=True) for h in range(4)])
    m = p.dense_mask(10)
    assert m.shape == (4, 10, 10)
    for h in range(4):
        assert torch.equal(m[h], P.SlidingWindow(window=h + 1, causal=True).dense_mask(10))


@pytest.mark.parametrize("op", ["|", "&"])
def test_per_head_distributes_over_union_and_intersection(op):
    """``PerHead([a, b]) op c`` is ``PerHead([a op c, b op c])``, on either side and in the plan."""
    heads = [P.SlidingWindow(window=3), P.Causal(), P.Strided(stride=4, causal=True)]
    other = P.Dilated(window=5, dilation=2)
    combine = (lambda x, y: x | y) if op == "|" else (lambda x, y: x & y)
    n = 24
    for p in (combine(P.PerHead(heads), other), combine(other, P.PerHead(heads))):
        m = p.dense_mask(n)
        assert m.shape == (3, n, n)
        for h, a in enumerate(heads):
            assert torch.equal(m[h], combine(a.dense_mask(n), other.dense_mask(n)))
        plan = p.plan(n, block=4)
        assert plan.per_head is not None and len(plan.per_head) == 3
        assert torch.equal(plan_dense_mask(plan, 1, 3, n, n)[0] > 0, m)


def test_random_blocks_are_seeded():
    r = lambda seed: P.Random(block=4, num_blocks=2, seed=seed).bind(64).dense_mask(64)  # noqa: E731
    assert torch.equal(r(0), r(0))
    assert not torch.equal(r(0), r(1))
    # every query block sees exactly num_blocks key blocks
    blocks = r(3).view(16, 4, 16, 4)[:, 0, :, 0]
    assert (blocks.sum(-1) == 2).all()


def test_bigbird_structure():
    p = P.BigBird(block=8, window_blocks=3, random_blocks=1, global_blocks=2, seed=0).bind(128)
    m = p.dense_mask(128)
    assert m[:8].all() and m[:, :8].all() and m[-8:].all() and m[:, -8:].all()  # first/last blocks global
    blk = m.view(16, 8, 16, 8)[:, 0, :, 0]
    for q in range(2, 14):  # blocks whose window does not touch a global block
        assert blk[q, max(q - 1, 0) : q + 2].all()  # the window
        assert blk[q].sum() == 3 + 2 + 1  # window + 2 global + 1 random (outside the window)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_to_dict_from_dict_round_trip(name):
    p = PATTERNS[name]
    spec = p.to_dict()
    again = P.from_dict(json.loads(json.dumps(spec)))
    assert again == p and again.to_dict() == spec and hash(again) == hash(p)
    if not p.content_based:
        assert torch.equal(again.bind(50).dense_mask(50), p.bind(50).dense_mask(50))


def test_bound_patterns_serialise_as_their_source():
    p = P.BigBird(block=8, seed=3)
    assert p.bind(100).to_dict() == p.to_dict()


def test_registry():
    assert P.get("sliding_window", window=8) == P.SlidingWindow(window=8)
    assert P.get("BigBird", block=32) == P.BigBird(block=32)
    with pytest.raises(ValueError, match="unknown pattern 'nope'; known patterns: "):
        P.get("nope")
    with pytest.raises(KeyError, match="already registered"):
        P.register_pattern("sliding_window")(type("X", (P.Pattern,), {}))
    with pytest.raises(ValueError, match="lowercase identifiers"):
        P.register_pattern("Bad Name")
    with pytest.raises(ValueError, match="has no 'type'"):
        P.from_dict({"window": 3})


@pytest.mark.parametrize(
    "make, exc, words",
    [
        (lambda: P.SlidingWindow(window=0), ValueError, "window must be > 0, got 0"),
        (lambda: P.SlidingWindow(window=-4), ValueError, "window must be > 0, got -4"),
        (lambda: P.SlidingWindow(window=2.5), TypeError, "window must be an int, got float"),
        (lambda: P.Strided(stride=0), ValueError, "stride must be > 0"),
        (lambda: P.Fixed(block=4, summary=5), ValueError, "summary must be <= block"),
        (lambda: P.BigBird(window_blocks=2), ValueError, "window_blocks must be odd"),
        (lambda: P.Global(indices=[-1]), ValueError, "global indices must be >= 0"),
        (lambda: P.Global(indices=[1], every=3), ValueError, "either indices"),
        # indices are int positions: int() truncated 1.9, made "105" the positions 1, 0, 5 and True position 1
        (lambda: P.Global(indices=[1.9]), TypeError, r"indices must be ints \(positions\), got float 1.9"),
        (lambda: P.Global(indices=[0.5, 2.5]), TypeError, "indices must be ints .* got float 0.5"),
        (lambda: P.Global(indices="105"), TypeError, r"indices must be an int or a list of ints .* got str"),
        (lambda: P.Global(indices=[True, 0]), TypeError, "indices must be ints .* got bool True"),
        (lambda: P.Global(indices=True), TypeError, "indices must be an int or a list of ints .* got bool"),
        (lambda: P.Global(indices=torch.tensor([1.0])), TypeError, "indices must be ints .* got float"),
        (
            lambda: P.Global(indices=[]),
            ValueError,
            "indices must name at least one position, got an empty list",
        ),
        (lambda: P.from_dict({"type": "global", "indices": []}), ValueError, "at least one position"),
        (lambda: P.Global(every=2.0), TypeError, "every must be an int, got float"),
        (lambda: P.Global(every=True), TypeError, "every must be an int, got bool"),
        (lambda: P.Global(every=0), ValueError, "every must be > 0, got 0"),
        (lambda: P.PerHead(P.Causal()), TypeError, "non-empty list of patterns"),
        (lambda: P.Global() & P.Causal(), ValueError, "can only be combined with '|'"),
        (lambda: P.Causal() & (P.Causal() | P.Global()), ValueError, "can only be combined with '|'"),
        (lambda: P.PerHead([P.PerHead([P.Causal()])]), ValueError, "cannot be nested"),
        (
            lambda: P.PerHead([P.Causal()] * 2) | P.PerHead([P.Causal()] * 3),
            ValueError,
            r"same number of heads, got \[2, 3\]",
        ),
        (lambda: P.Random(block=64).mask_mod, None, None),
        # causal= is a bool: bool("false") would be True
        (
            lambda: P.SlidingWindow(window=8, causal="false"),
            TypeError,
            r"causal must be a bool, got str \('false'\)",
        ),
        (
            lambda: P.from_dict({"type": "strided", "stride": 4, "causal": "False"}),
            TypeError,
            "causal must be a bool",
        ),
        (lambda: P.Fixed(block=8, summary=2, causal=None), TypeError, "causal must be a bool, got NoneType"),
        (lambda: P.Dilated(window=3, causal=1), TypeError, "causal must be a bool, got int"),
        (lambda: P.LSH(causal="no"), TypeError, "causal must be a bool, got str"),
        (lambda: P.TopKBlocks(causal=0.5), TypeError, "causal must be a bool, got float"),
        # seed= is an int that torch.Generator.manual_seed takes
        (lambda: P.Random(seed=1.7), TypeError, r"seed must be an int, got float \(1.7\)"),
        (lambda: P.BigBird(seed="3"), TypeError, "seed must be an int, got str"),
        (lambda: P.LSH(seed=None), TypeError, "seed must be an int, got NoneType"),
        (lambda: P.Random(seed=True), TypeError, "seed must be an int, got bool"),
        (lambda: P.BigBird(seed=2**70), ValueError, r"seed must be in \[-2\*\*63, 2\*\*64 - 1\]"),
        # lengths
        (lambda: P.Causal().dense_mask(-1), ValueError, "q_len must be >= 0, got -1"),
        (lambda: P.Causal().dense_mask(2.0), TypeError, "q_len must be an int, got float"),
        (lambda: P.BlockLocal(block=2).dense_mask(5, 3), ValueError, r"q_len \(5\) must be <= kv_len \(3\)"),
        (lambda: P.SlidingWindow(window=3).block_layout(-3, block=2), ValueError, "n must be >= 0, got -3"),
        (lambda: P.Causal().plan(4, 2.5), TypeError, "kv_len must be an int, got float"),
        (lambda: P.Random(block=4).bind(-5), ValueError, "q_len must be >= 0, got -5"),
        (lambda: P.BigBird(block=4).bind(8, 4), ValueError, r"q_len \(8\) must be <= kv_len \(4\)"),
        (lambda: P.Union(P.Causal(), parts=[P.Causal()]), TypeError, "either positionally or as parts="),
    ],
)
def test_bad_parameters(make, exc, words):
    if exc is None:
        make()
        return
    with pytest.raises(exc, match=words):
        make()


def test_global_indices_take_ints_of_any_kind_sorted_without_repeats():
    np = pytest.importorskip("numpy")
    for given in (
        [5, 0, 5],
        (0, 5),
        {5, 0},
        np.array([5, 0]),
        [np.int64(5), np.int32(0)],
        torch.tensor([0, 5]),
    ):
        assert P.Global(indices=given).indices == [0, 5], given
    assert P.Global(indices=3).indices == P.Global(indices=np.int64(3)).indices == [3]


def test_numpy_integers_are_taken_as_plain_ints():
    np = pytest.importorskip("numpy")
    made = [
        P.SlidingWindow(window=np.int64(8)),
        P.BigBird(block=np.int64(64), random_blocks=np.uint8(2), seed=np.int64(3)),
        P.Global(every=np.int32(4)),
        P.Random(block=np.int16(4), seed=np.int64(1)),
        P.LSH(bucket_size=np.int64(8), seed=np.uint64(2**64 - 1)),
    ]
    for p in made:
        assert all(type(v).__module__ == "builtins" for v in p.to_dict().values()), p
        json.dumps(p.to_dict())
    assert made[0] == P.SlidingWindow(window=8)
    assert P.Random(block=4, seed=np.int64(1)).bind(np.int64(20)).dense_mask(20).shape == (20, 20)
    assert P.Causal().density(np.int64(8)) == 9 / 16
    with pytest.raises(TypeError, match="window must be an int"):
        P.SlidingWindow(window=np.bool_(True))
    with pytest.raises(TypeError, match="seed must be an int"):
        P.Random(seed=np.float64(1))


def test_bool_and_seed_arguments_keep_their_type():
    np = pytest.importorskip("numpy")
    p = P.SlidingWindow(window=4, causal=np.bool_(True))
    assert p.causal is True and p.to_dict()["causal"] is True
    assert P.Random(seed=2**64 - 1).bind(8).dense_mask(8).shape == (8, 8)
    assert P.BigBird(block=4, seed=-1).seed == -1


def test_combinations_take_their_spec_keyword():
    """``patterns.get(name, **params)`` takes what ``to_dict`` gives, and ``repr`` evaluates back."""
    p = (P.SlidingWindow(window=3) | P.Global(indices=[0])) & P.Causal()
    params = {k: v for k, v in p.to_dict().items() if k != "type"}
    assert P.get(p.to_dict()["type"], **params) == p
    assert eval(repr(p), vars(P)) == p
    assert (
        P.get("union", parts=[P.SlidingWindow(window=3), {"type": "causal"}])
        == P.SlidingWindow(window=3) | P.Causal()
    )


@pytest.mark.parametrize("name", ["sliding_window_causal", "strided", "bigbird", "per_head", "union", "lsh"])
def test_mask_mod_is_a_flex_mask_mod(name):
    """``pattern.mask_mod`` goes to FlexAttention's create_block_mask / create_mask as it is (a bound method
    counted ``self`` and was taken for a score_mod)."""
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    n, B, H = 24, 2, 3
    p = _bound(PATTERNS[name], n, B, H)
    flex.create_block_mask(p.mask_mod, B, H, n, n, device="cpu", BLOCK_SIZE=8, _compile=False)
    got = flex.create_mask(p.mask_mod, B, H, n, n, device="cpu")
    assert torch.equal(got, _dense4(p, n, B, H))


def test_mask_mod_survives_copies():
    import copy
    import pickle

    p = P.Strided(stride=4) | P.Global(indices=[1])
    i = torch.arange(12)
    want = p.dense_mask(12)
    for q in (copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert q == p and q.to_dict() == p.to_dict()
        assert torch.equal(q.mask_mod(0, 0, i[:, None], i[None]), want)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_used_and_bound_patterns_pickle(name):
    """What dispatch derives and keeps on a pattern (plans whose masks are closures) is left out of a pickle."""
    import pickle

    from hf_sparse import sparse_attention

    p = PATTERNS[name]
    q = torch.randn(1, 3, 20, 4)
    gm = torch.zeros(1, 20)
    gm[0, 3] = 1
    for backend in ("blocked", "sdpa"):
        sparse_attention(q, q, q, p, global_attention_mask=gm, backend=backend)
    b = _bound(p, 20, B=1)
    b.plan(20, block=4)
    for x in (p, b):
        y = pickle.loads(pickle.dumps(x))
        assert y == x and "_derived" not in vars(y)
        assert torch.equal(_bound(y, 20, B=1).dense_mask(20), _bound(x, 20, B=1).dense_mask(20))
    out = sparse_attention(q, q, q, pickle.loads(pickle.dumps(p)), backend="blocked")
    assert torch.allclose(out, sparse_attention(q, q, q, p, backend="blocked"), atol=1e-6)


def test_equal_patterns_hash_alike_and_bound_ones_compare_their_tables():
    r = P.Random(block=4, num_blocks=1, seed=0)
    b = r.bind(16)
    assert b == r.bind(16) and hash(b) == hash(r.bind(16))  # the same blocks
    assert b != r and len({r, b}) == 2  # a bound pattern is not its source (other lengths bind other blocks)
    assert b != P.Random(block=4, num_blocks=1, seed=1).bind(16)
    assert b.to_dict() == r.to_dict()
    part = P.BigBird(block=4).bind(32).parts[0]  # a block table without a source: compared, never raises
    assert (part == P.Causal()) is False and part != 3
    lsh = P.LSH(bucket_size=2)
    q1, q2 = torch.randn(1, 1, 8, 4), torch.randn(1, 1, 8, 4)
    a1, a2 = lsh.bind(8, query=q1, key=q1), lsh.bind(8, query=q2, key=q2)
    assert not torch.equal(a1.dense_mask(8), a2.dense_mask(8))
    assert a1 != a2 and a1 == lsh.bind(8, query=q1, key=q1)
    assert (P.Causal() == "causal") is False


def test_combinations_compare_up_to_order_and_repeats():
    a, b, c = P.SlidingWindow(window=5), P.Strided(stride=3), P.Global(indices=[2])
    for op in (lambda x, y: x | y, lambda x, y: x & y):
        assert op(a, b) == op(b, a) and hash(op(a, b)) == hash(op(b, a)) and len({op(a, b), op(b, a)}) == 1
        assert op(a, a) == a and a == op(a, a) and hash(op(a, a)) == hash(a)
        assert op(op(a, b), c) == op(c, op(b, a)) == op(a, op(b, op(c, a)))
        assert op(a, b) != op(a, c) and op(a, b) != a and a != op(a, b)
    assert (a | b) != (a & b) and (a | b) & c == c & (b | a)
    assert (a | a) == (a & a)  # both are a
    # the spec and the order of evaluation stay as written
    assert (b | a).to_dict()["parts"] == [b.to_dict(), a.to_dict()] and (b | a).parts == (b, a)
    assert len((a | a).to_dict()["parts"]) == 2
    # bound: equal when bound from equal patterns to equal tables
    r = P.Random(block=4, num_blocks=1, seed=0)
    assert (a | r).bind(16) == (r | a).bind(16) and hash((a | r).bind(16)) == hash((r | a).bind(16))
    other_seed = P.Random(block=4, num_blocks=1, seed=1)
    assert (a | r).bind(16) != (a | r) and (a | r).bind(16) != (a | other_seed).bind(16)
    assert P.Longformer(window=8) != P.SlidingWindow(window=8) | P.Global()


def test_global_from_mask_is_not_saved_as_call_time_global_and_compares_its_tokens():
    """``Global.from_mask(m)`` serialised as ``Global()`` (the tokens of the call's global_attention_mask): a round
    trip kept 3 of its 16 global column entries, and two from_mask patterns with different tokens were equal."""
    m1, m2 = torch.zeros(1, 16), torch.zeros(1, 16)
    m1[0, 3], m2[0, 9] = 1, 1
    g1, g2 = P.Global.from_mask(m1), P.Global.from_mask(m2)
    assert (
        g1 != g2 and g1 == P.Global.from_mask(m1.clone()) and hash(g1) == hash(P.Global.from_mask(m1.clone()))
    )
    assert g1 != P.Global() and g1 != P.Global(indices=[3])
    u = P.SlidingWindow(window=3) | g1
    assert u != P.SlidingWindow(window=3) | g2 and u != P.SlidingWindow(window=3) | P.Global()
    assert (
        u == P.SlidingWindow(window=3) | P.Global.from_mask(m1)
        and len({u, P.SlidingWindow(window=3) | g1}) == 1
    )
    assert "Global.from_mask(<(1, 16) mask, 1 global>)" in repr(u)
    for p in (g1, u, u & P.Causal()):
        with pytest.raises(
            TypeError, match=r"Global.from_mask holds call-time global tokens \(a \(1, 16\) mask\)"
        ):
            p.to_dict()


def test_causal_lsh_layout_keeps_no_tile_above_the_diagonal():
    n, block = 64, 8
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, n, 8, generator=g)
    for q_len in (n, 20):  # also decoding: queries at the end of the keys
        b = P.LSH(bucket_size=8, causal=True).bind(q_len, n, query=q[:, :, -q_len:], key=q)
        kept = b.block_layout(q_len, block=block, kv_len=n).to_dense()  # (B, H, nqb, nkb)
        last_query = torch.clamp(torch.arange(kept.shape[-2]) * block + block - 1, max=q_len - 1) + n - q_len
        above = (torch.arange(kept.shape[-1]) * block)[None, :] > last_query[:, None]
        assert not (kept & above).any()
        allowed = b.dense_mask(q_len, n)
        cover = kept.repeat_interleave(block, -2).repeat_interleave(block, -1)[..., :q_len, :n]
        assert not (allowed & ~cover).any()


def test_length_dependent_patterns_ask_to_be_bound():
    r = P.Random(block=4, num_blocks=1)
    i = torch.arange(8)
    with pytest.raises(RuntimeError, match=r"call pattern.bind\(q_len"):
        r.mask_mod(0, 0, i[:, None], i[None])
    assert r.bind(8).mask_mod(0, 0, i[:, None], i[None]).shape == (8, 8)
    with pytest.raises(ValueError, match="needs both tensors"):
        P.LSH().bind(8)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q_len", [300, 120])
def test_lsh_order_kernel_matches_the_torch_sort(causal, q_len, monkeypatch):
    """The compiled bucket order (a counting sort) gives the torch path's: positions sorted by bucket, then
    by position, and each query's key range in that order (its bucket's keys; causal: those at or before
    it), also when decoding (fewer queries than keys) and with empty buckets on either side."""
    from hf_sparse.attention import fused
    from hf_sparse.patterns import content

    if not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    g = torch.Generator().manual_seed(0)
    hq = torch.randint(0, 9, (2, 3, q_len), generator=g)  # bucket 8: queries only
    hk = torch.randint(0, 8, (2, 3, 300), generator=g)
    hk[hk == 3] = 4  # bucket 3: no key
    buckets = content.LSHBuckets(hq[..., None], hk[..., None], causal)
    ran = []
    kernel = content.order_kernel
    monkeypatch.setattr(content, "order_kernel", lambda *a: ran.append(kernel(*a)) or ran[-1])
    got = buckets._order(hq, hk, 300 - q_len, ranges=True)
    assert ran and ran[0] is not None  # the compiled kernel gave these
    monkeypatch.setattr(content, "order_kernel", None)
    want = buckets._order(hq, hk, 300 - q_len, ranges=True)
    for a, b in zip((got[0], got[1], *got[2]), (want[0], want[1], *want[2])):
        assert torch.equal(a, b)
    lo, hi = got[2]
    assert bool((hi <= lo).any()) and bool((hi > lo).any())


@pytest.mark.parametrize("num_hashes, transposed, n", [(1, False, 1000), (2, True, 1024)])
def test_lsh_hash_kernel_matches_the_torch_rule(num_hashes, transposed, n, monkeypatch):
    """The compiled hash (product and argmax in cache) gives the buckets of the PyTorch rule, argmax of
    ``[x R, -x R]``: the same ids for every row whose two largest candidates are not within rounding of
    each other, bucket 0 for a zero row (all candidates equal: the first), on a transposed (strided) x;
    n = 1024: 32 candidates per sign (the kernel's vector scan), n = 1000: 31 (its scalar loop)."""
    from hf_sparse.attention import fused
    from hf_sparse.patterns import content

    if not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.delenv("HF_SPARSE_FUSED", raising=False)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, n, 3, 32, generator=g).transpose(1, 2) if transposed else torch.randn(2, 3, n, 32)
    x[0, 1, 5] = 0
    lsh = P.LSH(bucket_size=16, num_hashes=num_hashes)
    ran = []
    kernel = content.hash_kernel
    monkeypatch.setattr(content, "hash_kernel", lambda *a: ran.append(kernel(*a)) or ran[-1])
    got = lsh.hash(x, n)
    assert ran and ran[0] is not None  # the compiled kernel gave these ids
    monkeypatch.setenv("HF_SPARSE_FUSED", "0")
    want = lsh.hash(x, n)
    assert got.shape == want.shape == (2, 3, n, num_hashes) and got.dtype == want.dtype
    assert (got[0, 1, 5] == 0).all()
    rot = torch.randn(num_hashes, 32, lsh.num_buckets(n) // 2, generator=torch.Generator().manual_seed(0))
    proj = torch.einsum("bhld,rdk->bhlrk", x.double(), rot.double())
    top2 = torch.cat([proj, -proj], -1).topk(2, -1).values
    clear = (top2[..., 0] - top2[..., 1]) > 1e-4
    assert clear.float().mean() > 0.99 and torch.equal(got[clear], want[clear])


def test_layout_never_evaluates_n_squared_pairs(monkeypatch):
    """Plans at 64k positions are built from the geometry alone: the rule is never called."""
    calls = []
    for cls in (P.SlidingWindow, P.Strided, P.BlockLocal):
        monkeypatch.setattr(cls, "_mask", lambda self, b, h, i, j: calls.append(1))
    n = 65536
    for p in (
        P.SlidingWindow(window=512),
        P.Strided(stride=256),
        P.BlockLocal(block=128),
        P.Longformer(window=512),
    ):
        plan = p.plan(n, block=64)
        kept = sum(c.layout.num_kept() for c in plan.components)
        assert kept < (n // 64) ** 2 / 4
    assert calls == []


@pytest.mark.parametrize("n", [100, 1000])
def test_density(n):
    w = 64
    hw = w // 2
    exact = sum(min(i + hw, n - 1) - max(i - hw, 0) + 1 for i in range(n)) / n**2
    assert math.isclose(P.SlidingWindow(window=w).density(n), exact)
    assert math.isclose(P.Causal().density(n), (n + 1) / (2 * n))
    assert P.BigBird(block=16).density(n) == pytest.approx(
        P.BigBird(block=16).bind(n).dense_mask(n).float().mean().item()
    )


def test_readable_names():
    assert P.SlidingWindow(window=512).__name__ == "sliding_window_512"
    assert P.Strided(stride=128).__name__ == "strided_128"


def test_names_tell_bool_and_list_parameters_apart():
    """The default plot title: a bool differing from its default and a list of indices are part of it."""
    assert P.SlidingWindow(window=4, causal=True).__name__ == "sliding_window_4_causal"
    assert P.Strided(stride=4, causal=False).__name__ == "strided_4_not_causal"
    assert P.Global().__name__ == "global"
    assert P.Global(indices=[0]).__name__ == "global_indices_0"
    assert P.Global(indices=[3, 9]).__name__ == "global_indices_3_9"
    assert P.Global(indices=range(10)).__name__ == "global_indices_0_1_2_and_7_more"
    assert P.LSH(causal=True).bind(8, query=torch.ones(1, 1, 8, 2), key=torch.ones(1, 1, 8, 2)).__name__ == (
        "lsh_64_1_0_causal"
    )
    names = [p.__name__ for p in PATTERNS.values() if not isinstance(p, (P.Union, P.Intersection, P.PerHead))]
    assert len(set(names)) == len(names), names


def test_plot_writes_png(tmp_path):
    fig = P.BigBird(block=8).plot(64, path=tmp_path / "bigbird.png")
    assert (tmp_path / "bigbird.png").stat().st_size > 1000
    assert "of pairs" in fig.axes[0].get_title()


@pytest.mark.parametrize(
    "pattern",
    [
        P.SlidingWindow(window=5, causal=True),
        P.Strided(stride=4),
        P.Fixed(block=6, summary=2),
        P.Dilated(window=3, dilation=2, causal=True),
        P.BlockLocal(block=5) & P.Causal(),
        P.SlidingWindow(window=3, causal=True) | (P.Global(indices=[2]) & P.Causal()),
        P.Causal(),
    ],
)
def test_cache_keep_never_drops_a_key_a_later_query_needs(pattern):
    n = 40
    m = pattern.dense_mask(n)
    for t in range(1, n):
        keep = pattern.cache_keep(torch.arange(t), t)
        needed = m[t:, :t].any(0)
        assert not (needed & ~keep).any(), (
            f"position {t}: dropped keys {torch.nonzero(needed & ~keep).flatten().tolist()}"
        )
    assert int(P.SlidingWindow(window=5, causal=True).cache_keep(torch.arange(100), 100).sum()) == 4


DENSITY_EXTRAS = {
    "per_head_union_global": P.PerHead([P.SlidingWindow(window=3), P.Causal()]) | P.Global(indices=[3]),
    "intersection_fixed": P.Fixed(block=8, summary=3, causal=False) & P.SlidingWindow(window=9),
    "union_of_unions": (P.Dilated(window=4, dilation=2) | P.Global(every=7)) | P.BlockLocal(block=5),
    "bigbird_odd": P.BigBird(block=5, window_blocks=1, random_blocks=2, global_blocks=3, seed=4),
}


@pytest.mark.parametrize("name", [k for k, p in PATTERNS.items() if not p.content_based] + [*DENSITY_EXTRAS])
def test_density_is_the_dense_masks_mean(name):
    p = PATTERNS.get(name) or DENSITY_EXTRAS[name]
    for n in (6, 37, 100):
        expected = p.bind(n).dense_mask(n).double().mean().item()
        assert p.density(n) == pytest.approx(expected, rel=1e-12, abs=0), n


@pytest.mark.parametrize("name", ["lsh", "topk_blocks", "topk_blocks_causal"])
def test_num_pairs_of_content_based_plans_counts_every_batch_element_and_head(name):
    B, H, n = 2, 3, 45
    plan = _bound(PATTERNS[name], n, B=B, H=H).plan(n, block=8)
    assert plan.num_pairs() == int((plan_dense_mask(plan, B, H, n, n) > 0).sum())


def test_density_counts_full_tiles_without_evaluating_them(monkeypatch):
    """The rule runs in the partial tiles only (the diagonal of Causal): O(n * block) pairs, not O(n^2)."""
    from hf_sparse.patterns import base

    evaluated = []
    original = base.tile_allowed

    def counting(*args):
        out = original(*args)
        evaluated.append(out.numel())
        return out

    monkeypatch.setattr(base, "tile_allowed", counting)
    n = 2048
    assert P.Causal().density(n) == (n + 1) / (2 * n)
    assert 0 < sum(evaluated) <= n * 64
