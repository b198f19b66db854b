//===- exlr8_layout.h - exlr8 v2 names, geometry and a streaming writer ---===//
//
// Private to the exlr8 reader (exlr8_pack.cpp) and writer
// (compiler/packtools/exlr8_writer.cpp): the file and tensor names of
// shared/specs/exlr8-format.md §2, the manifest schema of §4, the dense
// record codes of §6, and a safetensors writer that lays a file out before any
// byte exists, so experts can be written as they are quantized and index-only
// packs stay sparse. Geometry (experts, hidden, intermediate) always comes
// from the files or the config: only the 128-channel block is a constant of
// the format.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/formats/safetensors.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace glm::rt::exlr8 {

/// Channels per half / per side-vector block / per Hadamard block.
constexpr int64_t kBlock = 128;

/// "experts/exlr8-layer-003.index.safetensors" (LLL zero-padded to 3 digits).
std::string indexFile(int64_t layer);
/// "experts/exlr8-layer-003.k3.safetensors".
std::string dataFile(int64_t layer, int k);
/// "dense/exlr8-dense-003.safetensors".
std::string denseFile(int64_t layer);
/// "dense/exlr8-vocab.safetensors".
const char *vocabFile();
/// "manifests/exlr8-manifest-<name>.json".
std::string manifestFile(const std::string &name);
/// "dense/exlr8-vision.safetensors": the vision tower (GLM-5.3-Flash), plain
/// tensors under their full Hugging Face names (glmc does not run it yet).
const char *visionFile();
/// "index-slices/tp<N>/k<K>/rank<r>.safetensors": rank r's part of every
/// layer index at width K for N ranks (the halves placed on it by §7's
/// rule), so a rank reads only what it serves.
std::string sliceFile(int tp, int k, int rank);
/// The tensor-parallel degrees index slices are written for (1 = the whole
/// index file).
inline constexpr int kSliceTps[] = {2, 3, 4};
/// §7: half h of expert row e in layer L lives on rank
/// (halves·e + h + L) mod N (16e with the release's 16 halves).
inline int ownerRank(int64_t halves, int64_t row, int64_t h, int64_t layer,
                     int tp) {
  return (int)((halves * row + h + layer) % tp);
}
/// "set_id": the weight set's identity, sha256 over the sorted lines
/// "<path> <size> <sha256>\n" of every file with a SHA-256 sidecar.
const char *setIdFile();
struct SetIdEntry {
  std::string rel;
  uint64_t size = 0;
  std::string sha256; // lower-case hex
};
std::string setIdOf(std::vector<SetIdEntry> files);

/// Projection p of an expert: 0 gate, 1 up, 2 down.
const char *projName(int p);
/// <prefix>layers.L.mlp.experts.e.{gate,up,down}_proj.weight; prefix is the
/// config's tensorPrefix() ("model." or Flash's "model.language_model.").
std::string expertWeightName(const std::string &prefix, int64_t layer,
                             int64_t expert, int p);
/// <prefix>layers.L.mlp.shared_experts.{gate,up,down}_proj.weight
std::string sharedWeightName(const std::string &prefix, int64_t layer, int p);
/// Index-file tensor of width K: "k3.<suffix>", or "shared.k3.<suffix>".
std::string widthTensor(bool shared, int k, const std::string &suffix);

/// Bytes of one half: 128 · hidden · K / 8 (= tiles · 32K, tiles = hidden/2).
inline uint64_t halfBytes(int64_t hidden, int k) {
  return (uint64_t)hidden * kBlock * k / 8;
}

/// Dense record codes (§6, record[0]).
enum DenseCode : int {
  kTrellis = 1, kInt4 = 2, kMxfp8 = 3, kFp8Block = 4, kFp8Row = 5,
  kBf16 = 6, kFp32 = 7
};
const char *denseCodeName(int code); // "TRELLIS", ... or "unknown"

/// "2,3,4" -> {2,3,4}; throws Error naming `what` on a bad list.
std::vector<int> parseWidths(const std::string &s, const std::string &what);
std::string formatWidths(const std::vector<int> &w);

/// A width choice per half (gate/up) or per expert (down), §4.
struct ManifestLayer {
  std::vector<std::vector<int>> gate, up; // [experts][halves]
  std::vector<int> down;                  // [experts]
  bool hasShared = false;
  std::vector<int> sharedGate, sharedUp;  // [halves]
  int sharedDown = 0;
};
struct Manifest {
  std::map<int64_t, ManifestLayer> layers;
};
/// Parses manifest JSON; entries given as one int are expanded to `halves`.
/// Errors name `source` and the key (layers.3.gate[7]).
Manifest parseManifest(const std::string &text, const std::string &source,
                       int64_t halves);

/// A safetensors file laid out before its bytes exist: tensors get absolute
/// offsets aligned to `alignment` (gaps filled by `__pad.N` entries), the data
/// section starts aligned too, and data is written in place with pwrite in
/// any order. Bytes never written read as zeros (the file is sized with
/// ftruncate, so index-only packs stay sparse).
class LaidOutFile {
public:
  explicit LaidOutFile(uint64_t alignment) : alignment_(alignment) {}
  ~LaidOutFile();
  LaidOutFile(const LaidOutFile &) = delete;
  LaidOutFile &operator=(const LaidOutFile &) = delete;

  void setMetadata(const std::string &key, const std::string &value);
  /// Adds a tensor; returns its id.
  size_t add(const std::string &name, DType dtype,
             const std::vector<int64_t> &shape);
  /// Freezes the layout (called by create/offset queries when needed).
  void layout();
  uint64_t fileOffset(size_t id);
  uint64_t byteSize(size_t id) const { return entries_.at(id).size; }
  uint64_t fileSize();
  /// Creates `path` (directories included): header, then the data section
  /// sized but unwritten; `headerOnly` writes the header alone.
  void create(const std::string &path, bool headerOnly = false);
  /// Writes `len` bytes at byte `at` of tensor `id`.
  void write(size_t id, const void *data, uint64_t len, uint64_t at = 0);
  void close();

private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t size = 0, begin = 0; // begin: relative to the data section
  };
  uint64_t alignment_;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> meta_;
  std::string header_; // JSON, padded with spaces
  uint64_t dataStart_ = 0, dataSize_ = 0;
  bool laidOut_ = false;
  int fd_ = -1;
  std::string path_;
};

} // namespace glm::rt::exlr8
