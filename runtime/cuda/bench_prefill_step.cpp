//===- bench_prefill_step.cpp - whole prompts through the prefill graphs --===//
//
// `glm-engine bench --suite prefill-step --plan PLAN --pack DIR`: prompts of
// 512, 2048, 8192 and 32768 tokens (those the plan's context holds) through
// PlanExecutor::prefill from position 0, chunk after chunk as the generator
// feeds them (the largest chunk that fits what is left; the rest in the
// smallest chunk, padded), random weights generated on the device. Per
// prompt: the time to the logits of its last token (only that row read
// back, as the generators do without --logits-out; TTFT without
// tokenizer, sampling and HTTP) and tok/s; the token loop it replaces,
// measured in the same run (the batch-1 decode step at the prompt's middle
// position, times the prompt's tokens); and the fraction of the H200's
// dense fp16 tensor-core peak (989 TFLOP/s) the prompt's FLOPs reach:
// GEMM FLOPs (2 per weight each token multiplies: the batch-1 graph's
// decoded trellis weights and dense weight bytes, one byte a weight for the
// fp8 formats the projections use) plus absorbed-MLA attention (per layer,
// head and attended key: 2 (kv_lora + rope) + 2 kv_lora) and the DSA
// indexer's scores (per indexer layer, head and earlier token: 2 head_dim).
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/cuda/bench.h"
#include "runtime/cuda/bench_util.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/plan_backend.h"
#include "runtime/exec/plan_executor.h"
#include "runtime/formats/pack.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <set>
#include <sstream>

