//===- moe_trellis_gpu_test.cpp - the two-launch MoE decode step ----------===//
//
// moe_trellis (codegen/templates/moe_trellis.cuh) against the CPU codec:
// - Decode: one-hot inputs make every gate/up split-k partial a row of the
//   decoded half, which must equal trellis::decodeMatrix bit for bit, for
//   K = 1..8 in one launch (per-half widths), every codebook, E4M3 on/off,
//   and the E4M3 shared-memory decode table of 256-thread blocks (every
//   codebook, both row streams; MCG without E4M3 there stays ALU).
// - Layer: the whole step (routed experts + shared expert, SwiGLU, down,
//   routing weights, reduction, exlr8's H * signs.out) against a float64
//   evaluation with Q from the codec, on small and GLM-5.3 shapes, exlr8 and
//   EXL3 layouts, mixed widths, batches 1..8 with experts shared by rows,
//   halves not owned by the rank, the decode table (table_* cases: the first
//   launch computes it, later ones copy it). Two runs must be bit-identical
//   (fixed reduction order; the arrival counters return to zero), and an
//   accumulating run must add exactly.
//
//===----------------------------------------------------------------------===//
#include "codegen/moe_trellis_abi.h"
#include "gpu_twin_util.h"
#include "runtime/codec/trellis.h"

#include <algorithm>
#include <numeric>
#include <set>

using namespace glm::gputest;
namespace trellis = glm::rt::trellis;
using glm::codegen::MoeTrellisDims;

namespace {

const char *cbName(int cb) { return cb == 0 ? "3inst" : cb == 1 ? "mcg" : "mul1"; }

KernelSpec moeSpec(const std::string &widths, int cb, bool e4m3, int batchT,
                   int sv, int stage, int threads, int pipe,
                   bool persist = false, const std::string &sum = "f32") {
  return spec("moe_trellis", {{"widths", widths},
                              {"sum", stage == 1 ? sum : "f32"},
                              {"codebook", cbName(cb)},
                              {"e4m3", e4m3 ? "1" : "0"},
                              {"batch", std::to_string(batchT)},
                              {"sv", dtName(sv)},
                              {"stage", std::string(stage == 0 ? "gu" : "down") +
                                            (persist ? "_persist" : "")},
                              {"pipe", std::to_string(pipe)},
                              {"minblocks", pipe == 3 ? "4" : "0"},
                              {"threads", std::to_string(threads)}});
}

/// Random trellis halves of the experts a test uses, in exlr8 or EXL3 order.
struct Weights {
  bool exl3 = false;
  int H = 0, I = 2048, eTot = 0;
  int cb = 1;
  bool e4m3 = false;
  std::vector<uint8_t> widths; // [(e*3 + p)*16 + h]
  std::vector<uint8_t> blob;
  std::vector<int64_t> off; // byte offset of the half, -1 = none
  std::vector<int64_t> tensorOff; // EXL3: offset of tensor (e, p)
  mutable std::vector<float> cache[3]; // EXL3: last decoded tensor per p
  mutable int cacheE[3] = {-1, -1, -1};

