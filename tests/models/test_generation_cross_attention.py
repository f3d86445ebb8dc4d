"""SparseTransformer has no cross-attention: BERT's ``add_cross_attention`` and the encoder inputs of a cross-attending
decoder are refused, not ignored (its outputs did not depend on them)."""

import pytest
import torch
from transformers import BertConfig, EncoderDecoderConfig, EncoderDecoderModel

from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import (
    SparseTransformerForCausalLM,
    SparseTransformerForMaskedLM,
    SparseTransformerModel,
)
from tests.models.tiny import tiny_config, tiny_decoder_config


def test_config_refuses_add_cross_attention():
    with pytest.raises(
        ValueError, match="add_cross_attention=True: SparseTransformer layers have no cross-attention"
    ):
        tiny_decoder_config(P.Causal(), add_cross_attention=True)
    assert tiny_decoder_config(P.Causal(), add_cross_attention=False).add_cross_attention is False
    config = tiny_decoder_config(P.Causal())
    config.add_cross_attention = True  # as EncoderDecoderConfig.from_encoder_decoder_configs sets it
    with pytest.raises(ValueError, match="add_cross_attention=True"):
        SparseTransformerForCausalLM(config)


def test_encoder_decoder_model_refuses_a_sparse_transformer_decoder():
    encoder = BertConfig(
        vocab_size=97, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64
    )
    with pytest.raises(ValueError, match="add_cross_attention=True"):
        config = EncoderDecoderConfig.from_encoder_decoder_configs(encoder, tiny_decoder_config(P.Causal()))
        EncoderDecoderModel(config=config)


@pytest.mark.parametrize("given", ["encoder_hidden_states", "encoder_attention_mask"])
@pytest.mark.parametrize(
    "make",
    [
        lambda: SparseTransformerForCausalLM(tiny_decoder_config(P.Causal())),
        lambda: SparseTransformerModel(tiny_decoder_config(P.Causal())),
        lambda: SparseTransformerForMaskedLM(tiny_config()),
    ],
    ids=["causal_lm", "model", "masked_lm"],
)
def test_forward_refuses_encoder_inputs(make, given):
    torch.manual_seed(0)
    model = make().eval()
    ids = torch.randint(1, 97, (1, 5))
    inputs = {"encoder_hidden_states": torch.randn(1, 8, 32), "encoder_attention_mask": torch.ones(1, 8)}
    with torch.no_grad():
        model(ids, encoder_hidden_states=None, encoder_attention_mask=None)  # None: nothing to ignore
        with pytest.raises(ValueError, match=f"{given} given, but SparseTransformer has no cross-attention"):
            model(ids, **{given: inputs[given]})
