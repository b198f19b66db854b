//===- exlr8_pack_test.cpp - the exlr8 v2 reader against the spec ---------===//
//
// Packs are built here by hand (random trellis bytes, side vectors in several
// dtypes, checksums computed over the stored bytes per §3), independently of
// the writer, and every decoded weight is compared with a direct per-element
// evaluation of exlr8-format.md §5 (bitstream -> state -> MCG -> fp16 ->
// E4M3, then diag(suh)·Hb·T·Hb·diag(svh) in float64) and of the §6 table.
//
//===----------------------------------------------------------------------===//
#include "compiler/packtools/packtools.h"
#include "runtime/base/error.h"
#include "runtime/base/hash.h"
#include "runtime/base/numeric.h"
#include "runtime/codec/trellis.h"
#include "runtime/formats/pack.h"
#include "runtime/formats/safetensors.h"
#include "runtime/model/hf_names.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace glm::rt;

namespace {

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uni() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  double normal() {
    double u = std::max(uni(), 1e-12), v = uni();
    return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

std::string scratch(const std::string &name) {
  fs::path p = fs::temp_directory_path() /
               ("glm_exlr8_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string layerTag(int64_t l) {
  char b[16];
  std::snprintf(b, sizeof b, "%03lld", (long long)l);
  return b;
}

void writeText(const std::string &path, const std::string &text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

//===----------------------------------------------------------------------===//
// Spec §5, evaluated per element
//===----------------------------------------------------------------------===//

/// One tile (32K bytes) -> 16x16 block out[r*16 + c], steps 2-6.
void refDecodeTile(const uint8_t *bytes, int K, double out[256]) {
  auto bit = [&](int n) { // stream bit n: uint32 LE words, bit 31 first
    uint32_t w;
    std::memcpy(&w, bytes + 4 * (n / 32), 4);
    return (w >> (31 - n % 32)) & 1u;
  };
  uint32_t field[256];
  for (int j = 0; j < 256; ++j) {
    uint32_t f = 0;
    for (int b = 0; b < K; ++b)
      f = (f << 1) | bit(j * K + b);
    field[j] = f;
  }
  for (int j = 0; j < 256; ++j) {
    uint32_t state = 0;
    for (int i = 0; i * K < 16; ++i)
      state += field[(j - i + 256) % 256] << (i * K);
    state &= 0xFFFF;
    uint32_t y = state * 0xCBAC1FEDu;
    y = (y & 0x8FFF8FFFu) ^ 0x3B603B60u;
    float sum = halfToFloat((uint16_t)(y & 0xFFFF)) +
                halfToFloat((uint16_t)(y >> 16));
    float v = roundToE4m3(roundToHalf(sum));
    int t = j >> 3, u = j & 7;
    int r = 2 * (t & 3) + (u & 1) + 8 * ((u >> 1) & 1);
    int c = (t >> 2) + 8 * (u >> 2);
    out[r * 16 + c] = v;
  }
}

/// A whole blob -> T (rows x cols), step 7: gate/up [k16][c] over the 16-col
/// tiles, down [b][r][c] with 128-wide column blocks.
std::vector<double> refDecode(const uint8_t *bytes, int64_t rows, int64_t cols,
                              int K, bool inMajor) {
  std::vector<double> T(rows * cols);
  int64_t tiles = rows * cols / 256;
  double tile[256];
  for (int64_t idx = 0; idx < tiles; ++idx) {
    int64_t tr, tc;
    if (!inMajor) {
      tr = idx / (cols / 16), tc = idx % (cols / 16);
    } else {
      int64_t per = (rows / 16) * 8;
      int64_t b = idx / per, r = (idx % per) / 8, c = idx % 8;
      tr = r, tc = b * 8 + c;
    }
    refDecodeTile(bytes + idx * 32 * K, K, tile);
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        T[(tr * 16 + r) * cols + tc * 16 + c] = tile[r * 16 + c];
  }
  return T;
}

double had(int i, int j) {
  return (__builtin_popcount(i & j) & 1 ? -1.0 : 1.0) / std::sqrt(128.0);
}

/// Step 9 in float64: W(in,out) = diag(suh)·Hb·T·Hb·diag(svh).
std::vector<double> refReconstruct(const std::vector<double> &T, int64_t rows,
                                   int64_t cols, const std::vector<double> &suh,
                                   const std::vector<double> &svh) {
  std::vector<double> A(rows * cols, 0.0), W(rows * cols, 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t a = 0; a < 128; ++a) {
      double h = had((int)(i % 128), (int)a);
      const double *src = &T[((i / 128) * 128 + a) * cols];
      for (int64_t c = 0; c < cols; ++c)
        A[i * cols + c] += h * src[c];
    }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t o = 0; o < cols; ++o) {
      double s = 0;
      int64_t base = (o / 128) * 128;
      for (int64_t b = 0; b < 128; ++b)
        s += A[i * cols + base + b] * had((int)b, (int)(o % 128));
      W[i * cols + o] = suh[i] * s * svh[o];
    }
  return W;
}

//===----------------------------------------------------------------------===//
// Stored vectors in any dtype
//===----------------------------------------------------------------------===//

struct Stored {
  DType dt = DType::F32;
  std::vector<uint8_t> bytes;
  size_t es() const { return dtypeSize(dt); }
  double at(int64_t i) const {
    const uint8_t *p = bytes.data() + i * es();
    uint16_t h;
    float f;
    switch (dt) {
    case DType::F16: std::memcpy(&h, p, 2); return halfToFloat(h);
    case DType::BF16: std::memcpy(&h, p, 2); return bf16ToFloat(h);
    case DType::F32: std::memcpy(&f, p, 4); return f;
    case DType::I8: return (double)(int8_t)*p;
    default: ADD_FAILURE() << "dtype"; return 0;
    }
  }
  const uint8_t *slice(int64_t i) const { return bytes.data() + i * es(); }
};

Stored store(DType dt, const std::vector<float> &v) {
  Stored s;
  s.dt = dt;
  s.bytes.resize(v.size() * dtypeSize(dt));
  for (size_t i = 0; i < v.size(); ++i) {
    uint8_t *p = s.bytes.data() + i * s.es();
    if (dt == DType::F16) {
      uint16_t h = floatToHalf(v[i]);
      std::memcpy(p, &h, 2);
    } else if (dt == DType::BF16) {
      uint16_t h = floatToBf16(v[i]);
      std::memcpy(p, &h, 2);
    } else if (dt == DType::F32) {
      std::memcpy(p, &v[i], 4);
    } else if (dt == DType::I8) {
      *p = (uint8_t)(int8_t)v[i];
    }
  }
  return s;
}

Stored storeInts(DType dt, const std::vector<uint64_t> &v) {
  Stored s;
  s.dt = dt;
  s.bytes.resize(v.size() * 8);
  std::memcpy(s.bytes.data(), v.data(), s.bytes.size());
  return s;
}

//===----------------------------------------------------------------------===//
// A hand-made expert layer
//===----------------------------------------------------------------------===//

struct ExpertSpec {
  int64_t layer = 3;
  int64_t rows = 3;        // index rows
  bool sharedSep = true;   // shared.kK.* tensors
  int64_t hidden = 256, halves = 2;
  std::vector<int> widths = {2, 3};
  DType indexDt = DType::I64, checksumDt = DType::U64, chanDt = DType::F16,
        blockDt = DType::BF16, signsDt = DType::F32;
};

struct WidthStore {
  std::map<std::tuple<int64_t, int, int64_t>, std::vector<uint8_t>> halfBytes;
  std::map<std::tuple<int64_t, int, int64_t>, uint64_t> offset;
  std::array<Stored, 3> chan, block;
};

struct ExpertPack {
  ExpertSpec spec;
  std::string dir;
  Stored signsIn, signsOut;
  std::map<int, WidthStore> main, shared;

  int64_t inter() const { return spec.halves * 128; }
  uint64_t halfLen(int k) const { return spec.hidden * 128 * k / 8; }
  std::string kfile(int k) const {
    return "experts/exlr8-layer-" + layerTag(spec.layer) + ".k" +
           std::to_string(k) + ".safetensors";
  }

  void build(const std::string &d, uint64_t seed) {
    dir = d;
    Rng rng(seed);
    int64_t H = spec.hidden, hb = H / 128, I = inter();
    std::vector<float> si(H), so(H);
    for (auto &x : si)
      x = rng.next() & 1 ? 1.f : -1.f;
    for (auto &x : so)
      x = rng.next() & 1 ? 1.f : -1.f;
    signsIn = store(spec.signsDt, si);
    signsOut = store(spec.signsDt, so);

    SafetensorsWriter idx;
    idx.setMetadata("widths", [&] {
      std::string s;
      for (int k : spec.widths)
        s += (s.empty() ? "" : ",") + std::to_string(k);
      return s;
    }());
    if (spec.sharedSep)
      idx.setMetadata("shared_widths", widthList());
    // One .kK file per width: routed rows, then the shared expert.
    for (int k : spec.widths) {
      SafetensorsWriter kf(65536);
      std::vector<std::tuple<bool, int64_t, int, std::string>> names;
      for (bool sep : {false, true}) {
        if (sep && !spec.sharedSep)
          continue;
        int64_t R = sep ? 1 : spec.rows;
        WidthStore &ws = (sep ? shared : main)[k];
        for (int64_t r = 0; r < R; ++r)
          for (int p = 0; p < 3; ++p) {
            std::vector<uint8_t> all;
            for (int64_t h = 0; h < spec.halves; ++h) {
              std::vector<uint8_t> b(halfLen(k));
              for (auto &x : b)
                x = (uint8_t)rng.next();
              all.insert(all.end(), b.begin(), b.end());
              ws.halfBytes[{r, p, h}] = b;
            }
            // Tensor names inside .kK files are not part of the format.
            std::string name = (sep ? "shared." : "e") + std::to_string(r) +
                               "." + std::to_string(p);
            kf.add(name, DType::U8, {(int64_t)all.size()}, all.data(),
                   all.size());
            names.push_back({sep, r, p, name});
          }
      }
      for (auto &[sep, r, p, name] : names)
        for (int64_t h = 0; h < spec.halves; ++h)
          (sep ? shared : main)[k].offset[{r, p, h}] =
              kf.fileOffsetOf(name) + h * halfLen(k);
      std::string path = dir + "/" + kfile(k);
      fs::create_directories(fs::path(path).parent_path());
      kf.write(path);
    }
    // Side vectors, index and checksums.
    for (bool sep : {false, true}) {
      if (sep && !spec.sharedSep)
        continue;
      int64_t R = sep ? 1 : spec.rows;
      for (int k : spec.widths) {
        WidthStore &ws = (sep ? shared : main)[k];
        std::string pre =
            std::string(sep ? "shared." : "") + "k" + std::to_string(k) + ".";
        for (int p = 0; p < 3; ++p) {
          std::vector<float> c(R * I), b(R * hb);
          for (auto &x : c)
            x = (float)((rng.next() & 1 ? 1 : -1) * (0.25 + rng.uni()));
          for (auto &x : b)
            x = (float)(0.01 + 0.05 * rng.uni());
          ws.chan[p] = store(spec.chanDt, c);
          ws.block[p] = store(spec.blockDt, b);
        }
        std::vector<uint64_t> ix, cs;
        for (int64_t r = 0; r < R; ++r)
          for (int p = 0; p < 3; ++p)
            for (int64_t h = 0; h < spec.halves; ++h) {
              ix.push_back(ws.offset[{r, p, h}]);
              ix.push_back(halfLen(k));
              Xxh64 x;
              auto &hbytes = ws.halfBytes[{r, p, h}];
              x.update(hbytes.data(), hbytes.size());
              x.update(ws.chan[p].slice(r * I + h * 128),
                       128 * ws.chan[p].es());
              x.update(ws.block[p].slice(r * hb), hb * ws.block[p].es());
              cs.push_back(x.digest());
            }
        Stored six = storeInts(spec.indexDt, ix), scs = storeInts(spec.checksumDt, cs);
        idx.add(pre + "index", spec.indexDt, {R, 3, spec.halves, 2},
                six.bytes.data(), six.bytes.size());
        idx.add(pre + "checksum", spec.checksumDt, {R, 3, spec.halves},
                scs.bytes.data(), scs.bytes.size());
        const char *cn[] = {"gate.svh", "up.svh", "down.suh"};
        const char *bn[] = {"gate.su_block", "up.su_block", "down.sv_block"};
        for (int p = 0; p < 3; ++p) {
          idx.add(pre + cn[p], spec.chanDt, {R, I}, ws.chan[p].bytes.data(),
                  ws.chan[p].bytes.size());
          idx.add(pre + bn[p], spec.blockDt, {R, hb}, ws.block[p].bytes.data(),
                  ws.block[p].bytes.size());
        }
      }
    }
    idx.add("signs.in", spec.signsDt, {H}, signsIn.bytes.data(),
            signsIn.bytes.size());
    idx.add("signs.out", spec.signsDt, {H}, signsOut.bytes.data(),
            signsOut.bytes.size());
    idx.write(dir + "/experts/exlr8-layer-" + layerTag(spec.layer) +
              ".index.safetensors");
  }
  std::string widthList() const {
    std::string s;
    for (int k : spec.widths)
      s += (s.empty() ? "" : ",") + std::to_string(k);
    return s;
  }

  /// Expected HF weight [out, in] of (row, p), halves at `widths[h]`.
  std::vector<double> expected(bool sep, int64_t row, int p,
                               const std::vector<int> &widths) const {
    int64_t H = spec.hidden, I = inter(), hb = H / 128;
    std::vector<double> out(I * H);
    for (int64_t h = 0; h < spec.halves; ++h) {
      const WidthStore &ws = (sep ? shared : main).at(widths[h]);
      const auto &bytes = ws.halfBytes.at({row, p, h});
      if (p < 2) {
        auto T = refDecode(bytes.data(), H, 128, widths[h], false);
        std::vector<double> suh(H), svh(128);
        for (int64_t i = 0; i < H; ++i)
          suh[i] = signsIn.at(i) * ws.block[p].at(row * hb + i / 128);
        for (int64_t o = 0; o < 128; ++o)
          svh[o] = ws.chan[p].at(row * I + h * 128 + o);
        auto W = refReconstruct(T, H, 128, suh, svh);
        for (int64_t o = 0; o < 128; ++o)
          for (int64_t i = 0; i < H; ++i)
            out[(h * 128 + o) * H + i] = W[i * 128 + o];
      } else {
        auto T = refDecode(bytes.data(), 128, H, widths[h], true);
        std::vector<double> suh(128), svh(H);
        for (int64_t i = 0; i < 128; ++i)
          suh[i] = ws.chan[p].at(row * I + h * 128 + i);
        for (int64_t o = 0; o < H; ++o)
          svh[o] = signsOut.at(o) * ws.block[p].at(row * hb + o / 128);
        auto W = refReconstruct(T, 128, H, suh, svh);
        for (int64_t i = 0; i < 128; ++i)
          for (int64_t o = 0; o < H; ++o)
            out[o * I + h * 128 + i] = W[i * H + o];
      }
    }
    return out;
  }
};

void expectClose(const std::vector<float> &got, const std::vector<double> &want,
                 double rel, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double maxAbs = 0, maxErr = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    maxAbs = std::max(maxAbs, std::fabs(want[i]));
    maxErr = std::max(maxErr, std::fabs(got[i] - want[i]));
  }
  ASSERT_GT(maxAbs, 0) << what;
  EXPECT_LE(maxErr, rel * maxAbs) << what;
}

std::string manifestJson(int64_t layer, const std::string &gate,
                         const std::string &up, const std::string &down,
                         const std::string &shared) {
  std::string s = "{\"layers\": {\"" + std::to_string(layer) +
                  "\": {\"gate\": " + gate + ", \"up\": " + up +
                  ", \"down\": " + down;
  if (!shared.empty())
    s += ", \"shared\": " + shared;
  return s + "}}}";
}

std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

void flipByte(const std::string &path, uint64_t off) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg((std::streamoff)off);
  char c;
  f.read(&c, 1);
  c ^= 0x5A;
  f.seekp((std::streamoff)off);
  f.write(&c, 1);
}

//===----------------------------------------------------------------------===//
// Tests
//===----------------------------------------------------------------------===//

class Exlr8Expert : public ::testing::Test {
protected:
  void SetUp() override {
    dir = scratch("expert");
    pack.build(dir, 11);
    // mixed: per-half lists, an int entry, per-expert down widths.
    writeText(dir + "/manifests/exlr8-manifest-mixed.json",
              manifestJson(3, "[[2,3],3,[3,2]]", "[2,[3,2],[2,2]]", "[3,2,3]",
                           "{\"gate\": [3,2], \"up\": 2, \"down\": 3}"));
    writeText(dir + "/manifests/exlr8-manifest-k2.json",
              manifestJson(3, "[2,2,2]", "[2,2,2]", "[2,2,2]",
                           "{\"gate\": 2, \"up\": 2, \"down\": 2}"));
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string dir;
  ExpertPack pack;
};

TEST_F(Exlr8Expert, CodecDecodesHalvesBitExactPerSpec) {
  for (int k : {2, 3}) {
    const auto &gb = pack.main[k].halfBytes.at({1, 0, 1});
    const auto &db = pack.main[k].halfBytes.at({2, 2, 0});
    std::vector<uint16_t> gw(gb.size() / 2), dw(db.size() / 2);
    std::memcpy(gw.data(), gb.data(), gb.size());
    std::memcpy(dw.data(), db.data(), db.size());
    std::vector<float> q(256 * 128);
    trellis::decodeMatrix(gw.data(), 256, 128, trellis::Width::bits(k),
                          trellis::Codebook::Mcg, true,
                          trellis::TileOrder::RowMajor, q.data());
    auto T = refDecode(gb.data(), 256, 128, k, false);
    for (size_t i = 0; i < q.size(); ++i)
      ASSERT_EQ(q[i], (float)T[i]) << "gate/up K" << k << " element " << i;
    trellis::decodeMatrix(dw.data(), 128, 256, trellis::Width::bits(k),
                          trellis::Codebook::Mcg, true,
                          trellis::TileOrder::InMajor128, q.data());
    T = refDecode(db.data(), 128, 256, k, true);
    for (size_t i = 0; i < q.size(); ++i)
      ASSERT_EQ(q[i], (float)T[i]) << "down K" << k << " element " << i;
  }
}

TEST_F(Exlr8Expert, DequantMatchesSpecAtManifestWidths) {
  PackOpenOptions opt;
  opt.manifest = "mixed";
  auto p = Pack::open(dir, opt);
  EXPECT_EQ(p->layout(), PackLayout::Exlr8);
  // gate/up/down widths of the mixed manifest per expert.
  std::vector<std::array<std::vector<int>, 3>> w = {
      {{{2, 3}, {2, 2}, {3, 3}}}, {{{3, 3}, {3, 2}, {2, 2}}},
      {{{3, 2}, {2, 2}, {3, 3}}}};
  for (int64_t e = 0; e < 3; ++e)
    for (int pr = 0; pr < 3; ++pr) {
      std::string name = "model.layers.3.mlp.experts." + std::to_string(e) +
                         "." + (pr == 0 ? "gate" : pr == 1 ? "up" : "down") +
                         "_proj.weight";
      const WeightInfo &info = p->get(name);
      EXPECT_EQ(info.format, WeightFormat::Trellis);
      EXPECT_EQ(info.expert, e);
      EXPECT_EQ(info.projection, pr);
      EXPECT_EQ(info.shape, (pr < 2 ? std::vector<int64_t>{256, 256}
                                    : std::vector<int64_t>{256, 256}));
      ASSERT_EQ(info.parts.size(), 2u);
      for (int h = 0; h < 2; ++h) {
        const TrellisPart &part = info.parts[h];
        EXPECT_EQ(part.width.value(), w[e][pr][h]) << name << " half " << h;
        EXPECT_TRUE(part.e4m3);
        EXPECT_EQ(part.codebook, trellis::Codebook::Mcg);
        EXPECT_EQ(part.order, pr < 2 ? trellis::TileOrder::RowMajor
                                     : trellis::TileOrder::InMajor128);
        EXPECT_EQ(part.half, h);
        EXPECT_EQ(part.trellisBytes.file, pack.kfile(w[e][pr][h]));
        EXPECT_EQ(part.trellisBytes.offset,
                  pack.main[w[e][pr][h]].offset.at({e, pr, h}));
        EXPECT_EQ(part.trellisBytes.length, pack.halfLen(w[e][pr][h]));
        if (pr < 2)
          EXPECT_EQ(part.outBegin, 128 * h);
        else
          EXPECT_EQ(part.inBegin, 128 * h);
        EXPECT_EQ(part.sideBytes.size(), 3u);
      }
      auto got = p->dequantize(name);
      expectClose(got, pack.expected(false, e, pr, w[e][pr]), 1e-6, name);
    }
  std::vector<std::vector<int>> sw = {{3, 2}, {2, 2}, {3, 3}};
  for (int pr = 0; pr < 3; ++pr) {
    std::string name = std::string("model.layers.3.mlp.shared_experts.") +
                       (pr == 0 ? "gate" : pr == 1 ? "up" : "down") +
                       "_proj.weight";
    const WeightInfo &info = p->get(name);
    EXPECT_TRUE(info.shared);
    expectClose(p->dequantize(name), pack.expected(true, 0, pr, sw[pr]), 1e-6,
                name);
  }
  auto rep = p->verify();
  EXPECT_TRUE(rep.ok()) << rep.issues.front().object << ": "
                        << rep.issues.front().message;
  // Every half at both widths, signs.in and signs.out (value-checked: no
  // checksum covers them) and the two shipped manifests (parsed).
  EXPECT_EQ(rep.checkedObjects, (3u + 1u) * 3 * 2 * 2 + 2 + 2);
  EXPECT_FALSE(p->indexHash().empty());
  EXPECT_FALSE(p->manifestHash().empty());
}

TEST_F(Exlr8Expert, ForcedWidthAndManifestChoice) {
  // Two manifests and two widths: the choice must be explicit.
  // Opening works (verify checks every width) but a width is needed for
  // anything else.
  auto any = Pack::open(dir);
  EXPECT_TRUE(any->verify().ok());
  std::string err = errorOf([&] { any->weights(); });
  EXPECT_NE(err.find("k2, mixed"), std::string::npos) << err;
  err = errorOf(
      [&] { any->dequantize("model.layers.3.mlp.experts.0.up_proj.weight"); });
  EXPECT_NE(err.find("--manifest"), std::string::npos) << err;
  PackOpenOptions opt;
  opt.width = 3;
  auto p = Pack::open(dir, opt);
  for (auto &part : p->get("model.layers.3.mlp.experts.1.down_proj.weight").parts)
    EXPECT_EQ(part.width.value(), 3);
  expectClose(p->dequantize("model.layers.3.mlp.experts.1.down_proj.weight"),
              pack.expected(false, 1, 2, {3, 3}), 1e-6, "forced K3");
  opt.width = 4;
  err = errorOf([&] { Pack::open(dir, opt); });
  EXPECT_NE(err.find("2,3"), std::string::npos) << err;
  // A manifest by path.
  PackOpenOptions byPath;
  byPath.manifest = dir + "/manifests/exlr8-manifest-k2.json";
  auto q = Pack::open(dir, byPath);
  EXPECT_EQ(q->get("model.layers.3.mlp.experts.2.up_proj.weight")
                .parts[1].width.value(), 2);
}

TEST_F(Exlr8Expert, ManifestWidthThePackLacksIsNamed) {
  writeText(dir + "/manifests/exlr8-manifest-bad.json",
            manifestJson(3, "[2,2,2]", "[2,2,2]", "[2,2,4]",
                         "{\"gate\": 2, \"up\": 2, \"down\": 2}"));
  PackOpenOptions opt;
  opt.manifest = "bad";
  std::string err = errorOf([&] { Pack::open(dir, opt); });
  for (const char *s : {"exlr8-manifest-bad.json", "layer 3", "expert 2",
                        "down", "half 0", "K4", "2,3"})
    EXPECT_NE(err.find(s), std::string::npos) << s << " not in: " << err;

  writeText(dir + "/manifests/exlr8-manifest-broken.json", "{\"layers\": {");
  opt.manifest = "broken";
  err = errorOf([&] { Pack::open(dir, opt); });
  EXPECT_NE(err.find("exlr8-manifest-broken.json"), std::string::npos) << err;

  writeText(dir + "/manifests/exlr8-manifest-typo.json",
            manifestJson(3, "[2,\"x\",2]", "[2,2,2]", "[2,2,2]",
                         "{\"gate\": 2, \"up\": 2, \"down\": 2}"));
  opt.manifest = "typo";
  err = errorOf([&] { Pack::open(dir, opt); });
  EXPECT_NE(err.find("layers.3.gate[1]"), std::string::npos) << err;

  opt.manifest = "nosuch";
  err = errorOf([&] { Pack::open(dir, opt); });
  EXPECT_NE(err.find("nosuch"), std::string::npos) << err;
}

TEST_F(Exlr8Expert, FlippedByteNamesTheHalf) {
  uint64_t off = pack.main[3].offset.at({1, 1, 1});
  flipByte(dir + "/" + pack.kfile(3), off + 1000);
  PackOpenOptions opt;
  opt.manifest = "mixed";
  auto rep = Pack::open(dir, opt)->verify();
  ASSERT_EQ(rep.issues.size(), 1u);
  EXPECT_EQ(rep.issues[0].file, pack.kfile(3));
  EXPECT_EQ(rep.issues[0].object, "layer 3 expert 1 up half 1 (K3)");
  EXPECT_EQ(rep.issues[0].offset, off);
  // Loading the damaged half (what the CPU backend and glmc dequant do)
  // refuses it by name instead of decoding wrong weights; others still load.
  PackOpenOptions k3;
  k3.width = 3;
  auto p3 = Pack::open(dir, k3);
  const std::string e = errorOf(
      [&] { p3->dequantize("model.layers.3.mlp.experts.1.up_proj.weight"); });
  EXPECT_NE(e.find(pack.kfile(3) +
                   ": model.layers.3.mlp.experts.1.up_proj.weight half 1 "
                   "(K3): xxh64 mismatch"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("glmc verify " + dir + " lists every damaged part"),
            std::string::npos)
      << e;
  EXPECT_NO_THROW(
      p3->dequantize("model.layers.3.mlp.experts.0.up_proj.weight"));
  p3.reset();

  // A damaged side vector is caught by the same half's checksum.
  flipByte(dir + "/" + pack.kfile(3), off + 1000); // repair
  auto idxFile = SafetensorsFile::open(dir + "/experts/exlr8-layer-003.index.safetensors");
  uint64_t svh = idxFile->get("k2.down.suh").fileOffset + (2 * 256 + 130) * 2;
  idxFile.reset();
  flipByte(dir + "/experts/exlr8-layer-003.index.safetensors", svh);
  rep = Pack::open(dir, opt)->verify();
  ASSERT_EQ(rep.issues.size(), 1u);
  EXPECT_EQ(rep.issues[0].object, "layer 3 expert 2 down half 1 (K2)");
}

TEST_F(Exlr8Expert, IndexOnlyListsSameRanges) {
  std::string io = scratch("expert_io");
  fs::create_directories(io + "/experts");
  fs::copy(dir + "/experts/exlr8-layer-003.index.safetensors",
           io + "/experts/exlr8-layer-003.index.safetensors");
  fs::copy(dir + "/manifests", io + "/manifests");
  PackOpenOptions opt;
  opt.manifest = "mixed";
  EXPECT_NE(errorOf([&] { Pack::open(io, opt); }).find("index-only"),
            std::string::npos);
  opt.indexOnly = true;
  auto full = Pack::open(dir, opt), idx = Pack::open(io, opt);
  ASSERT_EQ(full->weights().size(), idx->weights().size());
  for (size_t i = 0; i < full->weights().size(); ++i) {
    const auto &a = full->weights()[i], &b = idx->weights()[i];
    EXPECT_EQ(a.name, b.name);
    ASSERT_EQ(a.ranges.size(), b.ranges.size());
    for (size_t r = 0; r < a.ranges.size(); ++r) {
      EXPECT_EQ(a.ranges[r].file, b.ranges[r].file);
      EXPECT_EQ(a.ranges[r].offset, b.ranges[r].offset);
      EXPECT_EQ(a.ranges[r].length, b.ranges[r].length);
    }
  }
  EXPECT_EQ(full->indexHash(), idx->indexHash());
  std::string err = errorOf(
      [&] { idx->dequantize("model.layers.3.mlp.experts.0.up_proj.weight"); });
  EXPECT_NE(err.find("index-only"), std::string::npos) << err;
  auto rep = idx->verify();
  ASSERT_FALSE(rep.ok());
  EXPECT_NE(rep.issues[0].message.find("index-only"), std::string::npos);
  fs::remove_all(io);
}

TEST(Exlr8Flash, SharedExpertAsRowEWithOtherDtypes) {
  std::string dir = scratch("flash");
  ExpertPack pack;
  pack.spec.layer = 5;
  pack.spec.rows = 5; // 4 routed + the shared expert as row 4
  pack.spec.sharedSep = false;
  pack.spec.hidden = 256;
  pack.spec.halves = 2;
  pack.spec.widths = {3};
  pack.spec.indexDt = DType::U64;
  pack.spec.checksumDt = DType::I64;
  pack.spec.chanDt = DType::BF16;
  pack.spec.blockDt = DType::F32;
  pack.spec.signsDt = DType::I8;
  pack.build(dir, 5);

  // Without config.json: a single width needs no manifest, and all rows read
  // as routed experts.
  auto bare = Pack::open(dir);
  EXPECT_NE(bare->find("model.layers.5.mlp.experts.4.up_proj.weight"), nullptr);

  writeText(dir + "/config.json", R"({
    "architectures": ["Glm5NextForConditionalGeneration"],
    "model_type": "glm5_next",
    "text_config": {"hidden_size": 256, "num_hidden_layers": 6,
      "vocab_size": 64, "intermediate_size": 512, "moe_intermediate_size": 256,
      "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
      "num_attention_heads": 2, "q_lora_rank": 64, "kv_lora_rank": 64,
      "qk_nope_head_dim": 32, "qk_rope_head_dim": 0, "v_head_dim": 32}})");
  auto p = Pack::open(dir);
  EXPECT_EQ(p->find("model.language_model.layers.5.mlp.experts.4.up_proj.weight"), nullptr);
  const WeightInfo &sh = p->get("model.language_model.layers.5.mlp.shared_experts.down_proj.weight");
  EXPECT_TRUE(sh.shared);
  EXPECT_EQ(sh.parts[1].trellisBytes.offset, pack.main[3].offset.at({4, 2, 1}));
  for (int pr = 0; pr < 3; ++pr) {
    std::string name = std::string("model.language_model.layers.5.mlp.shared_experts.") +
                       (pr == 0 ? "gate" : pr == 1 ? "up" : "down") +
                       "_proj.weight";
    expectClose(p->dequantize(name), pack.expected(false, 4, pr, {3, 3}),
                1e-6, name);
  }
  expectClose(p->dequantize("model.language_model.layers.5.mlp.experts.3.gate_proj.weight"),
              pack.expected(false, 3, 0, {3, 3}), 1e-6, "expert 3 gate");
  // GLM-5.3-Flash names live under model.language_model. (config.json
  // says glm5_next). This pack stores layer 5's experts only: everything
  // else config.json implies is reported missing, layer 5's experts are whole.
  auto rep = p->verify();
  for (const auto &i : rep.issues) {
    EXPECT_NE(i.message.find("missing: config.json implies"),
              std::string::npos)
        << i.object << ": " << i.message;
    EXPECT_EQ(i.object.find("layers.5.mlp.experts."), std::string::npos);
    EXPECT_EQ(i.object.find("layers.5.mlp.shared_experts."), std::string::npos);
  }
  EXPECT_EQ(rep.checkedObjects, 5u * 3 * 2 + 2); // + signs.in/out

  // Without config, a manifest with 4 experts + shared marks row 4 shared.
  fs::remove(dir + "/config.json");
  writeText(dir + "/manifests/exlr8-manifest-home.json",
            manifestJson(5, "[3,3,3,3]", "[3,3,3,3]", "[3,3,3,3]",
                         "{\"gate\": 3, \"up\": 3, \"down\": 3}"));
  auto m = Pack::open(dir);
  EXPECT_NE(m->find("model.layers.5.mlp.shared_experts.up_proj.weight"),
            nullptr);
  fs::remove_all(dir);
}

//===----------------------------------------------------------------------===//
// Dense records, formats 1-7
//===----------------------------------------------------------------------===//

struct DenseCase {
  std::string prefix;
  int code, side;
  int64_t out, in;
  int k = 0;
  std::vector<std::pair<std::string, Stored>> fields; // §6 table order
  std::vector<int64_t> shapes[4];
  std::vector<double> expected; // [out, in]
};

/// Builds one record with random data and its expected decode per §6.
DenseCase makeRecord(Rng &rng, const std::string &prefix, int code, int side,
                     int64_t out, int64_t in, int k = 0) {
  DenseCase c{prefix, code, side, out, in, k, {}, {}, {}};
  c.expected.assign(out * in, 0.0);
  auto randBytes = [&](size_t n) {
    Stored s;
    s.dt = DType::U8;
    s.bytes.resize(n);
    for (auto &x : s.bytes)
      x = (uint8_t)rng.next();
    return s;
  };
  auto fp8Bytes = [&](size_t n) { // finite E4M3 only
    Stored s = randBytes(n);
    s.dt = DType::F8_E4M3;
    for (auto &x : s.bytes)
      if ((x & 0x7F) == 0x7F)
        x ^= 0x01;
    return s;
  };
  auto floats = [&](DType dt, size_t n, double lo, double hi) {
    std::vector<float> v(n);
    for (auto &x : v)
      x = (float)(lo + (hi - lo) * rng.uni());
    return store(dt, v);
  };
  switch (code) {
  case 1: {
    int64_t g = side == 2 ? in / 128 : out / 128, d = side == 2 ? out : in;
    Stored t = randBytes(g * 16 * k * d);
    Stored suh = floats(DType::F16, in, -1, 1), svh = floats(DType::F32, out, -1, 1);
    c.fields = {{"trellis", t}, {"suh", suh}, {"svh", svh}};
    c.shapes[0] = {g, 16 * k * d};
    c.shapes[1] = {in};
    c.shapes[2] = {out};
    std::vector<double> su(in), sv(out);
    for (int64_t i = 0; i < in; ++i)
      su[i] = suh.at(i);
    for (int64_t o = 0; o < out; ++o)
      sv[o] = svh.at(o);
    for (int64_t e = 0; e < g; ++e) {
      const uint8_t *b = t.bytes.data() + e * 16 * k * d;
      if (side != 2) {
        auto T = refDecode(b, in, 128, k, false);
        std::vector<double> s2(sv.begin() + e * 128, sv.begin() + e * 128 + 128);
        auto W = refReconstruct(T, in, 128, su, s2);
        for (int64_t o = 0; o < 128; ++o)
          for (int64_t i = 0; i < in; ++i)
            c.expected[(e * 128 + o) * in + i] = W[i * 128 + o];
      } else {
        auto T = refDecode(b, 128, out, k, true);
        std::vector<double> s1(su.begin() + e * 128, su.begin() + e * 128 + 128);
        auto W = refReconstruct(T, 128, out, s1, sv);
        for (int64_t i = 0; i < 128; ++i)
          for (int64_t o = 0; o < out; ++o)
            c.expected[o * in + e * 128 + i] = W[i * out + o];
      }
    }
    break;
  }
  case 2: {
    Stored q4 = randBytes(out * in / 2);
    Stored s4 = floats(DType::BF16, out * in / 32, 0.01, 0.1);
    c.fields = {{"q4", q4}, {"s4", s4}};
    if (side == 2) {
      c.shapes[0] = {in / 128, out, 64};
      c.shapes[1] = {in / 128, out, 4};
    } else {
      c.shapes[0] = {out, in / 2};
      c.shapes[1] = {out, in / 32};
    }
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        uint8_t byte;
        double s;
        if (side == 2) {
          int64_t b = i / 128, cc = i % 128;
          byte = q4.bytes[(b * out + o) * 64 + cc / 2];
          s = s4.at((b * out + o) * 4 + cc / 32);
        } else {
          byte = q4.bytes[o * (in / 2) + i / 2];
          s = s4.at(o * (in / 32) + i / 32);
        }
        int nib = i % 2 == 0 ? byte & 15 : byte >> 4;
        c.expected[o * in + i] = (nib - 8) * s;
      }
    break;
  }
  case 3: {
    Stored f8 = fp8Bytes(out * in), e8 = randBytes(out * in / 32);
    for (auto &x : e8.bytes)
      x = (uint8_t)(120 + x % 16);
    c.fields = {{"fp8", f8}, {"e8m0", e8}};
    c.shapes[0] = {out, in};
    c.shapes[1] = {out, in / 32};
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i)
        c.expected[o * in + i] = e4m3ToFloat(f8.bytes[o * in + i]) *
                                 std::pow(2.0, e8.bytes[o * (in / 32) + i / 32] - 127.0);
    break;
  }
  case 4: {
    int64_t ob = (out + 127) / 128, ib = (in + 127) / 128;
    Stored f8 = fp8Bytes(out * in), sc = floats(DType::F32, ob * ib, 0.001, 0.01);
    c.fields = {{"fp8", f8}, {"scale", sc}};
    c.shapes[0] = {out, in};
    c.shapes[1] = {ob, ib};
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i)
        c.expected[o * in + i] =
            e4m3ToFloat(f8.bytes[o * in + i]) * sc.at((o / 128) * ib + i / 128);
    break;
  }
  case 5: {
    Stored f8 = fp8Bytes(out * in), sc = floats(DType::BF16, out, 0.001, 0.01);
    c.fields = {{"fp8", f8}, {"scale", sc}};
    c.shapes[0] = {out, in};
    c.shapes[1] = {out};
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i)
        c.expected[o * in + i] = e4m3ToFloat(f8.bytes[o * in + i]) * sc.at(o);
    break;
  }
  case 6:
  case 7: {
    Stored v = floats(code == 6 ? DType::BF16 : DType::F32, out * in, -1, 1);
    c.fields = {{code == 6 ? "bf16" : "fp32", v}};
    c.shapes[0] = {out, in};
    for (int64_t i = 0; i < out * in; ++i)
      c.expected[i] = v.at(i);
    break;
  }
  }
  return c;
}

