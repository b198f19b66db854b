//===- jinja_builtins.cpp - filters, tests, methods and operators ---------===//
//
// Python semantics where chat templates depend on them: str methods work on
// code points, strip() uses Python's white space, dict attribute access finds
// methods (items, keys, values, get) before keys as Jinja2's getattr does,
// `tojson` is transformers' json.dumps variant (ensure_ascii=False).
//
//===----------------------------------------------------------------------===//
#include "runtime/serve/jinja_builtins.h"

#include "runtime/base/error.h"
#include "runtime/serve/unicode.h"

#include <algorithm>
#include <cmath>
#include <ctime>

namespace glm::rt::jinja {

void Builtins::err(int line, const std::string &m) const {
  fail(tplName, ":", line, ": ", m);
}

static const char *kindName(const Value &v) {
  switch (v.kind()) {
  case Value::Undefined:
    return "undefined";
  case Value::None:
    return "NoneType";
  case Value::Bool:
    return "bool";
  case Value::Int:
    return "int";
  case Value::Float:
    return "float";
  case Value::String:
    return "str";
  case Value::List:
    return "list";
  case Value::Dict:
    return "dict";
  case Value::Func:
    return "function";
  }
  return "?";
}

static bool isIntLike(const Value &v) {
  return v.kind() == Value::Int || v.kind() == Value::Bool;
}
static int64_t intOf(const Value &v) {
  return v.kind() == Value::Bool ? int64_t(v.asBool()) : v.asInt();
}
static bool isNum(const Value &v) {
  return isIntLike(v) || v.kind() == Value::Float;
}
static double numOf(const Value &v) {
  return v.kind() == Value::Float ? v.asFloat() : double(intOf(v));
}

bool pyEquals(const Value &a, const Value &b) {
  if (isNum(a) && isNum(b)) {
    if (isIntLike(a) && isIntLike(b))
      return intOf(a) == intOf(b);
    return numOf(a) == numOf(b);
  }
  if (a.kind() != b.kind())
    return false;
  switch (a.kind()) {
  case Value::Undefined:
  case Value::None:
    return true;
  case Value::String:
    return a.str() == b.str();
  case Value::List: {
    const auto &x = a.items(), &y = b.items();
    if (x.size() != y.size())
      return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!pyEquals(x[i], y[i]))
        return false;
    return true;
  }
  case Value::Dict: {
    const auto &x = a.dictData(), &y = b.dictData();
    if (x.items.size() != y.items.size())
      return false;
    for (const auto &[k, v] : x.items) {
      const Value *o = y.find(k);
      if (!o || !pyEquals(v, *o))
        return false;
    }
    return true;
  }
  case Value::Func:
    return &a.fn() == &b.fn();
  default:
    return false;
  }
}

// Python str.isspace().
static bool pySpace(char32_t c) {
  return unicodeIsSpace(c) || (c >= 0x1C && c <= 0x1F);
}

static std::u32string u32(const std::string &s) { return decodeUtf8(s); }
static std::string u8(const std::u32string &s) { return encodeUtf8(s); }

static std::string pyStrip(const std::string &s, const Value *chars, bool left,
                           bool right) {
  std::u32string t = u32(s);
  std::u32string set;
  bool ws = !chars || chars->isNone() || chars->isUndefined();
  if (!ws)
    set = u32(chars->str());
  auto strip = [&](char32_t c) {
    return ws ? pySpace(c) : set.find(c) != std::u32string::npos;
  };
  size_t b = 0, e = t.size();
  if (left)
    while (b < e && strip(t[b]))
      ++b;
  if (right)
    while (e > b && strip(t[e - 1]))
      --e;
  return u8(t.substr(b, e - b));
}

