#!/usr/bin/env python3
"""The layering check (ctest: layering_test): every library sees only what it links.

Reads each src/**/CMakeLists.txt for ib_library(NAME SOURCES ... DEPS ...), ib_interface(NAME
HEADERS ... DEPS ...) and
target_link_libraries(ib_NAME ... ib_OTHER), then checks that
  - the graph of ib_* libraries has no cycle, and
  - every #include "sub/dir/file.h" in a library's sources and headers names a header of that
    library or of one it links, directly or through the libraries it links.
A header belongs to the library whose SOURCES hold the .cpp of the same path stem, else to the
library of the deepest folder that declares one (of two in one folder, the one named after it). Tests (*_test.cpp) and test support headers
(*test_support*.h) are left to their test targets' DEPS, which the linker checks.

Usage: tools/check_layering.py [SRC_DIR]   (exit 1 with one line per violation)
"""
import os
import re
import sys

LIB_RE = re.compile(r"ib_(?:library|interface)\(\s*(\w+)(.*?)\)", re.S)
LINK_RE = re.compile(r"target_link_libraries\(\s*ib_(\w+)(.*?)\)", re.S)
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def parse_libraries(src):
    libs = {}  # name -> dict(dir, sources, deps)
    for root, _, files in os.walk(src):
        if "CMakeLists.txt" not in files:
            continue
        text = open(os.path.join(root, "CMakeLists.txt")).read()
        text = re.sub(r"#[^\n]*", "", text)
        for name, body in LIB_RE.findall(text):
            words = body.split()
            sources, deps, mode = [], set(), None
            for w in words:
                if w in ("SOURCES", "HEADERS", "DEPS"):
                    mode = w
                elif mode in ("SOURCES", "HEADERS"):
                    sources.append(os.path.normpath(os.path.join(root, w)))
                elif mode == "DEPS" and w.startswith("ib_"):
                    deps.add(w[3:])
            libs[name] = dict(dir=os.path.normpath(root), sources=sources, deps=deps)
        for name, body in LINK_RE.findall(text):
            if name in libs:
                libs[name]["deps"].update(w[3:] for w in body.split() if w.startswith("ib_"))
    return libs


def find_cycle(libs):
    state = {}

    def visit(n, path):
        state[n] = 1
        for d in sorted(libs[n]["deps"]):
            if d not in libs:
                continue
            if state.get(d) == 1:
                return path + [n, d]
            if d not in state:
                found = visit(d, path + [n])
                if found:
                    return found
        state[n] = 2
        return None

    for n in sorted(libs):
        if n not in state:
            found = visit(n, [])
            if found:
                return found[found.index(found[-1]):]
    return None


def closure(libs, name):
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n in seen or n not in libs:
            continue
        seen.add(n)
        todo.extend(libs[n]["deps"])
    return seen


def owner_of(libs, path):
    stem = os.path.splitext(path)[0]
    for name, lib in sorted(libs.items()):
        if path in lib["sources"] or any(os.path.splitext(s)[0] == stem and s.endswith(
                (".cpp", ".cu")) for s in lib["sources"]):
            return name
    best = None  # deepest folder; of two libraries in one folder, the one named after it
    for name, lib in sorted(libs.items()):
        d = lib["dir"] + os.sep
        if not path.startswith(d):
            continue
        if best is None or len(d) > len(libs[best]["dir"]) + 1 or (
                lib["dir"] == libs[best]["dir"] and name == os.path.basename(lib["dir"])):
            best = name
    return best


def main():
    src = os.path.normpath(sys.argv[1] if len(sys.argv) > 1 else "src")
    libs = parse_libraries(src)
    errors = []
    cycle = find_cycle(libs)
    if cycle:
        errors.append("link cycle: " + " -> ".join("ib_" + n for n in cycle))
    files = []
    for root, _, names in os.walk(src):
        for f in names:
            if f.endswith((".h", ".cpp", ".cu", ".cuh")) and not f.endswith("_test.cpp") \
                    and "test_support" not in f:
                files.append(os.path.normpath(os.path.join(root, f)))
    for path in sorted(files):
        lib = owner_of(libs, path)
        if lib is None:
            continue
        allowed = closure(libs, lib)
        for inc in INCLUDE_RE.findall(open(path, encoding="utf-8", errors="replace").read()):
            target = os.path.normpath(os.path.join(src, inc))
            if not os.path.exists(target):
                continue  # a system or generated header
            other = owner_of(libs, target)
            if other is not None and other not in allowed:
                errors.append(f"{path}: includes {inc} of ib_{other}, which ib_{lib} does not "
                              f"link; add it to ib_{lib}'s DEPS (if the layers allow) or move "
                              f"the code")
    for e in errors:
        print(e)
    print(f"layering: {len(libs)} libraries, {len(files)} files, {len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
