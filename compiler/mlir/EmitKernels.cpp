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
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

#ifdef GLM_CODEGEN_AVAILABLE
#include "codegen/codegen.h"
#include "runtime/base/error.h"
#endif

#include <atomic>
#include <map>
#include <thread>
#include <set>
#include <string>

using namespace mlir;
using namespace mlir::glm;

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

constexpr int kDecodeBatch = 1; // decode kernels are instantiated for batch 1

static std::string str(int64_t v) { return std::to_string(v); }

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

/// Context the specs need: weight types and the KV dtype.
struct SpecContext {
  SymbolTable &symbols;
  std::string kvDtype; // "bf16" | "fp8"
  Type typeOf(StringRef sym) {
    if (auto w = symbols.lookup<WeightOp>(sym))
      return w.getType();
    return {};
  }
};

static Spec gemvSpec(Type format) {
  if (auto t = dyn_cast<TrellisType>(format))
    return {"dense_gemv_trellis",
            {{"K", t.isResolved() && t.getTwiceBits() % 2 == 0
                       ? str(t.getTwiceBits() / 2)
                       : "?"},
             {"codebook", cbName(t.getCodebook())},
             {"e4m3", t.getE4m3() ? "1" : "0"},
             {"batch", str(kDecodeBatch)},
             {"threads", "256"}}};
  auto d = cast<DenseType>(format);
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
  default: // f32, f16, int4: no GPU template yet (CPU executor only)
    fmt = stringifyDenseFormat(d.getFormat()).str();
    break;
  }
  return {"dense_gemv",
          {{"format", fmt},
           {"scale", scale},
           {"batch", str(kDecodeBatch)},
           {"threads", "256"}}};
}

