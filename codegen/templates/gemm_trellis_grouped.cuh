// gemm_trellis_grouped.cuh - prefill GEMM over many expert halves in one
// launch (MoE prefill).
//
// A list of work items, each up to BM token rows of one trellis matrix (an
// expert half: gate/up half 6144 -> 128, down half 128 -> 6144 for GLM-5.3;
// uniform in/out per launch), computed exactly like gemm_trellis (same tile
// code, same numerics): z[item rows] = xh[gathered rows, x_col..] . T_item.
// Item i: tiles (first tile of the half; null = skipped, e.g. a half this
// rank does not own), k (its width; the launch's widths set must contain
// it — an item of another width gets NaN outputs, never silent zeros),
// rows (1..BM), row_start (first entry of row_ids, the token rows routed to
// the expert; without row_ids the first xh row), x_col (first xh column:
// the down half's 128-channel slice of the activation), z_off (z element
// offset of the item's row 0, column 0). Down halves of one expert write
// separate partials (sum them as moe_reduce does), use accumulate with
// one launch per half, or HALVES > 1: block x takes items x, x + n_items,
// .., x + (HALVES - 1) * n_items (one expert row block's halves in order:
// same rows, row_start and z_off, their own tiles / k / x_col; null tiles
// skipped), adds them in its fp32 accumulators and stores once (one launch
// instead of HALVES, and z read and written once). Items are built on the
// device after routing; the
// grid is (items, ceil(out / THREADS)) (BN = THREADS: use 128 threads for
// 128-wide gate/up halves, 256 for down), so a padded upper-bound item
// count with null tiles is fine.
#pragma once

#include "gemm_item.cuh"
#include "gemm_trellis.cuh"

#define GLM_GEMM_TRELLIS_GROUPED_PARAMS                                        \
  const void *__restrict__ xh, const int *__restrict__ row_ids,                \
      const glm::GemmItem *__restrict__ items, float *__restrict__ z,          \
      int n_items, int in, int out, int x_stride, int z_stride,                \
      int accumulate, int sI, int sI8, int sJ8
#define GLM_GEMM_TRELLIS_GROUPED_ARGS                                          \
  xh, row_ids, items, z, n_items, in, out, x_stride, z_stride, accumulate,     \
      sI, sI8, sJ8

