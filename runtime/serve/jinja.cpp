//===- jinja.cpp - lexer, parser and interpreter of the Jinja subset ------===//
//
// The source is cut into text, {{ }}, {% %} and {# #} chunks with Jinja2's
// whitespace rules (trim_blocks, lstrip_blocks, '-' and '+' markers), block
// chunks are parsed into a statement tree, expressions with Jinja2's operator
// precedence. Rendering walks the tree with a stack of scopes: for-loops and
// macros open scopes, if-blocks do not (as in Jinja2).
//
//===----------------------------------------------------------------------===//
#include "runtime/serve/jinja.h"
#include "runtime/serve/jinja_builtins.h"

#include "runtime/base/error.h"
#include "runtime/base/recursion_guard.h"
#include "runtime/serve/unicode.h"

#include <cstring>

namespace glm::rt::jinja {

//===----------------------------------------------------------------------===//
// Chunks
//===----------------------------------------------------------------------===//
namespace {
struct Chunk {
  enum Kind { Text, Var, Block } kind;
  std::string body;
  int line;
};

struct ExprTok {
  enum Kind { Name, Str, Int, Float, Op, End } kind;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

bool isSpaceChar(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}
} // namespace

// Finds the end delimiter of a tag starting at `pos` (just after the opener),
// skipping string literals. Returns the index of the delimiter or npos.
static size_t findTagEnd(const std::string &s, size_t pos, const char *end) {
  size_t n = strlen(end);
  while (pos < s.size()) {
    char c = s[pos];
    if (c == '\'' || c == '"') {
      ++pos;
      while (pos < s.size() && s[pos] != c) {
        if (s[pos] == '\\')
          ++pos;
        ++pos;
      }
      ++pos;
      continue;
    }
    if (s.compare(pos, n, end) == 0)
      return pos;
    ++pos;
  }
  return std::string::npos;
}

static std::vector<Chunk> chunkSource(std::string src, const std::string &name,
                                      const Options &opt) {
  // Jinja2 normalises newlines and drops one trailing newline.
  std::string norm;
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      norm += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n')
        ++i;
    } else {
      norm += src[i];
    }
  }
  if (!norm.empty() && norm.back() == '\n')
    norm.pop_back();
  const std::string &s = norm;

