"""The dialogue recipe tasks end to end on synthetic SGD-format data (offline, tiny models, seconds)."""

import json

import numpy as np
import pytest
import torch
from transformers import AutoConfig, pipeline

from hf_sparse.tasks.dialogue.data import DialogueLabels
from hf_sparse.tasks.dialogue.task import (
    SelectionArguments,
    TrackingArguments,
    last_user_turn,
    prefixes,
    tracking_scores,
    tune_thresholds,
)
from hf_sparse.training import RecipeError, get_task, run
from tests.models.dialogue_tiny import (
    ACTS,
    synthetic_dialogues,
    tiny_model,
    tokenizer_and_formatter,
    write_sgd,
)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Train: restaurants, flights; validation/test also hotels (an intent unseen in training)."""
    splits = {
        "train": synthetic_dialogues(48, seed=1),
        "validation": synthetic_dialogues(8, seed=2, domains=("restaurant", "flight", "hotel")),
        "test": synthetic_dialogues(8, seed=3, domains=("restaurant", "flight", "hotel")),
    }
    return write_sgd(tmp_path_factory.mktemp("sgd"), splits)


def recipe(task, data_dir, output_dir, **values):
    r = {
        "task": task,
        "data_dir": data_dir,
        "output_dir": str(output_dir),
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "attention_window": 16,
        "max_length": 64,
        "vocab_min_frequency": 1,
        "num_train_epochs": 1,
        "per_device_train_batch_size": 8,
        "per_device_eval_batch_size": 8,
        "learning_rate": 1.0e-3,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": 0,
    }
    r.update(values)
    return r


def test_both_tasks_are_registered():
    assert get_task("dialogue-response-selection").Arguments is SelectionArguments
    assert get_task("dialogue-state-tracking").Arguments is TrackingArguments


@pytest.fixture(scope="module")
def selection_run(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("sel") / "out"
    return out, run(
        recipe("dialogue-response-selection", data_dir, out, train_sampling_strategy="group_by_length")
    )


def test_selection_run_reports_recall_of_ten_candidates(selection_run):
    out, results = selection_run
    for split in ("eval", "test"):
        for key in ("recall@1", "recall@2", "recall@5", "mrr"):
            assert 0.0 <= results[f"{split}_{key}"] <= 1.0, key
        assert results[f"{split}_recall@1"] <= results[f"{split}_recall@2"] <= results[f"{split}_recall@5"]
    # 8 test dialogues x 3 system responses after the first turn
    assert results["test_samples_per_second"] > 0 and results["global_step"] == 18  # 48 x 3 / 8
    long = results["extras"]["long_history"]
    assert long["full_history"]["n"] == long["last_2_turns"]["n"] == 8
    assert set(long["full_history"]) >= {"recall@1", "mrr"}
    saved = json.loads((out / "all_results.json").read_text())
    assert saved["extras"]["long_history"] == long
    card = (out / "README.md").read_text()
    assert 'pipeline("dialogue-response-selection"' in card and "recall@1" in card


def test_selection_model_folder_runs_the_pipeline(selection_run):
    out, _ = selection_run
    pipe = pipeline("dialogue-response-selection", model=str(out), trust_remote_code=True)
    history = {"turns": ["find me a flight please", "which city for the flight ?", "in rome"]}
    ranked = pipe({**history, "candidates": ["goodbye", "i found a flight in rome", "in lima"]})["ranking"]
    assert sorted(r["index"] for r in ranked) == [0, 1, 2]
    assert pipe.model.config.formatter["max_length"] == 64


@pytest.fixture(scope="module")
def tracking_run(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("trk") / "out"
    r = recipe("dialogue-state-tracking", data_dir, out, num_train_epochs=2, learning_rate=3.0e-3,
               num_hidden_layers=2, attention_windows=[4, 16], sinusoidal_positions=True,
               max_eval_samples=10)  # fmt: skip
    return out, run(r)


def test_tracking_run_reports_act_f1_and_seen_unseen_intents(tracking_run, data_dir):
    out, results = tracking_run
    for key in ("act_micro_f1", "act_macro_f1", "intent_accuracy_seen", "intent_accuracy_unseen"):
        assert 0.0 <= results[f"test_{key}"] <= 1.0, key
    for key in ("act_micro_f1", "act_macro_f1", "intent_accuracy_seen"):
        assert 0.0 <= results[f"eval_{key}"] <= 1.0, key
    assert results["eval_n_intent_seen"] + results["eval_n_intent_unseen"] <= 10  # max_eval_samples: 10
    assert ("eval_intent_accuracy_unseen" in results) == (results["eval_n_intent_unseen"] > 0)  # never NaN
    test = [d for d in map(json.loads, open(f"{data_dir}/test.jsonl"))]
    hotel_user_turns = sum(2 for d in test if d["services"] == ["hotel"])  # ReserveHotel: 2 user turns each
    assert hotel_user_turns > 0 and results["test_n_intent_unseen"] == hotel_user_turns
    assert results["test_intent_accuracy_unseen"] == 0.0  # a closed-set classifier cannot name a new intent
    assert results["test_n_intent_seen"] == 3 * 8 - hotel_user_turns
    long = results["extras"]["long_history"]
    assert long["full_history"]["n"] == long["last_2_turns"]["n"] == 8
    for key in ("eval_act_macro_f1_tuned", "eval_act_macro_f1_at_default", "test_act_macro_f1_at_default"):
        assert 0.0 <= results[key] <= 1.0, key
    card = (out / "README.md").read_text()
    assert 'pipeline("dialogue-state-tracking"' in card and "act_macro_f1" in card
    config = json.loads((out / "config.json").read_text())
    assert config["intent_labels"] == ["NONE", "FindRestaurants", "SearchFlights"]
    assert config["seen_intents"] == ["FindRestaurants", "NONE", "SearchFlights"]
    assert len(config["act_thresholds"]) == len(config["act_labels"])  # tuned on validation, saved
    assert config["backbone"]["attention_window"] == [4, 16]


def test_tracking_model_folder_runs_the_pipeline(tracking_run):
    out, _ = tracking_run
    pipe = pipeline("dialogue-state-tracking", model=str(out), trust_remote_code=True)
    res = pipe({"turns": ["find me a flight please", "which city for the flight ?", "in rome"]})
    assert len(res["turns"]) == 3 and res["intent"] in ("NONE", "FindRestaurants", "SearchFlights")


def test_bad_recipe_values_are_rejected(data_dir, tmp_path):
    with pytest.raises(RecipeError, match="backbone must be one of"):
        run(recipe("dialogue-state-tracking", data_dir, tmp_path / "o", backbone="bert"))
    with pytest.raises(RecipeError, match="recipe key 'backbone_type' is now spelled 'backbone'"):
        run(recipe("dialogue-state-tracking", data_dir, tmp_path / "o", backbone_type="longformer"))
    with pytest.raises(RecipeError, match="train_response_turns"):
        run(recipe("dialogue-response-selection", data_dir, tmp_path / "o", train_response_turns="some"))
    with pytest.raises(RecipeError, match="attention_window must be even"):
        run(recipe("dialogue-response-selection", data_dir, tmp_path / "o", attention_window=15))
    with pytest.raises(RecipeError, match="attention_windows must hold one even window"):
        run(recipe("dialogue-state-tracking", data_dir, tmp_path / "o", attention_windows=[8, 64]))  # 1 layer
    with pytest.raises(RecipeError, match="attention_dropout must be a probability in"):
        run(recipe("dialogue-state-tracking", data_dir, tmp_path / "o", attention_dropout=1.5))
    with pytest.raises(RecipeError, match="turn_pooling must be one of"):
        run(recipe("dialogue-state-tracking", data_dir, tmp_path / "o", turn_pooling="max"))
    with pytest.raises(ValueError, match="position_embedding_type"):
        run(recipe("dialogue-state-tracking", data_dir, tmp_path / "o", backbone="sparse_transformer",
                   position_embedding_type="alibi"))  # fmt: skip
    with pytest.raises(RecipeError, match=r"data_dir=.* has no train.jsonl"):  # before any work
        run(recipe("dialogue-state-tracking", str(tmp_path), tmp_path / "o"))


@pytest.mark.parametrize("task_name", ["dialogue-response-selection", "dialogue-state-tracking"])
def test_gzipped_splits_pass_the_argument_check(tmp_path, task_name):
    """A folder of train.jsonl.gz / validation.jsonl.gz (what the loader reads) is not rejected before reading."""
    import gzip

    for split, n in (("train", 3), ("validation", 2)):
        with gzip.open(tmp_path / f"{split}.jsonl.gz", "wt") as f:
            f.write("".join(json.dumps(d) + "\n" for d in synthetic_dialogues(n, seed=1)))
    task = get_task(task_name)()
    args = task.Arguments(data_dir=str(tmp_path))
    task.check_arguments(args)
    assert {split: len(dialogues) for split, dialogues in task.data(args).items()} == {
        "train": 3,
        "validation": 2,
    }
    (tmp_path / "validation.jsonl.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"data_dir=.* has no validation.jsonl"):
        task.check_arguments(args)


def test_a_split_without_examples_names_the_split_and_its_file(tmp_path):
    """Single-turn validation dialogues have no response to select: an error naming the split and the file, not
    the Trainer's "No columns in the dataset match the model's forward method signature"."""
    single = [
        {"dialogue_id": f"v{i}", "speakers": ["USER"], "turns": ["find me a flight please"]} for i in range(3)
    ]
    data = write_sgd(tmp_path / "sgd", {"train": synthetic_dialogues(4, seed=1), "validation": single})
    task = get_task("dialogue-response-selection")()
    task.num_proc = 1
    args = SelectionArguments(data_dir=data, max_length=64, vocab_min_frequency=1, n_negatives=2, train_negatives=2,
                              hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                              attention_window=16)  # fmt: skip
    tokenizer = task.build_tokenizer(args)
    task.build_model(args, tokenizer)
    with pytest.raises(
        ValueError, match=r"validation: 3 dialogues of .*validation.jsonl gave no response-selection"
    ):
        task.build_datasets(args, tokenizer)


