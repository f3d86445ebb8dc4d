"""MotifCollator: padding to the block multiple, label padding, global masks, sequence labels, errors."""

import pytest
import torch

from hf_sparse.models.longformer_tasks import every_k_global
from hf_sparse.tasks.motif.collator import MotifCollator


def test_pads_to_the_block_multiple_with_labels_and_masks():
    coll = MotifCollator(pad_token_id=0, pad_to_multiple_of=16, global_every=5)
    batch = coll(
        [
            {"input_ids": [2, 5, 6, 7, 8, 5, 6, 3], "labels": [-100, 0, 1, 2, 0, 0, 0, -100],
             "sequence_labels": [1.0, 0.0]},
            {"input_ids": [2, 5, 3], "labels": [-100, 0, -100], "sequence_labels": [0.0, 0.0]},
        ]
    )  # fmt: skip
    assert batch["input_ids"].shape == (2, 16)
    assert batch["input_ids"][1].tolist() == [2, 5, 3] + [0] * 13
    assert batch["attention_mask"].sum(1).tolist() == [8, 3]
    assert batch["labels"][0, 8:].eq(-100).all() and batch["labels"][0, :4].tolist() == [-100, 0, 1, 2]
    assert batch["global_attention_mask"][0].nonzero().flatten().tolist() == [0, 5]
    assert batch["global_attention_mask"][1].nonzero().flatten().tolist() == [0]  # 5 is padding there
    # the model's default mask is the same
    assert torch.equal(
        batch["global_attention_mask"], every_k_global(batch["input_ids"], batch["attention_mask"], 5)
    )
    assert batch["sequence_labels"].dtype == torch.float and batch["sequence_labels"].shape == (2, 2)


def test_class_ids_no_labels_and_no_block_multiple():
    coll = MotifCollator(pad_to_multiple_of=None, global_every=None)
    batch = coll(
        [{"input_ids": [2, 5, 3], "sequence_labels": 1}, {"input_ids": [2, 3], "sequence_labels": 0}]
    )
    assert batch["input_ids"].shape == (2, 3) and "labels" not in batch
    assert batch["sequence_labels"].tolist() == [1, 0] and batch["sequence_labels"].dtype == torch.long
    assert batch["global_attention_mask"].sum().item() == 2  # the first tokens only


@pytest.mark.parametrize(
    "features,match",
    [
        ([], "non-empty"),
        ([{"labels": [0]}], "input_ids"),
        ([{"input_ids": [2, 3]}, {"input_ids": [2, 3], "labels": [-100, -100]}], "keys"),
        ([{"input_ids": [2, 5, 3], "labels": [0, 0]}], "2 labels for 3 input_ids"),
        ([{"input_ids": []}], "no tokens"),
        ([{"input_ids": [2, 3], "sequence_labels": [1.0]}, {"input_ids": [2, 3], "sequence_labels": [1.0, 0.0]}],
         "sequence_labels"),
    ],
)  # fmt: skip
def test_bad_batches_are_errors(features, match):
    with pytest.raises(ValueError, match=match):
        MotifCollator()(features)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(pad_token_id=-1), "pad_token_id"),
        (dict(pad_to_multiple_of=0), "pad_to_multiple_of"),
        (dict(global_every=-2), "global_every"),
    ],
)
def test_bad_arguments_are_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MotifCollator(**kwargs)
