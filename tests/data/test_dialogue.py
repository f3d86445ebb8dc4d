"""Dialogue formatting (layout, truncation, global mask), SGD labels, example builders and collators."""

import json
import os

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import BertTokenizer, PreTrainedTokenizerFast

from hf_sparse.data.loading import load_jsonl_splits
from hf_sparse.tasks.dialogue.collator import DialogueTrackingCollator, ResponseSelectionCollator
from hf_sparse.tasks.dialogue.data import (
    DialogueLabels,
    build_selection_examples,
    build_tracking_examples,
    check_sgd_record,
)
from hf_sparse.tasks.dialogue.formatter import DialogueFormatter

WORDS = "hi there hello book a table for two at noon what time please thanks yes no sure".split()


def bert_tokenizer():
    """BERT-like: WordPiece, [CLS] ... [SEP], one token per word of WORDS."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return BertTokenizer(vocab={w: i for i, w in enumerate(specials + WORDS)})


def roberta_tokenizer():
    """RoBERTa-like: byte-level BPE trained in memory, <s> ... </s>."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([" ".join(WORDS), "book a table for two at noon", "hi there, hello!"], trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
    )


def plain_tokenizer():
    """No cls/bos/sep/eos at all: word-level, whitespace split."""
    vocab = {"<unk>": 0, "<pad>": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>")


def make_formatter(tokenizer=None, **kwargs):
    tokenizer = bert_tokenizer() if tokenizer is None else tokenizer
    formatter = DialogueFormatter(tokenizer, **kwargs)
    formatter.add_special_tokens(tokenizer)
    return formatter


def tokens(formatter, ids):
    return formatter.tokenizer.convert_ids_to_tokens(ids)


SPEAKERS = ["USER", "SYSTEM", "USER"]
TURNS = ["hi there", "hello", "book a table"]


# ---------------------------------------------------------------- layout


def test_dialogue_layout_and_turn_positions():
    f = make_formatter()
    enc = f.encode_dialogue(SPEAKERS, TURNS)
    assert tokens(f, enc["input_ids"]) == (
        "[CLS] [USR] hi there [SYS] hello [USR] book a table [SEP]".split()
    )
    assert enc["turn_positions"] == [1, 4, 6]
    assert enc["turn_index"] == [0, 1, 2]
    assert enc["truncated_turns"] == 0 and enc["truncated_tokens"] == 0
    assert enc["attention_mask"] == [1] * len(enc["input_ids"])


def test_pair_layout_puts_candidate_after_rsp():
    f = make_formatter()
    enc = f.encode_pair(SPEAKERS[:2], TURNS[:2], "what time please")
    assert (
        tokens(f, enc["input_ids"]) == "[CLS] [USR] hi there [SYS] hello [RSP] what time please [SEP]".split()
    )
    assert enc["candidate_position"] == 6
    assert enc["turn_positions"] == [1, 4]
    assert enc["truncated_candidate_tokens"] == 0


def test_turn_separator_precedes_speaker_token_and_is_the_turn_position():
    f = make_formatter(turn_separator="[TURN]")
    enc = f.encode_dialogue(SPEAKERS[:2], TURNS[:2])
    assert tokens(f, enc["input_ids"]) == "[CLS] [TURN] [USR] hi there [TURN] [SYS] hello [SEP]".split()
    assert enc["turn_positions"] == [1, 5]


def test_special_token_text_in_a_turn_is_not_a_separator():
    f = make_formatter(tokenizer=roberta_tokenizer())
    enc = f.encode_dialogue(["USER", "SYSTEM"], ["hi [SYS] there [RSP]", "hello <s>"])
    ids = f._marker_ids()
    separators = [
        i for i, t in enumerate(enc["input_ids"]) if t in (ids["[USR]"], ids["[SYS]"], ids["[RSP]"])
    ]
    assert separators == enc["turn_positions"] == [1, separators[1]]
    assert enc["input_ids"].count(f.tokenizer.bos_token_id) == 1


@pytest.mark.parametrize(
    "make_tokenizer, prefix, suffix",
    [
        (bert_tokenizer, ["[CLS]"], ["[SEP]"]),
        (roberta_tokenizer, ["<s>"], ["</s>"]),
        (plain_tokenizer, [], []),
    ],
    ids=["bert", "roberta", "no-cls-sep"],
)
def test_add_special_tokens_works_for_each_tokenizer_kind(make_tokenizer, prefix, suffix):
    tokenizer = make_tokenizer()
    tokenizer.add_special_tokens({"extra_special_tokens": ["<keep>"]})
    before = len(tokenizer)
    f = DialogueFormatter(tokenizer)
    with pytest.raises(ValueError, match=r"add_special_tokens\(tokenizer\).*resize_token_embeddings"):
        f.encode_dialogue(SPEAKERS, TURNS)
    assert f.add_special_tokens(tokenizer) == 3
    assert len(tokenizer) == before + 3
    assert f.add_special_tokens(tokenizer) == 0  # idempotent
    assert {"[USR]", "[SYS]", "[RSP]", "<keep>"} <= set(tokenizer.all_special_tokens)
    enc = f.encode_dialogue(SPEAKERS, TURNS)
    toks = tokenizer.convert_ids_to_tokens(enc["input_ids"])
    assert toks[: len(prefix)] == prefix and toks[len(toks) - len(suffix) :] == suffix
    assert [toks[p] for p in enc["turn_positions"]] == ["[USR]", "[SYS]", "[USR]"]
    assert "[USR]" not in tokenizer.decode(enc["input_ids"], skip_special_tokens=True)


# ---------------------------------------------------------------- truncation


def numbered_dialogue(n_turns, words_per_turn=3):
    speakers = ["USER" if i % 2 == 0 else "SYSTEM" for i in range(n_turns)]
    return speakers, [" ".join([WORDS[i % len(WORDS)]] * words_per_turn) for i in range(n_turns)]


@pytest.mark.parametrize("n_kept", [1, 2, 5, 6])
def test_left_truncation_drops_oldest_whole_turns_and_reports_it(n_kept):
    speakers, turns = numbered_dialogue(6)  # each turn costs 1 separator + 3 words
    max_length = 2 + 4 * n_kept + 3  # room for n_kept turns and 3 tokens more: never a partial turn
    enc = make_formatter(max_length=max_length).encode_dialogue(speakers, turns)
    assert enc["turn_index"] == list(range(6 - n_kept, 6))
    assert enc["truncated_turns"] == 6 - n_kept
    assert enc["truncated_tokens"] == 0
    assert len(enc["input_ids"]) == 2 + 4 * n_kept <= max_length
    full = make_formatter().encode_dialogue(speakers[6 - n_kept :], turns[6 - n_kept :])
    assert enc["input_ids"] == full["input_ids"]


def test_latest_turn_alone_too_long_keeps_its_newest_tokens():
    f = make_formatter(max_length=8)
    enc = f.encode_dialogue(["USER", "SYSTEM"], ["hi", "book a table for two at noon"])
    assert tokens(f, enc["input_ids"]) == "[CLS] [SYS] table for two at noon [SEP]".split()
    assert enc["turn_index"] == [1] and enc["truncated_turns"] == 1
    assert enc["truncated_tokens"] == 2


def test_pair_truncation_keeps_candidate_and_newest_turns():
    speakers, turns = numbered_dialogue(6)
    f = make_formatter(max_length=2 + 4 * 2 + 1 + 3)
    enc = f.encode_pair(speakers, turns, "book a table")
    assert enc["turn_index"] == [4, 5] and enc["truncated_turns"] == 4
    assert tokens(f, enc["input_ids"])[-5:] == ["[RSP]", "book", "a", "table", "[SEP]"]
    long = f.encode_pair(speakers, turns, " ".join(["noon"] * 20))
    assert long["truncated_candidate_tokens"] > 0 and long["turn_index"] == [5]
    assert len(long["input_ids"]) == f.max_length


# ---------------------------------------------------------------- global attention


def global_positions(enc):
    return [i for i, g in enumerate(enc["global_attention_mask"]) if g]


@pytest.mark.parametrize(
    "global_on, expected",
    [
        (("cls", "separators", "latest_turn", "candidate"), [0, 1, 4, 6, 7, 8, 9]),
        (("separators",), [1, 4, 6]),
        (("cls", "separators"), [0, 1, 4, 6]),
        (("latest_turn",), [6, 7, 8, 9]),
        ((), []),
    ],
)
def test_global_mask_positions(global_on, expected):
    enc = make_formatter(global_on=global_on).encode_dialogue(SPEAKERS, TURNS)
    assert global_positions(enc) == expected


def test_global_mask_on_candidate_tokens_for_response_selection():
    f = make_formatter(global_on=("separators", "candidate"))
    enc = f.encode_pair(SPEAKERS[:2], TURNS[:2], "what time please")
    # [CLS] [USR] hi there [SYS] hello [RSP] what time please [SEP]
    assert global_positions(enc) == [1, 4, 6, 7, 8, 9]
    assert enc["global_attention_mask"][-1] == 0


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "speakers, turns, error, match",
    [
        (["USER"], ["hi", "hello"], ValueError, r"speakers and turns .* 1 and 2"),
        ([], [], ValueError, r"turns is empty"),
        (["USER", "SYSTEM"], ["hi", 3], TypeError, r"turns\[1\] must be a str, got int"),
        (["USER", "BOT"], ["hi", "hello"], ValueError, r"speakers\[1\] is 'BOT'"),
        ("USER", ["hi"], TypeError, r"speakers must be a list"),
    ],
)
def test_validation_errors_name_the_field(speakers, turns, error, match):
    f = make_formatter()
    with pytest.raises(error, match=match):
        f.encode_dialogue(speakers, turns)


