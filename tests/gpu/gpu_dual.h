//===- gpu_dual.h - one launch on the GPU and through its twin -----------===//
//
// Dual: a helper family's launch run on the device and through its C++
// twin (runtime/twins/) from the same initial buffers, then compared
// argument by argument (bits, or a stated relative tolerance). Shared by
// executor_helpers_gpu_test.cpp and flash_decode_gpu_test.cpp.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "gpu_test_util.h"

#include "runtime/twins/twin.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

namespace glm::gputest {

namespace twins = glm::rt::twins;

inline bool sameBits(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b);
  return glm::rt::floatToBits(a) == glm::rt::floatToBits(b);
}

/// One launch of a helper family on the device and through its twin on the
/// host, from the same initial buffers. Host buffers are 64-byte aligned
/// (device ones 256), so the kernels' alignment-dependent paths (MLA
/// chunked loads) are taken on both sides alike.
class Dual {
public:
  Dual(std::string family, unsigned threads,
       const std::map<std::string, std::string> &more = {})
      : family_(std::move(family)) {
    targs_["threads"] = std::to_string(threads);
    for (const auto &[k, v] : more)
      targs_[k] = v;
    std::map<std::string, std::string> a(targs_.begin(), targs_.end());
    spec_ = spec(family_, {a.begin(), a.end()});
  }
  /// A buffer with these initial contents on both sides (not yet an
  /// argument); returns its id for arg().
  template <class T> int hold(const std::vector<T> &v) {
    const size_t bytes = std::max<size_t>(1, v.size() * sizeof(T));
    Buf b;
    b.bytes = bytes;
    b.host.reset(
        static_cast<uint8_t *>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    std::memcpy(b.host.get(), v.data(), v.size() * sizeof(T));
    b.dev = std::make_unique<cuda::DeviceBuffer>(bytes);
    b.dev->upload(b.host.get(), bytes);
    bufs_.push_back(std::move(b));
    return (int)bufs_.size() - 1;
  }
  /// Buffer `id` at `byteOffset` as the next argument (the same buffer may
  /// be passed twice: in-place launches).
  Dual &arg(int id, size_t byteOffset = 0) {
    slots_.push_back(bufs_.at(id).dev->ptr() + byteOffset);
    twins::Arg a;
    a.p = bufs_.at(id).host.get() + byteOffset;
    targsIn_.push_back(a);
    argBuf_.push_back(id);
    return *this;
  }
  /// A buffer argument with these initial contents (inputs and outputs).
  template <class T> Dual &buf(const std::vector<T> &v) { return arg(hold(v)); }
  /// An output of n elements of T, NaN-poisoned (0xFF bytes) on both sides.
  template <class T> Dual &out(size_t n) {
    std::vector<uint8_t> p(n * sizeof(T), 0xFF);
    return buf(p);
  }
  Dual &null() { return scalar<uint64_t>(0, twins::Arg{}); }
  /// The KV families' trailing (pages, pageShift) of an unpaged cache.
  Dual &unpaged() { return null().i32(0); }
  Dual &i32(int v) { return scalar(v, intArg(v)); }
  Dual &i64(long long v) { return scalar(v, intArg(v)); }
  Dual &u64(unsigned long long v) { return scalar(v, intArg((int64_t)v)); }
  Dual &u32(unsigned v) { return scalar(v, intArg(v)); }
  Dual &f64(double v) { return scalar(v, fltArg(v)); }
  Dual &f32(float v) { return scalar(v, fltArg(v)); }

  void run(unsigned gx, unsigned gy, unsigned gz, unsigned bx,
           unsigned smem = 0) {
    ASSERT_EQ(slots_.size(),
              glm::codegen::familyInfo(family_).kernelParams.size())
        << family_ << ": argument count differs from the family's ABI";
    CUfunction f = kernel(spec_);
    if (smem > 48 * 1024)
      GLM_CU(cuFuncSetAttribute(
          f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(smem)));
    std::vector<void *> p;
    for (auto &s : slots_)
      p.push_back(&s);
    cuda::launch(f, gx, gy, gz, bx, smem, nullptr, p.data());
    GLM_CU(cuCtxSynchronize());
    twins::Launch l;
    l.family = family_;
    l.templateArgs = &targs_;
    l.grid[0] = gx;
    l.grid[1] = gy;
    l.grid[2] = gz;
    l.block[0] = bx;
    l.smemBytes = smem;
    l.args = targsIn_;
    twins::TwinFn fn = twins::findTwin(family_);
    ASSERT_NE(fn, nullptr) << family_;
    fn(l);
  }
  /// Argument k (a buffer) after the launch: device and twin copies.
  template <class T> std::vector<T> gpu(size_t k) const {
    const Buf &b = bufs_.at(argBuf_.at(k));
    std::vector<T> v(b.bytes / sizeof(T));
    b.dev->download(v.data(), v.size() * sizeof(T));
    return v;
  }
  template <class T> std::vector<T> host(size_t k) const {
    const Buf &b = bufs_.at(argBuf_.at(k));
    std::vector<T> v(b.bytes / sizeof(T));
    std::memcpy(v.data(), b.host.get(), v.size() * sizeof(T));
    return v;
  }
  /// Reports argument k, device against twin: floats (NaN = unwritten on
  /// both sides, equal), tol 0 = same bits.
  void check(size_t k, const std::string &name, double tol,
             const std::string &why = "") const {
    const std::vector<float> g = gpu<float>(k), h = host<float>(k);
    if (tol == 0) {
      size_t bad = 0;
      for (size_t i = 0; i < g.size(); ++i)
        bad += !sameBits(g[i], h[i]);
      reportExact(family_ + " " + name, bad, g.size());
      return;
    }
    Err e;
    size_t nanDiff = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::isnan(g[i]) || std::isnan(h[i])) {
        nanDiff += std::isnan(g[i]) != std::isnan(h[i]);
        continue;
      }
      e.add(g[i], h[i]);
    }
    EXPECT_EQ(nanDiff, 0u) << family_ << " " << name
                           << ": written elements differ";
    report(family_ + " " + name, e, tol, why);
  }
  /// Same for fp64 outputs.
  void checkD(size_t k, const std::string &name, double tol,
              const std::string &why = "") const {
    const std::vector<double> g = gpu<double>(k), h = host<double>(k);
    if (tol == 0) {
      size_t bad = std::memcmp(g.data(), h.data(), g.size() * 8) != 0;
      if (bad) {
        bad = 0;
        for (size_t i = 0; i < g.size(); ++i)
          bad += std::memcmp(&g[i], &h[i], 8) != 0;
      }
      reportExact(family_ + " " + name, bad, g.size());
      return;
    }
    Err e;
    for (size_t i = 0; i < g.size(); ++i)
      if (!(std::isnan(g[i]) && std::isnan(h[i])))
        e.add(g[i], h[i]);
    report(family_ + " " + name, e, tol, why);
  }
  /// Integer outputs, element for element.
  void checkInts(size_t k, const std::string &name) const {
    const std::vector<int> g = gpu<int>(k), h = host<int>(k);
    size_t bad = 0;
    for (size_t i = 0; i < g.size(); ++i)
      bad += g[i] != h[i];
    reportExact(family_ + " " + name, bad, g.size());
  }

private:
  struct Free {
    void operator()(uint8_t *p) const { std::free(p); }
  };
  struct Buf {
    size_t bytes = 0;
    std::unique_ptr<uint8_t, Free> host;
    std::unique_ptr<cuda::DeviceBuffer> dev;
  };
  static twins::Arg intArg(int64_t v) {
    twins::Arg a;
    a.i = v;
    return a;
  }
  static twins::Arg fltArg(double v) {
    twins::Arg a;
    a.f = v;
    return a;
  }
  template <class T> Dual &scalar(T v, twins::Arg a) {
    uint64_t s = 0;
    std::memcpy(&s, &v, sizeof v);
    slots_.push_back(s);
    targsIn_.push_back(a);
    argBuf_.push_back(-1);
    return *this;
  }

  std::string family_;
  KernelSpec spec_;
  glm::plan::KeyValues targs_;
  std::vector<Buf> bufs_;
  std::vector<uint64_t> slots_;
  std::vector<twins::Arg> targsIn_;
  std::vector<int> argBuf_;
};

} // namespace glm::gputest
