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
#include "codegen/moe_trellis_abi.h"
#include "runtime/base/error.h"
#include "runtime/base/parallel.h"
#include "runtime/base/numeric.h"
#include "runtime/cuda/bench_util.h"
#include "runtime/cuda/cuda_api.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
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

/// The suites' random weight bytes: the fill_random family (splitmix64 words
/// of (seed, index), no mask), as the executor's synthetic weights.
KernelSpec fillSpec() { return mkSpec("fill_random", {{"threads", "256"}}); }

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
    // NVRTC is reentrant: one kernel per task, 16 threads at most.
    glm::rt::parallelFor(
        int64_t(todo.size()), 1,
        int(std::min(16u, std::max(1u, std::thread::hardware_concurrency()))),
        [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) {
            try {
              bins[i] = glm::codegen::compileWithNvrtc(todo[i].second,
                                                       todo[i].first, arch_)
                            .cubin;
            } catch (const std::exception &ex) {
              errs[i] = ex.what();
            }
          }
        });
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

void fillRandom(CUfunction fill, CUdeviceptr p, size_t bytes, uint64_t seed,
                CUstream s) {
  Params a;
  a << p << (long long)(bytes / 4) << (unsigned long long)seed << 0xFFFFFFFFu;
  a.launch(fill, 1024, 1, 256, s);
}

struct Ctx {
  const BenchOptions &opt;
  std::ostream &log;
  CUstream stream = nullptr;
  KernelSet kernels;
  CUfunction fill = nullptr;
  BenchResult res;
  uint64_t seed = 1;
  int sms = 0; // streaming multiprocessors (persistent moe_trellis grids)
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
  double ms = timeMedianMs(c.stream, c.opt.reps, 300.0, [&] {
    GLM_CU(cuMemcpyDtoDAsync(b.ptr(), a.ptr(), bytes, c.stream));
  });
  c.res.copyGBs = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
  std::ostringstream name;
  name << "cuMemcpyDtoD " << double(bytes) / double(1ull << 30)
       << " GiB (read+write)";
  addRow(c, "copy", name.str(), ms, 2.0 * double(bytes));
}

const char *cbName(int cb) { return cb == 1 ? "mcg" : "mul1"; }

std::string fmtRatio(double r) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", r);
  return b;
}

/// moe_trellis launch configuration (runtime split factors, block size;
/// blocksPerSm > 0: persistent grids of SMs x blocksPerSm blocks, capped
/// by the kernel's occupancy).
struct MoeConfig {
  int split, group, threads, pipe, minBlocks, blocksPerSm = 0;
  std::string str() const {
    return "s" + std::to_string(split) + "g" + std::to_string(group) + "t" +
           std::to_string(threads) + "p" + std::to_string(pipe) + "m" +
           std::to_string(minBlocks) +
           (blocksPerSm ? "P" + std::to_string(blocksPerSm) : "");
  }
};

/// --moe-configs "24:2:128:4:4,48:1:128:4:4:4"
/// (split:group:threads:pipe:minblocks[:blocksPerSm]; the first is the one
/// used for the full-layer and expert rows); default 24:2:128:4:4 (one
/// item per warp, the executor's default), then 24:1:128:4:4:4 (the
/// persistent path, 4 blocks per SM) and 24:2:256:4:2 (E4M3: the decode
/// table in shared memory) as comparison rows. --e4m3-only runs only the
/// E4M3 layer cases.
std::vector<MoeConfig> moeConfigs(const std::string &list) {
  std::vector<MoeConfig> v;
  if (!list.empty()) {
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ',')) {
      MoeConfig m{};
      const int n = std::sscanf(item.c_str(), "%d:%d:%d:%d:%d:%d", &m.split,
                                &m.group, &m.threads, &m.pipe, &m.minBlocks,
                                &m.blocksPerSm);
      check(n == 5 || n == 6, "bench: --moe-configs item '", item,
            "' is not split:group:threads:pipe:minblocks[:blocksPerSm]");
      v.push_back(m);
    }
  }
  if (v.empty()) { // one item per warp (the default), the persistent path,
    // 256-thread blocks (E4M3: the shared-memory decode table)
    v.push_back({24, 2, 128, 4, 4, 0});
    v.push_back({24, 1, 128, 4, 4, 4});
    v.push_back({24, 2, 256, 4, 2, 0});
  }
  return v;
}

