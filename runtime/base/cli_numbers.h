//===- cli_numbers.h - CLI11 validators over the bounded number parser ----===//
//
// Every numeric flag of glmc and glm-engine checks its text with these
// before CLI11 converts it, so the value that reaches the program is the one
// typed, inside the range its use allows (runtime/base/numbers.h says why).
// The option's C++ type must hold the whole range.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/base/error.h"
#include "runtime/base/numbers.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>
#include <string>

namespace glm::rt {

/// An integer in [lo, hi] (no fraction, no exponent, no overflow).
inline CLI::Validator cliInt(int64_t lo,
                             int64_t hi = std::numeric_limits<int64_t>::max()) {
  return CLI::Validator(
      [lo, hi](std::string &s) -> std::string {
        std::optional<int64_t> v = parseInt64(s);
        if (!v || *v < lo || *v > hi)
          return "\"" + s + "\" is not an integer in " + rangeText(lo, hi);
        return "";
      },
      "INT in " + rangeText(lo, hi));
}

/// A finite number in [lo, hi]; with `loOpen`, lo itself is refused.
inline CLI::Validator cliNumber(double lo, double hi, bool loOpen = false) {
  std::string range = (loOpen ? "(" : "[") + rangeText(lo, hi).substr(1);
  return CLI::Validator(
      [lo, hi, loOpen, range](std::string &s) -> std::string {
        std::optional<double> v = parseFinite(s);
        if (!v || *v < lo || *v > hi || (loOpen && *v == lo))
          return "\"" + s + "\" is not a finite number in " + range;
        return "";
      },
      "NUMBER in " + range);
}

} // namespace glm::rt
