// moe_group.cuh - MoE prefill, step 1: a step's entries sorted by expert,
// and the gemm_trellis_grouped items of its gate/up and down GEMMs (exlr8).
//
// The prefill MoE layer of T rows (moe_entries.cuh for entries q = t*U + k):
//   moe_group   entries -> sorted positions i (order, entry_of), items
//   moe_gather  X[i][p] = fp16(xh[t] * gu_su_block[p][e])
//   gemm_trellis_grouped (gate/up, xt f16): Zgu[i] = X[i] . gate/up halves
//   moe_act     act[i] = fp16(H(SiLU(H(g)*svh) * H(u)*svh * down.suh)/128),
//               zd[i] = 0
//   gemm_trellis_grouped x H (down, accumulate): zd[i] += act[i][h] . down_h
//   moe_combine out[t] = sum_k zd[entry_of[t*U+k]] * sv_block * w
//   hadamard128 (post = signs.out) on out, or after the all-reduce.
//
// ---------------------------------------------------------------- ABI ----
// Template: moeGroup<THREADS>, THREADS 256 or 512 (shared memory: 4 tables
// of kMoeGroupMaxExperts ints plus one per (warp, expert): 40 KB at 512).
// Grid (1, 1, 1) (other blocks return at once); block THREADS.
// Parameters (GLM_MOE_GROUP_PARAMS, in order):
//   expert_ids  int [T][topk] router output (id < 0 or >= E: empty slot)
//   T, topk, E, S  rows, routed slots per row, routed and shared experts;
//               Etot = E + S <= 512, U = topk + S, N = T*U
//   H           halves of 128 intermediate channels, 0..16
//   BM          rows per item (the GEMMs' bm: 64, 96 or 128; >= 1)
//   tiles       [(e*3 + p)*16 + h] first tile of half h of projection p
//               (0 gate, 1 up, 2 down) of expert e; null = not on this rank
//   widths      u8, same index: K of that half
//   hidden, inter  model sizes (hidden % 128 == 0, inter == 128*H)
//   order       int [N] out: order[i] = q of sorted position i, -1 for
//               i >= the number of valid entries
//   entry_of    int [N] out: entry_of[q] = i, -1 for an empty slot
//   gu_items    GemmItem [NB*2*H] out, item (b*2 + p)*H + h
//   down_items  GemmItem [H*NB] out, item h*NB + b
//   NB          item slots per (p, h): at least ceil(N/BM) + Etot (traps
//               below the blocks the routing needs)
// Sorted order: expert ascending, then q ascending (stable; placement uses
// per-warp counts and __match_any_sync ranks, never atomic order). Expert e
// with n_e entries from position off_e has ceil(n_e/BM) blocks; the blocks
// of all experts in expert order take slots b = 0, 1, ..; block (e, j):
//   gate/up p: tiles/k of (e, p, h), row_start = off_e + j*BM,
//              rows = min(BM, n_e - j*BM), x_col = p*hidden,
//              z_off = row_start*2*inter + p*inter + 128*h
//   down:      tiles/k of (e, 2, h), row_start, rows, x_col = 128*h,
//              z_off = row_start*hidden
// Slots past the blocks: tiles null, every field 0. The GEMMs then run as
//   gate/up: xh = X [N][2][hidden] f16, row_ids null, items gu_items,
//     z = Zgu [N][2*inter], n_items NB*2*H, in hidden, out 128, x_stride
//     2*hidden, z_stride 2*inter, accumulate 0, strides (8, 64, 0), 128
//     threads, grid (NB*2*H, 1)
//   down (h = 0 .. H-1): items down_items + h*NB, xh = act [N][inter] f16,
//     z = zd [N][hidden], n_items NB, in 128, out hidden, x_stride inter,
//     z_stride hidden, accumulate 1, strides (8, 0, 64), T threads, grid
//     (NB, hidden/T), T = moeGroupedDownThreads(BM) (moe_trellis_abi.h)
// A repeated expert in one row gives two entries (each with its weight);
// the router never repeats one.
// -------------------------------------------------------------------------
#pragma once

#include "gemm_item.cuh"
#include "moe_entries.cuh"

#define GLM_MOE_GROUP_PARAMS                                                   \
  const int *__restrict__ expert_ids, int T, int topk, int E, int S, int H,    \
      int BM, const unsigned char *const *__restrict__ tiles,                  \
      const unsigned char *__restrict__ widths, int hidden, int inter,         \
      int *__restrict__ order, int *__restrict__ entry_of,                     \
      glm::GemmItem *__restrict__ gu_items,                                    \
      glm::GemmItem *__restrict__ down_items, int NB
#define GLM_MOE_GROUP_ARGS                                                     \
  expert_ids, T, topk, E, S, H, BM, tiles, widths, hidden, inter, order,       \
      entry_of, gu_items, down_items, NB

namespace glm {

/// Exclusive prefix sums of v[0 .. n) in place (n <= kMoeGroupMaxExperts,
/// each thread a run of consecutive values); returns the total to every
/// thread. `warpTot` holds 32 ints.
template <int THREADS>
__device__ __forceinline__ int moeGroupScan(int *v, int n, int *warpTot) {
  constexpr int kPer = (kMoeGroupMaxExperts + THREADS - 1) / THREADS;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int loc[kPer], s = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int idx = tid * kPer + j;
    loc[j] = idx < n ? v[idx] : 0;
    s += loc[j];
  }
  int x = s; // inclusive scan over the warp
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xFFFFFFFFu, x, o);
    if (lane >= o)
      x += y;
  }
  if (lane == 31)
    warpTot[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < THREADS / 32 ? warpTot[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xFFFFFFFFu, w, o);
      if (lane >= o)
        w += y;
    }
    warpTot[lane] = w;
  }
  __syncthreads();
  int run = (warp ? warpTot[warp - 1] : 0) + x - s;
  const int total = warpTot[THREADS / 32 - 1];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int idx = tid * kPer + j;
    if (idx < n)
      v[idx] = run;
    run += loc[j];
  }
  __syncthreads(); // warpTot and v are read again after this
  return total;
}

