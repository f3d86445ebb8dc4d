"""``save_pretrained`` of the hf-sparse pipelines: the model and its tokenizer, nothing else.

transformers' ``Pipeline.save_pretrained`` also copies the module of a pipeline class registered with
``PIPELINE_REGISTRY`` (``custom_object_save``), which cannot follow the package's relative imports
(``FileNotFoundError``). The model's own ``save_pretrained`` already writes everything the folder needs: the
flat remote code of the model and of its pipelines, ``auto_map`` and ``custom_pipelines``, so that
``pipeline(model=folder, trust_remote_code=True)`` loads it again.
"""

from __future__ import annotations

import os

__all__ = ["SaveModelMixin"]


class SaveModelMixin:
    """Put before ``Pipeline`` in a pipeline's bases: ``save_pretrained`` saves the model and tokenizer."""

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs):
        """Save the model (with its remote code and ``custom_pipelines``) and the tokenizer to
        ``save_directory`` (created if missing); ``kwargs`` go to both ``save_pretrained`` calls (e.g.
        ``push_to_hub``)."""
        if os.path.isfile(save_directory):
            raise ValueError(f"save_directory must be a folder, got the file {str(save_directory)!r}")
        os.makedirs(save_directory, exist_ok=True)
        self.model.save_pretrained(save_directory, **kwargs)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(save_directory, **kwargs)
