//===- executor.cpp - the CUDA backend: batched decode on quantized weights
//===//
#include "runtime/cuda/executor.h"

#include "codegen/codegen.h"
#include "codegen/dense_gemv_abi.h"
#include "codegen/dense_trellis_abi.h"
#include "codegen/moe_trellis_abi.h"
#include "plans/plan.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/cpu/tp.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/device_weights.h"
#include "runtime/dist/comm.h"
#include "runtime/formats/pack.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace glm::rt::cuda {
namespace {

constexpr unsigned kBlock = 256;

unsigned blocksFor(int64_t n, unsigned per = kBlock) {
  return (unsigned)std::max<int64_t>(1, (n + per - 1) / per);
}

/// Kernel parameters by value (pointers, ints, doubles).
class KArgs {
public:
  template <class T> KArgs &operator<<(T v) {
    static_assert(sizeof(T) <= 8, "scalar kernel parameters only");
    uint64_t s = 0;
    std::memcpy(&s, &v, sizeof v);
    slots_.push_back(s);
    return *this;
  }
  std::vector<void *> pointers() {
    std::vector<void *> p;
    for (auto &s : slots_)
      p.push_back(&s);
    return p;
  }

private:
  std::vector<uint64_t> slots_;
};

codegen::KernelSpec spec(const std::string &family,
                         std::map<std::string, std::string> args) {
  codegen::KernelSpec s;
  s.family = family;
  for (auto &kv : args)
    s.args[kv.first] = kv.second;
  return s;
}

const char *cbName(int cb) {
  return cb == 0 ? "3inst" : cb == 1 ? "mcg" : "mul1";
}

std::string kernelCacheDir() {
  if (const char *e = std::getenv("GLM_KERNEL_CACHE"))
    return e;
  const char *home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.cache/glmc/kernels";
}

/// The routed and shared trellis experts of one MoE layer as moe_trellis
/// tables (codegen/templates/moe_trellis.cuh): Etot = routed + shared
/// experts, shared ones last; side vectors over a 2048-channel stride
/// (halves past a tensor's width and halves of other ranks are null).
struct MoeTables {
  bool on = false;
  bool exl3 = false, e4m3 = false;
  int codebook = 1;
  int nRouted = 0, nShared = 0;
  std::string widths; // "234": widths of both groups
  int guSI = 8, guSI8 = 64, dSI = 8, dSJ8 = 64;
  DeviceBuffer tiles, widthTable, guSvh, guSuBlock, downSuh, downSvBlock,
      downSvh, suhIn;
};

struct DevLayer {
  DeviceBuffer inputNorm, postNorm, qANorm, kvANorm;
  DeviceLinear qA, qB, kvA, o;
  // kv_b_proj: kvB as stored when kvDirect (BF16/F16/F32/FP8 read by
  // mla_qabs/out), else kvBT in fp32: W [H*(dn+dv), kvr] (trellis),
  // or transposed [kvr, H*(dn+dv)] for the legacy mla_attn.
  DeviceLinear kvB;
  bool kvDirect = false;
  int kvDt = 0, kvSk = 0;
  DeviceBuffer kvBT;
  DeviceBuffer heads; // this rank's heads (int)
  int nHeads = 0;
  bool fullIndexer = false;
  DeviceLinear wqB, wk, weightsProj;
  DeviceBuffer kNormW, kNormB;
  bool moe = false;
  DeviceLinear router;
  DeviceBuffer routerBias;
  ExpertGroup routed, shared;
  DeviceBuffer signsIn, signsOut; // exlr8 experts
  MoeTables mt;                   // moe_trellis path (mt.on)
  DeviceLinear gate, up, down;    // dense MLP
  DeviceBuffer denseOwn;          // dense MLP chunk ownership (u8)
  DeviceBuffer latent;            // [maxBatch, maxContext, kv_lora + dr]
  DeviceBuffer indexKeys;         // [maxBatch, maxContext, hd]
};

} // namespace

struct CudaForward::Impl {
  CudaDevice dev;
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  ModelConfig cfg;
  CudaOptions opt;
  cpu::TpLayout tp;
  int rank = 0, N = 1;
  int64_t numLayers = 0;
  std::string arch;
  // Where the kernels of buildKernels came from, and its wall time.
  int fromPlanCubin = 0, fromPlanPtx = 0, fromCache = 0, fromNvrtc = 0,
      fromStalePlan = 0;
  double buildSeconds = 0;
  bool denseGemvSplit = true; // codegen::denseGemvBlocks grids
  std::vector<std::unique_ptr<Module>> modules;
  std::map<std::string, CUfunction> gen; // codegen kernels by name
  std::map<std::string, codegen::KernelSpec> wanted;
  std::vector<DevLayer> layers;
  DeviceLinear embed, lmHead;
  DeviceBuffer finalNorm;
  // Row state [3][maxBatch]: token, position, cache slot.
  DeviceBuffer rows;
  std::vector<int64_t> lengths;
  // Scratch.
  DeviceBuffer x, x2, h, delta, qa, q, kva, qi, kk, wts, score, flags, sel, nsel, p,
      ov, rlog, ids, rw, qabs, ctxv, sIds, sW, xh, partial, partialS, g, u, act, actD, part,
      xpad, xrot, z, logitsLocal, gathered, logits, vocabBegin;
  int64_t maxInPad = 1, maxOutPad = 1, maxCount = 1, maxInter = 1;
  static constexpr int kMaxSplit = 64;
  int splitBlocksPerSm = 2, maxSplit = 16; // GLM_TRELLIS_SPLIT_BLOCKS
  int sms = 132;
  DeviceBuffer zparts; // [kMaxSplit, maxOutPad] split-K partial sums
  // dense_trellis (trellis GEMVs): tuning, scratch sized for every linear
  // and batch, counters (zero between launches). GLM_DENSE_KERNEL=legacy
  // keeps dense_gemv_trellis (one launch per input slice).
  bool legacyDense = false;
  codegen::DenseTrellisTuning dt = codegen::defaultDenseTrellisTuning();
  int64_t dtMaxScratch = 1;
  DeviceBuffer dtScratch, dtCounters;
  // moe_trellis: launch geometry shared by every layer, scratch, counters
  // (zero between launches), xh slots (routed + shared per row).
  bool legacyExperts = false;
  bool legacyMla = false; // GLM_MLA_KERNEL=legacy: one-thread fp64 kernel
  int mlaQabsThreads = 64; // GLM_MLA_QABS_THREADS: 32..256, multiple of 32
  int mtSplit = 1, mtGroup = 2, mtThreads = 128, mtPipe = 4, mtMinBlocks = 4;
  int mtBlocksPerSm = 0; // > 0: persistent grids (capped by occupancy)
  std::map<CUfunction, int> mtResident; // blocks per SM of a kernel
  std::set<CUfunction> mtSmemSet; // table smem attribute raised (E4M3, t256)
  int64_t mtMaxShared = 0;
  DeviceBuffer mtScratch, mtCounters;
  std::map<int, CUgraphExec> graphs;
  // Profiling (kernelTimeSumMs): events around each launch.
  bool profiling = false;
  std::vector<std::pair<CUevent, CUevent>> events;
  std::vector<CUfunction> eventFn; // the kernel each event pair timed
  size_t eventUsed = 0;
  int launches = 0;

  explicit Impl(int device) : dev(device) {
    GLM_CU(cuCtxGetCurrent(&ctx));
    arch = dev.arch();
    sms = dev.smCount();
    GLM_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  }
  ~Impl() {
    for (auto &g : graphs)
      cuGraphExecDestroy(g.second);
    for (auto &e : events) {
      cuEventDestroy(e.first);
      cuEventDestroy(e.second);
    }
    if (stream)
      cuStreamDestroy(stream);
  }

  // --- kernels -----------------------------------------------------------

  /// Records that `s` will be needed (compiled together by buildKernels).
  std::string need(codegen::KernelSpec s) {
    s.archs = {arch};
    std::string name = codegen::kernelName(s);
    wanted.emplace(name, std::move(s));
    return name;
  }

