"""Dialogue model: response selection and per-turn act / intent tracking over a long dialogue history."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers.utils import ModelOutput

from ...models.longformer_tasks.backbone import (
    add_backbone_losses,
    backbone_config,
    build_backbone,
    check_positions,
    embeds_position_ids,
)
from ...models.longformer_tasks.remote_code import LongformerTaskPreTrainedModel
from ...utils.labels import IGNORE_INDEX
from .configuration_dialogue import LongformerDialogueConfig


@dataclass
class DialogueOutput(ModelOutput):
    """Outputs of [`LongformerForDialogue`].

    Args:
        loss: sum of the weighted losses of the heads that got labels (with a SparseTransformer backbone, plus its
            MoE router losses and, in training, its adaptive-span penalty).
        selection_logits: `(batch, n_candidates)` score of each (history, candidate) pair (3-D inputs), or
            `(batch,)` for 2-D inputs with one candidate each.
        act_logits: `(batch, n_turns, n_acts)` per-turn act logits (sigmoid: probability of each act).
        intent_logits: `(batch, n_turns, n_intents)` per-turn active-intent logits (meaningful on user turns).
    """

    loss: torch.FloatTensor | None = None
    selection_logits: torch.FloatTensor | None = None
    act_logits: torch.FloatTensor | None = None
    intent_logits: torch.FloatTensor | None = None
    hidden_states: tuple | None = None
    attentions: tuple | None = None


class _Head(nn.Module):
    """dense -> tanh -> dropout -> projection (RoBERTa's classification head, on any token's state)."""

    def __init__(self, hidden: int, out: int, dropout: float, in_features: int | None = None):
        super().__init__()
        self.dense = nn.Linear(in_features or hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(hidden, out)

    def forward(self, x):
        return self.out_proj(self.dropout(torch.tanh(self.dense(self.dropout(x)))))


def gather_positions(hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``hidden[b, positions[b, t]]`` -> ``(batch, n_positions, hidden)``; positions ``< 0`` (padding) give the
    state of token 0 (callers ignore them through their labels)."""
    index = positions.clamp(min=0).to(hidden.device)  # (B, T)
    index = index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])  # (B, T, H)
    return torch.gather(hidden, 1, index)