  std::vector<Chunk> out;
  size_t pos = 0;
  int line = 1;
  bool lineStarting = true;
  bool stripNext = false; // previous tag ended with '-'
  auto lineAt = [&](size_t upto) {
    for (size_t k = pos; k < upto && k < s.size(); ++k)
      line += s[k] == '\n';
  };
  while (pos <= s.size()) {
    size_t open = std::string::npos;
    for (size_t k = s.find('{', pos); k != std::string::npos;
         k = s.find('{', k + 1)) {
      if (k + 1 < s.size() &&
          (s[k + 1] == '{' || s[k + 1] == '%' || s[k + 1] == '#')) {
        open = k;
        break;
      }
    }
    std::string text = s.substr(
        pos, open == std::string::npos ? std::string::npos : open - pos);
    if (stripNext) {
      size_t k = 0;
      while (k < text.size() && isSpaceChar(text[k]))
        ++k;
      text.erase(0, k);
    }
    if (open == std::string::npos) {
      if (!text.empty())
        out.push_back({Chunk::Text, text, line});
      break;
    }
    char kind = s[open + 1];
    char sign = open + 2 < s.size() ? s[open + 2] : 0;
    if (sign == '-') {
      size_t k = text.size();
      while (k > 0 && isSpaceChar(text[k - 1]))
        --k;
      text.erase(k);
    } else if (sign != '+' && opt.lstripBlocks && kind != '{') {
      size_t lpos = text.rfind('\n');
      lpos = lpos == std::string::npos ? 0 : lpos + 1;
      if (lpos > 0 || lineStarting) {
        bool allWs = lpos < text.size();
        for (size_t k = lpos; k < text.size(); ++k)
          allWs &= isSpaceChar(text[k]);
        if (allWs)
          text.erase(lpos);
      }
    }
    if (!text.empty())
      out.push_back({Chunk::Text, text, line});
    lineAt(open);
    pos = open;
    int tagLine = line;
    size_t bodyStart = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
    const char *endDelim = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t close = kind == '#' ? s.find("#}", bodyStart)
                               : findTagEnd(s, bodyStart, endDelim);
    if (close == std::string::npos)
      fail(name, ":", tagLine, ": unclosed '{", kind, "' tag");
    size_t bodyEnd = close;
    char endSign = close > bodyStart ? s[close - 1] : 0;
    if (endSign == '-' || endSign == '+')
      --bodyEnd;
    else
      endSign = 0;
    std::string body = s.substr(bodyStart, bodyEnd - bodyStart);
    size_t after = close + 2;
    stripNext = endSign == '-';
    if (!stripNext && endSign != '+' && kind != '{' && opt.trimBlocks &&
        after < s.size() && s[after] == '\n')
      ++after;
    // {% raw %}: everything up to {% endraw %} is text.
    if (kind == '%') {
      std::string t = body;
      size_t a = t.find_first_not_of(" \t\n");
      size_t b = t.find_last_not_of(" \t\n");
      if (a != std::string::npos && t.substr(a, b - a + 1) == "raw") {
        size_t k = after;
        size_t endTag = std::string::npos, endClose = 0;
        while ((k = s.find("{%", k)) != std::string::npos) {
          size_t c = s.find("%}", k);
          if (c == std::string::npos)
            break;
          std::string inner = s.substr(k + 2, c - k - 2);
          size_t x = inner.find_first_not_of(" \t\n-+");
          size_t y = inner.find_last_not_of(" \t\n-+");
          if (x != std::string::npos &&
              inner.substr(x, y - x + 1) == "endraw") {
            endTag = k;
            endClose = c + 2;
            break;
          }
          k = c;
        }
        if (endTag == std::string::npos)
          fail(name, ":", tagLine, ": {% raw %} without {% endraw %}");
        std::string raw = s.substr(after, endTag - after);
        if (s[endTag + 2] == '-') {
          size_t e = raw.size();
          while (e > 0 && isSpaceChar(raw[e - 1]))
            --e;
          raw.erase(e);
        }
        if (!raw.empty())
          out.push_back({Chunk::Text, raw, tagLine});
        stripNext = s[endClose - 3] == '-';
        after = endClose;
        if (!stripNext && opt.trimBlocks && after < s.size() &&
            s[after] == '\n')
          ++after;
        lineAt(after);
        lineStarting = after > 0 && s[after - 1] == '\n';
        pos = after;
        continue;
      }
    }
    if (kind != '#')
      out.push_back({kind == '{' ? Chunk::Var : Chunk::Block, body, tagLine});
    // After '-', the next text's leading white space goes too.
    if (stripNext) {
      while (after < s.size() && isSpaceChar(s[after]))
        ++after;
      stripNext = false;
    }
    lineAt(after);
    lineStarting = after > 0 && s[after - 1] == '\n';
    pos = after;
    if (pos == s.size())
      break;
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Expression tokens
//===----------------------------------------------------------------------===//
/// Limits that keep the recursive parser and evaluator inside the stack.
constexpr size_t kMaxExprTokens = 2048;
constexpr int kMaxExprNesting = 300; // parse recursion: ~3 per bracket level
constexpr int kMaxBlocks = 100;      // nested {% if/for/macro ... %} blocks

static std::vector<ExprTok> lexExpr(const std::string &s,
                                    const std::string &where) {
  std::vector<ExprTok> toks;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (isSpaceChar(c)) {
      ++i;
      continue;
    }
    if (std::isalpha(uint8_t(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(uint8_t(s[j])) || s[j] == '_'))
        ++j;
      toks.push_back({ExprTok::Name, s.substr(i, j - i)});
      i = j;
      continue;
    }
    if (std::isdigit(uint8_t(c))) {
      size_t j = i;
      bool isFloat = false;
      while (j < s.size() && (std::isdigit(uint8_t(s[j])) || s[j] == '_'))
        ++j;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(uint8_t(s[j + 1]))) {
        isFloat = true;
        ++j;
        while (j < s.size() && std::isdigit(uint8_t(s[j])))
          ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-'))
          ++k;
        if (k < s.size() && std::isdigit(uint8_t(s[k]))) {
          isFloat = true;
          j = k;
          while (j < s.size() && std::isdigit(uint8_t(s[j])))
            ++j;
        }
      }
      std::string num;
      for (size_t k = i; k < j; ++k)
        if (s[k] != '_')
          num += s[k];
      ExprTok t{isFloat ? ExprTok::Float : ExprTok::Int, num};
      if (isFloat)
        t.f = std::strtod(num.c_str(), nullptr);
      else
        t.i = std::strtoll(num.c_str(), nullptr, 10);
      toks.push_back(t);
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          v += s[j];
          continue;
        }
        char e = s[++j];
        switch (e) {
        case 'n':
          v += '\n';
          break;
        case 't':
          v += '\t';
          break;
        case 'r':
          v += '\r';
          break;
        case '\\':
          v += '\\';
          break;
        case '\'':
          v += '\'';
          break;
        case '"':
          v += '"';
          break;
        case '0':
          v += '\0';
          break;
        case 'x':
        case 'u':
        case 'U': {
          int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (j + size_t(n) >= s.size())
            fail(where, ": bad escape in string literal");
          char32_t cp =
              char32_t(std::stoul(s.substr(j + 1, size_t(n)), nullptr, 16));
          appendUtf8(v, cp);
          j += size_t(n);
          break;
        }
        default:
          v += '\\';
          v += e;
        }
      }
      if (j >= s.size())
        fail(where, ": unterminated string literal");
      toks.push_back({ExprTok::Str, v});
      i = j + 1;
      continue;
    }
    static const char *ops2[] = {"==", "!=", "<=", ">=", "//", "**"};
    bool two = false;
    for (const char *o : ops2)
      if (s.compare(i, 2, o) == 0) {
        toks.push_back({ExprTok::Op, o});
        i += 2;
        two = true;
        break;
      }
    if (two)
      continue;
    if (strchr("+-*/%~<>=()[]{},.:|", c)) {
      toks.push_back({ExprTok::Op, std::string(1, c)});
      ++i;
      continue;
    }
    fail(where, ": unexpected character '", c, "' in expression");
  }
  // Parsing, evaluating and freeing an expression recurse once per level of
  // its tree; left-associative chains (a + b + c ..., x|f|f ...) are built
  // by loops, so their depth is bounded only here. Real templates stay far
  // below this; a damaged or hostile chat template must not overflow the
  // stack of the server.
  if (toks.size() > kMaxExprTokens)
    fail(where, ": expression of ", toks.size(), " tokens (at most ",
         kMaxExprTokens, " in one tag)");
  toks.push_back({ExprTok::End, ""});
  return toks;
}

