//===- tokenizer_test.cpp - regex subset, UTF-8 and byte-level BPE --------===//
//
// Unit checks of the pieces under the tokenizer; full parity with Hugging Face
// `tokenizers` is tests/serve/test_tokenizer_parity.py.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/serve/regex.h"
#include "runtime/serve/tokenizer.h"
#include "runtime/serve/unicode.h"

#include <gtest/gtest.h>

using namespace glm::rt;

static std::vector<std::string> splitAll(const char *pattern,
                                         const std::string &text) {
  Regex re(pattern);
  std::u32string t = decodeUtf8(text);
  std::vector<std::string> out;
  size_t from = 0, b, e;
  while (re.search(t, from, b, e) && e > b) {
    out.push_back(encodeUtf8(t.substr(b, e - b)));
    from = e;
  }
  return out;
}

TEST(Unicode, CategoriesFromTable) {
  EXPECT_STREQ(unicodeCategoryName(unicodeCategory('A')), "Lu");
  EXPECT_STREQ(unicodeCategoryName(unicodeCategory(U'中')), "Lo");
  EXPECT_STREQ(unicodeCategoryName(unicodeCategory(U'²')), "No");
  EXPECT_STREQ(unicodeCategoryName(unicodeCategory(0x301)), "Mn");
  EXPECT_EQ(unicodeCategory(0x378), -1); // unassigned
  EXPECT_TRUE(unicodeInMask(U'Ⅻ', unicodeCategoryMask("N")));
  EXPECT_FALSE(unicodeInMask(U'😀', unicodeCategoryMask("L")));
  EXPECT_TRUE(unicodeIsSpace(0x3000));
  EXPECT_FALSE(unicodeIsSpace(0x200B)); // zero width space is not White_Space
}

TEST(Unicode, LossyDecodeUsesMaximalSubparts) {
  // E2 82 is a truncated 3-byte sequence: one U+FFFD, then 'a'.
  EXPECT_EQ(sanitizeUtf8("\xE2\x82"
                         "a"),
            "\xEF\xBF\xBD"
            "a");
  // C0 is never valid: one replacement per byte.
  EXPECT_EQ(sanitizeUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(completeUtf8Prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(completeUtf8Prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(completeUtf8Prefix("ab\xFF"), 3u);
}

TEST(Regex, Gpt2SplitRule) {
  auto parts = splitAll("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                        "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
                        "I'm here  now 123!!");
  std::vector<std::string> want{"I", "'m", " here", " ", " now", " 123", "!!"};
  EXPECT_EQ(parts, want);
}

TEST(Regex, GlmSplitRuleCaseInsensitiveAndDigitGroups) {
  const char *glm =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
      " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  auto parts = splitAll(glm, "I'M 12345\n\n  x");
  std::vector<std::string> want{"I", "'M", " ", "123", "45", "\n\n", " ", " x"};
  EXPECT_EQ(parts, want);
}

TEST(Regex, QuantifierModesAndLookahead) {
  EXPECT_EQ(Regex("a+?").matchAt(U"aaa", 0), 1);
  EXPECT_EQ(Regex("a{2,}").matchAt(U"aaaa", 0), 4);
  EXPECT_EQ(Regex("a++a").matchAt(U"aaa", 0), -1); // possessive gives nothing
  EXPECT_EQ(Regex("(?:ab)+c").matchAt(U"ababc", 0), 5);
  EXPECT_EQ(Regex("x(?=y)").matchAt(U"xy", 0), 1);
  EXPECT_EQ(Regex("x(?!y)").matchAt(U"xy", 0), -1);
  EXPECT_EQ(Regex("[^a-c\\d]").matchAt(U"d", 0), 1);
  EXPECT_EQ(Regex("[^a-c\\d]").matchAt(U"5", 0), -1);
  EXPECT_EQ(Regex("(?i)abc").matchAt(U"ABC", 0), 3);
}

TEST(Regex, UnsupportedFeaturesAreRefused) {
  EXPECT_THROW(Regex("(?<=a)b"), Error);
  EXPECT_THROW(Regex("\\p{Nonsense}"), Error);
  EXPECT_THROW(Regex("(ab"), Error);
  EXPECT_THROW(Regex("a)"), Error);
}

TEST(Regex, LongRunsDoNotRecurse) {
  std::u32string word(200000, U'a');
  EXPECT_EQ(Regex("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+").matchAt(word, 0),
            long(word.size()));
}

TEST(Tokenizer, ByteMapIsABijection) {
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(charToByte(byteToChar(uint8_t(b))), b);
  EXPECT_EQ(byteToChar(' '), char32_t(0x120)); // 'Ġ'
}

static std::string glmStyle() {
  return std::string(GLM_TEST_DATA_DIR) + "/serve/glm_style_tokenizer.json";
}

TEST(Tokenizer, GlmStyleRoundTripAndSpecials) {
  auto tok = Tokenizer::fromFile(glmStyle());
  std::string text = "[gMASK]<sop><|user|>Héllo 世界 😀 x=1234;\n<|assistant|>";
  auto ids = tok->encode(text);
  EXPECT_EQ(tok->decode(ids), text);
  int32_t gmask = tok->tokenId("[gMASK]");
  ASSERT_GE(gmask, 0);
  EXPECT_EQ(ids.front(), gmask);
  EXPECT_TRUE(tok->isSpecial(gmask));
  EXPECT_FALSE(tok->isSpecial(tok->tokenId("<think>")));
  EXPECT_EQ(tok->decode(ids, /*skipSpecial=*/true), "Héllo 世界 😀 x=1234;\n");
  std::string bytes;
  for (int32_t id : tok->encode("€"))
    bytes += tok->tokenBytes(id);
  EXPECT_EQ(bytes, "€");
}

TEST(Tokenizer, BadFilesGiveClearErrors) {
  EXPECT_THROW(Tokenizer::fromJson("{", "t.json"), Error);
  // A damaged file nested 100,000 deep used to overflow the stack.
  std::string deep;
  for (int i = 0; i < 50000; ++i)
    deep += R"({"type": "Sequence", "normalizers": [)";
  deep += std::string(50000 * 2, ' ');
  for (int i = 0; i < 50000; ++i)
    deep += "]}";
  try {
    Tokenizer::fromJson(R"({"normalizer": )" + deep + "}", "t.json");
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()), "t.json: nests 100001 levels deep (at "
                                     "most 64); the tokenizer file is damaged");
  }
  EXPECT_THROW(
      Tokenizer::fromJson("{\"model\": {\"type\": \"Unigram\"}}", "t.json"),
      Error);
  try {
    Tokenizer::fromJson(R"({"model": {"type": "BPE", "vocab": {"a": 0},
      "merges": ["a b"]}})",
                        "t.json");
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("t.json"), std::string::npos);
  }
  EXPECT_THROW(Tokenizer::fromFile("/nonexistent/tokenizer.json"), Error);
}