static std::vector<Value> pySplit(const std::string &s, const Value *sep,
                                  int64_t maxsplit) {
  std::vector<Value> out;
  if (!sep || sep->isNone()) {
    std::u32string t = u32(s);
    size_t i = 0;
    int64_t n = 0;
    while (true) {
      while (i < t.size() && pySpace(t[i]))
        ++i;
      if (i >= t.size())
        break;
      if (maxsplit >= 0 && n == maxsplit) {
        size_t e = t.size();
        while (e > i && pySpace(t[e - 1]))
          --e;
        out.emplace_back(u8(t.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < t.size() && !pySpace(t[j]))
        ++j;
      out.emplace_back(u8(t.substr(i, j - i)));
      chargeItems(out.size(), "split()");
      ++n;
      i = j;
    }
    return out;
  }
  const std::string &d = sep->str();
  check(!d.empty(), "split(): empty separator");
  size_t pos = 0;
  int64_t n = 0;
  while (true) {
    size_t k = s.find(d, pos);
    if (k == std::string::npos || (maxsplit >= 0 && n == maxsplit)) {
      out.emplace_back(s.substr(pos));
      break;
    }
    out.emplace_back(s.substr(pos, k - pos));
    chargeItems(out.size(), "split()");
    pos = k + d.size();
    ++n;
  }
  return out;
}

static std::string replaceAll(const std::string &s, const std::string &a,
                              const std::string &b, int64_t count) {
  if (a.empty()) {
    // Python inserts b between every character.
    std::u32string t = u32(s);
    std::string out;
    int64_t n = 0;
    for (size_t i = 0; i <= t.size(); ++i) {
      if (count < 0 || n < count) {
        out += b;
        ++n;
      }
      if (i < t.size())
        appendUtf8(out, t[i]);
      // Each match may grow the text: check as it grows, not at the end.
      chargeBytes(out.size(), "replace()");
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t k = s.find(a, pos);
    if (k == std::string::npos)
      break;
    out += s.substr(pos, k - pos) + b;
    chargeBytes(out.size(), "replace()");
    pos = k + a.size();
    ++n;
  }
  return out + s.substr(pos);
}

static char32_t upperOf(char32_t c) {
  if (c >= 'a' && c <= 'z')
    return c - 32;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7))
    return c - 32;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2)
    return c - 32;
  if (c >= 0x430 && c <= 0x44F)
    return c - 32;
  return c;
}
static char32_t lowerOf(char32_t c) {
  if (c >= 'A' && c <= 'Z')
    return c + 32;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7))
    return c + 32;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2)
    return c + 32;
  if (c >= 0x410 && c <= 0x42F)
    return c + 32;
  return c;
}
static std::string mapCase(const std::string &s, bool up) {
  std::u32string t = u32(s);
  for (auto &c : t)
    c = up ? upperOf(c) : lowerOf(c);
  return u8(t);
}
static bool isCased(char32_t c) { return upperOf(c) != c || lowerOf(c) != c; }
static std::string pyTitle(const std::string &s) {
  std::u32string t = u32(s);
  bool prevCased = false;
  for (auto &c : t) {
    c = prevCased ? lowerOf(c) : upperOf(c);
    prevCased = isCased(c) || unicodeInMask(c, unicodeCategoryMask("L"));
  }
  return u8(t);
}
static std::string pyCapitalize(const std::string &s) {
  std::u32string t = u32(s);
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = i == 0 ? upperOf(t[i]) : lowerOf(t[i]);
  return u8(t);
}

static bool startsOrEnds(const std::string &s, const Value &arg, bool ends) {
  auto one = [&](const std::string &x) {
    if (x.size() > s.size())
      return false;
    return ends ? s.compare(s.size() - x.size(), x.size(), x) == 0
                : s.compare(0, x.size(), x) == 0;
  };
  if (arg.kind() == Value::List) {
    for (const Value &v : arg.items())
      if (v.isString() && one(v.str()))
        return true;
    return false;
  }
  return arg.isString() && one(arg.str());
}

std::vector<Value> Builtins::iterate(const Value &v, int line) const {
  switch (v.kind()) {
  case Value::Undefined:
    return {};
  case Value::List:
    return v.items();
  case Value::Dict: {
    std::vector<Value> keys;
    for (const auto &[k, e] : v.dictData().items)
      keys.emplace_back(k);
    return keys;
  }
  case Value::String: {
    std::vector<Value> chars;
    std::u32string cps = u32(v.str());
    chargeItems(cps.size(), "the characters of a string");
    for (char32_t c : cps) {
      std::string s;
      appendUtf8(s, c);
      chars.emplace_back(s);
    }
    return chars;
  }
  default:
    err(line, std::string("'") + kindName(v) + "' object is not iterable");
  }
}

static const Value *arg(std::vector<Value> &args, Kwargs &kw, size_t i,
                        const char *name) {
  for (auto &[k, v] : kw)
    if (k == name)
      return &v;
  return i < args.size() ? &args[i] : nullptr;
}

