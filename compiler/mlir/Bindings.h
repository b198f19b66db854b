//===- Bindings.h - which rank binds and reads which weight bytes -*- C++ -*-===//
//
// Shared by glm-plan-memory (bytes per rank) and glm-emit-plan (bindings):
// every byte range of every glm.weight / glm.experts symbol is bound on the
// ranks that read it. A range bound on more than one rank is `replicated`
// and counts once in the pack total. Bytes read per decoded token are
// apportioned so that their sum over ranks is the model's active bytes:
// split ops by the units a rank owns, replicated ops evenly (telescoping
// floors, so the integer sums are exact). The MTP layers' weights (the
// module's glm.mtp) are bound like a main layer's, on every rank and expert
// halves by the rule, and read by no decode step: bound, never per token.
//
//===----------------------------------------------------------------------===//
#ifndef GLMC_MLIR_BINDINGS_H
#define GLMC_MLIR_BINDINGS_H

#include "glm/GlmDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace glmc {

/// One byte range bound on one rank.
struct RankBinding {
  int64_t file = 0, offset = 0, length = 0, role = 0; // glm.pack indices
  llvm::StringRef tensor;      // HF name, or the bank symbol for experts
  int32_t layer = -1, expert = -1, projection = -1, half = -1;
  int32_t widthX2 = 0;         // trellis width ×2; 0 = not trellis
  bool replicated = false;     // also bound on other ranks
  bool sideVector = false;     // an expert part's side bytes
  bool shared = false;         // shared expert
};

/// What one rank reads of one expert bank, for any number of tokens: the
/// expected bytes of a step of n tokens are routedAll × (1 − (1 − k/E)^n)
/// + shared (uniform routing), the trellis weights decoded likewise.
struct BankUse {
  uint64_t routedAll = 0;        // routed bytes if every expert were active
  uint64_t shared = 0;           // shared-expert bytes, read every step
  uint64_t routedWeightsAll = 0; // trellis weights in routedAll's parts
  uint64_t sharedWeights = 0;    // trellis weights of the shared parts
  int64_t experts = 0, topK = 0; // E and k of the bank's router
};

struct RankUsage {
  std::vector<RankBinding> bindings;
  uint64_t weightBytes = 0;    // bound bytes (each range once per rank)
  uint64_t bytesPerToken = 0;  // apportioned weight bytes per decoded token
  uint64_t expertBytesPerToken = 0; // routed + shared experts only
  /// bytesPerToken by weight / bank symbol (the ops that read them).
  std::map<std::string, uint64_t> bySymbol;
  /// Per expert bank symbol (banks some op reads).
  std::map<std::string, BankUse> banks;
};

struct BindingTable {
  int64_t ranks = 1;
  std::vector<RankUsage> perRank;
  uint64_t packBytes = 0;      // distinct ranges, each once
  uint64_t activeBytesPerToken = 0; // computed per model, independent of N
};

/// Computes the table for `module` (sharded or not); emits a located error
/// and fails on inconsistent IR (a symbol use naming no weight, no pack).
mlir::FailureOr<BindingTable> computeBindings(mlir::ModuleOp module);

/// computeBindings as an MLIR analysis, so glm-plan-memory and
/// glm-emit-plan share one computation (the passes between them mark it
/// preserved: they add attributes that do not change who binds what).
struct BindingAnalysis {
  explicit BindingAnalysis(mlir::Operation *op)
      : table(computeBindings(llvm::cast<mlir::ModuleOp>(op))) {}
  mlir::FailureOr<BindingTable> table;
};

/// Splits `total` among `n` shares proportional to `weights` so the parts
/// sum to exactly total (telescoping floors over the cumulative weights).
std::vector<uint64_t> apportion(uint64_t total,
                                const std::vector<uint64_t> &weights);

/// Storage code of the helper kernels' `dt` (0 f32, 1 f16, 2 bf16, 3 E4M3)
/// and of their FP8 scales' `sk` (0 none, 1 block-128, 2 row, 3 MX).
inline int dtOf(mlir::Type t) {
  auto d = mlir::dyn_cast_or_null<mlir::glm::DenseType>(t);
  if (!d)
    return 2;
  switch (d.getFormat()) {
  case mlir::glm::DenseFormat::F32:
    return 0;
  case mlir::glm::DenseFormat::F16:
    return 1;
  case mlir::glm::DenseFormat::Fp8Block128:
  case mlir::glm::DenseFormat::Fp8Row:
  case mlir::glm::DenseFormat::Mxfp8:
    return 3;
  default:
    return 2;
  }
}
inline int skOf(mlir::Type t) {
  auto d = mlir::dyn_cast_or_null<mlir::glm::DenseType>(t);
  if (!d)
    return 0;
  switch (d.getFormat()) {
  case mlir::glm::DenseFormat::Fp8Block128:
    return 1;
  case mlir::glm::DenseFormat::Fp8Row:
    return 2;
  case mlir::glm::DenseFormat::Mxfp8:
    return 3;
  default:
    return 0;
  }
}

} // namespace glmc

#endif // GLMC_MLIR_BINDINGS_H
