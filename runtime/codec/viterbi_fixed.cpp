//===- viterbi_fixed.cpp - 16-bit fixed-point Viterbi DP steps ------------===//
//
// The low widths (K <= 4) run the DP in saturating uint16 costs. To keep
// every load contiguous, a step walks edges as [l][m] (l = the low kin bits of
// the new edge, m = the rest), where the predecessor of candidate (h, m, l) is
// prev[h·M + m] for all l; a permuted codebook table matches that order. The
// [l][m] result is then interleaved back to natural edge order with kin
// perfect shuffles (each rotates the index bits by one).
//
//===----------------------------------------------------------------------===//
#include "runtime/codec/viterbi_kernels.h"

#include "runtime/base/error.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GLM_TRELLIS_X86 1
#endif

namespace glm::rt::trellis::detail {

const int16_t *fixedTablePermuted(Codebook cb, bool e4m3, int kin, int kout) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<int16_t[]>> cache;
  check(kin >= 1 && kout >= 1 && kin + kout <= 8,
        "fixed-point Viterbi: unsupported step (", kin, ", ", kout, ")");
  int key = (((int)cb * 2 + (e4m3 ? 1 : 0)) * 16 + kin) * 16 + kout;
  std::lock_guard<std::mutex> lock(mu);
  auto &slot = cache[key];
  if (!slot) {
    const float *v = codebookFloatTable(cb, e4m3);
    const int nL = 1 << kin, nH = 1 << kout, nM = 1 << (16 - kin - kout);
    slot.reset(new int16_t[65536]);
    for (int l = 0; l < nL; ++l)
      for (int h = 0; h < nH; ++h)
        for (int m = 0; m < nM; ++m) {
          int s = (h << (16 - kout)) | (m << kin) | l;
          // E4M3 rounding can reach exactly ±4.0, one unit past int16:
          // clamp (the DP is then off by 2^-13 there; the reported error is
          // recomputed exactly).
          float x = std::max(-32767.0f, std::min(32767.0f, v[s] * kFixedScale));
          slot[((size_t)l * nH + h) * nM + m] = (int16_t)std::lrint(x);
        }
  }
  return slot.get();
}

