//===- sampler.cpp - seeded sampling: penalties, top-k/p, min-p, logprobs -===//
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

SampledToken rawLogprobs(const float *logits, int64_t n, int64_t token, int k) {
  double m = logits[argmax(logits, n)], sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += std::exp((double)logits[i] - m);
  const double lse = m + std::log(sum);
  SampledToken s;
  s.token = token;
  s.logprob = (double)logits[token] - lse;
  int64_t kk = std::min<int64_t>(std::max(k, 0), n);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + kk, order.end(),
                    [&](int64_t a, int64_t b) {
                      return logits[a] > logits[b] ||
                             (logits[a] == logits[b] && a < b);
                    });
  for (int64_t i = 0; i < kk; ++i)
    s.top.push_back({order[i], (double)logits[order[i]] - lse});
  return s;
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
  check(p.topK >= 0, "top-k must be >= 0 (0 = off; got ", p.topK, ")");
  check(p.minP >= 0 && p.minP <= 1, "min-p must be in [0, 1] (got ", p.minP,
        ")");
  check(p.repetitionPenalty > 0 && std::isfinite(p.repetitionPenalty),
        "repetition penalty must be a finite number > 0 (got ",
        p.repetitionPenalty, ")");
  check(std::isfinite(p.presencePenalty) && std::isfinite(p.frequencyPenalty),
        "presence and frequency penalties must be finite");
  if (p.constraint)
    constraint_ = p.constraint();
}

void Sampler::setPrompt(const std::vector<int64_t> &prompt) {
  prompt_.clear();
  if (p_.repetitionPenalty != 1)
    prompt_.insert(prompt.begin(), prompt.end());
}

bool Sampler::hasPenalties() const {
  if (p_.repetitionPenalty != 1 && !(prompt_.empty() && generated_.empty()))
    return true;
  return !generated_.empty() &&
         (p_.presencePenalty != 0 || p_.frequencyPenalty != 0);
}

std::vector<double> Sampler::penalised(const float *logits, int64_t n) const {
  std::vector<double> w(logits, logits + n);
  // Repetition penalty, as transformers' RepetitionPenaltyLogitsProcessor
  // (CTRL, Keskar et al. 2019): for every token already in the prompt or
  // the output, l = l > 0 ? l / r : l * r (once, however often it occurs).
  if (p_.repetitionPenalty != 1) {
    auto apply = [&](int64_t t) {
      if (t < 0 || t >= n)
        return;
      w[t] =
          w[t] > 0 ? w[t] / p_.repetitionPenalty : w[t] * p_.repetitionPenalty;
    };
    for (int64_t t : prompt_)
      apply(t);
    for (const auto &[t, c] : generated_)
      if (!prompt_.count(t))
        apply(t);
  }
  // Presence and frequency penalties, OpenAI's formula over the tokens
  // generated so far (not the prompt, as vLLM):
  //   l[j] -= c[j] * frequency_penalty + (c[j] > 0) * presence_penalty
  for (const auto &[t, c] : generated_)
    if (t >= 0 && t < n)
      w[t] -=
          (double)c * p_.frequencyPenalty + (c > 0 ? p_.presencePenalty : 0.0);
  return w;
}

const float *Sampler::forPick(const float *logits, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    check(std::isfinite(logits[i]), "logit ", i,
          " is not finite: the model produced NaN/Inf");
  if (!constraint_)
    return logits;
  masked_.assign(logits, logits + n);
  constraint_->mask(masked_.data(), n, p_.maxNew - steps_);
  return masked_.data();
}

int64_t Sampler::taken(int64_t tok, const float *raw, int64_t n,
                       SampledToken *info) {
  ++steps_;
  if (constraint_)
    constraint_->accept(tok);
  ++generated_[tok];
  // Logprobs stay those of the raw logits; only the pick sees the mask.
  if (info && p_.topLogprobs >= 0)
    *info = rawLogprobs(raw, n, tok, p_.topLogprobs);
  return tok;
}

