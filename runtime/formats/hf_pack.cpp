//===- hf_pack.cpp - Hugging Face checkpoints as a Pack -------------------===//
//
// Reads what save_pretrained writes: config.json plus model.safetensors or a
// sharded model.safetensors.index.json, with BF16/F16/F32 weights or the
// official FP8 release (E4M3 weights with a companion F32
// `<module>.weight_scale_inv` of [ceil(out/128), ceil(in/128)] block scales:
// W = q * scale[o >> 7, i >> 7]). The scale tensors are part of their
// weight's byte ranges, not weights of their own. A bare directory of
// safetensors files opens too (no config, no architecture check).
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/base/strings.h"
#include "runtime/base/hash.h"
#include "runtime/base/numeric.h"
#include "runtime/formats/pack_checks.h"
#include "runtime/formats/pack_impl.h"
#include "runtime/formats/safetensors.h"
#include "runtime/model/hf_names.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

namespace fs = std::filesystem;

namespace glm::rt {

namespace {

constexpr const char *kScaleSuffix = "_scale_inv"; // weight -> weight_scale_inv
constexpr int64_t kFp8Block = 128;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

class HfPack final : public Pack {
public:
  HfPack(const std::string &dir, const PackOpenOptions &opt);

  PackLayout layout() const override { return PackLayout::HuggingFace; }
  const std::vector<WeightInfo> &weights() const override { return weights_; }
  std::vector<float> dequantize(const std::string &name) const override;
  VerifyReport verify(
      const std::function<void(uint64_t, uint64_t)> &progress) const override;
  std::string indexHash() const override { return indexHash_; }

private:
  void listFromCheckpoint();
  void listFromConfig();
  void checkArchitecture(VerifyReport &r) const;
  const TensorView *scaleOf(const std::string &name) const {
    return ckpt_ ? ckpt_->find(name + kScaleSuffix) : nullptr;
  }

