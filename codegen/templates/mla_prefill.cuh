// mla_prefill.cuh - absorbed MLA attention of a prefill chunk on tensor
// cores: mla_core's work (scores of each row's selected latent rows,
// softmax, ctx = sum p_j c_j) with one block per (query row, 16 * groups
// heads) instead of one per (row, head), so the row's selected keys are
// gathered once for all its heads and the products run as mma.sync
// m16n8k16 (fp16 in, fp32 accumulate; no wgmma, the same code on sm_90
// and the Sparks' sm_121, shared memory <= 99 KB: mla_prefill_abi.h).
//
// ABI: mla_core's runtime parameters (mla_core.cuh) with nh, the number of
// heads in `heads`, after the table: qAll [B][H][dn + dr] (q_pe roped),
// qabsAll [B][H][kvr], the cache [slots][maxCtx] rows of kvr + dr values in
// form KV (kv_cache.cuh), selAll [B][maxCtx] / nselp [B] (the selection),
// pAll [B][H][pStride] scratch (the scores; pStride = the most keys a row
// selects, the DSA top-k: at most the first pStride of a row's selection
// are taken), ctxAll [B][H][kvr] out. Grid
// (mlaPrefillGridX(nh, THREADS), B), row B - 1 - blockIdx.y; block head i
// of blockIdx.x takes heads[16 * THREADS / 64 * blockIdx.x + i]; dynamic
// shared memory
// mlaPrefillSmem(THREADS, kvr, dr). VT = kvr / 16.
//
// Numerics (the twin, runtime/twins/twin_mla_prefill.cpp, computes the same
// roundings): q = (q_abs, q_pe) of each head and each key row enter the
// tensor cores as fp16 (round to nearest even) after a power-of-two scale of
// their own (max |value| to [2^14, 2^15): no overflow and no subnormals
// whatever the magnitudes, undone exactly on the fp32 score); the products
// are exact and summed in fp32. Pass 1: s_j = fp32(q . k_j) * 2^-(eq + ek)
// * fp32(scale) (one rounding: the other factors are powers of two),
// written to pAll, and each head's max m. Pass 2: v_j = the
// first kvr values of row j (rows past 2^15 scaled down by 2^ev, ev >= -15),
// p_j = fp16(expf(s_j - m) * 2^-ev), l = the sum of p_j * 2^ev, ctx =
// (sum_j p_j v_j) / l. Relative error about 5e-4 of max|ctx| against fp32
// inputs (the fp16 roundings), within 1e-4 of the twin (fp32 sums, and the
// rare p_j whose fp16 rounding flips between the device's and the host's
// expf).
//
// Warps: group g = w / 2 holds heads 16g..16g+15, half = w % 2. Pass 1:
// each warp holds all of its group's q fragments in registers (kvr / 16 +
// 4 k16 steps: a rope part of at most 64) and scores its own 8 keys of a
// 16-key tile (keys 8 * half ..), one ldmatrix.x4 a pair of steps, four
// accumulator chains: no partial sums traded between warps. On rows16 the
// key tiles come global -> shared by cp.async through a ring over q's and
// the tile's shared memory (MH / 16 tiles in flight, one barrier a tile);
// from the cache (converted per tile) a tile is held in registers ahead.
// Pass 2: the block forms each tile's P once (four a thread) as fp16 in
// shared memory; a warp takes MT m16 tiles of heads (two at 32 and more
// heads) and a part of the columns, each value fragment feeding MT MMAs,
// the values held a tile ahead in registers, the scores two tiles ahead.
// Measured with ncu on the H200 (docs/perf.md, session 23): what is left
// is the ldmatrix -> MMA latency of two warps a scheduler.
#pragma once

#include "cp_async.cuh"
#include "kv_cache.cuh"
#include "mla_rows16_layout.cuh"

#define GLM_MLA_PREFILL_PARAMS                                                 \
  const float *qAll, const float *qabsAll, const void *cache, const int *seq,  \
      const int *selAll, const int *nselp, float *pAll, int maxCtx,            \
      float *ctxAll, const int *heads, int nh, int H, int dn, int dr, int kvr, \
      double scale, int pStride, const int *pages, int pageShift
#define GLM_MLA_PREFILL_ARGS                                                   \
  qAll, qabsAll, cache, seq, selAll, nselp, pAll, maxCtx, ctxAll, heads, nh,   \
      H, dn, dr, kvr, scale, pStride, pages, pageShift

