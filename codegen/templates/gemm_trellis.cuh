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
#include "trellis_tile.cuh"

#define GLM_GEMM_TRELLIS_PARAMS                                                \
  const void *__restrict__ xh, const unsigned char *__restrict__ tiles,        \
      float *__restrict__ z, int m, int in, int out, int x_stride,             \
      int z_stride, int accumulate, int sI, int sI8, int sJ8
#define GLM_GEMM_TRELLIS_ARGS                                                  \
  xh, tiles, z, m, in, out, x_stride, z_stride, accumulate, sI, sI8, sJ8

namespace glm {

/// Lane `lane`'s 8 positions of one tile (its words in shared memory, at
/// the offsets of `m`, LaneMap<K>(lane): computed once per kernel) as its
/// m16n8k16 B fragments: .x/.y = n8 half 0 (b0b1, b2b3), .z/.w = half 1 —
/// position pairs (0,1), (2,3), (4,5), (6,7). The states and their values
/// come from trellis_tile.cuh, as in the decode kernels (one decode).
template <int K, int CB, bool E4M3>
__device__ __forceinline__ uint4 decodeLaneFrag(const u32 *words,
                                                const LaneMap<K> &m) {
  u32 v[TileLane<K>::kLoad];
#pragma unroll
  for (int i = 0; i < TileLane<K>::kLoad; ++i)
    v[i] = words[m.off[i]];
  u32 s[8];
  laneStates<K>(v, m.shift, s);
  uint4 f;
  f.x = decodePair<CB, E4M3>(s[0], s[1]);
  f.y = decodePair<CB, E4M3>(s[2], s[3]);
  f.z = decodePair<CB, E4M3>(s[4], s[5]);
  f.w = decodePair<CB, E4M3>(s[6], s[7]);
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

__device__ __forceinline__ u32 packHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const u32 *>(&h);
}

/// Row pitch of the staged xh (halves): 32 + 8, conflict-free ldmatrix.
constexpr int kGemmXPitch = 32 + 8;

/// Shared memory of one block tile: the trellis word ring and the xh
/// double buffer. BN = 32 * warps output columns, 32 inputs per step.
template <int K, int BM, int THREADS> struct GemmSmem {
  static constexpr int kWarps = THREADS / 32;
  static constexpr int kBN = 32 * kWarps;
  static constexpr int kStages = K <= 4 ? 4 : 3;
  static constexpr int kStepTiles = 2 * (kBN / 16); // 2 deep x BN/16 wide
  static constexpr int kStepWords = kStepTiles * 8 * K;
  static constexpr int kXPitch = kGemmXPitch;
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
/// The trellis words of one 32-input step, global -> shared by cp.async:
/// the step's THREADS / 8 tiles (2 k16 rows x BN / 16 columns; tile t: k16
/// row t / (BN / 16), column t % (BN / 16), at t * 8K words of the slot),
/// thread x copying 16-byte chunk x % 8 (and x % 8 + 8 when K > 4) of tile
/// x / 8. The mapping is the same at every width (the chained halves change
/// K per half) and fixed over the steps: a step only moves the tile row.
template <int THREADS> struct WordCopy {
  static constexpr int kWide = THREADS / 16; // tile columns (BN = THREADS)
  int tile, half; // this thread's tile of a step, its k16 row (0, 1)
  long long col;  // tileIndex's column part; -1 past the matrix
  __device__ __forceinline__ void init(int n0, int out, TileStrides st) {
    tile = threadIdx.x >> 3;
    half = tile / kWide;
    const int j = (n0 >> 4) + tile % kWide;
    col = j < out / 16 ? (long long)(j >> 3) * st.sJ8 + (j & 7) : -1;
  }
  /// Step k of the matrix at tw (width K) into the ring slot dst.
  __device__ __forceinline__ void copy(u32 *dst, const u32 *tw, int k, int K,
                                       TileStrides st) const {
    if (col < 0)
      return;
    const int i = 2 * k + half, sub = threadIdx.x & 7;
    const long long idx =
        (long long)(i >> 3) * st.sI8 + (long long)(i & 7) * st.sI + col;
    const u32 *src = tw + idx * (8 * K) + 4 * sub;
    u32 *d = dst + tile * (8 * K) + 4 * sub;
    if (sub < 2 * K)
      cpAsync16(d, src);
    if (K > 4 && sub + 8 < 2 * K)
      cpAsync16(d + 32, src + 32);
  }
};

/// xh rows staged for the MMAs: each thread's 8-element chunks of a BM x 32
/// step (fixed rows over the steps), read to registers (fp16 pairs, zero
/// beyond m) a step ahead, then stored to shared memory (padded rows).
template <int BM, int THREADS> struct XStage {
  static constexpr int kPitch = kGemmXPitch;
  static constexpr int kChunks = BM * 32 / 8 / THREADS;
  long long row[kChunks]; // element offset of the row, -1 beyond m
  u32 r[kChunks][4];
  __device__ __forceinline__ void init(const int *__restrict__ row_map, int m0,
                                       int m, int x_stride) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int rr = m0 + ((threadIdx.x + c * THREADS) >> 2);
      row[c] = rr < m ? (long long)(row_map ? row_map[rr] : rr) * x_stride : -1;
    }
  }
  /// Columns col0 .. col0 + 31 of the rows (fp32 storage rounds to fp16).
  template <int XT>
  __device__ __forceinline__ void load(const void *__restrict__ xh,
                                       long long col0) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int col = ((threadIdx.x + c * THREADS) & 3) * 8;
      if (row[c] >= 0) {
        const long long off = row[c] + col0 + col;
        if (XT == 1) {
          const uint4 v = *reinterpret_cast<const uint4 *>(
              static_cast<const __half *>(xh) + off);
          r[c][0] = v.x, r[c][1] = v.y, r[c][2] = v.z, r[c][3] = v.w;
        } else {
          const float4 *p = reinterpret_cast<const float4 *>(
              static_cast<const float *>(xh) + off);
          const float4 a = p[0], b = p[1];
          r[c][0] = packHalf2(a.x, a.y), r[c][1] = packHalf2(a.z, a.w);
          r[c][2] = packHalf2(b.x, b.y), r[c][3] = packHalf2(b.z, b.w);
        }
      } else {
        r[c][0] = r[c][1] = r[c][2] = r[c][3] = 0u;
      }
    }
  }
  __device__ __forceinline__ void store(__half (*sx)[kPitch]) const {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int chunk = threadIdx.x + c * THREADS;
      *reinterpret_cast<uint4 *>(&sx[chunk >> 2][(chunk & 3) * 8]) =
          make_uint4(r[c][0], r[c][1], r[c][2], r[c][3]);
    }
  }
};