  size_t add(std::mt19937 &rng, size_t words) {
    size_t o = (blob.size() + 255) / 256 * 256;
    blob.resize(o + words * 2);
    for (size_t i = 0; i < words; ++i) {
      uint16_t w = uint16_t(rng());
      std::memcpy(&blob[o + 2 * i], &w, 2);
    }
    return o;
  }
  /// Generates the halves of expert e (all 48, widths already set).
  void generate(std::mt19937 &rng, int e) {
    for (int p = 0; p < 3; ++p) {
      if (exl3) {
        const trellis::Width w = trellis::Width::bits(widths[(e * 3 + p) * 16]);
        const int64_t rows = p < 2 ? H : I, cols = p < 2 ? I : H;
        const size_t o = add(rng, size_t(rows / 16) * (cols / 16) *
                                      w.wordsPerTile());
        tensorOff[e * 3 + p] = int64_t(o);
        for (int h = 0; h < 16; ++h)
          off[(e * 3 + p) * 16 + h] =
              int64_t(o) + (p < 2 ? int64_t(8 * h) : int64_t(8 * h) * (H / 16)) *
                               w.bytesPerTile();
      } else {
        for (int h = 0; h < 16; ++h) {
          const trellis::Width w =
              trellis::Width::bits(widths[(e * 3 + p) * 16 + h]);
          off[(e * 3 + p) * 16 + h] =
              int64_t(add(rng, size_t(H / 16) * 8 * w.wordsPerTile()));
        }
      }
    }
  }
  const uint16_t *words(int64_t o) const {
    return reinterpret_cast<const uint16_t *>(blob.data() + o);
  }
  /// Decoded half: gate/up [H][128], down [128][H] (in x out), as floats.
  std::vector<float> half(int e, int p, int h) const {
    const trellis::Width w = trellis::Width::bits(widths[(e * 3 + p) * 16 + h]);
    const auto c = static_cast<trellis::Codebook>(cb);
    std::vector<float> q(size_t(H) * 128);
    if (!exl3) {
      const int64_t o = off[(e * 3 + p) * 16 + h];
      if (p < 2)
        trellis::decodeMatrix(words(o), H, 128, w, c, e4m3,
                              trellis::TileOrder::RowMajor, q.data());
      else
        trellis::decodeMatrix(words(o), 128, H, w, c, e4m3,
                              trellis::TileOrder::InMajor128, q.data());
      return q;
    }
    const int64_t rows = p < 2 ? H : I, cols = p < 2 ? I : H;
    if (cacheE[p] != e) { // EXL3: decode the whole tensor once
      cache[p].assign(size_t(rows) * cols, 0.0f);
      trellis::decodeMatrix(words(tensorOff[e * 3 + p]), rows, cols, w, c,
                            e4m3, trellis::TileOrder::RowMajor,
                            cache[p].data());
      cacheE[p] = e;
    }
    const std::vector<float> &full = cache[p];
    if (p < 2) {
      for (int i = 0; i < H; ++i)
        std::copy_n(&full[size_t(i) * I + 128 * h], 128, &q[size_t(i) * 128]);
    } else {
      std::copy_n(&full[size_t(128 * h) * H], size_t(128) * H, q.data());
    }
    return q;
  }
};

// ----------------------------------------------------------- decode ----

struct DecodeCase {
  int cb;
  bool e4m3;
  int pipe;
  int threads = 128; // 256 + E4M3: the shared-memory table decode
};

class MoeTrellisDecodeGpu : public ::testing::TestWithParam<DecodeCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

std::vector<DecodeCase> decodeCases() {
  std::vector<DecodeCase> v;
  for (int cb = 0; cb < 3; ++cb)
    for (bool e : {false, true})
      v.push_back({cb, e, cb == 1 ? 4 : 0});
  v.push_back({1, true, 0});
  // E4M3 byte table (moeTrellisDynSmem) for every codebook, both row
  // streams; MCG without E4M3 at 256 threads keeps the ALU decode.
  for (int cb = 0; cb < 3; ++cb)
    v.push_back({cb, true, 2, 256});
  v.push_back({1, true, 0, 256});
  v.push_back({1, false, 2, 256});
  return v;
}

TEST_P(MoeTrellisDecodeGpu, OneHotRowsEqualCodec) {
  const DecodeCase dc = GetParam();
  {
    std::vector<KernelSpec> all;
    for (const DecodeCase &c : decodeCases())
      all.push_back(
          moeSpec("12345678", c.cb, c.e4m3, 8, 0, 0, c.threads, c.pipe));
    KernelCache::get().prefetch(all);
  }
  const int H = 256, B = 8;
  MoeTrellisDims d;
  d.batch = B, d.topk = 1, d.nRouted = 1, d.nShared = 0, d.hidden = H;
  d.guSplit = H / 16; // one tile row per split: partial s = row of x
  d.threads = dc.threads;
  ASSERT_TRUE(d.valid());
  std::mt19937 rng(77 + dc.cb * 2 + dc.e4m3);
  Weights w;
  w.H = H, w.eTot = 1, w.cb = dc.cb, w.e4m3 = dc.e4m3;
  w.widths.resize(48);
  for (int p = 0; p < 3; ++p)
    for (int h = 0; h < 16; ++h)
      w.widths[p * 16 + h] = uint8_t(1 + (h + p) % 8);
  w.off.assign(48, -1);
  w.generate(rng, 0);
  auto dBlob = upload(w.blob);
  std::vector<uint64_t> tiles(48);
  for (int i = 0; i < 48; ++i)
    tiles[i] = dBlob.ptr() + uint64_t(w.off[i]);
  auto dTiles = upload(tiles);
  auto dWidths = upload(w.widths);
  auto dIds = upload(std::vector<int>(B, 0));
  auto dRw = upload(std::vector<float>(B, 1.0f));
  auto ones = upload(std::vector<float>(size_t(2) * 2048, 1.0f));
  auto dScratch = poisoned<float>(d.scratchFloats());
  auto dCounters = upload(std::vector<int>(d.counterInts(), 0));
  auto dOut = poisoned<float>(size_t(B) * H);
  std::vector<std::vector<float>> q(32);
  for (int p = 0; p < 2; ++p)
    for (int h = 0; h < 16; ++h)
      q[p * 16 + h] = w.half(0, p, h);
  Err err;
  size_t zeroBad = 0;
  const CUfunction f =
      kernel(moeSpec("12345678", dc.cb, dc.e4m3, 8, 0, 0, dc.threads, dc.pipe));
  for (int k0 = 0; k0 < H; k0 += B) {
    std::vector<float> xh(size_t(B) * H, 0.0f);
    for (int b = 0; b < B; ++b)
      xh[size_t(b) * H + k0 + b] = 1.0f;
    auto dXh = upload(xh);
    Args a;
    a.ptr(dXh).ptr(dIds).ptr(dRw).ptr(dTiles).ptr(dWidths).ptr(ones).null();
    a.ptr(ones).null().null().null().ptr(dScratch).ptr(dCounters).ptr(dOut);
    a << B << 1 << 1 << 0 << H << 2048 << H << 0 << 0 << 8 << 64 << 8 << 64
      << d.guSplit << d.downGroup << 0 << 0.0f;
    a.launch(f, d.gridGateUp(), 1, unsigned(dc.threads),
             glm::codegen::moeTrellisDynSmem(dc.e4m3, dc.threads, false));
    // partials [q = b][p][h][s][128]
    auto part = download<float>(dScratch, size_t(B) * 32 * d.guSplit * 128);
    for (int b = 0; b < B; ++b) {
      const int k = k0 + b;
      for (int p = 0; p < 2; ++p)
        for (int h = 0; h < 16; ++h)
          for (int s = 0; s < d.guSplit; ++s) {
            const float *z =
                &part[((size_t(b) * 2 + p) * 16 + h) * d.guSplit * 128 +
                      size_t(s) * 128];
            for (int c = 0; c < 128; ++c) {
              if (s == k / 16)
                err.add(z[c], q[p * 16 + h][size_t(k) * 128 + c]);
              else
                zeroBad += z[c] != 0.0f;
            }
          }
    }
  }
  auto counters = download<int>(dCounters, d.counterInts());
  const std::string name = std::string("moe_trellis_decode_k1-8_") +
                           cbName(dc.cb) + (dc.e4m3 ? "_e4m3" : "") + "_p" +
                           std::to_string(dc.pipe) +
                           (dc.threads != 128
                                ? "_t" + std::to_string(dc.threads)
                                : "");
  report(name, err, 0.0, "one-hot rows vs codec decodeMatrix");
  reportExact(name + " other_chunks_zero", zeroBad, size_t(1));
  reportExact(name + " counters_reset",
              size_t(std::count_if(counters.begin(), counters.end(),
                                   [](int c) { return c != 0; })),
              counters.size());
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeTrellisDecodeGpu,
                         ::testing::ValuesIn(decodeCases()),
                         [](const auto &info) {
                           return std::string(cbName(info.param.cb)) +
                                  (info.param.e4m3 ? "_e4m3" : "") + "_p" +
                                  std::to_string(info.param.pipe) +
                                  (info.param.threads != 128
                                       ? "_t" +
                                             std::to_string(info.param.threads)
                                       : "");
                         });

// ------------------------------------------------------------ layer ----

struct LayerCase {
  std::string name;
  bool exl3;
  std::string widths;
  int cb;
  bool e4m3;
  int batchT, batch;
  int sv;
  int H, E, topk, nShared;
  double owned;
  bool shareRows; // rows pick overlapping experts
  int split, group, threads, pipe;
  int blocks = 0; // > 0: grid of this many blocks (the persistent path)
  std::string sum = "f32"; // stage down's sum (fixed: int64 partials)
  double limit = 0;        // SwiGLU clamp (GLM-5.3-Flash); 0 = none
};

std::vector<LayerCase> layerCases() {
  return {
      {"exlr8_k234_mcg_e4m3_b1", false, "234", 1, true, 1, 1, 1, 1536, 12, 3,
       1, 0.75, false, 16, 4, 128, 4},
      {"exlr8_k234_mcg_e4m3_b8_shared_rows", false, "234", 1, true, 8, 8, 1,
       1536, 6, 3, 1, 0.8, true, 8, 2, 128, 0},
      {"exlr8_k4_mul1_b1_svbf16_t256", false, "4", 2, false, 1, 1, 2, 1536, 12,
       4, 1, 1.0, false, 24, 4, 256, 3},
      {"exlr8_k2_3inst_b5", false, "2", 0, false, 8, 5, 1, 1024, 10, 3, 0,
       1.0, true, 16, 8, 128, 4},
      // Rows 2 and 4 on the 8-row instance, as plans run them
      // (codegen/kernel_batch.h): the second mma column group is idle.
      {"exlr8_k234_mcg_e4m3_b2_on_b8", false, "234", 1, true, 8, 2, 1, 1536,
       12, 3, 1, 0.8, true, 8, 2, 128, 4},
      {"exl3_k234_mcg_b4_on_b8", true, "234", 1, false, 8, 4, 1, 1024, 10,
       3, 1, 0.8, false, 16, 4, 128, 4},
      {"exlr8_k15678_mcg_e4m3_b3", false, "15678", 1, true, 4, 3, 0, 1024, 8,
       2, 1, 0.9, true, 8, 16, 64, 2},
      {"exl3_k3_mcg_b4", true, "3", 1, false, 4, 4, 1, 1024, 8, 3, 1, 0.8,
       true, 16, 4, 128, 4},
      {"exl3_k234_mul1_b8_svf32", true, "234", 2, false, 8, 8, 0, 1024, 10, 2,
       1, 0.7, true, 8, 4, 128, 0},
      {"glm53_k4_mcg_e4m3_b1", false, "4", 1, true, 1, 1, 1, 6144, 256, 8, 1,
       1.0, false, 16, 4, 128, 4},
      {"glm53_k234_mcg_e4m3_b1_tp", false, "234", 1, true, 1, 1, 1, 6144, 256,
       8, 1, 0.5, false, 16, 4, 128, 4},
      // E4M3 byte table in shared memory (256-thread blocks): every
      // codebook, batch groups of 1 and 2 mma columns, both row streams.
      {"table_exlr8_k234_mcg_e4m3_b1_t256", false, "234", 1, true, 1, 1, 1,
       1536, 12, 3, 1, 0.75, false, 16, 2, 256, 4},
      {"table_exlr8_k15678_3inst_e4m3_b1_t256", false, "15678", 0, true, 1, 1,
       0, 1024, 8, 2, 1, 0.9, false, 8, 4, 256, 2},
      {"table_exlr8_k4_mul1_e4m3_b8_shared_rows_t256", false, "4", 2, true, 8,
       8, 1, 1536, 6, 3, 1, 0.8, true, 8, 2, 256, 0},
      {"table_glm53_k234_mcg_e4m3_b1_tp_t256", false, "234", 1, true, 1, 1, 1,
       6144, 256, 8, 1, 0.5, false, 24, 2, 256, 4},
      // Persistent path: grids below one item per warp, so warps stream
      // item ranges that cross segments, units and widths.
      {"persist_exlr8_k234_mcg_e4m3_b1_g5", false, "234", 1, true, 1, 1, 1,
       1536, 12, 3, 1, 0.75, false, 16, 1, 128, 4, 5},
      {"persist_exlr8_k234_mcg_e4m3_b8_shared_rows_g7", false, "234", 1, true,
       8, 8, 1, 1536, 6, 3, 1, 0.8, true, 8, 1, 128, 3, 7},
      {"persist_exlr8_k15678_mcg_e4m3_b3_t64_g4", false, "15678", 1, true, 4,
       3, 0, 1024, 8, 2, 1, 0.9, true, 8, 1, 64, 2, 4},
      {"persist_exl3_k3_mcg_b4_g9", true, "3", 1, false, 4, 4, 1, 1024, 8, 3,
       1, 0.8, true, 16, 1, 128, 4, 9},
      {"persist_exl3_k234_mul1_b8_svf32_g3", true, "234", 2, false, 8, 8, 0,
       1024, 10, 2, 1, 0.7, true, 8, 1, 128, 2, 3},
      {"persist_glm53_k4_mcg_e4m3_b1_g528", false, "4", 1, true, 1, 1, 1, 6144,
       256, 8, 1, 1.0, false, 48, 1, 128, 4, 528},
      {"persist_glm53_k234_mcg_e4m3_b1_tp_g264", false, "234", 1, true, 1, 1,
       1, 6144, 256, 8, 1, 0.5, false, 48, 1, 128, 4, 264},
      // GLM-5.3-Flash's SwiGLU clamp (limit 2 bites on many channels):
      // Flash's expert shape (hidden 4096) on the full grid, an EXL3 layer
      // and the persistent path.
      {"clamp_flash_k234_mcg_e4m3_b1_tp", false, "234", 1, true, 1, 1, 1,
       4096, 32, 8, 1, 0.5, false, 16, 2, 128, 4, 0, "f32", 2.0},
      {"clamp_exl3_k3_mul1_b4", true, "3", 2, false, 4, 4, 1, 1024, 8, 3, 1,
       0.8, true, 16, 4, 128, 4, 0, "f32", 2.0},
      {"clamp_persist_exlr8_k234_mcg_e4m3_b8_g7", false, "234", 1, true, 8, 8,
       1, 1536, 6, 3, 1, 0.8, true, 8, 1, 128, 3, 7, "f32", 2.0},
      // No half of the chosen experts on this rank: out must still be 0.
      {"persist_exlr8_k2_none_owned_b2_g5", false, "2", 1, true, 2, 2, 1,
       1536, 12, 3, 1, 0.0, false, 16, 1, 128, 4, 5},
      // Fixed-point down sums (templates/fixed_point.cuh): int64 partials
      // and tail, the same numbers within the fp32 cases' tolerances.
      {"fixed_exlr8_k234_mcg_e4m3_b1_tp", false, "234", 1, true, 1, 1, 1,
       1536, 12, 3, 1, 0.75, false, 16, 2, 128, 4, 0, "fixed"},
      {"fixed_exl3_k234_mcg_b4_on_b8", true, "234", 1, false, 8, 4, 1, 1024,
       10, 3, 1, 0.8, false, 16, 2, 128, 4, 0, "fixed"},
      {"fixed_persist_exlr8_k234_mcg_e4m3_b8_g7", false, "234", 1, true, 8,
       8, 1, 1536, 6, 3, 1, 0.8, true, 8, 1, 128, 3, 7, "fixed"},
      {"fixed_glm53_k234_mcg_e4m3_b1_tp", false, "234", 1, true, 1, 1, 1,
       6144, 256, 8, 1, 0.5, false, 24, 2, 128, 4, 0, "fixed"},
  };
}

class MoeTrellisLayerGpu : public ::testing::TestWithParam<LayerCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

double silu(double x) { return x / (1.0 + std::exp(-x)); }

TEST_P(MoeTrellisLayerGpu, MatchesFloat64Layer) {
  const LayerCase c = GetParam();
  {
    std::vector<KernelSpec> all;
    for (const LayerCase &x : layerCases())
      for (int st = 0; st < 2; ++st)
        all.push_back(moeSpec(x.widths, x.cb, x.e4m3, x.batchT, x.sv, st,
                              x.threads, x.pipe, x.blocks > 0, x.sum));
    KernelCache::get().prefetch(all);
  }
  const int H = c.H, I = 2048, E = c.E, nS = c.nShared, eTot = E + nS,
            B = c.batch, topk = c.topk, nBlk = H / 128, nSlot = topk + nS;
  MoeTrellisDims d;
  d.batch = B, d.topk = topk, d.nRouted = E, d.nShared = nS, d.hidden = H;
  d.guSplit = c.split, d.downGroup = c.group, d.threads = c.threads;
  d.persistBlocks = c.blocks;
  d.sum = c.sum != "f32";
  ASSERT_TRUE(d.valid()) << c.name;
  if (c.blocks > 0) { // both launches must take the persistent path
    MoeTrellisDims full = d;
    full.persistBlocks = 0;
    ASSERT_LT(d.gridGateUp(), full.gridGateUp()) << c.name;
    ASSERT_LT(d.gridDown(), full.gridDown()) << c.name;
  }
  std::mt19937 rng(std::hash<std::string>()(c.name) & 0xFFFFFFF);
  std::uniform_real_distribution<float> uni(0.5f, 1.5f);
  auto sgnScale = [&](int dt) {
    return roundTo(dt, uni(rng) * ((rng() & 1) ? -1.0f : 1.0f));
  };

  // Routing: distinct experts per row; rows may share experts.
  std::vector<int> ids(size_t(B) * topk);
  std::vector<float> rw(size_t(B) * topk);
  const int pool = c.shareRows ? std::min(E, topk + 2) : E;
  for (int b = 0; b < B; ++b) {
    std::vector<int> perm(pool);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int k = 0; k < topk; ++k) {
      ids[b * topk + k] = c.shareRows ? perm[k] : perm[k] * (E / pool);
      rw[b * topk + k] = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng);
    }
  }
  if (!c.shareRows && B == 1) // spread over the expert range
    for (int k = 0; k < topk; ++k)
      ids[k] = (ids[k] * 37 + 11) % E;
  {
    std::set<int> s(ids.begin(), ids.begin() + topk);
    ASSERT_EQ(int(s.size()), topk) << "rows must not repeat an expert";
  }
  std::set<int> used(ids.begin(), ids.end());
  for (int j = 0; j < nS; ++j)
    used.insert(E + j);

  std::vector<int> allowed;
  for (char ch : c.widths)
    allowed.push_back(ch - '0');
  auto pickK = [&] { return allowed[rng() % allowed.size()]; };
  Weights w;
  w.exl3 = c.exl3, w.H = H, w.eTot = eTot, w.cb = c.cb, w.e4m3 = c.e4m3;
  w.widths.assign(size_t(eTot) * 48, uint8_t(allowed[0]));
  w.off.assign(size_t(eTot) * 48, -1);
  w.tensorOff.assign(size_t(eTot) * 3, -1);
  std::vector<char> owned(size_t(eTot) * 16, 0);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int e : used) {
    for (int p = 0; p < 3; ++p) {
      const int perTensor = pickK();
      for (int h = 0; h < 16; ++h)
        w.widths[(e * 3 + p) * 16 + h] =
            uint8_t(c.exl3 || p == 2 ? perTensor : pickK());
    }
    w.generate(rng, e);
    for (int h = 0; h < 16; ++h)
      owned[e * 16 + h] = u01(rng) < c.owned;
  }

  // Side vectors (values as stored).
  std::vector<float> guSvh(size_t(2) * eTot * I), dSuh(size_t(eTot) * I);
  for (auto &v : guSvh)
    v = sgnScale(c.sv);
  for (auto &v : dSuh)
    v = sgnScale(c.sv);
  std::vector<float> guSu, dSvB, dSvh, signsIn(H), signsOut(H), suhExl3;
  if (c.exl3) {
    dSvh.resize(size_t(eTot) * H);
    for (auto &v : dSvh)
      v = sgnScale(c.sv);
    suhExl3.resize(size_t(2) * eTot * H);
    for (auto &v : suhExl3)
      v = sgnScale(1);
  } else {
    guSu.resize(size_t(2) * eTot * nBlk);
    dSvB.resize(size_t(eTot) * nBlk);
    for (auto &v : guSu)
      v = roundTo(c.sv, uni(rng));
    for (auto &v : dSvB)
      v = roundTo(c.sv, uni(rng));
    for (auto &v : signsIn)
      v = (rng() & 1) ? -1.0f : 1.0f;
    for (auto &v : signsOut)
      v = (rng() & 1) ? -1.0f : 1.0f;
  }
  std::vector<float> x = randn(rng, size_t(B) * H);

  // Kernel input xh: exlr8 H(x * signs.in) per row; EXL3 H(x * suh) per
  // (row, slot, projection), the shared expert j at slot topk + j.
  std::vector<float> xh;
  int xhRow, xhSlot, xhProj;
  auto slotExpert = [&](int b, int k) {
    return k < topk ? ids[b * topk + k] : E + (k - topk);
  };
  if (c.exl3) {
    xhProj = H, xhSlot = 2 * H, xhRow = nSlot * 2 * H;
    xh.assign(size_t(B) * xhRow, 0.0f);
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < nSlot; ++k)
        for (int p = 0; p < 2; ++p) {
          const int e = slotExpert(b, k);
          std::vector<double> t(H);
          for (int i = 0; i < H; ++i)
            t[i] = double(x[size_t(b) * H + i]) *
                   suhExl3[(size_t(p) * eTot + e) * H + i];
          hadamard128(t.data(), H);
          for (int i = 0; i < H; ++i)
            xh[size_t(b) * xhRow + k * xhSlot + p * xhProj + i] = float(t[i]);
        }
  } else {
    xhProj = 0, xhSlot = 0, xhRow = H;
    xh.resize(size_t(B) * H);
    for (int b = 0; b < B; ++b) {
      std::vector<double> t(H);
      for (int i = 0; i < H; ++i)
        t[i] = double(x[size_t(b) * H + i]) * signsIn[i];
      hadamard128(t.data(), H);
      for (int i = 0; i < H; ++i)
        xh[size_t(b) * H + i] = float(t[i]);
    }
  }

  // float64 reference, one expert at a time (decoded halves are large).
  std::vector<double> ref(size_t(B) * H, 0.0);
  for (int e : used) {
    std::vector<std::pair<int, int>> uses; // (b, k)
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < nSlot; ++k)
        if (slotExpert(b, k) == e)
          uses.emplace_back(b, k);
    for (int h = 0; h < 16; ++h) {
      if (!owned[e * 16 + h])
        continue;
      const std::vector<float> qg = w.half(e, 0, h);
      const std::vector<float> qu = w.half(e, 1, h);
      const std::vector<float> qd = w.half(e, 2, h);
      for (auto [b, k] : uses) {
        const double rwt = k < topk ? rw[b * topk + k] : 1.0;
        double gu[2][128];
        for (int p = 0; p < 2; ++p) {
          const std::vector<float> &q = p == 0 ? qg : qu;
          std::fill_n(gu[p], 128, 0.0);
          for (int i = 0; i < H; ++i) {
            double xi = c.exl3 ? xh[size_t(b) * xhRow + k * xhSlot +
                                    p * xhProj + i]
                               : double(xh[size_t(b) * H + i]) *
                                     guSu[(size_t(p) * eTot + e) * nBlk +
                                          i / 128];
            const float *row = &q[size_t(i) * 128];
            for (int j = 0; j < 128; ++j)
              gu[p][j] += xi * row[j];
          }
          hadamard128(gu[p], 128);
          for (int j = 0; j < 128; ++j)
            gu[p][j] *= guSvh[(size_t(p) * eTot + e) * I + 128 * h + j];
        }
        if (c.limit > 0)
          for (int j = 0; j < 128; ++j) {
            gu[0][j] = std::min(gu[0][j], c.limit);
            gu[1][j] = std::clamp(gu[1][j], -c.limit, c.limit);
          }
        double a[128];
        for (int j = 0; j < 128; ++j)
          a[j] = silu(gu[0][j]) * gu[1][j] * dSuh[size_t(e) * I + 128 * h + j];
        hadamard128(a, 128);
        std::vector<double> z(H, 0.0);
        for (int r = 0; r < 128; ++r) {
          const float *row = &qd[size_t(r) * H];
          for (int o = 0; o < H; ++o)
            z[o] += a[r] * row[o];
        }
        if (c.exl3) {
          hadamard128(z.data(), H);
          for (int o = 0; o < H; ++o)
            ref[size_t(b) * H + o] += z[o] * dSvh[size_t(e) * H + o] * rwt;
        } else {
          for (int o = 0; o < H; ++o)
            ref[size_t(b) * H + o] +=
                z[o] * dSvB[size_t(e) * nBlk + o / 128] * rwt;
        }
      }
    }
  }
  if (!c.exl3)
    for (int b = 0; b < B; ++b) {
      hadamard128(&ref[size_t(b) * H], H);
      for (int o = 0; o < H; ++o)
        ref[size_t(b) * H + o] *= signsOut[o];
    }

  // Device run.
  auto dBlob = upload(w.blob);
  std::vector<uint64_t> tiles(size_t(eTot) * 48, 0);
  for (int e = 0; e < eTot; ++e)
    for (int p = 0; p < 3; ++p)
      for (int h = 0; h < 16; ++h)
        if (owned[e * 16 + h] && w.off[(e * 3 + p) * 16 + h] >= 0)
          tiles[(e * 3 + p) * 16 + h] =
              dBlob.ptr() + uint64_t(w.off[(e * 3 + p) * 16 + h]);
  auto dTiles = upload(tiles);
  auto dWidths = upload(w.widths);
  auto dXh = upload(xh);
  auto dIds = upload(ids);
  auto dRw = upload(rw);
  auto dGuSvh = upload(storeAs(c.sv, guSvh));
  auto dDSuh = upload(storeAs(c.sv, dSuh));
  auto dGuSu = upload(storeAs(c.sv, guSu));
  auto dDSvB = upload(storeAs(c.sv, dSvB));
  auto dDSvh = upload(storeAs(c.sv, dSvh));
  auto dSignsOut = upload(signsOut);
  auto dScratch = poisoned<float>(d.scratchFloats());
  auto dCounters = upload(std::vector<int>(d.counterInts(), 0));
  auto dOut = poisoned<float>(size_t(B) * H);
  const int guSI = c.exl3 ? I / 16 : 8, guSI8 = c.exl3 ? I / 2 : 64;
  const int dSI = c.exl3 ? H / 16 : 8, dSJ8 = c.exl3 ? 8 : 64;
  auto run = [&](int accumulate, bool fullGrid = false) {
    MoeTrellisDims g = d;
    if (fullGrid)
      g.persistBlocks = 0;
    for (int st = 0; st < 2; ++st) {
      Args a;
      a.ptr(dXh).ptr(dIds).ptr(dRw).ptr(dTiles).ptr(dWidths).ptr(dGuSvh);
      if (c.exl3)
        a.null();
      else
        a.ptr(dGuSu);
      a.ptr(dDSuh);
      if (c.exl3)
        a.null().ptr(dDSvh).null();
      else
        a.ptr(dDSvB).null().ptr(dSignsOut);
      a.ptr(dScratch).ptr(dCounters).ptr(dOut)
          << B << topk << E << nS << H << I << xhRow << xhSlot << xhProj
          << guSI << guSI8 << dSI << dSJ8 << d.guSplit << d.downGroup
          << accumulate << float(c.limit);
      a.launch(kernel(moeSpec(c.widths, c.cb, c.e4m3, c.batchT, c.sv, st,
                              c.threads, c.pipe, c.blocks > 0, c.sum)),
               st == 0 ? g.gridGateUp() : g.gridDown(), 1,
               unsigned(c.threads),
               glm::codegen::moeTrellisDynSmem(c.e4m3, c.threads,
                                               c.blocks > 0));
    }
    return download<float>(dOut, size_t(B) * H);
  };
  const std::vector<float> out1 = run(0);
  Err err;
  for (size_t i = 0; i < out1.size(); ++i)
    err.add(out1[i], ref[i]);
  report("moe_trellis " + c.name, err, 1e-4,
         "fp16 hi+lo activations, fp32 accumulation vs float64");
  {
    // The twin (runtime/twins/moe_trellis_twin.cpp) of the same two
    // launches on the host copies: it differs only in how each warp item's
    // exact products are summed (fp64 vs the tensor cores' fp32).
    std::vector<const unsigned char *> hTiles(tiles.size(), nullptr);
    for (size_t i = 0; i < tiles.size(); ++i)
      if (tiles[i])
        hTiles[i] = w.blob.data() + (tiles[i] - dBlob.ptr());
    const std::vector<uint8_t> hGuSvh = storeAs(c.sv, guSvh),
                               hDSuh = storeAs(c.sv, dSuh),
                               hGuSu = storeAs(c.sv, guSu),
                               hDSvB = storeAs(c.sv, dSvB),
                               hDSvh = storeAs(c.sv, dSvh);
    std::vector<float> tScratch(d.scratchFloats(), NAN);
    std::vector<int> tCounters(d.counterInts(), 0);
    std::vector<float> tOut(size_t(B) * H, NAN);
    for (int st = 0; st < 2; ++st)
      runTwin(moeSpec(c.widths, c.cb, c.e4m3, c.batchT, c.sv, st, c.threads,
                      c.pipe, c.blocks > 0, c.sum),
              st == 0 ? d.gridGateUp() : d.gridDown(), 1, unsigned(c.threads),
              glm::codegen::moeTrellisDynSmem(c.e4m3, c.threads, c.blocks > 0),
              {hp(xh.data()),
               hp(ids.data()),
               hp(rw.data()),
               hp(hTiles.data()),
               hp(w.widths.data()),
               hp(hGuSvh.data()),
               hp(c.exl3 ? nullptr : hGuSu.data()),
               hp(hDSuh.data()),
               hp(c.exl3 ? nullptr : hDSvB.data()),
               hp(c.exl3 ? hDSvh.data() : nullptr),
               hp(c.exl3 ? nullptr : signsOut.data()),
               hp(tScratch.data()),
               hp(tCounters.data()),
               hp(tOut.data()),
               hi(B),
               hi(topk),
               hi(E),
               hi(nS),
               hi(H),
               hi(I),
               hi(xhRow),
               hi(xhSlot),
               hi(xhProj),
               hi(guSI),
               hi(guSI8),
               hi(dSI),
               hi(dSJ8),
               hi(d.guSplit),
               hi(d.downGroup),
               hi(0),
               hf(c.limit)});
    report("moe_trellis " + c.name + " vs_twin", vsTwin(out1, tOut), 2e-5,
           "fp32 mma sums of the twin's exact products");
  }
  const std::vector<float> out2 = run(0);
  size_t diff = 0;
  for (size_t i = 0; i < out1.size(); ++i)
    diff += std::memcmp(&out1[i], &out2[i], 4) != 0;
  reportExact("moe_trellis " + c.name + " rerun_bit_identical", diff,
              out1.size());
  if (c.blocks > 0) {
    // Same slots and reduction order as one item per warp: identical bits
    // (up to the sign of a zero: the full grid also adds the zero partials
    // of halves the rank does not own).
    const std::vector<float> outF = run(0, true);
    diff = 0;
    for (size_t i = 0; i < out1.size(); ++i)
      diff += out1[i] != outF[i] ||
              (out1[i] != 0.0f && std::memcmp(&out1[i], &outF[i], 4) != 0);
    reportExact("moe_trellis " + c.name + " equals_full_grid", diff,
                out1.size());
  }
  const std::vector<float> out3 = run(1);
  diff = 0;
  for (size_t i = 0; i < out1.size(); ++i)
    diff += out3[i] != out1[i] + out1[i];
  reportExact("moe_trellis " + c.name + " accumulate_exact", diff,
              out1.size());
  auto counters = download<int>(dCounters, d.counterInts());
  reportExact("moe_trellis " + c.name + " counters_reset",
              size_t(std::count_if(counters.begin(), counters.end(),
                                   [](int v) { return v != 0; })),
              counters.size());
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeTrellisLayerGpu,
                         ::testing::ValuesIn(layerCases()),
                         [](const auto &info) { return info.param.name; });

} // namespace
