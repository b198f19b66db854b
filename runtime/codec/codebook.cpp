//===- codebook.cpp - trellis codebooks, names and widths -----------------===//
//
// 3INST, MCG and MUL1 from their closed forms (exl3-format.md §1.2), the
// 65536-entry fp16 / float tables built once, and the width/codebook checks.
//
//===----------------------------------------------------------------------===//
#include "runtime/codec/trellis.h"

#include "runtime/base/error.h"
#include "runtime/base/numeric.h"

#include <array>
#include <cctype>
#include <cmath>
#include <memory>
#include <string>

namespace glm::rt::trellis {

const char *codebookName(Codebook cb) {
  switch (cb) {
  case Codebook::ThreeInst:
    return "3inst";
  case Codebook::Mcg:
    return "mcg";
  case Codebook::Mul1:
    return "mul1";
  }
  return "unknown";
}

Codebook parseCodebook(const char *name) {
  std::string s = name ? name : "";
  for (char &c : s)
    c = (char)std::tolower((unsigned char)c);
  if (s == "3inst")
    return Codebook::ThreeInst;
  if (s == "mcg")
    return Codebook::Mcg;
  if (s == "mul1")
    return Codebook::Mul1;
  fail("unknown trellis codebook '", name ? name : "",
       "': use 3inst, mcg or mul1");
}

Width Width::fromDouble(double k) {
  double twice = k * 2.0;
  int t = (int)std::lround(twice);
  bool integral = std::isfinite(twice) && twice == (double)t;
  bool ok = integral && ((t % 2 == 0 && t >= 2 && t <= 16) || t == 3 ||
                         t == 5 || t == 7);
  check(ok, "unsupported trellis width ", k,
        " bits: use an integer 1..8 or 1.5, 2.5, 3.5 (MUL1 only)");
  return Width{t};
}

void checkWidth(Width w, Codebook cb, const char *what) {
  int t = w.twiceBits;
  bool ok = (t % 2 == 0 && t >= 2 && t <= 16) || t == 3 || t == 5 || t == 7;
  check(ok, what, ": unsupported trellis width (twice the bits = ", t,
        "): widths are 1..8 or 1.5, 2.5, 3.5");
  check(!w.isHalfInteger() || cb == Codebook::Mul1, what, ": width ",
        w.value(), " is half-integer, which exists only for the mul1 codebook",
        " (this tensor uses ", codebookName(cb),
        "); re-quantize with an integer width or mul1");
}

/// 3INST / MCG: the lop3 bit trick turns each 16-bit half of y into a normal
/// fp16 in ±[0.125, 2); their sum is exact in float, then rounded once.
static uint16_t twoHalfSum(uint32_t y) {
  uint32_t m = (y & 0x8FFF8FFFu) ^ 0x3B603B60u;
  float a = halfToFloat((uint16_t)(m & 0xFFFF));
  float b = halfToFloat((uint16_t)(m >> 16));
  return floatToHalf(a + b);
}

uint16_t codebookHalfBits(Codebook cb, uint32_t state) {
  uint32_t s = state & 0xFFFF;
  switch (cb) {
  case Codebook::ThreeInst:
    return twoHalfSum(s * 89226354u + 64248484u);
  case Codebook::Mcg:
    return twoHalfSum(s * 0xCBAC1FEDu);
  case Codebook::Mul1: {
    uint32_t y = s * 0x83DCD12Du;
    int b = (int)((y & 0xFF) + ((y >> 8) & 0xFF) + ((y >> 16) & 0xFF) +
                  (y >> 24));
    // (1024 + b)·k_inv + k_bias with one rounding = (1774·b − 905216)/2^18;
    // the numerator is an exact float and the division is by a power of 2.
    float v = (float)(1774 * b - 905216) * (1.0f / 262144.0f);
    return floatToHalf(v);
  }
  }
  fail("invalid codebook id ", (int)cb);
}

namespace {
struct Tables {
  std::array<std::unique_ptr<uint16_t[]>, 3> half;
  std::array<std::unique_ptr<float[]>, 6> value; // [cb * 2 + e4m3]
  std::array<double, 3> stddev{};
  Tables() {
    for (int c = 0; c < 3; ++c) {
      half[c].reset(new uint16_t[65536]);
      value[2 * c].reset(new float[65536]);
      value[2 * c + 1].reset(new float[65536]);
      double sum = 0, sum2 = 0;
      for (uint32_t s = 0; s < 65536; ++s) {
        uint16_t h = codebookHalfBits((Codebook)c, s);
        float v = halfToFloat(h);
        half[c][s] = h;
        value[2 * c][s] = v;
        value[2 * c + 1][s] = roundToE4m3(v);
        sum += v;
        sum2 += (double)v * v;
      }
      double mean = sum / 65536;
      stddev[c] = std::sqrt(sum2 / 65536 - mean * mean);
    }
  }
};
} // namespace

// A function-local static is initialised exactly once, thread-safely (C++11).
static const Tables &tables() {
  static const Tables t;
  return t;
}

static int cbIndex(Codebook cb) {
  int c = (int)cb;
  check(c >= 0 && c < 3, "invalid codebook id ", c);
  return c;
}

const uint16_t *codebookTable(Codebook cb) {
  return tables().half[cbIndex(cb)].get();
}

const float *codebookFloatTable(Codebook cb, bool e4m3) {
  return tables().value[2 * cbIndex(cb) + (e4m3 ? 1 : 0)].get();
}

float codebookValue(Codebook cb, uint32_t state, bool e4m3) {
  return codebookFloatTable(cb, e4m3)[state & 0xFFFF];
}

double codebookStd(Codebook cb) {
  // 3INST's std is the quantizer's codebook_scale constant; MCG's differs
  // only in the fourth digit, and exllamav3 uses the one constant for both.
  if (cb != Codebook::Mul1)
    return 1.24371088;
  return tables().stddev[cbIndex(cb)];
}

} // namespace glm::rt::trellis
