//===- pack_commands.cpp - glmc synth / quantize / verify / dequant -------===//
//
// The pack tools: they read and write weight bytes, unlike `glmc compile`,
// and need no MLIR. Each command validates its arguments before doing work
// and reports bad packs by file, tensor (or expert/projection/half), offset.
//
//===----------------------------------------------------------------------===//
#include "compiler/driver/commands.h"
#include "compiler/packtools/packtools.h"
#include "runtime/base/error.h"
#include "runtime/base/cli_numbers.h"
#include "runtime/base/files.h"
#include "runtime/base/progress.h"
#include "runtime/formats/pack.h"
#include "runtime/formats/safetensors.h"
#ifdef GLM_HAVE_TOKENIZER
#include "runtime/serve/chat.h"
#include "runtime/serve/tokenizer.h"
#endif

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

namespace fs = std::filesystem;
using glm::rt::check;
using glm::rt::fail;
using glm::rt::cliInt;
using glm::rt::cliNumber;
using glm::rt::parseIntIn;

namespace glmc {
namespace {

std::vector<int> parseWidthList(const std::string &s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    out.push_back((int)parseIntIn(item, 1, 8, "--widths \"" + s + "\""));
  }
  check(!out.empty(), "--widths: empty list");
  return out;
}

/// Quantizes the HF model in `src` (or, index-only, just its config) into
/// `out` with the given layout.
void quantizeInto(const std::string &src, const std::string &layout,
                  const std::string &out, const QuantizeOptions &opt) {
  glm::rt::PackOpenOptions popt;
  popt.indexOnly = opt.indexOnly;
  std::unique_ptr<glm::rt::Pack> source;
  glm::rt::ModelConfig cfg = glm::rt::loadModelConfig(src);
  if (!opt.indexOnly) {
    source = glm::rt::Pack::open(src, popt);
    check(source->layout() == glm::rt::PackLayout::HuggingFace, src,
          ": quantize needs a Hugging Face checkpoint (BF16/F32/FP8), found a ",
          glm::rt::packLayoutName(source->layout()), " pack");
  }
  fs::create_directories(out);
  if (layout == "exl3")
    quantizeToExl3(cfg, source.get(), out, opt);
  else if (layout == "exlr8")
    quantizeToExlr8(cfg, source.get(), out, opt);
  else
    fail("--layout must be hf, exl3 or exlr8, got \"", layout, "\"");
  // Tokenizer and template travel with the pack (writers own config.json,
  // which carries their quantization metadata, so it is not overwritten).
  for (const char *f : {"tokenizer.json", "tokenizer_config.json",
                        "generation_config.json", "chat_template.jinja",
                        "special_tokens_map.json"}) {
    fs::path from = fs::path(src) / f, to = fs::path(out) / f;
    if (fs::exists(from) && !fs::exists(to))
      fs::copy_file(from, to);
  }
}

} // namespace

