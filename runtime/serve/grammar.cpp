//===- grammar.cpp - grammar-constrained decoding: JSON and GLM tool calls ===//
//
// Three parts: the schema/tool compiler (spec -> nodes and literal sets),
// the recognizer (step: one byte; rest: the distance a frame adds), and the
// token mask (all vocabulary tokens tested against the state, sharing the
// steps of common prefixes, cached by state).
//
//===----------------------------------------------------------------------===//
#include "runtime/serve/grammar.h"

#include "runtime/serve/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>

namespace glm::rt::grammar {

//===----------------------------------------------------------------------===//
// Compiled form
//===----------------------------------------------------------------------===//
struct Node {
  enum Kind : uint8_t {
    Any,
    Object,
    Array,
    String,
    Number,
    Integer,
    Enum,
    AnyOf
  };
  Kind kind = Any;
  // Object: keys as JSON text ("\"name\""), one property node each.
  int keys = -1;
  std::vector<int> props;
  uint64_t required = 0;
  bool freeKeys = false; // no properties declared: any key, any value
  // Array
  int items = 0, minItems = 0, maxItems = 0xFFFF; // 0xFFFF: unbounded
  // Enum: a literal set (JSON texts)
  int group = -1;
  // AnyOf
  std::vector<int> alts;
  int64_t minLen = 1; // bytes of the shortest value
};

/// A function a forced tool call may name.
struct Tool {
  std::string name;
  int keys = -1;           // raw argument names
  std::vector<int> values; // JSON node, kRawText, or kRawEnum - group
  std::vector<int64_t> valueMin;
  uint64_t required = 0;
};

namespace {

constexpr int kRawText = -1; // a string parameter: raw text up to '<'
constexpr int kRawEnum = -2; // kRawEnum - g: one of literal set g
constexpr int kMaxLiteral = 4096;
constexpr int kMaxMinItems = 4096;
constexpr int kMaxCalls = 16;
constexpr int64_t kFar = int64_t(1) << 40; // saturation of distances
constexpr uint16_t kUnbounded = 0xFFFF;

// Fixed nodes and literal sets every grammar has.
enum : int {
  kAny,
  kAnyObject,
  kAnyArray,
  kString,
  kNumber,
  kInteger,
  kBool,
  kNull,
  kTrueFalseNull
};
enum : int {
  gTrueFalseNull,
  gBool,
  gNull,
  gOpen,
  gSep,
  gKeyClose,
  gValOpen,
  gValClose
};
const char *const kOpen = "<tool_call>", *const kClose = "</tool_call>",
                  *const kKeyOpen = "<arg_key>",
                  *const kKeyClose = "</arg_key>",
                  *const kValOpen = "<arg_value>",
                  *const kValClose = "</arg_value>";

int64_t len(const char *s) {
  return int64_t(std::char_traits<char>::length(s));
}
int64_t sat(int64_t x) { return std::min(x, kFar); }
int popcount(uint64_t m) { return __builtin_popcountll(m); }

const std::set<std::string> &supportedKeywords() {
  static const std::set<std::string> k = {
      "type",     "properties", "required", "additionalProperties",
      "enum",     "const",      "items",    "minItems",
      "maxItems", "anyOf",      "title",    "description",
      "default",  "examples",   "$schema",  "$id",
      "$comment"};
  return k;
}

std::string supportedList() {
  return "type, properties, required, additionalProperties (true/false), "
         "enum, const, items, minItems, maxItems, anyOf; annotations title, "
         "description, default, examples, $schema, $id, $comment";
}

bool typeMatches(const ojson &v, const std::string &t) {
  if (t == "object")
    return v.is_object();
  if (t == "array")
    return v.is_array();
  if (t == "string")
    return v.is_string();
  if (t == "number")
    return v.is_number();
  if (t == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() &&
            std::floor(v.get<double>()) == v.get<double>());
  if (t == "boolean")
    return v.is_boolean();
  if (t == "null")
    return v.is_null();
  return false;
}

/// Compiles JSON schemas into a grammar's nodes. strict: a keyword outside
/// the subset is refused (response_format); lenient: ignored (tool
/// parameters, whose other keywords only describe).
class Compiler {
public:
  Compiler(Grammar &g, bool strict) : g_(g), strict_(strict) {}

  int group(std::vector<std::string> lits, const std::string &path,
            const char *keyword) {
    std::vector<std::string> uniq;
    for (auto &l : lits) {
      if (g_.noLt && l.find('<') != std::string::npos)
        continue; // would end a tool-call argument early
      if (std::find(uniq.begin(), uniq.end(), l) == uniq.end())
        uniq.push_back(std::move(l));
    }
    if (uniq.empty())
      throw Unsupported(path, keyword, "leaves no value to generate");
    if (uniq.size() > size_t(kMaxEnum))
      throw Unsupported(path, keyword,
                        "has more than " + std::to_string(kMaxEnum) +
                            " values (the most grammar-constrained decoding "
                            "takes)");
    for (const auto &l : uniq)
      if (l.size() > size_t(kMaxLiteral))
        throw Unsupported(path, keyword,
                          "has a value longer than " +
                              std::to_string(kMaxLiteral) + " bytes");
    g_.groups.push_back(std::move(uniq));
    return int(g_.groups.size()) - 1;
  }

  int add(Node n) {
    g_.nodes.push_back(std::move(n));
    return int(g_.nodes.size()) - 1;
  }

