"""LongformerForDialogue: config validation, heads and losses, both backbones, save/reload, remote code."""

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoConfig, AutoModel

from hf_sparse.tasks.dialogue.collator import DialogueTrackingCollator, ResponseSelectionCollator
from hf_sparse.tasks.dialogue.configuration_dialogue import LongformerDialogueConfig
from hf_sparse.tasks.dialogue.data import DialogueLabels, build_selection_examples, build_tracking_examples
from hf_sparse.tasks.dialogue.modeling_dialogue import LongformerForDialogue, span_means
from tests.models.dialogue_tiny import synthetic_dialogues, tiny_model, tokenizer_and_formatter
from tests.pipelines.outputs import assert_same_outputs
from tests.threads import one_torch_thread  # noqa: F401 (autouse)


@pytest.fixture(scope="module")
def tok_fmt():
    return tokenizer_and_formatter(max_length=128)


def selection_batch(tokenizer, formatter, n=3, negatives=4):
    examples = build_selection_examples(
        synthetic_dialogues(n + 6), n_negatives=negatives, formatter=formatter
    )
    return ResponseSelectionCollator(tokenizer.pad_token_id, 16)(examples[:n])


def tracking_batch(tokenizer, formatter, model, n=3):
    dialogues = synthetic_dialogues(n)
    labels = DialogueLabels(
        tuple(model.config.act_labels),
        tuple(model.config.intent_labels),
        frozenset(model.config.intent_labels),
    )
    return DialogueTrackingCollator(tokenizer.pad_token_id, 16)(
        build_tracking_examples(dialogues, formatter, labels)
    )


# ---------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"intent_labels": ["FindRestaurants", "NONE"]}, ValueError, "start with none_intent"),
        ({"act_labels": ["INFORM", "INFORM"]}, ValueError, "act_labels has duplicates"),
        ({"act_labels": "INFORM"}, TypeError, "act_labels must be a list"),
        ({"formatter": {"max_lenght": 64}}, ValueError, "unknown keys"),
        ({"formatter": {"max_length": 10_000}}, ValueError, "exceeds what the backbone can embed"),
        ({"formatter": {"global_on": ["everything"]}}, ValueError, "global_on"),
        ({"selection_head": False}, ValueError, "needs a head"),
        ({"act_threshold": 1.5}, ValueError, "act_threshold"),
        ({"act_labels": ["INFORM"], "act_thresholds": [0.5, 0.5]}, ValueError, "act_thresholds has 2 values"),
        ({"act_labels": ["INFORM"], "act_thresholds": [1.0]}, ValueError, r"act_thresholds\[0\]"),
        ({"user_speaker": "CUSTOMER"}, ValueError, "speaker 'CUSTOMER' has no token"),
        ({"backbone": {"model_type": "bert"}}, ValueError, "backbone model_type"),
        ({"turn_pooling": "mean"}, ValueError, "turn_pooling must be one of"),
    ],
)
def test_config_rejects_bad_arguments(kwargs, error, match):
    base = {
        "backbone": {"model_type": "longformer", "max_position_embeddings": 514},
        "formatter": {"max_length": 512},
    }
    base.update(kwargs)
    with pytest.raises(error, match=match):
        LongformerDialogueConfig(**base)


def test_config_round_trips_through_json(tmp_path, tok_fmt):
    tokenizer, formatter = tok_fmt
    config = tiny_model(tokenizer, formatter).config
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is LongformerDialogueConfig
    assert loaded.formatter == config.formatter and loaded.backbone == config.backbone
    assert loaded.act_labels == config.act_labels and loaded.intent_labels == config.intent_labels


# ---------------------------------------------------------------- heads


@pytest.mark.parametrize("kind", ["longformer", "sparse_transformer"])
def test_selection_head_scores_every_pair_and_trains(kind, tok_fmt):
    tokenizer, formatter = tok_fmt
    model = tiny_model(tokenizer, formatter, kind, selection_head=True)
    batch = selection_batch(tokenizer, formatter)
    out = model(**batch)
    assert out.selection_logits.shape == (3, 5)
    assert out.act_logits is None and out.intent_logits is None
    expected = torch.nn.functional.cross_entropy(out.selection_logits, batch["labels"])
    torch.testing.assert_close(out.loss, expected)
    out.loss.backward()
    assert model.backbone.get_input_embeddings().weight.grad.abs().sum() > 0


