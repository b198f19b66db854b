// trellis_tile.cuh - one warp decodes 16x16 trellis tiles into mma fragments.
//
// Shared by the decode kernels that stream trellis rows through the tensor
// cores (moe_trellis, dense_trellis): lane L loads only the words its 8
// states need, decodes them straight into the A fragment of mma.sync
// m16n8k16 (weights as A, activations as B) and accumulates in fp32.
// Trellis facts per exl3-format.md §1-2 (16-bit tail-biting windows,
// MSB-first words, m16n8k16 order); the E4M3 step per exlr8-format.md §5.5.
#pragma once

#include "glm_common.cuh"

namespace glm {
// ------------------------------------------------------- tile decode ----

/// Register geometry of one lane's slice of a (16,16) tile of width K: lane
/// L decodes positions 8L..8L+7, whose states need stream bits
/// [8KL - 16, 8KL + 8K). 8KL is byte aligned (offset r = KL mod 4 bytes
/// into word KL/4), so after one runtime byte shift every state sits at a
/// compile-time bit offset.
template <int K> struct TileLane {
  static constexpr int kWords = 8 * K;
  static constexpr int kRMax = K % 4 == 0 ? 0 : (K % 2 == 0 ? 2 : 3);
  /// Words loaded: w[q-1 .. q-1+kLoad) (mod kWords), q = KL/4.
  static constexpr int kLoad = (8 * kRMax + 31 + 8 * K) / 32 + 1;
  /// Aligned words holding bits [0, 32 + 8K) after the shift.
  static constexpr int kAligned = 1 + (8 * K + 31) / 32;
};

/// Word offsets (inside a tile) this lane loads and its byte shift.
template <int K> struct LaneMap {
  int off[TileLane<K>::kLoad];
  int shift;
  __device__ __forceinline__ explicit LaneMap(int lane) {
    constexpr int W = TileLane<K>::kWords;
    const int q = (K * lane) >> 2;
#pragma unroll
    for (int i = 0; i < TileLane<K>::kLoad; ++i)
      off[i] = (q - 1 + i + W) % W;
    shift = 8 * ((K * lane) & 3);
  }
};

__device__ __forceinline__ u32 h2u(__half2 h) {
  return *reinterpret_cast<u32 *>(&h);
}
__device__ __forceinline__ __half2 u2h(u32 u) {
  return *reinterpret_cast<__half2 *>(&u);
}

/// (y AND 0x8FFF8FFF) XOR 0x3B603B60 as one LOP3 (constants in registers;
/// with immediates the compiler splits it in two).
__device__ __forceinline__ u32 lop3Mcg(u32 y) {
  u32 r;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;"
      : "=r"(r)
      : "r"(y), "r"(0x8FFF8FFFu), "r"(0x3B603B60u));
  return r;
}

/// Codebook values of two states as one half2, before any E4M3 step
/// (element-wise identical to decodeState: fp16 add / fused fp16 FMA round
/// exactly as RN16 does).
template <int CB> __device__ __forceinline__ u32 codebookPair(u32 sa, u32 sb) {
  __half2 v;
  if (CB == kCbMul1) {
    // 0x6400 + bytesum = fp16 bits of 1024 + b; one fused RN16 FMA.
    const u32 da = __dp4a(sa * 0x83DCD12Du, 0x01010101u, 0x6400u);
    const u32 db = __dp4a(sb * 0x83DCD12Du, 0x01010101u, 0x6400u);
    const __half2 kInv = u2h(0x1EEE1EEEu), kBias = u2h(0xC931C931u);
    v = __hfma2(u2h(__byte_perm(da, db, 0x5410)), kInv, kBias);
  } else {
    u32 ya = CB == kCb3Inst ? sa * 89226354u + 64248484u : sa * 0xCBAC1FEDu;
    u32 yb = CB == kCb3Inst ? sb * 89226354u + 64248484u : sb * 0xCBAC1FEDu;
    ya = lop3Mcg(ya);
    yb = lop3Mcg(yb);
    const __half2 a = u2h(ya), b = u2h(yb);
    v = __halves2half2(__hadd(__low2half(a), __high2half(a)),
                       __hadd(__low2half(b), __high2half(b)));
  }
  return h2u(v);
}

