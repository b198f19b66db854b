//===- executor_kernels.cpp - the executor's batched helper kernels -------===//
//
// The CUDA executor's small kernels that have no codegen family (fp32
// activations, fp64 sums where the CPU reference sums in fp64; block sums
// in a fixed order, so results are the same bits run to run): embedding of
// any stored dtype, norms, the latent/index-key cache stores with RoPE, DSA
// scores and selection, absorbed MLA attention over the selected rows
// (fp32 products with lanes over contiguous columns, fp64 softmax),
// routing, SwiGLU of dense MLPs and of unquantized (HF) experts, and the
// glue of batching and tensor parallelism (adds, one-hot columns, vocab
// gather, random fill for the synthetic benchmark).
//
// Every kernel takes the batch row from blockIdx.y (or z) and reads the
// row's position and cache slot from device memory, and loops over the
// context length read there: launch shapes never depend on the position,
// so one captured CUDA graph per batch size replays for every step.
// Compiled with --fmad=false so the fp64 parts equal the CPU reference's.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/executor.h"

namespace glm::rt::cuda {

const char *executorKernelSource() {
  return R"CUDA(
#define GLM_X extern "C" __global__ void

// Stored element -> float, by bits (NVRTC here has no CUDA include path).
// dt: 0 f32, 1 f16, 2 bf16, 3 e4m3.
// Both decoders place the magnitude bits in an fp32's exponent/mantissa and
// rescale by the bias difference (2^112, 2^120): exact for normals and
// subnormals (no ftz), a handful of integer ops instead of ldexpf.
__device__ __forceinline__ float halfBits(unsigned short h) {
  const unsigned mag = h & 0x7fffu;
  float v = __uint_as_float(mag << 13) * __uint_as_float(0x77800000u);
  if (mag >= 0x7c00u) // inf / NaN
    v = __int_as_float(mag > 0x7c00u ? 0x7fc00000 : 0x7f800000);
  return (h & 0x8000u) ? -v : v;
}
__device__ __forceinline__ float e4m3Bits(unsigned char b) {
  const unsigned mag = b & 0x7fu;
  float v = __uint_as_float(mag << 20) * __uint_as_float(0x7b800000u);
  if (mag == 0x7fu) // E4M3 has NaN only (S.1111.111)
    v = __int_as_float(0x7fc00000);
  return (b & 0x80u) ? -v : v;
}
__device__ __forceinline__ float ldAny(const void *p, long long i, int dt) {
  switch (dt) {
  case 0: return ((const float *)p)[i];
  case 1: return halfBits(((const unsigned short *)p)[i]);
  case 2: return __uint_as_float((unsigned)((const unsigned short *)p)[i] << 16);
  default: return e4m3Bits(((const unsigned char *)p)[i]);
  }
}

// x[b, :] = row tok[b] of the table (times the row scale for fp8 rows).
// Grid (ceil(d/256), B).
GLM_X glmx_embed(const void *table, int dt, const float *rowScale,
                 const int *tok, float *x, int d) {
  const int b = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= d)
    return;
  const long long t = tok[b];
  float v = ldAny(table, t * d + i, dt);
  if (rowScale)
    v *= rowScale[t];
  x[(long long)b * d + i] = v;
}

// Sum of every thread's v over the block in fp64, in a fixed tree order
// (deterministic; blockDim.x a power of two <= 1024). All threads get it.
__device__ double blockSumD(double v) {
  __shared__ double red[1024];
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s)
      red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const double r = red[0];
  __syncthreads();
  return r;
}

// Sum of every thread's v over the block in fp64 by shuffles: a butterfly
// in each warp, then the warp sums (in warp order) by a second butterfly.
// Every lane of a butterfly adds the same pairs, so every thread gets the
// same bits, run to run and block to block. blockDim.x a multiple of 32.
__device__ double blockSumFixedD(double v) {
  __shared__ double wsum[32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0)
    wsum[w] = v;
  __syncthreads();
  double s = lane < (int)(blockDim.x >> 5) ? wsum[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1)
    s += __shfl_xor_sync(0xffffffffu, s, o);
  __syncthreads(); // wsum is reused by the next call
  return s;
}

// y = w * x / sqrt(mean(x^2) + eps) per row b (strides in elements).
// Grid (G, B), blockDim.x a multiple of 32: every block sums the whole row
// (thread t: x[t + k*nt] for k = 0, 1, .. in order, then blockSumFixedD -
// the same bits in every block, so no second pass) and writes the elements
// t + k*nt with k % G == blockIdx.x. A single block is latency bound (~10
// us per 6144-wide row on the H200); G blocks of nt threads cut each
// thread's chain to K = ceil(n/nt) loads, all issued before any arithmetic.
// y may alias x only with G == 1 (blocks read the whole row).
#define kRmsPer 8
// One row of glmx_rms_norm / glmx_add_rms_norm. With `delta`, the row is
// x + delta (one float add per element) and each block also
// writes its elements of that sum to xout; xout must not alias x then
// (every block reads the whole row).
__device__ __forceinline__ void rmsNormRow(const float *xr, const float *dr,
                                           float *xo, const float *w,
                                           float *yr, int n, double eps) {
  const int t = threadIdx.x, nt = blockDim.x;
  const int G = gridDim.x, g = blockIdx.x;
  const int K = (n + nt - 1) / nt;
  if (K <= kRmsPer) {
    // Bit k: this block writes element t + k*nt (k % G == g, no division).
    unsigned own = 0;
    for (int k = g; k < K; k += G)
      own |= 1u << k;
    float xv[kRmsPer], wv[kRmsPer];
#pragma unroll
    for (int k = 0; k < kRmsPer; ++k) {
      const int i = t + k * nt;
      const bool in = k < K && i < n;
      xv[k] = in ? (dr ? xr[i] + dr[i] : xr[i]) : 0.0f;
      wv[k] = in && ((own >> k) & 1u) ? w[i] : 0.0f;
    }
    double ss = 0;
#pragma unroll
    for (int k = 0; k < kRmsPer; ++k)
      ss += (double)xv[k] * (double)xv[k];
    const double inv = 1.0 / sqrt(blockSumFixedD(ss) / (double)n + eps);
#pragma unroll
    for (int k = 0; k < kRmsPer; ++k) {
      const int i = t + k * nt;
      if (i < n && ((own >> k) & 1u)) {
        yr[i] = (float)((double)wv[k] * ((double)xv[k] * inv));
        if (dr)
          xo[i] = xv[k];
      }
    }
    return;
  }
  double ss = 0;
  for (int i = t; i < n; i += nt) {
    const float v = dr ? xr[i] + dr[i] : xr[i];
    ss += (double)v * (double)v;
  }
  const double inv = 1.0 / sqrt(blockSumFixedD(ss) / (double)n + eps);
  for (int i = t + g * nt; i < n; i += G * nt) {
    const float v = dr ? xr[i] + dr[i] : xr[i];
    yr[i] = (float)((double)w[i] * ((double)v * inv));
    if (dr)
      xo[i] = v;
  }
}

