// dsa_select.cuh - the DSA selection: the k largest scores of row b (ties:
// lower position) in ascending position order; all T = pos[b] + 1 when
// T <= k. One block per row.
// POOL > 1 (GLM-5.3-Flash's k-pool indexer, index_kpool = POOL): the
// candidates are the T = (pos[b] + 1) / POOL complete pools (scores and
// flags [B, maxCtx / POOL], maxCtx counting tokens); the chosen pools are
// expanded to their POOL tokens, ascending, then the tail tokens
// T·POOL .. pos[b] (the incomplete pool, always selected) follow; sel
// stays [B, maxCtx] tokens. With T <= k every token 0..pos[b] is selected.
#pragma once

#define GLM_DSA_SELECT_PARAMS                                                  \
  const double *scoreAll, const int *pos, int k, int *flagsAll, int *selAll,   \
      int *nsel, int maxCtx
#define GLM_DSA_SELECT_ARGS scoreAll, pos, k, flagsAll, selAll, nsel, maxCtx

namespace glm {

/// t is picked when fewer than k positions come before it in (score
/// descending, position ascending) order. Grid (1, B); flags scratch.
template <int POOL, int THREADS>
__device__ __forceinline__ void dsaSelect(GLM_DSA_SELECT_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  static_assert(POOL >= 1, "POOL: tokens per candidate");
  const int b = blockIdx.y, T = (pos[b] + 1) / POOL, pc = maxCtx / POOL;
  const double *score = scoreAll + (long long)b * pc; // (pc)
  int *flags = flagsAll + (long long)b * pc;          // (pc)
  int *sel = selAll + (long long)b * maxCtx;          // (maxCtx)
  if (T <= k) {
    for (int t = threadIdx.x; t <= pos[b]; t += THREADS)
      sel[t] = t;
    if (threadIdx.x == 0)
      nsel[b] = pos[b] + 1;
    return;
  }
  for (int t = threadIdx.x; t < T; t += THREADS) {
    const double st = score[t];
    int rank = 0;
    for (int u = 0; u < T && rank < k; ++u) {
      const double su = score[u];
      rank += (su > st || (su == st && u < t)) ? 1 : 0;
    }
    flags[t] = rank < k;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int n = 0;
    for (int t = 0; t < T; ++t)
      if (flags[t])
        for (int j = 0; j < POOL; ++j)
          sel[n++] = t * POOL + j;
    for (int t = T * POOL; t <= pos[b]; ++t) // POOL > 1: the tail
      sel[n++] = t;
    nsel[b] = n;
  }
}

} // namespace glm
