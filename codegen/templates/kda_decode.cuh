// kda_decode.cuh - one decode token of a GLM-5.3-Flash KDA layer per row,
// after its projections: causal short conv (with its rolling state) and
// SiLU of q, k, v; l2-normalised q (times dk^-1/2) and k; the per-channel
// forget gate; β; the delta-rule update of the fp32 recurrent state, read
// and written once; o = Sᵀq; the gated RMS norm. The output is ready for
// o_proj's GEMV.
//
// Launch: grid (n, B), block THREADS (128, 256 or 512); templates ROWS,
// THREADS. Block (hl, b): local head hl = blockIdx.x (global head h = h0 + hl,
// the launch covers heads [h0, h0 + n): a tensor-parallel rank's contiguous
// heads), row b = blockIdx.y (one sequence, state slot seq[b]).
// Activations (this launch's heads only, local head hl; input row stride
// ins, so q/k/v/f/gate may be slices of one fused projection output):
//   q, k  [B, ins] fp32  raw projections, head hl at hl·dk (pre-conv)
//   v     [B, ins] fp32  raw, head hl at hl·dv
//   f     [B, ins] fp32  forget pre-activation f_b(f_a h), at hl·dk
//   gate  [B, ins] fp32  output gate pre-activation g_b(g_a h), at hl·dv
//   bRaw  [B, bs]  fp32  b_proj h, head hl at hl
// Weights (whole tensors, global head h; stored as wdt: 0 f32, 1 f16,
// 2 bf16, 3 e4m3, read by hx::ldAny):
//   convQ, convK [H·dk, K], convV [H·dv, K]  depthwise causal taps
//   aLog [H], dtBias [H·dk], oNorm [dv]
// State (this launch's heads, written in place, each element by one thread):
//   convState [slots, n·(2dk + dv), K−1] fp32: per channel the last K−1 raw
//             inputs, oldest first; channels q (hl·dk + a), then k
//             (n·dk + hl·dk + a), then v (2·n·dk + hl·dv + c)
//   state     [slots, n, dk, dv] fp32: S of head hl, S[a][c] at a·dv + c
//   seq [B] slot of row b; pos [B] or null: pos[b] == 0 starts a sequence
//             (both states read as zeros, then written)
//   out [B, n·dv] fp32  gated-norm output, head hl at hl·dv
// Scalars: h0, dk (<= 256), dv (<= 256, rounded up to 32 <= THREADS), K
// (1..8 taps), lower (gate_lower_bound, < 0; 0 = no bound: softplus form),
// eps (the output norm's).
//
// Arithmetic, fp32 throughout, no contraction (--fmad=false), in the order
// the twin (runtime/twins/twin_flash.cpp) repeats:
//   conv: acc = tap[K−1]·x, then + tap[j]·state[j], j = 0..K−2; siluF.
//   ‖q‖², ‖k‖²: warp 0 (q) / warp 1 (k), lane l adds a = l, l+32, ..,
//   butterfly (hx::warpSumF); q̂ = (q·(1/sqrt(ss+1e-6)))·(1/sqrt(dk)),
//   k̂ = k·(1/sqrt(ss+1e-6)); decay[a] = fm::kdaDecay(f + dtBias, e^aLog);
//   β = sigmoid(bRaw).
//   The state: dvr = dv rounded up to 32, RG = THREADS/dvr row groups;
//   thread t owns column c = t % dvr (< dv) of rows a = r, r+RG, .. (r =
//   t / dvr < RG), at most ROWS of them, in registers. s = S·decay; each
//   thread sums s·k̂ over its rows in order, the RG partials are added in
//   group order (from 0) to mem; δ = β·(v − mem); s += k̂·δ (stored); o as
//   mem with q̂. RMS: warp 0, lane l adds o² of c = l, l+32, .., butterfly;
//   out = (oNorm·(o·(1/sqrt(ss/dv + eps))))·sigmoid(gate).
#pragma once

#include "flash_math.cuh"
#include "helper_common.cuh"

#define GLM_KDA_DECODE_PARAMS                                                  \
  const float *q, const float *k, const float *v, const float *f,              \
      const float *gate, int ins, const float *bRaw, int bs,                   \
      const void *convQ, const void *convK, const void *convV,                 \
      const void *aLog, const void *dtBias, const void *oNorm, int wdt,        \
      float *convState, float *state, const int *seq, const int *pos,          \
      float *out, int h0, int dk, int dv, int K, float lower, float eps
#define GLM_KDA_DECODE_ARGS                                                    \
  q, k, v, f, gate, ins, bRaw, bs, convQ, convK, convV, aLog, dtBias, oNorm,   \
      wdt, convState, state, seq, pos, out, h0, dk, dv, K, lower, eps