int64_t Sampler::sample(const float *logits, int64_t n, SampledToken *info) {
  return taken(pick(forPick(logits, n), n), logits, n, info);
}

Sampler::Kept Sampler::kept(const float *logits, int64_t n) const {
  Kept k;
  k.prob = penalised(logits, n);
  for (double &x : k.prob)
    x /= p_.temperature;
  softmax(k.prob);
  std::vector<double> &prob = k.prob;
  // Decreasing probability, lower id first on ties.
  std::vector<int64_t> &order = k.order;
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  int64_t keep = p_.topK > 0 ? std::min(p_.topK, n) : n;
  auto byProb = [&](int64_t a, int64_t b) {
    return prob[a] > prob[b] || (prob[a] == prob[b] && a < b);
  };
  if (keep < n)
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), byProb);
  else
    std::sort(order.begin(), order.end(), byProb);
  // Nucleus over what top-k kept (renormalised): the smallest prefix whose
  // mass reaches top-p.
  double keptMass = 0;
  for (int64_t i = 0; i < keep; ++i)
    keptMass += prob[order[i]];
  double mass = 0;
  int64_t nucleus = 0;
  while (nucleus < keep) {
    mass += prob[order[nucleus++]];
    if (mass >= p_.topP * keptMass)
      break;
  }
  keep = nucleus;
  // min-p (Nguyen et al. 2024): keep p >= min_p * p_max. Renormalising
  // does not change the ratio, so the order against top-k/top-p is moot.
  const double floor = p_.minP * prob[order[0]];
  while (keep > 1 && prob[order[keep - 1]] < floor)
    mass -= prob[order[--keep]];
  if (keep < nucleus) {
    mass = 0;
    for (int64_t i = 0; i < keep; ++i)
      mass += prob[order[i]];
  }
  k.keep = keep;
  k.mass = mass;
  return k;
}

bool Sampler::isGreedy() const {
  return p_.greedy || p_.temperature == 0 || p_.topK == 1;
}

int64_t Sampler::pick(const float *logits, int64_t n) {
  if (!hasPenalties() && isGreedy())
    return argmax(logits, n);
  if (isGreedy()) { // ties -> lower id, as argmax
    std::vector<double> prob = penalised(logits, n);
    return std::max_element(prob.begin(), prob.end()) - prob.begin();
  }
  const Kept k = kept(logits, n);
  double u = rng_.uniform() * k.mass, acc = 0;
  for (int64_t i = 0; i < k.keep; ++i) {
    acc += k.prob[k.order[i]];
    if (u < acc)
      return k.order[i];
  }
  return k.order[k.keep - 1];
}

int64_t Sampler::sampleAgainstDraft(const float *logits, int64_t n,
                                    int64_t draft, SampledToken *info) {
  if (isGreedy())
    return sample(logits, n, info);
  const Kept k = kept(forPick(logits, n), n);
  // The draft's probability under the sampling distribution (0 outside
  // what top-k / top-p / min-p keep).
  double pd = 0;
  for (int64_t i = 0; i < k.keep; ++i)
    if (k.order[i] == draft)
      pd = k.prob[draft];
  int64_t tok = -1;
  if (rng_.uniform() * k.mass < pd) {
    tok = draft; // accepted with probability p(draft)
  } else {
    // The residual: the distribution without the draft, renormalised.
    const double rest = k.mass - pd;
    double u = rng_.uniform() * rest, acc = 0;
    for (int64_t i = 0; i < k.keep && tok < 0; ++i) {
      if (k.order[i] == draft)
        continue;
      acc += k.prob[k.order[i]];
      if (u < acc)
        tok = k.order[i];
    }
    for (int64_t i = k.keep - 1; tok < 0 && i >= 0; --i)
      if (k.order[i] != draft) // rounding left u at the end
        tok = k.order[i];
    if (tok < 0)
      tok = draft; // the draft held all the mass
  }
  return taken(tok, logits, n, info);
}

} // namespace glm::rt
