"""The remote-code bundle: :func:`export_remote_code` writes a *flat, self-contained* copy of the
package modules a model needs next to its weights and sets ``auto_map``, so
``AutoModel.from_pretrained(repo, trust_remote_code=True)`` works where hf-sparse is not installed.
``save_pretrained`` cannot do this itself: it copies only the model's module and its ``from .x import``
siblings, and a deeper relative import (``from ...attention import x``) makes it raise
``FileNotFoundError``. Saving a model imports this module only (no card or push code)."""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path

from .common import _atomic_write, _version
from .flatten import BundleError, _Bundler, _module_level, _top_level_names, flat_module_name

logger = logging.getLogger(__name__)

BUNDLE_MANIFEST = "hf_sparse_bundle.json"

#: A comment that clears a line of the data-file check (:func:`_data_file_lines`): the line uses ``__file__``
#: or ``importlib.resources`` but reads no file next to the module (``hf_sparse.data.loading`` hashes a
#: module's own source for a cache fingerprint, and a bundled module's source is in the bundle).
NO_DATA_FILE = "# bundle: reads no data file"
_LOCATES_FILES = re.compile(r"__file__|importlib\.resources|from\s+importlib\s+import\s.*\bresources\b")


# Flattening the package (parsing ~70 modules) and transformers' import checks of the result take ~0.9 s, and
# every save_pretrained of a model exports its bundle (a Trainer: every checkpoint); both depend only on the
# package's files, so they are kept per digest of those files (a few ms to read): the last few closures,
# and the checks of the last bundles' files; and the manifests of the last dry runs (the check before a save).
_CLOSURES: OrderedDict = OrderedDict()
_IMPORTS: OrderedDict = OrderedDict()
_DRY_RUNS: OrderedDict = OrderedDict()


def _remember(memo: OrderedDict, key, make, size: int):
    if key in memo:
        memo.move_to_end(key)
        return memo[key]
    value = memo[key] = make()
    if len(memo) > size:
        memo.popitem(last=False)
    return value


def _package_digest(package_dir: Path) -> str:
    """A digest of the package's folders and Python files (what the closure can depend on)."""
    h = hashlib.blake2b(digest_size=16)
    for path in sorted(package_dir.rglob("*")):
        rel = path.relative_to(package_dir)
        if "__pycache__" in rel.parts:
            continue
        if path.is_dir():
            h.update(b"d\0" + str(rel).encode() + b"\0")
        elif path.suffix == ".py":
            h.update(b"f\0" + str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _checked_imports(file: Path, text: str) -> tuple[frozenset, frozenset]:
    """(relative imports, imports) of a staged bundle file, as transformers' loader sees them."""
    from transformers.dynamic_module_utils import get_imports, get_relative_imports

    key = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
    return _remember(
        _IMPORTS, key, lambda: (frozenset(get_relative_imports(file)), frozenset(get_imports(file))), 1024
    )


def _module_file(name, what: str) -> Path:
    """The source file of the module ``name`` (dotted), found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name) if isinstance(name, str) else None
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise ValueError(f"{what} must name importable modules with a .py file, got {name!r}")
    return Path(spec.origin)


def _bundled_files(module_file: Path | None, source: str, where: str) -> str:
    """The ``BUNDLED_FILES = {path: text}`` assignment to append to a module that declares the files it reads
    next to itself (module-level ``BUNDLE_FILES = ("relative/path", ...)``, string literals), or "" if it
    declares none: the bundle is flat, so those files would not be there. One line per file (a ``repr``), so
    transformers' line-based import scan sees no import inside them."""
    if "BUNDLE_FILES" not in source:  # most modules: no parse (every save_pretrained exports the bundle)
        return ""
    declared = None
    for stmt in ast.parse(source).body:
        if isinstance(stmt, ast.Assign) and any(
            getattr(t, "id", None) == "BUNDLE_FILES" for t in stmt.targets
        ):
            declared = stmt.value
    if declared is None:
        return ""
    paths = getattr(declared, "elts", None)
    if not isinstance(declared, (ast.Tuple, ast.List)) or not all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in paths
    ):
        raise BundleError(f"{where}: BUNDLE_FILES must be a tuple of string literals")
    texts = {}
    for e in paths:
        rel = Path(e.value)
        target = module_file.parent.joinpath(*rel.parts) if module_file is not None else None
        if rel.is_absolute() or ".." in rel.parts or target is None or not target.is_file():
            raise BundleError(
                f"{where}: BUNDLE_FILES names {e.value!r}, not a file below the module's folder"
            )
        texts[e.value] = target.read_bytes().decode("utf-8")
    lines = "".join(f"    {path!r}: {text!r},\n" for path, text in texts.items())
    note = "# BUNDLE_FILES, embedded by hf_sparse.hub.bundle: a bundle is flat, so they are not next to it"
    return f"\n\n{note}\nBUNDLED_FILES = {{\n{lines}}}\n"


