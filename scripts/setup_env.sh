#!/usr/bin/env bash
# Create or update the project's virtual environment. Idempotent: `make` only calls this when
# pyproject.toml changed since the last successful run, or when TORCH differs from the last one given to make.
# Runs from any folder: it works in the repository root, and takes VENV and PYTHON paths given relative from the
# folder it was started in.
#
#   VENV    where the environment lives                      (default .venv in the repository root; any venv,
#           also one made without pip, e.g. by `uv venv`)
#   PYTHON  interpreter used to create it                    (default python3)
#   TORCH   torch requirement                                (default: the CPU build of torch==2.13.0: a
#           torch-2.13.0+cpu wheel in PIP_FIND_LINKS if one installs, else from the PyTorch CPU index
#           https://download.pytorch.org/whl/cpu; on macOS PyPI's, the CPU build there;
#           e.g. TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126")
#           installed when the venv has no torch or one older than pyproject.toml's minimum, and whenever
#           TORCH is set; a torch that already satisfies it is kept (to switch builds of one version,
#           name the build: torch==2.13.0+cu126)
#   EXTRAS  extras of hf-sparse to install                   (default train,viz,dev)
set -euo pipefail
here=$PWD
cd "$(dirname "$0")/.."
source scripts/default_torch.sh  # TORCH_VERSION, install_default_torch
VENV=${VENV:-$PWD/.venv}
PYTHON=${PYTHON:-python3}
case $VENV in /*) ;; *) VENV=$here/$VENV ;; esac
case $PYTHON in /*) ;; */*) PYTHON=$here/$PYTHON ;; esac  # a path, not a command name
TORCH=${TORCH:-}  # empty: the default (install_default_torch below)
EXTRAS=${EXTRAS:-train,viz,dev}

say() { echo "setup_env.sh: $*" >&2; }

[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
py="$VENV/bin/python"

# uv resolves and installs in seconds where pip takes minutes; fall back to pip if it can't be had.
uv="$VENV/bin/uv"
if [[ ! -x "$uv" ]] && ! "$py" -m pip --version >/dev/null 2>&1; then
  # an environment made without pip (`uv venv`, as scripts/test_compat.sh makes): a uv on PATH installs
  # into it; otherwise pip comes from the interpreter's own ensurepip
  if command -v uv >/dev/null 2>&1; then
    uv=$(command -v uv)
  elif ! out=$("$py" -m ensurepip 2>&1); then
    say "$py has no pip and ensurepip failed: $(tail -n1 <<<"$out")"
    say "install pip into $VENV, or put uv on PATH, and run again"
    exit 1
  fi
fi
if [[ ! -x "$uv" ]] && ! out=$("$py" -m pip install -q uv 2>&1); then
  say "could not install uv ($(tail -n1 <<<"$out")); installing with pip instead (slower)"
fi
if [[ -x "$uv" ]]; then
  links=()
  for dir in ${PIP_FIND_LINKS:-}; do links+=(--find-links "$dir"); done  # pip takes several, space-separated
  # --compile-bytecode: write .pyc files now; with PYTHONDONTWRITEBYTECODE set, every process would
  # otherwise recompile torch/transformers/sympy sources on import (seconds per process).
  # ("${links[@]+...}": an empty array is an unbound variable to bash <= 4.3 under set -u, e.g. macOS's bash)
  install() { "$uv" pip install -q --compile-bytecode --python "$py" ${links[@]+"${links[@]}"} "$@"; }
else
  install() { "$py" -m pip install -q "$@"; }
fi

# Torch first and on its own, so that a plain `torch` requirement never pulls a multi-GB CUDA build: the editable
# install below keeps a torch that meets pyproject.toml's minimum, and would replace an older one with the index's
# default build.
min_torch=$(sed -n 's/^ *"torch>=\([0-9][0-9.]*\)".*/\1/p' pyproject.toml)
have_torch=$("$py" - "${min_torch:-0}" <<'EOF'
import re
import sys
from importlib import metadata


def release(version):
    return tuple(int(x) for x in re.match(r"\d+(?:\.\d+)*", version).group().split("."))


try:
    have = metadata.version("torch")
except metadata.PackageNotFoundError:
    sys.exit()
print(have if release(have) >= release(sys.argv[1]) else f"{have} (older than torch>={sys.argv[1]})")
EOF
)
if [[ -n "$TORCH" ]]; then
  [[ -n "$have_torch" ]] && say "torch ${have_torch}: installing TORCH=$TORCH"
  # shellcheck disable=SC2086  # TORCH may carry extra pip options on purpose
  install $TORCH
elif [[ -z "$have_torch" || "$have_torch" == *older* ]]; then
  [[ -n "$have_torch" ]] && say "torch ${have_torch}: installing the CPU build of torch==$TORCH_VERSION"
  install_default_torch install
fi
install -e ".[$EXTRAS]"
"$py" -c "import torch, transformers; print(f'hf-sparse env ready: torch {torch.__version__}, transformers {transformers.__version__}')"
