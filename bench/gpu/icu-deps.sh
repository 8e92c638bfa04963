#!/usr/bin/env bash
# The GPU machine has no libicu-dev and no network: unpack this machine's Debian ICU packages
# (headers and shared libraries) into .deps/icu, which CMakeLists.txt uses when present. Send it
# along with a device call as .deps/icu.tar.xz (~10 MB; the checkout and the carry must stay under
# 64 MiB): carry [".deps/icu.tar.xz"] and start the command with `tar xJf .deps/icu.tar.xz -C .deps`.
set -eu
cd "$(dirname "$0")/../.."
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
V=$(dpkg-query -W -f='${Package}\n' 'libicu[0-9]*' | grep -E '^libicu[0-9]+$' | head -1)
( cd "$T" && apt-get download libicu-dev "$V" )
rm -rf .deps/icu && mkdir -p .deps/icu
for d in "$T"/*.deb; do dpkg -x "$d" .deps/icu; done
find .deps/icu -name '*.a' -delete
# Only the headers the sources reach (the call's 64 MiB): those g++ -M lists for the files that
# include <unicode/...>.
KEEP=$(grep -rl --include='*.cpp' '#include <unicode/' src | xargs -I{} g++ -std=c++20 -M -I src \
  -I .deps/icu/usr/include {} | tr ' \\' '\n\n' | grep -oE 'unicode/[^/]+\.h$' | sort -u)
for h in .deps/icu/usr/include/unicode/*.h; do
  grep -qx "unicode/$(basename "$h")" <<<"$KEEP" || rm -f "$h"
done
rm -rf .deps/icu/usr/share .deps/icu/usr/bin .deps/icu/usr/lib/*/libicu{io,test,tu}*
du -sh .deps/icu
tar cJf .deps/icu.tar.xz -C .deps icu && ls -la .deps/icu.tar.xz
