//===- server.cpp - the OpenAI-compatible server over an abstract engine --===//
//
// Each request runs on its connection's thread: validate, render/encode,
// wait for an engine slot (FIFO, bounded), generate with a per-token callback
// that decodes UTF-8 safely, holds back possible stop-sequence prefixes,
// parses reasoning and tool calls, writes SSE chunks and notices a client that
// went away. Validation errors are ApiError: status + OpenAI error fields.
//
//===----------------------------------------------------------------------===//
#include "runtime/serve/server.h"

#include "runtime/base/error.h"
#include "runtime/serve/http.h"
#include "runtime/serve/unicode.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
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
struct Metrics {
  std::mutex m;
  std::map<std::pair<std::string, int>, uint64_t> requests;
  uint64_t promptTokens = 0, generationTokens = 0, cancelled = 0, rejected = 0;
  double decodeSeconds = 0, lastDecodeTps = 0;
  static constexpr double kBuckets[] = {0.025, 0.05, 0.1, 0.25, 0.5,
                                        1,     2.5,  5,   10,   30};
  uint64_t ttftBuckets[11] = {};
  double ttftSum = 0;
  uint64_t ttftCount = 0;
  std::atomic<int> queued{0}, running{0};

  void request(const std::string &endpoint, int status) {
    std::lock_guard<std::mutex> l(m);
    ++requests[{endpoint, status}];
  }
  void ttft(double s) {
    std::lock_guard<std::mutex> l(m);
    for (size_t i = 0; i < 10; ++i)
      if (s <= kBuckets[i])
        ++ttftBuckets[i];
    ++ttftBuckets[10];
    ttftSum += s;
    ++ttftCount;
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
      << rejected
      << "\n# HELP glm_time_to_first_token_seconds Time from request to first "
         "generated token.\n# TYPE glm_time_to_first_token_seconds "
         "histogram\n";
    for (size_t i = 0; i < 10; ++i)
      o << "glm_time_to_first_token_seconds_bucket{le=\"" << kBuckets[i]
        << "\"} " << ttftBuckets[i] << "\n";
    o << "glm_time_to_first_token_seconds_bucket{le=\"+Inf\"} "
      << ttftBuckets[10] << "\nglm_time_to_first_token_seconds_sum " << ttftSum
      << "\nglm_time_to_first_token_seconds_count " << ttftCount
      << "\n# HELP glm_decode_tokens_per_second Decode speed of the last "
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
};

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

Common parseCommon(const ojson &body, const ServerOptions &opt) {
  Common c;
  c.sampling.temperature = opt.defaultTemperature;
  c.sampling.topP = opt.defaultTopP;
  c.sampling.maxTokens = opt.defaultMaxTokens;
  if (body.contains("model") && !body["model"].is_string() &&
      !body["model"].is_null())
    badRequest("'model' must be a string", "model");
  c.model = opt.modelName;
  if (body.contains("model") && body["model"].is_string() &&
      !body["model"].get<std::string>().empty()) {
    c.model = body["model"].get<std::string>();
    if (c.model != opt.modelName)
      throw ApiError{404,
                     "the model '" + c.model + "' does not exist: this server "
                     "serves '" + opt.modelName + "' (GET /v1/models)",
                     "invalid_request_error", "model", "model_not_found"};
  }
  for (const char *k : {"max_tokens", "max_completion_tokens"}) {
    if (!body.contains(k) || body[k].is_null())
      continue;
    if (!body[k].is_number_integer() || body[k].get<int64_t>() < 1 ||
        body[k].get<int64_t>() > (1 << 30))
      badRequest(std::string("'") + k + "' must be a positive integer", k);
    c.sampling.maxTokens = int(body[k].get<int64_t>());
    c.maxTokensGiven = true;
  }
  if (body.contains("temperature") && !body["temperature"].is_null())
    c.sampling.temperature = float(getNumber(body, "temperature", 0, 2));
  if (body.contains("top_p") && !body["top_p"].is_null()) {
    c.sampling.topP = float(getNumber(body, "top_p", 0, 1));
    if (c.sampling.topP <= 0)
      badRequest("'top_p' must be greater than 0", "top_p");
  }
  for (const char *k : {"presence_penalty", "frequency_penalty"})
    if (body.contains(k) && !body[k].is_null())
      getNumber(body, k, -2, 2); // accepted, not applied
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer())
      badRequest("'seed' must be an integer", "seed");
    c.sampling.seed = uint64_t(body["seed"].get<int64_t>());
    c.sampling.hasSeed = true;
  }
  if (body.contains("n") && !body["n"].is_null() &&
      (!body["n"].is_number_integer() || body["n"].get<int64_t>() != 1))
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

ojson validateTools(const ojson &body, bool &parseCalls) {
  parseCalls = false;
  if (!body.contains("tools") || body["tools"].is_null())
    return ojson();
  const ojson &tools = body["tools"];
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
               !tc["function"].contains("name")) {
      badRequest("'tool_choice' must be auto, none, required or "
                 "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                 "tool_choice");
    }
  }
  if (choice == "none" || tools.empty())
    return ojson();
  parseCalls = true;
  return tools;
}

