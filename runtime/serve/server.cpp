//===- server.cpp - the OpenAI-compatible server over an abstract engine --===//
//
// Each request runs on its connection's thread: validate, render/encode,
// wait for an engine slot (FIFO, bounded), generate with a per-token callback
// that decodes UTF-8 safely, holds back possible stop-sequence prefixes,
// parses reasoning and tool calls, writes SSE chunks and notices a client that
// went away. Validation errors are ApiError: status + OpenAI error fields.
// Before routing: CORS headers / preflight, then the API key check; after
// it: the access-log line.
//
//===----------------------------------------------------------------------===//
#include "runtime/serve/server.h"

#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/json_numbers.h"
#include "runtime/serve/grammar.h"
#include "runtime/serve/http.h"
#include "runtime/serve/unicode.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

namespace glm::rt {

namespace {
using Clock = std::chrono::steady_clock;

struct ApiError {
  int status;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
};

[[noreturn]] void badRequest(const std::string &msg, const std::string &param,
                             const std::string &code = "") {
  throw ApiError{400, msg, "invalid_request_error", param, code};
}

std::string dumpJson(const ojson &j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string errorBody(const ApiError &e) {
  ojson err = {{"message", e.message},
               {"type", e.type},
               {"param", e.param.empty() ? ojson() : ojson(e.param)},
               {"code", e.code.empty() ? ojson() : ojson(e.code)}};
  return dumpJson(ojson{{"error", err}});
}

std::string randomHex(size_t n) {
  static std::mutex m;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(m);
  static const char *hex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i)
    s += hex[rng() & 15];
  return s;
}

int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

//===----------------------------------------------------------------------===//
// Metrics
//===----------------------------------------------------------------------===//
/// A Prometheus histogram of seconds over ten bucket bounds (the caller
/// holds Metrics::m).
struct Histogram {
  std::array<double, 10> le;
  uint64_t counts[11] = {}; // cumulative per bound, then +Inf
  double sum = 0;
  void add(double s) {
    for (size_t i = 0; i < le.size(); ++i)
      if (s <= le[i])
        ++counts[i];
    ++counts[10];
    sum += s;
  }
  void write(std::ostream &o, const char *name, const char *help) const {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name
      << " histogram\n";
    for (size_t i = 0; i < le.size(); ++i)
      o << name << "_bucket{le=\"" << le[i] << "\"} " << counts[i] << "\n";
    o << name << "_bucket{le=\"+Inf\"} " << counts[10] << "\n"
      << name << "_sum " << sum << "\n"
      << name << "_count " << counts[10] << "\n";
  }
};

struct Metrics {
  std::mutex m;
  std::map<std::pair<std::string, int>, uint64_t> requests;
  uint64_t promptTokens = 0, generationTokens = 0, cancelled = 0, rejected = 0;
  double decodeSeconds = 0, lastDecodeTps = 0;
  Histogram ttftHist{{0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram itlHist{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}};
  std::atomic<int> queued{0}, running{0};

  void request(const std::string &endpoint, int status) {
    std::lock_guard<std::mutex> l(m);
    ++requests[{endpoint, status}];
  }
  void ttft(double s) {
    std::lock_guard<std::mutex> l(m);
    ttftHist.add(s);
  }
  /// The time between two tokens of one request.
  void itl(double s) {
    std::lock_guard<std::mutex> l(m);
    itlHist.add(s);
  }
  std::string text() {
    std::lock_guard<std::mutex> l(m);
    std::ostringstream o;
    o << "# HELP glm_requests_total HTTP requests by endpoint and status.\n"
         "# TYPE glm_requests_total counter\n";
    for (const auto &[k, v] : requests)
      o << "glm_requests_total{endpoint=\"" << k.first << "\",status=\""
        << k.second << "\"} " << v << "\n";
    o << "# HELP glm_prompt_tokens_total Prompt tokens processed.\n"
         "# TYPE glm_prompt_tokens_total counter\n"
         "glm_prompt_tokens_total "
      << promptTokens
      << "\n# HELP glm_generation_tokens_total Tokens generated.\n"
         "# TYPE glm_generation_tokens_total counter\n"
         "glm_generation_tokens_total "
      << generationTokens
      << "\n# HELP glm_queue_depth Requests waiting for the engine.\n"
         "# TYPE glm_queue_depth gauge\nglm_queue_depth "
      << queued.load()
      << "\n# HELP glm_requests_running Requests generating now.\n"
         "# TYPE glm_requests_running gauge\nglm_requests_running "
      << running.load()
      << "\n# HELP glm_requests_cancelled_total Generations cancelled by a "
         "client disconnect.\n# TYPE glm_requests_cancelled_total counter\n"
         "glm_requests_cancelled_total "
      << cancelled
      << "\n# HELP glm_requests_rejected_total Requests refused with 429 "
         "(queue full).\n# TYPE glm_requests_rejected_total counter\n"
         "glm_requests_rejected_total "
      << rejected << "\n";
    ttftHist.write(o, "glm_time_to_first_token_seconds",
                   "Time from request to first generated token.");
    itlHist.write(o, "glm_inter_token_latency_seconds",
                  "Time between two tokens of a request.");
    o << "# HELP glm_decode_tokens_per_second Decode speed of the last "
         "finished request.\n# TYPE glm_decode_tokens_per_second gauge\n"
         "glm_decode_tokens_per_second "
      << lastDecodeTps
      << "\n# HELP glm_decode_seconds_total Time spent decoding after the "
         "first token.\n# TYPE glm_decode_seconds_total counter\n"
         "glm_decode_seconds_total "
      << decodeSeconds << "\n";
    return o.str();
  }
};

//===----------------------------------------------------------------------===//
// FIFO admission to the engine
//===----------------------------------------------------------------------===//
class Scheduler {
public:
  Scheduler(int slots, size_t maxQueue, Metrics &m)
      : slots_(std::max(1, slots)), maxQueue_(maxQueue), metrics_(m) {}
  /// Waits for a slot; false if the queue is full (429) or `gone` says the
  /// client left while waiting.
  enum Result { Admitted, Full, Gone };
  Result acquire(const std::function<bool()> &gone) {
    std::unique_lock<std::mutex> l(m_);
    if (running_ < slots_ && queue_.empty()) {
      ++running_;
      ++metrics_.running;
      return Admitted;
    }
    if (queue_.size() >= maxQueue_)
      return Full;
    uint64_t ticket = next_++;
    queue_.push_back(ticket);
    ++metrics_.queued;
    while (true) {
      if (queue_.front() == ticket && running_ < slots_) {
        queue_.pop_front();
        --metrics_.queued;
        ++running_;
        ++metrics_.running;
        cv_.notify_all();
        return Admitted;
      }
      cv_.wait_for(l, std::chrono::milliseconds(100));
      if (gone()) {
        queue_.erase(std::find(queue_.begin(), queue_.end(), ticket));
        --metrics_.queued;
        cv_.notify_all();
        return Gone;
      }
    }
  }
  void release() {
    std::lock_guard<std::mutex> l(m_);
    --running_;
    --metrics_.running;
    cv_.notify_all();
  }

private:
  std::mutex m_;
  std::condition_variable cv_;
  int slots_, running_ = 0;
  size_t maxQueue_;
  std::deque<uint64_t> queue_;
  uint64_t next_ = 0;
  Metrics &metrics_;
};

//===----------------------------------------------------------------------===//
// Token stream -> text with stop sequences
//===----------------------------------------------------------------------===//
class TextStream {
public:
  TextStream(const Tokenizer &tok, std::vector<std::string> stops,
             std::set<int32_t> eos)
      : tok_(tok), stops_(std::move(stops)), eos_(std::move(eos)) {
    // Markup tokens the output parser needs even when marked special.
    for (const char *m :
         {"<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>",
          "</arg_key>", "<arg_value>", "</arg_value>"}) {
      int32_t id = tok.tokenId(m);
      if (id >= 0)
        keep_.insert(id);
    }
  }
  /// Returns the text decided by this token; sets done when generation must
  /// end (eos or stop sequence).
  std::string push(int32_t id, bool &done) {
    done = false;
    if (eos_.count(id)) {
      finish = "stop";
      done = true;
      return flush();
    }
    if (!tok_.isSpecial(id) || keep_.count(id))
      bytes_ += tok_.tokenBytes(id);
    size_t n = completeUtf8Prefix(bytes_);
    held_ += sanitizeUtf8(bytes_.substr(0, n));
    bytes_.erase(0, n);
    size_t best = std::string::npos;
    for (const auto &s : stops_) {
      size_t p = held_.find(s);
      if (p < best)
        best = p;
    }
    if (best != std::string::npos) {
      std::string out = held_.substr(0, best);
      held_.clear();
      bytes_.clear();
      finish = "stop";
      done = true;
      return out;
    }
    size_t hold = 0;
    for (const auto &s : stops_)
      for (size_t k = std::min(held_.size(), s.size() - 1); k > hold; --k)
        if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
    std::string out = held_.substr(0, held_.size() - hold);
    held_.erase(0, held_.size() - hold);
    return out;
  }
  /// The rest at the end (an unfinished character becomes U+FFFD).
  std::string flush() {
    std::string out = held_ + sanitizeUtf8(bytes_);
    held_.clear();
    bytes_.clear();
    return out;
  }
  std::string finish = "length";

private:
  const Tokenizer &tok_;
  std::vector<std::string> stops_;
  std::set<int32_t> eos_, keep_;
  std::string bytes_, held_;
};

//===----------------------------------------------------------------------===//
// Request validation
//===----------------------------------------------------------------------===//
struct Common {
  Sampling sampling;
  bool stream = false;
  // A usage chunk (with empty `choices`) ends a stream only when asked for,
  // as OpenAI does: clients read chunk.choices[0] from every chunk.
  bool includeUsage = false;
  std::vector<std::string> stops;
  bool maxTokensGiven = false;
  std::string model; // echoed in replies: the request's, else the served name
  /// One per generated token (eos excluded) when logprobs were asked for;
  /// a stream sends those from `lpSent` on with each chunk.
  std::vector<std::pair<int32_t, TokenLogprobs>> lps;
  size_t lpSent = 0;
};

/// What the access log line of a request reports.
struct Record {
  std::string id;
  std::string endpoint;
  int promptTokens = -1, completionTokens = -1;
  double ttftMs = -1, tokPerS = -1;
  std::string finish;
};

/// Refuses a field the server does not implement instead of ignoring it.
[[noreturn]] void unsupported(const std::string &field,
                              const std::string &why) {
  throw ApiError{400, "'" + field + "' " + why, "invalid_request_error", field,
                 "unsupported_parameter"};
}

/// Every top-level field must be one this endpoint knows: a request that
/// relies on an unknown one (logit_bias, functions, ...) is refused, not
/// answered as if the field were absent.
void checkKnownFields(const ojson &body, const std::set<std::string> &known,
                      const char *endpoint) {
  for (const auto &[k, v] : body.items())
    if (!known.count(k))
      unsupported(k, std::string("is not supported by ") + endpoint +
                         " on this server");
}

/// Fields that are harmless to accept with the values a server without
/// them behaves correctly for; any other value is refused.
void checkHarmlessValues(const ojson &body) {
  auto isNull = [&](const char *k) {
    return !body.contains(k) || body[k].is_null();
  };
  if (!isNull("logit_bias") &&
      !(body["logit_bias"].is_object() && body["logit_bias"].empty()))
    unsupported("logit_bias", "is not supported (only {} is accepted)");
  if (!isNull("user") && !body["user"].is_string())
    badRequest("'user' must be a string", "user");
  if (!isNull("echo") && body["echo"] != false)
    unsupported("echo", "= true is not supported");
  if (!isNull("best_of") && body["best_of"] != 1)
    unsupported("best_of", "other than 1 is not supported");
  if (!isNull("suffix") && body["suffix"] != "")
    unsupported("suffix", "is not supported");
  if (!isNull("modalities") && body["modalities"] != ojson::array({"text"}))
    unsupported("modalities", "other than [\"text\"] is not supported");
  if (!isNull("parallel_tool_calls") &&
      !body["parallel_tool_calls"].is_boolean())
    badRequest("'parallel_tool_calls' must be a boolean",
               "parallel_tool_calls");
  if (!isNull("store") && !body["store"].is_boolean())
    badRequest("'store' must be a boolean", "store");
  if (!isNull("metadata") && !body["metadata"].is_object())
    badRequest("'metadata' must be an object", "metadata");
}

/// The grammar spec response_format asks for ("" for text): json_object,
/// or json_schema within the subset runtime/serve/grammar.h enforces; a
/// keyword outside it is refused naming the keyword and where it is.
std::string responseFormatSpec(const ojson &body) {
  if (!body.contains("response_format") || body["response_format"].is_null())
    return "";
  const ojson &rf = body["response_format"];
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    badRequest("'response_format' must be {\"type\": ...}", "response_format");
  const std::string t = rf["type"].get<std::string>();
  if (t == "text")
    return "";
  if (t == "json_object")
    return grammar::Grammar::jsonObjectSpec();
  if (t != "json_schema")
    throw ApiError{400,
                   "'response_format' type '" + t +
                       "' is not supported (text, json_object, json_schema)",
                   "invalid_request_error", "response_format",
                   "unsupported_value"};
  if (!rf.contains("json_schema") || !rf["json_schema"].is_object() ||
      !rf["json_schema"].contains("schema") ||
      !rf["json_schema"]["schema"].is_object())
    badRequest("'response_format' json_schema must be {\"name\": ..., "
               "\"schema\": {...}}",
               "response_format");
  try {
    return grammar::Grammar::jsonSchemaSpec(
        rf["json_schema"]["schema"], "response_format.json_schema.schema");
  } catch (const grammar::Unsupported &e) {
    throw ApiError{
        400, std::string("'response_format' cannot be enforced: ") + e.what(),
        "invalid_request_error", "response_format", "unsupported_value"};
  }
}

double getNumber(const ojson &body, const char *key, double lo, double hi) {
  const ojson &v = body[key];
  if (!v.is_number())
    badRequest(std::string("'") + key + "' must be a number", key);
  double d = v.get<double>();
  if (!(d >= lo && d <= hi) || std::isnan(d)) {
    std::ostringstream o;
    o << "'" << key << "' must be between " << lo << " and " << hi << ", got "
      << d;
    badRequest(o.str(), key);
  }
  return d;
}

bool servesModel(const ServerOptions &opt, const std::string &name) {
  return name == opt.modelName ||
         std::find(opt.modelAliases.begin(), opt.modelAliases.end(), name) !=
             opt.modelAliases.end();
}

std::string servedNames(const ServerOptions &opt) {
  std::string s = "'" + opt.modelName + "'";
  for (const auto &a : opt.modelAliases)
    s += ", '" + a + "'";
  return s;
}

Common parseCommon(const ojson &body, const ServerOptions &opt) {
  Common c;
  c.sampling.temperature = opt.defaultTemperature;
  c.sampling.topP = opt.defaultTopP;
  c.sampling.topK = opt.defaultTopK;
  c.sampling.minP = opt.defaultMinP;
  c.sampling.repetitionPenalty = opt.defaultRepetitionPenalty;
  c.sampling.maxTokens = opt.defaultMaxTokens;
  if (body.contains("model") && !body["model"].is_string() &&
      !body["model"].is_null())
    badRequest("'model' must be a string", "model");
  c.model = opt.modelName;
  if (body.contains("model") && body["model"].is_string() &&
      !body["model"].get<std::string>().empty()) {
    c.model = body["model"].get<std::string>();
    if (!servesModel(opt, c.model))
      throw ApiError{404,
                     "the model '" + c.model +
                         "' does not exist: this server serves " +
                         servedNames(opt) + " (GET /v1/models)",
                     "invalid_request_error", "model", "model_not_found"};
  }
  for (const char *k : {"max_tokens", "max_completion_tokens"}) {
    if (!body.contains(k) || body[k].is_null())
      continue;
    std::optional<int64_t> n = jsonIntIn(body[k], 1, kMaxContextTokens);
    if (!n)
      badRequest(std::string("'") + k + "' must be a positive integer", k);
    c.sampling.maxTokens = int(*n);
    c.maxTokensGiven = true;
  }
  if (body.contains("temperature") && !body["temperature"].is_null())
    c.sampling.temperature = float(getNumber(body, "temperature", 0, 2));
  if (body.contains("top_p") && !body["top_p"].is_null()) {
    c.sampling.topP = float(getNumber(body, "top_p", 0, 1));
    if (c.sampling.topP <= 0)
      badRequest("'top_p' must be greater than 0", "top_p");
  }
  auto given = [&](const char *k) {
    return body.contains(k) && !body[k].is_null();
  };
  if (given("presence_penalty"))
    c.sampling.presencePenalty =
        float(getNumber(body, "presence_penalty", -2, 2));
  if (given("frequency_penalty"))
    c.sampling.frequencyPenalty =
        float(getNumber(body, "frequency_penalty", -2, 2));
  if (given("repetition_penalty")) {
    c.sampling.repetitionPenalty =
        float(getNumber(body, "repetition_penalty", 0, 10));
    if (c.sampling.repetitionPenalty <= 0)
      badRequest("'repetition_penalty' must be greater than 0",
                 "repetition_penalty");
  }
  if (given("min_p"))
    c.sampling.minP = float(getNumber(body, "min_p", 0, 1));
  if (given("top_k")) {
    // -1 and 0 both mean "off" (vLLM's -1, transformers' 0). Through
    // jsonIntIn: get<int64_t> wrapped 2^64-1 to -1, "off".
    std::optional<int64_t> k = jsonIntIn(body["top_k"], -1, 1 << 30);
    if (!k)
      badRequest("'top_k' must be an integer >= -1 (-1 or 0: off)", "top_k");
    c.sampling.topK = int(std::max<int64_t>(0, *k));
  }
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer())
      badRequest("'seed' must be an integer", "seed");
    c.sampling.seed = uint64_t(body["seed"].get<int64_t>());
    c.sampling.hasSeed = true;
  }
  if (body.contains("n") && !body["n"].is_null() &&
      !jsonIntIn(body["n"], 1, 1))
    badRequest("only 'n' = 1 is supported", "n");
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean())
      badRequest("'stream' must be a boolean", "stream");
    c.stream = body["stream"].get<bool>();
  }
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const ojson &so = body["stream_options"];
    if (!so.is_object())
      badRequest("'stream_options' must be an object", "stream_options");
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean())
        badRequest("'stream_options.include_usage' must be a boolean",
                   "stream_options");
      c.includeUsage = so["include_usage"].get<bool>();
    }
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const ojson &s = body["stop"];
    if (s.is_string()) {
      c.stops.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 16) {
      for (const auto &x : s) {
        if (!x.is_string())
          badRequest("'stop' must be a string or a list of strings", "stop");
        c.stops.push_back(x.get<std::string>());
      }
    } else {
      badRequest("'stop' must be a string or a list of up to 16 strings",
                 "stop");
    }
    for (const auto &x : c.stops)
      if (x.empty())
        badRequest("'stop' strings must not be empty", "stop");
  }
  if (body.contains("ignore_eos") && !body["ignore_eos"].is_null()) {
    if (!body["ignore_eos"].is_boolean())
      badRequest("'ignore_eos' must be a boolean", "ignore_eos");
    c.sampling.ignoreEos = body["ignore_eos"].get<bool>();
  }
  return c;
}