//===----------------------------------------------------------------------===//
// AST
//===----------------------------------------------------------------------===//
struct Expr {
  enum Kind {
    Lit,
    Name,
    ListLit,
    TupleLit,
    DictLit,
    Attr,
    Item,
    Slice,
    Call,
    Filter,
    Test,
    Neg,
    Pos,
    Not,
    And,
    Or,
    Binary,
    Compare,
    Cond,
    Concat
  } kind;
  Value lit;
  std::string name; // Name, Attr, Filter, Test, Binary op
  std::vector<std::unique_ptr<Expr>> kids;
  std::vector<std::string> ops; // Compare chain operators
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  bool negated = false; // Test
  bool hasArgs = false;
};
using ExprP = std::unique_ptr<Expr>;

struct Stmt {
  enum Kind {
    Text,
    Output,
    If,
    For,
    Set,
    SetBlock,
    Macro,
    Break,
    Continue,
    Body
  } kind;
  std::string text;
  int line = 0;
  std::vector<ExprP> exprs; // Output: [e]; If: conds; For: [iter, cond?]
  std::vector<std::vector<std::unique_ptr<Stmt>>> bodies;
  std::vector<std::string> targets; // For/Set names; Set attr: [ns, attr]
  bool attrTarget = false;
  // Macro
  std::vector<std::string> params;
  std::vector<ExprP> defaults; // parallel to params (null = required)
  bool hasElse = false;
};
using StmtP = std::unique_ptr<Stmt>;
using Body = std::vector<StmtP>;

//===----------------------------------------------------------------------===//
// Parser
//===----------------------------------------------------------------------===//
namespace {
struct ExprParser {
  std::vector<ExprTok> t;
  size_t p = 0;
  std::string where;
  int nest = 0; // recursion depth of the parse functions below

  /// Taken by every parse function that recurses on itself.
  RecursionGuard nestGuard() {
    return RecursionGuard(nest, kMaxExprNesting, [&] {
      error("expression nests too deeply (brackets, 'not' or signs)");
    });
  }

  const ExprTok &peek(size_t k = 0) const {
    return t[std::min(p + k, t.size() - 1)];
  }
  bool isOp(const char *o, size_t k = 0) const {
    return peek(k).kind == ExprTok::Op && peek(k).text == o;
  }
  bool isName(const char *n, size_t k = 0) const {
    return peek(k).kind == ExprTok::Name && peek(k).text == n;
  }
  bool eatOp(const char *o) {
    if (isOp(o)) {
      ++p;
      return true;
    }
    return false;
  }
  bool eatName(const char *n) {
    if (isName(n)) {
      ++p;
      return true;
    }
    return false;
  }
  [[noreturn]] void error(const std::string &m) {
    fail(where, ": ", m, " (at '", peek().text, "')");
  }
  void expectOp(const char *o) {
    if (!eatOp(o))
      error(std::string("expected '") + o + "'");
  }
  std::string expectName() {
    if (peek().kind != ExprTok::Name)
      error("expected a name");
    return t[p++].text;
  }
  bool atEnd() const { return peek().kind == ExprTok::End; }

  static ExprP mk(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    return e;
  }

