"""The attention pattern the task models' cards show (``card_pattern``, shared by the motif, dialogue and
summarization tasks): what the encoder computes, one spec per layer where the layers differ."""

import pytest

from hf_sparse import patterns
from hf_sparse.models.longformer_tasks.backbone import card_pattern

WINDOW = {"type": "sliding_window", "window": 4}
EVERY = {"type": "global", "every": 10}
MARKED = {"type": "global"}


@pytest.mark.parametrize(
    "backbone, global_spec, expected",
    [
        ({"model_type": "longformer", "attention_window": [8, 8]}, None, {"type": "longformer", "window": 8}),
        ({"model_type": "longformer", "attention_window": 8}, None, {"type": "longformer", "window": 8}),
        (  # the layers' windows differ: one spec each, not the largest
            {"model_type": "longformer", "attention_window": (4, 16)},
            None,
            [{"type": "longformer", "window": 4}, {"type": "longformer", "window": 16}],
        ),
        (  # tokens the model makes global are united with each layer's spec
            {"model_type": "longformer", "attention_window": [4, 16]},
            EVERY,
            [{"type": "union", "parts": [{"type": "longformer", "window": w}, EVERY]} for w in (4, 16)],
        ),
        # the tokens of global_attention_mask: a Longformer spec holds them already
        ({"model_type": "longformer", "attention_window": 8}, MARKED, {"type": "longformer", "window": 8}),
        ({"model_type": "sparse_transformer", "attention_pattern": WINDOW}, None, WINDOW),
        (
            {
                "model_type": "sparse_transformer",
                "attention_pattern": [WINDOW, {"type": "longformer", "window": 8}],
            },
            MARKED,
            [{"type": "union", "parts": [WINDOW, MARKED]}, {"type": "longformer", "window": 8}],
        ),
        # LED's encoder: hf-sparse kernels where it has a pattern, else its own (Longformer) attention
        (
            {"attention_pattern": WINDOW, "attention_window": [8]},
            MARKED,
            {"type": "union", "parts": [WINDOW, MARKED]},
        ),
        (
            {"attention_pattern": None, "attention_window": [8, 8]},
            MARKED,
            {"type": "longformer", "window": 8},
        ),
        ({"model_type": "sparse_transformer"}, EVERY, None),  # nothing recorded
    ],
)
def test_card_pattern(backbone, global_spec, expected):
    pattern = card_pattern(backbone, global_spec)
    assert pattern == expected
    for spec in pattern if isinstance(pattern, list) else [pattern] if pattern else []:
        patterns.from_dict(spec)  # a spec the card can rebuild (its density, its Attention row)
