//===- twin_mla_proj.cpp - twin of mla_proj -------------------------------===//
//
// The per-head projections of a prefill chunk on tensor cores
// (templates/mla_proj.cuh): 3xTF32 operands (hi = tf32(a), lo = tf32(a -
// hi), cvt.rna) and the three products hi.hi + hi.lo + lo.hi of each input,
// summed in fp64 (the kernel sums them in fp32 on the tensor cores: CUDA
// agrees to fp32 rounding).
//
//===----------------------------------------------------------------------===//
#include "runtime/base/parallel.h"
#include "runtime/twins/helper_twins.h"
#include "runtime/twins/twin_common.h"

#include <algorithm>
#include <vector>

namespace glm::rt::twins {

// mla_proj(x, xStride, xHead, W, dt, scale, sk, wHead, wRow0, in, heads, y,
// yStride, yHead, R, K, N); grid (nh * ceil(N / 64), ceil(R / 64)); template
// w: kn (W's rows are the inputs) or nk (the outputs).
void mlaProjTwin(const Launch &l) {
  const float *x = l.ptr<const float>(0);
  const int xStride = l.i32(1), xHead = l.i32(2);
  const void *W = l.ptr<const void>(3);
  const int dt = l.i32(4);
  const void *scale = l.ptr<const void>(5);
  const int sk = l.i32(6), wHead = l.i32(7), wRow0 = l.i32(8), in = l.i32(9);
  const int *heads = l.ptr<const int>(10);
  float *y = l.ptr<float>(11);
  const int yStride = l.i32(12), yHead = l.i32(13), R = l.i32(14),
            K = l.i32(15), N = l.i32(16);
  const bool rowsAreOutputs = l.targ("w") == "nk";
  const int nb = (N + 63) / 64, nh = int(l.grid[0]) / nb;
  const int rows = std::min<int>(R, int(l.grid[1]) * 64);
  parallelFor(nh, 1, 0, [&](int64_t i0, int64_t i1, int) {
    std::vector<float> bh(size_t(K) * N), bl(size_t(K) * N), ah(K), al(K);
    for (int64_t i = i0; i < i1; ++i) {
      const int h = heads[i];
      const int64_t wBase = int64_t(h) * wHead + wRow0;
      for (int k = 0; k < K; ++k)
        for (int n = 0; n < N; ++n) {
          const float b = rowsAreOutputs
                              ? hx::ldWT(W, dt, scale, sk, wBase + n, k, in)
                              : hx::ldWT(W, dt, scale, sk, wBase + k, n, in);
          const size_t j = size_t(k) * N + n;
          bh[j] = tf32(b);
          bl[j] = tf32(b - bh[j]);
        }
      for (int r = 0; r < rows; ++r) {
        const float *xr = x + int64_t(r) * xStride + int64_t(h) * xHead;
        for (int k = 0; k < K; ++k) {
          ah[k] = tf32(xr[k]);
          al[k] = tf32(xr[k] - ah[k]);
        }
        float *yr = y + int64_t(r) * yStride + int64_t(h) * yHead;
        for (int n = 0; n < N; ++n) {
          double s = 0.0;
          for (int k = 0; k < K; ++k) {
            const size_t j = size_t(k) * N + n;
            s += double(al[k]) * bh[j] + double(ah[k]) * bl[j] +
                 double(ah[k]) * bh[j];
          }
          yr[n] = float(s);
        }
      }
    }
  });
}

} // namespace glm::rt::twins
