"""The toy model: token embeddings, max-pooled over the sequence, and a linear head (2 classes).

It imports neither hf_sparse nor anything outside this folder but its sibling configuration, so the
remote-code bundle hf-sparse writes at ``save_pretrained`` loads where neither is installed. Saving
follows the export-hook protocol of hf-sparse's own task models (``ExportCodeMixin``): registration
sets ``export_code_hook``, ``save_pretrained`` calls it (registration refuses a model class whose
``save_pretrained`` does not: its folders would lack the bundle). Subclassing ``ExportCodeMixin`` instead would
make the bundle import hf_sparse.
"""

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput

from .configuration_toy import ToyPresenceConfig


class ToyPresenceModel(PreTrainedModel):
    config_class = ToyPresenceConfig
    base_model_prefix = "toy"
    export_code_hook = None

    def __init__(self, config: ToyPresenceConfig):
        super().__init__(config)
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.classifier = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def save_pretrained(self, save_directory, *args, **kwargs):
        out = super().save_pretrained(save_directory, *args, **kwargs)
        if type(self).export_code_hook is not None and kwargs.get("is_main_process", True):
            type(self).export_code_hook(self, save_directory)
        return out

    def forward(self, input_ids, attention_mask=None, labels=None, **kwargs):
        hidden = self.embeddings(input_ids)  # (B, L, H)
        if attention_mask is not None:
            hidden = hidden.masked_fill(~attention_mask.bool()[..., None], torch.finfo(hidden.dtype).min)
        logits = self.classifier(hidden.max(dim=1).values)  # (B, 2)
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits)


__all__ = ["ToyPresenceModel"]
