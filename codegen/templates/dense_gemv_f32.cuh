// dense_gemv_f32.cuh - decode GEMV y = W x for fp32 weights, fp64 sums.
//
// The format of weights that have no quantized GPU kernel (F32/F16/BF16
// tensors of HF packs, dequantized on the host exactly as the CPU reference
// does): W is fp32 [out, in] row-major (HF orientation), x fp32 [in].
// Every dot product accumulates in fp64 like the CPU reference executor, so
// the CUDA backend reproduces its logits to fp32 rounding. OUT: 0 writes
// y as fp32 (rounded once), 1 as fp64 (router logits, indexer weights).
// One warp per output row. No alignment requirements.
#pragma once

#include "glm_common.cuh"

#define GLM_DENSE_GEMV_F32_PARAMS                                              \
  const float *__restrict__ x, const float *__restrict__ w,                   \
      void *__restrict__ y, int in, int out
#define GLM_DENSE_GEMV_F32_ARGS x, w, y, in, out

namespace glm {

/// Grid (ceil(out / (THREADS/32)), 1): warp-per-row.
template <int OUT, int THREADS>
__device__ __forceinline__ void denseGemvF32(GLM_DENSE_GEMV_F32_PARAMS) {
  static_assert(OUT == 0 || OUT == 1, "OUT: f32 or f64");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int lane = threadIdx.x & 31;
  const int o = blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
  if (o >= out)
    return;
  const float *row = w + (long long)o * in;
  double acc = 0.0;
  for (int i = lane; i < in; i += 32)
    acc += (double)row[i] * (double)x[i];
#pragma unroll
  for (int s = 16; s > 0; s >>= 1)
    acc += __shfl_xor_sync(0xFFFFFFFFu, acc, s);
  if (lane == 0) {
    if (OUT == 0)
      static_cast<float *>(y)[o] = (float)acc;
    else
      static_cast<double *>(y)[o] = acc;
  }
}

} // namespace glm
