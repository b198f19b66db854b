//===- packtools.h - writing packs: synth, quantize (no MLIR) -------------===//
//
// `glmc synth` = a random Hugging Face model of a preset geometry (tiny or the
// full glm53), then `glmc quantize` of it into the requested layout with our
// trellis encoder. Index-only mode (full-size geometry) writes config,
// tokenizer, manifests and indexes but no weight bytes: the compiler needs
// none. Writers own their layout's file names (shared/specs/*.md).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/formats/pack.h"
#include "runtime/model/config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace glmc {

/// config.json text of a preset: "tiny" (a few MB, runs anywhere; exercises
/// sparse selection, shared indexer layers, dense and MoE layers), "glm53"
/// (shared/configs/glm53.config.json geometry), "flash-tiny" (a few MB
/// GLM-5.3-Flash: KDA and DSA layers, dense and MoE, mHC, an MTP layer and a
/// 1-block vision tower) or "flash" (glm53-architecture.md §1b geometry).
std::string presetConfigJson(const std::string &preset);
/// glm53 and flash: weights only with --index-only.
bool presetIsFullSize(const std::string &preset);

/// Writes DIR/config.json, DIR/tokenizer.json (+ tokenizer_config.json,
/// generation_config.json, chat_template.jinja) and, unless indexOnly, random
/// weights as Hugging Face safetensors (BF16 or F32) with a
/// model.safetensors.index.json: the causal LM's tensors and, where the
/// config has them, its MTP layers and vision tower as a release ships them. `layers` > 0 keeps only the first `layers`
/// decoder layers of the preset (num_hidden_layers and the per-layer lists
/// cut to match): a full-width model that fits one GPU, for benchmarks.
void writeRandomHfModel(const std::string &preset, uint64_t seed,
                        const std::string &dir, bool indexOnly,
                        int layers = 0);

/// The preset's config.json text with only its first `layers` decoder layers
/// (see writeRandomHfModel); throws when `layers` exceeds the preset's.
std::string truncatedConfigJson(const std::string &configText, int layers);

/// Writes hashes/<path>.sha256 (sha256sum's "HEX  NAME" line) for every
/// file of the pack in `dir`, as releases publish them: `glmc verify` then
/// covers every byte, also those the format does not checksum.
void writeHashSidecars(const std::string &dir);

/// Copies config.json, tokenizer and template files from src to dst.
void copyModelSideFiles(const std::string &srcDir, const std::string &dstDir);

struct QuantizeOptions {
  /// Widths: exl3 = one K for every tensor if bits > 0, else a deterministic
  /// mix across experts and projections; exlr8 = the set of widths written
  /// (each half stored at every width), default {2, 3, 4}.
  double bits = 0;
  /// exl3 "mosaic": every quantized tensor of decoder layer l at
  /// layerBits[l % size] (half-integers with mul1); overrides `bits` for
  /// layer tensors. Empty = `bits` or the mixed allocation.
  std::vector<double> layerBits;
  std::vector<int> widths;
  std::string codebook = "mcg"; // exl3 only; exlr8 is always MCG + E4M3
  uint64_t seed = 1234;
  int threads = 0;
  bool indexOnly = false; // write indexes/headers, no weight bytes
};

/// Quantizes a Hugging Face model (source may be null when indexOnly: shapes
/// come from config alone) into an EXL3 pack in outDir.
void quantizeToExl3(const glm::rt::ModelConfig &cfg,
                    const glm::rt::Pack *source, const std::string &outDir,
                    const QuantizeOptions &opt);
/// Same into an exlr8 v2 pack: .kK expert files, layer index files, dense
/// records, vocab file and manifests (one per width set + "mixed").
void quantizeToExlr8(const glm::rt::ModelConfig &cfg,
                     const glm::rt::Pack *source, const std::string &outDir,
                     const QuantizeOptions &opt);

} // namespace glmc
