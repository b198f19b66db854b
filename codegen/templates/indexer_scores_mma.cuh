// indexer_scores_mma.cuh - DSA indexer scores of a prefill chunk on tensor
// cores: I(t) = sum_h w_h * headScale * ReLU(q_h . k_t * dotScale) for every
// key t < T = pos[b] + 1 of row b, the quantity indexer_scores_ctx computes
// in fp64, here as one GEMM [rows * nh, hd] . [hd, T] per block.
//
// ABI: indexer_scores_ctx's runtime parameters, same names, order and
// meaning (pool 1): qi fp32 [B][nh][hd], keys [slots][maxCtx] rows in form
// KV (kv_cache.cuh), wts fp32 [B][nh], score fp64 [B][maxCtx] (only t < T
// written), seq / pos int [B]. Grid (gx, B), B = gridDim.y, any gx >= 1
// (indexerMmaGridX), 256 threads. Dynamic shared memory
// indexerMmaSmemBytes(KV, 256) (68.75 KB at f32 / bf16 keys, 36.75 KB at
// e4m3: within the Spark's 99 KB). Shapes: nh a power of two from 2 to
// 128, hd a multiple of 32 up to 128 (indexerMmaTakes: GLM-5.3's 32 x 128,
// the tiny models' 2 x 64 and 8 x 32); other launches return without
// writing (the compiler keeps indexer_scores_ctx for them).
//
// Tiling: a block owns 128 query rows (tok = 128 / nh consecutive rows b
// of the step, all their heads) and walks 64-key tiles;
// warp w computes query rows 16w .. 16w + 15 against the tile's 64 keys
// (eight m16n8k16 n-tiles). The tok rows of a group are served by the
// gx * tok blocks whose blockIdx.y falls in the group, striding over the
// key tiles; a tile past every row's T is skipped, rows whose T ends inside
// a tile write only their keys. Rows of a group in different KV slots (a
// prefill chunk has one) are scored in one pass per slot. The query
// fragments stay in registers for the block's life; each key tile is
// loaded to registers while the tensor cores work on the previous one and
// stored split into a double-buffered shared tile. Inside a 32-dim chunk
// the dims are permuted (the same for q and k, so the dot is unchanged): a
// lane's dims 8c .. 8c + 7 are its k = 2c, 2c+1, 2c+8, 2c+9 of two k16
// MMAs, one 16-byte load per fragment (gemm_dense's permutation).
// mma.sync only (the Sparks lack wgmma); one block of 8 warps per SM, no
// spills (ptxas: sm_90 229 registers, 184 at e4m3; sm_121 255 and 176).
//
// Numerics: q enters as an fp16 hi + lo pair (hi = fp16(q), lo = fp16(q -
// hi), ~22 bits; |q| < 65504, elements under 2^-14 keep an absolute 2^-25).
// f32 and bf16 keys split the same way (bf16 is exact in fp16 only inside
// fp16's range, so it is not special-cased) and the dot is three MMAs,
// hi.hi + hi.lo + lo.hi (the lo.lo term, <= 2^-22 of the product, is
// dropped); e4m3 keys enter as their E4M3 byte values (exact in fp16), two
// MMAs hi.k + lo.k, and the dot is multiplied by the row's fp32 scale
// afterwards. Products are exact, sums fp32 in the tensor cores' order.
// Epilogue in fp32: v = dot [* scale] * dotScale, term = ReLU(v) * (w_h *
// headScale); the heads of a row are added in a fixed order independent of
// the grid: a butterfly over the lane groups holding them (xor 4 .. 2nh for
// nh <= 8; nh >= 16: a lane's rows g and g + 8, then xor 4, 8, 16; every
// lane gets the same bits), then for nh >= 32 the warps' partials of the
// row in warp order in fp64. Against the fp64
// indexer_scores_ctx: ~1e-6 of the largest score (q / k splits ~2^-22, the
// fp32 sums over hd products and up to 16 heads); runtime/twins/
// twin_dsa.cpp computes the same split products summed in fp64.
//
// Expected cost (not measured yet): GLM-5.3 at a 2048-token chunk over
// 8K keys is ~0.4 fp16 TFLOP per layer with the three-MMA split, about a
// millisecond at mma.sync rates on the H200 against ~10 ms for the
// one-warp-per-key fp64 kernel at position 0.
#pragma once

#include "kv_cache.cuh"

#define GLM_INDEXER_SCORES_MMA_PARAMS                                          \
  const float *qi, const void *keys, const float *wts, double *score,          \
      const int *seq, const int *pos, int nh, int hd, int maxCtx,              \
      double headScale, double dotScale, const int *pages, int pageShift
#define GLM_INDEXER_SCORES_MMA_ARGS                                            \
  qi, keys, wts, score, seq, pos, nh, hd, maxCtx, headScale, dotScale, pages,  \
      pageShift

