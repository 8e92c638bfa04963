#!/usr/bin/env python3
"""ptxas -v of one CUDA source as the build compiles it: its command from the build's
compile_commands.json with -Xptxas=-v added (the object goes to a temporary file), printed one
line per kernel instantiation, demangled, with its registers, spills and shared memory.

Usage: python3 bench/gpu/ptxas_regs.py [--build build/sm90a] [--match REGEX] SOURCE
(SOURCE a path ending as in the build, e.g. src/backend/cuda/attention_decode_mma.cu)."""
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
    a = ap.parse_args()
    entries = json.load(open(f"{a.build}/compile_commands.json"))
    hits = [e for e in entries if e["file"].endswith(a.source)]
    if not hits:
        sys.exit(f"ptxas_regs: {a.source} is not in {a.build}/compile_commands.json")
    e = hits[0]
    args = shlex.split(e["command"])
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


if __name__ == "__main__":
    main()