Value Builtins::getAttr(const Value &obj, const std::string &name,
                        int line) const {
  if (obj.isUndefined())
    err(line,
        "'" + obj.undefinedName() + "' is undefined (reading ." + name + ")");
  if (obj.kind() == Value::String) {
    std::string s = obj.str();
    auto bind = [&](auto f) {
      return Value::function(
          [s, f](std::vector<Value> &a, Kwargs &kw) { return f(s, a, kw); });
    };
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      bool l = name != "rstrip", r = name != "lstrip";
      return bind(
          [l, r](const std::string &s, std::vector<Value> &a, Kwargs &kw) {
            return Value(pyStrip(s, arg(a, kw, 0, "chars"), l, r));
          });
    }
    if (name == "split" || name == "rsplit")
      return bind([](const std::string &s, std::vector<Value> &a, Kwargs &kw) {
        const Value *m = arg(a, kw, 1, "maxsplit");
        return Value::list(
            pySplit(s, arg(a, kw, 0, "sep"), m ? m->asInt() : -1));
      });
    if (name == "splitlines")
      return bind([](const std::string &s, std::vector<Value> &, Kwargs &) {
        std::vector<Value> out;
        size_t pos = 0;
        while (pos < s.size()) {
          size_t k = s.find_first_of("\r\n", pos);
          if (k == std::string::npos) {
            out.emplace_back(s.substr(pos));
            break;
          }
          out.emplace_back(s.substr(pos, k - pos));
          pos = k +
                (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n' ? 2 : 1);
        }
        return Value::list(out);
      });
    if (name == "startswith" || name == "endswith") {
      bool ends = name == "endswith";
      return bind(
          [ends](const std::string &s, std::vector<Value> &a, Kwargs &) {
            return Value(!a.empty() && startsOrEnds(s, a[0], ends));
          });
    }
    if (name == "upper" || name == "lower") {
      bool up = name == "upper";
      return bind([up](const std::string &s, std::vector<Value> &, Kwargs &) {
        return Value(mapCase(s, up));
      });
    }
    if (name == "title")
      return bind([](const std::string &s, std::vector<Value> &, Kwargs &) {
        return Value(pyTitle(s));
      });
    if (name == "capitalize")
      return bind([](const std::string &s, std::vector<Value> &, Kwargs &) {
        return Value(pyCapitalize(s));
      });
    if (name == "replace")
      return bind([](const std::string &s, std::vector<Value> &a, Kwargs &kw) {
        check(a.size() >= 2 && a[0].isString() && a[1].isString(),
              "replace() needs two strings");
        const Value *c = arg(a, kw, 2, "count");
        return Value(
            replaceAll(s, a[0].str(), a[1].str(), c ? c->asInt() : -1));
      });
    if (name == "find" || name == "rfind" || name == "count") {
      std::string which = name;
      return bind(
          [which](const std::string &s, std::vector<Value> &a, Kwargs &) {
            check(!a.empty() && a[0].isString(), which, "() needs a string");
            const std::string &x = a[0].str();
            if (which == "count") {
              if (x.empty())
                return Value(int64_t(u32(s).size() + 1));
              int64_t n = 0;
              for (size_t k = s.find(x); k != std::string::npos;
                   k = s.find(x, k + x.size()))
                ++n;
              return Value(n);
            }
            size_t k = which == "find" ? s.find(x) : s.rfind(x);
            if (k == std::string::npos)
              return Value(int64_t(-1));
            return Value(int64_t(u32(s.substr(0, k)).size()));
          });
    }
    if (name == "join")
      return bind(
          [this, line](const std::string &s, std::vector<Value> &a, Kwargs &) {
            std::string out;
            bool first = true;
            for (const Value &v : iterate(a.empty() ? Value() : a[0], line)) {
              if (!first)
                out += s;
              first = false;
              out += toPyStr(v);
              chargeBytes(out.size(), "join()");
            }
            return Value(out);
          });
    if (name == "removeprefix" || name == "removesuffix") {
      bool suf = name == "removesuffix";
      return bind([suf](const std::string &s, std::vector<Value> &a, Kwargs &) {
        if (!a.empty() && startsOrEnds(s, a[0], suf))
          return Value(suf ? s.substr(0, s.size() - a[0].str().size())
                           : s.substr(a[0].str().size()));
        return Value(s);
      });
    }
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" ||
        name == "isspace" || name == "isupper" || name == "islower") {
      std::string which = name;
      return bind(
          [which](const std::string &s, std::vector<Value> &, Kwargs &) {
            std::u32string t = u32(s);
            if (t.empty())
              return Value(false);
            bool anyCased = false;
            for (char32_t c : t) {
              bool L = unicodeInMask(c, unicodeCategoryMask("L"));
              bool D = unicodeInMask(c, unicodeCategoryMask("Nd"));
              if (which == "isdigit" && !D)
                return Value(false);
              if (which == "isalpha" && !L)
                return Value(false);
              if (which == "isalnum" && !L &&
                  !unicodeInMask(c, unicodeCategoryMask("N")))
                return Value(false);
              if (which == "isspace" && !pySpace(c))
                return Value(false);
              if (which == "isupper" && lowerOf(c) != c && upperOf(c) == c)
                anyCased = true;
              if (which == "isupper" && upperOf(c) != c)
                return Value(false);
              if (which == "islower" && upperOf(c) != c && lowerOf(c) == c)
                anyCased = true;
              if (which == "islower" && lowerOf(c) != c)
                return Value(false);
            }
            if (which == "isupper" || which == "islower")
              return Value(anyCased);
            return Value(true);
          });
    }
    return Value::undefined(name);
  }
  if (obj.kind() == Value::Dict) {
    const Value *own = obj.get(name);
    if (!obj.dictData().isNamespace) {
      Value d = obj;
      if (name == "items")
        return Value::function([d](std::vector<Value> &, Kwargs &) {
          std::vector<Value> out;
          for (const auto &[k, v] : d.dictData().items)
            out.push_back(Value::tuple({Value(k), v}));
          return Value::list(out);
        });
      if (name == "keys" || name == "values") {
        bool keys = name == "keys";
        return Value::function([d, keys](std::vector<Value> &, Kwargs &) {
          std::vector<Value> out;
          for (const auto &[k, v] : d.dictData().items)
            out.push_back(keys ? Value(k) : v);
          return Value::list(out);
        });
      }
      if (name == "get")
        return Value::function([d](std::vector<Value> &a, Kwargs &) {
          check(!a.empty(), "get() needs a key");
          const Value *v = d.get(toPyStr(a[0]));
          return v ? *v : (a.size() > 1 ? a[1] : Value::none());
        });
    }
    return own ? *own : Value::undefined(name);
  }
  return Value::undefined(name);
}

