//===- numeric_test.cpp - fp16 / bf16 / E4M3 bit-exact conversions --------===//
//
// runtime/base/numeric.h: exhaustive round trips, round-to-nearest-even edge
// cases (ties, subnormals, overflow, saturation) and a brute-force
// nearest-value reference on random inputs.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/numeric.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace glm::rt;

namespace {

float p2(int e) { return std::ldexp(1.0f, e); }

TEST(Numeric, HalfRoundTripsEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = halfToFloat((uint16_t)h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(f)))) << h;
      EXPECT_EQ(floatToHalf(f) & 0x7C00, 0x7C00);
      continue;
    }
    EXPECT_EQ(floatToHalf(f), h) << std::hex << h;
  }
  EXPECT_EQ(halfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(halfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(halfToFloat(0x0001), p2(-24));
  EXPECT_EQ(halfToFloat(0x0400), p2(-14));
  EXPECT_EQ(halfToFloat(0x8000), -0.0f);
  EXPECT_TRUE(std::signbit(halfToFloat(0x8000)));
}

TEST(Numeric, HalfRoundsToNearestEven) {
  EXPECT_EQ(floatToHalf(1.0f + p2(-11)), 0x3C00);         // tie -> even
  EXPECT_EQ(floatToHalf(1.0f + 3 * p2(-11)), 0x3C02);     // tie -> even
  EXPECT_EQ(floatToHalf(1.0f + p2(-11) + p2(-20)), 0x3C01); // above tie
  EXPECT_EQ(floatToHalf(-(1.0f + 3 * p2(-11))), 0xBC02);
  // Carry out of the mantissa into the exponent.
  EXPECT_EQ(floatToHalf(2.0f - p2(-12)), 0x4000);
  // Overflow: 65520 is the tie between 65504 and 2^16 -> inf.
  EXPECT_EQ(floatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7C00);
  EXPECT_EQ(floatToHalf(-1e9f), 0xFC00);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  // Subnormals: quantum 2^-24.
  EXPECT_EQ(floatToHalf(p2(-24)), 0x0001);
  EXPECT_EQ(floatToHalf(p2(-25)), 0x0000);                 // tie -> 0
  EXPECT_EQ(floatToHalf(p2(-25) * 1.0001f), 0x0001);
  EXPECT_EQ(floatToHalf(1.5f * p2(-24)), 0x0002);          // tie -> even
  EXPECT_EQ(floatToHalf(2.5f * p2(-24)), 0x0002);          // tie -> even
  EXPECT_EQ(floatToHalf(1023.5f * p2(-24)), 0x0400);       // to min normal
  EXPECT_EQ(floatToHalf(1022.5f * p2(-24)), 0x03FE);
  EXPECT_EQ(floatToHalf(-p2(-30)), 0x8000);                // signed zero
  EXPECT_EQ(roundToHalf(0.1f), halfToFloat(0x2E66));
}

/// Nearest value of a sorted finite grid, ties to the even code.
template <class Code>
Code nearest(const std::vector<std::pair<float, Code>> &grid, float x) {
  auto it = std::lower_bound(
      grid.begin(), grid.end(), x,
      [](const std::pair<float, Code> &a, float v) { return a.first < v; });
  if (it == grid.begin())
    return it->second;
  if (it == grid.end())
    return grid.back().second;
  auto lo = it - 1;
  double dl = (double)x - lo->first, dh = (double)it->first - x;
  if (dl < dh)
    return lo->second;
  if (dh < dl)
    return it->second;
  return (lo->second & 1) ? it->second : lo->second;
}

TEST(Numeric, HalfMatchesBruteForceNearest) {
  std::vector<std::pair<float, uint16_t>> grid;
  for (uint32_t h = 0; h < 0x7C00; ++h) // positive finite
    grid.push_back({halfToFloat((uint16_t)h), (uint16_t)h});
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> expo(-27.0f, 16.0f);
  for (int i = 0; i < 200000; ++i) {
    float x = std::exp2(expo(rng));
    if (x >= 65504.0f)
      continue;
    ASSERT_EQ(floatToHalf(x), nearest(grid, x)) << x;
    ASSERT_EQ(floatToHalf(-x), nearest(grid, x) | 0x8000) << -x;
  }
}

TEST(Numeric, Bf16) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16ToFloat((uint16_t)b);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(f)))) << b;
      continue;
    }
    EXPECT_EQ(floatToBf16(f), b) << std::hex << b;
  }
  EXPECT_EQ(floatToBf16(1.0f + p2(-8)), 0x3F80);           // tie -> even
  EXPECT_EQ(floatToBf16(1.0f + p2(-7) + p2(-8)), 0x3F82);  // tie -> even
  EXPECT_EQ(floatToBf16(1.0f + p2(-8) + p2(-20)), 0x3F81);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  uint16_t qnan = floatToBf16(bitsToFloat(0x7F800001)); // signalling NaN
  EXPECT_TRUE(std::isnan(bf16ToFloat(qnan)));
  EXPECT_NE(qnan & 0x40, 0); // quiet bit set
}

