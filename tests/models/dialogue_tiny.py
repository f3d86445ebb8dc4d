"""Tiny dialogue models, a tokenizer and synthetic SGD-format dialogues for the dialogue tests (offline)."""

from __future__ import annotations

import json
import random

from hf_sparse.tasks.dialogue.configuration_dialogue import LongformerDialogueConfig
from hf_sparse.tasks.dialogue.data import train_dialogue_tokenizer
from hf_sparse.tasks.dialogue.formatter import DialogueFormatter
from hf_sparse.tasks.dialogue.modeling_dialogue import LongformerForDialogue

CITIES = ["berkeley", "oakland", "paris", "london", "tokyo", "rome", "lima", "oslo"]
DOMAINS = {"restaurant": "FindRestaurants", "flight": "SearchFlights", "hotel": "ReserveHotel"}
ACTS = ["GOODBYE", "INFORM", "INFORM_INTENT", "OFFER", "REQUEST", "THANK_YOU"]


def synthetic_dialogues(n: int, seed: int = 0, domains=("restaurant", "flight")) -> list[dict]:
    """SGD-format dialogues (6 turns, USER first) whose acts follow from the words, whose intent follows from
    the domain named in the first turn, and whose 4th turn repeats the city the user named."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        domain, city = rng.choice(list(domains)), rng.choice(CITIES)
        intent = DOMAINS[domain]
        out.append(
            {
                "dialogue_id": f"{seed}_{i:05d}",
                "services": [domain],
                "speakers": ["USER", "SYSTEM", "USER", "SYSTEM", "USER", "SYSTEM"],
                "turns": [
                    f"find me a {domain} please",
                    f"which city for the {domain} ?",
                    f"in {city}",
                    f"i found a {domain} in {city}",
                    "thanks bye",
                    "goodbye",
                ],
                "acts": [["INFORM_INTENT"], ["REQUEST"], ["INFORM"], ["OFFER"], ["THANK_YOU"], ["GOODBYE"]],
                "active_intent": [intent, None, intent, None, "NONE", None],
            }
        )
    return out


def write_sgd(folder, splits: dict[str, list[dict]]) -> str:
    """Write ``{split: dialogues}`` as ``<split>.jsonl`` files; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, dialogues in splits.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in dialogues))
    return str(folder)


def tokenizer_and_formatter(max_length: int = 128, **formatter_kwargs):
    dialogues = synthetic_dialogues(50, domains=tuple(DOMAINS))
    tokenizer = train_dialogue_tokenizer([t for d in dialogues for t in d["turns"]], min_frequency=1)
    formatter = DialogueFormatter(tokenizer, max_length=max_length, **formatter_kwargs)
    formatter.add_special_tokens(tokenizer)
    return tokenizer, formatter


def tiny_backbone(tokenizer, kind: str = "longformer", max_length: int = 128) -> dict:
    common = {
        "vocab_size": len(tokenizer),
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if kind == "longformer":
        return {"model_type": "longformer", **common, "attention_window": 16,
                "max_position_embeddings": max_length + tokenizer.pad_token_id + 1}  # fmt: skip
    return {"model_type": "sparse_transformer", **common, "max_position_embeddings": max_length,
            "attention_pattern": {"type": "longformer", "window": 16}}  # fmt: skip


def tiny_model(tokenizer, formatter, kind: str = "longformer", **heads) -> LongformerForDialogue:
    heads = heads or {
        "selection_head": False,
        "act_labels": ACTS,
        "intent_labels": ["NONE", *sorted(DOMAINS.values())],
    }
    config = LongformerDialogueConfig(
        backbone=tiny_backbone(tokenizer, kind, formatter.max_length), formatter=formatter.to_dict(), **heads
    )
    return LongformerForDialogue(config)
