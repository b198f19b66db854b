//===- bench_serve.cpp - continuous batching on the GPU, timed ------------===//
//
// `glm-engine bench --suite serve --plan PLAN --pack DIR`: what `serve
// --max-batch` does with the GPU, without HTTP, tokenizer or template: the
// batching generator (runtime/exec/batching_generator.h) over PLAN with
// random weights generated on the device, requests as token ids.
//  - streams: S requests at once (S = 1, 2, 4, 8, 16 while the plan holds
//    them), a short prompt and kDecodeTokens greedy tokens each; aggregate
//    tok/s and its ratio to one stream (each S is run once untimed first,
//    so CUDA graph capture is not timed);
//  - arrivals: kArrivals requests of kArrivalPrompt prompt tokens arriving
//    at a steady interval (80% of the rows per second the largest batch
//    runs), TTFT p50 / p99 and the tok/s served;
//  - shared prefix: a cold prompt of opt.servePrefix tokens, then another
//    with the same prefix and 16 tokens more: the second's TTFT as a ratio
//    to the first (its slot already holds the prefix).
// Every figure comes from this run; nothing is modelled.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/cuda/bench.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/plan_backend.h"
#include "runtime/exec/batching_generator.h"
#include "runtime/exec/launch_bounds.h"
#include "runtime/exec/plan_executor.h"
#include "runtime/formats/pack.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

namespace glm::rt::cuda {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kDecodeTokens = 64;  // generated per stream
constexpr int kStreamPrompt = 16;  // prompt tokens per stream
constexpr int kArrivals = 32;      // requests of the arrival run
constexpr int kArrivalPrompt = 64; // decode rows (a chunk is half prompt)
constexpr int kArrivalTokens = 32;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// Token ids of request `id`: distinct per request (no shared prefix).
std::vector<int64_t> promptOf(int id, int n, int64_t vocab) {
  std::vector<int64_t> p;
  uint64_t x = 0x9E3779B97F4A7C15ull * uint64_t(id + 1);
  for (int i = 0; i < n; ++i) {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    p.push_back(int64_t((x * 2685821657736338717ull) >> 33) % vocab);
  }
  return p;
}

struct Timing {
  double ttft = 0, end = 0; // seconds after the request started
  int64_t tokens = 0;
};

/// One request through `g` now: its TTFT and end, from `start`.
Timing request(Generator &g, const std::vector<int64_t> &prompt, int maxNew,
               Clock::time_point start) {
  SamplingParams sp;
  sp.maxNew = maxNew;
  Timing t;
  const Clock::time_point begin = Clock::now();
  g.generate(prompt, sp, [&](int64_t) {
    if (t.tokens++ == 0)
      t.ttft = seconds(begin, Clock::now());
    return true;
  });
  t.end = seconds(start, Clock::now());
  return t;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, size_t(q * v.size()))];
}

} // namespace

