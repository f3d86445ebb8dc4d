"""Long-document summarization fine-tuning tasks on ScisummNet, QMSum, SQuALITY (or any data in their format).

Data: ``data_dir`` holds ``train.jsonl``, ``validation.jsonl`` and (optionally) ``test.jsonl`` with
``document`` and ``summary`` per row, read with ``datasets`` (``hf_sparse.tasks.summarization.data.load_summarization_examples``); rows with
``references`` (SQuALITY's four) are scored against all of them (ROUGE takes the best reference per
example); ``query_mode`` turns QMSum's queries into query-focused examples.

- ``extractive-summarization``: ``LongformerForExtractiveSummarization``. Each document is split into
  sentences (``hf_sparse.tasks.summarization.sentences.split_sentences``), labelled with the greedy ROUGE oracle
  (``hf_sparse.tasks.summarization.metrics.oracle_labels``, ``oracle_sentences`` sentences by ``oracle_metric``) and encoded in
  chunks of whole sentences (every sentence scored). A training example is one document: its chunks share a
  batch, so the listwise loss ranks all of a document's sentences together (``max_train_samples`` counts
  documents); evaluation examples are chunks (``eval_loss`` ranks within a chunk), scored per document.
  Evaluation picks the
  ``eval_max_sentences`` (and/or ``eval_max_words``) best sentences of each document, in document order,
  and reports ROUGE-1/2/L/Lsum against the references.
- ``abstractive-summarization``: ``LEDForSummarization`` (a new tiny LED, a saved one, or any LED checkpoint
  such as ``allenai/led-base-16384``) trained with ``Seq2SeqTrainer``; evaluation generates
  (``predict_with_generate: true``; the model builds its global attention mask inside ``generate``) and
  reports ROUGE. Documents longer than ``max_source_length`` tokens are truncated; how many were is logged
  and recorded (``<split>_truncated_documents``).

``eval_loss`` / ``test_loss`` cover the whole split (any evaluation batch size, any number of processes: the
Trainers' :class:`~hf_sparse.training.split_loss.SplitLossMixin`). ROUGE (the metric and the extractive oracle)
keeps only ``a-z0-9`` as rouge_score does; ``rouge_tokenizer: unicode`` counts the letters and digits of every
script.

Without ``tokenizer_name`` both train a word-level tokenizer on the training documents (and summaries),
with the ``<sent>`` / ``<query_sep>`` markers; nothing is downloaded.
"""

from __future__ import annotations

import logging
import os
from dataclasses import MISSING, dataclass, field, fields
from typing import ClassVar

import numpy as np

from ...data.loading import fingerprint, jsonl_files, num_proc_for, tokenizer_fingerprint
from ...metrics import load as load_metric
from ...models.longformer_tasks.backbone import card_pattern
from ...training import Task, path_field
from ...training.recipe import RecipeError, given_keys, require_model, require_path
from ...training.split_loss import SplitLossMixin
from ...training.tasks import metric_prefix
from ...utils.labels import IGNORE_INDEX
from ...utils.validation import check_positive_int
from ..arguments import BackboneArguments
from .data import (
    QUERY_MODES,
    SENTENCE_FEATURES,
    AbstractiveCollator,
    ExtractiveCollator,
    add_summarization_tokens,
    encode_abstractive,
    encode_extractive,
    load_summarization_examples,
    sentence_features,
    train_summarization_tokenizer,
)
from .metrics import ORACLE_METRICS, oracle_labels, select_in_order
from .rouge import ROUGE_TOKENIZERS, rouge_tokenize
from .sentences import split_sentences

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------- arguments


@dataclass
class SummarizationArguments(BackboneArguments):
    """Recipe keys shared by both summarization tasks."""

    data_dir: str = path_field(
        help="Folder with train.jsonl, validation.jsonl and (optional) test.jsonl: 'document', 'summary' (and "
        "'references', 'summary_query', 'specific_queries'); relative to the recipe file."
    )
    query_mode: str = field(
        default="none",
        metadata={"help": "'none', 'summary_query' (row's summary_query as query) or 'specific' (QMSum's "
                  "query-focused pairs, one example each)."},
    )  # fmt: skip
    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "None: a new model from the size keys. A saved model of this task, or (abstractive) "
                  "any LED checkpoint such as allenai/led-base-16384."},
    )  # fmt: skip
    tokenizer_name: str | None = field(
        default=None,
        metadata={"help": "Pretrained tokenizer; None: a word-level tokenizer trained on the training data."},
    )
    vocab_min_frequency: int = field(default=2, metadata={"help": "Built tokenizer: minimum word count."})
    vocab_size: int | None = field(default=None, metadata={"help": "Built tokenizer: vocabulary cap."})
    intermediate_size: int = field(default=128, metadata={"help": "New model: feed-forward size."})
    max_train_documents: int | None = field(
        default=None, metadata={"help": "Use only the first N training documents (quick runs)."}
    )
    max_eval_documents: int | None = field(
        default=None, metadata={"help": "Use only the first N validation and test documents."}
    )
    rouge_tokenizer: str = field(
        default="default",
        metadata={"help": "ROUGE (metrics and extractive oracle) tokens: 'default' (rouge_score's: a-z0-9 only) "
                  "or 'unicode' (letters and digits of every script; same tokens on ASCII text)."},
    )  # fmt: skip

    def __post_init__(self):
        super().__post_init__()
        if not self.data_dir:
            raise ValueError(
                "data_dir is required: the folder with train.jsonl / validation.jsonl / test.jsonl"
            )
        if self.query_mode not in QUERY_MODES:
            raise ValueError(f"query_mode must be one of {QUERY_MODES}, got {self.query_mode!r}")
        if self.rouge_tokenizer not in ROUGE_TOKENIZERS:
            raise ValueError(
                f"rouge_tokenizer must be one of {ROUGE_TOKENIZERS}, got {self.rouge_tokenizer!r}"
            )
        check_positive_int("vocab_min_frequency", self.vocab_min_frequency)
        for name in ("vocab_size", "max_train_documents", "max_eval_documents"):
            check_positive_int(name, getattr(self, name), allow_none=True)


