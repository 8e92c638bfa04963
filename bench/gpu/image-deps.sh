#!/usr/bin/env bash
# The GPU machine may lack libpng-dev and libjpeg-dev (vision/) and has no network: unpack this
# machine's Debian packages (headers, shared libraries) into .deps/img, which CMakeLists.txt uses
# when present, as icu-deps.sh does for ICU. Send .deps/img.tar.xz along with a device call:
# carry [".deps/img.tar.xz"]; bench/gpu/vlm.sh unpacks it.
set -eu
cd "$(dirname "$0")/../.."
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
( cd "$T" && apt-get download libpng-dev libpng16-16 libjpeg62-turbo-dev libjpeg62-turbo zlib1g-dev )
rm -rf .deps/img && mkdir -p .deps/img
for d in "$T"/*.deb; do dpkg -x "$d" .deps/img; done
find .deps/img -name '*.a' -delete
mv .deps/img/usr/lib/x86_64-linux-gnu/* .deps/img/usr/lib/ && rmdir .deps/img/usr/lib/x86_64-linux-gnu
rm -rf .deps/img/usr/share .deps/img/usr/bin
du -sh .deps/img
tar cJf .deps/img.tar.xz -C .deps img && ls -la .deps/img.tar.xz
