//===- numeric.h - bit-exact scalar conversions (fp16, bf16, E4M3) --------===//
//
// The trellis codec and the dense record formats need conversions that round
// exactly as CUDA does (round to nearest even), independent of the host
// compiler's _Float16 support, so they are written out on the bit patterns.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <cstring>

namespace glm::rt {

inline float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t floatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

/// IEEE binary16 bits -> float (exact).
inline float halfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  if (exp == 0) {
    if (man == 0)
      return bitsToFloat(sign);
    // Subnormal: value = man * 2^-24.
    float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31)
    return bitsToFloat(sign | 0x7F800000 | (man << 13));
  return bitsToFloat(sign | ((exp + 112) << 23) | (man << 13));
}

/// float -> IEEE binary16 bits, round to nearest even, overflow to inf.
inline uint16_t floatToHalf(float f) {
  uint32_t x = floatToBits(f);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7FFFFFFF;
  if (absx >= 0x7F800000) // inf or nan
    return (uint16_t)(sign | 0x7C00 | (absx > 0x7F800000 ? 0x200 : 0));
  if (absx >= 0x477FF000) // rounds to >= 65520 -> inf
    return (uint16_t)(sign | 0x7C00);
  if (absx < 0x38800000) { // below the smallest normal half (2^-14)
    // Subnormal half: quantum 2^-24. Scale exactly and round to nearest even.
    float a = bitsToFloat(absx) * 16777216.0f; // exact (power of two)
    uint32_t q = (uint32_t)a;
    float rem = a - (float)q;
    if (rem > 0.5f || (rem == 0.5f && (q & 1)))
      ++q;
    return (uint16_t)(sign | q);
  }
  uint32_t exp = (absx >> 23) - 112, man = absx & 0x7FFFFF;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    ++h; // carries into the exponent correctly
  return (uint16_t)(sign | h);
}

/// Rounds a float to the nearest fp16 value (RNE), returned as float.
inline float roundToHalf(float f) { return halfToFloat(floatToHalf(f)); }

inline float bf16ToFloat(uint16_t b) { return bitsToFloat((uint32_t)b << 16); }

/// float -> bfloat16 bits, round to nearest even (NaN kept quiet).
inline uint16_t floatToBf16(float f) {
  uint32_t x = floatToBits(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000)
    return (uint16_t)((x >> 16) | 0x40);
  uint32_t lsb = (x >> 16) & 1;
  return (uint16_t)((x + 0x7FFF + lsb) >> 16);
}

/// FP8 E4M3 (OCP "fn": no inf, 0x7F/0xFF NaN, max 448) -> float (exact).
inline float e4m3ToFloat(uint8_t v) {
  uint32_t sign = v & 0x80, exp = (v >> 3) & 0xF, man = v & 7;
  float r;
  if (exp == 0xF && man == 7)
    r = bitsToFloat(0x7FC00000);
  else if (exp == 0)
    r = (float)man * (1.0f / 512.0f); // subnormal: man * 2^-9
  else
    r = bitsToFloat(((exp + 120) << 23) | (man << 20));
  return sign ? -r : r;
}

/// float -> E4M3 bits: round to nearest even, saturating to +-448 (NaN -> 0x7F).
inline uint8_t floatToE4m3(float f) {
  uint32_t x = floatToBits(f);
  uint8_t sign = (uint8_t)((x >> 24) & 0x80);
  uint32_t absx = x & 0x7FFFFFFF;
  if (absx > 0x7F800000)
    return (uint8_t)(sign | 0x7F);
  float a = bitsToFloat(absx);
  if (a >= 448.0f)
    return (uint8_t)(sign | 0x7E);
  if (a < 0.015625f) { // below 2^-6: subnormal grid of 2^-9
    float s = a * 512.0f;
    uint32_t q = (uint32_t)s;
    float rem = s - (float)q;
    if (rem > 0.5f || (rem == 0.5f && (q & 1)))
      ++q;
    return (uint8_t)(sign | q); // q == 8 is exactly the smallest normal
  }
  uint32_t exp = (absx >> 23) - 120, man = absx & 0x7FFFFF;
  uint32_t v = (exp << 3) | (man >> 20);
  uint32_t rest = man & 0xFFFFF;
  if (rest > 0x80000 || (rest == 0x80000 && (v & 1)))
    ++v;
  if (v > 0x7E) // rounded past 448: saturate
    v = 0x7E;
  return (uint8_t)(sign | v);
}

/// The exlr8 decode step: clamp to +-448, round to E4M3 (RNE), back to float.
inline float roundToE4m3(float f) { return e4m3ToFloat(floatToE4m3(f)); }

} // namespace glm::rt