@dataclass
class ExtractiveArguments(SummarizationArguments):
    """Recipe keys of ``extractive-summarization``."""

    max_length: int = field(
        default=4096, metadata={"help": "Tokens per encoded chunk (the backbone's limit)."}
    )
    max_sentence_tokens: int = field(
        default=24,
        metadata={"help": "Tokens kept per sentence in the encoding (the summary keeps it whole)."},
    )
    sentence_features: list[str] = field(
        default_factory=lambda: list(SENTENCE_FEATURES),
        metadata={
            "help": f"Per-sentence features given to the scoring head (from {list(SENTENCE_FEATURES)})."
        },
    )
    head_hidden_size: int = field(default=64, metadata={"help": "Width of the scoring MLP."})
    loss: str = field(
        default="listwise", metadata={"help": "'listwise' (softmax over each document's sentences) or 'bce'."}
    )
    positive_weight: float = field(
        default=1.0, metadata={"help": "'bce': weight of the oracle sentences' terms."}
    )
    oracle_sentences: int = field(
        default=3, metadata={"help": "Sentences the greedy oracle labels per document."}
    )
    oracle_metric: str = field(
        default="rouge2", metadata={"help": f"Oracle objective: one of {sorted(ORACLE_METRICS)}."}
    )
    eval_max_sentences: int | None = field(
        default=3, metadata={"help": "Evaluation summaries: sentence budget."}
    )
    eval_max_words: int | None = field(default=None, metadata={"help": "Evaluation summaries: word budget."})

    def __post_init__(self):
        super().__post_init__()
        for name in ("max_length", "max_sentence_tokens", "head_hidden_size", "oracle_sentences"):
            check_positive_int(name, getattr(self, name))
        for name in ("eval_max_sentences", "eval_max_words"):
            check_positive_int(name, getattr(self, name), allow_none=True)
        if self.eval_max_sentences is None and self.eval_max_words is None:
            raise ValueError("give eval_max_sentences or eval_max_words (the evaluation summary budget)")
        if self.loss not in ("bce", "listwise"):
            raise ValueError(f"loss must be 'bce' or 'listwise', got {self.loss!r}")
        if self.oracle_metric not in ORACLE_METRICS:
            raise ValueError(
                f"oracle_metric must be one of {sorted(ORACLE_METRICS)}, got {self.oracle_metric!r}"
            )
        bad = [f for f in self.sentence_features if f not in SENTENCE_FEATURES]
        if bad:
            raise ValueError(f"unknown sentence_features {bad}; known: {list(SENTENCE_FEATURES)}")


@dataclass
class AbstractiveArguments(SummarizationArguments):
    """Recipe keys of ``abstractive-summarization``."""

    max_source_length: int = field(
        default=1024, metadata={"help": "Input tokens (documents beyond are truncated, and counted)."}
    )
    max_target_length: int = field(default=128, metadata={"help": "Summary tokens (labels and generation)."})
    min_target_length: int = field(default=0, metadata={"help": "Generation: minimum summary tokens."})
    num_beams: int = field(default=1, metadata={"help": "Generation: beams (saved in generation_config)."})
    no_repeat_ngram_size: int = field(
        default=0, metadata={"help": "Generation: no repeated n-grams of this size."}
    )
    length_penalty: float = field(default=1.0, metadata={"help": "Generation: beam length penalty."})
    decoder_layers: int = field(default=2, metadata={"help": "New model: decoder layers."})
    max_decoder_positions: int = field(default=256, metadata={"help": "New model: decoder position limit."})
    global_attention: list[str] = field(
        default_factory=lambda: ["first"],
        metadata={"help": "Global tokens the model builds: 'first', 'sentences', 'query'."},
    )
    backbones: ClassVar[tuple[str, ...]] = ("led",)
    backbone: str = field(default="led", metadata={"help": "New model: 'led' (an LED encoder-decoder)."})
    attention_dropout: float | None = field(
        default=0.0, metadata={"help": "New model: dropout on the attention probabilities (LED's default 0)."}
    )

    def __post_init__(self):
        super().__post_init__()
        for name in ("max_source_length", "max_target_length", "num_beams", "decoder_layers",
                     "max_decoder_positions"):  # fmt: skip
            check_positive_int(name, getattr(self, name))
        if self.min_target_length < 0 or self.no_repeat_ngram_size < 0:
            raise ValueError("min_target_length and no_repeat_ngram_size must be >= 0")
        if self.min_target_length > self.max_target_length:
            raise ValueError(
                f"min_target_length ({self.min_target_length}) > max_target_length ({self.max_target_length})"
            )
        if self.model_name_or_path is None:  # a loaded model's table is checked by build_model
            check_target_length(self.max_target_length, self.max_decoder_positions, "max_decoder_positions")
        if self.position_embedding_type != "absolute":
            raise ValueError(
                f"position_embedding_type must be 'absolute' for an LED model, got {self.position_embedding_type!r}"
            )
        bad = [g for g in self.global_attention if g not in ("first", "sentences", "query")]
        if bad:
            raise ValueError(f"global_attention entries must be 'first', 'sentences' or 'query', got {bad}")
        if self.query_mode != "none" and "query" not in self.global_attention:
            raise ValueError(f"query_mode={self.query_mode!r} needs 'query' in global_attention")
        if self.attention_pattern is None and self.attention_backend != "auto":  # LED's own attention: unused
            raise ValueError(
                f"attention_backend={self.attention_backend!r} has no effect without attention_pattern: the "
                "encoder then runs LED's own sliding-window attention; give attention_pattern for hf-sparse "
                "kernels, or remove attention_backend"
            )


