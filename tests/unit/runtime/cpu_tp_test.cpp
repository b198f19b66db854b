//===- cpu_tp_test.cpp - TP invariance on the synthesized tiny pack -------===//
//
// The tiny preset of `glmc synth` (Hugging Face layout) run with 1..4 ranks
// must give bit-identical logits at every position, and the executor must read
// exactly the tensors hf_names.h says a glm_moe_dsa checkpoint has.
//
//===----------------------------------------------------------------------===//
#include "compiler/packtools/packtools.h"
#include "runtime/base/error.h"
#include "runtime/cpu/forward.h"
#include "runtime/cpu/model_weights.h"
#include "runtime/formats/pack.h"
#include "runtime/model/hf_names.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include <unistd.h>

using namespace glm::rt;
using namespace glm::rt::cpu;
namespace fs = std::filesystem;

namespace {

/// Remembers which names the loader asked for.
class RecordingSource : public WeightSource {
public:
  explicit RecordingSource(const WeightSource &s) : s_(s) {}
  bool has(const std::string &n) const override { return s_.has(n); }
  std::vector<int64_t> shape(const std::string &n) const override {
    return s_.shape(n);
  }
  std::vector<float> load(const std::string &n) const override {
    loaded.insert(n);
    return s_.load(n);
  }
  std::string describe() const override { return s_.describe(); }
  mutable std::set<std::string> loaded;

private:
  const WeightSource &s_;
};

struct TinyPack {
  fs::path dir;
  std::unique_ptr<Pack> pack;
  TinyPack() {
    dir = fs::temp_directory_path() /
          ("glm_cpu_tp_test_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    glmc::writeRandomHfModel("tiny", 1234, dir.string(), false);
    pack = Pack::open(dir.string());
  }
  ~TinyPack() { fs::remove_all(dir); }
};

} // namespace

TEST(CpuTp, TinyPackLogitsBitIdenticalForOneToFourRanks) {
  TinyPack tp;
  ASSERT_TRUE(tp.pack->config().has_value());
  const ModelConfig &c = *tp.pack->config();
  auto src = packWeightSource(*tp.pack);
  auto w = ModelWeights::load(c, *src);
  // Long enough for sparse selection when the preset's index_topk allows.
  const int64_t n = std::max<int64_t>(12, c.indexTopk + 4);
  std::vector<int64_t> toks;
  for (int64_t i = 0; i < n; ++i)
    toks.push_back((i * 7919 + 3) % c.vocabSize);
  std::vector<float> base;
  for (int ranks = 1; ranks <= 4; ++ranks) {
    CpuForward fwd(w, TpLayout::fromRule(c, ranks));
    Session s = fwd.newSession();
    std::vector<float> all;
    for (int64_t t : toks) {
      auto lg = fwd.step(s, t);
      for (float v : lg)
        ASSERT_TRUE(std::isfinite(v));
      all.insert(all.end(), lg.begin(), lg.end());
    }
    if (ranks == 1)
      base = all;
    else
      EXPECT_EQ(0, std::memcmp(base.data(), all.data(), 4 * all.size()))
          << ranks << " ranks differ from 1 rank";
  }
}

TEST(CpuTp, LoaderReadsExactlyTheHfTensorList) {
  TinyPack tp;
  const ModelConfig &c = *tp.pack->config();
  auto src = packWeightSource(*tp.pack);
  RecordingSource rec(*src);
  ModelWeights::load(c, rec);
  // The causal LM's list and the MTP layer's (the tiny pack stores it).
  std::set<std::string> expected;
  for (const HfTensorSpec &s : expectedHfTensors(c))
    expected.insert(s.name);
  for (const HfTensorSpec &s : expectedMtpTensors(c))
    expected.insert(s.name);
  EXPECT_EQ(rec.loaded, expected);
}

#ifdef GLM_HAVE_PLANS
#include "plans/plan.h"
#include "cpu_test_model.h"

TEST(CpuTp, PlanAssignsHalvesAndKeepsResultsBitIdentical) {
  ModelConfig c = cputest::tinyConfig(); // 2 halves per expert
  glm::plan::Plan p;
  p.numRanks = 3;
  p.ranks.resize(3);
  for (uint32_t r = 0; r < 3; ++r)
    p.ranks[r].rank = r;
  auto bind = [&](uint32_t rank, int layer, int expert, int half,
                  glm::plan::Projection proj) {
    glm::plan::WeightBinding b;
    b.layer = layer;
    b.expert = expert;
    b.half = half;
    b.projection = proj;
    p.ranks[rank].weights.push_back(b);
  };
  using P = glm::plan::Projection;
  for (P proj : {P::Gate, P::Up, P::Down}) {
    bind(2, 1, 4, 0, proj);  // one half
    bind(0, 2, -2, 1, proj); // shared expert (-2) half 1
    bind(1, 3, 5, -1, proj); // whole expert tensor on one rank
  }
  bind(0, 1, 0, -1, P::QA); // attention bindings do not move experts
  TpLayout t = tpLayoutFromPlan(c, p);
  EXPECT_EQ(t.ranks, 3);
  EXPECT_EQ(t.expertHalfRank(1, 4, 0), 2);
  EXPECT_EQ(t.expertHalfRank(2, c.numRoutedExperts, 1), 0);
  EXPECT_EQ(t.expertHalfRank(3, 5, 0), 1);
  EXPECT_EQ(t.expertHalfRank(3, 5, 1), 1);
  // Unbound halves follow the rule.
  EXPECT_EQ(t.expertHalfRank(1, 4, 1), (1 * 4 + 1 / 2 + 1) % 3);

  MapWeightSource src = cputest::tinyWeights(c, 3);
  auto w = ModelWeights::load(c, src);
  auto run = [&](TpLayout layout) {
    CpuForward fwd(w, std::move(layout));
    Session s = fwd.newSession();
    std::vector<float> all;
    for (int64_t tok : {3, 14, 15, 9, 26, 5, 35, 8})
      for (float v : fwd.step(s, tok))
        all.push_back(v);
    return all;
  };
  auto a = run(TpLayout::fromRule(c, 1)), b = run(t);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), 4 * a.size()));

  // One half bound to two ranks is refused.
  bind(1, 1, 4, 0, P::Gate);
  EXPECT_THROW(tpLayoutFromPlan(c, p), Error);
}
#endif
