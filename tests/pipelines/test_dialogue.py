"""dialogue-response-selection and dialogue-state-tracking pipelines: ranking, determinism, truncation, errors."""

import pytest
import torch
from transformers import pipeline

import hf_sparse  # noqa: F401  (registers the pipeline tasks)
from hf_sparse.tasks.dialogue.pipeline import DialogueResponseSelectionPipeline, DialogueStateTrackingPipeline
from tests.models.dialogue_tiny import ACTS, tiny_model, tokenizer_and_formatter
from tests.pipelines.outputs import assert_same_outputs
from tests.threads import one_torch_thread  # noqa: F401 (autouse)

HISTORY = {
    "speakers": ["USER", "SYSTEM", "USER"],
    "turns": ["find me a restaurant please", "which city for the restaurant ?", "in paris"],
}
CANDIDATES = ["i found a restaurant in paris", "goodbye", "which city for the flight ?", "i found a hotel in rome",
              "in london", "thanks bye", "i found a flight in oslo"]  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved tiny model with both kinds of heads (and its tokenizer); max_length 40 tokens."""
    tokenizer, formatter = tokenizer_and_formatter(max_length=40)
    torch.manual_seed(0)
    model = tiny_model(tokenizer, formatter, selection_head=True, act_labels=ACTS,
                       intent_labels=["NONE", "FindRestaurants", "SearchFlights"])  # fmt: skip
    folder = tmp_path_factory.mktemp("dialogue_model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def select(saved):
    return pipeline("dialogue-response-selection", model=saved, trust_remote_code=True)


@pytest.fixture(scope="module")
def track(saved):
    return pipeline("dialogue-state-tracking", model=saved, trust_remote_code=True)


def test_pipeline_classes_come_from_the_saved_folder(select, track):
    assert type(select).__name__ == DialogueResponseSelectionPipeline.__name__
    assert type(track).__name__ == DialogueStateTrackingPipeline.__name__


# ---------------------------------------------------------------- response selection


def test_ranking_is_sorted_and_complete(select):
    out = select({**HISTORY, "candidates": CANDIDATES})
    ranking = out["ranking"]
    assert sorted(r["index"] for r in ranking) == list(range(len(CANDIDATES)))  # every candidate exactly once
    assert [r["candidate"] for r in ranking] == [CANDIDATES[r["index"]] for r in ranking]
    scores = [r["score"] for r in ranking]
    assert scores == sorted(scores, reverse=True)
    assert sum(r["probability"] for r in ranking) == pytest.approx(1.0, abs=1e-5)
    assert out["truncated_turns"] == 0 and out["truncated_tokens"] == 0


def test_scores_are_deterministic_in_eval_mode(saved, select):
    first = select({**HISTORY, "candidates": CANDIDATES})
    second = select({**HISTORY, "candidates": CANDIDATES})
    assert first == second
    # a model handed over in training mode is put in eval mode: dropout does not make scores random
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(saved).train()
    pipe = DialogueResponseSelectionPipeline(model=model, tokenizer=AutoTokenizer.from_pretrained(saved))
    assert not pipe.model.training
    third = pipe({**HISTORY, "candidates": CANDIDATES})
    assert [r["index"] for r in third["ranking"]] == [r["index"] for r in first["ranking"]]
    for a, b in zip(third["ranking"], first["ranking"]):
        assert a["score"] == pytest.approx(b["score"], abs=1e-5)


def test_candidate_batches_and_call_arguments_do_not_change_scores(select):
    whole = select({**HISTORY, "candidates": CANDIDATES})
    chunked = select(HISTORY, candidates=CANDIDATES, candidate_batch_size=2)
    assert [r["index"] for r in chunked["ranking"]] == [r["index"] for r in whole["ranking"]]
    for a, b in zip(chunked["ranking"], whole["ranking"]):
        assert a["score"] == pytest.approx(b["score"], abs=1e-5)
    batch = select([{**HISTORY, "candidates": CANDIDATES}, {**HISTORY, "candidates": CANDIDATES[:2]}])
    assert_same_outputs(batch[0], whole)
    assert len(batch[1]["ranking"]) == 2


def test_speakers_default_to_alternating_user_first(select):
    explicit = select({**HISTORY, "candidates": CANDIDATES})
    implicit = select({"turns": HISTORY["turns"], "candidates": CANDIDATES})
    assert explicit == implicit


def test_long_history_is_left_truncated_to_the_newest_turns(select):
    long_turns = [
        f"in paris please {i}" if i % 2 == 0 else "which city for the restaurant ?" for i in range(30)
    ]
    long_turns[-1] = "in rome"
    speakers = ["USER" if i % 2 == 0 else "SYSTEM" for i in range(30)]
    candidates = ["goodbye", "i found a restaurant in paris , it is open now and has a table for two"]
    alone = select.formatter.encode_candidates(speakers, long_turns, candidates)["truncated_turns"]
    assert alone[0] < alone[1]  # paired alone, the short candidate would keep more history than the long one
    out = select({"turns": long_turns, "speakers": speakers, "candidates": candidates})
    k = out["truncated_turns"]
    assert 0 < k < 29  # the oldest turns were dropped, the newest kept
    kept = select({"turns": long_turns[k:], "speakers": speakers[k:], "candidates": candidates})
    assert kept["truncated_turns"] == 0
    assert out["ranking"] == kept["ranking"]  # both candidates were scored against the same newest turns


def test_long_history_rows_are_laid_out_as_in_training(select):
    """The pipeline's (history, candidate) rows equal the training examples' (build_selection_examples)."""
    from hf_sparse.tasks.dialogue.data import build_selection_examples

    turns = [f"in paris please {i}" if i % 2 == 0 else "which city for the restaurant ?" for i in range(30)]
    long_reply = "i found a restaurant in paris , it is open now and has a table for two"
    dialogues = [
        {"dialogue_id": "a", "speakers": ["USER", "SYSTEM"] * 15 + ["USER", "SYSTEM"], "turns": [*turns, "in rome", "goodbye"]},
        {"dialogue_id": "b", "speakers": ["USER", "SYSTEM"], "turns": ["hi", long_reply]},
    ]  # fmt: skip
    (example,) = build_selection_examples(
        dialogues[:1], n_negatives=1, formatter=select.formatter, response_turns="last",
        pool=[("b", 1, long_reply)],
    )  # fmt: skip
    assert 0 < example["truncated_turns"][0]
    rows = list(select.preprocess({k: example[k] for k in ("turns", "speakers", "candidates")}))
    assert [r["input_ids"][0].tolist() for r in rows] == example["input_ids"]
    assert [r["global_attention_mask"][0].tolist() for r in rows] == example["global_attention_mask"]
    assert [r["candidate_positions"].item() for r in rows] == example["candidate_positions"]
    assert rows[0]["truncated_turns"] == example["truncated_turns"][0]


@pytest.mark.parametrize("n_turns", [40, 60])
def test_truncated_turns_counts_each_dropped_turn_once(select, n_turns):
    """One candidate (or several that drop the same turns): the count is the formatter's, not twice it."""
    turns = [
        f"in paris please {i}" if i % 2 == 0 else "which city for the restaurant ?" for i in range(n_turns)
    ]
    speakers = ["USER" if i % 2 == 0 else "SYSTEM" for i in range(n_turns)]
    alone = select.formatter.encode_candidates(speakers, turns, ["goodbye"])["truncated_turns"][0]
    out = select({"turns": turns, "speakers": speakers, "candidates": ["goodbye"]})
    assert 0 < out["truncated_turns"] == alone < n_turns
    kept = select({"turns": turns[alone:], "speakers": speakers[alone:], "candidates": ["goodbye"]})
    assert kept["truncated_turns"] == 0 and kept["ranking"] == out["ranking"]


