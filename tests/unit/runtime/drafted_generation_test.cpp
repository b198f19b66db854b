//===- drafted_generation_test.cpp - drafting keeps the output's law ------===//
//
// runGeneration with DraftHooks (--draft mtp) on a small fake model whose
// logits depend on the last token and the position: greedy output equals
// plain decoding for drafters that are always right, always wrong or mixed;
// sampled output (speculative sampling against a point-mass draft) has the
// distribution of plain sampling: histograms of 4-token continuations over
// fixed seeds, compared by a two-sample chi-square test. Seeds are fixed,
// so the statistic is the same on every run.
//
//===----------------------------------------------------------------------===//
#include "runtime/gen/generator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

using namespace glm::rt;

namespace {

constexpr int64_t V = 5;

/// The fake model's logits for `token` fed at `position`.
std::vector<float> fakeLogits(int64_t token, int64_t position) {
  std::vector<float> l(V);
  for (int64_t v = 0; v < V; ++v)
    l[v] = float(std::sin(0.7 * double(v * 3 + token * 5 + position * 2)) *
                 1.5);
  return l;
}

ModelConfig fakeConfig() {
  ModelConfig c;
  c.vocabSize = V;
  return c;
}

struct Drafted {
  GenerationResult res;
  std::vector<float> logits;
};

/// drafter(position, token fed there) -> the token it proposes next.
Drafted generate(const SamplingParams &sp, int k,
             const std::function<int64_t(int64_t, int64_t)> &drafter) {
  const ModelConfig c = fakeConfig();
  const std::vector<int64_t> prompt = {1, 3};
  int64_t position = 0;
  auto step = [&](int64_t token) { return fakeLogits(token, position++); };
  DraftHooks hooks;
  hooks.tokens = k;
  hooks.verify = [&](const std::vector<int64_t> &rows, int64_t at) {
    std::vector<float> out;
    for (size_t i = 0; i < rows.size(); ++i) {
      std::vector<float> l = fakeLogits(rows[i], at + int64_t(i));
      out.insert(out.end(), l.begin(), l.end());
    }
    return out;
  };
  // The draft for `token` at position+1 (its predecessor at `position`).
  hooks.draft = [&](int64_t token, int64_t at, int32_t) {
    std::vector<float> l(V, 0.0f);
    l[drafter(at + 1, token)] = 1.0f;
    return l;
  };
  Drafted r;
  r.res = runGeneration(c, 64, prompt, sp, {}, &r.logits, step, {}, {},
                        k > 0 ? &hooks : nullptr);
  return r;
}

/// The greedy continuation of the fake model after `token` at `position`.
int64_t greedyNext(int64_t position, int64_t token) {
  const std::vector<float> l = fakeLogits(token, position);
  return argmax(l.data(), V);
}

} // namespace

TEST(DraftedGeneration, GreedyOutputIsPlainDecodingForAnyDrafter) {
  SamplingParams sp;
  sp.maxNew = 11;
  const Drafted plain = generate(sp, 0, {});
  const std::map<std::string, std::function<int64_t(int64_t, int64_t)>>
      drafters = {
          {"always right", greedyNext},
          {"always wrong",
           [](int64_t p, int64_t t) { return (greedyNext(p, t) + 1) % V; }},
          {"mixed",
           [](int64_t p, int64_t t) {
             return p % 3 ? greedyNext(p, t) : (greedyNext(p, t) + 2) % V;
           }},
      };
  for (int k = 1; k <= 4; ++k)
    for (const auto &[name, drafter] : drafters) {
      SCOPED_TRACE(name + ", " + std::to_string(k) + " draft tokens");
      const Drafted d = generate(sp, k, drafter);
      EXPECT_EQ(d.res.tokens, plain.res.tokens);
      EXPECT_EQ(d.res.finishReason, plain.res.finishReason);
      EXPECT_EQ(d.logits, plain.logits); // the same rows, in order
      EXPECT_GT(d.res.drafted, 0);
      if (name == "always right") {
        EXPECT_EQ(d.res.accepted, d.res.drafted);
        // Every round but the last emits k + 1 tokens.
        EXPECT_EQ(d.res.verifySteps, (sp.maxNew - 1 + k) / (k + 1));
      } else if (name == "always wrong") {
        EXPECT_EQ(d.res.accepted, 0);
        EXPECT_EQ(d.res.verifySteps, sp.maxNew - 1);
      }
    }
}

TEST(DraftedGeneration, AStopTokenEndsARoundWhereThePlainRunEnds) {
  SamplingParams sp;
  sp.maxNew = 12;
  const Drafted plain = generate(sp, 0, {});
  ASSERT_GE(plain.res.tokens.size(), 6u);
  sp.stopIds = {plain.res.tokens[5]};
  const Drafted a = generate(sp, 0, {});
  const Drafted b = generate(sp, 3, greedyNext);
  EXPECT_EQ(b.res.tokens, a.res.tokens);
  EXPECT_EQ(b.res.finishReason, "stop");
}

TEST(DraftedGeneration, SampledOutputKeepsTheDistributionOfPlainSampling) {
  // Continuations of 4 tokens (625 outcomes), 6000 seeds each way; the
  // drafter proposes the most likely token, as a good MTP head would.
  const int n = 6000;
  std::map<std::vector<int64_t>, int> plain, drafted;
  auto drafter = greedyNext;
  int64_t accepted = 0, proposed = 0;
  for (int s = 0; s < n; ++s) {
    SamplingParams sp;
    sp.greedy = false;
    sp.temperature = 0.9;
    sp.topP = 0.95;
    sp.maxNew = 4;
    sp.seed = uint64_t(s) + 1;
    ++plain[generate(sp, 0, {}).res.tokens];
    sp.seed = uint64_t(s) + 1000003;
    const Drafted d = generate(sp, 2, drafter);
    ++drafted[d.res.tokens];
    accepted += d.res.accepted;
    proposed += d.res.drafted;
  }
  // Two-sample chi-square over outcomes seen at least 5 times in all.
  std::map<std::vector<int64_t>, int> all = plain;
  for (const auto &[k, c] : drafted)
    all[k] += c;
  double chi2 = 0;
  int df = -1;
  for (const auto &[k, c] : all) {
    if (c < 5)
      continue;
    const double a = plain.count(k) ? plain.at(k) : 0,
                 b = drafted.count(k) ? drafted.at(k) : 0;
    chi2 += (a - b) * (a - b) / (a + b);
    ++df;
  }
  std::printf("[ drafted ] chi-square %.1f over %d degrees of freedom; "
              "%lld of %lld drafts accepted\n",
              chi2, df, (long long)accepted, (long long)proposed);
  ASSERT_GT(df, 10);
  ASSERT_GT(accepted, 0);
  ASSERT_LT(accepted, proposed);
  // The 0.999 quantile of chi-square: df + 3.09 sqrt(2 df) + ~2 (Wilson-
  // Hilferty is within 1% here); a biased sampler lands far above it.
  EXPECT_LT(chi2, df + 3.09 * std::sqrt(2.0 * df) + 2.0);
}