namespace glm {

/// Keys per tile (the block's N).
constexpr int kIndexerMmaKeys = 64;
/// Largest head dim: the query fragments of a warp are registers.
constexpr int kIndexerMmaMaxHd = 128;

/// Query rows (tokens x heads) of a block: one m16 tile per warp.
GLM_KV_HD constexpr int indexerMmaRows(int threads) { return threads / 2; }

/// Whether a block of `threads` takes nh heads of hd dims: a token's heads
/// within one m16 half-tile, one warp or whole warps (nh a power of two,
/// 2 .. 128: at most 64 tokens a block), whole 32-dim chunks up to 128.
GLM_KV_HD constexpr bool indexerMmaTakes(int nh, int hd, int threads) {
  return threads == 256 && nh >= 2 && nh <= indexerMmaRows(threads) &&
         (nh & (nh - 1)) == 0 && hd >= 32 && hd % 32 == 0 &&
         hd <= kIndexerMmaMaxHd;
}

/// Dynamic shared memory: two key tiles (hi and lo planes but at e4m3),
/// two tiles of e4m3 row scales, two buffers of the warps' head partials,
/// each token's key limit.
GLM_KV_HD constexpr unsigned indexerMmaSmemBytes(int kvForm, int threads) {
  return unsigned(2 * (kvForm == kv::kE4m3 ? 1 : 2) * kIndexerMmaKeys *
                      kIndexerMmaMaxHd * 2 +
                  2 * kIndexerMmaKeys * 4 +
                  2 * (threads / 32) * kIndexerMmaKeys * 4 + 64 * 4);
}

/// Grid x for a step of `rows` rows: ~2048 blocks in all for short chunks
/// (a group's blocks split its key tiles), 1 from 2048 rows on.
GLM_KV_HD constexpr unsigned indexerMmaGridX(int rows) {
  return rows >= 2048 ? 1u : rows <= 128 ? 16u : unsigned(2048 / rows);
}

} // namespace glm

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

#include "gemm_dense.cuh"

namespace glm {

/// fp32 pair -> (hi, lo) fp16 pairs: hi = fp16(x), lo = fp16(x - hi).
__device__ __forceinline__ void splitHalf2(float a, float b, u32 &hi, u32 &lo) {
  const __half2 h = __floats2half2_rn(a, b);
  const float2 f = __half22float2(h);
  const __half2 l = __floats2half2_rn(a - f.x, b - f.y);
  hi = *reinterpret_cast<const u32 *>(&h);
  lo = *reinterpret_cast<const u32 *>(&l);
}

template <int KV, int THREADS>
__device__ __forceinline__ void
indexerScoresMma(GLM_INDEXER_SCORES_MMA_PARAMS) {
  // Preconditions.
  static_assert(THREADS == 256, "8 warps (4 spill the fragments)");
  static_assert(KV >= kv::kF32 && KV <= kv::kE4m3, "KV: f32, bf16 or e4m3");
  constexpr int NW = THREADS / 32, M = indexerMmaRows(THREADS);
  constexpr int BN = kIndexerMmaKeys, KC = kIndexerMmaMaxHd / 32;
  constexpr bool kSplitK = KV != kv::kE4m3; // keys as hi + lo planes
  constexpr int PLANES = kSplitK ? 2 : 1;
  constexpr int PLANE = KC * BN * 32; // halves of one plane
  constexpr int UNITS = BN * kIndexerMmaMaxHd / 4 / THREADS; // 4-dim loads
  static_assert(M == 16 * NW && BN == 64, "a warp: 16 rows x 8 n8 tiles");
  if (!indexerMmaTakes(nh, hd, THREADS))
    return; // the footprint refuses such launches

  extern __shared__ __align__(16) unsigned char ixSmem[];
  __half *sKey = reinterpret_cast<__half *>(ixSmem); // [2][PLANES](KC,BN,32)
  float *sScale = reinterpret_cast<float *>(ixSmem + 2 * PLANES * PLANE * 2);
  float *sPart = sScale + 2 * BN; // [2][NW](BN) head partials (nh >= 32)
  int *sEnd = reinterpret_cast<int *>(sPart + 2 * NW * BN); // (64) per token

  const int R = gridDim.y, tok = M / nh, nkc = hd / 32, unitsRow = hd / 4;
  const int first = blockIdx.y / tok * tok, cnt = min(tok, R - first);
  const int lid = (blockIdx.y - first) * gridDim.x + blockIdx.x;
  const int stride = cnt * gridDim.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const float dotS = float(dotScale);

  // The warp's query rows 16w + g (+8) of the group: fragments of every
  // 32-dim chunk, pairs 0..3 = dims 8c .. 8c + 7 (hi and lo), and each
  // row's w_h * headScale (0 past the step's rows).
  u32 qh[KC][2][4], ql[KC][2][4];
  float whs[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = 16 * warp + g + 8 * hr;
    const bool live = r / nh < cnt;
    const long long qrow = (long long)first * nh + r;
    whs[hr] = live ? float((double)wts[qrow] * headScale) : 0.0f;
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      float4 v0 = make_float4(0.f, 0.f, 0.f, 0.f), v1 = v0;
      if (live && kc < nkc) {
        const float4 *p =
            reinterpret_cast<const float4 *>(qi + qrow * hd + 32 * kc + 8 * c);
        v0 = p[0], v1 = p[1];
      }
      splitHalf2(v0.x, v0.y, qh[kc][hr][0], ql[kc][hr][0]);
      splitHalf2(v0.z, v0.w, qh[kc][hr][1], ql[kc][hr][1]);
      splitHalf2(v1.x, v1.y, qh[kc][hr][2], ql[kc][hr][2]);
      splitHalf2(v1.z, v1.w, qh[kc][hr][3], ql[kc][hr][3]);
    }
  }

