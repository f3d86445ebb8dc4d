"""The README's Visualisation snippet runs as printed and writes its two figures."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_visualisation_snippet_runs(tmp_path, monkeypatch):
    section = README.read_text().split("## Visualisation", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{README}: Visualisation", "exec"), {})
    assert (tmp_path / "bigbird.png").stat().st_size > 0 and (tmp_path / "attention.png").stat().st_size > 0
