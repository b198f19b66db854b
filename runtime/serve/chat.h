//===- chat.h - chat prompts in, reasoning/content/tool calls out ---------===//
//
// ChatTemplate renders OpenAI-style messages and tools through the pack's
// chat_template.jinja exactly as transformers' apply_chat_template would.
// OutputParser turns the model's text back into OpenAI fields as it streams:
// <think>...</think> -> reasoning, GLM tool-call markup
//   <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
// -> tool calls, the rest -> content. It never emits a partial marker: text
// that may be the start of one is held back until it is decided. It fails
// closed: a malformed or unknown call comes back as plain content text.
// ChatTemplate is immutable and thread-safe; one OutputParser per request.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/serve/jinja.h"
#include "runtime/serve/json_bounds.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace glm::rt {

using ojson = nlohmann::ordered_json;

class ChatTemplate {
public:
  ChatTemplate(const std::string &source, const std::string &name);
  /// Reads DIR/chat_template.jinja, else "chat_template" of
  /// DIR/tokenizer_config.json; throws Error saying which files were tried.
  static std::unique_ptr<ChatTemplate> fromPack(const std::string &dir);

  struct Request {
    ojson messages = ojson::array();
    ojson tools; // null or an array
    bool addGenerationPrompt = true;
    std::optional<bool> enableThinking;
    ojson extra = ojson::object(); // more template variables
  };
  /// The prompt text. Tool-call arguments given as JSON strings (OpenAI
  /// style) are passed to the template as objects, as templates expect.
  std::string render(const Request &req) const;

private:
  std::shared_ptr<jinja::Template> tpl_;
};

struct ToolCall {
  std::string name;
  ojson arguments = ojson::object(); // decoded per the tool's schema
};

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> toolCalls;
  bool empty() const {
    return reasoning.empty() && content.empty() && toolCalls.empty();
  }
  void append(const ChatDelta &o);
};

/// What OutputParser splits out of the generated text (serve
/// --reasoning-parser / --tool-call-parser): off, the text is content.
struct OutputParsers {
  bool reasoning = true; // <think>...</think> -> reasoning_content
  bool toolCalls = true; // <tool_call>...</tool_call> -> tool_calls
};

class OutputParser {
public:
  /// tools: the request's tools (null/empty: tool calls are not parsed);
  /// startsInThinking: the prompt ended with an open <think>.
  OutputParser(const ojson &tools, bool startsInThinking,
               OutputParsers parsers = OutputParsers());
  /// Feeds more generated text; returns what is decided now.
  ChatDelta feed(const std::string &text);
  /// End of generation: flushes held-back text (an unfinished call is text).
  ChatDelta finish();

  /// Decodes one <tool_call> body ("NAME<arg_key>..."); false if malformed.
  bool parseCall(const std::string &body, ToolCall &out) const;

private:
  enum State { Reasoning, Content, InCall };
  void run(ChatDelta &d, bool final);

  ojson tools_;
  bool parseTools_;
  State state_;
  bool sawContent_ = false; // set from the start: no <think> is looked for
  bool stripLeading_ = false;
  std::string buf_;
};

} // namespace glm::rt
