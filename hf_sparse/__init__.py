"""hf-sparse: exact, fast, linear-memory sparse attention for Hugging Face Transformers."""

from . import patterns
from .attention import sparse_attention

__version__ = "0.1.0"

__all__ = ["__version__", "patterns", "sparse_attention"]
