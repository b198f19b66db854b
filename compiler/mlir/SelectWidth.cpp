//===- SelectWidth.cpp - glm-select-width: manifest → width per part ------===//
//
// The manifest (exlr8: per-half gate/up widths, per-expert down widths; EXL3:
// per-tensor K from the quantization metadata) arrives as one glm.manifest
// op. This pass stamps each expert bank with its per-part widths and, when a
// layer uses one width, resolves the bank's type to it.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Passes.h"

#include "mlir/IR/Builders.h"
#include <map>

using namespace mlir;
using namespace mlir::glm;

namespace glmc {
#define GEN_PASS_DEF_GLMSELECTWIDTH
#include "compiler/mlir/Passes.h.inc"
} // namespace glmc

namespace {

/// 2.5, 3: a width as people write it.
static std::string bits(int32_t twice) {
  return twice % 2 ? std::to_string(twice / 2) + ".5"
                   : std::to_string(twice / 2);
}

struct SelectWidth : glmc::impl::GlmSelectWidthBase<SelectWidth> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto manifests = llvm::to_vector(module.getOps<ManifestOp>());
    if (manifests.size() > 1) {
      manifests[1].emitOpError() << "is the second manifest of the module";
      return signalPassFailure();
    }
    ManifestOp manifest = manifests.empty() ? ManifestOp() : manifests[0];
    std::map<int64_t, DenseI32ArrayAttr> byLayer;
    if (manifest)
      for (auto [layer, table] :
           llvm::zip(manifest.getLayers(), manifest.getWidths()))
        byLayer[layer] = cast<DenseI32ArrayAttr>(table);

    bool failed = false;
    for (ExpertsOp bank : module.getOps<ExpertsOp>()) {
      auto type = dyn_cast<TrellisType>(bank.getType());
      if (!type)
        continue; // dense experts (Hugging Face layout) have no width
      auto it = byLayer.find(bank.getLayer());
      if (it == byLayer.end()) {
        if (type.isResolved())
          continue;
        InFlightDiagnostic d = bank.emitOpError()
                               << "layer " << bank.getLayer()
                               << " has no width: the manifest"
                               << (manifest ? " does not list it" : " is absent");
        d.attachNote() << "pass --manifest NAME|FILE naming a manifest that "
                          "covers every MoE layer";
        failed = true;
        continue;
      }
      DenseI32ArrayAttr widths = it->second;
      if (static_cast<int64_t>(widths.size()) != bank.getNumParts()) {
        bank.emitOpError() << "manifest lists " << widths.size()
                           << " widths for layer " << bank.getLayer()
                           << ", the bank has " << bank.getNumParts()
                           << " parts";
        failed = true;
        byLayer.erase(it);
        continue;
      }
      bool allowed = true;
      for (auto [i, w] : llvm::enumerate(widths.asArrayRef()))
        if (allowed && !isAllowedWidth(w, type.getCodebook())) {
          bank.emitOpError() << "manifest width " << bits(w) << " of part "
                             << i << " is not allowed for codebook "
                             << stringifyCodebook(type.getCodebook());
          allowed = false;
        }
      if (!allowed) {
        failed = true;
        byLayer.erase(it);
        continue;
      }
      bank.setWidthsAttr(widths);
      ArrayRef<int32_t> w = widths.asArrayRef();
      bool uniform = llvm::all_equal(w);
      bank.setType(TrellisType::get(&getContext(), uniform ? w.front() : 0,
                                    type.getCodebook(), type.getOrder(),
                                    type.getE4m3()));
      byLayer.erase(it);
    }
    for (auto &[layer, widths] : byLayer) {
      (void)widths;
      manifest.emitOpError() << "lists layer " << layer
                             << ", which has no expert bank";
      failed = true;
    }
    if (failed)
      return signalPassFailure();
    if (manifest)
      manifest.erase();
  }
};

} // namespace