  int schema(const ojson &s, const std::string &path, int depth) {
    if (s.is_boolean()) {
      if (s.get<bool>())
        return kAny;
      throw Unsupported(path, "false", "allows no value");
    }
    if (!s.is_object())
      throw Unsupported(path, "schema", "must be an object or a boolean");
    if (depth > kMaxNesting - 4)
      throw Unsupported(path, "nesting",
                        "is deeper than grammar-constrained decoding goes (" +
                            std::to_string(kMaxNesting - 4) + " levels)");
    if (strict_)
      for (const auto &[k, v] : s.items())
        if (!supportedKeywords().count(k))
          throw Unsupported(path, k,
                            "is not supported by grammar-constrained "
                            "decoding (supported: " +
                                supportedList() + ")");
    if (s.contains("anyOf")) {
      for (const auto &[k, v] : s.items())
        if (strict_ && k != "anyOf" && k != "title" && k != "description" &&
            k != "default" && k != "examples" && k != "$schema" && k != "$id" &&
            k != "$comment")
          throw Unsupported(path, k,
                            "next to anyOf is not supported (put it into "
                            "each alternative)");
      const ojson &alts = s["anyOf"];
      if (!alts.is_array() || alts.empty())
        throw Unsupported(path, "anyOf", "must be a non-empty array");
      Node n;
      n.kind = Node::AnyOf;
      n.minLen = kFar;
      for (size_t i = 0; i < alts.size(); ++i) {
        int a = schema(alts[i], path + ".anyOf[" + std::to_string(i) + "]",
                       depth + 1);
        n.alts.push_back(a);
        n.minLen = std::min(n.minLen, g_.nodes[size_t(a)].minLen);
      }
      return add(std::move(n));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const ojson &t = s["type"];
      if (t.is_string())
        types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty()) {
        for (const auto &x : t) {
          if (!x.is_string())
            throw Unsupported(path, "type", "must be a string or strings");
          types.push_back(x.get<std::string>());
        }
      } else
        throw Unsupported(path, "type", "must be a string or strings");
      for (const auto &t : types)
        if (t != "object" && t != "array" && t != "string" && t != "number" &&
            t != "integer" && t != "boolean" && t != "null")
          throw Unsupported(path, "type",
                            "'" + t + "' is not a JSON schema type");
    }
    if (s.contains("enum") || s.contains("const")) {
      ojson values = ojson::array();
      if (s.contains("const"))
        values.push_back(s["const"]);
      if (s.contains("enum")) {
        if (!s["enum"].is_array())
          throw Unsupported(path, "enum", "must be an array");
        for (const auto &v : s["enum"])
          if (!s.contains("const") || v == s["const"])
            values.push_back(v);
      }
      std::vector<std::string> lits;
      for (const auto &v : values) {
        bool ok = types.empty();
        for (const auto &t : types)
          ok |= typeMatches(v, t);
        if (ok)
          lits.push_back(v.dump());
      }
      Node n;
      n.kind = Node::Enum;
      n.group =
          group(std::move(lits), path, s.contains("enum") ? "enum" : "const");
      n.minLen = kFar;
      for (const auto &l : g_.groups[size_t(n.group)])
        n.minLen = std::min(n.minLen, int64_t(l.size()));
      return add(std::move(n));
    }
    if (types.empty()) {
      // No type: the keywords say which kind the value must be to be
      // constrained by them; without any, anything goes.
      if (s.contains("properties") || s.contains("required") ||
          s.contains("additionalProperties"))
        types.push_back("object");
      else if (s.contains("items") || s.contains("minItems") ||
               s.contains("maxItems"))
        types.push_back("array");
      else
        return kAny;
    }
    if (types.size() == 1)
      return typed(s, types[0], path, depth);
    Node n;
    n.kind = Node::AnyOf;
    n.minLen = kFar;
    for (const auto &t : types) {
      int a = typed(s, t, path, depth);
      n.alts.push_back(a);
      n.minLen = std::min(n.minLen, g_.nodes[size_t(a)].minLen);
    }
    return add(std::move(n));
  }

private:
  int typed(const ojson &s, const std::string &t, const std::string &path,
            int depth) {
    if (t == "string")
      return kString;
    if (t == "number")
      return kNumber;
    if (t == "integer")
      return kInteger;
    if (t == "boolean")
      return kBool;
    if (t == "null")
      return kNull;
    if (t == "array")
      return array(s, path, depth);
    return object(s, path, depth);
  }

  int array(const ojson &s, const std::string &path, int depth) {
    Node n;
    n.kind = Node::Array;
    n.items = kAny;
    if (s.contains("items")) {
      if (s["items"].is_array())
        throw Unsupported(path, "items",
                          "as an array (tuple validation) is not supported");
      n.items = schema(s["items"], path + ".items", depth + 1);
    }
    auto count = [&](const char *k, int64_t dflt) -> int64_t {
      if (!s.contains(k))
        return dflt;
      const ojson &v = s[k];
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        throw Unsupported(path, k, "must be an integer >= 0");
      return v.get<int64_t>();
    };
    int64_t lo = count("minItems", 0), hi = count("maxItems", kUnbounded);
    if (lo > kMaxMinItems)
      throw Unsupported(path, "minItems",
                        "above " + std::to_string(kMaxMinItems) +
                            " is not supported");
    if (lo > hi)
      throw Unsupported(path, "minItems", "is larger than maxItems");
    n.minItems = int(lo);
    n.maxItems = int(std::min<int64_t>(hi, kUnbounded));
    const int64_t item = g_.nodes[size_t(n.items)].minLen;
    n.minLen = sat(2 + lo * item + std::max<int64_t>(0, lo - 1));
    return add(std::move(n));
  }

  int object(const ojson &s, const std::string &path, int depth) {
    Node n;
    n.kind = Node::Object;
    bool additional = true;
    if (s.contains("additionalProperties")) {
      const ojson &a = s["additionalProperties"];
      if (a.is_boolean())
        additional = a.get<bool>();
      else if (strict_)
        throw Unsupported(path, "additionalProperties",
                          "as a schema is not supported (only true or false)");
    }
    std::vector<std::string> names;
    if (s.contains("properties")) {
      const ojson &p = s["properties"];
      if (!p.is_object())
        throw Unsupported(path, "properties", "must be an object");
      for (const auto &[k, v] : p.items()) {
        names.push_back(k);
        n.props.push_back(schema(v, path + ".properties." + k, depth + 1));
      }
    }
    if (s.contains("required")) {
      const ojson &r = s["required"];
      if (!r.is_array())
        throw Unsupported(path, "required", "must be an array of names");
      for (const auto &x : r) {
        if (!x.is_string())
          throw Unsupported(path, "required", "must be an array of names");
        std::string k = x.get<std::string>();
        auto it = std::find(names.begin(), names.end(), k);
        if (it == names.end()) {
          if (!additional)
            throw Unsupported(path, "required",
                              "names '" + k +
                                  "', which additionalProperties: false "
                                  "forbids");
          names.push_back(k);
          n.props.push_back(kAny);
          it = names.end() - 1;
        }
        n.required |= uint64_t(1) << (it - names.begin());
      }
    }
    if (names.size() > size_t(kMaxEnum))
      throw Unsupported(path, "properties",
                        "has more than " + std::to_string(kMaxEnum) +
                            " names (the most grammar-constrained decoding "
                            "takes)");
    // Declared properties: only they are written (a subset of what the
    // schema allows when additionalProperties is not false).
    n.freeKeys = names.empty() && additional;
    std::vector<std::string> keys;
    for (const auto &k : names)
      keys.push_back(ojson(k).dump());
    if (!keys.empty())
      n.keys = group(keys, path, "properties");
    int64_t m = 2, req = 0;
    for (size_t i = 0; i < names.size(); ++i)
      if (n.required >> i & 1) {
        m += int64_t(keys[i].size()) + 1 + g_.nodes[size_t(n.props[i])].minLen;
        ++req;
      }
    n.minLen = sat(m + std::max<int64_t>(0, req - 1));
    return add(std::move(n));
  }

