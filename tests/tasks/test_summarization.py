"""The summarization recipe tasks end to end: extractive on real ScisummNet papers, abstractive on synthetic data
(and, slow, the copy-the-first-sentence sanity task through the pipeline), QMSum queries, SQuALITY references."""

import dataclasses
import json
import os

import numpy as np
import pytest
import torch
from transformers import EvalPrediction, pipeline

import hf_sparse  # noqa: F401
from hf_sparse.tasks.summarization.data import synthetic_copy_documents
from hf_sparse.tasks.summarization.rouge import rouge
from hf_sparse.tasks.summarization.task import AbstractiveArguments, ExtractiveArguments
from hf_sparse.training import get_task, load_recipe, run
from hf_sparse.utils.io import write_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPES = os.path.join(ROOT, "pipelines", "summarization")
SMALL = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
         "report_to": "none", "save_strategy": "no", "disable_tqdm": True, "plots": False}  # fmt: skip


def copy_data(folder, n_train, seed=0):
    os.makedirs(folder, exist_ok=True)
    for split, n, s in (("train", n_train, seed), ("validation", 16, seed + 1), ("test", 16, seed + 2)):
        write_jsonl(os.path.join(folder, f"{split}.jsonl"), synthetic_copy_documents(n, seed=s))
    return str(folder)


def test_tasks_registered_and_recipes_parse():
    assert get_task("extractive-summarization").Arguments is ExtractiveArguments
    assert get_task("abstractive-summarization").Arguments is AbstractiveArguments
    for name, overrides in (("tiny-extractive", []), ("tiny-abstractive", []), ("led-base", ["bf16=false"])):
        _, task_args, training_args = load_recipe(os.path.join(RECIPES, f"{name}.yaml"), overrides)
        assert os.path.basename(task_args.data_dir) == "scisummnet"
    assert task_args.model_name_or_path == "allenai/led-base-16384"
    assert training_args.predict_with_generate


