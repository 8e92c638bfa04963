// Published quantized checkpoints (config.json quantization_config: quant_method "fp8", or
// compressed-tensors FP8 or INT8): the F8_E4M3 / I8 weights load byte for byte with their
// weight_scale repeated on each row (per tensor) or per row (per channel), q/k/v and gate/up fused
// without requantization; run without the matching --quantization, with a malformed scale or a
// missing one, the load is refused naming the fix. The checkpoint is written here from the
// format's definition (FP8: scale = max |w| / 448, codes = e4m3(w / scale); INT8: scale =
// max |w| / 127, codes = rne(w / scale)), independently of the engine's quantizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/detail/checkpoint_test_support.h"
#include "engine/detail/engine_test_support.h"
#include "engine/detail/quantized_checkpoint_support.h"
#include "engine/engine_config.h"
#include "engine/model_weights.h"
#include "model/safetensors.h"

namespace ib {
namespace {

using testing::CodesTensor;
using testing::quantized_checkpoint;

constexpr WeightFormat kFp8 = WeightFormat::kFp8E4M3;

struct Fixture {
  ModelConfig c;
  testing::HostWeights hw;
  std::vector<SafetensorsWriteTensor> dense;
};

Fixture make_fixture(CpuBackend& backend) {
  Fixture f;
  f.c = testing::tiny_config();
  f.c.attention_bias = true;  // q/k/v biases stay bf16 beside the FP8 weights
  ModelWeights random = testing::random_weights(f.c, backend, 13);
  f.hw = testing::copy_weights_to_host(f.c, random, backend);
  f.dense = testing::hf_tensors(f.c, f.hw, DType::kBF16);
  return f;
}

std::vector<uint8_t> bytes_of(Backend& b, const Tensor& t) {
  std::vector<uint8_t> v(t.bytes());
  b.copy_to_host(t, v.data());
  return v;
}

TEST(QuantizedCheckpoint, LoadsTheCodesAsWrittenWithTheirScalesPerRow) {
  struct Case {
    const char* quant_method;
    const char* format;
    bool per_channel;
  };
  for (const Case& k :
       {Case{"fp8", "fp8", false}, Case{"compressed-tensors", "fp8", true},
        Case{"compressed-tensors", "int8-w8a8", true}, Case{"compressed-tensors", "int8", false}}) {
    const bool per_channel = k.per_channel;
    SCOPED_TRACE(std::string(k.format) + (per_channel ? ", per channel" : ", per tensor"));
    CpuBackend backend(2);
    Fixture f = make_fixture(backend);
    f.c.quantization.quant_method = k.quant_method;
    f.c.quantization.format = k.format;
    f.c.quantization.per_channel_scales = per_channel;
    const bool int8 = std::string(k.format) != "fp8";
    const WeightFormat wf = *quantization_weight_format(k.format);
    std::vector<CodesTensor> written;  // in hf_tensors' order: q, k, v, gate, up, o, down
    testing::TempDir dir;
    ASSERT_TRUE(write_safetensors((dir.path() / "model.safetensors").string(),
                                  quantized_checkpoint(f.dense, per_channel, &written, int8))
                    .ok());
    auto w = load_weights(f.c, {LoadFormat::kSafetensors, dir.path().string(), 0, wf}, backend);
    ASSERT_TRUE(w.ok()) << w.error().message;
    ASSERT_EQ(written.size(), 7 * w->layers.size());
    for (size_t l = 0; l < w->layers.size(); ++l) {
      const LayerWeights& lw = w->layers[l];
      const CodesTensor* t = &written[7 * l];  // q, k, v, gate, up, o, down
      const auto expect = [&](const WeightRef& ref, std::initializer_list<const CodesTensor*> parts,
                              const char* what) {
        ASSERT_EQ(ref.format, wf) << what;
        std::string codes;
        std::vector<float> scales;
        for (const CodesTensor* p : parts) {
          codes += p->codes;
          const int64_t rows = static_cast<int64_t>(p->codes.size()) / ref.data.dim(1);
          for (int64_t r = 0; r < rows; ++r)
            scales.push_back(p->scales[per_channel ? static_cast<size_t>(r) : 0]);
        }
        const std::vector<uint8_t> got = bytes_of(backend, ref.data);
        EXPECT_EQ(std::string(got.begin(), got.end()), codes) << what << ", layer " << l;
        std::vector<float> got_scales(static_cast<size_t>(ref.scales.numel()));
        backend.copy_to_host(ref.scales, got_scales.data());
        EXPECT_EQ(got_scales, scales) << what << ", layer " << l;
      };
      expect(lw.wqkv, {&t[0], &t[1], &t[2]}, "qkv");
      expect(lw.w_gate_up, {&t[3], &t[4]}, "gate_up");
      expect(lw.wo, {&t[5]}, "o");
      expect(lw.w_down, {&t[6]}, "down");
      EXPECT_EQ(lw.bqkv.dtype, DType::kF32);  // the biases stay dense
    }
  }
}

TEST(QuantizedCheckpoint, IsRefusedWithoutTheFlagOrWithBadScalesNamingTheFix) {
  CpuBackend backend(2);
  Fixture f = make_fixture(backend);
  f.c.quantization.quant_method = "fp8";
  f.c.quantization.format = "fp8";
  const auto load_error = [&](std::vector<SafetensorsWriteTensor> tensors, WeightFormat q) {
    testing::TempDir dir;
    EXPECT_TRUE(write_safetensors((dir.path() / "model.safetensors").string(), tensors).ok());
    auto w = load_weights(f.c, {LoadFormat::kSafetensors, dir.path().string(), 0, q}, backend);
    EXPECT_FALSE(w.ok());
    return w.ok() ? std::string() : w.error().message;
  };
  const auto good = quantized_checkpoint(f.dense, false, nullptr);
  EXPECT_NE(load_error(good, WeightFormat::kDense).find("run it with --quantization fp8"),
            std::string::npos);
  EXPECT_NE(load_error(good, WeightFormat::kInt8W8A8).find("run it with --quantization fp8"),
            std::string::npos);

  auto bad_shape = good;
  for (auto& t : bad_shape)
    if (t.name == "model.layers.0.mlp.down_proj.weight_scale") {
      t.shape = {2};
      t.bytes.resize(8);
    }
  const std::string shape_err = load_error(bad_shape, kFp8);
  EXPECT_NE(shape_err.find("model.layers.0.mlp.down_proj.weight_scale"), std::string::npos)
      << shape_err;
  EXPECT_NE(shape_err.find("one per row"), std::string::npos) << shape_err;

  auto missing = good;
  std::erase_if(missing, [](const SafetensorsWriteTensor& t) {
    return t.name == "model.layers.1.self_attn.o_proj.weight_scale";
  });
  const std::string missing_err = load_error(missing, kFp8);
  EXPECT_NE(missing_err.find("'model.layers.1.self_attn.o_proj.weight_scale' is missing"),
            std::string::npos)
      << missing_err;

  // A dense checkpoint that config.json calls FP8: the weights are not F8_E4M3.
  EXPECT_NE(load_error(f.dense, kFp8).find("weight_scale"), std::string::npos);

  // An INT8 checkpoint: run with its own flag only; FP8 codes where it says int8 are refused.
  f.c.quantization.quant_method = "compressed-tensors";
  f.c.quantization.format = "int8-w8a8";
  const auto int8 = quantized_checkpoint(f.dense, false, nullptr, true);
  const std::string wrong_flag = load_error(int8, kFp8);
  EXPECT_NE(wrong_flag.find("an INT8 (int8-w8a8) checkpoint"), std::string::npos) << wrong_flag;
  EXPECT_NE(wrong_flag.find("run it with --quantization int8-w8a8"), std::string::npos);
  const std::string wrong_codes = load_error(good, WeightFormat::kInt8W8A8);
  EXPECT_NE(wrong_codes.find("fp8_e4m3 but config.json's quantization_config"), std::string::npos)
      << wrong_codes;
}

// A scalar f32 tensor, as vLLM's FP8 checkpoints store self_attn.k_scale / v_scale.
SafetensorsWriteTensor scalar_tensor(const std::string& name, float v) {
  std::string bytes(4, '\0');
  std::memcpy(bytes.data(), &v, 4);
  return {name, DType::kF32, {}, bytes};
}

// Static activation scales (vLLM's fp8 "static", compressed-tensors' static per-tensor input
// activations): each *_proj has an input_scale; a fused weight takes the largest of its sources'
// (q/k/v, gate/up share their input), as vLLM does; a missing or malformed one is refused.
TEST(QuantizedCheckpoint, LoadsStaticInputScalesTheLargestPerWeightPair) {
  for (const char* format : {"fp8", "int8-w8a8"}) {
    SCOPED_TRACE(format);
    CpuBackend backend(2);
    Fixture f = make_fixture(backend);
    const bool int8 = std::string(format) != "fp8";
    f.c.quantization.quant_method = int8 ? "compressed-tensors" : "fp8";
    f.c.quantization.format = format;
    f.c.quantization.static_activations = true;
    auto tensors = quantized_checkpoint(f.dense, false, nullptr, int8);
    std::map<std::string, float> input_scales;  // by the projection's name
    int index = 0;
    for (const auto& t : f.dense) {
      const std::string suffix = "_proj.weight";
      if (!t.name.ends_with(suffix)) continue;
      const std::string base = t.name.substr(0, t.name.size() - std::string(".weight").size());
      input_scales[base] = 0.01f * static_cast<float>(1 + (index++ * 7) % 11);
      tensors.push_back(scalar_tensor(base + ".input_scale", input_scales[base]));
    }
    const WeightFormat wf = *quantization_weight_format(format);
    const auto load = [&](const std::vector<SafetensorsWriteTensor>& ts) {
      testing::TempDir dir;
      EXPECT_TRUE(write_safetensors((dir.path() / "model.safetensors").string(), ts).ok());
      return load_weights(f.c, {LoadFormat::kSafetensors, dir.path().string(), 0, wf}, backend);
    };
    auto w = load(tensors);
    ASSERT_TRUE(w.ok()) << w.error().message;
    for (size_t l = 0; l < w->layers.size(); ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      const auto s = [&](const char* name) { return input_scales.at(p + name); };
      const LayerWeights& lw = w->layers[l];
      EXPECT_EQ(lw.wqkv.input_scale,
                std::max({s("self_attn.q_proj"), s("self_attn.k_proj"), s("self_attn.v_proj")}));
      EXPECT_EQ(lw.wo.input_scale, s("self_attn.o_proj"));
      EXPECT_EQ(lw.w_gate_up.input_scale, std::max(s("mlp.gate_proj"), s("mlp.up_proj")));
      EXPECT_EQ(lw.w_down.input_scale, s("mlp.down_proj"));
      EXPECT_FALSE(lw.w_down.input_asymmetric);
    }
    EXPECT_NE(w->description.find("static per-tensor activations"), std::string::npos)
        << w->description;

    auto bad = tensors;
    for (auto& t : bad)
      if (t.name == "model.layers.1.mlp.up_proj.input_scale") {
        t.shape = {2};
        t.bytes.resize(8);
      }
    auto refused = load(bad);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("'model.layers.1.mlp.up_proj.input_scale' must hold "
                                           "one positive finite float"),
              std::string::npos)
        << refused.error().message;
    auto missing = tensors;
    std::erase_if(missing, [](const SafetensorsWriteTensor& t) {
      return t.name == "model.layers.0.self_attn.o_proj.input_scale";
    });
    auto gone = load(missing);
    ASSERT_FALSE(gone.ok());
    EXPECT_NE(gone.error().message.find("'model.layers.0.self_attn.o_proj.input_scale' is missing"),
              std::string::npos)
        << gone.error().message;
  }
}

// The KV-cache scales (--kv-cache-dtype fp8) load where the checkpoint has them, under vLLM's
// names or compressed-tensors' output_scale, are 1.0 elsewhere, and a bad one is refused.
TEST(KvCacheScales, LoadFromTheCheckpointOrDefaultToOne) {
  CpuBackend backend(2);
  Fixture f = make_fixture(backend);
  auto tensors = f.dense;
  tensors.push_back(scalar_tensor("model.layers.0.self_attn.k_scale", 0.125f));
  tensors.push_back(scalar_tensor("model.layers.0.self_attn.v_scale", 0.5f));
  tensors.push_back(scalar_tensor("model.layers.1.self_attn.v_proj.output_scale", 2.0f));
  testing::TempDir dir;
  ASSERT_TRUE(write_safetensors((dir.path() / "model.safetensors").string(), tensors).ok());
  const WeightOptions options{LoadFormat::kSafetensors, dir.path().string(), 0};
  auto w = load_weights(f.c, options, backend);
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ(w->layers[0].k_scale, 0.125f);
  EXPECT_EQ(w->layers[0].v_scale, 0.5f);
  EXPECT_EQ(w->layers[1].k_scale, 1.0f);
  EXPECT_EQ(w->layers[1].v_scale, 2.0f);

  tensors.push_back(scalar_tensor("model.layers.1.self_attn.k_scale", -1.0f));
  testing::TempDir bad;
  ASSERT_TRUE(write_safetensors((bad.path() / "model.safetensors").string(), tensors).ok());
  auto refused = load_weights(f.c, {LoadFormat::kSafetensors, bad.path().string(), 0}, backend);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("model.layers.1.self_attn.k_scale"), std::string::npos)
      << refused.error().message;
}

}  // namespace
}  // namespace ib
