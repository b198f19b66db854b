//===- exl3_pack.cpp - the EXL3 (exllamav3) pack reader -------------------===//
//
// Reads one directory of safetensors files in exllamav3's layout: every
// quantized linear `<key>` is a `.trellis` int16 [k/16, n/16, 16K] tensor with
// fp16 `.suh`/`.svh` side vectors (or legacy `.su`/`.sv` packed signs) and an
// optional `.mcg`/`.mul1` codebook marker; everything else is a plain tensor.
// Works without config.json (shapes then come from the padded side vectors).
// Facts: shared/specs/exl3-format.md §2, §4, §5, §6, §9.
//
//===----------------------------------------------------------------------===//
#include "runtime/formats/exl3_pack.h"
#include "runtime/base/strings.h"

#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/hash.h"
#include "runtime/base/numeric.h"
#include "runtime/formats/pack_checks.h"
#include "runtime/formats/pack_impl.h"
#include "runtime/formats/safetensors.h"
#include "runtime/model/hf_names.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace fs = std::filesystem;
using nlohmann::json;

namespace glm::rt {

const char *const kExl3SiblingSuffixes[7] = {".trellis", ".suh", ".svh", ".su",
                                            ".sv",      ".mcg", ".mul1"};

bool exl3WidthFromLastDim(int64_t lastDim, trellis::Width &w) {
  if (lastDim >= 16 && lastDim <= 128 && lastDim % 16 == 0) {
    w = trellis::Width::bits((int)(lastDim / 16));
    return true;
  }
  // K = KA + 1/2 (fork extension, MUL1 only): 16K = 24, 40, 56.
  if (lastDim == 24 || lastDim == 40 || lastDim == 56) {
    w = trellis::Width{(int)(lastDim / 8)};
    return true;
  }
  return false;
}

namespace {

/// Layer / expert / projection of a weight from its HF name.
void setPosition(WeightInfo &w) {
  HfTensorSpec p = parseHfTensorName(w.name);
  w.layer = p.layer;
  w.expert = p.expert;
  w.projection = p.projection;
  w.shared = p.shared;
}

int64_t roundUp128(int64_t v) { return (v + 127) / 128 * 128; }

std::string readText(const fs::path &p) {
  return readFileBounded(p.string(), kMaxConfigBytes, "the model config");
}

ByteRange rangeOf(const SafetensorsCheckpoint &ck, const TensorView &t,
                  const std::string &role) {
  ByteRange r;
  r.file = ck.fileOf(t.name);
  r.offset = t.fileOffset;
  r.length = t.byteSize;
  r.role = role;
  return r;
}

/// One quantized linear: the tensors that make it up.
struct Linear {
  std::string key;
  const TensorView *trellis = nullptr, *suh = nullptr, *svh = nullptr,
                   *su = nullptr, *sv = nullptr, *mcg = nullptr,
                   *mul1 = nullptr;
  int64_t k = 0, n = 0; // padded in/out
  trellis::Width width;
  trellis::Codebook cb = trellis::Codebook::ThreeInst;
};

/// What a WeightInfo is made of.
struct Entry {
  bool quantized = false;
  Linear lin;
  const TensorView *dense = nullptr;
};

/// fp16 side vector -> floats, or legacy packed signs (bit set = -1).
std::vector<float> sideVector(const TensorView *half, const TensorView *signs,
                              int64_t len) {
  std::vector<float> out((size_t)len);
  if (half) {
    std::vector<uint16_t> raw((size_t)len);
    std::memcpy(raw.data(), half->data, (size_t)len * 2);
    for (int64_t i = 0; i < len; ++i)
      out[i] = halfToFloat(raw[i]);
  } else {
    std::vector<uint16_t> raw((size_t)(len / 16));
    std::memcpy(raw.data(), signs->data, raw.size() * 2);
    for (int64_t i = 0; i < len; ++i)
      out[i] = (raw[i / 16] >> (i % 16)) & 1 ? -1.0f : 1.0f;
  }
  return out;
}

class Exl3Pack final : public Pack {
public:
  Exl3Pack(const std::string &dir, const PackOpenOptions &opt);

