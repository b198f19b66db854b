//===- plan_executor.h - the one executor: runs what the plan says --------===//
//
// The runtime half of "the plan is the program" (ARCHITECTURE.md): for each
// rank of a plan it allocates the arena from the buffer table, writes the
// buffers' initial contents and patches their relocations, copies the weight
// bindings' byte ranges from the pack, runs the Load graph once, then runs a
// decode graph per step, resolving every op's arguments (buffer + offset,
// immediates, the launch's row count) and handing each launch to a Backend
// and each collective to the Collectives. It knows no model: no layer, no
// projection, no kernel family appears in it.
//
// Io convention (docs/plan-format.md "Io buffers"): before a step the
// executor writes the step's rows into the Io buffers "io.tokens",
// "io.positions" and "io.slots" (int32 per row: token id, position, KV-cache
// slot) and afterwards reads "io.logits" (fp32 [rows, vocab]). A paged plan
// (glmc compile --kv-page-tokens) also has "io.pages", every slot's page
// table, which the executor writes before a step where setPageTable changed
// it (identity tables after load: slot s's token t in page s * context /
// page + t / page, today's unpaged layout, while the pages last).
//
// Thread-safety: one thread drives an executor; backends are not shared.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plans/plan.h"
#include "runtime/exec/launch_bounds.h"
#include "runtime/formats/safetensors.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace glm::rt::exec {

/// One resolved launch argument (as the kernel receives it).
struct ResolvedArg {
  plan::ArgKind kind = plan::ArgKind::Buffer; // Buffer = an address
  uint64_t address = 0;                       // Buffer (0 = null)
  int64_t i = 0;                              // I32 / I64
  float f = 0.0f;                             // F32
  double d = 0.0;                             // F64
};

/// The device side of one rank: memory and kernel launches.
class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0; // "cpu" | "cuda"
  /// Allocates the rank's zeroed arena of `bytes`; returns the address the
  /// kernels see for its byte 0.
  virtual uint64_t allocateArena(uint64_t bytes) = 0;
  virtual void write(uint64_t address, const void *src, size_t bytes) = 0;
  virtual void read(uint64_t address, void *dst, size_t bytes) = 0;
  /// Makes kernel `index` of the plan launchable (load its code, find its
  /// twin); throws Error naming the kernel when it cannot.
  virtual void prepareKernel(uint32_t index, const plan::KernelDef &k) = 0;
  /// `programmatic`: the plan lets this launch start while the stream's
  /// previous kernel runs (OpDef::programmaticLaunch; the kernel's entry
  /// waits for it). A backend that runs launches one by one ignores it.
  virtual void launch(uint32_t kernel, const plan::LaunchDims &dims,
                      const std::vector<ResolvedArg> &args,
                      bool programmatic) = 0;
  /// Waits for everything launched so far.
  virtual void synchronize() = 0;
  /// Fills `words` 32-bit words at `address` (4-byte aligned) as one launch
  /// of the fill_random family does (splitmix64 of (seed, index) AND mask):
  /// the random-weights mode of benchmarks, in place of the pack's bytes.
  virtual void fillRandomWords(uint64_t address, uint64_t words,
                               uint64_t seed, uint32_t mask) = 0;

  // CUDA graphs. A backend that cannot capture returns false from
  // beginCapture and is launched op by op.
  /// Starts recording the launches that follow instead of running them.
  virtual bool beginCapture() { return false; }
  /// Ends the recording as graph `key` (replacing one of the same key).
  virtual void endCapture(uint32_t /*key*/) {}
  /// Runs recorded graph `key`.
  virtual void replay(uint32_t /*key*/) {}

  /// Per-launch timing of op-by-op launches: while on, each launch's device
  /// time is recorded; takeLaunchTimes returns the milliseconds of the
  /// launches since the last call, in launch order (waits for them).
  virtual void setLaunchTiming(bool on) = 0;
  virtual std::vector<double> takeLaunchTimes() = 0;
  /// Lets the calling thread use the backend (CUDA: makes its context
  /// current; a server's threads and a batching scheduler call the
  /// executor from threads other than the one that loaded it).
  virtual void bindThread() {}
};

/// Collectives between the ranks an executor runs (in this process or
/// across processes). Called with each rank's arena address of the
/// collective's buffer.
class Collectives {
public:
  virtual ~Collectives() = default;
  /// Runs collective `c` over the local ranks' buffers (addresses[i] of
  /// local rank i, on backends[i]).
  virtual void run(const plan::CollectiveDef &c,
                   const std::vector<Backend *> &backends,
                   const std::vector<uint64_t> &addresses) = 0;
  /// True when the collectives are enqueued on the backends' own streams
  /// (NCCL): no host synchronisation before them, and a CUDA graph may
  /// capture them. False when the host moves the bytes.
  virtual bool onDeviceStreams() const { return false; }
};

/// Refuses a collective whose dtype this runtime does not move: all-reduce
/// of f32 (rank order) or i64 (the exact fixed-point sums), all-gather of
/// f32.
void checkCollectiveDtype(const plan::CollectiveDef &c);

