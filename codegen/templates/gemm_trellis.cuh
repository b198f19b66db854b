// gemm_trellis.cuh - prefill GEMM z = xh . T on tensor cores, T a trellis
// matrix decoded on the fly.
//
// Same conventions as dense_gemv_trellis (its many-token counterpart): xh is
// the input already multiplied by suh and rotated (hadamard128), [m, in]
// row-major with row stride x_stride (fp32 or fp16 storage); T (in x out) is
// decoded from its 16x16 tiles (exl3-format.md §1-2, TileStrides covers EXL3
// row-major and the exlr8 layouts); z is fp32 [m, out] (row stride z_stride)
// in the rotated domain: a hadamard128 with svh follows, as after the GEMV.
// accumulate != 0 adds to z instead of overwriting it.
//
// Numerics: xh is rounded to fp16 (RN) when staged; decoded weights are
// exactly fp16 (or E4M3) values, so they enter mma.sync.m16n8k16 (fp16
// inputs, fp32 accumulation) unchanged. For fp16-representable xh the result
// equals the GEMV's up to fp32 accumulation order.
//
// Block tile BM x BN x 32 (tokens x outputs x inputs), BN = THREADS (4 or 8
// warps side by side, warp tile BM x 32). Per 32-input step the block's
// trellis tiles arrive by cp.async (a 3-4 step ring); each warp decodes its
// own two tile columns (no other warp needs them: each tile is decoded once
// per block) straight into m16n8k16 B fragments in registers (a tile's
// trellis order IS the fragment order: lane L's positions 8L..8L+7 are its
// b0..b3 of both n8 halves). xh is staged in shared memory (fp16, padded
// rows) and read by ldmatrix. The next k16's decode is issued between the
// current MMAs so the integer and tensor pipes overlap. No wgmma (the
// Sparks lack it). Requirements: in % 32 == 0, out % 16 == 0,
// x_stride % 8 == 0 (fp16) or % 4 == 0 (fp32) with a 16-byte aligned xh,
// tiles 16-byte aligned. Grid (ceil(out / THREADS), ceil(m / BM)); static
// shared memory <= 45 KB (the Sparks allow 99 KB).
#pragma once

#include "cp_async.cuh"
#include "glm_common.cuh"

#define GLM_GEMM_TRELLIS_PARAMS                                                \
  const void *__restrict__ xh, const unsigned char *__restrict__ tiles,        \
      float *__restrict__ z, int m, int in, int out, int x_stride,             \
      int z_stride, int accumulate, int sI, int sI8, int sJ8
#define GLM_GEMM_TRELLIS_ARGS                                                  \
  xh, tiles, z, m, in, out, x_stride, z_stride, accumulate, sI, sI8, sJ8

