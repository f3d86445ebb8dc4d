# Sourced by scripts/setup_env.sh and scripts/test_compat.sh: the default torch, its CPU build.
# PyPI's torch for Linux and Windows is the CUDA one, with several GB of nvidia-* packages.
TORCH_VERSION=2.13.0
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu

# install_default_torch INSTALL...: run the install command INSTALL... (its arguments first) with the CPU build
# of torch==TORCH_VERSION: a torch-VERSION+cpu wheel in PIP_FIND_LINKS (a local copy) where it installs (fits this
# Python), else the PyTorch CPU index's, else (that index unreachable) PyPI's, saying so; on macOS PyPI's, which
# is CPU-only there.
install_default_torch() {
  local dir
  if [[ "$(uname -s)" == Darwin ]]; then
    "$@" "torch==$TORCH_VERSION"
    return
  fi
  for dir in ${PIP_FIND_LINKS:-}; do
    dir=${dir#file://}
    if compgen -G "$dir/torch-$TORCH_VERSION+cpu-*.whl" >/dev/null; then
      "$@" "torch==$TORCH_VERSION+cpu" && return
      echo "$(basename "$0"): the torch-$TORCH_VERSION+cpu wheel in $dir does not install here (above): trying $TORCH_CPU_INDEX" >&2
      break
    fi
  done
  "$@" "torch==$TORCH_VERSION" --index-url "$TORCH_CPU_INDEX" && return
  echo "$(basename "$0"): $TORCH_CPU_INDEX did not answer (above): installing PyPI's torch==$TORCH_VERSION (on Linux its CUDA build, several GB)" >&2
  "$@" "torch==$TORCH_VERSION"
}
