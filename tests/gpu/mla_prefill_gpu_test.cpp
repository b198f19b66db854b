//===- mla_prefill_gpu_test.cpp - prefill attention on tensor cores -------===//
//
// mla_prefill (a block per query row and 16..64 heads, mma.sync over fp16
// q, keys and probabilities) against its twin (runtime/twins/
// twin_mla_prefill.cpp: the same fp16 roundings, exact products summed in
// fp64): the scores left in pAll within 1e-5 of max|twin| (fp32 mma sums),
// ctx within 1e-4 (fp32 sums, and the rare probability whose fp16 rounding
// flips between the device's expf and the host's: one flip moves ctx by at
// most 2^-11 of that key's weight). GLM-5.3's shape (64 heads, kvr 512 +
// rope 64) with up to 2048 selected keys in f32 / bf16 / e4m3 caches, a
// rank's 8 heads, 40 heads (a block of 64 with 24 idle rows), the tiny
// models' shapes, and magnitudes past fp16's range (1e5 / 1e6: the rows'
// power-of-two scales); heads outside the table keep their rows.
//
//===----------------------------------------------------------------------===//
#include "codegen/mla_prefill_abi.h"
#include "gpu_twin_util.h"
#include "runtime/twins/kv_rows.h"

#include <algorithm>
#include <chrono>
#include <numeric>

using namespace glm::gputest;
namespace cg = glm::codegen;

namespace {

struct PrefillCase {
  std::string name;
  int H, hb, he, dn, dr, kvr;
  std::vector<int> nsel;
  int kv = 0; // 0 f32, 1 bf16, 2 e4m3
  float qMag = 1.0f, kMag = 1.0f; // magnitudes of q and of the cache rows
  // The keys through mla_rows16 (one slot, as a prefill chunk has): its
  // fp16 rows bit for bit against its twin's, then mla_prefill<keys =
  // rows16> against the cache path's twin (the same bits on the CPU).
  bool rows16 = false;
  // > 0: the cache in shuffled pages of 2^pageShift rows (kv::SlotRows,
  // glmc compile --kv-page-tokens), device and twin alike.
  int pageShift = 0;
};

class MlaPrefillGpu : public ::testing::TestWithParam<PrefillCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(MlaPrefillGpu, MatchesTwin) {
  const PrefillCase c = GetParam();
  std::mt19937 rng(std::hash<std::string>()(c.name) & 0xFFFFFFF);
  const int B = int(c.nsel.size()), lat = c.kvr + c.dr, slots = 2;
  const int maxCtx = std::max(2048, *std::max_element(c.nsel.begin(),
                                                      c.nsel.end()));
  const std::vector<float> q =
      randn(rng, size_t(B) * c.H * (c.dn + c.dr), c.qMag);
  const std::vector<float> qabs = randn(rng, size_t(B) * c.H * c.kvr, c.qMag);
  std::vector<uint8_t> cache(size_t(slots) * maxCtx *
                             glm::rt::twins::kvRowBytes(c.kv, lat));
  for (int r = 0; r < slots * maxCtx; ++r) {
    const std::vector<float> row = randn(rng, size_t(lat), c.kMag);
    glm::rt::twins::kvWriteRow(cache.data(), c.kv, r, row.data(), lat);
  }
  std::vector<int> pages;
  if (c.pageShift) {
    const int P = 1 << c.pageShift, per = maxCtx / P, n = slots * per + 5;
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    pages.assign(order.begin(), order.begin() + slots * per);
    const size_t rb = size_t(glm::rt::twins::kvRowBytes(c.kv, lat));
    std::vector<uint8_t> pool(size_t(n) * P * rb, 0xAB);
    for (int sl = 0; sl < slots; ++sl)
      for (int t = 0; t < maxCtx; ++t)
        std::memcpy(pool.data() +
                        (size_t(pages[sl * per + t / P]) * P + t % P) * rb,
                    cache.data() + (size_t(sl) * maxCtx + t) * rb, rb);
    cache = std::move(pool);
  }
  const int *pagesHost = pages.empty() ? nullptr : pages.data();
  std::vector<int> seq, nsel, sel(size_t(B) * maxCtx, 0), heads;
  for (int b = 0; b < B; ++b) {
    seq.push_back(c.rows16 ? 1 : b % slots);
    nsel.push_back(c.nsel[b]);
    std::vector<int> ids(maxCtx);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::copy(ids.begin(), ids.begin() + c.nsel[b], sel.begin() + b * maxCtx);
  }
  for (int h = c.hb; h < c.he; ++h)
    heads.push_back(h);
  const int nh = int(heads.size()), threads = cg::mlaPrefillThreads(nh);
  const unsigned gx = cg::mlaPrefillGridX(nh, threads),
                 smem = unsigned(cg::mlaPrefillSmem(threads, c.kvr, c.dr));
  glm::codegen::KeyValues targs = {{"vt", std::to_string(c.kvr / 16)},
                                   {"threads", std::to_string(threads)}};
  if (c.kv)
    targs["kv"] = c.kv == 1 ? "bf16" : "e4m3";
  const KernelSpec s = spec("mla_prefill", targs);
  const double scale = 1.0 / std::sqrt(double(c.dn + c.dr));
  const size_t nCtx = size_t(B) * c.H * c.kvr, nP = size_t(B) * c.H * maxCtx;

