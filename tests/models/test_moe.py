"""The sparse mixture-of-experts feed-forward of SparseTransformer (``moe_sparse_transformer``): routing,
auxiliary losses, capacity, every head, generation, gradient checkpointing, LoRA on the experts, save/load
and the remote-code bundle. Tiny configs; CPU."""

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from hf_sparse.models.sparse_transformer import (
    SparseTransformerConfig,
    SparseTransformerForCausalLM,
    SparseTransformerForMaskedLM,
    SparseTransformerForMultipleChoice,
    SparseTransformerForQuestionAnswering,
    SparseTransformerForSequenceClassification,
    SparseTransformerForTokenClassification,
    SparseTransformerModel,
)
from hf_sparse.models.sparse_transformer.moe_sparse_transformer import (
    SparseTransformerMoeFeedForward,
    capacity_keep,
    count_parameters,
    expert_capacity,
    load_balancing_loss,
)
from tests.models.tiny import set_checkpointing, tiny_config, tiny_decoder_config

CAUSAL = {"type": "sliding_window", "window": 8, "causal": True}
MOE = dict(num_experts=4, num_experts_per_tok=2)


def ids(batch=2, n=13, seed=0):
    return torch.randint(2, 97, (batch, n), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_experts=-1), "num_experts must be an int >= 0"),
        (dict(num_experts=2.0), "num_experts must be an int >= 0"),
        (dict(num_experts=4, num_experts_per_tok=0), "num_experts_per_tok must be an int in \\[1, num_experts=4\\]"),
        (dict(num_experts=4, num_experts_per_tok=5), "num_experts_per_tok must be an int in \\[1, num_experts=4\\]"),
        (dict(num_experts=4, moe_layer_frequency=0), "moe_layer_frequency must be an int in \\[1, num_hidden_layers=2\\]"),
        (dict(num_experts=4, moe_layer_frequency=[2]), "distinct layer indices in \\[0, 2\\), got \\[2\\]"),
        (dict(num_experts=4, moe_layer_frequency=[0, 0]), "distinct layer indices"),
        (dict(num_experts=4, moe_intermediate_size=0), "moe_intermediate_size must be a positive int"),
        (dict(num_experts=4, router_jitter_noise=-0.1), "router_jitter_noise must be in \\[0, 1\\), got -0.1"),
        (dict(num_experts=4, router_aux_loss_coef=-1.0), "router_aux_loss_coef must be a finite float >= 0, got -1.0"),
        (dict(num_experts=4, router_z_loss_coef="x"), "router_z_loss_coef must be a finite float >= 0"),
        (dict(num_experts=4, expert_capacity_factor=0.0), "expert_capacity_factor must be a finite float > 0 or None"),
        # inf passed "value >= 0": an inf coefficient made the loss inf, an inf capacity overflowed in training
        (dict(num_experts=4, router_aux_loss_coef=float("inf")), "router_aux_loss_coef must be a finite float >= 0, got inf"),
        (dict(num_experts=4, router_z_loss_coef=float("nan")), "router_z_loss_coef must be a finite float >= 0, got nan"),
        (dict(num_experts=4, expert_capacity_factor=float("inf")), "expert_capacity_factor must be a finite float > 0 or None .*got inf"),
        (dict(num_experts=4, norm_topk_prob="yes"), "norm_topk_prob must be a bool"),
        (dict(router_aux_loss_coef=0.5), "router_aux_loss_coef=0.5 given but num_experts=0"),
    ],
)  # fmt: skip
def test_bad_moe_settings_raise_naming_the_key_and_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny_config(**kwargs)


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe_overrides")
    torch.manual_seed(0)
    SparseTransformerForCausalLM(tiny_decoder_config(CAUSAL)).save_pretrained(root / "dense")
    SparseTransformerForCausalLM(tiny_decoder_config(CAUSAL, **MOE)).save_pretrained(root / "moe")
    return root


