// gemm_dense.cuh - prefill GEMM y = x . W^T on tensor cores for the BF16
// and FP8 dense weight formats, a drop-in for dense_gemv over many tokens.
//
// ABI: dense_gemv's runtime parameters, same names, order and meaning
// (dense_gemv.cuh): x fp32 [batch][in] (rows at stride in), W [out][in]
// row-major (bf16 or E4M3), its scale, y fp32 rows at stride out_stride,
// y = result or y + result when accumulate != 0; `batch` is the token count
// m (any value: no template bound). Formats (exlr8-format.md §6,
// dense_gemv's codes): 0 BF16 (no scale; `scale` is not read); 1 FP8
// block-128 (scale SC [ceil(out/128)][ceil(in/128)]); 2 FP8 per row (scale
// SC [out]); 3 MXFP8 (e8m0 bytes [out][in/32], W = e4m3 * 2^(e - 127); the
// rows must be 4-byte aligned, as the planner's 16-byte alignment gives).
// SC = the `scale` template storage (f32, f16, bf16).
//
// `window`, after dense_gemv's parameters: null, or int32 {first, last}
// (empty if first > last), the rows whose outputs the caller will read (a prefill chunk's LM head:
// io.logit_rows, which the runtime writes; only the prompt's last row
// unless every row's logits are asked for). Row blocks wholly outside it
// return at once and leave y's rows there as they were.
//
// Grid (ceil(out / BN), ceil(batch / BM)), BN = 64 * THREADS / BM
// (gemmDenseBlockCols, codegen/gemm_dense_abi.h): bm 64 -> BN = THREADS,
// bm 128 -> BN = THREADS / 2. Warps form a (BM/64) x (BN/32) grid, warp
// tile 64 tokens x 32 outputs. Requires in % 128 == 0; any out (a ragged
// last column block is masked) and any batch.
//
// Numerics, FP8: each x element enters the tensor cores as an fp16 hi + lo
// pair (hi = fp16(x), lo = fp16(x - hi): ~22 bits; |x| < 65504, and
// elements below 2^-14 keep an absolute 2^-24 only), E4M3 weights are exact
// fp16, so both mma.sync.m16n8k16 products are exact and summed in fp32.
// Scales as exact as the format allows: FP8 row y = acc * scale[o] after
// the k loop; FP8 block: each 128-input block's partial in its own fp32
// accumulator, acc = fma(part, scale[o/128][i/128], acc); MXFP8: each
// 32-input group's partial times 2^(e - 127) (exact), added to acc.
// Numerics, BF16: bf16 weights are not exact fp16 (8 exponent bits), so
// both operands are bf16: x enters as three planes hi = bf16(x), mid =
// bf16(x - hi), lo = bf16(x - hi - mid), each rounded to nearest and each
// difference exact in fp32. Three 8-bit pieces hold x's 24-bit significand,
// so hi + mid + lo == x (down to |x| = 2^-110; below it lo sits on bf16's
// subnormal grid, 2^-133), the three products with a weight are exact, and
// fp32 sums are the only rounding: each 128-input block's products in its
// own fp32 partial (hi, mid, lo MMAs of each 16 inputs in turn, the tensor
// cores' sum order), acc += part, y = acc, no scale. The router's top-k
// needs near-fp32 logits: FP8 row's one accumulator over 6144 inputs is
// 1.6e-5 off its twin on the H200, the grouped formats within 1e-5.
// runtime/twins gemm_dense_twin.cpp computes the same partials in fp64 from
// the same planes.
//
// Pipeline: a step is 32 weight bytes of each of the block's BN rows
// (GemmDenseLayout::kRowBytes: 32 FP8 or 16 BF16 inputs), which arrive by
// cp.async (a 3-4 step ring, with MXFP8's exponents of each 128-input
// block); x of the next step is loaded to registers during this step's
// MMAs and stored split (fp16 hi, lo or bf16 hi, mid, lo planes) to a
// double buffer. Inputs inside a step are permuted (the same for x and W,
// so the sums are unchanged): FP8, a lane's 8 consecutive inputs 8c..8c+7
// are its k = 2c, 2c+1, 2c+8, 2c+9 of two k16 MMAs, so its x fragments are
// two 16-byte and its weights one 8-byte shared-memory load; BF16, its 4
// inputs 4c..4c+3 are those k of one k16 MMA, 8-byte loads of x and W (no
// ldmatrix either way). mma.sync + cp.async only (the Sparks lack wgmma);
// static shared memory <= 45 KB, no spills (ptxas sm_90: FP8 130-240
// registers, the most at bm 128 x 128 threads MXFP8; BF16 167-211).
//
// Expected cost (not measured yet): weight bytes are read once per BM
// tokens (dense_gemv at batch 8: once per 8), and each block does
// 2 x BM x BN x 32 MMA work per 32 x BN weight bytes (BF16: 3 x BM x BN x
// 16), so a 512-token chunk is tensor-core bound: the LM head 6144 ->
// 151552 at m = 512 is ~1.9 fp16 TFLOP (hi + lo), a few ms at mma.sync
// rates on the H200 (64 dense_gemv launches: 227 ms).
#pragma once

