//===- numbers.h - the one bounded parser of numbers from users and files -===//
//
// Every number an operator or a file gives glmc and glm-engine (command-line
// flags, config.json keys, tokenizer ids, manifest widths, request fields)
// is parsed or taken through these functions, which accept a value only when
// it is exactly representable, finite and inside the range its use allows.
// Before them, `--max-new 9223372036854775807` overflowed the context check,
// `--port 70000` was truncated to 4464 and `--memory-per-spark nan` passed
// every comparison.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace glm::rt {

/// The longest context (prompt + generation, tokens) a plan or flag may ask
/// for: 1024 x GLM-5.3's 1M, and small enough that positions, KV sizes in
/// elements and the server's int arithmetic never overflow.
inline constexpr int64_t kMaxContextTokens = int64_t(1) << 30;

/// A whole decimal integer ("-12", "+7"; no spaces, no fraction, no
/// exponent, no hex) that fits int64_t; nullopt otherwise.
std::optional<int64_t> parseInt64(std::string_view text);

/// A whole finite decimal number ("0.5", "1e-3", "8"); nullopt for NaN,
/// infinities, overflow to infinity, empty or trailing text.
std::optional<double> parseFinite(std::string_view text);

/// parseInt64 checked against [lo, hi]; throws Error
/// "WHAT: \"TEXT\" is not an integer in LO..HI".
int64_t parseIntIn(std::string_view text, int64_t lo, int64_t hi,
                   const std::string &what);

/// parseFinite checked against [lo, hi]; throws Error naming WHAT, the text
/// and the range.
double parseNumberIn(std::string_view text, double lo, double hi,
                     const std::string &what);

/// "LO..HI" for messages; INT64_MAX reads "LO.." (no upper bound of note).
std::string rangeText(int64_t lo, int64_t hi);
std::string rangeText(double lo, double hi);

/// a + b and a * b for non-negative sizes, nullopt on int64_t overflow (the
/// context and buffer arithmetic of user-given lengths).
std::optional<int64_t> addChecked(int64_t a, int64_t b);
std::optional<int64_t> mulChecked(int64_t a, int64_t b);

} // namespace glm::rt
