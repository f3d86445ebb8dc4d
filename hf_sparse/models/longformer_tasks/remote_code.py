"""What every task model in this package shares: ``save_pretrained`` that also writes the remote code."""

from __future__ import annotations


class ExportCodeMixin:
    """Put before ``PreTrainedModel`` in the bases of a task model's pre-trained class.

    ``hf_sparse.models.register_auto`` sets ``export_code_hook`` on the registered classes; after the normal
    ``save_pretrained`` it writes the self-contained, flat copy of the modelling (and pipeline) code, the
    ``auto_map`` and ``custom_pipelines`` into the folder, so ``trust_remote_code=True`` loads it where
    hf-sparse is not installed. Unregistered classes (``export_code_hook = None``) save as usual.
    """

    export_code_hook = None

    def save_pretrained(self, save_directory, *args, **kwargs):
        out = super().save_pretrained(save_directory, *args, **kwargs)
        if type(self).export_code_hook is not None and kwargs.get("is_main_process", True):
            type(self).export_code_hook(self, save_directory)
        return out


__all__ = ["ExportCodeMixin"]
