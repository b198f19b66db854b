//===- batching_test.cpp - continuous batching gives each request its solo run
//
// The batching generator (runtime/exec/batching_generator.h, serve
// --max-batch) on the CPU plan executor: requests of mixed prompt lengths,
// greedy and seeded sampling, generate() from one thread each at once; every
// request's tokens equal its run alone through the plain generator, and
// with logits asked for, every logits row is the same bits. A second wave
// whose prompts extend the first wave's sequences reuses their slots'
// prefixes (counted in the generator's metrics) and still gives the solo
// tokens. GLM-5.3 (tiny hf; exlr8 mixed at 2 ranks, with prefill chunks)
// and GLM-5.3-Flash (KDA state: spare rows in the kept slot, only exact
// prefixes reused).
//
//===----------------------------------------------------------------------===//
#include "plan_test_util.h"
#include "runtime/exec/batching_generator.h"
#include "runtime/exec/plan_generator.h"
#include "runtime/formats/pack.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
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

struct Request {
  std::vector<int64_t> prompt;
  SamplingParams params;
};

/// Request i of a wave: prompts of 3..14 tokens, some sharing a prefix,
/// every third sampled with its own seed.
std::vector<Request> wave(int n, int64_t vocab) {
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    const int len = 3 + (i * 5) % 12;
    for (int t = 0; t < len; ++t)
      r.prompt.push_back(t < 3 && i % 2 ? 7 + t // a shared prefix
                                        : (11 * i + 7 * t + 1) % vocab);
    r.params.maxNew = 4 + i % 5;
    if (i % 3 == 2) {
      r.params.greedy = false;
      r.params.temperature = 0.9;
      r.params.seed = 100 + uint64_t(i);
    }
    out.push_back(r);
  }
  return out;
}

struct Outcome {
  std::vector<int64_t> tokens;
  std::vector<float> logits;
};

/// Every request of `reqs` through `g` at once, one thread each.
std::vector<Outcome> together(Generator &g, const std::vector<Request> &reqs,
                              bool logits) {
  std::vector<Outcome> out(reqs.size());
  std::vector<std::string> errors(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        out[i].tokens = g.generate(reqs[i].prompt, reqs[i].params, {},
                                   logits ? &out[i].logits : nullptr)
                            .tokens;
      } catch (const std::exception &e) {
        errors[i] = e.what();
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (size_t i = 0; i < reqs.size(); ++i)
    EXPECT_EQ(errors[i], "") << "request " << i;
  return out;
}


/// `kvSlots` at least the 10 requests of a wave (plus Flash's kept slot):
/// a new request takes a slot never used before the least recently used
/// one, so each wave-1 sequence stays in its own slot for wave 2.
/// `exactReuse`: the plan's prefill chunks and decode steps give the same
/// bits, so a reused prefix gives the solo tokens exactly (tiny hf, or no
/// prefill chunks); else wave 2 checks only that prefixes were reused.
void checkBatching(const std::string &dir, const std::string &manifest,
                   int ranks, int64_t kvSlots, int maxBatch,
                   std::vector<int64_t> prefillChunks, bool exactReuse) {
  SCOPED_TRACE(dir + ", " + std::to_string(ranks) + " rank(s), --max-batch " +
               std::to_string(maxBatch));
  auto pack = Pack::open(dir);
  const ModelConfig &cfg = *pack->config();
  const bool chunked = prefillChunks != std::vector<int64_t>{0};
  auto plan = compilePlan(dir, ranks, manifest, {1, 2, 4, 8}, "",
                          prefillChunks, kvSlots);
  auto solo = exec::makePlanGenerator(cpuExecutor(plan, dir), cfg, 128, "cpu",
                                      chunked);
  auto batched = exec::makeBatchingGenerator(cpuExecutor(plan, dir), cfg, 128,
                                             "cpu", maxBatch, chunked);
  const std::vector<Request> first = wave(10, cfg.vocabSize);
  // Wave 1 with every logits row: no prefix is reused (those rows would
  // be missing), every row must be the solo run's bits.
  const std::vector<Outcome> got = together(*batched, first, true);
  for (size_t i = 0; i < first.size(); ++i) {
    std::vector<float> want;
    const GenerationResult r =
        solo->generate(first[i].prompt, first[i].params, {}, &want);
    EXPECT_EQ(got[i].tokens, r.tokens) << "request " << i;
    ASSERT_EQ(got[i].logits.size(), want.size()) << "request " << i;
    EXPECT_EQ(0, std::memcmp(got[i].logits.data(), want.data(),
                             want.size() * 4))
        << "request " << i << ": logits differ from its solo run";
  }
  EXPECT_GT(metric(*batched, "glm_batch_step_rows_sum"),
            metric(*batched, "glm_batch_step_rows_count"))
      << "no decode step carried more than one request";
  EXPECT_EQ(metric(*batched, "glm_prefix_hit_tokens_total"), 0);
  // Wave 2: each prompt is a wave-1 sequence (prompt and the tokens fed
  // after it) and more, so its slot's prefix is reused.
  std::vector<Request> second;
  for (size_t i = 0; i < first.size(); ++i) {
    Request r = first[i];
    r.prompt.insert(r.prompt.end(), got[i].tokens.begin(),
                    got[i].tokens.end() - 1);
    r.prompt.push_back(int64_t(5 + i));
    r.params.maxNew = 3;
    second.push_back(r);
  }
  const std::vector<Outcome> again = together(*batched, second, false);
  int64_t hits = 0;
  for (size_t i = 0; i < second.size(); ++i) {
    hits += int64_t(second[i].prompt.size()) - 1;
    if (exactReuse)
      EXPECT_EQ(again[i].tokens,
                solo->generate(second[i].prompt, second[i].params).tokens)
          << "wave 2, request " << i;
    else
      EXPECT_EQ(again[i].tokens.size(), size_t(second[i].params.maxNew));
  }
  // Every prompt but its last token came from its wave-1 slot.
  EXPECT_EQ(metric(*batched, "glm_prefix_hit_tokens_total"), hits)
      << batched->metricsText();
}

} // namespace

TEST(Batching, EachRequestGetsItsSoloRun) {
  checkBatching(tinyPack("hf"), "", 1, 10, 4, {0}, true);
}

TEST(Batching, TrellisPlanOfTwoRanksWithPrefillChunks) {
  checkBatching(tinyPack("exlr8"), "mixed", 2, 10, 8, {8}, false);
}

TEST(Batching, FlashSpareRowsRunInTheKeptSlot) {
  const std::string dir = (fs::path(kGoldens) / "glm_flash_a").string();
  checkBatching(dir, "", 1, 11, 4, {0}, true);
}

TEST(Batching, MaxBatchIsBoundedByThePlansSlots) {
  const std::string dir = tinyPack("hf");
  auto pack = Pack::open(dir);
  auto plan = compilePlan(dir, 1, "", {1, 2}, "", {0}, 3);
  auto g = exec::makeBatchingGenerator(cpuExecutor(plan, dir),
                                       *pack->config(), 64, "cpu", 8, false);
  // Three sequences at once at most, in decode graphs of at most 2 rows.
  const std::vector<Outcome> got =
      together(*g, wave(6, pack->config()->vocabSize), false);
  EXPECT_EQ(got.size(), 6u);
  std::smatch m;
  const std::string text = g->metricsText();
  ASSERT_TRUE(std::regex_search(
      text, m, std::regex("glm_batch_step_rows_bucket\\{le=\"2\"\\} (\\d+)")));
  EXPECT_EQ(std::stoll(m[1]), metric(*g, "glm_batch_step_rows_count"));
}
