//===- regex.cpp - the pre-tokenizer regex subset -------------------------===//
//
// A recursive parser builds a node array; matching is backtracking with
// explicit continuation frames. Repeats of a single-character node (the
// `\p{L}+` of every split rule) are matched by counting the run and trying
// lengths without recursion, so long words do not deepen the stack. Each
// match and continuation step is charged to the caller's budget, and the
// nesting of match() is bounded, so no pattern and text can hang or overflow
// the stack: they end in RegexBudgetError instead.
//
//===----------------------------------------------------------------------===//
#include "runtime/serve/regex.h"

#include "runtime/base/error.h"
#include "runtime/base/recursion_guard.h"
#include "runtime/serve/unicode.h"

namespace glm::rt {

using Node = Regex::Node;

struct RegexParser {
  std::u32string p;
  std::string src;
  size_t i = 0;
  std::vector<Node> &nodes;
  bool icase = false;
  int depth = 0; // open groups; a pattern of 100k '(' must not recurse 100k

  RegexParser(std::string_view pattern, std::vector<Node> &n)
      : p(decodeUtf8(pattern)), src(pattern), nodes(n) {}

  [[noreturn]] void error(const std::string &what) {
    fail("tokenizer regex '", src, "': ", what, " at character ", i,
         "; this pattern feature is not supported by glm-engine's tokenizer");
  }
  bool eof() const { return i >= p.size(); }
  char32_t peek() const { return eof() ? 0 : p[i]; }
  bool eat(char32_t c) {
    if (!eof() && p[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  int add(Node n) {
    nodes.push_back(std::move(n));
    return int(nodes.size()) - 1;
  }

  int parseAlt() {
    std::vector<int> alts{parseSeq()};
    while (eat('|'))
      alts.push_back(parseSeq());
    if (alts.size() == 1)
      return alts[0];
    Node n;
    n.kind = Node::Alt;
    n.kids = alts;
    return add(n);
  }

  int parseSeq() {
    Node seq;
    seq.kind = Node::Seq;
    bool savedCase = icase;
    while (!eof() && peek() != '|' && peek() != ')') {
      int atom = parseAtom();
      if (atom < 0)
        continue; // an inline flag group like (?i)
      seq.kids.push_back(parseQuant(atom));
    }
    // (?i) without a group lasts to the end of the enclosing group.
    icase = savedCase;
    return add(seq);
  }

  int parseQuant(int atom) {
    int mn, mx;
    size_t save = i;
    if (eat('?')) {
      mn = 0, mx = 1;
    } else if (eat('*')) {
      mn = 0, mx = -1;
    } else if (eat('+')) {
      mn = 1, mx = -1;
    } else if (peek() == '{' && parseBraces(mn, mx)) {
    } else {
      i = save;
      return atom;
    }
    Node r;
    r.kind = Node::Repeat;
    r.kids = {atom};
    r.min = mn;
    r.max = mx;
    if (eat('?'))
      r.mode = Node::Lazy;
    else if (eat('+'))
      r.mode = Node::Possessive;
    if (peek() == '?' || peek() == '*' || peek() == '+')
      error("nested quantifier");
    return add(r);
  }

  bool parseBraces(int &mn, int &mx) {
    size_t save = i;
    ++i; // '{'
    auto num = [&](int &v) {
      size_t s = i;
      v = 0;
      while (!eof() && peek() >= '0' && peek() <= '9') {
        v = v * 10 + int(p[i++] - '0');
        if (v > 100000)
          error("repeat count above 100000");
      }
      return i > s;
    };
    if (!num(mn)) {
      i = save;
      return false; // a literal '{'
    }
    mx = mn;
    if (eat(',')) {
      if (!num(mx))
        mx = -1;
    }
    if (!eat('}')) {
      i = save;
      return false;
    }
    if (mx >= 0 && mx < mn)
      error("quantifier {m,n} with n < m");
    return true;
  }

  int parseAtom() {
    char32_t c = p[i++];
    Node n;
    n.icase = icase;
    switch (c) {
    case '(':
      return parseGroup();
    case '[':
      return parseClass();
    case '.':
      n.kind = Node::Any;
      return add(n);
    case '^':
      n.kind = Node::Bol;
      return add(n);
    case '$':
      n.kind = Node::Eol;
      return add(n);
    case '\\':
      return parseEscapeAtom();
    case '*':
    case '+':
    case '?':
      error("quantifier without an operand");
    default:
      n.kind = Node::Char;
      n.ch = c;
      return add(n);
    }
  }

  int parseGroup() {
    RecursionGuard guard(depth, 100,
                         [&] { error("groups nested more than 100 deep"); });
    Node n;
    bool savedCase = icase;
    int result;
    if (eat('?')) {
      if (eat(':')) {
        result = parseAlt();
      } else if (eat('=') || (peek() == '!' && (++i, true))) {
        bool neg = p[i - 1] == '!';
        n.kind = Node::Look;
        n.negate = neg;
        n.kids = {parseAlt()};
        result = add(n);
      } else if (eat('>')) {
        n.kind = Node::Atomic;
        n.kids = {parseAlt()};
        result = add(n);
      } else if (peek() == '<') {
        error("lookbehind");
      } else {
        // Flags: (?i) (?i:...) (?-i:...)
        bool on = true, flag = icase;
        while (!eof() && peek() != ':' && peek() != ')') {
          char32_t f = p[i++];
          if (f == '-')
            on = false;
          else if (f == 'i')
            flag = on;
          else
            error("inline flag other than i");
        }
        if (eat(')')) {
          icase = flag; // rest of the enclosing group
          return -1;
        }
        eat(':');
        icase = flag;
        result = parseAlt();
      }
    } else {
      result = parseAlt(); // capturing group: captures are not needed
    }
    icase = savedCase;
    if (!eat(')'))
      error("missing ')'");
    return result;
  }

  // Parses the escape after '\' into a class item or a literal; returns true
  // for a class item.
  bool parseEscape(Regex::ClassItem &item, char32_t &lit) {
    if (eof())
      error("trailing backslash");
    char32_t c = p[i++];
    switch (c) {
    case 'p':
    case 'P': {
      std::string name;
      bool neg = c == 'P';
      if (eat('{')) {
        if (eat('^'))
          neg = !neg;
        while (!eof() && peek() != '}')
          name += char(p[i++]);
        if (!eat('}'))
          error("missing '}' in \\p{...}");
      } else if (!eof()) {
        name += char(p[i++]);
      }
      item.mask = unicodeCategoryMask(name);
      if (!item.mask)
        error("unknown Unicode property '" + name + "'");
      item.negate = neg;
      return true;
    }
    case 's':
    case 'S':
      item.builtin = 1;
      item.negate = c == 'S';
      return true;
    case 'd':
    case 'D':
      item.builtin = 2;
      item.negate = c == 'D';
      return true;
    case 'w':
    case 'W':
      item.builtin = 3;
      item.negate = c == 'W';
      return true;
    case 'n':
      lit = '\n';
      return false;
    case 'r':
      lit = '\r';
      return false;
    case 't':
      lit = '\t';
      return false;
    case 'f':
      lit = '\f';
      return false;
    case 'v':
      lit = '\v';
      return false;
    case 'a':
      lit = 7;
      return false;
    case 'e':
      lit = 27;
      return false;
    case '0':
      lit = 0;
      return false;
    case 'x':
    case 'u': {
      int digits = c == 'u' ? 4 : 2;
      bool brace = eat('{');
      char32_t v = 0;
      int n = 0;
      while (!eof() && (brace ? peek() != '}' : n < digits)) {
        char32_t h = p[i++];
        int d = h >= '0' && h <= '9'   ? int(h - '0')
                : h >= 'a' && h <= 'f' ? int(h - 'a' + 10)
                : h >= 'A' && h <= 'F' ? int(h - 'A' + 10)
                                       : -1;
        if (d < 0)
          error("bad hex escape");
        v = v * 16 + char32_t(d);
        ++n;
      }
      if (brace && !eat('}'))
        error("missing '}' in hex escape");
      lit = v;
      return false;
    }
    default:
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9'))
        error(std::string("escape \\") + char(c));
      lit = c;
      return false;
    }
  }

  int parseEscapeAtom() {
    Node n;
    n.icase = icase;
    Regex::ClassItem item;
    char32_t lit;
    if (parseEscape(item, lit)) {
      n.kind = Node::Class;
      n.items = {item};
    } else {
      n.kind = Node::Char;
      n.ch = lit;
    }
    return add(n);
  }

  int parseClass() {
    Node n;
    n.kind = Node::Class;
    n.icase = icase;
    n.negate = eat('^');
    bool first = true;
    while (!eof() && (peek() != ']' || first)) {
      first = false;
      if (peek() == '[')
        error("nested character class");
      Regex::ClassItem item;
      char32_t lo;
      if (eat('\\')) {
        if (parseEscape(item, lo)) {
          n.items.push_back(item);
          continue;
        }
      } else {
        lo = p[i++];
      }
      char32_t hi = lo;
      if (peek() == '-' && i + 1 < p.size() && p[i + 1] != ']') {
        ++i;
        if (eat('\\')) {
          Regex::ClassItem bad;
          if (parseEscape(bad, hi))
            error("class range ending in a class escape");
        } else {
          hi = p[i++];
        }
        if (hi < lo)
          error("reversed class range");
      }
      item.lo = lo;
      item.hi = hi;
      n.items.push_back(item);
    }
    if (!eat(']'))
      error("missing ']'");
    return add(n);
  }
};

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  RegexParser parser(pattern, nodes_);
  root_ = parser.parseAlt();
  if (!parser.eof())
    parser.error("unbalanced ')'");
}

// Simple case folding for (?i): ASCII plus the two non-ASCII characters that
// fold onto ASCII letters (long s, Kelvin sign).
static char32_t fold(char32_t c) {
  if (c >= 'A' && c <= 'Z')
    return c + 32;
  if (c == 0x17F)
    return 's';
  if (c == 0x212A)
    return 'k';
  return c;
}

static bool itemMatches(const Regex::ClassItem &it, char32_t c) {
  bool m;
  if (it.builtin == 1)
    m = unicodeIsSpace(c);
  else if (it.builtin == 2)
    m = unicodeInMask(c, unicodeCategoryMask("Nd"));
  else if (it.builtin == 3)
    m = c == '_' ||
        unicodeInMask(c, unicodeCategoryMask("L") | unicodeCategoryMask("M") |
                             unicodeCategoryMask("N") |
                             unicodeCategoryMask("Pc"));
  else if (it.mask)
    m = unicodeInMask(c, it.mask);
  else
    m = c >= it.lo && c <= it.hi;
  return m != it.negate;
}

static bool classMatches(const Node &n, char32_t c) {
  bool m = false;
  for (const auto &it : n.items) {
    if (itemMatches(it, c) ||
        (n.icase && !it.mask && !it.builtin &&
         (itemMatches(it, fold(c)) ||
          (c >= 'a' && c <= 'z' && itemMatches(it, c - 32))))) {
      m = true;
      break;
    }
  }
  return m != n.negate;
}

struct RegexMatcher {
  const std::vector<Node> &nodes;
  std::u32string_view t;
  Regex::Budget &budget;
  const std::string &pattern;
  int depth = 0;

  // One unit of work; throws when the budget is spent.
  void tick() {
    if (budget.steps == 0)
      throw RegexBudgetError(
          "tokenizer regex '" + pattern +
          "' ran out of its step budget on a text of " +
          std::to_string(t.size()) +
          " characters (the pattern backtracks catastrophically, e.g. a "
          "repeated group inside a repeat)");
    --budget.steps;
  }

  struct Cont {
    enum Kind { End, Seq, Rep } kind;
    int node;
    int count;    // Seq: next index; Rep: iterations done
    size_t start; // Rep: where this iteration began
    const Cont *up;
  };
  size_t matchEnd = 0;

  bool single(const Node &n, size_t pos) const {
    if (pos >= t.size())
      return false;
    char32_t c = t[pos];
    switch (n.kind) {
    case Node::Char:
      return c == n.ch || (n.icase && fold(c) == fold(n.ch));
    case Node::Class:
      return classMatches(n, c);
    case Node::Any:
      return c != '\n';
    default:
      return false;
    }
  }
  static bool isSingle(const Node &n) {
    return n.kind == Node::Char || n.kind == Node::Class || n.kind == Node::Any;
  }

  bool run(const Cont *k, size_t pos) {
    tick();
    switch (k->kind) {
    case Cont::End:
      matchEnd = pos;
      return true;
    case Cont::Seq: {
      const Node &s = nodes[k->node];
      if (size_t(k->count) == s.kids.size())
        return run(k->up, pos);
      Cont next{Cont::Seq, k->node, k->count + 1, 0, k->up};
      return match(s.kids[k->count], pos, &next);
    }
    case Cont::Rep: {
      // One more iteration of a general repeat ended at pos.
      const Node &r = nodes[k->node];
      if (pos == k->start && k->count > r.min)
        return false; // an empty iteration cannot make progress
      return repeat(k->node, k->count, pos, k->up);
    }
    }
    return false;
  }

  bool repeat(int id, int count, size_t pos, const Cont *k) {
    const Node &r = nodes[id];
    bool more = r.max < 0 || count < r.max;
    Cont next{Cont::Rep, id, count + 1, pos, k};
    if (r.mode == Node::Lazy) {
      if (count >= r.min && run(k, pos))
        return true;
      return more && match(r.kids[0], pos, &next);
    }
    if (more && match(r.kids[0], pos, &next))
      return true;
    return count >= r.min && run(k, pos);
  }

  // Runs `id` alone and returns its end (first solution), or -1.
  long solo(int id, size_t pos) {
    Cont end{Cont::End, -1, 0, 0, nullptr};
    size_t saved = matchEnd;
    long r = match(id, pos, &end) ? long(matchEnd) : -1;
    matchEnd = saved;
    return r;
  }

  bool match(int id, size_t pos, const Cont *k) {
    tick();
    RecursionGuard guard(depth, Regex::kMaxDepth, [&] {
      throw RegexBudgetError(
          "tokenizer regex '" + pattern + "' nests more than " +
          std::to_string(Regex::kMaxDepth) + " levels deep on a text of " +
          std::to_string(t.size()) +
          " characters (a repeated group matched over a long run)");
    });
    const Node &n = nodes[id];
    switch (n.kind) {
    case Node::Char:
    case Node::Class:
    case Node::Any:
      return single(n, pos) && run(k, pos + 1);
    case Node::Seq: {
      Cont c{Cont::Seq, id, 0, 0, k};
      return run(&c, pos);
    }
    case Node::Alt:
      for (int kid : n.kids)
        if (match(kid, pos, k))
          return true;
      return false;
    case Node::Bol:
      return (pos == 0 || t[pos - 1] == '\n') && run(k, pos);
    case Node::Eol:
      return (pos == t.size() || t[pos] == '\n') && run(k, pos);
    case Node::Look: {
      bool found = solo(n.kids[0], pos) >= 0;
      return found != n.negate && run(k, pos);
    }
    case Node::Atomic: {
      long e = solo(n.kids[0], pos);
      return e >= 0 && run(k, size_t(e));
    }
    case Node::Repeat: {
      const Node &kid = nodes[n.kids[0]];
      if (!isSingle(kid) || n.mode == Node::Possessive) {
        if (n.mode == Node::Possessive) {
          // Possessive = atomic greedy repeat.
          Node greedy = n;
          greedy.mode = Node::Greedy;
          return possessive(greedy, pos, k);
        }
        return repeat(id, 0, pos, k);
      }
      size_t limit = n.max < 0 ? t.size() - pos : size_t(n.max);
      size_t run_ = 0;
      while (run_ < limit && single(kid, pos + run_)) {
        tick();
        ++run_;
      }
      if (run_ < size_t(n.min))
        return false;
      if (n.mode == Node::Lazy) {
        for (size_t c = n.min; c <= run_; ++c)
          if (run(k, pos + c))
            return true;
        return false;
      }
      for (size_t c = run_ + 1; c-- > size_t(n.min);)
        if (run(k, pos + c))
          return true;
      return false;
    }
    }
    return false;
  }

  bool possessive(const Node &greedy, size_t pos, const Cont *k) {
    // Take as many iterations as possible, each atomic, then never give back.
    size_t cur = pos;
    int count = 0;
    while (greedy.max < 0 || count < greedy.max) {
      long e = solo(greedy.kids[0], cur);
      if (e < 0 || (size_t(e) == cur && count >= greedy.min))
        break;
      cur = size_t(e);
      ++count;
    }
    return count >= greedy.min && run(k, cur);
  }
};

long Regex::matchAt(std::u32string_view text, size_t at, Budget &budget) const {
  RegexMatcher m{nodes_, text, budget, pattern_};
  RegexMatcher::Cont end{RegexMatcher::Cont::End, -1, 0, 0, nullptr};
  if (m.match(root_, at, &end))
    return long(m.matchEnd);
  return -1;
}

long Regex::matchAt(std::u32string_view text, size_t at) const {
  Budget budget = Budget::forText(text.size());
  return matchAt(text, at, budget);
}

bool Regex::search(std::u32string_view text, size_t from, size_t &begin,
                   size_t &end) const {
  Budget budget = Budget::forText(text.size());
  return search(text, from, begin, end, budget);
}

bool Regex::search(std::u32string_view text, size_t from, size_t &begin,
                   size_t &end, Budget &budget) const {
  for (size_t s = from; s <= text.size(); ++s) {
    long e = matchAt(text, s, budget);
    if (e >= 0) {
      begin = s;
      end = size_t(e);
      return true;
    }
  }
  return false;
}

} // namespace glm::rt
