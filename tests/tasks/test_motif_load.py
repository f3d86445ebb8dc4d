"""LongformerForMotifDetection.from_pretrained with other motif_names than the checkpoint's: the motif heads follow the
names (rows reordered for the same motifs in another order; refused, or afresh on request, for other motifs)."""

import pytest
import torch
from transformers import AutoModelForTokenClassification

import hf_sparse  # noqa: F401  (registers the Auto classes)
from hf_sparse.tasks.motif.configuration_motif import LongformerMotifConfig
from hf_sparse.tasks.motif.modeling_motif import LongformerForMotifDetection
from tests.models.motif_tiny import motif_model

NAMES = ["CTCF", "SP1", "REST"]


def _saved_model(folder, **kw):
    """A tiny motif model with non-zero head biases (a new model's are 0), saved to ``folder``."""
    torch.manual_seed(0)
    model = motif_model(**kw)
    with torch.no_grad():
        for head in (model.token_classifier, model.sequence_head[-1]):
            head.bias.normal_()
    model.save_pretrained(folder)
    return model


def _outputs(model, ids):
    """Per-tag logits ``{tag: (N,)}`` and per-motif presence logits ``{motif: float}`` (or class logits)."""
    with torch.no_grad():
        out = model(input_ids=ids)
    tags = {t: out.logits[0, :, int(i)] for i, t in model.config.id2label.items()}
    seq = out.sequence_logits[0]
    if model.config.sequence_task == "motif_presence":
        return tags, {m: seq[i] for i, m in enumerate(model.config.motif_names)}
    return tags, seq


def _assert_same_per_name(a, b):
    (tags_a, seq_a), (tags_b, seq_b) = a, b
    assert set(tags_a) == set(tags_b)
    for tag in tags_a:
        torch.testing.assert_close(tags_a[tag], tags_b[tag], msg=tag)
    if isinstance(seq_a, dict):
        assert set(seq_a) == set(seq_b)
        for m in seq_a:
            torch.testing.assert_close(seq_a[m], seq_b[m], msg=m)
    else:
        torch.testing.assert_close(seq_a, seq_b)


@pytest.mark.parametrize("head", ["motif_presence", "classification"])
@pytest.mark.parametrize("load", ["kwarg", "auto", "config"])
def test_reordered_motif_names_reorder_the_head_rows(tmp_path, head, load):
    """Before: the heads kept the checkpoint's row order under the new id2label, so REST's tags and presence were
    CTCF's (the pipeline called CTCF sites REST)."""
    kw = {"sequence_label_names": ["neg", "pos"]} if head == "classification" else {}
    model = _saved_model(tmp_path / "old", motif_names=NAMES, sequence_task=head, **kw)
    ids = torch.randint(5, 9, (1, 40))
    ids[0, 0], ids[0, -1] = 2, 3
    order = ["REST", "CTCF", "SP1"]
    if load == "kwarg":
        loaded = LongformerForMotifDetection.from_pretrained(tmp_path / "old", motif_names=order)
    elif load == "auto":
        loaded = AutoModelForTokenClassification.from_pretrained(tmp_path / "old", motif_names=order)
    else:
        config = LongformerMotifConfig.from_pretrained(tmp_path / "old")
        config.motif_names = order
        loaded = LongformerForMotifDetection.from_pretrained(tmp_path / "old", config=config)
    assert loaded.config.motif_names == order and loaded.config.id2label[1] == "B-REST"
    _assert_same_per_name(_outputs(model, ids), _outputs(loaded.eval(), ids))
    loaded.save_pretrained(tmp_path / "new")  # saved in the new order, and reloaded as it is
    reloaded = LongformerForMotifDetection.from_pretrained(tmp_path / "new")
    _assert_same_per_name(_outputs(model, ids), _outputs(reloaded.eval(), ids))


def test_other_motifs_of_the_same_number_are_refused_unless_the_heads_start_afresh(tmp_path):
    """Before: ["CTCF", "SP1", "TP53"] loaded REST's trained rows as TP53's without a word."""
    model = _saved_model(tmp_path, motif_names=NAMES)
    other = ["CTCF", "SP1", "TP53"]
    with pytest.raises(ValueError, match=r"motif_names=\['CTCF', 'SP1', 'TP53'\] are not the motifs "
                                         r"\['CTCF', 'SP1', 'REST'\].*ignore_mismatched_sizes=True"):  # fmt: skip
        LongformerForMotifDetection.from_pretrained(tmp_path, motif_names=other)
    fresh = LongformerForMotifDetection.from_pretrained(
        tmp_path, motif_names=other, ignore_mismatched_sizes=True
    )
    assert fresh.config.motif_names == other
    for name in ("token_classifier", "sequence_head.3"):  # initialised afresh
        new, old = fresh.get_submodule(name), model.get_submodule(name)
        assert not torch.equal(new.weight, old.weight), name
        assert not new.bias.any() and old.bias.all(), name
    head, backbone = fresh.sequence_head[0].weight, fresh.backbone.state_dict()  # not motif-specific: loaded
    torch.testing.assert_close(head, model.sequence_head[0].weight)
    torch.testing.assert_close(backbone, model.backbone.state_dict())