  /// Every wanted kernel: from the plan when it carries a CUBIN for this
  /// arch with the same source, else the on-disk cache, else the plan's
  /// PTX through the driver's JIT or, without one, NVRTC (both in
  /// parallel, results kept in the cache).
  void buildKernels(const std::vector<plan::KernelDef> &planKernels) {
    const auto t0 = std::chrono::steady_clock::now();
    struct Todo {
      std::string name, source, key, ptx;
      std::vector<char> image;
      std::string error;
    };
    std::vector<Todo> todo;
    const std::string dir = kernelCacheDir();
    for (auto &kv : wanted) {
      if (gen.count(kv.first))
        continue;
      Todo t;
      t.name = kv.first;
      t.source = codegen::generateSource(kv.second);
      for (const plan::KernelDef &k : planKernels) {
        if (k.name != t.name || k.source != t.source || k.binaries.empty())
          continue;
        if (!codegen::builtByThisCodegen(k)) {
          ++fromStalePlan; // other templates or NVRTC: built here instead
          continue;
        }
        for (const auto &b : k.binaries)
          if (b.arch == arch && !b.cubin.empty() && t.image.empty()) {
            t.image.assign(b.cubin.begin(), b.cubin.end());
            ++fromPlanCubin;
          } else if (b.arch == arch && b.cubin.empty() && !b.ptx.empty()) {
            t.ptx = b.ptx; // a --kernel-binaries ptx plan
          }
      }
      if (t.image.empty()) {
        t.key = codegen::cacheKey(t.source, codegen::nvrtcOptionsFor(t.source),
                                  arch, codegen::nvrtcVersion());
        std::ifstream in(dir + "/" + t.key + ".cubin", std::ios::binary);
        if (in) {
          t.image.assign(std::istreambuf_iterator<char>(in),
                         std::istreambuf_iterator<char>());
          ++fromCache;
        }
      }
      todo.push_back(std::move(t));
    }
    std::vector<Todo *> compile;
    for (Todo &t : todo)
      if (t.image.empty())
        compile.push_back(&t);
    const unsigned nt =
        std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                                        (unsigned)compile.size()));
    std::vector<std::thread> threads;
    std::mutex mu;
    size_t next = 0;
    for (unsigned i = 0; i < nt; ++i)
      threads.emplace_back([&] {
        for (;;) {
          Todo *t;
          {
            std::lock_guard<std::mutex> lock(mu);
            if (next >= compile.size())
              return;
            t = compile[next++];
          }
          try {
            if (!t->ptx.empty()) {
              t->image = jitPtx(ctx, t->ptx, t->name);
            } else {
              codegen::CompiledKernel c =
                  codegen::compileWithNvrtc(t->source, t->name, arch);
              t->image.assign(c.cubin.begin(), c.cubin.end());
            }
          } catch (const std::exception &e) {
            t->error = e.what();
          }
        }
      });
    for (auto &th : threads)
      th.join();
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    for (Todo *t : compile) {
      check(t->error.empty(), t->error);
      ++(t->ptx.empty() ? fromNvrtc : fromPlanPtx);
      writeFileAtomic(dir + "/" + t->key + ".cubin", t->image.data(),
                      t->image.size());
    }
    for (Todo &t : todo) {
      modules.push_back(std::make_unique<Module>(t.image));
      gen[t.name] = modules.back()->function(t.name);
    }
    buildSeconds += std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
  }

  CUfunction genFn(codegen::KernelSpec s) {
    s.archs = {arch};
    const std::string name = codegen::kernelName(s);
    auto it = gen.find(name);
    check(it != gen.end(), "cuda executor: kernel ", name,
          " was not built (internal)");
    return it->second;
  }

  void launchFn(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                unsigned bx, unsigned smem, KArgs a) {
    auto ptrs = a.pointers();
    ++launches;
    if (profiling) {
      if (eventUsed == events.size()) {
        CUevent a0, b0;
        GLM_CU(cuEventCreate(&a0, CU_EVENT_DEFAULT));
        GLM_CU(cuEventCreate(&b0, CU_EVENT_DEFAULT));
        events.push_back({a0, b0});
      }
      GLM_CU(cuEventRecord(events[eventUsed].first, stream));
      launch(f, gx, gy, gz, bx, smem, stream, ptrs.data());
      GLM_CU(cuEventRecord(events[eventUsed].second, stream));
      eventFn.resize(events.size());
      eventFn[eventUsed] = f;
      ++eventUsed;
      return;
    }
    launch(f, gx, gy, gz, bx, smem, stream, ptrs.data());
  }
  /// A helper family (codegen/templates/<family>.cuh) whose only template
  /// parameter is its block size: `bx` rounded up to whole warps (rope_rows
  /// launches max(32, dr/2) threads under a bound of whole warps).
  static codegen::KernelSpec helperSpec(const std::string &family,
                                        unsigned bx) {
    return spec(family, {{"threads", std::to_string((bx + 31) / 32 * 32)}});
  }
  /// Launches helper family `family` with block `bx` (built by buildKernels
  /// after needHelper).
  void call(const char *family, unsigned gx, unsigned gy, unsigned gz,
            unsigned bx, unsigned smem, KArgs a) {
    launchFn(genFn(helperSpec(family, bx)), gx, gy, gz, bx, smem, std::move(a));
  }
  void needHelper(const char *family, unsigned bx) {
    need(helperSpec(family, bx));
  }
  /// rms_norm_rows of B rows: G = ceil(n/1024) blocks per row (each sums
  /// the whole row in the same order), one when y aliases x or the row is
  /// too long for the kernel's registers (more than 8 values a thread).
  void rmsNorm(CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int n, double eps,
               int xs, int ys, int B) {
    constexpr int kThreads = 1024, kPer = 8;
    const int K = (n + kThreads - 1) / kThreads;
    const unsigned G = x == y || K > kPer ? 1u : (unsigned)K;
    call("rms_norm_rows", G, (unsigned)B, 1, kThreads, 0,
         KArgs() << x << w << y << n << eps << xs << ys);
  }
  /// xout = x + delta and y = rms_norm(xout) * w for B rows of n (stride n)
  /// in one launch (add_rms_norm; xout must not alias x).
  void addRmsNorm(CUdeviceptr x, CUdeviceptr delta, CUdeviceptr xout,
                  CUdeviceptr w, CUdeviceptr y, int n, double eps, int B) {
    constexpr int kThreads = 1024;
    const unsigned G = (unsigned)std::max(1, (n + kThreads - 1) / kThreads);
    call("add_rms_norm", G, (unsigned)B, 1, kThreads, 0,
         KArgs() << x << delta << xout << w << y << n << eps);
  }
  /// Dynamic shared memory of mla_core (see the kernel): q_abs, q_pe,
  /// a tile of p and of selected rows, the row-group partial sums.
  static unsigned mlaCoreShared(int kvr, int dr) {
    return (unsigned)(kvr + dr + 2 * 1024 + 4 * 1024) * 4;
  }
  void memsetZero(CUdeviceptr p, size_t words) {
    ++launches;
    GLM_CU(cuMemsetD32Async(p, 0, words, stream));
  }
  /// rows x cols fp32 block copy between strided buffers.
  void copy2d(CUdeviceptr dst, int64_t dstStride, CUdeviceptr src,
              int64_t srcStride, int64_t rowsN, int64_t cols) {
    CUDA_MEMCPY2D c;
    std::memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = src;
    c.srcPitch = (size_t)srcStride * 4;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = dst;
    c.dstPitch = (size_t)dstStride * 4;
    c.WidthInBytes = (size_t)cols * 4;
    c.Height = (size_t)rowsN;
    ++launches;
    GLM_CU(cuMemcpy2DAsync(&c, stream));
  }

  // --- GEMV by format ----------------------------------------------------

  /// Input slices for a batch-1 trellis GEMV: dense_gemv_trellis walks
  /// every input tile of a column serially with one warp, so a short, wide
  /// matrix (o_proj, down) leaves most SMs idle; slices of 128-multiples
  /// run side by side until ~splitBlocksPerSm blocks per SM (2, the
  /// setting verified on the H200; GLM_TRELLIS_SPLIT_BLOCKS=N tries more:
  /// one launch per slice, so more slices trade launches for warps).
  int splitK(const DeviceLinear &L, int B) const {
    if (B != 1)
      return 1;
    const int64_t blocks = (L.outPad / 16 + 7) / 8;
    const int64_t slices = L.inPad / 128;
    int n = 1;
    while (blocks * n < (int64_t)splitBlocksPerSm * sms &&
           slices % (2 * n) == 0 && n < maxSplit)
      n *= 2;
    return n;
  }
  bool useDenseGemv(const DeviceLinear &L) const {
    return L.in % 128 == 0 && (L.format == WeightFormat::BF16 ||
                               L.format == WeightFormat::Fp8Block ||
                               L.format == WeightFormat::Fp8Row ||
                               L.format == WeightFormat::Mxfp8);
  }
  codegen::KernelSpec denseSpec(const DeviceLinear &L, int B) const {
    const char *fmt = L.format == WeightFormat::BF16       ? "bf16"
                      : L.format == WeightFormat::Fp8Block ? "fp8_block"
                      : L.format == WeightFormat::Fp8Row   ? "fp8_row"
                                                           : "mxfp8";
    const bool scaled =
        L.format == WeightFormat::Fp8Block || L.format == WeightFormat::Fp8Row;
    return spec("dense_gemv", {{"format", fmt},
                               {"scale", scaled ? "f32" : "none"},
                               {"batch", std::to_string(
                                             codegen::decodeKernelBatch(B))},
                               {"threads", "256"}});
  }
  codegen::KernelSpec trellisSpec(const DeviceLinear &L, int B) const {
    return spec("dense_gemv_trellis", {{"K", std::to_string(L.K)},
                                       {"codebook", cbName(L.codebook)},
                                       {"e4m3", L.e4m3 ? "1" : "0"},
                                       {"batch", std::to_string(B)},
                                       {"threads", "256"}});
  }
  codegen::KernelSpec denseTrellisSpec(const DeviceLinear &L, int B) const {
    return spec("dense_trellis",
                {{"K", std::to_string(L.K)},
                 {"codebook", cbName(L.codebook)},
                 {"e4m3", L.e4m3 ? "1" : "0"},
                 {"batch", std::to_string(codegen::decodeKernelBatch(B))},
                 {"pipe",
                  std::to_string(codegen::denseTrellisPipe(dt, L.K, B))},
                 {"minblocks", std::to_string(dt.minBlocks)},
                 {"threads", std::to_string(dt.threads)}});
  }
  codegen::DenseTrellisDims denseTrellisDims(const DeviceLinear &L,
                                             int B) const {
    codegen::DenseTrellisDims d;
    d.batch = B;
    d.in = L.inPad;
    d.out = L.outPad;
    d.threads = dt.threads;
    d.split = codegen::denseTrellisSplit(L.inPad, L.outPad, sms, dt);
    return d;
  }
  codegen::KernelSpec hadSpec() const {
    return spec("hadamard128", {{"vt", "f32"}, {"threads", "256"}});
  }
  /// Registers the kernels `L` needs for batch sizes 1..maxBatch.
  void needLinear(const DeviceLinear &L) {
    maxInPad = std::max(maxInPad, std::max(L.inPad, L.in));
    maxOutPad = std::max(maxOutPad, std::max(L.outPad, L.out));
    for (int B = 1; B <= opt.maxBatch; ++B) {
      if (L.format == WeightFormat::Trellis) {
        if (legacyDense) {
          need(trellisSpec(L, B));
        } else {
          need(denseTrellisSpec(L, B));
          const codegen::DenseTrellisDims d = denseTrellisDims(L, B);
          check(d.valid(), "cuda executor: ", L.name, " [", L.outPad, ", ",
                L.inPad, "] has no dense_trellis launch (internal)");
          dtMaxScratch = std::max<int64_t>(dtMaxScratch,
                                           (int64_t)d.scratchFloats());
        }
        need(hadSpec());
      } else if (L.format == WeightFormat::F32) {
        need(spec("dense_gemv_f32", {{"out", "f32"}, {"threads", "256"}}));
      } else if (useDenseGemv(L)) {
        need(denseSpec(L, B));
      }
    }
  }
  void hadamard(CUdeviceptr in, CUdeviceptr pre, CUdeviceptr post,
                CUdeviceptr out, int64_t rowsN, int64_t n) {
    launchFn(genFn(hadSpec()), blocksFor(rowsN * n / 128, 8), 1, 1, 256, 0,
             KArgs() << in << pre << post << out << (int)rowsN << (int)n << 0
                     << 0);
  }
  /// y[b*ys + o] = (W x_b)[o] for B rows; x rows have stride xs. Sliced
  /// linears produce their own rows; full ones all `out` rows.
  void gemv(const DeviceLinear &L, CUdeviceptr xin, int64_t xs, CUdeviceptr y,
            int64_t ys, int B) {
    const int in = (int)L.in, out = (int)L.out;
    if (L.format == WeightFormat::F32) {
      CUfunction f =
          genFn(spec("dense_gemv_f32", {{"out", "f32"}, {"threads", "256"}}));
      for (int b = 0; b < B; ++b)
        launchFn(f, blocksFor(out, 8), 1, 1, 256, 0,
                 KArgs() << (xin + (CUdeviceptr)b * xs * 4) << L.data.ptr()
                         << (y + (CUdeviceptr)b * ys * 4) << in << out);
      return;
    }
    if (L.format == WeightFormat::Trellis) {
      CUdeviceptr src = xin;
      if (L.inPad != in || xs != L.inPad) {
        if (L.inPad != in)
          memsetZero(xpad.ptr(), (size_t)B * L.inPad);
        copy2d(xpad.ptr(), L.inPad, xin, xs, B, in);
        src = xpad.ptr();
      }
      hadamard(src, L.suh.ptr(), 0, xrot.ptr(), B, L.inPad);
      if (!legacyDense) {
        // One launch: split-k partials, the fixed-order reduction and the
        // output Hadamard * svh, written straight to y's rows.
        const codegen::DenseTrellisDims d = denseTrellisDims(L, B);
        launchFn(genFn(denseTrellisSpec(L, B)), d.grid(), 1, 1,
                 (unsigned)d.threads, 0,
                 KArgs() << xrot.ptr() << L.data.ptr() << L.svh.ptr()
                         << dtScratch.ptr() << dtCounters.ptr() << y << B
                         << (int)L.inPad << (int)L.outPad << (int)ys << out
                         << L.sI << L.sI8 << L.sJ8 << d.split);
        return;
      }
      const int ns = splitK(L, B);
      if (ns == 1) {
        launchFn(
            genFn(trellisSpec(L, B)), blocksFor(L.outPad / 16, 8), 1, 1, 256, 0,
            KArgs() << xrot.ptr() << L.data.ptr() << z.ptr() << B
                    << (int)L.inPad << (int)L.outPad << L.sI << L.sI8 << L.sJ8);
      } else {
        // Batch 1, split over input slices of S rows (S/16 tile rows, a
        // multiple of 8): tile (i0 + i, j) = tile (i, j) + (i0/8)*sI8 in
        // every layout, so a slice is the same kernel on shifted pointers;
        // the slices' sums are added in slice order.
        const int64_t S = L.inPad / ns;
        const uint64_t tileBytes = 32ull * (uint64_t)L.K;
        for (int sl = 0; sl < ns; ++sl) {
          const int64_t i0 = sl * S / 16;
          const CUdeviceptr tiles =
              L.data.ptr() +
              (CUdeviceptr)((uint64_t)(i0 / 8) * (uint64_t)L.sI8 * tileBytes);
          launchFn(genFn(trellisSpec(L, 1)), blocksFor(L.outPad / 16, 8), 1, 1,
                   256, 0,
                   KArgs() << (xrot.ptr() + (CUdeviceptr)(sl * S) * 4) << tiles
                           << (zparts.ptr() + (CUdeviceptr)(sl * L.outPad) * 4)
                           << 1 << (int)S << (int)L.outPad << L.sI << L.sI8
                           << L.sJ8);
        }
        call("sum_parts", blocksFor(L.outPad), 1, 1, kBlock, 0,
             KArgs() << zparts.ptr() << ns << (int)L.outPad << z.ptr());
      }
      if (L.outPad == out && ys == out) {
        hadamard(z.ptr(), 0, L.svh.ptr(), y, B, L.outPad);
      } else {
        hadamard(z.ptr(), 0, L.svh.ptr(), z.ptr(), B, L.outPad);
        copy2d(y, ys, z.ptr(), L.outPad, B, out);
      }
      return;
    }
    if (useDenseGemv(L)) {
      CUdeviceptr src = xin;
      if (xs != in) {
        copy2d(xpad.ptr(), in, xin, xs, B, in);
        src = xpad.ptr();
      }
      launchFn(genFn(denseSpec(L, B)),
               denseGemvSplit ? codegen::denseGemvBlocks(out, sms)
                              : blocksFor(out, 8),
               1, 1, 256, 0,
               KArgs() << src << L.data.ptr() << L.scale.ptr() << y << B << in
                       << out << (int)ys << 0);
      return;
    }
    int dt = L.dtype, sk = 0;
    if (L.format == WeightFormat::Fp8Block ||
        L.format == WeightFormat::Fp8Row || L.format == WeightFormat::Mxfp8) {
      dt = 3;
      sk = L.format == WeightFormat::Fp8Block ? 1
           : L.format == WeightFormat::Fp8Row ? 2
                                              : 3;
    }
    call("gemv_any", blocksFor(out, 8), (unsigned)B, 1, 256, 0,
         KArgs() << xin << (int)xs << L.data.ptr() << dt << L.scale.ptr() << sk
                 << y << (int)ys << in << out);
  }

  // --- moe_trellis ------------------------------------------------------

  codegen::KernelSpec mtSpec(const MoeTables &T, int B, int stage) const {
    return spec("moe_trellis", {{"widths", T.widths},
                                {"codebook", cbName(T.codebook)},
                                {"e4m3", T.e4m3 ? "1" : "0"},
                                {"batch", std::to_string(codegen::decodeKernelBatch(B))},
                                {"sv", "f32"},
                                {"stage", std::string(stage == 0 ? "gu" : "down") +
                                              (mtBlocksPerSm > 0 ? "_persist" : "")},
                                {"pipe", std::to_string(mtPipe)},
                                {"minblocks", std::to_string(mtMinBlocks)},
                                {"threads", std::to_string(mtThreads)}});
  }
  codegen::MoeTrellisDims mtDims(const MoeTables &T, int B) const {
    codegen::MoeTrellisTuning t;
    t.guSplit = mtSplit;
    t.downGroup = mtGroup;
    t.threads = mtThreads;
    return codegen::moeTrellisDims(t, B, (int)cfg.numExpertsPerTok, T.nRouted,
                                   T.nShared, (int)cfg.hiddenSize);
  }
  void moeTrellis(DevLayer &L, int B);

  // --- the step ----------------------------------------------------------

  void enqueueStep(int B);
  void moe(DevLayer &L, int l, int B);
  void denseMlp(DevLayer &L, int B);
  void allReduce(CUdeviceptr p, size_t count) {
    if (opt.comm && N > 1) {
      ++launches;
      opt.comm->allReduceSum(reinterpret_cast<float *>(p), count,
                             (void *)stream);
    }
  }
  CUgraphExec graphFor(int B) {
    auto it = graphs.find(B);
    if (it != graphs.end())
      return it->second;
    CUgraph graph = nullptr;
    GLM_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    try {
      enqueueStep(B);
    } catch (...) {
      cuStreamEndCapture(stream, &graph);
      if (graph)
        cuGraphDestroy(graph);
      throw;
    }
    GLM_CU(cuStreamEndCapture(stream, &graph));
    CUgraphExec exec = nullptr;
    GLM_CU(cuGraphInstantiate(&exec, graph, 0));
    cuGraphDestroy(graph);
    graphs[B] = exec;
    return exec;
  }
  /// Waits for the stream. With peers, polls instead of blocking: a rank
  /// that died leaves this rank's collective spinning until the
  /// communicator aborts it, so the communicator's health (which names the
  /// dead rank) is checked while waiting and before any CUDA error.
  void waitStream() {
    if (!opt.comm || N == 1) {
      GLM_CU(cuStreamSynchronize(stream));
      return;
    }
    for (unsigned i = 0;; ++i) {
      const CUresult r = cuStreamQuery(stream);
      if (r == CUDA_SUCCESS)
        break;
      if (r != CUDA_ERROR_NOT_READY) {
        opt.comm->checkHealthy();
        GLM_CU(r);
      }
      if (i % 16 == 0)
        opt.comm->checkHealthy();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    opt.comm->checkHealthy();
  }
  void runStep(int B, bool graph) {
    if (graph) {
      ++launches;
      GLM_CU(cuGraphLaunch(graphFor(B), stream));
    } else {
      enqueueStep(B);
    }
  }
};

