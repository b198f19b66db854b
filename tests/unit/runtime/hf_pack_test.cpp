//===- hf_pack_test.cpp - Hugging Face packs: open, verify, dequantize ----===//
//
// The synthesized tiny model opens as an hf pack, verifies clean and
// dequantizes BF16 exactly; an FP8 block checkpoint dequantizes to q * scale
// (ragged edges included); removed, misshaped and extra tensors are named by
// verify; layout detection sends each directory to the right reader.
//
//===----------------------------------------------------------------------===//
#include "compiler/packtools/packtools.h"
#include "runtime/base/error.h"
#include "runtime/base/numeric.h"
#include "runtime/formats/pack.h"
#include "runtime/formats/safetensors.h"
#include "runtime/model/hf_names.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

namespace fs = std::filesystem;
using namespace glm::rt;

namespace {

std::string tmpDir(const std::string &name) {
  fs::path p = fs::temp_directory_path() /
               ("glm_hf_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

/// One synthesized tiny model per test binary run (seed 11).
const std::string &tinyDir() {
  static const std::string dir = [] {
    std::string d = tmpDir("tiny");
    glmc::writeRandomHfModel("tiny", 11, d, false);
    return d;
  }();
  return dir;
}

/// Copy of the tiny model whose shard holding `victim` is rewritten by
/// `edit` (which may drop or replace tensors) and whose index follows.
std::string damagedCopy(
    const std::string &name, const std::string &victim,
    const std::function<void(SafetensorsWriter &, const TensorView &)> &edit,
    const std::string &src = tinyDir()) {
  std::string dir = tmpDir(name);
  fs::copy(src, dir,
           fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  auto ckpt = SafetensorsCheckpoint::open(dir);
  std::string file = ckpt.fileOf(victim);
  SafetensorsWriter w;
  std::vector<std::string> names;
  {
    auto f = SafetensorsFile::open(dir + "/" + file);
    for (const auto &t : f->tensors()) {
      if (t.name == victim)
        edit(w, t);
      else
        w.add(t.name, t.dtype, t.shape, t.data, t.byteSize);
    }
  }
  w.write(dir + "/" + file);
  // Rebuild the weight map from what the shards now hold.
  nlohmann::json idx;
  idx["metadata"] = {{"total_size", 0}};
  for (const char *f : {"model-00001-of-00002.safetensors",
                        "model-00002-of-00002.safetensors"}) {
    auto shard = SafetensorsFile::open(dir + "/" + f);
    for (const auto &t : shard->tensors())
      idx["weight_map"][t.name] = f;
  }
  std::ofstream(dir + "/model.safetensors.index.json") << idx.dump();
  return dir;
}

bool hasIssue(const VerifyReport &r, const std::string &object,
              const std::string &needle) {
  for (const auto &i : r.issues)
    if (i.object == object && i.message.find(needle) != std::string::npos)
      return true;
  return false;
}

} // namespace

TEST(HfPack, TinyOpensVerifiesAndDequantizesExactly) {
  auto pack = Pack::open(tinyDir());
  EXPECT_EQ(pack->layout(), PackLayout::HuggingFace);
  EXPECT_EQ(Pack::detect(tinyDir()), PackLayout::HuggingFace);
  ASSERT_TRUE(pack->config().has_value());
  EXPECT_EQ(pack->config()->numLayers, 2);
  std::vector<HfTensorSpec> specs = expectedHfTensors(*pack->config());
  // ... and the MTP layer (layer 2), noted by verify.
  EXPECT_EQ(pack->weights().size(),
            specs.size() + expectedMtpTensors(*pack->config()).size());
  EXPECT_EQ(pack->configHash().size(), 16u);
  EXPECT_EQ(pack->indexHash().size(), 16u);

  VerifyReport r = pack->verify();
  for (const auto &i : r.issues)
    ADD_FAILURE() << i.file << " " << i.object << ": " << i.message;
  EXPECT_TRUE(r.ok());
  uint64_t total = 0;
  for (const auto &w : pack->weights())
    total += w.bytes();
  EXPECT_EQ(r.checkedBytes, total);
  EXPECT_GT(total, 1u << 20);

  // Stable order: layer, then name; non-layer weights first.
  const auto &ws = pack->weights();
  for (size_t i = 1; i < ws.size(); ++i)
    EXPECT_TRUE(
        ws[i - 1].layer < ws[i].layer ||
        (ws[i - 1].layer == ws[i].layer && ws[i - 1].name < ws[i].name));

  // An expert weight: parsed fields, one range, absolute offset into the
  // named file, and BF16 values dequantized exactly.
  const std::string name = "model.layers.1.mlp.experts.3.down_proj.weight";
  const WeightInfo &w = pack->get(name);
  EXPECT_EQ(w.format, WeightFormat::BF16);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(w.layer, 1);
  EXPECT_EQ(w.expert, 3);
  EXPECT_EQ(w.projection, 2);
  EXPECT_FALSE(w.shared);
  EXPECT_DOUBLE_EQ(w.bitsPerWeight(), 16.0);
  ASSERT_EQ(w.ranges.size(), 1u);
  EXPECT_EQ(w.bytes(), 128u * 256 * 2);
  auto file = SafetensorsFile::open(tinyDir() + "/" + w.ranges[0].file);
  const uint8_t *raw = file->bytes(w.ranges[0].offset, w.ranges[0].length);
  std::vector<float> deq = pack->dequantize(name);
  ASSERT_EQ(deq.size(), 128u * 256);
  for (size_t i = 0; i < deq.size(); ++i) {
    uint16_t b;
    std::memcpy(&b, raw + 2 * i, 2);
    ASSERT_EQ(floatToBits(deq[i]), floatToBits(bf16ToFloat(b))) << i;
  }
  const WeightInfo &sh =
      pack->get("model.layers.1.mlp.shared_experts.gate_proj.weight");
  EXPECT_TRUE(sh.shared);
  EXPECT_EQ(sh.projection, 0);
  EXPECT_EQ(sh.expert, -1);
  const WeightInfo &bias =
      pack->get("model.layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(bias.format, WeightFormat::F32);
  EXPECT_EQ(pack->find("model.layers.1.mlp.experts.4.up_proj.weight"), nullptr);
  EXPECT_THROW(pack->get("model.layers.1.mlp.experts.4.up_proj.weight"), Error);
  EXPECT_THROW(pack->dequantize("nope"), Error);
}

TEST(HfPack, Fp8BlockDequantizesToQTimesScale) {
  std::string dir = tmpDir("fp8");
  const int64_t out = 300, in = 200; // ragged: 3 x 2 blocks
  std::vector<uint8_t> q((size_t)(out * in));
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = (uint8_t)((i * 37 + 11) & 0xFF);
    if ((q[i] & 0x7F) == 0x7F)
      q[i] ^= 1; // no NaN codes
  }
  std::vector<float> scale = {0.5f, 2.0f, 0.125f, 3.0f, 1e-3f, 7.25f};
  SafetensorsWriter w;
  w.add("model.layers.0.mlp.down_proj.weight", DType::F8_E4M3, {out, in},
        q.data(), q.size());
  w.addF32("model.layers.0.mlp.down_proj.weight_scale_inv", {3, 2}, scale);
  w.addBF16("model.norm.weight", {4}, {1, 1, 1, 1});
  w.write(dir + "/model.safetensors");

  auto pack = Pack::open(dir); // bare directory: no config
  EXPECT_FALSE(pack->config().has_value());
  EXPECT_EQ(pack->configHash(), "");
  ASSERT_EQ(pack->weights().size(), 2u); // the scale is not a weight
  const WeightInfo &wi = pack->get("model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(wi.format, WeightFormat::Fp8Block);
  ASSERT_EQ(wi.ranges.size(), 2u);
  EXPECT_EQ(wi.ranges[1].role, "scale");
  EXPECT_EQ(wi.bytes(), (uint64_t)(out * in + 6 * 4));
  EXPECT_GT(wi.bitsPerWeight(), 8.0);
  EXPECT_LT(wi.bitsPerWeight(), 8.1);
  EXPECT_EQ(wi.layer, 0);
  EXPECT_EQ(wi.projection, 2);
  std::vector<float> deq = pack->dequantize(wi.name);
  ASSERT_EQ(deq.size(), q.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      float want = e4m3ToFloat(q[o * in + i]) * scale[(o / 128) * 2 + i / 128];
      ASSERT_EQ(floatToBits(deq[o * in + i]), floatToBits(want))
          << o << "," << i;
    }
  EXPECT_TRUE(pack->verify().ok());

  // Block scales of the wrong shape: verify names the scale tensor and
  // dequantize refuses.
  std::string bad = tmpDir("fp8bad");
  SafetensorsWriter b;
  b.add("w.weight", DType::F8_E4M3, {out, in}, q.data(), q.size());
  b.addF32("w.weight_scale_inv", {2, 2}, {1, 1, 1, 1});
  b.write(bad + "/model.safetensors");
  auto bp = Pack::open(bad);
  EXPECT_THROW(bp->dequantize("w.weight"), Error);
  VerifyReport r = bp->verify();
  EXPECT_TRUE(hasIssue(r, "w.weight_scale_inv", "do not fit"));
}

TEST(HfPack, VerifyNamesRemovedMisshapedAndExtraTensors) {
  const std::string gone = "model.layers.1.self_attn.kv_b_proj.weight";
  std::string d1 = damagedCopy("removed", gone,
                               [](SafetensorsWriter &, const TensorView &) {});
  VerifyReport r1 = Pack::open(d1)->verify();
  EXPECT_FALSE(r1.ok());
  EXPECT_TRUE(hasIssue(r1, gone, "missing")) << r1.issues.size();

  const std::string shaped = "model.layers.0.self_attn.o_proj.weight";
  std::string d2 = damagedCopy("misshaped", shaped,
                               [](SafetensorsWriter &w, const TensorView &t) {
                                 std::vector<float> v(64 * 128, 0.01f);
                                 w.addBF16(t.name, {64, 128}, v);
                               });
  VerifyReport r2 = Pack::open(d2)->verify();
  EXPECT_TRUE(hasIssue(r2, shaped, "shape [64, 128]"));
  for (const auto &i : r2.issues)
    if (i.object == shaped)
      EXPECT_FALSE(i.file.empty());

  // An indexer on a shared layer is not part of the model.
  const std::string extra = "model.layers.1.self_attn.indexer.wk.weight";
  std::string d3 = damagedCopy(
      "extra", "model.layers.1.self_attn.o_proj.weight",
      [&](SafetensorsWriter &w, const TensorView &t) {
        w.add(t.name, t.dtype, t.shape, t.data, t.byteSize);
        w.addBF16(extra, {64, 128}, std::vector<float>(64 * 128, 0.5f));
      });
  VerifyReport r3 = Pack::open(d3)->verify();
  EXPECT_TRUE(hasIssue(r3, extra, "unexpected"));

  // A NaN in a weight is reported with its tensor.
  const std::string nanT = "model.layers.0.mlp.up_proj.weight";
  std::string d4 =
      damagedCopy("nan", nanT, [](SafetensorsWriter &w, const TensorView &t) {
        std::vector<float> v = t.toFloat();
        v[5] = std::nanf("");
        w.addBF16(t.name, t.shape, v);
      });
  VerifyReport r4 = Pack::open(d4)->verify();
  EXPECT_TRUE(hasIssue(r4, nanT, "non-finite"));
}

TEST(HfPack, IndexOnlyPackListsWeightsFromConfig) {
  std::string dir = tmpDir("indexonly");
  glmc::writeRandomHfModel("tiny", 3, dir, true);
  EXPECT_THROW(Pack::open(dir), Error);
  PackOpenOptions opt;
  opt.indexOnly = true;
  auto pack = Pack::open(dir, opt);
  ASSERT_TRUE(pack->config().has_value());
  EXPECT_EQ(pack->weights().size(), expectedHfTensors(*pack->config()).size());
  EXPECT_EQ(pack->get("model.embed_tokens.weight").shape,
            (std::vector<int64_t>{512, 128}));
  EXPECT_THROW(pack->dequantize("model.embed_tokens.weight"), Error);
  EXPECT_TRUE(pack->verify().ok());
}

TEST(PackDetect, EachLayoutByItsMarks) {
  std::string empty = tmpDir("empty");
  try {
    Pack::detect(empty);
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("expected config.json"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Pack::open(empty + "/missing"), Error);

  std::string x8 = tmpDir("exlr8");
  fs::create_directories(x8 + "/experts");
  std::ofstream(x8 + "/experts/exlr8-layer-003.index.safetensors") << "x";
  EXPECT_EQ(Pack::detect(x8), PackLayout::Exlr8);

  std::string e3 = tmpDir("exl3cfg");
  std::ofstream(e3 + "/config.json")
      << R"({"model_type":"glm_moe_dsa","quantization_config":{"quant_method":"exl3"}})";
  EXPECT_EQ(Pack::detect(e3), PackLayout::Exl3);

  std::string e3q = tmpDir("exl3qc");
  std::ofstream(e3q + "/quantization_config.json") << "{}";
  EXPECT_EQ(Pack::detect(e3q), PackLayout::Exl3);

  std::string e3t = tmpDir("exl3trellis");
  SafetensorsWriter w;
  std::vector<int16_t> tiles(16 * 4, 0);
  w.add("model.layers.0.mlp.down_proj.trellis", DType::I16, {1, 1, 64},
        tiles.data(), tiles.size() * 2);
  w.write(e3t + "/model.safetensors");
  EXPECT_EQ(Pack::detect(e3t), PackLayout::Exl3);

  std::string fp8 = tmpDir("hffp8cfg");
  std::ofstream(fp8 + "/config.json")
      << R"({"quantization_config":{"quant_method":"fp8"}})";
  EXPECT_EQ(Pack::detect(fp8), PackLayout::HuggingFace);

  EXPECT_STREQ(packLayoutName(PackLayout::Exlr8), "exlr8");
  EXPECT_STREQ(weightFormatName(WeightFormat::Fp8Block), "fp8-block");
}

/// One synthesized flash-tiny model (GLM-5.3-Flash: KDA, DSA, mHC, an MTP
/// layer and a vision tower) per test binary run.
const std::string &flashDir() {
  static const std::string dir = [] {
    std::string d = tmpDir("flash");
    glmc::writeRandomHfModel("flash-tiny", 5, d, false);
    return d;
  }();
  return dir;
}

bool hasNote(const VerifyReport &r, const std::string &needle) {
  for (const auto &n : r.notes)
    if (n.find(needle) != std::string::npos)
      return true;
  return false;
}

TEST(HfPackFlash, VerifiesAndNotesVisionAndMtp) {
  auto pack = Pack::open(flashDir());
  ASSERT_TRUE(pack->config()->isFlash());
  VerifyReport r = pack->verify();
  for (const auto &i : r.issues)
    ADD_FAILURE() << i.file << ": " << i.object << ": " << i.message;
  EXPECT_TRUE(hasNote(r, "vision tensors (model.visual.*) recognised and "
                         "skipped"));
  EXPECT_TRUE(hasNote(r, "MTP tensors (layer 2) recognised and skipped"));
  // The vision tower and the MTP layer are listed and readable all the same.
  EXPECT_NE(pack->find("model.visual.blocks.0.attn.qkv.weight"), nullptr);
  EXPECT_EQ(pack->dequantize("model.language_model.layers.0.self_attn.A_log")
                .size(),
            2u);
}

TEST(HfPackFlash, VerifyNamesMissingKdaAndDamagedVectors) {
  const std::string conv = "model.language_model.layers.0.self_attn.k_conv1d.weight";
  std::string d1 = damagedCopy(
      "flash-noconv", conv, [](SafetensorsWriter &, const TensorView &) {},
      flashDir());
  EXPECT_TRUE(hasIssue(Pack::open(d1)->verify(), conv, "missing"));

  // A_log beyond +-20: exp(A_log) is no usable gate rate. The ±1024 norm
  // bound would have let it through.
  const std::string alog = "model.language_model.layers.0.self_attn.A_log";
  std::string d2 = damagedCopy(
      "flash-alog", alog,
      [](SafetensorsWriter &w, const TensorView &t) {
        std::vector<float> v = t.toFloat();
        v[1] = 100.0f;
        w.addF32(t.name, t.shape, v);
      },
      flashDir());
  VerifyReport r2 = Pack::open(d2)->verify();
  EXPECT_TRUE(hasIssue(r2, alog, "A_log"));
  EXPECT_THROW(Pack::open(d2)->dequantize(alog), Error);

  // mHC base is a bias: +-1024.
  const std::string base = "model.language_model.layers.1.hc_ffn_base";
  std::string d3 = damagedCopy(
      "flash-base", base,
      [](SafetensorsWriter &w, const TensorView &t) {
        std::vector<float> v = t.toFloat();
        v[0] = 5000.0f;
        w.addBF16(t.name, t.shape, v);
      },
      flashDir());
  EXPECT_TRUE(hasIssue(Pack::open(d3)->verify(), base, "within +-1024"));

  // A tensor that is neither the model's, MTP's nor the vision tower's.
  const std::string odd = "model.language_model.layers.0.self_attn.z_proj.weight";
  std::string d4 = damagedCopy(
      "flash-extra", "model.language_model.layers.0.self_attn.q_proj.weight",
      [&](SafetensorsWriter &w, const TensorView &t) {
        w.add(t.name, t.dtype, t.shape, t.data, t.byteSize);
        w.addBF16(odd, {4, 4}, std::vector<float>(16, 0.5f));
      },
      flashDir());
  EXPECT_TRUE(hasIssue(Pack::open(d4)->verify(), odd,
                       "not part of Glm5NextForConditionalGeneration"));
}
