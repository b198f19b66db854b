//===- device_weights.cpp - a pack's weights on the device, as stored -----===//
#include "runtime/cuda/device_weights.h"

#include "runtime/base/error.h"
#include "runtime/base/numeric.h"
#include "runtime/base/progress.h"
#include "runtime/formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>

namespace glm::rt::cuda {
namespace {

constexpr uint64_t kStaging = 64ull << 20; // bytes per pinned buffer
constexpr uint64_t kAlign = 256;

uint64_t alignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

/// A device buffer of at least `bytes` (rounded up so random fills of
/// whole 32-bit words stay inside), zeroed.
DeviceBuffer zeroed(uint64_t bytes) {
  DeviceBuffer b(alignUp(std::max<uint64_t>(bytes, 4)));
  b.zero();
  return b;
}

const ByteRange &rangeWithRole(const WeightInfo &w,
                               std::initializer_list<const char *> roles) {
  for (const ByteRange &r : w.ranges)
    for (const char *role : roles)
      if (r.role == role)
        return r;
  fail("cuda executor: weight ", w.name, " (", weightFormatName(w.format),
       ") has no byte range with role ", *roles.begin(),
       "; the pack index is incomplete (glmc verify PACK)");
}

int plainDtype(WeightFormat f) {
  return f == WeightFormat::F32 ? 0 : f == WeightFormat::F16 ? 1 : 2;
}
uint64_t plainSize(int dt) { return dt == 0 ? 4 : 2; }
/// Random-mode masks keep values finite and below ~2.
uint32_t plainMask(int dt) { return dt == 0 ? 0x3F7FFFFFu : 0x3F7F3F7Fu; }
constexpr uint32_t kFp8Mask = 0x37373737u;

} // namespace

//===----------------------------------------------------------------------===//
// Uploader
//===----------------------------------------------------------------------===//

Uploader::Uploader(std::string packDir, bool random, CUfunction fillRandom,
                   CUfunction fillF32)
    : dir_(std::move(packDir)), random_(random), fillRandom_(fillRandom),
      fillF32_(fillF32) {}

Uploader::~Uploader() = default;

int Uploader::dtypeOf(const ByteRange &r, bool signs) {
  auto it = headers_.find(r.file);
  if (it == headers_.end()) {
    auto f =
        SafetensorsFile::open((std::filesystem::path(dir_) / r.file).string(),
                              /*allowTruncatedData=*/true);
    it = headers_.emplace(r.file, f).first;
  }
  for (const TensorView &t : it->second->tensors())
    if (r.offset >= t.fileOffset && r.offset < t.fileOffset + t.byteSize) {
      if (signs) {
        check(t.dtype == DType::I16 || t.dtype == DType::U16, r.file, ": ",
              t.name, " (packed signs) must be I16, found ",
              dtypeName(t.dtype));
        return 3;
      }
      switch (t.dtype) {
      case DType::F32:
        return 0;
      case DType::F16:
        return 1;
      case DType::BF16:
        return 2;
      default:
        fail(r.file, ": tensor ", t.name, " (", r.role, ") has dtype ",
             dtypeName(t.dtype),
             "; the cuda executor reads F32, F16 or BF16 "
             "vectors and scales");
      }
    }
  fail(r.file, ": no tensor holds byte offset ", r.offset, " (", r.role,
       "); the pack index does not match its files (glmc verify PACK)");
}

int64_t Uploader::elements(const ByteRange &r) {
  int dt = dtypeOf(r, false);
  return (int64_t)(r.length / plainSize(dt));
}

void Uploader::raw(const ByteRange &r, CUdeviceptr dst, uint64_t offset,
                   uint64_t length, uint32_t mask) {
  if (length == UINT64_MAX)
    length = r.length - offset;
  check(offset + length <= r.length, r.file, ": ", r.role, " range of ",
        r.length, " bytes has no bytes [", offset, ", ", offset + length, ")");
  jobs_.push_back(Job{r.file, r.offset + offset, length, dst, -1, mask});
  total_ += length;
}

void Uploader::f32(const ByteRange &r, CUdeviceptr dst, int64_t first,
                   int64_t count, bool signs) {
  const int dt = dtypeOf(r, signs);
  if (dt == 3) {
    // 16 signs per I16 word; first and count are multiples of 16.
    const int64_t n = (int64_t)r.length * 8;
    if (count < 0)
      count = n - first;
    check(first % 16 == 0 && count % 16 == 0 && first + count <= n, r.file,
          ": packed signs slice [", first, ", ", first + count,
          ") is not whole 16-sign words");
    jobs_.push_back(Job{r.file, r.offset + (uint64_t)first / 8,
                        (uint64_t)count / 8, dst, 3, 0});
    total_ += (uint64_t)count / 8;
    return;
  }
  const uint64_t es = plainSize(dt);
  const int64_t n = (int64_t)(r.length / es);
  if (count < 0)
    count = n - first;
  check(first >= 0 && first + count <= n, r.file, ": ", r.role, " has ", n,
        " elements, not [", first, ", ", first + count, ")");
  jobs_.push_back(Job{r.file, r.offset + (uint64_t)first * es,
                      (uint64_t)count * es, dst, dt, 0});
  total_ += (uint64_t)count * es;
}

void Uploader::run(const std::string &label) {
  Progress bar(label, total_, "bytes");
  if (random_) {
    uint64_t seed = 1;
    for (const Job &j : jobs_) {
      unsigned blocks = 1024, threads = 256;
      if (j.conv < 0) {
        long long words = (long long)((j.length + 3) / 4);
        unsigned long long s = ++seed * 0x9E3779B97F4A7C15ull;
        CUdeviceptr p = j.dst;
        void *args[] = {&p, &words, &s, (void *)&j.mask};
        launch(fillRandom_, blocks, 1, 1, threads, 0, nullptr, args);
      } else {
        long long n = j.conv == 3 ? (long long)j.length * 8
                                  : (long long)(j.length / plainSize(j.conv));
        float one = 1.0f;
        CUdeviceptr p = j.dst;
        void *args[] = {&p, &n, &one};
        launch(fillF32_, blocks, 1, 1, threads, 0, nullptr, args);
      }
      bar.advance(j.length);
    }
    GLM_CU(cuCtxSynchronize());
    bar.finish();
    jobs_.clear();
    return;
  }
  // File order: sequential reads.
  std::stable_sort(jobs_.begin(), jobs_.end(), [](const Job &a, const Job &b) {
    return a.file != b.file ? a.file < b.file : a.offset < b.offset;
  });
  void *pinned[2] = {nullptr, nullptr};
  CUevent ev[2] = {nullptr, nullptr};
  CUstream stream = nullptr;
  GLM_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 2; ++i) {
    GLM_CU(cuMemHostAlloc(&pinned[i], kStaging, 0));
    GLM_CU(cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING));
  }
  std::map<std::string, int> fds;
  auto cleanup = [&] {
    for (auto &kv : fds)
      ::close(kv.second);
    cuStreamSynchronize(stream);
    for (int i = 0; i < 2; ++i) {
      cuEventDestroy(ev[i]);
      cuMemFreeHost(pinned[i]);
    }
    cuStreamDestroy(stream);
  };
  try {
    int cur = 0;
    uint64_t cursor = 0;
    bool used[2] = {false, false};
    // Makes room for `n` bytes in the current staging buffer: when full,
    // marks it in flight and waits for the other one's copies.
    auto room = [&](uint64_t n) {
      if (cursor + n <= kStaging)
        return;
      GLM_CU(cuEventRecord(ev[cur], stream));
      used[cur] = true;
      cur ^= 1;
      if (used[cur])
        GLM_CU(cuEventSynchronize(ev[cur]));
      cursor = 0;
    };
    auto readAt = [&](const Job &j, uint64_t off, void *dst, uint64_t n) {
      int &fd = fds[j.file];
      const std::string path = (std::filesystem::path(dir_) / j.file).string();
      if (fd == 0) {
        fd = ::open(path.c_str(), O_RDONLY);
        check(fd >= 0, path, ": cannot open for reading the weights");
      }
      uint64_t done = 0;
      while (done < n) {
        ssize_t got =
            ::pread(fd, (char *)dst + done, n - done, (off_t)(off + done));
        check(got > 0, path, ": short read at offset ", off + done,
              " (the file is truncated or the pack is index-only; "
              "re-download it or run glmc verify)");
        done += (uint64_t)got;
      }
    };
    std::vector<uint8_t> tmp;
    for (const Job &j : jobs_) {
      if (j.conv < 0) {
        uint64_t done = 0;
        while (done < j.length) {
          uint64_t n = std::min<uint64_t>(j.length - done, kStaging);
          room(n);
          char *stage = (char *)pinned[cur] + cursor;
          readAt(j, j.offset + done, stage, n);
          GLM_CU(cuMemcpyHtoDAsync(j.dst + done, stage, n, stream));
          cursor += alignUp(n);
          done += n;
          bar.advance(n);
        }
        continue;
      }
      tmp.resize(j.length);
      readAt(j, j.offset, tmp.data(), j.length);
      const uint64_t n =
          j.conv == 3 ? j.length * 8 : j.length / plainSize(j.conv);
      check(n * 4 <= kStaging, j.file, ": vector of ", n,
            " elements is too long for the staging buffer");
      room(n * 4);
      float *stage = (float *)((char *)pinned[cur] + cursor);
      for (uint64_t i = 0; i < n; ++i) {
        if (j.conv == 3) {
          uint16_t word;
          std::memcpy(&word, tmp.data() + (i / 16) * 2, 2);
          stage[i] = (word >> (i % 16)) & 1 ? -1.0f : 1.0f;
        } else if (j.conv == 0) {
          std::memcpy(&stage[i], tmp.data() + i * 4, 4);
        } else {
          uint16_t h;
          std::memcpy(&h, tmp.data() + i * 2, 2);
          stage[i] = j.conv == 1 ? halfToFloat(h) : bf16ToFloat(h);
        }
      }
      GLM_CU(cuMemcpyHtoDAsync(j.dst, stage, n * 4, stream));
      cursor += alignUp(n * 4);
      bar.advance(j.length);
    }
    GLM_CU(cuStreamSynchronize(stream));
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  bar.finish();
  jobs_.clear();
}

