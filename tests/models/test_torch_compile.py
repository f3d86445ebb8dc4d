"""``torch.compile(model)`` trains SparseTransformer on the block kernels: they (and the LSH hashing) run eagerly
behind a graph break, everything around them is compiled, and the loss and gradients equal the eager model's."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import SparseTransformerForMaskedLM
from tests.models.tiny import tiny_config

CASES = {  # pattern, attention dropout, backend
    "window_padded": (P.SlidingWindow(window=16), False, "blocked"),
    "lsh": (P.LSH(bucket_size=16, num_hashes=2), False, "blocked"),  # hashed in the compiled CPU kernel
    "bigbird_global_dropout": (
        P.BigBird(block=16, window_blocks=3, random_blocks=1, global_blocks=1),
        True,
        "blocked",
    ),
    # the dense and sdpa backends' dropout runs eagerly behind a graph break: the seed (dense) or the mask (sdpa)
    # drawn by inductor would differ from eager's, and the dense hash with a new seed per call failed to compile
    "window_dropout_dense": (P.SlidingWindow(window=16), True, "dense"),
    "window_dropout_sdpa": (P.SlidingWindow(window=16), True, "sdpa"),
}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _loss_and_grads(model, ids, mask, seed):
    torch.manual_seed(seed)  # attention dropout draws its seed from torch's generator, eagerly in both runs
    loss = model(ids, attention_mask=mask, labels=ids).loss
    params = [p for p in model.parameters() if p.requires_grad]
    return loss.detach(), torch.autograd.grad(loss, params)


@pytest.mark.parametrize("case", CASES)
def test_compiled_model_trains_like_the_eager_model(case):
    pattern, dropout, backend = CASES[case]
    torch.manual_seed(0)
    cfg = tiny_config(
        attention_pattern=pattern,
        attention_backend=backend,
        attention_probs_dropout_prob=0.2 if dropout else 0.0,
    )
    model = SparseTransformerForMaskedLM(cfg).train()
    ids = torch.randint(1, cfg.vocab_size, (2, 96))
    mask = torch.ones_like(ids)
    mask[1, 70:] = 0
    compiled = torch.compile(model)
    for seed in (3, 3, 4):  # the second call runs the cached graphs, the third draws another dropout seed
        eager_loss, eager_grads = _loss_and_grads(model, ids, mask, seed)
        loss, grads = _loss_and_grads(compiled, ids, mask, seed)
        torch.testing.assert_close(loss, eager_loss, rtol=1e-5, atol=1e-6)
        for got, want in zip(grads, eager_grads):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("backend", ["auto", "sdpa"])
def test_random_blocks_compile_once_for_every_length(backend):
    """BigBird's random blocks are drawn eagerly (behind a graph break) for each new length: once dynamo takes the
    length as dynamic, later lengths compile nothing (before, each compiled the draw anew until the recompile
    limit)."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    pattern = P.BigBird(block=8, window_blocks=3, random_blocks=1, global_blocks=1)
    cfg = tiny_config(attention_pattern=pattern, attention_backend=backend, num_hidden_layers=1)
    model = SparseTransformerForMaskedLM(cfg).eval()
    compiled = torch.compile(model, backend="eager")
    counters.clear()
    frames = []
    for n in (40, 48, 56, 64):
        ids = torch.randint(1, model.config.vocab_size, (2, n))
        with torch.no_grad():
            torch.testing.assert_close(compiled(ids).logits, model(ids).logits, rtol=0, atol=1e-6)
        frames.append(counters["frames"]["total"])
    assert frames[2:] == [frames[1]] * 2, frames
