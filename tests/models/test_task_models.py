"""Contracts every task model keeps, as any transformers model does (table-driven: one row per task model and
backbone): ``config.output_attentions`` / ``output_hidden_states`` / ``return_dict`` (also set through
``from_pretrained(path, output_hidden_states=True)``), a round trip after ``resize_token_embeddings``, and
``_no_split_modules`` that name modules the model has (FSDP's auto-wrap raises on a name it cannot find)."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from accelerate.utils.dataclasses import get_module_class_from_name

from tests.models import dialogue_tiny, summarization_tiny
from tests.models.motif_tiny import motif_model


def _motif(kind):
    def build():
        model = motif_model(kind)
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(5, 9, (2, 40), generator=g)
        ids[:, 0] = 2
        mask = torch.ones_like(ids)
        mask[1, 30:] = 0
        return model, {"input_ids": ids, "attention_mask": mask}, "logits"

    return build


def _dialogue(kind):
    def build():
        tok, fmt = dialogue_tiny.tokenizer_and_formatter(max_length=64)
        model = dialogue_tiny.tiny_model(tok, fmt, kind=kind).eval()
        d = dialogue_tiny.synthetic_dialogues(1, seed=1)[0]
        enc = fmt.encode_dialogue(d["speakers"], d["turns"])
        keys = ("input_ids", "attention_mask", "global_attention_mask", "turn_positions")
        inputs = {k: torch.as_tensor(enc[k])[None] for k in keys}  # one dialogue, (1, ...)
        return model, inputs, "act_logits"

    return build


def _extractive(kind):
    def build():
        tok = summarization_tiny.tiny_tokenizer()
        model = summarization_tiny.tiny_extractive(tok, kind, sentence_features=[])
        sent = tok.convert_tokens_to_ids("<sent>")
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(10, len(tok), (2, 48), generator=g)
        ids[:, 0] = tok.bos_token_id
        ids[:, [1, 12, 30]] = sent
        return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, "logits"

    return build


MODELS = {
    "motif-sparse": _motif("sparse_transformer"),
    "motif-longformer": _motif("longformer"),
    "dialogue-sparse": _dialogue("sparse_transformer"),
    "dialogue-longformer": _dialogue("longformer"),
    "extractive-sparse": _extractive("sparse_transformer"),
    "extractive-longformer": _extractive("longformer"),
}


@pytest.fixture(params=list(MODELS))
def built(request):
    torch.manual_seed(0)
    return MODELS[request.param]()


def test_config_output_flags_are_honoured(built):
    model, inputs, _ = built
    layers = model.config.backbone["num_hidden_layers"]
    with torch.no_grad():
        plain = model(**inputs)
        assert plain.hidden_states is None and plain.attentions is None
        model.config.output_hidden_states = True
        model.config.output_attentions = True
        out = model(**inputs)
    assert out.hidden_states is not None and len(out.hidden_states) == layers + 1
    assert out.attentions is not None and len(out.attentions) == layers
    with torch.no_grad():  # an explicit argument wins over the config
        out = model(**inputs, output_hidden_states=False, output_attentions=False)
    assert out.hidden_states is None and out.attentions is None


def test_from_pretrained_kwargs_set_output_flags(built, tmp_path):
    model, inputs, _ = built
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path, output_hidden_states=True).eval()
    with torch.no_grad():
        out = loaded(**inputs)
    assert (
        out.hidden_states is not None
        and len(out.hidden_states) == model.config.backbone["num_hidden_layers"] + 1
    )


def test_config_return_dict_false_gives_a_tuple(built):
    model, inputs, key = built
    with torch.no_grad():
        ref = getattr(model(**inputs), key)
        model.config.return_dict = False
        out = model(**inputs)
    assert isinstance(out, tuple)
    torch.testing.assert_close(out[0], ref)


def test_resized_embeddings_round_trip(built, tmp_path):
    model, inputs, key = built
    old = model.config.backbone["vocab_size"]
    model.resize_token_embeddings(old + 3)
    assert model.config.backbone["vocab_size"] == old + 3
    assert model.get_input_embeddings().weight.shape[0] == old + 3
    model.save_pretrained(tmp_path)
    # before: RuntimeError (size mismatch): config.backbone kept the old vocab_size
    loaded = type(model).from_pretrained(tmp_path).eval()
    assert loaded.get_input_embeddings().weight.shape[0] == old + 3
    torch.testing.assert_close(loaded.get_input_embeddings().weight, model.get_input_embeddings().weight)
    inputs = dict(inputs, input_ids=inputs["input_ids"].clone())
    inputs["input_ids"][0, 5] = old + 2  # a new token
    with torch.no_grad():
        torch.testing.assert_close(getattr(loaded(**inputs), key), getattr(model.eval()(**inputs), key))


def test_task_model_from_a_backbone_checkpoint(built, tmp_path):
    """``TaskModel.from_pretrained(<encoder checkpoint>, **task arguments)`` loads the encoder's weights and reports
    the heads missing (as BERT -> BertForSequenceClassification)."""
    model, inputs, _ = built
    model.backbone.save_pretrained(tmp_path)
    params = inspect.signature(type(model.config).__init__).parameters
    task = {
        k: v for k, v in model.config.to_dict().items() if k in params and k not in ("backbone", "kwargs")
    }
    loaded, info = type(model).from_pretrained(tmp_path, output_loading_info=True, **task)
    assert loaded.config.backbone["model_type"] == model.config.backbone["model_type"]
    for name, p in model.backbone.state_dict().items():
        torch.testing.assert_close(loaded.backbone.state_dict()[name], p, msg=name)
    assert info["missing_keys"] and all(not k.startswith("backbone.") for k in info["missing_keys"])


def test_vocab_size_reads_the_backbone(built):
    model, _, _ = built
    assert model.config.vocab_size == model.config.backbone["vocab_size"]


def test_no_split_modules_name_modules_of_the_model(built):
    """accelerate's FSDP auto-wrap looks every ``_no_split_modules`` name up in the model and raises on a miss."""
    model, _, _ = built
    names = list(model._no_split_modules)
    assert names
    missing = [n for n in names if get_module_class_from_name(model, n) is None]
    assert not missing, f"{type(model).__name__}._no_split_modules names {missing}, not in the model"
    layer = {"longformer": "LongformerLayer", "sparse_transformer": "SparseTransformerLayer"}
    assert layer[model.config.backbone["model_type"]] in names  # each encoder layer is one FSDP unit


