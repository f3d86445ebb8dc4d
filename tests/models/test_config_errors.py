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


@pytest.mark.parametrize(
    "overrides, words",
    [
        (
            {"rope_theta": 0.0, "position_embedding_type": "rotary"},
            "rope_theta must be a finite number > 0, got 0.0",
        ),
        ({"rope_theta": -1.0}, "rope_theta must be a finite number > 0, got -1.0"),
        ({"rope_theta": float("nan")}, "rope_theta must be a finite number > 0, got nan"),
        ({"layer_norm_eps": -1.0}, "layer_norm_eps must be a finite number > 0, got -1.0"),
        ({"hidden_act": "nope"}, "hidden_act must be a key of .*ACT2FN.*got 'nope'"),
        ({"hidden_dropout_prob": "0.1"}, r"hidden_dropout_prob must be in \[0, 1\), got '0.1'"),
        ({"max_attention_weights_length": 0}, "max_attention_weights_length must be a positive int, got 0"),
        (
            {"max_attention_weights_length": "x"},
            "max_attention_weights_length must be a positive int, got 'x'",
        ),
        (
            {"type_vocab_size": -1},
            r"type_vocab_size must be an int >= 0 \(0: no token-type embeddings\), got -1",
        ),
        ({"global_first_token": "no"}, "global_first_token must be a bool, got 'no'"),
        ({"global_projections": "yes"}, "global_projections must be a bool, got 'yes'"),
        (
            {"position_ids_style": "roberta", "pad_token_id": None},
            "position_ids_style='roberta' .* needs an int pad_token_id >= 0, got pad_token_id=None",
        ),
        (
            {"attention_window": 16},
            "attention_window=16 is Longformer's option, .* give attention_pattern instead",
        ),
    ],
)
def test_bad_fields_are_refused_with_their_name(overrides, words):
    """Each used to build: NaN outputs (rope_theta, layer_norm_eps), a bare KeyError (hidden_act), a limit
    or a flag taken as something else, a TypeError at the first forward (roberta positions without a pad
    token), or Longformer's attention_window stored and ignored (the default window ran)."""
    with pytest.raises(ValueError, match=words):
        tiny_config(**overrides)


def test_fields_set_after_init_are_checked_when_a_model_is_built():
    from hf_sparse.models.sparse_transformer import SparseTransformerModel

    config = tiny_config()
    config.layer_norm_eps = 0.0
    with pytest.raises(ValueError, match="layer_norm_eps must be a finite number > 0, got 0.0"):
        SparseTransformerModel(config)


def test_numpy_numbers_are_taken_as_plain_ones():
    """np.float32(0.1) was refused as "must be in [0, 1), got np.float32(0.1)" (and before that failed to save)."""
    import numpy as np

    config = SparseTransformerConfig(
        hidden_dropout_prob=np.float32(0.1), max_attention_weights_length=np.int64(128),
        layer_norm_eps=np.float32(1e-5), global_first_token=np.bool_(True),
    )  # fmt: skip
    assert type(config.hidden_dropout_prob) is float and type(config.max_attention_weights_length) is int
    assert config.global_first_token is True
    assert json.loads(config.to_json_string())["max_attention_weights_length"] == 128
