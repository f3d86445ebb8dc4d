"""Run a motif token-classification model over a whole genome: windows streamed from the FASTA, batched
through the model, merged exactly once (:mod:`.decode`), hits out in genome coordinates.

Positions: a model with rotary positions (the motif recipes' SparseTransformer) sees only relative
distances, so a window may be longer than the length it was trained on (``config.trained_length``; for
models saved without it, the position range ``max_position_embeddings``); with sliding-window attention
every base's local context is exactly as in training and only the global tokens (every
``global_every``-th) see further (a warning says so). A model with a learned position table (absolute
positions, Longformer) is capped at its table: longer windows are a ``ValueError``.
"""

from __future__ import annotations

import contextlib
import math
import threading
import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice

import numpy as np
import torch

from ..pipelines.batching import length_dependent_attention
from ..pipelines.progress import check_progress, wants_progress
from ..tokenization_dna import AMBIGUITY_CODES
from .decode import SpanDecoder, WindowMerger, check_span_decoding
from .fasta_index import DEFAULT_CHUNK, FastaFile, MemoryFasta
from .windows import DEFAULT_SKIP_N, check_positive, iter_windows

#: Default overlap between windows: a quarter of the window, at most this many bases (the CTCF recipe
#: model's convolutions and sliding-window attention see about 40 bases to each side).
MAX_DEFAULT_OVERLAP = 128


def position_window(config) -> int:
    """Bases the model's position range holds: ``max_position_embeddings`` less [CLS] and [SEP] (and
    RoBERTa-style position ids' offset)."""
    bb = config.backbone
    limit = bb["max_position_embeddings"]
    if bb.get("model_type") == "longformer" or bb.get("position_ids_style") == "roberta":
        limit -= bb.get("pad_token_id", 1) + 1
    return limit - 2  # [CLS] and [SEP]


def trained_window(config) -> int:
    """Bases per window at the length the model was trained on: ``config.trained_length`` (the longest
    training sequence, which the ``dna-motif-detection`` task records), or for a model saved without it its
    position range (:func:`position_window`). The default window: benchmarks/genome_scan.md measures longer
    windows of the CTCF recipe model agreeing less and less with it, for at most about twice the bases per
    second on CPU."""
    return getattr(config, "trained_length", None) or position_window(config)


def max_window(config) -> int | None:
    """The most bases one window may hold: the position range for a learned position table, None (any
    length) for rotary positions."""
    bb = config.backbone
    absolute = (
        bb.get("model_type") == "longformer" or bb.get("position_embedding_type", "absolute") == "absolute"
    )
    return position_window(config) if absolute else None