/// Name of the bench-only no-decode diagnostic build of a moe_trellis spec.
std::string diagName(const KernelSpec &s) {
  return "diag_" + glm::codegen::kernelName(s);
}

KernelSpec moeSpec(int K, int cb, int e4m3, int batch, int stage,
                   const MoeConfig &m) {
  return mkSpec("moe_trellis", {{"widths", std::to_string(K)},
                                {"codebook", cbName(cb)},
                                {"e4m3", std::to_string(e4m3)},
                                {"batch", std::to_string(batch)},
                                {"sv", "f16"},
                                {"stage", std::string(stage == 0 ? "gu" : "down") +
                                              (m.blocksPerSm > 0 ? "_persist" : "")},
                                {"pipe", std::to_string(m.pipe)},
                                {"minblocks", std::to_string(m.minBlocks)},
                                {"threads", std::to_string(m.threads)}});
}

/// `layers` distinct copies of the expert weights a decode step reads
/// (topk routed experts, nShared shared ones; every half at width K) and
/// the moe_trellis tables over E routed + nShared experts, exlr8 layout.
struct MoeWorld {
  int H, E, topk, nShared, batch, K, L;
  std::vector<int> chosen; // the routed experts (distinct memory)
  DeviceBuffer pool, guSvh, guSu, dSuh, dSvB, widths, signs, xh, ids, rw,
      out, scratch, counters;
  std::vector<DeviceBuffer> tables;
  size_t halfBytes = 0;

  int sms = 0;