/// The E4M3 bytes (low byte = low half) of an fp16 pair, and back.
__device__ __forceinline__ u32 toE4m3x2(u32 h) {
  __half2_raw raw = u2h(h);
  return __nv_cvt_halfraw2_to_fp8x2(raw, __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ u32 fromE4m3x2(u32 q) {
  return h2u(__half2(__nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(q), __NV_E4M3)));
}

/// Decoded values of two states as one half2.
template <int CB, bool E4M3>
__device__ __forceinline__ u32 decodePair(u32 sa, u32 sb) {
  const u32 v = codebookPair<CB>(sa, sb);
  return E4M3 ? fromE4m3x2(toE4m3x2(v)) : v;
}

// --------------------------------------------------- E4M3 byte table ----
// E4M3 packs: every decoded weight is an E4M3 value, so the map 16-bit
// state -> E4M3 byte is a 64 KB table. A kernel that opts in keeps it in
// dynamic shared memory (this symbol, offset 0) and decodes TP of a lane's
// 4 state pairs per tile by two LDS.U8 + one E4M3x2 -> f16x2 instead of the
// ALU hash, which moves that work from the integer pipes to the LSU (the
// table's random bank conflicts make a full table decode LSU-bound, so the
// split balances the two).
extern __shared__ __align__(16) unsigned char glmTrellisTable[];

/// Table word w (states 4w .. 4w+3, byte i = state 4w + i) computed by the
/// ALU decode, so table decode equals it bit for bit by construction.
template <int CB> __device__ __forceinline__ u32 e4m3TableWord(u32 w) {
  const u32 s = 4 * w;
  const u32 lo = toE4m3x2(codebookPair<CB>(s, s + 1));
  const u32 hi = toE4m3x2(codebookPair<CB>(s + 2, s + 3));
  return (lo & 0xFFFFu) | (hi << 16);
}

/// One state pair through the table.
__device__ __forceinline__ u32 tablePair(u32 sa, u32 sb) {
  const u32 a = glmTrellisTable[sa], b = glmTrellisTable[sb];
  return fromE4m3x2(__byte_perm(a, b, 0x0040) & 0xFFFFu);
}

/// 16-bit fields of a word: top-offset 0 (bits 31..16), 8 (23..8) and 16
/// (15..0), one instruction each.
__device__ __forceinline__ u32 fieldTop(u32 x) {
  return __umulhi(x, 0x10000u); // x >> 16 on the IMAD pipe (ALU is busier)
}
__device__ __forceinline__ u32 fieldMid(u32 x) {
  return __byte_perm(x, 0u, 0x4421);
}
__device__ __forceinline__ u32 fieldLow(u32 x) {
  return __byte_perm(x, 0u, 0x4410);
}

/// The 8 states of this lane (exl3-format.md §1.3) from its loaded words.
/// K = 2 and 4 (the tuned widths) place every state at a one-instruction
/// offset of a few shifted words; other widths use the generic shift+mask.
template <int K>
__device__ __forceinline__ void laneStates(const u32 (&v)[TileLane<K>::kLoad],
                                           int shift, u32 s[8]) {
  constexpr int NL = TileLane<K>::kLoad, NA = TileLane<K>::kAligned;
  if constexpr (K == 2) {
    // z = stream bits [8KL - 16, 8KL + 16); state e at top-offset 2e + 2.
    const u32 z = __funnelshift_lc(v[1], v[0], shift + 16);
    const u32 z2 = z << 2, z4 = z << 4, z6 = z << 6;
    s[0] = fieldTop(z2), s[1] = fieldTop(z4), s[2] = fieldTop(z6);
    s[3] = fieldMid(z), s[4] = fieldMid(z2), s[5] = fieldMid(z4);
    s[6] = fieldMid(z6), s[7] = fieldLow(z);
  } else if constexpr (K == 4) {
    // (v0:v1) = stream bits [8KL - 32, 8KL + 32); state e at top-offset
    // 20 + 4e.
    const u32 x20 = __funnelshift_l(v[1], v[0], 20);
    const u32 x24 = __funnelshift_l(v[1], v[0], 24);
    const u32 x28 = __funnelshift_l(v[1], v[0], 28);
    s[0] = fieldTop(x20), s[1] = fieldTop(x24), s[2] = fieldTop(x28);
    s[3] = fieldTop(v[1]), s[4] = fieldMid(x28), s[5] = fieldMid(v[1]);
    s[6] = fieldLow(x28), s[7] = fieldLow(v[1]);
  } else {
    u32 al[NA];
#pragma unroll
    for (int j = 0; j < NA; ++j) {
      const u32 hi = j < NL ? v[j] : 0u, lo = j + 1 < NL ? v[j + 1] : 0u;
      al[j] = TileLane<K>::kRMax ? __funnelshift_l(lo, hi, shift) : hi;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int t = 16 + (e + 1) * K; // first bit of state e in al[]
      const int j = t >> 5, o = t & 31;
      const u32 w = o <= 16 ? al[j] >> (16 - o)
                            : __funnelshift_l(al[j + 1], al[j], o - 16);
      s[e] = w & 0xFFFFu;
    }
  }
}

/// Decodes one lane's 8 positions from its loaded words into the A fragment
/// of mma m16n8k16 with A[m][k] = W[k][m] (m = tile column, k = tile row):
/// {(e0,e1), (e4,e5), (e2,e3), (e6,e7)} (exl3-format.md §2.3).
/// TP (E4M3 only) of the 4 pairs come from glmTrellisTable.
template <int K, int CB, bool E4M3, int TP = 0>
__device__ __forceinline__ void decodeFragA(const u32 (&v)[TileLane<K>::kLoad],
                                            int shift, u32 a[4]) {
  static_assert(TP >= 0 && TP <= 4 && (TP == 0 || E4M3),
                "table decode: E4M3 packs, 0..4 pairs");
#ifdef GLM_MOE_TRELLIS_DIAG_NODECODE
  // Bench diagnostic only (wrong numbers): the loaded words go straight to
  // the tensor cores, which leaves the memory + mma skeleton of the kernel.
  a[0] = v[0], a[1] = v[1], a[2] = v[0] ^ v[1], a[3] = v[0] + v[1];
  (void)shift;
  return;
#endif
  u32 s[8];
  laneStates<K>(v, shift, s);
  a[0] = TP > 0 ? tablePair(s[0], s[1]) : decodePair<CB, E4M3>(s[0], s[1]);
  a[2] = TP > 1 ? tablePair(s[2], s[3]) : decodePair<CB, E4M3>(s[2], s[3]);
  a[1] = TP > 2 ? tablePair(s[4], s[5]) : decodePair<CB, E4M3>(s[4], s[5]);
  a[3] = TP > 3 ? tablePair(s[6], s[7]) : decodePair<CB, E4M3>(s[6], s[7]);
}

template <int K>
__device__ __forceinline__ void loadLane(const u32 *tile, const LaneMap<K> &m,
                                         u32 (&v)[TileLane<K>::kLoad]) {
#pragma unroll
  for (int i = 0; i < TileLane<K>::kLoad; ++i)
    v[i] = __ldg(tile + m.off[i]);
}

__device__ __forceinline__ void mma16816(float d[4], const u32 a[4], u32 b0,
                                         u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                 "r"(b1));
}