void CudaForward::Impl::enqueueStep(int B) {
  const ModelConfig &c = cfg;
  const int MB = opt.maxBatch;
  const int d = (int)c.hiddenSize, H = (int)c.numHeads,
            dn = (int)c.qkNopeHeadDim, dr = (int)c.qkRopeHeadDim,
            dv = (int)c.vHeadDim, kvr = (int)c.kvLoraRank, lat = kvr + dr,
            qlr = (int)c.qLoraRank, ctxN = (int)opt.maxContext;
  const double eps = c.rmsNormEps, theta = c.ropeTheta;
  const double scale = 1.0 / std::sqrt((double)(dn + dr));
  const CUdeviceptr tok = rows.ptr(), pos = rows.ptr() + MB * 4,
                    seq = rows.ptr() + 2 * MB * 4;
  const unsigned rb = (unsigned)std::max(32, dr / 2);
  // Embedding.
  {
    int dt = embed.format == WeightFormat::Fp8Row ? 3 : embed.dtype;
    check(embed.format != WeightFormat::Trellis &&
              embed.format != WeightFormat::Fp8Block &&
              embed.format != WeightFormat::Mxfp8,
          "cuda executor: embedding ", embed.name, " in format ",
          weightFormatName(embed.format), " has no GPU kernel yet");
    call("embed_tokens", blocksFor(d), (unsigned)B, 1, kBlock, 0,
         KArgs() << embed.data.ptr() << dt << embed.scale.ptr() << tok
                 << x.ptr() << d);
  }
  // The residual stream: each add is fused with the norm after it and
  // writes the other buffer (add_rms_norm), so xc ping-pongs between
  // x and x2; a step makes an even number of swaps, so a captured graph
  // always starts from x.
  CUdeviceptr xc = x.ptr(), xn = x2.ptr();
  auto addNorm = [&](const DeviceBuffer &w) {
    addRmsNorm(xc, delta.ptr(), xn, w.ptr(), h.ptr(), d, eps, B);
    std::swap(xc, xn);
  };
  if (numLayers > 0)
    rmsNorm(xc, layers[0].inputNorm.ptr(), h.ptr(), d, eps, d, d, B);
  for (int64_t l = 0; l < numLayers; ++l) {
    DevLayer &L = layers[l];
    gemv(L.qA, h.ptr(), d, qa.ptr(), qlr, B);
    // The normed q_a goes to qa's second half (no aliasing: several blocks).
    const CUdeviceptr qaN = qa.ptr() + (CUdeviceptr)MB * qlr * 4;
    rmsNorm(qa.ptr(), L.qANorm.ptr(), qaN, qlr, eps, qlr, qlr, B);
    gemv(L.qB, qaN, qlr, q.ptr(), (int64_t)H * (dn + dr), B);
    gemv(L.kvA, h.ptr(), d, kva.ptr(), lat, B);
    call("kv_store", 1, (unsigned)B, 1, kBlock, 0,
         KArgs() << kva.ptr() << L.kvANorm.ptr() << L.latent.ptr() << seq << pos
                 << kvr << dr << ctxN << eps << theta);
    if (L.fullIndexer) {
      const int nh = (int)c.indexNHeads, hd = (int)c.indexHeadDim;
      gemv(L.wqB, qaN, qlr, qi.ptr(), (int64_t)nh * hd, B);
      call("rope_rows", (unsigned)nh, (unsigned)B, 1, rb, 0,
           KArgs() << qi.ptr() << dr << hd << nh * hd << pos << theta);
      gemv(L.wk, h.ptr(), d, kk.ptr(), hd, B);
      call("index_key_store", 1, (unsigned)B, 1, kBlock, 0,
           KArgs() << kk.ptr() << L.kNormW.ptr() << L.kNormB.ptr()
                   << L.indexKeys.ptr() << seq << pos << hd << dr << ctxN
                   << theta);
      gemv(L.weightsProj, h.ptr(), d, wts.ptr(), nh, B);
      call("indexer_scores_ctx", 64, (unsigned)B, 1, kBlock, 0,
           KArgs() << qi.ptr() << L.indexKeys.ptr() << wts.ptr() << score.ptr()
                   << seq << pos << nh << hd << ctxN
                   << 1.0 / std::sqrt((double)nh)
                   << 1.0 / std::sqrt((double)hd));
      call("dsa_select", 1, (unsigned)B, 1, 1024, 0,
           KArgs() << score.ptr() << pos << (int)c.indexTopk << flags.ptr()
                   << sel.ptr() << nsel.ptr() << ctxN);
    } else if (c.indexNHeads == 0) {
      call("dsa_iota", 4, (unsigned)B, 1, kBlock, 0,
           KArgs() << sel.ptr() << nsel.ptr() << pos << ctxN);
    }
    // Attention over this rank's heads; o_proj of their outputs.
    call("rope_rows", (unsigned)H, (unsigned)B, 1, rb, 0,
         KArgs() << (q.ptr() + (CUdeviceptr)dn * 4) << dr << (dn + dr)
                 << H * (dn + dr) << pos << theta);
    if (L.nHeads < H)
      memsetZero(ov.ptr(), (size_t)B * H * dv);
    if (L.nHeads > 0 && legacyMla) {
      call("mla_attn", (unsigned)L.nHeads, (unsigned)B, 1, kBlock,
           (unsigned)(2 * kvr * sizeof(double)),
           KArgs() << q.ptr() << L.kvBT.ptr() << L.latent.ptr() << seq
                   << sel.ptr() << nsel.ptr() << p.ptr() << ctxN << ov.ptr()
                   << L.heads.ptr() << H << dn << dr << dv << kvr << scale);
    } else if (L.nHeads > 0) {
      const unsigned nh = (unsigned)L.nHeads;
      const CUdeviceptr W = L.kvDirect ? L.kvB.data.ptr() : L.kvBT.ptr();
      const CUdeviceptr Ws = L.kvDirect ? L.kvB.scale.ptr() : 0;
      call("mla_qabs", nh * (unsigned)((kvr + 31) / 32), (unsigned)B, 1,
           (unsigned)mlaQabsThreads, 0,
           KArgs() << q.ptr() << W << L.kvDt << Ws << L.kvSk << L.heads.ptr()
                   << qabs.ptr() << H << dn << dr << dv << kvr);
      call("mla_core", nh, (unsigned)B, 1, 1024, mlaCoreShared(kvr, dr),
           KArgs() << q.ptr() << qabs.ptr() << L.latent.ptr() << seq
                   << sel.ptr() << nsel.ptr() << p.ptr() << ctxN << ctxv.ptr()
                   << L.heads.ptr() << H << dn << dr << kvr << scale);
      // 8 warps of kMlaOutRows (4) outputs per block.
      call("mla_out", nh * (unsigned)((dv + 31) / 32), (unsigned)B, 1, 256, 0,
           KArgs() << W << L.kvDt << Ws << L.kvSk << ctxv.ptr() << L.heads.ptr()
                   << ov.ptr() << H << dn << dv << kvr);
    }
    gemv(L.o, ov.ptr(), (int64_t)H * dv, delta.ptr(), d, B);
    allReduce(delta.ptr(), (size_t)B * d);
    addNorm(L.postNorm);
    if (L.moe)
      moe(L, (int)l, B);
    else
      denseMlp(L, B);
    allReduce(delta.ptr(), (size_t)B * d);
    addNorm(l + 1 < numLayers ? layers[l + 1].inputNorm : finalNorm);
  }
  if (numLayers == 0)
    rmsNorm(xc, finalNorm.ptr(), h.ptr(), d, eps, d, d, B);
  // LM head: this rank's vocabulary rows, then the gather.
  const int64_t V = c.vocabSize;
  const int64_t vb = tp.vocabBegin[rank], cnt = tp.vocabBegin[rank + 1] - vb;
  if (N == 1 || !opt.comm) {
    gemv(lmHead, h.ptr(), d, logits.ptr(), V, B);
    return;
  }
  if (lmHead.fullRows) {
    gemv(lmHead, h.ptr(), d, logits.ptr(), V, B);
    copy2d(logitsLocal.ptr(), maxCount, logits.ptr() + vb * 4, V, B, cnt);
  } else {
    gemv(lmHead, h.ptr(), d, logitsLocal.ptr(), maxCount, B);
  }
  ++launches;
  opt.comm->allGather(reinterpret_cast<const float *>(logitsLocal.ptr()),
                      reinterpret_cast<float *>(gathered.ptr()),
                      (size_t)B * maxCount, (void *)stream);
  call("vocab_gather", blocksFor(maxCount), (unsigned)N, (unsigned)B, kBlock, 0,
       KArgs() << gathered.ptr() << vocabBegin.ptr() << B << (int)maxCount
               << logits.ptr() << (int)V);
}

