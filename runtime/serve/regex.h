//===- regex.h - the pre-tokenizer regex subset (backtracking, code points)
//===//
//
// Tokenizer files split text with Oniguruma-flavoured patterns such as the
// GPT-2, Llama-3 and GLM-4 split rules. This engine implements the subset they
// use with the same leftmost, first-alternative-wins semantics: literals,
// classes with \p{..}/\P{..}, \s \d \w, '.', groups (?: ) (?i: ) (?i) (?> ),
// lookahead (?= ) (?! ), quantifiers ? * + {m,n} (greedy, lazy, possessive),
// alternation and ^ $. Anything else is refused when the pattern is compiled.
// Matching backtracks, which takes exponential time on patterns such as
// (a+)+$: every search therefore runs under a step and depth budget and
// throws RegexBudgetError past it instead of hanging the caller.
// Thread-safe after construction.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/base/error.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace glm::rt {

/// A search that ran out of its Regex::Budget; the message names the pattern.
class RegexBudgetError : public Error {
public:
  using Error::Error;
};

class Regex {
public:
  /// Compiles a UTF-8 pattern; throws glm::rt::Error naming the position of
  /// anything unsupported.
  explicit Regex(std::string_view pattern);

  /// Work left to the searches over one text. Shared by the successive
  /// searches of a split, so that a pattern which fails slowly at every
  /// start position (quadratic) is bounded too, not only one that backtracks
  /// exponentially at one position.
  struct Budget {
    uint64_t steps;
    /// The default for a text of n code points: far above what the split
    /// rules of real tokenizers need (tens of steps per character), far
    /// below a hang (about a second per million characters).
    static Budget forText(size_t n) { return {1000000 + 2000 * uint64_t(n)}; }
  };
  /// Backtracking nests one level per group repetition matched; past this
  /// many levels a search is refused rather than overflowing the stack.
  static constexpr int kMaxDepth = 2000;

  /// Leftmost match starting at or after `from` in text; false if none.
  /// Throws RegexBudgetError when the budget runs out.
  bool search(std::u32string_view text, size_t from, size_t &begin, size_t &end,
              Budget &budget) const;
  /// Match anchored at `at`; returns its end or -1.
  long matchAt(std::u32string_view text, size_t at, Budget &budget) const;
  /// The same with Budget::forText(text.size()) for this call alone.
  bool search(std::u32string_view text, size_t from, size_t &begin,
              size_t &end) const;
  long matchAt(std::u32string_view text, size_t at) const;

  /// The pattern as given (for messages).
  const std::string &pattern() const { return pattern_; }

  struct Node;
  struct ClassItem {
    char32_t lo = 0, hi = 0; // range when mask == 0 && !space
    uint32_t mask = 0;       // category mask
    int builtin = 0;         // 0 none, 1 space, 2 digit, 3 word
    bool negate = false;     // \P{..}, \S, \D, \W
  };

private:
  std::string pattern_;
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
