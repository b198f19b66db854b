//===- viterbi.cpp - tail-biting two-pass Viterbi over one trellis tile ---===//
//
// exl3-format.md §7.2. The DP runs over edges (the low 16 − b bits of a state
// that the next position keeps, b = that position's symbol bits). Pass 1 runs
// across the wrap point (positions 192..255, 0..63) with a free start to find
// the wrap edge E; pass 2 runs 0..255 from E only and backtracks from E, so
// the path is circular.
// Widths up to 4 bits run the DP in 16-bit fixed point (the error of a path is
// then counted in units of 2^-10, far below the per-position error), wider
// ones in fp32; the reported error is always recomputed exactly.
//
//===----------------------------------------------------------------------===//
#include "runtime/codec/trellis.h"
#include "runtime/codec/viterbi_kernels.h"

#include "runtime/base/error.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace glm::rt::trellis {
namespace {

using detail::kDpPad;
constexpr int kPass1Span = 128;

/// Per-thread buffers, reused across tiles.
struct Workspace {
  std::vector<float> fa, fb;
  std::vector<uint16_t> ua, ub, scratch;
  std::vector<uint8_t> back;
  size_t backOff[257];
};

Workspace &workspace() {
  thread_local Workspace ws;
  return ws;
}

/// fp32 costs.
struct F32Dp {
  using Cost = float;
  static constexpr float kFree = 0.0f, kUnreachable = 1e30f;
  const float *table;
  detail::DpStepF32 step;
  void run(Cost *prev, const float *target, int t, int kin, int kout,
           Cost *next, uint8_t *back) const {
    step(prev, table, target[t], kin, kout, next, back);
  }
  static int backIndex(int e, int, int) { return e; }
};

/// 16-bit fixed-point costs, renormalised before they can saturate.
struct U16Dp {
  using Cost = uint16_t;
  static constexpr uint16_t kFree = 0, kUnreachable = detail::kFixedUnreachable;
  const int16_t *tables[9][9]; // [kin][kout], the combinations in use
  detail::DpStepU16 step;
  uint16_t *scratch;
  void run(Cost *prev, const float *target, int t, int kin, int kout,
           Cost *next, uint8_t *back) const {
    float x = std::max(-32767.0f,
                       std::min(32767.0f, target[t] * detail::kFixedScale));
    uint16_t m = step(prev, tables[kin][kout], (int16_t)std::lrint(x), kin,
                      kout, next, scratch, back);
    // Subtract the minimum once costs grow large; unreachable entries (pass 2
    // start) are long gone by then: every edge is reachable after 16 steps.
    if (m >= 16384) {
      int n = 1 << (16 - kout);
      for (int e = 0; e < n; ++e)
        next[e] = (uint16_t)(next[e] - m);
    }
  }
  static int backIndex(int e, int kin, int kout) {
    return detail::backIndexU16(e, kin, kout);
  }
};

template <class Dp>
typename Dp::Cost *runDp(const Dp &dp, Workspace &ws, const int bits[256],
                         const float *target, int first, int count,
                         typename Dp::Cost *cur,
                         typename Dp::Cost *other) {
  for (int i = 0; i < count; ++i) {
    int t = (first + i) & 255;
    dp.run(cur, target, t, bits[t], bits[(t + 1) & 255], other,
           ws.back.data() + ws.backOff[t]);
    std::swap(cur, other);
  }
  return cur;
}

/// Follows the stored decisions from edge `e` after position `last` back to
/// position `first`'s state; returns the edge before `first`.
template <class Dp>
int backtrack(const Workspace &ws, const int bits[256], int last, int first,
              int e, uint16_t *states) {
  for (int t = last;; t = (t + 255) & 255) {
    int kout = bits[(t + 1) & 255];
    int h = ws.back[ws.backOff[t] + Dp::backIndex(e, bits[t], kout)];
    uint32_t s = ((uint32_t)h << (16 - kout)) | (uint32_t)e;
    if (states)
      states[t] = (uint16_t)s;
    e = (int)(s >> bits[t]);
    if (t == first)
      return e;
  }
}

/// Both passes; returns false if the path came out non-circular (only
/// possible if fixed-point saturation misled the DP).
template <class Dp>
bool twoPass(const Dp &dp, std::vector<typename Dp::Cost> &a,
             std::vector<typename Dp::Cost> &b, Workspace &ws,
             const int bits[256], const float *target, uint16_t states[256]) {
  a.resize((1 << 15) + kDpPad);
  b.resize((1 << 15) + kDpPad);
  // Pass 1 spans kPass1Span positions centred on the wrap (the spec's full
  // ring from 128 is span 256). Survivor paths merge within a few 16-bit
  // windows, so the wrap edge hardly depends on positions further away:
  // measured on Gaussian tiles, span 128 costs +0.2..0.5 % MSE at K = 2..4
  // and saves a quarter of the work.
  const int span = kPass1Span;
  int first = (256 - span / 2) & 255;
  int nFirst = 1 << (16 - bits[first]);
  std::fill(a.begin(), a.begin() + nFirst, Dp::kFree);
  auto *cost = runDp(dp, ws, bits, target, first, span, a.data(), b.data());
  int nLast = 1 << (16 - bits[span / 2]);
  int best = (int)(std::min_element(cost, cost + nLast) - cost);
  int wrap = backtrack<Dp>(ws, bits, span / 2 - 1, 0, best, nullptr);

  std::fill(a.begin(), a.begin() + (1 << (16 - bits[0])), Dp::kUnreachable);
  a[wrap] = Dp::kFree;
  runDp(dp, ws, bits, target, 0, 256, a.data(), b.data());
  return backtrack<Dp>(ws, bits, 255, 0, wrap, states) == wrap;
}

} // namespace

double viterbiTile(const float target[256], Width w, Codebook cb, bool e4m3,
                   uint16_t states[256]) {
  checkWidth(w, cb);
  for (int t = 0; t < 256; ++t)
    check(std::isfinite(target[t]),
          "trellis encoder: non-finite target value at tile position ", t);
  int bits[256];
  for (int t = 0; t < 256; ++t)
    bits[t] = positionBits(w, t);

  Workspace &ws = workspace();
  ws.backOff[0] = 0;
  for (int t = 0; t < 256; ++t)
    ws.backOff[t + 1] =
        ws.backOff[t] + (size_t(1) << (16 - bits[(t + 1) & 255]));
  ws.back.resize(ws.backOff[256]);

  const detail::DpKernels &k = detail::dpKernels();
  bool done = false;
  if (w.twiceBits <= 8) {
    U16Dp dp{};
    dp.step = k.u16;
    ws.scratch.resize(1 << 15);
    dp.scratch = ws.scratch.data();
    for (int t = 0; t < 2; ++t)
      dp.tables[bits[t]][bits[t + 1]] =
          detail::fixedTablePermuted(cb, e4m3, bits[t], bits[t + 1]);
    done = twoPass(dp, ws.ua, ws.ub, ws, bits, target, states);
  }
  if (!done) {
    F32Dp dp{codebookFloatTable(cb, e4m3), k.f32};
    done = twoPass(dp, ws.fa, ws.fb, ws, bits, target, states);
    check(done, "trellis encoder: Viterbi produced a non-circular path");
  }

  const float *table = codebookFloatTable(cb, e4m3);
  double err = 0;
  for (int t = 0; t < 256; ++t) {
    double d = (double)table[states[t]] - target[t];
    err += d * d;
  }
  return err;
}

} // namespace glm::rt::trellis
