// moe_entries.cuh - the entries of a MoE prefill step, shared by moe_group,
// moe_gather, moe_act, moe_combine and their CPU twins (runtime/twins/
// twin_moe_prefill.cpp includes this file, so both read entries alike).
//
// A step of T token rows routes every row to topk experts (expert_ids
// [T][topk], route_w [T][topk]; an id < 0 or >= E is an empty slot) and to
// the S shared experts E .. E+S-1 (weight 1). Its U = topk + S entries per
// row are numbered q = t*U + k: k < topk the routed slot k, k = topk + j
// shared expert E + j. moe_group sorts the valid entries by expert (then
// q) into positions i = 0 .. (order[i] = q, entry_of[q] = i); the prefill
// buffers (X, Zgu, act, zd) have one row per position.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define GLM_MOE_ENTRIES_HD __host__ __device__ __forceinline__
#else
#define GLM_MOE_ENTRIES_HD inline
#endif

namespace glm {

/// The most experts (routed + shared) moe_group sorts: its per-expert
/// tables live in static shared memory.
constexpr int kMoeGroupMaxExperts = 512;

/// The expert of entry q (< T*U, U >= 1), or -1 for an empty slot.
GLM_MOE_ENTRIES_HD int moeEntryExpert(const int *ids, int q, int U, int topk,
                                      int E) {
  const int t = q / U, k = q - t * U;
  if (k >= topk)
    return E + (k - topk);
  const int id = ids[(long long)t * topk + k];
  return id >= 0 && id < E ? id : -1;
}

} // namespace glm