  PackLayout layout() const override { return PackLayout::Exl3; }
  const std::vector<WeightInfo> &weights() const override { return weights_; }
  std::vector<float> dequantize(const std::string &name) const override;
  VerifyReport verify(const std::function<void(uint64_t, uint64_t)> &progress)
      const override;
  std::string indexHash() const override;

private:
  void readQuantConfig();
  void collect(std::vector<std::string> &problems);
  void checkAgainstConfig();
  void checkTensorStorage();
  const Entry &entryOf(const std::string &name) const;

  SafetensorsCheckpoint ckpt_;
  bool indexOnly_ = false;
  json qcfg_; // merged quantization_config (null when absent)
  std::vector<WeightInfo> weights_;
  std::vector<Entry> entries_; // parallel to weights_
  std::map<std::string, size_t> byName_;
  /// Consistency findings that do not stop reading (config, metadata).
  std::vector<VerifyIssue> deferred_;
  ExtraTensorNotes extra_; // vision / MTP tensors recognised at open
};

Exl3Pack::Exl3Pack(const std::string &dir, const PackOpenOptions &opt) {
  dir_ = dir;
  indexOnly_ = opt.indexOnly;
  fs::path cfgPath = fs::path(dir) / "config.json";
  if (fs::exists(cfgPath)) {
    try {
      config_ = loadModelConfig(cfgPath.string());
    } catch (const Error &e) {
      // A foreign architecture still dequantizes; it cannot be compiled.
      deferred_.push_back({"config.json", "config", 0,
                           std::string(e.what()) +
                               " (shapes taken from the EXL3 side vectors)"});
    }
  }
  readQuantConfig();
  ckpt_ = SafetensorsCheckpoint::open(dir, opt.indexOnly);
  std::vector<std::string> problems;
  collect(problems);
  if (!problems.empty()) {
    std::ostringstream os;
    os << dir << ": not a valid EXL3 pack (" << problems.size()
       << " problem(s)):";
    for (size_t i = 0; i < problems.size() && i < 12; ++i)
      os << "\n  " << problems[i];
    if (problems.size() > 12)
      os << "\n  ... and " << problems.size() - 12 << " more";
    os << "\nRe-export the listed tensors (or restore the damaged files).";
    throw Error(os.str());
  }
  if (config_)
    checkAgainstConfig();
  checkTensorStorage();
}

void Exl3Pack::readQuantConfig() {
  fs::path cfgPath = fs::path(dir_) / "config.json";
  fs::path qPath = fs::path(dir_) / "quantization_config.json";
  if (fs::exists(cfgPath)) {
    json root;
    try {
      root = json::parse(readText(cfgPath));
    } catch (const json::exception &e) {
      fail(cfgPath.string(), ": not valid JSON (", e.what(), ")");
    }
    if (root.is_object() && root.contains("quantization_config")) {
      check(root["quantization_config"].is_object(), cfgPath.string(),
            ": quantization_config must be an object");
      qcfg_ = root["quantization_config"];
    }
  }
  if (fs::exists(qPath)) {
    json q;
    try {
      q = json::parse(readFileBounded(qPath.string(), kMaxQuantConfigBytes,
                                      "the EXL3 quantization config"));
    } catch (const json::exception &e) {
      fail(qPath.string(), ": not valid JSON (", e.what(), ")");
    }
    check(q.is_object(), qPath.string(), ": top level must be an object");
    if (!qcfg_.is_object())
      qcfg_ = json::object();
    for (auto it = q.begin(); it != q.end(); ++it) {
      auto mine = qcfg_.find(it.key());
      if (mine != qcfg_.end() && *mine != it.value() &&
          it.key() != "tensor_storage")
        deferred_.push_back(
            {"quantization_config.json", it.key(), 0,
             "differs from config.json quantization_config: " +
                 it.value().dump() + " vs " + mine->dump()});
      qcfg_[it.key()] = it.value();
    }
  }
  if (qcfg_.is_object()) {
    auto m = qcfg_.find("quant_method");
    if (m != qcfg_.end() && (!m->is_string() || m->get<std::string>() != "exl3"))
      deferred_.push_back({"config.json", "quantization_config.quant_method",
                           0, "is " + m->dump() + ", expected \"exl3\""});
  }
}

void Exl3Pack::collect(std::vector<std::string> &problems) {
  std::vector<std::string> names = ckpt_.names();
  auto find = [&](const std::string &n) { return ckpt_.find(n); };
  auto where = [&](const TensorView &t) {
    return ckpt_.fileOf(t.name) + ": tensor " + t.name;
  };

  // Keys of quantized linears: every `<key>.trellis`.
  std::set<std::string> keys, siblings;
  for (auto &n : names)
    if (endsWith(n, ".trellis"))
      keys.insert(n.substr(0, n.size() - 8));
  for (auto &key : keys)
    for (const char *s : kExl3SiblingSuffixes)
      siblings.insert(key + s);
  // Side tensors without their trellis: usually a missing shard.
  for (auto &n : names) {
    if (siblings.count(n))
      continue;
    for (const char *s : kExl3SiblingSuffixes)
      if (endsWith(n, s) && std::string(s) != ".trellis") {
        problems.push_back(ckpt_.fileOf(n) + ": tensor " + n + " has no " +
                           n.substr(0, n.size() - std::strlen(s)) +
                           ".trellis (a shard may be missing)");
        siblings.insert(n);
      }
  }

  std::vector<std::pair<WeightInfo, Entry>> items;
  for (auto &key : keys) {
    Linear L;
    L.key = key;
    L.trellis = find(key + ".trellis");
    L.suh = find(key + ".suh");
    L.svh = find(key + ".svh");
    L.su = find(key + ".su");
    L.sv = find(key + ".sv");
    L.mcg = find(key + ".mcg");
    L.mul1 = find(key + ".mul1");
    const TensorView &t = *L.trellis;
    size_t before = problems.size();
    bool widthOk = false;
    if (t.dtype != DType::I16 || t.shape.size() != 3) {
      problems.push_back(where(t) + " must be I16 of rank 3 [k/16, n/16, 16K]" +
                         ", found " + dtypeName(t.dtype) + " " +
                         shapeStr(t.shape));
    } else {
      L.k = t.shape[0] * 16;
      L.n = t.shape[1] * 16;
      if (L.k <= 0 || L.n <= 0 || L.k % 128 || L.n % 128)
        problems.push_back(where(t) + " shape " + shapeStr(t.shape) +
                           ": k = " + std::to_string(L.k) +
                           " and n = " + std::to_string(L.n) +
                           " must be positive multiples of 128");
      if (!exl3WidthFromLastDim(t.shape[2], L.width))
        problems.push_back(
            where(t) + " last dim " + std::to_string(t.shape[2]) +
            " is not 16·K for K in 1..8 (or 24/40/56 = K 1.5/2.5/3.5 with "
            ".mul1)");
      else
        widthOk = true;
    }
    if (L.mcg && L.mul1)
      problems.push_back(ckpt_.fileOf(key + ".mul1") + ": " + key +
                         " has both .mcg and .mul1 markers (one codebook "
                         "per tensor)");
    for (const TensorView *m : {L.mcg, L.mul1})
      if (m && (m->dtype != DType::I32 || m->numel() != 1 ||
                m->shape.size() > 1))
        problems.push_back(where(*m) + " must be an I32 scalar marker, found " +
                           dtypeName(m->dtype) + " " + shapeStr(m->shape));
    L.cb = L.mul1  ? trellis::Codebook::Mul1
           : L.mcg ? trellis::Codebook::Mcg
                   : trellis::Codebook::ThreeInst;
    if (widthOk && L.width.isHalfInteger() && L.cb != trellis::Codebook::Mul1)
      problems.push_back(where(t) + ": K " + std::to_string(L.width.value()) +
                         " (last dim " + std::to_string(t.shape[2]) +
                         ") exists only with the mul1 codebook, and " + key +
                         ".mul1 is absent");
    // Side vectors: fp16 suh/svh, or legacy packed signs su/sv.
    auto side = [&](const TensorView *h, const TensorView *sg,
                    const char *hName, const char *sName, int64_t len) {
      if (h && sg) {
        problems.push_back(ckpt_.fileOf(h->name) + ": " + key + " has both " +
                           hName + " and legacy " + sName);
      } else if (h) {
        if (h->dtype != DType::F16 || h->shape.size() != 1 ||
            (len > 0 && h->shape[0] != len))
          problems.push_back(where(*h) + " must be F16 [" +
                             std::to_string(len) + "], found " +
                             dtypeName(h->dtype) + " " + shapeStr(h->shape));
      } else if (sg) {
        if (sg->dtype != DType::I16 || (len > 0 && sg->numel() * 16 != len))
          problems.push_back(where(*sg) + " (packed signs) must be I16 with " +
                             std::to_string(len / 16) + " words, found " +
                             dtypeName(sg->dtype) + " " + shapeStr(sg->shape));
      } else {
        problems.push_back(ckpt_.fileOf(t.name) + ": " + key + " has no " +
                           hName + " (or legacy " + sName +
                           "): a shard may be missing");
      }
    };
    side(L.suh, L.su, ".suh", ".su", L.k);
    side(L.svh, L.sv, ".svh", ".sv", L.n);
    if (problems.size() != before)
      continue;

    WeightInfo w;
    w.name = key + ".weight";
    w.shape = {L.n, L.k};
    w.format = WeightFormat::Trellis;
    setPosition(w);
    TrellisPart part;
    part.width = L.width;
    part.codebook = L.cb;
    part.e4m3 = false;
    part.order = trellis::TileOrder::RowMajor;
    part.half = -1;
    part.outCount = L.n;
    part.inCount = L.k;
    part.trellisBytes = rangeOf(ckpt_, t, "trellis");
    if (L.suh)
      part.sideBytes.push_back(rangeOf(ckpt_, *L.suh, "suh"));
    else
      part.sideBytes.push_back(rangeOf(ckpt_, *L.su, "su"));
    if (L.svh)
      part.sideBytes.push_back(rangeOf(ckpt_, *L.svh, "svh"));
    else
      part.sideBytes.push_back(rangeOf(ckpt_, *L.sv, "sv"));
    w.ranges.push_back(part.trellisBytes);
    for (auto &r : part.sideBytes)
      w.ranges.push_back(r);
    if (L.mcg)
      w.ranges.push_back(rangeOf(ckpt_, *L.mcg, "mcg"));
    if (L.mul1)
      w.ranges.push_back(rangeOf(ckpt_, *L.mul1, "mul1"));
    w.parts.push_back(std::move(part));
    Entry e;
    e.quantized = true;
    e.lin = L;
    items.emplace_back(std::move(w), std::move(e));
  }

  for (auto &n : names) {
    if (siblings.count(n) || keys.count(n))
      continue;
    const TensorView &t = ckpt_.get(n);
    WeightInfo w;
    w.name = n;
    w.shape = t.shape;
    switch (t.dtype) {
    case DType::F32:
      w.format = WeightFormat::F32;
      break;
    case DType::F16:
      w.format = WeightFormat::F16;
      break;
    case DType::BF16:
      w.format = WeightFormat::BF16;
      break;
    default:
      problems.push_back(where(t) + " has dtype " + dtypeName(t.dtype) +
                         "; unquantized EXL3 tensors must be F16, BF16 or F32");
      continue;
    }
    setPosition(w);
    w.ranges.push_back(rangeOf(ckpt_, t, "data"));
    Entry e;
    e.dense = &t;
    items.emplace_back(std::move(w), std::move(e));
  }
  if (keys.empty() && problems.empty())
    problems.push_back("no <key>.trellis tensor found: not an EXL3 pack");

  std::stable_sort(items.begin(), items.end(), [](auto &a, auto &b) {
    if (a.first.layer != b.first.layer)
      return a.first.layer < b.first.layer;
    return a.first.name < b.first.name;
  });
  for (auto &it : items) {
    byName_[it.first.name] = weights_.size();
    weights_.push_back(std::move(it.first));
    entries_.push_back(std::move(it.second));
  }
}

void Exl3Pack::checkAgainstConfig() {
  // The causal LM's tensors, and the MTP layers' (optional: a pack may
  // leave them out; checked alike when stored).
  std::map<std::string, HfTensorSpec> expected, mtp;
  try {
    for (auto &s : expectedHfTensors(*config_))
      expected[s.name] = s;
    for (auto &s : expectedMtpTensors(*config_))
      mtp[s.name] = s;
  } catch (const Error &e) {
    deferred_.push_back({"config.json", "config", 0,
                         std::string(e.what()) +
                             " (tensors not checked against config.json)"});
    return;
  }
  for (size_t i = 0; i < weights_.size(); ++i) {
    WeightInfo &w = weights_[i];
    auto it = expected.find(w.name);
    const HfTensorSpec *spec = it == expected.end() ? nullptr : &it->second;
    // MTP layers (stored at mtp_bits) and the vision tower ship beside
    // the causal LM: recognised and reported as notes; the MTP layers'
    // tensors are then checked like the model's (and get their HF shape).
    if (!spec && extra_.add(*config_, w.name, w.layer)) {
      auto m = mtp.find(w.name);
      if (m == mtp.end())
        continue;
      spec = &m->second;
    }
    if (!spec) {
      deferred_.push_back({w.ranges[0].file, w.name, w.ranges[0].offset,
                           "is not a tensor of this " + config_->modelType +
                               " config (config.json)"});
      continue;
    }
    const std::vector<int64_t> &hf = spec->shape;
    if (!entries_[i].quantized) {
      if (hf != w.shape)
        deferred_.push_back({w.ranges[0].file, w.name, w.ranges[0].offset,
                             "shape " + shapeStr(w.shape) +
                                 " but config.json implies " + shapeStr(hf)});
      continue;
    }
    const Linear &L = entries_[i].lin;
    if (hf.size() != 2 || roundUp128(hf[0]) != L.n ||
        roundUp128(hf[1]) != L.k) {
      deferred_.push_back(
          {w.ranges[0].file, L.key + ".trellis", w.ranges[0].offset,
           "stores a padded " + std::to_string(L.k) + " (in) x " +
               std::to_string(L.n) + " (out) matrix but config.json implies " +
               "[out, in] = " + shapeStr(hf)});
      continue;
    }
    // The unpadded HF shape; padding is dropped on dequantize.
    w.shape = hf;
    w.parts[0].outCount = hf[0];
    w.parts[0].inCount = hf[1];
  }
  for (auto &[name, spec] : expected)
    if (!byName_.count(name))
      deferred_.push_back({"", name, 0,
                           "is missing (config.json implies shape " +
                               shapeStr(spec.shape) + ")"});
}

void Exl3Pack::checkTensorStorage() {
  if (!qcfg_.is_object())
    return;
  auto ts = qcfg_.find("tensor_storage");
  if (ts == qcfg_.end())
    return;
  const char *src = "quantization_config.json";
  if (!ts->is_object()) {
    deferred_.push_back({src, "tensor_storage", 0, "must be an object"});
    return;
  }
  std::string cbName;
  if (qcfg_.contains("codebook") && qcfg_["codebook"].is_string())
    cbName = qcfg_["codebook"].get<std::string>();
  for (auto it = ts->begin(); it != ts->end(); ++it) {
    const std::string &module = it.key();
    const json &m = it.value();
    if (!m.is_object())
      continue;
    auto wi = byName_.find(module + ".weight");
    const Entry *e = wi == byName_.end() ? nullptr : &entries_[wi->second];
    bool isExl3 = m.value("quant_format", std::string()) == "exl3" ||
                  m.contains("bits_per_weight");
    if (isExl3 && (!e || !e->quantized)) {
      deferred_.push_back({src, module, 0,
                           "tensor_storage lists an EXL3 tensor but " +
                               module + ".trellis is not in the pack"});
      continue;
    }
    if (!e || !e->quantized)
      continue;
    const Linear &L = e->lin;
    std::string file = ckpt_.fileOf(L.trellis->name);
    auto bpw = m.find("bits_per_weight");
    if (bpw != m.end() &&
        (!bpw->is_number() || bpw->get<double>() != L.width.value()))
      deferred_.push_back({file, L.key + ".trellis", L.trellis->fileOffset,
                           "trellis last dim " +
                               std::to_string(L.trellis->shape[2]) +
                               " means K = " + std::to_string(L.width.value()) +
                               " but tensor_storage says bits_per_weight " +
                               bpw->dump()});
    if (m.contains("mcg_multiplier") != (L.mcg != nullptr) ||
        m.contains("mul1_multiplier") != (L.mul1 != nullptr))
      deferred_.push_back({file, L.key, L.trellis->fileOffset,
                           std::string("codebook marker is ") +
                               trellis::codebookName(L.cb) +
                               " but tensor_storage says otherwise"});
    // stored_tensors: {name: {shape, ...}} (or a list of {name, shape}).
    auto st = m.find("stored_tensors");
    if (st == m.end())
      continue;
    auto checkShape = [&](const std::string &name, const json &d) {
      if (!d.is_object() || !d.contains("shape") || !d["shape"].is_array())
        return;
      const TensorView *t = ckpt_.find(name);
      if (!t) {
        deferred_.push_back({src, name, 0,
                             "listed in tensor_storage but not in the pack"});
        return;
      }
      std::vector<int64_t> shape;
      for (auto &v : d["shape"])
        shape.push_back(v.is_number_integer() ? v.get<int64_t>() : -1);
      if (shape != t->shape)
        deferred_.push_back({ckpt_.fileOf(name), name, t->fileOffset,
                             "shape " + shapeStr(t->shape) +
                                 " but tensor_storage says " +
                                 shapeStr(shape)});
    };
    if (st->is_object())
      for (auto s = st->begin(); s != st->end(); ++s)
        checkShape(s.key(), s.value());
    else if (st->is_array())
      for (auto &s : *st)
        if (s.is_object() && s.contains("name") && s["name"].is_string())
          checkShape(s["name"].get<std::string>(), s);
  }
}

const Entry &Exl3Pack::entryOf(const std::string &name) const {
  auto it = byName_.find(name);
  if (it == byName_.end()) {
    auto k = byName_.find(name + ".weight"); // EXL3 key without .weight
    check(k != byName_.end(), dir_, ": no weight named \"", name,
          "\" in this EXL3 pack (see glmc dequant --list)");
    it = k;
  }
  return entries_[it->second];
}

std::vector<float> Exl3Pack::dequantize(const std::string &name) const {
  const Entry &e = entryOf(name);
  const WeightInfo &w = weights_[&e - entries_.data()];
  check(!indexOnly_, dir_, ": ", w.name,
        ": the pack was opened index-only; its weight bytes are not read");
  if (!e.quantized) {
    check(e.dense->data != nullptr, ckpt_.fileOf(w.name), ": tensor ", w.name,
          " has no data (header-only file)");
    // Vectors (norms, biases) are checked on load as verify checks them:
    // EXL3 has no checksum, and they are small.
    if (e.dense->shape.size() == 1) {
      std::string bad = checkPlainValues(w.name, *e.dense);
      check(bad.empty(), ckpt_.fileOf(w.name), ": ", w.name, ": ", bad,
            " (glmc verify ", dir_, " lists every damaged tensor)");
    }
    return e.dense->toFloat();
  }
  const Linear &L = e.lin;
  for (const TensorView *t : {L.trellis, L.suh ? L.suh : L.su,
                              L.svh ? L.svh : L.sv})
    check(t->data != nullptr, ckpt_.fileOf(t->name), ": tensor ", t->name,
          " has no data (header-only file)");
  size_t words = (size_t)L.trellis->numel();
  std::vector<uint16_t> tiles(words);
  std::memcpy(tiles.data(), L.trellis->data, words * 2);
  std::vector<float> q((size_t)(L.k * L.n));
  trellis::decodeMatrix(tiles.data(), L.k, L.n, L.width, L.cb, false,
                        trellis::TileOrder::RowMajor, q.data());
  std::vector<float> suh = sideVector(L.suh, L.su, L.k);
  std::vector<float> svh = sideVector(L.svh, L.sv, L.n);
  trellis::reconstructInPlace(q.data(), L.k, L.n, suh.data(), svh.data());
  // q is in x out (padded); the HF weight is [out, in] unpadded.
  int64_t out = w.shape[0], in = w.shape[1];
  std::vector<float> r((size_t)(out * in));
  for (int64_t i = 0; i < in; ++i) {
    const float *row = q.data() + i * L.n;
    for (int64_t o = 0; o < out; ++o)
      r[(size_t)(o * in + i)] = row[o];
  }
  return r;
}

VerifyReport
Exl3Pack::verify(const std::function<void(uint64_t, uint64_t)> &progress)
    const {
  VerifyReport rep;
  rep.issues = deferred_;
  extra_.report(rep);
  if (config_)
    checkMtpLayers(*this, *config_, rep);
  verifyCommon(rep);
  // EXL3 has no checksum: headers are structure, every tensor is decoded
  // and value-checked (finite; norms and biases in range; codebook markers
  // exact).
  for (size_t i = 0; i < ckpt_.files().size(); ++i)
    coverSafetensorsLayout(rep, ckpt_.relNames()[i], *ckpt_.files()[i]);
  // Parsed at open: every entry names a tensor of the file it maps to.
  if (fs::exists(fs::path(dir_) / "model.safetensors.index.json"))
    rep.cover("model.safetensors.index.json", 0,
              fs::file_size(fs::path(dir_) / "model.safetensors.index.json"),
              CheckKind::Structure);
  if (fs::exists(fs::path(dir_) / "quantization_config.json"))
    rep.cover("quantization_config.json", 0,
              fs::file_size(fs::path(dir_) / "quantization_config.json"),
              CheckKind::Structure);
  uint64_t total = weights_.size();
  for (size_t i = 0; i < weights_.size(); ++i) {
    const WeightInfo &w = weights_[i];
    const Entry &e = entries_[i];
    ++rep.checkedObjects;
    rep.checkedBytes += w.bytes();
    if (progress)
      progress(i, total);
    if (indexOnly_)
      continue;
    for (const ByteRange &br : w.ranges)
      rep.cover(br.file, br.offset, br.length, CheckKind::Value);
    if (!e.quantized && e.dense && e.dense->data) {
      std::string bad = checkPlainValues(w.name, *e.dense);
      if (!bad.empty()) {
        rep.issues.push_back(
            {ckpt_.fileOf(w.name), w.name, e.dense->fileOffset, bad});
        continue;
      }
    }
    if (e.quantized) {
      const Linear &L = e.lin;
      if (L.mcg || L.mul1) {
        const TensorView *m = L.mcg ? L.mcg : L.mul1;
        int32_t v;
        std::memcpy(&v, m->data, 4);
        int32_t want = L.mcg ? kExl3McgMarker : kExl3Mul1Marker;
        if (v != want)
          rep.issues.push_back(
              {ckpt_.fileOf(m->name), m->name, m->fileOffset,
               "marker value " + std::to_string(v) + ", expected " +
                   std::to_string(want) +
                   " (packs made with another multiplier decode wrongly)"});
      }
      // Side vectors first: a bad element is located exactly.
      bool sideOk = true;
      for (const TensorView *t : {L.suh, L.svh}) {
        if (!t)
          continue;
        std::vector<float> v = t->toFloat();
        for (size_t j = 0; j < v.size(); ++j)
          if (!std::isfinite(v[j])) {
            rep.issues.push_back(
                {ckpt_.fileOf(t->name), t->name, t->fileOffset + 2 * j,
                 "element " + std::to_string(j) +
                     " is not finite (damaged side vector)"});
            sideOk = false;
            break;
          }
      }
      if (!sideOk)
        continue;
    }
    std::vector<float> v;
    try {
      v = dequantize(w.name);
    } catch (const Error &err) {
      rep.issues.push_back({w.ranges[0].file, w.name, w.ranges[0].offset,
                            std::string("cannot decode: ") + err.what()});
      continue;
    }
    for (size_t j = 0; j < v.size(); ++j)
      if (!std::isfinite(v[j])) {
        uint64_t off = w.ranges[0].offset;
        if (!e.quantized)
          off += j * dtypeSize(e.dense->dtype);
        rep.issues.push_back(
            {w.ranges[0].file, w.name, off,
             "reconstructed element " + std::to_string(j) +
                 " is not finite (damaged data)"});
        break;
      }
  }
  if (progress)
    progress(total, total);
  return rep;
}

std::string Exl3Pack::indexHash() const {
  std::vector<std::string> names = ckpt_.names();
  std::sort(names.begin(), names.end());
  Xxh64 h;
  auto put = [&](const std::string &s) { h.update(s.data(), s.size() + 1); };
  for (auto &n : names) {
    const TensorView &t = ckpt_.get(n);
    put(n);
    put(dtypeName(t.dtype));
    for (int64_t d : t.shape)
      h.update(&d, sizeof d);
    put(ckpt_.fileOf(n));
    h.update(&t.fileOffset, sizeof t.fileOffset);
  }
  put(qcfg_.is_null() ? std::string() : qcfg_.dump());
  return hex64(h.digest());
}

} // namespace

std::unique_ptr<Pack> openExl3Pack(const std::string &dir,
                                   const PackOpenOptions &opt) {
  return std::make_unique<Exl3Pack>(dir, opt);
}

} // namespace glm::rt