/// This lane's 4 activations of one 16-row slice (k = 2j+{0,1}, 2j+{8,9}),
/// zeros when the lane's batch row is not in the unit.
__device__ __forceinline__ void loadX4(const float *p, float (&r)[4]) {
  if (!p) {
    r[0] = r[1] = r[2] = r[3] = 0.0f;
    return;
  }
  const float2 x01 = *reinterpret_cast<const float2 *>(p);
  const float2 x89 = *reinterpret_cast<const float2 *>(p + 8);
  r[0] = x01.x, r[1] = x01.y, r[2] = x89.x, r[3] = x89.y;
}

/// fp16 hi (lo = false) or lo part of (x0, x1): x = hi + lo to ~22 bits.
__device__ __forceinline__ u32 splitHiLo(float x0, float x1, bool lo) {
  const __half2 h = __floats2half2_rn(x0, x1);
  const float2 f = __half22float2(h);
  const __half2 l = __floats2half2_rn(x0 - f.x, x1 - f.y);
  return h2u(lo ? l : h);
}

/// acc[nb][c] += B . T(c) for the 8 tiles of one row whose words this lane
/// holds in v[c] (TileLane layout): decode to A fragments, one mma per
/// batch group.
template <int K, int CB, bool E4M3, int NB, int TP = 0>
__device__ __forceinline__ void mmaRow(const u32 (&v)[8][TileLane<K>::kLoad],
                                       int shift, const u32 (&b)[NB][2],
                                       float (&acc)[NB][8][4]) {
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    u32 a[4];
    decodeFragA<K, CB, E4M3, TP>(v[c], shift, a);
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
      mma16816(acc[nb][c], a, b[nb][0], b[nb][1]);
  }
}