# ---------------------------------------------------------------- helpers


def test_prefixes_are_seeded_cuts_of_every_field():
    dialogues = synthetic_dialogues(5)
    a, b = prefixes(dialogues, 2, seed=0), prefixes(dialogues, 2, seed=0)
    assert a == b and len(a) == 10 and a != prefixes(dialogues, 2, seed=1)
    for cut in a:
        full = next(d for d in dialogues if d["dialogue_id"] == cut["dialogue_id"])
        n = len(cut["turns"])
        assert 1 <= n < len(full["turns"])
        for key in ("speakers", "turns", "acts", "active_intent"):
            assert cut[key] == full[key][:n]


def test_last_user_turn_window():
    (d,) = synthetic_dialogues(1)
    full = last_user_turn(d, "USER", None)
    assert full["turns"] == d["turns"][:5] and full["speakers"][-1] == "USER"
    two = last_user_turn(d, "USER", 2)
    assert two["turns"] == d["turns"][3:5] and two["acts"] == d["acts"][3:5]
    assert last_user_turn({**d, "speakers": ["SYSTEM"] * 6}, "USER", None) is None


def test_tracking_scores_count_unseen_intents_and_only_labelled_turns(tmp_path):
    from hf_sparse.tasks.dialogue.data import build_tracking_examples
    from tests.models.dialogue_tiny import tiny_model, tokenizer_and_formatter

    tokenizer, formatter = tokenizer_and_formatter()
    model = tiny_model(tokenizer, formatter, act_labels=["INFORM", "REQUEST"],
                       intent_labels=["NONE", "FindRestaurants"], selection_head=False)  # fmt: skip
    labels = DialogueLabels(
        ("INFORM", "REQUEST"), ("NONE", "FindRestaurants"), frozenset({"NONE", "FindRestaurants"})
    )
    dialogues = [{"dialogue_id": "x", "speakers": ["USER", "SYSTEM", "USER"], "turns": ["a", "b", "c"],
                  "acts": [["INFORM"], ["REQUEST"], ["INFORM"]],
                  "active_intent": ["FindRestaurants", None, "SearchFlights"]}]  # fmt: skip
    examples = build_tracking_examples(dialogues, formatter, labels, mode="prefix")
    assert len(examples) == 3
    act_logits = np.full((3, 3, 2), -5.0)
    intent_logits = np.zeros((3, 3, 2))
    for i in range(3):  # predict the right act everywhere, FindRestaurants for every user turn
        act_logits[i, i, 0 if i != 1 else 1] = 5.0
        intent_logits[i, i, 1] = 5.0
    scores = tracking_scores(examples, act_logits, intent_logits, model.config)
    assert scores["act_micro_f1"] == 1.0 and scores["act_macro_f1"] == 1.0
    assert scores["n_intent_seen"] == 1 and scores["n_intent_unseen"] == 1  # SearchFlights is not a label
    assert scores["intent_accuracy_seen"] == 1.0 and scores["intent_accuracy_unseen"] == 0.0