  Grammar &g_;
  bool strict_;
};

bool isWs(uint8_t b) { return b == ' ' || b == '\n' || b == '\r' || b == '\t'; }

std::string pathKey(const std::string &base, const std::string &k) {
  return base + "." + k;
}

} // namespace

Unsupported::Unsupported(const std::string &p, const std::string &k,
                         const std::string &why)
    : Error(p + ": '" + k + "' " + why), path(p), keyword(k) {}

//===----------------------------------------------------------------------===//
// Specs
//===----------------------------------------------------------------------===//
std::string Grammar::jsonObjectSpec() {
  return ojson{{"json", "object"}}.dump();
}

std::string Grammar::jsonSchemaSpec(const ojson &schema,
                                    const std::string &path) {
  std::string spec =
      ojson{{"json", "schema"}, {"schema", schema}, {"path", path}}.dump();
  Grammar check(spec); // refuses what it cannot express, naming it
  return spec;
}

std::string Grammar::toolCallSpec(const ojson &functions, bool parallel) {
  std::string spec = ojson{{"tools", functions}, {"parallel", parallel}}.dump();
  Grammar check(spec);
  return spec;
}

Grammar::~Grammar() = default;

Grammar::Grammar(const std::string &spec) : spec_(spec) {
  ojson s = ojson::parse(spec);
  auto node = [&](Node::Kind k, int64_t minLen, int group = -1) {
    Node n;
    n.kind = k;
    n.minLen = minLen;
    n.group = group;
    nodes.push_back(n);
  };
  groups = {
      {"true", "false", "null"}, {"true", "false"}, {"null"},   {kOpen},
      {kKeyOpen, kClose},        {kKeyClose},       {kValOpen}, {kValClose}};
  node(Node::Any, 1);
  node(Node::Object, 2);
  nodes.back().freeKeys = true;
  node(Node::Array, 2);
  node(Node::String, 2);
  node(Node::Number, 1);
  node(Node::Integer, 1);
  node(Node::Enum, 4, gBool);
  node(Node::Enum, 4, gNull);
  node(Node::Enum, 4, gTrueFalseNull);
  if (s.contains("json")) {
    if (s["json"] == "object") {
      root = kAnyObject;
      return;
    }
    Compiler c(*this, true);
    root = c.schema(s["schema"], s.value("path", std::string("schema")), 0);
    return;
  }
  noLt = true;
  maxCalls = s.value("parallel", false) ? kMaxCalls : 1;
  Compiler c(*this, false);
  std::vector<std::string> names;
  const ojson &fns = s["tools"];
  for (size_t i = 0; i < fns.size(); ++i) {
    const ojson &f = fns[i];
    std::string path = "tools[" + std::to_string(i) + "].function";
    Tool t;
    t.name = f.value("name", std::string());
    if (t.name.empty() ||
        t.name.find_first_of("<> \t\r\n") != std::string::npos)
      throw Unsupported(path, "name",
                        "'" + t.name +
                            "' cannot be called by a forced tool call (a "
                            "name without '<', '>' or white space)");
    names.push_back(t.name);
    const ojson params = f.contains("parameters") && f["parameters"].is_object()
                             ? f["parameters"]
                             : ojson::object();
    std::vector<std::string> keys;
    if (params.contains("properties") && params["properties"].is_object()) {
      for (const auto &[k, v] : params["properties"].items()) {
        if (k.empty() || k.find_first_of("<> \t\r\n") != std::string::npos)
          throw Unsupported(pathKey(path + ".parameters.properties", k), "name",
                            "cannot be written as a GLM tool-call argument "
                            "(a name without '<', '>' or white space)");
        keys.push_back(k);
        // As OutputParser::parseCall reads values: a property schema that
        // is an object of type "string" (or ["string"]), or no schema
        // object at all, is raw text; any other is JSON.
        bool raw = !v.is_object();
        if (v.is_object() && v.contains("type")) {
          const ojson &ty = v["type"];
          raw = ty == "string" ||
                (ty.is_array() && ty.size() == 1 && ty[0] == "string");
        }
        std::string vpath = pathKey(path + ".parameters.properties", k);
        if (raw && v.is_object() && v.contains("enum") &&
            v["enum"].is_array()) {
          std::vector<std::string> lits;
          for (const auto &e : v["enum"])
            if (e.is_string())
              lits.push_back(e.get<std::string>());
          int gi = c.group(lits, vpath, "enum");
          t.values.push_back(kRawEnum - gi);
          int64_t m = kFar;
          for (const auto &l : groups[size_t(gi)])
            m = std::min(m, int64_t(l.size()));
          t.valueMin.push_back(m);
        } else if (raw) {
          t.values.push_back(kRawText);
          t.valueMin.push_back(0);
        } else {
          int n = c.schema(v, vpath, 1);
          t.values.push_back(n);
          t.valueMin.push_back(nodes[size_t(n)].minLen);
        }
      }
    }
    if (keys.size() > size_t(kMaxEnum))
      throw Unsupported(path + ".parameters", "properties",
                        "has more than " + std::to_string(kMaxEnum) + " names");
    if (params.contains("required") && params["required"].is_array())
      for (const auto &r : params["required"]) {
        auto it = std::find(keys.begin(), keys.end(),
                            r.is_string() ? r.get<std::string>() : "");
        if (it != keys.end())
          t.required |= uint64_t(1) << (it - keys.begin());
      }
    if (!keys.empty()) {
      groups.push_back(keys);
      t.keys = int(groups.size()) - 1;
    }
    tools.push_back(std::move(t));
  }
  if (tools.empty())
    throw Unsupported("tools", "tools", "has no function to call");
  if (tools.size() > size_t(kMaxEnum))
    throw Unsupported("tools", "tools",
                      "has more than " + std::to_string(kMaxEnum) +
                          " functions to force a call of");
  groups.push_back(names);
  namesGroup = int(groups.size()) - 1;
  if (groups[size_t(namesGroup)].size() != names.size())
    throw Unsupported("tools", "name", "names a function twice");
  int64_t best = kFar;
  for (const auto &t : tools) {
    int64_t tail = len(kClose);
    for (size_t k = 0; k < t.values.size(); ++k)
      if (t.required >> k & 1)
        tail += len(kKeyOpen) + int64_t(groups[size_t(t.keys)][k].size()) +
                len(kKeyClose) + len(kValOpen) + t.valueMin[k] + len(kValClose);
    best = std::min(best, int64_t(t.name.size()) + tail);
  }
  minCallLen = sat(len(kOpen) + best);
}

