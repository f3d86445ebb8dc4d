"""No import circle inside hf_sparse: the graph of module-level imports (scripts/import_cycles.py).

Counting the imports inside functions too (a deferred import still ties two modules together) there is
none either: the ``patterns`` circle (base, compose, global_tokens, local, per_head) was broken by
hooks on the pattern classes."""

from pathlib import Path

from tests.script_loader import load_script

REPO = Path(__file__).resolve().parents[1]
import_cycles = load_script("import_cycles")


def test_no_module_level_import_circle():
    graph = import_cycles.import_graph(REPO / "hf_sparse")
    assert "hf_sparse.tasks.motif.modeling_motif" in graph  # the graph covers the task folders
    assert (
        "hf_sparse.models" in graph["hf_sparse.tasks.motif.modeling_motif"]
    )  # packages run on the way count
    assert import_cycles.cycles(graph) == []


def test_deferred_imports_close_no_circle():
    assert import_cycles.cycles(import_cycles.import_graph(REPO / "hf_sparse", deferred=True)) == []


def test_the_checker_finds_a_circle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import x\n")
    (pkg / "a.py").write_text("from .sub.b import y\nx = 1\n")
    (pkg / "sub" / "__init__.py").write_text("from ..a import x\n")  # runs before sub.b: a circle
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    assert import_cycles.cycles(import_cycles.import_graph(pkg)) == [["pkg.a", "pkg.sub"]]
