"""The dna-motif-detection model card describes the model it documents: its heads, Hub tag, Auto class and
the bases one window reads."""

import pytest

from hf_sparse import hub
from hf_sparse.tasks.motif import card_fields
from tests.models.motif_tiny import motif_config

HEADS = {
    "class only": dict(motif_names=[], sequence_task="classification", sequence_label_names=["neg", "pos"]),
    "tags only": dict(sequence_task=None),
    "tags+presence": dict(sequence_task="motif_presence"),
}


def _card(config):
    return hub.render_model_card("dna-motif-detection", model_name="motif-card", **card_fields(config))


@pytest.mark.parametrize(
    "head, pipeline_tag, auto_class, says",
    [
        ("class only", "text-classification", "AutoModel", "classifies a DNA sequence as neg / pos"),
        (
            "tags only",
            "token-classification",
            "AutoModelForTokenClassification",
            "instance of its motifs (CTCF, SP1),",
        ),
        (
            "tags+presence",
            "token-classification",
            "AutoModelForTokenClassification",
            "(CTCF, SP1) and scores whether each motif occurs",
        ),
    ],
)
def test_card_follows_the_heads(head, pipeline_tag, auto_class, says):
    card = _card(motif_config(max_tokens=12, kmer=3, **HEADS[head]))
    assert card.data.pipeline_tag == pipeline_tag and pipeline_tag in card.data.tags
    assert f'{auto_class}.from_pretrained("motif-card", trust_remote_code=True)' in card.text
    assert says in card.text
    assert "reading up to 30 bases in one window" in card.text  # (12 positions - [CLS], [SEP]) x 3-mers
    assert "thousands of bases" not in card.text
    if head == "class only":
        assert "token-classification" not in str(card) and "nucleotide" not in card.text
