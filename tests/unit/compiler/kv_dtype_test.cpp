//===- kv_dtype_test.cpp - plans whose KV cache is bf16 or fp8 ------------===//
//
// glmc compile --kv-dtype f32 | bf16 | fp8 (templates/kv_cache.cuh): the
// same tiny packs compiled three ways and run on the CPU backend.
//  - The latent and index-key caches are sized by the form's row: a bf16
//    buffer is half the f32 one, an fp8 one a quarter plus 4 bytes (the
//    row's fp32 scale) per row; the k-pool ring and the KDA state stay
//    fp32. The plan's model.kv_dtype and compile_options say which.
//  - Decode token by token and prefill chunks (one 16-token chunk; 8 + 4)
//    give logits within a stated tolerance of the f32 plan's (max |Δ| ÷
//    max |logit| per position), and a prefill chunk gives the bits of the
//    same plan token by token where the f32 plan does (hf: the same
//    kernels over the rows) or within its tolerance (exlr8's tensor-core
//    GEMMs).
//  - The plan checker refuses a cache buffer of another form than its
//    kernels'.
// Measured against the f32 plan (12-token prompt + 1 step, worst position):
// tiny hf bf16 3.1e-3, fp8 3.2e-2; tiny exlr8 bf16 2.6e-3, fp8 4.6e-2;
// GLM-5.3-Flash golden glm_flash_a bf16 7.6e-4, fp8 1.5e-2. Held to 1e-2
// (bf16) and 1e-1 (fp8): tiny random models attend over few, similar rows,
// so the cache's rounding reaches the logits nearly undamped.
//
//===----------------------------------------------------------------------===//
#include "plan_test_util.h"

#include "plans/plan.h"
#include "runtime/base/error.h"
#include "runtime/exec/launch_bounds.h"
#include "runtime/exec/plan_executor.h"
#include "runtime/formats/pack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace fs = std::filesystem;
using namespace glm::rt;
using plan_test::compilePlan;
using plan_test::cpuExecutor;
using plan_test::tinyPack;
namespace gp = glm::plan;

namespace {

const char *kGoldens = GLM_TEST_DATA_DIR "/../oracle/goldens";

/// Worst per-row relative error (max |Δ| ÷ max |want|) of [rows, V].
double worstRelative(const std::vector<float> &want,
                     const std::vector<float> &got, int64_t V) {
  EXPECT_EQ(want.size(), got.size());
  double worst = 0;
  for (size_t r = 0; r * V < want.size() && r * V < got.size(); ++r) {
    double maxAbs = 0, maxDiff = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double w = want[r * V + v], g = got[r * V + v];
      maxAbs = std::max(maxAbs, std::fabs(w));
      maxDiff = std::max(maxDiff, std::fabs(w - g));
    }
    worst = std::max(worst, maxDiff / std::max(maxAbs, 1e-30));
  }
  return worst;
}

/// The cache buffers of rank 0 by name (kv.L, index_keys.L, kpool_ring.L,
/// kda_*.L).
std::map<std::string, gp::BufferDef> caches(const gp::Plan &p) {
  std::map<std::string, gp::BufferDef> m;
  for (const gp::BufferDef &b : p.ranks.at(0).buffers)
    if (b.kind == gp::BufferKind::KvCache)
      m[b.name] = b;
  return m;
}

/// Latent rows and index keys in the form's row size; the rest as f32's.
void expectCacheSizes(const gp::Plan &f32, const gp::Plan &p,
                      const std::string &dtype, int64_t ctx) {
  const auto a = caches(f32), b = caches(p);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  uint64_t bytesF32 = 0, bytes = 0;
  for (const auto &[name, fb] : a) {
    const gp::BufferDef &bb = b.at(name);
    const bool rows =
        name.rfind("kv.", 0) == 0 || name.rfind("index_keys.", 0) == 0;
    if (!rows) {
      EXPECT_EQ(bb.bytes, fb.bytes) << name << " stays fp32";
      EXPECT_EQ(bb.dtype, gp::DType::F32) << name;
      continue;
    }
    EXPECT_EQ(fb.dtype, gp::DType::F32) << name;
    // f32 rows: 4n bytes each, ctx rows (a k-pool: ctx / P), one slot; the
    // buffer a multiple of 256 already (ctx = 256).
    const uint64_t rowsN = fb.bytes / 4; // rows × n
    if (dtype == "bf16") {
      EXPECT_EQ(bb.dtype, gp::DType::BF16) << name;
      EXPECT_EQ(bb.bytes, fb.bytes / 2) << name;
    } else {
      EXPECT_EQ(bb.dtype, gp::DType::E4M3) << name;
      // rows × (n + 4), rounded up to 256: rows = ctx or ctx / P.
      const uint64_t lo = rowsN + 4 * uint64_t(ctx) / 8,
                     hi = rowsN + 4 * uint64_t(ctx) + 256;
      EXPECT_GE(bb.bytes, lo) << name;
      EXPECT_LE(bb.bytes, hi) << name;
      EXPECT_LT(bb.bytes * 3, fb.bytes) << name << ": about a quarter";
    }
    bytesF32 += fb.bytes;
    bytes += bb.bytes;
  }
  std::printf("[ kv-dtype ] %s: latent + index-key caches %llu bytes "
              "(f32 %llu, ratio %.3f)\n",
              dtype.c_str(), (unsigned long long)bytes,
              (unsigned long long)bytesF32, double(bytes) / double(bytesF32));
  EXPECT_EQ(p.model.kvDtype,
            dtype == "bf16" ? gp::DType::BF16 : gp::DType::E4M3);
  EXPECT_EQ(p.compileOptions.at("kv_dtype"), dtype);
}