// ------------------------------------------------------ row stream ----

/// Activation batch groups of one mma (n = 8 rows each).
__host__ __device__ constexpr int kNB(int batch) { return batch > 4 ? 2 : 1; }

/// acc[nb][c] += B_i . T(i, c) over tile rows i = 0..nRows-1 and the 8
/// tile columns c of a row, which are contiguous in every layout the packs
/// use (tile (i, c) = rowTile(i) + c).
/// PIPE = 0: loads of row i+1 go to registers while row i decodes (two
/// register buffers). PIPE = D > 1: a per-warp shared-memory ring of D rows
/// filled by 16-byte cp.async, D - 1 rows in flight (more bytes in flight
/// per warp at fewer registers); `ring` holds D * 8 * 8K words.
/// The activations of row i are loaded one row ahead too (loadX(i, raw)
/// fills this lane's 4 floats per batch group, toB(i, raw, b) makes the B
/// fragment), so no row waits on an L2 round trip for them.
template <int K, int CB, bool E4M3, int NB, int PIPE, int TP = 0,
          class RowFn, class XFn, class BFn>
__device__ __forceinline__ void decodeRows(int nRows, RowFn rowTile,
                                           XFn loadX, BFn toB, u32 *ring,
                                           float (&acc)[NB][8][4]) {
  constexpr int NL = TileLane<K>::kLoad, W = TileLane<K>::kWords;
  const int lane = threadIdx.x & 31;
  const LaneMap<K> map(lane);
  float xCur[NB][4], xNext[NB][4];
  loadX(0, xCur);
  auto compute = [&](int i, const u32 (&src)[8][NL]) {
    u32 b[NB][2];
    toB(i, xCur, b);
    if (i + 1 < nRows)
      loadX(i + 1, xNext);
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int t = 0; t < 4; ++t)
        xCur[nb][t] = xNext[nb][t];
    mmaRow<K, CB, E4M3, NB, TP>(src, map.shift, b, acc);
  };
  if constexpr (PIPE == 0) {
    u32 buf[2][8][NL];
    auto load = [&](int i, u32 (&dst)[8][NL]) {
      const u32 *row = rowTile(i);
#pragma unroll
      for (int l = 0; l < NL; ++l) {
        const u32 *p = row + map.off[l];
#pragma unroll
        for (int c = 0; c < 8; ++c)
          dst[c][l] = __ldg(p + c * W);
      }
    };
    load(0, buf[0]);
    for (int i = 0; i < nRows; i += 2) {
      if (i + 1 < nRows)
        load(i + 1, buf[1]);
      compute(i, buf[0]);
      if (i + 1 >= nRows)
        break;
      if (i + 2 < nRows)
        load(i + 2, buf[0]);
      compute(i + 1, buf[1]);
    }
  } else {
    constexpr int kRowWords = 8 * W, kChunks = kRowWords / 4; // 16 B each
    auto issue = [&](int i) {
      if (i < nRows) {
        const u32 *row = rowTile(i);
        u32 *dst = ring + (i % PIPE) * kRowWords;
#pragma unroll
        for (int q = lane; q < kChunks; q += 32) {
          const unsigned sa =
              static_cast<unsigned>(__cvta_generic_to_shared(dst + 4 * q));
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa),
                       "l"(row + 4 * q));
        }
      }
      asm volatile("cp.async.commit_group;\n" ::);
    };
#pragma unroll
    for (int i = 0; i < PIPE - 1; ++i)
      issue(i);
    for (int i = 0; i < nRows; ++i) {
      issue(i + PIPE - 1);
      asm volatile("cp.async.wait_group %0;\n" ::"n"(PIPE - 1));
      __syncwarp();
      const u32 *src = ring + (i % PIPE) * kRowWords;
      u32 v[8][NL];
#pragma unroll
      for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int l = 0; l < NL; ++l)
          v[c][l] = src[c * W + map.off[l]];
      __syncwarp(); // the ring slot is refilled by the next issue
      compute(i, v);
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
  }
}

} // namespace glm
