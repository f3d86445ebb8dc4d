"""The README's SparseTransformer snippets run as printed."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _snippet(marker: str) -> str:
    text = README.read_text()
    found = re.search(re.escape(marker) + r"\s*```python\n(.*?)```", text, re.S)
    assert found, f"no python block after {marker!r} in README.md"
    return "\n".join(line[2:] if line.startswith("  ") else line for line in found.group(1).splitlines())


def test_attn_implementations_snippet_runs_and_agrees():
    code = _snippet("<!-- tested: tests/models/test_readme_snippets.py -->")
    assert all(impl in code for impl in ('"hf_sparse"', '"sdpa"', '"eager"'))
    scope = {}
    exec(compile(code, str(README), "exec"), scope)  # the snippet asserts the three agree
    assert scope["model"].config._attn_implementation == "eager"
