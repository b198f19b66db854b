//===- sampler.cpp - greedy and temperature/top-p sampling with a seed ----===//
#include "runtime/gen/sampler.h"

#include "runtime/base/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace glm::rt {

void softmax(std::vector<double> &v) {
  if (v.empty())
    return;
  double m = *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (double &e : v) {
    e = std::exp(e - m);
    sum += e;
  }
  for (double &e : v)
    e /= sum;
}

int64_t argmax(const float *v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best])
      best = i;
  return best;
}

static uint64_t splitmix64(uint64_t &x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

Xoshiro256::Xoshiro256(uint64_t seed) {
  for (uint64_t &w : s_)
    w = splitmix64(seed);
}

uint64_t Xoshiro256::next() {
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Xoshiro256::uniform() { return (double)(next() >> 11) * 0x1.0p-53; }

Sampler::Sampler(const SamplingParams &p) : p_(p), rng_(p.seed) {
  check(p.greedy || (p.temperature >= 0 && std::isfinite(p.temperature)),
        "temperature must be a finite number >= 0 (got ", p.temperature, ")");
  check(p.greedy || (p.topP > 0 && p.topP <= 1), "top-p must be in (0, 1] (got ",
        p.topP, ")");
}

int64_t Sampler::sample(const float *logits, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    check(std::isfinite(logits[i]), "logit ", i,
          " is not finite: the model produced NaN/Inf");
  if (p_.greedy || p_.temperature == 0)
    return argmax(logits, n);
  std::vector<double> prob(n);
  for (int64_t i = 0; i < n; ++i)
    prob[i] = (double)logits[i] / p_.temperature;
  softmax(prob);
  // Nucleus: the smallest prefix (by decreasing probability, lower id first
  // on ties) whose mass reaches top-p.
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return prob[a] > prob[b]; });
  double mass = 0;
  int64_t keep = 0;
  while (keep < n) {
    mass += prob[order[keep++]];
    if (mass >= p_.topP)
      break;
  }
  double u = rng_.uniform() * mass, acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += prob[order[i]];
    if (u < acc)
      return order[i];
  }
  return order[keep - 1];
}

} // namespace glm::rt