#include "dense_gemv.cuh"
#include "gemm_trellis.cuh"

#define GLM_GEMM_DENSE_PARAMS                                                  \
  const float *__restrict__ x, const void *__restrict__ w,                     \
      const void *__restrict__ scale, float *__restrict__ y, int batch,        \
      int in, int out, int out_stride, int accumulate,                         \
      const int *__restrict__ window
#define GLM_GEMM_DENSE_ARGS                                                    \
  x, w, scale, y, batch, in, out, out_stride, accumulate, window

namespace glm {

/// Whether rows m0 .. m0 + bm - 1 meet the caller's window (null: all).
__device__ __forceinline__ bool gemmDenseRowsWanted(const int *window, int m0,
                                                    int bm) {
  return !window ||
         (window[0] <= window[1] && m0 <= window[1] && m0 + bm > window[0]);
}

/// Block shape and shared memory of gemm_dense: warps (BM/64) x (BN/32),
/// BN = 64 * THREADS / BM output columns. A step moves kRowBytes of each
/// weight row whatever the format, so the cp.async ring is the same bytes;
/// kWeightBytes (the one place the formats differ in size) sets the inputs
/// a step covers, and with them the x planes' size.
template <int FMT, int BM, int THREADS> struct GemmDenseLayout {
  static constexpr int kWeightBytes = FMT == kFmtBf16 ? 2 : 1;
  static constexpr int kRowBytes = 32; // two 16-byte copies a row
  static constexpr int kBK = kRowBytes / kWeightBytes;    // inputs per step
  static constexpr int kPlanes = FMT == kFmtBf16 ? 3 : 2; // x, 2-byte planes
  static constexpr int kWarps = THREADS / 32;
  static constexpr int kWarpsM = BM / 64;
  static constexpr int kWarpsN = kWarps / kWarpsM;
  static constexpr int kBN = 32 * kWarpsN;
  static constexpr int kXBytes = 2 * kPlanes * BM * kBK * 2; // 2 buffers
  static constexpr int kEBytes = FMT == kFmtMxfp8 ? 2 * kBN * 4 : 0;
  static constexpr int kStages =
      kXBytes + kEBytes + 4 * kBN * kRowBytes <= 45 * 1024 ? 4 : 3;
};

/// d = a . b (+ 0): the first MMA of a fresh partial sum.
__device__ __forceinline__ void mma16816Zero(float d[4], const u32 a[4], u32 b0,
                                             u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
                 "f"(0.0f));
}

/// Two E4M3 bytes (low 16 bits of v) -> their exact fp16 pair.
__device__ __forceinline__ u32 e4m3x2ToHalf2(u32 v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(v & 0xFFFFu), __NV_E4M3);
  return *reinterpret_cast<const u32 *>(&h);
}