namespace glm {
namespace mp {

/// k16 steps of the longest latent row the kernel takes (5 chunks of 128
/// values a row: KeyTile's CH; mla_prefill_abi.h kMlaPrefillMaxLatent).
constexpr int kMaxSteps = 5 * 128 / 16;
/// k16 steps of the rope part that pass 1 holds q for, past the kvr part
/// (mla_prefill_abi.h kMlaPrefillMaxRope).
constexpr int kMaxRopeSteps = 64 / 16;

__device__ __forceinline__ unsigned smem32(const void *p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
/// fp16 bits of x, round to nearest even (subnormals kept).
__device__ __forceinline__ unsigned short f16(float x) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}
__device__ __forceinline__ float f32(unsigned short h) {
  float x;
  asm("cvt.f32.f16 %0, %1;" : "=f"(x) : "h"(h));
  return x;
}
/// Two fp16 in one register, x0 in the low half (the lower index).
__device__ __forceinline__ unsigned pack(float x0, float x1) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x1), "f"(x0));
  return r;
}
/// ldmatrix at a shared-window address: the loops below add compile-time
/// byte offsets to one base, which ptxas folds into the instruction (with
/// generic pointers it recomputed each address from the lane id, ~12
/// instructions a fragment at 250 registers).
__device__ __forceinline__ void ldsm4(unsigned a[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm4(unsigned a[4], const void *p) {
  ldsm4(a, smem32(p));
}
__device__ __forceinline__ void ldsm4t(unsigned a[4], unsigned addr) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
      : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
      : "r"(addr));
}
__device__ __forceinline__ void ldsm2t(unsigned b[2], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
               : "=r"(b[0]), "=r"(b[1])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm2(unsigned b[2], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
               : "=r"(b[0]), "=r"(b[1])
               : "r"(smem32(p)));
}
/// c += a . b, m16n8k16, fp16 inputs, fp32 accumulate.
__device__ __forceinline__ void mma(float c[4], const unsigned a[4],
                                    unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// e = 15 - (the exponent of m), clamped to [lo, hi]: m * 2^e in [2^14,
/// 2^15), below fp16's 65504 and far above its subnormals. 0 for m = 0.
/// (The twin: scaleExp in twin_mla_prefill.cpp.)
__device__ __forceinline__ int scaleExp(float m, int lo, int hi) {
  if (!(m > 0.0f))
    return 0;
  int k;
  frexpf(m, &k); // m = f * 2^k, f in [0.5, 1)
  const int e = 15 - k;
  return e < lo ? lo : e > hi ? hi : e;
}

/// Rows j0 .. j0 + 15 of the selection, columns [0, ncol) (a multiple of 4,
/// at most 128 * CH; zero past lat and for keys past n), on their way to
/// shared memory as fp16 ks [16][pitch], each row times its own power of
/// two 2^e (scaleExp of the row's max |value| within [lo, hi]; kscale[k] =
/// 2^-e undoes it). A warp takes whole rows (k = warp + NW * i), a lane CH
/// chunks of 4 values. fetch() issues the global loads of a tile into
/// registers and store() converts them after the caller's MMAs on the
/// previous tile: the gather's latency (the selection index, then the row)
/// hides behind tensor-core work instead of stalling the block, which holds
/// a whole SM (about 220 registers x 256 threads). A warp keeps HELD rows in
/// registers; the rest of its rows (blocks under 256 threads) load in
/// store(). The selection indices run one tile further ahead, so a fetch
/// never waits on them.
template <int KV, int THREADS, int CH> struct KeyTile {
  static_assert(CH >= 1 && CH <= 5, "CH: 1 to 5 chunks of 128 values");
  static constexpr int NW = THREADS / 32, RPW = 16 / NW;
  static constexpr int HELD = NW >= 8 ? 2 : 1; // 2 x CH loads a lane at most
  using Raw = typename kv::Row<KV>::Raw;
  kv::Row<KV> row[HELD];
  Raw v[HELD][CH];
  int idx[HELD]; // the next tile's selection indices (-1: past n)

  __device__ __forceinline__ void setup(const void *, int, int, int) {}
  /// Reads the selection indices of the tile at j0 (for the next fetch).
  __device__ __forceinline__ void index(const int *sel, int j0, int n) {
#pragma unroll
    for (int i = 0; i < HELD; ++i) {
      const int k = (threadIdx.x >> 5) + NW * i;
      idx[i] = j0 + k < n ? sel[j0 + k] : -1;
    }
  }
  /// Issues the loads of the tile whose indices index() read, then reads
  /// the indices of the tile after it (at j0 + 16).
  __device__ __forceinline__ void fetch(const void *cache, kv::SlotRows r0,
                                        const int *sel, int j0, int n, int lat,
                                        int ncol) {
    const int lane = threadIdx.x & 31, c4 = ncol >> 2;
#pragma unroll
    for (int i = 0; i < HELD; ++i) {
      row[i] = kv::row<KV>(cache, r0(idx[i] >= 0 ? idx[i] : 0), lat);
#pragma unroll
      for (int u = 0; u < CH; ++u) {
        const int c = lane + 32 * u;
        v[i][u] = Raw{};
        if (idx[i] >= 0 && c < c4 && 4 * c < lat)
          v[i][u] = row[i].raw4(4 * c);
      }
    }
    index(sel, j0 + 16, n);
  }
  /// Writes the fetched tile (j0) to ks / kscale; the caller syncs after.
  __device__ __forceinline__ void store(unsigned short *ks, float *kscale,
                                        int pitch, int ncol, int lo, int hi,
                                        const void *cache, kv::SlotRows r0,
                                        const int *sel, int j0, int n,
                                        int lat) {
    const int lane = threadIdx.x & 31, c4 = ncol >> 2;
#pragma unroll
    for (int i = 0; i < HELD; ++i)
      storeRow(ks, kscale, pitch, c4, lo, hi,
               j0 + (threadIdx.x >> 5) + NW * i < n,
               (threadIdx.x >> 5) + NW * i, row[i], v[i], lat);
#pragma unroll 1 // one row's loads at a time: the register budget
    for (int i = HELD; i < RPW; ++i) {
      const int k = (threadIdx.x >> 5) + NW * i;
      const bool key = j0 + k < n;
      const kv::Row<KV> r = kv::row<KV>(cache, r0(key ? sel[j0 + k] : 0), lat);
      Raw raw[CH];
#pragma unroll
      for (int u = 0; u < CH; ++u) {
        const int c = lane + 32 * u;
        raw[u] = Raw{};
        if (key && c < c4 && 4 * c < lat)
          raw[u] = r.raw4(4 * c);
      }
      storeRow(ks, kscale, pitch, c4, lo, hi, key, k, r, raw, lat);
    }
  }
  /// Row k of the tile from its loaded values (zero without a key, past
  /// lat and past ncol = 4 c4).
  static __device__ __forceinline__ void
  storeRow(unsigned short *ks, float *kscale, int pitch, int c4, int lo, int hi,
           bool key, int k, const kv::Row<KV> &r, const Raw (&raw)[CH],
           int lat) {
    const int lane = threadIdx.x & 31;
    float4 f[CH];
    float m = 0.0f;
#pragma unroll
    for (int u = 0; u < CH; ++u) {
      const int c = lane + 32 * u;
      f[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (key && c < c4 && 4 * c < lat)
        f[u] = r.widen(raw[u]);
      m = fmaxf(m, fmaxf(fmaxf(fabsf(f[u].x), fabsf(f[u].y)),
                         fmaxf(fabsf(f[u].z), fabsf(f[u].w))));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const int e = scaleExp(m, lo, hi);
    const float up = ldexpf(1.0f, e);
#pragma unroll
    for (int u = 0; u < CH; ++u) {
      const int c = lane + 32 * u;
      if (c < c4)
        *(uint2 *)(ks + k * pitch + 4 * c) = make_uint2(
            pack(f[u].x * up, f[u].y * up), pack(f[u].z * up, f[u].w * up));
    }
    if (lane == 0)
      kscale[k] = ldexpf(1.0f, -e);
  }
};

/// KeyTile's interface over rows mla_rows16 already converted (KEYS =
/// rows16). Like KeyTile it holds the next tile in registers: a cp.async
/// ring of up to five tiles in q's shared memory measured slower (1.05 ms
/// against 0.89 at GLM-5.3's shape, docs/perf.md session 20), as it did for
/// raw cache tiles in session 19. Rows16Tile: rows j0 .. j0 + 15 of the
/// selection copied as they are, 8 halves a load, from the key rows (V false:
/// pitch - 8 halves a row) or the value rows (V true: kvr), and each row's
/// 2^-e; no widening, no max, no rounding. setup() takes the rows16 buffer
/// (cache and r0 are unused).
template <int THREADS, bool V> struct Rows16Tile {
  static constexpr int NW = THREADS / 32, RPW = 16 / NW;
  static constexpr int HELD = NW >= 8 ? 2 : 1;
  static constexpr int U = (kMaxSteps * 16 / 8 + 31) / 32; // 16-byte loads
  const uint4 *rows;   // the rows of this pass, c8 loads apart
  const float *scales; // their 2^-e
  int c8;              // 16-byte loads of a row
  uint4 v[HELD][U];
  float sc[HELD];
  int idx[HELD];

  __device__ __forceinline__ void setup(const void *rows16, int maxCtx, int kvr,
                                        int dr) {
    const unsigned char *b = (const unsigned char *)rows16;
    if (V) {
      rows = (const uint4 *)(b + rows16::valueOffset(maxCtx, kvr, dr));
      scales = (const float *)(b + rows16::valueScaleOffset(maxCtx, kvr, dr));
      c8 = kvr / 8;
    } else {
      rows = (const uint4 *)b;
      scales = (const float *)(b + rows16::keyScaleOffset(maxCtx, kvr, dr));
      c8 = (int)rows16::keyHalves(kvr, dr) / 8;
    }
  }
  __device__ __forceinline__ void index(const int *sel, int j0, int n) {
#pragma unroll
    for (int i = 0; i < HELD; ++i) {
      const int k = (threadIdx.x >> 5) + NW * i;
      idx[i] = j0 + k < n ? sel[j0 + k] : -1;
    }
  }
  __device__ __forceinline__ void
  fetch(const void *, kv::SlotRows, const int *sel, int j0, int n, int, int) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < HELD; ++i) {
      const uint4 *src = rows + (long long)(idx[i] >= 0 ? idx[i] : 0) * c8;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = lane + 32 * u;
        v[i][u] = make_uint4(0u, 0u, 0u, 0u);
        if (idx[i] >= 0 && c < c8)
          v[i][u] = src[c];
      }
      sc[i] = idx[i] >= 0 ? scales[idx[i]] : 1.0f;
    }
    index(sel, j0 + 16, n);
  }
  /// Writes the fetched tile (j0): a row past n is zeros with scale 1, as
  /// KeyTile::storeRow leaves it.
  __device__ __forceinline__ void store(unsigned short *ks, float *kscale,
                                        int pitch, int, int, int, const void *,
                                        kv::SlotRows, const int *sel, int j0,
                                        int n, int) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < HELD; ++i) {
      const int k = (threadIdx.x >> 5) + NW * i;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = lane + 32 * u;
        if (c < c8)
          *(uint4 *)(ks + k * pitch + 8 * c) = v[i][u];
      }
      if (lane == 0)
        kscale[k] = sc[i];
    }
