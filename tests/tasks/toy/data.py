"""Toy data preparation: balanced sequences of tokens t0..t{n-1}; label 1 iff the target occurs."""

import numpy as np


def build_tokenizer(num_tokens: int):
    """A word-level fast tokenizer over t0..t{n-1} (nothing from the Hub)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(["[PAD]", "[UNK]"] + [f"t{i}" for i in range(num_tokens)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]")


def make_examples(n: int, num_tokens: int, target: int, length: int, seed: int, tokenizer) -> list[dict]:
    """``n`` tokenized examples, alternately without (label 0) and with (label 1) the target token."""
    rng = np.random.default_rng(seed)
    others = [t for t in range(num_tokens) if t != target]
    examples = []
    for i in range(n):
        seq = rng.choice(others, size=length)
        if i % 2:
            seq[rng.integers(length)] = target
        enc = tokenizer(" ".join(f"t{t}" for t in seq))
        examples.append(
            {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": i % 2}
        )
    return examples
