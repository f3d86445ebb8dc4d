"""Summarization data: reader, tokenizer, features, encoders (chunking, truncation), collator, synthetic data."""

import json

import numpy as np
import pytest
import torch

from hf_sparse.tasks.summarization.data import (
    AbstractiveCollator,
    ExtractiveCollator,
    add_summarization_tokens,
    encode_abstractive,
    encode_extractive,
    load_summarization_examples,
    sentence_features,
    synthetic_copy_documents,
)
from hf_sparse.tasks.summarization.sentences import split_sentences
from hf_sparse.utils.io import write_jsonl
from tests.models.summarization_tiny import tiny_tokenizer

SENT, QSEP = 5, 6


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _examples_of(path, query_mode="none"):
    return list(load_summarization_examples(path, query_mode))


# ------------------------------------------------------------------------------------------ reading


def test_reader_modes(tmp_path):
    row = {"id": "m1", "document": "A: hi.\nB: bye.", "summary": "They met.", "summary_query": "Summarize.",
           "specific_queries": [{"query": "Who left?", "answer": "B."}, {"query": "Who came?", "answer": "A."}]}  # fmt: skip
    path = _write(
        tmp_path / "d.jsonl", [row, {"document": "X.", "summary": "Y.", "references": ["Y.", "Z."]}]
    )
    plain = _examples_of(path)
    assert [e["references"] for e in plain] == [["They met."], ["Y.", "Z."]]
    assert plain[0]["query"] is None and plain[1]["id"] == "2"
    with pytest.raises(ValueError, match="summary_query"):
        _examples_of(path, "summary_query")  # row 2 has none
    specific = _examples_of(_write(tmp_path / "s.jsonl", [row]), "specific")
    assert [(e["id"], e["query"], e["summary"]) for e in specific] == [
        ("m1/0", "Who left?", "B."),
        ("m1/1", "Who came?", "A."),
    ]
    with pytest.raises(ValueError, match="query_mode"):
        _examples_of(path, "all")


@pytest.mark.parametrize(
    "line,match",
    [
        ('{"document": "", "summary": "s"}', "row 2: field 'document' is empty"),
        ('{"document": "d"}', "row 2: field 'summary' must be a string"),
        ('{"document": "d", "summary": "s", "references": "s"}', "row 2: field 'references' must be a list"),
        ('{"document": 3, "summary": "s"}', "row 2: field 'document' must be a string"),
        ("[1, 2]", "line 2: not a readable JSON Lines file"),
        ("{oops", "line 2: not a readable JSON Lines file"),
    ],
)
def test_reader_names_bad_rows(tmp_path, line, match):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"document": "ok.", "summary": "ok"}\n' + line + "\n")
    with pytest.raises(ValueError, match=f"bad.jsonl: .*{match}"):
        _examples_of(path)


def test_shared_squality_has_four_references(shared_data):
    rows = _examples_of(f"{shared_data}/summarization/squality/validation.jsonl")
    assert len(rows) == 25 and all(len(r["references"]) == 4 for r in rows)


# ------------------------------------------------------------------------------------------ tokenizer


def test_tokenizer_layout(tok):
    ids = tok.convert_tokens_to_ids(["<s>", "<pad>", "</s>", "<unk>", "<mask>", "<sent>", "<query_sep>"])
    assert ids == [0, 1, 2, 3, 4, 5, 6]
    enc = tok("W5 w23 unseenword.")["input_ids"]
    assert enc[0] == 0 and enc[-1] == 2 and 3 in enc  # <s> ... </s>, unknown word -> <unk>
    assert tok.decode(enc, skip_special_tokens=True) == "w5 w23."
    assert add_summarization_tokens(tok) == {"sentence_token_id": SENT, "query_separator_token_id": QSEP}


# ------------------------------------------------------------------------------------------ features


def test_sentence_features():
    sents = ["Sparse attention reads long documents.", "Sparse attention is fast.", "Lunch was good."]
    f = sentence_features(sents, query="lunch")
    assert f.shape == (3, 5) and f.dtype == np.float32
    assert f[:, 0].tolist() == pytest.approx([0, 1 / 3, 2 / 3])  # position
    assert f[:, 1].tolist() == pytest.approx([1, 1 / 2, 1 / 3])  # first_sentences
    assert f[1, 3] > f[2, 3]  # centrality: shares words with the document
    assert f[2, 4] > 0 and f[0, 4] == 0  # query similarity
    assert (sentence_features(sents)[:, 4] == 0).all()
    assert sentence_features(sents, names=["length"]).shape == (3, 1)
    with pytest.raises(ValueError, match="unknown sentence features"):
        sentence_features(sents, names=["rouge"])
    with pytest.raises(TypeError, match="split it"):
        sentence_features("One. Two.")


