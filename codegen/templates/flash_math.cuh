// flash_math.cuh - scalar math of the GLM-5.3-Flash decode families
// (mhc_mix, mhc_post, kda_decode, kpool_store) and of the KDA prefill
// (kda_prep, kda_chunk), shared by the kernels and
// their CPU twins (runtime/twins/twin_flash.cpp includes this file).
//
// Every function uses only IEEE-exact operations (+ - * /, sqrt, rint,
// comparisons, exponent bits): CUDA compiled with --fmad=false and the twins
// compiled with -ffp-contract=off round each of them identically, so a twin
// gives the same bits as the kernel. That is why exp is spelled out here
// instead of calling expf, whose CUDA and host versions differ by an ulp or
// two.
#pragma once

#if !defined(__CUDACC_RTC__) && !defined(__CUDACC__)
#include <cmath>
#include <cstring>
#endif

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define GLM_FLASH_HD __host__ __device__ __forceinline__
#else
#define GLM_FLASH_HD inline
#endif

namespace glm {
namespace fm {

GLM_FLASH_HD float bitsF(unsigned u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

GLM_FLASH_HD float rintF(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::rint(x); // round to nearest even, as rintf
#endif
}

GLM_FLASH_HD float sqrtF(float x) {
#if defined(__CUDA_ARCH__)
  return sqrtf(x); // IEEE (NVRTC's default -prec-sqrt=true)
#else
  return std::sqrt(x);
#endif
}

GLM_FLASH_HD double sqrtD(double x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}

/// 2^n for -126 <= n <= 127, by its exponent bits.
GLM_FLASH_HD float pow2F(int n) { return bitsF(unsigned(n + 127) << 23); }

/// e^x in fp32 from exact operations: n = rint(x·log2 e), r = x − n·ln2 in
/// two parts (ln2's high part has 15 significant bits, so n·hi is exact),
/// a degree-7 Taylor polynomial on |r| <= ln2/2 (truncation < 5e-9), then
/// 2^n in two factors (normal range for both). Within 2 ulp of e^x.
GLM_FLASH_HD float expF(float x) {
  if (!(x == x))
    return x;
  if (x > 88.7228394f)
    return bitsF(0x7f800000u);
  if (x < -103.972084f)
    return 0.0f;
  const float n = rintF(x * 1.44269502f);
  float r = x - n * 0.693145752f;
  r = r - n * 1.42860682e-6f;
  float p = 1.98412698e-4f; // 1/7!
  p = p * r + 1.38888889e-3f;
  p = p * r + 8.33333333e-3f;
  p = p * r + 4.16666667e-2f;
  p = p * r + 1.66666667e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int ni = int(n), n1 = ni / 2;
  return p * pow2F(n1) * pow2F(ni - n1);
}

GLM_FLASH_HD float sigmoidF(float x) { return 1.0f / (1.0f + expF(-x)); }
/// x·sigmoid(x), spelled x / (1 + e^-x) as the reference's silu.
GLM_FLASH_HD float siluF(float x) { return x / (1.0f + expF(-x)); }

/// The mHC map of one site from m = fn·X (mRaw, not yet RMS-scaled) and
/// inv = 1/sqrt(ΣX²/n + eps), into coef = [pre S | post S | comb S·S]:
///   a_i = float(m_i · inv) · scale_k + base_i            (fp32)
///   pre = sigmoid(a) + hcEps,  post = 2·sigmoid(a),
///   comb = row softmax(a) + hcEps, then Sinkhorn: columns once, then rows
///   and columns iters−1 times, each normaliser r = 1/(sum + hcEps)
///   multiplied into its entries (sums in index order from 0).
/// base and scale already decoded to fp32.
template <int S>
GLM_FLASH_HD void mhcCoefficients(const float *mRaw, double inv,
                                  const float *base, const float *scale,
                                  float hcEps, int iters, float *coef) {
  float a[(2 + S) * S];
  for (int i = 0; i < (2 + S) * S; ++i)
    a[i] = float((double)mRaw[i] * inv) * scale[i < S ? 0 : i < 2 * S ? 1 : 2] +
           base[i];
  for (int j = 0; j < S; ++j) {
    coef[j] = sigmoidF(a[j]) + hcEps;
    coef[S + j] = 2.0f * sigmoidF(a[S + j]);
  }
  float c[S * S];
  for (int i = 0; i < S; ++i) {
    const float *row = a + 2 * S + i * S;
    float most = row[0];
    for (int j = 1; j < S; ++j)
      most = row[j] > most ? row[j] : most;
    float e[S], sum = 0.0f;
    for (int j = 0; j < S; ++j) {
      e[j] = expF(row[j] - most);
      sum = sum + e[j];
    }
    for (int j = 0; j < S; ++j)
      c[i * S + j] = e[j] / sum + hcEps;
  }
  for (int it = 0; it < iters; ++it) {
    if (it > 0)
      for (int i = 0; i < S; ++i) { // rows
        float sum = 0.0f;
        for (int j = 0; j < S; ++j)
          sum = sum + c[i * S + j];
        const float r = 1.0f / (sum + hcEps);
        for (int j = 0; j < S; ++j)
          c[i * S + j] = c[i * S + j] * r;
      }
    for (int j = 0; j < S; ++j) { // columns
      float sum = 0.0f;
      for (int i = 0; i < S; ++i)
        sum = sum + c[i * S + j];
      const float r = 1.0f / (sum + hcEps);
      for (int i = 0; i < S; ++i)
        c[i * S + j] = c[i * S + j] * r;
    }
  }
  for (int i = 0; i < S * S; ++i)
    coef[2 * S + i] = c[i];
}

/// KDA forget gate of one key channel, the log-decay g:
/// g = lower·sigmoid(rate·x) (lower < 0), or, with lower == 0 (no bound),
/// g = −rate·softplus(x), softplus = x past 20 else log1p(e^x) (the only
/// libm call here: fp64, rounded to fp32, so CUDA and host may differ in
/// the last bit of the double, almost never in the float).
GLM_FLASH_HD float kdaLogGate(float x, float rate, float lower) {
  float g;
  if (lower != 0.0f) {
    g = lower * sigmoidF(rate * x);
  } else {
#if defined(__CUDA_ARCH__)
    const float sp = x > 20.0f ? x : float(log1p(exp((double)x)));
#else
    const float sp = x > 20.0f ? x : float(std::log1p(std::exp((double)x)));
#endif
    g = -(rate * sp);
  }
  return g;
}

/// The decay factor e^g of kdaLogGate (what kda_decode multiplies the state
/// rows by; kda_chunk sums the g of kda_prep instead).
GLM_FLASH_HD float kdaDecay(float x, float rate, float lower) {
  return expF(kdaLogGate(x, rate, lower));
}

/// kda_chunk's shared memory: row strides (floats) of its tiles (+4 / +8
/// keep the MMA fragment loads off a single bank), and the floats of one
/// block: three [C, dk] operand tiles, δ/O [C, dv], Akk and Aqk [C, C],
/// β [C], and per key channel e^{Γ} of the chunk's last token, e^{r} and
/// e^{Γ−r} of it (r: the chunk's middle) [3, dk].
GLM_FLASH_HD int kdaChunkStrideK(int dk) { return dk + 4; }
GLM_FLASH_HD int kdaChunkStrideV(int dv) { return dv + 8; }
GLM_FLASH_HD int kdaChunkStrideA(int C) { return C + 4; }
GLM_FLASH_HD int kdaChunkSmemFloats(int C, int dk, int dv) {
  return 3 * C * kdaChunkStrideK(dk) + C * kdaChunkStrideV(dv) +
         2 * C * kdaChunkStrideA(C) + C + 3 * dk;
}

} // namespace fm
} // namespace glm
