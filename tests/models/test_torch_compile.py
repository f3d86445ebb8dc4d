"""``torch.compile(model)`` trains SparseTransformer on the block kernels: they (and the LSH hashing) run eagerly
behind a graph break, everything around them is compiled, and the loss and gradients equal the eager model's."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import SparseTransformerForMaskedLM
from tests.models.tiny import tiny_config

CASES = {
    "window_padded": (P.SlidingWindow(window=16), False),
    "lsh": (P.LSH(bucket_size=16, num_hashes=2), False),  # hashed in the compiled CPU kernel
    "bigbird_global_dropout": (P.BigBird(block=16, window_blocks=3, random_blocks=1, global_blocks=1), True),
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
    pattern, dropout = CASES[case]
    torch.manual_seed(0)
    cfg = tiny_config(
        attention_pattern=pattern,
        attention_backend="blocked",
        attention_probs_dropout_prob=0.2 if dropout else 0.0,
    )
    model = SparseTransformerForMaskedLM(cfg).train()
    ids = torch.randint(1, cfg.vocab_size, (2, 96))
    mask = torch.ones_like(ids)
    mask[1, 70:] = 0
    eager_loss, eager_grads = _loss_and_grads(model, ids, mask, seed=3)
    compiled = torch.compile(model)
    for _ in range(2):  # the second call runs the cached graphs
        loss, grads = _loss_and_grads(compiled, ids, mask, seed=3)
        torch.testing.assert_close(loss, eager_loss, rtol=1e-5, atol=1e-6)
        for got, want in zip(grads, eager_grads):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
