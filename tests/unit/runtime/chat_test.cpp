//===- chat_test.cpp - chat template rendering and output parsing ---------===//
//
// The streaming parser must give the same result however the text is cut
// into pieces, never emit part of a marker, and return malformed calls as
// text.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/serve/chat.h"

#include <gtest/gtest.h>

using namespace glm::rt;

static ojson weatherTools() {
  return ojson::parse(R"([{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"},
      "opts": {"type": "object"}, "code": {"type": "string"}}}}}])");
}

// Feeds text in pieces of `step` bytes and joins the deltas.
static ChatDelta feedAll(OutputParser &p, const std::string &text, size_t step,
                         std::vector<std::string> *pieces) {
  ChatDelta all;
  for (size_t i = 0; i < text.size(); i += step) {
    ChatDelta d = p.feed(text.substr(i, step));
    if (pieces)
      pieces->push_back(d.content + "|" + d.reasoning);
    all.append(d);
  }
  all.append(p.finish());
  return all;
}

TEST(ChatParser, ThinkingToolCallAndContentAtEveryCut) {
  std::string out =
      "Let me check.</think>\n\nSure.<tool_call>get_weather"
      "<arg_key>city</arg_key><arg_value>Paris</arg_value>"
      "<arg_key>days</arg_key><arg_value>2</arg_value>"
      "<arg_key>code</arg_key><arg_value>42</arg_value></tool_call>";
  for (size_t step = 1; step <= out.size(); ++step) {
    OutputParser p(weatherTools(), /*startsInThinking=*/true);
    std::vector<std::string> pieces;
    ChatDelta d = feedAll(p, out, step, &pieces);
    EXPECT_EQ(d.reasoning, "Let me check.");
    EXPECT_EQ(d.content, "Sure.");
    ASSERT_EQ(d.toolCalls.size(), 1u) << "step " << step;
    EXPECT_EQ(d.toolCalls[0].name, "get_weather");
    EXPECT_EQ(d.toolCalls[0].arguments["city"], "Paris");
    EXPECT_EQ(d.toolCalls[0].arguments["days"], 2);    // integer schema
    EXPECT_EQ(d.toolCalls[0].arguments["code"], "42"); // string schema
    for (const auto &piece : pieces)
      EXPECT_EQ(piece.find('<'), std::string::npos) << piece;
  }
}

TEST(ChatParser, MalformedCallsComeBackAsText) {
  const char *bad[] = {
      "<tool_call>get_weather<arg_key>city</arg_key>Paris</tool_call>",
      "<tool_call>unknown_tool<arg_key>a</arg_key><arg_value>1</arg_value>"
      "</tool_call>",
      "<tool_call><arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>x",
  };
  for (const char *text : bad) {
    OutputParser p(weatherTools(), false);
    ChatDelta d = feedAll(p, std::string("A ") + text, 3, nullptr);
    EXPECT_TRUE(d.toolCalls.empty()) << text;
    EXPECT_EQ(d.content, std::string("A ") + text);
  }
}

TEST(ChatParser, NoToolsMeansNoParsingAndThinkAtStart) {
  OutputParser p(ojson(), false);
  ChatDelta d =
      feedAll(p, "<think>hmm</think>text <tool_call>x</tool_call>", 2, nullptr);
  EXPECT_EQ(d.reasoning, "hmm");
  EXPECT_EQ(d.content, "text <tool_call>x</tool_call>");
}

/// serve --reasoning-parser none / --tool-call-parser none: that part of
/// the output stays content, as generated.
TEST(ChatParser, ParsersSwitchedOffLeaveTheTextAsContent) {
  const std::string text = "<think>hmm</think>A <tool_call>get_weather"
                           "<arg_key>city</arg_key><arg_value>Paris"
                           "</arg_value></tool_call>";
  {
    OutputParser p(weatherTools(), false, {/*reasoning=*/false, true});
    ChatDelta d = feedAll(p, text, 3, nullptr);
    EXPECT_EQ(d.reasoning, "");
    EXPECT_EQ(d.content, "<think>hmm</think>A ");
    ASSERT_EQ(d.toolCalls.size(), 1u);
  }
  {
    OutputParser p(weatherTools(), false, {true, /*toolCalls=*/false});
    ChatDelta d = feedAll(p, text, 3, nullptr);
    EXPECT_EQ(d.reasoning, "hmm");
    EXPECT_TRUE(d.toolCalls.empty());
    EXPECT_EQ(d.content, text.substr(text.find("A ")));
  }
  {
    // A prompt that opened <think>: without the parser the reasoning and
    // its closing tag are content.
    OutputParser p(ojson(), /*startsInThinking=*/true, {false, false});
    ChatDelta d = feedAll(p, "hmm</think>ok", 2, nullptr);
    EXPECT_EQ(d.reasoning, "");
    EXPECT_EQ(d.content, "hmm</think>ok");
  }
}

TEST(ChatParser, TwoCallsAndJsonObjects) {
  OutputParser p(weatherTools(), false);
  ChatDelta d = feedAll(
      p,
      "<tool_call>get_weather<arg_key>opts</arg_key><arg_value>{\"a\": [1]}"
      "</arg_value></tool_call>\n<tool_call>get_weather</tool_call>\n",
      5, nullptr);
  ASSERT_EQ(d.toolCalls.size(), 2u);
  EXPECT_EQ(d.toolCalls[0].arguments["opts"]["a"][0], 1);
  EXPECT_TRUE(d.toolCalls[1].arguments.empty());
  EXPECT_EQ(d.content, "");
}

TEST(ChatTemplate, RendersStringArgumentsAsObjects) {
  ChatTemplate t("{% for m in messages %}{% for c in m.tool_calls %}"
                 "{{ c.function.arguments.city }}{% endfor %}{% endfor %}"
                 "{{ enable_thinking is defined }}",
                 "t.jinja");
  ChatTemplate::Request r;
  r.messages = ojson::parse(R"([{"role": "assistant", "tool_calls": [
    {"type": "function", "function": {"name": "f",
     "arguments": "{\"city\": \"Oslo\"}"}}]}])");
  EXPECT_EQ(t.render(r), "OsloFalse");
  r.enableThinking = false;
  EXPECT_EQ(t.render(r), "OsloTrue");
}

TEST(ChatJson, NestingDepthIgnoresBracketsInStringsAndBoundsParsing) {
  EXPECT_EQ(jsonNestingDepth("1"), 0);
  EXPECT_EQ(jsonNestingDepth(R"({"a": [1, {"b": []}]})"), 4);
  // Brackets inside strings, escaped quotes and backslashes do not count.
  EXPECT_EQ(jsonNestingDepth(R"({"a": "[[[{{{", "b": "\"[[[", "c": "\\"})"),
            1);
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  EXPECT_EQ(jsonNestingDepth(deep), 100000);
  try {
    parseJsonBounded(deep, "tool-call arguments");
    FAIL() << "parsed JSON nested 100000 deep";
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()),
              "tool-call arguments nests 100000 levels deep (at most 64)");
  }
  std::string ok(kMaxJsonDepth, '[');
  ok += std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(parseJsonBounded(ok, "x").is_array());
}
