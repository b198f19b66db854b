//===- serve_command.cpp - `glm-engine serve`: the OpenAI-compatible API --===//
//
// The server lives in runtime/serve (runServer over an abstract Engine); this
// file loads the model like `run` does and adapts the backend's Generator to
// that Engine interface.
//
//===----------------------------------------------------------------------===//
#include "runtime/engine/commands.h"

#ifdef GLM_HAVE_SERVER
#include "plans/plan.h"
#include "runtime/base/cli_numbers.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/dist/comm.h"
#include "runtime/engine/dist_options.h"
#include "runtime/engine/serve_ranks.h"
#include "runtime/engine/setup.h"
#include "runtime/serve/chat.h"
#include "runtime/serve/grammar.h"
#include "runtime/serve/server.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

namespace glm::rt {
namespace {

/// The server's Engine over a Generator (which is safe to call from several
/// threads: each generate() owns its KV cache). With `ranks` (rank 0 of a
/// multi-process plan) each generation is first sent to the other ranks
/// and every token's go-on is agreed with them (serve_ranks.h); a failed
/// rank makes this and every later request 503 and stops the server.
class GeneratorEngine : public Engine {
public:
  GeneratorEngine(Generator &g, const Tokenizer &tok, std::vector<int64_t> eos,
                  int concurrency, int32_t draftTokens,
                  dist::HostComm *ranks = nullptr,
                  std::atomic<bool> *stopServer = nullptr)
      : g_(g), eos_(std::move(eos)), concurrency_(ranks ? 1 : concurrency),
        draftTokens_(draftTokens), ranks_(ranks), stopServer_(stopServer),
        constraints_(tok, eos_) {}
  // loadEngine bounds the context by kMaxContextTokens (2^30), so it fits
  // the server's int; a plan's 2^32 + 100 is refused there, not truncated.
  int maxContext() const override {
    return (int)std::min<int64_t>(g_.maxContext(), kMaxContextTokens);
  }
  std::vector<int32_t> eosIds() const override {
    return std::vector<int32_t>(eos_.begin(), eos_.end());
  }
  int maxConcurrency() const override { return concurrency_; }
  void generate(const std::vector<int32_t> &prompt, const Sampling &s,
                const OnToken &onToken) override {
    SamplingParams sp;
    sp.greedy = s.temperature == 0;
    sp.temperature = s.temperature;
    sp.topP = s.topP;
    sp.topK = s.topK;
    sp.minP = s.minP;
    sp.repetitionPenalty = s.repetitionPenalty;
    sp.presencePenalty = s.presencePenalty;
    sp.frequencyPenalty = s.frequencyPenalty;
    sp.topLogprobs = s.logprobs;
    // Without a seed each request draws its own (never the same stream).
    sp.seed = s.hasSeed ? s.seed
                        : (uint64_t)std::chrono::steady_clock::now()
                              .time_since_epoch()
                              .count();
    int64_t room = g_.maxContext() - (int64_t)prompt.size();
    sp.maxNew = std::max<int64_t>(0, std::min<int64_t>(s.maxTokens, room));
    if (!s.ignoreEos)
      sp.stopIds = eos_;
    if (!s.grammar.empty())
      sp.constraint = constraints_.factory(s.grammar);
    std::vector<int64_t> p(prompt.begin(), prompt.end());
    // runGeneration reports a token's logprobs just before the token.
    TokenLogprobs lp;
    auto onSample = [&](const SampledToken &st) {
      lp.logprob = float(st.logprob);
      lp.top.clear();
      for (const TokenLogprob &t : st.top)
        lp.top.emplace_back((int32_t)t.token, float(t.logprob));
    };
    auto emit = [&](int64_t t) {
      return onToken((int32_t)t, s.logprobs >= 0 ? &lp : nullptr);
    };
    const GenerationResult r =
        ranks_ ? generateOnRanks(p, sp, s.grammar, emit, onSample)
               : g_.generate(p, sp, emit, nullptr, onSample);
    verifySteps_ += r.verifySteps;
    drafted_ += r.drafted;
    accepted_ += r.accepted;
  }

