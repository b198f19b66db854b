//===- bench.cpp - device benchmarks printed as ratios to copy bandwidth --===//
//
// Every number is a median of CUDA-event-timed repetitions after warm-ups.
// Inputs are rotated so that repeated runs do not measure the L2: the
// per-matrix suite replays a graph over 64 distinct copies of the matrix,
// the layer suite a graph over `layers` distinct layers. Random trellis bytes
// come from a hash kernel on the device (every bit pattern is a valid
// trellis stream); routing is fixed by host logits so the selected experts
// are distinct and their bytes really are read.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/bench.h"
#include "codegen/codegen.h"
#include "runtime/base/error.h"
#include "runtime/base/numeric.h"
#include "runtime/cuda/cuda_api.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

namespace glm::rt::cuda {

namespace {

using glm::codegen::KernelSpec;

KernelSpec mkSpec(const std::string &family,
                  std::map<std::string, std::string> args) {
  KernelSpec s;
  s.family = family;
  for (auto &[k, v] : args)
    s.args[k] = v;
  return s;
}

const char *kFillSource = R"(
extern "C" __global__ void glm_bench_fill(unsigned *p, unsigned long long n,
                                          unsigned long long seed) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x +
                              threadIdx.x;
       i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
    unsigned long long z = (i + seed) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    p[i] = (unsigned)(z ^ (z >> 31));
  }
}
)";

/// Kernels compiled by NVRTC (in parallel), loaded on the calling thread.
class KernelSet {
public:
  explicit KernelSet(std::string arch) : arch_(std::move(arch)) {}
  void add(const KernelSpec &s) {
    std::string name = glm::codegen::kernelName(s);
    if (!mods_.count(name) && !pending_.count(name))
      pending_[name] = glm::codegen::generateSource(s);
  }
  void addRaw(const std::string &name, const std::string &source) {
    if (!mods_.count(name))
      pending_[name] = source;
  }
  void build() {
    std::vector<std::pair<std::string, std::string>> todo(pending_.begin(),
                                                          pending_.end());
    pending_.clear();
    std::vector<std::vector<uint8_t>> bins(todo.size());
    std::vector<std::string> errs(todo.size());
    size_t next = 0;
    std::mutex mu;
    auto work = [&] {
      for (;;) {
        size_t i;
        {
          std::lock_guard<std::mutex> l(mu);
          if (next == todo.size())
            return;
          i = next++;
        }
        try {
          bins[i] = glm::codegen::compileWithNvrtc(todo[i].second,
                                                   todo[i].first, arch_)
                        .cubin;
        } catch (const std::exception &e) {
          errs[i] = e.what();
        }
      }
    };
    unsigned n = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < n; ++t)
      pool.emplace_back(work);
    for (auto &t : pool)
      t.join();
    for (size_t i = 0; i < todo.size(); ++i) {
      check(errs[i].empty(), "bench: kernel ", todo[i].first,
            " did not compile: ", errs[i]);
      std::vector<char> image(bins[i].begin(), bins[i].end());
      mods_[todo[i].first] = std::make_unique<Module>(image);
    }
  }
  CUfunction get(const KernelSpec &s) { return get(glm::codegen::kernelName(s)); }
  CUfunction get(const std::string &name) {
    auto it = mods_.find(name);
    check(it != mods_.end(), "bench: kernel ", name, " was not built");
    return it->second->function(name);
  }

private:
  std::string arch_;
  std::map<std::string, std::string> pending_;
  std::map<std::string, std::unique_ptr<Module>> mods_;
};

/// Kernel parameters by value.
class Params {
public:
  template <class T> Params &operator<<(T v) {
    static_assert(sizeof(T) <= 8, "scalar parameters");
    uint64_t s = 0;
    std::memcpy(&s, &v, sizeof v);
    slots_.push_back(s);
    return *this;
  }
  void launch(CUfunction f, unsigned gx, unsigned gy, unsigned bx,
              CUstream stream) {
    std::vector<void *> p;
    for (auto &s : slots_)
      p.push_back(&s);
    cuda::launch(f, gx, gy, 1, bx, 0, stream, p.data());
  }

private:
  std::vector<uint64_t> slots_;
};

