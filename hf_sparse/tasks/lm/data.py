"""Causal-LM data: documents of a JSON Lines folder, a word-level tokenizer trained on them, and
fixed-length blocks of the concatenated token stream (transformers' ``run_clm`` ``group_texts``)."""

from __future__ import annotations

import os

from ...data.loading import fingerprint, load_jsonl, tokenizer_fingerprint
from ...utils.validation import check_positive_int

#: the causal-LM tokenizer's special tokens, ids 0-3 in this order
SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>")


def check_text_row(row: dict, where: str, text_field: str = "document") -> None:
    """``ValueError`` naming the row and the field unless ``row[text_field]`` is a non-empty string."""
    value = row.get(text_field)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: field {text_field!r} must be a non-empty string, got {value!r:.60}")


def load_documents(path: str | os.PathLike, text_field: str = "document", limit: int | None = None):
    """The rows of one JSON Lines file (a ``datasets.Dataset``) with a checked ``text_field``: the first
    ``limit`` rows when given."""
    import functools

    check_positive_int("limit", limit, allow_none=True)
    rows = load_jsonl(os.fspath(path), functools.partial(check_text_row, text_field=text_field))
    if limit and limit < len(rows):
        rows = rows.select(range(limit))
    return rows


def train_word_tokenizer(texts, *, min_frequency: int = 2, vocab_size: int | None = None):
    """A lowercased word-level fast tokenizer trained on ``texts`` (no Hub access): ``<s>`` 0, ``<pad>`` 1,
    ``</s>`` 2, ``<unk>`` 3, then the words seen at least ``min_frequency`` times (the ``vocab_size`` most
    frequent; the others are ``<unk>``).

    A word keeps the space before it as a ``▁`` prefix (SentencePiece's ``Metaspace``, as in Llama's tokenizer;
    a text starts with one) and punctuation is split off: ``"The model (new)."`` is ``▁the ▁model ▁ ( new ) .``.
    Decoding turns every ``▁`` back into a space, so the decoded new tokens of a generation start with the
    space before their first word, and the ``text-generation`` pipeline (which appends them to the prompt)
    keeps word boundaries; ``decode(encode(text))`` is the normalized (lowercased) text after one space.

    Encoding adds only ``<s>``, as a causal LM's tokenizer does (Llama's): a prompt must not end in ``</s>``, or
    ``generate()`` and the ``text-generation`` pipeline continue after an ended document. :func:`lm_blocks`
    closes each training document with ``</s>``.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from ..summarization.data import train_word_level

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True),  # "▁word" per word
        pre_tokenizers.Punctuation("isolated"),  # "▁word." -> "▁word" "."
    ])  # fmt: skip
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")  # every ▁ back to a space
    train_word_level(tok, texts, SPECIAL_TOKENS, min_frequency, vocab_size)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 0)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
    )


def _closed(ids: list[int], eos: int | None) -> list[int]:
    """A document's ids ending in ``eos`` (added unless the tokenizer already put it there)."""
    return ids if eos is None or (ids and ids[-1] == eos) else ids + [eos]


def _cut(stream: list[int], block_size: int) -> dict:
    """``stream`` cut into examples of exactly ``block_size`` tokens (an incomplete last one dropped);
    ``labels`` are the inputs (the model shifts them)."""
    usable = (len(stream) // block_size) * block_size
    blocks = [stream[i : i + block_size] for i in range(0, usable, block_size)]
    return {
        "input_ids": blocks,
        "attention_mask": [[1] * block_size for _ in blocks],
        "labels": [list(b) for b in blocks],
    }


def group_texts(batch: dict, block_size: int) -> dict:
    """One batch on its own (transformers' ``run_clm``): its ``input_ids`` concatenated and cut into blocks of
    exactly ``block_size`` tokens, the batch's remainder dropped. :func:`lm_blocks` cuts the whole stream
    instead, so blocks run across its batches."""
    return _cut([t for ids in batch["input_ids"] for t in ids], block_size)


def _stream_blocks(ids, block_size: int):
    """``(group, tokens)``: ``tokens`` the length of the documents ``ids``' concatenated token stream, ``group``
    a ``datasets.map(batched=True, with_indices=True)`` function over ``ids`` giving the blocks of that stream
    which *start* in its batch, the last one completed from the following documents (read from ``ids``). Every
    batch is thus cut where the whole stream is, and only the stream's final remainder (< ``block_size``
    tokens) is dropped; memory stays one batch and one block (plus a length per document)."""
    import numpy as np
    import pyarrow.compute as pc

    lengths = pc.list_value_length(ids.with_format("arrow")["input_ids"]).to_numpy(zero_copy_only=False)
    starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])  # each document's first token
    total = int(starts[-1])
    usable = total // block_size * block_size

    def group(batch, indices):
        lo, hi = int(starts[indices[0]]), int(starts[indices[-1] + 1])  # the batch's tokens in the stream
        first = -(-lo // block_size) * block_size  # the first block starting in the batch
        last = min(-(-hi // block_size) * block_size, usable)  # the end of the last complete one
        if first >= last:
            return _cut([], block_size)
        stream = [t for d in batch["input_ids"] for t in d][first - lo :]
        if last > hi:  # the following documents that complete the last block
            end = int(np.searchsorted(starts, last))
            stream += [t for d in ids[indices[-1] + 1 : end]["input_ids"] for t in d]
        return _cut(stream[: last - first], block_size)

    return group, total


def lm_blocks(
    rows, tokenizer, block_size: int, text_field: str = "document", max_blocks: int | None = None,
    source: str = "the documents",
):  # fmt: skip
    """``rows`` tokenized (each document closed by the tokenizer's eos), concatenated and cut into
    ``block_size``-token examples (``input_ids``, ``attention_mask``, ``labels``): consecutive pieces of the
    one stream, only its final remainder (< ``block_size`` tokens) dropped; the first ``max_blocks`` kept when
    given. Cached by ``datasets`` under a fingerprint of the rows, the tokenizer and the block size.
    ``ValueError`` naming ``source`` (e.g. the file the rows come from) if they hold fewer than ``block_size``
    tokens."""
    check_positive_int("block_size", block_size)
    check_positive_int("max_blocks", max_blocks, allow_none=True)
    tok_fp = tokenizer_fingerprint(tokenizer)
    eos = tokenizer.eos_token_id
    ids = rows.map(
        lambda b: {"input_ids": [_closed(d, eos) for d in tokenizer(b[text_field])["input_ids"]]}, batched=True,
        remove_columns=rows.column_names, desc="tokenizing",
        new_fingerprint=fingerprint(rows._fingerprint, "lm_tokenize_eos", text_field, tok_fp),
    )  # fmt: skip
    group, tokens = _stream_blocks(ids, block_size)
    if tokens < block_size:
        raise ValueError(
            f"{source}: {len(rows)} document(s) of {tokens} tokens in all (each closed by the eos), fewer than "
            f"block_size={block_size}: no example"
        )
    blocks = ids.map(
        group, batched=True, with_indices=True, remove_columns=ids.column_names,
        desc=f"grouping into {block_size}-token blocks",
        new_fingerprint=fingerprint(ids._fingerprint, "lm_group_stream", block_size),
    )  # fmt: skip
    if max_blocks and max_blocks < len(blocks):
        blocks = blocks.select(range(max_blocks))
    return blocks


__all__ = [
    "SPECIAL_TOKENS",
    "check_text_row",
    "group_texts",
    "lm_blocks",
    "load_documents",
    "train_word_tokenizer",
]
