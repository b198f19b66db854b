//===- paged_kv_test.cpp - glmc compile --kv-page-tokens, end to end ------===//
//
// A paged plan (the latent caches and index keys in pages of 64 tokens,
// each slot's page table in io.pages) on the CPU plan executor:
//  - with the identity tables the executor starts from, and with a shuffled
//    table, every logits row of a generation (prompt chunked and token by
//    token) is the unpaged plan's bits;
//  - glm-engine serve's batching generator shares pages: a request whose
//    prompt begins with another running request's system prompt takes its
//    written pages (prefix-hit tokens in /metrics) and still gives its solo
//    tokens; a pool too small for two requests makes the second wait, one
//    too small for a request refuses it, naming --kv-pages;
//  - the plan records its paging; a k-pool model (Flash) is refused.
//
//===----------------------------------------------------------------------===//
#include "plan_test_util.h"
#include "runtime/exec/batching_generator.h"
#include "runtime/exec/launch_bounds.h"
#include "runtime/exec/plan_generator.h"
#include "runtime/formats/pack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <regex>
#include <thread>

namespace fs = std::filesystem;
using namespace glm::rt;
using plan_test::compilePlan;
using plan_test::metric;
using plan_test::cpuExecutor;
using plan_test::tinyPack;

namespace {

const char *kGoldens = GLM_TEST_DATA_DIR "/../oracle/goldens";

std::vector<int64_t> tokensOf(int n, int seed, int64_t vocab) {
  std::vector<int64_t> t;
  for (int i = 0; i < n; ++i)
    t.push_back((seed * 131 + i * 17 + 3) % vocab);
  return t;
}


} // namespace

TEST(PagedKv, PlanRecordsItsPages) {
  const std::string dir = tinyPack("hf");
  auto plan = compilePlan(dir, 1, "", {1}, "", {0}, 3, false, "f32", 64);
  const exec::IoBounds io = exec::ioBounds(*plan);
  EXPECT_EQ(io.pageTokens, 64);
  EXPECT_EQ(io.pages, 3 * 256 / 64 + 1); // the unpaged bytes and the sink
  bool table = false;
  for (const auto &b : plan->ranks[0].buffers) {
    table |= b.name == "io.pages" && b.bytes >= 3 * (256 / 64) * 4;
    if (b.name.rfind("kv.", 0) == 0)
      EXPECT_GE(b.bytes, uint64_t(io.pages) * 64 * 4) << b.name;
  }
  EXPECT_TRUE(table);
  auto small = compilePlan(dir, 1, "", {1}, "", {0}, 3, false, "f32", 64, 5);
  EXPECT_EQ(exec::ioBounds(*small).pages, 5);
  // Fewer than one whole context and the sink: refused.
  EXPECT_THROW(compilePlan(dir, 1, "", {1}, "", {0}, 3, false, "f32", 64, 4),
               Error);
  // Flash pools its index keys per sequence: no paging.
  const std::string flash = (fs::path(kGoldens) / "glm_flash_a").string();
  try {
    compilePlan(flash, 1, "", {1}, "", {0}, 2, false, "f32", 64);
    ADD_FAILURE() << "a k-pool model compiled paged";
  } catch (const Error &) {
  }
}

/// Every logits row of one generation through the paged plan, with the
/// identity tables and with slot 0's pages shuffled, is the unpaged plan's.
TEST(PagedKv, ShuffledPagesGiveTheUnpagedBits) {
  const std::string dir = tinyPack("hf");
  auto pack = Pack::open(dir);
  const ModelConfig &cfg = *pack->config();
  for (const std::string kv : {"f32", "fp8"}) {
    SCOPED_TRACE("--kv-dtype " + kv);
    auto flat = compilePlan(dir, 1, "", {1}, "", {32}, 2, false, kv);
    auto paged = compilePlan(dir, 1, "", {1}, "", {32}, 2, false, kv, 64);
    SamplingParams sp;
    sp.maxNew = 12;
    const std::vector<int64_t> prompt = tokensOf(150, 1, cfg.vocabSize);
    std::vector<float> want, same, shuffled;
    const auto ref =
        exec::makePlanGenerator(cpuExecutor(flat, dir), cfg, 256, "cpu", true)
            ->generate(prompt, sp, {}, &want);
    const auto id =
        exec::makePlanGenerator(cpuExecutor(paged, dir), cfg, 256, "cpu", true)
            ->generate(prompt, sp, {}, &same);
    EXPECT_EQ(id.tokens, ref.tokens);
    ASSERT_EQ(same.size(), want.size());
    EXPECT_EQ(0, std::memcmp(same.data(), want.data(), want.size() * 4))
        << "identity tables";
    auto e = cpuExecutor(paged, dir);
    std::vector<int32_t> pages(size_t(e->kvPages()));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(5));
    pages.resize(256 / 64);
    e->setPageTable(0, pages);
    EXPECT_THROW(e->setPageTable(0, {0, 1, 2}), Error); // not 4 entries
    EXPECT_THROW(e->setPageTable(1, {0, 1, 2, int32_t(e->kvPages())}), Error);
    const auto sh = exec::makePlanGenerator(std::move(e), cfg, 256, "cpu", true)
                        ->generate(prompt, sp, {}, &shuffled);
    EXPECT_EQ(sh.tokens, ref.tokens);
    ASSERT_EQ(shuffled.size(), want.size());
    EXPECT_EQ(0, std::memcmp(shuffled.data(), want.data(), want.size() * 4))
        << "shuffled pages";
  }
}

