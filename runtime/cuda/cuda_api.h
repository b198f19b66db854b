//===- cuda_api.h - thin RAII over the CUDA driver API ---------------------===//
//
// Every driver call goes through GLM_CU, which turns a
// failure into glm::rt::Error naming the call and the error string, so GPU
// errors reach main as one line like every other error.
// Thread-safety: objects are owned by one thread; the context is current on
// the thread that created the CudaDevice.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace glm::rt::cuda {

void checkCu(CUresult r, const char *call, const char *file, int line);
#define GLM_CU(call) ::glm::rt::cuda::checkCu((call), #call, __FILE__, __LINE__)

/// The device of this process: primary context made current on construction.
class CudaDevice {
public:
  explicit CudaDevice(int ordinal = 0);
  ~CudaDevice();
  CudaDevice(const CudaDevice &) = delete;
  CudaDevice &operator=(const CudaDevice &) = delete;
  int ordinal() const { return ordinal_; }
  /// "sm_90" for compute capability 9.0.
  std::string arch() const;
  std::string name() const;
  int smCount() const;
  static int count();

private:
  int ordinal_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
};

/// Owning device allocation (cuMemAlloc; never managed memory).
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&o) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept;
  CUdeviceptr ptr() const { return ptr_; }
  size_t size() const { return size_; }
  void upload(const void *src, size_t bytes, size_t offset = 0);
  void download(void *dst, size_t bytes, size_t offset = 0) const;
  void zero();

private:
  CUdeviceptr ptr_ = 0;
  size_t size_ = 0;
};

/// PTX -> CUBIN for the device of `ctx` through the driver's JIT linker;
/// callable from any thread (makes `ctx` current there). `name` names the
/// kernel in errors, with the JIT's log.
std::vector<char> jitPtx(CUcontext ctx, const std::string &ptx,
                         const std::string &name);

/// A loaded module (CUBIN or PTX image) and lookups of its kernels.
class Module {
public:
  explicit Module(const std::vector<char> &image);
  ~Module();
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;
  CUfunction function(const std::string &name) const;

private:
  CUmodule mod_ = nullptr;
};

/// Parameters kernel `f` takes (cuFuncGetParamInfo; cached per function).
size_t kernelParamCount(CUfunction f);
/// Throws Error unless a hand-built launch passes `given` parameters to `f`:
/// a list one short makes cuLaunchKernel read past it (a crash at best).
void checkParamCount(CUfunction f, size_t given);

/// Launch with kernel-parameter pointers (cuLaunchKernel).
void launch(CUfunction f, unsigned gridX, unsigned gridY, unsigned gridZ,
            unsigned blockX, unsigned smem, CUstream stream, void **params);

/// Elapsed milliseconds between two events recorded around `fn`'s work.
class Timer {
public:
  Timer();
  ~Timer();
  void start(CUstream s = nullptr);
  float stopMs(CUstream s = nullptr);

private:
  CUevent a_ = nullptr, b_ = nullptr;
};

/// The middle element (upper median) of `v`; 0 when empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// Median milliseconds of `fn` (work enqueued on s) after one warm-up; the
/// repetitions adapt so one case takes about `budgetMs` (3..maxReps).
template <class F>
double timeMedianMs(CUstream s, int maxReps, double budgetMs, F fn) {
  Timer t;
  fn(); // warm-up
  GLM_CU(cuStreamSynchronize(s));
  t.start(s);
  fn();
  const double first = t.stopMs(s);
  const int reps = int(std::clamp(budgetMs / std::max(first, 1e-3), 3.0,
                                  double(std::max(3, maxReps))));
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) {
    t.start(s);
    fn();
    v.push_back(t.stopMs(s));
  }
  return median(v);
}

} // namespace glm::rt::cuda
