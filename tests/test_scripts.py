"""Every script's --help prints its help and does nothing else (no training, no benchmark, no files)."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.script_loader import load_script
from tests.training.helpers import subprocess_env

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "scripts").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_prints_help_and_does_nothing_else(script, tmp_path):
    proc = subprocess.run([sys.executable, str(script), "--help"], cwd=tmp_path, env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:"), proc.stdout[:500]
    assert list(tmp_path.iterdir()) == []  # wrote nothing


def test_demo_user_error_is_one_line(tmp_path, capsys):
    demo = load_script("demo")
    argv = ["--output_dir", str(tmp_path / "out"), "--override", "motifs=[NOTAMOTIF]"]
    assert demo.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "NOTAMOTIF" in err and "Traceback" not in err