extern "C" __global__ void __launch_bounds__(1024)
glmx_rms_norm(const float *x, const float *w, float *y, int n,
                    double eps, int xs, int ys) {
  const int b = blockIdx.y;
  rmsNormRow(x + (long long)b * xs, nullptr, nullptr, w,
             y + (long long)b * ys, n, eps);
}

// The residual add and the next norm in one launch: xout = x + delta and
// y = rms_norm(xout) * w per row b (rows of n, stride n), bit for bit what
// x += delta followed by glmx_rms_norm gives. Grid (G, B) as glmx_rms_norm.
extern "C" __global__ void __launch_bounds__(1024)
glmx_add_rms_norm(const float *x, const float *delta, float *xout,
                  const float *w, float *y, int n, double eps) {
  const long long o = (long long)blockIdx.y * n;
  rmsNormRow(x + o, delta + o, xout + o, w, y + o, n, eps);
}

__device__ __forceinline__ void ropePair(float *p, int i, int dim, int pos,
                                         double theta) {
  double invFreq = pow(theta, -2.0 * (double)i / (double)dim);
  double angle = (double)pos * invFreq;
  double c = cos(angle), s = sin(angle);
  double a = p[2 * i], bb = p[2 * i + 1];
  p[2 * i] = (float)(a * c - bb * s);
  p[2 * i + 1] = (float)(bb * c + a * s);
}

// Interleaved RoPE on vector v (blockIdx.x) of row b (blockIdx.y):
// x + b*rowStride + v*stride, first `dim` values, at position pos[b].
GLM_X glmx_rope(float *x, int dim, int stride, int rowStride,
                const int *pos, double theta) {
  const int i = threadIdx.x;
  if (i >= dim / 2)
    return;
  float *p = x + (long long)blockIdx.y * rowStride +
             (long long)blockIdx.x * stride;
  ropePair(p, i, dim, pos[blockIdx.y], theta);
}

// Latent cache row of (seq[b], pos[b]): [rmsnorm(kva[:kvr]) | rope(kpe)].
// Grid (1, B).
GLM_X glmx_kv_store(const float *kva, const float *normW, float *cache,
                    const int *seq, const int *pos, int kvr, int dr,
                    int maxCtx, double eps, double theta) {
  const int b = blockIdx.y, lat = kvr + dr;
  const float *src = kva + (long long)b * lat;
  float *dst = cache + ((long long)seq[b] * maxCtx + pos[b]) * lat;
  double ss = 0;
  for (int i = threadIdx.x; i < kvr; i += blockDim.x)
    ss += (double)src[i] * (double)src[i];
  const double inv = 1.0 / sqrt(blockSumD(ss) / (double)kvr + eps);
  for (int i = threadIdx.x; i < kvr; i += blockDim.x)
    dst[i] = (float)((double)normW[i] * ((double)src[i] * inv));
  for (int i = threadIdx.x; i < dr; i += blockDim.x)
    dst[kvr + i] = src[kvr + i];
  __syncthreads();
  for (int i = threadIdx.x; i < dr / 2; i += blockDim.x)
    ropePair(dst + kvr, i, dr, pos[b], theta);
}

// Index key of row b: LayerNorm(k) (affine, eps 1e-6), RoPE on the first
// dr values, stored at (seq[b], pos[b]). Grid (1, B).
GLM_X glmx_index_key_store(const float *k, const float *w, const float *bias,
                           float *keys, const int *seq, const int *pos,
                           int hd, int dr, int maxCtx, double theta) {
  const int b = blockIdx.y;
  const float *x = k + (long long)b * hd;
  float *dst = keys + ((long long)seq[b] * maxCtx + pos[b]) * hd;
  double m = 0;
  for (int i = threadIdx.x; i < hd; i += blockDim.x)
    m += x[i];
  const double mean = blockSumD(m) / (double)hd;
  double var = 0;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    const double d = (double)x[i] - mean;
    var += d * d;
  }
  const double inv = 1.0 / sqrt(blockSumD(var) / (double)hd + 1e-6);
  for (int i = threadIdx.x; i < hd; i += blockDim.x)
    dst[i] = (float)(((double)x[i] - mean) * inv * (double)w[i] +
                     (double)bias[i]);
  __syncthreads();
  for (int i = threadIdx.x; i < dr / 2; i += blockDim.x)
    ropePair(dst, i, dr, pos[b], theta);
}

// sel[b] = 0..T-1 with T = pos[b] + 1 (dense attention). Grid (n, B).
GLM_X glmx_iota(int *sel, int *nsel, const int *pos, int maxCtx) {
  const int b = blockIdx.y, T = pos[b] + 1;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < T;
       t += gridDim.x * blockDim.x)
    sel[(long long)b * maxCtx + t] = t;
  if (blockIdx.x == 0 && threadIdx.x == 0)
    nsel[b] = T;
}

// I(t) = sum_h w_h * headScale * ReLU(q_h . k_t * dotScale) for every key
// t < T of row b. Warp w of a block takes keys t = 8*blockIdx.x + w, then
// strides by 8*gridDim.x; lane l computes the head dot products h = l,
// l+32, .. (each serially over i, as the CPU reference), lane 0 adds the
// heads in order. Grid (n, B), 256 threads.
GLM_X glmx_indexer_scores(const float *qi, const float *keys,
                          const float *wts, double *score, const int *seq,
                          const int *pos, int nh, int hd, int maxCtx,
                          double headScale, double dotScale) {
  __shared__ double term[8][64];
  const int b = blockIdx.y, T = pos[b] + 1;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const float *q = qi + (long long)b * nh * hd;
  const float *wv = wts + (long long)b * nh;
  const float *kb = keys + (long long)seq[b] * maxCtx * hd;
  for (int t0 = blockIdx.x * 8; t0 < T; t0 += gridDim.x * 8) {
    const int t = t0 + w;
    const float *kt = kb + (long long)(t < T ? t : 0) * hd;
    double acc = 0;
    for (int h0 = 0; h0 < nh; h0 += 64) {
      for (int h = h0 + lane; h < h0 + 64 && h < nh; h += 32) {
        double d = 0;
        for (int i = 0; i < hd; ++i)
          d += (double)q[h * hd + i] * (double)kt[i];
        const double v = d * dotScale;
        term[w][h - h0] = (double)wv[h] * headScale * (v > 0.0 ? v : 0.0);
      }
      __syncwarp();
      if (lane == 0)
        for (int h = h0; h < h0 + 64 && h < nh; ++h)
          acc += term[w][h - h0];
      __syncwarp();
    }
    if (lane == 0 && t < T)
      score[(long long)b * maxCtx + t] = acc;
  }
}