  /// Drafting (--draft mtp): verify steps, drafted and accepted tokens.
  std::string metricsText() const override {
    std::ostringstream o;
    o << g_.metricsText();
    if (verifySteps_ == 0)
      return o.str();
    o << "# HELP glm_draft_verify_steps_total Verify steps of drafted "
         "decoding (--draft mtp).\n# TYPE glm_draft_verify_steps_total "
         "counter\nglm_draft_verify_steps_total "
      << verifySteps_
      << "\n# HELP glm_draft_tokens_total Tokens the MTP head drafted.\n"
         "# TYPE glm_draft_tokens_total counter\nglm_draft_tokens_total "
      << drafted_
      << "\n# HELP glm_draft_accepted_tokens_total Drafted tokens the verify "
         "step kept.\n# TYPE glm_draft_accepted_tokens_total counter\n"
         "glm_draft_accepted_tokens_total "
      << accepted_ << "\n";
    return o.str();
  }

  /// Rank 0 after the server stopped: the other ranks end too.
  void stopRanks() {
    if (ranks_ && lost_.empty())
      sendRankRequest(*ranks_, RankRequest{true, {}, {}, {}, 0});
  }
  bool ranksLost() const { return !lost_.empty(); }

private:
  GenerationResult generateOnRanks(const std::vector<int64_t> &p,
                                   const SamplingParams &sp,
                                   const std::string &grammar,
                                   const Generator::TokenCallback &emit,
                                   const Generator::SampleCallback &onSample) {
    if (!lost_.empty())
      throw EngineUnavailable(lost_);
    int64_t pos = int64_t(p.size());
    try {
      sendRankRequest(*ranks_, RankRequest{false, p, sp, grammar,
                                           draftTokens_});
      return g_.generate(
          p, sp,
          [&](int64_t t) {
            ranks_->setStep(pos++);
            return agreeToContinue(*ranks_, emit(t));
          },
          nullptr, onSample);
    } catch (const Error &e) {
      // A request the generator refuses is refused by every rank alike; a
      // rank that died ends serving.
      try {
        ranks_->checkHealthy();
      } catch (const Error &dead) {
        lost_ = std::string("a rank of this plan failed, the server stops: ") +
                dead.what();
        std::cerr << "glm serve: " << lost_ << std::endl;
        if (stopServer_)
          *stopServer_ = true;
        throw EngineUnavailable(lost_);
      }
      throw;
    }
  }

