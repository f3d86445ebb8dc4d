"""Long-document summarizers: abstractive over transformers' LED, extractive over a long encoder.

LED's known failure: a model fine-tuned with global attention on ``<s>`` writes ``</s><s><s>...`` when
``generate`` is called without ``global_attention_mask``, because the encoder then runs without any
global token. Here the *encoder* builds the mask whenever none is passed (:func:`build_global_attention_mask`
from the config's ``global_attention``), so ``forward``, ``generate`` (which calls the encoder once through
``get_encoder()``, forwarding ``global_attention_mask`` only if the caller gave one) and direct encoder calls
all see the same global tokens.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import LEDForConditionalGeneration
from transformers.models.led.modeling_led import LEDEncoder
from transformers.utils import ModelOutput

from ...attention.dispatch import sparse_attention
from ...models.longformer_tasks.backbone import add_backbone_losses, backbone_config, build_backbone
from ...models.longformer_tasks.remote_code import ExportCodeMixin, LongformerTaskPreTrainedModel
from ...utils.generation import fit_max_length
from ...utils.labels import IGNORE_INDEX
from .configuration_summarization import LEDSummarizationConfig, LongformerExtractiveSummarizationConfig

PADDING_SCORE = -1.0e4  # logits of padding sentences


def build_global_attention_mask(
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None = None,
    *,
    global_attention=("first",),
    sentence_token_id: int | None = None,
    query_separator_token_id: int | None = None,
    shape: tuple[int, int] | None = None,
) -> torch.Tensor:
    """``(batch, seq)`` long tensor, 1 = global token (Longformer convention).

    ``"first"``: each row's first token (position 0, or the first where ``attention_mask`` is 1);
    ``"sentences"``: every ``sentence_token_id``; ``"query"``: positions up to and including the first
    ``query_separator_token_id`` of the row (none if the row has no separator).
    Positions where ``attention_mask`` is 0 are never global. Without ``input_ids`` (embeddings input) only
    ``"first"`` can be built: pass ``shape``.
    """
    if input_ids is None:
        if shape is None:
            raise ValueError("build_global_attention_mask needs input_ids or shape")
        if any(g != "first" for g in global_attention):
            raise ValueError(
                f"global_attention={list(global_attention)} needs input_ids (sentence markers / query "
                "separator are found in the ids); pass global_attention_mask with inputs_embeds"
            )
        device = attention_mask.device if attention_mask is not None else None
        g = torch.zeros(shape, dtype=torch.long, device=device)
    else:
        g = torch.zeros_like(input_ids, dtype=torch.long)
    if "first" in global_attention:
        if attention_mask is None:
            g[:, 0] = 1
        else:  # each row's first token: after its padding, when left-padded
            g.scatter_(1, (attention_mask != 0).long().argmax(-1, keepdim=True).to(g.device), 1)
    if input_ids is not None and "sentences" in global_attention:
        g |= (input_ids == sentence_token_id).long()
    if input_ids is not None and "query" in global_attention:
        is_sep = input_ids == query_separator_token_id  # (B, n)
        has_sep = is_sep.any(-1, keepdim=True)  # (B, 1)
        first_sep = is_sep.long().argmax(-1, keepdim=True)  # (B, 1): index of the first separator
        positions = torch.arange(input_ids.shape[-1], device=input_ids.device)[None, :]  # (1, n)
        g |= ((positions <= first_sep) & has_sep).long()
    if attention_mask is not None:
        g = g * (attention_mask != 0).long()
    return g


# =================================================================================================
# Abstractive: LED with automatic global attention and optional hf-sparse encoder kernels
# =================================================================================================


class SparseLEDEncoderSelfAttention(nn.Module):
    """Drop-in for LED's encoder self-attention that runs ``hf_sparse.sparse_attention`` with any pattern.

    Same parameters as ``LEDEncoderSelfAttention`` (so LED checkpoints load unchanged). Query i attends key
    j iff the layer's pattern allows (i, j) or j is global, with the ``query``/``key``/``value``
    projections; a global query attends every key with ``query_global``/``key_global``/``value_global``
    (Longformer). Padding keys are never attended and padding queries output zeros. With
    ``Longformer(window=attention_window)`` this is exactly LED's attention.
    """

    def __init__(self, config: LEDSummarizationConfig, layer_id: int):
        super().__init__()
        if config.d_model % config.encoder_attention_heads:
            raise ValueError(
                f"d_model ({config.d_model}) must be divisible by encoder_attention_heads "
                f"({config.encoder_attention_heads})"
            )
        self.num_heads = config.encoder_attention_heads
        self.head_dim = config.d_model // self.num_heads
        self.embed_dim = config.d_model
        self.scale = 1.0 / math.sqrt(self.head_dim)
        for name in ("query", "key", "value", "query_global", "key_global", "value_global"):
            setattr(self, name, nn.Linear(config.d_model, self.embed_dim))
        self.dropout = config.attention_dropout
        self.layer_id = layer_id
        self.pattern = config.encoder_layer_pattern(layer_id)
        self.backend = config.encoder_attention_backend

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        B, n, _ = x.shape
        return x.view(B, n, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, n, D)

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        is_index_masked=None,
        is_index_global_attn=None,
        is_global_attn=None,
        output_attentions=False,
    ):
        if output_attentions:
            raise ValueError(
                "output_attentions=True is not available with encoder_attention_pattern (hf-sparse kernels "
                "never materialise the weights); set encoder_attention_pattern=None for LED's own attention"
            )
        B, n, _ = hidden_states.shape
        q, k, v = (self._heads(lin(hidden_states)) for lin in (self.query, self.key, self.value))
        key_valid = None if is_index_masked is None else ~is_index_masked  # (B, n)
        glob = is_index_global_attn if is_global_attn else None  # (B, n) or None
        dropout = self.dropout if self.training else 0.0

        # --- local pattern (+ global keys) with the regular projections ---
        out = sparse_attention(
            q, k, v, self.pattern, attention_mask=key_valid, global_attention_mask=glob,
            dropout_p=dropout, backend=self.backend,
        )  # fmt: skip  # (B, H, n, D)

        # --- global queries: their own projections over every key ---
        if glob is not None:
            out = out.clone()
            kg, vg = (
                self._heads(self.key_global(hidden_states)),
                self._heads(self.value_global(hidden_states)),
            )
            for b in range(B):
                rows = torch.nonzero(glob[b]).flatten()
                if rows.numel() == 0:
                    continue
                qg = self._heads(self.query_global(hidden_states[b : b + 1, rows]))  # (1, H, G, D)
                scores = torch.matmul(qg, kg[b : b + 1].transpose(-1, -2)) * self.scale  # (1, H, G, n)
                if key_valid is not None:
                    scores = scores.masked_fill(~key_valid[b : b + 1, None, None, :], float("-inf"))
                probs = torch.softmax(scores.float(), dim=-1).to(qg.dtype)
                probs = F.dropout(probs, p=dropout, training=dropout > 0)
                out[b, :, rows] = torch.matmul(probs, vg[b : b + 1])[0]
        if key_valid is not None:
            out = out * key_valid.to(out.dtype)[:, None, :, None]
        return (out.transpose(1, 2).reshape(B, n, self.embed_dim),)  # (B, n, E)


def check_right_padded(attention_mask: torch.Tensor | None) -> None:
    """``ValueError`` for a row whose tokens start after padding: LED's learned positions count from the first
    column, so a left-padded row's tokens would take other positions than the same document alone (another
    summary, without a word)."""
    if attention_mask is None:
        return
    present = attention_mask != 0  # (B, n)
    lead = (present.cumsum(-1) == 0).sum(-1)  # (B,): padding before each row's first token
    rows = torch.nonzero((lead > 0) & present.any(-1)).flatten().tolist()
    if rows:
        raise ValueError(
            f"attention_mask: row(s) {rows[:5]} start with padding, but LED's position embeddings count from the "
            "first column, so left padding shifts their positions: pad on the right (tokenizer.padding_side='right')"
        )


class LEDSummarizationEncoder(LEDEncoder):
    """LED's encoder that builds the global attention mask when none is passed (see the module docstring),
    and runs hf-sparse kernels when ``config.encoder_attention_pattern`` is set (then without padding the
    input to a multiple of the window)."""

    def __init__(self, config: LEDSummarizationConfig):
        super().__init__(config)
        self.uses_sparse_kernels = config.encoder_attention_pattern is not None
        if self.uses_sparse_kernels:
            for i, layer in enumerate(self.layers):
                layer.self_attn.longformer_self_attn = SparseLEDEncoderSelfAttention(config, i)

    def default_global_attention_mask(self, input_ids, attention_mask=None, inputs_embeds=None):
        cfg = self.config
        shape = None if input_ids is not None else tuple(inputs_embeds.shape[:2])
        return build_global_attention_mask(
            input_ids, attention_mask, global_attention=cfg.global_attention,
            sentence_token_id=cfg.sentence_token_id, query_separator_token_id=cfg.query_separator_token_id,
            shape=shape,
        )  # fmt: skip

    def _pad_to_window_size(self, input_ids, attention_mask, inputs_embeds, pad_token_id):
        if self.uses_sparse_kernels:  # the kernels take any length
            return 0, input_ids, attention_mask, inputs_embeds
        return super()._pad_to_window_size(input_ids, attention_mask, inputs_embeds, pad_token_id)

    def check_positions(self, length: int) -> None:
        """``ValueError`` for an input longer than the position table (LED's encoder raises a bare ``IndexError``):
        positions run over the input padded to a multiple of ``attention_window`` (not with hf-sparse kernels)."""
        limit = self.config.max_encoder_position_embeddings
        padded = length
        if not self.uses_sparse_kernels:
            w = self.config.attention_window
            w = int(w if isinstance(w, int) else max(w))
            padded = -(-length // w) * w
        if padded > limit:
            how = f", padded to {padded}, a multiple of attention_window" if padded != length else ""
            raise ValueError(
                f"position id {padded - 1} is out of range: max_encoder_position_embeddings is {limit} "
                f"(input of length {length}{how}); truncate the input"
            )

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, inputs_embeds=None,
                **kwargs):  # fmt: skip
        ref = input_ids if input_ids is not None else inputs_embeds
        if ref is not None:
            self.check_positions(ref.shape[1])
        check_right_padded(attention_mask)
        if global_attention_mask is None:
            global_attention_mask = self.default_global_attention_mask(
                input_ids, attention_mask, inputs_embeds
            )
        return super().forward(
            input_ids=input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask,
            inputs_embeds=inputs_embeds, **kwargs,
        )  # fmt: skip


class LEDForSummarization(ExportCodeMixin, LEDForConditionalGeneration):
    """Abstractive long-document summarizer: ``LEDForConditionalGeneration`` whose encoder gives global
    attention to the tokens of ``config.global_attention`` (the first token; optionally sentence markers
    and a query prefix) whenever the caller passes no ``global_attention_mask`` — in ``forward`` and in
    ``generate`` alike — and can run its encoder on hf-sparse kernels (``config.encoder_attention_pattern``).

    Weights and module names are LED's: ``LEDForSummarization.from_pretrained("allenai/led-base-16384")``
    loads any LED checkpoint (transformers warns that the ``model_type`` differs), and :meth:`from_led`
    wraps one with options (sentence/query globals with new marker tokens, an hf-sparse pattern).
    """

    config_class = LEDSummarizationConfig
    config: LEDSummarizationConfig
    accepts_loss_kwargs = (
        False  # LED's loss is a mean: the Trainer divides it by the gradient-accumulation steps
    )

    def __init__(self, config: LEDSummarizationConfig):
        config.validate_task()  # what from_pretrained(path, key=value) or `config.key = value` changed since __init__
        super().__init__(config)
        # LED's post_init read config.gradient_checkpointing (what transformers' is_activation_checkpointing,
        # is_gradient_checkpointing before 5.24, reads)
        checkpointing = any(getattr(m, "gradient_checkpointing", False) for m in self.modules())
        # the encoder's embedding is tied to led.shared by LEDModel's declared _tied_weights_keys (post_init
        # ties it); no module alias here: transformers treats an aliased module's weights as loaded, so a
        # checkpoint without led.shared.weight would not report it missing
        self.led.encoder = LEDSummarizationEncoder(config)
        self.post_init()
        # the new encoder checkpoints as LED's did (5.24 renamed gradient_checkpointing_enable)
        if checkpointing:
            (getattr(self, "activation_checkpointing_enable", None) or self.gradient_checkpointing_enable)()

    @property
    def supports_query(self) -> bool:
        return self.config.supports_query

    def default_global_attention_mask(self, input_ids, attention_mask=None):
        """The mask the encoder builds when none is passed."""
        return self.led.encoder.default_global_attention_mask(input_ids, attention_mask)

    def _prepare_generated_length(self, generation_config, has_default_max_length, has_default_min_length,
                                  model_input_name, input_ids_length, inputs_tensor):  # fmt: skip
        """transformers' lengths, checked against the decoder's position table: the last decoder token fed is at
        position ``max_length - 2``, and past ``max_decoder_position_embeddings`` LED's decoder raised a bare
        ``IndexError`` at that step, after all the steps before it. A default ``max_length`` is clamped to it."""
        generation_config = super()._prepare_generated_length(
            generation_config, has_default_max_length, has_default_min_length, model_input_name,
            input_ids_length, inputs_tensor,
        )  # fmt: skip
        table = self.config.max_decoder_position_embeddings
        total, limit = generation_config.max_length, table + 1  # the last token fed is at max_length - 2
        asked = (
            None if total is None else fit_max_length(generation_config, total, limit, has_default_max_length)
        )
        if asked is None:
            return generation_config
        raise ValueError(
            f"{asked} with {input_ids_length} decoder start token(s) runs the decoder to {total} tokens, but its "
            f"position table (max_decoder_position_embeddings={table}) takes at most {limit}: ask for at most "
            f"{max(limit - input_ids_length, 0)} new tokens"
        )

    @classmethod
    def from_led(
        cls,
        model_or_path,
        *,
        tokenizer=None,
        global_attention=("first",),
        encoder_attention_pattern=None,
        encoder_attention_backend: str = "auto",
        **from_pretrained_kwargs,
    ) -> LEDForSummarization:
        """Wrap an LED checkpoint: a ``LEDForConditionalGeneration`` or anything its ``from_pretrained``
        takes (``"allenai/led-base-16384"``, ``"allenai/led-large-16384-arxiv"``, a folder).

        With ``"sentences"`` or ``"query"`` in ``global_attention``, ``tokenizer`` is required: the marker
        tokens are added to it (:func:`hf_sparse.tasks.summarization.data.add_summarization_tokens`) and the
        embeddings resized. All weights are copied; the encoder's outputs equal LED's for the same global
        tokens (also with ``encoder_attention_pattern={"type": "longformer", "window": w}``).
        """
        from .data import add_summarization_tokens

        if isinstance(model_or_path, LEDForConditionalGeneration):
            source = model_or_path
        elif isinstance(model_or_path, (str, os.PathLike)):
            source = LEDForConditionalGeneration.from_pretrained(model_or_path, **from_pretrained_kwargs)
        else:
            raise TypeError(
                "model_or_path must be a LEDForConditionalGeneration or a path/Hub id, got "
                f"{type(model_or_path).__name__}"
            )
        needs_tokens = [g for g in global_attention if g in ("sentences", "query")]
        ids = {"sentence_token_id": None, "query_separator_token_id": None}
        if needs_tokens:
            if tokenizer is None:
                raise ValueError(
                    f"global_attention={list(global_attention)} needs the tokenizer (markers are added)"
                )
            ids = add_summarization_tokens(tokenizer, "sentences" in needs_tokens, "query" in needs_tokens)
            if len(tokenizer) > source.config.vocab_size:
                source.resize_token_embeddings(len(tokenizer))
        values = source.config.to_dict()
        for key in ("model_type", "architectures", "transformers_version", "auto_map", "_name_or_path",
                    "global_attention", "sentence_token_id", "query_separator_token_id",
                    "encoder_attention_pattern", "encoder_attention_backend"):  # fmt: skip
            values.pop(key, None)
        config = LEDSummarizationConfig(
            **values, global_attention=list(global_attention), **ids,
            encoder_attention_pattern=encoder_attention_pattern, encoder_attention_backend=encoder_attention_backend,
        )  # fmt: skip
        dtype = next(source.parameters()).dtype
        model = cls(config).to(dtype)
        model.load_state_dict(source.state_dict(), strict=True)
        model.generation_config = source.generation_config
        return model


# =================================================================================================
# Extractive: one score per sentence from its marker token
# =================================================================================================


@dataclass
class ExtractiveSummarizationOutput(ModelOutput):
    """Outputs of [`LongformerForExtractiveSummarization`].

    Args:
        loss: the configured loss (``config.loss``) against ``labels`` (with a SparseTransformer backbone, plus
            its MoE router losses and, in training, its adaptive-span penalty).
        logits: ``(batch, n_sentences)`` sentence scores, in marker order; padding sentences get -1e4.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    hidden_states: tuple | None = None
    attentions: tuple | None = None


class LongformerExtractivePreTrainedModel(LongformerTaskPreTrainedModel):
    config_class = LongformerExtractiveSummarizationConfig
    config: LongformerExtractiveSummarizationConfig


class LongformerForExtractiveSummarization(LongformerExtractivePreTrainedModel):
    """Extractive summarizer: a long encoder over ``<s> [query <query_sep>] <sent> s1 <sent> s2 ... </s>``
    (see ``hf_sparse.tasks.summarization.data.encode_extractive``), global attention on the first token, every
    sentence marker (and the query), one score per sentence from its marker's final state (concatenated
    with ``sentence_features`` when the config names some) through a small MLP.

    Trained on greedy ROUGE-oracle labels (``hf_sparse.tasks.summarization.metrics.oracle_labels``); a summary is the top
    sentences in document order within a sentence/word budget (``hf_sparse.tasks.summarization.metrics.select_in_order``, used
    by the ``long-document-summarization`` pipeline).
    """

    def __init__(self, config: LongformerExtractiveSummarizationConfig):
        super().__init__(config)
        self.backbone = build_backbone(backbone_config(config.backbone), config._attn_implementation)
        self.dropout = nn.Dropout(config.classifier_dropout)
        width = config.hidden_size + len(config.sentence_features)
        self.scorer = nn.Sequential(
            nn.Linear(width, config.head_hidden_size), nn.GELU(), nn.Linear(config.head_hidden_size, 1)
        )
        self.post_init()

    @property
    def supports_query(self) -> bool:
        return self.config.supports_query

    def get_input_embeddings(self):
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.backbone.set_input_embeddings(value)

    def default_global_attention_mask(self, input_ids, attention_mask=None):
        """First token, sentence markers and (with a separator) the query prefix."""
        cfg = self.config
        return build_global_attention_mask(
            input_ids, attention_mask, global_attention=cfg.global_attention,
            sentence_token_id=cfg.sentence_token_id, query_separator_token_id=cfg.query_separator_token_id,
        )  # fmt: skip

    def sentence_positions(self, input_ids, attention_mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(positions, valid)``, both ``(batch, max_sentences)``: the index of each sentence marker in its
        row (in order; 0 where ``valid`` is False) and which entries are real sentences."""
        is_marker = input_ids == self.config.sentence_token_id  # (B, n)
        if attention_mask is not None:
            is_marker = is_marker & (attention_mask != 0)
        counts = is_marker.sum(-1)  # (B,)
        width = max(int(counts.max()) if counts.numel() else 0, 1)
        valid = torch.arange(width, device=input_ids.device)[None, :] < counts[:, None]  # (B, S)
        order = torch.sort((~is_marker).long(), dim=-1, stable=True).indices[
            :, :width
        ]  # markers first, in order
        return order * valid, valid

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        global_attention_mask=None,
        sentence_features=None,
        labels=None,
        document_index=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        **kwargs,
    ):
        r"""
        input_ids (`(batch, seq)`): encoded chunks with one `sentence_token_id` before each sentence.
        attention_mask (`(batch, seq)`): 1 = token, 0 = padding.
        global_attention_mask (`(batch, seq)`, *optional*): default: first token, markers, query prefix.
        sentence_features (`(batch, n_sentences, n_features)`): the config's `sentence_features`, per
            sentence in marker order (padding rows ignored); required when the config names features.
        labels (`(batch, n_sentences)`): 1 = oracle sentence, 0 = not, -100 = padding.
        document_index (`(batch,)`, *optional*): rows (chunks) with the same value belong to one document;
            the listwise loss then takes one softmax over all of that document's sentences, so scores of
            different chunks are comparable. Default: every row is its own group.
        """
        if input_ids is None:
            raise ValueError(
                "LongformerForExtractiveSummarization needs input_ids (sentence markers are found in them)"
            )
        cfg = self.config
        if global_attention_mask is None:
            global_attention_mask = self.default_global_attention_mask(input_ids, attention_mask)
        positions, valid = self.sentence_positions(input_ids, attention_mask)  # (B, S)
        output_attentions, output_hidden_states = self.output_flags(output_attentions, output_hidden_states)
        self.check_positions(input_ids)
        out = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, return_dict=True,
        )  # fmt: skip
        hidden = out.last_hidden_state  # (B, n, H)
        index = positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])  # (B, S, H)
        x = self.dropout(torch.gather(hidden, 1, index))  # (B, S, H)
        if cfg.sentence_features:
            if sentence_features is None:
                raise ValueError(
                    f"this model scores sentences with features {cfg.sentence_features}: pass sentence_features"
                )
            want = (x.shape[0], len(cfg.sentence_features))
            if (
                sentence_features.dim() != 3
                or (sentence_features.shape[0], sentence_features.shape[2]) != want
            ):
                raise ValueError(
                    f"sentence_features must be (batch={want[0]}, n_sentences, {want[1]}), got {tuple(sentence_features.shape)}"
                )
            if sentence_features.shape[1] < x.shape[1]:
                raise ValueError(
                    f"sentence_features has {sentence_features.shape[1]} sentences but input_ids has {x.shape[1]} markers"
                )
            x = torch.cat([x, sentence_features[:, : x.shape[1]].to(x.dtype)], dim=-1)  # (B, S, H + F)
        logits = self.scorer(x).squeeze(-1).masked_fill(~valid, PADDING_SCORE)  # (B, S)

        loss = None
        if labels is not None:
            loss = self._loss(logits, labels[:, : logits.shape[1]].to(logits.device), valid, document_index)
        loss = add_backbone_losses(self, loss, out)
        res = ExtractiveSummarizationOutput(loss=loss, logits=logits, hidden_states=out.hidden_states,
                                            attentions=out.attentions)  # fmt: skip
        use = cfg.return_dict if return_dict is None else return_dict
        return res if use else res.to_tuple()

    def _loss(self, logits, labels, valid, document_index=None):
        if labels.shape[1] < logits.shape[1]:
            raise ValueError(
                f"labels has {labels.shape[1]} sentences but input_ids has {logits.shape[1]} markers"
            )
        labels = labels[:, : logits.shape[1]].masked_fill(~valid, IGNORE_INDEX)
        sums, counts = sentence_loss_terms(
            logits, labels, loss=self.config.loss, positive_weight=self.config.positive_weight,
            document_index=document_index,
        )  # fmt: skip
        return sums.sum() / counts.sum().clamp(min=1)


def sentence_loss_terms(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    loss: str = "listwise",
    positive_weight: float = 1.0,
    document_index=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The terms of the extractive loss, per row: ``(sums, counts)``, both ``(batch,)`` float32. The loss of a
    batch is ``sums.sum() / counts.sum()`` (0 without a term), and so is the loss of a whole split from its rows'
    terms, however it is batched.

    ``labels`` ``(batch, >= n_sentences)``: 1 = oracle sentence, 0 = not, -100 = padding (no term).

    - ``"bce"``: one term per sentence, ``positive_weight`` on the oracle sentences' terms.
    - ``"listwise"``: one term per group of rows with an oracle sentence (a group: the rows of one
      ``document_index`` value; default: each row), counted on the group's first row: the cross-entropy of one
      softmax over the group's sentences against the uniform distribution over its oracle sentences. A group
      without an oracle sentence has no term.
    """
    B, S = logits.shape
    labels = labels[:, :S].to(logits.device)
    mask = labels != IGNORE_INDEX  # (B, S)
    target = labels.masked_fill(~mask, 0.0).float()
    # (B,) zeros that keep the graph: a batch without a term still backpropagates (DDP waits for every gradient)
    sums = logits.float().sum(-1) * 0.0
    if loss == "bce":
        weight = torch.tensor(positive_weight, device=logits.device)
        per = F.binary_cross_entropy_with_logits(logits.float(), target, reduction="none", pos_weight=weight)
        return sums + (per * mask).sum(-1), mask.sum(-1).float()
    if loss != "listwise":
        raise ValueError(f"loss must be 'bce' or 'listwise', got {loss!r}")
    if document_index is None:
        groups = torch.arange(B, device=logits.device)
    else:
        groups = torch.as_tensor(document_index, device=logits.device).reshape(-1)
        if groups.numel() != B:
            raise ValueError(f"document_index must have one entry per row ({B}), got {groups.numel()}")
    scores = logits.float().masked_fill(~mask, float("-inf"))  # (B, S)
    terms, counts, first = [], torch.zeros(B, device=logits.device), []
    for g in torch.unique(groups):
        rows = groups == g
        z, t = scores[rows].reshape(-1), target[rows].reshape(-1)  # the group's sentences
        if t.sum() <= 0:
            continue
        log_probs = z - torch.logsumexp(z, dim=0)
        terms.append(-(t * log_probs.masked_fill(t == 0, 0.0)).sum() / t.sum())
        first.append(int(rows.nonzero()[0]))
    if terms:
        index = torch.tensor(first, device=logits.device)
        sums = sums.index_add(0, index, torch.stack(terms))
        counts[index] = 1.0
    return sums, counts


__all__ = [
    "ExtractiveSummarizationOutput",
    "LEDForSummarization",
    "LEDSummarizationEncoder",
    "LongformerExtractivePreTrainedModel",
    "LongformerForExtractiveSummarization",
    "SparseLEDEncoderSelfAttention",
    "build_global_attention_mask",
    "sentence_loss_terms",
]