/// 2^(e - 127) exactly, e an e8m0 byte (0 -> 2^-127, a subnormal).
__device__ __forceinline__ float e8m0Scale(u32 e) {
  return __int_as_float(e ? int(e << 23) : 0x00400000);
}

/// c += a . b on bf16 operands, fp32 accumulator.
__device__ __forceinline__ void mma16816Bf16(float c[4], const u32 a[4], u32 b0,
                                             u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// An fp32 pair -> bf16x2 planes with hi + mid + lo == (a, b): each plane
/// rounds to nearest what the planes before it left, and those differences
/// are exact in fp32 (the file header's BF16 numerics).
__device__ __forceinline__ void splitBf16x3(float a, float b, u32 &hi, u32 &mid,
                                            u32 &lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  const float2 fh = __bfloat1622float2(h);
  const float ra = a - fh.x, rb = b - fh.y;
  const __nv_bfloat162 m = __floats2bfloat162_rn(ra, rb);
  const float2 fm = __bfloat1622float2(m);
  const __nv_bfloat162 l = __floats2bfloat162_rn(ra - fm.x, rb - fm.y);
  hi = *reinterpret_cast<const u32 *>(&h);
  mid = *reinterpret_cast<const u32 *>(&m);
  lo = *reinterpret_cast<const u32 *>(&l);
}

/// Weight rows n0.. of step k (L::kRowBytes each) into one ring slot, two
/// 16-byte copies a row; rows past out are skipped (their columns are never
/// stored). The caller commits the group.
template <class L, int THREADS>
__device__ __forceinline__ void gemmDenseLoadW(u8 (*slot)[L::kRowBytes],
                                               const u8 *w, int n0, int out,
                                               int in, int k) {
  static_assert(L::kRowBytes == 32, "a row's step is two 16-byte copies");
  constexpr int WCHUNKS = L::kBN * L::kRowBytes / 16 / THREADS;
#pragma unroll
  for (int i = 0; i < WCHUNKS; ++i) {
    const int ch = threadIdx.x + i * THREADS, row = ch >> 1;
    const int half = ch & 1;
    if (n0 + row < out)
      cpAsync16(
          &slot[row][16 * half],
          w + ((long long)(n0 + row) * in + k * L::kBK) * L::kWeightBytes +
              16 * half);
  }
}

/// Epilogue: the warp's (64,32) accumulator tile to y rows row0.. and
/// columns nw.. (times the FP8-per-row scales). n8 tile nt = columns
/// nw + 8nt + 2c (+1); c0,c1 at row g, c2,c3 at row g + 8.
template <int FMT, int SCT>
__device__ __forceinline__ void
gemmDenseStore(const float (&acc)[4][4][4], const void *__restrict__ scale,
               float *__restrict__ y, int batch, int out, int out_stride,
               int accumulate, int row0, int nw, int g, int c) {
  typedef typename StorageOf<SCT>::type SC;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int col = nw + 8 * nt + 2 * c;
    if (col >= out)
      continue;
    const bool two = col + 1 < out;
    float s0 = 1.0f, s1 = 1.0f;
    if (FMT == kFmtFp8Row) {
      const SC *sp = static_cast<const SC *>(scale);
      s0 = toFloat<SC>(sp[col]);
      s1 = two ? toFloat<SC>(sp[col + 1]) : 0.0f;
    }
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = row0 + 16 * mt + g + 8 * hr;
        if (row >= batch)
          continue;
        float *p = y + (long long)row * out_stride + col;
        const float v0 = acc[mt][nt][2 * hr] * s0;
        p[0] = accumulate ? p[0] + v0 : v0;
        if (two) {
          const float v1 = acc[mt][nt][2 * hr + 1] * s1;
          p[1] = accumulate ? p[1] + v1 : v1;
        }
      }
  }
}

