"""Dialogue metrics: per-turn dialogue-act F1 (multi-label) and intent accuracy on seen/unseen intents."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ...metrics.classification import multilabel_f1, per_class_f1


def _binarize(name: str, acts: Sequence[Iterable[str]], index: dict[str, int]) -> np.ndarray:
    out = np.zeros((len(acts), len(index)), dtype=bool)
    for i, turn in enumerate(acts):
        if isinstance(turn, str) or not isinstance(turn, Iterable):
            raise TypeError(f"{name}[{i}] must be a collection of act names, got {turn!r}")
        for act in turn:
            if act not in index:
                raise ValueError(f"{name}[{i}] has act {act!r}, which is not in labels")
            out[i, index[act]] = True
    return out


def dialogue_act_f1(true_acts, pred_acts, labels: Sequence[str] | None = None) -> dict:
    """Multi-label dialogue-act F1 over turns: ``{"micro", "macro", "per_act"}``.

    Each turn has a set of acts (e.g. SGD's ``acts``: ``["INFORM", "INFORM_INTENT"]``). Inputs are
    either one collection of act names per turn, or 0/1 matrices ``(n_turns, n_acts)``. ``micro``
    and ``macro`` are :func:`~hf_sparse.metrics.classification.multilabel_f1` (macro over acts that
    occur in the truth or the predictions); ``per_act`` maps each act (or column) to its F1, ``nan``
    for acts that occur in neither. ``labels`` fixes the act inventory (default: every act seen in
    either input, sorted); an act outside it raises ``ValueError``. Turns without any act and an
    empty inventory give ``{"micro": 0.0, "macro": 0.0, "per_act": {}}`` (zero divisions).
    """
    if _is_indicator(true_acts) or _is_indicator(pred_acts):
        return _scores(true_acts, pred_acts, labels)
    for name, value in (("true_acts", true_acts), ("pred_acts", pred_acts)):
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise TypeError(
                f"{name} must be a list with one collection of acts per turn, got {type(value).__name__}"
            )
    if len(true_acts) != len(pred_acts):
        raise ValueError(f"true_acts and pred_acts differ in length: {len(true_acts)} != {len(pred_acts)}")
    if labels is None:
        labels = sorted({a for turn in (*true_acts, *pred_acts) if not isinstance(turn, str) for a in turn})
    index = {a: j for j, a in enumerate(labels)}
    t = _binarize("true_acts", true_acts, index)
    p = _binarize("pred_acts", pred_acts, index)
    if not index and len(t):
        # no act anywhere and none in labels: no true and no predicted positive, a zero division (0.0)
        return {"micro": 0.0, "macro": 0.0, "per_act": {}}
    return _scores(t, p, labels)


def _is_indicator(x) -> bool:
    """A 0/1 matrix (array, tensor, or list of lists of numbers) rather than act names per turn."""
    if isinstance(x, np.ndarray) or hasattr(x, "detach"):
        return True
    if isinstance(x, str) or not isinstance(x, Sequence):
        return False
    values = [v for row in x if isinstance(row, (list, tuple)) for v in row]
    return bool(values) and all(isinstance(v, (bool, int, np.integer, np.bool_)) for v in values)


def _scores(t, p, labels) -> dict:
    return {
        "micro": multilabel_f1(t, p, average="micro"),
        "macro": multilabel_f1(t, p, average="macro"),
        "per_act": per_class_f1(t, p, labels=labels),
    }


def intent_accuracy(pred, gold, seen_intents: Iterable[str]) -> dict:
    """Intent accuracy on all turns and separately on turns whose gold intent was seen in training.

    Returns ``{"all", "seen", "unseen", "n_seen", "n_unseen"}``: ``seen`` is the accuracy over turns
    whose gold intent is in ``seen_intents``, ``unseen`` over the others (zero-shot intents of new
    services, as in SGD's test split). Turns whose gold intent is ``None`` (SGD's SYSTEM turns) are
    skipped. An empty group has accuracy ``nan``; no scored turn at all raises ``ValueError``.
    """
    for name, value in (("pred", pred), ("gold", gold)):
        if isinstance(value, str) or not isinstance(value, (Sequence, np.ndarray)):
            raise TypeError(f"{name} must be a list of intents, got {type(value).__name__}")
    if len(pred) != len(gold):
        raise ValueError(f"pred and gold differ in length: {len(pred)} != {len(gold)}")
    if isinstance(seen_intents, str) or not isinstance(seen_intents, Iterable):
        raise TypeError(f"seen_intents must be a set of intents, got {type(seen_intents).__name__}")
    seen_set = set(seen_intents)
    pairs = [(p, g) for p, g in zip(pred, gold) if g is not None]
    if not pairs:
        raise ValueError("gold has no intent to score (empty, or every entry is None)")
    correct = np.array([p == g for p, g in pairs], dtype=bool)
    is_seen = np.array([g in seen_set for _, g in pairs], dtype=bool)
    n_seen, n_unseen = int(is_seen.sum()), int((~is_seen).sum())
    return {
        "all": float(correct.mean()),
        "seen": float(correct[is_seen].mean()) if n_seen else float("nan"),
        "unseen": float(correct[~is_seen].mean()) if n_unseen else float("nan"),
        "n_seen": n_seen,
        "n_unseen": n_unseen,
    }


__all__ = ["dialogue_act_f1", "intent_accuracy"]
