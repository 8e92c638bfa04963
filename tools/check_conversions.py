#!/usr/bin/env python3
"""Checks the CUDA kernels' integer-code conversions without I2F (src/backend/cuda/detail/
device_math.cuh) exhaustively against their definitions, in numpy on the CPU:

- int4_code_value: fma(float(0x43000000 | q << 16), s, -(128 + z) * s) == (q - z) * s in fp32,
  bit for bit, for every code q and zero point z in 0-15 and every finite f16 scale s (both
  signs). The fp32 FMA is modelled as the exact float64 sum rounded once to fp32.
- int8_byte_as_float: float(byte_perm(w ^ 0x80808080, 0x4B000000, 0x7540 | i)) - (2^23 + 128)
  == the signed byte i of w, for every byte value at every position.

Usage: python3 tools/check_conversions.py   (exit 0 when both hold; prints what it checked)
"""
import sys

import numpy as np


def check_int4() -> bool:
    bits = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16)
    s16 = bits.view(np.float16)
    s = s16[np.isfinite(s16)].astype(np.float32)
    s64 = s.astype(np.float64)
    for z in range(16):
        offset = np.float32(-(128 + z)) * s  # the kernel's fp32 product
        if not np.array_equal(offset.astype(np.float64), -(128.0 + z) * s64):
            print(f"int4: -(128 + z) * s is not exact in fp32 for z = {z}")
            return False
        for q in range(16):
            magic = np.array([0x43000000 | (q << 16)], dtype=np.uint32).view(np.float32)[0]
            fma = (np.float64(magic) * s64 + offset.astype(np.float64)).astype(np.float32)
            want = np.float32(q - z) * s
            if not np.array_equal(fma, want):
                print(f"int4: q = {q}, z = {z}: {np.count_nonzero(fma != want)} scales differ")
                return False
    print(f"int4_code_value: exact for 16 x 16 codes and zero points x {s.size} f16 scales")
    return True


def byte_perm(x: int, y: int, selector: int) -> int:
    src = x.to_bytes(4, "little") + y.to_bytes(4, "little")
    return int.from_bytes(bytes(src[(selector >> (4 * i)) & 7] for i in range(4)), "little")


def check_int8() -> bool:
    for value in range(-128, 128):
        for position in range(4):
            word = ((value & 0xFF) << (8 * position)) | (0x5A5A5A5A & ~(0xFF << (8 * position)))
            perm = byte_perm(word ^ 0x80808080, 0x4B000000, 0x7540 | position)
            got = np.array([perm], dtype=np.uint32).view(np.float32)[0] - np.float32(8388736.0)
            if got != value:
                print(f"int8: byte {value} at position {position} gives {got}")
                return False
    print("int8_byte_as_float: exact for 256 byte values at 4 positions")
    return True


if __name__ == "__main__":
    sys.exit(0 if check_int4() & check_int8() else 1)
