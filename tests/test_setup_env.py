"""scripts/setup_env.sh and `make setup`, against a stand-in environment: its ``python`` runs this
interpreter on a fake torch / transformers (and fakes pip and ensurepip), its ``uv`` logs what it is asked
to install. Nothing is installed, nothing is downloaded."""

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = """#!/usr/bin/env bash
venv=$(cd "$(dirname "$0")/.." && pwd)
echo "python $*" >>"$venv/log"
if [[ "$1" == -m && "$2" == ensurepip ]]; then
  [[ -f "$venv/no-ensurepip" ]] && { echo "No module named ensurepip" >&2; exit 1; }
  touch "$venv/has-pip"; exit 0
fi
if [[ "$1" == -m && "$2" == pip ]]; then
  [[ -f "$venv/has-pip" ]] || { echo "$0: No module named pip" >&2; exit 1; }
  if [[ "$*" == *" uv" ]]; then
    [[ -f "$venv/no-uv" ]] && { echo "ERROR: No matching distribution found for uv" >&2; exit 1; }
    cp "$venv/uv.fake" "$venv/bin/uv"
  fi
  exit 0
fi
PYTHONPATH="$venv/site" exec {python} -S "$@"
"""
FAKE_UV = """#!/usr/bin/env bash
echo "uv $*" >>"{venv}/log"
for arg in "$@"; do  # "installs" a torch==VERSION requirement
  if [[ "$arg" == torch==* ]]; then
    rm -rf "{venv}"/site/torch*
    mkdir -p "{venv}/site/torch" "{venv}/site/torch-${arg#torch==}.dist-info"
    echo "__version__ = '${arg#torch==}'" >"{venv}/site/torch/__init__.py"
    printf 'Metadata-Version: 2.1\\nName: torch\\nVersion: %s\\n' "${arg#torch==}" >"{venv}/site/torch-${arg#torch==}.dist-info/METADATA"
  fi
done
"""


