//===- footprint_test.cpp - every family's footprint, as its template ----===//
//
// Every codegen family has a footprint (as every family has a twin), its
// parameter kinds are those of the family's PARAMS macro, and footprints
// refuse the integers a damaged plan could carry. Whether a footprint is
// large enough for what its twin touches is tested on compiled plans
// (tests/unit/compiler/launch_bounds_test.cpp).
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "runtime/twins/footprint.h"

#include <gtest/gtest.h>

#include <cstring>
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

} // namespace