@pytest.mark.parametrize(
    "values,match",
    [
        ({"loss": "hinge"}, "loss must be"),
        ({"eval_max_sentences": None}, "budget"),
        ({"sentence_features": ["nope"]}, "unknown sentence_features"),
        ({"attention_window": 7}, "even"),
        ({"query_mode": "everything"}, "query_mode"),
    ],
)
def test_extractive_arguments_rejected(values, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        ExtractiveArguments(data_dir=str(tmp_path), **values)


def test_abstractive_query_mode_needs_query_globals(tmp_path):
    with pytest.raises(ValueError, match="needs 'query' in global_attention"):
        AbstractiveArguments(data_dir=str(tmp_path), query_mode="specific")


def test_extractive_on_scisummnet_papers(shared_data, tmp_path):
    out = tmp_path / "ext"
    overrides = [f"data_dir={shared_data}/summarization/scisummnet", f"output_dir={out}", "max_train_documents=3",
                 "max_eval_documents=2", "num_train_epochs=1", "max_length=512", "attention_window=16"]  # fmt: skip
    overrides += [f"{k}={v}" for k, v in SMALL.items()]
    results = run(os.path.join(RECIPES, "tiny-extractive.yaml"), overrides)
    for split in ("eval", "test"):
        assert 0.0 < results[f"{split}_rouge1"] < 1.0 and 0.0 <= results[f"{split}_rouge2"] < 1.0
    assert (out / "README.md").is_file() and "Long-document summarization" in (out / "README.md").read_text()
    pipe = pipeline("long-document-summarization", model=str(out), trust_remote_code=True)
    doc = json.loads(open(f"{shared_data}/summarization/scisummnet/test.jsonl").readline())["document"]
    summary = pipe(doc, max_sentences=2)
    assert len(summary["sentences"]) == 2 and summary["chunks"] > 1  # 512-token chunks: a paper needs several


def test_abstractive_backend_without_pattern_is_an_error(tmp_path):
    """LED's own attention has no backend to choose: a recipe's attention_backend would be ignored."""
    with pytest.raises(
        ValueError, match="attention_backend='blocked' has no effect without attention_pattern"
    ):
        AbstractiveArguments(data_dir=str(tmp_path), attention_backend="blocked")
    AbstractiveArguments(
        data_dir=str(tmp_path), attention_backend="blocked", attention_pattern={"type": "causal"}
    )


def test_abstractive_pattern_and_backend_reach_a_saved_model(tmp_path):
    """A recipe that starts from a saved LEDForSummarization with attention_pattern/attention_backend runs its
    encoder on them (they were ignored: the saved model kept LED's own attention)."""
    data = copy_data(tmp_path / "data", 4)
    small = {k: v for k, v in SMALL.items() if k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                      "intermediate_size")}  # fmt: skip
    common = dict(attention_window=8, max_source_length=32, max_target_length=8, max_decoder_positions=16,
                  decoder_layers=1, vocab_min_frequency=1, **small)  # fmt: skip
    task = get_task("abstractive-summarization")()
    args = AbstractiveArguments(data_dir=data, **common)
    tokenizer = task.build_tokenizer(args)
    task.build_model(args, tokenizer).save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    pattern = {"type": "sliding_window", "window": 4}
    again = AbstractiveArguments(data_dir=data, model_name_or_path=str(tmp_path / "saved"), attention_pattern=pattern,
                                 attention_backend="blocked", **common)  # fmt: skip
    model = task.build_model(again, tokenizer)
    assert {**model.config.encoder_attention_pattern, "causal": False} == {**pattern, "causal": False}
    assert model.config.encoder_attention_backend == "blocked"
    assert model.get_encoder().uses_sparse_kernels
    from transformers import LEDConfig, LEDForConditionalGeneration  # a plain LED checkpoint: from_led

    led = LEDConfig(vocab_size=len(tokenizer), d_model=32, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=64,
                    decoder_ffn_dim=64, encoder_attention_heads=2, decoder_attention_heads=2, attention_window=8,
                    max_encoder_position_embeddings=32, max_decoder_position_embeddings=16)  # fmt: skip
    LEDForConditionalGeneration(led).save_pretrained(tmp_path / "led")
    again.model_name_or_path = str(tmp_path / "led")
    model = task.build_model(again, tokenizer)
    assert model.config.encoder_attention_backend == "blocked" and model.get_encoder().uses_sparse_kernels


def test_abstractive_run_reports_generation_rouge_and_truncation(tmp_path):
    data = copy_data(tmp_path / "data", 32)
    results = run(
        os.path.join(RECIPES, "tiny-abstractive.yaml"),
        [f"data_dir={data}", f"output_dir={tmp_path / 'out'}", "num_train_epochs=1", "max_source_length=32",
         "max_target_length=16", "generation_max_length=16", "max_decoder_positions=32", "attention_window=8",
         "vocab_min_frequency=1", "eval_strategy=no", *[f"{k}={v}" for k, v in SMALL.items()]],
    )  # fmt: skip
    assert {"test_rouge1", "test_rouge2", "test_rougeL", "test_rougeLsum", "test_gen_len"} <= set(results)
    assert 0 < results["test_truncated_documents"] <= 16  # 32-token inputs cut the longer documents
    gen = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert gen["max_length"] == 16 and gen["num_beams"] == 2 and gen["no_repeat_ngram_size"] == 3