namespace glm {

/// Two 16-bit states -> their two codebook values as an fp16 pair (low half
/// = s0), bit-identical to decodeState (fp16 add / fused fp16 FMA round
/// exactly once, like the format's RN16), optionally rounded to E4M3.
template <int CB, bool E4M3>
__device__ __forceinline__ u32 decodePairH2(u32 s0, u32 s1) {
  u32 r;
  if (CB == kCbMul1) {
    // dp4a gives 0x6400 + byte sum = the fp16 bits of 1024 + b; one fused
    // fp16 FMA with k_inv (0x1EEE) and k_bias (0xC931) is the format's RN16.
    // Unsigned dp4a: the bytes are 0..255 (the signed form would be wrong).
    const u32 b0 = __dp4a(s0 * 0x83DCD12Du, 0x01010101u, 0x6400u);
    const u32 b1 = __dp4a(s1 * 0x83DCD12Du, 0x01010101u, 0x6400u);
    const u32 bb = __byte_perm(b0, b1, 0x5410);
    __half2 h = *reinterpret_cast<const __half2 *>(&bb);
    const __half2 kInv = __halves2half2(__ushort_as_half(0x1EEE),
                                        __ushort_as_half(0x1EEE));
    const __half2 kBias = __halves2half2(__ushort_as_half(0xC931),
                                         __ushort_as_half(0xC931));
    h = __hfma2(h, kInv, kBias);
    r = *reinterpret_cast<const u32 *>(&h);
  } else {
    u32 y0 = CB == kCb3Inst ? s0 * 89226354u + 64248484u : s0 * 0xCBAC1FEDu;
    u32 y1 = CB == kCb3Inst ? s1 * 89226354u + 64248484u : s1 * 0xCBAC1FEDu;
    y0 = (y0 & 0x8FFF8FFFu) ^ 0x3B603B60u;
    y1 = (y1 & 0x8FFF8FFFu) ^ 0x3B603B60u;
    const u32 lo = __byte_perm(y0, y1, 0x5410); // (y0.lo, y1.lo)
    const u32 hi = __byte_perm(y0, y1, 0x7632); // (y0.hi, y1.hi)
    // fp16 add of two fp16 values = RN16 of their exact sum.
    const __half2 h = __hadd2(*reinterpret_cast<const __half2 *>(&lo),
                              *reinterpret_cast<const __half2 *>(&hi));
    r = *reinterpret_cast<const u32 *>(&h);
  }
  if (E4M3) {
    // exlr8: fp16 -> E4M3 (RNE, saturating) -> back; exact in fp16.
    const __nv_fp8x2_storage_t q = __nv_cvt_halfraw2_to_fp8x2(
        *reinterpret_cast<const __half2_raw *>(&r), __NV_SATFINITE, __NV_E4M3);
    const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(q, __NV_E4M3);
    r = *reinterpret_cast<const u32 *>(&b);
  }
  return r;
}

/// Lane `lane`'s 8 positions of one tile (words in shared memory) as its
/// m16n8k16 B fragments: .x/.y = n8 half 0 (b0b1, b2b3), .z/.w = half 1.
template <int K, int CB, bool E4M3>
__device__ __forceinline__ uint4 decodeLaneFrag(const u32 *words, int lane) {
  constexpr int kWords = 8 * K;
  constexpr int kBits = 256 * K;
  // The lane's 8 windows span bits [S, S + 7K + 16) of the circular stream.
  constexpr int kSpan = 7 * K + 16;
  constexpr int kAligned = (kSpan + 31) / 32; // words after alignment
  int S = 8 * lane * K + K - 16;
  if (S < 0)
    S += kBits;
  const int q = S >> 5, r = S & 31;
  u32 w[kAligned + 1];
#pragma unroll
  for (int i = 0; i <= kAligned; ++i) {
    int idx = q + i;
    if (idx >= kWords)
      idx -= kWords;
    w[i] = words[idx];
  }
  // a = the stream from bit S on, MSB-first (funnel shift by r; r = 0 keeps
  // w[i]), so every window below sits at a compile-time offset.
  u32 a[kAligned + 1];
#pragma unroll
  for (int i = 0; i < kAligned; ++i)
    a[i] = __funnelshift_l(w[i + 1], w[i], r);
  a[kAligned] = 0;
  u32 s[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int o = e * K, qi = o >> 5, ri = o & 31;
    if (ri <= 16)
      s[e] = (a[qi] >> (16 - ri)) & 0xFFFFu;
    else
      s[e] = __funnelshift_l(a[qi + 1], a[qi], ri) >> 16;
  }
  uint4 f;
  f.x = decodePairH2<CB, E4M3>(s[0], s[1]);
  f.y = decodePairH2<CB, E4M3>(s[2], s[3]);
  f.z = decodePairH2<CB, E4M3>(s[4], s[5]);
  f.w = decodePairH2<CB, E4M3>(s[6], s[7]);
  return f;
}

__device__ __forceinline__ u32 smemAddr(const void *p) {
  return u32(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrixX4(u32 a[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(smemAddr(p)));
}

__device__ __forceinline__ void mma16816(float c[4], const u32 a[4], u32 b0,
                                         u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 packHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const u32 *>(&h);
}

/// Shared memory of one block tile: the trellis word ring and the xh
/// double buffer. BN = 32 * warps output columns, 32 inputs per step.
template <int K, int BM, int THREADS> struct GemmSmem {
  static constexpr int kWarps = THREADS / 32;
  static constexpr int kBN = 32 * kWarps;
  static constexpr int kStages = K <= 4 ? 4 : 3;
  static constexpr int kStepTiles = 2 * (kBN / 16); // 2 deep x BN/16 wide
  static constexpr int kStepWords = kStepTiles * 8 * K;
  static constexpr int kXPitch = 32 + 8; // halves; conflict-free ldmatrix
  static constexpr int kWordsBytes = kStages * kStepWords * 4;
  static constexpr int kXBytes = 2 * BM * kXPitch * 2;
  static constexpr int kBytes = kWordsBytes + kXBytes;
};

/// One BM x BN output tile at (m0, n0) of z = xh . T. Local row r reads
/// xh row (row_map ? row_map[r] : r) and writes z row r (pointers already
/// offset to the problem); rows >= m are zero / not written.
/// Warp w owns output columns n0 + 32w .. +31 (trellis tile columns 2w,
/// 2w + 1) for all BM rows: it decodes exactly those tiles, once per block,
/// straight into its B fragment registers, so decoded weights never touch
/// shared memory; xh fragments come from shared memory by ldmatrix (128
/// bytes per mma). The decode of the next 16 inputs is issued between the
/// MMAs of the current ones so the integer and tensor pipes overlap.
/// gemmTrellisMainloop adds the tile's products to acc (the caller's, so
/// several matrices can add into one tile: the grouped down halves) and
/// leaves shared memory free for the next call; gemmTrellisStore writes it.
template <int BM> struct TileAcc {
  float v[BM / 16][4][4];
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < BM / 16; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          v[i][j][r] = 0.0f;
  }
};
template <int K, int CB, bool E4M3, int XT, int BM, int THREADS>
__device__ __forceinline__ void gemmTrellisMainloop(
    const void *__restrict__ xh, const int *__restrict__ row_map,
    const unsigned char *__restrict__ tiles, int m, int in, int out,
    int x_stride, TileStrides st, int m0, int n0, unsigned char *smem,
    TileAcc<BM> &tacc) {
  static_assert(K >= 1 && K <= 8, "K in 1..8");
  static_assert(CB >= 0 && CB <= 2, "codebook");
  static_assert(XT == 0 || XT == 1, "xh storage: f32 or f16");
  static_assert(BM == 64 || BM == 128, "BM: 64 or 128 tokens");
  static_assert(THREADS == 128 || THREADS == 256, "4 or 8 warps");
  typedef GemmSmem<K, BM, THREADS> L;
  constexpr int BK = 32;                    // inputs per step
  constexpr int kTileWords = 8 * K;         // u32 per tile
  constexpr int kWide = L::kBN / 16;        // tile columns per block
  constexpr int kStepWords = L::kStepWords;
  constexpr int kStepChunks = kStepWords / 4; // 16-byte chunks
  constexpr int NSTAGE = L::kStages;
  constexpr int NAHEAD = NSTAGE - 1;          // steps in flight
  constexpr int XPITCH = L::kXPitch;
  constexpr int MT = BM / 16;                 // m16 tiles per warp
  constexpr int XCHUNKS = BM * BK / 8 / THREADS; // 8-element chunks/thread

  u32 (*sWords)[kStepWords] = reinterpret_cast<u32 (*)[kStepWords]>(smem);
  __half (*sX)[BM][XPITCH] =
      reinterpret_cast<__half (*)[BM][XPITCH]>(smem + L::kWordsBytes);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nk = in / BK;
  const int tileCols = out / 16;
  const u32 *tw = reinterpret_cast<const u32 *>(tiles);

  // Trellis words of step k into ring slot k % NSTAGE (one commit group).
  // Tile t of a step: k16 half t / kWide, tile column t % kWide.
  auto loadWords = [&](int k) {
    if (k < nk) {
      u32 *dst = sWords[k % NSTAGE];
      for (int c = threadIdx.x; c < kStepChunks; c += THREADS) {
        const int t = c / (2 * K), sub = c % (2 * K);
        const int i = 2 * k + t / kWide, j = (n0 >> 4) + t % kWide;
        if (j < tileCols)
          cpAsync16(dst + t * kTileWords + 4 * sub,
                    tw + tileIndex(i, j, st) * kTileWords + 4 * sub);
      }
    }
    cpAsyncCommit();
  };
  // The xh rows of this thread's chunks (fixed over k).
  long long xrow[XCHUNKS];
#pragma unroll
  for (int c = 0; c < XCHUNKS; ++c) {
    const int r = m0 + ((threadIdx.x + c * THREADS) >> 2);
    xrow[c] = r < m ? (long long)(row_map ? row_map[r] : r) * x_stride : -1;
  }
  // xh of step k -> registers (fp16 pairs), zero beyond m.
  u32 xr[XCHUNKS][4];
  auto loadX = [&](int k) {
#pragma unroll
    for (int c = 0; c < XCHUNKS; ++c) {
      const int col = ((threadIdx.x + c * THREADS) & 3) * 8;
      if (xrow[c] >= 0) {
        const long long off = xrow[c] + k * BK + col;
        if (XT == 1) {
          const uint4 v = *reinterpret_cast<const uint4 *>(
              static_cast<const __half *>(xh) + off);
          xr[c][0] = v.x, xr[c][1] = v.y, xr[c][2] = v.z, xr[c][3] = v.w;
        } else {
          const float4 *p = reinterpret_cast<const float4 *>(
              static_cast<const float *>(xh) + off);
          const float4 a = p[0], b = p[1];
          xr[c][0] = packHalf2(a.x, a.y), xr[c][1] = packHalf2(a.z, a.w);
          xr[c][2] = packHalf2(b.x, b.y), xr[c][3] = packHalf2(b.z, b.w);
        }
      } else {
        xr[c][0] = xr[c][1] = xr[c][2] = xr[c][3] = 0u;
      }
    }
  };
  auto storeX = [&](int buf) {
#pragma unroll
    for (int c = 0; c < XCHUNKS; ++c) {
      const int chunk = threadIdx.x + c * THREADS;
      const int row = chunk >> 2, col = (chunk & 3) * 8;
      *reinterpret_cast<uint4 *>(&sX[buf][row][col]) =
          make_uint4(xr[c][0], xr[c][1], xr[c][2], xr[c][3]);
    }
  };
  // This warp's two tiles of k16 half kk of step k -> B fragments.
  auto decode = [&](int k, int kk, uint4 b[2]) {
    const u32 *src = sWords[k % NSTAGE] + (kk * kWide + 2 * warp) * kTileWords;
    b[0] = decodeLaneFrag<K, CB, E4M3>(src, lane);
    b[1] = decodeLaneFrag<K, CB, E4M3>(src + kTileWords, lane);
  };
  float (&acc)[MT][4][4] = tacc.v;
  auto mmaHalf = [&](int buf, int kk, const uint4 b[2]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      u32 a[4];
      ldmatrixX4(a, &sX[buf][mt * 16 + (lane & 15)][kk * 16 + (lane >> 4) * 8]);
      mma16816(acc[mt][0], a, b[0].x, b[0].y);
      mma16816(acc[mt][1], a, b[0].z, b[0].w);
      mma16816(acc[mt][2], a, b[1].x, b[1].y);
      mma16816(acc[mt][3], a, b[1].z, b[1].w);
    }
  };

  // Prologue: NAHEAD steps of words in flight, xh of step 0, fragments of
  // step 0's first k16 half.
#pragma unroll
  for (int s = 0; s < NAHEAD; ++s)
    loadWords(s);
  loadX(0);
  storeX(0);
  cpAsyncWait<NAHEAD - 1>(); // step 0 landed
  __syncthreads();
  uint4 bcur[2], bnext[2];
  decode(0, 0, bcur);

  for (int k = 0; k < nk; ++k) {
    const int buf = k & 1;
    cpAsyncWait<NAHEAD - 2 < 0 ? 0 : NAHEAD - 2>(); // step k + 1 landed
    __syncthreads(); // sX[buf] stored; slot (k-1) and sX[buf^1] free
    loadWords(k + NAHEAD); // into slot (k - 1) % NSTAGE
    const bool more = k + 1 < nk;
    if (more)
      loadX(k + 1);
    decode(k, 1, bnext);
    mmaHalf(buf, 0, bcur);
    if (more)
      decode(k + 1, 0, bcur);
    mmaHalf(buf, 1, bnext);
    if (more)
      storeX(buf ^ 1);
  }
  cpAsyncWait<0>();
  __syncthreads(); // the ring and sX free for the next mainloop
}

/// Epilogue: n8 tile nt of warp w = columns n0 + 32w + 8nt; c0,c1 at row
/// lane/4, c2,c3 at row lane/4 + 8 (rows >= m not written).
template <int BM, int THREADS>
__device__ __forceinline__ void gemmTrellisStore(const TileAcc<BM> &tacc,
                                                 float *__restrict__ z, int m,
                                                 int out, int z_stride,
                                                 int accumulate, int m0,
                                                 int n0) {
  constexpr int MT = BM / 16;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float (&acc)[MT][4][4] = tacc.v;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int col = n0 + 32 * warp + 8 * nt + 2 * (lane & 3);
      if (col >= out)
        continue;
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = m0 + mt * 16 + (lane >> 2) + 8 * hr;
        if (row >= m)
          continue;
        float *p = z + (long long)row * z_stride + col;
        float v0 = acc[mt][nt][2 * hr], v1 = acc[mt][nt][2 * hr + 1];
        if (accumulate)
          v0 += p[0], v1 += p[1];
        p[0] = v0;
        p[1] = v1;
      }
    }
}