// The k largest scores of row b (ties: lower position) in ascending
// position order; all T when T <= k. Grid (1, B), one block per row.
GLM_X glmx_dsa_select(const double *scoreAll, const int *pos, int k,
                      int *flagsAll, int *selAll, int *nsel, int maxCtx) {
  const int b = blockIdx.y, T = pos[b] + 1;
  const double *score = scoreAll + (long long)b * maxCtx;
  int *flags = flagsAll + (long long)b * maxCtx;
  int *sel = selAll + (long long)b * maxCtx;
  if (T <= k) {
    for (int t = threadIdx.x; t < T; t += blockDim.x)
      sel[t] = t;
    if (threadIdx.x == 0)
      nsel[b] = T;
    return;
  }
  for (int t = threadIdx.x; t < T; t += blockDim.x) {
    const double st = score[t];
    int rank = 0;
    for (int u = 0; u < T && rank < k; ++u) {
      const double su = score[u];
      rank += (su > st || (su == st && u < t)) ? 1 : 0;
    }
    flags[t] = rank < k;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int n = 0;
    for (int t = 0; t < T; ++t)
      if (flags[t])
        sel[n++] = t;
    nsel[b] = n;
  }
}

// Absorbed MLA attention for head heads[blockIdx.x] of row blockIdx.y over
// the selected latent rows: qabs = W_UK^T q_nope, p = softmax((c.qabs +
// kpe.q_pe) * scale), ctx = sum p c, ov = W_UV ctx. q_pe is already roped.
// kvBT is kv_b_proj transposed, fp32 [kvr, H*(dn+dv)]. Dynamic shared
// memory: 2 * kvr doubles; p is global scratch [B, H, maxCtx].
GLM_X glmx_mla_attn(const float *qAll, const float *kvBT, const float *cache,
                    const int *seq, const int *selAll, const int *nselp,
                    double *pAll, int maxCtx, float *ovAll, const int *heads,
                    int H, int dn, int dr, int dv, int kvr, double scale) {
  extern __shared__ double sh[];
  double *qabs = sh, *ctx = sh + kvr;
  __shared__ double mx, sum;
  const int h = heads[blockIdx.x], b = blockIdx.y, lat = kvr + dr;
  const int n = nselp[b], R = H * (dn + dv);
  const float *q = qAll + (long long)b * H * (dn + dr);
  const float *qn = q + (long long)h * (dn + dr), *qp = qn + dn;
  const float *cb = cache + (long long)seq[b] * maxCtx * lat;
  const int *sel = selAll + (long long)b * maxCtx;
  double *p = pAll + ((long long)b * H + h) * maxCtx;
  for (int c = threadIdx.x; c < kvr; c += blockDim.x) {
    double a = 0;
    for (int i = 0; i < dn; ++i)
      a += (double)kvBT[(long long)c * R + (long long)h * (dn + dv) + i] *
           (double)qn[i];
    qabs[c] = a;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float *ent = cb + (long long)sel[j] * lat;
    double a = 0, bb = 0;
    for (int c = 0; c < kvr; ++c)
      a += (double)ent[c] * qabs[c];
    for (int c = 0; c < dr; ++c)
      bb += (double)ent[kvr + c] * (double)qp[c];
    p[j] = (a + bb) * scale;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double m = p[0];
    for (int j = 1; j < n; ++j)
      m = p[j] > m ? p[j] : m;
    mx = m;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += blockDim.x)
    p[j] = exp(p[j] - mx);
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    for (int j = 0; j < n; ++j)
      s += p[j];
    sum = s;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += blockDim.x)
    p[j] /= sum;
  __syncthreads();
  for (int c = threadIdx.x; c < kvr; c += blockDim.x) {
    double a = 0;
    for (int j = 0; j < n; ++j)
      a += p[j] * (double)cb[(long long)sel[j] * lat + c];
    ctx[c] = a;
  }
  __syncthreads();
  float *ov = ovAll + (long long)b * H * dv;
  for (int j = threadIdx.x; j < dv; j += blockDim.x) {
    const long long row = (long long)h * (dn + dv) + dn + j;
    double a = 0;
    for (int c = 0; c < kvr; ++c)
      a += (double)kvBT[(long long)c * R + row] * ctx[c];
    ov[(long long)h * dv + j] = (float)a;
  }
}

// Element (o, i) of a row-major [out, in] weight in its stored form: dt as
// ldAny, sk 0 none, 1 FP8 block-128 (f32 scales), 2 FP8 row (f32), 3
// MXFP8 (e8m0 bytes per 32 inputs) - as glmx_gemv_any reads it. DT/SK as
// template arguments (-1: read at run time) so the MLA loops below carry no
// branch and their loads can be issued together.
template <int DT>
__device__ __forceinline__ float ldAnyT(const void *p, long long i, int dt) {
  if (DT == 0)
    return ((const float *)p)[i];
  if (DT == 1)
    return halfBits(((const unsigned short *)p)[i]);
  if (DT == 2)
    return __uint_as_float((unsigned)((const unsigned short *)p)[i] << 16);
  if (DT == 3)
    return e4m3Bits(((const unsigned char *)p)[i]);
  return ldAny(p, i, dt);
}
template <int DT, int SK>
__device__ __forceinline__ float ldWT(const void *w, int dt, const void *scale,
                                      int sk, long long o, int i, int in) {
  float v = ldAnyT<DT>(w, o * in + i, dt);
  const int k = SK >= 0 ? SK : sk;
  if (k == 1)
    v *= ((const float *)scale)[(o >> 7) * ((in + 127) >> 7) + (i >> 7)];
  else if (k == 2)
    v *= ((const float *)scale)[o];
  else if (k == 3)
    v *= exp2f(float(int(((const unsigned char *)scale)[o * (in / 32) +
                                                         (i >> 5)]) - 127));
  return v;
}
// Runs BODY<DT, SK> for the stored forms kv_b takes (f32/f16/bf16 plain,
// e4m3 with block, row or MXFP8 scales); anything else reads at run time.
#define GLM_MLA_DISPATCH(dt, sk, BODY, ...)                                   \
  if (dt == 0 && sk == 0) BODY<0, 0>(__VA_ARGS__);                             \
  else if (dt == 1 && sk == 0) BODY<1, 0>(__VA_ARGS__);                        \
  else if (dt == 2 && sk == 0) BODY<2, 0>(__VA_ARGS__);                        \
  else if (dt == 3 && sk == 1) BODY<3, 1>(__VA_ARGS__);                        \
  else if (dt == 3 && sk == 2) BODY<3, 2>(__VA_ARGS__);                        \
  else if (dt == 3 && sk == 3) BODY<3, 3>(__VA_ARGS__);                        \
  else BODY<-1, -1>(__VA_ARGS__)

