// mla_proj.cuh - the absorbed MLA's per-head projections of a prefill
// chunk on tensor cores: a GEMM per head over all the chunk's rows, the
// weight read in kv_b's stored form once per 64 rows (mla_qabs / mla_out
// read it once per row).
//   q_abs  (w = kn): y[b][h][n] = sum_k x[b][h][k] * W[h * wHead + wRow0 + k][n]
//          (x = q_nope, K = dn, N = kvr: W_uk's rows are the inputs)
//   output (w = nk): y[b][h][n] = sum_k x[b][h][k] * W[h * wHead + wRow0 + n][k]
//          (x = ctx, K = kvr, N = dv: W_uv's rows are the outputs)
// x row b of head h at x + b * xStride + h * xHead, y likewise (yStride,
// yHead); head h = heads[blockIdx.x / ceil(N / 64)].
//
// ABI: grid (nh * ceil(N / 64), ceil(R / 64)), 128 threads (warps 2 x 2,
// warp tile 32 x 32), static shared memory 19.5 KB. W's element (o, i) as
// hx::ldWT<DT, SK> (mla_common.cuh: the stored dtype and scale form of the
// template; dt / sk, the runtime copies, must agree). Requires K, xStride
// and xHead multiples of 4 and a 16-byte aligned x (16-byte cp.async rows).
//
// Numerics: 3xTF32 (as kda_chunk): each operand a = hi + lo with hi =
// tf32(a), lo = tf32(a - hi) (cvt.rna), products hi.hi + hi.lo + lo.hi summed
// in fp32 by the tensor cores: ~2^-21 of each product, so q_abs and the
// head outputs stay within ~1e-6 of mla_qabs / mla_out's fp32 (the twin,
// runtime/twins/twin_mla_proj.cpp, sums the same three products in fp64).
//
// Pipeline per 16-input step: x's 64 x 16 fp32 tile arrives by cp.async
// (double buffer); the weights' 16 x 64 tile is read and dequantized into
// registers during the step's MMAs and stored as fp32 [k][n] to the other
// buffer.
#pragma once

#include "mla_common.cuh"

#define GLM_MLA_PROJ_PARAMS                                                    \
  const float *x, int xStride, int xHead, const void *W, int dt,               \
      const void *scale, int sk, int wHead, int wRow0, int in,                 \
      const int *heads, float *y, int yStride, int yHead, int R, int K, int N
#define GLM_MLA_PROJ_ARGS                                                      \
  x, xStride, xHead, W, dt, scale, sk, wHead, wRow0, in, heads, y, yStride,    \
      yHead, R, K, N

