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
  EXPECT_NE(errorOf(rep("{% if x %}", 50000))
                .find("test.jinja:1: blocks "
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

// Templates are code from the pack, run on every request: each of these took
// gigabytes or minutes (or was undefined behaviour) before the budgets.
static std::string renderError(const std::string &src, Limits limits = {}) {
  Options opt;
  opt.limits = limits;
  try {
    Template(src, "hostile.jinja", opt).render(Value::dict());
  } catch (const Error &e) {
    return e.what();
  }
  return "no error";
}

TEST(Jinja, OutputAndValueSizesAreBounded) {
  // What is refused before it is built, under the default limits.
  auto refused = [](const std::string &src, const std::string &what,
                    Limits limits = {}) {
    std::string e = renderError(src, limits);
    EXPECT_NE(e.find("hostile.jinja:1: rendering refused: " + what),
              std::string::npos)
        << src << " -> " << e;
  };
  refused("{{ 'x' * 1000000000 }}",
          "sequence * count would exceed 33554432 bytes");
  refused("{{ 'x' * 9223372036854775807 }}", "sequence * count");
  refused("{{ [1] * 1000000000 }}", "list * count would exceed 1000000 items");
  refused("{{ range(9223372036854775807) }}", "range() would exceed");
  refused("{{ range(-9223372036854775807, 9223372036854775807, 3) }}",
          "range() would exceed");
  refused("{{ 'a\nb' | indent(100000000000) }}", "indent width");
  refused("{{ {'a': [1, 2]} | tojson(indent=1000000000) }}",
          "tojson output would exceed");
  // What is refused while it grows: under a 1 MiB limit, to keep the test
  // quick (the mechanism does not depend on the figure).
  Limits mib;
  mib.maxBytes = 1 << 20;
  // Growth by doubling: each step is small, the result is not.
  refused("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
          "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
          "a string would exceed 1048576 bytes", mib);
  refused("{% set s = 'x' * 100000 %}{{ s.replace('x', s) }}",
          "replace() would exceed", mib);
  refused("{% set s = 'x' * 100000 %}{{ range(100) | join(s) }}",
          "join would exceed", mib);
  // Printing a list that holds one list many times multiplies its size.
  std::string doubled = "{% set ns = namespace(l=['x' * 1000]) %}{% for i in "
                        "range(30) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}";
  refused(doubled + "{{ ns.l }}", "a printed list would exceed", mib);
  refused(doubled + "{{ ns.l | tojson }}", "tojson output would exceed", mib);
  // The output itself.
  Limits small;
  small.maxBytes = 1000;
  std::string e =
      renderError("{% for i in range(100) %}0123456789ab{% endfor %}", small);
  EXPECT_NE(e.find("hostile.jinja:1: rendering refused: the output would "
                   "exceed 1000 bytes"),
            std::string::npos)
      << e;
  // Within the limits: unchanged.
  EXPECT_EQ(render("{{ ('ab' * 3)|length }} {{ [0] * 3 }} {{ range(2, 9, 3) "
                   "}} {{ range(5, 0, -2) }}"),
            "6 [0, 0, 0] [2, 5, 8] [5, 3, 1]");
}

TEST(Jinja, StepsAndTimeAreBounded) {
  // Steps are counted, so these refusals do not depend on the machine's
  // speed: the clock is out of the way, the step limit small.
  Limits steps;
  steps.maxSteps = 20000;
  steps.maxSeconds = 1e9;
  // 10^10 iterations of an empty body.
  std::string nested = "{% for i in range(100000) %}{% for j in "
                       "range(100000) %}{% endfor %}{% endfor %}";
  EXPECT_NE(renderError(nested, steps)
                .find("hostile.jinja:1: rendering refused: more than 20000 "
                      "evaluation steps"),
            std::string::npos);
  // Exponential macro recursion within the depth limit.
  std::string fork = "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) "
                     "}}{% endif %}{% endmacro %}{{ f(100) }}";
  EXPECT_NE(renderError(fork, steps).find("evaluation steps"),
            std::string::npos);
  // The clock: with no time at all, the first clock check refuses.
  Limits noTime;
  noTime.maxSeconds = 0;
  EXPECT_NE(renderError(nested, noTime)
                .find("hostile.jinja:1: rendering refused: took longer than "
                      "0 s"),
            std::string::npos);
}

TEST(Jinja, IntegerArithmeticDoesNotOverflow) {
  auto overflow = [](const std::string &src) {
    return renderError(src).find("integer overflow") != std::string::npos;
  };
  EXPECT_TRUE(overflow("{{ 9223372036854775807 + 1 }}"));
  EXPECT_TRUE(overflow("{{ -9223372036854775807 - 2 }}"));
  EXPECT_TRUE(overflow("{{ 4294967296 * 4294967296 }}"));
  EXPECT_TRUE(overflow("{{ 2 ** 64 }}"));
  EXPECT_TRUE(overflow("{{ (-9223372036854775807 - 1) // -1 }}"));
  EXPECT_TRUE(overflow("{{ -(-9223372036854775807 - 1) }}"));
  EXPECT_TRUE(overflow("{{ (-9223372036854775807 - 1) | abs }}"));
  // A huge exponent is 63 squarings at most, not a loop of 10^18.
  EXPECT_EQ(render("{{ 1 ** 1000000000000000000 }} {{ (-1) ** 1000000000000001 "
                   "}} {{ 0 ** 1000000000000 }} {{ 2 ** 62 }} {{ 3 ** 4 }}"),
            "1 -1 0 4611686018427387904 81");
  EXPECT_EQ(render("{{ 1e300 | int }} {{ 'nan' | int(7) }} {{ 2.9 | int }} "
                   "{{ -true }}"),
            "0 7 2 -1");
}
