"""Summarization on text outside a-z0-9: rouge_score's tokenizer keeps only a-z and 0-9, so Russian (or Chinese)
documents had no ROUGE token: the greedy oracle labelled nothing (the model trained on nothing) and even a
perfect summary scored 0, silently. Now such a training split is an error saying why, and
``rouge_tokenizer: unicode`` scores the letters and digits of every script (the same tokens on ASCII text)."""

import random
import string

import pytest

import hf_sparse.metrics
from hf_sparse.tasks.summarization.metrics import oracle_labels
from hf_sparse.tasks.summarization.rouge import rouge, rouge_tokenize, unicode_words
from hf_sparse.training import run
from hf_sparse.utils.io import write_jsonl

RUSSIAN = ["Кошка сидит на ковре.", "Собака громко лает во дворе.", "Птица поёт рано утром."]
WORDS = "кошка собака птица дом лес река утро вечер город поле".split()


def test_unicode_tokenizer_keeps_every_script_and_matches_rouge_score_on_ascii():
    assert rouge_tokenize(RUSSIAN[0]) == []  # rouge_score's: a-z0-9 only
    assert rouge_tokenize(RUSSIAN[0], tokenizer="unicode") == ["кошка", "сидит", "на", "ковре"]
    assert unicode_words("हिन्दी भाषा, 東京に café_2") == ["हिन्दी", "भाषा", "東", "京", "に", "café", "2"]
    rng = random.Random(0)
    for _ in range(300):  # ASCII text: the same tokens, stemmed or not (English scores do not change)
        text = "".join(rng.choice(string.printable) for _ in range(40)) + " Running cats' don't"
        for stem in (True, False):
            assert rouge_tokenize(text, stem, tokenizer="unicode") == rouge_tokenize(text, stem)
    with pytest.raises(ValueError, match="tokenizer must be one of"):
        rouge_tokenize("text", tokenizer="icu")


def test_unicode_rouge_and_oracle_on_russian():
    assert rouge([RUSSIAN[0]], [[RUSSIAN[0]]])["rouge1"] == 0.0
    assert rouge([RUSSIAN[0]], [[RUSSIAN[0]]], tokenizer="unicode")["rouge2"] == 1.0
    metric = hf_sparse.metrics.load("rouge")
    assert (
        metric.compute(predictions=[RUSSIAN[1]], references=[RUSSIAN[1]], tokenizer="unicode")["rougeL"]
        == 1.0
    )
    assert oracle_labels(RUSSIAN, [RUSSIAN[0]], 1, "rouge2").tolist() == [0, 0, 0]
    assert oracle_labels(RUSSIAN, [RUSSIAN[0]], 1, "rouge2", tokenizer="unicode").tolist() == [1, 0, 0]


def _russian_data(folder):
    rng = random.Random(0)

    def row():
        sentences = [" ".join(rng.choice(WORDS) for _ in range(6)).capitalize() + "." for _ in range(6)]
        return {"document": " ".join(sentences), "summary": sentences[1]}

    write_jsonl(folder / "train.jsonl", [row() for _ in range(6)])
    write_jsonl(folder / "validation.jsonl", [row() for _ in range(3)])
    return str(folder)


def _recipe(tmp_path, task, **extra):
    recipe = dict(task=task, data_dir=_russian_data(tmp_path / "data"), output_dir=str(tmp_path / "out"),
                  vocab_min_frequency=1, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=32, attention_window=16, max_steps=1, per_device_train_batch_size=2,
                  per_device_eval_batch_size=2, eval_strategy="no", save_strategy="no", report_to=[], plots=False,
                  model_card=False, use_cpu=True, disable_tqdm=True)  # fmt: skip
    if task == "extractive-summarization":
        recipe.update(max_length=128)
    else:
        recipe.update(
            max_source_length=64,
            max_target_length=16,
            decoder_layers=1,
            generation_max_length=8,
            predict_with_generate=True,
        )
    return {**recipe, **extra}


def test_extractive_training_split_without_oracle_sentences_says_why(tmp_path):
    with pytest.raises(ValueError, match=r"^train: the greedy ROUGE oracle \(oracle_metric=rouge2\) selected no "
                       r"sentence of the 6 documents of .*train\.jsonl.*keeps only the letters a-z and the digits "
                       r"0-9.*set rouge_tokenizer: unicode"):  # fmt: skip
        run(_recipe(tmp_path, "extractive-summarization"))


def test_abstractive_references_without_rouge_tokens_say_why(tmp_path):
    with pytest.raises(ValueError, match=r"validation: no reference summary of .*validation\.jsonl has a ROUGE "
                       r"token: .*set rouge_tokenizer: unicode"):  # fmt: skip
        run(_recipe(tmp_path, "abstractive-summarization"))


def test_extractive_with_the_unicode_tokenizer_trains_on_oracle_sentences(tmp_path):
    results = run(_recipe(tmp_path, "extractive-summarization", rouge_tokenizer="unicode"))
    assert (
        results["eval_rouge1"] > 0.1
    )  # three of six sentences picked, one of them would be a perfect summary
