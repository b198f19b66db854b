//===- EmitKernels.cpp - glm-emit-kernels: one kernel per distinct op -----===//
//
// Maps every kernel-level op to the codegen families that run it (template
// family + compile-time arguments; layer numbers and weight symbols are
// runtime arguments, so 78 identical layers share their kernels), dedups
// the specs, tags each op with its kernel names (`glm.kernels`) and records
// the distinct kernels on the module (`glm.kernel_specs`). With `compile`,
// codegen turns each into CUDA C++ and NVRTC compiles it for every arch;
// sources, PTX and CUBIN travel in the module to glm-emit-plan.
//
// Graph buckets: one decode graph per batch size (kernels with a BATCH
// template argument are instantiated for it) and one prefill graph per chunk
// size (the largest decode batch's kernels, launched once per group of
// tokens, or a prefill GEMM family where codegen has one). The buckets are
// recorded on the module (`glm.buckets`) and each op's kernels per bucket in
// `glm.bucket_kernels` (same order); `glm.kernels` is the first bucket's.
// Ops no GPU template can run (half-integer trellis widths, f16/int4 dense
// weights) get no kernels and one precise warning per cause: such plans run
// on the CPU executor only.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Bindings.h"
#include "compiler/mlir/KernelBuilds.h"
#include "compiler/mlir/Passes.h"
#include "compiler/mlir/Tuning.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

#include "codegen/dense_gemv_abi.h"
#include "codegen/dense_trellis_abi.h"
#include "codegen/mla_prefill_abi.h"
#include "codegen/moe_trellis_abi.h"
#include "codegen/templates/indexer_scores_mma.cuh"
#include "codegen/templates/kv_cache.cuh"
#include "codegen/templates/mla_split_layout.cuh"

#ifdef GLM_CODEGEN_AVAILABLE
#include "codegen/codegen.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/parallel.h"
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>

using namespace mlir;
using namespace mlir::glm;
using glmc::dtOf;
using glmc::skOf;

namespace glmc {
#define GEN_PASS_DEF_GLMEMITKERNELS
#include "compiler/mlir/Passes.h.inc"
} // namespace glmc

