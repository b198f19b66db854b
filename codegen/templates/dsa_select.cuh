// dsa_select.cuh - the DSA selection: the k largest scores of row b (ties:
// lower position) in ascending position order; all T = pos[b] + 1 when
// T <= k. One block per row.
#pragma once

#define GLM_DSA_SELECT_PARAMS                                                  \
  const double *scoreAll, const int *pos, int k, int *flagsAll, int *selAll,   \
      int *nsel, int maxCtx
#define GLM_DSA_SELECT_ARGS scoreAll, pos, k, flagsAll, selAll, nsel, maxCtx

namespace glm {

/// t is picked when fewer than k positions come before it in (score
/// descending, position ascending) order. Grid (1, B); flags scratch.
template <int THREADS>
__device__ __forceinline__ void dsaSelect(GLM_DSA_SELECT_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int b = blockIdx.y, T = pos[b] + 1;
  const double *score = scoreAll + (long long)b * maxCtx; // (maxCtx)
  int *flags = flagsAll + (long long)b * maxCtx;          // (maxCtx)
  int *sel = selAll + (long long)b * maxCtx;              // (maxCtx)
  if (T <= k) {
    for (int t = threadIdx.x; t < T; t += THREADS)
      sel[t] = t;
    if (threadIdx.x == 0)
      nsel[b] = T;
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
        sel[n++] = t;
    nsel[b] = n;
  }
}

} // namespace glm
