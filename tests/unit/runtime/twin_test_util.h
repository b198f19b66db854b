//===- twin_test_util.h - helpers of the codegen twin tests ---------------===//
//
// Launch building for runtime/twins (host pointers and immediates in the
// family's parameter order), random trellis blobs and float64 references
// (Hadamard-128, errors relative to max|ref|) shared by the twin tests.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/codegen.h"
#include "runtime/base/error.h"
#include "runtime/base/numeric.h"
#include "runtime/codec/trellis.h"
#include "runtime/twins/twin.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace glm::twintest {

using glm::rt::twins::Arg;
using glm::rt::twins::Launch;

inline Arg P(const void *p) {
  Arg a;
  a.p = const_cast<void *>(p);
  return a;
}
inline Arg I(int64_t v) {
  Arg a;
  a.i = v;
  return a;
}
inline Arg F(double v) {
  Arg a;
  a.f = v;
  return a;
}

/// A launch of `family` with template args `targs` (kept alive by the
/// caller), grid (gx, gy) and block bx.
inline Launch launch(const std::string &family,
                     const glm::plan::KeyValues &targs, unsigned gx,
                     unsigned gy, unsigned bx, std::vector<Arg> args,
                     unsigned smem = 0) {
  Launch l;
  l.family = family;
  l.templateArgs = &targs;
  l.grid[0] = gx, l.grid[1] = gy;
  l.block[0] = bx;
  l.smemBytes = smem;
  l.args = std::move(args);
  return l;
}

/// Runs the twin of l.family (which must exist).
inline void runTwin(const Launch &l) {
  auto fn = glm::rt::twins::findTwin(l.family);
  ASSERT_NE(fn, nullptr) << l.family;
  fn(l);
}

/// Random 16-bit words appended to `blob` at a 256-byte boundary (every
/// word sequence is a valid tail-biting trellis stream); returns the offset.
inline size_t addWords(std::vector<uint8_t> &blob, std::mt19937 &rng,
                       size_t words) {
  const size_t o = (blob.size() + 255) / 256 * 256;
  blob.resize(o + words * 2);
  for (size_t i = 0; i < words; ++i) {
    const uint16_t w = uint16_t(rng());
    std::memcpy(&blob[o + 2 * i], &w, 2);
  }
  return o;
}

/// Decoded matrix (rows x cols, in x out) of a blob region.
inline std::vector<float> decoded(const uint8_t *p, int64_t rows, int64_t cols,
                                  int k, glm::rt::trellis::Codebook cb,
                                  bool e4m3, glm::rt::trellis::TileOrder ord) {
  std::vector<float> q(size_t(rows) * cols);
  glm::rt::trellis::decodeMatrix(reinterpret_cast<const uint16_t *>(p), rows,
                                 cols, glm::rt::trellis::Width::bits(k), cb,
                                 e4m3, ord, q.data());
  return q;
}

/// y = H128 x / sqrt(128) on each 128-block (float64).
inline void hadamardRef(double *v, size_t n) {
  for (size_t b = 0; b < n; b += 128) {
    double *p = v + b;
    for (int len = 1; len < 128; len <<= 1)
      for (int i = 0; i < 128; i += 2 * len)
        for (int j = i; j < i + len; ++j) {
          const double a = p[j], c = p[j + len];
          p[j] = a + c;
          p[j + len] = a - c;
        }
    for (int i = 0; i < 128; ++i)
      p[i] /= std::sqrt(128.0);
  }
}

inline std::vector<float> randn(std::mt19937 &rng, size_t n, float sd = 1) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(rng);
  return v;
}

/// max|got - ref| / max|ref| over n elements; NaN when any got is not
/// finite.
inline double relErr(const float *got, const double *ref, size_t n) {
  double maxAbs = 0, maxRef = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i]))
      return NAN;
    maxAbs = std::max(maxAbs, std::fabs(got[i] - ref[i]));
    maxRef = std::max(maxRef, std::fabs(ref[i]));
  }
  return maxRef > 0 ? maxAbs / maxRef : maxAbs;
}

/// Expects relErr(got, ref) <= tol and prints the measured error (the
/// margin to the stated tolerance is part of what a test documents).
inline void expectRel(const std::string &what, const float *got,
                      const double *ref, size_t n, double tol) {
  const double e = relErr(got, ref, n);
  std::printf("[twin] %-56s rel=%.3g tol=%.3g\n", what.c_str(), e, tol);
  EXPECT_LE(e, tol) << what;
}

/// Storage bytes of values in f32 (0), f16 (1) or bf16 (2), and the
/// values as stored.
inline float roundTo(int dt, float v) {
  if (dt == 1)
    return glm::rt::roundToHalf(v);
  if (dt == 2)
    return glm::rt::bf16ToFloat(glm::rt::floatToBf16(v));
  return v;
}
inline std::vector<uint8_t> storeAs(int dt, const std::vector<float> &v) {
  std::vector<uint8_t> out(v.size() * (dt == 0 ? 4 : 2) + 4);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == 0) {
      std::memcpy(&out[4 * i], &v[i], 4);
    } else {
      const uint16_t h =
          dt == 1 ? glm::rt::floatToHalf(v[i]) : glm::rt::floatToBf16(v[i]);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}
inline const char *dtName(int dt) {
  return dt == 0 ? "f32" : dt == 1 ? "f16" : "bf16";
}


/// One launch of a family's twin on host memory, arguments appended in ABI
/// order (p / i / f), template args beyond the block size by targ(); run()
/// checks the argument count against the family and calls the twin.
class Call {
public:
  Call(const char *family, uint32_t gx, uint32_t gy, uint32_t gz,
       uint32_t block) {
    l_.family = family;
    l_.grid[0] = gx;
    l_.grid[1] = gy;
    l_.grid[2] = gz;
    l_.block[0] = block;
    targs_["threads"] = std::to_string(block);
  }
  Call &targ(const std::string &key, const std::string &value) {
    targs_[key] = value;
    return *this;
  }
  Call &p(const void *v) {
    l_.args.push_back(P(v));
    return *this;
  }
  Call &i(int64_t v) {
    l_.args.push_back(I(v));
    return *this;
  }
  Call &f(double v) {
    l_.args.push_back(F(v));
    return *this;
  }
  /// The KV families' trailing (pages, pageShift) of an unpaged cache
  /// (kv::SlotRows): a null page table.
  Call &unpaged() { return p(nullptr).i(0); }
  void run() {
    l_.templateArgs = &targs_; // here: a Call may have been moved
    ASSERT_EQ(l_.args.size(),
              glm::codegen::familyInfo(l_.family).kernelParams.size())
        << l_.family;
    auto fn = glm::rt::twins::findTwin(l_.family);
    ASSERT_NE(fn, nullptr) << l_.family;
    fn(l_);
  }

private:
  Launch l_;
  glm::plan::KeyValues targs_;
};


} // namespace glm::twintest