/// §3 dense checksums (sharded side = out unless side 2; formats 3-7 are
/// built out-side here).
std::vector<uint64_t> denseChecksums(const DenseCase &c) {
  int64_t n = c.side == 2 ? c.in : c.out, blocks = (n + 127) / 128;
  std::vector<uint64_t> out;
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t r0 = b * 128, r1 = std::min(n, r0 + 128);
    Xxh64 x;
    auto rows = [&](const Stored &s, const std::vector<int64_t> &shape,
                    int64_t a, int64_t z) {
      size_t rowBytes = s.bytes.size() / shape[0];
      z = std::min(z, shape[0]);
      x.update(s.bytes.data() + a * rowBytes, (z - a) * rowBytes);
    };
    if (c.code == 1) {
      const Stored &own = c.fields[c.side == 2 ? 1 : 2].second;
      const Stored &other = c.fields[c.side == 2 ? 2 : 1].second;
      rows(c.fields[0].second, c.shapes[0], b, b + 1);
      x.update(own.slice(r0), (r1 - r0) * own.es());
      x.update(other.bytes.data(), other.bytes.size());
    } else if (c.code == 2 && c.side == 2) {
      rows(c.fields[0].second, c.shapes[0], b, b + 1);
      rows(c.fields[1].second, c.shapes[1], b, b + 1);
    } else if (c.code == 4) {
      rows(c.fields[0].second, c.shapes[0], r0, r1);
      rows(c.fields[1].second, c.shapes[1], b, b + 1);
    } else {
      for (size_t f = 0; f < c.fields.size(); ++f)
        rows(c.fields[f].second, c.shapes[f], r0, r1);
    }
    out.push_back(x.digest());
  }
  return out;
}

