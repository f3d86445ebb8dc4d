"""scripts/setup_env.sh, `make setup` and scripts/test_compat.sh's environments, against a stand-in environment:
its ``python`` runs this interpreter on a fake torch / transformers (and fakes pip and ensurepip), its ``uv`` logs
what it is asked to install. Nothing is installed, nothing is downloaded. Also: pyproject.toml's floors."""

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
  if [[ "$arg" == torch==*+cpu && -f "{venv}/no-local-wheel" ]]; then
    echo "error: torch==${arg#torch==} has no wheel for this Python" >&2; exit 1
  fi
  if [[ "$arg" == --index-url && -f "{venv}/no-index" ]]; then
    echo "error: Failed to fetch: download.pytorch.org" >&2; exit 1
  fi
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


def run_setup(venv, *, torch=None, path_uv=None, make=None, find_links=None, cwd=ROOT):
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH", "EXTRAS", "PIP_FIND_LINKS")}
    env["VENV"] = str(venv)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "uv").exists())
    if path_uv is not None:  # a uv on PATH (or other commands in front of the system's)
        env["PATH"] = f"{path_uv}{os.pathsep}{env['PATH']}"
    if torch is not None:
        env["TORCH"] = torch
    if find_links is not None:
        env["PIP_FIND_LINKS"] = str(find_links)
    cmd = (
        ["make", f"VENV={venv}", *make]
        if make is not None
        else ["bash", str(ROOT / "scripts" / "setup_env.sh")]
    )
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def installs(venv) -> list[str]:
    log = venv / "log"
    return [line.split(" -q --compile-bytecode --python ")[1].split(" ", 1)[1]
            for line in (log.read_text().splitlines() if log.exists() else []) if line.startswith("uv pip install")]  # fmt: skip


CPU_TORCH = "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"


@pytest.mark.parametrize(
    "torch, expected",
    [
        (None, [CPU_TORCH, "-e .[train,viz,dev]"]),  # no torch: the CPU build
        ("2.5.1", [CPU_TORCH, "-e .[train,viz,dev]"]),  # older than pyproject's torch>=2.6: the CPU build
        ("2.13.0+cpu", ["-e .[train,viz,dev]"]),  # new enough: kept
        ("2.6.0", ["-e .[train,viz,dev]"]),
    ],
)
def test_torch_is_installed_when_missing_or_older_than_the_minimum(tmp_path, torch, expected):
    venv = fake_venv(tmp_path, torch=torch)
    proc = run_setup(venv)
    assert proc.returncode == 0, proc.stderr
    assert installs(venv) == expected
    if torch == "2.5.1":
        assert "torch 2.5.1 (older than torch>=2.6): installing the CPU build of torch==2.13.0" in proc.stderr


