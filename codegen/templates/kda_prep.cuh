// kda_prep.cuh - the per-token half of a GLM-5.3-Flash KDA layer over the T
// prompt tokens of one sequence, after its projections: what kda_decode
// does before its state update, token by token, in the same fp32 operations
// (causal short conv over the conv rolling state, SiLU, l2-normalised q
// (times dk^-1/2) and k, the per-channel forget gate, β), written out for
// kda_chunk instead of used in place. The gate is written as the log-decay
// g (fm::kdaLogGate: kda_chunk sums it over a chunk); kda_decode's decay
// e^g is fm::expF of it. The conv state ends as kda_decode would leave it
// after the same T tokens.
//
// Launch: grid (n, ceil(T / 8)), block THREADS (128, 256 or 512); template
// THREADS. Block (hl, y): local head hl = blockIdx.x (global head h0 + hl),
// tokens 8y .. 8y + 7. Block y == 0 alone reads the old conv state (tokens
// 0..K−2 need it, K <= 8) and, after its tokens, writes the new one, so no
// block reads a state entry another one writes.
// Activations (this launch's heads, local head hl; row stride ins as in
// kda_decode, so q/k/v/f may be slices of one fused projection output):
//   q, k  [T, ins] fp32  raw projections, head hl at hl·dk (pre-conv)
//   v     [T, ins] fp32  raw, head hl at hl·dv
//   f     [T, ins] fp32  forget pre-activation f_b(f_a h), at hl·dk
//   bRaw  [T, bs]  fp32  b_proj h, head hl at hl
// Weights as kda_decode's (wdt: 0 f32, 1 f16, 2 bf16, 3 e4m3):
//   convQ, convK [H·dk, K], convV [H·dv, K], aLog [H], dtBias [H·dk]
// State: convState [slots, n·(2dk + dv), K−1] fp32, kda_decode's layout,
//   slot seq[0]; pos[0] == 0: the sequence starts here (the old
//   conv state reads as zeros; null pos: it continues, as kda_decode).
// Outputs (packed, head hl at hl·dk / hl·dv / hl):
//   qo, ko [T, n·dk]  q̂ = (q·(1/sqrt(Σq²+1e-6)))·(1/sqrt(dk)), k̂ likewise
//   vo     [T, n·dv]  SiLU(conv v)
//   go     [T, n·dk]  g = fm::kdaLogGate(f + dtBias, e^aLog, lower)
//   betaO  [T, n]     β = sigmoid(bRaw)
// Scalars: T, h0, dk (<= 256), dv (<= 256), K (1..8 taps), lower (< 0, or
// 0 = the softplus form).
//
// Arithmetic: kda_decode's, operation for operation (fp32, no contraction:
// --fmad=false), so the twin (runtime/twins/twin_flash.cpp) repeats it to
// the bit. The conv input j steps back of token t is raw row t − (K−1) + j,
// or old state entry t + j when that row is before the prompt.
#pragma once

#include "flash_math.cuh"
#include "helper_common.cuh"

#define GLM_KDA_PREP_PARAMS                                                    \
  const float *q, const float *k, const float *v, const float *f, int ins,     \
      const float *bRaw, int bs, const void *convQ, const void *convK,         \
      const void *convV, const void *aLog, const void *dtBias, int wdt,        \
      float *convState, const int *seq, const int *pos, float *qo, float *ko,  \
      float *vo, float *go, float *betaO, int T, int h0, int dk, int dv,       \
      int K, float lower
#define GLM_KDA_PREP_ARGS                                                      \
  q, k, v, f, ins, bRaw, bs, convQ, convK, convV, aLog, dtBias, wdt,           \
      convState, seq, pos, qo, ko, vo, go, betaO, T, h0, dk, dv, K, lower

