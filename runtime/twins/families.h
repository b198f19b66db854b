//===- families.h - the twin functions of the codegen kernel families -----===//
//
// One declaration per family twin, defined in <family>_twin.cpp (grouped
// where families share their arithmetic) and listed in kCodegenTwins[]
// (codegen_twins.cpp). Each takes the launch exactly as twin.h describes.
//
// How close CUDA is held to each twin (max|cuda - twin| / max|twin|, the
// tests/gpu "vs_twin" cases; each twin's file says why):
//   exact  moe_reduce, dense_gemv_f32, embed, topk, argmax, router ids,
//          rms_norm's x
//   1e-6   hadamard128, router weights
//   1e-5   dense_gemv, dense_gemv_trellis, rms_norm,
//          indexer_scores, mla_decode
//   2e-5   moe_trellis, expert_gemv_trellis, dense_trellis
//   3e-5   gemm_trellis, gemm_trellis_grouped, gemm_dense
//   1e-3   rope (powf/cosf/sinf ulps times positions < 4096)
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/twins/twin.h"

namespace glm::rt::twins {

void moeTrellisTwin(const Launch &l);         // moe_trellis_twin.cpp
void expertGemvTrellisTwin(const Launch &l);  // expert_gemv_trellis_twin.cpp
void moeReduceTwin(const Launch &l);          // expert_gemv_trellis_twin.cpp
void denseTrellisTwin(const Launch &l);       // dense_trellis_twin.cpp
void denseGemvTrellisTwin(const Launch &l);   // dense_trellis_twin.cpp
void hadamard128Twin(const Launch &l);        // dense_gemv_twin.cpp
void denseGemvTwin(const Launch &l);          // dense_gemv_twin.cpp
void denseGemvF32Twin(const Launch &l);       // dense_gemv_twin.cpp
void gemmTrellisTwin(const Launch &l);        // gemm_trellis_twin.cpp
void gemmTrellisGroupedTwin(const Launch &l); // gemm_trellis_twin.cpp
void gemmDenseTwin(const Launch &l);          // gemm_dense_twin.cpp
void embedTwin(const Launch &l);              // embed_rms_norm_rope_twin.cpp
void rmsNormTwin(const Launch &l);            // embed_rms_norm_rope_twin.cpp
void ropeTwin(const Launch &l);               // embed_rms_norm_rope_twin.cpp
void routerTwin(const Launch &l);             // router_topk_argmax_twin.cpp
void topkTwin(const Launch &l);               // router_topk_argmax_twin.cpp
void argmaxTwin(const Launch &l);             // router_topk_argmax_twin.cpp
void indexerScoresTwin(const Launch &l); // mla_decode_indexer_scores_twin.cpp
void mlaDecodeTwin(const Launch &l);     // mla_decode_indexer_scores_twin.cpp

} // namespace glm::rt::twins
