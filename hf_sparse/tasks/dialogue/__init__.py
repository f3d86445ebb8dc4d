"""Dialogue response selection and state tracking: the model (``configuration_dialogue``,
``modeling_dialogue``), the token layout (``formatter``), Schema-Guided Dialogue data (``data``), the
collators (``collator``), per-turn act F1 and intent accuracy (``metrics``), R@k / MRR (``ranking``), the
inference pipelines (``pipeline``) and the recipes' tasks (``task``)."""

from ...models.longformer_tasks.backbone import TASK_LORA_TARGET_MODULES
from ..registry import CardInfo, TaskDescriptor
from .configuration_dialogue import LongformerDialogueConfig
from .modeling_dialogue import LongformerForDialogue
from .pipeline import DialogueResponseSelectionPipeline, DialogueStateTrackingPipeline

DIALOGUE_RESPONSE_SELECTION = TaskDescriptor(
    name="dialogue-response-selection",
    config_class=LongformerDialogueConfig,
    auto_classes={
        "AutoModelForSequenceClassification": LongformerForDialogue,
        "AutoModel": LongformerForDialogue,
    },
    task_class="hf_sparse.tasks.dialogue.task:DialogueSelectionTask",
    pipeline="dialogue-response-selection",
    pipeline_class=DialogueResponseSelectionPipeline,
    pipeline_auto_classes=("AutoModel",),
    lora_target_modules=TASK_LORA_TARGET_MODULES,
    card=CardInfo(
        template="dialogue-response-selection.jinja",
        title="Dialogue response selection",
        description=(
            "A sparse-attention encoder that scores candidate responses given a long dialogue "
            "history, so the whole conversation fits in one window."
        ),
        hub_pipeline_tag="text-ranking",
        tags=("dialogue", "response-selection"),
    ),
)

DIALOGUE_STATE_TRACKING = TaskDescriptor(
    name="dialogue-state-tracking",
    config_class=LongformerDialogueConfig,
    auto_classes={"AutoModel": LongformerForDialogue},
    task_class="hf_sparse.tasks.dialogue.task:DialogueTrackingTask",
    pipeline="dialogue-state-tracking",
    pipeline_class=DialogueStateTrackingPipeline,
    lora_target_modules=TASK_LORA_TARGET_MODULES,
    card=CardInfo(
        template="dialogue-state-tracking.jinja",
        title="Dialogue state tracking",
        description=(
            "A sparse-attention encoder that reads a whole dialogue and predicts the dialogue acts of every "
            "turn and the active intent of every user turn."
        ),
        hub_pipeline_tag="token-classification",
        tags=("dialogue", "dialogue-state-tracking"),
    ),
)

TASKS = (DIALOGUE_RESPONSE_SELECTION, DIALOGUE_STATE_TRACKING)

__all__ = [
    "DIALOGUE_RESPONSE_SELECTION",
    "DIALOGUE_STATE_TRACKING",
    "TASKS",
    "DialogueResponseSelectionPipeline",
    "DialogueStateTrackingPipeline",
    "LongformerDialogueConfig",
    "LongformerForDialogue",
]