def test_selection_score_is_read_at_rsp_and_independent_of_batch(tok_fmt):
    tokenizer, formatter = tok_fmt
    model = tiny_model(tokenizer, formatter, selection_head=True).eval()
    batch = selection_batch(tokenizer, formatter)
    with torch.no_grad():
        together = model(**{k: v for k, v in batch.items() if k != "labels"}).selection_logits
        alone = model(**{k: v[1:2] for k, v in batch.items() if k != "labels"}).selection_logits
    torch.testing.assert_close(alone[0], together[1], rtol=1e-4, atol=1e-5)
    # a candidate's score changes when the candidate's tokens change (it is read after [RSP])
    ids = batch["input_ids"].clone()
    pos = batch["candidate_positions"][0, 0]
    ids[0, 0, pos + 1] = tokenizer.convert_tokens_to_ids("paris")
    with torch.no_grad():
        changed = model(input_ids=ids, attention_mask=batch["attention_mask"],
                        global_attention_mask=batch["global_attention_mask"],
                        candidate_positions=batch["candidate_positions"]).selection_logits  # fmt: skip
    assert not torch.allclose(changed[0, 0], together[0, 0])
    torch.testing.assert_close(changed[1:], together[1:], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["longformer", "sparse_transformer"])
def test_tracking_heads_read_each_turn_and_ignore_unlabelled(kind, tok_fmt):
    tokenizer, formatter = tok_fmt
    model = tiny_model(tokenizer, formatter, kind)
    batch = tracking_batch(tokenizer, formatter, model)
    out = model(**batch)
    assert out.act_logits.shape == (3, 6, len(model.config.act_labels))
    assert out.intent_logits.shape == (3, 6, len(model.config.intent_labels))
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    act = bce(out.act_logits, batch["act_labels"].float(), reduction="sum") / 18  # summed over acts, 18 turns
    keep = batch["intent_labels"] != -100
    intent = torch.nn.functional.cross_entropy(out.intent_logits[keep], batch["intent_labels"][keep])
    assert keep.sum() == 9  # the 3 user turns of 3 dialogues; system turns carry no intent
    torch.testing.assert_close(out.loss, act + intent)
    # unlabelled entries do not move the loss
    batch2 = dict(batch, act_labels=batch["act_labels"].clone())
    batch2["act_labels"][:, 0] = -100
    model.eval()
    with torch.no_grad():
        ref = model(**batch).loss
        masked = model(**batch2).loss
        logits = model(**batch).act_logits
    rest = batch["act_labels"][:, 1:].float()
    expected = bce(logits[:, 1:], rest, reduction="sum") / 15  # turn 0 of each dialogue unlabelled
    assert not torch.allclose(ref, masked)
    intent_eval = torch.nn.functional.cross_entropy(
        model(**batch).intent_logits[keep], batch["intent_labels"][keep]
    )
    torch.testing.assert_close(masked, expected + intent_eval)


def test_span_means_average_each_turn_up_to_the_next_and_the_last_to_the_end():
    hidden = torch.randn(2, 10, 3)
    starts = torch.tensor([[1, 4, 7], [0, 5, -1]])  # row 1 has two turns and a padding turn
    ends = torch.tensor([9, 8])
    got = span_means(hidden, starts, ends)
    torch.testing.assert_close(got[0, 0], hidden[0, 1:4].mean(0))
    torch.testing.assert_close(got[0, 1], hidden[0, 4:7].mean(0))
    torch.testing.assert_close(got[0, 2], hidden[0, 7:9].mean(0))  # the last real token is index 8
    torch.testing.assert_close(got[1, 0], hidden[1, 0:5].mean(0))
    torch.testing.assert_close(got[1, 1], hidden[1, 5:8].mean(0))
    assert torch.equal(got[1, 2], torch.zeros(3))


@pytest.mark.parametrize("kind", ["longformer", "sparse_transformer"])
def test_mean_pooling_heads_read_every_word_of_their_turn(kind, tok_fmt):
    """With ``turn_pooling="separator+mean"`` a turn's logits move when a word of that turn changes, even in a
    model whose attention routes nothing (zeroed attention output): only the pooled words carry it."""
    tokenizer, formatter = tok_fmt
    heads = {"selection_head": False, "act_labels": ["INFORM", "REQUEST"], "intent_labels": ["NONE", "Find"]}
    model = tiny_model(tokenizer, formatter, kind, turn_pooling="separator+mean", **heads).eval()
    batch = tracking_batch(tokenizer, formatter, model)
    for name, p in model.backbone.named_parameters():
        if "attention.output.dense" in name:
            torch.nn.init.zeros_(p)  # each token's state depends on its own embedding only
    positions = batch["turn_positions"][0]
    ids = batch["input_ids"].clone()
    ids[0, positions[1] + 2] = tokenizer.convert_tokens_to_ids(
        "paris"
    )  # a word of turn 1 (not its separator)
    with torch.no_grad():
        ref = model(**{k: v for k, v in batch.items() if "labels" not in k}).act_logits
        out = model(
            **{k: v for k, v in batch.items() if "labels" not in k and k != "input_ids"}, input_ids=ids
        )
    changed = ~torch.isclose(out.act_logits[0], ref[0]).all(-1)
    assert changed.tolist() == [t == 1 for t in range(len(positions))]


