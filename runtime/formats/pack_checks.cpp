//===- pack_checks.cpp - checks the pack layouts share --------------------===//
#include "runtime/formats/pack_checks.h"

#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/numeric.h"
#include "runtime/base/parallel.h"
#include "runtime/base/sha256.h"
#include "runtime/base/strings.h"
#include "runtime/formats/exlr8_layout.h"
#include "runtime/model/hf_names.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace fs = std::filesystem;

namespace glm::rt {
namespace {

double elementAt(const TensorView &t, int64_t i) {
  const uint8_t *p = t.data + (uint64_t)i * dtypeSize(t.dtype);
  auto ld = [&](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (t.dtype) {
  case DType::F64: return ld(double());
  case DType::F32: return ld(float());
  case DType::F16: return halfToFloat(ld(uint16_t()));
  case DType::BF16: return bf16ToFloat(ld(uint16_t()));
  case DType::F8_E4M3: return e4m3ToFloat(*p);
  case DType::I64: return (double)ld(int64_t());
  case DType::U64: return (double)ld(uint64_t());
  case DType::I32: return ld(int32_t());
  case DType::U32: return ld(uint32_t());
  case DType::I16: return ld(int16_t());
  case DType::U16: return ld(uint16_t());
  case DType::I8: return ld(int8_t());
  case DType::U8: case DType::BOOL: return *p;
  default: return std::nan("");
  }
}

/// Vectors that act as a norm weight or an additive bias: +-kMaxNormValue.
/// GLM-5.3-Flash adds KDA's dt_bias, the mHC maps' base (a bias) and scale
/// (3 multipliers of the maps' logits) and the k-pool's position bias.
bool isNormOrBias(const std::string &n) {
  return endsWith(n, "norm.weight") || endsWith(n, "norm.bias") ||
         endsWith(n, "e_score_correction_bias") || endsWith(n, ".bias") ||
         endsWith(n, "dt_bias") || endsWith(n, "_base") ||
         (endsWith(n, "_scale") && n.find(".hc_") != std::string::npos) ||
         endsWith(n, "index_kpool_compress_ape");
}

} // namespace

const char *checkKindName(CheckKind k) {
  switch (k) {
  case CheckKind::Sha256: return "sha256 sidecar";
  case CheckKind::Xxh64: return "xxh64 checksum";
  case CheckKind::Value: return "value check";
  case CheckKind::Structure: return "structure";
  }
  return "?";
}

std::string checkPlainValues(const std::string &hfName, const TensorView &t) {
  if (!t.data)
    return "";
  // One bound per kind of tensor; the conv taps, hc_*_fn and the k-pool
  // gate are matrices like any other (finite, within fp16's range).
  const bool aLog = endsWith(hfName, "A_log");
  const bool norm = !aLog && isNormOrBias(hfName);
  const double limit = aLog ? kMaxALogValue
                       : norm ? kMaxNormValue
                              : kMaxPlainValue;
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    double v = elementAt(t, i);
    if (std::isfinite(v) && std::fabs(v) <= limit)
      continue;
    std::ostringstream os;
    os << "element " << i << " is " << v << "; a "
       << (aLog   ? "KDA A_log (exp(A_log) scales the forget gate)"
           : norm ? "norm weight or bias"
                  : "tensor stored without a checksum")
       << " must be finite and within +-" << limit
       << " (the bytes are damaged; re-download the file)";
    return os.str();
  }
  return "";
}

ExtraTensor classifyExtraTensor(const ModelConfig &cfg,
                                const std::string &hfName, int layer) {
  if (hfName.rfind("model.visual.", 0) == 0)
    return ExtraTensor::Vision;
  if (layer >= cfg.numLayers &&
      layer < cfg.numLayers + cfg.numNextnPredictLayers)
    return ExtraTensor::Mtp;
  return ExtraTensor::None;
}

bool ExtraTensorNotes::add(const ModelConfig &cfg, const std::string &hfName,
                           int layer) {
  switch (classifyExtraTensor(cfg, hfName, layer)) {
  case ExtraTensor::Vision:
    ++vision;
    return true;
  case ExtraTensor::Mtp:
    ++mtp;
    if (std::find(mtpLayers.begin(), mtpLayers.end(), layer) ==
        mtpLayers.end())
      mtpLayers.push_back(layer);
    return true;
  case ExtraTensor::None:
    return false;
  }
  return false;
}

void ExtraTensorNotes::report(VerifyReport &rep) const {
  if (vision)
    rep.notes.push_back(std::to_string(vision) +
                        " vision tensors (model.visual.*) recognised and "
                        "skipped: glmc does not run the vision tower yet");
  if (mtp) {
    std::string ls;
    for (int64_t l : mtpLayers)
      ls += (ls.empty() ? "" : ", ") + std::to_string(l);
    rep.notes.push_back(std::to_string(mtp) + " MTP tensors (layer " + ls +
                        ") recognised and skipped: the multi-token "
                        "prediction layer is not part of the causal LM");
  }
}

void checkMtpLayers(const Pack &pack, const ModelConfig &cfg,
                    VerifyReport &rep) {
  std::vector<HfTensorSpec> specs;
  try {
    specs = expectedMtpTensors(cfg);
  } catch (const Error &) {
    return; // a model_type without names: the architecture check says so
  }
  for (int64_t m = 0; m < cfg.numNextnPredictLayers; ++m) {
    const int layer = (int)(cfg.numLayers + m);
    std::vector<const HfTensorSpec *> mine;
    bool stored = false;
    for (const HfTensorSpec &s : specs)
      if (s.layer == layer) {
        mine.push_back(&s);
        stored |= pack.find(s.name) != nullptr;
      }
    if (!stored)
      continue; // the pack leaves this MTP layer out
    std::vector<HfTensorSpec> optional = optionalMtpTensors(cfg, m);
    for (const HfTensorSpec &s : optional)
      if (pack.find(s.name))
        mine.push_back(&s);
    for (const HfTensorSpec *s : mine) {
      ++rep.checkedObjects;
      const WeightInfo *w = pack.find(s->name);
      if (!w) {
        rep.issues.push_back(
            {"", s->name, 0,
             "missing: the pack stores MTP layer " + std::to_string(layer) +
                 " but not this tensor of it (config.json implies shape " +
                 shapeStr(s->shape) + ")"});
        continue;
      }
      if (w->shape != s->shape)
        rep.issues.push_back(
            {w->ranges.empty() ? std::string() : w->ranges[0].file, s->name,
             w->ranges.empty() ? 0 : w->ranges[0].offset,
             "shape " + shapeStr(w->shape) + " but config.json implies " +
                 shapeStr(s->shape) + " (MTP layer " + std::to_string(layer) +
                 ")"});
    }
  }
}

std::string checkSigns(const TensorView &t) {
  if (!t.data)
    return "";
  const int64_t n = t.numel();
  const size_t es = dtypeSize(t.dtype);
  // The exact encodings of +1 and -1 in the tensor's dtype.
  uint64_t plus = 0, minus = 0;
  switch (t.dtype) {
  case DType::F64: {
    double a = 1, b = -1;
    std::memcpy(&plus, &a, 8), std::memcpy(&minus, &b, 8);
    break;
  }
  case DType::F32: plus = 0x3F800000u, minus = 0xBF800000u; break;
  case DType::F16: plus = 0x3C00, minus = 0xBC00; break;
  case DType::BF16: plus = 0x3F80, minus = 0xBF80; break;
  case DType::I64: case DType::I32: case DType::I16: case DType::I8:
    plus = 1, minus = es == 8 ? ~0ull : ((1ull << (8 * es)) - 1);
    break;
  default:
    return std::string("dtype ") + dtypeName(t.dtype) +
           " cannot hold signs (expected a float or signed integer dtype)";
  }
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bits = 0;
    std::memcpy(&bits, t.data + (uint64_t)i * es, es);
    if (bits == plus || bits == minus)
      continue;
    std::ostringstream os;
    os << "element " << i << " is " << elementAt(t, i)
       << " (not exactly +1 or -1 in " << dtypeName(t.dtype)
       << "); the signs are damaged, re-download the file";
    return os.str();
  }
  return "";
}

