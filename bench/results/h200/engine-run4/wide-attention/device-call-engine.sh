#!/usr/bin/env bash
# Session 2026-11-30, call 2: engine run 4 (wide decode attention) with the attention op bench.
cp .gpu-stage/commit.txt GIT_COMMIT
IB_DEADLINE_S=575 IB_OPS_BENCH=1 IB_OPS_SECTIONS=attention bash bench/gpu/run.sh
