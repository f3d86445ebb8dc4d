"""DNA motif detection: per-position motif tags and a sequence-level head over a long encoder."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers.utils import ModelOutput, logging

from ...models.longformer_tasks.backbone import (
    add_backbone_losses,
    backbone_config,
    build_backbone,
    check_positions,
    embeds_position_ids,
    every_k_global,
)
from ...models.longformer_tasks.remote_code import LongformerTaskPreTrainedModel
from ...utils.labels import IGNORE_INDEX
from .configuration_motif import _DERIVED, LongformerMotifConfig

logger = logging.get_logger(__name__)


@dataclass
class MotifDetectionOutput(ModelOutput):
    """Outputs of [`LongformerForMotifDetection`].

    Args:
        loss: per-position cross-entropy (positions labelled -100 skipped) plus
            ``sequence_loss_weight`` times the sequence loss (entries labelled -100 skipped), for the heads that
            got labels; a head whose labels are all -100 adds 0. With a SparseTransformer backbone, plus its MoE
            router losses and (training only) its adaptive-span penalty.
        logits: `(batch, seq, tags)` per-position BIO scores (`config.id2label`); None without motifs.
        sequence_logits: `(batch, outputs)` motif-presence logits (sigmoid) or class logits (softmax).
        hidden_states, attentions: the encoder's, when asked for.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    sequence_logits: torch.FloatTensor | None = None
    hidden_states: tuple | None = None
    attentions: tuple | None = None


