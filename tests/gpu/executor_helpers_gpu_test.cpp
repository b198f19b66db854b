//===- executor_helpers_gpu_test.cpp - the executor's glmx_* kernels ------===//
//
// The CUDA executor's helper kernels (runtime/cuda/executor_kernels.cpp)
// launched directly with the executor's launch shapes, against float64
// references on random data:
//  - the stored-element decoders (every E4M3 byte, every f16 value) through
//    glmx_embed, bit for bit against runtime/base/numeric.h;
//  - glmx_rms_norm with several blocks per row: the same bits as one block
//    (every block sums the whole row in one fixed order), in place with one
//    block, rows longer than the register path; glmx_add_rms_norm: the bits
//    of the residual add followed by the norm;
//  - the absorbed MLA kernels glmx_mla_qabs / core / out with kv_b as FP8
//    (row and block-128 scales), BF16 and F32, DSA selections of 65 rows
//    and of more than one shared-memory tile; run twice, the same bits.
//
//===----------------------------------------------------------------------===//
#include "gpu_test_util.h"

#include "runtime/cuda/executor.h"

#include <algorithm>
#include <numeric>

namespace glm::gputest {
namespace {

class ExecutorHelpersGpu : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

/// The helper kernels, compiled as the executor compiles them.
cuda::Module &helpers() {
  static std::unique_ptr<cuda::Module> m;
  if (!m)
    m = std::make_unique<cuda::Module>(cuda::compileCubin(
        cuda::executorKernelSource(), device().arch(), {"--fmad=false"}));
  return *m;
}
CUfunction fn(const char *name) { return helpers().function(name); }

bool sameBits(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b);
  return glm::rt::floatToBits(a) == glm::rt::floatToBits(b);
}

TEST_F(ExecutorHelpersGpu, DecodersMatchNumericBitForBit) {
  ensureContext();
  std::vector<uint8_t> e8(256);
  std::iota(e8.begin(), e8.end(), 0);
  std::vector<uint16_t> f16(65536);
  std::iota(f16.begin(), f16.end(), 0);
  std::vector<int> tok = {0};
  auto t = upload(tok);
  for (int dt : {3, 1}) {
    const int d = dt == 3 ? 256 : 65536;
    auto table = dt == 3 ? upload(e8) : upload(f16);
    auto x = poisoned<float>(d);
    Args a;
    a << table.ptr() << dt << CUdeviceptr(0) << t.ptr() << x.ptr() << d;
    a.launch(fn("glmx_embed"), (d + 255) / 256, 1, 256);
    auto got = download<float>(x, d);
    size_t bad = 0;
    for (int i = 0; i < d; ++i) {
      const float want = dt == 3 ? glm::rt::e4m3ToFloat((uint8_t)i)
                                 : glm::rt::halfToFloat((uint16_t)i);
      bad += !sameBits(got[i], want);
    }
    reportExact(std::string("glmx decode ") + (dt == 3 ? "e4m3" : "f16") +
                    " every value",
                bad, d);
  }
}

/// y = w x / sqrt(mean(x^2) + eps) of rows B, strides xs/ys, on G blocks.
std::vector<float> rmsNormGpu(const std::vector<float> &x,
                              const std::vector<float> &w, int n, int B,
                              int xs, int ys, unsigned G, bool inPlace) {
  auto dx = upload(x);
  auto dw = upload(w);
  auto dy = poisoned<float>((size_t)B * ys);
  Args a;
  a << dx.ptr() << dw.ptr() << (inPlace ? dx.ptr() : dy.ptr()) << n << 1e-5
    << xs << ys;
  a.launch(fn("glmx_rms_norm"), G, (unsigned)B, 1024);
  auto out = download<float>(inPlace ? dx : dy, (size_t)B * ys);
  return out;
}

TEST_F(ExecutorHelpersGpu, RmsNormBlocksAgreeAndMatchReference) {
  ensureContext();
  std::mt19937 rng(11);
  for (int n : {6144, 2048, 100, 12000}) {
    const int B = 3, xs = n + 8, ys = n;
    std::vector<float> x = randn(rng, (size_t)B * xs, 2.0f);
    std::vector<float> w = randn(rng, n, 1.0f);
    const int K = (n + 1023) / 1024;
    const unsigned G = K > 8 ? 1u : (unsigned)K; // as the executor
    auto many = rmsNormGpu(x, w, n, B, xs, ys, G, false);
    auto one = rmsNormGpu(x, w, n, B, xs, ys, 1, false);
    Err e;
    size_t differ = 0;
    for (int b = 0; b < B; ++b) {
      double ss = 0;
      for (int i = 0; i < n; ++i)
        ss += (double)x[(size_t)b * xs + i] * x[(size_t)b * xs + i];
      const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
      for (int i = 0; i < n; ++i) {
        e.add(many[(size_t)b * ys + i], w[i] * (x[(size_t)b * xs + i] * inv));
        differ += !sameBits(many[(size_t)b * ys + i], one[(size_t)b * ys + i]);
      }
    }
    const std::string tag = "glmx_rms_norm n=" + std::to_string(n);
    report(tag + " vs fp64", e, 1e-6);
    reportExact(tag + " " + std::to_string(G) + " blocks == 1 block", differ,
                (size_t)B * n);
    // In place (the executor's G = 1 when y aliases x): same bits.
    auto in = rmsNormGpu(x, w, n, B, xs, xs, 1, true);
    differ = 0;
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < n; ++i)
        differ += !sameBits(in[(size_t)b * xs + i], one[(size_t)b * ys + i]);
    reportExact(tag + " in place == out of place", differ, (size_t)B * n);
  }
}

