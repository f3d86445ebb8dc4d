#!/usr/bin/env bash
# Create or update the project's virtual environment. Idempotent: `make` only calls this when
# pyproject.toml changed since the last successful run.
#
#   VENV    where the environment lives                      (default .venv)
#   PYTHON  interpreter used to create it                    (default python3)
#   TORCH   requirement used when the venv has no torch yet  (default torch==2.13.0;
#           e.g. TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126")
#   EXTRAS  extras of hf-sparse to install                   (default train,viz,dev)
set -euo pipefail
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH=${TORCH:-torch==2.13.0}
EXTRAS=${EXTRAS:-train,viz,dev}

[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
py="$VENV/bin/python"

# uv resolves and installs in seconds where pip takes minutes; fall back to pip if it can't be had.
if [[ -x "$VENV/bin/uv" ]] || "$py" -m pip install -q uv >/dev/null 2>&1; then
  links=()
  [[ -n "${PIP_FIND_LINKS:-}" ]] && links=(--find-links "$PIP_FIND_LINKS")
  # --compile-bytecode: write .pyc files now; with PYTHONDONTWRITEBYTECODE set, every process would
  # otherwise recompile torch/transformers/sympy sources on import (seconds per process).
  install() { "$VENV/bin/uv" pip install -q --compile-bytecode --python "$py" "${links[@]}" "$@"; }
else
  install() { "$py" -m pip install -q "$@"; }
fi

# Torch first and on its own, so that a plain `torch` requirement never pulls a multi-GB CUDA build
# on a machine that has a local CPU wheel; an existing torch is kept.
if ! "$py" -c "import torch" >/dev/null 2>&1; then
  # shellcheck disable=SC2086  # TORCH may carry extra pip options on purpose
  install $TORCH
fi
install -e ".[$EXTRAS]"
"$py" -c "import torch, transformers; print(f'hf-sparse env ready: torch {torch.__version__}, transformers {transformers.__version__}')"
