//===- moe_trellis_abi_test.cpp - moe_trellis launch geometry -------------===//
//
// The host arithmetic every moe_trellis launcher shares (scratch, counters,
// grids, the preconditions the kernel traps on), checked against the layout
// documented in codegen/templates/moe_trellis.cuh for GLM-5.3 and Flash.
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "codegen/dense_gemv_abi.h"
#include "codegen/moe_trellis_abi.h"

#include <gtest/gtest.h>

using glm::codegen::MoeTrellisDims;

TEST(MoeTrellisAbi, Glm53DecodeStepGeometry) {
  MoeTrellisDims d; // batch 1, top-8 of 256 + 1 shared, 6144 <-> 2048
  d.guSplit = 24, d.downGroup = 2, d.threads = 128;
  ASSERT_TRUE(d.valid());
  EXPECT_EQ(d.maxUnits(), 9);
  EXPECT_EQ(d.slots(), 9);
  // [q][p][h][s][128] + [q][h][128] + [blk][q][g][128]
  EXPECT_EQ(d.scratchFloats(), size_t(9) * 32 * 24 * 128 +
                                   size_t(9) * 16 * 128 +
                                   size_t(9) * 6144 * 8);
  EXPECT_EQ(d.counterInts(), size_t(9 * 16 + 48));
  // One warp per item, 4 warps per block.
  EXPECT_EQ(d.gridGateUp(), unsigned(9 * 16 * 2 * 24 / 4));
  EXPECT_EQ(d.gridDown(), unsigned(9 * 48 * 8 / 4));
}

TEST(MoeTrellisAbi, BatchEightFlashAndRejectedShapes) {
  MoeTrellisDims d;
  d.batch = 8, d.hidden = 4096, d.guSplit = 16, d.downGroup = 4;
  d.threads = 64;
  ASSERT_TRUE(d.valid());
  EXPECT_EQ(d.maxUnits(), 65);
  EXPECT_EQ(d.slots(), 72);
  EXPECT_EQ(d.gridGateUp(), unsigned(65 * 16 * 2 * 16 / 2));
  EXPECT_EQ(d.gridDown(), unsigned(65 * 32 * 4 / 2));
  MoeTrellisDims bad = d;
  bad.guSplit = 24; // 4096/16 = 256 tile rows: 24 does not divide
  EXPECT_FALSE(bad.valid());
  bad = d;
  bad.downGroup = 3;
  EXPECT_FALSE(bad.valid());
  bad = d;
  bad.batch = 9;
  EXPECT_FALSE(bad.valid());
  bad = d;
  bad.inter = 1536; // the kernel assumes 16 halves of 128
  EXPECT_FALSE(bad.valid());
}

TEST(MoeTrellisAbi, PersistentGridsAreCapped) {
  MoeTrellisDims d; // GLM-5.3 batch 1, split 48, one half per down item
  d.guSplit = 48, d.downGroup = 1, d.threads = 128;
  d.persistBlocks = 132 * 4; // SMs x resident blocks
  ASSERT_TRUE(d.valid());
  EXPECT_EQ(d.gridGateUp(), 528u); // < 9*16*2*48/4 = 3456 items/4
  EXPECT_EQ(d.gridDown(), 528u);   // < 9*48*16/4 = 1728
  // Partials per (unit slot, half) at group 1: [blk][q][16][128].
  EXPECT_EQ(d.scratchFloats(), size_t(9) * 32 * 48 * 128 +
                                   size_t(9) * 16 * 128 +
                                   size_t(9) * 6144 * 16);
  d.persistBlocks = 100000; // larger than one item per warp: not capped
  EXPECT_EQ(d.gridGateUp(), unsigned(9 * 16 * 2 * 48 / 4));
  EXPECT_EQ(d.gridDown(), unsigned(9 * 48 * 16 / 4));
  MoeTrellisDims bad = d;
  bad.downGroup = 2; // the persistent path stores one partial per half
  EXPECT_FALSE(bad.valid());
  bad = d;
  bad.batch = 8, bad.topk = 8, bad.nShared = 9; // 73 units > 72
  EXPECT_FALSE(bad.valid());
  bad.nShared = 8;
  EXPECT_TRUE(bad.valid());
}