TEST_F(ExecutorHelpersGpu, AddRmsNormEqualsAddThenNorm) {
  // The executor's fused residual add + norm: xout = x + delta and y =
  // norm(xout) must be the bits of x += delta (one float add per element)
  // followed by glmx_rms_norm on one block.
  ensureContext();
  std::mt19937 rng(12);
  for (int n : {6144, 2048, 100, 12000}) {
    const int B = 3;
    std::vector<float> x = randn(rng, (size_t)B * n, 2.0f);
    std::vector<float> delta = randn(rng, (size_t)B * n, 0.5f);
    std::vector<float> w = randn(rng, n, 1.0f);
    std::vector<float> sum(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      sum[i] = x[i] + delta[i];
    auto want = rmsNormGpu(sum, w, n, B, n, n, 1, false);
    auto dx = upload(x), dd = upload(delta), dw = upload(w);
    auto dxo = poisoned<float>((size_t)B * n);
    auto dy = poisoned<float>((size_t)B * n);
    const unsigned G = (unsigned)((n + 1023) / 1024); // as the executor
    Args a;
    a << dx.ptr() << dd.ptr() << dxo.ptr() << dw.ptr() << dy.ptr() << n
      << 1e-5;
    a.launch(fn("glmx_add_rms_norm"), G, (unsigned)B, 1024);
    auto y = download<float>(dy, (size_t)B * n);
    auto xo = download<float>(dxo, (size_t)B * n);
    size_t badY = 0, badX = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      badY += !sameBits(y[i], want[i]);
      badX += !sameBits(xo[i], sum[i]);
    }
    const std::string tag = "glmx_add_rms_norm n=" + std::to_string(n) +
                            " (" + std::to_string(G) + " blocks)";
    reportExact(tag + " y == add then norm", badY, y.size());
    reportExact(tag + " xout == x + delta", badX, xo.size());
  }
}

