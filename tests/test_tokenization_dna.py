"""DNATokenizer: input rules, k-mers, special tokens, save/load, reverse complement, errors."""

import itertools
import json

import pytest

from hf_sparse.tokenization_dna import DNATokenizer, reverse_complement

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def tok():
    return DNATokenizer()


@pytest.fixture(scope="module")
def tok3():
    return DNATokenizer(kmer=3)


def test_vocabulary_layout(tok, tok3):
    assert [tok.convert_ids_to_tokens(i) for i in range(10)] == SPECIALS + list("ACGTN")
    assert len(tok) == tok.vocab_size == 10
    assert len(tok3) == 5 + 5 + 4**3 + 1
    assert tok3.convert_tokens_to_ids(["AAA", "TTT", "NNN"]) == [10, 10 + 63, 10 + 64]
    assert (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id) == (
        0,
        1,
        2,
        3,
        4,
    )


@pytest.mark.parametrize("seq", ["ACGT", "GATTACA", "N", "ACGTNNACGT" * 7, "A"])
def test_round_trip(tok, seq):
    ids = tok(seq)["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id and len(ids) == len(seq) + 2
    assert tok.decode(ids, skip_special_tokens=True) == seq
    assert tok.decode(ids) == "[CLS]" + seq + "[SEP]"


def test_lowercase_iupac_and_whitespace_are_normalised(tok):
    assert tok.tokenize("acgtn") == list("ACGTN")
    assert tok.tokenize("RYSWKMBDHV") == ["N"] * 10
    assert tok.tokenize("rYsW") == ["N"] * 4
    assert tok.tokenize("AC GT\nA\tC\r\n") == list("ACGTAC")
    assert tok.decode(tok("aCrT")["input_ids"], skip_special_tokens=True) == "ACNT"


@pytest.mark.parametrize(
    "text, char, pos",
    [
        ("ACXT", "X", 2),
        ("ACGU", "U", 3),
        ("u", "u", 0),
        ("AC-GT", "-", 2),
        ("AC GT1", "1", 5),
        ("ACGTé", "é", 4),
    ],
)
def test_invalid_character_names_char_and_position(tok, text, char, pos):
    with pytest.raises(ValueError) as err:
        tok(text)
    assert repr(char) in str(err.value) and f"position {pos}" in str(err.value)


def test_error_position_counts_special_tokens(tok):
    with pytest.raises(ValueError, match="position 9"):
        tok.tokenize("AC[MASK]GZ")


def test_special_tokens_inside_text_are_kept(tok):
    assert tok.tokenize("AC[MASK]GT") == ["A", "C", "[MASK]", "G", "T"]
    assert tok("AC[MASK]GT")["input_ids"] == [2, 5, 6, 4, 7, 8, 3]


@pytest.mark.parametrize("bad", [5, None, b"ACGT", 1.5, {"a": 1}])
def test_non_str_input_raises_type_error(tok, bad):
    with pytest.raises(TypeError, match=type(bad).__name__):
        tok(bad)
    with pytest.raises(TypeError, match=type(bad).__name__):
        tok.tokenize(bad)


def test_offsets_mapping_is_an_error_not_dropped(tok, tok3):
    """The Python tokenizer base drops return_offsets_mapping without a word: no key, no error."""
    for t, text in ((tok, "ACGT"), (tok3, ["ACGTAC", "ACG"])):
        with pytest.raises(NotImplementedError, match="return_offsets_mapping=True is not supported"):
            t(text, return_offsets_mapping=True)
    assert "offset_mapping" not in tok("ACGT", return_offsets_mapping=False)


def test_empty_string(tok, tok3):
    assert tok.tokenize("") == []
    assert tok("")["input_ids"] == [tok.cls_token_id, tok.sep_token_id]
    assert tok3("")["input_ids"] == [tok3.cls_token_id, tok3.sep_token_id]


def test_kmers(tok3):
    assert tok3.tokenize("ACGTACG") == ["ACG", "TAC", "G"]  # remainder as single nucleotides
    assert tok3.tokenize("ACGTAC") == ["ACG", "TAC"]
    assert tok3.tokenize("acNtacGT") == ["NNN", "TAC", "G", "T"]  # any N -> the N k-mer
    assert tok3.tokenize("AC") == ["A", "C"]
    ids = tok3("ACGTACGTA")["input_ids"]
    assert len(ids) == 3 + 2
    assert tok3.decode(ids, skip_special_tokens=True) == "ACGTACGTA"


def test_every_kmer_has_its_own_id():
    tok = DNATokenizer(kmer=2)
    kmers = ["".join(p) for p in itertools.product("ACGT", repeat=2)]
    ids = tok.convert_tokens_to_ids(kmers)
    assert len(set(ids)) == 16 and tok.unk_token_id not in ids


@pytest.mark.parametrize("kmer", [0, 9, -1, 2.0, True, "3"])
def test_bad_kmer(kmer):
    with pytest.raises(ValueError, match="kmer"):
        DNATokenizer(kmer=kmer)


def test_special_tokens_helpers(tok):
    a, b = [5, 6, 7], [8, 9]
    assert tok.build_inputs_with_special_tokens(a) == [2, 5, 6, 7, 3]
    assert tok.build_inputs_with_special_tokens(a, b) == [2, 5, 6, 7, 3, 8, 9, 3]
    assert tok.get_special_tokens_mask(a) == [1, 0, 0, 0, 1]
    assert tok.get_special_tokens_mask(a, b) == [1, 0, 0, 0, 1, 0, 0, 1]
    assert tok.get_special_tokens_mask([2, 5, 3, 0], already_has_special_tokens=True) == [1, 0, 1, 1]
    assert tok.create_token_type_ids_from_sequences(a) == [0] * 5
    assert tok.create_token_type_ids_from_sequences(a, b) == [0] * 5 + [1] * 3
    enc = tok("ACG", "TN", return_token_type_ids=True, return_special_tokens_mask=True)
    assert enc["input_ids"] == [2, 5, 6, 7, 3, 8, 9, 3]
    assert enc["token_type_ids"] == [0] * 5 + [1] * 3
    assert enc["special_tokens_mask"] == [1, 0, 0, 0, 1, 0, 0, 1]


def test_batch_padding(tok):
    enc = tok(["ACGT", "A"], padding=True)
    assert enc["input_ids"] == [[2, 5, 6, 7, 8, 3], [2, 5, 3, 0, 0, 0]]
    assert enc["attention_mask"] == [[1] * 6, [1, 1, 1, 0, 0, 0]]
    assert tok.model_input_names == ["input_ids", "attention_mask"]


def test_decode_rejects_unknown_id(tok):
    with pytest.raises(ValueError, match="token id 10"):
        tok.decode([10])


@pytest.mark.parametrize("kmer", [1, 3])
def test_save_and_load(tmp_path, kmer):
    tok = DNATokenizer(kmer=kmer)
    files = tok.save_pretrained(tmp_path)
    assert any(str(f).endswith("vocab.txt") for f in files)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["kmer"] == kmer and config["tokenizer_class"] == "DNATokenizer"
    loaded = DNATokenizer.from_pretrained(tmp_path)
    assert loaded.kmer == kmer and loaded.get_vocab() == tok.get_vocab()
    seq = "ACGTNacgtaGGC"
    assert loaded(seq)["input_ids"] == tok(seq)["input_ids"]
    assert loaded.mask_token == "[MASK]" and loaded.mask_token_id == 4


def test_vocab_file_mismatch_is_an_error(tmp_path):
    (path,) = DNATokenizer(kmer=2).save_vocabulary(str(tmp_path))
    assert DNATokenizer(vocab_file=path, kmer=2).kmer == 2
    with pytest.raises(ValueError, match="vocab.txt:11"):
        DNATokenizer(vocab_file=path, kmer=3)


def test_save_vocabulary_prefix_and_bad_directory(tmp_path, tok):
    (path,) = tok.save_vocabulary(str(tmp_path), filename_prefix="dna")
    assert path.endswith("dna-vocab.txt")
    assert open(path).read().split() == SPECIALS + list("ACGTN")
    with pytest.raises(ValueError, match="save_directory"):
        tok.save_vocabulary(str(tmp_path / "missing"))


@pytest.mark.parametrize(
    "seq, rc",
    [
        ("ACGT", "ACGT"),
        ("AACG", "CGTT"),
        ("acgtN", "Nacgt"),
        ("RYSWKMBDHV", "BDHVKMWSRY"),
        ("gAtTaCa", "tGtAaTc"),
        ("", ""),
    ],
)
def test_reverse_complement(tok, seq, rc):
    assert reverse_complement(seq) == rc
    assert tok.reverse_complement(seq) == rc


def test_reverse_complement_is_an_involution():
    alphabet = "ACGTNRYSWKMBDHVacgtnryswkmbdhv"
    for seq in [alphabet, alphabet[::-1], "A", "GATTACAnnRY"]:
        assert reverse_complement(reverse_complement(seq)) == seq
        assert len(reverse_complement(seq)) == len(seq)


def test_reverse_complement_errors():
    with pytest.raises(ValueError, match=r"'U' at position 2"):
        reverse_complement("ACUG")
    with pytest.raises(ValueError, match=r"' ' at position 1"):
        reverse_complement("A C")
    for bad in (None, 3, b"ACGT"):
        with pytest.raises(TypeError, match=type(bad).__name__):
            reverse_complement(bad)


@pytest.mark.parametrize("kmer", [1, 3])
def test_registered_with_autotokenizer(tmp_path, kmer):
    """``import hf_sparse`` registers DNATokenizer: a tokenizer-only folder and a motif model folder load
    through AutoTokenizer, and the saved files carry its module and ``auto_map`` for remote code."""
    from transformers import AutoTokenizer

    import hf_sparse  # noqa: F401
    from tests.models.motif_tiny import motif_model

    DNATokenizer(kmer=kmer, model_max_length=130).save_pretrained(tmp_path / "tok")
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "DNATokenizer" and config["kmer"] == kmer
    assert config["auto_map"]["AutoTokenizer"] == ["tokenization_dna.DNATokenizer", None]
    assert (tmp_path / "tok" / "tokenization_dna.py").is_file()
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert type(loaded) is DNATokenizer and loaded.kmer == kmer and loaded.model_max_length == 130
    assert loaded("acgtac")["input_ids"] == DNATokenizer(kmer=kmer)("ACGTAC")["input_ids"]

    folder = tmp_path / "model"
    motif_model().save_pretrained(folder)
    DNATokenizer(kmer=kmer).save_pretrained(folder)
    assert type(AutoTokenizer.from_pretrained(folder)) is DNATokenizer