namespace {

/// A family and its compile-time arguments (codegen::KernelSpec minus archs).
struct Spec {
  std::string family;
  std::map<std::string, std::string> args;
  bool operator<(const Spec &o) const {
    return std::tie(family, args) < std::tie(o.family, o.args);
  }
};

/// The families whose last sum can be fixed point (codegen sumParam).
static bool takesSum(const std::string &family) {
  return family == "dense_gemv" || family == "dense_trellis" ||
         family == "gemv_any" || family == "moe_trellis" ||
         family == "reduce_units";
}

/// True when `op`'s one result is reduced across ranks by a glm.all_reduce.
static bool feedsAllReduce(Operation *op) {
  return op->getNumResults() == 1 &&
         llvm::any_of(op->getResult(0).getUsers(),
                      [](Operation *u) { return isa<AllReduceOp>(u); });
}

/// The largest BATCH the GEMV templates take (static_assert in them).
constexpr int64_t kMaxTemplateBatch = 8;

static std::string str(int64_t v) { return std::to_string(v); }

/// One graph bucket: a decode batch or a prefill chunk, and the BATCH its
/// GEMV kernels are instantiated for.
struct Bucket {
  bool prefill = false;
  int64_t size = 1;  // decode: sequences; prefill: tokens
  int64_t batch = 1; // template BATCH of its GEMV kernels
};

/// Why an op gets no GPU kernel; empty = it does.
struct NoKernel {
  std::string reason;
};

/// codegen's codebook names.
static std::string cbName(Codebook cb) {
  switch (cb) {
  case Codebook::ThreeInst:
    return "3inst";
  case Codebook::Mcg:
    return "mcg";
  case Codebook::Mul1:
    return "mul1";
  }
  return "mcg";
}

/// codegen's storage dtype of a vector weight (norm weights, keys).
static std::string storage(Type t) {
  if (auto d = dyn_cast_or_null<DenseType>(t)) {
    if (d.getFormat() == DenseFormat::F32)
      return "f32";
    if (d.getFormat() == DenseFormat::F16)
      return "f16";
  }
  return "bf16";
}

/// Context the specs need: weight types, the KV dtype, the pack layout and
/// the largest decode batch (whether moe_trellis runs a MoE layer).
struct SpecContext {
  SymbolTable &symbols;
  std::string kvDtype; // "f32" | "bf16" | "fp8"
  std::string layout = "exlr8";
  int64_t maxDecode = 1;
  glmc::Tunings tunings; // the compile's launch tunings (Tuning.h)
  Type typeOf(StringRef sym) {
    if (auto w = symbols.lookup<WeightOp>(sym))
      return w.getType();
    return {};
  }
  /// Inputs of a linear weight (its HF shape [out, in]); 0 when unknown.
  int64_t inputsOf(StringRef sym) {
    if (auto w = symbols.lookup<WeightOp>(sym))
      if (w.getShape().size() == 2)
        return w.getShape()[1];
    return 0;
  }
  /// Outputs of a linear weight; 0 when unknown.
  int64_t outputsOf(StringRef sym) {
    if (auto w = symbols.lookup<WeightOp>(sym))
      if (w.getShape().size() == 2)
        return w.getShape()[0];
    return 0;
  }
};

/// True when codegen knows `family` (a family another change may add).
static bool haveFamily(const std::string &family) {
#ifdef GLM_CODEGEN_AVAILABLE
  for (const ::glm::codegen::FamilyInfo &f : ::glm::codegen::families())
    if (f.family == family)
      return true;
#else
  (void)family;
#endif
  return false;
}

static std::string widthText(int32_t twice) {
  return twice % 2 ? str(twice / 2) + ".5" : str(twice / 2);
}

/// Whether codegen's gemm_dense instantiates `format` (dense_gemv's names).
static bool gemmDenseTakes(const std::string &format) {
#ifdef GLM_CODEGEN_AVAILABLE
  for (const ::glm::codegen::FamilyInfo &f : ::glm::codegen::families())
    if (f.family == "gemm_dense")
      for (const auto &p : f.params)
        if (p.name == "format")
          return std::find(p.allowed.begin(), p.allowed.end(), format) !=
                 p.allowed.end();
#else
  (void)format;
#endif
  return false;
}

/// The GEMV (or prefill GEMM) of one weight format with `in` inputs (0:
/// unknown) for `b`; fails with the reason when no template decodes the
/// format.
static FailureOr<Spec> gemvSpec(Type format, int64_t in, int64_t outputs,
                                const Bucket &b, const glmc::Tunings &tunings,
                                NoKernel &why) {
  if (auto t = dyn_cast<TrellisType>(format)) {
    if (!t.isResolved() || t.getTwiceBits() % 2) {
      why.reason = "trellis width " +
                   (t.isResolved() ? widthText(t.getTwiceBits())
                                   : std::string("unresolved")) +
                   " has no GPU kernel: dense_gemv_trellis and gemm_trellis "
                   "decode integer widths 1..8 only";
      return failure();
    }
    std::string k = str(t.getTwiceBits() / 2);
    // Prefill on tensor cores when codegen has the trellis GEMM. Block tile
    // bm x 128 outputs: two 4-warp blocks an SM beat one 8-warp block of
    // 256 outputs by 10-16% at GLM-5.3's projections (docs/perf.md,
    // session 22: GemmTrellisGpuBench.DenseAtGlmShapes).
    if (b.prefill && haveFamily("gemm_trellis"))
      return Spec{"gemm_trellis",
                  {{"K", k},
                   {"codebook", cbName(t.getCodebook())},
                   {"e4m3", t.getE4m3() ? "1" : "0"},
                   {"xt", "f32"},
                   {"bm", b.size >= 128 ? "128" : "64"},
                   {"threads", "128"}}};
    // Decode: dense_trellis, as the CUDA executor runs trellis GEMVs (its
    // tuning, codegen/dense_trellis_abi.h).
    if (haveFamily("dense_trellis")) {
      const ::glm::codegen::DenseTrellisTuning dt = tunings.dense();
      const int batch = int(b.batch);
      return Spec{
          "dense_trellis",
          {{"K", k},
           {"codebook", cbName(t.getCodebook())},
           {"e4m3", t.getE4m3() ? "1" : "0"},
           {"batch", str(::glm::codegen::decodeKernelBatch(batch))},
           {"pipe", str(::glm::codegen::denseTrellisPipe(
                        dt, t.getTwiceBits() / 2, batch))},
           {"minblocks", str(dt.minBlocks)},
           {"threads", str(dt.threads)}}};
    }
    return Spec{"dense_gemv_trellis",
                {{"K", k},
                 {"codebook", cbName(t.getCodebook())},
                 {"e4m3", t.getE4m3() ? "1" : "0"},
                 {"batch", str(b.batch)},
                 {"threads", "256"}}};
  }
  auto d = cast<DenseType>(format);
  // dense_gemv streams bf16 / E4M3 rows with 16-byte loads (in % 128 == 0,
  // fp32 sums): the decode step's dense projections and LM head. Other
  // dtypes and shapes (f32/f16 checkpoints, tiny test models) run on
  // gemv_any: fp64 sums in a fixed order, the CPU reference's arithmetic.
  const bool streamed = d.getFormat() == DenseFormat::BF16 ||
                        d.getFormat() == DenseFormat::Fp8Block128 ||
                        d.getFormat() == DenseFormat::Fp8Row ||
                        d.getFormat() == DenseFormat::Mxfp8;
  if (streamed && (in <= 0 || in % 128 != 0))
    return Spec{"gemv_any", {{"threads", "256"}}};
  switch (d.getFormat()) {
  case DenseFormat::F32:
  case DenseFormat::F16:
    return Spec{"gemv_any", {{"threads", "256"}}};
  default:
    break;
  }
  std::string fmt = "?", scale = "none";
  switch (d.getFormat()) {
  case DenseFormat::BF16:
    fmt = "bf16";
    break;
  case DenseFormat::Fp8Block128:
    fmt = "fp8_block";
    scale = "f32";
    break;
  case DenseFormat::Fp8Row:
    fmt = "fp8_row";
    scale = "f32";
    break;
  case DenseFormat::Mxfp8:
    fmt = "mxfp8";
    break;
  case DenseFormat::F32:
    // fp32 weights, fp64 sums; one token per launch (no batch argument).
    return Spec{"dense_gemv_f32", {{"out", "f32"}, {"threads", "256"}}};
  default:
    why.reason = "dense format " +
                 stringifyDenseFormat(d.getFormat()).str() +
                 " has no GPU kernel: dense_gemv takes bf16, fp8_block128, "
                 "fp8_row and mxfp8, dense_gemv_f32 takes f32";
    return failure();
  }
  // Prefill: a tensor-core GEMM reads each weight tile once per bm tokens
  // (dense_gemv's parameters; the formats codegen's gemm_dense takes: bf16,
  // fp8 block / row and MXFP8).
  if (b.prefill && haveFamily("gemm_dense") && gemmDenseTakes(fmt))
    return Spec{"gemm_dense",
                {{"format", fmt},
                 {"scale", scale},
                 {"bm", b.size >= 128 ? "128" : "64"},
                 {"threads", "256"}}};
  // Several rows a warp (codegen/dense_gemv_abi.h).
  const int kb = ::glm::codegen::decodeKernelBatch(int(b.batch));
  Spec s{"dense_gemv",
         {{"format", fmt},
          {"scale", scale},
          {"batch", str(kb)},
          {"threads", "256"}}};
  if (const int rows = ::glm::codegen::denseGemvRowsFor(outputs, kb); rows > 1)
    s.args["rows"] = str(rows);
  if (::glm::codegen::kDenseGemvStream)
    s.args["loads"] = "stream";
  return s;
}

/// Whether the executor runs this layer's trellis experts through
/// moe_trellis: codegen's rule (moe_trellis_abi.h), the one the executor
/// applies, at the largest decode batch of the plan.
static bool moeTrellisRuns(FusedExpertGemvOp f, const SpecContext &ctx,
                           std::string &tuningRefused) {
  ::glm::codegen::MoeTrellisLayer l;
  l.exl3 = ctx.layout != "exlr8";
  l.inter = f.getInter();
  l.halves = f.getHalves();
  l.topk = f.getTopK();
  l.maxBatch = int(ctx.maxDecode);
  l.hasShared = f.getShared() > 0;
  l.sharedInter = f.getInter();
  if (!::glm::codegen::moeTrellisRefusal(l).empty())
    return false;
  const bool valid =
      ::glm::codegen::moeTrellisDims(ctx.tunings.moe(f.getHidden()),
                                     int(ctx.maxDecode), int(f.getTopK()),
                                     int(f.getExperts()), int(f.getShared()),
                                     int(f.getHidden()))
          .valid();
  // A layer moe_trellis runs by default but not under the tuning given:
  // refused, not silently moved to the per-group kernels.
  if (!valid && !ctx.tunings.moeText.empty())
    tuningRefused = "--moe-trellis-tuning " + ctx.tunings.moeText +
                    " gives moe_trellis launches the kernel traps on at "
                    "hidden " + str(f.getHidden()) +
                    " (guSplit must divide hidden/16, downGroup 16, and a "
                    "persistent grid needs downGroup 1; "
                    "codegen/moe_trellis_abi.h MoeTrellisDims::valid)";
  return valid;
}

/// The kernels one op launches in bucket `b`, in order; empty for
/// collectives (NCCL). Fails with `why` when no GPU template runs the op.
static FailureOr<SmallVector<Spec>> specsFor(Operation *op, SpecContext &ctx,
                                             const Bucket &b, NoKernel &why) {
  SmallVector<Spec> out;
  // The KV cache's storage form, a template argument of its writers and
  // readers (codegen kvParam; f32, the default, is left out of the spec).
  const std::string kv = ctx.kvDtype == "fp8"    ? "e4m3"
                         : ctx.kvDtype == "bf16" ? "bf16"
                                                 : "f32";
  auto withKv = [&](Spec s) {
    if (kv != "f32")
      s.args["kv"] = kv;
    return s;
  };
  // Rows of n values the bf16/e4m3 cache kernels take (kv_cache.cuh): a
  // writer stages at most kv::kStageMax, an e4m3 row keeps its fp32 scale
  // aligned (n a multiple of 4).
  auto kvRowsRefused = [&](int64_t n, const char *what) {
    if (kv == "f32" ||
        (n <= ::glm::kv::kStageMax && (kv != "e4m3" || n % 4 == 0)))
      return false;
    why.reason = std::string(what) + " of " + str(n) + " values has no " + kv +
                 " cache kernel: rows of at most " + str(::glm::kv::kStageMax) +
                 " values (fp8: a multiple of 4); use --kv-dtype f32";
    return true;
  };
  // A trellis GEMV runs as the executor runs it: rotate the input
  // (H(x * suh)), multiply, rotate the output (H(z) * svh).
  const Spec had{"hadamard128", {{"vt", "f32"}, {"threads", "256"}}};
  auto gemv = [&](Type t, int64_t in, int64_t outputs) {
    FailureOr<Spec> s = gemvSpec(t, in, outputs, b, ctx.tunings, why);
    if (failed(s))
      return false;
    // dense_trellis applies the output rotation itself.
    const bool trellis = isa<TrellisType>(t);
    if (trellis)
      out.push_back(had);
    out.push_back(*s);
    if (trellis && s->family != "dense_trellis")
      out.push_back(had);
    // The rotation covers whole 128-blocks: an output of another width
    // (kv_a's 576, an indexer key of 64) is computed and rotated padded,
    // then its valid columns are copied out (vocab_gather of one slice).
    if (trellis && s->family == "gemm_trellis" && outputs % 128 != 0)
      out.push_back({"vocab_gather", {{"threads", "256"}}});
    return true;
  };
  if (auto f = dyn_cast<FusedExpertGemvOp>(op)) {
    if (f.getCodebook()) {
      std::string digits, halfInt;
      for (int32_t w : f.getWidths()) {
        if (w % 2)
          halfInt += (halfInt.empty() ? "" : ", ") + widthText(w);
        else
          digits += str(w / 2);
      }
      if (!halfInt.empty()) {
        why.reason = "expert widths " + halfInt + " (half-integer, " +
                     cbName(*f.getCodebook()) +
                     ") have no GPU kernel: expert_gemv_trellis decodes "
                     "integer widths 1..8 only";
        return failure();
      }
      const bool exl3 = ctx.layout != "exlr8";
      std::string tuningRefused;
      const bool fused = moeTrellisRuns(f, ctx, tuningRefused);
      if (!tuningRefused.empty()) {
        why.reason = tuningRefused;
        return failure();
      }
      if (fused && b.prefill && !exl3 && f.getShared() <= 1 &&
          f.getInter() == 128 * f.getHalves() && haveFamily("moe_group")) {
        // A prefill chunk (exlr8): the chunk's (token, expert) entries
        // sorted by expert, then tensor-core GEMMs over each expert's rows
        // (weights decoded once per BM rows, not once per 8 tokens):
        // H(x * signs.in), moe_group (sorted entries, GEMM items),
        // moe_gather (rows * su_block, fp16), gate/up, moe_act (the
        // rotations, SwiGLU, down's input), down (every half of an expert
        // row block added in one block's registers, one launch),
        // moe_combine (* sv_block * route weight, in slot order),
        // H(.) * signs.out.
        const std::string bm = str(::glm::codegen::moeGroupedRows(
            b.size, f.getTopK(), f.getExperts()));
        auto grouped = [&](const char *threads, int64_t halves) {
          Spec s{"gemm_trellis_grouped",
                 {{"widths", digits},
                  {"codebook", cbName(*f.getCodebook())},
                  {"e4m3", f.getE4m3() ? "1" : "0"},
                  {"xt", "f16"},
                  {"bm", bm},
                  {"threads", threads}}};
          if (halves > 1)
            s.args["halves"] = str(halves);
          return s;
        };
        out.push_back(had);
        out.push_back({"moe_group", {{"threads", "512"}}});
        out.push_back({"moe_gather", {{"threads", "256"}}});
        out.push_back(grouped("128", 1));
        out.push_back({"moe_act", {{"threads", "256"}}});
        out.push_back(grouped(
            str(::glm::codegen::moeGroupedDownThreads(std::stoll(bm))).c_str(),
            f.getHalves()));
        out.push_back({"moe_combine", {{"threads", "256"}}});
        out.push_back(had);
        return out;
      }
      if (fused) {
        // The executor's moe_trellis path: one rotation of the input
        // (exlr8: H(x * signs.in); EXL3: the per-slot H(x * suh) rows),
        // then gate/up and down over every routed and shared expert.
        if (exl3)
          out.push_back({"moe_exl3_in", {{"threads", "256"}}});
        out.push_back(had);
        const ::glm::codegen::MoeTrellisTuning t =
            ctx.tunings.moe(f.getHidden());
        for (const char *stage : {"gu", "down"})
          out.push_back(
              {"moe_trellis",
               {{"widths", digits},
                {"codebook", cbName(*f.getCodebook())},
                {"e4m3", f.getE4m3() ? "1" : "0"},
                {"batch", str(::glm::codegen::decodeKernelBatch(int(b.batch)))},
                {"sv", "f32"},
                {"stage", stage},
                {"pipe", str(t.pipe)},
                {"minblocks", str(t.minBlocks)},
                {"threads", str(t.threads)}}});
        return out;
      }
      // expert_gemv_trellis + moe_reduce for the routed experts, then for
      // the shared expert; exlr8 rotates the input once and the output
      // (H(delta) * signs.out) at the end.
      Spec expert{"expert_gemv_trellis",
                  {{"widths", digits},
                   {"codebook", cbName(*f.getCodebook())},
                   {"e4m3", f.getE4m3() ? "1" : "0"},
                   {"batch", str(b.batch)},
                   {"sv", "f32"},
                   {"threads", "256"}}};
      Spec reduce{"moe_reduce", {{"threads", "256"}}};
      for (int64_t g = 0; g < (f.getShared() > 0 ? 2 : 1); ++g) {
        if (exl3)
          out.push_back({"exl3_expert_in", {{"threads", "256"}}});
        if (exl3 || g == 0)
          out.push_back(had);
        out.push_back(expert);
        out.push_back(reduce);
      }
      if (!exl3)
        out.push_back(had);
      return out;
    }
    // Unquantized experts: each (row, slot, 128-channel unit) contribution
    // in fp64 into its own slot, routed then shared, then one fixed-order
    // sum of the slots (the CPU reference's order).
    auto d = dyn_cast<DenseType>(*f.getDenseFormat());
    if (!d || (d.getFormat() != DenseFormat::F32 &&
               d.getFormat() != DenseFormat::F16 &&
               d.getFormat() != DenseFormat::BF16)) {
      why.reason = "experts stored as " +
                   (d ? stringifyDenseFormat(d.getFormat()).str()
                      : std::string("?")) +
                   " have no GPU kernel: hf_expert_act/down read f32, f16 "
                   "and bf16";
      return failure();
    }
    for (int64_t g = 0; g < (f.getShared() > 0 ? 2 : 1); ++g) {
      out.push_back({"hf_expert_act", {{"threads", "256"}}});
      out.push_back({"hf_expert_down", {{"threads", "256"}}});
    }
    out.push_back({"reduce_units", {{"threads", "256"}}});
  } else if (auto g = dyn_cast<DenseGemvOp>(op)) {
    // A vocabulary-split LM head zeroes its rows first: the ranks' slices
    // are gathered by an exact sum.
    if (g.getShard() && g.getShard()->getKind() == ShardKind::Vocab &&
        g.getShard()->getRanks() > 1)
      out.push_back({"fill_f32", {{"threads", "256"}}});
    if (!gemv(g.getFormat(), g.getIn(), g.getOut()))
      return failure();
  } else if (auto m = dyn_cast<MlpOp>(op)) {
    // Gate, up and down GEMVs of the dense SwiGLU (the SwiGLU itself is an
    // executor helper kernel, not a codegen family).
    for (StringRef sym : {m.getGate(), m.getUp(), m.getDown()}) {
      if (sym == m.getDown())
        out.push_back({"swiglu", {{"threads", "256"}}});
      if (Type t = ctx.typeOf(sym);
          t && !gemv(t, ctx.inputsOf(sym), ctx.outputsOf(sym)))
        return failure();
    }
  } else if (auto a = dyn_cast<AttentionDecodeOp>(op)) {
    // The latent cache store (kv_a norm + RoPE), RoPE of q's rope part,
    // then absorbed MLA over this rank's heads (q·W_uk, softmax over the
    // selection, ·W_uv); with heads split across ranks the output rows of
    // the other ranks' heads are zeroed first (o_proj sums all heads).
    Type kvb = ctx.typeOf(a.getKvB());
    auto kd = dyn_cast_or_null<DenseType>(kvb);
    if (!kd || kd.getFormat() == DenseFormat::Int4) {
      why.reason = "kv_b in a trellis or int4 format has no GPU kernel yet: "
                   "mla_qabs/mla_out read dense kv_b rows (f32, f16, bf16, "
                   "fp8)";
      return failure();
    }
    if (kvRowsRefused(a.getKvLora() + a.getQkRope(), "a latent row"))
      return failure();
    out.push_back(withKv({"kv_store", {{"threads", "256"}}}));
    if (a.getQkRope() > 0) // GLM-5.3-Flash's MLA has no rope part
      out.push_back(
          {"rope_rows",
           {{"threads",
             str(std::max<int64_t>(32, (a.getQkRope() / 2 + 31) / 32 * 32))}}});
    if (a.getShard().getRanks() > 1)
      out.push_back({"fill_f32", {{"threads", "256"}}});
    // A prefill chunk's q_abs and head outputs run as one GEMM per head
    // over the chunk's rows (mla_proj: 3xTF32, kv_b read in its stored form
    // once per 64 rows, not once per row), where the strides allow.
    const int64_t dn = a.getQkNope(), dr = a.getQkRope();
    const bool proj = b.prefill && haveFamily("mla_proj") && dn % 4 == 0 &&
                      (dn + dr) % 4 == 0 && a.getKvLora() % 4 == 0;
    auto projSpec = [&](const char *w) {
      static const char *const kDt[] = {"f32", "f16", "bf16", "e4m3"};
      static const char *const kSk[] = {"none", "block", "row", "mx"};
      return Spec{"mla_proj",
                  {{"w", w},
                   {"dt", kDt[dtOf(kvb)]},
                   {"sk", kSk[skOf(kvb)]},
                   {"threads", "128"}}};
    };
    out.push_back(proj ? projSpec("kn") : Spec{"mla_qabs", {{"threads", "64"}}});
    // A prefill chunk's rows attend on tensor cores (mla_prefill: a block
    // per row and up to 64 heads, the row's keys gathered once, fp16
    // inputs) where the shape fits; decode keeps mla_core's fp32.
    const int64_t ranks = a.getShard().getRanks(), kvr = a.getKvLora(),
                  nhRank = (a.getHeads() + ranks - 1) / ranks;
    // Its keys and values come from mla_rows16: the chunk's selectable
    // cache rows in fp16 once, not converted per tile per query row.
    if (b.prefill && haveFamily("mla_prefill") &&
        ::glm::codegen::mlaPrefillTakes(kvr, a.getQkRope(), nhRank)) {
      const bool rows16 = haveFamily("mla_rows16");
      if (rows16)
        out.push_back(withKv({"mla_rows16", {{"threads", "256"}}}));
      Spec attn{"mla_prefill",
                {{"vt", str(kvr / 16)},
                 {"threads", str(::glm::codegen::mlaPrefillThreadsFor(
                                 a.getHeads(), ranks))}}};
      if (rows16)
        attn.args["keys"] = "rows16";
      out.push_back(rows16 ? attn : withKv(attn));
    } else if (kvr <= ::glm::mla_split::kMaxKvr &&
               a.getQkRope() <= ::glm::mla_split::kMaxRope &&
               haveFamily("mla_scores")) {
      // Decode (and chunks mla_prefill does not take): mla_core's fp32
      // arithmetic in three launches that read each selected row once per
      // block of heads, not once per head (mla_split_layout.cuh).
      out.push_back(withKv({"mla_scores", {{"threads", "256"}}}));
      out.push_back({"mla_softmax", {{"threads", "1024"}}});
      out.push_back(withKv({"mla_values", {{"threads", "256"}}}));
    } else
      out.push_back(withKv({"mla_core", {{"threads", "1024"}}}));
    out.push_back(proj ? projSpec("nk") : Spec{"mla_out", {{"threads", "256"}}});
  } else if (auto ix = dyn_cast<IndexerTopkOp>(op)) {
    // q = wq_b(q_a) and its RoPE, the key wk(x) normed, roped and stored,
    // the head weights weights_proj(x), the scores over the cache, the
    // top-k selection.
    ArrayAttr w = ix.getWeights();
    auto proj = [&](unsigned i) -> Type {
      return w && i < w.size()
                 ? ctx.typeOf(cast<FlatSymbolRefAttr>(w[i]).getValue())
                 : Type();
    };
    auto projIn = [&](unsigned i) -> int64_t {
      return w && i < w.size()
                 ? ctx.inputsOf(cast<FlatSymbolRefAttr>(w[i]).getValue())
                 : 0;
    };
    auto projOut = [&](unsigned i) -> int64_t {
      return w && i < w.size()
                 ? ctx.outputsOf(cast<FlatSymbolRefAttr>(w[i]).getValue())
                 : 0;
    };
    if (Type t = proj(0); t && !gemv(t, projIn(0), projOut(0)))
      return failure();
    if (kvRowsRefused(ix.getHeadDim(), "an index key"))
      return failure();
    const int64_t P = ix.getKpool();
    if (P == 1 || ix.getRope() > 0) // Flash's k-pool indexer is NoPE
      out.push_back(
          {"rope_rows",
           {{"threads",
             str(std::max<int64_t>(32, (ix.getRope() / 2 + 31) / 32 * 32))}}});
    if (Type t = proj(1); t && !gemv(t, projIn(1), projOut(1)))
      return failure();
    if (P > 1) {
      // The k-pool: the compress gate's GEMV, then the key and gate go into
      // the ring and a completed pool's key is written (kpool_store).
      if (P != 2 && P != 4 && P != 8) {
        why.reason = "index_kpool " + str(P) +
                     " has no GPU kernel: indexer_scores_ctx and dsa_select "
                     "take pool 1, 2, 4 or 8";
        return failure();
      }
      if (Type t = proj(5); t && !gemv(t, projIn(5), projOut(5)))
        return failure();
      out.push_back(withKv({"kpool_store", {{"threads", "256"}}}));
    } else {
      out.push_back(withKv({"index_key_store", {{"threads", "256"}}}));
    }
    if (Type t = proj(4); t && !gemv(t, projIn(4), projOut(4)))
      return failure();
    // pool = 1 (the plain DSA indexer) stays out of the spec: its kernels
    // keep their names. A prefill chunk's rows share their keys: the plain
    // indexer scores them as a GEMM on tensor cores where codegen has
    // indexer_scores_mma and its shapes fit (nh a power of two 2..128, hd
    // 32..128 in 32s: GLM-5.3, synth tiny, glm_dsa_a); else (glm_dsa_b's
    // 12 heads), and in decode, the fp64 kernel.
    const bool mma =
        b.prefill && P == 1 && haveFamily("indexer_scores_mma") &&
        ::glm::indexerMmaTakes(int(ix.getHeads()), int(ix.getHeadDim()), 256);
    Spec scores = withKv({mma ? "indexer_scores_mma" : "indexer_scores_ctx",
                          {{"threads", "256"}}}),
         select{"dsa_select", {{"threads", "1024"}}};
    if (P > 1)
      scores.args["pool"] = select.args["pool"] = str(P);
    out.push_back(scores);
    out.push_back(select);
  } else if (auto k = dyn_cast<KdaDecodeOp>(op); k && b.prefill) {
    // A prompt chunk of one sequence: kda_prep (kda_decode's conv, norms and
    // gates over the rows, written out), then kda_chunk (the delta rule over
    // chunks of 32 on tensor cores, 3xTF32: within 5e-6 of the recurrence,
    // and the gated norm, into this rank's columns of full-width rows; other
    // ranks' heads zero). makeBuckets admits prefill only where they apply.
    if (k.getShard().getRanks() > 1)
      out.push_back({"fill_f32", {{"threads", "256"}}});
    out.push_back({"kda_prep", {{"threads", "256"}}});
    out.push_back({"kda_chunk",
                   {{"chunk", str(glmc::kKdaPrefillChunk)},
                    {"mma", "tf32x3"},
                    {"threads", "256"}}});
  } else if (auto k = dyn_cast<KdaDecodeOp>(op)) {
    // Other ranks' heads are zero in o_proj's input (as attention_decode's);
    // then one block per (head, row): the state column slices in registers,
    // ROWS rows a thread, the fewest threads that keep ROWS <= 32.
    if (k.getShard().getRanks() > 1)
      out.push_back({"fill_f32", {{"threads", "256"}}});
    const int64_t hd = k.getHeadDim(), dvr = (hd + 31) / 32 * 32;
    if (hd > 256 || k.getConvKernel() > 8) {
      why.reason = "KDA head_dim " + str(hd) + " / conv kernel " +
                   str(k.getConvKernel()) +
                   " has no GPU kernel: kda_decode takes head_dim <= 256 "
                   "and at most 8 taps";
      return failure();
    }
    int64_t threads = 0, rows = 0;
    for (int64_t t : {128, 256, 512}) {
      if (dvr > t)
        continue;
      int64_t need = (hd + t / dvr - 1) / (t / dvr), r = 4;
      while (r < need)
        r *= 2;
      if (!threads || r <= 32)
        threads = t, rows = r;
      if (r <= 32)
        break;
    }
    out.push_back(
        {"kda_decode", {{"rows", str(rows)}, {"threads", str(threads)}}});
  } else if (auto pre = dyn_cast<HcPreOp>(op)) {
    // m = fn · X over the flattened streams, then the site's map and u.
    if (Type t = ctx.typeOf(pre.getFn());
        t && !gemv(t, ctx.inputsOf(pre.getFn()), ctx.outputsOf(pre.getFn())))
      return failure();
    out.push_back(
        {"mhc_mix", {{"streams", str(pre.getStreams())}, {"threads", "256"}}});
  } else if (auto post = dyn_cast<HcPostOp>(op)) {
    out.push_back({"mhc_post",
                   {{"streams", str(post.getStreams())}, {"threads", "256"}}});
  } else if (auto st = dyn_cast<HcStreamsOp>(op)) {
    // The embedding broadcast into the streams: mhc_post without X.
    out.push_back(
        {"mhc_post", {{"streams", str(st.getStreams())}, {"threads", "256"}}});
  } else if (auto head = dyn_cast<HcHeadOp>(op)) {
    out.push_back({"mhc_head",
                   {{"streams", str(head.getStreams())}, {"threads", "256"}}});
  } else if (isa<RmsNormOp>(op)) {
    out.push_back({"rms_norm_rows", {{"threads", "1024"}}});
  } else if (isa<AddRmsNormOp>(op)) {
    out.push_back({"add_rms_norm", {{"threads", "1024"}}});
  } else if (auto e = dyn_cast<EmbedOp>(op)) {
    auto d = dyn_cast_or_null<DenseType>(ctx.typeOf(e.getWeight()));
    if (!d || (d.getFormat() != DenseFormat::F32 &&
               d.getFormat() != DenseFormat::F16 &&
               d.getFormat() != DenseFormat::BF16 &&
               d.getFormat() != DenseFormat::Fp8Row)) {
      why.reason = "an embedding that is not f32, f16, bf16 or fp8_row has "
                   "no GPU kernel (embed_tokens reads whole rows)";
      return failure();
    }
    out.push_back({"embed_tokens", {{"threads", "256"}}});
  } else if (auto r = dyn_cast<RouterOp>(op)) {
    // The gate GEMV (router logits), then the selection.
    if (Type t = ctx.typeOf(r.getWeight());
        t && !gemv(t, ctx.inputsOf(r.getWeight()),
                   ctx.outputsOf(r.getWeight())))
      return failure();
    if (r.getExperts() > 1024 || r.getTopK() > 64) {
      why.reason = "route takes 1..1024 experts and top 1..64";
      return failure();
    }
    out.push_back({"route",
                   {{"threads", str((r.getExperts() + 31) / 32 * 32)}}});
  } else if (isa<SampleOp, DraftBeginOp>(op)) {
    // Sampling is the host's: it reads the logits the graph leaves in
    // io.logits (glm-engine's sampler). draft_begin only marks a graph.
  } else if (isa<GatherRowsOp>(op)) {
    // Hidden rows by index: embed_tokens over an fp32 table.
    out.push_back({"embed_tokens", {{"threads", "256"}}});
  } else if (isa<MtpInputOp>(op)) {
    // enorm into the first half of each row, hnorm into the second.
    out.push_back({"rms_norm_rows", {{"threads", "1024"}}});
    out.push_back({"rms_norm_rows", {{"threads", "1024"}}});
  } else if (isa<CarryRowsOp>(op)) {
    // A copy: sum_parts of one part (0 + x = x).
    out.push_back({"sum_parts", {{"threads", "256"}}});
  }
  return out;
}

/// Name from family and arguments when codegen is not linked.
static std::string plainName(const Spec &s) {
  std::string n = "glm_" + s.family;
  for (auto &[k, v] : s.args)
    n += "_" + k + v;
  return n;
}

#ifdef GLM_CODEGEN_AVAILABLE
/// PTX (and with `cubin` CUBIN) of `k` for `arch`, through the kernel
/// cache glm-engine shares (codegen::compileCached).
static ::glm::plan::KernelBinary compileCached(const ::glm::plan::KernelDef &k,
                                               const std::string &arch,
                                               bool cubin) {
  ::glm::codegen::CompiledKernel c =
      ::glm::codegen::compileCached(k.source, k.name, arch, cubin);
  ::glm::plan::KernelBinary bin;
  bin.arch = arch;
  bin.ptx = std::move(c.ptx);
  bin.cubin = std::move(c.cubin);
  return bin;
}
#endif

struct EmitKernels : glmc::impl::GlmEmitKernelsBase<EmitKernels> {
  using GlmEmitKernelsBase::GlmEmitKernelsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::vector<std::string> archList(archs.begin(), archs.end());
    if (archList.empty())
      archList.push_back("sm_121");
    for (const std::string &a : archList)
      if (a.rfind("sm_", 0) != 0) {
        module.emitError() << "glm-emit-kernels: arch '" << a
                           << "' is not of the form sm_NN (sm_121, sm_90)";
        return signalPassFailure();
      }
    FailureOr<std::vector<Bucket>> buckets = makeBuckets(module);
    if (failed(buckets))
      return signalPassFailure();
    OpBuilder b(&getContext());
    SymbolTable symbols(module);
    SpecContext sctx{symbols, kvDtype.empty() ? "f32" : kvDtype.getValue()};
    if (auto kv = module->getAttrOfType<DictionaryAttr>("glm.kv"))
      if (auto d = kv.getAs<StringAttr>("dtype"))
        sctx.kvDtype = d.str();
    for (PackOp pack : module.getOps<PackOp>())
      sctx.layout = pack.getLayout().str();
    for (const Bucket &bk : *buckets)
      if (!bk.prefill)
        sctx.maxDecode = std::max(sctx.maxDecode, bk.size);
    sctx.tunings.moeText = moeTrellisTuning;
    sctx.tunings.denseText = denseTrellisTuning;
    try {
      sctx.tunings.validate();
    } catch (const ::glm::rt::Error &e) {
      module.emitError() << "glm-emit-kernels: " << e.what();
      return signalPassFailure();
    }
    setTunings(module, sctx.tunings); // glm-emit-plan reads the same
    std::map<Spec, std::string> names; // distinct specs → kernel name
    std::map<std::string, Spec> byName;
    // Why ops get no kernel: cause → first op and the layers it covers.
    std::map<std::string, std::pair<Operation *, std::vector<int64_t>>> causes;
    auto noKernel = [&](Operation *op, const std::string &reason) {
      auto &c = causes[reason];
      if (!c.first)
        c.first = op;
      if (auto l = op->getAttrOfType<IntegerAttr>("layer"))
        c.second.push_back(l.getInt());
      else if (auto w = op->getAttrOfType<FlatSymbolRefAttr>("weight"))
        if (auto wop = symbols.lookup<WeightOp>(w.getValue()))
          if (auto l = wop->getAttrOfType<IntegerAttr>("layer");
              l && l.getInt() >= 0)
            c.second.push_back(l.getInt());
    };
    module.walk([&](Operation *op) {
      if (!op->getDialect() || op->getDialect()->getNamespace() != "glm")
        return;
      // Specs of every bucket first: an op runs on the GPU in all of them
      // or in none.
      std::vector<SmallVector<Spec>> perBucket;
      for (const Bucket &bk : *buckets) {
        NoKernel why;
        FailureOr<SmallVector<Spec>> specs = specsFor(op, sctx, bk, why);
        if (failed(specs))
          return noKernel(op, why.reason);
        perBucket.push_back(std::move(*specs));
      }
      // A sum over rank-owned units (o_proj, a dense MLP's down, the
      // experts' down) ends in fixed point in every bucket, so the result
      // is the same bits at every rank count (templates/fixed_point.cuh):
      // one rank converts in the kernel; several write int64 partials,
      // all-reduce them in int64 and convert after (fixed_to_f32).
      const int64_t ranks =
          module->hasAttr("glm.ranks")
              ? module->getAttrOfType<IntegerAttr>("glm.ranks").getInt()
              : 1;
      // Per bucket: a bucket whose last launch has no fixed-point mode (a
      // prefill chunk's tensor-core GEMM) keeps the fp32 all-reduce.
      if (feedsAllReduce(op)) {
        SmallVector<bool> fixed;
        for (SmallVector<Spec> &v : perBucket) {
          fixed.push_back(!v.empty() && takesSum(v.back().family));
          if (fixed.back())
            v.back().args["sum"] = ranks > 1 ? "fixed_out" : "fixed";
        }
        if (llvm::is_contained(fixed, true))
          op->setAttr("glm.fixed_sum", b.getDenseBoolArrayAttr(fixed));
      }
      if (auto ar = dyn_cast<AllReduceOp>(op)) {
        Operation *src = ar.getInput().getDefiningOp();
        auto fixed = src ? src->getAttrOfType<DenseBoolArrayAttr>(
                               "glm.fixed_sum")
                         : DenseBoolArrayAttr();
        if (ranks > 1 && fixed)
          for (size_t i = 0; i < perBucket.size(); ++i)
            if (i < fixed.size() && fixed[i])
              perBucket[i] = {Spec{"fixed_to_f32", {{"threads", "256"}}}};
      }
      std::vector<SmallVector<Attribute>> opNames(perBucket.size());
      for (size_t i = 0; i < perBucket.size(); ++i)
        for (const Spec &s : perBucket[i]) {
          auto it = names.find(s);
          if (it == names.end()) {
            std::string name = plainName(s);
#ifdef GLM_CODEGEN_AVAILABLE
            ::glm::codegen::KernelSpec ks{
                s.family, {s.args.begin(), s.args.end()}, archList};
            try {
              name = ::glm::codegen::kernelName(ks);
            } catch (const ::glm::rt::Error &e) {
              return noKernel(op, e.what());
            }
#endif
            it = names.emplace(s, name).first;
          }
          opNames[i].push_back(b.getStringAttr(it->second));
        }
      if (llvm::all_of(perBucket,
                       [](const SmallVector<Spec> &v) { return v.empty(); }))
        return;
      SmallVector<Attribute> lists;
      for (auto &n : opNames)
        lists.push_back(b.getArrayAttr(n));
      op->setAttr("glm.kernels", lists[0]);
      op->setAttr("glm.bucket_kernels", b.getArrayAttr(lists));
    });
    // Only kernels some op kept (an op that failed in a later bucket named
    // none).
    module.walk([&](Operation *op) {
      if (auto lists = op->getAttrOfType<ArrayAttr>("glm.bucket_kernels"))
        for (Attribute l : lists)
          for (Attribute n : cast<ArrayAttr>(l))
            byName.emplace(cast<StringAttr>(n).str(), Spec{});
    });
    for (auto &[spec, name] : names)
      if (byName.count(name))
        byName[name] = spec;
    bool refused = false;
    for (auto &[reason, where] : causes) {
      std::string layers;
      for (int64_t l : where.second)
        layers += (layers.empty() ? "" : ", ") + str(l);
      // A tuning the user gave that the kernels cannot run is an error of
      // the command line, not a property of the model.
      if (reason.rfind("--moe-trellis-tuning", 0) == 0) {
        where.first->emitError() << "glm-emit-kernels: " << reason;
        refused = true;
        continue;
      }
      where.first->emitWarning()
          << "no GPU kernel for " << where.first->getName() << ": " << reason
          << (layers.empty() ? std::string() : " (layers " + layers + ")")
          << "; the plan cannot be executed (glm-engine --backend "
             "reference runs the pack without it)";
    }
    if (refused)
      return signalPassFailure();
    SmallVector<Attribute> bucketAttrs;
    for (const Bucket &bk : *buckets)
      bucketAttrs.push_back(b.getDictionaryAttr({
          b.getNamedAttr("kind",
                         b.getStringAttr(bk.prefill ? "prefill" : "decode")),
          b.getNamedAttr("size", b.getI64IntegerAttr(bk.size)),
          b.getNamedAttr("batch", b.getI64IntegerAttr(bk.batch)),
      }));
    module->setAttr("glm.buckets", b.getArrayAttr(bucketAttrs));
    // Kernel attributes do not change who binds which weight bytes; the
    // builds left running are glm-emit-plan's to collect.
    markAnalysesPreserved<glmc::BindingAnalysis, glmc::KernelBuilds>();