namespace glm {

/// Tokens per kda_prep block (>= K − 1 for every K the kernel takes).
constexpr int kKdaPrepTokens = 8;

template <int THREADS>
__device__ __forceinline__ void kdaPrep(GLM_KDA_PREP_PARAMS) {
  static_assert(THREADS == 128 || THREADS == 256 || THREADS == 512,
                "THREADS: 128, 256 or 512 (warps 0-2 have roles)");
  constexpr int kMaxD = 256, R = kKdaPrepTokens;
  if (dk < 1 || dk > kMaxD || dv < 1 || dv > kMaxD || K < 1 || K > 8 ||
      K - 1 > R)
    __trap(); // the footprint refuses such launches first
  __shared__ float qs[kMaxD], ks[kMaxD], vs[kMaxD];
  __shared__ float scal[3]; // 1/|q|, 1/|k|, β
  const int hl = blockIdx.x, n = gridDim.x, h = h0 + hl;
  const int t = threadIdx.x, lane = t & 31, w = t >> 5;
  const bool fresh = pos && pos[0] == 0;
  const long long slot = seq[0];
  const int K1 = K - 1, tok0 = blockIdx.y * R;
  const int tokN = tok0 + R < T ? tok0 + R : T;
  float *cs = convState + slot * (long long)n * (2 * dk + dv) * K1;
  const float rate = fm::expF(hx::ldAny(aLog, h, wdt));
  const float qScale = 1.0f / fm::sqrtF((float)dk);
  const long long ldk = (long long)n * dk, ldv = (long long)n * dv;

  for (int tt = tok0; tt < tokN; ++tt) {
    const long long in0 = (long long)tt * ins;
    for (int ch = t; ch < 2 * dk + dv; ch += THREADS) {
      const int x = ch < dk ? 0 : ch < 2 * dk ? 1 : 2;
      const int a = ch - x * dk;
      const void *taps = x == 0 ? convQ : x == 1 ? convK : convV;
      const int width = x == 2 ? dv : dk;
      const float *src = x == 0 ? q : x == 1 ? k : v;
      const long long col = (long long)hl * width + a;
      const long long tapRow = ((long long)h * width + a) * K;
      const float *st = cs + ((long long)x * n * dk + col) * K1;
      float acc = hx::ldAny(taps, tapRow + K1, wdt) * src[in0 + col];
      for (int j = 0; j < K1; ++j) {
        const int back = tt - K1 + j; // the raw row j steps back
        const float xj = back >= 0 ? src[(long long)back * ins + col]
                         : fresh   ? 0.0f
                                   : st[back + K1];
        acc = acc + hx::ldAny(taps, tapRow + j, wdt) * xj;
      }
      (x == 0 ? qs : x == 1 ? ks : vs)[a] = fm::siluF(acc);
    }
    for (int a = t; a < dk; a += THREADS) {
      const float xg = f[in0 + (long long)hl * dk + a] +
                       hx::ldAny(dtBias, (long long)h * dk + a, wdt);
      go[tt * ldk + (long long)hl * dk + a] = fm::kdaLogGate(xg, rate, lower);
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
      scal[2] = fm::sigmoidF(bRaw[(long long)tt * bs + hl]);
    }
    __syncthreads();
    for (int a = t; a < dk; a += THREADS) {
      qo[tt * ldk + (long long)hl * dk + a] = (qs[a] * scal[0]) * qScale;
      ko[tt * ldk + (long long)hl * dk + a] = ks[a] * scal[1];
    }
    for (int c = t; c < dv; c += THREADS)
      vo[tt * ldv + (long long)hl * dv + c] = vs[c];
    if (t == 0)
      betaO[(long long)tt * n + hl] = scal[2];
    __syncthreads(); // qs, ks, vs, scal are the next token's
  }

  // The new conv state: the last K−1 raw inputs, oldest first.
  if (blockIdx.y != 0 || K1 == 0)
    return;
  for (int ch = t; ch < 2 * dk + dv; ch += THREADS) {
    const int x = ch < dk ? 0 : ch < 2 * dk ? 1 : 2;
    const int a = ch - x * dk;
    const int width = x == 2 ? dv : dk;
    const float *src = x == 0 ? q : x == 1 ? k : v;
    const long long col = (long long)hl * width + a;
    float *st = cs + ((long long)x * n * dk + col) * K1;
    float keep[8];
    for (int j = 0; j < K1; ++j) {
      const int back = T - K1 + j;
      keep[j] = back >= 0 ? src[(long long)back * ins + col]
                : fresh   ? 0.0f
                          : st[back + K1];
    }
    for (int j = 0; j < K1; ++j)
      st[j] = keep[j];
  }
}

} // namespace glm
