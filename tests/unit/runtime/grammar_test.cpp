//===- grammar_test.cpp - grammar-constrained decoding --------------------===//
//
// The recognizer accepts exactly the language (JSON, a schema's subset, GLM
// tool calls), its distance is the shortest completion (from any state a
// byte lowers it by one), and constrained sampling over a real tokenizer
// ends in a complete, valid output for every seed whenever the budget
// allows one.
//
//===----------------------------------------------------------------------===//
#include "runtime/gen/sampler.h"
#include "runtime/serve/chat.h"
#include "runtime/serve/grammar.h"
#include "runtime/serve/tokenizer.h"

#include <gtest/gtest.h>

#include <random>

using namespace glm::rt;
using namespace glm::rt::grammar;

namespace {

std::shared_ptr<const Grammar> jsonObject() {
  return std::make_shared<Grammar>(Grammar::jsonObjectSpec());
}
std::shared_ptr<const Grammar> schema(const char *s) {
  return std::make_shared<Grammar>(
      Grammar::jsonSchemaSpec(ojson::parse(s), "schema"));
}
std::shared_ptr<const Grammar> tools(const char *s, bool parallel = false) {
  return std::make_shared<Grammar>(
      Grammar::toolCallSpec(ojson::parse(s), parallel));
}

bool accepts(std::shared_ptr<const Grammar> g, const std::string &text) {
  Recognizer r(g);
  return r.feed(text) && r.complete();
}
bool prefixOk(std::shared_ptr<const Grammar> g, const std::string &text) {
  Recognizer r(g);
  return r.feed(text);
}

const char *kWeather = R"([{"name": "get_weather", "parameters": {
  "type": "object", "properties": {"city": {"type": "string"},
  "days": {"type": "integer"}, "unit": {"type": "string",
  "enum": ["c", "f"]}}, "required": ["city"]}},
  {"name": "get_time", "parameters": {"type": "object"}}])";

/// The subset's validator (what the tests hold outputs to).
bool valid(const ojson &v, const ojson &s) {
  if (s.is_boolean())
    return s.get<bool>();
  if (s.contains("anyOf")) {
    for (const auto &a : s["anyOf"])
      if (valid(v, a))
        return true;
    return false;
  }
  if (s.contains("const") && v != s["const"])
    return false;
  if (s.contains("enum") &&
      std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end())
    return false;
  if (s.contains("type")) {
    std::vector<std::string> ts;
    if (s["type"].is_string())
      ts.push_back(s["type"]);
    else
      for (const auto &t : s["type"])
        ts.push_back(t);
    bool ok = false;
    for (const auto &t : ts)
      ok |= (t == "object" && v.is_object()) ||
            (t == "array" && v.is_array()) ||
            (t == "string" && v.is_string()) ||
            (t == "number" && v.is_number()) ||
            (t == "integer" && v.is_number_integer()) ||
            (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null());
    if (!ok)
      return false;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const auto &k : s["required"])
        if (!v.contains(k.get<std::string>()))
          return false;
    for (const auto &[k, x] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(k)) {
        if (!valid(x, s["properties"][k]))
          return false;
      } else if (s.value("additionalProperties", true) == false) {
        return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>())
      return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>())
      return false;
    if (s.contains("items"))
      for (const auto &x : v)
        if (!valid(x, s["items"]))
          return false;
  }
  return true;
}