def _executable(path: Path, text: str):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def fake_venv(tmp_path, torch="2.13.0", pip=True, uv=True, ensurepip=True, uv_installs=True) -> Path:
    """A venv folder whose python sees ``torch`` (None: no torch) and fake transformers."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    site = venv / "site"
    (site / "transformers").mkdir(parents=True)
    (site / "transformers" / "__init__.py").write_text('__version__ = "5.24.0"\n')
    if torch is not None:
        (site / "torch").mkdir()
        (site / "torch" / "__init__.py").write_text(f"__version__ = {torch!r}\n")
        info = site / f"torch-{torch}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch}\n")
    _executable(venv / "bin" / "python", FAKE_PYTHON.replace("{python}", sys.executable))
    _executable(venv / "uv.fake", FAKE_UV.replace("{venv}", str(venv)))
    if uv:
        shutil.copy(venv / "uv.fake", venv / "bin" / "uv")
    for flag, on in (("has-pip", pip), ("no-ensurepip", not ensurepip), ("no-uv", not uv_installs)):
        if on:
            (venv / flag).touch()
    return venv


def run_setup(venv, *, torch=None, path_uv=None, make=None):
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH", "EXTRAS", "PIP_FIND_LINKS")}
    env["VENV"] = str(venv)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "uv").exists())
    if path_uv is not None:  # a uv on PATH
        env["PATH"] = f"{path_uv}{os.pathsep}{env['PATH']}"
    if torch is not None:
        env["TORCH"] = torch
    cmd = ["make", f"VENV={venv}", *make] if make is not None else ["bash", "scripts/setup_env.sh"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def installs(venv) -> list[str]:
    log = venv / "log"
    return [line.split(" -q --compile-bytecode --python ")[1].split(" ", 1)[1]
            for line in (log.read_text().splitlines() if log.exists() else []) if line.startswith("uv pip install")]  # fmt: skip


@pytest.mark.parametrize(
    "torch, expected",
    [
        (None, ["torch==2.13.0", "-e .[train,viz,dev]"]),  # no torch: TORCH
        ("2.4.0", ["torch==2.13.0", "-e .[train,viz,dev]"]),  # older than pyproject's torch>=2.5: TORCH
        ("2.13.0+cpu", ["-e .[train,viz,dev]"]),  # new enough: kept
        ("2.5.0", ["-e .[train,viz,dev]"]),
    ],
)
def test_torch_is_installed_when_missing_or_older_than_the_minimum(tmp_path, torch, expected):
    venv = fake_venv(tmp_path, torch=torch)
    proc = run_setup(venv)
    assert proc.returncode == 0, proc.stderr
    assert installs(venv) == expected
    if torch == "2.4.0":
        assert "torch 2.4.0 (older than torch>=2.5): installing TORCH=torch==2.13.0" in proc.stderr


def test_a_given_torch_is_installed_over_the_environments(tmp_path):
    venv = fake_venv(tmp_path, torch="2.13.0+cpu")
    proc = run_setup(venv, torch="torch==2.12.0 --index-url https://download.pytorch.org/whl/cu126")
    assert proc.returncode == 0, proc.stderr
    assert installs(venv) == [
        "torch==2.12.0 --index-url https://download.pytorch.org/whl/cu126",
        "-e .[train,viz,dev]",
    ]


def test_an_environment_without_pip_uses_a_uv_on_path(tmp_path):
    venv = fake_venv(tmp_path, pip=False, uv=False)
    tools = tmp_path / "tools"
    tools.mkdir()
    shutil.copy(venv / "uv.fake", tools / "uv")
    proc = run_setup(venv, path_uv=tools)
    assert proc.returncode == 0, proc.stderr
    assert installs(venv) == ["-e .[train,viz,dev]"]
    assert "ensurepip" not in (venv / "log").read_text()


def test_an_environment_without_pip_gets_it_from_ensurepip(tmp_path):
    venv = fake_venv(tmp_path, pip=False, uv=False)
    proc = run_setup(venv)
    assert proc.returncode == 0, proc.stderr
    log = (venv / "log").read_text()
    assert "python -m ensurepip" in log and "python -m pip install -q uv" in log
    assert installs(venv) == ["-e .[train,viz,dev]"]  # with the uv that pip installed


def test_setup_says_why_it_cannot_install(tmp_path):
    venv = fake_venv(tmp_path, pip=False, uv=False, ensurepip=False)
    proc = run_setup(venv)
    assert proc.returncode == 1
    assert "has no pip and ensurepip failed: No module named ensurepip" in proc.stderr
    assert "put uv on PATH" in proc.stderr
    venv = fake_venv(tmp_path / "b", uv=False, uv_installs=False)  # uv cannot be had: pip, with a notice
    proc = run_setup(venv)
    assert proc.returncode == 0, proc.stderr
    assert (
        "could not install uv (ERROR: No matching distribution found for uv); installing with pip"
        in proc.stderr
    )
    assert "python -m pip install -q -e .[train,viz,dev]" in (venv / "log").read_text()


def test_make_setup_reruns_when_torch_changes_and_only_then(tmp_path):
    venv = fake_venv(tmp_path, torch="2.13.0+cpu")
    steps = [(None, ["-e .[train,viz,dev]"]), (None, []), ("torch==2.12.0", ["torch==2.12.0", "-e .[train,viz,dev]"]),
             ("torch==2.12.0", []), (None, []), ("torch==2.13.0", ["torch==2.13.0", "-e .[train,viz,dev]"])]  # fmt: skip
    for torch, expected in steps:
        (venv / "log").unlink(missing_ok=True)
        proc = run_setup(venv, torch=torch, make=["setup"])
        assert proc.returncode == 0, proc.stderr
        assert installs(venv) == expected, (torch, proc.stdout)


def test_ninja_is_installed_and_make_targets_find_it(tmp_path):
    """The fused CPU kernel is built by torch.utils.cpp_extension, which runs `ninja` from PATH: the
    environment has its own (a dependency), and make targets see the environment's bin/ (after the system's)."""
    tomllib = pytest.importorskip("tomllib")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "ninja" in [d.split(">")[0].split("=")[0].strip() for d in deps]
    venv = tmp_path / "venv"
    proc = subprocess.run(["make", "--no-print-directory", f"VENV={venv}", "--eval", 'path: ; @echo "$$PATH"', "path"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{os.environ['PATH']}{os.pathsep}{venv}/bin"


def test_the_kernel_build_finds_the_ninja_package_without_an_activated_environment(tmp_path, monkeypatch):
    """`.venv/bin/python` run directly has no `.venv/bin` on PATH; the build needs ninja there."""
    import shutil

    from hf_sparse.attention import fused

    monkeypatch.setenv("PATH", str(tmp_path))  # no ninja (nor anything else)
    assert shutil.which("ninja") is None
    fused._find_ninja()
    assert shutil.which("ninja") is not None