def default_stride(window: int) -> int:
    return window - min(window // 4, MAX_DEFAULT_OVERLAP)


class GenomeScanner:
    """Motif hits of a token-classification motif model over FASTA files or long strings.

    Args:
        model: a motif model (``LongformerForMotifDetection``, loaded e.g. with
            ``AutoModelForTokenClassification``) with single-nucleotide tokens.
        tokenizer: its :class:`~hf_sparse.DNATokenizer`.
        window: bases per window (default :func:`trained_window`; past the position range only with rotary
            positions).
        stride: bases between window starts (default ``window - min(window // 4, 128)``).
        batch_size: windows per forward pass. A model whose attention depends on the sequence length (random
            blocks, drawn for a batch's padded length; ``hf_sparse.pipelines.batching.length_dependent_attention``)
            runs the windows of each length in a batch in their own forward pass (all windows but a short
            segment's one are ``window`` long), so its hits never depend on ``batch_size``.
        skip_n: runs of at least this many N are not scanned.
        min_score: drop hits whose mean tag probability is lower.
        span_decoding: ``"bio"`` or ``"fixed_length"`` (default the model's).
        device: where the model runs (default: where it is).
        attention_backend: a SparseTransformer backbone's attention kernel for this scanner's forward passes
            (``"sdpa"``, ``"blocked"``, ...; all exact; default the model's). ``"auto"`` runs the block kernel
            on CPU (``hf_sparse.attention.dispatch.pick_backend``). The backbone's config holds it only while
            this scanner's batches run, and gets its own value back after each (the model is left as it was
            given: ``save_pretrained`` and other callers see its own backend).
        workers: batches in flight at once, each run by its own thread (torch releases the GIL inside its
            kernels). On a CPU, ``workers=2`` with one torch thread each (``torch.set_num_threads(1)``)
            keeps two cores busier than one batch at a time on two torch threads, whose small kernels
            leave cores idle; the hits and their order do not change.

    Hits are dicts ``{"chrom", "start", "end", "motif", "score", "strand"}`` (0-based, half-open, genome
    coordinates; ``score`` the mean probability of the span's tags; ``strand`` the strand on which the
    motif's PWM in the config scores the span higher), in file order and by position within a record.
    """

    def __init__(self, model, tokenizer, window: int | None = None, stride: int | None = None,
                 batch_size: int = 8, skip_n: int = DEFAULT_SKIP_N, min_score: float = 0.0,
                 span_decoding: str | None = None, device=None, attention_backend: str | None = None,
                 workers: int = 1):  # fmt: skip
        cfg = model.config
        if int(getattr(cfg, "kmer", 1)) != 1:
            raise ValueError(f"genome scanning needs a single-nucleotide model (kmer=1), got kmer={cfg.kmer}")
        if not getattr(cfg, "motif_names", None):
            raise ValueError("the model has no motif tagging head (config.motif_names is empty)")
        limit = max_window(cfg)
        if window is None:
            window = trained_window(cfg)
        self.window = check_positive("window", window)
        if limit is not None and self.window > limit:
            raise ValueError(
                f"window={window} is longer than the model's position table allows ({limit} bases); "
                "use a smaller window (windows overlap, nothing is lost)"
            )
        if self.window > trained_window(cfg):
            how = (
                "rotary positions allow it, but the model's global tokens then see more sequence than in training"
                if limit is None
                else "its position table allows it, but positions past the trained length were not trained"
            )
            warnings.warn(
                f"window={self.window} is longer than the {trained_window(cfg)} bases the model was trained on: "
                f"{how}, and its spans can differ from trained-length windows (benchmarks/genome_scan.md "
                "measures the CTCF recipe model's F1 falling with the window); check agreement first",
                UserWarning,
                stacklevel=2,
            )
        self.stride = check_positive("stride", default_stride(self.window) if stride is None else stride)
        if self.stride > self.window:
            raise ValueError(f"stride must be <= window, got stride={stride}, window={self.window}")
        self.batch_size = check_positive("batch_size", batch_size)
        self.workers = check_positive("workers", workers)
        self.skip_n = check_positive("skip_n", skip_n)
        if isinstance(min_score, bool) or not isinstance(min_score, (int, float)) or not 0 <= min_score <= 1:
            raise ValueError(f"min_score must be a number in [0, 1], got {min_score!r}")
        self.min_score = float(min_score)
        self.span_decoding = check_span_decoding(cfg, span_decoding)
        self.model, self.tokenizer = model.eval(), tokenizer
        self._length_dependent = length_dependent_attention(model)
        self._backbone_config = getattr(getattr(model, "backbone", None), "config", None)
        if attention_backend is not None:
            from ..attention.dispatch import BACKENDS

            if attention_backend not in BACKENDS or not hasattr(self._backbone_config, "attention_backend"):
                raise ValueError(
                    f"attention_backend must be one of {BACKENDS} for a SparseTransformer backbone, got "
                    f"{attention_backend!r} for {type(self._backbone_config).__name__}"
                )
        #: the attention kernel the forward passes use (None: the model has no such setting)
        self.attention_backend = attention_backend or getattr(
            self._backbone_config, "attention_backend", None
        )
        self._own_backend = attention_backend  # set around forward passes; None: leave the model's
        self._backend_lock, self._running, self._saved_backend = threading.Lock(), 0, None
        if device is not None:
            if torch.device(device).type == "meta":
                raise ValueError(
                    f"device={device!r}: a meta tensor holds no data, the model cannot run there"
                )
            self.model.to(device)
        self.device = next(model.parameters()).device
        lut = np.full(256, -1, dtype=np.int64)
        for b in "ACGTN":
            lut[ord(b)] = lut[ord(b.lower())] = tokenizer.convert_tokens_to_ids(b)
        for b in AMBIGUITY_CODES:
            lut[ord(b)] = lut[ord(b.lower())] = tokenizer.convert_tokens_to_ids("N")
        self._lut = lut
        self._specials = (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id)

    def encode(self, windows: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``[CLS] bases [SEP]`` ids and attention mask of a batch, padded (the tokenizer's ids)."""
        cls, sep, pad = self._specials
        width = max(len(w) for w in windows) + 2
        ids = np.full((len(windows), width), pad, dtype=np.int64)  # (B, N)
        mask = np.zeros((len(windows), width), dtype=np.int64)
        for k, w in enumerate(windows):
            codes = self._lut[np.frombuffer(w.encode("ascii"), dtype=np.uint8)]
            if (codes < 0).any():
                bad = int(np.flatnonzero(codes < 0)[0])
                raise ValueError(f"invalid base {w[bad]!r} in a window")
            ids[k, 0], ids[k, 1 : len(w) + 1], ids[k, len(w) + 1] = cls, codes, sep
            mask[k, : len(w) + 2] = 1
        return torch.from_numpy(ids), torch.from_numpy(mask)

    @torch.inference_mode()
    def predict(self, windows: list[str]) -> list[np.ndarray]:
        """Per-base tag probabilities ``(len, tags)`` of each window (one forward pass). A batch of equal
        windows (all but a short segment's one) goes without an attention mask: there is no padding to hide,
        and the model skips the masking work (the same logits). For a model with length-dependent attention
        (random blocks drawn for the padded length) windows of each length run in a forward pass of their
        own, so a window's probabilities do not depend on the others in its batch."""
        lengths = list(dict.fromkeys(len(w) for w in windows))
        if self._length_dependent and len(lengths) > 1:
            out: list = [None] * len(windows)
            for length in lengths:
                rows = [k for k, w in enumerate(windows) if len(w) == length]
                for k, probs in zip(rows, self.predict([windows[k] for k in rows])):
                    out[k] = probs
            return out
        ids, mask = self.encode(windows)
        mask = None if bool(mask.all()) else mask.to(self.device)
        with self._backend():
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask).logits
        probs = torch.softmax(logits.float(), -1).cpu().numpy()  # (B, N, tags)
        return [probs[k, 1 : len(w) + 1].astype(np.float64) for k, w in enumerate(windows)]

    @contextlib.contextmanager
    def _backend(self) -> Iterator[None]:
        """``attention_backend`` in the backbone's config while forward passes of this scanner run (several at
        once with ``workers``: the first sets it, the last one out restores the model's own)."""
        if self._own_backend is None:
            yield
            return
        config = self._backbone_config
        with self._backend_lock:
            if self._running == 0:
                self._saved_backend, config.attention_backend = config.attention_backend, self._own_backend
            self._running += 1
        try:
            yield
        finally:
            with self._backend_lock:
                self._running -= 1
                if self._running == 0:
                    config.attention_backend = self._saved_backend

    def scan(self, fasta, progress=None, chunk: int = DEFAULT_CHUNK) -> Iterator[dict]:
        """Hits of every record of ``fasta`` (a path, a :class:`FastaFile` or a :class:`MemoryFasta`),
        streamed; ``progress``: a bar in bases (None: when there are many windows)."""
        progress = check_progress(progress)
        if not isinstance(fasta, (FastaFile, MemoryFasta)):
            with FastaFile(fasta) as opened:
                yield from self.scan(opened, progress, chunk)
            return
        offsets, total = {}, 0  # bases before each record, for the progress bar
        for r in fasta.records:
            offsets[r.name], total = total, total + r.length
        bar = None
        if wants_progress(progress, math.ceil(total / self.stride)):
            from tqdm.auto import tqdm

            bar = tqdm(total=total, desc="scan", unit="bp", unit_scale=True, dynamic_ncols=True)
        windows = iter_windows(fasta, self.window, self.stride, self.skip_n, chunk)
        batches = iter(lambda: list(islice(windows, self.batch_size)), [])
        merger = decoder = None
        tags = len(self.model.config.id2label)
        done = 0
        try:
            for batch, predicted in self._predicted(batches):
                for (w, bases), probs in zip(batch, predicted):
                    if w.start == w.seg_start:
                        merger = WindowMerger(w.seg_start, tags)
                        decoder = SpanDecoder(
                            self.model.config, w.seg_start, self.span_decoding, self.min_score
                        )
                    spans = decoder.push(*merger.add(w, probs, bases))
                    if w.last:
                        spans += decoder.finish()
                    for s in spans:
                        yield {"chrom": w.record, **s}
                    if bar is not None:
                        # bases settled so far, N runs included, so the bar ends at the genome's length
                        bar.update(max(0, offsets[w.record] + w.final - done))
                        done = max(done, offsets[w.record] + w.final)
        finally:
            if bar is not None:
                bar.update(total - done)
                bar.close()

    def _predicted(self, batches: Iterable[list]) -> Iterator[tuple[list, list[np.ndarray]]]:
        """``(batch, probabilities)`` in batch order; with ``workers > 1`` the next batches run in threads
        while the caller merges and decodes this one (at most ``workers`` batches held)."""
        if self.workers == 1:
            for batch in batches:
                yield batch, self.predict([b for _, b in batch])
            return
        with ThreadPoolExecutor(self.workers, thread_name_prefix="genome-scan") as pool:
            pending: deque = deque()
            try:
                for batch in batches:
                    pending.append((batch, pool.submit(self.predict, [b for _, b in batch])))
                    if len(pending) == self.workers:
                        batch, future = pending.popleft()
                        yield batch, future.result()
                while pending:
                    batch, future = pending.popleft()
                    yield batch, future.result()
            finally:
                for _, future in pending:
                    future.cancel()

    def scan_sequence(self, sequence: str, name: str = "sequence") -> list[dict]:
        """Hits of one in-memory sequence (the same windows, merge and decoding as :meth:`scan`)."""
        return list(self.scan(MemoryFasta([(name, sequence)]), progress=False))


def check_model_path(model_path, name: str = "model_path") -> None:
    """``model_path`` (argument ``name``) is a folder, or may be a Hub model id: a name that can only be a path
    (absolute, ``./``, ``../``, ``~``, more than one ``/``) must be a folder, and offline any other name must
    be a folder or a Hub model in the local cache (transformers would report a missing folder as a bad repo
    id or as "couldn't connect to huggingface.co"). Online, a Hub id is left to transformers.

    Raises:
        FileNotFoundError: naming the argument, the value and the folder looked for.
    """
    from ..hub.common import require_local_or_cached

    require_local_or_cached(f"{name} {model_path}", model_path)


def load_scanner(model_path: str, device=None, **kwargs) -> GenomeScanner:
    """A :class:`GenomeScanner` for a saved motif model (folder or Hub id), loaded with
    ``AutoModelForTokenClassification`` and ``AutoTokenizer``; ``FileNotFoundError`` for a folder that does
    not exist (:func:`check_model_path`)."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    import hf_sparse  # noqa: F401  (registers the motif model and the DNA tokenizer)

    check_model_path(model_path)
    model = AutoModelForTokenClassification.from_pretrained(model_path)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    return GenomeScanner(model, tokenizer, device=device, **kwargs)


__all__ = [
    "GenomeScanner",
    "check_model_path",
    "load_scanner",
    "max_window",
    "position_window",
    "trained_window",
]
