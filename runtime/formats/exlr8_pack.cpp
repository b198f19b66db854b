//===- exlr8_pack.cpp - the exlr8 v2 pack reader ---------------------------===//
//
// Reads an exlr8 v2 pack (shared/specs/exlr8-format.md): per-layer index files
// with absolute offsets into `.kK` expert files, manifests choosing a width per
// half (gate/up) and per expert (down), dense records of formats 1-7, and the
// vocab file. Every dtype and shape is read from the headers; the geometry
// (experts, hidden, intermediate, halves) comes from the index tensors, the
// config only says which index row is the shared expert (GLM-5.3-Flash packs
// store it as expert E). Decoding follows §5 exactly, E4M3 rounding included.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/numbers.h"
#include "runtime/base/strings.h"
#include "runtime/base/hash.h"
#include "runtime/base/numeric.h"
#include "runtime/base/parallel.h"
#include "runtime/codec/trellis.h"
#include "runtime/formats/exlr8_layout.h"
#include "runtime/formats/pack_checks.h"
#include "runtime/formats/pack_impl.h"
#include "runtime/formats/safetensors.h"
#include "runtime/model/hf_names.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

namespace fs = std::filesystem;

namespace glm::rt {
namespace {

using namespace exlr8;
namespace tr = trellis;

//===----------------------------------------------------------------------===//
// Element access on any stored dtype
//===----------------------------------------------------------------------===//

bool isIntDType(DType t) {
  switch (t) {
  case DType::I64: case DType::U64: case DType::I32: case DType::U32:
  case DType::I16: case DType::U16: case DType::I8: case DType::U8:
    return true;
  default:
    return false;
  }
}

bool isFloatDType(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 ||
         t == DType::F64;
}

template <class T> T load(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

int64_t intAt(const TensorView &t, int64_t i) {
  const uint8_t *p = t.data + (uint64_t)i * dtypeSize(t.dtype);
  switch (t.dtype) {
  case DType::I64: return load<int64_t>(p);
  case DType::U64: return (int64_t)load<uint64_t>(p);
  case DType::I32: return load<int32_t>(p);
  case DType::U32: return load<uint32_t>(p);
  case DType::I16: return load<int16_t>(p);
  case DType::U16: return load<uint16_t>(p);
  case DType::I8: return load<int8_t>(p);
  case DType::U8: return *p;
  default: fail("internal: intAt on ", dtypeName(t.dtype));
  }
}

/// Floats and integers (signs may be stored as I8).
float floatAt(const TensorView &t, int64_t i) {
  const uint8_t *p = t.data + (uint64_t)i * dtypeSize(t.dtype);
  switch (t.dtype) {
  case DType::F32: return load<float>(p);
  case DType::F16: return halfToFloat(load<uint16_t>(p));
  case DType::BF16: return bf16ToFloat(load<uint16_t>(p));
  case DType::F64: return (float)load<double>(p);
  case DType::F8_E4M3: return e4m3ToFloat(*p);
  default: return (float)intAt(t, i);
  }
}

//===----------------------------------------------------------------------===//
// Pack model
//===----------------------------------------------------------------------===//

/// The index tensors of one width (routed rows, or the shared expert).
struct WidthSet {
  int k = 0;
  bool shared = false; // shared.kK.* tensors (leading dim 1)
  const TensorView *index = nullptr, *checksum = nullptr;
  // By projection: gate, up, down. `chan` is the intermediate-side vector
  // (gate/up svh, down suh), `block` the hidden-side block scale.
  std::array<const TensorView *, 3> chan{}, block{};
  std::shared_ptr<SafetensorsFile> data; // null when absent (index-only)
  std::string dataRel;
};

struct ExpertLayer {
  int64_t layer = 0;
  std::string indexRel;
  std::shared_ptr<SafetensorsFile> index;
  std::vector<int> widths, sharedWidths;
  int64_t rows = 0;     // leading dim of kK.index
  int64_t experts = 0;  // routed experts
  bool sharedRow = false; // the shared expert is row `experts`
  int64_t hidden = 0, inter = 0, halves = 0;
  const TensorView *signsIn = nullptr, *signsOut = nullptr;
  std::map<int, WidthSet> main, shared;
  /// Chosen width [row][p][h]; row `rows` is the separate shared expert.
  std::vector<std::array<std::vector<int>, 3>> choice;

  bool hasSeparateShared() const { return !shared.empty(); }
  const WidthSet &set(bool sep, int k) const {
    return (sep ? shared : main).at(k);
  }
};

/// xxh64 of expert half (row, p, h) of width set `ws` as exlr8-format.md §3
/// states it (the half's bytes, its intermediate-side slice, its block-scale
/// row) and the value the index stores for it. `off`/`len` are the half's
/// bytes in ws.data (already checked against the file).
struct HalfChecksum {
  uint64_t stored = 0, computed = 0;
  bool ok() const { return stored == computed; }
};
HalfChecksum halfChecksum(const ExpertLayer &L, const WidthSet &ws,
                          int64_t row, int p, int64_t h, uint64_t off,
                          uint64_t len) {
  const int64_t I = L.inter, hb = L.hidden / kBlock;
  Xxh64 x;
  x.update(ws.data->bytes(off, len), len);
  const TensorView &chan = *ws.chan[p], &blk = *ws.block[p];
  const uint64_t cs = dtypeSize(chan.dtype), bs = dtypeSize(blk.dtype);
  x.update(chan.data + (row * I + h * kBlock) * cs, kBlock * cs);
  x.update(blk.data + row * hb * bs, hb * bs);
  return {(uint64_t)intAt(*ws.checksum, (row * 3 + p) * L.halves + h),
          x.digest()};
}

/// Whether a half's bytes [off, off + len) lie in the data section of its
/// file (an index pointing elsewhere, or a truncated file, is damage).
bool halfInDataSection(const WidthSet &ws, uint64_t off, uint64_t len) {
  return off >= ws.data->headerSize() && off + len <= ws.data->fileSize();
}

/// The message of a half whose checksum does not match.
std::string halfDamage(const ExpertLayer &L, const WidthSet &ws, int p,
                       uint64_t off, uint64_t len, const HalfChecksum &c) {
  return "xxh64 mismatch (stored " + hex64(c.stored) + ", computed " +
         hex64(c.computed) + ") over the half's " + std::to_string(len) +
         " bytes and its " +
         (p < 2 ? "svh slice and su_block row" : "suh slice and sv_block row") +
         " in " + L.indexRel + "; re-download " + ws.dataRel + " bytes [" +
         std::to_string(off) + ", " + std::to_string(off + len) +
         ") or the index file";
}

struct DenseRecord {
  std::shared_ptr<SafetensorsFile> file;
  std::string rel, prefix, name, object;
  int64_t layer = -1;
  int64_t code = 0, out = 0, in = 0, k = 0, side = 0;
  std::map<std::string, const TensorView *> fields;
  const TensorView *checksum = nullptr;
  const TensorView &field(const char *f) const { return *fields.at(f); }
};

struct PlainTensor {
  std::shared_ptr<SafetensorsFile> file;
  std::string rel;
  const TensorView *view = nullptr;
};

enum class Kind : uint8_t { Expert, Record, Plain };
struct Locator {
  Kind kind;
  size_t group = 0;  // layers_ / records_ / plains_ index
  int64_t row = 0;   // expert row (the shared row, or `rows` if separate)
  int proj = 0;
};

const char *kRecordFields[] = {"trellis", "suh", "svh", "q4",   "s4",
                               "fp8",     "e8m0", "scale", "bf16", "fp32"};

std::vector<const char *> fieldsOf(int64_t code) {
  switch (code) {
  case kTrellis: return {"trellis", "suh", "svh"};
  case kInt4: return {"q4", "s4"};
  case kMxfp8: return {"fp8", "e8m0"};
  case kFp8Block: return {"fp8", "scale"};
  case kFp8Row: return {"fp8", "scale"};
  case kBf16: return {"bf16"};
  case kFp32: return {"fp32"};
  default: return {};
  }
}

WeightFormat formatOf(int64_t code) {
  switch (code) {
  case kTrellis: return WeightFormat::Trellis;
  case kInt4: return WeightFormat::Int4;
  case kMxfp8: return WeightFormat::Mxfp8;
  case kFp8Block: return WeightFormat::Fp8Block;
  case kFp8Row: return WeightFormat::Fp8Row;
  case kBf16: return WeightFormat::BF16;
  default: return WeightFormat::F32;
  }
}

WeightFormat plainFormat(DType t) {
  if (t == DType::BF16)
    return WeightFormat::BF16;
  if (t == DType::F16)
    return WeightFormat::F16;
  return WeightFormat::F32;
}

ByteRange rangeOf(const std::string &file, const TensorView &t,
                  uint64_t elemBegin, uint64_t elems, const char *role) {
  uint64_t ds = dtypeSize(t.dtype);
  return ByteRange{file, t.fileOffset + elemBegin * ds, elems * ds, role};
}

/// Decoded trellis words: copied so they are 2-byte aligned whatever the
/// pack's offsets are.
std::vector<uint16_t> wordsOf(const uint8_t *p, uint64_t len) {
  std::vector<uint16_t> w(len / 2);
  std::memcpy(w.data(), p, len);
  return w;
}

/// LLL of a file name (a regex's digits), refused when absurdly long.
int64_t layerNumber(const std::string &digits, const std::string &file) {
  return parseIntIn(digits, 0, 1 << 20, file + ": layer number");
}

class Exlr8Pack : public Pack {
public:
  Exlr8Pack(const std::string &dir, const PackOpenOptions &opt);
  PackLayout layout() const override { return PackLayout::Exlr8; }
  const std::vector<WeightInfo> &weights() const override {
    check(choiceError_.empty(), choiceError_);
    return weights_;
  }
  std::vector<float> dequantize(const std::string &name) const override;
  VerifyReport verify(const std::function<void(uint64_t, uint64_t)> &progress)
      const override;
  std::string indexHash() const override { return indexHash_; }
  std::string manifestHash() const override { return manifestHash_; }

private:
  void openExpertLayer(const std::string &rel, int64_t layer);
  void openWidthSet(ExpertLayer &L, int k, bool shared);
  void openDenseFile(const std::string &rel, int64_t layer);
  void chooseWidths();
  void applyManifest(const Manifest &m, const std::string &file);
  void buildWeights();
  void makeExpertWeight(size_t li, int64_t row, int p, WeightInfo &w) const;
  void addRecordWeight(size_t ri);
  void computeIndexHash();

  std::vector<float> dequantizeExpert(const Locator &loc) const;
  std::vector<float> dequantizeRecord(const DenseRecord &r) const;
  void verifyRecord(const DenseRecord &r, VerifyReport &rep,
                    const std::function<void()> &tick) const;
  std::string indexOnlyMessage(const std::string &what,
                               const std::string &file) const;
  /// Ends a load-time damage error: where to see all of it.
  std::string verifyHint() const {
    return " (glmc verify " + dir_ + " lists every damaged part)";
  }

  /// The HF name a tensor stored as `stored` in dense file `rel` (layer
  /// `layer`, -1 for the vocab and vision files) has.
  std::string hfNameOf(const std::string &rel, int64_t layer,
                       const std::string &stored) const;
  void verifySlices(VerifyReport &rep) const;

  PackOpenOptions opt_;
  /// The text model's tensor prefix (config's tensorPrefix(); "model."
  /// without config.json).
  std::string prefix_ = "model.";
  std::vector<ExpertLayer> layers_;
  std::vector<DenseRecord> records_;
  std::vector<PlainTensor> plains_;
  std::vector<WeightInfo> weights_;
  std::vector<Locator> locs_;
  std::unordered_map<std::string, size_t> byName_;
  std::string manifestHash_, indexHash_, manifestRel_;
  /// Set when no manifest/width was given and the pack needs one: verify()
  /// still checks every width, anything that needs a width throws this.
  std::string choiceError_;
};

//===----------------------------------------------------------------------===//
// Opening
//===----------------------------------------------------------------------===//

Exlr8Pack::Exlr8Pack(const std::string &dir, const PackOpenOptions &opt)
    : opt_(opt) {
  dir_ = dir;
  if (fs::exists(fs::path(dir) / "config.json"))
    config_ = loadModelConfig((fs::path(dir) / "config.json").string());
  if (config_)
    prefix_ = config_->tensorPrefix();

  std::error_code ec;
  std::regex idxRe(R"(exlr8-layer-(\d+)\.index\.safetensors)");
  std::vector<std::pair<int64_t, std::string>> idx;
  if (fs::is_directory(fs::path(dir) / "experts"))
    for (auto &de : fs::directory_iterator(fs::path(dir) / "experts", ec)) {
      std::smatch m;
      std::string fn = de.path().filename().string();
      if (std::regex_match(fn, m, idxRe))
        idx.push_back({layerNumber(m[1], fn), "experts/" + fn});
    }
  std::sort(idx.begin(), idx.end());
  for (auto &[layer, rel] : idx)
    openExpertLayer(rel, layer);

  std::regex denseRe(R"(exlr8-dense-(\d+)\.safetensors)");
  std::vector<std::pair<int64_t, std::string>> dense;
  if (fs::is_directory(fs::path(dir) / "dense"))
    for (auto &de : fs::directory_iterator(fs::path(dir) / "dense", ec)) {
      std::smatch m;
      std::string fn = de.path().filename().string();
      if (std::regex_match(fn, m, denseRe))
        dense.push_back({layerNumber(m[1], fn), "dense/" + fn});
      else if (fn == "exlr8-vocab.safetensors" ||
               "dense/" + fn == visionFile())
        dense.push_back({-1, "dense/" + fn});
    }
  std::sort(dense.begin(), dense.end());
  check(!idx.empty() || !dense.empty(), dir,
        ": no exlr8 files (experts/exlr8-layer-LLL.index.safetensors or "
        "dense/exlr8-*.safetensors); is this an exlr8 v2 pack?");
  for (auto &[layer, rel] : dense)
    openDenseFile(rel, layer);

  chooseWidths();
  buildWeights();
  computeIndexHash();
}

std::string Exlr8Pack::hfNameOf(const std::string &rel, int64_t layer,
                                const std::string &stored) const {
  // Dense files store names relative to their layer, the vocab file
  // relative to the text model (lm_head has no prefix); the vision file
  // keeps full names.
  if (rel == visionFile())
    return stored;
  if (layer >= 0)
    return prefix_ + "layers." + std::to_string(layer) + "." + stored;
  return stored.rfind("lm_head", 0) == 0 ? stored : prefix_ + stored;
}

void Exlr8Pack::openExpertLayer(const std::string &rel, int64_t layer) {
  ExpertLayer L;
  L.layer = layer;
  L.indexRel = rel;
  L.index = SafetensorsFile::open((fs::path(dir_) / rel).string());
  const SafetensorsFile &f = *L.index;
  for (auto &t : f.tensors())
    check(t.data != nullptr || t.byteSize == 0, f.path(), ": tensor ", t.name,
          " has no data; index files must be complete even in index-only "
          "packs (re-download the file)");

  // Widths: the metadata, else the kK.index tensors present.
  auto widthsFrom = [&](const char *key, bool shared) {
    auto it = f.metadata().find(key);
    if (it != f.metadata().end() && !it->second.empty())
      return parseWidths(it->second, f.path() + ": metadata " + key);
    std::vector<int> w;
    for (int k = 1; k <= 8; ++k)
      if (f.find(widthTensor(shared, k, "index")))
        w.push_back(k);
    return w;
  };
  L.widths = widthsFrom("widths", false);
  L.sharedWidths = widthsFrom("shared_widths", true);
  // shared_widths may be listed for a pack that keeps the shared expert as
  // row E (no shared.kK tensors): only tensors that exist count.
  {
    std::vector<int> present;
    for (int k : L.sharedWidths)
      if (f.find(widthTensor(true, k, "index")))
        present.push_back(k);
    check(present.empty() || present.size() == L.sharedWidths.size(),
          f.path(), ": metadata shared_widths = \"",
          formatWidths(L.sharedWidths), "\" but only shared.kK.index for K = ",
          formatWidths(present), " exist; the index file is damaged");
    L.sharedWidths = present;
  }
  check(!L.widths.empty(), f.path(),
        ": no widths (metadata \"widths\" and kK.index tensors are missing)");

  const TensorView &si = f.get("signs.in");
  const TensorView &so = f.get("signs.out");
  for (const TensorView *s : {&si, &so})
    check((isFloatDType(s->dtype) || isIntDType(s->dtype)) &&
              s->shape.size() == 1,
          f.path(), ": tensor ", s->name, " must be a 1-D float or int vector, ",
          "found ", dtypeName(s->dtype), " ", shapeStr(s->shape));
  L.hidden = si.shape[0];
  check(so.shape[0] == L.hidden && L.hidden > 0 && L.hidden % kBlock == 0,
        f.path(), ": signs.in ", shapeStr(si.shape), " and signs.out ",
        shapeStr(so.shape),
        " must have the same length, a multiple of 128 (the hidden size)");
  L.signsIn = &si;
  L.signsOut = &so;

  for (int k : L.widths)
    openWidthSet(L, k, false);
  for (int k : L.sharedWidths)
    openWidthSet(L, k, true);

  // Which rows are routed experts: config, else the writer's metadata, else
  // all rows (a manifest may still say the last row is shared).
  L.experts = L.rows;
  if (config_ && config_->numRoutedExperts > 0) {
    int64_t e = config_->numRoutedExperts;
    if (L.rows == e + 1 && !L.hasSeparateShared())
      L.experts = e, L.sharedRow = true;
  } else if (f.metadata().count("experts")) {
    int64_t e = parseIntIn(f.metadata().at("experts"), 0, 1 << 20,
                           f.path() + ": metadata \"experts\"");
    if (L.rows == e + 1 && !L.hasSeparateShared())
      L.experts = e, L.sharedRow = true;
  }
  layers_.push_back(std::move(L));
}

void Exlr8Pack::openWidthSet(ExpertLayer &L, int k, bool shared) {
  const SafetensorsFile &f = *L.index;
  WidthSet w;
  w.k = k;
  w.shared = shared;
  auto get = [&](const std::string &suffix) -> const TensorView & {
    return f.get(widthTensor(shared, k, suffix));
  };
  w.index = &get("index");
  w.checksum = &get("checksum");
  w.chan = {&get("gate.svh"), &get("up.svh"), &get("down.suh")};
  w.block = {&get("gate.su_block"), &get("up.su_block"),
             &get("down.sv_block")};

  const TensorView &ix = *w.index;
  check(isIntDType(ix.dtype) && ix.shape.size() == 4 && ix.shape[1] == 3 &&
            ix.shape[3] == 2 && ix.shape[2] > 0,
        f.path(), ": tensor ", ix.name, " must be an integer [experts, 3, ",
        "halves, 2] table of (offset, length), found ", dtypeName(ix.dtype),
        " ", shapeStr(ix.shape));
  int64_t rows = ix.shape[0], halves = ix.shape[2];
  if (shared) {
    check(rows == 1, f.path(), ": tensor ", ix.name,
          " must have leading dim 1 (the shared expert), found ",
          shapeStr(ix.shape));
  } else {
    check(L.rows == 0 || L.rows == rows, f.path(), ": tensor ", ix.name,
          " has ", rows, " expert rows but other widths have ", L.rows);
    L.rows = rows;
  }
  check(L.halves == 0 || L.halves == halves, f.path(), ": tensor ", ix.name,
        " has ", halves, " halves but other widths have ", L.halves);
  L.halves = halves;
  L.inter = halves * kBlock;
  const TensorView &cs = *w.checksum;
  check((cs.dtype == DType::U64 || cs.dtype == DType::I64) &&
            cs.shape == std::vector<int64_t>({rows, 3, halves}),
        f.path(), ": tensor ", cs.name, " must be U64/I64 ",
        shapeStr({rows, 3, halves}), ", found ", dtypeName(cs.dtype), " ",
        shapeStr(cs.shape));
  for (int p = 0; p < 3; ++p) {
    const TensorView &c = *w.chan[p];
    check(isFloatDType(c.dtype) &&
              c.shape == std::vector<int64_t>({rows, L.inter}),
          f.path(), ": tensor ", c.name, " must be a float ",
          shapeStr({rows, L.inter}), " vector per expert, found ",
          dtypeName(c.dtype), " ", shapeStr(c.shape));
    const TensorView &b = *w.block[p];
    check(isFloatDType(b.dtype) &&
              b.shape == std::vector<int64_t>({rows, L.hidden / kBlock}),
          f.path(), ": tensor ", b.name, " must be a float ",
          shapeStr({rows, L.hidden / kBlock}),
          " (one scale per 128 hidden channels), found ", dtypeName(b.dtype),
          " ", shapeStr(b.shape));
  }

  w.dataRel = dataFile(L.layer, k);
  fs::path dp = fs::path(dir_) / w.dataRel;
  if (fs::exists(dp)) {
    w.data = SafetensorsFile::open(dp.string(), opt_.indexOnly);
  } else if (!opt_.indexOnly) {
    // No .kK file at all: an index-only pack, not a damaged one.
    bool any = false;
    std::error_code ec;
    for (auto &de : fs::directory_iterator(fs::path(dir_) / "experts", ec))
      if (de.path().filename().string().find(".k") != std::string::npos &&
          de.path().filename().string().find(".index.") == std::string::npos)
        any = true;
    check(any, dir_, " is an index-only pack (no experts/*.kK.safetensors "
          "weight files): verify and dequantize need the full pack; the "
          "compiler reads it as it is");
    fail(dp.string(), ": missing (the layer index lists width K", k,
         "); re-download it, or open the pack index-only to compile without "
         "weight bytes");
  }
  (shared ? L.shared : L.main)[k] = std::move(w);
}

void Exlr8Pack::openDenseFile(const std::string &rel, int64_t layer) {
  auto file =
      SafetensorsFile::open((fs::path(dir_) / rel).string(), opt_.indexOnly);
  const SafetensorsFile &f = *file;
  std::set<std::string> used;
  for (auto &t : f.tensors()) {
    const std::string &n = t.name;
    if (n.size() <= 7 || n.compare(n.size() - 7, 7, ".record") != 0)
      continue;
    DenseRecord r;
    r.file = file;
    r.rel = rel;
    r.layer = layer;
    r.prefix = n.substr(0, n.size() - 7);
    r.name = hfNameOf(rel, layer, r.prefix + ".weight");
    r.object = (layer >= 0 ? "layer " + std::to_string(layer) + " " : "") +
               r.prefix;
    used.insert(n);
    // record[0..4]: the tensor, else (header-only file) the writer's
    // metadata copy "M.record" = "1,out,in,K,side,...".
    std::vector<int64_t> rec, copy;
    check(isIntDType(t.dtype) && t.numel() >= 5, f.path(), ": tensor ", n,
          " must hold at least 5 integers (format, out, in, K, side), found ",
          dtypeName(t.dtype), " ", shapeStr(t.shape));
    auto meta = f.metadata().find(n);
    if (meta != f.metadata().end()) {
      std::stringstream ss(meta->second);
      std::string item;
      while (std::getline(ss, item, ','))
        copy.push_back(parseIntIn(item, INT64_MIN, INT64_MAX,
                                  f.path() + ": metadata " + n));
      check(copy.size() >= 5, f.path(), ": metadata ", n, " = \"",
            meta->second, "\" must list format,out,in,K,side");
    }
    if (t.data) {
      for (int64_t i = 0; i < t.numel(); ++i)
        rec.push_back(intAt(t, i));
      // The record carries no checksum; the writer's metadata copy, where
      // there is one, vouches for every field, the unused [5..7] included.
      for (size_t i = 0; i < copy.size() && i < rec.size(); ++i)
        check(rec[i] == copy[i], f.path(), ": tensor ", n, "[", i, "] = ",
              rec[i], " but the header's metadata copy says ", copy[i],
              ": the record is damaged; re-download ", rel);
    } else {
      check(!copy.empty(), f.path(), ": ", n,
            " has no data (header-only file) and no metadata copy; the "
            "record's format is unknown. Use the full pack");
      rec = copy;
    }
    r.code = rec[0], r.out = rec[1], r.in = rec[2], r.k = rec[3];
    r.side = rec[4];
    std::string what = f.path() + ": record " + r.prefix;
    check(r.code >= 1 && r.code <= 7, what, ": record[0] = ", r.code,
          " is not a format code 1..7 (TRELLIS, INT4, MXFP8, FP8_BLOCK, "
          "FP8_ROW, BF16, FP32)");
    check(r.out > 0 && r.in > 0, what, ": out = ", r.out, ", in = ", r.in,
          " must be positive");
    check(r.side >= 0 && r.side <= 2, what, ": side = ", r.side,
          " must be 0 (replicated), 1 (output) or 2 (input)");
    for (const char *fld : fieldsOf(r.code)) {
      const TensorView *v = f.find(r.prefix + "." + fld);
      check(v != nullptr, what, ": format ", denseCodeName((int)r.code),
            " needs tensor ", r.prefix, ".", fld, ", which is missing");
      r.fields[fld] = v;
    }
    for (const char *fld : kRecordFields)
      if (f.find(r.prefix + "." + fld))
        used.insert(r.prefix + "." + fld);
    r.checksum = f.find(r.prefix + ".checksum");
    check(r.checksum != nullptr, what, ": tensor ", r.prefix,
          ".checksum is missing");
    used.insert(r.prefix + ".checksum");
    check((r.checksum->dtype == DType::U64 ||
           r.checksum->dtype == DType::I64),
          what, ": ", r.prefix, ".checksum must be U64/I64, found ",
          dtypeName(r.checksum->dtype));

    // Shapes per §6.
    auto expect = [&](const char *fld, std::vector<int64_t> shape,
                      int bytes) {
      const TensorView &v = r.field(fld);
      check(v.shape == shape, what, ": ", v.name, " must be ",
            shapeStr(shape), ", found ", shapeStr(v.shape));
      if (bytes > 0)
        check(dtypeSize(v.dtype) == (size_t)bytes, what, ": ", v.name,
              " must have ", bytes, "-byte elements, found ",
              dtypeName(v.dtype));
      else
        check(isFloatDType(v.dtype), what, ": ", v.name,
              " must be a float tensor, found ", dtypeName(v.dtype));
    };
    auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
    switch (r.code) {
    case kTrellis: {
      check(r.k >= 1 && r.k <= 8, what, ": K = ", r.k, " must be 1..8");
      check(r.out % kBlock == 0 && r.in % kBlock == 0, what,
            ": TRELLIS needs out and in multiples of 128, found ", r.out,
            " x ", r.in);
      int64_t g = r.side == 2 ? r.in / kBlock : r.out / kBlock;
      int64_t d = r.side == 2 ? r.out : r.in;
      expect("trellis", {g, 16 * r.k * d}, 1);
      expect("suh", {r.in}, 0);
      expect("svh", {r.out}, 0);
      break;
    }
    case kInt4:
      check(r.in % (r.side == 2 ? kBlock : 32) == 0, what,
            ": INT4 needs in to be a multiple of ", r.side == 2 ? 128 : 32);
      if (r.side == 2) {
        expect("q4", {r.in / kBlock, r.out, 64}, 1);
        expect("s4", {r.in / kBlock, r.out, 4}, 0);
      } else {
        expect("q4", {r.out, r.in / 2}, 1);
        expect("s4", {r.out, r.in / 32}, 0);
      }
      break;
    case kMxfp8:
      check(r.in % 32 == 0, what, ": MXFP8 needs in % 32 == 0");
      expect("fp8", {r.out, r.in}, 1);
      expect("e8m0", {r.out, r.in / 32}, 1);
      break;
    case kFp8Block:
      expect("fp8", {r.out, r.in}, 1);
      expect("scale", {cdiv(r.out, kBlock), cdiv(r.in, kBlock)}, 0);
      break;
    case kFp8Row:
      expect("fp8", {r.out, r.in}, 1);
      expect("scale", {r.out}, 0);
      break;
    case kBf16:
      expect("bf16", {r.out, r.in}, 0);
      break;
    case kFp32:
      expect("fp32", {r.out, r.in}, 0);
      break;
    }
    records_.push_back(std::move(r));
  }
  for (auto &t : f.tensors()) {
    if (used.count(t.name))
      continue;
    PlainTensor p;
    p.file = file;
    p.rel = rel;
    p.view = &t;
    plains_.push_back(p);
  }
}

//===----------------------------------------------------------------------===//
// Width choice: manifest or a forced width
//===----------------------------------------------------------------------===//

void Exlr8Pack::chooseWidths() {
  if (layers_.empty())
    return;
  for (auto &L : layers_) {
    int64_t n = L.rows + (L.hasSeparateShared() ? 1 : 0);
    L.choice.assign(n, {});
    for (auto &c : L.choice)
      for (auto &v : c)
        v.assign(L.halves, 0);
  }
  if (opt_.width > 0) {
    int k = opt_.width;
    for (auto &L : layers_) {
      auto has = [&](const std::vector<int> &ws) {
        return std::find(ws.begin(), ws.end(), k) != ws.end();
      };
      check(has(L.widths) && (!L.hasSeparateShared() || has(L.sharedWidths)),
            dir_, ": width ", k, " requested, but ", L.indexRel,
            " stores widths ", formatWidths(L.widths),
            L.hasSeparateShared()
                ? " (shared expert: " + formatWidths(L.sharedWidths) + ")"
                : std::string(),
            " only; pass one of those widths or a manifest");
      for (auto &c : L.choice)
        for (auto &v : c)
          std::fill(v.begin(), v.end(), k);
    }
    manifestHash_ = hex64(xxh64(("width=" + std::to_string(k)).data(),
                                ("width=" + std::to_string(k)).size()));
    return;
  }

  // Manifests shipped with the pack.
  std::vector<std::string> shipped;
  std::error_code ec;
  std::regex mre(R"(exlr8-manifest-(.+)\.json)");
  if (fs::is_directory(fs::path(dir_) / "manifests"))
    for (auto &de : fs::directory_iterator(fs::path(dir_) / "manifests", ec)) {
      std::smatch m;
      std::string fn = de.path().filename().string();
      if (std::regex_match(fn, m, mre))
        shipped.push_back(m[1]);
    }
  std::sort(shipped.begin(), shipped.end());
  std::string list;
  for (auto &s : shipped)
    list += (list.empty() ? "" : ", ") + s;
  if (list.empty())
    list = "none";

  std::string path;
  const std::string &m = opt_.manifest;
  if (!m.empty()) {
    bool isPath = m.find('/') != std::string::npos ||
                  (m.size() > 5 && m.compare(m.size() - 5, 5, ".json") == 0);
    if (isPath) {
      path = m;
      if (!fs::exists(path) && fs::exists(fs::path(dir_) / m))
        path = (fs::path(dir_) / m).string();
      check(fs::exists(path), m, ": manifest file not found (manifests in ",
            dir_, ": ", list, ")");
    } else {
      path = (fs::path(dir_) / manifestFile(m)).string();
      check(fs::exists(path), dir_, ": no manifest named \"", m, "\" (",
            manifestFile(m), "); the pack ships: ", list);
    }
  } else if (shipped.size() == 1) {
    path = (fs::path(dir_) / manifestFile(shipped[0])).string();
  } else {
    // A single width everywhere needs no manifest.
    int only = 0;
    bool single = true;
    for (auto &L : layers_) {
      std::set<int> ws(L.widths.begin(), L.widths.end());
      ws.insert(L.sharedWidths.begin(), L.sharedWidths.end());
      if (ws.size() != 1 || (only && *ws.begin() != only))
        single = false;
      else
        only = *ws.begin();
    }
    if (!single) {
      // Defer the error: verify needs no width choice (it checks all).
      std::ostringstream os;
      os << dir_ << ": choose a manifest: the pack ships " << list
         << " and stores several widths; pass --manifest NAME (e.g. "
         << (shipped.empty() ? std::string("a manifest file") : shipped[0])
         << "), or --width K to glmc compile, verify or dequant";
      choiceError_ = os.str();
      for (auto &L : layers_) {
        int top = *std::max_element(L.widths.begin(), L.widths.end());
        int stop = L.sharedWidths.empty()
                       ? top
                       : *std::max_element(L.sharedWidths.begin(),
                                           L.sharedWidths.end());
        for (int64_t r = 0; r < (int64_t)L.choice.size(); ++r)
          for (auto &v : L.choice[r])
            std::fill(v.begin(), v.end(), r == L.rows ? stop : top);
      }
      return;
    }
    for (auto &L : layers_)
      for (auto &c : L.choice)
        for (auto &v : c)
          std::fill(v.begin(), v.end(), only);
    manifestHash_ = hex64(xxh64(("width=" + std::to_string(only)).data(),
                                ("width=" + std::to_string(only)).size()));
    return;
  }

  std::string text = readFileBounded(path, kMaxManifestBytes, "the manifest");
  manifestHash_ = hex64(xxh64(text.data(), text.size()));
  manifestRel_ = path;
  int64_t halves = layers_.front().halves;
  for (auto &L : layers_)
    check(L.halves == halves, dir_, ": ", L.indexRel, " has ", L.halves,
          " halves per projection but ", layers_.front().indexRel, " has ",
          halves);
  applyManifest(parseManifest(text, path, halves), path);
}

void Exlr8Pack::applyManifest(const Manifest &m, const std::string &file) {
  std::set<int64_t> known;
  for (auto &L : layers_) {
    known.insert(L.layer);
    auto it = m.layers.find(L.layer);
    check(it != m.layers.end(), file, ": no entry for layer ", L.layer,
          " (", L.indexRel, " holds experts); use the manifest made for this "
          "pack or regenerate it");
    const ManifestLayer &ml = it->second;
    std::string key = "layers." + std::to_string(L.layer);
    // A manifest without config: a list one shorter than the index rows
    // means the last row is the shared expert (GLM-5.3-Flash layout).
    if ((int64_t)ml.gate.size() == L.rows - 1 && ml.hasShared &&
        !L.hasSeparateShared() && !L.sharedRow) {
      L.experts = L.rows - 1;
      L.sharedRow = true;
    }
    check((int64_t)ml.gate.size() == L.experts, file, ": key ", key,
          ".gate lists ", ml.gate.size(), " experts but ", L.indexRel, " has ",
          L.experts, " routed experts");
    bool needShared = L.sharedRow || L.hasSeparateShared();
    check(!needShared || ml.hasShared, file, ": key ", key,
          ".shared is missing but the pack stores a shared expert");

    auto setWidth = [&](int64_t row, int p, int64_t h, int k, bool sep) {
      const std::vector<int> &ws = sep ? L.sharedWidths : L.widths;
      if (std::find(ws.begin(), ws.end(), k) == ws.end()) {
        std::string who =
            (row >= L.experts) ? "shared expert" : "expert " + std::to_string(row);
        fail(file, ": layer ", L.layer, " ", who, " ", projName(p), " half ",
             h, " asks for width K", k, ", but ", L.indexRel,
             " stores widths ", formatWidths(ws),
             " only; pick a manifest for this pack, edit the entry to one of "
             "those widths, or re-quantize with that width (--widths)");
      }
      L.choice[row][p][h] = k;
    };
    for (int64_t e = 0; e < L.experts; ++e)
      for (int64_t h = 0; h < L.halves; ++h) {
        setWidth(e, 0, h, ml.gate[e][h], false);
        setWidth(e, 1, h, ml.up[e][h], false);
        setWidth(e, 2, h, ml.down[e], false);
      }
    if (needShared) {
      int64_t row = L.sharedRow ? L.experts : L.rows;
      bool sep = L.hasSeparateShared();
      for (int64_t h = 0; h < L.halves; ++h) {
        setWidth(row, 0, h, ml.sharedGate[h], sep);
        setWidth(row, 1, h, ml.sharedUp[h], sep);
        setWidth(row, 2, h, ml.sharedDown, sep);
      }
    }
  }
  for (auto &kv : m.layers)
    check(known.count(kv.first), file, ": key layers.", kv.first,
          " names a layer without an expert index (",
          indexFile(kv.first), "); this manifest belongs to another pack");
}

//===----------------------------------------------------------------------===//
// Weight list
//===----------------------------------------------------------------------===//

void Exlr8Pack::buildWeights() {
  // Expert weights (~10^6 trellis halves at full size) are most of the
  // time a pack takes to open. They are independent, so they are built on
  // every core into slots assigned up front: the same vector, in the same
  // order, as one thread would build.
  std::vector<std::tuple<size_t, int64_t, int>> experts;
  for (size_t li = 0; li < layers_.size(); ++li) {
    const ExpertLayer &L = layers_[li];
    int64_t rows = L.rows + (L.hasSeparateShared() ? 1 : 0);
    for (int64_t r = 0; r < rows; ++r)
      for (int p = 0; p < 3; ++p)
        experts.emplace_back(li, r, p);
  }
  size_t base = weights_.size();
  weights_.resize(base + experts.size());
  locs_.resize(base + experts.size());
  parallelFor((int64_t)experts.size(), 256, 0,
              [&](int64_t begin, int64_t end, int) {
                for (int64_t i = begin; i < end; ++i) {
                  auto [li, r, p] = experts[i];
                  makeExpertWeight(li, r, p, weights_[base + i]);
                  locs_[base + i] = Locator{Kind::Expert, li, r, p};
                }
              });
  for (size_t ri = 0; ri < records_.size(); ++ri)
    addRecordWeight(ri);
  std::regex lre(R"(exlr8-dense-(\d+)\.safetensors)");
  for (size_t pi = 0; pi < plains_.size(); ++pi) {
    const PlainTensor &pt = plains_[pi];
    const TensorView &v = *pt.view;
    WeightInfo w;
    int64_t layer = -1;
    std::smatch m;
    std::string fn = fs::path(pt.rel).filename().string();
    if (std::regex_match(fn, m, lre))
      layer = layerNumber(m[1], fn);
    w.name = hfNameOf(pt.rel, layer, v.name);
    w.layer = (int)layer;
    w.shape = v.shape;
    w.format = plainFormat(v.dtype);
    w.ranges.push_back(ByteRange{pt.rel, v.fileOffset, v.byteSize, "data"});
    weights_.push_back(std::move(w));
    locs_.push_back(Locator{Kind::Plain, pi, 0, 0});
  }

  // Stable order: layer (vocab first), then name.
  std::vector<size_t> order(weights_.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(weights_[a].layer, weights_[a].name) <
           std::tie(weights_[b].layer, weights_[b].name);
  });
  std::vector<WeightInfo> ws;
  std::vector<Locator> ls;
  ws.reserve(order.size());
  ls.reserve(order.size());
  for (size_t i : order) {
    ws.push_back(std::move(weights_[i]));
    ls.push_back(locs_[i]);
  }
  weights_ = std::move(ws);
  locs_ = std::move(ls);
  for (size_t i = 0; i < weights_.size(); ++i) {
    bool fresh = byName_.emplace(weights_[i].name, i).second;
    check(fresh, dir_, ": weight ", weights_[i].name,
          " is stored twice (dense and expert files disagree)");
  }
}

void Exlr8Pack::makeExpertWeight(size_t li, int64_t row, int p,
                                 WeightInfo &w) const {
  const ExpertLayer &L = layers_[li];
  bool sep = row == L.rows;
  bool isShared = sep || (L.sharedRow && row == L.experts);
  int64_t trow = sep ? 0 : row; // row inside the width tensors
  w.name = isShared ? sharedWeightName(prefix_, L.layer, p)
                    : expertWeightName(prefix_, L.layer, row, p);
  w.shape = p < 2 ? std::vector<int64_t>{L.inter, L.hidden}
                  : std::vector<int64_t>{L.hidden, L.inter};
  w.format = WeightFormat::Trellis;
  w.layer = (int)L.layer;
  w.expert = isShared ? -1 : (int)row;
  w.projection = p;
  w.shared = isShared;
  int64_t hb = L.hidden / kBlock;
  // Side ranges all lie in the index file: dedupe on (offset, length).
  std::vector<std::pair<uint64_t, uint64_t>> seen;
  std::vector<ByteRange> sides;
  // Sized up front: ~10^6 halves at full size, so reallocation is most of
  // the cost of opening a pack.
  w.parts.reserve(L.halves);
  w.ranges.reserve(L.halves);
  sides.reserve(3 * L.halves);
  seen.reserve(3 * L.halves);
  for (int64_t h = 0; h < L.halves; ++h) {
    int k = L.choice[row][p][h];
    const WidthSet &ws = L.set(sep, k);
    TrellisPart part;
    part.width = tr::Width::bits(k);
    part.codebook = tr::Codebook::Mcg;
    part.e4m3 = true;
    part.order = p < 2 ? tr::TileOrder::RowMajor : tr::TileOrder::InMajor128;
    part.half = (int)h;
    if (p < 2) {
      part.outBegin = h * kBlock, part.outCount = kBlock;
      part.inBegin = 0, part.inCount = L.hidden;
    } else {
      part.outBegin = 0, part.outCount = L.hidden;
      part.inBegin = h * kBlock, part.inCount = kBlock;
    }
    int64_t at = ((trow * 3 + p) * L.halves + h) * 2;
    part.trellisBytes = ByteRange{ws.dataRel, (uint64_t)intAt(*ws.index, at),
                                  (uint64_t)intAt(*ws.index, at + 1),
                                  "trellis"};
    const TensorView &chan = *ws.chan[p], &blk = *ws.block[p];
    part.sideBytes.reserve(3);
    part.sideBytes.push_back(rangeOf(L.indexRel, chan, trow * L.inter + h * kBlock,
                                     kBlock, p < 2 ? "svh" : "suh"));
    part.sideBytes.push_back(rangeOf(L.indexRel, blk, trow * hb, hb,
                                     p < 2 ? "su_block" : "sv_block"));
    const TensorView &sg = p < 2 ? *L.signsIn : *L.signsOut;
    part.sideBytes.push_back(
        rangeOf(L.indexRel, sg, 0, L.hidden, p < 2 ? "signs.in" : "signs.out"));
    w.ranges.push_back(part.trellisBytes);
    for (auto &s : part.sideBytes) {
      std::pair<uint64_t, uint64_t> key{s.offset, s.length};
      if (std::find(seen.begin(), seen.end(), key) == seen.end()) {
        seen.push_back(key);
        sides.push_back(s);
      }
    }
    w.parts.push_back(std::move(part));
  }
  w.ranges.insert(w.ranges.end(), sides.begin(), sides.end());
}

void Exlr8Pack::addRecordWeight(size_t ri) {
  const DenseRecord &r = records_[ri];
  WeightInfo w;
  w.name = r.name;
  w.shape = {r.out, r.in};
  w.format = formatOf(r.code);
  w.layer = (int)r.layer;
  for (const char *fld : fieldsOf(r.code)) {
    const TensorView &v = r.field(fld);
    if (r.code != kTrellis)
      w.ranges.push_back(ByteRange{r.rel, v.fileOffset, v.byteSize, fld});
  }
  if (r.code == kTrellis) {
    const TensorView &t = r.field("trellis"), &suh = r.field("suh"),
                     &svh = r.field("svh");
    int64_t g = t.shape[0];
    uint64_t entry = (uint64_t)t.shape[1];
    bool s2 = r.side == 2;
    for (int64_t i = 0; i < g; ++i) {
      TrellisPart part;
      part.width = tr::Width::bits((int)r.k);
      part.codebook = tr::Codebook::Mcg;
      part.e4m3 = true;
      part.order = s2 ? tr::TileOrder::InMajor128 : tr::TileOrder::RowMajor;
      part.half = (int)i;
      if (s2) {
        part.inBegin = i * kBlock, part.inCount = kBlock;
        part.outBegin = 0, part.outCount = r.out;
      } else {
        part.outBegin = i * kBlock, part.outCount = kBlock;
        part.inBegin = 0, part.inCount = r.in;
      }
      part.trellisBytes =
          ByteRange{r.rel, t.fileOffset + i * entry, entry, "trellis"};
      if (s2) {
        part.sideBytes.push_back(rangeOf(r.rel, suh, i * kBlock, kBlock, "suh"));
        part.sideBytes.push_back(rangeOf(r.rel, svh, 0, r.out, "svh"));
      } else {
        part.sideBytes.push_back(rangeOf(r.rel, suh, 0, r.in, "suh"));
        part.sideBytes.push_back(rangeOf(r.rel, svh, i * kBlock, kBlock, "svh"));
      }
      w.ranges.push_back(part.trellisBytes);
      w.parts.push_back(std::move(part));
    }
    w.ranges.push_back(ByteRange{r.rel, suh.fileOffset, suh.byteSize, "suh"});
    w.ranges.push_back(ByteRange{r.rel, svh.fileOffset, svh.byteSize, "svh"});
  }
  weights_.push_back(std::move(w));
  locs_.push_back(Locator{Kind::Record, ri, 0, 0});
}

/// What a compiled plan depends on: the index files' headers and offset
/// tables, the dense/vocab headers (records are mirrored in the metadata by
/// our writer). Side vectors and checksums are weight content, so a plan
/// compiled from an index-only pack matches the full pack.
void Exlr8Pack::computeIndexHash() {
  Xxh64 h;
  auto str = [&](const std::string &s) {
    h.update(s.data(), s.size());
    h.update("\n", 1);
  };
  for (auto &L : layers_) {
    str(L.indexRel);
    h.update(L.index->bytes(0, L.index->headerSize()), L.index->headerSize());
    for (auto *m : {&L.main, &L.shared})
      for (auto &kv : *m)
        h.update(kv.second.index->data, kv.second.index->byteSize);
  }
  std::set<const SafetensorsFile *> done;
  auto header = [&](const std::shared_ptr<SafetensorsFile> &f,
                    const std::string &rel) {
    if (!done.insert(f.get()).second)
      return;
    str(rel);
    // The header bytes are the file's first headerSize() bytes; a
    // header-only file has exactly those.
    std::ifstream in(f->path(), std::ios::binary);
    std::string buf(f->headerSize(), '\0');
    in.read(&buf[0], (std::streamsize)buf.size());
    h.update(buf.data(), buf.size());
  };
  for (auto &r : records_)
    header(r.file, r.rel);
  for (auto &p : plains_)
    header(p.file, p.rel);
  indexHash_ = hex64(h.digest());
}

//===----------------------------------------------------------------------===//
// Dequantize
//===----------------------------------------------------------------------===//

std::string Exlr8Pack::indexOnlyMessage(const std::string &what,
                                        const std::string &file) const {
  return dir_ + " is an index-only pack: the bytes of " + what + " (" + file +
         ") are absent. Dequantize and verify need the full pack (the "
         "compiler needs only the index)";
}

std::vector<float> Exlr8Pack::dequantize(const std::string &name) const {
  check(choiceError_.empty(), choiceError_);
  auto it = byName_.find(name);
  check(it != byName_.end(), dir_, ": no weight named ", name,
        " in this exlr8 pack (glmc dequant --list shows the names)");
  const Locator &loc = locs_[it->second];
  switch (loc.kind) {
  case Kind::Expert:
    return dequantizeExpert(loc);
  case Kind::Record:
    return dequantizeRecord(records_[loc.group]);
  case Kind::Plain: {
    const PlainTensor &p = plains_[loc.group];
    check(p.view->data != nullptr, indexOnlyMessage(name, p.rel));
    // No checksum covers plain tensors: refuse values no model has.
    std::string bad = checkPlainValues(p.view->name, *p.view);
    check(bad.empty(), p.rel, ": ", name, ": ", bad, verifyHint());
    std::vector<float> out(p.view->numel());
    for (int64_t i = 0; i < (int64_t)out.size(); ++i)
      out[i] = floatAt(*p.view, i);
    return out;
  }
  }
  return {};
}

std::vector<float> Exlr8Pack::dequantizeExpert(const Locator &loc) const {
  const ExpertLayer &L = layers_[loc.group];
  int p = loc.proj;
  bool sep = loc.row == L.rows;
  int64_t trow = sep ? 0 : loc.row;
  int64_t H = L.hidden, I = L.inter, hb = H / kBlock;
  const WeightInfo &w = weights_[byName_.at(
      (sep || (L.sharedRow && loc.row == L.experts))
          ? sharedWeightName(prefix_, L.layer, p)
          : expertWeightName(prefix_, L.layer, loc.row, p))];
  // The signs carry no checksum; a damaged one flips a hidden channel.
  for (const TensorView *s : {L.signsIn, L.signsOut}) {
    std::string bad = checkSigns(*s);
    check(bad.empty(), L.indexRel, ": ", s->name, ": ", bad, verifyHint());
  }
  std::vector<float> out((size_t)(I * H));
  std::vector<float> q((size_t)(H * kBlock)), suh, svh;
  for (int64_t h = 0; h < L.halves; ++h) {
    int k = L.choice[loc.row][p][h];
    const WidthSet &ws = L.set(sep, k);
    std::string obj = w.name + " half " + std::to_string(h) + " (K" +
                      std::to_string(k) + ")";
    check(ws.data != nullptr, indexOnlyMessage(obj, ws.dataRel));
    int64_t at = ((trow * 3 + p) * L.halves + h) * 2;
    uint64_t off = (uint64_t)intAt(*ws.index, at);
    uint64_t len = (uint64_t)intAt(*ws.index, at + 1);
    check(len == halfBytes(H, k), L.indexRel, ": ", obj, " has length ", len,
          ", expected ", halfBytes(H, k), " (", H / 2,
          " tiles x 32K bytes); the index is damaged");
    check(halfInDataSection(ws, off, len), ws.dataRel, ": ", obj,
          " at bytes [", off, ", ", off + len, ") lies outside the file (size ",
          ws.data->fileSize(), "); the file is truncated or the index is "
          "damaged", verifyHint());
    // The checksum is checked on every load: a damaged half is refused, not
    // decoded into wrong weights (hashing costs little next to decoding).
    const HalfChecksum c = halfChecksum(L, ws, trow, p, h, off, len);
    check(c.ok(), ws.dataRel, ": ", obj, ": ", halfDamage(L, ws, p, off, len, c),
          verifyHint());
    std::vector<uint16_t> words = wordsOf(ws.data->bytes(off, len), len);
    const TensorView &chan = *ws.chan[p], &blk = *ws.block[p];
    if (p < 2) {
      // T: H x 128 (in x out), tiles [k16][c].
      suh.resize(H);
      svh.resize(kBlock);
      for (int64_t i = 0; i < H; ++i)
        suh[i] = floatAt(*L.signsIn, i) * floatAt(blk, trow * hb + i / kBlock);
      for (int64_t o = 0; o < kBlock; ++o)
        svh[o] = floatAt(chan, trow * I + h * kBlock + o);
      tr::decodeMatrix(words.data(), H, kBlock, tr::Width::bits(k),
                       tr::Codebook::Mcg, true, tr::TileOrder::RowMajor,
                       q.data());
      tr::reconstructInPlace(q.data(), H, kBlock, suh.data(), svh.data());
      for (int64_t o = 0; o < kBlock; ++o)
        for (int64_t i = 0; i < H; ++i)
          out[(h * kBlock + o) * H + i] = q[i * kBlock + o];
    } else {
      // T: 128 x H (in x out), tiles [b][r][c].
      suh.resize(kBlock);
      svh.resize(H);
      for (int64_t i = 0; i < kBlock; ++i)
        suh[i] = floatAt(chan, trow * I + h * kBlock + i);
      for (int64_t o = 0; o < H; ++o)
        svh[o] = floatAt(*L.signsOut, o) * floatAt(blk, trow * hb + o / kBlock);
      tr::decodeMatrix(words.data(), kBlock, H, tr::Width::bits(k),
                       tr::Codebook::Mcg, true, tr::TileOrder::InMajor128,
                       q.data());
      tr::reconstructInPlace(q.data(), kBlock, H, suh.data(), svh.data());
      for (int64_t i = 0; i < kBlock; ++i)
        for (int64_t o = 0; o < H; ++o)
          out[o * I + h * kBlock + i] = q[i * H + o];
    }
  }
  return out;
}

std::vector<float> Exlr8Pack::dequantizeRecord(const DenseRecord &r) const {
  for (auto &kv : r.fields)
    check(kv.second->data != nullptr,
          indexOnlyMessage(r.name + " (" + kv.second->name + ")", r.rel));
  // Block checksums on every load, as for expert halves.
  VerifyReport rep;
  verifyRecord(r, rep, [] {});
  if (!rep.issues.empty()) {
    const VerifyIssue &i = rep.issues.front();
    fail(i.file, ": ", i.object, " at offset ", i.offset, ": ", i.message,
         verifyHint());
  }
  const int64_t O = r.out, N = r.in;
  std::vector<float> w((size_t)(O * N));
  switch (r.code) {
  case kTrellis: {
    const TensorView &t = r.field("trellis"), &suhT = r.field("suh"),
                     &svhT = r.field("svh");
    std::vector<float> suh(N), svh(O);
    for (int64_t i = 0; i < N; ++i)
      suh[i] = floatAt(suhT, i);
    for (int64_t o = 0; o < O; ++o)
      svh[o] = floatAt(svhT, o);
    uint64_t entry = (uint64_t)t.shape[1];
    tr::Width wd = tr::Width::bits((int)r.k);
    for (int64_t g = 0; g < t.shape[0]; ++g) {
      std::vector<uint16_t> words = wordsOf(t.data + g * entry, entry);
      if (r.side != 2) {
        std::vector<float> q((size_t)(N * kBlock));
        tr::decodeMatrix(words.data(), N, kBlock, wd, tr::Codebook::Mcg, true,
                         tr::TileOrder::RowMajor, q.data());
        tr::reconstructInPlace(q.data(), N, kBlock, suh.data(),
                               svh.data() + g * kBlock);
        for (int64_t o = 0; o < kBlock; ++o)
          for (int64_t i = 0; i < N; ++i)
            w[(g * kBlock + o) * N + i] = q[i * kBlock + o];
      } else {
        std::vector<float> q((size_t)(kBlock * O));
        tr::decodeMatrix(words.data(), kBlock, O, wd, tr::Codebook::Mcg, true,
                         tr::TileOrder::InMajor128, q.data());
        tr::reconstructInPlace(q.data(), kBlock, O, suh.data() + g * kBlock,
                               svh.data());
        for (int64_t i = 0; i < kBlock; ++i)
          for (int64_t o = 0; o < O; ++o)
            w[o * N + g * kBlock + i] = q[i * O + o];
      }
    }
    break;
  }
  case kInt4: {
    const TensorView &q4 = r.field("q4"), &s4 = r.field("s4");
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < N; ++i) {
        uint8_t byte;
        float s;
        if (r.side == 2) {
          int64_t b = i / kBlock, c = i % kBlock;
          byte = q4.data[(b * O + o) * 64 + c / 2];
          s = floatAt(s4, (b * O + o) * 4 + c / 32);
        } else {
          byte = q4.data[o * (N / 2) + i / 2];
          s = floatAt(s4, o * (N / 32) + i / 32);
        }
        int nib = (i & 1) ? byte >> 4 : byte & 0xF;
        w[o * N + i] = (float)(nib - 8) * s;
      }
    break;
  }
  case kMxfp8: {
    const TensorView &f8 = r.field("fp8"), &e8 = r.field("e8m0");
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < N; ++i)
        w[o * N + i] = std::ldexp(e4m3ToFloat(f8.data[o * N + i]),
                                  (int)e8.data[o * (N / 32) + i / 32] - 127);
    break;
  }
  case kFp8Block: {
    const TensorView &f8 = r.field("fp8"), &sc = r.field("scale");
    int64_t sb = sc.shape[1];
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < N; ++i)
        w[o * N + i] = e4m3ToFloat(f8.data[o * N + i]) *
                       floatAt(sc, (o / kBlock) * sb + i / kBlock);
    break;
  }
  case kFp8Row: {
    const TensorView &f8 = r.field("fp8"), &sc = r.field("scale");
    for (int64_t o = 0; o < O; ++o) {
      float s = floatAt(sc, o);
      for (int64_t i = 0; i < N; ++i)
        w[o * N + i] = e4m3ToFloat(f8.data[o * N + i]) * s;
    }
    break;
  }
  case kBf16:
  case kFp32: {
    const TensorView &v = r.field(r.code == kBf16 ? "bf16" : "fp32");
    for (int64_t i = 0; i < O * N; ++i)
      w[i] = floatAt(v, i);
    break;
  }
  }
  return w;
}