//===----------------------------------------------------------------------===//
// The recognizer
//===----------------------------------------------------------------------===//
namespace {

enum Kind : uint8_t { VALUE, OBJ, ARR, STR, NUM, LIT, RAW, TOOLS, CALL };
enum : uint8_t { V_INNER, V_ROOT };
enum : uint8_t { O_OPEN, O_COMMA, O_KEY_PENDING, O_COLON, O_AFTER_VAL };
enum : uint8_t { A_OPEN, A_AFTER_VAL };
enum : uint8_t { S_NORMAL, S_ESC, S_HEX };
enum : uint8_t {
  N_START,
  N_MINUS,
  N_ZERO,
  N_INT,
  N_DOT,
  N_FRAC,
  N_E,
  N_ESIGN,
  N_EXP
};
enum : uint8_t { T_START, T_BETWEEN };
// A *_PENDING phase has a literal set on top whose match decides the next
// phase (complete() below); the literal set counts the distance then.
enum : uint8_t {
  C_OPEN_PENDING,
  C_NAME,
  C_NAME_PENDING,
  C_SEP,
  C_SEP_PENDING,
  C_KEY,
  C_KEY_PENDING,
  C_KEYCLOSE,
  C_KEYCLOSE_PENDING,
  C_VALOPEN,
  C_VALOPEN_PENDING,
  C_VALCLOSE,
  C_VALCLOSE_PENDING
};
constexpr uint16_t kFreeKey = 0xFFFF;
constexpr int kMaxDigits = 15, kMaxExpDigits = 3;
constexpr size_t kMaxConfigs = 16;

Frame frame(uint8_t kind, uint8_t phase, uint32_t node = 0, uint64_t mask = 0,
            uint16_t aux = 0) {
  return Frame{kind, phase, aux, node, mask};
}

uint64_t all(size_t n) {
  return n >= 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1;
}

class Machine {
public:
  explicit Machine(const Grammar &g) : g_(g) {}

  // --- distance ----------------------------------------------------------
  int64_t distance(const Config &c) const {
    int64_t d = 0;
    for (size_t i = c.stack.size(); i-- > 0;)
      d += rest(c.stack[i], i ? &c.stack[i - 1] : nullptr);
    return sat(d);
  }

