//===- jinja_value.cpp - Python-like values for the Jinja subset ----------===//
//
// Values print the way Python prints them, because chat templates render
// str(list), repr(str) and json.dumps(...) straight into prompts: float repr
// is the shortest round-trip form, JSON uses ", " and ": " separators.
//
//===----------------------------------------------------------------------===//
#include "runtime/serve/jinja.h"

#include "runtime/base/error.h"
#include "runtime/base/recursion_guard.h"
#include "runtime/serve/jinja_builtins.h"
#include "runtime/serve/unicode.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace glm::rt::jinja {

const Value *Value::DictData::find(const std::string &k) const {
  auto it = index.find(k);
  return it == index.end() ? nullptr : &items[it->second].second;
}

void Value::DictData::set(const std::string &k, Value v) {
  auto it = index.find(k);
  if (it != index.end()) {
    items[it->second].second = std::move(v);
    return;
  }
  index[k] = items.size();
  items.emplace_back(k, std::move(v));
}

Value Value::none() {
  Value v;
  v.kind_ = None;
  return v;
}
Value::Value(bool v) : kind_(Bool), b_(v) {}
Value::Value(int64_t v) : kind_(Int), i_(v) {}
Value::Value(double v) : kind_(Float), f_(v) {}
Value::Value(std::string v) : kind_(String), s_(std::move(v)) {}
Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = List;
  v.l_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}
Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::dict() {
  Value v;
  v.kind_ = Dict;
  v.d_ = std::make_shared<DictData>();
  return v;
}
Value Value::function(Fn fn) {
  Value v;
  v.kind_ = Func;
  v.fn_ = std::make_shared<Fn>(std::move(fn));
  return v;
}
Value Value::undefined(std::string name) {
  Value v;
  v.s_ = std::move(name);
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
  case Undefined:
  case None:
    return false;
  case Bool:
    return b_;
  case Int:
    return i_ != 0;
  case Float:
    return f_ != 0;
  case String:
    return !s_.empty();
  case List:
    return !l_->empty();
  case Dict:
    return !d_->items.empty();
  case Func:
    return true;
  }
  return false;
}

Value fromJson(const nlohmann::ordered_json &j) {
  switch (j.type()) {
  case nlohmann::ordered_json::value_t::null:
    return Value::none();
  case nlohmann::ordered_json::value_t::boolean:
    return Value(j.get<bool>());
  case nlohmann::ordered_json::value_t::number_integer:
    return Value(j.get<int64_t>());
  case nlohmann::ordered_json::value_t::number_unsigned: {
    uint64_t u = j.get<uint64_t>();
    return u > uint64_t(INT64_MAX) ? Value(double(u)) : Value(int64_t(u));
  }
  case nlohmann::ordered_json::value_t::number_float:
    return Value(j.get<double>());
  case nlohmann::ordered_json::value_t::string:
    return Value(j.get<std::string>());
  case nlohmann::ordered_json::value_t::array: {
    std::vector<Value> items;
    for (const auto &e : j)
      items.push_back(fromJson(e));
    return Value::list(std::move(items));
  }
  case nlohmann::ordered_json::value_t::object: {
    Value d = Value::dict();
    for (auto it = j.begin(); it != j.end(); ++it)
      d.set(it.key(), fromJson(it.value()));
    return d;
  }
  default:
    return Value::none();
  }
}

namespace {
/// Values a template builds at run time can nest arbitrarily deep (a loop
/// that wraps a list in a list); the printers below recurse once per level,
/// so they refuse past kMaxValueDepth instead of overflowing the stack.
constexpr int kMaxValueDepth = 512;
thread_local int valueDepth = 0;
RecursionGuard valueNest(const char *what) {
  return RecursionGuard(valueDepth, kMaxValueDepth, [&] {
    fail(what, ": value nests deeper than ", kMaxValueDepth, " levels");
  });
}
} // namespace

//===----------------------------------------------------------------------===//
// The render budget
//===----------------------------------------------------------------------===//
// One per thread: a render runs on its request's thread from start to end.
static thread_local RenderBudget *currentBudget = nullptr;

RenderBudget::RenderBudget(const std::string &name, const Limits &limits)
    : name_(name), limits_(limits), outer_(currentBudget) {
  auto span = std::chrono::duration<double>(limits.maxSeconds);
  deadline_ =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(span);
  currentBudget = this;
}

RenderBudget::~RenderBudget() { currentBudget = outer_; }

RenderBudget *RenderBudget::current() { return currentBudget; }

