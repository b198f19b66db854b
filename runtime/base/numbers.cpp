//===- numbers.cpp - the one bounded parser of numbers --------------------===//
#include "runtime/base/numbers.h"

#include "runtime/base/error.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace glm::rt {

std::optional<int64_t> parseInt64(std::string_view s) {
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-'))
    neg = s[i++] == '-';
  if (i == s.size())
    return std::nullopt;
  // Accumulate as a negative number: |INT64_MIN| > INT64_MAX.
  int64_t v = 0;
  const int64_t minV = std::numeric_limits<int64_t>::min();
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c < '0' || c > '9')
      return std::nullopt;
    int d = c - '0';
    if (v < (minV + d) / 10)
      return std::nullopt;
    v = v * 10 - d;
  }
  if (!neg) {
    if (v == minV)
      return std::nullopt;
    v = -v;
  }
  return v;
}

std::optional<double> parseFinite(std::string_view s) {
  if (s.empty() || s.size() > 64)
    return std::nullopt;
  // strtod accepts leading spaces, hex floats, "inf" and "nan": allow only
  // the plain decimal alphabet so those never reach it.
  for (char c : s)
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' ||
          c == '+' || c == '-'))
      return std::nullopt;
  std::string z(s);
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(z.c_str(), &end);
  // Overflow gives HUGE_VAL (not finite); underflow a subnormal or 0, kept.
  if (end != z.c_str() + z.size() || !std::isfinite(v))
    return std::nullopt;
  return v;
}

std::string rangeText(int64_t lo, int64_t hi) {
  std::ostringstream os;
  os << lo << "..";
  if (hi != std::numeric_limits<int64_t>::max())
    os << hi;
  return os.str();
}

std::string rangeText(double lo, double hi) {
  std::ostringstream os;
  os << "[" << lo << ", " << hi << "]";
  return os.str();
}

int64_t parseIntIn(std::string_view text, int64_t lo, int64_t hi,
                   const std::string &what) {
  std::optional<int64_t> v = parseInt64(text);
  check(v && *v >= lo && *v <= hi, what, ": \"", text,
        "\" is not an integer in ", rangeText(lo, hi));
  return *v;
}

double parseNumberIn(std::string_view text, double lo, double hi,
                     const std::string &what) {
  std::optional<double> v = parseFinite(text);
  check(v && *v >= lo && *v <= hi, what, ": \"", text,
        "\" is not a finite number in ", rangeText(lo, hi));
  return *v;
}

std::optional<int64_t> addChecked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

std::optional<int64_t> mulChecked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

} // namespace glm::rt
