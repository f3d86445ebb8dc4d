"""``sparse_attention``: one entry point, input checks, backend choice."""

from __future__ import annotations

import functools
import json
import math
import numbers

import torch

from .. import patterns as P
from .blocked import blocked_attention
from .dense import all_true, allowed_mask, dense_attention, sdpa_attention, zero_padding_keys
from .dropout import keep_mask
from .flex import can_compile_on, compile_enabled, flex_attention_forward, flex_available

BACKENDS = ("auto", "dense", "sdpa", "blocked", "flex")
# What "auto" runs (``pick_backend``). On CPU: the block kernels, except for tiny calls without dropout (at most
# SDPA_CPU_MAX_PAIRS query-key pairs, batch and heads included), which run on torch's fused SDPA with the
# pattern's materialised mask. Measured by sparse_attention(..., backend="sdpa") and backend="blocked" alternating
# in one process (medians of 5-9 calls after a warm-up, torch 2.13, a busy 2-core host; ms sdpa / blocked,
# OMP_NUM_THREADS=1 unless "2 threads"; fwd+bwd = forward and backward):
#
# * B=1 H=1 D=64 n=4096 SlidingWindow(128): fwd 266 / 2.1, fwd+bwd 407 / 6.6 (2 threads: 431 / 13, 694 / 44);
#   n=2048 Causal fwd 28 / 8.7 (2 threads, fwd+bwd: 266 / 39)
# * B=1 H=12 D=64 n=512 fwd+bwd: SlidingWindow(32) 84 / 9.6, Causal 91 / 39; with dropout 0.1: 196 / 15, 250 / 51
# * the task models' shape that justified the old rule, B=32 H=4 D=16 n=253: Longformer(64) + global tokens
#   every 100 fwd 23 / 7.2, fwd+bwd 51 / 19, with dropout 239 / 31 (2 threads, n=256, one global token: 14 /
#   4.4, 33 / 8.7, 191 / 10)
# * the closest, BigBird with 16-token blocks: B=32 H=4 D=16 n=253 fwd+bwd 99 / 99; B=1 H=12 D=64 n=512 fwd+bwd
#   46 / 63 (2 threads 45 / 93), B=8 H=12 n=128 fwd 17 / 24; B=4 H=4 D=16 n=1022 fwd+bwd 104 / 43
# * decoding, H=4 D=64, 16k keys, one query: SlidingWindow(512, causal) 6.7 / 0.43, BigBird(64) 7.0 / 0.30,
#   Causal 7.4 / 9.0; 64 queries: 25 / 1.1, 34 / 0.67, 24 / 19
# * geometric mean of sdpa / blocked over the small cases (9 patterns, B x H from 1 to 128, D 16-64) per size in
#   pairs, 1 / 2 threads: fwd 0.8-0.85 up to 2^11, 0.96 / 0.9-1.15 at 2^12, 1.0-1.3 at 2^13-2^15, 1.2-1.9 at 2^16,
#   2-6 at 2^20; fwd+bwd 0.6-0.8 up to 2^12, 0.8-1.4 at 2^13-2^15, 1.4-2.2 at 2^17; with dropout 0.8-1.2 up to
#   2^12, 1.5-3.8 at 2^13-2^15; decoding 0.9-1.0 at 2^12, 0.7-1.9 at 2^14. Both take 0.1-1 ms there, sdpa about
#   half of blocked's time for plans of several parts (Longformer + a global token, BigBird).
#
# The former rule (sdpa up to SDPA_MAX_PAIRS = 2^24 pairs, measured before the compiled CPU kernels) took sdpa
# in every row above. On GPUs (not re-measured: no GPU in that session) auto keeps it, then FlexAttention
# (benchmarks/attention_gpu.md: 4k tokens, B=1 H=12, SDPA with the band mask 0.27 ms fwd / 0.79 ms fwd+bwd
# against flex's 0.30 / 1.19 ms); so does torch.export on any device (sdpa is its traceable path).
SDPA_CPU_MAX_PAIRS = 1 << 12
SDPA_MAX_PAIRS = 1 << 24


