"""The ``causal-lm`` recipe task: arguments, grouping text into blocks, and the MoE recipe end to end on a
few real ScisummNet papers (trained, evaluated, saved with its card, reloaded with the Auto class)."""

import json
import os

import pytest
import torch
from transformers import AutoModelForCausalLM

import hf_sparse  # noqa: F401
from hf_sparse.tasks.lm.data import group_texts
from hf_sparse.tasks.lm.task import CausalLMArguments
from hf_sparse.training import get_task, load_recipe, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPES = os.path.join(ROOT, "pipelines", "lm")
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
         "block_size": 32, "attention_window": 16, "max_train_documents": 2, "max_eval_documents": 1,
         "max_eval_blocks": 4, "max_steps": 3, "per_device_train_batch_size": 4, "report_to": "none",
         "disable_tqdm": True, "plots": False}  # fmt: skip


def test_task_registered_and_recipes_parse():
    assert get_task("causal-lm").Arguments is CausalLMArguments
    for name in ("dense", "moe"):
        _, args, training = load_recipe(os.path.join(RECIPES, f"{name}.yaml"))
        assert os.path.basename(args.data_dir) == "scisummnet" and training.max_steps > 0
    assert args.model_kwargs["num_experts"] == 4 and args.model_kwargs["num_experts_per_tok"] == 1


