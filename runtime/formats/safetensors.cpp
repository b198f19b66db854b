//===- safetensors.cpp - zero-copy safetensors reader, and a writer -------===//
//
// The reader maps the file read-only and checks the whole header before any
// tensor is handed out, so a damaged or hostile file ends in an Error that
// names the file and the tensor instead of a crash or wrong numbers. The
// writer lays tensors out in insertion order, optionally aligned with
// `__pad.N` entries, and produces identical bytes for identical inputs.
//
//===----------------------------------------------------------------------===//
#include "runtime/formats/safetensors.h"
#include "runtime/base/strings.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/numeric.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace glm::rt {

namespace {
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000; // 100 MB

struct DTypeInfo {
  DType type;
  const char *name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 8},         {DType::F32, "F32", 4},
    {DType::F16, "F16", 2},         {DType::BF16, "BF16", 2},
    {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::I64, "I64", 8},         {DType::U64, "U64", 8},
    {DType::I32, "I32", 4},         {DType::U32, "U32", 4},
    {DType::I16, "I16", 2},         {DType::U16, "U16", 2},
    {DType::I8, "I8", 1},           {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};

bool isPadName(const std::string &name) { return name.rfind("__pad.", 0) == 0; }

/// FP8 E5M2 is the top byte of an fp16: exact through halfToFloat.
float e5m2ToFloat(uint8_t v) { return halfToFloat((uint16_t)(v << 8)); }

template <class T> T loadLE(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof(T)); // hosts are little-endian (x86, aarch64)
  return v;
}

/// numel x itemsize without overflow; false if it does not fit 64 bits.
bool byteCount(const std::vector<int64_t> &shape, size_t item, uint64_t &out) {
  unsigned __int128 n = item;
  for (int64_t d : shape) {
    n *= (uint64_t)d;
    if (n > (unsigned __int128)UINT64_MAX)
      return false;
  }
  out = (uint64_t)n;
  return true;
}

} // namespace

const char *dtypeName(DType t) {
  for (const auto &d : kDTypes)
    if (d.type == t)
      return d.name;
  return "?";
}

bool parseDType(const std::string &s, DType &out) {
  for (const auto &d : kDTypes)
    if (s == d.name) {
      out = d.type;
      return true;
    }
  return false;
}

