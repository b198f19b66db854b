//===- twin_misc.cpp - twins of the load-time and TP glue families --------===//
//
// transpose, onehot, vocab_gather, fill_random and fill_f32: data movement
// and integer hashing, the same bits as CUDA.
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/helper_twins.h"
#include "runtime/twins/twin_common.h"

#include <algorithm>

namespace glm::rt::twins {

namespace {
int64_t coveredX(const Launch &l) { return (int64_t)l.grid[0] * l.block[0]; }
} // namespace

// transpose(src, dst, rows, cols); grid (ceil(rows*cols/T)).
void transposeTwin(const Launch &l) {
  const float *src = l.ptr<const float>(0);
  float *dst = l.ptr<float>(1);
  const int64_t rows = l.i64(2);
  const int cols = l.i32(3);
  const int64_t n = std::min<int64_t>(rows * cols, coveredX(l));
  for (int64_t i = 0; i < n; ++i)
    dst[i] = src[(i % cols) * rows + i / cols];
}

// onehot(X, nb, n, c0); grid (ceil(n/T), nb).
void onehotTwin(const Launch &l) {
  float *X = l.ptr<float>(0);
  const int nb = l.i32(1), n = l.i32(2), c0 = l.i32(3);
  const int64_t m = std::min<int64_t>(n, coveredX(l));
  for (int b = 0; b < (int)std::min<uint32_t>(l.grid[1], (uint32_t)nb); ++b)
    for (int64_t c = 0; c < m; ++c)
      X[(int64_t)b * n + c] = c == c0 + b ? 1.0f : 0.0f;
}

// vocab_gather(g, vb, B, maxCount, out, V); grid (ceil(maxCount/T), N, B).
void vocabGatherTwin(const Launch &l) {
  const float *g = l.ptr<const float>(0);
  const long long *vb = l.ptr<const long long>(1);
  const int B = l.i32(2), maxCount = l.i32(3);
  float *out = l.ptr<float>(4);
  const int V = l.i32(5);
  for (uint32_t b = 0; b < l.grid[2]; ++b)
    for (uint32_t r = 0; r < l.grid[1]; ++r) {
      const int64_t beg = vb[r],
                    cnt = std::min<int64_t>(vb[r + 1] - vb[r], coveredX(l));
      for (int64_t i = 0; i < cnt; ++i)
        out[(int64_t)b * V + beg + i] = g[((int64_t)r * B + b) * maxCount + i];
    }
}

// fill_random(p, n, seed, mask): splitmix64 of seed + golden * (i + 1).
void fillRandomTwin(const Launch &l) {
  uint32_t *p = l.ptr<uint32_t>(0);
  const int64_t n = l.i64(1);
  const uint64_t seed = (uint64_t)l.i64(2);
  const uint32_t mask = (uint32_t)l.i64(3);
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = (uint32_t)z & mask;
  }
}

// fill_f32(p, n, v).
void fillF32Twin(const Launch &l) {
  float *p = l.ptr<float>(0);
  const int64_t n = l.i64(1);
  const float v = l.f32(2);
  std::fill(p, p + std::max<int64_t>(n, 0), v);
}

// fixed_to_f32(x, post, y, rows, n): a warp per 128-column block.
void fixedToF32Twin(const Launch &l) {
  const long long *x = l.ptr<const long long>(0);
  const float *post = l.ptr<const float>(1);
  float *y = l.ptr<float>(2);
  const int rows = l.i32(3), n = l.i32(4);
  check(!post || n % 128 == 0, "twin of fixed_to_f32: n ", n,
        " is not a multiple of 128 with a post vector: CUDA traps");
  const int64_t perRow = (n + 127) / 128;
  const int64_t blocks = std::min<int64_t>(
      int64_t(rows) * perRow, int64_t(l.grid[0]) * (l.block[0] / 32));
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t r = blk / perRow, q = blk % perRow, base = r * n;
    float v[128];
    for (int j = 0; j < 128; ++j)
      v[j] = 128 * q + j < n ? fromFixed(x[base + 128 * q + j]) : 0.0f;
    if (post) {
      hadamard128F32(v);
      for (int j = 0; j < 128; ++j)
        v[j] *= kInvSqrt128 * post[128 * q + j];
    }
    for (int j = 0; j < 128; ++j)
      if (128 * q + j < n)
        y[base + 128 * q + j] = v[j];
  }
}

} // namespace glm::rt::twins