// 16-byte weight chunks: N consecutive elements of row o from column c0 (a
// multiple of N) with their scale (one scale covers the chunk: 128-column
// blocks, rows, or 32-column MXFP8 groups). Needs a 16-byte aligned W and
// rows of a multiple of 16 bytes (vecOk).
template <int DT> struct VecOf { static constexpr int N = DT == 3 ? 16 : DT == 0 ? 4 : 8; };
__device__ __forceinline__ bool vecOk(const void *W, int dt, int sk, int in) {
  const int eb = dt == 0 ? 4 : dt == 3 ? 1 : 2;
  // Exactly the forms GLM_MLA_DISPATCH instantiates (else: the scalar path).
  return dt >= 0 && dt <= 3 && (dt < 3 ? sk == 0 : sk >= 1 && sk <= 3) &&
         ((unsigned long long)W & 15) == 0 && (in * eb) % 16 == 0 && in % 32 == 0;
}
// The scale of element (o, c) of a stored [out, in] weight (SK as ldWT,
// 0 = none); the same for the aligned 4..16-element groups ldVec / ld4
// read (a group never straddles a scale block).
template <int SK>
__device__ __forceinline__ float scaleAt(const void *scale, long long o, int c,
                                         int in) {
  if (SK == 1)
    return ((const float *)scale)[(o >> 7) * ((in + 127) >> 7) + (c >> 7)];
  if (SK == 2)
    return ((const float *)scale)[o];
  if (SK == 3)
    return exp2f(float(int(((const unsigned char *)scale)[o * (in / 32) +
                                                         (c >> 5)]) - 127));
  return 1.0f;
}
template <int DT, int SK>
__device__ __forceinline__ void ldVec(const void *w, const void *scale,
                                      long long o, int c0, int in,
                                      float (&v)[VecOf<DT>::N]) {
  constexpr int N = VecOf<DT>::N;
  constexpr int kBytes = DT == 0 ? 4 : DT == 3 ? 1 : 2;
  const uint4 q = *reinterpret_cast<const uint4 *>(
      static_cast<const unsigned char *>(w) + (o * in + c0) * kBytes);
  const unsigned u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int t = 0; t < N; ++t) {
    if (DT == 0)
      v[t] = __uint_as_float(u[t]);
    else if (DT == 1)
      v[t] = halfBits((unsigned short)(u[t / 2] >> (16 * (t & 1))));
    else if (DT == 2)
      v[t] = __uint_as_float((u[t / 2] >> (16 * (t & 1))) << 16);
    else
      v[t] = e4m3Bits((unsigned char)(u[t / 4] >> (8 * (t & 3))));
  }
  if (SK != 0) {
    const float s = scaleAt<SK>(scale, o, c0, in);
#pragma unroll
    for (int t = 0; t < N; ++t)
      v[t] *= s;
  }
}

// Loads issued together per thread in the MLA loops below; the products
// are then added in the same order as one at a time (same bits).
#define kMlaBatch 8

// The absorbed MLA attention in three launches over kv_b_proj W
// [H*(dn+dv), kvr] (HF row order) in its stored form (BF16/F16/F32/FP8,
// see ldWT) or an fp32 expansion (trellis), fp32 products (warp and block
// sums in a fixed order), the softmax in fp64.
// 1. qabs[b][h][c] = sum_i W[h*(dn+dv) + i][c] * q_nope[i]: block = (head
//    heads[blockIdx.x / ceil(kvr/32)], 32 columns), nw = blockDim.x / 32
//    warps (1..8; the executor's GLM_MLA_QABS_THREADS); warp w sums rows i
//    = w, w+nw, ..; the warps' sums are added in warp order. Grid
//    (nHeads * ceil(kvr/32), B).
template <int DT, int SK>
__device__ __forceinline__ float mlaQabsDot(const void *W, int dt,
                                            const void *scale, int sk,
                                            const float *qn, long long o0,
                                            int w, int nw, int c, int dn,
                                            int kvr) {
  float a = 0.0f;
  int i = w;
  for (; i + nw * (kMlaBatch - 1) < dn; i += nw * kMlaBatch) {
    float v[kMlaBatch], q[kMlaBatch];
#pragma unroll
    for (int k = 0; k < kMlaBatch; ++k) {
      v[k] = ldWT<DT, SK>(W, dt, scale, sk, o0 + i + nw * k, c, kvr);
      q[k] = qn[i + nw * k];
    }
#pragma unroll
    for (int k = 0; k < kMlaBatch; ++k)
      a += v[k] * q[k];
  }
  for (; i < dn; i += nw)
    a += ldWT<DT, SK>(W, dt, scale, sk, o0 + i, c, kvr) * qn[i];
  return a;
}
template <int DT, int SK>
__device__ __forceinline__ void mlaQabsRun(float &a, const void *W, int dt,
                                           const void *scale, int sk,
                                           const float *qn, long long o0,
                                           int w, int nw, int c, int dn,
                                           int kvr) {
  a = mlaQabsDot<DT, SK>(W, dt, scale, sk, qn, o0, w, nw, c, dn, kvr);
}
// 16-byte chunks: the block's 32 columns in P = 32/N chunks per row, R =
// blockDim.x/P row lanes (rows rl, rl+R, .. in order, 4 loads in flight);
// sums over a warp's row lanes by shuffles, then over warps in order.
template <int DT, int SK>
__device__ __forceinline__ void
mlaQabsVec(const void *W, const void *scale, const float *qn, float *qabsAll,
           float (*part)[32], int b, int h, int H, long long o0, int dn,
           int kvr) {
  if (DT < 0 || (SK != 0 && DT != 3))
    return; // vecOk admits only the forms instantiated below
  constexpr int D = DT < 0 ? 0 : DT, N = VecOf<D>::N, P = 32 / N;
  const int t = threadIdx.x, lane = t & 31, w = t >> 5;
  const int nw = blockDim.x >> 5, R = blockDim.x / P;
  const int chunk = t % P, rl = t / P;
  const int chunks = kvr / 32;
  const int c0 = (blockIdx.x % chunks) * 32 + chunk * N;
  float acc[N];
#pragma unroll
  for (int k = 0; k < N; ++k)
    acc[k] = 0.0f;
  for (int i = rl; i < dn; i += 4 * R) {
    float v[4][N], q[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int r = i + m * R;
      q[m] = r < dn ? qn[r] : 0.0f;
      if (r < dn)
        ldVec<D, SK>(W, scale, o0 + r, c0, kvr, v[m]);
    }
#pragma unroll
    for (int m = 0; m < 4; ++m)
      if (i + m * R < dn)
#pragma unroll
        for (int k = 0; k < N; ++k)
          acc[k] += v[m][k] * q[m];
  }
  // Row lanes of one chunk in a warp are lanes chunk + P*m: fold them.
#pragma unroll
  for (int off = P; off < 32; off <<= 1)
#pragma unroll
    for (int k = 0; k < N; ++k)
      acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], off);
  if (lane < P)
#pragma unroll
    for (int k = 0; k < N; ++k)
      part[w][lane * N + k] = acc[k];
  __syncthreads();
  if (w == 0) {
    float s = 0.0f;
    for (int k = 0; k < nw; ++k)
      s += part[k][lane];
    qabsAll[((long long)b * H + h) * kvr + (blockIdx.x % chunks) * 32 + lane] = s;
  }
}
GLM_X glmx_mla_qabs(const float *qAll, const void *W, int dt,
                    const void *scale, int sk, const int *heads,
                    float *qabsAll, int H, int dn, int dr, int dv, int kvr) {
  __shared__ float part[8][32];
  const int chunks = (kvr + 31) / 32, h = heads[blockIdx.x / chunks];
  const int c = (blockIdx.x % chunks) * 32 + (threadIdx.x & 31);
  const int w = threadIdx.x >> 5, nw = blockDim.x >> 5, b = blockIdx.y;
  const float *qn = qAll + (long long)b * H * (dn + dr) + (long long)h * (dn + dr);
  const long long o0 = (long long)h * (dn + dv);
  if (vecOk(W, dt, sk, kvr)) {
    GLM_MLA_DISPATCH(dt, sk, mlaQabsVec, W, scale, qn, qabsAll, part, b, h, H,
                     o0, dn, kvr);
    return;
  }
  float a = 0.0f;
  if (c < kvr) {
    GLM_MLA_DISPATCH(dt, sk, mlaQabsRun, a, W, dt, scale, sk, qn, o0, w, nw,
                     c, dn, kvr);
  }
  part[w][threadIdx.x & 31] = a;
  __syncthreads();
  if (w == 0 && c < kvr) {
    float s = 0.0f;
    for (int k = 0; k < nw; ++k)
      s += part[k][threadIdx.x];
    qabsAll[((long long)b * H + h) * kvr + c] = s;
  }
}