//===----------------------------------------------------------------------===//
// Verify
//===----------------------------------------------------------------------===//

/// Rows [r0, r1) of a tensor whose leading dim is the sharded side.
void hashRows(Xxh64 &h, const TensorView &t, int64_t r0, int64_t r1) {
  uint64_t rowBytes = t.byteSize / (uint64_t)std::max<int64_t>(t.shape[0], 1);
  r1 = std::min(r1, t.shape[0]);
  if (r1 > r0)
    h.update(t.data + r0 * rowBytes, (r1 - r0) * rowBytes);
}

/// Input-side block b of an [R, C] tensor whose C columns cover `in` inputs
/// (side-2 records of formats 3-7; the spec states "rows r" only for the
/// output side, so this reading is an assumption). 1-D tensors hash whole.
void hashInCols(Xxh64 &h, const TensorView &t, int64_t in, int64_t b,
                bool blockScale) {
  if (t.shape.size() < 2) {
    h.update(t.data, t.byteSize);
    return;
  }
  int64_t R = t.shape[0], C = t.byteSize / dtypeSize(t.dtype) / R;
  int64_t c0, c1;
  if (blockScale)
    c0 = b, c1 = b + 1;
  else
    c0 = b * kBlock * C / in, c1 = std::min<int64_t>(C, (b + 1) * kBlock * C / in);
  uint64_t es = dtypeSize(t.dtype);
  for (int64_t r = 0; r < R; ++r)
    if (c1 > c0)
      h.update(t.data + (r * C + c0) * es, (c1 - c0) * es);
}