  ExprP parseExpr(bool withCond = true) {
    RecursionGuard guard = nestGuard();
    ExprP e = parseOr();
    if (withCond && eatName("if")) {
      auto c = mk(Expr::Cond);
      ExprP cond = parseOr();
      ExprP other = eatName("else") ? parseExpr() : nullptr;
      c->kids.push_back(std::move(e));
      c->kids.push_back(std::move(cond));
      c->kids.push_back(std::move(other));
      return c;
    }
    return e;
  }
  ExprP parseOr() {
    ExprP e = parseAnd();
    while (eatName("or")) {
      auto o = mk(Expr::Or);
      o->kids.push_back(std::move(e));
      o->kids.push_back(parseAnd());
      e = std::move(o);
    }
    return e;
  }
  ExprP parseAnd() {
    ExprP e = parseNot();
    while (eatName("and")) {
      auto o = mk(Expr::And);
      o->kids.push_back(std::move(e));
      o->kids.push_back(parseNot());
      e = std::move(o);
    }
    return e;
  }
  ExprP parseNot() {
    RecursionGuard guard = nestGuard();
    if (eatName("not")) {
      auto n = mk(Expr::Not);
      n->kids.push_back(parseNot());
      return n;
    }
    return parseCompare();
  }
  ExprP parseCompare() {
    ExprP e = parseMath1();
    ExprP cmp;
    while (true) {
      std::string op;
      if (isOp("==") || isOp("!=") || isOp("<") || isOp("<=") || isOp(">") ||
          isOp(">=")) {
        op = t[p++].text;
      } else if (isName("in")) {
        ++p;
        op = "in";
      } else if (isName("not") && isName("in", 1)) {
        p += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = mk(Expr::Compare);
        cmp->kids.push_back(std::move(e));
      }
      cmp->ops.push_back(op);
      cmp->kids.push_back(parseMath1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }
  ExprP binary(const std::string &op, ExprP a, ExprP b) {
    auto e = mk(op == "~" ? Expr::Concat : Expr::Binary);
    e->name = op;
    e->kids.push_back(std::move(a));
    e->kids.push_back(std::move(b));
    return e;
  }
  ExprP parseMath1() {
    ExprP e = parseConcat();
    while (isOp("+") || isOp("-")) {
      std::string op = t[p++].text;
      e = binary(op, std::move(e), parseConcat());
    }
    return e;
  }
  ExprP parseConcat() {
    ExprP e = parseMath2();
    while (eatOp("~"))
      e = binary("~", std::move(e), parseMath2());
    return e;
  }
  ExprP parseMath2() {
    ExprP e = parsePow();
    while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
      std::string op = t[p++].text;
      e = binary(op, std::move(e), parsePow());
    }
    return e;
  }
  ExprP parsePow() {
    ExprP e = parseUnary(true);
    while (eatOp("**"))
      e = binary("**", std::move(e), parseUnary(true));
    return e;
  }
  ExprP parseUnary(bool withFilter) {
    RecursionGuard guard = nestGuard();
    ExprP e;
    if (eatOp("-")) {
      e = mk(Expr::Neg);
      e->kids.push_back(parseUnary(false));
    } else if (eatOp("+")) {
      e = mk(Expr::Pos);
      e->kids.push_back(parseUnary(false));
    } else {
      e = parsePrimary();
    }
    e = parsePostfix(std::move(e));
    if (withFilter)
      e = parseFilterExpr(std::move(e));
    return e;
  }
  void parseArgs(Expr &call) {
    // after '('
    while (!eatOp(")")) {
      if (peek().kind == ExprTok::Name && isOp("=", 1)) {
        std::string k = t[p].text;
        p += 2;
        call.kwargs.emplace_back(k, parseExpr());
      } else {
        call.kids.push_back(parseExpr());
      }
      if (!isOp(")"))
        expectOp(",");
    }
  }
  ExprP parsePostfix(ExprP e) {
    while (true) {
      if (eatOp(".")) {
        auto a = mk(Expr::Attr);
        if (peek().kind == ExprTok::Int) {
          a->kind = Expr::Item;
          a->kids.push_back(std::move(e));
          auto idx = mk(Expr::Lit);
          idx->lit = Value(t[p++].i);
          a->kids.push_back(std::move(idx));
        } else {
          a->name = expectName();
          a->kids.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (eatOp("[")) {
        ExprP parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!isOp(":") && !isOp("]"))
            parts[k] = parseExpr();
          if (k < 2 && eatOp(":"))
            slice = true;
          else
            break;
        }
        expectOp("]");
        auto s = mk(slice ? Expr::Slice : Expr::Item);
        s->kids.push_back(std::move(e));
        if (slice) {
          for (auto &pp : parts)
            s->kids.push_back(std::move(pp));
        } else {
          if (!parts[0])
            error("empty subscript");
          s->kids.push_back(std::move(parts[0]));
        }
        e = std::move(s);
      } else if (eatOp("(")) {
        auto c = mk(Expr::Call);
        c->kids.push_back(std::move(e));
        parseArgs(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprP parseFilterExpr(ExprP e) {
    while (true) {
      if (eatOp("|")) {
        auto f = mk(Expr::Filter);
        f->name = expectName();
        while (eatOp("."))
          f->name += "." + expectName();
        f->kids.push_back(std::move(e));
        if (eatOp("(")) {
          f->hasArgs = true;
          parseArgs(*f);
        }
        e = std::move(f);
      } else if (eatName("is")) {
        auto te = mk(Expr::Test);
        te->negated = eatName("not");
        te->name = expectName();
        te->kids.push_back(std::move(e));
        if (eatOp("(")) {
          parseArgs(*te);
        } else if (peek().kind == ExprTok::Str || peek().kind == ExprTok::Int ||
                   peek().kind == ExprTok::Float ||
                   (peek().kind == ExprTok::Name && !isName("and") &&
                    !isName("or") && !isName("else") && !isName("if") &&
                    !isName("is") && !isName("in") && !isName("not"))) {
          te->kids.push_back(parsePrimary());
        }
        e = std::move(te);
      } else if (eatOp("(")) {
        auto c = mk(Expr::Call);
        c->kids.push_back(std::move(e));
        parseArgs(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprP parsePrimary() {
    const ExprTok &tk = peek();
    if (tk.kind == ExprTok::Name) {
      ++p;
      auto e = mk(Expr::Lit);
      if (tk.text == "true" || tk.text == "True")
        e->lit = Value(true);
      else if (tk.text == "false" || tk.text == "False")
        e->lit = Value(false);
      else if (tk.text == "none" || tk.text == "None")
        e->lit = Value::none();
      else {
        e->kind = Expr::Name;
        e->name = tk.text;
      }
      return e;
    }
    if (tk.kind == ExprTok::Str) {
      std::string v;
      while (peek().kind == ExprTok::Str)
        v += t[p++].text; // adjacent literals concatenate
      auto e = mk(Expr::Lit);
      e->lit = Value(v);
      return e;
    }
    if (tk.kind == ExprTok::Int || tk.kind == ExprTok::Float) {
      ++p;
      auto e = mk(Expr::Lit);
      e->lit = tk.kind == ExprTok::Int ? Value(tk.i) : Value(tk.f);
      return e;
    }
    if (eatOp("(")) {
      if (eatOp(")"))
        return mk(Expr::TupleLit);
      ExprP first = parseExpr();
      if (eatOp(")"))
        return first;
      auto tup = mk(Expr::TupleLit);
      tup->kids.push_back(std::move(first));
      while (eatOp(",")) {
        if (isOp(")"))
          break;
        tup->kids.push_back(parseExpr());
      }
      expectOp(")");
      return tup;
    }
    if (eatOp("[")) {
      auto l = mk(Expr::ListLit);
      while (!eatOp("]")) {
        l->kids.push_back(parseExpr());
        if (!isOp("]"))
          expectOp(",");
      }
      return l;
    }
    if (eatOp("{")) {
      auto d = mk(Expr::DictLit);
      while (!eatOp("}")) {
        d->kids.push_back(parseExpr());
        expectOp(":");
        d->kids.push_back(parseExpr());
        if (!isOp("}"))
          expectOp(",");
      }
      return d;
    }
    error("expected an expression");
  }
};

struct StmtParser {
  std::vector<Chunk> chunks;
  size_t p = 0;
  std::string name;
  int blocks = 0; // open blocks (parseBody recursion)

  std::string where(int line) const {
    return name + ":" + std::to_string(line);
  }

  // Parses statements until a block whose first word is in `ends`; returns
  // that word (and leaves the chunk's parser at the rest), or "" at the end.
  std::string parseBody(Body &body, const std::vector<std::string> &ends,
                        ExprParser *restOut, int openLine) {
    RecursionGuard open(blocks, kMaxBlocks, [&] {
      fail(where(openLine), ": blocks nest deeper than ", kMaxBlocks,
           " levels");
    });
    while (p < chunks.size()) {
      Chunk &c = chunks[p++];
      if (c.kind == Chunk::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Text;
        s->text = c.body;
        body.push_back(std::move(s));
        continue;
      }
      ExprParser ep{lexExpr(c.body, where(c.line)), 0, where(c.line)};
      if (c.kind == Chunk::Var) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Output;
        s->line = c.line;
        s->exprs.push_back(ep.parseExpr());
        if (!ep.atEnd())
          ep.error("unexpected text after expression");
        body.push_back(std::move(s));
        continue;
      }
      std::string kw = ep.expectName();
      for (const auto &e : ends)
        if (kw == e) {
          if (restOut)
            *restOut = std::move(ep);
          return kw;
        }
      body.push_back(parseStmt(kw, ep, c.line));
    }
    if (!ends.empty())
      fail(where(openLine), ": block not closed (expected {% ", ends.back(),
           " %})");
    return "";
  }

  StmtP parseStmt(const std::string &kw, ExprParser &ep, int line) {
    auto s = std::make_unique<Stmt>();
    s->line = line;
    auto endOfTag = [&]() {
      if (!ep.atEnd())
        ep.error("unexpected text in {% " + kw + " %}");
    };
    if (kw == "if") {
      s->kind = Stmt::If;
      s->exprs.push_back(ep.parseExpr());
      endOfTag();
      while (true) {
        s->bodies.emplace_back();
        ExprParser rest;
        std::string end =
            parseBody(s->bodies.back(), {"elif", "else", "endif"}, &rest, line);
        if (end == "elif") {
          s->exprs.push_back(rest.parseExpr());
        } else if (end == "else") {
          s->hasElse = true;
          s->bodies.emplace_back();
          parseBody(s->bodies.back(), {"endif"}, nullptr, line);
          break;
        } else {
          break;
        }
      }
      return s;
    }
    if (kw == "for") {
      s->kind = Stmt::For;
      do {
        s->targets.push_back(ep.expectName());
      } while (ep.eatOp(","));
      if (!ep.eatName("in"))
        ep.error("expected 'in'");
      s->exprs.push_back(ep.parseExpr(false));
      if (ep.eatName("if"))
        s->exprs.push_back(ep.parseExpr(false));
      if (ep.isName("recursive"))
        ep.error("recursive loops are not supported");
      endOfTag();
      s->bodies.emplace_back();
      std::string end =
          parseBody(s->bodies.back(), {"else", "endfor"}, nullptr, line);
      if (end == "else") {
        s->hasElse = true;
        s->bodies.emplace_back();
        parseBody(s->bodies.back(), {"endfor"}, nullptr, line);
      }
      return s;
    }
    if (kw == "set") {
      std::string first = ep.expectName();
      if (ep.eatOp(".")) {
        s->attrTarget = true;
        s->targets = {first, ep.expectName()};
      } else {
        s->targets.push_back(first);
        while (ep.eatOp(","))
          s->targets.push_back(ep.expectName());
      }
      if (ep.eatOp("=")) {
        s->kind = Stmt::Set;
        ExprP e = ep.parseExpr();
        if (ep.isOp(",")) { // a, b = 1, 2
          auto tup = ExprParser::mk(Expr::TupleLit);
          tup->kids.push_back(std::move(e));
          while (ep.eatOp(","))
            tup->kids.push_back(ep.parseExpr());
          e = std::move(tup);
        }
        s->exprs.push_back(std::move(e));
        endOfTag();
      } else {
        s->kind = Stmt::SetBlock;
        if (ep.eatOp("|"))
          ep.error("filtered set blocks are not supported");
        endOfTag();
        s->bodies.emplace_back();
        parseBody(s->bodies.back(), {"endset"}, nullptr, line);
      }
      return s;
    }
    if (kw == "macro") {
      s->kind = Stmt::Macro;
      s->text = ep.expectName();
      ep.expectOp("(");
      while (!ep.eatOp(")")) {
        s->params.push_back(ep.expectName());
        s->defaults.push_back(ep.eatOp("=") ? ep.parseExpr() : nullptr);
        if (!ep.isOp(")"))
          ep.expectOp(",");
      }
      endOfTag();
      s->bodies.emplace_back();
      parseBody(s->bodies.back(), {"endmacro"}, nullptr, line);
      return s;
    }
    if (kw == "break" || kw == "continue") {
      s->kind = kw == "break" ? Stmt::Break : Stmt::Continue;
      endOfTag();
      return s;
    }
    if (kw == "generation") {
      s->kind = Stmt::Body;
      endOfTag();
      s->bodies.emplace_back();
      parseBody(s->bodies.back(), {"endgeneration"}, nullptr, line);
      return s;
    }
    fail(where(line), ": unsupported or unexpected tag {% ", kw, " %}");
  }
};
} // namespace

//===----------------------------------------------------------------------===//
// Interpreter
//===----------------------------------------------------------------------===//
struct Template::Impl {
  std::string name;
  Body body;
  Limits limits;
};

namespace {
enum class Flow { Normal, Break, Continue };

struct Interp : Builtins {
  const Template::Impl &tpl;
  std::vector<std::shared_ptr<Value::DictData>> scopes;
  std::string out;
  int depth = 0;

  explicit Interp(const Template::Impl &t) : tpl(t) { tplName = t.name; }

  [[noreturn]] void error(int line, const std::string &m) const {
    fail(tpl.name, ":", line, ": ", m);
  }

  Value lookup(const std::string &n) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it)
      if (const Value *v = (*it)->find(n))
        return *v;
    Value g = global(n);
    return g.kind() == Value::Func ? g : Value::undefined(n);
  }
  void assign(const std::string &n, Value v) {
    scopes.back()->set(n, std::move(v));
  }

  // Every evaluation is a step of the render budget, and every string or
  // list it makes is measured (the builtins refuse the multiplying ones,
  // `*` and replace(), before they allocate).
  Value eval(const Expr &e, int line) {
    RenderBudget &budget = *RenderBudget::current();
    budget.step(line);
    Value v = evalOne(e, line);
    if (v.isString())
      budget.bytes(v.str().size(), line, "a string");
    else if (v.kind() == Value::List)
      budget.items(v.items().size(), line, "a list");
    return v;
  }

  Value evalOne(const Expr &e, int line) {
    switch (e.kind) {
    case Expr::Lit:
      return e.lit;
    case Expr::Name:
      return lookup(e.name);
    case Expr::ListLit:
    case Expr::TupleLit: {
      std::vector<Value> items;
      for (const auto &k : e.kids)
        items.push_back(eval(*k, line));
      return e.kind == Expr::TupleLit ? Value::tuple(std::move(items))
                                      : Value::list(std::move(items));
    }
    case Expr::DictLit: {
      Value d = Value::dict();
      for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
        Value k = eval(*e.kids[i], line);
        d.set(toPyStr(k), eval(*e.kids[i + 1], line));
      }
      return d;
    }
    case Expr::Attr:
      return getAttr(eval(*e.kids[0], line), e.name, line);
    case Expr::Item:
      return getItem(eval(*e.kids[0], line), eval(*e.kids[1], line), line);
    case Expr::Slice: {
      Value base = eval(*e.kids[0], line);
      Value parts[3];
      for (int k = 0; k < 3; ++k)
        parts[k] = e.kids[size_t(k) + 1] ? eval(*e.kids[size_t(k) + 1], line)
                                         : Value::none();
      return slice(base, parts[0], parts[1], parts[2], line);
    }
    case Expr::Call: {
      Value f = eval(*e.kids[0], line);
      std::vector<Value> args;
      Kwargs kw;
      for (size_t i = 1; i < e.kids.size(); ++i)
        args.push_back(eval(*e.kids[i], line));
      for (const auto &[k, v] : e.kwargs)
        kw.emplace_back(k, eval(*v, line));
      if (f.kind() != Value::Func)
        error(line, f.isUndefined() ? "'" + f.undefinedName() + "' is undefined"
                                    : "value is not callable");
      return f.fn()(args, kw);
    }
    case Expr::Filter: {
      std::vector<Value> args;
      Kwargs kw;
      args.push_back(eval(*e.kids[0], line));
      for (size_t i = 1; i < e.kids.size(); ++i)
        args.push_back(eval(*e.kids[i], line));
      for (const auto &[k, v] : e.kwargs)
        kw.emplace_back(k, eval(*v, line));
      return filter(e.name, args, kw, line);
    }
    case Expr::Test: {
      std::vector<Value> args;
      for (size_t i = 0; i < e.kids.size(); ++i)
        args.push_back(eval(*e.kids[i], line));
      bool r = test(e.name, args, line);
      return Value(r != e.negated);
    }
    case Expr::Neg:
    case Expr::Pos: {
      Value v = eval(*e.kids[0], line);
      if (v.kind() == Value::Int || v.kind() == Value::Bool) {
        int64_t i = v.kind() == Value::Bool ? int64_t(v.asBool()) : v.asInt();
        if (e.kind == Expr::Neg && i == INT64_MIN)
          error(line, "integer overflow in unary minus");
        return Value(e.kind == Expr::Neg ? -i : i);
      }
      if (v.kind() == Value::Float)
        return Value(e.kind == Expr::Neg ? -v.asFloat() : v.asFloat());
      error(line, "unary minus on a non-number");
    }
    case Expr::Not:
      return Value(!eval(*e.kids[0], line).truthy());
    case Expr::And: {
      Value a = eval(*e.kids[0], line);
      return a.truthy() ? eval(*e.kids[1], line) : a;
    }
    case Expr::Or: {
      Value a = eval(*e.kids[0], line);
      return a.truthy() ? a : eval(*e.kids[1], line);
    }
    case Expr::Concat:
      return Value(toPyStr(eval(*e.kids[0], line)) +
                   toPyStr(eval(*e.kids[1], line)));
    case Expr::Binary:
      return binaryOp(e.name, eval(*e.kids[0], line), eval(*e.kids[1], line),
                      line);
    case Expr::Compare: {
      Value left = eval(*e.kids[0], line);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.kids[i + 1], line);
        if (!compare(e.ops[i], left, right, line))
          return Value(false);
        left = right;
      }
      return Value(true);
    }
    case Expr::Cond: {
      if (eval(*e.kids[1], line).truthy())
        return eval(*e.kids[0], line);
      return e.kids[2] ? eval(*e.kids[2], line) : Value::undefined("");
    }
    }
    return Value();
  }

  Flow exec(const Body &body) {
    for (const auto &s : body) {
      Flow f = execOne(*s);
      if (f != Flow::Normal)
        return f;
    }
    return Flow::Normal;
  }

  Value callMacro(const Stmt &m, std::vector<Value> &args, Kwargs &kw) {
    RecursionGuard guard(depth, 200,
                         [&] { error(m.line, "macro recursion too deep"); });
    auto frame = std::make_shared<Value::DictData>();
    for (size_t i = 0; i < m.params.size(); ++i) {
      Value v;
      bool have = false;
      if (i < args.size()) {
        v = args[i];
        have = true;
      }
      for (auto &[k, kv] : kw)
        if (k == m.params[i]) {
          v = kv;
          have = true;
        }
      if (!have)
        v = m.defaults[i] ? eval(*m.defaults[i], m.line)
                          : Value::undefined(m.params[i]);
      frame->set(m.params[i], v);
    }
    // Macros see the template's top level, not the caller's locals.
    std::vector<std::shared_ptr<Value::DictData>> saved = std::move(scopes);
    scopes = {saved.front(), frame};
    std::string savedOut = std::move(out);
    out.clear();
    try {
      exec(m.bodies[0]);
    } catch (...) {
      scopes = std::move(saved);
      out = std::move(savedOut);
      throw;
    }
    std::string result = std::move(out);
    out = std::move(savedOut);
    scopes = std::move(saved);
    return Value(result);
  }

  Flow execOne(const Stmt &s) {
    RenderBudget &budget = *RenderBudget::current();
    budget.step(s.line);
    switch (s.kind) {
    case Stmt::Text:
      budget.bytes(out.size() + s.text.size(), s.line, "the output");
      out += s.text;
      return Flow::Normal;
    case Stmt::Output: {
      std::string text = toPyStr(eval(*s.exprs[0], s.line));
      budget.bytes(out.size() + text.size(), s.line, "the output");
      out += text;
      return Flow::Normal;
    }
    case Stmt::Body:
      return exec(s.bodies[0]);
    case Stmt::Break:
      return Flow::Break;
    case Stmt::Continue:
      return Flow::Continue;
    case Stmt::If:
      for (size_t i = 0; i < s.exprs.size(); ++i)
        if (eval(*s.exprs[i], s.line).truthy())
          return exec(s.bodies[i]);
      if (s.hasElse)
        return exec(s.bodies.back());
      return Flow::Normal;
    case Stmt::Set: {
      Value v = eval(*s.exprs[0], s.line);
      setTargets(s, v);
      return Flow::Normal;
    }
    case Stmt::SetBlock: {
      std::string saved = std::move(out);
      out.clear();
      exec(s.bodies[0]);
      Value v(out);
      out = std::move(saved);
      setTargets(s, v);
      return Flow::Normal;
    }
    case Stmt::Macro: {
      const Stmt *m = &s;
      assign(s.text,
             Value::function([this, m](std::vector<Value> &a, Kwargs &kw) {
               return callMacro(*m, a, kw);
             }));
      return Flow::Normal;
    }
    case Stmt::For:
      return execFor(s);
    }
    return Flow::Normal;
  }

  void setTargets(const Stmt &s, const Value &v) {
    if (s.attrTarget) {
      Value ns = lookup(s.targets[0]);
      if (ns.kind() != Value::Dict || !ns.dictData().isNamespace)
        error(s.line, "cannot assign attribute '" + s.targets[1] + "' of '" +
                          s.targets[0] + "' (only namespace() objects)");
      ns.set(s.targets[1], v);
      return;
    }
    if (s.targets.size() == 1) {
      assign(s.targets[0], v);
      return;
    }
    std::vector<Value> items = iterate(v, s.line);
    if (items.size() != s.targets.size())
      error(s.line, "cannot unpack " + std::to_string(items.size()) +
                        " values into " + std::to_string(s.targets.size()));
    for (size_t i = 0; i < items.size(); ++i)
      assign(s.targets[i], items[i]);
  }

  Flow execFor(const Stmt &s) {
    Value seq = eval(*s.exprs[0], s.line);
    std::vector<Value> all = iterate(seq, s.line);
    auto frame = std::make_shared<Value::DictData>();
    scopes.push_back(frame);
    auto bind = [&](const Value &item) {
      if (s.targets.size() == 1) {
        frame->set(s.targets[0], item);
        return;
      }
      std::vector<Value> parts = iterate(item, s.line);
      if (parts.size() != s.targets.size())
        error(s.line, "cannot unpack loop item into " +
                          std::to_string(s.targets.size()) + " names");
      for (size_t k = 0; k < parts.size(); ++k)
        frame->set(s.targets[k], parts[k]);
    };
    std::vector<Value> items;
    if (s.exprs.size() > 1) {
      for (const Value &it : all) {
        bind(it);
        if (eval(*s.exprs[1], s.line).truthy())
          items.push_back(it);
      }
    } else {
      items = std::move(all);
    }
    Value outerLoop = lookup("loop");
    size_t n = items.size();
    for (size_t i = 0; i < n; ++i) {
      RenderBudget::current()->step(s.line); // an empty body is a step too
      // Jinja2: assignments in the body do not carry to the next iteration.
      frame = std::make_shared<Value::DictData>();
      scopes.back() = frame;
      Value loop = Value::dict();
      loop.set("index", Value(int64_t(i + 1)));
      loop.set("index0", Value(int64_t(i)));
      loop.set("revindex", Value(int64_t(n - i)));
      loop.set("revindex0", Value(int64_t(n - i - 1)));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i + 1 == n));
      loop.set("length", Value(int64_t(n)));
      loop.set("depth", Value(int64_t(1)));
      loop.set("depth0", Value(int64_t(0)));
      loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("previtem"));
      loop.set("nextitem",
               i + 1 < n ? items[i + 1] : Value::undefined("nextitem"));
      loop.set("cycle", Value::function([i](std::vector<Value> &a, Kwargs &) {
                 return a.empty() ? Value::none() : a[i % a.size()];
               }));
      frame->set("loop", loop);
      bind(items[i]);
      Flow f = exec(s.bodies[0]);
      if (f == Flow::Break)
        break;
    }
    if (n == 0 && s.hasElse) {
      frame->set("loop", outerLoop);
      exec(s.bodies[1]);
    }
    scopes.pop_back();
    return Flow::Normal;
  }
};
} // namespace

Template::Template(const std::string &source, const std::string &name,
                   Options opt)
    : impl_(std::make_shared<Impl>()) {
  impl_->name = name;
  impl_->limits = opt.limits;
  StmtParser sp{chunkSource(source, name, opt), 0, name};
  sp.parseBody(impl_->body, {}, nullptr, 1);
}

Template::~Template() = default;

std::string Template::render(const Value &context) const {
  RenderBudget budget(impl_->name, impl_->limits);
  Interp in(*impl_);
  auto root = std::make_shared<Value::DictData>();
  if (context.kind() == Value::Dict)
    *root = context.dictData();
  in.scopes.push_back(root);
  in.exec(impl_->body);
  return std::move(in.out);
}

} // namespace glm::rt::jinja
