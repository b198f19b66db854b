//===- footprint_test.cpp - every family's footprint, as its template ----===//
//
// Every codegen family has a footprint (as every family has a twin), its
// parameter kinds are those of the family's PARAMS macro, and footprints
// refuse the integers a damaged plan could carry. Whether a footprint is
// large enough for what its twin touches is tested on compiled plans
// (tests/unit/compiler/launch_bounds_test.cpp). FootprintTables: the
// entries of plan tables each footprint checks, on hand-built tables
// (gemm_trellis_grouped, vocab_gather, expert_gemv_trellis, moe_reduce,
// moe_group and the expert id tables appear in no compiled test plan).
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "codegen/templates/flash_math.cuh"
#include "codegen/templates/indexer_scores_mma.cuh"
#include "runtime/twins/footprint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <sstream>

namespace twins = glm::rt::twins;

namespace {

/// 'p' / 'i' / 'l' / 'f' / 'd' per parameter of a PARAMS macro body.
std::string kinds(const std::string &body) {
  std::string sig;
  std::stringstream ss(body);
  std::string p;
  while (std::getline(ss, p, ',')) {
    const size_t b = p.find_first_not_of(" \t");
    p = b == std::string::npos ? "" : p.substr(b);
    if (p.find('*') != std::string::npos)
      sig += 'p';
    else if (p.rfind("double", 0) == 0)
      sig += 'd';
    else if (p.rfind("float", 0) == 0)
      sig += 'f';
    else if (p.find("long long") != std::string::npos)
      sig += 'l';
    else
      sig += 'i';
  }
  return sig;
}

TEST(Footprint, EveryFamilyHasOneWithItsTemplatesParameterKinds) {
  const auto &templates = glm::codegen::embeddedTemplates();
  for (const glm::codegen::FamilyInfo &f : glm::codegen::families()) {
    const twins::FootprintEntry *e = twins::findFootprint(f.family);
    ASSERT_NE(e, nullptr) << f.family << " has no footprint";
    const std::string body =
        glm::codegen::macroBody(templates.at(f.header), f.paramsMacro);
    EXPECT_EQ(e->signature, kinds(body)) << f.family << ": " << body;
    EXPECT_EQ(std::strlen(e->signature), f.kernelParams.size()) << f.family;
  }
  // And no footprint of a family codegen does not know.
  for (const twins::FootprintEntry *table :
       {twins::kCodegenFootprints, twins::kHelperFootprints})
    for (const twins::FootprintEntry *e = table; e->family; ++e) {
      EXPECT_NO_THROW(glm::codegen::familyInfo(e->family)) << e->family;
      EXPECT_NE(twins::findTwin(e->family), nullptr) << e->family;
    }
}

/// A launch of `family` with `ints` at the given parameters, other
/// pointers non-null.
twins::Launch launchOf(const std::string &family, uint32_t gx, uint32_t gy,
                       uint32_t block,
                       std::vector<std::pair<size_t, int64_t>> ints,
                       const glm::plan::KeyValues *targs = nullptr) {
  const twins::FootprintEntry *e = twins::findFootprint(family);
  twins::Launch l;
  l.family = family;
  l.templateArgs = targs;
  l.grid[0] = gx, l.grid[1] = gy, l.block[0] = block;
  l.args.resize(std::strlen(e->signature));
  for (size_t i = 0; i < l.args.size(); ++i)
    if (e->signature[i] == 'p')
      l.args[i].p = reinterpret_cast<void *>(uintptr_t(256));
  for (auto [k, v] : ints)
    l.args[k].i = v;
  return l;
}

twins::Footprint of(const twins::Launch &l) {
  return twins::footprintOf(*twins::findFootprint(l.family), l);
}

TEST(Footprint, RmsNormRowsCoversItsRows) {
  // (x, w, y, n, eps, xs, ys), 3 rows of 100 elements 128 apart.
  const twins::Footprint f =
      of(launchOf("rms_norm_rows", 1, 3, 256, {{3, 100}, {5, 128}, {6, 100}}));
  EXPECT_EQ(f.bytes[0], (2 * 128 + 100) * 4u);
  EXPECT_EQ(f.bytes[1], 100 * 4u);
  EXPECT_EQ(f.bytes[2], 300 * 4u);
  EXPECT_FALSE(f.nullable[0]);
}

TEST(Footprint, NegativeSizeNamesItsArgument) {
  try {
    of(launchOf("rms_norm_rows", 1, 3, 256, {{3, -1}, {5, 128}, {6, 100}}));
    FAIL() << "accepted n = -1";
  } catch (const twins::BadLaunchArg &b) {
    EXPECT_EQ(b.arg, 3u);
    EXPECT_NE(std::string(b.what()).find("at least 0"), std::string::npos);
  }
}

TEST(Footprint, SizesDoNotWrapAround) {
  // transpose(src, dst, rows, cols): 2^40 x 2^30 floats is no buffer.
  EXPECT_THROW(of(launchOf("transpose", 1u << 31, 1, 1024,
                           {{2, int64_t(1) << 40}, {3, 1 << 30}})),
               twins::BadLaunchArg);
}

TEST(Footprint, OptionalScaleFollowsItsKind) {
  // gemv_any(x, xs, w, dt, scale, sk, y, ys, in, out): bf16 without a
  // scale, E4M3 with row scales.
  twins::Launch l =
      launchOf("gemv_any", 4, 1, 256,
               {{1, 64}, {3, 2}, {5, 0}, {7, 32}, {8, 64}, {9, 32}});
  twins::Footprint f = of(l);
  EXPECT_EQ(f.bytes[2], 32u * 64 * 2);
  EXPECT_TRUE(f.nullable[4]);
  l.args[3].i = 3, l.args[5].i = 2;
  f = of(l);
  EXPECT_EQ(f.bytes[2], 32u * 64);
  EXPECT_EQ(f.bytes[4], 32u * 4);
  EXPECT_FALSE(f.nullable[4]);
  l.args[3].i = 7; // no storage code 7
  EXPECT_THROW(of(l), twins::BadLaunchArg);
}

TEST(Footprint, DenseTrellisRefusesWhatTheKernelTrapsOn) {
  const glm::plan::KeyValues t = {
      {"K", "3"},    {"codebook", "mcg"}, {"e4m3", "0"},     {"batch", "1"},
      {"pipe", "0"}, {"minblocks", "0"},  {"threads", "128"}};
  // (xh, tiles, svh, scratch, counters, y, batch, in, out, y_stride,
  //  out_valid, sI, sI8, sJ8, split): split 6 over 4 warps.
  twins::Launch l = launchOf("dense_trellis", 4, 1, 128,
                             {{6, 1},
                              {7, 256},
                              {8, 256},
                              {9, 256},
                              {10, 256},
                              {11, 8},
                              {12, 64},
                              {13, 8},
                              {14, 6}},
                             &t);
  EXPECT_THROW(of(l), twins::BadLaunchArg);
  l.args[14].i = 8;
  const twins::Footprint f = of(l);
  // 16 tile rows x 16 tile columns of 32*K bytes under these strides.
  EXPECT_EQ(f.bytes[1], uint64_t(64 + 7 * 8 + 8 + 7 + 1) * 32 * 3);
}

TEST(Footprint, GemmDenseCoversItsTilesAndRefusesRaggedInputs) {
  // (x, w, scale, y, batch, in, out, out_stride, accumulate): 37 tokens of
  // 256 inputs to kv_a's 576 outputs, bm 64 x 128 columns (threads 128).
  const glm::plan::KeyValues t = {{"format", "mxfp8"},
                                  {"scale", "none"},
                                  {"bm", "64"},
                                  {"threads", "128"}};
  twins::Launch l = launchOf("gemm_dense", 5, 1, 128,
                             {{4, 37}, {5, 256}, {6, 576}, {7, 600}, {8, 0}},
                             &t);
  twins::Footprint f = of(l);
  EXPECT_EQ(f.bytes[0], 37u * 256 * 4);
  EXPECT_EQ(f.bytes[1], 576u * 256);
  EXPECT_EQ(f.bytes[2], 576u * 256 / 32);
  EXPECT_EQ(f.bytes[3], (36u * 600 + 576) * 4);
  // Block-128 scales of the column blocks the grid covers (2 of 5 blocks:
  // 256 columns, two 128-blocks), bf16.
  const glm::plan::KeyValues tb = {{"format", "fp8_block"},
                                   {"scale", "bf16"},
                                   {"bm", "128"},
                                   {"threads", "256"}};
  l.templateArgs = &tb;
  l.grid[0] = 2, l.block[0] = 256;
  f = of(l);
  EXPECT_EQ(f.bytes[1], 256u * 256);
  EXPECT_EQ(f.bytes[2], 2u * 2 * 2);
  // BF16: two bytes a weight, no scale (the plan passes null).
  const glm::plan::KeyValues th = {{"format", "bf16"},
                                   {"scale", "none"},
                                   {"bm", "128"},
                                   {"threads", "256"}};
  l.templateArgs = &th;
  f = of(l);
  EXPECT_EQ(f.bytes[1], 256u * 256 * 2);
  EXPECT_EQ(f.bytes[2], 0u);
  EXPECT_TRUE(f.nullable[2]);
  l.templateArgs = &tb;
  l.args[5].i = 192; // in not a multiple of 128: refused
  EXPECT_THROW(of(l), twins::BadLaunchArg);
  l.args[5].i = 0;
  EXPECT_THROW(of(l), twins::BadLaunchArg);
}

TEST(Footprint, KdaChunkRefusesWhatTheKernelTrapsOn) {
  const glm::plan::KeyValues t = {
      {"chunk", "32"}, {"mma", "tf32"}, {"threads", "256"}};
  // (q, k, v, g, beta, gate, gs, oNorm, wdt, state, seq, pos, out, T, dk,
  //  dv, eps, os): 64 heads of 128 x 128, T = 100, the kernel's shared
  //  memory, packed output rows.
  const int n = 64, T = 100, dk = 128, dv = 128;
  twins::Launch l = launchOf(
      "kda_chunk", n, 1, 256,
      {{6, n * dv}, {8, 0}, {13, T}, {14, dk}, {15, dv}, {17, n * dv}}, &t);
  l.smemBytes = 4u * (unsigned)glm::fm::kdaChunkSmemFloats(32, dk, dv);
  const twins::Footprint f = of(l);
  EXPECT_EQ(f.bytes[0], uint64_t(T) * n * dk * 4);
  EXPECT_EQ(f.bytes[9], uint64_t(n) * dk * dv * 4);
  EXPECT_TRUE(f.indexed[9]);
  EXPECT_TRUE(f.nullable[11]);
  EXPECT_EQ(f.bytes[12], uint64_t(T) * n * dv * 4);
  // A rank's heads inside full-width rows of twice the heads: the last row
  // ends after its n · dv.
  l.args[17].i = 2 * n * dv;
  EXPECT_EQ(of(l).bytes[12], (uint64_t(T - 1) * 2 * n * dv + n * dv) * 4);
  l.args[17].i = n * dv - 1; // rows overlapping: refused
  EXPECT_THROW(of(l), twins::BadLaunchArg);
  l.args[17].i = n * dv;
  l.smemBytes -= 4; // less shared memory than the kernel needs: it traps
  EXPECT_THROW(of(l), twins::BadLaunchArg);
  l.smemBytes += 4;
  l.args[14].i = 100; // dk not a multiple of 8
  EXPECT_THROW(of(l), twins::BadLaunchArg);
  l.args[14].i = dk;
  l.args[15].i = 144; // more v columns than 8 warps of 16
  EXPECT_THROW(of(l), twins::BadLaunchArg);
  l.args[15].i = dv;
  // vsplit 2: two blocks a head, each with half the v columns' memory.
  const glm::plan::KeyValues t2 = {
      {"chunk", "32"}, {"mma", "tf32"}, {"vsplit", "2"}, {"threads", "128"}};
  l.templateArgs = &t2;
  l.block[0] = 128;
  EXPECT_THROW(of(l), twins::BadLaunchArg); // grid.y is not 2
  l.grid[1] = 2;
  l.smemBytes = 4u * (unsigned)glm::fm::kdaChunkSmemFloats(32, dk, dv / 2);
  EXPECT_EQ(of(l).bytes[12], uint64_t(T) * n * dv * 4);
  l.smemBytes -= 4;
  EXPECT_THROW(of(l), twins::BadLaunchArg);
}

TEST(Footprint, IndexerScoresMmaRefusesWhatTheKernelSkips) {
  // indexer_scores_ctx's arguments (qi, keys, wts, score, seq, pos, nh, hd,
  // maxCtx, headScale, dotScale): 37 rows of 32 heads x 128 over 1000
  // keys, f32 keys, grid (4, 37), the kernel's shared memory.
  const glm::plan::KeyValues t = {{"threads", "256"}};
  const int B = 37, nh = 32, hd = 128, ctx = 1000;
  twins::Launch l = launchOf("indexer_scores_mma", 4, B, 256,
                             {{6, nh}, {7, hd}, {8, ctx}}, &t);
  l.args[11].p = nullptr; // unpaged
  l.smemBytes = glm::indexerMmaSmemBytes(glm::kv::kF32, 256);
  const twins::Footprint f = of(l);
  EXPECT_EQ(f.bytes[0], uint64_t(B) * nh * hd * 4); // as indexer_scores_ctx
  EXPECT_EQ(f.bytes[3], uint64_t(B) * ctx * 8);
  l.smemBytes -= 4; // under the kernel's key tiles
  EXPECT_THROW(of(l), twins::BadLaunchArg);
  l.smemBytes += 4;
  l.args[6].i = 12; // not a power of two: the kernel would write nothing
  EXPECT_THROW(of(l), twins::BadLaunchArg);
  l.args[6].i = nh;
  l.args[7].i = 96 + 64; // over 128 dims
  EXPECT_THROW(of(l), twins::BadLaunchArg);
  // e4m3 keys need one plane of fp16 keys, not two.
  const glm::plan::KeyValues t8 = {{"kv", "e4m3"}, {"threads", "256"}};
  l.templateArgs = &t8;
  l.args[7].i = hd;
  l.smemBytes = glm::indexerMmaSmemBytes(glm::kv::kE4m3, 256);
  EXPECT_LT(l.smemBytes, glm::indexerMmaSmemBytes(glm::kv::kF32, 256));
  EXPECT_EQ(of(l).bytes[3], uint64_t(B) * ctx * 8);
}

TEST(Footprint, KdaGnormCoversItsRowsHeads) {
  // (o, gate, gs, oNorm, wdt, out, n, dv, eps): 6 heads of 64, 4 warps a
  // block, grid (2, 10): 10 rows.
  twins::Launch l = launchOf("kda_gnorm", 2, 10, 128,
                             {{2, 6 * 64 + 3}, {4, 2}, {6, 6}, {7, 64}});
  const twins::Footprint f = of(l);
  EXPECT_EQ(f.bytes[0], uint64_t(10 * 6 * 64) * 4);
  EXPECT_EQ(f.bytes[1], uint64_t(9 * (6 * 64 + 3) + 6 * 64) * 4);
  EXPECT_EQ(f.bytes[3], uint64_t(64) * 2); // bf16 weights
  l.args[2].i = 6 * 64 - 1; // the gate row narrower than the heads
  EXPECT_THROW(of(l), twins::BadLaunchArg);
}

// ------------------------------------------------------ plan tables
/// Plan tables in memory: per argument its init bytes, and relocations
/// as (argument, byte) -> bytes between their target and its buffer's end.
class MemTables final : public twins::Tables {
public:
  std::map<size_t, std::vector<uint8_t>> init;
  std::map<std::pair<size_t, uint64_t>, uint64_t> relocs;

