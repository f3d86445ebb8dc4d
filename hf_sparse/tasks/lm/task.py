"""The ``causal-lm`` recipe task: a new SparseTransformerForCausalLM (or a saved one) trained on fixed-length
blocks of real text.

Data: ``data_dir`` holds ``train.jsonl``, ``validation.jsonl`` and (optionally) ``test.jsonl`` whose
``text_field`` (default ``document``) is the text, e.g. ``../shared/data/summarization/scisummnet`` (papers)
or ``.../qmsum`` (meeting transcripts). A word-level tokenizer is trained on the training documents; every
split is tokenized, concatenated and cut into ``block_size``-token blocks. Extra model settings (the
mixture-of-experts feed-forward, other attention options) go in ``model_kwargs``, passed to
:class:`~hf_sparse.SparseTransformerConfig` as they are. A saved model (``model_name_or_path``) keeps its size
and its tokenizer: the size keys must stay unset, and ``model_kwargs`` may change only settings that leave its
weights and their meaning as they are (``SAVED_MODEL_KWARGS``: the router's loss coefficients, its capacity
and jitter, the adaptive span's ``loss_coef``, dropout, the attention pattern and kernel). Metrics: the loss
(cross-entropy per token, plus the router's auxiliary losses when the model has experts) and the perplexity of
the language-model part (``eval_perplexity`` = exp of the token cross-entropy).
"""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass, field, fields
from typing import ClassVar

from ...training import Task, path_field
from ...training.recipe import RecipeError, require_model, require_path
from ...training.tasks import metric_prefix
from ...utils.validation import check_positive_int
from ..arguments import BackboneArguments
from .data import lm_blocks, load_documents, train_word_tokenizer

SPLITS = ("train", "validation", "test")

#: config keys the task sets itself (not ``model_kwargs``): what sets each
TASK_SET_KEYS = {
    "vocab_size": "the tokenizer's vocabulary size",
    "pad_token_id": "the tokenizer's <pad>",
    "bos_token_id": "the tokenizer's <s>",
    "eos_token_id": "the tokenizer's </s>",
    "is_decoder": "always true: a causal LM",
    "type_vocab_size": "0: no token types",
}
#: the backbone keys of a new model; a saved model keeps its own (the value: its config key, where model_kwargs
#: may change it on a saved model)
NEW_MODEL_KEYS = {
    "hidden_size": None,
    "num_hidden_layers": None,
    "num_attention_heads": None,
    "intermediate_size": None,
    "attention_window": None,
    "position_embedding_type": None,
    "attention_pattern": "attention_pattern",
    "attention_backend": "attention_backend",
    "hidden_dropout_prob": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
}
#: the config keys ``model_kwargs`` may change on a saved model, whose learned weights keep their meaning: the
#: router's loss coefficients, capacity and jitter, dropout, the attention pattern and kernels, what the forward
#: returns; of ``adaptive_span``, its ``loss_coef`` (``SAVED_SPAN_KWARGS``: ``max_span`` and ``ramp`` rescale the
#: learned spans). Any other key that differs from the saved config is an error.
SAVED_MODEL_KWARGS = frozenset({
    "router_aux_loss_coef", "router_z_loss_coef", "expert_capacity_factor", "router_jitter_noise",
    "hidden_dropout_prob", "attention_probs_dropout_prob", "attention_pattern", "attention_backend",
    "attention_block_size", "output_router_logits", "adaptive_span",
})  # fmt: skip
SAVED_SPAN_KWARGS = frozenset({"loss_coef"})