void coverSafetensorsLayout(VerifyReport &rep, const std::string &rel,
                            const SafetensorsFile &f) {
  rep.cover(rel, 0, std::min(f.headerSize(), f.fileSize()),
            CheckKind::Structure);
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const TensorView &t : f.tensors())
    if (t.byteSize)
      spans.push_back({t.fileOffset, t.fileOffset + t.byteSize});
  std::sort(spans.begin(), spans.end());
  uint64_t at = f.headerSize();
  for (auto [b, e] : spans) {
    if (b > at)
      rep.padding.push_back({rel, at, b - at, CheckKind::Structure});
    at = std::max(at, e);
  }
  if (f.fileSize() > at)
    rep.padding.push_back({rel, at, f.fileSize() - at, CheckKind::Structure});
}

void Pack::verifyCommon(VerifyReport &rep) const {
  if (config_)
    rep.cover("config.json", 0, config_->rawJson.size(),
              CheckKind::Structure);
  const fs::path root(dir_), hashes = root / "hashes";
  std::error_code ec;
  const bool haveSidecars = fs::is_directory(hashes, ec);
  // hashes/<path>.sha256 holds the SHA-256 of <path> as 64 hex digits
  // (sha256sum's "HEX  NAME" line is accepted).
  struct Sidecar {
    std::string rel, sidecarRel, want, got, error;
    uint64_t size = 0, sidecarSize = 0;
  };
  std::vector<Sidecar> cars;
  for (auto it = haveSidecars ? fs::recursive_directory_iterator(hashes, ec)
                              : fs::recursive_directory_iterator();
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec)
      break;
    const fs::path &p = it->path();
    if (!it->is_regular_file() || p.extension() != ".sha256")
      continue;
    Sidecar s;
    fs::path relSide = p.lexically_relative(root);
    s.sidecarRel = relSide.string();
    fs::path target = p.lexically_relative(hashes);
    target.replace_extension();
    s.rel = target.string();
    cars.push_back(std::move(s));
  }
  std::sort(cars.begin(), cars.end(),
            [](const Sidecar &a, const Sidecar &b) { return a.rel < b.rel; });
  parallelFor((int64_t)cars.size(), 1, 0, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      Sidecar &s = cars[(size_t)i];
      try {
        std::string text = readFileBounded((root / s.sidecarRel).string(),
                                           4096, "a SHA-256 sidecar");
        s.sidecarSize = text.size();
        std::istringstream in(text);
        in >> s.want;
        std::transform(s.want.begin(), s.want.end(), s.want.begin(),
                       [](unsigned char c) { return (char)std::tolower(c); });
        bool hex = s.want.size() == 64 &&
                   s.want.find_first_not_of("0123456789abcdef") ==
                       std::string::npos;
        if (!hex) {
          s.error = "does not start with 64 hex digits (a SHA-256)";
          continue;
        }
        fs::path t = root / s.rel;
        std::error_code e2;
        if (!fs::is_regular_file(t, e2)) {
          s.error = "names " + s.rel + ", which is missing";
          continue;
        }
        s.size = fs::file_size(t, e2);
        s.got = sha256FileHex(t.string());
      } catch (const Error &err) {
        s.error = err.what();
      }
    }
  });
  for (const Sidecar &s : cars) {
    rep.checkedObjects++;
    if (!s.error.empty()) {
      rep.issues.push_back({s.sidecarRel, "sha256 sidecar", 0, s.error});
      continue;
    }
    rep.cover(s.sidecarRel, 0, s.sidecarSize, CheckKind::Sha256);
    rep.cover(s.rel, 0, s.size, CheckKind::Sha256);
    rep.checkedBytes += s.size;
    if (s.got != s.want)
      rep.issues.push_back(
          {s.rel, "whole file", 0,
           "SHA-256 " + s.got + " differs from " + s.want + " in " +
               s.sidecarRel + ": the file is damaged; re-download " + s.rel});
  }

  // set_id (exlr8 releases): the weight set's identity over every file's
  // path, size and SHA-256; recomputed from the files as they are, so an
  // added, removed or altered file (or a stale set_id) shows.
  const fs::path setId = root / exlr8::setIdFile();
  if (!fs::is_regular_file(setId, ec))
    return;
  rep.checkedObjects++;
  std::vector<exlr8::SetIdEntry> set;
  std::set<std::string> withSidecar;
  bool complete = true;
  for (const Sidecar &s : cars) {
    withSidecar.insert(fs::path(s.rel).lexically_normal().string());
    if (!s.error.empty())
      complete = false;
    else
      set.push_back({s.rel, s.size, s.got});
  }
  std::vector<exlr8::SetIdEntry> unlisted; // files without a sidecar
  for (auto it = fs::recursive_directory_iterator(root, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec)
      break;
    const std::string name = it->path().filename().string();
    const std::string rel = it->path().lexically_relative(root).string();
    if (it->is_directory() && (it->path() == hashes || name[0] == '.')) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file() || name[0] == '.' || rel == exlr8::setIdFile())
      continue;
    if (!haveSidecars) {
      unlisted.push_back({rel, (uint64_t)fs::file_size(it->path(), ec), ""});
      continue;
    }
    if (!withSidecar.count(rel)) {
      complete = false;
      rep.issues.push_back({rel, "set_id", 0,
                            "no SHA-256 sidecar (hashes/" + rel +
                                ".sha256), so set_id cannot cover it: a file "
                                "that is not part of the release, or its "
                                "sidecar is missing"});
    }
  }
  std::string want;
  try {
    std::istringstream in(readFileBounded(setId.string(), 4096, "set_id"));
    in >> want;
  } catch (const Error &err) {
    rep.issues.push_back({exlr8::setIdFile(), "set_id", 0, err.what()});
    return;
  }
  rep.cover(exlr8::setIdFile(), 0, fs::file_size(setId, ec),
            CheckKind::Sha256);
  if (!complete)
    return; // the files above are already reported
  if (!haveSidecars) {
    // Without sidecars the files' own SHA-256 stand in for theirs; a match
    // vouches for every byte as the sidecars would.
    parallelFor((int64_t)unlisted.size(), 1, 0, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i)
        unlisted[(size_t)i].sha256 =
            sha256FileHex((root / unlisted[(size_t)i].rel).string());
    });
    set = unlisted;
  }
  const std::string got = exlr8::setIdOf(set);
  if (got == want && !haveSidecars)
    for (const exlr8::SetIdEntry &f : set)
      rep.cover(f.rel, 0, f.size, CheckKind::Sha256);
  if (got != want)
    rep.issues.push_back(
        {exlr8::setIdFile(), "set_id", 0,
         "set_id " + want + " but the pack's files give " + got +
             (haveSidecars
                  ? ": the weight set differs from the one released (a file "
                    "was added, removed or replaced together with its "
                    "sidecar); re-download the pack"
                  : ": a file differs from the release (damaged, added or "
                    "removed; without hashes/ the damaged file is not "
                    "named); re-download the pack")});
}