@pytest.mark.parametrize(
    "saved, kwargs, match",
    [
        ("moe", dict(num_experts_per_tok=8), r"num_experts_per_tok must be an int in \[1, num_experts=4\], got 8"),
        ("moe", dict(expert_capacity_factor=-1.0), "expert_capacity_factor must be a finite float > 0 or None"),
        ("moe", dict(router_aux_loss_coef=float("inf")), "router_aux_loss_coef must be a finite float >= 0, got inf"),
        ("dense", dict(num_experts=4, num_experts_per_tok=5), r"num_experts_per_tok must be an int in \[1, num_experts=4\]"),
        ("dense", dict(num_experts=-2), "num_experts must be an int >= 0"),
        ("dense", dict(num_experts_per_tok=1), "num_experts_per_tok=1 given but num_experts=0"),
    ],
)  # fmt: skip
def test_from_pretrained_overrides_are_checked_before_the_model_is_built(saved_models, saved, kwargs, match):
    """transformers sets ``from_pretrained(path, key=value)`` on the config after its ``__init__``: those values
    went unchecked (top-8 of 4 experts failed in the forward with "selected index k out of range", a capacity
    factor of -1 trained with capacity 1)."""
    with pytest.raises(ValueError, match=match):
        AutoModelForCausalLM.from_pretrained(saved_models / saved, **kwargs)


def test_num_experts_given_to_from_pretrained_of_a_dense_model_gets_the_moe_defaults(saved_models):
    """(It failed with "no attribute 'moe_layer_frequency'".)"""
    model = AutoModelForCausalLM.from_pretrained(saved_models / "dense", num_experts=4)
    assert model.config.num_experts_per_tok == 2 and model.config.moe_layer_frequency == 1
    assert all(model.config.is_moe_layer(i) for i in range(2))
    assert model(ids()).logits.shape == (2, 13, 97)
    model = AutoModelForCausalLM.from_pretrained(saved_models / "dense", num_experts_per_tok=1, num_experts=1)
    assert (model.config.num_experts, model.config.num_experts_per_tok) == (1, 1)


def test_a_config_edited_after_init_is_checked_by_the_model_and_by_save(tmp_path):
    """``config.num_experts_per_tok = 0`` after construction made a model with no experts per token, silently."""
    config = tiny_decoder_config(CAUSAL, **MOE)
    config.num_experts_per_tok = 0
    with pytest.raises(
        ValueError, match=r"num_experts_per_tok must be an int in \[1, num_experts=4\], got 0"
    ):
        SparseTransformerForCausalLM(config)
    with pytest.raises(ValueError, match="num_experts_per_tok must be an int in"):
        config.save_pretrained(tmp_path)


def test_a_dense_config_stores_no_moe_keys_and_keeps_its_weight_names(tmp_path):
    dense = tiny_config()
    assert dense.num_experts == 0 and not any(dense.is_moe_layer(i) for i in range(2))
    saved = dense.to_dict()
    assert not {"num_experts", "num_experts_per_tok", "router_aux_loss_coef", "output_router_logits"} & set(
        saved
    )
    names = set(SparseTransformerModel(dense).state_dict())
    assert "encoder.layer.0.intermediate.dense.weight" in names and not any("moe" in n for n in names)
    # an old config.json (no MoE keys) loads as a dense model, with the same outputs
    model = SparseTransformerModel(dense).eval()
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert "num_experts" not in config
    again = SparseTransformerModel.from_pretrained(tmp_path).eval()
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(again(x).last_hidden_state, model(x).last_hidden_state, rtol=0, atol=0)
        assert again(x, output_router_logits=True).router_logits is None