# --------------------------------------------------------------------------------------- shared


def extractive_documents(
    batch: dict[str, list],
    *,
    tokenizer,
    chunk_length: int,
    sentence_token_id: int,
    query_separator_token_id: int | None,
    max_sentence_tokens: int,
    sentence_feature_names: list[str],
    oracle_sentences: int,
    oracle_metric: str,
    split: str,
    rouge_tokenizer: str = "default",
) -> dict[str, list]:
    """Batched ``map`` over examples: each document split into sentences, labelled with the greedy
    ROUGE oracle and encoded in chunks of whole sentences. Columns: ``sentences``, ``input_ids`` /
    ``labels`` / ``sentence_features`` (one list per chunk), ``sentence_indices`` (per chunk) and
    ``positives`` (oracle sentences)."""
    out: dict[str, list] = {
        "sentences": [],
        "input_ids": [],
        "labels": [],
        "sentence_indices": [],
        "positives": [],
    }
    if sentence_feature_names:
        out["sentence_features"] = []
    for id_, document, references, query in zip(
        batch["id"], batch["document"], batch["references"], batch["query"]
    ):
        sentences = split_sentences(document)
        if not sentences:
            raise ValueError(f"{split} document {id_!r} has no sentences")
        labels = oracle_labels(
            sentences, references, oracle_sentences, oracle_metric, tokenizer=rouge_tokenizer
        )
        feats = sentence_features(sentences, query, sentence_feature_names)
        chunks = encode_extractive(
            tokenizer, sentences, query, max_length=chunk_length, sentence_token_id=sentence_token_id,
            query_separator_token_id=query_separator_token_id, max_sentence_tokens=max_sentence_tokens,
        )  # fmt: skip
        out["sentences"].append(sentences)
        out["input_ids"].append([c.input_ids for c in chunks])
        out["labels"].append([labels[c.sentence_indices].astype(np.float32).tolist() for c in chunks])
        out["sentence_indices"].append([c.sentence_indices for c in chunks])
        out["positives"].append(int(labels.sum()))
        if sentence_feature_names:
            out["sentence_features"].append([feats[c.sentence_indices].tolist() for c in chunks])
    return out


def document_chunks(batch: dict[str, list]) -> dict[str, list]:
    """Batched ``map``: one row per chunk of each document row (same columns, one chunk each)."""
    out: dict[str, list] = {key: [] for key in batch}
    for j in range(len(batch["input_ids"])):
        for c in range(len(batch["input_ids"][j])):
            for key in batch:
                out[key].append(batch[key][j][c])
    return out


#: why text gives no ROUGE token with rouge_score's tokenizer, and what to do
_ROUGE_SCRIPT_HINT = (
    "ROUGE's default tokenizer (rouge_score's, rouge_tokenizer: default) keeps only the letters a-z and the digits "
    "0-9, so text in other scripts (Cyrillic, Greek, Arabic, CJK, ...) has no ROUGE token and scores 0; set "
    "rouge_tokenizer: unicode to count the letters and digits of every script"
)


def check_rouge_references(split: str, path: str, references: list[list[str]], rouge_tokenizer: str) -> None:
    """``ValueError`` naming the split and its file when no reference summary of an evaluated split has a ROUGE
    token: every ROUGE score would be 0, whatever the model wrote."""
    if not any(rouge_tokenize(r, tokenizer=rouge_tokenizer) for refs in references for r in refs):
        hint = _ROUGE_SCRIPT_HINT if rouge_tokenizer == "default" else "they have no letter or digit"
        raise ValueError(f"{split}: no reference summary of {path} has a ROUGE token: {hint}")


#: for the card: the kernels make the tokens the model marks in ``global_attention_mask`` (the first token, the sentence
#: markers, the query) global, as Longformer's attention does
_MARKED_GLOBAL = {"type": "global"}


class _SummarizationTask(Task):
    model_type = ""
    count_metrics = (*Task.count_metrics, "truncated_documents")

    def __init__(self):
        self._rows: dict[str, list[dict]] | None = None
        self.references: dict[str, list[list[str]]] = {}
        self.metric_split = "validation"
        self.truncated: dict[str, int] = {}
        self._config = None  # the model's config (build_model)

    def check_arguments(self, args):
        require_path("data_dir", args.data_dir, kind="folder")
        jsonl_files(args.data_dir)  # train and validation, each .jsonl or .jsonl.gz: else FileNotFoundError
        require_model("model_name_or_path", args.model_name_or_path)
        require_model("tokenizer_name", args.tokenizer_name)

    def data(self, args) -> dict:
        """The examples of each split (``datasets.Dataset``, read once): the first
        ``max_train_documents`` / ``max_eval_documents`` rows, expanded by ``query_mode``. ``ValueError``
        naming the split and its file when its rows give no example (``query_mode: specific`` with every
        ``specific_queries`` list empty)."""
        if self._rows is None:
            rows = {}
            for split, path in jsonl_files(args.data_dir).items():
                key = "max_train_documents" if split == "train" else "max_eval_documents"
                limit = getattr(args, key)
                rows[split] = load_summarization_examples(path, args.query_mode, limit)
                # only 'specific' expands a row to no example (load_jsonl refuses an empty file)
                if len(rows[split]) == 0:
                    which = "rows" if limit is None else f"first {limit} rows ({key})"
                    raise ValueError(
                        f"{split}: the {which} of {path} gave no example: query_mode='specific' makes one per item "
                        "of a row's 'specific_queries', and every list is empty"
                    )
            self._rows = rows
        return self._rows

    def _saved(self, path: str | None) -> bool:
        if not path:
            return False
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(path).model_type == self.model_type

    def _uses(self, args) -> tuple[bool, bool]:
        """(sentence markers, query separator) this task's model needs."""
        raise NotImplementedError

    def build_tokenizer(self, args):
        from transformers import AutoTokenizer

        if self._saved(args.model_name_or_path):
            return AutoTokenizer.from_pretrained(args.model_name_or_path)
        if args.tokenizer_name:
            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name)
        else:
            train = self.data(args)["train"]
            texts = list(train["document"]) + list(train["summary"])
            texts += [q for q in train["query"] if q]
            tokenizer = train_summarization_tokenizer(
                texts, min_frequency=args.vocab_min_frequency, vocab_size=args.vocab_size
            )
        sentences, query = self._uses(args)
        add_summarization_tokens(tokenizer, sentences, query)
        return tokenizer

    def evaluate(self, trainer, dataset, split):
        self.metric_split = split
        try:
            out = trainer.predict(dataset, metric_key_prefix=metric_prefix(split))
        finally:
            self.metric_split = "validation"
        metrics = dict(out.metrics)
        if split in self.truncated:
            metrics[f"{metric_prefix(split)}_truncated_documents"] = self.truncated[split]
        return metrics

    def card_info(self, args, metrics):
        name = os.path.basename(os.path.normpath(args.data_dir)) or "summarization data"
        # the folder's name, not its path (the card is public); each metric's prefix gives its split
        return {"dataset_name": name}