void addSynthCommand(CLI::App &app, int &rc) {
  auto *cmd = app.add_subcommand(
      "synth",
      "Write a random GLM-5.3-shaped model: config.json with the real key "
      "names, a byte-level BPE tokenizer, and weights (random BF16 for hf; "
      "quantized by glmc's own trellis encoder for exl3/exlr8). --preset tiny "
      "is a few MB and runs anywhere; glm53 is the full geometry (use "
      "--index-only: config, manifests and indexes, no weight bytes).");
  struct Args {
    std::string preset = "tiny", layout = "exlr8", out;
    uint64_t seed = 1;
    bool indexOnly = false;
    int threads = 0, layers = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--preset", a->preset, "tiny | glm53 | flash-tiny | flash")
      ->check(CLI::IsMember({"tiny", "glm53", "flash-tiny", "flash"}))
      ->capture_default_str();
  cmd->add_option("--layout", a->layout, "hf | exl3 | exlr8")
      ->check(CLI::IsMember({"hf", "exl3", "exlr8"}))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "random seed of weights and signs")
      ->check(cliInt(0))
      ->capture_default_str();
  cmd->add_flag("--index-only", a->indexOnly,
                "write config, tokenizer, manifests and indexes but no weight "
                "bytes (what the compiler needs)");
  cmd->add_option("--threads", a->threads, "encoder threads (0 = all cores)")
      ->check(cliInt(0, 4096));
  cmd->add_option("--layers", a->layers,
                  "keep only the first N decoder layers (0 = all): the full "
                  "width on fewer layers, e.g. a glm53 step that fits one GPU")
      ->check(cliInt(0, 4096));
  cmd->add_option("-o,--output", a->out, "output directory")->required();
  cmd->callback([a, &rc] {
    auto t0 = std::chrono::steady_clock::now();
    check(!(presetIsFullSize(a->preset) && !a->indexOnly &&
            a->layout != "hf"),
          "--preset ", a->preset, " writes ",
          a->preset == "flash" ? "~150 GB" : "~800 GB",
          " of quantized weights; add --index-only (the compiler needs only "
          "config, manifests and indexes)");
    const bool flash = a->preset.rfind("flash", 0) == 0;
    if (a->layout == "hf") {
      writeRandomHfModel(a->preset, a->seed, a->out, a->indexOnly, a->layers);
    } else {
      // Quantize from a random HF model written beside the pack.
      std::string hfDir = a->out + ".hf-source";
      writeRandomHfModel(a->preset, a->seed, hfDir, a->indexOnly, a->layers);
      QuantizeOptions opt;
      opt.seed = 1234;
      opt.threads = a->threads;
      opt.indexOnly = a->indexOnly;
      if (a->layout == "exl3")
        opt.codebook = "mcg";
      // GLM-5.3-Flash's EXL3 release is a MUL1 "mosaic": whole layers at
      // K2 or K3 (2.05 / 3.05 bpw with the side vectors).
      if (a->layout == "exl3" && flash) {
        opt.codebook = "mul1";
        opt.layerBits = {2, 3};
      }
      quantizeInto(hfDir, a->layout, a->out, opt);
      fs::remove_all(hfDir);
    }
    // Header-only files of an index-only pack are not the release's files.
    if (!a->indexOnly)
      writeHashSidecars(a->out);
    double secs = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
    std::printf("synth: wrote %s pack (preset %s%s) to %s in %.1f s\n",
                a->layout.c_str(), a->preset.c_str(),
                a->indexOnly ? ", index only" : "", a->out.c_str(), secs);
    rc = 0;
  });
}

void addQuantizeCommand(CLI::App &app, int &rc) {
  auto *cmd = app.add_subcommand(
      "quantize",
      "Quantize a Hugging Face checkpoint (BF16/F32 or the official FP8 "
      "release) with glmc's Hessian-free trellis encoder into an EXL3 or "
      "exlr8 v2 pack.");
  struct Args {
    std::string src, layout, out, widths, codebook = "mcg";
    double bits = 0;
    uint64_t seed = 1234;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("SRC", a->src, "Hugging Face model directory")->required();
  cmd->add_option("--layout", a->layout, "exl3 | exlr8")
      ->check(CLI::IsMember({"exl3", "exlr8"}))
      ->required();
  cmd->add_option("--bits", a->bits,
                  "exl3: one width K for every tensor (1..8; 1.5/2.5/3.5 with "
                  "--codebook mul1); default: a mixed-K allocation")
      ->check(cliNumber(1, 8));
  cmd->add_option("--widths", a->widths,
                  "exlr8: widths to store every half at (default 2,3,4)");
  cmd->add_option("--codebook", a->codebook, "exl3: 3inst | mcg | mul1")
      ->check(CLI::IsMember({"3inst", "mcg", "mul1"}))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "sign seed")
      ->check(cliInt(0))
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "encoder threads (0 = all cores)")
      ->check(cliInt(0, 4096));
  cmd->add_option("-o,--output", a->out, "output directory")->required();
  cmd->callback([a, &rc] {
    QuantizeOptions opt;
    opt.bits = a->bits;
    opt.codebook = a->codebook;
    opt.seed = a->seed;
    opt.threads = a->threads;
    if (!a->widths.empty())
      opt.widths = parseWidthList(a->widths);
    check(!(a->layout == "exlr8" && a->bits > 0),
          "--bits is for exl3; exlr8 takes --widths");
    check(!(a->layout == "exl3" && !a->widths.empty()),
          "--widths is for exlr8; exl3 takes --bits");
    quantizeInto(a->src, a->layout, a->out, opt);
    writeHashSidecars(a->out);
    std::printf("quantize: wrote %s pack to %s\n", a->layout.c_str(),
                a->out.c_str());
    rc = 0;
  });
}

