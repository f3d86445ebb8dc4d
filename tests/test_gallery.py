"""scripts/gallery.py: patterns.md states each gallery pattern's rule, and the rule is the pattern's."""

import pytest
import torch

from hf_sparse import patterns as P
from tests.script_loader import load_script

gallery = load_script("gallery")

N = 150
I, J = torch.arange(N)[:, None], torch.arange(N)[None, :]
D = I - J
#: the rules of RULES that are formulas, as tensors: what the pattern must allow
FORMULAS = {
    "SlidingWindow(window=32)": D.abs() <= 16,
    "SlidingWindow(window=16, causal=True)": (D >= 0) & (D < 16),
    "Causal()": J <= I,
    "Strided(stride=16)": (J <= I) & ((D < 16) | (D % 16 == 0)),
    "Fixed(block=32, summary=4)": (J <= I) & ((I // 32 == J // 32) | (J % 32 >= 28)),
    "Dilated(window=16, dilation=3)": (D.abs() <= 24) & (D % 3 == 0),
    "BlockLocal(block=32)": I // 32 == J // 32,
    "Global(indices=[0, 64])": (I == 0) | (I == 64) | (J == 0) | (J == 64),
    "SlidingWindow(32) | Global(every=40)": (D.abs() <= 16) | (I % 40 == 0) | (J % 40 == 0),
    "Strided(16) & SlidingWindow(48, causal)": (D >= 0) & (D < 48) & ((D < 16) | (D % 16 == 0)),
}


def test_every_gallery_pattern_has_a_rule():
    labels = [*gallery.gallery_patterns(), *gallery.content_examples(16)]
    assert sorted(gallery.RULES) == sorted(labels)
    for rule in gallery.RULES.values():
        assert rule.strip() == rule and "  " not in rule and ("i" in rule and "j" in rule)


@pytest.mark.parametrize("label", list(FORMULAS))
def test_rules_are_the_patterns_rules(label):
    assert torch.equal(gallery.gallery_patterns()[label].bind(N).dense_mask(N), FORMULAS[label])


def test_bigbird_rule():
    bound = gallery.gallery_patterns()["BigBird(block=8, random_blocks=2)"].bind(N)
    qb, kb, last = I // 8, J // 8, (N - 1) // 8
    table = bound.parts[0].table[0, 0]  # window and random blocks of each query block
    random = torch.zeros(last + 1, last + 1, dtype=torch.bool)
    for q, row in enumerate(table.tolist()):
        random[q, [k for k in row if k >= 0 and abs(k - q) > 1]] = True
    assert (random.sum(-1)[1:-1] == 2).all()  # 2 random blocks each (outside the window and the globals)
    want = ((qb - kb).abs() <= 1) | random[qb, kb] | (qb == 0) | (kb == 0) | (qb == last) | (kb == last)
    assert torch.equal(bound.dense_mask(N), want)


def test_patterns_md_rule_column(tmp_path, monkeypatch):
    """The table's rule column is RULES (not the class docstrings' first paragraphs)."""
    import hf_sparse.viz as viz

    monkeypatch.setattr(viz, "plot_pattern", lambda *a, **k: None)
    monkeypatch.setattr(viz, "_save", lambda *a, **k: None)
    monkeypatch.setattr(P.Pattern, "density", lambda self, n: 0.5)
    monkeypatch.setattr(gallery, "OUT", str(tmp_path))
    gallery.gallery(n=16)
    rows = (tmp_path / "gallery" / "patterns.md").read_text().splitlines()[4:]
    assert len(rows) == len(gallery.RULES)
    for row, (label, rule) in zip(rows, gallery.RULES.items()):
        assert row.startswith(gallery.table_row(f"`{label}`", rule)[:-2]), row
    viz.pyplot().close("all")