def test_candidate_validation_errors():
    f = make_formatter()
    with pytest.raises(ValueError, match="candidates is empty"):
        f.encode_candidates(SPEAKERS, TURNS, [])
    with pytest.raises(TypeError, match=r"candidates\[1\] must be a str"):
        f.encode_candidates(SPEAKERS, TURNS, ["hi", None])
    with pytest.raises(TypeError, match="candidate must be a str"):
        f.encode_pair(SPEAKERS, TURNS, 5)


def test_constructor_validation():
    tok = bert_tokenizer()
    with pytest.raises(ValueError, match=r"global_on has unknown names \['everything'\]"):
        DialogueFormatter(tok, global_on=("everything",))
    with pytest.raises(ValueError, match="max_length=4 is too small"):
        DialogueFormatter(tok, max_length=4)
    with pytest.raises(ValueError, match="must differ"):
        DialogueFormatter(tok, candidate_separator="[USR]")


# ---------------------------------------------------------------- labels and tracking examples


def toy_dialogues():
    """Three dialogues; every SYSTEM text is unique to its dialogue except 'have a nice day'."""
    return [
        {
            "dialogue_id": f"d{k}",
            "speakers": ["USER", "SYSTEM"] * 3,
            "turns": [
                f"user {k} a",
                f"system {k} one",
                f"user {k} b",
                f"system {k} two" if k else "have a nice day",
                f"user {k} c",
                "have a nice day" if k == 1 else f"system {k} three",
            ],
            "acts": [
                ["INFORM_INTENT"],
                ["REQUEST"],
                ["INFORM"],
                ["OFFER"],
                ["THANK_YOU", "GOODBYE"],
                ["GOODBYE"],
            ],
            "active_intent": [f"Intent{k % 2}", None, f"Intent{k % 2}", None, "" if k == 2 else "NONE", None],
        }
        for k in range(3)
    ]