def test_pooled_selection_score_reads_the_candidate_and_matches_it_to_the_history(tok_fmt):
    """With ``turn_pooling="separator+mean"`` and no attention at all (zeroed attention output), a pair's score
    still moves with a history word (through the candidate x history product) and with a candidate word."""
    tokenizer, formatter = tok_fmt
    model = tiny_model(tokenizer, formatter, selection_head=True, turn_pooling="separator+mean").eval()
    for name, p in model.backbone.named_parameters():
        if "attention.output.dense" in name:
            torch.nn.init.zeros_(p)
    batch = {k: v for k, v in selection_batch(tokenizer, formatter).items() if k != "labels"}
    paris = tokenizer.convert_tokens_to_ids("paris")
    rsp = int(batch["candidate_positions"][0, 0])
    with torch.no_grad():
        ref = model(**batch).selection_logits
        for position in (3, rsp + 1):  # a history word, a candidate word
            ids = batch["input_ids"].clone()
            ids[0, 0, position] = paris
            out = model(**{**batch, "input_ids": ids}).selection_logits
            assert not torch.isclose(out[0, 0], ref[0, 0])
            torch.testing.assert_close(out[1:], ref[1:])


def test_forward_rejects_mismatched_inputs(tok_fmt):
    tokenizer, formatter = tok_fmt
    tracker = tiny_model(tokenizer, formatter)
    selector = tiny_model(tokenizer, formatter, selection_head=True)
    sel = selection_batch(tokenizer, formatter)
    with pytest.raises(ValueError, match="no selection head"):
        tracker(**sel)
    with pytest.raises(ValueError, match="labels .* needs 3-D inputs"):
        selector(input_ids=sel["input_ids"][:, 0], candidate_positions=sel["candidate_positions"][:, 0],
                 labels=sel["labels"])  # fmt: skip
    trk = tracking_batch(tokenizer, formatter, tracker)
    with pytest.raises(ValueError, match="no act or intent head"):
        selector(input_ids=trk["input_ids"], turn_positions=trk["turn_positions"])


def test_forward_needs_exactly_one_of_input_ids_and_inputs_embeds(tok_fmt):
    """Before: ``model()`` raised ``TypeError: 'NoneType' object is not subscriptable``."""
    tokenizer, formatter = tok_fmt
    model = tiny_model(tokenizer, formatter)
    with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds"):
        model()
    ids = torch.tensor([[tokenizer.cls_token_id, 7, 8]])
    with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds"):
        model(input_ids=ids, inputs_embeds=model.get_input_embeddings()(ids))


def test_inputs_embeds_take_the_positions_of_input_ids_on_a_longformer_backbone():
    """Longformer numbered every column of ``inputs_embeds``, padding and its padding to a multiple of
    ``attention_window`` included: before, a batch padded to the 120 tokens the table holds (padded again to 128,
    a multiple of the window) raised ``position id ... is out of range``; now real tokens take the positions
    ``input_ids`` give them."""
    tokenizer, formatter = tokenizer_and_formatter(max_length=120)  # not a multiple of the window (16)
    torch.manual_seed(0)
    model = tiny_model(tokenizer, formatter).eval()
    batch = tracking_batch(tokenizer, formatter, model)
    pad = formatter.max_length - batch["input_ids"].shape[1]
    ids = torch.nn.functional.pad(batch["input_ids"], (0, pad), value=tokenizer.pad_token_id)
    mask = torch.nn.functional.pad(batch["attention_mask"], (0, pad))
    inputs = {"attention_mask": mask, "turn_positions": batch["turn_positions"]}
    with torch.no_grad():
        from_ids = model(input_ids=ids, **inputs)
        from_embeds = model(inputs_embeds=model.get_input_embeddings()(ids), **inputs)
    torch.testing.assert_close(from_embeds.act_logits, from_ids.act_logits)
    torch.testing.assert_close(from_embeds.intent_logits, from_ids.intent_logits)


def test_from_pretrained_kwargs_are_checked(tmp_path, tok_fmt):
    """``from_pretrained(path, key=value)`` sets attributes after ``__init__``; the model checks them as the config
    does (before: loaded)."""
    tokenizer, formatter = tok_fmt
    tiny_model(tokenizer, formatter).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="turn_pooling must be one of"):
        AutoModel.from_pretrained(tmp_path, turn_pooling="max")
    with pytest.raises(ValueError, match="intent_labels must start with none_intent"):
        AutoModel.from_pretrained(tmp_path, none_intent="OTHER")