void Exlr8Pack::verifyRecord(const DenseRecord &r, VerifyReport &rep,
                             const std::function<void()> &tick) const {
  int64_t n = r.side == 2 ? r.in : r.out;
  int64_t blocks = (n + kBlock - 1) / kBlock;
  const TensorView &cs = *r.checksum;
  if (cs.numel() != blocks) {
    rep.issues.push_back({r.rel, r.object, cs.fileOffset,
                          "checksum tensor has " + std::to_string(cs.numel()) +
                              " entries, expected " + std::to_string(blocks) +
                              " (one per 128-channel block of the " +
                              (r.side == 2 ? "input" : "output") + " side)"});
    return;
  }
  const TensorView &first = r.field(fieldsOf(r.code)[0]);
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t r0 = b * kBlock, r1 = std::min(n, r0 + kBlock);
    Xxh64 h;
    uint64_t at = first.fileOffset;
    switch (r.code) {
    case kTrellis: {
      const TensorView &t = r.field("trellis");
      const TensorView &own = r.field(r.side == 2 ? "suh" : "svh");
      const TensorView &other = r.field(r.side == 2 ? "svh" : "suh");
      hashRows(h, t, b, b + 1);
      hashRows(h, own, r0, r1);
      h.update(other.data, other.byteSize);
      at = t.fileOffset + b * (t.byteSize / t.shape[0]);
      break;
    }
    case kInt4:
      if (r.side == 2) {
        hashRows(h, r.field("q4"), b, b + 1);
        hashRows(h, r.field("s4"), b, b + 1);
        at = first.fileOffset + b * (first.byteSize / first.shape[0]);
        break;
      }
      [[fallthrough]];
    default:
      for (const char *fld : fieldsOf(r.code)) {
        const TensorView &t = r.field(fld);
        bool blockScale = r.code == kFp8Block && std::string(fld) == "scale";
        if (r.side == 2)
          hashInCols(h, t, r.in, b, blockScale);
        else if (blockScale)
          hashRows(h, t, b, b + 1);
        else
          hashRows(h, t, r0, r1);
      }
      if (r.side != 2)
        at = first.fileOffset + r0 * (first.byteSize / first.shape[0]);
      break;
    }
    uint64_t want = (uint64_t)intAt(cs, b), got = h.digest();
    rep.checkedObjects++;
    if (want != got)
      rep.issues.push_back(
          {r.rel, r.object + " block " + std::to_string(b), at,
           "xxh64 mismatch (stored " + hex64(want) + ", computed " +
               hex64(got) + "): " + denseCodeName((int)r.code) +
               " data of channels " + std::to_string(r0) + ".." +
               std::to_string(r1 - 1) + " is damaged; re-download " + r.rel});
    tick();
  }
  for (auto &kv : r.fields) {
    rep.checkedBytes += kv.second->byteSize;
    rep.cover(r.rel, kv.second->fileOffset, kv.second->byteSize,
              CheckKind::Xxh64);
  }
  // A stored checksum that is damaged mismatches: covered by the same check.
  rep.cover(r.rel, cs.fileOffset, cs.byteSize, CheckKind::Xxh64);
}

