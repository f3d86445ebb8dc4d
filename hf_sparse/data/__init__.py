"""Data utilities: FASTA reading, TF motifs (readers, scanner, BIO labels) and synthetic motif data."""

from .dialogue import (
    DialogueFormatter,
    DialogueLabels,
    DialogueTrackingCollator,
    ResponseSelectionCollator,
    build_selection_examples,
    build_tracking_examples,
    read_sgd,
)
from .fasta import iter_fasta, read_fasta
from .motif_collator import MotifCollator
from .motifs import (
    Motif,
    SyntheticMotifGenerator,
    bio_label_names,
    builtin_motifs,
    dinucleotide_shuffle,
    generate_motif_dataset,
    label_sequence,
    read_jaspar,
    read_motifs,
    read_transfac,
    scan,
    spans_to_tags,
)
from .summarization import (
    ExtractiveCollator,
    encode_abstractive,
    encode_extractive,
    read_summarization_jsonl,
    sentence_features,
    synthetic_copy_documents,
    train_summarization_tokenizer,
)

__all__ = [
    "ExtractiveCollator",
    "encode_abstractive",
    "encode_extractive",
    "read_summarization_jsonl",
    "sentence_features",
    "synthetic_copy_documents",
    "train_summarization_tokenizer",
    "DialogueFormatter",
    "DialogueLabels",
    "DialogueTrackingCollator",
    "ResponseSelectionCollator",
    "build_selection_examples",
    "build_tracking_examples",
    "read_sgd",
    "Motif",
    "MotifCollator",
    "SyntheticMotifGenerator",
    "bio_label_names",
    "builtin_motifs",
    "dinucleotide_shuffle",
    "generate_motif_dataset",
    "iter_fasta",
    "label_sequence",
    "read_fasta",
    "read_jaspar",
    "read_motifs",
    "read_transfac",
    "scan",
    "spans_to_tags",
]