  template <class T> void put(size_t k, const std::vector<T> &v) {
    init[k].resize(v.size() * sizeof(T));
    std::memcpy(init[k].data(), v.data(), init[k].size());
  }
  bool known(size_t k) const override { return init.count(k) != 0; }
  uint64_t size(size_t k) const override { return init.at(k).size(); }
  bool read(size_t k, uint64_t at, void *dst, size_t n) const override {
    for (const auto &[key, room] : relocs)
      if (key.first == k && key.second < at + n && at < key.second + 8)
        return false;
    std::memcpy(dst, init.at(k).data() + at, n);
    return true;
  }
  twins::TablePointer pointer(size_t k, uint64_t at) const override {
    twins::TablePointer p;
    auto it = relocs.find({k, at});
    if (it != relocs.end())
      p = {true, it->second, "buffer 0 'weights' + 4096"};
    return p;
  }
  std::string name(size_t k) const override {
    return "buffer " + std::to_string(k);
  }
  /// Arguments that are the runtime's Io index rows: their bounds.
  std::map<std::pair<size_t, twins::IoIndex>, int64_t> io;
  int64_t ioBound(size_t k, twins::IoIndex what) const override {
    auto it = io.find({k, what});
    return it == io.end() ? 0 : it->second;
  }
};

/// The BadLaunchArg footprintOf throws for `l` with `t` ("" when none).
std::string refusal(const twins::Launch &l, const MemTables &t,
                    size_t *arg = nullptr) {
  try {
    twins::footprintOf(*twins::findFootprint(l.family), l, &t);
  } catch (const twins::BadLaunchArg &b) {
    if (arg)
      *arg = b.arg;
    return b.what();
  }
  return "";
}

#define EXPECT_REFUSED(l, t, argIndex, text)                                   \
  do {                                                                         \
    size_t a_ = 99;                                                            \
    const std::string m_ = refusal(l, t, &a_);                                 \
    EXPECT_EQ(a_, size_t(argIndex)) << m_;                                     \
    EXPECT_NE(m_.find(text), std::string::npos) << m_;                         \
  } while (0)

TEST(FootprintTables, RuntimeIndicesReachEveryValueBelowTheirBound) {
  // kv_store(kva, normW, cache, seq, pos, kvr, dr, maxCtx, eps, theta,
  // pages, pageShift); grid (1, B = 2): latent rows of 40, 64 positions
  // per slot, unpaged.
  twins::Launch l =
      launchOf("kv_store", 1, 2, 128, {{5, 32}, {6, 8}, {7, 64}});
  l.args[10].p = nullptr;
  // Without a checker: one slot (slot 0's footprint).
  EXPECT_EQ(of(l).bytes[2], uint64_t(64) * 40 * 4);
  MemTables t;
  // seq and pos pointing anywhere but the runtime's rows are refused.
  EXPECT_REFUSED(l, t, 3, "must be the runtime's KV slots (io.slots)");
  t.io[{3, twins::IoIndex::Slot}] = 3;
  EXPECT_REFUSED(l, t, 4, "must be the runtime's positions (io.positions)");
  t.io[{4, twins::IoIndex::Position}] = 64;
  const twins::Footprint f =
      twins::footprintOf(*twins::findFootprint("kv_store"), l, &t);
  EXPECT_EQ(f.bytes[2], uint64_t(3) * 64 * 40 * 4); // every slot
  EXPECT_TRUE(f.io[3] && f.io[4] && !f.io[2]);
  // Paged (pages of 2^4 = 16 rows): the cache reaches every page, the
  // table every slot's 64 / 16 entries; the table must be io.pages.
  twins::Launch pl = l;
  pl.args[10].p = reinterpret_cast<void *>(uintptr_t(256));
  pl.args[11].i = 4;
  EXPECT_REFUSED(pl, t, 10, "must be the runtime's KV pages (io.pages)");
  t.io[{10, twins::IoIndex::Page}] = 7;
  const twins::Footprint fp =
      twins::footprintOf(*twins::findFootprint("kv_store"), pl, &t);
  EXPECT_EQ(fp.bytes[2], uint64_t(7) * 16 * 40 * 4); // every page
  EXPECT_EQ(fp.bytes[10], uint64_t(3) * (64 / 16) * 4);
  EXPECT_TRUE(fp.io[10] && fp.indexed[2]);
  pl.args[11].i = 7; // pages of 128 rows do not split a 64-row slot
  EXPECT_REFUSED(pl, t, 11, "must split the slot's 64");
  // A cache of fewer positions than the runtime writes.
  t.io[{4, twins::IoIndex::Position}] = 65;
  EXPECT_REFUSED(l, t, 7, "under the 65 positions");
  // embed_tokens(table, dt, rowScale, tok, x, d): every row of the table.
  twins::Launch e = launchOf("embed_tokens", 1, 2, 256, {{1, 0}, {5, 100}});
  MemTables te;
  te.io[{3, twins::IoIndex::Row}] = 1000;
  const twins::Footprint fe =
      twins::footprintOf(*twins::findFootprint("embed_tokens"), e, &te);
  EXPECT_EQ(fe.bytes[0], uint64_t(999 * 100 + 100) * 4);
  EXPECT_EQ(fe.bytes[2], uint64_t(1000) * 4);
}

TEST(FootprintTables, VocabGatherSliceBoundsAreOrderedAndInsideTheVocab) {
  // (g, vb, B, maxCount, out, V); grid (1, N = 2, 1): 2 slices of at most
  // 100 columns of a vocabulary of 150.
  twins::Launch l =
      launchOf("vocab_gather", 1, 2, 128, {{2, 1}, {3, 100}, {5, 150}});
  MemTables t;
  t.put<int64_t>(1, {0, 100, 150});
  EXPECT_EQ(refusal(l, t), "");
  EXPECT_TRUE(
      twins::footprintOf(*twins::findFootprint(l.family), l, &t).table[1]);
  t.put<int64_t>(1, {0, 100, 160});
  EXPECT_REFUSED(l, t, 1,
                 "entry 2 of table buffer 1 (the end of slice 1) "
                 "is 160, past the vocabulary of 150");
  t.put<int64_t>(1, {0, 100, 90});
  EXPECT_REFUSED(l, t, 1, "entry 2");
  t.put<int64_t>(1, {0, 120, 150}); // slice 0 over maxCount
  EXPECT_REFUSED(l, t, 1, "entry 1 of table buffer 1 (the end of slice 0)");
  t.put<int64_t>(1, {-8, 50, 150});
  EXPECT_REFUSED(l, t, 1, "entry 0");
  t.put<int64_t>(1, {0, 100}); // N + 1 = 3 bounds
  EXPECT_REFUSED(l, t, 1, "reads 3 entries of 8 bytes");
  t.init.clear(); // bounds written at run time: not what vocab_gather reads
  EXPECT_REFUSED(l, t, 1, "holds no table of the plan");
}

/// gemm_trellis_grouped over 16 x 8 tiles of width 3 (bm 16, 128 threads):
/// (xh, row_ids, items, z, n_items, in, out, x_stride, z_stride,
///  accumulate, sI, sI8, sJ8).
struct GroupedCase {
  glm::plan::KeyValues targs = {{"bm", "16"}, {"widths", "3"}, {"xt", "f32"}};
  twins::Launch l;
  MemTables t;
  // 8x8 tile blocks: 16 tile rows, 8 tile columns: 128 tiles of 96 bytes.
  static constexpr uint64_t kReach = 128 * 32 * 3;

