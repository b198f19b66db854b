//===- fake_engine_server.cpp - glm-serve-test: serve tests without a model
//===//
//
// Test-only CLI. `tokenize` and `render` expose the tokenizer and the Jinja
// engine to the Python parity tests; `serve` runs the OpenAI server over a
// scripted engine (deterministic replies with a <think> block, GLM tool calls,
// long counting replies, malformed calls; constrained requests decode seeded
// noise through the real token mask) so the HTTP/OpenAI behaviour is tested
// without a model.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/gen/sampler.h"
#include "runtime/serve/chat.h"
#include "runtime/serve/grammar.h"
#include "runtime/serve/jinja.h"
#include "runtime/serve/server.h"
#include "runtime/serve/tokenizer.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

using namespace glm::rt;
using json = nlohmann::json;

static std::string readFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  check(bool(f), path, ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// tokenize TOKENIZER LINES.json: input is a JSON array of strings; prints a
// JSON array of {ids, decoded} per string.
static int cmdTokenize(const std::string &tokPath, const std::string &inPath) {
  auto tok = Tokenizer::fromFile(tokPath);
  json in = json::parse(readFile(inPath));
  json out = json::array();
  for (const auto &s : in) {
    // A string is encoded; {"ids": [...]} is decoded as given.
    std::vector<int32_t> ids = s.is_string()
                                   ? tok->encode(s.get<std::string>())
                                   : s.at("ids").get<std::vector<int32_t>>();
    out.push_back({{"ids", ids},
                   {"decoded", tok->decode(ids)},
                   {"decoded_skip", tok->decode(ids, true)}});
  }
  std::cout << out.dump() << "\n";
  return 0;
}

// render TEMPLATE CASES.json [SECONDS]: CASES is a JSON array of context
// objects; prints a JSON array of {"text": ...} or {"error": ...} per case.
// SECONDS replaces the time limit of a render (the fuzz suite's hostile
// templates need not each take the default 10 s to be refused).
static int cmdRender(const std::string &tplPath, const std::string &inPath,
                     double maxSeconds) {
  jinja::Options opt;
  if (maxSeconds > 0)
    opt.limits.maxSeconds = maxSeconds;
  jinja::Template tpl(readFile(tplPath), tplPath, opt);
  auto in = nlohmann::ordered_json::parse(readFile(inPath));
  json out = json::array();
  for (const auto &ctx : in) {
    try {
      out.push_back({{"text", tpl.render(jinja::fromJson(ctx))}});
    } catch (const Error &e) {
      out.push_back({{"error", e.what()}});
    }
  }
  std::cout << out.dump() << "\n";
  return 0;
}

namespace {
// Replies chosen from the decoded prompt, emitted one token at a time.
class FakeEngine : public Engine {
public:
  FakeEngine(const Tokenizer &tok, int maxContext, int delayMs, int slots)
      : tok_(tok), maxContext_(maxContext), delayMs_(delayMs), slots_(slots),
        constraints_(tok, endIds(tok)) {
    for (int64_t e : endIds(tok))
      eos_.push_back(int32_t(e));
  }
  static std::vector<int64_t> endIds(const Tokenizer &tok) {
    std::vector<int64_t> ids;
    for (const char *e : {"<|endoftext|>", "<|user|>", "<|observation|>"})
      if (tok.tokenId(e) >= 0)
        ids.push_back(tok.tokenId(e));
    return ids;
  }
  int maxContext() const override { return maxContext_; }
  std::vector<int32_t> eosIds() const override { return eos_; }
  int maxConcurrency() const override { return slots_; }

  /// The sampling settings as received (the server's defaults and request
  /// parsing are tested through this reply).
  static std::string describe(const Sampling &s) {
    std::ostringstream o;
    o << "temperature=" << s.temperature << " top_p=" << s.topP
      << " top_k=" << s.topK << " min_p=" << s.minP
      << " repetition_penalty=" << s.repetitionPenalty
      << " presence_penalty=" << s.presencePenalty
      << " frequency_penalty=" << s.frequencyPenalty
      << " seed=" << (s.hasSeed ? std::to_string(s.seed) : std::string("none"));
    return o.str();
  }

  static std::string script(const std::string &prompt) {
    size_t u = prompt.rfind("<|user|>");
    std::string last = u == std::string::npos ? prompt : prompt.substr(u);
    std::string reply;
    if (last.find("<|observation|>") != std::string::npos)
      reply = "The weather in Paris is sunny, 21 degrees.";
    else if (last.find("weather") != std::string::npos &&
             prompt.find("# Tools") != std::string::npos)
      reply = "Sure, let me check.<tool_call>get_weather<arg_key>city"
              "</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
              "<arg_value>2</arg_value></tool_call>";
    else if (last.find("malformed") != std::string::npos)
      reply = "<tool_call>get_weather<arg_key>city</arg_key>Paris"
              "</tool_call> done";
    else if (last.find("count") != std::string::npos) {
      for (int i = 1; i <= 400; ++i)
        reply += std::to_string(i) + (i % 10 ? " " : "\n");
    } else
      reply = "Hello! I am a fake engine. 😀 Ünïcode works.";
    size_t k = prompt.find_last_not_of(" \n");
    if (k != std::string::npos && k >= 6 &&
        prompt.compare(k - 6, 7, "<think>") == 0)
      reply = "Thinking about it.</think>" + reply;
    return reply;
  }

  void generate(const std::vector<int32_t> &prompt, const Sampling &s,
                const OnToken &onToken) override {
    if (!s.grammar.empty())
      return constrained(prompt, s, onToken);
    std::string text = tok_.decode(prompt);
    size_t u = text.rfind("<|user|>");
    std::vector<int32_t> out = tok_.encode(
        text.find("sampling please", u == std::string::npos ? 0 : u) !=
                std::string::npos
            ? describe(s)
            : script(text));
    if (!eos_.empty())
      out.push_back(eos_.front());
    int n = 0;
    for (int32_t id : out) {
      if (n++ >= s.maxTokens)
        return;
      if (delayMs_ > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(delayMs_));
      // Made-up logprobs with the real shape: the token itself is the
      // most likely, then ids after it, each 1 nat less likely.
      TokenLogprobs lp;
      lp.logprob = -0.125f * float(id % 4);
      for (int k = 0; k < s.logprobs; ++k)
        lp.top.emplace_back(k == 0 ? id : (id + k) % tok_.vocabSize(),
                            lp.logprob - float(k));
      if (!onToken(id, s.logprobs >= 0 ? &lp : nullptr))
        return;
    }
  }

  /// A constrained request: seeded noise as logits through the real
  /// sampler and token mask, as a random-weight model would be decoded.
  void constrained(const std::vector<int32_t> &prompt, const Sampling &s,
                   const OnToken &onToken) {
    SamplingParams sp;
    sp.greedy = s.temperature == 0;
    sp.temperature = s.temperature;
    sp.seed = s.hasSeed ? s.seed : prompt.size();
    sp.maxNew = s.maxTokens;
    sp.constraint = constraints_.factory(s.grammar);
    Sampler sampler(sp);
    Xoshiro256 noise(sp.seed + 17);
    std::vector<float> logits(size_t(tok_.vocabSize()));
    for (int i = 0; i < s.maxTokens; ++i) {
      for (float &l : logits)
        l = float(noise.uniform() * 6);
      const int32_t id =
          int32_t(sampler.sample(logits.data(), int64_t(logits.size())));
      if (!onToken(id, nullptr) ||
          std::find(eos_.begin(), eos_.end(), id) != eos_.end())
        return;
    }
  }

private:
  const Tokenizer &tok_;
  int maxContext_, delayMs_, slots_;
  std::vector<int32_t> eos_;
  grammar::ConstraintBuilder constraints_;
};
} // namespace

// bench-grammar TOKENIZER [GENERATIONS]: the cost of the token mask per
// generated token (json_object, a schema, forced tool calls), decoding
// seeded noise with 64-token budgets; prints ms/token of the mask.
static int cmdBenchGrammar(const std::string &tokPath, int runs) {
  using Clock = std::chrono::steady_clock;
  auto tok = Tokenizer::fromFile(tokPath);
  std::vector<int64_t> ends = {tok->tokenId("<|endoftext|>")};
  grammar::ConstraintBuilder builder(*tok, ends);
  auto t0 = Clock::now();
  builder.vocabulary();
  std::cout
      << "vocabulary of " << tok->vocabSize() << " tokens indexed in "
      << std::chrono::duration<double, std::milli>(Clock::now() - t0).count()
      << " ms\n";
  const std::pair<const char *, std::string> cases[] = {
      {"none", ""},
      {"json_object", grammar::Grammar::jsonObjectSpec()},
      {"json_schema",
       grammar::Grammar::jsonSchemaSpec(
           grammar::ojson::parse(
               R"({"type": "object", "properties": {"name": {"type":
               "string"}, "age": {"type": "integer"}, "tags": {"type":
               "array", "items": {"enum": ["a", "b", 3]}, "maxItems": 3}},
               "required": ["name", "age"], "additionalProperties": false})"),
           "schema")},
      {"tool_call",
       grammar::Grammar::toolCallSpec(
           grammar::ojson::parse(
               R"([{"name": "get_weather", "parameters": {"type": "object",
               "properties": {"city": {"type": "string"}, "days": {"type":
               "integer"}}, "required": ["city"]}}])"),
           false)}};
  // Timed: the constraint's mask() and accept() only; the token is the
  // argmax of noise over what the mask allows (a random model's pick).
  std::vector<float> logits(size_t(tok->vocabSize()));
  for (const auto &[name, spec] : cases) {
    if (spec.empty())
      continue;
    double ms = 0, first = 0;
    int64_t tokens = 0;
    for (int r = 0; r < runs; ++r) {
      auto c = builder.factory(spec)();
      Xoshiro256 noise(uint64_t(r + 1) * 7);
      const int64_t budget = 64;
      for (int64_t i = 0; i < budget; ++i) {
        for (float &l : logits)
          l = float(noise.uniform() * 6);
        auto a = Clock::now();
        c->mask(logits.data(), int64_t(logits.size()), budget - i);
        int64_t id = argmax(logits.data(), int64_t(logits.size()));
        c->accept(id);
        double d =
            std::chrono::duration<double, std::milli>(Clock::now() - a).count();
        ms += d;
        if (i == 0)
          first += d;
        ++tokens;
        if (id == ends[0])
          break;
      }
    }
    std::cout << name << ": mask " << ms / double(tokens) << " ms/token over "
              << tokens << " tokens (first token " << first / runs << " ms)\n";
  }
  return 0;
}

