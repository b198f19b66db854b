//===- pack.h - one directory in, any pack layout out ---------------------===//
//
// The read-side contract shared by the compiler (importers read only headers
// and indexes: no weight bytes) and the runtime (dequantize, upload). A Pack
// lists every weight under its Hugging Face name with its format, its byte
// ranges in the pack's files and, for trellis weights, the independently
// decodable parts (a whole EXL3 tensor, one exlr8 half or dense slice).
// Layouts: Hugging Face safetensors (BF16/F32/F16, FP8 block-128), EXL3
// (exllamav3), exlr8 v2. See shared/specs/exl3-format.md, exlr8-format.md.
//
// Thread-safety: a Pack is immutable after open; dequantize/verify may run
// concurrently.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/codec/trellis.h"
#include "runtime/model/config.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <string>
#include <vector>

namespace glm::rt {

enum class PackLayout : uint8_t { HuggingFace, Exl3, Exlr8 };
const char *packLayoutName(PackLayout l); // "hf" | "exl3" | "exlr8"

enum class WeightFormat : uint8_t {
  F32, F16, BF16,
  Fp8Block,  // E4M3 + block scales (HF official release, exlr8 format 4)
  Fp8Row,    // exlr8 format 5
  Mxfp8,     // exlr8 format 3
  Int4,      // exlr8 format 2
  Trellis,   // EXL3 tensor or exlr8 expert/dense trellis
};
const char *weightFormatName(WeightFormat f);

/// Bytes of one pack file; `file` is relative to the pack directory.
struct ByteRange {
  std::string file;
  uint64_t offset = 0; // absolute file offset
  uint64_t length = 0;
  std::string role;    // "trellis", "suh", "svh", "scale", "data", ...
};

/// One independently decodable trellis block of a weight.
struct TrellisPart {
  trellis::Width width;
  trellis::Codebook codebook = trellis::Codebook::Mcg;
  bool e4m3 = false;
  trellis::TileOrder order = trellis::TileOrder::RowMajor;
  int half = -1;        // exlr8 half index (0..15); -1 for a whole tensor
  /// The block of the HF weight [out, in] this part reconstructs.
  int64_t outBegin = 0, outCount = 0, inBegin = 0, inCount = 0;
  ByteRange trellisBytes;            // the packed tiles
  std::vector<ByteRange> sideBytes;  // suh/svh/block scales it reads
};

struct WeightInfo {
  std::string name;              // HF name: model.layers.3.mlp.experts.7.up_proj.weight
  std::vector<int64_t> shape;    // HF shape; [out, in] for linear weights
  WeightFormat format = WeightFormat::F32;
  std::vector<TrellisPart> parts;   // Trellis only
  std::vector<ByteRange> ranges;    // every byte range read (parts included)
  /// Layer (-1 for embed/lm_head/norm), expert (-1 = not an expert, E = shared
  /// in exlr8 numbering is reported as `shared = true`), projection 0/1/2.
  int layer = -1, expert = -1, projection = -1;
  bool shared = false;
  uint64_t bytes() const;        // sum of ranges' lengths
  double bitsPerWeight() const;  // trellis: weighted K; dense: dtype bits
};

struct PackOpenOptions {
  /// exlr8: manifest name ("mixed" -> manifests/exlr8-manifest-mixed.json) or
  /// a path; empty = the pack's only manifest, else a single width must exist.
  std::string manifest;
  /// exlr8: force one width for every half (overrides the manifest).
  int width = 0;
  /// Accept packs whose weight files are absent (compile from the index).
  bool indexOnly = false;
};

/// One finding of verify(): where and what.
struct VerifyIssue {
  std::string file;
  std::string object; // tensor, or "layer 3 expert 7 up half 5"
  uint64_t offset = 0;
  std::string message;
};

/// What vouches for a byte of a pack, strongest first: verify() records
/// which check covered which bytes so that `glmc verify` can say how many
/// bytes each kind covered and how many no check covers.
enum class CheckKind : uint8_t {
  Sha256,    // the release's SHA-256 sidecar over the whole file (hashes/)
  Xxh64,     // the format's xxh64 (exlr8 expert halves, dense blocks)
  Value,     // decoded and checked: finite, in a plausible range, signs +-1
  Structure, // parsed and checked against the rest: headers, index tables,
             // records, config.json, manifests
};
inline constexpr int kCheckKinds = 4;
const char *checkKindName(CheckKind k);

struct CoveredRange {
  std::string file; // relative to the pack directory
  uint64_t offset = 0, length = 0;
  CheckKind kind = CheckKind::Structure;
};

struct VerifyReport {
  uint64_t checkedObjects = 0, checkedBytes = 0;
  std::vector<VerifyIssue> issues;
  /// What verify recognised and deliberately left out (vision tower, MTP
  /// layers): one line each, printed by `glmc verify`; not damage.
  std::vector<std::string> notes;
  /// The bytes each check covered (damaged or not).
  std::vector<CoveredRange> covered;
  /// Bytes no reader uses: safetensors alignment padding.
  std::vector<CoveredRange> padding;
  bool ok() const { return issues.empty(); }
  void cover(const std::string &file, uint64_t offset, uint64_t length,
             CheckKind kind) {
    if (length)
      covered.push_back({file, offset, length, kind});
  }
};

/// verify()'s coverage over every regular file of the pack directory
/// (hidden entries skipped): each byte counts once, under its strongest
/// check.
struct CoverageSummary {
  uint64_t files = 0, totalBytes = 0;
  uint64_t byKind[kCheckKinds] = {};
  uint64_t unchecked = 0;        // bytes no check covers
  uint64_t uncheckedPadding = 0; // of those, padding no reader uses
  /// Files with unchecked bytes that are not padding, most bytes first.
  std::vector<std::pair<std::string, uint64_t>> uncheckedFiles;
};
CoverageSummary summarizeCoverage(const std::string &dir,
                                  const VerifyReport &rep);

class Pack {
public:
  virtual ~Pack() = default;
  /// Detects the layout of `dir` and opens it; throws Error naming the file.
  static std::unique_ptr<Pack> open(const std::string &dir,
                                    const PackOpenOptions &opt = {});
  static PackLayout detect(const std::string &dir);

