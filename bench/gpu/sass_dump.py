#!/usr/bin/env python3
"""The SASS of the kernels of a CUDA object whose demangled names match a regex (cuobjdump -sass,
names demangled by c++filt), each after a '// kernel NAME' line, with a summary line of its
instruction count and its local-memory (spill) instructions.

Usage: sass_dump.py OBJECT REGEX > out.txt
"""
import re
import subprocess
import sys


def main():
    obj, pattern = sys.argv[1], re.compile(sys.argv[2])
    text = subprocess.run(["cuobjdump", "-sass", obj], capture_output=True, text=True,
                          check=True).stdout
    # Each function's listing starts with a "Function : <mangled>" line.
    parts = re.split(r"^\s*Function : (\S+)\s*$", text, flags=re.M)
    names = parts[1::2]
    bodies = parts[2::2]
    demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                               text=True, check=True).stdout.splitlines()
    for name, body in zip(demangled, bodies):
        if not pattern.search(name):
            continue
        insts = [l for l in body.splitlines() if re.match(r"\s*/\*[0-9a-f]{4,}\*/", l)]
        local = sum(1 for l in insts if re.search(r"\b(LDL|STL)\b", l))
        print(f"// kernel {name}")
        print(f"// {len(insts)} instructions, {local} LDL/STL")
        print(body)


if __name__ == "__main__":
    main()