/// One tile from zero: the mainloop, then the store.
template <int K, int CB, bool E4M3, int XT, int BM, int THREADS>
__device__ __forceinline__ void gemmTrellisTile(
    const void *__restrict__ xh, const int *__restrict__ row_map,
    const unsigned char *__restrict__ tiles, float *__restrict__ z, int m,
    int in, int out, int x_stride, int z_stride, int accumulate,
    TileStrides st, int m0, int n0, unsigned char *smem) {
  TileAcc<BM> acc;
  acc.zero();
  gemmTrellisMainloop<K, CB, E4M3, XT, BM, THREADS>(
      xh, row_map, tiles, m, in, out, x_stride, st, m0, n0, smem, acc);
  gemmTrellisStore<BM, THREADS>(acc, z, m, out, z_stride, accumulate, m0, n0);
}

/// Dense entry: grid (ceil(out / THREADS), ceil(m / BM)); BN = THREADS.
template <int K, int CB, bool E4M3, int XT, int BM, int THREADS>
__device__ __forceinline__ void gemmTrellis(GLM_GEMM_TRELLIS_PARAMS) {
  __shared__ __align__(16) unsigned char smem[GemmSmem<K, BM, THREADS>::kBytes];
  if ((int)blockIdx.x * THREADS >= out || (int)blockIdx.y * BM >= m)
    return; // a grid rounded up by the caller
  gemmTrellisTile<K, CB, E4M3, XT, BM, THREADS>(
      xh, nullptr, tiles, z, m, in, out, x_stride, z_stride, accumulate,
      TileStrides{sI, sI8, sJ8}, blockIdx.y * BM, blockIdx.x * THREADS, smem);
}

} // namespace glm
