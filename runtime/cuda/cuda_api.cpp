//===- cuda_api.cpp -------------------------------------------------------===//
#include "runtime/cuda/cuda_api.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"


#include <cstdlib>
#include <map>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace glm::rt::cuda {

void checkCu(CUresult r, const char *call, const char *file, int line) {
  if (r == CUDA_SUCCESS)
    return;
  const char *name = nullptr, *msg = nullptr;
  cuGetErrorName(r, &name);
  cuGetErrorString(r, &msg);
  fail("CUDA call ", call, " failed: ", name ? name : "?", " (",
       msg ? msg : "no message", ") at ", fs::path(file).filename().string(),
       ":", line);
}

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal) {
  GLM_CU(cuInit(0));
  int n = count();
  check(ordinal >= 0 && ordinal < n, "CUDA device ", ordinal,
        " requested but only ", n, " device(s) are visible");
  GLM_CU(cuDeviceGet(&dev_, ordinal));
  GLM_CU(cuDevicePrimaryCtxRetain(&ctx_, dev_));
  GLM_CU(cuCtxSetCurrent(ctx_));
}

CudaDevice::~CudaDevice() {
  if (ctx_)
    cuDevicePrimaryCtxRelease(dev_);
}

int CudaDevice::count() {
  GLM_CU(cuInit(0));
  int n = 0;
  GLM_CU(cuDeviceGetCount(&n));
  return n;
}

std::string CudaDevice::arch() const {
  int major = 0, minor = 0;
  GLM_CU(cuDeviceGetAttribute(
      &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev_));
  GLM_CU(cuDeviceGetAttribute(
      &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev_));
  return "sm_" + std::to_string(major * 10 + minor);
}

std::string CudaDevice::name() const {
  char buf[256] = {0};
  GLM_CU(cuDeviceGetName(buf, sizeof buf, dev_));
  return buf;
}

int CudaDevice::smCount() const {
  int n = 0;
  GLM_CU(cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                              dev_));
  return n;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : size_(bytes) {
  if (bytes)
    GLM_CU(cuMemAlloc(&ptr_, bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_)
    cuMemFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer &&o) noexcept
    : ptr_(o.ptr_), size_(o.size_) {
  o.ptr_ = 0;
  o.size_ = 0;
}
DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&o) noexcept {
  if (this != &o) {
    if (ptr_)
      cuMemFree(ptr_);
    ptr_ = o.ptr_;
    size_ = o.size_;
    o.ptr_ = 0;
    o.size_ = 0;
  }
  return *this;
}
void DeviceBuffer::upload(const void *src, size_t bytes, size_t offset) {
  check(offset + bytes <= size_, "upload of ", bytes, " bytes at ", offset,
        " overruns a ", size_, "-byte device buffer");
  GLM_CU(cuMemcpyHtoD(ptr_ + offset, src, bytes));
}
void DeviceBuffer::download(void *dst, size_t bytes, size_t offset) const {
  check(offset + bytes <= size_, "download of ", bytes, " bytes at ", offset,
        " overruns a ", size_, "-byte device buffer");
  GLM_CU(cuMemcpyDtoH(dst, ptr_ + offset, bytes));
}
void DeviceBuffer::zero() {
  if (size_)
    GLM_CU(cuMemsetD8(ptr_, 0, size_));
}

std::vector<char> jitPtx(CUcontext ctx, const std::string &ptx,
                         const std::string &name) {
  GLM_CU(cuCtxSetCurrent(ctx));
  char log[4096] = {0};
  CUjit_option keys[] = {CU_JIT_ERROR_LOG_BUFFER,
                         CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {log, reinterpret_cast<void *>(sizeof log - 1)};
  CUlinkState link = nullptr;
  GLM_CU(cuLinkCreate(2, keys, values, &link));
  struct Guard {
    CUlinkState s;
    ~Guard() { cuLinkDestroy(s); }
  } guard{link};
  // The JIT reads PTX as a C string.
  CUresult r = cuLinkAddData(link, CU_JIT_INPUT_PTX,
                             const_cast<char *>(ptx.c_str()), ptx.size() + 1,
                             name.c_str(), 0, nullptr, nullptr);
  void *cubin = nullptr;
  size_t size = 0;
  if (r == CUDA_SUCCESS)
    r = cuLinkComplete(link, &cubin, &size);
  check(r == CUDA_SUCCESS, "the driver could not JIT the plan's PTX of kernel ",
        name, " (", static_cast<int>(r), "): ", log,
        "; recompile the plan with --kernel-binaries cubin, or update the "
        "driver");
  const char *p = static_cast<const char *>(cubin);
  return std::vector<char>(p, p + size); // the link state owns `cubin`
}

Module::Module(const std::vector<char> &image) {
  GLM_CU(cuModuleLoadData(&mod_, image.data()));
}
Module::~Module() {
  if (mod_)
    cuModuleUnload(mod_);
}
CUfunction Module::function(const std::string &name) const {
  CUfunction f = nullptr;
  CUresult r = cuModuleGetFunction(&f, mod_, name.c_str());
  check(r == CUDA_SUCCESS, "kernel \"", name,
        "\" is not in the loaded module (plan and kernel source disagree: "
        "re-run glmc compile)");
  return f;
}

size_t kernelParamCount(CUfunction f) {
  static std::mutex mu;
  static std::map<CUfunction, size_t> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(f);
  if (it != known.end())
    return it->second;
  size_t n = 0, offset = 0, size = 0;
  while (cuFuncGetParamInfo(f, n, &offset, &size) == CUDA_SUCCESS)
    ++n;
  known[f] = n;
  return n;
}

void checkParamCount(CUfunction f, size_t given) {
  const size_t want = kernelParamCount(f);
  check(given == want, "kernel launch with ", given,
        " parameters, the kernel takes ", want,
        " (a hand-built argument list out of step with its template's "
        "PARAMS)");
}

void launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
            unsigned smem, CUstream stream, void **params) {
  GLM_CU(cuLaunchKernel(f, gx, gy, gz, bx, 1, 1, smem, stream, params,
                        nullptr));
}

Timer::Timer() {
  GLM_CU(cuEventCreate(&a_, CU_EVENT_DEFAULT));
  GLM_CU(cuEventCreate(&b_, CU_EVENT_DEFAULT));
}
Timer::~Timer() {
  cuEventDestroy(a_);
  cuEventDestroy(b_);
}
void Timer::start(CUstream s) { GLM_CU(cuEventRecord(a_, s)); }
float Timer::stopMs(CUstream s) {
  GLM_CU(cuEventRecord(b_, s));
  GLM_CU(cuEventSynchronize(b_));
  float ms = 0;
  GLM_CU(cuEventElapsedTime(&ms, a_, b_));
  return ms;
}

} // namespace glm::rt::cuda