// serve --tokenizer F --template F [--host H] [--port N] [--port-file F]
//       [--max-context N] [--delay-ms N] [--concurrency N] [--max-queue N]
//       [--api-key K,...] [--allowed-origins O,...] [--generation-config F]
//       [--served-model-name NAME]... (the first replaces "glm-fake")
// The prompt "sampling please" is answered with the sampling settings the
// engine received.
static int cmdServe(const std::vector<std::string> &a) {
  std::string tokPath, tplPath, portFile;
  ServerOptions opt;
  opt.port = 0;
  opt.modelName = "glm-fake";
  int maxContext = 2048, delayMs = 0, slots = 1;
  bool named = false;
  for (size_t i = 1; i + 1 < a.size(); i += 2) {
    const std::string &k = a[i], &v = a[i + 1];
    if (k == "--tokenizer")
      tokPath = v;
    else if (k == "--template")
      tplPath = v;
    else if (k == "--host")
      opt.host = v;
    else if (k == "--port")
      opt.port = std::stoi(v);
    else if (k == "--port-file")
      portFile = v;
    else if (k == "--max-context")
      maxContext = std::stoi(v);
    else if (k == "--delay-ms")
      delayMs = std::stoi(v);
    else if (k == "--concurrency")
      slots = std::stoi(v);
    else if (k == "--max-queue")
      opt.maxQueue = size_t(std::stoul(v));
    else if (k == "--api-key")
      opt.apiKeys = splitList(v);
    else if (k == "--allowed-origins")
      opt.allowedOrigins = splitList(v);
    else if (k == "--served-model-name" && !named) {
      opt.modelName = v;
      named = true;
    } else if (k == "--served-model-name")
      opt.modelAliases.push_back(v);
    else if (k == "--generation-config")
      applyGenerationConfig(v, opt);
    else
      fail("serve: unknown option ", k);
  }
  check(!tokPath.empty() && !tplPath.empty(),
        "serve: --tokenizer and --template are required");
  auto tok = Tokenizer::fromFile(tokPath);
  ChatTemplate chat(readFile(tplPath), tplPath);
  FakeEngine engine(*tok, maxContext, delayMs, slots);
  opt.onListening = [&](int port) {
    if (!portFile.empty()) {
      std::ofstream tmp(portFile + ".tmp");
      tmp << port << "\n";
      tmp.close();
      std::rename((portFile + ".tmp").c_str(), portFile.c_str());
    }
  };
  return runServer(engine, *tok, chat, opt);
}

