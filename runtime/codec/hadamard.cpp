//===- hadamard.cpp - block Hadamard-128 and trellis reconstruction -------===//
//
// Natural-order Sylvester H128 scaled by 1/sqrt(128), applied per 128-block
// with a fast Walsh–Hadamard transform in fp32 (exl3-format.md §3), and the
// reconstruction W = diag(suh)·H·Q·H·diag(svh) in exllamav3's order
// (exlr8-format.md §5 step 9).
//
//===----------------------------------------------------------------------===//
#include "runtime/base/parallel.h"
#include "runtime/codec/trellis.h"

#include "runtime/base/error.h"

namespace glm::rt::trellis {

// The kernels' constant 0.088388347648 rounds to this float.
static constexpr float kHadScale = 0.0883883476483184405f;

/// One contiguous 128-vector: butterflies, then the scale.
static void fwht128(float *v) {
  for (int h = 1; h < 128; h <<= 1)
    for (int i = 0; i < 128; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
  for (int j = 0; j < 128; ++j)
    v[j] *= kHadScale;
}

/// Left-multiplies the 128-row block starting at `m` (row stride `stride`)
/// restricted to columns [c0, c1): butterflies between whole row segments, so
/// the inner loop is contiguous and vectorizes.
static void fwhtRowBlock(float *m, int64_t stride, int64_t c0, int64_t c1) {
  for (int h = 1; h < 128; h <<= 1)
    for (int i = 0; i < 128; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        float *a = m + j * stride, *b = m + (j + h) * stride;
        for (int64_t c = c0; c < c1; ++c) {
          float x = a[c], y = b[c];
          a[c] = x + y;
          b[c] = x - y;
        }
      }
  for (int j = 0; j < 128; ++j)
    for (int64_t c = c0; c < c1; ++c)
      m[j * stride + c] *= kHadScale;
}

// Columns per work item of the row transform: 128 x 64 floats = 32 KiB.
static constexpr int64_t kColChunk = 64;

/// Row transform, then rows scaled by `rowScale` (may be null).
static void hadamardRowsScaled(float *m, int64_t rows, int64_t cols,
                               const float *rowScale) {
  check(rows % 128 == 0 && cols > 0,
        "hadamardRows: rows must be a positive multiple of 128, got ", rows);
  int64_t chunksPerBlock = (cols + kColChunk - 1) / kColChunk;
  int64_t items = rows / 128 * chunksPerBlock;
  glm::rt::parallelFor(
      items, rows * cols >= (1 << 16) ? 4 : items, 0,
      [&](int64_t b, int64_t e, int) {
        for (int64_t it = b; it < e; ++it) {
          int64_t blk = it / chunksPerBlock, ch = it % chunksPerBlock;
          int64_t c0 = ch * kColChunk, c1 = std::min(cols, c0 + kColChunk);
          float *base = m + blk * 128 * cols;
          fwhtRowBlock(base, cols, c0, c1);
          if (rowScale)
            for (int j = 0; j < 128; ++j) {
              float s = rowScale[blk * 128 + j];
              for (int64_t c = c0; c < c1; ++c)
                base[j * cols + c] *= s;
            }
        }
      });
}

/// Column transform, then columns scaled by `colScale` (may be null).
static void hadamardColsScaled(float *m, int64_t rows, int64_t cols,
                               const float *colScale) {
  check(cols % 128 == 0 && rows > 0,
        "hadamardCols: cols must be a positive multiple of 128, got ", cols);
  glm::rt::parallelFor(
      rows, rows * cols >= (1 << 16) ? 16 : rows, 0,
      [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; ++r) {
          float *row = m + r * cols;
          for (int64_t c = 0; c < cols; c += 128)
            fwht128(row + c);
          if (colScale)
            for (int64_t c = 0; c < cols; ++c)
              row[c] *= colScale[c];
        }
      });
}

void hadamardRows(float *m, int64_t rows, int64_t cols) {
  hadamardRowsScaled(m, rows, cols, nullptr);
}

void hadamardCols(float *m, int64_t rows, int64_t cols) {
  hadamardColsScaled(m, rows, cols, nullptr);
}

void reconstructInPlace(float *q, int64_t rows, int64_t cols, const float *suh,
                        const float *svh) {
  check(rows % 128 == 0 && cols % 128 == 0 && rows > 0 && cols > 0,
        "trellis reconstruction: shape ", rows, " x ", cols,
        " is not a positive multiple of 128 on both sides");
  hadamardRowsScaled(q, rows, cols, suh);
  hadamardColsScaled(q, rows, cols, svh);
}

} // namespace glm::rt::trellis