  // --- one byte ----------------------------------------------------------
  /// Feeds b to c; false: c is dead. Alternatives of an anyOf beyond the
  /// first go to `forks` (each already past b).
  bool step(Config &c, uint8_t b, std::vector<Config> &forks) const {
    const uint8_t prevWs = c.ws;
    c.ws = 0;
    const bool ws = isWs(b);
    auto takeWs = [&] {
      if (prevWs >= kMaxWhitespaceRun)
        return false;
      c.ws = uint8_t(prevWs + 1);
      return true;
    };
    for (;;) {
      if (c.stack.empty())
        return false; // the output is complete: nothing may follow
      Frame &f = c.stack.back();
      switch (f.kind) {
      case VALUE: {
        if (ws)
          return f.phase == V_INNER && takeWs();
        const Node &n = g_.nodes[f.node];
        if (n.kind == Node::AnyOf) {
          for (size_t i = 1; i < n.alts.size(); ++i) {
            Config k = c;
            k.stack.back().node = uint32_t(n.alts[i]);
            k.ws = prevWs;
            if (step(k, b, forks))
              forks.push_back(std::move(k));
          }
          f.node = uint32_t(n.alts[0]);
          continue;
        }
        switch (startValue(c, b)) {
        case Start::No:
          return false;
        case Start::Taken:
          return true;
        case Start::Feed:
          continue;
        }
        return false;
      }
      case OBJ: {
        const Node &n = g_.nodes[f.node];
        const uint64_t keys = n.freeKeys ? 0 : all(n.props.size());
        switch (f.phase) {
        case O_OPEN:
        case O_COMMA:
          if (ws)
            return takeWs();
          if (b == '}' && f.phase == O_OPEN) {
            if (n.required & ~f.mask)
              return false;
            complete(c, 0);
            return true;
          }
          if (b != '"')
            return false;
          if (n.freeKeys) {
            f.phase = O_COLON;
            f.aux = kFreeKey;
            c.stack.push_back(frame(STR, S_NORMAL));
            return true;
          }
          if (!(keys & ~f.mask))
            return false;
          f.phase = O_KEY_PENDING;
          c.stack.push_back(frame(LIT, 0, uint32_t(n.keys), keys & ~f.mask));
          continue;
        case O_COLON:
          if (ws)
            return takeWs();
          if (b != ':')
            return false;
          f.phase = O_AFTER_VAL;
          c.stack.push_back(
              frame(VALUE, V_INNER, f.aux == kFreeKey ? kAny : n.props[f.aux]));
          return true;
        case O_AFTER_VAL:
          if (ws)
            return takeWs();
          if (b == ',') {
            if (!n.freeKeys && !(keys & ~f.mask))
              return false;
            f.phase = O_COMMA;
            return true;
          }
          if (b == '}' && !(n.required & ~f.mask)) {
            complete(c, 0);
            return true;
          }
          return false;
        }
        return false;
      }
      case ARR: {
        const Node &n = g_.nodes[f.node];
        if (ws)
          return takeWs();
        if (f.phase == A_OPEN) {
          if (b == ']') {
            if (n.minItems > 0)
              return false;
            complete(c, 0);
            return true;
          }
          if (n.maxItems == 0)
            return false;
          f.phase = A_AFTER_VAL;
          f.aux = 1;
          c.stack.push_back(frame(VALUE, V_INNER, uint32_t(n.items)));
          continue;
        }
        if (b == ',') {
          if (n.maxItems != kUnbounded && f.aux >= n.maxItems)
            return false;
          if (f.aux < kUnbounded - 1)
            ++f.aux;
          c.stack.push_back(frame(VALUE, V_INNER, uint32_t(n.items)));
          return true;
        }
        if (b == ']' && f.aux >= n.minItems) {
          complete(c, 0);
          return true;
        }
        return false;
      }
      case STR:
        switch (f.phase) {
        case S_NORMAL:
          if (f.aux)
            return utf8Continue(f, b);
          if (b == '"') {
            complete(c, 0);
            return true;
          }
          if (b == '\\') {
            f.phase = S_ESC;
            return true;
          }
          if (b < 0x20 || (b == '<' && g_.noLt))
            return false;
          return utf8Start(f, b);
        case S_ESC:
          if (b == 'u') {
            f.phase = S_HEX;
            f.aux = 4;
            return true;
          }
          if (!std::char_traits<char>::find("\"\\/bfnrt", 8, char(b)))
            return false;
          f.phase = S_NORMAL;
          return true;
        default: // S_HEX
          if (!isxdigit(b))
            return false;
          if (--f.aux == 0)
            f.phase = S_NORMAL;
          return true;
        }
      case NUM: {
        const bool integer = f.node != 0;
        const bool digit = b >= '0' && b <= '9';
        switch (f.phase) {
        case N_START:
          if (b == '-') {
            f.phase = N_MINUS;
            return true;
          }
          [[fallthrough]];
        case N_MINUS:
          if (!digit)
            return false;
          f.phase = b == '0' ? N_ZERO : N_INT;
          f.aux = 1;
          return true;
        case N_ZERO:
        case N_INT:
          if (digit && f.phase == N_INT) {
            if (f.aux >= kMaxDigits)
              return false;
            ++f.aux;
            return true;
          }
          if (digit)
            return false; // no leading zeros
          if (!integer && b == '.') {
            f.phase = N_DOT;
            return true;
          }
          if (!integer && (b == 'e' || b == 'E')) {
            f.phase = N_E;
            return true;
          }
          break; // the number ended: the parent takes b
        case N_DOT:
        case N_FRAC:
          if (digit) {
            if (f.phase == N_FRAC && f.aux >= kMaxDigits)
              return false;
            f.aux = f.phase == N_DOT ? 1 : f.aux + 1;
            f.phase = N_FRAC;
            return true;
          }
          if (f.phase == N_DOT)
            return false;
          if (b == 'e' || b == 'E') {
            f.phase = N_E;
            return true;
          }
          break;
        case N_E:
          if (b == '+' || b == '-') {
            f.phase = N_ESIGN;
            return true;
          }
          [[fallthrough]];
        case N_ESIGN:
          if (!digit)
            return false;
          f.phase = N_EXP;
          f.aux = 1;
          return true;
        case N_EXP:
          if (digit) {
            if (f.aux >= kMaxExpDigits)
              return false;
            ++f.aux;
            return true;
          }
          break;
        }
        complete(c, 0);
        continue;
      }
      case LIT: {
        const auto &lits = g_.groups[f.node];
        uint64_t next = 0;
        int whole = -1;
        for (uint64_t m = f.mask; m; m &= m - 1) {
          int i = __builtin_ctzll(m);
          const std::string &s = lits[size_t(i)];
          if (s.size() == f.aux)
            whole = i;
          else if (uint8_t(s[f.aux]) == b)
            next |= uint64_t(1) << i;
        }
        if (next) {
          f.mask = next;
          ++f.aux;
          // Done as soon as one literal is whole and none is longer.
          int done = -1;
          bool longer = false;
          for (uint64_t m = next; m; m &= m - 1) {
            int i = __builtin_ctzll(m);
            if (lits[size_t(i)].size() == f.aux)
              done = i;
            else
              longer = true;
          }
          if (done >= 0 && !longer)
            complete(c, done);
          return true;
        }
        if (whole < 0)
          return false;
        complete(c, whole);
        continue;
      }
      case RAW:
        if (f.aux)
          return utf8Continue(f, b);
        if (b == '<') {
          complete(c, 0);
          continue;
        }
        if (b < 0x20 && !ws)
          return false;
        return utf8Start(f, b);
      case TOOLS:
        if (f.aux >= g_.maxCalls)
          return false; // trailing white space would be all that may come
        if (ws)
          return f.phase == T_BETWEEN && takeWs();
        f.phase = T_BETWEEN;
        ++f.aux;
        c.stack.push_back(frame(CALL, C_OPEN_PENDING));
        c.stack.push_back(frame(LIT, 0, gOpen, 1));
        continue;
      case CALL: {
        const Tool *t = f.phase > C_NAME_PENDING ? &g_.tools[f.node] : nullptr;
        const uint64_t keys = t ? all(t->values.size()) : 0;
        switch (f.phase) {
        case C_NAME:
          f.phase = C_NAME_PENDING;
          c.stack.push_back(
              frame(LIT, 0, uint32_t(g_.namesGroup), all(g_.tools.size())));
          continue;
        case C_SEP: {
          if (ws)
            return takeWs();
          uint64_t m = 0;
          if (keys & ~f.mask)
            m |= 1; // <arg_key>
          if (!(t->required & ~f.mask))
            m |= 2; // </tool_call>
          if (!m)
            return false;
          f.phase = C_SEP_PENDING;
          c.stack.push_back(frame(LIT, 0, gSep, m));
          continue;
        }
        case C_KEY:
          f.phase = C_KEY_PENDING;
          c.stack.push_back(frame(LIT, 0, uint32_t(t->keys), keys & ~f.mask));
          continue;
        case C_KEYCLOSE:
          f.phase = C_KEYCLOSE_PENDING;
          c.stack.push_back(frame(LIT, 0, gKeyClose, 1));
          continue;
        case C_VALOPEN:
          if (ws)
            return takeWs();
          f.phase = C_VALOPEN_PENDING;
          c.stack.push_back(frame(LIT, 0, gValOpen, 1));
          continue;
        case C_VALCLOSE:
          f.phase = C_VALCLOSE_PENDING;
          c.stack.push_back(frame(LIT, 0, gValClose, 1));
          continue;
        }
        return false;
      }
      }
      return false;
    }
  }

private:
  // Well-formed UTF-8 only (no overlong forms, surrogates or code points
  // past U+10FFFF: JSON parsers refuse them). aux: continuation bytes still
  // due (bits 0-1) and the range of the next one (bits 2-4, Unicode's
  // table 3-7: 0 = 80..BF, 1 = A0..BF, 2 = 80..9F, 3 = 90..BF, 4 = 80..8F).
  static bool utf8Start(Frame &f, uint8_t b) {
    if (b < 0x80)
      return true;
    if (b >= 0xC2 && b <= 0xDF)
      f.aux = 1;
    else if (b >= 0xE0 && b <= 0xEF)
      f.aux = 2 | (b == 0xE0 ? 1 << 2 : b == 0xED ? 2 << 2 : 0);
    else if (b >= 0xF0 && b <= 0xF4)
      f.aux = 3 | (b == 0xF0 ? 3 << 2 : b == 0xF4 ? 4 << 2 : 0);
    else
      return false;
    return true;
  }
  static bool utf8Continue(Frame &f, uint8_t b) {
    static const uint8_t lo[] = {0x80, 0xA0, 0x80, 0x90, 0x80};
    static const uint8_t hi[] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
    const int range = f.aux >> 2;
    if (b < lo[range] || b > hi[range])
      return false;
    f.aux = uint16_t((f.aux & 3) - 1);
    return true;
  }