def test_empty_turns_and_candidates_are_rejected(select, track):
    with pytest.raises(ValueError, match=r"turns\[1\] is empty"):
        track({"turns": ["hi", ""], "speakers": ["USER", "SYSTEM"]})
    with pytest.raises(ValueError, match=r"turns\[0\] is empty"):
        select({"turns": ["  "], "speakers": ["USER"], "candidates": ["goodbye"]})
    with pytest.raises(ValueError, match=r"candidates\[1\] is empty"):
        select({**HISTORY, "candidates": ["goodbye", ""]})


@pytest.mark.parametrize("text", ["\u200b", "\ufeff", "\x00"])
def test_turns_and_candidates_without_tokens_are_rejected(select, track, text):
    """Not blank for str.strip(), but the tokenizer reads nothing: as empty as a blank turn."""
    assert select.formatter.tokenize_turns([text]) == [[]]
    with pytest.raises(ValueError, match=r"turns\[1\] is empty"):
        track({"turns": ["hi", text], "speakers": ["USER", "SYSTEM"]})
    with pytest.raises(ValueError, match=r"turns\[2\] is empty"):
        select({**HISTORY, "turns": HISTORY["turns"][:2] + [text], "candidates": ["goodbye"]})
    with pytest.raises(ValueError, match=r"candidates\[0\] is empty"):
        select({**HISTORY, "candidates": [text, "goodbye"]})


