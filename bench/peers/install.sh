#!/bin/sh
# Installs the benchmarks' peers when they are missing.
#   install.sh torch          Debian's python3-torch and python3-numpy
#                             (apt-get; needs root when they are missing)
#   install.sh jax VENV_DIR   JAX from PyPI into a virtual environment at
#                             VENV_DIR (created with /usr/bin/python3 -m venv;
#                             python3-venv from apt-get when it is missing)
#   install.sh openblas-bf16 DIR
#                             OpenBLAS with its bf16 gemm (cblas_sbgemm), which
#                             Debian's package leaves out: Debian 12's own
#                             source (0.3.21, checksum-verified) built with
#                             BUILD_BFLOAT16=1 for COOPERLAKE into DIR (a few
#                             minutes on 2 cores); needs curl, make, gcc
# Several may be given: install.sh torch jax VENV_DIR. For jax the last line
# printed is "jax-python PATH", the Python to run the JAX peer with; for
# openblas-bf16 "openblas-bf16 PATH", the library. Set SLUICE_JAX_VERSION to
# pin a JAX version (default: the newest on PyPI).
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
  openblas-bf16)
    [ $# -ge 2 ] || { echo "install.sh: openblas-bf16 needs DIR" >&2; exit 2; }
    dir=$2
    shift 2
    lib="$dir/OpenBLAS-0.3.21/libopenblas.so.0"
    if [ ! -e "$lib" ]; then
      echo "== building OpenBLAS 0.3.21 with BUILD_BFLOAT16 into $dir" >&2
      command -v curl >/dev/null 2>&1 || apt_install curl ca-certificates
      tarball=openblas_0.3.21+ds.orig.tar.xz
      sum=bbec5cca61c8033b2d57aaecde205d709323a0b35a5f193290081dbb3826848a
      mkdir -p "$dir"
      curl -fsS -o "$dir/$tarball" \
        "http://deb.debian.org/debian/pool/main/o/openblas/$tarball" >&2
      echo "$sum  $dir/$tarball" | sha256sum -c --quiet - >&2
      tar -xJf "$dir/$tarball" -C "$dir"
      make -C "$dir/OpenBLAS-0.3.21" -j"$(nproc)" TARGET=COOPERLAKE \
        BUILD_BFLOAT16=1 NO_FORTRAN=1 NO_LAPACK=1 NO_LAPACKE=1 USE_OPENMP=0 \
        NUM_THREADS=64 libs shared >"$dir/build.log" 2>&1 ||
        { echo "install.sh: OpenBLAS build failed, see $dir/build.log" >&2; exit 1; }
    fi
    echo "openblas-bf16 $lib"
    ;;
  *)
    echo "install.sh: unknown peer '$1' (want torch, jax VENV_DIR or openblas-bf16 DIR)" >&2
    exit 2
    ;;
  esac
done