  MoeWorld(Ctx &c, int H_, int E_, int topk_, int nShared_, int batch_,
           int K_, int L_, int maxSplit)
      : H(H_), E(E_), topk(topk_), nShared(nShared_), batch(batch_), K(K_),
        L(L_), sms(c.sms) {
    const int I = 2048, halves = 16, nBlk = H / 128, eTot = E + nShared;
    const int slots = topk + nShared;
    halfBytes = size_t(128) * H * K / 8;
    for (int k = 0; k < topk; ++k)
      chosen.push_back((17 * k + 3) % E);
    pool = DeviceBuffer(size_t(L) * slots * 3 * halves * halfBytes);
    fillRandom(c.fill, pool.ptr(), pool.size(), c.seed++, c.stream);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uni(0.5f, 1.5f);
    auto halfVec = [&](size_t n) {
      std::vector<uint16_t> v(n);
      for (auto &h : v)
        h = floatToHalf(uni(rng) * ((rng() & 1) ? -1.0f : 1.0f));
      DeviceBuffer b(n * 2);
      b.upload(v.data(), n * 2);
      return b;
    };
    guSvh = halfVec(size_t(2) * eTot * I);
    guSu = halfVec(size_t(2) * eTot * nBlk);
    dSuh = halfVec(size_t(eTot) * I);
    dSvB = halfVec(size_t(eTot) * nBlk);
    std::vector<uint8_t> w(size_t(eTot) * 3 * halves, uint8_t(K));
    widths = DeviceBuffer(w.size());
    widths.upload(w.data(), w.size());
    std::vector<float> sg(H), x(size_t(batch) * H);
    for (auto &v : sg)
      v = (rng() & 1) ? -1.0f : 1.0f;
    std::normal_distribution<float> nd;
    for (auto &v : x)
      v = nd(rng);
    signs = DeviceBuffer(H * 4);
    signs.upload(sg.data(), H * 4);
    xh = DeviceBuffer(x.size() * 4);
    xh.upload(x.data(), x.size() * 4);
    // Every row routes to the same experts (batch rows share weights).
    std::vector<int> id(size_t(batch) * topk);
    std::vector<float> wt(id.size(), 1.0f / float(topk));
    for (int b = 0; b < batch; ++b)
      for (int k = 0; k < topk; ++k)
        id[b * topk + k] = chosen[k];
    ids = DeviceBuffer(id.size() * 4);
    ids.upload(id.data(), id.size() * 4);
    rw = DeviceBuffer(wt.size() * 4);
    rw.upload(wt.data(), wt.size() * 4);
    out = DeviceBuffer(size_t(batch) * H * 4);
    glm::codegen::MoeTrellisDims d = dims({maxSplit, 1, 128, 0, 0, 0});
    scratch = DeviceBuffer(d.scratchFloats() * 4);
    counters = DeviceBuffer(d.counterInts() * 4);
    counters.zero();
    for (int l = 0; l < L; ++l) {
      std::vector<uint64_t> t(size_t(eTot) * 3 * halves);
      for (int e = 0; e < eTot; ++e) {
        int slot = 0;
        if (e >= E)
          slot = topk + (e - E);
        for (int k = 0; k < topk; ++k)
          if (chosen[k] == e)
            slot = k;
        for (int p = 0; p < 3; ++p)
          for (int h = 0; h < halves; ++h)
            t[(size_t(e) * 3 + p) * halves + h] = halfPtr(l, slot, p, h);
      }
      tables.emplace_back(t.size() * 8);
      tables.back().upload(t.data(), t.size() * 8);
    }
  }
  CUdeviceptr halfPtr(int l, int slot, int p, int h) const {
    const int slots = topk + nShared;
    return pool.ptr() +
           ((size_t(l) * slots + slot) * 3 * 16 + size_t(p) * 16 + h) *
               halfBytes;
  }
  glm::codegen::MoeTrellisDims dims(const MoeConfig &m) const {
    glm::codegen::MoeTrellisDims d;
    d.batch = batch, d.topk = topk, d.nRouted = E, d.nShared = nShared;
    d.hidden = H, d.guSplit = m.split, d.downGroup = m.group;
    d.threads = m.threads;
    d.persistBlocks = m.blocksPerSm * sms;
    return d;
  }
  /// m with blocksPerSm capped by what both kernels keep resident.
  static MoeConfig resident(MoeConfig m, CUfunction gu, CUfunction down) {
    if (m.blocksPerSm <= 0)
      return m;
    for (CUfunction f : {gu, down}) {
      int n = 0;
      GLM_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, m.threads, 0));
      m.blocksPerSm = std::max(1, std::min(m.blocksPerSm, n));
    }
    return m;
  }
  /// Both launches of layer l (ids/rw: the router's output buffers).
  void launch(Ctx &c, int l, const MoeConfig &m0, CUfunction gu,
              CUfunction down, CUdeviceptr x, CUdeviceptr idsP,
              CUdeviceptr rwP) const {
    const MoeConfig m = resident(m0, gu, down);
    const glm::codegen::MoeTrellisDims d = dims(m);
    check(d.valid(), "bench: invalid moe_trellis config ", m.str());
    for (int st = 0; st < 2; ++st)
      launchStage(c, l, m, st == 0 ? gu : down, st, x, idsP, rwP);
  }
  /// One launch (stage st) of layer l. Passes the E4M3 table's shared
  /// memory (moeTrellisDynSmem) to the non-E4M3 kernels of such a config
  /// too (unused there).
  void launchStage(Ctx &c, int l, const MoeConfig &m, CUfunction f, int st,
                   CUdeviceptr x, CUdeviceptr idsP, CUdeviceptr rwP) const {
    const glm::codegen::MoeTrellisDims d = dims(m);
    const unsigned smem = glm::codegen::moeTrellisDynSmem(
        true, m.threads, m.blocksPerSm > 0);
    static std::set<CUfunction> raised;
    if (smem && raised.insert(f).second)
      GLM_CU(cuFuncSetAttribute(
          f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(smem)));
    const CUdeviceptr null = 0;
    Params p;
    p << x << idsP << rwP << tables[l].ptr() << widths.ptr() << guSvh.ptr()
      << guSu.ptr() << dSuh.ptr() << dSvB.ptr() << null << signs.ptr()
      << scratch.ptr() << counters.ptr() << out.ptr() << batch << topk << E
      << nShared << H << 2048 << H << 0 << 0 << 8 << 64 << 8 << 64 << m.split
      << m.group << 0 << 0.0f;
    p.launch(f, st == 0 ? d.gridGateUp() : d.gridDown(), 1,
             unsigned(m.threads), c.stream, smem);
  }
  double weightBytes() const {
    return double(topk + nShared) * 3 * 2048.0 * H * K / 8;
  }
};