  enum class Start { No, Taken, Feed };
  /// Replaces the VALUE frame on top by the frame of the value that b
  /// starts: Taken when b was that frame's opening byte, Feed when the new
  /// frame must take b, No when b starts no allowed value.
  Start startValue(Config &c, uint8_t b) const {
    Frame &f = c.stack.back();
    const Node &n = g_.nodes[f.node];
    const bool nest = c.stack.size() < size_t(kMaxNesting);
    auto become = [&](Frame x, Start how) {
      c.stack.back() = x;
      return how;
    };
    const bool numStart = b == '-' || (b >= '0' && b <= '9');
    switch (n.kind) {
    case Node::Any:
      if (b == '{' && nest)
        return become(frame(OBJ, O_OPEN, kAnyObject), Start::Taken);
      if (b == '[' && nest)
        return become(frame(ARR, A_OPEN, kAnyArray), Start::Taken);
      if (b == '"')
        return become(frame(STR, S_NORMAL), Start::Taken);
      if (numStart)
        return become(frame(NUM, N_START, 0), Start::Feed);
      if (b == 't' || b == 'f' || b == 'n')
        return become(frame(LIT, 0, gTrueFalseNull, 7), Start::Feed);
      return Start::No;
    case Node::Object:
      return b == '{' && nest ? become(frame(OBJ, O_OPEN, f.node), Start::Taken)
                              : Start::No;
    case Node::Array:
      return b == '[' && nest ? become(frame(ARR, A_OPEN, f.node), Start::Taken)
                              : Start::No;
    case Node::String:
      return b == '"' ? become(frame(STR, S_NORMAL), Start::Taken) : Start::No;
    case Node::Number:
    case Node::Integer:
      return numStart
                 ? become(frame(NUM, N_START, n.kind == Node::Integer ? 1 : 0),
                          Start::Feed)
                 : Start::No;
    case Node::Enum:
      return become(frame(LIT, 0, uint32_t(n.group),
                          all(g_.groups[size_t(n.group)].size())),
                    Start::Feed);
    case Node::AnyOf:
      return Start::No; // split by step() before
    }
    return Start::No;
  }

private:
  /// Pops the finished top frame; its parent moves on (`r`: which literal
  /// of a set matched).
  void complete(Config &c, int r) const {
    c.stack.pop_back();
    if (c.stack.empty())
      return;
    Frame &p = c.stack.back();
    if (p.kind == OBJ && p.phase == O_KEY_PENDING) {
      p.phase = O_COLON;
      p.aux = uint16_t(r);
      p.mask |= uint64_t(1) << r;
      return;
    }
    if (p.kind != CALL)
      return;
    switch (p.phase) {
    case C_OPEN_PENDING:
      p.phase = C_NAME;
      return;
    case C_NAME_PENDING:
      p.node = uint32_t(r);
      p.mask = 0;
      p.phase = C_SEP;
      return;
    case C_SEP_PENDING:
      if (r == 0)
        p.phase = C_KEY;
      else
        complete(c, 0); // </tool_call>: the call is done
      return;
    case C_KEY_PENDING:
      p.aux = uint16_t(r);
      p.mask |= uint64_t(1) << r;
      p.phase = C_KEYCLOSE;
      return;
    case C_KEYCLOSE_PENDING:
      p.phase = C_VALOPEN;
      return;
    case C_VALOPEN_PENDING: {
      p.phase = C_VALCLOSE;
      const int v = g_.tools[p.node].values[p.aux];
      if (v == kRawText)
        c.stack.push_back(frame(RAW, 0));
      else if (v <= kRawEnum)
        c.stack.push_back(frame(LIT, 0, uint32_t(kRawEnum - v),
                                all(g_.groups[size_t(kRawEnum - v)].size())));
      else
        c.stack.push_back(frame(VALUE, V_INNER, uint32_t(v)));
      return;
    }
    case C_VALCLOSE_PENDING:
      p.phase = C_SEP;
      return;
    }
  }