//===----------------------------------------------------------------------===//
// The API
//===----------------------------------------------------------------------===//
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
    std::string endpoint = req.path;
    int status = 200;
    try {
      status = route(req, resp, endpoint);
    } catch (const ApiError &e) {
      // Counted before the reply goes out, so a client that reads /metrics
      // right after its error response sees it.
      metrics_.request(endpoint, e.status);
      if (!resp.started())
        resp.send(e.status, "application/json", errorBody(e));
      return;
    } catch (const std::exception &e) {
      metrics_.request(endpoint, 500);
      if (!resp.started())
        resp.send(500, "application/json",
                  errorBody({500, e.what(), "server_error", "", ""}));
      return;
    }
    metrics_.request(endpoint, status);
  }

private:
  int route(const HttpRequest &req, HttpResponder &resp,
            std::string &endpoint) {
    const std::string &p = req.path;
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
      resp.send(200, "text/plain; version=0.0.4", metrics_.text());
      return 200;
    }
    if (p == "/v1/models") {
      need("GET");
      ojson m = {{"object", "list"},
                 {"data",
                  {{{"id", opt_.modelName},
                    {"object", "model"},
                    {"created", unixNow()},
                    {"owned_by", "glmc"},
                    {"max_model_len", engine_.maxContext()}}}}};
      resp.send(200, "application/json", dumpJson(m));
      return 200;
    }
    if (p.rfind("/v1/models/", 0) == 0) {
      endpoint = "/v1/models/{id}"; // one metrics label, whatever the id
      need("GET");
      const std::string id = p.substr(std::string("/v1/models/").size());
      if (id != opt_.modelName)
        throw ApiError{404,
                       "the model '" + id + "' does not exist: this server "
                       "serves '" + opt_.modelName + "'",
                       "invalid_request_error", "model", "model_not_found"};
      ojson m = {{"id", opt_.modelName},
                 {"object", "model"},
                 {"created", unixNow()},
                 {"owned_by", "glmc"},
                 {"max_model_len", engine_.maxContext()}};
      resp.send(200, "application/json", dumpJson(m));
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
      return p == "/v1/completions" ? completions(body, resp)
                                    : chatCompletions(body, resp);
    }
    endpoint = "other";
    throw ApiError{404, "no such endpoint: " + p, "invalid_request_error", "",
                   "not_found"};
  }

  struct Outcome {
    std::string finish;
    int completionTokens = 0;
    bool cancelled = false;
  };

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
    TextStream ts(tok_, c.stops, eos_);
    auto start = Clock::now();
    Clock::time_point first;
    bool stopped = false;
    engine_.generate(prompt, c.sampling, [&](int32_t id) {
      if (out.completionTokens == 0) {
        first = Clock::now();
        metrics_.ttft(std::chrono::duration<double>(first - start).count());
      }
      ++out.completionTokens;
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

  int chatCompletions(const ojson &body, HttpResponder &resp) {
    validateMessages(body);
    Common c = parseCommon(body, opt_);
    bool parseCalls;
    ojson tools = validateTools(body, parseCalls);
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
    std::string prompt;
    try {
      prompt = chat_.render(r);
    } catch (const Error &e) {
      badRequest(std::string("the chat template rejected the request: ") +
                     e.what(),
                 "messages");
    }
    std::vector<int32_t> ids = tok_.encode(prompt);
    size_t k = prompt.find_last_not_of(" \t\r\n");
    bool thinking = k != std::string::npos && k + 1 >= 7 &&
                    prompt.compare(k + 1 - 7, 7, "<think>") == 0;
    OutputParser parser(tools, thinking);

    std::string id = "chatcmpl-" + randomHex(24);
    int64_t created = unixNow();
    const std::string &model = c.model;
    auto chunk = [&](const ojson &delta, const ojson &finish) {
      return ojson{{"id", id},
                   {"object", "chat.completion.chunk"},
                   {"created", created},
                   {"model", model},
                   {"choices",
                    {{{"index", 0},
                      {"delta", delta},
                      {"logprobs", nullptr},
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
    if (o.cancelled)
      return 499; // client closed the request (nginx's convention)
    ChatDelta tail = parser.finish();
    all.append(tail);
    std::string finish = o.finish;
    if (!all.toolCalls.empty() && finish == "stop")
      finish = "tool_calls";
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
                    {"logprobs", nullptr},
                    {"finish_reason", finish}}}},
                 {"usage", usage}};
    resp.send(200, "application/json", dumpJson(res));
    return 200;
  }

  int completions(const ojson &body, HttpResponder &resp) {
    Common c = parseCommon(body, opt_);
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
        if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
            x.get<int64_t>() >= tok_.vocabSize())
          badRequest("'prompt' must be a string or an array of token ids "
                     "below the vocabulary size",
                     "prompt");
        ids.push_back(int32_t(x.get<int64_t>()));
      }
    } else {
      badRequest("'prompt' must be a string or an array of token ids",
                 "prompt");
    }
    if (ids.empty())
      badRequest("'prompt' must not be empty", "prompt");
    std::string id = "cmpl-" + randomHex(24);
    int64_t created = unixNow();
    const std::string &model = c.model;
    auto chunk = [&](const std::string &text, const ojson &finish) {
      return ojson{{"id", id},
                   {"object", "text_completion"},
                   {"created", created},
                   {"model", model},
                   {"choices",
                    {{{"index", 0},
                      {"text", text},
                      {"logprobs", nullptr},
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
        u["choices"] = ojson::array();
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
  std::set<int32_t> eos_;
};

std::atomic<bool> gSignalStop{false};
void onSignal(int) { gSignalStop = true; }
} // namespace

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