void CudaForward::Impl::denseMlp(DevLayer &L, int B) {
  const int d = (int)cfg.hiddenSize, I = (int)cfg.intermediateSize;
  gemv(L.gate, h.ptr(), d, g.ptr(), I, B);
  gemv(L.up, h.ptr(), d, u.ptr(), I, B);
  call("swiglu", blocksFor(I), (unsigned)B, 1, kBlock, 0,
       KArgs() << g.ptr() << u.ptr() << I << act.ptr() << I
               << L.denseOwn.ptr());
  gemv(L.down, act.ptr(), I, delta.ptr(), d, B);
}

void CudaForward::Impl::moe(DevLayer &L, int l, int B) {
  const ModelConfig &c = cfg;
  const int d = (int)c.hiddenSize, E = (int)c.numRoutedExperts,
            K = (int)c.numExpertsPerTok;
  gemv(L.router, h.ptr(), d, rlog.ptr(), E, B);
  check(E >= 1 && E <= 1024 && K >= 1 && K <= 64, "cuda executor: router of ",
        E, " experts, top ", K,
        " (route takes 1..1024 experts, top "
        "1..64)");
  call("route", 1, (unsigned)B, 1, (unsigned)(E + 31) / 32 * 32, 0,
       KArgs() << rlog.ptr() << L.routerBias.ptr() << E << K
               << (int)c.normTopkProb << c.routedScalingFactor << ids.ptr()
               << rw.ptr());
  (void)l;
  ExpertGroup &R = L.routed;
  if (R.kind == ExpertGroup::Plain) {
    // Unquantized experts: fp64 units in the CPU reference's order.
    const int I = (int)R.inter, chunks = (int)cpu::numChunks(I);
    const long long stride = (long long)I * d;
    int slots = K * chunks;
    const ExpertGroup &S = L.shared;
    const int IS = (int)S.inter, chunksS = (int)cpu::numChunks(IS);
    if (S.kind == ExpertGroup::Plain)
      slots += chunksS;
    call("hf_expert_act", blocksFor(I), (unsigned)K, (unsigned)B, kBlock, 0,
         KArgs() << R.gate.ptr() << R.up.ptr() << R.dtype << h.ptr()
                 << ids.ptr() << stride << I << d << R.own.ptr()
                 << (int)R.halves << 0 << actD.ptr());
    call("hf_expert_down", blocksFor(d), (unsigned)(K * chunks), (unsigned)B,
         kBlock, 0,
         KArgs() << R.down.ptr() << R.dtype << actD.ptr() << ids.ptr()
                 << rw.ptr() << stride << I << d << K << part.ptr() << slots
                 << 0);
    if (S.kind == ExpertGroup::Plain) {
      call("hf_expert_act", blocksFor(IS), 1, (unsigned)B, kBlock, 0,
           KArgs() << S.gate.ptr() << S.up.ptr() << S.dtype << h.ptr()
                   << CUdeviceptr(0) << 0LL << IS << d << S.own.ptr()
                   << (int)S.halves << 0 << actD.ptr());
      call("hf_expert_down", blocksFor(d), (unsigned)chunksS, (unsigned)B,
           kBlock, 0,
           KArgs() << S.down.ptr() << S.dtype << actD.ptr() << CUdeviceptr(0)
                   << CUdeviceptr(0) << 0LL << IS << d << 1 << part.ptr()
                   << slots << K * chunks);
    }
    call("reduce_units", blocksFor(d), (unsigned)B, 1, kBlock, 0,
         KArgs() << part.ptr() << slots << d << delta.ptr());
    return;
  }
  if (L.mt.on) {
    moeTrellis(L, B);
    return;
  }
  // Trellis experts: fused expert kernel per group, ordered reduction.
  auto run = [&](ExpertGroup &G, CUdeviceptr gids, CUdeviceptr gw, int topk,
                 CUdeviceptr partialBuf, int accumulate) {
    CUdeviceptr xin = xh.ptr();
    int rowStride = d, slotStride = 0;
    long long projStride = 0;
    if (G.exl3) {
      call("exl3_expert_in", blocksFor(d), (unsigned)topk, (unsigned)(2 * B),
           kBlock, 0,
           KArgs() << h.ptr() << G.suhIn.ptr() << gids << xh.ptr() << d
                   << (int)G.experts << B);
      hadamard(xh.ptr(), 0, 0, xh.ptr(), (int64_t)2 * B * topk, d);
      rowStride = topk * d;
      slotStride = d;
      projStride = (long long)B * topk * d;
    }
    const int I = (int)G.inter;
    codegen::KernelSpec s =
        spec("expert_gemv_trellis", {{"widths", G.widthDigits},
                                     {"codebook", cbName(G.codebook)},
                                     {"e4m3", G.e4m3 ? "1" : "0"},
                                     {"batch", std::to_string(B)},
                                     {"sv", "f32"},
                                     {"threads", "256"}});
    const int guSI = G.exl3 ? I / 16 : 8, guSI8 = G.exl3 ? I / 2 : 64;
    const int dSI = G.exl3 ? d / 16 : 8, dSJ8 = G.exl3 ? 8 : 64;
    launchFn(genFn(s), (unsigned)G.halves, (unsigned)G.experts, 1, 256, 0,
             KArgs() << xin << gids << gw << G.tiles.ptr() << G.widths.ptr()
                     << G.guSvh.ptr() << G.guSuBlock.ptr() << G.downSuh.ptr()
                     << G.downSvBlock.ptr() << G.downSvh.ptr() << partialBuf
                     << B << topk << d << I << rowStride << slotStride
                     << (int)projStride << guSI << guSI8 << dSI << dSJ8);
    launchFn(genFn(spec("moe_reduce", {{"threads", "256"}})), blocksFor(d),
             (unsigned)B, 1, 256, 0,
             KArgs() << partialBuf << gids << G.tiles.ptr() << delta.ptr() << B
                     << topk << d << accumulate);
  };
  // exlr8: one rotation of x * signs.in shared by every expert. moe_reduce
  // reads exactly the partials the expert kernel wrote (selected experts,
  // owned halves), so they need no clearing.
  if (!R.exl3)
    hadamard(h.ptr(), L.signsIn.ptr(), 0, xh.ptr(), B, d);
  run(R, ids.ptr(), rw.ptr(), K, partial.ptr(), 0);
  if (L.shared.kind == ExpertGroup::Trellis)
    run(L.shared, sIds.ptr(), sW.ptr(), 1, partialS.ptr(), 1);
  if (!R.exl3)
    hadamard(delta.ptr(), 0, L.signsOut.ptr(), delta.ptr(), B, d);
}