def _check_tensor(name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 4:
        raise ValueError(f"{name} must be (batch, heads, seq, head_dim), got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating point tensor, got dtype {t.dtype}")


def _check_scale(scale) -> float:
    """``scale`` as a float: a positive finite real number (Python, NumPy) or a 0-dim tensor holding one."""
    if isinstance(scale, torch.Tensor):
        if scale.dim() != 0 or scale.dtype == torch.bool or scale.is_complex():
            raise ValueError(
                f"scale must be a positive number or a 0-dim real tensor, got a {scale.dtype} tensor of shape "
                f"{tuple(scale.shape)}"
            )
        if scale.requires_grad:
            raise ValueError(
                "scale must not require grad: the kernels take it as a number, so a learned scale would get no "
                "gradient; multiply the query by it instead"
            )
        value = scale.item()
    elif isinstance(scale, numbers.Real) and not isinstance(scale, bool):
        value = scale
    else:
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    return value


def _check_dropout(dropout_p) -> float:
    """``dropout_p`` as a float: a real number (Python or NumPy, not a bool) in [0, 1)."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real):
        raise TypeError(f"dropout_p must be a number in [0, 1), got {dropout_p!r}")
    value = float(dropout_p)
    if not 0.0 <= value < 1.0:  # NaN too
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p!r}")
    return value


#: the dropout seeds ``sparse_attention`` takes: the kernels' hash (``dropout.py``) reads 32 bits of the seed, so
#: seeds further apart would draw the same mask
SEED_RANGE = (0, 2**32 - 1)


def _check_seed(seed) -> int:
    """``seed`` as a plain int: an int (Python or NumPy, not a bool) in ``SEED_RANGE``, for every backend."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int or None, got {seed!r}")
    value = int(seed)
    if not SEED_RANGE[0] <= value <= SEED_RANGE[1]:
        raise ValueError(
            f"seed must be in [0, 2**32 - 1] (the dropout hash reads 32 bits of it: seeds 2**32 apart would draw "
            f"the same mask), got {value}"
        )
    return value


