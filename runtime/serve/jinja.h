//===- jinja.h - a Jinja2 subset for chat templates -----------------------===//
//
// Chat templates (chat_template.jinja) are Jinja2 programs that Hugging Face
// renders with trim_blocks, lstrip_blocks and loop controls. This engine
// renders the subset chat templates use with Python/Jinja2 semantics so the
// prompt is byte-identical to transformers' apply_chat_template: {{ }}, {% if
// / elif / else %}, {% for %} (loop.*, else, filters), {% set %} (also block
// and namespace attributes), {% macro %}, {% break/continue %}, {% raw %},
// {% generation %}, whitespace control, Python-like values (str() and repr of
// lists and dicts, float repr), filters, tests and string/dict methods.
// Unsupported syntax is refused with the template name and line. A Template is
// immutable after parsing and may render from several threads at once.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace glm::rt::jinja {

class Value;
using Kwargs = std::vector<std::pair<std::string, Value>>;

/// A Python-like value: undefined, none, bool, int, float, str, list, dict
/// (insertion-ordered, string keys), or a callable (macros, methods).
class Value {
public:
  enum Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Func };
  struct DictData {
    std::vector<std::pair<std::string, Value>> items;
    std::unordered_map<std::string, size_t> index;
    bool isNamespace = false; // namespace(): attributes may be assigned
    const Value *find(const std::string &k) const;
    void set(const std::string &k, Value v);
  };
  using Fn = std::function<Value(std::vector<Value> &, Kwargs &)>;

  Value() = default;
  static Value none();
  Value(bool v);
  Value(int v) : Value(int64_t(v)) {}
  Value(int64_t v);
  Value(double v);
  Value(std::string v);
  Value(const char *v) : Value(std::string(v)) {}
  static Value list(std::vector<Value> items = {});
  /// A list that prints as a Python tuple: (a, b).
  static Value tuple(std::vector<Value> items);
  bool isTuple() const { return tuple_; }
  static Value dict();
  static Value function(Fn fn);
  static Value undefined(std::string name);

  Kind kind() const { return kind_; }
  bool isUndefined() const { return kind_ == Undefined; }
  bool isNone() const { return kind_ == None; }
  bool isString() const { return kind_ == String; }
  bool isNumber() const { return kind_ == Int || kind_ == Float; }
  bool truthy() const;

  bool asBool() const { return b_; }
  int64_t asInt() const { return i_; }
  double asFloat() const { return kind_ == Int ? double(i_) : f_; }
  const std::string &str() const { return s_; }
  std::vector<Value> &items() const { return *l_; }
  DictData &dictData() const { return *d_; }
  const Fn &fn() const { return *fn_; }
  const std::string &undefinedName() const { return s_; }

  /// Dict helpers (this must be a dict).
  void set(const std::string &k, Value v) { d_->set(k, std::move(v)); }
  const Value *get(const std::string &k) const { return d_->find(k); }

private:
  Kind kind_ = Undefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<std::vector<Value>> l_;
  std::shared_ptr<DictData> d_;
  std::shared_ptr<Fn> fn_;
};

/// JSON -> Value (object key order kept) and back.
Value fromJson(const nlohmann::ordered_json &j);
nlohmann::ordered_json toJsonValue(const Value &v);
/// Python json.dumps(v, ensure_ascii, indent, sort_keys) text (the `tojson`
/// filter as transformers defines it). indent < 0: single line.
std::string dumpJson(const Value &v, int indent = -1, bool ensureAscii = false,
                     bool sortKeys = false);
/// Python str(v) (floats as repr, lists/dicts as repr, None, True/False).
std::string toPyStr(const Value &v);
/// Python repr(v).
std::string toPyRepr(const Value &v);

/// Chat templates are code from the pack, run on every request: a render
/// that would exceed one of these limits is refused with Error naming the
/// template (`{{ "x" * 1000000000 }}` must not take 3 GB and a minute).
struct Limits {
  size_t maxBytes = 32 << 20;   // the output, and any one string built
  size_t maxItems = 1000000;    // any one list built (range(), `*`)
  uint64_t maxSteps = 10000000; // expressions and statements evaluated
  double maxSeconds = 10;       // wall clock of one render
};

struct Options {
  bool trimBlocks = true; // transformers renders chat templates with both
  bool lstripBlocks = true;
  Limits limits;
};

class Template {
public:
  /// Parses source; throws glm::rt::Error naming `name` and the line.
  Template(const std::string &source, const std::string &name,
           Options opt = {});
  ~Template();
  /// Renders with the variables of `context` (a dict); throws glm::rt::Error
  /// on runtime errors, on raise_exception() from the template and past the
  /// Options' limits.
  std::string render(const Value &context) const;

  struct Impl;

private:
  std::shared_ptr<Impl> impl_;
};

} // namespace glm::rt::jinja