void addRecord(SafetensorsWriter &w, const DenseCase &c) {
  std::vector<int64_t> rec = {c.code, c.out, c.in, c.k, c.side, 0, 0, 0};
  w.add(c.prefix + ".record", DType::I64, {8}, rec.data(), 64);
  auto cs = denseChecksums(c);
  w.add(c.prefix + ".checksum", DType::U64, {(int64_t)cs.size()}, cs.data(),
        cs.size() * 8);
  for (size_t f = 0; f < c.fields.size(); ++f)
    w.add(c.prefix + "." + c.fields[f].first, c.fields[f].second.dt,
          c.shapes[f], c.fields[f].second.bytes.data(),
          c.fields[f].second.bytes.size());
  w.setMetadata(c.prefix + ".record",
                std::to_string(c.code) + "," + std::to_string(c.out) + "," +
                    std::to_string(c.in) + "," + std::to_string(c.k) + "," +
                    std::to_string(c.side) + ",0,0,0");
}

TEST(Exlr8Dense, AllFormatsDecodePerTable) {
  std::string dir = scratch("dense");
  Rng rng(3);
  std::vector<DenseCase> cases = {
      makeRecord(rng, "self_attn.o_proj", 1, 2, 128, 256, 3),
      makeRecord(rng, "self_attn.q_b_proj", 1, 1, 256, 128, 2),
      makeRecord(rng, "mlp.gate_proj", 2, 1, 130, 64),
      makeRecord(rng, "mlp.down_proj", 2, 2, 64, 256),
      makeRecord(rng, "self_attn.q_a_proj", 3, 0, 96, 64),
      makeRecord(rng, "self_attn.kv_b_proj", 4, 1, 200, 160),
      makeRecord(rng, "self_attn.kv_a_proj_with_mqa", 5, 0, 72, 64),
      makeRecord(rng, "mlp.up_proj", 6, 0, 40, 24),
      makeRecord(rng, "mlp.gate", 7, 0, 8, 64)};
  SafetensorsWriter w;
  for (auto &c : cases)
    addRecord(w, c);
  std::vector<float> norm = {1.f, 2.f, 3.f, 4.f};
  w.addF32("input_layernorm.weight", {4}, norm);
  fs::create_directories(dir + "/dense");
  w.write(dir + "/dense/exlr8-dense-000.safetensors");

  SafetensorsWriter v;
  DenseCase emb = makeRecord(rng, "embed_tokens", 5, 0, 300, 64);
  DenseCase head = makeRecord(rng, "lm_head", 3, 1, 300, 64);
  addRecord(v, emb);
  addRecord(v, head);
  v.addF32("norm.weight", {4}, norm);
  v.write(dir + "/dense/exlr8-vocab.safetensors");

  auto p = Pack::open(dir);
  for (auto &c : cases) {
    std::string name = "model.layers.0." + c.prefix + ".weight";
    const WeightInfo &info = p->get(name);
    EXPECT_EQ(info.shape, (std::vector<int64_t>{c.out, c.in})) << name;
    if (c.code == 1) {
      EXPECT_EQ(info.format, WeightFormat::Trellis);
      EXPECT_EQ((int64_t)info.parts.size(), (c.side == 2 ? c.in : c.out) / 128);
    }
    expectClose(p->dequantize(name), c.expected, 1e-6,
                name);
  }
  expectClose(p->dequantize("model.embed_tokens.weight"), emb.expected, 1e-6,
              "embed");
  expectClose(p->dequantize("lm_head.weight"), head.expected, 1e-6, "lm_head");
  EXPECT_EQ(p->dequantize("model.norm.weight"), norm);
  EXPECT_EQ(p->dequantize("model.layers.0.input_layernorm.weight"), norm);
  EXPECT_EQ(p->get("model.embed_tokens.weight").format, WeightFormat::Fp8Row);
  EXPECT_EQ(p->get("lm_head.weight").format, WeightFormat::Mxfp8);
  auto rep = p->verify();
  EXPECT_TRUE(rep.ok()) << rep.issues.front().object << ": "
                        << rep.issues.front().message;

  // A flipped byte in block 1 of kv_b_proj's fp8 rows (rows 128..199).
  auto f = SafetensorsFile::open(dir + "/dense/exlr8-dense-000.safetensors");
  uint64_t off = f->get("self_attn.kv_b_proj.fp8").fileOffset + 150 * 160 + 7;
  uint64_t t2 = f->get("self_attn.o_proj.trellis").fileOffset +
                1 * f->get("self_attn.o_proj.trellis").shape[1] + 3;
  f.reset();
  flipByte(dir + "/dense/exlr8-dense-000.safetensors", off);
  flipByte(dir + "/dense/exlr8-dense-000.safetensors", t2);
  rep = p->verify();
  ASSERT_EQ(rep.issues.size(), 2u);
  std::set<std::string> objs = {rep.issues[0].object, rep.issues[1].object};
  EXPECT_TRUE(objs.count("layer 0 self_attn.kv_b_proj block 1"));
  EXPECT_TRUE(objs.count("layer 0 self_attn.o_proj block 1"));
  EXPECT_EQ(rep.issues[0].file, "dense/exlr8-dense-000.safetensors");
  // Loading a damaged record refuses it, naming the block.
  const std::string d = errorOf(
      [&] { p->dequantize("model.layers.0.self_attn.kv_b_proj.weight"); });
  EXPECT_NE(d.find("dense/exlr8-dense-000.safetensors: layer 0 "
                   "self_attn.kv_b_proj block 1 at offset "),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("xxh64 mismatch"), std::string::npos) << d;
  expectClose(p->dequantize("lm_head.weight"), head.expected, 1e-6, "lm_head");

  // Header-only copies (index-only packs) still list every record.
  std::string io = scratch("dense_io");
  fs::create_directories(io + "/dense");
  for (const char *fn : {"exlr8-dense-000.safetensors", "exlr8-vocab.safetensors"}) {
    auto sf = SafetensorsFile::open(dir + "/dense/" + fn);
    std::ifstream in(dir + "/dense/" + fn, std::ios::binary);
    std::string hdr(sf->headerSize(), '\0');
    in.read(&hdr[0], (std::streamsize)hdr.size());
    std::ofstream(io + "/dense/" + fn, std::ios::binary) << hdr;
  }
  PackOpenOptions opt;
  opt.indexOnly = true;
  auto q = Pack::open(io, opt);
  EXPECT_EQ(q->weights().size(), p->weights().size());
  EXPECT_EQ(q->get("model.layers.0.self_attn.o_proj.weight").parts.size(), 2u);
  EXPECT_EQ(q->indexHash(), p->indexHash());
  EXPECT_NE(errorOf([&] { q->dequantize("lm_head.weight"); }).find("index-only"),
            std::string::npos);
  fs::remove_all(io);

  // A record carries no checksum: a damaged field, even one of the unused
  // [5..7], differs from the header's metadata copy and is refused at open.
  p.reset();
  auto g = SafetensorsFile::open(dir + "/dense/exlr8-vocab.safetensors");
  uint64_t r7 = g->get("lm_head.record").fileOffset + 7 * 8 + 6;
  g.reset();
  flipByte(dir + "/dense/exlr8-vocab.safetensors", r7);
  const std::string rec = errorOf([&] { Pack::open(dir); });
  EXPECT_NE(rec.find("dense/exlr8-vocab.safetensors: tensor lm_head.record[7] "
                     "= "),
            std::string::npos)
      << rec;
  EXPECT_NE(rec.find("but the header's metadata copy says 0: the record is "
                     "damaged; re-download dense/exlr8-vocab.safetensors"),
            std::string::npos)
      << rec;
  fs::remove_all(dir);
}

} // namespace