def _data_file_lines(module_file: Path | None, source: str) -> list[int]:
    """The lines (1-based, of ``module_file``) of a module that locate files next to it (``__file__``,
    ``importlib.resources``) and do not say :data:`NO_DATA_FILE`: the bundle is flat, so such files would
    not be there. ``source`` is the module's (rewritten) source."""
    if module_file is None or ("__file__" not in source and "resources" not in source):  # most: no scan
        return []
    return [
        i
        for i, line in enumerate(module_file.read_text(encoding="utf-8").splitlines(), 1)
        if _LOCATES_FILES.search(line) and NO_DATA_FILE not in line
    ]


def _with_header(source: str, module: str, version: str) -> str:
    header = (
        f"# Generated by hf_sparse.hub.export_remote_code from {module} (hf-sparse {version}):\n"
        f"# imports of package modules were rewritten to flat siblings. Edit the original, not this copy.\n"
    )
    lines = source.splitlines(keepends=True)
    keep = 0
    while keep < min(2, len(lines)) and (
        lines[keep].startswith("#!") or re.match(r"^[ \t\f]*#.*?coding[:=]", lines[keep])
    ):
        keep += 1
    return "".join(lines[:keep]) + header + "".join(lines[keep:])


def _check_auto_map(auto_map, bundle: dict[str, str]) -> dict:
    """Keys must be transformers Auto classes; values ``"flat_module.Class"`` in the bundle."""
    if not isinstance(auto_map, Mapping) or not auto_map:
        raise ValueError(
            f"auto_map must be a non-empty dict such as {{'AutoModel': 'modeling_x.XModel'}}, got {auto_map!r}"
        )
    import transformers.models.auto as auto_module

    for key, value in auto_map.items():
        if not isinstance(key, str) or not hasattr(auto_module, key):
            raise ValueError(f"auto_map key {key!r} is not a transformers Auto class (e.g. 'AutoModel')")
        refs = value if isinstance(value, (list, tuple)) else [value]
        for ref in refs:
            if ref is None and isinstance(value, (list, tuple)):
                continue  # tokenizers: [slow, fast] with one of them absent
            if not isinstance(ref, str) or ref.count(".") != 1 and "--" not in ref:
                raise ValueError(f"auto_map[{key!r}] must be 'module.ClassName', got {value!r}")
            if "--" in ref:
                continue  # code that lives in another repo
            module, cls = ref.split(".")
            if module not in bundle:
                raise ValueError(
                    f"auto_map[{key!r}] = {ref!r} names module {module!r}, which is not in the bundle "
                    f"(bundle modules: {', '.join(sorted(bundle))})"
                )
            if cls not in _top_level_names(ast.parse(bundle[module])):
                raise ValueError(f"auto_map[{key!r}] = {ref!r}: {module}.py defines no {cls!r}")
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in auto_map.items()}


