"""train_dialogue_tokenizer: word-level / WordPiece tokenizers built from training turns, offline."""

import pytest

from hf_sparse.tasks.dialogue.data import train_dialogue_tokenizer
from hf_sparse.tasks.dialogue.formatter import DialogueFormatter

TEXTS = ["Find me a restaurant in Berkeley.", "Which city?", "Berkeley, please!", "Find me a flight."]


def test_word_level_vocabulary_and_unknown_words():
    tok = train_dialogue_tokenizer(TEXTS, min_frequency=2)
    assert tok.convert_ids_to_tokens([0, 1, 2, 3, 4]) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tok.tokenize("FIND me a table in Berkeley!") == [
        "find",
        "me",
        "a",
        "[UNK]",
        "[UNK]",
        "berkeley",
        "[UNK]",
    ]
    assert tok("find me")["input_ids"] == [
        tok.cls_token_id,
        *tok.convert_tokens_to_ids(["find", "me"]),
        tok.sep_token_id,
    ]
    every = train_dialogue_tokenizer(TEXTS, min_frequency=1)
    assert "table" not in every.get_vocab() and "restaurant" in every.get_vocab() and "!" in every.get_vocab()
    capped = train_dialogue_tokenizer(TEXTS, min_frequency=1, vocab_size=3)
    assert len(capped) == 5 + 3


def test_wordpiece_splits_rare_words_instead_of_unk():
    tok = train_dialogue_tokenizer(TEXTS * 5, kind="wordpiece", vocab_size=200, min_frequency=1)
    pieces = tok.tokenize("berkeleycity")  # not a word of the texts
    assert "[UNK]" not in pieces and len(pieces) > 1


def test_cased_keeps_case():
    tok = train_dialogue_tokenizer(TEXTS, min_frequency=1, lowercase=False)
    assert tok.tokenize("Berkeley berkeley") == ["Berkeley", "[UNK]"]


def test_works_with_the_formatter_and_saves(tmp_path):
    from transformers import AutoTokenizer

    tok = train_dialogue_tokenizer(TEXTS, min_frequency=1)
    formatter = DialogueFormatter(tok, max_length=32)
    assert formatter.add_special_tokens(tok) == 3
    enc = formatter.encode_pair(
        ["USER", "SYSTEM", "USER"], ["find me a flight", "which city ?", "[SYS]"], "berkeley"
    )
    assert tok.convert_ids_to_tokens(enc["input_ids"]) == [
        "[CLS]", "[USR]", "find", "me", "a", "flight", "[SYS]", "which", "city", "?",
        "[USR]", "[UNK]", "[UNK]", "[UNK]", "[RSP]", "berkeley", "[SEP]",  # "[", "sys", "]": text, not a marker
    ]  # fmt: skip
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again("find me")["input_ids"] == tok("find me")["input_ids"] and len(again) == len(tok)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"texts": "find me"}, TypeError, "texts must be an iterable of str"),
        ({"texts": ["ok", 3]}, TypeError, r"texts\[1\] must be a str"),
        ({"texts": TEXTS, "kind": "bpe"}, ValueError, "kind must be 'word' or 'wordpiece'"),
        ({"texts": TEXTS, "min_frequency": 0}, ValueError, "min_frequency"),
        ({"texts": TEXTS, "min_frequency": 99}, ValueError, "vocabulary would be empty"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    texts = kwargs.pop("texts")
    with pytest.raises(error, match=match):
        train_dialogue_tokenizer(texts, **kwargs)
