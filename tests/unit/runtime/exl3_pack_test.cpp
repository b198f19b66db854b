//===- exl3_pack_test.cpp - EXL3 reader and writer against the spec -------===//
//
// Builds EXL3 packs byte by byte with SafetensorsWriter from known trellis
// words and side vectors, and checks the reader against an independent,
// element-by-element evaluation of shared/specs/exl3-format.md (§1.2 closed
// forms, §1.3 windows, §2.2 bit order, §2.3 permutation, §3 reconstruction in
// float64, §9 half widths). Then damaged packs, and a quantize/reopen round
// trip through the writer.
//
//===----------------------------------------------------------------------===//
#include "compiler/packtools/packtools.h"
#include "runtime/base/error.h"
#include "runtime/base/numeric.h"
#include "runtime/codec/trellis.h"
#include "runtime/formats/pack.h"
#include "runtime/formats/pack_impl.h"
#include "runtime/formats/safetensors.h"
#include "runtime/model/hf_names.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

namespace fs = std::filesystem;
using namespace glm::rt;
using nlohmann::json;

namespace {

//===----------------------------------------------------------------------===//
// The spec, evaluated directly (no codec code).
//===----------------------------------------------------------------------===//

/// §1.2: codebook value of a 16-bit state.
float specCodebook(int cb, uint32_t s) {
  if (cb == 2) {
    uint32_t y = s * 0x83DCD12Du;
    uint32_t b = (y & 0xFF) + ((y >> 8) & 0xFF) + ((y >> 16) & 0xFF) + (y >> 24);
    // (1774·b − 905216) / 2^18 is exact in float; one rounding to fp16.
    return roundToHalf((float)((1774.0 * b - 905216.0) / 262144.0));
  }
  uint32_t y = cb == 0 ? s * 89226354u + 64248484u : s * 0xCBAC1FEDu;
  y = (y & 0x8FFF8FFFu) ^ 0x3B603B60u;
  return roundToHalf(halfToFloat(y & 0xFFFF) + halfToFloat(y >> 16));
}

/// §1.3 / §9: exclusive end bit of position t; twiceK = 2K.
int64_t specEndBit(int twiceK, int t) {
  if (twiceK % 2 == 0)
    return (int64_t)(t + 1) * (twiceK / 2);
  int ka = twiceK / 2; // K = KA + 1/2
  return t % 2 == 0 ? (int64_t)(t / 2) * (2 * ka + 1) + ka
                    : (int64_t)((t + 1) / 2) * (2 * ka + 1);
}

/// §1.3 / §2.2: the 16-bit state of position t of a tile's int16 words.
uint32_t specState(const uint16_t *e, int twiceK, int t) {
  int64_t bits = 128 * twiceK; // 256·K
  int64_t end = specEndBit(twiceK, t);
  uint32_t s = 0;
  for (int64_t b = end - 16; b < end; ++b) {
    int64_t p = ((b % bits) + bits) % bits;
    int64_t w = p / 32;
    uint32_t word = (uint32_t)e[2 * w] | ((uint32_t)e[2 * w + 1] << 16);
    s = (s << 1) | ((word >> (31 - p % 32)) & 1);
  }
  return s;
}

/// §2.3 table.
void specPerm(int t, int &row, int &col) {
  static const int rowOff[8] = {0, 1, 8, 9, 0, 1, 8, 9};
  int lane = t / 8, e = t % 8;
  row = 2 * (lane % 4) + rowOff[e];
  col = lane / 4 + (e >= 4 ? 8 : 0);
}

/// §2.1/§2.4: Q (k x n, in x out) of a row-major tile blob.
std::vector<float> specDecode(const std::vector<uint16_t> &words, int64_t k,
                              int64_t n, int twiceK, int cb) {
  std::vector<float> q((size_t)(k * n));
  int64_t perTile = 8 * twiceK, tilesN = n / 16;
  for (int64_t i = 0; i < k / 16; ++i)
    for (int64_t j = 0; j < tilesN; ++j) {
      const uint16_t *e = words.data() + (i * tilesN + j) * perTile;
      for (int t = 0; t < 256; ++t) {
        int r, c;
        specPerm(t, r, c);
        q[(size_t)((16 * i + r) * n + 16 * j + c)] =
            specCodebook(cb, specState(e, twiceK, t));
      }
    }
  return q;
}

/// §3: W = diag(suh)·H_k·Q·H_n·diag(svh) in float64 (in x out).
std::vector<double> specReconstruct(const std::vector<float> &q, int64_t k,
                                    int64_t n, const std::vector<float> &suh,
                                    const std::vector<float> &svh) {
  auto h = [](int64_t a, int64_t b) {
    return (__builtin_popcountll((unsigned long long)(a & b)) & 1 ? -1.0 : 1.0) /
           std::sqrt(128.0);
  };
  std::vector<double> a((size_t)(k * n), 0.0), w((size_t)(k * n), 0.0);
  for (int64_t r = 0; r < k; ++r) // A = H_k · Q
    for (int64_t m = r / 128 * 128; m < r / 128 * 128 + 128; ++m) {
      double hv = h(r % 128, m % 128);
      for (int64_t c = 0; c < n; ++c)
        a[r * n + c] += hv * q[m * n + c];
    }
  for (int64_t r = 0; r < k; ++r) // W = A · H_n, then scales
    for (int64_t c = 0; c < n; ++c) {
      double s = 0;
      for (int64_t m = c / 128 * 128; m < c / 128 * 128 + 128; ++m)
        s += a[r * n + m] * h(m % 128, c % 128);
      w[r * n + c] = (double)suh[r] * s * (double)svh[c];
    }
  return w;
}

//===----------------------------------------------------------------------===//
// Pack building helpers.
//===----------------------------------------------------------------------===//

fs::path freshDir(const std::string &name) {
  fs::path d = fs::temp_directory_path() /
               ("glm_exl3_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// A random EXL3 linear: words, fp16-exact side vectors.
struct TestLinear {
  std::string key;
  int64_t k = 256, n = 128;
  int twiceK = 8;
  int cb = 1;
  bool legacySigns = false;
  std::vector<uint16_t> words;
  std::vector<float> suh, svh;
};

TestLinear makeLinear(const std::string &key, int64_t k, int64_t n, int twiceK,
                      int cb, uint64_t seed, bool legacy = false) {
  TestLinear L;
  L.key = key;
  L.k = k;
  L.n = n;
  L.twiceK = twiceK;
  L.cb = cb;
  L.legacySigns = legacy;
  std::mt19937_64 rng(seed);
  L.words.resize((size_t)(k / 16 * (n / 16) * 8 * twiceK));
  for (auto &w : L.words)
    w = (uint16_t)rng(); // any bit pattern decodes (§1.3)
  std::uniform_real_distribution<float> mag(0.25f, 2.0f);
  auto side = [&](int64_t len, float scale) {
    std::vector<float> v((size_t)len);
    for (auto &x : v) {
      float s = rng() & 1 ? -1.0f : 1.0f;
      x = legacy ? s : roundToHalf(s * mag(rng) * scale);
    }
    return v;
  };
  L.suh = side(k, 0.01f);
  L.svh = side(n, 1.0f);
  return L;
}

void addLinear(SafetensorsWriter &wr, const TestLinear &L, bool mcg = false,
               bool mul1 = false) {
  wr.add(L.key + ".trellis", DType::I16,
         {L.k / 16, L.n / 16, (int64_t)8 * L.twiceK}, L.words.data(),
         L.words.size() * 2);
  auto halfs = [](const std::vector<float> &v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      h[i] = floatToHalf(v[i]);
    return h;
  };
  auto signs = [](const std::vector<float> &v) {
    std::vector<uint16_t> s(v.size() / 16, 0);
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] < 0)
        s[i / 16] |= (uint16_t)(1u << (i % 16));
    return s;
  };
  if (L.legacySigns) {
    auto su = signs(L.suh), sv = signs(L.svh);
    wr.add(L.key + ".su", DType::I16, {(int64_t)su.size()}, su.data(),
           su.size() * 2);
    wr.add(L.key + ".sv", DType::I16, {(int64_t)sv.size()}, sv.data(),
           sv.size() * 2);
  } else {
    auto suh = halfs(L.suh), svh = halfs(L.svh);
    wr.add(L.key + ".suh", DType::F16, {(int64_t)suh.size()}, suh.data(),
           suh.size() * 2);
    wr.add(L.key + ".svh", DType::F16, {(int64_t)svh.size()}, svh.data(),
           svh.size() * 2);
  }
  int32_t mcgV = (int32_t)0xCBAC1FEDu, mul1V = (int32_t)0x83DCD12Du;
  if (L.cb == 1 || mcg)
    wr.add(L.key + ".mcg", DType::I32, {}, &mcgV, 4);
  if (L.cb == 2 || mul1)
    wr.add(L.key + ".mul1", DType::I32, {}, &mul1V, 4);
}

/// Checks the pack's weight `<key>.weight` against the spec evaluation.
void expectMatchesSpec(const Pack &pack, const TestLinear &L) {
  SCOPED_TRACE(L.key + " 2K=" + std::to_string(L.twiceK) +
               " cb=" + std::to_string(L.cb));
  const WeightInfo &w = pack.get(L.key + ".weight");
  ASSERT_EQ(w.format, WeightFormat::Trellis);
  ASSERT_EQ(w.shape, (std::vector<int64_t>{L.n, L.k}));
  ASSERT_EQ(w.parts.size(), 1u);
  const TrellisPart &p = w.parts[0];
  EXPECT_EQ(p.width.twiceBits, L.twiceK);
  EXPECT_EQ((int)p.codebook, L.cb);
  EXPECT_FALSE(p.e4m3);
  EXPECT_EQ(p.order, trellis::TileOrder::RowMajor);
  EXPECT_EQ(p.trellisBytes.length, L.words.size() * 2);
  EXPECT_EQ(p.sideBytes.size(), 2u);

  // The trellis bytes the part names are the words we wrote.
  auto f = SafetensorsFile::open((fs::path(pack.dir()) / p.trellisBytes.file)
                                     .string());
  const uint8_t *raw = f->bytes(p.trellisBytes.offset, p.trellisBytes.length);
  std::vector<uint16_t> words(L.words.size());
  std::memcpy(words.data(), raw, words.size() * 2);
  ASSERT_EQ(words, L.words);

  // Decoded Q bit for bit (codec at the part's width/codebook vs the spec).
  std::vector<float> spec = specDecode(L.words, L.k, L.n, L.twiceK, L.cb);
  std::vector<float> q((size_t)(L.k * L.n));
  trellis::decodeMatrix(words.data(), L.k, L.n, p.width, p.codebook, p.e4m3,
                        p.order, q.data());
  size_t bad = 0;
  for (size_t i = 0; i < q.size(); ++i)
    bad += floatToBits(q[i]) != floatToBits(spec[i]);
  EXPECT_EQ(bad, 0u) << "decoded values differ from the spec";

  // W within 1e-6 of the float64 evaluation, HF orientation [out, in].
  std::vector<double> ref = specReconstruct(spec, L.k, L.n, L.suh, L.svh);
  std::vector<float> got = pack.dequantize(L.key + ".weight");
  ASSERT_EQ(got.size(), (size_t)(L.k * L.n));
  double maxRef = 0, maxErr = 0;
  for (int64_t i = 0; i < L.k; ++i)
    for (int64_t o = 0; o < L.n; ++o) {
      double r = ref[i * L.n + o];
      maxRef = std::max(maxRef, std::fabs(r));
      maxErr = std::max(maxErr, std::fabs(got[o * L.k + i] - r));
    }
  EXPECT_GT(maxRef, 0);
  EXPECT_LE(maxErr, 1e-6 * maxRef);
}

std::string errorOf(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

bool hasIssueNaming(const VerifyReport &r, const std::string &what) {
  for (auto &i : r.issues)
    if (i.object.find(what) != std::string::npos ||
        i.message.find(what) != std::string::npos)
      return true;
  return false;
}

} // namespace

//===----------------------------------------------------------------------===//
// Tests.
//===----------------------------------------------------------------------===//

TEST(Exl3Spec, CodebookTestVectors) {
  // exl3-format.md §1.2 table: fp16 bits for s = 0, 1, 2, 0x1234, 0xFFFF.
  const uint32_t states[5] = {0, 1, 2, 0x1234, 0xFFFF};
  const uint16_t want[3][5] = {{0x3A25, 0xBB5B, 0x3B74, 0xC066, 0xB110},
                               {0x3F60, 0x304E, 0xBA13, 0x3E0F, 0x3ACD},
                               {0xC2E8, 0x3921, 0xB72D, 0xB89E, 0xB936}};
  for (int cb = 0; cb < 3; ++cb)
    for (int i = 0; i < 5; ++i)
      EXPECT_EQ(floatToHalf(specCodebook(cb, states[i])), want[cb][i])
          << "cb " << cb << " s " << states[i];
}

TEST(Exl3Pack, DequantMatchesSpecEveryWidthAndCodebook) {
  fs::path dir = freshDir("widths");
  std::vector<TestLinear> lins;
  int e = 0;
  for (int cb = 0; cb < 3; ++cb)
    for (int k = 1; k <= 8; ++k, ++e)
      lins.push_back(makeLinear("model.layers.0.mlp.experts." +
                                    std::to_string(e) + ".up_proj",
                                256, 128, 2 * k, cb, 100 + e));
  for (int twice : {3, 5, 7}) { // K 1.5 / 2.5 / 3.5, MUL1 only (§9)
    lins.push_back(makeLinear("model.layers.0.mlp.experts." +
                                  std::to_string(e) + ".down_proj",
                              128, 256, twice, 2, 100 + e));
    ++e;
  }
  // Two shards, no config.json: shards found as *.safetensors.
  SafetensorsWriter a, b;
  for (size_t i = 0; i < lins.size(); ++i)
    addLinear(i % 2 ? b : a, lins[i]);
  std::vector<float> norm(128, 1.5f);
  a.addF32("model.norm.weight", {128}, norm);
  a.write((dir / "part-a.safetensors").string());
  b.write((dir / "part-b.safetensors").string());

  auto pack = openExl3Pack(dir.string(), {});
  EXPECT_EQ(pack->layout(), PackLayout::Exl3);
  EXPECT_FALSE(pack->config().has_value());
  EXPECT_EQ(pack->weights().size(), lins.size() + 1);
  for (auto &L : lins)
    expectMatchesSpec(*pack, L);
  const WeightInfo &nw = pack->get("model.norm.weight");
  EXPECT_EQ(nw.format, WeightFormat::F32);
  EXPECT_EQ(pack->dequantize("model.norm.weight"), norm);
  const WeightInfo &w7 = pack->get("model.layers.0.mlp.experts.7.up_proj.weight");
  EXPECT_EQ(w7.layer, 0);
  EXPECT_EQ(w7.expert, 7);
  EXPECT_EQ(w7.projection, 1);
  VerifyReport rep = pack->verify({});
  EXPECT_TRUE(rep.ok()) << rep.issues[0].object << ": " << rep.issues[0].message;
  EXPECT_EQ(rep.checkedObjects, lins.size() + 1);
  // The hash is a function of the index: same files, same hash.
  EXPECT_EQ(pack->indexHash(), openExl3Pack(dir.string(), {})->indexHash());
  fs::remove_all(dir);
}

TEST(Exl3Pack, LegacyPackedSigns) {
  fs::path dir = freshDir("legacy");
  TestLinear L = makeLinear("model.layers.1.self_attn.o_proj", 128, 256, 6, 0,
                            7, /*legacy=*/true);
  SafetensorsWriter wr;
  addLinear(wr, L);
  wr.write((dir / "model.safetensors").string());
  auto pack = openExl3Pack(dir.string(), {});
  expectMatchesSpec(*pack, L);
  EXPECT_EQ(pack->get(L.key + ".weight").parts[0].sideBytes[0].role, "su");
  fs::remove_all(dir);
}

TEST(Exl3Pack, ShardedIndexAndQuantConfig) {
  fs::path dir = freshDir("index");
  TestLinear A = makeLinear("model.layers.0.self_attn.q_a_proj", 128, 128, 4,
                            1, 1);
  TestLinear B = makeLinear("model.layers.0.self_attn.q_b_proj", 128, 256, 5,
                            2, 2);
  SafetensorsWriter w1, w2;
  addLinear(w1, A);
  addLinear(w2, B);
  w1.write((dir / "model-00001-of-00002.safetensors").string());
  w2.write((dir / "model-00002-of-00002.safetensors").string());
  // A stray file the index does not name must not be read.
  SafetensorsWriter stray;
  stray.addF32("stray.weight", {2}, {1, 2});
  stray.write((dir / "stray.safetensors").string());
  json wm;
  for (const char *s : {".trellis", ".suh", ".svh", ".mcg"})
    wm[A.key + s] = "model-00001-of-00002.safetensors";
  for (const char *s : {".trellis", ".suh", ".svh", ".mul1"})
    wm[B.key + s] = "model-00002-of-00002.safetensors";
  std::ofstream(dir / "model.safetensors.index.json")
      << json{{"weight_map", wm}}.dump();
  auto storage = [&](double bitsB) {
    return json{{"quant_method", "exl3"},
                {"codebook", "mul1"},
                {"tensor_storage",
                 {{A.key, {{"quant_format", "exl3"}, {"bits_per_weight", 2},
                           {"mcg_multiplier", 1}}},
                  {B.key, {{"quant_format", "exl3"},
                           {"bits_per_weight", bitsB},
                           {"mul1_multiplier", 1},
                           {"stored_tensors",
                            {{B.key + ".suh",
                              {{"shape", {128}}, {"dtype", "torch.float16"}}}}}}}}}};
  };
  std::ofstream(dir / "quantization_config.json") << storage(2.5).dump();
  auto pack = openExl3Pack(dir.string(), {});
  EXPECT_EQ(pack->find("stray.weight"), nullptr);
  EXPECT_EQ(pack->get(B.key + ".weight").parts[0].trellisBytes.file,
            "model-00002-of-00002.safetensors");
  expectMatchesSpec(*pack, A);
  expectMatchesSpec(*pack, B);
  VerifyReport rep = pack->verify({});
  EXPECT_TRUE(rep.ok()) << rep.issues[0].object << ": " << rep.issues[0].message;
  std::string h1 = pack->indexHash();

  // tensor_storage contradicting the trellis K names the tensor.
  std::ofstream(dir / "quantization_config.json") << storage(3).dump();
  auto bad = openExl3Pack(dir.string(), {});
  rep = bad->verify({});
  EXPECT_TRUE(hasIssueNaming(rep, B.key + ".trellis"));
  EXPECT_FALSE(hasIssueNaming(rep, A.key));
  EXPECT_NE(bad->indexHash(), h1); // quantization_config is hashed
  fs::remove_all(dir);
}

TEST(Exl3Pack, RejectsDamagedPacks) {
  struct Case {
    std::string name, expect;
    std::function<void(SafetensorsWriter &)> build;
  };
  TestLinear L = makeLinear("model.layers.2.mlp.experts.3.gate_proj", 128, 128,
                            6, 0, 9);
  std::vector<Case> cases = {
      {"both markers", ".mcg and .mul1",
       [&](SafetensorsWriter &w) { addLinear(w, L, true, true); }},
      {"short suh", L.key + ".suh",
       [&](SafetensorsWriter &w) {
         TestLinear M = L;
         M.suh.resize(120);
         addLinear(w, M);
       }},
      {"last dim", L.key + ".trellis",
       [&](SafetensorsWriter &w) {
         std::vector<uint16_t> words(8 * 8 * 20);
         w.add(L.key + ".trellis", DType::I16, {8, 8, 20}, words.data(),
               words.size() * 2);
         std::vector<uint16_t> h(128, 0x3C00);
         w.add(L.key + ".suh", DType::F16, {128}, h.data(), 256);
         w.add(L.key + ".svh", DType::F16, {128}, h.data(), 256);
       }},
      {"half K without mul1", L.key + ".trellis",
       [&](SafetensorsWriter &w) {
         TestLinear M = makeLinear(L.key, 128, 128, 5, 1, 3);
         addLinear(w, M);
       }},
      {"no side vectors", L.key,
       [&](SafetensorsWriter &w) {
         w.add(L.key + ".trellis", DType::I16, {8, 8, 48}, L.words.data(),
               L.words.size() * 2);
       }},
      {"orphan svh", "model.layers.9.x.svh",
       [&](SafetensorsWriter &w) {
         addLinear(w, L);
         std::vector<uint16_t> h(128, 0x3C00);
         w.add("model.layers.9.x.svh", DType::F16, {128}, h.data(), 256);
       }},
  };
  for (auto &c : cases) {
    SCOPED_TRACE(c.name);
    fs::path dir = freshDir("bad");
    SafetensorsWriter w;
    c.build(w);
    w.write((dir / "model.safetensors").string());
    std::string err = errorOf([&] { openExl3Pack(dir.string(), {}); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << err;
    fs::remove_all(dir);
  }
}

TEST(Exl3Pack, TruncatedFileAndGarbledSideVector) {
  fs::path dir = freshDir("trunc");
  TestLinear L = makeLinear("model.layers.0.mlp.experts.0.down_proj", 128, 128,
                            4, 1, 5);
  SafetensorsWriter w;
  addLinear(w, L);
  fs::path file = dir / "model.safetensors";
  w.write(file.string());
  uint64_t suhOff = w.fileOffsetOf(L.key + ".suh");

  // Garbled: one suh element becomes NaN -> verify names the tensor.
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((std::streamoff)suhOff + 2 * 17);
    uint16_t nan = 0x7E00;
    f.write((const char *)&nan, 2);
  }
  auto pack = openExl3Pack(dir.string(), {});
  VerifyReport rep = pack->verify({});
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.issues[0].object, L.key + ".suh");
  EXPECT_EQ(rep.issues[0].offset, suhOff + 34);
  EXPECT_EQ(rep.issues[0].file, "model.safetensors");
  pack.reset();

  // Truncated: the error names the file.
  fs::resize_file(file, fs::file_size(file) - 100);
  std::string err = errorOf([&] { openExl3Pack(dir.string(), {}); });
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
  fs::remove_all(dir);
}

//===----------------------------------------------------------------------===//
// Writer round trip.
//===----------------------------------------------------------------------===//

namespace {

/// Writes a random Hugging Face checkpoint (BF16, norms near 1) of `cfg`.
void writeHfModel(const fs::path &dir, const char *configJson, uint64_t seed) {
  ModelConfig cfg = parseModelConfig(configJson, "tiny config");
  std::ofstream(dir / "config.json") << configJson;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  SafetensorsWriter wr;
  for (auto &s : expectedHfTensors(cfg)) {
    int64_t numel = 1;
    for (int64_t d : s.shape)
      numel *= d;
    std::vector<float> v((size_t)numel);
    for (auto &x : v)
      x = s.shape.size() == 1 ? 1.0f + nd(rng) : nd(rng);
    wr.addBF16(s.name, s.shape, v);
  }
  wr.write((dir / "model.safetensors").string());
}

const char *kTinyConfig = R"({
  "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa",
  "hidden_size": 128, "num_hidden_layers": 2, "vocab_size": 160,
  "intermediate_size": 192, "moe_intermediate_size": 64,
  "n_routed_experts": 2, "n_shared_experts": 1, "num_experts_per_tok": 1,
  "first_k_dense_replace": 1, "num_attention_heads": 2, "q_lora_rank": 64,
  "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
  "v_head_dim": 32, "index_n_heads": 2, "index_head_dim": 32,
  "index_topk": 4, "rms_norm_eps": 1e-5, "tie_word_embeddings": false
})";

