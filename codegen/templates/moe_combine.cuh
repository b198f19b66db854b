// moe_combine.cuh - MoE prefill, last step: each row's expert outputs,
// scaled and summed in a fixed order (moe_group.cuh gives the whole chain).
//
// out[t][c] = (accumulate ? out[t][c] : 0) + s, where
//   s = sum over k = 0 .. U-1 (ascending; empty slots skipped), starting
//       from 0.0f, of zd[i][c] * (down_sv_block[e*(hidden/128) + c/128] * w)
// with i = entry_of[t*U + k] the slot's sorted position, e its expert and w
// route_w[t][k] (1 for a shared expert, sv null = 1). The product order is
// that of moe_trellis's exlr8 down (sc = sv * w, then z * sc), and the sum
// is in slot order as its down tail adds slots; the sum is left in the
// pre-Hadamard domain (hadamard128 with post = signs.out follows, after the
// all-reduce under tensor parallelism). No atomics: the same bits run to
// run, and the CPU twin gives them.
//
// ---------------------------------------------------------------- ABI ----
// Template: moeCombine<THREADS>. Grid (T, ceil(hidden / (4*THREADS))): each
// thread sums 4 consecutive columns of one row.
// Parameters (GLM_MOE_COMBINE_PARAMS, in order):
//   zd          f32 [N][hidden] (the down GEMMs' sums per sorted position)
//   entry_of    int [T*U] (moe_group)
//   expert_ids  int [T][topk];  route_w  f32 [T][topk]
//   down_sv_block  f32 [e*(hidden/128) + blk]; null = 1
//   out         f32 [T][hidden] (in/out)
//   T, topk, E, S, hidden (% 128 == 0), accumulate (!= 0: add to out)
// -------------------------------------------------------------------------
#pragma once

#include "moe_entries.cuh"

#define GLM_MOE_COMBINE_PARAMS                                                 \
  const float *__restrict__ zd, const int *__restrict__ entry_of,              \
      const int *__restrict__ expert_ids, const float *__restrict__ route_w,   \
      const float *__restrict__ down_sv_block, float *__restrict__ out, int T, \
      int topk, int E, int S, int hidden, int accumulate
#define GLM_MOE_COMBINE_ARGS                                                   \
  zd, entry_of, expert_ids, route_w, down_sv_block, out, T, topk, E, S,        \
      hidden, accumulate

namespace glm {

template <int THREADS>
__device__ __forceinline__ void moeCombine(GLM_MOE_COMBINE_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int t = blockIdx.x;
  const int c = 4 * (blockIdx.y * THREADS + threadIdx.x);
  if (t >= T || c >= hidden)
    return;
  const int U = topk + S, N = T * U;
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k = 0; k < U; ++k) {
    const int i = entry_of[(long long)t * U + k];
    if (i < 0 || i >= N)
      continue;
    int e = E + (k - topk);
    float w = 1.0f;
    if (k < topk) {
      e = expert_ids[(long long)t * topk + k];
      if (e < 0 || e >= E)
        continue;
      w = route_w[(long long)t * topk + k];
    }
    const float sc =
        (down_sv_block ? down_sv_block[(long long)e * (hidden >> 7) + (c >> 7)]
                       : 1.0f) *
        w;
    const float4 z =
        *reinterpret_cast<const float4 *>(zd + (long long)i * hidden + c);
    s[0] += z.x * sc;
    s[1] += z.y * sc;
    s[2] += z.z * sc;
    s[3] += z.w * sc;
  }
  float4 *o = reinterpret_cast<float4 *>(out + (long long)t * hidden + c);
  float4 r = make_float4(s[0], s[1], s[2], s[3]);
  if (accumulate) {
    const float4 old = *o;
    r.x += old.x, r.y += old.y, r.z += old.z, r.w += old.w;
  }
  *o = r;
}

} // namespace glm