def test_selection_can_start_from_the_tracking_model(tracking_run, data_dir, tmp_path):
    from safetensors.torch import load_file

    folder, _ = tracking_run
    results = run(recipe("dialogue-response-selection", data_dir, tmp_path / "sel", model_name_or_path=str(folder),
                         max_steps=1, long_history_check=False, model_card=False))  # fmt: skip
    assert results["global_step"] == 1
    config = json.loads((tmp_path / "sel" / "config.json").read_text())
    assert config["selection_head"] and config["act_labels"] == [] and config["intent_labels"] == []
    assert config["act_thresholds"] is None  # the tracking model's tuned thresholds went with its act head
    assert AutoConfig.from_pretrained(tmp_path / "sel").selection_head  # the saved folder loads
    before = load_file(str(folder / "model.safetensors"))
    after = load_file(str(tmp_path / "sel" / "model.safetensors"))
    assert not any(
        k.startswith(("act_classifier", "intent_classifier")) for k in after
    )  # other heads dropped
    assert any(k.startswith("selection_scorer") for k in after)
    key = "backbone.embeddings.word_embeddings.weight"
    assert after[key].shape == before[key].shape  # the tracking model's tokenizer and encoder
    assert (after[key] - before[key]).abs().max() < 0.01  # one small step away from the tracking encoder


