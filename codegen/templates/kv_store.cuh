// kv_store.cuh - the latent cache row of (seq[b], pos[b]):
// [rmsnorm(kva[:kvr]) * w | rope(kpe)], fp64 norm (tree sum), fp64 RoPE,
// stored in the cache's form KV (kv_cache.cuh: f32, bf16, or e4m3 with a
// scale per row; the bf16 and e4m3 rows are computed in fp32 in shared
// memory first, kvr + dr <= kv::kStageMax).
#pragma once

#include "helper_common.cuh"
#include "kv_cache.cuh"

#define GLM_KV_STORE_PARAMS                                                    \
  const float *kva, const float *normW, void *cache, const int *seq,           \
      const int *pos, int kvr, int dr, int maxCtx, double eps, double theta,   \
      const int *pages, int pageShift
#define GLM_KV_STORE_ARGS                                                      \
  kva, normW, cache, seq, pos, kvr, dr, maxCtx, eps, theta, pages, pageShift

namespace glm {

/// Grid (1, B); cache [slots, maxCtx] rows of kv::rowBytes(KV, kvr + dr)
/// (paged: kv::SlotRows).
template <int KV, int THREADS>
__device__ __forceinline__ void kvStore(GLM_KV_STORE_PARAMS) {
  static_assert(THREADS >= 32 && THREADS <= 1024 &&
                    (THREADS & (THREADS - 1)) == 0,
                "THREADS: a power of two (hx::blockSumD's tree)");
  static_assert(KV >= kv::kF32 && KV <= kv::kE4m3, "KV: f32, bf16 or e4m3");
  const int b = blockIdx.y, lat = kvr + dr;
  const long long r = kv::slotRows(pages, pageShift, seq[b], maxCtx)(pos[b]);
  const float *src = kva + (long long)b * lat; // (lat)
  float *dst;                                  // (lat) the row in fp32
  if constexpr (KV == kv::kF32)
    dst = (float *)cache + r * lat;
  else
    dst = kv::stage<KV>();
  double ss = 0;
  for (int i = threadIdx.x; i < kvr; i += THREADS)
    ss += (double)src[i] * (double)src[i];
  const double inv = 1.0 / sqrt(hx::blockSumD(ss) / (double)kvr + eps);
  for (int i = threadIdx.x; i < kvr; i += THREADS)
    dst[i] = (float)((double)normW[i] * ((double)src[i] * inv));
  for (int i = threadIdx.x; i < dr; i += THREADS)
    dst[kvr + i] = src[kvr + i];
  __syncthreads();
  for (int i = threadIdx.x; i < dr / 2; i += THREADS)
    hx::ropePair(dst + kvr, i, dr, pos[b], theta);
  if constexpr (KV != kv::kF32) {
    __syncthreads();
    kv::store<KV, THREADS>(dst, cache, r, lat);
  }
}

} // namespace glm