/// kv_b [R, kvr] stored as dt (0 f32, 2 bf16, 3 e4m3) with scales sk (1
/// block-128, 2 row); wd: the values the kernels multiply (dequantized).
struct KvB {
  std::vector<uint8_t> bytes;
  std::vector<float> scale, wd;
};
KvB makeKvB(std::mt19937 &rng, int R, int kvr, int dt, int sk) {
  KvB k;
  std::vector<float> v = randn(rng, (size_t)R * kvr, 0.05f);
  k.wd.resize(v.size());
  if (dt == 3) {
    std::uniform_real_distribution<float> u(0.5f, 2.0f);
    const int sr = sk == 1 ? (R + 127) / 128 : R;
    const int sc = sk == 1 ? (kvr + 127) / 128 : 1;
    k.scale.resize((size_t)sr * sc);
    for (auto &s : k.scale)
      s = u(rng) / 64.0f;
    k.bytes.resize(v.size());
    for (int o = 0; o < R; ++o)
      for (int c = 0; c < kvr; ++c) {
        const float s = sk == 1 ? k.scale[(size_t)(o / 128) * sc + c / 128]
                                : k.scale[o];
        const size_t i = (size_t)o * kvr + c;
        k.bytes[i] = glm::rt::floatToE4m3(v[i] / s);
        k.wd[i] = glm::rt::e4m3ToFloat(k.bytes[i]) * s;
      }
    return k;
  }
  for (size_t i = 0; i < v.size(); ++i)
    k.wd[i] = roundTo(dt, v[i]);
  k.bytes = storeAs(dt, k.wd);
  return k;
}

