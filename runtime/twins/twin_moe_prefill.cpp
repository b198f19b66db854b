//===- twin_moe_prefill.cpp - twins of the MoE prefill glue families ------===//
//
// moe_group, moe_gather, moe_act and moe_combine (codegen/templates/
// moe_group.cuh gives the chain around gemm_trellis_grouped). Entries are
// read through the kernels' own moeEntryExpert (moe_entries.cuh). All four
// are bit-exact with CUDA: moe_group's order is defined (stable by expert,
// then entry), moe_gather and moe_combine are fp32 products and sums in the
// kernels' order, moe_act is fp32 arithmetic with the warp Hadamard's
// butterfly order (hadamard128F32) and flash_math.cuh's expF, built from
// IEEE-exact operations on both sides (--fmad=false / -ffp-contract=off).
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/helper_twins.h"
#include "runtime/twins/twin_common.h"

#include "codegen/templates/flash_math.cuh"
#include "codegen/templates/gemm_item.cuh"
#include "codegen/templates/moe_entries.cuh"
#include "runtime/base/parallel.h"

#include <algorithm>
#include <vector>

namespace glm::rt::twins {

namespace {

/// Entries in rows [0, n) of the twin's grid: min(n, grid extent).
int64_t covered(int64_t n, int64_t grid) { return std::min(n, grid); }

} // namespace

// moe_group(expert_ids, T, topk, E, S, H, BM, tiles, widths, hidden, inter,
// order, entry_of, gu_items, down_items, NB); grid (1, 1, 1).
void moeGroupTwin(const Launch &l) {
  const int *ids = l.ptr<const int>(0);
  const int T = l.i32(1), topk = l.i32(2), E = l.i32(3), S = l.i32(4);
  const int H = l.i32(5), BM = l.i32(6);
  const auto *tiles = l.ptr<const unsigned char *const>(7);
  const auto *widths = l.ptr<const unsigned char>(8);
  const int hidden = l.i32(9), inter = l.i32(10);
  int *order = l.ptr<int>(11), *entryOf = l.ptr<int>(12);
  auto *guItems = l.ptr<GemmItem>(13);
  auto *downItems = l.ptr<GemmItem>(14);
  const int NB = l.i32(15);
  const int U = topk + S, eTot = E + S, N = T * U;
  check(eTot <= kMoeGroupMaxExperts && E >= 0 && S >= 0 && BM >= 1 && H >= 0 &&
            H <= 16,
        "twin of moe_group: E ", E, ", S ", S, ", BM ", BM, ", H ", H,
        " violate the kernel's preconditions: CUDA traps");
  // Counts, first positions and first slots per expert.
  std::vector<int> cnt(eTot, 0), off(eTot), blk(eTot + 1);
  for (int q = 0; q < N; ++q)
    if (const int e = moeEntryExpert(ids, q, U, topk, E); e >= 0)
      ++cnt[e];
  int nValid = 0, nBlocks = 0;
  for (int e = 0; e < eTot; ++e) {
    off[e] = nValid, blk[e] = nBlocks;
    nValid += cnt[e];
    nBlocks += (cnt[e] + BM - 1) / BM;
  }
  blk[eTot] = nBlocks;
  check(nBlocks <= NB, "twin of moe_group: the routing needs ", nBlocks,
        " item slots, NB is ", NB, ": CUDA traps");
  // Stable placement: entries in q order, each at its expert's next free.
  std::vector<int> next = off;
  for (int q = 0; q < N; ++q) {
    const int e = moeEntryExpert(ids, q, U, topk, E);
    if (e < 0) {
      entryOf[q] = -1;
      continue;
    }
    const int pos = next[e]++;
    order[pos] = q;
    entryOf[q] = pos;
  }
  for (int i = nValid; i < N; ++i)
    order[i] = -1;
  auto item = [&](int b, int p, int h, bool down) {
    GemmItem it{};
    if (b >= nBlocks)
      return it;
    const int e =
        int(std::upper_bound(blk.begin(), blk.end(), b) - blk.begin()) - 1;
    const int j = b - blk[e], row = off[e] + j * BM;
    const int idx = (e * 3 + (down ? 2 : p)) * 16 + h;
    it.tiles = tiles[idx];
    it.k = widths[idx];
    it.row_start = row;
    it.rows = std::min(BM, cnt[e] - j * BM);
    it.x_col = down ? 128 * h : p * hidden;
    it.z_off = down ? (long long)row * hidden
                    : (long long)row * (2 * inter) + p * inter + 128 * h;
    return it;
  };
  for (int idx = 0; idx < NB * 2 * H; ++idx)
    guItems[idx] = item(idx / (2 * H), idx / H % 2, idx % H, false);
  for (int idx = 0; idx < H * NB; ++idx)
    downItems[idx] = item(idx % NB, 2, idx / NB, true);
}

// moe_gather(xh, expert_ids, order, gu_su_block, X, N, topk, E, S, hidden);
// grid (N, ceil(hidden / (2*THREADS))), 4 elements per thread.
void moeGatherTwin(const Launch &l) {
  const float *xh = l.ptr<const float>(0);
  const int *ids = l.ptr<const int>(1), *order = l.ptr<const int>(2);
  const float *su = l.ptr<const float>(3);
  auto *X = l.ptr<uint16_t>(4);
  const int N = l.i32(5), topk = l.i32(6), E = l.i32(7), S = l.i32(8);
  const int hidden = l.i32(9), U = topk + S, nBlk = hidden >> 7;
  const int64_t rows = covered(N, l.grid[0]);
  const int64_t cols = std::min<int64_t>(2 * int64_t(hidden),
                                         int64_t(l.grid[1]) * l.block[0] * 4);
  parallelFor(rows, 16, 0, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const int q = order[i];
      if (q < 0 || q >= N)
        continue;
      const int e = moeEntryExpert(ids, q, U, topk, E);
      if (e < 0)
        continue;
      const int t = q / U;
      for (int64_t j = 0; j < cols; ++j) {
        const int p = j >= hidden, c = int(j - int64_t(p) * hidden);
        const float s =
            su ? su[int64_t(p * (E + S) + e) * nBlk + (c >> 7)] : 1.0f;
        X[i * 2 * hidden + j] = floatToHalf(xh[int64_t(t) * hidden + c] * s);
      }
    }
  });
}