@pytest.mark.parametrize("name", ["tiny-tracking", "tiny-selection", "base-tracking", "base-selection"])
def test_shipped_recipes_parse(name):
    from pathlib import Path

    from hf_sparse.training.recipe import load_recipe

    path = Path(__file__).resolve().parents[2] / "pipelines" / "dialogue" / f"{name}.yaml"
    overrides = (
        ["bf16=false"] if name.startswith("base") else []
    )  # bf16 is refused on a machine without a GPU
    recipe_args, task_args, training_args = load_recipe(path, overrides)
    assert recipe_args.task.startswith("dialogue-")
    assert task_args.data_dir.endswith("shared/data/dialogue/schema_guided_dialogue")
    if name.endswith("selection"):
        assert task_args.n_negatives == 9 and task_args.selection_seed == 0
    else:
        assert task_args.eval_mode == "prefix"


def test_tune_thresholds_picks_the_best_f1_per_act():
    true = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=bool)
    probs = np.array([[0.3, 0.1, 0.2], [0.35, 0.2, 0.1], [0.1, 0.9, 0.3], [0.2, 0.6, 0.1]])
    thresholds = tune_thresholds(true, probs)
    assert thresholds[0] == 0.3  # 0.25 and 0.30 both separate act 0 (F1 1): the one closer to 0.5
    assert thresholds[1] == 0.65  # above the negative's 0.6, below the positive's 0.9 (closest to 0.5)
    assert thresholds[2] == 0.5  # no positive: the default