void RenderBudget::refuse(int line, const std::string &why) const {
  line = line > 0 ? line : line_;
  std::string where = line > 0 ? ":" + std::to_string(line) : "";
  fail(name_, where, ": rendering refused: ", why,
       "; a chat template that needs this is hostile or broken (use the "
       "model's original template), or the request is too large");
}

void RenderBudget::step(int line) {
  if (line > 0) // text between tags has no line of its own
    line_ = line;
  if (++steps_ > limits_.maxSteps)
    refuse(line, "more than " + std::to_string(limits_.maxSteps) +
                     " evaluation steps");
  // The clock catches steps that are each slow (copies of large strings);
  // reading it every step would cost more than most steps.
  if ((steps_ & 4095) == 0 && std::chrono::steady_clock::now() > deadline_) {
    std::ostringstream os;
    os << "took longer than " << limits_.maxSeconds << " s";
    refuse(line, os.str());
  }
}

void RenderBudget::bytes(size_t n, int line, const char *what) {
  if (n > limits_.maxBytes)
    refuse(line, std::string(what) + " would exceed " +
                     std::to_string(limits_.maxBytes) + " bytes");
}

void RenderBudget::items(size_t n, int line, const char *what) {
  if (n > limits_.maxItems)
    refuse(line, std::string(what) + " would exceed " +
                     std::to_string(limits_.maxItems) + " items");
}

void chargeBytes(size_t n, const char *what) {
  if (currentBudget)
    currentBudget->bytes(n, 0, what);
}

void chargeItems(size_t n, const char *what) {
  if (currentBudget)
    currentBudget->items(n, 0, what);
}

nlohmann::ordered_json toJsonValue(const Value &v) {
  RecursionGuard nest = valueNest("tojson");
  switch (v.kind()) {
  case Value::Undefined:
  case Value::None:
  case Value::Func:
    return nullptr;
  case Value::Bool:
    return v.asBool();
  case Value::Int:
    return v.asInt();
  case Value::Float:
    return v.asFloat();
  case Value::String:
    return v.str();
  case Value::List: {
    auto a = nlohmann::ordered_json::array();
    for (const Value &e : v.items())
      a.push_back(toJsonValue(e));
    return a;
  }
  case Value::Dict: {
    auto o = nlohmann::ordered_json::object();
    for (const auto &[k, e] : v.dictData().items)
      o[k] = toJsonValue(e);
    return o;
  }
  }
  return nullptr;
}

// Python's float repr: shortest digits that round-trip, scientific notation
// when the exponent is < -4 or >= 16.
static std::string floatRepr(double d) {
  if (std::isnan(d))
    return "nan";
  if (std::isinf(d))
    return d < 0 ? "-inf" : "inf";
  if (d == 0)
    return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
    if (strtod(buf, nullptr) == d)
      break;
  }
  // buf = [-]D.DDDDe[+-]XX
  std::string s(buf);
  bool neg = s[0] == '-';
  if (neg)
    s.erase(0, 1);
  size_t e = s.find('e');
  int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (s[i] != '.')
      digits += s[i];
  while (digits.size() > 1 && digits.back() == '0')
    digits.pop_back();
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1)
      out += "." + digits.substr(1);
    char eb[16];
    snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(size_t(-exp - 1), '0') + digits;
  } else {
    size_t intLen = size_t(exp) + 1;
    if (digits.size() <= intLen)
      out = digits + std::string(intLen - digits.size(), '0') + ".0";
    else
      out = digits.substr(0, intLen) + "." + digits.substr(intLen);
  }
  return neg ? "-" + out : out;
}

static void jsonString(std::string &out, const std::string &s,
                       bool ensureAscii) {
  out += '"';
  for (char32_t c : decodeUtf8(s)) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default: {
      char buf[16];
      if (c < 0x20 || (ensureAscii && c > 0x7E && c != 0x7F)) {
        if (c >= 0x10000) {
          char32_t v = c - 0x10000;
          snprintf(buf, sizeof buf, "\\u%04x\\u%04x",
                   unsigned(0xD800 + (v >> 10)),
                   unsigned(0xDC00 + (v & 0x3FF)));
        } else {
          snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
        }
        out += buf;
      } else {
        appendUtf8(out, c);
      }
    }
    }
  }
  out += '"';
}