  GroupedCase() {
    l = launchOf("gemm_trellis_grouped", 2, 1, 128,
                 {{4, 2},
                  {5, 256},
                  {6, 128},
                  {7, 256},
                  {8, 128},
                  {10, 8},
                  {11, 64},
                  {12, 128}},
                 &targs);
    l.args[1].p = nullptr; // no row_ids: item rows are xh rows
    item(0, 0, 0, 4, 0, 3);
    item(1, 0, 0, 0, 0, 3); // rows 0: skipped
    t.relocs[{2, 0}] = kReach;
    t.relocs[{2, 32}] = 0;
  }
  void item(size_t i, int64_t zOff, int32_t start, int32_t rows, int32_t xCol,
            int32_t k) {
    std::vector<uint8_t> &b = t.init[2];
    b.resize(std::max<size_t>(b.size(), 32 * (i + 1)));
    std::memcpy(&b[32 * i + 8], &zOff, 8);
    const int32_t v[4] = {start, rows, xCol, k};
    std::memcpy(&b[32 * i + 16], v, 16);
  }
};

TEST(FootprintTables, GroupedItemsHoldTheirTilesRowsAndCount) {
  GroupedCase c;
  EXPECT_EQ(refusal(c.l, c.t), "");
  // Item 0 reaches 4 rows of xh and z from its offsets.
  c.item(0, 1000, 2, 4, 64, 3);
  const twins::Footprint f =
      twins::footprintOf(*twins::findFootprint(c.l.family), c.l, &c.t);
  EXPECT_EQ(f.bytes[0], uint64_t(5 * 256 + 64 + 256) * 4);
  EXPECT_EQ(f.bytes[3], uint64_t(1000 + 3 * 128 + 128) * 4);
  // Its tiles one byte past the relocation's buffer.
  c.t.relocs[{2, 0}] = GroupedCase::kReach - 1;
  EXPECT_REFUSED(c.l, c.t, 2,
                 "entry 0 of table buffer 2 (item 0's tiles) "
                 "points to buffer 0 'weights' + 4096");
  // A width the kernel was not built for writes NaN, reads no tile.
  c.item(0, 0, 0, 4, 0, 5);
  EXPECT_EQ(refusal(c.l, c.t), "");
  c.item(0, -16, 0, 4, 0, 3);
  c.t.relocs[{2, 0}] = GroupedCase::kReach;
  EXPECT_REFUSED(c.l, c.t, 2, "entry 0");
  // An item count past the table's capacity.
  c.item(0, 0, 0, 4, 0, 3);
  c.l.args[4].i = 3;
  c.l.grid[0] = 3;
  EXPECT_REFUSED(c.l, c.t, 2,
                 "reads 3 entries of 32 bytes from buffer 2, "
                 "which holds 64 init bytes");
  // A raw address where a null or relocated pointer belongs.
  c.l.args[4].i = 2;
  c.l.grid[0] = 2;
  c.t.relocs.erase({2, 32});
  c.t.init[2][32] = 1;
  EXPECT_REFUSED(c.l, c.t, 2, "entry 1 of table buffer 2 holds a raw address");
}

TEST(FootprintTables, GroupedRowIdsFromATableIndexXh) {
  GroupedCase c;
  c.l.args[1].p = reinterpret_cast<void *>(uintptr_t(256));
  c.item(0, 0, 2, 2, 0, 3);
  c.t.put<int32_t>(1, {0, 0, 7, 9});
  const twins::Footprint f =
      twins::footprintOf(*twins::findFootprint(c.l.family), c.l, &c.t);
  EXPECT_EQ(f.bytes[0], uint64_t(9 * 256 + 256) * 4);
  EXPECT_EQ(f.bytes[1], 4u * 4);
  c.t.put<int32_t>(1, {0, 0, 7, -1});
  EXPECT_REFUSED(c.l, c.t, 1, "entry 3 of table buffer 1 (an xh row) is -1");
  // Row ids written at run time (routing) are data.
  c.t.init.erase(1);
  EXPECT_EQ(refusal(c.l, c.t), "");
}

TEST(FootprintTables, ExpertTilesHoldWhatEachOwnedHalfReads) {
  const glm::plan::KeyValues targs = {
      {"batch", "1"}, {"sv", "f32"}, {"widths", "3"}};
  // expert_gemv_trellis, grid (1 half, 1 expert): hidden = inter = 128,
  // gate/up and down 8 x 8 tiles of 96 bytes under these strides.
  twins::Launch l = launchOf("expert_gemv_trellis", 1, 1, 128,
                             {{11, 1},
                              {12, 1},
                              {13, 128},
                              {14, 128},
                              {15, 128},
                              {18, 8},
                              {19, 64},
                              {20, 8},
                              {21, 64}},
                             &targs);
  const uint64_t reach = 64 * 32 * 3;
  MemTables t;
  t.init[3].assign(48 * 8, 0);
  t.init[4].assign(48, 3);
  for (uint64_t e : {0, 16, 32}) // gate, up, down of half 0
    t.relocs[{3, e * 8}] = reach;
  EXPECT_EQ(refusal(l, t), "");
  t.relocs[{3, 32 * 8}] = reach - 1;
  EXPECT_REFUSED(l, t, 3,
                 "entry 32 of table buffer 3 (down half 0 of "
                 "expert 0) points to buffer 0 'weights' + 4096, "
                 "where the kernel reads 6144 bytes");
  t.relocs[{3, 32 * 8}] = reach;
  t.init[4][16] = 2;
  EXPECT_REFUSED(l, t, 4,
                 "entry 16 of table buffer 4 (up half 0 of expert "
                 "0) is width 2, not one of the kernel's widths '3'");
  // A half with a null pointer is not on this rank: nothing is read.
  t.relocs.erase({3, 0});
  EXPECT_EQ(refusal(l, t), "");
  // The tables are required: the kernel follows whatever they hold.
  t.init.erase(3);
  EXPECT_REFUSED(l, t, 3, "holds no table of the plan");
}

TEST(FootprintTables, MoeGroupTilesHoldWhatTheChainsGemmsRead) {
  // moe_group(expert_ids, T, topk, E, S, H, BM, tiles, widths, hidden,
  // inter, order, entry_of, gu_items, down_items, NB): 1 routed expert, no
  // shared, 1 half, hidden 128 (gate/up and down 8 x 8 tiles of 32*K
  // bytes under the exlr8 strides of the chain's GEMMs), BM 64, 1 row.
  const glm::plan::KeyValues targs = {{"threads", "512"}};
  twins::Launch l = launchOf("moe_group", 1, 1, 512,
                             {{1, 1},
                              {2, 1},
                              {3, 1},
                              {4, 0},
                              {5, 1},
                              {6, 64},
                              {9, 128},
                              {10, 128},
                              {15, 2}},
                             &targs);
  const uint64_t reach = 64 * 32; // per bit of width
  MemTables t;
  t.init[7].assign(33 * 8, 0); // entries (e*3 + p)*16 + h, h < 1
  t.init[8].assign(33, 3);
  for (uint64_t e : {0, 16, 32})
    t.relocs[{7, e * 8}] = 3 * reach;
  EXPECT_EQ(refusal(l, t), "");
  EXPECT_TRUE(
      twins::footprintOf(*twins::findFootprint(l.family), l, &t).table[7]);
  t.init[8][16] = 4; // the up half read at width 4: past its buffer
  EXPECT_REFUSED(l, t, 7,
                 "entry 16 of table buffer 7 (up half 0 of expert 0) points "
                 "to buffer 0 'weights' + 4096, where the kernel reads 8192");
  t.init[8][16] = 9;
  EXPECT_REFUSED(l, t, 8, "(up half 0 of expert 0) is width 9, not 1..8");
  // Another rank's half: null, its width unread.
  t.relocs.erase({7, 16 * 8});
  EXPECT_EQ(refusal(l, t), "");
  t.init.erase(7); // the tile pointers must be the plan's table
  EXPECT_REFUSED(l, t, 7, "holds no table of the plan");
}

TEST(FootprintTables, ExpertIdTablesStayInsideTheExperts) {
  // exl3_expert_in(x, suh, ids, xh, d, E, B); grid (1, K = 1, 2 B).
  twins::Launch l =
      launchOf("exl3_expert_in", 1, 1, 128, {{4, 128}, {5, 1}, {6, 1}});
  l.grid[2] = 2;
  MemTables t;
  t.put<int32_t>(2, {0});
  EXPECT_EQ(refusal(l, t), "");
  t.put<int32_t>(2, {1});
  EXPECT_REFUSED(l, t, 2,
                 "entry 0 of table buffer 2 (an expert id) is 1, "
                 "past the 1 experts");
  t.init.clear(); // a router's ids: data
  EXPECT_EQ(refusal(l, t), "");

  // moe_reduce(partial, expert_ids, tiles, out, batch, topk, hidden,
  // accumulate): id 1 tests expert 1's gate halves.
  l = launchOf("moe_reduce", 1, 1, 128, {{4, 1}, {5, 1}, {6, 128}});
  t.put<int32_t>(1, {1});
  t.init[2].assign(48 * 8, 0);
  EXPECT_REFUSED(l, t, 2, "reads 64 entries of 8 bytes");
  t.init[2].assign(96 * 8, 0);
  EXPECT_EQ(twins::footprintOf(*twins::findFootprint(l.family), l, &t).bytes[2],
            64u * 8);
}

} // namespace
