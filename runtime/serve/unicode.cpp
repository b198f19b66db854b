//===- unicode.cpp - UTF-8 and Unicode categories for the tokenizer -------===//
//
// Category lookups binary-search the generated range table; UTF-8 decoding
// follows the "maximal subpart" replacement rule so lossy decodes match the
// reference tokenizer byte for byte.
//
//===----------------------------------------------------------------------===//
#include "runtime/serve/unicode.h"

#include <algorithm>
#include <cstring>

namespace glm::rt {
namespace {
struct UnicodeRange {
  uint32_t first, last;
  uint8_t category;
};
#include "runtime/serve/unicode_table.inc"
constexpr int kCategoryCount =
    sizeof(kUnicodeCategoryNames) / sizeof(kUnicodeCategoryNames[0]);
constexpr uint32_t kUnassignedBit = 1u << 31;
} // namespace

int unicodeCategory(char32_t cp) {
  const UnicodeRange *b = std::begin(kUnicodeRanges);
  const UnicodeRange *e = std::end(kUnicodeRanges);
  const UnicodeRange *it = std::upper_bound(
      b, e, uint32_t(cp),
      [](uint32_t v, const UnicodeRange &r) { return v < r.first; });
  if (it == b)
    return -1;
  --it;
  return cp <= it->last ? it->category : -1;
}

const char *unicodeCategoryName(int category) {
  return category >= 0 && category < kCategoryCount
             ? kUnicodeCategoryNames[category]
             : "Cn";
}

int unicodeCategoryCount() { return kCategoryCount; }

uint32_t unicodeCategoryMask(std::string_view name) {
  static const struct {
    const char *alias, *code;
  } longNames[] = {{"Letter", "L"},
                   {"Mark", "M"},
                   {"Number", "N"},
                   {"Punctuation", "P"},
                   {"Symbol", "S"},
                   {"Separator", "Z"},
                   {"Other", "C"},
                   {"Uppercase_Letter", "Lu"},
                   {"Lowercase_Letter", "Ll"},
                   {"Decimal_Number", "Nd"}};
  std::string n(name);
  for (const auto &l : longNames)
    if (n == l.alias)
      n = l.code;
  uint32_t mask = 0;
  for (int i = 0; i < kCategoryCount; ++i) {
    const char *c = kUnicodeCategoryNames[i];
    if ((n.size() == 1 && c[0] == n[0]) || n == c)
      mask |= 1u << i;
  }
  if (n == "C" || n == "Cn")
    mask |= kUnassignedBit;
  return mask;
}

bool unicodeInMask(char32_t cp, uint32_t mask) {
  int c = unicodeCategory(cp);
  return c < 0 ? (mask & kUnassignedBit) != 0 : (mask >> c) & 1u;
}

bool unicodeIsSpace(char32_t cp) {
  switch (cp) {
  case 0x09:
  case 0x0A:
  case 0x0B:
  case 0x0C:
  case 0x0D:
  case 0x20:
  case 0x85:
  case 0xA0:
  case 0x1680:
  case 0x2028:
  case 0x2029:
  case 0x202F:
  case 0x205F:
  case 0x3000:
    return true;
  default:
    return cp >= 0x2000 && cp <= 0x200A;
  }
}

// Decodes one sequence at s[i]; returns its length and sets cp, or returns
// the length of the maximal invalid subpart (>= 1) with cp = U+FFFD.
static size_t decodeOne(std::string_view s, size_t i, char32_t &cp) {
  auto byte = [&](size_t k) { return uint8_t(s[k]); };
  uint8_t b0 = byte(i);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  int need;
  uint8_t lo = 0x80, hi = 0xBF;
  char32_t v;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    v = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    v = b0 & 0x0F;
    if (b0 == 0xE0)
      lo = 0xA0;
    if (b0 == 0xED)
      hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    v = b0 & 0x07;
    if (b0 == 0xF0)
      lo = 0x90;
    if (b0 == 0xF4)
      hi = 0x8F;
  } else {
    cp = 0xFFFD;
    return 1;
  }
  size_t k = i + 1;
  for (int n = 0; n < need; ++n, ++k) {
    if (k >= s.size()) {
      cp = 0xFFFD;
      return k - i;
    }
    uint8_t b = byte(k);
    uint8_t l = n == 0 ? lo : 0x80, h = n == 0 ? hi : 0xBF;
    if (b < l || b > h) {
      cp = 0xFFFD;
      return k - i;
    }
    v = (v << 6) | (b & 0x3F);
  }
  cp = v;
  return k - i;
}

std::u32string decodeUtf8(std::string_view s, std::basic_string<size_t> *offs) {
  std::u32string out;
  out.reserve(s.size());
  if (offs)
    offs->clear();
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    size_t n = decodeOne(s, i, cp);
    out.push_back(cp);
    if (offs)
      offs->push_back(i);
    i += n;
  }
  if (offs)
    offs->push_back(s.size());
  return out;
}

std::u32string decodeUtf8(std::string_view s) { return decodeUtf8(s, nullptr); }

void appendUtf8(std::string &out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::string encodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s)
    appendUtf8(out, c);
  return out;
}

std::string sanitizeUtf8(std::string_view s) {
  return encodeUtf8(decodeUtf8(s));
}

size_t completeUtf8Prefix(std::string_view s) {
  // Only the last (up to 3) bytes can be an unfinished sequence.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    uint8_t b = uint8_t(s[n - back]);
    if ((b & 0xC0) == 0x80)
      continue; // continuation byte: look further back for the lead
    if (b < 0x80)
      return n;
    size_t want = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    if (want <= back)
      return n;
    // Unfinished: hold it back only if what we have is a valid prefix.
    char32_t cp;
    size_t used = decodeOne(s.substr(0, n), n - back, cp);
    return used == back && b >= 0xC2 && b <= 0xF4 ? n - back : n;
  }
  return n;
}

} // namespace glm::rt