int main(int argc, char **argv) {
  try {
    std::vector<std::string> a(argv + 1, argv + argc);
    if (a.size() == 3 && a[0] == "tokenize")
      return cmdTokenize(a[1], a[2]);
    if ((a.size() == 3 || a.size() == 4) && a[0] == "render")
      return cmdRender(a[1], a[2], a.size() == 4 ? std::stod(a[3]) : 0);
    if (!a.empty() && a[0] == "serve")
      return cmdServe(a);
    if ((a.size() == 2 || a.size() == 3) && a[0] == "bench-grammar")
      return cmdBenchGrammar(a[1], a.size() == 3 ? std::stoi(a[2]) : 8);
    std::cerr << "usage: glm-serve-test tokenize TOKENIZER.json IN.json\n"
                 "       glm-serve-test render TEMPLATE.jinja CASES.json "
                 "[SECONDS]\n"
                 "       glm-serve-test serve --tokenizer F --template F "
                 "[--port N] [--port-file F] [--max-context N] [--delay-ms N]"
                 " [--concurrency N] [--max-queue N]\n"
                 "       glm-serve-test bench-grammar TOKENIZER.json "
                 "[GENERATIONS]\n";
    return 2;
  } catch (const std::exception &e) {
    std::cerr << "glm-serve-test: " << e.what() << "\n";
    return 1;
  }
}