def test_labels_vocabularies_and_round_trip():
    labels = DialogueLabels.from_dialogues(toy_dialogues())
    assert labels.acts == ("GOODBYE", "INFORM", "INFORM_INTENT", "OFFER", "REQUEST", "THANK_YOU")
    assert labels.intents == ("NONE", "Intent0", "Intent1")
    assert labels.seen_intents == {"NONE", "Intent0", "Intent1"}
    assert labels.intent_id("") == labels.intent_id(None) == 0
    assert labels.intent_id("Unseen") == -100
    restored = DialogueLabels.from_dict(json.loads(json.dumps(labels.to_dict())))
    assert restored == labels and restored.intent_to_id == labels.intent_to_id


def test_tracking_examples_align_labels_with_kept_turns():
    dialogues = toy_dialogues()
    labels = DialogueLabels.from_dialogues(dialogues[:1])  # Intent1 unseen
    f = make_formatter(max_length=14)  # keeps only the newest turns
    (ex,) = build_tracking_examples(dialogues[1:2], f, labels)
    kept = ex["turn_index"]
    assert ex["truncated_turns"] == kept[0] > 0
    assert len(ex["act_labels"]) == len(ex["intent_labels"]) == len(ex["turn_positions"]) == len(kept)
    for row, i in zip(ex["act_labels"], kept):
        assert [a for a, v in zip(labels.acts, row) if v] == sorted(dialogues[1]["acts"][i])
    speakers = [dialogues[1]["speakers"][i] for i in kept]
    for s, intent_id, name, i in zip(speakers, ex["intent_labels"], ex["intents"], kept):
        if s == "SYSTEM":
            assert intent_id == -100 and name is None
        else:
            assert name == (dialogues[1]["active_intent"][i] or "NONE")
            assert intent_id == (0 if name == "NONE" else -100)  # Intent1 is not in the vocabulary


