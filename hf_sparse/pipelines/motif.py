"""``dna-motif-detection``: motif spans and sequence-level scores for a DNA sequence of any length.

Sequences longer than the model's maximum are cut into overlapping windows (``window`` bases,
``stride`` apart, the last one aligned to the end); every base takes the prediction of the window in
which it lies farthest from an edge, and spans are decoded once over the whole sequence, so a motif
crossing a window boundary is found whole. Nothing is truncated.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.pipelines.base import ChunkPipeline

from ..tokenization_dna import normalize_sequence, reverse_complement

_CODES = {"A": 0, "C": 1, "G": 2, "T": 3}


def decode_bio(tags: list[str]) -> list[tuple[str, int, int]]:
    """BIO tags -> (type, start, end) spans, end exclusive; an I- that continues nothing opens a span."""
    spans, cur = [], None
    for i, t in enumerate([*tags, "O"]):
        kind, _, name = t.partition("-")
        if cur is not None and not (kind == "I" and name == cur[0]):
            spans.append((cur[0], cur[1], i))
            cur = None
        if kind in ("B", "I") and cur is None:
            cur = (name, i)
    return spans


def strand_of(seq: str, counts) -> str | None:
    """'+' or '-': the strand on which the motif's log-odds score of ``seq`` is higher."""
    m = np.asarray(counts, dtype=float)
    if m.ndim != 2 or m.shape[0] != 4 or m.shape[1] != len(seq):
        return None
    lo = np.log2((m + 0.25) / (m + 0.25).sum(0, keepdims=True) / 0.25)

    def score(s):
        return sum(lo[_CODES[b], i] for i, b in enumerate(s) if b in _CODES)

    return "+" if score(seq) >= score(reverse_complement(seq)) else "-"


class DNAMotifDetectionPipeline(ChunkPipeline):
    """DNA sequence in; ``{"spans": [{motif, start, end, strand, score}], "sequence_scores": {...},
    "windows": n}`` out. ``start``/``end`` are 0-based base positions (end exclusive) in the input
    with whitespace removed.

    Call options: ``window`` (bases per window; default the model's maximum), ``stride`` (default
    three quarters of the window), ``min_score`` (drop spans whose mean tag probability is lower).
    """

    def _sanitize_parameters(self, window=None, stride=None, min_score=None, **kwargs):
        pre, post = {}, {}
        if window is not None:
            pre["window"] = window
        if stride is not None:
            pre["stride"] = stride
        if min_score is not None:
            post["min_score"] = min_score
        return pre, {}, post

    def max_bases(self) -> int:
        bb = self.model.config.backbone
        limit = bb["max_position_embeddings"]
        if bb.get("model_type") == "longformer" or bb.get("position_ids_style") == "roberta":
            limit -= bb.get("pad_token_id", 1) + 1
        return (limit - 2) * max(1, getattr(self.model.config, "kmer", 1))  # [CLS] and [SEP]

    def preprocess(self, sequence, window=None, stride=None):
        if not isinstance(sequence, str):
            raise TypeError(f"sequence must be a str, got {type(sequence).__name__}")
        seq = normalize_sequence(sequence)  # raises ValueError naming a bad character and its position
        if not seq:
            raise ValueError("sequence is empty (no A/C/G/T/N bases)")
        window = window or self.max_bases()
        if isinstance(window, bool) or not isinstance(window, int) or not 0 < window <= self.max_bases():
            raise ValueError(
                f"window must be an int in [1, {self.max_bases()}] (the model's maximum), got {window!r}"
            )
        stride = stride or max(1, (3 * window) // 4)
        if isinstance(stride, bool) or not isinstance(stride, int) or not 0 < stride <= window:
            raise ValueError(f"stride must be an int in [1, window={window}], got {stride!r}")
        starts = list(range(0, max(len(seq) - window, 0) + 1, stride))
        if starts[-1] + window < len(seq):
            starts.append(len(seq) - window)
        for k, s in enumerate(starts):
            enc = self.tokenizer(seq[s : s + window], return_tensors="pt")
            yield {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "start": s,
                   "sequence": seq, "is_last": k == len(starts) - 1}  # fmt: skip

    def _forward(self, inputs):
        meta = {k: inputs.pop(k) for k in ("start", "sequence", "is_last")}
        out = self.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        res = {**meta}
        if out.logits is not None:
            res["tag_probs"] = torch.softmax(out.logits[0, 1:-1].float(), -1)  # drop [CLS]/[SEP]
        if out.sequence_logits is not None:
            res["sequence_logits"] = out.sequence_logits[0].float()
        return res

    def postprocess(self, outputs, min_score=0.0):
        cfg = self.model.config
        seq = outputs[0]["sequence"]
        result = {"spans": [], "sequence_scores": {}, "windows": len(outputs)}
        if "tag_probs" in outputs[0]:
            n, n_tags = len(seq), outputs[0]["tag_probs"].shape[-1]
            probs = torch.zeros(n, n_tags)
            margin = torch.full((n,), -1.0)
            for o in outputs:  # each base keeps the window where it is farthest from an edge
                p, s = o["tag_probs"], o["start"]
                pos = torch.arange(s, s + p.shape[0])
                m = torch.minimum(pos - s, s + p.shape[0] - 1 - pos).float()
                take = m > margin[pos]
                probs[pos[take]] = p[take]
                margin[pos[take]] = m[take]
            best, ids = probs.max(-1)
            tags = [cfg.id2label[int(i)] for i in ids]
            for motif, a, b in decode_bio(tags):
                score = float(best[a:b].mean())
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
            logits = torch.stack([o["sequence_logits"] for o in outputs])
            if cfg.sequence_task == "motif_presence":
                scores = torch.sigmoid(logits).max(0).values
                result["sequence_scores"] = {m: round(float(v), 4) for m, v in zip(cfg.motif_names, scores)}
            else:
                scores = torch.softmax(logits, -1).mean(0)
                result["sequence_scores"] = {
                    c: round(float(v), 4) for c, v in zip(cfg.sequence_label_names, scores)
                }
                result["label"] = cfg.sequence_label_names[int(scores.argmax())]
        return result


__all__ = ["DNAMotifDetectionPipeline", "decode_bio", "strand_of"]