def test_the_default_torch_is_the_cpu_build_from_a_local_wheel_or_the_cpu_index(tmp_path):
    """PyPI's Linux torch is the CUDA build (several GB): the default is a local torch-2.13.0+cpu wheel where
    PIP_FIND_LINKS has one that installs, else the PyTorch CPU index (PyPI's where that index cannot be reached,
    saying so); macOS takes PyPI's (CPU-only there)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    venv = fake_venv(tmp_path / "local", torch=None)
    proc = run_setup(venv, find_links=wheels)
    assert proc.returncode == 0, proc.stderr
    assert installs(venv) == [
        f"--find-links {wheels} torch==2.13.0+cpu",
        f"--find-links {wheels} -e .[train,viz,dev]",
    ]

    other = tmp_path / "other"  # pip's space-separated list: one --find-links each
    other.mkdir()
    venv = fake_venv(tmp_path / "two", torch=None)
    proc = run_setup(venv, find_links=f"{other} {wheels}")
    assert proc.returncode == 0, proc.stderr
    assert installs(venv)[0] == f"--find-links {other} --find-links {wheels} torch==2.13.0+cpu"

    venv = fake_venv(tmp_path / "misfit", torch=None)  # the local wheel is for another Python
    (venv / "no-local-wheel").touch()
    proc = run_setup(venv, find_links=f"file://{wheels}")
    assert proc.returncode == 0, proc.stderr
    assert installs(venv)[1] == f"--find-links file://{wheels} {CPU_TORCH}"
    assert f"the torch-2.13.0+cpu wheel in {wheels} does not install here" in proc.stderr

    empty = tmp_path / "empty"
    empty.mkdir()
    venv = fake_venv(tmp_path / "index", torch=None)
    proc = run_setup(venv, find_links=empty)
    assert proc.returncode == 0, proc.stderr
    assert installs(venv)[0] == f"--find-links {empty} {CPU_TORCH}"

    venv = fake_venv(tmp_path / "offline-index", torch=None)  # the CPU index cannot be reached: PyPI's, said
    (venv / "no-index").touch()
    proc = run_setup(venv, find_links=empty)
    assert proc.returncode == 0, proc.stderr
    assert installs(venv)[:2] == [f"--find-links {empty} {CPU_TORCH}", f"--find-links {empty} torch==2.13.0"]
    assert "did not answer" in proc.stderr and "installing PyPI's torch==2.13.0" in proc.stderr

    mac = tmp_path / "mac"
    mac.mkdir()
    _executable(mac / "uname", "#!/usr/bin/env bash\necho Darwin\n")
    venv = fake_venv(tmp_path / "macos", torch=None)
    proc = run_setup(venv, path_uv=mac)
    assert proc.returncode == 0, proc.stderr
    assert installs(venv)[0] == "torch==2.13.0"


def test_setup_runs_from_any_folder_with_a_relative_venv(tmp_path):
    """Started from another folder it works in the repository root; VENV relative to where it was started."""
    venv = fake_venv(tmp_path, torch="2.13.0")
    proc = run_setup("venv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert installs(venv) == ["-e .[train,viz,dev]"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["venv"]  # nothing made in the folder it ran from


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


def test_make_clean_removes_the_environments_and_keeps_the_trained_models(tmp_path):
    """outputs/ holds what the recipes, `make demo` and `make gallery` trained and drew: `make clean` keeps it."""
    for folder in (".venv", ".venv-compat", ".pytest_cache", "outputs/motif-tiny"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "outputs" / "motif-tiny" / "model.safetensors").write_bytes(b"weights")
    env = {k: v for k, v in os.environ.items() if k != "VENV"}
    proc = subprocess.run(["make", "-f", str(ROOT / "Makefile"), "clean"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outputs"]
    assert (tmp_path / "outputs" / "motif-tiny" / "model.safetensors").read_bytes() == b"weights"


def test_the_kernel_build_finds_the_ninja_package_without_an_activated_environment(tmp_path, monkeypatch):
    """`.venv/bin/python` run directly has no `.venv/bin` on PATH; the build needs ninja there."""
    import shutil

    from hf_sparse.attention import fused

    monkeypatch.setenv("PATH", str(tmp_path))  # no ninja (nor anything else)
    assert shutil.which("ninja") is None
    fused._find_ninja()
    assert shutil.which("ninja") is not None


def _floor(req):
    from packaging.version import Version

    return max(Version(s.version) for s in req.specifier if s.operator == ">=")


def _our_requirements() -> list:
    """pyproject.toml's dependencies and every extra's."""
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for reqs in project["optional-dependencies"].values() for r in reqs]
    return [Requirement(r) for r in project["dependencies"] + extras]


@pytest.mark.parametrize("name", ["torch", "accelerate"])
def test_pyproject_floors_meet_the_installed_transformers_floors(name):
    """Below its own floor transformers disables torch (then `import hf_sparse` fails) and its Trainer refuses
    accelerate: pyproject.toml's minimum must be at least the installed transformers' (its `torch` extra).
    Necessary, not sufficient: transformers' declared floor can be lower than what it calls (see below)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    ours = _our_requirements()
    theirs = [Requirement(r) for r in metadata.requires("transformers")]
    (theirs,) = {
        _floor(r) for r in theirs if r.name == name and r.marker and r.marker.evaluate({"extra": "torch"})
    }
    (ours,) = [_floor(r) for r in ours if r.name == name]
    assert ours >= theirs, (
        f"pyproject.toml: {name}>={ours}, transformers {metadata.version('transformers')}: >={theirs}"
    )


# The oldest release of each package that works with every transformers in the declared range, found by
# installing the floors next to transformers 5.10.4 and 5.24 and running the Trainer and LoRA tests (no index is
# asked here): a floor below one of these installs without complaint and fails at an import, Trainer.train() or
# get_peft_model. (transformers' own adapter loading, `load_adapter` / `from_pretrained` of an adapter folder,
# asks for peft>=0.19 on 5.10.4 and >=0.22, unreleased, on 5.24; hf-sparse's runs use peft's own classes: a
# resumed LoRA run loads its adapter with PeftModel.load_adapter.)
NEEDED_FLOORS = [
    ("torch", "2.6", "transformers 5.24 disables torch < 2.6: `import hf_sparse` fails"),
    ("accelerate", "1.3", "Trainer.train() calls Accelerator.unwrap_model(keep_torch_compile=...): a TypeError "
     "with accelerate 1.1 and 1.2, though transformers declares accelerate>=1.1"),
    ("peft", "0.18", "peft 0.17 imports transformers' HybridCache, which transformers 5 removed: `import peft` "
     "and, with peft installed, `from transformers import Trainer` raise ImportError"),
    ("peft", "0.21.2", "LoRA on a seq2seq model (LED, the summarization task): peft's wrapper reads "
     "_prepare_encoder_decoder_kwargs_for_generation, which transformers 5.18 removed; 0.21.2 no longer does"),
]  # fmt: skip