def test_abstractive_collator_pads_labels_to_the_batch_not_the_window(tmp_path):
    """Only the encoder inputs are padded to the attention window: the decoder runs on the summary's length."""
    data = copy_data(tmp_path / "data", 8)
    args = AbstractiveArguments(data_dir=data, attention_window=64, max_source_length=128, max_target_length=16,
                                max_decoder_positions=32, decoder_layers=1, vocab_min_frequency=1,
                                **{k: v for k, v in SMALL.items() if k in ("hidden_size", "num_hidden_layers",
                                   "num_attention_heads", "intermediate_size")})  # fmt: skip
    task = get_task("abstractive-summarization")()
    tokenizer = task.build_tokenizer(args)
    model = task.build_model(args, tokenizer).eval()
    items = [task.build_datasets(args, tokenizer)["train"][i] for i in range(2)]
    batch = task.data_collator(args, tokenizer)(items)
    assert batch["input_ids"].shape == (2, 64) and batch["attention_mask"].sum() == sum(
        len(f["input_ids"]) for f in items
    )
    longest = max(len(f["labels"]) for f in items)
    assert batch["labels"].shape == (2, longest)  # not 64, past max_decoder_positions=32
    with torch.no_grad():
        assert torch.isfinite(model(**batch).loss)


def test_qmsum_specific_queries_are_query_prefixed(shared_data, tmp_path):
    recipe = {"task": "abstractive-summarization", "data_dir": f"{shared_data}/summarization/qmsum",
              "output_dir": str(tmp_path), "query_mode": "specific", "global_attention": ["first", "query"],
              "max_train_documents": 2, "max_eval_documents": 1, "max_source_length": 256, **SMALL}  # fmt: skip
    _, args, _ = load_recipe(recipe)
    task = get_task("abstractive-summarization")()
    tokenizer = task.build_tokenizer(args)
    model = task.build_model(args, tokenizer)
    datasets = task.build_datasets(args, tokenizer)
    qsep = model.config.query_separator_token_id
    assert model.supports_query and qsep == tokenizer.convert_tokens_to_ids("<query_sep>")
    first = datasets["train"][0]["input_ids"]
    assert first.count(qsep) == 1 and len(first) == 256
    assert len(datasets["train"]) == len(task.data(args)["train"]) > 2  # one example per query of 2 meetings
    assert all(e["query"] for e in task.data(args)["train"]) and task.truncated["train"] == len(
        datasets["train"]
    )
    g = model.default_global_attention_mask(torch.tensor([first]))
    assert int(g.sum()) == first.index(qsep) + 1  # <s>, the query and its separator


@pytest.mark.parametrize("task_name", ["extractive-summarization", "abstractive-summarization"])
def test_specific_queries_that_give_no_example_name_the_split_and_file(tmp_path, task_name):
    """query_mode: specific with every row's specific_queries empty: a split without examples failed later with
    "Column 'sentence_indices' doesn't exist." (extractive) or "Column 'truncated' doesn't exist." (abstractive)."""
    rows = synthetic_copy_documents(3, seed=0)
    for split, queries in (("train", [{"query": "what?", "answer": "an answer"}]), ("validation", [])):
        write_jsonl(tmp_path / f"{split}.jsonl", [{**row, "specific_queries": queries} for row in rows])
    recipe = {"task": task_name, "data_dir": str(tmp_path), "output_dir": str(tmp_path / "out"),
              "query_mode": "specific", "vocab_min_frequency": 1, **SMALL}  # fmt: skip
    if task_name == "abstractive-summarization":
        recipe["global_attention"] = ["first", "query"]
    _, args, _ = load_recipe(recipe)
    task = get_task(task_name)()
    with pytest.raises(ValueError, match=r"^validation: the rows of .*validation\.jsonl gave no example: "
                       r"query_mode='specific' makes one per item of a row's 'specific_queries'"):  # fmt: skip
        tokenizer = task.build_tokenizer(args)
        task.build_model(args, tokenizer)
        task.build_datasets(args, tokenizer)


