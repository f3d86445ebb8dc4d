"""The toy recipe task: what ``task: tests.tasks.toy:TOY_TASK`` runs (through hf_sparse.training)."""

from dataclasses import dataclass, field

from hf_sparse.tasks.arguments import BackboneArguments
from hf_sparse.training import Task

from .configuration_toy import ToyPresenceConfig
from .data import build_tokenizer, make_examples
from .metrics import presence_accuracy
from .modeling_toy import ToyPresenceModel


@dataclass
class ToyArguments(BackboneArguments):
    """Recipe keys of the toy task (the shared backbone keys give the embedding width: hidden_size)."""

    num_tokens: int = field(default=10, metadata={"help": "Vocabulary t0..t{n-1}."})
    target_token: int = field(default=7, metadata={"help": "Label 1 iff this token occurs."})
    seq_len: int = field(default=8, metadata={"help": "Tokens per sequence."})
    num_train: int = field(default=256, metadata={"help": "Training examples."})
    num_eval: int = field(default=64, metadata={"help": "Validation and test examples."})


class ToyTask(Task):
    Arguments = ToyArguments

    def build_tokenizer(self, args):
        return build_tokenizer(args.num_tokens)

    def build_model(self, args, tokenizer):
        config = ToyPresenceConfig(vocab_size=len(tokenizer), hidden_size=args.hidden_size, pad_token_id=0)
        return ToyPresenceModel(config)

    def build_datasets(self, args, tokenizer):
        def split(n, seed):
            return make_examples(n, args.num_tokens, args.target_token, args.seq_len, seed, tokenizer)

        return {
            "train": split(args.num_train, 0),
            "validation": split(args.num_eval, 1),
            "test": split(args.num_eval, 2),
        }

    def data_collator(self, args, tokenizer):
        from transformers import DataCollatorWithPadding

        return DataCollatorWithPadding(tokenizer)

    def compute_metrics(self, args):
        return presence_accuracy
