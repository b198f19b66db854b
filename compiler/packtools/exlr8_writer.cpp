//===- exlr8_writer.cpp - quantize a Hugging Face model into exlr8 v2 -----===//
//
// Writes the layout of shared/specs/exlr8-format.md: per MoE layer one `.kK`
// file per width (every half of every expert at every width, 64 KiB aligned)
// and an index file (absolute offsets, xxh64 checksums per §3, side vectors,
// per-layer signs), dense records per layer (§6), the vocab file, and
// manifests (one per width plus "mixed"). Index-only mode writes the same
// headers and offset tables without quantizing anything (full-size geometry
// in seconds): no `.kK` files, header-only dense files, zero checksums.
//
// Encoding: each half is quantized by trellis::quantizeMatrix (MCG, E4M3
// inside Viterbi). The hidden side of an expert projection is shared by all
// its halves (signs.in · su_block, or signs.out · sv_block for down), so
// that side is handed to the encoder as fixed sign/scale vectors and the
// global scale ends up on the half's own intermediate-side vector.
//
//===----------------------------------------------------------------------===//
#include "compiler/packtools/packtools.h"

#include "runtime/base/error.h"
#include "runtime/base/strings.h"
#include "runtime/base/hash.h"
#include "runtime/base/numeric.h"
#include "runtime/base/progress.h"
#include "runtime/codec/trellis.h"
#include "runtime/formats/exlr8_layout.h"
#include "runtime/formats/safetensors.h"
#include "runtime/model/hf_names.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

namespace fs = std::filesystem;
namespace tr = glm::rt::trellis;
namespace x8 = glm::rt::exlr8;
using glm::rt::check;
using glm::rt::DType;
using glm::rt::fail;

namespace glmc {
using glm::rt::endsWith;
namespace {

constexpr int64_t kB = x8::kBlock;
constexpr uint64_t kAlign = 64 * 1024;

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// One tensor to write, from the source checkpoint or from config alone.
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  glm::rt::WeightFormat srcFormat = glm::rt::WeightFormat::BF16;
  glm::rt::HfTensorSpec parsed;
};

struct ExpertPlan {
  int64_t layer = 0;
  std::set<int64_t> experts;
  bool hasShared = false;
};

/// One layer's index tables of one width, kept for the index slices.
struct WidthTables {
  std::vector<uint64_t> index, checksum;        // [row][p][h](x2)
  std::array<std::vector<uint16_t>, 3> chan, block; // F16; empty: index-only
};
struct LayerTables {
  int64_t layer = 0, rows = 0, halves = 0, hidden = 0;
  std::map<int, WidthTables> widths;
  std::vector<uint16_t> signsIn, signsOut; // F16
};

std::vector<uint16_t> toHalf(const std::vector<float> &v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    h[i] = glm::rt::floatToHalf(v[i]);
  return h;
}

//===----------------------------------------------------------------------===//
// Expert layers
//===----------------------------------------------------------------------===//

class ExpertLayerWriter {
public:
  ExpertLayerWriter(const glm::rt::ModelConfig &cfg,
                    const glm::rt::Pack *source, const std::string &outDir,
                    const QuantizeOptions &opt, const std::vector<int> &widths,
                    const ExpertPlan &plan, glm::rt::Progress &bar)
      : cfg_(cfg), source_(source), out_(outDir), opt_(opt), widths_(widths),
        plan_(plan), bar_(bar) {}
  void run();
  /// The routed (and row-E shared) tables after run(), for index slices.
  LayerTables tables() const {
    LayerTables t;
    t.layer = plan_.layer;
    t.rows = rows_;
    t.halves = halves_;
    t.hidden = H_;
    for (auto &kv : main_)
      t.widths[kv.first] = {kv.second.index, kv.second.checksum,
                            kv.second.chan, kv.second.block};
    t.signsIn = toHalf(signsIn_);
    t.signsOut = toHalf(signsOut_);
    return t;
  }

private:
  struct Width {
    int k;
    std::unique_ptr<x8::LaidOutFile> data;
    std::vector<std::array<size_t, 3>> tensor; // [row][p] in data
    // Index content [row][p][h]: offsets known from the layout.
    std::vector<uint64_t> index, checksum;
    std::array<std::vector<uint16_t>, 3> chan, block; // F16
  };
  void layoutWidth(Width &w);
  void quantizeRow(int64_t row, const std::string names[3]);
  int64_t rowsOf(bool sep) const { return sep ? 1 : rows_; }

  const glm::rt::ModelConfig &cfg_;
  const glm::rt::Pack *source_;
  std::string out_;
  const QuantizeOptions &opt_;
  std::vector<int> widths_;
  const ExpertPlan &plan_;
  glm::rt::Progress &bar_;

