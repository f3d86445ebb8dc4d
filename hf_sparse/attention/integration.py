"""``attn_implementation="hf_sparse"``: sparse attention inside any transformers model whose attention
layers dispatch through ``AttentionInterface`` (BERT, RoBERTa, ModernBERT, Llama, Mistral, ...).

:func:`register_attention` (called on ``import hf_sparse``) registers, under the one name
``"hf_sparse"``:

* :func:`sparse_attention_forward` with ``transformers.AttentionInterface``;
* :func:`sparse_attention_mask` with ``transformers.masking_utils.AttentionMaskInterface``. Without a
  mask function of the same name, transformers hands the attention function ``attention_mask=None``
  and padding is silently dropped. Ours never returns ``None`` and never builds an n x n tensor: it
  returns a :class:`SparseMask`, which carries the ``(batch, kv_len)`` padding plus the offsets of
  the call (KV cache), whether the layer's mask is causal, and the model's own sliding window.

A remote-code bundle's copy of this module also registers them under :data:`OWN_ATTN_IMPLEMENTATION`, where
the bundle's own models find them (see :func:`register_attention`).

Where the pattern comes from (the model config):

* ``config.attention_pattern`` (required): one pattern spec (a dict such as
  ``{"type": "sliding_window", "window": 512}``, a registered name, or a
  :class:`~hf_sparse.patterns.Pattern`, which :func:`check_config` replaces with its ``to_dict()``, and
  which any config's ``to_dict()`` (so ``repr``, ``save_pretrained``) writes as that spec, whatever the
  attention implementation) for every layer, or a list with one spec per layer, indexed by the
  attention module's ``layer_idx``. In an encoder-decoder (BART, ...) both stacks count ``layer_idx``
  from 0: entry i serves encoder layer i and decoder self-attention layer i, and the list has
  ``max(encoder_layers, decoder_layers)`` entries. A model whose self-attention modules have no ``layer_idx``
  (DistilBERT) takes one spec for every layer: a list raises a ``ValueError`` when the model is built or switched;
* ``config.attention_backend`` (default ``"auto"``) and ``config.attention_block_size`` (default
  ``None``) are passed to :func:`~hf_sparse.sparse_attention`.

What the attention function computes, for query position i and key position j of one layer: the
pattern's rule, and

* ``j <= i`` when the layer's mask is causal (the transformers mask function of the layer is
  ``causal_mask_function``-based, else the module's ``is_causal``): the pattern is intersected
  with :class:`~hf_sparse.patterns.Causal` unless it is causal already;
* the model's own sliding window when transformers built a sliding-window mask for the layer
  (Mistral's ``config.sliding_window``, ModernBERT's local layers): it is *honoured*, by
  intersection: causal layers keep ``0 <= i - j < sliding_window``, bidirectional ones
  ``|i - j| <= sliding_window``, exactly as transformers' own masks;
* padding keys (``attention_mask == 0``) are never attended; a query with no allowed key outputs
  zeros. Models that turn the 2D mask into a ``(batch, 1, 1, kv_len)`` key-padding mask themselves
  (LayoutLM, MarkupLM) are read exactly: bool ``True``, or additive ``0``, is a token, additive
  ``<= -1e4`` (``finfo.min``, ``-10000``, ``-inf``) padding; other values raise a ``ValueError``.

Positions count from each row's first token: the left padding of the 2D ``attention_mask`` (its
leading zeros) is taken off each row, so a left-padded row attends as it would alone (as
``generate`` needs for batched prompts). hf-sparse's own SparseTransformer models hand the mask
interface a :class:`PatternMask` instead, whose keys may also sit at any positions (pattern-aware
caches). The same attention function serves both.

Cross-attention attends every non-padding key (patterns describe self-attention). A call is
cross-attention when its module says so (an ``is_cross_attention`` attribute, BERT-style, or a
``...CrossAttention`` class), or when a decoder module (``is_decoder``, BART-style: one attention class
for the decoder's self- and cross-attention) runs a layer that is not causal: the decoder's
self-attention mask is causal (``create_causal_mask``), its cross-attention mask is not
(``create_bidirectional_mask``; ``module.is_causal`` where no mask says). An encoder-decoder whose
attention modules carry neither attribute (Moonshine) raises ``NotImplementedError`` for its
bidirectional layers, which could be either.

Dropout is applied only in training (``dropout_p = dropout`` when ``module.training``). Grouped-query
attention (fewer key/value heads) and KV-cache decoding (dynamic, sliding-window and static caches) are
supported for patterns fixed in advance; patterns that depend on the sequence length or the content
(random blocks, BigBird, LSH, top-k blocks) raise a ``ValueError`` when queries follow cached keys (the
cached and uncached results would differ): decode them with ``use_cache=False``.
``output_attentions=True`` (also where the model records the weights with hooks instead of passing the flag on,
as GPT-2 does) returns the dense attention probabilities, for at most
:data:`MAX_DENSE_ATTENTION_WEIGHTS` query-key pairs per head (``config.max_attention_weights_length``
squared where the config has that field, as SparseTransformer's does), and computes the output from them (as
eager attention does: gradients reach the returned weights); patterns fixed per input (random blocks, LSH
buckets, top-k blocks) are bound to the call's length, queries and keys as the kernels bind them.

A stock transformers model has no way to pass call-time global tokens (``global_attention_mask``):
a pattern with a ``Global()`` part (e.g. :class:`~hf_sparse.patterns.Longformer`) raises a
``ValueError`` for it instead of running as the bare window; fixed global tokens are
``Global(indices=...)`` or ``Global(every=...)``.

Models that ignore ``attn_implementation`` (Longformer, LED, BigBird, BigBirdPegasus, Reformer, PegasusX,
LongT5, and any transformers model whose attention does not go through ``AttentionInterface``) raise a
``ValueError`` when asked for ``"hf_sparse"``, instead of silently running their own attention. So does a
model that built any transformers ``*Attention*`` module running attention code of its own, with no
dispatching module inside it (Informer's ProbSparse attention, the linear attention layers of hybrids such as
MiniMax; cross-attention and attention-pooling modules excepted: they attend every key, as here).
:func:`register_attention` wraps ``PreTrainedModel.get_correct_attn_implementation`` (the check
every model runs in ``__init__``, so also ``from_pretrained(..., attn_implementation=...)`` and
``config._attn_implementation = "hf_sparse"`` before construction), ``PreTrainedModel.post_init`` (run at
the end of ``__init__``, once the modules exist) and
``PreTrainedModel.set_attn_implementation``, which runs the model's ``get_correct_attn_implementation`` first
(a class that overrides it decides for itself: a task model checks its backbone's pattern). The wrappers only
act when the requested name is ``"hf_sparse"``.

Not supported (each raises ``NotImplementedError``): packed sequences (``position_ids`` restarting
inside a row without ``attention_mask``), chunked attention (Llama 4), block-wise bidirectional
overlays and custom ``or_mask_function``/``and_mask_function`` overlays (multimodal models), 4D
attention masks other than key padding, logit soft-capping and attention sinks. Chunked attention is the
pattern ``{"type": "block_local", "block": attention_chunk_size}`` on a causal layer: where transformers builds
only the masks of the layer types in use (5.24 does; 5.10 builds the chunked one for every Llama 4), ``layer_types``
set to ``"full_attention"`` and a per-layer ``attention_pattern`` give Llama 4's chunked layers exactly that.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, replace

import torch
from transformers import AttentionInterface, PretrainedConfig, PreTrainedModel
from transformers.masking_utils import AttentionMaskInterface
from transformers.utils import logging
from transformers.utils.output_capturing import _active_collector

from .. import patterns as P
from . import fused
from .dense import all_true, allowed_mask, dense_weights, sdpa_attention
from .dispatch import BACKENDS, check_not_jit_tracing, resolve_pattern, sparse_attention, with_runtime_globals

logger = logging.get_logger(__name__)

#: the name under which the attention and mask functions are registered
ATTN_IMPLEMENTATION = "hf_sparse"

#: the name under which hf-sparse's own models (SparseTransformer) find these functions when their config says
#: ``"hf_sparse"``: the same name in the installed package; in a remote-code bundle's copy (``trust_remote_code``), a
#: name of its own, ``"hf_sparse:<module>"``, so that each bundle's models run the bundle's own code, whichever
#: other copy (another Hub model's, possibly of another hf-sparse version) holds ``"hf_sparse"``
OWN_ATTN_IMPLEMENTATION = (
    ATTN_IMPLEMENTATION if __name__.split(".", 1)[0] == "hf_sparse" else f"{ATTN_IMPLEMENTATION}:{__name__}"
)

#: ``output_attentions=True`` materialises (batch, heads, q_len, kv_len) probabilities; above this many
#: query-key pairs per head (4096 x 4096; for a model whose config has ``max_attention_weights_length``,
#: its square) it raises instead.
MAX_DENSE_ATTENTION_WEIGHTS = 4096 * 4096

#: transformers model families that never call ``AttentionInterface`` for their sparse attention (PegasusX and
#: LongT5: for their encoder's): they accept any ``attn_implementation`` and ignore it. Matched against the modules
#: of a model's MRO, before the model builds its modules (the modules it builds are checked as well).
IGNORING_FAMILIES = {
    "transformers.models.longformer.": "Longformer",
    "transformers.models.led.": "LED",
    "transformers.models.big_bird.": "BigBird",
    "transformers.models.bigbird_pegasus.": "BigBirdPegasus",
    "transformers.models.reformer.": "Reformer",
    "transformers.models.pegasus_x.": "PegasusX",  # its encoder: PegasusXGlobalLocalAttention
    "transformers.models.longt5.": "LongT5",  # its encoder: local or transient-global attention
}

# qualnames (prefixes) of transformers mask-function pieces that the attention function cannot honour: (what, advice)
_PACKED = (
    "packed sequences (position_ids restarting inside a row)",
    "pass padded rows with a 2D attention_mask instead of packing them, or use attn_implementation='sdpa'",
)
_UNSUPPORTED_OVERLAYS = {
    "packed_sequence_mask_function": _PACKED,
    "remap_positions_for_packed_sequence": _PACKED,
    "chunked_overlay": (
        "chunked attention (config.attention_chunk_size: Llama 4's chunked layers)",
        "use attn_implementation='sdpa' or 'eager' for this model; where transformers builds only the masks of the "
        "layer types in use (5.24 does), config.layer_types set to 'full_attention' and the chunked layers given "
        "{'type': 'block_local', 'block': attention_chunk_size} in a per-layer config.attention_pattern run them "
        "exactly with hf_sparse",
    ),
    "blockwise_overlay": (
        "block-wise bidirectional overlays (block_sequence_ids: image tokens attending each other in multimodal "
        "models)",
        "use attn_implementation='sdpa' or 'eager' for this model",
    ),
}
_UNSUPPORTED_KWARGS = ("softcap", "s_aux", "sinks", "position_bias")

# ----------------------------------------------------------------------------- the mask representation


@dataclass
class SparseMask:
    """What :func:`sparse_attention_forward` needs to mask one call, in O(batch * kv_len) memory.

    Returned by :func:`sparse_attention_mask` where transformers would build a 4D mask.

    Attributes:
        padding: ``(batch, kv_length)`` bool, ``True`` = token, ``False`` = padding (or an unfilled
            static-cache slot); ``None`` when no key is padding.
        batch_size, q_length, kv_length: the sizes of the call.
        q_offset: position of the first query (tokens already in the cache).
        kv_offset: position of the first key held by the cache (> 0 for sliding-window caches that
            dropped old keys). Query row r sits at ``q_offset + r``, key row s at ``kv_offset + s``.
        causal: the transformers mask of this layer is causal (``True``), bidirectional (``False``)
            or unknown (``None``: the attention function falls back to ``module.is_causal``).
        window: the model's own sliding window for this layer (transformers' ``local_size``:
            causal ``0 <= i - j < window``, bidirectional ``|i - j| <= window``), or ``None``.
        pattern: the pattern to run (set by :class:`PatternMask`; else read from the module's config).
        row_offsets: ``(batch,)`` left padding per row: the pattern counts positions from each row's
            first token (from :class:`PatternMask`, or the leading zeros of the 2D ``attention_mask``),
            or ``None``.
        key_positions: ``(kv_length,)`` positions of the keys when they are not consecutive (a
            pattern-aware cache that kept only some), or ``None``.
        global_tokens: ``(batch, kv_length)`` bool, Longformer-style global tokens, or ``None``.
        source: the :class:`PatternMask` this mask was made from (materialises the exact rule for
            ``output_attentions`` and non-consecutive keys), or ``None``.

    Like torch's ``BlockMask`` it exposes the logical ``shape`` ``(batch, 1, q_length, kv_length)``,
    ``ndim`` (4), ``dtype``, ``device``, ``to(device)`` and ``contiguous()``, so transformers code
    that passes masks around (``generate`` with a static cache) keeps it as it is.
    """

    padding: torch.Tensor | None
    batch_size: int
    q_length: int
    kv_length: int
    q_offset: int = 0
    kv_offset: int = 0
    causal: bool | None = None
    window: int | None = None
    pattern: P.Pattern | None = None
    row_offsets: torch.Tensor | None = None
    key_positions: torch.Tensor | None = None
    global_tokens: torch.Tensor | None = None
    source: PatternMask | None = None

    ndim = 4
    dtype = torch.bool

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.batch_size, 1, self.q_length, self.kv_length))

    @property
    def device(self) -> torch.device | None:
        return None if self.padding is None else self.padding.device

    def to(self, *args, **kwargs) -> SparseMask:
        """Move the padding tensor (a ``dtype`` argument is ignored: the padding stays bool)."""
        device = kwargs.get("device", args[0] if args and not isinstance(args[0], torch.dtype) else None)
        if self.padding is None or device is None:
            return self
        return replace(self, padding=self.padding.to(device))

    def contiguous(self) -> SparseMask:
        return self


def _qualnames(fn, depth: int = 0, seen=None) -> set[str]:
    """``__qualname__`` of ``fn`` and of every function captured in its closures (and_masks/or_masks
    keep their parts in a closure), to recognise transformers' mask-function building blocks."""
    seen = set() if seen is None else seen
    if fn is None or id(fn) in seen or depth > 8:
        return set()
    seen.add(id(fn))
    names = {getattr(fn, "__qualname__", "")}
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            content = cell.cell_contents
        except ValueError:  # empty cell
            continue
        items = content if isinstance(content, (tuple, list)) else (content,)
        for item in items:
            if callable(item) and not isinstance(item, (torch.Tensor, type)):
                names |= _qualnames(item, depth + 1, seen)
    return names


class PatternMask:
    """One layer's attention rule for one call, as a transformers mask function.

    ``PatternMask(...)(b, h, q_idx, kv_idx)`` says whether query position ``q_idx`` may attend key
    row ``kv_idx`` (transformers' ``mask_function`` signature, evaluated on broadcast index tensors
    by ``sdpa_mask``/``eager_mask`` with ``kv_offset=0``): the pattern at the row-relative positions
    ``q_idx - row_offsets[b]`` and ``key_positions[kv_idx] - row_offsets[b]``, or either token
    global (causally for causal patterns and in a ``PerHead``'s causal heads), and never a padding key. With ``padding_queries_attend_self``
    (set for torch's SDPA, whose fused GPU kernels give NaN for a fully masked row) a padding query
    attends itself only; the models discard padding queries' outputs. The SparseTransformer models
    build one per distinct layer pattern and hand it to the mask interface of their
    ``attn_implementation``: ``"eager"``/``"sdpa"`` materialise it, ``"hf_sparse"``
    (:func:`sparse_attention_mask`) turns it into a :class:`SparseMask` without evaluating n x n pairs.

    Args:
        pattern: the layer's (bound) pattern.
        q_offset: position of the first query (tokens already seen).
        q_length: number of queries.
        key_positions: ``(kv_len,)`` long, the position of every key row.
        padding: ``(batch, kv_len)`` bool, ``False`` for padding keys, or ``None``.
        global_tokens: ``(batch, kv_len)`` bool global tokens (only without a cache: query row r is
            key row r), or ``None``.
        row_offsets: ``(batch,)`` long left padding per row, or ``None``.
        key_start: the first key position when the keys are known to be consecutive (no cache: 0),
            else ``None`` (checked on the positions: a data-dependent step that ``torch.export`` avoids).
    """

    def __init__(
        self,
        pattern,
        q_offset,
        q_length,
        key_positions,
        padding=None,
        global_tokens=None,
        row_offsets=None,
        key_start=None,
    ):
        self.pattern = pattern
        self.key_start = key_start
        self.padding_queries_attend_self = False
        self.q_offset, self.q_length = int(q_offset), int(q_length)
        self.key_positions = key_positions
        self.padding = padding
        self.global_tokens = global_tokens
        self.row_offsets = row_offsets

    def __call__(self, b, h, q_idx, kv_idx):
        kpos = self.key_positions[kv_idx]
        qpos = q_idx
        if self.row_offsets is not None:
            off = self.row_offsets[b]
            qpos, kpos = qpos - off, kpos - off
        allowed = self.pattern.mask_mod(b, h, qpos, kpos)
        if self.global_tokens is not None:
            g = self.global_tokens
            extra = g[b, q_idx - self.q_offset] | g[b, kv_idx]
            if self.pattern.is_causal:  # added global attention stays causal
                extra = extra & (qpos >= kpos)
            elif (causal := _causal_heads(self.pattern, h, g.device)) is not None:  # a PerHead's causal heads
                extra = extra & ((qpos >= kpos) | ~causal)
            allowed = allowed | extra
        if self.padding is not None:
            allowed = allowed & self.padding[b, kv_idx]
            if self.padding_queries_attend_self:
                row = (
                    q_idx - self.q_offset + (self.key_positions.shape[0] - self.q_length)
                )  # the query's key row
                allowed = allowed | (~self.padding[b, row] & (kv_idx == row))
        return allowed

    def dense(self, batch_size: int, num_heads: int) -> torch.Tensor:
        """``(batch, 1 or num_heads, q_len, kv_len)`` bool: the rule, materialised."""
        device = self.key_positions.device
        heads = 1 if self.pattern.heads() is None else num_heads  # PerHead, also in a combination
        b = torch.arange(batch_size, device=device)[:, None, None, None]
        h = torch.arange(heads, device=device)[None, :, None, None]
        q = torch.arange(self.q_offset, self.q_offset + self.q_length, device=device)[None, None, :, None]
        kv = torch.arange(self.key_positions.shape[0], device=device)[None, None, None, :]
        return self(b, h, q, kv).expand(batch_size, heads, self.q_length, self.key_positions.shape[0])


def _causal_heads(pattern: P.Pattern, h, device) -> torch.Tensor | None:
    """Whether the heads ``h`` (an index or index tensor) of a per-head ``pattern`` (a ``PerHead``, also in a
    combination) are causal, as a bool tensor, or ``None`` when no head is (or the pattern is not per-head): the
    causal heads keep added global tokens causal, as ``dispatch.with_runtime_globals`` adds them."""
    heads = pattern.heads()
    if heads is None or not any(p.is_causal for p in heads):
        return None
    return torch.tensor([p.is_causal for p in heads], device=device)[h]


def _is_pattern_mask(fn) -> bool:
    """A PatternMask of this module or of another copy of it (a bundle saved by an hf-sparse version whose models
    looked their functions up under ``"hf_sparse"`` hands its masks to whichever copy holds that name)."""
    return isinstance(fn, PatternMask) or (
        type(fn).__name__ == "PatternMask" and hasattr(fn, "key_positions") and hasattr(fn, "dense")
    )


def _from_pattern_mask(mf: PatternMask, batch_size: int) -> SparseMask:
    kp = mf.key_positions
    pattern = mf.pattern if isinstance(mf.pattern, P.Pattern) else P.from_dict(mf.pattern.to_dict())
    kv_len = kp.shape[0]
    if mf.key_start is not None:
        start, consecutive = mf.key_start, True
    else:
        start = int(kp[0]) if kv_len else 0
        consecutive = kv_len == 0 or bool((kp == torch.arange(start, start + kv_len, device=kp.device)).all())
    # the kernels see key rows from 0: a cache that dropped its first keys is fine for a translation-invariant
    # pattern only (else the rule is materialised over the keys' positions)
    consecutive = consecutive and (start == 0 or pattern.translation_invariant)
    padding = mf.padding
    if padding is not None and all_true(padding):
        padding = None
    return SparseMask(
        padding, int(batch_size), mf.q_length, kv_len, mf.q_offset, start if consecutive else 0,
        causal=bool(pattern.is_causal), pattern=pattern, row_offsets=mf.row_offsets,
        key_positions=None if consecutive else kp, global_tokens=mf.global_tokens, source=mf,
    )  # fmt: skip


def sparse_attention_mask(
    batch_size: int,
    q_length: int | None = None,
    kv_length: int | None = None,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function=None,
    attention_mask: torch.Tensor | None = None,
    local_size: int | None = None,
    use_vmap: bool = False,
    device="cpu",
    **kwargs,
) -> SparseMask:
    """The ``AttentionMaskInterface`` function of ``"hf_sparse"`` (same arguments as
    ``transformers.masking_utils.sdpa_mask``): returns a :class:`SparseMask`, never ``None`` and
    never an n x n tensor.

    ``attention_mask`` is the 2D mask over every token seen so far, ``(batch, >= kv_offset)``; keys
    ``kv_offset .. kv_offset + kv_length - 1`` are kept (missing columns count as padding, as in
    transformers). ``mask_function`` is only inspected, never evaluated on n x n pairs: it tells
    whether the layer is causal, and overlays the attention function cannot honour raise
    ``NotImplementedError`` (packed sequences, chunked attention, block-wise overlays; custom
    ``or_mask_function``/``and_mask_function``, which transformers signals with ``use_vmap=True``).
    A :class:`SparseMask` passed as ``attention_mask`` (built earlier by ``generate``) is returned
    as it is; a :class:`PatternMask` ``mask_function`` (SparseTransformer models) carries everything
    itself. Older transformers 5 releases call this with ``cache_position`` instead of ``q_length``/``q_offset``.
    """
    if isinstance(attention_mask, SparseMask):
        return attention_mask
    if _is_pattern_mask(mask_function):
        return _from_pattern_mask(mask_function, batch_size)
    if (cache_position := kwargs.get("cache_position")) is not None:  # older transformers 5 signature
        q_length, q_offset = cache_position.shape[0], int(cache_position[0]) if cache_position.numel() else 0
        device = cache_position.device
    if use_vmap:
        raise NotImplementedError(
            "attn_implementation='hf_sparse' cannot honour custom or_mask_function/and_mask_function mask "
            "overlays (use_vmap=True): they would need an n x n mask; use attn_implementation='sdpa' for this model"
        )
    names = _qualnames(mask_function)
    for prefix, (what, advice) in _UNSUPPORTED_OVERLAYS.items():
        if any(n.startswith(prefix) for n in names):
            raise NotImplementedError(f"attn_implementation='hf_sparse' does not support {what}; {advice}")
    is_causal = "causal_mask_function" in names
    is_bidirectional = "bidirectional_mask_function" in names
    causal = None if is_causal == is_bidirectional else is_causal

    q_offset, kv_offset = int(q_offset), int(kv_offset)
    padding = row_offsets = None
    if attention_mask is not None:
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
            shape = tuple(getattr(attention_mask, "shape", ()))
            raise ValueError(
                f"attention_mask must be a 2D (batch, seq) padding mask for attn_implementation='hf_sparse', "
                f"got {type(attention_mask).__name__} of shape {shape}"
            )
        keep = attention_mask.to(device=device, dtype=torch.bool)
        if (missing := kv_offset + kv_length - keep.shape[-1]) > 0:
            keep = torch.nn.functional.pad(keep, (0, missing), value=False)
        row_offsets = _left_padding(keep)  # positions count from each row's first token
        keep = keep[:, kv_offset : kv_offset + kv_length]  # (B, kv_length)
        padding = None if all_true(keep) else keep
    window = None if local_size is None else int(local_size)
    return SparseMask(
        padding, int(batch_size), int(q_length), int(kv_length), q_offset, kv_offset, causal, window,
        row_offsets=row_offsets,
    )  # fmt: skip


def _left_padding(keep: torch.Tensor) -> torch.Tensor | None:
    """``(batch,)`` number of leading padding positions of each row of the 2D ``keep`` mask, or ``None``
    when no row starts with padding."""
    lead = (keep.cumsum(-1) == 0).sum(-1)  # (B,)
    return None if all_true(lead == 0) else lead


# ----------------------------------------------------------------------------- patterns from the config


def _resolve_spec(spec, where: str) -> P.Pattern:
    if isinstance(spec, P.Pattern):
        return spec
    if not isinstance(spec, (dict, str)):
        raise TypeError(
            f"{where} must be a pattern spec dict, a registered pattern name or a Pattern, "
            f"got {type(spec).__name__} ({spec!r})"
        )
    try:
        return resolve_pattern(spec)
    except (KeyError, ValueError, TypeError) as e:
        raise type(e)(f"{where} = {spec!r} is not a valid pattern: {e}") from e


def _to_spec(spec, where: str):
    """``spec``, with a :class:`~hf_sparse.patterns.Pattern` replaced by its ``to_dict()`` (what a config
    can save); ``ValueError`` for a pattern that no spec describes."""
    if not isinstance(spec, P.Pattern):
        return spec
    try:
        return spec.to_dict()
    except (TypeError, ValueError, NotImplementedError) as e:
        raise ValueError(
            f"{where} = {spec!r} has no spec, so the config could not be saved: {e}; use a pattern built from "
            "its parameters (e.g. Global(indices=[...]) rather than Global.from_mask)"
        ) from e


def _decoder_layers(config) -> int | None:
    """The decoder's number of layers of an encoder-decoder config (BART's ``decoder_layers``, T5's
    ``num_decoder_layers``), else ``None``."""
    if not getattr(config, "is_encoder_decoder", False):
        return None
    n = getattr(config, "decoder_layers", None)
    n = getattr(config, "num_decoder_layers", None) if n is None else n
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def check_config(config) -> None:
    """Raise if ``config`` cannot drive ``attn_implementation="hf_sparse"``: ``attention_pattern``
    missing or invalid, a per-layer list whose length differs from ``num_hidden_layers`` (an
    encoder-decoder's: the larger of its encoder and decoder layer counts), or a bad
    ``attention_backend``/``attention_block_size``. A :class:`~hf_sparse.patterns.Pattern` in
    ``attention_pattern`` is replaced with its spec (``to_dict()``), so that the config saves as JSON."""
    spec = getattr(config, "attention_pattern", None)
    name = type(config).__name__
    if spec is None:
        raise ValueError(
            f"attn_implementation='hf_sparse' needs config.attention_pattern ({name} has none): set it to one "
            "pattern spec for every layer, e.g. config.attention_pattern = {'type': 'sliding_window', "
            "'window': 512}, or to a list with one spec per layer"
        )
    if isinstance(spec, (list, tuple)):
        n = getattr(config, "num_hidden_layers", None)
        n_dec = _decoder_layers(config)
        if n is not None and n_dec is not None and len(spec) != max(n, n_dec):
            raise ValueError(
                f"config.attention_pattern has {len(spec)} per-layer specs but {name} has {n} encoder and {n_dec} "
                f"decoder layers: entry i serves encoder layer i and decoder self-attention layer i, so give "
                f"{max(n, n_dec)} specs (or one spec for every layer)"
            )
        if n is not None and n_dec is None and len(spec) != n:
            raise ValueError(
                f"config.attention_pattern has {len(spec)} per-layer specs but config.num_hidden_layers is {n}"
            )
        for i, s in enumerate(spec):
            _resolve_spec(s, f"config.attention_pattern[{i}]")
        config.attention_pattern = [_to_spec(s, f"config.attention_pattern[{i}]") for i, s in enumerate(spec)]
    else:
        _resolve_spec(spec, "config.attention_pattern")
        config.attention_pattern = _to_spec(spec, "config.attention_pattern")
    backend = getattr(config, "attention_backend", None) or "auto"
    if backend not in BACKENDS:
        raise ValueError(f"config.attention_backend must be one of {BACKENDS}, got {backend!r}")
    block = getattr(config, "attention_block_size", None)
    if block is not None and (isinstance(block, bool) or not isinstance(block, int) or block <= 0):
        raise ValueError(f"config.attention_block_size must be a positive int or None, got {block!r}")


def _has_runtime_globals(pattern: P.Pattern) -> bool:
    """Whether ``pattern`` has a ``Global()`` part, whose tokens come from ``global_attention_mask`` at call time."""
    parts = getattr(pattern, "parts", None)
    if parts:
        return any(_has_runtime_globals(p) for p in parts)
    return isinstance(pattern, P.Global) and pattern.runtime


def _check_no_runtime_globals(pattern: P.Pattern, where: str, owner: str) -> None:
    if _has_runtime_globals(pattern):
        raise ValueError(
            f"{where} = {pattern!r} takes global tokens from global_attention_mask at call time (Global()), which "
            f"{owner} has no way to pass, so it would run without them; use fixed global tokens "
            "(Global(indices=[0]) or Global(every=k), e.g. SlidingWindow(window) | Global(indices=[0])) or a "
            "hf-sparse SparseTransformer (hf_sparse.conversion), which takes global_attention_mask"
        )


def _frozen(spec):
    """``spec`` as nested tuples that compare equal only for the same spec (a value's type included: ``1`` is not
    ``True``), or ``None`` where it holds anything but JSON values (a :class:`~hf_sparse.patterns.Pattern`)."""
    if isinstance(spec, dict):
        items = [(k, _frozen(v)) for k, v in spec.items()]
        return None if any(not isinstance(k, str) or v is None for k, v in items) else (dict, *items)
    if isinstance(spec, (list, tuple)):
        items = [_frozen(v) for v in spec]
        return None if any(v is None for v in items) else (list, *items)
    if spec is None or isinstance(spec, (str, int, float)):
        return (type(spec), spec)
    return None


def _module_pattern(module, spec, where: str) -> P.Pattern:
    """:func:`_resolve_spec`, kept on ``module`` with the spec it was resolved from: each call compares the config's
    spec with that one (a spec replaced or changed in place is resolved again), without ``resolve_pattern``'s
    ``json.dumps``, on which ``torch.compile`` would break the graph in every layer."""
    key = _frozen(spec)
    kept = getattr(module, "_hf_sparse_pattern", None)
    if key is not None and kept is not None and kept[0] == key:
        return kept[1]
    pattern = _resolve_spec(spec, where)
    if key is not None:
        module._hf_sparse_pattern = (key, pattern)
    return pattern


def pattern_for_module(module) -> P.Pattern:
    """The pattern ``config.attention_pattern`` gives the attention ``module`` (``module.config``;
    with a per-layer list, entry ``module.layer_idx``), before causality and the model's window."""
    config = getattr(module, "config", None)
    if config is None:
        raise ValueError(
            f"attn_implementation='hf_sparse' reads the pattern from the attention module's config, but "
            f"{type(module).__name__} has no `config` attribute"
        )
    spec = getattr(config, "attention_pattern", None)
    if spec is None:
        check_config(config)  # raises the message naming config.attention_pattern
    if isinstance(spec, (list, tuple)):
        layer_idx = getattr(module, "layer_idx", None)
        if not isinstance(layer_idx, int) or isinstance(layer_idx, bool):
            raise ValueError(
                f"config.attention_pattern is a per-layer list but {type(module).__name__} has no integer "
                f"`layer_idx` (got {layer_idx!r}); give one pattern spec for all layers instead"
            )
        if not 0 <= layer_idx < len(spec):
            raise ValueError(
                f"config.attention_pattern has {len(spec)} per-layer specs, no entry for layer_idx={layer_idx} "
                f"({type(module).__name__}); an encoder-decoder needs max(encoder_layers, decoder_layers) entries"
            )
        return _module_pattern(module, spec[layer_idx], f"config.attention_pattern[{layer_idx}]")
    return _module_pattern(module, spec, "config.attention_pattern")


# ----------------------------------------------------------------------------- the attention function


def _is_cross_attention(module, info: SparseMask | None) -> bool:
    """Whether this call of ``module`` is cross-attention (see the module docstring): the module says so, or
    a decoder module (``is_decoder``) runs a layer that is not causal."""
    if getattr(module, "is_cross_attention", False) or "CrossAttention" in type(module).__name__:
        return True
    causal = (
        info.causal if info is not None and info.causal is not None else getattr(module, "is_causal", None)
    )
    if causal is None or causal:
        return False
    if hasattr(module, "is_decoder"):
        return bool(module.is_decoder)
    if getattr(getattr(module, "config", None), "is_encoder_decoder", False):
        raise NotImplementedError(
            f"attn_implementation='hf_sparse' cannot tell whether {type(module).__name__} (layer_idx="
            f"{getattr(module, 'layer_idx', None)}) is the encoder's self-attention or the decoder's cross-attention "
            "(it has no `is_decoder` or `is_cross_attention` attribute); use attn_implementation='sdpa' for this model"
        )
    return False


#: in a ``(batch, 1, 1, kv_len)`` additive mask, the values at or below this one mark padding keys (transformers'
#: ``finfo(dtype).min``, BERT-era ``-10000.0``, ``-inf``); ``0`` marks tokens
_ADDITIVE_PADDING = -1e4


def _key_padding(attention_mask: torch.Tensor, module) -> torch.Tensor:
    """``(batch, kv_len)`` bool, ``True`` = token, from the ``(batch, 1, 1, kv_len)`` key-padding mask that some models
    build from the 2D mask themselves (LayoutLM, MarkupLM): bool (``True`` = token), or additive float (``0`` = token,
    ``<= -1e4`` = padding). Any other value raises: the mask would carry more than padding."""
    keys = attention_mask[:, 0, 0]  # (B, kv)
    if keys.dtype == torch.bool:
        return keys
    if not keys.is_floating_point():
        raise TypeError(
            f"the (batch, 1, 1, kv_len) attention mask reaching {type(module).__name__} must be bool (True = token) "
            f"or an additive float mask (0 = token, <= {_ADDITIVE_PADDING} = padding), got dtype {keys.dtype}"
        )
    token, padding = keys == 0, keys <= _ADDITIVE_PADDING
    if not all_true(token | padding):
        value = keys[~(token | padding)][0].item()
        raise ValueError(
            f"the additive (batch, 1, 1, kv_len) attention mask reaching {type(module).__name__} holds {value}, "
            f"neither 0 (token) nor <= {_ADDITIVE_PADDING} (padding): attn_implementation='hf_sparse' takes key "
            "padding only; use attn_implementation='eager' or 'sdpa' for this mask"
        )
    return token


def _mask_info(attention_mask, B: int, q_len: int, kv_len: int, module) -> SparseMask | None:
    """Normalise what reached the attention function into a SparseMask (or None: no information): a 2D
    ``(batch, kv_len)`` padding mask, or the ``(batch, 1, 1, kv_len)`` key-padding mask of :func:`_key_padding`."""
    if attention_mask is None or isinstance(attention_mask, SparseMask):
        return attention_mask
    key_padding = (
        isinstance(attention_mask, torch.Tensor)
        and attention_mask.dim() == 4
        and attention_mask.shape[1:3] == (1, 1)
    )
    if isinstance(attention_mask, torch.Tensor) and (attention_mask.dim() == 2 or key_padding):
        if (attention_mask.shape[0], attention_mask.shape[-1]) != (B, kv_len):
            raise ValueError(
                f"attention_mask reaching {type(module).__name__} must be (batch, kv_len) = ({B}, {kv_len}) or "
                f"(batch, 1, 1, kv_len), got {tuple(attention_mask.shape)}"
            )
        keep = _key_padding(attention_mask, module) if key_padding else attention_mask != 0
        return SparseMask(
            None if all_true(keep) else keep, B, q_len, kv_len, q_offset=kv_len - q_len,
            row_offsets=_left_padding(keep),
        )  # fmt: skip
    shape = tuple(getattr(attention_mask, "shape", ()))
    raise NotImplementedError(
        f"attn_implementation='hf_sparse' got a {type(attention_mask).__name__} attention mask of shape {shape} in "
        f"{type(module).__name__}: it never materialises n x n masks; pass the model a 2D (batch, seq) "
        "attention_mask (1 = token, 0 = padding), or, where the model builds such a mask itself, use "
        "attn_implementation='sdpa'"
    )


def sparse_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The ``AttentionInterface`` function of ``"hf_sparse"``.

    Args:
        module: the calling attention module; its ``config`` gives the pattern
            (:func:`pattern_for_module`), backend and block size.
        query: ``(batch, heads, q_len, head_dim)``; key, value: ``(batch, kv_heads, kv_len, head_dim)``
            with ``kv_heads`` dividing ``heads``.
        attention_mask: a :class:`SparseMask` (from :func:`sparse_attention_mask`), a 2D
            ``(batch, kv_len)`` padding mask, or ``None`` (no padding; causality from ``is_causal`` or
            ``module.is_causal``). Anything else raises.
        dropout: attention dropout probability, applied only when ``module.training``.
        scaling: score scale (default ``1 / sqrt(head_dim)``).
        is_causal: used only when the mask does not say whether the layer is causal.
        kwargs: ``output_attentions=True`` also returns the dense probabilities (at most
            :data:`MAX_DENSE_ATTENTION_WEIGHTS` pairs per head, or ``config.max_attention_weights_length``
            squared) and computes the output from them, so
            gradients reach them (as in eager attention); other transformers kwargs are ignored,
            except ``softcap``, ``s_aux``, ``sinks`` and ``position_bias``, which raise.

    Returns: ``(attn_output (batch, q_len, heads, head_dim), attn_weights (batch, heads, q_len, kv_len) or None)``.
    """
    check_not_jit_tracing()
    for name in _UNSUPPORTED_KWARGS:
        if kwargs.get(name) is not None:
            raise NotImplementedError(
                f"attn_implementation='hf_sparse' does not support `{name}` ({type(module).__name__}); "
                "use attn_implementation='eager' for this model"
            )
    config = getattr(module, "config", None)
    B, H, q_len, _ = query.shape
    kv_total = key.shape[2]
    info = _mask_info(attention_mask, B, q_len, kv_total, module)
    pattern = None if info is None else info.pattern  # set by a PatternMask (SparseTransformer models)
    backend = getattr(config, "attention_backend", None) or "auto"
    block_size = getattr(config, "attention_block_size", None)
    if info is not None and info.kv_length != kv_total:
        raise ValueError(
            f"the hf_sparse mask describes {info.kv_length} keys but {type(module).__name__} got {kv_total} "
            "(was the mask built for another layer or cache?)"
        )
    padding = None if info is None else info.padding
    dropout_p = float(dropout) if module.training else 0.0
    scale = None if scaling is None else float(scaling)
    output_attentions = _output_attentions(module, kwargs)

    # ---- a PatternMask (SparseTransformer models) whose rule must be materialised: keys at
    # non-consecutive positions (pattern-aware cache), weights to return, or left-padded rows under
    # torch.export (the per-row kernel calls below slice at data-dependent offsets; the rule indexes them).
    # Weights of a pattern still to be bound (random blocks, LSH, top-k: encoders only, so no cache and no
    # left padding) come from the general path below, bound to these queries and keys as the kernels bind it
    exporting_rows = torch.compiler.is_exporting() and info is not None and info.row_offsets is not None
    if (
        info is not None
        and info.source is not None
        and (info.key_positions is not None or (output_attentions and pattern.bound) or exporting_rows)
    ):
        limit, name = MAX_DENSE_ATTENTION_WEIGHTS, "MAX_DENSE_ATTENTION_WEIGHTS"
        if output_attentions:
            limit, name = _max_dense_pairs(module)
        if q_len * kv_total > limit:
            raise ValueError(
                f"attn_implementation='hf_sparse' materialises the attention mask here; q_len * kv_len = "
                f"{q_len} * {kv_total} exceeds {name} = {limit}"
            )
        allowed = info.source.dense(B, H)  # (B, 1|H, q, kv)
        return _attend_materialised(
            query, key, value, allowed, _scale(scale, query), dropout_p, output_attentions
        )

    # ---- cross-attention: every non-padding key (dense; the decoder may be longer than the encoder)
    if _is_cross_attention(module, info):
        if output_attentions:
            _check_weights_size(q_len, kv_total, module)
        keep = (
            padding if padding is not None else torch.ones(B, kv_total, dtype=torch.bool, device=query.device)
        )
        allowed = keep[:, None, None, :]  # (B, 1, 1, kv)
        return _attend_materialised(
            query, key, value, allowed, _scale(scale, query), dropout_p, output_attentions
        )
    if pattern is None:  # a stock model: the pattern from its config, no call-time global tokens
        pattern = pattern_for_module(module)
        _check_no_runtime_globals(pattern, "config.attention_pattern", type(module).__name__)
    layer_pattern = pattern  # before causality and the model's window are added

    # ---- causality and the model's own sliding window
    if info is not None and info.causal is not None:
        causal = info.causal
    elif is_causal is not None:
        causal = bool(is_causal)
    else:
        causal = bool(getattr(module, "is_causal", False))
    if info is None and kwargs.get("sliding_window") is not None:
        raise ValueError(
            f"{type(module).__name__} asks for sliding_window={kwargs['sliding_window']} but no hf_sparse mask "
            "reached it, so its window convention is unknown; build masks with transformers.masking_utils"
        )
    if causal and not pattern.is_causal:  # one object per pattern, so what dispatch keeps on it is reused
        pattern = pattern.derived("& Causal()", lambda p=pattern: p & P.Causal())

    # ---- align queries with keys: queries must be the last rows of the keys
    kv_len = kv_total
    if info is not None:
        end = info.q_offset + q_len - info.kv_offset  # one past the last query, in key rows
        if end > kv_total or end < q_len:
            raise ValueError(
                f"queries at positions {info.q_offset}..{info.q_offset + q_len - 1} do not fit the {kv_total} keys "
                f"from position {info.kv_offset} given to {type(module).__name__}"
            )
        if end < kv_total and causal:  # static cache: later slots are empty (and in the future)
            kv_len = end
            key, value = key[:, :, :end], value[:, :, :end]  # (B, Hkv, end, D)
            padding = None if padding is None else padding[:, :end]
        if info.kv_offset > 0 and not pattern.translation_invariant:
            raise ValueError(
                f"{pattern!r} depends on absolute positions, but the KV cache of layer "
                f"{getattr(module, 'layer_idx', None)} dropped the first {info.kv_offset} keys (sliding-window "
                "cache); use a translation-invariant pattern (sliding window, dilated, strided) or a full cache"
            )
        w = info.window
        if w is not None and (kv_len - 1 >= w if causal else kv_len - 1 > w):  # the window can bite
            window = P.SlidingWindow(window=w, causal=True) if causal else P.SlidingWindow(2 * w + 1)
            pattern = pattern.derived(("& window", w, causal), lambda p=pattern: p & window)
    if kv_len > q_len and not pattern.bound:
        raise ValueError(
            f"{layer_pattern!r} depends on the sequence length or on the queries and keys, so it cannot be decoded "
            f"incrementally: layer {getattr(module, 'layer_idx', None)} ({type(module).__name__}) got {q_len} "
            f"queries after {kv_len - q_len} cached keys, and would attend otherwise than without the cache; "
            "run it with use_cache=False, or use a pattern fixed in advance (sliding window, dilated, fixed, "
            "Global(indices=...))"
        )
    g = None if info is None else info.global_tokens
    rows = None if info is None or pattern.translation_invariant else info.row_offsets
    if rows is not None and torch.compiler.is_exporting():
        # the per-row calls below slice at data-dependent offsets, which torch.export cannot trace: the rule
        # indexes them instead (PatternMask), materialised
        if not pattern.bound:
            raise NotImplementedError(
                f"torch.export cannot run {layer_pattern!r} on left-padded rows (it is bound to each row's length "
                "or content); export without an attention_mask, or with a pattern fixed in advance"
            )
        if q_len * kv_len > MAX_DENSE_ATTENTION_WEIGHTS:
            raise ValueError(
                f"attn_implementation='hf_sparse' materialises the attention mask here; q_len * kv_len = "
                f"{q_len} * {kv_len} exceeds MAX_DENSE_ATTENTION_WEIGHTS = {MAX_DENSE_ATTENTION_WEIGHTS}"
            )
        positions = torch.arange(kv_len, device=query.device)
        rule = PatternMask(pattern, kv_len - q_len, q_len, positions, padding, g, rows, key_start=0)
        out, weights = _attend_materialised(
            query, key, value, rule.dense(B, H), _scale(scale, query), dropout_p, output_attentions
        )
        if weights is not None and kv_total > kv_len:  # static cache: slots after the last query
            weights = torch.nn.functional.pad(weights, (0, kv_total - kv_len))
        return out, weights
    if output_attentions:
        allowed = _allowed(query, key, with_runtime_globals(pattern, g), padding, module, rows)
        out, weights = _attend_materialised(query, key, value, allowed, _scale(scale, query), dropout_p, True)
        if kv_total > kv_len:  # static cache: slots after the last query are never attended
            weights = torch.nn.functional.pad(weights, (0, kv_total - kv_len))
        return out, weights
    if rows is not None:
        out = _per_row(query, key, value, pattern, padding, g, rows, scale, dropout_p, backend, block_size)
    else:
        out = sparse_attention(
            query, key, value, pattern, padding, g, scale, dropout_p, backend, block_size=block_size
        )
    return fused.contiguous(out.transpose(1, 2)), None  # (B, q, H, D)


def _output_attentions(module, kwargs) -> bool:
    """Whether the call returns the attention weights: ``output_attentions`` where the model passes it to the attention
    function, else whether transformers' output recorder (``capture_outputs``), which hooks the attention modules,
    collects attentions in this call (GPT-2 drops the flag before its attention layers, and records the weights they
    return). A module without forward hooks has no recorder (and ``torch.compile`` need not read its context)."""
    if kwargs.get("output_attentions") is not None:
        return bool(kwargs["output_attentions"])
    if not module._forward_hooks:
        return False
    collected = _active_collector.get()
    return collected is not None and any(key.endswith("attentions") for key in collected)


def _max_dense_pairs(module) -> tuple[int, str]:
    """Query-key pairs per head that ``output_attentions`` may materialise, and the setting's name: the square
    of ``config.max_attention_weights_length`` where the module's config has one (SparseTransformer), else
    :data:`MAX_DENSE_ATTENTION_WEIGHTS` (stock transformers models)."""
    length = getattr(getattr(module, "config", None), "max_attention_weights_length", None)
    if length is None:
        return MAX_DENSE_ATTENTION_WEIGHTS, "MAX_DENSE_ATTENTION_WEIGHTS"
    return length * length, "config.max_attention_weights_length ** 2"


def _check_weights_size(q_len: int, kv_len: int, module) -> None:
    limit, name = _max_dense_pairs(module)
    if q_len * kv_len > limit:
        raise ValueError(
            f"output_attentions=True with attn_implementation='hf_sparse' materialises the dense attention "
            f"weights; q_len * kv_len = {q_len} * {kv_len} exceeds {name} = {limit} (hf_sparse.attention.integration)"
        )


def _allowed(query, key, pattern, padding, module, row_offsets=None) -> torch.Tensor:
    """(B, 1|H, q, kv) bool: ``pattern`` (queries aligned to the end of the keys) minus padding keys; with
    ``row_offsets``, each row from its first key on, as :func:`_per_row` runs it."""
    B, H, q_len, _ = query.shape
    kv_len = key.shape[2]
    _check_weights_size(q_len, kv_len, module)
    rep = key if key.shape[1] == H else key.repeat_interleave(H // key.shape[1], dim=1)
    if row_offsets is None:
        bound = P.base.bind_part(pattern, q_len, kv_len, query=query, key=rep, key_valid=padding)
        return allowed_mask(bound, B, H, q_len, kv_len, padding, device=query.device)
    out = torch.zeros(B, H, q_len, kv_len, dtype=torch.bool, device=query.device)
    for b, off in enumerate(row_offsets.tolist()):
        first_q = min(max(off - (kv_len - q_len), 0), q_len)  # queries sit at the end of the keys
        if first_q == q_len or off >= kv_len:
            continue
        q, k = query[b : b + 1, :, first_q:], rep[b : b + 1, :, off:]
        valid = None if padding is None else padding[b : b + 1, off:]
        bound = P.base.bind_part(pattern, q.shape[2], k.shape[2], query=q, key=k, key_valid=valid)
        out[b : b + 1, :, first_q:, off:] = allowed_mask(
            bound, 1, H, q.shape[2], k.shape[2], valid, device=query.device
        )
    return out


def _attend_materialised(query, key, value, allowed, scale, dropout_p, output_attentions):
    """Attention over a materialised ``allowed`` mask, output computed from the returned weights (so
    gradients reach them, as in eager attention). Rows with no allowed key give zeros."""
    H = query.shape[1]
    if key.shape[1] != H:
        key = key.repeat_interleave(H // key.shape[1], dim=1)  # (B, H, kv, D)
        value = value.repeat_interleave(H // value.shape[1], dim=1)
    if not output_attentions:
        return sdpa_attention(query, key, value, allowed, scale, dropout_p).transpose(1, 2).contiguous(), None
    weights = dense_weights(query, key, allowed, scale).to(query.dtype)  # (B, H, q, kv)
    probs = torch.nn.functional.dropout(weights, p=dropout_p, training=dropout_p > 0)
    out = torch.matmul(probs, value)  # (B, H, q, D)
    return out.transpose(1, 2).contiguous(), probs


def _per_row(query, key, value, pattern, padding, g, row_offsets, scale, dropout_p, backend, block_size):
    """A pattern that depends on absolute positions, on a left-padded batch: each row runs from its first
    token, so that it attends exactly as it would alone. Queries before a row's first token get zeros."""
    q_len, kv_len = query.shape[2], key.shape[2]
    out = query.new_zeros(query.shape)  # (B, H, q, D)
    for b, off in enumerate(row_offsets.tolist()):
        first_q = min(max(off - (kv_len - q_len), 0), q_len)  # queries sit at the end of the keys
        if first_q == q_len or off >= kv_len:
            continue
        rows = slice(b, b + 1)
        out[rows, :, first_q:] = sparse_attention(
            query[rows, :, first_q:], key[rows, :, off:], value[rows, :, off:], pattern,
            None if padding is None else padding[rows, off:], None if g is None else g[rows, off:],
            scale, dropout_p, backend, block_size=block_size,
        )  # fmt: skip
    return out


def _scale(scale, query) -> float:
    return query.shape[-1] ** -0.5 if scale is None else scale


# ----------------------------------------------------------------------------- models that ignore it


def _ignoring_family(model) -> str | None:
    """The family name if ``model`` would ignore ``attn_implementation`` (see module docstring)."""
    cls = type(model)
    for klass in cls.__mro__:
        for prefix, family in IGNORING_FAMILIES.items():
            if klass.__module__.startswith(prefix):
                return family
    # any other transformers model whose attention layers never call AttentionInterface (transformers'
    # own heuristic, the one behind set_attn_implementation's warning)
    if cls.__module__.startswith("transformers.models.") and not cls._can_set_attn_implementation():
        return cls.__name__
    return None


@functools.cache
def _dispatches(cls: type) -> bool | None:
    """Whether the code of ``cls`` (or of a transformers model class it derives from) hands attention to
    ``AttentionInterface`` (``ALL_ATTENTION_FUNCTIONS``); ``None`` where the source cannot be read."""
    try:
        return any(
            "ALL_ATTENTION_FUNCTIONS" in inspect.getsource(klass)
            for klass in cls.__mro__
            if klass.__module__.startswith("transformers.models.")
        )
    except (OSError, TypeError):
        return None


def _own_attention_module(model) -> str | None:
    """``"<name> (<class>)"`` of the first module of ``model`` that runs attention code of its own: a transformers
    ``*Attention*`` module whose code never calls ``AttentionInterface`` and that holds no module that does
    (``BertAttention`` holds the dispatching ``BertSelfAttention``), e.g. PegasusX's global-local, LongT5's local,
    Informer's ProbSparse or MiniMax's linear ("lightning") attention. Cross-attention and attention-pooling modules
    do not count (they attend every key, as hf-sparse's cross-attention does), nor do nested sub-models with a
    config of their own (checked with it). ``None`` when there is none, or before the modules exist (``__init__``:
    the ``post_init`` check then finds them)."""

    def walk(module, name) -> tuple[str | None, bool]:
        """(the module found under ``module``, whether a dispatching module is inside it)"""
        held = False
        for child_name, child in module.named_children():
            if isinstance(child, PreTrainedModel) and child.config is not model.config:
                continue
            found, child_held = walk(child, f"{name}.{child_name}" if name else child_name)
            if found is not None:
                return found, True
            held = held or child_held
        cls = type(module)
        if "Attention" not in cls.__name__ or not cls.__module__.startswith("transformers.models."):
            return None, held
        dispatches = _dispatches(cls)
        if dispatches:
            return None, True
        if held or dispatches is None or "Cross" in cls.__name__ or "Pooling" in cls.__name__:
            return None, held
        return f"{name} ({cls.__name__})", False

    return walk(model, "")[0]


def _module_without_layer_idx(model) -> str | None:
    """``"<name> (<class>)"`` of the first self-attention module of ``model`` that hands attention to
    ``AttentionInterface`` but has no integer ``layer_idx`` (DistilBERT's), so cannot pick its entry of a per-layer
    ``config.attention_pattern``; ``None`` when there is none (cross-attention modules attend every key and need none),
    when the pattern is not a list, or before the modules exist. Nested sub-models with a config of their own are
    checked with it."""
    if not isinstance(getattr(model.config, "attention_pattern", None), (list, tuple)):
        return None

    def walk(module, name) -> str | None:
        for child_name, child in module.named_children():
            if isinstance(child, PreTrainedModel) and child.config is not model.config:
                continue
            found = walk(child, f"{name}.{child_name}" if name else child_name)
            if found is not None:
                return found
        cls = type(module)
        if (
            "Attention" not in cls.__name__
            or not cls.__module__.startswith("transformers.models.")
            or "Cross" in cls.__name__
            or getattr(module, "is_cross_attention", False)
            or not _dispatches(cls)
        ):
            return None
        layer_idx = getattr(module, "layer_idx", None)
        if isinstance(layer_idx, int) and not isinstance(layer_idx, bool):
            return None
        return f"{name} ({cls.__name__})"

    return walk(model, "")


def check_model(model) -> None:
    """Raise ``ValueError`` unless ``model`` can run ``attn_implementation="hf_sparse"``: it must route
    its attention through ``AttentionInterface`` (its family, and every attention module it has built:
    :func:`_own_attention_module`) and (unless it is a composite model whose sub-configs carry the patterns)
    have a valid ``config.attention_pattern`` (:func:`check_config`)."""
    family = _ignoring_family(model)
    if family is not None:
        raise ValueError(
            f"{type(model).__name__} cannot use attn_implementation='hf_sparse': {family} models run their own "
            "attention code and ignore attn_implementation, so the request would be a silent no-op. Convert "
            "the checkpoint to a hf-sparse SparseTransformer with any pattern instead (hf_sparse.conversion, "
            "e.g. patterns.Longformer(window=512)), or keep this class with its own attention."
        )
    module = _own_attention_module(model)
    if module is not None:
        raise ValueError(
            f"{type(model).__name__} cannot use attn_implementation='hf_sparse': its module {module} runs its own "
            "attention code and ignores attn_implementation, so the request would be silently ignored there. "
            "Keep this model with its own attention (attn_implementation='eager', 'sdpa', ...)."
        )
    config = model.config
    if getattr(config, "attention_pattern", None) is None and getattr(config, "sub_configs", None):
        return  # composite model: its sub-models check their own configs
    check_config(config)
    module = _module_without_layer_idx(model)
    if module is not None:
        raise ValueError(
            f"config.attention_pattern is a per-layer list but the attention module {module} of "
            f"{type(model).__name__} has no integer `layer_idx` to pick its entry; give one pattern spec for all "
            "layers instead"
        )
    if type(model).__module__.startswith("transformers."):  # a stock model: no global_attention_mask
        spec = config.attention_pattern
        for i, s in enumerate(spec) if isinstance(spec, list) else [(None, spec)]:
            where = "config.attention_pattern" + ("" if i is None else f"[{i}]")
            _check_no_runtime_globals(_resolve_spec(s, where), where, type(model).__name__)


def _wrap_get_correct(original):
    @functools.wraps(original)
    def get_correct_attn_implementation(self, requested_attention, is_init_check=False):
        if requested_attention == ATTN_IMPLEMENTATION:
            check_model(self)
        return original(self, requested_attention, is_init_check)

    get_correct_attn_implementation._hf_sparse_wrapped = True
    return get_correct_attn_implementation


def _wrap_post_init(original):
    @functools.wraps(original)
    def post_init(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        # the __init__ check runs before the modules exist; now that they do, check what was built
        requested = getattr(self.config, "_attn_implementation", None)
        if requested == ATTN_IMPLEMENTATION and (
            _own_attention_module(self) is not None or _module_without_layer_idx(self) is not None
        ):
            check_model(self)
        return out

    post_init._hf_sparse_wrapped = True
    return post_init


def _wrap_set_attn(original):
    @functools.wraps(original)
    def set_attn_implementation(self, attn_implementation, *args, **kwargs):
        requested = attn_implementation
        if isinstance(requested, dict):
            requested = requested.get("")
        if requested == ATTN_IMPLEMENTATION:
            # the model's own check: a class that overrides it (a task model whose pattern is its backbone's)
            # decides; else the wrapped PreTrainedModel one runs check_model. transformers' set_attn_implementation
            # only warns for models that ignore attn_implementation, and checks nothing when it is unchanged
            self.get_correct_attn_implementation(requested)
        out = original(self, attn_implementation, *args, **kwargs)
        # transformers < 5.11 marks each sub-model's config it switched (`_attn_was_changed`) and unmarks only those
        # of declared sub_configs: a task model's backbone stayed marked, so a second switch skipped it
        for module in self.modules():
            if isinstance(module, PreTrainedModel):
                module.config.__dict__.pop("_attn_was_changed", None)
        return out

    set_attn_implementation._hf_sparse_wrapped = True
    return set_attn_implementation


def _wrap_to_dict(original):
    @functools.wraps(original)
    def to_dict(self):
        """transformers' ``to_dict``, with a :class:`~hf_sparse.patterns.Pattern` in ``attention_pattern`` (or in
        its per-layer list) written as its spec, so that any config holding one prints and saves as JSON."""
        output = original(self)
        spec = output.get("attention_pattern")
        if isinstance(spec, P.Pattern):
            output["attention_pattern"] = _to_spec(spec, "config.attention_pattern")
        elif isinstance(spec, (list, tuple)) and any(isinstance(s, P.Pattern) for s in spec):
            output["attention_pattern"] = [
                _to_spec(s, f"config.attention_pattern[{i}]") for i, s in enumerate(spec)
            ]
        return output

    to_dict._hf_sparse_wrapped = True
    return to_dict


def _from_installed_package(fn) -> bool:
    """Whether ``fn`` is the installed hf-sparse package's, not a remote-code bundle's copy."""
    return fn.__module__.split(".", 1)[0] == "hf_sparse"


def register_attention() -> None:
    """Register ``"hf_sparse"`` with ``AttentionInterface`` and ``AttentionMaskInterface``, install the
    ``PreTrainedModel`` checks and the ``PretrainedConfig.to_dict`` hook (see the module docstring).
    Idempotent; called on ``import hf_sparse``.

    A remote-code bundle's copy of this module (a folder or Hub repo loaded with ``trust_remote_code``, e.g.
    its pipeline) registers only where the installed package has not: the registry is global, and the
    bundle's code, possibly of another hf-sparse version, must not replace the package's for every model
    of the process. A bundle's copy also registers under :data:`OWN_ATTN_IMPLEMENTATION`, the name its own
    models look the functions up under."""
    if OWN_ATTN_IMPLEMENTATION != ATTN_IMPLEMENTATION:
        AttentionInterface.register(OWN_ATTN_IMPLEMENTATION, sparse_attention_forward)
        AttentionMaskInterface.register(OWN_ATTN_IMPLEMENTATION, sparse_attention_mask)
    registered = AttentionInterface._global_mapping.get(ATTN_IMPLEMENTATION)
    if (
        registered
        and _from_installed_package(registered)
        and not _from_installed_package(sparse_attention_forward)
    ):
        return
    AttentionInterface.register(ATTN_IMPLEMENTATION, sparse_attention_forward)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sparse_attention_mask)
    if not getattr(PreTrainedModel.get_correct_attn_implementation, "_hf_sparse_wrapped", False):
        PreTrainedModel.get_correct_attn_implementation = _wrap_get_correct(
            PreTrainedModel.get_correct_attn_implementation
        )
    if not getattr(PreTrainedModel.post_init, "_hf_sparse_wrapped", False):
        PreTrainedModel.post_init = _wrap_post_init(PreTrainedModel.post_init)
    if not getattr(PreTrainedModel.set_attn_implementation, "_hf_sparse_wrapped", False):
        PreTrainedModel.set_attn_implementation = _wrap_set_attn(PreTrainedModel.set_attn_implementation)
    if not getattr(PretrainedConfig.to_dict, "_hf_sparse_wrapped", False):
        PretrainedConfig.to_dict = _wrap_to_dict(PretrainedConfig.to_dict)


__all__ = [
    "ATTN_IMPLEMENTATION",
    "IGNORING_FAMILIES",
    "MAX_DENSE_ATTENTION_WEIGHTS",
    "OWN_ATTN_IMPLEMENTATION",
    "PatternMask",
    "SparseMask",
    "check_config",
    "check_model",
    "pattern_for_module",
    "register_attention",
    "sparse_attention_forward",
    "sparse_attention_mask",
]