def test_resize_records_vocab_size_and_reloads(tmp_path, tok_fmt):
    tokenizer, formatter = tok_fmt
    model = tiny_model(tokenizer, formatter)
    model.resize_token_embeddings(len(tokenizer) + 3)
    assert model.config.backbone["vocab_size"] == len(tokenizer) + 3
    model.save_pretrained(tmp_path)
    reloaded = AutoModel.from_pretrained(tmp_path)
    assert reloaded.get_input_embeddings().weight.shape[0] == len(tokenizer) + 3


def test_save_and_reload_give_the_same_outputs(tmp_path, tok_fmt):
    tokenizer, formatter = tok_fmt
    model = tiny_model(tokenizer, formatter).eval()
    batch = tracking_batch(tokenizer, formatter, model)
    with torch.no_grad():
        expected = model(**batch).act_logits
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "modeling_dialogue.LongformerForDialogue"
    assert set(config["custom_pipelines"]) == {"dialogue-state-tracking"}  # a tracking-only model
    reloaded = AutoModel.from_pretrained(tmp_path)
    assert type(reloaded) is LongformerForDialogue
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).act_logits, expected)


BLOCK = "import sys; sys.modules['hf_sparse'] = None; sys.dont_write_bytecode = True\n"
LOAD = """
import json, torch
from transformers import AutoModel, pipeline
try:
    import hf_sparse
except ImportError:
    print("hf_sparse unavailable")
model = AutoModel.from_pretrained({folder!r}, trust_remote_code=True).eval()
batch = torch.load({inputs!r})
with torch.no_grad():
    torch.save(model(**batch).act_logits, {result!r})
pipe = pipeline("dialogue-state-tracking", model={folder!r}, trust_remote_code=True)
out = pipe({{"turns": ["find me a hotel please", "which city ?", "in paris"]}})
many = [{{"turns": ["hi"]}}, {{"turns": ["find me a hotel please", "which city ?", "in paris"]}}, {{"turns": ["bye", "ok"]}}]
print(json.dumps([pipe(many, batch_size=1), pipe(many, batch_size=3)]))
print(json.dumps(out))
print(type(model).__module__)
"""


def test_saved_folder_loads_and_runs_its_pipeline_without_the_package(tmp_path, tok_fmt):
    tokenizer, formatter = tok_fmt
    model = tiny_model(tokenizer, formatter).eval()
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    batch = tracking_batch(tokenizer, formatter, model)
    with torch.no_grad():
        expected = model(**batch).act_logits
    torch.save(dict(batch), tmp_path / "inputs.pt")
    script = BLOCK + LOAD.format(
        folder=str(folder), inputs=str(tmp_path / "inputs.pt"), result=str(tmp_path / "out.pt")
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_MODULES_CACHE=str(tmp_path / "modules"), OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=240)  # fmt: skip
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert "hf_sparse unavailable" in lines and "transformers_modules" in lines[-1]
    out = json.loads(lines[-2])
    assert [t["turn"] for t in out["turns"]] == [0, 1, 2] and out["intent"] in model.config.intent_labels
    one, batched = json.loads(lines[-3])  # the bundled pipeline batches through the Pipeline base too
    assert len(one) == 3
    assert_same_outputs(batched, one)
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), expected, rtol=0, atol=1e-6)


def test_with_a_turn_separator_the_heads_read_separator_and_speaker_token():
    tokenizer, formatter = tokenizer_and_formatter(
        max_length=128, turn_separator="[TURN]", global_on=["separators"]
    )
    model = tiny_model(tokenizer, formatter).eval()
    assert model.config.turn_tokens == 2 and model.act_classifier.dense.in_features == 64
    batch = tracking_batch(tokenizer, formatter, model)
    ids = batch["input_ids"]
    first = batch["turn_positions"][0, 0]
    assert tokenizer.convert_ids_to_tokens([int(ids[0, first]), int(ids[0, first + 1])]) == [
        "[TURN]",
        "[USR]",
    ]
    assert batch["global_attention_mask"][0, first] == 1 and batch["global_attention_mask"][0, first + 1] == 0
    with torch.no_grad():
        out = model(**batch)
        hidden = model.backbone(input_ids=ids, attention_mask=batch["attention_mask"],
                                global_attention_mask=batch["global_attention_mask"]).last_hidden_state  # fmt: skip
        both = torch.cat([hidden[0, first], hidden[0, first + 1]])
        torch.testing.assert_close(out.act_logits[0, 0], model.act_classifier(both))