void fillRandom(CUfunction fill, CUdeviceptr p, size_t bytes, uint64_t seed,
                CUstream s) {
  Params a;
  a << p << (unsigned long long)(bytes / 4) << (unsigned long long)seed;
  a.launch(fill, 1024, 1, 256, s);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

class Graph {
public:
  Graph() = default;
  ~Graph() {
    if (exec_)
      cuGraphExecDestroy(exec_);
    if (graph_)
      cuGraphDestroy(graph_);
  }
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;
  template <class F> void capture(CUstream s, F body) {
    GLM_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    body();
    GLM_CU(cuStreamEndCapture(s, &graph_));
    GLM_CU(cuGraphInstantiateWithFlags(&exec_, graph_, 0));
  }
  void launch(CUstream s) { GLM_CU(cuGraphLaunch(exec_, s)); }

private:
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

/// Median milliseconds of `fn` (work enqueued on s) over adaptive reps.
template <class F> double timeMs(CUstream s, int maxReps, F fn) {
  Timer t;
  fn(); // warm-up
  GLM_CU(cuStreamSynchronize(s));
  t.start(s);
  fn();
  double first = t.stopMs(s);
  int reps = int(std::clamp(300.0 / std::max(first, 1e-3), 3.0,
                            double(std::max(3, maxReps))));
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) {
    t.start(s);
    fn();
    v.push_back(t.stopMs(s));
  }
  return median(v);
}

struct Ctx {
  const BenchOptions &opt;
  std::ostream &log;
  CUstream stream = nullptr;
  KernelSet kernels;
  CUfunction fill = nullptr;
  BenchResult res;
  uint64_t seed = 1;
};

void addRow(Ctx &c, const std::string &suite, const std::string &name,
            double ms, double bytes) {
  BenchRow r;
  r.suite = suite;
  r.name = name;
  r.us = ms * 1e3;
  r.bytes = bytes;
  r.ratio = c.res.copyGBs > 0 ? bytes / (ms * 1e-3) / (c.res.copyGBs * 1e9) : 0;
  char line[256];
  std::snprintf(line, sizeof line, "  %-10s %-46s %10.2f us %9.1f GB/s  %.3f\n",
                suite.c_str(), name.c_str(), r.us, bytes / (ms * 1e-3) / 1e9,
                r.ratio);
  c.log << line << std::flush;
  c.res.rows.push_back(r);
}

void benchCopy(Ctx &c) {
  size_t bytes = size_t(c.opt.copyGiB * double(1ull << 30)) / 256 * 256;
  check(bytes >= (1u << 20), "bench: --copy-gib too small");
  DeviceBuffer a(bytes), b(bytes);
  fillRandom(c.fill, a.ptr(), bytes, c.seed++, c.stream);
  double ms = timeMs(c.stream, c.opt.reps, [&] {
    GLM_CU(cuMemcpyDtoDAsync(b.ptr(), a.ptr(), bytes, c.stream));
  });
  c.res.copyGBs = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
  std::ostringstream name;
  name << "cuMemcpyDtoD " << double(bytes) / double(1ull << 30)
       << " GiB (read+write)";
  addRow(c, "copy", name.str(), ms, 2.0 * double(bytes));
}

const char *cbName(int cb) { return cb == 1 ? "mcg" : "mul1"; }

/// Per-matrix trellis GEMV (dense_gemv_trellis) at expert shapes.
void benchExpert(Ctx &c) {
  struct Shape {
    const char *name;
    int in, out;
  };
  const Shape shapes[] = {{"glm53 gate/up", 6144, 2048},
                          {"glm53 down", 2048, 6144},
                          {"flash gate/up", 4096, 2048},
                          {"flash down", 2048, 4096}};
  const int kCopies = 64, kThreads = 128;
  auto specOf = [](int K, int cb, int e4m3, int batch) {
    return mkSpec("dense_gemv_trellis", {{"K", std::to_string(K)},
                                         {"codebook", cbName(cb)},
                                         {"e4m3", std::to_string(e4m3)},
                                         {"batch", std::to_string(batch)},
                                         {"threads", std::to_string(kThreads)}});
  };
  for (int batch : {1, 8})
    for (int K = 2; K <= 4; ++K)
      for (int cb : {1, 2})
        for (int e4m3 : {0, 1})
          c.kernels.add(specOf(K, cb, e4m3, batch));
  c.log << "expert: compiling kernels...\n" << std::flush;
  c.kernels.build();
  size_t maxBytes = 0;
  for (const Shape &s : shapes)
    maxBytes = std::max(maxBytes, size_t(s.in) * s.out * 4 / 8);
  DeviceBuffer pool(maxBytes * kCopies);
  fillRandom(c.fill, pool.ptr(), pool.size(), c.seed++, c.stream);
  DeviceBuffer x(size_t(8) * 6144 * 4), z(size_t(8) * 6144 * 4);
  {
    std::mt19937 rng(5);
    std::normal_distribution<float> d;
    std::vector<float> hx(size_t(8) * 6144);
    for (auto &v : hx)
      v = d(rng);
    x.upload(hx.data(), hx.size() * 4);
  }
  for (const Shape &s : shapes)
    for (int batch : {1, 8})
      for (int K = 2; K <= 4; ++K)
        for (int cb : {1, 2})
          for (int e4m3 : {0, 1}) {
            const size_t bytes = size_t(s.in) * s.out * K / 8;
            CUfunction f = c.kernels.get(specOf(K, cb, e4m3, batch));
            Graph g;
            g.capture(c.stream, [&] {
              for (int i = 0; i < kCopies; ++i) {
                Params p;
                p << x.ptr() << (pool.ptr() + i * bytes) << z.ptr() << batch
                  << s.in << s.out << s.out / 16 << s.out / 2 << 8;
                p.launch(f, unsigned((s.out / 16 + 3) / 4), 1, kThreads,
                         c.stream);
              }
            });
            double ms = timeMs(c.stream, c.opt.reps, [&] { g.launch(c.stream); });
            std::ostringstream name;
            name << s.name << " " << s.in << "x" << s.out << " K" << K << " "
                 << cbName(cb) << (e4m3 ? " e4m3" : "") << " b" << batch;
            addRow(c, "expert", name.str(), ms / kCopies, double(bytes));
          }
}

/// One MoE layer decode step at batch 1, GLM-5.3 shapes.
void benchMoeLayer(Ctx &c) {
  const int H = 6144, I = 2048, E = 256, topk = 8, halves = 16, nBlk = H / 128;
  const int L = std::max(1, c.opt.layers);
  struct LayerCase {
    int K, cb, e4m3;
  };
  const LayerCase cases[] = {{2, 1, 1}, {3, 1, 1}, {4, 1, 1}, {4, 2, 0}};
  auto expertSpec = [](const LayerCase &lc) {
    return mkSpec("expert_gemv_trellis", {{"widths", std::to_string(lc.K)},
                                          {"codebook", cbName(lc.cb)},
                                          {"e4m3", std::to_string(lc.e4m3)},
                                          {"batch", "1"},
                                          {"sv", "f16"},
                                          {"threads", "256"}});
  };
  const KernelSpec had = mkSpec("hadamard128", {{"vt", "f32"}, {"threads", "256"}});
  const KernelSpec gemv = mkSpec("dense_gemv", {{"format", "bf16"},
                                                {"scale", "none"},
                                                {"batch", "1"},
                                                {"threads", "256"}});
  const KernelSpec router = mkSpec("router", {{"experts", "256"},
                                              {"topk", "8"},
                                              {"threads", "256"}});
  const KernelSpec reduce = mkSpec("moe_reduce", {{"threads", "256"}});
  for (const LayerCase &lc : cases)
    c.kernels.add(expertSpec(lc));
  for (const KernelSpec *s : {&had, &gemv, &router, &reduce})
    c.kernels.add(*s);
  c.log << "moe-layer: compiling kernels...\n" << std::flush;
  c.kernels.build();

  // Small inputs shared by every layer (side vectors are a few MB at most).
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> uni(0.5f, 1.5f);
  auto halfVec = [&](size_t n) {
    std::vector<uint16_t> v(n);
    for (auto &h : v)
      h = floatToHalf(uni(rng) * ((rng() & 1) ? -1.0f : 1.0f));
    DeviceBuffer b(n * 2);
    b.upload(v.data(), n * 2);
    return b;
  };
  auto floatVec = [&](std::vector<float> v) {
    DeviceBuffer b(v.size() * 4);
    b.upload(v.data(), v.size() * 4);
    return b;
  };
  std::vector<float> signs(H), xh(H), logits(E, 0.0f);
  for (auto &s : signs)
    s = (rng() & 1) ? -1.0f : 1.0f;
  std::normal_distribution<float> nd;
  for (auto &v : xh)
    v = nd(rng);
  std::vector<int> chosen;
  for (int k = 0; k < topk; ++k) { // distinct experts, distinct memory slots
    chosen.push_back(17 * k + 3);
    logits[17 * k + 3] = 10.0f + float(k);
  }
  DeviceBuffer dSigns = floatVec(signs), dX = floatVec(xh), dXh(H * 4),
               dLogits = floatVec(logits), dLogitScratch(E * 4),
               dIds(topk * 4), dW(topk * 4), dOut(H * 4),
               dPartial(size_t(topk) * halves * H * 4),
               dPartialS(size_t(halves) * H * 4);
  DeviceBuffer guSvh = halfVec(size_t(2) * E * I), guSu = halfVec(size_t(2) * E * nBlk),
               dSuh = halfVec(size_t(E) * I), dSvB = halfVec(size_t(E) * nBlk);
  DeviceBuffer guSvhS = halfVec(size_t(2) * I), guSuS = halfVec(size_t(2) * nBlk),
               dSuhS = halfVec(I), dSvBS = halfVec(nBlk);
  int zero = 0;
  float one = 1.0f;
  DeviceBuffer dIdsS(4), dWS(4);
  dIdsS.upload(&zero, 4);
  dWS.upload(&one, 4);
  // Router weights per layer (bf16 bytes; their values do not matter: the
  // logits the router reads are the fixed host logits).
  DeviceBuffer routerW(size_t(L) * E * H * 2);
  fillRandom(c.fill, routerW.ptr(), routerW.size(), c.seed++, c.stream);

  for (const LayerCase &lc : cases) {
    const size_t halfBytes = size_t(128) * H * lc.K / 8;
    const int slots = topk + 1; // 8 routed + shared, per layer
    DeviceBuffer pool(size_t(L) * slots * 3 * halves * halfBytes);
    fillRandom(c.fill, pool.ptr(), pool.size(), c.seed++, c.stream);
    auto halfPtr = [&](int l, int slot, int p, int h) {
      return pool.ptr() +
             ((size_t(l) * slots + slot) * 3 * halves + size_t(p) * halves + h) *
                 halfBytes;
    };
    std::vector<DeviceBuffer> tables, tablesS;
    std::vector<uint8_t> widths(size_t(E) * 3 * halves, uint8_t(lc.K));
    DeviceBuffer dWidths(widths.size()), dWidthsS(3 * halves);
    dWidths.upload(widths.data(), widths.size());
    dWidthsS.upload(widths.data(), 3 * halves);
    for (int l = 0; l < L; ++l) {
      std::vector<uint64_t> t(size_t(E) * 3 * halves), ts(3 * halves);
      for (int e = 0; e < E; ++e) {
        int slot = 0;
        for (int k = 0; k < topk; ++k)
          if (chosen[k] == e)
            slot = k;
        for (int p = 0; p < 3; ++p)
          for (int h = 0; h < halves; ++h)
            t[(size_t(e) * 3 + p) * halves + h] = halfPtr(l, slot, p, h);
      }
      for (int p = 0; p < 3; ++p)
        for (int h = 0; h < halves; ++h)
          ts[p * halves + h] = halfPtr(l, topk, p, h);
      tables.emplace_back(t.size() * 8);
      tables.back().upload(t.data(), t.size() * 8);
      tablesS.emplace_back(ts.size() * 8);
      tablesS.back().upload(ts.data(), ts.size() * 8);
    }
    CUfunction fExp = c.kernels.get(expertSpec(lc)), fHad = c.kernels.get(had),
               fGemv = c.kernels.get(gemv), fRouter = c.kernels.get(router),
               fReduce = c.kernels.get(reduce);
    const CUdeviceptr null = 0;
    auto experts = [&](int l) {
      Params p;
      p << dXh.ptr() << dIds.ptr() << dW.ptr() << tables[l].ptr()
        << dWidths.ptr() << guSvh.ptr() << guSu.ptr() << dSuh.ptr()
        << dSvB.ptr() << null << dPartial.ptr() << 1 << topk << H << I << H
        << 0 << 0 << 8 << 64 << 8 << 64;
      p.launch(fExp, halves, E, 256, c.stream);
      Params q;
      q << dXh.ptr() << dIdsS.ptr() << dWS.ptr() << tablesS[l].ptr()
        << dWidthsS.ptr() << guSvhS.ptr() << guSuS.ptr() << dSuhS.ptr()
        << dSvBS.ptr() << null << dPartialS.ptr() << 1 << 1 << H << I << H
        << 0 << 0 << 8 << 64 << 8 << 64;
      q.launch(fExp, halves, 1, 256, c.stream);
    };
    auto step = [&](int l) {
      Params a; // xh = H(x * signs.in) / sqrt(128)
      a << dX.ptr() << dSigns.ptr() << null << dXh.ptr() << 1 << H << 0 << 0;
      a.launch(fHad, (H / 128 + 7) / 8, 1, 256, c.stream);
      Params g; // router logits (timed; the router reads fixed logits)
      g << dX.ptr() << (routerW.ptr() + size_t(l) * E * H * 2) << null
        << dLogitScratch.ptr() << 1 << H << E << E << 0;
      g.launch(fGemv, E / 8, 1, 256, c.stream);
      Params r;
      r << dLogits.ptr() << null << dIds.ptr() << dW.ptr() << 1 << E << 2.5f
        << 1;
      r.launch(fRouter, 1, 1, 256, c.stream);
      experts(l);
      Params m;
      m << dPartial.ptr() << dIds.ptr() << tables[l].ptr() << dOut.ptr() << 1
        << topk << H << 0;
      m.launch(fReduce, (H + 255) / 256, 1, 256, c.stream);
      Params ms;
      ms << dPartialS.ptr() << dIdsS.ptr() << tablesS[l].ptr() << dOut.ptr()
         << 1 << 1 << H << 1;
      ms.launch(fReduce, (H + 255) / 256, 1, 256, c.stream);
      Params o; // out = H(out) / sqrt(128) * signs.out
      o << dOut.ptr() << null << dSigns.ptr() << dOut.ptr() << 1 << H << 0 << 0;
      o.launch(fHad, (H / 128 + 7) / 8, 1, 256, c.stream);
    };
    // Routing must have run once before the experts-only graph.
    step(0);
    GLM_CU(cuStreamSynchronize(c.stream));
    const double bytes = 9.0 * 3 * double(I) * H * lc.K / 8 + double(E) * H * 2;
    const double expertBytes = 9.0 * 3 * double(I) * H * lc.K / 8;
    std::ostringstream base;
    base << "glm53 K" << lc.K << " " << cbName(lc.cb)
         << (lc.e4m3 ? " e4m3" : "") << " b1";
    Graph full, only;
    full.capture(c.stream, [&] {
      for (int l = 0; l < L; ++l)
        step(l);
    });
    only.capture(c.stream, [&] {
      for (int l = 0; l < L; ++l)
        experts(l);
    });
    double msGraph = timeMs(c.stream, c.opt.reps, [&] { full.launch(c.stream); });
    double msStream = timeMs(c.stream, c.opt.reps, [&] {
      for (int l = 0; l < L; ++l)
        step(l);
    });
    double msExperts =
        timeMs(c.stream, c.opt.reps, [&] { only.launch(c.stream); });
    addRow(c, "moe-layer", base.str() + " layer (graph)", msGraph / L, bytes);
    addRow(c, "moe-layer", base.str() + " layer (stream)", msStream / L, bytes);
    addRow(c, "moe-layer", base.str() + " experts only", msExperts / L,
           expertBytes);
  }
}

} // namespace

