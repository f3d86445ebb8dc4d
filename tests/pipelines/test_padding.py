"""The block multiple that pipelines and training collators pad to never takes a sequence the model holds
past its position table (a SparseTransformer with absolute positions raised 'position id ... out of range')."""

import pytest
import torch

from hf_sparse.models.longformer_tasks.backbone import backbone_config, block_multiple
from hf_sparse.tasks.motif.collator import MotifCollator
from tests.models.motif_tiny import motif_model

SPARSE = {"model_type": "sparse_transformer", "attention_pattern": {"type": "sliding_window", "window": 16}}


@pytest.mark.parametrize(
    "backbone,multiple",
    [
        ({"model_type": "longformer", "attention_window": 16, "max_position_embeddings": 131}, 16),
        ({**SPARSE, "position_embedding_type": "rotary", "max_position_embeddings": 100}, 64),
        ({**SPARSE, "max_position_embeddings": 512}, 64),
        ({**SPARSE, "max_position_embeddings": 200}, 8),
        ({**SPARSE, "max_position_embeddings": 100}, 4),
        ({**SPARSE, "max_position_embeddings": 99}, 1),
    ],
)
def test_block_multiple_divides_an_absolute_position_table(backbone, multiple):
    assert block_multiple(backbone_config(backbone)) == multiple


@pytest.mark.parametrize("positions", [100, 130])
def test_training_collator_batch_of_a_full_length_sequence_runs(positions):
    """The motif task's collator pads to ``block_multiple``: a batch holding a sequence of ``positions``
    tokens (as many as the model holds) still runs."""
    model = motif_model(max_tokens=positions, backbone_overrides={"position_embedding_type": "absolute"})
    multiple = block_multiple(backbone_config(model.config.backbone))
    collate = MotifCollator(pad_token_id=0, pad_to_multiple_of=multiple)
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(5, 9, (n,), generator=g).tolist() for n in (positions, 70)]
    batch = collate([{"input_ids": r, "labels": [0] * len(r)} for r in rows])
    assert batch["input_ids"].shape == (2, positions)
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert out.logits.shape[:2] == (2, positions)