def test_tracking_prefix_mode_labels_only_the_latest_turn():
    dialogues = toy_dialogues()
    labels = DialogueLabels.from_dialogues(dialogues)
    examples = build_tracking_examples(dialogues[:1], make_formatter(), labels, mode="prefix")
    assert [ex["turn"] for ex in examples] == list(range(6))
    for ex in examples:
        *older, last = ex["act_labels"]
        assert all(v == -100 for row in older for v in row) and set(last) <= {0, 1} and sum(last) >= 1
        assert all(v == -100 for v in ex["intent_labels"][:-1])


def test_act_speakers_masks_other_speakers_rows():
    labels = DialogueLabels.from_dialogues(toy_dialogues())
    (ex,) = build_tracking_examples(toy_dialogues()[:1], make_formatter(), labels, act_speakers=("USER",))
    assert [all(v == -100 for v in row) for row in ex["act_labels"]] == [False, True] * 3


# ---------------------------------------------------------------- response selection


def test_negatives_come_from_other_dialogues_and_differ_from_the_positive():
    dialogues = toy_dialogues()
    examples = build_selection_examples(dialogues, n_negatives=4, seed=0)
    assert len(examples) == 9  # 3 SYSTEM turns in each of 3 dialogues
    for ex in examples:
        own = dialogues[int(ex["dialogue_id"][1:])]
        positive = own["turns"][ex["response_turn"]]
        assert ex["candidates"][ex["labels"]] == positive
        negatives = [c for j, c in enumerate(ex["candidates"]) if j != ex["labels"]]
        assert len(negatives) == 4 and len(set(negatives)) == 4 and positive not in negatives
        assert not set(negatives) & {t for t in own["turns"] if t != "have a nice day"}
        assert ex["turns"] == own["turns"][: ex["response_turn"]]


def test_selection_is_deterministic_for_a_seed_and_varies_with_it():
    dialogues = toy_dialogues()
    runs = [build_selection_examples(dialogues, n_negatives=3, seed=s) for s in (0, 0, 1)]
    assert runs[0] == runs[1]
    assert [e["candidates"] for e in runs[0]] != [e["candidates"] for e in runs[2]]
    reordered = build_selection_examples(dialogues[::-1], n_negatives=3, seed=0)
    assert sorted(map(str, reordered)) == sorted(map(str, runs[0]))


