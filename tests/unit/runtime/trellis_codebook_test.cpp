//===- trellis_codebook_test.cpp - codebooks, names and widths ------------===//
//
// Codebook values against exl3-format.md §1.2's test vectors and statistics
// table; codebook name parsing; width parsing and validation.
//
//===----------------------------------------------------------------------===//
#include "runtime/codec/trellis.h"

#include "runtime/base/error.h"
#include "runtime/base/numeric.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

using namespace glm::rt;
using namespace glm::rt::trellis;

TEST(TrellisCodebook, SpecTestVectors) {
  const uint32_t states[5] = {0, 1, 2, 0x1234, 0xFFFF};
  const uint16_t expect[3][5] = {
      {0x3A25, 0xBB5B, 0x3B74, 0xC066, 0xB110},
      {0x3F60, 0x304E, 0xBA13, 0x3E0F, 0x3ACD},
      {0xC2E8, 0x3921, 0xB72D, 0xB89E, 0xB936},
  };
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 5; ++i) {
      Codebook cb = (Codebook)c;
      EXPECT_EQ(codebookHalfBits(cb, states[i]), expect[c][i])
          << codebookName(cb) << " s=" << states[i];
      EXPECT_EQ(codebookTable(cb)[states[i]], expect[c][i]);
      EXPECT_EQ(codebookValue(cb, states[i]), halfToFloat(expect[c][i]));
    }
}

TEST(TrellisCodebook, SpecStatistics) {
  struct Row {
    double mean, std, min, max;
  };
  const Row spec[3] = {{0.0002, 1.24371, -3.957, 3.973},
                       {0.0000, 1.24411, -3.949, 3.949},
                       {-0.0019, 1.0003, -3.453, 3.348}};
  for (int c = 0; c < 3; ++c) {
    const uint16_t *t = codebookTable((Codebook)c);
    double sum = 0, sum2 = 0, lo = 1e9, hi = -1e9;
    for (int s = 0; s < 65536; ++s) {
      double v = halfToFloat(t[s]);
      sum += v;
      sum2 += v * v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    double mean = sum / 65536, sd = std::sqrt(sum2 / 65536 - mean * mean);
    // Tolerances: half a unit in the last digit the spec prints.
    EXPECT_NEAR(mean, spec[c].mean, 0.00005) << c;
    EXPECT_NEAR(sd, spec[c].std, c == 2 ? 0.00005 : 0.000005) << c;
    EXPECT_NEAR(lo, spec[c].min, 0.0005) << c;
    EXPECT_NEAR(hi, spec[c].max, 0.0005) << c;
  }
  EXPECT_DOUBLE_EQ(codebookStd(Codebook::ThreeInst), 1.24371088);
  EXPECT_NEAR(codebookStd(Codebook::Mul1), 1.0003, 0.00005);
}

TEST(TrellisCodebook, Mul1ClosedFormNeverZeroOrSubnormal) {
  for (int s = 0; s < 65536; ++s) {
    uint16_t h = codebookTable(Codebook::Mul1)[s];
    EXPECT_NE(h & 0x7C00, 0) << s; // exponent field nonzero: normal, not 0
  }
}

TEST(TrellisCodebook, E4m3TableIsRoundedFp16Table) {
  for (int c = 0; c < 3; ++c) {
    const float *plain = codebookFloatTable((Codebook)c, false);
    const float *e4 = codebookFloatTable((Codebook)c, true);
    for (int s = 0; s < 65536; s += 7) {
      EXPECT_EQ(e4[s], roundToE4m3(plain[s]));
      EXPECT_EQ(codebookValue((Codebook)c, s, true), e4[s]);
    }
  }
}

TEST(TrellisCodebook, TablesBuiltOnceAcrossThreads) {
  std::vector<const float *> seen(8);
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i)
    ts.emplace_back(
        [&, i] { seen[i] = codebookFloatTable(Codebook::Mcg, i & 1); });
  for (auto &t : ts)
    t.join();
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(seen[i], codebookFloatTable(Codebook::Mcg, i & 1));
}

TEST(TrellisCodebook, Names) {
  for (int c = 0; c < 3; ++c)
    EXPECT_EQ(parseCodebook(codebookName((Codebook)c)), (Codebook)c);
  EXPECT_EQ(parseCodebook("MUL1"), Codebook::Mul1);
  EXPECT_EQ(parseCodebook("3Inst"), Codebook::ThreeInst);
  EXPECT_THROW(parseCodebook("2mad"), Error);
  EXPECT_THROW(parseCodebook(""), Error);
  EXPECT_THROW(parseCodebook(nullptr), Error);
}

TEST(TrellisWidth, FromDouble) {
  for (int k = 1; k <= 8; ++k) {
    Width w = Width::fromDouble(k);
    EXPECT_EQ(w, Width::bits(k));
    EXPECT_FALSE(w.isHalfInteger());
    EXPECT_EQ(w.wordsPerTile(), 16 * k);
    EXPECT_EQ(w.bytesPerTile(), 32 * k);
    EXPECT_EQ(w.streamBits(), 256 * k);
  }
  for (double k : {1.5, 2.5, 3.5}) {
    Width w = Width::fromDouble(k);
    EXPECT_TRUE(w.isHalfInteger());
    EXPECT_EQ(w.value(), k);
    EXPECT_EQ(w.wordsPerTile(), (int)(16 * k));
    EXPECT_EQ(w.streamBits(), (int)(256 * k));
  }
  for (double bad : {0.0, 0.5, 0.7, 4.5, 9.0, -2.0, 2.25, 16.0, (double)NAN,
                     (double)INFINITY})
    EXPECT_THROW(Width::fromDouble(bad), Error) << bad;
}

TEST(TrellisWidth, CheckWidthRejectsHalfWidthsOutsideMul1) {
  EXPECT_NO_THROW(checkWidth(Width::fromDouble(2.5), Codebook::Mul1));
  try {
    checkWidth(Width::fromDouble(2.5), Codebook::Mcg, "layer.3.up_proj");
    FAIL() << "no error";
  } catch (const Error &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("layer.3.up_proj"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mul1"), std::string::npos) << msg;
  }
  EXPECT_THROW(checkWidth(Width{1}, Codebook::Mul1), Error);
  EXPECT_THROW(checkWidth(Width{9}, Codebook::Mul1), Error);
  EXPECT_THROW(checkWidth(Width{18}, Codebook::Mcg), Error);
}