def _check_mask(name, m, B, n, device, meaning, padding: bool = False):
    """``m`` as a bool (batch, seq) tensor; a non-bool mask must hold only 0 and 1 (``meaning`` says which is which):
    an additive mask (0 = attend, a large negative number = masked) read as ``!= 0`` would be inverted. A non-bool
    ``padding`` mask (``attention_mask``) must also hold a 1: all zeros is what an additive mask of a batch without
    padding looks like, and read as 1/0 it would make every token padding (a bool mask of all False says that).
    Traced (``torch.compile``, ``torch.export``), the values are checked when the graph runs (a ``RuntimeError``)."""
    if m is None:
        return None
    if not isinstance(m, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (batch, seq), got {type(m).__name__}")
    if m.dim() != 2 or m.shape[0] != B or m.shape[1] != n:
        raise ValueError(f"{name} must have shape (batch, seq) = ({B}, {n}), got {tuple(m.shape)}")
    if m.dtype != torch.bool:
        outside = (m != 0) & (m != 1)
        additive = "additive masks (0 = attend, a large negative number or -inf = masked) are not accepted"
        if torch.compiler.is_compiling():  # traced (torch.compile, torch.export): checked when the graph runs
            torch._assert_async(~outside.any(), f"{name} must hold 0/1 values ({meaning}): {additive}")
        elif outside.any():
            raise ValueError(
                f"{name} must hold 0/1 values ({meaning}), got {m[outside][0].item()!r}: {additive}"
            )
        if padding and m.numel():
            zeros = (
                f"{name} is all 0 ({m.dtype}): as a 1/0 mask ({meaning}) it makes every token padding, and it is what "
                "an additive mask without padding (0 = attend) looks like, which is not accepted; pass 1 for the "
                "tokens (a bool mask of all False if every token really is padding)"
            )
            if torch.compiler.is_compiling():
                torch._assert_async((m != 0).any(), zeros)
            elif not bool((m != 0).any()):
                raise ValueError(zeros)
    return m.to(device) != 0


def resolve_pattern(pattern) -> P.Pattern:
    """A Pattern from a Pattern, a spec dict or a registered name; equal specs give the same object, so
    what dispatch keeps on it (``Pattern.derived``: bound blocks, plans, block masks) serves every call."""
    if isinstance(pattern, P.Pattern):
        return pattern
    if isinstance(pattern, (dict, str)):
        try:
            key = json.dumps(pattern, sort_keys=True)
        except TypeError:  # a dict holding non-JSON values (e.g. Pattern objects): built every time
            return P.from_dict(pattern)
        return _pattern_from_json(key)
    raise TypeError(
        f"pattern must be a Pattern, a spec dict or a registered name, got {type(pattern).__name__}"
    )


@functools.lru_cache(maxsize=256)
def _pattern_from_json(spec_json: str) -> P.Pattern:
    return P.from_dict(json.loads(spec_json))


def choose_block(pattern: P.Pattern, n: int, requested: int | None = None) -> int:
    """The kernel block size: the requested one (any positive int), else 64 or another size that fits the
    pattern's own blocks (``block_fits``: no tile straddles a pattern block's edge).

    Pattern blocks that no power of two from 32 to 128 fits (48, 50, 100, 127 positions) run on their largest
    divisor from 8 to 63 (FlexAttention on CUDA takes a block of 64 or more as its tile: ``flex.cuda_layout``),
    else on the default block, partial where it straddles a pattern block. Before, they ran on blocks of 1 to 4:
    blocked forward, B=1 H=2 D=64, 4096 tokens, one thread, ms before -> now: BlockLocal(127) 116-123 -> 7-8 (on
    64; BlockLocal(128): 3.2), BigBird(50) 220-230 -> 20-21 (on 50; BigBird(64): 16), Fixed(100, 8) 44 -> 11 (on
    50; Fixed(128, 8): 7), Random(100, 2) 39 -> 7.4, BlockLocal(100) 20 -> 3.9."""
    if requested is not None:
        P.base.check_block(pattern, requested)
        return requested
    geo = P.base.all_geometry(pattern)
    window = max([getattr(p, "window", 0) for p in _leaves(pattern)] + [0])
    # bands: about a quarter of the window per block (fewer wasted keys at the band's edges)
    first = min(128, max(16, 1 << max(window // 4, 1).bit_length() - 1)) if window else 64
    for c in (first, 64, 128, 32):
        if P.base.block_fits(pattern, c):
            return c
    g = math.gcd(*geo)
    return next((c for c in range(min(g, 63), 7, -1) if g % c == 0), first)


def _leaves(pattern):
    parts = getattr(pattern, "parts", None)
    if parts:
        return [leaf for p in parts for leaf in _leaves(p)]
    return [pattern]


def with_runtime_globals(pattern: P.Pattern, global_mask) -> P.Pattern:
    """``pattern | Global(global tokens)``; for causal patterns (and the causal heads of a ``PerHead``) the
    additions respect causality."""
    if global_mask is None or all_true(~global_mask.bool()):
        return pattern
    mask = global_mask.bool()
    if torch.compiler.is_compiling():  # traced: no host copy of the mask to key on
        return _add_globals(pattern, mask)
    key = ("globals", tuple(mask.shape), tuple(mask.nonzero().flatten().tolist()))  # same tokens, same object
    return pattern.derived(key, lambda: _add_globals(pattern, mask))


def _add_globals(pattern: P.Pattern, global_mask) -> P.Pattern:
    g = P.Global.from_mask(global_mask)
    heads = pattern.heads()
    if heads is not None and not pattern.is_causal and any(h.is_causal for h in heads):
        # causal and non-causal heads: each head gets the global attention of its own kind
        return pattern.over_heads([h | (g & P.Causal() if h.is_causal else g) for h in heads])
    if pattern.is_causal:
        g = g & P.Causal()
    return pattern | g


def check_exportable(pattern: P.Pattern, backend: str | None = None) -> None:
    """While ``torch.export`` traces, raise a clear error for what it cannot trace (instead of its
    data-dependent-guard error): random blocks (BigBird, Random), drawn in Python once the length is known,
    content-based patterns (LSH, TopKBlocks), whose blocks are chosen from the queries and keys in Python and
    the compiled CPU kernel, and the ``"blocked"``/``"flex"`` backends, whose block plan is built in Python from
    the pattern's index tensors. Exportable: every other pattern on the ``"sdpa"`` and ``"dense"`` backends (while
    exporting, ``"auto"`` picks ``"sdpa"`` up to ``SDPA_MAX_PAIRS`` query-key pairs), and
    ``attn_implementation="sdpa"``/``"eager"``."""
    if not torch.compiler.is_exporting():
        return
    if pattern.length_dependent:
        raise NotImplementedError(
            f"torch.export cannot trace {pattern!r}: its random blocks are drawn in Python (seeded) once the "
            "sequence length is known, which export sees as data-dependent steps; use a pattern without random "
            "blocks (e.g. Longformer or SlidingWindow | Global) to export"
        )
    if pattern.content_based:
        raise NotImplementedError(
            f"torch.export cannot trace {pattern!r}: its blocks are chosen from the queries and keys (LSH buckets, "
            "top-k blocks) in Python and the compiled CPU kernel, data-dependent steps that export cannot record; "
            "use a pattern fixed in advance (e.g. Longformer or SlidingWindow | Global) to export"
        )
    if backend in ("auto", "blocked", "flex"):  # "auto" here: above SDPA_MAX_PAIRS, the block kernels
        raise NotImplementedError(
            f"torch.export cannot trace backend={backend!r} (the block kernels): its block plan for {pattern!r} is built in Python "
            "from index tensors; export with attention_backend='sdpa' or 'dense' (or 'auto' for inputs of at "
            f"most SDPA_MAX_PAIRS = {SDPA_MAX_PAIRS} query-key pairs), or attn_implementation='sdpa' or 'eager'"
        )


def check_not_jit_tracing() -> None:
    """Under ``torch.jit.trace``, raise a clear error (instead of a ``TypeError`` on a length that is a tensor
    there): the trace runs the Python once and keeps only the tensor operations, so the padding check, backend
    choice and block plan made here in Python would be fixed to the example input (a trace made without padding
    would ignore the padding of later inputs). ``torch.export`` traces these calls; so does ``torch.jit.trace``
    with ``attn_implementation="sdpa"`` or ``"eager"``."""
    if torch.jit.is_tracing():
        raise NotImplementedError(
            "torch.jit.trace cannot trace hf-sparse attention (attn_implementation='hf_sparse', "
            "sparse_attention): its padding check, backend choice and block plan run in Python and would be fixed "
            "to the example input; export with torch.export.export(model, ...), or trace with "
            "model.set_attn_implementation('sdpa') (or 'eager')"
        )


def pick_backend(backend: str, query, dropout_p: float, pairs: int) -> str:
    """The backend that runs a call (``pairs``: its query-key pairs, batch and heads included): ``backend``, or
    for ``"auto"`` the measured rule above. On CPU: ``"sdpa"`` for at most ``SDPA_CPU_MAX_PAIRS`` pairs without
    dropout, else ``"blocked"``. Elsewhere (and while ``torch.export`` traces): ``"sdpa"`` up to
    ``SDPA_MAX_PAIRS``; above it FlexAttention on CUDA without dropout (measured on an H200,
    benchmarks/attention_gpu.md: the blocked path's many small launches there run 1,000-18,000x the FLOP bound,
    compiled flex 4-70x at 16k-64k: SlidingWindow, BigBird, Strided), else the blocked kernels. FlexAttention
    runs dropout too (``backend="flex"``: ``flex._with_dropout``), but ``auto`` does not choose it until it is
    checked and timed on a GPU: on an H200 (torch 2.11) its checks against the dense reference and its 16k
    timing did not finish in a session's device time. The cause, found afterwards on CPU: the whole hash
    inside the mask, which inductor did not finish compiling in 10 minutes; the mask now reads the hash's
    row and key tables (``dropout.kept``: seconds), not yet run on a GPU."""
    if backend != "auto":
        return backend
    if query.device.type == "cpu" and not torch.compiler.is_exporting():
        return "sdpa" if dropout_p == 0.0 and pairs <= SDPA_CPU_MAX_PAIRS else "blocked"
    if pairs <= SDPA_MAX_PAIRS:
        return "sdpa"
    if query.device.type == "cuda" and flex_available() and dropout_p == 0.0:
        return "flex"
    return "blocked"


def sparse_attention(
    query,
    key,
    value,
    pattern,
    attention_mask=None,
    global_attention_mask=None,
    scale=None,
    dropout_p: float = 0.0,
    backend: str = "auto",
    *,
    block_size: int | None = None,
    seed: int | None = None,
):
    """Exact attention restricted to ``pattern``.

    Args:
        query, key, value: ``(batch, heads, seq, head_dim)``; key/value may have fewer heads
            (grouped-query attention) if that number divides the query heads. With a shorter query
            than key (decoding with a cache), query i sits at position ``kv_len - q_len + i``.
        pattern: a :class:`~hf_sparse.patterns.Pattern`, a spec dict or a registered name.
        attention_mask: ``(batch, kv_len)``, 1 = token, 0 = padding (bool, or a tensor holding only 0 and 1, and
            some 1: additive masks raise a ``ValueError``, an all-zero one too, which is what an additive mask
            without padding looks like); padding keys are never attended, whatever they hold (inf, NaN).
        global_attention_mask: ``(batch, kv_len)``, 1 = global token (Longformer convention): global
            tokens attend every key and are attended by every query (only earlier ones for causal
            patterns).
        scale: score scale, default ``1 / sqrt(head_dim)``: a positive number (Python or NumPy) or a 0-dim tensor
            holding one (read as a number: one that requires grad is refused).
        dropout_p: dropout on the attention probabilities (exact in forward and backward): a number (Python or
            NumPy) in [0, 1).
        backend: ``"auto"`` (``pick_backend``: on CPU ``"blocked"``, ``"sdpa"`` only for tiny inputs without
            dropout, at most ``SDPA_CPU_MAX_PAIRS`` query-key pairs; on GPU ``"sdpa"`` up to ``SDPA_MAX_PAIRS``
            pairs, then FlexAttention on CUDA without dropout, else ``"blocked"``), ``"dense"``
            (reference, float32 arithmetic, O(n^2) memory), ``"sdpa"`` (torch's fused attention with the
            pattern's materialised mask, O(n^2) memory), ``"blocked"`` or ``"flex"``.
        block_size: kernel block size, any positive int (``choose_block`` if None); one that neither divides nor
            is a multiple of the pattern's own blocks runs too, its tiles across their edges partial.
        seed: dropout seed, an int (Python or NumPy) in ``SEED_RANGE`` = [0, 2**32 - 1] on every backend
            (blocked, flex and dense: drawn from torch's generator if None, and one seed keeps
            the same probabilities on all three and with or without the compiled CPU kernel: ``dropout.keep_mask``;
            sdpa: torch's generator is used as it is if None, else forked and seeded).

    Returns: ``(batch, heads, q_len, head_dim)`` in the inputs' dtype. A query with no allowed key gets zeros.
    ``torch.autocast`` is off inside: every backend computes in the inputs' dtype (float32 inputs in float32; in a
    model under autocast the projections hand it half-precision tensors, which the kernels run as they run them
    outside autocast), so the output's dtype and precision do not depend on the backend ``auto`` picks.
    """
    check_not_jit_tracing()
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check_tensor(name, t)
    device_type = query.device.type
    if torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type):
        with torch.autocast(device_type, enabled=False):  # every backend computes in the inputs' dtype
            return sparse_attention(
                query, key, value, pattern, attention_mask, global_attention_mask, scale, dropout_p, backend,
                block_size=block_size, seed=seed,
            )  # fmt: skip
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(
            f"query, key and value must share a dtype, got {query.dtype}, {key.dtype}, {value.dtype}"
        )
    if not (query.device == key.device == value.device):
        raise ValueError(
            f"query, key and value must be on one device, got {query.device}, {key.device}, {value.device}"
        )
    B, H, q_len, D = query.shape
    if key.shape[0] != B or value.shape[0] != B:
        raise ValueError(
            f"batch sizes differ: query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    kv_heads = key.shape[1]  # none (and no query heads): an empty output
    if kv_heads != value.shape[1] or (H % kv_heads if kv_heads else H):
        raise ValueError(
            f"key/value heads must be equal and divide query heads: query {tuple(query.shape)}, "
            f"key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if key.shape[-1] != D:
        raise ValueError(f"query and key head_dim differ: {tuple(query.shape)} vs {tuple(key.shape)}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key and value lengths differ: {tuple(key.shape)} vs {tuple(value.shape)}")
    if D == 0 or value.shape[-1] == 0:
        raise ValueError(
            f"head_dim must be at least 1, got query/key head_dim {D} and value head_dim {value.shape[-1]} "
            f"(query {tuple(query.shape)}, value {tuple(value.shape)})"
        )
    kv_len = key.shape[-2]
    if q_len > kv_len:
        raise ValueError(
            f"query is longer than key ({q_len} > {kv_len}); queries are aligned to the end of the keys"
        )
    if key.shape[1] != H:
        rep = H // key.shape[1]
        key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    scale = 1.0 / math.sqrt(D) if scale is None else _check_scale(scale)
    dropout_p = _check_dropout(dropout_p)
    seed = None if seed is None else _check_seed(seed)
    block_size = None if block_size is None else P.base.check_positive_int("block_size", block_size)
    pattern = resolve_pattern(pattern)
    check_exportable(pattern)
    heads = pattern.heads()  # a PerHead, also inside | or &
    if heads is not None and len(heads) != H:
        where = "" if isinstance(pattern, P.PerHead) else f" (in {pattern!r})"
        raise ValueError(f"PerHead has {len(heads)} patterns but the input has {H} heads{where}")
    key_valid = _check_mask(
        "attention_mask", attention_mask, B, kv_len, query.device, "1 = token, 0 = padding", padding=True
    )
    global_mask = _check_mask(
        "global_attention_mask", global_attention_mask, B, kv_len, query.device, "1 = global token, 0 = not"
    )
    if key_valid is not None and all_true(key_valid):
        key_valid = None

    effective = with_runtime_globals(pattern, global_mask)
    if effective.length_dependent and not effective.content_based:  # seeded: the same blocks every call
        bound = _bind_to_length(effective, q_len, kv_len)
    elif effective.content_based:
        bound = _bind_to_content(effective, q_len, kv_len, query, key, key_valid)
    else:
        bound = effective.bind(q_len, kv_len, query=query, key=key)
    block = choose_block(bound, kv_len, block_size)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))

    pairs = B * H * q_len * kv_len
    if pairs == 0:  # an empty batch or sequence: the block kernels need one block to plan
        backend = "dense"
    asked, backend = backend, pick_backend(backend, query, dropout_p, pairs)
    if backend in ("sdpa", "dense"):
        allowed = allowed_mask(bound, B, H, q_len, kv_len, key_valid, device=query.device)
        key = zero_padding_keys(key, key_valid)  # never attended, whatever they hold (inf, NaN)
    if backend == "sdpa":
        if dropout_p == 0.0:
            return sdpa_attention(query, key, value, allowed, scale)
        return _sdpa_dropout(query, key, value, allowed, scale, dropout_p, seed)
    if backend == "dense":  # the blocked kernels' dropout mask (``dropout.py``): the same result for a seed
        keep = None if dropout_p == 0.0 else _dense_keep(seed, dropout_p, B, H, q_len, kv_len, query.device)
        return dense_attention(query, key, value, allowed, scale, dropout_p, keep=keep)

    check_exportable(pattern, asked)
    return _block_kernels(
        query, key, value, pattern, bound, key_valid, scale, dropout_p, seed, backend, block, needs_grad
    )


@torch.compiler.disable
def _bind_to_length(pattern, q_len, kv_len):
    """Random blocks (BigBird, Random) drawn for this length, eagerly inside ``torch.compile``d code: traced, the
    draw (Python loops over the length's blocks) was compiled anew for every sequence length until dynamo's
    recompile limit. Kept on the pattern (``Pattern.derived``): one seed and length give the same blocks."""
    return pattern.derived(("bind", q_len, kv_len), lambda: pattern.bind(q_len, kv_len))


@torch.compiler.disable
def _bind_to_content(pattern, q_len, kv_len, query, key, key_valid=None):
    """LSH buckets and top-k blocks, chosen from q and k eagerly inside ``torch.compile``d code (the hashing runs
    in the compiled CPU kernel, which dynamo cannot trace), from the real tokens only (``key_valid``: the
    padding, so a padded row selects as it would alone). Bound anew on every call: never kept on the pattern
    (``Pattern.derived``), since the selection depends on the queries, keys and padding."""
    return P.base.bind_part(pattern, q_len, kv_len, query=query, key=key, key_valid=key_valid)


@torch.compiler.disable
def _sdpa_dropout(query, key, value, allowed, scale, dropout_p, seed):
    """SDPA with dropout, eagerly inside ``torch.compile``d code (a graph break): compiled, inductor would draw the
    dropout from its own generator, so the compiled model would not train as the eager one does."""
    if seed is None:
        return sdpa_attention(query, key, value, allowed, scale, dropout_p)
    with torch.random.fork_rng(devices=[query.device] if query.device.type == "cuda" else []):
        torch.manual_seed(seed)
        return sdpa_attention(query, key, value, allowed, scale, dropout_p)


@torch.compiler.disable
def _dense_keep(seed, dropout_p, B, H, q_len, kv_len, device):
    """The dense backend's dropout mask (``dropout.keep_mask``), eagerly inside ``torch.compile``d code (a graph
    break): the seed is drawn from torch's generator as in eager mode (inductor draws from its own), and the
    hash's 64-bit integer arithmetic stays out of inductor, which failed to compile it for a seed that changes
    between calls (a dynamic int)."""
    return keep_mask(_seed(seed, dropout_p), dropout_p, B, H, q_len, kv_len, device)


def _seed(seed: int | None, dropout_p: float) -> int:
    """The dropout seed: drawn from torch's generator where none is given and dropout is on."""
    if seed is None:
        return int(torch.randint(0, 2**31 - 1, (1,)).item()) if dropout_p > 0.0 else 0
    return seed


@torch.compiler.disable
def _block_kernels(
    query, key, value, pattern, bound, key_valid, scale, dropout_p, seed, backend, block, needs_grad
):
    """The block kernels run eagerly inside ``torch.compile``d code (a graph break): their plan is built in Python
    from index tensors and the compiled CPU kernel is an opaque extension, neither of which dynamo can trace."""
    q_len, kv_len = query.shape[-2], key.shape[-2]
    seed = _seed(seed, dropout_p)
    key = zero_padding_keys(key, key_valid)  # never attended, whatever they hold (inf, NaN)
    if backend == "flex":
        _check_flex(pattern, query, needs_grad, dropout_p)
        return flex_attention_forward(query, key, value, bound, key_valid, scale, block, dropout_p, seed)
    plan = bound.derived(("plan", q_len, kv_len, block), lambda: bound.plan(q_len, kv_len, block=block))
    return blocked_attention(query, key, value, plan, key_valid, scale, dropout_p, seed)


# What compiled FlexAttention takes on CPU (inductor's CPU lowering refuses float64; the eager one runs it).
FLEX_CPU_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_flex(pattern, query, needs_grad, dropout_p):
    if not flex_available():
        raise ValueError(f"backend='flex' cannot run {pattern!r}: this torch has no FlexAttention")
    if query.device.type == "cpu" and needs_grad:
        raise ValueError(
            f"backend='flex' cannot run {pattern!r} with gradients on CPU: FlexAttention has no CPU backward; "
            "use backend='blocked' (or 'auto')"
        )
    if dropout_p > 0.0 and query.device.type == "cpu" and compile_enabled():
        raise ValueError(
            f"backend='flex' cannot run {pattern!r} with dropout_p={dropout_p} on CPU: compiled there, FlexAttention "
            "returns no log-sum-exp, which its dropout needs; use backend='blocked' (or 'auto')"
        )
    if query.device.type == "cpu" and compile_enabled() and query.dtype not in FLEX_CPU_DTYPES:
        raise ValueError(
            f"backend='flex' cannot run {pattern!r} in {query.dtype} on CPU: compiled there, FlexAttention takes "
            "float32, float16 and bfloat16 only; use backend='blocked' (or 'auto'), or set HF_SPARSE_FLEX_COMPILE=0 "
            "for the slow eager FlexAttention, which runs float64"
        )
    if compile_enabled() and not can_compile_on(query.device):
        raise ValueError(
            f"backend='flex' cannot run {pattern!r} on {query.device}: torch.compile needs a C++ compiler "
            "(set HF_SPARSE_FLEX_COMPILE=0 for the slow eager FlexAttention, or use backend='blocked')"
        )


__all__ = [
    "BACKENDS",
    "check_exportable",
    "check_not_jit_tracing",
    "choose_block",
    "resolve_pattern",
    "sparse_attention",
    "with_runtime_globals",
]