# ------------------------------------------------------------------------------------------ encoders


@pytest.mark.parametrize("max_length,query", [(12, None), (20, "w1 w2"), (400, None), (9, None)])
def test_extractive_chunks_cover_every_sentence(tok, max_length, query):
    doc = synthetic_copy_documents(1, num_sentences=(9, 9), seed=3)[0]["document"]
    sents = split_sentences(doc)
    chunks = encode_extractive(tok, sents, query, max_length=max_length, sentence_token_id=SENT,
                               query_separator_token_id=QSEP, max_sentence_tokens=5)  # fmt: skip
    assert [i for c in chunks for i in c.sentence_indices] == list(range(len(sents)))
    for c in chunks:
        assert len(c.input_ids) <= max_length
        assert c.input_ids[0] == tok.bos_token_id and c.input_ids[-1] == tok.eos_token_id
        assert c.input_ids.count(SENT) == len(c.sentence_indices)
        assert (QSEP in c.input_ids) == (query is not None)
    assert (len(chunks) == 1) == (max_length == 400)
    assert sum(c.cut_sentences for c in chunks) == sum(len(s.split()) + 1 > 5 for s in sents)  # words + "."


def test_extractive_encoder_errors(tok):
    with pytest.raises(ValueError, match="non-empty list"):
        encode_extractive(tok, [], max_length=32, sentence_token_id=SENT)
    with pytest.raises(ValueError, match="no query support"):
        encode_extractive(tok, ["A b."], "q", max_length=32, sentence_token_id=SENT)
    with pytest.raises(ValueError, match="leaves no room"):
        encode_extractive(
            tok, ["A b."], "w1 w2 w3", max_length=6, sentence_token_id=SENT, query_separator_token_id=QSEP
        )


def test_abstractive_truncation_is_reported(tok):
    doc = "W1 w2 w3. W4 w5 w6. W7 w8 w9."
    full = encode_abstractive(tok, doc, max_length=64, sentence_token_id=SENT)
    assert full["input_ids"][:3] == [0, SENT, tok.convert_tokens_to_ids("w1")] and not full["truncated"]
    assert full["num_tokens"] == len(full["input_ids"]) == 2 + 3 * 5
    cut = encode_abstractive(tok, doc, "w9", max_length=8, query_separator_token_id=QSEP)
    assert cut["truncated"] and cut["num_tokens"] == 2 + 2 + 12 and len(cut["input_ids"]) == 8
    assert cut["input_ids"][:3] == [0, tok.convert_tokens_to_ids("w9"), QSEP]  # the query is kept whole
    with pytest.raises(ValueError, match="document is empty"):
        encode_abstractive(tok, "  ", max_length=8)
    with pytest.raises(TypeError, match="document must be a str"):
        encode_abstractive(tok, None, max_length=8)


def test_query_truncation_is_reported(tok):
    doc = "W1 w2 w3. W4 w5 w6."
    query = "w7 w8 w9 w1 w2"
    enc = encode_abstractive(
        tok, doc, query, max_length=64, query_separator_token_id=QSEP, max_query_tokens=3
    )
    assert enc["truncated_query_tokens"] == 2 and not enc["truncated"]  # the document is whole
    assert enc["input_ids"][:5] == [0, *tok.convert_tokens_to_ids(["w7", "w8", "w9"]), QSEP]
    assert enc["num_tokens"] == len(enc["input_ids"]) + 2  # the length before truncation: the whole query
    whole = encode_abstractive(tok, doc, query, max_length=64, query_separator_token_id=QSEP)
    assert whole["truncated_query_tokens"] == 0 and whole["num_tokens"] == enc["num_tokens"]
    assert encode_abstractive(tok, doc, max_length=64)["truncated_query_tokens"] == 0
    chunks = encode_extractive(tok, split_sentences(doc), query, max_length=12, sentence_token_id=SENT,
                               query_separator_token_id=QSEP, max_query_tokens=4)  # fmt: skip
    assert len(chunks) == 2 and [c.cut_query_tokens for c in chunks] == [1, 1]
    assert encode_extractive(tok, ["A b."], max_length=12, sentence_token_id=SENT)[0].cut_query_tokens == 0