static void dumpTo(std::string &out, const Value &v, int indent, int depth,
                   bool ensureAscii, bool sortKeys) {
  RecursionGuard nest = valueNest("tojson");
  auto newline = [&](int d) {
    // indent comes from the template: size the padding before making it.
    size_t pad = size_t(indent) * size_t(d);
    chargeBytes(out.size() + 1 + pad, "tojson output");
    out += '\n';
    out.append(pad, ' ');
  };
  switch (v.kind()) {
  case Value::Undefined:
    fail("tojson: cannot serialise an undefined value ('", v.undefinedName(),
         "')");
  case Value::Func:
    fail("tojson: cannot serialise a function");
  case Value::None:
    out += "null";
    return;
  case Value::Bool:
    out += v.asBool() ? "true" : "false";
    return;
  case Value::Int:
    out += std::to_string(v.asInt());
    return;
  case Value::Float: {
    double d = v.asFloat();
    out += std::isnan(d)   ? "NaN"
           : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity")
                           : floatRepr(d);
    return;
  }
  case Value::String:
    jsonString(out, v.str(), ensureAscii);
    return;
  case Value::List: {
    const auto &items = v.items();
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i)
        out += indent >= 0 ? "," : ", ";
      if (indent >= 0)
        newline(depth + 1);
      dumpTo(out, items[i], indent, depth + 1, ensureAscii, sortKeys);
      chargeBytes(out.size(), "tojson output");
    }
    if (indent >= 0)
      newline(depth);
    out += ']';
    return;
  }
  case Value::Dict: {
    auto items = v.dictData().items;
    if (items.empty()) {
      out += "{}";
      return;
    }
    if (sortKeys)
      std::stable_sort(
          items.begin(), items.end(),
          [](const auto &a, const auto &b) { return a.first < b.first; });
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i)
        out += indent >= 0 ? "," : ", ";
      if (indent >= 0)
        newline(depth + 1);
      jsonString(out, items[i].first, ensureAscii);
      out += ": ";
      dumpTo(out, items[i].second, indent, depth + 1, ensureAscii, sortKeys);
      chargeBytes(out.size(), "tojson output");
    }
    if (indent >= 0)
      newline(depth);
    out += '}';
    return;
  }
  }
}

std::string dumpJson(const Value &v, int indent, bool ensureAscii,
                     bool sortKeys) {
  std::string out;
  dumpTo(out, v, indent, 0, ensureAscii, sortKeys);
  return out;
}

static bool pyPrintable(char32_t c) {
  if (c >= ' ' && c < 0x7F)
    return true; // printable ASCII: the common case, without a table lookup
  int cat = unicodeCategory(c);
  if (cat < 0)
    return false;
  const char *n = unicodeCategoryName(cat);
  // Python: not printable = categories C* and Z* (except the ASCII space).
  return n[0] != 'C' && n[0] != 'Z';
}

static std::string strRepr(const std::string &s) {
  std::u32string cps = decodeUtf8(s);
  bool hasSingle = cps.find(U'\'') != std::u32string::npos;
  bool hasDouble = cps.find(U'"') != std::u32string::npos;
  char q = hasSingle && !hasDouble ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : cps) {
    if (c == char32_t(q) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!pyPrintable(c)) {
      char buf[16];
      if (c < 0x100)
        snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      else if (c < 0x10000)
        snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      else
        snprintf(buf, sizeof buf, "\\U%08x", unsigned(c));
      out += buf;
    } else {
      appendUtf8(out, c);
    }
  }
  out += q;
  return out;
}

std::string toPyRepr(const Value &v) {
  RecursionGuard nest = valueNest("string conversion");
  switch (v.kind()) {
  case Value::String:
    return strRepr(v.str());
  case Value::List: {
    std::string out = v.isTuple() ? "(" : "[";
    bool first = true;
    for (const Value &e : v.items()) {
      if (!first)
        out += ", ";
      first = false;
      out += toPyRepr(e);
      // Lists may hold one list many times: printing multiplies sizes.
      chargeBytes(out.size(), "a printed list");
    }
    if (v.isTuple())
      return out + (v.items().size() == 1 ? ",)" : ")");
    return out + "]";
  }
  case Value::Dict: {
    if (v.dictData().isNamespace)
      return "<Namespace>";
    std::string out = "{";
    bool first = true;
    for (const auto &[k, e] : v.dictData().items) {
      if (!first)
        out += ", ";
      first = false;
      out += strRepr(k) + ": " + toPyRepr(e);
      chargeBytes(out.size(), "a printed dict");
    }
    return out + "}";
  }
  default:
    return toPyStr(v);
  }
}

std::string toPyStr(const Value &v) {
  switch (v.kind()) {
  case Value::Undefined:
    return "";
  case Value::None:
    return "None";
  case Value::Bool:
    return v.asBool() ? "True" : "False";
  case Value::Int:
    return std::to_string(v.asInt());
  case Value::Float:
    return floatRepr(v.asFloat());
  case Value::String:
    return v.str();
  case Value::Func:
    return "<function>";
  default:
    return toPyRepr(v);
  }
}

} // namespace glm::rt::jinja
