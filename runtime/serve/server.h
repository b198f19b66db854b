//===- server.h - the OpenAI-compatible server over an abstract engine ----===//
//
// runServer() serves /v1/models, /v1/chat/completions, /v1/completions (with
// SSE streaming and a final usage chunk), /health and /metrics (Prometheus)
// over any Engine: glm-engine's executors implement it for real models, the
// tests' fake engine for protocol tests. Requests beyond the engine's
// concurrency wait in a bounded FIFO queue (429 when full); a client that
// disconnects cancels its generation (onToken returns false); bad requests
// get OpenAI-style 4xx errors and the server keeps serving.
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
  uint64_t seed = 0;
  bool hasSeed = false; // false: the engine picks a seed
  int maxTokens = 256;  // upper bound; the server may stop earlier
};

/// What the server needs from a model. generate() may be called from
/// several threads at once, at most maxConcurrency() at a time.
class Engine {
public:
  virtual ~Engine() = default;
  /// Longest prompt + completion in tokens.
  virtual int maxContext() const = 0;
  /// Token ids that end a completion (not shown to the client).
  virtual std::vector<int32_t> eosIds() const = 0;
  /// generate() calls that may run at the same time.
  virtual int maxConcurrency() const { return 1; }
  /// Samples tokens after `prompt`, calling onToken for each (in order);
  /// stops when onToken returns false, after an eos id, or after
  /// sampling.maxTokens tokens. Throws glm::rt::Error on failure.
  virtual void generate(const std::vector<int32_t> &prompt,
                        const Sampling &sampling,
                        const std::function<bool(int32_t)> &onToken) = 0;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;               // 0: a free port (printed when listening)
  std::string modelName = "glm"; // the id /v1/models reports
  size_t maxQueue = 64;          // waiting requests before 429
  size_t maxBodyBytes = 16 << 20;
  int defaultMaxTokens = 4096;     // when the request gives none
  float defaultTemperature = 1.0f; // generation_config.json defaults
  float defaultTopP = 0.95f;
  /// Called once listening, with the actual port (tests pass port 0).
  std::function<void(int port)> onListening;
  /// Stops the server when set (SIGINT/SIGTERM also stop it).
  std::atomic<bool> *stop = nullptr;
};

/// Serves until stopped; returns 0 (or throws Error if it cannot listen).
int runServer(Engine &engine, const Tokenizer &tokenizer,
              const ChatTemplate &chat, const ServerOptions &options);

} // namespace glm::rt
