//===- bench_prefill.cpp - prefill GEMM TFLOP/s against cuBLAS ------------===//
//
// `glm-engine bench --suite prefill`: the tensor-core trellis GEMM
// (gemm_trellis, weights decoded on the fly) at M = 512, 2048, 8192 tokens on
// GLM-5.3 shapes (expert gate/up 6144->2048, down 2048->6144, attention
// o_proj 16384->6144) for K2/K3/K4 (MCG, E4M3: the exlr8 default), fp16
// input, fp32 output; against cuBLAS (cublasGemmEx, fp16 A/B, fp32 C, fp32
// compute, TN: the layout cuBLAS is fastest in) on the same shapes with
// dense fp16 weights. Both block tiles (bm 64/128) are timed; the faster one
// counts. Printed as TFLOP/s and ours/cuBLAS. Without cuBLAS in the build
// the ratio column says n/a.
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "runtime/base/error.h"
#include "runtime/cuda/bench.h"
#include "runtime/cuda/cuda_api.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#ifdef GLM_HAVE_CUBLAS
#include <cublas_v2.h>
#endif

namespace glm::rt::cuda {

namespace {

glm::codegen::KernelSpec gemmSpec(int K, int bm, int threads) {
  glm::codegen::KernelSpec s;
  s.family = "gemm_trellis";
  s.args = {{"K", std::to_string(K)}, {"codebook", "mcg"}, {"e4m3", "1"},
            {"xt", "f16"},           {"bm", std::to_string(bm)},
            {"threads", std::to_string(threads)}};
  return s;
}
glm::codegen::KernelSpec groupedSpec(int bm, int threads) {
  glm::codegen::KernelSpec s;
  s.family = "gemm_trellis_grouped";
  s.args = {{"widths", "234"}, {"codebook", "mcg"}, {"e4m3", "1"},
            {"xt", "f16"},     {"bm", std::to_string(bm)},
            {"threads", std::to_string(threads)}};
  return s;
}

/// Mirrors glm::GemmItem (gemm_trellis_grouped.cuh).
struct GemmItemHost {
  uint64_t tiles;
  int64_t zOff;
  int32_t rowStart, rows, xCol, k;
};
static_assert(sizeof(GemmItemHost) == 32, "GemmItem ABI");

void launchArgs(CUfunction f, unsigned gx, unsigned gy, unsigned bx,
                CUstream s, std::vector<uint64_t> slots) {
  std::vector<void *> p;
  for (auto &v : slots)
    p.push_back(&v);
  launch(f, gx, gy, 1, bx, 0, s, p.data());
}
template <class T> uint64_t slot(T v) {
  uint64_t s = 0;
  std::memcpy(&s, &v, sizeof v);
  return s;
}

#ifdef GLM_HAVE_CUBLAS
void checkCublas(cublasStatus_t st, const char *what) {
  check(st == CUBLAS_STATUS_SUCCESS, "bench prefill: ", what, " failed (",
        int(st), ")");
}
#endif

} // namespace

std::string runPrefillBench(const BenchOptions &opt, std::ostream &log) {
  CudaDevice dev(opt.device);
  const std::string arch = dev.arch();
  log << "prefill: gemm_trellis vs cuBLAS on " << dev.name() << " (" << arch
      << ", " << dev.smCount() << " SMs)\n"
      << std::flush;
  CUstream stream = nullptr;
  GLM_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  struct StreamGuard {
    CUstream s;
    ~StreamGuard() { cuStreamDestroy(s); }
  } guard{stream};

  // Kernels: the fill helper, gemm_trellis K2/K3/K4 x bm 64/128 x
  // threads (= BN) 128/256 and the grouped form, compiled by NVRTC in
  // parallel exactly as a plan's are.
  const int widths[] = {2, 3, 4}, bms[] = {64, 128}, thr[] = {128, 256};
  std::vector<std::pair<std::string, std::string>> todo; // name, source
  auto addSpec = [&](const glm::codegen::KernelSpec &s) {
    todo.emplace_back(glm::codegen::kernelName(s),
                      glm::codegen::generateSource(s));
  };
  glm::codegen::KernelSpec fillSpec;
  fillSpec.family = "fill_random";
  fillSpec.args = {{"threads", "256"}};
  addSpec(fillSpec);
  for (int K : widths)
    for (int bm : bms)
      for (int t : thr)
        addSpec(gemmSpec(K, bm, t));
  for (int bm : bms)
    for (int t : thr)
      addSpec(groupedSpec(bm, t));
  std::vector<std::vector<uint8_t>> bins(todo.size());
  std::vector<std::string> errs(todo.size());
  {
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
                                                   todo[i].first, arch)
                        .cubin;
        } catch (const std::exception &e) {
          errs[i] = e.what();
        }
      }
    };
    std::vector<std::thread> pool;
    const unsigned n =
        std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
    for (unsigned t = 0; t < n; ++t)
      pool.emplace_back(work);
    for (auto &t : pool)
      t.join();
  }
  std::map<std::string, std::unique_ptr<Module>> mods;
  for (size_t i = 0; i < todo.size(); ++i) {
    check(errs[i].empty(), "bench prefill: kernel ", todo[i].first,
          " did not compile: ", errs[i]);
    std::vector<char> image(bins[i].begin(), bins[i].end());
    mods[todo[i].first] = std::make_unique<Module>(image);
  }
  auto fn = [&](const std::string &name) {
    return mods.at(name)->function(name);
  };
  CUfunction fill = fn(glm::codegen::kernelName(fillSpec));
  // halves: two fp16 in [-1, 1) a word (sign, exponent <= 14) instead of
  // any bits.
  auto fillBuf = [&](const DeviceBuffer &b, uint64_t seed, int halves) {
    launchArgs(fill, 1024, 1, 256, stream,
               {slot(b.ptr()), slot((long long)(b.size() / 4)),
                slot((unsigned long long)seed),
                slot(halves ? 0xBBFFBBFFu : 0xFFFFFFFFu)});
  };

  struct Shape {
    const char *name;
    int in, out;
  };
  const Shape shapes[] = {{"expert gate/up", 6144, 2048},
                          {"expert down", 2048, 6144},
                          {"attn o_proj", 16384, 6144}};
  const int ms[] = {512, 2048, 8192};
  size_t maxX = 0, maxZ = 0, maxW = 0;
  for (const Shape &s : shapes) {
    maxX = std::max(maxX, size_t(8192) * s.in * 2);
    maxZ = std::max(maxZ, size_t(8192) * s.out * 4);
    maxW = std::max(maxW, size_t(s.in) * s.out * 2);
  }
  DeviceBuffer dX(maxX), dZ(maxZ), dW(maxW), dT(maxW);
  fillBuf(dX, 11, 1);
  fillBuf(dW, 12, 1);
  fillBuf(dT, 13, 0);
  GLM_CU(cuStreamSynchronize(stream));

