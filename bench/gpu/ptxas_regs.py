#!/usr/bin/env python3
"""ptxas -v of one CUDA source as the build compiles it: its command from the build's
compile_commands.json with -Xptxas=-v added (the object goes to a temporary file), printed one
line per kernel instantiation, demangled, with its registers, spills and shared memory.

Usage: python3 bench/gpu/ptxas_regs.py [--build build/sm90a] [--match REGEX] [--sizes] SOURCE
(SOURCE a path ending as in the build, e.g. src/backend/cuda/attention_decode_mma.cu).
--sizes: instead, each kernel's SASS size in bytes (its .text section in a cubin compiled for the
build's real architecture, read with readelf): code a block runs once, cold, costs instruction
fetches (bench/NOTES.md, "The attention form's cost is its code")."""
import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("--build", default="build/sm90a")
    ap.add_argument("--match", default="", help="only kernels whose demangled name matches")
    ap.add_argument("--sizes", action="store_true", help="SASS bytes per kernel, not registers")
    a = ap.parse_args()
    entries = json.load(open(f"{a.build}/compile_commands.json"))
    hits = [e for e in entries if e["file"].endswith(a.source)]
    if not hits:
        sys.exit(f"ptxas_regs: {a.source} is not in {a.build}/compile_commands.json")
    e = hits[0]
    args = shlex.split(e["command"])
    if a.sizes:
        return print_sizes(args, e["directory"], a.match)
    with tempfile.NamedTemporaryFile(suffix=".o") as obj:
        args[args.index("-o") + 1] = obj.name
        args.insert(1, "-Xptxas=-v")
        r = subprocess.run(args, cwd=e["directory"], capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    kernel = None
    for line in (r.stdout + r.stderr).splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            kernel = subprocess.run(["c++filt", m.group(1)], capture_output=True,
                                    text=True).stdout.strip()
            spill = ""
            continue
        if kernel is None:
            continue
        if "spill" in line:
            spill = line.split(":", 1)[1].strip() if ":" in line else line.strip()
        m = re.search(r"Used (\d+) registers.*", line)
        if m:
            if re.search(a.match, kernel):
                print(f"{kernel} :: {m.group(0)} | {spill}")
            kernel = None


def print_sizes(args, cwd, match):
    """The build's command made to write a cubin of its first real architecture."""
    gen = [x for x in args if x.startswith("--generate-code=")]
    arch = re.search(r"sm_\w+", gen[0] if gen else " ".join(args))
    if arch is None:
        sys.exit("ptxas_regs: no sm_ architecture in the build's command")
    args = [x for x in args if not x.startswith("--generate-code=")]
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        args[args.index("-o") + 1] = cubin.name
        args[args.index("-c")] = "-cubin"
        args.insert(1, f"-arch={arch.group(0)}")
        r = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
        if r.returncode:
            sys.exit(r.stderr[-3000:])
        sections = subprocess.run(["readelf", "-SW", cubin.name], capture_output=True,
                                  text=True).stdout
    sizes = {}
    for line in sections.splitlines():
        m = re.search(r"\]\s+\.text\.(\S+)\s+\S+\s+\S+\s+\S+\s+([0-9a-f]+)\s", line)
        if m:
            sizes[m.group(1)] = int(m.group(2), 16)
    names = list(sizes)
    demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                               text=True).stdout.splitlines()
    for name, pretty in sorted(zip(names, demangled), key=lambda x: x[1]):
        if re.search(match, pretty):
            print(f"{pretty} :: {sizes[name]} bytes of SASS")


if __name__ == "__main__":
    main()