namespace {

/// out[2i] = in[i], out[2i+1] = in[n/2 + i]: rotates index bits left by one.
void perfectShufflePortable(const uint16_t *in, uint16_t *out, int n) {
  const uint16_t *a = in, *b = in + n / 2;
  for (int i = 0; i < n / 2; ++i) {
    out[2 * i] = a[i];
    out[2 * i + 1] = b[i];
  }
}

#ifdef GLM_TRELLIS_X86
__attribute__((target("avx2"))) void
perfectShuffleAvx2(const uint16_t *in, uint16_t *out, int n) {
  const uint16_t *a = in, *b = in + n / 2;
  for (int i = 0; i < n / 2; i += 16) {
    __m256i x = _mm256_loadu_si256((const __m256i *)(a + i));
    __m256i y = _mm256_loadu_si256((const __m256i *)(b + i));
    __m256i lo = _mm256_unpacklo_epi16(x, y), hi = _mm256_unpackhi_epi16(x, y);
    _mm256_storeu_si256((__m256i *)(out + 2 * i),
                        _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256((__m256i *)(out + 2 * i + 16),
                        _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

__attribute__((target("avx512f,avx512bw"))) void
perfectShuffleAvx512(const uint16_t *in, uint16_t *out, int n) {
  alignas(64) uint16_t i0[32], i1[32];
  for (int j = 0; j < 32; ++j) {
    i0[j] = (uint16_t)((j & 1 ? 32 : 0) + j / 2);
    i1[j] = (uint16_t)((j & 1 ? 32 : 0) + 16 + j / 2);
  }
  const __m512i idx0 = _mm512_load_si512(i0), idx1 = _mm512_load_si512(i1);
  const uint16_t *a = in, *b = in + n / 2;
  for (int i = 0; i < n / 2; i += 32) {
    __m512i x = _mm512_loadu_si512(a + i), y = _mm512_loadu_si512(b + i);
    _mm512_storeu_si512(out + 2 * i, _mm512_permutex2var_epi16(x, idx0, y));
    _mm512_storeu_si512(out + 2 * i + 32,
                        _mm512_permutex2var_epi16(x, idx1, y));
  }
}
#endif

using Shuffle = void (*)(const uint16_t *, uint16_t *, int);

/// Interleaves the [l][m] costs, computed into next or scratch so that the
/// last of the kin shuffles lands in next.
void interleave(Shuffle shuffle, uint16_t *next, uint16_t *scratch, int kin,
                int n) {
  uint16_t *src = (kin & 1) ? scratch : next;
  uint16_t *dst = (kin & 1) ? next : scratch;
  for (int r = 0; r < kin; ++r) {
    shuffle(src, dst, n);
    std::swap(src, dst);
  }
}

inline uint16_t *firstOutput(uint16_t *next, uint16_t *scratch, int kin) {
  return (kin & 1) ? scratch : next;
}

} // namespace

uint16_t stepU16Portable(const uint16_t *prev, const int16_t *table,
                         int16_t w, int kin, int kout, uint16_t *next,
                         uint16_t *scratch, uint8_t *back) {
  const int nL = 1 << kin, nH = 1 << kout, nM = 1 << (16 - kout - kin);
  uint16_t *out = firstOutput(next, scratch, kin);
  uint16_t best = 0xFFFF;
  for (int l = 0; l < nL; ++l) {
    uint16_t *o = out + l * nM;
    uint8_t *bk = back + l * nM;
    std::fill(o, o + nM, 0xFFFF);
    for (int h = 0; h < nH; ++h) {
      const uint16_t *p = prev + h * nM;
      const int16_t *v = table + ((size_t)l * nH + h) * nM;
      for (int m = 0; m < nM; ++m) {
        // Saturating 16-bit arithmetic, as the vector kernels do it.
        int d = std::max(-32768, std::min(32767, (int)v[m] - w));
        int c = std::min(0xFFFF, (int)p[m] + ((d * d) >> 16));
        bool lt = c < o[m];
        o[m] = lt ? (uint16_t)c : o[m];
        bk[m] = lt ? (uint8_t)h : bk[m];
      }
    }
    for (int m = 0; m < nM; ++m)
      best = std::min(best, o[m]);
  }
  interleave(perfectShufflePortable, next, scratch, kin, 1 << (16 - kout));
  return best;
}

#ifdef GLM_TRELLIS_X86
__attribute__((target("avx2"))) uint16_t
stepU16Avx2(const uint16_t *prev, const int16_t *table, int16_t w, int kin,
            int kout, uint16_t *next, uint16_t *scratch, uint8_t *back) {
  const int nL = 1 << kin, nH = 1 << kout, nM = 1 << (16 - kout - kin);
  uint16_t *out = firstOutput(next, scratch, kin);
  const __m256i wv = _mm256_set1_epi16(w), one = _mm256_set1_epi16(1);
  __m256i minv = _mm256_set1_epi16(-1);
  for (int l = 0; l < nL; ++l)
    for (int m0 = 0; m0 < nM; m0 += 16) {
      const uint16_t *pp = prev + m0;
      const int16_t *tp = table + (size_t)l * nH * nM + m0;
      __m256i acc = _mm256_set1_epi16(-1); // 0xFFFF
      __m256i arg = _mm256_setzero_si256(), hv = _mm256_setzero_si256();
      for (int h = 0; h < nH; ++h) {
        __m256i p = _mm256_loadu_si256((const __m256i *)pp);
        __m256i d = _mm256_subs_epi16(
            _mm256_loadu_si256((const __m256i *)tp), wv);
        __m256i c = _mm256_adds_epu16(p, _mm256_mulhi_epi16(d, d));
        __m256i mn = _mm256_min_epu16(c, acc);
        __m256i keep = _mm256_cmpeq_epi16(mn, acc); // c >= acc
        arg = _mm256_blendv_epi8(hv, arg, keep);
        acc = mn;
        hv = _mm256_add_epi16(hv, one);
        pp += nM;
        tp += nM;
      }
      _mm256_storeu_si256((__m256i *)(out + l * nM + m0), acc);
      minv = _mm256_min_epu16(minv, acc);
      __m128i b8 = _mm_packus_epi16(_mm256_castsi256_si128(arg),
                                    _mm256_extracti128_si256(arg, 1));
      _mm_storeu_si128((__m128i *)(back + l * nM + m0), b8);
    }
  interleave(perfectShuffleAvx2, next, scratch, kin, 1 << (16 - kout));
  __m128i m = _mm_min_epu16(_mm256_castsi256_si128(minv),
                            _mm256_extracti128_si256(minv, 1));
  return (uint16_t)_mm_extract_epi16(_mm_minpos_epu16(m), 0);
}

__attribute__((target("avx512f,avx512bw"))) uint16_t
stepU16Avx512(const uint16_t *prev, const int16_t *table, int16_t w, int kin,
              int kout, uint16_t *next, uint16_t *scratch, uint8_t *back) {
  const int nL = 1 << kin, nH = 1 << kout, nM = 1 << (16 - kout - kin);
  uint16_t *out = firstOutput(next, scratch, kin);
  const __m512i wv = _mm512_set1_epi16(w), one = _mm512_set1_epi16(1);
  __m512i minv = _mm512_set1_epi16(-1);
  for (int l = 0; l < nL; ++l)
    for (int m0 = 0; m0 < nM; m0 += 32) {
      const uint16_t *pp = prev + m0;
      const int16_t *tp = table + (size_t)l * nH * nM + m0;
      __m512i acc = _mm512_set1_epi16(-1);
      __m512i arg = _mm512_setzero_si512(), hv = _mm512_setzero_si512();
      for (int h = 0; h < nH; ++h) {
        __m512i p = _mm512_loadu_si512(pp);
        __m512i d = _mm512_subs_epi16(_mm512_loadu_si512(tp), wv);
        __m512i c = _mm512_adds_epu16(p, _mm512_mulhi_epi16(d, d));
        __mmask32 lt = _mm512_cmplt_epu16_mask(c, acc);
        acc = _mm512_min_epu16(c, acc);
        arg = _mm512_mask_mov_epi16(arg, lt, hv);
        hv = _mm512_add_epi16(hv, one);
        pp += nM;
        tp += nM;
      }
      _mm512_storeu_si512(out + l * nM + m0, acc);
      minv = _mm512_min_epu16(minv, acc);
      _mm256_storeu_si256((__m256i *)(back + l * nM + m0),
                          _mm512_cvtepi16_epi8(arg));
    }
  interleave(perfectShuffleAvx512, next, scratch, kin, 1 << (16 - kout));
  alignas(64) uint16_t lanes[32];
  _mm512_store_si512(lanes, minv);
  return *std::min_element(lanes, lanes + 32);
}
#endif

} // namespace glm::rt::trellis::detail
