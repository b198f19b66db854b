//===- batch_invariance_test.cpp - a row's logits do not depend on its batch ===//
//
// Batch 2-8 decode (batching, drafting's verify step) promises identical
// output: a sequence's logits are the same bits whether its row runs alone
// or next to others' rows in a decode bucket. Two sequences at different
// positions in different KV slots, alone through batch-1 steps and together
// through batch-B steps (with filler rows up to B), on the CPU plan
// executor: GLM-5.3 (DSA golden, trellis experts of every layout) and
// GLM-5.3-Flash (KDA state per slot), at 1 and 2 ranks.
//
//===----------------------------------------------------------------------===//
#include "plan_test_util.h"
#include "runtime/base/error.h"
#include "runtime/formats/pack.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

namespace fs = std::filesystem;
using namespace glm::rt;
using plan_test::compilePlan;
using plan_test::cpuExecutor;
using plan_test::tinyPack;

namespace {

const char *kGoldens = GLM_TEST_DATA_DIR "/../oracle/goldens";

/// Sequences a (slot 0) and b (slot 1, `lead` tokens ahead) decoded alone,
/// then together in batch-B steps whose other rows are fillers in slots
/// 2..B: a's and b's rows must be the bits of their batch-1 steps.
void checkBatchInvariant(const std::string &dir, const std::string &manifest,
                         int ranks, uint32_t B) {
  SCOPED_TRACE(dir + ", " + std::to_string(ranks) + " rank(s), batch " +
               std::to_string(B));
  auto pack = Pack::open(dir);
  const int64_t V = pack->config()->vocabSize;
  const std::vector<int32_t> a = {1, 5, 9, 2, 7, 3};
  const std::vector<int32_t> b = {12, 3, 3, 40, 7, 1, 9, 14};
  const size_t lead = b.size() - a.size();
  auto plan = compilePlan(dir, ranks, manifest, {1, int64_t(B)}, "", {0},
                          int64_t(B));
  auto alone = cpuExecutor(plan, dir);
  std::vector<std::vector<float>> wantA, wantB;
  for (size_t i = 0; i < a.size(); ++i)
    wantA.push_back(alone->step({a[i]}, {int32_t(i)}, {0}));
  for (size_t i = 0; i < b.size(); ++i)
    wantB.push_back(alone->step({b[i]}, {int32_t(i)}, {1}));

  auto together = cpuExecutor(plan, dir);
  for (size_t i = 0; i < lead; ++i)
    together->step({b[i]}, {int32_t(i)}, {1});
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<int32_t> toks = {a[i], b[lead + i]};
    std::vector<int32_t> pos = {int32_t(i), int32_t(lead + i)};
    std::vector<int32_t> slots = {0, 1};
    for (uint32_t r = 2; r < B; ++r) { // fillers: other tokens, positions
      toks.push_back(int32_t((7 * r + 3 * i) % 50));
      pos.push_back(int32_t(i));
      slots.push_back(int32_t(r));
    }
    const std::vector<float> rows = together->step(toks, pos, slots);
    ASSERT_EQ(rows.size(), size_t(B) * size_t(V));
    EXPECT_EQ(0, std::memcmp(rows.data(), wantA[i].data(), V * 4))
        << "sequence a, step " << i << ": its row differs from batch 1";
    EXPECT_EQ(0, std::memcmp(rows.data() + V, wantB[lead + i].data(), V * 4))
        << "sequence b, step " << i << ": its row differs from batch 1";
  }
}

} // namespace

TEST(BatchInvariance, GoldenDsaRowsAreTheBitsOfBatchOne) {
  const std::string dir = (fs::path(kGoldens) / "glm_dsa_a").string();
  checkBatchInvariant(dir, "", 1, 2);
  checkBatchInvariant(dir, "", 2, 4);
}

TEST(BatchInvariance, TrellisExpertRowsAreTheBitsOfBatchOne) {
  checkBatchInvariant(tinyPack("exlr8"), "mixed", 1, 8);
  checkBatchInvariant(tinyPack("exl3"), "", 2, 3);
}

TEST(BatchInvariance, FlashRowsAreTheBitsOfBatchOne) {
  const std::string dir = (fs::path(kGoldens) / "glm_flash_a").string();
  checkBatchInvariant(dir, "", 1, 4);
  checkBatchInvariant(dir, "", 2, 2);
}

namespace {

/// A verify step's shape (drafting): one sequence's next B tokens as B rows
/// of one slot at consecutive positions, each row attending to the rows
/// before it in the same step. Every row must be the bits of the plain
/// batch-1 step at its position, so drafting's output equals plain
/// decoding by construction.
void checkVerifyRowsAreSequentialSteps(const std::string &dir,
                                       const std::string &manifest,
                                       int ranks, uint32_t B) {
  SCOPED_TRACE(dir + ", " + std::to_string(ranks) + " rank(s), " +
               std::to_string(B) + " rows of one slot");
  auto pack = Pack::open(dir);
  const int64_t V = pack->config()->vocabSize;
  const std::vector<int32_t> seq = {1, 5, 9, 2, 7, 3, 11, 4, 8, 6};
  auto plan = compilePlan(dir, ranks, manifest, {1, int64_t(B)}, "", {0}, 1);
  auto plain = cpuExecutor(plan, dir);
  std::vector<std::vector<float>> want;
  for (size_t i = 0; i < seq.size(); ++i)
    want.push_back(plain->step({seq[i]}, {int32_t(i)}, {0}));
  auto verify = cpuExecutor(plan, dir);
  const size_t lead = 2;
  for (size_t i = 0; i < lead; ++i)
    verify->step({seq[i]}, {int32_t(i)}, {0});
  for (size_t at = lead; at + B <= seq.size(); at += B) {
    std::vector<int32_t> toks, pos, slots;
    for (uint32_t r = 0; r < B; ++r) {
      toks.push_back(seq[at + r]);
      pos.push_back(int32_t(at + r));
      slots.push_back(0);
    }
    const std::vector<float> rows = verify->step(toks, pos, slots);
    ASSERT_EQ(rows.size(), size_t(B) * size_t(V));
    for (uint32_t r = 0; r < B; ++r)
      EXPECT_EQ(0, std::memcmp(rows.data() + r * V, want[at + r].data(),
                               V * 4))
          << "position " << at + r << " (row " << r
          << "): differs from the plain step";
  }
}

} // namespace

TEST(VerifyRows, GoldenDsaRowsOfOneSlotAreThePlainSteps) {
  const std::string dir = (fs::path(kGoldens) / "glm_dsa_a").string();
  checkVerifyRowsAreSequentialSteps(dir, "", 1, 4);
  checkVerifyRowsAreSequentialSteps(dir, "", 2, 2);
}

TEST(VerifyRows, TrellisExpertRowsOfOneSlotAreThePlainSteps) {
  checkVerifyRowsAreSequentialSteps(tinyPack("exlr8"), "mixed", 1, 4);
}

TEST(VerifyRows, FlashRowsOfOneSlotAreThePlainSteps) {
  const std::string dir = (fs::path(kGoldens) / "glm_flash_a").string();
  checkVerifyRowsAreSequentialSteps(dir, "", 1, 4);
}