/// The routed experts of a decode step through moe_trellis at expert shapes
/// (GLM-5.3 6144<->2048, Flash 4096<->2048): 8 experts x (gate, up, down),
/// batch 1 and 8 (rows share the experts), K2/K3/K4 x MCG/MUL1 x E4M3.
void benchExpert(Ctx &c) {
  struct Shape {
    const char *name;
    int H;
  };
  const Shape shapes[] = {{"glm53", 6144}, {"flash", 4096}};
  const MoeConfig m0 = moeConfigs(c.opt.moeConfigs).front();
  // The split must divide hidden/16 at every shape (256 for Flash).
  auto fit = [](MoeConfig m, int H) {
    while ((H / 16) % m.split)
      --m.split;
    return m;
  };
  const MoeConfig m = m0;
  for (int batch : {1, 8})
    for (int K = 2; K <= 4; ++K)
      for (int cb : {1, 2})
        for (int e4m3 : {0, 1})
          for (int st = 0; st < 2; ++st)
            c.kernels.add(moeSpec(K, cb, e4m3, batch, st, m));
  // Rows 2 and 4 on the 4-row instance plans no longer carry (the
  // comparison rows below; codegen/kernel_batch.h).
  for (int K = 2; K <= 4; ++K)
    for (int st = 0; st < 2; ++st)
      c.kernels.add(moeSpec(K, 1, 1, 4, st, m));
  c.log << "expert: compiling kernels...\n" << std::flush;
  c.kernels.build();
  const int L = std::max(1, c.opt.layers);
  for (const Shape &s : shapes)
    for (int K = 2; K <= 4; ++K)
      for (int batch : {1, 8}) {
        MoeWorld w(c, s.H, 256, 8, 0, batch, K, L, 48);
        for (int cb : {1, 2})
          for (int e4m3 : {0, 1}) {
            CUfunction gu = c.kernels.get(moeSpec(K, cb, e4m3, batch, 0, m));
            CUfunction dn = c.kernels.get(moeSpec(K, cb, e4m3, batch, 1, m));
            Graph g;
            g.capture(c.stream, [&] {
              for (int l = 0; l < L; ++l)
                w.launch(c, l, fit(m, s.H), gu, dn, w.xh.ptr(), w.ids.ptr(),
                         w.rw.ptr());
            });
            double ms = timeMedianMs(c.stream, c.opt.reps, 300.0,
                                     [&] { g.launch(c.stream); });
            std::ostringstream name;
            name << s.name << " 8x(g+u+d) " << s.H << "<->2048 K" << K << " "
                 << cbName(cb) << (e4m3 ? " e4m3" : "") << " b" << batch;
            addRow(c, "expert", name.str(), ms / L, w.weightBytes());
          }
      }
  // A step of 2 or 4 rows runs the 8-row kernel (decodeKernelBatch): what
  // that costs against a 4-row instance, GLM-5.3 shapes, MCG E4M3.
  for (int K = 2; K <= 4; ++K)
    for (int rows : {2, 4}) {
      MoeWorld w(c, 6144, 256, 8, 0, rows, K, L, 48);
      for (int kb : {4, glm::codegen::decodeKernelBatch(rows)}) {
        CUfunction gu = c.kernels.get(moeSpec(K, 1, 1, kb, 0, m));
        CUfunction dn = c.kernels.get(moeSpec(K, 1, 1, kb, 1, m));
        Graph g;
        g.capture(c.stream, [&] {
          for (int l = 0; l < L; ++l)
            w.launch(c, l, m, gu, dn, w.xh.ptr(), w.ids.ptr(), w.rw.ptr());
        });
        double ms = timeMedianMs(c.stream, c.opt.reps, 300.0,
                                 [&] { g.launch(c.stream); });
        std::ostringstream name;
        name << "glm53 8x(g+u+d) K" << K << " mcg e4m3 rows" << rows
             << " on b" << kb << " kernel";
        addRow(c, "expert", name.str(), ms / L, w.weightBytes());
      }
    }
}

