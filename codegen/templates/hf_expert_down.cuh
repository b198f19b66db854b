// hf_expert_down.cuh - unquantized (HF) experts, down half:
// part[(b*slots + slotBase + u*chunks + ch)*d + r] = w_u * sum over the
// 128-channel chunk ch of down[r, j] * act[b, u, j], in fp64 (a unit per
// chunk, summed later in a fixed order by reduce_units).
#pragma once

#include "helper_common.cuh"

#define GLM_HF_EXPERT_DOWN_PARAMS                                              \
  const void *down, int dt, const double *act, const int *ids,                 \
      const float *wts, long long stride, int I, int d, int U, double *part,   \
      int slots, int slotBase
#define GLM_HF_EXPERT_DOWN_ARGS                                                \
  down, dt, act, ids, wts, stride, I, d, U, part, slots, slotBase

namespace glm {

/// down [experts][d][I] stored as dt; ids/wts null: the one matrix, weight
/// 1. Grid (ceil(d/THREADS), U*chunks, B).
template <int THREADS>
__device__ __forceinline__ void hfExpertDown(GLM_HF_EXPERT_DOWN_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int r = blockIdx.x * THREADS + threadIdx.x, b = blockIdx.z;
  const int chunks = (I + 127) / 128;
  const int u = blockIdx.y / chunks, ch = blockIdx.y % chunks;
  if (r >= d)
    return;
  const int e = ids ? ids[b * U + u] : 0;
  double s = 0;
  if (e >= 0) {
    const int begin = ch * 128;
    const int count = I - begin < 128 ? I - begin : 128;
    const long long row =
        (ids ? (long long)e : 0) * stride + (long long)r * I + begin;
    const double *a = act + ((long long)b * U + u) * I + begin; // (count)
    for (int j = 0; j < count; ++j)
      s += (double)hx::ldAny(down, row + j, dt) * a[j];
    s *= wts ? (double)wts[b * U + u] : 1.0;
  }
  part[((long long)b * slots + slotBase + (long long)u * chunks + ch) * d + r] =
      s;
}

} // namespace glm
