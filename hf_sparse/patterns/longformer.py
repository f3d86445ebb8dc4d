"""Longformer (Beltagy et al. 2020): a sliding window united with call-time global tokens."""

from __future__ import annotations

from .base import check_positive_int, register_pattern
from .compose import Union
from .global_tokens import Global
from .local import SlidingWindow


@register_pattern("longformer")
class Longformer(Union):
    """Longformer: ``SlidingWindow(window) | Global()``: a bidirectional window, plus the global
    tokens marked by ``global_attention_mask`` at call time (query i attends key j iff
    ``|i - j| <= window // 2`` or i or j is global)."""

    def __init__(self, window: int = 512):
        self.window = check_positive_int("window", window)
        super().__init__(SlidingWindow(window), Global())

    def _params(self):
        return {"window": self.window}

    @classmethod
    def _from_params(cls, window=512):
        return cls(window)


__all__ = ["Longformer"]
