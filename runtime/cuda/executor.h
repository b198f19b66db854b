//===- executor.h - the CUDA backend: batched decode on quantized weights -===//
//
// CudaForward runs the GLM-5.3 forward of runtime/cpu/forward.cpp on one GPU
// (one rank of a tensor-parallel group) from the pack's own bytes: every
// weight is uploaded as stored (trellis tiles per tensor or per exlr8 half,
// BF16/FP8 data and scales; see device_weights.h) and multiplied by the
// codegen kernel of its format (moe_trellis: the routed and shared trellis
// experts of a layer in two launches, or the legacy expert_gemv_trellis +
// moe_reduce; dense_gemv_trellis / dense_gemv for dense tensors,
// dense_gemv_f32 for F32 tensors). The MLA attention reads kv_b_proj as
// stored (BF16/FP8; trellis kv_b is expanded to fp32 once). Activations are
// fp32; GEMV sums are fp32 (fp64 for F32 weights and where the helper
// kernels follow the reference's order: norms, softmax, indexer scores,
// routing), so logits match --backend cpu to ~1e-4 relative (not
// bit-exactly) and greedy tokens agree.
//
// Batched decode: stepBatch() advances 1..maxBatch sequences by one token
// each. Per-row values (token, position, cache slot) live in device memory;
// the whole step (all layers, LM head, collectives) is captured as one CUDA
// graph per batch size on first use and replayed after.
//
// Tensor parallelism: rank r of `tp` uploads and computes only its units
// (attention heads, expert halves, dense MLP chunks, its vocabulary slice of
// the LM head; the small replicated projections run on every rank) and
// combines them with comm->allReduceSum / allGather inside the graph. With
// comm == nullptr (or size 1) the rank must be 0 of a 1-rank layout.
//
// Prefill seam: a prompt goes through stepBatch() one token at a time;
// a chunked tensor-core prefill replaces the loop in CudaGenerator::generate
// (executor.cpp, `prefill`), writing the same caches.
//
// Thread-safety: one thread drives a CudaForward; the Generator serialises
// generate() calls.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plans/plan.h"
#include "runtime/cpu/generator.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace glm::rt {
class Pack;
namespace dist {
class DeviceComm;
}
} // namespace glm::rt

namespace glm::rt::cuda {

struct CudaOptions {
  int64_t maxContext = 4096; // tokens per sequence (KV cache rows)
  int maxBatch = 1;          // sequences stepped at once (cache slots)
  int rank = 0;              // this process's rank in the TpLayout
  dist::DeviceComm *comm = nullptr;
  int device = 0;
  /// The plan's kernels, searched by name before compiling with NVRTC.
  std::vector<plan::KernelDef> planKernels;
  bool useGraphs = true; // capture/replay one CUDA graph per batch size
  /// Benchmark only: random weight bytes generated on the device instead
  /// of the pack's (index-only packs), and at most this many layers (-1 all).
  bool randomWeights = false;
  int64_t maxLayers = -1;
  /// Trellis experts: "moe_trellis" (the routed and shared experts of a
  /// layer in two launches) or "legacy" (expert_gemv_trellis + moe_reduce
  /// per group). Empty: $GLM_EXPERT_KERNEL, else moe_trellis. A layer
  /// moe_trellis cannot run (intermediate width over 16 halves of 128,
  /// batch x experts per token over 64, a shared expert in another
  /// format) uses legacy either way.
  std::string expertKernel;
};

class CudaForward {
public:
  /// Uploads this rank's weights (progress bar on stderr) and builds the
  /// kernels. Throws Error naming the tensor for a format without a kernel.
  CudaForward(const Pack &pack, const cpu::TpLayout &tp,
              const CudaOptions &opt);
  ~CudaForward();
  CudaForward(const CudaForward &) = delete;
  CudaForward &operator=(const CudaForward &) = delete;

  /// Sequence slot `seq` starts over (position 0).
  void reset(int seq = 0);
  /// Runs token[i] at the current position of slot seqs[i] (distinct slots,
  /// 1..maxBatch rows) and returns each row's logits [vocab]. Throws Error
  /// on a token outside the vocabulary or a full context.
  std::vector<std::vector<float>> stepBatch(const std::vector<int> &seqs,
                                            const std::vector<int64_t> &tokens);
  /// stepBatch({0}, {token})[0].
  std::vector<float> step(int64_t token);
  int64_t length(int seq = 0) const;
  int maxBatch() const;
  const ModelConfig &config() const;
  /// "NVIDIA H200 (sm_90)".
  std::string deviceName() const;
  /// Kernels that came from the plan (for reports).
  int planKernelsUsed() const;
  /// Where the codegen kernels came from (plan CUBIN, plan PTX JIT, kernel
  /// cache, NVRTC) and the seconds that took, one line.
  std::string kernelBuildSummary() const;
  /// The expert path of the trellis MoE layers: "moe_trellis", "legacy",
  /// "moe_trellis+legacy" (mixed layers) or "none" (no trellis experts).
  std::string expertKernelUsed() const;

  // Benchmark hooks (bench_step.cpp).
  /// Weight bytes this rank reads for one batch-1 token (experts at the
  /// average of the layer's per-expert bytes).
  double weightBytesPerToken() const;
  /// Device memory held by the weights.
  uint64_t weightBytesResident() const;
  /// Runs one decode step of `batch` rows at the current positions without
  /// reading logits back or advancing: graph replay (captured on first use)
  /// or plain stream launches; returns after synchronising.
  void runStepOnly(int batch, bool graph);
  /// Sum of the step's kernel durations (events around every launch), ms;
  /// `perKernel` (optional) gets the time per kernel name, largest first;
  /// `launchCount` (optional) the launches per kernel name.
  double kernelTimeSumMs(
      int batch,
      std::vector<std::pair<std::string, double>> *perKernel = nullptr,
      std::map<std::string, int> *launchCount = nullptr);
  /// Launches per step of `batch` rows (kernels, copies, collectives).
  int launchesPerStep(int batch);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The CUDA backend's Generator for rank `rank` of `tp` over the pack's
/// bytes, on CUDA device `device`. comm == nullptr: one rank (tp.ranks must
/// be 1). GLM_CUDA_GRAPHS=0 in the environment launches without graphs.
std::unique_ptr<Generator>
makeCudaGenerator(const Pack &pack, const cpu::TpLayout &tp, int64_t maxContext,
                  const std::vector<plan::KernelDef> &planKernels, int rank,
                  dist::DeviceComm *comm, int device = 0);
/// One rank, no communicator.
std::unique_ptr<Generator>
makeCudaGenerator(const Pack &pack, const cpu::TpLayout &tp, int64_t maxContext,
                  const std::vector<plan::KernelDef> &planKernels = {});

} // namespace glm::rt::cuda