def test_sinusoidal_init_fills_the_table():
    from hf_sparse.tasks.dialogue.task import sinusoidal_init

    table = torch.zeros(10, 4)
    sinusoidal_init(table, scale=1.0)
    expected = torch.tensor([np.sin(3), np.cos(3), np.sin(3 / 100), np.cos(3 / 100)], dtype=torch.float32)
    torch.testing.assert_close(table[3], expected)


def test_evaluation_keeps_the_dataset_order_under_group_by_length(tmp_path):
    """Predictions are scored against the dataset's rows by index: a length-grouped eval order would pair
    each prediction with another example's labels."""
    from datasets import Dataset
    from transformers import TrainingArguments

    from hf_sparse.tasks.dialogue.task import _trainer_class

    lengths = [5, 60, 2, 33, 17, 4, 48, 9]
    dataset = Dataset.from_list([{"input_ids": [1] * n} for n in lengths])
    args = TrainingArguments(
        str(tmp_path),
        train_sampling_strategy="group_by_length",
        per_device_eval_batch_size=2,
        report_to="none",
    )
    trainer = _trainer_class(("labels",))(model=torch.nn.Linear(1, 1), args=args)
    assert list(trainer._get_eval_sampler(dataset)) == list(range(len(lengths)))
    assert sorted(trainer._get_train_sampler(dataset)) == list(range(len(lengths)))  # training still groups


@pytest.mark.parametrize(
    "task_name,heads",
    [
        ("dialogue-response-selection", {"selection_head": True}),
        (
            "dialogue-state-tracking",
            {"selection_head": False, "act_labels": ACTS, "intent_labels": ["NONE", "X"]},
        ),
    ],
)
def test_lora_trains_the_task_heads_in_full_and_saves_them_with_the_adapter(task_name, heads, tmp_path):
    """The heads start at random: under LoRA they train next to the adapters and an unmerged adapter holds
    them (frozen, a reloaded adapter would score with random heads)."""
    from peft import LoraConfig, PeftModel, get_peft_model

    tokenizer, formatter = tokenizer_and_formatter(max_length=64)
    torch.manual_seed(0)
    task = get_task(task_name)()
    model = tiny_model(tokenizer, formatter, **heads)
    names = [n for n in ("selection_scorer", "act_classifier", "intent_classifier") if getattr(model, n)]
    config = LoraConfig(
        r=4, target_modules=["query", "value"], modules_to_save=task.lora_modules_to_save(model)
    )
    peft_model = get_peft_model(model, config)
    for name in names:
        params = [p for n, p in peft_model.named_parameters() if f".{name}." in n and p.requires_grad]
        assert params, f"{name} is frozen under LoRA"
        with torch.no_grad():
            for p in params:
                p.add_(1.0)  # as if trained
    trained = {n: p.detach().clone() for n, p in peft_model.named_parameters() if p.requires_grad}
    peft_model.save_pretrained(tmp_path / "adapter")
    torch.manual_seed(1)  # another random init of the heads
    reloaded = PeftModel.from_pretrained(tiny_model(tokenizer, formatter, **heads), tmp_path / "adapter")
    state = dict(reloaded.named_parameters())
    for name, value in trained.items():
        torch.testing.assert_close(state[name], value, msg=name)


def test_model_cards_record_the_backbone_pattern_and_the_global_tokens(selection_run, tracking_run):
    """Longformer backbones: the window (one per layer where they differ); the formatter's global tokens."""
    selection = (selection_run[0] / "README.md").read_text()
    assert "| Attention | longformer(window=16) |" in selection
    assert "| global attention | the first token, every turn separator and [RSP], every token of the newest " \
        "turn, [RSP] and the candidate's tokens |" in selection  # fmt: skip
    tracking = (tracking_run[0] / "README.md").read_text()  # attention_windows: [4, 16]
    assert (
        "| Attention | per layer: layer 0: longformer(window=4) · layer 1: longformer(window=16) |"
        in tracking
    )


