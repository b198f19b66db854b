//===- draft_test.cpp - the MTP draft graph against the reference head ----===//
//
// glmc compile --draft mtp adds draft graphs: one MTP draft token per row,
// starting from a hidden row of the last step. On the CPU plan executor
// their logits must be the reference head's (CpuForward::mtpStep, itself
// checked against a float64 evaluation of the spec's formula in
// mtp_test.cpp) for the same (h_t, token t+1) pairs fed in the same order,
// a chained draft (hidden rows = the draft's own) the reference fed its
// own output row, and a draft after a verify step (B rows of one slot)
// the same as after the plain step of the row it starts from.
//
//===----------------------------------------------------------------------===//
#include "plan_test_util.h"
#include "runtime/cpu/forward.h"
#include "runtime/cpu/model_weights.h"
#include "runtime/exec/plan_executor.h"
#include "runtime/formats/pack.h"
#include "runtime/gen/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

using namespace glm::rt;
using plan_test::compilePlan;
using plan_test::cpuExecutor;
using plan_test::tinyPack;

namespace {

/// Largest |want - got| over the largest |want| of one row.
double relative(const std::vector<float> &want, const float *got) {
  double maxAbs = 0, maxDiff = 0;
  for (size_t v = 0; v < want.size(); ++v) {
    maxAbs = std::max(maxAbs, std::fabs(double(want[v])));
    maxDiff = std::max(maxDiff, std::fabs(double(want[v]) - got[v]));
  }
  return maxDiff / std::max(maxAbs, 1e-30);
}

int32_t argmax(const float *row, int64_t V) {
  return int32_t(std::max_element(row, row + V) - row);
}

void checkDraftAgainstReference(const std::string &dir,
                                const std::string &manifest, int ranks,
                                double tol) {
  SCOPED_TRACE(dir + ", " + std::to_string(ranks) + " rank(s)");
  PackOpenOptions po;
  po.manifest = manifest;
  auto pack = Pack::open(dir, po);
  const ModelConfig &cfg = *pack->config();
  const int64_t V = cfg.vocabSize;
  auto weights = cpu::ModelWeights::load(cfg, *cpu::packWeightSource(*pack));
  cpu::CpuForward ref(weights, cpu::TpLayout::fromRule(cfg, 1));
  ASSERT_TRUE(ref.hasMtp());
  cpu::Session s = ref.newSession();

  auto plan = compilePlan(dir, ranks, manifest, {1}, "", {0}, 1, true);
  auto ex = cpuExecutor(plan, dir);
  ASSERT_TRUE(ex->hasDraft());
  const std::vector<int32_t> seq = {1, 5, 9, 2, 7, 3, 11, 4};
  double worst = 0;
  for (size_t t = 0; t + 1 < seq.size(); ++t) {
    std::vector<float> hidden;
    ref.step(s, seq[t], nullptr, &hidden);
    ex->step({seq[t]}, {int32_t(t)}, {0});
    // The pair (h_t, token t+1) at MTP position t.
    std::vector<float> mtpOut;
    const std::vector<float> want =
        ref.mtpStep(s, hidden.data(), seq[t + 1], &mtpOut);
    const std::vector<float> got =
        ex->draft({seq[t + 1]}, {int32_t(t)}, {0}, {0});
    ASSERT_EQ(got.size(), size_t(V));
    worst = std::max(worst, relative(want, got.data()));
    // A chained draft token from the draft's own row, at position t + 1;
    // then the MTP cache drops it as a rejected draft would.
    if (t % 3 == 1) {
      const int32_t d = argmax(got.data(), V);
      const std::vector<float> want2 = ref.mtpStep(s, mtpOut.data(), d);
      const std::vector<float> got2 =
          ex->draft({d}, {int32_t(t + 1)}, {0}, {0});
      worst = std::max(worst, relative(want2, got2.data()));
      ref.truncateMtp(s, int64_t(t) + 1);
    }
  }
  std::printf("[ draft ] %s, %d rank(s): worst relative error of the draft "
              "logits vs the reference MTP head %.2e\n",
              dir.c_str(), ranks, worst);
  EXPECT_LE(worst, tol);
}

} // namespace

TEST(DraftGraph, TinyHfDraftsAreTheReferenceMtpHead) {
  checkDraftAgainstReference(tinyPack("hf"), "", 1, 1e-4);
  checkDraftAgainstReference(tinyPack("hf"), "", 2, 1e-4);
}

TEST(DraftGraph, TinyExlr8DraftsAreTheReferenceMtpHead) {
  checkDraftAgainstReference(tinyPack("exlr8"), "mixed", 1, 1e-4);
}

TEST(DraftGraph, TinyExl3DraftsAreTheReferenceMtpHead) {
  checkDraftAgainstReference(tinyPack("exl3"), "", 2, 1e-4);
}