def test_squality_scores_against_all_references(shared_data, tmp_path):
    recipe = {"task": "abstractive-summarization", "data_dir": f"{shared_data}/summarization/squality",
              "output_dir": str(tmp_path), "max_train_documents": 2, "max_eval_documents": 2,
              "vocab_min_frequency": 1, "max_source_length": 64, **SMALL}  # fmt: skip
    _, args, _ = load_recipe(recipe)
    task = get_task("abstractive-summarization")()
    tokenizer = task.build_tokenizer(args)
    task.build_model(args, tokenizer)
    task.build_datasets(args, tokenizer)
    refs = task.references["validation"]
    assert [len(r) for r in refs] == [4, 4]
    predictions = [refs[0][0], refs[1][0]]  # the first reference of each story, as generated ids
    ids = tokenizer(predictions, padding=True)["input_ids"]
    got = task.compute_metrics(args)(EvalPrediction(predictions=np.array(ids), label_ids=np.array(ids)))
    decoded = [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]
    assert got["rouge1"] == pytest.approx(rouge(decoded, refs)["rouge1"])
    assert got["rouge1"] != pytest.approx(rouge(decoded, [[r[3]] for r in refs])["rouge1"])


@pytest.mark.slow
def test_copy_first_sentence_through_the_pipeline(tmp_path):
    """The tiny abstractive recipe learns to copy the first sentence; the pipeline's generate gets the global
    tokens (first token and sentence markers) the model builds, and ROUGE-L reaches 0.9."""
    data = copy_data(tmp_path / "data", 800)
    out = tmp_path / "out"
    run(
        os.path.join(RECIPES, "tiny-abstractive.yaml"),
        [f"data_dir={data}", f"output_dir={out}", "vocab_min_frequency=1", "max_source_length=256",
         "max_target_length=24", "generation_max_length=24", "max_decoder_positions=32", "attention_window=8",
         "num_train_epochs=10", "per_device_train_batch_size=16", "learning_rate=3e-3", "warmup_steps=10",
         "hidden_dropout_prob=0.0", "no_repeat_ngram_size=0", "eval_strategy=no", "save_strategy=no", "report_to=none",
         "plots=false", "disable_tqdm=true"],
    )  # fmt: skip
    pipe = pipeline("long-document-summarization", model=str(out), trust_remote_code=True)
    rows = synthetic_copy_documents(32, seed=2)
    seen = []
    attn = pipe.model.led.encoder.layers[0].self_attn.longformer_self_attn
    attn.register_forward_pre_hook(
        lambda m, a, kw: seen.append(kw["is_index_global_attn"][0]), with_kwargs=True
    )
    predictions = [o["summary_text"] for o in pipe([r["document"] for r in rows])]
    assert rouge(predictions, [r["summary"] for r in rows])["rougeL"] >= 0.9
    sentence_id = pipe.model.config.sentence_token_id
    for row, g in zip(rows, seen):
        (encoded,) = pipe.preprocess(row["document"])  # abstractive: one model row per document
        ids = encoded["input_ids"][0]
        assert g[0] and int(g.sum()) == 1 + int((ids == sentence_id).sum())  # first token + every marker


def test_extractive_max_eval_and_test_samples_count_documents(tmp_path):
    """An evaluation split holds one row per chunk; max_eval/test_samples keep whole documents (here of several
    chunks each), so the final evaluation scores them instead of failing after training and losing the model."""
    data = copy_data(tmp_path / "data", 8)
    common = [f"data_dir={data}", "max_steps=2", "max_length=32", "attention_window=8", "max_sentence_tokens=8",
              "vocab_min_frequency=1", "eval_strategy=no", *[f"{k}={v}" for k, v in SMALL.items()]]  # fmt: skip
    recipe = os.path.join(RECIPES, "tiny-extractive.yaml")
    results = run(
        recipe, [*common, f"output_dir={tmp_path / 'a'}", "max_eval_samples=3", "max_test_samples=2"]
    )
    assert (tmp_path / "a" / "model.safetensors").is_file()
    same = run(recipe, [*common, f"output_dir={tmp_path / 'b'}", "max_eval_documents=3"])
    assert results["eval_rouge1"] == same["eval_rouge1"] and results["eval_loss"] == same["eval_loss"]


