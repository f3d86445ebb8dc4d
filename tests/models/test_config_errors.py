"""A config.json with ``"attention_pattern": null`` fails to load with a clear error (it used to load as
SlidingWindow(512) silently); leaving the key out still gives that default."""

import json

import pytest
from transformers import AutoConfig

import hf_sparse  # noqa: F401  (registers the config)
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
