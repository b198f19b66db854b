//===- gpu_test_util.h - shared helpers of the GPU kernel tests -----------===//
//
// Kernels are built exactly as a plan builds them (KernelSpec -> codegen
// generateSource -> compileWithNvrtc for the device's arch), compiled in
// parallel per suite and cached per process. Every case prints one line
//   [gpu-case] NAME max_abs=... max_ref=... rel=... tol=... PASS|FAIL
// so one device run reports every kernel's error (scripts/gpu collects the
// lines into its summary). Outputs are poisoned with NaN before each launch
// so an unwritten element fails the comparison.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/codegen.h"
#include "runtime/base/error.h"
#include "runtime/base/parallel.h"
#include "runtime/base/numeric.h"
#include "runtime/cuda/cuda_api.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace glm::gputest {

namespace cuda = glm::rt::cuda;
using glm::codegen::KernelSpec;

inline bool haveDevice() {
  static const bool have = [] {
    try {
      return cuda::CudaDevice::count() > 0;
    } catch (const std::exception &) {
      return false;
    }
  }();
  return have;
}

/// The process's device (context current on the main thread).
inline cuda::CudaDevice &device() {
  static cuda::CudaDevice dev(0);
  return dev;
}

/// Makes the device's primary context current on this thread. Every test
/// calls it first: allocation before any kernel lookup needs a context, and
/// tests that own a CudaDevice of their own release theirs when done.
inline void ensureContext() {
  device();
  CUcontext cur = nullptr;
  GLM_CU(cuCtxGetCurrent(&cur));
  if (!cur) {
    CUdevice d = 0;
    GLM_CU(cuDeviceGet(&d, 0));
    GLM_CU(cuDevicePrimaryCtxRetain(&cur, d));
    GLM_CU(cuCtxSetCurrent(cur));
  }
}

inline KernelSpec spec(const std::string &family,
                       std::map<std::string, std::string> args) {
  KernelSpec s;
  s.family = family;
  for (auto &[k, v] : args)
    s.args[k] = v;
  return s;
}

/// Compiled kernels, keyed by kernel name.
class KernelCache {
public:
  static KernelCache &get() {
    static KernelCache c;
    return c;
  }
  /// Compiles the specs not compiled yet, on several threads (NVRTC is
  /// reentrant); modules are loaded on the calling thread.
  void prefetch(const std::vector<KernelSpec> &specs) {
    const std::string arch = device().arch();
    std::vector<std::pair<std::string, std::string>> todo; // name, source
    for (const KernelSpec &s : specs) {
      std::string name = glm::codegen::kernelName(s);
      bool seen = cubins_.count(name) != 0;
      for (auto &t : todo)
        seen |= t.first == name;
      if (!seen)
        todo.emplace_back(name, glm::codegen::generateSource(s));
    }
    std::vector<std::string> errors(todo.size());
    std::vector<std::vector<uint8_t>> bins(todo.size());
    glm::rt::parallelFor(
        int64_t(todo.size()), 1,
        int(std::min(8u, std::max(1u, std::thread::hardware_concurrency()))),
        [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) {
            try {
              bins[i] = glm::codegen::compileWithNvrtc(todo[i].second,
                                                       todo[i].first, arch)
                            .cubin;
            } catch (const std::exception &ex) {
              errors[i] = ex.what();
            }
          }
        });
    for (size_t i = 0; i < todo.size(); ++i) {
      if (!errors[i].empty()) {
        failed_[todo[i].first] = errors[i];
        continue;
      }
      cubins_[todo[i].first] = bins[i];
    }
  }
  /// The kernel's function; throws with the NVRTC log when it did not build.
  CUfunction function(const KernelSpec &s) {
    const std::string name = glm::codegen::kernelName(s);
    if (!cubins_.count(name) && !failed_.count(name))
      prefetch({s});
    auto f = failed_.find(name);
    if (f != failed_.end())
      glm::rt::fail("kernel ", name, " did not compile: ", f->second);
    auto m = modules_.find(name);
    if (m == modules_.end()) {
      const auto &bin = cubins_.at(name);
      std::vector<char> image(bin.begin(), bin.end());
      m = modules_.emplace(name, std::make_unique<cuda::Module>(image)).first;
    }
    return m->second->function(name);
  }