// The tokenizer's regex is operator data: patterns that backtrack
// catastrophically must end in an error, in bounded work, never hang.
static std::string budgetError(const char *pattern, const std::u32string &t) {
  Regex re(pattern);
  size_t b, e;
  try {
    re.search(t, 0, b, e);
  } catch (const RegexBudgetError &err) {
    return err.what();
  }
  return "no error";
}

TEST(Regex, CatastrophicBacktrackingRunsOutOfBudget) {
  // (a+)+$ on a^40 b: 2^40 ways to split the run before $ fails.
  std::u32string t = std::u32string(40, U'a') + U"b";
  std::string e = budgetError("(a+)+$", t);
  EXPECT_NE(e.find("tokenizer regex '(a+)+$' ran out of its step budget on a "
                   "text of 41 characters"),
            std::string::npos)
      << e;
  // Quadratic: each start position scans to the end and fails.
  EXPECT_NE(budgetError("a*b", std::u32string(20000, U'a'))
                .find("ran out of its step budget"),
            std::string::npos);
  // A repeated group matched over a long run nests one level per iteration.
  std::u32string ab;
  for (int i = 0; i < 50000; ++i)
    ab += U"ab";
  EXPECT_NE(budgetError("(?:ab)+", ab).find("nests more than 2000 levels"),
            std::string::npos);
  // Not a budget problem: a short group repetition still matches.
  EXPECT_EQ(Regex("(?:ab)+").matchAt(U"ababab", 0), 6);
}

TEST(Regex, HostilePatternsAreRefusedWhenCompiled) {
  EXPECT_THROW(Regex(std::string(100000, '(') + std::string(100000, ')')),
               Error);
  EXPECT_THROW(Regex("a{99999999999999999999}"), Error);
  EXPECT_THROW(Regex("a{1,2147483648}"), Error);
}

// The budget is far above what real split rules need: a megabyte of mixed
// text through the GLM split rule in one budget.
TEST(Regex, RealSplitRuleFitsTheBudgetOnLongText) {
  Regex re("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
           "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
           "\\s+(?!\\S)|\\s+");
  std::u32string unit = U"Hello, wörld! It's 12345 — 世界 😀   \n\n\t x=1;  ";
  std::u32string t;
  while (t.size() < 1000000)
    t += unit;
  t += std::u32string(100000, U' '); // a long run of spaces at the end
  Regex::Budget budget = Regex::Budget::forText(t.size());
  uint64_t start = budget.steps;
  size_t from = 0, b, e, pieces = 0;
  while (from < t.size() && re.search(t, from, b, e, budget)) {
    from = e > b ? e : b + 1;
    ++pieces;
  }
  EXPECT_EQ(from, t.size());
  EXPECT_GT(pieces, 100000u);
  // Used: a few tens of steps per character, under 5 % of the budget.
  EXPECT_LT(start - budget.steps, start / 20) << start - budget.steps;
}

TEST(Tokenizer, HostileSplitPatternIsRefusedNamingFileAndPattern) {
  std::string json = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1},
      "merges": []},
      "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a+)+$"},
                        "behavior": "Isolated"}})";
  auto tok = Tokenizer::fromJson(json, "hostile/tokenizer.json");
  EXPECT_EQ(tok->encode("ab").size(), 2u); // short text: fine
  try {
    tok->encode(std::string(60, 'a') + "b");
    FAIL();
  } catch (const Error &e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("hostile/tokenizer.json: tokenizer regex '(a+)+$' ran "
                      "out of its step budget",
                      0),
              0u)
        << m;
    EXPECT_NE(m.find("fix the pre_tokenizer pattern"), std::string::npos);
  }
}
