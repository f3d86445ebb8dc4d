"""Flattening package modules into a remote-code bundle: which modules an entry module needs
(following imports and package re-exports) and their imports rewritten to flat siblings
(``from .x import``), the only form ``trust_remote_code`` loads."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# transformers' own file-name conventions: such modules keep their name in the bundle
_KEEP_NAME_PREFIXES = (
    "modeling_",
    "configuration_",
    "tokenization_",
    "processing_",
    "image_processing_",
    "feature_extraction_",
    "video_processing_",
)


class BundleError(ValueError):
    """The modules cannot be flattened into a remote-code bundle (the message says where and why)."""


def flat_module_name(module: str, package: str = "hf_sparse") -> str:
    """The file name (without ``.py``) a module of ``package`` gets in a flat bundle.

    ``hf_sparse.patterns.base`` -> ``patterns_base``; a package's ``__init__`` is named after the
    package (``hf_sparse.patterns`` -> ``patterns``, ``hf_sparse`` -> ``hf_sparse``); modules
    named like transformers files (``modeling_*``, ``configuration_*``, ``tokenization_*``, ...)
    keep their name, so ``auto_map`` entries read ``"modeling_x.XModel"``.
    """
    if not isinstance(module, str) or not (module == package or module.startswith(package + ".")):
        raise ValueError(f"module must be {package!r} or one of its submodules, got {module!r}")
    if module == package:
        return package
    parts = module[len(package) + 1 :].split(".")
    return parts[-1] if parts[-1].startswith(_KEEP_NAME_PREFIXES) else "_".join(parts)


@dataclass
class _Module:
    name: str
    path: Path | None  # None: a namespace package (a folder without __init__.py)
    is_package: bool
    source: str
    tree: ast.Module


@dataclass
class _Import:
    node: ast.stmt
    guarded: bool  # inside a function body or a try block: may fail at run time without harm
    type_checking: bool  # inside `if TYPE_CHECKING:`


class _ImportFinder(ast.NodeVisitor):
    """Every import statement of a module, with the context it runs in."""

    def __init__(self):
        self.found: list[_Import] = []
        self._guard = 0
        self._typing = 0

    def _visit_guarded(self, node):
        self._guard += 1
        self.generic_visit(node)
        self._guard -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _visit_guarded

    def visit_Try(self, node):
        self._guard += 1
        for stmt in node.body:
            self.visit(stmt)
        self._guard -= 1
        for part in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(part)

    visit_TryStar = visit_Try

    def visit_If(self, node):
        test = node.test
        is_tc = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )
        self.visit(test)
        self._typing += is_tc
        for stmt in node.body:
            self.visit(stmt)
        self._typing -= is_tc
        for stmt in node.orelse:
            self.visit(stmt)

    def visit_Import(self, node):
        self.found.append(_Import(node, self._guard > 0, self._typing > 0))

    visit_ImportFrom = visit_Import


def _module_level(stmts):
    """Statements that run at import time, descending into if/try/with blocks."""
    for stmt in stmts:
        if isinstance(stmt, ast.If):
            yield from _module_level(stmt.body)
            yield from _module_level(stmt.orelse)
        elif isinstance(stmt, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            yield from _module_level(stmt.body)
            for h in stmt.handlers:
                yield from _module_level(h.body)
            yield from _module_level(stmt.orelse)
            yield from _module_level(stmt.finalbody)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            yield from _module_level(stmt.body)
        else:
            yield stmt


def _target_names(target) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _target_names(t)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def _defined_names(stmt) -> list[str]:
    """Names a non-import statement binds at module level."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        return [n for t in stmt.targets for n in _target_names(t)]
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and stmt.value is not None:
        return _target_names(stmt.target)
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return _target_names(stmt.target)
    return []


def _import_names(stmt) -> list[str]:
    if isinstance(stmt, ast.ImportFrom):
        return [a.asname or a.name for a in stmt.names if a.name != "*"]
    if isinstance(stmt, ast.Import):
        return [a.asname or a.name.split(".")[0] for a in stmt.names]
    return []


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for stmt in _module_level(tree.body):
        names.update(_defined_names(stmt))
        names.update(_import_names(stmt))
    return names


