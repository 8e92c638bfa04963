#!/usr/bin/env bash
# The LoRA kernels under programmatic dependent launch (issue 16; IB_LORA_PDL, default 1, where
# IB_PDL is on): bench/gpu/lora_ab.sh's A/B with IB_AB=IB_LORA_PDL (its gpu tests, the seed
# protocol's base, one adapter and 16 adapters with the switch at 0 and 1, a timeline).
# Usage (~6 minutes of the machine; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/lora_pdl.sh
IB_AB=IB_LORA_PDL IB_AB_VALUES="0 1" exec bash "$(dirname "$0")/lora_ab.sh"
