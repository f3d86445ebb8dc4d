#!/usr/bin/env bash
# `make test-compat`: the model, generation, integration, recipe (Trainer) and task tests, and transformers' own
# common model tests (tests/conformance), against the oldest and the newest transformers that pyproject.toml
# declares, each in its own environment under .venv-compat/ (created on first use; reused while pyproject.toml and
# TORCH are unchanged, so a second run only runs the tests).
#
#   COMPAT_VERSIONS  space-separated transformers versions to test  (default: the lower bound and the newest
#                    release below the upper bound, as uv resolves them); a version outside the declared range
#                    is installed over hf-sparse's requirement (uv's --override)
#   COMPAT_TESTS     pytest arguments                               (default: the model, generation,
#                    integration, Trainer-recipe, task and pipeline tests)
#   COMPAT_CONFORMANCE  1 (default) also runs tests/conformance (transformers' own common model tests, from the
#                    sdist of each version, fetched once with pip); 0 skips it
#   TORCH            torch requirement, as for scripts/setup_env.sh (default: the CPU build of torch==2.13.0,
#                    found as scripts/setup_env.sh finds it); a changed TORCH refreshes the environments
#   PYTHON           interpreter for the environments               (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=.venv-compat
PYTHON=${PYTHON:-python3}
TORCH=${TORCH:-}
source scripts/default_torch.sh  # TORCH_VERSION, install_default_torch (as scripts/setup_env.sh installs it)
EXTRAS=train,viz,dev  # the extras of the tested features (plots, recipes, test tools)
TOOLS=pip             # what the tests call besides the package (the wheel test runs `python -m pip wheel`)
CONFORMANCE=${COMPAT_CONFORMANCE:-1}
TESTS=${COMPAT_TESTS:-tests/models tests/attention/test_integration.py tests/training tests/tasks tests/pipelines}
mkdir -p "$ROOT"

# the declared range, e.g. ">=5.1,<5.25"
spec=$("$PYTHON" - <<'EOF'
import re
text = open("pyproject.toml").read()
m = re.search(r'"transformers([^"]*)"', text)
print(m.group(1) if m else "")
EOF
)
lower=$(sed -n 's/.*>=\([0-9][0-9.]*\).*/\1/p' <<<"$spec")
upper=$(sed -n 's/.*<\([0-9][0-9.]*\).*/\1/p' <<<"$spec")
[[ -n "$spec" && -n "$lower" && -n "$upper" ]] || { echo "pyproject.toml: no transformers>=X,<Y requirement"; exit 1; }

# in_range VERSION: lower <= VERSION < upper (sort -V; a pre-release of the upper bound is outside too)
in_range() {
  [[ "$(printf '%s\n' "$lower" "$1" | sort -V | head -1)" == "$lower" ]] &&
    [[ "$1" != "$upper" && "$(printf '%s\n' "$1" "$upper" | sort -V | head -1)" == "$1" ]]
}

if [[ ! -x "$ROOT/uv" ]]; then
  "$PYTHON" -m venv "$ROOT/tool" && "$ROOT/tool/bin/python" -m pip install -q uv && ln -sf tool/bin/uv "$ROOT/uv"
fi
uv="$ROOT/uv"
links=()
for dir in ${PIP_FIND_LINKS:-}; do links+=(--find-links "$dir"); done  # pip takes several, space-separated
# ("${links[@]+...}": an empty array is an unbound variable to bash <= 4.3 under set -u, e.g. macOS's bash)
install() { "$uv" pip install -q --python "$1" ${links[@]+"${links[@]}"} "${@:2}"; }

# install_torch PYTHON: TORCH, else the default CPU build (scripts/default_torch.sh)
install_torch() {
  if [[ -n "$TORCH" ]]; then
    # shellcheck disable=SC2086  # TORCH may carry extra pip options on purpose
    install "$1" $TORCH
  else
    install_default_torch install "$1"
  fi
}

# env NAME REQUIREMENT: create/refresh $ROOT/NAME with hf-sparse and transformers REQUIREMENT. A version outside
# the declared range (COMPAT_VERSIONS) is installed over hf-sparse's own requirement (uv's --override), everything
# else resolved as usual: the README's way to try a transformers the package does not declare.
env_for() {
  local name=$1 req=$2 venv="$ROOT/$1"
  local stamp="$venv/.compat-stamp" want override=()
  want="$req $EXTRAS $TOOLS $(cksum pyproject.toml | cut -d' ' -f1) torch: ${TORCH:-CPU build of $TORCH_VERSION}"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then return; fi
  [[ -x "$venv/bin/python" ]] || "$uv" venv -q --python "$PYTHON" "$venv"
  if [[ "$req" == ==* ]] && ! in_range "${req#==}"; then
    echo "== transformers ${req#==} is outside the declared range ($spec): installing it over hf-sparse's requirement (uv pip install --override); please report what fails" >&2
    echo "transformers$req" >"$venv/.compat-override.txt"
    override=(--override "$venv/.compat-override.txt")
  fi
  install_torch "$venv/bin/python"
  # shellcheck disable=SC2086  # TOOLS is a list of requirements
  install "$venv/bin/python" --compile-bytecode ${override[@]+"${override[@]}"} -e ".[$EXTRAS]" $TOOLS "transformers$req"
  echo "$want" >"$stamp"
}

if [[ -n "${COMPAT_VERSIONS:-}" ]]; then
  envs=()
  for v in $COMPAT_VERSIONS; do env_for "transformers-$v" "==$v"; envs+=("transformers-$v"); done
else
  env_for oldest "==$lower"
  env_for newest "$spec"
  envs=(oldest newest)
fi

status=0
for name in "${envs[@]}"; do
  py="$ROOT/$name/bin/python"
  version=$("$py" -c "import transformers; print(transformers.__version__)")
  echo "== transformers $version ($ROOT/$name): pytest $TESTS"
  # shellcheck disable=SC2086
  if ! "$py" -m pytest -q -n auto $TESTS; then
    echo "== transformers $version: FAILED"
    status=1
  fi
  if [[ "$CONFORMANCE" == 1 ]]; then
    echo "== transformers $version: transformers' common model tests (tests/conformance; its sdist fetched once)"
    "$py" -m tests.conformance.common_tests >/dev/null || echo "(not fetched; the tests below say why)"
    if ! "$py" -m pytest -q -n auto -m "not gpu and not hub" tests/conformance; then
      echo "== transformers $version: conformance FAILED"
      status=1
    fi
  fi
done
exit $status
