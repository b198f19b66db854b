//===- Tuning.h - the launch tunings of one compile -----------------------===//
//
// `glmc compile --moe-trellis-tuning / --dense-trellis-tuning` reach
// glm-emit-kernels as pass options; it records them on the module as the
// attribute glm.tuning {moe_trellis = "...", dense_trellis = "..."} ("" =
// the defaults of codegen/*_abi.h), and glm-emit-plan reads them back from
// there, so a plan's kernels (template arguments) and its launch dims and
// scratch come from the same tuning. The plan records the effective values
// in its compile options.
//
//===----------------------------------------------------------------------===//
#ifndef GLMC_MLIR_TUNING_H
#define GLMC_MLIR_TUNING_H

#include "codegen/tuning.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace glmc {

/// Tokens a kda_chunk step of GLM-5.3-Flash's KDA prefill takes (the
/// family's largest: fewer, longer sequential steps; its exponentials stay
/// finite up to 32 tokens of g > -5).
constexpr int kKdaPrefillChunk = 32;

struct Tunings {
  std::string moeText, denseText; // as given; "" = the defaults

  ::glm::codegen::MoeTrellisTuning moe(int64_t hidden) const {
    return moeText.empty() ? ::glm::codegen::defaultMoeTrellisTuning(hidden)
                           : ::glm::codegen::parseMoeTrellisTuning(moeText);
  }
  ::glm::codegen::DenseTrellisTuning dense() const {
    return denseText.empty() ? ::glm::codegen::defaultDenseTrellisTuning()
                             : ::glm::codegen::parseDenseTrellisTuning(denseText);
  }
  /// Throws Error naming the option when a given text is malformed.
  void validate() const {
    if (!moeText.empty())
      ::glm::codegen::parseMoeTrellisTuning(moeText);
    if (!denseText.empty())
      ::glm::codegen::parseDenseTrellisTuning(denseText);
  }
};

inline void setTunings(mlir::ModuleOp m, const Tunings &t) {
  mlir::Builder b(m.getContext());
  m->setAttr("glm.tuning",
             b.getDictionaryAttr(
                 {b.getNamedAttr("moe_trellis", b.getStringAttr(t.moeText)),
                  b.getNamedAttr("dense_trellis",
                                 b.getStringAttr(t.denseText))}));
}

inline Tunings tuningsOf(mlir::ModuleOp m) {
  Tunings t;
  if (auto d = m->getAttrOfType<mlir::DictionaryAttr>("glm.tuning")) {
    if (auto s = d.getAs<mlir::StringAttr>("moe_trellis"))
      t.moeText = s.str();
    if (auto s = d.getAs<mlir::StringAttr>("dense_trellis"))
      t.denseText = s.str();
  }
  return t;
}

} // namespace glmc

#endif // GLMC_MLIR_TUNING_H