/// The routed and shared experts in two launches (gate/up, then down with
/// the routing weights, the ordered reduction and, exlr8, H * signs.out),
/// writing delta. The rotated inputs: exlr8 one H(x * signs.in) per row;
/// EXL3 one H(x * suh) per (row, slot, projection).
void CudaForward::Impl::moeTrellis(DevLayer &L, int B) {
  MoeTables &T = L.mt;
  const int d = (int)cfg.hiddenSize, topk = (int)cfg.numExpertsPerTok;
  const int slots = topk + T.nShared;
  int rowStride = d, slotStride = 0, projStride = 0;
  if (T.exl3) {
    call("moe_exl3_in", blocksFor(d), (unsigned)slots, (unsigned)(2 * B),
         kBlock, 0,
         KArgs() << h.ptr() << T.suhIn.ptr() << ids.ptr() << xh.ptr() << d
                 << (T.nRouted + T.nShared) << T.nRouted << topk << B);
    hadamard(xh.ptr(), 0, 0, xh.ptr(), (int64_t)2 * B * slots, d);
    projStride = d;
    slotStride = 2 * d;
    rowStride = 2 * slots * d;
  } else {
    hadamard(h.ptr(), L.signsIn.ptr(), 0, xh.ptr(), B, d);
  }
  codegen::MoeTrellisDims dm = mtDims(T, B);
  const CUfunction fn[2] = {genFn(mtSpec(T, B, 0)), genFn(mtSpec(T, B, 1))};
  if (mtBlocksPerSm > 0 && dm.maxUnits() <= 72) { // persistent grids of
    // blocks that all stay resident
    int bps = mtBlocksPerSm;
    for (CUfunction f : fn) {
      auto it = mtResident.find(f);
      if (it == mtResident.end()) {
        int n = 0;
        GLM_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, mtThreads,
                                                           0));
        it = mtResident.emplace(f, std::max(1, n)).first;
      }
      bps = std::min(bps, it->second);
    }
    dm.persistBlocks = bps * sms;
  }
  const CUdeviceptr null = 0;
  // E4M3 decode table of 256+ thread blocks (moeTrellisDynSmem).
  const unsigned mtSmem =
      codegen::moeTrellisDynSmem(T.e4m3, mtThreads, mtBlocksPerSm > 0);
  for (int st = 0; st < 2; ++st) {
    if (mtSmem && mtSmemSet.insert(fn[st]).second)
      GLM_CU(cuFuncSetAttribute(
          fn[st], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
          (int)mtSmem));
    launchFn(fn[st], st == 0 ? dm.gridGateUp() : dm.gridDown(),
             1, 1, (unsigned)mtThreads, mtSmem,
             KArgs() << xh.ptr() << ids.ptr() << rw.ptr() << T.tiles.ptr()
                     << T.widthTable.ptr() << T.guSvh.ptr()
                     << (T.exl3 ? null : T.guSuBlock.ptr()) << T.downSuh.ptr()
                     << (T.exl3 ? null : T.downSvBlock.ptr())
                     << (T.exl3 ? T.downSvh.ptr() : null)
                     << (T.exl3 ? null : L.signsOut.ptr()) << mtScratch.ptr()
                     << mtCounters.ptr() << delta.ptr() << B << topk
                     << T.nRouted << T.nShared << d << 2048 << rowStride
                     << slotStride << projStride << T.guSI << T.guSI8 << T.dSI
                     << T.dSJ8 << mtSplit << mtGroup << 0);
  }
}

