//===- dense_gemv_twin.cpp - twins of the dense GEMVs and hadamard128 -----===//
//
// hadamard128: fp32 x * pre, the warp butterfly, * 1/sqrt128 * post, as the
// kernel computes them; CUDA may contract x * pre into the first butterfly
// add (FMA), so CUDA against the twin is max|cuda - twin| <= 1e-6 *
// max|twin| (a few fp32 ulps), bit-exact where pre is null.
//
// dense_gemv: the same sums whatever `rows` (rows per warp) and `loads`;
// weights decoded exactly as the kernel does (bf16; E4M3 times
// the fp32 block / row scale, one fp32 product; MXFP8 times 2^(e - 127));
// the kernel sums w * x per lane in fp32 (in 16-byte chunks, compiler-chosen
// FMA contraction) then across the warp and the row's slices; the twin sums
// in fp64 and rounds once, then y = s or y + s in fp32. CUDA against the
// twin: max|cuda - twin| <= 1e-5 * max|twin| (fp32 sums of `in` products).
//
// With a fixed-point sum (template sum = fixed / fixed_out) the unit is
// one 16-byte load: its dot (fp64 here, fp32 in the kernel) rounded to
// fixed point, then exact int64 sums.
//
// dense_gemv_f32: fp64 sums of exact float * float products per lane, in
// the kernel's order, and the kernel's xor-shuffle tree: bit-exact.
//
//===----------------------------------------------------------------------===//
#include "codegen/dense_gemv_abi.h"
#include "runtime/twins/families.h"
#include "runtime/twins/twin_common.h"

#include "runtime/base/parallel.h"

#include <cmath>

namespace glm::rt::twins {

namespace {

// GLM_HADAMARD128_PARAMS, in order.
enum HadArg {
  kHX,
  kHPre,
  kHPost,
  kHY,
  kHRows,
  kHN,
  kHPreStride,
  kHPostStride,
  kNumHadArgs
};
// GLM_DENSE_GEMV_PARAMS, in order.
enum GemvArg {
  kGX,
  kGW,
  kGScale,
  kGY,
  kGBatch,
  kGIn,
  kGOut,
  kGOutStride,
  kGAccumulate,
  kNumGemvArgs
};
// GLM_DENSE_GEMV_F32_PARAMS, in order.
enum F32Arg { kFX, kFW, kFY, kFIn, kFOut, kNumF32Args };

} // namespace

void hadamard128Twin(const Launch &l) {
  check(l.args.size() == kNumHadArgs, "twin of hadamard128: ", l.args.size(),
        " arguments, the family takes ", int(kNumHadArgs));
  const int vt = storageId(l, "vt");
  const float *x = l.ptr<const float>(kHX);
  const void *pre = l.args[kHPre].p, *post = l.args[kHPost].p;
  float *y = l.ptr<float>(kHY);
  const int rows = l.i32(kHRows), n = l.i32(kHN);
  const int preStride = l.i32(kHPreStride), postStride = l.i32(kHPostStride);
  const int perRow = n / 128;
  // Warp-per-block; blocks beyond the grid's warps are not computed.
  const int64_t blocks = std::min<int64_t>(
      int64_t(rows) * perRow, int64_t(l.grid[0]) * (l.block[0] / 32));
  parallelFor(blocks, 64, 0, [&](int64_t b0, int64_t b1, int) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int r = int(blk / perRow), q = int(blk % perRow);
      const int64_t base = int64_t(r) * n + 128 * q, col = 128 * q;
      float v[128];
      for (int j = 0; j < 128; ++j)
        v[j] = x[base + j] * optAt(pre, vt, int64_t(r) * preStride + col + j);
      hadamard128F32(v);
      for (int j = 0; j < 128; ++j)
        y[base + j] = v[j] * kInvSqrt128 *
                      optAt(post, vt, int64_t(r) * postStride + col + j);
    }
  });
}