  Generator &g_;
  std::atomic<int64_t> verifySteps_{0}, drafted_{0}, accepted_{0};
  std::vector<int64_t> eos_;
  int concurrency_;
  int32_t draftTokens_; // --draft-tokens, 0 for --draft none
  dist::HostComm *ranks_;
  std::atomic<bool> *stopServer_;
  std::string lost_; // why the ranks can no longer generate
  grammar::ConstraintBuilder constraints_;
};

/// Each waiting request holds a connection and its body (up to 16 MiB).
constexpr int64_t kMaxQueue = 4096;

struct ServeOptions {
  EngineOptions engine;
  DistOptions dist;
  ServerOptions server;
  int concurrency = 1;
  std::vector<std::string> modelNames;
  std::string apiKeys, allowedOrigins, chatTemplate;
  bool noAccessLog = false;
  std::string reasoningParser = "glm", toolCallParser = "glm";
  std::string devices;
};

/// This process's arguments from `serve` on, without --devices: what each
/// rank of a plan this serve starts runs.
std::vector<std::string> serveArgs() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> all;
  for (std::string a; std::getline(f, a, '\0');)
    all.push_back(a);
  std::vector<std::string> out;
  bool in = false;
  for (size_t i = 1; i < all.size(); ++i) {
    if (!in) {
      in = all[i] == "serve";
      if (in)
        out.push_back(all[i]);
      continue;
    }
    if (all[i] == "--devices") {
      ++i;
      continue;
    }
    if (all[i].rfind("--devices=", 0) == 0)
      continue;
    out.push_back(all[i]);
  }
  check(in, "serve: cannot read this process's arguments (/proc/self/cmdline)");
  return out;
}

/// --chat-template FILE, else the pack's (next to the tokenizer when that
/// was found elsewhere). Errors name the file.
std::unique_ptr<ChatTemplate> loadChatTemplate(const ServeOptions &o,
                                               const LoadedEngine &le) {
  if (!o.chatTemplate.empty()) {
    std::string text = readFileBounded(o.chatTemplate, kMaxTemplateBytes,
                                       "the chat template (--chat-template)");
    try {
      return std::make_unique<ChatTemplate>(text, o.chatTemplate);
    } catch (const Error &e) {
      std::string what = e.what();
      // Parse errors name the template already; others get its name here.
      if (what.find(o.chatTemplate) == std::string::npos)
        fail(o.chatTemplate, ": ", what);
      throw;
    }
  }
  return le.chatTemplatePath.empty()
             ? ChatTemplate::fromPack(o.engine.pack)
             : ChatTemplate::fromPack(std::filesystem::path(le.chatTemplatePath)
                                          .parent_path()
                                          .string());
}

/// --draft-tokens when drafting, else 0 (what the ranks compare).
int32_t draftTokensOf(const EngineOptions &e) {
  return e.draft == "mtp" ? int32_t(e.draftTokens) : 0;
}

/// `glm-engine serve` in this process: the HTTP server, or (a rank other
/// than 0 of a multi-process plan) rank 0's generations in lockstep.
int serve(ServeOptions &opt) {
  ServeOptions *o = &opt;
  LoadedEngine le = loadEngine(o->engine);
  dist::HostComm *ranks = o->engine.hostComm;
  if (ranks && ranks->size() <= 1)
    ranks = nullptr;
  if (ranks && ranks->rank() != 0) {
    std::cerr << "glm serve: rank " << ranks->rank() << " of "
              << ranks->size() << " runs rank 0's requests" << std::endl;
    // Constrained requests: this rank masks as rank 0 does, from the spec.
    std::unique_ptr<grammar::ConstraintBuilder> constraints;
    if (le.tokenizer)
      constraints = std::make_unique<grammar::ConstraintBuilder>(*le.tokenizer,
                                                                 le.eosIds);
    return followRankRequests(
        *ranks, *le.generator,
        [&](const std::string &spec) {
          check(constraints != nullptr,
                "a constrained request needs the tokenizer on every rank "
                "(looked for ",
                le.tokenizerPath, ")");
          return constraints->factory(spec);
        },
        draftTokensOf(o->engine));
  }
  check(le.tokenizer != nullptr, "serve needs a tokenizer.json (looked for ",
        le.tokenizerPath, ")");
  std::unique_ptr<ChatTemplate> chat = loadChatTemplate(*o, le);
  if (o->modelNames.empty()) {
    o->server.modelName =
        std::filesystem::path(o->engine.pack).lexically_normal()
            .filename().string();
  } else {
    o->server.modelName = o->modelNames[0];
    o->server.modelAliases.assign(o->modelNames.begin() + 1,
                                  o->modelNames.end());
  }
  if (o->server.modelName.empty())
    o->server.modelName = "glm";
  const char *envKeys = std::getenv("GLMC_API_KEY");
  o->server.apiKeys = splitList(!o->apiKeys.empty() ? o->apiKeys
                                : envKeys           ? envKeys
                                                    : "");
  o->server.allowedOrigins = splitList(o->allowedOrigins);
  o->server.accessLog = !o->noAccessLog;
  o->server.reasoningParser = o->reasoningParser == "glm";
  o->server.toolCallParser = o->toolCallParser == "glm";
  std::string genConfig =
      (std::filesystem::path(o->engine.pack) / "generation_config.json")
          .string();
  if (applyGenerationConfig(genConfig, o->server))
    std::cerr << "glm serve: sampling defaults from " << genConfig
              << " (temperature " << o->server.defaultTemperature
              << ", top_p " << o->server.defaultTopP << ", top_k "
              << o->server.defaultTopK << ", repetition_penalty "
              << o->server.defaultRepetitionPenalty << ")" << std::endl;
  std::atomic<bool> stop{false};
  if (ranks) {
    o->server.stop = &stop;
    if (o->concurrency > 1)
      std::cerr << "glm serve: --concurrency " << o->concurrency
                << " runs as 1 across " << ranks->size()
                << " rank processes (one generation at a time)" << std::endl;
  }
  GeneratorEngine engine(*le.generator, *le.tokenizer, le.eosIds,
                         std::max(o->concurrency, o->engine.maxBatch),
                         draftTokensOf(o->engine), ranks, &stop);
  const int rc = runServer(engine, *le.tokenizer, *chat, o->server);
  if (engine.ranksLost())
    return 1;
  engine.stopRanks();
  return rc;
}

} // namespace