private:
  std::map<std::string, std::vector<uint8_t>> cubins_;
  std::map<std::string, std::string> failed_;
  std::map<std::string, std::unique_ptr<cuda::Module>> modules_;
};

inline CUfunction kernel(const KernelSpec &s) {
  return KernelCache::get().function(s);
}

/// Kernel parameters by value (pointers as CUdeviceptr, ints, floats).
class Args {
public:
  template <class T> Args &operator<<(T v) {
    static_assert(sizeof(T) <= 8, "scalar kernel parameters only");
    uint64_t s = 0;
    std::memcpy(&s, &v, sizeof v);
    slots_.push_back(s);
    return *this;
  }
  Args &ptr(const cuda::DeviceBuffer &b) { return *this << b.ptr(); }
  Args &null() { return *this << CUdeviceptr(0); }
  void launch(CUfunction f, unsigned gx, unsigned gy, unsigned bx,
              unsigned smem = 0) {
    cuda::checkParamCount(f, slots_.size());
    if (smem > 0) // static + dynamic may pass 48 KB (opt-in on sm_90)
      GLM_CU(cuFuncSetAttribute(
          f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(smem)));
    std::vector<void *> p;
    for (auto &s : slots_)
      p.push_back(&s);
    cuda::launch(f, gx, gy, 1, bx, smem, nullptr, p.data());
    GLM_CU(cuCtxSynchronize());
  }

private:
  std::vector<uint64_t> slots_;
};

template <class T> cuda::DeviceBuffer upload(const std::vector<T> &v) {
  cuda::DeviceBuffer b(std::max<size_t>(1, v.size() * sizeof(T)));
  if (!v.empty())
    b.upload(v.data(), v.size() * sizeof(T));
  return b;
}
/// An output buffer of n elements filled with 0xFF bytes (NaN as float).
template <class T> cuda::DeviceBuffer poisoned(size_t n) {
  cuda::DeviceBuffer b(std::max<size_t>(1, n * sizeof(T)));
  GLM_CU(cuMemsetD8(b.ptr(), 0xFF, b.size()));
  return b;
}
/// Benches: the median wall time in ms of `reps` calls of once(), after one
/// warm call (Args::launch waits for the kernel).
template <class F> double medianMs(F &&once, int reps = 5) {
  once();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - t0)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
/// Benches: a buffer's 32-bit words from fill_random (a hash of the word's
/// index, AND mask: e.g. 0xBBFFBBFF keeps fp16 pairs finite, |x| < 1).
inline void fillRandomWords(const cuda::DeviceBuffer &b, unsigned mask) {
  Args a;
  a.ptr(b) << (long long)(b.size() / 4) << 0x5EEDull << mask;
  a.launch(kernel(spec("fill_random", {{"threads", "256"}})), 4096, 1, 256);
}

template <class T> std::vector<T> download(const cuda::DeviceBuffer &b,
                                          size_t n) {
  std::vector<T> v(n);
  if (n)
    b.download(v.data(), n * sizeof(T));
  return v;
}

/// Error of a GPU result against a float64 reference.
struct Err {
  double maxAbs = 0, maxRef = 0;
  size_t count = 0, nonFinite = 0, worst = 0;
  void add(double gpu, double ref) {
    if (!std::isfinite(gpu)) {
      ++nonFinite;
    } else {
      double d = std::fabs(gpu - ref);
      if (d > maxAbs) {
        maxAbs = d;
        worst = count;
      }
    }
    maxRef = std::max(maxRef, std::fabs(ref));
    ++count;
  }
  /// max|gpu - ref| / max|ref|.
  double rel() const { return maxRef > 0 ? maxAbs / maxRef : maxAbs; }
};

