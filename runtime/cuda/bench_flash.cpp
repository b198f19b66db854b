//===- bench_flash.cpp - GLM-5.3-Flash decode kernels at full size --------===//
//
// `glm-engine bench --suite flash`: the Flash-only decode families at the
// model's shapes (spec §1b/§3: hidden 4096, 64 KDA heads of dk = dv = 128,
// conv kernel 4, hc_mult 4, 32 index heads of 128, k-pool 4, top-k 2048),
// launched with the grids their templates document:
//   kda_decode          B = 1, 2, 4, 8 rows (own slots), rows 64 / threads
//                       256 and rows 32 / threads 512, over 34 layers
//   mhc_mix, mhc_post   d 4096, S 4, B = 1 and 8, G = 8, 16, 32 blocks a
//                       row; the fn GEMV (24 x 16384 fp32) through gemv_any
//   kda_prep, kda_chunk prefill of one KDA layer over a prompt of T = 512
//                       and 4096 tokens (chunk 16 / 32, tf32 / 3xTF32,
//                       vsplit 1 / 2 with kda_gnorm),
//                       with kda_chunk's MMA TFLOP/s against the tf32 peak
//   kpool_store, indexer_scores_ctx<pool=4>, dsa_select<pool=4>
//                       B = 1 at context 8192 and 65536
// Each case is a CUDA graph of launches over distinct buffers (34 KDA
// layers, >= 90 mHC sites, >= 12 indexers: enough that >= 128 MiB rotate
// through the 50 MB L2 wherever a real step would read DRAM) replayed after
// a warm-up; times are medians per launch. Bytes are what a launch must
// move (state read + write, activations, weights once), the ratio is
// bytes / time / the copy bandwidth measured first in the same run.
// Rows print as: suite, case, µs per launch, MB per launch, GB/s, ratio;
// after them one "flash: KERNEL CASE x us, y GB/s = z of copy" line per
// kernel and case (the faster launch choice).
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "codegen/templates/flash_math.cuh"
#include "runtime/base/error.h"
#include "runtime/base/parallel.h"
#include "runtime/cuda/bench.h"
#include "runtime/cuda/bench_util.h"
#include "runtime/cuda/cuda_api.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>

namespace glm::rt::cuda {

namespace {

using codegen::KernelSpec;

// GLM-5.3-Flash (spec §1b, §3).
constexpr int kHidden = 4096;
constexpr int kKdaHeads = 64, kKdaDim = 128, kConvTaps = 4;
constexpr int kKdaLayers = 34;
constexpr int kStreams = 4;       // hc_mult
constexpr int kMhcSites = 2 * 45; // attn_hc and ffn_hc of every layer
constexpr int kIdxHeads = 32, kIdxDim = 128, kPool = 4, kTopk = 2048;
constexpr int kIndexers = 12; // 11 DSA layers + MTP
constexpr int kMaxRows = 8;   // largest decode batch measured

// fill_random masks for fp32 words: |x| < 2 and |x| < 0.25 (exponent field
// capped), always finite so no case runs on NaNs.
constexpr unsigned kF32Below2 = 0xBFFFFFFFu, kF32BelowQuarter = 0xBE7FFFFFu;

KernelSpec spec(const std::string &family,
                std::map<std::string, std::string> args) {
  KernelSpec s;
  s.family = family;
  s.args = std::move(args);
  return s;
}

/// The suite's kernels, compiled through the kernel cache in parallel (a
/// rerun skips NVRTC) and loaded on the calling thread.
class Kernels {
public:
  Kernels(const std::string &arch, const std::vector<KernelSpec> &specs) {
    std::vector<std::string> names, srcs;
    for (const KernelSpec &s : specs) {
      names.push_back(codegen::kernelName(s));
      srcs.push_back(codegen::generateSource(s));
    }
    std::vector<std::vector<uint8_t>> bins(specs.size());
    parallelFor(int64_t(specs.size()), 1,
                int(std::max(1u, std::thread::hardware_concurrency())),
                [&](int64_t b, int64_t e, int) {
                  for (int64_t i = b; i < e; ++i)
                    bins[i] =
                        codegen::compileCached(srcs[i], names[i], arch).cubin;
                });
    for (size_t i = 0; i < specs.size(); ++i)
      mods_[names[i]] = std::make_unique<Module>(
          std::vector<char>(bins[i].begin(), bins[i].end()));
  }
  CUfunction get(const KernelSpec &s) const {
    const std::string n = codegen::kernelName(s);
    return mods_.at(n)->function(n);
  }

private:
  std::map<std::string, std::unique_ptr<Module>> mods_;
};

/// What every case needs: the stream, random fills, rows and summaries.
struct Suite {
  BenchResult &res;
  std::ostream &log;
  int reps;
  CUstream st;
  CUfunction fill;
  uint64_t seed; // of the next fill
  std::vector<std::string> summary;