void validateMessages(const ojson &body) {
  if (!body.contains("messages"))
    badRequest("'messages' is required", "messages");
  const ojson &msgs = body["messages"];
  if (!msgs.is_array() || msgs.empty())
    badRequest("'messages' must be a non-empty array", "messages");
  static const std::set<std::string> roles{"system", "developer", "user",
                                           "assistant", "tool"};
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ojson &m = msgs[i];
    std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object())
      badRequest(p + " must be an object", p);
    if (!m.contains("role") || !m["role"].is_string() ||
        !roles.count(m["role"].get<std::string>()))
      badRequest(p + ".role must be one of system, developer, user, "
                     "assistant, tool",
                 p + ".role");
    if (m.contains("content")) {
      const ojson &c = m["content"];
      if (!c.is_string() && !c.is_array() && !c.is_null())
        badRequest(p + ".content must be a string, an array of parts or "
                       "null",
                   p + ".content");
      if (c.is_array())
        for (const auto &part : c)
          if (!part.is_object() || !part.contains("type") ||
              !part["type"].is_string() ||
              (part["type"] == "text" &&
               (!part.contains("text") || !part["text"].is_string())))
            badRequest(p + ".content parts must be {\"type\": \"text\", "
                           "\"text\": ...}",
                       p + ".content");
    } else if (m["role"] != "assistant") {
      badRequest(p + ".content is required", p + ".content");
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_array() &&
        !m["tool_calls"].is_null())
      badRequest(p + ".tool_calls must be an array", p + ".tool_calls");
  }
}

