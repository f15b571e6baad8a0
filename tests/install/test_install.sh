#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds a consumer with
# find_package(sluice) (shared and static) and with pkg-config, and runs them.
set -euo pipefail
build_dir=$1 src_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build_dir" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src_dir/tests/install/consumer" -B "$tmp/b" -G Ninja \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/b" >/dev/null
want='cpu:0-3[2,2]'
got=$(LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/b/consumer_shared")
[ "$got" = "$want" ] || { echo "shared consumer printed '$got'"; exit 1; }
got=$("$tmp/b/consumer_static")
[ "$got" = "$want" ] || { echo "static consumer printed '$got'"; exit 1; }
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
cc "$src_dir/tests/install/consumer/main.c" -o "$tmp/pc" $(pkg-config --cflags --libs sluice)
got=$(LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/pc")
[ "$got" = "$want" ] || { echo "pkg-config consumer printed '$got'"; exit 1; }
echo "install: find_package (shared, static) and pkg-config consumers work"