  // --- distances ---------------------------------------------------------
  int64_t minLen(int node) const { return g_.nodes[size_t(node)].minLen; }
  int64_t member(const Node &n, int k) const {
    return int64_t(g_.groups[size_t(n.keys)][size_t(k)].size()) + 1 +
           minLen(n.props[size_t(k)]);
  }
  /// Members still required, each with the comma before it, and '}'.
  int64_t objAfterValue(const Node &n, uint64_t seen) const {
    int64_t d = 1;
    for (uint64_t m = n.required & ~seen; m; m &= m - 1)
      d += 1 + member(n, __builtin_ctzll(m));
    return d;
  }
  int64_t objRest(const Frame &f) const {
    const Node &n = g_.nodes[f.node];
    const uint64_t missing = n.required & ~f.mask;
    switch (f.phase) {
    case O_OPEN:
    case O_COMMA: {
      if (missing || f.phase == O_OPEN)
        return objAfterValue(n, f.mask) - (missing ? 1 : 0);
      if (n.freeKeys)
        return 4 + 1; // "":0}
      int64_t best = kFar;
      for (uint64_t m = all(n.props.size()) & ~f.mask; m; m &= m - 1)
        best = std::min(best, member(n, __builtin_ctzll(m)));
      return best + 1;
    }
    case O_COLON:
      return 1 + minLen(f.aux == kFreeKey ? kAny : n.props[f.aux]) +
             objAfterValue(n, f.mask);
    case O_AFTER_VAL:
      return objAfterValue(n, f.mask);
    }
    return 0; // O_KEY_PENDING: the key set counts
  }
  int64_t arrRest(const Frame &f) const {
    const Node &n = g_.nodes[f.node];
    const int64_t item = minLen(n.items);
    if (f.phase == A_OPEN)
      return n.minItems == 0 ? 1 : n.minItems * item + (n.minItems - 1) + 1;
    const int64_t need = std::max<int64_t>(0, n.minItems - f.aux);
    return need * (1 + item) + 1;
  }
  int64_t arg(const Tool &t, int k) const {
    return len(kKeyOpen) +
           int64_t(g_.groups[size_t(t.keys)][size_t(k)].size()) +
           len(kKeyClose) + len(kValOpen) + t.valueMin[size_t(k)] +
           len(kValClose);
  }
  /// Required arguments not yet written, then </tool_call>.
  int64_t callTail(const Tool &t, uint64_t seen) const {
    int64_t d = len(kClose);
    for (uint64_t m = t.required & ~seen; m; m &= m - 1)
      d += arg(t, __builtin_ctzll(m));
    return d;
  }
  int64_t callRest(const Frame &f) const {
    if (f.phase == C_NAME)
      return g_.minCallLen - len(kOpen);
    if (f.phase <= C_NAME_PENDING)
      return 0;
    const Tool &t = g_.tools[f.node];
    switch (f.phase) {
    case C_SEP:
      return callTail(t, f.mask);
    case C_KEY: {
      int64_t best = kFar;
      for (uint64_t m = all(t.values.size()) & ~f.mask; m; m &= m - 1) {
        int k = __builtin_ctzll(m);
        best = std::min(best, arg(t, k) - len(kKeyOpen) +
                                  callTail(t, f.mask | uint64_t(1) << k));
      }
      return best;
    }
    case C_KEYCLOSE:
      return len(kKeyClose) + len(kValOpen) + t.valueMin[f.aux] +
             len(kValClose) + callTail(t, f.mask);
    case C_VALOPEN:
      return len(kValOpen) + t.valueMin[f.aux] + len(kValClose) +
             callTail(t, f.mask);
    case C_VALCLOSE:
      return len(kValClose) + callTail(t, f.mask);
    }
    return 0; // pending: the literal set counts
  }
  /// The parent's distance once literal r of the set on top matched.
  int64_t restAfter(const Frame &p, int r) const {
    Frame q = p;
    if (p.kind == OBJ && p.phase == O_KEY_PENDING) {
      q.phase = O_COLON;
      q.aux = uint16_t(r);
      q.mask |= uint64_t(1) << r;
      return objRest(q);
    }
    if (p.kind != CALL)
      return rest(p, nullptr);
    switch (p.phase) {
    case C_OPEN_PENDING:
      q.phase = C_NAME;
      break;
    case C_NAME_PENDING:
      return callTail(g_.tools[size_t(r)], 0);
    case C_SEP_PENDING:
      if (r == 1)
        return 0;
      q.phase = C_KEY;
      break;
    case C_KEY_PENDING:
      q.phase = C_KEYCLOSE;
      q.aux = uint16_t(r);
      q.mask |= uint64_t(1) << r;
      break;
    case C_KEYCLOSE_PENDING:
      q.phase = C_VALOPEN;
      break;
    case C_VALOPEN_PENDING:
      q.phase = C_VALCLOSE;
      return g_.tools[p.node].valueMin[p.aux] + callRest(q);
    case C_VALCLOSE_PENDING:
      q.phase = C_SEP;
      break;
    default:
      return callRest(p);
    }
    return callRest(q);
  }
  static bool pending(const Frame &p) {
    return (p.kind == OBJ && p.phase == O_KEY_PENDING) ||
           (p.kind == CALL &&
            (p.phase == C_OPEN_PENDING || p.phase == C_NAME_PENDING ||
             p.phase == C_SEP_PENDING || p.phase == C_KEY_PENDING ||
             p.phase == C_KEYCLOSE_PENDING || p.phase == C_VALOPEN_PENDING ||
             p.phase == C_VALCLOSE_PENDING));
  }
  /// Bytes that finish frame f (its parent's own rest is counted apart,
  /// except a pending parent, whose future depends on f's literal).
  int64_t rest(const Frame &f, const Frame *parent) const {
    switch (f.kind) {
    case VALUE:
      return minLen(int(f.node));
    case OBJ:
      return objRest(f);
    case ARR:
      return arrRest(f);
    case STR:
      return f.phase == S_ESC   ? 2
             : f.phase == S_HEX ? f.aux + 1
                                : (f.aux & 3) + 1;
    case NUM:
      return f.phase == N_ZERO || f.phase == N_INT || f.phase == N_FRAC ||
                     f.phase == N_EXP
                 ? 0
                 : 1;
    case LIT: {
      const auto &lits = g_.groups[f.node];
      const bool cont = parent && pending(*parent);
      int64_t best = kFar;
      for (uint64_t m = f.mask; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        int64_t d = int64_t(lits[size_t(i)].size()) - f.aux;
        if (cont)
          d += restAfter(*parent, i);
        best = std::min(best, d);
      }
      return best;
    }
    case RAW:
      return f.aux & 3;
    case TOOLS:
      return f.phase == T_START ? g_.minCallLen : 0;
    case CALL:
      return callRest(f);
    }
    return 0;
  }

  const Grammar &g_;
};

/// Feeds b to every configuration; false when none survives.
bool stepAll(const Machine &m, std::vector<Config> &cs, uint8_t b,
             std::vector<Config> &forks) {
  forks.clear();
  size_t out = 0;
  for (size_t i = 0; i < cs.size(); ++i) {
    if (!m.step(cs[i], b, forks))
      continue;
    if (out != i)
      cs[out] = std::move(cs[i]);
    ++out;
  }
  cs.resize(out);
  for (auto &f : forks)
    cs.push_back(std::move(f));
  if (cs.size() > 1) {
    std::vector<Config> uniq;
    for (auto &c : cs)
      if (std::find(uniq.begin(), uniq.end(), c) == uniq.end() &&
          uniq.size() < kMaxConfigs)
        uniq.push_back(std::move(c));
    cs = std::move(uniq);
  }
  return !cs.empty();
}

int64_t minDistance(const Machine &m, const std::vector<Config> &cs) {
  if (cs.empty())
    return -1;
  int64_t d = kFar;
  for (const auto &c : cs)
    d = std::min(d, m.distance(c));
  return d;
}

} // namespace

Recognizer::Recognizer(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  Config c;
  if (g_->root >= 0)
    c.stack.push_back(frame(VALUE, V_ROOT, uint32_t(g_->root)));
  else
    c.stack.push_back(frame(TOOLS, T_START));
  configs_.push_back(std::move(c));
}

bool Recognizer::feed(std::string_view bytes) {
  Machine m(*g_);
  std::vector<Config> forks;
  for (char ch : bytes)
    if (configs_.empty() || !stepAll(m, configs_, uint8_t(ch), forks)) {
      configs_.clear();
      return false;
    }
  return true;
}

int64_t Recognizer::distance() const {
  return minDistance(Machine(*g_), configs_);
}

std::string Recognizer::key() const {
  std::string k;
  for (const auto &c : configs_) {
    k.push_back(char(c.ws));
    k.push_back(char(c.stack.size()));
    k.append(reinterpret_cast<const char *>(c.stack.data()),
             c.stack.size() * sizeof(Frame));
  }
  return k;
}