#pragma unroll 1
    for (int i = HELD; i < RPW; ++i) {
      const int k = (threadIdx.x >> 5) + NW * i;
      const int j = j0 + k < n ? sel[j0 + k] : -1;
      const uint4 *src = rows + (long long)(j >= 0 ? j : 0) * c8;
      for (int c = lane; c < c8; c += 32)
        *(uint4 *)(ks + k * pitch + 8 * c) =
            j >= 0 ? src[c] : make_uint4(0u, 0u, 0u, 0u);
      if (lane == 0)
        kscale[k] = j >= 0 ? scales[j] : 1.0f;
    }
  }
};

/// A or B by a compile-time flag (no <type_traits> under NVRTC).
template <bool C, class A, class B> struct Pick { using T = A; };
template <class A, class B> struct Pick<false, A, B> { using T = B; };

} // namespace mp

template <int KV, int KEYS, int VT, int THREADS>
__device__ __forceinline__ void mlaPrefill(GLM_MLA_PREFILL_PARAMS) {
  static_assert(THREADS == 64 || THREADS == 128 || THREADS == 256,
                "THREADS: 64 per 16 heads, 1 to 4 groups");
  static_assert(VT >= 1 && VT <= 32, "VT = kvr / 16: 1 to 32");
  static_assert(KV >= kv::kF32 && KV <= kv::kE4m3, "KV: f32, bf16 or e4m3");
  static_assert(KEYS == 0 || KEYS == 1, "KEYS: the cache, or rows16");
  constexpr int MH = 16 * (THREADS / 64); // heads of the block
  extern __shared__ __align__(16) unsigned char mpsh[];
  const int lat = kvr + dr, kp = (lat + 15) / 16 * 16, pitch = kp + 8;
  unsigned short *qs = (unsigned short *)mpsh; // [MH][pitch] fp16
  unsigned short *ks = qs + MH * pitch;        // [16][pitch] fp16
  float *red = (float *)(ks + 16 * pitch);     // [2][MH] column-half maxima
  float *qscale = red + 2 * MH;                // [MH] 2^-e of q's rows
  float *kscale = qscale + MH; // [MH + 16] 2^-e of the keys: a 16-key tile
                               // a ring slot (pass 1, rows16), else one
  const int t = threadIdx.x, lane = t & 31, w = t >> 5;
  const int grp = w >> 1, half = w & 1, gr = lane >> 2, tq = lane & 3;
  // Rows in reverse: a chunk's later rows attend the most keys, and the
  // longest blocks first leave the short ones to fill the last wave.
  const int b = gridDim.y - 1 - blockIdx.y, hb0 = blockIdx.x * MH,
            n = min(nselp[b], pStride);
  // KEYS = rows16: `cache` is mla_rows16's buffer of the chunk's slot.
  const kv::SlotRows r0 = kv::slotRows(KEYS ? nullptr : pages, pageShift,
                                       KEYS ? 0 : seq[b], maxCtx);
  const int *sel = selAll + (long long)b * maxCtx;
  const float fscale = (float)scale;

  // q of the block's heads (zero rows past nh, zero columns past lat), a
  // warp per head row, each row times 2^e (mp::scaleExp of its max |q|).
  // A warp stages QR rows at once with every lane's loads issued before
  // any is used: the prologue is QR * 20 loads in flight a lane, not one
  // round trip a value (it was 15% of the kernel's time, ncu, session 23).
  constexpr int QU = mp::kMaxSteps * 16 / 32, QR = MH / (THREADS / 32);
  for (int i0 = w * QR; i0 < MH; i0 += QR * (THREADS / 32)) {
    float v[QR][QU];
#pragma unroll
    for (int r = 0; r < QR; ++r) {
      const int i = i0 + r;
      const bool on = hb0 + i < nh;
      const long long bh = on ? (long long)b * H + heads[hb0 + i] : 0;
      const float *qa = qabsAll + bh * kvr, *qp = qAll + bh * (dn + dr) + dn;
#pragma unroll
      for (int u = 0; u < QU; ++u) {
        const int c = lane + 32 * u;
        v[r][u] = !on || c >= lat ? 0.0f : c < kvr ? qa[c] : qp[c - kvr];
      }
    }
#pragma unroll
    for (int r = 0; r < QR; ++r) {
      float m = 0.0f;
#pragma unroll
      for (int u = 0; u < QU; ++u)
        m = fmaxf(m, fabsf(v[r][u]));
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      const int e = mp::scaleExp(m, -126, 100);
      const float up = ldexpf(1.0f, e);
#pragma unroll
      for (int u = 0; u < QU; ++u) {
        const int c = lane + 32 * u;
        if (c < kp)
          qs[(i0 + r) * pitch + c] = mp::f16(v[r][u] * up);
      }
      if (lane == 0)
        qscale[i0 + r] = ldexpf(1.0f, -e);
    }
  }
  // This thread's two head rows (gr, gr + 8 of its group).
  bool valid[2];
  float *prow[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int hi = hb0 + 16 * grp + gr + 8 * r;
    valid[r] = hi < nh;
    prow[r] =
        valid[r] ? pAll + ((long long)b * H + heads[hi]) * pStride : nullptr;
  }

  // Pass 1: scores into pAll, the running max of each head row.
  const float ninf = __int_as_float(0xff800000);
  float mx[2] = {ninf, ninf};
  // Each warp of a group holds all of q's k16 steps in registers (VT +
  // kMaxRopeSteps fragments of 4) and takes its own 8 keys of a tile (keys
  // 8 half ..), so no partial sums are traded between warps: one
  // ldmatrix.x4 of its keys covers two steps, four accumulator chains.
  constexpr int QSTEPS = VT + mp::kMaxRopeSteps, PAIRS = (QSTEPS + 1) / 2;
  const int nks = kp / 16;
  unsigned qf[QSTEPS][4];
  __syncthreads(); // q is staged
  const float qsc[2] = {qscale[16 * grp + gr] * fscale,
                        qscale[16 * grp + gr + 8] * fscale};
  // Whether step i is within the latent: always for the kvr part
  // (compile time), by nks for the rope part.
  auto stepOn = [&](int i) { return i < VT || i < nks; };
#pragma unroll
  for (int i = 0; i < QSTEPS; ++i)
    if (stepOn(i))
      mp::ldsm4(qf[i], qs + (16 * grp + (lane & 15)) * pitch + (lane >> 4) * 8 +
                           16 * i);
  // This lane's ldmatrix row of a key tile, in bytes from the tile: key
  // 8 half + lane % 8, columns 8 (lane / 8) of each 32-column pair of
  // steps (64 bytes apart).
  const unsigned kl = ((8 * half + (lane & 7)) * pitch + (lane >> 3) * 8) * 2;
  constexpr int CH2 = (VT + 7) / 8; // pass 2's 16 VT columns, 128 a chunk
  // Scores of the 16 keys whose rows start at shared address `tile`
  // (scales ksc) into pAll and the running maxima.
  auto tileScores = [&](unsigned tile, const float *ksc, int j0) {
    const unsigned kb = tile + kl;
    float acc[4][4] = {}; // [step % 4]: independent chains
    // Key fragments two pairs ahead of their MMAs: the ldmatrix latency
    // hides behind the MMAs in between. An odd last step reads 16 halves
    // past its row (inside the block's shared memory) and skips them.
    unsigned bb[3][4];
#pragma unroll
    for (int p = 0; p < 2; ++p)
      if (stepOn(2 * p))
        mp::ldsm4(bb[p], kb + 64 * p);
#pragma unroll
    for (int p = 0; p < PAIRS; ++p) {
      if (p + 2 < PAIRS && stepOn(2 * (p + 2)))
        mp::ldsm4(bb[(p + 2) % 3], kb + 64 * (p + 2));
      if (stepOn(2 * p))
        mp::mma(acc[(2 * p) & 3], qf[2 * p], bb[p % 3][0], bb[p % 3][1]);
      if (2 * p + 1 < QSTEPS && stepOn(2 * p + 1))
        mp::mma(acc[(2 * p + 1) & 3], qf[2 * p + 1], bb[p % 3][2],
                bb[p % 3][3]);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = j0 + 8 * half + 2 * tq + e, c = 2 * r + e;
        // The chains' sum in a fixed order.
        const float d = (acc[0][c] + acc[1][c]) + (acc[2][c] + acc[3][c]);
        if (valid[r] && j < n) {
          // q . k * scale = d * 2^-ek * (2^-eq * scale): the power-of-two
          // factors are exact, so one rounding, as d * 2^-(eq + ek) * scale.
          const float s = d * ksc[j - j0] * qsc[r];
          prow[r][j] = s;
          mx[r] = fmaxf(mx[r], s);
        }
      }
  };
  if constexpr (KEYS == 1) {
    // rows16's key rows need no conversion: they go global -> shared by
    // cp.async into a ring of RING 16-key tiles over q's and the key
    // tile's shared memory (q is in registers now), RING - 1 tiles in
    // flight, one block barrier a tile (ncu showed the single tile held
    // in registers waiting on its gather once the MMAs got faster).
    constexpr int RING = (MH + 16) / 16, NW = THREADS / 32, RPW = 16 / NW;
    const unsigned char *r16 = (const unsigned char *)cache;
    const uint4 *krows = (const uint4 *)r16;
    const float *kscales =
        (const float *)(r16 + rows16::keyScaleOffset(maxCtx, kvr, dr));
    const int c8 = kp / 8, ntiles = (n + 15) / 16;
    int idx[RPW]; // selection indices of the next tile to issue
    auto index = [&](int tt) {
#pragma unroll
      for (int i = 0; i < RPW; ++i) {
        const int j = 16 * tt + w + NW * i;
        idx[i] = tt < ntiles && j < n ? sel[j] : -1;
      }
    };
    // A lane copies 16-byte chunks lane, lane + 32, .. of each of its
    // warp's rows (compile-time unrolled, predicated: no branches); rows
    // past n are zeros, their scores never kept.
    constexpr int KU = (mp::kMaxSteps * 16 / 8 + 31) / 32;
    auto issue = [&](int tt) { // tile tt into slot tt % RING, then tt + 1's
      unsigned short *dst = qs + (tt % RING) * 16 * pitch;
#pragma unroll
      for (int i = 0; i < RPW; ++i) {
        const int k = w + NW * i;
        const bool on = idx[i] >= 0;
        const uint4 *src = krows + (long long)(on ? idx[i] : 0) * c8;
#pragma unroll
        for (int u = 0; u < KU; ++u) {
          const int c = lane + 32 * u;
          if (c < c8)
            cpAsync16(dst + k * pitch + 8 * c, src + c, on);
        }
        if (on && lane == 0)
          cpAsync4(kscale + (tt % RING) * 16 + k, kscales + idx[i]);
      }
      cpAsyncCommit(); // a group every tile, empty past the last
      index(tt + 1);
    };
    __syncthreads(); // every warp holds its q fragments: q's memory is free
    index(0);
#pragma unroll
    for (int tt = 0; tt < RING - 1; ++tt)
      issue(tt);
    for (int tt = 0; tt < ntiles; ++tt) {
      cpAsyncWait<RING - 2>(); // this thread's copies of tile tt
      __syncthreads(); // everyone's; and tile tt - 1's slot is consumed
      issue(tt + RING - 1);
      tileScores(mp::smem32(qs + (tt % RING) * 16 * pitch),
                 kscale + (tt % RING) * 16, 16 * tt);
    }
  } else {
    typename mp::Pick<KEYS == 1, mp::Rows16Tile<THREADS, false>,
                      mp::KeyTile<KV, THREADS, 5>>::T keys;
    keys.setup(cache, maxCtx, kvr, dr);
    keys.index(sel, 0, n);
    keys.fetch(cache, r0, sel, 0, n, lat, kp);
    for (int j0 = 0; j0 < n; j0 += 16) {
      __syncthreads(); // the previous tile is consumed
      keys.store(ks, kscale, pitch, kp, -126, 100, cache, r0, sel, j0, n,
                 lat);
      __syncthreads();
      if (j0 + 16 < n) // the next tile's loads fly during these MMAs
        keys.fetch(cache, r0, sel, j0 + 16, n, lat, kp);
      tileScores(mp::smem32(ks), kscale, j0);
    }
  }
  // Pass 2's first values fly during the maxima's exchange.
  typename mp::Pick<KEYS == 1, mp::Rows16Tile<THREADS, true>,
                    mp::KeyTile<KV, THREADS, CH2>>::T vals;
  vals.setup(cache, maxCtx, kvr, dr);
  vals.index(sel, 0, n);
  vals.fetch(cache, r0, sel, 0, n, lat, kvr);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    if (tq == 0)
      red[half * MH + 16 * grp + gr + 8 * r] = mx[r];
  }
  __syncthreads(); // the maxima, and pAll's scores seen by the block

  // Pass 2: ctx = P . V over the first kvr columns, l = sum of P. The
  // block forms each tile's P once (four probabilities a thread: head
  // t / 4, keys 4 (t % 4) ..) as fp16 in q's shared memory, free since
  // pass 1 holds q in registers; a warp then takes MT m16 tiles of heads
  // and a part of the columns, so each value fragment from ldmatrix feeds
  // MT MMAs (two: half the shared-memory reads of MT = 1).
  constexpr int MT = MH >= 32 && (2 * VT) % 4 == 0 ? 2 : 1;
  constexpr int CP = 2 * MT;      // column parts: CP * MH / (16 MT) = warps
  constexpr int NT = 2 * VT / CP; // n8 tiles of a warp
  constexpr int PP = 24;          // halves a P row (16 + 8: no bank conflicts)
  unsigned short *ps = qs;        // [MH][PP]
  float *lrow = red;              // [MH] l of each head row, after the loop
  const int hb2 = w / CP, col0 = (w % CP) * NT * 8;
  const int ph = t >> 2, pk = 4 * (t & 3); // this thread's P: head, keys
  const bool pvalid = hb0 + ph < nh;
  const float *pscores =
      pvalid ? pAll + ((long long)b * H + heads[hb0 + ph]) * pStride : pAll;
  const float pmx = fmaxf(red[ph], red[MH + ph]);
  float o[MT][NT][4] = {};
  float lsum = 0.0f;
  const int mi = lane >> 3;
  const unsigned vb = mp::smem32(ks + ((mi & 1) * 8 + (lane & 7)) * pitch +
                                 (mi >> 1) * 8 + col0);
  const unsigned pb = mp::smem32(ps + (16 * MT * hb2 + (lane & 15)) * PP +
                                 (lane >> 4) * 8);
  // The thread's four scores, read two tiles ahead (two register sets,
  // the loop unrolled twice so each set has fixed registers) and four
  // tiles on into L2: pAll's rows outgrow the L2 while pass 1 writes
  // them, and one tile of MMAs did not cover their reads from DRAM (ncu).
  auto readScores = [&](float(&sc)[4], int j0) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      sc[e] = pvalid && j0 + pk + e < n ? pscores[j0 + pk + e] : 0.0f;
    if (pk < 8 && pvalid && j0 + 64 + pk < n)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(pscores + j0 + 64 + pk));
  };
  float scA[4], scB[4];
  readScores(scA, 0);
  readScores(scB, 16);
  __syncthreads(); // every warp read red's maxima before lrow reuses it
  auto tile = [&](int j0, float(&sc)[4]) {
    __syncthreads(); // the previous tile's values and P are consumed
    // Values: only rows past 2^15 scaled (down, by at most 2^15), the
    // probabilities times the inverse so they stay below 65504.
    vals.store(ks, kscale, pitch, kvr, -15, 0, cache, r0, sel, j0, n, lat);
    __syncthreads(); // the tile and its scales
    if (j0 + 16 < n)
      vals.fetch(cache, r0, sel, j0 + 16, n, lat, kvr);
    // expf(-inf) = 0 past n: no branch per probability.
    unsigned short hv[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = j0 + pk + e;
      const float pe = expf(pvalid && j < n ? sc[e] - pmx : ninf);
      const float vs = kscale[pk + e]; // 2^-ev >= 1
      hv[e] = mp::f16(pe * vs);
      // The weight the MMA applies, f32(hv) / vs: times 2^ev (its
      // exponent bits negated), exact like the division, as the product
      // is >= 2^-39, normal.
      lsum += mp::f32(hv[e]) * __int_as_float(0x7f000000 - __float_as_int(vs));
    }
    *(uint2 *)(ps + ph * PP + pk) =
        make_uint2((unsigned)hv[0] | ((unsigned)hv[1] << 16),
                   (unsigned)hv[2] | ((unsigned)hv[3] << 16));
    if (j0 + 32 < n)
      readScores(sc, j0 + 32);
    __syncthreads(); // P
    unsigned pa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      mp::ldsm4(pa[mt], pb + mt * 16 * PP * 2);
#pragma unroll
    for (int nt = 0; nt + 1 < NT; nt += 2) {
      unsigned bv[4];
      mp::ldsm4t(bv, vb + 16 * nt);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mp::mma(o[mt][nt], pa[mt], bv[0], bv[1]);
        mp::mma(o[mt][nt + 1], pa[mt], bv[2], bv[3]);
      }
    }
    if (NT & 1) {
      unsigned bv[2];
      mp::ldsm2t(bv, vb + 16 * (NT - 1));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        mp::mma(o[mt][NT - 1], pa[mt], bv[0], bv[1]);
    }
  };
  for (int j0 = 0; j0 < n; j0 += 32) {
    tile(j0, scA);
    if (j0 + 16 < n)
      tile(j0 + 16, scB);
  }
  // l of head ph: its four threads are lanes 4q .. 4q + 3 of one warp.
  lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
  lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
  if ((t & 3) == 0)
    lrow[ph] = lsum;
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int hr = 16 * (MT * hb2 + mt) + gr + 8 * r;
      if (hb0 + hr >= nh)
        continue;
      float *crow = ctxAll + ((long long)b * H + heads[hb0 + hr]) * kvr + col0;
      const float inv = lrow[hr] > 0.0f ? 1.0f / lrow[hr] : 0.0f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        crow[8 * nt + 2 * tq] = o[mt][nt][2 * r] * inv;
        crow[8 * nt + 2 * tq + 1] = o[mt][nt][2 * r + 1] * inv;
      }
    }
}

} // namespace glm
