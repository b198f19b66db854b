//===- pack.cpp - layout detection and the layout-independent Pack parts --===//
//
// Pack::open looks at a directory once, decides which layout it holds and
// hands it to that layout's reader (pack_impl.h). Detection reads only names
// and headers: exlr8 has experts/ or dense/ folders of exlr8-* files, EXL3
// says so in its quantization config or stores `.trellis` tensors, anything
// else with config.json or safetensors files is a Hugging Face checkpoint.
//
//===----------------------------------------------------------------------===//
#include "runtime/formats/pack.h"
#include "runtime/base/strings.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/hash.h"
#include "runtime/formats/pack_impl.h"
#include "runtime/formats/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace glm::rt {

const char *packLayoutName(PackLayout l) {
  switch (l) {
  case PackLayout::HuggingFace:
    return "hf";
  case PackLayout::Exl3:
    return "exl3";
  case PackLayout::Exlr8:
    return "exlr8";
  }
  return "?";
}

const char *weightFormatName(WeightFormat f) {
  switch (f) {
  case WeightFormat::F32:
    return "f32";
  case WeightFormat::F16:
    return "f16";
  case WeightFormat::BF16:
    return "bf16";
  case WeightFormat::Fp8Block:
    return "fp8-block";
  case WeightFormat::Fp8Row:
    return "fp8-row";
  case WeightFormat::Mxfp8:
    return "mxfp8";
  case WeightFormat::Int4:
    return "int4";
  case WeightFormat::Trellis:
    return "trellis";
  }
  return "?";
}

uint64_t WeightInfo::bytes() const {
  uint64_t n = 0;
  for (const auto &r : ranges)
    n += r.length;
  return n;
}

double WeightInfo::bitsPerWeight() const {
  if (format == WeightFormat::Trellis && !parts.empty()) {
    double weighted = 0, count = 0;
    for (const auto &p : parts) {
      double n = (double)p.outCount * (double)p.inCount;
      weighted += n * p.width.value();
      count += n;
    }
    return count > 0 ? weighted / count : 0.0;
  }
  double numel = 1;
  for (int64_t d : shape)
    numel *= (double)d;
  uint64_t b = bytes();
  if (b > 0 && numel > 0)
    return 8.0 * (double)b / numel; // includes scales of FP8/INT4 formats
  switch (format) {
  case WeightFormat::F32:
    return 32;
  case WeightFormat::F16:
  case WeightFormat::BF16:
    return 16;
  case WeightFormat::Int4:
    return 4;
  default:
    return 8;
  }
}

namespace {

bool hasPrefixedFile(const fs::path &dir, const std::string &prefix) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return false;
  for (const auto &de : fs::directory_iterator(dir, ec))
    if (de.path().filename().string().rfind(prefix, 0) == 0)
      return true;
  return false;
}

/// quantization_config.quant_method of config.json, or "".
std::string quantMethod(const fs::path &configPath) {
  if (!fs::exists(configPath))
    return "";
  std::string text = readFileBounded(configPath.string(), kMaxConfigBytes,
                                     "the model config");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception &e) {
    fail(configPath.string(), ": not valid JSON (", e.what(), ")");
  }
  if (!j.is_object())
    return "";
  auto q = j.find("quantization_config");
  if (q == j.end() || !q->is_object())
    return "";
  auto m = q->find("quant_method");
  return m != q->end() && m->is_string() ? m->get<std::string>() : "";
}

std::vector<fs::path> safetensorsFiles(const fs::path &dir) {
  std::vector<fs::path> out;
  for (const auto &de : fs::directory_iterator(dir))
    if (de.is_regular_file() && de.path().extension() == ".safetensors")
      out.push_back(de.path());
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

PackLayout Pack::detect(const std::string &dir) {
  fs::path p(dir);
  check(fs::exists(p), dir, ": no such directory");
  check(fs::is_directory(p), dir,
        ": not a directory (a pack is a directory: config.json with "
        "safetensors files, or exlr8's experts/ and dense/ folders)");
  if (hasPrefixedFile(p / "experts", "exlr8-") ||
      hasPrefixedFile(p / "dense", "exlr8-"))
    return PackLayout::Exlr8;
  bool hasConfig = fs::exists(p / "config.json");
  if (hasConfig && quantMethod(p / "config.json") == "exl3")
    return PackLayout::Exl3;
  if (fs::exists(p / "quantization_config.json"))
    return PackLayout::Exl3;
  std::vector<fs::path> files = safetensorsFiles(p);
  // Without a config saying so, an EXL3 tensor shows by its `.trellis` part.
  for (const auto &f : files) {
    auto sf = SafetensorsFile::open(f.string(), /*allowTruncatedData=*/true);
    for (const auto &t : sf->tensors())
      if (endsWith(t.name, ".trellis"))
        return PackLayout::Exl3;
  }
  check(hasConfig || !files.empty(), dir,
        ": no pack found; expected config.json with *.safetensors (Hugging "
        "Face or EXL3), quantization_config.json (EXL3), or experts/ and "
        "dense/ folders of exlr8-* files (exlr8)");
  return PackLayout::HuggingFace;
}

std::unique_ptr<Pack> Pack::open(const std::string &dir,
                                 const PackOpenOptions &opt) {
  switch (detect(dir)) {
  case PackLayout::Exlr8:
    return openExlr8Pack(dir, opt);
  case PackLayout::Exl3:
    return openExl3Pack(dir, opt);
  case PackLayout::HuggingFace:
    return openHfPack(dir, opt);
  }
  fail(dir, ": unknown pack layout");
}

const WeightInfo *Pack::find(const std::string &name) const {
  const auto &ws = weights();
  std::call_once(byNameOnce_, [&] {
    byName_.reserve(ws.size());
    for (size_t i = 0; i < ws.size(); ++i)
      byName_.emplace(ws[i].name, i);
  });
  auto it = byName_.find(name);
  return it == byName_.end() ? nullptr : &ws[it->second];
}

const WeightInfo &Pack::get(const std::string &name) const {
  const WeightInfo *w = find(name);
  check(w != nullptr, dir_, ": ", packLayoutName(layout()),
        " pack has no weight named ", name,
        " (glmc verify lists what the pack holds)");
  return *w;
}

std::string Pack::configHash() const {
  if (!config_)
    return "";
  return hex64(xxh64(config_->rawJson.data(), config_->rawJson.size()));
}

} // namespace glm::rt
