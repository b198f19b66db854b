//===- viterbi_kernels.cpp - Viterbi DP step kernels ----------------------===//
//
// See viterbi_kernels.h. Every kernel walks the new edges in vectors; for
// each top-bits value h it loads the candidates' codebook values contiguously
// (natural state order) and their predecessors' costs, expanded so that each
// predecessor feeds its 2^kin successors, and keeps a running min and argmin.
//
//===----------------------------------------------------------------------===//
#include "runtime/codec/viterbi_kernels.h"

#include "runtime/base/error.h"

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GLM_TRELLIS_X86 1
#endif

namespace glm::rt::trellis::detail {
namespace {

void stepF32Portable(const float *prev, const float *table, float w, int kin,
                     int kout, float *next, uint8_t *back) {
  const int nE = 1 << (16 - kout), nH = 1 << kout;
  for (int e = 0; e < nE; ++e)
    next[e] = std::numeric_limits<float>::infinity();
  for (int h = 0; h < nH; ++h) {
    const int base = h << (16 - kout);
    for (int e = 0; e < nE; ++e) {
      int s = base | e;
      float d = table[s] - w;
      float c = prev[s >> kin] + d * d;
      bool lt = c < next[e];
      next[e] = lt ? c : next[e];
      back[e] = lt ? (uint8_t)h : back[e];
    }
  }
}

#ifdef GLM_TRELLIS_X86
__attribute__((target("avx2,fma"))) void
stepF32Avx2(const float *prev, const float *table, float w, int kin, int kout,
            float *next, uint8_t *back) {
  const int nE = 1 << (16 - kout), nH = 1 << kout;
  const int stride = 1 << (16 - kout - kin); // prev entries per h
  const __m256 wv = _mm256_set1_ps(w);
  const __m256i expand = _mm256_srli_epi32(
      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), kin < 3 ? kin : 3);
  const bool broadcast = kin >= 3;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int e0 = 0; e0 < nE; e0 += 8) {
    const float *pp = prev + (e0 >> kin);
    const float *tp = table + e0;
    __m256 acc = _mm256_set1_ps(std::numeric_limits<float>::infinity());
    __m256 arg = _mm256_setzero_ps(), hv = _mm256_setzero_ps();
    for (int h = 0; h < nH; ++h) {
      __m256 p = broadcast
                     ? _mm256_broadcast_ss(pp)
                     : _mm256_permutevar8x32_ps(_mm256_loadu_ps(pp), expand);
      __m256 d = _mm256_sub_ps(_mm256_loadu_ps(tp), wv);
      __m256 c = _mm256_fmadd_ps(d, d, p);
      __m256 lt = _mm256_cmp_ps(c, acc, _CMP_LT_OQ);
      acc = _mm256_min_ps(c, acc);
      arg = _mm256_blendv_ps(arg, hv, lt);
      hv = _mm256_add_ps(hv, one);
      pp += stride;
      tp += nE;
    }
    _mm256_storeu_ps(next + e0, acc);
    __m256i ai = _mm256_cvttps_epi32(arg);
    __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(ai),
                                   _mm256_extracti128_si256(ai, 1));
    _mm_storel_epi64((__m128i *)(back + e0), _mm_packus_epi16(w16, w16));
  }
}

__attribute__((target("avx512f,avx512bw"))) void
stepF32Avx512(const float *prev, const float *table, float w, int kin,
              int kout, float *next, uint8_t *back) {
  const int nE = 1 << (16 - kout), nH = 1 << kout;
  const int stride = 1 << (16 - kout - kin);
  const __m512 wv = _mm512_set1_ps(w);
  const __m512i expand = _mm512_srli_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      kin < 4 ? kin : 4);
  const bool broadcast = kin >= 4;
  const __m512i one = _mm512_set1_epi32(1);
  for (int e0 = 0; e0 < nE; e0 += 16) {
    const float *pp = prev + (e0 >> kin);
    const float *tp = table + e0;
    __m512 acc = _mm512_set1_ps(std::numeric_limits<float>::infinity());
    __m512i arg = _mm512_setzero_si512(), hv = _mm512_setzero_si512();
    for (int h = 0; h < nH; ++h) {
      __m512 p = broadcast
                     ? _mm512_set1_ps(*pp)
                     : _mm512_permutexvar_ps(expand, _mm512_loadu_ps(pp));
      __m512 d = _mm512_sub_ps(_mm512_loadu_ps(tp), wv);
      __m512 c = _mm512_fmadd_ps(d, d, p);
      __mmask16 lt = _mm512_cmp_ps_mask(c, acc, _CMP_LT_OQ);
      acc = _mm512_min_ps(c, acc);
      arg = _mm512_mask_mov_epi32(arg, lt, hv);
      hv = _mm512_add_epi32(hv, one);
      pp += stride;
      tp += nE;
    }
    _mm512_storeu_ps(next + e0, acc);
    _mm_storeu_si128((__m128i *)(back + e0), _mm512_cvtepi32_epi8(arg));
  }
}

#endif

bool cpuHas(const char *kernel) {
#ifdef GLM_TRELLIS_X86
  __builtin_cpu_init();
  if (!std::strcmp(kernel, "avx512"))
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw");
  if (!std::strcmp(kernel, "avx2"))
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return !std::strcmp(kernel, "portable");
}

const DpKernels kPortable{"portable", stepF32Portable, stepU16Portable};
#ifdef GLM_TRELLIS_X86
const DpKernels kAvx2{"avx2", stepF32Avx2, stepU16Avx2};
const DpKernels kAvx512{"avx512", stepF32Avx512, stepU16Avx512};
#endif

const DpKernels *byName(const char *name) {
#ifdef GLM_TRELLIS_X86
  if (!std::strcmp(name, "avx512"))
    return &kAvx512;
  if (!std::strcmp(name, "avx2"))
    return &kAvx2;
#endif
  return &kPortable;
}

const DpKernels *best() {
  for (const char *k : {"avx512", "avx2"})
    if (cpuHas(k))
      return byName(k);
  return &kPortable;
}

std::atomic<const DpKernels *> &current() {
  static std::atomic<const DpKernels *> k{best()};
  return k;
}

} // namespace

const DpKernels &dpKernels() { return *current().load(); }

} // namespace glm::rt::trellis::detail

namespace glm::rt::trellis {

bool setViterbiKernel(const char *name) {
  using namespace detail;
  if (!std::strcmp(name, "auto")) {
    current().store(best());
    return true;
  }
  for (const char *k : {"avx512", "avx2", "portable"})
    if (!std::strcmp(name, k) && cpuHas(k)) {
      current().store(byName(k));
      return true;
    }
  return false;
}

const char *viterbiKernel() { return detail::dpKernels().name; }

} // namespace glm::rt::trellis
