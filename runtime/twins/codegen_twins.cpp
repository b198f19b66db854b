//===- codegen_twins.cpp - twins of the codegen kernel families
//-----------------===//
#include "runtime/twins/families.h"

namespace glm::rt::twins {

const TwinEntry kCodegenTwins[] = {
    {"moe_trellis", moeTrellisTwin},
    {"expert_gemv_trellis", expertGemvTrellisTwin},
    {"moe_reduce", moeReduceTwin},
    {"dense_trellis", denseTrellisTwin},
    {"dense_gemv_trellis", denseGemvTrellisTwin},
    {"hadamard128", hadamard128Twin},
    {"dense_gemv", denseGemvTwin},
    {"dense_gemv_f32", denseGemvF32Twin},
    {"gemm_trellis", gemmTrellisTwin},
    {"gemm_trellis_grouped", gemmTrellisGroupedTwin},
    {"gemm_dense", gemmDenseTwin},
    {"embed", embedTwin},
    {"rms_norm", rmsNormTwin},
    {"rope", ropeTwin},
    {"router", routerTwin},
    {"topk", topkTwin},
    {"argmax", argmaxTwin},
    {"indexer_scores", indexerScoresTwin},
    {"mla_decode", mlaDecodeTwin},
    {nullptr, nullptr},
};

} // namespace glm::rt::twins
