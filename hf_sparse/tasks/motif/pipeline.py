"""``dna-motif-detection``: motif spans and sequence-level scores for a DNA sequence of any length.

Sequences longer than the model's maximum are cut into overlapping windows (``window`` bases,
``stride`` apart, the last one aligned to the end); every base takes the prediction of the window in
which it lies farthest from an edge, and spans are decoded once over the whole sequence, so a motif
crossing a window boundary is found whole (windows must overlap for that: with ``stride == window`` a
base at a window edge is predicted without context on one side). A k-mer model reads whole k-mers per
window; a sequence just short of one window whose leftover bases (one token each) would not fit is read in
overlapping windows too. Nothing is truncated.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.pipelines.base import ChunkPipeline

from ...pipelines.batching import RightPaddedBatches
from ...pipelines.progress import check_progress, progress_bar
from ...pipelines.saving import SaveModelMixin
from ...tokenization_dna import normalize_sequence, reverse_complement
from ...utils.labels import spans_from_bio
from ...utils.validation import check_fraction, check_int
from .pwm import log_odds

_CODES = {"A": 0, "C": 1, "G": 2, "T": 3}


def fixed_length_spans(
    log_probs: np.ndarray, id2label: dict, lengths: dict[str, int]
) -> list[tuple[str, int, int]]:
    """The non-overlapping spans, each exactly as long as its motif, that maximise the total
    log-probability of the tags they imply (``B-X`` on a span's first base, ``I-X`` on the others,
    ``O`` everywhere else): a semi-Markov Viterbi pass, O(n x motifs).

    ``log_probs``: ``(n, tags)`` per-base log-probabilities, columns as in ``id2label``; ``lengths``:
    motif name -> length in bases (every motif with ``B-``/``I-`` tags must be there).
    """
    n = log_probs.shape[0]
    col = {tag: int(i) for i, tag in id2label.items()}
    if "O" not in col:
        raise ValueError(f"id2label has no 'O' tag: {sorted(col)}")
    names = sorted({t[2:] for t in col if t[:2] in ("B-", "I-")})
    missing = [m for m in names if m not in lengths]
    if missing:
        raise ValueError(f"fixed-length decoding needs the length of every motif; missing {missing}")
    segs = []  # (name, length, B column log-probs, prefix sums of I column log-probs)
    for name in names:
        length = int(lengths[name])
        if 1 <= length <= n:
            inside = np.concatenate([[0.0], np.cumsum(log_probs[:, col[f"I-{name}"]])])  # (n + 1,)
            segs.append((name, length, log_probs[:, col[f"B-{name}"]], inside))
    outside = log_probs[:, col["O"]]
    best = np.full(n + 1, -np.inf)
    best[0] = 0.0
    back: list[tuple[str, int] | None] = [None] * (n + 1)
    for i in range(1, n + 1):  # best[i]: the best labelling of bases 0 .. i-1
        value, choice = best[i - 1] + outside[i - 1], None
        for name, length, b, inside in segs:
            s = i - length
            if s >= 0:
                v = best[s] + b[s] + inside[i] - inside[s + 1]
                if v > value:
                    value, choice = v, (name, s)
        best[i], back[i] = value, choice
    spans, i = [], n
    while i > 0:
        if back[i] is None:
            i -= 1
        else:
            name, s = back[i]
            spans.append((name, s, i))
            i = s
    return spans[::-1]


def check_span_decoding(config, span_decoding: str | None = None) -> str:
    """The span decoding to use (``span_decoding``, default the config's), checked against the config:
    ``ValueError`` for a name other than ``"bio"``/``"fixed_length"``, or for ``"fixed_length"`` when a
    motif has no length in ``config.motif_lengths`` (the pipeline's errors)."""
    how = span_decoding or getattr(config, "span_decoding", "bio")
    if how not in ("bio", "fixed_length"):
        raise ValueError(f"span_decoding must be 'bio' or 'fixed_length', got {how!r}")
    if how == "fixed_length":
        names = sorted({t[2:] for t in config.id2label.values() if t[:2] in ("B-", "I-")})
        missing = [n for n in names if n not in (getattr(config, "motif_lengths", None) or {})]
        if missing:
            raise ValueError(f"fixed-length decoding needs the length of every motif; missing {missing}")
    return how


def num_tokens(bases: int, kmer: int) -> int:
    """Tokens of ``bases`` bases without [CLS] and [SEP] (:class:`~hf_sparse.tokenization_dna.DNATokenizer`):
    the whole k-mers, then one per base left over (so 29 bases are 11 tokens of 3-mers, 30 bases 10)."""
    return bases // kmer + bases % kmer


def window_bases(config) -> int:
    """The most bases one window of a motif model (``config``) reads: its position range less [CLS] and [SEP],
    in whole k-mers (the ``dna-motif-detection`` pipeline's default ``window``)."""
    bb = config.backbone
    limit = bb["max_position_embeddings"]
    if bb.get("model_type") == "longformer" or bb.get("position_ids_style") == "roberta":
        limit -= bb.get("pad_token_id", 1) + 1
    return (limit - 2) * max(1, int(getattr(config, "kmer", 1)))


def span_tags(probs: np.ndarray, config, how: str, motif: str, start: int, end: int) -> list[int]:
    """Tag ids a span ``[start, end)`` is scored by (its score: their mean probability), as the
    ``dna-motif-detection`` pipeline scores it: ``I-X`` on its first base when ``bio`` decoding started it
    at an ``I-X`` (no ``B-X`` before it), else ``B-X``; ``I-X`` on the others."""
    inside = config.label2id["I-" + motif]
    first = config.label2id["B-" + motif]
    if how == "bio" and int(probs[start].argmax()) == inside:
        first = inside
    return [first] + [inside] * (end - start - 1)


def decode_spans(probs: np.ndarray, config, span_decoding: str | None = None) -> list[tuple[str, int, int]]:
    """Spans ``(motif, start, end)`` from per-base tag probabilities ``(n, tags)`` with the config's
    ``span_decoding`` (or the one given): ``"bio"`` (argmax tags) or ``"fixed_length"``."""
    if check_span_decoding(config, span_decoding) == "fixed_length":
        return fixed_length_spans(np.log(np.clip(probs, 1e-12, None)), config.id2label, config.motif_lengths)
    return spans_from_bio([config.id2label[int(i)] for i in probs.argmax(-1)])


def strand_of(seq: str, counts) -> str | None:
    """'+' or '-': the strand on which the motif's log-odds score of ``seq`` is higher (None when the
    span and the motif differ in length)."""
    m = np.asarray(counts, dtype=float)
    if m.ndim != 2 or m.shape[0] != 4 or m.shape[1] != len(seq):
        return None
    lo = log_odds(m)  # (4, L) bits, pseudocount 0.25, uniform background

    def score(s):
        return sum(lo[_CODES[b], i] for i, b in enumerate(s) if b in _CODES)

    return "+" if score(seq) >= score(reverse_complement(seq)) else "-"


class DNAMotifDetectionPipeline(SaveModelMixin, RightPaddedBatches, ChunkPipeline):
    """DNA sequence in; ``{"spans": [{motif, start, end, strand, score}], "sequence_scores": {...},
    "windows": n}`` out (plus ``"label"`` for a classification head). ``start``/``end`` are 0-based
    base positions (end exclusive) in the input with whitespace removed; ``score`` is the mean
    probability of the span's tags (``I-X`` on the first base of a span that an ``I-X`` started, else
    ``B-X``; ``I-X`` on the others); ``strand`` is the strand on which the motif's PWM (kept in the
    config) scores the span higher.

    Call options: ``window`` (bases per window, at least one k-mer; default the model's maximum),
    ``stride`` (default three quarters of the window), ``min_score`` (drop spans whose score is lower,
    in [0, 1]), ``span_decoding`` (``"bio"`` or ``"fixed_length"``; default the config's, see
    :func:`decode_spans`), ``progress`` (a progress bar over the windows of a long sequence or the
    items of a list: None = when there are many, True, False; see :mod:`.progress`). Options given to
    the constructor are the defaults of every call. Any other keyword (of the call or the constructor) is
    a ``TypeError``; an empty list a ``ValueError``. The model is put in eval mode when the pipeline is
    built, so outputs are deterministic.

    Input rules are the tokenizer's: ``A C G T N`` in either case, IUPAC ambiguity codes read as N,
    whitespace ignored; an empty sequence is a ``ValueError``, any other character a ``ValueError``
    naming it and its position, anything but a str a ``TypeError``. A list of str gives a list of
    results.
    """

    _CALL_OPTIONS = (
        "window",
        "stride",
        "min_score",
        "span_decoding",
        "progress",
        "batch_size",
        "num_workers",
    )

    def __init__(self, *args, progress=None, **kwargs):
        self._progress = check_progress(progress)  # the default of every call
        super().__init__(*args, **kwargs)
        self.model.eval()  # dropout off: deterministic outputs

    def __call__(self, inputs, *args, **kwargs):
        unknown = sorted(set(kwargs) - set(self._CALL_OPTIONS))
        if unknown or args:
            raise TypeError(
                f"dna-motif-detection got unknown argument(s) {unknown or list(args)}; the call options are "
                f"{list(self._CALL_OPTIONS)}"
            )
        progress = check_progress(kwargs.pop("progress", None))
        if progress is None:
            progress = self._progress  # the constructor's
        if progress is not None:
            kwargs["progress"] = progress
        if isinstance(inputs, (list, tuple)):
            if not inputs:
                raise ValueError("no sequences: pass a DNA sequence (str) or a non-empty list of them")
            batch_size = kwargs.get("batch_size") or self._batch_size
            bar = (
                None
                if batch_size not in (None, 1)
                else progress_bar(len(inputs), "dna-motif-detection", progress)
            )
            if bar is not None:  # one sequence at a time, so the bar moves per sequence
                inner = {**kwargs, "progress": False}
                try:
                    results = []
                    for sequence in inputs:
                        results.append(super().__call__(sequence, **inner))
                        bar.update(1)
                    return results
                finally:
                    bar.close()
            inputs = list(inputs)  # the base batches lists (a tuple would be one input)
        return super().__call__(inputs, **kwargs)

    def _sanitize_parameters(
        self, window=None, stride=None, min_score=None, span_decoding=None, progress=None, **kwargs
    ):
        if kwargs:  # a constructor option (the call's are checked in __call__): a misspelling must not run
            raise TypeError(
                f"dna-motif-detection got unknown option(s) {sorted(kwargs)}; the options are "
                f"{list(self._CALL_OPTIONS)}"
            )
        pre, post = {}, {}
        if progress is not None:
            pre["progress"] = check_progress(progress)
        if span_decoding is not None:  # checked against the model before any window runs
            post["span_decoding"] = check_span_decoding(self.model.config, span_decoding)
        if window is not None:
            pre["window"] = window
        if stride is not None:
            pre["stride"] = stride
        if min_score is not None:
            post["min_score"] = check_fraction("min_score", min_score)
        return pre, {}, post

    @property
    def kmer(self) -> int:
        return max(1, int(getattr(self.model.config, "kmer", 1)))

    def max_bases(self) -> int:
        """The most bases one window can hold: the model's position range less [CLS] and [SEP], in whole
        k-mers (bases left over after the last whole k-mer are one token each, see :func:`num_tokens`)."""
        return window_bases(self.model.config)

    def preprocess(self, sequence, window=None, stride=None, progress=None):
        if not isinstance(sequence, str):
            raise TypeError(f"sequence must be a str, got {type(sequence).__name__}")
        seq = normalize_sequence(sequence)  # raises ValueError naming a bad character and its position
        if not seq:
            raise ValueError("sequence is empty (no A/C/G/T/N bases)")
        limit, k = self.max_bases(), self.kmer
        window = check_int("window", limit if window is None else window, 1, limit)
        if window < k:
            raise ValueError(
                f"window must be at least one k-mer ({k} bases) for this kmer={k} model, got {window}"
            )
        window -= window % k  # whole k-mers per window
        stride = check_int("stride", max(1, (3 * window) // 4) if stride is None else stride, 1, window)
        if len(seq) < window and num_tokens(len(seq), self.kmer) > num_tokens(limit, self.kmer):
            # a sequence just short of a window whose leftover bases (single-base tokens) would overflow the
            # model: overlapping windows of whole k-mers instead, the last aligned to the end
            window = len(seq) - len(seq) % k
            stride = min(stride, window)
        starts = list(range(0, max(len(seq) - window, 0) + 1, stride))
        if starts[-1] + window < len(seq):
            starts.append(len(seq) - window)
        bar = progress_bar(len(starts), f"dna-motif-detection ({len(seq):,} bases)", progress)
        try:
            for k, s in enumerate(starts):
                enc = self.tokenizer(seq[s : s + window], return_tensors="pt")
                yield {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "start": s,
                       "sequence": seq, "is_last": k == len(starts) - 1}  # fmt: skip
                if bar is not None:  # the window was consumed (forward done) before the next is asked for
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()

    def _forward(self, inputs):
        meta = {k: inputs.pop(k) for k in ("start", "sequence", "is_last")}
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        out = self.model(input_ids=ids, attention_mask=mask)
        res = {**meta, "input_ids": ids, "attention_mask": mask}
        if out.logits is not None:
            res["tag_probs"] = torch.softmax(out.logits.float(), -1)  # (B, N, tags)
        if out.sequence_logits is not None:
            res["sequence_logits"] = out.sequence_logits.float()  # (B, outputs)
        return res

    def _base_probs(self, output) -> tuple[int, np.ndarray]:
        """(first base, per-base tag probabilities) of one window; a k-mer token's probabilities go to
        each of its bases, with B- moved to I- after its first base."""
        cfg = self.model.config
        ids = output["input_ids"][0]
        n = int(output["attention_mask"][0].sum())
        probs = output["tag_probs"][0, 1 : n - 1].numpy()  # drop [CLS] and [SEP]
        tokens = self.tokenizer.convert_ids_to_tokens(ids[1 : n - 1].tolist())
        lengths = np.array([len(t) for t in tokens])
        if (lengths == 1).all():
            return output["start"], probs
        b_to_i = {i: cfg.label2id["I-" + t[2:]] for i, t in cfg.id2label.items() if t.startswith("B-")}
        rows = []
        for p, k in zip(probs, lengths):
            rows.append(p)
            if k > 1:
                q = p.copy()
                for b, i in b_to_i.items():
                    q[i] += q[b]
                    q[b] = 0.0
                rows.extend([q] * (k - 1))
        return output["start"], np.stack(rows)

    def postprocess(self, outputs, min_score=0.0, span_decoding=None):
        cfg = self.model.config
        seq = outputs[0]["sequence"]
        result = {"spans": [], "sequence_scores": {}, "windows": len(outputs)}
        if "tag_probs" in outputs[0]:
            n = len(seq)
            probs = np.zeros((n, outputs[0]["tag_probs"].shape[-1]))
            margin = np.full(n, -1.0)
            for o in outputs:  # each base keeps the window where it is farthest from an edge
                s, p = self._base_probs(o)
                pos = np.arange(s, s + p.shape[0])
                m = np.minimum(pos - s, s + p.shape[0] - 1 - pos).astype(float)
                take = m > margin[pos]
                probs[pos[take]] = p[take]
                margin[pos[take]] = m[take]
            how = span_decoding or getattr(cfg, "span_decoding", "bio")
            for motif, a, b in decode_spans(probs, cfg, how):
                score = float(probs[np.arange(a, b), span_tags(probs, cfg, how, motif, a, b)].mean())
                if score < min_score:
                    continue
                counts = (cfg.motifs or {}).get(motif)
                result["spans"].append(
                    {
                        "motif": motif,
                        "start": a,
                        "end": b,
                        "strand": strand_of(seq[a:b], counts) if counts else None,
                        "score": round(score, 4),
                    }
                )
        if "sequence_logits" in outputs[0]:
            logits = torch.cat([o["sequence_logits"] for o in outputs])  # (windows, outputs)
            if cfg.sequence_task == "motif_presence":
                scores = torch.sigmoid(logits).max(0).values  # present if present in any window
                result["sequence_scores"] = {m: round(float(v), 4) for m, v in zip(cfg.motif_names, scores)}
            else:
                scores = torch.softmax(logits, -1).mean(0)
                result["sequence_scores"] = {
                    c: round(float(v), 4) for c, v in zip(cfg.sequence_label_names, scores)
                }
                result["label"] = cfg.sequence_label_names[int(scores.argmax())]
        return result


__all__ = [
    "DNAMotifDetectionPipeline",
    "check_span_decoding",
    "decode_spans",
    "fixed_length_spans",
    "num_tokens",
    "span_tags",
    "strand_of",
    "window_bases",
]