def _masked_mean(per: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean of the losses ``per`` where ``keep``; where nothing is kept, a zero that keeps the head in the graph
    (not the NaN of an empty mean, which would also wipe out the other head's loss)."""
    keep = keep.to(per.dtype)
    return (per * keep).sum() / keep.sum().clamp(min=1)


class LongformerMotifPreTrainedModel(LongformerTaskPreTrainedModel):
    config_class = LongformerMotifConfig
    config: LongformerMotifConfig


class LongformerForMotifDetection(LongformerMotifPreTrainedModel):
    """Motif tagging (BIO per motif, per position) and motif presence / sequence class.

    Global attention: the caller's ``global_attention_mask``, or else the first token and every
    ``config.global_every``-th position (real tokens only). With ``config.conv_kernel_size``,
    ``config.conv_layers`` residual convolutions run over the token embeddings (padding zeroed) before
    the encoder.

    With transformers' ``Trainer``, name the label keys the batches carry, ``TrainingArguments(label_names=
    ["labels", "sequence_labels"])`` (tags and sequence head), ``["labels"]`` (tags only) or ``["sequence_labels"]``
    (sequence head only): the Trainer's default is every ``*label*`` argument of ``forward``, and a batch without
    one of them is evaluated without ``eval_loss`` or ``label_ids``.
    """

    def __init__(self, config: LongformerMotifConfig):
        # the motifs the config was built with, before a changed motif_names derives its tags again (validate_task):
        # the order of a checkpoint's head rows, which from_pretrained matches to motif_names
        tags = getattr(config, _DERIVED, None) or {}
        built = [t[2:] for _, t in sorted(tags.items(), key=lambda kv: int(kv[0])) if t.startswith("B-")]
        super().__init__(config)
        self._built_motif_names = built
        self.backbone = build_backbone(backbone_config(config.backbone), config._attn_implementation)
        hidden = config.hidden_size
        k = config.conv_kernel_size
        self.embedding_conv = (
            nn.ModuleList(nn.Conv1d(hidden, hidden, k, padding=k // 2) for _ in range(config.conv_layers))
            if k
            else None
        )
        self.kmer_embeddings = None
        if config.kmer_embedding:
            rows = 4**config.kmer_embedding  # one per k-mer, and a zero row for incomplete ones
            self.kmer_embeddings = nn.Embedding(rows + 1, hidden, padding_idx=rows)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.token_classifier = nn.Linear(hidden, config.num_labels) if config.motif_names else None
        self.sequence_head = self.spectrum = None
        if config.sequence_task is not None:
            pooled = 2 * hidden if config.pooling == "cls+mean" else hidden
            if config.kmer_spectrum:
                features = sum(4**j for j in range(1, config.kmer_spectrum + 1))
                self.spectrum = nn.Sequential(
                    nn.Dropout(config.classifier_dropout), nn.Linear(features, hidden), nn.GELU()
                )
                pooled += hidden
            self.sequence_head = nn.Sequential(
                nn.Linear(pooled, hidden),
                nn.Tanh(),
                nn.Dropout(config.classifier_dropout),
                nn.Linear(hidden, config.num_sequence_outputs),
            )
        self.post_init()

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """[`LongformerTaskPreTrainedModel.from_pretrained`], with the motif heads (tags, and presence) following
        ``config.motif_names`` where ``from_pretrained(path, motif_names=[...])`` (or a ``config`` whose
        ``motif_names`` were set) names as many motifs as the checkpoint has. The checkpoint's motifs in another
        order: the heads' rows are reordered to match (every motif's outputs are unchanged). Other motifs:
        ``ValueError`` (the trained rows would be read as other motifs), unless ``ignore_mismatched_sizes=True``,
        which starts both motif heads afresh, as transformers does for a different number of motifs."""
        out = super().from_pretrained(*args, **kwargs)
        model = out[0] if kwargs.get("output_loading_info") else out
        model._match_motif_heads(kwargs.get("ignore_mismatched_sizes", False))
        return out

    def _match_motif_heads(self, fresh_heads: bool) -> None:
        """Reorder (or, with ``fresh_heads``, initialise again) the motif heads loaded in the order of the motifs
        the config was built with (see ``from_pretrained``)."""
        saved, names = self.__dict__.pop("_built_motif_names", None), self.config.motif_names
        if saved is None or len(saved) != len(names) or saved == names:
            return  # the checkpoint's motifs, or another number of them (transformers' shape check)
        heads = [self.token_classifier]
        if self.config.sequence_task == "motif_presence":
            heads.append(self.sequence_head[-1])
        if set(saved) == set(names):
            order = [saved.index(m) for m in names]  # motif i is the checkpoint's motif order[i]
            tags = [0] + [1 + 2 * j + k for j in order for k in (0, 1)]  # O, then B- and I- of each motif
            with torch.no_grad():
                for head, index in zip(heads, (tags, order)):  # the presence head: one row per motif
                    head.weight.copy_(head.weight[index])
                    head.bias.copy_(head.bias[index])
            return
        if not fresh_heads:
            raise ValueError(
                f"motif_names={names} are not the motifs {saved} the checkpoint's tag and presence heads were "
                "trained for, and would be read as them; pass ignore_mismatched_sizes=True to start those heads "
                "afresh, or the checkpoint's motif names (in any order)"
            )
        for head in heads:
            self._init_weights(head)
        logger.warning(
            "the motif heads of %s were initialised afresh: the checkpoint's are for motifs %s, not motif_names=%s",
            type(self).__name__,
            saved,
            names,
        )

    def get_input_embeddings(self):
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.backbone.set_input_embeddings(value)

    def default_global_attention_mask(self, input_ids, attention_mask=None):
        """The mask used when the caller passes none (1 = global)."""
        return every_k_global(
            input_ids, attention_mask, self.config.global_every, self.config.global_first_token
        )

    def kmer_ids(
        self, input_ids: torch.Tensor, k: int | None = None, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, N) id of the k-mer centred on each position (``4**k`` where it is incomplete: it runs into a special
        token, ``N``, the edge or a position where ``attention_mask`` is 0, whatever id the padding holds); k defaults
        to ``config.kmer_embedding``."""
        k = k or self.config.kmer_embedding
        base = torch.full_like(input_ids, -1)  # (B, N): 0..3 for A C G T, -1 for specials, N, padding
        for i, token_id in enumerate(self.config.base_token_ids):
            base = base.masked_fill(input_ids == token_id, i)
        if attention_mask is not None:
            base = base.masked_fill(attention_mask == 0, -1)  # padding is no base
        left = (k - 1) // 2
        windows = F.pad(base, (left, k - 1 - left), value=-1).unfold(1, k, 1)  # (B, N, k)
        place = 4 ** torch.arange(k - 1, -1, -1, device=input_ids.device)
        ids = (windows.clamp(min=0) * place).sum(-1)
        return torch.where((windows >= 0).all(-1), ids, torch.full_like(ids, 4**k))

    def kmer_spectrum(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, F) ``log(1 + count) - log(1 + expected)`` of every k-mer of length 1..``config.kmer_spectrum``
        (lengths in order, k-mers in id order; expected = complete k-mers of that length / 4**k), padding
        (``attention_mask`` 0) not counted."""
        parts = []
        for k in range(1, self.config.kmer_spectrum + 1):
            ids = self.kmer_ids(input_ids, k, attention_mask)
            counts = torch.zeros(ids.shape[0], 4**k + 1, device=ids.device).scatter_add_(
                1, ids, torch.ones(ids.shape, device=ids.device)
            )[:, : 4**k]  # the last column counted incomplete k-mers
            expected = counts.sum(1, keepdim=True) / 4**k
            parts.append(torch.log1p(counts) - torch.log1p(expected))
        return torch.cat(parts, 1)

    def backbone_inputs(self, input_ids=None, inputs_embeds=None, attention_mask=None) -> dict:
        """``input_ids`` or ``inputs_embeds`` for the encoder: embeddings of our own when k-mer embeddings or
        convolutions are configured. With ``inputs_embeds``, a Longformer backbone also gets ``position_ids``
        numbered as its ``input_ids`` path numbers them (:func:`embeds_position_ids`: padding takes the padding
        position, so a full-length input still fits the table)."""
        ids = input_ids
        if self.embedding_conv is not None or self.kmer_embeddings is not None:
            ids, inputs_embeds = None, self._embeddings(input_ids, inputs_embeds, attention_mask)
        position_ids = embeds_position_ids(self.backbone.config, input_ids, attention_mask, inputs_embeds)
        return {"input_ids": ids, "inputs_embeds": inputs_embeds, "position_ids": position_ids}

    def _embeddings(self, input_ids, inputs_embeds, attention_mask):
        """Token embeddings, plus k-mer embeddings, through the residual convolutions (when configured)."""
        if inputs_embeds is None:
            inputs_embeds = self.get_input_embeddings()(input_ids)  # (B, N, H)
        x = inputs_embeds
        if self.kmer_embeddings is not None:
            x = x + self.kmer_embeddings(self.kmer_ids(input_ids, attention_mask=attention_mask))
        keep = None if attention_mask is None else attention_mask.unsqueeze(-1).to(x.dtype)  # (B, N, 1)
        for conv in self.embedding_conv or ():
            if keep is not None:
                x = x * keep  # padding does not leak into real bases
            x = x + F.gelu(conv(x.transpose(1, 2)).transpose(1, 2))  # (B, N, H)
        return x

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        global_attention_mask=None,
        labels=None,
        sequence_labels=None,
        inputs_embeds=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        **kwargs,
    ):
        r"""
        labels (`(batch, seq)`): BIO tag ids (`config.label2id`); -100 where no loss is taken (special
            tokens, padding).
        sequence_labels: `(batch, motifs)` multi-hot for `"motif_presence"`, `(batch,)` class ids for
            `"classification"`; -100 where no loss is taken.

        Labels for a head the model lacks raise `ValueError`: `labels` without motif_names, `sequence_labels`
        with `sequence_task=None`.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids or inputs_embeds")
        if labels is not None and self.token_classifier is None:
            raise ValueError(
                f"labels (per-position tags) given, but this model has no tag head (motif_names="
                f"{self.config.motif_names}); its sequence_task={self.config.sequence_task!r} head takes "
                "sequence_labels"
            )
        if sequence_labels is not None and self.sequence_head is None:
            raise ValueError(
                "sequence_labels given, but this model has no sequence head (sequence_task=None); its tag head "
                f"(motif_names={self.config.motif_names}) takes labels"
            )
        if input_ids is None and (self.config.kmer_embedding or self.spectrum is not None):
            raise ValueError(
                f"kmer_embedding={self.config.kmer_embedding} / kmer_spectrum={self.config.kmer_spectrum} read the "
                "bases: pass input_ids, not inputs_embeds"
            )
        ref = input_ids if input_ids is not None else inputs_embeds[..., 0]
        if global_attention_mask is None:
            global_attention_mask = self.default_global_attention_mask(ref, attention_mask)
        output_attentions, output_hidden_states = self.output_flags(output_attentions, output_hidden_states)
        encoder_inputs = self.backbone_inputs(input_ids, inputs_embeds, attention_mask)
        check_positions(self.backbone.config, **encoder_inputs)
        out = self.backbone(
            **encoder_inputs,
            attention_mask=attention_mask,
            global_attention_mask=global_attention_mask,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        hidden = out.last_hidden_state  # (B, N, H)
        logits = self.token_classifier(self.dropout(hidden)) if self.token_classifier is not None else None
        seq_logits = None
        if self.sequence_head is not None:
            pooled = hidden[:, 0]  # (B, H): [CLS]
            if self.config.pooling != "cls":
                m = (
                    torch.ones_like(ref, dtype=hidden.dtype)
                    if attention_mask is None
                    else attention_mask.to(hidden.dtype)
                )  # (B, N)
                mean = (hidden * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True).clamp(min=1)  # (B, H)
                pooled = mean if self.config.pooling == "mean" else torch.cat([pooled, mean], -1)
            if self.spectrum is not None:
                features = self.kmer_spectrum(input_ids, attention_mask).to(pooled.dtype)
                pooled = torch.cat([pooled, self.spectrum(features)], -1)
            seq_logits = self.sequence_head(self.dropout(pooled))
        # --- losses: each head's mean over its labelled entries (-100 skipped; nothing labelled: a zero) ---
        loss = None
        if labels is not None:
            target = labels.to(logits.device).reshape(-1)  # (B*N,)
            per = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), target, ignore_index=IGNORE_INDEX, reduction="none"
            )
            loss = _masked_mean(per, target != IGNORE_INDEX)
        if sequence_labels is not None:
            sequence_labels = sequence_labels.to(seq_logits.device)
            if self.config.sequence_task == "motif_presence":
                keep = sequence_labels != IGNORE_INDEX  # (B, motifs)
                target = sequence_labels.masked_fill(~keep, 0).to(seq_logits.dtype)
                per = F.binary_cross_entropy_with_logits(seq_logits, target, reduction="none")
            else:
                target = sequence_labels.long().view(-1)  # (B,)
                keep = target != IGNORE_INDEX
                per = F.cross_entropy(seq_logits, target, ignore_index=IGNORE_INDEX, reduction="none")
            seq_loss = self.config.sequence_loss_weight * _masked_mean(per, keep)
            loss = seq_loss if loss is None else loss + seq_loss
        res = MotifDetectionOutput(
            loss=add_backbone_losses(self, loss, out),
            logits=logits,
            sequence_logits=seq_logits,
            hidden_states=getattr(out, "hidden_states", None),
            attentions=getattr(out, "attentions", None),
        )
        use = self.config.return_dict if return_dict is None else return_dict
        return res if use else res.to_tuple()


__all__ = ["LongformerForMotifDetection", "LongformerMotifPreTrainedModel", "MotifDetectionOutput"]
