"""SparseTransformer's embeddings: word, learned or rotary positions, token types."""

import torch
from torch import nn


def make_position_ids(config, input_ids, inputs_embeds, past_length: int) -> torch.LongTensor:
    """(batch, seq) position ids: counted from 0 ("bert"), or RoBERTa's padding-aware ids."""
    shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
    device = input_ids.device if input_ids is not None else inputs_embeds.device
    if config.position_ids_style == "roberta":
        pad = config.pad_token_id
        if input_ids is not None:
            mask = input_ids.ne(pad).long()
            return (torch.cumsum(mask, dim=1) + past_length) * mask + pad
        return torch.arange(pad + 1 + past_length, pad + 1 + past_length + shape[1], device=device).expand(
            shape
        )
    return torch.arange(past_length, past_length + shape[1], device=device).expand(shape)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    """RoPE: cos/sin (batch, seq, head_dim) for position ids."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        self.register_buffer("inv_freq", self.compute_inv_freq(), persistent=False)

    def compute_inv_freq(self) -> torch.Tensor:
        """(D/2,) RoPE frequencies ``theta ** (-2i / D)``."""
        return 1.0 / (self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))

    def forward(self, position_ids, dtype):
        freqs = position_ids[..., None].float() * self.inv_freq  # (B, n, D/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (B, n, D)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(q, k, cos, sin):
    # cos/sin follow q's dtype: under autocast q and k are bf16/fp16 while the rotary table is
    # float32, and the product would promote q and k (not v) back to float32.
    cos, sin = cos[:, None].to(q.dtype), sin[:, None].to(q.dtype)  # (B, 1, n, D)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def first_token_global(input_ids, inputs_embeds):
    shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
    device = input_ids.device if input_ids is not None else inputs_embeds.device
    g = torch.zeros(shape, dtype=torch.long, device=device)
    g[:, 0] = 1
    return g


class SparseTransformerEmbeddings(nn.Module):
    """Word (+ learned position) (+ token type) embeddings, layer norm, dropout."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.position_embeddings = None
        if config.position_embedding_type == "absolute":
            pad = config.pad_token_id if config.position_ids_style == "roberta" else None
            self.position_embeddings = nn.Embedding(
                config.max_position_embeddings, config.hidden_size, padding_idx=pad
            )
        self.token_type_embeddings = (
            nn.Embedding(config.type_vocab_size, config.hidden_size) if config.type_vocab_size > 0 else None
        )
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.max_positions = config.max_position_embeddings

    def forward(self, input_ids, token_type_ids, position_ids, inputs_embeds):
        x = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros(x.shape[:-1], dtype=torch.long, device=x.device)
            x = x + self.token_type_embeddings(token_type_ids)
        if self.position_embeddings is not None:
            if (
                not torch.compiler.is_compiling()
            ):  # a data-dependent check: skipped under torch.export/compile
                self._check_positions(position_ids)
            x = x + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(x))

    def _check_positions(self, position_ids):
        top = int(position_ids.max()) if position_ids.numel() else 0
        if top >= self.max_positions:
            raise ValueError(
                f"position id {top} is out of range: max_position_embeddings is {self.max_positions} "
                f"(input of length {position_ids.shape[-1]}); extend the model with hf_sparse.conversion or truncate"
            )