//===----------------------------------------------------------------------===//
// The writer (compiler/packtools/exlr8_writer.cpp), read back
//===----------------------------------------------------------------------===//

namespace {

double relError(const std::vector<float> &a, const std::vector<float> &b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double)(a[i] - b[i]) * (a[i] - b[i]);
    den += (double)b[i] * b[i];
  }
  return std::sqrt(num / den);
}

/// The tiny preset shrunk further (2 routed experts + shared, one dense and
/// one MoE layer, and the MTP layer) but with hidden 256, so su_block/sv_block
/// have 2 blocks; random BF16 weights whose hidden blocks differ in scale.
void writeSmallHfModel(const std::string &dir) {
  nlohmann::json j = nlohmann::json::parse(glmc::presetConfigJson("tiny"));
  j["hidden_size"] = 256;
  j["n_routed_experts"] = 2;
  j["num_experts_per_tok"] = 1;
  j["num_hidden_layers"] = 2;
  j["indexer_types"] = {"full", "shared"};
  j["mlp_layer_types"] = {"dense", "sparse"};
  std::string text = j.dump(2);
  writeText(dir + "/config.json", text);
  ModelConfig cfg = parseModelConfig(text, "test config");
  SafetensorsWriter w;
  Rng rng(99);
  // The causal LM and its MTP layer, as a release ships them (what an
  // index-only pack of this config lists).
  std::vector<HfTensorSpec> specs = expectedHfTensors(cfg);
  for (HfTensorSpec &t : expectedMtpTensors(cfg))
    specs.push_back(std::move(t));
  for (const HfTensorSpec &t : specs) {
    int64_t n = 1;
    for (int64_t d : t.shape)
      n *= d;
    std::vector<float> v(n);
    int64_t cols = t.shape.size() == 2 ? t.shape[1] : n;
    for (int64_t i = 0; i < n; ++i) {
      double x = t.shape.size() == 2 ? 0.02 * rng.normal() : 1 + 0.1 * rng.normal();
      // Hidden-side blocks of different scale (columns 128.. of [*, 256]).
      if (t.shape.size() == 2 && cols == 256 && (i % cols) >= 128)
        x *= 3;
      v[i] = (float)x;
    }
    if (t.name.find("e_score_correction_bias") != std::string::npos)
      w.addF32(t.name, t.shape, v);
    else
      w.addBF16(t.name, t.shape, v);
  }
  w.write(dir + "/model.safetensors");
}

