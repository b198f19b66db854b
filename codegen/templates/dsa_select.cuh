// dsa_select.cuh - the DSA selection: the k largest scores of row b (ties:
// lower position) in ascending position order; all T = pos[b] + 1 when
// T <= k. One block per row.
// POOL > 1 (GLM-5.3-Flash's k-pool indexer, index_kpool = POOL): the
// candidates are the T = (pos[b] + 1) / POOL complete pools (scores and
// flags [B, maxCtx / POOL], maxCtx counting tokens); the chosen pools are
// expanded to their POOL tokens, ascending, then the tail tokens
// T·POOL .. pos[b] (the incomplete pool, always selected) follow; sel
// stays [B, maxCtx] tokens. With T <= k every token 0..pos[b] is selected.
// Order: scores as fp64 values, -0 equal to +0, NaN above every number
// (dsa::scoreKey); flags[t] = 1 where t is chosen.
// Radix select: eight passes of 8 bits over the scores' order-preserving
// keys find the k-th largest key K and how many keys equal to K to take
// (the lowest positions); then one pass in position order writes the
// chosen ones through block-wide prefix sums. O(T) a row: the earlier
// rank-counting form was O(T^2) (229 ms of a 252 ms decode step at 16K
// tokens, docs/perf.md session 21).
#pragma once

#define GLM_DSA_SELECT_PARAMS                                                  \
  const double *scoreAll, const int *pos, int k, int *flagsAll, int *selAll,   \
      int *nsel, int maxCtx
#define GLM_DSA_SELECT_ARGS scoreAll, pos, k, flagsAll, selAll, nsel, maxCtx

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define GLM_DSA_HD __host__ __device__ __forceinline__
#else
#define GLM_DSA_HD inline
#include <cstring>
#endif

namespace glm {
namespace dsa {

/// A score as an unsigned key whose order is the selection's: larger
/// score, larger key; -0 as +0; NaN the largest.
GLM_DSA_HD unsigned long long scoreKey(double s) {
  if (s != s)
    return ~0ull;
  if (s == 0.0)
    s = 0.0;
#if defined(__CUDA_ARCH__)
  const unsigned long long u = (unsigned long long)__double_as_longlong(s);
#else
  unsigned long long u;
  std::memcpy(&u, &s, 8);
#endif
  return (u >> 63) ? ~u : (u | 0x8000000000000000ull);
}

} // namespace dsa

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace dsa {
/// v summed over lanes 0 .. this lane of the warp.
template <class V> __device__ __forceinline__ V warpInclusiveSum(V v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const V u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o)
      v += u;
  }
  return v;
}
} // namespace dsa

/// Grid (1, B); flags scratch. THREADS a multiple of 64, at most 1024.
template <int POOL, int THREADS>
__device__ __forceinline__ void dsaSelect(GLM_DSA_SELECT_PARAMS) {
  static_assert(THREADS % 64 == 0 && THREADS <= 1024,
                "THREADS: whole warps, 256 bins of 8 a lane in warp 0");
  static_assert(POOL >= 1, "POOL: tokens per candidate");
  constexpr int NW = THREADS / 32;
  __shared__ unsigned hist[256];
  __shared__ unsigned long long sPrefix;
  __shared__ int sNeed;
  __shared__ int warpSum[NW];
  const int b = blockIdx.y, T = (pos[b] + 1) / POOL, pc = maxCtx / POOL;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const double *score = scoreAll + (long long)b * pc; // (pc)
  int *flags = flagsAll + (long long)b * pc;          // (pc)
  int *sel = selAll + (long long)b * maxCtx;          // (maxCtx)
  if (T <= k || k <= 0) { // all, or (k 0) only the tail
    const int first = k <= 0 ? T * POOL : 0;
    for (int t = first + threadIdx.x; t <= pos[b]; t += THREADS)
      sel[t - first] = t;
    for (int t = threadIdx.x; k <= 0 && t < T; t += THREADS)
      flags[t] = 0;
    if (threadIdx.x == 0)
      nsel[b] = pos[b] + 1 - first;
    return;
  }
  // The k-th largest key, a digit a pass from the top.
  unsigned long long prefix = 0, mask = 0;
  int need = k; // keys still to choose at or below the prefix
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += THREADS)
      hist[i] = 0;
    __syncthreads();
    for (int t = threadIdx.x; t < T; t += THREADS) {
      const unsigned long long key = dsa::scoreKey(score[t]);
      if ((key & mask) == prefix)
        atomicAdd(&hist[(key >> shift) & 255], 1u);
    }
    __syncthreads();
    if (w == 0) {
      // Lane l holds digits 255 - 8l .. 248 - 8l (descending); the first
      // lane whose running count from the top reaches `need` holds the
      // digit.
      unsigned c[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j)
        sum += (c[j] = hist[255 - 8 * lane - j]);
      const unsigned run = dsa::warpInclusiveSum(sum);
      const unsigned hit = __ballot_sync(0xffffffffu, run >= (unsigned)need);
      if (lane == __ffs(hit) - 1) {
        unsigned cum = run - sum;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (cum + c[j] >= (unsigned)need) {
            sPrefix = prefix | ((unsigned long long)(255 - 8 * lane - j) << shift);
            sNeed = need - int(cum);
            break;
          }
          cum += c[j];
        }
      }
    }
    __syncthreads();
    prefix = sPrefix;
    need = sNeed;
    mask |= 255ull << shift;
    __syncthreads(); // hist is cleared next pass
  }
  // Keys above K are chosen, and the first `need` equal to K; positions
  // ascending through prefix sums (warp shuffles, then the warps' totals).
  int eqBase = 0, outBase = 0;
  auto blockScan = [&](int v, int &total) {
    const int x = dsa::warpInclusiveSum(v);
    if (lane == 31)
      warpSum[w] = x;
    __syncthreads();
    int before = 0;
    total = 0;
    for (int i = 0; i < NW; ++i) {
      before += i < w ? warpSum[i] : 0;
      total += warpSum[i];
    }
    __syncthreads(); // warpSum is reused by the next scan
    return before + x - v; // exclusive
  };
  for (int t0 = 0; t0 < T; t0 += THREADS) {
    const int t = t0 + threadIdx.x;
    const unsigned long long key =
        t < T ? dsa::scoreKey(score[t]) : 0ull;
    const int eq = t < T && key == prefix, gt = t < T && key > prefix;
    int eqTotal, chosenTotal;
    const int eqBefore = eqBase + blockScan(eq, eqTotal);
    const int chosen = gt || (eq && eqBefore < need);
    const int at = outBase + blockScan(chosen, chosenTotal);
    if (t < T) {
      flags[t] = chosen;
      if (chosen)
        for (int j = 0; j < POOL; ++j)
          sel[at * POOL + j] = t * POOL + j;
    }
    eqBase += eqTotal;
    outBase += chosenTotal;
  }
  const int n = outBase * POOL; // = k * POOL
  for (int t = T * POOL + threadIdx.x; t <= pos[b]; t += THREADS)
    sel[n + (t - T * POOL)] = t; // POOL > 1: the tail
  if (threadIdx.x == 0)
    nsel[b] = n + (pos[b] + 1 - T * POOL);
}

#endif

} // namespace glm
