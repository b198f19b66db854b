//===- sampler_test.cpp - top-k, min-p, penalties, logprobs, seeds --------===//
//
// Each test checks the sampler against a distribution whose answer is known
// in closed form: frequencies over many draws, exact penalised logits, exact
// log-softmax values.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/gen/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

using namespace glm::rt;

namespace {

/// A reproducible "model" distribution over `n` tokens.
std::vector<float> randomLogits(int64_t n, uint64_t seed) {
  Xoshiro256 r(seed);
  std::vector<float> l(n);
  for (float &x : l)
    x = float(r.uniform() * 8 - 4);
  return l;
}

SamplingParams sampling(double temperature, uint64_t seed) {
  SamplingParams p;
  p.greedy = false;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

std::map<int64_t, double> frequencies(Sampler &s, const std::vector<float> &l,
                                      int draws) {
  std::map<int64_t, double> f;
  for (int i = 0; i < draws; ++i)
    f[s.sample(l.data(), (int64_t)l.size())] += 1.0 / draws;
  return f;
}

} // namespace

TEST(Sampler, TopK1IsGreedy) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::vector<float> l = randomLogits(1000, seed);
    SamplingParams p = sampling(1.3, seed);
    p.topK = 1;
    p.topP = 0.9;
    Sampler s(p);
    EXPECT_EQ(s.sample(l.data(), 1000), argmax(l.data(), 1000));
  }
}

TEST(Sampler, TopKKeepsTheKMostLikelyRenormalised) {
  // p = [0.1, 0.2, 0.3, 0.4]; top-k 2 keeps ids 3 and 2: 4/7 and 3/7.
  std::vector<float> l = {std::log(1.f), std::log(2.f), std::log(3.f),
                          std::log(4.f)};
  SamplingParams p = sampling(1.0, 5);
  p.topK = 2;
  Sampler s(p);
  auto f = frequencies(s, l, 40000);
  EXPECT_EQ(f.count(0) + f.count(1), 0u);
  EXPECT_NEAR(f[3], 4.0 / 7, 0.01);
  EXPECT_NEAR(f[2], 3.0 / 7, 0.01);
}

TEST(Sampler, MinPRemovesTokensBelowPTimesMax) {
  // p = [0.5, 0.3, 0.15, 0.05]; min-p 0.2 → floor 0.1: id 3 goes, the rest
  // is renormalised over 0.95.
  std::vector<float> l = {std::log(.5f), std::log(.3f), std::log(.15f),
                          std::log(.05f)};
  SamplingParams p = sampling(1.0, 9);
  Sampler all(p);
  EXPECT_NEAR(frequencies(all, l, 40000)[3], 0.05, 0.006);
  p.minP = 0.2;
  Sampler s(p);
  auto f = frequencies(s, l, 40000);
  EXPECT_EQ(f.count(3), 0u);
  EXPECT_NEAR(f[0], .5 / .95, 0.01);
  EXPECT_NEAR(f[2], .15 / .95, 0.01);
  // min-p 0.31 → floor 0.155: id 2 (0.15) goes too.
  p.minP = 0.31;
  Sampler s2(p);
  auto f2 = frequencies(s2, l, 20000);
  EXPECT_EQ(f2.count(2) + f2.count(3), 0u);
  EXPECT_NEAR(f2[1], .3 / .8, 0.015);
}