/// One MoE layer decode step at batch 1, GLM-5.3 shapes.
void benchMoeLayer(Ctx &c) {
  const int H = 6144, I = 2048, E = 256, topk = 8, halves = 16, nBlk = H / 128;
  const int L = std::max(1, c.opt.layers);
  struct LayerCase {
    int K, cb, e4m3;
  };
  const LayerCase cases[] = {{2, 1, 1}, {3, 1, 1}, {4, 1, 1},
                             {4, 1, 0}, {2, 2, 0}, {3, 2, 0}, {4, 2, 0}};
  const std::vector<MoeConfig> configs = moeConfigs(c.opt.moeConfigs);
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
  int maxSplit = 1;
  for (const MoeConfig &m : configs)
    maxSplit = std::max(maxSplit, m.split);
  for (const LayerCase &lc : cases) {
    c.kernels.add(expertSpec(lc));
    for (size_t ci = 0; ci < configs.size(); ++ci)
      for (int st = 0; st < 2; ++st)
        if (lc.e4m3 || ci == 0) // variants on the exlr8 (E4M3) cases only
          c.kernels.add(moeSpec(lc.K, lc.cb, lc.e4m3, 1, st, configs[ci]));
    if (lc.cb == 1 && lc.e4m3 && lc.K != 3)
      for (int st = 0; st < 2; ++st) {
        const KernelSpec sp = moeSpec(lc.K, lc.cb, 1, 1, st, configs[0]);
        std::string src = glm::codegen::generateSource(sp);
        const std::string name = glm::codegen::kernelName(sp);
        src.replace(src.find("\n" + name + "("), name.size() + 2,
                    "\n" + diagName(sp) + "(");
        c.kernels.addRaw(diagName(sp),
                         "#define GLM_MOE_TRELLIS_DIAG_NODECODE 1\n" + src);
      }
  }
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

  // --e4m3-only: only the exlr8 (E4M3) cases (quick runs).
  const bool e4m3Only = c.opt.e4m3Only;
  for (const LayerCase &lc : cases) {
    if (e4m3Only && !lc.e4m3)
      continue;
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
        << 0 << 0 << 8 << 64 << 8 << 64 << 0.0f;
      p.launch(fExp, halves, E, 256, c.stream);
      Params q;
      q << dXh.ptr() << dIdsS.ptr() << dWS.ptr() << tablesS[l].ptr()
        << dWidthsS.ptr() << guSvhS.ptr() << guSuS.ptr() << dSuhS.ptr()
        << dSvBS.ptr() << null << dPartialS.ptr() << 1 << 1 << H << I << H
        << 0 << 0 << 8 << 64 << 8 << 64 << 0.0f;
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
    // The old kernel (one block per (half, expert)), experts only.
    Graph only;
    only.capture(c.stream, [&] {
      for (int l = 0; l < L; ++l)
        experts(l);
    });
    double msOld = timeMedianMs(c.stream, c.opt.reps, 300.0,
                                [&] { only.launch(c.stream); });
    addRow(c, "moe-layer", base.str() + " old kernel experts", msOld / L,
           expertBytes);

    // moe_trellis: the same step in two launches (gate/up, down + reduce +
    // H * signs.out), every config of --moe-configs.
    MoeWorld w(c, H, E, topk, 1, 1, lc.K, L, maxSplit);
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      const MoeConfig &m = configs[ci];
      if (!lc.e4m3 && ci > 0)
        continue;
      CUfunction gu = c.kernels.get(moeSpec(lc.K, lc.cb, lc.e4m3, 1, 0, m));
      CUfunction dn = c.kernels.get(moeSpec(lc.K, lc.cb, lc.e4m3, 1, 1, m));
      if (m.blocksPerSm > 0) {
        const glm::codegen::MoeTrellisDims d =
            w.dims(MoeWorld::resident(m, gu, dn));
        c.log << "moe-layer " << m.str() << ": grids " << d.gridGateUp()
              << " / " << d.gridDown() << " blocks (resident on "
              << c.sms << " SMs)\n";
      }
      auto newStep = [&](int l) {
        Params a; // xh = H(x * signs.in) / sqrt(128)
        a << dX.ptr() << dSigns.ptr() << null << dXh.ptr() << 1 << H << 0
          << 0;
        a.launch(fHad, (H / 128 + 7) / 8, 1, 256, c.stream);
        Params g;
        g << dX.ptr() << (routerW.ptr() + size_t(l) * E * H * 2) << null
          << dLogitScratch.ptr() << 1 << H << E << E << 0;
        g.launch(fGemv, E / 8, 1, 256, c.stream);
        Params r;
        r << dLogits.ptr() << null << dIds.ptr() << dW.ptr() << 1 << E
          << 2.5f << 1;
        r.launch(fRouter, 1, 1, 256, c.stream);
        w.launch(c, l, m, gu, dn, dXh.ptr(), dIds.ptr(), dW.ptr());
      };
      Graph expertsG;
      expertsG.capture(c.stream, [&] {
        for (int l = 0; l < L; ++l)
          w.launch(c, l, m, gu, dn, dXh.ptr(), dIds.ptr(), dW.ptr());
      });
      double msExp = timeMedianMs(c.stream, c.opt.reps, 300.0,
                                  [&] { expertsG.launch(c.stream); });
      addRow(c, "moe-layer",
             base.str() + " experts " + m.str() + " x" +
                 fmtRatio(msOld / msExp),
             msExp / L, expertBytes);
      if (ci != 0)
        continue;
      // Each launch alone (down re-reads the act the last gate/up left).
      for (int st = 0; st < 2; ++st) {
        Graph one;
        one.capture(c.stream, [&] {
          for (int l = 0; l < L; ++l)
            w.launchStage(c, l, MoeWorld::resident(m, gu, dn),
                          st == 0 ? gu : dn, st, dXh.ptr(), dIds.ptr(),
                          dW.ptr());
        });
        double ms = timeMedianMs(c.stream, c.opt.reps, 300.0,
                                 [&] { one.launch(c.stream); });
        addRow(c, "moe-layer",
               base.str() + (st == 0 ? " gate/up launch " : " down launch ") +
                   m.str(),
               ms / L, expertBytes * (st == 0 ? 2.0 / 3 : 1.0 / 3));
      }
      if (lc.cb == 1 && lc.e4m3 && lc.K != 3) {
        // Diagnostic: the same launches with the trellis decode removed
        // (loaded words fed to the tensor cores as they are; wrong numbers)
        // = the memory + mma + reduction skeleton of the kernel.
        CUfunction dgu = c.kernels.get(diagName(moeSpec(lc.K, lc.cb, 1, 1, 0, m)));
        CUfunction ddn = c.kernels.get(diagName(moeSpec(lc.K, lc.cb, 1, 1, 1, m)));
        Graph dg;
        dg.capture(c.stream, [&] {
          for (int l = 0; l < L; ++l)
            w.launch(c, l, m, dgu, ddn, dXh.ptr(), dIds.ptr(), dW.ptr());
        });
        double ms = timeMedianMs(c.stream, c.opt.reps, 300.0,
                                 [&] { dg.launch(c.stream); });
        addRow(c, "moe-layer", base.str() + " diag: no decode " + m.str(),
               ms / L, expertBytes);
      }
      Graph full;
      full.capture(c.stream, [&] {
        for (int l = 0; l < L; ++l)
          newStep(l);
      });
      double msGraph = timeMedianMs(c.stream, c.opt.reps, 300.0,
                                    [&] { full.launch(c.stream); });
      double msStream = timeMedianMs(c.stream, c.opt.reps, 300.0, [&] {
        for (int l = 0; l < L; ++l)
          newStep(l);
      });
      addRow(c, "moe-layer", base.str() + " layer (graph)", msGraph / L,
             bytes);
      addRow(c, "moe-layer", base.str() + " layer (stream)", msStream / L,
             bytes);
    }
  }
}

} // namespace

