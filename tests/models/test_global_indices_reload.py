"""Models whose pattern holds Global(indices=...) reload: from_pretrained re-creates the pattern under
``torch.device("meta")``, and the global-token table must still hold data."""

import pytest
import torch
from transformers import AutoModelForMaskedLM

import hf_sparse  # noqa: F401  (registers the Auto classes)
from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import SparseTransformerForMaskedLM
from tests.models.tiny import tiny_config

PATTERNS = {
    "union": P.SlidingWindow(window=8) | P.Global(indices=[0, 5]),
    "per_head": P.PerHead(
        [P.SlidingWindow(window=8)] * 2 + [P.SlidingWindow(window=4) | P.Global(indices=[3])] * 2
    ),
}


@pytest.mark.parametrize("name", list(PATTERNS))
def test_global_indices_survive_from_pretrained(name, tmp_path):
    model = SparseTransformerForMaskedLM(
        tiny_config(attention_pattern=PATTERNS[name], num_hidden_layers=1)
    ).eval()
    ids = torch.randint(2, 97, (2, 21), generator=torch.Generator().manual_seed(0))
    model.save_pretrained(tmp_path)
    again = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, model(ids).logits, rtol=0, atol=1e-6)


def test_global_table_is_built_on_cpu_under_meta_device():
    with torch.device("meta"):
        g = P.Global(indices=[0, 5])
    assert g._table.device.type == "cpu"
    assert g.dense_mask(8)[5].all() and g.dense_mask(8)[:, 0].all() and not g.dense_mask(8)[1, 2]