def test_literal_special_tokens_in_text_stay_text(tok):
    """ "<sent>", "<query_sep>", "</s>" typed in a document, query or summary are text, never markers."""
    from hf_sparse.tasks.summarization.task import abstractive_example

    sents = ["W1 reads the <sent> tag.", "W2 reads the </s> tag.", "W3 <s> w4."]
    (chunk,) = encode_extractive(tok, sents, "w5 <query_sep> w6", max_length=64, sentence_token_id=SENT,
                                 query_separator_token_id=QSEP)  # fmt: skip
    assert chunk.input_ids.count(SENT) == 3 and chunk.input_ids.count(QSEP) == 1
    assert chunk.input_ids.count(tok.eos_token_id) == 1 and chunk.input_ids.count(tok.bos_token_id) == 1
    enc = encode_abstractive(tok, " ".join(sents), max_length=64, sentence_token_id=SENT)
    assert enc["input_ids"].count(SENT) == 3 and enc["input_ids"].count(tok.eos_token_id) == 1
    example = {"document": " ".join(sents), "query": None, "summary": "W1 </s> w2 <sent>."}
    labels = abstractive_example(example, tokenizer=tok, max_length=64, max_target_length=16,
                                 sentence_token_id=SENT, query_separator_token_id=None)["labels"]  # fmt: skip
    assert labels.count(tok.eos_token_id) == 1 and labels[-1] == tok.eos_token_id and SENT not in labels


# ------------------------------------------------------------------------------------------ collator


def test_extractive_collator():
    collate = ExtractiveCollator(pad_token_id=1, pad_to_multiple_of=8)
    batch = collate([
        {"input_ids": [0, 5, 9, 2], "labels": [1.0], "sentence_features": [[0.5, 0.1]]},
        {"input_ids": [0, 5, 9, 5, 9, 5, 9, 9, 9, 2], "labels": [0.0, 1.0, 0.0],
         "sentence_features": [[0.0, 0.0], [0.3, 0.3], [0.6, 0.6]]},
    ])  # fmt: skip
    assert batch["input_ids"].shape == (2, 16) and batch["attention_mask"].sum().item() == 14
    assert batch["labels"].tolist() == [[1.0, -100.0, -100.0], [0.0, 1.0, 0.0]]
    assert batch["sentence_features"].shape == (2, 3, 2) and batch["sentence_features"][0, 1:].eq(0).all()
    assert batch["input_ids"][0, 4:].eq(1).all() and batch["input_ids"].dtype == torch.long


def test_extractive_collator_documents():
    """Document items: their chunks become consecutive rows, document_index says whose they are."""
    collate = ExtractiveCollator(pad_token_id=1)
    doc_a = {"input_ids": [[0, 5, 9, 2], [0, 5, 9, 5, 9, 2]], "labels": [[1.0], [0.0, 0.0]]}
    doc_b = {"input_ids": [[0, 5, 2]], "labels": [[0.0]]}
    batch = collate([doc_a, doc_b])
    assert batch["document_index"].tolist() == [0, 0, 1]
    assert batch["input_ids"].shape == (3, 6) and batch["labels"].tolist()[1] == [0.0, 0.0]
    assert "document_index" not in collate([{"input_ids": [0, 5, 2], "labels": [1.0]}])


def test_abstractive_collator_pads_labels_to_the_longest_summary():
    collate = AbstractiveCollator(pad_token_id=1, pad_to_multiple_of=16)
    batch = collate([
        {"input_ids": [0, 9, 9, 2], "attention_mask": [1] * 4, "labels": [0, 7, 2]},
        {"input_ids": [0, 9, 9, 9, 9, 2], "attention_mask": [1] * 6, "labels": [0, 7, 7, 7, 2]},
    ])  # fmt: skip
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (2, 16)
    assert batch["attention_mask"].sum().item() == 10 and batch["input_ids"][0, 4:].eq(1).all()
    assert batch["labels"].tolist() == [[0, 7, 2, -100, -100], [0, 7, 7, 7, 2]]  # not padded to 16


# ------------------------------------------------------------------------------------------ synthetic


def test_synthetic_copy_documents(tmp_path):
    rows = synthetic_copy_documents(20, seed=4)
    assert rows == synthetic_copy_documents(20, seed=4) and rows != synthetic_copy_documents(20, seed=5)
    for r in rows:
        sents = split_sentences(r["document"])
        assert 4 <= len(sents) <= 8 and sents[0] == r["summary"]
    write_jsonl(tmp_path / "x.jsonl", rows)
    assert [e["summary"] for e in _examples_of(tmp_path / "x.jsonl")] == [r["summary"] for r in rows]
