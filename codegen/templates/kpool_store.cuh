// kpool_store.cuh - the k-pool indexer's decode store (GLM-5.3-Flash): the
// new token's index key (LayerNorm, as index_key_store, no RoPE: Flash's
// indexer is NoPE) and its compress-gate row go into a ring of the last P
// tokens; the token that completes a pool (pos % P == P−1) writes the pooled
// key K_p = Σ_j softmax_j(gate_j + ape_j) ⊙ key_j (per channel, over the P
// members) that indexer_scores_ctx<pool=P> scores and dsa_select<pool=P>
// selects from.
//
// Launch: grid (1, B), block THREADS (a power of two: hx::blockSumD); row
// b = blockIdx.y, slot seq[b], position pos[b].
//   k        [B, hd] fp32   wk·h (before the LayerNorm)
//   w, bias  [hd] fp32      the key LayerNorm (eps 1e-6)
//   gateIn   [B, gs] fp32   index_kpool_compress_gate·h, row stride gs
//   ape      [P, hd]        stored as adt (0 f32, 1 f16, 2 bf16, 3 e4m3)
//   ring     [slots, 2, P, hd] fp32  member j = pos % P of the current
//            pool: key at row j, gate at row P + j (only complete pools
//            are read, so rows of an earlier pool need no clearing)
//   poolKeys [slots, maxCtx / P] rows of kv::rowBytes(KV, hd)  out: pool
//            pos / P, written when the pool completes, in the cache's form
//            KV (kv_cache.cuh; the ring stays fp32: it is the pooling's
//            input, and bf16/e4m3 keys are the rounding of the fp32 K_p)
//   hd, P (index_kpool), maxCtx (tokens; a multiple of P)
// Pooling per channel in fp32 with fm::expF (flash_math.cuh): x_j = gate +
// ape, most = max_j x_j, e_j = expF(x_j − most), sum and Σ e_j·key_j in j
// order, K = acc / sum. Thread t owns channels t, t+THREADS, .. in the
// LayerNorm, the ring writes and the pooling alike.
#pragma once

#include "flash_math.cuh"
#include "index_key_store.cuh"
#include "kv_cache.cuh"

#define GLM_KPOOL_STORE_PARAMS                                                 \
  const float *k, const float *w, const float *bias, const float *gateIn,      \
      int gs, const void *ape, int adt, float *ring, void *poolKeys,           \
      const int *seq, const int *pos, int hd, int P, int maxCtx
#define GLM_KPOOL_STORE_ARGS                                                   \
  k, w, bias, gateIn, gs, ape, adt, ring, poolKeys, seq, pos, hd, P, maxCtx

namespace glm {

template <int KV, int THREADS>
__device__ __forceinline__ void kpoolStore(GLM_KPOOL_STORE_PARAMS) {
  static_assert(THREADS >= 32 && THREADS <= 1024 &&
                    (THREADS & (THREADS - 1)) == 0,
                "THREADS: a power of two (hx::blockSumD's tree)");
  static_assert(KV >= kv::kF32 && KV <= kv::kE4m3, "KV: f32, bf16 or e4m3");
  const int b = blockIdx.y, p0 = pos[b], j0 = p0 % P;
  const long long slot = seq[b];
  float *rk = ring + slot * 2 * P * hd; // (P, hd) keys
  float *rg = rk + (long long)P * hd;   // (P, hd) gates
  hx::layerNormKey<THREADS>(k + (long long)b * hd, w, bias,
                            rk + (long long)j0 * hd, hd);
  for (int c = threadIdx.x; c < hd; c += THREADS)
    rg[(long long)j0 * hd + c] = gateIn[(long long)b * gs + c];
  __syncthreads();
  if (j0 != P - 1)
    return;
  const long long row = slot * (maxCtx / P) + p0 / P;
  float *dst; // (hd) K_p in fp32
  if constexpr (KV == kv::kF32)
    dst = (float *)poolKeys + row * hd;
  else
    dst = kv::stage<KV>();
  for (int c = threadIdx.x; c < hd; c += THREADS) {
    float most = -3.402823466e38f;
    for (int j = 0; j < P; ++j) {
      const float x = rg[j * hd + c] + hx::ldAny(ape, j * hd + c, adt);
      most = x > most ? x : most;
    }
    float sum = 0.0f, acc = 0.0f;
    for (int j = 0; j < P; ++j) {
      const float e =
          fm::expF(rg[j * hd + c] + hx::ldAny(ape, j * hd + c, adt) - most);
      sum = sum + e;
      acc = acc + e * rk[j * hd + c];
    }
    dst[c] = acc / sum;
  }
  if constexpr (KV != kv::kF32) {
    __syncthreads();
    kv::store<KV, THREADS>(dst, poolKeys, row, hd);
  }
}

} // namespace glm
