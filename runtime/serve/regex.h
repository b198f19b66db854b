//===- regex.h - the pre-tokenizer regex subset (backtracking, code points)
//===//
//
// Tokenizer files split text with Oniguruma-flavoured patterns such as the
// GPT-2, Llama-3 and GLM-4 split rules. This engine implements the subset they
// use with the same leftmost, first-alternative-wins semantics: literals,
// classes with \p{..}/\P{..}, \s \d \w, '.', groups (?: ) (?i: ) (?i) (?> ),
// lookahead (?= ) (?! ), quantifiers ? * + {m,n} (greedy, lazy, possessive),
// alternation and ^ $. Anything else is refused when the pattern is compiled.
// Thread-safe after construction.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace glm::rt {

class Regex {
public:
  /// Compiles a UTF-8 pattern; throws glm::rt::Error naming the position of
  /// anything unsupported.
  explicit Regex(std::string_view pattern);

  /// Leftmost match starting at or after `from` in text; false if none.
  bool search(std::u32string_view text, size_t from, size_t &begin,
              size_t &end) const;
  /// Match anchored at `at`; returns its end or -1.
  long matchAt(std::u32string_view text, size_t at) const;

  struct Node;
  struct ClassItem {
    char32_t lo = 0, hi = 0; // range when mask == 0 && !space
    uint32_t mask = 0;       // category mask
    int builtin = 0;         // 0 none, 1 space, 2 digit, 3 word
    bool negate = false;     // \P{..}, \S, \D, \W
  };

private:
  std::vector<Node> nodes_;
  int root_ = -1;
  friend struct RegexParser;
  friend struct RegexMatcher;
};

struct Regex::Node {
  enum Kind { Char, Class, Any, Seq, Alt, Repeat, Look, Atomic, Bol, Eol };
  Kind kind = Seq;
  char32_t ch = 0;
  bool icase = false;
  bool negate = false; // class negation; negative lookahead
  std::vector<ClassItem> items;
  std::vector<int> kids;
  int min = 0, max = -1; // repeat bounds, -1 = unbounded
  enum Mode { Greedy, Lazy, Possessive } mode = Greedy;
};

} // namespace glm::rt