@pytest.mark.parametrize("name, needed, reason", NEEDED_FLOORS)
def test_pyproject_floors_meet_what_the_code_needs(name, needed, reason):
    from packaging.version import Version

    (ours,) = [_floor(r) for r in _our_requirements() if r.name == name]
    assert ours >= Version(needed), f"pyproject.toml: {name}>={ours}, needs >={needed}: {reason}"


def test_the_build_backend_floor_reads_the_license_expression():
    """`license = "Apache-2.0"` (an SPDX expression, PEP 639) needs setuptools>=77 (68-76 fail to read it)."""
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(pyproject["project"]["license"], str)
    (setuptools,) = [
        Requirement(r) for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")
    ]
    assert setuptools.specifier.contains("77.0.3") and not setuptools.specifier.contains("76.1.0")


COMPAT_UV = """#!/usr/bin/env bash
echo "uv $*" >>"{root}/log"
if [[ "$1" == venv ]]; then  # uv venv -q --python PYTHON VENV: a python that fakes the version and pytest
  mkdir -p "${@: -1}/bin"
  printf '#!/usr/bin/env bash\\n[[ "$1" == -c ]] && echo 5.24.0\\nexit 0\\n' >"${@: -1}/bin/python"
  chmod +x "${@: -1}/bin/python"
fi
"""


def _compat_repo(tmp_path) -> tuple[Path, dict]:
    """A copy of what scripts/test_compat.sh reads, its uv faked (logging to tmp_path/log), and its environment."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for script in ("test_compat.sh", "default_torch.sh"):
        shutil.copy(ROOT / "scripts" / script, repo / "scripts")
    shutil.copy(ROOT / "pyproject.toml", repo)
    (repo / ".venv-compat").mkdir()
    _executable(repo / ".venv-compat" / "uv", COMPAT_UV.replace("{root}", str(tmp_path)))
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH", "PIP_FIND_LINKS", "COMPAT_TESTS")}
    env.update(COMPAT_VERSIONS="5.24.0", COMPAT_CONFORMANCE="0")
    return repo, env


def test_compat_environments_follow_a_changed_torch(tmp_path):
    """scripts/test_compat.sh (in a copy of the repository, its uv faked) installs the CPU build by default, and
    refreshes an environment when TORCH changes, and only then."""
    repo, env = _compat_repo(tmp_path)
    steps = [(None, CPU_TORCH), (None, None), ("torch==2.13.0", "torch==2.13.0"), ("torch==2.13.0", None),
             ("torch==2.12.0", "torch==2.12.0")]  # fmt: skip
    for torch, installed in steps:
        (tmp_path / "log").unlink(missing_ok=True)
        proc = subprocess.run(["bash", str(repo / "scripts" / "test_compat.sh")],
                              env={**env, **({"TORCH": torch} if torch else {})}, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        log = (tmp_path / "log").read_text() if (tmp_path / "log").exists() else ""
        torch_installs = [
            line for line in log.splitlines() if line.startswith("uv pip install") and " torch==" in line
        ]
        assert [line.split(" -q --python ")[1].split(" ", 1)[1] for line in torch_installs] == (
            [installed] if installed else []
        ), (torch, log)


@pytest.mark.parametrize("where", ["below", "at the upper bound", "the lower bound", "inside"])
def test_compat_installs_a_version_outside_the_declared_range_over_it(tmp_path, where):
    """The README's way to try a transformers outside transformers>=X,<Y: `make test-compat COMPAT_VERSIONS=V`.
    hf-sparse's own requirement would make V unsatisfiable: V is installed over it (uv's --override), said once;
    a version inside the range is installed as it always was."""
    (transformers,) = [r for r in _our_requirements() if r.name == "transformers"]  # >=X,<Y
    lower = _floor(transformers)
    (upper,) = [s.version for s in transformers.specifier if s.operator == "<"]
    version = {"below": f"{lower.major}.{lower.minor - 1}.0", "at the upper bound": f"{upper}.0",
               "the lower bound": str(lower), "inside": f"{lower.major}.{lower.minor + 1}.0"}[where]  # fmt: skip
    outside = where in ("below", "at the upper bound")
    assert transformers.specifier.contains(version) != outside
    repo, env = _compat_repo(tmp_path)
    proc = subprocess.run(["bash", str(repo / "scripts" / "test_compat.sh")], env={**env, "COMPAT_VERSIONS": version},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (package,) = [
        line for line in (tmp_path / "log").read_text().splitlines() if "-e .[train,viz,dev]" in line
    ]
    override = repo / ".venv-compat" / f"transformers-{version}" / ".compat-override.txt"
    assert package.endswith(f"-e .[train,viz,dev] pip transformers=={version}")
    if outside:
        assert f"--override {override.relative_to(repo)} -e ." in package
        assert override.read_text() == f"transformers=={version}\n"
        assert f"transformers {version} is outside the declared range (" in proc.stderr
    else:
        assert "--override" not in package and not override.exists()
        assert "outside the declared range" not in proc.stderr