void denseGemvTwin(const Launch &l) {
  check(l.args.size() == kNumGemvArgs, "twin of dense_gemv: ", l.args.size(),
        " arguments, the family takes ", int(kNumGemvArgs));
  const std::string &format = l.targ("format");
  const std::string &scaleArg = l.targ("scale");
  const int sct = scaleArg == "f16" ? 1 : scaleArg == "bf16" ? 2 : 0;
  const int fmt = format == "bf16"        ? 0
                  : format == "fp8_block" ? 1
                  : format == "fp8_row"   ? 2
                  : format == "mxfp8"     ? 3
                                          : -1;
  check(fmt >= 0, "twin of dense_gemv: unknown format '", format, "'");
  const int batchT = l.targInt("batch");
  const int warps = int(l.block[0]) / 32;
  const float *x = l.ptr<const float>(kGX);
  const unsigned char *w = l.ptr<const unsigned char>(kGW);
  const void *scale = l.args[kGScale].p;
  float *y = l.ptr<float>(kGY);
  const int batch = std::min(l.i32(kGBatch), batchT);
  const int in = l.i32(kGIn), out = l.i32(kGOut);
  const int outStride = l.i32(kGOutStride);
  const bool accumulate = l.i32(kGAccumulate) != 0;
  const int sum = l.sumMode();
  check(in > 0 && in % 128 == 0 && warps >= 1, "twin of dense_gemv: in ", in,
        " is not a positive multiple of 128");
  // Rows per block R (the kernel's rule, dense_gemv_abi.h): the rows the
  // grid covers are o < grid.x * R.
  const int64_t R = codegen::denseGemvRowsPerBlock(
      out, l.grid[0], warps, l.targIntOr("rows", 1));
  const int64_t rowsCovered = std::min<int64_t>(out, int64_t(l.grid[0]) * R);
  const int64_t nBlkIn = (int64_t(in) + 127) >> 7;
  parallelFor(rowsCovered, 16, 0, [&](int64_t o0, int64_t o1, int) {
    std::vector<float> wv(in);
    for (int64_t o = o0; o < o1; ++o) {
      if (fmt == 0) {
        const uint16_t *row = reinterpret_cast<const uint16_t *>(w) + o * in;
        for (int i = 0; i < in; ++i)
          wv[i] = bf16ToFloat(row[i]);
      } else {
        const unsigned char *row = w + o * in;
        for (int i = 0; i < in; ++i) {
          float s = 1.0f;
          if (fmt == 1)
            s = storageAt(scale, sct, (o >> 7) * nBlkIn + (i >> 7));
          else if (fmt == 2)
            s = storageAt(scale, sct, o);
          else
            s = std::ldexp(1.0f, int(static_cast<const unsigned char *>(
                                     scale)[o * (in / 32) + (i >> 5)]) -
                                     127);
          wv[i] = e4m3ToFloat(row[i]) * s;
        }
      }
      if (sum) {
        // The kernel's unit: one 16-byte load (8 bf16 / 16 E4M3 inputs),
        // its dot to fixed point, the rest exact.
        const int elems = fmt == 0 ? 8 : 16;
        for (int b = 0; b < batch; ++b) {
          const float *xb = x + int64_t(b) * in;
          long long s = 0;
          for (int i0 = 0; i0 < in; i0 += elems) {
            double d = 0;
            for (int i = i0; i < i0 + elems; ++i)
              d += double(wv[i]) * xb[i];
            s += toFixed(float(d));
          }
          storeFixedSum(sum, y, int64_t(b) * outStride + o, s, accumulate);
        }
        continue;
      }
      for (int b = 0; b < batch; ++b) {
        const float *xb = x + int64_t(b) * in;
        double acc = 0;
        for (int i = 0; i < in; ++i)
          acc += double(wv[i]) * xb[i];
        float *dst = y + int64_t(b) * outStride + o;
        *dst = accumulate ? *dst + float(acc) : float(acc);
      }
    }
  });
}

void denseGemvF32Twin(const Launch &l) {
  check(l.args.size() == kNumF32Args, "twin of dense_gemv_f32: ", l.args.size(),
        " arguments, the family takes ", int(kNumF32Args));
  const bool f64 = l.targ("out") == "f64";
  const float *x = l.ptr<const float>(kFX);
  const float *w = l.ptr<const float>(kFW);
  void *y = l.args[kFY].p;
  const int in = l.i32(kFIn), out = l.i32(kFOut);
  const int64_t rows =
      std::min<int64_t>(out, int64_t(l.grid[0]) * (l.block[0] / 32));
  parallelFor(rows, 16, 0, [&](int64_t o0, int64_t o1, int) {
    for (int64_t o = o0; o < o1; ++o) {
      const float *row = w + o * in;
      double acc[32];
      for (int lane = 0; lane < 32; ++lane) {
        double a = 0.0;
        for (int i = lane; i < in; i += 32)
          a += double(row[i]) * double(x[i]); // exact product: no FMA doubt
        acc[lane] = a;
      }
      for (int s = 16; s > 0; s >>= 1) {
        double next[32];
        for (int lane = 0; lane < 32; ++lane)
          next[lane] = acc[lane] + acc[lane ^ s];
        std::copy(next, next + 32, acc);
      }
      if (f64)
        static_cast<double *>(y)[o] = acc[0];
      else
        static_cast<float *>(y)[o] = float(acc[0]);
    }
  });
}

} // namespace glm::rt::twins