/// The request's tools (null when calls are not parsed) and, for
/// tool_choice "required" or a named function, the grammar spec of the
/// call(s) the output must be (`forced`).
ojson validateTools(const ojson &body, bool &parseCalls, std::string &forced) {
  parseCalls = false;
  forced.clear();
  const bool hasTools = body.contains("tools") && !body["tools"].is_null();
  const ojson tools = hasTools ? body["tools"] : ojson::array();
  if (!tools.is_array())
    badRequest("'tools' must be an array", "tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson &t = tools[i];
    std::string p = "tools[" + std::to_string(i) + "]";
    // Compared as JSON: a "type" that is not a string is a bad request,
    // not an exception from reading it as one.
    if (!t.is_object() || !t.contains("type") || t["type"] != "function" ||
        !t.contains("function") || !t["function"].is_object() ||
        !t["function"].contains("name") || !t["function"]["name"].is_string())
      badRequest(p + " must be {\"type\": \"function\", \"function\": "
                     "{\"name\": ...}}",
                 p);
    if (t["function"].contains("parameters") &&
        !t["function"]["parameters"].is_object() &&
        !t["function"]["parameters"].is_null())
      badRequest(p + ".function.parameters must be an object", p);
  }
  std::string choice = "auto";
  int named = -1; // index of the named function
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const ojson &tc = body["tool_choice"];
    if (tc.is_string()) {
      choice = tc.get<std::string>();
      if (choice != "auto" && choice != "none" && choice != "required")
        badRequest("'tool_choice' must be auto, none, required or a "
                   "function",
                   "tool_choice");
    } else if (!tc.is_object() || !tc.contains("function") ||
               !tc["function"].is_object() ||
               !tc["function"].contains("name") ||
               !tc["function"]["name"].is_string()) {
      badRequest("'tool_choice' must be auto, none, required or "
                 "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                 "tool_choice");
    } else {
      choice = "named";
      const std::string name = tc["function"]["name"].get<std::string>();
      for (size_t i = 0; i < tools.size() && named < 0; ++i)
        if (tools[i]["function"]["name"] == name)
          named = int(i);
      if (named < 0)
        badRequest("'tool_choice' names the function '" + name +
                       "', which is not among 'tools'",
                   "tool_choice");
    }
  }
  if (choice == "none" || tools.empty()) {
    if (choice == "required")
      badRequest("'tool_choice' \"required\" needs 'tools'", "tool_choice");
    return ojson();
  }
  parseCalls = true;
  if (choice == "auto")
    return tools;
  // Forced: decoding is constrained to GLM tool calls of these functions.
  ojson fns = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i)
    if (named < 0 || int(i) == named)
      fns.push_back(tools[i]["function"]);
  const bool parallel = !(body.contains("parallel_tool_calls") &&
                          body["parallel_tool_calls"] == false);
  try {
    forced = grammar::Grammar::toolCallSpec(fns, parallel && named < 0);
  } catch (const grammar::Unsupported &e) {
    std::string what = e.what();
    if (named >= 0 && what.rfind("tools[0]", 0) == 0)
      what = "tools[" + std::to_string(named) + "]" + what.substr(8);
    throw ApiError{400, "'tool_choice' cannot be enforced: " + what,
                   "invalid_request_error", "tool_choice", "unsupported_value"};
  }
  return tools;
}

