// fp32 matmul out = x @ w^T: register tiles of 2 x-rows by 4 w-rows (8 SSE accumulators), each dot
// product accumulated exactly as dot_f32 does (4 lanes over k), so tiling never changes a result.
#include <algorithm>

#include "backend/cpu/detail/dot.h"
#include "backend/cpu/detail/kernels.h"

namespace ib::cpu {
namespace {

constexpr int64_t kTileRows = 2;  // x rows per register tile
constexpr int64_t kTileCols = 4;  // w rows per register tile
// w rows per cache block: about 256 KiB of w stays in L2 while every x row passes over it.
constexpr int64_t kBlockBytes = 256 * 1024;
// x rows per panel: about 128 KiB of x.
constexpr int64_t kPanelBytes = 128 * 1024;

// out[r][c] for r < kTileRows, c < kTileCols: x rows x0, x1 against w rows w + c * k.
// kPrefetch: also prefetch the next 4 rows of w, one cache line per row per 16 floats, for the
// first pass over a group of w rows (the one that streams it from memory).
template <bool kPrefetch>
void tile_2x4(const float* x0, const float* x1, const float* w, int64_t k, float out[2][4]) {
  F4 s[2][4] = {};
  const int64_t k4 = k / 4 * 4;
  for (int64_t i = 0; i < k4; i += 4) {
    if (kPrefetch && i % 16 == 0) {
      for (int c = 4; c < 8; ++c) __builtin_prefetch(w + c * k + i);
    }
    const F4 a0 = load_f4(x0 + i);
    const F4 a1 = load_f4(x1 + i);
    for (int c = 0; c < 4; ++c) {
      const F4 b = load_f4(w + c * k + i);
      s[0][c] += a0 * b;
      s[1][c] += a1 * b;
    }
  }
  for (int r = 0; r < 2; ++r) {
    const float* a = r == 0 ? x0 : x1;
    for (int c = 0; c < 4; ++c) {
      float v = reduce_f4(s[r][c]);
      const float* b = w + c * k;
      for (int64_t j = k4; j < k; ++j) v += a[j] * b[j];
      out[r][c] = v;
    }
  }
}

// One x row against 4 w rows (the odd last row of x).
template <bool kPrefetch>
void tile_1x4(const float* x0, const float* w, int64_t k, float out[4]) {
  F4 s[4] = {};
  const int64_t k4 = k / 4 * 4;
  for (int64_t i = 0; i < k4; i += 4) {
    if (kPrefetch && i % 16 == 0) {
      for (int c = 4; c < 8; ++c) __builtin_prefetch(w + c * k + i);
    }
    const F4 a0 = load_f4(x0 + i);
    for (int c = 0; c < 4; ++c) s[c] += a0 * load_f4(w + c * k + i);
  }
  for (int c = 0; c < 4; ++c) {
    float v = reduce_f4(s[c]);
    const float* b = w + c * k;
    for (int64_t j = k4; j < k; ++j) v += x0[j] * b[j];
    out[c] = v;
  }
}

// out[:, n_begin:n_end] for all m rows of x. Rows go in panels of about kPanelBytes of x (L2);
// within a panel each group of 4 w rows (L1) meets every pair of x rows before the next group, so
// at decode sizes (the whole x in one panel) w is streamed from memory exactly once.
void matmul_cols(const float* x, const float* w, const float* bias, float* out, int64_t m,
                 int64_t n, int64_t k, int64_t n_begin, int64_t n_end) {
  const int64_t n_tiled = n_begin + (n_end - n_begin) / kTileCols * kTileCols;
  const int64_t row_bytes = std::max<int64_t>(1, k * static_cast<int64_t>(sizeof(float)));
  const int64_t panel_rows =
      std::max<int64_t>(kTileRows, kPanelBytes / row_bytes / kTileRows * kTileRows);
  auto store = [&](int64_t i, int64_t j, float v) { out[i * n + j] = v + (bias ? bias[j] : 0.0f); };
  for (int64_t p = 0; p < m; p += panel_rows) {
    const int64_t p_end = std::min(m, p + panel_rows);
    for (int64_t j = n_begin; j < n_tiled; j += kTileCols) {
      int64_t i = p;
      for (; i + kTileRows <= p_end; i += kTileRows) {
        float t[2][4];
        if (i == p) {
          tile_2x4<true>(x + i * k, x + (i + 1) * k, w + j * k, k, t);
        } else {
          tile_2x4<false>(x + i * k, x + (i + 1) * k, w + j * k, k, t);
        }
        for (int64_t c = 0; c < kTileCols; ++c) {
          store(i, j + c, t[0][c]);
          store(i + 1, j + c, t[1][c]);
        }
      }
      if (i < p_end) {
        float t[4];
        if (i == p) {
          tile_1x4<true>(x + i * k, w + j * k, k, t);
        } else {
          tile_1x4<false>(x + i * k, w + j * k, k, t);
        }
        for (int64_t c = 0; c < kTileCols; ++c) store(i, j + c, t[c]);
      }
    }
  }
  for (int64_t j = n_tiled; j < n_end; ++j) {
    for (int64_t r = 0; r < m; ++r) store(r, j, dot_f32(x + r * k, w + j * k, k));
  }
}

}  // namespace

void matmul_f32(ThreadPool& pool, const float* x, const float* w, const float* bias, float* out,
                int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0) return;
  // Columns (w rows) per cache block, a multiple of the tile width.
  const int64_t row_bytes = std::max<int64_t>(1, k * static_cast<int64_t>(sizeof(float)));
  int64_t block_cols =
      std::max<int64_t>(kTileCols, kBlockBytes / row_bytes / kTileCols * kTileCols);
  // Small batches are bandwidth-bound: split n finely so every thread streams its share of w.
  const int64_t per_thread = (n + pool.size() - 1) / pool.size();
  block_cols = std::min(block_cols, std::max<int64_t>(kTileCols, (per_thread + 3) / 4 * 4));
  const int64_t num_blocks = (n + block_cols - 1) / block_cols;
  pool.parallel_for(num_blocks, 1, [&](int64_t b_begin, int64_t b_end) {
    for (int64_t b = b_begin; b < b_end; ++b) {
      const int64_t n_begin = b * block_cols;
      const int64_t n_end = std::min(n, n_begin + block_cols);
      matmul_cols(x, w, bias, out, m, n, k, n_begin, n_end);
    }
  });
}

}  // namespace ib::cpu