  int64_t E_ = 0, H_ = 0, I_ = 0, halves_ = 0, hb_ = 0;
  int64_t rows_ = 0;      // rows of kK.index
  bool sharedRow_ = false; // shared expert = row E (GLM-5.3-Flash)
  bool sharedSep_ = false; // shared.kK.* tensors (GLM-5.3)
  std::vector<float> signsIn_, signsOut_;
  std::map<int, Width> main_, shared_;
};

void ExpertLayerWriter::layoutWidth(Width &w) {
  w.data = std::make_unique<x8::LaidOutFile>(kAlign);
  w.data->setMetadata("format", "exlr8 v2 expert data");
  uint64_t hbytes = x8::halfBytes(H_, w.k);
  auto addRows = [&](Width &dst, bool sep) {
    int64_t R = rowsOf(sep);
    dst.tensor.resize(R);
    for (int64_t r = 0; r < R; ++r)
      for (int p = 0; p < 3; ++p)
        dst.tensor[r][p] = w.data->add(
            (sep ? std::string("shared") : "experts." + std::to_string(r)) +
                "." + x8::projName(p),
            DType::U8, {halves_, (int64_t)hbytes});
  };
  addRows(w, false);
  Width *sw = nullptr;
  if (sharedSep_) {
    sw = &shared_[w.k];
    sw->k = w.k;
    addRows(*sw, true);
  }
  w.data->layout();
  for (Width *d : {&w, sw}) {
    if (!d)
      continue;
    int64_t R = rowsOf(d == sw);
    d->index.resize(R * 3 * halves_ * 2);
    for (int64_t r = 0; r < R; ++r)
      for (int p = 0; p < 3; ++p)
        for (int64_t h = 0; h < halves_; ++h) {
          size_t at = ((r * 3 + p) * halves_ + h) * 2;
          d->index[at] = w.data->fileOffset(d->tensor[r][p]) + h * hbytes;
          d->index[at + 1] = hbytes;
        }
    if (!opt_.indexOnly) {
      d->checksum.assign(R * 3 * halves_, 0);
      for (int p = 0; p < 3; ++p) {
        d->chan[p].assign(R * I_, 0);
        d->block[p].assign(R * hb_, 0);
      }
    }
  }
}

void ExpertLayerWriter::run() {
  const int64_t L = plan_.layer;
  E_ = cfg_.numRoutedExperts;
  H_ = cfg_.hiddenSize;
  I_ = cfg_.moeIntermediateSize;
  check(H_ % kB == 0 && I_ % kB == 0, "quantize exlr8: hidden_size ", H_,
        " and moe_intermediate_size ", I_,
        " must be multiples of 128 (exlr8 halves and blocks are 128 wide)");
  check(plan_.experts.empty() || *plan_.experts.rbegin() < E_,
        "quantize exlr8: layer ", L, " has expert ", *plan_.experts.rbegin(),
        " but config n_routed_experts is ", E_);
  halves_ = I_ / kB;
  hb_ = H_ / kB;
  // GLM-5.3-Flash packs keep the shared expert as expert E.
  sharedRow_ = plan_.hasShared && cfg_.modelType == "glm5_next";
  sharedSep_ = plan_.hasShared && !sharedRow_;
  rows_ = E_ + (sharedRow_ ? 1 : 0);

  // Per-layer hidden-side signs, from seed + layer (§2.2).
  uint64_t s = opt_.seed + (uint64_t)L;
  signsIn_.resize(H_);
  signsOut_.resize(H_);
  for (auto *v : {&signsIn_, &signsOut_})
    for (auto &x : *v)
      x = (mix(s++) >> 63) ? -1.0f : 1.0f;

  for (int k : widths_) {
    Width &w = main_[k];
    w.k = k;
    layoutWidth(w);
    if (!opt_.indexOnly)
      w.data->create((fs::path(out_) / x8::dataFile(L, k)).string());
  }

  if (!opt_.indexOnly) {
    for (int64_t e = 0; e < E_; ++e) {
      std::string names[3];
      for (int p = 0; p < 3; ++p)
        names[p] = x8::expertWeightName(cfg_.tensorPrefix(), L, e, p);
      quantizeRow(e, names);
    }
    if (plan_.hasShared) {
      std::string names[3];
      for (int p = 0; p < 3; ++p)
        names[p] = x8::sharedWeightName(cfg_.tensorPrefix(), L, p);
      quantizeRow(sharedRow_ ? E_ : -1, names);
    }
    for (auto &kv : main_)
      kv.second.data->close();
  } else {
    bar_.advance((uint64_t)widths_.size() * (rows_ + (sharedSep_ ? 1 : 0)) *
                 3 * halves_);
  }

  // The index file.
  x8::LaidOutFile idx(kAlign);
  idx.setMetadata("format", "exlr8 v2 layer index");
  idx.setMetadata("widths", x8::formatWidths(widths_));
  if (sharedSep_)
    idx.setMetadata("shared_widths", x8::formatWidths(widths_));
  idx.setMetadata("experts", std::to_string(E_));
  struct Pending {
    size_t id;
    const void *data;
    uint64_t len;
  };
  std::vector<Pending> pending;
  static const char *chanName[] = {"gate.svh", "up.svh", "down.suh"};
  static const char *blockName[] = {"gate.su_block", "up.su_block",
                                    "down.sv_block"};
  for (bool sep : {false, true}) {
    if (sep && !sharedSep_)
      continue;
    for (auto &kv : sep ? shared_ : main_) {
      Width &w = kv.second;
      int64_t R = rowsOf(sep);
      auto name = [&](const std::string &suffix) {
        return x8::widthTensor(sep, w.k, suffix);
      };
      pending.push_back({idx.add(name("index"), DType::I64,
                                 {R, 3, halves_, 2}),
                         w.index.data(), w.index.size() * 8});
      size_t cs = idx.add(name("checksum"), DType::U64, {R, 3, halves_});
      if (!opt_.indexOnly)
        pending.push_back({cs, w.checksum.data(), w.checksum.size() * 8});
      for (int p = 0; p < 3; ++p) {
        size_t c = idx.add(name(chanName[p]), DType::F16, {R, I_});
        size_t b = idx.add(name(blockName[p]), DType::F16, {R, hb_});
        if (!opt_.indexOnly) {
          pending.push_back({c, w.chan[p].data(), w.chan[p].size() * 2});
          pending.push_back({b, w.block[p].data(), w.block[p].size() * 2});
        }
      }
    }
  }
  std::vector<uint16_t> si = toHalf(signsIn_), so = toHalf(signsOut_);
  pending.push_back({idx.add("signs.in", DType::F16, {H_}), si.data(), si.size() * 2});
  pending.push_back({idx.add("signs.out", DType::F16, {H_}), so.data(), so.size() * 2});
  idx.create((fs::path(out_) / x8::indexFile(L)).string());
  for (auto &p : pending)
    idx.write(p.id, p.data, p.len);
  idx.close();
}

/// Per-128-block RMS of one side of W relative to its overall RMS, as fp16.
std::vector<float> blockScales(const std::vector<float> &w, int64_t rows,
                               int64_t cols, bool alongCols) {
  int64_t n = alongCols ? cols : rows, blocks = n / kB;
  std::vector<double> sum(blocks, 0.0);
  double total = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double x = (double)w[r * cols + c];
      sum[(alongCols ? c : r) / kB] += x * x;
      total += x * x;
    }
  std::vector<float> out(blocks, 1.0f);
  double mean = total / (double)(rows * cols);
  for (int64_t b = 0; b < blocks; ++b) {
    double m = sum[b] / (double)(kB * (alongCols ? rows : cols));
    if (mean > 0 && m > 0) {
      float v = glm::rt::roundToHalf((float)std::sqrt(m / mean));
      // Keep it a normal, non-zero fp16 value.
      out[b] = std::min(std::max(v, 1.0f / 1024), 1024.0f);
    }
  }
  return out;
}

