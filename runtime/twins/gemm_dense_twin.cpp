//===- gemm_dense_twin.cpp - twin of the dense prefill GEMM ---------------===//
//
// gemm_dense (codegen/templates/gemm_dense.cuh): y = x . W^T over the
// block tiles the grid covers. x enters as fp16 hi + lo (splitHiLo) for the
// E4M3 weights, as bf16 hi + mid + lo (splitBf16x3) for BF16 weights; the
// weights are exact operands, so every product the tensor cores form is
// exact; the kernel sums a scale group's products in fp32 (hardware order),
// the twin in fp64 rounded once to fp32. Groups and scales as the kernel
// applies them: FP8 row: one group (all inputs), y = s * scale[o]; FP8
// block: 128-input groups, acc = fma(s, scale[o/128][i/128], acc) in fp32;
// BF16: the same groups, scale 1 (acc + s); MXFP8: 32-input groups, acc =
// fma(s, 2^(e - 127), acc) (exact product). Then y = v or y + v in fp32.
// CUDA against the twin: max|cuda - twin| <= 3e-5 * max|twin| (the MMA's
// fp32 sums of up to `in` exact products: FP8 row at 6144 inputs measured
// 1.6e-5 on the H200).
//
//===----------------------------------------------------------------------===//
#include "codegen/gemm_dense_abi.h"
#include "runtime/twins/families.h"
#include "runtime/twins/twin_common.h"

#include "runtime/base/parallel.h"

#include <cmath>
#include <vector>

namespace glm::rt::twins {

namespace {

// GLM_GEMM_DENSE_PARAMS, in order (dense_gemv's, then the row window).
enum GemmDenseArg {
  kX,
  kW,
  kScale,
  kY,
  kBatch,
  kIn,
  kOut,
  kOutStride,
  kAccumulate,
  kWindow, // gemm_dense's own: null or {first, last} rows wanted
  kNumArgs
};

} // namespace

void gemmDenseTwin(const Launch &l) {
  check(l.args.size() == kNumArgs, "twin of gemm_dense: ", l.args.size(),
        " arguments, the family takes ", int(kNumArgs));
  const std::string &format = l.targ("format");
  const std::string &scaleArg = l.targ("scale");
  const int sct = scaleArg == "f16" ? 1 : scaleArg == "bf16" ? 2 : 0;
  const int fmt = format == "bf16"        ? 0
                  : format == "fp8_block" ? 1
                  : format == "fp8_row"   ? 2
                  : format == "mxfp8"     ? 3
                                          : -1;
  check(fmt >= 0, "twin of gemm_dense: unknown format '", format, "'");
  const int bm = l.targInt("bm");
  const int bn = codegen::gemmDenseBlockCols(bm, int(l.block[0]));
  const float *x = l.ptr<const float>(kX);
  const auto *wBf16 = static_cast<const uint16_t *>(l.args[kW].p);
  const auto *wFp8 = static_cast<const unsigned char *>(l.args[kW].p);
  const void *scale = l.args[kScale].p;
  float *y = l.ptr<float>(kY);
  const int batch = l.i32(kBatch), in = l.i32(kIn), out = l.i32(kOut);
  const int outStride = l.i32(kOutStride);
  const bool accumulate = l.i32(kAccumulate) != 0;
  // Row blocks outside the window return in the kernel: their rows of y
  // stay as they are here too.
  const int32_t *window = static_cast<const int32_t *>(l.args[kWindow].p);
  auto wanted = [&](int r) {
    const int m0 = r / bm * bm;
    return !window || (window[0] <= window[1] && m0 <= window[1] &&
                       m0 + bm > window[0]);
  };
  check(in > 0 && in % 128 == 0, "twin of gemm_dense: in ", in,
        " is not a positive multiple of 128");
  check(bn > 0, "twin of gemm_dense: a block of ", l.block[0],
        " threads has no columns");
  // The blocks the grid covers (blocks past batch / out return).
  const int rows = int(std::min<int64_t>(batch, int64_t(l.grid[1]) * bm));
  const int cols = int(std::min<int64_t>(out, int64_t(l.grid[0]) * bn));
  if (rows <= 0 || cols <= 0)
    return;
  // x as the tensor cores see it: the sum of its planes (exact in fp64).
  std::vector<double> xe(size_t(rows) * in);
  for (size_t i = 0; i < xe.size(); ++i) {
    float hi, mid = 0.0f, lo;
    if (fmt == 0)
      splitBf16x3(x[i], hi, mid, lo);
    else
      splitHiLo(x[i], hi, lo);
    xe[i] = double(hi) + double(mid) + double(lo);
  }
  const int group = fmt == 0 || fmt == 1 ? 128 : fmt == 3 ? 32 : in;
  const int64_t nBlkIn = in / 128;
  parallelFor(cols, 8, 0, [&](int64_t o0, int64_t o1, int) {
    std::vector<double> wv(in);
    std::vector<float> gs(in / group); // the groups' scales
    for (int64_t o = o0; o < o1; ++o) {
      for (int i = 0; i < in; ++i)
        wv[i] = fmt == 0 ? bf16ToFloat(wBf16[o * in + i])
                         : e4m3ToFloat(wFp8[o * in + i]);
      for (int j = 0; j < in / group; ++j)
        gs[j] = fmt == 1 ? storageAt(scale, sct, (o >> 7) * nBlkIn + j)
                : fmt == 3
                    ? std::ldexp(1.0f, int(static_cast<const unsigned char *>(
                                           scale)[o * (in / 32) + j]) -
                                           127)
                    : 1.0f;
      const float rowScale = fmt == 2 ? storageAt(scale, sct, o) : 1.0f;
      for (int r = 0; r < rows; ++r) {
        if (!wanted(r))
          continue;
        const double *xr = &xe[size_t(r) * in];
        float acc = 0.0f;
        for (int j = 0; j < in / group; ++j) {
          double s = 0;
          for (int i = j * group; i < (j + 1) * group; ++i)
            s += wv[i] * xr[i];
          acc = fmt == 2 ? float(s) : std::fma(float(s), gs[j], acc);
        }
        const float v = acc * rowScale;
        float *dst = y + int64_t(r) * outStride + o;
        *dst = accumulate ? *dst + v : v;
      }
    }
  });
}

} // namespace glm::rt::twins
