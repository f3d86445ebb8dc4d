"""Configuration of the DNA motif detection model."""

from __future__ import annotations

from transformers import PretrainedConfig

from .backbone import backbone_config

SEQUENCE_TASKS = ("motif_presence", "classification", None)


class LongformerMotifConfig(PretrainedConfig):
    r"""
    Configuration of [`LongformerForMotifDetection`]: a long-sequence encoder over DNA tokens with a
    per-position motif tagger and a sequence-level head.

    Args:
        backbone (`dict` or `PretrainedConfig`, *optional*):
            The encoder: a `LongformerConfig` (default, `model_type="longformer"`) or an hf-sparse
            `SparseTransformerConfig` (`model_type="sparse_transformer"`), as a config or its dict.
        motif_names (`list[str]`, *optional*):
            Motifs tagged per position with BIO labels `O, B-<motif>, I-<motif>, ...` (`id2label`).
            Empty: no per-position head.
        motifs (`dict[str, list[list[float]]]`, *optional*):
            Count matrices (4 x length, rows A C G T) of the motifs, kept so that the inference
            pipeline can call the strand of a detected span by scoring both strands.
        sequence_task (`str`, *optional*, defaults to `"motif_presence"`):
            Sequence-level head on the first token: `"motif_presence"` (multi-label, one output per
            motif), `"classification"` (one class of `sequence_label_names`) or `None`.
        sequence_label_names (`list[str]`, *optional*):
            Classes of the `"classification"` sequence head (e.g. `["non_promoter", "promoter"]`).
        global_every (`int`, *optional*, defaults to 100):
            Positions `0, k, 2k, ...` get global attention when the caller passes no
            `global_attention_mask` (0 or `None`: only the first token, if `global_first_token`).
        global_first_token (`bool`, *optional*, defaults to `True`):
            The first token (`[CLS]`) is global when the mask is built automatically.
        sequence_loss_weight (`float`, *optional*, defaults to 1.0):
            Weight of the sequence-level loss added to the per-position loss.
        classifier_dropout (`float`, *optional*, defaults to 0.1):
            Dropout before both heads.
        kmer (`int`, *optional*, defaults to 1):
            Tokens per k-mer of the matching `DNATokenizer` (1 = one token per nucleotide).

    Example:

    ```python
    >>> from hf_sparse.models.longformer_tasks import LongformerMotifConfig, LongformerForMotifDetection
    >>> config = LongformerMotifConfig(
    ...     backbone={"model_type": "sparse_transformer", "vocab_size": 10, "hidden_size": 64, "num_hidden_layers": 2,
    ...               "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 4096,
    ...               "attention_pattern": {"type": "longformer", "window": 64}},
    ...     motif_names=["CTCF", "SP1"],
    ... )
    >>> model = LongformerForMotifDetection(config)
    ```
    """

    model_type = "longformer_motif"

    def __init__(
        self,
        backbone=None,
        motif_names=(),
        motifs=None,
        sequence_task: str | None = "motif_presence",
        sequence_label_names=None,
        global_every: int | None = 100,
        global_first_token: bool = True,
        sequence_loss_weight: float = 1.0,
        classifier_dropout: float = 0.1,
        kmer: int = 1,
        **kwargs,
    ):
        self.backbone = backbone_config(
            backbone if backbone is not None else {"model_type": "longformer"}
        ).to_dict()
        self.motif_names = list(motif_names)
        if len(set(self.motif_names)) != len(self.motif_names):
            raise ValueError(f"motif_names must be unique, got {self.motif_names}")
        self.motifs = motifs
        if sequence_task not in SEQUENCE_TASKS:
            raise ValueError(f"sequence_task must be one of {SEQUENCE_TASKS}, got {sequence_task!r}")
        if sequence_task == "classification" and not sequence_label_names:
            raise ValueError("sequence_task='classification' needs sequence_label_names")
        if sequence_task == "motif_presence" and not self.motif_names:
            raise ValueError("sequence_task='motif_presence' needs motif_names")
        self.sequence_task = sequence_task
        self.sequence_label_names = list(sequence_label_names) if sequence_label_names else None
        if global_every is not None and (
            isinstance(global_every, bool) or not isinstance(global_every, int) or global_every < 0
        ):
            raise ValueError(f"global_every must be a non-negative int or None, got {global_every!r}")
        self.global_every = global_every
        self.global_first_token = global_first_token
        self.sequence_loss_weight = sequence_loss_weight
        self.classifier_dropout = classifier_dropout
        self.kmer = kmer
        if self.motif_names:
            tags = ["O"] + [f"{p}-{m}" for m in self.motif_names for p in ("B", "I")]
            kwargs["id2label"] = dict(enumerate(tags))
            kwargs["label2id"] = {t: i for i, t in enumerate(tags)}
        super().__init__(**kwargs)

    @property
    def hidden_size(self) -> int:
        return self.backbone["hidden_size"]

    @property
    def num_sequence_outputs(self) -> int:
        if self.sequence_task == "motif_presence":
            return len(self.motif_names)
        return len(self.sequence_label_names or [])


__all__ = ["LongformerMotifConfig"]
