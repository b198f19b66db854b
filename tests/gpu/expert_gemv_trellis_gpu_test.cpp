//===- expert_gemv_trellis_gpu_test.cpp - fused expert GEMV vs the codec --===//
//
// The fused MoE expert kernel (gate/up GEMV, output Hadamard, SwiGLU, down
// GEMV, routing weight) against a float64 evaluation of
// W = diag(suh)·H·Q·H·diag(svh) with Q from the CPU codec's decodeMatrix, on
// random tiles and vectors: exlr8 halves (gate/up [k16][c], down [b][r][c]
// tile orders, shared signs.in / signs.out, block scales) and EXL3 row-major
// tensors (per-expert suh/svh, per-slot inputs), single and mixed widths,
// every codebook, E4M3 on/off, batch 1 and 8, halves not owned by the rank
// (null tile pointers) skipped. The partials, then moe_reduce (+ the final
// Hadamard · signs.out for exlr8), are compared.
//
//===----------------------------------------------------------------------===//
#include "gpu_twin_util.h"
#include "runtime/codec/trellis.h"

#include <algorithm>
#include <numeric>

using namespace glm::gputest;
namespace trellis = glm::rt::trellis;

namespace {

struct ExpertCase {
  std::string name;
  bool exl3;          // EXL3 row-major tensors (else exlr8 halves)
  std::string widths; // allowed widths, ascending digits
  int cb;             // 0 3inst, 1 mcg, 2 mul1
  bool e4m3;
  int batchT;   // template batch
  int batch;    // runtime batch <= batchT
  int sv;       // side-vector storage 0 f32, 1 f16, 2 bf16
  int threads;
  double owned; // fraction of (expert, half) owned by this rank
  bool selfCheck = false;
  double limit = 0; // SwiGLU clamp (GLM-5.3-Flash); 0 = none
};

const char *cbName(int cb) { return cb == 0 ? "3inst" : cb == 1 ? "mcg" : "mul1"; }

KernelSpec expertSpec(const ExpertCase &c) {
  return spec("expert_gemv_trellis",
              {{"widths", c.widths},
               {"codebook", cbName(c.cb)},
               {"e4m3", c.e4m3 ? "1" : "0"},
               {"batch", std::to_string(c.batchT)},
               {"sv", dtName(c.sv)},
               {"threads", std::to_string(c.threads)}});
}
KernelSpec reduceSpec() { return spec("moe_reduce", {{"threads", "256"}}); }
KernelSpec hadamardSpec() {
  return spec("hadamard128", {{"vt", "f32"}, {"threads", "256"}});
}

std::vector<ExpertCase> cases() {
  return {
      {"exlr8_k2_mcg_e4m3_b1_all_owned", false, "2", 1, true, 1, 1, 1, 256, 1.0,
       true},
      {"exlr8_k3_mcg_e4m3_b8_rt6", false, "3", 1, true, 8, 6, 1, 256, 0.7},
      {"exlr8_k4_mul1_b1", false, "4", 2, false, 1, 1, 1, 256, 0.7},
      {"exlr8_k4_mcg_b8_svbf16", false, "4", 1, false, 8, 8, 2, 256, 0.7},
      {"exlr8_mixed234_mcg_e4m3_b8", false, "234", 1, true, 8, 8, 1, 256, 0.7},
      {"exlr8_mixed234_3inst_b1_t128", false, "234", 0, false, 1, 1, 1, 128,
       0.7},
      {"exlr8_mixed234_mul1_e4m3_b8", false, "234", 2, true, 8, 8, 1, 256, 0.7},
      {"exl3_k3_mcg_b8", true, "3", 1, false, 8, 8, 1, 256, 0.7},
      {"exl3_mixed234_mul1_b1_svf32", true, "234", 2, false, 1, 1, 0, 256,
       0.7},
      {"exl3_mixed234_3inst_b8", true, "234", 0, false, 8, 7, 1, 256, 0.8},
      // GLM-5.3-Flash's SwiGLU clamp (limit 2 bites on many channels).
      {"clamp_exlr8_mixed234_mcg_e4m3_b8", false, "234", 1, true, 8, 8, 1, 256,
       0.7, false, 2.0},
      {"clamp_exl3_k3_mul1_b1", true, "3", 2, false, 1, 1, 1, 256, 0.7, false,
       2.0},
  };
}

class ExpertGemvGpu : public ::testing::TestWithParam<ExpertCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

// Geometry small enough for a fast float64 reference; 12 hidden blocks so
// warps loop over more than one down block.
constexpr int kHidden = 1536, kInter = 2048, kHalves = 16, kExperts = 6,
              kTopk = 3;

double silu(double x) { return x / (1.0 + std::exp(-x)); }

TEST_P(ExpertGemvGpu, MatchesFloat64Reference) {
  const ExpertCase c = GetParam();
  {
    std::vector<KernelSpec> all;
    for (const ExpertCase &x : cases())
      all.push_back(expertSpec(x));
    all.push_back(reduceSpec());
    all.push_back(hadamardSpec());
    KernelCache::get().prefetch(all);
  }
  const int H = kHidden, I = kInter, E = kExperts, nBlk = H / 128;
  std::mt19937 rng(std::hash<std::string>()(c.name) & 0xFFFFFFF);
  std::uniform_real_distribution<float> uni(0.5f, 1.5f);
  auto signedScale = [&](int dt) {
    float v = uni(rng) * ((rng() & 1) ? -1.0f : 1.0f);
    return roundTo(dt, v);
  };
  std::vector<int> allowed;
  for (char ch : c.widths)
    allowed.push_back(ch - '0');
  auto pickK = [&] { return allowed[rng() % allowed.size()]; };
  const auto cb = static_cast<trellis::Codebook>(c.cb);

  // Widths: exlr8 gate/up per half, down per expert; EXL3 per tensor.
  std::vector<uint8_t> widths(size_t(E) * 3 * kHalves);
  for (int e = 0; e < E; ++e)
    for (int p = 0; p < 3; ++p) {
      int perTensor = pickK();
      for (int h = 0; h < kHalves; ++h)
        widths[(e * 3 + p) * kHalves + h] =
            uint8_t(c.exl3 || p == 2 ? perTensor : pickK());
    }
  // Tile bytes: exlr8 one blob per (e, p, h); EXL3 one per (e, p).
  std::vector<uint8_t> blob;
  std::vector<size_t> halfOff(widths.size());
  // Decoded Q per (e, p): gate/up [H, I], down [I, H] (in x out).
  std::vector<std::vector<float>> Q(size_t(E) * 3);
  auto addWords = [&](size_t nWords) {
    size_t off = (blob.size() + 255) / 256 * 256;
    blob.resize(off + nWords * 2);
    for (size_t i = 0; i < nWords; ++i) {
      uint16_t w = uint16_t(rng());
      std::memcpy(&blob[off + 2 * i], &w, 2);
    }
    return off;
  };
  auto words = [&](size_t off) {
    return reinterpret_cast<const uint16_t *>(blob.data() + off);
  };
  for (int e = 0; e < E; ++e)
    for (int p = 0; p < 3; ++p) {
      std::vector<float> &q = Q[e * 3 + p];
      const int64_t rows = p < 2 ? H : I, cols = p < 2 ? I : H;
      q.assign(size_t(rows) * cols, 0.0f);
      if (c.exl3) {
        trellis::Width w = trellis::Width::bits(widths[(e * 3 + p) * kHalves]);
        const size_t tileBytes = size_t(w.bytesPerTile());
        size_t off = addWords(size_t(rows / 16) * (cols / 16) *
                              w.wordsPerTile());
        for (int h = 0; h < kHalves; ++h)
          halfOff[(e * 3 + p) * kHalves + h] =
              off + (p < 2 ? size_t(8 * h) : size_t(8 * h) * (H / 16)) *
                        tileBytes;
        trellis::decodeMatrix(words(off), rows, cols, w, cb, c.e4m3,
                              trellis::TileOrder::RowMajor, q.data());
      } else {
        for (int h = 0; h < kHalves; ++h) {
          trellis::Width w =
              trellis::Width::bits(widths[(e * 3 + p) * kHalves + h]);
          size_t off = addWords(size_t(H / 16) * 8 * w.wordsPerTile());
          halfOff[(e * 3 + p) * kHalves + h] = off;
          std::vector<float> part(size_t(H) * 128);
          if (p < 2) { // [H, 128] -> columns 128h.. of [H, I]
            trellis::decodeMatrix(words(off), H, 128, w, cb, c.e4m3,
                                  trellis::TileOrder::RowMajor, part.data());
            for (int i = 0; i < H; ++i)
              std::copy_n(&part[size_t(i) * 128], 128,
                          &q[size_t(i) * I + 128 * h]);
          } else { // [128, H] -> rows 128h.. of [I, H]
            trellis::decodeMatrix(words(off), 128, H, w, cb, c.e4m3,
                                  trellis::TileOrder::InMajor128, part.data());
            std::copy(part.begin(), part.end(), &q[size_t(128 * h) * H]);
          }
        }
      }
    }
  std::vector<char> owned(size_t(E) * kHalves);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (auto &o : owned)
    o = u01(rng) < c.owned;

  // Side vectors.
  std::vector<float> guSvh(size_t(2) * E * I), downSuh(size_t(E) * I);
  for (auto &v : guSvh)
    v = signedScale(c.sv);
  for (auto &v : downSuh)
    v = signedScale(c.sv);
  std::vector<float> guSuBlock, downSvBlock, downSvh, signsIn(H), signsOut(H),
      suhExl3; // EXL3: [2][E][H]
  if (c.exl3) {
    downSvh.resize(size_t(E) * H);
    for (auto &v : downSvh)
      v = signedScale(c.sv);
    suhExl3.resize(size_t(2) * E * H);
    for (auto &v : suhExl3)
      v = roundTo(1, uni(rng) * ((rng() & 1) ? -1.0f : 1.0f));
  } else {
    guSuBlock.resize(size_t(2) * E * nBlk);
    downSvBlock.resize(size_t(E) * nBlk);
    for (auto &v : guSuBlock)
      v = roundTo(c.sv, uni(rng));
    for (auto &v : downSvBlock)
      v = roundTo(c.sv, uni(rng));
    for (auto &v : signsIn)
      v = (rng() & 1) ? -1.0f : 1.0f;
    for (auto &v : signsOut)
      v = (rng() & 1) ? -1.0f : 1.0f;
  }
  // Routing.
  const int B = c.batch;
  std::vector<int> ids(size_t(B) * kTopk);
  std::vector<float> routeW(size_t(B) * kTopk);
  for (int b = 0; b < B; ++b) {
    std::vector<int> perm(E);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int k = 0; k < kTopk; ++k) {
      ids[b * kTopk + k] = perm[k];
      routeW[b * kTopk + k] = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng);
    }
  }
  std::vector<float> x = randn(rng, size_t(B) * H);

  // Input-side vector of projection p of expert e, per hidden channel.
  auto suh = [&](int e, int p, int i) -> double {
    if (c.exl3)
      return suhExl3[(size_t(p) * E + e) * H + i];
    return double(signsIn[i]) * guSuBlock[(size_t(p) * E + e) * nBlk + i / 128];
  };
  // Rotated inputs. exlr8: one per row (shared by experts, block scale in the
  // kernel); EXL3: per (row, slot, projection).
  std::vector<float> xh;
  int xhRow, xhSlot, xhProj;
  if (c.exl3) {
    xhProj = H, xhSlot = 2 * H, xhRow = kTopk * 2 * H;
    xh.resize(size_t(B) * xhRow);
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < kTopk; ++k)
        for (int p = 0; p < 2; ++p) {
          std::vector<double> t(H);
          for (int i = 0; i < H; ++i)
            t[i] = double(x[size_t(b) * H + i]) * suh(ids[b * kTopk + k], p, i);
          hadamard128(t.data(), H);
          for (int i = 0; i < H; ++i)
            xh[size_t(b) * xhRow + k * xhSlot + p * xhProj + i] = float(t[i]);
        }
  } else {
    xhProj = 0, xhSlot = 0, xhRow = H;
    xh.resize(size_t(B) * H);
    for (int b = 0; b < B; ++b) {
      std::vector<double> t(H);
      for (int i = 0; i < H; ++i)
        t[i] = double(x[size_t(b) * H + i]) * signsIn[i];
      hadamard128(t.data(), H);
      for (int i = 0; i < H; ++i)
        xh[size_t(b) * H + i] = float(t[i]);
    }
  }

  // float64 reference: per (b, k, h) the partial the kernel must write, and
  // the final reduced output.
  std::vector<double> refPartial(size_t(B) * kTopk * kHalves * H, 0.0);
  std::vector<double> refOut(size_t(B) * H, 0.0);
  Err selfCheck;
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < kTopk; ++k) {
      const int e = ids[b * kTopk + k];
      const double w = routeW[b * kTopk + k];
      std::vector<double> xr[2];
      for (int p = 0; p < 2; ++p) {
        xr[p].resize(H);
        for (int i = 0; i < H; ++i)
          xr[p][i] = double(x[size_t(b) * H + i]) * suh(e, p, i);
        hadamard128(xr[p].data(), H);
      }
      for (int h = 0; h < kHalves; ++h) {
        if (!owned[e * kHalves + h])
          continue;
        std::vector<double> gu[2];
        for (int p = 0; p < 2; ++p) {
          const std::vector<float> &q = Q[e * 3 + p];
          gu[p].assign(128, 0.0);
          for (int i = 0; i < H; ++i) {
            const double xi = xr[p][i];
            const float *row = &q[size_t(i) * I + 128 * h];
            for (int j = 0; j < 128; ++j)
              gu[p][j] += xi * row[j];
          }
          hadamard128(gu[p].data(), 128);
          for (int j = 0; j < 128; ++j)
            gu[p][j] *= guSvh[(size_t(p) * E + e) * I + 128 * h + j];
        }
        if (c.selfCheck && b == 0 && k == 0) {
          // The same gate half through the codec's own reconstruction.
          std::vector<float> W(size_t(H) * 128), su(H), sv(128);
          const std::vector<float> &q = Q[e * 3 + 0];
          for (int i = 0; i < H; ++i) {
            std::copy_n(&q[size_t(i) * I + 128 * h], 128, &W[size_t(i) * 128]);
            su[i] = float(suh(e, 0, i));
          }
          for (int j = 0; j < 128; ++j)
            sv[j] = guSvh[size_t(e) * I + 128 * h + j];
          trellis::reconstructInPlace(W.data(), H, 128, su.data(), sv.data());
          for (int j = 0; j < 128; ++j) {
            double g = 0;
            for (int i = 0; i < H; ++i)
              g += double(x[i]) * W[size_t(i) * 128 + j];
            selfCheck.add(g, gu[0][j]);
          }
        }
        if (c.limit > 0)
          for (int j = 0; j < 128; ++j) {
            gu[0][j] = std::min(gu[0][j], c.limit);
            gu[1][j] = std::clamp(gu[1][j], -c.limit, c.limit);
          }
        std::vector<double> a(128);
        for (int j = 0; j < 128; ++j)
          a[j] = silu(gu[0][j]) * gu[1][j] * downSuh[size_t(e) * I + 128 * h + j];
        hadamard128(a.data(), 128);
        std::vector<double> z(H, 0.0);
        const std::vector<float> &qd = Q[e * 3 + 2];
        for (int r = 0; r < 128; ++r) {
          const float *row = &qd[size_t(128 * h + r) * H];
          for (int o = 0; o < H; ++o)
            z[o] += a[r] * row[o];
        }
        double *part =
            &refPartial[((size_t(b) * kTopk + k) * kHalves + h) * H];
        if (c.exl3) {
          hadamard128(z.data(), H);
          for (int o = 0; o < H; ++o)
            part[o] = z[o] * downSvh[size_t(e) * H + o] * w;
        } else {
          for (int o = 0; o < H; ++o)
            part[o] = z[o] * downSvBlock[size_t(e) * nBlk + o / 128] * w;
        }
        for (int o = 0; o < H; ++o)
          refOut[size_t(b) * H + o] += part[o];
      }
    }
  if (!c.exl3)
    for (int b = 0; b < B; ++b) {
      hadamard128(&refOut[size_t(b) * H], H);
      for (int o = 0; o < H; ++o)
        refOut[size_t(b) * H + o] *= signsOut[o];
    }
  if (c.selfCheck)
    report("expert_ref_selfcheck_codec_reconstruct", selfCheck, 1e-5,
           "fp32 reconstructInPlace vs float64 transform");

  // Device buffers.
  auto dBlob = upload(blob);
  std::vector<uint64_t> tiles(widths.size(), 0);
  for (int e = 0; e < E; ++e)
    for (int p = 0; p < 3; ++p)
      for (int h = 0; h < kHalves; ++h)
        if (owned[e * kHalves + h])
          tiles[(e * 3 + p) * kHalves + h] =
              dBlob.ptr() + halfOff[(e * 3 + p) * kHalves + h];
  auto dTiles = upload(tiles);
  auto dWidths = upload(widths);
  auto dXh = upload(xh);
  auto dIds = upload(ids);
  auto dW = upload(routeW);
  auto dGuSvh = upload(storeAs(c.sv, guSvh));
  auto dDownSuh = upload(storeAs(c.sv, downSuh));
  auto dGuSu = upload(storeAs(c.sv, guSuBlock));
  auto dDownSvB = upload(storeAs(c.sv, downSvBlock));
  auto dDownSvh = upload(storeAs(c.sv, downSvh));
  auto dPartial = poisoned<float>(size_t(B) * kTopk * kHalves * H);
  const int guSI = c.exl3 ? I / 16 : 8, guSI8 = c.exl3 ? I / 2 : 64;
  const int dSI = c.exl3 ? H / 16 : 8, dSJ8 = c.exl3 ? 8 : 64;
  Args a;
  a.ptr(dXh).ptr(dIds).ptr(dW).ptr(dTiles).ptr(dWidths).ptr(dGuSvh);
  if (c.exl3)
    a.null();
  else
    a.ptr(dGuSu);
  a.ptr(dDownSuh);
  if (c.exl3)
    a.null().ptr(dDownSvh);
  else
    a.ptr(dDownSvB).null();
  a.ptr(dPartial) << B << kTopk << H << I << xhRow << xhSlot << xhProj << guSI
                  << guSI8 << dSI << dSJ8 << float(c.limit);
  a.launch(kernel(expertSpec(c)), kHalves, E, unsigned(c.threads));

  auto partial = download<float>(dPartial, refPartial.size());
  Err ep;
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < kTopk; ++k)
      for (int h = 0; h < kHalves; ++h) {
        if (!owned[ids[b * kTopk + k] * kHalves + h])
          continue;
        size_t base = ((size_t(b) * kTopk + k) * kHalves + h) * H;
        for (int o = 0; o < H; ++o)
          ep.add(partial[base + o], refPartial[base + o]);
      }
  report(c.name + " partials", ep, 1e-4,
         "fp32 accumulation over hidden vs float64");

  // The twin's partials (runtime/twins/expert_gemv_trellis_twin.cpp): fp64
  // dot products rounded where the kernel stores them.
  std::vector<const unsigned char *> hTiles(tiles.size(), nullptr);
  for (size_t i = 0; i < tiles.size(); ++i)
    if (tiles[i])
      hTiles[i] = blob.data() + (tiles[i] - dBlob.ptr());
  {
    const std::vector<uint8_t> hGuSvh = storeAs(c.sv, guSvh),
                               hDSuh = storeAs(c.sv, downSuh),
                               hGuSu = storeAs(c.sv, guSuBlock),
                               hDSvB = storeAs(c.sv, downSvBlock),
                               hDSvh = storeAs(c.sv, downSvh);
    std::vector<float> tPartial(partial.size(), NAN);
    runTwin(expertSpec(c), kHalves, unsigned(E), unsigned(c.threads), 0,
            {hp(xh.data()),
             hp(ids.data()),
             hp(routeW.data()),
             hp(hTiles.data()),
             hp(widths.data()),
             hp(hGuSvh.data()),
             hp(c.exl3 ? nullptr : hGuSu.data()),
             hp(hDSuh.data()),
             hp(c.exl3 ? nullptr : hDSvB.data()),
             hp(c.exl3 ? hDSvh.data() : nullptr),
             hp(tPartial.data()),
             hi(B),
             hi(kTopk),
             hi(H),
             hi(I),
             hi(xhRow),
             hi(xhSlot),
             hi(xhProj),
             hi(guSI),
             hi(guSI8),
             hi(dSI),
             hi(dSJ8),
             hf(c.limit)});
    Err et;
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < kTopk; ++k)
        for (int h = 0; h < kHalves; ++h) {
          if (!owned[ids[b * kTopk + k] * kHalves + h])
            continue;
          const size_t base = ((size_t(b) * kTopk + k) * kHalves + h) * H;
          for (int o = 0; o < H; ++o)
            et.add(partial[base + o], tPartial[base + o]);
        }
    report(c.name + " partials_vs_twin", et, 2e-5,
           "fp32 per-lane sums vs the twin's fp64 dot products");
  }

  // Reduction (+ exlr8's H · signs.out) on the device.
  auto dOut = poisoned<float>(size_t(B) * H);
  Args r;
  r.ptr(dPartial).ptr(dIds).ptr(dTiles).ptr(dOut) << B << kTopk << H << 0;
  r.launch(kernel(reduceSpec()), (H + 255) / 256, B, 256);
  // moe_reduce's twin on the kernel's own partials: the same fp32 adds in
  // the same order, bit for bit.
  const std::vector<float> reduced = download<float>(dOut, size_t(B) * H);
  std::vector<float> tReduced(reduced.size(), NAN);
  runTwin(reduceSpec(), (H + 255) / 256, unsigned(B), 256, 0,
          {hp(partial.data()), hp(ids.data()), hp(hTiles.data()),
           hp(tReduced.data()), hi(B), hi(kTopk), hi(H), hi(0)});
  report(c.name + " moe_reduce_vs_twin", vsTwin(reduced, tReduced), 0.0,
         "fixed-order fp32 sums");
  if (!c.exl3) {
    auto dSigns = upload(signsOut);
    Args hd;
    hd.ptr(dOut).null().ptr(dSigns).ptr(dOut) << B << H << 0 << 0;
    hd.launch(kernel(hadamardSpec()), (B * H / 128 + 7) / 8, 1, 256);
  }
  auto out = download<float>(dOut, refOut.size());
  if (!c.exl3) {
    // hadamard128's twin on the kernel's own input.
    std::vector<float> tOut(reduced.size(), NAN);
    runTwin(hadamardSpec(), unsigned((B * H / 128 + 7) / 8), 1, 256, 0,
            {hp(reduced.data()), hp(nullptr), hp(signsOut.data()),
             hp(tOut.data()), hi(B), hi(H), hi(0), hi(0)});
    report(c.name + " hadamard128_vs_twin", vsTwin(out, tOut), 1e-6,
           "fp32 butterfly in warp order");
  }
  Err eo;
  for (size_t i = 0; i < out.size(); ++i)
    eo.add(out[i], refOut[i]);
  report(c.name + " reduced", eo, 1e-4,
         "fp32 accumulation over hidden vs float64");
}

INSTANTIATE_TEST_SUITE_P(Cases, ExpertGemvGpu, ::testing::ValuesIn(cases()),
                         [](const auto &info) { return info.param.name; });

} // namespace
