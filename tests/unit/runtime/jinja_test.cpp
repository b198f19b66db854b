//===- jinja_test.cpp - the Jinja subset used for chat templates ----------===//
//
// Semantics checks; byte-for-byte parity with Python jinja2 on whole chat
// templates is tests/serve/test_template_parity.py.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/serve/jinja.h"

#include <gtest/gtest.h>

using namespace glm::rt;
using namespace glm::rt::jinja;

static std::string render(const std::string &src,
                          const std::string &ctx = "{}") {
  Template t(src, "test.jinja");
  return t.render(fromJson(nlohmann::ordered_json::parse(ctx)));
}

TEST(Jinja, WhitespaceControlAndTrimBlocks) {
  EXPECT_EQ(render("a\n  {% if true %}\nb\n  {% endif %}\nc\n"), "a\nb\nc");
  EXPECT_EQ(render("x  {{- 1 -}}  y"), "x1y");
  EXPECT_EQ(render("{# c #}\nz"), "z");
}

TEST(Jinja, LoopScopesAndNamespace) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1,2] %}{% set x = x + i %}"
                   "{{ x }}{% endfor %}{{ x }}"),
            "231");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}"
                   "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% for a in [] %}x{% else %}empty{% endfor %}"), "empty");
}

TEST(Jinja, PythonPrinting) {
  EXPECT_EQ(render("{{ [1, 'a', none, true, 0.5] }}"),
            "[1, 'a', None, True, 0.5]");
  EXPECT_EQ(render("{{ 1e20 }} {{ 0.1 + 0.2 }} {{ 3 / 2 }}"),
            "1e+20 0.30000000000000004 1.5");
  EXPECT_EQ(render("{{ d | tojson }}", R"({"d": {"b": [1, 2.0], "a": "é"}})"),
            "{\"b\": [1, 2.0], \"a\": \"é\"}");
}

TEST(Jinja, DictMethodsWinOverKeys) {
  // As in Jinja2: .items is the method even when a key "items" exists.
  EXPECT_EQ(render("{{ s['items'] }} {{ s.items() | length }}",
                   R"({"s": {"items": 5, "x": 1}})"),
            "5 2");
}

TEST(Jinja, MacrosAndStringMethods) {
  EXPECT_EQ(render("{% macro f(a, b='!') %}{{ a }}{{ b }}{% endmacro %}"
                   "{{ f('x') }}{{ f('y', b='?') }}"),
            "x!y?");
  EXPECT_EQ(render("{{ ' a b '.strip().split(' ') }}"), "['a', 'b']");
  EXPECT_EQ(render("{{ 'x</think>y'.split('</think>')[-1] }}"), "y");
}

TEST(Jinja, ErrorsNameTemplateAndLine) {
  try {
    render("ok\n{% if %}");
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("test.jinja:2"), std::string::npos);
  }
  EXPECT_THROW(render("{% for x in y %}"), Error);  // not closed
  EXPECT_THROW(render("{% include 'x' %}"), Error); // unsupported
  EXPECT_THROW(render("{{ raise_exception('no') }}"), Error);
  EXPECT_THROW(render("{{ a.b }}"), Error); // attribute of undefined
  EXPECT_EQ(render("{{ a }}|{{ a is defined }}"), "|False");
}

// Chat templates come from the pack: a damaged or hostile one must be refused
// with a message, not overflow the stack of the parser or the evaluator.
TEST(Jinja, DeepNestingAndLongChainsAreRefused) {
  auto rep = [](const std::string &s, int n) {
    std::string o;
    for (int i = 0; i < n; ++i)
      o += s;
    return o;
  };
  auto errorOf = [&](const std::string &tpl) -> std::string {
    try {
      render(tpl);
    } catch (const Error &e) {
      return e.what();
    }
    return "no error";
  };
  // Within the limits: what real templates never come near.
  EXPECT_EQ(render("{{ " + rep("(", 99) + "1" + rep(")", 99) + " }}"), "1");
  EXPECT_EQ(render("{{ 1" + rep(" + 1", 1000) + " }}"), "1001");
  EXPECT_EQ(render(rep("{% if true %}", 99) + "x" + rep("{% endif %}", 99)),
            "x");
  // Past them (each of these overflowed the stack before).
  EXPECT_NE(errorOf("{{ " + rep("(", 20000) + "1 }}")
                .find("test.jinja:1: expression of 20001 tokens (at most "
                      "2048 in one tag)"),
            std::string::npos);
  EXPECT_NE(errorOf("{{ 1" + rep("+1", 200000) + " }}").find("tokens"),
            std::string::npos);
  EXPECT_NE(errorOf("{{ x" + rep("|trim", 100000) + " }}").find("tokens"),
            std::string::npos);
  EXPECT_NE(errorOf("{{ " + rep("(", 500) + "1" + rep(")", 500) + " }}")
                .find("expression nests too deeply"),
            std::string::npos);
  EXPECT_NE(errorOf("{{ " + rep("not ", 1000) + "1 }}")
                .find("expression nests too deeply"),
            std::string::npos);
  EXPECT_NE(errorOf(rep("{% if x %}", 50000)).find("test.jinja:1: blocks "
                                                    "nest deeper than 100"),
            std::string::npos);
  // Values a template nests at run time: printing them is bounded too.
  const std::string wrap = "{% set ns = namespace(x=[]) %}{% for i in "
                           "range(2000) %}{% set ns.x = [ns.x] %}{% endfor %}";
  EXPECT_NE(errorOf(wrap + "{{ ns.x|tojson }}")
                .find("tojson: value nests deeper than 512 levels"),
            std::string::npos);
  EXPECT_NE(errorOf(wrap + "{{ ns.x }}")
                .find("string conversion: value nests deeper than 512 levels"),
            std::string::npos);
  EXPECT_EQ(render("{% set ns = namespace(x=[]) %}{% for i in range(500) %}"
                   "{% set ns.x = [ns.x] %}{% endfor %}"
                   "{{ (ns.x|tojson)|length }}"),
            "1002");
}