BenchResult runBench(const BenchOptions &opt, std::ostream &log) {
  const std::string &s = opt.suite;
  check(s == "all" || s == "copy" || s == "expert" || s == "moe-layer",
        "bench: unknown suite '", s, "' (use copy, expert, moe-layer or all)");
  CudaDevice dev(opt.device);
  Ctx c{opt, log, nullptr, KernelSet(dev.arch()), nullptr, {}, 1};
  c.res.device = dev.name() + " (" + dev.arch() + ", " +
                 std::to_string(dev.smCount()) + " SMs)";
  log << "bench on " << c.res.device << "\n" << std::flush;
  GLM_CU(cuStreamCreate(&c.stream, CU_STREAM_NON_BLOCKING));
  struct StreamGuard {
    CUstream s;
    ~StreamGuard() { cuStreamDestroy(s); }
  } guard{c.stream};
  c.kernels.addRaw("glm_bench_fill", kFillSource);
  c.kernels.build();
  c.fill = c.kernels.get("glm_bench_fill");
  benchCopy(c); // every ratio needs it
  if (s == "all" || s == "expert")
    benchExpert(c);
  if (s == "all" || s == "moe-layer")
    benchMoeLayer(c);
  return c.res;
}

std::string formatBenchTable(const BenchResult &r) {
  std::ostringstream os;
  char line[256];
  os << "device: " << r.device << "\n";
  std::snprintf(line, sizeof line, "copy bandwidth (read+write): %.1f GB/s\n",
                r.copyGBs);
  os << line;
  std::snprintf(line, sizeof line, "%-10s %-46s %10s %10s %8s %7s\n", "suite",
                "case", "time_us", "MB", "GB/s", "ratio");
  os << line;
  for (const BenchRow &b : r.rows) {
    std::snprintf(line, sizeof line, "%-10s %-46s %10.2f %10.2f %8.1f %7.3f\n",
                  b.suite.c_str(), b.name.c_str(), b.us, b.bytes / 1e6,
                  b.bytes / (b.us * 1e-6) / 1e9, b.ratio);
    os << line;
  }
  return os.str();
}

} // namespace glm::rt::cuda
