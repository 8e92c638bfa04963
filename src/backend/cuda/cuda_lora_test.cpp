// Differential tests of the CUDA LoRA op against the CPU op (backend/ops.h, LoraOps): mixed slots
// of a batch including -1 (the base model), ranks 8, 12 (the scalar expand on bf16 and fp16) and
// 64, K of 100 (the scalar shrink on bf16 and fp16) to 512, single targets at a row offset and
// groups of two and three, 1 to 300 tokens (the one-token and the tiled shrink), fp32, bf16 and
// fp16, eagerly and replayed from a CUDA graph, in two launches and in one (IB_LORA_FUSED).
// Stated tolerance: the update each token receives
// (out after minus out before) within the dtype's relative L2 of detail/test_support.h (fp32
// 2e-5, bf16 1e-2, fp16 3e-3); the rows of base tokens and the columns outside the targets
// exactly as they were.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::random_floats;
using testing::replay_in_graph;
using testing::tolerance;
using testing::Twin;

struct Target {
  int64_t n, row_offset;
};

struct LoraCase {
  int64_t tokens, slots, rank, k, width;  // width: out's row size
  std::vector<Target> targets;            // one lora_apply_group (one target: lora_apply)
};

std::string describe(const LoraCase& c) {
  std::ostringstream s;
  s << "T=" << c.tokens << " S=" << c.slots << " R=" << c.rank << " K=" << c.k << " targets";
  for (const Target& t : c.targets) s << " " << t.n << "@" << t.row_offset;
  return s.str();
}

// Random stacks, scales, slot ids (every slot and -1 present where the batch is large enough)
// and a random starting output; the CPU op once, the GPU op eagerly and from a graph.
void expect_lora_matches(Twin& twin, const LoraCase& c, uint64_t seed) {
  const int64_t t = c.tokens, s = c.slots, r = c.rank, k = c.k, w = c.width;
  Rng rng(seed);
  const auto ak = static_cast<float>(1.7 / std::sqrt(static_cast<double>(k)));
  const auto br = static_cast<float>(1.7 / std::sqrt(static_cast<double>(r)));
  Pair x = twin.floats({t, k}, random_floats(rng, t * k));
  std::vector<Pair> as, bs;
  for (const Target& g : c.targets) {
    as.push_back(twin.floats({s, r, k}, random_floats(rng, s * r * k, -ak, ak)));
    bs.push_back(twin.floats({s, g.n, r}, random_floats(rng, s * g.n * r, -br, br)));
  }
  Pair scales = twin.floats({s}, random_floats(rng, s, 0.5f, 2.0f), DType::kF32);
  std::vector<int32_t> ids(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) {
    // Tokens 0 .. S-1: every slot once (token 0 of a one-token batch uses an adapter); token S:
    // the base model; the rest at random.
    ids[static_cast<size_t>(i)] = i < s    ? static_cast<int32_t>(i)
                                  : i == s ? -1
                                           : static_cast<int32_t>(rng.uniform_int(-1, s - 1));
  }
  Pair slot_ids = twin.ints<int32_t>({t}, ids);
  const std::vector<float> out0 = twin.representable(random_floats(rng, t * w, -0.1f, 0.1f));
  Pair out = twin.floats({t, w}, out0);

  auto stacks = [&](bool gpu) {
    std::vector<LoraTargetStacks> v;
    for (size_t i = 0; i < c.targets.size(); ++i) {
      v.push_back(
          {gpu ? as[i].gpu : as[i].cpu, gpu ? bs[i].gpu : bs[i].cpu, c.targets[i].row_offset});
    }
    return v;
  };
  const std::vector<LoraTargetStacks> cpu_stacks = stacks(false), gpu_stacks = stacks(true);
  twin.cpu().lora_ops()->lora_apply_group(x.cpu, slot_ids.cpu, cpu_stacks, scales.cpu, out.cpu);
  const std::vector<float> want = twin.cpu_floats(out.cpu);
  auto run_gpu = [&] {
    if (c.targets.size() == 1) {
      twin.gpu().lora_apply(x.gpu, slot_ids.gpu, as[0].gpu, bs[0].gpu, scales.gpu,
                            c.targets[0].row_offset, out.gpu);
    } else {
      twin.gpu().lora_apply_group(x.gpu, slot_ids.gpu, gpu_stacks, scales.gpu, out.gpu);
    }
  };
  std::vector<bool> in_target(static_cast<size_t>(w), false);
  for (const Target& g : c.targets) {
    for (int64_t j = 0; j < g.n; ++j) in_target[static_cast<size_t>(g.row_offset + j)] = true;
  }

  for (const int mode : {0, 1, 2, 3}) {  // eager, graph; two launches, one (fused)
    const bool graph = (mode & 1) != 0, fused = (mode & 2) != 0;
    const std::string where =
        describe(c) + (graph ? " (graph" : " (eager") + (fused ? ", fused)" : ")");
    twin.gpu().set_lora_fused(fused);
    twin.gpu().copy_from_host(out.gpu, out0.data(), DType::kF32);
    if (graph) {
      replay_in_graph(twin, run_gpu);
      if (::testing::Test::HasFatalFailure()) return;
    } else {
      run_gpu();
    }
    ASSERT_TRUE(twin.gpu().device_status().ok()) << twin.gpu().device_status().error().message;
    const std::vector<float> got = twin.gpu_floats(out.gpu);
    std::vector<float> got_delta, want_delta;
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < w; ++j) {
        const auto e = static_cast<size_t>(i * w + j);
        if (ids[static_cast<size_t>(i)] < 0 || !in_target[static_cast<size_t>(j)]) {
          ASSERT_EQ(got[e], out0[e]) << where << ": token " << i << " column " << j
                                     << " (base token or outside the targets) changed";
          continue;
        }
        got_delta.push_back(got[e] - out0[e]);
        want_delta.push_back(want[e] - out0[e]);
      }
    }
    ASSERT_FALSE(want_delta.empty()) << where;
    const double err = testing::rel_l2(got_delta, want_delta);
    EXPECT_LT(err, tolerance(twin.dtype())) << where;
    ::testing::Test::RecordProperty("max_rel_l2_update", std::to_string(err));
  }
  twin.gpu().set_lora_fused(false);
}