def test_newest_turn_alone_too_long_keeps_its_newest_tokens(select):
    words = " ".join(["paris"] * 60)
    out = select({"turns": [words], "speakers": ["USER"], "candidates": ["goodbye"]})
    assert out["truncated_turns"] == 0 and out["truncated_tokens"] > 0


@pytest.mark.parametrize(
    "inputs,kwargs,error,match",
    [
        ({**HISTORY}, {}, ValueError, "no candidates"),
        ({**HISTORY, "candidates": []}, {}, ValueError, "candidates is empty"),
        ({**HISTORY, "candidates": "goodbye"}, {}, TypeError, "candidates must be a list of str"),
        ({**HISTORY, "candidates": ["goodbye", 3]}, {}, TypeError, r"candidates\[1\] must be a str"),
        ({"turns": [], "speakers": [], "candidates": ["goodbye"]}, {}, ValueError, "turns is empty"),
        ({"speakers": ["USER"], "candidates": ["goodbye"]}, {}, ValueError, "no 'turns'"),
        ({"turns": ["hi", "hello"], "speakers": ["USER"], "candidates": ["x"]}, {}, ValueError,
         "speakers and turns must have the same length"),
        ({"turns": ["hi", None], "speakers": ["USER", "SYSTEM"], "candidates": ["x"]}, {}, TypeError,
         r"turns\[1\] must be a str"),
        ({"turns": "hi there", "candidates": ["x"]}, {}, TypeError, "turns must be a list of str"),
        ({"turns": ["hi"], "speakers": ["BOT"], "candidates": ["x"]}, {}, ValueError, r"speakers\[0\] is 'BOT'"),
        ({**HISTORY, "candidates": ["x"], "history": []}, {}, ValueError, "unknown key"),
        ("hi there", {}, TypeError, "inputs must be a dict"),
        ({**HISTORY, "candidates": ["x"]}, {"candidates": ["y"]}, ValueError, "candidates given both"),
        ({**HISTORY, "candidates": ["x"]}, {"candidate_batch_size": 0}, ValueError, "candidate_batch_size"),
    ],
)  # fmt: skip
def test_bad_selection_input_names_the_field(select, inputs, kwargs, error, match):
    with pytest.raises(error, match=match):
        select(inputs, **kwargs)


# Dialogues of different lengths (turns, tokens, candidates): rows of different lengths share a batch.
DIALOGUES = [
    {**HISTORY, "candidates": CANDIDATES},
    {"turns": ["hi"], "candidates": ["hello , how can i help ?", "bye"]},
    {
        "turns": [f"find me a restaurant please {i}" for i in range(9)],
        "candidates": CANDIDATES[2:],
    },  # truncated
    {
        "turns": ["i need a flight to oslo", "which day ?"],
        "speakers": ["USER", "SYSTEM"],
        "candidates": ["friday"],
    },
]


def test_selection_batched_equals_unbatched(saved, select):
    one = select(DIALOGUES, batch_size=1)
    assert one[2]["truncated_turns"] > 0 and [len(o["ranking"]) for o in one] == [7, 2, 5, 1]
    assert_same_outputs(select(DIALOGUES, batch_size=3), one)
    assert_same_outputs(select(DIALOGUES), one)  # default: DEFAULT_BATCH_SIZE pairs per pass
    for dialogue, expected in zip(DIALOGUES, one):  # a single dialogue is batched too
        assert_same_outputs(select(dialogue, batch_size=3), expected)
    built = pipeline("dialogue-response-selection", model=saved, trust_remote_code=True, batch_size=3)
    assert built._batch_size == 3
    assert_same_outputs(built(DIALOGUES), one)


