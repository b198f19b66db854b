//===- chat.cpp - chat prompts in, reasoning/content/tool calls out -------===//
//
// The parser is a three-state machine (reasoning, content, inside a call)
// over a text buffer. In each state it looks for the markers that end it;
// a buffer tail that is a prefix of such a marker waits for more text.
//
//===----------------------------------------------------------------------===//
#include "runtime/serve/chat.h"

#include "runtime/base/error.h"
#include "runtime/base/files.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace glm::rt {

static const char kThinkOpen[] = "<think>";
static const char kThinkClose[] = "</think>";
static const char kCallOpen[] = "<tool_call>";
static const char kCallClose[] = "</tool_call>";

ChatTemplate::ChatTemplate(const std::string &source, const std::string &name)
    : tpl_(std::make_shared<jinja::Template>(source, name)) {}

static bool readText(const std::string &path, std::string &out) {
  if (!std::filesystem::exists(path))
    return false;
  out = readFileBounded(path, kMaxTemplateBytes, "the chat template");
  return true;
}

std::unique_ptr<ChatTemplate> ChatTemplate::fromPack(const std::string &dir) {
  std::string text;
  std::string path = dir + "/chat_template.jinja";
  if (readText(path, text))
    return std::make_unique<ChatTemplate>(text, path);
  std::string cfgPath = dir + "/tokenizer_config.json";
  if (readText(cfgPath, text)) {
    ojson cfg;
    try {
      cfg = ojson::parse(text);
    } catch (const std::exception &e) {
      fail(cfgPath, ": not valid JSON (", e.what(), ")");
    }
    if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
      return std::make_unique<ChatTemplate>(
          cfg["chat_template"].get<std::string>(), cfgPath);
  }
  fail(dir, ": no chat template (looked for chat_template.jinja and "
            "\"chat_template\" in tokenizer_config.json); copy the model's "
            "template into the pack");
}

std::string ChatTemplate::render(const Request &req) const {
  ojson msgs = req.messages;
  for (auto &m : msgs) {
    if (!m.is_object() || !m.contains("tool_calls") ||
        !m["tool_calls"].is_array())
      continue;
    for (auto &tc : m["tool_calls"]) {
      ojson *fn = tc.contains("function") ? &tc["function"] : &tc;
      if (fn->is_object() && fn->contains("arguments") &&
          (*fn)["arguments"].is_string()) {
        try {
          ojson a = parseJsonBounded((*fn)["arguments"].get<std::string>(),
                                     "tool-call arguments");
          if (a.is_object())
            (*fn)["arguments"] = a;
        } catch (const std::exception &) {
          // Not JSON: the template gets the string as given.
        }
      }
    }
  }
  jinja::Value ctx = jinja::Value::dict();
  for (auto it = req.extra.begin(); it != req.extra.end(); ++it)
    ctx.set(it.key(), jinja::fromJson(it.value()));
  ctx.set("messages", jinja::fromJson(msgs));
  ctx.set("tools", jinja::fromJson(req.tools));
  ctx.set("documents", jinja::Value::none());
  ctx.set("add_generation_prompt", jinja::Value(req.addGenerationPrompt));
  if (req.enableThinking)
    ctx.set("enable_thinking", jinja::Value(*req.enableThinking));
  return tpl_->render(ctx);
}

void ChatDelta::append(const ChatDelta &o) {
  reasoning += o.reasoning;
  content += o.content;
  toolCalls.insert(toolCalls.end(), o.toolCalls.begin(), o.toolCalls.end());
}

OutputParser::OutputParser(const ojson &tools, bool startsInThinking,
                           OutputParsers parsers)
    : tools_(tools),
      parseTools_(parsers.toolCalls && tools.is_array() && !tools.empty()),
      state_(startsInThinking && parsers.reasoning ? Reasoning : Content),
      sawContent_(!parsers.reasoning) {}

// Length of the longest suffix of s that is a proper prefix of marker.
static size_t partialSuffix(const std::string &s, const char *marker) {
  size_t m = strlen(marker);
  for (size_t n = std::min(s.size(), m - 1); n > 0; --n)
    if (s.compare(s.size() - n, n, marker, n) == 0)
      return n;
  return 0;
}

static std::string trimWs(const std::string &s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos)
    return "";
  size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

// The JSON-schema property of `key` for tool `name`, or null.
static const ojson *propertySchema(const ojson &tools, const std::string &name,
                                   const std::string &key) {
  for (const auto &t : tools) {
    const ojson &fn = t.contains("function") ? t["function"] : t;
    if (!fn.is_object() || fn.value("name", "") != name)
      continue;
    if (!fn.contains("parameters") || !fn["parameters"].is_object())
      return nullptr;
    const ojson &params = fn["parameters"];
    if (!params.contains("properties") || !params["properties"].is_object() ||
        !params["properties"].contains(key))
      return nullptr;
    return &params["properties"][key];
  }
  return nullptr;
}

static bool toolDeclared(const ojson &tools, const std::string &name) {
  for (const auto &t : tools) {
    const ojson &fn = t.contains("function") ? t["function"] : t;
    if (fn.is_object() && fn.value("name", "") == name)
      return true;
  }
  return false;
}