# --------------------------------------------------------------------------------------- extractive


def _extractive_trainer_class():
    from transformers import Trainer

    from .modeling_summarization import sentence_loss_terms

    class ExtractiveTrainer(SplitLossMixin, Trainer):
        """``Trainer`` whose ``eval_loss`` is the mean over the split's chunks with an oracle sentence (``bce``:
        over its sentences) of the sentence-ranking loss, however the chunks are batched (see
        :class:`~hf_sparse.training.split_loss.SplitLossMixin`)."""

        gather_predictions_for_metrics = True

        def split_loss_terms(self, outputs, inputs):
            labels = inputs.get("labels")
            if labels is None:
                return {}
            cfg = self.model.config
            terms = sentence_loss_terms(
                outputs["logits"], labels, loss=cfg.loss, positive_weight=cfg.positive_weight,
                document_index=inputs.get("document_index"),
            )  # fmt: skip
            return {"labels": terms}

    return ExtractiveTrainer


# The scorer's settings in an extractive model's config: a saved model keeps its own where the recipe does not state
# them (:func:`_given_head_settings`); the first two shape the scorer's weights.
_HEAD_SETTINGS = ("sentence_features", "head_hidden_size", "classifier_dropout", "loss", "positive_weight",
                  "max_sentence_tokens")  # fmt: skip
_HEAD_SHAPES = ("sentence_features", "head_hidden_size")


def _given_head_settings(args, path: str) -> dict:
    """The scorer settings the recipe sets for the saved extractive model at ``path``: they replace the saved ones.
    A setting is set where the recipe or an override states it (:func:`~hf_sparse.training.recipe.given_keys`), even
    at its default value; for arguments built in Python, where it differs from its default. ``ValueError`` naming
    the key where one would change the shape of the saved scorer's weights (``sentence_features``,
    ``head_hidden_size``)."""
    from transformers import AutoConfig

    stated = given_keys(args)
    if stated is None:
        defaults = {
            f.name: f.default if f.default is not MISSING else f.default_factory()
            for f in fields(ExtractiveArguments)
        }
        stated = {key for key in _HEAD_SETTINGS if getattr(args, key) != defaults[key]}
    given = {key: getattr(args, key) for key in _HEAD_SETTINGS if key in stated}
    if "sentence_features" in given:
        given["sentence_features"] = list(given["sentence_features"])
    config = AutoConfig.from_pretrained(path)
    for key in _HEAD_SHAPES:
        before = getattr(config, key)
        before = list(before) if key == "sentence_features" else before
        if key in given and given[key] != before:
            raise ValueError(
                f"{key}={given[key]!r} is a setting of a new scorer, but model_name_or_path={path!r} loads a saved "
                f"one with {key}={before!r}: remove {key} (or set it to the saved value) to keep the saved scorer"
            )
    return given


