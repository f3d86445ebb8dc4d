"""DNA motif detection: a Longformer/SparseTransformer that tags motif instances per base and scores the
sequence (``configuration_motif``, ``modeling_motif``), TF motifs (``motifs``), the PWM scan and BIO
labels (``scanning``), synthetic data (``synthetic``), the recipes' FASTA data (``data``), the BIO
collator (``collator``), span F1 (``metrics``), the ``dna-motif-detection`` pipeline (``pipeline``)
and the recipes' ``dna-motif-detection`` task (``task``)."""

from ...tokenization_dna import DNATokenizer
from ..registry import CardInfo, TaskDescriptor
from .configuration_motif import LongformerMotifConfig
from .modeling_motif import LongformerForMotifDetection
from .pipeline import DNAMotifDetectionPipeline

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
    lora_target_modules=("query", "value"),
    tokenizer_class=DNATokenizer,
    card=CardInfo(
        template="dna-motif-detection.jinja",
        title="DNA motif detection",
        description=(
            "A sparse-attention model that labels each nucleotide of a long DNA sequence as inside "
            "or outside a sequence motif (e.g. a transcription-factor binding site), reading "
            "thousands of bases in one window."
        ),
        hub_pipeline_tag="token-classification",
        tags=("genomics", "dna", "token-classification"),
    ),
)

TASKS = (DNA_MOTIF_DETECTION,)

__all__ = [
    "DNA_MOTIF_DETECTION",
    "TASKS",
    "DNAMotifDetectionPipeline",
    "LongformerForMotifDetection",
    "LongformerMotifConfig",
]