def test_tracking_batched_equals_unbatched(saved, track):
    dialogues = [{k: v for k, v in d.items() if k != "candidates"} for d in DIALOGUES]
    one = track(dialogues, batch_size=1)
    assert [len(o["turns"]) for o in one] == [3, 1, 9 - one[2]["truncated_turns"], 2]
    assert_same_outputs(track(dialogues, batch_size=3), one)
    built = pipeline("dialogue-state-tracking", model=saved, trust_remote_code=True, batch_size=3)
    assert_same_outputs(built(dialogues), one)


def test_tracking_batched_equals_unbatched_with_turn_means():
    """With mean-pooled turns a padding turn must not end the last real turn's span (padding is -1, not 0)."""
    tokenizer, formatter = tokenizer_and_formatter(max_length=40)
    torch.manual_seed(0)
    model = tiny_model(tokenizer, formatter, act_labels=ACTS, intent_labels=["NONE", "FindRestaurants"],
                       turn_pooling="separator+mean")  # fmt: skip
    track = DialogueStateTrackingPipeline(model=model, tokenizer=tokenizer)
    dialogues = [{k: v for k, v in d.items() if k != "candidates"} for d in DIALOGUES]
    assert_same_outputs(track(dialogues, batch_size=3), track(dialogues, batch_size=1))


@pytest.mark.parametrize(
    "kwargs", [{"batch_size": 0}, {"batch_size": "2"}, {"candidate_batch_size": 2, "batch_size": 3}]
)
def test_bad_batch_size_names_it(select, kwargs):
    with pytest.raises(ValueError, match="batch_size"):
        select([{**HISTORY, "candidates": CANDIDATES}], **kwargs)


# ---------------------------------------------------------------- state tracking


def test_tracking_outputs_every_turn_and_the_current_intent(track):
    out = track(HISTORY)
    assert [t["turn"] for t in out["turns"]] == [0, 1, 2]
    assert [t["speaker"] for t in out["turns"]] == HISTORY["speakers"]
    for row in out["turns"]:
        assert set(row["act_scores"]) == set(ACTS)
        assert row["acts"] == [a for a in ACTS if row["act_scores"][a] >= 0.5]
        assert (row["intent"] is None) == (row["speaker"] == "SYSTEM")
    assert (
        out["intent"] == out["turns"][2]["intent"] and out["intent_score"] == out["turns"][2]["intent_score"]
    )
    everything = track(HISTORY, act_threshold=0.01)
    assert all(row["acts"] == ACTS for row in everything["turns"])


def test_tracking_uses_the_models_per_act_thresholds(saved):
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(saved)
    model.config.act_thresholds = [0.01] + [0.99] * (len(ACTS) - 1)
    pipe = DialogueStateTrackingPipeline(model=model, tokenizer=AutoTokenizer.from_pretrained(saved))
    assert all(row["acts"] == ACTS[:1] for row in pipe(HISTORY)["turns"])
    assert all(row["acts"] == ACTS for row in pipe(HISTORY, act_threshold=0.01)["turns"])  # a call overrides


def test_tracking_current_intent_is_the_newest_user_turns(track):
    out = track({"turns": HISTORY["turns"] + ["i found a restaurant in paris"],
                 "speakers": HISTORY["speakers"] + ["SYSTEM"]})  # fmt: skip
    assert out["intent"] == out["turns"][2]["intent"] and out["turns"][3]["intent"] is None


def test_tracking_long_history_is_left_truncated(track):
    turns = [f"find me a restaurant please {i}" for i in range(20)]
    speakers = ["USER" if i % 2 == 0 else "SYSTEM" for i in range(20)]
    out = track({"turns": turns, "speakers": speakers})
    k = out["truncated_turns"]
    assert k > 0 and [t["turn"] for t in out["turns"]] == list(range(k, 20))
    kept = track({"turns": turns[k:], "speakers": speakers[k:]})
    assert [t["act_scores"] for t in kept["turns"]] == [t["act_scores"] for t in out["turns"]]