class ExtractiveSummarizationTask(_SummarizationTask):
    """Sentence scoring with ``LongformerForExtractiveSummarization`` on greedy ROUGE-oracle labels."""

    Arguments = ExtractiveArguments
    trainer_class = _extractive_trainer_class()
    lora_task_type = None
    model_type = "longformer_extractive_summarization"

    def __init__(self):
        super().__init__()
        self.documents: dict[str, list[list[str]]] = {}  # split -> sentences of each document
        self.chunks: dict[str, list[tuple[int, list[int]]]] = {}  # split -> (document, sentence indices)
        self._pad_multiple: int | None = None
        self._new_embeddings = False  # build_model: the token embeddings are new (see lora_modules_to_save)

    def _uses(self, args):
        return True, args.query_mode != "none"

    def _backbone(self, args, tokenizer) -> dict:
        config = args.encoder_config(len(tokenizer), tokenizer.pad_token_id, args.max_length)
        if config["model_type"] == "sparse_transformer":
            config["global_projections"] = True
        return config

    def build_model(self, args, tokenizer):
        from transformers import AutoConfig, AutoModel

        from ...models.longformer_tasks import block_multiple
        from ...models.longformer_tasks.backbone import BACKBONES, backbone_config
        from .configuration_summarization import LongformerExtractiveSummarizationConfig
        from .modeling_summarization import LongformerForExtractiveSummarization

        path = args.model_name_or_path
        ids = add_summarization_tokens(tokenizer, True, args.query_mode != "none")
        markers = {key: ids[key] for key in ("sentence_token_id", "query_separator_token_id")}
        common = {**markers, **{key: getattr(args, key) for key in _HEAD_SETTINGS}}
        common["sentence_features"] = list(args.sentence_features)
        saved = self._saved(path)
        if saved:  # it keeps its own scorer settings, but those the recipe sets
            given = _given_head_settings(args, path)
            model = LongformerForExtractiveSummarization.from_pretrained(path, **markers, **given)
        elif path:
            encoder = AutoConfig.from_pretrained(path)
            if encoder.model_type not in BACKBONES:
                raise ValueError(
                    f"model_name_or_path={path!r} is a {encoder.model_type!r} model; expected a Longformer or "
                    "SparseTransformer encoder, or a saved LongformerForExtractiveSummarization"
                )
            config = LongformerExtractiveSummarizationConfig(backbone=encoder.to_dict(), **common)
            model = LongformerForExtractiveSummarization(config)
            encoder_model = AutoModel.from_pretrained(path)
            model.backbone.load_state_dict(encoder_model.state_dict(), strict=False)
        else:
            config = LongformerExtractiveSummarizationConfig(
                backbone=self._backbone(args, tokenizer), max_chunk_length=args.max_length, **common
            )
            model = LongformerForExtractiveSummarization(config)
        resized = model.get_input_embeddings().weight.shape[0] < len(tokenizer)
        if resized:
            model.resize_token_embeddings(len(tokenizer))
        # new rows (the markers), or a vocabulary built from the data (or a new model): LoRA trains them in full
        self._new_embeddings = resized or (not saved and not (path and args.tokenizer_name))
        self._pad_multiple = block_multiple(backbone_config(model.config.backbone))
        self._chunk_length = model.config.chunk_length
        self._config = model.config
        return model

    def build_datasets(self, args, tokenizer):
        cfg = self._config
        out = {}
        for split, examples in self.data(args).items():
            kwargs = {"tokenizer": tokenizer, "chunk_length": self._chunk_length,
                      "sentence_token_id": cfg.sentence_token_id,
                      "query_separator_token_id": cfg.query_separator_token_id,
                      "max_sentence_tokens": cfg.max_sentence_tokens,
                      "sentence_feature_names": list(cfg.sentence_features),
                      "oracle_sentences": args.oracle_sentences, "oracle_metric": args.oracle_metric,
                      "split": split, "rouge_tokenizer": args.rouge_tokenizer}  # fmt: skip
            key = {**kwargs, "tokenizer": tokenizer_fingerprint(tokenizer)}
            docs = examples.map(
                extractive_documents, batched=True, batch_size=16, fn_kwargs=kwargs,
                remove_columns=examples.column_names, num_proc=num_proc_for(self.num_proc, len(examples), 50),
                new_fingerprint=fingerprint(examples._fingerprint, "extractive_documents", key),
                desc=f"{split} oracle labels and chunks",
            )  # fmt: skip
            indices = list(docs["sentence_indices"])
            chunks = [(d, idx) for d, per_doc in enumerate(indices) for idx in per_doc]
            positives = sum(docs["positives"])
            logger.info(
                "%s: %d documents, %d chunks, %d oracle sentences", split, len(docs), len(chunks), positives
            )  # fmt: skip
            path = jsonl_files(args.data_dir)[split]
            if split == "train" and positives == 0:
                hint = f"; {_ROUGE_SCRIPT_HINT}" if args.rouge_tokenizer == "default" else ""
                raise ValueError(
                    f"train: the greedy ROUGE oracle (oracle_metric={args.oracle_metric}) selected no sentence of the "
                    f"{len(docs)} documents of {path}, so there is nothing to train on: it selects the sentences "
                    f"whose n-grams raise their ROUGE against the reference summaries, and none does{hint}"
                )
            if split != "train":
                check_rouge_references(split, path, list(examples["references"]), args.rouge_tokenizer)
            self.documents[split], self.chunks[split] = list(docs["sentences"]), chunks
            self.references[split] = list(examples["references"])
            items = docs.select_columns(
                [c for c in ("input_ids", "labels", "sentence_features") if c in docs.column_names]
            )
            if split != "train":  # one example per chunk (evaluation gathers predictions per example)
                items = items.map(
                    document_chunks, batched=True, new_fingerprint=fingerprint(items._fingerprint, "document_chunks"),
                    desc=f"{split} chunks",
                )  # fmt: skip
            out[split] = items  # train: one example per document, its chunks ranked together
        return out

    def limit_samples(self, split, dataset, n):
        """``max_eval_samples``/``max_test_samples`` count documents: an evaluation split holds one row per
        chunk, and a document's summary needs all of its chunks (training rows are whole documents)."""
        if split == "train" or n is None or n >= len(self.documents[split]):
            return super().limit_samples(split, dataset, n)
        self.chunks[split] = [chunk for chunk in self.chunks[split] if chunk[0] < n]  # in document order
        self.documents[split] = self.documents[split][:n]
        self.references[split] = self.references[split][:n]
        return dataset.select(range(len(self.chunks[split])))

    def data_collator(self, args, tokenizer):
        return ExtractiveCollator(tokenizer.pad_token_id, self._pad_multiple)

    def lora_modules_to_save(self, model):
        """The sentence scorer (new, or kept from a saved model) trains in full next to the adapters and is saved
        with them, and so do the token embeddings when they are new: a vocabulary built from the data, a new model,
        or rows added for the marker tokens. LoRA would otherwise leave them frozen at their initialisation."""
        names = ["scorer"]
        if self._new_embeddings:
            embeddings = model.get_input_embeddings()
            names += [name for name, module in model.named_modules() if module is embeddings]
        return names + (super().lora_modules_to_save(model) or [])

    def document_scores(self, split: str, logits) -> list[np.ndarray]:
        """Per-document sentence scores from per-chunk logits (in the split's chunk order)."""
        logits = logits[0] if isinstance(logits, tuple) else logits
        docs = self.documents[split]
        scores = [np.zeros(len(s)) for s in docs]
        for row, (d, idx) in zip(np.asarray(logits), self.chunks[split]):
            scores[d][idx] = row[: len(idx)]
        return scores

    def summaries(self, split: str, logits, args) -> list[str]:
        out = []
        for sentences, scores in zip(self.documents[split], self.document_scores(split, logits)):
            picked = select_in_order(scores, sentences, args.eval_max_sentences, args.eval_max_words)
            out.append(" ".join(" ".join(s.split()) for s in picked))
        return out

    def compute_metrics(self, args):
        def metrics(pred):
            split = self.metric_split
            n_chunks = len(
                np.asarray(pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions)
            )
            if n_chunks != len(self.chunks[split]):
                raise ValueError(
                    f"{split}: {n_chunks} of {len(self.chunks[split])} chunks were evaluated; every chunk of a "
                    "document is needed for its summary"
                )
            predictions = self.summaries(split, pred.predictions, args)
            return load_metric("rouge").compute(
                predictions=predictions, references=self.references[split], tokenizer=args.rouge_tokenizer
            )

        return metrics

    def card_info(self, args, metrics):
        info = super().card_info(args, metrics)
        budget = (
            f"{args.eval_max_sentences} sentences"
            if args.eval_max_sentences
            else f"{args.eval_max_words} words"
        )
        info.update(
            auto_class="AutoModel",
            tags=["extractive-summarization"],
            extra={
                "description": (
                    "An extractive summarizer: a long encoder reads the whole document with a marker token "
                    "before every sentence (global attention on the markers), scores each sentence, and the "
                    "summary is the best sentences in document order within a budget. Trained on greedy "
                    f"ROUGE-oracle labels ({args.oracle_sentences} sentences by {args.oracle_metric})."
                ),
                "evaluation budget": budget,
                "sentence features": ", ".join(args.sentence_features) or "none",
            },
        )
        # the encoder's attention and global tokens (the runner's card reads config.attention_pattern: none here)
        if self._config is not None:
            info["pattern"] = card_pattern(self._config.backbone, _MARKED_GLOBAL)
            info["extra"]["global attention"] = ", ".join(self._config.global_attention)
        return info