TEST_F(ExecutorHelpersGpu, MlaKernelsMatchReference) {
  ensureContext();
  const int H = 4, dn = 192, dr = 64, dv = 256, kvr = 512, lat = kvr + dr;
  const int B = 2, maxCtx = 1600, R = H * (dn + dv);
  const double scale = 1.0 / std::sqrt((double)(dn + dr));
  std::mt19937 rng(5);
  std::vector<int> heads(H);
  std::iota(heads.begin(), heads.end(), 0);
  auto dHeads = upload(heads);
  // Inputs shared by the kv_b forms: q, latent cache, selections.
  std::vector<float> q = randn(rng, (size_t)B * H * (dn + dr), 1.0f);
  std::vector<float> cache = randn(rng, (size_t)B * maxCtx * lat, 1.0f);
  std::vector<int> seq = {1, 0}, nsel = {65, 1500};
  std::vector<int> sel((size_t)B * maxCtx, 0);
  for (int b = 0; b < B; ++b) {
    std::vector<int> all(maxCtx);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::sort(all.begin(), all.begin() + nsel[b]);
    std::copy(all.begin(), all.begin() + nsel[b], sel.begin() + b * maxCtx);
  }
  auto dq = upload(q), dCache = upload(cache), dSeq = upload(seq),
       dSel = upload(sel), dNsel = upload(nsel);
  const int forms[][2] = {{3, 2}, {3, 1}, {2, 0}, {0, 0}};
  for (auto &f : forms) {
    const int dt = f[0], sk = f[1];
    const std::string tag = std::string("glmx_mla ") +
                            (dt == 3 ? (sk == 2 ? "e4m3 row" : "e4m3 block")
                                     : dt == 2 ? "bf16" : "f32");
    KvB kv = makeKvB(rng, R, kvr, dt, sk);
    auto dW = upload(kv.bytes);
    auto dS = upload(kv.scale);
    const CUdeviceptr sp = kv.scale.empty() ? CUdeviceptr(0) : dS.ptr();
    // 1. qabs (the executor's 256 threads and a narrower block).
    for (unsigned threads : {256u, 64u}) {
      auto qabs = poisoned<float>((size_t)B * H * kvr);
      Args a;
      a << dq.ptr() << dW.ptr() << dt << sp << sk << dHeads.ptr()
        << qabs.ptr() << H << dn << dr << dv << kvr;
      a.launch(fn("glmx_mla_qabs"), (unsigned)(H * kvr / 32), (unsigned)B,
               threads);
      auto got = download<float>(qabs, (size_t)B * H * kvr);
      Err e;
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h)
          for (int c = 0; c < kvr; ++c) {
            double s = 0;
            for (int i = 0; i < dn; ++i)
              s += (double)kv.wd[((size_t)h * (dn + dv) + i) * kvr + c] *
                   q[((size_t)b * H + h) * (dn + dr) + i];
            e.add(got[((size_t)b * H + h) * kvr + c], s);
          }
      report(tag + " qabs t" + std::to_string(threads), e, 2e-5);
    }
    // 2. core: its own random q_abs (independent of kv_b).
    std::vector<float> qabs = randn(rng, (size_t)B * H * kvr, 0.1f);
    auto dQabs = upload(qabs);
    std::vector<float> ctxRuns[2];
    for (int run = 0; run < 2; ++run) {
      auto p = poisoned<float>((size_t)B * H * maxCtx);
      auto ctx = poisoned<float>((size_t)B * H * kvr);
      Args a;
      a << dq.ptr() << dQabs.ptr() << dCache.ptr() << dSeq.ptr() << dSel.ptr()
        << dNsel.ptr() << p.ptr() << maxCtx << ctx.ptr() << dHeads.ptr() << H
        << dn << dr << kvr << scale;
      a.launch(fn("glmx_mla_core"), (unsigned)H, (unsigned)B, 1024,
               (unsigned)(kvr + dr + 2 * 1024 + 4 * 1024) * 4);
      ctxRuns[run] = download<float>(ctx, (size_t)B * H * kvr);
    }
    Err e;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        const int n = nsel[b];
        const float *cb = cache.data() + (size_t)seq[b] * maxCtx * lat;
        const float *qa = qabs.data() + ((size_t)b * H + h) * kvr;
        const float *qp = q.data() + ((size_t)b * H + h) * (dn + dr) + dn;
        std::vector<double> pr(n);
        double mx = -1e300, sum = 0;
        for (int j = 0; j < n; ++j) {
          const float *ent = cb + (size_t)sel[(size_t)b * maxCtx + j] * lat;
          double s = 0;
          for (int c = 0; c < kvr; ++c)
            s += (double)ent[c] * qa[c];
          for (int c = 0; c < dr; ++c)
            s += (double)ent[kvr + c] * qp[c];
          pr[j] = s * scale;
          mx = std::max(mx, pr[j]);
        }
        for (int j = 0; j < n; ++j)
          sum += pr[j] = std::exp(pr[j] - mx);
        for (int c = 0; c < kvr; ++c) {
          double s = 0;
          for (int j = 0; j < n; ++j)
            s += pr[j] / sum *
                 cb[(size_t)sel[(size_t)b * maxCtx + j] * lat + c];
          e.add(ctxRuns[0][((size_t)b * H + h) * kvr + c], s);
        }
      }
    report(tag + " core (65 and 1500 rows)", e, 2e-5);
    size_t differ = 0;
    for (size_t i = 0; i < ctxRuns[0].size(); ++i)
      differ += !sameBits(ctxRuns[0][i], ctxRuns[1][i]);
    reportExact(tag + " core run twice: same bits", differ,
                ctxRuns[0].size());
    // 3. out.
    std::vector<float> ctx = randn(rng, (size_t)B * H * kvr, 1.0f);
    auto dCtx = upload(ctx);
    auto ov = poisoned<float>((size_t)B * H * dv);
    Args a;
    a << dW.ptr() << dt << sp << sk << dCtx.ptr() << dHeads.ptr() << ov.ptr()
      << H << dn << dv << kvr;
    a.launch(fn("glmx_mla_out"), (unsigned)(H * ((dv + 31) / 32)),
             (unsigned)B, 256); // as the executor: 8 warps x 4 rows
    auto got = download<float>(ov, (size_t)B * H * dv);
    Err eo;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int j = 0; j < dv; ++j) {
          double s = 0;
          for (int c = 0; c < kvr; ++c)
            s += (double)kv.wd[((size_t)h * (dn + dv) + dn + j) * kvr + c] *
                 ctx[((size_t)b * H + h) * kvr + c];
          eo.add(got[((size_t)b * H + h) * dv + j], s);
        }
    report(tag + " out", eo, 2e-5);
  }
}

