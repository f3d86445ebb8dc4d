"""Dialogue fine-tuning tasks on Schema-Guided Dialogue (or any data in its JSON Lines format).

- ``dialogue-response-selection``: for every response-speaker turn, rank the true response among
  ``n_negatives`` (default 9) responses of *other* dialogues drawn with a fixed seed
  (:func:`hf_sparse.tasks.dialogue.data.build_selection_examples`). Training uses ``train_negatives`` sampled negatives per
  example, drawn the same way with another seed; the loss is the cross-entropy over each example's
  candidates. Metrics: recall@1/2/5 and MRR over the 1 + ``n_negatives`` candidates (R10@k for 9).
- ``dialogue-state-tracking``: per-turn dialogue acts (multi-label) and the active intent of every user turn,
  read from each turn's separator. Training reads whole dialogues (every turn labelled), each followed by
  ``train_prefixes`` seeded prefixes of it (so that the newest turn, which sees no later turn, is trained
  on too; ``max_train_samples`` keeps the first examples: dialogues with their prefixes). Evaluation is
  *online* by default (``eval_mode: prefix``): turn ``t`` is predicted from turns ``0..t`` only. Metrics: act
  micro/macro F1 and intent accuracy on intents seen / unseen in training (none, and no intent head, for
  data without intents).

Both build a word-level tokenizer from the training turns unless ``tokenizer_name`` names a pretrained one,
and a small randomly initialised Longformer (or SparseTransformer) unless ``model_name_or_path`` names a
checkpoint: a saved ``LongformerForDialogue`` folder, or a Longformer encoder such as
``allenai/longformer-base-4096`` whose weights become the backbone.

After training, both run a *long-history check* on the test split (``long_history_check``): the last
response (selection) / the last user turn (tracking) of every test dialogue, predicted from the full history
and from only the last 2 turns; the results are in ``all_results.json`` under ``extras.long_history``. The
dialogues of each split (and, for tracking, the number of acts and intents) are under ``extras.data``.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from ...data.loading import (
    fingerprint,
    jsonl_files,
    load_jsonl_splits,
    num_proc_for,
    tokenizer_fingerprint,
)
from ...metrics import load as load_metric
from ...models.longformer_tasks.backbone import card_pattern
from ...training import Task, path_field
from ...training.recipe import require_model, require_path
from ...training.split_loss import SplitLossMixin
from ...training.tasks import metric_prefix
from ...utils.labels import IGNORE_INDEX
from ...utils.validation import check_fraction
from ..arguments import BackboneArguments
from .collator import DialogueTrackingCollator, ResponseSelectionCollator
from .configuration_dialogue import TURN_POOLING
from .data import (
    DialogueLabels,
    build_selection_examples,
    build_tracking_examples,
    check_sgd_record,
    selection_pool,
    train_dialogue_tokenizer,
)
from .formatter import GLOBAL_ON_NAMES, DialogueFormatter

_POSITIVE_INT_KEYS = ("max_length", "vocab_min_frequency")
_HEADS = ("selection_scorer", "act_classifier", "intent_classifier")  # LongformerForDialogue's task heads


# --------------------------------------------------------------------------------------- arguments


@dataclass
class DialogueArguments(BackboneArguments):
    """Recipe keys shared by both dialogue tasks."""

    data_dir: str = path_field(
        help="Folder with train.jsonl, validation.jsonl and (optional) test.jsonl in the SGD JSON Lines format "
        "(dialogue_id, speakers, turns, acts, active_intent); relative to the recipe file."
    )
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "None: a new model from the size keys below. A saved LongformerForDialogue folder (e.g. the "
            "tracking model, to start selection from its encoder): its tokenizer and encoder, this task's heads "
            "(kept where they fit, else new; act and intent rows by label name: a label new in the data gets a "
            "new row), other heads dropped. A Longformer checkpoint (e.g. allenai/longformer-base-4096): its "
            "encoder is the backbone."
        },
    )
    tokenizer_name: str | None = field(
        default=None,
        metadata={
            "help": "Pretrained tokenizer (e.g. allenai/longformer-base-4096); None: a tokenizer trained on the "
            "training turns (tokenizer_kind)."
        },
    )
    tokenizer_kind: str = field(
        default="word",
        metadata={"help": "Tokenizer built from the data: 'word' (word-level) or 'wordpiece'."},
    )
    vocab_min_frequency: int = field(
        default=2, metadata={"help": "Built tokenizer: words seen fewer times in training become [UNK]."}
    )
    vocab_size: int | None = field(
        default=None, metadata={"help": "Built tokenizer: vocabulary cap (None: no cap for 'word')."}
    )
    max_length: int = field(
        default=512,
        metadata={"help": "Tokens per sequence; longer histories are left-truncated (newest turns kept)."},
    )
    turn_separator: str | None = field(
        default=None,
        metadata={
            "help": "Extra token before every turn's speaker token (e.g. '[TURN]'); the per-turn heads then read "
            "both (the turn separator global with global_on: separators, the speaker token local)."
        },
    )
    global_on: list[str] = field(
        default_factory=lambda: ["cls", "separators", "latest_turn", "candidate"],
        metadata={"help": "Global attention on: cls, separators, latest_turn, candidate."},
    )
    hidden_size: int = field(default=128, metadata={"help": "New model: hidden size."})
    intermediate_size: int = field(default=512, metadata={"help": "New model: feed-forward size."})
    attention_windows: list[int] | None = field(
        default=None,
        metadata={
            "help": "Longformer backbone: one window per layer (e.g. [8, 64]: a narrow first layer reads each "
            "turn's own words, the next one its context), instead of attention_window for all."
        },
    )
    sinusoidal_positions: bool = field(
        default=False,
        metadata={
            "help": "New Longformer model: initialise the (trainable) position table with sinusoids, so that "
            "relative offsets are easy to read from the start (no pretrained positions to start from)."
        },
    )
    turn_pooling: str = field(
        default="separator",
        metadata={
            "help": "What the heads read: 'separator' (each turn's separator tokens, [RSP] for selection) or "
            "'separator+mean' (also the mean of the turn's / candidate's token states)."
        },
    )
    long_history_check: bool = field(
        default=True,
        metadata={"help": "After training: last-turn results on test, full history vs the last 2 turns."},
    )
    max_train_dialogues: int | None = field(
        default=None, metadata={"help": "Use only the first N training dialogues (quick runs, tests)."}
    )
    max_eval_dialogues: int | None = field(
        default=None, metadata={"help": "Use only the first N validation and test dialogues."}
    )

    def __post_init__(self):
        super().__post_init__()
        if not self.data_dir:
            raise ValueError(
                "data_dir is required: the folder with train.jsonl / validation.jsonl / test.jsonl"
            )
        if self.tokenizer_kind not in ("word", "wordpiece"):
            raise ValueError(f"tokenizer_kind must be 'word' or 'wordpiece', got {self.tokenizer_kind!r}")
        for name in _POSITIVE_INT_KEYS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.attention_windows is not None:
            if self.backbone != "longformer":
                raise ValueError("attention_windows (one window per layer) needs backbone: longformer")
            if len(self.attention_windows) != self.num_hidden_layers or any(
                isinstance(w, bool) or not isinstance(w, int) or w < 2 or w % 2
                for w in self.attention_windows
            ):
                raise ValueError(
                    f"attention_windows must hold one even window >= 2 per layer ({self.num_hidden_layers}), "
                    f"got {self.attention_windows!r}"
                )
        unknown = sorted(set(self.global_on) - set(GLOBAL_ON_NAMES))
        if unknown:
            raise ValueError(f"global_on has unknown names {unknown}; choose from {list(GLOBAL_ON_NAMES)}")
        if self.turn_pooling not in TURN_POOLING:
            raise ValueError(f"turn_pooling must be one of {TURN_POOLING}, got {self.turn_pooling!r}")
        for name in ("max_train_dialogues", "max_eval_dialogues", "vocab_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")


@dataclass
class SelectionArguments(DialogueArguments):
    """Recipe keys of ``dialogue-response-selection``."""

    n_negatives: int = field(
        default=9, metadata={"help": "Evaluation: negatives per example (1 + n candidates; 9 -> R10@k)."}
    )
    train_negatives: int = field(
        default=3, metadata={"help": "Training: sampled negatives (other dialogues' responses) per example."}
    )
    train_response_turns: str = field(
        default="all",
        metadata={"help": "Training response points: 'all', 'last' or every k-th ('2', '3', ...)."},
    )
    selection_seed: int = field(
        default=0, metadata={"help": "Seed of the evaluation negatives (training uses selection_seed + 1)."}
    )

    def __post_init__(self):
        super().__post_init__()
        for name in ("n_negatives", "train_negatives"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive int, got {getattr(self, name)!r}")
        turns = self.train_response_turns
        if turns not in ("all", "last") and not (turns.isdigit() and int(turns) >= 1):
            raise ValueError(f"train_response_turns must be 'all', 'last' or a positive int, got {turns!r}")


@dataclass
class TrackingArguments(DialogueArguments):
    """Recipe keys of ``dialogue-state-tracking``."""

    act_field: str = field(default="acts", metadata={"help": "Per-turn act labels: 'acts' or 'act_slots'."})
    train_prefixes: int = field(
        default=2,
        metadata={"help": "Extra training examples per dialogue: seeded prefixes ending at a random turn."},
    )
    eval_mode: str = field(
        default="prefix",
        metadata={
            "help": "'prefix': turn t predicted from turns 0..t (online tracking); 'dialogue': one pass per "
            "dialogue, every turn also sees the later ones."
        },
    )
    act_threshold: float = field(default=0.5, metadata={"help": "Act probability threshold."})
    tune_act_thresholds: bool = field(
        default=True,
        metadata={
            "help": "After training, pick one threshold per act on the validation split (saved in the model "
            "config, used for the test metrics)."
        },
    )
    prefix_seed: int = field(default=0, metadata={"help": "Seed of the training prefixes."})

    def __post_init__(self):
        super().__post_init__()
        if self.act_field not in ("acts", "act_slots"):
            raise ValueError(f"act_field must be 'acts' or 'act_slots', got {self.act_field!r}")
        if self.eval_mode not in ("prefix", "dialogue"):
            raise ValueError(f"eval_mode must be 'prefix' or 'dialogue', got {self.eval_mode!r}")
        if self.train_prefixes < 0:
            raise ValueError(f"train_prefixes must be >= 0, got {self.train_prefixes!r}")
        check_fraction("act_threshold", self.act_threshold, closed_low=False, closed_high=False)


# --------------------------------------------------------------------------------------- data


def _length(input_ids: list) -> int:
    """Tokens of an example (of its longest candidate for selection)."""
    return max(map(len, input_ids)) if input_ids and isinstance(input_ids[0], list) else len(input_ids)


def _rows(batch: dict[str, list]) -> list[dict]:
    return [dict(zip(batch, values)) for values in zip(*batch.values())]


def _columns(examples: list[dict]) -> dict[str, list]:
    keys = list(dict.fromkeys(k for e in examples for k in e))
    return {k: [e.get(k) for e in examples] for k in keys}


def tracking_rows(
    batch, *, formatter, labels, mode: str, prefixes_per_dialogue: int = 0, prefix_seed: int = 0
):
    """Batched ``map`` over dialogues: :func:`build_tracking_examples` of the batch in ``mode``; with
    ``prefixes_per_dialogue``, each dialogue followed by its :func:`prefixes` (so that the first ``n``
    examples hold whole dialogues and prefixes alike)."""
    dialogues = _rows(batch)
    if prefixes_per_dialogue:
        dialogues = [
            cut for d in dialogues for cut in (d, *prefixes([d], prefixes_per_dialogue, prefix_seed))
        ]
    return _columns(build_tracking_examples(dialogues, formatter, labels, mode=mode))


def selection_rows(batch, *, formatter, pool, **kwargs):
    """Batched ``map`` over dialogues: :func:`build_selection_examples` of the batch, negatives drawn
    from ``pool`` (the whole split's :func:`selection_pool`), so batches give the examples of the whole."""
    return _columns(build_selection_examples(_rows(batch), formatter=formatter, pool=pool, **kwargs))


def load_splits(data_dir: str, max_train: int | None = None, max_eval: int | None = None) -> dict:
    """``{"train", "validation"[, "test"]}`` dialogues (``datasets.Dataset``) of an SGD-format folder
    (``test.jsonl`` optional), every row checked (:func:`check_sgd_record`); the first ``max_train`` /
    ``max_eval`` dialogues."""
    out = {}
    for split, dialogues in load_jsonl_splits(data_dir, check=check_sgd_record).items():
        limit = max_train if split == "train" else max_eval
        out[split] = dialogues.select(range(limit)) if limit and limit < len(dialogues) else dialogues
    return out


def sinusoidal_init(table: torch.Tensor, scale: float = 0.5) -> None:
    """Fill a ``(positions, dim)`` position table in place with Vaswani et al.'s sinusoids times ``scale``:
    ``sin(p / 10000^(2i/dim))`` in even columns, ``cos`` in odd ones."""
    n, dim = table.shape
    position = torch.arange(n, dtype=torch.float32)[:, None]  # (n, 1)
    freq = 10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)  # (dim/2,)
    with torch.no_grad():
        table[:, 0::2] = scale * torch.sin(position / freq)
        table[:, 1::2] = scale * torch.cos(position / freq[: dim // 2])


def _trainer_class(label_names: tuple[str, ...]):
    """A Trainer that knows the task's label names (the model's forward takes all three kinds, and the
    Trainer would otherwise wait for all of them), groups training examples by
    their token counts under ``train_sampling_strategy: group_by_length`` and evaluates in dataset
    order whatever the strategy.

    Its losses are those of the whole batch, whatever the batches: in training each head's loss is divided by
    its items (examples, labelled turns) in all the micro-batches of a gradient-accumulation step, of every
    process (``num_items_in_batch``, per head); ``eval_loss`` sums each head's loss over every example of the
    split and divides by the split's items (gathered with ``gather_for_metrics``, which drops the examples a
    distributed run's last batch repeats), the heads weighed as in the model's loss
    (:class:`~hf_sparse.training.split_loss.SplitLossMixin`), so it does not depend on the evaluation batch size or
    the number of processes. ``eval_loss`` leaves out the router losses of an MoE backbone, which depend on the
    batch."""
    from transformers import Trainer
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from .modeling_dialogue import head_loss_sums, label_items, loss_weights

    class DialogueTrainer(SplitLossMixin, Trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.args.label_names is None:
                self.label_names = list(label_names)
            self._predicting = False

        def _get_num_items_in_batch(self, batch_samples, device):
            # transformers counts only `labels`: the tracking heads would average per micro-batch
            if (
                self._predicting
                or not self.model_accepts_loss_kwargs
                or not batch_samples
                or self.args.n_gpu > 1
            ):
                return None
            names = [name for name in self.label_names if name in batch_samples[0]]
            if not names:
                return None
            counts = torch.stack(
                [sum(label_items(name, batch[name]).sum() for batch in batch_samples) for name in names]
            ).to(device)  # (heads,)
            if self.args.average_tokens_across_devices and self.args.world_size > 1:
                counts = self.accelerator.gather(counts[None]).sum(0)  # every process's micro-batches
            return dict(zip(names, counts))

        def split_loss_terms(self, outputs, inputs):
            if not self._predicting or not isinstance(outputs, dict):  # evaluation batches only
                return {}
            return head_loss_sums(
                outputs.get("selection_logits"), inputs.get("labels"), outputs.get("act_logits"),
                inputs.get("act_labels"), outputs.get("intent_logits"), inputs.get("intent_labels"),
            )  # fmt: skip

        def split_loss_weights(self):
            return loss_weights(_unwrap(self.accelerator.unwrap_model(self.model)).config)

        def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
            self._predicting = True
            try:
                return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
            finally:
                self._predicting = False

        def _get_train_sampler(self, train_dataset=None):
            dataset = self.train_dataset if train_dataset is None else train_dataset
            strategy = getattr(self.args.train_sampling_strategy, "value", self.args.train_sampling_strategy)
            if strategy == "group_by_length" and dataset is not None:
                batch = self.args.train_batch_size * self.args.gradient_accumulation_steps
                return LengthGroupedSampler(batch, lengths=[_length(ids) for ids in dataset["input_ids"]])
            return super()._get_train_sampler(train_dataset)

        def _get_eval_sampler(self, eval_dataset):
            # The task scores predictions against the dataset's rows by index, so evaluation keeps the
            # dataset's order (transformers would group it by length under group_by_length).
            if eval_dataset is None or self.args.world_size > 1:
                return None  # accelerate shards the dataloader in order and gathers in order
            return torch.utils.data.SequentialSampler(eval_dataset)

    return DialogueTrainer


# what each name of the formatter's global_on makes global (formatter.py's module docstring), for the card
_GLOBAL_ON_TEXT = {
    "cls": "the first token",
    "separators": "every turn separator and [RSP]",
    "latest_turn": "every token of the newest turn",
    "candidate": "[RSP] and the candidate's tokens",
}


# --------------------------------------------------------------------------------------- shared task


class _DialogueTask(Task):
    """Data, tokenizer and model building shared by both dialogue tasks."""

    #: the model's own ``accepts_loss_kwargs``: its heads divide by the Trainer's per-head ``num_items_in_batch``
    model_accepts_loss_kwargs = None

    #: what one example is and which dialogues give one (named when a split gives none)
    example_name: ClassVar[str]
    example_rule: ClassVar[str]

    def __init__(self):
        self._splits: dict[str, list[dict]] | None = None
        self._pad_multiple: int | None = 64
        self._config = None  # the model's config (build_model): the card reads its attention pattern
        self._new_embeddings = False  # build_model: the vocabulary is new (see lora_modules_to_save)
        self._new_token_ids: list[int] = []  # build_model: the rows of new tokens (LoRA trains them)
        self._own_tokens: int | None = None  # build_tokenizer: the tokens before the formatter's were added

    def check_arguments(self, args):
        require_path("data_dir", args.data_dir, kind="folder")
        jsonl_files(args.data_dir)  # train and validation, each .jsonl or .jsonl.gz: else FileNotFoundError
        hint = (
            "a saved dialogue model is another run's output_dir (relative to the working directory): "
            "pipelines/dialogue/tiny-selection.yaml needs pipelines/dialogue/tiny-tracking.yaml run first"
        )
        require_model("model_name_or_path", args.model_name_or_path, hint=hint)
        require_model("tokenizer_name", args.tokenizer_name)

    def data(self, args) -> dict[str, list[dict]]:
        if self._splits is None:
            self._splits = load_splits(args.data_dir, args.max_train_dialogues, args.max_eval_dialogues)
        return self._splits

    @staticmethod
    def _saved_dialogue_model(path: str | None) -> bool:
        if not path:
            return False
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(path).model_type == "longformer_dialogue"

    def build_tokenizer(self, args):
        from transformers import AutoTokenizer

        if self._saved_dialogue_model(args.model_name_or_path):
            tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
        elif args.tokenizer_name:
            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name)
        else:
            texts = (t for turns in self.data(args)["train"]["turns"] for t in turns)
            tokenizer = train_dialogue_tokenizer(
                texts,
                kind=args.tokenizer_kind,
                min_frequency=args.vocab_min_frequency,
                vocab_size=args.vocab_size,
            )
        self._own_tokens = len(tokenizer)
        self.formatter(args, tokenizer).add_special_tokens(tokenizer)
        return tokenizer

    def formatter(self, args, tokenizer) -> DialogueFormatter:
        return DialogueFormatter(
            tokenizer,
            max_length=args.max_length,
            turn_separator=args.turn_separator,
            global_on=args.global_on,
        )

    def _backbone(self, args, tokenizer) -> dict:
        if args.backbone == "longformer":
            return args.encoder_config(
                len(tokenizer), tokenizer.pad_token_id, args.max_length,
                attention_window=args.attention_windows or args.attention_window,
            )  # fmt: skip
        return args.encoder_config(len(tokenizer), tokenizer.pad_token_id, args.max_length)

    def _heads(self, args) -> dict:
        raise NotImplementedError

    def build_model(self, args, tokenizer):
        from transformers import AutoConfig, LongformerModel

        from ...models.longformer_tasks import block_multiple
        from ...models.longformer_tasks.backbone import backbone_config
        from .configuration_dialogue import LongformerDialogueConfig
        from .modeling_dialogue import LongformerForDialogue

        path = args.model_name_or_path
        saved = self._saved_dialogue_model(path)
        common = {
            "formatter": self.formatter(args, tokenizer).to_dict(),
            "classifier_dropout": args.classifier_dropout,
            "turn_pooling": args.turn_pooling,
            "pad_token_id": tokenizer.pad_token_id,
        }
        if saved:  # its encoder; this task's heads (kept if they fit, else new)
            model = LongformerForDialogue.from_pretrained(
                path, **common, **self._heads(args), ignore_mismatched_sizes=True
            )
            _label_rows_by_name(model, path)
        elif path:
            encoder = AutoConfig.from_pretrained(path)
            if encoder.model_type != "longformer":
                raise ValueError(
                    f"model_name_or_path={path!r} is a {encoder.model_type!r} model; expected a Longformer "
                    "checkpoint (e.g. allenai/longformer-base-4096) or a saved LongformerForDialogue"
                )
            config = LongformerDialogueConfig(backbone=encoder.to_dict(), **common, **self._heads(args))
            model = LongformerForDialogue(config)
            model.backbone = LongformerModel.from_pretrained(path, add_pooling_layer=False)
        else:
            config = LongformerDialogueConfig(
                backbone=self._backbone(args, tokenizer), **common, **self._heads(args)
            )
            model = LongformerForDialogue(config)
            if args.sinusoidal_positions:
                sinusoidal_init(model.backbone.embeddings.position_embeddings.weight)
        rows = model.get_input_embeddings().weight.shape[0]
        if rows != len(tokenizer):
            model.resize_token_embeddings(len(tokenizer))
        # a vocabulary built from the data (or a new model): LoRA trains the whole table; else the rows of the tokens
        # the formatter added (its [TURN] ...) and of any the checkpoint's table lacked, alone
        self._new_embeddings = not saved and not (path and args.tokenizer_name)
        first = min(rows, self._own_tokens if self._own_tokens is not None else rows)
        self._new_token_ids = [] if self._new_embeddings else list(range(first, len(tokenizer)))
        self._pad_multiple = block_multiple(backbone_config(model.config.backbone))
        self._config = model.config
        return model

    def lora_modules_to_save(self, model):
        """The task heads (new, or kept from a saved model) train in full next to the adapters and are saved
        with them, and so do the token embeddings of a new vocabulary (built from the data, or a new model); LoRA
        would otherwise leave them frozen at their initialisation."""
        names = [name for name in _HEADS if getattr(model, name, None) is not None]
        if self._new_embeddings:
            embeddings = model.get_input_embeddings()
            names += [name for name, module in model.named_modules() if module is embeddings]
        return names + (super().lora_modules_to_save(model) or [])

    def lora_trainable_token_indices(self, model):
        """The embedding rows added to a checkpoint's table for the formatter's new tokens (``[TURN]``): LoRA
        trains them alone (the checkpoint's rows stay frozen). None if there are none."""
        return list(self._new_token_ids) or None

    def after_training(self, trainer, args, output_dir):
        """``data``: the dialogues of each split (after ``max_*_dialogues``) and :meth:`_data_extra`;
        ``long_history``: the long-history check (``long_history_check``, with a test split)."""
        counts = {split: len(dialogues) for split, dialogues in self.data(args).items()}
        extras = {"data": {"dialogues": counts, **self._data_extra(trainer)}}
        if args.long_history_check and "test" in self.data(args):
            extras["long_history"] = self.long_history(trainer, args, self.data(args)["test"])
        return extras

    def _data_extra(self, trainer) -> dict:
        return {}

    def long_history(self, trainer, args, dialogues) -> dict:
        raise NotImplementedError

    def examples(self, args, tokenizer, dialogues, split: str):
        """The model inputs of one split's ``dialogues`` (a ``datasets.Dataset``)."""
        raise NotImplementedError

    def build_datasets(self, args, tokenizer):
        """:meth:`examples` of every split; ``ValueError`` naming the split and its file when its dialogues give
        no example (the Trainer would fail later naming neither: "No columns in the dataset match ...")."""
        self._args = args  # evaluate() reads the recipe
        out = {}
        for split, dialogues in self.data(args).items():
            out[split] = self.examples(args, tokenizer, dialogues, split)
            if len(out[split]) == 0:
                path = jsonl_files(args.data_dir, (split,), optional=())[split]
                raise ValueError(
                    f"{split}: {len(dialogues)} dialogues of {path} gave no {self.example_name} example "
                    f"({self.example_rule})"
                )
        return out

    def data_collator(self, args, tokenizer):
        return self.collator_class(tokenizer.pad_token_id, self._pad_multiple)

    def card_info(self, args, metrics):
        name = os.path.basename(os.path.normpath(args.data_dir))  # the folder's name, not its path
        config = self._config  # None for a card written without building the model: the recipe's arguments
        formatter = config.formatter if config is not None else vars(args)  # global_on, max_length
        glob = [_GLOBAL_ON_TEXT[g] for g in GLOBAL_ON_NAMES if g in formatter["global_on"]]
        info = {
            "dataset_name": f"{name} (Schema-Guided Dialogue format)",
            "auto_class": "AutoModel",
            "tags": ["schema-guided-dialogue"],
            "density_length": formatter["max_length"],
            "extra": {
                "backbone": args.backbone if config is None else config.backbone["model_type"],
                "global attention": ", ".join(glob) or "none",
                **self._card_extra(args),
            },
        }
        # the formatter's global tokens (global_on) depend on the input: the card's density counts the windows
        if config is not None:
            info["pattern"] = card_pattern(config.backbone)
        return info

    def _card_extra(self, args) -> dict:
        return {}


def _label_rows_by_name(model, path: str) -> None:
    """The act and intent heads of a saved dialogue model continued on data with other labels: the output row
    (weight and bias) of every label the saved head has is its saved row, found by name; a new label's row is
    newly initialised; labels the data lacks are dropped. ``from_pretrained`` keeps a head's rows by position
    where the number of labels is unchanged, which would give a trained row to another label. Where the head's
    dense layer did not fit (``turn_pooling`` changed), every row is new. The saved rows are read from the
    checkpoint's weights (:func:`_saved_tensors`), without loading the saved model again."""
    from torch import nn
    from transformers import AutoConfig

    saved = AutoConfig.from_pretrained(path)
    changed = [
        (head, list(getattr(saved, key)), list(getattr(model.config, key)))
        for head, key in (("act_classifier", "act_labels"), ("intent_classifier", "intent_labels"))
        if getattr(saved, key) and getattr(model.config, key)
        and list(getattr(saved, key)) != list(getattr(model.config, key))
    ]  # fmt: skip
    if not changed:
        return
    keys = ("dense.weight", "out_proj.weight", "out_proj.bias")
    old = _saved_tensors(path, [f"{head}.{key}" for head, _, _ in changed for key in keys])
    for head, before, now in changed:
        target = getattr(model, head)
        fresh = nn.Linear(target.out_proj.in_features, target.out_proj.out_features)
        model._init_weights(fresh)
        kept = old[f"{head}.dense.weight"].shape == target.dense.weight.shape
        source = {key: old[f"{head}.out_proj.{key}"] for key in ("weight", "bias")}
        with torch.no_grad():
            for j, name in enumerate(now):
                rows, i = (source, before.index(name)) if kept and name in before else (fresh.state_dict(), j)
                target.out_proj.weight[j] = rows["weight"][i]
                target.out_proj.bias[j] = rows["bias"][i]


def _saved_tensors(path: str, names: list[str]) -> dict[str, torch.Tensor]:
    """The tensors ``names`` of a saved model (a folder or a Hub repository), read from its weights as
    ``from_pretrained`` finds them: ``model.safetensors`` or the shards ``model.safetensors.index.json`` lists, else
    ``pytorch_model.bin`` or the shards ``pytorch_model.bin.index.json`` lists (older transformers, ``torch.save``).
    ``OSError`` naming ``path`` and the files looked for where it has none of them."""
    from safetensors import safe_open
    from transformers.utils import (
        SAFE_WEIGHTS_INDEX_NAME,
        SAFE_WEIGHTS_NAME,
        WEIGHTS_INDEX_NAME,
        WEIGHTS_NAME,
        cached_file,
    )

    def read(file: str, wanted: list[str]) -> dict[str, torch.Tensor]:
        if file.endswith(".safetensors"):
            with safe_open(file, framework="pt") as weights:
                return {name: weights.get_tensor(name) for name in wanted}
        weights = torch.load(file, map_location="cpu", weights_only=True)
        return {name: weights[name] for name in wanted}

    looked = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME)
    for single, index in ((SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME), (WEIGHTS_NAME, WEIGHTS_INDEX_NAME)):
        file = cached_file(path, single, _raise_exceptions_for_missing_entries=False)
        if file is not None:
            return read(file, names)
        file = cached_file(path, index, _raise_exceptions_for_missing_entries=False)
        if file is not None:
            with open(file) as f:
                shards = json.load(f)["weight_map"]
            out = {}
            for shard in dict.fromkeys(shards[name] for name in names):
                wanted = [name for name in names if shards[name] == shard]
                out.update(read(cached_file(path, shard), wanted))
            return out
    raise OSError(f"model_name_or_path={path!r} has no saved weights: looked for {', '.join(looked)}")


# --------------------------------------------------------------------------------------- selection


def ranking_scores(scores, labels) -> dict[str, float]:
    """``recall@1``, ``recall@2``, ``recall@5`` and ``mrr`` (pessimistic ties) of ``(n, n_candidates)`` scores."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels).astype(np.int64).reshape(-1)
    out = load_metric("ranking").compute(
        predictions=scores.tolist(), references=labels.tolist(), ks=(1, 2, 5)
    )
    return {"recall@1": out["r@1"], "recall@2": out["r@2"], "recall@5": out["r@5"], "mrr": out["mrr"]}


class DialogueSelectionTask(_DialogueTask):
    """Response selection: rank the true next response among responses of other dialogues."""

    Arguments = SelectionArguments
    #: evaluation and after-training settings a resume may change (see Task.resume_free_arguments)
    resume_free_arguments = (*Task.resume_free_arguments, "n_negatives", "long_history_check")
    trainer_class = _trainer_class(("labels",))
    collator_class = ResponseSelectionCollator
    example_name = "response-selection"
    example_rule = "one per SYSTEM turn after the first turn of a dialogue"

    def _heads(self, args) -> dict:
        return {
            "selection_head": True,
            "act_labels": [],
            "act_thresholds": None,  # a tracking model's tuned thresholds would outlive its act head
            "intent_labels": [],
            "seen_intents": [],
        }

    def examples(self, args, tokenizer, dialogues, split: str, **kwargs):
        """Encoded selection examples (a ``datasets.Dataset``): training ones with ``train_negatives`` (seed
        ``selection_seed + 1``), evaluation ones with ``n_negatives`` (seed ``selection_seed``)."""
        formatter = self.formatter(args, tokenizer)
        if split == "train":
            turns = args.train_response_turns
            kwargs = {"n_negatives": args.train_negatives, "seed": args.selection_seed + 1,
                      "response_turns": int(turns) if turns.isdigit() else turns, **kwargs}  # fmt: skip
        else:
            kwargs = {"n_negatives": args.n_negatives, "seed": args.selection_seed, **kwargs}
        pool = selection_pool(_rows(dialogues.select_columns(["dialogue_id", "speakers", "turns"])[:]))
        key = {**kwargs, "formatter": formatter.to_dict(), "tokenizer": tokenizer_fingerprint(tokenizer),
               "pool": fingerprint(pool)}  # fmt: skip
        return dialogues.map(
            selection_rows, batched=True, batch_size=64, fn_kwargs={"formatter": formatter, "pool": pool, **kwargs},
            remove_columns=dialogues.column_names, num_proc=num_proc_for(self.num_proc, len(dialogues), 100),
            new_fingerprint=fingerprint(dialogues._fingerprint, "selection_rows", key), desc=f"{split} examples",
        )  # fmt: skip

    def compute_metrics(self, args):
        def metrics(pred):
            scores = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
            labels = pred.label_ids[0] if isinstance(pred.label_ids, tuple) else pred.label_ids
            return ranking_scores(scores, labels)

        return metrics

    def long_history(self, trainer, args, dialogues) -> dict:
        result = {"what": f"R@k of {args.n_negatives + 1} candidates for the last response of each dialogue"}
        for name, window in (("full_history", None), ("last_2_turns", 2)):
            examples = self.examples(
                args,
                trainer.processing_class,
                dialogues,
                "test",
                response_turns="last",
                history_window=window,
            )
            out = trainer.predict(examples, metric_key_prefix="long_history")
            result[name] = {**ranking_scores(out.predictions, out.label_ids), "n": len(examples)}
        return result

    def _card_extra(self, args):
        return {"negatives": f"{args.n_negatives} responses of other dialogues (seed {args.selection_seed})"}


# --------------------------------------------------------------------------------------- tracking


def labelled_turns(examples, act_logits, intent_logits, config):
    """The *labelled* turns of tracking examples (the last turn of prefix examples, every turn of whole-dialogue
    examples): ``(true_acts (n, A) bool, act_probs (n, A), gold_intents, predicted_intents)``.

    ``act_logits`` ``(N, T, A)`` and ``intent_logits`` ``(N, T, I)`` are aligned with ``examples`` and their
    kept turns; gold intents are the examples' names, so intents outside the label vocabulary (unseen in
    training) are kept (a closed-set classifier always gets them wrong).
    """
    true_acts, act_probs, gold, pred = [], [], [], []
    for i, example in enumerate(examples):
        for k, t in enumerate(example["turn_index"]):
            if "turn" in example and t != example["turn"]:
                continue
            row = example["act_labels"][k]
            if config.act_labels and row[0] != IGNORE_INDEX:
                true_acts.append(row)
                act_probs.append(1 / (1 + np.exp(-np.asarray(act_logits[i][k], dtype=np.float64))))
            if config.intent_labels and example["intents"][k] is not None:
                gold.append(example["intents"][k])
                pred.append(config.intent_labels[int(np.argmax(intent_logits[i][k]))])
    n_acts = len(config.act_labels)
    true = np.asarray(true_acts, dtype=bool).reshape(-1, n_acts)
    return true, np.asarray(act_probs, dtype=np.float64).reshape(-1, n_acts), gold, pred


def tracking_scores(examples, act_logits, intent_logits, config, thresholds=None) -> dict[str, float]:
    """Act micro/macro F1 (at ``thresholds``, default ``config.thresholds()``) and intent accuracy (all / seen /
    unseen, each only when there are such turns) over the labelled turns of tracking examples (see
    :func:`labelled_turns`)."""
    true, probs, gold, pred = labelled_turns(examples, act_logits, intent_logits, config)
    out = {}
    if len(true):
        limits = np.asarray(config.thresholds() if thresholds is None else thresholds)
        f1 = _act_f1(true, probs >= limits, config.act_labels)
        out.update(act_micro_f1=f1["micro"], act_macro_f1=f1["macro"])
    if gold:
        acc = load_metric("intent_accuracy").compute(
            predictions=pred, references=gold, seen_intents=config.seen_intents
        )
        out.update(intent_accuracy=acc["all"], n_intent_seen=acc["n_seen"], n_intent_unseen=acc["n_unseen"])
        for kind in ("seen", "unseen"):  # no accuracy (rather than NaN) without such turns
            if acc[f"n_{kind}"]:
                out[f"intent_accuracy_{kind}"] = acc[kind]
    return out


def tune_thresholds(true: np.ndarray, probs: np.ndarray, default: float = 0.5) -> list[float]:
    """Per act, the threshold in 0.05, 0.10, ..., 0.95 with the best F1 on ``(true, probs)`` (ties: the one
    closest to ``default``); ``default`` for an act without positives."""
    grid = np.round(np.arange(0.05, 0.951, 0.05), 2)
    out = []
    for j in range(true.shape[1]):
        t = true[:, j]
        if not t.any():
            out.append(default)
            continue
        pred = probs[:, j][None, :] >= grid[:, None]  # (G, n)
        tp = (pred & t).sum(1)
        f1 = 2 * tp / np.maximum(pred.sum(1) + t.sum(), 1)
        best = np.flatnonzero(f1 == f1.max())
        out.append(float(grid[best[np.argmin(np.abs(grid[best] - default))]]))
    return out


def _act_f1(true: np.ndarray, pred: np.ndarray, labels=None) -> dict:
    """The ``dialogue_act_f1`` module on 0/1 matrices ``(turns, acts)``."""
    metric = load_metric("dialogue_act_f1", "multilabel")
    return metric.compute(
        predictions=pred.astype(int).tolist(), references=true.astype(int).tolist(), labels=labels
    )


_EPOCH_SCORES = ("act_micro_f1", "act_macro_f1", "intent_accuracy_seen")  # what _from_labels reports


def _head_logits(predictions, acts: bool, intents: bool) -> tuple:
    """``(act_logits, intent_logits)`` of the Trainer's predictions of a tracking model, None for a head the
    model lacks (the Trainer leaves it out, and unwraps a single array)."""
    logits = iter(predictions if isinstance(predictions, tuple) else (predictions,))
    return (next(logits) if acts else None), (next(logits) if intents else None)


def _from_labels(
    act_logits, intent_logits, act_labels, intent_labels, threshold, seen_ids=None
) -> dict[str, float]:
    """Per-epoch metrics from the Trainer's padded arrays (labelled turns only; unseen intents have no id):
    ``intent_accuracy_seen`` over the turns whose gold id is in ``seen_ids`` (default: every id), none
    without such turns."""
    out = {}
    if act_labels is not None and act_logits is not None:
        rows = act_labels.reshape(-1, act_labels.shape[-1])
        keep = rows[:, 0] != IGNORE_INDEX
        probs = 1 / (1 + np.exp(-act_logits.reshape(-1, act_logits.shape[-1])[keep].astype(np.float64)))
        if keep.any():
            f1 = _act_f1(rows[keep].astype(bool), probs >= threshold)
            out.update(act_micro_f1=f1["micro"], act_macro_f1=f1["macro"])
    if intent_labels is not None and intent_logits is not None:
        gold = intent_labels.reshape(-1)
        keep = gold != IGNORE_INDEX
        if seen_ids is not None:
            keep &= np.isin(gold, list(seen_ids))
        if keep.any():
            pred = intent_logits.reshape(-1, intent_logits.shape[-1])[keep].argmax(-1)
            out["intent_accuracy_seen"] = float((pred == gold[keep]).mean())
    return out


class DialogueTrackingTask(_DialogueTask):
    """Per-turn dialogue acts and active intents of user turns, read from each turn's separator."""

    Arguments = TrackingArguments
    #: evaluation and after-training settings a resume may change (see Task.resume_free_arguments)
    resume_free_arguments = (
        *Task.resume_free_arguments,
        "act_threshold",
        "tune_act_thresholds",
        "long_history_check",
    )
    trainer_class = _trainer_class(("act_labels", "intent_labels"))
    collator_class = DialogueTrackingCollator
    example_name = "dialogue-state-tracking"
    example_rule = "eval_mode: prefix gives one per turn with acts or an intent"

    def __init__(self):
        super().__init__()
        self._vocab: DialogueLabels | None = None

    def labels(self, args) -> DialogueLabels:
        """Act and intent vocabularies of the training dialogues."""
        if self._vocab is None:
            self._vocab = DialogueLabels.from_dialogues(self.data(args)["train"], act_field=args.act_field)
        return self._vocab

    def _heads(self, args) -> dict:
        labels = self.labels(args)
        return {
            "selection_head": False,
            "act_labels": list(labels.acts),
            "intent_labels": list(labels.intents),
            "seen_intents": sorted(labels.seen_intents),
            "act_field": args.act_field,
            "act_threshold": args.act_threshold,
            "act_thresholds": None,  # tuned again on this run's validation split
        }

    def examples(self, args, tokenizer, dialogues, split: str):
        """Training: each whole dialogue followed by its ``train_prefixes`` seeded prefixes (``max_train_samples``
        then keeps the first dialogues with their prefixes); evaluation: ``eval_mode``. A ``datasets.Dataset``."""
        formatter, labels = self.formatter(args, tokenizer), self.labels(args)
        key = {"formatter": formatter.to_dict(), "tokenizer": tokenizer_fingerprint(tokenizer),
               "labels": labels.to_dict()}  # fmt: skip
        run = {"mode": args.eval_mode if split != "train" else "dialogue"}
        if split == "train" and args.train_prefixes:
            run.update(prefixes_per_dialogue=args.train_prefixes, prefix_seed=args.prefix_seed)
        return dialogues.map(
            tracking_rows,
            batched=True,
            batch_size=64,
            remove_columns=dialogues.column_names,
            fn_kwargs={"formatter": formatter, "labels": labels, **run},
            num_proc=num_proc_for(self.num_proc, len(dialogues), 100),
            new_fingerprint=fingerprint(dialogues._fingerprint, "tracking_rows", key, run),
            desc=f"{split} examples",
        )  # fmt: skip

    def compute_metrics(self, args):
        labels = self.labels(args)
        seen = [i for i, name in enumerate(labels.intents) if name in labels.seen_intents]

        def metrics(pred):
            act_logits, intent_logits = _head_logits(
                pred.predictions, bool(labels.acts), bool(labels.intents)
            )
            act_labels, intent_labels = pred.label_ids
            return _from_labels(
                act_logits, intent_logits, act_labels, intent_labels, args.act_threshold, seen
            )

        return metrics

    def evaluate(self, trainer, dataset, split):
        """Loss and per-epoch metrics, plus act F1 and intent accuracy on seen *and unseen* intents scored from
        the examples' gold intent names.

        With ``tune_act_thresholds``, the validation evaluation (which the runner runs before the test one)
        also picks one threshold per act on the validation predictions (:func:`tune_thresholds`) and stores
        them in ``config.act_thresholds``: the test metrics and the saved model use them. ``act_*_f1`` are at
        the model's thresholds when the split is scored, ``act_*_f1_at_default`` at ``act_threshold`` for all.
        """
        prefix = metric_prefix(split)
        out = trainer.predict(dataset, metric_key_prefix=prefix)
        config = _unwrap(trainer.model).config
        # the scores below replace the per-epoch ones (which know no unseen intent) and are left out where they
        # have no turns to score
        metrics = {k: v for k, v in out.metrics.items() if k[len(prefix) + 1 :] not in _EPOCH_SCORES}
        act_logits, intent_logits = _head_logits(
            out.predictions, bool(config.act_labels), bool(config.intent_labels)
        )
        scores = tracking_scores(dataset, act_logits, intent_logits, config)
        default = [config.act_threshold] * len(config.act_labels)
        at_default = tracking_scores(dataset, act_logits, intent_logits, config, default)
        scores.update(
            {f"{k}_at_default": at_default[k] for k in ("act_micro_f1", "act_macro_f1") if k in at_default}
        )
        args = self._args
        if split == "validation" and args.tune_act_thresholds and config.act_labels:
            true, probs, _, _ = labelled_turns(dataset, act_logits, intent_logits, config)
            config.act_thresholds = tune_thresholds(true, probs, config.act_threshold)
            tuned = tracking_scores(dataset, act_logits, intent_logits, config)
            scores.update(act_micro_f1_tuned=tuned["act_micro_f1"], act_macro_f1_tuned=tuned["act_macro_f1"])
        metrics.update({f"{prefix}_{k}": v for k, v in scores.items()})
        return metrics

    def long_history(self, trainer, args, dialogues) -> dict:
        config = _unwrap(trainer.model).config
        result = {"what": "acts and intent of the last user turn of each dialogue"}
        for name, window in (("full_history", None), ("last_2_turns", 2)):
            cut = [c for c in (last_user_turn(d, config.user_speaker, window) for d in dialogues) if c]
            formatter = self.formatter(args, trainer.processing_class)
            examples = build_tracking_examples(cut, formatter, self.labels(args), mode="dialogue")
            for example, dialogue in zip(examples, cut):
                example["turn"] = len(dialogue["turns"]) - 1  # score only the last (user) turn
            from datasets import Dataset

            out = trainer.predict(Dataset.from_list(examples), metric_key_prefix="long_history")
            logits = _head_logits(out.predictions, bool(config.act_labels), bool(config.intent_labels))
            result[name] = {**tracking_scores(examples, *logits, config), "n": len(examples)}
        return result

    def _data_extra(self, trainer):
        config = _unwrap(trainer.model).config
        return {"acts": len(config.act_labels), "intents": len(config.intent_labels)}

    def _card_extra(self, args):
        return {"tracking evaluation": f"eval_mode={args.eval_mode}"}