__device__ __forceinline__ float warpSumF(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// sum over c = lane, lane+32, .. < n of a[c] * b[c], in that order.
__device__ __forceinline__ float laneDot(const float *a, const float *b,
                                         int n, int lane) {
  float s = 0.0f;
  int c = lane;
  for (; c + 32 * (kMlaBatch - 1) < n; c += 32 * kMlaBatch) {
    float x[kMlaBatch], y[kMlaBatch];
#pragma unroll
    for (int k = 0; k < kMlaBatch; ++k) {
      x[k] = a[c + 32 * k];
      y[k] = b[c + 32 * k];
    }
#pragma unroll
    for (int k = 0; k < kMlaBatch; ++k)
      s += x[k] * y[k];
  }
  for (; c < n; c += 32)
    s += a[c] * b[c];
  return s;
}

// 2. Per (head heads[blockIdx.x], row b), blockDim.x threads (1024 from the
//    executor): scores of the selected latent rows (one warp per row, lanes
//    over channels c = lane + 32k in order, q_abs and q_pe from shared
//    memory), softmax (fp64, fixed-order block reductions), then ctx[c] =
//    inv * sum_j p_j c_j[c] with threads over (float4 column, row group
//    g): rows j = g, g + G, .. in order, then the G partial sums in group
//    order. Selected row ids and p are staged in shared memory in tiles of
//    kMlaTile so no load waits on another (one block was ~29 us per layer
//    with dependent sel -> cache loads in its loops). p: global scratch
//    float [B, H, maxCtx]. kvr and dr multiples of 4, kvr/4 <= blockDim.x
//    (checked by the executor). Dynamic shared memory: mlaCoreShared().
//    Grid (nHeads, B).
#define kMlaTile 1024
extern "C" __global__ void __launch_bounds__(1024)
glmx_mla_core(const float *qAll, const float *qabsAll,
                    const float *cache, const int *seq, const int *selAll,
                    const int *nselp, float *pAll, int maxCtx, float *ctxAll,
                    const int *heads, int H, int dn, int dr, int kvr,
                    double scale) {
  extern __shared__ float msh[];
  float *qs = msh, *qps = msh + kvr, *ps = qps + dr;
  int *ss = (int *)(ps + kMlaTile);
  float *part = (float *)(ss + kMlaTile);
  __shared__ double red[32];
  const int h = heads[blockIdx.x], b = blockIdx.y, lat = kvr + dr;
  const int t = threadIdx.x, nt = blockDim.x, lane = t & 31, w = t >> 5,
            nw = nt >> 5;
  const int n = nselp[b];
  const float *qp = qAll + (long long)b * H * (dn + dr) +
                    (long long)h * (dn + dr) + dn;
  const float *qabs = qabsAll + ((long long)b * H + h) * kvr;
  const float *cb = cache + (long long)seq[b] * maxCtx * lat;
  const int *sel = selAll + (long long)b * maxCtx;
  float *p = pAll + ((long long)b * H + h) * maxCtx;
  for (int c = t; c < kvr; c += nt)
    qs[c] = qabs[c];
  for (int c = t; c < dr; c += nt)
    qps[c] = qp[c];
  for (int j0 = 0; j0 < n; j0 += kMlaTile) {
    const int m = n - j0 < kMlaTile ? n - j0 : kMlaTile;
    __syncthreads();
    for (int j = t; j < m; j += nt)
      ss[j] = sel[j0 + j];
    __syncthreads();
    for (int j = w; j < m; j += nw) {
      const float *ent = cb + (long long)ss[j] * lat;
      float a = 0.0f, r = 0.0f;
      int c = lane;
      for (; c + 32 * 15 < kvr; c += 32 * 16) {
        float e[16];
#pragma unroll
        for (int k = 0; k < 16; ++k)
          e[k] = ent[c + 32 * k];
#pragma unroll
        for (int k = 0; k < 16; ++k)
          a += e[k] * qs[c + 32 * k];
      }
      for (; c < kvr; c += 32)
        a += ent[c] * qs[c];
      for (c = lane; c < dr; c += 32)
        r += ent[kvr + c] * qps[c];
      a = warpSumF(a);
      r = warpSumF(r);
      if (lane == 0)
        p[j0 + j] = (float)(((double)a + (double)r) * scale);
    }
  }
  __syncthreads();
  double mx = -1e300;
  for (int j = t; j < n; j += nt)
    mx = fmax(mx, (double)p[j]);
  for (int o = 16; o > 0; o >>= 1)
    mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0)
    red[w] = mx;
  __syncthreads();
  mx = lane < nw ? red[lane] : -1e300;
  for (int o = 16; o > 0; o >>= 1)
    mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  double s = 0.0;
  for (int j = t; j < n; j += nt) {
    const double e = exp((double)p[j] - mx);
    p[j] = (float)e;
    if (j < kMlaTile)
      ps[j] = (float)e;
    s += e;
  }
  const float inv = (float)(1.0 / blockSumFixedD(s)); // syncs: p, ps seen
  const int cv = kvr >> 2, G = nt / cv, col = t % cv, grp = t / cv;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int j0 = 0; j0 < n; j0 += kMlaTile) {
    const int m = n - j0 < kMlaTile ? n - j0 : kMlaTile;
    if (n > kMlaTile) { // tile 0 is still staged when n fits one tile
      __syncthreads();
      for (int j = t; j < m; j += nt) {
        ss[j] = sel[j0 + j];
        ps[j] = p[j0 + j];
      }
      __syncthreads();
    }
    if (grp >= G)
      continue;
    int j = grp;
    for (; j + 7 * G < m; j += 8 * G) {
      float4 v[8];
      float pv[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        v[k] = *(const float4 *)(cb + (long long)ss[j + k * G] * lat + 4 * col);
        pv[k] = ps[j + k * G];
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        acc.x += pv[k] * v[k].x;
        acc.y += pv[k] * v[k].y;
        acc.z += pv[k] * v[k].z;
        acc.w += pv[k] * v[k].w;
      }
    }
    for (; j < m; j += G) {
      const float4 v = *(const float4 *)(cb + (long long)ss[j] * lat + 4 * col);
      const float pv = ps[j];
      acc.x += pv * v.x;
      acc.y += pv * v.y;
      acc.z += pv * v.z;
      acc.w += pv * v.w;
    }
  }
  if (grp < G) {
    float *pp = part + grp * kvr + 4 * col;
    pp[0] = acc.x;
    pp[1] = acc.y;
    pp[2] = acc.z;
    pp[3] = acc.w;
  }
  __syncthreads();
  float *ctx = ctxAll + ((long long)b * H + h) * kvr;
  for (int c = t; c < kvr; c += nt) {
    float a = 0.0f;
    for (int g = 0; g < G; ++g)
      a += part[g * kvr + c];
    ctx[c] = a * inv;
  }
}

