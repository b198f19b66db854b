// kda_gnorm.cuh - the gated RMS norm of GLM-5.3-Flash KDA outputs, rows of
// n heads of dv: kda_decode's and kda_chunk's last step, on its own for
// kda_chunk launched with several blocks a head (vsplit > 1), which leaves
// the un-normalised O in its out rows.
//
// Launch: grid (ceil(n / (THREADS/32)), rows <= 65535), block THREADS
// (128 or 256);
// template THREADS. Warp w of block (x, b) normalises head hl = x·warps + w
// of row b (hl < n).
//   o     [rows, n·dv] fp32  O, head hl at hl·dv (may be out: in place)
//   gate  [rows, gs]   fp32  output gate pre-activation, at hl·dv
//   oNorm [dv] (wdt: 0 f32, 1 f16, 2 bf16, 3 e4m3)
//   out   [rows, n·dv] fp32
// Scalars: n, dv, eps.
// Arithmetic: kda_decode's (fp32, --fmad=false): lane l adds o² of c = l,
// l + 32, .., butterfly (hx::warpSumF); out = (oNorm·(o·(1/sqrt(ss/dv +
// eps))))·sigmoid(gate). So kda_chunk with vsplit > 1 then kda_gnorm gives
// the same bits as kda_chunk with vsplit 1 from the same O.
#pragma once

#include "flash_math.cuh"
#include "helper_common.cuh"

#define GLM_KDA_GNORM_PARAMS                                                   \
  const float *o, const float *gate, int gs, const void *oNorm, int wdt,       \
      float *out, int n, int dv, float eps
#define GLM_KDA_GNORM_ARGS o, gate, gs, oNorm, wdt, out, n, dv, eps

namespace glm {

template <int THREADS>
__device__ __forceinline__ void kdaGnorm(GLM_KDA_GNORM_PARAMS) {
  static_assert(THREADS == 128 || THREADS == 256, "THREADS: 128 or 256");
  constexpr int W = THREADS / 32;
  const int lane = threadIdx.x & 31, hl = blockIdx.x * W + (threadIdx.x >> 5);
  if (hl >= n)
    return;
  const long long b = blockIdx.y, at = (b * n + hl) * dv;
  float ss = 0.0f;
  for (int c = lane; c < dv; c += 32)
    ss = ss + o[at + c] * o[at + c];
  ss = hx::warpSumF(ss);
  const float inv = 1.0f / fm::sqrtF(ss / (float)dv + eps);
  for (int c = lane; c < dv; c += 32) {
    const float gv = gate[b * gs + (long long)hl * dv + c];
    const float x = o[at + c];
    out[at + c] = (hx::ldAny(oNorm, c, wdt) * (x * inv)) * fm::sigmoidF(gv);
  }
}

} // namespace glm