class Exlr8Writer : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    root = new std::string(scratch("writer"));
    hf = *root + "/hf";
    out = *root + "/exlr8";
    writeSmallHfModel(hf);
    ModelConfig cfg = loadModelConfig(hf);
    auto src = Pack::open(hf);
    glmc::QuantizeOptions opt;
    opt.seed = 1234;
    glmc::quantizeToExlr8(cfg, src.get(), out, opt);
    glmc::QuantizeOptions io = opt;
    io.indexOnly = true;
    glmc::quantizeToExlr8(cfg, nullptr, *root + "/index-only", io);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root);
    delete root;
  }
  static std::string *root;
  static std::string hf, out;
};
std::string *Exlr8Writer::root = nullptr;
std::string Exlr8Writer::hf, Exlr8Writer::out;

TEST_F(Exlr8Writer, WritesTheSpecFiles) {
  ModelConfig cfg = loadModelConfig(hf);
  for (int64_t L = 0; L < cfg.numLayers; ++L) {
    EXPECT_TRUE(fs::exists(out + "/dense/exlr8-dense-" + layerTag(L) +
                           ".safetensors"));
    if (!cfg.isMoeLayer(L))
      continue;
    auto idx = SafetensorsFile::open(out + "/experts/exlr8-layer-" +
                                     layerTag(L) + ".index.safetensors");
    EXPECT_EQ(idx->metadata().at("widths"), "2,3,4");
    for (int k : {2, 3, 4}) {
      std::string kf = out + "/experts/exlr8-layer-" + layerTag(L) + ".k" +
                       std::to_string(k) + ".safetensors";
      ASSERT_TRUE(fs::exists(kf));
      const TensorView &ix = idx->get("k" + std::to_string(k) + ".index");
      EXPECT_EQ(ix.shape, (std::vector<int64_t>{cfg.numRoutedExperts, 3,
                                                cfg.moeIntermediateSize / 128, 2}));
      // Every expert projection starts 64 KiB-aligned.
      for (int64_t e = 0; e < ix.shape[0]; ++e) {
        int64_t off;
        std::memcpy(&off, ix.data + (e * 3 * ix.shape[2] * 2) * 8, 8);
        EXPECT_EQ(off % 65536, 0);
      }
    }
    EXPECT_NE(idx->find("shared.k3.index"), nullptr);
  }
  EXPECT_TRUE(fs::exists(out + "/dense/exlr8-vocab.safetensors"));
  for (const char *m : {"k2", "k3", "k4", "mixed"})
    EXPECT_TRUE(fs::exists(out + "/manifests/exlr8-manifest-" + m + ".json"));
  EXPECT_TRUE(fs::exists(out + "/config.json"));
}

