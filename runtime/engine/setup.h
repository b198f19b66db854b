//===- setup.h - from command-line options to a ready Generator -----------===//
//
// Shared by glm-engine's subcommands (run, serve, later bench/launch): reads
// the plan (or takes --sparks without one), opens the pack, loads the
// weights for the chosen backend and finds the tokenizer. Errors are
// glm::rt::Error with one line that says what to do.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/gen/generator.h"
#include "runtime/formats/pack.h"

#include <memory>
#include <string>

namespace CLI {
class App;
}

namespace glm::rt {
class Tokenizer;
namespace dist {
class HostComm;
class DeviceComm;
}

struct EngineOptions {
  std::string plan;    // path, or "-" for no plan (development)
  std::string pack;    // pack directory
  /// cpu | cuda (run the plan) | reference; "" = cpu with a plan,
  /// reference with PLAN `-`.
  std::string backend;
  std::string trace;            // --trace FILE: one JSON line per launch
  bool noCudaGraphs = false;    // --no-cuda-graphs: cuda launches op by op
  std::string prefill = "chunked"; // --prefill chunked|tokens
  std::string draft = "none";      // --draft none|mtp
  int draftTokens = 3;             // --draft-tokens k
  int maxBatch = 1;                // serve --max-batch B (batching_generator.h)
  int sparks = 0;      // without a plan: ranks to emulate (default 1)
  std::string manifest; // exlr8 manifest (default: the plan's)
  int64_t maxContext = 0; // 0 = the plan's, else 4096
  // Set by runAsRank (dist_options.h) for a rank of several processes: the
  // control plane (not owned) and the CUDA device of this rank (-1 = 0).
  dist::HostComm *hostComm = nullptr;
  int device = -1;
  // --backend cuda with several ranks: this rank's NCCL communicator (not
  // owned; glm-engine launch). Its rank() is the executor's rank.
  dist::DeviceComm *deviceComm = nullptr;
};

/// The backend a run uses: `backend` when given, else cpu with a plan and
/// reference with PLAN `-` (the one place that default is decided).
std::string effectiveBackend(const std::string &backend,
                             const std::string &plan);

/// Adds PLAN, --pack, --backend, --sparks, --manifest, --max-context.
void addEngineOptions(CLI::App &sub, EngineOptions &o);

struct LoadedEngine {
  std::unique_ptr<Pack> pack;
  std::unique_ptr<Generator> generator;
  std::shared_ptr<Tokenizer> tokenizer; // null when the pack has none
  std::string tokenizerPath;            // where it was looked for
  std::string chatTemplatePath;         // "" when absent
  int ranks = 1;
  std::vector<int64_t> eosIds;          // plan's, else config's
};

LoadedEngine loadEngine(const EngineOptions &o);

/// The cpu backend holds every weight as fp32: refuses (Error) when
/// `localRanks` such copies exceed the host memory left, before anything is
/// allocated (a Spark freezes rather than fails). loadEngine checks one copy;
/// glm-engine launch checks all of its ranks before starting them.
void checkCpuBackendMemory(const Pack &pack, int localRanks);

} // namespace glm::rt