//===----------------------------------------------------------------------===//
// The API
//===----------------------------------------------------------------------===//
/// vLLM's default max_logprobs (OpenAI allows 20 on chat, 5 on completions).
constexpr int kMaxTopLogprobs = 20;

class Api {
public:
  Api(Engine &e, const Tokenizer &t, const ChatTemplate &c,
      const ServerOptions &o)
      : engine_(e), tok_(t), chat_(c), opt_(o),
        sched_(e.maxConcurrency(), o.maxQueue, metrics_) {
    for (int64_t id : e.eosIds())
      eos_.insert(int32_t(id));
  }

  void handle(const HttpRequest &req, HttpResponder &resp) {
    Record rec;
    rec.id = "req-" + randomHex(16);
    rec.endpoint = req.path;
    int status = 200;
    try {
      status = route(req, resp, rec);
    } catch (const ApiError &e) {
      // Counted before the reply goes out, so a client that reads /metrics
      // right after its error response sees it.
      metrics_.request(rec.endpoint, e.status);
      if (!resp.started()) {
        std::vector<std::pair<std::string, std::string>> extra;
        if (e.status == 401)
          extra.emplace_back("WWW-Authenticate", "Bearer");
        resp.send(e.status, "application/json", errorBody(e), extra);
      }
      logAccess(req, rec, e.status);
      return;
    } catch (const EngineUnavailable &e) {
      metrics_.request(rec.endpoint, 503);
      if (!resp.started())
        resp.send(503, "application/json",
                  errorBody({503, e.what(), "service_unavailable", "", ""}));
      logAccess(req, rec, 503);
      return;
    } catch (const std::exception &e) {
      metrics_.request(rec.endpoint, 500);
      if (!resp.started())
        resp.send(500, "application/json",
                  errorBody({500, e.what(), "server_error", "", ""}));
      logAccess(req, rec, 500);
      return;
    }
    metrics_.request(rec.endpoint, status);
    logAccess(req, rec, status);
  }

private:
  /// One line per request, written at once (lines of concurrent requests
  /// do not interleave). "-" where a value does not apply.
  void logAccess(const HttpRequest &req, const Record &r, int status) {
    if (!opt_.accessLog)
      return;
    auto num = [](double v, int prec) {
      if (v < 0)
        return std::string("-");
      std::ostringstream o;
      o.setf(std::ios::fixed);
      o.precision(prec);
      o << v;
      return o.str();
    };
    std::ostringstream o;
    o << "glm serve: " << r.id << " " << req.method << " " << r.endpoint
      << " status=" << status << " prompt_tokens=" << num(r.promptTokens, 0)
      << " completion_tokens=" << num(r.completionTokens, 0)
      << " ttft_ms=" << num(r.ttftMs, 1) << " tok_s=" << num(r.tokPerS, 1)
      << " finish=" << (r.finish.empty() ? "-" : r.finish) << "\n";
    std::string line = o.str();
    std::lock_guard<std::mutex> l(logMutex_);
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
  }

  /// Constant-time in the key's bytes: no timing signal about a prefix.
  static bool sameKey(const std::string &a, const std::string &b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    for (size_t i = 0; i < a.size(); ++i)
      diff |= (unsigned char)(a[i] ^ (i < b.size() ? b[i] : 0));
    return diff == 0;
  }

  bool authorized(const HttpRequest &req) const {
    std::string h = req.header("authorization");
    const std::string scheme = "bearer ";
    if (h.size() <= scheme.size())
      return false;
    for (size_t i = 0; i < scheme.size(); ++i)
      if (std::tolower((unsigned char)h[i]) != scheme[i])
        return false;
    std::string key = h.substr(scheme.size());
    key.erase(0, key.find_first_not_of(' '));
    bool ok = false;
    for (const auto &k : opt_.apiKeys)
      ok |= sameKey(key, k);
    return ok;
  }