/// Collectives among ranks all run by this process: all-reduce sums the
/// ranks' fp32 buffers in rank order (the plan's "rank-order fp32 sum") or
/// their int64 buffers (exact);
/// all-gather copies rank r's slice [r*elements, (r+1)*elements) to every
/// rank.
std::unique_ptr<Collectives> inProcessCollectives();

}
namespace glm::rt::dist {
class HostComm;
}
namespace glm::rt::exec {

/// Collectives for one local rank per process joined by `comm` (not owned;
/// the cpu backend of `glm-engine launch`): the buffers travel through
/// HostComm::allGather and all-reduce sums them in rank order, so every
/// rank holds the bits the in-process run computes.
std::unique_ptr<Collectives> hostCommCollectives(dist::HostComm *comm);

/// One line of `--trace`: a launch or collective actually executed.
struct TraceEvent {
  uint32_t rank = 0;
  std::string graph; // "decode.1", "load"
  std::string op;    // OpDef::name
  std::string kernel; // KernelDef::name, or the collective's kind
  plan::LaunchDims dims;
  uint64_t bytes = 0; // weight bytes the op reads (OpDef::bytesRead)
  /// {"rank":..,"graph":..,"op":..,"kernel":..,"grid":[x,y,z],
  ///  "block":[x,y,z],"bytes":..}
  std::string json() const;
};
using TraceSink = std::function<void(const TraceEvent &)>;

class PlanExecutor {
public:
  /// Runs `ranks` (indices into plan.ranks) of `plan`, one backend each
  /// (same order). `packDir` holds the files the bindings name.
  PlanExecutor(std::shared_ptr<const plan::Plan> plan, std::string packDir,
               std::vector<uint32_t> ranks,
               std::vector<std::unique_ptr<Backend>> backends,
               std::unique_ptr<Collectives> collectives);
  ~PlanExecutor();

  /// Allocates, uploads the bindings, runs the Load graph. Call once.
  void load();
  /// One decode step of `tokens.size()` rows (a decode graph of exactly
  /// that size must exist) at the given positions and KV slots; returns
  /// logits [rows, vocab] as the first local rank holds them.
  std::vector<float> step(const std::vector<int32_t> &tokens,
                          const std::vector<int32_t> &positions,
                          const std::vector<int32_t> &slots);

  /// The plan has MTP draft graphs (glmc compile --draft mtp).
  bool hasDraft() const;
  /// One MTP draft token per row (a draft graph of exactly that size must
  /// exist): row i starts from hidden row hiddenRows[i] of the last step,
  /// verify or prefill chunk (the main model's row of the token before
  /// tokens[i]) and tokens[i], at MTP position positions[i] (the position
  /// of that hidden row) of slot slots[i]. Returns the draft logits [rows,
  /// vocab]. Each run replaces hidden row i by the MTP layer's output row:
  /// the next draft token runs with hiddenRows = 0..rows-1. The logits of
  /// the last step are gone after it (read them first).
  std::vector<float> draft(const std::vector<int32_t> &tokens,
                           const std::vector<int32_t> &positions,
                           const std::vector<int32_t> &slots,
                           const std::vector<int32_t> &hiddenRows);
  /// Runs the draft graph of `rows` rows on what the Io buffers hold (no
  /// Io writes, no logits read), replaying its CUDA graph as draft() does:
  /// the unit the draft benchmark times after one draft().
  void runDraft(uint32_t rows);
  /// One prefill chunk: `tokens` at positions start, start + 1, ... of KV
  /// slot `slot`, run through the smallest prefill graph of at least
  /// tokens.size() rows (the rows past the prompt are padding at the next
  /// positions, which later tokens overwrite before anything reads them:
  /// start + the graph's size must fit the KV cache). Returns the logits
  /// [tokens.size(), vocab] of the first local rank, or with `lastRowOnly`
  /// only the last token's [vocab]: what sampling needs. A 2048-token
  /// chunk's rows are 1.27 GB at GLM-5.3's vocabulary, and reading them back
  /// cost 40% of the prompt's time (docs/perf.md, session 19).
  std::vector<float> prefill(const std::vector<int32_t> &tokens,
                             int32_t start, int32_t slot,
                             bool lastRowOnly = false);
  /// The prefill graph sizes (chunk tokens) of the plan, ascending.
  std::vector<uint32_t> prefillChunks() const;
  /// Runs the prefill graph of `chunk` tokens on what the Io buffers hold
  /// (no Io writes, no logits read), op by op: the unit the prefill
  /// benchmark times after one prefill() has written the rows.
  void runPrefill(uint32_t chunk);

