//===- helper_twins.h - twins of the executor's helper families (private) -===//
//
// The C++ twins of the helper kernel families (codegen/templates/
// embed_tokens.cuh .. fill_f32.cuh) and the device helpers they share
// (helper_common.cuh, mla_common.cuh), written with the same operations in
// the same order: fp64 sums where the kernel sums in fp64, fp32 products
// and sums where it uses fp32, the block and warp reductions in the
// kernel's fixed tree/butterfly order. The CUDA side is compiled with
// --fmad=false and this library with -ffp-contract=off, so each product and
// sum rounds separately on both. Results differ only where the kernel calls
// a libm function (exp, pow, sin, cos in fp64): CUDA's and the host's may
// differ in the last bit (see each twin).
//
// How close CUDA is held to the GLM-5.3-Flash twins (twin_flash.cpp,
// tests/gpu/flash_decode_gpu_test.cpp), max|cuda - twin| / max|twin|:
//   exact  mhc_mix, mhc_post, kpool_store, kda_decode with a gate lower
//          bound, the pooled indexer_scores_ctx and dsa_select (their exp
//          is flash_math.cuh's, built from IEEE-exact operations); mhc_head
//          (fp64 adds and one division) is not run on a GPU yet
//   1e-6   kda_decode's softplus form (no lower bound: fp64 log1p/exp),
//          kda_prep's likewise (exact with a lower bound); kda_gnorm is
//          exact
//   1e-4   kda_chunk with mma = tf32x3, 2e-3 with mma = tf32 (tensor
//          cores: the twin rounds the MMA operands to tf32 as the kernel
//          does and sums their products in fp64, the MMAs sum in fp32, and
//          an operand that drifted across a tf32 rounding boundary moves
//          by 2^-11; not yet run on a GPU)
// and the twins to the fp64 reference (runtime/cpu/flash_ops.h, tests/unit/
// runtime/flash_twins_test.cpp): <= 1e-5 relative (fp32 kernels; kda_chunk
// with mma = tf32x3), 1e-2 for kda_chunk with mma = tf32 (operands with 11
// significant bits).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/twins/twin.h"

#include <cstdint>
#include <vector>

namespace glm::rt::twins {

namespace hx {

/// Stored element i of p as float: dt 0 f32, 1 f16, 2 bf16, 3 e4m3 (as the
/// kernels' halfBits / e4m3Bits: exact, NaN canonical).
float ldAny(const void *p, int64_t i, int dt);
/// 2^(e - 127) of an MXFP8 e8m0 scale byte.
float e8m0Scale(uint8_t e);
/// Element (o, i) of a row-major [out, in] weight times its scale (sk 0
/// none, 1 FP8 block-128, 2 FP8 row, 3 MXFP8).
float ldWT(const void *w, int dt, const void *scale, int sk, int64_t o,
           int64_t i, int64_t in);
/// The kernels' hx::vecOk: the chunked MLA paths apply (W's address as the
/// twin sees it: host and device buffers are both at least 16-byte
/// aligned, so the decision is the same where offsets are).
bool vecOk(const void *w, int dt, int sk, int in);
/// hx::blockSumD: red[t] += red[t + s] for s = nt/2 .. 1 over v[0..nt).
double blockSumD(std::vector<double> v);
/// hx::blockSumFixedD over v[0..nt) (nt a multiple of 32): a butterfly
/// (16 .. 1) per warp, then the warp sums (zeros past the last) likewise.
double blockSumFixedD(const std::vector<double> &v);
/// hx::warpSumF: fp32 butterfly (16 .. 1) over 32 lanes; lane 0's value.
float warpSumF(const float *lanes);
/// hx::ropePair: interleaved RoPE of pair i, fp64 (std::pow/cos/sin).
void ropePair(float *p, int i, int dim, int pos, double theta);
/// hx::layerNormKey (index_key_store.cuh) with nt threads: the indexer
/// key's LayerNorm (eps 1e-6), fp64 tree sums.
void layerNormKey(const float *x, const float *w, const float *bias,
                  float *dst, int hd, int nt);

} // namespace hx

// Area files: twin_norm_rope.cpp, twin_dsa.cpp, twin_mla.cpp,
// twin_moe.cpp, twin_misc.cpp, twin_flash.cpp, twin_moe_prefill.cpp. Each
// takes one launch (twin.h).
void embedTokensTwin(const Launch &l);
void rmsNormRowsTwin(const Launch &l);
void addRmsNormTwin(const Launch &l);
void ropeRowsTwin(const Launch &l);
void kvStoreTwin(const Launch &l);
void indexKeyStoreTwin(const Launch &l);
void dsaIotaTwin(const Launch &l);
void indexerScoresCtxTwin(const Launch &l);
void indexerScoresMmaTwin(const Launch &l);
void dsaSelectTwin(const Launch &l);
void mlaAttnTwin(const Launch &l);
void mlaQabsTwin(const Launch &l);
void mlaCoreTwin(const Launch &l);
void mlaScoresTwin(const Launch &l);
void mlaSoftmaxTwin(const Launch &l);
void mlaValuesTwin(const Launch &l);
void mlaPrefillTwin(const Launch &l);
void mlaRows16Twin(const Launch &l);
void mlaProjTwin(const Launch &l);
void mlaOutTwin(const Launch &l);
void transposeTwin(const Launch &l);
void gemvAnyTwin(const Launch &l);
void reduceUnitsTwin(const Launch &l);
void routeTwin(const Launch &l);
void swigluTwin(const Launch &l);
void hfExpertActTwin(const Launch &l);
void hfExpertDownTwin(const Launch &l);
void exl3ExpertInTwin(const Launch &l);
void moeExl3InTwin(const Launch &l);
void onehotTwin(const Launch &l);
void vocabGatherTwin(const Launch &l);
void sumPartsTwin(const Launch &l);
void fillRandomTwin(const Launch &l);
void fillF32Twin(const Launch &l);
void fixedToF32Twin(const Launch &l);
// MoE prefill glue around gemm_trellis_grouped (twin_moe_prefill.cpp;
// bit-exact with CUDA).
void moeGroupTwin(const Launch &l);
void moeGatherTwin(const Launch &l);
void moeActTwin(const Launch &l);
void moeCombineTwin(const Launch &l);
// GLM-5.3-Flash decode families (twin_flash.cpp).
void mhcMixTwin(const Launch &l);
void mhcPostTwin(const Launch &l);
void mhcHeadTwin(const Launch &l);
void kdaDecodeTwin(const Launch &l);
void kpoolStoreTwin(const Launch &l);
// GLM-5.3-Flash KDA prefill (twin_flash.cpp).
void kdaPrepTwin(const Launch &l);
void kdaChunkTwin(const Launch &l);
void kdaGnormTwin(const Launch &l);

} // namespace glm::rt::twins