TEST(Sampler, RepetitionPenaltyFollowsTransformers) {
  // transformers' RepetitionPenaltyLogitsProcessor: a seen token's logit l
  // becomes l / r when l > 0, l * r otherwise.
  std::vector<float> l = {2.0f, 3.0f, -1.0f, 0.5f};
  SamplingParams p; // greedy: the penalties still apply
  p.repetitionPenalty = 2.0;
  Sampler s(p);
  s.setPrompt({1, 2, 2});
  std::vector<double> w = s.penalised(l.data(), 4);
  EXPECT_EQ(w, (std::vector<double>{2.0, 1.5, -2.0, 0.5}));
  // Unpenalised, id 1 wins; penalised, id 0 (2 > 1.5).
  EXPECT_EQ(argmax(l.data(), 4), 1);
  EXPECT_EQ(s.sample(l.data(), 4), 0);
  // Now id 0 was generated: 2 / 2 = 1, and id 3 (0.5) is still unseen.
  w = s.penalised(l.data(), 4);
  EXPECT_EQ(w, (std::vector<double>{1.0, 1.5, -2.0, 0.5}));
  EXPECT_EQ(s.sample(l.data(), 4), 1);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesFollowOpenAI) {
  // OpenAI: mu[j] -= c[j] * frequency_penalty + (c[j] > 0) *
  // presence_penalty, c[j] = times j was generated (the prompt not counted).
  std::vector<float> l = {5.0f, 4.0f, 0.0f};
  SamplingParams p;
  p.presencePenalty = 0.5;
  p.frequencyPenalty = 1.0;
  Sampler s(p);
  s.setPrompt({1, 1, 1}); // no effect on these penalties
  EXPECT_EQ(s.penalised(l.data(), 3), (std::vector<double>{5, 4, 0}));
  EXPECT_EQ(s.sample(l.data(), 3), 0);
  EXPECT_EQ(s.penalised(l.data(), 3), (std::vector<double>{3.5, 4, 0}));
  EXPECT_EQ(s.sample(l.data(), 3), 1);
  EXPECT_EQ(s.penalised(l.data(), 3), (std::vector<double>{3.5, 2.5, 0}));
  EXPECT_EQ(s.sample(l.data(), 3), 0);
  EXPECT_EQ(s.penalised(l.data(), 3), (std::vector<double>{2.5, 2.5, 0}));
  EXPECT_EQ(s.sample(l.data(), 3), 0); // a tie: the lower id
}

TEST(Sampler, LogprobsAreTheRawLogSoftmax) {
  // p = [1, 2, 5, ~0] / 8.
  std::vector<float> l = {0.0f, std::log(2.0f), std::log(5.0f), -30.0f};
  for (double temperature : {0.0, 0.3, 1.7}) {
    SamplingParams p = sampling(temperature, 11);
    p.topLogprobs = 2;
    p.frequencyPenalty = 2; // changes the sampling, not the logprobs
    Sampler s(p);
    SampledToken info;
    int64_t t = s.sample(l.data(), 4, &info);
    EXPECT_EQ(info.token, t);
    const double z = 8 + std::exp(-30.0);
    const double want[4] = {std::log(1 / z), std::log(2 / z), std::log(5 / z),
                            -30 - std::log(z)};
    EXPECT_NEAR(info.logprob, want[t], 1e-6);
    ASSERT_EQ(info.top.size(), 2u);
    EXPECT_EQ(info.top[0].token, 2);
    EXPECT_NEAR(info.top[0].logprob, std::log(5 / z), 1e-6);
    EXPECT_EQ(info.top[1].token, 1);
    EXPECT_NEAR(info.top[1].logprob, std::log(2 / z), 1e-6);
  }
  // k larger than the vocabulary: every token, ties by lower id.
  std::vector<float> flat = {1.0f, 1.0f, 1.0f};
  SampledToken all = rawLogprobs(flat.data(), 3, 1, 10);
  ASSERT_EQ(all.top.size(), 3u);
  EXPECT_EQ(all.top[0].token, 0);
  EXPECT_EQ(all.top[2].token, 2);
  EXPECT_NEAR(all.logprob, std::log(1.0 / 3), 1e-9);
}

TEST(Sampler, SameSeedSameTokensWithEveryFilter) {
  std::vector<float> l = randomLogits(5000, 77);
  SamplingParams p = sampling(0.8, 1234);
  p.topK = 50;
  p.topP = 0.9;
  p.minP = 0.05;
  p.repetitionPenalty = 1.1;
  p.presencePenalty = 0.3;
  p.frequencyPenalty = 0.2;
  auto run = [&](SamplingParams q) {
    Sampler s(q);
    s.setPrompt({1, 2, 3});
    std::vector<int64_t> out;
    for (int i = 0; i < 200; ++i)
      out.push_back(s.sample(l.data(), 5000));
    return out;
  };
  EXPECT_EQ(run(p), run(p));
  SamplingParams other = p;
  other.seed = 1235;
  EXPECT_NE(run(p), run(other));
}

TEST(Sampler, RefusesOutOfRangeParameters) {
  SamplingParams p;
  p.topK = -1;
  EXPECT_THROW(Sampler{p}, glm::rt::Error);
  p = SamplingParams();
  p.minP = 1.5;
  EXPECT_THROW(Sampler{p}, glm::rt::Error);
  p = SamplingParams();
  p.repetitionPenalty = 0;
  EXPECT_THROW(Sampler{p}, glm::rt::Error);
}