def test_moe_layers_every_kth_or_listed():
    every_2nd = tiny_config(num_hidden_layers=4, num_experts=2, moe_layer_frequency=2)
    assert [every_2nd.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    listed = tiny_config(num_hidden_layers=4, num_experts=2, moe_layer_frequency=[0, 3])
    assert [listed.is_moe_layer(i) for i in range(4)] == [True, False, False, True]
    model = SparseTransformerModel(listed)
    assert [hasattr(layer, "moe") for layer in model.encoder.layer] == [True, False, False, True]
    again = SparseTransformerConfig.from_dict(listed.to_dict())
    assert again.moe_layer_frequency == [0, 3] and again.num_experts == 2


# ----------------------------------------------------------------------------- routing and experts


def _dense_and_identical_experts(experts_implementation):
    dense = SparseTransformerModel(tiny_config()).eval()
    moe = SparseTransformerModel(tiny_config(num_experts=3, num_experts_per_tok=3)).eval()
    moe.set_experts_implementation(experts_implementation)
    state = dict(dense.state_dict())
    for i in range(2):
        p = f"encoder.layer.{i}."
        up_w, up_b = state.pop(p + "intermediate.dense.weight"), state.pop(p + "intermediate.dense.bias")
        down_w, down_b = state.pop(p + "output.dense.weight"), state.pop(p + "output.dense.bias")
        state[p + "moe.experts.up_proj"] = up_w.expand(3, -1, -1).clone()
        state[p + "moe.experts.up_proj_bias"] = up_b.expand(3, -1).clone()
        state[p + "moe.experts.down_proj"] = down_w.expand(3, -1, -1).clone()
        state[p + "moe.experts.down_proj_bias"] = down_b.expand(3, -1).clone()
        for name in ("weight", "bias"):
            state[p + f"moe.LayerNorm.{name}"] = state.pop(p + f"output.LayerNorm.{name}")
        state[p + "moe.router.weight"] = torch.randn(3, 32)  # any router: the weights sum to 1
    missing, unexpected = moe.load_state_dict(state, strict=True), None
    assert not missing.missing_keys and unexpected is None
    return dense, moe


@pytest.mark.parametrize("implementation", ["eager", "batched_mm", "grouped_mm"])
def test_top_k_all_identical_experts_equals_the_dense_feed_forward(implementation):
    dense, moe = _dense_and_identical_experts(implementation)
    x = ids(3, 21)
    mask = torch.ones_like(x)
    mask[1, 15:] = 0
    with torch.no_grad():
        expected = dense(x, attention_mask=mask).last_hidden_state
        got = moe(x, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_experts_implementations_agree_with_top_2_of_4():
    model = SparseTransformerForCausalLM(tiny_decoder_config(CAUSAL, **MOE)).eval()
    x = ids()
    outs = {}
    for impl in ("eager", "batched_mm", "grouped_mm"):
        model.set_experts_implementation(impl)
        with torch.no_grad():
            outs[impl] = model(x).logits
    torch.testing.assert_close(outs["batched_mm"], outs["eager"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs["grouped_mm"], outs["eager"], rtol=1e-5, atol=1e-5)


def test_router_logits_are_float32_with_renormalised_top_k():
    model = SparseTransformerForCausalLM(tiny_decoder_config(CAUSAL, **MOE)).eval()
    out = model(ids(2, 7), output_router_logits=True)
    assert len(out.router_logits) == 2
    assert all(r.dtype == torch.float32 and r.shape == (14, 4) for r in out.router_logits)
    block = model.sparse_transformer.encoder.layer[0].moe
    _, weights, index = block.router(torch.randn(5, 32))
    assert index.shape == (5, 2) and torch.allclose(weights.sum(-1), torch.ones(5))


def test_count_parameters_counts_k_of_e_experts_as_active():
    model = SparseTransformerForCausalLM(tiny_decoder_config(CAUSAL, num_experts=4, num_experts_per_tok=1))
    total, active = count_parameters(model)
    per_expert = 2 * 32 * 64 + 64 + 32
    assert total == sum(p.numel() for p in model.parameters())
    assert total - active == 2 * 3 * per_expert  # 2 layers, 3 of 4 experts idle per token


# ----------------------------------------------------------------------------- losses


def test_aux_and_z_losses_have_gradients_into_the_router():
    model = SparseTransformerForCausalLM(tiny_decoder_config(CAUSAL, **MOE))
    out = model(ids())
    for loss in (out.aux_loss, out.router_z_loss):
        model.zero_grad()
        loss.backward(retain_graph=True)
        for layer in model.sparse_transformer.encoder.layer:
            grad = layer.moe.router.weight.grad
            assert grad is not None and grad.abs().sum() > 0


def test_every_head_adds_the_scaled_router_losses_to_its_loss():
    x = ids(2, 9)
    heads = [
        (SparseTransformerForMaskedLM, dict(labels=x)),
        (SparseTransformerForSequenceClassification, dict(labels=torch.tensor([0, 2]))),
        (SparseTransformerForTokenClassification, dict(labels=torch.ones_like(x))),
        (SparseTransformerForQuestionAnswering, dict(start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 4]))),
        (SparseTransformerForMultipleChoice, dict(labels=torch.tensor([0, 1]))),
    ]  # fmt: skip
    for cls, labels in heads:
        inputs = (
            dict(input_ids=x[:, None].expand(-1, 2, -1))
            if cls is SparseTransformerForMultipleChoice
            else dict(input_ids=x)
        )
        coefs = dict(router_aux_loss_coef=0.5, router_z_loss_coef=0.25)
        torch.manual_seed(0)
        with_losses = cls(tiny_config(**MOE, **coefs)).eval()
        without = cls(tiny_config(**MOE, router_aux_loss_coef=0.0, router_z_loss_coef=0.0)).eval()
        without.load_state_dict(with_losses.state_dict())
        a, b = with_losses(**inputs, **labels), without(**inputs, **labels)
        expected = b.loss + 0.5 * a.aux_loss + 0.25 * a.router_z_loss
        torch.testing.assert_close(a.loss, expected, msg=cls.__name__)
    decoder = SparseTransformerForCausalLM(tiny_decoder_config(CAUSAL, **MOE, router_z_loss_coef=0.0))
    out = decoder(x, labels=x)
    torch.testing.assert_close(
        out.loss, decoder.loss_function(out.logits, x, vocab_size=97) + 0.01 * out.aux_loss
    )


def test_padding_tokens_do_not_count_in_the_balancing_loss():
    model = SparseTransformerModel(tiny_config(**MOE)).eval()
    x = ids(2, 12)
    mask = torch.ones_like(x)
    mask[0, 8:] = 0
    other = x.clone()
    other[0, 8:] = torch.tensor([5, 6, 7, 8])  # different padding tokens, same real tokens
    with torch.no_grad():
        a = model(x, attention_mask=mask, output_router_logits=True)
        b = model(other, attention_mask=mask, output_router_logits=True)
        # the same real tokens without any padding: row 0 alone (8 tokens) and row 1 alone
        r0 = model(x[:1, :8], output_router_logits=True).router_logits
        r1 = model(x[1:], output_router_logits=True).router_logits
    assert not torch.allclose(
        a.router_logits[0][8:12], b.router_logits[0][8:12]
    )  # padding routed differently
    torch.testing.assert_close(a.aux_loss, b.aux_loss, rtol=0, atol=1e-7)
    torch.testing.assert_close(a.router_z_loss, b.router_z_loss, rtol=0, atol=1e-7)
    unpadded = tuple(torch.cat([l0, l1]) for l0, l1 in zip(r0, r1))
    torch.testing.assert_close(a.aux_loss, load_balancing_loss(unpadded, 4, 2), rtol=1e-6, atol=1e-6)


def test_balancing_loss_matches_transformers_reference():
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    logits = tuple(torch.randn(12, 4, generator=torch.Generator().manual_seed(i)) for i in range(3))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 4:] = 0
    for k in (1, 2):
        expected = load_balancing_loss_func(logits, 4, k, mask)
        torch.testing.assert_close(load_balancing_loss(logits, 4, k, mask), expected)