def _auto_refs(auto_map: dict):
    """(key, position, "module.Class") of every in-bundle class reference of an auto_map."""
    for key, value in auto_map.items():
        refs = value if isinstance(value, list) else [value]
        for i, ref in enumerate(refs):
            if isinstance(ref, str) and "--" not in ref:
                yield key, (i if isinstance(value, list) else None), ref


def _one_loader_module(auto_map: dict, bundle: dict[str, str], entries: list[str], pipelines=()) -> dict:
    """Point every ``auto_map`` entry at one module of the bundle, and make that module name the modules of
    ``pipelines`` (the ``"module.Class"`` of each ``custom_pipelines`` entry).

    transformers loads each module named in ``auto_map`` of a *local folder* into a package named
    after a hash of that file and the files it reaches, and the hash always differs between two
    files (it counts the file itself once more). So ``AutoConfig`` from ``configuration_x`` and
    ``AutoModel`` from ``modeling_x`` get two packages, each with its own copy of every shared
    module: the config's pattern objects are then not instances of the model's ``Pattern``. One
    loader module (the ``modeling_*`` one, else the first named) that binds every class avoids it;
    the classes it lacks are imported at its end.

    A model loaded with ``trust_remote_code`` and saved again where the package is not installed is saved
    by transformers alone: it copies the model's module and the modules that one imports relatively,
    nothing else, while ``config.json`` keeps ``custom_pipelines``. The loader therefore also imports the
    pipeline modules it does not reach yet (under ``if TYPE_CHECKING:``: transformers' line scan copies
    them, loading the model does not run them), so the re-saved folder keeps its pipelines.
    """
    refs = list(_auto_refs(auto_map))
    modules = list(dict.fromkeys(ref.split(".")[0] for _, _, ref in refs))
    if len(modules) <= 1:
        if modules:
            _import_pipelines(modules[0], bundle, pipelines)
        return auto_map
    names: dict[str, str] = {}
    for _, _, ref in refs:
        module, cls = ref.split(".")
        if names.setdefault(cls, module) != module:
            raise ValueError(
                f"auto_map names two classes called {cls!r} ({names[cls]}.{cls} and {ref}); they cannot "
                f"share one loader module"
            )
    candidates = (
        [m for m in modules if m.startswith("modeling_")] or [m for m in entries if m in modules] or modules
    )
    loader = candidates[0]
    tree = ast.parse(bundle[loader])
    bound = {}  # name -> sibling module it is imported from
    for stmt in _module_level(tree.body):
        if isinstance(stmt, ast.ImportFrom) and stmt.level == 1 and stmt.module:
            for alias in stmt.names:
                bound[alias.asname or alias.name] = (stmt.module, alias.name)
    defined = _top_level_names(tree) - set(bound)
    missing = []
    for cls, module in names.items():
        if module == loader or bound.get(cls) == (module, cls):
            continue
        if cls in defined or cls in bound:
            raise ValueError(
                f"auto_map: {loader}.py binds {cls!r} to something other than {module}.{cls}; "
                f"cannot make it the one loader module"
            )
        missing.append(f"from .{module} import {cls}")
    if missing:
        bundle[loader] = (
            bundle[loader].rstrip("\n")
            + "\n\n\n# auto_map loads every class through this module (one package, one copy of each module)\n"
            + "\n".join(missing)
            + "\n"
        )
    _import_pipelines(loader, bundle, pipelines)
    out = {}
    for key, value in auto_map.items():
        if isinstance(value, list):
            out[key] = [
                v if not isinstance(v, str) or "--" in v else f"{loader}.{v.split('.')[1]}" for v in value
            ]
        else:
            out[key] = value if "--" in value else f"{loader}.{value.split('.')[1]}"
    return out


# the relative imports transformers' loader sees in a module's text (dynamic_module_utils.get_relative_imports)
_RELATIVE_IMPORT = re.compile(r"^\s*import\s+\.(\S+)\s*$|^\s*from\s+\.(\S+)\s+import", re.MULTILINE)