  virtual PackLayout layout() const = 0;
  const std::string &dir() const { return dir_; }
  /// config.json; absent for a bare directory of safetensors files.
  const std::optional<ModelConfig> &config() const { return config_; }
  /// Every weight, in a stable order (layer, then name).
  virtual const std::vector<WeightInfo> &weights() const = 0;
  const WeightInfo *find(const std::string &name) const;
  const WeightInfo &get(const std::string &name) const; // throws Error
  /// Reconstructed weight, F32, Hugging Face orientation ([out, in]).
  virtual std::vector<float> dequantize(const std::string &name) const = 0;
  /// Checks checksums, shapes and dtypes against config and manifest.
  virtual VerifyReport
  verify(const std::function<void(uint64_t, uint64_t)> &progress = {}) const = 0;
  /// Content hash of what a plan depends on (config, manifest, index).
  virtual std::string indexHash() const = 0;
  std::string configHash() const;
  virtual std::string manifestHash() const { return ""; }

protected:
  /// The checks every layout shares, run at the end of verify(): the
  /// SHA-256 sidecars under hashes/ (a file whose hash differs is an issue,
  /// a file without a sidecar is no issue), and config.json (parsed and
  /// validated by key at open) as structure.
  void verifyCommon(VerifyReport &rep) const;

  std::string dir_;
  std::optional<ModelConfig> config_;

private:
  // find(): name -> index into weights(), built once on first use.
  mutable std::once_flag byNameOnce_;
  mutable std::unordered_map<std::string, size_t> byName_;
};

} // namespace glm::rt
