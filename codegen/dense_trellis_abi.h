//===- dense_trellis_abi.h - launch geometry of the dense_trellis kernel --===//
//
// Host-side arithmetic of the dense_trellis family (codegen/templates/
// dense_trellis.cuh documents the parameter list): the split-k count, the
// scratch and counter sizes and the grid, so that the executor, the bench
// and the GPU tests size them the same way.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace glm::codegen {

struct DenseTrellisDims {
  int batch = 1;
  int64_t in = 6144, out = 2048; // out padded to 128 (DeviceLinear.outPad)
  int split = 1;                 // k-chunks per 128-output block
  int threads = 128;             // block size

  int64_t rows() const { return in / 16; }
  int64_t blocks() const { return out / 128; }
  /// f32 elements of the scratch buffer (partials [blk][s][b][128]).
  size_t scratchFloats() const {
    return size_t(out) * size_t(split) * size_t(batch);
  }
  /// int elements of the counter buffer (zero before the first launch).
  size_t counterInts() const { return size_t(blocks()); }
  unsigned grid() const {
    const int64_t items = blocks() * split, w = threads / 32;
    return unsigned((items + w - 1) / w);
  }
  /// The kernel traps on anything else.
  bool valid() const {
    return batch >= 1 && batch <= 8 && in > 0 && in % 16 == 0 &&
           out > 0 && out % 128 == 0 && split >= 1 && split <= rows() &&
           threads % 32 == 0 && threads >= 32 && threads <= 512;
  }
};

/// Launch tuning shared by the executor, the bench and the compiler's plans.
struct DenseTrellisTuning {
  int warpsPerSm = 24; // split target: about this many warps per SM
  int minRows = 8;     // tile rows per warp at least
  int threads = 128;   // block size
  int pipe = 4;        // 0 registers, 2..6 cp.async ring rows
  int minBlocks = 4;   // __launch_bounds__ min blocks (0 = none)
};
inline DenseTrellisTuning defaultDenseTrellisTuning() { return {}; }

/// Template batch of a runtime batch 1..8: only the number of mma batch
/// groups (1 up to 4 rows, 2 above) depends on it, so three instances serve
/// every batch.
inline int denseTrellisBatch(int b) { return b <= 1 ? 1 : b <= 4 ? 4 : 8; }

/// The tuning's pipe stages for width K, lowered until the per-block
/// cp.async ring fits 32 KB (the family's allowed values 0, 2, 3, 4, 6).
inline int denseTrellisPipe(const DenseTrellisTuning &t, int K) {
  int p = t.pipe;
  while (p > 0 && (t.threads / 32) * p * 256 * K > 32768)
    p = p == 6 ? 4 : p == 2 ? 0 : p - 1;
  return p;
}

/// Split-k count that puts about `warpsPerSm` * sms warps on the device while
/// every warp keeps at least `minRows` tile rows (more in flight per warp
/// amortises its pipeline ramp; more warps hide latency), at most maxSplit
/// (the last warp of a block sums `split` partials serially).
inline int denseTrellisSplit(int64_t in, int64_t out, int sms,
                             int warpsPerSm = 24, int minRows = 8,
                             int maxSplit = 64) {
  const int64_t rows = in / 16, blocks = std::max<int64_t>(1, out / 128);
  const int64_t want = (int64_t(sms) * warpsPerSm + blocks - 1) / blocks;
  const int64_t cap =
      std::max<int64_t>(1, std::min<int64_t>(maxSplit, rows / minRows));
  return int(std::max<int64_t>(1, std::min(want, cap)));
}

} // namespace glm::codegen