TEST_F(Exlr8Writer, ReopensVerifiesAndReconstructs) {
  auto src = Pack::open(hf);
  double bound[5] = {0, 0, 0.33, 0.17, 0.09};
  for (int k : {2, 3, 4}) {
    PackOpenOptions opt;
    opt.width = k;
    auto p = Pack::open(out, opt);
    if (k == 3) {
      auto rep = p->verify();
      EXPECT_TRUE(rep.ok()) << rep.issues.front().object << ": "
                            << rep.issues.front().message;
    }
    double worst = 0;
    int checked = 0;
    for (const WeightInfo &w : p->weights()) {
      if (w.format != WeightFormat::Trellis || w.parts.empty())
        continue;
      bool expert = w.expert >= 0 || w.shared;
      auto a = p->dequantize(w.name), b = src->dequantize(w.name);
      double e = relError(a, b);
      if (expert) {
        worst = std::max(worst, e);
        ++checked;
      }
      EXPECT_LT(e, expert ? bound[k] : 0.12) << w.name << " at K" << k;
    }
    EXPECT_GT(checked, 0);
    std::printf("K%d: worst expert relative RMS error %.4f over %d\n", k,
                worst, checked);
  }
  // Dense records of every written format decode close to the source.
  PackOpenOptions opt;
  opt.width = 4;
  auto p = Pack::open(out, opt);
  std::set<WeightFormat> seen;
  for (const WeightInfo &w : p->weights()) {
    if (w.layer >= 0 && (w.expert >= 0 || w.shared))
      continue;
    seen.insert(w.format);
    double e = relError(p->dequantize(w.name), src->dequantize(w.name));
    EXPECT_LT(e, 0.12) << w.name << " " << weightFormatName(w.format);
  }
  for (WeightFormat f : {WeightFormat::Trellis, WeightFormat::Mxfp8,
                         WeightFormat::Fp8Block, WeightFormat::Fp8Row,
                         WeightFormat::BF16})
    EXPECT_TRUE(seen.count(f)) << weightFormatName(f);
}