  // Key tile registers: unit u = threadIdx.x + i * THREADS is key u /
  // unitsRow, dims 4 (u % unitsRow) .. +3 (coalesced rows).
  float4 rawF[kSplitK ? UNITS : 1]; // f32 / bf16 values
  u32 rawB[kSplitK ? 1 : UNITS];    // four E4M3 bytes
  float rawS[kSplitK ? 1 : UNITS];  // their row's scale
  kv::SlotRows r0 = {};             // the pass's slot's rows
  int tEnd = 0;                     // keys < tEnd exist for the pass
  auto loadKeys = [&](int j) {
#pragma unroll
    for (int i = 0; i < UNITS; ++i) {
      const int u = threadIdx.x + i * THREADS, n = u / unitsRow;
      const int d = 4 * (u - n * unitsRow), t = j * BN + n;
      if constexpr (kSplitK)
        rawF[i] = make_float4(0.f, 0.f, 0.f, 0.f);
      else
        rawB[i] = 0u, rawS[i] = 0.0f;
      if (n < BN && t < tEnd) { // zeros past the pass's keys
        const kv::Row<KV> k = kv::row<KV>(keys, r0(t), hd);
        if constexpr (kSplitK) {
          rawF[i] = k.four(d); // exact widening of f32 / bf16
        } else {
          rawB[i] = *reinterpret_cast<const u32 *>(k.p + d);
          rawS[i] = k.s;
        }
      }
    }
  };
  auto storeKeys = [&](int buf) {
    __half *base = sKey + buf * PLANES * PLANE;
#pragma unroll
    for (int i = 0; i < UNITS; ++i) {
      const int u = threadIdx.x + i * THREADS, n = u / unitsRow;
      const int d = 4 * (u - n * unitsRow);
      if (n >= BN)
        continue;
      __half *at = base + ((d >> 5) * BN + n) * 32 + (d & 31);
      if constexpr (kSplitK) {
        u32 h0, l0, h1, l1;
        splitHalf2(rawF[i].x, rawF[i].y, h0, l0);
        splitHalf2(rawF[i].z, rawF[i].w, h1, l1);
        *reinterpret_cast<uint2 *>(at) = make_uint2(h0, h1);
        *reinterpret_cast<uint2 *>(at + PLANE) = make_uint2(l0, l1);
      } else {
        *reinterpret_cast<uint2 *>(at) =
            make_uint2(e4m3x2ToHalf2(rawB[i]), e4m3x2ToHalf2(rawB[i] >> 16));
        if (d == 0)
          sScale[buf * BN + n] = rawS[i];
      }
    }
  };