namespace glm {

template <int ROWS, int THREADS>
__device__ __forceinline__ void kdaDecode(GLM_KDA_DECODE_PARAMS) {
  static_assert(THREADS == 128 || THREADS == 256 || THREADS == 512,
                "THREADS: 128, 256 or 512 (warps 0-2 have roles)");
  static_assert(ROWS >= 1 && ROWS <= 128, "ROWS: state rows per thread");
  constexpr int kMaxD = 256;
  const int dvr = (dv + 31) & ~31, RG = THREADS / (dvr > 0 ? dvr : 32);
  if (dk < 1 || dk > kMaxD || dv < 1 || dv > kMaxD || dvr > THREADS ||
      (dk + RG - 1) / RG > ROWS || K < 1 || K > 8)
    __trap(); // the footprint refuses such launches first
  __shared__ float qs[kMaxD], ks[kMaxD], vs[kMaxD], dec[kMaxD], os[kMaxD];
  __shared__ float red[THREADS]; // (RG, dvr) row-group partials
  __shared__ float scal[4];      // 1/|q|, 1/|k|, β, 1/rms(o)
  const int hl = blockIdx.x, b = blockIdx.y, n = gridDim.x, h = h0 + hl;
  const int t = threadIdx.x, lane = t & 31, w = t >> 5;
  const bool fresh = pos && pos[b] == 0;
  const long long slot = seq[b];
  const long long in0 = (long long)b * ins;

  // Conv + SiLU of the head's 2dk + dv channels.
  const int K1 = K - 1;
  float *cs = convState + slot * (long long)n * (2 * dk + dv) * K1;
  for (int ch = t; ch < 2 * dk + dv; ch += THREADS) {
    const int x = ch < dk ? 0 : ch < 2 * dk ? 1 : 2;
    const int a = ch - x * dk;
    const void *taps = x == 0 ? convQ : x == 1 ? convK : convV;
    const int width = x == 2 ? dv : dk;
    const float *src = x == 0 ? q : x == 1 ? k : v;
    const float xin = src[in0 + (long long)hl * width + a];
    const long long tapRow = ((long long)h * width + a) * K;
    float *st = cs + ((long long)x * n * dk + (long long)hl * width + a) * K1;
    float acc = hx::ldAny(taps, tapRow + K1, wdt) * xin;
    for (int j = 0; j < K1; ++j)
      acc = acc + hx::ldAny(taps, tapRow + j, wdt) * (fresh ? 0.0f : st[j]);
    for (int j = 0; j + 1 < K1; ++j)
      st[j] = fresh ? 0.0f : st[j + 1];
    if (K1 > 0)
      st[K1 - 1] = xin;
    const float y = fm::siluF(acc);
    (x == 0 ? qs : x == 1 ? ks : vs)[a] = y;
  }
  // Forget gate -> per-channel decay e^g.
  const float rate = fm::expF(hx::ldAny(aLog, h, wdt));
  for (int a = t; a < dk; a += THREADS) {
    const float xg = f[in0 + (long long)hl * dk + a] +
                     hx::ldAny(dtBias, (long long)h * dk + a, wdt);
    dec[a] = fm::kdaDecay(xg, rate, lower);
  }
  __syncthreads();
  if (w < 2) { // warp 0: |q|, warp 1: |k|
    const float *x = w == 0 ? qs : ks;
    float ss = 0.0f;
    for (int a = lane; a < dk; a += 32)
      ss = ss + x[a] * x[a];
    ss = hx::warpSumF(ss);
    if (lane == 0)
      scal[w] = 1.0f / fm::sqrtF(ss + 1e-6f);
  } else if (t == 64) {
    scal[2] = fm::sigmoidF(bRaw[(long long)b * bs + hl]);
  }
  __syncthreads();
  const float qScale = 1.0f / fm::sqrtF((float)dk);
  for (int a = t; a < dk; a += THREADS) {
    qs[a] = (qs[a] * scal[0]) * qScale;
    ks[a] = ks[a] * scal[1];
  }
  __syncthreads();

  // The delta rule on this thread's column slice of S.
  const int r = t / dvr, c = t % dvr;
  const bool active = r < RG && c < dv;
  float *S = state + ((slot * n + hl) * (long long)dk) * dv; // (dk, dv)
  float s[ROWS];
  float pm = 0.0f;
#pragma unroll
  for (int i = 0; i < ROWS; ++i) {
    const int a = r + i * RG;
    if (active && a < dk) {
      s[i] = (fresh ? 0.0f : S[(long long)a * dv + c]) * dec[a];
      pm = pm + s[i] * ks[a];
    }
  }
  red[t] = pm;
  __syncthreads();
  float delta = 0.0f;
  if (active) {
    float mem = 0.0f;
    for (int g = 0; g < RG; ++g)
      mem = mem + red[g * dvr + c];
    delta = scal[2] * (vs[c] - mem);
  }
  __syncthreads();
  float po = 0.0f;
#pragma unroll
  for (int i = 0; i < ROWS; ++i) {
    const int a = r + i * RG;
    if (active && a < dk) {
      s[i] = s[i] + ks[a] * delta;
      S[(long long)a * dv + c] = s[i];
      po = po + s[i] * qs[a];
    }
  }
  red[t] = po;
  __syncthreads();
  if (active && r == 0) {
    float o = 0.0f;
    for (int g = 0; g < RG; ++g)
      o = o + red[g * dvr + c];
    os[c] = o;
  }
  __syncthreads();

  // Gated RMS norm.
  if (w == 0) {
    float ss = 0.0f;
    for (int j = lane; j < dv; j += 32)
      ss = ss + os[j] * os[j];
    ss = hx::warpSumF(ss);
    if (lane == 0)
      scal[3] = 1.0f / fm::sqrtF(ss / (float)dv + eps);
  }
  __syncthreads();
  for (int j = t; j < dv; j += THREADS) {
    const float gv = gate[in0 + (long long)hl * dv + j];
    out[((long long)b * n + hl) * dv + j] =
        (hx::ldAny(oNorm, j, wdt) * (os[j] * scal[3])) * fm::sigmoidF(gv);
  }
}

} // namespace glm