# --------------------------------------------------------------------------------------- abstractive


def abstractive_example(
    example: dict,
    *,
    tokenizer,
    max_length: int,
    max_target_length: int,
    sentence_token_id: int | None,
    query_separator_token_id: int | None,
) -> dict:
    """``map``: ``input_ids`` / ``attention_mask`` of the document (and query, :func:`encode_abstractive`),
    ``labels`` (the summary, at most ``max_target_length`` tokens) and ``truncated``."""
    enc = encode_abstractive(
        tokenizer, example["document"], example["query"], max_length=max_length,
        sentence_token_id=sentence_token_id, query_separator_token_id=query_separator_token_id,
    )  # fmt: skip
    labels = tokenizer(
        example["summary"], max_length=max_target_length, truncation=True, split_special_tokens=True
    )["input_ids"]  # a literal "</s>" in a summary is text, not an end of sequence
    return {"input_ids": enc["input_ids"], "attention_mask": [1] * len(enc["input_ids"]), "labels": labels,
            "truncated": enc["truncated"]}  # fmt: skip


def check_target_length(max_target_length: int, table: int, where: str) -> None:
    """Summaries (labels) of ``max_target_length`` tokens fit the decoder's position table of ``table`` positions
    (``where`` names its key); past it LED's decoder raised a bare ``IndexError`` in the first long batch."""
    if max_target_length > table:
        raise ValueError(
            f"max_target_length={max_target_length} is longer than the decoder's position table ({where}={table}): "
            f"the summaries would run past it; set max_target_length <= {table}"
        )


def check_generation_arguments(training_args, config) -> None:
    """The evaluations' generation settings (``predict_with_generate``, ``generation_num_beams``,
    ``generation_max_length`` against the decoder's position table ``config.max_decoder_position_embeddings``),
    checked before training: otherwise they fail when the first evaluation generates, after the training."""
    if not training_args.predict_with_generate:
        raise RecipeError(
            "predict_with_generate=False: abstractive-summarization evaluates generated summaries (ROUGE); set "
            "predict_with_generate: true"
        )
    beams = training_args.generation_num_beams
    if beams is not None and (isinstance(beams, bool) or beams < 1):
        raise RecipeError(
            f"generation_num_beams={beams!r} must be a positive int (or null: the recipe's num_beams)"
        )
    length, table = training_args.generation_max_length, config.max_decoder_position_embeddings
    if length is not None and (isinstance(length, bool) or length < 1):
        raise RecipeError(
            f"generation_max_length={length!r} must be a positive int (or null: the recipe's max_target_length)"
        )
    if length is not None and length > table + 1:  # the decoder start token and `table` generated tokens
        raise RecipeError(
            f"generation_max_length={length} runs the decoder past its position table of {table} positions "
            f"(max_decoder_positions, or a loaded model's max_decoder_position_embeddings): set "
            f"generation_max_length <= {table + 1} (the decoder start token and {table} generated tokens)"
        )