@pytest.mark.parametrize("task_name", ["extractive-summarization", "abstractive-summarization"])
def test_gzipped_splits_pass_the_argument_check(tmp_path, task_name):
    """A folder of train.jsonl.gz / validation.jsonl.gz (what the loader reads) is not rejected before reading."""
    import gzip

    for split in ("train", "validation"):
        with gzip.open(tmp_path / f"{split}.jsonl.gz", "wt") as f:
            f.write("".join(json.dumps(d) + "\n" for d in synthetic_copy_documents(2, seed=0)))
    task = get_task(task_name)()
    args = task.Arguments(data_dir=str(tmp_path))
    task.check_arguments(args)
    assert {split: len(rows) for split, rows in task.data(args).items()} == {"train": 2, "validation": 2}
    (tmp_path / "validation.jsonl.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"data_dir=.* has no validation.jsonl"):
        task.check_arguments(task.Arguments(data_dir=str(tmp_path)))


def test_extractive_lora_trains_the_scorer_and_new_embeddings(tmp_path):
    """With lora: true the new sentence scorer, and the token embeddings of a vocabulary built from the data, train
    in full next to the adapters (LoRA left them frozen at their random initialisation); a saved model's own
    vocabulary stays frozen."""
    from peft import LoraConfig, get_peft_model
    from transformers import LongformerConfig, LongformerModel

    data = copy_data(tmp_path / "data", 4)
    encoder = LongformerConfig(vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64, attention_window=8, max_position_embeddings=130, pad_token_id=1)  # fmt: skip
    LongformerModel(encoder).save_pretrained(tmp_path / "encoder")
    task = get_task("extractive-summarization")()
    args = ExtractiveArguments(
        data_dir=data, model_name_or_path=str(tmp_path / "encoder"), vocab_min_frequency=1
    )
    tokenizer = task.build_tokenizer(args)
    model = task.build_model(args, tokenizer)
    model.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    to_save = task.lora_modules_to_save(model)
    assert to_save == ["scorer", "backbone.embeddings.word_embeddings"]
    lora = get_peft_model(model, LoraConfig(r=2, target_modules=["query", "value"], modules_to_save=to_save))
    trainable = {name for name, p in lora.named_parameters() if p.requires_grad and "lora_" not in name}
    assert any(".scorer." in name for name in trainable) and any(
        "word_embeddings" in name for name in trainable
    )
    again = get_task("extractive-summarization")()
    args.model_name_or_path = str(tmp_path / "saved")
    assert again.lora_modules_to_save(again.build_model(args, again.build_tokenizer(args))) == ["scorer"]


def _led_checkpoint(folder):
    """A tiny LED checkpoint (and tokenizer) whose vocabulary, like LED's, has no summarization marker tokens."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import LEDConfig, LEDForConditionalGeneration, PreTrainedTokenizerFast

    words = [f"w{i}" for i in range(64)] + ["."]
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", "<mask>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer, tok.pre_tokenizer = normalizers.Lowercase(), pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])  # fmt: skip
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", eos_token="</s>",
                                        unk_token="<unk>", mask_token="<mask>")  # fmt: skip
    led = LEDConfig(vocab_size=len(vocab), d_model=32, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=64,
                    decoder_ffn_dim=64, encoder_attention_heads=2, decoder_attention_heads=2, attention_window=8,
                    max_encoder_position_embeddings=64, max_decoder_position_embeddings=32, pad_token_id=1,
                    bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)  # fmt: skip
    LEDForConditionalGeneration(led).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_abstractive_lora_trains_the_marker_rows_from_led_adds(tmp_path, monkeypatch):
    """lora: true on an LED checkpoint left the <sent> / <query_sep> rows that from_led adds at their resize values
    (LED's embeddings and output layer share one weight, which modules_to_save cannot train): peft's trainable tokens
    train those rows alone, tied, into the merged model and the adapter."""
    import copy

    from peft import PeftModel

    from hf_sparse.tasks.summarization.modeling_summarization import LEDForSummarization
    from hf_sparse.tasks.summarization.task import AbstractiveSummarizationTask

    led = _led_checkpoint(tmp_path / "led")
    built = {}
    build_model = AbstractiveSummarizationTask.build_model

    def recording(self, args, tokenizer):
        model = build_model(self, args, tokenizer)
        built.update(model=copy.deepcopy(model), tokenizer=tokenizer)
        return model

    monkeypatch.setattr(AbstractiveSummarizationTask, "build_model", recording)
    out = tmp_path / "out"
    run(os.path.join(RECIPES, "tiny-abstractive.yaml"),
        [f"data_dir={copy_data(tmp_path / 'data', 8)}", f"output_dir={out}", f"model_name_or_path={led}",
         f"tokenizer_name={led}", "global_attention=[first,sentences,query]", "lora=true",
         "lora_target_modules=[q_proj,v_proj]", "max_steps=4", "learning_rate=0.05", "warmup_steps=0",
         "per_device_train_batch_size=2", "max_source_length=64", "max_target_length=16", "generation_max_length=16",
         "max_eval_samples=2", "max_test_samples=2", "eval_strategy=no", "save_strategy=no", "report_to=none",
         "plots=false", "model_card=false", "disable_tqdm=true"])  # fmt: skip
    tokenizer, before = built["tokenizer"], built["model"].get_input_embeddings().weight.detach()
    markers = tokenizer.convert_tokens_to_ids(["<sent>", "<query_sep>"])
    assert markers == [70, 71] and before.shape[0] == 72  # from_led added them to the checkpoint's 70 rows
    merged = LEDForSummarization.from_pretrained(out)
    after = merged.get_input_embeddings().weight.detach()
    assert (after[markers[0]] - before[markers[0]]).abs().max() > 1e-3  # <sent> opens each sentence: trained
    assert torch.equal(after[:70], before[:70])  # the checkpoint's own rows stay frozen
    for tied in (merged.led.encoder.embed_tokens, merged.led.decoder.embed_tokens, merged.lm_head):
        assert torch.equal(tied.weight, merged.led.shared.weight)
    adapter = PeftModel.from_pretrained(built["model"], out / "adapter")  # the unmerged adapter reloads them
    rows = adapter.get_base_model().get_input_embeddings()(torch.tensor(markers))
    assert torch.allclose(rows, after[markers], atol=1e-6)
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert config["trainable_token_indices"] == markers


TINY_ABSTRACTIVE = ["num_train_epochs=1", "max_source_length=32", "max_target_length=16", "generation_max_length=16",
                    "max_decoder_positions=32", "attention_window=8", "vocab_min_frequency=1", "eval_strategy=no",
                    *[f"{k}={v}" for k, v in SMALL.items()]]  # fmt: skip


@pytest.mark.parametrize(
    "override,match",
    [
        ("predict_with_generate=false", "predict_with_generate=False: .* set predict_with_generate: true"),
        ("generation_num_beams=0", "generation_num_beams=0 must be a positive int"),
        (
            "generation_max_length=40",
            r"generation_max_length=40 runs the decoder past .* 32 positions.* <= 33",
        ),
    ],
)
def test_abstractive_generation_settings_are_checked_before_training(tmp_path, override, match):
    """Generation settings that only the evaluation uses fail before the first training step (they failed at the
    first evaluation, after the training: ValueError, ZeroDivisionError)."""
    from hf_sparse.training import RecipeError

    data = copy_data(tmp_path / "data", 4)
    out = tmp_path / "out"
    with pytest.raises(RecipeError, match=match):
        run(os.path.join(RECIPES, "tiny-abstractive.yaml"),
            [f"data_dir={data}", f"output_dir={out}", *TINY_ABSTRACTIVE, override])  # fmt: skip
    assert not out.exists() or not any(out.iterdir())  # nothing trained, nothing written


def test_abstractive_max_target_length_past_the_decoder_positions(tmp_path):
    """Summaries longer than the decoder's position table are an error naming both keys (LED's decoder raised a
    bare IndexError in the first long batch), for a new model and for a loaded LED checkpoint."""
    with pytest.raises(ValueError, match=r"max_target_length=40 .*\(max_decoder_positions=32\)"):
        AbstractiveArguments(data_dir=str(tmp_path), max_target_length=40, max_decoder_positions=32)
    from transformers import LEDConfig, LEDForConditionalGeneration

    data = copy_data(tmp_path / "data", 4)
    led = LEDConfig(vocab_size=300, d_model=32, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=64,
                    decoder_ffn_dim=64, encoder_attention_heads=2, decoder_attention_heads=2, attention_window=8,
                    max_encoder_position_embeddings=32, max_decoder_position_embeddings=16)  # fmt: skip
    LEDForConditionalGeneration(led).save_pretrained(tmp_path / "led")
    args = AbstractiveArguments(data_dir=data, model_name_or_path=str(tmp_path / "led"), max_target_length=24,
                                max_source_length=32, vocab_min_frequency=1)  # fmt: skip
    task = get_task("abstractive-summarization")()
    with pytest.raises(ValueError, match=r"max_target_length=24 .*led's max_decoder_position_embeddings=16"):
        task.build_model(args, task.build_tokenizer(args))


def test_abstractive_truncated_documents_count_the_evaluated_examples(tmp_path):
    """max_eval_samples / max_test_samples: <split>_truncated_documents counts the evaluated examples' truncated
    documents, not the whole split's."""
    data = copy_data(tmp_path / "data", 4)
    args = AbstractiveArguments(data_dir=data, max_source_length=16, max_target_length=8, max_decoder_positions=16,
                                attention_window=8, vocab_min_frequency=1)  # fmt: skip
    task = get_task("abstractive-summarization")()
    tokenizer = task.build_tokenizer(args)
    task.build_model(args, tokenizer)
    datasets = task.build_datasets(args, tokenizer)
    assert task.truncated["validation"] == 16  # every 16-token input is cut
    assert len(task.limit_samples("validation", datasets["validation"], 3)) == 3
    assert task.truncated["validation"] == 3
    task.limit_samples("test", datasets["test"], None)
    assert task.truncated["test"] == 16


@pytest.mark.parametrize("task_name", ["extractive-summarization", "abstractive-summarization"])
def test_model_card_records_the_attention(tmp_path, task_name):
    """The card shows the encoder's attention (the window and the global tokens of global_attention_mask), which
    the models keep in their backbone/LED config, not in config.attention_pattern ("not recorded")."""
    from hf_sparse.hub import render_model_card

    data = copy_data(tmp_path / "data", 4)
    small = {"attention_window": 8, "vocab_min_frequency": 1, "max_source_length": 64, "max_length": 64}
    task = get_task(task_name)()
    small = {k: v for k, v in small.items() if k in {f.name for f in dataclasses.fields(task.Arguments)}}
    args = task.Arguments(data_dir=data, **small)
    task.build_model(args, task.build_tokenizer(args))
    info = task.card_info(args, {})
    assert info["pattern"] == {"type": "longformer", "window": 8}
    assert info["extra"]["global attention"].startswith("first")  # and the markers (extractive)
    card = str(render_model_card(task_name, model_name="tiny", **info))
    assert "| Attention | longformer(window=8) |" in card and "No attention pattern" not in card
    # hf-sparse kernels: the pattern, and Global() for the tokens the model marks global
    sparse = {"backbone": "sparse_transformer"} if task_name == "extractive-summarization" else {}
    args = task.Arguments(
        data_dir=data, attention_pattern={"type": "sliding_window", "window": 4}, **small, **sparse
    )
    task = get_task(task_name)()
    task.build_model(args, task.build_tokenizer(args))
    parts = task.card_info(args, {})["pattern"]["parts"]
    assert parts[0]["window"] == 4 and parts[1] == {"type": "global"}
