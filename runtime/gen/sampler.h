//===- sampler.h - greedy and temperature/top-p sampling with a seed ------===//
//
// Sampling is deterministic for a given seed on every machine: the PRNG is
// xoshiro256** seeded through splitmix64 (both written out here, no <random>
// distributions whose results differ between standard libraries), and the
// probabilities are computed in double. Greedy and temperature 0 pick the
// largest logit, lower token id on ties.
//
// Thread-safety: a Sampler holds PRNG state; one per sequence.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <vector>

namespace glm::rt {

struct SamplingParams {
  bool greedy = true;       // overrides temperature/top-p
  double temperature = 1.0; // 0 = greedy
  double topP = 1.0;        // nucleus mass in (0, 1]
  uint64_t seed = 0;
  int64_t maxNew = 16;      // tokens to generate at most
  std::vector<int64_t> stopIds; // stop when one is generated (kept in output)
};

/// In-place softmax in double over v.
void softmax(std::vector<double> &v);
/// Index of the largest value; ties → lower index (greedy decoding).
int64_t argmax(const float *v, int64_t n);

/// xoshiro256** (Blackman & Vigna), seeded by splitmix64.
class Xoshiro256 {
public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t next();
  /// Uniform in [0, 1) with 53 random bits.
  double uniform();

private:
  uint64_t s_[4];
};

class Sampler {
public:
  explicit Sampler(const SamplingParams &p);
  /// Picks a token from logits [n]; throws Error on non-finite logits.
  int64_t sample(const float *logits, int64_t n);

private:
  SamplingParams p_;
  Xoshiro256 rng_;
};

} // namespace glm::rt
