//===- plan_backend.cpp - the plan's kernels on a CUDA device -------------===//
#include "runtime/cuda/plan_backend.h"

#include "codegen/codegen.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <utility>

namespace glm::rt::cuda {

std::string KernelLoadCounts::summary() const {
  std::ostringstream o;
  o << planCubin << " plan CUBIN, " << planPtx << " plan PTX (JIT), " << cache
    << " cached, " << nvrtc << " NVRTC";
  return o.str();
}

namespace {

class CudaBackend final : public exec::Backend {
public:
  CudaBackend(const plan::Plan &p, const CudaDevice &d)
      : plan_(p), arch_(d.arch()), ctx_(currentContext()) {
    GLM_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  }
  void bindThread() override { GLM_CU(cuCtxSetCurrent(ctx_)); }
  ~CudaBackend() override {
    for (auto &[key, e] : graphs_)
      cuGraphExecDestroy(e);
    for (CUevent e : events_)
      cuEventDestroy(e);
    modules_.clear();
    if (stream_)
      cuStreamDestroy(stream_);
  }
  std::string name() const override { return "cuda"; }

  uint64_t allocateArena(uint64_t bytes) override {
    arena_ = DeviceBuffer(std::max<uint64_t>(bytes, 256));
    arena_.zero();
    return arena_.ptr();
  }
  void write(uint64_t address, const void *src, size_t bytes) override {
    GLM_CU(cuMemcpyHtoDAsync(address, src, bytes, stream_));
    GLM_CU(cuStreamSynchronize(stream_));
  }
  void read(uint64_t address, void *dst, size_t bytes) override {
    GLM_CU(cuMemcpyDtoHAsync(dst, address, bytes, stream_));
    GLM_CU(cuStreamSynchronize(stream_));
  }

  void prepareKernel(uint32_t index, const plan::KernelDef &k) override {
    if (fns_.size() <= index)
      fns_.resize(index + 1, nullptr);
    if (fns_[index])
      return;
    std::vector<char> image;
    std::string ptx;
    const bool ours = codegen::builtByThisCodegen(k);
    for (const plan::KernelBinary &b : k.binaries)
      if (ours && b.arch == arch_) {
        if (!b.cubin.empty())
          image.assign(b.cubin.begin(), b.cubin.end());
        else
          ptx = b.ptx;
      }
    if (!image.empty()) {
      ++counts_.planCubin;
    } else if (!ptx.empty()) {
      image = jitPtx(currentContext(), ptx, k.name);
      ++counts_.planPtx;
    } else {
      image = cachedOrNvrtc(k.source, k.name);
    }
    modules_.push_back(std::make_unique<Module>(image));
    fns_[index] = modules_.back()->function(k.name);
  }

  void launch(uint32_t kernel, const plan::LaunchDims &dims,
              const std::vector<exec::ResolvedArg> &args,
              bool programmatic) override {
    CUfunction f = fns_.at(kernel);
    check(f != nullptr, "cuda backend: kernel ", plan_.kernels[kernel].name,
          " launched but not prepared");
    if (dims.smemBytes > 48 * 1024 && raised_.insert(f).second)
      GLM_CU(cuFuncSetAttribute(
          f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
          int(dims.smemBytes)));
    // Each argument's bytes at its own 8-aligned slot; the kind fixes the
    // size (glmc checked it against the template's parameter type).
    storage_.assign(args.size(), 0);
    params_.resize(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      const exec::ResolvedArg &a = args[i];
      void *slot = &storage_[i];
      switch (a.kind) {
      case plan::ArgKind::Buffer:
        std::memcpy(slot, &a.address, 8);
        break;
      case plan::ArgKind::I32: {
        int32_t v = int32_t(a.i);
        std::memcpy(slot, &v, 4);
        break;
      }
      case plan::ArgKind::I64:
        std::memcpy(slot, &a.i, 8);
        break;
      case plan::ArgKind::F32:
        std::memcpy(slot, &a.f, 4);
        break;
      case plan::ArgKind::F64:
        std::memcpy(slot, &a.d, 8);
        break;
      case plan::ArgKind::Runtime:
        fail("cuda backend: unresolved runtime argument (internal)");
      }
      params_[i] = slot;
    }
    if (timing_)
      GLM_CU(cuEventRecord(event(), stream_));
    CUlaunchConfig cfg{};
    cfg.gridDimX = dims.gridX, cfg.gridDimY = dims.gridY;
    cfg.gridDimZ = dims.gridZ;
    cfg.blockDimX = dims.blockX, cfg.blockDimY = dims.blockY;
    cfg.blockDimZ = dims.blockZ;
    cfg.sharedMemBytes = dims.smemBytes;
    cfg.hStream = stream_;
    // Programmatic dependent launch (sm_90+): scheduled while the previous
    // kernel of the stream runs; the kernel's entry waits for it
    // (grid_dependency.cuh). Stream capture keeps it as a programmatic edge.
    CUlaunchAttribute attr{};
    if (programmatic && programmaticOk_) {
      attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attr.value.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
    }
    GLM_CU(cuLaunchKernelEx(&cfg, f, params_.data(), nullptr));
    if (timing_)
      GLM_CU(cuEventRecord(event(), stream_));
  }
  void synchronize() override { GLM_CU(cuStreamSynchronize(stream_)); }