std::string runServeBench(const BenchOptions &opt, std::ostream &log) {
  auto p = openBenchPlan(opt, "serve");
  PackOpenOptions po;
  po.indexOnly = true;
  po.manifest = p->model.manifest;
  const ModelConfig cfg = *Pack::open(opt.stepPack, po)->config();
  CudaDevice dev(opt.device);
  log << "serve: " << opt.planPath << " (" << p->model.numLayers
      << " layers, " << exec::ioBounds(*p).slots << " KV slots, context "
      << p->model.maxContext << ") with random weights on " << dev.name()
      << "\n";
  std::vector<std::unique_ptr<exec::Backend>> backends;
  backends.push_back(makeCudaBackend(*p, dev));
  auto ex = std::make_unique<exec::PlanExecutor>(
      p, opt.stepPack, std::vector<uint32_t>{0}, std::move(backends),
      deviceCollectives(nullptr));
  ex->useRandomWeights(1);
  ex->load();
  uint32_t largest = 0;
  for (const plan::GraphDef &g : p->ranks[0].graphs)
    if (g.kind == plan::GraphKind::Decode)
      largest = std::max(largest, g.size);
  auto gen = exec::makeBatchingGenerator(std::move(ex), cfg,
                                         p->model.maxContext, "cuda", 64,
                                         /*chunkedPrefill=*/true);
  std::ostringstream table;
  char row[256];
  table << "| streams | tok/s | x 1 stream | ms per token per stream | "
           "ms per step in the executor |\n|---|---|---|---|---|\n";

  // Streams: S at once, all started together.
  int id = 0;
  auto together = [&](int S, int maxNew) {
    std::vector<Timing> t(static_cast<size_t>(S));
    std::vector<std::thread> th;
    const Clock::time_point start = Clock::now();
    for (int s = 0; s < S; ++s) {
      const std::vector<int64_t> prompt =
          promptOf(id++, kStreamPrompt, cfg.vocabSize);
      th.emplace_back([&, s, prompt] {
        t[size_t(s)] = request(*gen, prompt, maxNew, start);
      });
    }
    for (std::thread &x : th)
      x.join();
    return std::make_pair(t, seconds(start, Clock::now()));
  };
  double one = 0, bestTokS = 0;
  // Decode steps run and their time so far (the generator's counters).
  auto counters = [&] {
    const std::string m = gen->metricsText();
    auto value = [&](const std::string &name) {
      const size_t at = m.find("\n" + name + " ");
      return at == std::string::npos
                 ? 0.0
                 : std::stod(m.substr(at + name.size() + 2));
    };
    return std::make_pair(value("glm_batch_step_rows_count"),
                          value("glm_batch_step_seconds_total"));
  };
  for (int S : {1, 2, 4, 8, 16}) {
    if (uint32_t(S) > largest)
      break;
    together(S, 4); // capture the buckets S uses
    const auto before = counters();
    auto [t, wall] = together(S, kDecodeTokens);
    const auto after = counters();
    const double stepMs = 1e3 * (after.second - before.second) /
                          std::max(1.0, after.first - before.first);
    // Decode only: from the last first token to the end.
    double firstAll = 0;
    for (const Timing &x : t)
      firstAll = std::max(firstAll, x.ttft);
    const double tokS = double(S) * (kDecodeTokens - 1) / (wall - firstAll);
    if (S == 1)
      one = tokS;
    bestTokS = tokS;
    std::snprintf(row, sizeof row, "| %d | %.1f | %.2f | %.2f | %.2f |\n", S,
                  tokS, tokS / one, 1e3 * S / tokS, stepMs);
    table << row;
    log << "serve-streams: " << S << " at once: " << tokS
        << " tok/s aggregate (" << tokS / one << "x one stream); a step "
        << stepMs << " ms in the executor, " << 1e3 * S / tokS
        << " ms per token per stream\n";
  }
  // Arrivals at a steady rate: 80% of what the largest batch runs, a
  // request being its prompt's rows and its tokens' (the prompt is too
  // short for a prefill chunk: it runs as decode rows).
  const double perRequestS =
      double(kArrivalPrompt + kArrivalTokens) / (0.8 * bestTokS);
  std::vector<Timing> t(kArrivals);
  std::vector<std::thread> th;
  const Clock::time_point start = Clock::now();
  for (int r = 0; r < kArrivals; ++r) {
    std::this_thread::sleep_until(
        start + std::chrono::duration<double>(r * perRequestS));
    const std::vector<int64_t> prompt =
        promptOf(id++, kArrivalPrompt, cfg.vocabSize);
    th.emplace_back([&, r, prompt] {
      t[size_t(r)] = request(*gen, prompt, kArrivalTokens, start);
    });
  }
  for (std::thread &x : th)
    x.join();
  const double wall = seconds(start, Clock::now());
  std::vector<double> ttft;
  int64_t tokens = 0;
  for (const Timing &x : t) {
    ttft.push_back(x.ttft);
    tokens += x.tokens;
  }
  std::snprintf(row, sizeof row,
                "%d requests of %d prompt + %d tokens, one every "
                "%.1f ms: TTFT p50 %.1f ms, p99 %.1f ms; %.1f tok/s served\n",
                kArrivals, kArrivalPrompt, kArrivalTokens, perRequestS * 1e3,
                percentile(ttft, 0.5) * 1e3, percentile(ttft, 0.99) * 1e3,
                double(tokens) / wall);
  table << "\narrivals: " << row;
  log << "serve-arrivals: " << row;

  // A shared prefix: cold, then the same prefix and 16 tokens more.
  const int prefix =
      int(std::min<int64_t>(opt.servePrefix, p->model.maxContext - 64));
  std::vector<int64_t> cold = promptOf(id++, prefix, cfg.vocabSize);
  const Timing c = request(*gen, cold, 1, Clock::now());
  std::vector<int64_t> warm = cold;
  const std::vector<int64_t> more = promptOf(id++, 16, cfg.vocabSize);
  warm.insert(warm.end(), more.begin(), more.end());
  const Timing w = request(*gen, warm, 1, Clock::now());
  std::snprintf(row, sizeof row,
                "%d-token prompt cold TTFT %.1f ms; with its "
                "prefix held, %d + 16 tokens TTFT %.1f ms (%.1fx faster)\n",
                prefix, c.ttft * 1e3, prefix, w.ttft * 1e3, c.ttft / w.ttft);
  table << "shared prefix: " << row;
  log << "serve-prefix: " << row;
  log << gen->metricsText();
  return table.str();
}

} // namespace glm::rt::cuda
