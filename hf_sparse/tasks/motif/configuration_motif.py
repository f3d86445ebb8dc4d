"""Configuration of the DNA motif detection model."""

from __future__ import annotations

import math

from transformers import PretrainedConfig

from ...models.longformer_tasks.backbone import BackboneConfigMixin, backbone_config, recheck_config
from ...utils.validation import check_fraction, check_int

SEQUENCE_TASKS = ("motif_presence", "classification", None)
MAX_KMER_EMBEDDING = 8  # 4**8 = 65,536 rows
MAX_KMER_SPECTRUM = 6  # 5,460 features
SPAN_DECODINGS = ("bio", "fixed_length")
POOLING = ("cls", "mean", "cls+mean")
_DERIVED = "_motif_tags"  # attribute holding the id2label that motif_names last gave (not saved)


def _check_motifs(motifs, motif_names: list[str]) -> dict[str, list[list[float]]] | None:
    """``{name: 4 x L counts}`` for motifs of ``motif_names``; ``ValueError`` naming what is wrong."""
    if motifs is None:
        return None
    if not isinstance(motifs, dict):
        raise TypeError(f"motifs must be a dict of motif name -> 4 x L counts, got {type(motifs).__name__}")
    out = {}
    for name, counts in motifs.items():
        if name not in motif_names:
            raise ValueError(f"motifs has {name!r}, which is not one of motif_names={motif_names}")
        rows = [list(map(float, row)) for row in counts] if isinstance(counts, (list, tuple)) else None
        if rows is None or len(rows) != 4 or len({len(r) for r in rows}) != 1 or not rows[0]:
            raise ValueError(f"motifs[{name!r}] must be 4 rows (A, C, G, T) of equal, non-zero length")
        if any(not math.isfinite(v) or v < 0 for r in rows for v in r):
            raise ValueError(f"motifs[{name!r}] must hold finite counts >= 0")
        out[name] = rows
    return out