namespace {

/// Synchronous device-to-device copy of `bytes` bytes.
void copyBytes(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  if (bytes)
    GLM_CU(cuMemcpyDtoD(dst, src, bytes));
}

/// Synchronous device-to-device copy of `rows` rows of `width` bytes.
void copyRows(CUdeviceptr dst, size_t dstPitch, CUdeviceptr src,
              size_t srcPitch, size_t width, size_t rows) {
  if (!rows || !width)
    return;
  CUDA_MEMCPY2D c;
  std::memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.srcPitch = srcPitch;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  c.dstPitch = dstPitch;
  c.WidthInBytes = width;
  c.Height = rows;
  GLM_CU(cuMemcpy2D(&c));
}

DeviceBuffer zeroedBuf(size_t bytes) {
  DeviceBuffer b(std::max<size_t>(bytes, 4) + 256);
  b.zero();
  return b;
}

/// Whether moe_trellis can run the layer's experts (else the reason); the
/// rule is codegen's, which the compiler's plans follow too.
std::string moeTrellisRefusal(const DevLayer &D, int64_t topk, int maxBatch) {
  const ExpertGroup &R = D.routed, &S = D.shared;
  codegen::MoeTrellisLayer l;
  l.routedTrellis = R.kind == ExpertGroup::Trellis;
  l.exl3 = R.exl3;
  l.inter = R.inter;
  l.halves = R.halves;
  l.topk = topk;
  l.maxBatch = maxBatch;
  l.hasShared = S.kind != ExpertGroup::None;
  l.sharedSameFormat = S.kind == ExpertGroup::Trellis && S.exl3 == R.exl3 &&
                       S.codebook == R.codebook && S.e4m3 == R.e4m3 &&
                       S.hidden == R.hidden;
  l.sharedInter = S.inter;
  return codegen::moeTrellisRefusal(l);
}

/// The kernel parameters of the merged tables (before any upload).
void describeMoeTables(const DevLayer &D, MoeTables &T) {
  const ExpertGroup &R = D.routed, &S = D.shared;
  const bool hasS = S.kind == ExpertGroup::Trellis;
  const int64_t E = R.experts, Es = hasS ? S.experts : 0;
  const int64_t hid = R.hidden, I = R.inter;
  T.on = true;
  T.exl3 = R.exl3;
  T.e4m3 = R.e4m3;
  T.codebook = R.codebook;
  T.nRouted = (int)E;
  T.nShared = (int)Es;
  std::set<char> k(R.widthDigits.begin(), R.widthDigits.end());
  if (hasS)
    k.insert(S.widthDigits.begin(), S.widthDigits.end());
  T.widths.assign(k.begin(), k.end());
  if (R.exl3) {
    T.guSI = (int)(I / 16);
    T.guSI8 = (int)(I / 2);
    T.dSI = (int)(hid / 16);
    T.dSJ8 = 8;
  }
}

/// Merges the routed and shared groups' tables (uploaded) into `T`.
void buildMoeTables(const DevLayer &D, MoeTables &T) {
  const ExpertGroup &R = D.routed, &S = D.shared;
  const bool hasS = S.kind == ExpertGroup::Trellis;
  const int64_t E = R.experts, Es = hasS ? S.experts : 0, Et = E + Es;
  const int64_t hid = R.hidden, hb = hid / 128, I = R.inter;
  const int64_t IS = hasS ? S.inter : 0;
  constexpr size_t kI = 2048 * 4; // side-vector row pitch (bytes)
  T.tiles = zeroedBuf((size_t)Et * 48 * 8);
  T.widthTable = zeroedBuf((size_t)Et * 48);
  copyBytes(T.tiles.ptr(), R.tiles.ptr(), (size_t)E * 48 * 8);
  copyBytes(T.widthTable.ptr(), R.widths.ptr(), (size_t)E * 48);
  if (hasS) {
    copyBytes(T.tiles.ptr() + E * 48 * 8, S.tiles.ptr(), (size_t)Es * 48 * 8);
    copyBytes(T.widthTable.ptr() + E * 48, S.widths.ptr(), (size_t)Es * 48);
  }
  // [2][Et][2048] and [Et][2048].
  T.guSvh = zeroedBuf(2 * Et * kI);
  T.downSuh = zeroedBuf(Et * kI);
  for (int p = 0; p < 2; ++p) {
    copyRows(T.guSvh.ptr() + p * Et * kI, kI, R.guSvh.ptr() + p * E * I * 4,
             I * 4, I * 4, E);
    if (hasS)
      copyRows(T.guSvh.ptr() + (p * Et + E) * kI, kI,
               S.guSvh.ptr() + p * Es * IS * 4, IS * 4, IS * 4, Es);
  }
  copyRows(T.downSuh.ptr(), kI, R.downSuh.ptr(), I * 4, I * 4, E);
  if (hasS)
    copyRows(T.downSuh.ptr() + E * kI, kI, S.downSuh.ptr(), IS * 4, IS * 4, Es);
  // Per-expert vectors of `n` floats: [parts][Et][n] from [parts][E][n].
  auto perExpert = [&](DeviceBuffer &dst, const DeviceBuffer &r,
                       const DeviceBuffer &sh, int parts, int64_t n) {
    dst = zeroedBuf((size_t)parts * Et * n * 4);
    for (int p = 0; p < parts; ++p) {
      copyBytes(dst.ptr() + p * Et * n * 4, r.ptr() + p * E * n * 4, (size_t)E * n * 4);
      if (hasS)
        copyBytes(dst.ptr() + (p * Et + E) * n * 4, sh.ptr() + p * Es * n * 4,
                  (size_t)Es * n * 4);
    }
  };
  if (R.exl3) {
    perExpert(T.downSvh, R.downSvh, S.downSvh, 1, hid);
    perExpert(T.suhIn, R.suhIn, S.suhIn, 2, hid);
  } else {
    perExpert(T.guSuBlock, R.guSuBlock, S.guSuBlock, 2, hb);
    perExpert(T.downSvBlock, R.downSvBlock, S.downSvBlock, 1, hb);
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Construction
//===----------------------------------------------------------------------===//

CudaForward::CudaForward(const Pack &pack, const cpu::TpLayout &tp,
                         const CudaOptions &o)
    : impl_(std::make_unique<Impl>(o.device)) {
  Impl &m = *impl_;
  check(pack.config().has_value(), pack.dir(),
        ": the pack has no config.json; the cuda executor needs the model "
        "geometry");
  const ModelConfig &c = *pack.config();
  m.cfg = c;
  m.opt = o;
  m.tp = tp;
  m.rank = o.rank;
  m.N = tp.ranks;
  check(o.maxBatch >= 1 && o.maxBatch <= 8, "cuda executor: batch ", o.maxBatch,
        " is outside 1..8");
  check(o.maxContext >= 1, "cuda executor: max context must be positive");
  check(m.N >= 1 && o.rank >= 0 && o.rank < m.N, "cuda executor: rank ", o.rank,
        " of a ", m.N, "-rank layout");
  check(m.N == 1 ||
            (o.comm && o.comm->size() == m.N && o.comm->rank() == o.rank),
        "cuda executor: a ", m.N,
        "-rank layout needs a device communicator "
        "of that size for rank ",
        o.rank, " (glm-engine launch)");
  check((int64_t)tp.layers.size() == c.numLayers,
        "tensor-parallel layout "
        "has ",
        tp.layers.size(), " layers, the model has ", c.numLayers);
  check(c.numExpertsPerTok <= 64 && c.numRoutedExperts <= 1024,
        "cuda executor: at most 1024 routed experts and 64 per token are "
        "supported (config has ",
        c.numRoutedExperts, " and ", c.numExpertsPerTok, ")");
  m.numLayers =
      o.maxLayers >= 0 ? std::min(o.maxLayers, c.numLayers) : c.numLayers;
  {
    std::string ek = o.expertKernel;
    if (ek.empty())
      if (const char *e = std::getenv("GLM_EXPERT_KERNEL"))
        ek = e;
    check(ek.empty() || ek == "moe_trellis" || ek == "legacy",
          "cuda executor: expert kernel '", ek,
          "' (GLM_EXPERT_KERNEL) is not moe_trellis or legacy");
    m.legacyExperts = ek == "legacy";
    if (const char *e = std::getenv("GLM_TRELLIS_SPLIT_BLOCKS")) {
      m.splitBlocksPerSm = std::atoi(e);
      check(m.splitBlocksPerSm >= 1 && m.splitBlocksPerSm <= 64,
            "GLM_TRELLIS_SPLIT_BLOCKS='", e, "' is not 1..64");
      m.maxSplit = Impl::kMaxSplit;
    }
    // GLM_DENSE_GEMV_SPLIT=0: dense_gemv a warp a row on every matrix (the
    // grid before input slices; for A/B runs).
    if (const char *e = std::getenv("GLM_DENSE_GEMV_SPLIT"))
      m.denseGemvSplit = std::string(e) != "0";
    if (const char *e = std::getenv("GLM_DENSE_KERNEL")) {
      const std::string dk = e;
      check(dk.empty() || dk == "dense_trellis" || dk == "legacy",
            "cuda executor: dense kernel '", dk,
            "' (GLM_DENSE_KERNEL) is not dense_trellis or legacy");
      m.legacyDense = dk == "legacy";
    }
    // Tuning: GLM_DENSE_TRELLIS_CONFIG=
    //   warpsPerSm:minRows:threads:pipe(batch 1):pipe(batch > 1):minblocks.
    if (const char *e = std::getenv("GLM_DENSE_TRELLIS_CONFIG")) {
      int v[6];
      auto pipeOk = [](int p) { return p == 0 || (p >= 2 && p <= 6); };
      check(std::sscanf(e, "%d:%d:%d:%d:%d:%d", &v[0], &v[1], &v[2], &v[3],
                        &v[4], &v[5]) == 6 &&
                v[0] >= 1 && v[1] >= 1 && v[2] >= 32 && v[2] <= 256 &&
                v[2] % 32 == 0 && pipeOk(v[3]) && pipeOk(v[4]),
            "GLM_DENSE_TRELLIS_CONFIG='", e,
            "' is not warpsPerSm:minRows:threads:pipe:pipeBatched:minblocks "
            "(threads 32..256, pipes 0 or 2..6)");
      m.dt.warpsPerSm = v[0];
      m.dt.minRows = v[1];
      m.dt.threads = v[2];
      m.dt.pipe = v[3];
      m.dt.pipeBatched = v[4];
      m.dt.minBlocks = v[5];
    }
    const char *mla = std::getenv("GLM_MLA_KERNEL");
    m.legacyMla = mla && std::string(mla) == "legacy";
    // mla_core reads latent rows as float4 over 1024 threads.
    check(m.legacyMla || (c.kvLoraRank % 4 == 0 && c.qkRopeHeadDim % 4 == 0 &&
                          c.kvLoraRank <= 4096),
          "cuda executor: kv_lora_rank ", c.kvLoraRank,
          " and qk_rope_head_dim ", c.qkRopeHeadDim,
          " must be multiples of 4 (kv_lora_rank at most 4096) for "
          "mla_core; GLM_MLA_KERNEL=legacy runs any shape");
    if (const char *e = std::getenv("GLM_MLA_QABS_THREADS")) {
      m.mlaQabsThreads = std::atoi(e);
      check(m.mlaQabsThreads >= 32 && m.mlaQabsThreads <= 256 &&
                m.mlaQabsThreads % 32 == 0,
            "GLM_MLA_QABS_THREADS='", e, "' is not 32..256 (a multiple of 32)");
    }
    // The default launch tuning, shared with the compiler's plans
    // (codegen/moe_trellis_abi.h).
    const int64_t rows16 = c.hiddenSize / 16;
    const codegen::MoeTrellisTuning mt =
        codegen::defaultMoeTrellisTuning(c.hiddenSize);
    m.mtSplit = mt.guSplit;
    m.mtGroup = mt.downGroup;
    m.mtThreads = mt.threads;
    m.mtPipe = mt.pipe;
    m.mtMinBlocks = mt.minBlocks;
    // Tuning: GLM_MOE_TRELLIS_CONFIG=split:group:threads:pipe:minblocks
    // [:blocksPerSm] (blocksPerSm > 0: the persistent path, which needs
    // group 1 and pipe >= 2).
    if (const char *e = std::getenv("GLM_MOE_TRELLIS_CONFIG")) {
      int v[6] = {0, 0, 0, 0, 0, 0};
      const int n = std::sscanf(e, "%d:%d:%d:%d:%d:%d", &v[0], &v[1], &v[2],
                                &v[3], &v[4], &v[5]);
      check((n == 5 || n == 6) && v[0] >= 1 && rows16 % v[0] == 0 &&
                v[1] >= 1 && 16 % v[1] == 0 && v[2] >= 32 && v[2] % 32 == 0 &&
                (v[5] <= 0 || (v[1] == 1 && v[3] >= 2)),
            "GLM_MOE_TRELLIS_CONFIG='", e,
            "' is not split:group:threads:pipe:minblocks[:blocksPerSm] with "
            "split dividing hidden/16, group dividing 16 (1 when "
            "blocksPerSm > 0) and pipe >= 2 when blocksPerSm > 0");
      m.mtSplit = v[0];
      m.mtGroup = v[1];
      m.mtThreads = v[2];
      m.mtPipe = v[3];
      m.mtMinBlocks = v[4];
      m.mtBlocksPerSm = v[5];
    }
  }

  // The fill kernels first (the uploader's random mode needs them), then
  // every helper family the step launches, at the blocks enqueueStep uses;
  // they are built with the codegen kernels by buildKernels below.
  m.needHelper("fill_random", kBlock);
  m.needHelper("fill_f32", kBlock);
  m.buildKernels(o.planKernels);
  for (const char *f :
       {"embed_tokens", "kv_store", "index_key_store", "indexer_scores_ctx",
        "dsa_iota", "transpose", "gemv_any", "reduce_units", "swiglu",
        "hf_expert_act", "hf_expert_down", "exl3_expert_in", "moe_exl3_in",
        "onehot", "vocab_gather", "sum_parts"})
    m.needHelper(f, kBlock);
  m.needHelper("rms_norm_rows", 1024);
  m.needHelper("add_rms_norm", 1024);
  m.needHelper("dsa_select", 1024);
  m.needHelper("rope_rows",
               (unsigned)std::max<int64_t>(32, c.qkRopeHeadDim / 2));
  m.needHelper("route",
               (unsigned)std::max<int64_t>(1, c.numRoutedExperts)); // E <= 1024
  if (m.legacyMla) {
    m.needHelper("mla_attn", kBlock);
  } else {
    m.needHelper("mla_qabs", (unsigned)m.mlaQabsThreads);
    m.needHelper("mla_core", 1024);
    m.needHelper("mla_out", 256);
  }

  Uploader up(pack.dir(), o.randomWeights,
              m.genFn(Impl::helperSpec("fill_random", kBlock)),
              m.genFn(Impl::helperSpec("fill_f32", kBlock)));
  auto vec = [&](const std::string &name, int64_t n) {
    const WeightInfo &w = pack.get(name);
    check(w.ranges.size() == 1, "cuda executor: ", name,
          " is not a plain vector");
    DeviceBuffer b(std::max<int64_t>(n, 1) * 4 + 256);
    b.zero();
    up.f32(w.ranges[0], b.ptr(), 0, n);
    return b;
  };
  auto lin = [&](const std::string &name) {
    DeviceLinear L = makeLinear(pack.get(name), up);
    m.needLinear(L);
    return L;
  };
  const int64_t d = c.hiddenSize, H = c.numHeads, dn = c.qkNopeHeadDim,
                dr = c.qkRopeHeadDim, dv = c.vHeadDim, kvr = c.kvLoraRank,
                lat = kvr + dr, MB = o.maxBatch, ctxN = o.maxContext;
  const int64_t V = c.vocabSize, K = c.numExpertsPerTok, E = c.numRoutedExperts;

  m.embed = makeLinear(pack.get("model.embed_tokens.weight"), up);
  m.finalNorm = vec("model.norm.weight", d);
  {
    std::string head = pack.find("lm_head.weight")
                           ? "lm_head.weight"
                           : "model.embed_tokens.weight";
    const int64_t vb = tp.vocabBegin.at(m.rank),
                  cnt = tp.vocabBegin.at(m.rank + 1) - vb;
    m.lmHead = m.N > 1 ? makeLinear(pack.get(head), up, vb, cnt)
                       : makeLinear(pack.get(head), up);
    m.needLinear(m.lmHead);
    for (int r = 0; r < m.N; ++r)
      m.maxCount =
          std::max(m.maxCount, tp.vocabBegin[r + 1] - tp.vocabBegin[r]);
  }
  bool haveSel = c.indexNHeads == 0;
  std::vector<DeviceLinear> kvB;
  int64_t maxSlots = 1, maxActD = 1;
  for (int64_t l = 0; l < m.numLayers; ++l) {
    const cpu::TpLayerLayout &TL = tp.layers[l];
    DevLayer D;
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    D.inputNorm = vec(p + "input_layernorm.weight", d);
    D.postNorm = vec(p + "post_attention_layernorm.weight", d);
    D.qA = lin(a + "q_a_proj.weight");
    D.qANorm = vec(a + "q_a_layernorm.weight", c.qLoraRank);
    D.qB = lin(a + "q_b_proj.weight");
    D.kvA = lin(a + "kv_a_proj_with_mqa.weight");
    D.kvANorm = vec(a + "kv_a_layernorm.weight", kvr);
    D.o = lin(a + "o_proj.weight");
    // kv_b_proj: read as stored by the attention kernels when its format
    // allows (BF16/F16/F32/FP8), else materialised in fp32 below.
    kvB.push_back(lin(a + "kv_b_proj.weight"));
    {
      const WeightFormat f = kvB.back().format;
      const bool fp8 = f == WeightFormat::Fp8Block ||
                       f == WeightFormat::Fp8Row || f == WeightFormat::Mxfp8;
      D.kvDirect = !m.legacyMla && kvB.back().fullRows &&
                   kvB.back().in == kvr && kvB.back().out == H * (dn + dv) &&
                   (fp8 || f == WeightFormat::BF16 || f == WeightFormat::F16 ||
                    f == WeightFormat::F32) &&
                   (f != WeightFormat::Mxfp8 || kvr % 32 == 0);
      D.kvDt = fp8 ? 3 : kvB.back().dtype;
      D.kvSk = f == WeightFormat::Fp8Block ? 1
               : f == WeightFormat::Fp8Row ? 2
               : f == WeightFormat::Mxfp8  ? 3
                                           : 0;
      if (!D.kvDirect) {
        D.kvDt = 0;
        D.kvSk = 0;
        D.kvBT = DeviceBuffer((uint64_t)kvr * H * (dn + dv) * 4);
      }
    }
    std::vector<int> heads;
    for (int64_t hh = 0; hh < H; ++hh)
      if (TL.headRank[hh] == m.rank)
        heads.push_back((int)hh);
    D.nHeads = (int)heads.size();
    D.heads = DeviceBuffer(std::max<size_t>(1, heads.size()) * 4);
    if (!heads.empty())
      D.heads.upload(heads.data(), heads.size() * 4);
    D.fullIndexer = c.indexNHeads > 0 && c.isFullIndexerLayer(l);
    haveSel |= D.fullIndexer;
    check(haveSel, "layer ", l,
          " is a shared indexer layer with no full layer before it");
    D.latent = DeviceBuffer((uint64_t)MB * ctxN * lat * 4);
    D.moe = c.isMoeLayer(l);
    const std::string mp = p + "mlp.";
    if (D.moe) {
      D.router = lin(mp + "gate.weight");
      if (pack.find(mp + "gate.e_score_correction_bias"))
        D.routerBias = vec(mp + "gate.e_score_correction_bias", E);
      const int64_t halves = tp.expertHalves;
      std::vector<std::vector<std::string>> names(E);
      std::vector<std::vector<bool>> owned(E);
      const char *proj[3] = {"gate_proj.weight", "up_proj.weight",
                             "down_proj.weight"};
      const int64_t eh = std::max<int64_t>(
          halves, cpu::numChunks(roundUp128(c.moeIntermediateSize)));
      for (int64_t e = 0; e < E; ++e) {
        for (int pj = 0; pj < 3; ++pj)
          names[e].push_back(mp + "experts." + std::to_string(e) + "." +
                             proj[pj]);
        for (int64_t hh = 0; hh < eh; ++hh)
          owned[e].push_back(
              (hh < halves ? tp.expertHalfRank(l, e, hh)
                           : (int)((halves * e + hh + l) % m.N)) == m.rank);
      }
      D.routed = makeExperts(pack, names, owned, up);
      if (c.numSharedExperts > 0) {
        std::vector<std::vector<std::string>> sn(1);
        for (int pj = 0; pj < 3; ++pj)
          sn[0].push_back(mp + "shared_experts." + proj[pj]);
        const int64_t sw = pack.get(sn[0][0]).shape.at(0);
        std::vector<std::vector<bool>> so(1);
        for (int64_t hh = 0; hh < std::max<int64_t>(16, cpu::numChunks(sw));
             ++hh)
          so[0].push_back((hh < halves
                               ? tp.expertHalfRank(l, E, hh)
                               : (int)((halves * E + hh + l) % m.N)) == m.rank);
        D.shared = makeExperts(pack, sn, so, up);
        check(D.shared.kind == D.routed.kind && D.shared.exl3 == D.routed.exl3,
              "cuda executor: layer ", l,
              " stores its shared expert in "
              "another format than its routed experts");
      }
      if (D.routed.kind == ExpertGroup::Trellis && !D.routed.exl3)
        exlr8Signs(pack.get(names[0][0]), pack.get(names[0][2]), up, D.signsIn,
                   D.signsOut);
      if (D.routed.kind == ExpertGroup::Plain) {
        const int64_t chunks = cpu::numChunks(D.routed.inter);
        int64_t slots = K * chunks;
        if (D.shared.kind == ExpertGroup::Plain)
          slots += cpu::numChunks(D.shared.inter);
        maxSlots = std::max(maxSlots, slots);
        maxActD = std::max({maxActD, K * D.routed.inter, D.shared.inter});
      }
      if (!m.legacyExperts && D.routed.kind == ExpertGroup::Trellis &&
          moeTrellisRefusal(D, K, (int)MB).empty() &&
          m.mtDims(MoeTables(), (int)MB).valid()) {
        describeMoeTables(D, D.mt);
        m.mtMaxShared = std::max<int64_t>(m.mtMaxShared, D.mt.nShared);
        for (int B = 1; B <= MB; ++B)
          for (int st = 0; st < 2; ++st)
            m.need(m.mtSpec(D.mt, B, st));
        m.need(m.hadSpec());
      }
      for (ExpertGroup *G : {&D.routed, &D.shared}) {
        if (G->kind != ExpertGroup::Trellis || D.mt.on)
          continue;
        for (int B = 1; B <= MB; ++B)
          m.need(spec("expert_gemv_trellis", {{"widths", G->widthDigits},
                                              {"codebook", cbName(G->codebook)},
                                              {"e4m3", G->e4m3 ? "1" : "0"},
                                              {"batch", std::to_string(B)},
                                              {"sv", "f32"},
                                              {"threads", "256"}}));
        m.need(spec("moe_reduce", {{"threads", "256"}}));
        m.need(m.hadSpec());
      }
    } else {
      D.gate = lin(mp + "gate_proj.weight");
      D.up = lin(mp + "up_proj.weight");
      D.down = lin(mp + "down_proj.weight");
      const int64_t chunks = cpu::numChunks(c.intermediateSize);
      std::vector<uint8_t> own(chunks);
      for (int64_t ch = 0; ch < chunks; ++ch)
        own[ch] = TL.denseChunkRank[ch] == m.rank;
      D.denseOwn = DeviceBuffer(std::max<int64_t>(chunks, 1));
      D.denseOwn.upload(own.data(), own.size());
      m.maxInter = std::max(m.maxInter, c.intermediateSize);
    }
    m.layers.push_back(std::move(D));
  }
  // Full indexer layers: their projections.
  for (int64_t l = 0; l < m.numLayers; ++l) {
    DevLayer &D = m.layers[l];
    if (!D.fullIndexer)
      continue;
    const std::string ix =
        "model.layers." + std::to_string(l) + ".self_attn.indexer.";
    const int64_t hd = c.indexHeadDim;
    D.wqB = lin(ix + "wq_b.weight");
    D.wk = lin(ix + "wk.weight");
    D.kNormW = vec(ix + "k_norm.weight", hd);
    D.kNormB = vec(ix + "k_norm.bias", hd);
    D.weightsProj = lin(ix + "weights_proj.weight");
    D.indexKeys = DeviceBuffer((uint64_t)MB * ctxN * hd * 4);
  }
  m.buildKernels(o.planKernels);
  up.run("uploading weights to " + deviceName());
  // moe_trellis tables: the groups' tables merged; the groups' own side
  // tables (legacy path only) are released.
  for (DevLayer &D : m.layers) {
    if (!D.mt.on)
      continue;
    buildMoeTables(D, D.mt);
    for (ExpertGroup *G : {&D.routed, &D.shared})
      for (DeviceBuffer *b : {&G->tiles, &G->widths, &G->guSvh, &G->guSuBlock,
                              &G->downSuh, &G->downSvBlock, &G->downSvh,
                              &G->suhIn})
        *b = DeviceBuffer();
  }

  // Scratch.
  const int64_t nh = std::max<int64_t>(1, c.indexNHeads),
                hd = std::max<int64_t>(1, c.indexHeadDim);
  auto f32 = [](int64_t n) {
    DeviceBuffer b((uint64_t)std::max<int64_t>(1, n) * 4 + 256);
    b.zero();
    return b;
  };
  const int64_t qk = H * (dn + dr);
  m.x = f32(MB * d);
  m.x2 = f32(MB * d); // the residual ping-pongs between x and x2
  m.h = f32(MB * d);
  m.delta = f32(MB * d);
  m.qa = f32(2 * MB * c.qLoraRank); // q_a, then the normed q_a
  m.q = f32(MB * qk);
  m.kva = f32(MB * lat);
  m.qi = f32(MB * nh * hd);
  m.kk = f32(MB * hd);
  m.wts = f32(MB * nh);
  m.score = f32(2 * MB * ctxN);
  m.flags = f32(MB * ctxN);
  m.sel = f32(MB * ctxN);
  m.nsel = f32(MB);
  m.p = f32(2 * MB * H * ctxN);
  m.qabs = f32(MB * H * kvr);
  m.ctxv = f32(MB * H * kvr);
  m.ov = f32(MB * H * dv);
  m.rlog = f32(MB * E);
  m.ids = f32(MB * K);
  m.rw = f32(MB * K);
  m.sIds = f32(MB); // zeros: the shared expert is index 0 of its group
  {
    std::vector<float> ones(MB, 1.0f);
    m.sW = f32(MB);
    m.sW.upload(ones.data(), ones.size() * 4);
  }
  m.xh = f32(2 * MB * (K + m.mtMaxShared) * d);
  {
    MoeTables none;
    none.nRouted = (int)E;
    none.nShared = (int)m.mtMaxShared;
    const codegen::MoeTrellisDims dm = m.mtDims(none, (int)MB);
    m.mtScratch = f32((int64_t)dm.scratchFloats());
    m.mtCounters = f32((int64_t)dm.counterInts()); // zeros, kept zero
  }
  m.partial = f32(MB * K * 16 * d);
  m.partialS = f32(MB * 16 * d);
  m.g = f32(MB * m.maxInter);
  m.u = f32(MB * m.maxInter);
  m.act = f32(MB * m.maxInter);
  m.actD = f32(2 * MB * maxActD);
  m.part = f32(2 * MB * maxSlots * d);
  m.xpad = f32(MB * std::max(m.maxInPad, m.maxOutPad));
  m.xrot = f32(MB * m.maxInPad);
  m.z = f32(std::max<int64_t>(8, MB) * m.maxOutPad);
  m.zparts = f32(Impl::kMaxSplit * m.maxOutPad);
  m.dtScratch = f32(m.dtMaxScratch);
  m.dtCounters = f32(m.maxOutPad / 128 + 1); // zeros, kept zero
  m.logitsLocal = f32(MB * m.maxCount);
  m.gathered = f32((int64_t)m.N * MB * m.maxCount);
  m.logits = f32(MB * V);
  m.rows = f32(3 * MB);
  {
    std::vector<long long> vbv(tp.vocabBegin.begin(), tp.vocabBegin.end());
    m.vocabBegin = DeviceBuffer(vbv.size() * 8);
    m.vocabBegin.upload(vbv.data(), vbv.size() * 8);
  }
  m.lengths.assign(MB, 0);

  // kv_b_proj as fp32 W^T [kvr, H*(dn+dv)] through its own GEMV on one-hot
  // rows (8 columns per launch), on the device.
  const int64_t R = H * (dn + dv);
  DeviceBuffer oneHot = f32(kvr);
  for (int64_t l = 0; l < m.numLayers; ++l) {
    DevLayer &D = m.layers[l];
    if (D.kvDirect) {
      D.kvB = std::move(kvB[l]);
      continue;
    }
    for (int64_t c0 = 0; c0 < kvr; ++c0) {
      m.call("onehot", blocksFor(kvr), 1, 1, kBlock, 0,
             KArgs() << oneHot.ptr() << 1 << (int)kvr << (int)c0);
      m.gemv(kvB[l], oneHot.ptr(), kvr, D.kvBT.ptr() + (CUdeviceptr)c0 * R * 4,
             R, 1);
    }
    if (!m.legacyMla) {
      // Rows contiguous (coalesced per-head products).
      DeviceBuffer w((uint64_t)R * kvr * 4);
      m.call("transpose", blocksFor(R * kvr), 1, 1, kBlock, 0,
             KArgs() << D.kvBT.ptr() << w.ptr() << (long long)R << (int)kvr);
      GLM_CU(cuStreamSynchronize(m.stream));
      D.kvBT = std::move(w);
    }
  }
  GLM_CU(cuStreamSynchronize(m.stream));
  m.launches = 0;
}

CudaForward::~CudaForward() = default;

void CudaForward::reset(int seq) {
  check(seq >= 0 && seq < impl_->opt.maxBatch,
        "cuda executor: sequence "
        "slot ",
        seq, " outside 0..", impl_->opt.maxBatch - 1);
  impl_->lengths[seq] = 0;
}
int64_t CudaForward::length(int seq) const { return impl_->lengths.at(seq); }
int CudaForward::maxBatch() const { return impl_->opt.maxBatch; }
const ModelConfig &CudaForward::config() const { return impl_->cfg; }
int CudaForward::planKernelsUsed() const {
  return impl_->fromPlanCubin + impl_->fromPlanPtx;
}
std::string CudaForward::kernelBuildSummary() const {
  const Impl &m = *impl_;
  std::ostringstream os;
  os << "codegen kernels: " << m.fromPlanCubin << " plan CUBIN, "
     << m.fromPlanPtx << " plan PTX through the driver JIT, " << m.fromCache
     << " kernel cache, " << m.fromNvrtc << " NVRTC";
  if (m.fromStalePlan)
    os << " (" << m.fromStalePlan
       << " plan kernels were built from other templates or another NVRTC "
          "and were not used: recompile the plan with this glmc)";
  os << "; "
     << std::fixed << std::setprecision(2) << m.buildSeconds << " s";
  return os.str();
}
std::string CudaForward::expertKernelUsed() const {
  bool mt = false, legacy = false;
  for (const DevLayer &L : impl_->layers) {
    mt |= L.mt.on;
    legacy |= !L.mt.on && L.routed.kind == ExpertGroup::Trellis;
  }
  return mt && legacy ? "moe_trellis+legacy"
         : mt         ? "moe_trellis"
         : legacy     ? "legacy"
                      : "none";
}
std::string CudaForward::deviceName() const {
  return impl_->dev.name() + " (" + impl_->arch + ")";
}

std::vector<std::vector<float>>
CudaForward::stepBatch(const std::vector<int> &seqs,
                       const std::vector<int64_t> &tokens) {
  Impl &m = *impl_;
  const ModelConfig &c = m.cfg;
  const int B = (int)seqs.size(), MB = m.opt.maxBatch;
  check(B >= 1 && B <= MB && tokens.size() == seqs.size(),
        "cuda executor: a step takes 1..", MB,
        " rows (one token per "
        "sequence), got ",
        seqs.size(), " slots and ", tokens.size(), " tokens");
  std::vector<int> host(3 * MB, 0);
  std::set<int> seen;
  for (int b = 0; b < B; ++b) {
    const int s = seqs[b];
    check(s >= 0 && s < MB && seen.insert(s).second,
          "cuda executor: "
          "sequence slot ",
          s, " is outside 0..", MB - 1, " or repeated");
    check(tokens[b] >= 0 && tokens[b] < c.vocabSize, "token id ", tokens[b],
          " is outside the vocabulary [0, ", c.vocabSize, ")");
    check(m.lengths[s] < m.opt.maxContext,
          "the sequence is full: ", m.opt.maxContext,
          " tokens of context (raise --max-context)");
    host[b] = (int)tokens[b];
    host[MB + b] = (int)m.lengths[s];
    host[2 * MB + b] = s;
  }
  GLM_CU(cuCtxSetCurrent(m.ctx));
  GLM_CU(
      cuMemcpyHtoDAsync(m.rows.ptr(), host.data(), host.size() * 4, m.stream));
  m.runStep(B, m.opt.useGraphs);
  // Wait first: a copy to pageable memory would block on a stalled step.
  m.waitStream();
  std::vector<float> all((size_t)B * c.vocabSize);
  GLM_CU(
      cuMemcpyDtoHAsync(all.data(), m.logits.ptr(), all.size() * 4, m.stream));
  GLM_CU(cuStreamSynchronize(m.stream));
  std::vector<std::vector<float>> out(B);
  for (int b = 0; b < B; ++b) {
    out[b].assign(all.begin() + (size_t)b * c.vocabSize,
                  all.begin() + (size_t)(b + 1) * c.vocabSize);
    ++m.lengths[seqs[b]];
  }
  return out;
}

std::vector<float> CudaForward::step(int64_t token) {
  return std::move(stepBatch({0}, {token})[0]);
}

double CudaForward::weightBytesPerToken() const {
  const Impl &m = *impl_;
  double b = (double)m.lmHead.bytes;
  for (const DevLayer &L : m.layers) {
    for (const DeviceLinear *x :
         {&L.qA, &L.qB, &L.kvA, &L.o, &L.wqB, &L.wk, &L.weightsProj, &L.router,
          &L.gate, &L.up, &L.down})
      b += (double)x->bytes;
    // The kv_b the attention reads: as stored, or its fp32 expansion.
    b += L.kvDirect ? (double)L.kvB.bytes : (double)L.kvBT.size();
    if (L.moe) {
      b += L.routed.bytesPerExpert * (double)m.cfg.numExpertsPerTok;
      b += L.shared.bytesPerExpert;
    }
  }
  return b;
}

uint64_t CudaForward::weightBytesResident() const {
  const Impl &m = *impl_;
  uint64_t b = m.lmHead.data.size() + m.embed.data.size();
  for (const DevLayer &L : m.layers) {
    for (const DeviceLinear *x :
         {&L.qA, &L.qB, &L.kvA, &L.o, &L.wqB, &L.wk, &L.weightsProj, &L.router,
          &L.gate, &L.up, &L.down})
      b += x->data.size() + x->scale.size();
    b += L.kvBT.size() + L.kvB.data.size() + L.kvB.scale.size();
    for (const ExpertGroup *G : {&L.routed, &L.shared})
      b += G->tileBytes.size() + G->gate.size() + G->up.size() + G->down.size();
  }
  return b;
}

void CudaForward::runStepOnly(int batch, bool graph) {
  Impl &m = *impl_;
  check(batch >= 1 && batch <= m.opt.maxBatch, "cuda executor: batch ", batch,
        " outside 1..", m.opt.maxBatch);
  GLM_CU(cuCtxSetCurrent(m.ctx));
  m.runStep(batch, graph);
  m.waitStream();
}

double CudaForward::kernelTimeSumMs(
    int batch, std::vector<std::pair<std::string, double>> *perKernel,
    std::map<std::string, int> *launchCount) {
  Impl &m = *impl_;
  GLM_CU(cuCtxSetCurrent(m.ctx));
  m.profiling = true;
  m.eventUsed = 0;
  try {
    m.enqueueStep(batch);
  } catch (...) {
    m.profiling = false;
    throw;
  }
  m.profiling = false;
  GLM_CU(cuStreamSynchronize(m.stream));
  std::map<CUfunction, std::string> names;
  for (auto &kv : m.gen)
    names[kv.second] = kv.first;
  std::map<std::string, double> byName;
  if (launchCount)
    launchCount->clear();
  double sum = 0;
  for (size_t i = 0; i < m.eventUsed; ++i) {
    float ms = 0;
    GLM_CU(cuEventElapsedTime(&ms, m.events[i].first, m.events[i].second));
    sum += ms;
    byName[names[m.eventFn[i]]] += ms;
    if (launchCount)
      ++(*launchCount)[names[m.eventFn[i]]];
  }
  if (perKernel) {
    perKernel->assign(byName.begin(), byName.end());
    std::sort(perKernel->begin(), perKernel->end(),
              [](auto &a, auto &b) { return a.second > b.second; });
  }
  return sum;
}

int CudaForward::launchesPerStep(int batch) {
  Impl &m = *impl_;
  GLM_CU(cuCtxSetCurrent(m.ctx));
  m.launches = 0;
  m.enqueueStep(batch);
  GLM_CU(cuStreamSynchronize(m.stream));
  return m.launches;
}

//===----------------------------------------------------------------------===//
// Generator
//===----------------------------------------------------------------------===//

namespace {

class CudaGenerator : public Generator {
public:
  CudaGenerator(std::unique_ptr<CudaForward> fwd, int64_t maxContext)
      : fwd_(std::move(fwd)), maxContext_(maxContext) {}

  GenerationResult generate(const std::vector<int64_t> &prompt,
                            const SamplingParams &params,
                            const TokenCallback &onToken,
                            std::vector<float> *logitsOut) override {
    std::lock_guard<std::mutex> lock(mu_); // one device sequence at a time
    fwd_->reset(0);
    // Prefill seam: the prompt goes through the decode step one token at a
    // time (runGeneration calls `step` per position); a chunked tensor-core
    // prefill would run the prompt here and hand runGeneration the last
    // position's logits.
    return runGeneration(fwd_->config(), maxContext_, prompt, params, onToken,
                         logitsOut,
                         [&](int64_t token) { return fwd_->step(token); });
  }
  const ModelConfig &config() const override { return fwd_->config(); }
  int64_t maxContext() const override { return maxContext_; }
  std::string backendName() const override { return "cuda"; }

private:
  std::unique_ptr<CudaForward> fwd_;
  int64_t maxContext_;
  std::mutex mu_;
};

} // namespace

std::unique_ptr<Generator>
makeCudaGenerator(const Pack &pack, const cpu::TpLayout &tp, int64_t maxContext,
                  const std::vector<plan::KernelDef> &planKernels, int rank,
                  dist::DeviceComm *comm, int device) {
  check(comm != nullptr || tp.ranks == 1, "--backend cuda: this plan has ",
        tp.ranks,
        " ranks; run it with "
        "glm-engine launch (one process per GPU), or use a 1-Spark plan, "
        "--sparks 1 or --backend cpu");
  check(CudaDevice::count() > 0,
        "--backend cuda: no CUDA device is visible (use --backend cpu)");
  CudaOptions o;
  o.maxContext = maxContext;
  o.rank = rank;
  o.comm = comm;
  o.device = device;
  o.planKernels = planKernels;
  if (const char *g = std::getenv("GLM_CUDA_GRAPHS"))
    o.useGraphs = std::string(g) != "0";
  auto fwd = std::make_unique<CudaForward>(pack, tp, o);
  return std::make_unique<CudaGenerator>(std::move(fwd), maxContext);
}

std::unique_ptr<Generator>
makeCudaGenerator(const Pack &pack, const cpu::TpLayout &tp, int64_t maxContext,
                  const std::vector<plan::KernelDef> &planKernels) {
  return makeCudaGenerator(pack, tp, maxContext, planKernels, 0, nullptr);
}

} // namespace glm::rt::cuda