def test_led_summarizer_no_split_modules_and_output_flags(tmp_path):
    tok = summarization_tiny.tiny_tokenizer()
    model = summarization_tiny.tiny_led(tok)
    missing = [n for n in (model._no_split_modules or ()) if get_module_class_from_name(model, n) is None]
    assert not missing
    ids = torch.randint(10, len(tok), (2, 20))
    dec = torch.randint(10, len(tok), (2, 5))
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path, output_hidden_states=True).eval()
    with torch.no_grad():
        out = loaded(input_ids=ids, decoder_input_ids=dec)
    assert out.encoder_hidden_states is not None and out.decoder_hidden_states is not None


@pytest.mark.parametrize("requested", [None, "eager"])
def test_a_sparse_backbone_runs_the_attention_implementation_asked_for(requested):
    """Asked for at construction (or at load), the implementation reaches the SparseTransformer backbone; left unset,
    the backbone keeps "hf_sparse", also when the same config builds a second model."""
    model = motif_model("sparse_transformer")
    config = model.config.__class__.from_dict(model.config.to_dict())
    if requested is not None:
        config._attn_implementation = requested
    for _ in range(2):  # the first model's resolution must not leak into the second through the config
        assert type(model)(config).backbone.config._attn_implementation == (requested or "hf_sparse")


LABELS = {  # labels for the head each builder reads
    "motif": lambda model, inputs: {"labels": torch.zeros_like(inputs["input_ids"])},
    "dialogue": lambda model, inputs: {
        "act_labels": torch.zeros(*inputs["turn_positions"].shape, len(model.config.act_labels))
    },
    "extractive": lambda model, inputs: {"labels": torch.tensor([[1, 0, 0], [0, 1, 0]])},
}


@pytest.mark.parametrize("name", ["motif-sparse", "dialogue-sparse", "extractive-sparse"])
def test_a_moe_backbone_adds_its_router_losses(name):
    """As the SparseTransformer heads do (README): before, the task models left the router losses out, and the
    routers' load balancing trained nothing."""
    torch.manual_seed(0)
    model, inputs, _ = MODELS[name]()
    config = copy.deepcopy(model.config)
    moe = dict(num_experts=4, num_experts_per_tok=1, router_aux_loss_coef=0.5, router_z_loss_coef=0.25)
    config.backbone = {**config.backbone, **moe}
    model = type(model)(config).eval()
    inputs = {**inputs, **LABELS[name.split("-")[0]](model, inputs)}
    encoder = []
    model.backbone.register_forward_hook(lambda module, args, out: encoder.append(out))
    with torch.no_grad():
        loss = model(**inputs).loss
        model.backbone.config.router_aux_loss_coef = model.backbone.config.router_z_loss_coef = 0.0
        task_loss = model(**inputs).loss
    aux, z = encoder[0].aux_loss, encoder[0].router_z_loss
    assert aux > 0 and z > 0
    torch.testing.assert_close(loss, task_loss + 0.5 * aux + 0.25 * z)


def test_default_lora_targets_adapt_the_global_projections(built):
    """The heads read global tokens ([CLS], [RSP], turn separators, sentence markers), whose outputs come from
    ``query_global`` / ``key_global`` / ``value_global``: before, the default targets (``query``, ``value``) left
    them frozen, and the extractive summarizer's last-layer adapters got no gradient at all."""
    from peft import LoraConfig, get_peft_model

    from hf_sparse.training.tasks import Task

    model, inputs, key = built
    targets = Task().lora_target_modules(model)  # what the runner's lora: true adapts
    assert {"query_global", "key_global", "value_global"} <= set(targets)
    model = get_peft_model(model, LoraConfig(r=2))  # peft's default targets for the model type
    getattr(model(**inputs), key).float().square().sum().backward()
    last = model.config.backbone["num_hidden_layers"] - 1
    grads = {
        name.split(".")[-4]: p.grad
        for name, p in model.named_parameters()
        if f"layer.{last}." in name and "lora_B" in name
    }
    if model.config.backbone["model_type"] == "longformer" or model.config.backbone.get("global_projections"):
        assert {"query_global", "key_global", "value_global"} <= set(grads)
        assert all(
            grads[m] is not None and grads[m].abs().sum() > 0 for m in ("query_global", "value_global")
        )