/// The files glm-engine reads besides the weights and config.json: where
/// the pack has no SHA-256 sidecars, parsing them (the tokenizer against the
/// model's vocabulary, the chat template as the server compiles it) is the
/// check they get, and a damaged one is named here rather than at serve.
static void verifySideFiles(const glm::rt::Pack &pack,
                            glm::rt::VerifyReport &rep) {
  const fs::path dir(pack.dir());
  auto parsed = [&](const std::string &rel,
                    const std::function<void(const std::string &)> &parse) {
    fs::path p = dir / rel;
    std::error_code ec;
    if (!fs::exists(p, ec))
      return;
    rep.checkedObjects++;
    try {
      parse(p.string());
      rep.cover(rel, 0, fs::file_size(p, ec), glm::rt::CheckKind::Structure);
    } catch (const glm::rt::Error &e) {
      rep.issues.push_back({rel, "whole file", 0, e.what()});
    }
  };
  for (const char *rel : {"generation_config.json", "tokenizer_config.json",
                          "special_tokens_map.json"})
    parsed(rel, [](const std::string &path) {
      std::string text = glm::rt::readFileBounded(
          path, glm::rt::kMaxConfigBytes, "a model side file");
      try {
        (void)nlohmann::json::parse(text);
      } catch (const nlohmann::json::exception &e) {
        fail(path, ": not valid JSON (", e.what(), ")");
      }
    });
#ifdef GLM_HAVE_TOKENIZER
  const int64_t vocab = pack.config() ? pack.config()->vocabSize : 0;
  parsed("tokenizer.json", [&](const std::string &path) {
    (void)glm::rt::Tokenizer::fromFile(path, vocab);
  });
  parsed("chat_template.jinja", [](const std::string &path) {
    glm::rt::ChatTemplate(glm::rt::readFileBounded(
                              path, glm::rt::kMaxTemplateBytes,
                              "the chat template"),
                          path);
  });
#endif
}

/// The closing summary: how many bytes of the pack each kind of check
/// covered and how many no check covers (naming those files), so a pack whose
/// format leaves bytes unchecksummed says so instead of passing silently.
static void printCoverage(const std::string &dir,
                          const glm::rt::VerifyReport &report) {
  using glm::rt::CheckKind;
  glm::rt::CoverageSummary s = glm::rt::summarizeCoverage(dir, report);
  auto pct = [&](uint64_t n) {
    return s.totalBytes ? 100.0 * (double)n / (double)s.totalBytes : 0.0;
  };
  std::printf("coverage: %llu bytes in %llu files:",
              (unsigned long long)s.totalBytes, (unsigned long long)s.files);
  for (int k = 0; k < glm::rt::kCheckKinds; ++k)
    std::printf("%s %s %llu (%.2f%%)", k ? "," : "",
                glm::rt::checkKindName(CheckKind(k)),
                (unsigned long long)s.byKind[k], pct(s.byKind[k]));
  std::printf("; no check %llu (%.2f%%, of which %llu padding no reader "
              "uses)\n",
              (unsigned long long)s.unchecked, pct(s.unchecked),
              (unsigned long long)s.uncheckedPadding);
  const size_t shown = std::min<size_t>(s.uncheckedFiles.size(), 8);
  for (size_t i = 0; i < shown; ++i)
    std::printf("  unchecked: %s (%llu bytes)\n",
                s.uncheckedFiles[i].first.c_str(),
                (unsigned long long)s.uncheckedFiles[i].second);
  if (s.uncheckedFiles.size() > shown)
    std::printf("  unchecked: ... and %zu more files\n",
                s.uncheckedFiles.size() - shown);
}