  std::vector<float> ctx0(nCtx, -7.0f), p0(nP, 0.0f);
  auto dQ = upload(q), dQabs = upload(qabs), dCache = upload(cache),
       dSeq = upload(seq), dSel = upload(sel), dN = upload(nsel),
       dHeads = upload(heads), dP = upload(p0), dCtx = upload(ctx0),
       dPages = upload(pages.empty() ? std::vector<int>{0} : pages);
  auto pageArgs = [&](Args &x) {
    if (c.pageShift)
      x.ptr(dPages);
    else
      x.null();
    x << c.pageShift;
  };
  // rows16: the slot's rows 0 .. maxCtx - 1 converted on the device.
  const std::vector<int> pos(size_t(B), maxCtx - 1);
  const size_t r16Bytes = size_t(glm::rows16::bytes(maxCtx, c.kvr, c.dr));
  cuda::DeviceBuffer dRows16(c.rows16 ? r16Bytes : 16);
  if (c.rows16) {
    glm::codegen::KeyValues tr = {{"threads", "256"}};
    if (c.kv)
      tr["kv"] = c.kv == 1 ? "bf16" : "e4m3";
    const KernelSpec sr = spec("mla_rows16", tr);
    auto dPos = upload(pos);
    const unsigned grx = unsigned((maxCtx + glm::rows16::kRowsPerBlock - 1) /
                                  glm::rows16::kRowsPerBlock);
    Args ar;
    ar.ptr(dCache).ptr(dSeq).ptr(dPos) << B << maxCtx << c.kvr << c.dr;
    ar.ptr(dRows16);
    pageArgs(ar);
    ar.launch(kernel(sr), grx, 1, 256, 0);
    const std::vector<uint8_t> got = download<uint8_t>(dRows16, r16Bytes);
    std::vector<uint8_t> want(r16Bytes, 0);
    runTwin(sr, grx, 1, 256, 0,
            {hp(cache.data()), hp(seq.data()), hp(pos.data()), hi(B),
             hi(maxCtx), hi(c.kvr), hi(c.dr), hp(want.data()), hp(pagesHost),
             hi(c.pageShift)});
    size_t bad = 0;
    for (size_t i = 0; i < r16Bytes; ++i)
      bad += got[i] != want[i];
    reportExact("mla_rows16 " + c.name + " bytes", bad, r16Bytes);
  }
  glm::codegen::KeyValues t16 = targs;
  t16.erase("kv");
  t16["keys"] = "rows16";
  Args a;
  a.ptr(dQ).ptr(dQabs);
  if (c.rows16)
    a.ptr(dRows16);
  else
    a.ptr(dCache);
  a.ptr(dSeq).ptr(dSel).ptr(dN).ptr(dP) << maxCtx;
  a.ptr(dCtx).ptr(dHeads) << nh << c.H << c.dn << c.dr << c.kvr << scale << maxCtx;
  if (c.rows16)
    a.null() << 0; // rows16 holds the slot's rows: no pages
  else
    pageArgs(a);
  a.launch(kernel(c.rows16 ? spec("mla_prefill", t16) : s), gx, unsigned(B),
           unsigned(threads), smem);
  const std::vector<float> ctx = download<float>(dCtx, nCtx),
                           p = download<float>(dP, nP);

