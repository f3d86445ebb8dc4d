"""hf_sparse.tasks.arguments: the shared backbone keys and what a longformer backbone rejects."""

import pytest

from hf_sparse.tasks.arguments import BackboneArguments
from hf_sparse.tasks.motif.task import MotifArguments


@pytest.mark.parametrize("arguments", [BackboneArguments, MotifArguments])  # defaults 'absolute' and 'rotary'
def test_longformer_accepts_the_absolute_positions_it_uses(arguments):
    args = arguments(backbone="longformer", position_embedding_type="absolute")
    assert args.position_embedding_type == "absolute"
    arguments(backbone="longformer")  # the task's default, not given: no error


def test_longformer_rejects_positions_it_would_ignore():
    with pytest.raises(
        ValueError, match=r"position_embedding_type='rotary' has no effect with backbone: longformer"
    ):
        BackboneArguments(backbone="longformer", position_embedding_type="rotary")
    with pytest.raises(ValueError, match=r"attention_backend='flex' has no effect with backbone: longformer"):
        MotifArguments(backbone="longformer", attention_backend="flex")