/// A random walk of `steps` allowed bytes, then the shortest completion:
/// from every state some byte lowers the distance by exactly one.
std::string walkAndClose(std::shared_ptr<const Grammar> g, std::mt19937 &rng,
                         int steps) {
  Recognizer r(g);
  std::string out;
  for (int i = 0; i < steps; ++i) {
    std::vector<uint8_t> ok;
    for (int b = 0; b < 256; ++b) {
      Recognizer k = r;
      if (k.feed(std::string(1, char(b))))
        ok.push_back(uint8_t(b));
    }
    if (ok.empty())
      break;
    uint8_t b = ok[rng() % ok.size()];
    // Favour structure over long strings so walks reach deep states.
    for (uint8_t s : {'{', '[', '"', ',', ':', '}', ']', '<'})
      if (rng() % 4 == 0 && std::count(ok.begin(), ok.end(), s))
        b = s;
    EXPECT_TRUE(r.feed(std::string(1, char(b))));
    out += char(b);
  }
  for (int64_t d = r.distance(); d > 0; d = r.distance()) {
    bool stepped = false;
    for (int b = 0; b < 256 && !stepped; ++b) {
      Recognizer k = r;
      if (k.feed(std::string(1, char(b))) && k.distance() == d - 1) {
        r = k;
        out += char(b);
        stepped = true;
      }
    }
    EXPECT_TRUE(stepped) << "no byte shortens " << out << " (distance " << d
                         << ")";
    if (!stepped)
      break;
  }
  return out;
}

} // namespace

TEST(Grammar, JsonObjectAcceptsObjectsOnly) {
  auto g = jsonObject();
  EXPECT_TRUE(accepts(g, "{}"));
  EXPECT_TRUE(accepts(
      g, R"({"a": [1, -2.5e+3, "x\u00e9\n", true, null, {}], "b": {"c": 0}})"));
  EXPECT_TRUE(accepts(g, "{\"\xc3\xa9\": \"\xf0\x9f\x98\x80\"}"));
  EXPECT_FALSE(prefixOk(g, " {}")); // no leading white space
  EXPECT_FALSE(prefixOk(g, "[1]")); // an object
  EXPECT_FALSE(prefixOk(g, "{} ")); // nothing after it
  EXPECT_FALSE(prefixOk(g, "{\"a\" 1"));
  EXPECT_FALSE(prefixOk(g, "{,"));
  EXPECT_FALSE(prefixOk(g, "{\"a\":01"));         // no leading zero
  EXPECT_FALSE(prefixOk(g, "{\"a\":\"\x01"));     // raw control character
  EXPECT_FALSE(prefixOk(g, "{\"a\":\"\xc3\x28")); // broken UTF-8
  EXPECT_FALSE(prefixOk(g, "{\"a\":tru,"));
  EXPECT_FALSE(accepts(g, "{\"a\":1"));
  EXPECT_FALSE(prefixOk(g, "{\"a\":1234567890123456")); // 16 digits
  EXPECT_TRUE(prefixOk(g, "{\"a\":123456789012345"));
  EXPECT_FALSE(prefixOk(g, "{" + std::string(kMaxWhitespaceRun + 1, ' ')));
  EXPECT_TRUE(prefixOk(g, "{" + std::string(kMaxWhitespaceRun, ' ') + "}"));
  std::string deep(kMaxNesting, '[');
  EXPECT_FALSE(prefixOk(g, "{\"a\":" + deep));
}

TEST(Grammar, DistanceIsTheShortestCompletion) {
  auto g = jsonObject();
  Recognizer r(g);
  EXPECT_EQ(r.distance(), 2); // {}
  r.feed("{\"ab");
  EXPECT_EQ(r.distance(), 4); // ":0}
  r.feed("\":[");
  EXPECT_EQ(r.distance(), 2); // ]}
  r.feed("1.");
  EXPECT_EQ(r.distance(), 3); // 0]}
  r.feed("5e");
  EXPECT_EQ(r.distance(), 3);
  r.feed("3]}");
  EXPECT_EQ(r.distance(), 0);
  EXPECT_TRUE(r.complete());
  EXPECT_FALSE(r.feed("x"));
  EXPECT_TRUE(r.dead());
  EXPECT_EQ(r.distance(), -1);
}

