"""DNA motif detection: a Longformer/SparseTransformer that tags motif instances per base and scores the
sequence (``configuration_motif``, ``modeling_motif``), TF motifs (``motifs``), the PWM scan and BIO
labels (``scanning``), synthetic data (``synthetic``), the recipes' FASTA data (``data``), the BIO
collator (``collator``), span F1 (``metrics``), the ``dna-motif-detection`` pipeline (``pipeline``)
and the recipes' ``dna-motif-detection`` task (``task``)."""

from ...models.longformer_tasks.backbone import TASK_LORA_TARGET_MODULES
from ...tokenization_dna import DNATokenizer
from ..registry import CardInfo, TaskDescriptor
from .configuration_motif import LongformerMotifConfig
from .modeling_motif import LongformerForMotifDetection
from .pipeline import DNAMotifDetectionPipeline, window_bases

DNA_MOTIF_DETECTION = TaskDescriptor(
    name="dna-motif-detection",
    config_class=LongformerMotifConfig,
    auto_classes={
        "AutoModelForTokenClassification": LongformerForMotifDetection,
        "AutoModel": LongformerForMotifDetection,
    },
    task_class="hf_sparse.tasks.motif.task:MotifTask",
    pipeline="dna-motif-detection",
    pipeline_class=DNAMotifDetectionPipeline,
    lora_target_modules=TASK_LORA_TARGET_MODULES,
    tokenizer_class=DNATokenizer,
    card=CardInfo(
        template="dna-motif-detection.jinja",
        title="DNA motif detection",
        description=(
            "A sparse-attention model over DNA sequences: it tags sequence motifs (e.g. transcription-factor "
            "binding sites) base by base, scores or classifies the whole sequence, or both."
        ),
        hub_pipeline_tag="token-classification",
        tags=("genomics", "dna"),
    ),
)


def card_fields(config: LongformerMotifConfig) -> dict:
    """``render_model_card`` keyword arguments that describe one motif model (the task's card is generic):
    ``pipeline_tag``, ``auto_class`` and ``tags`` from its heads (``"token-classification"`` with
    ``motif_names``, ``"text-classification"`` for a classification head alone) and ``extra={"description":
    ...}`` naming its heads and the bases one window reads (:func:`~.pipeline.window_bases`)."""
    does = []
    if config.motif_names:
        does.append(
            "labels each nucleotide of a DNA sequence as inside or outside an instance of its motifs "
            f"({', '.join(config.motif_names)})"
        )
    if config.sequence_task == "motif_presence":
        does.append("scores whether each motif occurs in the sequence")
    elif config.sequence_task == "classification":
        what = "the sequence" if does else "a DNA sequence"
        does.append(f"classifies {what} as {' / '.join(config.sequence_label_names)}")
    window = window_bases(config)
    description = (
        f"A sparse-attention model that {' and '.join(does)}, reading up to {window:,} bases in one window "
        "(a longer sequence is read in overlapping windows)."
    )
    tags = (["token-classification"] if config.motif_names else []) + (
        ["text-classification"] if config.sequence_task == "classification" else []
    )
    return {
        "pipeline_tag": tags[0],
        "auto_class": "AutoModelForTokenClassification" if config.motif_names else "AutoModel",
        "tags": tags,
        "extra": {"description": description},
    }


TASKS = (DNA_MOTIF_DETECTION,)

__all__ = [
    "DNA_MOTIF_DETECTION",
    "TASKS",
    "DNAMotifDetectionPipeline",
    "LongformerForMotifDetection",
    "LongformerMotifConfig",
    "card_fields",
]