void addServeCommand(CLI::App &app, int &rc) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App *sub = app.add_subcommand(
      "serve", "Serve the model over an OpenAI-compatible HTTP API "
               "(/v1/chat/completions, /v1/completions, /v1/models, /health, "
               "/metrics)");
  addEngineOptions(*sub, o->engine);
  addDistOptions(*sub, o->dist);
  sub->add_option("--host", o->server.host, "Address to listen on")
      ->capture_default_str();
  sub->add_option("--port", o->server.port,
                  "TCP port (0 = a free port, printed when listening)")
      ->check(cliInt(0, 65535))
      ->capture_default_str();
  sub->add_option("--served-model-name,--model-name", o->modelNames,
                  "Model ids reported by /v1/models and accepted in "
                  "requests; the first is the main one (default: the pack "
                  "directory's name)")
      ->expected(1, -1);
  sub->add_option("--api-key", o->apiKeys,
                  "Keys (comma-separated) a /v1 request must send as "
                  "'Authorization: Bearer KEY'; else 401 (default: env "
                  "GLMC_API_KEY; none: no authentication)");
  sub->add_option("--allowed-origins", o->allowedOrigins,
                  "Origins (comma-separated, or *) that get CORS headers and "
                  "preflight answers (default: none, no CORS headers)");
  sub->add_option("--chat-template", o->chatTemplate,
                  "Jinja chat template file to use instead of the pack's");
  sub->add_option("--max-model-len", o->engine.maxContext,
                  "The same as --max-context (vLLM's name): prompt + "
                  "completion tokens at most")
      ->check(cliInt(1, kMaxContextTokens))
      ->excludes("--max-context");
  sub->add_option("--reasoning-parser", o->reasoningParser,
                  "glm: the text between <think> and </think> is sent as "
                  "reasoning_content; none: all of it is content")
      ->check(CLI::IsMember({"glm", "none"}))
      ->capture_default_str();
  sub->add_option("--tool-call-parser", o->toolCallParser,
                  "glm: <tool_call> blocks of a request with tools become "
                  "tool_calls; none: they stay in the content")
      ->check(CLI::IsMember({"glm", "none"}))
      ->capture_default_str();
  sub->add_flag("--no-access-log", o->noAccessLog,
                "Do not print one line per request on stderr");
  sub->add_option("--max-queue", o->server.maxQueue,
                  "Requests that may wait for the engine before new ones get "
                  "HTTP 429")
      ->check(cliInt(0, kMaxQueue))
      ->capture_default_str();
  sub->add_option("--concurrency", o->concurrency,
                  "Generations that run at the same time (each has its own "
                  "KV cache)")
      ->check(cliInt(1, 64))
      ->capture_default_str();
  sub->add_option("--max-batch", o->engine.maxBatch,
                  "Continuous batching: up to B requests decode together, "
                  "one row each in the plan's decode graphs, new requests "
                  "joining running steps and prompts prefilled a chunk "
                  "between steps; a finished request's KV slot keeps its "
                  "tokens so a prompt sharing their prefix skips it. Needs "
                  "a plan of B KV slots (glmc compile --kv-slots B, one "
                  "more for GLM-5.3-Flash) whose ranks share this process; "
                  "each request's tokens are those it gets alone")
      ->check(cliInt(1, 64))
      ->capture_default_str();
  sub->add_option("--devices", o->devices,
                  "--backend cuda, a plan of N ranks: GPU ordinal of each "
                  "rank process serve starts (default 0,1,...,N-1)");
  sub->callback([o, sub, &rc] {
    // A multi-rank plan on cuda runs one process per GPU: serve starts
    // them (as `launch --sparks N serve` does) unless it is one of them.
    if (o->dist.world <= 1 && o->engine.backend == "cuda" &&
        o->engine.plan != "-") {
      const uint32_t n = plan::readPlan(o->engine.plan).numRanks;
      if (n > 1) {
        rc = launchRanks(int(n), o->devices, serveArgs());
        return;
      }
    }
    check(o->devices.empty(), "--devices is for serving a plan of several "
          "ranks with --backend cuda (one process per GPU)");
    rc = runAsRank(o->dist, o->engine, [&] { return serve(*o); });
  });
}

} // namespace glm::rt

#else
namespace glm::rt {
void addServeCommand(CLI::App &, int &) {}
} // namespace glm::rt
#endif