BenchResult runBench(const BenchOptions &opt, std::ostream &log) {
  const std::string &s = opt.suite;
  check(s == "all" || s == "copy" || s == "expert" || s == "moe-layer" ||
            s == "dense" || s == "gemv" || s == "flash",
        "bench: unknown suite '", s,
        "' (use copy, expert, moe-layer, dense, gemv, flash or all)");
  CudaDevice dev(opt.device);
  Ctx c{opt, log, nullptr, KernelSet(dev.arch()), nullptr, {}, 1,
        dev.smCount()};
  c.res.device = dev.name() + " (" + dev.arch() + ", " +
                 std::to_string(dev.smCount()) + " SMs)";
  log << "bench on " << c.res.device << "\n" << std::flush;
  GLM_CU(cuStreamCreate(&c.stream, CU_STREAM_NON_BLOCKING));
  struct StreamGuard {
    CUstream s;
    ~StreamGuard() { cuStreamDestroy(s); }
  } guard{c.stream};
  c.kernels.add(fillSpec());
  c.kernels.build();
  c.fill = c.kernels.get(fillSpec());
  benchCopy(c); // every ratio needs it
  if (s == "all" || s == "expert")
    benchExpert(c);
  if (s == "all" || s == "moe-layer")
    benchMoeLayer(c);
  if (s == "dense")
    runDenseBench(opt, c.res, log); // bench_dense.cpp
  if (s == "gemv")
    runGemvBench(opt, c.res, log); // bench_gemv.cpp
  if (s == "flash")
    runFlashBench(opt, c.res, log); // bench_flash.cpp
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