namespace glm {
namespace mpj {

constexpr int kBM = 64, kBN = 64, kBK = 16;
constexpr int kAPitch = kBK + 4; // floats: fragment loads conflict-free
constexpr int kBPitch = kBN + 8;

__device__ __forceinline__ unsigned smem32(const void *p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
/// 16 bytes global -> shared, zero-filled where `ok` is false.
__device__ __forceinline__ void cp16(void *dst, const void *src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   smem32(dst)),
               "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cpCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
__device__ __forceinline__ void cpWaitAll() {
  asm volatile("cp.async.wait_group 0;\n" ::);
}
/// cvt.rna.tf32.f32 as bits.
__device__ __forceinline__ unsigned tf32(float v) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ void mma(float c[4], const unsigned a[4],
                                    unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                 "r"(b1));
}

} // namespace mpj

/// WROWS_N: 0 = W's rows are the inputs k (q_abs), 1 = the outputs n.
template <int WROWS_N, int DT, int SK, int THREADS>
__device__ __forceinline__ void mlaProj(GLM_MLA_PROJ_PARAMS) {
  static_assert(THREADS == 128, "four warps: 2 x 2 warp tiles of 32 x 32");
  static_assert(DT >= 0 && DT <= 3 && SK >= 0 && SK <= 3, "stored form");
  using namespace mpj;
  __shared__ __align__(16) float As[2][kBM][kAPitch];
  __shared__ __align__(16) float Bs[2][kBK][kBPitch];
  const int t = threadIdx.x, lane = t & 31, w = t >> 5;
  const int wm = w >> 1, wn = w & 1, g = lane >> 2, q = lane & 3;
  const int nb = (N + kBN - 1) / kBN;
  const int h = heads[blockIdx.x / nb], n0 = (blockIdx.x % nb) * kBN;
  const int m0 = blockIdx.y * kBM;
  const float *xh = x + (long long)h * xHead;
  const long long wBase = (long long)h * wHead + wRow0;

  // x: 64 rows x 16 inputs = 256 chunks of 4, two a thread.
  auto loadA = [&](int buf, int k0) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int c = t + u * THREADS, r = c >> 2, kk = (c & 3) * 4;
      const bool ok = m0 + r < R && k0 + kk < K;
      const float *src = ok ? xh + (long long)(m0 + r) * xStride + k0 + kk : x;
      cp16(&As[buf][r][kk], src, ok);
    }
  };
  // W: 16 inputs x 64 outputs, eight elements a thread along W's rows.
  float wv[8];
  auto readB = [&](int k0) {
    if (WROWS_N == 0) { // row k, columns n0 + 8 * (t % 8) ..
      const int k = k0 + (t >> 3), n = n0 + 8 * (t & 7);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        wv[e] = k < K && n + e < N
                    ? hx::ldWT<DT, SK>(W, dt, scale, sk, wBase + k, n + e, in)
                    : 0.0f;
    } else { // row n, columns k0 + 8 * (t % 2) ..
      const int n = n0 + (t >> 1), k = k0 + 8 * (t & 1);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        wv[e] = n < N && k + e < K
                    ? hx::ldWT<DT, SK>(W, dt, scale, sk, wBase + n, k + e, in)
                    : 0.0f;
    }
  };
  auto storeB = [&](int buf) {
    if (WROWS_N == 0) {
      const int k = t >> 3, n = 8 * (t & 7);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        Bs[buf][k][n + e] = wv[e];
    } else {
      const int n = t >> 1, k = 8 * (t & 1);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        Bs[buf][k + e][n] = wv[e];
    }
  };

  float acc[2][4][4] = {};
  const int steps = (K + kBK - 1) / kBK;
  loadA(0, 0);
  cpCommit();
  readB(0);
  storeB(0);
  for (int s = 0; s < steps; ++s) {
    const int buf = s & 1;
    cpWaitAll();
    __syncthreads(); // tile s visible; tile s - 1's buffers free
    if (s + 1 < steps) {
      loadA(buf ^ 1, (s + 1) * kBK);
      cpCommit();
      readB((s + 1) * kBK);
    }
#pragma unroll
    for (int k8 = 0; k8 < kBK; k8 += 8) {
      unsigned ah[2][4], al[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int r = 32 * wm + 16 * mt + g;
        const float a[4] = {As[buf][r][k8 + q], As[buf][r + 8][k8 + q],
                            As[buf][r][k8 + q + 4], As[buf][r + 8][k8 + q + 4]};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          ah[mt][i] = tf32(a[i]);
          al[mt][i] = tf32(a[i] - __uint_as_float(ah[mt][i]));
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int n = 32 * wn + 8 * nt + g;
        const float b0 = Bs[buf][k8 + q][n], b1 = Bs[buf][k8 + q + 4][n];
        const unsigned bh0 = tf32(b0), bh1 = tf32(b1);
        const unsigned bl0 = tf32(b0 - __uint_as_float(bh0)),
                       bl1 = tf32(b1 - __uint_as_float(bh1));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma(acc[mt][nt], al[mt], bh0, bh1); // the small products first
          mma(acc[mt][nt], ah[mt], bl0, bl1);
          mma(acc[mt][nt], ah[mt], bh0, bh1);
        }
      }
    }
    if (s + 1 < steps)
      storeB(buf ^ 1); // read by step s + 1 after its barrier
  }
  float *yh = y + (long long)h * yHead;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = m0 + 32 * wm + 16 * mt + g + 8 * (e >> 1);
        const int n = n0 + 32 * wn + 8 * nt + 2 * q + (e & 1);
        if (r < R && n < N)
          yh[(long long)r * yStride + n] = acc[mt][nt][e];
      }
}

} // namespace glm