//===----------------------------------------------------------------------===//
// Dense linears
//===----------------------------------------------------------------------===//

DeviceLinear makeLinear(const WeightInfo &w, Uploader &up, int64_t rowBegin,
                        int64_t rowCount) {
  check(w.shape.size() == 2, "cuda executor: weight ", w.name,
        " is not a matrix (shape rank ", w.shape.size(), ")");
  DeviceLinear L;
  L.name = w.name;
  L.format = w.format;
  L.out = w.shape[0];
  L.in = w.shape[1];
  const int64_t out = L.out, in = L.in;
  if (rowCount < 0) {
    rowBegin = 0;
    rowCount = out;
  }
  const bool slice = rowBegin != 0 || rowCount != out;
  auto sliced = [&] {
    L.rowBegin = rowBegin;
    L.out = rowCount;
    L.fullRows = false;
  };
  switch (w.format) {
  case WeightFormat::F32:
  case WeightFormat::F16:
  case WeightFormat::BF16: {
    L.dtype = plainDtype(w.format);
    const ByteRange &r = w.ranges.at(0);
    const uint64_t rowBytes = (uint64_t)in * plainSize(L.dtype);
    check(r.length == rowBytes * (uint64_t)out, r.file, ": ", w.name, " has ",
          r.length, " bytes, expected ", rowBytes * out, " for ",
          weightFormatName(w.format), " [", out, ", ", in, "]");
    if (slice)
      sliced();
    L.data = zeroed(rowBytes * L.out);
    up.raw(r, L.data.ptr(), rowBytes * L.rowBegin, rowBytes * L.out,
           plainMask(L.dtype));
    L.bytes = rowBytes * L.out;
    return L;
  }
  case WeightFormat::Fp8Block:
  case WeightFormat::Fp8Row:
  case WeightFormat::Mxfp8: {
    const ByteRange &d = rangeWithRole(w, {"fp8"});
    const ByteRange &s = rangeWithRole(w, {"scale", "e8m0"});
    check(d.length == (uint64_t)(out * in), d.file, ": ", w.name, " has ",
          d.length, " FP8 bytes, expected ", out * in);
    if (w.format == WeightFormat::Fp8Block && slice && rowBegin % 128 == 0)
      sliced();
    else if (w.format != WeightFormat::Fp8Block && slice)
      sliced();
    L.data = zeroed((uint64_t)L.out * in);
    up.raw(d, L.data.ptr(), (uint64_t)L.rowBegin * in, (uint64_t)L.out * in,
           kFp8Mask);
    L.bytes = (uint64_t)L.out * in;
    if (w.format == WeightFormat::Mxfp8) {
      check(in % 32 == 0 && s.length == (uint64_t)(out * (in / 32)), s.file,
            ": ", w.name, " e8m0 scales: expected [", out, ", ", in / 32,
            "] bytes");
      L.scale = zeroed((uint64_t)L.out * (in / 32));
      up.raw(s, L.scale.ptr(), (uint64_t)L.rowBegin * (in / 32),
             (uint64_t)L.out * (in / 32), 0x7E7E7E7Eu);
      L.bytes += (uint64_t)L.out * (in / 32);
    } else if (w.format == WeightFormat::Fp8Row) {
      L.scale = zeroed((uint64_t)L.out * 4);
      up.f32(s, L.scale.ptr(), L.rowBegin, L.out);
      L.bytes += (uint64_t)L.out * 4;
    } else {
      const int64_t sc = (in + 127) / 128;
      const int64_t r0 = L.rowBegin / 128;
      const int64_t r1 = (L.rowBegin + L.out + 127) / 128;
      L.scale = zeroed((uint64_t)(r1 - r0) * sc * 4);
      up.f32(s, L.scale.ptr(), r0 * sc, (r1 - r0) * sc);
      L.bytes += (uint64_t)(r1 - r0) * sc * 4;
    }
    return L;
  }
  case WeightFormat::Trellis: {
    check(!w.parts.empty(), "cuda executor: trellis weight ", w.name,
          " has no parts");
    const TrellisPart &p0 = w.parts[0];
    check(!p0.width.isHalfInteger(), "cuda executor: ", w.name, " has K ",
          p0.width.value(),
          "; half-integer widths have no GPU kernel yet "
          "(use --backend cpu)");
    L.K = (int)p0.width.value();
    L.codebook = (int)p0.codebook;
    L.e4m3 = p0.e4m3;
    const uint64_t tileBytes = 32ull * L.K;
    if (p0.half < 0) { // EXL3: one row-major tensor, padded to 128
      L.inPad = roundUp128(in);
      L.outPad = roundUp128(out);
      L.sI = (int)(L.outPad / 16);
      L.sI8 = (int)(L.outPad / 2);
      L.sJ8 = 8;
      const uint64_t len =
          (uint64_t)(L.inPad / 16) * (L.outPad / 16) * tileBytes;
      check(p0.trellisBytes.length == len, p0.trellisBytes.file, ": ", w.name,
            " trellis has ", p0.trellisBytes.length, " bytes, expected ", len,
            " (", L.inPad, " x ", L.outPad, " at K", L.K, ")");
      L.data = zeroed(len);
      up.raw(p0.trellisBytes, L.data.ptr());
      L.suh = zeroed((uint64_t)L.inPad * 4);
      L.svh = zeroed((uint64_t)L.outPad * 4);
      for (const ByteRange &s : p0.sideBytes) {
        const bool signs = s.role == "su" || s.role == "sv";
        const bool in = s.role == "suh" || s.role == "su";
        up.f32(s, (in ? L.suh : L.svh).ptr(), 0, in ? L.inPad : L.outPad,
               signs);
      }
      L.bytes = len;
      return L;
    }
    // exlr8 record: one part per 128-channel slice of the sharded side.
    check(in % 128 == 0 && out % 128 == 0,
          "cuda executor: exlr8 trellis "
          "record ",
          w.name, " [", out, ", ", in, "] is not 128-aligned");
    L.inPad = in;
    L.outPad = out;
    const bool side2 = p0.order == trellis::TileOrder::InMajor128;
    L.sI = 8;
    L.sI8 = side2 ? (int)(out / 2) : 64;
    L.sJ8 = side2 ? 64 : (int)(in / 2);
    const uint64_t len = p0.trellisBytes.length;
    check(len == (uint64_t)(side2 ? out : in) / 2 * tileBytes,
          p0.trellisBytes.file, ": ", w.name, " slice has ", len,
          " bytes, expected ", (side2 ? out : in) / 2 * tileBytes);
    L.data = zeroed(len * w.parts.size());
    for (size_t i = 0; i < w.parts.size(); ++i) {
      check(w.parts[i].trellisBytes.length == len &&
                (int)w.parts[i].width.value() == L.K,
            "cuda executor: ", w.name, " slices differ in size or width");
      up.raw(w.parts[i].trellisBytes, L.data.ptr() + i * len);
    }
    L.suh = zeroed((uint64_t)in * 4);
    L.svh = zeroed((uint64_t)out * 4);
    up.f32(rangeWithRole(w, {"suh"}), L.suh.ptr(), 0, in);
    up.f32(rangeWithRole(w, {"svh"}), L.svh.ptr(), 0, out);
    L.bytes = len * w.parts.size();
    return L;
  }
  default:
    fail("cuda executor: weight ", w.name, " has format ",
         weightFormatName(w.format),
         ", which has no GPU kernel yet (use "
         "--backend cpu)");
  }
}

