"""transformers' own common model tests, from its source distribution, imported for the conformance suite.

``tests/test_modeling_common.py`` (``ModelTesterMixin``) and ``tests/test_configuration_common.py``
(``ConfigTester``) are not in the transformers wheel, only in its sdist on the package index. The first run
downloads the sdist of the *installed* transformers version once (``pip download --no-deps --no-binary :all:
transformers==<version>``), extracts only those two files into a cache folder, and every later run imports them
from there, offline:

    $HF_SPARSE_TRANSFORMERS_TESTS, else $XDG_CACHE_HOME/hf-sparse/transformers-tests, else
    ~/.cache/hf-sparse/transformers-tests  /  <version>/  test_modeling_common.py, test_configuration_common.py

They import three modules of transformers' test tree that the sdist does not ship; this module provides
stand-ins (see :func:`_install_stand_ins`): ``exporters.test_export.ExportTesterMixin`` and
``generation.test_utils.GenerationTesterMixin`` as empty mixins (so the ``torch.export`` and generation
tests of those mixins are absent, not skipped: the project's own generation-conformance tests cover generation),
and ``utils.test_configuration_utils.config_common_kwargs`` built from the installed ``PretrainedConfig``.

``python -m tests.conformance.common_tests`` fills the cache (``make conformance-cache``). When the files are
neither cached nor downloadable, :func:`load` raises :class:`Unavailable` whose message says why and what to do;
the test modules turn that into a skip.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import types
from pathlib import Path

import transformers

ENV_CACHE = "HF_SPARSE_TRANSFORMERS_TESTS"
ENV_NO_DOWNLOAD = "HF_SPARSE_TRANSFORMERS_TESTS_NO_DOWNLOAD"  # "1": use the cache only
FILES = ("test_modeling_common.py", "test_configuration_common.py")
#: ``test_configuration_common`` runs ``direct_transformers_import(<its folder>)``, which executes the folder's
#: ``__init__.py`` (empty in transformers' test tree) and then returns the installed transformers.
MARKER = "__init__.py"
DOWNLOAD_TIMEOUT_S = 300


class Unavailable(RuntimeError):
    """The common tests of the installed transformers are neither cached nor downloadable (the message says why)."""


def cache_root() -> Path:
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hf-sparse" / "transformers-tests"


def cache_dir(version: str | None = None) -> Path:
    return cache_root() / (version or transformers.__version__)


def _complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in (*FILES, MARKER))


@contextlib.contextmanager
def _lock(path: Path):
    """An exclusive lock on ``path`` (pytest-xdist workers fill the cache once, not once each)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            import fcntl
        except ImportError:  # Windows: no lock, the rename below is still atomic
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _download_sdist(version: str, into: Path) -> Path:
    """The sdist of ``transformers==version`` from the package index (pip's own index settings apply)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
           "--disable-pip-version-check", "-q", f"transformers=={version}", "-d", str(into)]  # fmt: skip
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Unavailable(f"`{' '.join(cmd[2:])}` did not run: {e}") from e
    archives = sorted(into.glob("transformers-*.tar.gz"))
    if res.returncode != 0 or not archives:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        raise Unavailable(f"`{' '.join(cmd[2:])}` failed (exit {res.returncode}): {' / '.join(tail)}")
    return archives[0]


def _extract(archive: Path, target: Path) -> None:
    """Copy ``<root>/tests/{FILES}`` out of the sdist into ``target``."""
    with tarfile.open(archive) as tar:
        members = {Path(m.name).relative_to(Path(m.name).parts[0]).as_posix(): m for m in tar.getmembers()}
        for name in FILES:
            member = members.get(f"tests/{name}")
            if member is None or not member.isfile():
                raise Unavailable(f"{archive.name} has no tests/{name}")
            with tar.extractfile(member) as src, open(target / name, "wb") as dst:
                shutil.copyfileobj(src, dst)


def ensure_cached(version: str | None = None) -> Path:
    """The cache folder of ``version`` (default: the installed transformers), filled from the sdist if needed."""
    version = version or transformers.__version__
    folder = cache_dir(version)
    if _complete(folder):
        return folder
    if os.environ.get(ENV_NO_DOWNLOAD) == "1":
        raise Unavailable(
            f"transformers {version}'s common tests are not in {folder} and {ENV_NO_DOWNLOAD}=1"
        )
    with _lock(cache_root() / f".{version}.lock"):
        if _complete(folder):  # another process filled it while we waited
            return folder
        with tempfile.TemporaryDirectory(dir=cache_root()) as tmp:
            tmp = Path(tmp)
            try:
                archive = _download_sdist(version, tmp)
                staged = tmp / "staged"
                staged.mkdir()
                _extract(archive, staged)
            except Unavailable as e:
                raise Unavailable(
                    f"transformers {version}'s common tests are not cached in {folder} and could not be fetched "
                    f"from the package index: {e}. Run `make conformance-cache` where PyPI is reachable, or set "
                    f"{ENV_CACHE} to a folder holding <version>/{{{', '.join(FILES)}}}."
                ) from e
            (staged / MARKER).write_text("")
            (staged / "SOURCE").write_text(f"{archive.name}: tests/{', tests/'.join(FILES)}\n")
            folder.parent.mkdir(parents=True, exist_ok=True)
            if folder.exists():  # an incomplete earlier attempt
                shutil.rmtree(folder)
            os.replace(staged, folder)
    return folder


# ---------------------------------------------------------------------------------------------------------
# stand-ins for the modules of transformers' test tree that the sdist does not ship
# ---------------------------------------------------------------------------------------------------------

#: Non-default values for the general ``PretrainedConfig`` attributes (``ConfigTester.check_config_arguments_init``
#: passes them all and checks each one is kept). Only keys the installed ``PretrainedConfig`` has are used.
_NON_DEFAULT = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["SomeModel"],
    "id2label": {0: "label"},
    "label2id": {"label": 0},
    "problem_type": "regression",
}


def config_common_kwargs() -> dict:
    base = transformers.PretrainedConfig()
    public = {k.lstrip("_") for k in vars(base)}
    return {k: v for k, v in _NON_DEFAULT.items() if k in public}


def _module(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = []  # a package, so that submodules resolve
    mod.__dict__.update(attrs)
    return mod


def _install_stand_ins(package: str) -> None:
    class ExportTesterMixin:
        """Stand-in: transformers' ``tests/exporters/test_export.py`` is not in the sdist (no export tests)."""

    class GenerationTesterMixin:
        """Stand-in: transformers' ``tests/generation/test_utils.py`` is not in the sdist; generation is covered
        by the project's own generation-conformance tests."""

    stand_ins = {
        "exporters": {},
        "exporters.test_export": {"ExportTesterMixin": ExportTesterMixin},
        "generation": {},
        "generation.test_utils": {"GenerationTesterMixin": GenerationTesterMixin},
        "utils": {},
        "utils.test_configuration_utils": {"config_common_kwargs": config_common_kwargs()},
    }
    for name, attrs in stand_ins.items():
        sys.modules[f"{package}.{name}"] = _module(f"{package}.{name}", **attrs)


_LOADED: dict[str, types.SimpleNamespace] = {}


def load(version: str | None = None) -> types.SimpleNamespace:
    """``SimpleNamespace(modeling=<test_modeling_common>, configuration=<test_configuration_common>, folder=...)``
    of the installed transformers; raises :class:`Unavailable` (with the reason) when they cannot be had."""
    version = version or transformers.__version__
    if version in _LOADED:
        return _LOADED[version]
    folder = ensure_cached(version)
    package = "_transformers_common_tests_" + "".join(c if c.isalnum() else "_" for c in version)
    if package not in sys.modules:
        pkg = _module(package, __file__=str(folder / "__init__.py"))
        pkg.__path__ = [str(folder)]
        sys.modules[package] = pkg
        _install_stand_ins(package)
    try:
        modeling = importlib.import_module(f"{package}.test_modeling_common")
        configuration = importlib.import_module(f"{package}.test_configuration_common")
    except ImportError as e:
        raise Unavailable(f"transformers {version}'s common tests (from {folder}) do not import: {e}") from e
    _LOADED[version] = types.SimpleNamespace(modeling=modeling, configuration=configuration, folder=folder)
    return _LOADED[version]


if __name__ == "__main__":
    print(ensure_cached())