/// B's prompt begins with A's 130-token system prompt and arrives while A
/// still generates: B takes A's two written pages (128 tokens) and both
/// give their solo tokens.
TEST(PagedKv, RunningRequestsSharePromptPages) {
  const std::string dir = tinyPack("hf");
  auto pack = Pack::open(dir);
  const ModelConfig &cfg = *pack->config();
  auto plan = compilePlan(dir, 1, "", {1, 2, 4}, "", {0}, 4, false, "f32", 64);
  auto solo =
      exec::makePlanGenerator(cpuExecutor(plan, dir), cfg, 256, "cpu", false);
  auto served = exec::makeBatchingGenerator(cpuExecutor(plan, dir), cfg, 256,
                                            "cpu", 4, false);
  const std::vector<int64_t> system = tokensOf(130, 2, cfg.vocabSize);
  std::vector<int64_t> a = system, b = system;
  for (int64_t t : tokensOf(20, 3, cfg.vocabSize))
    a.push_back(t);
  for (int64_t t : tokensOf(9, 4, cfg.vocabSize))
    b.push_back(t);
  SamplingParams sa, sb;
  sa.maxNew = 24;
  sb.maxNew = 6;
  std::vector<int64_t> gotA, gotB;
  std::thread tb;
  std::atomic<bool> bDone{false};
  std::string errB;
  bool admitted = false;
  // A's first token: B starts, and A waits until B is admitted (its prefix
  // hits counted), so B surely arrives while A runs. B needs nothing of A
  // to be admitted: A's pages are written, slots and pages are free.
  auto onA = [&](int64_t) {
    if (tb.joinable())
      return true;
    tb = std::thread([&] {
      try {
        gotB = served->generate(b, sb).tokens;
      } catch (const std::exception &x) {
        errB = x.what();
      }
      bDone = true;
    });
    for (int i = 0; i < 6000 && !admitted; ++i) { // a minute at most
      admitted = metric(*served, "glm_prefix_hit_tokens_total") == 128;
      if (!admitted && bDone)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  };
  gotA = served->generate(a, sa, onA).tokens;
  tb.join();
  EXPECT_EQ(errB, "");
  EXPECT_TRUE(admitted) << "B did not take A's pages while A ran";
  EXPECT_EQ(gotA, solo->generate(a, sa).tokens);
  EXPECT_EQ(gotB, solo->generate(b, sb).tokens);
  EXPECT_EQ(metric(*served, "glm_prefix_hit_tokens_total"), 128)
      << served->metricsText();
  // Both ended: none referenced; A's two full prompt pages stay cached (the
  // third pages, 128.. of A and of B, were never complete).
  EXPECT_EQ(metric(*served, "glm_kv_pages_in_use"), 0);
  EXPECT_EQ(metric(*served, "glm_kv_pages_cached"), 2);
}

/// Five pages (four and the sink, the least a 256-token context takes) hold
/// one 180-token request (three pages): a second one, sent at the first
/// one's first token, waits for it to end.
TEST(PagedKv, ShortPoolQueuesTheSecondRequest) {
  const std::string dir = tinyPack("hf");
  auto pack = Pack::open(dir);
  const ModelConfig &cfg = *pack->config();
  auto plan =
      compilePlan(dir, 1, "", {1, 2}, "", {0}, 2, false, "f32", 64, 5);
  auto solo =
      exec::makePlanGenerator(cpuExecutor(plan, dir), cfg, 256, "cpu", false);
  auto served = exec::makeBatchingGenerator(cpuExecutor(plan, dir), cfg, 256,
                                            "cpu", 2, false);
  SamplingParams sp;
  sp.maxNew = 80;
  const std::vector<int64_t> p1 = tokensOf(100, 5, cfg.vocabSize),
                             p2 = tokensOf(100, 6, cfg.vocabSize);
  std::vector<int64_t> g1, g2;
  std::thread t2;
  g1 = served
           ->generate(p1, sp,
                      [&](int64_t) {
                        if (!t2.joinable())
                          t2 = std::thread(
                              [&] { g2 = served->generate(p2, sp).tokens; });
                        return true;
                      })
           .tokens;
  t2.join();
  EXPECT_EQ(g1, solo->generate(p1, sp).tokens);
  EXPECT_EQ(g2, solo->generate(p2, sp).tokens);
  EXPECT_EQ(metric(*served, "glm_kv_page_waits_total"), 1);
  EXPECT_EQ(metric(*served, "glm_batch_step_rows_sum"),
            metric(*served, "glm_batch_step_rows_count"))
      << "the two ran at once in four pages";
}
