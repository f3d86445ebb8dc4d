"""DNA motif detection fine-tuning (``task: dna-motif-detection``): per-base motif tags and a sequence head.

Three data sources (recipe key ``data``), each read into ``datasets.Dataset`` splits (cached by the
datasets library; preprocessing in ``map`` with the recipe's ``num_proc``):

- ``synthetic`` (no files needed): :class:`~hf_sparse.tasks.motif.synthetic.SyntheticMotifGenerator` plants instances
  sampled from the built-in JASPAR motifs (``motifs``: a subset of their names) into i.i.d. background
  (or windows of ``background_fasta``). Splits are disjoint ranges of example indices of one seeded
  generator (``Dataset.from_generator``). Per-base BIO tags + multi-hot motif presence.
- ``classification``: ``data_dir`` with ``train/validation/test.jsonl`` (or ``.jsonl.gz``) rows ``{"sequence", "label"}``
  (int class id; ``label_name`` optional; ``load_dataset("json")``, rows checked with errors naming file,
  row and field), e.g. Genomic Benchmarks human non-TATA promoters. A
  sequence-level classifier only (no per-base head).
- ``scan``: FASTA sequences (``fasta``, e.g. CTCF ChIP-seq peaks) labelled per base by scanning the
  motifs ``motif_ids`` of ``motif_file`` (JASPAR or TRANSFAC) with a relative ``scan_threshold``; with
  ``negatives: shuffle`` every sequence also gets a dinucleotide-shuffled copy (labelled by the same
  scan), and the sequence head classifies peak vs shuffled. The records are split first (seeded
  ``train_test_split`` of the records, :func:`hf_sparse.data.loading.split_by_group`), then labelled, so
  a record and its shuffled copy stay in the same split.

Metrics (each evaluation; ``eval_``/``test_`` prefixes added by the runner):

- per-base heads: ``span_f1``, ``span_precision``, ``span_recall`` (exact ``(motif, start, end)``
  matches, :func:`hf_sparse.tasks.motif.metrics.span_f1`), ``span_overlap_f1``, ``per_base_f1`` and
  ``span_f1_<motif>`` per motif (left out for a motif with neither a true nor a predicted span in the split);
- sequence heads: ``accuracy`` and ``auroc`` (classification: class accuracy and the AUROC of the
  positive class, macro one-vs-rest for more classes; motif presence: accuracy over every (sequence,
  motif) cell at probability 0.5 and the macro AUROC over motifs), and ``f1`` (binary/macro F1, or
  micro F1 of the presence matrix).

Artifacts besides the runner's (``loss.png``, README.md, ...): ``motif_f1.png`` (span F1 per motif on
the test split, else validation) and ``attention.png`` (attention weights of the first and last
layer on one test sequence).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch

from ...data.loading import (
    SPLITS,
    fingerprint,
    jsonl_files,
    load_jsonl_splits,
    num_proc_for,
    split_by_group,
    tokenizer_fingerprint,
)
from ...metrics import load as load_metric
from ...metrics.classification import accuracy, auroc, multilabel_f1, precision_recall_f1
from ...metrics.spans import span_dicts
from ...models.longformer_tasks.backbone import card_pattern
from ...tokenization_dna import normalize_sequence, reverse_complement
from ...training import Task, path_field
from ...training.recipe import require_model, require_path
from ...utils.labels import IGNORE_INDEX, spans_from_bio
from ...utils.validation import check_int
from ..arguments import BackboneArguments
from .collator import MotifCollator
from .data import check_classification_row, fasta_dataset, scan_rows
from .motifs import builtin_motifs, read_motifs
from .pipeline import decode_spans, num_tokens
from .scanning import spans_to_tags
from .synthetic import synthetic_dataset

logger = logging.getLogger(__name__)

DATA_SOURCES = ("synthetic", "classification", "scan")


# --------------------------------------------------------------------------------------- arguments


@dataclass
class MotifArguments(BackboneArguments):
    """Recipe keys of the ``dna-motif-detection`` task."""

    data: str = field(
        default="synthetic",
        metadata={"help": f"Data source: one of {DATA_SOURCES} (see the module docstring)."},
    )
    dataset_name: str | None = field(
        default=None, metadata={"help": "Readable name of the data for the model card (default: from data)."}
    )
    # --- model ---
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "A saved LongformerForMotifDetection (folder or Hub id) to fine-tune further; its "
            "heads must match the data. None: a new randomly initialised model from the keys below."
        },
    )
    backbone: str = field(
        default="sparse_transformer",
        metadata={"help": "New model's encoder: 'sparse_transformer' or 'longformer'."},
    )
    intermediate_size: int = field(default=256, metadata={"help": "Feed-forward width."})
    position_embedding_type: str = field(
        default="rotary",
        metadata={"help": "SparseTransformer positions: 'rotary' or 'absolute' (Longformer: absolute)."},
    )
    max_length: int = field(
        default=1024,
        metadata={"help": "Longest input in tokens, [CLS] and [SEP] included (the position range)."},
    )
    global_every: int | None = field(
        default=100,
        metadata={"help": "Tokens 0, k, 2k, ... get global attention (None or 0: only [CLS])."},
    )
    conv_kernel_size: int = field(
        default=0, metadata={"help": "Residual convolution over the token embeddings (odd width; 0: none)."}
    )
    conv_layers: int = field(
        default=1, metadata={"help": "Stacked embedding convolutions (with conv_kernel_size)."}
    )
    span_decoding: str = field(
        default="fixed_length",
        metadata={
            "help": "Spans from tag probabilities: 'fixed_length' (motif-length Viterbi) or 'bio' (argmax)."
        },
    )
    pooling: str = field(
        default="cls",
        metadata={"help": "Sequence head input: 'cls', 'mean' or 'cls+mean' (both, concatenated)."},
    )
    kmer: int = field(
        default=1,
        metadata={"help": "Bases per token (1: single nucleotides; >1 only without per-base tags)."},
    )
    kmer_embedding: int = field(
        default=0,
        metadata={
            "help": "Add a learned embedding of the overlapping k-mer centred on each base (0: none; needs kmer: 1)."
        },
    )
    kmer_spectrum: int = field(
        default=0,
        metadata={
            "help": "The sequence head also reads log counts of every k-mer of length 1..K (0: none; needs kmer: 1)."
        },
    )
    sequence_loss_weight: float = field(
        default=1.0, metadata={"help": "Weight of the sequence loss next to the per-base loss."}
    )
    # --- synthetic data ---
    motifs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Built-in motifs to plant (synthetic data); None: all six (CTCF SP1 GATA1 REST TP53 CREB1)."
        },
    )
    sequence_length: int = field(default=512, metadata={"help": "Bases per synthetic sequence."})
    num_train: int = field(default=2000, metadata={"help": "Synthetic training sequences."})
    num_validation: int = field(default=200, metadata={"help": "Synthetic validation sequences."})
    num_test: int = field(default=200, metadata={"help": "Synthetic test sequences (0: no test split)."})
    min_instances: int = field(default=1, metadata={"help": "Fewest motif instances in a positive sequence."})
    max_instances: int = field(default=3, metadata={"help": "Most motif instances in a sequence."})
    negative_fraction: float = field(default=0.2, metadata={"help": "Fraction of sequences without motifs."})
    background_fasta: str | None = path_field(
        help="FASTA (plain or gzip) whose windows serve as synthetic background (None: i.i.d. bases)."
    )
    gc_content: float | None = field(
        default=None, metadata={"help": "GC fraction of i.i.d. background (None: 0.41)."}
    )
    dataset_seed: int = field(
        default=0, metadata={"help": "Seed of the synthetic data, shuffles and splits."}
    )
    # --- classification data ---
    data_dir: str | None = path_field(
        help="Folder with train/validation/test.jsonl (or .jsonl.gz) rows {'sequence', 'label'[, 'label_name']}."
    )
    # --- scan data ---
    fasta: str | None = path_field(help="FASTA (plain or gzip) of the sequences to label by scanning.")
    motif_file: str | None = path_field(help="JASPAR or TRANSFAC motif file to scan with.")
    motif_ids: list[str] | None = field(
        default=None,
        metadata={
            "help": "Matrix ids to scan with, e.g. [MA0139.2]; an id without version takes the newest."
        },
    )
    scan_threshold: float = field(
        default=0.85, metadata={"help": "Relative PWM score threshold in [0, 1] for a site (scan data)."}
    )
    negatives: str = field(
        default="shuffle",
        metadata={
            "help": "'shuffle': add a dinucleotide-shuffled copy of each sequence as a negative; 'none'."
        },
    )
    validation_fraction: float = field(default=0.1, metadata={"help": "Scan data: fraction for validation."})
    test_fraction: float = field(default=0.2, metadata={"help": "Scan data: fraction for test."})
    # --- augmentation, artifacts ---
    reverse_complement_augment: bool = field(
        default=False,
        metadata={"help": "Add the reverse complement of every training sequence (labels mirrored)."},
    )
    attention_plot: bool = field(
        default=True, metadata={"help": "Write attention.png (weights of one test sequence)."}
    )

    def default_pattern(self) -> dict:
        return {"type": "sliding_window", "window": self.attention_window}

    def __post_init__(self):
        super().__post_init__()

        def check(ok, key, expected):
            if not ok:
                raise ValueError(f"{key} must be {expected}, got {getattr(self, key)!r}")

        check(self.data in DATA_SOURCES, "data", f"one of {DATA_SOURCES}")
        check(self.pooling in ("cls", "mean", "cls+mean"), "pooling", "'cls', 'mean' or 'cls+mean'")
        check(self.span_decoding in ("fixed_length", "bio"), "span_decoding", "'fixed_length' or 'bio'")
        check(self.negatives in ("shuffle", "none"), "negatives", "'shuffle' or 'none'")
        for key in ("max_length", "kmer", "sequence_length", "conv_layers"):
            value = getattr(self, key)
            check(isinstance(value, int) and not isinstance(value, bool) and value > 0, key, "a positive int")
        check(isinstance(self.kmer_embedding, int) and 0 <= self.kmer_embedding <= 8, "kmer_embedding",
              "an int in [0, 8]")  # fmt: skip
        check(isinstance(self.kmer_spectrum, int) and 0 <= self.kmer_spectrum <= 6, "kmer_spectrum",
              "an int in [0, 6]")  # fmt: skip
        for key in ("kmer_spectrum", "kmer_embedding"):
            if getattr(self, key) and self.kmer > 1:
                raise ValueError(
                    f"{key}={getattr(self, key)} needs kmer: 1 (one token per base), got kmer={self.kmer}"
                )
        for key in ("num_train", "num_validation", "num_test"):
            check(getattr(self, key) >= 0, key, "an int >= 0")
        check_int("dataset_seed", self.dataset_seed, 0)  # named as the recipe key, not the generator's "seed"
        if self.data == "synthetic":
            check(self.num_train >= 1, "num_train", "at least 1 for data: synthetic (a recipe run trains)")
        for key in ("validation_fraction", "test_fraction", "scan_threshold", "negative_fraction"):
            check(0 <= getattr(self, key) <= 1, key, "a number in [0, 1]")
        check(self.validation_fraction + self.test_fraction < 1, "test_fraction",
              "such that validation_fraction + test_fraction < 1")  # fmt: skip
        if self.data == "classification":
            check(self.data_dir is not None, "data_dir", "set for data: classification")
        if self.data == "scan":
            check(self.fasta is not None, "fasta", "set for data: scan")
            check(self.motif_file is not None, "motif_file", "set for data: scan")
            check(bool(self.motif_ids), "motif_ids", "a non-empty list for data: scan")
        if self.kmer > 1 and self.data != "classification":
            raise ValueError(
                f"kmer={self.kmer} gives one token per {self.kmer} bases, but data={self.data!r} has per-base "
                "motif tags; use kmer: 1 (k-mers only for data: classification)"
            )


# --------------------------------------------------------------------------------------- data


def mirror_spans(spans: list[dict], length: int) -> list[dict]:
    """Spans of a sequence of ``length`` bases in its reverse complement (strands swapped)."""
    flip = {"+": "-", "-": "+"}
    return [
        {**s, "start": length - s["end"], "end": length - s["start"], "strand": flip.get(s.get("strand"))}
        for s in spans
    ]


def encode_rows(
    batch: dict[str, list],
    *,
    tokenizer,
    max_length: int,
    kmer: int,
    label2id: dict[str, int] | None,
    sequence_task: str,
    augment: bool,
) -> dict[str, list]:
    """Batched ``map``: tokenized examples ``{"input_ids", ["labels"], "sequence_labels"}`` of raw rows
    (``sequence``, ``tags`` when ``label2id``, ``label`` or ``motif_labels``). With ``augment`` each
    row is followed by its reverse complement (spans mirrored). ``[CLS]``/``[SEP]`` get ``-100``.
    ``ValueError`` for a sequence of more than ``max_length`` tokens (:func:`num_tokens` + 2; never truncated)."""
    rows = [dict(zip(batch, values)) for values in zip(*batch.values())]
    out: dict[str, list] = {"input_ids": [], "sequence_labels": []}
    if label2id:
        out["labels"] = []
    for row in rows:
        variants = [row]
        if augment:
            seq = normalize_sequence(row["sequence"])
            mirrored = {**row, "sequence": reverse_complement(seq)}
            if row.get("tags") is not None:
                spans = [{"motif": m, "start": a, "end": b} for m, a, b in spans_from_bio(row["tags"])]
                mirrored["tags"] = spans_to_tags(len(seq), mirror_spans(spans, len(seq)))
            variants.append(mirrored)
        for r in variants:
            seq = r["sequence"]
            bases = len(normalize_sequence(seq))
            if num_tokens(bases, kmer) + 2 > max_length:
                raise ValueError(_too_long(bases, kmer, max_length))
            input_ids = tokenizer(seq)["input_ids"]
            out["input_ids"].append(input_ids)
            if label2id:
                ids = [label2id[t] for t in r["tags"]]
                if len(ids) + 2 != len(input_ids):
                    raise ValueError(f"{len(ids)} tags for a sequence of {len(input_ids) - 2} tokens")
                out["labels"].append([IGNORE_INDEX, *ids, IGNORE_INDEX])
            if sequence_task == "classification":
                out["sequence_labels"].append(int(r["label"]))
            else:
                out["sequence_labels"].append([float(v) for v in r["motif_labels"]])
    return out


def _too_long(bases: int, kmer: int, max_length: int, fix: str = "raise max_length") -> str:
    whole = f", in whole {kmer}-mers" if kmer > 1 else ""
    return (
        f"a sequence of {bases} bases is {num_tokens(bases, kmer) + 2} tokens with [CLS] and [SEP], longer than "
        f"max_length={max_length} tokens allow (at most {(max_length - 2) * kmer} bases{whole}); {fix} "
        "(nothing is truncated silently)"
    )


def _resolve_motif_ids(motifs, wanted: list[str], source: str):
    """Motifs of a file selected by matrix id; an id without version picks the newest version."""
    out = []
    for mid in wanted:
        hits = [m for m in motifs if m.matrix_id == mid or m.matrix_id.split(".")[0] == mid]
        if not hits:
            close = sorted({m.matrix_id for m in motifs if m.matrix_id.startswith(mid[:4])})[:5]
            raise ValueError(f"motif_ids: {mid!r} is not in {source} (ids look like {close})")
        best = max(hits, key=lambda m: (m.matrix_id == mid, m.matrix_id))
        out.append(best)
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise ValueError(f"motif_ids {wanted} give repeated motif names {names}")
    return out


# --------------------------------------------------------------------------------------- metrics


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def tag_metrics(logits: np.ndarray, labels: np.ndarray, config) -> dict:
    """Span and per-base scores of per-token ``logits`` (N, L, T) against tag ids ``labels`` (N, L; -100
    skipped: special tokens and padding). Predicted spans come from :func:`decode_spans` with the
    config's ``span_decoding`` (what the pipeline returns); with ``"fixed_length"`` the argmax-tag
    spans are scored too (``span_f1_bio``). ``per_base_f1`` compares argmax tags. ``span_f1_<motif>`` is left
    out for a motif with neither a true nor a predicted span in the split (its F1 is undefined, not 0; as the
    sequence head's macro F1 leaves out such a class)."""
    id2label = config.id2label
    true_spans, pred_spans, bio_spans, true_tags, pred_tags = [], [], [], [], []
    for x, t in zip(logits, labels):
        keep = t != IGNORE_INDEX
        probs = _softmax(x[keep].astype(np.float64))  # (bases, tags)
        tt = [id2label[int(i)] for i in t[keep]]
        pt = [id2label[int(i)] for i in probs.argmax(-1)]
        true_tags.append(tt)
        pred_tags.append(pt)
        true_spans.append(spans_from_bio(tt))
        bio_spans.append(spans_from_bio(pt))
        pred_spans.append(decode_spans(probs, config))
    truth = span_dicts(true_spans)
    exact = load_metric("span_f1").compute(predictions=span_dicts(pred_spans), references=truth)
    overlap = load_metric("span_overlap_f1").compute(predictions=span_dicts(pred_spans), references=truth)
    per_base = load_metric("per_base_f1").compute(predictions=pred_tags, references=true_tags)
    out = {
        "span_f1": exact["f1"],
        "span_precision": exact["precision"],
        "span_recall": exact["recall"],
        "span_overlap_f1": overlap["f1"],
        "per_base_f1": per_base["f1"],
    }
    if getattr(config, "span_decoding", "bio") != "bio":
        out["span_f1_bio"] = load_metric("span_f1").compute(
            predictions=span_dicts(bio_spans), references=truth
        )["f1"]
    for name in config.motif_names:
        if name in exact["per_type"]:  # the motifs with a true or a predicted span
            out[f"span_f1_{name}"] = exact["per_type"][name]["f1"]
    return out


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def sequence_metrics(logits: np.ndarray, labels: np.ndarray, sequence_task: str) -> dict:
    """``accuracy``, ``auroc`` and ``f1`` of the sequence head (see the module docstring).

    With more than two classes, the macro F1 leaves out a class the split has neither a true nor a
    predicted example of (its F1 is undefined, not 0; as ``multilabel_f1(average="macro")``), and the
    macro AUROC one whose AUROC is undefined (no true example, or only true examples).
    """
    import warnings

    if sequence_task == "classification":
        y = labels.astype(int).reshape(-1)
        probs = _softmax(logits.astype(np.float64))
        pred = probs.argmax(-1)
        n_classes = probs.shape[-1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if n_classes == 2:
                area = auroc(y == 1, probs[:, 1])
                f1 = precision_recall_f1(y, pred, average="binary", pos_label=1)["f1"]
            else:
                area = float(np.nanmean([auroc(y == c, probs[:, c]) for c in range(n_classes)]))
                f1 = precision_recall_f1(y, pred, average="macro")["f1"]  # over the classes in y or pred
        return {"accuracy": accuracy(y, pred), "auroc": area, "f1": f1}
    y = labels.astype(int)
    probs = 1 / (1 + np.exp(-logits.astype(np.float64)))
    pred = (probs >= 0.5).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        areas = [auroc(y[:, k], probs[:, k]) for k in range(y.shape[1])]
    areas = [a for a in areas if not math.isnan(a)]
    return {
        "accuracy": float((pred == y).mean()),
        "auroc": float(np.mean(areas)) if areas else float("nan"),
        "f1": multilabel_f1(y, pred, average="micro"),
    }


# --------------------------------------------------------------------------------------- attention


def attention_matrices(model, input_ids: torch.Tensor, layers=(0, -1)) -> torch.Tensor:
    """Dense attention weights ``(len(layers), heads, n, n)`` of one sequence ``input_ids`` (1, n).

    SparseTransformer backbones return dense weights; Longformer's band + global format is scattered
    into an n x n matrix (window columns at offsets ``-w/2 .. w/2``, global columns and rows).
    """
    model.eval()
    n = input_ids.shape[1]
    with torch.no_grad():
        glob = model.default_global_attention_mask(input_ids)
        out = model.backbone(
            **model.backbone_inputs(input_ids),
            attention_mask=torch.ones_like(input_ids),
            global_attention_mask=glob,
            output_attentions=True,
            return_dict=True,
        )
    picked = []
    for layer in layers:
        a = out.attentions[layer][0].float()  # (H, n', ?)
        if model.config.backbone["model_type"] != "longformer":
            picked.append(a[:, :n, :n])
            continue
        heads = a.shape[0]
        g_idx = torch.nonzero(glob[0]).flatten()  # global token positions
        x = len(g_idx)
        w = a.shape[-1] - x - 1  # attention_window
        dense = torch.zeros(heads, n, n)
        rows = torch.arange(n)
        for c in range(w + 1):
            cols = rows + c - w // 2
            ok = (cols >= 0) & (cols < n)
            dense[:, rows[ok], cols[ok]] += a[:, :n, x + c][:, ok]
        for k, g in enumerate(g_idx.tolist()):
            dense[:, :, g] += a[:, :n, k]  # every token -> global token g
        ga = out.global_attentions[layer][0].float()  # (H, n', x): global token k -> every token
        for k, g in enumerate(g_idx.tolist()):
            dense[:, g, :] = ga[:, :n, k]
        picked.append(dense)
    return torch.stack(picked)  # (layers, H, n, n)


# --------------------------------------------------------------------------------------- the task


def _trainer_class(label_names: tuple[str, ...]):
    """A Trainer that knows which label keys the batches carry (only those of the model's heads)."""
    from transformers import Trainer

    class MotifTrainer(Trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.args.label_names is None:
                self.label_names = list(label_names)

    MotifTrainer.label_names_default = label_names
    return MotifTrainer


class MotifTask(Task):
    """DNA motif detection / sequence classification with :class:`LongformerForMotifDetection`."""

    Arguments = MotifArguments
    lora_task_type = None  # the model's own heads (token_classifier, sequence_head) are trained in full
    #: how spans are decoded at evaluation may change on resume (see Task.resume_free_arguments)
    resume_free_arguments = (*Task.resume_free_arguments, "span_decoding")

    def __init__(self):
        self.config = None
        self._final: dict[str, dict] = {}
        self._data: dict | None = None
        self._motifs = None

    def check_arguments(self, args):
        require_model("model_name_or_path", args.model_name_or_path)
        if args.data == "synthetic":
            builtin_motifs(args.motifs)  # KeyError naming an unknown motif and the available ones
            require_path("background_fasta", args.background_fasta)
        elif args.data == "classification":
            require_path("data_dir", args.data_dir, kind="folder")
            jsonl_files(args.data_dir)  # the splits the loader reads: {split}.jsonl or .jsonl.gz
        elif args.data == "scan":
            require_path("fasta", args.fasta)
            require_path("motif_file", args.motif_file)

    # --- motifs and raw data -------------------------------------------------------------------

    def motifs(self, args):
        """The motifs tagged per base (None for classification data)."""
        if self._motifs is None and args.data == "synthetic":
            self._motifs = builtin_motifs(args.motifs)
        elif self._motifs is None and args.data == "scan":
            source = os.fspath(args.motif_file)
            self._motifs = _resolve_motif_ids(read_motifs(args.motif_file), list(args.motif_ids), source)
        return self._motifs

    def sequence_task(self, args) -> str:
        if args.data == "classification" or (args.data == "scan" and args.negatives == "shuffle"):
            return "classification"
        return "motif_presence"

    def sequence_label_names(self, args) -> list[str] | None:
        if args.data == "scan" and args.negatives == "shuffle":
            return ["shuffled", "peak"]
        if args.data != "classification":
            return None
        names: dict[int, str] = {}
        for split in SPLITS:
            rows = self.raw(args).get(split)
            if rows is None:
                continue
            given = rows["label_name"] if "label_name" in rows.column_names else [None] * len(rows)
            for label, name in zip(rows["label"], given):
                # a whole float where a float in another row widened the column (check_classification_row)
                label = int(label)
                names.setdefault(label, name or str(label))
        if sorted(names) != list(range(len(names))) or len(names) < 2:
            raise ValueError(
                f"{args.data_dir}: labels must be the ints 0 .. n-1 with n >= 2, got {sorted(names)}"
            )
        return [names[i] for i in range(len(names))]

    def raw(self, args) -> dict:
        """``{split: datasets.Dataset}`` of rows ``{"sequence", "tags"?, "spans"?, "motif_labels"?, "label"?}``
        before tokenization."""
        if self._data is None:
            loaders = {"synthetic": self._synthetic, "classification": self._jsonl, "scan": self._scan}
            self._data = loaders[args.data](args)
        return self._data

    def _synthetic(self, args):
        kwargs = {"length": args.sequence_length, "min_instances": args.min_instances,
                  "max_instances": args.max_instances, "negative_fraction": args.negative_fraction,
                  "gc_content": args.gc_content, "background_fasta": args.background_fasta,
                  "seed": args.dataset_seed}  # fmt: skip
        out, start = {}, 0
        for split, n in zip(SPLITS, (args.num_train, args.num_validation, args.num_test)):
            if n:
                out[split] = synthetic_dataset(self.motifs(args), start, n, **kwargs)
            start += n
        return out

    def _jsonl(self, args):
        return load_jsonl_splits(args.data_dir, check=check_classification_row)

    def _scan(self, args):
        """Split the FASTA records (peaks) first, then label each and add its shuffled copy, so a
        peak and its shuffle are always in the same split."""
        records = fasta_dataset(args.fasta)
        kwargs = {"motifs": [m.to_dict() for m in self.motifs(args)], "threshold": args.scan_threshold,
                  "shuffle_negatives": args.negatives == "shuffle", "seed": args.dataset_seed}  # fmt: skip
        out = {}
        for split, part in split_by_group(
            records, args.test_fraction, args.validation_fraction, args.dataset_seed
        ).items():
            out[split] = part.map(
                scan_rows, batched=True, batch_size=64, fn_kwargs=kwargs, remove_columns=part.column_names,
                num_proc=num_proc_for(self.num_proc, len(part), 100),
                new_fingerprint=fingerprint(part._fingerprint, "scan_rows", kwargs), desc=f"scanning {split}",
            )  # fmt: skip
        return out

    # --- Task hooks ----------------------------------------------------------------------------

    def build_tokenizer(self, args):
        from ...tokenization_dna import DNATokenizer

        if args.model_name_or_path:
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(args.model_name_or_path)
        return DNATokenizer(kmer=args.kmer, model_max_length=args.max_length)

    def _backbone(self, args, tokenizer) -> dict:
        return args.encoder_config(len(tokenizer), tokenizer.pad_token_id, args.max_length, type_vocab_size=1)

    def build_model(self, args, tokenizer):
        from .configuration_motif import LongformerMotifConfig
        from .modeling_motif import LongformerForMotifDetection

        motifs = self.motifs(args)
        names = [m.name for m in motifs] if motifs else []
        seq_task = self.sequence_task(args)
        seq_labels = self.sequence_label_names(args)
        train = self.raw(args).get("train")
        # bases of the longest training sequence (whitespace is not a base): a genome scan's default window
        trained_length = max((len("".join(s.split())) for s in train["sequence"]), default=0) if train else 0
        if args.model_name_or_path:
            model = LongformerForMotifDetection.from_pretrained(args.model_name_or_path)
            cfg = model.config
            if (cfg.motif_names, cfg.sequence_task, cfg.sequence_label_names) != (
                names,
                seq_task,
                seq_labels,
            ):
                raise ValueError(
                    f"model_name_or_path={args.model_name_or_path!r} has heads for motifs {cfg.motif_names}, "
                    f"sequence_task {cfg.sequence_task!r} ({cfg.sequence_label_names}); the data needs {names}, "
                    f"{seq_task!r} ({seq_labels})"
                )
            if trained_length:
                cfg.trained_length = trained_length
        else:
            config = LongformerMotifConfig(
                backbone=self._backbone(args, tokenizer),
                motif_names=names,
                motifs={m.name: m.counts.tolist() for m in motifs} if motifs else None,
                span_decoding=args.span_decoding if motifs else "bio",
                sequence_task=seq_task,
                sequence_label_names=seq_labels,
                pooling=args.pooling,
                global_every=args.global_every or None,
                conv_kernel_size=args.conv_kernel_size,
                conv_layers=args.conv_layers,
                sequence_loss_weight=args.sequence_loss_weight,
                classifier_dropout=args.classifier_dropout,
                kmer=args.kmer,
                kmer_embedding=args.kmer_embedding,
                kmer_spectrum=args.kmer_spectrum,
                base_token_ids=tokenizer.convert_tokens_to_ids(list("ACGT")),
                trained_length=trained_length or None,
            )
            model = LongformerForMotifDetection(config)
        self._check_lengths(args)
        self.config = model.config
        label_keys = (("labels",) if names else ()) + ("sequence_labels",)
        self.trainer_class = _trainer_class(label_keys)
        return model

    def _check_lengths(self, args) -> None:
        """``ValueError`` naming the key when a sequence needs more than ``max_length`` tokens (run where the
        runner reports it as one error line, after the model's own checks; :func:`encode_rows` checks again)."""
        fix = "raise max_length" + (
            f" or lower sequence_length={args.sequence_length}" if args.data == "synthetic" else ""
        )
        for split, rows in self.raw(args).items():
            bases = (len("".join(s.split())) for s in rows["sequence"])  # whitespace is not a base
            longest = max(bases, key=lambda n: num_tokens(n, args.kmer), default=0)
            if num_tokens(longest, args.kmer) + 2 > args.max_length:
                raise ValueError(f"{split} split: {_too_long(longest, args.kmer, args.max_length, fix)}")

    def build_datasets(self, args, tokenizer):
        cfg = self.config
        out = {}
        for split, rows in self.raw(args).items():
            kwargs = {"tokenizer": tokenizer, "max_length": args.max_length, "kmer": args.kmer,
                      "label2id": dict(cfg.label2id) if cfg.motif_names else None,
                      "sequence_task": cfg.sequence_task,
                      "augment": split == "train" and args.reverse_complement_augment}  # fmt: skip
            key = {**kwargs, "tokenizer": tokenizer_fingerprint(tokenizer)}
            out[split] = rows.map(
                encode_rows, batched=True, fn_kwargs=kwargs, remove_columns=rows.column_names,
                num_proc=num_proc_for(self.num_proc, len(rows)),
                new_fingerprint=fingerprint(rows._fingerprint, "encode_rows", key), desc=f"tokenizing {split}",
            )  # fmt: skip
        return out

    def data_collator(self, args, tokenizer):
        from ...models.longformer_tasks import block_multiple
        from ...models.longformer_tasks.backbone import backbone_config

        return MotifCollator(
            pad_token_id=tokenizer.pad_token_id,
            pad_to_multiple_of=block_multiple(backbone_config(self.config.backbone)),
            global_every=self.config.global_every,
            global_first_token=self.config.global_first_token,
        )

    def compute_metrics(self, args):
        cfg = self.config

        def metrics(pred):
            preds, labels = list(_as_tuple(pred.predictions)), list(_as_tuple(pred.label_ids))
            out = {}
            if cfg.motif_names:
                out.update(tag_metrics(preds.pop(0), labels.pop(0), cfg))
            if cfg.sequence_task is not None:
                out.update(sequence_metrics(preds.pop(0), labels.pop(0), cfg.sequence_task))
            return out

        return metrics

    def lora_modules_to_save(self, model):
        """The heads, the k-mer embeddings, the k-mer spectrum's projection and the embedding convolutions
        are new: trained in full next to the adapters."""
        new = ("token_classifier", "sequence_head", "spectrum", "kmer_embeddings")
        names = [n for n in new if getattr(model, n, None) is not None]
        convs = getattr(model, "embedding_conv", None) or []
        return (
            names
            + [f"embedding_conv.{i}" for i in range(len(convs))]
            + (super().lora_modules_to_save(model) or [])
        )

    def evaluate(self, trainer, dataset, split):
        metrics = super().evaluate(trainer, dataset, split)
        self._final[split] = metrics
        return metrics

    # --- artifacts ---------------------------------------------------------------------------

    def after_training(self, trainer, args, output_dir):
        if not trainer.is_world_process_zero():
            return {}
        extras = {}
        split = "test" if "test" in self._final else "validation"
        metrics = self._final.get(split, {})
        prefix = "test_" if split == "test" else "eval_"
        try:
            from ...viz import plot_bars, pyplot, show_heatmaps

            plt = pyplot()
        except ImportError as e:  # no matplotlib (the viz extra)
            logger.warning("motif plots skipped: %s", e)
            return extras

        # a motif absent from the split (no true, no predicted span) has no F1: no bar
        per_motif = {
            m: float(metrics[f"{prefix}span_f1_{m}"])
            for m in self.config.motif_names
            if f"{prefix}span_f1_{m}" in metrics
        }
        if per_motif:
            path = os.path.join(output_dir, "motif_f1.png")
            plot_bars(per_motif, ylabel="span F1", title=f"span F1 per motif ({split})", path=path)
            extras["motif_f1_png"] = path
            extras["span_f1_per_motif"] = per_motif
        if args.attention_plot:
            rows = self.raw(args).get("test") or self.raw(args).get("validation")
            if rows:
                model = trainer.model
                model = model.get_base_model() if hasattr(model, "get_base_model") else model
                tokenizer = trainer.processing_class
                bases = min(256, (args.max_length - 2) * args.kmer)
                # whole k-mers (a shorter sequence fits as it is: encode_rows checked it)
                seq = normalize_sequence(rows[0]["sequence"])[: bases - bases % args.kmer]
                ids = torch.tensor([tokenizer(seq)["input_ids"]], device=model.device)
                weights = attention_matrices(model, ids)  # (2, H, n, n)
                heads = min(4, weights.shape[1])
                path = os.path.join(output_dir, "attention.png")
                show_heatmaps(
                    weights[:, :heads].cpu(),
                    titles=[[f"layer {lay} head {h}" for h in range(heads)] for lay in ("first", "last")],
                    path=path,
                )
                extras["attention_png"] = path
        plt.close("all")
        return extras

    def card_info(self, args, metrics):
        cfg = self.config
        names = {
            "synthetic": "synthetic motifs (built-in JASPAR PWMs planted in "
            + ("FASTA background)" if args.background_fasta else "i.i.d. background)"),
            "classification": f"sequences of {os.path.basename(os.path.normpath(args.data_dir or ''))}",
            "scan": f"{os.path.basename(args.fasta or '')} labelled by scanning {', '.join(args.motif_ids or [])}",
        }
        # the tokens the model makes global (default_global_attention_mask) are part of what it computes
        glob = {"type": "global", "indices": [0]} if cfg.global_first_token else None
        if cfg.global_every:
            glob = {"type": "global", "every": cfg.global_every}  # 0, k, 2k, ...: [CLS] included
        pattern = card_pattern(cfg.backbone, glob)
        extra = {"backbone": cfg.backbone["model_type"], "motifs": ", ".join(cfg.motif_names) or "none",
                 "sequence head": cfg.sequence_task or "none", "tokens": "single nucleotides"
                 if cfg.kmer == 1 else f"non-overlapping {cfg.kmer}-mers"}  # fmt: skip
        if cfg.sequence_label_names:
            extra["classes"] = ", ".join(cfg.sequence_label_names)
        extra["global attention"] = "first token" + (
            f" and every {cfg.global_every}th token" if cfg.global_every else ""
        )
        if cfg.motif_names:
            extra["span decoding"] = {"fixed_length": "fixed motif lengths (semi-Markov Viterbi)",
                                      "bio": "argmax BIO tags"}[cfg.span_decoding]  # fmt: skip
        if cfg.conv_kernel_size:
            extra["embedding convolutions"] = f"{cfg.conv_layers} x width {cfg.conv_kernel_size}"
        if cfg.kmer_spectrum:
            extra["k-mer spectrum"] = (
                f"log counts of the 1..{cfg.kmer_spectrum}-mers, read by the sequence head"
            )
        if cfg.kmer_embedding:
            extra["k-mer embeddings"] = f"overlapping {cfg.kmer_embedding}-mers, one centred on each base"
        from . import card_fields  # the package's __init__ (which imports its modules) defines it

        fields = card_fields(cfg)  # pipeline tag, Auto class, tags and description from the model's heads
        return {
            **fields,
            "dataset_name": args.dataset_name or names[args.data],
            "pattern": pattern,
            "density_length": args.max_length,
            "extra": {**fields["extra"], **extra},
        }


__all__ = [
    "DATA_SOURCES",
    "MotifArguments",
    "MotifTask",
    "attention_matrices",
    "mirror_spans",
    "sequence_metrics",
    "tag_metrics",
]
