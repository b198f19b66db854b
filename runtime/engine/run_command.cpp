//===- run_command.cpp - `glm-engine run`: prompt in, tokens out ----------===//
#include "runtime/engine/commands.h"

#include "runtime/base/error.h"
#include "runtime/dist/comm.h"
#include "runtime/engine/dist_options.h"
#include "runtime/engine/setup.h"
#include "runtime/formats/safetensors.h"
#ifdef GLM_HAVE_TOKENIZER
#include "runtime/serve/tokenizer.h"
#endif

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <sstream>

namespace glm::rt {
namespace {

struct RunOptions {
  EngineOptions engine;
  DistOptions dist; // --rank/--world/--coordinator (dist_options.h)
  std::string tokens, prompt, dumpLogits;
  int64_t maxNew = 16;
  double temperature = 1.0, topP = 1.0;
  uint64_t seed = 0;
  bool greedy = false;
};

std::vector<int64_t> parseTokens(const std::string &s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    check(used > 0 && used == item.size(), "--tokens: \"", item,
          "\" is not an integer token id (expected e.g. --tokens 1,2,3)");
    out.push_back(v);
  }
  check(!out.empty(), "--tokens is empty (expected e.g. --tokens 1,2,3)");
  return out;
}

int runCommand(const RunOptions &o, const CLI::App &sub) {
  LoadedEngine le = loadEngine(o.engine);
  std::vector<int64_t> prompt;
  if (!o.tokens.empty()) {
    prompt = parseTokens(o.tokens);
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
  sp.greedy = !sampling;
  sp.temperature = o.temperature;
  sp.topP = o.topP;
  sp.seed = o.seed;
  sp.maxNew = o.maxNew;
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
                  "an eos id of the plan/config")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--temperature", o->temperature,
                  "Sampling temperature (0 = greedy); any of --temperature, "
                  "--top-p, --seed switches from greedy to sampling")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--top-p", o->topP,
                  "Nucleus sampling: keep the most likely tokens whose mass "
                  "reaches P, in (0, 1]")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  sub->add_option("--seed", o->seed,
                  "Seed of the sampler's PRNG (xoshiro256**): same seed, "
                  "same tokens on every machine")
      ->capture_default_str();
  sub->add_flag("--greedy", o->greedy,
                "Always pick the most likely token (the default when no "
                "sampling option is given)");
  sub->add_option("--dump-logits", o->dumpLogits,
                  "Write safetensors FILE with `logits` F32 [positions, "
                  "vocab] (every prompt position, then every generated token "
                  "fed back) and `tokens` I64 (prompt + generated)");
  sub->callback([o, sub, &rc] {
    check(!o->tokens.empty() || !o->prompt.empty(),
          "give the prompt with --tokens 1,2,3 or --prompt TEXT");
    rc = runAsRank(o->dist, o->engine, [&] { return runCommand(*o, *sub); });
  });
}

} // namespace glm::rt
