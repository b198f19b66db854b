//===- bench_dense.cpp - dense trellis decode GEMVs, old kernel vs new ----===//
//
// `glm-engine bench --suite dense`: the trellis dense projections of a
// GLM-5.3 decode step (q_a, q_b, kv_a, o_proj, dense MLP gate/up and down,
// indexer wq_b, LM head) at K2/K3/K4 MCG E4M3, batch 1 and 8, each timed as
// the executor runs it after the input Hadamard:
//   legacy  dense_gemv_trellis, at batch 1 one launch per input slice
//           (executor.cpp splitK) + the ordered slice sum, then hadamard128
//           with svh;
//   new     one dense_trellis launch (split-k partials, fixed-order sum,
//           output Hadamard * svh), at the default tuning
//           (codegen/dense_trellis_abi.h) and the best of a small sweep of
//           split targets and pipelines (printed per configuration).
// A CUDA graph replays the launches over enough distinct copies of the
// matrix (random trellis bytes, generated on the device) to defeat the L2;
// times are per matrix, ratios are weight bytes / time / copy bandwidth.
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "codegen/dense_trellis_abi.h"
#include "runtime/base/error.h"
#include "runtime/base/parallel.h"
#include "runtime/cuda/bench.h"
#include "runtime/cuda/bench_util.h"
#include "runtime/cuda/cuda_api.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