TEST(Grammar, RandomPrefixesCloseByShortestPaths) {
  const char *schemas[] = {
      R"({"type": "object"})",
      R"({"type": "object", "properties": {"name": {"type": "string"},
         "tags": {"type": "array", "items": {"enum": ["a", "bb", 3]},
                  "minItems": 2, "maxItems": 4},
         "n": {"anyOf": [{"type": "integer"}, {"type": "null"},
                         {"type": "object", "properties": {"x": {"const": 1}},
                          "required": ["x"]}]},
         "ok": {"type": "boolean"}},
         "required": ["name", "tags", "ok"], "additionalProperties": false})",
      R"({"type": "array", "items": {"type": ["number", "string"]},
         "minItems": 1})",
      R"({"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}},
         "required": ["a"], "additionalProperties": false},
         {"type": "object", "properties": {"b": {"type": "number"}},
         "required": ["b"], "additionalProperties": false}]})"};
  std::mt19937 rng(7);
  for (const char *s : schemas) {
    auto g = schema(s);
    ojson sch = ojson::parse(s);
    for (int i = 0; i < 60; ++i) {
      std::string out = walkAndClose(g, rng, int(rng() % 40));
      ojson v;
      const std::string shown =
          ojson(out).dump(-1, ' ', true, ojson::error_handler_t::replace);
      ASSERT_NO_THROW(v = ojson::parse(out)) << shown;
      EXPECT_TRUE(valid(v, sch)) << s << "\n" << shown;
      EXPECT_TRUE(accepts(g, out)) << shown;
    }
  }
}

TEST(Grammar, SchemaSubset) {
  auto g = schema(R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"enum": ["x", "y"]}},
      "required": ["a"], "additionalProperties": false})");
  EXPECT_TRUE(accepts(g, R"({"a": 3})"));
  EXPECT_TRUE(accepts(g, R"({"b":"y","a":-1})"));
  EXPECT_FALSE(accepts(g, R"({"b":"y"})"));   // a is required
  EXPECT_FALSE(prefixOk(g, R"({"c")"));       // not a property
  EXPECT_FALSE(prefixOk(g, R"({"a":1.5)"));   // an integer
  EXPECT_FALSE(prefixOk(g, R"({"a":1,"a")")); // once
  EXPECT_FALSE(prefixOk(g, R"({"b":"z)"));
  EXPECT_FALSE(prefixOk(g, R"({"a":1,"b":"x",)")); // nothing left to add
  auto arr = schema(R"({"type": "array", "items": {"type": "boolean"},
                        "minItems": 1, "maxItems": 2})");
  EXPECT_FALSE(accepts(arr, "[]"));
  EXPECT_TRUE(accepts(arr, "[true]"));
  EXPECT_TRUE(accepts(arr, "[true, false]"));
  EXPECT_FALSE(prefixOk(arr, "[true,false,"));
  EXPECT_TRUE(
      accepts(schema(R"({"const": {"k": [1, "two"]}})"), R"({"k":[1,"two"]})"));
  EXPECT_TRUE(accepts(schema(R"({"type": "number"})"), "12"));
  EXPECT_TRUE(accepts(schema(R"({"enum": [1, 12]})"), "1"));
  EXPECT_TRUE(accepts(schema(R"({"enum": [1, 12]})"), "12"));
  EXPECT_TRUE(accepts(schema(R"({"type": ["string", "null"]})"), "null"));
  EXPECT_TRUE(accepts(schema(R"({"description": "anything"})"), "[1]"));
}

TEST(Grammar, UnsupportedKeywordsAreNamedWithTheirPath) {
  auto refused = [](const char *s, const std::string &path,
                    const std::string &keyword) {
    try {
      Grammar::jsonSchemaSpec(ojson::parse(s), "response_format.schema");
      ADD_FAILURE() << s << " was accepted";
    } catch (const Unsupported &e) {
      EXPECT_EQ(e.path, path) << e.what();
      EXPECT_EQ(e.keyword, keyword) << e.what();
      EXPECT_NE(std::string(e.what()).find(keyword), std::string::npos);
    }
  };
  refused(R"({"type": "object", "properties": {"name": {"type": "string",
          "pattern": "^a"}}})",
          "response_format.schema.properties.name", "pattern");
  refused(R"({"$ref": "#/$defs/a"})", "response_format.schema", "$ref");
  refused(R"({"type": "array", "items": {"minimum": 1}})",
          "response_format.schema.items", "minimum");
  refused(R"({"type": "object", "additionalProperties": {"type": "string"}})",
          "response_format.schema", "additionalProperties");
  refused(R"({"type": "date"})", "response_format.schema", "type");
  refused(R"({"anyOf": [{"type": "string"}], "type": "string"})",
          "response_format.schema", "type");
  refused(R"({"type": "integer", "enum": ["a"]})", "response_format.schema",
          "enum");
}