void ExpertLayerWriter::quantizeRow(int64_t row, const std::string names[3]) {
  const int64_t L = plan_.layer;
  bool sep = row < 0;
  int64_t trow = sep ? 0 : row;
  for (int p = 0; p < 3; ++p) {
    const glm::rt::WeightInfo &info = source_->get(names[p]);
    std::vector<int64_t> want = p < 2 ? std::vector<int64_t>{I_, H_}
                                      : std::vector<int64_t>{H_, I_};
    check(info.shape == want, source_->dir(), ": ", names[p], " has shape [",
          info.shape.size() ? info.shape[0] : 0, ", ",
          info.shape.size() > 1 ? info.shape[1] : 0, "], config implies [",
          want[0], ", ", want[1], "]");
    std::vector<float> W = source_->dequantize(names[p]);
    // Hidden-side block scales: columns of gate/up [I, H], rows of down.
    std::vector<float> blk = blockScales(W, want[0], want[1], p < 2);
    std::vector<float> fixed(H_);
    const std::vector<float> &signs = p < 2 ? signsIn_ : signsOut_;
    for (int64_t i = 0; i < H_; ++i)
      fixed[i] = signs[i] * blk[i / kB];
    std::vector<uint16_t> blkH = toHalf(blk);

    for (int k : widths_) {
      Width &w = (sep ? shared_ : main_).at(k);
      Width &file = main_.at(k);
      std::copy(blkH.begin(), blkH.end(), w.block[p].begin() + trow * hb_);
      uint64_t hbytes = x8::halfBytes(H_, k);
      for (int64_t h = 0; h < halves_; ++h) {
        tr::EncodeOptions eo;
        eo.width = tr::Width::bits(k);
        eo.codebook = tr::Codebook::Mcg;
        eo.e4m3 = true;
        eo.threads = opt_.threads;
        eo.seed = mix(opt_.seed ^ mix((uint64_t)L * 1000003 + (uint64_t)(row + 1)) ^
                      ((uint64_t)p << 40) ^ ((uint64_t)h << 20) ^ (uint64_t)k);
        std::vector<float> t((size_t)(H_ * kB));
        std::vector<uint16_t> chan(kB);
        tr::Quantized q;
        if (p < 2) {
          // T is H x 128 (in x out); the input side is fixed, so bring the
          // RMS to the codebook's first: the encoder's global scale is then
          // exactly 1 and suh = signs.in · su_block as stored.
          eo.order = tr::TileOrder::RowMajor;
          eo.inSigns = fixed;
          double ss = 0;
          for (int64_t o = 0; o < kB; ++o)
            for (int64_t i = 0; i < H_; ++i) {
              float x = W[(h * kB + o) * H_ + i];
              t[i * kB + o] = x;
              double y = (double)x / fixed[i];
              ss += y * y;
            }
          double rms = std::sqrt(ss / (double)(H_ * kB));
          double alpha = rms > 0 ? tr::codebookStd(eo.codebook) / rms : 1.0;
          for (auto &x : t)
            x = (float)(x * alpha);
          q = tr::quantizeMatrix(t.data(), H_, kB, eo);
          // W·alpha ≈ diag(suh)·Hb·T·Hb·diag(svh) with suh = c·fixed.
          double c = q.suh[0] / fixed[0];
          for (int64_t o = 0; o < kB; ++o)
            chan[o] = glm::rt::floatToHalf(
                rms > 0 ? (float)(q.svh[o] * c / alpha) : 0.0f);
        } else {
          // T is 128 x H; the output side is fixed and the encoder folds
          // its global scale into suh, the half's own vector.
          eo.order = tr::TileOrder::InMajor128;
          eo.outSigns = fixed;
          for (int64_t i = 0; i < kB; ++i)
            for (int64_t o = 0; o < H_; ++o)
              t[i * H_ + o] = W[o * I_ + h * kB + i];
          q = tr::quantizeMatrix(t.data(), kB, H_, eo);
          for (int64_t o = 0; o < H_; ++o)
            check(q.svh[o] == fixed[o], "quantize exlr8: internal: the "
                  "encoder changed the fixed output side of ", names[p]);
          for (int64_t i = 0; i < kB; ++i)
            chan[i] = glm::rt::floatToHalf(q.suh[i]);
        }
        check(q.tileWords.size() * 2 == hbytes, "quantize exlr8: internal: ",
              names[p], " half ", h, " encoded to ", q.tileWords.size() * 2,
              " bytes, expected ", hbytes);
        std::copy(chan.begin(), chan.end(),
                  w.chan[p].begin() + trow * I_ + h * kB);
        size_t tid = w.tensor[trow][p];
        file.data->write(tid, q.tileWords.data(), hbytes, h * hbytes);
        glm::rt::Xxh64 x;
        x.update(q.tileWords.data(), hbytes);
        x.update(chan.data(), kB * 2);
        x.update(blkH.data(), hb_ * 2);
        w.checksum[(trow * 3 + p) * halves_ + h] = x.digest();
        bar_.advance();
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Dense records (§6)
//===----------------------------------------------------------------------===//

struct RecordChoice {
  int code = x8::kBf16;
  int side = 0;
  int k = 0;
};

RecordChoice chooseRecord(const std::string &m, int64_t out, int64_t in) {
  RecordChoice c;
  auto is = [&](const char *suffix) { return endsWith(m, suffix); };
  bool trellisOk = out % kB == 0 && in % kB == 0;
  if (is("self_attn.o_proj") || is("mlp.down_proj"))
    c = {x8::kTrellis, 2, 4};
  else if (is("self_attn.q_b_proj") || is("mlp.gate_proj") ||
           is("mlp.up_proj"))
    c = {x8::kTrellis, 1, 4};
  else if (is("q_a_proj") || is("kv_a_proj_with_mqa") || is("indexer.wk") ||
           is("eh_proj") || is("self_attn.q_proj") || is("self_attn.k_proj") ||
           is("self_attn.v_proj")) // KDA's q/k/v: attention input projections
    c = {x8::kMxfp8, 0, 8};
  else if (is("indexer.wq_b"))
    c = {x8::kMxfp8, 1, 8};
  else if (is("kv_b_proj"))
    c = {x8::kFp8Block, 1, 8};
  else if (m == "embed_tokens")
    c = {x8::kFp8Row, 0, 8};
  else if (m == "lm_head")
    c = {x8::kFp8Row, 1, 8};
  else
    c = {x8::kBf16, 0, 16}; // router, indexer weights_proj, anything else
  if (c.code == x8::kTrellis && !trellisOk)
    c = {x8::kMxfp8, c.side == 2 ? 0 : c.side, 8};
  if (c.code == x8::kMxfp8 && in % 32 != 0)
    c = {x8::kBf16, 0, 16};
  return c;
}

/// One record's stored tensors (§6 table order) and checksums (§3).
struct EncodedRecord {
  std::string m;
  RecordChoice c;
  int64_t out = 0, in = 0;
  struct Field {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Field> fields;
  std::vector<uint64_t> checksum;
};

template <class T> std::vector<uint8_t> bytesOf(const std::vector<T> &v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<int64_t> fieldShapes(const RecordChoice &c, int64_t out,
                                 int64_t in, int f) {
  auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  switch (c.code) {
  case x8::kTrellis:
    if (f == 0)
      return c.side == 2 ? std::vector<int64_t>{in / kB, 16 * c.k * out}
                         : std::vector<int64_t>{out / kB, 16 * c.k * in};
    return f == 1 ? std::vector<int64_t>{in} : std::vector<int64_t>{out};
  case x8::kMxfp8:
    return f == 0 ? std::vector<int64_t>{out, in}
                  : std::vector<int64_t>{out, in / 32};
  case x8::kFp8Block:
    return f == 0 ? std::vector<int64_t>{out, in}
                  : std::vector<int64_t>{cdiv(out, kB), cdiv(in, kB)};
  case x8::kFp8Row:
    return f == 0 ? std::vector<int64_t>{out, in} : std::vector<int64_t>{out};
  default:
    return {out, in};
  }
}

std::vector<std::pair<const char *, DType>> fieldList(int code) {
  switch (code) {
  case x8::kTrellis:
    return {{"trellis", DType::U8}, {"suh", DType::F16}, {"svh", DType::F16}};
  case x8::kMxfp8:
    return {{"fp8", DType::F8_E4M3}, {"e8m0", DType::U8}};
  case x8::kFp8Block:
    return {{"fp8", DType::F8_E4M3}, {"scale", DType::F32}};
  case x8::kFp8Row:
    return {{"fp8", DType::F8_E4M3}, {"scale", DType::F32}};
  default:
    return {{"bf16", DType::BF16}};
  }
}

/// Quantizes W [out, in] into the record's fields.
void encodeRecord(EncodedRecord &r, const std::vector<float> &W,
                  const QuantizeOptions &opt, uint64_t seed) {
  const int64_t O = r.out, N = r.in;
  auto fl = fieldList(r.c.code);
  r.fields.resize(fl.size());
  for (size_t f = 0; f < fl.size(); ++f) {
    r.fields[f].name = fl[f].first;
    r.fields[f].dtype = fl[f].second;
    r.fields[f].shape = fieldShapes(r.c, O, N, (int)f);
  }
  auto e4m3 = [](float v) { return glm::rt::floatToE4m3(v); };
  switch (r.c.code) {
  case x8::kTrellis: {
    // The whole matrix (in x out) in one call, then its tiles regrouped by
    // 128-channel slice of the sharded side.
    std::vector<float> t((size_t)(N * O));
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < N; ++i)
        t[i * O + o] = W[o * N + i];
    tr::EncodeOptions eo;
    eo.width = tr::Width::bits(r.c.k);
    eo.codebook = tr::Codebook::Mcg;
    eo.e4m3 = true;
    eo.order = tr::TileOrder::RowMajor;
    eo.seed = seed;
    eo.threads = opt.threads;
    tr::Quantized q = tr::quantizeMatrix(t.data(), N, O, eo);
    const int wpt = eo.width.wordsPerTile();
    const int64_t tilesC = O / 16;
    std::vector<uint16_t> words(q.tileWords.size());
    int64_t pos = 0;
    auto take = [&](int64_t ti, int64_t tj) {
      std::memcpy(words.data() + pos * wpt,
                  q.tileWords.data() + (ti * tilesC + tj) * wpt, wpt * 2);
      ++pos;
    };
    if (r.c.side == 2) {
      for (int64_t g = 0; g < N / kB; ++g) // rows 128g.., tiled like down
        for (int64_t b = 0; b < O / kB; ++b)
          for (int64_t rr = 0; rr < 8; ++rr)
            for (int64_t cc = 0; cc < 8; ++cc)
              take(8 * g + rr, 8 * b + cc);
    } else {
      for (int64_t g = 0; g < O / kB; ++g) // cols 128g.., like gate/up
        for (int64_t k16 = 0; k16 < N / 16; ++k16)
          for (int64_t cc = 0; cc < 8; ++cc)
            take(k16, 8 * g + cc);
    }
    r.fields[0].bytes = bytesOf(words);
    r.fields[1].bytes = bytesOf(toHalf(q.suh));
    r.fields[2].bytes = bytesOf(toHalf(q.svh));
    break;
  }
  case x8::kMxfp8: {
    std::vector<uint8_t> q((size_t)(O * N)), e((size_t)(O * N / 32));
    for (int64_t o = 0; o < O; ++o)
      for (int64_t g = 0; g < N / 32; ++g) {
        float amax = 0;
        for (int64_t i = 0; i < 32; ++i)
          amax = std::max(amax, std::fabs(W[o * N + g * 32 + i]));
        // Smallest power of two that keeps amax within E4M3's 448.
        int ex = amax > 0 ? (int)std::ceil(std::log2(amax / 448.0)) : 0;
        ex = std::min(std::max(ex, -127), 127);
        e[o * (N / 32) + g] = (uint8_t)(ex + 127);
        for (int64_t i = 0; i < 32; ++i)
          q[o * N + g * 32 + i] = e4m3(std::ldexp(W[o * N + g * 32 + i], -ex));
      }
    r.fields[0].bytes = q;
    r.fields[1].bytes = e;
    break;
  }
  case x8::kFp8Block: {
    int64_t ob = (O + kB - 1) / kB, ib = (N + kB - 1) / kB;
    std::vector<float> sc((size_t)(ob * ib), 1.0f);
    for (int64_t bo = 0; bo < ob; ++bo)
      for (int64_t bi = 0; bi < ib; ++bi) {
        float amax = 0;
        for (int64_t o = bo * kB; o < std::min(O, bo * kB + kB); ++o)
          for (int64_t i = bi * kB; i < std::min(N, bi * kB + kB); ++i)
            amax = std::max(amax, std::fabs(W[o * N + i]));
        if (amax > 0)
          sc[bo * ib + bi] = amax / 448.0f;
      }
    std::vector<uint8_t> q((size_t)(O * N));
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < N; ++i)
        q[o * N + i] = e4m3(W[o * N + i] / sc[(o / kB) * ib + i / kB]);
    r.fields[0].bytes = q;
    r.fields[1].bytes = bytesOf(sc);
    break;
  }
  case x8::kFp8Row: {
    std::vector<float> sc((size_t)O, 1.0f);
    std::vector<uint8_t> q((size_t)(O * N));
    for (int64_t o = 0; o < O; ++o) {
      float amax = 0;
      for (int64_t i = 0; i < N; ++i)
        amax = std::max(amax, std::fabs(W[o * N + i]));
      if (amax > 0)
        sc[o] = amax / 448.0f;
      for (int64_t i = 0; i < N; ++i)
        q[o * N + i] = e4m3(W[o * N + i] / sc[o]);
    }
    r.fields[0].bytes = q;
    r.fields[1].bytes = bytesOf(sc);
    break;
  }
  default: {
    std::vector<uint16_t> b((size_t)(O * N));
    for (int64_t i = 0; i < O * N; ++i)
      b[i] = glm::rt::floatToBf16(W[i]);
    r.fields[0].bytes = bytesOf(b);
    break;
  }
  }

  // §3: one xxh64 per 128-channel block of the sharded side.
  int64_t n = r.c.side == 2 ? N : O, blocks = (n + kB - 1) / kB;
  auto rows = [&](glm::rt::Xxh64 &x, const EncodedRecord::Field &f, int64_t a,
                  int64_t z) {
    size_t rowBytes = f.bytes.size() / f.shape[0];
    z = std::min(z, f.shape[0]);
    x.update(f.bytes.data() + a * rowBytes, (z - a) * rowBytes);
  };
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t r0 = b * kB, r1 = std::min(n, r0 + kB);
    glm::rt::Xxh64 x;
    if (r.c.code == x8::kTrellis) {
      const auto &own = r.fields[r.c.side == 2 ? 1 : 2];
      const auto &other = r.fields[r.c.side == 2 ? 2 : 1];
      rows(x, r.fields[0], b, b + 1);
      rows(x, own, r0, r1);
      x.update(other.bytes.data(), other.bytes.size());
    } else if (r.c.code == x8::kFp8Block) {
      rows(x, r.fields[0], r0, r1);
      rows(x, r.fields[1], b, b + 1);
    } else {
      for (auto &f : r.fields)
        rows(x, f, r0, r1);
    }
    r.checksum.push_back(x.digest());
  }
}

/// Writes one dense file: records for 2-D linear weights, the rest as is.
/// Group of the vision tower's tensors (dense/exlr8-vision.safetensors).
constexpr int64_t kVisionGroup = -2;

void writeDenseFile(const std::string &path, int64_t layer,
                    const std::string &prefix,
                    const std::vector<Tensor> &tensors,
                    const glm::rt::Pack *source, const QuantizeOptions &opt,
                    glm::rt::Progress &bar) {
  // Names are stored relative to the layer (or, in the vocab file, to the
  // text model's prefix); the vision tower keeps its full names and stays
  // plain: glmc does not run it, so nothing is gained by encoding it.
  const bool vision = layer == kVisionGroup;
  std::string lp = vision       ? std::string()
                   : layer >= 0 ? prefix + "layers." + std::to_string(layer) + "."
                                : prefix;
  x8::LaidOutFile f(256);
  f.setMetadata("format", "exlr8 v2 dense");
  struct Pending {
    size_t id;
    std::vector<uint8_t> bytes;
  };
  std::vector<Pending> pending;
  for (const Tensor &t : tensors) {
    std::string rel = t.name.rfind(lp, 0) == 0 ? t.name.substr(lp.size())
                                               : t.name;
    bool linear = !vision && t.shape.size() == 2 && endsWith(rel, ".weight");
    if (!linear) {
      // Stored as is under the HF suffix (norms, biases, ...).
      DType dt = t.srcFormat == glm::rt::WeightFormat::F32   ? DType::F32
                 : t.srcFormat == glm::rt::WeightFormat::F16 ? DType::F16
                                                             : DType::BF16;
      size_t id = f.add(rel, dt, t.shape);
      if (!opt.indexOnly) {
        std::vector<float> v = source->dequantize(t.name);
        std::vector<uint8_t> b;
        if (dt == DType::F32)
          b = bytesOf(v);
        else if (dt == DType::F16)
          b = bytesOf(toHalf(v));
        else {
          std::vector<uint16_t> h(v.size());
          for (size_t i = 0; i < v.size(); ++i)
            h[i] = glm::rt::floatToBf16(v[i]);
          b = bytesOf(h);
        }
        pending.push_back({id, std::move(b)});
      }
      bar.advance();
      continue;
    }
    EncodedRecord r;
    r.m = rel.substr(0, rel.size() - 7);
    r.out = t.shape[0];
    r.in = t.shape[1];
    r.c = chooseRecord(r.m, r.out, r.in);
    std::vector<int64_t> rec = {r.c.code, r.out, r.in, r.c.k, r.c.side, 0, 0, 0};
    int64_t n = r.c.side == 2 ? r.in : r.out;
    // Header-only files keep the record in the metadata too.
    std::string recText;
    for (size_t i = 0; i < rec.size(); ++i)
      recText += (i ? "," : "") + std::to_string(rec[i]);
    f.setMetadata(r.m + ".record", recText);
    size_t recId = f.add(r.m + ".record", DType::I64, {8});
    size_t csId = f.add(r.m + ".checksum", DType::U64, {(n + kB - 1) / kB});
    auto fl = fieldList(r.c.code);
    std::vector<size_t> ids;
    for (size_t i = 0; i < fl.size(); ++i)
      ids.push_back(f.add(r.m + "." + fl[i].first, fl[i].second,
                          fieldShapes(r.c, r.out, r.in, (int)i)));
    if (!opt.indexOnly) {
      std::vector<float> W = source->dequantize(t.name);
      encodeRecord(r, W, opt, mix(opt.seed ^ std::hash<std::string>()(t.name)));
      pending.push_back({recId, bytesOf(rec)});
      pending.push_back({csId, bytesOf(r.checksum)});
      for (size_t i = 0; i < ids.size(); ++i)
        pending.push_back({ids[i], std::move(r.fields[i].bytes)});
    }
    bar.advance();
  }
  f.create(path, opt.indexOnly);
  for (auto &p : pending)
    f.write(p.id, p.bytes.data(), p.bytes.size());
  f.close();
}

//===----------------------------------------------------------------------===//
// Manifests (§4)
//===----------------------------------------------------------------------===//

void writeManifests(const std::string &outDir,
                    const std::vector<ExpertPlan> &plans, int64_t experts,
                    int64_t halves, const std::vector<int> &widths) {
  using json = nlohmann::ordered_json;
  auto write = [&](const std::string &name, const json &j) {
    fs::path p = fs::path(outDir) / x8::manifestFile(name);
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << j.dump(1) << "\n";
  };
  size_t n = widths.size();
  for (int k : widths) {
    json layers = json::object();
    for (auto &pl : plans) {
      json l;
      l["gate"] = std::vector<int>(experts, k);
      l["up"] = std::vector<int>(experts, k);
      l["down"] = std::vector<int>(experts, k);
      if (pl.hasShared)
        l["shared"] = {{"gate", k}, {"up", k}, {"down", k}};
      layers[std::to_string(pl.layer)] = l;
    }
    write("k" + std::to_string(k), json{{"layers", layers}});
  }
  // "mixed": a deterministic spread of widths per half and per expert down.
  json layers = json::object();
  for (auto &pl : plans) {
    int64_t L = pl.layer;
    json gate = json::array(), up = json::array(), down = json::array();
    for (int64_t e = 0; e < experts; ++e) {
      std::vector<int> g(halves), u(halves);
      for (int64_t h = 0; h < halves; ++h) {
        g[h] = widths[(e * 5 + h * 3 + L) % n];
        u[h] = widths[(e * 7 + h + 2 * L + 1) % n];
      }
      gate.push_back(g);
      up.push_back(u);
      down.push_back(widths[(e * 3 + L + 2) % n]);
    }
    json l{{"gate", gate}, {"up", up}, {"down", down}};
    if (pl.hasShared) {
      std::vector<int> g(halves), u(halves);
      for (int64_t h = 0; h < halves; ++h) {
        g[h] = widths[(h + L) % n];
        u[h] = widths[(h + L + 1) % n];
      }
      l["shared"] = {{"gate", g}, {"up", u}, {"down", widths[L % n]}};
    }
    layers[std::to_string(L)] = l;
  }
  write("mixed", json{{"layers", layers}});

  // The release's budget manifests: bit201 / bit349 = 2.01 / 3.49 bits per
  // expert weight, K floor everywhere and K floor+1 spread evenly over
  // halves (gate/up) and experts (down) until the average reaches the
  // target. Written where the pack stores both widths.
  for (auto [name, target] : {std::pair<const char *, double>{"bit201", 2.01},
                              {"bit349", 3.49}}) {
    const int lo = (int)target, hi = lo + 1;
    if (!std::count(widths.begin(), widths.end(), lo) ||
        !std::count(widths.begin(), widths.end(), hi))
      continue;
    const double frac = target - lo;
    double seen = 0, raised = 0;
    // Each decision covers `w` halves; raise it while raised halves stay
    // at or below their share of what has been seen.
    auto pick = [&](double w) {
      seen += w;
      if (raised + w <= frac * seen + w / 2) {
        raised += w;
        return hi;
      }
      return lo;
    };
    json ls = json::object();
    for (auto &pl : plans) {
      json gate = json::array(), up = json::array(), down = json::array();
      auto row = [&](json &g, json &u, json &d) {
        std::vector<int> gv(halves), uv(halves);
        for (int64_t h = 0; h < halves; ++h) {
          gv[h] = pick(1);
          uv[h] = pick(1);
        }
        g = gv, u = uv, d = pick((double)halves);
      };
      for (int64_t e = 0; e < experts; ++e) {
        json g, u, d;
        row(g, u, d);
        gate.push_back(g), up.push_back(u), down.push_back(d);
      }
      json l{{"gate", gate}, {"up", up}, {"down", down}};
      if (pl.hasShared) {
        json g, u, d;
        row(g, u, d);
        l["shared"] = {{"gate", g}, {"up", u}, {"down", d}};
      }
      ls[std::to_string(pl.layer)] = l;
    }
    write(name, json{{"layers", ls}});
  }
}

//===----------------------------------------------------------------------===//
// Index slices
//===----------------------------------------------------------------------===//

/// index-slices/tp<N>/k<K>/rank<r>.safetensors: for every expert layer, the
/// halves §7 places on rank r (gate, up and down half h of a row go
/// together) with their (offset, length) and checksum per projection, their
/// 128-entry intermediate-side slices, every row's hidden-side block scales
/// and the layer's signs: what the rank needs to read, check and decode its
/// halves without the whole index. Tensors are `layers.L.<field>`.
void writeIndexSlices(const std::string &outDir,
                      const std::vector<LayerTables> &tables, bool indexOnly) {
  if (tables.empty())
    return;
  std::set<int> ks;
  for (auto &t : tables)
    for (auto &kv : t.widths)
      ks.insert(kv.first);
  for (int tp : x8::kSliceTps)
    for (int k : ks)
      for (int r = 0; r < tp; ++r) {
        x8::LaidOutFile f(kAlign);
        f.setMetadata("format", "exlr8 v2 index slice");
        f.setMetadata("tp", std::to_string(tp));
        f.setMetadata("rank", std::to_string(r));
        f.setMetadata("width", std::to_string(k));
        struct Pending {
          size_t id;
          std::vector<uint8_t> bytes;
        };
        std::vector<Pending> pending;
        for (const LayerTables &t : tables) {
          auto wt = t.widths.find(k);
          if (wt == t.widths.end())
            continue;
          const WidthTables &w = wt->second;
          const int64_t H = t.halves, hb = t.hidden / kB, I = H * kB;
          std::vector<int32_t> owned;
          std::vector<uint64_t> index, checksum;
          std::vector<uint16_t> chan, block;
          for (int64_t row = 0; row < t.rows; ++row)
            for (int64_t h = 0; h < H; ++h) {
              if (x8::ownerRank(H, row, h, t.layer, tp) != r)
                continue;
              owned.push_back((int32_t)row);
              owned.push_back((int32_t)h);
              for (int p = 0; p < 3; ++p) {
                size_t at = (size_t)((row * 3 + p) * H + h);
                index.push_back(w.index[at * 2]);
                index.push_back(w.index[at * 2 + 1]);
                if (!indexOnly) {
                  checksum.push_back(w.checksum[at]);
                  chan.insert(chan.end(),
                              w.chan[p].begin() + row * I + h * kB,
                              w.chan[p].begin() + row * I + h * kB + kB);
                }
              }
            }
          if (!indexOnly)
            for (int64_t row = 0; row < t.rows; ++row)
              for (int p = 0; p < 3; ++p)
                block.insert(block.end(), w.block[p].begin() + row * hb,
                             w.block[p].begin() + row * hb + hb);
          const int64_t n = (int64_t)owned.size() / 2;
          const std::string L = "layers." + std::to_string(t.layer) + ".";
          pending.push_back({f.add(L + "owned", DType::I32, {n, 2}),
                             bytesOf(owned)});
          pending.push_back({f.add(L + "index", DType::I64, {n, 3, 2}),
                             bytesOf(index)});
          size_t cs = f.add(L + "checksum", DType::U64, {n, 3});
          size_t ch = f.add(L + "chan", DType::F16, {n, 3, kB});
          size_t bl = f.add(L + "block", DType::F16, {t.rows, 3, hb});
          if (!indexOnly) {
            pending.push_back({cs, bytesOf(checksum)});
            pending.push_back({ch, bytesOf(chan)});
            pending.push_back({bl, bytesOf(block)});
          }
          pending.push_back({f.add(L + "signs.in", DType::F16, {t.hidden}),
                             bytesOf(t.signsIn)});
          pending.push_back({f.add(L + "signs.out", DType::F16, {t.hidden}),
                             bytesOf(t.signsOut)});
        }
        f.create((fs::path(outDir) / x8::sliceFile(tp, k, r)).string());
        for (auto &p : pending)
          f.write(p.id, p.bytes.data(), p.bytes.size());
        f.close();
      }
}

} // namespace

void quantizeToExlr8(const glm::rt::ModelConfig &cfg,
                     const glm::rt::Pack *source, const std::string &outDir,
                     const QuantizeOptions &opt) {
  check(source || opt.indexOnly,
        "quantize exlr8: a source checkpoint is needed unless --index-only");
  std::vector<int> widths = opt.widths.empty() ? std::vector<int>{2, 3, 4}
                                               : opt.widths;
  std::sort(widths.begin(), widths.end());
  widths.erase(std::unique(widths.begin(), widths.end()), widths.end());
  for (int k : widths)
    check(k >= 1 && k <= 8, "quantize exlr8: width ", k, " is outside 1..8");

  // What to write: the source's tensors, or (index-only) config's list.
  std::vector<Tensor> tensors;
  if (source) {
    for (const auto &w : source->weights()) {
      Tensor t;
      t.name = w.name;
      t.shape = w.shape;
      t.srcFormat = w.format;
      t.parsed = glm::rt::parseHfTensorName(w.name);
      tensors.push_back(t);
    }
  } else {
    // The causal LM and the MTP layers config.json names (a release ships
    // them), so full-size plans account the MTP layer's memory.
    std::vector<glm::rt::HfTensorSpec> specs = glm::rt::expectedHfTensors(cfg);
    for (auto &s : glm::rt::expectedMtpTensors(cfg))
      specs.push_back(std::move(s));
    for (const auto &s : specs) {
      Tensor t;
      t.name = s.name;
      t.shape = s.shape;
      t.srcFormat = endsWith(s.name, "e_score_correction_bias")
                        ? glm::rt::WeightFormat::F32
                        : glm::rt::WeightFormat::BF16;
      t.parsed = glm::rt::parseHfTensorName(s.name);
      tensors.push_back(t);
    }
  }
  std::map<int64_t, ExpertPlan> experts;
  std::map<int64_t, std::vector<Tensor>> dense; // -1: vocab file
  for (const Tensor &t : tensors) {
    const auto &p = t.parsed;
    if (p.layer >= 0 && (p.expert >= 0 || p.shared) && p.projection >= 0) {
      ExpertPlan &pl = experts[p.layer];
      pl.layer = p.layer;
      if (p.shared)
        pl.hasShared = true;
      else
        pl.experts.insert(p.expert);
    } else if (t.name.rfind("model.visual.", 0) == 0) {
      dense[kVisionGroup].push_back(t);
    } else {
      dense[p.layer >= 0 ? p.layer : -1].push_back(t);
    }
  }
  int64_t halves = cfg.moeIntermediateSize / kB;
  uint64_t total = 0;
  for (auto &kv : experts)
    total += widths.size() *
             (cfg.numRoutedExperts + (kv.second.hasShared ? 1 : 0)) * 3 *
             halves;
  for (auto &kv : dense)
    total += kv.second.size();

  fs::create_directories(outDir);
  glm::rt::Progress bar(opt.indexOnly ? "exlr8 index" : "exlr8 quantize",
                        total, "objects");
  std::vector<ExpertPlan> plans;
  std::vector<LayerTables> tables;
  for (auto &kv : experts) {
    ExpertLayerWriter w(cfg, source, outDir, opt, widths, kv.second, bar);
    w.run();
    tables.push_back(w.tables());
    plans.push_back(kv.second);
  }
  for (auto &kv : dense) {
    // Name order, so the layout does not depend on the source's order (an
    // index-only pack then has the same offsets as the full one).
    std::sort(kv.second.begin(), kv.second.end(),
              [](const Tensor &a, const Tensor &b) { return a.name < b.name; });
    std::string rel = kv.first >= 0               ? x8::denseFile(kv.first)
                      : kv.first == kVisionGroup ? x8::visionFile()
                                                 : x8::vocabFile();
    writeDenseFile((fs::path(outDir) / rel).string(), kv.first,
                   cfg.tensorPrefix(), kv.second, source, opt, bar);
  }
  bar.finish();
  writeManifests(outDir, plans, cfg.numRoutedExperts, halves, widths);
  writeIndexSlices(outDir, tables, opt.indexOnly);

  if (source) {
    copyModelSideFiles(source->dir(), outDir);
  } else {
    // Index-only from a config alone: keep the config the index came from.
    std::ofstream(fs::path(outDir) / "config.json", std::ios::binary)
        << cfg.rawJson;
  }
}

} // namespace glmc
