#!/usr/bin/env bash
# The CLI and the examples are programs on the public API:
#  - every "quoted" include in python-free-cli/ and examples/ names a file of
#    that folder (nothing of the library's internal headers);
#  - the programs link libsluice.so, whose internal symbols are hidden, and
#    every sluice symbol they import is declared in include/sluice/.
set -euo pipefail
build_dir=$1 src_dir=$2
fail=0
for dir in python-free-cli examples; do
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${line#*:}")
    here=$(dirname "$file")
    if [ ! -e "$src_dir/$here/$inc" ] && [ ! -e "$src_dir/$dir/$inc" ]; then
      echo "$file includes \"$inc\", which is not a file of $dir/"
      fail=1
    fi
  done < <(cd "$src_dir" && grep -rn --include='*.c' --include='*.h' \
             '^#include "' "$dir" | sed -E 's/^([^:]+):[0-9]+:/\1:/')
done
declared=$(cat "$src_dir"/include/sluice/*.h)
for prog in python-free-cli/sluice examples/mlp examples/gpt; do
  bin="$build_dir/$prog"
  readelf -d "$bin" | grep -q 'NEEDED.*libsluice\.so' || {
    echo "$prog does not link libsluice.so"; fail=1; continue; }
  n=0
  for sym in $(nm -D --undefined-only "$bin" | awk '{print $2}' | grep -E '^sl_'); do
    n=$((n + 1))
    grep -qw "$sym" <<<"$declared" || {
      echo "$prog imports $sym, which no public header declares"; fail=1; }
  done
  echo "$prog: $n sluice functions, all public"
done
exit $fail