@pytest.mark.parametrize(
    "values,match",
    [
        ({"block_size": 0}, "block_size must be a positive int"),
        ({"backbone": "longformer"}, "backbone must be one of \\('sparse_transformer',\\)"),
        ({"text_field": ""}, "text_field must be a non-empty field name"),
        ({"max_eval_blocks": -2}, "max_eval_blocks must be a positive int"),
        (
            {"model_kwargs": {"num_expert": 4}},
            "model_kwargs: 'num_expert' is not a SparseTransformerConfig "
            "argument \\(did you mean 'num_experts'\\?\\)",
        ),
        (
            {"model_kwargs": {"num_experts": 4, "num_experts_per_tok": 8}},
            "num_experts_per_tok must be an int in",
        ),
        # keys the task sets itself: named as such, not "encoder_config() got multiple values"
        (
            {"model_kwargs": {"vocab_size": 100}},
            "model_kwargs: 'vocab_size' is set by the causal-lm task itself \\(the tokenizer's vocabulary size\\)",
        ),
        ({"model_kwargs": {"is_decoder": False}}, "model_kwargs: 'is_decoder' is set by the causal-lm task"),
        ({"model_kwargs": {"eos_token_id": 5}}, "model_kwargs: 'eos_token_id' is set by the causal-lm task"),
        ({"model_kwargs": {"type_vocab_size": 2}}, "model_kwargs: 'type_vocab_size' is set by the causal-lm"),
        # the recipe has no max_position_embeddings: the limit is named by the key that sets it
        (
            {
                "block_size": 64,
                "attention_pattern": {"type": "causal"},
                "model_kwargs": {"adaptive_span": {"max_span": 128}},
            },
            "adaptive_span.max_span=128 is larger than block_size=64$",
        ),
        # with a saved model: its size is its own, and a misspelt key is still one
        (
            {"model_name_or_path": "saved", "hidden_size": 128},
            "hidden_size=128 is a setting of a new model, but model_name_or_path='saved' loads a saved one: remove "
            "hidden_size \\(the saved model keeps its own\\)",
        ),
        (
            {"model_name_or_path": "saved", "attention_backend": "blocked"},
            "remove attention_backend \\(put attention_backend in model_kwargs to change it on the saved model\\)",
        ),
        (
            {"model_name_or_path": "saved", "model_kwargs": {"expert_capacity_factorr": 1.0}},
            "'expert_capacity_factorr' is not a SparseTransformerConfig argument \\(did you mean "
            "'expert_capacity_factor'\\?\\)",
        ),
    ],
)
def test_bad_arguments_rejected(values, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        CausalLMArguments(data_dir=str(tmp_path), **values)


def test_model_kwargs_takes_config_keys(tmp_path):
    kwargs = {
        "num_experts": 2,
        "num_experts_per_tok": 1,
        "rope_theta": 1000.0,
        "attn_implementation": "eager",
    }
    args = CausalLMArguments(data_dir=str(tmp_path), model_kwargs=kwargs)
    assert args.model_kwargs == kwargs


def test_roberta_style_positions_hold_a_whole_block(tmp_path):
    """A roberta-style table skips pad_token_id + 1 rows: the new model's table holds block_size tokens past them
    (it was block_size rows, and the first training step failed at position block_size + 1)."""
    from hf_sparse.models import SparseTransformerForCausalLM

    args = CausalLMArguments(
        data_dir=str(tmp_path), block_size=16, attention_window=8, position_embedding_type="absolute",
        model_kwargs={"position_ids_style": "roberta"},
    )  # fmt: skip
    config = args._config(vocab_size=20, pad_token_id=1)
    assert config.max_position_embeddings == 16 + 2
    model = SparseTransformerForCausalLM(config).eval()
    ids = torch.randint(3, 20, (1, 16))
    with torch.no_grad():
        assert model(ids, labels=ids).loss.isfinite()


def test_model_kwargs_must_be_a_dict(tmp_path):
    with pytest.raises(TypeError, match="model_kwargs must be a dict"):
        CausalLMArguments(data_dir=str(tmp_path), model_kwargs=["num_experts", 4])


def test_group_texts_cuts_the_stream_into_full_blocks():
    out = group_texts({"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]]}, block_size=4)
    assert out["input_ids"] == [[1, 2, 3, 4], [5, 6, 7, 8]]  # token 9 (an incomplete block) is dropped
    assert out["labels"] == out["input_ids"] and out["attention_mask"] == [[1] * 4] * 2


def test_lm_blocks_cut_the_whole_stream_across_map_batches():
    """Blocks are consecutive pieces of the one token stream, across ``datasets.map``'s 1000-document batches:
    only the stream's final remainder is dropped (each batch used to drop its own), and the error for too little
    text says what it tests."""
    from datasets import Dataset

    from hf_sparse.tasks.lm.data import lm_blocks, train_word_tokenizer

    docs = [" ".join(["a", "b", "c"][: 1 + i % 3]) for i in range(2100)]  # three map batches, 4-6 tokens each
    tok = train_word_tokenizer(docs, min_frequency=1)
    rows = Dataset.from_dict({"document": docs})
    stream = [t for d in docs for t in tok(d)["input_ids"] + [tok.eos_token_id]]
    for block_size in (7, 1000, 4096):  # 4096: more than one batch's tokens, fewer than the stream's
        blocks = lm_blocks(rows, tok, block_size)
        assert len(blocks) == len(stream) // block_size, block_size
        assert [t for b in blocks["input_ids"] for t in b] == stream[: len(blocks) * block_size]
    with pytest.raises(
        ValueError, match=f"2100 document\\(s\\) of {len(stream)} tokens .* fewer than block_size"
    ):
        lm_blocks(rows, tok, len(stream) + 1)
    assert len(lm_blocks(rows, tok, len(stream))) == 1


def test_prompts_end_without_eos_and_training_documents_are_closed_by_it(tmp_path):
    """generate() and the text-generation pipeline encode a prompt with the saved tokenizer: it must not end in
    </s> (the model would go on after an ended document), while the training stream still separates documents."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    from hf_sparse.tasks.lm.data import lm_blocks, train_word_tokenizer

    docs = ["the method is new .", "results are good ."]
    train_word_tokenizer(docs, min_frequency=1).save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)  # as the pipeline loads it
    assert tok.convert_ids_to_tokens(tok("the method is")["input_ids"]) == ["<s>", "▁the", "▁method", "▁is"]
    blocks = lm_blocks(Dataset.from_dict({"document": docs}), tok, block_size=12)
    stream = "<s> ▁the ▁method ▁is ▁new ▁ . </s> <s> ▁results ▁are ▁good ▁ . </s>".split()
    assert tok.convert_ids_to_tokens(blocks[0]["input_ids"]) == stream[:12]


def test_word_tokenizer_decodes_the_spaces_between_words(tmp_path):
    """Each word keeps the space before it: decoding gives the text back (lowercased, after one space), and the
    decoded new tokens of a generation start with the space that separates them from the prompt."""
    from transformers import AutoTokenizer

    from hf_sparse.tasks.lm.data import train_word_tokenizer

    docs = ["The method (new) is good.", "results are good, e.g. 3.5 times  better -- don't panic"]
    train_word_tokenizer(docs, min_frequency=1).save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    for doc in docs:
        assert tok.decode(tok(doc)["input_ids"], skip_special_tokens=True) == " " + doc.lower()
    ids = tok("the method is good")["input_ids"]
    assert tok.decode(ids[3:]) == " is good"  # what the pipeline appends to the prompt "the method"


def test_text_generation_pipeline_keeps_word_boundaries(tmp_path):
    """transformers' text-generation pipeline appends the decoded new tokens to the prompt as they are."""
    from transformers import AutoTokenizer, pipeline

    from hf_sparse.models.sparse_transformer import SparseTransformerForCausalLM
    from hf_sparse.tasks.lm.data import train_word_tokenizer
    from tests.models.tiny import tiny_decoder_config

    words = "the method is new results are good".split()
    train_word_tokenizer([" ".join(words)], min_frequency=1).save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    model = SparseTransformerForCausalLM(tiny_decoder_config({"type": "causal"}, vocab_size=len(tok))).eval()
    pipe = pipeline("text-generation", model=model, tokenizer=tok)
    kwargs = {"max_new_tokens": 4, "do_sample": False, "suppress_tokens": tok.all_special_ids}
    text = pipe("the method is", **kwargs)[0]["generated_text"]  # 4 words, none of them special
    assert text.startswith("the method is ") and text.split()[3:] and set(text.split()) <= set(words), text
    assert len(text.split()) == 7, text


def test_lm_metrics_leave_the_model_in_its_mode():
    """lm_metrics evaluates in eval mode and gives the model back as it was (a training loop goes on training)."""
    from types import SimpleNamespace

    from hf_sparse.models.sparse_transformer import SparseTransformerForCausalLM
    from hf_sparse.tasks.lm.task import lm_metrics
    from tests.models.tiny import tiny_decoder_config

    model = SparseTransformerForCausalLM(tiny_decoder_config({"type": "causal"}, hidden_dropout_prob=0.5))
    ids = torch.randint(4, 97, (3, 10), generator=torch.Generator().manual_seed(0))
    blocks = [{"input_ids": b, "attention_mask": torch.ones_like(b), "labels": b} for b in ids]
    trainer = SimpleNamespace(
        get_eval_dataloader=lambda dataset: torch.utils.data.DataLoader(dataset, batch_size=2),
        accelerator=SimpleNamespace(gather_for_metrics=lambda sums: sums),
    )
    for training in (True, False):
        model.train(training)
        metrics = lm_metrics(model, blocks, trainer, "eval")
        assert model.training is training
        with torch.no_grad():
            logits = model.eval()(input_ids=ids).logits[:, :-1]
        expected = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)
        )
        assert metrics["eval_lm_loss"] == pytest.approx(expected.item(), rel=1e-6)  # without dropout


def test_moe_recipe_trains_evaluates_and_saves(shared_data, tmp_path):
    torch.set_num_threads(1)
    out = tmp_path / "lm"
    overrides = [f"data_dir={shared_data}/summarization/scisummnet", f"output_dir={out}"]
    overrides += [f"{k}={v}" for k, v in SMALL.items()]
    results = run(os.path.join(RECIPES, "moe.yaml"), overrides)
    assert results["task"] == "causal-lm" and results["global_step"] == 3
    for split in ("eval", "test"):
        assert results[f"{split}_loss"] > results[f"{split}_lm_loss"] > 0  # the router losses are in the loss
        assert results[f"{split}_perplexity"] == pytest.approx(
            torch.tensor(results[f"{split}_lm_loss"]).exp().item()
        )
    config = json.loads((out / "config.json").read_text())
    assert config["num_experts"] == 4 and config["is_decoder"] and config["auto_map"]["AutoModelForCausalLM"]
    card = (out / "README.md").read_text()
    assert "Causal language model" in card and "AutoModelForCausalLM" in card
    # the card describes the model that was trained: its experts, and its density at the trained block length
    assert "| num_experts | 4 |" in card and "mixture-of-experts feed-forward (4 experts per layer" in card
    assert "| block_size | 32 |" in card and "at 32 tokens" in card
    assert "Adaptive attention span" not in card
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    assert hasattr(model.sparse_transformer.encoder.layer[0], "moe")


def test_lora_trains_the_adaptive_spans(shared_data, tmp_path):
    """LoRA freezes every weight but its adapters; the spans (one per head and layer) train in full by default,
    else the span loss would train nothing and the merged model would keep the initial spans."""
    torch.set_num_threads(1)
    out = tmp_path / "lm"
    overrides = [f"data_dir={shared_data}/summarization/scisummnet", f"output_dir={out}", "lora=true"]
    skip = ("attention_window", "block_size")  # the recipe's max_span (128) needs its 128-token blocks
    overrides += [f"{k}={v}" for k, v in SMALL.items() if k not in skip]
    results = run(os.path.join(RECIPES, "adaptive_span.yaml"), overrides)
    assert results["global_step"] == SMALL["max_steps"]
    from safetensors import safe_open

    with safe_open(str(out / "adapter" / "adapter_model.safetensors"), "pt") as f:
        saved_spans = [k for k in f.keys() if ".adaptive_span." in k]
    assert len(saved_spans) == SMALL["num_hidden_layers"]  # saved with the adapter
    model = AutoModelForCausalLM.from_pretrained(out)  # the merged model
    for layer in model.sparse_transformer.encoder.layer:
        span = layer.attention.self.adaptive_span.span.detach()
        assert not torch.allclose(span, torch.full_like(span, 32 / 128)), span  # moved from `init`
    # a real run's card describes the span (not only a hand-made training_config)
    card = (out / "README.md").read_text()
    assert "Adaptive attention span" in card and "| adaptive_span.max_span | 128 |" in card, card
    assert "at 128 tokens" in card and "experts per layer" not in card


def test_lora_on_the_moe_recipe_trains_the_routers_and_adapts_the_experts(shared_data, tmp_path):
    """With LoRA the routers train in full by default (else the auxiliary and z losses would train nothing), and
    lora_target_parameters puts adapters on the experts' 3D weights (peft's target_parameters)."""
    torch.set_num_threads(1)
    out = tmp_path / "lm"
    overrides = [f"data_dir={shared_data}/summarization/scisummnet", f"output_dir={out}", "lora=true",
                 "lora_target_parameters=[up_proj,down_proj]", "lora_dropout=0"]  # fmt: skip
    overrides += [f"{k}={v}" for k, v in SMALL.items()]
    results = run(os.path.join(RECIPES, "moe.yaml"), overrides)
    assert results["global_step"] == SMALL["max_steps"]
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert config["modules_to_save"] == ["router"] and sorted(config["target_parameters"]) == [
        "down_proj",
        "up_proj",
    ]
    from safetensors import safe_open

    with safe_open(str(out / "adapter" / "adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
    layers = SMALL["num_hidden_layers"]
    assert len([k for k in keys if k.endswith(".moe.router.weight")]) == layers  # saved in full
    adapted = [k for k in keys if ".moe.experts." in k and ".lora_" in k]  # lora_A, lora_B per parameter
    assert len(adapted) == 2 * 2 * layers, adapted
    model = AutoModelForCausalLM.from_pretrained(out)  # the merged model: a plain one
    assert hasattr(model.sparse_transformer.encoder.layer[0], "moe")


@pytest.fixture
def lm_data(tmp_path):
    """A causal-lm data folder: 4 training documents of 300 words; validation.jsonl is the test's."""
    import random

    rng = random.Random(0)
    words = "the model attention sparse token window expert router layer span block data text".split()
    folder = tmp_path / "data"
    folder.mkdir()
    rows = [{"document": " ".join(rng.choice(words) for _ in range(300))} for _ in range(4)]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.mark.parametrize(
    "rows, problem",
    [
        ([{"document": "the model"}], "validation split {file}: 1 document(s) of 4 tokens in all"),
        (
            [{"document": "a b c"}, {"document": "   "}],
            "{file}: row 2: field 'document' must be a non-empty string",
        ),
    ],
)
def test_data_errors_are_one_line_naming_the_file(lm_data, tmp_path, capsys, rows, problem):
    """A validation split too short for one block, or a row without text: the README's one `error:` line and exit
    code 2, not a traceback."""
    from tests.training.helpers import load_finetune_module

    validation = lm_data / "validation.jsonl"
    validation.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = [f"data_dir={lm_data}", f"output_dir={tmp_path / 'out'}", "vocab_min_frequency=1"]
    overrides += [f"{k}={v}" for k, v in SMALL.items() if not k.startswith("max_")]
    capsys.readouterr()
    assert load_finetune_module().main([os.path.join(RECIPES, "dense.yaml"), "--override", *overrides]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after the progress bars
    assert (
        last.startswith("error: ") and problem.format(file=validation) in last and "Traceback" not in err
    ), err


@pytest.fixture
def saved_lm(tmp_path):
    """A tiny saved causal LM with 2 experts and absolute positions for 32 tokens, with its tokenizer."""
    from hf_sparse.models.sparse_transformer import SparseTransformerForCausalLM
    from hf_sparse.tasks.lm.data import train_word_tokenizer
    from tests.models.tiny import tiny_decoder_config

    tok = train_word_tokenizer(["the model attends to the window"], min_frequency=1)
    config = tiny_decoder_config({"type": "causal"}, vocab_size=len(tok), max_position_embeddings=32,
                                 num_experts=2, num_experts_per_tok=1, pad_token_id=tok.pad_token_id)  # fmt: skip
    folder = tmp_path / "saved"
    SparseTransformerForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_saved_model_takes_the_model_kwargs_that_keep_its_weights(saved_lm, tmp_path):
    """model_kwargs of a saved model are applied (the router's coefficients), not silently dropped; the weights
    are the saved ones."""
    from safetensors.torch import load_file

    from hf_sparse.tasks.lm.task import CausalLMTask

    kwargs = {"router_aux_loss_coef": 5.0, "expert_capacity_factor": 1.5, "router_jitter_noise": 0.1}
    args = CausalLMArguments(data_dir=str(tmp_path), model_name_or_path=str(saved_lm), block_size=32,
                             model_kwargs=kwargs)  # fmt: skip
    model = CausalLMTask().build_model(args, None)
    assert {k: getattr(model.config, k) for k in kwargs} == kwargs
    saved = load_file(saved_lm / "model.safetensors")
    assert all(torch.equal(t, saved[k]) for k, t in model.state_dict().items() if k in saved)


@pytest.mark.parametrize(
    "values, match",
    [
        (
            {"model_kwargs": {"num_experts": 4}},
            "model_kwargs: num_experts=4 would change the weights of the saved model .* \\(num_experts=2 there\\)",
        ),
        ({"model_kwargs": {"hidden_size": 64}}, "model_kwargs: hidden_size=64 would change the weights"),
        (
            {"model_kwargs": {"adaptive_span": {"max_span": 16}}},
            "model_kwargs: adaptive_span=.* would change",
        ),
        # untying adds an LM head the saved model has no weights for (it would start random)
        (
            {"model_kwargs": {"tie_word_embeddings": False}},
            "model_kwargs: tie_word_embeddings=False would change",
        ),
        # absolute positions for 32 tokens: a 128-token block would fail at the first training step
        (
            {"block_size": 128},
            "block_size=128 is longer than the saved model .* can read: its absolute positions stop at 32 tokens "
            "\\(max_position_embeddings=32\\); lower block_size to at most 32",
        ),
    ],
)
def test_saved_model_keeps_its_size(saved_lm, tmp_path, values, match):
    from hf_sparse.tasks.lm.task import CausalLMTask

    args = CausalLMArguments(
        data_dir=str(tmp_path), model_name_or_path=str(saved_lm), **{"block_size": 32, **values}
    )
    with pytest.raises(ValueError, match=match):
        CausalLMTask().build_model(args, None)


@pytest.fixture
def saved_span_lm(tmp_path):
    """A tiny saved causal LM with 2 experts (top-1) and an adaptive span (max_span 16, ramp 4)."""
    from hf_sparse.models.sparse_transformer import SparseTransformerForCausalLM
    from tests.models.tiny import tiny_decoder_config

    config = tiny_decoder_config({"type": "causal"}, max_position_embeddings=32, num_experts=2,
                                 num_experts_per_tok=1, adaptive_span={"max_span": 16, "ramp": 4, "init": 8})  # fmt: skip
    SparseTransformerForCausalLM(config).save_pretrained(tmp_path / "saved")
    return tmp_path / "saved"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        # same shapes, other meaning: every learned span would be rescaled
        ({"adaptive_span": {"max_span": 8}}, "adaptive_span.max_span=8 would change what the weights .* mean "
         "\\(adaptive_span.max_span=16 there\\)"),
        ({"adaptive_span": {"ramp": 2, "loss_coef": 0.1}}, "adaptive_span.ramp=2 would change .*\\(adaptive_span.ramp=4"),
        ({"num_experts_per_tok": 2}, "num_experts_per_tok=2 would change what .* \\(num_experts_per_tok=1 there\\)"),
        ({"norm_topk_prob": False}, "norm_topk_prob=False would change what .* \\(norm_topk_prob=True there\\)"),
        ({"hidden_act": "relu"}, "hidden_act='relu' would change what the weights"),
        ({"layer_norm_eps": 0.1}, "layer_norm_eps=0.1 would change what the weights"),
    ],
)  # fmt: skip
def test_saved_model_refuses_kwargs_that_change_what_its_weights_mean(saved_span_lm, tmp_path, kwargs, match):
    from hf_sparse.tasks.lm.task import CausalLMTask

    args = CausalLMArguments(data_dir=str(tmp_path), model_name_or_path=str(saved_span_lm), block_size=32,
                             model_kwargs=kwargs)  # fmt: skip
    with pytest.raises(ValueError, match=f"model_kwargs: {match}.*may change only .*router_aux_loss_coef"):
        CausalLMTask().build_model(args, None)


def test_saved_model_takes_the_allowed_kwargs_and_its_own_values(saved_span_lm, tmp_path):
    from hf_sparse.tasks.lm.task import CausalLMTask

    kwargs = {"adaptive_span": {"loss_coef": 0.5, "max_span": 16}, "router_z_loss_coef": 0.5,
              "hidden_dropout_prob": 0.0, "num_experts_per_tok": 1, "attention_backend": "dense"}  # fmt: skip
    args = CausalLMArguments(data_dir=str(tmp_path), model_name_or_path=str(saved_span_lm), block_size=32,
                             model_kwargs=kwargs)  # fmt: skip
    config = CausalLMTask().build_model(args, None).config
    assert config.adaptive_span["loss_coef"] == 0.5 and config.adaptive_span["ramp"] == 4
    assert config.router_z_loss_coef == 0.5 and config.hidden_dropout_prob == 0.0
    assert config.attention_backend == "dense"


def test_block_size_longer_than_a_saved_model_is_a_recipe_error_before_the_data(
    saved_lm, lm_data, tmp_path, capsys
):
    """The README's one error line (exit 2), not a traceback at the first training step."""
    from tests.training.helpers import load_finetune_module

    (lm_data / "validation.jsonl").write_text((lm_data / "train.jsonl").read_text())
    recipe = {"task": "causal-lm", "data_dir": str(lm_data), "model_name_or_path": str(saved_lm),
              "output_dir": str(tmp_path / "out"), "block_size": 64, "max_steps": 1, "report_to": "none"}  # fmt: skip
    path = tmp_path / "r.yaml"
    path.write_text(json.dumps(recipe))
    capsys.readouterr()
    assert load_finetune_module().main([str(path)]) == 2
    err = capsys.readouterr().err
    assert (
        "error: " in err and "block_size=64 is longer than the saved model" in err and "Traceback" not in err
    )
    assert "tokenizing" not in err  # before the data is prepared


def test_gzipped_splits_pass_the_argument_check(tmp_path):
    """The data is read by jsonl_files (.jsonl or .jsonl.gz): the check before it accepts the same folders."""
    import gzip

    from hf_sparse.tasks.lm.task import CausalLMTask

    for split in ("train", "validation"):
        with gzip.open(tmp_path / f"{split}.jsonl.gz", "wt") as f:
            f.write(json.dumps({"document": "the model attends"}) + "\n")
    task = CausalLMTask()
    task.check_arguments(CausalLMArguments(data_dir=str(tmp_path)))
    (tmp_path / "validation.jsonl.gz").unlink()
    with pytest.raises(FileNotFoundError, match="has no validation.jsonl"):
        task.check_arguments(CausalLMArguments(data_dir=str(tmp_path)))


def test_resume_with_other_documents_refuses_the_rebuilt_vocabulary(tmp_path, capsys):
    """The word vocabulary is built from the training documents: resumed with more of them, the same words get
    other ids (as many words: the checkpoint's weights fit). One error line, not a run that silently trains every
    embedding row on another word."""
    from tests.training.helpers import load_finetune_module

    data = tmp_path / "data"
    data.mkdir()
    docs = ["alpha alpha beta"] * 20 + ["beta beta beta"] * 20  # alpha first in 20 documents, beta in 40
    for split in ("train", "validation"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps({"document": d}) + "\n" for d in docs))
    overrides = [f"data_dir={data}", f"output_dir={tmp_path / 'out'}", "vocab_min_frequency=1", "max_steps=1",
                 "save_strategy=steps", "save_steps=1", "block_size=8", "attention_window=8", "model_card=false"]  # fmt: skip
    overrides += [f"{k}={v}" for k, v in SMALL.items() if k in ("hidden_size", "num_hidden_layers",
                  "num_attention_heads", "intermediate_size", "report_to", "disable_tqdm", "plots")]  # fmt: skip
    finetune = load_finetune_module()
    recipe = os.path.join(RECIPES, "dense.yaml")
    assert finetune.main([recipe, "--override", *overrides, "max_train_documents=20"]) == 0
    capsys.readouterr()
    assert finetune.main([recipe, "--resume", "--override", *overrides, "max_train_documents=40"]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert (
        "the tokenizer built now differs from the one it was trained with (6 tokens in the checkpoint, 6 now; "
        "2 with another id, e.g. '▁alpha' 4 in the checkpoint, 5 now)"
    ) in last, last
    assert "Traceback" not in err