@pytest.mark.parametrize(
    "inputs,error,match",
    [
        ({"turns": [], "speakers": []}, ValueError, "turns is empty"),
        ({"turns": ["hi", "hello"], "speakers": ["USER"]}, ValueError, "same length"),
        ({"turns": ["hi", 5]}, TypeError, r"turns\[1\] must be a str"),
        ({"turns": ["hi"], "candidates": ["x"]}, ValueError,
         r"unknown key\(s\) \['candidates'\]; expected \['turns', 'speakers'\]$"),
    ],
)  # fmt: skip
def test_bad_tracking_input_names_the_field(track, inputs, error, match):
    with pytest.raises(error, match=match):
        track(inputs)


@pytest.mark.parametrize(
    "which,kwargs,unknown",
    [
        ("track", {"act_treshold": 0.01}, "act_treshold"),
        ("track", {"speaker": ["SYSTEM"] * 3}, "speaker"),
        ("track", {"candidates": ["x"]}, "candidates"),
        ("select", {"candidate": ["x"]}, "candidate"),
        ("select", {"act_threshold": 0.5}, "act_threshold"),
        ("select", {"foo": 1}, "foo"),
    ],
)
def test_unknown_call_option_is_a_type_error_naming_it(select, track, which, kwargs, unknown):
    """A misspelled option must not run with the defaults (as dna-motif-detection and summarization refuse)."""
    pipe, dialogue = (track, HISTORY) if which == "track" else (select, {**HISTORY, "candidates": CANDIDATES})
    with pytest.raises(TypeError, match=rf"unknown option\(s\) \['{unknown}'\]; the call options are"):
        pipe(dialogue, **kwargs)
    with pytest.raises(TypeError, match=rf"unknown option\(s\) \['{unknown}'\]"):  # a list of dialogues too
        pipe([dialogue, dialogue], **kwargs)


def test_constructor_options_are_checked_and_are_call_defaults(saved, track, capsys):
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['act_treshold'\]"):
        pipeline("dialogue-state-tracking", model=saved, trust_remote_code=True, act_treshold=0.5)
    quiet = pipeline("dialogue-state-tracking", model=saved, trust_remote_code=True, progress=False)
    capsys.readouterr()
    assert quiet([HISTORY] * 16) == track([HISTORY] * 16, progress=False)
    assert "dialogue-state-tracking" not in capsys.readouterr().err
    loose = pipeline("dialogue-state-tracking", model=saved, trust_remote_code=True, act_threshold=0.01)
    assert all(row["acts"] == ACTS for row in loose(HISTORY)["turns"])
    select = pipeline(
        "dialogue-response-selection", model=saved, trust_remote_code=True, candidate_batch_size=2
    )
    assert select._batch_size == 2


def test_pipeline_refuses_a_model_without_the_needed_head_or_tokens():
    from hf_sparse.tasks.dialogue.data import train_dialogue_tokenizer

    tokenizer, formatter = tokenizer_and_formatter(max_length=40)
    model = tiny_model(tokenizer, formatter)  # act + intent heads only
    with pytest.raises(ValueError, match="no response-selection head"):
        DialogueResponseSelectionPipeline(model=model, tokenizer=tokenizer)
    bare = train_dialogue_tokenizer(["find me a hotel"], min_frequency=1)  # no [USR]/[SYS]/[RSP]
    with pytest.raises(ValueError, match=r"not in the tokenizer's vocabulary"):
        DialogueStateTrackingPipeline(model=model, tokenizer=bare)


def test_progress_bar_over_many_dialogues(track, capsys):
    many = [HISTORY] * 16
    shown = track(many)
    assert len(shown) == 16 and "dialogue-state-tracking" in capsys.readouterr().err
    assert track(many, progress=False) == shown and "dialogue-state-tracking" not in capsys.readouterr().err
    with pytest.raises(ValueError, match="no dialogues"):
        track([])