static bool normIndex(int64_t &i, size_t n) {
  if (i < 0)
    i += int64_t(n);
  return i >= 0 && i < int64_t(n);
}

Value Builtins::getItem(const Value &obj, const Value &key, int line) const {
  if (obj.isUndefined())
    err(line, "'" + obj.undefinedName() + "' is undefined (reading [" +
                  toPyRepr(key) + "])");
  if (obj.kind() == Value::Dict) {
    const Value *v = obj.get(toPyStr(key));
    if (v)
      return *v;
    if (key.isString())
      return getAttr(obj, key.str(), line);
    return Value::undefined(toPyStr(key));
  }
  if ((obj.kind() == Value::List || obj.kind() == Value::String) &&
      isIntLike(key)) {
    int64_t i = intOf(key);
    if (obj.kind() == Value::List) {
      if (!normIndex(i, obj.items().size()))
        return Value::undefined("[" + std::to_string(intOf(key)) + "]");
      return obj.items()[size_t(i)];
    }
    std::u32string t = u32(obj.str());
    if (!normIndex(i, t.size()))
      return Value::undefined("[" + std::to_string(intOf(key)) + "]");
    return Value(u8(t.substr(size_t(i), 1)));
  }
  if (key.isString())
    return getAttr(obj, key.str(), line);
  return Value::undefined(toPyStr(key));
}