  void fillRandomWords(uint64_t address, uint64_t words, uint64_t seed,
                       uint32_t mask) override {
    check(address % 4 == 0, "cuda backend: fill_random at an unaligned "
          "address");
    if (!fill_) {
      // Not a plan kernel: the random-weights mode replaces the upload.
      codegen::KernelSpec spec;
      spec.family = "fill_random";
      spec.args["threads"] = "256";
      const std::string name = codegen::kernelName(spec);
      modules_.push_back(std::make_unique<Module>(
          cachedOrNvrtc(codegen::generateSource(spec), name)));
      fill_ = modules_.back()->function(name);
    }
    long long n = (long long)words;
    unsigned long long sd = seed;
    unsigned m = mask;
    void *params[] = {&address, &n, &sd, &m};
    GLM_CU(cuLaunchKernel(fill_, 1024, 1, 1, 256, 1, 1, 0, stream_, params,
                          nullptr));
  }

  bool beginCapture() override {
    GLM_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    return true;
  }
  void endCapture(uint32_t key) override {
    CUgraph g = nullptr;
    GLM_CU(cuStreamEndCapture(stream_, &g));
    CUgraphExec e = nullptr;
    const CUresult r = cuGraphInstantiateWithFlags(&e, g, 0);
    cuGraphDestroy(g);
    GLM_CU(r);
    if (CUgraphExec old = std::exchange(graphs_[key], e))
      cuGraphExecDestroy(old);
  }
  void replay(uint32_t key) override {
    auto it = graphs_.find(key);
    check(it != graphs_.end(), "cuda backend: no graph ", key, " captured");
    GLM_CU(cuGraphLaunch(it->second, stream_));
  }

  void setLaunchTiming(bool on) override { timing_ = on; }
  std::vector<double> takeLaunchTimes() override {
    std::vector<double> ms;
    if (events_.empty())
      return ms;
    GLM_CU(cuStreamSynchronize(stream_));
    for (size_t i = 0; i + 1 < used_; i += 2) {
      float t = 0;
      GLM_CU(cuEventElapsedTime(&t, events_[i], events_[i + 1]));
      ms.push_back(t);
    }
    used_ = 0;
    return ms;
  }

  KernelLoadCounts counts_;
  CUstream stream_ = nullptr;

private:
  /// The kernel cache's CUBIN of `source`, else NVRTC's (then cached):
  /// the cache and NVRTC wrapper glmc uses (codegen::compileCached).
  std::vector<char> cachedOrNvrtc(const std::string &source,
                                  const std::string &name) {
    bool hit = false;
    codegen::CompiledKernel c =
        codegen::compileCached(source, name, arch_, /*cubin=*/true, &hit);
    ++(hit ? counts_.cache : counts_.nvrtc);
    return std::vector<char>(c.cubin.begin(), c.cubin.end());
  }
  /// The next timing event (the pool grows as a profiled step needs).
  CUevent event() {
    if (used_ == events_.size()) {
      CUevent e = nullptr;
      GLM_CU(cuEventCreate(&e, CU_EVENT_DEFAULT));
      events_.push_back(e);
    }
    return events_[used_++];
  }
  static CUcontext currentContext() {
    CUcontext c = nullptr;
    GLM_CU(cuCtxGetCurrent(&c));
    return c;
  }
  const plan::Plan &plan_;
  std::string arch_;
  CUcontext ctx_; // the device's, current where the backend was made
  /// sm_90 and later run programmatic launches; older parts serialize.
  bool programmaticOk_ = arch_.size() > 3 && std::stoi(arch_.substr(3)) >= 90;
  DeviceBuffer arena_;
  std::vector<std::unique_ptr<Module>> modules_;
  std::vector<CUfunction> fns_;
  std::set<CUfunction> raised_;
  std::vector<uint64_t> storage_;
  std::vector<void *> params_;
  CUfunction fill_ = nullptr;
  std::map<uint32_t, CUgraphExec> graphs_;
  bool timing_ = false;
  std::vector<CUevent> events_;
  size_t used_ = 0;
};

class DeviceCollectives final : public exec::Collectives {
public:
  explicit DeviceCollectives(dist::DeviceComm *c) : comm_(c) {}
  void run(const plan::CollectiveDef &c,
           const std::vector<exec::Backend *> &bs,
           const std::vector<uint64_t> &at) override {
    check(bs.size() == 1, "cuda backend: one local rank per process");
    if (!comm_ || comm_->size() == 1)
      return;
    exec::checkCollectiveDtype(c);
    void *stream = backendStream(*bs[0]);
    float *p = reinterpret_cast<float *>(at[0]);
    if (c.kind == plan::CollectiveKind::AllReduce &&
        c.dtype == plan::DType::I64)
      comm_->allReduceSumI64(reinterpret_cast<long long *>(at[0]), c.elements,
                             stream);
    else if (c.kind == plan::CollectiveKind::AllReduce)
      comm_->allReduceSum(p, c.elements, stream);
    else if (c.kind == plan::CollectiveKind::AllGather)
      comm_->allGather(p + size_t(comm_->rank()) * c.elements, p, c.elements,
                       stream);
    else
      fail("collective kind ", plan::collectiveKindName(c.kind),
           " is not run by this runtime; re-plan with this glmc");
  }

  bool onDeviceStreams() const override { return true; }

private:
  dist::DeviceComm *comm_;
};

} // namespace

std::unique_ptr<exec::Backend> makeCudaBackend(const plan::Plan &plan,
                                               const CudaDevice &device) {
  return std::make_unique<CudaBackend>(plan, device);
}

KernelLoadCounts kernelLoadCounts(const exec::Backend &b) {
  return static_cast<const CudaBackend &>(b).counts_;
}

CUstream backendStream(const exec::Backend &b) {
  return static_cast<const CudaBackend &>(b).stream_;
}

std::unique_ptr<exec::Collectives> deviceCollectives(dist::DeviceComm *comm) {
  return std::make_unique<DeviceCollectives>(comm);
}

} // namespace glm::rt::cuda
