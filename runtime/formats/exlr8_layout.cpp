//===- exlr8_layout.cpp - exlr8 v2 names, manifest parser, laid-out file --===//
//
// Shared by the exlr8 reader and writer: see exlr8_layout.h.
//
//===----------------------------------------------------------------------===//
#include "runtime/formats/exlr8_layout.h"

#include "runtime/base/error.h"
#include "runtime/base/json_numbers.h"
#include "runtime/base/sha256.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sstream>
#include <unistd.h>

namespace glm::rt::exlr8 {

using json = nlohmann::json;

static std::string layerTag(int64_t layer) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%03lld", (long long)layer);
  return buf;
}

std::string indexFile(int64_t layer) {
  return "experts/exlr8-layer-" + layerTag(layer) + ".index.safetensors";
}
std::string dataFile(int64_t layer, int k) {
  return "experts/exlr8-layer-" + layerTag(layer) + ".k" + std::to_string(k) +
         ".safetensors";
}
std::string denseFile(int64_t layer) {
  return "dense/exlr8-dense-" + layerTag(layer) + ".safetensors";
}
const char *vocabFile() { return "dense/exlr8-vocab.safetensors"; }
std::string manifestFile(const std::string &name) {
  return "manifests/exlr8-manifest-" + name + ".json";
}

const char *visionFile() { return "dense/exlr8-vision.safetensors"; }
std::string sliceFile(int tp, int k, int rank) {
  return "index-slices/tp" + std::to_string(tp) + "/k" + std::to_string(k) +
         "/rank" + std::to_string(rank) + ".safetensors";
}
const char *setIdFile() { return "set_id"; }
std::string setIdOf(std::vector<SetIdEntry> files) {
  std::sort(files.begin(), files.end(),
            [](const SetIdEntry &a, const SetIdEntry &b) { return a.rel < b.rel; });
  std::string text;
  for (const auto &f : files)
    text += f.rel + " " + std::to_string(f.size) + " " + f.sha256 + "\n";
  Sha256 h;
  h.update(text.data(), text.size());
  return h.hexDigest();
}

const char *projName(int p) {
  static const char *names[] = {"gate", "up", "down"};
  return p >= 0 && p < 3 ? names[p] : "?";
}
std::string expertWeightName(const std::string &prefix, int64_t layer,
                             int64_t expert, int p) {
  return prefix + "layers." + std::to_string(layer) + ".mlp.experts." +
         std::to_string(expert) + "." + projName(p) + "_proj.weight";
}
std::string sharedWeightName(const std::string &prefix, int64_t layer, int p) {
  return prefix + "layers." + std::to_string(layer) + ".mlp.shared_experts." +
         projName(p) + "_proj.weight";
}
std::string widthTensor(bool shared, int k, const std::string &suffix) {
  return std::string(shared ? "shared." : "") + "k" + std::to_string(k) + "." +
         suffix;
}

const char *denseCodeName(int code) {
  switch (code) {
  case kTrellis: return "TRELLIS";
  case kInt4: return "INT4";
  case kMxfp8: return "MXFP8";
  case kFp8Block: return "FP8_BLOCK";
  case kFp8Row: return "FP8_ROW";
  case kBf16: return "BF16";
  case kFp32: return "FP32";
  default: return "unknown";
  }
}

std::vector<int> parseWidths(const std::string &s, const std::string &what) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    // Tolerate spaces around items ("2, 3, 4").
    size_t b = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
    check(b != std::string::npos, what, ": empty item in width list \"", s,
          "\"");
    item = item.substr(b, e - b + 1);
    check(item.find_first_not_of("0123456789") == std::string::npos &&
              item.size() <= 2,
          what, ": \"", s, "\" is not a comma-separated width list like 2,3,4");
    out.push_back((int)parseIntIn(item, 1, 8, what + ": width"));
  }
  return out;
}

std::string formatWidths(const std::vector<int> &w) {
  std::string s;
  for (size_t i = 0; i < w.size(); ++i)
    s += (i ? "," : "") + std::to_string(w[i]);
  return s;
}

//===----------------------------------------------------------------------===//
// Manifest
//===----------------------------------------------------------------------===//