// moe_act(Zgu, expert_ids, order, tiles, gu_svh, down_suh, act, zd, N,
// topk, E, S, inter, hidden, swiglu_limit); grid (N, ceil(H*32/THREADS)).
void moeActTwin(const Launch &l) {
  const float *zgu = l.ptr<const float>(0);
  const int *ids = l.ptr<const int>(1), *order = l.ptr<const int>(2);
  const auto *tiles = l.ptr<const unsigned char *const>(3);
  const float *svh = l.ptr<const float>(4), *dsuh = l.ptr<const float>(5);
  auto *act = l.ptr<uint16_t>(6);
  float *zd = l.ptr<float>(7);
  const int N = l.i32(8), topk = l.i32(9), E = l.i32(10), S = l.i32(11);
  const int inter = l.i32(12), hidden = l.i32(13);
  const float limit = l.f32(14);
  const int U = topk + S, eTot = E + S;
  const int64_t rows = covered(N, l.grid[0]);
  const int halves = int(std::min<int64_t>(
      {inter / 128, 16, int64_t(l.grid[1]) * (l.block[0] / 32)}));
  parallelFor(rows, 4, 0, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const int q = order[i];
      if (q < 0 || q >= N)
        continue;
      const int e = moeEntryExpert(ids, q, U, topk, E);
      if (e < 0)
        continue;
      std::fill_n(zd + i * hidden, hidden / 4 * 4, 0.0f);
      for (int h = 0; h < halves; ++h) {
        uint16_t *dst = act + i * inter + 128 * h;
        if (!tiles[(e * 3 + 0) * 16 + h]) {
          std::fill_n(dst, 128, uint16_t(0));
          continue;
        }
        float gu[2][128];
        for (int p = 0; p < 2; ++p) {
          float v[128];
          std::copy_n(zgu + i * 2 * inter + p * inter + 128 * h, 128, v);
          hadamard128F32(v);
          for (int j = 0; j < 128; ++j)
            gu[p][j] =
                v[j] * kInvSqrt128 *
                (svh ? svh[int64_t(p * eTot + e) * inter + 128 * h + j] : 1.0f);
        }
        float a[128];
        for (int j = 0; j < 128; ++j) {
          float g = gu[0][j], u = gu[1][j];
          clampSwiglu(g, u, limit);
          a[j] = g / (1.0f + fm::expF(-g)) * u *
                 (dsuh ? dsuh[int64_t(e) * inter + 128 * h + j] : 1.0f);
        }
        hadamard128F32(a);
        for (int j = 0; j < 128; ++j)
          dst[j] = floatToHalf(a[j] * kInvSqrt128);
      }
    }
  });
}

// moe_combine(zd, entry_of, expert_ids, route_w, down_sv_block, out, T,
// topk, E, S, hidden, accumulate); grid (T, ceil(hidden / (4*THREADS))).
void moeCombineTwin(const Launch &l) {
  const float *zd = l.ptr<const float>(0);
  const int *entryOf = l.ptr<const int>(1), *ids = l.ptr<const int>(2);
  const float *rw = l.ptr<const float>(3), *svb = l.ptr<const float>(4);
  float *out = l.ptr<float>(5);
  const int T = l.i32(6), topk = l.i32(7), E = l.i32(8), S = l.i32(9);
  const int hidden = l.i32(10);
  const bool accumulate = l.i32(11) != 0;
  const int U = topk + S, N = T * U, nBlk = hidden >> 7;
  const int64_t rows = covered(T, l.grid[0]);
  const int64_t cols =
      std::min<int64_t>(hidden / 4 * 4, int64_t(l.grid[1]) * l.block[0] * 4);
  parallelFor(rows, 4, 0, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> s(size_t(std::max<int64_t>(cols, 0)));
    for (int64_t t = t0; t < t1; ++t) {
      std::fill(s.begin(), s.end(), 0.0f);
      for (int k = 0; k < U; ++k) {
        const int i = entryOf[t * U + k];
        if (i < 0 || i >= N)
          continue;
        int e = E + (k - topk);
        float w = 1.0f;
        if (k < topk) {
          e = ids[t * topk + k];
          if (e < 0 || e >= E)
            continue;
          w = rw[t * topk + k];
        }
        const float *z = zd + int64_t(i) * hidden;
        for (int64_t c = 0; c < cols; ++c) {
          const float sc = (svb ? svb[int64_t(e) * nBlk + (c >> 7)] : 1.0f) * w;
          s[c] += z[c] * sc;
        }
      }
      float *o = out + t * hidden;
      for (int64_t c = 0; c < cols; ++c)
        o[c] = accumulate ? s[c] + o[c] : s[c];
    }
  });
}

} // namespace glm::rt::twins
