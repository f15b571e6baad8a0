#!/usr/bin/env bash
# The README's program is complete: its first ```c block builds against the
# public headers and libsluice.so, runs, and its loss goes down.
set -euo pipefail
build_dir=$1 src_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk '/^```c$/ {on = 1; next} /^```$/ && on {exit} on' "$src_dir/README.md" \
  > "$tmp/fit.c"
[ -s "$tmp/fit.c" ] || { echo "README.md has no \`\`\`c block"; exit 1; }
cc -std=c11 -Wall -Wextra -Werror "$tmp/fit.c" -I"$src_dir/include" \
  -L"$build_dir" -lsluice -Wl,-rpath,"$build_dir" -o "$tmp/fit"
out=$("$tmp/fit")
echo "$out"
loss=$(sed -n 's/^loss after 20 steps: //p' <<<"$out")
# The loss starts at 1.25 (w = 0): it must have gone down.
awk -v l="$loss" 'BEGIN { exit !(l != "" && l < 1.2) }' || {
  echo "the README's program printed '$out'"; exit 1; }