// 3. ov[b][h*dv + j] = sum_c W[h*(dn+dv) + dn + j][c] * ctx[b][h][c]: a
//    warp per kMlaOutRows consecutive outputs (its ctx loads shared, the
//    rows' weight loads in flight together; one row per warp left ~0.5 KB
//    in flight per warp and ran in ~4 waves), lanes over channels. Grid
//    (nHeads * ceil(dv / (8 * kMlaOutRows)), B), 256 threads.
#define kMlaOutRows 4
template <int DT, int SK>
__device__ __forceinline__ void mlaOutRun(float &a, const void *W, int dt,
                                          const void *scale, int sk,
                                          const float *ctx, long long o,
                                          int lane, int kvr) {
  a = 0.0f;
  int c = lane;
  for (; c + 32 * (kMlaBatch - 1) < kvr; c += 32 * kMlaBatch) {
    float v[kMlaBatch], x[kMlaBatch];
#pragma unroll
    for (int k = 0; k < kMlaBatch; ++k) {
      v[k] = ldWT<DT, SK>(W, dt, scale, sk, o, c + 32 * k, kvr);
      x[k] = ctx[c + 32 * k];
    }
#pragma unroll
    for (int k = 0; k < kMlaBatch; ++k)
      a += v[k] * x[k];
  }
  for (; c < kvr; c += 32)
    a += ldWT<DT, SK>(W, dt, scale, sk, o, c, kvr) * ctx[c];
}
// Four consecutive elements of row o from column c (a multiple of 4) with
// their scale (a 4-group never straddles a scale group). Alignment as
// ldVec (vecOk).
template <int DT, int SK>
__device__ __forceinline__ void ld4(const void *w, const void *scale,
                                    long long o, int c, int in,
                                    float (&v)[4]) {
  constexpr int kBytes = DT == 0 ? 4 : DT == 3 ? 1 : 2;
  const unsigned char *base =
      static_cast<const unsigned char *>(w) + (o * in + c) * kBytes;
  if (DT == 0) {
    const float4 f = *reinterpret_cast<const float4 *>(base);
    v[0] = f.x;
    v[1] = f.y;
    v[2] = f.z;
    v[3] = f.w;
  } else if (DT == 3) {
    const unsigned u = *reinterpret_cast<const unsigned *>(base);
#pragma unroll
    for (int t = 0; t < 4; ++t)
      v[t] = e4m3Bits((unsigned char)(u >> (8 * t)));
  } else {
    const uint2 q = *reinterpret_cast<const uint2 *>(base);
    const unsigned u[2] = {q.x, q.y};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const unsigned short hb = (unsigned short)(u[t / 2] >> (16 * (t & 1)));
      v[t] = DT == 1 ? halfBits(hb) : __uint_as_float((unsigned)hb << 16);
    }
  }
  if (SK != 0) {
    const float s = scaleAt<SK>(scale, o, c, in);
#pragma unroll
    for (int t = 0; t < 4; ++t)
      v[t] *= s;
  }
}
// Lane l takes columns c = 4l + 128m (m in order): 4-element weight loads
// and float4 ctx loads, both contiguous across the warp. (Lanes over
// 16-column chunks read ctx with a 64-byte lane stride: ~16 L1 wavefronts
// per load, which was most of this kernel's ~36 us per layer.) Rows o0 ..
// o0 + nr - 1 (nr <= kMlaOutRows), each summed in the same order.
// Raw 4-element weight words (loaded first, decoded at the products, so a
// warp's loads are all in flight without holding decoded floats).
template <int D> struct RawOf { typedef uint2 T; };
template <> struct RawOf<0> { typedef uint4 T; };
template <> struct RawOf<3> { typedef unsigned T; };
template <int D>
__device__ __forceinline__ void dec4(const typename RawOf<D>::T &q,
                                     float (&v)[4]);
