"""A toy task for the runner tests: does the sequence contain token ``t7``?

Sequence classification on synthetic data with a tiny BERT (hidden 32, 2 layers) and a word-level
tokenizer built locally (nothing from the Hub). Balanced classes; it learns to > 90% validation
accuracy in a few seconds on 2 CPU cores.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from hf_sparse.training import Task, path_field

TASK = "tests.training.toy_task:ToyTask"


@dataclass
class ToyArguments:
    """Recipe keys of the toy task."""

    num_tokens: int = field(default=12, metadata={"help": "Vocabulary size (tokens t0 .. t{n-1})."})
    target_token: int = field(default=7, metadata={"help": "Label 1 iff this token occurs."})
    seq_len: int = field(default=10, metadata={"help": "Tokens per sequence."})
    num_train: int = field(default=512, metadata={"help": "Training examples."})
    num_validation: int = field(default=128, metadata={"help": "Validation examples."})
    num_test: int = field(default=128, metadata={"help": "Test examples (0: no test split)."})
    hidden_size: int = field(default=32, metadata={"help": "BERT hidden size."})
    num_layers: int = field(default=2, metadata={"help": "BERT layers."})
    step_delay: float = field(
        default=0.0, metadata={"help": "Seconds slept per training batch (slows a run)."}
    )
    record_ranks_to: str | None = path_field(help="Folder where every process writes rank-<r>.json.")
    data_dir: str | None = path_field(help="Unused; a path field for the recipe path tests.")
    model_name_or_path: str | None = path_field(
        help="A saved toy model to fine-tune (the base of an unmerged LoRA adapter); None: a new one."
    )


def build_tokenizer(num_tokens: int):
    """A word-level fast tokenizer over t0..t{n-1} with BERT's special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    vocab = {tok: i for i, tok in enumerate(specials + [f"t{i}" for i in range(num_tokens)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]"
    )


def make_texts(n: int, args: ToyArguments, seed: int):
    """``n`` balanced examples: label 1 sequences contain the target once or more, label 0 never."""
    rng = np.random.default_rng(seed)
    others = [t for t in range(args.num_tokens) if t != args.target_token]
    texts, labels = [], []
    for i in range(n):
        label = i % 2
        seq = rng.choice(others, size=args.seq_len)
        if label:
            seq[rng.integers(args.seq_len)] = args.target_token
        texts.append(" ".join(f"t{t}" for t in seq))
        labels.append(label)
    return texts, labels


class _SlowCollator:
    """Pads like DataCollatorWithPadding, then sleeps ``delay`` seconds (to make a run slower)."""

    def __init__(self, tokenizer, delay: float):
        from transformers import DataCollatorWithPadding

        self.inner = DataCollatorWithPadding(tokenizer)
        self.delay = delay

    def __call__(self, features):
        if self.delay:
            time.sleep(self.delay)
        return self.inner(features)


def save_toy_model(folder, **values):
    """Save a new toy model and its tokenizer in ``folder`` (a ``model_name_or_path`` for the toy task)."""
    args = ToyArguments(**values)
    task = ToyTask()
    tokenizer = task.build_tokenizer(args)
    task.build_model(args, tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


class ToyTask(Task):
    """Token-presence detection with a tiny BertForSequenceClassification."""

    name = "toy"
    Arguments = ToyArguments
    lora_task_type = "SEQ_CLS"

    def build_tokenizer(self, args):
        return build_tokenizer(args.num_tokens)

    def build_model(self, args, tokenizer):
        from transformers import BertConfig, BertForSequenceClassification

        if args.model_name_or_path:
            return BertForSequenceClassification.from_pretrained(args.model_name_or_path)
        config = BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=args.hidden_size,
            num_hidden_layers=args.num_layers,
            num_attention_heads=2,
            intermediate_size=2 * args.hidden_size,
            max_position_embeddings=64,
            num_labels=2,
            pad_token_id=tokenizer.pad_token_id,
        )
        return BertForSequenceClassification(config)

    def build_datasets(self, args, tokenizer):
        from datasets import Dataset

        if args.record_ranks_to:
            rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
            world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
            os.makedirs(args.record_ranks_to, exist_ok=True)
            with open(os.path.join(args.record_ranks_to, f"rank-{rank}.json"), "w") as f:
                json.dump({"rank": rank, "world_size": world, "pid": os.getpid()}, f)
        splits = {
            "train": (args.num_train, 1),
            "validation": (args.num_validation, 2),
            "test": (args.num_test, 3),
        }
        out = {}
        for split, (n, seed) in splits.items():
            if n <= 0:
                continue
            texts, labels = make_texts(n, args, seed)
            ds = Dataset.from_dict({"text": texts, "label": labels})
            out[split] = ds.map(lambda b: tokenizer(b["text"]), batched=True, remove_columns=["text"])
        return out

    def data_collator(self, args, tokenizer):
        return _SlowCollator(tokenizer, args.step_delay)

    def compute_metrics(self, args):
        def accuracy(pred):
            logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
            return {"accuracy": float((np.argmax(logits, axis=-1) == pred.label_ids).mean())}

        return accuracy

    def after_training(self, trainer, args, output_dir):
        """Records what was trainable and whether checkpointing was on, for the tests."""
        model = trainer.model
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
        return {
            "trainable_parameters": trainable,
            "activation_checkpointing": any(
                getattr(m, "gradient_checkpointing", False) for m in base.modules()
            ),
        }

    def card_info(self, args, metrics):
        return {"dataset_name": "synthetic token presence"}