void addVerifyCommand(CLI::App &app, int &rc) {
  auto *cmd = app.add_subcommand(
      "verify",
      "Check a pack: every checksum, shape and dtype against config and "
      "manifest (or, without config.json, checksums and internal "
      "consistency). Exit 0 only when the pack is whole; damage is reported "
      "by file, tensor (expert/projection/half) and offset.");
  struct Args {
    std::string dir, manifest;
    int width = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("DIR", a->dir, "pack directory")->required();
  cmd->add_option("--manifest", a->manifest,
                  "exlr8: manifest name (e.g. mixed) or file to check against");
  cmd->add_option("--width", a->width, "exlr8: check every half at width K")
      ->check(cliInt(1, 8));
  cmd->callback([a, &rc] {
    glm::rt::PackOpenOptions opt;
    opt.manifest = a->manifest;
    opt.width = a->width;
    auto pack = glm::rt::Pack::open(a->dir, opt);
    uint64_t total = 0;
    std::unique_ptr<glm::rt::Progress> bar;
    auto report = pack->verify([&](uint64_t done, uint64_t all) {
      if (!bar) {
        total = all;
        bar = std::make_unique<glm::rt::Progress>("verify", total, "objects");
      }
      bar->update(done);
    });
    if (bar)
      bar->finish();
    verifySideFiles(*pack, report);
    for (auto &n : report.notes)
      std::printf("note: %s\n", n.c_str());
    for (auto &i : report.issues)
      std::printf("DAMAGED %s: %s at offset %llu: %s\n", i.file.c_str(),
                  i.object.c_str(), (unsigned long long)i.offset,
                  i.message.c_str());
    std::printf("verify: %s pack %s: %llu objects, %.1f MB checked, %zu "
                "problem(s)\n",
                glm::rt::packLayoutName(pack->layout()), a->dir.c_str(),
                (unsigned long long)report.checkedObjects,
                report.checkedBytes / 1e6, report.issues.size());
    printCoverage(a->dir, report);
    rc = report.ok() ? 0 : 2;
  });
}

void addDequantCommand(CLI::App &app, int &rc) {
  auto *cmd = app.add_subcommand(
      "dequant",
      "Write one reconstructed weight as F32 in Hugging Face orientation "
      "[out, in] under its name. Works on a directory of bare safetensors "
      "files (EXL3 tensors found by their .trellis/.suh/.svh siblings); exlr8 "
      "expert projections are assembled from their halves at the manifest's "
      "widths (or --width).");
  struct Args {
    std::string dir, tensor, manifest, out;
    int width = 0;
    bool list = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("DIR", a->dir, "pack directory")->required();
  cmd->add_option("--tensor", a->tensor,
                  "HF weight name, e.g. model.layers.1.mlp.experts.3.up_proj."
                  "weight (EXL3 keys without .weight are accepted)");
  cmd->add_flag("--list", a->list, "list the pack's weights and exit");
  cmd->add_option("--manifest", a->manifest,
                  "exlr8: manifest name (mixed -> manifests/exlr8-manifest-"
                  "mixed.json) or file");
  cmd->add_option("--width", a->width, "exlr8: every half at width K")
      ->check(cliInt(1, 8));
  cmd->add_option("-o,--output", a->out, "output .safetensors file");
  cmd->callback([a, &rc] {
    glm::rt::PackOpenOptions opt;
    opt.manifest = a->manifest;
    opt.width = a->width;
    auto pack = glm::rt::Pack::open(a->dir, opt);
    if (a->list) {
      for (auto &w : pack->weights()) {
        std::printf("%-64s %-9s", w.name.c_str(),
                    glm::rt::weightFormatName(w.format));
        for (size_t i = 0; i < w.shape.size(); ++i)
          std::printf("%s%lld", i ? "x" : " ", (long long)w.shape[i]);
        std::printf("  %.2f bpw\n", w.bitsPerWeight());
      }
      rc = 0;
      return;
    }
    check(!a->tensor.empty(), "dequant: give --tensor NAME (or --list)");
    check(!a->out.empty(), "dequant: give -o OUT.safetensors");
    std::string name = a->tensor;
    if (!pack->find(name) && pack->find(name + ".weight"))
      name += ".weight";
    const auto &info = pack->get(name);
    std::vector<float> w = pack->dequantize(name);
    glm::rt::SafetensorsWriter writer;
    writer.setMetadata("source", a->dir);
    writer.setMetadata("format", glm::rt::weightFormatName(info.format));
    writer.addF32(name, info.shape, w);
    writer.write(a->out);
    std::printf("dequant: %s [%s] -> %s\n", name.c_str(),
                glm::rt::weightFormatName(info.format), a->out.c_str());
    rc = 0;
  });
}

} // namespace glmc