VerifyReport
Exlr8Pack::verify(const std::function<void(uint64_t, uint64_t)> &progress)
    const {
  VerifyReport rep;
  uint64_t total = 0, done = 0;
  for (auto &L : layers_)
    total += (L.main.size() * L.rows + L.shared.size()) * 3 * L.halves;
  for (auto &r : records_) {
    int64_t n = r.side == 2 ? r.in : r.out;
    total += (n + kBlock - 1) / kBlock;
  }
  auto tick = [&] {
    ++done;
    if (progress && (done % 256 == 0 || done == total))
      progress(done, total);
  };

  // Index-only: nothing to hash; say so instead of pretending.
  bool dataAbsent = false;
  std::string absentFile;
  for (auto &L : layers_)
    for (auto *m : {&L.main, &L.shared})
      for (auto &kv : *m)
        if (!kv.second.data && !dataAbsent)
          dataAbsent = true, absentFile = kv.second.dataRel;
  for (auto &r : records_)
    for (auto &kv : r.fields)
      if (!kv.second->data && !dataAbsent)
        dataAbsent = true, absentFile = r.rel;
  if (dataAbsent) {
    rep.issues.push_back({absentFile, "pack", 0,
                          indexOnlyMessage("the weights", absentFile)});
    return rep;
  }

  // Geometry against config.json.
  if (config_) {
    const ModelConfig &c = *config_;
    for (auto &L : layers_) {
      auto bad = [&](const std::string &what) {
        rep.issues.push_back({L.indexRel, "layer " + std::to_string(L.layer),
                              0, what + " (config.json disagrees with the "
                                        "index; wrong config or pack)"});
      };
      if (c.hiddenSize && L.hidden != c.hiddenSize)
        bad("signs.in has " + std::to_string(L.hidden) +
            " entries, config hidden_size is " + std::to_string(c.hiddenSize));
      if (c.moeIntermediateSize && L.inter != c.moeIntermediateSize)
        bad("side vectors cover " + std::to_string(L.inter) +
            " intermediate channels, config moe_intermediate_size is " +
            std::to_string(c.moeIntermediateSize));
      if (c.numRoutedExperts && L.experts != c.numRoutedExperts)
        bad("index has " + std::to_string(L.rows) +
            " expert rows, config n_routed_experts is " +
            std::to_string(c.numRoutedExperts));
    }
  }

  // Every tensor config.json implies, with its shape; what a release ships
  // beside the causal LM (MTP layers, the vision tower) is recognised and
  // noted, anything else stored is the pack's own business.
  if (config_) {
    ExtraTensorNotes extra;
    for (const WeightInfo &w : weights_)
      extra.add(*config_, w.name, w.layer);
    extra.report(rep);
    checkMtpLayers(*this, *config_, rep);
    for (const HfTensorSpec &s : expectedHfTensors(*config_)) {
      auto it = byName_.find(s.name);
      if (it == byName_.end()) {
        std::string where = s.layer < 0 ? vocabFile()
                            : s.expert >= 0 || s.shared
                                ? indexFile(s.layer)
                                : denseFile(s.layer);
        rep.issues.push_back({where, s.name, 0,
                              "missing: config.json implies this tensor "
                              "but the pack does not store it"});
      } else if (weights_[it->second].shape != s.shape) {
        const WeightInfo &w = weights_[it->second];
        rep.issues.push_back(
            {w.ranges.empty() ? std::string() : w.ranges[0].file, s.name,
             w.ranges.empty() ? 0 : w.ranges[0].offset,
             "shape " + shapeStr(w.shape) + " but config.json implies " +
                 shapeStr(s.shape)});
      }
    }
  }

  // Bytes outside the format's checksums: file headers and index tables
  // (structure, and the tables steer which bytes the xxh64 covers), the
  // signs (exactly +-1), plain tensors (values), the manifests (parsed).
  std::set<const SafetensorsFile *> laidOut;
  auto coverFile = [&](const SafetensorsFile &f, const std::string &rel) {
    if (laidOut.insert(&f).second)
      coverSafetensorsLayout(rep, rel, f);
  };
  for (auto &L : layers_) {
    coverFile(*L.index, L.indexRel);
    for (const TensorView *s : {L.signsIn, L.signsOut}) {
      rep.checkedObjects++;
      std::string bad = checkSigns(*s);
      rep.cover(L.indexRel, s->fileOffset, s->byteSize, CheckKind::Value);
      if (!bad.empty())
        rep.issues.push_back({L.indexRel, s->name, s->fileOffset, bad});
    }
    for (bool sep : {false, true})
      for (auto &kv : sep ? L.shared : L.main) {
        const WidthSet &ws = kv.second;
        if (ws.data)
          coverFile(*ws.data, ws.dataRel);
        std::vector<const TensorView *> tables = {ws.index, ws.checksum};
        tables.insert(tables.end(), ws.chan.begin(), ws.chan.end());
        tables.insert(tables.end(), ws.block.begin(), ws.block.end());
        for (const TensorView *t : tables)
          rep.cover(L.indexRel, t->fileOffset, t->byteSize, CheckKind::Xxh64);
      }
  }
  for (auto &r : records_) {
    coverFile(*r.file, r.rel);
    const TensorView *rec = r.file->find(r.prefix + ".record");
    if (rec)
      rep.cover(r.rel, rec->fileOffset, rec->byteSize, CheckKind::Structure);
  }
  for (size_t pi = 0; pi < plains_.size(); ++pi) {
    const PlainTensor &p = plains_[pi];
    coverFile(*p.file, p.rel);
    rep.checkedObjects++;
    std::string bad = checkPlainValues(p.view->name, *p.view);
    rep.cover(p.rel, p.view->fileOffset, p.view->byteSize, CheckKind::Value);
    if (!bad.empty())
      rep.issues.push_back({p.rel, p.view->name, p.view->fileOffset, bad});
  }
  {
    std::error_code ec;
    std::regex mre(R"(exlr8-manifest-(.+)\.json)");
    const fs::path mdir = fs::path(dir_) / "manifests";
    int64_t halves = layers_.empty() ? 0 : layers_.front().halves;
    if (fs::is_directory(mdir, ec))
      for (auto &de : fs::directory_iterator(mdir, ec)) {
        std::string fn = de.path().filename().string();
        if (!std::regex_match(fn, mre))
          continue;
        std::string rel = "manifests/" + fn;
        rep.checkedObjects++;
        try {
          std::string text = readFileBounded(de.path().string(),
                                             kMaxManifestBytes, "the manifest");
          (void)parseManifest(text, rel, halves);
          rep.cover(rel, 0, text.size(), CheckKind::Structure);
        } catch (const Error &e) {
          rep.issues.push_back({rel, "manifest", 0, e.what()});
        }
      }
  }

  for (auto &L : layers_) {
    const int64_t H = L.hidden;
    for (bool sep : {false, true}) {
      for (auto &kv : sep ? L.shared : L.main) {
        const WidthSet &ws = kv.second;
        int k = kv.first;
        uint64_t want = halfBytes(H, k);
        int64_t rows = sep ? 1 : L.rows;
        for (int64_t row = 0; row < rows; ++row)
          for (int p = 0; p < 3; ++p)
            for (int64_t h = 0; h < L.halves; ++h) {
              bool isShared = sep || (L.sharedRow && row == L.experts);
              std::string obj = "layer " + std::to_string(L.layer) + " " +
                                (isShared ? std::string("shared expert")
                                          : "expert " + std::to_string(row)) +
                                " " + projName(p) + " half " +
                                std::to_string(h) + " (K" + std::to_string(k) +
                                ")";
              int64_t at = ((row * 3 + p) * L.halves + h) * 2;
              int64_t off = intAt(*ws.index, at), len = intAt(*ws.index, at + 1);
              rep.checkedObjects++;
              if ((uint64_t)len != want) {
                rep.issues.push_back(
                    {L.indexRel, obj, (uint64_t)off,
                     "length " + std::to_string(len) + " in " +
                         ws.index->name + ", expected " +
                         std::to_string(want) + " (" + std::to_string(H / 2) +
                         " tiles x 32K bytes)"});
                tick();
                continue;
              }
              if (off < 0 ||
                  !halfInDataSection(ws, (uint64_t)off, want)) {
                rep.issues.push_back(
                    {ws.dataRel, obj, (uint64_t)off,
                     "byte range [" + std::to_string(off) + ", " +
                         std::to_string(off + len) +
                         ") is outside the data section of the file (size " +
                         std::to_string(ws.data->fileSize()) +
                         "); the file is truncated or the index is damaged"});
                tick();
                continue;
              }
              const HalfChecksum c =
                  halfChecksum(L, ws, row, p, h, (uint64_t)off, want);
              rep.checkedBytes += want;
              rep.cover(ws.dataRel, (uint64_t)off, want, CheckKind::Xxh64);
              if (!c.ok())
                rep.issues.push_back({ws.dataRel, obj, (uint64_t)off,
                                      halfDamage(L, ws, p, (uint64_t)off,
                                                 want, c)});
              tick();
            }
      }
    }
  }
  for (auto &r : records_)
    verifyRecord(r, rep, tick);
  verifySlices(rep);
  verifyCommon(rep);
  if (progress)
    progress(done, total);
  return rep;
}

