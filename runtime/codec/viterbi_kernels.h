//===- viterbi_kernels.h - Viterbi DP step kernels (codec-internal) -------===//
//
// One DP step of the trellis encoder evaluates all 65536 candidate states of
// a position. It comes in fp32 (every width) and in 16-bit fixed point (the
// low widths, twice the lanes and half the table traffic), each for AVX-512,
// AVX2+FMA and portable C++, chosen at run time.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/codec/trellis.h"

#include <cstdint>

namespace glm::rt::trellis::detail {

/// Entries of padding after a prev array (vector loads read past its end).
constexpr int kDpPad = 32;
/// Fixed point: codebook values and targets in units of 2^-13, clamped to
/// int16 (|x| < 4); squared errors come out in units of 2^-10.
constexpr float kFixedScale = 8192.0f;
constexpr uint16_t kFixedUnreachable = 0xFFFF;

/// A position with `kin` symbol bits whose state keeps its low 16 − `kout`
/// bits for the next position. prev: 2^(16−kin) edge costs; next and back:
/// 2^(16−kout) entries. Candidate s = (h << (16−kout)) | e comes from edge
/// s >> kin; back[e] = the best h.
using DpStepF32 = void (*)(const float *prev, const float *table, float w,
                           int kin, int kout, float *next, uint8_t *back);
/// The same in fixed point with saturating uint16 costs; returns min(next).
/// Laid out for contiguous loads: `table` is fixedTablePermuted(kin, kout),
/// back is indexed [l][m] (backIndex), and `scratch` is a second buffer of
/// next's size (edges are computed as [l][m], then interleaved into next).
using DpStepU16 = uint16_t (*)(const uint16_t *prev, const int16_t *table,
                               int16_t w, int kin, int kout, uint16_t *next,
                               uint16_t *scratch, uint8_t *back);

/// Where the fixed-point kernels store edge e's decision: edge e = (m << kin)
/// | l lives at l·2^(16−kout−kin) + m.
inline int backIndexU16(int e, int kin, int kout) {
  return (e & ((1 << kin) - 1)) * (1 << (16 - kout - kin)) + (e >> kin);
}

uint16_t stepU16Portable(const uint16_t *prev, const int16_t *table,
                         int16_t w, int kin, int kout, uint16_t *next,
                         uint16_t *scratch, uint8_t *back);
uint16_t stepU16Avx2(const uint16_t *prev, const int16_t *table, int16_t w,
                     int kin, int kout, uint16_t *next, uint16_t *scratch,
                     uint8_t *back);
uint16_t stepU16Avx512(const uint16_t *prev, const int16_t *table, int16_t w,
                       int kin, int kout, uint16_t *next, uint16_t *scratch,
                       uint8_t *back);

struct DpKernels {
  const char *name;
  DpStepF32 f32;
  DpStepU16 u16;
};

/// The kernels in use (see setViterbiKernel).
const DpKernels &dpKernels();

/// Codebook values in fixed point (round(v · kFixedScale)) laid out
/// [l][h][m] for a step (kin, kout): entry of state (h << (16−kout)) |
/// (m << kin) | l. Built once per combination, thread-safe. kin+kout <= 8.
const int16_t *fixedTablePermuted(Codebook cb, bool e4m3, int kin, int kout);

} // namespace glm::rt::trellis::detail
