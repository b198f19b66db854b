//===- exl3_pack.h - EXL3 naming helpers shared by reader and writer ------===//
//
// Private to runtime/formats and compiler/packtools: the tensor-name suffixes
// of an EXL3 linear and how a trellis last dimension maps to a width K
// (shared/specs/exl3-format.md §2.1, §4, §9).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/codec/trellis.h"

#include <cstdint>
#include <string>

namespace glm::rt {

/// Suffixes of the tensors that make up one quantized linear `<key>`.
extern const char *const kExl3SiblingSuffixes[7];

/// exllamav3's marker values (int32 views of the locked multipliers).
constexpr int32_t kExl3McgMarker = (int32_t)0xCBAC1FEDu;  // -877912083
constexpr int32_t kExl3Mul1Marker = (int32_t)0x83DCD12Du; // -2082680531

/// K from a trellis tensor's last dim (16·K): 16..128 step 16 for K = 1..8,
/// or 24/40/56 for the MUL1-only K = 1.5/2.5/3.5. False when invalid.
bool exl3WidthFromLastDim(int64_t lastDim, trellis::Width &w);

} // namespace glm::rt
