"""Long-document summarization: the abstractive LED and extractive Longformer models
(``configuration_summarization``, ``modeling_summarization``), document preparation (``data``), the
sentence splitter (``sentences``), ROUGE (``rouge``), oracles and baselines (``metrics``), the
``long-document-summarization`` pipeline (``pipeline``) and the recipes' tasks (``task``)."""

from ...models.longformer_tasks.backbone import TASK_LORA_TARGET_MODULES
from ..registry import CardInfo, TaskDescriptor
from .configuration_summarization import LEDSummarizationConfig, LongformerExtractiveSummarizationConfig
from .modeling_summarization import LEDForSummarization, LongformerForExtractiveSummarization
from .pipeline import LongDocumentSummarizationPipeline

_CARD = dict(
    template="long-document-summarization.jinja",
    hub_pipeline_tag="summarization",
    tags=("summarization", "long-document"),
)

ABSTRACTIVE_SUMMARIZATION = TaskDescriptor(
    name="abstractive-summarization",
    config_class=LEDSummarizationConfig,
    auto_classes={"AutoModelForSeq2SeqLM": LEDForSummarization},
    task_class="hf_sparse.tasks.summarization.task:AbstractiveSummarizationTask",
    pipeline="long-document-summarization",
    pipeline_class=LongDocumentSummarizationPipeline,
    lora_target_modules=("q_proj", "v_proj", "query", "value"),
    card=CardInfo(
        title="Long-document summarization",
        description=(
            "An encoder-decoder with sparse encoder attention that writes an abstractive summary of "
            "a long document (papers, meeting transcripts, stories) read in one pass."
        ),
        citations=("longformer",),
        **_CARD,
    ),
)

EXTRACTIVE_SUMMARIZATION = TaskDescriptor(
    name="extractive-summarization",
    config_class=LongformerExtractiveSummarizationConfig,
    auto_classes={"AutoModel": LongformerForExtractiveSummarization},
    task_class="hf_sparse.tasks.summarization.task:ExtractiveSummarizationTask",
    pipeline="long-document-summarization",
    pipeline_class=LongDocumentSummarizationPipeline,
    lora_target_modules=TASK_LORA_TARGET_MODULES,
    card=CardInfo(
        title="Long-document summarization",
        description=(
            "A sparse-attention encoder that scores every sentence of a long document (papers, meeting "
            "transcripts, stories) read in one pass; the summary is the best sentences in document order."
        ),
        citations=("longformer",),
        **_CARD,
    ),
)

TASKS = (ABSTRACTIVE_SUMMARIZATION, EXTRACTIVE_SUMMARIZATION)

__all__ = [
    "ABSTRACTIVE_SUMMARIZATION",
    "EXTRACTIVE_SUMMARIZATION",
    "TASKS",
    "LEDForSummarization",
    "LEDSummarizationConfig",
    "LongDocumentSummarizationPipeline",
    "LongformerExtractiveSummarizationConfig",
    "LongformerForExtractiveSummarization",
]
