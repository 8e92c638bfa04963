#!/usr/bin/env bash
# The GPU machine may lack libpng-dev and libjpeg-dev (vision/) and has no network: unpack this
# machine's Debian packages (headers, shared libraries) into .deps/img, which CMakeLists.txt uses
# when present, as icu-deps.sh does for ICU. Send .deps/img.tar.xz along with a device call:
# carry [".deps/img.tar.xz"]; bench/gpu/vlm.sh unpacks it.
set -eu
cd "$(dirname "$0")/../.."
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
( cd "$T" && apt-get download libpng-dev libpng16-16 libjpeg62-turbo-dev libjpeg62-turbo zlib1g-dev \
                           zlib1g )
rm -rf .deps/img && mkdir -p .deps/img
for d in "$T"/*.deb; do dpkg -x "$d" .deps/img; done
find .deps/img -name '*.a' -delete
# One lib/ and one include/: zlib's runtime sits in /lib, libz.so links to it by absolute path,
# and jconfig.h in the multiarch include folder, which only the system compiler searches.
mv .deps/img/usr/lib/x86_64-linux-gnu/* .deps/img/lib/x86_64-linux-gnu/libz.so.1* .deps/img/usr/lib/
rm -rf .deps/img/lib .deps/img/usr/lib/x86_64-linux-gnu
ln -sf "$(ls .deps/img/usr/lib | grep -E '^libz\.so\.1\.[0-9.]+$' | head -1)" .deps/img/usr/lib/libz.so
mv .deps/img/usr/include/x86_64-linux-gnu/* .deps/img/usr/include/ && rmdir .deps/img/usr/include/x86_64-linux-gnu
rm -rf .deps/img/usr/share .deps/img/usr/bin
du -sh .deps/img
tar cJf .deps/img.tar.xz -C .deps img && ls -la .deps/img.tar.xz
