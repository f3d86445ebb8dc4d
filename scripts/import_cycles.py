"""Report import circles inside a package: the graph of module-level imports, read with ``ast``.

An edge A -> B means that importing A runs B first: B is imported by a module-level statement of A
(in a ``try`` block too; not inside a function, not under ``if TYPE_CHECKING``), or B is a package
that Python initialises on the way to such a module (``hf_sparse.models`` before
``hf_sparse.models.longformer_tasks.backbone``) and A is not itself inside B. Every strongly connected
component with more than one module is a circle.

With ``--deferred`` the imports inside functions count too: such a circle never fails at import time,
but it says that two modules know about each other (``patterns.compose`` switching on ``PerHead``).

Usage: ``python scripts/import_cycles.py [--deferred] [PACKAGE_DIR]`` (default ``hf_sparse``); exit code 1
if any circle is found.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is_package) of every module under the package folder ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


def _module_level(body):
    """Statements executed at import: the body, and the bodies of try/if blocks (not TYPE_CHECKING)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            test = ast.unparse(stmt.test)
            if "TYPE_CHECKING" not in test:
                yield from _module_level(stmt.body)
                yield from _module_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody):
                yield from _module_level(block)
        else:
            yield stmt


def import_graph(root: Path, deferred: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of the same package that importing it runs first (see the module docstring);
    ``deferred``: also the imports inside functions (run later, on first use)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        own = name.split(".") if is_package else name.split(".")[:-1]
        targets: list[str] = []
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for stmt in ast.walk(tree) if deferred else _module_level(tree.body):
            if isinstance(stmt, ast.Import):
                targets += [a.name for a in stmt.names]
            elif isinstance(stmt, ast.ImportFrom):
                if stmt.level:
                    base = own[: len(own) - (stmt.level - 1)]
                    mod = ".".join(base + ([stmt.module] if stmt.module else []))
                else:
                    mod = stmt.module or ""
                targets.append(mod)
                targets += [f"{mod}.{a.name}" for a in stmt.names if f"{mod}.{a.name}" in modules]
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):  # the target and the packages initialised on the way
                step = ".".join(parts[:i])
                if (
                    step in modules
                    and step != name
                    and not (name + ".").startswith(step + ".")
                    and step not in own_ancestors(own)
                ):
                    graph[name].add(step)
    return graph


def own_ancestors(own: list[str]) -> set[str]:
    return {".".join(own[:i]) for i in range(1, len(own) + 1)}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package_dir", nargs="?", default="hf_sparse", help="The package folder to check.")
    parser.add_argument(
        "--deferred",
        action="store_true",
        help="Also count imports inside functions (circles only on first use).",
    )
    args = parser.parse_args(argv)
    root = Path(args.package_dir).resolve()
    if not (root / "__init__.py").is_file():
        parser.error(f"package_dir must be a package folder (with __init__.py), got {args.package_dir!r}")
    graph = import_graph(root, deferred=args.deferred)
    found = cycles(graph)
    print(
        f"{len(graph)} modules, {sum(map(len, graph.values()))} module-level import edges, {len(found)} circle(s)"
    )
    for comp in found:
        print("circle: " + " <-> ".join(comp))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