TEST(Numeric, E4m3Values) {
  for (uint32_t v = 0; v < 256; ++v) {
    float f = e4m3ToFloat((uint8_t)v);
    if ((v & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f)) << v;
      continue;
    }
    EXPECT_EQ(floatToE4m3(f), v) << std::hex << v;
  }
  EXPECT_EQ(e4m3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(e4m3ToFloat(0x01), p2(-9)); // smallest subnormal
  EXPECT_EQ(e4m3ToFloat(0x07), 7 * p2(-9));
  EXPECT_EQ(e4m3ToFloat(0x08), p2(-6)); // smallest normal
  EXPECT_EQ(e4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(e4m3ToFloat(0xB8), -1.0f);
}

TEST(Numeric, E4m3RoundsToNearestEvenAndSaturates) {
  // Saturation (the exlr8 rule): anything at or past 448 -> 448.
  EXPECT_EQ(floatToE4m3(448.0f), 0x7E);
  EXPECT_EQ(floatToE4m3(464.0f), 0x7E);
  EXPECT_EQ(floatToE4m3(1e6f), 0x7E);
  EXPECT_EQ(floatToE4m3(-1e6f), 0xFE);
  EXPECT_EQ(floatToE4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(floatToE4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7F,
            0x7F);
  EXPECT_EQ(floatToE4m3(432.0f), 0x7E); // tie 416/448 -> even (448, m=6)
  EXPECT_EQ(floatToE4m3(400.0f), 0x7C); // tie 384/416 -> even (384)
  // Normal ties: 1 + 1/16 lies between 1 and 1.125.
  EXPECT_EQ(floatToE4m3(1.0625f), 0x38);
  EXPECT_EQ(floatToE4m3(1.1875f), 0x3A); // tie 1.125/1.25 -> even 1.25
  EXPECT_EQ(floatToE4m3(1.0625f + p2(-12)), 0x39);
  EXPECT_EQ(floatToE4m3(p2(-6) * 1.0625f), 0x08); // tie at min normal
  // Subnormal grid 2^-9.
  EXPECT_EQ(floatToE4m3(p2(-10)), 0x00); // tie -> 0
  EXPECT_EQ(floatToE4m3(p2(-10) * 1.01f), 0x01);
  EXPECT_EQ(floatToE4m3(1.5f * p2(-9)), 0x02); // tie -> even
  EXPECT_EQ(floatToE4m3(2.5f * p2(-9)), 0x02);
  EXPECT_EQ(floatToE4m3(7.5f * p2(-9)), 0x08); // tie -> min normal (even)
  EXPECT_EQ(floatToE4m3(-3 * p2(-9)), 0x83);
  EXPECT_EQ(floatToE4m3(-p2(-12)), 0x80);
  EXPECT_EQ(roundToE4m3(0.3f), 0.3125f);
  EXPECT_EQ(roundToE4m3(3.9f), 4.0f);
}

TEST(Numeric, E4m3MatchesBruteForceNearest) {
  std::vector<std::pair<float, uint8_t>> grid;
  for (uint32_t v = 0; v < 0x7F; ++v)
    grid.push_back({e4m3ToFloat((uint8_t)v), (uint8_t)v});
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> expo(-12.0f, 9.5f);
  for (int i = 0; i < 200000; ++i) {
    float x = std::exp2(expo(rng));
    uint8_t want = x >= 448.0f ? 0x7E : nearest(grid, x);
    ASSERT_EQ(floatToE4m3(x), want) << x;
    ASSERT_EQ(floatToE4m3(-x), want | 0x80) << -x;
  }
}

TEST(Numeric, FloatBits) {
  EXPECT_EQ(floatToBits(1.0f), 0x3F800000u);
  EXPECT_EQ(bitsToFloat(0xC0000000u), -2.0f);
}

} // namespace