# ----------------------------------------------------------------------------- capacity


def test_capacity_serves_first_choices_first_then_position_order():
    # 5 tokens, top-2 of 2 experts; token t's first choice is expert t % 2 ... except token 4 (expert 0)
    index = torch.tensor([[0, 1], [1, 0], [0, 1], [1, 0], [0, 1]])
    keep = capacity_keep(index, num_experts=2, capacity=3)
    # expert 0's queue: first choices of tokens 0, 2, 4 (kept), then second choices of tokens 1, 3 (dropped)
    # expert 1's queue: first choices of tokens 1, 3, then second choices of tokens 0 (kept), 2, 4 (dropped)
    assert keep.tolist() == [[True, True], [True, False], [True, False], [True, False], [True, False]]
    mask = torch.tensor([0, 1, 1, 1, 1])  # token 0 is padding: takes no capacity
    keep = capacity_keep(index, num_experts=2, capacity=1, token_mask=mask)
    # first choices: expert 0 serves token 2 (not padding token 0), expert 1 token 1; tokens 3 and 4 are dropped
    assert keep[:, 0].tolist() == [True, True, True, False, False]
    assert expert_capacity(10, 4, 2, 1.0) == 5 and expert_capacity(1, 8, 1, 0.5) == 1


def test_dropped_tokens_pass_through_the_residual_in_training_only():
    config = tiny_config(num_experts=2, num_experts_per_tok=1, expert_capacity_factor=0.25)
    from hf_sparse.models.sparse_transformer.modeling_sparse_transformer import SparseTransformerExperts

    block = SparseTransformerMoeFeedForward(config, SparseTransformerExperts(config))
    torch.nn.init.normal_(block.experts.up_proj)
    torch.nn.init.normal_(block.experts.down_proj)
    torch.nn.init.zeros_(block.experts.up_proj_bias)  # torch.empty until initialised: garbage, sometimes NaN
    torch.nn.init.zeros_(block.experts.down_proj_bias)
    torch.nn.init.zeros_(block.router.weight)
    block.router.weight.data[0] = 1.0  # logits = [sum(x), 0]: route by the sign of each token's sum
    h = torch.randn(1, 16, 32)
    h[0, :, 0] = torch.where(torch.arange(16) % 2 == 0, 50.0, -50.0)  # even tokens to expert 0, odd to 1
    block.train()
    out, _ = block(h)
    capacity = expert_capacity(16, 2, 1, 0.25)  # 2 per expert
    residual_only = block.LayerNorm(h)
    dropped = torch.ones(16, dtype=torch.bool)
    dropped[[0, 2, 1, 3]] = False  # the first `capacity` tokens of each expert, in position order
    assert capacity == 2
    torch.testing.assert_close(out[0, dropped], residual_only[0, dropped])
    assert not torch.allclose(out[0, ~dropped], residual_only[0, ~dropped])
    block.eval()  # inference: every assignment is served
    out, _ = block(h)
    assert not torch.isclose(out[0], residual_only[0]).all(-1).any()