def test_selection_response_points_and_history_window():
    dialogues = toy_dialogues()
    last = build_selection_examples(dialogues, n_negatives=2, response_turns="last")
    assert [e["response_turn"] for e in last] == [5, 5, 5]
    every2 = build_selection_examples(dialogues, n_negatives=2, response_turns=2)
    assert [e["response_turn"] for e in every2] == [1, 5] * 3
    window = build_selection_examples(dialogues, n_negatives=2, history_window=2, formatter=make_formatter())
    for e in window:
        assert e["history_start"] == max(0, e["response_turn"] - 2)
        assert len(e["turns"]) == min(2, e["response_turn"])
        assert all(ti == list(range(e["history_start"], e["response_turn"])) for ti in e["turn_index"])
    with pytest.raises(ValueError, match="distinct negatives"):
        build_selection_examples(dialogues, n_negatives=50)
    with pytest.raises(ValueError, match="response_turns"):
        build_selection_examples(dialogues, response_turns="first")


def test_selection_candidates_share_one_history_as_in_the_pipeline():
    """A long candidate leaves room for fewer turns: the oldest turns it drops are dropped for every candidate
    of the example (the pipeline's layout), so candidates differ only in the candidate."""
    system = [["hello", "sure", "for two at noon please thanks yes"], ["yes", "no thanks", "at noon"]]
    dialogues = [
        {"dialogue_id": f"d{k}", "speakers": ["USER", "SYSTEM"] * 3,
         "turns": ["hi there", system[k][0], "book a table", system[k][1], "what time", system[k][2]]}
        for k in range(2)
    ]  # fmt: skip
    f = make_formatter(max_length=16)
    examples = build_selection_examples(dialogues, n_negatives=2, formatter=f)
    own_layout = 0  # examples whose candidates would each keep their own history
    for e in examples:
        alone = f.encode_candidates(e["speakers"], e["turns"], e["candidates"])["truncated_turns"]
        own_layout += len(set(alone)) > 1
        assert e["truncated_turns"] == [max(alone)] * 3
        assert all(ti == e["turn_index"][0] for ti in e["turn_index"])
        assert e["turn_index"][0] == list(range(e["history_start"] + max(alone), e["response_turn"]))
        assert all(len(ids) <= 16 for ids in e["input_ids"])
    assert own_layout > 0


# ---------------------------------------------------------------- collators


def short_dialogues():
    """Two dialogues of 6 and 11 tokens (BERT tokenizer), 2 and 3 turns."""
    return [
        {
            "dialogue_id": "a",
            "speakers": ["USER", "SYSTEM"],
            "turns": ["hi", "hello"],
            "acts": [["INFORM_INTENT"], ["REQUEST"]],
            "active_intent": ["Intent0", None],
        },
        {
            "dialogue_id": "b",
            "speakers": SPEAKERS,
            "turns": TURNS,
            "acts": [["INFORM_INTENT"], ["REQUEST"], ["INFORM"]],
            "active_intent": ["Intent0", None, "Intent0"],
        },
    ]


