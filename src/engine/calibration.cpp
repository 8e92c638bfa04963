#include "engine/calibration.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/dtype.h"
#include "engine/engine.h"

namespace ib {

ActivationStats::ActivationStats() : positive_(kBins, 0), negative_(kBins, 0) {}

int ActivationStats::bin_of(float magnitude) {
  const double octaves = std::log2(static_cast<double>(magnitude)) - kMinExponent;
  const double bin = std::floor(octaves * kBinsPerOctave);
  return static_cast<int>(std::clamp(bin, 0.0, static_cast<double>(kBins - 1)));
}

float ActivationStats::upper_edge(int bin) {
  return static_cast<float>(
      std::exp2(static_cast<double>(bin + 1) / kBinsPerOctave + kMinExponent));
}

void ActivationStats::observe(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (!std::isfinite(v)) {
      ++non_finite_;
      continue;
    }
    if (count_ == 0) {
      min_ = max_ = v;
    } else {
      min_ = std::min(min_, v);
      max_ = std::max(max_, v);
    }
    ++count_;
    if (v == 0.0f) {
      ++zeros_;
    } else if (v > 0.0f) {
      ++positive_[static_cast<size_t>(bin_of(v))];
    } else {
      ++negative_[static_cast<size_t>(bin_of(-v))];
    }
  }
}

float ActivationStats::quantile(double q) const {
  if (count_ == 0) return 0.0f;
  // The rank (1-based) of the order statistic: at least q of the observations at or below it.
  const auto rank = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(count_))));
  int64_t seen = 0;
  float v = max_;
  bool found = false;
  // Ascending values: negative bins from the largest magnitude down, zeros, positive bins up.
  for (int b = kBins - 1; b >= 0 && !found; --b) {
    seen += negative_[static_cast<size_t>(b)];
    if (seen >= rank) {
      v = -upper_edge(b);  // the bin's outer edge: the most negative value it may hold
      found = true;
    }
  }
  if (!found) {
    seen += zeros_;
    if (seen >= rank) {
      v = 0.0f;
      found = true;
    }
  }
  for (int b = 0; b < kBins && !found; ++b) {
    seen += positive_[static_cast<size_t>(b)];
    if (seen >= rank) {
      v = upper_edge(b);
      found = true;
    }
  }
  return std::clamp(v, min_, max_);
}

void ActivationStats::merge(const ActivationStats& other) {
  if (other.count_ > 0) {
    min_ = count_ == 0 ? other.min_ : std::min(min_, other.min_);
    max_ = count_ == 0 ? other.max_ : std::max(max_, other.max_);
  }
  count_ += other.count_;
  zeros_ += other.zeros_;
  non_finite_ += other.non_finite_;
  for (size_t b = 0; b < positive_.size(); ++b) {
    positive_[b] += other.positive_[b];
    negative_[b] += other.negative_[b];
  }
}

StaticActivationQuant static_activation_quant(const ActivationStats& stats,
                                              CalibrationMethod method, double percentile,
                                              ActivationScheme scheme) {
  float lo = stats.min(), hi = stats.max();
  if (method == CalibrationMethod::kPercentile) {
    lo = stats.quantile(1.0 - percentile);
    hi = stats.quantile(percentile);
  }
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  StaticActivationQuant out;
  if (scheme == ActivationScheme::kSymmetric) {
    const float amax = std::max(-lo, hi);
    out.scale = amax > 0.0f ? amax / 127.0f : 1.0f;
    return out;
  }
  if (hi - lo > 0.0f) {
    out.scale = (hi - lo) / 255.0f;
    out.zero_point =
        static_cast<int32_t>(std::clamp(std::nearbyint(-lo / out.scale), 0.0f, 255.0f));
  }
  return out;
}

const char* calibration_method_name(CalibrationMethod m) {
  return m == CalibrationMethod::kMinMax ? "minmax" : "percentile";
}

const char* activation_scheme_name(ActivationScheme s) {
  return s == ActivationScheme::kSymmetric ? "symmetric" : "asymmetric";
}