def test_a_remote_code_pipeline_leaves_the_installed_package_registered(select):
    """The pipeline class comes from the saved folder's remote-code bundle, whose copy of the attention
    integration module registers ``"hf_sparse"`` on import; where the package is installed, its own functions
    stay registered for every model of the process."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    from hf_sparse.attention import integration

    assert type(select).__module__.startswith("transformers_modules.")  # the bundle's class
    assert AttentionInterface._global_mapping["hf_sparse"] is integration.sparse_attention_forward
    assert AttentionMaskInterface._global_mapping["hf_sparse"] is integration.sparse_attention_mask


def test_sparse_backbone_with_absolute_positions_is_not_padded_past_its_table():
    """max_length 100 = max_position_embeddings 100: an 82-token history was padded to 128 (a multiple of 64),
    and position 127 is not in the table."""
    tokenizer, formatter = tokenizer_and_formatter(max_length=100)
    torch.manual_seed(0)
    model = tiny_model(tokenizer, formatter, kind="sparse_transformer", selection_head=True, act_labels=ACTS,
                       intent_labels=["NONE", "FindRestaurants"])  # fmt: skip
    assert model.config.backbone["max_position_embeddings"] == 100
    long = {"turns": ["find me a restaurant please", "which city for the restaurant ?", "in paris"] * 5}
    track = DialogueStateTrackingPipeline(model=model, tokenizer=tokenizer)
    encoded = track.formatter.encode_dialogue(["USER", "SYSTEM", "USER"] * 5, long["turns"])
    assert 64 < len(encoded["input_ids"]) <= 100
    out = track([long, HISTORY], batch_size=2)
    assert len(out[0]["turns"]) == 15 and out[0]["truncated_turns"] == 0
    assert_same_outputs(out, track([long, HISTORY], batch_size=1))
    select = DialogueResponseSelectionPipeline(model=model, tokenizer=tokenizer)
    assert len(select({**long, "candidates": CANDIDATES})["ranking"]) == len(CANDIDATES)


def test_left_padding_tokenizer_gives_the_same_outputs(saved, select, track):
    """Rows are padded on the right whatever the tokenizer's padding_side: candidate and turn positions,
    global separators; the tokenizer keeps its own setting."""
    from transformers import AutoModel, AutoTokenizer

    left = AutoTokenizer.from_pretrained(saved)
    left.padding_side = "left"
    model = AutoModel.from_pretrained(saved)
    dialogue = {**HISTORY, "candidates": CANDIDATES}  # candidates of different lengths share a forward pass
    want = select(dialogue, batch_size=1)
    assert_same_outputs(DialogueResponseSelectionPipeline(model=model, tokenizer=left)(dialogue), want)
    short = {"turns": HISTORY["turns"][:1]}
    want = [track(d) for d in (HISTORY, short)]
    assert_same_outputs(DialogueStateTrackingPipeline(model=model, tokenizer=left)([HISTORY, short], batch_size=2),
                        want)  # fmt: skip
    assert left.padding_side == "left"


def test_batch_size_is_kept_when_the_progress_bar_shows(saved, capsys):
    """A list long enough for the automatic progress bar is still batched batch_size rows per forward pass."""
    from transformers import AutoModel, AutoTokenizer

    model, tokenizer = AutoModel.from_pretrained(saved), AutoTokenizer.from_pretrained(saved)
    rows = []
    model.register_forward_pre_hook(lambda m, a, kw: rows.append(kw["input_ids"].shape[0]), with_kwargs=True)
    track = DialogueStateTrackingPipeline(model=model, tokenizer=tokenizer)
    capsys.readouterr()
    shown = track([HISTORY] * 20, batch_size=8)
    assert rows == [8, 8, 4] and "0/20" in capsys.readouterr().err  # the bar over the dialogues
    rows.clear()
    assert track([HISTORY] * 20, batch_size=8, progress=False) == shown and rows == [8, 8, 4]
    rows.clear()
    select = DialogueResponseSelectionPipeline(model=model, tokenizer=tokenizer)
    out = select([{**HISTORY, "candidates": CANDIDATES[:2]}] * 20)  # 40 pairs, 16 per pass by default
    assert len(out) == 20 and rows == [16, 16, 8] and "0/20" in capsys.readouterr().err


def test_long_candidate_is_reported_and_warned(select):
    stem = "i found a restaurant in paris " * 6
    candidates = [stem + "thanks bye", "goodbye", stem + "which city for the flight ?"]
    cut = select.formatter.encode_candidates(HISTORY["speakers"], HISTORY["turns"], candidates)[
        "truncated_candidate_tokens"
    ]
    assert cut[0] > 0 and cut[1] == 0 and cut[2] > 0
    with pytest.warns(UserWarning, match=r"candidate\(s\) \[0, 2\] do not fit in max_length=40 tokens"):
        out = select({**HISTORY, "candidates": candidates})
    assert out["truncated_candidate_tokens"] == max(cut)
    assert select({**HISTORY, "candidates": CANDIDATES})["truncated_candidate_tokens"] == 0


def test_positional_arguments_are_a_type_error(select, track):
    """An option given by position (the speakers, the candidates) was dropped with a log line."""
    with pytest.raises(TypeError, match=r"takes one positional argument \(the inputs\), got 1 more"):
        track(HISTORY, ["SYSTEM", "USER", "SYSTEM"])
    with pytest.raises(TypeError, match=r"dialogue-response-selection takes one positional argument"):
        select({"turns": HISTORY["turns"]}, CANDIDATES)
    with pytest.raises(TypeError, match="takes one positional argument"):
        track([HISTORY, HISTORY], ["SYSTEM", "USER", "SYSTEM"])


def test_an_inputs_own_candidates_and_speakers_replace_the_constructor_defaults(saved, select, track):
    """Constructor options are defaults: an input dict with its own values uses them (a call argument and the
    input's own still conflict)."""
    defaults = pipeline("dialogue-response-selection", model=saved, trust_remote_code=True,
                        candidates=["goodbye", "thanks bye"])  # fmt: skip
    ranked = [r["candidate"] for r in defaults({"turns": HISTORY["turns"]})["ranking"]]
    assert sorted(ranked) == ["goodbye", "thanks bye"]
    own = {**HISTORY, "candidates": CANDIDATES}
    assert_same_outputs(defaults(own), select(own))
    with pytest.raises(ValueError, match="candidates given both in inputs and as a call argument"):
        defaults(own, candidates=["goodbye"])
    system_first = pipeline("dialogue-state-tracking", model=saved, trust_remote_code=True,
                            speakers=["SYSTEM", "USER", "SYSTEM"])  # fmt: skip
    speakers = [t["speaker"] for t in system_first({"turns": HISTORY["turns"]})["turns"]]
    assert speakers == ["SYSTEM", "USER", "SYSTEM"]
    assert_same_outputs(system_first(HISTORY), track(HISTORY))  # HISTORY's own speakers: USER, SYSTEM, USER
    with pytest.raises(ValueError, match="speakers given both in inputs and as a call argument"):
        system_first(HISTORY, speakers=["USER", "SYSTEM", "USER"])


@pytest.mark.parametrize(
    "heads,tasks",
    [
        ({"selection_head": True}, ["dialogue-response-selection"]),
        ({"selection_head": False, "act_labels": ACTS}, ["dialogue-state-tracking"]),
        ({"selection_head": True, "intent_labels": ["NONE", "X"]},
         ["dialogue-response-selection", "dialogue-state-tracking"]),
    ],
    ids=["selection", "tracking", "both"],
)  # fmt: skip
def test_saved_folder_lists_only_the_pipelines_its_heads_serve(tmp_path, heads, tasks):
    """A selection-only folder listed both dialogue pipelines: pipeline(model=folder) could not infer its task."""
    import json

    tokenizer, formatter = tokenizer_and_formatter(max_length=40)
    tiny_model(tokenizer, formatter, **heads).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert sorted(json.loads((tmp_path / "config.json").read_text())["custom_pipelines"]) == tasks
    if len(tasks) == 1:
        pipe = pipeline(model=str(tmp_path), trust_remote_code=True)
        assert type(pipe).__name__ == {"dialogue-response-selection": "DialogueResponseSelectionPipeline",
                                       "dialogue-state-tracking": "DialogueStateTrackingPipeline"}[tasks[0]]  # fmt: skip