@pytest.mark.parametrize("multiple, expected_len", [(64, 64), (8, 16), (None, 11)])
def test_tracking_collator_pads_to_block_multiple(multiple, expected_len):
    dialogues = short_dialogues()
    labels = DialogueLabels.from_dialogues(dialogues)
    f = make_formatter()
    examples = build_tracking_examples(dialogues, f, labels)
    assert [len(e["input_ids"]) for e in examples] == [6, 11]
    batch = DialogueTrackingCollator(f.tokenizer.pad_token_id, pad_to_multiple_of=multiple)(examples)
    assert batch["input_ids"].shape == batch["global_attention_mask"].shape == (2, expected_len)
    assert batch["turn_positions"].tolist() == [[1, 3, -1], [1, 4, 6]]
    assert batch["intent_labels"].tolist() == [[1, -100, -100], [1, -100, 1]]
    assert batch["act_labels"].shape == (2, 3, labels.n_acts)
    assert (batch["act_labels"][0, 2] == -100).all() and batch["act_labels"][0, :2].sum() == 2
    assert (batch["input_ids"][0, 6:] == f.tokenizer.pad_token_id).all()
    assert batch["attention_mask"].sum(1).tolist() == [6, 11]
    assert batch["global_attention_mask"][0, 6:].sum() == 0
    assert batch["input_ids"].dtype == torch.long