namespace glm::rt::cuda {

namespace {

constexpr double kH200DenseFp16TFlops = 989.0; // specs/gb10-and-h200.md

/// FLOPs of prompt positions [0, n): GEMMs at `gemmPerToken` FLOPs a token,
/// attention over min(p + 1, selected) keys, the indexer over p + 1.
double promptFlops(int64_t n, double gemmPerToken, const ModelConfig &c,
                   int64_t layers, int64_t indexerLayers) {
  double attn = 0, index = 0;
  const double perKey =
      double(c.numHeads) *
      (2.0 * double(c.kvLoraRank + c.qkRopeHeadDim) + 2.0 * c.kvLoraRank);
  const double perIndexKey = double(c.indexNHeads) * 2.0 * c.indexHeadDim;
  const int64_t sel = c.indexTopk > 0 ? c.indexTopk : INT64_MAX;
  for (int64_t p = 0; p < n; ++p) {
    attn += double(std::min(p + 1, sel)) * perKey;
    index += double(p + 1) * perIndexKey;
  }
  return double(n) * gemmPerToken + double(layers) * attn +
         double(indexerLayers) * index;
}

} // namespace

std::string runPrefillStepBench(const BenchOptions &opt, std::ostream &log) {
  auto p = openBenchPlan(opt, "prefill-step");
  PackOpenOptions po;
  po.indexOnly = true;
  po.manifest = p->model.manifest;
  const ModelConfig cfg = *Pack::open(opt.stepPack, po)->config();
  CudaDevice dev(opt.device);
  std::vector<std::unique_ptr<exec::Backend>> backends;
  backends.push_back(makeCudaBackend(*p, dev));
  exec::PlanExecutor engine(p, opt.stepPack, {0}, std::move(backends),
                            deviceCollectives(nullptr));
  engine.useRandomWeights(1);
  engine.load();
  const std::vector<uint32_t> chunks = engine.prefillChunks();
  check(!chunks.empty(), opt.planPath, ": bench --suite prefill-step needs "
        "prefill graphs; compile with --prefill-chunks 512,2048");
  const int64_t ctx = p->model.maxContext;
  log << "prefill-step: " << opt.planPath << " (" << p->model.numLayers
      << " layers, context " << ctx << ", chunks";
  for (uint32_t c : chunks)
    log << " " << c;
  log << ") with random weights on " << dev.name() << "\n";

  // Weights each token multiplies, from the batch-1 decode graph: trellis
  // ops say how many they decode, dense ops read one fp8 byte a weight
  // (bf16 vectors and the router count double: a small overstatement).
  double weightsPerToken = 0;
  int64_t indexerLayers = 0;
  for (const plan::GraphDef &g : p->ranks[0].graphs)
    if (g.kind == plan::GraphKind::Decode && g.size == 1) {
      std::set<std::string> indexers;
      for (const plan::OpDef &op : g.ops) {
        weightsPerToken += double(op.decodedWeights ? op.decodedWeights
                                                    : op.bytesRead);
        if (op.name.find("indexer") != std::string::npos && op.layer >= 0)
          indexers.insert(std::to_string(op.layer));
      }
      indexerLayers = int64_t(indexers.size());
    }
  const double gemmPerToken = 2.0 * weightsPerToken;

  CUstream s = backendStream(engine.backend(0));
  std::ostringstream table;
  table << "| prompt | TTFT ms | tok/s | token loop ms | loop / TTFT | TFLOP/s "
           "| of fp16 peak |\n|---|---|---|---|---|---|---|\n";
  for (int64_t n : {512, 2048, 8192, 32768}) {
    if (n > ctx)
      continue;
    std::vector<int32_t> toks(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j)
      toks[size_t(j)] = int32_t((j * 7919 + 11) % p->model.vocabSize);
    // The chunk sequence the generator would run (PlanGenerator): (start,
    // tokens) of each.
    std::vector<std::pair<int64_t, uint32_t>> seq;
    for (int64_t at = 0; at < n;) {
      const int64_t left = n - at;
      uint32_t c = 0;
      for (uint32_t k : chunks)
        if (k <= left)
          c = k;
      if (c == 0)
        c = uint32_t(left); // the rest, padded to the smallest chunk
      seq.push_back({at, c});
      at += c;
    }
    auto runChunk = [&](std::pair<int64_t, uint32_t> ch) {
      engine.prefill(std::vector<int32_t>(toks.begin() + ch.first,
                                          toks.begin() + ch.first + ch.second),
                     int32_t(ch.first), 0, /*lastRowOnly=*/true);
    };
    auto runPrompt = [&] {
      for (const auto &ch : seq)
        runChunk(ch);
      GLM_CU(cuStreamSynchronize(s));
    };
    runPrompt(); // warm-up: kernels loaded, caches written
    const int reps = n >= 8192 ? 1 : 3;
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      runPrompt();
      ms.push_back(std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - t0)
                       .count());
    }
    const double ttft = median(ms);
    // The token loop: the batch-1 step at the prompt's middle position (its
    // cache filled by the prompt above), times n.
    const int32_t mid = int32_t(n / 2);
    engine.step({toks[size_t(mid)]}, {mid}, {0});
    const double stepMs = timeMedianMs(s, std::max(3, opt.reps), 500.0,
                                       [&] { engine.runDecode(1, true); });
    // Past the first chunk, where the time goes as the context grows: the
    // decode step at the middle and the last chunk (after its rows are
    // written again), each launch timed, the slowest kernels.
    if (n >= 8192) {
      const std::string at = "prefill-step " + std::to_string(n);
      timeKernels([&] { return engine.profileDecode(1); }, 3)
          .printTo(log, (at + " step at " + std::to_string(mid) + ":").c_str(),
                   10);
      runChunk(seq.back());
      timeKernels([&] { return engine.profilePrefill(seq.back().second); }, 1)
          .printTo(log,
                   (at + " chunk at " + std::to_string(seq.back().first) + ":")
                       .c_str(),
                   12);
    }
    const double loop = stepMs * double(n);
    const double flops =
        promptFlops(n, gemmPerToken, cfg, p->model.numLayers, indexerLayers);
    const double tflops = flops / (ttft * 1e-3) / 1e12;
    char line[400];
    std::snprintf(line, sizeof line,
                  "prefill-step: %6lld tokens: %9.1f ms (%.0f tok/s); token "
                  "loop %.0f ms (step %.3f ms at position %d): %.1fx; %.1f "
                  "TFLOP/s = %.3f of the fp16 peak\n",
                  (long long)n, ttft, n / (ttft * 1e-3), loop, stepMs, mid,
                  loop / ttft, tflops, tflops / kH200DenseFp16TFlops);
    log << line;
    std::snprintf(line, sizeof line, "| %lld | %.1f | %.0f | %.0f | %.1fx | "
                  "%.1f | %.3f |\n", (long long)n, ttft, n / (ttft * 1e-3),
                  loop, loop / ttft, tflops, tflops / kH200DenseFp16TFlops);
    table << line;
  }
  return table.str();
}

} // namespace glm::rt::cuda
