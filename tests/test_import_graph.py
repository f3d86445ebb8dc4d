"""No import circle inside hf_sparse: the graph of module-level imports (scripts/import_cycles.py).

Counting the imports inside functions too, the only circle left is the one in ``hf_sparse/patterns``
(base, compose, global_tokens, local, per_head switch on each other's types; owned by the patterns
refactor): this test fails if another one appears."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("import_cycles", REPO / "scripts" / "import_cycles.py")
import_cycles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(import_cycles)


def test_no_module_level_import_circle():
    graph = import_cycles.import_graph(REPO / "hf_sparse")
    assert "hf_sparse.tasks.motif.modeling_motif" in graph  # the graph covers the task folders
    assert (
        "hf_sparse.models" in graph["hf_sparse.tasks.motif.modeling_motif"]
    )  # packages run on the way count
    assert import_cycles.cycles(graph) == []


def test_deferred_imports_close_no_circle_outside_patterns():
    found = import_cycles.cycles(import_cycles.import_graph(REPO / "hf_sparse", deferred=True))
    assert all(all(m.startswith("hf_sparse.patterns.") for m in circle) for circle in found), found


def test_the_checker_finds_a_circle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import x\n")
    (pkg / "a.py").write_text("from .sub.b import y\nx = 1\n")
    (pkg / "sub" / "__init__.py").write_text("from ..a import x\n")  # runs before sub.b: a circle
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    assert import_cycles.cycles(import_cycles.import_graph(pkg)) == [["pkg.a", "pkg.sub"]]