//===----------------------------------------------------------------------===//
// Experts
//===----------------------------------------------------------------------===//

ExpertGroup makeExperts(const Pack &pack,
                        const std::vector<std::vector<std::string>> &names,
                        const std::vector<std::vector<bool>> &owned,
                        Uploader &up) {
  ExpertGroup G;
  const int64_t E = (int64_t)names.size();
  check(E > 0, "cuda executor: an expert group without experts");
  G.experts = E;
  std::vector<std::vector<const WeightInfo *>> W(E);
  for (int64_t e = 0; e < E; ++e)
    for (int p = 0; p < 3; ++p)
      W[e].push_back(&pack.get(names[e][p]));
  const WeightInfo &w0 = *W[0][0];
  const int64_t inter = w0.shape.at(0), hidden = w0.shape.at(1);
  G.hidden = hidden;
  for (int64_t e = 0; e < E; ++e)
    for (int p = 0; p < 3; ++p) {
      const WeightInfo &w = *W[e][p];
      std::vector<int64_t> want = p < 2 ? std::vector<int64_t>{inter, hidden}
                                        : std::vector<int64_t>{hidden, inter};
      check(w.shape == want && w.format == w0.format, "cuda executor: ", w.name,
            " differs in shape or format from ", w0.name,
            "; the experts of one layer must agree");
    }

  if (w0.format != WeightFormat::Trellis) {
    check(w0.format == WeightFormat::F32 || w0.format == WeightFormat::F16 ||
              w0.format == WeightFormat::BF16,
          "cuda executor: expert weight ", w0.name, " has format ",
          weightFormatName(w0.format),
          ", which has no GPU expert kernel yet "
          "(use --backend cpu)");
    G.kind = ExpertGroup::Plain;
    G.dtype = plainDtype(w0.format);
    G.inter = inter;
    G.halves = (inter + 127) / 128;
    const uint64_t mat = (uint64_t)inter * hidden * plainSize(G.dtype);
    DeviceBuffer *dst[3] = {&G.gate, &G.up, &G.down};
    for (int p = 0; p < 3; ++p) {
      *dst[p] = zeroed(mat * E);
      for (int64_t e = 0; e < E; ++e)
        up.raw(W[e][p]->ranges.at(0), dst[p]->ptr() + e * mat, 0, mat,
               plainMask(G.dtype));
    }
    std::vector<uint8_t> own((size_t)(E * G.halves));
    int64_t ownedHalves = 0;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t h = 0; h < G.halves; ++h) {
        own[e * G.halves + h] = owned[e][h] ? 1 : 0;
        ownedHalves += owned[e][h];
      }
    G.own = zeroed(own.size());
    G.own.upload(own.data(), own.size());
    G.bytesPerExpert =
        3.0 * (double)mat * (double)ownedHalves / (double)(E * G.halves);
    return G;
  }

  G.kind = ExpertGroup::Trellis;
  G.exl3 = w0.parts.size() == 1 && w0.parts[0].half < 0;
  G.codebook = (int)w0.parts[0].codebook;
  G.e4m3 = w0.parts[0].e4m3;
  G.inter = G.exl3 ? roundUp128(inter) : inter;
  G.halves = G.inter / 128;
  check(hidden % 128 == 0 && G.inter % 128 == 0 && G.halves <= 16,
        "cuda executor: experts of ", w0.name, " ([", inter, ", ", hidden,
        "]) need a hidden size that is a multiple of 128 and at most 16 "
        "halves of 128 channels");
  if (!G.exl3)
    check(inter == G.halves * 128 && (int64_t)w0.parts.size() == G.halves,
          "cuda executor: ", w0.name, " has ", w0.parts.size(), " halves for ",
          inter, " channels");
  const int64_t hb = hidden / 128;
  std::vector<uint64_t> tiles((size_t)E * 48, 0);
  std::vector<uint8_t> widths((size_t)E * 48, 0);
  bool kSeen[9] = {};
  // Tile storage: one buffer, every owned half (exlr8) or every tensor
  // with an owned half (EXL3) at a 256-byte aligned offset.
  struct Put {
    const ByteRange *r;
    uint64_t at;
  };
  std::vector<Put> puts;
  uint64_t total = 0;
  double ownedBytes = 0;
  std::vector<std::vector<uint64_t>> base(E, std::vector<uint64_t>(3, 0));
  for (int64_t e = 0; e < E; ++e)
    for (int p = 0; p < 3; ++p) {
      const WeightInfo &w = *W[e][p];
      for (const TrellisPart &part : w.parts) {
        check(!part.width.isHalfInteger() && (int)part.codebook == G.codebook &&
                  part.e4m3 == G.e4m3,
              "cuda executor: ", w.name,
              " mixes codebooks or has a "
              "half-integer width; one expert launch needs one codebook");
        kSeen[(int)part.width.value()] = true;
      }
      if (G.exl3) {
        bool any = false;
        for (int64_t h = 0; h < G.halves; ++h)
          any |= owned[e][h];
        if (!any)
          continue;
        base[e][p] = total;
        puts.push_back({&w.parts[0].trellisBytes, total});
        total += alignUp(w.parts[0].trellisBytes.length);
        ownedBytes +=
            (double)w.parts[0].trellisBytes.length *
            (double)std::count(owned[e].begin(), owned[e].end(), true) /
            (double)G.halves;
      } else {
        for (int64_t h = 0; h < G.halves; ++h) {
          if (!owned[e][h])
            continue;
          const ByteRange &r = w.parts[h].trellisBytes;
          puts.push_back({&r, total});
          total += alignUp(r.length);
          ownedBytes += (double)r.length;
        }
      }
    }
  G.tileBytes = zeroed(total);
  for (const Put &p : puts)
    up.raw(*p.r, G.tileBytes.ptr() + p.at);
  size_t next = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int p = 0; p < 3; ++p) {
      const WeightInfo &w = *W[e][p];
      if (G.exl3) {
        const int K = (int)w.parts[0].width.value();
        bool any = false;
        for (int64_t h = 0; h < G.halves; ++h)
          any |= owned[e][h];
        for (int64_t h = 0; h < G.halves; ++h) {
          widths[(e * 3 + p) * 16 + h] = (uint8_t)K;
          if (!owned[e][h])
            continue;
          // Half h: tile column block 8h (gate/up) or row block 8h (down).
          const uint64_t tile = p < 2 ? 8 * h : 8 * h * (hidden / 16);
          tiles[(e * 3 + p) * 16 + h] =
              G.tileBytes.ptr() + base[e][p] + tile * 32ull * K;
        }
        (void)any;
      } else {
        for (int64_t h = 0; h < G.halves; ++h) {
          widths[(e * 3 + p) * 16 + h] = (uint8_t)w.parts[h].width.value();
          if (owned[e][h])
            tiles[(e * 3 + p) * 16 + h] = G.tileBytes.ptr() + puts[next++].at;
        }
      }
    }
  G.tiles = zeroed(tiles.size() * 8);
  G.tiles.upload(tiles.data(), tiles.size() * 8);
  G.widths = zeroed(widths.size());
  G.widths.upload(widths.data(), widths.size());
  for (int k = 1; k <= 8; ++k)
    if (kSeen[k])
      G.widthDigits += std::to_string(k);
  G.bytesPerExpert = ownedBytes / (double)E;

  // Side tables (fp32).
  const int64_t I = G.inter;
  G.guSvh = zeroed((uint64_t)2 * E * I * 4);
  G.downSuh = zeroed((uint64_t)E * I * 4);
  if (G.exl3) {
    G.suhIn = zeroed((uint64_t)2 * E * hidden * 4);
    G.downSvh = zeroed((uint64_t)E * hidden * 4);
    for (int64_t e = 0; e < E; ++e)
      for (int p = 0; p < 3; ++p) {
        const TrellisPart &part = W[e][p]->parts[0];
        for (const ByteRange &s : part.sideBytes) {
          const bool signs = s.role == "su" || s.role == "sv";
          const bool inSide = s.role == "suh" || s.role == "su";
          CUdeviceptr dst;
          int64_t n;
          if (p < 2) {
            dst = inSide ? G.suhIn.ptr() + ((p * E + e) * hidden) * 4
                         : G.guSvh.ptr() + ((p * E + e) * I) * 4;
            n = inSide ? hidden : I;
          } else {
            dst = inSide ? G.downSuh.ptr() + (e * I) * 4
                         : G.downSvh.ptr() + (e * hidden) * 4;
            n = inSide ? I : hidden;
          }
          up.f32(s, dst, 0, n, signs);
        }
      }
    return G;
  }
  G.guSuBlock = zeroed((uint64_t)2 * E * hb * 4);
  G.downSvBlock = zeroed((uint64_t)E * hb * 4);
  auto side = [](const TrellisPart &part, const char *role) {
    for (const ByteRange &s : part.sideBytes)
      if (s.role == role)
        return &s;
    fail("cuda executor: an exlr8 half has no ", role, " side vector");
  };
  for (int64_t e = 0; e < E; ++e) {
    bool any = false;
    for (int64_t h = 0; h < G.halves; ++h)
      any |= owned[e][h];
    if (!any)
      continue;
    for (int p = 0; p < 3; ++p) {
      const WeightInfo &w = *W[e][p];
      for (int64_t h = 0; h < G.halves; ++h) {
        if (!owned[e][h])
          continue;
        const TrellisPart &part = w.parts[h];
        if (p < 2)
          up.f32(*side(part, "svh"),
                 G.guSvh.ptr() + ((p * E + e) * I + 128 * h) * 4, 0, 128);
        else
          up.f32(*side(part, "suh"), G.downSuh.ptr() + (e * I + 128 * h) * 4, 0,
                 128);
      }
      // One hidden-side block scale per expert projection: half 0's width
      // set (our writer stores the same block scales in every width set).
      const TrellisPart &p0 = w.parts[0];
      if (p < 2)
        up.f32(*side(p0, "su_block"),
               G.guSuBlock.ptr() + ((p * E + e) * hb) * 4, 0, hb);
      else
        up.f32(*side(p0, "sv_block"), G.downSvBlock.ptr() + (e * hb) * 4, 0,
               hb);
    }
  }
  return G;
}

void exlr8Signs(const WeightInfo &gate, const WeightInfo &down, Uploader &up,
                DeviceBuffer &signsIn, DeviceBuffer &signsOut) {
  const int64_t hidden = gate.shape.at(1);
  auto find = [](const WeightInfo &w, const char *role) {
    for (const ByteRange &s : w.parts.at(0).sideBytes)
      if (s.role == role)
        return s;
    fail("cuda executor: ", w.name, " has no ", role, " vector");
  };
  signsIn = zeroed((uint64_t)hidden * 4);
  signsOut = zeroed((uint64_t)hidden * 4);
  up.f32(find(gate, "signs.in"), signsIn.ptr(), 0, hidden);
  up.f32(find(down, "signs.out"), signsOut.ptr(), 0, hidden);
}

} // namespace glm::rt::cuda