TEST(MoeTrellisAbi, FamilyNamesAndLaunchBounds) {
  glm::codegen::KernelSpec s{"moe_trellis",
                             {{"widths", "234"},
                              {"codebook", "mcg"},
                              {"e4m3", "1"},
                              {"batch", "1"},
                              {"sv", "f16"},
                              {"stage", "gu"},
                              {"pipe", "4"},
                              {"minblocks", "4"},
                              {"threads", "128"}},
                             {"sm_90"}};
  EXPECT_EQ(glm::codegen::kernelName(s),
            "glm_moe_trellis_k234_mcg_e4m3_b1_svf16_gu_p4_m4_t128");
  const std::string src = glm::codegen::generateSource(s);
  EXPECT_NE(src.find("__launch_bounds__(128, 4)"), std::string::npos) << src;
  EXPECT_NE(src.find("glm::moeTrellis<28, 1, true, 1, 1, 0, 4, 4, 0, 128>"),
            std::string::npos)
      << src;
  s.args["minblocks"] = "0";
  EXPECT_NE(glm::codegen::generateSource(s).find("__launch_bounds__(128)\n"),
            std::string::npos);
  const auto &f = glm::codegen::familyInfo("moe_trellis");
  ASSERT_FALSE(f.kernelParams.empty());
  EXPECT_EQ(f.kernelParams.front(), "xh");
  EXPECT_EQ(f.kernelParams.back(), "swiglu_limit");
}

// dense_gemv grids (codegen/dense_gemv_abi.h): a warp a row while that
// leaves two blocks an SM, else fewer rows a block (input slices a row).
TEST(DenseGemvAbi, BlocksSpreadShortOutputsOverTheSms) {
  using glm::codegen::denseGemvBlocks;
  EXPECT_EQ(denseGemvBlocks(154880, 132), 154880u / 8); // lm_head: 8 rows
  EXPECT_EQ(denseGemvBlocks(4096, 132), 512u);          // wq_b: 8 rows
  EXPECT_EQ(denseGemvBlocks(2048, 132), 512u);          // q_a: 4 rows
  EXPECT_EQ(denseGemvBlocks(576, 132), 288u);           // kv_a: 2 rows
  EXPECT_EQ(denseGemvBlocks(128, 132), 128u);           // wk: 1 row
  EXPECT_EQ(denseGemvBlocks(2048, 48), 256u);           // a Spark: 8 rows
  EXPECT_EQ(denseGemvBlocks(3, 132), 3u);
  // A kernel with 4 rows a warp: 32 rows a block down to 4 while that
  // leaves under three blocks per two SMs (q_a: 8 rows, 2 groups of 4 rows
  // over 4 input slices each).
  EXPECT_EQ(denseGemvBlocks(154880, 132, 8, 4), 154880u / 32);
  EXPECT_EQ(denseGemvBlocks(2048, 132, 8, 4), 256u);
  EXPECT_EQ(denseGemvBlocks(4096, 132, 8, 4), 256u);
  EXPECT_EQ(denseGemvBlocks(576, 132, 8, 2), 288u);
  EXPECT_EQ(denseGemvBlocks(128, 132, 8, 4), 32u);
  using glm::codegen::denseGemvRowsFor;
  EXPECT_EQ(denseGemvRowsFor(151552, 8), 4); // LM head
  EXPECT_EQ(denseGemvRowsFor(2048, 1), 4);   // q_a
  EXPECT_EQ(denseGemvRowsFor(2048, 8), 1);
  EXPECT_EQ(denseGemvRowsFor(576, 1), 2); // kv_a
  EXPECT_EQ(denseGemvRowsFor(256, 1), 1); // router
  using glm::codegen::denseGemvRowsPerBlock;
  EXPECT_EQ(denseGemvRowsPerBlock(154880, 154880 / 32, 8, 4), 32);
  EXPECT_EQ(denseGemvRowsPerBlock(154880, 154880 / 8, 8, 4), 8);
  EXPECT_EQ(denseGemvRowsPerBlock(154880, 154880 / 8, 8, 1), 8);
  EXPECT_EQ(denseGemvRowsPerBlock(576, 288, 8, 4), 4); // at least a warp's
  EXPECT_EQ(denseGemvRowsPerBlock(576, 288, 8, 1), 2);
  // Every rows-a-warp grid the rule gives covers the matrix.
  for (int out : {128, 576, 2048, 9472, 20000, 151552, 154880})
    for (int sms : {48, 132, 148}) {
      const unsigned g = denseGemvBlocks(out, sms, 8, 4);
      EXPECT_GE(int64_t(g) * denseGemvRowsPerBlock(out, g, 8, 4), out);
    }
}