/// The router's selection as k serial rounds of "the best untaken expert,
/// ties to the lower id" (the CPU executor's rule), sorted by id, weights
/// renormalised over the picks in ascending id and scaled, in float64.
void routeReference(const std::vector<float> &logits,
                    const std::vector<float> &bias, int E, int k,
                    bool normalize, double scale, int b, std::vector<int> &ids,
                    std::vector<double> &w) {
  std::vector<double> s(E), ch(E);
  for (int e = 0; e < E; ++e) {
    s[e] = 1.0 / (1.0 + std::exp(-(double)logits[size_t(b) * E + e]));
    ch[e] = s[e] + bias[e];
  }
  std::vector<bool> taken(E, false);
  ids.clear();
  for (int r = 0; r < k; ++r) {
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (!taken[e] && (best < 0 || ch[e] > ch[best]))
        best = e;
    taken[best] = true;
    ids.push_back(best);
  }
  std::sort(ids.begin(), ids.end());
  double sum = 0;
  for (int e : ids)
    sum += s[e];
  w.clear();
  for (int e : ids)
    w.push_back((normalize ? s[e] / (sum + 1e-20) : s[e]) * scale);
}

TEST_F(ExecutorHelpersGpu, RouteMatchesSerialTopK) {
  ensureContext();
  struct Case {
    int E, k, B;
    bool normalize, ties;
  };
  for (const Case c : {Case{256, 8, 3, true, false}, Case{256, 8, 2, true, true},
                       Case{160, 6, 2, false, true}, Case{33, 4, 1, true, false},
                       Case{1024, 64, 1, true, true}}) {
    std::mt19937 rng(40 + c.E + c.k);
    std::vector<float> logits = randn(rng, size_t(c.B) * c.E), bias(c.E);
    for (auto &v : bias)
      v = std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);
    if (c.ties) { // a few distinct values: many exact ties to break by id
      for (auto &v : logits)
        v = float(int(v * 2.0f)) / 2.0f;
      for (auto &v : bias)
        v = 0.0f;
    }
    auto dl = upload(logits), db = upload(bias);
    auto dIds = poisoned<int>(size_t(c.B) * c.k);
    auto dW = poisoned<float>(size_t(c.B) * c.k);
    const double scale = 2.5;
    Args a;
    a << dl.ptr() << db.ptr() << c.E << c.k << int(c.normalize) << scale
      << dIds.ptr() << dW.ptr();
    a.launch(fn("glmx_route"), 1, c.B, (c.E + 31) / 32 * 32);
    auto ids = download<int>(dIds, size_t(c.B) * c.k);
    auto w = download<float>(dW, size_t(c.B) * c.k);
    size_t bad = 0;
    Err e;
    std::vector<int> wantIds;
    std::vector<double> wantW;
    for (int b = 0; b < c.B; ++b) {
      routeReference(logits, bias, c.E, c.k, c.normalize, scale, b, wantIds,
                     wantW);
      for (int kk = 0; kk < c.k; ++kk) {
        bad += ids[size_t(b) * c.k + kk] != wantIds[kk];
        e.add(w[size_t(b) * c.k + kk], wantW[kk]);
      }
    }
    const std::string name = "glmx_route E" + std::to_string(c.E) + " k" +
                             std::to_string(c.k) + (c.ties ? " ties" : "");
    reportExact(name + " ids", bad, ids.size());
    report(name + " weights", e, 1e-6, "fp64 sigmoid, fp32 store");
  }
}

} // namespace
} // namespace glm::gputest
