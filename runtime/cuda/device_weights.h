//===- device_weights.h - a pack's weights on the device, as stored -------===//
//
// The CUDA executor's view of the weights: every matrix keeps its pack
// format on the device (trellis tiles, BF16/F16/F32 data, FP8 bytes and
// scales) and is described by a DeviceLinear (dense tensors) or an
// ExpertGroup (the routed or shared experts of one MoE layer, with the
// pointer/width tables the fused expert kernel reads). Bytes go up through
// an Uploader: jobs (byte range -> device address) are queued while the
// model is described, then copied in file order through two pinned staging
// buffers, so reading the next range overlaps the copy of the previous one.
// Small vectors (norms, router bias, trellis side vectors, block/row
// scales) are widened to fp32 on the way (exact conversions of F16/BF16,
// legacy packed signs to +-1); trellis tiles and dense data go up verbatim.
// In random mode (benchmarks over index-only packs) nothing is read: the
// same buffers are filled on the device with random bytes (side vectors and
// scales with ones).
//
// Thread-safety: single-threaded, on the thread whose context is current.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cuda/cuda_api.h"
#include "runtime/formats/pack.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace glm::rt {
class SafetensorsFile;
}

namespace glm::rt::cuda {

/// Queued host->device copies of pack byte ranges.
class Uploader {
public:
  /// `fillRandom`/`fillF32`: the executor's fill kernels (random mode).
  Uploader(std::string packDir, bool random, CUfunction fillRandom,
           CUfunction fillF32);
  ~Uploader();

  /// Bytes [offset, offset+length) of range `r`, verbatim, to `dst`.
  /// `mask` (random mode): AND applied to random 32-bit words.
  void raw(const ByteRange &r, CUdeviceptr dst, uint64_t offset = 0,
           uint64_t length = UINT64_MAX, uint32_t mask = 0xFFFFFFFFu);
  /// Elements [first, first+count) of the stored vector in `r` (its dtype
  /// is read from the file header: F32/F16/BF16, or I16 packed signs when
  /// `signs`) as fp32 to `dst`. count -1: the whole range.
  void f32(const ByteRange &r, CUdeviceptr dst, int64_t first = 0,
           int64_t count = -1, bool signs = false);
  /// Element count of a stored vector range (from its file's dtype).
  int64_t elements(const ByteRange &r);
  uint64_t queuedBytes() const { return total_; }
  /// Performs every queued job (progress bar `label`), then synchronises.
  void run(const std::string &label);

private:
  struct Job {
    std::string file;
    uint64_t offset = 0, length = 0; // bytes in the file
    CUdeviceptr dst = 0;
    int conv =
        -1; // -1 verbatim; else source dtype (0 f32 1 f16 2 bf16 3 signs)
    uint32_t mask = 0xFFFFFFFFu;
  };
  int dtypeOf(const ByteRange &r, bool signs);
  std::string dir_;
  bool random_;
  CUfunction fillRandom_, fillF32_;
  std::vector<Job> jobs_;
  uint64_t total_ = 0;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> headers_;
};

/// A dense (non-expert) linear layer y[b] = W x[b] in its stored format.
struct DeviceLinear {
  std::string name;
  WeightFormat format = WeightFormat::F32;
  int dtype = 0;           // plain formats: 0 f32, 1 f16, 2 bf16
  int64_t out = 0, in = 0; // rows held (a vocabulary slice) x inputs
  int64_t rowBegin = 0;    // first HF row held
  bool fullRows = true;    // holds every row (a slice is then taken on use)
  // Trellis.
  int64_t outPad = 0, inPad = 0;
  int K = 0, codebook = 1;
  bool e4m3 = false;
  int sI = 0, sI8 = 0, sJ8 = 0;
  DeviceBuffer data, scale, suh, svh;
  uint64_t bytes = 0; // weight bytes read per GEMV (data + scales)
};

/// The routed (or shared) experts of one MoE layer on this rank.
struct ExpertGroup {
  enum Kind { None, Trellis, Plain } kind = None;
  bool exl3 = false;   // EXL3 per-tensor side vectors (else exlr8 halves)
  int64_t experts = 0; // E (1 for the shared expert)
  int64_t inter = 0;   // intermediate width (padded to 128 for trellis)
  int64_t hidden = 0, halves = 0;
  int codebook = 1;
  bool e4m3 = false;
  std::string widthDigits; // "234": the K the group uses
  // Trellis: tile pointers [(e*3+p)*16+h], widths, side tables (fp32).
  DeviceBuffer tiles, widths, tileBytes;
  DeviceBuffer guSvh, guSuBlock, downSuh, downSvBlock, downSvh, suhIn;
  // Plain (HF): [E, ...] in the stored dtype, channel ownership per 128.
  int dtype = 0;
  DeviceBuffer gate, up, down, own;
  double bytesPerExpert = 0; // this rank's bytes of one expert (average)
};

/// ceil(v / 128) * 128.
inline int64_t roundUp128(int64_t v) { return (v + 127) / 128 * 128; }

/// Describes `w` and queues its upload. rowBegin/rowCount (plain formats):
/// only HF rows [rowBegin, rowBegin + rowCount) are uploaded when the
/// format allows slicing; otherwise all rows are (fullRows stays true).
DeviceLinear makeLinear(const WeightInfo &w, Uploader &up, int64_t rowBegin = 0,
                        int64_t rowCount = -1);

/// Describes the experts named by `names[e][p]` (p = gate, up, down) of one
/// MoE layer and queues their upload; `owned(e, h)` says whether this rank
/// computes half h of expert e (only owned trellis halves are uploaded).
ExpertGroup makeExperts(const Pack &pack,
                        const std::vector<std::vector<std::string>> &names,
                        const std::vector<std::vector<bool>> &owned,
                        Uploader &up);

/// Exlr8 only: the layer's hidden-side signs (signs.in, signs.out) of the
/// experts of `w` (an expert projection), as f32 [hidden] device vectors.
void exlr8Signs(const WeightInfo &gateOrUp, const WeightInfo &down,
                Uploader &up, DeviceBuffer &signsIn, DeviceBuffer &signsOut);

} // namespace glm::rt::cuda
