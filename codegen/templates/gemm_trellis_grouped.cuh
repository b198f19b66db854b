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
// instead of HALVES, and z read and written once); the halves run as one
// chain of steps through one cp.async ring. Items are built on the device
// after routing; the grid is (items, ceil(out / THREADS)) (BN = THREADS: use
// 128 threads for 128-wide gate/up halves, 256 or 128 for down; bm 96 takes
// 128: bm x 32 inputs in whole 8-value chunks a thread), so a padded
// upper-bound item count with null tiles is fine.
#pragma once

#include "gemm_item.cuh"
#include "gemm_trellis.cuh"

#define GLM_GEMM_TRELLIS_GROUPED_PARAMS                                        \
  const void *__restrict__ xh, const int *__restrict__ row_ids,                \
      const glm::GemmItem *__restrict__ items, float *__restrict__ z,          \
      int n_items, int in, int out, int x_stride, int z_stride,                \
      int accumulate, int sI, int sI8, int sJ8
#define GLM_GEMM_TRELLIS_GROUPED_ARGS                                          \
  xh, row_ids, items, z, n_items, in, out, x_stride, z_stride, accumulate, sI, \
      sI8, sJ8

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

/// The widest width in WMASK (sizes the chained halves' ring slots).
template <int WMASK> struct WidestWidth {
  static constexpr int value = (WMASK >> 8) & 1   ? 8
                               : (WMASK >> 7) & 1 ? 7
                               : (WMASK >> 6) & 1 ? 6
                               : (WMASK >> 5) & 1 ? 5
                               : (WMASK >> 4) & 1 ? 4
                               : (WMASK >> 3) & 1 ? 3
                               : (WMASK >> 2) & 1 ? 2
                                                  : 1;
};

/// The chained halves' pipeline state (gemmTrellisHalves): the ring and xh
/// buffers, the next chain step each of the word copy and the xh load
/// fetches (half, step within it: counters, no division), and the
/// accumulators. half<KK>() runs one half's steps at its width.
template <int WMASK, int CB, bool E4M3, int XT, int BM, int THREADS>
struct HalvesChain {
  static constexpr int KMAX = WidestWidth<WMASK>::value;
  typedef GemmSmem<KMAX, BM, THREADS> L;
  typedef XStage<BM, THREADS> XS;
  static constexpr int BK = 32;
  static constexpr int kWide = L::kBN / 16;
  static constexpr int kSlotWords = L::kStepWords;
  static constexpr int NSTAGE = L::kStages;
  static constexpr int NAHEAD = NSTAGE - 1;

  u32 (*sWords)[kSlotWords];
  __half (*sX)[BM][XS::kPitch];
  const unsigned char *const *tiles; // the halves on this rank, in order
  const int *ks, *xcols;
  int count, nk, total, lane, warp;
  const void *x;
  TileStrides st;
  WordCopy<THREADS> wc;
  XS xs;
  TileAcc<BM> acc;
  int wordStep = 0, wordHalf = 0, wordK = 0; // next step to copy
  int xHalf = 0, xK = 0;                     // next step of xh to load

  /// The next chain step's words into its ring slot (a commit group even
  /// past the chain's end, so the waits count steps).
  __device__ __forceinline__ void loadWords() {
    if (wordHalf < count) {
      wc.copy(sWords[wordStep % NSTAGE],
              reinterpret_cast<const u32 *>(tiles[wordHalf]), wordK,
              ks[wordHalf], st);
      if (++wordK == nk)
        wordK = 0, ++wordHalf;
    }
    ++wordStep;
    cpAsyncCommit();
  }
  /// The next chain step's xh columns into registers.
  __device__ __forceinline__ void loadX() {
    xs.template load<XT>(x, (long long)xcols[xHalf] + xK * BK);
    if (++xK == nk)
      xK = 0, ++xHalf;
  }
  __device__ __forceinline__ void start() {
    acc.zero();
#pragma unroll
    for (int s = 0; s < NAHEAD; ++s)
      loadWords();
    loadX();
    xs.store(sX[0]);
    cpAsyncWait<NAHEAD - 1>(); // step 0 landed
    __syncthreads();
  }
  /// Half a (chain steps a * nk ..) at width KK: gemmTrellisMainloop's
  /// loop, with the words and xh of the next half already in flight.
  template <int KK> __device__ __forceinline__ void half(int a) {
    const LaneMap<KK> lm(lane);
    auto decode = [&](int g, int kk, uint4 b[2]) {
      const u32 *src = sWords[g % NSTAGE] + (kk * kWide + 2 * warp) * 8 * KK;
      b[0] = decodeLaneFrag<KK, CB, E4M3>(src, lm);
      b[1] = decodeLaneFrag<KK, CB, E4M3>(src + 8 * KK, lm);
    };
    uint4 bcur[2], bnext[2];
    for (int k = 0; k < nk; ++k) {
      const int g = a * nk + k, buf = g & 1;
      cpAsyncWait<NAHEAD - 2 < 0 ? 0 : NAHEAD - 2>(); // step g + 1 landed
      __syncthreads(); // sX[buf] stored; slot g - 1 and sX[buf ^ 1] free
      loadWords();     // step g + NAHEAD
      const bool more = g + 1 < total;
      if (more)
        loadX(); // step g + 1
      if (k == 0)
        decode(g, 0, bcur);
      decode(g, 1, bnext);
      mmaK16<BM>(acc.v, sX[buf], 0, bcur, lane);
      if (k + 1 < nk)
        decode(g + 1, 0, bcur);
      mmaK16<BM>(acc.v, sX[buf], 1, bnext, lane);
      if (more)
        xs.store(sX[buf ^ 1]);
    }
  }
};