# ----------------------------------------------------------------------------- generation, training


def test_generate_with_cache_equals_without_cache():
    model = SparseTransformerForCausalLM(
        tiny_decoder_config(CAUSAL, **MOE, expert_capacity_factor=1.0)
    ).eval()
    prompt = ids(2, 6)
    a = model.generate(prompt, max_new_tokens=8, do_sample=False, use_cache=True, pad_token_id=0)
    b = model.generate(prompt, max_new_tokens=8, do_sample=False, use_cache=False, pad_token_id=0)
    assert torch.equal(a, b) and a.shape == (2, 14)


def test_gradient_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    model = SparseTransformerForCausalLM(tiny_decoder_config(CAUSAL, **MOE))
    x = ids()
    grads = []
    for checkpointing in (False, True):
        model.zero_grad()
        if checkpointing:
            set_checkpointing(model)
        model.train()
        model(x, labels=x).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and any("router" in n for n in grads[0])
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], msg=name)


def test_lora_on_the_experts_trains_saves_and_loads(tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    torch.manual_seed(0)
    base = SparseTransformerForCausalLM(tiny_decoder_config(CAUSAL, **MOE)).eval()
    x = ids()
    with torch.no_grad():
        before = base(x).logits.clone()
    model = get_peft_model(
        base, LoraConfig(r=4, target_modules=[], target_parameters=["up_proj", "down_proj"])
    )
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("experts" in n and "lora_" in n for n in trainable)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(3):
        model(x, labels=x).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        after = model(x).logits
    assert not torch.allclose(after, before)  # the adapters changed the experts
    model.save_pretrained(tmp_path / "adapter")
    torch.manual_seed(0)
    fresh = SparseTransformerForCausalLM(tiny_decoder_config(CAUSAL, **MOE)).eval()
    loaded = PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(x).logits, after)


# ----------------------------------------------------------------------------- save / load / remote code

REMOTE = """
import sys; sys.modules["hf_sparse"] = None
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
x = torch.load(sys.argv[2])
with torch.no_grad():
    out = model(x, output_router_logits=True)
torch.save({"logits": out.logits, "router_logits": out.router_logits, "module": type(model).__module__}, sys.argv[3])
"""


def test_save_load_and_remote_code_keep_routing_identical(tmp_path):
    config = tiny_decoder_config(
        CAUSAL, num_experts=4, num_experts_per_tok=1, moe_layer_frequency=[1], router_jitter_noise=0.1
    )
    model = SparseTransformerForCausalLM(config).eval()
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    assert saved["num_experts"] == 4 and saved["moe_layer_frequency"] == [1]
    assert (folder / "models_sparse_transformer_moe_sparse_transformer.py").is_file()  # bundled
    x = ids()
    with torch.no_grad():
        expected = model(x, output_router_logits=True)
        again = AutoModelForCausalLM.from_pretrained(folder).eval()(x, output_router_logits=True)
    for a, b in zip(again.router_logits, expected.router_logits, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.save(x, tmp_path / "x.pt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_MODULES_CACHE"] = str(tmp_path / "modules")
    res = subprocess.run(
        [sys.executable, "-c", REMOTE, str(folder), str(tmp_path / "x.pt"), str(tmp_path / "out.pt")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    remote = torch.load(tmp_path / "out.pt")
    assert remote["module"].startswith("transformers_modules")
    assert len(remote["router_logits"]) == 1
    torch.testing.assert_close(remote["router_logits"][0], expected.router_logits[0], rtol=0, atol=0)
    torch.testing.assert_close(remote["logits"], expected.logits, rtol=0, atol=1e-6)