TEST(Grammar, ToolCalls) {
  auto g = tools(kWeather);
  EXPECT_TRUE(accepts(g, "<tool_call>get_weather\n<arg_key>city</arg_key>\n"
                         "<arg_value>Paris, France</arg_value>\n<arg_key>days"
                         "</arg_key><arg_value>2</arg_value></tool_call>"));
  EXPECT_TRUE(accepts(g, "<tool_call>get_time</tool_call>"));
  EXPECT_TRUE(accepts(g, "<tool_call>get_weather<arg_key>unit</arg_key>"
                         "<arg_value>f</arg_value><arg_key>city</arg_key>"
                         "<arg_value></arg_value></tool_call>"));
  EXPECT_FALSE(prefixOk(g, "Sure<tool_call>"));
  EXPECT_FALSE(prefixOk(g, "<tool_call>get_wea<"));
  EXPECT_FALSE(prefixOk(g, "<tool_call>get_weather</tool_call>")); // city
  EXPECT_FALSE(prefixOk(g, "<tool_call>get_weather<arg_key>town"));
  EXPECT_FALSE(prefixOk(g, "<tool_call>get_weather<arg_key>city</arg_key>"
                           "<arg_value>a<b"));
  EXPECT_FALSE(prefixOk(g, "<tool_call>get_weather<arg_key>days</arg_key>"
                           "<arg_value>two"));
  EXPECT_FALSE(prefixOk(g, "<tool_call>get_weather<arg_key>unit</arg_key>"
                           "<arg_value>k"));
  EXPECT_FALSE(prefixOk(g, "<tool_call>get_time</tool_call><tool_call>"));
  EXPECT_TRUE(prefixOk(tools(kWeather, true),
                       "<tool_call>get_time</tool_call>\n<tool_call>"));
  Recognizer r(g);
  // <tool_call>get_time</tool_call>
  EXPECT_EQ(r.distance(), 11 + 8 + 12);
  // The parser reads back exactly the calls the grammar writes.
  std::mt19937 rng(3);
  ojson fns = ojson::parse(kWeather);
  ojson wrapped = ojson::array();
  for (const auto &f : fns)
    wrapped.push_back({{"type", "function"}, {"function", f}});
  OutputParser p(wrapped, false);
  for (int i = 0; i < 40; ++i) {
    std::string out = walkAndClose(g, rng, int(rng() % 80));
    ToolCall call;
    ASSERT_EQ(out.rfind("<tool_call>", 0), 0u) << out;
    ASSERT_EQ(out.size() - out.rfind("</tool_call>"), 12u) << out;
    ASSERT_TRUE(p.parseCall(out.substr(11, out.size() - 11 - 12), call)) << out;
    if (call.name == "get_weather") {
      EXPECT_TRUE(call.arguments.contains("city")) << out;
      if (call.arguments.contains("days"))
        EXPECT_TRUE(call.arguments["days"].is_number_integer()) << out;
    }
  }
}

TEST(Grammar, ToolNamesAndKeysMustBeWritable) {
  EXPECT_THROW(tools(R"([{"name": "a b"}])"), Unsupported);
  EXPECT_THROW(tools(R"([{"name": "f", "parameters": {"properties":
               {"<x>": {}}}}])"),
               Unsupported);
}