/// Relative RMS error bound of Hessian-free trellis quantization at K bits:
/// the codec's measured relative MSE on Gaussian tiles is ~0.275·4^-(K-1)
/// (trellis_encoder_test.cpp); 50 % margin in MSE for small matrices.
double rmsBound(double k) {
  return std::sqrt(1.5 * 0.275 * std::pow(4.0, -(k - 1.0)));
}

} // namespace

TEST(Exl3Writer, QuantizeMixedMul1RoundTrip) {
  fs::path src = freshDir("wsrc"), out = freshDir("wout");
  ModelConfig cfg = parseModelConfig(kTinyConfig, "tiny config");
  writeHfModel(src, kTinyConfig, 42);
  auto source = Pack::open(src.string());
  ASSERT_EQ(source->layout(), PackLayout::HuggingFace);
  glmc::QuantizeOptions opt;
  opt.codebook = "mul1";
  opt.seed = 7;
  glmc::quantizeToExl3(cfg, source.get(), out.string(), opt);

  EXPECT_TRUE(fs::exists(out / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(out / "model-00001-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(out / "model-00002-of-00002.safetensors"));
  json qc = json::parse(std::ifstream(out / "config.json"))["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "exl3");
  EXPECT_EQ(qc["codebook"], "mul1");

  auto pack = Pack::open(out.string());
  ASSERT_EQ(pack->layout(), PackLayout::Exl3);
  ASSERT_TRUE(pack->config().has_value());
  VerifyReport rep = pack->verify({});
  for (auto &i : rep.issues)
    ADD_FAILURE() << i.file << " " << i.object << ": " << i.message;
  std::set<int> widths;
  int quantized = 0;
  for (auto &spec : expectedHfTensors(cfg)) {
    SCOPED_TRACE(spec.name);
    const WeightInfo &w = pack->get(spec.name);
    EXPECT_EQ(w.shape, spec.shape);
    std::vector<float> got = pack->dequantize(spec.name);
    std::vector<float> want = source->dequantize(spec.name);
    ASSERT_EQ(got.size(), want.size());
    if (w.format != WeightFormat::Trellis) {
      EXPECT_EQ(got, want); // unquantized tensors are copied exactly
      continue;
    }
    ++quantized;
    const TrellisPart &p = w.parts[0];
    widths.insert(p.width.twiceBits);
    EXPECT_EQ(p.codebook, trellis::Codebook::Mul1);
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      num += (got[i] - want[i]) * (double)(got[i] - want[i]);
      den += want[i] * (double)want[i];
    }
    double rel = std::sqrt(num / den);
    std::printf("%-52s K %.1f relative RMS %.4f (bound %.4f)\n",
                spec.name.c_str(), p.width.value(), rel,
                rmsBound(p.width.value()));
    EXPECT_LE(rel, rmsBound(p.width.value())) << "K " << p.width.value();
  }
  EXPECT_GT(quantized, 8);
  EXPECT_TRUE(widths.count(5) || widths.count(7)) << "no half-integer K";
  EXPECT_GE(widths.size(), 3u) << "not a mixed-K pack";
  EXPECT_EQ(pack->get("lm_head.weight").format, WeightFormat::BF16);
  EXPECT_EQ(pack->get("model.layers.0.self_attn.kv_b_proj.weight").format,
            WeightFormat::BF16);
  pack.reset();

  // A config.json that contradicts the stored matrices is named by verify.
  json cj = json::parse(std::ifstream(out / "config.json"));
  cj["moe_intermediate_size"] = 160; // padded 256, stored 128
  std::ofstream(out / "config.json") << cj.dump();
  pack = Pack::open(out.string());
  rep = pack->verify({});
  EXPECT_TRUE(hasIssueNaming(rep, "model.layers.1.mlp.experts.1.down_proj"));
  EXPECT_FALSE(hasIssueNaming(rep, "self_attn.q_a_proj"));
  pack.reset();

  // Stored MTP layers (index >= num_hidden_layers) are accepted, and checked
  // whole: a lone eh_proj names the layer's missing tensors, not itself; a
  // tensor the config does not know is named.
  cj["moe_intermediate_size"] = 64;
  cj["num_nextn_predict_layers"] = 1;
  std::ofstream(out / "config.json") << cj.dump();
  SafetensorsWriter extra;
  extra.addBF16("model.layers.2.eh_proj.weight", {128, 256},
                std::vector<float>(128 * 256, 0.5f));
  extra.addBF16("model.layers.7.stray.weight", {4}, {1, 2, 3, 4});
  extra.write((out / "mtp.safetensors").string());
  json index = json::parse(std::ifstream(out / "model.safetensors.index.json"));
  index["weight_map"]["model.layers.2.eh_proj.weight"] = "mtp.safetensors";
  index["weight_map"]["model.layers.7.stray.weight"] = "mtp.safetensors";
  std::ofstream(out / "model.safetensors.index.json") << index.dump();
  pack = Pack::open(out.string());
  rep = pack->verify({});
  int stray = 0, mtpMissing = 0;
  for (const auto &i : rep.issues) {
    if (i.object == "model.layers.7.stray.weight")
      ++stray;
    else if (i.object.rfind("model.layers.2.", 0) == 0 &&
             i.message.find("MTP layer 2") != std::string::npos &&
             i.message.find("missing") == 0)
      ++mtpMissing;
    else
      ADD_FAILURE() << i.object << ": " << i.message;
  }
  EXPECT_EQ(stray, 1);
  EXPECT_EQ(mtpMissing, (int)expectedMtpTensors(*pack->config()).size() - 1);
  EXPECT_EQ(pack->get("model.layers.2.eh_proj.weight").layer, 2);
  fs::remove_all(src);
  fs::remove_all(out);
}

TEST(Exl3Writer, IndexOnlyWritesHeaders) {
  fs::path out = freshDir("widx");
  ModelConfig cfg = parseModelConfig(kTinyConfig, "tiny config");
  glmc::QuantizeOptions opt;
  opt.indexOnly = true;
  opt.bits = 3;
  glmc::quantizeToExl3(cfg, nullptr, out.string(), opt);
  PackOpenOptions popt;
  popt.indexOnly = true;
  auto pack = openExl3Pack(out.string(), popt);
  VerifyReport rep = pack->verify({});
  for (auto &i : rep.issues)
    ADD_FAILURE() << i.file << " " << i.object << ": " << i.message;
  int quantized = 0;
  for (auto &w : pack->weights())
    if (w.format == WeightFormat::Trellis) {
      ++quantized;
      EXPECT_EQ(w.parts[0].width.twiceBits, 6);
      EXPECT_EQ(w.parts[0].codebook, trellis::Codebook::Mcg);
    }
  EXPECT_GT(quantized, 8);
  EXPECT_NE(errorOf([&] { pack->dequantize(pack->weights()[0].name); }), "");
  fs::remove_all(out);
}

TEST(Exl3Writer, FlashMosaicPerLayerWidthsMul1) {
  // GLM-5.3-Flash's EXL3 "mosaic": every quantized tensor of a layer at its
  // layer's width (2 / 3 cycled), MUL1; KDA q/k/v/o_proj and the MLA
  // projections quantized, conv taps, gates, norms and hc maps plain.
  fs::path out = freshDir("mosaic");
  ModelConfig cfg =
      parseModelConfig(glmc::presetConfigJson("flash-tiny"), "flash-tiny");
  glmc::QuantizeOptions opt;
  opt.indexOnly = true;
  opt.codebook = "mul1";
  opt.layerBits = {2, 3};
  glmc::quantizeToExl3(cfg, nullptr, out.string(), opt);
  PackOpenOptions popt;
  popt.indexOnly = true;
  auto pack = openExl3Pack(out.string(), popt);
  VerifyReport rep = pack->verify({});
  for (auto &i : rep.issues)
    ADD_FAILURE() << i.file << " " << i.object << ": " << i.message;
  const std::string P = "model.language_model.layers.";
  auto fmt = [&](const std::string &n) { return pack->get(n).format; };
  for (const char *n : {"0.self_attn.q_proj.weight", "0.self_attn.o_proj.weight",
                        "1.self_attn.q_b_proj.weight",
                        "1.mlp.experts.3.down_proj.weight"})
    EXPECT_EQ(fmt(P + n), WeightFormat::Trellis) << n;
  for (const char *n : {"0.self_attn.q_conv1d.weight", "0.self_attn.A_log",
                        "0.self_attn.f_a_proj.weight", "0.hc_attn_fn",
                        "1.self_attn.kv_b_proj.weight"})
    EXPECT_NE(fmt(P + n), WeightFormat::Trellis) << n;
  for (auto &w : pack->weights()) {
    if (w.format != WeightFormat::Trellis)
      continue;
    EXPECT_EQ(w.parts[0].codebook, trellis::Codebook::Mul1) << w.name;
    EXPECT_EQ(w.parts[0].width.twiceBits, w.layer % 2 == 0 ? 4 : 6) << w.name;
  }
  fs::remove_all(out);
}