static int manifestWidth(const json &v, const std::string &source,
                         const std::string &key) {
  std::optional<int64_t> k = jsonIntIn(v, 1, 8);
  check(k.has_value(), source, ": key ", key, " is ", v.dump(),
        "; allowed: an integer width in 1..8");
  return (int)*k;
}

/// One int (all halves) or a list of `halves` ints.
static std::vector<int> halfWidths(const json &v, const std::string &source,
                                   const std::string &key, int64_t halves) {
  if (v.is_number_integer())
    return std::vector<int>(halves, manifestWidth(v, source, key));
  check(v.is_array(), source, ": key ", key,
        " must be one width or a list of ", halves, " per-half widths");
  check((int64_t)v.size() == halves, source, ": key ", key, " lists ",
        v.size(), " widths but the pack has ", halves, " halves per projection");
  std::vector<int> out;
  for (size_t h = 0; h < v.size(); ++h)
    out.push_back(manifestWidth(v[h], source, key + "[" + std::to_string(h) +
                                              "]"));
  return out;
}

Manifest parseManifest(const std::string &text, const std::string &source,
                       int64_t halves) {
  json root;
  try {
    root = json::parse(text);
  } catch (const std::exception &e) {
    fail(source, ": not valid JSON (", e.what(),
         "); fix or regenerate the manifest");
  }
  check(root.is_object(), source, ": top level must be a JSON object");
  check(root.contains("layers") && root["layers"].is_object(), source,
        ": key \"layers\" (an object keyed by layer number) is missing");
  Manifest m;
  for (auto it = root["layers"].begin(); it != root["layers"].end(); ++it) {
    const std::string &ls = it.key();
    std::string base = "layers." + ls;
    check(!ls.empty() && ls.size() <= 6 &&
              ls.find_first_not_of("0123456789") == std::string::npos,
          source, ": key ", base, " is not a decimal layer number");
    const json &lj = it.value();
    check(lj.is_object(), source, ": key ", base, " must be an object");
    ManifestLayer L;
    for (const char *p : {"gate", "up"}) {
      std::string key = base + "." + p;
      check(lj.contains(p) && lj[p].is_array(), source, ": key ", key,
            " (one entry per expert) is missing or not a list");
      auto &dst = std::string(p) == "gate" ? L.gate : L.up;
      const json &a = lj[p];
      for (size_t e = 0; e < a.size(); ++e)
        dst.push_back(halfWidths(a[e], source,
                                 key + "[" + std::to_string(e) + "]", halves));
    }
    {
      std::string key = base + ".down";
      check(lj.contains("down") && lj["down"].is_array(), source, ": key ",
            key, " (one width per expert) is missing or not a list");
      const json &a = lj["down"];
      for (size_t e = 0; e < a.size(); ++e)
        L.down.push_back(
            manifestWidth(a[e], source, key + "[" + std::to_string(e) + "]"));
    }
    check(L.gate.size() == L.up.size() && L.up.size() == L.down.size(),
          source, ": key ", base, " lists ", L.gate.size(), " gate, ",
          L.up.size(), " up and ", L.down.size(),
          " down entries; they must all have one entry per expert");
    if (lj.contains("shared")) {
      const json &s = lj["shared"];
      std::string key = base + ".shared";
      check(s.is_object() && s.contains("gate") && s.contains("up") &&
                s.contains("down"),
            source, ": key ", key, " must be {gate, up, down}");
      L.hasShared = true;
      L.sharedGate = halfWidths(s["gate"], source, key + ".gate", halves);
      L.sharedUp = halfWidths(s["up"], source, key + ".up", halves);
      L.sharedDown = manifestWidth(s["down"], source, key + ".down");
    }
    m.layers[std::stoll(ls)] = std::move(L);
  }
  return m;
}

//===----------------------------------------------------------------------===//
// LaidOutFile
//===----------------------------------------------------------------------===//

LaidOutFile::~LaidOutFile() {
  if (fd_ >= 0)
    ::close(fd_);
}

void LaidOutFile::setMetadata(const std::string &key,
                              const std::string &value) {
  check(!laidOut_, "LaidOutFile: metadata after layout");
  meta_[key] = value;
}