  std::vector<float> tctx = ctx0, tp = p0;
  runTwin(s, gx, unsigned(B), unsigned(threads), smem,
          {hp(q.data()), hp(qabs.data()), hp(cache.data()), hp(seq.data()),
           hp(sel.data()), hp(nsel.data()), hp(tp.data()), hi(maxCtx),
           hp(tctx.data()), hp(heads.data()), hi(nh), hi(c.H), hi(c.dn),
           hi(c.dr), hi(c.kvr), hf(scale), hi(maxCtx), hp(pagesHost),
           hi(c.pageShift)});
  Err ec, es;
  size_t untouched = 0, outside = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < c.H; ++h) {
      const bool mine = h >= c.hb && h < c.he;
      for (int k = 0; k < c.kvr; ++k) {
        const size_t i = (size_t(b) * c.H + h) * c.kvr + size_t(k);
        if (mine)
          ec.add(ctx[i], tctx[i]);
        else
          outside += 1, untouched += ctx[i] == -7.0f;
      }
      if (mine)
        for (int j = 0; j < nsel[b]; ++j) {
          const size_t i = (size_t(b) * c.H + h) * maxCtx + size_t(j);
          es.add(p[i], tp[i]);
        }
    }
  report("mla_prefill " + c.name + " scores", es, 1e-5,
         "fp32 mma sums of exact fp16 products");
  report("mla_prefill " + c.name + " ctx", ec, 1e-4,
         "fp32 sums; a rare fp16 flip of a probability");
  if (outside)
    reportExact("mla_prefill " + c.name + " other heads", outside - untouched,
                outside);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaPrefillGpu,
    ::testing::Values(
        PrefillCase{"glm53_64h", 64, 0, 64, 192, 64, 512, {1, 16, 37, 2048}},
        PrefillCase{"glm53_bf16", 64, 0, 64, 192, 64, 512, {300, 2048}, 1},
        PrefillCase{"glm53_e4m3", 64, 0, 64, 192, 64, 512, {129, 2048}, 2},
        PrefillCase{"glm53_rank_8h", 64, 8, 16, 192, 64, 512, {700, 2048}},
        PrefillCase{"glm53_40h", 64, 24, 64, 192, 64, 512, {1000}},
        PrefillCase{"tiny_a", 4, 0, 4, 16, 8, 32, {1, 2, 9, 40}},
        PrefillCase{"tiny_b", 6, 0, 6, 16, 16, 48, {5, 12, 31}},
        PrefillCase{"no_rope", 20, 0, 20, 32, 0, 64, {3, 64, 65}},
        // bf16 rows of 72 bytes (8-byte aligned only).
        PrefillCase{"tiny_bf16_8b", 4, 0, 4, 16, 4, 32, {3, 17, 40}, 1},
        // Past fp16's range: each row's power-of-two scale.
        PrefillCase{"huge_q", 64, 0, 64, 192, 64, 512, {40, 2048}, 0, 1e5f,
                    1e-5f},
        PrefillCase{"huge_keys", 64, 0, 64, 192, 64, 512, {300}, 2, 1e-6f,
                    1e6f},
        // A paged cache (shuffled pages of 64 / 128 rows).
        PrefillCase{"glm53_paged64", 64, 0, 64, 192, 64, 512, {1, 16, 37, 2048},
                    0, 1.0f, 1.0f, false, 6},
        PrefillCase{"glm53_e4m3_paged128", 64, 0, 64, 192, 64, 512,
                    {129, 2048}, 2, 1.0f, 1.0f, false, 7},
        PrefillCase{"glm53_bf16_rows16_paged64", 64, 0, 64, 192, 64, 512,
                    {700, 2048}, 1, 1.0f, 1.0f, true, 6},
        // Through mla_rows16.
        PrefillCase{"glm53_rows16", 64, 0, 64, 192, 64, 512, {1, 16, 37, 2048},
                    0, 1.0f, 1.0f, true},
        PrefillCase{"glm53_e4m3_rows16", 64, 0, 64, 192, 64, 512, {129, 2048},
                    2, 1.0f, 1.0f, true},
        PrefillCase{"glm53_bf16_rank_8h_rows16", 64, 8, 16, 192, 64, 512,
                    {700, 2048}, 1, 1.0f, 1.0f, true},
        PrefillCase{"tiny_a_rows16", 4, 0, 4, 16, 8, 32, {1, 2, 9, 40}, 0,
                    1.0f, 1.0f, true},
        PrefillCase{"no_rope_rows16", 20, 0, 20, 32, 0, 64, {3, 64, 65}, 0,
                    1.0f, 1.0f, true},
        PrefillCase{"huge_keys_rows16", 64, 0, 64, 192, 64, 512, {300}, 2,
                    1e-6f, 1e6f, true}),
    [](const auto &i) { return i.param.name; });

