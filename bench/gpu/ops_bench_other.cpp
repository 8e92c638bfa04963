// GPU op benchmark sections beyond the GEMMs: paged attention (decode and prefill), the small
// per-layer ops, and sampling.
#include <cmath>
#include <cstdio>

#include "backend/cuda/detail/kernels.h"
#include "bench_kernels.h"
#include "ops_bench.h"

namespace ib::bench {
namespace {

constexpr int64_t kQkv = (kHeads + 2 * kKvHeads) * kHeadDim;
constexpr double kKvBytesPerToken = 2.0 * kKvHeads * kHeadDim * 2;  // K + V of one layer, bf16
}  // namespace

// batch sequences of `context` tokens whose last q_len are queries; `copies` disjoint sets of
// cache blocks (~512 MB in all) so replays do not hit L2. An E4M3 cache holds codes below 1 in
// magnitude (exponent field at most 6: never NaN).
Paged make_paged(BenchContext& ctx, int batch, int q_len, int context, DType cache_dtype) {
  const int per_seq = (context + kBlockSize - 1) / kBlockSize;
  const int64_t per_copy = int64_t{batch} * per_seq;
  const double block_bytes =
      2.0 * kKvHeads * kBlockSize * kHeadDim * static_cast<double>(dtype_size(cache_dtype));
  const int copies = static_cast<int>(
      std::clamp<double>(std::ceil(512e6 / (static_cast<double>(per_copy) * block_bytes)), 1, 32));
  const int64_t blocks = per_copy * copies;
  Paged p;
  if (cache_dtype == DType::kF8E4M3) {
    const auto e4m3 = [&] {
      Tensor t = ctx.allocate(DType::kF8E4M3, {blocks, kKvHeads, kBlockSize, kHeadDim});
      std::vector<uint8_t> codes(static_cast<size_t>(t.numel()));
      uint32_t x = 12345;
      for (auto& c : codes) {
        x = x * 1664525u + 1013904223u;
        c = static_cast<uint8_t>((x >> 24) & 0xB7);
      }
      ctx.backend.copy_from_host(t, codes.data(), DType::kF8E4M3);
      return t;
    };
    p.kv = {e4m3(), e4m3(), kBlockSize};
  } else {
    p.kv = {ctx.random(cache_dtype, {blocks, kKvHeads, kBlockSize, kHeadDim}),
            ctx.random(cache_dtype, {blocks, kKvHeads, kBlockSize, kHeadDim}), kBlockSize};
  }
  std::vector<int32_t> starts(static_cast<size_t>(batch + 1)), lens(static_cast<size_t>(batch));
  for (int i = 0; i <= batch; ++i) starts[static_cast<size_t>(i)] = i * q_len;
  for (auto& l : lens) l = context;
  const Tensor query_start = ctx.upload_i32({batch + 1}, starts);
  const Tensor context_lens = ctx.upload_i32({batch}, lens);
  for (int c = 0; c < copies; ++c) {
    std::vector<int32_t> table(static_cast<size_t>(per_copy));
    for (int64_t j = 0; j < per_copy; ++j)
      table[static_cast<size_t>(j)] = static_cast<int32_t>(c * per_copy + j);
    AttentionMetadata m;
    m.num_seqs = batch;
    m.num_tokens = batch * q_len;
    m.query_start = query_start;
    m.context_lens = context_lens;
    m.block_tables = ctx.upload_i32({batch, per_seq}, table);
    m.max_query_len = q_len;
    m.max_context_len = context;
    p.metas.push_back(m);
  }
  p.qkv = ctx.random(DType::kBF16, {int64_t{batch} * q_len, kQkv});
  p.out = ctx.random(DType::kBF16, {int64_t{batch} * q_len, kHeads * kHeadDim});
  return p;
}

double time_attention(BenchContext& ctx, Paged& p, cuda::AttentionPath path) {
  ctx.backend.set_attention_path(path);
  const auto n = static_cast<int>(p.metas.size());
  const double ms = ctx.timer.per_call_ms(
      [&](int i) {
        ctx.backend.attention(p.qkv, p.kv, p.metas[static_cast<size_t>(i % n)], kAttentionShape,
                              p.out);
      },
      std::max(2 * n, 8));
  ctx.backend.set_attention_path(cuda::AttentionPath::kAuto);
  return ms * 1e3;
}

namespace {

std::string bxc(int b, int c) {
  return std::to_string(b) + " seq x " + std::to_string(c);
}

std::vector<float> host_bf16(BenchContext& ctx, const Tensor& t) {
  std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
  ctx.backend.copy_to_host(t, bits.data());
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_bits_to_f32(bits[i]);
  return out;
}

// The shipped split-KV kernel's output for the first cache copy, on the host.
std::vector<float> split_kv_output(BenchContext& ctx, Paged& p) {
  Tensor ref = ctx.random(DType::kBF16, {p.out.dim(0), p.out.dim(1)});
  ctx.backend.set_attention_path(cuda::AttentionPath::kSplitKv);
  ctx.backend.attention(p.qkv, p.kv, p.metas[0], kAttentionShape, ref);
  ctx.backend.set_attention_path(cuda::AttentionPath::kAuto);
  return host_bf16(ctx, ref);
}

// p.out's relative L2 distance from want.
double out_rel_l2(BenchContext& ctx, Paged& p, const std::vector<float>& want) {
  const std::vector<float> got = host_bf16(ctx, p.out);
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double{got[i]} - double{want[i]};
    num += d * d;
    den += double{want[i]} * double{want[i]};
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The split-KV kernel configurations side by side, each checked against the shipped one.
void time_attention_variants(BenchContext& ctx, Paged& p, const std::string& shape, double tokens) {
  const AttentionMetadata& meta0 = p.metas[0];
  const int partition = cuda::split_kv_partition_size(
      meta0, kAttentionShape, cuda::CudaBackend::kAttentionWorkspaceBytes, ctx.backend.num_sms());
  const std::vector<float> want = split_kv_output(ctx, p);
  Tensor workspace = ctx.random(DType::kF32, {int64_t{16} << 20});  // 64 MiB
  const auto n = static_cast<int>(p.metas.size());
  for (int v = 0; v < attention_variant_count(); ++v) {
    const auto run = [&](int i) {
      launch_attention_variant(v, p.qkv, p.kv, p.metas[static_cast<size_t>(i % n)], kAttentionShape,
                               partition, workspace.data, workspace.bytes(), p.out,
                               ctx.backend.stream());
    };
    const double us = ctx.timer.per_call_ms(run, std::max(2 * n, 8)) * 1e3;
    run(0);
    const double rel = out_rel_l2(ctx, p, want);
    ctx.report.add({"variant", "attention", shape, attention_variant_name(v), us,
                    tokens * kKvBytesPerToken, 4.0 * tokens * kHeads * kHeadDim});
    std::printf("  %s vs shipped kernel: rel L2 %.2e\n", attention_variant_name(v), rel);
    ctx.report.extra()["attention_variant_rel_l2"][shape][attention_variant_name(v)] = rel;
  }
}

// The tensor-core decode kernel (IB_ATTN_MMA; attention_decode_mma.cu) alone, launched directly
// so that no switch decides, and checked against the split-KV kernel's output.
void time_attention_mma(BenchContext& ctx, Paged& p, const std::string& shape, double tokens) {
  const AttentionMetadata& meta0 = p.metas[0];
  if (!cuda::decode_mma_supports(p.qkv.dtype, p.kv, kAttentionShape) || meta0.max_query_len != 1)
    return;
  const std::vector<float> want = split_kv_output(ctx, p);
  const auto n = static_cast<int>(p.metas.size());
  const auto run = [&](int i) {
    cuda::launch_attention_decode_mma(p.qkv, p.kv, p.metas[static_cast<size_t>(i % n)],
                                      kAttentionShape, p.out, ctx.backend.stream());
  };
  const double us = ctx.timer.per_call_ms(run, std::max(2 * n, 8)) * 1e3;
  run(0);
  const double rel = out_rel_l2(ctx, p, want);
  ctx.report.add({"decode", "attention", shape, "decode_mma", us, tokens * kKvBytesPerToken,
                  4.0 * tokens * kHeads * kHeadDim});
  std::printf("  %s decode_mma %.1f us, vs split_kv: rel L2 %.2e\n", shape.c_str(), us, rel);
  ctx.report.extra()["attention_mma_rel_l2"][shape] = rel;
}

}  // namespace

void bench_attention(BenchContext& ctx) {
  struct Decode {
    int batch, context;
  };
  for (const Decode d :
       {Decode{1, 160}, Decode{1, 2048}, Decode{1, 8192}, Decode{1, 32768}, Decode{8, 160},
        Decode{8, 2048}, Decode{64, 1024}, Decode{256, 256}, Decode{1024, 256}}) {
    Paged p = make_paged(ctx, d.batch, 1, d.context, DType::kBF16);
    const double us = time_attention(ctx, p, cuda::AttentionPath::kSplitKv);
    const double tokens = double{1} * d.batch * d.context;
    const double bytes = tokens * kKvBytesPerToken;
    const double flops = 4.0 * tokens * kHeads * kHeadDim;
    ctx.report.add({"decode", "attention", bxc(d.batch, d.context), "split_kv", us, bytes, flops});
    // As a captured decode graph runs it: the grid sized for 8,192-token contexts.
    for (auto& m : p.metas) m.max_context_len = std::max(d.context, 8192);
    ctx.report.add({"decode", "attention", bxc(d.batch, d.context), "split_kv_graph_hint",
                    time_attention(ctx, p, cuda::AttentionPath::kSplitKv), bytes, flops});
    for (auto& m : p.metas) m.max_context_len = d.context;
    time_attention_variants(ctx, p, bxc(d.batch, d.context), tokens);
    time_attention_mma(ctx, p, bxc(d.batch, d.context), tokens);
    if (d.context == 160) ctx.times[d.batch]["attention_ctx160"] = us;
    ctx.release();
  }
  struct Prefill {
    int batch, len;
    const char* key;
  };
  for (const Prefill pf :
       {Prefill{8, 512, "attention_prefill_8x512"}, Prefill{1, 2048, "attention_prefill_1x2048"},
        Prefill{1, 8192, nullptr}}) {
    Paged p = make_paged(ctx, pf.batch, pf.len, pf.len, DType::kBF16);
    const double pairs = double{1} * pf.batch * pf.len * (pf.len + 1) / 2.0;
    const double flops = 4.0 * pairs * kHeads * kHeadDim;
    const double bytes =
        double{1} * pf.batch * pf.len * (kKvBytesPerToken + 2.0 * 2 * kHeads * kHeadDim);
    const double flash_us = time_attention(ctx, p, cuda::AttentionPath::kFlash);
    ctx.report.add(
        {"prefill", "attention", bxc(pf.batch, pf.len), "flash", flash_us, bytes, flops});
    if (pf.len <= 2048) {
      const double split_us = time_attention(ctx, p, cuda::AttentionPath::kSplitKv);
      ctx.report.add(
          {"prefill", "attention", bxc(pf.batch, pf.len), "split_kv", split_us, bytes, flops});
    }
    if (pf.key) ctx.times[int64_t{pf.batch} * pf.len][pf.key] = flash_us;
    ctx.release();
  }
}

void bench_small_ops(BenchContext& ctx) {
  for (const int64_t t : {int64_t{1}, int64_t{8}, int64_t{2048}, int64_t{4096}}) {
    const std::string shape = std::to_string(t) + " tokens";
    const char* group = t <= 8 ? "decode" : "prefill";
    Tensor res = ctx.random(DType::kBF16, {t, kHidden});
    Tensor x = ctx.random(DType::kBF16, {t, kHidden});
    Tensor w = ctx.random(DType::kBF16, {kHidden});
    Tensor out = ctx.random(DType::kBF16, {t, kHidden});
    const double act = static_cast<double>(t * kHidden * 2);
    double us =
        ctx.timer.per_call_ms([&](int) { ctx.backend.add_rms_norm(res, x, w, 1e-5f, out); }, 20) *
        1e3;
    ctx.report.add({group, "add_rms_norm", shape, "fused", us, 4 * act, 0});
    ctx.times[t]["add_rms_norm"] = us;
    us = ctx.timer.per_call_ms([&](int) { ctx.backend.rms_norm(x, w, 1e-5f, out); }, 20) * 1e3;
    ctx.report.add({group, "rms_norm", shape, "", us, 2 * act, 0});
    ctx.times[t]["rms_norm"] = us;

    Tensor gu = ctx.random(DType::kBF16, {t, 2 * kFfn});
    Tensor h = ctx.random(DType::kBF16, {t, kFfn});
    us = ctx.timer.per_call_ms([&](int) { ctx.backend.silu_mul(gu, h); }, 20) * 1e3;
    ctx.report.add({group, "silu_mul", shape, "", us, static_cast<double>(t * kFfn * 2 * 3), 0});
    ctx.times[t]["silu_mul"] = us;

    Tensor qkv = ctx.random(DType::kBF16, {t, kQkv});
    std::vector<int32_t> pos(static_cast<size_t>(t));
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
    Tensor positions = ctx.upload_i32({t}, pos);
    const int64_t blocks = (t + kBlockSize - 1) / kBlockSize;
    KvCacheLayer kv{ctx.random(DType::kBF16, {blocks, kKvHeads, kBlockSize, kHeadDim}),
                    ctx.random(DType::kBF16, {blocks, kKvHeads, kBlockSize, kHeadDim}), kBlockSize};
    Tensor inv_freq = ctx.random(DType::kF32, {kHeadDim / 2});
    us = ctx.timer.per_call_ms(
             [&](int) {
               ctx.backend.rope_and_cache(qkv, positions, positions, inv_freq, kv, kAttentionShape);
             },
             20) *
         1e3;
    ctx.report.add({group, "rope_and_cache", shape, "fused", us,
                    static_cast<double>(t * (kQkv * 2 + 2 * kKvHeads * kHeadDim) * 2), 0});
    ctx.times[t]["rope"] = us;

    Tensor table = ctx.random(DType::kBF16, {kVocab, kHidden});
    us =
        ctx.timer.per_call_ms([&](int) { ctx.backend.embedding(positions, table, out); }, 20) * 1e3;
    ctx.report.add({group, "embedding", shape, "", us, 2 * act, 0});
    ctx.release();
  }
}

void bench_sampling(BenchContext& ctx) {
  for (const int rows : {1, 8, 256}) {
    Tensor logits = ctx.random(DType::kF32, {rows, kVocab}, 8.0f);
    Tensor out = ctx.zeros_i32({rows});
    std::vector<float> temps(static_cast<size_t>(rows), 0.8f),
        top_p(static_cast<size_t>(rows), 0.9f);
    std::vector<int32_t> top_k(static_cast<size_t>(rows), 50), steps(static_cast<size_t>(rows), 3);
    std::vector<int64_t> seeds(static_cast<size_t>(rows), 7);
    SamplingMetadata m;
    m.num_rows = rows;
    m.temperature = ctx.random(DType::kF32, {rows});
    ctx.backend.copy_from_host(m.temperature, temps.data(), DType::kF32);
    m.top_p = ctx.random(DType::kF32, {rows});
    ctx.backend.copy_from_host(m.top_p, top_p.data(), DType::kF32);
    m.top_k = ctx.upload_i32({rows}, top_k);
    m.step = ctx.upload_i32({rows}, steps);
    m.seed = ctx.random(DType::kF32, {2 * rows});  // 8 bytes per row
    m.seed = Tensor(m.seed.data, DType::kI64, {rows});
    ctx.backend.copy_from_host(m.seed, seeds.data(), DType::kI64);
    const double bytes = static_cast<double>(rows) * kVocab * 4;
    for (const bool greedy : {true, false}) {
      m.all_greedy = greedy;
      const double us =
          ctx.timer.per_call_ms([&](int) { ctx.backend.sample(logits, m, out); }, 10) * 1e3;
      ctx.report.add({rows <= 8 ? "decode" : "batch", "sample", std::to_string(rows) + " rows",
                      greedy ? "greedy" : "T0.8,k50,p0.9", us, bytes, 0});
      if (greedy) ctx.times[rows]["sample"] = us;
    }
    ctx.release();
  }
}

}  // namespace ib::bench