  // One pass per KV slot among the group's rows (one for a prefill chunk).
  u64 done = 0;
  const u64 all = cnt >= 64 ? ~0ull : (1ull << cnt) - 1ull;
  while (done != all) {
    int slot = -1, tMax = 0;
    u64 mask = 0;
    for (int i = 0; i < cnt; ++i) {
      if ((done >> i) & 1ull)
        continue;
      const int s = seq[first + i];
      if (slot < 0)
        slot = s;
      if (s == slot) {
        mask |= 1ull << i;
        tMax = max(tMax, pos[first + i] + 1);
      }
    }
    done |= mask;
    r0 = kv::slotRows(pages, pageShift, slot, maxCtx);
    tEnd = min(tMax, maxCtx);
    const int nTiles = (tEnd + BN - 1) / BN;
    if (lid >= nTiles)
      continue; // the same for every thread of the block
    // Keys below sEnd[tl] are the pass's to write for token tl.
    for (int tl = threadIdx.x; tl < tok; tl += THREADS)
      sEnd[tl] = ((mask >> tl) & 1ull) ? min(pos[first + tl] + 1, tEnd) : 0;

    loadKeys(lid);
    storeKeys(0);
    __syncthreads();
    int buf = 0;
    for (int j = lid; j < nTiles; j += stride, buf ^= 1) {
      const int jn = j + stride;
      if (jn < nTiles)
        loadKeys(jn); // in flight during the MMAs

      // (16, 64) S = q . k of the warp's rows against the tile.
      float acc[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc[nt][e] = 0.0f;
      const __half *kt = sKey + buf * PLANES * PLANE;
#pragma unroll
      for (int kc = 0; kc < KC; ++kc) {
        if (kc >= nkc)
          break;
        const u32 hA[4] = {qh[kc][0][0], qh[kc][1][0], qh[kc][0][1],
                           qh[kc][1][1]},
                  hB[4] = {qh[kc][0][2], qh[kc][1][2], qh[kc][0][3],
                           qh[kc][1][3]};
        const u32 lA[4] = {ql[kc][0][0], ql[kc][1][0], ql[kc][0][1],
                           ql[kc][1][1]},
                  lB[4] = {ql[kc][0][2], ql[kc][1][2], ql[kc][0][3],
                           ql[kc][1][3]};
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const int off = (kc * BN + 8 * nt + g) * 32 + 8 * c;
          const uint4 kh = *reinterpret_cast<const uint4 *>(kt + off);
          mma16816(acc[nt], hA, kh.x, kh.y);
          mma16816(acc[nt], hB, kh.z, kh.w);
          if constexpr (kSplitK) {
            const uint4 kl = *reinterpret_cast<const uint4 *>(kt + PLANE + off);
            mma16816(acc[nt], hA, kl.x, kl.y);
            mma16816(acc[nt], hB, kl.z, kl.w);
          }
          mma16816(acc[nt], lA, kh.x, kh.y);
          mma16816(acc[nt], lB, kh.z, kh.w);
        }
      }

      // Score of the block's token tl at key t, where the pass writes it.
      auto put = [&](int tl, int t, double v) {
        if (t < sEnd[tl])
          score[(long long)(first + tl) * maxCtx + t] = v;
      };
      // Terms, then the warp's head sums per key: acc[nt] = rows g, g + 8
      // x keys 8nt + 2c, 8nt + 2c + 1. A token's nh rows are lanes g ..
      // g + nh - 1 of one half (nh <= 8), the warp's 16 rows (nh = 16), or
      // 16 rows of each of nh / 16 warps, added across warps below.
      float *part = sPart + buf * NW * BN + warp * BN;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int n = 8 * nt + 2 * c + e, t = j * BN + n;
          float v0 = acc[nt][e], v1 = acc[nt][2 + e];
          if constexpr (!kSplitK) {
            const float s = sScale[buf * BN + n];
            v0 *= s, v1 *= s;
          }
          v0 *= dotS, v1 *= dotS;
          float t0 = (v0 > 0.0f ? v0 : 0.0f) * whs[0];
          float t1 = (v1 > 0.0f ? v1 : 0.0f) * whs[1];
          if (nh >= 16) {
            t0 += t1;
            t0 += __shfl_xor_sync(0xffffffffu, t0, 4);
            t0 += __shfl_xor_sync(0xffffffffu, t0, 8);
            t0 += __shfl_xor_sync(0xffffffffu, t0, 16);
            if (g == 0) {
              if (nh == 16)
                put(warp, t, (double)t0);
              else
                part[n] = t0;
            }
          } else {
            for (int o = 4; o < 4 * nh; o <<= 1) { // within nh lane groups
              t0 += __shfl_xor_sync(0xffffffffu, t0, o);
              t1 += __shfl_xor_sync(0xffffffffu, t1, o);
            }
            if (g % nh == 0) {
              put((16 * warp + g) / nh, t, (double)t0);
              put((16 * warp + g + 8) / nh, t, (double)t1);
            }
          }
        }
      if (jn < nTiles)
        storeKeys(buf ^ 1);
      __syncthreads(); // partials complete; the next tile stored

      // nh >= 32: a token's warps' partials in warp order, fp64.
      if (nh >= 32) {
        const float *pb = sPart + buf * NW * BN;
        const int wpt = nh / 16; // warps per token
        for (int o = threadIdx.x; o < tok * BN; o += THREADS) {
          const int tl = o / BN, n = o - tl * BN;
          double v = 0.0;
          for (int w = tl * wpt; w < (tl + 1) * wpt; ++w)
            v += (double)pb[w * BN + n];
          put(tl, j * BN + n, v);
        }
      }
    }
    __syncthreads(); // the next pass reuses the tiles and partials
  }
}

} // namespace glm

#endif // CUDA