struct Logits {
  std::vector<float> tokens, next; // token by token (12 rows), the step after
  std::vector<float> chunk16, next16, chunks84, next84;
};

/// The 12-token prompt token by token, then as one 16-token chunk and as
/// chunks of 8 and 4, each followed by one decode step.
Logits runPlan(std::shared_ptr<gp::Plan> plan, const std::string &dir,
               bool prefill) {
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3, 11, 4, 6, 8, 10, 12};
  Logits L;
  auto t = cpuExecutor(plan, dir);
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::vector<float> l = t->step({prompt[i]}, {int32_t(i)}, {0});
    L.tokens.insert(L.tokens.end(), l.begin(), l.end());
  }
  L.next = t->step({13}, {12}, {0});
  if (!prefill)
    return L;
  auto one = cpuExecutor(plan, dir);
  L.chunk16 = one->prefill(prompt, 0, 0);
  L.next16 = one->step({13}, {12}, {0});
  auto two = cpuExecutor(plan, dir);
  L.chunks84 = two->prefill({prompt.begin(), prompt.begin() + 8}, 0, 0);
  const std::vector<float> rest =
      two->prefill({prompt.begin() + 8, prompt.end()}, 8, 0);
  L.chunks84.insert(L.chunks84.end(), rest.begin(), rest.end());
  L.next84 = two->step({13}, {12}, {0});
  return L;
}

/// Every logits row of `got` within `tol` of `want`'s; returns the worst.
double compare(const Logits &want, const Logits &got, int64_t V, double tol,
               const std::string &what, bool prefill) {
  std::vector<std::pair<const char *, double>> e = {
      {"token by token", worstRelative(want.tokens, got.tokens, V)},
      {"step after", worstRelative(want.next, got.next, V)}};
  if (prefill) {
    e.push_back(
        {"16-token chunk", worstRelative(want.chunk16, got.chunk16, V)});
    e.push_back({"step after it", worstRelative(want.next16, got.next16, V)});
    e.push_back(
        {"chunks of 8, 4", worstRelative(want.chunks84, got.chunks84, V)});
    e.push_back({"step after them", worstRelative(want.next84, got.next84, V)});
  }
  double worst = 0;
  for (auto &[name, v] : e) {
    std::printf("[ kv-dtype ] %s, %s: worst relative %.2e\n", what.c_str(),
                name, v);
    EXPECT_LE(v, tol) << what << ", " << name;
    worst = std::max(worst, v);
  }
  return worst;
}

/// Tolerances against the f32 plan (measured at most 3.1e-3 and 4.6e-2).
double tolOf(const std::string &dtype) { return dtype == "bf16" ? 1e-2 : 1e-1; }

void checkDtypes(const std::string &dir, const std::string &manifest,
                 double prefillTol, bool prefill = true) {
  const std::string name = fs::path(dir).filename().string();
  PackOpenOptions po;
  po.manifest = manifest;
  const int64_t V = Pack::open(dir, po)->config()->vocabSize;
  const std::vector<int64_t> chunks =
      prefill ? std::vector<int64_t>{8, 16} : std::vector<int64_t>{0};
  auto f32 = compilePlan(dir, 1, manifest, {1}, "", chunks, 1, false, "f32");
  EXPECT_EQ(f32->model.kvDtype, gp::DType::F32);
  const Logits want = runPlan(f32, dir, prefill);
  if (prefill) // the f32 plan's own prefill against its token by token
    EXPECT_LE(worstRelative(want.tokens, want.chunk16, V), prefillTol);
  for (const std::string dtype : {"bf16", "fp8"}) {
    auto p = compilePlan(dir, 1, manifest, {1}, "", chunks, 1, false, dtype);
    expectCacheSizes(*f32, *p, dtype, p->model.maxContext);
    const Logits got = runPlan(p, dir, prefill);
    compare(want, got, V, tolOf(dtype), name + " " + dtype, prefill);
    if (prefill) {
      // Its prefill against its own token by token: where a chunk's row
      // differs from the token's in the last bits (the tensor-core GEMMs and
      // attention, ~3e-4), a cached value may round to the neighbouring
      // bf16/E4M3 value: measured 1.0e-3 (bf16), 3.4e-3 (fp8), held to half
      // the tolerance against f32.
      const double self = worstRelative(got.tokens, got.chunk16, V);
      std::printf("[ kv-dtype ] %s %s, 16-token chunk vs its token by token: "
                  "%.2e\n",
                  name.c_str(), dtype.c_str(), self);
      EXPECT_LE(self, prefillTol == 0 ? 0.0 : tolOf(dtype) / 2)
          << name << " " << dtype;
    }
  }
}

} // namespace