CoverageSummary summarizeCoverage(const std::string &dir,
                                  const VerifyReport &rep) {
  CoverageSummary sum;
  const fs::path root(dir);
  // Per file: boundary events of each kind (+1 at begin, -1 at end); kind
  // index kCheckKinds is padding.
  std::map<std::string, std::vector<std::tuple<uint64_t, int, int>>> ev;
  auto add = [&](const CoveredRange &r, int kind) {
    std::string f = fs::path(r.file).lexically_normal().string();
    ev[f].emplace_back(r.offset, kind, +1);
    ev[f].emplace_back(r.offset + r.length, kind, -1);
  };
  for (const CoveredRange &r : rep.covered)
    add(r, (int)r.kind);
  for (const CoveredRange &r : rep.padding)
    add(r, kCheckKinds);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec)
      break;
    std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory())
        it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file())
      continue;
    const uint64_t size = it->file_size(ec);
    const std::string rel = it->path().lexically_relative(root).string();
    sum.files++;
    sum.totalBytes += size;
    auto &e = ev[rel];
    std::sort(e.begin(), e.end());
    int active[kCheckKinds + 1] = {};
    uint64_t at = 0, none = 0, pad = 0;
    auto account = [&](uint64_t to) {
      to = std::min(to, size);
      if (to <= at)
        return;
      int k = 0;
      while (k <= kCheckKinds && active[k] == 0)
        ++k;
      if (k < kCheckKinds)
        sum.byKind[k] += to - at;
      else if (k == kCheckKinds)
        pad += to - at;
      else
        none += to - at;
      at = to;
    };
    for (auto &[off, kind, delta] : e) {
      account(off);
      active[kind] += delta;
    }
    account(size);
    sum.unchecked += none + pad;
    sum.uncheckedPadding += pad;
    if (none)
      sum.uncheckedFiles.push_back({rel, none});
  }
  std::stable_sort(sum.uncheckedFiles.begin(), sum.uncheckedFiles.end(),
                   [](auto &a, auto &b) { return a.second > b.second; });
  return sum;
}

} // namespace glm::rt
