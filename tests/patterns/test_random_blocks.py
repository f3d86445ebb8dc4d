"""Seeded random blocks (Random, BigBird) stay exactly what they were: saved models attend as before."""

import math

import pytest
import torch

from hf_sparse import patterns as P


def _reference_sample(gen, candidates, k):
    # the original sample_blocks: k of the candidates drawn by one randperm, all of them if fewer
    if k >= len(candidates):
        return sorted(candidates)
    pick = torch.randperm(len(candidates), generator=gen)[:k]
    return sorted(candidates[i] for i in pick.tolist())


def _table(rows, width):
    table = torch.full((1, 1, len(rows), width), -1, dtype=torch.long)
    for q, r in enumerate(rows):
        table[0, 0, q, : len(r)] = torch.tensor(r, dtype=torch.long)
    return table


def reference_random_table(p, n):
    """Random.bind's block table as the first release computed it, one query block at a time."""
    nb = max(math.ceil(n / p.block), 1)
    gen = torch.Generator().manual_seed(p.seed)
    rows = [_reference_sample(gen, list(range(nb)), p.num_blocks) for _ in range(nb)]
    return _table(rows, max(p.num_blocks, 1))


def reference_bigbird_table(p, n):
    """BigBird.bind's window + random block table as the first release computed it."""
    nb = max(math.ceil(n / p.block), 1)
    glob = p.global_block_ids(nb)
    w = p.window_blocks // 2
    gen = torch.Generator().manual_seed(p.seed)
    rows = []
    for q in range(nb):
        window = list(range(max(q - w, 0), min(q + w + 1, nb)))
        banned = set(window) | set(glob)
        rand = _reference_sample(gen, [k for k in range(nb) if k not in banned], p.random_blocks)
        rows.append(sorted(set(window) | set(rand)))
    return _table(rows, max(len(r) for r in rows))


LENGTHS = [0, 1, 5, 37, 200, 1000]


@pytest.mark.parametrize(
    "make",
    [
        lambda s: P.Random(block=4, num_blocks=3, seed=s),
        lambda s: P.Random(block=8, num_blocks=1, seed=s),
        lambda s: P.Random(block=4, num_blocks=0, seed=s),
        lambda s: P.Random(block=16, num_blocks=7, seed=s),
    ],
)
def test_random_binds_the_blocks_it_always_bound(make):
    for seed in (0, 12345, 2**64 - 1):
        p = make(seed)
        for n in LENGTHS:
            assert torch.equal(p.bind(n).table, reference_random_table(p, n)), (p, n)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"block": 4},
        {"block": 8, "window_blocks": 1, "random_blocks": 1, "global_blocks": 0},
        {"block": 4, "window_blocks": 5, "random_blocks": 2, "global_blocks": 3},
        {"block": 4, "window_blocks": 7, "random_blocks": 0, "global_blocks": 1},
        {"block": 2, "window_blocks": 3, "random_blocks": 6, "global_blocks": 4},
        {"block": 16, "window_blocks": 9, "random_blocks": 4, "global_blocks": 12},
    ],
)
def test_bigbird_binds_the_blocks_it_always_bound(kwargs):
    for seed in (7, -3, 2**63):
        p = P.BigBird(**kwargs, seed=seed)
        for n in LENGTHS:
            bound = p.bind(n)
            local = bound.parts[0] if isinstance(bound, P.Union) else bound
            assert torch.equal(local.table, reference_bigbird_table(p, n)), (p, n)
