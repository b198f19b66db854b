//===- kernel_batch.h - template batch of the batched decode kernels ------===//
//
// One rule for the compiler (which kernels a plan carries) and the CUDA
// executor (which kernel a launch takes), so a plan's kernels are the ones
// the runtime looks for.
//
//===----------------------------------------------------------------------===//
#pragma once

namespace glm::codegen {

/// Template batch of the batched decode kernels (moe_trellis, dense_trellis,
/// dense_gemv) for a launch of `rows` rows: 1, else 8. The template batch
/// only bounds the rows (every kernel takes its runtime batch; in the
/// trellis families only the mma batch groups, 1 up to 4 rows and 2 above,
/// and the shared rows depend on it), so two instances per family serve
/// every decode bucket; a third (4 rows) cost a cold compile ~7 NVRTC
/// CPU-seconds at full size for a step shape the targets do not measure
/// (docs/perf.md: rows 2..4 on the 8-row kernel).
inline int decodeKernelBatch(int rows) { return rows <= 1 ? 1 : 8; }

} // namespace glm::codegen