def test_card_pattern_of_a_sparse_transformer_backbone_is_its_attention_pattern():
    from hf_sparse.tasks.dialogue.task import card_pattern

    spec = {"type": "longformer", "window": 64}
    assert card_pattern({"model_type": "sparse_transformer", "attention_pattern": spec}) == spec
    assert card_pattern({"model_type": "longformer", "attention_window": [8, 8]}) == {
        "type": "longformer",
        "window": 8,
    }


def test_runs_record_the_dialogues_of_each_split_and_the_label_counts(selection_run, tracking_run):
    """extras.data: what scripts/benchmark_dialogue.py reports the results on."""
    assert selection_run[1]["extras"]["data"] == {"dialogues": {"train": 48, "validation": 8, "test": 8}}
    config = json.loads((tracking_run[0] / "config.json").read_text())
    assert tracking_run[1]["extras"]["data"] == {
        "dialogues": {"train": 48, "validation": 8, "test": 8},
        "acts": len(config["act_labels"]),
        "intents": len(config["intent_labels"]),
    }


def _tiny_tracking_args(data_dir, **values):
    return TrackingArguments(data_dir=data_dir, backbone="sparse_transformer", hidden_size=16, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=32, max_length=64, vocab_min_frequency=1,
                             **values)  # fmt: skip


def _renamed(dialogues, intents=None, acts=None):
    """The dialogues with intents / acts renamed by the mappings."""
    out = []
    for d in dialogues:
        out.append({**d, "active_intent": [(intents or {}).get(i, i) for i in d["active_intent"]],
                    "acts": [[(acts or {}).get(a, a) for a in turn] for turn in d["acts"]]})  # fmt: skip
    return out


def _as_pytorch_bin(folder) -> None:
    """The saved model in ``folder`` re-written as ``pytorch_model.bin`` (older transformers, ``torch.save``)."""
    from safetensors.torch import load_file

    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()


@pytest.mark.parametrize(
    "intents,acts,weights",
    [
        # as many labels, other names
        ({"SearchFlights": "ReserveHotel"}, {"OFFER": "NOTIFY_SUCCESS"}, "safetensors"),
        # sorted first: every row moves
        ({"SearchFlights": "AAA_NewIntent"}, {"OFFER": "AAA_NEW_ACT"}, "safetensors"),
        # saved as pytorch_model.bin (older transformers, torch.save)
        ({"SearchFlights": "AAA_NewIntent"}, {"OFFER": "AAA_NEW_ACT"}, "bin"),
    ],
)
def test_continuing_a_tracking_model_keeps_its_head_rows_by_label_name(tmp_path, intents, acts, weights):
    """A saved tracking model (safetensors or pytorch_model.bin) continued on data whose labels have other names: a
    label's trained row follows its name, a new label gets a new row (never the trained row of another label at its
    position)."""
    from hf_sparse.tasks.dialogue.task import DialogueTrackingTask

    first = synthetic_dialogues(8, seed=1)
    write_sgd(tmp_path / "a", {"train": first, "validation": first[:2]})
    write_sgd(tmp_path / "b", {"train": _renamed(first, intents, acts), "validation": first[:2]})
    task = DialogueTrackingTask()
    args = _tiny_tracking_args(str(tmp_path / "a"))
    tokenizer = task.build_tokenizer(args)
    saved = task.build_model(args, tokenizer)
    saved.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    if weights == "bin":
        _as_pytorch_bin(tmp_path / "model")
    again = DialogueTrackingTask()
    args = _tiny_tracking_args(str(tmp_path / "b"), model_name_or_path=str(tmp_path / "model"))
    model = again.build_model(args, again.build_tokenizer(args))
    for head, key, renamed in (
        ("act_classifier", "act_labels", acts),
        ("intent_classifier", "intent_labels", intents),
    ):
        before, now = getattr(saved.config, key), getattr(model.config, key)
        assert sorted(now) == sorted(renamed.get(name, name) for name in before)
        old, new = getattr(saved, head).out_proj, getattr(model, head).out_proj
        for j, name in enumerate(now):
            if name in before:  # the trained row of that label
                torch.testing.assert_close(new.weight[j], old.weight[before.index(name)], msg=name)
                torch.testing.assert_close(new.bias[j], old.bias[before.index(name)], msg=name)
            else:  # a new row, not the trained one of the label that was at j
                assert not torch.equal(new.weight[j], old.weight[j]), name
        torch.testing.assert_close(getattr(model, head).dense.weight, getattr(saved, head).dense.weight)