namespace glm::rt::cuda {

namespace {

using glm::codegen::KernelSpec;

KernelSpec mk(const std::string &family,
              std::map<std::string, std::string> args) {
  KernelSpec s;
  s.family = family;
  for (auto &[k, v] : args)
    s.args[k] = v;
  return s;
}

KernelSpec legacySpec(int K, int b) {
  return mk("dense_gemv_trellis", {{"K", std::to_string(K)},
                                   {"codebook", "mcg"},
                                   {"e4m3", "1"},
                                   {"batch", std::to_string(b)},
                                   {"threads", "256"}});
}
KernelSpec newSpec(int K, int b, const codegen::DenseTrellisTuning &t) {
  return mk("dense_trellis",
            {{"K", std::to_string(K)},
             {"codebook", "mcg"},
             {"e4m3", "1"},
             {"batch", std::to_string(codegen::decodeKernelBatch(b))},
             {"pipe", std::to_string(codegen::denseTrellisPipe(t, K, b))},
             {"minblocks", std::to_string(t.minBlocks)},
             {"threads", std::to_string(t.threads)}});
}
KernelSpec hadSpec() {
  return mk("hadamard128", {{"vt", "f32"}, {"threads", "256"}});
}

struct Shape {
  const char *name;
  int in, out;
};

/// The old executor's batch-1 slice count (executor.cpp splitK).
int legacySplit(int in, int out, int sms) {
  const int64_t blocks = (out / 16 + 7) / 8, slices = in / 128;
  int n = 1;
  while (blocks * n < 2LL * sms && slices % (2 * n) == 0 && n < 16)
    n *= 2;
  return n;
}

} // namespace

void runDenseBench(const BenchOptions &opt, BenchResult &r,
                   std::ostream &log) {
  CudaDevice dev(opt.device);
  const std::string arch = dev.arch();
  const int sms = dev.smCount();
  OwnedStream stream;
  const CUstream st = stream.get();

  // GLM-5.3 trellis dense projections (in -> out; kv_a's 576 padded to 640).
  const std::vector<Shape> shapes = {
      {"q_a 6144->2048", 6144, 2048},     {"q_b 2048->16384", 2048, 16384},
      {"kv_a 6144->576", 6144, 640},      {"o_proj 16384->6144", 16384, 6144},
      {"mlp_gate 6144->12288", 6144, 12288},
      {"mlp_down 12288->6144", 12288, 6144},
      {"idx_wq_b 2048->4096", 2048, 4096},
      {"lm_head 6144->154880", 6144, 154880}};
  const int widths[] = {2, 3, 4}, batches[] = {1, 8};
  const codegen::DenseTrellisTuning def = codegen::defaultDenseTrellisTuning();
  // Sweep: split target (warps per SM, min rows per warp) x pipeline, and
  // 8-warp blocks.
  std::vector<codegen::DenseTrellisTuning> sweep;
  for (int wps : {8, 16, 32})
    for (int minRows : {2, 8})
      for (int pipe : {0, 2, 4}) {
        codegen::DenseTrellisTuning t = def;
        t.warpsPerSm = wps, t.minRows = minRows;
        t.pipe = t.pipeBatched = pipe;
        sweep.push_back(t);
      }
  for (int pipe : {0, 2}) {
    codegen::DenseTrellisTuning t = def;
    t.threads = 256, t.minBlocks = 2;
    t.pipe = t.pipeBatched = pipe;
    sweep.push_back(t);
  }

  // Kernels: compiled in parallel by NVRTC, loaded here.
  std::map<std::string, std::string> src;
  auto want = [&](const KernelSpec &s) {
    src.emplace(codegen::kernelName(s), codegen::generateSource(s));
  };
  // The random fill and the executor's ordered slice sum (sum_parts).
  const KernelSpec fillSpec = mk("fill_random", {{"threads", "256"}});
  const KernelSpec sumSpec = mk("sum_parts", {{"threads", "256"}});
  want(fillSpec);
  want(sumSpec);
  want(hadSpec());
  for (int K : widths)
    for (int b : batches) {
      want(legacySpec(K, b));
      want(newSpec(K, b, def));
      for (const auto &t : sweep)
        want(newSpec(K, b, t));
    }
  std::vector<std::pair<std::string, std::string>> todo(src.begin(),
                                                        src.end());
  std::vector<std::vector<uint8_t>> bins(todo.size());
  std::vector<std::string> errs(todo.size());
  log << "dense: compiling " << todo.size() << " kernels\n" << std::flush;
  parallelFor(int64_t(todo.size()), 1,
              int(std::min(16u, std::max(1u, std::thread::hardware_concurrency()))),
              [&](int64_t b, int64_t e, int) {
                for (int64_t i = b; i < e; ++i) {
                  try {
                    bins[i] = codegen::compileWithNvrtc(todo[i].second,
                                                        todo[i].first, arch)
                                  .cubin;
                  } catch (const std::exception &ex) {
                    errs[i] = ex.what();
                  }
                }
              });
  std::map<std::string, std::unique_ptr<Module>> mods;
  for (size_t i = 0; i < todo.size(); ++i) {
    check(errs[i].empty(), "bench dense: ", todo[i].first,
          " did not compile: ", errs[i]);
    mods[todo[i].first] = std::make_unique<Module>(
        std::vector<char>(bins[i].begin(), bins[i].end()));
  }
  auto fn = [&](const KernelSpec &s) {
    return mods.at(codegen::kernelName(s))->function(codegen::kernelName(s));
  };
  CUfunction fill = fn(fillSpec), sum = fn(sumSpec);

  auto row = [&](const std::string &name, double ms, double bytes) {
    BenchRow b;
    b.suite = "dense";
    b.name = name;
    b.us = ms * 1e3;
    b.bytes = bytes;
    b.ratio = r.copyGBs > 0 ? bytes / (ms * 1e-3) / (r.copyGBs * 1e9) : 0;
    char line[256];
    std::snprintf(line, sizeof line, "  %-10s %-52s %10.2f us %9.1f GB/s  %.3f\n",
                  "dense", name.c_str(), b.us, bytes / (ms * 1e-3) / 1e9,
                  b.ratio);
    log << line << std::flush;
    return b;
  };

  uint64_t seed = 77;
  for (const Shape &sh : shapes)
    for (int K : widths) {
      const double bytes = double(sh.in) * sh.out * K / 8.0;
      // Distinct copies: >= ~1 GiB in all (the L2 is 50 MB), 2..256.
      const int copies = int(std::clamp(
          (double(1ull << 30) + bytes - 1) / bytes, 2.0, 256.0));
      const size_t matBytes = size_t(bytes);
      DeviceBuffer w(matBytes * copies);
      {
        Params a;
        a << w.ptr() << (long long)(w.size() / 4) << (unsigned long long)seed++
          << 0xFFFFFFFFu;
        a.launch(fill, 2048, 1, 256, st);
      }
      DeviceBuffer x(size_t(8) * sh.in * 4), y(size_t(8) * sh.out * 4),
          z(size_t(8) * sh.out * 4), svh(size_t(sh.out) * 4),
          zparts(size_t(16) * sh.out * 4);
      {
        std::vector<float> xv(size_t(8) * sh.in), sv(size_t(sh.out));
        for (size_t i = 0; i < xv.size(); ++i)
          xv[i] = float(int(i * 2654435761u % 2001) - 1000) / 1000.0f;
        for (size_t i = 0; i < sv.size(); ++i)
          sv[i] = (i & 1) ? 0.75f : -1.25f;
        x.upload(xv.data(), xv.size() * 4);
        svh.upload(sv.data(), sv.size() * 4);
      }
      int maxSplit = codegen::denseTrellisSplit(sh.in, sh.out, sms, def);
      for (const auto &t : sweep)
        maxSplit = std::max(maxSplit,
                            codegen::denseTrellisSplit(sh.in, sh.out, sms, t));
      DeviceBuffer scratch(size_t(sh.out) * maxSplit * 8 * 4 + 256);
      DeviceBuffer counters(size_t(sh.out / 128) * 4 + 256);
      counters.zero();
      const int sI = sh.out / 16, sI8 = sh.out / 2, sJ8 = 8;
      const uint64_t tileBytes = 32ull * K;

      auto timeGraph = [&](auto body) {
        Graph ge;
        ge.capture(st, [&] {
          for (int c = 0; c < copies; ++c)
            body(w.ptr() + CUdeviceptr(c) * matBytes);
        });
        const double ms =
            timeMedianMs(st, opt.reps, 200.0, [&] { ge.launch(st); });
        return ms / copies;
      };
      for (int B : batches) {
        std::string base = std::string(sh.name) + " k" + std::to_string(K) +
                           " b" + std::to_string(B);
        // Legacy: as executor.cpp ran it (slices at batch 1).
        const int ns = B == 1 ? legacySplit(sh.in, sh.out, sms) : 1;
        CUfunction fl = fn(legacySpec(K, B)), fh = fn(hadSpec());
        const double msOld = timeGraph([&](CUdeviceptr tiles) {
          if (ns == 1) {
            Params a;
            a << x.ptr() << tiles << z.ptr() << B << sh.in << sh.out << sI
              << sI8 << sJ8;
            a.launch(fl, (sh.out / 16 + 7) / 8, 1, 256, st);
          } else {
            const int S = sh.in / ns;
            for (int sl = 0; sl < ns; ++sl) {
              const int64_t i0 = int64_t(sl) * S / 16;
              Params a;
              a << (x.ptr() + CUdeviceptr(sl) * S * 4)
                << (tiles + CUdeviceptr(uint64_t(i0 / 8) * sI8 * tileBytes))
                << (zparts.ptr() + CUdeviceptr(sl) * sh.out * 4) << 1 << S
                << sh.out << sI << sI8 << sJ8;
              a.launch(fl, (sh.out / 16 + 7) / 8, 1, 256, st);
            }
            Params s;
            s << zparts.ptr() << ns << sh.out << z.ptr();
            s.launch(sum, (sh.out + 255) / 256, 1, 256, st);
          }
          Params h;
          h << z.ptr() << CUdeviceptr(0) << svh.ptr() << y.ptr() << B
            << sh.out << 0 << 0;
          h.launch(fh, (B * sh.out / 128 + 7) / 8, 1, 256, st);
        });
        r.rows.push_back(row(base + " legacy (" + std::to_string(ns) +
                                 " slice" + (ns > 1 ? "s)" : ")"),
                             msOld, bytes));
        auto runNew = [&](const codegen::DenseTrellisTuning &t) {
          codegen::DenseTrellisDims d;
          d.batch = B, d.in = sh.in, d.out = sh.out, d.threads = t.threads;
          d.split = codegen::denseTrellisSplit(sh.in, sh.out, sms, t);
          check(d.valid(), "bench dense: invalid geometry");
          CUfunction f = fn(newSpec(K, B, t));
          return std::make_pair(
              timeGraph([&](CUdeviceptr tiles) {
                Params a;
                a << x.ptr() << tiles << svh.ptr() << scratch.ptr()
                  << counters.ptr() << y.ptr() << B << sh.in << sh.out
                  << sh.out << sh.out << sI << sI8 << sJ8 << d.split;
                a.launch(f, d.grid(), 1, unsigned(d.threads), st);
              }),
              d.split);
        };
        auto cfg = [&](const codegen::DenseTrellisTuning &t, int split) {
          return "s" + std::to_string(split) + " p" +
                 std::to_string(codegen::denseTrellisPipe(t, K, B)) + " t" +
                 std::to_string(t.threads) + " (" +
                 std::to_string(t.warpsPerSm) + ":" +
                 std::to_string(t.minRows) + ")";
        };
        const auto d0 = runNew(def);
        r.rows.push_back(row(base + " dense_trellis " + cfg(def, d0.second),
                             d0.first, bytes));
        double bestMs = d0.first;
        std::string bestName = cfg(def, d0.second);
        for (const auto &t : sweep) {
          const auto dm = runNew(t);
          char line[200];
          std::snprintf(line, sizeof line,
                        "    sweep %-40s %-22s %9.2f us  %.3f\n", base.c_str(),
                        cfg(t, dm.second).c_str(), dm.first * 1e3,
                        r.copyGBs > 0 ? bytes / (dm.first * 1e-3) /
                                            (r.copyGBs * 1e9)
                                      : 0.0);
          log << line;
          if (dm.first < bestMs)
            bestMs = dm.first, bestName = cfg(t, dm.second);
        }
        r.rows.push_back(
            row(base + " dense_trellis best " + bestName, bestMs, bytes));
        char sp[64];
        std::snprintf(sp, sizeof sp, " speedup x%.2f (best x%.2f)\n",
                      msOld / d0.first, msOld / bestMs);
        log << "    " << base << sp << std::flush;
      }
    }
  GLM_CU(cuStreamSynchronize(st));
}

} // namespace glm::rt::cuda