size_t LaidOutFile::add(const std::string &name, DType dtype,
                        const std::vector<int64_t> &shape) {
  check(!laidOut_, "LaidOutFile: tensor ", name, " added after layout");
  Entry e;
  e.name = name;
  e.dtype = dtype;
  e.shape = shape;
  uint64_t n = 1;
  for (int64_t d : shape)
    n *= (uint64_t)d;
  e.size = n * dtypeSize(dtype);
  entries_.push_back(std::move(e));
  return entries_.size() - 1;
}

static json shapeJson(const std::vector<int64_t> &shape) {
  json a = json::array();
  for (int64_t d : shape)
    a.push_back(d);
  return a;
}

void LaidOutFile::layout() {
  if (laidOut_)
    return;
  uint64_t align = alignment_ ? alignment_ : 8;
  // Relative offsets first: with an aligned data start they are aligned
  // absolute offsets too, whatever the header's length.
  json hdr = json::object();
  if (!meta_.empty()) {
    json m = json::object();
    for (auto &kv : meta_)
      m[kv.first] = kv.second;
    hdr["__metadata__"] = m;
  }
  // nlohmann sorts object keys, which is harmless: offsets say where data is.
  uint64_t pos = 0;
  int pads = 0;
  for (auto &e : entries_) {
    uint64_t aligned = (pos + align - 1) / align * align;
    if (aligned != pos && e.size > 0) {
      json p;
      p["dtype"] = "U8";
      p["shape"] = json::array({(int64_t)(aligned - pos)});
      p["data_offsets"] = json::array({pos, aligned});
      hdr["__pad." + std::to_string(pads++)] = p;
      pos = aligned;
    }
    e.begin = pos;
    json t;
    t["dtype"] = dtypeName(e.dtype);
    t["shape"] = shapeJson(e.shape);
    t["data_offsets"] = json::array({e.begin, e.begin + e.size});
    hdr[e.name] = t;
    pos += e.size;
  }
  dataSize_ = pos;
  header_ = hdr.dump();
  uint64_t start = 8 + header_.size();
  uint64_t aligned = (start + align - 1) / align * align;
  header_.append(aligned - start, ' ');
  dataStart_ = aligned;
  laidOut_ = true;
}

uint64_t LaidOutFile::fileOffset(size_t id) {
  layout();
  return dataStart_ + entries_.at(id).begin;
}

uint64_t LaidOutFile::fileSize() {
  layout();
  return dataStart_ + dataSize_;
}

void LaidOutFile::create(const std::string &path, bool headerOnly) {
  layout();
  std::filesystem::path p(path);
  if (p.has_parent_path())
    std::filesystem::create_directories(p.parent_path());
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  check(fd_ >= 0, path, ": cannot create (", std::strerror(errno), ")");
  path_ = path;
  uint8_t len[8];
  uint64_t n = header_.size();
  for (int i = 0; i < 8; ++i)
    len[i] = (uint8_t)(n >> (8 * i));
  check(::pwrite(fd_, len, 8, 0) == 8 &&
            ::pwrite(fd_, header_.data(), n, 8) == (ssize_t)n,
        path, ": write failed (", std::strerror(errno), ")");
  if (!headerOnly)
    check(::ftruncate(fd_, (off_t)(dataStart_ + dataSize_)) == 0, path,
          ": cannot size the file (", std::strerror(errno), ")");
}

void LaidOutFile::write(size_t id, const void *data, uint64_t len,
                        uint64_t at) {
  check(fd_ >= 0, "LaidOutFile: write before create");
  const Entry &e = entries_.at(id);
  check(at + len <= e.size, path_, ": write past the end of tensor ", e.name);
  const uint8_t *src = static_cast<const uint8_t *>(data);
  uint64_t off = dataStart_ + e.begin + at;
  while (len > 0) {
    ssize_t w = ::pwrite(fd_, src, len, (off_t)off);
    check(w > 0, path_, ": write of tensor ", e.name, " failed (",
          std::strerror(errno), ")");
    src += w;
    off += (uint64_t)w;
    len -= (uint64_t)w;
  }
}

void LaidOutFile::close() {
  if (fd_ >= 0) {
    check(::close(fd_) == 0, path_, ": close failed (", std::strerror(errno),
          ")");
    fd_ = -1;
  }
}

} // namespace glm::rt::exlr8
