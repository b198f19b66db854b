//===- unicode.h - UTF-8 and Unicode categories for the tokenizer ---------===//
//
// The byte-level tokenizer works on code points: its pre-tokenizer regex asks
// for general categories (\p{L}, \p{N}, ...) and white space. The category
// table is generated (gen_unicode_table.py) from Python's unicodedata, so the
// tests' reference implementation and ours agree on every assigned character.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace glm::rt {

/// Index of a general category ("Lu", "Ll", ... "Co") as listed by
/// unicodeCategoryName, or -1 for unassigned (Cn) and out-of-range code points.
int unicodeCategory(char32_t cp);
/// Two-letter name of a category index (0..28).
const char *unicodeCategoryName(int category);
/// Number of category indices.
int unicodeCategoryCount();
/// Bit mask of the categories a property name selects: "L", "Lu", "N", "Nd",
/// "P", "S", "Z", "M", "C" (long names like "Letter" too). 0 if unknown.
/// Bit 31 stands for unassigned code points (part of "C").
uint32_t unicodeCategoryMask(std::string_view name);
/// True when cp has category bits in mask (bit 31 = unassigned).
bool unicodeInMask(char32_t cp, uint32_t mask);
/// The Unicode White_Space property (what \s matches).
bool unicodeIsSpace(char32_t cp);

/// Decodes UTF-8; each maximal invalid subsequence becomes U+FFFD (the rule
/// Python's errors="replace" and Rust's from_utf8_lossy follow).
std::u32string decodeUtf8(std::string_view s);
/// Byte offset of each code point of decodeUtf8(s), plus s.size() at the end.
std::u32string decodeUtf8(std::string_view s, std::basic_string<size_t> *offs);
void appendUtf8(std::string &out, char32_t cp);
std::string encodeUtf8(std::u32string_view s);
/// Replaces invalid UTF-8 with U+FFFD (lossy conversion of raw bytes).
std::string sanitizeUtf8(std::string_view s);
/// Length of the longest prefix of s that ends on a complete UTF-8 sequence
/// (what a streaming decoder may emit now; the rest waits for more bytes).
/// Bytes that can never become valid count as complete.
size_t completeUtf8Prefix(std::string_view s);

} // namespace glm::rt
