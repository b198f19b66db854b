//===- run_command.cpp - `glm-engine run`: prompt in, tokens out ----------===//
#include "runtime/engine/commands.h"

#include "runtime/base/error.h"
#include "runtime/base/cli_numbers.h"
#include "runtime/dist/comm.h"
#include "runtime/engine/dist_options.h"
#include "runtime/engine/setup.h"
#include "runtime/formats/safetensors.h"
#ifdef GLM_HAVE_TOKENIZER
#include "runtime/serve/tokenizer.h"
#endif

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace glm::rt {
namespace {

/// Far above any useful temperature (logits / T stay finite for T >= 0).
constexpr double kMaxTemperature = 1000;

struct RunOptions {
  EngineOptions engine;
  DistOptions dist; // --rank/--world/--coordinator (dist_options.h)
  std::string tokens, prompt, dumpLogits;
  int64_t maxNew = 16;
  double temperature = 1.0, topP = 1.0;
  uint64_t seed = 0;
  bool greedy = false;
  bool ignoreEos = false; // --ignore-eos: always --max-new tokens
};

std::vector<int64_t> parseTokens(const std::string &s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    // The vocabulary bound is checked by the generator, which knows it.
    std::optional<int64_t> v = parseInt64(item);
    check(v.has_value(), "--tokens: \"", item,
          "\" is not an integer token id (expected e.g. --tokens 1,2,3)");
    out.push_back(*v);
  }
  check(!out.empty(), "--tokens is empty (expected e.g. --tokens 1,2,3)");
  return out;
}

/// The request every rank must run: prompt ids, --max-new, sampling state
/// and what the generator was built with (the context, chunked prefill: a
/// rank feeding the prompt otherwise runs other graphs, whose collectives
/// differ). `has*` say which parts the rank's command line gave (the rest
/// are defaults, adopted from rank 0).
struct Request {
  std::vector<int64_t> prompt;
  int64_t maxNew = 0, maxContext = 0;
  bool chunkedPrefill = false;
  int32_t draftTokens = 0; // --draft mtp --draft-tokens k (0 = none)
  bool greedy = true;
  double temperature = 1, topP = 1;
  uint64_t seed = 0;
  bool ignoreEos = false;
  bool hasPrompt = false, hasMaxNew = false, hasSampling = false,
       hasIgnoreEos = false;
};

std::string encodeRequest(const Request &q) {
  std::string s;
  auto put = [&](const auto &v) { s.append((const char *)&v, sizeof v); };
  put((int64_t)q.prompt.size());
  for (int64_t t : q.prompt)
    put(t);
  put(q.maxNew);
  put(q.maxContext);
  put((uint8_t)q.chunkedPrefill);
  put((uint8_t)q.greedy);
  put(q.temperature);
  put(q.topP);
  put(q.seed);
  put(q.draftTokens);
  put((uint8_t)q.ignoreEos);
  return s;
}

Request decodeRequest(const std::string &s) {
  Request q;
  size_t at = 0;
  auto get = [&](auto &v) {
    check(at + sizeof v <= s.size(), "rank 0 sent a malformed request");
    std::memcpy(&v, s.data() + at, sizeof v);
    at += sizeof v;
  };
  int64_t n = 0;
  get(n);
  check(n >= 0 && (uint64_t)n <= (s.size() - at) / sizeof(int64_t),
        "rank 0 sent a malformed request");
  q.prompt.resize((size_t)n);
  for (int64_t &t : q.prompt)
    get(t);
  uint8_t greedy = 0, chunked = 0;
  get(q.maxNew);
  get(q.maxContext);
  get(chunked);
  q.chunkedPrefill = chunked != 0;
  get(greedy);
  q.greedy = greedy != 0;
  get(q.temperature);
  get(q.topP);
  get(q.seed);
  get(q.draftTokens);
  uint8_t ignoreEos = 0;
  get(ignoreEos);
  q.ignoreEos = ignoreEos != 0;
  return q;
}

std::string promptText(const std::vector<int64_t> &p) {
  std::string s;
  for (size_t i = 0; i < p.size() && i < 8; ++i)
    s += (i ? "," : "") + std::to_string(p[i]);
  if (p.size() > 8)
    s += ",... (" + std::to_string(p.size()) + " tokens)";
  return s;
}

std::string samplingText(const Request &q) {
  if (q.greedy)
    return "--greedy";
  std::ostringstream os;
  os << "--temperature " << q.temperature << " --top-p " << q.topP
     << " --seed " << q.seed;
  return os.str();
}

/// Rank 0 sends its request to every rank (two all-gathers: the lengths,
/// then the bytes); a rank adopts each part its command line left out and
/// refuses, naming both, a part it gave differently. Ranks started by hand
/// with different --tokens or sampling flags would otherwise each run its
/// own request through the same collectives and print wrong tokens. A
/// refusing rank throws; runAsRank tells the others, which fail in the
/// closing barrier, so no rank generates.
void agreeOnRequest(dist::HostComm &comm, Request &q) {
  const int world = comm.size(), rank = comm.rank();
  std::string mine = encodeRequest(q);
  std::vector<uint64_t> sizes((size_t)world);
  uint64_t mySize = mine.size();
  comm.allGather(&mySize, sizes.data(), sizeof mySize);
  uint64_t most = *std::max_element(sizes.begin(), sizes.end());
  check(most <= (uint64_t(1) << 32), "a rank sent a request of ", most,
        " bytes");
  mine.resize((size_t)most, '\0');
  std::string all((size_t)(most * world), '\0');
  comm.allGather(mine.data(), all.data(), (size_t)most);
  if (rank != 0) {
    Request root = decodeRequest(all.substr(0, (size_t)sizes[0]));
    const std::string me = "rank " + std::to_string(rank);
    const char *hint = "; start every rank with the same request, or give "
                       "it to rank 0 only (the others adopt it)";
    check(!q.hasPrompt || q.prompt == root.prompt, me,
          " was given the prompt tokens ", promptText(q.prompt),
          " but rank 0 runs ", promptText(root.prompt), hint);
    check(!q.hasMaxNew || q.maxNew == root.maxNew, me, " was given --max-new ",
          q.maxNew, " but rank 0 runs --max-new ", root.maxNew, hint);
    bool sameSampling =
        q.greedy == root.greedy &&
        (q.greedy || (q.temperature == root.temperature &&
                      q.topP == root.topP && q.seed == root.seed));
    check(!q.hasSampling || sameSampling, me, " was given ", samplingText(q),
          " but rank 0 runs ", samplingText(root), hint);
    check(q.maxContext == root.maxContext, me, " has a context of ",
          q.maxContext, " tokens but rank 0 of ", root.maxContext,
          "; start every rank with the same --max-context");
    auto prefillText = [](bool chunked) {
      return chunked ? "--prefill chunked" : "--prefill tokens";
    };
    check(q.chunkedPrefill == root.chunkedPrefill, me, " runs ",
          prefillText(q.chunkedPrefill), " but rank 0 runs ",
          prefillText(root.chunkedPrefill),
          "; start every rank with the same --prefill");
    auto draftText = [](int32_t k) {
      return k ? "--draft mtp --draft-tokens " + std::to_string(k)
               : std::string("--draft none");
    };
    check(q.draftTokens == root.draftTokens, me, " runs ",
          draftText(q.draftTokens), " but rank 0 runs ",
          draftText(root.draftTokens),
          "; start every rank with the same --draft and --draft-tokens");
    check(!q.hasIgnoreEos || q.ignoreEos == root.ignoreEos, me, " was given ",
          "--ignore-eos but rank 0 stops at an eos id", hint);
    root.hasPrompt = root.hasMaxNew = root.hasSampling = root.hasIgnoreEos =
        true;
    q = root;
  }
  comm.barrier();
}

int runCommand(const RunOptions &o, const CLI::App &sub) {
  LoadedEngine le = loadEngine(o.engine);
  dist::HostComm *comm = o.engine.hostComm;
  std::vector<int64_t> prompt;
  if (!o.tokens.empty()) {
    prompt = parseTokens(o.tokens);
  } else if (o.prompt.empty()) {
    // Only a rank other than 0 may leave the prompt out (callback check):
    // it adopts rank 0's in agreeOnRequest.
  } else {
    check(le.tokenizer != nullptr,
          "--prompt needs a tokenizer.json (looked for ", le.tokenizerPath,
          "); use --tokens");
#ifdef GLM_HAVE_TOKENIZER
    for (int32_t id : le.tokenizer->encode(o.prompt))
      prompt.push_back(id);
#endif
    check(!prompt.empty(), "--prompt encodes to no tokens");
  }
  SamplingParams sp;
  bool sampling = sub.count("--temperature") || sub.count("--top-p") ||
                  sub.count("--seed");
  check(!(o.greedy && sampling),
        "--greedy cannot be combined with --temperature/--top-p/--seed");
  Request q;
  q.prompt = std::move(prompt);
  q.maxNew = o.maxNew;
  q.maxContext = le.generator->maxContext();
  // Only the plan executor has prefill graphs.
  q.chunkedPrefill = o.engine.plan != "-" && o.engine.prefill == "chunked";
  q.draftTokens = o.engine.draft == "mtp" ? o.engine.draftTokens : 0;
  q.greedy = !sampling;
  q.temperature = o.temperature;
  q.topP = o.topP;
  q.seed = o.seed;
  q.hasPrompt = !o.tokens.empty() || !o.prompt.empty();
  q.hasMaxNew = sub.count("--max-new") > 0;
  q.hasSampling = sampling || o.greedy;
  q.ignoreEos = o.ignoreEos;
  q.hasIgnoreEos = o.ignoreEos;
  if (comm && comm->size() > 1)
    agreeOnRequest(*comm, q);
  prompt = std::move(q.prompt);
  sp.greedy = q.greedy;
  sp.temperature = q.temperature;
  sp.topP = q.topP;
  sp.seed = q.seed;
  sp.maxNew = q.maxNew;
  if (!q.ignoreEos)
    sp.stopIds = le.eosIds;

  std::vector<float> logits;
  auto t0 = std::chrono::steady_clock::now();
  // A rank tells its peers the position it decodes, named if it fails.
  int64_t pos = (int64_t)prompt.size();
  auto onToken = [&](int64_t) {
    if (o.engine.hostComm)
      o.engine.hostComm->setStep(pos++);
    return true;
  };
  GenerationResult r = le.generator->generate(
      prompt, sp, onToken, o.dumpLogits.empty() ? nullptr : &logits);
  double secs = std::chrono::duration<double>(
                    std::chrono::steady_clock::now() - t0)
                    .count();

  std::printf("generated tokens:");
  for (int64_t t : r.tokens)
    std::printf(" %lld", (long long)t);
  std::printf("\n");
#ifdef GLM_HAVE_TOKENIZER
  if (le.tokenizer) {
    std::vector<int32_t> ids(r.tokens.begin(), r.tokens.end());
    std::printf("generated text: %s\n", le.tokenizer->decode(ids).c_str());
  }
#endif
  std::printf("finish reason: %s\n", r.finishReason.c_str());
  if (r.verifySteps > 0)
    std::printf("drafting: %lld of %lld drafted tokens accepted (%.1f%%), "
                "%.2f tokens per verify step over %lld steps\n",
                (long long)r.accepted, (long long)r.drafted,
                r.drafted ? 100.0 * double(r.accepted) / double(r.drafted)
                          : 0.0,
                double(r.tokens.size() - 1) / double(r.verifySteps),
                (long long)r.verifySteps);
  std::fprintf(stderr,
               "glm-engine: %zu prompt + %zu generated tokens on %d rank(s), "
               "backend %s, %.2f s (%.1f tok/s)\n",
               prompt.size(), r.tokens.size(), le.ranks,
               le.generator->backendName().c_str(), secs,
               (prompt.size() + r.tokens.size()) / (secs > 0 ? secs : 1));

  if (!o.dumpLogits.empty() && o.dist.rank == 0) { // one writer per run
    const int64_t vocab = le.generator->config().vocabSize;
    const int64_t rows = (int64_t)logits.size() / vocab;
    SafetensorsWriter w;
    w.setMetadata("prompt_tokens", std::to_string(prompt.size()));
    w.setMetadata("generated_tokens", std::to_string(r.tokens.size()));
    w.setMetadata("rows",
                  "prompt positions, then each generated token fed back");
    w.addF32("logits", {rows, vocab}, logits);
    std::vector<int64_t> seq = prompt;
    seq.insert(seq.end(), r.tokens.begin(), r.tokens.end());
    w.add("tokens", DType::I64, {(int64_t)seq.size()}, seq.data(),
          seq.size() * sizeof(int64_t));
    w.write(o.dumpLogits);
  }
  return 0;
}

} // namespace