template <>
__device__ __forceinline__ void dec4<0>(const uint4 &q, float (&v)[4]) {
  v[0] = __uint_as_float(q.x);
  v[1] = __uint_as_float(q.y);
  v[2] = __uint_as_float(q.z);
  v[3] = __uint_as_float(q.w);
}
template <>
__device__ __forceinline__ void dec4<1>(const uint2 &q, float (&v)[4]) {
  v[0] = halfBits((unsigned short)q.x);
  v[1] = halfBits((unsigned short)(q.x >> 16));
  v[2] = halfBits((unsigned short)q.y);
  v[3] = halfBits((unsigned short)(q.y >> 16));
}
template <>
__device__ __forceinline__ void dec4<2>(const uint2 &q, float (&v)[4]) {
  v[0] = __uint_as_float(q.x << 16);
  v[1] = __uint_as_float(q.x & 0xffff0000u);
  v[2] = __uint_as_float(q.y << 16);
  v[3] = __uint_as_float(q.y & 0xffff0000u);
}
template <>
__device__ __forceinline__ void dec4<3>(const unsigned &q, float (&v)[4]) {
#pragma unroll
  for (int t = 0; t < 4; ++t)
    v[t] = e4m3Bits((unsigned char)(q >> (8 * t)));
}
// Lane l takes columns c = 4l + 128m (m in order): 4-element weight loads
// and float4 ctx loads, both contiguous across the warp. (Lanes over
// 16-column chunks read ctx with a 64-byte lane stride: ~16 L1 wavefronts
// per load, which was most of this kernel's ~36 us per layer.) Rows o0 ..
// o0 + nr - 1 (nr <= kMlaOutRows), each summed in the same order as ld4
// one column group at a time; MB column groups per row in flight.
template <int DT, int SK>
__device__ __forceinline__ void mlaOutVec(float (&a)[kMlaOutRows],
                                          const void *W, const void *scale,
                                          const float *ctx, long long o0,
                                          int nr, int lane, int kvr) {
  if (DT < 0 || (SK != 0 && DT != 3))
    return;
  constexpr int D = DT < 0 ? 0 : DT, MB = D == 0 ? 2 : 4;
  constexpr int kBytes = D == 0 ? 4 : D == 3 ? 1 : 2;
  typedef typename RawOf<D>::T Raw;
  const unsigned char *wb = static_cast<const unsigned char *>(W);
#pragma unroll
  for (int r = 0; r < kMlaOutRows; ++r)
    a[r] = 0.0f;
  for (int c0 = 4 * lane; c0 < kvr; c0 += 128 * MB) {
    Raw q[kMlaOutRows][MB];
    float sc[kMlaOutRows][MB];
    float4 x[MB];
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      const int c = c0 + 128 * m;
      x[m] = c < kvr ? *reinterpret_cast<const float4 *>(ctx + c)
                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int r = 0; r < kMlaOutRows; ++r) {
        q[r][m] = Raw();
        sc[r][m] = 0.0f;
        if (c < kvr && r < nr) {
          q[r][m] = *reinterpret_cast<const Raw *>(
              wb + ((o0 + r) * kvr + c) * kBytes);
          sc[r][m] = scaleAt<SK>(scale, o0 + r, c, kvr);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kMlaOutRows; ++r)
#pragma unroll
      for (int m = 0; m < MB; ++m) {
        float v[4];
        dec4<D>(q[r][m], v);
        if (SK != 0)
#pragma unroll
          for (int t = 0; t < 4; ++t)
            v[t] *= sc[r][m];
        a[r] += v[0] * x[m].x + v[1] * x[m].y + v[2] * x[m].z +
                v[3] * x[m].w;
      }
  }
}
template <int DT, int SK>
__device__ __forceinline__ void mlaOutRows(float (&a)[kMlaOutRows],
                                           const void *W, int dt,
                                           const void *scale, int sk,
                                           const float *ctx, long long o0,
                                           int nr, int lane, int kvr) {
#pragma unroll
  for (int r = 0; r < kMlaOutRows; ++r) {
    a[r] = 0.0f;
    if (r < nr)
      mlaOutRun<DT, SK>(a[r], W, dt, scale, sk, ctx, o0 + r, lane, kvr);
  }
}
GLM_X glmx_mla_out(const void *W, int dt, const void *scale, int sk,
                   const float *ctxAll, const int *heads, float *ovAll, int H,
                   int dn, int dv, int kvr) {
  const int rowsB = 8 * kMlaOutRows, per = (dv + rowsB - 1) / rowsB;
  const int h = heads[blockIdx.x / per];
  const int j0 = (blockIdx.x % per) * rowsB + (threadIdx.x >> 5) * kMlaOutRows;
  const int lane = threadIdx.x & 31, b = blockIdx.y;
  if (j0 >= dv) // the whole warp
    return;
  const int nr = dv - j0 < kMlaOutRows ? dv - j0 : kMlaOutRows;
  const long long o0 = (long long)h * (dn + dv) + dn + j0;
  const float *ctx = ctxAll + ((long long)b * H + h) * kvr;
  float a[kMlaOutRows] = {};
  if (vecOk(W, dt, sk, kvr)) {
    GLM_MLA_DISPATCH(dt, sk, mlaOutVec, a, W, scale, ctx, o0, nr, lane, kvr);
  } else {
    GLM_MLA_DISPATCH(dt, sk, mlaOutRows, a, W, dt, scale, sk, ctx, o0, nr,
                     lane, kvr);
  }
#pragma unroll
  for (int r = 0; r < kMlaOutRows; ++r) {
    const float v = warpSumF(a[r]);
    if (lane == 0 && r < nr)
      ovAll[(long long)b * H * dv + (long long)h * dv + j0 + r] = v;
  }
}

// Load time: dst[r][c] = src[c][r] for a rows x cols source ([cols][rows]
// in dst). Grid (ceil(rows*cols/256)).
GLM_X glmx_transpose(const float *src, float *dst, long long rows, int cols) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols)
    return;
  const long long r = i / cols, c = i % cols;
  dst[i] = src[c * rows + r];
}

// Fallback GEMV for dense weights the codegen dense_gemv cannot take (F16,
// or inputs not a multiple of 128): y[b*ys + o] = sum_i W[o, i] x[b*xs + i]
// in fp32. sk: 0 none, 1 FP8 block-128 (f32 scales), 2 FP8 row (f32), 3
// MXFP8 (e8m0 bytes per 32 inputs). One warp per row; grid (ceil(out/8), B).
GLM_X glmx_gemv_any(const float *x, int xs, const void *w, int dt,
                    const void *scale, int sk, float *y, int ys, int in,
                    int out) {
  const int lane = threadIdx.x & 31, b = blockIdx.y;
  const int o = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (o >= out)
    return;
  const float *xb = x + (long long)b * xs;
  float acc = 0.0f;
  for (int i = lane; i < in; i += 32) {
    float v = ldAny(w, (long long)o * in + i, dt);
    if (sk == 1)
      v *= ((const float *)scale)[(long long)(o >> 7) * ((in + 127) >> 7) +
                                  (i >> 7)];
    else if (sk == 2)
      v *= ((const float *)scale)[o];
    else if (sk == 3)
      v *= exp2f(float(int(((const unsigned char *)scale)[
                           (long long)o * (in / 32) + (i >> 5)]) - 127));
    acc += v * xb[i];
  }
  for (int s = 16; s > 0; s >>= 1)
    acc += __shfl_xor_sync(0xFFFFFFFFu, acc, s);
  if (lane == 0)
    y[(long long)b * ys + o] = acc;
}

// out[b, i] = (float)(sum over units u in order of part[(b*units+u)*n+i]).
// Grid (ceil(n/256), B).
GLM_X glmx_reduce_units(const double *part, int units, int n, float *out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (i >= n)
    return;
  double s = 0;
  for (int u = 0; u < units; ++u)
    s += part[((long long)b * units + u) * n + i];
  out[(long long)b * n + i] = (float)s;
}

// Sigmoid router of row b: top k of sigmoid(l) + bias (ties: lower id),
// sorted by expert id, weights renormalised and scaled. Grid (1, B), a
// thread per expert (blockDim a multiple of 32, >= E; E <= 1024), k <= 64.
// Expert t is picked when fewer than k experts come before it in (score
// descending, id ascending) order: the set k rounds of "take the best
// untaken" would pick, found in one parallel pass instead of k serial warp
// argmaxes; its place among the picks is the count of picks with lower id.
GLM_X glmx_route(const float *logitsAll, const float *bias, int E, int k,
                 int normalize, double scale, int *expertsAll,
                 float *weightsAll) {
  __shared__ double s[1024], ch[1024];
  __shared__ int pickS[64], warpPicks[32];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int b = blockIdx.y;
  const float *logits = logitsAll + (long long)b * E;
  if (t < E) {
    s[t] = 1.0 / (1.0 + exp(-(double)logits[t]));
    ch[t] = s[t] + (bias ? (double)bias[t] : 0.0);
  }
  __syncthreads();
  const int kk0 = k;
  if (k > E)
    k = E;
  bool picked = false;
  if (t < E) {
    const double v = ch[t];
    int before = 0;
    for (int e = 0; e < E; ++e) {
      const double o = ch[e];
      before += o > v || (o == v && e < t);
    }
    picked = before < k;
  }
  const unsigned m = __ballot_sync(0xffffffffu, picked);
  if (lane == 0)
    warpPicks[warp] = __popc(m);
  __syncthreads();
  if (picked) {
    int pos = __popc(m & ((1u << lane) - 1u));
    for (int w = 0; w < warp; ++w)
      pos += warpPicks[w];
    pickS[pos] = t;
  }
  __syncthreads();
  if (t != 0)
    return;
  double sum = 0; // ascending expert id, as the serial reference adds
  for (int kk = 0; kk < k; ++kk)
    sum += s[pickS[kk]];
  for (int kk = 0; kk < kk0; ++kk) {
    const bool ok = kk < k;
    const int e = ok ? pickS[kk] : 0;
    expertsAll[b * kk0 + kk] = ok ? e : -1;
    weightsAll[b * kk0 + kk] =
        ok ? (float)((normalize ? s[e] / (sum + 1e-20) : s[e]) * scale)
           : 0.0f;
  }
}

