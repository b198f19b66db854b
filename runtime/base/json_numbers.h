//===- json_numbers.h - bounded numbers out of parsed JSON ----------------===//
//
// The JSON side of runtime/base/numbers.h: nlohmann::json keeps an integer
// as int64 or uint64 and get<int32_t>() narrows either silently (2^32 in a
// tokenizer became id 0, 2^31 a negative index). Every integer or number a
// file or request gives is taken through these, which accept it only when it
// is exactly an integer (or a finite number) inside the range its use allows.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/base/numbers.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

namespace glm::rt {

/// The value of `v` when it is a JSON integer in [lo, hi]; nullopt for
/// anything else (a float such as 3.0, a string, a bool, out of range).
template <class Json>
std::optional<int64_t> jsonIntIn(const Json &v, int64_t lo, int64_t hi) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.template get<uint64_t>();
    if (u > (uint64_t)std::numeric_limits<int64_t>::max() ||
        (int64_t)u < lo || (int64_t)u > hi)
      return std::nullopt;
    return (int64_t)u;
  }
  if (!v.is_number_integer())
    return std::nullopt;
  int64_t i = v.template get<int64_t>();
  if (i < lo || i > hi)
    return std::nullopt;
  return i;
}

/// The value of `v` when it is a finite JSON number in [lo, hi].
template <class Json>
std::optional<double> jsonNumberIn(const Json &v, double lo, double hi) {
  if (!v.is_number())
    return std::nullopt;
  double d = v.template get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    return std::nullopt;
  return d;
}

} // namespace glm::rt