def _reached(bundle: dict[str, str], start: str) -> set[str]:
    """The bundle modules transformers copies with ``start``: it and those it imports relatively, recursively."""
    seen, todo = {start}, [start]
    while todo:
        for match in _RELATIVE_IMPORT.finditer(bundle.get(todo.pop(), "")):
            name = match.group(1) or match.group(2)
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def _import_pipelines(loader: str, bundle: dict[str, str], pipelines) -> None:
    """Append to ``bundle[loader]`` an ``if TYPE_CHECKING:`` import of each pipeline class (``"module.Class"``)
    whose bundle module the loader does not reach (:func:`_reached`)."""
    reached = _reached(bundle, loader)
    lines = []
    for ref in pipelines:
        module, cls = ref.split(".")
        if module in bundle and module not in reached:
            lines.append(f"    from .{module} import {cls} as _{module}_{cls}")
            reached |= _reached(bundle, module)
    if lines:
        bundle[loader] = (
            bundle[loader].rstrip("\n")
            + "\n\n\n# custom_pipelines' modules: a re-save by transformers alone copies the modules this one imports\n"
            + "from typing import TYPE_CHECKING as _TYPE_CHECKING\n\n"
            + "if _TYPE_CHECKING:\n"
            + "\n".join(lines)
            + "\n"
        )


