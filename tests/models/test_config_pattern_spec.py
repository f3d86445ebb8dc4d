"""A spec dict that holds Pattern objects is stored as plain JSON: the config saves, prints and reloads (it
used to validate and run, then fail save_pretrained with "not JSON serializable", leaving an empty config.json)."""

import json
import re

import pytest
import torch
from transformers import AutoConfig

import hf_sparse  # noqa: F401  (registers the config)
from hf_sparse import patterns as P
from tests.models.tiny import tiny_config


def test_spec_dict_holding_patterns_saves_and_reloads(tmp_path):
    spec = {"type": "union", "parts": [P.SlidingWindow(window=8), P.Global(indices=[0])]}
    config = tiny_config(attention_pattern=spec)
    want = (P.SlidingWindow(window=8) | P.Global(indices=[0])).to_dict()
    assert config.attention_pattern == want
    assert "sliding_window" in repr(config)
    config.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["attention_pattern"] == want
    assert AutoConfig.from_pretrained(tmp_path).layer_pattern(0) == P.from_dict(want)


def test_per_layer_spec_dicts_are_normalised_too():
    config = tiny_config(attention_pattern=[{"type": "per_head", "patterns": [P.Causal()] * 4}, "causal"])
    assert config.attention_pattern == [P.PerHead([P.Causal()] * 4).to_dict(), {"type": "causal"}]
    json.dumps(config.to_dict())


def test_a_bad_spec_dict_is_still_reported_with_its_field():
    with pytest.raises(ValueError, match=r"attention_pattern\[1\]: unknown pattern 'nope'"):
        tiny_config(attention_pattern=[{"type": "causal"}, {"type": "nope"}])
    with pytest.raises(ValueError, match="attention_pattern: .*causal must be a bool"):
        tiny_config(attention_pattern={"type": "sliding_window", "window": 8, "causal": "false"})


@pytest.mark.parametrize("where", ["attention_pattern", "attention_pattern[1]", "spec dict"])
def test_a_pattern_no_spec_describes_is_refused_when_the_config_is_made(where):
    """A Global.from_mask in the config was saved as Global() (call-time tokens): another pattern, silently."""
    mask = torch.zeros(1, 16)
    mask[0, 3] = 1
    pattern = P.SlidingWindow(window=3) | P.Global.from_mask(mask)
    given = {
        "attention_pattern": pattern,
        "attention_pattern[1]": ["causal", pattern],
        "spec dict": {"type": "union", "parts": [P.SlidingWindow(window=3), P.Global.from_mask(mask)]},
    }[where]
    field = where if where != "spec dict" else "attention_pattern"
    with pytest.raises(
        ValueError, match=rf"{re.escape(field)}: Union\(.*\) cannot be stored in a config: .*from_mask"
    ):
        tiny_config(attention_pattern=given, num_hidden_layers=2)