@dataclass
class CausalLMArguments(BackboneArguments):
    """Recipe keys of ``causal-lm`` (the shared backbone keys size a new model)."""

    backbones: ClassVar[tuple[str, ...]] = ("sparse_transformer",)

    data_dir: str = path_field(
        help="Folder with train.jsonl, validation.jsonl and (optional) test.jsonl holding text_field; relative "
        "to the recipe file."
    )
    text_field: str = field(default="document", metadata={"help": "The JSON field holding the text."})
    block_size: int = field(default=256, metadata={"help": "Tokens per training example (the context)."})
    backbone: str = field(default="sparse_transformer", metadata={"help": "Only 'sparse_transformer'."})
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "None: a new model from the size keys; else a saved causal-lm model (size keys unset)."
        },
    )
    model_kwargs: dict | None = field(
        default=None,
        metadata={"help": "Extra SparseTransformerConfig keys of a new model, e.g. {num_experts: 4, "
                  "num_experts_per_tok: 1} for a mixture-of-experts feed-forward; of a saved model, settings "
                  "that leave its weights as they are, e.g. {router_aux_loss_coef: 0.02}."},
    )  # fmt: skip
    vocab_min_frequency: int = field(default=3, metadata={"help": "Built tokenizer: minimum word count."})
    vocab_size: int | None = field(default=8000, metadata={"help": "Built tokenizer: vocabulary cap."})
    max_train_documents: int | None = field(
        default=None, metadata={"help": "Use only the first N training documents (quick runs)."}
    )
    max_eval_documents: int | None = field(
        default=None, metadata={"help": "Use only the first N validation and test documents."}
    )
    max_eval_blocks: int | None = field(
        default=None, metadata={"help": "Evaluate on at most N blocks per split (quick runs)."}
    )

    def __post_init__(self):
        super().__post_init__()
        if not self.data_dir:
            raise ValueError("data_dir is required: the folder with train.jsonl / validation.jsonl")
        if not isinstance(self.text_field, str) or not self.text_field:
            raise ValueError(f"text_field must be a non-empty field name, got {self.text_field!r}")
        check_positive_int("block_size", self.block_size)
        check_positive_int("vocab_min_frequency", self.vocab_min_frequency)
        for name in ("vocab_size", "max_train_documents", "max_eval_documents", "max_eval_blocks"):
            check_positive_int(name, getattr(self, name), allow_none=True)
        if self.model_kwargs is not None and not isinstance(self.model_kwargs, dict):
            raise TypeError(f"model_kwargs must be a dict of config keys, got {self.model_kwargs!r}")
        if self.model_kwargs:
            from ...models.sparse_transformer.configuration_sparse_transformer import config_arguments

            known = config_arguments()
            for key in self.model_kwargs:
                if key in TASK_SET_KEYS:
                    raise ValueError(
                        f"model_kwargs: {key!r} is set by the causal-lm task itself ({TASK_SET_KEYS[key]}); "
                        "remove it"
                    )
                if key not in known:
                    close = difflib.get_close_matches(str(key), known, n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise ValueError(f"model_kwargs: {key!r} is not a SparseTransformerConfig argument{hint}")
        if self.model_name_or_path:
            defaults = {f.name: f.default for f in fields(BackboneArguments)}
            for name, config_key in NEW_MODEL_KEYS.items():
                value = getattr(self, name)
                if value == defaults[name]:
                    continue
                instead = (
                    f"put {config_key} in model_kwargs to change it on the saved model"
                    if config_key
                    else "the saved model keeps its own"
                )
                raise ValueError(
                    f"{name}={value!r} is a setting of a new model, but model_name_or_path="
                    f"{self.model_name_or_path!r} loads a saved one: remove {name} ({instead})"
                )
        elif self.model_kwargs:
            # the config's own checks (e.g. num_experts_per_tok <= num_experts) now, not when the model is built
            self._config(vocab_size=8, pad_token_id=0)

    def _config(self, vocab_size: int, pad_token_id: int, bos_token_id=None, eos_token_id=None):
        from ...models import SparseTransformerConfig

        spec = self.encoder_config(
            vocab_size, pad_token_id, self.block_size, is_decoder=True, type_vocab_size=0,
            bos_token_id=bos_token_id, eos_token_id=eos_token_id, **(self.model_kwargs or {}),
        )  # fmt: skip
        spec.pop("model_type")
        try:
            return SparseTransformerConfig(**spec)
        except ValueError as e:
            if "max_position_embeddings" in (self.model_kwargs or {}):
                raise
            # the recipe has no max_position_embeddings: it is block_size
            limit = f"max_position_embeddings={self.block_size}"
            raise ValueError(str(e).replace(limit, f"block_size={self.block_size}")) from e

    def default_pattern(self) -> dict:
        """A causal sliding window of ``attention_window`` keys (self included)."""
        return {"type": "sliding_window", "window": self.attention_window, "causal": True}

    def model_config(self, tokenizer):
        """The :class:`~hf_sparse.SparseTransformerConfig` of a new model for ``tokenizer``."""
        return self._config(
            len(tokenizer), tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id
        )


class CausalLMTask(Task):
    Arguments = CausalLMArguments
    lora_task_type = "CAUSAL_LM"

    def __init__(self):
        self._rows = None
        self._files = None
        self._model_config = None  # the built model's, for the card

    def check_arguments(self, args):
        from ...data.loading import jsonl_files

        require_path("data_dir", args.data_dir, kind="folder")
        jsonl_files(args.data_dir, SPLITS)  # train and validation, .jsonl or .jsonl.gz
        require_model("model_name_or_path", args.model_name_or_path)

    def documents(self, args) -> dict:
        """``{split: datasets.Dataset}`` of the documents (read once). :class:`RecipeError` naming the file
        (and the row) of a file that is not JSON Lines or a row without text."""
        if self._rows is None:
            from ...data.loading import jsonl_files

            self._files = jsonl_files(args.data_dir, SPLITS)
            rows = {}
            for split, path in self._files.items():
                limit = args.max_train_documents if split == "train" else args.max_eval_documents
                try:
                    rows[split] = load_documents(path, args.text_field, limit)
                except ValueError as e:  # the data's own error (load_documents checks nothing else)
                    raise RecipeError(str(e)) from e
            self._rows = rows
        return self._rows

    def build_tokenizer(self, args):
        if args.model_name_or_path:
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(args.model_name_or_path)
        texts = self.documents(args)["train"][args.text_field]
        try:
            return train_word_tokenizer(
                texts, min_frequency=args.vocab_min_frequency, vocab_size=args.vocab_size
            )
        except ValueError as e:  # no word frequent enough (the arguments are checked)
            raise RecipeError(
                f"train split {self._files['train']}: {e} (vocab_min_frequency={args.vocab_min_frequency})"
            ) from e

    def build_model(self, args, tokenizer):
        from ...models.sparse_transformer import SparseTransformerForCausalLM

        if args.model_name_or_path:
            config = _saved_model_config(args)
            model = SparseTransformerForCausalLM.from_pretrained(args.model_name_or_path, config=config)
        else:
            model = SparseTransformerForCausalLM(args.model_config(tokenizer))
        self._model_config = model.config
        return model

    def build_datasets(self, args, tokenizer):
        out = {}
        for split, rows in self.documents(args).items():
            limit = None if split == "train" else args.max_eval_blocks
            source = f"{split} split {self._files[split]}"
            try:
                out[split] = lm_blocks(
                    rows, tokenizer, args.block_size, args.text_field, limit, source=source
                )
            except ValueError as e:  # fewer tokens than one block (the text and the arguments are checked)
                raise RecipeError(f"{e}; lower block_size or give that split more text") from e
        return out

    def data_collator(self, args, tokenizer):
        from transformers import default_data_collator

        return default_data_collator  # every block has block_size tokens: no padding

    def evaluate(self, trainer, dataset, split):
        metrics = trainer.evaluate(dataset, metric_key_prefix=metric_prefix(split))
        metrics.update(lm_metrics(trainer.model, dataset, trainer, metric_prefix(split)))
        return metrics

    def card_info(self, args, metrics):
        name = os.path.basename(os.path.normpath(args.data_dir)) or "text"
        return {
            "dataset_name": f"{name} (field {args.text_field!r})",  # the folder's name: no path in a card
            "training_config": _card_settings(args.block_size, self._model_config),
        }


def _card_settings(block_size: int, config=None) -> dict:
    """The card's training rows of a causal-lm run: ``block_size`` (the context the model was trained on, and
    the length the card's density is computed at) and, from the model's ``config``, its adaptive span and its
    experts (the causal-lm card template describes each where present)."""
    settings = {"block_size": block_size}
    if config is not None and getattr(config, "adaptive_span", None):
        settings["adaptive_span"] = dict(config.adaptive_span)
    if config is not None and getattr(config, "num_experts", 0):
        for key in ("num_experts", "num_experts_per_tok", "router_aux_loss_coef", "router_z_loss_coef"):
            settings[key] = getattr(config, key)
    return settings


def _saved_model_config(args):
    """The config of the saved model ``args.model_name_or_path`` with ``args.model_kwargs`` applied (keys given
    in ``adaptive_span`` replace the saved ones). ``ValueError`` naming the key if a value changes the model's
    weights (their shapes or set: size, experts, positions, an adaptive span added), if a key outside
    ``SAVED_MODEL_KWARGS`` (``SAVED_SPAN_KWARGS`` in ``adaptive_span``) differs from the saved config (what the
    learned weights mean: e.g. ``adaptive_span.max_span`` rescales every learned span), or if ``block_size`` is
    longer than its absolute-position table."""
    from ...models import SparseTransformerConfig

    path = args.model_name_or_path
    saved = SparseTransformerConfig.from_pretrained(path)
    kwargs = dict(args.model_kwargs or {})
    if isinstance(kwargs.get("adaptive_span"), dict) and saved.adaptive_span:
        kwargs["adaptive_span"] = {**saved.adaptive_span, **kwargs["adaptive_span"]}
    config = SparseTransformerConfig.from_dict({**saved.to_dict(), **kwargs})
    if kwargs:
        weights = _weight_shapes(saved)
        for key, value in kwargs.items():
            one = SparseTransformerConfig.from_dict({**saved.to_dict(), key: value})
            if _weight_shapes(one) != weights:
                raise ValueError(
                    f"model_kwargs: {key}={args.model_kwargs[key]!r} would change the weights of the saved model "
                    f"{path} ({key}={getattr(saved, key, None)!r} there); a saved model keeps its size: remove "
                    f"{key}, or train a new model (no model_name_or_path)"
                )
        changed = [
            (key, getattr(saved, key, None), getattr(config, key, None))
            for key in kwargs
            if key not in SAVED_MODEL_KWARGS and getattr(config, key, None) != getattr(saved, key, None)
        ]
        if "adaptive_span" in kwargs and saved.adaptive_span and config.adaptive_span:
            changed += [
                (f"adaptive_span.{key}", saved.adaptive_span.get(key), config.adaptive_span[key])
                for key in kwargs["adaptive_span"]
                if key not in SAVED_SPAN_KWARGS and config.adaptive_span[key] != saved.adaptive_span.get(key)
            ]
        if changed:
            key, was, value = changed[0]
            raise ValueError(
                f"model_kwargs: {key}={value!r} would change what the weights of the saved model {path} mean "
                f"({key}={was!r} there); a saved model may change only {', '.join(sorted(SAVED_MODEL_KWARGS))} "
                f"(of adaptive_span: {', '.join(sorted(SAVED_SPAN_KWARGS))}): remove {key}, or train a new model "
                "(no model_name_or_path)"
            )
    if config.position_embedding_type == "absolute":
        offset = config.pad_token_id + 1 if config.position_ids_style == "roberta" else 0
        limit = config.max_position_embeddings - offset
        if args.block_size > limit:
            raise ValueError(
                f"block_size={args.block_size} is longer than the saved model {path} can read: its absolute "
                f"positions stop at {limit} tokens (max_position_embeddings={config.max_position_embeddings}); "
                f"lower block_size to at most {limit}"
            )
    return config


def _weight_shapes(config) -> dict[str, tuple]:
    """``{name: shape}`` of the weights of a SparseTransformerForCausalLM of ``config`` (built on the meta
    device: no memory, no initialisation): its distinct parameters (a tied LM head is not one of them, an untied
    one is, which the saved model lacks) and buffers."""
    import torch

    from ...models.sparse_transformer import SparseTransformerForCausalLM

    with torch.device("meta"):
        model = SparseTransformerForCausalLM(config)
    return {name: tuple(t.shape) for name, t in [*model.named_parameters(), *model.named_buffers()]}


def lm_metrics(model, dataset, trainer, prefix: str) -> dict[str, float]:
    """``{prefix}_lm_loss`` (token cross-entropy without the router's auxiliary losses) and
    ``{prefix}_perplexity`` = exp(lm_loss), over ``dataset`` in the trainer's evaluation batches. *Collective*
    in a distributed run: each process scores its shard, and the per-block sums are gathered with
    ``trainer.accelerator.gather_for_metrics`` (which drops the blocks the last batch repeats to even out the
    shards), so every process gets the value of one process scoring every block. The model goes back to the
    training mode it was in."""
    import torch

    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for batch in trainer.get_eval_dataloader(dataset):
                batch = {k: v.to(model.device) for k, v in batch.items()}
                out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
                logits, labels = out.logits[:, :-1].float(), batch["labels"][:, 1:]
                loss = torch.nn.functional.cross_entropy(
                    logits.transpose(1, 2), labels, ignore_index=-100, reduction="none"
                )  # (B, T - 1)
                sums, counts = trainer.accelerator.gather_for_metrics(
                    (loss.double().sum(dim=1), (labels != -100).sum(dim=1))
                )  # per block, every process's
                total += float(sums.sum())
                count += int(counts.sum())
    finally:
        model.train(was_training)
    lm_loss = total / max(count, 1)
    return {f"{prefix}_lm_loss": lm_loss, f"{prefix}_perplexity": math.exp(min(lm_loss, 50.0))}


__all__ = ["CausalLMArguments", "CausalLMTask", "lm_metrics"]