Value Builtins::slice(const Value &obj, const Value &startV, const Value &stopV,
                      const Value &stepV, int line) const {
  int64_t step = stepV.isNone() ? 1 : intOf(stepV);
  if (step == 0)
    err(line, "slice step cannot be zero");
  bool isStr = obj.kind() == Value::String;
  if (!isStr && obj.kind() != Value::List)
    err(line, std::string("cannot slice a ") + kindName(obj));
  std::u32string t;
  if (isStr)
    t = u32(obj.str());
  int64_t n = isStr ? int64_t(t.size()) : int64_t(obj.items().size());
  auto clamp = [&](const Value &v, int64_t dflt) {
    if (v.isNone())
      return dflt;
    int64_t i = intOf(v);
    if (i < 0)
      i += n;
    if (step > 0)
      return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t start = clamp(startV, step > 0 ? 0 : n - 1);
  int64_t stop = clamp(stopV, step > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    idx.push_back(i);
  if (isStr) {
    std::u32string r;
    for (int64_t i : idx)
      r += t[size_t(i)];
    return Value(u8(r));
  }
  std::vector<Value> r;
  for (int64_t i : idx)
    r.push_back(obj.items()[size_t(i)]);
  return Value::list(r);
}

Value Builtins::binaryOp(const std::string &op, const Value &a, const Value &b,
                         int line) const {
  auto bad = [&]() {
    err(line, std::string("unsupported operand types for ") + op + ": '" +
                  kindName(a) + "' and '" + kindName(b) + "'");
  };
  RenderBudget *budget = RenderBudget::current();
  if (op == "+") {
    if (a.isString() && b.isString()) {
      if (budget)
        budget->bytes(a.str().size() + b.str().size(), line, "string +");
      return Value(a.str() + b.str());
    }
    if (a.kind() == Value::List && b.kind() == Value::List) {
      if (budget)
        budget->items(a.items().size() + b.items().size(), line, "list +");
      auto items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::list(items);
    }
  }
  if (op == "*") {
    const Value *seq = a.isString() || a.kind() == Value::List ? &a : &b;
    const Value *cnt = seq == &a ? &b : &a;
    if ((seq->isString() || seq->kind() == Value::List) && isIntLike(*cnt)) {
      int64_t n = std::max<int64_t>(0, intOf(*cnt));
      // Size the result before building it: "x" * 10**9 is refused, not
      // allocated. Lists copy their string items, so they count bytes too.
      size_t unit = seq->isString() ? seq->str().size() : 0;
      size_t count = seq->isString() ? 0 : seq->items().size();
      if (!seq->isString())
        for (const Value &e : seq->items())
          unit += e.isString() ? e.str().size() : 0;
      auto times = [&](size_t x) {
        return x && uint64_t(n) > SIZE_MAX / x ? SIZE_MAX : x * size_t(n);
      };
      if (budget) {
        budget->bytes(times(unit), line, "sequence * count");
        budget->items(times(count), line, "list * count");
      }
      if (seq->isString()) {
        std::string r;
        for (int64_t i = 0; i < n; ++i)
          r += seq->str();
        return Value(r);
      }
      std::vector<Value> r;
      for (int64_t i = 0; i < n; ++i)
        r.insert(r.end(), seq->items().begin(), seq->items().end());
      return Value::list(r);
    }
  }
  if (!isNum(a) || !isNum(b))
    bad();
  bool ints = isIntLike(a) && isIntLike(b);
  // Python integers do not overflow; ours are 64-bit and refuse instead
  // (signed overflow would be undefined behaviour).
  auto checked = [&](bool overflow, int64_t r) {
    if (overflow)
      err(line, std::string("integer overflow in ") + op +
                    " (results are limited to 64 bits)");
    return Value(r);
  };
  if (ints && (op == "+" || op == "-" || op == "*")) {
    int64_t x = intOf(a), y = intOf(b), r = 0;
    bool over = op == "+"   ? __builtin_add_overflow(x, y, &r)
                : op == "-" ? __builtin_sub_overflow(x, y, &r)
                            : __builtin_mul_overflow(x, y, &r);
    return checked(over, r);
  }
  if (op == "+")
    return Value(numOf(a) + numOf(b));
  if (op == "-")
    return Value(numOf(a) - numOf(b));
  if (op == "*")
    return Value(numOf(a) * numOf(b));
  if (op == "/") {
    if (numOf(b) == 0)
      err(line, "division by zero");
    return Value(numOf(a) / numOf(b));
  }
  if (op == "//" || op == "%") {
    if (numOf(b) == 0)
      err(line, "division by zero");
    if (ints) {
      int64_t x = intOf(a), y = intOf(b);
      if (x == INT64_MIN && y == -1)
        return checked(true, 0);
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return op == "//" ? Value(q) : Value(r);
    }
    double x = numOf(a), y = numOf(b);
    double q = std::floor(x / y);
    return op == "//" ? Value(q) : Value(x - q * y);
  }
  if (op == "**") {
    if (ints && intOf(b) >= 0) {
      // Square-and-multiply: 63 rounds at most, whatever the exponent, and
      // every product checked (2 ** 64 is refused, 1 ** 10**18 is 1).
      int64_t base = intOf(a), e = intOf(b), p = 1;
      bool over = false;
      while (e > 0 && !over) {
        if (e & 1)
          over |= __builtin_mul_overflow(p, base, &p);
        e >>= 1;
        if (e > 0)
          over |= __builtin_mul_overflow(base, base, &base);
      }
      return checked(over, p);
    }
    return Value(std::pow(numOf(a), numOf(b)));
  }
  bad();
  return Value();
}

static int cmpValues(const Value &a, const Value &b, bool &ok) {
  ok = true;
  if (isNum(a) && isNum(b)) {
    if (isIntLike(a) && isIntLike(b))
      return intOf(a) < intOf(b) ? -1 : intOf(a) > intOf(b);
    return numOf(a) < numOf(b) ? -1 : numOf(a) > numOf(b);
  }
  if (a.isString() && b.isString())
    return a.str().compare(b.str()) < 0 ? -1 : a.str() != b.str();
  if (a.kind() == Value::List && b.kind() == Value::List) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      int c = cmpValues(x[i], y[i], ok);
      if (!ok || c)
        return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  ok = false;
  return 0;
}

bool Builtins::compare(const std::string &op, const Value &a, const Value &b,
                       int line) const {
  if (op == "==")
    return pyEquals(a, b);
  if (op == "!=")
    return !pyEquals(a, b);
  if (op == "in" || op == "not in") {
    bool r = false;
    if (b.isString()) {
      if (!a.isString())
        err(line, "'in <string>' needs a string on the left");
      r = b.str().find(a.str()) != std::string::npos;
    } else if (b.kind() == Value::Dict) {
      r = a.isString() && b.get(a.str()) != nullptr;
    } else {
      for (const Value &v : iterate(b, line))
        if (pyEquals(a, v)) {
          r = true;
          break;
        }
    }
    return op == "in" ? r : !r;
  }
  bool ok;
  int c = cmpValues(a, b, ok);
  if (!ok)
    err(line, "'" + op + "' not supported between '" + kindName(a) + "' and '" +
                  kindName(b) + "'");
  if (op == "<")
    return c < 0;
  if (op == "<=")
    return c <= 0;
  if (op == ">")
    return c > 0;
  return c >= 0;
}

bool Builtins::test(const std::string &name, std::vector<Value> &args,
                    int line) const {
  const Value &v = args[0];
  auto other = [&]() -> const Value & {
    if (args.size() < 2)
      err(line, "test '" + name + "' needs an argument");
    return args[1];
  };
  if (name == "defined")
    return !v.isUndefined();
  if (name == "undefined")
    return v.isUndefined();
  if (name == "none")
    return v.isNone();
  if (name == "string")
    return v.isString();
  if (name == "mapping")
    return v.kind() == Value::Dict && !v.dictData().isNamespace;
  if (name == "iterable")
    return v.kind() == Value::List || v.kind() == Value::Dict || v.isString() ||
           v.isUndefined();
  if (name == "sequence")
    return v.kind() == Value::List || v.isString() ||
           (v.kind() == Value::Dict && !v.dictData().isNamespace) ||
           v.isUndefined();
  if (name == "number")
    return isNum(v);
  if (name == "integer")
    return v.kind() == Value::Int;
  if (name == "float")
    return v.kind() == Value::Float;
  if (name == "boolean")
    return v.kind() == Value::Bool;
  if (name == "true")
    return v.kind() == Value::Bool && v.asBool();
  if (name == "false")
    return v.kind() == Value::Bool && !v.asBool();
  if (name == "callable")
    return v.kind() == Value::Func;
  if (name == "even" || name == "odd") {
    if (!isIntLike(v))
      err(line, "test '" + name + "' needs an integer");
    return (intOf(v) % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    int64_t d = intOf(other());
    if (d == 0)
      err(line, "divisibleby(0)");
    return intOf(v) % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==")
    return pyEquals(v, other());
  if (name == "ne" || name == "!=")
    return !pyEquals(v, other());
  static const std::pair<const char *, const char *> cmps[] = {
      {"lt", "<"},          {"lessthan", "<"}, {"le", "<="}, {"gt", ">"},
      {"greaterthan", ">"}, {"ge", ">="},      {"<", "<"},   {"<=", "<="},
      {">", ">"},           {">=", ">="}};
  for (const auto &[n, op] : cmps)
    if (name == n)
      return compare(op, v, other(), line);
  if (name == "in")
    return compare("in", v, other(), line);
  if (name == "sameas")
    return pyEquals(v, other()) && v.kind() == other().kind();
  if (name == "lower" || name == "upper")
    return v.isString() && mapCase(v.str(), name == "upper") == v.str();
  if (name == "escaped")
    return false;
  err(line, "unknown test '" + name + "'");
}

static std::string htmlEscape(const std::string &s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&#34;";
      break;
    case '\'':
      out += "&#39;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

Value Builtins::filter(const std::string &name, std::vector<Value> &args,
                       Kwargs &kw, int line) const {
  Value v = args[0];
  auto a = [&](size_t i, const char *k) { return arg(args, kw, i, k); };
  auto needStr = [&]() -> std::string {
    if (v.isUndefined())
      return "";
    return toPyStr(v);
  };
  if (name == "tojson") {
    const Value *indent = a(1, "indent");
    const Value *ascii = a(99, "ensure_ascii");
    const Value *sortKeys = a(99, "sort_keys");
    return Value(
        dumpJson(v, indent && !indent->isNone() ? int(intOf(*indent)) : -1,
                 ascii && ascii->truthy(), sortKeys && sortKeys->truthy()));
  }
  if (name == "trim") {
    return Value(pyStrip(needStr(), a(1, "chars"), true, true));
  }
  if (name == "length" || name == "count") {
    if (v.isString())
      return Value(int64_t(u32(v.str()).size()));
    if (v.kind() == Value::List)
      return Value(int64_t(v.items().size()));
    if (v.kind() == Value::Dict)
      return Value(int64_t(v.dictData().items.size()));
    if (v.isUndefined())
      return Value(int64_t(0));
    err(line, std::string("object of type '") + kindName(v) + "' has no len()");
  }
  if (name == "default" || name == "d") {
    const Value *dflt = a(1, "default_value");
    const Value *boolean = a(2, "boolean");
    bool use = v.isUndefined() || (boolean && boolean->truthy() && !v.truthy());
    return use ? (dflt ? *dflt : Value("")) : v;
  }
  if (name == "join") {
    const Value *sep = a(1, "d");
    const Value *attr = a(2, "attribute");
    std::string out;
    bool first = true;
    for (const Value &e : iterate(v, line)) {
      if (!first)
        out += sep ? toPyStr(*sep) : "";
      first = false;
      out += toPyStr(attr ? getAttr(e, toPyStr(*attr), line) : e);
      chargeBytes(out.size(), "join");
    }
    return Value(out);
  }
  if (name == "upper" || name == "lower")
    return Value(mapCase(needStr(), name == "upper"));
  if (name == "capitalize")
    return Value(pyCapitalize(needStr()));
  if (name == "title")
    return Value(pyTitle(needStr()));
  if (name == "string")
    return Value(toPyStr(v));
  if (name == "safe")
    return v;
  if (name == "e" || name == "escape" || name == "forceescape")
    return Value(htmlEscape(toPyStr(v)));
  if (name == "items") {
    if (v.isUndefined())
      return Value::list();
    if (v.kind() != Value::Dict)
      err(line, "items filter needs a mapping");
    std::vector<Value> out;
    for (const auto &[k, e] : v.dictData().items)
      out.push_back(Value::tuple({Value(k), e}));
    return Value::list(out);
  }
  if (name == "dictsort") {
    if (v.kind() != Value::Dict)
      err(line, "dictsort needs a mapping");
    auto items = v.dictData().items;
    std::stable_sort(items.begin(), items.end(),
                     [](const auto &x, const auto &y) {
                       return mapCase(x.first, false) < mapCase(y.first, false);
                     });
    std::vector<Value> out;
    for (const auto &[k, e] : items)
      out.push_back(Value::tuple({Value(k), e}));
    return Value::list(out);
  }
  if (name == "list")
    return Value::list(iterate(v, line));
  if (name == "replace") {
    const Value *x = a(1, "old"), *y = a(2, "new"), *c = a(3, "count");
    if (!x || !y)
      err(line, "replace needs old and new");
    return Value(replaceAll(needStr(), toPyStr(*x), toPyStr(*y),
                            c && !c->isNone() ? intOf(*c) : -1));
  }
  if (name == "first" || name == "last") {
    std::vector<Value> items = iterate(v, line);
    if (items.empty())
      return Value::undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.isString()) {
      std::u32string t = u32(v.str());
      std::reverse(t.begin(), t.end());
      return Value(u8(t));
    }
    std::vector<Value> items = iterate(v, line);
    std::reverse(items.begin(), items.end());
    return Value::list(items);
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    const Value *rev = a(1, "reverse");
    const Value *cs = a(name == "sort" ? 2 : 1, "case_sensitive");
    const Value *attr = a(name == "sort" ? 3 : 2, "attribute");
    bool caseSens = cs && cs->truthy();
    std::vector<Value> items = iterate(v, line);
    auto key = [&](const Value &e) {
      Value k = attr ? getAttr(e, toPyStr(*attr), line) : e;
      if (!caseSens && k.isString())
        return Value(mapCase(k.str(), false));
      return k;
    };
    if (name == "unique") {
      std::vector<Value> out, seen;
      for (const Value &e : items) {
        Value k = key(e);
        bool dup = false;
        for (const Value &s : seen)
          dup |= pyEquals(s, k);
        if (!dup) {
          seen.push_back(k);
          out.push_back(e);
        }
      }
      return Value::list(out);
    }
    std::stable_sort(items.begin(), items.end(),
                     [&](const Value &x, const Value &y) {
                       bool ok;
                       int c = cmpValues(key(x), key(y), ok);
                       if (!ok)
                         err(line, "cannot sort these values");
                       return c < 0;
                     });
    if (name == "min")
      return items.empty() ? Value::undefined("min") : items.front();
    if (name == "max")
      return items.empty() ? Value::undefined("max") : items.back();
    if (rev && rev->truthy())
      std::reverse(items.begin(), items.end());
    return Value::list(items);
  }
  if (name == "sum") {
    const Value *attr = a(1, "attribute");
    const Value *start = a(2, "start");
    Value acc = start ? *start : Value(int64_t(0));
    for (const Value &e : iterate(v, line))
      acc =
          binaryOp("+", acc, attr ? getAttr(e, toPyStr(*attr), line) : e, line);
    return acc;
  }
  if (name == "abs") {
    if (isIntLike(v)) {
      if (intOf(v) == INT64_MIN)
        err(line, "integer overflow in abs (results are limited to 64 bits)");
      return Value(int64_t(std::llabs(intOf(v))));
    }
    if (v.kind() == Value::Float)
      return Value(std::fabs(v.asFloat()));
    err(line, "abs needs a number");
  }
  // A float outside int64 (or NaN) has no integer value: converting it would
  // be undefined behaviour, so int() gives the default as for a bad string.
  auto toInt = [](double d, int64_t &out) {
    if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0))
      return false;
    out = int64_t(d);
    return true;
  };
  if (name == "int") {
    const Value *dflt = a(1, "default");
    int64_t i = 0;
    if (isIntLike(v))
      return Value(intOf(v));
    if (v.kind() == Value::Float && toInt(v.asFloat(), i))
      return Value(i);
    if (v.isString()) {
      std::string s = pyStrip(v.str(), nullptr, true, true);
      char *end = nullptr;
      long long r = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end && *end == 0)
        return Value(int64_t(r));
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == 0 && toInt(d, i))
        return Value(i);
    }
    return dflt ? *dflt : Value(int64_t(0));
  }
  if (name == "float") {
    const Value *dflt = a(1, "default");
    if (isNum(v))
      return Value(numOf(v));
    if (v.isString()) {
      std::string s = pyStrip(v.str(), nullptr, true, true);
      char *end = nullptr;
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == 0)
        return Value(d);
    }
    return dflt ? *dflt : Value(0.0);
  }
  if (name == "round") {
    const Value *prec = a(1, "precision");
    const Value *method = a(2, "method");
    int p = prec ? int(intOf(*prec)) : 0;
    std::string m = method ? toPyStr(*method) : "common";
    double x = numOf(v), scale = std::pow(10.0, p);
    double r;
    if (m == "ceil")
      r = std::ceil(x * scale) / scale;
    else if (m == "floor")
      r = std::floor(x * scale) / scale;
    else {
      char buf[64];
      snprintf(buf, sizeof buf, "%.*f", std::max(p, 0), x);
      r = std::strtod(buf, nullptr);
    }
    return Value(r);
  }
  if (name == "indent") {
    const Value *w = a(1, "width");
    const Value *first = a(2, "first");
    const Value *blank = a(3, "blank");
    int64_t width = w && !w->isString() ? intOf(*w) : 4;
    if (width < 0)
      err(line, "indent width must not be negative");
    chargeBytes(size_t(width), "indent width");
    std::string pad =
        w && w->isString() ? w->str() : std::string(size_t(width), ' ');
    std::string s = needStr();
    std::string out;
    size_t pos = 0;
    bool firstLine = true;
    while (true) {
      size_t k = s.find('\n', pos);
      std::string lineStr =
          s.substr(pos, k == std::string::npos ? std::string::npos : k - pos);
      bool doPad = firstLine ? (first && first->truthy())
                             : (!lineStr.empty() || (blank && blank->truthy()));
      if (doPad)
        out += pad;
      out += lineStr;
      chargeBytes(out.size(), "indent");
      if (k == std::string::npos)
        break;
      out += '\n';
      pos = k + 1;
      firstLine = false;
    }
    return Value(out);
  }
  if (name == "wordcount")
    return Value(int64_t(pySplit(needStr(), nullptr, -1).size()));
  if (name == "attr") {
    const Value *n = a(1, "name");
    return n ? getAttr(v, toPyStr(*n), line) : Value::undefined("attr");
  }
  if (name == "map" || name == "select" || name == "reject" ||
      name == "selectattr" || name == "rejectattr") {
    std::vector<Value> out;
    std::vector<Value> items = iterate(v, line);
    if (name == "map") {
      const Value *attr = a(99, "attribute");
      const Value *dflt = a(99, "default");
      for (const Value &e : items) {
        if (attr) {
          Value r = getAttr(e, toPyStr(*attr), line);
          out.push_back(r.isUndefined() && dflt ? *dflt : r);
        } else {
          if (args.size() < 2)
            err(line, "map needs a filter name or attribute=");
          std::vector<Value> fa{e};
          fa.insert(fa.end(), args.begin() + 2, args.end());
          Kwargs none;
          out.push_back(filter(toPyStr(args[1]), fa, none, line));
        }
      }
      return Value::list(out);
    }
    bool byAttr = name == "selectattr" || name == "rejectattr";
    bool want = name == "select" || name == "selectattr";
    size_t ti = byAttr ? 2 : 1;
    for (const Value &e : items) {
      Value subject = byAttr ? getAttr(e, toPyStr(args.at(1)), line) : e;
      bool r;
      if (args.size() > ti) {
        std::vector<Value> ta{subject};
        ta.insert(ta.end(), args.begin() + long(ti) + 1, args.end());
        r = test(toPyStr(args[ti]), ta, line);
      } else {
        r = subject.truthy();
      }
      if (r == want)
        out.push_back(e);
    }
    return Value::list(out);
  }
  err(line, "unknown filter '" + name + "'");
}

