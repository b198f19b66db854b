// index_key_store.cuh - the DSA indexer key of row b: LayerNorm(k) (affine,
// eps 1e-6, fp64 tree sums), RoPE on the first dr values, stored at
// (seq[b], pos[b]) in the cache's form KV (kv_cache.cuh; bf16 and e4m3 keys
// are computed in fp32 in shared memory first, hd <= kv::kStageMax).
#pragma once

#include "helper_common.cuh"
#include "kv_cache.cuh"

#define GLM_INDEX_KEY_STORE_PARAMS                                             \
  const float *k, const float *w, const float *bias, void *keys,               \
      const int *seq, const int *pos, int hd, int dr, int maxCtx,              \
      double theta, const int *pages, int pageShift
#define GLM_INDEX_KEY_STORE_ARGS                                               \
  k, w, bias, keys, seq, pos, hd, dr, maxCtx, theta, pages, pageShift

namespace glm {
namespace hx {

/// dst = LayerNorm(x) over hd values (affine w, bias; eps 1e-6): mean and
/// variance as fp64 tree sums (blockSumD), thread t writes i = t, +THREADS.
/// Shared with kpool_store.
template <int THREADS>
__device__ __forceinline__ void layerNormKey(const float *x, const float *w,
                                             const float *bias, float *dst,
                                             int hd) {
  double m = 0;
  for (int i = threadIdx.x; i < hd; i += THREADS)
    m += x[i];
  const double mean = hx::blockSumD(m) / (double)hd;
  double var = 0;
  for (int i = threadIdx.x; i < hd; i += THREADS) {
    const double d = (double)x[i] - mean;
    var += d * d;
  }
  const double inv = 1.0 / sqrt(hx::blockSumD(var) / (double)hd + 1e-6);
  for (int i = threadIdx.x; i < hd; i += THREADS)
    dst[i] =
        (float)(((double)x[i] - mean) * inv * (double)w[i] + (double)bias[i]);
}

} // namespace hx

/// Grid (1, B); keys [slots, maxCtx] rows of kv::rowBytes(KV, hd).
template <int KV, int THREADS>
__device__ __forceinline__ void indexKeyStore(GLM_INDEX_KEY_STORE_PARAMS) {
  static_assert(THREADS >= 32 && THREADS <= 1024 &&
                    (THREADS & (THREADS - 1)) == 0,
                "THREADS: a power of two (hx::blockSumD's tree)");
  static_assert(KV >= kv::kF32 && KV <= kv::kE4m3, "KV: f32, bf16 or e4m3");
  const int b = blockIdx.y;
  const long long r = kv::slotRows(pages, pageShift, seq[b], maxCtx)(pos[b]);
  const float *x = k + (long long)b * hd; // (hd)
  float *dst;                             // (hd) the key in fp32
  if constexpr (KV == kv::kF32)
    dst = (float *)keys + r * hd;
  else
    dst = kv::stage<KV>();
  hx::layerNormKey<THREADS>(x, w, bias, dst, hd);
  __syncthreads();
  for (int i = threadIdx.x; i < dr / 2; i += THREADS)
    hx::ropePair(dst, i, dr, pos[b], theta);
  if constexpr (KV != kv::kF32) {
    __syncthreads();
    kv::store<KV, THREADS>(dst, keys, r, hd);
  }
}

} // namespace glm
