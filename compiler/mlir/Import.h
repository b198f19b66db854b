//===- Import.h - pack (config + manifest + index) → glm module -*- C++ -*-===//
//
// Builds the model-level glm module of a pack: its files, every weight with
// its byte ranges, one expert bank per MoE layer, the manifest's widths and
// func.func @decode_step. Reads headers and indexes only (Pack::open with
// indexOnly): never a weight byte. Works for the HF, EXL3 and exlr8 layouts.
//
//===----------------------------------------------------------------------===//
#ifndef GLMC_MLIR_IMPORT_H
#define GLMC_MLIR_IMPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <memory>
#include <string>

namespace glm::rt {
class Pack;
}

namespace glmc {

struct ImportOptions {
  std::string manifest; // exlr8 manifest name or path ("" = the pack's only)
  int width = 0;        // exlr8: one width for every half (0 = manifest)
  /// Also build the MTP draft graph (glmc compile --draft mtp): the ops
  /// after glm.draft_begin in the step; an error without an MTP layer.
  bool draft = false;
  /// When set, the opened pack is handed here instead of freed: a
  /// full-size index is ~10^6 small allocations, ~0.5 s to free, which
  /// `glmc compile` does on another thread while the passes run.
  std::unique_ptr<::glm::rt::Pack> *keepPack = nullptr;
};

/// Opens `dir` index-only and imports it. On bad input emits a diagnostic
/// located in config.json / the manifest with a note saying what to do, and
/// returns null.
mlir::OwningOpRef<mlir::ModuleOp> importPack(mlir::MLIRContext &ctx,
                                             const std::string &dir,
                                             const ImportOptions &opt = {});

/// Imports an open pack; `manifestName` is recorded in the module.
mlir::OwningOpRef<mlir::ModuleOp> importModel(mlir::MLIRContext &ctx,
                                              const glm::rt::Pack &pack,
                                              const std::string &manifestName,
                                              bool draft = false);

} // namespace glmc

#endif // GLMC_MLIR_IMPORT_H
