//===- mla_proj_gpu_test.cpp - per-head projections on tensor cores -------===//
//
// mla_proj (a GEMM per head over a prefill chunk's rows, 3xTF32 operands)
// against its twin (runtime/twins/twin_mla_proj.cpp: the same tf32 splits,
// the three products summed in fp64): within 1e-5 of max|twin| (fp32 mma
// sums). Both orientations (w = kn: q_abs from q_nope and W_uk; w = nk:
// the head outputs from ctx and W_uv) at GLM-5.3's shapes over every kv_b
// form (E4M3 block-128 as the packs store it, row, MXFP8, bf16), ragged row
// counts (1, 37, 130, 2048), a rank's heads; rows of other heads untouched.
//
//===----------------------------------------------------------------------===//
#include "gpu_twin_util.h"

using namespace glm::gputest;

namespace {

struct ProjCase {
  std::string name;
  int H, hb, he, dn, dr, dv, kvr, R;
  int dt, sk; // kv_b's stored form
  bool headOut;
};

class MlaProjGpu : public ::testing::TestWithParam<ProjCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(MlaProjGpu, MatchesTwin) {
  const ProjCase c = GetParam();
  std::mt19937 rng(std::hash<std::string>()(c.name) & 0xFFFFFFF);
  const int rows = c.H * (c.dn + c.dv), in = c.kvr;
  // kv_b in its stored form.
  std::vector<uint8_t> w, s;
  if (c.dt == 3) {
    w.resize(size_t(rows) * in);
    for (auto &b : w) {
      b = uint8_t(rng());
      if ((b & 0x7F) == 0x7F)
        b &= 0xFE;
    }
    std::vector<float> sc;
    if (c.sk == 1)
      sc.resize(size_t((rows + 127) / 128) * ((in + 127) / 128));
    else if (c.sk == 2)
      sc.resize(rows);
    std::uniform_real_distribution<float> u(1e-4f, 1e-3f);
    for (auto &v : sc)
      v = u(rng);
    s = storeAs(0, sc);
    if (c.sk == 3) {
      s.resize(size_t(rows) * (in / 32));
      for (auto &e : s)
        e = uint8_t(110 + rng() % 8);
    }
  } else {
    w = storeAs(c.dt, randn(rng, size_t(rows) * in, 0.05f));
  }
  const int xHead = c.headOut ? c.kvr : c.dn + c.dr;
  const int yHead = c.headOut ? c.dv : c.kvr;
  const int K = c.headOut ? c.kvr : c.dn, N = c.headOut ? c.dv : c.kvr;
  const std::vector<float> x = randn(rng, size_t(c.R) * c.H * xHead);
  std::vector<int> heads;
  for (int h = c.hb; h < c.he; ++h)
    heads.push_back(h);
  const int nh = int(heads.size());
  const unsigned gx = unsigned(nh * ((N + 63) / 64)),
                 gy = unsigned((c.R + 63) / 64);
  const char *dtn[] = {"f32", "f16", "bf16", "e4m3"};
  const char *skn[] = {"none", "block", "row", "mx"};
  const KernelSpec sp = spec("mla_proj", {{"w", c.headOut ? "nk" : "kn"},
                                          {"dt", dtn[c.dt]},
                                          {"sk", skn[c.sk]},
                                          {"threads", "128"}});
  const std::vector<float> y0(size_t(c.R) * c.H * yHead, -3.0f);
  auto dX = upload(x), dW = upload(w), dS = upload(s), dH = upload(heads),
       dY = upload(y0);
  Args a;
  a.ptr(dX) << c.H * xHead << xHead;
  a.ptr(dW) << c.dt;
  a.ptr(dS) << c.sk << c.dn + c.dv << (c.headOut ? c.dn : 0) << in;
  a.ptr(dH).ptr(dY) << c.H * yHead << yHead << c.R << K << N;
  a.launch(kernel(sp), gx, gy, 128);
  const std::vector<float> y = download<float>(dY, y0.size());
  std::vector<float> t = y0;
  runTwin(sp, gx, gy, 128, 0,
          {hp(x.data()), hi(c.H * xHead), hi(xHead), hp(w.data()), hi(c.dt),
           hp(s.empty() ? nullptr : s.data()), hi(c.sk), hi(c.dn + c.dv),
           hi(c.headOut ? c.dn : 0), hi(in), hp(heads.data()), hp(t.data()),
           hi(c.H * yHead), hi(yHead), hi(c.R), hi(K), hi(N)});
  Err e;
  size_t outside = 0, kept = 0;
  for (int r = 0; r < c.R; ++r)
    for (int h = 0; h < c.H; ++h)
      for (int n = 0; n < yHead; ++n) {
        const size_t i = (size_t(r) * c.H + h) * yHead + n;
        if (h >= c.hb && h < c.he)
          e.add(y[i], t[i]);
        else
          ++outside, kept += y[i] == -3.0f;
      }
  report("mla_proj " + c.name, e, 1e-5, "fp32 mma sums of 3xTF32 products");
  if (outside)
    reportExact("mla_proj " + c.name + " other heads", outside - kept,
                outside);
}

std::vector<ProjCase> projCases() {
  std::vector<ProjCase> v;
  for (bool out : {false, true}) {
    const std::string o = out ? "_out" : "_qabs";
    v.push_back({"glm53_block_2048" + o, 64, 0, 64, 192, 64, 256, 512, 2048, 3,
                 1, out});
    v.push_back({"glm53_block_rank" + o, 64, 8, 16, 192, 64, 256, 512, 130, 3,
                 1, out});
    v.push_back({"glm53_mx_37" + o, 64, 0, 64, 192, 64, 256, 512, 37, 3, 3,
                 out});
    v.push_back({"glm53_row_1" + o, 64, 40, 64, 192, 64, 256, 512, 1, 3, 2,
                 out});
    v.push_back({"glm53_bf16" + o, 64, 0, 32, 192, 64, 256, 512, 100, 2, 0,
                 out});
    v.push_back({"tiny_f32" + o, 4, 0, 4, 16, 8, 16, 32, 9, 0, 0, out});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaProjGpu, ::testing::ValuesIn(projCases()),
                         [](const auto &i) { return i.param.name; });

} // namespace
