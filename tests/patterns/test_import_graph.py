"""No import circle inside ``hf_sparse.patterns`` and ``hf_sparse.attention``.

The graph is read from the source with ``ast``: every ``import`` statement counts, also those inside
functions (a lazy import that closes a circle is still a circle, only a hidden one). Importing
``a.b.c`` from outside ``a.b`` also runs the ``__init__`` of ``a.b`` (and of ``a``), so those count
as edges too; a module importing a sibling does not re-enter its own package's ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hf_sparse

ROOT = Path(hf_sparse.__file__).resolve().parent.parent
CHECKED = ("hf_sparse/patterns", "hf_sparse/attention")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> list[str]:
    """Absolute names of the modules (of ``known``) that an import statement loads."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".")
            base = base[: len(base) - node.level + (1 if is_package else 0)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        targets = [stem] + [f"{stem}.{a.name}" for a in node.names]  # `from pkg import submodule`
    out = []
    for t in targets:
        parts = t.split(".")
        for k in range(1, len(parts) + 1):  # the packages on the way run their __init__ first
            name = ".".join(parts[:k])
            if name in known and not module.startswith(name + ".") and name != module:
                out.append(name)
    return out


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """module -> modules it imports, restricted to the modules under ``packages`` (folders of root)."""
    files = [f for pkg in packages for f in sorted((root / pkg).rglob("*.py"))]
    names = {_module_name(f, root): f for f in files}
    graph: dict[str, set[str]] = {}
    for name, f in names.items():
        tree = ast.parse(f.read_text(), filename=str(f))
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(_imported(node, name, f.name == "__init__.py", set(names)))
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycle_in_patterns_and_attention():
    graph = import_graph(ROOT, CHECKED)
    assert "hf_sparse.patterns.compose" in graph and "hf_sparse.attention.blocked" in graph
    assert "hf_sparse.patterns.base" in graph["hf_sparse.patterns.compose"]
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_compose_does_not_know_the_pattern_kinds():
    """``compose`` works through hooks on the pattern classes, not type switches."""
    graph = import_graph(ROOT, CHECKED)
    assert graph["hf_sparse.patterns.compose"] == {"hf_sparse.patterns.base"}
    assert graph["hf_sparse.patterns.base"] == set()


@pytest.mark.parametrize(
    "files, circle",
    [
        # a lazy import inside a function still closes the circle
        ({"a.py": "from .b import x\n", "b.py": "def f():\n    from . import a\n"}, True),
        # a submodule importing through its package's __init__, which imports the submodule
        (
            {"__init__.py": "from .a import y\n", "a.py": "from pkg import b\n", "b.py": "from . import a\n"},
            True,
        ),
        ({"__init__.py": "from .a import y\n", "a.py": "from .b import x\n", "b.py": "x = 1\n"}, False),
    ],
)
def test_cycle_finder_sees_circles(tmp_path, files, circle):
    (tmp_path / "pkg").mkdir()
    for name, text in files.items():
        (tmp_path / "pkg" / name).write_text(text)
    (tmp_path / "pkg" / "__init__.py").touch()
    found = find_cycle(import_graph(tmp_path, ("pkg",)))
    assert (found is not None) is circle, found