def _unwrap(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else getattr(model, "module", model)


def last_user_turn(dialogue: dict, user_speaker: str, window: int | None) -> dict | None:
    """The dialogue cut after its last ``user_speaker`` turn, keeping only the last ``window`` turns (None:
    all); every per-turn field is cut alike. None if it has no user turn."""
    users = [t for t, s in enumerate(dialogue["speakers"]) if s == user_speaker]
    if not users:
        return None
    end = users[-1] + 1
    start = 0 if window is None else max(0, end - window)
    n = len(dialogue["turns"])
    return {k: (v[start:end] if isinstance(v, list) and len(v) == n else v) for k, v in dialogue.items()}


def prefixes(dialogues, n: int, seed: int) -> list[dict]:
    """``n`` prefixes of each dialogue of 2+ turns: ``turns[:t+1]`` for seeded random ``t`` before the last turn
    (``random.Random(f"{seed}/{dialogue_id}")``); every per-turn field is cut alike."""
    out = []
    for d, dialogue in enumerate(dialogues):
        length = len(dialogue["turns"])
        if length < 2 or n == 0:
            continue
        rng = random.Random(f"{seed}/{dialogue.get('dialogue_id', d)}")
        for _ in range(n):
            end = rng.randrange(length - 1) + 1
            out.append(
                {k: (v[:end] if isinstance(v, list) and len(v) == length else v) for k, v in dialogue.items()}
            )
    return out


__all__ = [
    "DialogueArguments",
    "DialogueSelectionTask",
    "DialogueTrackingTask",
    "SelectionArguments",
    "TrackingArguments",
    "last_user_turn",
    "prefixes",
    "ranking_scores",
    "load_splits",
    "sinusoidal_init",
    "labelled_turns",
    "tracking_scores",
    "tune_thresholds",
]