void addRunCommand(CLI::App &app, int &rc) {
  auto o = std::make_shared<RunOptions>();
  CLI::App *sub = app.add_subcommand(
      "run", "Run a prompt through the model and print the generated tokens");
  addEngineOptions(*sub, o->engine);
  addDistOptions(*sub, o->dist);
  auto *tok = sub->add_option(
      "--tokens", o->tokens,
      "Prompt as comma-separated token ids, e.g. 1,2,3 (needs no tokenizer)");
  auto *pr = sub->add_option("--prompt", o->prompt,
                             "Prompt text, encoded with the pack's "
                             "tokenizer.json (no chat template applied)");
  tok->excludes(pr);
  pr->excludes(tok);
  sub->add_option("--max-new", o->maxNew,
                  "Tokens to generate at most; generation also stops after "
                  "an eos id of the plan/config (unless --ignore-eos)")
      ->check(cliInt(0))
      ->capture_default_str();
  sub->add_option("--temperature", o->temperature,
                  "Sampling temperature (0 = greedy); any of --temperature, "
                  "--top-p, --seed switches from greedy to sampling")
      ->check(cliNumber(0, kMaxTemperature))
      ->capture_default_str();
  sub->add_option("--top-p", o->topP,
                  "Nucleus sampling: keep the most likely tokens whose mass "
                  "reaches P, in (0, 1]")
      ->check(cliNumber(0, 1, /*loOpen=*/true))
      ->capture_default_str();
  sub->add_option("--seed", o->seed,
                  "Seed of the sampler's PRNG (xoshiro256**): same seed, "
                  "same tokens on every machine")
      ->check(cliInt(0))
      ->capture_default_str();
  sub->add_flag("--ignore-eos", o->ignoreEos,
                "Generate --max-new tokens even past an eos id (timing runs, "
                "tests; finish reason `length`)");
  sub->add_flag("--greedy", o->greedy,
                "Always pick the most likely token (the default when no "
                "sampling option is given)");
  sub->add_option("--dump-logits", o->dumpLogits,
                  "Write safetensors FILE with `logits` F32 [positions, "
                  "vocab] (every prompt position, then every generated token "
                  "fed back) and `tokens` I64 (prompt + generated)");
  sub->callback([o, sub, &rc] {
    // A rank other than 0 of several may leave the request out: it adopts
    // rank 0's (agreeOnRequest).
    check(!o->tokens.empty() || !o->prompt.empty() ||
              (o->dist.world > 1 && o->dist.rank > 0),
          "give the prompt with --tokens 1,2,3 or --prompt TEXT");
    rc = runAsRank(o->dist, o->engine, [&] { return runCommand(*o, *sub); });
  });
}

} // namespace glm::rt