void expect_base_rows_untouched(Twin& twin) {
  Rng rng(5);
  const int64_t t = 9, s = 2, r = 8, k = 64, n = 48;
  Pair x = twin.floats({t, k}, random_floats(rng, t * k));
  Pair a = twin.floats({s, r, k}, random_floats(rng, s * r * k));
  Pair b = twin.floats({s, n, r}, random_floats(rng, s * n * r));
  Pair scales = twin.floats({s}, {1.0f, 2.0f}, DType::kF32);
  Pair ids = twin.ints<int32_t>({t}, std::vector<int32_t>(static_cast<size_t>(t), -1));
  const std::vector<float> out0 = twin.representable(random_floats(rng, t * n));
  Pair out = twin.floats({t, n}, out0);
  const auto apply = [&] {
    twin.gpu().lora_apply(x.gpu, ids.gpu, a.gpu, b.gpu, scales.gpu, 0, out.gpu);
  };
  apply();
  EXPECT_EQ(twin.gpu_floats(out.gpu), out0);
  replay_in_graph(twin, apply);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_TRUE(twin.gpu().device_status().ok());
  EXPECT_EQ(twin.gpu_floats(out.gpu), out0);
}

class CudaLora : public ::testing::TestWithParam<DType> {};

TEST_P(CudaLora, SingleTargetsMatchTheCpuOp) {
  IB_REQUIRE_CUDA();
  Twin twin(GetParam());
  uint64_t seed = 31;
  for (const LoraCase& c : {
           LoraCase{1, 1, 8, 128, 96, {{96, 0}}},       // decode, one adapter
           LoraCase{7, 3, 8, 100, 64, {{40, 24}}},      // scalar shrink (bf16, fp16)
           LoraCase{16, 4, 12, 256, 80, {{48, 8}}},     // scalar expand (bf16, fp16)
           LoraCase{40, 5, 64, 512, 200, {{128, 72}}},  // tiled shrink, rank 64
           LoraCase{300, 2, 16, 128, 256, {{256, 0}}},  // prefill-sized
           LoraCase{33, 16, 8, 64, 32, {{32, 0}}},      // 16 adapters in one batch
       }) {
    expect_lora_matches(twin, c, seed++);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST_P(CudaLora, GroupsMatchTheCpuOp) {
  IB_REQUIRE_CUDA();
  Twin twin(GetParam());
  uint64_t seed = 71;
  for (const LoraCase& c : {
           // q, k, v into qkv (GQA: k and v narrower)
           LoraCase{8, 3, 16, 256, 192, {{128, 0}, {32, 128}, {32, 160}}},
           LoraCase{1, 2, 64, 128, 96, {{64, 0}, {16, 64}, {16, 80}}},
           // gate and up into gate_up
           LoraCase{64, 4, 8, 128, 320, {{160, 0}, {160, 160}}},
           LoraCase{300, 3, 16, 100, 96, {{48, 0}, {48, 48}}},
           // out of order, with a gap: the group's targets need not be adjacent
           LoraCase{5, 2, 8, 64, 100, {{20, 70}, {30, 10}}},
       }) {
    expect_lora_matches(twin, c, seed++);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// A batch of base tokens only (slot -1 everywhere), eagerly and in a graph, in one launch and
// in two: nothing changes.
TEST_P(CudaLora, BaseTokensOnlyLeaveTheOutputAlone) {
  IB_REQUIRE_CUDA();
  Twin twin(GetParam());
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "two launches");
    twin.gpu().set_lora_fused(fused);
    expect_base_rows_untouched(twin);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaLora,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         testing::dtype_param_name);

}  // namespace
}  // namespace ib::cuda
