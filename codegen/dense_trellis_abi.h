//===- dense_trellis_abi.h - launch geometry of the dense_trellis kernel --===//
//
// Host-side arithmetic of the dense_trellis family (codegen/templates/
// dense_trellis.cuh documents the parameter list): the split-k count, the
// scratch and counter sizes and the grid, so that the executor, the bench
// and the GPU tests size them the same way.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/kernel_batch.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace glm::codegen {

struct DenseTrellisDims {
  int batch = 1;
  int64_t in = 6144, out = 2048; // out padded to 128 (DeviceLinear.outPad)
  int split = 4;                 // k-chunks per 128-output block
  int threads = 128;             // block size (warps = threads / 32)
  int sum = 0;                   // template SUM: 0 f32, 1/2 fixed point

  int warps() const { return threads / 32; }
  int64_t rows() const { return in / 16; }
  int64_t blocks() const { return out / 128; }
  /// f32 elements of the scratch buffer (block partials [blk][sb][b][128];
  /// int64 partials, two floats each, with a fixed-point sum).
  size_t scratchFloats() const {
    return size_t(out) * size_t(split / warps()) * size_t(batch) *
           (sum ? 2 : 1);
  }
  /// int elements of the counter buffer (zero before the first launch).
  size_t counterInts() const { return size_t(blocks()); }
  unsigned grid() const { return unsigned(blocks() * (split / warps())); }
  /// The kernel traps on anything else.
  bool valid() const {
    return batch >= 1 && batch <= 8 && in > 0 && in % 16 == 0 &&
           out > 0 && out % 128 == 0 && threads % 32 == 0 && threads >= 32 &&
           threads <= 256 && split >= warps() && split % warps() == 0 &&
           split <= rows();
  }
};

/// Launch tuning shared by the executor, the bench and the compiler's plans.
struct DenseTrellisTuning {
  // Defaults from bench --suite dense on the H200 (docs/perf.md, "Dense
  // trellis decode kernel (session 3)"): at batch 1, pipe 2 + minRows 2
  // beat pipe 0 + minRows 4 by 2-10 % on every GLM-5.3 shape; at batch 8
  // minRows 2 is within -1..+6 % of minRows 4.
  int warpsPerSm = 16; // split target: warps per SM resident at once
  int minRows = 2;     // tile rows per warp at least
  int maxSplit = 128;  // chunks per output block at most
  int threads = 128;   // block size
  int pipe = 2;        // batch 1: 0 registers, 2..6 cp.async ring rows
  int pipeBatched = 2; // batch > 1
  int minBlocks = 4;   // __launch_bounds__ min blocks (0 = none)
};
inline DenseTrellisTuning defaultDenseTrellisTuning() { return {}; }

/// The tuning's pipe stages for width K and batch b, lowered until the
/// per-block cp.async ring fits 32 KB (the family's values 0, 2, 3, 4, 6).
inline int denseTrellisPipe(const DenseTrellisTuning &t, int K, int b) {
  int p = b <= 1 ? t.pipe : t.pipeBatched;
  while (p > 0 && (t.threads / 32) * p * 256 * K > 32768)
    p = p == 6 ? 4 : p == 2 ? 0 : p - 1;
  return p;
}

/// Split-k count: about one wave of sms * warpsPerSm warps over the
/// out/128 output blocks (a second, partial wave costs more than it
/// hides), each warp with at least minRows tile rows, at most maxSplit; a
/// multiple of the block's warps (the kernel's rule).
/// True when no k-chunk of `split` straddles two units of `unitRows` tile
/// rows (a head, a 128-channel chunk: what one rank owns), so that every
/// chunk's sum is the same at every rank count. unitRows 0: no units.
inline bool denseTrellisChunksAligned(int64_t rows, int64_t split,
                                      int64_t unitRows) {
  if (unitRows <= 0)
    return true;
  for (int64_t s = 0; s < split; ++s) {
    const int64_t r0 = s * rows / split, r1 = (s + 1) * rows / split;
    if (r1 > r0 && r0 / unitRows != (r1 - 1) / unitRows &&
        (r0 % unitRows != 0 || r1 % unitRows != 0))
      return false;
  }
  return true;
}

inline int denseTrellisSplit(int64_t in, int64_t out, int sms,
                             const DenseTrellisTuning &t,
                             int64_t unitRows = 0) {
  const int64_t nw = t.threads / 32, rows = in / 16;
  const int64_t blocks = std::max<int64_t>(1, out / 128);
  int64_t s = int64_t(sms) * t.warpsPerSm / blocks;
  s = std::min<int64_t>(s, rows / std::max(1, t.minRows));
  s = std::min<int64_t>(s, t.maxSplit);
  s = s / nw * nw;
  s = std::max<int64_t>(s, nw);
  while (s > rows) // tiny inputs: fewer warps than rows
    s -= nw;
  // Fixed-point sums over rank-owned units: the largest split at or below
  // whose chunks respect the units (measured on the H200, docs/perf.md
  // "Session 9": GLM-5.3's o_proj at split 32 beats the next aligned one
  // above, 64, by 3 us per launch).
  for (int64_t a = s; a >= nw; a -= nw)
    if (denseTrellisChunksAligned(rows, a, unitRows))
      return int(a);
  return int(std::max<int64_t>(s, nw));
}

} // namespace glm::codegen