template <int FMT, int SCT, int BM, int THREADS>
__device__ __forceinline__ void gemmDenseFp8(GLM_GEMM_DENSE_PARAMS) {
  // Preconditions.
  static_assert(FMT == kFmtFp8Block || FMT == kFmtFp8Row || FMT == kFmtMxfp8,
                "format: fp8_block, fp8_row or mxfp8");
  static_assert(SCT >= 0 && SCT <= 2, "scale storage f32, f16, bf16");
  static_assert(BM == 64 || BM == 128, "BM: 64 or 128 tokens");
  static_assert(THREADS == 128 || THREADS == 256, "4 or 8 warps");
  typedef GemmDenseLayout<FMT, BM, THREADS> L;
  typedef typename StorageOf<SCT>::type SC;
  constexpr int BK = L::kBK, BN = L::kBN, NSTAGE = L::kStages;
  constexpr int NAHEAD = NSTAGE - 1;             // steps in flight
  constexpr int MT = 4, NT = 4;                  // warp tile (64, 32)
  constexpr int XCHUNKS = BM * BK / 8 / THREADS; // 8 x values per chunk
  constexpr int WCHUNKS = BN * L::kRowBytes / 16 / THREADS; // 16 bytes
  constexpr bool kMx = FMT == kFmtMxfp8, kBlk = FMT == kFmtFp8Block;
  static_assert(BK == L::kRowBytes, "one byte a weight");
  static_assert(BN <= THREADS && XCHUNKS >= 1 && WCHUNKS >= 1, "tiling");
  static_assert(BN % 32 == 0 && 128 % 32 == 0, "a warp's 32 columns share "
                                               "one 128-block scale");

  __shared__ __align__(16) u8 sW[NSTAGE][BN][BK]; // (BN,BK) per step
  __shared__ __align__(16) __half sXh[2][BM][BK]; // (BM,BK) x hi
  __shared__ __align__(16) __half sXl[2][BM][BK]; // (BM,BK) x lo
  __shared__ __align__(16) u32 sE[kMx ? 2 : 1][kMx ? BN : 1]; // e8m0 x4

  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  if (m0 >= batch || n0 >= out || !gemmDenseRowsWanted(window, m0, BM))
    return; // a grid rounded up by the caller, or rows nobody reads
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = warp / L::kWarpsN, wn = warp % L::kWarpsN;
  const int g = lane >> 2, c = lane & 3;
  const int nk = in / BK;
  const u8 *wb = static_cast<const u8 *>(w);
  const u8 *eb = static_cast<const u8 *>(scale);

  // Weights of step k into ring slot k % NSTAGE (one commit group); at a
  // 128-input block start MXFP8's 4 exponents per column too (2 slots).
  auto loadW = [&](int k) {
    if (k < nk) {
      gemmDenseLoadW<L, THREADS>(sW[k % NSTAGE], wb, n0, out, in, k);
      if (kMx && (k & 3) == 0 && threadIdx.x < BN &&
          n0 + int(threadIdx.x) < out)
        cpAsync4(&sE[(k >> 2) & 1][threadIdx.x],
                 eb + (long long)(n0 + threadIdx.x) * (in / 32) + k);
    }
    cpAsyncCommit();
  };
  // x of step k -> registers, zero beyond batch.
  float4 xr[XCHUNKS][2];
  auto loadX = [&](int k) {
#pragma unroll
    for (int i = 0; i < XCHUNKS; ++i) {
      const int ch = threadIdx.x + i * THREADS;
      const int r = m0 + (ch >> 2), col = (ch & 3) * 8;
      if (r < batch) {
        const float4 *p = reinterpret_cast<const float4 *>(
            x + (long long)r * in + k * BK + col);
        xr[i][0] = p[0], xr[i][1] = p[1];
      } else {
        xr[i][0] = xr[i][1] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
  };
  // Registers -> hi and lo planes of buffer buf.
  auto storeX = [&](int buf) {
#pragma unroll
    for (int i = 0; i < XCHUNKS; ++i) {
      const int ch = threadIdx.x + i * THREADS;
      const int row = ch >> 2, col = (ch & 3) * 8;
      const float v[8] = {xr[i][0].x, xr[i][0].y, xr[i][0].z, xr[i][0].w,
                          xr[i][1].x, xr[i][1].y, xr[i][1].z, xr[i][1].w};
      u32 h[4], l[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const __half2 hh = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
        const float2 f = __half22float2(hh);
        const __half2 ll =
            __floats2half2_rn(v[2 * j] - f.x, v[2 * j + 1] - f.y);
        h[j] = *reinterpret_cast<const u32 *>(&hh);
        l[j] = *reinterpret_cast<const u32 *>(&ll);
      }
      *reinterpret_cast<uint4 *>(&sXh[buf][row][col]) =
          make_uint4(h[0], h[1], h[2], h[3]);
      *reinterpret_cast<uint4 *>(&sXl[buf][row][col]) =
          make_uint4(l[0], l[1], l[2], l[3]);
    }
  };

  float acc[MT][NT][4];
  float part[kMx || kBlk ? MT : 1][NT][4]; // a block's / group's partial
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        acc[i][j][r] = 0.0f;

  // One step: the warp's (64,32) tile over 32 inputs, hi then lo. fresh:
  // the first MMA of each (mt, nt) starts a new partial.
  auto step = [&](int k, int buf, bool fresh) {
    u32 b[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint2 q = *reinterpret_cast<const uint2 *>(
          &sW[k % NSTAGE][32 * wn + 8 * nt + g][8 * c]);
      b[nt][0] = e4m3x2ToHalf2(q.x), b[nt][1] = e4m3x2ToHalf2(q.x >> 16);
      b[nt][2] = e4m3x2ToHalf2(q.y), b[nt][3] = e4m3x2ToHalf2(q.y >> 16);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int row = 64 * wm + 16 * mt + g;
      const uint4 h0 = *reinterpret_cast<const uint4 *>(&sXh[buf][row][8 * c]);
      const uint4 h1 =
          *reinterpret_cast<const uint4 *>(&sXh[buf][row + 8][8 * c]);
      const uint4 l0 = *reinterpret_cast<const uint4 *>(&sXl[buf][row][8 * c]);
      const uint4 l1 =
          *reinterpret_cast<const uint4 *>(&sXl[buf][row + 8][8 * c]);
      const u32 hA[4] = {h0.x, h1.x, h0.y, h1.y},
                hB[4] = {h0.z, h1.z, h0.w, h1.w};
      const u32 lA[4] = {l0.x, l1.x, l0.y, l1.y},
                lB[4] = {l0.z, l1.z, l0.w, l1.w};
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        float *d = kMx || kBlk ? part[kMx || kBlk ? mt : 0][nt] : acc[mt][nt];
        if ((kMx || kBlk) && fresh)
          mma16816Zero(d, hA, b[nt][0], b[nt][1]);
        else
          mma16816(d, hA, b[nt][0], b[nt][1]);
        mma16816(d, hB, b[nt][2], b[nt][3]);
        mma16816(d, lA, b[nt][0], b[nt][1]);
        mma16816(d, lB, b[nt][2], b[nt][3]);
      }
    }
  };

  // Prologue: NAHEAD steps of weights in flight, x of step 0 stored.
#pragma unroll
  for (int s = 0; s < NAHEAD; ++s)
    loadW(s);
  loadX(0);
  storeX(0);
  const long long nBlkIn = in >> 7;
  const int nw = n0 + 32 * wn; // the warp's first column
  float blkScale = 0.0f;
  for (int k = 0; k < nk; ++k) {
    const int buf = k & 1;
    cpAsyncWait<NAHEAD - 1>(); // step k landed
    __syncthreads(); // sX[buf] stored; slot (k - 1) and sX[buf ^ 1] free
    loadW(k + NAHEAD);
    const bool more = k + 1 < nk;
    if (more)
      loadX(k + 1);
    if (kBlk && (k & 3) == 0 && nw < out)
      blkScale = toFloat<SC>(static_cast<const SC *>(
          scale)[(long long)(nw >> 7) * nBlkIn + (k >> 2)]);
    step(k, buf, kMx || (k & 3) == 0);
    if (kMx) {
      // The group's partial times its columns' 2^(e - 127) (exact).
      const int sh = 8 * (k & 3);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint2 ev = *reinterpret_cast<const uint2 *>(
            &sE[(k >> 2) & 1][32 * wn + 8 * nt + 2 * c]);
        const float p0 = e8m0Scale((ev.x >> sh) & 0xFFu);
        const float p1 = e8m0Scale((ev.y >> sh) & 0xFFu);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          acc[mt][nt][0] = fmaf(part[mt][nt][0], p0, acc[mt][nt][0]);
          acc[mt][nt][1] = fmaf(part[mt][nt][1], p1, acc[mt][nt][1]);
          acc[mt][nt][2] = fmaf(part[mt][nt][2], p0, acc[mt][nt][2]);
          acc[mt][nt][3] = fmaf(part[mt][nt][3], p1, acc[mt][nt][3]);
        }
      }
    } else if (kBlk && (k & 3) == 3) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            acc[mt][nt][r] =
                fmaf(part[kBlk ? mt : 0][nt][r], blkScale, acc[mt][nt][r]);
    }
    if (more)
      storeX(buf ^ 1);
  }
  cpAsyncWait<0>();

  gemmDenseStore<FMT, SCT>(acc, scale, y, batch, out, out_stride, accumulate,
                           m0 + 64 * wm, nw, g, c);
}