/// index-slices/tp<N>/k<K>/rank<r>.safetensors: each slice must hold
/// exactly the halves §7 places on its rank, with the offsets, checksums,
/// side-vector slices, block scales and signs of the layer index it was cut
/// from (a rank that reads only its slice trusts these). The index itself
/// is covered by the halves' xxh64, so a slice equal to it is covered too.
void Exlr8Pack::verifySlices(VerifyReport &rep) const {
  const fs::path root = fs::path(dir_) / "index-slices";
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    return;
  std::regex tpRe(R"(tp(\d+))");
  std::set<int> widths;
  for (auto &L : layers_)
    for (auto &kv : L.main)
      widths.insert(kv.first);
  for (auto &de : fs::directory_iterator(root, ec)) {
    std::smatch m;
    std::string dn = de.path().filename().string();
    if (!de.is_directory() || !std::regex_match(dn, m, tpRe))
      continue;
    const int tp = (int)parseIntIn(m[1].str(), 1, 1024, "index-slices/" + dn);
    for (int k : widths)
      for (int r = 0; r < tp; ++r) {
        const std::string rel = sliceFile(tp, k, r);
        rep.checkedObjects++;
        auto issue = [&](const std::string &obj, uint64_t off,
                         const std::string &what) {
          rep.issues.push_back({rel, obj, off,
                                what + "; re-download " + rel +
                                    " (or use the layer index files)"});
        };
        if (!fs::exists(fs::path(dir_) / rel)) {
          issue("slice", 0,
                "missing: the pack ships index slices for tp" +
                    std::to_string(tp) + " but not rank " +
                    std::to_string(r) + " at K" + std::to_string(k));
          continue;
        }
        std::shared_ptr<SafetensorsFile> f;
        try {
          f = SafetensorsFile::open((fs::path(dir_) / rel).string());
        } catch (const Error &e) {
          issue("slice", 0, e.what());
          continue;
        }
        coverSafetensorsLayout(rep, rel, *f);
        for (const ExpertLayer &L : layers_) {
          auto wsIt = L.main.find(k);
          if (wsIt == L.main.end())
            continue;
          const WidthSet &ws = wsIt->second;
          const std::string pre = "layers." + std::to_string(L.layer) + ".";
          const int64_t hb = L.hidden / kBlock;
          const TensorView *own = f->find(pre + "owned"),
                           *ix = f->find(pre + "index"),
                           *cs = f->find(pre + "checksum"),
                           *ch = f->find(pre + "chan"),
                           *bl = f->find(pre + "block"),
                           *si = f->find(pre + "signs.in"),
                           *so = f->find(pre + "signs.out");
          if (!own || !ix || !cs || !ch || !bl || !si || !so) {
            issue(pre + "*", 0,
                  "layer " + std::to_string(L.layer) +
                      " is incomplete (needs owned, index, checksum, chan, "
                      "block, signs.in, signs.out)");
            continue;
          }
          std::vector<std::pair<int64_t, int64_t>> want;
          for (int64_t row = 0; row < L.rows; ++row)
            for (int64_t h = 0; h < L.halves; ++h)
              if (ownerRank(L.halves, row, h, L.layer, tp) == r)
                want.push_back({row, h});
          const int64_t n = (int64_t)want.size();
          if (!isIntDType(own->dtype) ||
              own->shape != std::vector<int64_t>{n, 2} ||
              !isIntDType(ix->dtype) ||
              ix->shape != std::vector<int64_t>{n, 3, 2} ||
              !isIntDType(cs->dtype) ||
              cs->shape != std::vector<int64_t>{n, 3} ||
              !isFloatDType(ch->dtype) ||
              ch->shape != std::vector<int64_t>{n, 3, kBlock} ||
              !isFloatDType(bl->dtype) ||
              bl->shape != std::vector<int64_t>{L.rows, 3, hb} ||
              si->shape != L.signsIn->shape || so->shape != L.signsOut->shape) {
            issue(pre + "owned", own->fileOffset,
                  "shapes do not fit " + std::to_string(n) +
                      " halves of layer " + std::to_string(L.layer) +
                      " on rank " + std::to_string(r) + " of " +
                      std::to_string(tp) + " (rule (halves*e + h + L) mod N)");
            continue;
          }
          std::string bad;
          for (int64_t i = 0; i < n && bad.empty(); ++i) {
            auto [row, h] = want[(size_t)i];
            if (intAt(*own, 2 * i) != row || intAt(*own, 2 * i + 1) != h) {
              bad = "entry " + std::to_string(i) + " is not expert row " +
                    std::to_string(row) + " half " + std::to_string(h);
              break;
            }
            for (int p = 0; p < 3 && bad.empty(); ++p) {
              int64_t at = (row * 3 + p) * L.halves + h;
              if (intAt(*ix, (i * 3 + p) * 2) != intAt(*ws.index, at * 2) ||
                  intAt(*ix, (i * 3 + p) * 2 + 1) !=
                      intAt(*ws.index, at * 2 + 1))
                bad = "offset/length of row " + std::to_string(row) + " " +
                      projName(p) + " half " + std::to_string(h) +
                      " differs from " + L.indexRel;
              else if (intAt(*cs, i * 3 + p) != intAt(*ws.checksum, at))
                bad = "checksum of row " + std::to_string(row) + " " +
                      projName(p) + " half " + std::to_string(h) +
                      " differs from " + L.indexRel;
              for (int64_t c = 0; c < kBlock && bad.empty(); ++c)
                if (floatAt(*ch, (i * 3 + p) * kBlock + c) !=
                    floatAt(*ws.chan[p], row * L.inter + h * kBlock + c))
                  bad = std::string(p < 2 ? "svh" : "suh") + " slice of row " +
                        std::to_string(row) + " " + projName(p) + " half " +
                        std::to_string(h) + " differs from " + L.indexRel;
            }
          }
          for (int64_t row = 0; row < L.rows && bad.empty(); ++row)
            for (int p = 0; p < 3 && bad.empty(); ++p)
              for (int64_t b = 0; b < hb && bad.empty(); ++b)
                if (floatAt(*bl, (row * 3 + p) * hb + b) !=
                    floatAt(*ws.block[p], row * hb + b))
                  bad = "block scales of row " + std::to_string(row) + " " +
                        projName(p) + " differ from " + L.indexRel;
          for (int64_t i = 0; i < L.hidden && bad.empty(); ++i)
            if (floatAt(*si, i) != floatAt(*L.signsIn, i) ||
                floatAt(*so, i) != floatAt(*L.signsOut, i))
              bad = "signs differ from " + L.indexRel + " at channel " +
                    std::to_string(i);
          for (const TensorView *t : {own, ix, cs, ch, bl, si, so})
            rep.cover(rel, t->fileOffset, t->byteSize, CheckKind::Structure);
          if (!bad.empty())
            issue("layer " + std::to_string(L.layer), own->fileOffset, bad);
        }
      }
  }
}

} // namespace

std::unique_ptr<Pack> openExlr8Pack(const std::string &dir,
                                    const PackOpenOptions &opt) {
  return std::make_unique<Exlr8Pack>(dir, opt);
}

} // namespace glm::rt
