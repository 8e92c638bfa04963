// Length distributions for prompts and outputs: a fixed length, a truncated normal, or a uniform
// range. Parsed from flags such as --input-len-dist normal:mean=256,std=64,min=32,max=1024.
#pragma once

#include <string>
#include <string_view>

#include "core/result.h"
#include "core/rng.h"

namespace ib {

struct LengthDist {
  enum class Kind { kFixed, kNormal, kUniform };
  Kind kind = Kind::kFixed;
  int value = 0;      // kFixed: the length
  double mean = 0;    // kNormal
  double stddev = 0;  // kNormal
  int min = 0;        // kNormal, kUniform: inclusive lower bound
  int max = 0;        // kNormal, kUniform: inclusive upper bound

  static LengthDist fixed(int n) {
    LengthDist d;
    d.value = n;
    return d;
  }
  // The largest length a draw can return.
  int max_len() const { return kind == Kind::kFixed ? value : max; }
  // "32", "normal:mean=256,std=64,min=32,max=1024" or "uniform:min=1,max=9".
  std::string describe() const;
  // A user error (naming flag) for non-positive lengths or an empty range.
  Status validate(std::string_view flag) const;
};

// Parses "N", "normal:mean=M,std=S,min=A,max=B" or "uniform:min=A,max=B"; flag names the option
// in error messages. The result is validated.
Result<LengthDist> parse_length_dist(std::string_view spec, std::string_view flag);

// One draw. The truncated normal rejects draws outside [min, max] (rounded to the nearest
// integer); after 1000 rejections (a mean far outside the range) it clamps.
int sample_length(const LengthDist& dist, Rng& rng);

}  // namespace ib
