"""Components on the compiled CPU kernels of ``fused.py``: which kernel runs a component (``_fused_kind``,
the measured default rule ``FUSED_DEFAULT``), the arguments the kernels take (the band kernel: one
contiguous key window per tile of ``FUSED_BAND_ROWS`` queries; the range kernel: each row's key range; the
class-band kernel: a band's offsets inside residue classes; the table kernel: key-block tables and partial
0/1 tiles built here, the rule evaluated only in tiles that are not full), where a component's rows are
(``_Rows``), and the autograd node that runs every such component of a plan (``_FusedPlan``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import fused
from .merge import merge_forward
from .prepare import _NEG_INF, _Prep, _tensor_rows, from_classes, once_differentiable, to_classes

# Query rows per tile of the compiled band kernel's BLAS path (double, CPUs without AVX-512, bands with
# disallowed offsets; float on AVX-512 runs register-blocked with its own 64-row tiles, ``csrc``'s kRB)
# (its keys: FUSED_BAND_ROWS + band width - 1). 16k tokens,
# H=12 D=64, forward+backward, idle host, 2 threads, alternating, median of 3, rows 16 / 32 / 64:
# SlidingWindow(512) 0.789 / 0.694 / 0.696 s, causal window 128 0.318 / 0.311 / 0.338 s, Strided(128)
# 0.504 / 0.508 / 0.532 s (narrow bands waste fewer masked scores with fewer rows per tile).
FUSED_BAND_ROWS = 32
# Most query rows per tile of the range kernel's BLAS path (a tile is one bucket's rows, cut at this many;
# register-blocked tiles hold 64): LSH(64) bound at 16k, BLAS path, rows 64 / 128 / 256, forward
# 55.9 / 55.2 / 55.8 ms, forward+backward 178 / 175 / 175 ms (alternating, median of 9; 32 rows: 227 ms
# forward+backward in a shorter run).
FUSED_RANGE_ROWS = 128
# Widest band (key offsets) for that kernel: one tile's scores, FUSED_BAND_ROWS x (rows + width) floats,
# should stay in cache; wider bands (e.g. a window as long as the sequence) run on the table kernel.
FUSED_BAND_MAX_WIDTH = 4096


# Where the compiled kernels run by default: (kind, with gradients). Measured, B=1 H=12 D=64 float32,
# both paths in one process, alternating (``scripts/compare_kernel_paths.py --paths fused fallback``,
# idle host, 2 threads, matmul 186-193 GFLOP/s), seconds compiled / pure-PyTorch path of ``blocked.py``:
#
# * n=16384 forward+backward: SlidingWindow(512) 0.704 / 1.247, causal window 0.716 / 1.265,
#   BigBird(64) 1.154 / 2.317, Strided(128) 0.742 / 1.180, Fixed(128, 8) 1.011 / 3.637,
#   Dilated(256, 2) 0.631 / 1.382, Longformer(512) + a global token 1.025 / 1.736;
# * n=16384 forward (no grad): SlidingWindow 0.206 / 0.301, BigBird 0.403 / 0.759, Strided 0.256 / 0.435;
# * n=1024 and 4096 forward+backward: SlidingWindow 0.044 / 0.101 and 0.167 / 0.322, BigBird
#   0.061 / 0.137 and 0.256 / 0.540, Strided 0.030 / 0.053 and 0.138 / 0.223.
#
# So the compiled kernels run everywhere they apply. (Before their exp and row passes were written with
# explicit vectors, GCC had left them scalar and only the table kernel's forward+backward won.) The class
# band replaced the table kernel for Strided's causal columns: Strided(128) at 16k, forward 0.162 -> 0.100 s,
# forward+backward 0.465 -> 0.39 s (same script as ``scripts/benchmark_attention.py``'s timing, one host).
# The range kernel replaced it for LSH's first round (``Component.key_range``): LSH(64) at 16k, forward
# 0.687 -> 0.442 s, forward+backward 1.025 -> 0.732 s (before index rows were taken with index_select).
FUSED_DEFAULT = {(kind, grad) for kind in ("band", "class_band", "range", "tables") for grad in (False, True)}


# A call's dropout as the kernels take it: (dropout_p, seed, head_mul, head_add); flattened row r of the tensors
# draws the mask of row r * head_mul + head_add of the call's (B * H) rows (``PerHead`` runs head h of H alone:
# (H, h)). See ``dropout.py``.
NO_DROPOUT = (0.0, 0, 1, 0)


def _fused_kind(p: _Prep, q: torch.Tensor, grad: bool, v_dim: int, class_stride: int = 0) -> str | None:
    """Which compiled kernel (``fused.py``) runs this component: ``"band"`` for translation-invariant
    bands (sliding windows: one contiguous key window per ``FUSED_BAND_ROWS``-row query tile),
    ``"range"`` for rows with one contiguous key range each (``Component.key_range``),
    ``"class_band"`` for bands inside residue classes (``Component.class_band``, rows of class stride
    ``class_stride``; float32 where the build has the register-blocked kernels), ``"tables"`` for
    gathered, dense and other band components, None for the pure-PyTorch path (not CPU, half
    precision (``blocked_attention`` gives the kernels float32 copies of half inputs), the kernel not
    built / ``HF_SPARSE_FUSED=0``, or, by default, a (kind, grad) the measurements above do not put in
    ``FUSED_DEFAULT``). ``grad``: the call needs a backward."""
    if q.device.type != "cpu" or q.dtype not in (torch.float32, torch.float64):
        return None
    if p.comp.key_range is not None and p.q_valid is None and p.nq == q.shape[2]:
        kind = "range"  # its orders are permutations of the rows (LSH's sorted buckets)
    elif p.mode == "band" and p.offsets is not None and p.offsets[1] - p.offsets[0] < FUSED_BAND_MAX_WIDTH:
        kind = "band"
    elif p.comp.class_band is not None and class_stride and q.dtype == torch.float32 and p.q_valid is None:
        kind = "class_band"
    else:
        kind = "tables"
    if fused.mode() != "all" and (kind, grad) not in FUSED_DEFAULT:
        return None  # decided before loading: a process that never runs the kernel never loads it
    if not fused.available():
        return None
    if kind == "class_band" and not fused.ops().class_band_runs(q.shape[-1], v_dim):
        return "tables" if fused.mode() == "all" or ("tables", grad) in FUSED_DEFAULT else None
    return kind


def _tile_blocks(p: _Prep, b: int, h: int, device):
    """Key block and full flag of every (query block, slot) of one group: (nqb, K) int64 (-1: none)
    and (nqb, K) bool, for every mode (band slots are ``qb + lo + slot``)."""
    lay, nqb = p.comp.layout, p.nqb
    pick = lambda t: t[min(b, t.shape[0] - 1), min(h, t.shape[1] - 1)].to(device)  # noqa: E731
    if p.mode == "gather":
        return pick(lay.kv_index), pick(lay.full)
    if p.mode == "dense":
        K = lay.num_kv_blocks
        return torch.arange(K, device=device).expand(nqb, K), pick(lay.full)
    lo, hi = lay.band  # kv_index rows are compacted at the edges: put full flags back in window slots
    idx, flags = pick(lay.kv_index), pick(lay.full)
    slot = idx - (torch.arange(nqb, device=device)[:, None] + lo)
    ok = (idx >= 0) & (slot >= 0) & (slot <= hi - lo)
    full = torch.zeros(nqb, hi - lo + 1, dtype=torch.bool, device=device)
    full.scatter_(1, torch.where(ok, slot, torch.zeros_like(slot)), flags & ok)
    return torch.arange(nqb, device=device)[:, None] + lo + torch.arange(hi - lo + 1, device=device), full


def _fused_tables(p: _Prep, BH: int, device):
    """The component as tables for the kernel: kv (G, nqb, K) key blocks (-1: none), tidx (G, nqb, K)
    (-1: full tile, else an index into tiles (T, c, c) uint8), group (BH,) mask group of each row.

    Tiles the layout marks full and that hold no padding or sequence edge are full without looking
    inside; the rule (and padding) is evaluated only in the other kept tiles, which become partial
    tiles, full ones, or are dropped when they allow no pair. (Evaluating every tile's rule was a third
    of BigBird's forward at 16k.)"""
    c, nqb, comp = p.c, p.nqb, p.comp
    K = p.L // c
    G = len(p.groups)
    kv = torch.full((G, nqb, K), -1, dtype=torch.int32)
    tidx = torch.full((G, nqb, K), -1, dtype=torch.int32)
    group = torch.empty(BH, dtype=torch.int32)
    tiles, count = [], 0
    nkb = -(-p.nk // c)
    ar = torch.arange(c, device=device)
    for gi, (b, h, r0, r1) in enumerate(p.groups):
        group[r0:r1] = gi
        blocks, full = _tile_blocks(p, b, h, device)
        # row validity, padded to whole blocks (False past the end)
        q_ok = torch.zeros(nqb * c, dtype=torch.bool, device=device)
        q_ok[: p.nq] = True if p.q_valid is None else p.q_valid[b].to(device)
        k_ok = torch.zeros(nkb * c, dtype=torch.bool, device=device)
        k_ok[: p.nk] = True if p.key_valid is None else p.key_valid[b, min(h, p.key_valid.shape[1] - 1)]
        kept = (blocks >= 0) & (blocks < nkb)
        kb = blocks.clamp(0, max(nkb - 1, 0))
        clean = full & q_ok.view(nqb, c).all(-1)[:, None] & k_ok.view(nkb, c).all(-1)[kb]
        keep = kept & clean
        tile_id = torch.full((nqb, K), -1, dtype=torch.int64, device=device)
        look = (kept & ~clean).nonzero()  # (T, 2): (query block, slot) whose inside must be evaluated
        step = max(1, (1 << 22) // (c * c))
        for s in range(0, look.shape[0], step):
            qb, sl = look[s : s + step].unbind(1)
            rows, cols = qb[:, None] * c + ar, kb[qb, sl][:, None] * c + ar  # (T, c) component rows
            qr, kr = _tensor_rows(p, b, h, rows, cols, device)
            rule = comp.mask(b, h, (qr + comp.q_offset)[:, :, None], kr[:, None, :])
            allowed = (rule | full[qb, sl][:, None, None]) & q_ok[rows][:, :, None] & k_ok[cols][:, None, :]
            some, every = allowed.any(-1).any(-1), allowed.all(-1).all(-1)
            keep[qb[some], sl[some]] = True
            part = some & ~every
            n_part = int(part.sum())
            if n_part:
                tile_id[qb[part], sl[part]] = torch.arange(count, count + n_part, device=device)
                tiles.append(allowed[part].to(torch.uint8).cpu())
                count += n_part
        kv[gi] = torch.where(keep, blocks, -1).to(torch.int32).cpu()
        tidx[gi] = tile_id.to(torch.int32).cpu()
    tiles = torch.cat(tiles) if tiles else torch.zeros(1, c, c, dtype=torch.uint8)
    return kv, tidx, tiles.contiguous(), group


def _validity_args(p: _Prep, B: int, H: int, device):
    """Key / query validity of the component's rows per flattened row ((B*H, n) uint8, or empty where
    every row is valid), as the band kernels take them."""
    none = torch.empty(0, dtype=torch.uint8, device=device)
    kv = none
    if p.key_valid is not None:
        kv = p.key_valid.expand(B, H, p.nk).reshape(B * H, p.nk).to(torch.uint8).contiguous()
    qv = none
    if p.q_valid is not None:
        qv = p.q_valid[:, None].expand(B, H, p.nq).reshape(B * H, p.nq).to(torch.uint8).contiguous()
    return kv, qv


def _fused_band_args(p: _Prep, B: int, H: int, device):
    """The band as the kernel takes it: allowed offsets (uint8, from dmin), dmin, and key / query
    validity (``_validity_args``)."""
    dmin, _, allowed = p.offsets
    return allowed.to(device=device, dtype=torch.uint8).contiguous(), dmin, *_validity_args(p, B, H, device)


def _class_band_args(p: _Prep, B: int, H: int, device, d: int):
    """A band inside the residue classes of stride d: its offsets (dmin, dmax) in class rows, validity
    in component (class) order, d."""
    return (*p.comp.class_band, *_validity_args(p, B, H, device), d)


def _range_args(p: _Prep, B: int, H: int, device):
    """The component as the range kernel takes it: its query and key orders as tensor rows (B * H, n) int64
    (permutations: the kernel reads q, k, v and writes the output in the tensors' rows itself), key
    ranges lo, hi (B * H, nq) int32 in the key order, and key validity in that order."""
    flat = lambda t, n: t.to(device).expand(B, H, n).reshape(B * H, n)  # noqa: E731
    qidx, kidx = flat(p.comp.q_index, p.nq).contiguous(), flat(p.comp.k_index, p.nk).contiguous()
    lo, hi = (flat(t, p.nq).to(torch.int32).contiguous() for t in p.comp.key_range)
    return qidx, kidx, lo, hi, _validity_args(p, B, H, device)[0]


def _delta(d_out: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, d_lse) -> torch.Tensor:
    """delta_i = sum_d dO * O - dlse, 0 on rows with no allowed key (their outputs are constants): one pass
    over dO and O in the kernel."""
    d_lse = None if d_lse is None else d_lse.to(out.dtype).contiguous()
    return fused.ops().row_delta(d_out, out.contiguous(), lse.to(out.dtype).contiguous(), d_lse)


@dataclass
class _Rows:
    """Where a component's rows are in the tensor's (dim 1 of a (B * H, n, ...) tensor): the same rows
    (the default); the residue classes of stride ``d`` (Strided's, Fixed's and Dilated's permuted
    components, ``blocked._class_stride``), which the table kernel reads in place with a row stride
    (``strided``: n / d rows per class, a multiple of the block) and others take as transposed copies;
    or the rows ``index`` (B * H, m), of which only those ``valid`` (B * H, m) are the component's
    (BigBird's global rows and columns: each row at most once among the valid ones, as
    ``blocked._to_query_rows`` assumes)."""

    d: int = 0
    index: torch.Tensor | None = None
    valid: torch.Tensor | None = None
    strided: bool = False
    _flat: tuple | None = field(default=None, init=False, repr=False, compare=False)  # (n, flat_index(n))

    @property
    def transposed(self) -> bool:
        """Class rows the kernel takes as a transposed copy (not read in place)."""
        return bool(self.d) and not self.strided

    @property
    def copied(self) -> bool:
        """The kernel runs on a copy of these rows (else on the tensor itself)."""
        return self.transposed or self.index is not None

    @property
    def stride(self) -> int:
        """The class stride the kernel reads the tensor with (1: its rows in order)."""
        return self.d if self.strided else 1

    def positions(self, n: int) -> torch.Tensor | None:
        """The tensor row of each component row, (B * H, m) or (1, n) int64 (where the kernel's rows are not
        the tensor's: ``dropout.py`` draws from tensor rows), else None."""
        if self.index is not None:
            return self.index.contiguous()
        if not self.d:
            return None
        return to_classes(torch.arange(n), self.d, 0)[None]

    def flat_index(self, n: int) -> torch.Tensor:
        """``index`` as rows of the (B * H * n, ...) flattened tensor: (B * H * m,)."""
        if self._flat is None or self._flat[0] != n:
            arange = torch.arange(self.index.shape[0], device=self.index.device)[:, None]
            self._flat = n, (self.index + n * arange).flatten()
        return self._flat[1]

    def take(self, x: torch.Tensor) -> torch.Tensor:
        """What the kernel reads: a contiguous copy of the component's rows of x where ``copied``
        (index rows: one ``index_select`` of whole rows, 1.7x faster than ``gather`` at 16k tokens)."""
        if self.index is not None:
            flat = self.flat_index(x.shape[1])
            rows = fused.empty((flat.numel(), *x.shape[2:]), x)
            torch.index_select(x.reshape(-1, *x.shape[2:]), 0, flat, out=rows)
            return rows.view(*self.index.shape, *x.shape[2:])
        return to_classes(x, self.d, 1) if self.transposed else x

    def back(self, x: torch.Tensor) -> torch.Tensor:
        """Transposed class rows back in the tensor's order (a copy; x itself otherwise)."""
        return from_classes(x, self.d, 1) if self.transposed else x

    def add_back(self, dst: torch.Tensor, x: torch.Tensor) -> None:
        """dst += x, x a gradient of the copied rows (a strided view or an index_add: no full-size copy)."""
        if self.d:
            dst.unflatten(1, (dst.shape[1] // self.d, self.d)).add_(from_classes(x, self.d, 1, copy=False))
        else:  # rows outside the component carry zero gradients: adding them is harmless
            flat = self.flat_index(dst.shape[1])
            dst.view(-1, *dst.shape[2:]).index_add_(0, flat, x.reshape(-1, *x.shape[2:]))


@dataclass
class _Run:
    """One component on a compiled kernel: its kind (``"band"`` / ``"tables"``), its preparation, the
    kernel's arguments (``_fused_band_args`` / ``_fused_tables``), and where its query and key rows are."""

    kind: str
    p: _Prep
    args: tuple
    q_rows: _Rows = field(default_factory=_Rows)
    k_rows: _Rows = field(default_factory=_Rows)


def _merge_rows_into(out, lse, rows: _Rows, out_c, lse_c, empty: bool = False) -> None:
    """Merges a component over index rows into the plan's (out, lse) in place, on its valid rows only.
    ``empty``: out and lse hold no component yet (every row 0, -inf): the rows are copied, not merged."""
    n = out.shape[1]
    o_flat, l_flat = out.view(-1, out.shape[-1]), lse.view(-1)
    flat = rows.flat_index(n)
    if empty:  # a row without keys is (0, -inf) already, as is a row the component does not have
        if rows.valid is not None:
            keep = rows.valid.flatten()
            flat, out_c, lse_c = flat[keep], out_c.flatten(0, 1)[keep], lse_c.flatten()[keep]
        o_flat.index_copy_(0, flat, out_c.reshape(-1, out.shape[-1]))
        l_flat.index_copy_(0, flat, lse_c.reshape(-1))
        return
    flat = flat.view(rows.index.shape)
    keep = torch.isfinite(lse_c) if rows.valid is None else rows.valid & torch.isfinite(lse_c)
    flat, o_c, l_c = flat[keep], out_c[keep], lse_c[keep]
    merged_o, merged_l = merge_forward([o_flat[flat], o_c], [l_flat[flat], l_c])
    o_flat.index_copy_(0, flat, merged_o)
    l_flat.index_copy_(0, flat, merged_l)


def _covers_all(rows: _Rows, n: int) -> bool:
    """Index rows that are every one of n rows once (``_Rows``: a valid row appears at most once)."""
    return rows.valid is None and rows.index.shape[1] == n


def _kernel_forward(run: _Run, q, k, v, into=None, drop=NO_DROPOUT):
    """(out, lse) of one component in its own rows. ``into``: another component's (out, lse) of the same
    rows (tensors of this node) to merge this one into in place, where the kernel can (``class_band``).
    ``drop``: the call's dropout (``NO_DROPOUT``)."""
    if run.kind == "band":
        return fused.ops().band_forward(q, k, v, *run.args, FUSED_BAND_ROWS, run.p.scale, *drop)
    if run.kind == "class_band":
        out, lse = into or (None, None)
        return fused.ops().class_band_forward(q, k, v, *run.args, run.p.scale, out, lse, *drop)
    if run.kind == "range":
        return fused.ops().range_forward(q, k, v, *run.args, FUSED_RANGE_ROWS, run.p.scale, *drop)
    strides = run.q_rows.stride, run.k_rows.stride
    return fused.ops().forward(
        q, k, v, *run.args, run.p.c, run.p.scale, *strides, *drop, *_maps(run, q, k, drop)
    )


def _maps(run: _Run, q, k, drop) -> tuple:
    """The table kernel's row maps for dropout (``_Rows.positions``; q, k: the kernel's tensors), or none."""
    if not drop[0]:
        return ()
    return run.q_rows.positions(q.shape[1]), run.k_rows.positions(k.shape[1])


def _kernel_backward(run: _Run, q, k, v, d_out, lse, delta, dq, dk, dv, drop=NO_DROPOUT) -> None:
    """Adds one component's gradients to dq, dk, dv (its own rows), given the whole plan's lse, delta."""
    if run.kind == "band":
        fused.ops().band_backward(
            q, k, v, d_out, lse, delta, *run.args, FUSED_BAND_ROWS, run.p.scale, dq, dk, dv, *drop
        )
    elif run.kind == "class_band":
        fused.ops().class_band_backward(q, k, v, d_out, lse, delta, *run.args, run.p.scale, dq, dk, dv, *drop)
    elif run.kind == "range":
        fused.ops().range_backward(
            q, k, v, d_out, lse, delta, *run.args, FUSED_RANGE_ROWS, run.p.scale, dq, dk, dv, *drop
        )
    else:
        strides = run.q_rows.stride, run.k_rows.stride
        maps = _maps(run, q, k, drop)
        fused.ops().backward(
            q, k, v, d_out, lse, delta, *run.args, run.p.c, run.p.scale, *strides, dq, dk, dv, *drop, *maps
        )


class _FusedPlan(torch.autograd.Function):
    """Components of one plan on the compiled kernels as one autograd node: q (BH, nq, D), k/v (BH, nk, D)
    contiguous, ``runs`` a list of ``_Run``. Forward: each component's (out, lse), merged exactly. Backward:
    delta = rowsum(dO * O) once, then every component's kernel with the merged lse and delta, so its
    exp(S - lse) are the final probabilities and its gradients go straight into dq, dk, dv, shared by all
    components: no merge backward, no per-component gradient buffers or row dots (for BigBird at 16k
    tokens those were ~30% of its forward+backward). Components whose rows are not read in place run on
    copies (``_Rows``). ``drop``: the call's dropout (``NO_DROPOUT``), one mask over all components."""

    @staticmethod
    def forward(ctx, q, k, v, runs: list, drop=NO_DROPOUT):
        parts, indexed, saved = [], [], []
        for run in runs:
            qs, ks, vs = run.q_rows.take(q), run.k_rows.take(k), run.k_rows.take(v)
            if run.kind == "class_band" and len(parts) == 1:  # merged into the earlier part by the kernel
                _kernel_forward(run, qs, ks, vs, into=parts[0], drop=drop)
                continue
            out, lse = _kernel_forward(run, qs, ks, vs, drop=drop)
            if run.q_rows.index is not None:
                indexed.append((run.q_rows, out, lse))
            else:
                parts.append((run.q_rows.back(out), run.q_rows.back(lse)))
            if run.q_rows.copied or run.k_rows.copied:
                saved += [qs, ks, vs]
        empty = not parts
        if parts:
            out, lse = parts[0] if len(parts) == 1 else merge_forward(*zip(*parts))
        elif _covers_all(indexed[0][0], q.shape[1]):  # a permutation of every row: copied over all of out
            out = fused.empty((*q.shape[:2], v.shape[-1]), q)
            lse = torch.empty(q.shape[:2], dtype=indexed[0][2].dtype, device=q.device)
        else:  # only index rows: the others have no key
            out = q.new_zeros(*q.shape[:2], v.shape[-1])
            lse = torch.full(q.shape[:2], _NEG_INF, dtype=indexed[0][2].dtype, device=q.device)
        for rows, out_c, lse_c in indexed:  # out, lse are this node's own tensors: merged in place
            _merge_rows_into(out, lse, rows, out_c, lse_c, empty)
            empty = False
        ctx.runs, ctx.drop = runs, drop
        ctx.save_for_backward(q, k, v, out, lse, *saved)
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse, *saved = ctx.saved_tensors
        d_out = torch.zeros_like(out) if d_out is None else fused.contiguous(d_out).to(out.dtype)
        delta = _delta(d_out, out, lse, d_lse)
        dq, dk, dv = fused.zeros_like(q), fused.zeros_like(k), fused.zeros_like(v)
        copies = iter(saved)
        for run in ctx.runs:
            qr, kr = run.q_rows, run.k_rows
            if not (qr.copied or kr.copied):
                _kernel_backward(run, q, k, v, d_out, lse, delta, dq, dk, dv, ctx.drop)
                continue
            qs, ks, vs = next(copies), next(copies), next(copies)
            gq = fused.zeros_like(qs) if qr.copied else dq
            gk, gv = (fused.zeros_like(ks), fused.zeros_like(vs)) if kr.copied else (dk, dv)
            _kernel_backward(
                run, qs, ks, vs, qr.take(d_out), qr.take(lse), qr.take(delta), gq, gk, gv, ctx.drop
            )
            if qr.copied:
                qr.add_back(dq, gq)
            if kr.copied:
                kr.add_back(dk, gk)
                kr.add_back(dv, gv)
        return dq, dk, dv, None, None