Value Builtins::global(const std::string &name) const {
  if (name == "range")
    return Value::function([](std::vector<Value> &a, Kwargs &) {
      check(!a.empty() && a.size() <= 3, "range() takes 1 to 3 arguments");
      int64_t start = 0, stop, step = 1;
      if (a.size() == 1) {
        stop = intOf(a[0]);
      } else {
        start = intOf(a[0]);
        stop = intOf(a[1]);
        if (a.size() == 3)
          step = intOf(a[2]);
      }
      check(step != 0, "range() step must not be zero");
      std::vector<Value> out;
      // The length first (Python's formula, in 128 bits): never a loop
      // of 2^63 steps or an overflowing i += step.
      __int128 span =
          step > 0 ? __int128(stop) - start : __int128(start) - stop;
      __int128 mag = step > 0 ? step : -__int128(step);
      __int128 n = span <= 0 ? 0 : (span + mag - 1) / mag;
      chargeItems(n > __int128(SIZE_MAX) ? SIZE_MAX : size_t(n), "range()");
      for (__int128 i = 0; i < n; ++i)
        out.push_back(Value(int64_t(start + i * step)));
      return Value::list(out);
    });
  if (name == "namespace" || name == "dict") {
    bool ns = name == "namespace";
    return Value::function([ns](std::vector<Value> &a, Kwargs &kw) {
      Value d = Value::dict();
      d.dictData().isNamespace = ns;
      for (const Value &init : a)
        if (init.kind() == Value::Dict)
          for (const auto &[k, v] : init.dictData().items)
            d.set(k, v);
      for (auto &[k, v] : kw)
        d.set(k, v);
      return d;
    });
  }
  if (name == "raise_exception") {
    std::string where = tplName;
    return Value::function([where](std::vector<Value> &a, Kwargs &) -> Value {
      fail(where, ": the chat template refused the conversation: ",
           a.empty() ? std::string("(no message)") : toPyStr(a[0]));
    });
  }
  if (name == "strftime_now")
    return Value::function([](std::vector<Value> &a, Kwargs &) {
      check(!a.empty() && a[0].isString(), "strftime_now(format)");
      std::time_t t = std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      char buf[256];
      size_t n = std::strftime(buf, sizeof buf, a[0].str().c_str(), &tm);
      return Value(std::string(buf, n));
    });
  return Value::undefined(name);
}

} // namespace glm::rt::jinja