class LongformerMotifConfig(BackboneConfigMixin, PretrainedConfig):
    r"""
    Configuration of [`LongformerForMotifDetection`]: a long-sequence encoder over DNA tokens with a
    per-position motif tagger and a sequence-level head.

    Args:
        backbone (`dict` or `PretrainedConfig`, *optional*):
            The encoder: a `LongformerConfig` (default, `model_type="longformer"`) or an hf-sparse
            `SparseTransformerConfig` (`model_type="sparse_transformer"`), as a config or its dict.
        motif_names (`list[str]`, *optional*):
            Motifs tagged per position with BIO labels `O, B-<motif>, I-<motif>, ...` (`id2label`).
            Empty: no per-position head. A name may hold `-` (`NKX2-5`: tags `B-NKX2-5`, split at the first
            `-`), not whitespace, and may not start with `B-` or `I-`.
        motifs (`dict[str, list[list[float]]]`, *optional*):
            Count matrices (4 x length, rows A C G T) of the motifs, kept so that the inference
            pipeline can call the strand of a detected span by scoring both strands (and knows the
            motif lengths for `span_decoding="fixed_length"`).
        span_decoding (`str`, *optional*, defaults to `"bio"`):
            How per-base tag probabilities become spans (pipeline and evaluation): `"bio"` reads the
            argmax tags (`B-X I-X ...`); `"fixed_length"` picks the non-overlapping spans of exactly
            each motif's length (from `motifs`, which must then cover every motif) that maximise the
            summed log-probability of the tags (a semi-Markov Viterbi pass).
        sequence_task (`str`, *optional*, defaults to `"motif_presence"`):
            Sequence-level head: `"motif_presence"` (multi-label, one output per motif),
            `"classification"` (one class of `sequence_label_names`) or `None` (no sequence head).
        sequence_label_names (`list[str]`, *optional*):
            Classes of the `"classification"` sequence head (e.g. `["non_promoter", "promoter"]`).
        pooling (`str`, *optional*, defaults to `"cls"`):
            What the sequence head reads: `"cls"` (the first token, which is global) or `"mean"`
            (the mean over the non-padding tokens) or `"cls+mean"` (both, concatenated).
        global_every (`int`, *optional*, defaults to 100):
            Positions `0, k, 2k, ...` get global attention when the caller passes no
            `global_attention_mask` (0 or `None`: only the first token, if `global_first_token`).
        global_first_token (`bool`, *optional*, defaults to `True`):
            The first token (`[CLS]`) is global when the mask is built automatically. A backbone with
            `adaptive_span` has no global tokens: it needs `global_first_token=False` and `global_every=None`.
        conv_kernel_size (`int`, *optional*, defaults to 0):
            Width of residual 1-D convolutions (each followed by GELU) over the token embeddings
            before the encoder, which give the first attention layer k-mer features (odd; 0: none).
        conv_layers (`int`, *optional*, defaults to 1):
            How many such convolutions are stacked (with `conv_kernel_size > 0`).
        sequence_loss_weight (`float`, *optional*, defaults to 1.0):
            Weight of the sequence-level loss added to the per-position loss.
        classifier_dropout (`float`, *optional*, defaults to 0.1):
            Dropout before both heads.
        kmer (`int`, *optional*, defaults to 1):
            Bases per token of the matching `DNATokenizer` (1 = one token per nucleotide).
        kmer_embedding (`int`, *optional*, defaults to 0):
            With k > 0, every base token also gets a learned embedding of the overlapping k-mer centred
            on it (bases `i - (k-1)//2 .. i + k//2`; k-mers running into a special token, `N`, padding
            (`attention_mask` 0) or the sequence edge get a zero vector), added to its token embedding, as DNABERT's overlapping
            k-mer tokens give, without changing the one-token-per-base layout the per-base tags need.
            Needs `kmer=1` and `base_token_ids`.
        kmer_spectrum (`int`, *optional*, defaults to 0):
            With K > 0 the sequence head also reads the sequence's k-mer spectrum: for every k-mer of length
            1..K, `log(1 + count) - log(1 + expected count)` (expected: uniform over the complete k-mers of
            that length in the sequence; padding not counted), through dropout, a linear layer and GELU. Composition (CpG islands,
            GC content) is what tells promoters from background, and a bag of counts learns it from few
            examples. Needs `kmer=1`, `base_token_ids` and a sequence head.
        base_token_ids (`list[int]`, *optional*):
            The token ids of `A, C, G, T` (what `kmer_embedding` and `kmer_spectrum` read).
        trained_length (`int`, *optional*):
            Bases of the longest training sequence ([CLS] and [SEP] not counted), recorded by the
            `dna-motif-detection` task: the default window of a genome scan (`hf_sparse.genome`). `None`
            (models saved before it was recorded): the scan's default is the position range less [CLS] and
            [SEP].

    Example:

    ```python
    >>> from hf_sparse.tasks.motif import LongformerMotifConfig, LongformerForMotifDetection
    >>> config = LongformerMotifConfig(
    ...     backbone={"model_type": "sparse_transformer", "vocab_size": 10, "hidden_size": 64, "num_hidden_layers": 2,
    ...               "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 4096,
    ...               "attention_pattern": {"type": "longformer", "window": 64}},
    ...     motif_names=["CTCF", "SP1"],
    ... )
    >>> model = LongformerForMotifDetection(config)
    >>> config.id2label[1]
    'B-CTCF'
    ```
    """

    model_type = "longformer_motif"
    # a motif model needs motif_names or a sequence_task: transformers up to 5.x's to_diff_dict builds a default
    # config unless told it has none
    has_no_defaults_at_init = True

    def __init__(
        self,
        backbone=None,
        motif_names=(),
        motifs=None,
        span_decoding: str = "bio",
        sequence_task: str | None = "motif_presence",
        sequence_label_names=None,
        pooling: str = "cls",
        global_every: int | None = 100,
        global_first_token: bool = True,
        conv_kernel_size: int = 0,
        conv_layers: int = 1,
        sequence_loss_weight: float = 1.0,
        classifier_dropout: float = 0.1,
        kmer: int = 1,
        kmer_embedding: int = 0,
        kmer_spectrum: int = 0,
        base_token_ids=None,
        trained_length: int | None = None,
        **kwargs,
    ):
        self.backbone = backbone_config(
            backbone if backbone is not None else {"model_type": "longformer"}
        ).to_dict()
        if isinstance(motif_names, str) or not all(isinstance(m, str) and m for m in motif_names):
            raise ValueError(f"motif_names must be a list of non-empty str, got {motif_names!r}")
        self.motif_names = list(motif_names)
        if len(set(self.motif_names)) != len(self.motif_names):
            raise ValueError(f"motif_names must be unique, got {self.motif_names}")
        # a tag is split at its first '-' ("B-NKX2-5": B, NKX2-5), so a name may hold '-' (JASPAR's NKX2-5,
        # EWSR1-FLI1), but not start like a tag itself, nor hold whitespace
        if any(m.startswith(("B-", "I-")) or any(c.isspace() for c in m) for m in self.motif_names):
            raise ValueError(
                f"motif_names must not contain whitespace or start with 'B-' or 'I-' (BIO tags), got {self.motif_names}"
            )
        self.motifs = _check_motifs(motifs, self.motif_names)
        if span_decoding not in SPAN_DECODINGS:
            raise ValueError(f"span_decoding must be one of {SPAN_DECODINGS}, got {span_decoding!r}")
        if span_decoding == "fixed_length" and set(self.motifs or {}) != set(self.motif_names):
            raise ValueError(
                f"span_decoding='fixed_length' needs the counts of every motif in motifs (their lengths); "
                f"motif_names={self.motif_names}, motifs has {sorted(self.motifs or {})}"
            )
        self.span_decoding = span_decoding
        if sequence_task not in SEQUENCE_TASKS:
            raise ValueError(f"sequence_task must be one of {SEQUENCE_TASKS}, got {sequence_task!r}")
        if sequence_task == "classification" and (not sequence_label_names or len(sequence_label_names) < 2):
            raise ValueError(
                f"sequence_task='classification' needs >= 2 sequence_label_names, got {sequence_label_names!r}"
            )
        if sequence_task == "motif_presence" and not self.motif_names:
            raise ValueError("sequence_task='motif_presence' needs motif_names")
        if sequence_task is None and not self.motif_names:
            raise ValueError("the model needs a head: give motif_names or a sequence_task")
        self.sequence_task = sequence_task
        self.sequence_label_names = list(sequence_label_names) if sequence_label_names else None
        if pooling not in POOLING:
            raise ValueError(f"pooling must be one of {POOLING}, got {pooling!r}")
        self.pooling = pooling
        if global_every is not None and (
            isinstance(global_every, bool) or not isinstance(global_every, int) or global_every < 0
        ):
            raise ValueError(f"global_every must be a non-negative int or None, got {global_every!r}")
        self.global_every = global_every
        if not isinstance(global_first_token, bool):
            raise ValueError(f"global_first_token must be a bool, got {global_first_token!r}")
        self.global_first_token = global_first_token
        if self.backbone.get("adaptive_span") is not None and (global_first_token or global_every):
            raise ValueError(
                "the backbone's adaptive_span layers have no global tokens: set global_first_token=False and "
                f"global_every=None (got global_first_token={global_first_token!r}, global_every={global_every!r}); "
                "pooling='mean' lets the sequence head read every token"
            )
        if (
            isinstance(conv_kernel_size, bool)
            or not isinstance(conv_kernel_size, int)
            or conv_kernel_size < 0
            or (conv_kernel_size and conv_kernel_size % 2 == 0)
        ):
            raise ValueError(f"conv_kernel_size must be 0 or an odd positive int, got {conv_kernel_size!r}")
        self.conv_kernel_size = conv_kernel_size
        if isinstance(conv_layers, bool) or not isinstance(conv_layers, int) or conv_layers < 1:
            raise ValueError(f"conv_layers must be a positive int, got {conv_layers!r}")
        self.conv_layers = conv_layers
        if (
            isinstance(sequence_loss_weight, bool)
            or not isinstance(sequence_loss_weight, (int, float))
            or not (0 <= sequence_loss_weight < math.inf)
        ):
            raise ValueError(f"sequence_loss_weight must be a number >= 0, got {sequence_loss_weight!r}")
        self.sequence_loss_weight = float(sequence_loss_weight)
        self.classifier_dropout = check_fraction("classifier_dropout", classifier_dropout, closed_high=False)
        if isinstance(kmer, bool) or not isinstance(kmer, int) or kmer < 1:
            raise ValueError(f"kmer must be a positive int, got {kmer!r}")
        self.kmer = kmer
        check_int("kmer_embedding", kmer_embedding, 0, MAX_KMER_EMBEDDING)
        if kmer_embedding and kmer != 1:
            raise ValueError(
                f"kmer_embedding={kmer_embedding} reads overlapping k-mers of single-base tokens; "
                f"it needs kmer=1, got kmer={kmer}"
            )
        if base_token_ids is not None:
            base_token_ids = list(base_token_ids)
            if (
                len(base_token_ids) != 4
                or len(set(base_token_ids)) != 4
                or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in base_token_ids)
            ):
                raise ValueError(
                    f"base_token_ids must be 4 distinct token ids (A, C, G, T), got {base_token_ids!r}"
                )
        if kmer_embedding and base_token_ids is None:
            raise ValueError(f"kmer_embedding={kmer_embedding} needs base_token_ids (the ids of A, C, G, T)")
        check_int("kmer_spectrum", kmer_spectrum, 0, MAX_KMER_SPECTRUM)
        if kmer_spectrum:
            if kmer != 1 or base_token_ids is None:
                raise ValueError(
                    f"kmer_spectrum={kmer_spectrum} counts the k-mers of single-base tokens: it needs kmer=1 "
                    f"(got {kmer}) and base_token_ids (got {base_token_ids!r})"
                )
            if sequence_task is None:
                raise ValueError(
                    f"kmer_spectrum={kmer_spectrum} feeds the sequence head, but sequence_task is None"
                )
        self.kmer_spectrum = kmer_spectrum
        self.kmer_embedding = kmer_embedding
        self.base_token_ids = base_token_ids
        self.trained_length = check_int("trained_length", trained_length, 1, allow_none=True)
        if self.motif_names:
            tags = ["O"] + [f"{p}-{m}" for m in self.motif_names for p in ("B", "I")]
            if kwargs.get("num_labels") not in (None, len(tags)):
                raise ValueError(
                    f"num_labels={kwargs['num_labels']} does not match motif_names={self.motif_names}: the "
                    f"{len(tags)} BIO tags {tags} are derived from motif_names; change motif_names instead"
                )
            kwargs.pop("num_labels", None)
            kwargs["id2label"] = dict(enumerate(tags))
            kwargs["label2id"] = {t: i for i, t in enumerate(tags)}
        else:
            kwargs.pop("id2label", None)
            kwargs.pop("label2id", None)
            kwargs.setdefault("num_labels", 1)
        kwargs.pop(_DERIVED, None)  # never from a saved config (to_dict leaves it out)
        super().__init__(**kwargs)
        setattr(self, _DERIVED, dict(self.id2label))  # the tags motif_names gave: see validate_task

    def validate_task(self) -> None:
        """Run ``__init__``'s checks again on the current values (``from_pretrained(path, key=value)`` sets them after
        ``__init__``, and so does ``config.key = value``) and derive ``id2label`` / ``label2id`` again from a changed
        ``motif_names``. ``ValueError`` where ``id2label`` (or ``num_labels``) was changed to tags that
        ``motif_names`` does not give: the model's heads, and the config a save reloads, follow ``motif_names``."""
        fresh = recheck_config(self)
        current = {int(i): t for i, t in self.id2label.items()}
        if current != fresh.id2label:
            if current != getattr(self, _DERIVED, None):
                raise ValueError(
                    f"id2label={current} (num_labels={len(current)}) does not match motif_names={self.motif_names}, "
                    f"whose BIO tags are {list(fresh.id2label.values())}: the tags are derived from motif_names; "
                    "change motif_names instead"
                )
            self.id2label, self.label2id = dict(fresh.id2label), dict(fresh.label2id)  # motif_names changed
        setattr(self, _DERIVED, dict(self.id2label))

    def to_dict(self) -> dict:
        out = super().to_dict()
        out.pop(_DERIVED, None)
        return out

    @property
    def hidden_size(self) -> int:
        return self.backbone["hidden_size"]

    @property
    def motif_lengths(self) -> dict[str, int]:
        """Length in bases of every motif whose counts are in ``motifs``."""
        return {name: len(rows[0]) for name, rows in (self.motifs or {}).items()}

    @property
    def num_sequence_outputs(self) -> int:
        if self.sequence_task == "motif_presence":
            return len(self.motif_names)
        return len(self.sequence_label_names or [])


__all__ = ["LongformerMotifConfig", "SPAN_DECODINGS"]