TEST_F(Exlr8Writer, MixedManifestPicksPerHalfWidths) {
  PackOpenOptions opt;
  opt.manifest = "mixed";
  auto p = Pack::open(out, opt);
  std::ifstream in(out + "/manifests/exlr8-manifest-mixed.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  std::set<double> widths;
  bool differ = false;
  for (const WeightInfo &w : p->weights()) {
    if (w.expert < 0 || w.format != WeightFormat::Trellis)
      continue;
    for (auto &part : w.parts)
      widths.insert(part.width.value());
    if (w.projection < 2 && w.parts.size() > 1 &&
        w.parts[0].width.value() != w.parts[1].width.value())
      differ = true;
    if (w.projection == 2)
      for (auto &part : w.parts)
        EXPECT_EQ(part.width.value(), w.parts[0].width.value()) << w.name;
  }
  EXPECT_EQ(widths, (std::set<double>{2, 3, 4}));
  EXPECT_TRUE(differ);
  // The chosen halves decode at their widths: same bytes as the K-packs.
  PackOpenOptions k3;
  k3.width = 3;
  auto q = Pack::open(out, k3);
  for (const WeightInfo &w : p->weights())
    if (w.expert == 1 && w.projection == 1) {
      const WeightInfo &u = q->get(w.name);
      for (size_t h = 0; h < w.parts.size(); ++h)
        if (w.parts[h].width.value() == 3)
          EXPECT_EQ(w.parts[h].trellisBytes.offset,
                    u.parts[h].trellisBytes.offset);
    }
}

TEST_F(Exlr8Writer, IndexOnlyListsTheSameRanges) {
  std::string io = *root + "/index-only";
  EXPECT_FALSE(fs::exists(io + "/experts/exlr8-layer-001.k3.safetensors"));
  PackOpenOptions opt;
  opt.manifest = "mixed";
  opt.indexOnly = true;
  auto a = Pack::open(out, opt), b = Pack::open(io, opt);
  ASSERT_EQ(a->weights().size(), b->weights().size());
  for (size_t i = 0; i < a->weights().size(); ++i) {
    const auto &x = a->weights()[i], &y = b->weights()[i];
    ASSERT_EQ(x.name, y.name);
    EXPECT_EQ(x.shape, y.shape) << x.name;
    EXPECT_EQ(x.format, y.format) << x.name;
    ASSERT_EQ(x.ranges.size(), y.ranges.size()) << x.name;
    for (size_t r = 0; r < x.ranges.size(); ++r) {
      EXPECT_EQ(x.ranges[r].file, y.ranges[r].file) << x.name;
      EXPECT_EQ(x.ranges[r].offset, y.ranges[r].offset) << x.name;
      EXPECT_EQ(x.ranges[r].length, y.ranges[r].length) << x.name;
    }
  }
  EXPECT_EQ(a->indexHash(), b->indexHash());
  EXPECT_EQ(a->manifestHash(), b->manifestHash());
  auto rep = b->verify();
  ASSERT_FALSE(rep.ok());
  EXPECT_NE(rep.issues[0].message.find("index-only"), std::string::npos);
}

} // namespace

