"""Sequence-classification and multiple-choice heads of a decoder (``is_decoder=True``, e.g. loaded from a causal-LM
checkpoint) read each row's last token, as transformers' GPT-2 and Llama heads do: the first token of a causal
model has seen nothing after it, and its logits ignored every later token."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import (
    SparseTransformerForMultipleChoice,
    SparseTransformerForSequenceClassification,
)
from tests.models.tiny import tiny_decoder_config

HEADS = [SparseTransformerForSequenceClassification, SparseTransformerForMultipleChoice]


def _model(head, **kw):
    torch.manual_seed(0)
    cfg = tiny_decoder_config(P.SlidingWindow(window=6, causal=True), initializer_range=0.3, **kw)
    return head(cfg).eval()


def _run(model, ids, **kw):
    """Logits for (batch, seq) rows; the multiple-choice head takes them as the choices of one example."""
    mc = isinstance(model, SparseTransformerForMultipleChoice)
    kw = {k: v[None] if mc else v for k, v in kw.items()}
    with torch.no_grad():
        logits = model(ids[None] if mc else ids, **kw).logits
    return logits[0][:, None] if mc else logits  # (rows, labels)


@pytest.mark.parametrize("head", HEADS)
def test_a_decoder_head_reads_the_last_token(head):
    model = _model(head)
    ids = torch.randint(5, 97, (2, 12))
    changed = ids.clone()
    changed[1, 11] = 7  # the last token of row 1 only
    before, after = _run(model, ids), _run(model, changed)
    torch.testing.assert_close(after[0], before[0], rtol=0, atol=1e-6)
    assert (after[1] - before[1]).abs().max() > 1e-3


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("by", ["attention_mask", "pad_token_id"])
def test_a_right_padded_row_reads_its_last_token_not_the_padding(head, by):
    model = _model(head)
    ids = torch.randint(5, 97, (2, 12))
    alone = _run(model, ids[1:, :8])
    padded = ids.clone()
    padded[1, 8:] = model.config.pad_token_id
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    got = _run(model, padded, **({"attention_mask": mask} if by == "attention_mask" else {}))
    torch.testing.assert_close(got[1], alone[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("head", HEADS)
def test_several_rows_without_attention_mask_or_pad_token_are_refused(head):
    model = _model(head, pad_token_id=None)
    with pytest.raises(
        ValueError, match="without attention_mask or config.pad_token_id .*: pass attention_mask"
    ):
        _run(model, torch.randint(5, 97, (2, 12)))
    assert (
        _run(model, torch.randint(5, 97, (2, 12)), attention_mask=torch.ones(2, 12, dtype=torch.long)).shape[
            0
        ]
        == 2
    )