/// A draft after a verify step (B rows of one slot) starting from row j is
/// the bits of the draft after the plain step at row j's position.
TEST(DraftGraph, DraftAfterVerifyRowIsTheDraftAfterThePlainStep) {
  const std::string dir = tinyPack("hf");
  auto pack = Pack::open(dir);
  const int64_t V = pack->config()->vocabSize;
  auto plan = compilePlan(dir, 1, "", {1, 4}, "", {0}, 1, true);
  const std::vector<int32_t> seq = {1, 5, 9, 2, 7, 3};
  for (int32_t j = 0; j < 4; ++j) {
    SCOPED_TRACE("starts from verify row " + std::to_string(j));
    // Plain: steps up to position 2 + j, then the draft from that row.
    auto plain = cpuExecutor(plan, dir);
    for (int32_t t = 0; t <= 2 + j; ++t)
      plain->step({seq[t]}, {t}, {0});
    // MTP positions 0..1 first, as both runs feed them the same way.
    auto verify = cpuExecutor(plan, dir);
    for (int32_t t = 0; t < 2; ++t)
      verify->step({seq[t]}, {t}, {0});
    verify->step({seq[2], seq[3], seq[4], seq[5]}, {2, 3, 4, 5}, {0, 0, 0, 0});
    const int32_t next = 13;
    const std::vector<float> want =
        plain->draft({next}, {2 + j}, {0}, {0});
    const std::vector<float> got = verify->draft({next}, {2 + j}, {0}, {j});
    ASSERT_EQ(got.size(), size_t(V));
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), V * 4));
  }
}

TEST(DraftGraph, PlanWithoutDraftRefusesADraft) {
  const std::string dir = tinyPack("hf");
  auto plan = compilePlan(dir, 1);
  auto ex = cpuExecutor(plan, dir);
  EXPECT_FALSE(ex->hasDraft());
  ex->step({1}, {0}, {0});
  try {
    ex->draft({2}, {0}, {0}, {0});
    FAIL() << "a plan without draft graphs drafted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("--draft mtp"), std::string::npos)
        << e.what();
  }
}

/// The plan's verify path at both ends: drafters that are always right
/// (every draft accepted: k + 1 tokens per verify step) and always wrong
/// (none accepted), on the DSA golden and the tiny exlr8 pack at 1 and 2
/// ranks: tokens and logits rows are those of plain decoding, bit for bit.
TEST(DraftGraph, ForcedAcceptAndRejectGiveThePlainTokensAndLogits) {
  const std::string golden =
      GLM_TEST_DATA_DIR "/../oracle/goldens/glm_dsa_a";
  for (const auto &[dir, manifest, ranks] :
       {std::tuple<std::string, std::string, int>{golden, "", 1},
        {golden, "", 2},
        {tinyPack("exlr8"), "mixed", 2}}) {
    SCOPED_TRACE(dir + ", " + std::to_string(ranks) + " rank(s)");
    PackOpenOptions po;
    po.manifest = manifest;
    auto pack = Pack::open(dir, po);
    const ModelConfig &cfg = *pack->config();
    const int64_t V = cfg.vocabSize;
    // The drafters are fakes: the plan needs only its decode graphs.
    auto plan = compilePlan(dir, ranks, manifest, {1, 2, 4});
    const std::vector<int64_t> prompt = {1, 5, 9, 2, 7};
    SamplingParams sp;
    sp.maxNew = 10;
    auto run = [&](int k, const std::function<int64_t(int64_t)> &drafter,
                   std::vector<float> *logits) {
      auto ex = cpuExecutor(plan, dir);
      int32_t position = 0;
      auto step = [&](int64_t t) {
        return ex->step({int32_t(t)}, {position++}, {0});
      };
      DraftHooks hooks;
      hooks.tokens = k;
      hooks.canVerify = [](int64_t rows) { return rows == 2 || rows == 4; };
      hooks.verify = [&](const std::vector<int64_t> &rows, int64_t at) {
        std::vector<int32_t> tok(rows.begin(), rows.end()), pos, slot;
        for (size_t i = 0; i < rows.size(); ++i) {
          pos.push_back(int32_t(at + int64_t(i)));
          slot.push_back(0);
        }
        return ex->step(tok, pos, slot);
      };
      // Proposes drafter(position of the drafted token).
      hooks.draft = [&](int64_t, int64_t at, int32_t) {
        std::vector<float> l(V, 0.0f);
        l[drafter(at + 2)] = 1.0f;
        return l;
      };
      return runGeneration(cfg, 256, prompt, sp, {}, logits, step, {}, {},
                           k ? &hooks : nullptr);
    };
    std::vector<float> want;
    const GenerationResult plain = run(0, {}, &want);
    std::vector<int64_t> seq = prompt;
    seq.insert(seq.end(), plain.tokens.begin(), plain.tokens.end());
    auto right = [&](int64_t p) { return seq.at(size_t(p)); };
    auto wrong = [&](int64_t p) { return (seq.at(size_t(p)) + 1) % V; };
    for (int k : {1, 3}) {
      std::vector<float> a, b;
      const GenerationResult acc = run(k, right, &a);
      const GenerationResult rej = run(k, wrong, &b);
      EXPECT_EQ(acc.tokens, plain.tokens) << k;
      EXPECT_EQ(rej.tokens, plain.tokens) << k;
      EXPECT_EQ(acc.accepted, acc.drafted) << k;
      EXPECT_GT(acc.drafted, 0) << k;
      EXPECT_EQ(rej.accepted, 0) << k;
      EXPECT_LT(acc.verifySteps, rej.verifySteps) << k;
      ASSERT_EQ(a.size(), want.size());
      ASSERT_EQ(b.size(), want.size());
      EXPECT_EQ(0, std::memcmp(a.data(), want.data(), want.size() * 4)) << k;
      EXPECT_EQ(0, std::memcmp(b.data(), want.data(), want.size() * 4)) << k;
    }
  }
}
