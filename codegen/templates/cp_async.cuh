// cp_async.cuh - global -> shared copies that bypass registers (cp.async,
// sm_80 and later: the H200's sm_90 and the Sparks' sm_121), grouped and
// waited on by commit group: the rings of gemm_trellis and gemm_dense.
#pragma once

namespace glm {

__device__ __forceinline__ unsigned cpAsyncSmem(const void *p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
/// 16 bytes (both addresses 16-byte aligned), cached in L2 only.
__device__ __forceinline__ void cpAsync16(void *dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                   cpAsyncSmem(dst)),
               "l"(src));
}
/// 16 bytes, or 16 zero bytes when !on (src is not read then): a
/// predicated copy without a branch around it.
__device__ __forceinline__ void cpAsync16(void *dst, const void *src,
                                          bool on) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   cpAsyncSmem(dst)),
               "l"(src), "r"(on ? 16 : 0));
}
/// 4 bytes (4-byte aligned).
__device__ __forceinline__ void cpAsync4(void *dst, const void *src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(
                   cpAsyncSmem(dst)),
               "l"(src));
}
/// Closes this thread's copies issued since the last commit into a group.
__device__ __forceinline__ void cpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
/// Waits until at most N of this thread's groups are in flight.
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

} // namespace glm
