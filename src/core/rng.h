// Seeded randomness. Two kinds:
//  - counter-based: hash(seed, stream, index) -> the same value on every backend and thread,
//    used for dummy weights and sampling so CPU and CUDA agree bit for bit;
//  - sequential: Rng (xoshiro256**) for workload generation.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define IB_HOST_DEVICE __host__ __device__
#else
#define IB_HOST_DEVICE
#endif

namespace ib {

IB_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A 64-bit hash of (seed, stream, index); independent streams for independent tensors.
IB_HOST_DEVICE inline uint64_t counter_hash(uint64_t seed, uint64_t stream, uint64_t index) {
  return splitmix64(splitmix64(seed ^ splitmix64(stream)) + index);
}

// Uniform float in [0, 1) from the top 24 bits: exact in fp32 on every device.
IB_HOST_DEVICE inline float counter_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>(counter_hash(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t x = seed;
    for (auto& s : s_) {
      x = splitmix64(x);
      s = x;
    }
  }
  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform double in [0, 1).
  double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [lo, hi].
  int64_t uniform_int(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(next_u64() % span);
  }
  // Standard normal (Box-Muller).
  double normal();
  // Gamma(shape, scale) (Marsaglia-Tsang).
  double gamma(double shape, double scale);

  // std::uniform_random_bit_generator interface.
  using result_type = uint64_t;
  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() { return ~0ull; }
  uint64_t operator()() { return next_u64(); }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace ib