/// Not a check: the time of one launch at GLM-5.3's shape (64 heads, kvr
/// 512 + rope 64, 2048 selected keys a row, 2 x 132 rows) per cache form,
/// with the rate of the gathered rows (each read twice: scores, values)
/// and of the MMA FLOPs, so a change of the kernel shows whether it moved
/// the bytes or the arithmetic.
class MlaPrefillGpuBench : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_F(MlaPrefillGpuBench, GlmShapeByCacheForm) {
  const int H = 64, dn = 192, dr = 64, kvr = 512, lat = kvr + dr, B = 264,
            nsel = 2048, maxCtx = 2048, threads = cg::mlaPrefillThreads(H);
  std::mt19937 rng(5);
  const std::vector<float> q = randn(rng, size_t(B) * H * (dn + dr));
  const std::vector<float> qabs = randn(rng, size_t(B) * H * kvr);
  std::vector<int> seq(B, 0), nselv(B, nsel), sel(size_t(B) * maxCtx),
      heads(H);
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < maxCtx; ++j)
      sel[size_t(b) * maxCtx + j] = (j * 7 + b) % maxCtx;
  std::iota(heads.begin(), heads.end(), 0);
  auto dQ = upload(q), dQabs = upload(qabs), dSeq = upload(seq),
       dSel = upload(sel), dN = upload(nselv), dHeads = upload(heads);
  cuda::DeviceBuffer dP(size_t(B) * H * maxCtx * 4),
      dCtx(size_t(B) * H * kvr * 4);
  for (int kvForm = 0; kvForm < 3; ++kvForm) {
    std::vector<uint8_t> cache(size_t(maxCtx) *
                               glm::rt::twins::kvRowBytes(kvForm, lat));
    for (int r = 0; r < maxCtx; ++r) {
      const std::vector<float> row = randn(rng, size_t(lat));
      glm::rt::twins::kvWriteRow(cache.data(), kvForm, r, row.data(), lat);
    }
    auto dCache = upload(cache);
    glm::codegen::KeyValues targs = {{"vt", std::to_string(kvr / 16)},
                                     {"threads", std::to_string(threads)}};
    if (kvForm)
      targs["kv"] = kvForm == 1 ? "bf16" : "e4m3";
    const KernelSpec s = spec("mla_prefill", targs);
    Args a;
    a.ptr(dQ).ptr(dQabs).ptr(dCache).ptr(dSeq).ptr(dSel).ptr(dN).ptr(dP)
        << maxCtx;
    a.ptr(dCtx).ptr(dHeads) << H << H << dn << dr << kvr
                            << 1.0 / std::sqrt(double(dn + dr)) << maxCtx;
    a.null() << 0; // unpaged
    const unsigned gx = cg::mlaPrefillGridX(H, threads),
                   smem = unsigned(cg::mlaPrefillSmem(threads, kvr, dr));
    a.launch(kernel(s), gx, unsigned(B), unsigned(threads), smem); // warm
    std::vector<double> ms;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      a.launch(kernel(s), gx, unsigned(B), unsigned(threads), smem);
      ms.push_back(std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - t0)
                       .count());
    }
    std::sort(ms.begin(), ms.end());
    const double t = ms[ms.size() / 2] * 1e-3;
    const double bytes = double(B) * nsel * 2.0 *
                         double(glm::rt::twins::kvRowBytes(kvForm, lat));
    const double flops = double(B) * nsel * H * 2.0 * (lat + kvr);
    std::printf("[gpu-bench] mla_prefill %s 64 heads x %d rows x %d keys: "
                "%.3f ms, rows gathered %.2f TB/s, %.1f TFLOP/s\n",
                kvForm == 0 ? "f32" : kvForm == 1 ? "bf16" : "e4m3", B, nsel,
                t * 1e3, bytes / t * 1e-12, flops / t * 1e-12);

    // The same through mla_rows16 (the slot's 2048 rows once, then the
    // attention on fp16 rows): each timed alone.
    const size_t r16Bytes = size_t(glm::rows16::bytes(maxCtx, kvr, dr));
    cuda::DeviceBuffer dRows16(r16Bytes);
    const std::vector<int> pos(size_t(B), maxCtx - 1);
    auto dPos = upload(pos);
    glm::codegen::KeyValues tr = {{"threads", "256"}};
    if (kvForm)
      tr["kv"] = targs["kv"];
    Args ar;
    ar.ptr(dCache).ptr(dSeq).ptr(dPos) << B << maxCtx << kvr << dr;
    ar.ptr(dRows16);
    ar.null() << 0; // unpaged
    const unsigned grx = unsigned(maxCtx / glm::rows16::kRowsPerBlock);
    glm::codegen::KeyValues t16 = targs;
    t16.erase("kv");
    t16["keys"] = "rows16";
    Args a16;
    a16.ptr(dQ).ptr(dQabs).ptr(dRows16).ptr(dSeq).ptr(dSel).ptr(dN).ptr(dP)
        << maxCtx;
    a16.ptr(dCtx).ptr(dHeads) << H << H << dn << dr << kvr
                              << 1.0 / std::sqrt(double(dn + dr)) << maxCtx;
    a16.null() << 0;
    // Seconds a launch.
    auto timed = [&](auto &&once) { return medianMs(once) * 1e-3; };
    const double tc = timed([&] {
      ar.launch(kernel(spec("mla_rows16", tr)), grx, 1, 256, 0);
    });
    const double ta = timed([&] {
      a16.launch(kernel(spec("mla_prefill", t16)), gx, unsigned(B),
                 unsigned(threads), smem);
    });
    std::printf("[gpu-bench] mla_prefill %s via rows16: mla_rows16 %.3f ms + "
                "attention %.3f ms (%.1f TFLOP/s), %.2fx the cache path\n",
                kvForm == 0 ? "f32" : kvForm == 1 ? "bf16" : "e4m3", tc * 1e3,
                ta * 1e3, flops / ta * 1e-12, t / (tc + ta));
    // Fewer heads a block (more blocks a row, each gathering the row's keys
    // again): more independent blocks an SM to hide the per-tile barriers
    // and gathers.
    if (kvForm != 0)
      continue;
    for (const int th : {128, 64}) {
      glm::codegen::KeyValues tt = t16;
      tt["threads"] = std::to_string(th);
      const double tb = timed([&] {
        a16.launch(kernel(spec("mla_prefill", tt)), cg::mlaPrefillGridX(H, th),
                   unsigned(B), unsigned(th),
                   unsigned(cg::mlaPrefillSmem(th, kvr, dr)));
      });
      std::printf("[gpu-bench] mla_prefill rows16, %d heads a block (%d "
                  "threads): attention %.3f ms (%.1f TFLOP/s)\n",
                  int(cg::mlaPrefillHeadsPerBlock(th)), th, tb * 1e3,
                  flops / tb * 1e-12);
    }
  }
}

} // namespace