namespace glm {

/// The largest tile shared memory over the widths in WMASK (one buffer,
/// carved by whichever width an item has).
template <int WMASK, int BM, int THREADS, int K = 1> struct GroupedSmem {
  static constexpr int kOwn =
      (WMASK & (1 << K)) ? GemmSmem<K, BM, THREADS>::kBytes : 0;
  static constexpr int kRest = GroupedSmem<WMASK, BM, THREADS, K + 1>::kBytes;
  static constexpr int kBytes = kOwn > kRest ? kOwn : kRest;
};
template <int WMASK, int BM, int THREADS>
struct GroupedSmem<WMASK, BM, THREADS, 9> {
  static constexpr int kBytes = 0;
};

/// HALVES > 1: the halves of item blockIdx.x added in registers, one store.
template <int WMASK, int CB, bool E4M3, int XT, int BM, int HALVES,
          int THREADS>
__device__ __forceinline__ void
gemmTrellisHalves(GLM_GEMM_TRELLIS_GROUPED_PARAMS, unsigned char *smem) {
  const GemmItem first = items[blockIdx.x];
  if (first.rows <= 0) // a slot past the blocks
    return;
  const int m = first.rows < BM ? first.rows : BM;
  const int n0 = blockIdx.y * THREADS; // BN = THREADS
  const TileStrides st{sI, sI8, sJ8};
  TileAcc<BM> acc;
  acc.zero();
  bool any = false, unbuilt = false;
  for (int h = 0; h < HALVES; ++h) {
    const GemmItem it = items[(long long)h * n_items + blockIdx.x];
    if (it.tiles == nullptr)
      continue; // a half of another rank
    any = true;
    const int *map = row_ids ? row_ids + it.row_start : nullptr;
    const long long xoff =
        (row_ids ? 0 : (long long)it.row_start * x_stride) + it.x_col;
    const void *x = static_cast<const unsigned char *>(xh) +
                    xoff * (XT == 1 ? 2 : 4);
#define GLM_GEMM_HALVES_CASE(KK)                                               \
  case KK:                                                                     \
    if (WMASK & (1 << KK))                                                     \
      gemmTrellisMainloop<KK, CB, E4M3, XT, BM, THREADS>(                      \
          x, map, it.tiles, m, in, out, x_stride, st, 0, n0, smem, acc);       \
    else                                                                       \
      unbuilt = true;                                                          \
    break;
    switch (it.k) {
      GLM_GEMM_HALVES_CASE(1)
      GLM_GEMM_HALVES_CASE(2)
      GLM_GEMM_HALVES_CASE(3)
      GLM_GEMM_HALVES_CASE(4)
      GLM_GEMM_HALVES_CASE(5)
      GLM_GEMM_HALVES_CASE(6)
      GLM_GEMM_HALVES_CASE(7)
      GLM_GEMM_HALVES_CASE(8)
    default:
      unbuilt = true;
    }
#undef GLM_GEMM_HALVES_CASE
  }
  float *zz = z + first.z_off;
  if (unbuilt) { // a width this kernel was not built for: NaN, never silence
    for (int idx = threadIdx.x; idx < m * THREADS; idx += THREADS) {
      const int r = idx / THREADS, c = n0 + idx % THREADS;
      if (c < out)
        zz[(long long)r * z_stride + c] = __int_as_float(0x7fc00000);
    }
  } else if (any) {
    gemmTrellisStore<BM, THREADS>(acc, zz, m, out, z_stride, accumulate, 0,
                                  n0);
  }
}

template <int WMASK, int CB, bool E4M3, int XT, int BM, int HALVES,
          int THREADS>
__device__ __forceinline__ void gemmTrellisGrouped(
    GLM_GEMM_TRELLIS_GROUPED_PARAMS) {
  static_assert(WMASK != 0 && (WMASK & ~0x1FE) == 0, "widths 1..8");
  static_assert(HALVES >= 1 && HALVES <= 32, "halves: 1..32");
  __shared__ __align__(16) unsigned char smem[GroupedSmem<WMASK, BM, THREADS>::kBytes];
  if ((int)blockIdx.x >= n_items)
    return;
  if (HALVES > 1) {
    gemmTrellisHalves<WMASK, CB, E4M3, XT, BM, HALVES, THREADS>(
        GLM_GEMM_TRELLIS_GROUPED_ARGS, smem);
    return;
  }
  const GemmItem it = items[blockIdx.x];
  if (it.tiles == nullptr || it.rows <= 0)
    return;
  const int m = it.rows < BM ? it.rows : BM;
  const int n0 = blockIdx.y * THREADS; // BN = THREADS
  const int *map = row_ids ? row_ids + it.row_start : nullptr;
  const long long xoff =
      (row_ids ? 0 : (long long)it.row_start * x_stride) + it.x_col;
  const void *x = static_cast<const unsigned char *>(xh) +
                  xoff * (XT == 1 ? 2 : 4);
  float *zz = z + it.z_off;
  const TileStrides st{sI, sI8, sJ8};
#define GLM_GEMM_GROUPED_CASE(KK)                                              \
  case KK:                                                                     \
    if (WMASK & (1 << KK)) {                                                   \
      gemmTrellisTile<KK, CB, E4M3, XT, BM, THREADS>(                          \
          x, map, it.tiles, zz, m, in, out, x_stride, z_stride, accumulate,    \
          st, 0, n0, smem);                                                    \
      return;                                                                  \
    }                                                                          \
    break;
  switch (it.k) {
    GLM_GEMM_GROUPED_CASE(1)
    GLM_GEMM_GROUPED_CASE(2)
    GLM_GEMM_GROUPED_CASE(3)
    GLM_GEMM_GROUPED_CASE(4)
    GLM_GEMM_GROUPED_CASE(5)
    GLM_GEMM_GROUPED_CASE(6)
    GLM_GEMM_GROUPED_CASE(7)
    GLM_GEMM_GROUPED_CASE(8)
  default:
    break;
  }
#undef GLM_GEMM_GROUPED_CASE
  // A width this kernel was not built for: NaN outputs, never silence.
  for (int idx = threadIdx.x; idx < m * THREADS; idx += THREADS) {
    const int r = idx / THREADS, c = n0 + idx % THREADS;
    if (c < out)
      zz[(long long)r * z_stride + c] = __int_as_float(0x7fc00000);
  }
}

} // namespace glm
