#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds the consumer (a
# small training program, consumer/main.c) every way the install offers:
# find_package(sluice) with sluice::sluice_shared and sluice::sluice_static,
# and pkg-config with sluice (shared) and sluice-static (the archive). Each
# must run and print the same two lines and map no CUDA library; the static
# ones must not need libsluice.so. The package must not need CUDA to be
# found (the consumer is configured with CUDA hidden from CMake), and in a
# build with CUDA every consumer must load the installed CUDA module.
set -euo pipefail
build_dir=$1 src_dir=$2 with_cuda=${3:-OFF}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build_dir" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src_dir/tests/install/consumer" -B "$tmp/b" -G Ninja \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON --no-warn-unused-cli \
  >/dev/null
if grep -qi cuda "$tmp/prefix/lib/pkgconfig/"*.pc; then
  echo "the pkg-config files name CUDA:"; grep -i cuda "$tmp/prefix/lib/pkgconfig/"*.pc
  exit 1
fi
cmake --build "$tmp/b" >/dev/null
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
main="$src_dir/tests/install/consumer/main.c"
cc "$main" -o "$tmp/pc_shared" $(pkg-config --cflags --libs sluice)
cc "$main" -o "$tmp/pc_static" $(pkg-config --cflags --libs sluice-static)

run() { # name binary
  local out
  out=$(LD_LIBRARY_PATH="$tmp/prefix/lib" "$2") || {
    echo "$1 consumer failed: $out"; exit 1; }
  [ "$(head -n1 <<<"$out")" = 'cpu:0-3[2,2]' ] || {
    echo "$1 consumer printed '$out'"; exit 1; }
  echo "$out"
}
want=$(run "find_package shared" "$tmp/b/consumer_shared")
for c in "find_package static:$tmp/b/consumer_static" \
         "pkg-config sluice:$tmp/pc_shared" \
         "pkg-config sluice-static:$tmp/pc_static"; do
  got=$(run "${c%%:*}" "${c#*:}")
  [ "$got" = "$want" ] || {
    echo "${c%%:*} consumer printed '$got', want '$want'"; exit 1; }
done
for b in "$tmp/b/consumer_static" "$tmp/pc_static"; do
  if readelf -d "$b" | grep -q 'NEEDED.*libsluice'; then
    echo "$b needs libsluice.so: it was to link the archive"; exit 1
  fi
done
if [ "$with_cuda" = ON ]; then
  [ -e "$tmp/prefix/lib/libsluice-cuda.so" ] || {
    echo "the CUDA module was not installed"; exit 1; }
  for b in "$tmp/b/consumer_shared" "$tmp/b/consumer_static" \
           "$tmp/pc_shared" "$tmp/pc_static"; do
    got=$(LD_LIBRARY_PATH="$tmp/prefix/lib" "$b" cuda-module) || {
      echo "$b cuda-module failed: $got"; exit 1; }
    [ "$got" = libsluice-cuda.so ] || {
      echo "$b cuda-module printed '$got'"; exit 1; }
  done
  echo "install: every consumer loads the installed CUDA module"
fi
echo "install: find_package (shared, static) and pkg-config (sluice,"
echo "  sluice-static) consumers train alike and map no CUDA library:"
echo "  $(tail -n1 <<<"$want")"
