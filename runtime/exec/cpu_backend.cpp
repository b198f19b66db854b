//===- cpu_backend.cpp - the plan's kernels run by their C++ twins --------===//
#include "runtime/exec/cpu_backend.h"

#include "runtime/base/error.h"
#include "runtime/twins/twin.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace glm::rt::exec {

namespace {

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(const plan::Plan &p) : plan_(p) {}
  ~CpuBackend() override { std::free(arena_); }

  std::string name() const override { return "cpu"; }

  uint64_t allocateArena(uint64_t bytes) override {
    check(arena_ == nullptr, "cpu backend: arena allocated twice");
    // 256-byte alignment: the plan aligns buffers to 256 for the GPU.
    const uint64_t n = (std::max<uint64_t>(bytes, 1) + 255) / 256 * 256;
    arena_ = static_cast<uint8_t *>(std::aligned_alloc(256, n));
    check(arena_ != nullptr, "cpu backend: cannot allocate the rank's ",
          bytes, "-byte arena");
    std::memset(arena_, 0, n);
    bytes_ = n;
    return reinterpret_cast<uint64_t>(arena_);
  }
  void write(uint64_t address, const void *src, size_t bytes) override {
    std::memcpy(at(address, bytes), src, bytes);
  }
  void read(uint64_t address, void *dst, size_t bytes) override {
    std::memcpy(dst, at(address, bytes), bytes);
  }
  void prepareKernel(uint32_t index, const plan::KernelDef &k) override {
    if (twins_.size() <= index)
      twins_.resize(index + 1);
    twins_[index] = twins::findTwin(k.templateName);
    check(twins_[index] != nullptr, "kernel ", k.name, " of family '",
          k.templateName, "' has no CPU twin: --backend cpu cannot run this "
          "plan (runtime/twins lists the families it runs)");
  }
  void launch(uint32_t kernel, const plan::LaunchDims &dims,
              const std::vector<ResolvedArg> &args,
              bool /*programmatic: launches run one by one*/) override {
    const plan::KernelDef &k = plan_.kernels[kernel];
    twins::Launch l;
    l.family = k.templateName;
    l.templateArgs = &k.templateArgs;
    l.grid[0] = dims.gridX;
    l.grid[1] = dims.gridY;
    l.grid[2] = dims.gridZ;
    l.block[0] = dims.blockX;
    l.block[1] = dims.blockY;
    l.block[2] = dims.blockZ;
    l.smemBytes = dims.smemBytes;
    l.args.resize(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      const ResolvedArg &a = args[i];
      if (a.kind == plan::ArgKind::Buffer)
        l.args[i].p = reinterpret_cast<void *>(a.address);
      l.args[i].i = a.i;
      l.args[i].f = a.kind == plan::ArgKind::F64 ? a.d : a.f;
    }
    if (!timing_) {
      twins_.at(kernel)(l);
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    twins_.at(kernel)(l);
    times_.push_back(std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - t0)
                         .count());
  }
  void synchronize() override {}
  void fillRandomWords(uint64_t address, uint64_t words, uint64_t seed,
                       uint32_t mask) override {
    // The fill_random family's twin: the very words a GPU fill writes.
    static const twins::TwinFn fill = twins::findTwin("fill_random");
    check(fill != nullptr, "cpu backend: no fill_random twin");
    at(address, words * 4);
    plan::KeyValues targs = {{"threads", "256"}};
    twins::Launch l;
    l.family = "fill_random";
    l.templateArgs = &targs;
    l.grid[0] = 1024;
    l.block[0] = 256;
    l.args.resize(4);
    l.args[0].p = reinterpret_cast<void *>(address);
    l.args[1].i = int64_t(words);
    l.args[2].i = int64_t(seed);
    l.args[3].i = int64_t(mask);
    fill(l);
  }
  void setLaunchTiming(bool on) override { timing_ = on; }
  std::vector<double> takeLaunchTimes() override {
    return std::exchange(times_, {});
  }

private:
  uint8_t *at(uint64_t address, size_t bytes) {
    const uint64_t b = reinterpret_cast<uint64_t>(arena_);
    check(address >= b && address + bytes <= b + bytes_,
          "cpu backend: access [", address - b, ", +", bytes,
          ") outside the ", bytes_, "-byte arena");
    return reinterpret_cast<uint8_t *>(address);
  }
  const plan::Plan &plan_;
  uint8_t *arena_ = nullptr;
  uint64_t bytes_ = 0;
  std::vector<twins::TwinFn> twins_;
  bool timing_ = false;
  std::vector<double> times_; // wall ms per timed launch
};

} // namespace

std::unique_ptr<Backend> makeCpuBackend(const plan::Plan &plan) {
  return std::make_unique<CpuBackend>(plan);
}

} // namespace glm::rt::exec
