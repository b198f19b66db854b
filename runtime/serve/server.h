//===- server.h - the OpenAI-compatible server over an abstract engine ----===//
//
// runServer() serves /v1/models, /v1/chat/completions, /v1/completions (with
// SSE streaming and a final usage chunk), /health and /metrics (Prometheus)
// over any Engine: glm-engine's executors implement it for real models, the
// tests' fake engine for protocol tests. Requests beyond the engine's
// concurrency wait in a bounded FIFO queue (429 when full); a client that
// disconnects cancels its generation (onToken returns false); bad requests
// get OpenAI-style 4xx errors and the server keeps serving. Optional API keys
// guard /v1 (401), allowed origins get CORS headers and preflight answers,
// and every request leaves one access-log line on stderr. response_format
// json_object/json_schema and a forced tool_choice (required, a named
// function) become a grammar the engine constrains decoding to
// (Sampling::grammar); a schema keyword outside the supported subset and
// fields the server does not implement (logit_bias, unknown names) are
// refused with 400 naming them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/serve/chat.h"
#include "runtime/serve/tokenizer.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace glm::rt {

struct Sampling {
  float temperature = 1.0f; // 0 = greedy
  float topP = 1.0f;        // (0, 1]
  int topK = 0;             // 0 = off
  float minP = 0.0f;        // [0, 1]; 0 = off
  float repetitionPenalty = 1.0f; // transformers' formula; 1 = off
  float presencePenalty = 0.0f;   // OpenAI's formula; 0 = off
  float frequencyPenalty = 0.0f;  // OpenAI's formula; 0 = off
  uint64_t seed = 0;
  bool hasSeed = false; // false: the engine picks a seed
  int maxTokens = 256;  // upper bound; the server may stop earlier
  /// Generate past the eos ids (vLLM's `ignore_eos`, which benchmark
  /// clients send): only max_tokens and `stop` strings end the reply.
  bool ignoreEos = false;
  /// -1: no logprobs; k >= 0: the sampled token's logprob and the k most
  /// likely tokens' (of the raw distribution: log-softmax of the logits).
  int logprobs = -1;
  /// What the output must be (a runtime/serve/grammar.h spec: JSON, a
  /// schema's JSON, GLM tool calls); empty: free text.
  std::string grammar;
};

/// Logprobs of one generated token (natural log).
struct TokenLogprobs {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top; // most likely first
};

/// What the server needs from a model. generate() may be called from
/// several threads at once, at most maxConcurrency() at a time.
/// Thrown by an Engine that can no longer generate (a rank of a multi-
/// process plan died): the server answers 503 with its message.
class EngineUnavailable : public Error {
public:
  using Error::Error;
};

class Engine {
public:
  virtual ~Engine() = default;
  /// Longest prompt + completion in tokens.
  virtual int maxContext() const = 0;
  /// Token ids that end a completion (not shown to the client).
  virtual std::vector<int32_t> eosIds() const = 0;
  /// generate() calls that may run at the same time.
  virtual int maxConcurrency() const { return 1; }
  /// Called once per generated token; `lp` is its logprobs when
  /// sampling.logprobs >= 0, else null. Returns false to stop.
  using OnToken = std::function<bool(int32_t id, const TokenLogprobs *lp)>;
  /// Samples tokens after `prompt`, calling onToken for each (in order);
  /// stops when onToken returns false, after an eos id, or after
  /// sampling.maxTokens tokens. Throws glm::rt::Error on failure.
  virtual void generate(const std::vector<int32_t> &prompt,
                        const Sampling &sampling, const OnToken &onToken) = 0;
  /// More Prometheus text for /metrics (the engine's own counters, e.g.
  /// drafting's acceptance); empty by default.
  virtual std::string metricsText() const { return ""; }
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;               // 0: a free port (printed when listening)
  std::string modelName = "glm"; // the id /v1/models reports first
  std::vector<std::string> modelAliases; // more ids accepted and listed
  /// Keys a /v1 request must send as `Authorization: Bearer KEY`; empty:
  /// no authentication.
  std::vector<std::string> apiKeys;
  /// Origins answered with CORS headers ("*": any); empty: no CORS.
  std::vector<std::string> allowedOrigins;
  /// One line per request on stderr (id, tokens, TTFT, tok/s, status).
  bool accessLog = true;
  size_t maxQueue = 64;          // waiting requests before 429
  size_t maxBodyBytes = 16 << 20;
  int defaultMaxTokens = 4096;     // when the request gives none
  float defaultTemperature = 1.0f; // generation_config.json defaults
  float defaultTopP = 0.95f;
  int defaultTopK = 0;
  float defaultMinP = 0.0f;
  float defaultRepetitionPenalty = 1.0f;
  /// Called once listening, with the actual port (tests pass port 0).
  std::function<void(int port)> onListening;
  /// Split reasoning (<think>) and tool calls out of chat output (serve
  /// --reasoning-parser / --tool-call-parser glm|none).
  bool reasoningParser = true;
  bool toolCallParser = true;
  /// Stops the server when set (SIGINT/SIGTERM also stop it).
  std::atomic<bool> *stop = nullptr;
};

/// Splits "a,b, c" into its non-empty, trimmed parts (--api-key, env
/// GLMC_API_KEY and --allowed-origins take such lists).
std::vector<std::string> splitList(const std::string &list);

/// Reads the sampling defaults (temperature, top_p, top_k, min_p,
/// repetition_penalty) of a generation_config.json into `o`, as vLLM does
/// (do_sample is not read). Returns false when the file does not exist;
/// throws Error naming the file when it is not valid JSON or a value has
/// the wrong type or range.
bool applyGenerationConfig(const std::string &path, ServerOptions &o);

/// Serves until stopped; returns 0 (or throws Error if it cannot listen).
int runServer(Engine &engine, const Tokenizer &tokenizer,
              const ChatTemplate &chat, const ServerOptions &options);

} // namespace glm::rt