  /// The CORS origin to allow for this request ("" = none): "*" when the
  /// list has it, else the request's Origin when listed.
  std::string corsOrigin(const HttpRequest &req) const {
    std::string origin = req.header("origin");
    if (opt_.allowedOrigins.empty() || origin.empty())
      return "";
    for (const auto &o : opt_.allowedOrigins) {
      if (o == "*")
        return "*";
      if (o == origin)
        return origin;
    }
    return "";
  }

  int route(const HttpRequest &req, HttpResponder &resp, Record &rec) {
    std::string &endpoint = rec.endpoint;
    const std::string &p = req.path;
    // CORS (Fetch standard): allowed origins get Allow-Origin on every
    // reply; a preflight (OPTIONS with Access-Control-Request-Method) is
    // answered here, before authentication: browsers send no credentials
    // with it.
    std::string allow = corsOrigin(req);
    if (!allow.empty()) {
      resp.headers.emplace_back("Access-Control-Allow-Origin", allow);
      if (allow != "*")
        resp.headers.emplace_back("Vary", "Origin");
    }
    if (req.method == "OPTIONS" && !opt_.allowedOrigins.empty() &&
        !req.header("access-control-request-method").empty()) {
      endpoint = "preflight";
      if (allow.empty())
        throw ApiError{403,
                       "origin '" + req.header("origin") +
                           "' is not allowed (--allowed-origins)",
                       "invalid_request_error", "", "origin_not_allowed"};
      std::string headers = req.header("access-control-request-headers");
      resp.headers.emplace_back("Access-Control-Allow-Methods",
                                "GET, POST, OPTIONS");
      resp.headers.emplace_back("Access-Control-Allow-Headers",
                                headers.empty() ? "Authorization, Content-Type"
                                                : headers);
      resp.headers.emplace_back("Access-Control-Max-Age", "600");
      resp.send(204, "", "");
      return 204;
    }
    if (!opt_.apiKeys.empty() && p.rfind("/v1", 0) == 0 && !authorized(req))
      throw ApiError{401,
                     "missing or wrong API key: send the header "
                     "'Authorization: Bearer KEY' with a key given to the "
                     "server (--api-key or GLMC_API_KEY)",
                     "invalid_request_error", "", "invalid_api_key"};
    auto need = [&](const char *method) {
      if (req.method != method)
        throw ApiError{405, "use " + std::string(method) + " for " + p,
                       "invalid_request_error", "", "method_not_allowed"};
    };
    if (p == "/health") {
      need("GET");
      resp.send(200, "application/json", R"({"status": "ok"})");
      return 200;
    }
    if (p == "/metrics") {
      need("GET");
      resp.send(200, "text/plain; version=0.0.4",
                metrics_.text() + engine_.metricsText());
      return 200;
    }
    if (p == "/v1/models") {
      need("GET");
      ojson data = ojson::array();
      data.push_back(modelJson(opt_.modelName));
      for (const auto &a : opt_.modelAliases)
        data.push_back(modelJson(a));
      ojson m = {{"object", "list"}, {"data", data}};
      resp.send(200, "application/json", dumpJson(m));
      return 200;
    }
    if (p.rfind("/v1/models/", 0) == 0) {
      endpoint = "/v1/models/{id}"; // one metrics label, whatever the id
      need("GET");
      const std::string id = p.substr(std::string("/v1/models/").size());
      if (!servesModel(opt_, id))
        throw ApiError{404,
                       "the model '" + id +
                           "' does not exist: this server serves " +
                           servedNames(opt_),
                       "invalid_request_error", "model", "model_not_found"};
      resp.send(200, "application/json", dumpJson(modelJson(id)));
      return 200;
    }
    if (p == "/v1/chat/completions" || p == "/v1/completions") {
      need("POST");
      ojson body;
      try {
        body = parseJsonBounded(req.body, "request body");
      } catch (const Error &e) { // nested too deeply
        badRequest(e.what(), "");
      } catch (const std::exception &e) {
        badRequest(std::string("request body is not valid JSON: ") + e.what(),
                   "");
      }
      if (!body.is_object())
        badRequest("request body must be a JSON object", "");
      return p == "/v1/completions" ? completions(body, resp, rec)
                                    : chatCompletions(body, resp, rec);
    }
    endpoint = "other";
    throw ApiError{404, "no such endpoint: " + p, "invalid_request_error", "",
                   "not_found"};
  }

  ojson modelJson(const std::string &id) const {
    return {{"id", id},
            {"object", "model"},
            {"created", unixNow()},
            {"owned_by", "glmc"},
            {"root", opt_.modelName},
            {"max_model_len", engine_.maxContext()}};
  }

  struct Outcome {
    std::string finish;
    int completionTokens = 0;
    bool cancelled = false;
    double ttftMs = -1, tokPerS = -1;
  };

  static void record(Record &rec, const Outcome &o, const std::string &finish) {
    rec.completionTokens = o.completionTokens;
    rec.ttftMs = o.ttftMs;
    rec.tokPerS = o.tokPerS;
    rec.finish = finish;
  }

  // Runs the engine with admission, cancellation and metrics. emit() gets
  // decided text and returns false when the client is gone.
  Outcome generate(const std::vector<int32_t> &prompt, Common &c,
                   HttpResponder &resp,
                   const std::function<bool(const std::string &)> &emit) {
    int room = engine_.maxContext() - int(prompt.size());
    if (room <= 0)
      badRequest("the prompt is " + std::to_string(prompt.size()) +
                     " tokens; this model's context is " +
                     std::to_string(engine_.maxContext()) + " tokens",
                 "messages", "context_length_exceeded");
    if (c.maxTokensGiven && c.sampling.maxTokens > room)
      badRequest("prompt (" + std::to_string(prompt.size()) +
                     " tokens) + max_tokens (" +
                     std::to_string(c.sampling.maxTokens) +
                     ") exceeds the context of " +
                     std::to_string(engine_.maxContext()) + " tokens",
                 "max_tokens", "context_length_exceeded");
    c.sampling.maxTokens = std::min(c.sampling.maxTokens, room);
    auto admitted = sched_.acquire([&] { return resp.clientGone(); });
    if (admitted == Scheduler::Full) {
      std::lock_guard<std::mutex> l(metrics_.m);
      ++metrics_.rejected;
      throw ApiError{429, "the server is busy (queue full); retry later",
                     "rate_limit_error", "", "queue_full"};
    }
    Outcome out;
    if (admitted == Scheduler::Gone) {
      out.cancelled = true;
      std::lock_guard<std::mutex> l(metrics_.m);
      ++metrics_.cancelled;
      return out;
    }
    struct Release {
      Scheduler &s;
      ~Release() { s.release(); }
    } release{sched_};
    // ignore_eos: an eos id is text like any other token.
    const std::set<int32_t> &eos = c.sampling.ignoreEos ? noEos_ : eos_;
    TextStream ts(tok_, c.stops, eos);
    auto start = Clock::now();
    Clock::time_point first, last;
    bool stopped = false;
    engine_.generate(
        prompt, c.sampling, [&](int32_t id, const TokenLogprobs *lp) {
          const Clock::time_point now = Clock::now();
          if (out.completionTokens == 0) {
            first = now;
            double ttft = std::chrono::duration<double>(first - start).count();
            metrics_.ttft(ttft);
            out.ttftMs = ttft * 1e3;
          } else {
            metrics_.itl(std::chrono::duration<double>(now - last).count());
          }
          last = now;
          ++out.completionTokens;
          if (lp && c.sampling.logprobs >= 0 && !eos.count(id))
            c.lps.emplace_back(id, *lp);
          bool done;
          std::string text = ts.push(id, done);
          if (!emit(text) || resp.clientGone()) {
            out.cancelled = true;
            return false;
          }
          if (done) {
            stopped = true;
            return false;
          }
          return out.completionTokens < c.sampling.maxTokens;
        });
    if (!out.cancelled && !stopped)
      emit(ts.flush());
    out.finish = ts.finish;
    double decode =
        out.completionTokens > 1
            ? std::chrono::duration<double>(Clock::now() - first).count()
            : 0;
    std::lock_guard<std::mutex> l(metrics_.m);
    metrics_.promptTokens += prompt.size();
    metrics_.generationTokens += uint64_t(out.completionTokens);
    if (out.cancelled)
      ++metrics_.cancelled;
    if (decode > 0) {
      metrics_.decodeSeconds += decode;
      metrics_.lastDecodeTps = (out.completionTokens - 1) / decode;
      out.tokPerS = metrics_.lastDecodeTps;
    }
    return out;
  }

