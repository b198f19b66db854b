//===- viterbi.cpp - tail-biting two-pass Viterbi over one trellis tile ---===//
//
// exl3-format.md §7.2. The DP runs over edges (the low 16 − b bits of a state
// that the next position keeps, b = that position's symbol bits). One step
// evaluates all 65536 candidate states; it is written three times: AVX-512,
// AVX2+FMA (both chosen at run time, no -march flags needed) and portable C++.
//
//===----------------------------------------------------------------------===//
#include "runtime/codec/trellis.h"

#include "runtime/base/error.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GLM_TRELLIS_X86 1
#endif

namespace glm::rt::trellis {
namespace {

// Cost of an unreachable edge: far above any real path cost, and adding a
// squared error to it stays finite in fp32.
constexpr float kUnreachable = 1e30f;
// Prev arrays are read with full-vector loads near their end.
constexpr int kPad = 16;

/// One DP step at a position with `kin` symbol bits whose state keeps its low
/// 16 − `kout` bits for the next position. prev: 2^(16−kin) edge costs; next,
/// back: 2^(16−kout) entries; back[e] = top kout bits (h) of the best state.
/// Candidate state s = (h << (16−kout)) | e, its predecessor edge s >> kin.
using DpStep = void (*)(const float *prev, const float *table, float w,
                        int kin, int kout, float *next, uint8_t *back);

void dpStepPortable(const float *prev, const float *table, float w, int kin,
                    int kout, float *next, uint8_t *back) {
  const int nE = 1 << (16 - kout), nH = 1 << kout;
  for (int e = 0; e < nE; ++e)
    next[e] = std::numeric_limits<float>::infinity();
  // h outer so each pass is contiguous in e.
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
dpStepAvx2(const float *prev, const float *table, float w, int kin, int kout,
           float *next, uint8_t *back) {
  const int nE = 1 << (16 - kout), nH = 1 << kout;
  const int stride = 1 << (16 - kout - kin); // prev entries per h
  const __m256 wv = _mm256_set1_ps(w);
  // Lanes of an 8-edge vector share predecessors in groups of 2^kin.
  const __m256i expand = _mm256_srli_epi32(
      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), kin < 3 ? kin : 3);
  const bool broadcast = kin >= 3;
  for (int e0 = 0; e0 < nE; e0 += 8) {
    const float *pp = prev + (e0 >> kin);
    const float *tp = table + e0;
    __m256 acc = _mm256_set1_ps(std::numeric_limits<float>::infinity());
    __m256 arg = _mm256_setzero_ps();
    __m256 hv = _mm256_setzero_ps();
    const __m256 one = _mm256_set1_ps(1.0f);
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
dpStepAvx512(const float *prev, const float *table, float w, int kin,
             int kout, float *next, uint8_t *back) {
  const int nE = 1 << (16 - kout), nH = 1 << kout;
  const int stride = 1 << (16 - kout - kin);
  const __m512 wv = _mm512_set1_ps(w);
  const __m512i expand = _mm512_srli_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      kin < 4 ? kin : 4);
  const bool broadcast = kin >= 4;
  for (int e0 = 0; e0 < nE; e0 += 16) {
    const float *pp = prev + (e0 >> kin);
    const float *tp = table + e0;
    __m512 acc = _mm512_set1_ps(std::numeric_limits<float>::infinity());
    __m512i arg = _mm512_setzero_si512();
    __m512i hv = _mm512_setzero_si512();
    const __m512i one = _mm512_set1_epi32(1);
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

DpStep kernelByName(const char *name) {
#ifdef GLM_TRELLIS_X86
  if (!std::strcmp(name, "avx512"))
    return dpStepAvx512;
  if (!std::strcmp(name, "avx2"))
    return dpStepAvx2;
#endif
  return dpStepPortable;
}

const char *bestKernel() {
  for (const char *k : {"avx512", "avx2"})
    if (cpuHas(k))
      return k;
  return "portable";
}

std::atomic<const char *> &kernelName() {
  static std::atomic<const char *> name{bestKernel()};
  return name;
}

DpStep dpStep() { return kernelByName(kernelName().load()); }

/// Per-thread buffers, reused across tiles.
struct Workspace {
  std::vector<float> a, b;
  std::vector<uint8_t> back;
  std::vector<size_t> backOff;
};

Workspace &workspace() {
  thread_local Workspace ws;
  return ws;
}

/// Runs the DP over `count` positions of the ring starting at `first`;
/// `prev` holds the costs of the edges before `first`. Returns the final cost
/// array (2^(16 − bits[first+count]) entries).
float *runDp(Workspace &ws, const int bits[256], const float *target,
             const float *table, int first, int count, float *prev) {
  DpStep step = dpStep();
  float *cur = prev, *other = cur == ws.a.data() ? ws.b.data() : ws.a.data();
  for (int i = 0; i < count; ++i) {
    int t = (first + i) & 255;
    int kin = bits[t], kout = bits[(t + 1) & 255];
    step(cur, table, target[t], kin, kout, other, ws.back.data() + ws.backOff[t]);
    std::swap(cur, other);
  }
  return cur;
}

/// Follows the stored decisions from edge `e` after position `last` back to
/// position `first`'s state; returns the edge before `first`.
int backtrack(const Workspace &ws, const int bits[256], int last, int first,
              int e, uint16_t *states) {
  for (int t = last;; t = (t + 255) & 255) {
    int kout = bits[(t + 1) & 255];
    int h = ws.back[ws.backOff[t] + e];
    uint32_t s = ((uint32_t)h << (16 - kout)) | (uint32_t)e;
    if (states)
      states[t] = (uint16_t)s;
    e = (int)(s >> bits[t]);
    if (t == first)
      return e;
  }
}

} // namespace

bool setViterbiKernel(const char *name) {
  if (!std::strcmp(name, "auto")) {
    kernelName().store(bestKernel());
    return true;
  }
  for (const char *k : {"avx512", "avx2", "portable"})
    if (!std::strcmp(name, k) && cpuHas(k)) {
      kernelName().store(k);
      return true;
    }
  return false;
}

const char *viterbiKernel() { return kernelName().load(); }

double viterbiTile(const float target[256], Width w, Codebook cb, bool e4m3,
                   uint16_t states[256]) {
  checkWidth(w, cb);
  for (int t = 0; t < 256; ++t)
    check(std::isfinite(target[t]),
          "trellis encoder: non-finite target value at tile position ", t);
  const float *table = codebookFloatTable(cb, e4m3);
  int bits[256];
  for (int t = 0; t < 256; ++t)
    bits[t] = positionBits(w, t);

  Workspace &ws = workspace();
  ws.a.resize((1 << 15) + kPad);
  ws.b.resize((1 << 15) + kPad);
  ws.backOff.resize(257);
  ws.backOff[0] = 0;
  for (int t = 0; t < 256; ++t)
    ws.backOff[t + 1] = ws.backOff[t] + (size_t(1) << (16 - bits[(t + 1) & 255]));
  ws.back.resize(ws.backOff[256]);

  // Pass 1: round the ring from 128 with a free start; the best path's edge
  // before position 0 is the wrap edge E.
  int nStart = 1 << (16 - bits[128]);
  std::fill(ws.a.begin(), ws.a.begin() + nStart, 0.0f);
  float *cost = runDp(ws, bits, target, table, 128, 256, ws.a.data());
  int nEnd = 1 << (16 - bits[128]);
  int best = (int)(std::min_element(cost, cost + nEnd) - cost);
  int wrap = backtrack(ws, bits, 127, 0, best, nullptr);

  // Pass 2: positions 0..255 starting from E only, ending in E: circular.
  int nWrap = 1 << (16 - bits[0]);
  std::fill(ws.a.begin(), ws.a.begin() + nWrap, kUnreachable);
  ws.a[wrap] = 0.0f;
  runDp(ws, bits, target, table, 0, 256, ws.a.data());
  backtrack(ws, bits, 255, 0, wrap, states);

  double err = 0;
  for (int t = 0; t < 256; ++t) {
    double d = (double)table[states[t]] - target[t];
    err += d * d;
  }
  return err;
}

} // namespace glm::rt::trellis