class _Bundler:
    """Finds the modules a set of entry modules needs and rewrites their imports to flat siblings."""

    def __init__(self, package: str, package_dir: Path, exclude: Iterable[str]):
        self.package = package
        self.root = package_dir
        self.exclude = tuple(exclude)
        self._cache: dict[str, _Module] = {}

    # -- locating and reading modules ----------------------------------------------------------
    def in_package(self, name: str) -> bool:
        return name == self.package or name.startswith(self.package + ".")

    def excluded(self, name: str) -> bool:
        return any(name == e or name.startswith(e + ".") for e in self.exclude)

    def locate(self, name: str) -> tuple[Path | None, bool] | None:
        """(file, is_package) of a module of the package, or None if there is no such module."""
        rel = name.split(".")[1:]
        base = self.root.joinpath(*rel)
        if (base / "__init__.py").is_file():
            return base / "__init__.py", True
        if rel and base.with_suffix(".py").is_file():
            return base.with_suffix(".py"), False
        if rel and base.is_dir() and not base.with_suffix(".py").exists():
            return None, True  # namespace package
        return None

    def exists(self, name: str) -> bool:
        return self.in_package(name) and self.locate(name) is not None

    def load(self, name: str) -> _Module:
        if name not in self._cache:
            found = self.locate(name)
            if found is None:
                raise BundleError(f"{name} is not a module of {self.package} (looked under {self.root})")
            path, is_package = found
            source = path.read_text(encoding="utf-8") if path is not None else ""
            try:
                tree = ast.parse(source, filename=str(path or name))
            except SyntaxError as e:
                raise BundleError(f"cannot parse {path}: {e}") from e
            self._cache[name] = _Module(name, path, is_package, source, tree)
        return self._cache[name]

    def where(self, mod: _Module, node) -> str:
        return f"{mod.path or mod.name}:{getattr(node, 'lineno', '?')}"

    def flat(self, name: str) -> str:
        return flat_module_name(name, self.package)

    # -- resolving imports ---------------------------------------------------------------------
    def absolute(self, mod: _Module, node: ast.ImportFrom) -> str:
        if node.level == 0:
            return node.module or ""
        pkg = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
        up = node.level - 1
        if up >= len(pkg):
            raise BundleError(f"{self.where(mod, node)}: relative import goes above the top-level package")
        base = pkg[: len(pkg) - up]
        return ".".join(base + ([node.module] if node.module else []))

    def resolve_name(self, pkg: str, name: str, seen=()) -> tuple:
        """What ``from <pkg> import <name>`` binds, following the package's re-exports:
        ``("module", M)``, ``("name", M, attr)``, ``("const", value)`` or ``("external", M, attr)``."""
        if (pkg, name) in seen:
            raise BundleError(f"circular re-export of {name!r} through package {pkg}")
        seen = (*seen, (pkg, name))
        mod = self.load(pkg)
        binding, stars = None, []
        for stmt in _module_level(mod.tree.body):
            if isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if alias.name == "*":
                        stars.append(stmt)
                    elif (alias.asname or alias.name) == name:
                        binding = ("from", stmt, alias)
            elif isinstance(stmt, ast.Import):
                if name in _import_names(stmt):
                    binding = ("import", stmt, None)
            elif name in _defined_names(stmt):
                binding = ("def", stmt, None)
        if binding is None:
            for stmt in stars:
                target = self.absolute(mod, stmt)
                if self.exists(target) and name in self.public_names(target):
                    return self._resolve_in(target, name, seen)
            if self.exists(f"{pkg}.{name}"):
                return ("module", f"{pkg}.{name}")
            self.check_flattenable(mod)  # a lazy __getattr__ explains the missing name
            raise BundleError(f"cannot find {name!r} in package {pkg} ({mod.path or 'namespace package'})")
        kind, stmt, alias = binding
        if kind == "from":
            target = self.absolute(mod, stmt)
            if not self.in_package(target):
                return ("external", target, alias.name)
            return self._resolve_in(target, alias.name, seen)
        if kind == "def" and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            value = stmt.value
            if isinstance(value, ast.Constant) and isinstance(
                value.value, (str, int, float, bool, type(None))
            ):
                return ("const", value.value)
        return ("name", pkg, name)

    def _resolve_in(self, target: str, name: str, seen) -> tuple:
        if self.exists(f"{target}.{name}"):
            return ("module", f"{target}.{name}")
        if not self.exists(target):
            raise BundleError(f"{target} is not a module of {self.package}")
        if self.load(target).is_package:
            return self.resolve_name(target, name, seen)
        return ("name", target, name)

    def public_names(self, name: str) -> set[str]:
        tree = self.load(name).tree
        for stmt in _module_level(tree.body):
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets
            ):
                try:
                    return set(ast.literal_eval(stmt.value))
                except ValueError:
                    break
        return {n for n in _top_level_names(tree) if not n.startswith("_")}

    # -- rewriting -----------------------------------------------------------------------------
    @staticmethod
    def bind_module(flat: str, bound: str) -> list[str]:
        """Bind a sibling module object. ``from . import x`` alone is invisible to transformers'
        relative-import scan (it wants ``from .x import``), which would leave x.py behind."""
        return [
            f"from .{flat} import __name__ as _bundled_{flat}  # lets transformers find {flat}.py",
            f"from . import {flat}" + ("" if bound == flat else f" as {bound}"),
        ]

    def plan(self, mod: _Module, imp: _Import, deps: set[str]) -> list[str] | None:
        """Replacement lines for one import statement (None: it does not import the package)."""
        node = imp.node
        if isinstance(node, ast.Import):
            keep, lines, touched = [], [], []
            for alias in node.names:
                if not self.in_package(alias.name):
                    keep.append(alias.name + (f" as {alias.asname}" if alias.asname else ""))
                    continue
                if not self.exists(alias.name):
                    raise BundleError(
                        f"{self.where(mod, node)}: {alias.name} is not a module of {self.package}"
                    )
                touched.append(alias.name)
                if alias.asname:
                    lines += self.bind_module(self.flat(alias.name), alias.asname)
                else:  # `import pkg.a.b` binds `pkg`; pkg.a and pkg.a.b must be its attributes
                    parts = alias.name.split(".")
                    touched += [".".join(parts[:i]) for i in range(1, len(parts))]
                    lines += self.bind_module(self.flat(self.package), self.package)
            if not touched:
                return None
            return self._finish(
                mod, imp, touched, deps, ([f"import {', '.join(keep)}"] if keep else []) + lines
            )

        target = self.absolute(mod, node)
        if not self.in_package(target):
            return None
        if not self.exists(target):
            raise BundleError(
                f"{self.where(mod, node)}: imports {target}, which is not a module of {self.package}"
            )
        entries: list = []  # str lines, or [flat, [names]] groups kept in order
        groups: dict[str, list[str]] = {}
        touched = []
        for alias in node.names:
            bound = alias.asname or alias.name
            if alias.name == "*":
                touched.append(target)
                entries.append(f"from .{self.flat(target)} import *")
                continue
            kind = self._resolve_in(target, alias.name, ())
            if kind[0] == "module":
                touched.append(kind[1])
                entries += self.bind_module(self.flat(kind[1]), bound)
            elif kind[0] == "name":
                touched.append(kind[1])
                flat = self.flat(kind[1])
                if flat not in groups:
                    groups[flat] = []
                    entries.append([flat, groups[flat]])
                groups[flat].append(alias.name if kind[2] == bound else f"{kind[2]} as {bound}")
            elif kind[0] == "const":
                entries.append(f"{bound} = {kind[1]!r}")
            else:  # re-exported from a third-party module
                entries.append(
                    f"from {kind[1]} import {kind[2]}" + ("" if kind[2] == bound else f" as {bound}")
                )
        lines = [e if isinstance(e, str) else f"from .{e[0]} import {', '.join(e[1])}" for e in entries]
        return self._finish(mod, imp, touched, deps, lines, target=target)

    def _finish(self, mod, imp, touched, deps, lines, target=None):
        if imp.type_checking:
            return ["pass  # typing-only import of a bundled package module, dropped"]
        parents = self.parents_first(mod, ([target] if target else []) + touched)
        excluded = [m for m in [*parents, *touched] if self.excluded(m)]
        if excluded:
            if not imp.guarded:
                raise BundleError(
                    f"{self.where(mod, imp.node)}: {excluded[0]} is excluded but imported when the module "
                    f"loads; exclude only modules imported inside functions or try blocks"
                )
            msg = (
                f"{excluded[0]} is not part of this remote-code bundle; pip install {self.package} to use it"
            )
            return [f"raise ImportError({msg!r})"]
        deps.update(touched)
        deps.update(parents)
        first = [
            f"from .{self.flat(p)} import __name__ as _bundled_{self.flat(p)}  # runs package {p} first"
            for p in parents
        ]
        return first + lines or ["pass"]

    def trivial(self, name: str) -> bool:
        """A package whose ``__init__`` holds nothing but a docstring (or does not exist)."""
        body = self.load(name).tree.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
        ):
            body = body[1:]
        return not body

    def parents_first(self, mod: _Module, modules: list[str]) -> list[str]:
        """Packages Python initialises before it hands out ``modules`` (their ``__init__`` runs
        first: pattern registries, for one), outermost first. Left out: the root package (its
        ``__init__`` registers the installed package with transformers, which a bundle must not
        do), packages the importing module is itself inside (already initialising), and packages
        with an empty ``__init__``."""
        own_parts = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
        own = {".".join(own_parts[:i]) for i in range(1, len(own_parts) + 1)}
        out: list[str] = []
        for name in modules:
            parts = name.split(".")
            for i in range(2, len(parts) + 1):
                pkg = ".".join(parts[:i])
                if pkg in own or pkg in out or not self.exists(pkg):
                    continue
                if self.load(pkg).is_package and not self.trivial(pkg):
                    out.append(pkg)
        return out

    def check_flattenable(self, mod: _Module):
        """A package ``__init__`` that builds its namespace lazily cannot become a flat module."""
        for node in ast.walk(mod.tree):
            lazy = (
                (isinstance(node, ast.FunctionDef) and node.name in ("__getattr__", "__dir__"))
                or (isinstance(node, ast.Name) and node.id in ("__path__", "_LazyModule"))
                or (isinstance(node, ast.Attribute) and node.attr == "_LazyModule")
            )
            if lazy:
                raise BundleError(
                    f"package {mod.name} ({mod.path}:{node.lineno}) builds its namespace lazily "
                    f"(__getattr__/__path__/_LazyModule) and cannot be flattened; import the names "
                    f"from the modules that define them"
                )

    def rewrite(self, mod: _Module, deps: set[str]) -> str:
        """The module's source with every import of the package made a flat sibling import."""
        finder = _ImportFinder()
        finder.visit(mod.tree)
        raw = mod.source.encode("utf-8")
        starts = [0]
        for line in raw.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        edits = []
        for imp in finder.found:
            lines = self.plan(mod, imp, deps)
            if lines is None:
                continue
            node = imp.node
            line_start = starts[node.lineno - 1]
            begin = line_start + node.col_offset
            end = starts[node.end_lineno - 1] + node.end_col_offset
            indent = raw[line_start:begin]
            if indent.strip():
                raise BundleError(
                    f"{self.where(mod, node)}: an import that shares its line with other code cannot be "
                    f"rewritten; put it on a line of its own"
                )
            text = ("\n" + indent.decode()).join(lines)
            edits.append((begin, end, text.encode("utf-8")))
        for begin, end, text in sorted(edits, reverse=True):
            raw = raw[:begin] + text + raw[end:]
        return raw.decode("utf-8")

    def _binds_child(self, pkg: str, child: str) -> bool:
        """Whether ``pkg.<leaf>`` would be the submodule after a normal import (not a name the
        package's ``__init__`` rebinds to something else)."""
        try:
            return self.resolve_name(pkg, child.rpartition(".")[2]) == ("module", child)
        except BundleError:
            return True

    def closure(self, entries: list[str]) -> dict[str, str]:
        """``{module: rewritten source}`` for the entries and everything they import, transitively
        (imports inside functions included)."""
        out: dict[str, str] = {}
        queue = list(entries)
        while queue:
            name = queue.pop(0)
            if name in out:
                continue
            if self.excluded(name):
                raise BundleError(f"{name} is needed by the bundle but excluded")
            mod = self.load(name)
            if mod.is_package:
                self.check_flattenable(mod)
            deps: set[str] = set()
            out[name] = self.rewrite(mod, deps)
            queue.extend(sorted(deps - set(out)))
        # a package module binds its bundled submodules as attributes (`P.base.check_block`)
        for name in list(out):
            mod = self.load(name)
            if not mod.is_package:
                continue
            children = [c for c in sorted(out) if c.rpartition(".")[0] == name and self._binds_child(name, c)]
            if children:
                lines = [
                    "",
                    "",
                    "# Submodules bound as package attributes, as after a normal import (hf-sparse bundle)",
                ]
                for child in children:
                    lines += self.bind_module(self.flat(child), child.rpartition(".")[2])
                out[name] = out[name].rstrip("\n") + "\n" + "\n".join(lines) + "\n"
        return out


__all__ = ["BundleError", "flat_module_name"]