def test_saved_head_rows_of_a_folder_without_weights_are_an_error_naming_the_files(tmp_path):
    from hf_sparse.tasks.dialogue.task import _saved_tensors

    with pytest.raises(OSError, match=r"model_name_or_path=.* has no saved weights: looked for model\.safetensors, "
                                      r"model\.safetensors\.index\.json, pytorch_model\.bin, "
                                      r"pytorch_model\.bin\.index\.json"):  # fmt: skip
        _saved_tensors(str(tmp_path), ["act_classifier.out_proj.weight"])


def test_tracking_data_without_intents_gives_no_intent_head_and_no_intent_metrics(tmp_path):
    no_intents = [
        {k: v for k, v in d.items() if k != "active_intent"} for d in synthetic_dialogues(8, seed=1)
    ]
    data = write_sgd(tmp_path / "data", {"train": no_intents, "validation": no_intents[:3]})
    out = tmp_path / "out"
    results = run(recipe("dialogue-state-tracking", data, out, max_steps=1, long_history_check=False,
                         model_card=False, plots=False))  # fmt: skip
    assert not [k for k in results if "intent" in k]
    assert 0.0 <= results["eval_act_micro_f1"] <= 1.0
    config = json.loads((out / "config.json").read_text())
    assert config["intent_labels"] == [] and config["seen_intents"] == [] and config["act_labels"]
    assert results["extras"]["data"]["intents"] == 0


def test_per_epoch_intent_accuracy_counts_only_intents_seen_in_training():
    from hf_sparse.tasks.dialogue.task import _from_labels

    logits = np.zeros((1, 2, 3))
    logits[0, :, 0] = 1.0  # predicts id 0 everywhere
    gold = np.array([[0, 0]])  # id 0 ("NONE") not seen in training: no seen turn to score
    assert "intent_accuracy_seen" not in _from_labels(None, logits, None, gold, 0.5, seen_ids=[1, 2])
    assert _from_labels(None, logits, None, gold, 0.5, seen_ids=[0, 1])["intent_accuracy_seen"] == 1.0


def test_max_train_samples_keeps_dialogues_with_their_prefixes(tmp_path):
    """Each whole dialogue is followed by its train_prefixes prefixes: the first N training examples (the
    recipe's max_train_samples) hold prefixes too."""
    from hf_sparse.tasks.dialogue.task import DialogueTrackingTask

    dialogues = synthetic_dialogues(5, seed=1)
    task = DialogueTrackingTask()
    args = _tiny_tracking_args(write_sgd(tmp_path, {"train": dialogues, "validation": dialogues[:1]}),
                               train_prefixes=2)  # fmt: skip
    train = task.build_datasets(args, task.build_tokenizer(args))["train"]
    assert len(train) == 5 * 3
    kept = task.limit_samples("train", train, 6)
    assert kept["dialogue_id"] == [d["dialogue_id"] for d in dialogues[:2] for _ in range(3)]
    turns = [len(t) for t in kept["turn_index"]]
    assert turns[0] == turns[3] == 6 and all(n < 6 for n in turns[1:3] + turns[4:6])  # whole, then 2 prefixes