#ifdef GLM_HAVE_CUBLAS
  cublasHandle_t h = nullptr;
  checkCublas(cublasCreate(&h), "cublasCreate");
  struct CublasGuard {
    cublasHandle_t h;
    ~CublasGuard() { cublasDestroy(h); }
  } cguard{h};
  checkCublas(cublasSetStream(h, reinterpret_cast<cudaStream_t>(stream)),
              "cublasSetStream");
#endif

  std::ostringstream table;
  char line[256];
  std::snprintf(line, sizeof line, "%-15s %-12s %5s %3s %-12s %9s %9s %7s\n",
                "shape", "in->out", "M", "K", "best tile", "ours", "cuBLAS",
                "ratio");
  table << line;
  log << line << std::flush;
  for (const Shape &s : shapes)
    for (int M : ms) {
      const double flops = 2.0 * M * double(s.in) * s.out;
      double cublasTf = 0;
#ifdef GLM_HAVE_CUBLAS
      {
        const float alpha = 1.0f, beta = 0.0f;
        const double msC = timeMedianMs(stream, opt.reps, 200.0, [&] {
          checkCublas(
              cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.out, M, s.in, &alpha,
                           reinterpret_cast<const void *>(dW.ptr()),
                           CUDA_R_16F, s.in,
                           reinterpret_cast<const void *>(dX.ptr()),
                           CUDA_R_16F, s.in, &beta,
                           reinterpret_cast<void *>(dZ.ptr()), CUDA_R_32F,
                           s.out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
        });
        cublasTf = flops / (msC * 1e-3) / 1e12;
      }
#endif
      for (int K : widths) {
        double best = 0;
        std::string bestTile;
        for (int bm : bms)
          for (int t : thr) {
            CUfunction f = fn(glm::codegen::kernelName(gemmSpec(K, bm, t)));
            const int zero = 0;
            const double msT = timeMedianMs(stream, opt.reps, 200.0, [&] {
              // xh, tiles, z, m, in, out, x_stride, z_stride, accumulate,
              // sI, sI8, sJ8 (EXL3 row-major tiles).
              launchArgs(f, unsigned((s.out + t - 1) / t),
                         unsigned((M + bm - 1) / bm), unsigned(t), stream,
                         {slot(dX.ptr()), slot(dT.ptr()), slot(dZ.ptr()),
                          slot(M), slot(s.in), slot(s.out), slot(s.in),
                          slot(s.out), slot(zero), slot(s.out / 16),
                          slot(s.out / 2), slot(8)});
            });
            const double tf = flops / (msT * 1e-3) / 1e12;
            log << "    " << s.name << " M" << M << " K" << K << " bm" << bm
                << " t" << t << ": " << tf << " TFLOP/s\n";
            if (tf > best)
              best = tf, bestTile = "bm" + std::to_string(bm) + " t" +
                                    std::to_string(t);
          }
        char ratio[16];
        if (cublasTf > 0)
          std::snprintf(ratio, sizeof ratio, "%.3f", best / cublasTf);
        else
          std::snprintf(ratio, sizeof ratio, "n/a");
        char io[24];
        std::snprintf(io, sizeof io, "%d->%d", s.in, s.out);
        std::snprintf(line, sizeof line,
                      "%-15s %-12s %5d %3d %-12s %9.1f %9.1f %7s\n", s.name,
                      io, M, K, bestTile.c_str(), best, cublasTf, ratio);
        table << line;
        log << line << std::flush;
      }
    }
  GLM_CU(cuStreamSynchronize(stream));

  // MoE layer prefill (GLM-5.3: 256 experts, top-8, uniform routing = T/32
  // rows per expert) through gemm_trellis_grouped. gate+up: one item per
  // (expert, projection, half, bm rows), 6144 -> 128 per half, widths
  // cycling 2/3/4 (a mixed manifest), rows gathered through row_ids,
  // threads 128; down: one item per (expert, bm rows) over the expert's 16
  // contiguous K3 halves (sI8 = 3072 tiles per half), 2048 -> 6144, threads
  // 256. cuBLAS: strided-batched fp16 GEMMs over the 256 experts with dense
  // fp16 weights (inputs pre-gathered, which favours cuBLAS).
  const int E = 256, topk = 8, H = 6144, I = 2048, halves = 16;
  const size_t guHalfBytes = size_t(H) * 128 * 4 / 8; // K4 slot per half
  const size_t downBytes = size_t(I) * H * 3 / 8;
  const int Tmax = 8192, Rmax = Tmax * topk;
  DeviceBuffer gu(size_t(E) * 2 * halves * guHalfBytes),
      dn(size_t(E) * downBytes), act(size_t(Rmax) * std::max(H, I) * 2),
      zg(size_t(Rmax) * 2 * I * 4), zd(size_t(Rmax) * H * 4),
      rowIds(size_t(Rmax) * 4);
  fillBuf(gu, 21, 0);
  fillBuf(dn, 22, 0);
  fillBuf(act, 23, 1);
#ifdef GLM_HAVE_CUBLAS
  DeviceBuffer wGu(size_t(E) * 2 * I * H * 2), wDn(size_t(E) * H * I * 2);
  fillBuf(wGu, 24, 1);
  fillBuf(wDn, 25, 1);
#endif
  GLM_CU(cuStreamSynchronize(stream));
  std::ostringstream moe;
  std::snprintf(line, sizeof line, "%-22s %5s %6s %-10s %9s %9s %7s\n",
                "moe projection", "T", "rows/e", "best tile", "ours",
                "cuBLAS", "ratio");
  moe << line;
  log << line << std::flush;
  for (int T : {512, 2048, 8192}) {
    const int per = T * topk / E, R = E * per;
    std::vector<int> ids(R);
    for (int r = 0; r < R; ++r)
      ids[r] = r % T; // every token 8 times, spread over the experts
    rowIds.upload(ids.data(), ids.size() * 4);
    for (int proj = 0; proj < 2; ++proj) { // 0 gate+up, 1 down
      const int in = proj ? I : H, outW = proj ? H : 2 * I;
      const double flops = 2.0 * R * double(in) * outW;
      double best = 0;
      std::string bestTile;
      for (int bm : bms) {
        std::vector<GemmItemHost> items;
        for (int e = 0; e < E; ++e)
          for (int r0 = 0; r0 < per; r0 += bm) {
            GemmItemHost it{};
            it.rowStart = e * per + r0;
            it.rows = std::min(bm, per - r0);
            if (proj == 0) {
              for (int p = 0; p < 2; ++p)
                for (int hf = 0; hf < halves; ++hf) {
                  it.tiles = gu.ptr() + ((size_t(e) * 2 + p) * halves + hf) *
                                            guHalfBytes;
                  it.k = 2 + (e + p + hf) % 3;
                  it.zOff = int64_t(e * per + r0) * 2 * I + p * I + 128 * hf;
                  items.push_back(it);
                }
            } else {
              it.tiles = dn.ptr() + size_t(e) * downBytes;
              it.k = 3;
              it.zOff = int64_t(e * per + r0) * H;
              items.push_back(it);
            }
          }
        DeviceBuffer dItems(items.size() * sizeof(GemmItemHost));
        dItems.upload(items.data(), dItems.size());
        const int t = proj ? 256 : 128;
        CUfunction f = fn(glm::codegen::kernelName(groupedSpec(bm, t)));
        const int zero = 0, nItems = int(items.size());
        const double msT = timeMedianMs(stream, opt.reps, 200.0, [&] {
          // xh, row_ids, items, z, n_items, in, out, x_stride, z_stride,
          // accumulate, sI, sI8, sJ8.
          if (proj == 0)
            launchArgs(f, unsigned(nItems), 1, unsigned(t), stream,
                       {slot(dX.ptr()), slot(rowIds.ptr()), slot(dItems.ptr()),
                        slot(zg.ptr()), slot(nItems), slot(H), slot(128),
                        slot(H), slot(2 * I), slot(zero), slot(8), slot(64),
                        slot(8)});
          else
            launchArgs(f, unsigned(nItems), unsigned(H / t), unsigned(t),
                       stream,
                       {slot(act.ptr()), slot(CUdeviceptr(0)),
                        slot(dItems.ptr()), slot(zd.ptr()), slot(nItems),
                        slot(I), slot(H), slot(I), slot(H), slot(zero),
                        slot(8), slot(3072), slot(64)});
        });
        const double tf = flops / (msT * 1e-3) / 1e12;
        log << "    moe " << (proj ? "down" : "gate+up") << " T" << T
            << " bm" << bm << " t" << t << ": " << tf << " TFLOP/s\n";
        if (tf > best)
          best = tf,
          bestTile = "bm" + std::to_string(bm) + " t" + std::to_string(t);
      }
      double cublasTf = 0;
#ifdef GLM_HAVE_CUBLAS
      {
        const float alpha = 1.0f, beta = 0.0f;
        const double msC = timeMedianMs(stream, opt.reps, 200.0, [&] {
          checkCublas(
              cublasGemmStridedBatchedEx(
                  h, CUBLAS_OP_T, CUBLAS_OP_N, outW, per, in, &alpha,
                  reinterpret_cast<const void *>(proj ? wDn.ptr() : wGu.ptr()),
                  CUDA_R_16F, in, (long long)outW * in,
                  reinterpret_cast<const void *>(act.ptr()), CUDA_R_16F, in,
                  (long long)per * in, &beta,
                  reinterpret_cast<void *>(proj ? zd.ptr() : zg.ptr()),
                  CUDA_R_32F, outW, (long long)per * outW, E,
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmStridedBatchedEx");
        });
        cublasTf = flops / (msC * 1e-3) / 1e12;
      }
#endif
      char ratio[16];
      if (cublasTf > 0)
        std::snprintf(ratio, sizeof ratio, "%.3f", best / cublasTf);
      else
        std::snprintf(ratio, sizeof ratio, "n/a");
      std::snprintf(line, sizeof line, "%-22s %5d %6d %-10s %9.1f %9.1f %7s\n",
                    proj ? "down 2048->6144 K3" : "gate+up 6144->2x2048",
                    T, per, bestTile.c_str(), best, cublasTf, ratio);
      moe << line;
      log << line << std::flush;
    }
  }
  GLM_CU(cuStreamSynchronize(stream));
  return "prefill GEMM (TFLOP/s; gemm_trellis mcg e4m3, fp16 xh, fp32 out; "
         "cuBLAS fp16 weights, fp32 out):\n" +
         table.str() +
         "\nMoE layer prefill (gemm_trellis_grouped, 256 experts, top-8, "
         "uniform routing; cuBLAS strided-batched fp16):\n" +
         moe.str();
}

} // namespace glm::rt::cuda
