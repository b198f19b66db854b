//===- encoder.cpp - Hessian-free trellis quantization of a matrix --------===//
//
// exl3-format.md §7.3: signs, Hadamard on both sides, one scale so the RMS
// matches the codebook's std (folded into suh), a tail-biting Viterbi per
// 16x16 tile in trellis-position order, tiles packed in the requested order.
// The stored suh/svh are fp16 values and Q is derived from exactly those, so
// reconstructInPlace(decodeMatrix(...)) inverts the transform.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/parallel.h"
#include "runtime/codec/trellis.h"

#include "runtime/base/error.h"
#include "runtime/base/numeric.h"

#include <cmath>
#include <random>

namespace glm::rt::trellis {

/// The given signs, validated, or random ±1 from the generator.
static std::vector<float> chooseSigns(const std::vector<float> &given,
                                      int64_t n, std::mt19937_64 &rng,
                                      const char *side) {
  std::vector<float> s(n);
  if (given.empty()) {
    for (auto &x : s)
      x = (rng() >> 63) ? -1.0f : 1.0f;
    return s;
  }
  check((int64_t)given.size() == n, "trellis encoder: ", side, " signs have ",
        given.size(), " entries, the matrix side has ", n);
  for (int64_t i = 0; i < n; ++i) {
    float r = roundToHalf(given[i]);
    check(std::isfinite(r) && r != 0.0f, "trellis encoder: ", side,
          " sign/scale ", i, " = ", given[i],
          " is zero or not representable in fp16");
    s[i] = given[i];
  }
  return s;
}

/// RMS of diag(1/su)·W·diag(1/sv), which the orthonormal Hadamards keep.
static double scaledRms(const float *w, int64_t rows, int64_t cols,
                        const std::vector<float> &su,
                        const std::vector<float> &sv) {
  double sum = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double x = (double)w[i * cols + j] / ((double)su[i] * sv[j]);
      sum += x * x;
    }
  check(std::isfinite(sum),
        "trellis encoder: the matrix holds NaN or infinite values");
  return std::sqrt(sum / ((double)rows * cols));
}

Quantized quantizeMatrix(const float *w, int64_t rows, int64_t cols,
                         const EncodeOptions &opt) {
  check(rows > 0 && cols > 0 && rows % 128 == 0 && cols % 128 == 0,
        "trellis encoder: matrix ", rows, " x ", cols,
        " must be a positive multiple of 128 on both sides (pad it)");
  checkWidth(opt.width, opt.codebook, "trellis encoder");
  std::mt19937_64 rng(opt.seed);
  std::vector<float> su = chooseSigns(opt.inSigns, rows, rng, "input");
  std::vector<float> sv = chooseSigns(opt.outSigns, cols, rng, "output");

  double rms = scaledRms(w, rows, cols, su, sv);
  float scale = rms > 0 ? roundToHalf((float)(rms / codebookStd(opt.codebook)))
                        : 0.0f;
  check(rms == 0 || (std::isfinite(scale) && scale > 0),
        "trellis encoder: matrix RMS ", rms,
        " puts the scale outside the fp16 range");

  Quantized out;
  out.suh.resize(rows);
  out.svh.resize(cols);
  for (int64_t i = 0; i < rows; ++i)
    out.suh[i] = roundToHalf(su[i] * scale);
  for (int64_t j = 0; j < cols; ++j)
    out.svh[j] = roundToHalf(sv[j]);

  // Q = H · diag(1/suh) · W · diag(1/svh) · H (zero where suh is 0).
  std::vector<float> q(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float d = out.suh[i] * out.svh[j];
      q[i * cols + j] = d != 0.0f ? w[i * cols + j] / d : 0.0f;
    }
  hadamardRows(q.data(), rows, cols);
  hadamardCols(q.data(), rows, cols);

  const int64_t tilesC = cols / 16, tiles = rows / 16 * tilesC;
  const int wpt = opt.width.wordsPerTile();
  out.tileWords.assign(tiles * wpt, 0);
  glm::rt::parallelFor(tiles, 4, opt.threads,
                      [&](int64_t begin, int64_t end, int) {
                        float target[256];
                        uint16_t states[256];
                        for (int64_t k = begin; k < end; ++k) {
                          int64_t ti = k / tilesC, tj = k % tilesC;
                          const float *base = q.data() + ti * 16 * cols + tj * 16;
                          for (int t = 0; t < 256; ++t)
                            target[t] = base[permRow(t) * cols + permCol(t)];
                          viterbiTile(target, opt.width, opt.codebook, opt.e4m3,
                                      states);
                          int64_t idx =
                              tileIndex(opt.order, rows, cols, ti, tj);
                          packTile(states, opt.width,
                                   out.tileWords.data() + idx * wpt);
                        }
                      });
  return out;
}

} // namespace glm::rt::trellis
