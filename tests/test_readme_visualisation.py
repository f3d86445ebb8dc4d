"""The README's Visualisation snippet runs as printed and writes its two figures."""

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def test_visualisation_snippet_runs(tmp_path, monkeypatch):
    section = README.read_text().split("## Visualisation", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(code, f"{README}: Visualisation", "exec"), namespace)
    assert (tmp_path / "bigbird.png").stat().st_size > 0 and (tmp_path / "attention.png").stat().st_size > 0
    # the weights plotted are the model's attention (eval mode): no dropout, each row a distribution
    rows = namespace["weights"].sum(-1)
    torch.testing.assert_close(rows, torch.ones_like(rows))
