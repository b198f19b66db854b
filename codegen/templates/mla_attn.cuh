// mla_attn.cuh - absorbed MLA attention in one launch, all in fp64 (the
// legacy path, GLM_MLA_KERNEL=legacy): for head heads[blockIdx.x] of row
// blockIdx.y over the selected latent rows: qabs = W_UK^T q_nope,
// p = softmax((c.qabs + kpe.q_pe) * scale), ctx = sum p c, ov = W_UV ctx.
// q_pe is already roped. kvBT is kv_b_proj transposed, fp32
// [kvr, H*(dn+dv)]. Dynamic shared memory: 2 * kvr doubles; p is global
// scratch [B, H, maxCtx]. The cache's rows are in form KV (kv_cache.cuh).
#pragma once

#include "kv_cache.cuh"

#define GLM_MLA_ATTN_PARAMS                                                    \
  const float *qAll, const float *kvBT, const void *cache, const int *seq,     \
      const int *selAll, const int *nselp, double *pAll, int maxCtx,           \
      float *ovAll, const int *heads, int H, int dn, int dr, int dv, int kvr,  \
      double scale
#define GLM_MLA_ATTN_ARGS                                                      \
  qAll, kvBT, cache, seq, selAll, nselp, pAll, maxCtx, ovAll, heads, H, dn,    \
      dr, dv, kvr, scale

namespace glm {

/// Grid (nHeads, B). Sums serial per thread; max and softmax sum by thread 0.
template <int KV, int THREADS>
__device__ __forceinline__ void mlaAttn(GLM_MLA_ATTN_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  static_assert(KV >= kv::kF32 && KV <= kv::kE4m3, "KV: f32, bf16 or e4m3");
  extern __shared__ double sh[];
  double *qabs = sh, *ctx = sh + kvr; // (kvr) each
  __shared__ double mx, sum;
  const int h = heads[blockIdx.x], b = blockIdx.y, lat = kvr + dr;
  const int n = nselp[b], R = H * (dn + dv);
  const float *q = qAll + (long long)b * H * (dn + dr);
  const float *qn = q + (long long)h * (dn + dr), *qp = qn + dn;
  const long long r0 = (long long)seq[b] * maxCtx; // the slot's row 0
  const int *sel = selAll + (long long)b * maxCtx;
  double *p = pAll + ((long long)b * H + h) * maxCtx;
  for (int c = threadIdx.x; c < kvr; c += THREADS) {
    double a = 0;
    for (int i = 0; i < dn; ++i)
      a += (double)kvBT[(long long)c * R + (long long)h * (dn + dv) + i] *
           (double)qn[i];
    qabs[c] = a;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += THREADS) {
    const kv::Row<KV> ent = kv::row<KV>(cache, r0 + sel[j], lat);
    double a = 0, bb = 0;
    for (int c = 0; c < kvr; ++c)
      a += (double)ent[c] * qabs[c];
    for (int c = 0; c < dr; ++c)
      bb += (double)ent[kvr + c] * (double)qp[c];
    p[j] = (a + bb) * scale;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double m = p[0];
    for (int j = 1; j < n; ++j)
      m = p[j] > m ? p[j] : m;
    mx = m;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += THREADS)
    p[j] = exp(p[j] - mx);
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    for (int j = 0; j < n; ++j)
      s += p[j];
    sum = s;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += THREADS)
    p[j] /= sum;
  __syncthreads();
  for (int c = threadIdx.x; c < kvr; c += THREADS) {
    double a = 0;
    for (int j = 0; j < n; ++j)
      a += p[j] * (double)kv::row<KV>(cache, r0 + sel[j], lat)[c];
    ctx[c] = a;
  }
  __syncthreads();
  float *ov = ovAll + (long long)b * H * dv;
  for (int j = threadIdx.x; j < dv; j += THREADS) {
    const long long row = (long long)h * (dn + dv) + dn + j;
    double a = 0;
    for (int c = 0; c < kvr; ++c)
      a += (double)kvBT[(long long)c * R + row] * ctx[c];
    ov[(long long)h * dv + j] = (float)a;
  }
}

} // namespace glm