/// The kernels one op launches, in order; empty for collectives (NCCL).
static SmallVector<Spec> specsFor(Operation *op, SpecContext &ctx) {
  SmallVector<Spec> out;
  std::string kv = ctx.kvDtype == "fp8" ? "e4m3" : "bf16";
  if (auto f = dyn_cast<FusedExpertGemvOp>(op)) {
    if (f.getCodebook()) {
      std::string digits;
      for (int32_t w : f.getWidths())
        digits += w % 2 ? "?" : str(w / 2);
      out.push_back({"hadamard128", {{"vt", "f32"}, {"threads", "128"}}});
      out.push_back({"expert_gemv_trellis",
                     {{"widths", digits},
                      {"codebook", cbName(*f.getCodebook())},
                      {"e4m3", f.getE4m3() ? "1" : "0"},
                      {"batch", str(kDecodeBatch)},
                      {"sv", "f16"},
                      {"threads", "256"}}});
    } else {
      out.push_back(gemvSpec(*f.getDenseFormat()));
    }
    out.push_back({"moe_reduce", {{"threads", "256"}}});
  } else if (auto g = dyn_cast<DenseGemvOp>(op)) {
    out.push_back(gemvSpec(g.getFormat()));
  } else if (auto m = dyn_cast<MlpOp>(op)) {
    // Gate/up and down GEMVs of the dense SwiGLU.
    Type t = ctx.typeOf(m.getGate());
    if (t) {
      out.push_back(gemvSpec(t));
      out.push_back(gemvSpec(t));
    }
  } else if (auto a = dyn_cast<AttentionDecodeOp>(op)) {
    int64_t perRank = a.getHeads() / a.getShard().getRanks();
    int64_t tile = 1;
    while (tile * 2 <= 16 && perRank % (tile * 2) == 0)
      tile *= 2;
    out.push_back({"rope", {{"rope_dim", str(a.getQkRope())}}});
    out.push_back({"mla_decode",
                   {{"lora", str(a.getKvLora())},
                    {"rope", str(a.getQkRope())},
                    {"kv", kv},
                    {"heads", str(tile)},
                    {"threads", "256"}}});
  } else if (auto ix = dyn_cast<IndexerTopkOp>(op)) {
    out.push_back({"rope", {{"rope_dim", str(ix.getRope())}}});
    out.push_back({"indexer_scores",
                   {{"head_dim", str(ix.getHeadDim())},
                    {"n_heads", str(ix.getHeads())},
                    {"kt", "bf16"},
                    {"threads", "256"}}});
    out.push_back({"topk", {{"threads", "256"}}});
  } else if (auto n = dyn_cast<RmsNormOp>(op)) {
    out.push_back({"rms_norm",
                   {{"wt", storage(ctx.typeOf(n.getWeight()))},
                    {"threads", "256"}}});
  } else if (auto n = dyn_cast<AddRmsNormOp>(op)) {
    out.push_back({"rms_norm",
                   {{"wt", storage(ctx.typeOf(n.getWeight()))},
                    {"threads", "256"}}});
  } else if (auto e = dyn_cast<EmbedOp>(op)) {
    Type t = ctx.typeOf(e.getWeight());
    std::string fmt = "bf16";
    if (auto d = dyn_cast_or_null<DenseType>(t))
      fmt = d.getFormat() == DenseFormat::Fp8Row ? "fp8_row"
                                                 : storage(t);
    out.push_back({"embed", {{"format", fmt}, {"threads", "256"}}});
  } else if (auto r = dyn_cast<RouterOp>(op)) {
    out.push_back({"router",
                   {{"experts", str(r.getExperts())},
                    {"topk", str(r.getTopK())},
                    {"threads", "256"}}});
  } else if (isa<SampleOp>(op)) {
    out.push_back({"argmax", {{"threads", "256"}}});
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
    OpBuilder b(&getContext());
    SymbolTable symbols(module);
    SpecContext sctx{symbols, "bf16"};
    if (auto kv = module->getAttrOfType<DictionaryAttr>("glm.kv"))
      if (auto d = kv.getAs<StringAttr>("dtype"))
        sctx.kvDtype = d.str();
    std::map<Spec, std::string> names; // distinct specs → kernel name
    std::set<Spec> unsupported;         // warned once each
    std::map<std::string, Spec> byName;
    module.walk([&](Operation *op) {
      if (!op->getDialect() || op->getDialect()->getNamespace() != "glm")
        return;
      SmallVector<Attribute> opKernels;
      for (Spec &s : specsFor(op, sctx)) {
        if (unsupported.count(s))
          continue;
        auto it = names.find(s);
        if (it == names.end()) {
          std::string name = plainName(s);
#ifdef GLM_CODEGEN_AVAILABLE
          ::glm::codegen::KernelSpec ks{s.family, {s.args.begin(), s.args.end()},
                                      archList};
          try {
            name = ::glm::codegen::kernelName(ks);
          } catch (const ::glm::rt::Error &e) {
            // No GPU template for this instance (f32 weights, half-integer
            // widths): the plan still runs on the CPU executor.
            op->emitWarning() << "no GPU kernel: " << e.what();
            unsupported.insert(s);
            continue;
          }
#endif
          it = names.emplace(s, name).first;
          byName.emplace(name, s);
        }
        opKernels.push_back(b.getStringAttr(it->second));
      }
      if (!opKernels.empty())
        op->setAttr("glm.kernels", b.getArrayAttr(opKernels));
    });

    SmallVector<Attribute> specs;
    std::vector<BuiltKernel> built = buildAll(byName, archList);
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
  /// stay byte-identical.
  std::vector<BuiltKernel> buildAll(const std::map<std::string, Spec> &byName,
                                    const std::vector<std::string> &archList) {
    std::vector<BuiltKernel> out(byName.size());
#ifdef GLM_CODEGEN_AVAILABLE
    std::vector<::glm::codegen::KernelSpec> specs;
    for (auto &[name, s] : byName)
      specs.push_back({s.family, {s.args.begin(), s.args.end()}, archList});
    std::atomic<size_t> next{0};
    bool doCompile = compile;
    auto worker = [&] {
      for (size_t i; (i = next++) < specs.size();) {
        try {
          out[i].kernel = ::glm::codegen::buildKernel(specs[i], doCompile);
        } catch (const std::exception &e) {
          out[i].error = e.what();
        }
      }
    };
    unsigned n = std::max(1u, std::min<unsigned>(
                                  std::thread::hardware_concurrency(),
                                  unsigned(specs.size())));
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < n; ++t)
      pool.emplace_back(worker);
    worker();
    for (std::thread &t : pool)
      t.join();
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
