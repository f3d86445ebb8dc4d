"""Run by ``tests/tasks/test_lm_distributed.py`` under ``accelerate launch`` (two CPU processes): the
causal-lm task's ``lm_metrics`` of a saved model on saved blocks, through a real Trainer's sharded evaluation
dataloader; each rank writes its result to ``OUT/rank-<rank>.json``.

    accelerate launch --config_file configs/accelerate/cpu_ddp.yaml tests/tasks/lm_metrics_worker.py MODEL BLOCKS OUT
"""

import json
import sys
from pathlib import Path


def main(model_dir: str, blocks: str, out: str) -> None:
    import torch
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    from hf_sparse.models.sparse_transformer import SparseTransformerForCausalLM
    from hf_sparse.tasks.lm.task import lm_metrics

    torch.set_num_threads(1)
    ids = json.loads(Path(blocks).read_text())
    dataset = Dataset.from_dict(
        {"input_ids": ids, "attention_mask": [[1] * len(b) for b in ids], "labels": ids}
    )
    model = SparseTransformerForCausalLM.from_pretrained(model_dir)
    args = TrainingArguments(
        output_dir=str(Path(out) / "trainer"), per_device_eval_batch_size=2, use_cpu=True, report_to="none"
    )
    trainer = Trainer(model=model, args=args)
    metrics = lm_metrics(trainer.model, dataset, trainer, "eval")
    rank = trainer.args.process_index
    result = {
        "rank": rank,
        "world_size": trainer.args.world_size,
        "training": trainer.model.training,
        **metrics,
    }
    (Path(out) / f"rank-{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:4])