Status calibrate(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                 const CalibrationOptions& options) {
  if (prompts.empty()) return user_error("calibration needs at least one prompt");
  if (options.method == CalibrationMethod::kPercentile &&
      !(options.percentile > 0.5 && options.percentile <= 1.0)) {
    return user_error("the calibration percentile must be in (0.5, 1] (e.g. 0.9999)");
  }
  // Every rank's weights (tensor parallelism: the same linears in the same order on each, their
  // slices), observed on its own backend. The column-parallel linears (q/k/v, gate/up) see the
  // same input on every rank, the row-parallel ones (o, down) a slice each, merged over the
  // ranks: both are then the whole input's statistics, so the scales are one rank's.
  const std::vector<CalibrationRank> ranks = engine.calibration_ranks();
  std::vector<std::vector<WeightRef*>> targets(ranks.size());
  std::vector<bool> row_parallel;  // per target: o and down, whose input a rank sees a slice of
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (LayerWeights& l : ranks[r].weights->layers) {
      for (WeightRef* ref : {&l.wqkv, &l.wo, &l.w_gate_up, &l.w_down}) {
        if (ref->format != WeightFormat::kInt8W8A8) {
          return user_error(
              "calibration sets static activation scales of int8 W8A8 weights; run with "
              "--quantization int8-w8a8");
        }
        targets[r].push_back(ref);
        if (r == 0) row_parallel.push_back(ref == &l.wo || ref == &l.w_down);
      }
    }
  }
  if (engine.has_unfinished()) return user_error("calibration needs an idle engine");
  const size_t n_targets = targets[0].size();
  // Per rank (each observer runs on its rank's thread): the target of each weight's data, and
  // the statistics.
  std::vector<std::map<const void*, size_t>> target_of(ranks.size());
  std::vector<std::vector<ActivationStats>> stats(ranks.size());
  std::vector<std::vector<float>> host(ranks.size());
  std::vector<std::vector<uint16_t>> half(ranks.size());  // bf16 / fp16 inputs' bits (CUDA's)
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (size_t i = 0; i < n_targets; ++i) target_of[r][targets[r][i]->data.data] = i;
    stats[r].resize(n_targets);
    Backend& backend = *ranks[r].backend;
    const bool observing =
        backend.set_matmul_observer([&, r](const Tensor& x, const WeightRef& ref) {
          if (ref.format != WeightFormat::kInt8W8A8) return;  // lm_head
          const auto it = target_of[r].find(ref.data.data);
          if (it == target_of[r].end()) return;
          const auto n = static_cast<size_t>(x.numel());
          std::vector<float>& h = host[r];
          h.resize(n);
          if (x.dtype == DType::kF32) {
            ranks[r].backend->copy_to_host(x, h.data());
          } else {
            IB_ASSERT(x.dtype == DType::kBF16 || x.dtype == DType::kF16,
                      "calibration: matmul inputs are f32, bf16 or fp16");
            half[r].resize(n);
            ranks[r].backend->copy_to_host(x, half[r].data());
            for (size_t i = 0; i < n; ++i)
              h[i] = x.dtype == DType::kBF16 ? bf16_bits_to_f32(half[r][i])
                                             : f16_bits_to_f32(half[r][i]);
          }
          stats[r][it->second].observe(h.data(), x.numel());
        });
    if (!observing) {
      for (size_t q = 0; q < r; ++q) ranks[q].backend->set_matmul_observer(nullptr);
      return user_error("calibration: the " + backend.device_info().kind +
                        " backend cannot observe its matmul inputs; calibrate on --device cpu or "
                        "cuda");
    }
  }
  Status run = Ok{};
  for (size_t i = 0; i < prompts.size() && run.ok(); ++i) {
    GenerationRequest req;
    req.id = i;
    req.prompt_tokens = prompts[i];
    req.max_tokens = 1;
    run = engine.add_request(std::move(req));
    while (run.ok() && engine.has_unfinished()) {
      auto step = engine.step();
      if (!step.ok()) run = step.error();
    }
  }
  for (const CalibrationRank& rank : ranks) rank.backend->set_matmul_observer(nullptr);
  engine.reset_profile();  // the observed steps are not the benchmark's
  IB_TRY(run);
  for (size_t i = 0; i < n_targets; ++i) {
    // q/k/v and gate/up: rank 0's (every rank saw the same input; merging copies would move a
    // percentile's order statistic); o and down: every rank's slice.
    ActivationStats merged = stats[0][i];
    for (size_t r = 1; r < ranks.size() && row_parallel[i]; ++r) merged.merge(stats[r][i]);
    if (merged.count() == 0) {
      return user_error("calibration: a matmul weight saw no input; use more prompts");
    }
    const StaticActivationQuant q =
        static_activation_quant(merged, options.method, options.percentile, options.scheme);
    for (size_t r = 0; r < ranks.size(); ++r) {
      WeightRef* ref = targets[r][i];
      ref->input_scale = q.scale;
      ref->input_zero_point = q.zero_point;
      ref->input_asymmetric = options.scheme == ActivationScheme::kAsymmetric;
      if (ref->input_asymmetric && ref->input_row_sums.empty()) {  // the zero point's correction
        Backend& backend = *ranks[r].backend;
        ModelWeights& w = *ranks[r].weights;
        const int64_t rows = ref->rows();
        IB_ASSIGN_OR_RETURN(Buffer sums, backend.alloc(static_cast<size_t>(rows) * sizeof(int32_t),
                                                       MemoryTag::kWeights));
        ref->input_row_sums = sums.view(DType::kI32, {rows});
        backend.weight_row_sums(*ref, ref->input_row_sums);
        w.bytes += static_cast<int64_t>(sums.bytes());
        w.storage.push_back(std::move(sums));
      }
    }
  }
  for (const CalibrationRank& rank : ranks) IB_TRY(rank.backend->device_status());
  // Decode graphs recorded before calibration hold the dynamic quantization's launches.
  return engine.record_graphs_again();
}

}  // namespace ib
