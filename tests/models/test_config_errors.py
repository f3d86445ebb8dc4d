"""A config.json with ``"attention_pattern": null`` fails to load with a clear error (it used to load as
SlidingWindow(512) silently); leaving the key out still gives that default."""

import json

import pytest
from transformers import AutoConfig

import hf_sparse  # noqa: F401  (registers the config)
from hf_sparse.models.sparse_transformer import SparseTransformerConfig
from tests.models.tiny import tiny_config


def test_null_attention_pattern_in_config_json_is_an_error(tmp_path):
    tiny_config().save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    config = json.loads(path.read_text())
    config["attention_pattern"] = None
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="attention_pattern is None"):
        AutoConfig.from_pretrained(tmp_path)


def test_missing_attention_pattern_is_the_default(tmp_path):
    tiny_config().save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    config = json.loads(path.read_text())
    del config["attention_pattern"]
    path.write_text(json.dumps(config))
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert loaded.attention_pattern == {"type": "sliding_window", "window": 512, "causal": False}


@pytest.mark.parametrize(
    "max_positions, decoder, window",
    [
        (4096, False, 512),
        (256, False, 512),
        (128, False, 257),
        (4096, True, 512),
        (510, True, 511),
        (64, True, 65),
    ],
)
def test_default_pattern_fits_a_short_position_table(max_positions, decoder, window, tmp_path):
    """The default SlidingWindow(512) shrinks to the largest window a shorter position table allows (it used to fail
    the config's own reach check), and the config saves and reloads as it is."""
    config = SparseTransformerConfig(max_position_embeddings=max_positions, is_decoder=decoder)
    assert config.attention_pattern == {"type": "sliding_window", "window": window, "causal": decoder}
    config.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).attention_pattern == config.attention_pattern


@pytest.mark.parametrize("decoder", [False, True])
def test_a_given_window_past_the_position_table_is_still_an_error(decoder):
    pattern = {"type": "sliding_window", "window": 512, "causal": decoder}
    with pytest.raises(ValueError, match="window=512 reaches .* beyond max_position_embeddings=128"):
        SparseTransformerConfig(max_position_embeddings=128, is_decoder=decoder, attention_pattern=pattern)


def test_a_config_json_without_lm_head_act_loads_with_gelu(tmp_path):
    """Checkpoints saved before lm_head_act existed keep RoBERTa's gelu head."""
    tiny_config(lm_head_act="relu").save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    config = json.loads(path.read_text())
    assert config["lm_head_act"] == "relu"
    del config["lm_head_act"]
    path.write_text(json.dumps(config))
    assert AutoConfig.from_pretrained(tmp_path).lm_head_act == "gelu"


def test_unknown_lm_head_act_is_an_error():
    with pytest.raises(ValueError, match="lm_head_act must be a key of .*ACT2FN.*got 'relux'"):
        tiny_config(lm_head_act="relux")