namespace {
std::shared_ptr<const Vocabulary> testVocabulary(const Tokenizer &tok) {
  return std::make_shared<Vocabulary>(
      tok, std::vector<int64_t>{tok.tokenId("<|endoftext|>")});
}

/// Constrained sampling over random logits: the output text and whether it
/// ended with the end token.
std::pair<std::string, bool> sample(const Tokenizer &tok,
                                    std::shared_ptr<const Grammar> g,
                                    std::shared_ptr<const Vocabulary> v,
                                    uint64_t seed, int64_t maxNew,
                                    bool greedy) {
  SamplingParams p;
  p.greedy = greedy;
  p.temperature = 1.0;
  p.seed = seed;
  p.maxNew = maxNew;
  p.constraint = [&] { return makeConstraint(g, v); };
  Sampler s(p);
  Xoshiro256 noise(seed * 31 + 1);
  const int64_t end = tok.tokenId("<|endoftext|>");
  std::string text;
  std::vector<float> logits(size_t(tok.vocabSize()) + 5);
  for (int64_t i = 0; i < maxNew; ++i) {
    for (float &l : logits)
      l = float(noise.uniform() * 8);
    int64_t t = s.sample(logits.data(), int64_t(logits.size()));
    if (t == end)
      return {text, true};
    EXPECT_LT(t, tok.vocabSize());
    text += v->bytes(t);
  }
  return {text, false};
}
} // namespace

TEST(GrammarMask, RandomModelsEndWithValidOutput) {
  auto tok = Tokenizer::fromFile(std::string(GLM_TEST_DATA_DIR) +
                                 "/serve/glm_style_tokenizer.json");
  auto v = testVocabulary(*tok);
  const char *sch = R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
      "required": ["name", "age"], "additionalProperties": false})";
  auto gs = schema(sch);
  auto go = jsonObject();
  auto gt = tools(kWeather);
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    for (int64_t budget : {30, 80}) {
      auto [text, ended] = sample(*tok, go, v, seed, budget, seed % 3 == 0);
      EXPECT_TRUE(ended) << text;
      ojson j;
      ASSERT_NO_THROW(j = ojson::parse(text)) << text;
      EXPECT_TRUE(j.is_object());
      auto [st, se] = sample(*tok, gs, v, seed, budget, false);
      EXPECT_TRUE(se) << st;
      ASSERT_NO_THROW(j = ojson::parse(st)) << st;
      EXPECT_TRUE(valid(j, ojson::parse(sch))) << st;
      auto [tt, te] = sample(*tok, gt, v, seed, budget + 20, false);
      EXPECT_TRUE(te) << tt;
      EXPECT_TRUE(accepts(gt, tt)) << tt;
    }
  }
}

TEST(GrammarMask, TooSmallABudgetGetsAsCloseAsItCan) {
  auto tok = Tokenizer::fromFile(std::string(GLM_TEST_DATA_DIR) +
                                 "/serve/glm_style_tokenizer.json");
  auto v = testVocabulary(*tok);
  auto g = schema(R"({"type": "object", "properties": {"a_long_name":
      {"type": "string"}}, "required": ["a_long_name"]})");
  auto [text, ended] = sample(*tok, g, v, 5, 3, false);
  EXPECT_FALSE(ended);
  EXPECT_TRUE(prefixOk(g, text)) << text; // a prefix, never invalid
}

TEST(GrammarMask, SpecialTokensOnlyAsMarkupOrEnd) {
  auto tok = Tokenizer::fromFile(std::string(GLM_TEST_DATA_DIR) +
                                 "/serve/glm_style_tokenizer.json");
  auto v = testVocabulary(*tok);
  auto c = makeConstraint(tools(kWeather), v);
  std::vector<float> logits(size_t(tok->vocabSize()), 0.f);
  c->mask(logits.data(), int64_t(logits.size()), 100);
  const int32_t open = tok->tokenId("<tool_call>");
  ASSERT_GE(open, 0);
  EXPECT_EQ(logits[size_t(open)], 0.f);
  EXPECT_TRUE(std::isinf(logits[size_t(tok->tokenId("<|user|>"))]));
  EXPECT_TRUE(std::isinf(logits[size_t(tok->tokenId("<|endoftext|>"))]));
  EXPECT_TRUE(std::isinf(logits[size_t(tok->tokenId("<think>"))]));
}
