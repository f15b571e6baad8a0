#!/bin/sh
# Installs the benchmarks' peers when they are missing.
#   install.sh torch          Debian's python3-torch and python3-numpy
#                             (apt-get; needs root when they are missing)
#   install.sh jax VENV_DIR   JAX from PyPI into a virtual environment at
#                             VENV_DIR (created with /usr/bin/python3 -m venv;
#                             python3-venv from apt-get when it is missing)
# Both may be given: install.sh torch jax VENV_DIR. For jax the last line
# printed is "jax-python PATH", the Python to run the JAX peer with. Set
# SLUICE_JAX_VERSION to pin a version (default: the newest on PyPI).
set -eu

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "install.sh: need root to apt-get install $*" >&2
    exit 1
  fi
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

while [ $# -gt 0 ]; do
  case "$1" in
  torch)
    if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
      echo "== installing python3-torch" >&2
      apt_install python3-torch python3-numpy
    fi
    shift
    ;;
  jax)
    [ $# -ge 2 ] || { echo "install.sh: jax needs VENV_DIR" >&2; exit 2; }
    venv=$2
    shift 2
    if ! "$venv/bin/python" -c 'import jax' 2>/dev/null; then
      echo "== installing JAX into $venv" >&2
      if ! /usr/bin/python3 -c 'import ensurepip' 2>/dev/null; then
        apt_install python3-venv
      fi
      /usr/bin/python3 -m venv "$venv" >&2
      spec=jax
      [ -n "${SLUICE_JAX_VERSION:-}" ] && spec="jax==$SLUICE_JAX_VERSION"
      "$venv/bin/pip" install -q "$spec" >&2
    fi
    echo "jax-python $venv/bin/python"
    ;;
  *)
    echo "install.sh: unknown peer '$1' (want torch or jax VENV_DIR)" >&2
    exit 2
    ;;
  esac
done