template <int THREADS>
__device__ __forceinline__ void moeGroup(GLM_MOE_GROUP_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 512,
                "THREADS: 1..16 warps (the per-warp table is static smem)");
  constexpr int W = THREADS / 32, kMaxE = kMoeGroupMaxExperts;
  __shared__ int cnt[kMaxE];      // (Etot) n_e
  __shared__ int off[kMaxE];      // (Etot) off_e: first sorted position
  __shared__ int run[kMaxE];      // (Etot) next free position
  __shared__ int blk[kMaxE + 1];  // (Etot + 1) first slot of expert e
  __shared__ int base[W * kMaxE]; // (W, Etot) per chunk: count, then base
  __shared__ int warpTot[32];
  if (blockIdx.x != 0 || blockIdx.y != 0 || blockIdx.z != 0)
    return;
  const int U = topk + S, Etot = E + S, N = T * U;
  if (Etot > kMaxE || E < 0 || S < 0 || BM < 1 || H < 0 || H > 16)
    __trap(); // the launch's preconditions (the footprint refuses them)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // Entries per expert (shared atomics count; they decide no order).
  for (int e = tid; e < Etot; e += THREADS)
    cnt[e] = 0;
  __syncthreads();
  for (int q0 = 0; q0 < N; q0 += THREADS) {
    const int q = q0 + tid;
    const int e = q < N ? moeEntryExpert(expert_ids, q, U, topk, E) : -1;
    const unsigned m = __match_any_sync(0xFFFFFFFFu, e);
    if (e >= 0 && lane == __ffs(m) - 1)
      atomicAdd(&cnt[e], __popc(m));
  }
  __syncthreads();
  for (int e = tid; e < Etot; e += THREADS) {
    off[e] = cnt[e];
    blk[e] = (cnt[e] + BM - 1) / BM;
  }
  __syncthreads();
  const int nValid = moeGroupScan<THREADS>(off, Etot, warpTot);
  const int nBlocks = moeGroupScan<THREADS>(blk, Etot, warpTot);
  if (nBlocks > NB)
    __trap(); // NB below ceil(N/BM) + Etot (the footprint refuses it)
  if (tid == 0)
    blk[Etot] = nBlocks;
  for (int e = tid; e < Etot; e += THREADS)
    run[e] = off[e];
  __syncthreads();

  // Stable placement, THREADS entries at a time: an entry's position is
  // its expert's next free one + the entries of that expert in lower warps
  // of the chunk + those in lower lanes of its warp.
  for (int q0 = 0; q0 < N; q0 += THREADS) {
    for (int j = tid; j < W * Etot; j += THREADS)
      base[j] = 0;
    __syncthreads();
    const int q = q0 + tid;
    const int e = q < N ? moeEntryExpert(expert_ids, q, U, topk, E) : -1;
    const unsigned m = __match_any_sync(0xFFFFFFFFu, e);
    const int rank = __popc(m & ((1u << lane) - 1u));
    if (e >= 0 && rank == 0)
      base[warp * Etot + e] = __popc(m);
    __syncthreads();
    for (int x = tid; x < Etot; x += THREADS) {
      int s = run[x];
      for (int w = 0; w < W; ++w) {
        const int c = base[w * Etot + x];
        base[w * Etot + x] = s;
        s += c;
      }
      run[x] = s;
    }
    __syncthreads();
    if (q < N) {
      if (e >= 0) {
        const int pos = base[warp * Etot + e] + rank;
        order[pos] = q;
        entry_of[q] = pos;
      } else {
        entry_of[q] = -1;
      }
    }
    __syncthreads(); // base is cleared for the next chunk
  }
  for (int i = nValid + tid; i < N; i += THREADS)
    order[i] = -1;

  // Items: slot b belongs to the last expert whose first slot is <= b.
  auto item = [&](int b, int p, int h, bool down) {
    GemmItem it;
    it.tiles = nullptr;
    it.z_off = 0;
    it.row_start = it.rows = it.x_col = it.k = 0;
    if (b < nBlocks) {
      int lo = 0, hi = Etot; // blk[lo] <= b < blk[hi]
      while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (blk[mid] <= b)
          lo = mid;
        else
          hi = mid;
      }
      const int e = lo, j = b - blk[e];
      const int row = off[e] + j * BM, left = cnt[e] - j * BM;
      const int idx = (e * 3 + (down ? 2 : p)) * 16 + h;
      it.tiles = tiles[idx];
      it.k = widths[idx];
      it.row_start = row;
      it.rows = left < BM ? left : BM;
      it.x_col = down ? 128 * h : p * hidden;
      it.z_off = down ? (long long)row * hidden
                      : (long long)row * (2 * inter) + p * inter + 128 * h;
    }
    return it;
  };
  for (int idx = tid; idx < NB * 2 * H; idx += THREADS)
    gu_items[idx] = item(idx / (2 * H), idx / H % 2, idx % H, false);
  for (int idx = tid; idx < H * NB; idx += THREADS)
    down_items[idx] = item(idx % NB, 2, idx / NB, true);
}

} // namespace glm