size_t dtypeSize(DType t) {
  for (const auto &d : kDTypes)
    if (d.type == t)
      return d.size;
  return 0;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::vector<float> TensorView::toFloat() const {
  check(data != nullptr, "tensor ", name,
        ": no data (header-only file); open the pack with its weight files");
  size_t n = (size_t)numel();
  std::vector<float> out(n);
  const uint8_t *p = data;
  switch (dtype) {
  case DType::F64:
    for (size_t i = 0; i < n; ++i)
      out[i] = (float)loadLE<double>(p + 8 * i);
    break;
  case DType::F32:
    std::memcpy(out.data(), p, 4 * n);
    break;
  case DType::F16:
    for (size_t i = 0; i < n; ++i)
      out[i] = halfToFloat(loadLE<uint16_t>(p + 2 * i));
    break;
  case DType::BF16:
    for (size_t i = 0; i < n; ++i)
      out[i] = bf16ToFloat(loadLE<uint16_t>(p + 2 * i));
    break;
  case DType::F8_E4M3:
    for (size_t i = 0; i < n; ++i)
      out[i] = e4m3ToFloat(p[i]);
    break;
  case DType::F8_E5M2:
    for (size_t i = 0; i < n; ++i)
      out[i] = e5m2ToFloat(p[i]);
    break;
  case DType::I64:
    for (size_t i = 0; i < n; ++i)
      out[i] = (float)loadLE<int64_t>(p + 8 * i);
    break;
  case DType::U64:
    for (size_t i = 0; i < n; ++i)
      out[i] = (float)loadLE<uint64_t>(p + 8 * i);
    break;
  case DType::I32:
    for (size_t i = 0; i < n; ++i)
      out[i] = (float)loadLE<int32_t>(p + 4 * i);
    break;
  case DType::U32:
    for (size_t i = 0; i < n; ++i)
      out[i] = (float)loadLE<uint32_t>(p + 4 * i);
    break;
  case DType::I16:
    for (size_t i = 0; i < n; ++i)
      out[i] = (float)loadLE<int16_t>(p + 2 * i);
    break;
  case DType::U16:
    for (size_t i = 0; i < n; ++i)
      out[i] = (float)loadLE<uint16_t>(p + 2 * i);
    break;
  case DType::I8:
    for (size_t i = 0; i < n; ++i)
      out[i] = (float)(int8_t)p[i];
    break;
  case DType::U8:
    for (size_t i = 0; i < n; ++i)
      out[i] = (float)p[i];
    break;
  case DType::BOOL:
    for (size_t i = 0; i < n; ++i)
      out[i] = p[i] ? 1.0f : 0.0f;
    break;
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

std::shared_ptr<SafetensorsFile>
SafetensorsFile::open(const std::string &path, bool allowTruncatedData) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  // O_NONBLOCK: a FIFO in place of a pack file must not block the open (it
  // hung verify, compile and run); it is refused below as not a regular file.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  check(fd >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file (a device, pipe or directory); a "
               "safetensors file must be the file itself");
  }
  f->fileSize_ = (uint64_t)st.st_size;
  if (f->fileSize_ > 0) {
    void *m = ::mmap(nullptr, f->fileSize_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail(path, ": cannot map (", std::strerror(e), ")");
    }
    f->map_ = static_cast<const uint8_t *>(m);
    f->mapSize_ = f->fileSize_;
  }
  ::close(fd); // the mapping keeps the file alive

  const uint64_t size = f->fileSize_;
  check(size >= 8, path, ": truncated safetensors file (", size,
        " bytes; the 8-byte header length alone needs 8)");
  uint64_t n = loadLE<uint64_t>(f->map_);
  check(n >= 2, path, ": header length ", n,
        " is too small for a JSON object (file damaged?)");
  check(n <= kMaxHeaderBytes, path, ": header length ", n,
        " exceeds the 100 MB limit (not a safetensors file, or damaged)");
  check(n <= size - 8, path, ": header length ", n,
        " runs past the end of the file (", size,
        " bytes); the file is truncated or not safetensors");
  f->headerSize_ = 8 + n;
  const uint64_t dataSize = size - f->headerSize_;
  const uint8_t *dataBase = f->map_ + f->headerSize_;

  nlohmann::json root;
  try {
    root = nlohmann::json::parse(
        std::string(reinterpret_cast<const char *>(f->map_ + 8), n));
  } catch (const nlohmann::json::exception &e) {
    fail(path, ": safetensors header is not valid JSON (", e.what(), ")");
  }
  check(root.is_object(), path,
        ": safetensors header must be a JSON object, found ", root.type_name());

  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  uint64_t maxEnd = 0;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string &name = it.key();
    const auto &v = it.value();
    if (name == "__metadata__") {
      check(v.is_object(), path, ": __metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        check(m.value().is_string(), path, ": __metadata__ key \"", m.key(),
              "\" must be a string, found ", m.value().dump());
        f->meta_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const bool pad = isPadName(name);
    check(v.is_object(), path, ": tensor ", name,
          ": header entry must be an object");
    auto offs = v.find("data_offsets");
    check(offs != v.end() && offs->is_array() && offs->size() == 2 &&
              (*offs)[0].is_number_unsigned() &&
              (*offs)[1].is_number_unsigned(),
          path, ": tensor ", name,
          ": data_offsets must be two non-negative integers");
    uint64_t b = (*offs)[0].get<uint64_t>(), e = (*offs)[1].get<uint64_t>();
    check(b <= e, path, ": tensor ", name, ": data_offsets [", b, ", ", e,
          "] begin after end");
    maxEnd = std::max(maxEnd, e);
    spans.push_back({b, e, name});

    // Padding carries no tensor: only its byte range matters.
    if (pad)
      continue;
    auto dt = v.find("dtype");
    check(dt != v.end() && dt->is_string(), path, ": tensor ", name,
          ": missing dtype");
    TensorView t;
    t.name = name;
    check(parseDType(dt->get<std::string>(), t.dtype), path, ": tensor ", name,
          ": unknown dtype \"", dt->get<std::string>(),
          "\" (known: F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I64 U64 I32 U32 I16 "
          "U16 I8 U8 BOOL)");
    auto sh = v.find("shape");
    check(sh != v.end() && sh->is_array(), path, ": tensor ", name,
          ": missing shape");
    for (const auto &d : *sh) {
      check(d.is_number_unsigned(), path, ": tensor ", name,
            ": shape entries must be non-negative integers, found ", d.dump());
      check(d.get<uint64_t>() <= (uint64_t)INT64_MAX, path, ": tensor ", name,
            ": shape entry too large");
      t.shape.push_back((int64_t)d.get<uint64_t>());
    }
    uint64_t want = 0;
    check(byteCount(t.shape, dtypeSize(t.dtype), want), path, ": tensor ", name,
          ": shape ", shapeStr(t.shape), " overflows");
    check(want == e - b, path, ": tensor ", name, ": shape ", shapeStr(t.shape),
          " x ", dtypeName(t.dtype), " = ", want, " bytes but data_offsets [",
          b, ", ", e, "] hold ", e - b);
    t.dataBegin = b;
    t.fileOffset = f->headerSize_ + b;
    t.byteSize = e - b;
    f->tensors_.push_back(std::move(t));
  }

  const bool dataAbsent = allowTruncatedData && maxEnd > dataSize;
  if (!dataAbsent)
    for (const auto &s : spans)
      check(s.end <= dataSize, path, ": tensor ", s.name, ": data_offsets [",
            s.begin, ", ", s.end, "] run past the data section (", dataSize,
            " bytes); the file is truncated or its header lies: re-download "
            "it (glmc verify names every damaged file of a pack)");
  std::sort(spans.begin(), spans.end(), [](const Span &a, const Span &b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < spans.size(); ++i)
    check(spans[i].begin >= spans[i - 1].end || spans[i].begin == spans[i].end,
          path, ": tensors ", spans[i - 1].name, " and ", spans[i].name,
          " overlap (data_offsets [", spans[i - 1].begin, ", ",
          spans[i - 1].end, "] and [", spans[i].begin, ", ", spans[i].end,
          "])");

  // A stable order: by position in the file (the JSON object is unordered).
  std::sort(f->tensors_.begin(), f->tensors_.end(),
            [](const TensorView &a, const TensorView &b) {
              return a.dataBegin != b.dataBegin ? a.dataBegin < b.dataBegin
                                                : a.name < b.name;
            });
  for (size_t i = 0; i < f->tensors_.size(); ++i) {
    auto &t = f->tensors_[i];
    t.data = dataAbsent ? nullptr : dataBase + t.dataBegin;
    f->byName_[t.name] = i;
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_)
    ::munmap(const_cast<uint8_t *>(map_), mapSize_);
}

const TensorView *SafetensorsFile::find(const std::string &name) const {
  auto it = byName_.find(name);
  return it == byName_.end() ? nullptr : &tensors_[it->second];
}

const TensorView &SafetensorsFile::get(const std::string &name) const {
  const TensorView *t = find(name);
  check(t != nullptr, path_, ": no tensor named ", name);
  return *t;
}

const uint8_t *SafetensorsFile::bytes(uint64_t offset, uint64_t len) const {
  check(offset <= fileSize_ && len <= fileSize_ - offset, path_,
        ": byte range [", offset, ", +", len, ") lies outside the file (",
        fileSize_, " bytes); the file is truncated");
  return map_ + offset;
}

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

void SafetensorsWriter::setMetadata(const std::string &key,
                                    const std::string &value) {
  meta_[key] = value;
  laidOut_ = false;
}

void SafetensorsWriter::add(const std::string &name, DType dtype,
                            std::vector<int64_t> shape, const void *data,
                            size_t bytes) {
  check(data != nullptr || bytes == 0, "safetensors writer: tensor ", name,
        ": no data given (use addHeaderOnly for index-only files)");
  addEntry(name, dtype, std::move(shape), data, bytes, true);
}

void SafetensorsWriter::addEntry(const std::string &name, DType dtype,
                                 std::vector<int64_t> shape, const void *data,
                                 uint64_t bytes, bool hasData) {
  check(name != "__metadata__" && !isPadName(name),
        "safetensors writer: ", name, " is a reserved tensor name");
  check(!names_.count(name), "safetensors writer: tensor ", name,
        " added twice");
  uint64_t want = 0;
  check(byteCount(shape, dtypeSize(dtype), want) && want == bytes,
        "safetensors writer: tensor ", name, ": shape ", shapeStr(shape), " x ",
        dtypeName(dtype), " does not match ", bytes, " bytes");
  Entry e;
  e.name = name;
  e.dtype = dtype;
  e.shape = std::move(shape);
  e.size = bytes;
  e.hasData = hasData;
  if (hasData && bytes > 0) {
    const auto *p = static_cast<const uint8_t *>(data);
    e.bytes.assign(p, p + bytes);
  }
  names_.emplace(name, entries_.size());
  entries_.push_back(std::move(e));
  laidOut_ = false;
}

void SafetensorsWriter::addF32(const std::string &name,
                               std::vector<int64_t> shape,
                               const std::vector<float> &v) {
  add(name, DType::F32, std::move(shape), v.data(), v.size() * 4);
}

void SafetensorsWriter::addBF16(const std::string &name,
                                std::vector<int64_t> shape,
                                const std::vector<float> &v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    b[i] = floatToBf16(v[i]);
  add(name, DType::BF16, std::move(shape), b.data(), b.size() * 2);
}

void SafetensorsWriter::addHeaderOnly(const std::string &name, DType dtype,
                                      std::vector<int64_t> shape) {
  uint64_t bytes = 0;
  check(byteCount(shape, dtypeSize(dtype), bytes),
        "safetensors writer: tensor ", name, ": shape overflows");
  addEntry(name, dtype, std::move(shape), nullptr, bytes, false);
}

namespace {
/// A padding entry written before entry `before`.
struct PadEntry {
  size_t before;
  uint64_t begin, length;
};
} // namespace

void SafetensorsWriter::layout() {
  if (laidOut_)
    return;
  // The absolute offset of each tensor depends on the header length, which
  // depends on the offsets: iterate until the header fits its reserved size.
  uint64_t reserved = 8;
  for (int iter = 0; iter < 64; ++iter) {
    const uint64_t base = 8 + reserved;
    std::vector<PadEntry> pads;
    uint64_t pos = 0;
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (alignment_ > 0) {
        uint64_t abs = base + pos;
        uint64_t aligned = (abs + alignment_ - 1) / alignment_ * alignment_;
        if (aligned != abs) {
          pads.push_back({i, pos, aligned - abs});
          pos += aligned - abs;
        }
      }
      entries_[i].begin = pos;
      pos += entries_[i].size;
    }
    // Built as text, in insertion order: an ordered JSON object would make
    // the header quadratic in the tensor count (index-only packs hold 100k+).
    std::string text = "{";
    auto key = [&](const std::string &k) {
      if (text.size() > 1)
        text += ',';
      text += nlohmann::json(k).dump();
      text += ':';
    };
    auto tensor = [&](const char *dtype, const std::vector<int64_t> &shape,
                      uint64_t begin, uint64_t end) {
      text += "{\"dtype\":\"";
      text += dtype;
      text += "\",\"shape\":[";
      for (size_t d = 0; d < shape.size(); ++d)
        text += (d ? "," : "") + std::to_string(shape[d]);
      text += "],\"data_offsets\":[" + std::to_string(begin) + "," +
              std::to_string(end) + "]}";
    };
    if (!meta_.empty()) {
      key("__metadata__");
      text += nlohmann::json(meta_).dump();
    }
    size_t p = 0;
    for (size_t i = 0; i < entries_.size(); ++i) {
      for (; p < pads.size() && pads[p].before == i; ++p) {
        key("__pad." + std::to_string(p));
        tensor("U8", {int64_t(pads[p].length)}, pads[p].begin,
               pads[p].begin + pads[p].length);
      }
      const Entry &e = entries_[i];
      key(e.name);
      tensor(dtypeName(e.dtype), e.shape, e.begin, e.begin + e.size);
    }
    text += '}';
    uint64_t need = (text.size() + 7) / 8 * 8;
    if (need <= reserved) {
      text.append(reserved - text.size(), ' ');
      headerJson_ = std::move(text);
      laidOut_ = true;
      return;
    }
    reserved = need;
  }
  fail("safetensors writer: header layout did not converge");
}

