//===- bench.h - device benchmarks printed as ratios to copy bandwidth ----===//
//
// `glm-engine bench`: the measured device-to-device copy bandwidth (the
// yardstick), the routed experts of a decode step (8 x gate/up/down through
// the two moe_trellis launches) at GLM-5.3 and Flash expert shapes
// (K2/K3/K4 x MCG/MUL1 x E4M3, batch 1 and 8) and a whole MoE layer decode
// step at batch 1 (router GEMV + router, 8 routed experts + the shared expert,
// reductions, Hadamards) captured as a CUDA graph, beside the old
// one-block-per-(half, expert) kernel; --moe-configs picks launch
// configurations (see bench.cpp). Weights are random trellis bytes generated on the device; kernels
// come from codegen exactly as a plan's do. CUDA events, warm-ups, medians.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plans/plan.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace glm::rt {
class Pack;
struct ModelConfig;
} // namespace glm::rt

namespace glm::rt::cuda {

struct BenchOptions {
  // copy | expert | moe-layer | all | prefill | step | dense | gemv | flash
  std::string suite = "all";
  int device = 0;
  int reps = 15;               // timed repetitions (median reported)
  double copyGiB = 2.0;        // bytes per copy
  int layers = 8;              // distinct layers per moe-layer graph
  // moe-layer / expert launch configurations to compare (bench.cpp
  // moeConfigs: "split:group:threads:pipe:minblocks[:blocksPerSm],...";
  // empty = the defaults) and whether only the E4M3 layer cases run.
  std::string moeConfigs;
  bool e4m3Only = false;
  // --suite step (bench_plan.cpp): the pack a plan was compiled for (an
  // index-only one works: glmc synth --preset glm53 --layers 36
  // --index-only) and the position the step runs at.
  std::string stepPack;
  int stepPosition = 64;
  // --plan (bench_plan.cpp): a 1-Spark plan of stepPack, where the
  // measured µs per launch by kernel name go, and whether the step replays
  // a CUDA graph.
  std::string planPath, measuredOut;
  bool graphs = true;
  // --suite serve (bench_serve.cpp): the shared prefix's tokens.
  int servePrefix = 4096;
};

struct BenchRow {
  std::string suite, name;
  double us = 0;    // median time per unit (matrix, layer, copy)
  double bytes = 0; // bytes the unit must move (weights; copy: read+write)
  double ratio = 0; // (bytes / time) / copy bandwidth
};

struct BenchResult {
  std::string device;
  double copyGBs = 0; // measured, read + write
  std::vector<BenchRow> rows;
};

/// Runs the suites; progress and per-case lines go to `log`. Throws Error on
/// an unknown suite or a CUDA failure. Random weight bytes come from the
/// fill_random family (codegen/templates/fill_random.cuh).
BenchResult runBench(const BenchOptions &opt, std::ostream &log);

/// The short table (one line per row, header first).
std::string formatBenchTable(const BenchResult &r);

/// `--suite prefill` (bench_prefill.cpp): gemm_trellis TFLOP/s at M = 512,
/// 2048, 8192 on GLM-5.3 expert and attention shapes, K2/K3/K4, against
/// cuBLAS fp16 GEMM on the same shapes (ours/cuBLAS); returns the table.
/// Progress and rows go to `log`. Throws Error on a CUDA/cuBLAS failure.
std::string runPrefillBench(const BenchOptions &opt, std::ostream &log);

/// `--suite step --plan PLAN` (bench_plan.cpp): the plan executor runs the
/// batch-1 decode step of a 1-Spark plan of opt.stepPack on this GPU with
/// random weights generated on the device: graph and op-by-op time, tok/s,
/// the plan's weight bytes per token and their ratio to r.copyGBs, the
/// launch-gap share and the time per kernel; with opt.measuredOut the µs per
/// launch by kernel name for `glmc inspect PLAN --measured`. Rows are
/// appended to `r`. Throws Error when the plan is not the pack's (naming
/// both hashes), has more than one rank, or its arena does not fit the GPU.
void runPlanStepBench(const BenchOptions &opt, BenchResult &r,
                      std::ostream &log);

/// The 1-Spark plan opt.planPath of pack opt.stepPack, read against the
/// pack's hashes (bench_plan.cpp); throws Error naming what to do when
/// either is missing, the plan is another pack's or has several ranks.
std::shared_ptr<plan::Plan> openBenchPlan(const BenchOptions &opt,
                                          const char *suite);

/// `--suite serve --plan PLAN` (bench_serve.cpp): the batching generator of
/// `glm-engine serve --max-batch` over PLAN on this GPU with random
/// weights: aggregate decode tok/s at 1, 2, 4, 8, 16 concurrent streams
/// (those the plan's KV slots and decode graphs hold) and their ratio to
/// one stream; TTFT p50 / p99 of requests arriving at a steady rate; the
/// TTFT of a prompt whose opt.servePrefix-token prefix a slot holds, as a
/// ratio to the cold prompt. Returns the table.
std::string runServeBench(const BenchOptions &opt, std::ostream &log);

/// `--suite prefill-step --plan PLAN` (bench_prefill_step.cpp): prompts of
/// 512 .. 32768 tokens through the plan's prefill graphs from position 0
/// with random weights: TTFT, tok/s, the token loop measured in the same run
/// and the fraction of the H200's dense fp16 peak; returns the table.
std::string runPrefillStepBench(const BenchOptions &opt, std::ostream &log);

/// `--suite dense` (bench_dense.cpp): the GLM-5.3 trellis dense projections
/// at K2/K3/K4 MCG E4M3, batch 1 and 8, legacy dense_gemv_trellis vs
/// dense_trellis (default tuning and the best of a sweep), µs and ratio to
/// r.copyGBs; rows are appended to `r`.
void runDenseBench(const BenchOptions &opt, BenchResult &r, std::ostream &log);

/// `--suite gemv` (bench_gemv.cpp): dense_gemv at the step's bf16 / FP8-row
/// / MXFP8 shapes (LM head, q_a, kv_a, indexer, router) for each rows-per-
/// warp and weight-load choice, the compiler's default marked; µs and ratio
/// to r.copyGBs; rows are appended to `r`.
void runGemvBench(const BenchOptions &opt, BenchResult &r, std::ostream &log);

/// `--suite flash` (bench_flash.cpp): the GLM-5.3-Flash decode families at
/// full size — kda_decode (B = 1..8, two row/thread choices), mhc_mix /
/// mhc_post and the mHC fn GEMV (B = 1, 8), kpool_store and the pooled
/// indexer_scores_ctx / dsa_select (context 8192, 65536) — µs per launch
/// over distinct per-layer buffers and the ratio to r.copyGBs; rows are
/// appended to `r`, one summary line per kernel goes to `log`.
void runFlashBench(const BenchOptions &opt, BenchResult &r, std::ostream &log);

} // namespace glm::rt::cuda