/// HALVES > 1: the halves of item blockIdx.x added in registers, one store.
/// The block's halves run as one chain of 32-input steps through one
/// cp.async ring (slots of the widest width): the next half's words and xh
/// are in flight while this half multiplies, where a mainloop per half would
/// fill and drain the ring HALVES times (the down GEMM's halves are 4 steps
/// each). A half's steps decode at its own width; every accumulator sees the
/// same MMAs in the same order as one mainloop per half.
template <int WMASK, int CB, bool E4M3, int XT, int BM, int HALVES, int THREADS>
__device__ __forceinline__ void
gemmTrellisHalves(GLM_GEMM_TRELLIS_GROUPED_PARAMS, unsigned char *smem) {
  __shared__ const unsigned char *sTiles[HALVES];
  __shared__ int sK[HALVES], sXcol[HALVES], sCount, sUnbuilt;

  const GemmItem first = items[blockIdx.x];
  if (first.rows <= 0) // a slot past the blocks
    return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // The halves with tiles on this rank, in order (warp 0, a lane a half).
  if (warp == 0) {
    const bool have = lane < HALVES;
    GemmItem it{};
    if (have)
      it = items[(long long)lane * n_items + blockIdx.x];
    const bool on = have && it.tiles != nullptr;
    const unsigned mask = __ballot_sync(0xFFFFFFFFu, on);
    const bool built = it.k >= 1 && it.k <= 8 && ((WMASK >> it.k) & 1);
    const unsigned bad = __ballot_sync(0xFFFFFFFFu, on && !built);
    if (on) {
      const int slot = __popc(mask & ((1u << lane) - 1u));
      sTiles[slot] = it.tiles;
      sK[slot] = it.k;
      sXcol[slot] = it.x_col;
    }
    if (lane == 0)
      sCount = __popc(mask), sUnbuilt = bad != 0;
  }
  __syncthreads();
  const int count = sCount;
  const int m = first.rows < BM ? first.rows : BM;
  const int n0 = blockIdx.y * THREADS; // BN = THREADS
  float *zz = z + first.z_off;
  if (sUnbuilt) { // a width this kernel was not built for: NaN, never silence
    for (int idx = threadIdx.x; idx < m * THREADS; idx += THREADS) {
      const int r = idx / THREADS, c = n0 + idx % THREADS;
      if (c < out)
        zz[(long long)r * z_stride + c] = __int_as_float(0x7fc00000);
    }
    return;
  }
  if (count == 0)
    return; // every half on another rank

  typedef HalvesChain<WMASK, CB, E4M3, XT, BM, THREADS> Chain;
  Chain c;
  c.sWords = reinterpret_cast<u32(*)[Chain::kSlotWords]>(smem);
  c.sX = reinterpret_cast<__half(*)[BM][Chain::XS::kPitch]>(
      smem + Chain::L::kWordsBytes);
  c.tiles = sTiles, c.ks = sK, c.xcols = sXcol;
  c.count = count, c.nk = in / Chain::BK, c.total = count * c.nk;
  c.lane = lane, c.warp = warp;
  c.x =
      static_cast<const unsigned char *>(xh) +
      (row_ids ? 0 : (long long)first.row_start * x_stride) * (XT == 1 ? 2 : 4);
  c.st = TileStrides{sI, sI8, sJ8};
  c.wc.init(n0, out, c.st);
  c.xs.init(row_ids ? row_ids + first.row_start : nullptr, 0, m, x_stride);
  c.start();
  for (int a = 0; a < count; ++a) {
    switch (sK[a]) {
#define GLM_GEMM_HALVES_CASE(KK)                                               \
  case KK:                                                                     \
    if (WMASK & (1 << KK))                                                     \
      c.template half<(WMASK & (1 << KK)) ? KK : Chain::KMAX>(a);              \
    break;
      GLM_GEMM_HALVES_CASE(1)
      GLM_GEMM_HALVES_CASE(2)
      GLM_GEMM_HALVES_CASE(3)
      GLM_GEMM_HALVES_CASE(4)
      GLM_GEMM_HALVES_CASE(5)
      GLM_GEMM_HALVES_CASE(6)
      GLM_GEMM_HALVES_CASE(7)
      GLM_GEMM_HALVES_CASE(8)
#undef GLM_GEMM_HALVES_CASE
    default:
      break; // unreachable: sUnbuilt covers the widths not built
    }
  }
  cpAsyncWait<0>();
  gemmTrellisStore<BM, THREADS>(c.acc, zz, m, out, z_stride, accumulate, 0, n0);
}

template <int WMASK, int CB, bool E4M3, int XT, int BM, int HALVES, int THREADS>
__device__ __forceinline__ void
gemmTrellisGrouped(GLM_GEMM_TRELLIS_GROUPED_PARAMS) {
  static_assert(WMASK != 0 && (WMASK & ~0x1FE) == 0, "widths 1..8");
  static_assert(HALVES >= 1 && HALVES <= 32, "halves: 1..32");
  __shared__ __align__(
      16) unsigned char smem[GroupedSmem<WMASK, BM, THREADS>::kBytes];
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
  const void *x =
      static_cast<const unsigned char *>(xh) + xoff * (XT == 1 ? 2 : 4);
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
