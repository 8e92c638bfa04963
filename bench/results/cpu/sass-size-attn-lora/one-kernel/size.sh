#!/usr/bin/env bash
# size.sh FILE.cu [INCLUDE_DIR]: FILE compiled alone to an sm_90a cubin (nvcc 13.0, the build's
# -O3 flags), each kernel's .text bytes (its SASS) and mangled name. INCLUDE_DIR (default: the
# checkout's src) lets a copy of src with one edit stand in for it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
inc=${2:-$here/../../../../../src}
out=$(mktemp --suffix=.cubin); trap 'rm -f "$out"' EXIT
nvcc -I"$inc" -O3 -DNDEBUG -arch=sm_90a --expt-relaxed-constexpr -std=c++20 -x cu -cubin "$1" \
  -o "$out"
readelf -SW "$out" 2>/dev/null | grep ' \.text\.' |
  while read -r _ name _ _ _ size _; do echo "$((16#$size)) ${name#.text.}"; done