def span_means(hidden: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Mean of ``hidden`` over consecutive spans: span ``t`` of row ``b`` runs from ``starts[b, t]`` to the next
    span's start, the last one to ``ends[b]`` (exclusive) -> ``(batch, n_spans, hidden)``. Starts ``< 0``
    (padding spans, after the real ones) give zeros."""
    length = hidden.shape[1]
    starts = starts.to(hidden.device)
    begin = torch.where(starts >= 0, starts, torch.full_like(starts, length))  # (B, T)
    stop = torch.cat([begin[:, 1:], torch.full_like(begin[:, :1], length)], dim=1)
    stop = torch.minimum(stop, ends.to(hidden.device).reshape(-1, 1))
    pos = torch.arange(length, device=hidden.device)
    member = ((pos >= begin[..., None]) & (pos < stop[..., None])).to(hidden.dtype)  # (B, T, L)
    return (member @ hidden) / member.sum(-1, keepdim=True).clamp(min=1)


def label_items(name: str, labels: torch.Tensor) -> torch.Tensor:
    """Per example ``(batch,)``, the items the loss of the head of the label argument ``name`` sums over:
    ``labels`` one (the example), ``act_labels`` its turns with act labels, ``intent_labels`` its turns with an
    intent label (entries ``-100`` carry no label)."""
    if name == "labels":
        return (labels != IGNORE_INDEX).long()
    if name == "act_labels":
        return (labels != IGNORE_INDEX).any(-1).sum(-1)
    if name == "intent_labels":
        return (labels != IGNORE_INDEX).sum(-1)
    raise ValueError(f"name must be 'labels', 'act_labels' or 'intent_labels', got {name!r}")


def head_loss_sums(
    selection_logits=None,
    labels=None,
    act_logits=None,
    act_labels=None,
    intent_logits=None,
    intent_labels=None,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per example, the summed loss of every head given logits and labels and the items it sums over
    (:func:`label_items`): ``{label name: (sums (batch,) float32, counts (batch,))}``. Selection: the
    cross-entropy over the candidates; acts: the binary cross-entropy summed over the acts of each labelled turn;
    intents: the cross-entropy of each labelled turn. A head's loss is ``sums.sum() / counts.sum()`` over the
    examples it is taken over (``LongformerForDialogue`` divides by the whole batch's count instead where
    ``num_items_in_batch`` gives one)."""
    out = {}
    if selection_logits is not None and labels is not None:
        target = labels.to(selection_logits.device).long()
        sums = F.cross_entropy(selection_logits.float(), target, ignore_index=IGNORE_INDEX, reduction="none")
        out["labels"] = (sums, label_items("labels", target))
    if act_logits is not None and act_labels is not None:
        target = act_labels.to(act_logits.device)
        keep = target != IGNORE_INDEX  # (B, T, A)
        bce = F.binary_cross_entropy_with_logits(
            act_logits.float(), target.clamp(min=0).float(), reduction="none"
        )
        out["act_labels"] = ((bce * keep).sum((1, 2)), label_items("act_labels", target))
    if intent_logits is not None and intent_labels is not None:
        target = intent_labels.to(intent_logits.device).long()  # (B, T)
        ce = F.cross_entropy(
            intent_logits.float().transpose(1, 2), target, ignore_index=IGNORE_INDEX, reduction="none"
        )  # (B, T), 0 where ignored
        out["intent_labels"] = (ce.sum(-1), label_items("intent_labels", target))
    return out


def loss_weights(config: LongformerDialogueConfig) -> dict[str, float]:
    """The weight of each head's loss in the model's loss, by label name."""
    return {"labels": 1.0, "act_labels": config.act_loss_weight, "intent_labels": config.intent_loss_weight}


def _divisor(num_items_in_batch, name: str, counts: torch.Tensor) -> torch.Tensor:
    """What a head's summed loss is divided by: its count in ``num_items_in_batch`` (a mapping by label name; a
    number counts the selection ``labels``, as transformers' Trainer does), else the batch's own count."""
    n = num_items_in_batch.get(name) if isinstance(num_items_in_batch, Mapping) else None
    if name == "labels" and num_items_in_batch is not None and not isinstance(num_items_in_batch, Mapping):
        n = num_items_in_batch
    n = counts.sum() if n is None else n
    return torch.as_tensor(n, dtype=torch.float32, device=counts.device).clamp(min=1)


class LongformerDialoguePreTrainedModel(LongformerTaskPreTrainedModel):
    config_class = LongformerDialogueConfig
    config: LongformerDialogueConfig


class LongformerForDialogue(LongformerDialoguePreTrainedModel):
    """A long encoder over a formatted dialogue (see `hf_sparse.tasks.dialogue.formatter.DialogueFormatter`) with three heads.

    - **Response selection** (`config.selection_head`): inputs ``(batch, n_candidates, seq)``, one sequence per
      (history, candidate) pair laid out as ``history [RSP] candidate``; the score of a pair is read from the
      ``[RSP]`` token (``candidate_positions``), which attends to the whole history (global attention). With
      ``labels`` (index of the true candidate per example) the loss is the cross-entropy over the candidates,
      so the other candidates (sampled negatives, or the other examples' responses for in-batch negatives)
      are the negatives.
    - **Dialogue acts** (`config.act_labels`): multi-label, per turn, from each turn's separator token
      (``turn_positions``; with a ``turn_separator`` in ``config.formatter``, the concatenation of the turn
      separator, global under ``global_on=["separators"]``, and the speaker token after it, which attends
      locally); binary cross-entropy against ``act_labels`` ``(batch, n_turns, n_acts)`` summed
      over the acts and averaged over the labelled turns (entries ``-100`` ignored), so that a turn's acts
      weigh as much as its intent.
    - **Active intent** (`config.intent_labels`): per user turn, from the same separator tokens; cross-entropy
      against ``intent_labels`` ``(batch, n_turns)``, ``-100`` ignored (system turns, unknown intents).

    Each head's loss is its sum over its items (:func:`head_loss_sums`: examples, labelled turns) divided by
    their number in the batch, or by ``num_items_in_batch`` where the caller counts them over more than this
    batch (the micro-batches of one gradient-accumulation step, every process): a number for the selection
    ``labels`` (what transformers' ``Trainer`` counts), a mapping ``{label name: count}`` for any head (what the
    dialogue recipes' Trainer passes). The sum of the micro-batches' losses is then the loss of the whole batch.

    With ``config.turn_pooling="separator+mean"`` every head also reads the mean of its span's token states (see
    :func:`span_means`; selection: the candidate's mean and its product with the history's mean).

    Global attention: the caller's ``global_attention_mask`` (the formatter's: separators, the latest turn,
    ``[RSP]`` and the candidate), or else only the first token (``config.global_first_token``).

    With transformers' ``Trainer``, name the label keys the batches carry: ``TrainingArguments(label_names=
    ["labels"])`` for selection batches, ``["act_labels", "intent_labels"]`` (or the one of a single head) for
    tracking batches. The Trainer's default is every ``*label*`` argument of ``forward``, all three, and a batch
    without one of them is evaluated without ``eval_loss`` or ``label_ids``.
    """

    @property
    def accepts_loss_kwargs(self) -> bool:
        """For transformers' ``Trainer``: the heads divide by its ``num_items_in_batch`` (it then does not divide the
        loss by the gradient-accumulation steps); not with a SparseTransformer backbone's MoE router losses or
        adaptive-span penalty, which are per batch and would count once per micro-batch."""
        backbone = self.config.backbone
        return not (backbone.get("num_experts") or backbone.get("adaptive_span"))

    def __init__(self, config: LongformerDialogueConfig):
        super().__init__(config)
        self.backbone = build_backbone(backbone_config(config.backbone), config._attn_implementation)
        hidden, dropout = config.hidden_size, config.classifier_dropout
        pooled = int(config.pools_spans)  # + the mean of the turn's tokens
        width = hidden * (config.turn_tokens + pooled)  # a turn is read at its separator (and speaker token)
        self.selection_scorer = (
            _Head(hidden, 1, dropout, hidden * (1 + 2 * pooled)) if config.selection_head else None
        )
        self.act_classifier = _Head(hidden, config.num_acts, dropout, width) if config.num_acts else None
        self.intent_classifier = (
            _Head(hidden, config.num_intents, dropout, width) if config.num_intents else None
        )
        self.post_init()

    def get_input_embeddings(self):
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.backbone.set_input_embeddings(value)

    def default_global_attention_mask(self, input_ids, attention_mask=None):
        """Used when no mask is passed: the first token global (``config.global_first_token``), nothing else."""
        g = torch.zeros_like(input_ids, dtype=torch.long)
        if self.config.global_first_token:
            g[..., 0] = 1
        return g if attention_mask is None else g * attention_mask.long()

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        global_attention_mask=None,
        candidate_positions=None,
        turn_positions=None,
        labels=None,
        act_labels=None,
        intent_labels=None,
        inputs_embeds=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        num_items_in_batch=None,
        **kwargs,
    ):
        r"""
        input_ids (`(batch, seq)` or `(batch, n_candidates, seq)`): formatted dialogues; 3-D for selection.
        attention_mask, global_attention_mask: same shape as `input_ids` (1 = token / global token).
        candidate_positions (`(batch,)` or `(batch, n_candidates)`): index of `[RSP]` in each sequence.
        turn_positions (`(batch, n_turns)`): index of each turn's separator, `-1` for padding turns.
        labels (`(batch,)`): index of the true candidate (selection, 3-D inputs).
        act_labels (`(batch, n_turns, n_acts)`): 0/1 per act, `-100` where no loss is taken.
        intent_labels (`(batch, n_turns)`): intent id per turn, `-100` where no loss is taken.
        num_items_in_batch (`int`, tensor or `dict[str, int]`): what each head's summed loss is divided by (see the
            class docstring); None: its items in this batch.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("forward needs exactly one of input_ids or inputs_embeds")
        ref = input_ids if input_ids is not None else inputs_embeds[..., 0]
        grouped = ref.dim() == 3  # (B, C, L): one sequence per (history, candidate) pair
        lead = ref.shape[:-1]
        if grouped:
            flat = ref.shape[0] * ref.shape[1]
            input_ids = None if input_ids is None else input_ids.reshape(flat, -1)  # (B*C, L)
            inputs_embeds = None if inputs_embeds is None else inputs_embeds.reshape(flat, ref.shape[-1], -1)
            attention_mask = None if attention_mask is None else attention_mask.reshape(flat, -1)
            global_attention_mask = (
                None if global_attention_mask is None else global_attention_mask.reshape(flat, -1)
            )
        if labels is not None and not grouped:
            raise ValueError(
                "labels (index of the true candidate) needs 3-D inputs (batch, n_candidates, seq)"
            )
        if global_attention_mask is None:
            ids = input_ids if input_ids is not None else inputs_embeds[..., 0]
            global_attention_mask = self.default_global_attention_mask(ids, attention_mask)
        output_attentions, output_hidden_states = self.output_flags(output_attentions, output_hidden_states)
        # inputs_embeds on a Longformer backbone: positions numbered as input_ids would be (padding at pad_token_id)
        position_ids = embeds_position_ids(self.backbone.config, input_ids, attention_mask, inputs_embeds)
        check_positions(self.backbone.config, input_ids, inputs_embeds, position_ids)
        out = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            global_attention_mask=global_attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        hidden = out.last_hidden_state  # (N, L, H)
        ends = (
            attention_mask.sum(-1)
            if attention_mask is not None
            else torch.full(hidden.shape[:1], hidden.shape[1], device=hidden.device)
        )  # (N,) real tokens (right padding)

        # --- response selection: score at [RSP] ---
        selection_logits = None
        if candidate_positions is not None:
            if self.selection_scorer is None:
                raise ValueError("candidate_positions given, but this model has no selection head")
            positions = candidate_positions.reshape(-1, 1)  # (N, 1)
            rsp = gather_positions(hidden, positions)[:, 0]  # (N, H)
            if self.config.pools_spans:  # + the candidate's mean and its product with the history's mean
                starts = torch.cat([torch.zeros_like(positions), positions], dim=1)  # (N, 2)
                history, candidate = span_means(hidden, starts, ends).unbind(1)  # (N, H) each
                rsp = torch.cat([rsp, candidate, candidate * history], dim=-1)
            selection_logits = self.selection_scorer(rsp).squeeze(-1).reshape(lead)  # (B, C) or (B,)

        # --- per-turn heads: read each turn's separator ---
        act_logits = intent_logits = None
        if turn_positions is not None:
            if grouped:
                raise ValueError("turn_positions (tracking) needs 2-D inputs (batch, seq)")
            if self.act_classifier is None and self.intent_classifier is None:
                raise ValueError("turn_positions given, but this model has no act or intent head")
            turns = gather_positions(hidden, turn_positions)  # (B, T, H)
            if (
                self.config.turn_tokens == 2
            ):  # [TURN] [USR]: the turn separator and the speaker token after it
                speaker = gather_positions(hidden, turn_positions.clamp(min=0) + 1)  # (B, T, H)
                turns = torch.cat([turns, speaker], dim=-1)  # (B, T, 2H)
            if self.config.pools_spans:
                turns = torch.cat([turns, span_means(hidden, turn_positions, ends)], dim=-1)
            if self.act_classifier is not None:
                act_logits = self.act_classifier(turns)  # (B, T, A)
            if self.intent_classifier is not None:
                intent_logits = self.intent_classifier(turns)  # (B, T, I)

        # --- losses: each head's sum over its items / their count (a head with nothing labelled: a zero that keeps
        # it in the graph) ---
        weights = loss_weights(self.config)
        terms = head_loss_sums(selection_logits, labels, act_logits, act_labels, intent_logits, intent_labels)
        losses = [
            weights[name] * sums.sum() / _divisor(num_items_in_batch, name, counts)
            for name, (sums, counts) in terms.items()
        ]
        loss = add_backbone_losses(self, torch.stack(losses).sum() if losses else None, out)
        res = DialogueOutput(
            loss=loss,
            selection_logits=selection_logits,
            act_logits=act_logits,
            intent_logits=intent_logits,
            hidden_states=getattr(out, "hidden_states", None),
            attentions=getattr(out, "attentions", None),
        )
        use = self.config.return_dict if return_dict is None else return_dict
        return res if use else res.to_tuple()


__all__ = [
    "DialogueOutput",
    "LongformerDialoguePreTrainedModel",
    "LongformerForDialogue",
    "gather_positions",
    "head_loss_sums",
    "label_items",
    "loss_weights",
    "span_means",
]