def export_remote_code(
    folder: str | os.PathLike,
    modules: str | Iterable[str],
    auto_map: Mapping[str, str | list] | None,
    config_file: str | None = "config.json",
    *,
    package: str = "hf_sparse",
    package_dir: str | os.PathLike | None = None,
    exclude: Iterable[str] = (),
    config_updates: Mapping | None = None,
    companions: Iterable[str] = (),
    dry_run: bool = False,
) -> dict:
    """Write a flat, self-contained bundle of ``package`` modules into ``folder`` and set
    ``auto_map`` in its config, so ``trust_remote_code=True`` loads the model without the package.

    Each needed module is copied to ``folder/<flat name>.py`` (:func:`flat_module_name`:
    ``hf_sparse.patterns.base`` -> ``patterns_base.py``, ``...modeling_x`` -> ``modeling_x.py``) with
    every import of the package rewritten, using ``ast`` positions, to a sibling import:
    ``from hf_sparse.a.b import x``, ``from ..a.b import x`` -> ``from .a_b import x``; names a
    package ``__init__`` re-exports are imported from the module that defines them; a module
    object (``from .. import patterns as P``, ``import hf_sparse.a as m``) is bound with
    ``from . import patterns as P`` after a ``from .patterns import __name__`` line that
    transformers' relative-import scan can see; ``from .x import *`` stays a star import. Needed
    modules are found transitively, imports inside functions included, so passing the model
    module is enough. Package ``__init__`` files that are needed become flat modules too (and bind
    their bundled submodules as attributes); lazy ones (``__getattr__``) raise :class:`BundleError`.

    Third-party imports are left alone. transformers' ``check_imports`` requires every one it can
    see to be installed where the model is loaded, except those in ``try`` blocks: keep optional
    dependencies (matplotlib, jinja2) inside functions *and* ``try`` blocks, as ``hf_sparse.viz``
    does, or ``exclude`` the modules that use them (an import of an excluded module inside a
    function or try block becomes ``raise ImportError(...)``). The manifest lists the
    ``requirements`` that ``check_imports`` will ask for (those of ``companions`` included).

    Args:
        folder: the saved model folder (call after ``save_pretrained``: it rewrites config.json).
        modules: dotted names of the entry modules (e.g. the modeling and configuration modules).
        auto_map: ``{"AutoConfig": "configuration_x.XConfig", "AutoModel": "modeling_x.XModel"}``;
            merged into the existing ``auto_map`` of ``config_file``. Entries naming different
            modules are all pointed at one of them (``modeling_x.XConfig``; the classes it does not
            import yet are imported at its end): transformers loads each auto_map module of a local
            folder into its own package, which would give the config and the model two copies of
            every shared module. The manifest keeps the requested map too. Empty or None: write
            the bundle only.
        config_file: config file to update inside ``folder`` (None: leave configs alone).
        package: the root package whose modules are flattened.
        package_dir: its folder (default: found with ``importlib.util.find_spec``, not imported).
        exclude: dotted modules (and their submodules) to leave out.
        config_updates: other top-level keys to set in ``config_file`` (e.g. ``custom_pipelines``: the
            one loader module also imports their modules, so that transformers keeps them when it saves a
            model loaded from the folder again).
        companions: dotted modules saved next to the bundle by transformers itself, as they are (a custom
            tokenizer's module: its ``save_pretrained`` copies it and the modules it imports relatively):
            not bundled, but their imports count toward the manifest's ``requirements`` (a tokenizer that
            subclasses hf-sparse's ``DNATokenizer`` needs hf_sparse where the folder is loaded).
        dry_run: check everything and return the manifest, writing nothing (``folder`` and ``config_file``
            need not exist yet): a ``save_pretrained`` whose bundle would fail fails before it writes weights.

    Returns:
        The manifest written to ``folder/hf_sparse_bundle.json``: files, hf-sparse version,
        entry modules, requirements, auto_map.

    Raises:
        BundleError (a ValueError): a module that cannot be flattened (the message names the file
            and line); ValueError: a bad argument or auto_map; FileNotFoundError: no config file.
    """
    folder = Path(folder)
    if not dry_run and not folder.is_dir():
        raise ValueError(f"folder {str(folder)!r} does not exist or is not a directory")
    if not isinstance(package, str) or not package.isidentifier():
        raise ValueError(f"package must be a top-level package name, got {package!r}")
    if package_dir is None:
        import importlib.util

        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(f"package {package!r} cannot be found; pass package_dir")
        package_dir = list(spec.submodule_search_locations)[0]
    package_dir = Path(package_dir)
    if not package_dir.is_dir():
        raise ValueError(f"package_dir {str(package_dir)!r} is not a directory")
    entries = [modules] if isinstance(modules, str) else list(modules)
    if not entries:
        raise ValueError("modules must name at least one module")
    exclude = [exclude] if isinstance(exclude, str) else list(exclude)
    companions = [companions] if isinstance(companions, str) else list(companions)
    companion_files = [_module_file(name, "companions") for name in companions]
    bundler = _Bundler(package, package_dir, exclude)
    for name in [*entries, *exclude]:
        if not isinstance(name, str) or not bundler.in_package(name):
            raise ValueError(f"modules and exclude must be modules of {package!r}, got {name!r}")
    for name in entries:
        if not bundler.exists(name):
            raise ValueError(f"module {name!r} does not exist under {package_dir}")
    config_path = None
    if (auto_map or config_updates) and config_file is not None and not dry_run:
        config_path = folder / config_file
        if not config_path.is_file():
            raise FileNotFoundError(
                f"config_file {str(config_path)!r} does not exist; call save_pretrained(folder) first"
            )

    # -- closure and rewritten sources, checked before anything is written ---------------------
    key = (package, str(package_dir.resolve()), tuple(entries), tuple(exclude), _package_digest(package_dir))
    sources = _remember(_CLOSURES, key, lambda: bundler.closure(entries), 8)
    if dry_run:
        arguments = json.dumps([auto_map, config_updates, companions], sort_keys=True, default=repr)
        if (key, arguments) in _DRY_RUNS:
            return _remember(_DRY_RUNS, (key, arguments), None, 8)
    bundle: dict[str, str] = {}
    origin: dict[str, str] = {}
    used_file: dict[str, list[int]] = {}  # modules that locate files next to them: lines
    for name, source in sources.items():
        flat = bundler.flat(name)
        if not flat.isidentifier() or flat in ("__init__",):
            raise BundleError(f"{name} would be bundled as {flat}.py, which is not a valid module name")
        if flat in origin:
            raise BundleError(f"{origin[flat]} and {name} would both be bundled as {flat}.py; rename one")
        origin[flat] = name
        module_file = bundler.locate(name)[0]  # a stat (load would parse)
        files = _bundled_files(module_file, source, name)
        lines = [] if files else _data_file_lines(module_file, source)  # declared files are embedded
        if lines:
            used_file[name] = lines
        bundle[flat] = source + files
    auto_map = _check_auto_map(auto_map, bundle) if auto_map else {}
    requested_auto_map = auto_map
    pipelines = [
        entry["impl"]
        for entry in dict((config_updates or {}).get("custom_pipelines") or {}).values()
        if isinstance(entry, Mapping) and isinstance(entry.get("impl"), str) and entry["impl"].count(".") == 1
    ]
    auto_map = _one_loader_module(auto_map, bundle, [bundler.flat(m) for m in entries], pipelines)
    if used_file and not dry_run:
        where = ", ".join(
            f"{n} (line {', '.join(map(str, lines))})" for n, lines in sorted(used_file.items())
        )
        warnings.warn(
            f"{where} use __file__ or importlib.resources: data files next to them are not part of the bundle "
            f"(declare them in BUNDLE_FILES; end a line that reads no data file with {NO_DATA_FILE!r})",
            stacklevel=2,
        )

    # -- stage, validate with transformers' own loader helpers, then move into place ------------
    version = _version()
    stage = Path(tempfile.mkdtemp(dir=None if dry_run else folder, prefix=".hf_sparse_bundle_"))
    try:
        requirements = set()
        for flat, source in bundle.items():
            text = _with_header(source, origin[flat], version)
            file = stage / f"{flat}.py"
            file.write_text(text, encoding="utf-8")
            relative, imports = _checked_imports(file, text)
            missing = sorted(relative - set(bundle))
            if missing:
                raise BundleError(
                    f"{origin[flat]}: transformers would look for {', '.join(m + '.py' for m in missing)} "
                    f"(a line reading `from .{missing[0]} import ...`, perhaps in a docstring)"
                )
            if package in imports:
                raise BundleError(f"{origin[flat]}: an import of {package} was left unrewritten")
            requirements |= imports
        for file in companion_files:  # transformers copies them as they are, with their relative imports
            from transformers.dynamic_module_utils import get_relative_import_files

            for path in [file, *map(Path, get_relative_import_files(file))]:
                if path.is_file():
                    requirements |= _checked_imports(path, path.read_text(encoding="utf-8"))[1]
        requirements -= set(sys.stdlib_module_names) | {"__future__"}
        manifest = {
            "format": 1,
            "package": package,
            "hf_sparse_version": version,
            "entry_modules": entries,
            "files": {f"{flat}.py": origin[flat] for flat in sorted(bundle)},
            "excluded": exclude,
            "requirements": sorted(requirements),
            "auto_map": auto_map,
            "auto_map_requested": requested_auto_map,
        }
        if dry_run:
            return _remember(_DRY_RUNS, (key, arguments), lambda: manifest, 8)
        # files of a previous export that this one no longer needs
        old = folder / BUNDLE_MANIFEST
        if old.is_file():
            try:
                previous = json.loads(old.read_text(encoding="utf-8")).get("files", {})
            except (ValueError, AttributeError):
                previous = {}
            for stale in set(previous) - set(manifest["files"]):
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.py", stale) and (folder / stale).is_file():
                    (folder / stale).unlink()
        for flat in bundle:
            os.replace(stage / f"{flat}.py", folder / f"{flat}.py")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _atomic_write(folder / BUNDLE_MANIFEST, json.dumps(manifest, indent=2) + "\n")
    if config_path is not None:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            raise ValueError(f"config_file {str(config_path)!r} does not hold a JSON object")
        config["auto_map"] = {**(config.get("auto_map") or {}), **auto_map}
        config.update(config_updates or {})
        _atomic_write(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    return manifest


__all__ = ["BUNDLE_MANIFEST", "BundleError", "export_remote_code", "flat_module_name"]