    SmallVector<Attribute> specs;
    std::vector<BuiltKernel> built = buildAll(
        byName, archList, async ? &getAnalysis<glmc::KernelBuilds>() : nullptr);
    size_t index = 0;
    for (auto &[name, s] : byName) {
      SmallVector<NamedAttribute> args;
      for (auto &[k, v] : s.args)
        args.push_back(b.getNamedAttr(k, b.getStringAttr(v)));
      SmallVector<NamedAttribute> fields = {
          b.getNamedAttr("name", b.getStringAttr(name)),
          b.getNamedAttr("family", b.getStringAttr(s.family)),
          b.getNamedAttr("args", b.getDictionaryAttr(args))};
      if (failed(describeKernel(module, built[index++], fields)))
        return signalPassFailure();
      specs.push_back(b.getDictionaryAttr(fields));
    }
    module->setAttr("glm.kernel_specs", b.getArrayAttr(specs));
    SmallVector<Attribute> archAttrs;
    for (const std::string &a : archList)
      archAttrs.push_back(b.getStringAttr(a));
    module->setAttr("glm.archs", b.getArrayAttr(archAttrs));
  }

  /// Decode batches 1..8 (default all) and prefill chunks (default 512 and
  /// 2048; 0 = none), sorted and deduplicated.
  FailureOr<std::vector<Bucket>> makeBuckets(ModuleOp module) {
    std::set<int64_t> decode(decodeBatches.begin(), decodeBatches.end());
    std::set<int64_t> prefill(prefillChunks.begin(), prefillChunks.end());
    if (decode.empty())
      for (int64_t i = 1; i <= kMaxTemplateBatch; ++i)
        decode.insert(i);
    if (prefill.empty())
      prefill = {512, 2048};
    std::vector<Bucket> out;
    for (int64_t d : decode) {
      if (d < 1 || d > kMaxTemplateBatch) {
        module.emitError() << "glm-emit-kernels: decode batch " << d
                           << " is out of range: the decode kernels take "
                              "batch 1.."
                           << kMaxTemplateBatch << " (decode-batches)";
        return failure();
      }
      out.push_back({false, d, d});
    }
    if (!decode.count(1)) {
      // Bytes per decoded token (rank summaries, the inspector, the
      // runtime's roofline) are read off the batch-1 decode graph.
      module.emitError() << "glm-emit-kernels: decode-batches must include "
                            "1: per-token figures come from the batch-1 "
                            "decode graph";
      return failure();
    }
    // GLM-5.3-Flash: a KDA layer's prompt is sequential in its state, which
    // the decode families cannot run over the rows of one sequence;
    // kda_prep + kda_chunk take the chunk where their shapes allow, with a
    // lower-bounded gate (kda_chunk's exponentials need g > -5 a token).
    // Otherwise prompts go token by token through the decode graphs
    // (glm-engine does that for a plan without prefill graphs).
    bool tokenByToken = false;
    module.walk([&](KdaDecodeOp k) {
      const double lower =
          k.getLowerBound() ? k.getLowerBound()->convertToDouble() : 0.0;
      tokenByToken |= k.getHeadDim() > 128 ||
                   k.getHeadDim() % 16 != 0 || !(lower < 0 && lower >= -5);
    });
    if (!tokenByToken && (prefill.size() > 1 || *prefill.begin() != 0))
      for (int64_t p : prefill) {
        if (p < 1 || p > (int64_t(1) << 20)) {
          module.emitError() << "glm-emit-kernels: prefill chunk " << p
                             << " is out of range: give 1..1048576 tokens, "
                                "or 0 alone for no prefill graphs "
                                "(prefill-chunks)";
          return failure();
        }
        out.push_back({true, p, std::min(p, kMaxTemplateBatch)});
      }
    return out;
  }

