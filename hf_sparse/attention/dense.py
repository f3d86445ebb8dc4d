"""The readable reference: materialise the mask, softmax over allowed keys only. Ground truth of
every test; O(n^2) memory, so only for small inputs."""

from __future__ import annotations

import torch
from torch.nn import functional as F


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Arithmetic dtype of the kernels: float64 stays float64, the rest use float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def all_true(mask: torch.Tensor) -> bool:
    """Whether every element of the bool ``mask`` is true, for skipping work that would not change the result
    (an all-true padding mask, zeroing rows that all have keys). False while ``torch.compile``, ``torch.export``
    or ``torch.jit.trace`` traces: the values are data then, so the traced graph takes the general path (a trace
    made with an all-zero global_attention_mask would otherwise ignore the global tokens of later inputs)."""
    return not (torch.compiler.is_compiling() or torch.jit.is_tracing()) and bool(mask.all())


def zero_padding_keys(key: torch.Tensor, key_valid: torch.Tensor | None) -> torch.Tensor:
    """``key`` (B, H, kv, D) with the rows of padding keys zeroed (``key_valid`` (B, kv) bool, False at padding; None:
    none). They are never attended, but a kernel that adds a -inf bias to their scores (SDPA, the blocked kernels'
    PyTorch path) or multiplies them by a zero probability in its backward (dq = dS k: every backend) turned an inf or
    NaN there (an overflowed or uninitialised padding state) into NaN outputs or gradients. On the CPU the padding rows
    are read first and the keys copied only where one of them is not finite; on a GPU (where reading them would
    synchronise) and when traced (where values cannot be read) they are always zeroed, in a copy."""
    if key_valid is None or all_true(key_valid):
        return key
    if key.device.type == "cpu" and not (torch.compiler.is_compiling() or torch.jit.is_tracing()):
        b, j = (~key_valid).nonzero(as_tuple=True)
        if bool(torch.isfinite(key[b, :, j]).all()):
            return key
    return key.masked_fill(~key_valid[:, None, :, None].to(key.device), 0)


def allowed_mask(
    pattern, B: int, H: int, q_len: int, kv_len: int, key_valid=None, device=None
) -> torch.Tensor:
    """(B, H, q_len, kv_len) bool, or (B, 1, q_len, kv_len) when the rule is the same for every head (it
    broadcasts): the bound pattern's rule, and padding keys removed. Nothing to ask the rule of an empty batch or
    sequence (patterns chosen per row, LSH and top-k, have no row to stack)."""
    if B * H * q_len * kv_len == 0:
        return torch.zeros(B, H, q_len, kv_len, dtype=torch.bool, device=device)
    m = pattern.dense_mask(q_len, kv_len, device=device)
    while m.dim() < 4:
        m = m.unsqueeze(0)
    m = m.to(device).expand(B, m.shape[1] if m.shape[1] == 1 else H, q_len, kv_len)
    if key_valid is not None:
        m = m & key_valid[:, None, None, :].to(device)
    return m


def dense_attention(
    query, key, value, allowed: torch.Tensor, scale: float, dropout_p: float = 0.0, keep=None
):
    """softmax(q k^T * scale) v over ``allowed`` keys; rows with no allowed key give zeros. Computed
    in float32 (float64 stays float64). Dropout keeps the probabilities ``keep`` (bool, broadcastable to
    the scores; ``dropout.keep_mask``: the blocked kernels' mask)."""
    cdt = compute_dtype(query.dtype)
    scores = torch.matmul(query.to(cdt), key.to(cdt).transpose(-1, -2)) * scale  # (B, H, q, kv)
    scores = scores.masked_fill(~allowed, float("-inf"))
    any_key = allowed.any(-1, keepdim=True)
    probs = torch.softmax(scores.masked_fill(~any_key, 0.0), dim=-1) * any_key
    if dropout_p > 0.0:
        if keep is None:
            raise ValueError(f"dropout_p={dropout_p} needs the mask of kept probabilities (keep)")
        probs = probs * keep / (1.0 - dropout_p)
    return torch.matmul(probs, value.to(cdt)).to(query.dtype)


def sdpa_attention(query, key, value, allowed: torch.Tensor, scale: float, dropout_p: float = 0.0):
    """The same masked softmax through torch's fused ``scaled_dot_product_attention`` (flash kernel on
    CPU, forward and backward), in the input dtype. Rows with no allowed key attend everything inside
    the kernel (no NaN) and are zeroed after it, so they give zeros and no gradient."""
    any_key = allowed.any(-1, keepdim=True)  # (B, H, q, 1)
    mask = allowed | ~any_key
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout_p, scale=scale)
    return out if all_true(any_key) else out * any_key.to(out.dtype)


def dense_weights(query, key, allowed: torch.Tensor, scale: float) -> torch.Tensor:
    """The attention probabilities (B, H, q, kv) of the reference, for ``output_attentions``."""
    cdt = compute_dtype(query.dtype)
    scores = torch.matmul(query.to(cdt), key.to(cdt).transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    any_key = allowed.any(-1, keepdim=True)
    return torch.softmax(scores.masked_fill(~any_key, 0.0), dim=-1) * any_key


__all__ = [
    "all_true",
    "allowed_mask",
    "compute_dtype",
    "dense_attention",
    "dense_weights",
    "sdpa_attention",
    "zero_padding_keys",
]
