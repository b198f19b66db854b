// mla_qabs.cuh - absorbed MLA, launch 1 of 3 (then mla_core, mla_out):
// qabs[b][h][c] = sum_i W[h*(dn+dv) + i][c] * q_nope[i] over kv_b_proj W
// [H*(dn+dv), kvr] (HF row order) in its stored form (F32/F16/BF16, FP8
// with block, row or MXFP8 scales; dt/sk as hx::ldWT) or an fp32
// expansion, fp32 products and sums in a fixed order.
#pragma once

#include "mla_common.cuh"

#define GLM_MLA_QABS_PARAMS                                                    \
  const float *qAll, const void *W, int dt, const void *scale, int sk,         \
      const int *heads, float *qabsAll, int H, int dn, int dr, int dv, int kvr
#define GLM_MLA_QABS_ARGS                                                      \
  qAll, W, dt, scale, sk, heads, qabsAll, H, dn, dr, dv, kvr

namespace glm {
namespace hx {

/// Scalar path: warp w of nw sums rows i = w, w+nw, .. of column c in order.
template <int DT, int SK>
__device__ __forceinline__ float
mlaQabsDot(const void *W, int dt, const void *scale, int sk, const float *qn,
           long long o0, int w, int nw, int c, int dn, int kvr) {
  float a = 0.0f;
  int i = w;
  for (; i + nw * (kMlaBatch - 1) < dn; i += nw * kMlaBatch) {
    float v[kMlaBatch], q[kMlaBatch];
#pragma unroll
    for (int k = 0; k < kMlaBatch; ++k) {
      v[k] = ldWT<DT, SK>(W, dt, scale, sk, o0 + i + nw * k, c, kvr);
      q[k] = qn[i + nw * k];
    }
#pragma unroll
    for (int k = 0; k < kMlaBatch; ++k)
      a += v[k] * q[k];
  }
  for (; i < dn; i += nw)
    a += ldWT<DT, SK>(W, dt, scale, sk, o0 + i, c, kvr) * qn[i];
  return a;
}
template <int DT, int SK>
__device__ __forceinline__ void mlaQabsRun(float &a, const void *W, int dt,
                                           const void *scale, int sk,
                                           const float *qn, long long o0, int w,
                                           int nw, int c, int dn, int kvr) {
  a = mlaQabsDot<DT, SK>(W, dt, scale, sk, qn, o0, w, nw, c, dn, kvr);
}
/// 16-byte chunks: the block's 32 columns in P = 32/N chunks per row, R =
/// blockDim.x/P row lanes (thread t: chunk t % P, rows t/P, t/P + R, .. in
/// order, 4 loads in flight); sums over a warp's row lanes by shuffles
/// (offsets P, 2P, .., 16), then over warps in order.
template <int DT, int SK>
__device__ __forceinline__ void
mlaQabsVec(const void *W, const void *scale, const float *qn, float *qabsAll,
           float (*part)[32], int b, int h, int H, long long o0, int dn,
           int kvr) {
  if (DT < 0 || (SK != 0 && DT != 3))
    return; // vecOk admits only the forms instantiated below
  constexpr int D = DT < 0 ? 0 : DT, N = VecOf<D>::N, P = 32 / N;
  const int t = threadIdx.x, lane = t & 31, w = t >> 5;
  const int nw = blockDim.x >> 5, R = blockDim.x / P;
  const int chunk = t % P, rl = t / P;
  const int chunks = kvr / 32;
  const int c0 = (blockIdx.x % chunks) * 32 + chunk * N;
  float acc[N]; // (N) columns c0 ..
#pragma unroll
  for (int k = 0; k < N; ++k)
    acc[k] = 0.0f;
  for (int i = rl; i < dn; i += 4 * R) {
    float v[4][N], q[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int r = i + m * R;
      q[m] = r < dn ? qn[r] : 0.0f;
      if (r < dn)
        ldVec<D, SK>(W, scale, o0 + r, c0, kvr, v[m]);
    }
#pragma unroll
    for (int m = 0; m < 4; ++m)
      if (i + m * R < dn)
#pragma unroll
        for (int k = 0; k < N; ++k)
          acc[k] += v[m][k] * q[m];
  }
  // Row lanes of one chunk in a warp are lanes chunk + P*m: fold them.
#pragma unroll
  for (int off = P; off < 32; off <<= 1)
#pragma unroll
    for (int k = 0; k < N; ++k)
      acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], off);
  if (lane < P)
#pragma unroll
    for (int k = 0; k < N; ++k)
      part[w][lane * N + k] = acc[k];
  __syncthreads();
  if (w == 0) {
    float s = 0.0f;
    for (int k = 0; k < nw; ++k)
      s += part[k][lane];
    qabsAll[((long long)b * H + h) * kvr + (blockIdx.x % chunks) * 32 + lane] =
        s;
  }
}

} // namespace hx

/// Block = (head heads[blockIdx.x / ceil(kvr/32)], 32 columns), THREADS/32
/// warps (1..8). Grid (nHeads * ceil(kvr/32), B).
template <int THREADS>
__device__ __forceinline__ void mlaQabs(GLM_MLA_QABS_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 256,
                "THREADS: 1..8 warps (part[8][32])");
  __shared__ float part[8][32]; // (warps, 32 columns)
  const int chunks = (kvr + 31) / 32, h = heads[blockIdx.x / chunks];
  const int c = (blockIdx.x % chunks) * 32 + (threadIdx.x & 31);
  const int w = threadIdx.x >> 5, nw = THREADS >> 5, b = blockIdx.y;
  const float *qn =
      qAll + (long long)b * H * (dn + dr) + (long long)h * (dn + dr); // (dn)
  const long long o0 = (long long)h * (dn + dv);
  if (hx::vecOk(W, dt, sk, kvr)) {
    GLM_MLA_DISPATCH(dt, sk, hx::mlaQabsVec, W, scale, qn, qabsAll, part, b, h,
                     H, o0, dn, kvr);
    return;
  }
  float a = 0.0f;
  if (c < kvr) {
    GLM_MLA_DISPATCH(dt, sk, hx::mlaQabsRun, a, W, dt, scale, sk, qn, o0, w, nw,
                     c, dn, kvr);
  }
  part[w][threadIdx.x & 31] = a;
  __syncthreads();
  if (w == 0 && c < kvr) {
    float s = 0.0f;
    for (int k = 0; k < nw; ++k)
      s += part[k][threadIdx.x];
    qabsAll[((long long)b * H + h) * kvr + c] = s;
  }
}

} // namespace glm