  /// A kernel built by codegen, or the error that stopped it.
  struct BuiltKernel {
#ifdef GLM_CODEGEN_AVAILABLE
    ::glm::plan::KernelDef kernel;
#endif
    std::string error;
  };

  /// Generates the sources (codegen) and, with `compile`, PTX/CUBIN for every
  /// arch through NVRTC. NVRTC dominates the compile time, so the distinct
  /// kernels are built on all cores; results keep byName's order, so plans
  /// stay byte-identical. With `background`, only the sources are made here
  /// and NVRTC runs on background threads for glm-emit-plan to collect.
  std::vector<BuiltKernel> buildAll(const std::map<std::string, Spec> &byName,
                                    const std::vector<std::string> &archList,
                                    glmc::KernelBuilds *background) {
    std::vector<BuiltKernel> out(byName.size());
#ifdef GLM_CODEGEN_AVAILABLE
    std::vector<::glm::codegen::KernelSpec> specs;
    for (auto &[name, s] : byName)
      specs.push_back({s.family, {s.args.begin(), s.args.end()}, archList});
    // The big templates first, so no core idles at the end.
    std::vector<size_t> order(specs.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    // Longest first (NVRTC time grows with the family's code and BATCH:
    // moe_trellis at batch 8 takes seconds, a norm a tenth of one), so the
    // last kernel to finish is a short one.
    auto weight = [&](size_t i) {
      const std::string &f = specs[i].family;
      return f == "moe_trellis" || f == "expert_gemv_trellis" ? 0
             : f == "gemm_trellis" || f == "gemm_trellis_grouped" ? 1
             : f == "dense_trellis" || f == "dense_gemv_trellis" ||
                     f == "mla_decode"
                 ? 2
                 : 3;
    };
    auto batch = [&](size_t i) {
      for (const auto &[k, v] : specs[i].args)
        if (k == "batch")
          return std::atoi(v.c_str());
      return 0;
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::make_pair(weight(a), -batch(a)) <
             std::make_pair(weight(b), -batch(b));
    });
    const bool doCompile = compile && ::glm::codegen::nvrtcAvailable();
    if (background && doCompile) {
      // Sources now (string work), NVRTC in the background, big kernels
      // first; emit-plan puts each result back by kernel name.
      std::vector<std::function<void(glmc::KernelBuildResult &)>> jobs;
      for (size_t i : order) {
        try {
          out[i].kernel = ::glm::codegen::buildKernel(specs[i], false);
        } catch (const std::exception &ex) {
          out[i].error = ex.what();
          continue;
        }
        jobs.push_back([k = out[i].kernel, archList,
                        withCubin = bool(cubin)](glmc::KernelBuildResult &r) {
          r.name = k.name;
          for (const std::string &arch : archList) {
            ::glm::plan::KernelBinary bin =
                compileCached(k, arch, withCubin);
            r.archs.push_back(arch);
            r.ptx.push_back(std::move(bin.ptx));
            r.cubin.emplace_back(bin.cubin.begin(), bin.cubin.end());
          }
        });
      }
      background->start({}, std::move(jobs), ::glm::rt::hardwareThreads());
      return out;
    }
    // Big kernels first (order), one kernel per task on every core.
    ::glm::rt::parallelFor(
        int64_t(specs.size()), 1, 0, [&](int64_t b, int64_t e, int) {
          for (int64_t n = b; n < e; ++n) {
            size_t i = order[n];
            try {
              out[i].kernel = ::glm::codegen::buildKernel(specs[i], false);
              if (doCompile)
                for (const std::string &arch : archList)
                  out[i].kernel.binaries.push_back(
                      compileCached(out[i].kernel, arch, cubin));
            } catch (const std::exception &ex) {
              out[i].error = ex.what();
            }
          }
        });
#endif
    return out;
  }