//===----------------------------------------------------------------------===//
// Vocabulary and the token mask
//===----------------------------------------------------------------------===//
Vocabulary::Vocabulary(const Tokenizer &tok, std::vector<int64_t> endIds)
    : endIds_(std::move(endIds)) {
  const int32_t n = tok.vocabSize();
  bytes_.resize(size_t(n));
  // The server shows special tokens only when they are GLM markup (its
  // TextStream): the same tokens, with the same bytes, are tested here.
  std::set<int32_t> markup;
  for (const char *m : {"<think>", "</think>", kOpen, kClose, kKeyOpen,
                        kKeyClose, kValOpen, kValClose})
    if (tok.tokenId(m) >= 0)
      markup.insert(tok.tokenId(m));
  for (int32_t id = 0; id < n; ++id) {
    if (isEnd(id) || (tok.isSpecial(id) && !markup.count(id)))
      continue;
    bytes_[size_t(id)] = tok.tokenBytes(id);
    if (!bytes_[size_t(id)].empty())
      sorted_.push_back(id);
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] < bytes_[size_t(b)];
  });
  lcp_.resize(sorted_.size());
  for (size_t i = 0; i < sorted_.size(); ++i) {
    const std::string &b = bytes_[size_t(sorted_[i])];
    longest_ = std::max(longest_, b.size());
    if (i == 0)
      continue;
    const std::string &a = bytes_[size_t(sorted_[i - 1])];
    size_t l = 0;
    while (l < a.size() && l < b.size() && a[l] == b[l] && l < 0xFFFF)
      ++l;
    lcp_[i] = uint16_t(l);
  }
}

bool Vocabulary::isEnd(int64_t id) const {
  return std::find(endIds_.begin(), endIds_.end(), id) != endIds_.end();
}

class TokenMask : public TokenConstraint {
public:
  TokenMask(std::shared_ptr<const Grammar> g,
            std::shared_ptr<const Vocabulary> v)
      : g_(g), v_(std::move(v)), rec_(g), machine_(*g_) {}

  void mask(float *logits, int64_t n, int64_t left) override {
    const float off = -std::numeric_limits<float>::infinity();
    const int64_t d = ended_ ? -1 : rec_.distance();
    if (d < 0) { // ended or dead: only an end token may come
      for (int64_t t = 0; t < n; ++t)
        if (t >= v_->size() || !v_->isEnd(t))
          logits[t] = off;
      return;
    }
    const std::vector<uint16_t> &dist = distances();
    // A token must leave room for completing (d bytes, at most d tokens)
    // and the end token: dist + 2 <= left.
    auto ok = [&](int64_t t, int64_t limit) {
      if (t >= v_->size())
        return false;
      if (v_->isEnd(t))
        return d == 0;
      return dist[size_t(t)] != kNone && int64_t(dist[size_t(t)]) <= limit;
    };
    int64_t limit = left - 2;
    bool any = false;
    for (int64_t t = 0; t < n && !any; ++t)
      any = ok(t, limit);
    if (!any) {
      // The budget cannot fit a completion (max_tokens below the shortest
      // output): get as close as possible; the reply ends with "length".
      int64_t best = kFar;
      for (int64_t t = 0; t < std::min(n, v_->size()); ++t)
        if (!v_->isEnd(t) && dist[size_t(t)] != kNone)
          best = std::min<int64_t>(best, dist[size_t(t)]);
      limit = best;
    }
    for (int64_t t = 0; t < n; ++t)
      if (!ok(t, limit))
        logits[t] = off;
  }

  void accept(int64_t token) override {
    if (ended_)
      return;
    if (token >= 0 && token < v_->size() && v_->isEnd(token)) {
      ended_ = true;
      return;
    }
    if (token < 0 || token >= v_->size() || !rec_.feed(v_->bytes(token)))
      rec_.configs_.clear(); // dead: see mask()
  }

private:
  static constexpr uint16_t kNone = 0xFFFF;

  /// Per token id: the distance after it, kNone if not allowed. Tokens
  /// sorted by bytes share the recognizer states of their common prefix;
  /// a prefix that fails skips every token that starts with it.
  const std::vector<uint16_t> &distances() {
    std::string key = rec_.key();
    auto it = cache_.find(key);
    if (it != cache_.end())
      return it->second;
    if (cache_.size() >= kCacheEntries)
      cache_.clear();
    std::vector<uint16_t> dist(size_t(v_->size()), kNone);
    levels_.resize(v_->longest_ + 1);
    levels_[0] = rec_.configs_;
    size_t valid = 0, deadAt = SIZE_MAX;
    for (size_t i = 0; i < v_->sorted_.size(); ++i) {
      const int32_t id = v_->sorted_[i];
      const std::string &b = v_->bytes_[size_t(id)];
      const size_t l = v_->lcp_[i];
      if (deadAt != SIZE_MAX && l > deadAt)
        continue; // starts with the bytes that failed
      deadAt = SIZE_MAX;
      for (size_t k = std::min(l, valid); k < b.size(); ++k) {
        levels_[k + 1] = levels_[k];
        if (!stepAll(machine_, levels_[k + 1], uint8_t(b[k]), forks_)) {
          deadAt = k;
          break;
        }
      }
      valid = deadAt == SIZE_MAX ? b.size() : deadAt;
      if (deadAt == SIZE_MAX)
        dist[size_t(id)] = uint16_t(std::min<int64_t>(
            minDistance(machine_, levels_[b.size()]), kNone - 1));
    }
    return cache_.emplace(std::move(key), std::move(dist)).first->second;
  }

  static constexpr size_t kCacheEntries = 32;
  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const Vocabulary> v_;
  Recognizer rec_;
  Machine machine_;
  bool ended_ = false;
  std::unordered_map<std::string, std::vector<uint16_t>> cache_;
  std::vector<std::vector<Config>> levels_;
  std::vector<Config> forks_;
};

std::unique_ptr<TokenConstraint>
makeConstraint(std::shared_ptr<const Grammar> g,
               std::shared_ptr<const Vocabulary> v) {
  return std::make_unique<TokenMask>(std::move(g), std::move(v));
}

ConstraintBuilder::ConstraintBuilder(const Tokenizer &tok,
                                     std::vector<int64_t> endIds)
    : tok_(tok), endIds_(std::move(endIds)) {}

std::shared_ptr<const Vocabulary> ConstraintBuilder::vocabulary() const {
  std::call_once(once_, [&] {
    vocab_ = std::make_shared<const Vocabulary>(tok_, endIds_);
  });
  return vocab_;
}

std::function<std::unique_ptr<TokenConstraint>()>
ConstraintBuilder::factory(const std::string &spec) const {
  auto g = std::make_shared<const Grammar>(spec);
  auto v = vocabulary();
  return [g, v] { return makeConstraint(g, v); };
}

} // namespace glm::rt::grammar
