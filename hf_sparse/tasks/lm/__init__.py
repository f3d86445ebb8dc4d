"""Causal language modelling: a small SparseTransformer decoder trained from scratch on real text (the
documents of a summarization data folder), the recipes' ``causal-lm`` task (``task``) and its data
preparation (``data``). It serves the learned-sparsity recipes and benchmark (dense vs mixture-of-experts
feed-forward; fixed window vs adaptive span): ``pipelines/lm/*.yaml``,
``scripts/benchmark_learned_sparsity.py``."""

from ...models import LORA_TARGET_MODULES, SPARSE_TRANSFORMER_AUTO, SparseTransformerConfig
from ...models.sparse_transformer import SparseTransformerForCausalLM
from ..registry import CardInfo, TaskDescriptor

CAUSAL_LM = TaskDescriptor(
    name="causal-lm",
    config_class=SparseTransformerConfig,
    # the causal LM first (the card loads with it), then every other head, so that registering this task
    # keeps the SparseTransformer family's full auto_map in saved folders
    auto_classes={
        "AutoModelForCausalLM": SparseTransformerForCausalLM,
        **{auto.__name__: cls for auto, cls in SPARSE_TRANSFORMER_AUTO.items()},
    },
    task_class="hf_sparse.tasks.lm.task:CausalLMTask",
    lora_target_modules=tuple(LORA_TARGET_MODULES),
    card=CardInfo(
        template="causal-lm.jinja",
        title="Causal language model",
        description=(
            "A small decoder-only SparseTransformer language model trained from scratch on real text, with a "
            "sparse causal attention pattern and, optionally, a sparse mixture-of-experts feed-forward."
        ),
        hub_pipeline_tag="text-generation",
        tags=("causal-lm", "text-generation"),
    ),
)

TASKS = (CAUSAL_LM,)

__all__ = ["CAUSAL_LM", "TASKS"]
