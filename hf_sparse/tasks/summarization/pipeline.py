"""``long-document-summarization``: a long document (and an optional query) in, a summary out.

transformers v5 removed its ``summarization`` pipeline task; this one takes documents of any length and
works with three kinds of model:

- **abstractive** (``LEDForSummarization``, model_type ``led_summarization``, or a plain LED): the text is
  encoded as in training (``hf_sparse.tasks.summarization.data.encode_abstractive``: sentence markers and a query
  prefix when the model's config uses them) and ``generate`` writes the summary. Global attention is built
  by the model itself (for a plain LED the pipeline passes ``global_attention_mask`` on the first token).
  Generation options: ``num_beams``, ``min_length``, ``max_length``, ``min_new_tokens``, ``max_new_tokens``,
  ``no_repeat_ngram_size``, ``length_penalty`` (anything else through ``generate_kwargs``); defaults come from
  the model's ``generation_config``. A summary longer than the decoder's position table
  (``max_new_tokens`` > ``max_decoder_position_embeddings``, or ``max_length`` past it plus the decoder start
  token) is a ``ValueError``. With ``generate_kwargs={"num_return_sequences": n}`` (n > 1) each input gives a
  list of ``n`` output dicts (best first), as transformers' ``text2text-generation`` does.
  **Long input**: a document longer than ``max_input_length`` tokens (default: the model's encoder
  limit, ``max_encoder_position_embeddings``, rounded down to a multiple of ``attention_window`` for LED's own
  attention, which pads to it) is *truncated*: its first tokens (after the query) are kept,
  a ``UserWarning`` says how many tokens were dropped, and the output has ``truncated: True`` and
  ``input_tokens`` (the length before truncation).
- **extractive** (``LongformerForExtractiveSummarization``): every sentence is scored; the summary is the
  best sentences in document order within ``max_sentences`` and/or ``max_words`` (default 3 sentences).
  **Long input** is encoded in *chunks* of whole sentences (``encode_extractive``), so every sentence is
  scored and nothing is truncated; ``chunks`` in the output says how many.

A query longer than the model reads (128 tokens abstractive, 64 extractive: ``encode_abstractive`` /
``encode_extractive``'s ``max_query_tokens``) keeps its first tokens: a ``UserWarning`` says so and the output
has ``truncated_query_tokens`` (the number cut, 0 when none; for an abstractive model ``truncated`` is then
True too).

Inputs: a string, ``{"text": ..., "query": ...}``, or a list of those; ``query=`` in the call applies to
every input. Outputs: ``{"summary_text": str, ...}`` (one dict per input; a list of ``n`` dicts with
``num_return_sequences=n > 1``). ``progress`` (None: when there are many; True; False) shows a progress bar
over the documents of a list and the chunks of a long document. Options given to the constructor are the
defaults of every call.

Batching is transformers' ``ChunkPipeline`` base's: ``batch_size=`` (constructor or call) is the number of
model rows per forward pass (chunks of one or several documents for extractive models, documents for
abstractive ones); outputs do not depend on it beyond float rounding (a model with random-block attention
runs one row per pass: :mod:`hf_sparse.pipelines.batching`).

Errors (raised before any model call): a non-string text or query, or an option given by position
(``TypeError``); an empty text or query (blank, or giving no token, e.g. only zero-width characters), a text
without sentences, a query for a model without query support, a budget ``<= 0``, a summary length past the
decoder's position table, an option of the other model kind, or an unknown option (``ValueError`` naming it).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
import torch
from transformers.pipelines.base import ChunkPipeline
from transformers.utils import ModelOutput

from ...models.longformer_tasks.backbone import backbone_config, block_multiple
from ...pipelines.batching import RightPaddedBatches, pad_to_multiple
from ...pipelines.progress import check_progress, progress_bar
from ...pipelines.saving import SaveModelMixin
from ...utils.validation import check_int, check_positive_int
from .data import encode_abstractive, encode_extractive, sentence_features
from .metrics import select_in_order
from .sentences import split_sentences

ABSTRACTIVE_TYPES = ("led_summarization", "led")
EXTRACTIVE_TYPES = ("longformer_extractive_summarization",)
GENERATION_OPTIONS = (
    "num_beams", "min_length", "max_length", "min_new_tokens", "max_new_tokens", "no_repeat_ngram_size",
    "length_penalty",
)  # fmt: skip
BUDGET_OPTIONS = ("max_sentences", "max_words")
DEFAULT_MAX_SENTENCES = 3


def _warn_query_cut(cut: int) -> None:
    """A query longer than the model reads (``max_query_tokens``) lost its last ``cut`` tokens: say so."""
    if cut:
        warnings.warn(
            f"long-document-summarization: the query is longer than the model reads; it was truncated (its last "
            f"{cut} tokens were not read, truncated_query_tokens in the output). Use a shorter query.",
            UserWarning,
            stacklevel=3,
        )


class LongDocumentSummarizationPipeline(SaveModelMixin, RightPaddedBatches, ChunkPipeline):
    """Summarize long documents (see the module docstring for inputs, options, outputs and long input).

    Example:

    ```python
    >>> import hf_sparse
    >>> from transformers import pipeline
    >>> folder = "outputs/tiny-extractive"
    >>> pipe = pipeline("long-document-summarization", model=folder, trust_remote_code=True)
    >>> pipe(open("paper.txt").read(), max_sentences=3)["summary_text"]
    ```
    """

    def __init__(self, *args, progress=None, **kwargs):
        self._progress = check_progress(progress)  # the default of every call
        super().__init__(*args, **kwargs)
        model_type = getattr(self.model.config, "model_type", None)
        if model_type not in ABSTRACTIVE_TYPES + EXTRACTIVE_TYPES:
            raise ValueError(
                "long-document-summarization needs an LEDForSummarization, an LED or a "
                f"LongformerForExtractiveSummarization model, got model_type={model_type!r}"
            )
        if self.tokenizer is None:
            raise ValueError("long-document-summarization needs the model's tokenizer (tokenizer=...)")
        self.model.eval()

    @property
    def kind(self) -> str:
        """``"extractive"`` or ``"abstractive"``, from the model's ``model_type``."""
        model_type = getattr(self.model.config, "model_type", None)
        return "extractive" if model_type in EXTRACTIVE_TYPES else "abstractive"

    # --------------------------------------------------------------------------------- parameters

    @property
    def supports_query(self) -> bool:
        return getattr(self.model.config, "query_separator_token_id", None) is not None

    def _window_multiple(self) -> int | None:
        """The multiple an abstractive input is padded to: LED's own attention reads a multiple of its
        ``attention_window`` (None with hf-sparse kernels, ``encoder_attention_pattern``)."""
        cfg = self.model.config
        if getattr(cfg, "encoder_attention_pattern", None) is not None:
            return None
        window = cfg.attention_window
        return int(max(window) if isinstance(window, (list, tuple)) else window)

    def max_input_tokens(self) -> int:
        """The longest input (tokens) the model reads in one pass: one chunk for extractive models; for
        abstractive ones the encoder's position table, rounded down to the window multiple it is padded to."""
        cfg = self.model.config
        if self.kind == "extractive":
            return cfg.chunk_length
        limit = cfg.max_encoder_position_embeddings
        multiple = self._window_multiple()
        return limit - limit % multiple if multiple else limit

    def __call__(self, inputs, *args, progress=None, **kwargs):
        if args:
            raise TypeError(
                f"long-document-summarization takes one positional argument (the inputs), got {len(args)} more "
                f"{list(args)}; give options by name (query=..., max_sentences=..., max_length=...)"
            )
        progress = self._progress if check_progress(progress) is None else progress
        if isinstance(inputs, (list, tuple)):
            if not inputs:
                raise ValueError("no documents: pass a text (str or dict) or a non-empty list of them")
            batch_size = kwargs.get("batch_size") or self._batch_size
            bar = None if batch_size not in (None, 1) else progress_bar(
                len(inputs), "long-document-summarization", progress
            )  # fmt: skip
            if bar is not None:  # one document at a time, so the bar moves per document
                try:
                    results = []
                    for document in inputs:
                        results.append(super().__call__(document, progress=False, **kwargs))
                        bar.update(1)
                    return results
                finally:
                    bar.close()
            inputs = list(inputs)  # the base batches lists (a tuple would be one input)
        return super().__call__(inputs, progress=progress, **kwargs)

    def _sanitize_parameters(
        self, query=None, max_input_length=None, generate_kwargs=None, progress=None, **kwargs
    ):
        pre, fwd, post = {}, {}, {}
        if progress is not None and self.kind == "extractive":
            pre["progress"] = progress
        if query is not None:
            pre["query"] = query
        generation = {k: kwargs.pop(k) for k in GENERATION_OPTIONS if k in kwargs}
        budget = {k: kwargs.pop(k) for k in BUDGET_OPTIONS if k in kwargs}
        if kwargs:
            raise ValueError(
                f"unknown option(s) {sorted(kwargs)} for long-document-summarization; options: query, progress, "
                f"max_input_length, {', '.join(GENERATION_OPTIONS + BUDGET_OPTIONS)}, generate_kwargs"
            )
        if self.kind == "extractive":
            bad = sorted(k for k, v in generation.items() if v is not None)
            if bad or generate_kwargs or max_input_length is not None:
                raise ValueError(
                    f"{bad or ['generate_kwargs/max_input_length']} apply to abstractive models; this extractive "
                    "model takes max_sentences / max_words (it encodes long documents in chunks)"
                )
            for name, value in budget.items():
                if value is not None:
                    post[name] = check_positive_int(name, value)
            return pre, fwd, post
        bad = sorted(k for k, v in budget.items() if v is not None)
        if bad:
            raise ValueError(
                f"{bad} apply to extractive models; this abstractive model takes "
                f"{', '.join(GENERATION_OPTIONS)} (the summary length is min_length / max_length tokens)"
            )
        if max_input_length is not None:
            limit = self.max_input_tokens()
            value = check_positive_int("max_input_length", max_input_length)
            if value > limit:
                raise ValueError(
                    f"max_input_length must be <= {limit} (the model's encoder limit), got {value}"
                )
            pre["max_input_length"] = value
        for name in ("num_beams", "max_length", "max_new_tokens"):
            if generation.get(name) is not None:
                fwd[name] = check_positive_int(name, generation[name])
        for name in ("min_length", "min_new_tokens", "no_repeat_ngram_size"):
            if generation.get(name) is not None:
                fwd[name] = check_int(name, generation[name], 0)
        if generation.get("length_penalty") is not None:
            lp = generation["length_penalty"]
            if isinstance(lp, bool) or not isinstance(lp, (int, float)) or not np.isfinite(lp):
                raise TypeError(f"length_penalty must be a finite number, got {lp!r}")
            fwd["length_penalty"] = float(lp)
        if fwd.get("min_length") is not None and fwd.get("max_length") is not None:
            if fwd["min_length"] > fwd["max_length"]:
                raise ValueError(
                    f"min_length ({fwd['min_length']}) must be <= max_length ({fwd['max_length']})"
                )
        if generate_kwargs is not None:
            if not isinstance(generate_kwargs, Mapping):
                raise TypeError(f"generate_kwargs must be a dict, got {type(generate_kwargs).__name__}")
            fwd.update(generate_kwargs)
        self._check_decoder_limit(fwd)
        return pre, fwd, post

    def _check_decoder_limit(self, generate_kwargs: Mapping) -> None:
        """A summary longer than the decoder's position table is a ValueError naming the option (``generate``
        would fail with an IndexError only after decoding that far)."""
        positions = getattr(self.model.config, "max_decoder_position_embeddings", None)
        if positions is None:
            return
        # the decoder reads the start token and every summary token but the last: at most `positions` new ones
        for name, limit in (("max_new_tokens", positions), ("max_length", positions + 1)):
            value = generate_kwargs.get(name)
            if isinstance(value, int) and value > limit:
                raise ValueError(
                    f"{name}={value} is past the decoder's position table (max_decoder_position_embeddings="
                    f"{positions}): {name} must be <= {limit}"
                )

    # --------------------------------------------------------------------------------- stages

    def _text_and_query(self, inputs, query):
        if isinstance(inputs, Mapping):
            unknown = sorted(set(inputs) - {"text", "query"})
            if unknown or "text" not in inputs:
                raise ValueError(
                    f"an input dict takes 'text' (required) and 'query', got keys {sorted(inputs)}"
                )
            if inputs.get("query") is not None and query is not None:
                raise ValueError("query given both in the input dict and as query=; give it once")
            query = inputs.get("query", query)
            inputs = inputs["text"]
        if not isinstance(inputs, str):
            raise TypeError(f"text must be a str (or a dict with 'text'), got {type(inputs).__name__}")
        if not inputs.strip():
            raise ValueError("text is empty")
        self._check_has_tokens("text", inputs)
        if query is not None:
            if not isinstance(query, str):
                raise TypeError(f"query must be a str, got {type(query).__name__}")
            if not query.strip():
                raise ValueError("query is empty")
            self._check_has_tokens("query", query)
            if not self.supports_query:
                raise ValueError(
                    "this model has no query support (its config has no query_separator_token_id); "
                    "call it without query="
                )
        return inputs, query

    def _check_has_tokens(self, name: str, text: str) -> None:
        """A text the tokenizer reads as nothing (only zero-width or control characters, such as ``"\\u200b"``
        or ``"\\x00"``) is as empty as a blank one: a ValueError naming it. Only a text without a letter or digit
        (which always gives a token, if only an unknown one) is tokenized for it: a document is not read twice."""
        if any(c.isalnum() for c in text):
            return
        encoded = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True, verbose=False)
        if not encoded["input_ids"]:
            raise ValueError(f"{name} is empty: {text!r} gives no token with the model's tokenizer")

    def preprocess(self, inputs, query=None, max_input_length=None, progress=None):
        """One model row per chunk of whole sentences (extractive) or the one encoded input (abstractive)."""
        text, query = self._text_and_query(inputs, query)
        cfg = self.model.config
        if self.kind == "extractive":
            yield from self._chunks(text, query, progress)
            return
        limit = max_input_length or self.max_input_tokens()
        uses = getattr(cfg, "global_attention", ["first"])
        encoded = encode_abstractive(
            self.tokenizer, text, query, max_length=limit,
            sentence_token_id=cfg.sentence_token_id if "sentences" in uses else None,
            query_separator_token_id=getattr(cfg, "query_separator_token_id", None),
        )  # fmt: skip
        query_cut = encoded["truncated_query_tokens"]
        _warn_query_cut(query_cut)
        if encoded["truncated"]:
            read = encoded["num_tokens"] - query_cut  # the input with the query as read
            warnings.warn(
                f"long-document-summarization: the input has {read} tokens, more than "
                f"max_input_length={limit}; it was truncated to its first {limit} tokens (the last "
                f"{read - limit} were not read). Use an extractive model to score every "
                "sentence, or a model with a longer encoder.",
                UserWarning,
                stacklevel=2,
            )
        ids = torch.tensor([encoded["input_ids"]])  # (1, n)
        yield {"input_ids": ids, "attention_mask": torch.ones_like(ids), "num_tokens": encoded["num_tokens"],
               "truncated": encoded["truncated"] or query_cut > 0, "truncated_query_tokens": query_cut,
               "is_last": True}  # fmt: skip

    def _chunks(self, text, query, progress):
        cfg = self.model.config
        sentences = split_sentences(text)
        if not sentences:
            raise ValueError("text has no sentences")
        chunks = encode_extractive(
            self.tokenizer, sentences, query, max_length=cfg.chunk_length,
            sentence_token_id=cfg.sentence_token_id, query_separator_token_id=cfg.query_separator_token_id,
            max_sentence_tokens=cfg.max_sentence_tokens,
        )  # fmt: skip
        _warn_query_cut(chunks[0].cut_query_tokens)
        feats = sentence_features(sentences, query, cfg.sentence_features) if cfg.sentence_features else None
        bar = progress_bar(len(chunks), f"long-document-summarization ({len(chunks)} chunks)", progress)
        try:
            for k, chunk in enumerate(chunks):
                ids = torch.tensor([chunk.input_ids])  # (1, n)
                row = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
                if feats is not None:  # (1, sentences of the chunk, features)
                    row["sentence_features"] = torch.as_tensor(
                        np.asarray(feats[chunk.sentence_indices], dtype=np.float32)
                    )[None]
                yield {**row, "sentence_indices": list(chunk.sentence_indices), "sentences": sentences,
                       "truncated_query_tokens": chunk.cut_query_tokens, "is_last": k == len(chunks) - 1}  # fmt: skip
                if bar is not None:  # the chunk was consumed (forward done) before the next is asked for
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()

    def _forward(self, model_inputs, **generate_kwargs):
        if self.kind == "extractive":
            return self._score(model_inputs)
        batch = pad_to_multiple(model_inputs, self._window_multiple(), self.tokenizer.pad_token_id)
        kwargs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}  # (B, n)
        if self.model.config.model_type == "led":  # a plain LED does not build its global mask
            g = torch.zeros_like(kwargs["input_ids"])
            g[:, 0] = 1
            kwargs["global_attention_mask"] = g
        out = self.model.generate(**kwargs, **generate_kwargs)  # (B * num_return_sequences, generated)
        if isinstance(out, ModelOutput):  # return_dict_in_generate (an argument, or the generation_config's)
            out = out.sequences  # as transformers' text-generation pipeline takes it
        rows = kwargs["input_ids"].shape[0]
        meta = ("num_tokens", "truncated", "truncated_query_tokens", "is_last")
        return {"generated": out.reshape(rows, -1, out.shape[-1]),  # (B, num_return_sequences, generated)
                **{k: model_inputs[k] for k in meta}}  # fmt: skip

    def _score(self, model_inputs):
        cfg = self.model.config
        batch = pad_to_multiple(
            model_inputs, block_multiple(backbone_config(cfg.backbone)), self.tokenizer.pad_token_id
        )
        logits = self.model(
            input_ids=batch["input_ids"],  # (B, n): one chunk per row
            attention_mask=batch["attention_mask"],
            sentence_features=batch.get("sentence_features"),  # (B, sentences, features)
        ).logits  # (B, sentences)
        meta = ("sentence_indices", "sentences", "truncated_query_tokens", "is_last")
        return {"logits": logits.float(), **{k: model_inputs[k] for k in meta}}

    def postprocess(self, model_outputs, max_sentences=None, max_words=None):
        if self.kind == "abstractive":
            (out,) = model_outputs
            results = [
                {"summary_text": self.tokenizer.decode(ids, skip_special_tokens=True).strip(),
                 "input_tokens": out["num_tokens"], "truncated": out["truncated"],
                 "truncated_query_tokens": out["truncated_query_tokens"]}
                for ids in out["generated"][0]  # (num_return_sequences, generated)
            ]  # fmt: skip
            return results[0] if len(results) == 1 else results  # several: a list, as text2text-generation
        sentences = model_outputs[0]["sentences"]
        scores = np.zeros(len(sentences), dtype=np.float64)
        for out in model_outputs:  # one chunk each
            indices = out["sentence_indices"]
            scores[indices] = out["logits"][0, : len(indices)].numpy()
        if max_sentences is None and max_words is None:
            max_sentences = DEFAULT_MAX_SENTENCES
        picked = select_in_order(scores, sentences, max_sentences, max_words, return_indices=True)
        chosen = [sentences[i] for i in picked]
        return {
            "summary_text": " ".join(" ".join(s.split()) for s in chosen),
            "sentences": chosen,
            "sentence_indices": picked,
            "scores": [round(float(scores[i]), 4) for i in picked],
            "num_sentences": len(sentences),
            "chunks": len(model_outputs),
            "truncated_query_tokens": model_outputs[0]["truncated_query_tokens"],
        }


__all__ = ["LongDocumentSummarizationPipeline"]