  std::optional<SafetensorsCheckpoint> ckpt_; // absent: config-only pack
  std::vector<WeightInfo> weights_;
  std::string indexHash_;
};

HfPack::HfPack(const std::string &dir, const PackOpenOptions &opt) {
  dir_ = dir;
  fs::path p(dir);
  if (fs::exists(p / "config.json"))
    config_ = loadModelConfig((p / "config.json").string());
  bool anyWeights = false;
  for (const auto &de : fs::directory_iterator(p))
    if (de.is_regular_file() &&
        (de.path().extension() == ".safetensors" ||
         de.path().filename() == "model.safetensors.index.json"))
      anyWeights = true;
  if (anyWeights) {
    ckpt_ = SafetensorsCheckpoint::open(dir, opt.indexOnly);
    listFromCheckpoint();
  } else {
    check(opt.indexOnly && config_.has_value(), dir,
          ": no safetensors weights here (config.json and tokenizer only: an "
          "index-only Hugging Face pack); compile it with --index-only, or "
          "write the weights with glmc synth without --index-only");
    listFromConfig();
  }
  std::sort(weights_.begin(), weights_.end(),
            [](const WeightInfo &a, const WeightInfo &b) {
              return a.layer != b.layer ? a.layer < b.layer : a.name < b.name;
            });

  // What a plan depends on: config bytes and every weight's placement.
  Xxh64 h;
  if (config_)
    h.update(config_->rawJson.data(), config_->rawJson.size());
  for (const auto &w : weights_) {
    std::ostringstream os;
    os << w.name << '|' << weightFormatName(w.format) << '|'
       << shapeStr(w.shape);
    for (const auto &r : w.ranges)
      os << '|' << r.file << '@' << r.offset << '+' << r.length << r.role;
    os << '\n';
    std::string s = os.str();
    h.update(s.data(), s.size());
  }
  indexHash_ = hex64(h.digest());
}

void HfPack::listFromCheckpoint() {
  for (const std::string &name : ckpt_->names()) {
    const TensorView &t = ckpt_->get(name);
    // A block-scale companion belongs to its weight.
    if (endsWith(name, std::string(".weight") + kScaleSuffix) &&
        ckpt_->find(name.substr(0, name.size() - std::strlen(kScaleSuffix))))
      continue;
    WeightInfo w;
    HfTensorSpec parts = parseHfTensorName(name);
    w.name = name;
    w.shape = t.shape;
    w.layer = parts.layer;
    w.expert = parts.expert;
    w.projection = parts.projection;
    w.shared = parts.shared;
    switch (t.dtype) {
    case DType::BF16:
      w.format = WeightFormat::BF16;
      break;
    case DType::F16:
      w.format = WeightFormat::F16;
      break;
    case DType::F8_E4M3:
      w.format = WeightFormat::Fp8Block;
      break;
    default:
      w.format = WeightFormat::F32; // F32, and other dtypes read as F32
      break;
    }
    w.ranges.push_back({ckpt_->fileOf(name), t.fileOffset, t.byteSize,
                        w.format == WeightFormat::Fp8Block ? "fp8" : "data"});
    if (const TensorView *s = scaleOf(name))
      w.ranges.push_back(
          {ckpt_->fileOf(s->name), s->fileOffset, s->byteSize, "scale"});
    weights_.push_back(std::move(w));
  }
}

void HfPack::listFromConfig() {
  for (const HfTensorSpec &s : expectedHfTensors(*config_)) {
    WeightInfo w;
    w.name = s.name;
    w.shape = s.shape;
    w.format = endsWith(s.name, "e_score_correction_bias") ? WeightFormat::F32
                                                           : WeightFormat::BF16;
    w.layer = s.layer;
    w.expert = s.expert;
    w.projection = s.projection;
    w.shared = s.shared;
    weights_.push_back(std::move(w));
  }
}

std::vector<float> HfPack::dequantize(const std::string &name) const {
  const WeightInfo &w = get(name);
  check(ckpt_.has_value(), dir_, ": ", name,
        ": this index-only pack holds no weight bytes");
  const TensorView &t = ckpt_->get(name);
  check(t.data != nullptr, dir_, "/", ckpt_->fileOf(name), ": tensor ", name,
        ": weight bytes are absent (index-only file)");
  if (w.format != WeightFormat::Fp8Block) {
    // Vectors (norms, biases) are checked on load as verify checks them:
    // nothing else vouches for their bytes, and they are small.
    if (t.shape.size() == 1) {
      std::string bad = checkPlainValues(name, t);
      check(bad.empty(), dir_, "/", ckpt_->fileOf(name), ": ", name, ": ",
            bad, " (glmc verify ", dir_, " lists every damaged tensor)");
    }
    return t.toFloat();
  }

  const TensorView *s = scaleOf(name);
  check(s != nullptr, dir_, "/", ckpt_->fileOf(name), ": tensor ", name,
        " is F8_E4M3 but has no ", name, kScaleSuffix,
        " block-scale tensor; the checkpoint is incomplete");
  check(t.shape.size() == 2, dir_, ": tensor ", name,
        ": FP8 block weights must be 2-D, found ", shapeStr(t.shape));
  const int64_t out = t.shape[0], in = t.shape[1];
  const int64_t sr = ceilDiv(out, kFp8Block), sc = ceilDiv(in, kFp8Block);
  check(s->shape == std::vector<int64_t>{sr, sc}, dir_, "/",
        ckpt_->fileOf(s->name), ": tensor ", s->name, ": shape ",
        shapeStr(s->shape), " but weight ", shapeStr(t.shape),
        " needs 128x128 block scales ", shapeStr({sr, sc}));
  std::vector<float> scale = s->toFloat();
  std::vector<float> outW((size_t)(out * in));
  for (int64_t o = 0; o < out; ++o) {
    const float *srow = scale.data() + (o / kFp8Block) * sc;
    const uint8_t *q = t.data + o * in;
    float *dst = outW.data() + o * in;
    for (int64_t i = 0; i < in; ++i)
      dst[i] = e4m3ToFloat(q[i]) * srow[i / kFp8Block];
  }
  return outW;
}

void HfPack::checkArchitecture(VerifyReport &r) const {
  if (!config_)
    return; // a bare directory of safetensors: nothing to check against
  auto fileOf = [&](const std::string &n) {
    return ckpt_ && ckpt_->find(n) ? ckpt_->fileOf(n) : std::string();
  };
  std::map<std::string, const HfTensorSpec *> expected;
  std::vector<HfTensorSpec> specs = expectedHfTensors(*config_);
  for (const auto &s : specs) {
    expected[s.name] = &s;
    const WeightInfo *w = find(s.name);
    ++r.checkedObjects;
    if (!w) {
      r.issues.push_back({"", s.name, 0,
                          "missing: config.json expects this tensor with "
                          "shape " +
                              shapeStr(s.shape)});
      continue;
    }
    if (w->shape != s.shape)
      r.issues.push_back({fileOf(s.name), s.name,
                          w->ranges.empty() ? 0 : w->ranges[0].offset,
                          "shape " + shapeStr(w->shape) +
                              " but config.json expects " + shapeStr(s.shape)});
  }
  // Real checkpoints ship the MTP layers and (Flash) the vision tower
  // beside the causal LM: recognised by name, skipped, and said so.
  ExtraTensorNotes extra;
  for (const auto &w : weights_) {
    if (expected.count(w.name) || extra.add(*config_, w.name, w.layer))
      continue;
    r.issues.push_back(
        {fileOf(w.name), w.name, w.ranges.empty() ? 0 : w.ranges[0].offset,
         "unexpected tensor: not part of " +
             (config_->architecture.empty() ? config_->modelType
                                            : config_->architecture) +
             " for this config.json (wrong config, or a damaged "
             "checkpoint)"});
  }
  extra.report(r);
  checkMtpLayers(*this, *config_, r);
}

VerifyReport
HfPack::verify(const std::function<void(uint64_t, uint64_t)> &progress) const {
  VerifyReport r;
  checkArchitecture(r);
  verifyCommon(r);
  if (!ckpt_)
    return r;
  // Hugging Face checkpoints carry no checksum: the headers are structure,
  // every tensor is value-checked (finite; norms and biases in range).
  for (size_t i = 0; i < ckpt_->files().size(); ++i)
    coverSafetensorsLayout(r, ckpt_->relNames()[i], *ckpt_->files()[i]);
  if (fs::exists(fs::path(dir_) / "model.safetensors.index.json"))
    r.cover("model.safetensors.index.json", 0,
            fs::file_size(fs::path(dir_) / "model.safetensors.index.json"),
            CheckKind::Structure);
  uint64_t total = 0, done = 0;
  for (const auto &w : weights_)
    total += w.bytes();
  for (const auto &w : weights_) {
    const std::string file = ckpt_->fileOf(w.name);
    const TensorView &t = ckpt_->get(w.name);
    ++r.checkedObjects;
    if (t.data == nullptr) {
      done += w.bytes();
      continue; // header-only file: shapes were checked above
    }
    if (w.format == WeightFormat::Fp8Block) {
      const TensorView *s = scaleOf(w.name);
      if (!s) {
        r.issues.push_back({file, w.name, t.fileOffset,
                            "F8_E4M3 weight without its " + w.name +
                                kScaleSuffix + " block scales"});
        done += w.bytes();
        continue;
      }
      int64_t out = t.shape.size() == 2 ? t.shape[0] : -1;
      int64_t in = t.shape.size() == 2 ? t.shape[1] : -1;
      std::vector<int64_t> want = {ceilDiv(out, kFp8Block),
                                   ceilDiv(in, kFp8Block)};
      if (out < 0 || s->shape != want) {
        r.issues.push_back({ckpt_->fileOf(s->name), s->name, s->fileOffset,
                            "block scales of shape " + shapeStr(s->shape) +
                                " do not fit weight " + shapeStr(t.shape)});
        done += w.bytes();
        continue;
      }
    }
    // No checksums in HF checkpoints: catch NaN/Inf, the usual symptom of a
    // damaged or mis-converted tensor.
    try {
      std::vector<float> v = dequantize(w.name);
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < v.size(); ++i)
        if (!std::isfinite(v[i]) && bad++ == 0)
          first = i;
      if (bad)
        r.issues.push_back(
            {file, w.name, t.fileOffset + first * dtypeSize(t.dtype),
             std::to_string(bad) + " non-finite values (first at element " +
                 std::to_string(first) + ")"});
    } catch (const Error &e) {
      r.issues.push_back({file, w.name, t.fileOffset, e.what()});
    }
    if (t.dtype != DType::F8_E4M3) {
      std::string bad = checkPlainValues(w.name, t);
      if (!bad.empty())
        r.issues.push_back({file, w.name, t.fileOffset, bad});
    }
    for (const ByteRange &br : w.ranges)
      r.cover(br.file, br.offset, br.length, CheckKind::Value);
    r.checkedBytes += w.bytes();
    done += w.bytes();
    if (progress)
      progress(done, total);
  }
  return r;
}

} // namespace

std::unique_ptr<Pack> openHfPack(const std::string &dir,
                                 const PackOpenOptions &opt) {
  return std::make_unique<HfPack>(dir, opt);
}

} // namespace glm::rt