// act[b, j] = SiLU(g[b, j]) * u[b, j] (in fp64, stored fp32); channels of
// 128-chunks this rank does not own (own[j/128] == 0) are zero. Grid
// (ceil(n/256), B). g and u rows have stride gs.
GLM_X glmx_swiglu(const float *g, const float *u, int gs, float *act, int n,
                  const unsigned char *own) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (j >= n)
    return;
  float v = 0.0f;
  if (!own || own[j >> 7]) {
    const double gg = g[(long long)b * gs + j], uu = u[(long long)b * gs + j];
    v = (float)(gg / (1.0 + exp(-gg)) * uu);
  }
  act[(long long)b * n + j] = v;
}

// Unquantized (HF) experts, gate/up half: act[(b*U + u)*I + j] =
// SiLU(gate_j . x_b) * (up_j . x_b) for unit u of row b: expert
// ids[b*U + u] (or the only matrix when ids is null). own[e*halves + j/128]
// == 0: not this rank's channel (0). Grid (ceil(I/256), U, B).
GLM_X glmx_hf_expert_act(const void *gate, const void *up, int dt,
                         const float *x, const int *ids, long long stride,
                         int I, int d, const unsigned char *own, int halves,
                         int ownE, double *act) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, u = blockIdx.y,
            b = blockIdx.z, U = gridDim.y;
  if (j >= I)
    return;
  const int e = ids ? ids[b * U + u] : ownE;
  double r = 0;
  if (e >= 0 && (!own || own[(long long)e * halves + (j >> 7)])) {
    const long long base = (ids ? (long long)e : 0) * stride + (long long)j * d;
    const float *xb = x + (long long)b * d;
    double g = 0, v = 0;
    for (int i = 0; i < d; ++i)
      g += (double)ldAny(gate, base + i, dt) * (double)xb[i];
    for (int i = 0; i < d; ++i)
      v += (double)ldAny(up, base + i, dt) * (double)xb[i];
    r = g / (1.0 + exp(-g)) * v;
  }
  act[((long long)b * U + u) * I + j] = r;
}

// Down half: part[(b*slots + slotBase + u*chunks + ch)*d + r] = w_u * sum
// over the 128-channel chunk ch of down[r, j] * act[b, u, j]. Grid
// (ceil(d/256), U*chunks, B).
GLM_X glmx_hf_expert_down(const void *down, int dt, const double *act,
                          const int *ids, const float *wts, long long stride,
                          int I, int d, int U, double *part, int slots,
                          int slotBase) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.z;
  const int chunks = (I + 127) / 128;
  const int u = blockIdx.y / chunks, ch = blockIdx.y % chunks;
  if (r >= d)
    return;
  const int e = ids ? ids[b * U + u] : 0;
  double s = 0;
  if (e >= 0) {
    const int begin = ch * 128;
    const int count = I - begin < 128 ? I - begin : 128;
    const long long row = (ids ? (long long)e : 0) * stride +
                          (long long)r * I + begin;
    const double *a = act + ((long long)b * U + u) * I + begin;
    for (int j = 0; j < count; ++j)
      s += (double)ldAny(down, row + j, dt) * a[j];
    s *= wts ? (double)wts[b * U + u] : 1.0;
  }
  part[((long long)b * slots + slotBase + (long long)u * chunks + ch) * d +
       r] = s;
}

// EXL3 experts: xh[p][b][k][i] = x[b][i] * suh[p][ids[b*K+k]][i] (gate p=0,
// up p=1; the Hadamard follows). Grid (ceil(d/256), K, B*2).
GLM_X glmx_exl3_expert_in(const float *x, const float *suh, const int *ids,
                          float *xh, int d, int E, int B) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y,
            K = gridDim.y;
  const int b = blockIdx.z % B, p = blockIdx.z / B;
  if (i >= d)
    return;
  const int e = ids[b * K + k];
  const float s = e >= 0 ? suh[((long long)p * E + e) * d + i] : 0.0f;
  xh[(((long long)p * B + b) * K + k) * d + i] = x[(long long)b * d + i] * s;
}

// moe_trellis EXL3 inputs: xh[b][k][p][i] = x[b][i] * suh[p][e][i] with e
// = ids[b*topk + k] for the routed slots k < topk and nRouted + k - topk for
// the shared ones (the Hadamard follows). Grid (ceil(d/256), slots, 2B).
GLM_X glmx_moe_exl3_in(const float *x, const float *suh, const int *ids,
                       float *xh, int d, int eTot, int nRouted, int topk,
                       int B) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y,
            slots = gridDim.y;
  const int b = blockIdx.z % B, p = blockIdx.z / B;
  if (i >= d)
    return;
  const int e = k < topk ? ids[b * topk + k] : nRouted + (k - topk);
  const float s = e >= 0 ? suh[((long long)p * eTot + e) * d + i] : 0.0f;
  xh[(((long long)b * slots + k) * 2 + p) * d + i] = x[(long long)b * d + i] * s;
}

// out[i] = sum over parts p in order of parts[p*n + i] (split-K slices of
// one batch-1 GEMV). Grid (ceil(n/256)).
GLM_X glmx_sum_parts(const float *parts, int np, int n, float *out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float s = 0.0f;
  for (int p = 0; p < np; ++p)
    s += parts[(long long)p * n + i];
  out[i] = s;
}

// Load time: X[b, c] = (c == c0 + b) for b < nb, c < n (one-hot rows).
GLM_X glmx_onehot(float *X, int nb, int n, int c0) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (c >= n || b >= nb)
    return;
  X[(long long)b * n + c] = c == c0 + b ? 1.0f : 0.0f;
}

// Logits of every rank gathered as [N][B][maxCount] -> [B][V]. Grid
// (ceil(maxCount/256), N, B).
GLM_X glmx_vocab_gather(const float *g, const long long *vb, int B,
                        int maxCount, float *out, int V) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y,
            b = blockIdx.z;
  const long long beg = vb[r], cnt = vb[r + 1] - vb[r];
  if (i >= cnt)
    return;
  out[(long long)b * V + beg + i] =
      g[((long long)r * B + b) * maxCount + i];
}

// Synthetic weights: n 32-bit words of a hash of (seed, index), AND mask.
GLM_X glmx_fill_random(unsigned *p, long long n, unsigned long long seed,
                       unsigned mask) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    unsigned long long z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = (unsigned)z & mask;
  }
}

GLM_X glmx_fill_f32(float *p, long long n, float v) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    p[i] = v;
}
)CUDA";
}

} // namespace glm::rt::cuda
