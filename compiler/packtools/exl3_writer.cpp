//===- exl3_writer.cpp - quantize a Hugging Face model into an EXL3 pack --===//
//
// Writes exllamav3's layout with glmc's Hessian-free trellis encoder: per
// quantizable linear `<key>.trellis` (I16 [k/16, n/16, 16K]), `<key>.suh` /
// `<key>.svh` (F16, padded k / n) and the codebook marker (`.mcg`/`.mul1`,
// I32 scalar); everything else copied unquantized. Up to two shards with
// model.safetensors.index.json, config.json with quantization_config and a
// quantization_config.json with tensor_storage. Facts: exl3-format.md §2–§5.
//
//===----------------------------------------------------------------------===//
#include "compiler/packtools/packtools.h"

#include "runtime/base/error.h"
#include "runtime/base/hash.h"
#include "runtime/base/numeric.h"
#include "runtime/base/progress.h"
#include "runtime/codec/trellis.h"
#include "runtime/formats/exl3_pack.h"
#include "runtime/formats/safetensors.h"
#include "runtime/model/hf_names.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>

namespace fs = std::filesystem;
using glm::rt::check;
using glm::rt::DType;
using glm::rt::fail;
using nlohmann::json;
namespace tr = glm::rt::trellis;

namespace glmc {
namespace {

/// One tensor of the output pack and how it is stored.
struct Item {
  std::string name; // HF name
  std::vector<int64_t> shape;
  bool quantized = false;
  std::string key;  // EXL3 key (name without .weight)
  tr::Width width;
  int64_t k = 0, n = 0; // padded in/out
  DType dtype = DType::BF16; // unquantized storage
  uint64_t bytes = 0;
};

int64_t roundUp128(int64_t v) { return (v + 127) / 128 * 128; }

const char *torchDtype(DType t) {
  switch (t) {
  case DType::I16:
    return "torch.int16";
  case DType::I32:
    return "torch.int32";
  case DType::F16:
    return "torch.float16";
  case DType::BF16:
    return "torch.bfloat16";
  case DType::F32:
    return "torch.float32";
  default:
    return "unknown";
  }
}

/// The deterministic mixed-K allocation used when no --bits is given:
/// routed experts cycle through K 2/3/4 by expert and projection (odd experts
/// take the half widths 2.5/3.5 with MUL1); everything else gets K 4.
tr::Width mixedWidth(const std::string &name, tr::Codebook cb) {
  glm::rt::HfTensorSpec pos = glm::rt::parseHfTensorName(name);
  int expert = pos.expert, proj = pos.projection;
  if (expert < 0 || proj < 0)
    return tr::Width::bits(4);
  int k = 2 + (expert + proj) % 3;
  if (cb == tr::Codebook::Mul1 && (expert & 1) && k < 4)
    return tr::Width{2 * k + 1};
  return tr::Width::bits(k);
}

void writeJson(const fs::path &p, const json &j) {
  std::ofstream out(p, std::ios::binary);
  check(out.good(), p.string(), ": cannot write");
  out << j.dump(2) << "\n";
  check(out.good(), p.string(), ": write failed (disk full?)");
}

/// Adds one item's tensors (quantized from `w` = HF [out, in], or converted)
/// to the writer, or only their headers when `w` is null.
void addItem(glm::rt::SafetensorsWriter &wr, const Item &it,
             const std::vector<float> *w, tr::Codebook cb,
             const QuantizeOptions &opt) {
  if (!it.quantized) {
    if (!w) {
      wr.addHeaderOnly(it.name, it.dtype, it.shape);
      return;
    }
    if (it.dtype == DType::F32) {
      wr.addF32(it.name, it.shape, *w);
    } else if (it.dtype == DType::BF16) {
      wr.addBF16(it.name, it.shape, *w);
    } else {
      std::vector<uint16_t> h(w->size());
      for (size_t i = 0; i < h.size(); ++i)
        h[i] = glm::rt::floatToHalf((*w)[i]);
      wr.add(it.name, DType::F16, it.shape, h.data(), h.size() * 2);
    }
    return;
  }
  std::vector<int64_t> tShape = {it.k / 16, it.n / 16,
                                 it.width.wordsPerTile()};
  int32_t marker = cb == tr::Codebook::Mcg ? glm::rt::kExl3McgMarker
                                           : glm::rt::kExl3Mul1Marker;
  if (!w) {
    wr.addHeaderOnly(it.key + ".trellis", DType::I16, tShape);
    wr.addHeaderOnly(it.key + ".suh", DType::F16, {it.k});
    wr.addHeaderOnly(it.key + ".svh", DType::F16, {it.n});
    if (cb != tr::Codebook::ThreeInst)
      wr.addHeaderOnly(it.key + (cb == tr::Codebook::Mcg ? ".mcg" : ".mul1"),
                       DType::I32, {});
    return;
  }
  // HF [out, in] -> in x out, zero-padded to multiples of 128.
  int64_t out = it.shape[0], in = it.shape[1];
  std::vector<float> m((size_t)(it.k * it.n), 0.0f);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      m[(size_t)(i * it.n + o)] = (*w)[(size_t)(o * in + i)];
  tr::EncodeOptions eo;
  eo.width = it.width;
  eo.codebook = cb;
  eo.e4m3 = false;
  eo.order = tr::TileOrder::RowMajor;
  eo.seed = opt.seed ^ glm::rt::xxh64(it.name.data(), it.name.size());
  eo.threads = opt.threads;
  tr::Quantized q = tr::quantizeMatrix(m.data(), it.k, it.n, eo);
  check(q.tileWords.size() ==
            (size_t)(tShape[0] * tShape[1] * tShape[2]) &&
            q.suh.size() == (size_t)it.k && q.svh.size() == (size_t)it.n,
        "quantize ", it.name, ": encoder returned inconsistent sizes");
  wr.add(it.key + ".trellis", DType::I16, tShape, q.tileWords.data(),
         q.tileWords.size() * 2);
  auto half = [](const std::vector<float> &v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      h[i] = glm::rt::floatToHalf(v[i]);
    return h;
  };
  std::vector<uint16_t> suh = half(q.suh), svh = half(q.svh);
  wr.add(it.key + ".suh", DType::F16, {it.k}, suh.data(), suh.size() * 2);
  wr.add(it.key + ".svh", DType::F16, {it.n}, svh.data(), svh.size() * 2);
  if (cb != tr::Codebook::ThreeInst)
    wr.add(it.key + (cb == tr::Codebook::Mcg ? ".mcg" : ".mul1"), DType::I32,
           {}, &marker, 4);
}

} // namespace

void quantizeToExl3(const glm::rt::ModelConfig &cfg,
                    const glm::rt::Pack *source, const std::string &outDir,
                    const QuantizeOptions &opt) {
  check(source || opt.indexOnly,
        "quantize exl3: a source checkpoint is needed unless --index-only");
  tr::Codebook cb = tr::parseCodebook(opt.codebook.c_str());
  bool fixed = opt.bits > 0;
  tr::Width fixedWidth;
  if (fixed) {
    fixedWidth = tr::Width::fromDouble(opt.bits);
    check(fixedWidth.twiceBits >= 2 && fixedWidth.twiceBits <= 16,
          "quantize exl3: --bits ", opt.bits, " is outside 1..8");
    check(!fixedWidth.isHalfInteger() ||
              (cb == tr::Codebook::Mul1 && fixedWidth.twiceBits <= 7),
          "quantize exl3: --bits ", opt.bits,
          " (half-integer) exists only as 1.5/2.5/3.5 with --codebook mul1");
  }

  std::vector<tr::Width> mosaic;
  for (double b : opt.layerBits) {
    tr::Width w = tr::Width::fromDouble(b);
    check(w.twiceBits >= 2 && w.twiceBits <= 16 &&
              (!w.isHalfInteger() ||
               (cb == tr::Codebook::Mul1 && w.twiceBits <= 7)),
          "quantize exl3: layer width ", b,
          " is not 1..8 (or 1.5/2.5/3.5 with --codebook mul1)");
    mosaic.push_back(w);
  }

  // Plan every tensor first: widths, storage, sizes, shards. The causal
  // LM's tensors, the MTP layers the source ships (quantized like any
  // layer, at the layer's width: exllamav3's mtp_bits), then whatever else
  // the source ships (the vision tower), copied as they are.
  // Index-only (no source): the MTP layers config.json names, as a
  // release ships them, so full-size plans account their memory.
  std::vector<glm::rt::HfTensorSpec> specs = glm::rt::expectedHfTensors(cfg);
  for (auto &s : glm::rt::expectedMtpTensors(cfg))
    if (!source || source->find(s.name))
      specs.push_back(std::move(s));
  if (source) {
    std::set<std::string> known;
    for (const auto &s : specs)
      known.insert(s.name);
    for (const auto &w : source->weights())
      if (!known.count(w.name)) {
        glm::rt::HfTensorSpec s = glm::rt::parseHfTensorName(w.name);
        s.name = w.name;
        s.shape = w.shape;
        s.quantizable = false;
        specs.push_back(std::move(s));
      }
  }
  std::vector<Item> items;
  uint64_t total = 0;
  // bits = the causal LM's average; mtp_bits the MTP layers'.
  double bitSum = 0, weightSum = 0, mtpBitSum = 0, mtpWeightSum = 0;
  for (const glm::rt::HfTensorSpec &s : specs) {
    Item it;
    it.name = s.name;
    it.shape = s.shape;
    // EXL3 keeps kv_b_proj plain (exl3-format.md §6) and, at head_bits 16,
    // the LM head.
    bool plain = s.name == "lm_head.weight" ||
                 s.name.find("kv_b_proj") != std::string::npos;
    it.quantized = s.quantizable && !plain && s.shape.size() == 2;
    const glm::rt::WeightInfo *src = source ? source->find(s.name) : nullptr;
    if (source) {
      check(src != nullptr, source->dir(), ": tensor ", s.name,
            " is missing from the source checkpoint (config.json implies ",
            "it); cannot quantize");
      check(src->shape == s.shape, source->dir(), ": tensor ", s.name,
            " has a shape other than config.json implies");
    }
    if (it.quantized) {
      it.key = s.name.substr(0, s.name.size() - 7); // drop ".weight"
      check(s.name.size() > 7 &&
                s.name.compare(s.name.size() - 7, 7, ".weight") == 0,
            "quantize exl3: quantizable tensor ", s.name,
            " does not end in .weight");
      it.width = !mosaic.empty() && s.layer >= 0
                     ? mosaic[(size_t)s.layer % mosaic.size()]
                 : fixed ? fixedWidth
                         : mixedWidth(s.name, cb);
      it.k = roundUp128(s.shape[1]);
      it.n = roundUp128(s.shape[0]);
      it.bytes = (uint64_t)(it.k * it.n / 256) * it.width.bytesPerTile() +
                 2 * (uint64_t)(it.k + it.n) + 4;
      const bool mtp = s.layer >= cfg.numLayers;
      (mtp ? mtpBitSum : bitSum) += it.width.value() * (double)(it.k * it.n);
      (mtp ? mtpWeightSum : weightSum) += (double)(it.k * it.n);
    } else {
      it.dtype = DType::BF16;
      if (src && src->format == glm::rt::WeightFormat::F32)
        it.dtype = DType::F32;
      else if (src && src->format == glm::rt::WeightFormat::F16)
        it.dtype = DType::F16;
      int64_t numel = 1;
      for (int64_t d : s.shape)
        numel *= d;
      it.bytes = (uint64_t)numel * glm::rt::dtypeSize(it.dtype);
    }
    total += it.bytes;
    items.push_back(std::move(it));
  }
  check(!items.empty(), "quantize exl3: config.json implies no tensors");

  // At most two shards, split at half the bytes.
  int shards = items.size() > 1 ? 2 : 1;
  std::vector<int> shardOf(items.size());
  uint64_t acc = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    shardOf[i] = shards == 2 && acc >= total / 2 && i > 0 ? 1 : 0;
    acc += items[i].bytes;
  }
  if (shards == 2 && shardOf.back() == 0)
    shardOf.back() = 1;
  auto fileName = [&](int s) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", s + 1,
                  shards);
    return std::string(buf);
  };

  fs::create_directories(outDir);
  json weightMap = json::object(), storage = json::object();
  glm::rt::Progress bar("quantize exl3", items.size(), "tensors");
  for (int s = 0; s < shards; ++s) {
    glm::rt::SafetensorsWriter wr;
    wr.setMetadata("format", "pt");
    for (size_t i = 0; i < items.size(); ++i) {
      if (shardOf[i] != s)
        continue;
      const Item &it = items[i];
      std::vector<float> w;
      if (!opt.indexOnly) {
        w = source->dequantize(it.name);
        int64_t numel = 1;
        for (int64_t d : it.shape)
          numel *= d;
        check((int64_t)w.size() == numel, source->dir(), ": tensor ", it.name,
              " dequantized to ", w.size(), " values, expected ", numel);
      }
      addItem(wr, it, opt.indexOnly ? nullptr : &w, cb, opt);
      bar.advance();
    }
    wr.write((fs::path(outDir) / fileName(s)).string(), opt.indexOnly);
  }
  bar.finish();

  // Index, tensor_storage (exllamav3's quantization_config.json layout).
  for (size_t i = 0; i < items.size(); ++i) {
    const Item &it = items[i];
    std::string file = fileName(shardOf[i]);
    auto stored = [&](const std::string &name, DType t,
                      const std::vector<int64_t> &shape, json &into) {
      weightMap[name] = file;
      int64_t numel = 1;
      for (int64_t d : shape)
        numel *= d;
      into[name] = {{"shape", shape},
                    {"n_bytes", numel * (int64_t)glm::rt::dtypeSize(t)},
                    {"dtype", torchDtype(t)}};
    };
    if (it.quantized) {
      json st = json::object();
      stored(it.key + ".trellis", DType::I16,
             {it.k / 16, it.n / 16, it.width.wordsPerTile()}, st);
      stored(it.key + ".suh", DType::F16, {it.k}, st);
      stored(it.key + ".svh", DType::F16, {it.n}, st);
      json m = {{"stored_tensors", st},
                {"quant_format", "exl3"},
                {"bits_per_weight", it.width.value()}};
      if (cb == tr::Codebook::Mcg) {
        stored(it.key + ".mcg", DType::I32, {}, m["stored_tensors"]);
        m["mcg_multiplier"] = (uint32_t)glm::rt::kExl3McgMarker;
      } else if (cb == tr::Codebook::Mul1) {
        stored(it.key + ".mul1", DType::I32, {}, m["stored_tensors"]);
        m["mul1_multiplier"] = (uint32_t)glm::rt::kExl3Mul1Marker;
      }
      storage[it.key] = m;
    } else {
      std::string module = it.name.substr(0, it.name.rfind('.'));
      json &m = storage[module];
      if (!m.contains("stored_tensors"))
        m["stored_tensors"] = json::object();
      stored(it.name, it.dtype, it.shape, m["stored_tensors"]);
    }
  }
  writeJson(fs::path(outDir) / "model.safetensors.index.json",
            {{"metadata", {{"total_size", total}}}, {"weight_map", weightMap}});

  json qc = {{"quant_method", "exl3"},
             {"version", "glmc"},
             {"bits", weightSum > 0 ? bitSum / weightSum : 0.0},
             {"head_bits", 16},
             {"codebook", tr::codebookName(cb)},
             {"out_scales", "never"}};
  if (mtpWeightSum > 0)
    qc["mtp_bits"] = mtpBitSum / mtpWeightSum;
  if (source)
    copyModelSideFiles(source->dir(), outDir);
  json config;
  try {
    config = json::parse(cfg.rawJson);
  } catch (const json::exception &e) {
    fail("quantize exl3: config.json is not valid JSON (", e.what(), ")");
  }
  config["quantization_config"] = qc;
  writeJson(fs::path(outDir) / "config.json", config);
  json qfile = qc;
  qfile["tensor_storage"] = storage;
  writeJson(fs::path(outDir) / "quantization_config.json", qfile);
}

} // namespace glmc