bool OutputParser::parseCall(const std::string &body, ToolCall &out) const {
  size_t firstKey = body.find("<arg_key>");
  std::string name = trimWs(body.substr(0, firstKey));
  if (name.empty() || name.find_first_of("<>\n") != std::string::npos)
    return false;
  if (!toolDeclared(tools_, name))
    return false;
  out.name = name;
  out.arguments = ojson::object();
  size_t pos = firstKey == std::string::npos ? body.size() : firstKey;
  auto skipWs = [&]() {
    while (pos < body.size() && strchr(" \t\r\n", body[pos]))
      ++pos;
  };
  auto expect = [&](const char *tag) {
    skipWs();
    size_t n = strlen(tag);
    if (body.compare(pos, n, tag) != 0)
      return false;
    pos += n;
    return true;
  };
  auto until = [&](const char *tag, std::string &val) {
    size_t e = body.find(tag, pos);
    if (e == std::string::npos)
      return false;
    val = body.substr(pos, e - pos);
    pos = e + strlen(tag);
    return true;
  };
  while (true) {
    skipWs();
    if (pos >= body.size())
      break;
    std::string key, val;
    if (!expect("<arg_key>") || !until("</arg_key>", key) ||
        !expect("<arg_value>") || !until("</arg_value>", val))
      return false;
    key = trimWs(key);
    if (key.empty() || out.arguments.contains(key) ||
        key.find('<') != std::string::npos ||
        val.find("<arg_key>") != std::string::npos)
      return false;
    const ojson *schema = propertySchema(tools_, name, key);
    bool asString = true;
    if (schema && schema->is_object()) {
      asString = false;
      if (schema->contains("type")) {
        const ojson &ty = (*schema)["type"];
        if (ty.is_string())
          asString = ty.get<std::string>() == "string";
        else if (ty.is_array())
          for (const auto &x : ty)
            asString |= x.is_string() && x.get<std::string>() == "string" &&
                        ty.size() == 1;
      }
    }
    if (!asString) {
      try {
        out.arguments[key] = parseJsonBounded(val, "tool-call argument");
        continue;
      } catch (const std::exception &) {
        // Not JSON: keep the text.
      }
    }
    out.arguments[key] = val;
  }
  return true;
}

void OutputParser::run(ChatDelta &d, bool final) {
  while (true) {
    if (state_ == Reasoning) {
      size_t e = buf_.find(kThinkClose);
      if (e == std::string::npos) {
        size_t hold = final ? 0 : partialSuffix(buf_, kThinkClose);
        d.reasoning += buf_.substr(0, buf_.size() - hold);
        buf_.erase(0, buf_.size() - hold);
        return;
      }
      d.reasoning += buf_.substr(0, e);
      buf_.erase(0, e + strlen(kThinkClose));
      state_ = Content;
      sawContent_ = true;
      stripLeading_ = true; // the newlines models put after </think> too
      continue;
    }
    if (state_ == Content) {
      if (!sawContent_) {
        // An opening <think> at the very start switches to reasoning.
        size_t k = buf_.find_first_not_of(" \t\r\n");
        if (k == std::string::npos) {
          if (final) {
            d.content += buf_;
            buf_.clear();
          }
          return;
        }
        std::string rest = buf_.substr(k);
        if (rest.compare(0, strlen(kThinkOpen), kThinkOpen) == 0) {
          buf_ = rest.substr(strlen(kThinkOpen));
          state_ = Reasoning;
          sawContent_ = true;
          continue;
        }
        if (!final && rest.size() < strlen(kThinkOpen) &&
            std::string(kThinkOpen).compare(0, rest.size(), rest) == 0)
          return; // might still become <think>
        sawContent_ = true;
      }
      if (stripLeading_) {
        // White space after a call or </think> is not content.
        size_t k = buf_.find_first_not_of(" \t\r\n");
        if (k == std::string::npos) {
          if (final)
            buf_.clear();
          return;
        }
        buf_.erase(0, k);
        stripLeading_ = false;
      }
      if (!parseTools_) {
        d.content += buf_;
        buf_.clear();
        return;
      }
      size_t s = buf_.find(kCallOpen);
      if (s == std::string::npos) {
        size_t hold = final ? 0 : partialSuffix(buf_, kCallOpen);
        d.content += buf_.substr(0, buf_.size() - hold);
        buf_.erase(0, buf_.size() - hold);
        return;
      }
      d.content += buf_.substr(0, s);
      buf_.erase(0, s);
      state_ = InCall;
      continue;
    }
    // InCall: buf_ starts with <tool_call>.
    size_t e = buf_.find(kCallClose);
    if (e == std::string::npos) {
      if (final) {
        d.content += buf_; // unfinished call: fail closed, as text
        buf_.clear();
      }
      return;
    }
    std::string raw = buf_.substr(0, e + strlen(kCallClose));
    std::string body = raw.substr(strlen(kCallOpen), e - strlen(kCallOpen));
    buf_.erase(0, raw.size());
    ToolCall call;
    if (body.find(kCallOpen) == std::string::npos && parseCall(body, call)) {
      d.toolCalls.push_back(std::move(call));
      stripLeading_ = true;
    } else {
      d.content += raw;
    }
    state_ = Content;
  }
}

ChatDelta OutputParser::feed(const std::string &text) {
  ChatDelta d;
  buf_ += text;
  run(d, false);
  return d;
}

ChatDelta OutputParser::finish() {
  ChatDelta d;
  run(d, true);
  if (!buf_.empty()) {
    (state_ == Reasoning ? d.reasoning : d.content) += buf_;
    buf_.clear();
  }
  return d;
}

} // namespace glm::rt
