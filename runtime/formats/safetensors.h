//===- safetensors.h - zero-copy safetensors reader, and a writer ---------===//
//
// SafetensorsFile maps a file read-only and validates its header completely
// before any tensor is touched: header length bounds, JSON, known dtypes,
// shape x dtype = byte length, offsets inside the file, no overlaps,
// `__metadata__` string map, `__pad.*` entries skipped. Errors name the file
// and the tensor.
//
// Thread-safety: a SafetensorsFile is immutable after open; share freely.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace glm::rt {

// clang-format off
enum class DType : uint8_t {
  F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, U64, I32, U32, I16, U16, I8, U8,
  BOOL
};
// clang-format on
/// Safetensors dtype string ("F32", "F8_E4M3", ...) <-> DType.
const char *dtypeName(DType t);
bool parseDType(const std::string &s, DType &out);
size_t dtypeSize(DType t);

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t dataBegin = 0;  // offset relative to the data section
  uint64_t fileOffset = 0; // absolute offset in the file (header included)
  uint64_t byteSize = 0;
  const uint8_t *data = nullptr; // null for a header-only (index-only) file
  int64_t numel() const;
  /// Converts any float dtype (F32/F16/BF16/F8/F64) or integer dtype to F32.
  std::vector<float> toFloat() const;
};

class SafetensorsFile {
public:
  /// Opens and validates. `allowTruncatedData` accepts a file whose data
  /// section is missing (header-only index files of `--index-only` packs);
  /// tensors then have data == nullptr.
  static std::shared_ptr<SafetensorsFile> open(const std::string &path,
                                               bool allowTruncatedData = false);
  ~SafetensorsFile();

  const std::string &path() const { return path_; }
  const std::vector<TensorView> &tensors() const { return tensors_; }
  const TensorView *find(const std::string &name) const;
  /// Like find, but throws Error naming the file when missing.
  const TensorView &get(const std::string &name) const;
  const std::map<std::string, std::string> &metadata() const { return meta_; }
  uint64_t headerSize() const { return headerSize_; } // 8 + JSON length
  uint64_t fileSize() const { return fileSize_; }
  /// Raw bytes [offset, offset+len) of the file (absolute offsets); throws
  /// Error naming the file when out of range or data is absent.
  const uint8_t *bytes(uint64_t offset, uint64_t len) const;

private:
  SafetensorsFile() = default;
  std::string path_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> byName_;
  std::map<std::string, std::string> meta_;
  uint64_t headerSize_ = 0, fileSize_ = 0;
  const uint8_t *map_ = nullptr;
  size_t mapSize_ = 0;
};

/// Builds a safetensors file in memory-order; tensors keep insertion order.
class SafetensorsWriter {
public:
  /// `alignment` pads every tensor's absolute file offset with `__pad.N`
  /// entries (exlr8 aligns to 64 KiB); 0 = packed (8-byte header alignment).
  explicit SafetensorsWriter(uint64_t alignment = 0) : alignment_(alignment) {}
  void setMetadata(const std::string &key, const std::string &value);
  void add(const std::string &name, DType dtype, std::vector<int64_t> shape,
           const void *data, size_t bytes);
  void addF32(const std::string &name, std::vector<int64_t> shape,
              const std::vector<float> &v);
  /// Stores `v` as BF16 (round to nearest even).
  void addBF16(const std::string &name, std::vector<int64_t> shape,
               const std::vector<float> &v);
  /// A tensor whose bytes are not kept: only a header-only write() accepts
  /// it (index-only packs of full-size geometry hold no weight bytes).
  void addHeaderOnly(const std::string &name, DType dtype,
                     std::vector<int64_t> shape);
  size_t size() const { return entries_.size(); }
  /// Absolute file offset at which tensor `name` will start (valid after all
  /// adds; computed by layout()).
  uint64_t fileOffsetOf(const std::string &name);
  /// Writes the file; header-only when `headerOnly` (index-only packs).
  void write(const std::string &path, bool headerOnly = false);

private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
    uint64_t size = 0; // bytes.size(), or the size of a header-only one
    bool hasData = true;
    uint64_t begin = 0; // relative to data section
  };
  void layout();
  void addEntry(const std::string &name, DType dtype,
                std::vector<int64_t> shape, const void *data, uint64_t bytes,
                bool hasData);
  uint64_t alignment_;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> meta_;
  std::map<std::string, size_t> names_; // name -> index in entries_
  std::string headerJson_; // padded with spaces to a multiple of 8
  bool laidOut_ = false;
};

/// A checkpoint of one or more safetensors files: a single file, a directory
/// with `model.safetensors`, or `model.safetensors.index.json` (weight_map).
class SafetensorsCheckpoint {
public:
  /// A directory without either opens every `*.safetensors` in it (sorted);
  /// a tensor name found twice is an error. `allowTruncatedData` as for
  /// SafetensorsFile::open.
  static SafetensorsCheckpoint open(const std::string &dirOrFile,
                                    bool allowTruncatedData = false);
  const std::string &dir() const { return dir_; }
  const TensorView *find(const std::string &name) const;
  const TensorView &get(const std::string &name) const;
  std::vector<std::string> names() const;
  /// The file that holds tensor `name`, relative to the checkpoint dir.
  std::string fileOf(const std::string &name) const;
  const std::vector<std::shared_ptr<SafetensorsFile>> &files() const {
    return files_;
  }
  /// files()[i] relative to dir().
  const std::vector<std::string> &relNames() const { return relNames_; }

private:
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::vector<std::string> relNames_; // files_[i] relative to dir_
  std::map<std::string, std::pair<size_t, const TensorView *>> index_;
};

} // namespace glm::rt