def _seq2seq_classes():
    import torch
    from torch.nn import functional as F
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments
    from transformers.models.led.modeling_led import shift_tokens_right

    class AbstractiveTrainer(SplitLossMixin, Seq2SeqTrainer):
        """``Seq2SeqTrainer`` that checks the evaluations' generation settings before anything trains
        (:func:`check_generation_arguments`), gathers the generated summaries of a distributed evaluation
        without the repeats of its last step, and reports ``eval_loss`` as the summary tokens' mean
        cross-entropy over the whole split (see :class:`~hf_sparse.training.split_loss.SplitLossMixin`)."""

        gather_predictions_for_metrics = True

        def __init__(self, model=None, args=None, *rest, **kwargs):
            if args is not None and model is not None:
                check_generation_arguments(args, model.config)
            super().__init__(model, args, *rest, **kwargs)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            # with label_smoothing_factor the Trainer pops the labels before the forward, and LED would then shift
            # the encoder's input_ids into its decoder (past its positions): hand it the labels' shift instead
            if self.label_smoother is not None and "labels" in inputs and "decoder_input_ids" not in inputs:
                config = self.accelerator.unwrap_model(model).config
                shifted = shift_tokens_right(
                    inputs["labels"], config.pad_token_id, config.decoder_start_token_id
                )
                inputs = {**inputs, "decoder_input_ids": shifted}
            return super().compute_loss(
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )

        def split_loss_terms(self, outputs, inputs):
            labels = inputs.get("labels")
            if labels is None:
                return {}
            per_token = F.cross_entropy(
                outputs["logits"].float().transpose(1, 2),
                labels,
                ignore_index=IGNORE_INDEX,
                reduction="none",
                label_smoothing=self.args.label_smoothing_factor,
            )  # (B, T): 0 at padding
            return {"labels": (per_token.sum(-1), (labels != IGNORE_INDEX).sum(-1))}

        def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
            if prediction_loss_only or not self.args.predict_with_generate or "labels" not in inputs:
                return super().prediction_step(
                    model, inputs, prediction_loss_only, ignore_keys=ignore_keys, **gen_kwargs
                )  # the loss through compute_loss
            # the summaries (Seq2SeqTrainer's step without labels), then the loss through compute_loss (which
            # adds each example's terms; Seq2SeqTrainer's step calls the model itself)
            rest = {k: v for k, v in inputs.items() if k != "labels"}
            _, generated, _ = super().prediction_step(
                model, rest, False, ignore_keys=ignore_keys, **gen_kwargs
            )
            inputs = self._prepare_inputs(inputs)
            labels = inputs["labels"]
            with torch.no_grad(), self.compute_loss_context_manager():
                loss = self.compute_loss(model, inputs)
            return loss.detach().mean(), generated, labels

    return AbstractiveTrainer, Seq2SeqTrainingArguments


