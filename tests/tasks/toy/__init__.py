"""A task defined entirely in this folder (configuration, model, data, metric, pipeline, card, Task)
and registered with hf-sparse by the one line at the end."""

from pathlib import Path

from hf_sparse.tasks import CardInfo, TaskDescriptor, register

from .configuration_toy import ToyPresenceConfig
from .modeling_toy import ToyPresenceModel
from .pipeline import ToyPresencePipeline

TOY_TASK = TaskDescriptor(
    name="toy-token-presence",
    config_class=ToyPresenceConfig,
    auto_classes={"AutoModelForSequenceClassification": ToyPresenceModel, "AutoModel": ToyPresenceModel},
    task_class="tests.tasks.toy.task:ToyTask",
    pipeline="toy-token-presence",
    pipeline_class=ToyPresencePipeline,
    card=CardInfo(
        template=str(Path(__file__).resolve().parent / "card.jinja"),
        title="Toy token presence",
        description="TOY-TASK-CARD: says whether token t7 occurs in a sequence of tokens.",
        hub_pipeline_tag="text-classification",
        tags=("toy",),
    ),
)

register(TOY_TASK)
