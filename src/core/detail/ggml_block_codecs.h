// One ggml block's codec per type (private to core/): ggml_blocks.cpp (F32, F16, BF16, Q8_0,
// Q4_0) and ggml_kquants.cpp (Q4_K, Q5_K, Q6_K). Layouts: core/ggml_blocks.h.
#pragma once

#include <cstdint>

namespace ib::detail {

// Decodes one block into block_elems floats; encodes block_elems finite floats (|x| <= 65504).
using DequantizeBlockFn = void (*)(const uint8_t* block, float* out);
using QuantizeBlockFn = void (*)(const float* x, uint8_t* block);

void dequantize_q4_k(const uint8_t* block, float* out);
void quantize_q4_k(const float* x, uint8_t* block);
void dequantize_q5_k(const uint8_t* block, float* out);
void quantize_q5_k(const float* x, uint8_t* block);
void dequantize_q6_k(const uint8_t* block, float* out);
void quantize_q6_k(const float* x, uint8_t* block);

// The smallest f16 not below v (0 <= v <= 65504), as bits: a scale rounded up so no element clips.
uint16_t f16_at_least(float v);
float load_f16(const uint8_t* p);
void store_f16(uint8_t* p, uint16_t bits);

}  // namespace ib::detail