class AbstractiveSummarizationTask(_SummarizationTask):
    """Abstractive summarization with ``LEDForSummarization`` (generation-based ROUGE evaluation)."""

    Arguments = AbstractiveArguments
    trainer_class, training_arguments_class = _seq2seq_classes()
    lora_task_type = "SEQ_2_SEQ_LM"
    #: generation and ROUGE settings a resume may change (see Task.resume_free_arguments): they decide what the
    #: evaluations generate and score, not what trains (extractive's rouge_tokenizer labels its oracle: fixed)
    resume_free_arguments = (
        *Task.resume_free_arguments,
        "min_target_length",
        "num_beams",
        "no_repeat_ngram_size",
        "length_penalty",
        "rouge_tokenizer",
    )
    model_type = "led_summarization"

    def __init__(self):
        super().__init__()
        self._truncated_rows: dict[str, list[bool]] = {}  # split -> whether each example was truncated
        self._new_token_ids: list[int] = []  # build_model: rows no checkpoint trained (LoRA trains them)

    def _uses(self, args):
        return "sentences" in args.global_attention, "query" in args.global_attention

    def build_model(self, args, tokenizer):
        from transformers import AutoConfig

        from .configuration_summarization import LEDSummarizationConfig
        from .modeling_summarization import LEDForSummarization

        path = args.model_name_or_path
        ids = add_summarization_tokens(tokenizer, *self._uses(args))
        markers = {i for i in ids.values() if i is not None}
        saved = self._saved(path)
        if saved:  # the recipe's pattern and backend, when given, replace the saved ones
            given = {"encoder_attention_pattern": args.attention_pattern} if args.attention_pattern else {}
            if args.attention_pattern:
                given["encoder_attention_backend"] = args.attention_backend
            model = LEDForSummarization.from_pretrained(path, **given)
            cfg = model.config
            markers -= {cfg.sentence_token_id, cfg.query_separator_token_id}  # trained in that model
        elif path:
            kind = AutoConfig.from_pretrained(path).model_type
            if kind != "led":
                raise ValueError(
                    f"model_name_or_path={path!r} is a {kind!r} model; expected an LED checkpoint"
                )
            model = LEDForSummarization.from_led(
                path, tokenizer=tokenizer, global_attention=args.global_attention,
                encoder_attention_pattern=args.attention_pattern, encoder_attention_backend=args.attention_backend,
            )  # fmt: skip
        else:
            config = LEDSummarizationConfig(
                vocab_size=len(tokenizer), d_model=args.hidden_size, encoder_layers=args.num_hidden_layers,
                decoder_layers=args.decoder_layers, encoder_attention_heads=args.num_attention_heads,
                decoder_attention_heads=args.num_attention_heads, encoder_ffn_dim=args.intermediate_size,
                decoder_ffn_dim=args.intermediate_size, attention_window=args.attention_window,
                max_encoder_position_embeddings=args.max_source_length,
                max_decoder_position_embeddings=args.max_decoder_positions, dropout=args.hidden_dropout_prob,
                attention_dropout=args.attention_dropout_prob, encoder_attention_backend=args.attention_backend,
                pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.eos_token_id,
                global_attention=args.global_attention, **ids,
                encoder_attention_pattern=args.attention_pattern,
            )  # fmt: skip
            model = LEDForSummarization(config)
        if path:  # a new model's table (max_decoder_positions) was checked with the recipe
            check_target_length(
                args.max_target_length, model.config.max_decoder_position_embeddings,
                f"{path}'s max_decoder_position_embeddings",
            )  # fmt: skip
        rows = model.get_input_embeddings().weight.shape[0]
        if rows < len(tokenizer):
            model.resize_token_embeddings(len(tokenizer))
        # the rows no checkpoint trained: every row of a vocabulary built from the data (or of a new model), else
        # the markers a loaded checkpoint lacks (from_led added them) and rows added for new tokens
        if not saved and not (path and args.tokenizer_name):
            markers, rows = set(), 0
        self._new_token_ids = sorted(markers | set(range(rows, len(tokenizer))))
        gen = model.generation_config
        gen.max_length = args.max_target_length
        gen.min_length = args.min_target_length
        gen.num_beams = args.num_beams
        gen.no_repeat_ngram_size = args.no_repeat_ngram_size
        gen.length_penalty = args.length_penalty
        gen.pad_token_id, gen.eos_token_id = model.config.pad_token_id, model.config.eos_token_id
        gen.decoder_start_token_id = model.config.decoder_start_token_id
        gen.bos_token_id = model.config.bos_token_id
        self._config = model.config
        return model

    def lora_trainable_token_indices(self, model):
        """The embedding rows no checkpoint trained (:meth:`build_model`): the ``<sent>`` / ``<query_sep>`` rows
        that ``from_led`` adds to an LED checkpoint, or every row of a vocabulary built from the data. LoRA left
        them at their initial values; ``lora_modules_to_save`` cannot train them, because LED's encoder and
        decoder embeddings and its output layer share one weight (``led.shared``), which peft's trainable tokens
        keep tied. None if there are none."""
        return list(self._new_token_ids) or None

    def build_datasets(self, args, tokenizer):
        cfg = self._config
        limit = min(args.max_source_length, cfg.max_encoder_position_embeddings)
        out = {}
        for split, examples in self.data(args).items():
            kwargs = {"tokenizer": tokenizer, "max_length": limit, "max_target_length": args.max_target_length,
                      "sentence_token_id": cfg.sentence_token_id if "sentences" in cfg.global_attention else None,
                      "query_separator_token_id": cfg.query_separator_token_id}  # fmt: skip
            key = {**kwargs, "tokenizer": tokenizer_fingerprint(tokenizer)}
            items = examples.map(
                abstractive_example, fn_kwargs=kwargs, remove_columns=examples.column_names,
                num_proc=num_proc_for(self.num_proc, len(examples), 50),
                new_fingerprint=fingerprint(examples._fingerprint, "abstractive_example", key),
                desc=f"tokenizing {split}",
            )  # fmt: skip
            truncated = int(sum(items["truncated"]))
            if truncated:
                logger.warning(
                    "%s: %d of %d documents are longer than max_source_length=%d tokens and were truncated",
                    split, truncated, len(examples), limit,
                )  # fmt: skip
            self._truncated_rows[split] = list(items["truncated"])
            self.truncated[split] = truncated
            self.references[split] = list(examples["references"])
            if split != "train":
                path = jsonl_files(args.data_dir)[split]
                check_rouge_references(split, path, self.references[split], args.rouge_tokenizer)
            out[split] = items.remove_columns("truncated")
        return out

    def limit_samples(self, split, dataset, n):
        """The first ``n`` examples; ``<split>_truncated_documents`` counts the truncated ones among them."""
        dataset = super().limit_samples(split, dataset, n)
        self.truncated[split] = int(sum(self._truncated_rows[split][: len(dataset)]))
        self.references[split] = self.references[split][: len(dataset)]
        return dataset

    def data_collator(self, args, tokenizer):
        """Encoder inputs padded to a multiple of the attention window, labels to the batch's longest summary."""
        multiple = (
            None if self._config.encoder_attention_pattern is not None else max(self._config.attention_window)
        )
        return AbstractiveCollator(tokenizer.pad_token_id, multiple)

    def compute_metrics(self, args):
        def metrics(pred):
            preds = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
            preds = np.asarray(preds)
            if preds.ndim != 2:
                raise ValueError(
                    "abstractive-summarization evaluates generated summaries: set predict_with_generate: true"
                )
            preds = np.where(preds < 0, self._tokenizer.pad_token_id, preds)
            texts = [t.strip() for t in self._tokenizer.batch_decode(preds, skip_special_tokens=True)]
            refs = self.references[self.metric_split]
            if len(texts) != len(refs):
                raise ValueError(
                    f"{self.metric_split}: {len(texts)} summaries were generated for {len(refs)} documents; every "
                    "document needs exactly one"
                )
            result = load_metric("rouge").compute(
                predictions=[t if t else "" for t in texts], references=refs, tokenizer=args.rouge_tokenizer
            )
            result["gen_len"] = float(
                np.mean([np.count_nonzero(p != self._tokenizer.pad_token_id) for p in preds])
            )
            return result

        return metrics

    def build_tokenizer(self, args):
        self._tokenizer = super().build_tokenizer(args)
        return self._tokenizer

    def card_info(self, args, metrics):
        info = super().card_info(args, metrics)  # base_model: the runner's (model_name_or_path if a Hub id)
        info["extra"] = {
            "global attention": ", ".join(args.global_attention),
            "encoder attention": "LED (Longformer)"
            if args.attention_pattern is None
            else "hf-sparse kernels",
            "max_source_length": args.max_source_length,
        }
        # the encoder's attention (the runner's card reads config.attention_pattern: none here)
        if self._config is not None:
            cfg = self._config
            encoder = {
                "attention_pattern": cfg.encoder_attention_pattern,
                "attention_window": cfg.attention_window,
            }
            info["pattern"] = card_pattern(encoder, _MARKED_GLOBAL)
        elif args.attention_pattern is not None:
            info["pattern"] = args.attention_pattern
        return info


__all__ = ["AbstractiveSummarizationTask", "ExtractiveSummarizationTask"]