/// Prints the case line and records a failure when rel() > tol (tol 0:
/// bit-exact, i.e. maxAbs must be 0) or anything was not finite.
inline void report(const std::string &name, const Err &e, double tol,
                   const std::string &why = "") {
  const bool pass = e.count > 0 && e.nonFinite == 0 &&
                    (tol == 0 ? e.maxAbs == 0 : e.rel() <= tol);
  std::printf("[gpu-case] %-48s n=%zu max_abs=%.3g max_ref=%.3g rel=%.3g "
              "tol=%s nonfinite=%zu %s\n",
              name.c_str(), e.count, e.maxAbs, e.maxRef, e.rel(),
              tol == 0 ? "exact" : std::to_string(tol).c_str(), e.nonFinite,
              pass ? "PASS" : "FAIL");
  std::fflush(stdout);
  EXPECT_TRUE(pass) << name << ": max|d|=" << e.maxAbs << " (element "
                    << e.worst << ") rel " << e.rel() << " > tol " << tol
                    << ", non-finite " << e.nonFinite << " of " << e.count
                    << (why.empty() ? "" : " (" + why + ")");
}
/// A pass/fail case without a numeric error (selections, indices).
inline void reportExact(const std::string &name, size_t mismatches,
                        size_t count) {
  const bool pass = mismatches == 0 && count > 0;
  std::printf("[gpu-case] %-48s n=%zu mismatches=%zu tol=exact %s\n",
              name.c_str(), count, mismatches, pass ? "PASS" : "FAIL");
  std::fflush(stdout);
  EXPECT_TRUE(pass) << name << ": " << mismatches << " of " << count
                    << " differ";
}

/// Values rounded to the storage type dt (0 f32, 1 f16, 2 bf16) and that
/// storage's bytes.
inline float roundTo(int dt, float v) {
  if (dt == 1)
    return glm::rt::roundToHalf(v);
  if (dt == 2)
    return glm::rt::bf16ToFloat(glm::rt::floatToBf16(v));
  return v;
}
inline std::vector<uint8_t> storeAs(int dt, const std::vector<float> &v) {
  std::vector<uint8_t> out(v.size() * (dt == 0 ? 4 : 2));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == 0) {
      std::memcpy(&out[4 * i], &v[i], 4);
    } else {
      uint16_t h = dt == 1 ? glm::rt::floatToHalf(v[i])
                           : glm::rt::floatToBf16(v[i]);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}
inline const char *dtName(int dt) {
  return dt == 0 ? "f32" : dt == 1 ? "f16" : "bf16";
}

/// Normal random floats, rounded to storage type dt.
inline std::vector<float> randn(std::mt19937 &rng, size_t n, float sd = 1.0f,
                                int dt = 0) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto &x : v)
    x = roundTo(dt, d(rng));
  return v;
}

/// In place: y = H128 x / sqrt(128) on each 128-block of v (float64).
inline void hadamard128(double *v, size_t n) {
  for (size_t b = 0; b < n; b += 128) {
    double *p = v + b;
    for (int len = 1; len < 128; len <<= 1)
      for (int i = 0; i < 128; i += 2 * len)
        for (int j = i; j < i + len; ++j) {
          double a = p[j], c = p[j + len];
          p[j] = a + c;
          p[j + len] = a - c;
        }
    for (int i = 0; i < 128; ++i)
      p[i] /= std::sqrt(128.0);
  }
}

/// Skips the whole suite without a device.
#define GLM_GPU_SUITE_SETUP                                                    \
  static void SetUpTestSuite() {                                               \
    if (!::glm::gputest::haveDevice())                                         \
      GTEST_SKIP() << "no CUDA device";                                        \
  }                                                                            \
  void SetUp() override {                                                      \
    if (!::glm::gputest::haveDevice())                                         \
      GTEST_SKIP() << "no CUDA device";                                        \
    ::glm::gputest::ensureContext();                                           \
  }

} // namespace glm::gputest