  static std::string sse(const ojson &j) {
    return "data: " + dumpJson(j) + "\n\n";
  }

  static ojson toolCallJson(const ToolCall &tc, int index, bool withIndex) {
    ojson j = {{"id", "call_" + randomHex(24)},
               {"type", "function"},
               {"function",
                {{"name", tc.name}, {"arguments", dumpJson(tc.arguments)}}}};
    if (withIndex)
      j["index"] = index;
    return j;
  }

  std::string tokenText(int32_t id) const {
    return sanitizeUtf8(tok_.tokenBytes(id));
  }

  ojson tokenBytesJson(int32_t id) const {
    ojson b = ojson::array();
    for (unsigned char ch : tok_.tokenBytes(id))
      b.push_back(int(ch));
    return b;
  }

  /// OpenAI's chat logprobs entries of tokens [from, to).
  ojson chatLogprobs(const Common &c, size_t from, size_t to) const {
    ojson content = ojson::array();
    for (size_t i = from; i < to; ++i) {
      const auto &[id, lp] = c.lps[i];
      ojson top = ojson::array();
      for (const auto &[t, l] : lp.top)
        top.push_back({{"token", tokenText(t)},
                       {"logprob", l},
                       {"bytes", tokenBytesJson(t)}});
      content.push_back({{"token", tokenText(id)},
                         {"logprob", lp.logprob},
                         {"bytes", tokenBytesJson(id)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }

  /// OpenAI's (legacy) completions logprobs of tokens [from, to); offsets
  /// count bytes of the completion text from `offset` on.
  ojson completionLogprobs(const Common &c, size_t from, size_t to,
                           size_t &offset) const {
    ojson tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(),
          offsets = ojson::array();
    for (size_t i = from; i < to; ++i) {
      const auto &[id, lp] = c.lps[i];
      std::string text = tokenText(id);
      tokens.push_back(text);
      lps.push_back(lp.logprob);
      ojson top = ojson::object();
      for (const auto &[t, l] : lp.top)
        top[tokenText(t)] = l;
      tops.push_back(top);
      offsets.push_back(offset);
      offset += text.size();
    }
    return {{"tokens", tokens},
            {"token_logprobs", lps},
            {"top_logprobs", tops},
            {"text_offset", offsets}};
  }

  int chatCompletions(const ojson &body, HttpResponder &resp, Record &rec) {
    static const std::set<std::string> kFields = {"model",
                                                  "messages",
                                                  "max_tokens",
                                                  "max_completion_tokens",
                                                  "temperature",
                                                  "top_p",
                                                  "top_k",
                                                  "min_p",
                                                  "repetition_penalty",
                                                  "presence_penalty",
                                                  "frequency_penalty",
                                                  "seed",
                                                  "n",
                                                  "stream",
                                                  "stream_options",
                                                  "stop",
                                                  "tools",
                                                  "tool_choice",
                                                  "parallel_tool_calls",
                                                  "logprobs",
                                                  "top_logprobs",
                                                  "ignore_eos",
                                                  "user",
                                                  "chat_template_kwargs",
                                                  "enable_thinking",
                                                  "thinking",
                                                  "reasoning_effort",
                                                  "response_format",
                                                  "metadata",
                                                  "store",
                                                  "logit_bias",
                                                  "modalities"};
    checkKnownFields(body, kFields, "/v1/chat/completions");
    checkHarmlessValues(body);
    validateMessages(body);
    Common c = parseCommon(body, opt_);
    if (body.contains("logprobs") && !body["logprobs"].is_null()) {
      if (!body["logprobs"].is_boolean())
        badRequest("'logprobs' must be a boolean", "logprobs");
      if (body["logprobs"].get<bool>())
        c.sampling.logprobs = 0;
    }
    if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
      std::optional<int64_t> t =
          jsonIntIn(body["top_logprobs"], 0, kMaxTopLogprobs);
      if (!t)
        badRequest("'top_logprobs' must be an integer from 0 to " +
                       std::to_string(kMaxTopLogprobs),
                   "top_logprobs");
      if (c.sampling.logprobs < 0)
        badRequest("'top_logprobs' needs 'logprobs': true", "top_logprobs");
      c.sampling.logprobs = int(*t);
    }
    bool parseCalls;
    std::string forced;
    ojson tools = validateTools(body, parseCalls, forced);
    c.sampling.grammar = responseFormatSpec(body);
    if (!forced.empty()) {
      if (!c.sampling.grammar.empty())
        badRequest("'response_format' json and a forced 'tool_choice' cannot "
                   "be combined",
                   "response_format");
      if (!opt_.toolCallParser)
        throw ApiError{400,
                       "'tool_choice' that forces a call needs the tool-call "
                       "parser (serve --tool-call-parser glm)",
                       "invalid_request_error", "tool_choice",
                       "unsupported_value"};
      c.sampling.grammar = forced;
    }
    if (c.sampling.ignoreEos && !c.sampling.grammar.empty())
      badRequest("'ignore_eos' and a constrained reply ('response_format' "
                 "json, a forced 'tool_choice') cannot be combined: the "
                 "grammar ends the reply with an eos id",
                 "ignore_eos");
    ChatTemplate::Request r;
    r.messages = body["messages"];
    r.tools = tools;
    if (body.contains("chat_template_kwargs")) {
      const ojson &kw = body["chat_template_kwargs"];
      if (!kw.is_object())
        badRequest("'chat_template_kwargs' must be an object",
                   "chat_template_kwargs");
      r.extra = kw;
    }
    for (const char *k : {"enable_thinking", "thinking"}) {
      const ojson *v = body.contains(k)      ? &body[k]
                       : r.extra.contains(k) ? &r.extra[k]
                                             : nullptr;
      if (!v)
        continue;
      if (!v->is_boolean())
        badRequest(std::string("'") + k + "' must be a boolean", k);
      r.enableThinking = v->get<bool>();
      r.extra.erase(k);
    }
    if (body.contains("reasoning_effort") &&
        !body["reasoning_effort"].is_null()) {
      if (!body["reasoning_effort"].is_string())
        badRequest("'reasoning_effort' must be a string", "reasoning_effort");
      r.extra["reasoning_effort"] = body["reasoning_effort"];
    }
    // A constrained reply is the grammar's text from its first token: no
    // reasoning first (templates then close the think block themselves).
    const bool constrained = !c.sampling.grammar.empty();
    if (constrained && !r.enableThinking)
      r.enableThinking = false;
    std::string prompt;
    try {
      prompt = chat_.render(r);
    } catch (const Error &e) {
      badRequest(std::string("the chat template rejected the request: ") +
                     e.what(),
                 "messages");
    }
    std::vector<int32_t> ids = tok_.encode(prompt);
    rec.promptTokens = int(ids.size());
    size_t k = prompt.find_last_not_of(" \t\r\n");
    bool thinking = !constrained && k != std::string::npos && k + 1 >= 7 &&
                    prompt.compare(k + 1 - 7, 7, "<think>") == 0;
    OutputParser parser(tools, thinking,
                        {opt_.reasoningParser, opt_.toolCallParser});

    std::string id = "chatcmpl-" + randomHex(24);
    rec.id = id;
    int64_t created = unixNow();
    const std::string &model = c.model;
    // A chunk carries the logprobs of the tokens generated since the last
    // chunk that carried some (text and tokens are not aligned one to one:
    // stop-sequence and markup hold-back, multi-token characters).
    auto chunk = [&](const ojson &delta, const ojson &finish) {
      ojson lp;
      if (c.sampling.logprobs >= 0 && c.lpSent < c.lps.size() &&
          !delta.contains("role")) {
        lp = chatLogprobs(c, c.lpSent, c.lps.size());
        c.lpSent = c.lps.size();
      }
      return ojson{{"id", id},
                   {"object", "chat.completion.chunk"},
                   {"created", created},
                   {"model", model},
                   {"choices",
                    {{{"index", 0},
                      {"delta", delta},
                      {"logprobs", lp},
                      {"finish_reason", finish}}}}};
    };
    // The stream starts with the first text, so that errors found before
    // generation (context length, full queue) are still plain 4xx replies.
    auto startStream = [&]() {
      if (resp.started())
        return;
      resp.beginChunked(200, "text/event-stream");
      resp.writeChunk(
          sse(chunk({{"role", "assistant"}, {"content", ""}}, nullptr)));
    };
    int toolIndex = 0;
    ChatDelta all;
    auto streamDelta = [&](const ChatDelta &d) {
      bool ok = true;
      startStream();
      if (!d.reasoning.empty())
        ok &= resp.writeChunk(
            sse(chunk({{"reasoning_content", d.reasoning}}, nullptr)));
      if (!d.content.empty())
        ok &= resp.writeChunk(sse(chunk({{"content", d.content}}, nullptr)));
      for (const auto &tc : d.toolCalls)
        ok &= resp.writeChunk(sse(chunk(
            {{"tool_calls", {toolCallJson(tc, toolIndex++, true)}}}, nullptr)));
      return ok;
    };
    Outcome o;
    try {
      o = generate(ids, c, resp, [&](const std::string &text) {
        ChatDelta d = parser.feed(text);
        all.append(d);
        return c.stream ? streamDelta(d) : true;
      });
    } catch (const std::exception &e) {
      if (!c.stream || !resp.started())
        throw;
      resp.writeChunk(sse(ojson{{"error",
                                 {{"message", e.what()},
                                  {"type", "server_error"},
                                  {"param", nullptr},
                                  {"code", nullptr}}}}));
      resp.writeChunk("data: [DONE]\n\n");
      resp.endChunked();
      return 500;
    }
    record(rec, o, o.cancelled ? "cancelled" : o.finish);
    if (o.cancelled)
      return 499; // client closed the request (nginx's convention)
    ChatDelta tail = parser.finish();
    all.append(tail);
    std::string finish = o.finish;
    if (!all.toolCalls.empty() && finish == "stop")
      finish = "tool_calls";
    rec.finish = finish;
    ojson usage = {{"prompt_tokens", ids.size()},
                   {"completion_tokens", o.completionTokens},
                   {"total_tokens", ids.size() + size_t(o.completionTokens)}};
    if (c.stream) {
      streamDelta(tail);
      startStream();
      resp.writeChunk(sse(chunk(ojson::object(), finish)));
      if (c.includeUsage) {
        ojson u = chunk(ojson::object(), nullptr);
        u["choices"] = ojson::array();
        u["usage"] = usage;
        resp.writeChunk(sse(u));
      }
      resp.writeChunk("data: [DONE]\n\n");
      resp.endChunked();
      return 200;
    }
    ojson msg = {{"role", "assistant"},
                 {"content", all.content.empty() && !all.toolCalls.empty()
                                 ? ojson()
                                 : ojson(all.content)}};
    if (!all.reasoning.empty())
      msg["reasoning_content"] = all.reasoning;
    if (!all.toolCalls.empty()) {
      msg["tool_calls"] = ojson::array();
      for (size_t i = 0; i < all.toolCalls.size(); ++i)
        msg["tool_calls"].push_back(
            toolCallJson(all.toolCalls[i], int(i), false));
    }
    ojson res = {{"id", id},
                 {"object", "chat.completion"},
                 {"created", created},
                 {"model", model},
                 {"choices",
                  {{{"index", 0},
                    {"message", msg},
                    {"logprobs", c.sampling.logprobs >= 0
                                     ? chatLogprobs(c, 0, c.lps.size())
                                     : ojson()},
                    {"finish_reason", finish}}}},
                 {"usage", usage}};
    resp.send(200, "application/json", dumpJson(res));
    return 200;
  }

  int completions(const ojson &body, HttpResponder &resp, Record &rec) {
    static const std::set<std::string> kFields = {"model",
                                                  "prompt",
                                                  "max_tokens",
                                                  "max_completion_tokens",
                                                  "temperature",
                                                  "top_p",
                                                  "top_k",
                                                  "min_p",
                                                  "repetition_penalty",
                                                  "presence_penalty",
                                                  "frequency_penalty",
                                                  "seed",
                                                  "n",
                                                  "stream",
                                                  "stream_options",
                                                  "stop",
                                                  "logprobs",
                                                  "ignore_eos",
                                                  "user",
                                                  "echo",
                                                  "best_of",
                                                  "suffix",
                                                  "logit_bias",
                                                  "metadata",
                                                  "store"};
    checkKnownFields(body, kFields, "/v1/completions");
    checkHarmlessValues(body);
    Common c = parseCommon(body, opt_);
    if (body.contains("logprobs") && !body["logprobs"].is_null()) {
      std::optional<int64_t> l =
          jsonIntIn(body["logprobs"], 0, kMaxTopLogprobs);
      if (!l)
        badRequest("'logprobs' must be an integer from 0 to " +
                       std::to_string(kMaxTopLogprobs),
                   "logprobs");
      c.sampling.logprobs = int(*l);
    }
    if (!body.contains("prompt"))
      badRequest("'prompt' is required", "prompt");
    const ojson &p = body["prompt"];
    std::vector<int32_t> ids;
    if (p.is_string()) {
      ids = tok_.encode(p.get<std::string>());
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      ids = tok_.encode(p[0].get<std::string>());
    } else if (p.is_array() && !p.empty()) {
      for (const auto &x : p) {
        std::optional<int64_t> id = jsonIntIn(x, 0, tok_.vocabSize() - 1);
        if (!id)
          badRequest("'prompt' must be a string or an array of token ids "
                     "below the vocabulary size",
                     "prompt");
        ids.push_back(int32_t(*id));
      }
    } else {
      badRequest("'prompt' must be a string or an array of token ids",
                 "prompt");
    }
    if (ids.empty())
      badRequest("'prompt' must not be empty", "prompt");
    rec.promptTokens = int(ids.size());
    std::string id = "cmpl-" + randomHex(24);
    rec.id = id;
    int64_t created = unixNow();
    const std::string &model = c.model;
    size_t textOffset = 0;
    // As in chat: a chunk carries the tokens generated since the last one.
    auto chunk = [&](const std::string &text, const ojson &finish) {
      ojson lp;
      if (c.sampling.logprobs >= 0) {
        lp = completionLogprobs(c, c.lpSent, c.lps.size(), textOffset);
        c.lpSent = c.lps.size();
      }
      return ojson{{"id", id},
                   {"object", "text_completion"},
                   {"created", created},
                   {"model", model},
                   {"choices",
                    {{{"index", 0},
                      {"text", text},
                      {"logprobs", lp},
                      {"finish_reason", finish}}}}};
    };
    auto startStream = [&]() {
      if (!resp.started())
        resp.beginChunked(200, "text/event-stream");
    };
    std::string text;
    Outcome o = generate(ids, c, resp, [&](const std::string &t) {
      text += t;
      if (!c.stream || t.empty())
        return true;
      startStream();
      return resp.writeChunk(sse(chunk(t, nullptr)));
    });
    record(rec, o, o.cancelled ? "cancelled" : o.finish);
    if (o.cancelled)
      return 499;
    ojson usage = {{"prompt_tokens", ids.size()},
                   {"completion_tokens", o.completionTokens},
                   {"total_tokens", ids.size() + size_t(o.completionTokens)}};
    if (c.stream) {
      startStream();
      resp.writeChunk(sse(chunk("", o.finish)));
      if (c.includeUsage) {
        ojson u = chunk("", nullptr);
        u["choices"] = ojson::array(); // (no logprobs are left by now)
        u["usage"] = usage;
        resp.writeChunk(sse(u));
      }
      resp.writeChunk("data: [DONE]\n\n");
      resp.endChunked();
      return 200;
    }
    ojson res = chunk(text, o.finish);
    res["usage"] = usage;
    resp.send(200, "application/json", dumpJson(res));
    return 200;
  }

  Engine &engine_;
  const Tokenizer &tok_;
  const ChatTemplate &chat_;
  const ServerOptions &opt_;
  Metrics metrics_;
  Scheduler sched_;
  std::mutex logMutex_;
  std::set<int32_t> eos_, noEos_;
};

std::atomic<bool> gSignalStop{false};
void onSignal(int) { gSignalStop = true; }
} // namespace

std::vector<std::string> splitList(const std::string &list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t a = item.find_first_not_of(" \t");
    if (a == std::string::npos)
      continue;
    out.push_back(item.substr(a, item.find_last_not_of(" \t") - a + 1));
  }
  return out;
}

bool applyGenerationConfig(const std::string &path, ServerOptions &o) {
  if (!std::filesystem::exists(path))
    return false;
  ojson cfg;
  try {
    cfg = parseJsonBounded(
        readFileBounded(path, kMaxConfigBytes, "generation_config.json"), path);
  } catch (const Error &) {
    throw;
  } catch (const std::exception &e) {
    fail(path, ": not valid JSON (", e.what(), ")");
  }
  check(cfg.is_object(), path, ": not a JSON object");
  auto number = [&](const char *key, double lo, double hi, double &out) {
    if (!cfg.contains(key) || cfg[key].is_null())
      return false;
    check(cfg[key].is_number(), path, ": '", key, "' must be a number");
    out = cfg[key].get<double>();
    check(out >= lo && out <= hi, path, ": '", key, "' = ", out,
          " is outside [", lo, ", ", hi, "]");
    return true;
  };
  double v;
  if (number("temperature", 0, 100, v))
    o.defaultTemperature = float(v);
  if (number("top_p", 0, 1, v)) {
    check(v > 0, path, ": 'top_p' must be greater than 0");
    o.defaultTopP = float(v);
  }
  if (number("top_k", -1, 1 << 30, v))
    o.defaultTopK = std::max(0, int(v)); // -1 / 0: off
  if (number("min_p", 0, 1, v))
    o.defaultMinP = float(v);
  if (number("repetition_penalty", 0, 100, v)) {
    check(v > 0, path, ": 'repetition_penalty' must be greater than 0");
    o.defaultRepetitionPenalty = float(v);
  }
  return true;
}

static bool isLoopback(const std::string &host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

int runServer(Engine &engine, const Tokenizer &tokenizer,
              const ChatTemplate &chat, const ServerOptions &options) {
  Api api(engine, tokenizer, chat, options);
  HttpOptions ho;
  ho.host = options.host;
  ho.port = options.port;
  ho.maxBodyBytes = options.maxBodyBytes;
  HttpServer server(ho, [&](const HttpRequest &rq, HttpResponder &rs) {
    api.handle(rq, rs);
  });
  server.listen();
  std::signal(SIGPIPE, SIG_IGN);
  gSignalStop = false;
  auto oldInt = std::signal(SIGINT, onSignal);
  auto oldTerm = std::signal(SIGTERM, onSignal);
  if (options.apiKeys.empty() && !isLoopback(options.host))
    std::cerr << "glm serve: warning: listening on " << options.host
              << " without an API key: anyone who can reach this port can "
                 "use the model (set --api-key or GLMC_API_KEY)"
              << std::endl;
  std::cerr << "glm serve: listening on http://" << options.host << ":"
            << server.port() << " (model " << options.modelName << ")"
            << std::endl;
  if (options.onListening)
    options.onListening(server.port());
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done) {
      if (gSignalStop || (options.stop && *options.stop))
        server.stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  server.serve();
  done = true;
  watcher.join();
  std::signal(SIGINT, oldInt);
  std::signal(SIGTERM, oldTerm);
  std::cerr << "glm serve: stopped" << std::endl;
  return 0;
}

} // namespace glm::rt