/// hf's prefill differs from its token by token only in the attention's
/// fp16 tensor-core inputs (mla_prefill): 3.3e-4 of the logits.
TEST(KvDtype, TinyHfRunsAtBf16AndFp8) {
  checkDtypes(tinyPack("hf"), "", 1e-3);
}

TEST(KvDtype, TinyExlr8RunsAtBf16AndFp8) {
  checkDtypes(tinyPack("exlr8"), "mixed", 1e-3);
}

/// GLM-5.3-Flash: the NoPE latent (kv_store with no rope part, mla_core)
/// and the k-pool's pooled keys (kpool_store, indexer_scores_ctx pool 4);
/// its KDA state and the pool ring stay fp32. Prefill chunks of 4 and 8.
TEST(KvDtype, FlashRunsAtBf16AndFp8) {
  const std::string dir = std::string(kGoldens) + "/glm_flash_a";
  const int64_t V = Pack::open(dir)->config()->vocabSize;
  auto f32 = compilePlan(dir, 1, "", {1}, "", {4, 8});
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3, 11, 4, 6, 8, 10, 12};
  auto run = [&](std::shared_ptr<gp::Plan> p, bool chunked) {
    auto e = cpuExecutor(p, dir);
    std::vector<float> out;
    if (chunked) {
      for (size_t at = 0; at < prompt.size(); at += 4) {
        const std::vector<float> l = e->prefill(
            {prompt.begin() + at, prompt.begin() + at + 4}, int32_t(at), 0);
        out.insert(out.end(), l.begin(), l.end());
      }
    } else {
      for (size_t i = 0; i < prompt.size(); ++i) {
        const std::vector<float> l = e->step({prompt[i]}, {int32_t(i)}, {0});
        out.insert(out.end(), l.begin(), l.end());
      }
    }
    const std::vector<float> l = e->step({13}, {12}, {0});
    out.insert(out.end(), l.begin(), l.end());
    return out;
  };
  const std::vector<float> want = run(f32, false);
  for (const std::string dtype : {"bf16", "fp8"}) {
    auto p = compilePlan(dir, 1, "", {1}, "", {4, 8}, 1, false, dtype);
    expectCacheSizes(*f32, *p, dtype, p->model.maxContext);
    const double tokens = worstRelative(want, run(p, false), V),
                 chunks = worstRelative(want, run(p, true), V);
    std::printf("[ kv-dtype ] glm_flash_a %s: token by token %.2e, chunks "
                "of 4 %.2e (relative to the f32 plan)\n",
                dtype.c_str(), tokens, chunks);
    EXPECT_LE(tokens, tolOf(dtype));
    EXPECT_LE(chunks, tolOf(dtype));
  }
}

/// A cache buffer of another form than its kernels' (a plan edited, or
/// put together from two compiles) is refused before anything runs.
TEST(KvDtype, PlanCheckerRefusesACacheOfAnotherForm) {
  const std::string dir = tinyPack("hf");
  auto p = compilePlan(dir, 1, "", {1}, "", {0}, 1, false, "bf16");
  EXPECT_NO_THROW(exec::checkLaunchBounds(*p));
  for (gp::BufferDef &b : p->ranks[0].buffers)
    if (b.name.rfind("kv.", 0) == 0) {
      b.dtype = gp::DType::F32;
      break;
    }
  try {
    exec::checkLaunchBounds(*p);
    ADD_FAILURE() << "a bf16 cache kernel on an F32 buffer was accepted";
  } catch (const Error &e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("stores as bf16"), std::string::npos) << m;
    EXPECT_NE(m.find("--kv-dtype"), std::string::npos) << m;
  }
  // An f32 kernel on the half-size bf16 cache: its rows pass the buffer.
  auto q = compilePlan(dir, 1, "", {1}, "", {0}, 1, false, "bf16");
  for (gp::KernelDef &k : q->kernels)
    k.templateArgs.erase("kv");
  EXPECT_THROW(exec::checkLaunchBounds(*q), Error);
}