uint64_t SafetensorsWriter::fileOffsetOf(const std::string &name) {
  layout();
  auto it = names_.find(name);
  check(it != names_.end(), "safetensors writer: no tensor named ", name);
  return 8 + headerJson_.size() + entries_[it->second].begin;
}

void SafetensorsWriter::write(const std::string &path, bool headerOnly) {
  layout();
  if (!headerOnly)
    for (const auto &e : entries_)
      check(e.hasData, path, ": tensor ", e.name,
            " was added without data; only a header-only write can hold it");
  fs::path p(path);
  // A directory (or device) named as the output would fail the rename and
  // leave PATH.tmp behind: refuse it before writing anything.
  std::error_code sec;
  check(!fs::exists(p, sec) || fs::is_regular_file(p, sec), path,
        ": exists and is not a regular file (",
        fs::is_directory(p, sec) ? "a directory" : "a special file",
        "); give the path of a .safetensors file to write");
  if (p.has_parent_path())
    fs::create_directories(p.parent_path());
  std::string tmp = path + ".tmp";
  // Whatever fails below, no PATH.tmp is left behind.
  struct RemoveTmp {
    const std::string &tmp;
    bool keep = false;
    ~RemoveTmp() {
      std::error_code ec;
      if (!keep)
        fs::remove(tmp, ec);
    }
  } cleanup{tmp};
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    check(out.good(), tmp, ": cannot create");
    uint64_t n = headerJson_.size();
    uint8_t len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = (uint8_t)(n >> (8 * i));
    out.write(reinterpret_cast<const char *>(len), 8);
    out.write(headerJson_.data(), (std::streamsize)n);
    if (!headerOnly) {
      uint64_t pos = 0;
      static const char zeros[4096] = {};
      for (const auto &e : entries_) {
        while (pos < e.begin) {
          uint64_t k = std::min<uint64_t>(sizeof zeros, e.begin - pos);
          out.write(zeros, (std::streamsize)k);
          pos += k;
        }
        out.write(reinterpret_cast<const char *>(e.bytes.data()),
                  (std::streamsize)e.size);
        pos += e.size;
      }
    }
    out.flush();
    check(out.good(), tmp, ": write failed (disk full?)");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  check(!ec, path, ": cannot rename from ", tmp, " (", ec.message(), ")");
  cleanup.keep = true; // renamed: nothing left under the temporary name
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string &dirOrFile,
                                                  bool allowTruncatedData) {
  SafetensorsCheckpoint c;
  fs::path p(dirOrFile);
  check(fs::exists(p), dirOrFile, ": no such file or directory");
  fs::path indexPath;
  std::vector<fs::path> singles;
  if (fs::is_directory(p)) {
    c.dir_ = p.string();
    if (fs::exists(p / "model.safetensors.index.json")) {
      indexPath = p / "model.safetensors.index.json";
    } else if (fs::exists(p / "model.safetensors")) {
      singles.push_back(p / "model.safetensors");
    } else {
      for (const auto &de : fs::directory_iterator(p))
        if (de.is_regular_file() && de.path().extension() == ".safetensors")
          singles.push_back(de.path());
      std::sort(singles.begin(), singles.end());
      check(!singles.empty(), dirOrFile,
            ": no model.safetensors, model.safetensors.index.json or other "
            "*.safetensors file in this directory");
    }
  } else {
    c.dir_ = p.has_parent_path() ? p.parent_path().string() : ".";
    std::string name = p.filename().string();
    if (name.size() > 11 && name.substr(name.size() - 11) == ".index.json")
      indexPath = p;
    else
      singles.push_back(p);
  }

  auto addFile = [&](const fs::path &fp) {
    c.files_.push_back(SafetensorsFile::open(fp.string(), allowTruncatedData));
    c.relNames_.push_back(fs::path(fp).lexically_relative(c.dir_).string());
    return c.files_.size() - 1;
  };

  if (!indexPath.empty()) {
    std::string text = readFileBounded(indexPath.string(), kMaxIndexJsonBytes,
                                       "the safetensors index");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception &e) {
      fail(indexPath.string(), ": not valid JSON (", e.what(), ")");
    }
    check(j.is_object() && j.contains("weight_map") &&
              j["weight_map"].is_object(),
          indexPath.string(), ": needs a \"weight_map\" object");
    std::map<std::string, size_t> fileIdx;
    // Open files in sorted order so the file list is deterministic.
    std::set<std::string> names;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      check(it.value().is_string(), indexPath.string(), ": weight_map entry ",
            it.key(), " must name a file");
      names.insert(it.value().get<std::string>());
    }
    for (const auto &fn : names) {
      fs::path fp = fs::path(c.dir_) / fn;
      check(fs::exists(fp), indexPath.string(), ": maps tensors to ", fn,
            ", which is missing from ", c.dir_);
      fileIdx[fn] = addFile(fp);
    }
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      size_t fi = fileIdx.at(it.value().get<std::string>());
      const TensorView *t = c.files_[fi]->find(it.key());
      check(t != nullptr, indexPath.string(), ": tensor ", it.key(),
            " is mapped to ", c.relNames_[fi], " but that file lacks it");
      c.index_[it.key()] = {fi, t};
    }
    return c;
  }

  for (const auto &fp : singles) {
    size_t fi = addFile(fp);
    for (const auto &t : c.files_[fi]->tensors()) {
      auto prev = c.index_.find(t.name);
      check(prev == c.index_.end(), dirOrFile, ": tensor ", t.name,
            " is in both ", c.relNames_[fi], " and ",
            prev == c.index_.end() ? "" : c.relNames_[prev->second.first],
            "; add a model.safetensors.index.json that picks one");
      c.index_[t.name] = {fi, &t};
    }
  }
  return c;
}

const TensorView *SafetensorsCheckpoint::find(const std::string &name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second.second;
}

const TensorView &SafetensorsCheckpoint::get(const std::string &name) const {
  const TensorView *t = find(name);
  check(t != nullptr, dir_, ": checkpoint has no tensor named ", name);
  return *t;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto &kv : index_)
    out.push_back(kv.first);
  return out;
}

std::string SafetensorsCheckpoint::fileOf(const std::string &name) const {
  auto it = index_.find(name);
  check(it != index_.end(), dir_, ": checkpoint has no tensor named ", name);
  return relNames_[it->second.first];
}

} // namespace glm::rt