/// The warp's MMAs of one k16 half (kk) of a step: BM rows of staged xh
/// (ldmatrix) times its two decoded tiles b[0], b[1] (4 n8 columns).
template <int BM, int PITCH>
__device__ __forceinline__ void mmaK16(float (&acc)[BM / 16][4][4],
                                       __half (*sx)[PITCH], int kk,
                                       const uint4 b[2], int lane) {
#pragma unroll
  for (int mt = 0; mt < BM / 16; ++mt) {
    u32 a[4];
    ldmatrixX4(a, &sx[mt * 16 + (lane & 15)][kk * 16 + (lane >> 4) * 8]);
    mma16816(acc[mt][0], a, b[0].x, b[0].y);
    mma16816(acc[mt][1], a, b[0].z, b[0].w);
    mma16816(acc[mt][2], a, b[1].x, b[1].y);
    mma16816(acc[mt][3], a, b[1].z, b[1].w);
  }
}

template <int K, int CB, bool E4M3, int XT, int BM, int THREADS>
__device__ __forceinline__ void
gemmTrellisMainloop(const void *__restrict__ xh,
                    const int *__restrict__ row_map,
                    const unsigned char *__restrict__ tiles, int m, int in,
                    int out, int x_stride, TileStrides st, int m0, int n0,
                    unsigned char *smem, TileAcc<BM> &tacc) {
  static_assert(K >= 1 && K <= 8, "K in 1..8");
  static_assert(CB >= 0 && CB <= 2, "codebook");
  static_assert(XT == 0 || XT == 1, "xh storage: f32 or f16");
  static_assert(BM == 64 || BM == 96 || BM == 128, "BM: 64, 96 or 128 tokens");
  static_assert(BM * 4 % THREADS == 0, "BM x 32 inputs in whole 8-value "
                                       "chunks a thread (bm 96: 128 threads)");
  static_assert(THREADS == 128 || THREADS == 256, "4 or 8 warps");
  typedef GemmSmem<K, BM, THREADS> L;
  typedef XStage<BM, THREADS> XS;
  constexpr int BK = 32;             // inputs per step
  constexpr int kTileWords = 8 * K;  // u32 per tile
  constexpr int kWide = L::kBN / 16; // tile columns per block
  constexpr int kStepWords = L::kStepWords;
  constexpr int NSTAGE = L::kStages;
  constexpr int NAHEAD = NSTAGE - 1; // steps in flight

  u32(*sWords)[kStepWords] = reinterpret_cast<u32(*)[kStepWords]>(smem);
  __half(*sX)[BM][XS::kPitch] =
      reinterpret_cast<__half(*)[BM][XS::kPitch]>(smem + L::kWordsBytes);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nk = in / BK;
  const u32 *tw = reinterpret_cast<const u32 *>(tiles);

  // Trellis words of step k into ring slot k % NSTAGE (one commit group).
  WordCopy<THREADS> wc;
  wc.init(n0, out, st);
  auto loadWords = [&](int k) {
    if (k < nk)
      wc.copy(sWords[k % NSTAGE], tw, k, K, st);
    cpAsyncCommit();
  };
  XS xs;
  xs.init(row_map, m0, m, x_stride);
  // This warp's two tiles of k16 half kk of step k -> B fragments.
  const LaneMap<K> lm(lane);
  auto decode = [&](int k, int kk, uint4 b[2]) {
    const u32 *src = sWords[k % NSTAGE] + (kk * kWide + 2 * warp) * kTileWords;
    b[0] = decodeLaneFrag<K, CB, E4M3>(src, lm);
    b[1] = decodeLaneFrag<K, CB, E4M3>(src + kTileWords, lm);
  };

  // Prologue: NAHEAD steps of words in flight, xh of step 0, fragments of
  // step 0's first k16 half.
#pragma unroll
  for (int s = 0; s < NAHEAD; ++s)
    loadWords(s);
  xs.template load<XT>(xh, 0);
  xs.store(sX[0]);
  cpAsyncWait<NAHEAD - 1>(); // step 0 landed
  __syncthreads();
  uint4 bcur[2], bnext[2];
  decode(0, 0, bcur);

  for (int k = 0; k < nk; ++k) {
    const int buf = k & 1;
    cpAsyncWait<NAHEAD - 2 < 0 ? 0 : NAHEAD - 2>(); // step k + 1 landed
    __syncthreads();       // sX[buf] stored; slot (k-1) and sX[buf^1] free
    loadWords(k + NAHEAD); // into slot (k - 1) % NSTAGE
    const bool more = k + 1 < nk;
    if (more)
      xs.template load<XT>(xh, (long long)(k + 1) * BK);
    decode(k, 1, bnext);
    mmaK16<BM>(tacc.v, sX[buf], 0, bcur, lane);
    if (more)
      decode(k + 1, 0, bcur);
    mmaK16<BM>(tacc.v, sX[buf], 1, bnext, lane);
    if (more)
      xs.store(sX[buf ^ 1]);
  }
  cpAsyncWait<0>();
  __syncthreads(); // the ring and sX free for the next mainloop
}

/// Epilogue: n8 tile nt of warp w = columns n0 + 32w + 8nt; c0,c1 at row
/// lane/4, c2,c3 at row lane/4 + 8 (rows >= m not written).
template <int BM, int THREADS>
__device__ __forceinline__ void
gemmTrellisStore(const TileAcc<BM> &tacc, float *__restrict__ z, int m, int out,
                 int z_stride, int accumulate, int m0, int n0) {
  constexpr int MT = BM / 16;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float(&acc)[MT][4][4] = tacc.v;
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
__device__ __forceinline__ void
gemmTrellisTile(const void *__restrict__ xh, const int *__restrict__ row_map,
                const unsigned char *__restrict__ tiles, float *__restrict__ z,
                int m, int in, int out, int x_stride, int z_stride,
                int accumulate, TileStrides st, int m0, int n0,
                unsigned char *smem) {
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
