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


def test_model_kwargs_must_be_a_dict(tmp_path):
    with pytest.raises(TypeError, match="model_kwargs must be a dict"):
        CausalLMArguments(data_dir=str(tmp_path), model_kwargs=["num_experts", 4])


def test_group_texts_cuts_the_stream_into_full_blocks():
    out = group_texts({"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]]}, block_size=4)
    assert out["input_ids"] == [[1, 2, 3, 4], [5, 6, 7, 8]]  # token 9 (an incomplete block) is dropped
    assert out["labels"] == out["input_ids"] and out["attention_mask"] == [[1] * 4] * 2


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
