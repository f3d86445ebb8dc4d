"""Attention patterns: composable with ``|`` and ``&``, serialisable, executable by every kernel.

>>> from hf_sparse import patterns
>>> p = patterns.SlidingWindow(window=512) | patterns.Global(indices=[0])
>>> patterns.get("bigbird", block=64, seed=0)
BigBird(block=64, window_blocks=3, random_blocks=3, global_blocks=2, seed=0)
"""

from .base import (
    BlockLayout,
    Component,
    Pattern,
    Plan,
    from_dict,
    get,
    register_pattern,
    registered,
)
from .bigbird import BigBird
from .block_table import BlockSet, Random
from .child import Fixed, Strided
from .compose import Intersection, Union
from .content import LSH, TopKBlocks
from .global_tokens import Global
from .local import BlockLocal, Causal, Dilated, SlidingWindow
from .longformer import Longformer
from .per_head import PerHead

__all__ = [
    "BigBird",
    "BlockLayout",
    "BlockLocal",
    "BlockSet",
    "Causal",
    "Component",
    "Dilated",
    "Fixed",
    "Global",
    "Intersection",
    "LSH",
    "Longformer",
    "Pattern",
    "PerHead",
    "Plan",
    "Random",
    "SlidingWindow",
    "Strided",
    "TopKBlocks",
    "Union",
    "from_dict",
    "get",
    "register_pattern",
    "registered",
]
