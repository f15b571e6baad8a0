#!/usr/bin/env bash
# Set-up, build, demo and test in one place, for a fresh Debian 12 machine.
#   scripts/dev.sh demo   install what is missing, build, run the demo
#   scripts/dev.sh test   install what is missing, build, run every test
#                         (then the fuzz smoke run and the sanitizer suites)
#   scripts/dev.sh sanitize   only the suite under ASan+UBSan and under TSan
# Environment: BUILD_DIR (default build), JOBS (default nproc),
# SLUICE_SKIP_INSTALL=1 to skip apt-get, SLUICE_FUZZ_SECONDS (default 10).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}

packages=(build-essential cmake ninja-build pkg-config libcmocka-dev
          libopenblas-dev libuv1-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
          libssl-dev clang libclang-rt-14-dev)

install_missing() {
  [ "${SLUICE_SKIP_INSTALL:-0}" = 1 ] && return 0
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
      || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing: ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "need root to apt-get install: ${missing[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

build() { # build DIR [cmake args...]
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja -DSLUICE_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

demo() {
  install_missing
  build "$build_dir"
  local sluice="$build_dir/python-free-cli/sluice"
  "$sluice" info
  echo
  echo "== examples/mlp: 4x1024 MLP, data x tensor parallel on 4 CPU devices [2,2]"
  "$build_dir/examples/mlp" --devices cpu:4 --layout hybrid --steps 10 --batch 128
  echo
  echo "== examples/gpt: a small decoder-only transformer, tensor parallel on 2 devices"
  "$build_dir/examples/gpt" --devices cpu:2 --layout tp --steps 10
  echo
  echo "== sluice boxing: a 2x2 mesh, (S(0),P) -> (B,B)"
  "$sluice" boxing --shape 8,6 --dtype f32 --from-placement 'cpu:0-3[2,2]' \
    --from '(S(0),P)' --to '(B,B)' --verify
}

fuzz_smoke() {
  local dir="$build_dir-fuzz" secs=${SLUICE_FUZZ_SECONDS:-10} f name
  CC=clang build "$dir" -DSLUICE_FUZZ=ON -DSLUICE_CUDA=OFF \
    -DSLUICE_BUILD_TESTS=ON -DSLUICE_BUILD_BENCH=OFF
  for f in "$dir"/tests/fuzz/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    # libFuzzer writes new inputs into its first corpus directory and crash
    # reproducers into the artifact prefix: both go to the build directory
    # so the checked-in seeds (read-only here) stay as they are.
    mkdir -p "$dir/corpus/$name"
    echo "== $name for ${secs}s"
    "$f" -max_total_time="$secs" -print_final_stats=0 \
      -artifact_prefix="$dir/$name-" \
      "$dir/corpus/$name" "tests/fuzz/corpus/${name#fuzz_}" \
      >/dev/null 2>"$dir/$name.log" \
      || { tail -40 "$dir/$name.log"; exit 1; }
  done
}

test_all() {
  install_missing
  build "$build_dir"
  (cd "$build_dir" && ctest --output-on-failure -j "$jobs")
  fuzz_smoke
  sanitize_suites
}

# The suite under AddressSanitizer+UBSan, then ThreadSanitizer (clang, whose
# TSan runtime handles this kernel's address-space layout).
sanitize_suites() {
  local san dir
  for san in address,undefined thread; do
    dir="$build_dir-${san%%,*}"
    echo "== sanitizer build: $san"
    CC=clang build "$dir" -DSLUICE_SANITIZE="$san" -DSLUICE_CUDA=OFF \
      -DSLUICE_BUILD_BENCH=OFF
    (cd "$dir" && ctest --output-on-failure -j "$jobs")
  done
}

sanitize() {
  install_missing
  sanitize_suites
}

case "${1:-}" in
  demo) demo ;;
  test) test_all ;;
  sanitize) sanitize ;;
  *) echo "usage: scripts/dev.sh demo|test|sanitize" >&2; exit 2 ;;
esac
