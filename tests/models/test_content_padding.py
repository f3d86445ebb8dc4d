"""SparseTransformer with a content-based pattern: a padded row gives what the row gives alone."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import SparseTransformerModel
from tests.models.tiny import tiny_config

PATTERNS = {
    "topk": P.TopKBlocks(block=4, k=2),
    "window|topk": P.SlidingWindow(window=3) | P.TopKBlocks(block=4, k=2),
    "per_head_topk": P.PerHead([P.TopKBlocks(block=4, k=2), P.SlidingWindow(window=3)] * 2),
    "lsh": P.LSH(bucket_size=4, num_hashes=1),
}


@pytest.mark.parametrize("output_attentions", [False, True])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_padded_row_gives_what_it_gives_alone(name, output_attentions):
    torch.manual_seed(0)
    model = SparseTransformerModel(tiny_config(attention_pattern=PATTERNS[name], num_hidden_layers=1)).eval()
    torch.manual_seed(1)
    real = torch.randint(2, 97, (1, 12))
    ids = torch.cat(
        [torch.cat([real, torch.zeros(1, 20, dtype=torch.long)], 1), torch.randint(2, 97, (1, 32))]
    )
    mask = torch.ones_like(ids)
    mask[0, 12:] = 0  # row 0: 12 tokens and 20 padding; row 1: 32 tokens
    with torch.no_grad():
        padded = model(ids, attention_mask=mask, output_attentions=output_attentions)
        alone = model(real, output_attentions=output_attentions)
    torch.testing.assert_close(
        padded.last_hidden_state[0, :12], alone.last_hidden_state[0], atol=1e-5, rtol=0
    )
    if output_attentions:
        w = padded.attentions[0][0, :, :12]  # (H, 12, 32)
        torch.testing.assert_close(w[..., :12], alone.attentions[0][0], atol=1e-5, rtol=0)
        assert not w[..., 12:].any()
