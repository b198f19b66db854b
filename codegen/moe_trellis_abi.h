//===- moe_trellis_abi.h - launch geometry of the moe_trellis kernels -----===//
//
// Host-side arithmetic of the moe_trellis family (codegen/templates/
// moe_trellis.cuh, which documents the parameter list and table layouts):
// scratch and counter sizes and the grids of the two launches, so that the
// bench, the GPU tests and the executor size them the same way.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>

namespace glm::codegen {

struct MoeTrellisDims {
  int batch = 1, topk = 8, nRouted = 256, nShared = 1;
  int hidden = 6144, inter = 2048;
  int guSplit = 16;  // k-chunks per gate/up half (divides hidden/16)
  int downGroup = 4; // halves per down item (divides 16)
  int threads = 128; // block size of both launches

  int maxUnits() const { return batch * topk + nShared; }
  int slots() const { return batch * (topk + nShared); }
  /// f32 elements of the scratch buffer.
  size_t scratchFloats() const {
    const size_t q = size_t(slots());
    return q * 32 * guSplit * 128 + q * 16 * 128 +
           q * size_t(hidden) * (16 / downGroup);
  }
  /// int elements of the counter buffer (zero before the first launch).
  size_t counterInts() const {
    return size_t(maxUnits()) * 16 + size_t(hidden / 128);
  }
  unsigned gridGateUp() const {
    const size_t items = size_t(maxUnits()) * 16 * 2 * guSplit;
    return unsigned((items + threads / 32 - 1) / (threads / 32));
  }
  unsigned gridDown() const {
    const size_t items =
        size_t(maxUnits()) * (hidden / 128) * (16 / downGroup);
    return unsigned((items + threads / 32 - 1) / (threads / 32));
  }
  /// The kernel traps on anything else.
  bool valid() const {
    return inter == 16 * 128 && hidden % 128 == 0 && batch >= 1 &&
           batch <= 8 && batch * topk <= 64 && guSplit >= 1 &&
           (hidden / 16) % guSplit == 0 && downGroup >= 1 &&
           16 % downGroup == 0 && threads % 32 == 0;
  }
};

} // namespace glm::codegen