  LogicalResult describeKernel(ModuleOp module, const BuiltKernel &built,
                               SmallVector<NamedAttribute> &fields) {
#ifdef GLM_CODEGEN_AVAILABLE
    OpBuilder b(&getContext());
    if (!built.error.empty())
      return module.emitError() << "glm-emit-kernels: " << built.error;
    const ::glm::plan::KernelDef &k = built.kernel;
    {
      fields.push_back(b.getNamedAttr("source", b.getStringAttr(k.source)));
      fields.push_back(
          b.getNamedAttr("source_hash", b.getStringAttr(k.sourceHash)));
      fields.push_back(b.getNamedAttr("cache_key", b.getStringAttr(k.cacheKey)));
      SmallVector<Attribute> opts, bins;
      for (const std::string &o : k.nvrtcOptions)
        opts.push_back(b.getStringAttr(o));
      fields.push_back(b.getNamedAttr("options", b.getArrayAttr(opts)));
      for (const ::glm::plan::KernelBinary &bin : k.binaries)
        bins.push_back(b.getDictionaryAttr({
            b.getNamedAttr("arch", b.getStringAttr(bin.arch)),
            b.getNamedAttr("ptx", b.getStringAttr(bin.ptx)),
            b.getNamedAttr("cubin",
                           b.getStringAttr(StringRef(
                               reinterpret_cast<const char *>(bin.cubin.data()),
                               bin.cubin.size()))),
        }));
      fields.push_back(b.getNamedAttr("binaries", b.getArrayAttr(bins)));
      fields.push_back(b.getNamedAttr(
          "block", b.getI64IntegerAttr(k.launch.blockX)));
      return success();
    }
#else
    if (compile)
      return module.emitError()
             << "glm-emit-kernels: this build has no codegen; run without "
                "compile=true";
    return success();
#endif
  }
};

} // namespace