  void random(const DeviceBuffer &b, unsigned mask) {
    Params a;
    a << b.ptr() << (long long)(b.size() / 4) << (unsigned long long)seed++
      << mask;
    a.launch(fill, 1024, 1, 256, st);
  }
  /// Median ms of one launch: `g` holds `launches` of them.
  double perLaunchMs(Graph &g, int launches) {
    return timeMedianMs(st, reps, 200.0, [&] { g.launch(st); }) / launches;
  }
  /// Appends the row; returns its GB/s.
  double row(const std::string &name, double ms, double bytes) {
    BenchRow b;
    b.suite = "flash";
    b.name = name;
    b.us = ms * 1e3;
    b.bytes = bytes;
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    b.ratio = res.copyGBs > 0 ? gbs / res.copyGBs : 0;
    char line[256];
    std::snprintf(line, sizeof line,
                  "  %-6s %-50s %9.2f us %9.3f MB %8.1f GB/s  %.3f\n", "flash",
                  name.c_str(), b.us, bytes / 1e6, gbs, b.ratio);
    log << line << std::flush;
    res.rows.push_back(b);
    return gbs;
  }
  /// "flash: kda_decode B=1 x.xx us, y GB/s = z of copy" for the end.
  void summarize(const std::string &what, double ms, double bytes) {
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    char line[256];
    std::snprintf(line, sizeof line,
                  "flash: %s %.2f us, %.0f GB/s = %.3f of copy", what.c_str(),
                  ms * 1e3, gbs, res.copyGBs > 0 ? gbs / res.copyGBs : 0.0);
    summary.push_back(line);
  }
};

DeviceBuffer ints(const std::vector<int> &v) {
  DeviceBuffer b(v.size() * 4);
  b.upload(v.data(), v.size() * 4);
  return b;
}

struct KdaConfig {
  int rows, threads;
};
const KdaConfig kKdaConfigs[] = {{64, 256}, {32, 512}};

KernelSpec kdaSpec(const KdaConfig &c) {
  return spec("kda_decode", {{"rows", std::to_string(c.rows)},
                             {"threads", std::to_string(c.threads)}});
}

/// One KDA token per row: every layer of the graph has its own recurrent
/// state (4 MiB per sequence), conv state and weights, so 34 x B x 4 MiB
/// (>= 136 MiB) stream through an L2 of 50 MB as in the real step.
void benchKda(Suite &s, const Kernels &k) {
  const int n = kKdaHeads, dk = kKdaDim, dv = kKdaDim, K1 = kConvTaps - 1;
  const int L = kKdaLayers;
  // One fused projection row: q | k | v | f | gate (the header's layout).
  const int ins = 3 * n * dk + 2 * n * dv, bs = n;
  const size_t stateRow = size_t(n) * dk * dv * 4;
  const size_t convRow = size_t(n) * (2 * dk + dv) * K1 * 4;
  const size_t tapsQk = size_t(n) * dk * kConvTaps * 4;
  const size_t tapsV = size_t(n) * dv * kConvTaps * 4;
  const size_t dtBiasB = size_t(n) * dk * 4, aLogB = size_t(n) * 4,
               oNormB = size_t(dv) * 4;
  DeviceBuffer state(L * kMaxRows * stateRow), conv(L * kMaxRows * convRow),
      convQ(L * tapsQk), convK(L * tapsQk), convV(L * tapsV), aLog(L * aLogB),
      dtBias(L * dtBiasB), oNorm(L * oNormB);
  DeviceBuffer in(size_t(kMaxRows) * ins * 4), bRaw(size_t(kMaxRows) * bs * 4),
      out(size_t(kMaxRows) * n * dv * 4);
  for (const DeviceBuffer *b : {&state, &conv, &convQ, &convK, &convV, &aLog,
                                &dtBias, &oNorm, &in, &bRaw})
    s.random(*b, kF32Below2);
  std::vector<int> slots(kMaxRows);
  for (int b = 0; b < kMaxRows; ++b)
    slots[b] = b;
  // Mid-sequence (pos > 0): both states are read, not taken as zeros.
  const DeviceBuffer seq = ints(slots),
                     pos = ints(std::vector<int>(kMaxRows, 100));
  // fp32 weights (wdt 0): A_log and dt_bias are fp32 in the checkpoint.
  const double weightBytes =
      double(2 * tapsQk + tapsV + dtBiasB + aLogB + oNormB);

  for (int B : {1, 2, 4, 8}) {
    const double bytes = B * (2.0 * double(stateRow) + 2.0 * double(convRow) +
                              4.0 * (ins + bs + n * dv)) +
                         weightBytes;
    double bestMs = 0;
    std::string best;
    for (const KdaConfig &c : kKdaConfigs) {
      CUfunction f = k.get(kdaSpec(c));
      Graph g;
      g.capture(s.st, [&] {
        for (int l = 0; l < L; ++l) {
          const CUdeviceptr x = in.ptr();
          Params a;
          a << x << x + CUdeviceptr(4) * n * dk << x + CUdeviceptr(8) * n * dk
            << x + CUdeviceptr(4) * (2 * n * dk + n * dv)
            << x + CUdeviceptr(4) * (3 * n * dk + n * dv) << ins << bRaw.ptr()
            << bs << convQ.ptr() + l * tapsQk << convK.ptr() + l * tapsQk
            << convV.ptr() + l * tapsV << aLog.ptr() + l * aLogB
            << dtBias.ptr() + l * dtBiasB << oNorm.ptr() + l * oNormB << 0
            << conv.ptr() + l * kMaxRows * convRow
            << state.ptr() + l * kMaxRows * stateRow << seq.ptr() << pos.ptr()
            << out.ptr() << 0 << dk << dv << kConvTaps << -5.0f << 1e-5f;
          a.launch(f, n, B, c.threads, s.st);
        }
      });
      const double ms = s.perLaunchMs(g, L);
      const std::string name = "kda_decode r" + std::to_string(c.rows) + " t" +
                               std::to_string(c.threads) +
                               " B=" + std::to_string(B) + " (" +
                               std::to_string(L) + " layers)";
      s.row(name, ms, bytes);
      if (best.empty() || ms < bestMs)
        bestMs = ms,
        best = "r" + std::to_string(c.rows) + "/t" + std::to_string(c.threads);
    }
    s.summarize("kda_decode B=" + std::to_string(B) + " (" + best + ")", bestMs,
                bytes);
  }
}

struct KdaChunkConfig {
  int chunk;
  const char *mma;
  int vsplit, threads;
};
const KdaChunkConfig kKdaChunkConfigs[] = {{16, "tf32", 1, 256},
                                           {32, "tf32", 1, 256},
                                           {32, "tf32x3", 1, 256},
                                           {32, "tf32", 2, 128},
                                           {32, "tf32", 2, 256}};

KernelSpec kdaPrepSpec() { return spec("kda_prep", {{"threads", "256"}}); }
KernelSpec kdaGnormSpec() { return spec("kda_gnorm", {{"threads", "128"}}); }
KernelSpec kdaChunkSpec(const KdaChunkConfig &c) {
  return spec("kda_chunk", {{"chunk", std::to_string(c.chunk)},
                            {"mma", c.mma},
                            {"vsplit", std::to_string(c.vsplit)},
                            {"threads", std::to_string(c.threads)}});
}

/// Dense tf32 tensor-core peak of the device, TFLOP/s (0: not known). H200
/// SXM: 494.7 (NVIDIA's H200 datasheet: 989 with sparsity).
double tf32PeakTflops(const std::string &arch) {
  return arch == "sm_90" ? 494.7 : 0.0;
}

/// The prefill of one KDA layer over a prompt of T tokens of one sequence:
/// kda_prep (grid (64, T/8)) then kda_chunk (grid (64, vsplit): vsplit
/// blocks a head; past 1 kda_gnorm after it, timed with it).
/// Each is timed on its own as a graph of L launches over L layers' own
/// buffers where they fit (states, weights), the prompt's activations
/// shared. Rows: bytes a launch must move (ratio to the copy bandwidth,
/// as the other rows); the summary adds kda_chunk's MMA TFLOP/s, the
/// tensor-core work issued (3xTF32 counts its three products), and its
/// ratio to the dense tf32 peak.
void benchKdaChunk(Suite &s, const Kernels &k, const std::string &arch) {
  const int n = kKdaHeads, dk = kKdaDim, dv = kKdaDim, K1 = kConvTaps - 1;
  const int L = 8; // layers per graph: 8 x 4 MiB states and weights
  const int ins = 3 * n * dk + 2 * n * dv, bs = n;
  const size_t stateRow = size_t(n) * dk * dv * 4;
  const size_t convRow = size_t(n) * (2 * dk + dv) * K1 * 4;
  const size_t tapsQk = size_t(n) * dk * kConvTaps * 4;
  const size_t tapsV = size_t(n) * dv * kConvTaps * 4;
  const size_t dtBiasB = size_t(n) * dk * 4, aLogB = size_t(n) * 4,
               oNormB = size_t(dv) * 4;
  DeviceBuffer state(L * stateRow), conv(L * convRow), convQ(L * tapsQk),
      convK(L * tapsQk), convV(L * tapsV), aLog(L * aLogB), dtBias(L * dtBiasB),
      oNorm(L * oNormB);
  for (const DeviceBuffer *b :
       {&state, &conv, &convQ, &convK, &convV, &aLog, &dtBias, &oNorm})
    s.random(*b, kF32Below2);
  // Mid-sequence (pos > 0): the states are read, not taken as zeros.
  const DeviceBuffer seq = ints({0}), pos = ints({100});
  const double weightBytes =
      double(2 * tapsQk + tapsV + dtBiasB + aLogB + oNormB);
  CUfunction fPrep = k.get(kdaPrepSpec());
  for (int T : {512, 4096}) {
    const std::string at = " T=" + std::to_string(T);
    DeviceBuffer in(size_t(T) * ins * 4), bRaw(size_t(T) * bs * 4);
    DeviceBuffer qo(size_t(T) * n * dk * 4), ko(qo.size()), go(qo.size()),
        vo(size_t(T) * n * dv * 4), betaO(size_t(T) * n * 4),
        out(size_t(T) * n * dv * 4);
    s.random(in, kF32Below2);
    s.random(bRaw, kF32Below2);
    const CUdeviceptr x = in.ptr();
    const CUdeviceptr xk = x + CUdeviceptr(4) * n * dk,
                      xv = x + CUdeviceptr(8) * n * dk,
                      xf = x + CUdeviceptr(4) * (2 * n * dk + n * dv),
                      xg = x + CUdeviceptr(4) * (3 * n * dk + n * dv);
    Graph gp;
    gp.capture(s.st, [&] {
      for (int l = 0; l < L; ++l) {
        Params a;
        a << x << xk << xv << xf << ins << bRaw.ptr() << bs
          << convQ.ptr() + l * tapsQk << convK.ptr() + l * tapsQk
          << convV.ptr() + l * tapsV << aLog.ptr() + l * aLogB
          << dtBias.ptr() + l * dtBiasB << 0 << conv.ptr() + l * convRow
          << seq.ptr() << pos.ptr() << qo.ptr() << ko.ptr() << vo.ptr()
          << go.ptr() << betaO.ptr() << T << 0 << dk << dv << kConvTaps
          << -5.0f;
        a.launch(fPrep, n, (T + 7) / 8, 256, s.st);
      }
    });
    // q, k, v, f and b in; q̂, k̂, v, g, β out; conv state; weights.
    const double prepBytes = 4.0 * T * (double(3 * n * dk + n * dv + n) * 2) +
                             2.0 * convRow + weightBytes;
    const double msPrep = s.perLaunchMs(gp, L);
    s.row("kda_prep t256" + at, msPrep, prepBytes);
    s.summarize("kda_prep" + at, msPrep, prepBytes);
    // q̂, k̂, v, g, β, the output gate in; out; the state read and written.
    const double chunkBytes =
        4.0 * T * double(3 * n * dk + n * dv + n + n * dv + n * dv) +
        2.0 * stateRow + oNormB;
    CUfunction fNorm = k.get(kdaGnormSpec());
    for (const KdaChunkConfig &c : kKdaChunkConfigs) {
      CUfunction f = k.get(kdaChunkSpec(c));
      const unsigned smem =
          4u * (unsigned)fm::kdaChunkSmemFloats(c.chunk, dk, dv / c.vsplit);
      GLM_CU(cuFuncSetAttribute(
          f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(smem)));
      Graph g;
      g.capture(s.st, [&] {
        for (int l = 0; l < L; ++l) {
          Params a;
          a << qo.ptr() << ko.ptr() << vo.ptr() << go.ptr() << betaO.ptr() << xg
            << ins << oNorm.ptr() + l * oNormB << 0
            << state.ptr() + l * stateRow << seq.ptr() << pos.ptr() << out.ptr()
            << T << dk << dv << 1e-5f << n * dv;
          a.launch(f, n, c.vsplit, c.threads, s.st, smem);
          if (c.vsplit > 1) {
            Params b;
            b << out.ptr() << xg << ins << oNorm.ptr() + l * oNormB << 0
              << out.ptr() << n << dv << 1e-5f;
            b.launch(fNorm, (n + 3) / 4, T, 128, s.st);
          }
        }
      });
      const double ms = s.perLaunchMs(g, L);
      const std::string name =
          "kda_chunk c" + std::to_string(c.chunk) + " " + c.mma +
          (c.vsplit > 1 ? " v" + std::to_string(c.vsplit) + " +gnorm" : "") +
          " t" + std::to_string(c.threads) + at;
      s.row(name, ms, chunkBytes);
      // MMA work a chunk issues per head (kda_chunk.cuh steps 1, 2, 4):
      // Akk and Aqk over dk (every block of a head), W and O over dk,
      // O += δ·Aqkᵀ, the state.
      const double C = c.chunk, perChunk = 2.0 * (c.vsplit * 2 * C * C * dk +
                                                  2 * C * dk * dv + C * C * dv +
                                                  C * dk * dv);
      const double split = std::string(c.mma) == "tf32x3" ? 3.0 : 1.0;
      const double tflops =
          split * perChunk * std::ceil(T / C) * n / (ms * 1e-3) / 1e12;
      const double peak = tf32PeakTflops(arch);
      char line[256];
      std::snprintf(line, sizeof line,
                    "flash: %s %.2f us, %.1f MMA TFLOP/s = %.3f of the tf32 "
                    "peak (%s), %.0f GB/s",
                    name.c_str(), ms * 1e3, tflops,
                    peak > 0 ? tflops / peak : 0.0,
                    peak > 0 ? "494.7 dense" : "peak not known",
                    chunkBytes / (ms * 1e-3) / 1e9);
      s.summary.push_back(line);
    }
  }
}

struct MhcConfig {
  int G, threads; // threads = d / G: one column of u / X' per thread
};
const MhcConfig kMhcConfigs[] = {{8, 512}, {16, 256}, {32, 128}};

KernelSpec mhcSpec(const char *family, int threads) {
  return spec(family, {{"streams", std::to_string(kStreams)},
                       {"threads", std::to_string(threads)}});
}
KernelSpec fnGemvSpec(int threads) {
  return spec("gemv_any",
              {{"sum", "f32"}, {"threads", std::to_string(threads)}});
}

/// The pre and post sides of the mHC sites of a step, each site its own
/// streams, coefficients and partial sums: the step's 90 sites, more at
/// batch 1 so that at least 128 MiB of streams rotate through the 50 MB L2.
/// post runs in place (X' over X) and hands mix the partial sums of X'²
/// (nParts = G), as the step does.
void benchMhc(Suite &s, const Kernels &k) {
  const int d = kHidden, S = kStreams, M = (2 + S) * S;
  for (int B : {1, 8}) {
    const size_t xSite = size_t(B) * S * d * 4, ySite = size_t(B) * d * 4,
                 mSite = size_t(B) * M * 4, ssSite = size_t(B) * 32 * 8;
    const int sites = int(
        std::max<size_t>(kMhcSites, ((size_t(128) << 20) + xSite - 1) / xSite));
    DeviceBuffer X(sites * xSite), y(sites * ySite), mRaw(sites * mSite),
        coef(sites * mSite), ss(sites * ssSite), u(ySite), base(M * 4),
        scale(3 * 4);
    s.random(X, kF32Below2);
    s.random(y, kF32Below2);
    s.random(mRaw, kF32Below2);
    s.random(base, kF32BelowQuarter);
    s.random(scale, kF32BelowQuarter);
    auto mix = [&](CUfunction f, int site, int G, bool parts) {
      Params a;
      a << X.ptr() + site * xSite << mRaw.ptr() + site * mSite << base.ptr()
        << scale.ptr() << 0
        << (parts ? ss.ptr() + site * ssSite : CUdeviceptr(0)) << G << u.ptr()
        << coef.ptr() + site * mSite << d << 1e-5 << 1e-6 << 20;
      a.launch(f, G, B, unsigned(d / G), s.st);
    };
    auto post = [&](CUfunction f, int site, int G) {
      const CUdeviceptr xs = X.ptr() + site * xSite;
      Params a;
      a << y.ptr() + site * ySite << d << xs << coef.ptr() + site * mSite << xs
        << ss.ptr() + site * ssSite << d;
      a.launch(f, G, B, unsigned(d / G), s.st);
    };
    // Streams, mRaw, u, coef (row) / y, streams read and written, coef;
    // plus each block's partial sum.
    auto mixBytes = [&](int G) {
      return B * (4.0 * S * d + 4.0 * M + 4.0 * d + 4.0 * M + 8.0 * G) +
             4.0 * (M + 3);
    };
    auto postBytes = [&](int G) {
      return B * (4.0 * d + 8.0 * S * d + 4.0 * M + 8.0 * G);
    };
    const std::string at =
        " B=" + std::to_string(B) + " (" + std::to_string(sites) + " sites)";
    double bestMix = 0, bestPost = 0;
    const MhcConfig *mixCfg = nullptr, *postCfg = nullptr;
    for (const MhcConfig &c : kMhcConfigs) {
      CUfunction fm = k.get(mhcSpec("mhc_mix", c.threads));
      CUfunction fp = k.get(mhcSpec("mhc_post", c.threads));
      // Real coefficients (Sinkhorn-balanced, so in-place replays of post
      // keep X bounded), then the partial sums mix reads.
      for (int i = 0; i < sites; ++i) {
        mix(fm, i, c.G, false);
        post(fp, i, c.G);
      }
      Graph gm, gp;
      gm.capture(s.st, [&] {
        for (int i = 0; i < sites; ++i)
          mix(fm, i, c.G, true);
      });
      gp.capture(s.st, [&] {
        for (int i = 0; i < sites; ++i)
          post(fp, i, c.G);
      });
      const double msMix = s.perLaunchMs(gm, sites);
      const double msPost = s.perLaunchMs(gp, sites);
      const std::string cfg =
          " G" + std::to_string(c.G) + " t" + std::to_string(c.threads);
      s.row("mhc_mix s4" + cfg + at, msMix, mixBytes(c.G));
      s.row("mhc_post s4" + cfg + at, msPost, postBytes(c.G));
      if (!mixCfg || msMix < bestMix)
        bestMix = msMix, mixCfg = &c;
      if (!postCfg || msPost < bestPost)
        bestPost = msPost, postCfg = &c;
    }
    s.summarize("mhc_mix B=" + std::to_string(B) + " (G" +
                    std::to_string(mixCfg->G) + ")",
                bestMix, mixBytes(mixCfg->G));
    s.summarize("mhc_post B=" + std::to_string(B) + " (G" +
                    std::to_string(postCfg->G) + ")",
                bestPost, postBytes(postCfg->G));
  }

  // m = fn·X: one warp per output row of a site's [24, S·d] fp32 fn; the
  // step's 90 distinct matrices (1.5 MiB each) so the weights come from
  // DRAM.
  const int in = S * d, sites = kMhcSites;
  const size_t fnBytes = size_t(M) * in * 4;
  DeviceBuffer fn(sites * fnBytes), x(size_t(kMaxRows) * in * 4),
      m(size_t(kMaxRows) * M * 4);
  s.random(fn, kF32BelowQuarter);
  s.random(x, kF32Below2);
  for (int B : {1, 8}) {
    const double bytes = double(fnBytes) + B * 4.0 * (in + M);
    double best = 0;
    int bestT = 0;
    for (int threads : {128, 256}) {
      CUfunction f = k.get(fnGemvSpec(threads));
      const unsigned grid = unsigned((M + threads / 32 - 1) / (threads / 32));
      Graph g;
      g.capture(s.st, [&] {
        for (int i = 0; i < sites; ++i) {
          Params a;
          a << x.ptr() << in << fn.ptr() + i * fnBytes << 0 << CUdeviceptr(0)
            << 0 << m.ptr() << M << in << M;
          a.launch(f, grid, B, threads, s.st);
        }
      });
      const double ms = s.perLaunchMs(g, sites);
      s.row("fn gemv_any 24x16384 f32 t" + std::to_string(threads) + " B=" +
                std::to_string(B) + " (" + std::to_string(grid) + " blocks)",
            ms, bytes);
      if (!bestT || ms < best)
        best = ms, bestT = threads;
    }
    s.summarize("mhc fn gemv_any B=" + std::to_string(B) + " (t" +
                    std::to_string(bestT) + ")",
                best, bytes);
  }
}

KernelSpec kpoolSpec() { return spec("kpool_store", {{"threads", "128"}}); }
KernelSpec scoresSpec() {
  return spec("indexer_scores_ctx",
              {{"pool", std::to_string(kPool)}, {"threads", "256"}});
}
KernelSpec selectSpec() {
  return spec("dsa_select",
              {{"pool", std::to_string(kPool)}, {"threads", "1024"}});
}

/// The k-pool indexer of one DSA layer at batch 1, the token completing a
/// pool (pos = ctx - 1, so kpool_store pools and every pool is a
/// candidate): enough copies of the pooled keys to exceed the L2 (at
/// least the 12 indexers of a step); the scores dsa_select ranks are the
/// ones indexer_scores_ctx wrote.
void benchIndexer(Suite &s, const Kernels &k) {
  const int hd = kIdxDim, nh = kIdxHeads, P = kPool;
  CUfunction fStore = k.get(kpoolSpec()), fScores = k.get(scoresSpec()),
             fSelect = k.get(selectSpec());
  const DeviceBuffer seq = ints({0});
  for (int ctx : {8192, 65536}) {
    const int pc = ctx / P, pos0 = ctx - 1, topPools = kTopk / P;
    const size_t keyBytes = size_t(pc) * hd * 4;
    const int copies = int(std::clamp<size_t>(
        ((size_t(128) << 20) + keyBytes - 1) / keyBytes, kIndexers, 128));
    const size_t ringBytes = size_t(2) * P * hd * 4;
    DeviceBuffer keys(copies * keyBytes), score(size_t(copies) * pc * 8),
        ring(kIndexers * ringBytes), qi(size_t(nh) * hd * 4), wts(nh * 4),
        kIn(hd * 4), lnW(hd * 4), lnB(hd * 4), gate(hd * 4), ape(P * hd * 4),
        flags(size_t(pc) * 4), sel(size_t(ctx) * 4), nsel(4);
    for (const DeviceBuffer *b :
         {&keys, &ring, &qi, &wts, &kIn, &lnW, &lnB, &gate, &ape})
      s.random(*b, kF32Below2);
    const DeviceBuffer pos = ints({pos0});
    const std::string at = " ctx=" + std::to_string(ctx);

    Graph gs;
    gs.capture(s.st, [&] {
      for (int i = 0; i < kIndexers; ++i) {
        Params a;
        a << kIn.ptr() << lnW.ptr() << lnB.ptr() << gate.ptr() << hd
          << ape.ptr() << 0 << ring.ptr() + i * ringBytes
          << keys.ptr() + i * keyBytes << seq.ptr() << pos.ptr() << hd << P
          << ctx;
        a.launch(fStore, 1, 1, 128, s.st);
      }
    });
    // Key, LayerNorm, gate, ape in; the new ring row; the P members read
    // back and the pooled key out.
    const double storeBytes =
        4.0 * hd * (1 + 2 + 1 + P) + 4.0 * 2 * hd + 4.0 * 2 * P * hd + 4.0 * hd;
    const double msStore = s.perLaunchMs(gs, kIndexers);
    s.row("kpool_store t128 B=1" + at, msStore, storeBytes);
    s.summarize("kpool_store B=1" + at, msStore, storeBytes);

    Graph gc;
    gc.capture(s.st, [&] {
      for (int i = 0; i < copies; ++i) {
        Params a;
        a << qi.ptr() << keys.ptr() + i * keyBytes << wts.ptr()
          << score.ptr() + CUdeviceptr(i) * pc * 8 << seq.ptr() << pos.ptr()
          << nh << hd << ctx << 1.0 / std::sqrt(double(nh))
          << 1.0 / std::sqrt(double(hd));
        a.launch(fScores, 64, 1, 256, s.st); // the plan's grid (EmitPlan)
      }
    });
    const double scoreBytes = double(keyBytes) + 4.0 * nh * (hd + 1) + 8.0 * pc;
    const double msScores = s.perLaunchMs(gc, copies);
    s.row("indexer_scores_ctx p4 t256 B=1" + at, msScores, scoreBytes);
    s.summarize("indexer_scores_ctx<pool=4> B=1" + at, msScores, scoreBytes);

    Graph gl;
    gl.capture(s.st, [&] {
      for (int i = 0; i < copies; ++i) {
        Params a;
        a << score.ptr() + CUdeviceptr(i) * pc * 8 << pos.ptr() << topPools
          << flags.ptr() << sel.ptr() << nsel.ptr() << ctx;
        a.launch(fSelect, 1, 1, 1024, s.st);
      }
    });
    // Scores in, flags out, the chosen pools' tokens out (no tail: the
    // last pool is complete).
    const double selBytes = 8.0 * pc + 4.0 * pc + 4.0 * (kTopk + 1);
    const double msSelect = s.perLaunchMs(gl, copies);
    s.row("dsa_select p4 t1024 k512 B=1" + at, msSelect, selBytes);
    s.summarize("dsa_select<pool=4> B=1" + at, msSelect, selBytes);
  }
}

} // namespace

void runFlashBench(const BenchOptions &opt, BenchResult &r, std::ostream &log) {
  CudaDevice dev(opt.device);
  OwnedStream stream;
  std::vector<KernelSpec> specs = {spec("fill_random", {{"threads", "256"}}),
                                   kpoolSpec(), scoresSpec(), selectSpec()};
  for (const KdaConfig &c : kKdaConfigs)
    specs.push_back(kdaSpec(c));
  specs.push_back(kdaPrepSpec());
  for (const KdaChunkConfig &c : kKdaChunkConfigs)
    specs.push_back(kdaChunkSpec(c));
  specs.push_back(kdaGnormSpec());
  for (const MhcConfig &c : kMhcConfigs) {
    specs.push_back(mhcSpec("mhc_mix", c.threads));
    specs.push_back(mhcSpec("mhc_post", c.threads));
  }
  for (int t : {128, 256})
    specs.push_back(fnGemvSpec(t));
  log << "flash: compiling " << specs.size() << " kernels\n" << std::flush;
  const Kernels k(dev.arch(), specs);
  Suite s{r, log, opt.reps, stream.get(), k.get(specs[0]), 5301, {}};
  benchKda(s, k);
  benchKdaChunk(s, k, dev.arch());
  benchMhc(s, k);
  benchIndexer(s, k);
  GLM_CU(cuStreamSynchronize(s.st));
  for (const std::string &line : s.summary)
    log << line << "\n";
  log << std::flush;
}

} // namespace glm::rt::cuda