/// BF16 weights: the FP8 pipeline at 16 inputs a step, x as three bf16
/// planes (the file header), no scale.
template <int BM, int THREADS>
__device__ __forceinline__ void gemmDenseBf16(GLM_GEMM_DENSE_PARAMS) {
  // Preconditions.
  static_assert(BM == 64 || BM == 128, "BM: 64 or 128 tokens");
  static_assert(THREADS == 128 || THREADS == 256, "4 or 8 warps");
  typedef GemmDenseLayout<kFmtBf16, BM, THREADS> L;
  constexpr int BK = L::kBK, BN = L::kBN, NSTAGE = L::kStages;
  constexpr int NAHEAD = NSTAGE - 1;             // steps in flight
  constexpr int MT = 4, NT = 4;                  // warp tile (64, 32)
  constexpr int XCHUNKS = BM * BK / 4 / THREADS; // one float4 a chunk
  constexpr int GSTEPS = 128 / BK;               // steps of a partial sum
  static_assert(BK == 16 && L::kPlanes == 3, "one k16 MMA a step, 3 planes");
  static_assert(BN <= THREADS && XCHUNKS >= 1, "tiling");
  (void)scale; // BF16 has none

  __shared__ __align__(16) u8 sW[NSTAGE][BN][L::kRowBytes]; // (BN,BK) bf16
  __shared__ __align__(16) __nv_bfloat16 sX[2][3][BM][BK];  // (BM,BK) planes

  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  if (m0 >= batch || n0 >= out || !gemmDenseRowsWanted(window, m0, BM))
    return; // a grid rounded up by the caller, or rows nobody reads
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = warp / L::kWarpsN, wn = warp % L::kWarpsN;
  const int g = lane >> 2, c = lane & 3;
  const int nk = in / BK;
  const u8 *wb = static_cast<const u8 *>(w);

  // Weights of step k into ring slot k % NSTAGE (one commit group).
  auto loadW = [&](int k) {
    if (k < nk)
      gemmDenseLoadW<L, THREADS>(sW[k % NSTAGE], wb, n0, out, in, k);
    cpAsyncCommit();
  };
  // x of step k -> registers, zero beyond batch.
  float4 xr[XCHUNKS];
  auto loadX = [&](int k) {
#pragma unroll
    for (int i = 0; i < XCHUNKS; ++i) {
      const int ch = threadIdx.x + i * THREADS;
      const int r = m0 + (ch >> 2), col = (ch & 3) * 4;
      xr[i] = r < batch ? *reinterpret_cast<const float4 *>(
                              x + (long long)r * in + k * BK + col)
                        : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  // Registers -> hi, mid and lo planes of buffer buf.
  auto storeX = [&](int buf) {
#pragma unroll
    for (int i = 0; i < XCHUNKS; ++i) {
      const int ch = threadIdx.x + i * THREADS;
      const int row = ch >> 2, col = (ch & 3) * 4;
      u32 p[3][2];
      splitBf16x3(xr[i].x, xr[i].y, p[0][0], p[1][0], p[2][0]);
      splitBf16x3(xr[i].z, xr[i].w, p[0][1], p[1][1], p[2][1]);
#pragma unroll
      for (int pl = 0; pl < 3; ++pl)
        *reinterpret_cast<uint2 *>(&sX[buf][pl][row][col]) =
            make_uint2(p[pl][0], p[pl][1]);
    }
  };

  float acc[MT][NT][4], part[MT][NT][4]; // part: a 128-input block's sum
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        acc[i][j][r] = 0.0f;

  // One step into part: the warp's (64,32) tile over 16 inputs, hi, mid
  // then lo. A lane's inputs 4c..4c+3 are k = 2c, 2c+1 (b0), 2c+8, 2c+9 (b1).
  auto step = [&](int k, int buf) {
    u32 b[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint2 q = *reinterpret_cast<const uint2 *>(
          &sW[k % NSTAGE][32 * wn + 8 * nt + g][8 * c]);
      b[nt][0] = q.x, b[nt][1] = q.y;
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int row = 64 * wm + 16 * mt + g;
#pragma unroll
      for (int pl = 0; pl < 3; ++pl) {
        const uint2 r0 =
            *reinterpret_cast<const uint2 *>(&sX[buf][pl][row][4 * c]);
        const uint2 r1 =
            *reinterpret_cast<const uint2 *>(&sX[buf][pl][row + 8][4 * c]);
        const u32 a[4] = {r0.x, r1.x, r0.y, r1.y};
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          mma16816Bf16(part[mt][nt], a, b[nt][0], b[nt][1]);
      }
    }
  };

  // Prologue: NAHEAD steps of weights in flight, x of step 0 stored.
#pragma unroll
  for (int s = 0; s < NAHEAD; ++s)
    loadW(s);
  loadX(0);
  storeX(0);
  for (int k = 0; k < nk; ++k) {
    const int buf = k & 1;
    cpAsyncWait<NAHEAD - 1>(); // step k landed
    __syncthreads(); // sX[buf] stored; slot (k - 1) and sX[buf ^ 1] free
    loadW(k + NAHEAD);
    const bool more = k + 1 < nk;
    if (more)
      loadX(k + 1);
    // 128-input partials, added to acc: a shorter fp32 chain than one
    // accumulator over every input (FP8 block's grouping, scale 1).
    if (k % GSTEPS == 0)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            part[mt][nt][r] = 0.0f;
    step(k, buf);
    if (k % GSTEPS == GSTEPS - 1)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            acc[mt][nt][r] += part[mt][nt][r];
    if (more)
      storeX(buf ^ 1);
  }
  cpAsyncWait<0>();

  gemmDenseStore<kFmtBf16, 0>(acc, nullptr, y, batch, out, out_stride,
                              accumulate, m0 + 64 * wm, n0 + 32 * wn, g, c);
}

/// The family's entry: BF16 and FP8 share the ABI, grid and block tile.
template <int FMT, int SCT, int BM, int THREADS>
__device__ __forceinline__ void gemmDense(GLM_GEMM_DENSE_PARAMS) {
  if constexpr (FMT == kFmtBf16)
    gemmDenseBf16<BM, THREADS>(GLM_GEMM_DENSE_ARGS);
  else
    gemmDenseFp8<FMT, SCT, BM, THREADS>(GLM_GEMM_DENSE_ARGS);
}

} // namespace glm
