"""The scripts in scripts/ as modules for tests (scripts/ is not a package)."""

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str):
    """scripts/<name>.py as a fresh module, loaded as ``python scripts/<name>.py`` would load it: with
    scripts/ first on sys.path while it runs, so its imports of sibling scripts resolve."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module


def usage_error(main, argv, capsys) -> str:
    """What ``main(argv)`` printed to stderr when it stopped on a usage error (exit code 2, argparse's)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err