def test_selection_collator_groups_candidates():
    f = make_formatter()
    examples = build_selection_examples(toy_dialogues(), n_negatives=3, formatter=f)[:4]
    batch = ResponseSelectionCollator(f.tokenizer.pad_token_id, pad_to_multiple_of=16)(examples)
    longest = max(len(ids) for e in examples for ids in e["input_ids"])
    assert longest > 16
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (4, 4, -(-longest // 16) * 16)
    assert batch["candidate_positions"].shape == (4, 4)
    assert batch["labels"].tolist() == [e["labels"] for e in examples]
    ex, b = examples[2], 2
    for c in range(4):
        n = len(ex["input_ids"][c])
        assert batch["input_ids"][b, c, :n].tolist() == ex["input_ids"][c]
        assert batch["attention_mask"][b, c].sum() == n
    fewer = {**examples[0], "input_ids": examples[0]["input_ids"][:2]}
    with pytest.raises(ValueError, match=r"features\[1\] has 2 candidates, features\[0\] has 4"):
        ResponseSelectionCollator(0)([examples[1], fewer])
    with pytest.raises(TypeError, match="pad_token_id must be an int"):
        ResponseSelectionCollator(None)


def test_collated_batch_runs_through_a_resized_longformer():
    from transformers import LongformerConfig, LongformerModel

    tokenizer = roberta_tokenizer()
    config = LongformerConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        attention_window=8,
        max_position_embeddings=80,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LongformerModel(config).eval()
    f = DialogueFormatter(tokenizer, max_length=48)
    f.add_special_tokens(tokenizer)
    model.resize_token_embeddings(len(tokenizer))
    labels = DialogueLabels.from_dialogues(toy_dialogues())
    examples = build_tracking_examples(toy_dialogues(), f, labels)
    batch = DialogueTrackingCollator(tokenizer.pad_token_id, pad_to_multiple_of=8)(examples)
    with torch.no_grad():
        out = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            global_attention_mask=batch["global_attention_mask"],
        )
    index = batch["turn_positions"].clamp(min=0)  # (B, T)
    turn_states = out.last_hidden_state.gather(1, index[..., None].expand(-1, -1, 16))  # (B, T, H)
    assert batch["input_ids"].shape[1] % 8 == 0
    assert turn_states.shape == (3, batch["turn_positions"].shape[1], 16)
    assert torch.isfinite(turn_states).all()


# ---------------------------------------------------------------- real SGD data


@pytest.fixture
def sgd_dir(shared_data):
    path = os.path.join(shared_data, "dialogue", "schema_guided_dialogue")
    if not os.path.isfile(os.path.join(path, "validation.jsonl")):
        pytest.skip("SGD data not available")
    return path


def test_sgd_validation_every_user_turn_has_an_intent_id(sgd_dir):
    dialogues = _dialogues_of(os.path.join(sgd_dir, "validation.jsonl"))
    assert len(dialogues) == 300
    labels = DialogueLabels.from_dialogues(dialogues)
    assert labels.n_acts == 18 and labels.n_intents > 1 and labels.intents[0] == "NONE"
    f = make_formatter(max_length=128)
    examples = build_tracking_examples(dialogues, f, labels)
    user_ids = [
        i for ex in examples for i, name in zip(ex["intent_labels"], ex["intents"]) if name is not None
    ]
    assert user_ids and all(i >= 0 for i in user_ids)
    assert all(len(ex["input_ids"]) <= 128 for ex in examples)
    assert any(ex["truncated_turns"] > 0 for ex in examples)
    assert all(sum(row) >= 1 for ex in examples for row in ex["act_labels"])  # every SGD turn has an act


def test_sgd_train_labels_mark_unseen_validation_intents(sgd_dir):
    train = _dialogues_of(os.path.join(sgd_dir, "train.jsonl"))
    labels = DialogueLabels.from_dialogues(train)
    assert labels.n_acts == 18 and labels.n_intents == 37  # 36 intents + NONE (README)
    validation = _dialogues_of(os.path.join(sgd_dir, "validation.jsonl"))
    user = [
        (intent, labels.intent_id(intent))
        for d in validation
        for s, intent in zip(d["speakers"], d["active_intent"])
        if s == "USER"
    ]
    unseen = [intent for intent, i in user if i == -100]
    assert len(unseen) == 72  # README: 72 of 2,667 validation USER turns have intents not in train
    assert not set(unseen) & labels.seen_intents


def _dialogues_of(path):
    """The tasks' reading path: load_dataset json, every row checked in map."""
    folder, name = os.path.split(path)
    split = name.split(".")[0]
    return load_jsonl_splits(folder, splits=(split,), optional=(), check=check_sgd_record)[split]


@pytest.mark.parametrize(
    "row, match",
    [
        (
            {"dialogue_id": "x", "speakers": ["USER"], "turns": ["a", "b"]},
            "field 'speakers' has 1 entries for 2 turns",
        ),
        ({"dialogue_id": "x", "turns": ["a"]}, r"missing field\(s\) \['speakers'\]"),
        (
            {"dialogue_id": "x", "speakers": ["USER"], "turns": [None]},
            r"field 'turns'\[0\] must be a str, got None",
        ),
        (
            {"dialogue_id": "x", "speakers": ["USER"], "turns": [5]},
            r"field 'turns'\[0\] must be a str, got 5",
        ),
        (
            {"dialogue_id": "x", "speakers": ["AGENT"], "turns": ["a"]},
            r"field 'speakers' has unknown speaker\(s\) \['AGENT'\]",
        ),
        (
            {"dialogue_id": "x", "speakers": ["USER"], "turns": ["a"], "acts": [None]},
            r"field 'acts'\[0\] must be a list of str",
        ),
        (
            {"dialogue_id": "x", "speakers": ["USER"], "turns": ["a"], "acts": [["A"]], "active_intent": [3]},
            r"field 'active_intent'\[0\] must be a str or null",
        ),
    ],
)
def test_read_sgd_names_file_row_and_field(tmp_path, row, match):
    good = {"dialogue_id": "ok", "speakers": ["USER"], "turns": ["hi"]}
    good.update({k: [["INFORM"]] if k == "acts" else ["Intent"] for k in row if k not in good})
    (tmp_path / "train.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=f"train.jsonl: row 2: {match}"):
        _dialogues_of(tmp_path / "train.jsonl")


def test_read_sgd_row_without_a_field_the_others_have(tmp_path):
    """A row lacking "acts" (datasets fills null) in a file whose rows have them is an error naming the row;
    a field that is null in every row counts as absent."""
    rows = [
        {"dialogue_id": str(i), "speakers": ["USER"], "turns": ["hi"], "acts": [["INFORM"]]} for i in range(3)
    ]
    del rows[1]["acts"]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match="train.jsonl: row 2: field 'acts' is missing"):
        _dialogues_of(tmp_path / "train.jsonl")
    for row in rows:
        row["acts"] = None
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    dialogues = _dialogues_of(tmp_path / "train.jsonl")
    with pytest.raises(ValueError, match="has no field 'acts'"):
        DialogueLabels.from_dialogues(dialogues)
