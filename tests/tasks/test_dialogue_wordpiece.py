"""tokenizer_kind: wordpiece builds the same vocabulary in every process (a resumed run and every rank of a
distributed one build it again and must get the ids the model was trained with)."""

import hashlib
import json
import subprocess
import sys

from hf_sparse.tasks.dialogue.data import train_dialogue_tokenizer
from tests.training.helpers import subprocess_env

# many words and merges with equal counts: tokenizers' WordPieceTrainer broke these ties differently each time
TEXTS = [f"w{i} w{i + 1} w{i + 2}" for i in range(0, 300, 3)] * 2 + [f"zz{i}" for i in range(200)]
BUILD = (
    "import hashlib, json, sys\n"
    "from hf_sparse.tasks.dialogue.data import train_dialogue_tokenizer\n"
    "texts = json.loads(sys.argv[1])\n"
    "tok = train_dialogue_tokenizer(texts, kind='wordpiece', min_frequency=1, vocab_size=80)\n"
    "print(hashlib.sha256(json.dumps(sorted(tok.get_vocab().items())).encode()).hexdigest())\n"
)


def _digest(tok) -> str:
    return hashlib.sha256(json.dumps(sorted(tok.get_vocab().items())).encode()).hexdigest()


def test_wordpiece_vocabulary_is_the_same_in_every_build_and_process():
    tok = train_dialogue_tokenizer(TEXTS, kind="wordpiece", min_frequency=1, vocab_size=80)
    again = [
        train_dialogue_tokenizer(TEXTS, kind="wordpiece", min_frequency=1, vocab_size=80) for _ in range(3)
    ]
    assert [t.get_vocab() for t in again] == [tok.get_vocab()] * 3
    env = {**subprocess_env(), "PYTHONHASHSEED": "7"}
    other = subprocess.run(
        [sys.executable, "-c", BUILD, json.dumps(TEXTS)], capture_output=True, text=True, env=env, check=True
    )
    assert other.stdout.split()[-1] == _digest(tok)


def test_wordpiece_still_splits_words_into_frequent_pieces():
    tok = train_dialogue_tokenizer(["the booking", "the bookings", "a cooking class"] * 3, kind="wordpiece",
                                   min_frequency=2, vocab_size=60)  # fmt: skip
    assert tok.convert_ids_to_tokens([0, 1, 2, 3, 4]) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tok.tokenize("the bookings cookings") == ["the", "bookings", "cooking", "##s"]
    assert tok.tokenize("gas") == ["g", "##as"]  # rare words: pieces, not [UNK]
    assert tok.decode(tok("the cooking")["input_ids"], skip_special_tokens=True) == "the cooking"


def test_wordpiece_vocab_merges_the_most_frequent_pair_first_ties_by_text():
    from hf_sparse.tasks.dialogue.data import wordpiece_vocab

    vocab = wordpiece_vocab({"ab": 3, "cd": 3, "ce": 1}, vocab_size=100, min_frequency=2, specials=["[UNK]"])
    # specials, characters, continuations, then "ab" and "cd" (count 3, a tie: by text); "ce" is seen once
    assert list(vocab) == ["[UNK]", "a", "b", "c", "d", "e", "##b", "##d", "##e", "ab", "cd"]
    capped = wordpiece_vocab({"ab": 3, "cd": 3}, vocab_size=7)
    assert list(capped) == ["a", "b", "c", "d", "##b", "##d", "ab"]