  /// Random-weights mode (benchmarks of index-only packs): load() fills each
  /// weight binding's destination with fill_random words (kRandomWeightMask:
  /// finite as fp8, bf16, f16 and fp32; a seed per binding; a partial last
  /// word stays zero) instead of reading the pack. Call before load().
  void useRandomWeights(uint64_t seed);
  static constexpr uint32_t kRandomWeightMask = 0xBFBFBFBFu;
  /// Replay each decode bucket from a CUDA graph captured at its first step,
  /// where every backend can capture and the collectives run on device
  /// streams; never while a trace is set (the trace lists launches one by
  /// one). Default on.
  void useGraphs(bool on) { graphs_ = on; }
  /// Runs the decode graph of `rows` rows on what the Io buffers hold (no Io
  /// writes, no logits read): the unit the step benchmark times. graph:
  /// replay (capturing first) as step() does; false: op-by-op launches.
  void runDecode(uint32_t rows, bool graph);
  /// The decode graph of `rows` rows launched op by op with each launch
  /// timed by its backend: per launch of local rank 0, op, kernel and ms.
  struct LaunchTime {
    std::string op, kernel;
    double ms = 0;
  };
  std::vector<LaunchTime> profileDecode(uint32_t rows);
  /// The same for the prefill graph of `chunk` tokens (after a prefill()
  /// wrote its rows).
  std::vector<LaunchTime> profilePrefill(uint32_t chunk);
  /// Weight bytes local rank 0's decode graph of `rows` rows reads (the sum
  /// of its ops' bytesRead, as the trace reports them).
  uint64_t decodeWeightBytes(uint32_t rows) const;
  Backend &backend(size_t local);

  void setTrace(TraceSink sink) { trace_ = std::move(sink); }
  /// The bytes of buffer `buffer` of local rank `local` (tests, dumps).
  std::vector<uint8_t> readBuffer(size_t local, uint32_t buffer);
  const plan::Plan &plan() const { return *plan_; }
  /// The plan keeps recurrent per-sequence state (GLM-5.3-Flash's KDA
  /// state): every row of a prefill chunk advances it, so chunks must be
  /// full (prefill refuses padding).
  bool recurrentState() const;
  /// Launches and collectives run so far.
  uint64_t launches() const { return launches_; }

  // Paged KV (glmc compile --kv-page-tokens; io.pages).
  /// Tokens a page; 0 when the plan's caches are unpaged.
  int64_t pageTokens() const { return io_.pageTokens; }
  /// Pages the caches hold (0 unpaged).
  int64_t kvPages() const { return io_.pages; }
  /// Slot `slot`'s page table: pages[i] holds its tokens [i * P, (i + 1) *
  /// P), context / P entries, each a page < kvPages() (throws otherwise).
  /// Written to the device before the next step, prefill or draft.
  void setPageTable(int32_t slot, const std::vector<int32_t> &pages);

private:
  struct RankState;
  /// Backend::bindThread of every local rank: each public entry that
  /// reaches a backend starts with it.
  void bindThread();
  DType storedDtype(const std::string &path, const plan::WeightBinding &w);
  std::map<std::string, std::shared_ptr<SafetensorsFile>> headers_;
  void runGraph(const plan::GraphDef *const *graphs, uint32_t rows);
  /// profileDecode / profilePrefill: `graphs` (one a local rank) op by op,
  /// each launch of local rank 0 timed.
  std::vector<LaunchTime>
  profileGraphs(const std::vector<const plan::GraphDef *> &graphs,
                uint32_t rows);
  /// io.tokens / io.positions / io.slots of every rank: one row each.
  /// A prefill chunk's LM head computes rows first .. last only
  /// (io.logit_rows, gemm_dense's window); plans without it compute all.
  void writeLogitRows(int32_t first, int32_t last);
  void writeIoRows(const std::vector<int32_t> &tokens,
                   const std::vector<int32_t> &positions,
                   const std::vector<int32_t> &slots);
  /// Rows [first, first + rows) of local rank 0's io.logits (or another Io
  /// logits buffer), after the step.
  std::vector<float> readLogits(uint32_t rows,
                                const char *buffer = "io.logits",
                                uint32_t first = 0);
  std::vector<const plan::GraphDef *>
  graphsOf(plan::GraphKind kind, uint32_t rows) const;
  std::vector<const plan::GraphDef *> decodeGraphs(uint32_t rows) const {
    return graphsOf(plan::GraphKind::Decode, rows);
  }
  /// Runs the graphs (one per local rank) of bucket `key`, replaying its
  /// CUDA graph where the backends capture (recording it the first time).
  void runCaptured(const std::vector<const plan::GraphDef *> &graphs,
                   uint32_t rows, uint32_t key, bool graph);
  void uploadBindings();
  void fillBindingsRandom();
  bool canCapture() const;
  bool randomWeights_ = false;
  uint64_t seed_ = 0;
  bool graphs_ = true;
  std::vector<uint32_t> captured_; // decode buckets with a recorded graph
  // While profiling: (op, kernel) of each launch of local rank 0.
  std::vector<std::pair<std::string, std::string>> *profiled_ = nullptr;
  std::shared_ptr<const plan::Plan> plan_;
  IoBounds io_; // what writeIoRows and draft() let into the Io rows
  std::vector<int32_t> pageTables_; // [slots][context / page] (paged plans)
  bool pagesDirty_ = false;         // pageTables_ not yet on the devices
  std::string packDir_;
  std::vector<std::unique_ptr<RankState>> ranks_;
  std::unique_ptr<Collectives> collectives_;
  TraceSink trace_;
  uint64_t launches_ = 0;
  bool loaded_ = false;
};

} // namespace glm::rt::exec