TEST(Exlr8FlashWriter, IndexOnlyNamesManifestsAndSlices) {
  // flash-tiny from its config alone: the text model under
  // model.language_model., the shared expert as row E, the release's
  // manifests and per-rank index slices.
  std::string dir = scratch("flash-writer");
  ModelConfig cfg =
      parseModelConfig(glmc::presetConfigJson("flash-tiny"), "flash-tiny");
  glmc::QuantizeOptions opt;
  opt.indexOnly = true;
  glmc::quantizeToExlr8(cfg, nullptr, dir, opt);
  for (const char *m : {"k2", "k3", "k4", "bit201", "bit349", "mixed"})
    EXPECT_TRUE(fs::exists(dir + "/manifests/exlr8-manifest-" +
                           std::string(m) + ".json"))
        << m;

  PackOpenOptions popt;
  popt.indexOnly = true;
  popt.manifest = "bit349";
  auto pack = Pack::open(dir, popt);
  const std::string P = "model.language_model.layers.1.";
  const WeightInfo *sh = pack->find(P + "mlp.shared_experts.up_proj.weight");
  ASSERT_NE(sh, nullptr);
  EXPECT_TRUE(sh->shared);
  EXPECT_NE(pack->find(P + "mlp.experts.3.down_proj.weight"), nullptr);
  EXPECT_EQ(pack->find(P + "mlp.experts.4.down_proj.weight"), nullptr);
  for (const char *n : {"self_attn.indexer.index_kpool_compress_ape",
                        "hc_attn_fn", "self_attn.q_b_proj.weight"})
    EXPECT_NE(pack->find(P + n), nullptr) << n;
  EXPECT_NE(pack->find("model.language_model.layers.0.self_attn.q_conv1d.weight"),
            nullptr);
  EXPECT_NE(pack->find("model.language_model.embed_tokens.weight"), nullptr);
  EXPECT_NE(pack->find("lm_head.weight"), nullptr);

  // bit349: 3.49 bits per expert weight on average (within one decision).
  double bits = 0, n = 0;
  for (auto &w : pack->weights())
    if (w.expert >= 0 || w.shared) {
      double numel = (double)w.shape[0] * (double)w.shape[1];
      bits += w.bitsPerWeight() * numel;
      n += numel;
    }
  EXPECT_NEAR(bits / n, 3.49, 0.1);

  // Slices: every (row, half) on exactly one rank of each TP degree, by §7.
  for (int tp : {2, 3, 4}) {
    std::set<std::pair<int64_t, int64_t>> seen;
    for (int r = 0; r < tp; ++r) {
      auto f = SafetensorsFile::open(dir + "/index-slices/tp" +
                                     std::to_string(tp) + "/k3/rank" +
                                     std::to_string(r) + ".safetensors");
      const TensorView &own = f->get("layers.1.owned");
      std::vector<int32_t> v((size_t)own.numel());
      std::memcpy(v.data(), own.data, own.byteSize);
      for (size_t i = 0; i < v.size(); i += 2) {
        EXPECT_EQ((2 * v[i] + v[i + 1] + 1) % tp, r);
        EXPECT_TRUE(seen.insert({v[i], v[i + 1]}).second);
      }
      EXPECT_EQ(f->get("layers.1.index").shape[0], own.shape[0]);
    }
    EXPECT_EQ(seen.size(), 5u * 2u) << "tp" << tp; // 4 experts + shared, 2 halves
  }
  fs::remove_all(dir);
}
