//===- EmitPlan.cpp - glm-emit-plan: fill plans/plan.h and write it -------===//
//
// Per rank: one weight buffer holding every byte range the rank binds
// (Bindings.h), one KV buffer per attention layer (+ index keys of full
// indexer layers), the activation arena of glm-plan-memory, and the decode
// graph: one OpDef per kernel launch or collective, each with the weight
// bytes it reads per token. Kernels come from glm-emit-kernels. The plan is
// serialised deterministically (plans/plan.h) to `output`.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Bindings.h"
#include "compiler/mlir/KernelBuilds.h"
#include "compiler/mlir/Passes.h"
#include "compiler/mlir/Tuning.h"
#include "codegen/dense_gemv_abi.h"
#include "codegen/dense_trellis_abi.h"
#include "codegen/gemm_dense_abi.h"
#include "codegen/mla_prefill_abi.h"
#include "codegen/moe_trellis_abi.h"
#include "codegen/templates/flash_math.cuh"
#include "codegen/indexer_abi.h"
#include "codegen/templates/indexer_scores_mma.cuh"
#include "codegen/templates/kv_cache.cuh"
#include "codegen/templates/mla_split_layout.cuh"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#ifdef GLM_PLANS_AVAILABLE
#include "compiler/mlir/KernelArgs.h"
#include "plans/plan.h"
#include "runtime/base/error.h"
#include "runtime/base/progress.h"
#endif

using namespace mlir;
using namespace mlir::glm;
using glmc::dtOf;
using glmc::skOf;

namespace glmc {
#define GEN_PASS_DEF_GLMEMITPLAN
#include "compiler/mlir/Passes.h.inc"
} // namespace glmc

namespace {

constexpr uint64_t kAlign = 256;
static uint64_t alignUp(uint64_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

static int64_t intAttr(DictionaryAttr d, StringRef k, int64_t dflt = 0) {
  if (d)
    if (auto a = d.getAs<IntegerAttr>(k))
      return a.getInt();
  return dflt;
}
static std::string strAttr(DictionaryAttr d, StringRef k) {
  if (d)
    if (auto a = d.getAs<StringAttr>(k))
      return a.str();
  return "";
}

#ifdef GLM_PLANS_AVAILABLE
namespace gp = ::glm::plan;

/// The LM head's GEMV (glm-fuse turns LmHeadOp into one): its rows are
/// the step's logits, the sampler's input directly or through the
/// vocabulary split's gather.
static bool isLogitsGemv(Operation *op) {
  auto g = dyn_cast<DenseGemvOp>(op);
  if (!g)
    return false;
  if (g.getShard() && g.getShard()->getKind() == ShardKind::Vocab)
    return true;
  return llvm::any_of(op->getUsers(),
                      [](Operation *u) { return isa<SampleOp>(u); });
}

static gp::OpKind opKind(Operation *op) {
  if (isa<FusedExpertGemvOp>(op))
    return gp::OpKind::ExpertGemv;
  if (auto g = dyn_cast<DenseGemvOp>(op))
    return g.getShard() && g.getShard()->getKind() == ShardKind::Vocab
               ? gp::OpKind::LmHead
               : gp::OpKind::DenseGemv;
  if (isa<MlpOp>(op))
    return gp::OpKind::DenseGemv;
  if (isa<AttentionDecodeOp, MlaOp>(op))
    return gp::OpKind::MlaAttention;
  if (isa<IndexerTopkOp, DsaIndexerOp>(op))
    return gp::OpKind::IndexerTopk;
  if (isa<RmsNormOp, AddRmsNormOp>(op))
    return gp::OpKind::RmsNorm;
  if (isa<EmbedOp>(op))
    return gp::OpKind::Embed;
  if (isa<RouterOp>(op))
    return gp::OpKind::Router;
  if (isa<SampleOp>(op))
    return gp::OpKind::Argmax;
  if (isa<AllReduceOp>(op))
    return gp::OpKind::AllReduce;
  if (isa<AllGatherOp>(op))
    return gp::OpKind::AllGather;
  if (isa<AddOp>(op))
    return gp::OpKind::Add;
  if (isa<LmHeadOp>(op))
    return gp::OpKind::LmHead;
  return gp::OpKind::Other;
}

static gp::Projection projectionOf(int32_t p) {
  switch (p) {
  case 0:
    return gp::Projection::Gate;
  case 1:
    return gp::Projection::Up;
  case 2:
    return gp::Projection::Down;
  }
  return gp::Projection::None;
}

/// Layer of an op, -1 when it has none.
static int32_t layerOf(Operation *op) {
  if (auto l = op->getAttrOfType<IntegerAttr>("layer"))
    return l.getInt();
  return -1;
}

/// A graph bucket of glm-emit-kernels (`glm.buckets`).
struct Bucket {
  bool prefill = false;
  int64_t size = 1; // decode: sequences; prefill: tokens
  /// The MTP draft graph of `size` rows (the ops after glm.draft_begin),
  /// launching the kernels of decode bucket `kernels`.
  bool draft = false;
  size_t kernels = 0; // index into glm.bucket_kernels
};

/// The module's buckets; a module without glm-emit-kernels has decode 1.
static std::vector<Bucket> bucketsOf(ModuleOp module) {
  std::vector<Bucket> out;
  if (auto list = module->getAttrOfType<ArrayAttr>("glm.buckets"))
    for (Attribute a : list) {
      auto d = cast<DictionaryAttr>(a);
      out.push_back({strAttr(d, "kind") == "prefill", intAttr(d, "size", 1),
                     false, out.size()});
    }
  if (out.empty())
    out.push_back({false, 1, false, 0});
  // A module with glm.draft_begin drafts as many rows as a decode bucket
  // runs sequences, with that bucket's kernels.
  bool drafting = false;
  module.walk([&](DraftBeginOp) { drafting = true; });
  if (drafting)
    for (size_t i = 0, n = out.size(); i < n; ++i)
      if (!out[i].prefill)
        out.push_back({false, out[i].size, true, out[i].kernels});
  return out;
}

/// Layer of every op of the step: its `layer` attribute, else the layer of
/// the weight it reads, else (collectives) that of the op it reduces. Ops
/// after the layer stack (final norm, LM head, its all-gather, sampling) are
/// the head, `numLayers`; only the embedding stays -1.
static llvm::DenseMap<Operation *, int32_t>
layersOf(SymbolTable &symbols, Block &body, int64_t numLayers) {
  llvm::DenseMap<Operation *, int32_t> out;
  bool inStack = false;
  for (Operation &op : body) {
    int32_t layer = layerOf(&op);
    if (layer < 0)
      for (NamedAttribute attr : op.getAttrs())
        if (auto sym = dyn_cast<FlatSymbolRefAttr>(attr.getValue()))
          if (Operation *w = symbols.lookup(sym.getValue()))
            if (int32_t l = layerOf(w); l >= 0) {
              layer = l;
              break;
            }
    if (layer < 0 && isa<AllReduceOp, AllGatherOp>(op))
      if (Operation *src = op.getOperand(0).getDefiningOp())
        layer = out.lookup(src);
    if (layer >= 0)
      inStack = true;
    else if (inStack && !isa<EmbedOp>(op))
      layer = int32_t(numLayers);
    out[&op] = layer;
  }
  return out;
}

/// The trellis expert tables of one MoE layer's group of experts on this
/// rank, as the expert kernels read them (codegen/templates/
/// expert_gemv_trellis.cuh, moe_trellis.cuh): per (expert, projection, half)
/// a tile pointer (a relocation into the weight buffer, null for halves of
/// other ranks) and a width; the side vectors widened to fp32 by bindings of
/// their pack bytes into the tables (exlr8: svh/suh per half over a pitch of
/// `pitch` channels, su_block/sv_block per expert, signs.in/out per layer;
/// EXL3: suh/svh of every projection).
struct ExpertTables {
  gp::ArgDef tiles, widths, guSvh, downSuh, guSuBlock, downSvBlock, suhIn,
      downSvh, signsIn, signsOut;
  std::string digits; // widths present, ascending ("234")
};

/// Scratch rows that only one op's launches use, each op writing them
/// before reading them, so that all ops share one region of them
/// (RankState::opLocalBuffer): a MoE layer's gathered rows, sums and
/// rotated input; an attention's absorbed queries, context and weights
/// (decode and prefill); the indexer's queries, keys, scores and flags; a
/// dense MLP's gate, up and activation; a trellis GEMV's rotated input and
/// raw output. Not here: what a later op reads (dsa_sel), what must keep
/// its contents between launches (counters, tables), the rest (small).
static bool opLocalScratch(const std::string &name) {
  static const std::set<std::string> kNames = {
      "moe_x",     "moe_zgu",   "moe_act",   "moe_zd",      "expert_xh",
      "mla_qabs",  "mla_ctx",   "mla_p",     "mla_inv",     "mla_prefill_p",
      "indexer_q",
      "indexer_k", "dsa_score", "dsa_flags", "mlp_gate",    "mlp_up",
      "mlp_act",   "trellis_xh", "trellis_z"};
  return kNames.count(name.substr(0, name.find('.'))) > 0;
}

/// Per-rank state shared by the graphs: buffers of values, where each
/// weight tensor starts in the weight buffer, KV buffers per layer and the
/// scratch buffers kernels need between launches.
struct RankState {
  gp::RankPlan &rp;
  llvm::DenseMap<Value, uint32_t> &bufferOf;
  std::map<std::string, uint64_t> weightOffset; // tensor / bank → offset
  std::map<int64_t, uint32_t> kvOf, keysOf;      // layer → KvCache buffer
  uint64_t top = 0;                              // arena end so far
  uint64_t maxTokens = 1;
  int64_t maxContext = 0;
  std::map<std::string, uint32_t> scratch;
  llvm::DenseMap<Operation *, int32_t> collectiveOf; // op → collective
  llvm::DenseMap<Operation *, int32_t> fixedCollectiveOf; // (int64 sums)
  /// (tensor, role) → offset in the weight buffer: a weight's byte ranges
  /// by role ("data", "scale", "suh", ...).
  std::map<std::pair<std::string, std::string>, uint64_t> roleOffset;
  /// HF expert banks laid out [experts][rows][cols] per projection:
  /// (layer, shared?, projection 0 gate / 1 up / 2 down) → offset of expert
  /// 0 and bytes per expert.
  using BankMap = std::map<std::tuple<int64_t, bool, int32_t>,
                           std::pair<uint64_t, uint64_t>>;
  BankMap expertBank;
  /// The Io rows the runtime writes before a step (plan_executor.h).
  uint32_t ioTokens = 0, ioPositions = 0, ioSlots = 0;
  /// Paged KV: io.pages (the slots' page tables) and the page's rows (0 =
  /// unpaged); the caches hold kvPages pages.
  uint32_t ioPages = 0;
  int64_t kvPageTokens = 0, kvPages = 0;
  /// io.logit_rows: {first, last} rows of a prefill chunk whose logits the
  /// runtime reads (the LM head's gemm_dense window); -1 without prefill.
  int64_t ioLogitRows = -1;
  /// (pack file, file offset) → offset in the weight buffer of each bound
  /// range (the expert tables point at their parts' tiles).
  std::map<std::pair<std::string, uint64_t>, uint64_t> rangeOffset;
  std::map<std::string, ExpertTables> tables; // by layer, group, pitch
  int64_t kvSlots = 1; // sequences the KV buffers hold
  /// A launch with sum = fixed_out (templates/fixed_point.cuh): the int64
  /// rows it writes, their width, and the output rotation its kernel would
  /// have applied (null = none), which fixed_to_f32 applies after the
  /// all-reduce of that op's result.
  struct FixedSum {
    gp::ArgDef rows, post;
    int64_t n = 0;
  };
  llvm::DenseMap<Operation *, FixedSum> fixedSum;
  /// Names of the scratch buffers sized by max_context (the budget's
  /// suggestions scale them with --max-context); null = not collected.
  std::set<std::string> *contextScratch = nullptr;
  /// Other per-sequence state by buffer name (GLM-5.3-Flash: "kda_state.L",
  /// "kda_conv.L", "kpool_ring.L").
  std::map<std::string, uint32_t> stateOf;

  /// A Scratch buffer whose contents are `init` at load (a table of ints
  /// or bytes, created once per name).
  uint32_t tableBuffer(const std::string &name, std::vector<uint8_t> init) {
    auto it = scratch.find("table." + name);
    if (it != scratch.end())
      return it->second;
    uint32_t index = scratchBuffer("table." + name, init.size());
    rp.buffers[index].dtype = gp::DType::U8;
    rp.buffers[index].init = std::move(init);
    return index;
  }

  /// A Scratch buffer of `bytes` (created once per name, at the arena end).
  uint32_t scratchBuffer(const std::string &name, uint64_t bytes) {
    auto it = scratch.find(name);
    if (it != scratch.end() && rp.buffers[it->second].bytes >= bytes)
      return it->second;
    gp::BufferDef b;
    b.name = "scratch." + name;
    // A later use that needs more (a layer with more expert slots on this
    // rank) gets a larger buffer of its own: the first one's rows would
    // overrun it.
    if (it != scratch.end())
      b.name += "." + std::to_string(bytes);
    b.kind = gp::BufferKind::Scratch;
    b.dtype = gp::DType::F32;
    b.bytes = alignUp(std::max<uint64_t>(bytes, 4));
    b.arenaOffset = top;
    top += b.bytes;
    uint32_t index = rp.buffers.size();
    rp.buffers.push_back(b);
    scratch[name] = index;
    return index;
  }
  /// Bytes of shared scratch sized by the largest step's rows (the budget
  /// refusal's estimate for smaller --prefill-chunks).
  uint64_t rowScratch = 0;

  // ------------------------------------------------ op-local scratch ----
  // Rows that one op's launches write before they read them and that no
  // later op reads (opLocalScratch names them). Ops run one after another,
  // so the op-local buffers of all ops share one region after the other
  // scratch, each op's own placed apart from each other. Offsets are
  // region-relative until finishOpLocal.
  std::vector<uint32_t> opLocalInUse;             // the op being emitted
  std::vector<std::vector<uint32_t>> opLocalSets; // each earlier op's
  std::vector<uint32_t> opLocal;                  // every op-local buffer
  uint64_t opLocalBytes = 0;                      // the region's size
  int opLocalVersions = 0; // names of copies placed apart from an earlier one

  /// A new op's emission starts: its op-local buffers may reuse any bytes.
  void beginOp() {
    if (!opLocalInUse.empty())
      opLocalSets.push_back(opLocalInUse);
    opLocalInUse.clear();
  }

  /// The region's bytes that scale with max_context, for the budget
  /// refusal's estimate: what the region holds beyond the most any op needs
  /// of buffers that do not (`context`: names of context-sized scratch).
  uint64_t opLocalContextBytes(const std::set<std::string> &context) {
    beginOp(); // the last op's set
    uint64_t fixed = 0;
    for (const std::vector<uint32_t> &set : opLocalSets) {
      uint64_t n = 0;
      for (uint32_t b : set)
        if (!context.count(rp.buffers[b].name))
          n += rp.buffers[b].bytes;
      fixed = std::max(fixed, n);
    }
    return opLocalBytes > fixed ? opLocalBytes - fixed : 0;
  }

  bool overlapsInUse(uint64_t off, uint64_t bytes, uint32_t self) const {
    for (uint32_t u : opLocalInUse) {
      const gp::BufferDef &o = rp.buffers[u];
      if (u != self && off < o.arenaOffset + o.bytes && o.arenaOffset < off + bytes)
        return true;
    }
    return false;
  }

  /// An op-local buffer of `bytes` named `name`: the one made by an earlier
  /// op when it is large enough and clear of this op's others, else a new
  /// one at the region's first offset clear of them.
  uint32_t opLocalBuffer(const std::string &name, uint64_t bytes) {
    bytes = alignUp(std::max<uint64_t>(bytes, 4));
    auto it = scratch.find("local." + name);
    if (it != scratch.end() && rp.buffers[it->second].bytes >= bytes &&
        !overlapsInUse(rp.buffers[it->second].arenaOffset,
                       rp.buffers[it->second].bytes, it->second)) {
      if (!llvm::is_contained(opLocalInUse, it->second))
        opLocalInUse.push_back(it->second);
      return it->second;
    }
    uint64_t off = 0;
    for (bool moved = true; moved;) { // first fit past the buffers in use
      moved = false;
      for (uint32_t u : opLocalInUse) {
        const gp::BufferDef &o = rp.buffers[u];
        if (off < o.arenaOffset + o.bytes && o.arenaOffset < off + bytes) {
          off = o.arenaOffset + o.bytes;
          moved = true;
        }
      }
    }
    gp::BufferDef b;
    b.name = "scratch." + name;
    if (it != scratch.end())
      b.name += ".v" + std::to_string(++opLocalVersions);
    b.kind = gp::BufferKind::Scratch;
    b.dtype = gp::DType::F32;
    b.bytes = bytes;
    b.arenaOffset = off;
    opLocalBytes = std::max(opLocalBytes, off + bytes);
    const uint32_t index = rp.buffers.size();
    rp.buffers.push_back(b);
    scratch["local." + name] = index;
    opLocal.push_back(index);
    opLocalInUse.push_back(index);
    return index;
  }

  /// After the last graph: the region goes at the arena's end.
  void finishOpLocal() {
    const uint64_t base = alignUp(top);
    for (uint32_t b : opLocal)
      rp.buffers[b].arenaOffset += base;
    if (!opLocal.empty())
      top = base + opLocalBytes;
  }
};

static gp::ArgDef bufferArg(uint32_t buffer, const std::string &label,
                            uint64_t rowBytes = 0, uint64_t offset = 0) {
  gp::ArgDef a;
  a.kind = gp::ArgKind::Buffer;
  a.buffer = int32_t(buffer);
  a.offset = offset;
  a.rowBytes = rowBytes;
  a.name = label;
  return a;
}
static gp::ArgDef i32Arg(int64_t v, const std::string &label) {
  gp::ArgDef a;
  a.kind = gp::ArgKind::I32;
  a.i = v;
  a.name = label;
  return a;
}
static gp::ArgDef f32Arg(double v, const std::string &label) {
  gp::ArgDef a;
  a.kind = gp::ArgKind::F32;
  a.f = float(v);
  a.name = label;
  return a;
}
/// A value the runtime supplies at launch: "batch" (rows of this launch),
/// "positions", "context_len", per-layer expert tables built at load from
/// the rank's bindings ("expert_tiles", ...), or "null".
static gp::ArgDef runtimeArg(const std::string &name) {
  gp::ArgDef a;
  a.kind = gp::ArgKind::Runtime;
  a.name = name;
  return a;
}

static uint64_t ceilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/// Blocks per row of rms_norm_rows / add_rms_norm (1024 threads; every
/// block sums the whole row in the same order, so any count gives the same
/// bits). A decode step's few rows spread each row over ceil(n / 1024)
/// blocks, each thread's values in registers (n <= 8 * 1024), for latency;
/// from 128 rows (prefill chunks) the rows alone fill the SMs, and more
/// blocks a row only re-read it: 6 a row cost 306 us a launch at 2048 x
/// 6144 on the H200 (docs/perf.md, session 23).
static uint64_t normBlocksPerRow(uint64_t n, uint64_t rows) {
  const uint64_t K = ceilDiv(n, 1024);
  return rows >= 128 || K > 8 ? 1 : K;
}

/// Bytes per element of a dense weight format (0 = not a plain row layout).
static uint64_t elemBytes(Type t) {
  auto d = dyn_cast_or_null<DenseType>(t);
  if (!d)
    return 0;
  switch (d.getFormat()) {
  case DenseFormat::F32:
    return 4;
  case DenseFormat::F16:
  case DenseFormat::BF16:
    return 2;
  case DenseFormat::Fp8Block128:
  case DenseFormat::Fp8Row:
  case DenseFormat::Mxfp8:
    return 1;
  default:
    return 0;
  }
}

/// What one kernel launch of `op` needs: its arguments in the family's
/// parameter order (FamilyInfo::kernelParams, checked by checkKernelArgs)
/// and its launch shape for `rows` tokens per launch.
struct LaunchInfo {
  std::vector<gp::ArgDef> args;
  gp::LaunchDims dims;
  /// The one weight this launch reads (an op's k-th GEMV); empty = the
  /// op's weights not claimed by another launch.
  std::string weightSym;
  /// Nothing for this rank to do (a KDA layer with fewer heads than
  /// ranks): the launch is left out of its graph.
  bool skip = false;
};

static bool isTrellisGemv(const std::string &family) {
  return family == "dense_trellis" || family == "dense_gemv_trellis" ||
         family == "gemm_trellis";
}
/// SMs of the first target arch: dense_trellis's split-k (and so its grid)
/// follows the device's SM count, which a plan fixes per target (the
/// executor uses the device's own count: the same on the target).
/// "model.layers.3.self_attn.q_b_proj.weight" -> "q_b",
/// "kv_a_proj_with_mqa" -> "kv_a", "lm_head.weight" -> "lm_head": the part
/// of a weight's name an op label needs.
static std::string shortWeightName(StringRef sym) {
  sym.consume_back(".weight");
  StringRef last = sym.rsplit('.').second.empty() ? sym : sym.rsplit('.').second;
  if (!last.consume_back("_proj_with_mqa"))
    last.consume_back("_proj");
  return last.str();
}

static int smsOfArch(const std::string &arch) {
  if (arch == "sm_121")
    return 48; // GB10 (DGX Spark)
  if (arch == "sm_100")
    return 148;
  return 132; // sm_90: H100/H200 SXM
}
static bool isGemv(const std::string &family) {
  return isTrellisGemv(family) || family == "dense_gemv" ||
         family == "gemm_dense" || family == "dense_gemv_f32" ||
         family == "gemv_any";
}
/// Is launch `i` of `seq` the input or output rotation of a trellis GEMV?
static bool trellisNeighbour(const std::vector<std::string> &seq, size_t i) {
  return (i + 1 < seq.size() && isTrellisGemv(seq[i + 1])) ||
         (i > 0 && isTrellisGemv(seq[i - 1]));
}

/// One GEMV of an op: its weight, input and output and the rows this rank
/// computes.
struct GemvUse {
  StringRef sym;
  gp::ArgDef x, y;
  int64_t in = 0, out = 0;  // the weight's [out, in]
  int64_t rowBegin = 0;     // first output row of this rank
  int64_t outRows = 0;      // output rows of this rank
  int64_t outStride = 0;    // floats between the output's token rows
};


/// HF names of the weights glm.kda_decode reads (conv taps, dt_bias, A_log,
/// o_norm): the kernel reads them in one dtype (wdt), so 16-bit taps are
/// widened to fp32 at load like the vectors beside them.
static std::set<std::string> kdaWeightNames(ModuleOp module) {
  std::set<std::string> out;
  SymbolTable symbols(module);
  module.walk([&](KdaDecodeOp k) {
    for (Attribute a : k.getWeights())
      if (auto w =
              symbols.lookup<WeightOp>(cast<FlatSymbolRefAttr>(a).getValue()))
        out.insert(w.getName().str());
  });
  return out;
}

/// A 16-bit dense weight the load widens to fp32 (widenedTransform): every
/// vector (norm weights, biases: the helper kernels read them as fp32) and
/// the KDA taps.
static bool widenedAtLoad(WeightOp w, const std::set<std::string> &kda) {
  auto d = w ? dyn_cast<DenseType>(w.getType()) : DenseType();
  if (!d ||
      (d.getFormat() != DenseFormat::BF16 && d.getFormat() != DenseFormat::F16))
    return false;
  return w.getShape().size() == 1 || kda.count(w.getName().str());
}

class ArgBuilder {
public:
  ArgBuilder(ModuleOp module, SymbolTable &symbols, RankState &st, int64_t rank,
             int64_t ranks, const std::string &layout)
      : module(module), symbols(symbols), st(st), rank(rank), ranks(ranks),
        layout(layout), tunings(glmc::tuningsOf(module)),
        kdaWeights(kdaWeightNames(module)) {
    for (PackOp p : module.getOps<PackOp>())
      packOp = p;
  }

  /// Launch `launch` of `op`, whose launches run the families `seq`.
  LaunchInfo build(const gp::KernelDef &k, Operation &op, int64_t rows,
                   size_t launch, const std::vector<std::string> &seq);
  /// The graph being built is a prefill chunk's.
  bool prefill = false;

private:
  ModuleOp module;
  SymbolTable &symbols;
  RankState &st;
  int64_t rank, ranks;
  std::string layout;
  glmc::Tunings tunings; // glm.tuning: the compile's launch tunings
  double ropeTheta = -1; // found on first use
  std::set<std::string> kdaWeights; // kdaWeightNames
  bool launchFixedOut = false; // the launch being built has sum = fixed_out

  /// Bytes per token row of a value's buffer (0 when not per token).
  uint64_t rowBytesOf(Value v) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getRank() == 0 || !ShapedType::isDynamic(t.getShape()[0]))
      return 0;
    // From the row's type, not the buffer's size: buffers are rounded up
    // to 256 bytes, which would stretch short rows (two int32 expert ids
    // of 16 tokens: 128 bytes, stored in 256).
    Type e = t.getElementType();
    if (e.isIntOrFloat()) {
      uint64_t row = (e.getIntOrFloatBitWidth() + 7) / 8;
      bool known = true;
      for (int64_t d : t.getShape().drop_front())
        known &= !ShapedType::isDynamic(d), row *= uint64_t(d);
      if (known)
        return row;
    }
    return st.rp.buffers[st.bufferOf.lookup(v)].bytes / st.maxTokens;
  }
  gp::ArgDef in(Operation &op, unsigned i, const std::string &label) {
    Value v = op.getOperand(i);
    return bufferArg(st.bufferOf.lookup(v), label, rowBytesOf(v));
  }
  gp::ArgDef out(Operation &op, unsigned i, const std::string &label,
                 uint64_t offset = 0) {
    Value v = op.getResult(i);
    return bufferArg(st.bufferOf.lookup(v), label, rowBytesOf(v), offset);
  }
  /// A scratch row buffer of `perRow` bytes per token (of the largest
  /// step, or of `rows` when given: a larger step then gets its own).
  gp::ArgDef scratchRows(const std::string &name, uint64_t perRow,
                         const std::string &label, int64_t rows = 0) {
    const uint64_t bytes = perRow * uint64_t(rows > 0 ? rows : st.maxTokens);
    if (opLocalScratch(name))
      return bufferArg(st.opLocalBuffer(name, bytes), label, perRow);
    const size_t before = st.rp.buffers.size();
    const uint32_t b = st.scratchBuffer(name, bytes);
    if (rows <= 0 && st.rp.buffers.size() > before)
      st.rowScratch += st.rp.buffers[b].bytes;
    return bufferArg(b, label, perRow);
  }
  /// Kernel `k` ends a sum over rank-owned units in int64 (sum =
  /// fixed_out): its output rows of n int64 go to the fixed-sum scratch the
  /// all-reduce sums, and `post` moves to the fixed_to_f32 after it.
  static bool fixedOut(const gp::KernelDef &k) {
    auto it = k.templateArgs.find("sum");
    return it != k.templateArgs.end() && it->second == "fixed_out";
  }
  static bool fixedSum(const gp::KernelDef &k) {
    auto it = k.templateArgs.find("sum");
    return it != k.templateArgs.end() && it->second != "f32";
  }
  gp::ArgDef fixedSumRows(Operation &op, int64_t n, gp::ArgDef post,
                          const std::string &label) {
    gp::ArgDef rowsArg = scratchRows("fixed_sum", uint64_t(n) * 8, label);
    if (post.kind == gp::ArgKind::Buffer)
      post.name = "post"; // (a runtime arg's name is its value)
    st.fixedSum[&op] = {rowsArg, post, n};
    return rowsArg;
  }
  /// A scratch row buffer of `perContextToken` bytes per token of
  /// max_context per token of the step (selections, scores, flags).
  gp::ArgDef contextRows(const std::string &name, uint64_t perContextToken,
                         const std::string &label, int64_t rows = 0) {
    const uint64_t ctx = std::max<int64_t>(st.maxContext, 1);
    gp::ArgDef a = scratchRows(name, perContextToken * ctx, label, rows);
    if (st.contextScratch)
      st.contextScratch->insert(st.rp.buffers[a.buffer].name);
    return a;
  }
  WeightOp weightOp(StringRef sym) {
    return dyn_cast_or_null<WeightOp>(symbols.lookup(sym));
  }
  /// The weight buffer at the tensor of `sym` (+ `extra` bytes).
  gp::ArgDef weight(StringRef sym, const std::string &label,
                    uint64_t extra = 0) {
    WeightOp w = weightOp(sym);
    auto it = w ? st.weightOffset.find(w.getName().str())
                : st.weightOffset.end();
    if (it == st.weightOffset.end())
      return runtimeArg("null");
    return bufferArg(0, label, 0, it->second + extra);
  }
  int64_t hiddenOf(Value v) {
    return cast<RankedTensorType>(v.getType()).getShape().back();
  }
  /// The op's `ordinal`-th GEMV, in the order glm-emit-kernels lists them.
  GemvUse gemvUse(Operation &op, size_t ordinal);
  /// The trellis expert tables of `count` experts of `e`'s bank from
  /// `first` (routed then shared), side vectors over `pitch` channels;
  /// built once per rank and group.
  ExpertTables expertTables(FusedExpertGemvOp e, int64_t first, int64_t count,
                            int64_t pitch);
  PackOp packOp;
  /// The launches of the executor's helper families (embed_tokens, norms,
  /// cache stores, DSA, absorbed MLA, routing, HF experts, gemv_any):
  /// false when `family` is none of them.
  bool buildHelperLaunch(const std::string &family, Operation &op,
                         int64_t rows, size_t launch,
                         const std::vector<std::string> &seq,
                         LaunchInfo &li);
  /// The weight buffer at byte range `role` of weight `sym` (null when the
  /// weight has no such range on this rank).
  gp::ArgDef roleArg(StringRef sym, const std::string &role,
                     const std::string &label, uint64_t extra = 0) {
    WeightOp w = weightOp(sym);
    auto it = w ? st.roleOffset.find({w.getName().str(), role})
                : st.roleOffset.end();
    if (it == st.roleOffset.end()) {
      gp::ArgDef a = runtimeArg("null");
      return a;
    }
    return bufferArg(0, label, 0, it->second + extra);
  }
  /// A per-token row buffer of the Io rows (tokens, positions, slots).
  gp::ArgDef io(uint32_t buffer, const std::string &label) {
    return bufferArg(buffer, label, 4);
  }
  /// A table of int32 values (heads of this rank, ...).
  gp::ArgDef intTable(const std::string &name, const std::vector<int32_t> &v,
                      const std::string &label) {
    std::vector<uint8_t> b(std::max<size_t>(v.size(), 1) * 4, 0);
    std::memcpy(b.data(), v.data(), v.size() * 4);
    return bufferArg(st.tableBuffer(name, std::move(b)), label);
  }
  gp::ArgDef byteTable(const std::string &name, std::vector<uint8_t> v,
                       const std::string &label) {
    if (v.empty())
      v.push_back(0);
    return bufferArg(st.tableBuffer(name, std::move(v)), label);
  }
  /// Storage code (dtOf) a helper kernel reads weight `sym` in: 0 for the
  /// weights the load widens to fp32 (widenedAtLoad).
  int loadedDt(StringRef sym) {
    WeightOp w = weightOp(sym);
    return !w || widenedAtLoad(w, kdaWeights) ? 0 : dtOf(w.getType());
  }
  /// A prefill chunk's MoE layer grouped by expert (EmitKernels: the
  /// launches from moe_group to the output rotation).
  void buildGroupedMoeLaunch(const gp::KernelDef &k, Operation &op,
                             int64_t rows, size_t launch,
                             const std::vector<std::string> &seq,
                             LaunchInfo &li);
  /// The GLM-5.3-Flash launches (mHC, KDA); false for other families.
  bool buildFlashLaunch(const std::string &f, Operation &op, int64_t rows,
                        LaunchInfo &li);
  /// SMs of the plan's first target arch.
  int sms() {
    if (auto archs = module->getAttrOfType<ArrayAttr>("glm.archs"))
      if (!archs.empty())
        return smsOfArch(cast<StringAttr>(archs[0]).str());
    return smsOfArch("sm_121");
  }
};

GemvUse ArgBuilder::gemvUse(Operation &op, size_t ordinal) {
  GemvUse g;
  auto shape = [&](StringRef sym) {
    if (WeightOp w = weightOp(sym)) {
      ArrayRef<int64_t> s = w.getShape();
      g.out = s.size() == 2 ? s[0] : 0;
      g.in = s.size() == 2 ? s[1] : 0;
    }
    g.outRows = g.outStride = g.out;
    g.sym = sym;
  };
  auto toScratch = [&](const std::string &name) {
    g.y = scratchRows(name, g.out * 4, "y");
  };
  if (auto d = dyn_cast<DenseGemvOp>(op)) {
    g.sym = d.getWeight();
    g.out = g.outRows = g.outStride = d.getOut();
    g.in = d.getIn();
    // Rows split across ranks when the format stores rows (a trellis
    // weight's tiles do not split by rows: every rank computes all).
    if (d.getShard() && d.getSplitOut() && d.getShard()->getRanks() > 1 &&
        !isa<TrellisType>(d.getFormat())) {
      auto [ub, ue] = d.getShard()->rangeOf(rank);
      int64_t per = g.out / std::max<int64_t>(1, d.getShard()->getUnits());
      g.rowBegin = ub * per;
      g.outRows = (ue - ub) * per;
    }
    g.x = in(op, 0, "x");
    g.y = out(op, 0, "y", uint64_t(g.rowBegin) * 4);
  } else if (auto m = dyn_cast<MlpOp>(op)) {
    // gate and up of the SwiGLU into scratch rows; down from the
    // activation (an executor helper kernel computes it in between).
    StringRef syms[3] = {m.getGate(), m.getUp(), m.getDown()};
    shape(syms[std::min<size_t>(ordinal, 2)]);
    if (ordinal < 2) {
      g.x = in(op, 0, "x");
      toScratch(ordinal ? "mlp_up" : "mlp_gate");
    } else {
      g.x = scratchRows("mlp_act", g.in * 4, "x");
      g.y = out(op, 0, "y");
    }
  } else if (auto r = dyn_cast<RouterOp>(op)) {
    shape(r.getWeight());
    g.x = in(op, 0, "x");
    toScratch("router_logits");
  } else if (auto ix = dyn_cast<IndexerTopkOp>(op)) {
    // wq_b from q_a (operand 0); wk, (k-pool) the compress gate and
    // weights_proj from x (operand 1), in glm-emit-kernels' order.
    const bool kpool = ix.getKpool() > 1;
    static const unsigned slot[2][4] = {{0, 1, 4, 4}, {0, 1, 5, 4}};
    static const char *const dst[2][4] = {
        {"indexer_q", "indexer_k", "indexer_w", "indexer_w"},
        {"indexer_q", "indexer_k", "indexer_gate", "indexer_w"}};
    unsigned i = unsigned(std::min<size_t>(ordinal, kpool ? 3 : 2));
    ArrayAttr w = ix.getWeights();
    if (w && slot[kpool][i] < w.size())
      shape(cast<FlatSymbolRefAttr>(w[slot[kpool][i]]).getValue());
    g.x = in(op, i == 0 ? 0 : 1, "x");
    toScratch(dst[kpool][i]);
  } else if (auto pre = dyn_cast<HcPreOp>(op)) {
    // m = fn · X over the flattened streams, for mhc_mix.
    shape(pre.getFn());
    g.x = in(op, 0, "x");
    toScratch("mhc_m");
  } else {
    // Dense (non-trellis) experts: listed for their bytes only.
    g.x = in(op, 0, "x");
    g.y = out(op, 0, "y");
    g.in = g.out = g.outRows = g.outStride = hiddenOf(op.getOperand(0));
  }
  return g;
}

static gp::ArgDef f64Arg(double v, const std::string &label) {
  gp::ArgDef a;
  a.kind = gp::ArgKind::F64;
  a.d = v;
  a.name = label;
  return a;
}
static gp::ArgDef i64Arg(int64_t v, const std::string &label) {
  gp::ArgDef a;
  a.kind = gp::ArgKind::I64;
  a.i = v;
  a.name = label;
  return a;
}
/// The mHC families' column blocks of a row of width d (mhc_post's grid x,
/// so also the Σx² partials it leaves for the next mhc_mix).
static int64_t mhcBlocks(int64_t d) {
  return std::min<int64_t>((d + 255) / 256, 32);
}

static gp::ArgDef named(gp::ArgDef a, const std::string &label) {
  a.name = label;
  return a;
}

ExpertTables ArgBuilder::expertTables(FusedExpertGemvOp e, int64_t first,
                                      int64_t count, int64_t pitch) {
  const std::string key = std::to_string(e.getLayer()) + "." +
                          std::to_string(first) + "." +
                          std::to_string(count) + "." + std::to_string(pitch);
  auto cached = st.tables.find(key);
  if (cached != st.tables.end())
    return cached->second;
  auto bank = dyn_cast_or_null<ExpertsOp>(symbols.lookup(e.getBank()));
  ::glm::rt::check(bool(bank), "glm-emit-plan: expert bank ",
                   e.getBank().str(), " not found");
  const int64_t E = bank.getExperts(), P = bank.getPartsPerProj(),
                hidden = bank.getHidden(), hb = hidden / 128;
  const int64_t H = e.getHalves();
  const bool exl3 = P == 1;
  ArrayRef<int64_t> parts = bank.getParts(), sides = bank.getSides();
  auto widthsAttr = bank.getWidths();
  auto tt = dyn_cast<TrellisType>(bank.getType());
  ExpertTables t;
  std::vector<uint8_t> tiles(count * 48 * 8, 0), widths(count * 48, 0);
  std::vector<gp::Relocation> relocs;
  bool seen[9] = {};
  const uint32_t W = 0; // the weight buffer
  auto name = [&](const char *what) { return key + "." + what; };
  // Tables whose contents are bound from the pack at load.
  auto floats = [&](const char *what, uint64_t n) {
    return st.scratchBuffer("experts." + name(what), n * 4);
  };
  uint32_t guSvh = floats("gu_svh", 2 * count * pitch),
           downSuh = floats("down_suh", count * pitch);
  uint32_t guSuBlock = 0, downSvBlock = 0, suhIn = 0, downSvh = 0,
           signsIn = 0, signsOut = 0;
  if (exl3) {
    suhIn = floats("suh_in", 2 * count * hidden);
    downSvh = floats("down_svh", count * hidden);
  } else {
    guSuBlock = floats("gu_su_block", 2 * count * hb);
    downSvBlock = floats("down_sv_block", count * hb);
    signsIn = floats("signs_in", hidden);
    signsOut = floats("signs_out", hidden);
  }
  ArrayAttr roles = packOp.getRoles(), files = packOp.getFiles();
  auto roleName = [&](int64_t r) {
    return r >= 0 && size_t(r) < roles.size()
               ? cast<StringAttr>(roles[r]).str()
               : std::string();
  };
  // One side range of a part, by role; nullptr when absent.
  auto side = [&](const int64_t *row, const char *role) -> const int64_t * {
    for (int64_t s = row[3]; s < row[4]; ++s)
      if (roleName(sides[s * 4 + 3]) == role)
        return &sides[s * 4];
    return nullptr;
  };
  auto bindSide = [&](const int64_t *q, uint32_t buffer, uint64_t at,
                      const std::string &what) {
    if (!q)
      return;
    gp::WeightBinding b;
    b.file = cast<StringAttr>(files[q[0]]).str();
    b.offset = uint64_t(q[1]);
    b.length = uint64_t(q[2]);
    b.buffer = buffer;
    b.bufferOffset = at;
    b.transform = gp::WeightTransform::ToF32;
    b.tag = gp::WeightTag::SideVector;
    b.tensor = bank.getSymName().str() + "." + what;
    b.layer = int32_t(bank.getLayer());
    st.rp.weights.push_back(std::move(b));
  };
  for (int64_t i = 0; i < count; ++i) {
    const int64_t ex = first + i; // index in the bank (shared after routed)
    const bool shared = ex >= E;
    bool anyOwned = false;
    std::vector<bool> owned(H);
    for (int64_t h = 0; h < H; ++h) {
      owned[h] = ranks == 1 || e.getShard().ownerOf(ex, h) == rank;
      anyOwned |= owned[h];
    }
    (void)shared;
    for (int64_t p = 0; p < 3; ++p) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t idx = bank.partIndex(ex, p, exl3 ? 0 : h);
        const int64_t *row = &parts[idx * ExpertsOp::kPartFields];
        const int32_t twice =
            widthsAttr ? (*widthsAttr)[idx] : (tt ? tt.getTwiceBits() : 0);
        const int K = twice / 2;
        if (K >= 1 && K <= 8)
          seen[K] = true;
        widths[(i * 3 + p) * 16 + h] = uint8_t(K);
        if (!owned[h])
          continue;
        auto it = st.rangeOffset.find(
            {cast<StringAttr>(files[row[0]]).str(), uint64_t(row[1])});
        if (it == st.rangeOffset.end())
          continue;
        // EXL3: half h starts at tile column block 8h (gate/up) or tile
        // row block 8h (down) of the whole tensor.
        const uint64_t tile =
            exl3 ? (p < 2 ? 8 * h : 8 * h * (hidden / 16)) : 0;
        relocs.push_back({uint64_t((i * 3 + p) * 16 + h) * 8, W,
                          it->second + tile * 32 * uint64_t(K)});
      }
      if (!anyOwned)
        continue;
      if (exl3) {
        const int64_t *row =
            &parts[bank.partIndex(ex, p, 0) * ExpertsOp::kPartFields];
        const int64_t I = pitch;
        if (p < 2) {
          bindSide(side(row, "suh"), suhIn, uint64_t((p * count + i) * hidden) * 4,
                   "suh");
          bindSide(side(row, "svh"), guSvh, uint64_t((p * count + i) * I) * 4,
                   "svh");
        } else {
          bindSide(side(row, "suh"), downSuh, uint64_t(i * I) * 4, "suh");
          bindSide(side(row, "svh"), downSvh, uint64_t(i * hidden) * 4, "svh");
        }
        continue;
      }
      for (int64_t h = 0; h < H; ++h) {
        if (!owned[h])
          continue;
        const int64_t *row =
            &parts[bank.partIndex(ex, p, h) * ExpertsOp::kPartFields];
        if (p < 2)
          bindSide(side(row, "svh"), guSvh,
                   uint64_t((p * count + i) * pitch + 128 * h) * 4, "svh");
        else
          bindSide(side(row, "suh"), downSuh,
                   uint64_t(i * pitch + 128 * h) * 4, "suh");
      }
      // One hidden-side block scale per expert projection (half 0's).
      const int64_t *row0 =
          &parts[bank.partIndex(ex, p, 0) * ExpertsOp::kPartFields];
      if (p < 2)
        bindSide(side(row0, "su_block"), guSuBlock,
                 uint64_t((p * count + i) * hb) * 4, "su_block");
      else
        bindSide(side(row0, "sv_block"), downSvBlock, uint64_t(i * hb) * 4,
                 "sv_block");
    }
  }
  if (!exl3) {
    // The layer's signs, read by every expert (expert 0's gate and down).
    const int64_t *g0 = &parts[bank.partIndex(0, 0, 0) * ExpertsOp::kPartFields];
    const int64_t *d0 = &parts[bank.partIndex(0, 2, 0) * ExpertsOp::kPartFields];
    bindSide(side(g0, "signs.in"), signsIn, 0, "signs.in");
    bindSide(side(d0, "signs.out"), signsOut, 0, "signs.out");
  }
  for (int k = 1; k <= 8; ++k)
    if (seen[k])
      t.digits += std::to_string(k);
  const uint32_t tb = st.tableBuffer(name("tiles"), std::move(tiles));
  st.rp.buffers[tb].relocations = std::move(relocs);
  t.tiles = bufferArg(tb, "tiles");
  t.widths = bufferArg(st.tableBuffer(name("widths"), std::move(widths)),
                       "widths");
  t.guSvh = bufferArg(guSvh, "gu_svh");
  t.downSuh = bufferArg(downSuh, "down_suh");
  auto opt = [&](uint32_t b, const char *label) {
    return b ? bufferArg(b, label) : runtimeArg("null");
  };
  t.guSuBlock = opt(guSuBlock, "gu_su_block");
  t.downSvBlock = opt(downSvBlock, "down_sv_block");
  t.suhIn = opt(suhIn, "suh");
  t.downSvh = opt(downSvh, "down_svh");
  t.signsIn = opt(signsIn, "pre");
  t.signsOut = opt(signsOut, "post");
  return st.tables[key] = t;
}

bool ArgBuilder::buildHelperLaunch(const std::string &f, Operation &op,
                                   int64_t rows, size_t launch,
                                   const std::vector<std::string> &seq,
                                   LaunchInfo &li) {
  auto &a = li.args;
  gp::LaunchDims &d = li.dims;
  const uint32_t R = uint32_t(rows);
  const int64_t ctx = std::max<int64_t>(st.maxContext, 1);
  const gp::ArgDef seqA = io(st.ioSlots, "seq"), posA = io(st.ioPositions, "pos");
  // Paged KV (--kv-page-tokens): each slot's page table in io.pages (one
  // table for every step, not a row per token), and log2 of the page's
  // rows; unpaged a null table (kv::SlotRows).
  const gp::ArgDef pagesA =
      st.kvPageTokens ? bufferArg(st.ioPages, "pages") : runtimeArg("null");
  const gp::ArgDef shiftA = i32Arg(
      st.kvPageTokens ? int32_t(llvm::Log2_64(uint64_t(st.kvPageTokens))) : 0,
      "pageShift");
  auto grid = [&](uint64_t x, uint32_t y, uint32_t z, uint32_t block,
                  uint32_t smem = 0) {
    d.gridX = uint32_t(std::max<uint64_t>(x, 1));
    d.gridY = y;
    d.gridZ = z;
    d.blockX = block;
    d.smemBytes = smem;
  };
  // DSA selections live in one scratch pair (rows of max_context ints and
  // a count per row), written by a full layer's indexer and read by its
  // attention and by the shared layers after it.
  auto sel = [&](const char *label) {
    return contextRows("dsa_sel", 4, label);
  };
  auto nsel = [&](const char *label) {
    return scratchRows("dsa_nsel", 4, label);
  };
  if (f == "gemv_any") {
    size_t ordinal = 0;
    for (size_t i = 0; i < launch; ++i)
      ordinal += isGemv(seq[i]);
    GemvUse g = gemvUse(op, ordinal);
    WeightOp w = weightOp(g.sym);
    Type t = w ? w.getType() : Type();
    li.weightSym = g.sym.str();
    const uint64_t rowStart = g.rowBegin * g.in * elemBytes(t);
    // Scales of this rank's rows: one per row (fp8_row), one per 128x128
    // block (fp8_block128: the row begin is a multiple of 128), one per 32
    // columns (mxfp8).
    uint64_t scaleAt = 0;
    switch (skOf(t)) {
    case 1:
      scaleAt = uint64_t(g.rowBegin / 128) * ceilDiv(g.in, 128) * 4;
      break;
    case 2:
      scaleAt = uint64_t(g.rowBegin) * 4;
      break;
    case 3:
      scaleAt = uint64_t(g.rowBegin) * ceilDiv(g.in, 32);
      break;
    }
    const uint64_t xRow = g.x.rowBytes ? g.x.rowBytes / 4 : g.in;
    a = {named(g.x, "x"),
         i32Arg(int64_t(xRow), "xs"),
         weight(g.sym, "w", rowStart),
         i32Arg(dtOf(t), "dt"),
         skOf(t) ? roleArg(g.sym, skOf(t) == 3 ? "e8m0" : "scale", "scale",
                           scaleAt)
                 : runtimeArg("null"),
         i32Arg(skOf(t), "sk"),
         launchFixedOut ? fixedSumRows(op, g.outRows, runtimeArg("null"), "y")
                        : named(g.y, "y"),
         i32Arg(launchFixedOut ? g.outRows : g.outStride, "ys"),
         i32Arg(g.in, "in"),
         i32Arg(g.outRows, "out")};
    grid(ceilDiv(g.outRows, 8), R, 1, 256);
    return true;
  }
  if (f == "embed_tokens" && isa<GatherRowsOp>(op)) {
    // The hidden rows (fp32, dt 0) by row index.
    const int64_t hidden = hiddenOf(op.getResult(0));
    a = {in(op, 0, "table"), i32Arg(0, "dt"), runtimeArg("null"),
         in(op, 1, "tok"), out(op, 0, "x"), i32Arg(hidden, "d")};
    grid(ceilDiv(hidden, 256), R, 1, 256);
    return true;
  }
  if (f == "rms_norm_rows" && isa<MtpInputOp>(op)) {
    // Launch 0: enorm of the embedded rows into the first half of each
    // output row; launch 1: hnorm of the hidden rows into the second.
    auto m = cast<MtpInputOp>(op);
    const int64_t n = hiddenOf(m.getEmbedded());
    a = {in(op, unsigned(launch), "x"),
         weight(launch ? m.getHnorm() : m.getEnorm(), "w"),
         out(op, 0, "y", launch ? uint64_t(n) * 4 : 0), i32Arg(n, "n"),
         f64Arg(m.getEps().convertToDouble(), "eps"), i32Arg(n, "xs"),
         i32Arg(2 * n, "ys")};
    grid(normBlocksPerRow(n, R), R, 1, 1024);
    return true;
  }
  if (f == "sum_parts" && isa<CarryRowsOp>(op)) {
    // A copy of the draft's rows over the hidden rows (0 + x = x).
    const int64_t n = int64_t(R) * hiddenOf(op.getResult(0));
    a = {in(op, 1, "parts"), i32Arg(1, "np"), i32Arg(n, "n"),
         out(op, 0, "out")};
    grid(ceilDiv(n, 256), 1, 1, 256);
    return true;
  }
  if (f == "embed_tokens") {
    auto e = cast<EmbedOp>(op);
    Type t = weightOp(e.getWeight()) ? weightOp(e.getWeight()).getType()
                                     : Type();
    const int64_t hidden = hiddenOf(e.getResult());
    auto dd = dyn_cast_or_null<DenseType>(t);
    const bool rowScaled = dd && dd.getFormat() == DenseFormat::Fp8Row;
    a = {weight(e.getWeight(), "table"), i32Arg(dtOf(t), "dt"),
         rowScaled ? roleArg(e.getWeight(), "scale", "rowScale")
                   : runtimeArg("null"),
         in(op, 0, "tok"), out(op, 0, "x"), i32Arg(hidden, "d")};
    grid(ceilDiv(hidden, 256), R, 1, 256);
    return true;
  }
  if (f == "rms_norm_rows") {
    auto r = cast<RmsNormOp>(op);
    const int64_t n = hiddenOf(r.getResult());
    a = {in(op, 0, "x"), weight(r.getWeight(), "w"), out(op, 0, "y"),
         i32Arg(n, "n"), f64Arg(r.getEps().convertToDouble(), "eps"),
         i32Arg(n, "xs"), i32Arg(n, "ys")};
    grid(normBlocksPerRow(n, R), R, 1, 1024);
    return true;
  }
  if (f == "add_rms_norm") {
    auto r = cast<AddRmsNormOp>(op);
    const int64_t n = hiddenOf(r.getSum());
    a = {in(op, 0, "x"), in(op, 1, "delta"), out(op, 0, "xout"),
         weight(r.getWeight(), "w"), out(op, 1, "y"), i32Arg(n, "n"),
         f64Arg(r.getEps().convertToDouble(), "eps")};
    grid(normBlocksPerRow(n, R), R, 1, 1024);
    return true;
  }
  if (buildFlashLaunch(f, op, rows, li))
    return true;
  if (f == "fill_f32" && isa<DenseGemvOp>(op)) {
    // The rows of a vocabulary-split LM head outside this rank's slice are
    // zero for the gather's exact sum.
    const int64_t n = rows * hiddenOf(op.getResult(0));
    a = {out(op, 0, "p"), i64Arg(n, "n"), f32Arg(0.0, "v")};
    grid(std::min<uint64_t>(ceilDiv(uint64_t(n), 256), 1024), 1, 1, 256);
    return true;
  }
  if (auto at = dyn_cast<AttentionDecodeOp>(op)) {
    const int64_t H = at.getHeads(), dn = at.getQkNope(), dr = at.getQkRope(),
                  dv = at.getVHead(), kvr = at.getKvLora();
    auto [hb, he] = at.getShard().rangeOf(rank);
    if (ranks == 1) {
      hb = 0;
      he = H;
    }
    const int64_t nh = he - hb;
    std::vector<int32_t> heads;
    for (int64_t h = hb; h < he; ++h)
      heads.push_back(int32_t(h));
    const gp::ArgDef headsA = intTable(
        "heads." + std::to_string(hb) + "-" + std::to_string(he), heads,
        "heads");
    const double theta = at.getRopeTheta().convertToDouble();
    const int32_t layer = int32_t(at.getLayer());
    const gp::ArgDef cache =
        bufferArg(st.kvOf.count(layer) ? st.kvOf[layer] : 0, "cache");
    Type kt = weightOp(at.getKvB()) ? weightOp(at.getKvB()).getType() : Type();
    const gp::ArgDef W = weight(at.getKvB(), "W");
    const gp::ArgDef scale =
        skOf(kt) ? roleArg(at.getKvB(), skOf(kt) == 3 ? "e8m0" : "scale",
                           "scale")
                 : runtimeArg("null");
    const gp::ArgDef qabs = scratchRows("mla_qabs", H * kvr * 4, "qabsAll");
    const gp::ArgDef ctxv = scratchRows("mla_ctx", H * kvr * 4, "ctxAll");
    // mla_rows16's fp16 rows of max_context tokens (one buffer, reused by
    // every layer: each layer's mla_prefill reads what its mla_rows16 just
    // wrote).
    auto rows16 = [&] {
      gp::ArgDef r = bufferArg(
          st.scratchBuffer("mla_rows16",
                           uint64_t(::glm::rows16::bytes(ctx, kvr, dr))),
          "rows16");
      if (st.contextScratch)
        st.contextScratch->insert(st.rp.buffers[r.buffer].name);
      return r;
    };
    // The most rows a row's selection holds: the DSA top-k (dsa_select.cuh:
    // k tokens, or k pools of P tokens and the incomplete pool's P - 1 past
    // them), else every token of the context.
    auto maxSelected = [&]() -> int64_t {
      if (auto ix = at.getSelection().getDefiningOp<IndexerTopkOp>()) {
        const int64_t k = std::max<int64_t>(ix.getTopk(), 1),
                      P = std::max<int64_t>(ix.getKpool(), 1);
        return std::min<int64_t>(ctx, P == 1 ? k : (k + 1) * P);
      }
      return ctx;
    };
    // The split decode attention's weights (over its scores) and the
    // inverses of their sums (mla_split_layout.cuh).
    auto weights = [&] { return contextRows("mla_p", 2 * H * 4, "pAll", rows); };
    auto inverses = [&] { return scratchRows("mla_inv", H * 4, "inv", rows); };
    if (f == "kv_store") {
      a = {in(op, 1, "kva"), weight(at.getKvNorm(), "normW"), cache, seqA,
           posA, i32Arg(kvr, "kvr"), i32Arg(dr, "dr"), i32Arg(ctx, "maxCtx"),
           f64Arg(at.getEps().convertToDouble(), "eps"),
           f64Arg(theta, "theta"), pagesA, shiftA};
      grid(1, R, 1, 256);
    } else if (f == "rope_rows") {
      gp::ArgDef x = in(op, 0, "x");
      x.offset += uint64_t(dn) * 4;
      a = {x, i32Arg(dr, "dim"), i32Arg(dn + dr, "stride"),
           i32Arg(H * (dn + dr), "rowStride"), posA, f64Arg(theta, "theta")};
      grid(H, R, 1, uint32_t(std::max<int64_t>(32, (dr / 2 + 31) / 32 * 32)));
    } else if (f == "fill_f32") {
      // Other ranks' heads contribute zeros to o_proj's input.
      a = {out(op, 0, "p"), i64Arg(rows * H * dv, "n"), f32Arg(0.0, "v")};
      grid(std::min<uint64_t>(ceilDiv(uint64_t(rows * H * dv), 256), 1024), 1,
           1, 256);
    } else if (f == "mla_qabs") {
      a = {in(op, 0, "qAll"), W, i32Arg(dtOf(kt), "dt"), scale,
           i32Arg(skOf(kt), "sk"), headsA, qabs, i32Arg(H, "H"),
           i32Arg(dn, "dn"), i32Arg(dr, "dr"), i32Arg(dv, "dv"),
           i32Arg(kvr, "kvr")};
      grid(nh * ceilDiv(kvr, 32), R, 1, 64);
    } else if (f == "mla_core") {
      // Its weights of max_context keys a row, for this step's rows only:
      // decode steps are small, and a prefill chunk's attention is
      // mla_prefill's (at 2048 rows and 8K tokens this was 8.6 GB).
      a = {in(op, 0, "qAll"), named(qabs, "qabsAll"), cache, seqA,
           sel("selAll"), nsel("nselp"),
           contextRows("mla_p", 2 * H * 4, "pAll", rows),
           i32Arg(ctx, "maxCtx"), ctxv, headsA, i32Arg(H, "H"),
           i32Arg(dn, "dn"), i32Arg(dr, "dr"), i32Arg(kvr, "kvr"),
           f64Arg(1.0 / std::sqrt(double(dn + dr)), "scale"), pagesA, shiftA};
      // q_abs, q_pe, a tile of p and of selected rows, partial sums.
      grid(nh, R, 1, 1024, uint32_t((kvr + dr + 2 * 1024 + 4 * 1024) * 4));
    } else if (f == "mla_scores") {
      namespace ms = ::glm::mla_split;
      a = {in(op, 0, "qAll"), named(qabs, "qabsAll"), cache, seqA,
           sel("selAll"), nsel("nselp"), weights(), i32Arg(ctx, "maxCtx"),
           headsA, i32Arg(nh, "nh"), i32Arg(H, "H"), i32Arg(dn, "dn"),
           i32Arg(dr, "dr"), i32Arg(kvr, "kvr"),
           f64Arg(1.0 / std::sqrt(double(dn + dr)), "scale"), pagesA, shiftA};
      grid(uint32_t(ms::scoreGridX(nh, maxSelected())), R, 1,
           ms::kScoreThreads, uint32_t(ms::scoreSmem(kvr, dr)));
    } else if (f == "mla_softmax") {
      a = {weights(), nsel("nselp"), i32Arg(ctx, "maxCtx"), headsA,
           i32Arg(H, "H"), inverses()};
      grid(nh, R, 1, 1024);
    } else if (f == "mla_values") {
      namespace ms = ::glm::mla_split;
      a = {cache, seqA, sel("selAll"), nsel("nselp"), weights(), inverses(),
           i32Arg(ctx, "maxCtx"), ctxv, headsA, i32Arg(nh, "nh"),
           i32Arg(H, "H"), i32Arg(dr, "dr"), i32Arg(kvr, "kvr"), pagesA,
           shiftA};
      grid(uint32_t(ms::valueGridX(nh, kvr)), R, 1, ms::kValueThreads);
    } else if (f == "mla_proj") {
      // A prefill bucket's q_abs (the op's first mla_proj: W_uk's rows are
      // the inputs) or head outputs (the second: W_uv's rows the outputs)
      // as one GEMM per head over the chunk's rows (mla_proj.cuh).
      const bool headOut =
          std::count(seq.begin(), seq.begin() + launch, "mla_proj") > 0;
      if (!headOut)
        a = {in(op, 0, "x"), i32Arg(H * (dn + dr), "xStride"),
             i32Arg(dn + dr, "xHead"), W, i32Arg(dtOf(kt), "dt"), scale,
             i32Arg(skOf(kt), "sk"), i32Arg(dn + dv, "wHead"),
             i32Arg(0, "wRow0"), i32Arg(kvr, "in"), headsA,
             named(qabs, "y"), i32Arg(H * kvr, "yStride"),
             i32Arg(kvr, "yHead"), i32Arg(R, "R"), i32Arg(dn, "K"),
             i32Arg(kvr, "N")};
      else
        a = {named(ctxv, "x"), i32Arg(H * kvr, "xStride"), i32Arg(kvr, "xHead"),
             W, i32Arg(dtOf(kt), "dt"), scale, i32Arg(skOf(kt), "sk"),
             i32Arg(dn + dv, "wHead"), i32Arg(dn, "wRow0"), i32Arg(kvr, "in"),
             headsA, out(op, 0, "y"), i32Arg(H * dv, "yStride"),
             i32Arg(dv, "yHead"), i32Arg(R, "R"), i32Arg(kvr, "K"),
             i32Arg(dv, "N")};
      grid(nh * ceilDiv(headOut ? dv : kvr, 64), uint32_t(ceilDiv(R, 64)), 1,
           128);
    } else if (f == "mla_rows16") {
      // The chunk's slot's rows 0 .. its last position in mla_prefill's
      // fp16 forms (mla_rows16_layout.cuh), for the mla_prefill after it.
      a = {cache, seqA, posA, i32Arg(R, "R"), i32Arg(ctx, "maxCtx"),
           i32Arg(kvr, "kvr"), i32Arg(dr, "dr"), rows16(), pagesA, shiftA};
      grid(uint32_t(ceilDiv(uint64_t(ctx),
                            uint64_t(::glm::rows16::kRowsPerBlock))),
           1, 1, uint32_t(32 * ::glm::rows16::kRowsPerBlock));
    } else if (f == "mla_prefill") {
      // mla_core's arguments and the head count; a block per row and up to
      // 64 heads (mla_prefill_abi.h: the threads EmitKernels chose). With
      // keys = rows16 the rows come from mla_rows16's buffer.
      const int threads =
          ::glm::codegen::mlaPrefillThreadsFor(H, at.getShard().getRanks());
      const bool fromRows16 =
          std::count(seq.begin(), seq.end(), "mla_rows16") > 0;
      // Its scores: a row of the most keys a row selects (the DSA top-k,
      // not max_context: 1 GB at GLM-5.3's 2048-token chunks whatever the
      // context; the kernel takes at most that many).
      // dsa_select.cuh: k tokens (k pools of P tokens and the incomplete
      // pool's P - 1 past them, or all T <= (k + 1) P - 1 of them).
      const int64_t pStride = maxSelected();
      gp::ArgDef p = pStride == ctx
                         ? contextRows("mla_prefill_p", H * 4, "pAll")
                         : scratchRows("mla_prefill_p", uint64_t(H) * 4 *
                                                            uint64_t(pStride),
                                       "pAll");
      a = {in(op, 0, "qAll"), named(qabs, "qabsAll"),
           fromRows16 ? named(rows16(), "cache") : cache, seqA,
           sel("selAll"), nsel("nselp"), p,
           i32Arg(ctx, "maxCtx"), ctxv, headsA, i32Arg(nh, "nh"),
           i32Arg(H, "H"), i32Arg(dn, "dn"), i32Arg(dr, "dr"),
           i32Arg(kvr, "kvr"),
           f64Arg(1.0 / std::sqrt(double(dn + dr)), "scale"),
           i32Arg(pStride, "pStride"), fromRows16 ? runtimeArg("null") : pagesA,
           shiftA};
      grid(::glm::codegen::mlaPrefillGridX(nh, threads), R, 1,
           uint32_t(threads),
           uint32_t(::glm::codegen::mlaPrefillSmem(threads, kvr, dr)));
    } else if (f == "mla_out") {
      a = {W, i32Arg(dtOf(kt), "dt"), scale, i32Arg(skOf(kt), "sk"), ctxv,
           headsA, out(op, 0, "ovAll"), i32Arg(H, "H"), i32Arg(dn, "dn"),
           i32Arg(dv, "dv"), i32Arg(kvr, "kvr")};
      grid(nh * ceilDiv(dv, 32), R, 1, 256);
    } else {
      return false;
    }
    return true;
  }
  if (auto ix = dyn_cast<IndexerTopkOp>(op)) {
    const int64_t nh = ix.getHeads(), hd = ix.getHeadDim(), dr = ix.getRope();
    const int32_t layer = int32_t(ix.getLayer());
    if (ropeTheta < 0) {
      ropeTheta = 10000.0;
      module.walk([&](AttentionDecodeOp at) {
        ropeTheta = at.getRopeTheta().convertToDouble();
        return WalkResult::interrupt();
      });
    }
    ArrayAttr ws = ix.getWeights();
    auto wsym = [&](unsigned i) {
      return ws && i < ws.size() ? cast<FlatSymbolRefAttr>(ws[i]).getValue()
                                 : StringRef();
    };
    const gp::ArgDef keys =
        bufferArg(st.keysOf.count(layer) ? st.keysOf[layer] : 0, "keys");
    const gp::ArgDef qi = scratchRows("indexer_q", nh * hd * 4, "qi");
    const gp::ArgDef score = contextRows("dsa_score", 8, "score");
    // The k-pool (P > 1): keys are pooled keys, candidates whole pools.
    const int64_t P = ix.getKpool();
    if (f == "rope_rows") {
      a = {named(qi, "x"), i32Arg(dr, "dim"), i32Arg(hd, "stride"),
           i32Arg(nh * hd, "rowStride"), posA, f64Arg(ropeTheta, "theta")};
      grid(nh, R, 1, uint32_t(std::max<int64_t>(32, (dr / 2 + 31) / 32 * 32)));
    } else if (f == "index_key_store") {
      a = {scratchRows("indexer_k", hd * 4, "k"), weight(wsym(2), "w"),
           weight(wsym(3), "bias"), keys, seqA, posA, i32Arg(hd, "hd"),
           i32Arg(dr, "dr"), i32Arg(ctx, "maxCtx"),
           f64Arg(ropeTheta, "theta"), pagesA, shiftA};
      grid(1, R, 1, 256);
    } else if (f == "kpool_store") {
      const std::string ring = "kpool_ring." + std::to_string(layer);
      a = {scratchRows("indexer_k", hd * 4, "k"),
           weight(wsym(2), "w"),
           weight(wsym(3), "bias"),
           scratchRows("indexer_gate", hd * 4, "gateIn"),
           i32Arg(hd, "gs"),
           weight(wsym(6), "ape"),
           i32Arg(loadedDt(wsym(6)), "adt"),
           bufferArg(st.stateOf.count(ring) ? st.stateOf[ring] : 0, "ring"),
           named(keys, "poolKeys"),
           seqA,
           posA,
           i32Arg(hd, "hd"),
           i32Arg(P, "P"),
           i32Arg(ctx, "maxCtx")};
      grid(1, R, 1, 256);
    } else if (f == "indexer_scores_ctx" || f == "indexer_scores_mma") {
      // The tensor-core form takes the same arguments (a prefill chunk).
      a = {qi, keys, scratchRows("indexer_w", nh * 4, "wts"), score, seqA,
           posA, i32Arg(nh, "nh"), i32Arg(hd, "hd"), i32Arg(ctx, "maxCtx"),
           f64Arg(1.0 / std::sqrt(double(nh)), "headScale"),
           f64Arg(1.0 / std::sqrt(double(hd)), "dotScale"),
           P > 1 ? runtimeArg("null") : pagesA, shiftA};
      if (f == "indexer_scores_mma") // shared memory: build() (kv form)
        grid(::glm::indexerMmaGridX(int(R)), R, 1, 256);
      else // blocks for the context's candidates (codegen/indexer_abi.h)
        grid(::glm::codegen::indexerCtxGridX(ctx / std::max<int64_t>(P, 1)),
             R, 1, 256);
    } else if (f == "dsa_select") {
      a = {named(score, "scoreAll"),
           posA,
           i32Arg(ix.getTopk() / P, "k"),
           contextRows("dsa_flags", 4, "flagsAll"),
           sel("selAll"),
           nsel("nsel"),
           i32Arg(ctx, "maxCtx")};
      grid(1, R, 1, 1024);
    } else {
      return false;
    }
    return true;
  }
  if (auto r = dyn_cast<RouterOp>(op)) {
    if (f != "route")
      return false;
    const int64_t E = r.getExperts();
    a = {scratchRows("router_logits", E * 4, "logitsAll"),
         weight(r.getBias(), "bias"), i32Arg(E, "E"), i32Arg(r.getTopK(), "k"),
         i32Arg(r.getRenormalize() ? 1 : 0, "normalize"),
         f64Arg(r.getScale().convertToDouble(), "scale"),
         out(op, 0, "expertsAll"), out(op, 1, "weightsAll")};
    grid(1, R, 1, uint32_t((E + 31) / 32 * 32));
    return true;
  }
  if (auto m = dyn_cast<MlpOp>(op)) {
    if (f != "swiglu")
      return false;
    const int64_t I = m.getInter();
    // 128-channel chunk c of layer L's dense MLP is this rank's by the
    // shard rule (halves with e = 0).
    std::vector<uint8_t> own(ceilDiv(I, 128));
    for (size_t c = 0; c < own.size(); ++c)
      own[c] = ranks == 1 || m.getShard()->ownerOf(0, int64_t(c)) == rank;
    a = {
        scratchRows("mlp_gate", I * 4, "g"),
        scratchRows("mlp_up", I * 4, "u"),
        i32Arg(I, "gs"),
        scratchRows("mlp_act", I * 4, "act"),
        i32Arg(I, "n"),
        byteTable("mlp_own." + std::to_string(m.getLayer()), own, "own"),
        f64Arg(m.getSwigluLimit() ? m.getSwigluLimit()->convertToDouble() : 0.0,
               "limit")};
    grid(ceilDiv(I, 256), R, 1, 256);
    return true;
  }
  if (auto e = dyn_cast<FusedExpertGemvOp>(op)) {
    if (f != "hf_expert_act" && f != "hf_expert_down" && f != "reduce_units")
      return false;
    const int64_t L = e.getLayer(), E = e.getExperts(), K = e.getTopK(),
                  hidden = e.getHidden(), I = e.getInter();
    Type t = *e.getDenseFormat();
    const int dt = dtOf(t);
    const int64_t elem = std::max<uint64_t>(elemBytes(t), 1);
    size_t group = 0; // 0 routed, 1 shared
    for (size_t i = 0; i < launch; ++i)
      group += seq[i] == "hf_expert_down";
    const bool shared = group > 0;
    auto bank = [&](bool sh, int32_t proj) {
      auto it = st.expertBank.find({L, sh, proj});
      return it == st.expertBank.end() ? std::pair<uint64_t, uint64_t>{0, 0}
                                       : it->second;
    };
    // Shared experts are one MLP of n_shared * inter channels.
    const int64_t IS = e.getShared() > 0
                           ? int64_t(bank(true, 0).second) / elem / hidden
                           : 0;
    const int64_t chunks = ceilDiv(I, 128), chunksS = ceilDiv(IS, 128);
    const int64_t slots = K * chunks + chunksS;
    const gp::ArgDef act =
        scratchRows("hf_act", std::max(K * I, IS) * 8, "act");
    const gp::ArgDef part = scratchRows("hf_part", slots * hidden * 8, "part");
    // Unit h of expert e (the shared expert is e = E) is this rank's when
    // the halves rule gives it this rank.
    auto ownTable = [&](bool sh) {
      const int64_t n = sh ? 1 : E, halves = sh ? chunksS : chunks;
      std::vector<uint8_t> own(n * halves);
      for (int64_t x = 0; x < n; ++x)
        for (int64_t h = 0; h < halves; ++h)
          own[x * halves + h] =
              ranks == 1 ||
              e.getShard().ownerOf(sh ? E : x, h) == rank;
      return byteTable("hf_own." + std::to_string(L) + (sh ? ".s" : ".r"),
                       own, "own");
    };
    auto proj = [&](bool sh, int32_t p, const char *label) {
      auto [off, bytes] = bank(sh, p);
      (void)bytes;
      return bufferArg(0, label, 0, off);
    };
    const int64_t stride = int64_t(bank(false, 0).second) / elem;
    if (f == "hf_expert_act") {
      a = {proj(shared, 0, "gate"),
           proj(shared, 1, "up"),
           i32Arg(dt, "dt"),
           in(op, 0, "x"),
           shared ? runtimeArg("null") : in(op, 1, "ids"),
           i64Arg(shared ? 0 : stride, "stride"),
           i32Arg(shared ? IS : I, "I"),
           i32Arg(hidden, "d"),
           ownTable(shared),
           i32Arg(shared ? chunksS : chunks, "halves"),
           i32Arg(0, "ownE"),
           act,
           f64Arg(e.getSwigluLimit() ? e.getSwigluLimit()->convertToDouble()
                                     : 0.0,
                  "limit")};
      grid(ceilDiv(shared ? IS : I, 256), shared ? 1 : uint32_t(K), R, 256);
    } else if (f == "hf_expert_down") {
      a = {proj(shared, 2, "down"), i32Arg(dt, "dt"), act,
           shared ? runtimeArg("null") : in(op, 1, "ids"),
           shared ? runtimeArg("null") : in(op, 2, "wts"),
           i64Arg(shared ? 0 : stride, "stride"), i32Arg(shared ? IS : I, "I"),
           i32Arg(hidden, "d"), i32Arg(shared ? 1 : K, "U"), part,
           i32Arg(slots, "slots"), i32Arg(shared ? K * chunks : 0, "slotBase")};
      grid(ceilDiv(hidden, 256), uint32_t(shared ? chunksS : K * chunks), R,
           256);
    } else {
      a = {part, i32Arg(slots, "units"), i32Arg(hidden, "n"),
           launchFixedOut
               ? fixedSumRows(op, hidden, runtimeArg("null"), "out")
               : out(op, 0, "out")};
      grid(ceilDiv(hidden, 256), R, 1, 256);
    }
    return true;
  }
  return false;
}

bool ArgBuilder::buildFlashLaunch(const std::string &f, Operation &op,
                                  int64_t rows, LaunchInfo &li) {
  auto &a = li.args;
  gp::LaunchDims &d = li.dims;
  const uint32_t R = uint32_t(rows);
  auto grid = [&](uint64_t x, uint32_t y, uint32_t block) {
    d.gridX = uint32_t(std::max<uint64_t>(x, 1));
    d.gridY = y;
    d.gridZ = 1;
    d.blockX = block;
  };
  // Σ X² partials of the streams (fp64 per column block), written by every
  // mhc_post and read by the mhc_mix right after it: the next site's RMS
  // without a pass of its own over the streams.
  auto ssParts = [&](int64_t dim) {
    return scratchRows("mhc_ss", uint64_t(mhcBlocks(dim)) * 8, "ssParts");
  };
  if (auto pre = dyn_cast<HcPreOp>(op)) {
    if (f != "mhc_mix")
      return false;
    const int64_t S = pre.getStreams(), M = (2 + S) * S,
                  dim = hiddenOf(pre.getResult());
    // The partials hold this input's Σ X² when the mhc_post that wrote the
    // input is the last one before this op.
    Operation *src = pre.getInput().getDefiningOp();
    bool fresh = src && isa<HcPostOp, HcStreamsOp>(src) &&
                 src->getBlock() == op.getBlock();
    for (Operation *o = fresh ? src->getNextNode() : nullptr; o && o != &op;
         o = o->getNextNode())
      fresh &= !isa<HcPostOp, HcStreamsOp>(o);
    const int wdt = loadedDt(pre.getBase());
    ::glm::rt::check(wdt == loadedDt(pre.getScale()), "mhc_mix of layer ",
                     pre.getLayer(),
                     ": base and scale are stored in "
                     "different dtypes; the kernel reads both as one");
    a = {in(op, 0, "X"),
         scratchRows("mhc_m", M * 4, "mRaw"),
         weight(pre.getBase(), "base"),
         weight(pre.getScale(), "scale"),
         i32Arg(wdt, "wdt"),
         fresh ? ssParts(dim) : runtimeArg("null"),
         i32Arg(fresh ? mhcBlocks(dim) : 0, "nParts"),
         out(op, 0, "u"),
         out(op, 1, "coef"),
         i32Arg(dim, "d"),
         f64Arg(pre.getEps().convertToDouble(), "rmsEps"),
         f64Arg(pre.getHcEps().convertToDouble(), "hcEps"),
         i32Arg(pre.getSinkhornIters(), "iters")};
    grid(ceilDiv(dim, 256), R, 256);
    return true;
  }
  if (isa<HcPostOp, HcStreamsOp>(op)) {
    if (f != "mhc_post")
      return false;
    const int64_t S = cast<IntegerAttr>(op.getAttr("streams")).getInt(),
                  M = (2 + S) * S;
    const int64_t dim = hiddenOf(op.getResult(0)) / S;
    gp::ArgDef y, X = runtimeArg("null"), coef;
    if (isa<HcPostOp>(op)) {
      y = in(op, 1, "y");
      X = in(op, 0, "X");
      coef = in(op, 2, "coef");
    } else {
      // Every stream a copy of the embedding: post = 1, no mixing term.
      std::vector<uint8_t> table(uint64_t(st.maxTokens) * M * 4, 0);
      const float one = 1.0f;
      for (int64_t t = 0; t < st.maxTokens; ++t)
        for (int64_t i = 0; i < S; ++i)
          std::memcpy(table.data() + (t * M + S + i) * 4, &one, 4);
      y = in(op, 0, "y");
      coef = bufferArg(st.tableBuffer("mhc_broadcast." + std::to_string(S),
                                      std::move(table)),
                       "coef", M * 4);
    }
    a = {y,
         i32Arg(dim, "ys"),
         X,
         coef,
         out(op, 0, "Xout"),
         ssParts(dim),
         i32Arg(dim, "d")};
    grid(mhcBlocks(dim), R, 256);
    return true;
  }
  if (auto head = dyn_cast<HcHeadOp>(op)) {
    if (f != "mhc_head")
      return false;
    const int64_t dim = hiddenOf(head.getResult());
    a = {in(op, 0, "X"), out(op, 0, "out"), i32Arg(dim, "d")};
    grid(ceilDiv(dim, 256), R, 256);
    return true;
  }
  auto kda = dyn_cast<KdaDecodeOp>(op);
  if (!kda)
    return false;
  const int64_t H = kda.getHeads(), hd = kda.getHeadDim();
  auto [hb, he] = kda.getShard().rangeOf(rank);
  if (ranks == 1) {
    hb = 0;
    he = H;
  }
  if (f == "fill_f32") {
    // Other ranks' heads contribute zeros to o_proj's input.
    a = {out(op, 0, "p"), i64Arg(rows * H * hd, "n"), f32Arg(0.0, "v")};
    grid(std::min<uint64_t>(ceilDiv(uint64_t(rows * H * hd), 256), 1024), 1,
         256);
    return true;
  }
  if (f != "kda_decode" && f != "kda_prep" && f != "kda_chunk")
    return false;
  ArrayAttr ws = kda.getWeights();
  auto wsym = [&](unsigned i) {
    return cast<FlatSymbolRefAttr>(ws[i]).getValue();
  };
  // One storage dtype for the taps and vectors (the kernel's wdt).
  const int wdt = loadedDt(wsym(0));
  for (unsigned i = 1; i < 6; ++i)
    ::glm::rt::check(loadedDt(wsym(i)) == wdt, "kda_decode of layer ",
                     kda.getLayer(), ": ", wsym(i).str(),
                     " is read in another dtype than the conv taps (",
                     wsym(0).str(), "); the kernel takes one (wdt)");
  // This rank's heads: their columns of the projections, their state.
  auto heads = [&](unsigned i, int64_t width, const char *label) {
    gp::ArgDef x = in(op, i, label);
    x.offset += uint64_t(hb * width) * 4;
    return x;
  };
  const std::string L = std::to_string(kda.getLayer());
  auto state = [&](const std::string &name, const char *label) {
    auto it = st.stateOf.find(name);
    ::glm::rt::check(it != st.stateOf.end(), "kda_decode of layer ", L,
                     ": no buffer ", name);
    return bufferArg(it->second, label);
  };
  gp::ArgDef o = out(op, 0, "out");
  o.offset += uint64_t(hb * hd) * 4;
  const double lower =
      kda.getLowerBound() ? kda.getLowerBound()->convertToDouble() : 0.0;
  // Prefill: kda_prep's packed q̂, k̂, v, g, β rows of this rank's heads,
  // then kda_chunk over them into the rank's columns of full-width rows.
  const int64_t n = he - hb;
  auto prep = [&](const char *name, int64_t perRow, const char *label) {
    return scratchRows(std::string("kda_prep.") + name, uint64_t(perRow) * 4,
                       label);
  };
  if (f == "kda_prep") {
    a = {heads(0, hd, "q"),       heads(1, hd, "k"),
         heads(2, hd, "v"),       heads(3, hd, "f"),
         i32Arg(H * hd, "ins"),   heads(5, 1, "bRaw"),
         i32Arg(H, "bs"),         weight(wsym(0), "convQ"),
         weight(wsym(1), "convK"), weight(wsym(2), "convV"),
         weight(wsym(4), "aLog"), weight(wsym(3), "dtBias"),
         i32Arg(wdt, "wdt"),      state("kda_conv." + L, "convState"),
         io(st.ioSlots, "seq"),   io(st.ioPositions, "pos"),
         prep("q", n * hd, "qo"), prep("k", n * hd, "ko"),
         prep("v", n * hd, "vo"), prep("g", n * hd, "go"),
         prep("beta", n, "betaO"), i32Arg(rows, "T"),
         i32Arg(hb, "h0"),        i32Arg(hd, "dk"),
         i32Arg(hd, "dv"),        i32Arg(kda.getConvKernel(), "K"),
         f32Arg(lower, "lower")};
    grid(n, uint32_t((rows + 7) / 8), d.blockX);
    li.skip = n == 0;
    return true;
  }
  if (f == "kda_chunk") {
    a = {prep("q", n * hd, "q"),
         prep("k", n * hd, "k"),
         prep("v", n * hd, "v"),
         prep("g", n * hd, "g"),
         prep("beta", n, "beta"),
         heads(4, hd, "gate"),
         i32Arg(H * hd, "gs"),
         weight(wsym(5), "oNorm"),
         i32Arg(wdt, "wdt"),
         state("kda_state." + L, "state"),
         io(st.ioSlots, "seq"),
         io(st.ioPositions, "pos"),
         o,
         i32Arg(rows, "T"),
         i32Arg(hd, "dk"),
         i32Arg(hd, "dv"),
         f32Arg(kda.getEps().convertToDouble(), "eps"),
         i32Arg(H * hd, "os")};
    grid(n, 1, d.blockX);
    d.smemBytes = uint32_t(4 * ::glm::fm::kdaChunkSmemFloats(
                                   glmc::kKdaPrefillChunk, int(hd), int(hd)));
    li.skip = n == 0;
    return true;
  }
  a = {
      heads(0, hd, "q"),
      heads(1, hd, "k"),
      heads(2, hd, "v"),
      heads(3, hd, "f"),
      heads(4, hd, "gate"),
      i32Arg(H * hd, "ins"),
      heads(5, 1, "bRaw"),
      i32Arg(H, "bs"),
      weight(wsym(0), "convQ"),
      weight(wsym(1), "convK"),
      weight(wsym(2), "convV"),
      weight(wsym(4), "aLog"),
      weight(wsym(3), "dtBias"),
      weight(wsym(5), "oNorm"),
      i32Arg(wdt, "wdt"),
      state("kda_conv." + L, "convState"),
      state("kda_state." + L, "state"),
      io(st.ioSlots, "seq"),
      io(st.ioPositions, "pos"),
      o,
      i32Arg(hb, "h0"),
      i32Arg(hd, "dk"),
      i32Arg(hd, "dv"),
      i32Arg(kda.getConvKernel(), "K"),
      f32Arg(kda.getLowerBound() ? kda.getLowerBound()->convertToDouble() : 0.0,
             "lower"),
      f32Arg(kda.getEps().convertToDouble(), "eps")};
  grid(he - hb, R, d.blockX); // build() set the kernel's block (THREADS)
  li.skip = he == hb;
  return true;
}

void ArgBuilder::buildGroupedMoeLaunch(const gp::KernelDef &k, Operation &op,
                                       int64_t rows, size_t launch,
                                       const std::vector<std::string> &seq,
                                       LaunchInfo &li) {
  auto &a = li.args;
  gp::LaunchDims &d = li.dims;
  const std::string &f = k.templateName;
  const uint32_t threads = d.blockX;
  auto e = cast<FusedExpertGemvOp>(op);
  const int64_t hidden = e.getHidden(), topk = e.getTopK(),
                S = e.getShared(), E = e.getExperts(), H = e.getHalves();
  const int64_t U = topk + S, Etot = E + S;
  // The expert tables in moe_trellis's layout (routed then shared experts),
  // side vectors at a pitch of the intermediate width (moe_group.cuh: inter
  // = 128 * H; GLM-5.3's 2048 shares moe_trellis's tables).
  const int64_t kPitch = e.getInter();
  ::glm::rt::check(kPitch == 128 * H, "glm-emit-plan: layer MoE of ", kPitch,
                   " intermediate channels in ", H,
                   " halves (internal: EmitKernels groups 128-channel halves "
                   "only)");
  const ExpertTables T = expertTables(e, 0, Etot, kPitch);
  // Entries (token, slot) of the chunk, sorted by expert; GEMM items of
  // BM rows (moe_group.cuh). Per-token scratch rows, so the largest chunk
  // sizes them.
  const int64_t bm = ::glm::codegen::moeGroupedRows(rows, topk, E);
  const int64_t N = rows * U;
  // Item slots: each expert's rows in blocks of bm, at most N / bm + Etot.
  const int64_t NB = ::glm::codegen::moeGroupedSlots(N, bm, Etot);
  const int64_t NBmax = ::glm::codegen::moeGroupedSlots(
      int64_t(st.maxTokens) * U, 64, Etot);
  gp::ArgDef xh = scratchRows("expert_xh", hidden * 4, "xh");
  gp::ArgDef order = scratchRows("moe_order", U * 4, "order");
  gp::ArgDef entryOf = scratchRows("moe_entry_of", U * 4, "entry_of");
  gp::ArgDef X = scratchRows("moe_x", U * 2 * hidden * 2, "X");
  gp::ArgDef zgu = scratchRows("moe_zgu", U * 2 * kPitch * 4, "Zgu");
  gp::ArgDef act = scratchRows("moe_act", U * kPitch * 2, "act");
  gp::ArgDef zd = scratchRows("moe_zd", U * hidden * 4, "zd");
  const uint64_t guBytes = uint64_t(NBmax) * 2 * H * 32;
  const uint64_t downBytes = uint64_t(NBmax) * H * 32;
  gp::ArgDef guItems =
      bufferArg(st.scratchBuffer("moe_gu_items." + std::to_string(H), guBytes),
                "gu_items");
  gp::ArgDef downItems = bufferArg(
      st.scratchBuffer("moe_down_items." + std::to_string(H), downBytes),
      "down_items");
  gp::ArgDef ids = in(op, 1, "expert_ids"), rw = in(op, 2, "route_w");
  const gp::ArgDef limit = f32Arg(
      e.getSwigluLimit() ? e.getSwigluLimit()->convertToDouble() : 0.0,
      "swiglu_limit");
  if (f == "hadamard128") {
    // First: H(x * signs.in) for every token; last: H(out) * signs.out in
    // place.
    const bool last = launch + 1 == seq.size();
    gp::ArgDef x = last ? out(op, 0, "x") : in(op, 0, "x");
    gp::ArgDef y = last ? out(op, 0, "y") : xh;
    x.name = "x";
    y.name = "y";
    a = {x, last ? runtimeArg("null") : named(T.signsIn, "pre"),
         last ? named(T.signsOut, "post") : runtimeArg("null"), y,
         i32Arg(rows, "rows"), i32Arg(hidden, "n"), i32Arg(0, "pre_stride"),
         i32Arg(0, "post_stride")};
    d.gridX = ceilDiv(rows * hidden / 128, std::max<uint32_t>(1, threads / 32));
  } else if (f == "moe_group") {
    a = {ids, i32Arg(rows, "T"), i32Arg(topk, "topk"), i32Arg(E, "E"),
         i32Arg(S, "S"), i32Arg(H, "H"), i32Arg(bm, "BM"), T.tiles, T.widths,
         i32Arg(hidden, "hidden"), i32Arg(kPitch, "inter"), order, entryOf,
         guItems, downItems, i32Arg(NB, "NB")};
    d.gridX = 1;
  } else if (f == "moe_gather") {
    a = {xh, ids, order, named(T.guSuBlock, "gu_su_block"), X, i32Arg(N, "N"),
         i32Arg(topk, "topk"), i32Arg(E, "E"), i32Arg(S, "S"),
         i32Arg(hidden, "hidden")};
    d.gridX = uint32_t(N);
    d.gridY = ceilDiv(hidden, 2 * threads); // 4 elements a thread
  } else if (f == "gemm_trellis_grouped") {
    size_t firstGemm = 0;
    while (seq[firstGemm] != "gemm_trellis_grouped")
      ++firstGemm;
    if (launch == firstGemm) {
      gp::ArgDef x = X, z = zgu;
      x.name = "xh";
      z.name = "z";
      gp::ArgDef items = guItems;
      items.name = "items";
      a = {x, runtimeArg("null"), items, z, i32Arg(NB * 2 * H, "n_items"),
           i32Arg(hidden, "in"), i32Arg(128, "out"),
           i32Arg(2 * hidden, "x_stride"), i32Arg(2 * kPitch, "z_stride"),
           i32Arg(0, "accumulate"), i32Arg(8, "sI"), i32Arg(64, "sI8"),
           i32Arg(0, "sJ8")};
      d.gridX = uint32_t(NB * 2 * H);
      d.gridY = ceilDiv(128, threads);
    } else {
      // Down: every half of an expert row block in one block (halves = H:
      // the items h * NB + b added in registers), added into zd (moe_act
      // zeroed it); or, one launch per half, half h = launch - (first down
      // launch) in half order.
      const int64_t h = int64_t(launch) - int64_t(firstGemm) - 2;
      const bool oneLaunch =
          std::count(seq.begin(), seq.end(), "gemm_trellis_grouped") == 2;
      gp::ArgDef x = act, z = zd, items = downItems;
      x.name = "xh";
      z.name = "z";
      items.name = "items";
      if (!oneLaunch)
        items.offset += uint64_t(h) * uint64_t(NB) * 32;
      a = {x, runtimeArg("null"), items, z, i32Arg(NB, "n_items"),
           i32Arg(128, "in"), i32Arg(hidden, "out"), i32Arg(kPitch, "x_stride"),
           i32Arg(hidden, "z_stride"), i32Arg(1, "accumulate"),
           i32Arg(8, "sI"), i32Arg(0, "sI8"), i32Arg(64, "sJ8")};
      d.gridX = uint32_t(NB);
      d.gridY = ceilDiv(hidden, threads);
    }
  } else if (f == "moe_act") {
    a = {zgu, ids, order, T.tiles, named(T.guSvh, "gu_svh"),
         named(T.downSuh, "down_suh"), act, zd, i32Arg(N, "N"),
         i32Arg(topk, "topk"), i32Arg(E, "E"), i32Arg(S, "S"),
         i32Arg(kPitch, "inter"), i32Arg(hidden, "hidden"), limit};
    d.gridX = uint32_t(N);
    d.gridY = ceilDiv(H * 32, threads);
  } else if (f == "moe_combine") {
    a = {zd, entryOf, ids, rw, named(T.downSvBlock, "down_sv_block"),
         out(op, 0, "out"), i32Arg(rows, "T"), i32Arg(topk, "topk"),
         i32Arg(E, "E"), i32Arg(S, "S"), i32Arg(hidden, "hidden"),
         i32Arg(0, "accumulate")};
    d.gridX = uint32_t(rows);
    d.gridY = ceilDiv(hidden, 4 * threads); // 4 columns a thread
  } else {
    ::glm::rt::fail("glm-emit-plan: ", f,
                    " in a grouped MoE layer (internal: EmitKernels and "
                    "EmitPlan disagree on its launches)");
  }
}

LaunchInfo ArgBuilder::build(const gp::KernelDef &k, Operation &op,
                             int64_t rows, size_t launch,
                             const std::vector<std::string> &seq) {
  LaunchInfo li;
  auto &a = li.args;
  gp::LaunchDims &d = li.dims;
  const std::string &f = k.templateName;
  const uint32_t threads = k.launch.blockX ? k.launch.blockX : 256;
  const uint32_t warps = std::max<uint32_t>(1, threads / 32);
  d.blockX = threads;
  const gp::ArgDef batch = runtimeArg("batch");
  const bool exlr8 = layout == "exlr8";
  auto targ = [&](const char *key) {
    auto it = k.templateArgs.find(key);
    return it == k.templateArgs.end() ? std::string() : it->second;
  };

  launchFixedOut = fixedOut(k);
  if (buildHelperLaunch(f, op, rows, launch, seq, li)) {
    if (f == "indexer_scores_mma") { // its key tiles: planes per kv form
      const std::string kv = targ("kv");
      const int form = kv == "e4m3"   ? ::glm::kv::kE4m3
                       : kv == "bf16" ? ::glm::kv::kBf16
                                      : ::glm::kv::kF32;
      d.smemBytes = ::glm::indexerMmaSmemBytes(form, int(d.blockX));
    }
    return li;
  }
  if (f == "embed") {
    auto e = cast<EmbedOp>(op);
    int64_t hidden = hiddenOf(e.getResult());
    WeightOp w = weightOp(e.getWeight());
    int64_t vocab = w ? w.getShape()[0] : 0;
    a = {in(op, 0, "ids"), weight(e.getWeight(), "table"),
         runtimeArg(targ("format") == "fp8_row" ? "embed_scale" : "null"),
         out(op, 0, "out"), batch, i32Arg(hidden, "hidden"),
         i32Arg(0, "row_begin"), i32Arg(vocab, "rows")};
    d.gridX = ceilDiv(hidden, threads);
    d.gridY = rows;
  } else if (f == "rms_norm") {
    int64_t n = hiddenOf(op.getResult(op.getNumResults() - 1));
    double eps = 1e-5;
    StringRef sym;
    if (auto r = dyn_cast<RmsNormOp>(op)) {
      eps = r.getEps().convertToDouble();
      sym = r.getWeight();
      a = {in(op, 0, "x"), runtimeArg("null"), weight(sym, "w"),
           out(op, 0, "y")};
    } else {
      auto ar = cast<AddRmsNormOp>(op);
      eps = ar.getEps().convertToDouble();
      sym = ar.getWeight();
      // x += add in place (the residual sum), y = norm(x).
      a = {in(op, 0, "x"), in(op, 1, "add"), weight(sym, "w"),
           out(op, 1, "y")};
    }
    a.insert(a.end(), {batch, i32Arg(n, "n"), i32Arg(n, "x_stride"),
                       f32Arg(eps, "eps")});
    d.gridX = rows;
  } else if (f == "dense_gemv" || f == "gemm_dense" || f == "dense_gemv_f32" ||
             f == "dense_gemv_trellis" || f == "gemm_trellis" ||
             f == "dense_trellis" ||
             (f == "hadamard128" && trellisNeighbour(seq, launch)) ||
             (f == "vocab_gather" && launch >= 2 &&
              isTrellisGemv(seq[launch - 2]))) {
    // A GEMV launch (or a trellis GEMV's input/output rotation, or the copy
    // of a padded output's valid columns): which weight, input and output
    // the op's k-th GEMV has.
    const bool hadIn = f == "hadamard128" &&
                       launch + 1 < seq.size() && isTrellisGemv(seq[launch + 1]);
    const bool hadOut = f == "hadamard128" && !hadIn;
    const bool copyOut = f == "vocab_gather";
    const size_t gemvAt = hadIn    ? launch + 1
                          : hadOut ? launch - 1
                          : copyOut ? launch - 2
                                    : launch;
    size_t ordinal = 0;
    for (size_t i = 0; i < gemvAt; ++i)
      ordinal += isGemv(seq[i]);
    GemvUse g = gemvUse(op, ordinal);
    const std::string &gf = seq[gemvAt];
    li.weightSym = g.sym.str();
    const bool trellis = isTrellisGemv(gf);
    // A trellis GEMV reads the rotated input and writes its raw output to
    // scratch rows; the rotations connect them to the op's values.
    // Trellis tensors are padded to 128 (EXL3) or 128-aligned (exlr8).
    const int64_t inPad = trellis ? ceilDiv(g.in, 128) * 128 : g.in;
    // This rank's output rows (padded), and the stored tensor's (strides).
    const int64_t outPad = trellis ? ceilDiv(g.outRows, 128) * 128 : g.outRows;
    const int64_t fullOutPad = ceilDiv(g.out, 128) * 128;
    // With a copy after the output rotation (EmitKernels: an output width
    // that is not whole 128-blocks), z holds the padded rows, rotated in
    // place, and the copy writes the valid columns to the op's value.
    const bool padded = gemvAt + 2 < seq.size() &&
                        seq[gemvAt + 2] == "vocab_gather";
    const int64_t zCols = padded ? outPad : g.outRows;
    // The rotated input and raw output rows exist only where a launch of
    // this sequence reads them (a trellis GEMV's; dense_trellis rotates
    // its output itself): a scratch buffer nobody reads still takes its
    // rows of the arena (an fp8 LM head's z alone was rows x vocab x 4 B).
    const bool rotation = hadIn || hadOut || copyOut;
    ::glm::rt::check(trellis || !rotation, "launch ", f, " of ", g.sym.str(),
                     " rotates the rows of ", gf,
                     ", which is not a trellis GEMV (internal: EmitKernels)");
    gp::ArgDef xh, z;
    if (trellis && (hadIn || !rotation))
      xh = scratchRows("trellis_xh." + std::to_string(inPad), inPad * 4, "xh");
    if (trellis && (hadOut || copyOut || (!rotation && gf != "dense_trellis")))
      z = scratchRows("trellis_z." + std::to_string(zCols), zCols * 4, "z");
    if (copyOut) {
      std::vector<uint8_t> bounds(16, 0); // int64 {0, valid columns}
      const int64_t valid = g.outRows;
      std::memcpy(bounds.data() + 8, &valid, 8);
      gp::ArgDef from = z, to = g.y;
      from.name = "g";
      to.name = "out";
      a = {from,
           byteTable("valid_columns." + std::to_string(valid), bounds,
                     "vb"),
           batch, i32Arg(zCols, "maxCount"), to,
           i32Arg(g.outStride, "V")};
      li.weightSym.clear();
      d.gridX = uint32_t(ceilDiv(zCols, threads));
      d.gridY = 1;
      d.gridZ = uint32_t(rows);
    } else if (hadIn || hadOut) {
      gp::ArgDef x = hadIn ? g.x : z,
                 y = hadIn ? xh : padded ? z : g.y;
      x.name = "x";
      y.name = "y";
      int64_t n = hadIn ? inPad : zCols;
      a = {x, hadIn ? roleArg(g.sym, "suh", "pre") : runtimeArg("null"),
           hadIn ? runtimeArg("null") : roleArg(g.sym, "svh", "post"), y,
           batch,
           i32Arg(n, "n"), i32Arg(0, "pre_stride"), i32Arg(0, "post_stride")};
      li.weightSym.clear(); // the GEMV launch carries the bytes
      d.gridX = ceilDiv(rows * n / 128, warps);
    } else {
      WeightOp w = weightOp(g.sym);
      uint64_t rowStart =
          g.rowBegin * g.in * elemBytes(w ? w.getType() : Type());
      gp::ArgDef wt = trellis ? roleArg(g.sym, "trellis", "tiles", rowStart)
                              : weight(g.sym, "w", rowStart);
      gp::ArgDef x = trellis ? xh : g.x,
                 y = trellis && f != "dense_trellis" ? z : g.y;
      x.name = trellis ? "xh" : "x";
      y.name = trellis && f != "dense_trellis" ? "z" : "y";
      if (f == "dense_gemv" || f == "gemm_dense") {
        // x rows at stride `in` (the template's layout): a strided input
        // row is only fine for one row.
        ::glm::rt::check(rows <= 1 || !g.x.rowBytes ||
                             g.x.rowBytes == uint64_t(g.in) * 4,
                         "dense_gemv of ", g.sym.str(), " reads input rows of ",
                         g.x.rowBytes / 4, " floats at ", g.in,
                         " inputs: the template takes rows at stride in "
                         "(internal: glm-emit-kernels should choose gemv_any)");
        // This rank's rows of the scales (as gemv_any's): one per row
        // (fp8_row), per 128x128 block (fp8_block128), per 32 inputs (mxfp8,
        // e8m0 bytes).
        const int sk = skOf(w ? w.getType() : Type());
        uint64_t scaleAt = 0;
        if (sk == 1)
          scaleAt = uint64_t(g.rowBegin / 128) * ceilDiv(g.in, 128) * 4;
        else if (sk == 2)
          scaleAt = uint64_t(g.rowBegin) * 4;
        else if (sk == 3)
          scaleAt = uint64_t(g.rowBegin) * ceilDiv(g.in, 32);
        const bool fx = fixedOut(k);
        a = {x, wt,
             sk ? roleArg(g.sym, sk == 3 ? "e8m0" : "scale", "scale", scaleAt)
                : runtimeArg("null"),
             fx ? fixedSumRows(op, g.outRows, runtimeArg("null"), "y") : y,
             batch, i32Arg(g.in, "in"), i32Arg(g.outRows, "out"),
             i32Arg(fx ? g.outRows : g.outStride, "out_stride"),
             i32Arg(0, "accumulate")};
        // Short outputs split their rows' inputs over more warps so every
        // SM streams; long ones take the kernel's rows a warp
        // (codegen/dense_gemv_abi.h).
        const std::string rowsPerWarp = targ("rows");
        d.gridX = ::glm::codegen::denseGemvBlocks(
            int(g.outRows), sms(), int(warps),
            rowsPerWarp.empty() ? 1 : std::stoi(rowsPerWarp));
        if (f == "gemm_dense") {
          // A prefill chunk's LM head computes the rows io.logit_rows
          // names (the runtime's window: the prompt's last row, unless
          // every row's logits are asked for); other GEMMs every row.
          a.push_back(prefill && isLogitsGemv(&op) && st.ioLogitRows >= 0
                          ? bufferArg(uint32_t(st.ioLogitRows), "window")
                          : runtimeArg("null"));
          // Block tile bm tokens x BN outputs (gemm_dense.cuh).
          const int64_t bm = std::stoll(targ("bm").empty() ? "64" : targ("bm"));
          d.gridX = ::glm::codegen::gemmDenseGridX(int(g.outRows), int(bm),
                                                   int(threads));
          d.gridY = ::glm::codegen::gemmDenseGridY(int(rows), int(bm));
        }
      } else if (f == "dense_gemv_f32") {
        a = {x, wt, y, i32Arg(g.in, "in"), i32Arg(g.outRows, "out")};
        d.gridX = ceilDiv(g.outRows, warps);
      } else {
        // Tile strides: EXL3 row-major tiles of the padded [in, out]
        // matrix; exlr8 records of 128-channel slices (in_major128: input
        // slices, else output slices), as runtime/cuda/device_weights.cpp.
        WeightOp wop = weightOp(g.sym);
        auto tt = wop ? dyn_cast<TrellisType>(wop.getType()) : TrellisType();
        const bool inMajor = tt && tt.getOrder() == TileOrder::InMajor128;
        gp::ArgDef sI = i32Arg(exlr8 ? 8 : fullOutPad / 16, "sI");
        gp::ArgDef sI8 = i32Arg(exlr8 ? (inMajor ? g.out / 2 : 64)
                                      : fullOutPad / 2,
                                "sI8");
        gp::ArgDef sJ8 = i32Arg(exlr8 ? (inMajor ? 64 : g.in / 2) : 8, "sJ8");
        if (f == "dense_trellis") {
          // One launch: split-k partials, their fixed-order sum and the
          // output rotation (H * svh) into y's rows.
          const ::glm::codegen::DenseTrellisTuning t = tunings.dense();
          ::glm::codegen::DenseTrellisDims dd;
          dd.batch = int(rows);
          dd.in = inPad;
          dd.out = outPad;
          dd.threads = t.threads;
          // A fixed-point sum over rank-owned units needs k-chunks that
          // never straddle two of them: a dense MLP's pairs of 128-channel
          // chunks (16 tile rows), o_proj's heads (the same split at every
          // rank count, so the same chunk sums).
          int64_t unitRows = 0;
          if (fixedSum(k)) {
            if (isa<MlpOp>(op)) {
              unitRows = 16;
            } else if (auto at = op.getOperand(0)
                                     .getDefiningOp<AttentionDecodeOp>()) {
              ::glm::rt::check(inPad % (16 * at.getHeads()) == 0, "o_proj ",
                               g.sym.str(), ": ", inPad, " inputs are not ",
                               at.getHeads(), " heads of whole 16-row tiles");
              unitRows = inPad / 16 / at.getHeads();
            }
            dd.sum = 1;
          }
          dd.split = ::glm::codegen::denseTrellisSplit(inPad, outPad, sms(),
                                                       t, unitRows);
          ::glm::rt::check(::glm::codegen::denseTrellisChunksAligned(
                               inPad / 16, dd.split, unitRows),
                           g.sym.str(), ": no dense_trellis split of ",
                           inPad / 16, " tile rows over ", dd.warps(),
                           " warps keeps its ", unitRows,
                           "-row units whole (needed for the same bits at "
                           "every rank count)");
          const bool fx = fixedOut(k);
          // Scratch and counters by size (shared by the GEMVs of that
          // size; the counters return to zero after each launch).
          const uint64_t sb = dd.scratchFloats() * 4;
          const uint64_t cb = dd.counterInts() * 4;
          a = {x, wt,
               fx ? runtimeArg("null") : roleArg(g.sym, "svh", "svh"),
               bufferArg(st.scratchBuffer("dense_trellis." +
                                              std::to_string(alignUp(sb)),
                                          sb),
                         "scratch"),
               bufferArg(st.scratchBuffer("dense_trellis_counters." +
                                              std::to_string(alignUp(cb)),
                                          cb),
                         "counters"),
               fx ? fixedSumRows(op, g.outRows,
                                 roleArg(g.sym, "svh", "post"), "y")
                  : g.y,
               batch, i32Arg(inPad, "in"), i32Arg(outPad, "out"),
               i32Arg(fx ? g.outRows : g.outStride, "y_stride"),
               i32Arg(g.outRows, "out_valid"), sI, sI8, sJ8,
               i32Arg(dd.split, "split")};
          a[5].name = "y";
          d.gridX = dd.grid();
          d.blockX = uint32_t(dd.threads);
        } else if (f == "dense_gemv_trellis") {
          a = {x, wt, y, batch, i32Arg(g.in, "in"), i32Arg(g.outRows, "out"),
               sI, sI8, sJ8};
          d.gridX = ceilDiv(ceilDiv(g.outRows, 16), warps);
        } else {
          int64_t bm = std::stoll(targ("bm").empty() ? "64" : targ("bm"));
          a = {x, wt, y, runtimeArg("batch"), i32Arg(g.in, "in"),
               i32Arg(zCols, "out"), i32Arg(g.in, "x_stride"),
               i32Arg(zCols, "z_stride"), i32Arg(0, "accumulate"), sI,
               sI8, sJ8};
          // Block tile bm tokens x `threads` outputs (BN = THREADS).
          d.gridX = ceilDiv(zCols, threads);
          d.gridY = ceilDiv(rows, bm);
        }
      }
    }
  } else if (std::find(seq.begin(), seq.end(), "moe_group") != seq.end()) {
    buildGroupedMoeLaunch(k, op, rows, launch, seq, li);
  } else if (f == "hadamard128" || f == "moe_trellis" ||
             f == "expert_gemv_trellis" || f == "moe_reduce" ||
             f == "exl3_expert_in" || f == "moe_exl3_in") {
    // The trellis experts of a MoE layer: the routed experts, then the
    // shared one, either both in moe_trellis's two launches or per group
    // through expert_gemv_trellis + moe_reduce.
    auto e = cast<FusedExpertGemvOp>(op);
    const int64_t hidden = e.getHidden(), topk = e.getTopK(),
                  shared = e.getShared(), E = e.getExperts();
    const bool mt = std::find(seq.begin(), seq.end(), "moe_trellis") !=
                    seq.end();
    const bool exl3 = !exlr8;
    const int64_t inter = e.getInter();
    // exlr8: one H(x * signs.in) row per token; EXL3: one rotated row per
    // (token, slot, projection).
    const int64_t slots = mt ? topk + shared : std::max<int64_t>(topk, 1);
    const int64_t xhRow = exlr8 ? hidden : 2 * slots * hidden;
    gp::ArgDef xh = scratchRows("expert_xh", xhRow * 4, "xh");
    // Which group a per-group launch serves: the routed experts, then the
    // shared one (id 0 of its own tables, weight 1).
    size_t group = 0;
    for (size_t i = 0; i < launch; ++i)
      group += seq[i] == "moe_reduce";
    const bool sharedGroup = !mt && group > 0;
    const int64_t gTopk = sharedGroup ? 1 : topk;
    const ExpertTables T =
        mt ? expertTables(e, 0, E + shared, 2048)
           : expertTables(e, sharedGroup ? E : 0, sharedGroup ? shared : E,
                          inter);
    std::vector<uint8_t> zeros(uint64_t(st.maxTokens) * 4, 0), ones;
    for (int64_t i = 0; i < st.maxTokens; ++i) {
      const float one = 1.0f;
      const uint8_t *b = reinterpret_cast<const uint8_t *>(&one);
      ones.insert(ones.end(), b, b + 4);
    }
    gp::ArgDef ids = sharedGroup
                         ? named(bufferArg(st.tableBuffer("shared_ids", zeros),
                                           "", 4),
                                 "expert_ids")
                         : in(op, 1, "expert_ids");
    gp::ArgDef rw = sharedGroup
                        ? named(bufferArg(st.tableBuffer("shared_w", ones), "",
                                          4),
                                "route_w")
                        : in(op, 2, "route_w");
    const bool last = launch + 1 == seq.size();
    // GLM-5.3-Flash's SwiGLU clamp (0 = none), applied in the fp32 tail of
    // gate/up (clampSwiglu, glm_common.cuh).
    const gp::ArgDef limit = f32Arg(
        e.getSwigluLimit() ? e.getSwigluLimit()->convertToDouble() : 0.0,
        "swiglu_limit");
    if (f == "exl3_expert_in") {
      a = {in(op, 0, "x"), named(T.suhIn, "suh"), ids, named(xh, "xh"),
           i32Arg(hidden, "d"), i32Arg(sharedGroup ? shared : E, "E"),
           i32Arg(rows, "B")};
      d.gridX = ceilDiv(hidden, threads);
      d.gridY = uint32_t(gTopk);
      d.gridZ = uint32_t(2 * rows);
    } else if (f == "moe_exl3_in") {
      a = {in(op, 0, "x"), named(T.suhIn, "suh"), in(op, 1, "ids"),
           named(xh, "xh"), i32Arg(hidden, "d"), i32Arg(E + shared, "eTot"),
           i32Arg(E, "nRouted"), i32Arg(topk, "topk"), i32Arg(rows, "B")};
      d.gridX = ceilDiv(hidden, threads);
      d.gridY = uint32_t(slots);
      d.gridZ = uint32_t(2 * rows);
    } else if (f == "hadamard128") {
      // exlr8: the input H(x * signs.in) once, the output H(out) *
      // signs.out last; EXL3: in place over the rows x * suh per slot and
      // projection.
      gp::ArgDef x = last ? out(op, 0, "x") : exlr8 ? in(op, 0, "x") : xh;
      gp::ArgDef y = last ? out(op, 0, "y") : xh;
      x.name = "x";
      y.name = "y";
      const int64_t hrows =
          exlr8 || last ? rows : 2 * rows * (mt ? slots : gTopk);
      a = {x, last || !exlr8 ? runtimeArg("null") : named(T.signsIn, "pre"),
           last ? named(T.signsOut, "post") : runtimeArg("null"), y,
           i32Arg(hrows, "rows"), i32Arg(hidden, "n"), i32Arg(0, "pre_stride"),
           i32Arg(0, "post_stride")};
      d.gridX = ceilDiv(hrows * hidden / 128, warps);
    } else if (f == "moe_trellis") {
      const ::glm::codegen::MoeTrellisTuning t = tunings.moe(hidden);
      const ::glm::codegen::MoeTrellisDims dm = ::glm::codegen::moeTrellisDims(
          t, int(rows), int(topk), int(E), int(shared), int(hidden));
      // Scratch and counters sized for the largest template batch, shared
      // by every bucket and layer (the counters return to zero after each
      // layer's down launch).
      ::glm::codegen::MoeTrellisDims big = ::glm::codegen::moeTrellisDims(
          t, 8, int(topk), int(E), int(shared), int(hidden));
      // Room for int64 down partials (a fixed-point sum) in both stages'
      // scratch: gate/up and down must name the same buffer.
      big.sum = 1;
      const bool fx = fixedOut(k);
      const gp::ArgDef signs =
          exl3 ? runtimeArg("null") : named(T.signsOut, "signs_out");
      a = {named(xh, "xh"), ids, rw, T.tiles, T.widths, T.guSvh,
           exl3 ? runtimeArg("null") : T.guSuBlock, T.downSuh,
           exl3 ? runtimeArg("null") : T.downSvBlock,
           exl3 ? T.downSvh : runtimeArg("null"),
           fx ? runtimeArg("null") : signs,
           bufferArg(st.scratchBuffer("moe_scratch", big.scratchFloats() * 4),
                     "scratch"),
           bufferArg(st.scratchBuffer("moe_counters", big.counterInts() * 4),
                     "counters"),
           fx ? fixedSumRows(op, hidden, signs, "out") : out(op, 0, "out"),
           batch, i32Arg(topk, "topk"),
           i32Arg(E, "n_routed"), i32Arg(shared, "n_shared"),
           i32Arg(hidden, "hidden"), i32Arg(dm.inter, "inter"),
           i32Arg(xhRow, "xh_row_stride"),
           i32Arg(exl3 ? 2 * hidden : 0, "xh_slot_stride"),
           i32Arg(exl3 ? hidden : 0, "xh_proj_stride"),
           i32Arg(exl3 ? inter / 16 : 8, "gu_sI"),
           i32Arg(exl3 ? inter / 2 : 64, "gu_sI8"),
           i32Arg(exl3 ? hidden / 16 : 8, "down_sI"),
           i32Arg(exl3 ? 8 : 64, "down_sJ8"), i32Arg(t.guSplit, "gu_split"),
           i32Arg(t.downGroup, "down_group"), i32Arg(0, "accumulate"), limit};
      d.gridX = targ("stage") == "gu" ? dm.gridGateUp() : dm.gridDown();
      d.blockX = uint32_t(t.threads);
      d.smemBytes = ::glm::codegen::moeTrellisDynSmem(
          e.getE4m3(), t.threads, false);
    } else {
      // (row, slot, half) partials of one group's launch.
      uint32_t partial = st.scratchBuffer(
          sharedGroup ? "expert_partial_shared" : "expert_partial",
          uint64_t(8) * std::max<int64_t>(topk, 1) * 16 * hidden * 4);
      if (f == "moe_reduce") {
        a = {bufferArg(partial, "partial"), ids, T.tiles, out(op, 0, "out"),
             batch, i32Arg(gTopk, "topk"), i32Arg(hidden, "hidden"),
             i32Arg(sharedGroup ? 1 : 0, "accumulate")};
        d.gridX = ceilDiv(hidden, threads);
        d.gridY = rows;
      } else {
        a = {named(xh, "xh"), ids, rw, T.tiles, T.widths, T.guSvh,
             exl3 ? runtimeArg("null") : T.guSuBlock, T.downSuh,
             exl3 ? runtimeArg("null") : T.downSvBlock,
             exl3 ? T.downSvh : runtimeArg("null"),
             bufferArg(partial, "partial"), batch, i32Arg(gTopk, "topk"),
             i32Arg(hidden, "hidden"), i32Arg(inter, "inter"),
             i32Arg(exlr8 ? hidden : gTopk * hidden, "xh_row_stride"),
             i32Arg(exlr8 ? 0 : hidden, "xh_slot_stride"),
             i32Arg(exlr8 ? 0 : rows * gTopk * hidden, "xh_proj_stride"),
             i32Arg(exlr8 ? 8 : inter / 16, "gu_sI"),
             i32Arg(exlr8 ? 64 : inter / 2, "gu_sI8"),
             i32Arg(exlr8 ? 8 : hidden / 16, "down_sI"),
             i32Arg(exlr8 ? 64 : 8, "down_sJ8"), limit};
        d.gridX = e.getHalves();
        d.gridY = sharedGroup ? shared : E;
      }
    }
  } else if (f == "rope" || f == "mla_decode") {
    if (auto at = dyn_cast<AttentionDecodeOp>(op)) {
      auto [hb, he] = at.getShard().rangeOf(rank);
      int64_t heads = ranks > 1 ? he - hb : at.getHeads();
      int64_t qkHead = at.getQkNope() + at.getQkRope();
      int64_t qRow = hiddenOf(at.getQ());
      if (f == "rope") {
        a = {in(op, 0, "x"), runtimeArg("positions"), batch,
             i32Arg(heads, "heads"), i32Arg(qRow, "row_stride"),
             i32Arg(qkHead, "head_stride"), i32Arg(at.getQkNope(), "offset"),
             f32Arg(at.getRopeTheta().convertToDouble(), "theta")};
        d.gridX = heads;
        d.gridY = rows;
        d.blockX = at.getQkRope() / 2;
      } else {
        int64_t maxSel = 0;
        if (auto ix = at.getSelection().getDefiningOp<IndexerTopkOp>())
          maxSel = ix.getTopk();
        uint32_t selBuf = st.bufferOf.lookup(at.getSelection());
        int64_t tile = std::stoll(targ("heads").empty() ? "1" : targ("heads"));
        a = {scratchRows("mla_q_lat", heads * at.getKvLora() * 4, "q_lat"),
             scratchRows("mla_q_pe", heads * at.getQkRope() * 4, "q_pe"),
             bufferArg(st.kvOf.count(at.getLayer()) ? st.kvOf[at.getLayer()]
                                                    : 0,
                       "cache"),
             runtimeArg(targ("kv") == "e4m3" ? "kv_scale" : "null"),
             in(op, 2, "sel"),
             scratchRows("nsel." + std::to_string(selBuf), 4, "nsel"),
             scratchRows("mla_o_lat", heads * at.getKvLora() * 4, "o_lat"),
             batch, i32Arg(heads, "heads"), i32Arg(maxSel, "max_sel"),
             f32Arg(1.0 / std::sqrt(double(qkHead)), "softmax_scale")};
        d.gridX = ceilDiv(heads, tile);
        d.gridY = rows;
      }
    } else {
      auto ix = cast<IndexerTopkOp>(op);
      // The indexer shares the model's RoPE base (its op has none).
      if (ropeTheta < 0) {
        ropeTheta = 10000.0;
        module.walk([&](AttentionDecodeOp at) {
          ropeTheta = at.getRopeTheta().convertToDouble();
          return WalkResult::interrupt();
        });
      }
      const double theta = ropeTheta;
      a = {scratchRows("indexer_q", ix.getHeads() * ix.getHeadDim() * 4, "x"),
           runtimeArg("positions"), batch, i32Arg(ix.getHeads(), "heads"),
           i32Arg(ix.getHeads() * ix.getHeadDim(), "row_stride"),
           i32Arg(ix.getHeadDim(), "head_stride"),
           i32Arg(ix.getHeadDim() - ix.getRope(), "offset"),
           f32Arg(theta, "theta")};
      d.gridX = ix.getHeads();
      d.gridY = rows;
      d.blockX = ix.getRope() / 2;
    }
  } else if (f == "indexer_scores" || f == "topk") {
    auto ix = cast<IndexerTopkOp>(op);
    uint64_t ctx = std::max<int64_t>(st.maxContext, 1);
    gp::ArgDef scores = contextRows("indexer_scores", 4, "scores");
    if (f == "indexer_scores") {
      a = {scratchRows("indexer_q", ix.getHeads() * ix.getHeadDim() * 4, "q"),
           scratchRows("indexer_w", ix.getHeads() * 4, "w"),
           bufferArg(st.keysOf.count(ix.getLayer()) ? st.keysOf[ix.getLayer()]
                                                    : 0,
                     "keys"),
           runtimeArg("context_len"), scores, batch,
           i32Arg(int64_t(ctx), "score_stride"),
           f32Arg(1.0 / std::sqrt(double(ix.getHeadDim())), "qk_scale")};
      d.gridX = ceilDiv(ctx, uint64_t(warps) * 4);
      d.gridY = rows;
    } else {
      uint32_t selBuf = st.bufferOf.lookup(ix.getResult());
      a = {scores, runtimeArg("context_len"), out(op, 0, "sel"),
           scratchRows("nsel." + std::to_string(selBuf), 4, "nsel"), batch,
           i32Arg(int64_t(ctx), "score_stride"),
           i32Arg(ix.getTopk(), "sel_stride"), i32Arg(ix.getTopk(), "k")};
      d.gridX = rows;
    }
  } else if (f == "router") {
    auto r = cast<RouterOp>(op);
    a = {scratchRows("router_logits", r.getExperts() * 4, "logits"),
         weight(r.getBias(), "bias"), out(op, 0, "ids"), out(op, 1, "weights"),
         batch, i32Arg(r.getExperts(), "experts"),
         f32Arg(r.getScale().convertToDouble(), "scale"),
         i32Arg(r.getRenormalize() ? 1 : 0, "renorm")};
    d.gridX = rows;
  } else if (f == "argmax") {
    int64_t vocab = hiddenOf(op.getOperand(0));
    a = {in(op, 0, "vals"), runtimeArg("null"),
         scratchRows("argmax_val", 4, "out_val"), out(op, 0, "out_idx"),
         batch, i32Arg(vocab, "n"), i32Arg(vocab, "in_stride"),
         i32Arg(1, "out_stride"), i32Arg(0, "index_offset")};
    d.gridX = rows;
  } else {
    ::glm::rt::fail("glm-emit-plan: no argument rule for kernel family '", f,
                    "' (op ", op.getName().getStringRef().str(),
                    "): add one in compiler/mlir/EmitPlan.cpp");
  }
  if (d.gridX == 0)
    d.gridX = 1;
  return li;
}

/// What a graph's op reads per step: weight bytes and trellis weights.
struct Cost {
  uint64_t bytes = 0, weights = 0;
};

/// Expected bytes and decoded weights of one launch over `tokens` tokens of
/// an op reading `syms`, charging each symbol once per graph. Routed
/// experts: E·(1 − (1 − k/E)^n) distinct experts for n tokens (uniform
/// routing); for one token exactly the apportioned bytes of the bindings.
static Cost costOf(SymbolTable &symbols, Operation &op,
                   const glmc::RankUsage &use,
                   std::set<std::string> &charged, int64_t tokens,
                   const std::set<std::string> *skip = nullptr,
                   const std::set<std::string> *only = nullptr) {
  Cost c;
  for (NamedAttribute attr : op.getAttrs()) {
    SmallVector<FlatSymbolRefAttr> refs;
    if (auto sym = dyn_cast<FlatSymbolRefAttr>(attr.getValue()))
      refs.push_back(sym);
    else if (auto arr = dyn_cast<ArrayAttr>(attr.getValue()))
      for (Attribute a : arr)
        if (auto sym = dyn_cast<FlatSymbolRefAttr>(a))
          refs.push_back(sym);
    for (FlatSymbolRefAttr sym : refs) {
      std::string name = sym.getValue().str();
      if ((skip && skip->count(name)) || (only && !only->count(name)))
        continue;
      auto it = use.bySymbol.find(name);
      if (it == use.bySymbol.end() || !charged.insert(name).second)
        continue;
      auto bank = use.banks.find(name);
      if (bank != use.banks.end()) {
        const glmc::BankUse &b = bank->second;
        double p = b.experts ? double(b.topK) / double(b.experts) : 0;
        double frac = 1.0 - std::pow(1.0 - p, double(std::max<int64_t>(
                                                   tokens, 1)));
        c.bytes += tokens <= 1 ? it->second
                               : uint64_t(std::llround(frac * b.routedAll)) +
                                     b.shared;
        c.weights += uint64_t(std::llround(
                         (tokens <= 1 ? p : frac) * b.routedWeightsAll)) +
                     b.sharedWeights;
        continue;
      }
      c.bytes += it->second;
      if (auto w = dyn_cast_or_null<WeightOp>(symbols.lookup(sym.getValue())))
        if (auto t = dyn_cast<TrellisType>(w.getType()))
          if (t.getTwiceBits() > 0)
            c.weights += it->second * 16 / uint64_t(t.getTwiceBits());
    }
  }
  return c;
}

/// Does `family` read the op's weights (and so carry its bytes)?
static bool readsWeights(const std::string &family) {
  return family == "expert_gemv_trellis" || family == "moe_trellis" ||
         family == "dense_trellis" || family == "dense_gemv" ||
         family == "dense_gemv_f32" || family == "dense_gemv_trellis" ||
         family == "gemm_trellis" || family == "gemm_trellis_grouped" ||
         family == "gemm_dense" ||
         family == "mla_decode" ||
         family == "indexer_scores" || family == "router" ||
         family == "embed" || family == "rms_norm" ||
         family == "embed_tokens" || family == "rms_norm_rows" ||
         family == "add_rms_norm" || family == "kv_store" ||
         family == "mla_qabs" || family == "index_key_store" ||
         family == "route" || family == "hf_expert_act" ||
         family == "gemv_any" || family == "mhc_mix" ||
         family == "kda_decode" || family == "kpool_store";
}

/// An unquantized routed or shared expert tensor (one whole matrix of an
/// HF expert bank), which the weight buffer lays out by expert.
static bool isBankTensor(const glmc::RankBinding &b) {
  return (b.expert >= 0 || b.shared) && !b.sideVector &&
         b.widthX2 == 0 && b.projection >= 0 && b.projection <= 2;
}

/// Routed experts of the bank of `layer` (1 when the module has none).
static int64_t routedExperts(ModuleOp module, int64_t layer) {
  int64_t n = 1;
  module.walk([&](ExpertsOp e) {
    if (e.getLayer() == layer)
      n = e.getExperts();
  });
  return n;
}

/// f32 widening of 16-bit vectors (norm weights, biases: the helper
/// kernels read every vector as fp32) and of the KDA taps (widenedAtLoad).
static gp::WeightTransform
widenedTransform(const llvm::StringMap<WeightOp> &byName,
                 const glmc::RankBinding &b, ArrayAttr roles,
                 const std::set<std::string> &kda) {
  if (b.expert >= 0 || b.shared || b.sideVector)
    return gp::WeightTransform::RawCopy;
  // A dense trellis weight's suh/svh: the rotations read fp32 vectors.
  if (b.widthX2) {
    const std::string role =
        b.role >= 0 && size_t(b.role) < roles.size()
            ? cast<StringAttr>(roles[b.role]).str()
            : std::string();
    return role == "suh" || role == "svh" ? gp::WeightTransform::ToF32
                                          : gp::WeightTransform::RawCopy;
  }
  WeightOp w = byName.lookup(b.tensor);
  if (!widenedAtLoad(w, kda))
    return gp::WeightTransform::RawCopy;
  return cast<DenseType>(w.getType()).getFormat() == DenseFormat::BF16
             ? gp::WeightTransform::Bf16ToF32
             : gp::WeightTransform::F16ToF32;
}

/// One graph bucket of one rank: an OpDef per kernel launch or collective,
/// with its arguments, launch shape, repeat count and expected cost.
static gp::GraphDef
buildGraph(ModuleOp module, SymbolTable &symbols, Block &body,
           const Bucket &bk,
           const glmc::RankUsage &use,
           const std::map<std::string, int32_t> &kernelIndex,
           const gp::Plan &plan,
           const llvm::DenseMap<Operation *, int32_t> &layers,
           RankState &st, size_t bucketIndex, int64_t rank) {
  gp::GraphDef graph;
  graph.kind = bk.draft     ? gp::GraphKind::Draft
               : bk.prefill ? gp::GraphKind::Prefill
                            : gp::GraphKind::Decode;
  graph.size = uint32_t(bk.size);
  bucketIndex = bk.kernels;
  ArgBuilder args(module, symbols, st, rank,
                  plan.numRanks ? plan.numRanks : 1, plan.model.layout);
  args.prefill = bk.prefill;
  std::set<std::string> charged; // symbols whose bytes an op already read
  st.fixedSum.clear(); // this graph's fixed-point producers only
  bool inDraft = false; // after glm.draft_begin: the draft graph's ops
  for (Operation &op : body) {
    if (isa<DraftBeginOp>(op)) {
      if (!bk.draft)
        break;
      inDraft = true;
      continue;
    }
    if (bk.draft && !inDraft)
      continue;
    // Sampling is the host's (it reads io.logits): nothing to launch.
    if (isa<func::ReturnOp, SampleOp>(op))
      continue;
    st.beginOp();
    gp::OpDef od;
    od.kind = opKind(&op);
    od.layer = layers.lookup(&op);
    std::string base =
        (od.layer >= 0 ? "l" + std::to_string(od.layer) + "." : "") +
        op.getName().stripDialect().str();
    // A GEMV names the weight it reads ("l3.dense_gemv.q_b",
    // "l36.dense_gemv.lm_head"): traces and glmc inspect say which.
    if (auto w = op.getAttrOfType<FlatSymbolRefAttr>("weight"))
      base += "." + shortWeightName(w.getValue());
    od.name = base;
    for (Value v : op.getOperands())
      if (st.bufferOf.count(v))
        od.inputs.push_back(st.bufferOf.lookup(v));
    for (Value v : op.getResults())
      if (st.bufferOf.count(v))
        od.outputs.push_back(st.bufferOf.lookup(v));
    if (isa<AllReduceOp, AllGatherOp>(op)) {
      // Collectives are listed once per rank and kind of sum, by the first
      // graph that runs them (a prefill bucket without fixed-point sums
      // has an fp32 all-reduce of its own).
      Operation *src0 = op.getOperand(0).getDefiningOp();
      const bool fixedHere = src0 && st.fixedSum.count(src0);
      auto &collectiveOf = fixedHere ? st.fixedCollectiveOf : st.collectiveOf;
      if (!collectiveOf.count(&op)) {
        gp::CollectiveDef c;
        // The vocabulary gather runs as a sum of the ranks' rows, each zero
        // outside its own slice (exact: x + 0 = x), in place.
        c.kind = gp::CollectiveKind::AllReduce;
        if (isa<AllGatherOp>(op))
          c.order = "sum of disjoint vocabulary slices (exact)";
        c.elements = cast<RankedTensorType>(op.getResult(0).getType())
                         .getShape()
                         .back();
        c.layer = od.layer;
        c.buffer = od.outputs.empty() ? -1 : od.outputs[0];
        // A fixed-point sum: the producer's int64 rows, summed exactly.
        if (Operation *src = op.getOperand(0).getDefiningOp();
            src && st.fixedSum.count(src)) {
          const RankState::FixedSum &fs = st.fixedSum.lookup(src);
          c.dtype = gp::DType::I64;
          c.buffer = fs.rows.buffer;
          c.order = "exact int64 sum of fixed-point partials";
        }
        collectiveOf[&op] = st.rp.collectives.size();
        st.rp.collectives.push_back(c);
      }
      od.collective = collectiveOf.lookup(&op);
      graph.ops.push_back(od);
      // Then the int64 sums back to fp32 (and the producer's rotation).
      ArrayAttr after;
      if (auto lists = op.getAttrOfType<ArrayAttr>("glm.bucket_kernels"))
        if (bucketIndex < lists.size())
          after = cast<ArrayAttr>(lists[bucketIndex]);
      Operation *src = op.getOperand(0).getDefiningOp();
      if (after && !after.empty()) {
        ::glm::rt::check(src && st.fixedSum.count(src), od.name,
                         ": fixed_to_f32 after an all-reduce of a value no "
                         "fixed-point sum wrote");
        const RankState::FixedSum &fs = st.fixedSum.lookup(src);
        auto it = kernelIndex.find(cast<StringAttr>(after[0]).str());
        ::glm::rt::check(it != kernelIndex.end(), od.name, ": kernel ",
                         cast<StringAttr>(after[0]).str(), " is not built");
        gp::OpDef conv = od;
        conv.collective = -1;
        conv.name = base + ".fixed_to_f32";
        conv.kernel = it->second;
        gp::ArgDef x = fs.rows, y = bufferArg(
                                     od.outputs.empty() ? 0 : od.outputs[0],
                                     "y", uint64_t(fs.n) * 4);
        x.name = "x";
        conv.args = {x, fs.post, y, runtimeArg("batch"), i32Arg(fs.n, "n")};
        const uint32_t th =
            plan.kernels[it->second].launch.blockX
                ? plan.kernels[it->second].launch.blockX
                : 256;
        conv.launch.blockX = th;
        conv.launch.gridX = uint32_t(
            ceilDiv(bk.size * ceilDiv(fs.n, 128), std::max<uint32_t>(1, th / 32)));
        graph.ops.push_back(std::move(conv));
      }
      continue;
    }
    ArrayAttr kernels;
    if (auto lists = op.getAttrOfType<ArrayAttr>("glm.bucket_kernels"))
      if (bucketIndex < lists.size())
        kernels = cast<ArrayAttr>(lists[bucketIndex]);
    if (!kernels)
      kernels = op.getAttrOfType<ArrayAttr>("glm.kernels");
    if (!kernels || kernels.empty()) {
      // No GPU kernel (CPU executor only): the op is listed for inspect.
      Cost c = costOf(symbols, op, use, charged, bk.size);
      od.bytesRead = c.bytes;
      od.decodedWeights = c.weights;
      graph.ops.push_back(od);
      continue;
    }
    // Launch shapes first: how many tokens each launch takes.
    struct Launch {
      const gp::KernelDef *kernel = nullptr;
      int32_t index = -1;
      int64_t rows = 0; // tokens per launch, 0 = the whole step
    };
    SmallVector<Launch> launches;
    for (Attribute k : kernels) {
      Launch l;
      auto it = kernelIndex.find(cast<StringAttr>(k).str());
      if (it != kernelIndex.end()) {
        l.index = it->second;
        l.kernel = &plan.kernels[it->second];
        auto b = l.kernel->templateArgs.find("batch");
        if (b != l.kernel->templateArgs.end())
          l.rows = std::stoll(b->second);
        else if (l.kernel->templateName == "dense_gemv_f32")
          l.rows = 1;
        else if (l.kernel->templateName == "moe_reduce" && !launches.empty())
          l.rows = launches.back().rows; // reduces the expert launch's rows
        // A rank's heads are a column slice of each row; kda_decode writes
        // them as [rows, its heads · dv], so several ranks launch it per
        // row (the slice of that row).
        else if (l.kernel->templateName == "kda_decode" && plan.numRanks > 1)
          l.rows = 1;
        // A prompt's k-pool fills its ring token by token: a row that
        // completes a pool reads the members the rows before it wrote.
        else if (l.kernel->templateName == "kpool_store" && bk.prefill)
          l.rows = 1;
      }
      if (l.rows >= bk.size)
        l.rows = 0;
      launches.push_back(l);
    }
    std::vector<std::string> seq;
    for (const Launch &l : launches)
      seq.push_back(l.kernel ? l.kernel->templateName : std::string());
    // Arguments first: a launch that reads one weight of the op (its k-th
    // GEMV) is charged that weight; the first other weight-reading launch
    // is charged the rest.
    std::vector<LaunchInfo> infos(launches.size());
    std::set<std::string> own;
    for (size_t i = 0; i < launches.size(); ++i)
      if (launches[i].kernel) {
        int64_t rows = launches[i].rows ? launches[i].rows : bk.size;
        infos[i] = args.build(*launches[i].kernel, op, rows, i, seq);
        if (!infos[i].weightSym.empty())
          own.insert(infos[i].weightSym);
      }
    size_t reader = launches.size(); // carries the unclaimed weight bytes
    for (size_t i = 0; i < launches.size(); ++i)
      if (launches[i].kernel && infos[i].weightSym.empty() &&
          readsWeights(launches[i].kernel->templateName)) {
        reader = i;
        break;
      }
    std::vector<Cost> costs(launches.size());
    for (size_t i = 0; i < launches.size(); ++i) {
      const std::string &mine = infos[i].weightSym;
      if (i != reader && mine.empty())
        continue;
      std::set<std::string> only;
      if (!mine.empty())
        only.insert(mine);
      int64_t rows = launches[i].rows ? launches[i].rows : bk.size;
      costs[i] = costOf(symbols, op, use, charged, rows,
                        mine.empty() ? &own : nullptr,
                        mine.empty() ? nullptr : &only);
    }
    // moe_trellis: gate/up read two of each half's three matrices, down
    // the third (exact when a half's projections share a width).
    if (reader < launches.size() && seq[reader] == "moe_trellis")
      for (size_t j = reader + 1; j < launches.size(); ++j)
        if (seq[j] == "moe_trellis") {
          costs[j] = {costs[reader].bytes / 3, costs[reader].weights / 3};
          costs[reader].bytes -= costs[j].bytes;
          costs[reader].weights -= costs[j].weights;
          break;
        }
    // A grouped MoE layer: gate/up read two of each half's three matrices,
    // each down launch one half's third.
    if (reader < launches.size() && seq[reader] == "gemm_trellis_grouped") {
      std::vector<size_t> downs;
      for (size_t j = reader + 1; j < launches.size(); ++j)
        if (seq[j] == "gemm_trellis_grouped")
          downs.push_back(j);
      if (!downs.empty()) {
        const Cost all = costs[reader];
        for (size_t j : downs) {
          costs[j] = {all.bytes / 3 / downs.size(),
                      all.weights / 3 / downs.size()};
          costs[reader].bytes -= costs[j].bytes;
          costs[reader].weights -= costs[j].weights;
        }
      }
    }
    // Absorbed MLA: mla_qabs reads kv_b's W_uk rows and mla_out its W_uv
    // rows, kv_store only the latent norm's vector: the weight bytes the
    // first reader (kv_store) took go to the kernels that stream them, split
    // by qk_nope : v_head per head, so per-kernel costs are what each
    // kernel reads (the op's total is unchanged).
    if (auto a = dyn_cast<AttentionDecodeOp>(op);
        a && reader < launches.size() && seq[reader] == "kv_store") {
      size_t qabs = launches.size(), out = launches.size();
      // (A prefill bucket's mla_proj pair: q_abs first, the outputs second.)
      for (size_t j = 0; j < launches.size(); ++j) {
        const bool proj = seq[j] == "mla_proj";
        if ((seq[j] == "mla_qabs" || proj) && qabs == launches.size())
          qabs = j;
        else if ((seq[j] == "mla_out" || proj) && out == launches.size())
          out = j;
      }
      const int64_t k = a.getQkNope(), v = a.getVHead();
      if (qabs < launches.size() && out < launches.size() && k + v > 0) {
        const Cost all = costs[reader];
        costs[reader] = {};
        costs[out] = {all.bytes * uint64_t(v) / uint64_t(k + v),
                      all.weights * uint64_t(v) / uint64_t(k + v)};
        costs[qabs] = {all.bytes - costs[out].bytes,
                       all.weights - costs[out].weights};
      }
    }
    // Consecutive launches repeated over the same row blocks (a prefill
    // chunk through decode kernels of `rows` tokens) share their scratch
    // (moe_trellis gate/up -> down): they run block by block, each block's
    // launches in order, as launches of repeat 1 whose row offsets are in
    // their arguments.
    std::vector<std::pair<size_t, uint32_t>> order; // (launch, row block)
    for (size_t i = 0; i < launches.size();) {
      size_t e = i + 1;
      const int64_t r = launches[i].rows;
      if (r && ceilDiv(bk.size, r) > 1)
        while (e < launches.size() && launches[e].rows == r)
          ++e;
      const uint32_t blocks = r ? uint32_t(ceilDiv(bk.size, r)) : 1;
      if (e - i > 1) {
        for (uint32_t j = 0; j < blocks; ++j)
          for (size_t x = i; x < e; ++x)
            order.push_back({x, j});
      } else {
        order.push_back({i, UINT32_MAX}); // one op, repeated by the runtime
      }
      i = e;
    }
    for (auto [i, block] : order) {
      const Launch &l = launches[i];
      if (l.kernel && infos[i].skip)
        continue;
      gp::OpDef launch = od;
      launch.name = base + (launches.size() > 1 ? "." + std::to_string(i)
                                                : std::string());
      launch.kernel = l.index;
      launch.repeat = l.rows ? uint32_t(ceilDiv(bk.size, l.rows)) : 1;
      launch.rowsPerLaunch = uint32_t(l.rows);
      if (block != UINT32_MAX) {
        launch.repeat = 1;
        for (gp::ArgDef &a : infos[i].args)
          if (a.kind == gp::ArgKind::Buffer && a.rowBytes)
            a.offset += uint64_t(block) * uint64_t(l.rows) * a.rowBytes;
      }
      launch.bytesRead = costs[i].bytes * launch.repeat;
      launch.decodedWeights = costs[i].weights * launch.repeat;
      // A tensor-core GEMM reads its weights once per step but decodes
      // each tile once per block row of tokens.
      if (l.kernel && l.kernel->templateName == "gemm_trellis") {
        auto bm = l.kernel->templateArgs.find("bm");
        int64_t m = bm == l.kernel->templateArgs.end()
                        ? 64 : std::stoll(bm->second);
        launch.decodedWeights *= ceilDiv(bk.size, m);
      }
      if (l.kernel) {
        launch.args = infos[i].args;
        launch.launch = infos[i].dims;
        if (block != UINT32_MAX) // back to row block 0 for the next one
          for (gp::ArgDef &a : infos[i].args)
            if (a.kind == gp::ArgKind::Buffer && a.rowBytes)
              a.offset -= uint64_t(block) * uint64_t(l.rows) * a.rowBytes;
      }
      graph.ops.push_back(std::move(launch));
    }
  }
  return graph;
}
#endif

struct EmitPlan : glmc::impl::GlmEmitPlanBase<EmitPlan> {
  using GlmEmitPlanBase::GlmEmitPlanBase;

  void runOnOperation() override {
#ifndef GLM_PLANS_AVAILABLE
    getOperation().emitError()
        << "glm-emit-plan: this build has no plans library (flatc missing)";
    return signalPassFailure();
#else
    ModuleOp module = getOperation();
    auto packs = llvm::to_vector(module.getOps<PackOp>());
    auto funcs = llvm::to_vector(module.getOps<func::FuncOp>());
    if (packs.size() != 1 || funcs.size() != 1) {
      module.emitError() << "glm-emit-plan: needs one glm.pack and one "
                            "func.func (the decode step)";
      return signalPassFailure();
    }
    PackOp pack = packs[0];
    func::FuncOp step = funcs[0];
    const FailureOr<glmc::BindingTable> &table =
        getAnalysis<glmc::BindingAnalysis>().table;
    if (failed(table))
      return signalPassFailure();
    try {
      gp::Plan plan = buildPlan(module, pack, step, *table);
      markProgrammaticLaunches(plan);
      collectKernelBuilds(plan);
      gp::finalizePlan(plan);
#ifdef GLM_CODEGEN_AVAILABLE
      glmc::checkKernelArgs(plan, output.empty() ? std::string("plan")
                                                 : std::string(output));
#endif
      gp::validatePlan(plan, output.empty() ? std::string("plan") : std::string(output));
      if (!command.empty())
        plan.compileOptions["command"] = command;
      if (failed(checkBudget(module, plan)))
        return signalPassFailure();
      if (!output.empty())
        gp::writePlan(plan, std::string(output));
      annotate(module, plan, *table);
    } catch (const ::glm::rt::Error &e) {
      module.emitError() << "glm-emit-plan: " << e.what();
      return signalPassFailure();
    }
#endif
  }

#ifdef GLM_PLANS_AVAILABLE
  /// The budget check on the final plan: each rank's arena (weights, KV,
  /// activations and scratch: what the runtime allocates and `glmc inspect`
  /// shows) against memory-per-spark. Records the figures as
  /// `glm.final_memory` either way (the driver prints them and sizes its
  /// suggestions from them); refuses naming every rank over the budget.
  std::set<std::string> contextScratch; // filled by buildPlan
  /// Per rank, the arena bytes sized by the largest step's rows (the
  /// activations, the row-sized shared scratch and the op-local region),
  /// and that step's rows; filled by buildPlan.
  std::vector<uint64_t> rowBytesOfRank;
  /// Per rank, the op-local region's bytes that scale with max_context
  /// (RankState::opLocalContextBytes); filled by buildPlan.
  std::vector<uint64_t> localContextOfRank;
  uint64_t planMaxTokens = 0;

  LogicalResult checkBudget(ModuleOp module, gp::Plan &plan) {
    constexpr double kGiB = 1024.0 * 1024 * 1024;
    const uint64_t budget = static_cast<uint64_t>(memoryPerSpark * kGiB);
    plan.memoryPerRank = budget;
    OpBuilder b(&getContext());
    SmallVector<Attribute> perRank;
    std::string over;
    for (const gp::RankPlan &r : plan.ranks) {
      // Bytes that grow with max_context: the KV cache (latent rows and
      // index keys) and the scratch rows of max_context entries per token
      // of the largest step (DSA selections, scores, attention weights).
      // Op-local scratch shares one region: its context share counts once.
      const size_t ri = size_t(r.rank);
      uint64_t contextBytes =
          ri < localContextOfRank.size() ? localContextOfRank[ri] : 0;
      uint64_t mtpBytes = 0, rowBytes = 0;
      for (const gp::BufferDef &bd : r.buffers) {
        const bool opLocal = bd.kind == gp::BufferKind::Scratch &&
                             bd.name.rfind("scratch.", 0) == 0 &&
                             opLocalScratch(bd.name.substr(8));
        if (bd.kind == gp::BufferKind::KvCache ||
            (contextScratch.count(bd.name) && !opLocal))
          contextBytes += bd.bytes;
        // The latent rows and index keys: what --kv-dtype stores.
        if (bd.kind == gp::BufferKind::KvCache &&
            (bd.name.rfind("kv.", 0) == 0 ||
             bd.name.rfind("index_keys.", 0) == 0))
          rowBytes += bd.bytes;
        // The MTP layers' caches, and below their weights: bound and
        // sized, read by no graph yet.
        if (bd.kind == gp::BufferKind::KvCache &&
            bd.layer >= plan.model.numLayers)
          mtpBytes += bd.bytes;
      }
      for (const gp::WeightBinding &w : r.weights)
        if (w.layer >= plan.model.numLayers)
          mtpBytes += gp::transformedBytes(w.transform, w.length);
      perRank.push_back(b.getDictionaryAttr({
          b.getNamedAttr("rank", b.getI64IntegerAttr(r.rank)),
          b.getNamedAttr("total", b.getI64IntegerAttr(r.arenaBytes)),
          b.getNamedAttr("weights", b.getI64IntegerAttr(r.weightBytes)),
          b.getNamedAttr("kv", b.getI64IntegerAttr(r.kvBytes)),
          b.getNamedAttr("context", b.getI64IntegerAttr(contextBytes)),
          b.getNamedAttr("kv_rows", b.getI64IntegerAttr(rowBytes)),
          b.getNamedAttr("mtp", b.getI64IntegerAttr(mtpBytes)),
          b.getNamedAttr("step_rows",
                         b.getI64IntegerAttr(ri < rowBytesOfRank.size()
                                                 ? rowBytesOfRank[ri]
                                                 : 0)),
      }));
      if (budget && r.arenaBytes > budget)
        over += llvm::formatv("\n  rank {0} needs {1:F2} GiB (weights "
                              "{2:F2}, KV {3:F2}, activations and scratch "
                              "{4:F2})",
                              r.rank, r.arenaBytes / kGiB,
                              r.weightBytes / kGiB, r.kvBytes / kGiB,
                              (r.arenaBytes - r.weightBytes - r.kvBytes) /
                                  kGiB)
                    .str();
    }
    module->setAttr(
        "glm.final_memory",
        b.getDictionaryAttr({
            b.getNamedAttr("budget", b.getI64IntegerAttr(budget)),
            b.getNamedAttr("max_context",
                           b.getI64IntegerAttr(plan.model.maxContext)),
            b.getNamedAttr("max_tokens", b.getI64IntegerAttr(planMaxTokens)),
            b.getNamedAttr("ranks", b.getArrayAttr(perRank)),
        }));
    if (over.empty())
      return success();
    std::ostringstream gib;
    gib << double(memoryPerSpark);
    module.emitError() << "the plan does not fit " << gib.str()
                       << " GiB per Spark (--memory-per-spark); OVER the "
                          "budget:"
                       << over;
    return failure();
  }

  /// The binaries of glm-emit-kernels{async}: NVRTC ran while the plan was
  /// built; wait for it and put each kernel's PTX/CUBIN in place.
  /// Every kernel launch of every graph may start while the previous one
  /// runs (each codegen kernel's entry waits for it: grid_dependency.cuh),
  /// unless compiled with --programmatic-launch off.
  void markProgrammaticLaunches(gp::Plan &plan) {
    plan.compileOptions["programmatic_launch"] =
        programmaticLaunch ? "on" : "off";
    for (gp::RankPlan &r : plan.ranks)
      for (gp::GraphDef &g : r.graphs)
        for (gp::OpDef &op : g.ops)
          op.programmaticLaunch = programmaticLaunch && op.kernel >= 0;
  }

  void collectKernelBuilds(gp::Plan &plan) {
    auto builds = getCachedAnalysis<glmc::KernelBuilds>();
    if (!builds || !builds->get().started())
      return;
    {
      // A cold compile waits here for NVRTC (seconds): show the builds.
      std::unique_ptr<::glm::rt::Progress> bar;
      builds->get().wait([&](size_t done, size_t total) {
        if (!bar && done < total)
          bar = std::make_unique<::glm::rt::Progress>("kernels", total,
                                                      "NVRTC builds");
        if (bar)
          bar->update(done);
      });
    }
    std::map<std::string, const glmc::KernelBuildResult *> byName;
    for (const glmc::KernelBuildResult &r : builds->get().results())
      byName[r.name] = &r;
    for (gp::KernelDef &k : plan.kernels) {
      auto it = byName.find(k.name);
      if (it == byName.end())
        continue;
      const glmc::KernelBuildResult &r = *it->second;
      if (!r.error.empty())
        ::glm::rt::fail("glm-emit-kernels: ", r.error);
      k.binaries.clear();
      for (size_t a = 0; a < r.archs.size(); ++a)
        k.binaries.push_back({r.archs[a], r.ptx[a],
                              std::vector<uint8_t>(r.cubin[a].begin(),
                                                   r.cubin[a].end())});
    }
  }

  gp::Plan buildPlan(ModuleOp module, PackOp pack, func::FuncOp step,
                     const glmc::BindingTable &table) {
    gp::Plan plan;
    rowBytesOfRank.clear();
    localContextOfRank.clear();
    plan.compilerVersion = gp::kCompilerVersion;
    plan.configHash = pack.getConfigHash().str();
    plan.manifestHash = pack.getManifestHash().str();
    plan.indexHash = pack.getIndexHash().str();
    plan.numRanks = table.ranks;
    if (auto archs = module->getAttrOfType<ArrayAttr>("glm.archs"))
      for (Attribute a : archs)
        plan.targetArchs.push_back(cast<StringAttr>(a).str());

    auto model = module->getAttrOfType<DictionaryAttr>("glm.model");
    gp::ModelMeta &m = plan.model;
    m.modelType = strAttr(model, "model_type");
    m.architecture = strAttr(model, "architecture");
    m.layout = pack.getLayout().str();
    m.manifest = pack.getManifest().str();
    m.hiddenSize = intAttr(model, "hidden");
    m.numLayers = intAttr(model, "layers");
    m.vocabSize = intAttr(model, "vocab");
    m.padTokenId = intAttr(model, "pad", -1);
    if (model)
      if (auto eos = model.getAs<DenseI64ArrayAttr>("eos"))
        m.eosTokenIds.assign(eos.asArrayRef().begin(), eos.asArrayRef().end());
    std::string tok = strAttr(model, "tokenizer");
    m.tokenizerFile = tok;
    m.chatTemplateFile = strAttr(model, "chat_template");
    step.walk([&](SampleOp s) {
      m.temperature = s.getTemperature().convertToDouble();
      m.topP = s.getTopP().convertToDouble();
    });
    auto kv = module->getAttrOfType<DictionaryAttr>("glm.kv");
    m.maxContext = intAttr(kv, "max_context");
    m.kvDtype = strAttr(kv, "dtype") == "fp8"    ? gp::DType::E4M3
                : strAttr(kv, "dtype") == "bf16" ? gp::DType::BF16
                                                 : gp::DType::F32;
    plan.compileOptions = {{"ranks", std::to_string(table.ranks)},
                           {"max_context", std::to_string(m.maxContext)},
                           {"kv_dtype", strAttr(kv, "dtype")},
                           {"layout", m.layout},
                           {"manifest", m.manifest},
                           {"kv_slots", std::to_string(intAttr(kv, "slots", 1))}};
    if (intAttr(kv, "page_tokens", 0) > 0) {
      plan.compileOptions["kv_page_tokens"] =
          std::to_string(intAttr(kv, "page_tokens", 0));
      plan.compileOptions["kv_pages"] = std::to_string(intAttr(kv, "pages", 0));
    }
    bool drafting = false;
    step.walk([&](DraftBeginOp) { drafting = true; });
    plan.compileOptions["draft"] = drafting ? "mtp" : "none";
    {
      // The launch tunings in effect (given or the defaults).
      const glmc::Tunings t = glmc::tuningsOf(module);
      plan.compileOptions["moe_trellis_tuning"] =
          ::glm::codegen::formatMoeTrellisTuning(t.moe(m.hiddenSize));
      plan.compileOptions["dense_trellis_tuning"] =
          ::glm::codegen::formatDenseTrellisTuning(t.dense());
    }

    // Kernels shared by every rank.
    std::map<std::string, int32_t> kernelIndex;
    if (auto specs = module->getAttrOfType<ArrayAttr>("glm.kernel_specs"))
      for (Attribute a : specs) {
        auto d = cast<DictionaryAttr>(a);
        gp::KernelDef k;
        k.name = strAttr(d, "name");
        k.templateName = strAttr(d, "family");
        if (auto args = d.getAs<DictionaryAttr>("args"))
          for (NamedAttribute kv : args)
            k.templateArgs[kv.getName().str()] =
                cast<StringAttr>(kv.getValue()).str();
        k.source = strAttr(d, "source");
        k.sourceHash = strAttr(d, "source_hash");
        k.cacheKey = strAttr(d, "cache_key");
        if (auto opts = d.getAs<ArrayAttr>("options"))
          for (Attribute o : opts)
            k.nvrtcOptions.push_back(cast<StringAttr>(o).str());
        if (auto bins = d.getAs<ArrayAttr>("binaries"))
          for (Attribute bAttr : bins) {
            auto bd = cast<DictionaryAttr>(bAttr);
            gp::KernelBinary bin;
            bin.arch = strAttr(bd, "arch");
            bin.ptx = strAttr(bd, "ptx");
            std::string cubin = strAttr(bd, "cubin");
            bin.cubin.assign(cubin.begin(), cubin.end());
            k.binaries.push_back(std::move(bin));
          }
        k.launch.blockX = intAttr(d, "block");
        // Take the name first: the right side of `=` is evaluated (and k
        // moved from) before the map lookup on the left.
        std::string name = k.name;
        kernelIndex[name] = gp::addKernel(plan, std::move(k));
      }

    ArrayAttr files = pack.getFiles();
    Block &body = step.getBody().front();
    std::vector<Bucket> buckets = bucketsOf(module);
    SymbolTable symbols(module);
    llvm::DenseMap<Operation *, int32_t> layers = layersOf(symbols, body,
                                                           m.numLayers);
    const int64_t maxTokens = intAttr(kv, "max_tokens", 1);
    for (const Bucket &bk : buckets)
      if (bk.size > maxTokens)
        ::glm::rt::fail(bk.prefill ? "prefill chunk " : "decode batch ",
                        bk.size, " exceeds the activation arena's ",
                        maxTokens, " tokens: raise glm-plan-memory's "
                        "max-tokens (glmc compile sizes it for the largest "
                        "bucket)");
    // Bindings name the HF tensor; its weight op by that name.
    llvm::StringMap<WeightOp> weightByName;
    module.walk([&](WeightOp w) { weightByName[w.getName()] = w; });
    const std::set<std::string> kdaWeights = kdaWeightNames(module);
    for (int64_t r = 0; r < table.ranks; ++r) {
      const glmc::RankUsage &use = table.perRank[r];
      gp::RankPlan rp;
      rp.rank = r;
      uint64_t top = 0;
      // Weights: one buffer, every bound range 256-aligned inside it.
      // Vectors (norm weights and biases, 1-D tensors) are widened to f32
      // at load: the kernels read them as fp32. Unquantized expert banks
      // are laid out [expert][rows][cols] per projection (the HF expert
      // kernels step from expert to expert by one stride).
      gp::BufferDef wbuf;
      wbuf.name = "weights";
      wbuf.kind = gp::BufferKind::Weight;
      uint64_t woff = 0;
      rp.weights.reserve(use.bindings.size());
      std::map<std::tuple<int64_t, bool, int32_t>, uint64_t> bankStride;
      for (const glmc::RankBinding &b : use.bindings)
        if (isBankTensor(b))
          bankStride[{b.layer, b.shared, b.projection}] =
              std::max(bankStride[{b.layer, b.shared, b.projection}],
                       alignUp(b.length));
      RankState::BankMap banks;
      for (auto &[key, stride] : bankStride) {
        const int64_t n =
            std::get<1>(key) ? 1 : routedExperts(module, std::get<0>(key));
        banks[key] = {woff, stride};
        woff += stride * uint64_t(std::max<int64_t>(n, 1));
      }
      for (const glmc::RankBinding &b : use.bindings) {
        gp::WeightBinding wb;
        wb.file = cast<StringAttr>(files[b.file]).str();
        wb.offset = b.offset;
        wb.length = b.length;
        wb.buffer = 0;
        wb.transform =
            widenedTransform(weightByName, b, pack.getRoles(), kdaWeights);
        if (isBankTensor(b)) {
          auto [base, stride] = banks[{b.layer, b.shared, b.projection}];
          wb.bufferOffset =
              base + stride * uint64_t(b.shared ? 0 : std::max(b.expert, 0));
        } else {
          wb.bufferOffset = woff;
          // ToF32 from 16-bit floats doubles; room for that.
          woff += alignUp(wb.transform == gp::WeightTransform::ToF32
                              ? 2 * b.length
                              : gp::transformedBytes(wb.transform, b.length));
        }
        wb.tensor = b.tensor.str();
        wb.layer = b.layer;
        wb.expert = b.shared ? -2 : b.expert;
        wb.projection = projectionOf(b.projection);
        wb.half = b.half;
        wb.widthX2 = b.widthX2;
        wb.tag = b.sideVector       ? gp::WeightTag::SideVector
                 : b.half >= 0      ? gp::WeightTag::TrellisHalf
                 : b.projection >= 0 && b.widthX2 ? gp::WeightTag::TrellisTensor
                 : b.widthX2        ? gp::WeightTag::TrellisTensor
                                    : gp::WeightTag::Dense;
        rp.weights.push_back(std::move(wb));
      }
      wbuf.bytes = std::max<uint64_t>(woff, kAlign);
      rp.buffers.push_back(wbuf);
      top = alignUp(wbuf.bytes);

      // KV cache and index keys per layer: rows in the KV dtype's storage
      // form (--kv-dtype, templates/kv_cache.cuh: f32, bf16, or E4M3 with
      // each row's fp32 scale after its values), one max_context row block
      // per KV slot (sequence); the kernels index them by the row's io.slots
      // entry. The recurrent state (KDA) and the k-pool ring stay fp32.
      const int64_t kvSlots = intAttr(
          module->getAttrOfType<DictionaryAttr>("glm.kv"), "slots", 1);
      auto kvBuffer = [&](const std::string &name, int64_t layer,
                          uint64_t bytesPerSlot,
                          gp::DType dtype = gp::DType::F32) {
        gp::BufferDef kb;
        kb.name = name;
        kb.kind = gp::BufferKind::KvCache;
        kb.layer = layer;
        kb.dtype = dtype;
        kb.bytes =
            alignUp(std::max<uint64_t>(uint64_t(kvSlots) * bytesPerSlot, 4));
        kb.arenaOffset = top;
        top += kb.bytes;
        rp.buffers.push_back(kb);
      };
      const int kvForm = m.kvDtype == gp::DType::E4M3   ? ::glm::kv::kE4m3
                         : m.kvDtype == gp::DType::BF16 ? ::glm::kv::kBf16
                                                        : ::glm::kv::kF32;
      // `rows` cached rows of n values a slot (latent rows, index keys);
      // paged (--kv-page-tokens: rows is max_context then, glm-plan-memory
      // refuses a k-pool) the pages' rows, whatever the slots.
      const DictionaryAttr kvAttr =
          module->getAttrOfType<DictionaryAttr>("glm.kv");
      const int64_t pageTokens = intAttr(kvAttr, "page_tokens", 0),
                    kvPages = intAttr(kvAttr, "pages", 0);
      auto cacheBuffer = [&](const std::string &name, int64_t layer,
                             uint64_t rows, int64_t n) {
        const uint64_t rowBytes = uint64_t(::glm::kv::rowBytes(kvForm, n));
        if (pageTokens) {
          gp::BufferDef kb;
          kb.name = name;
          kb.kind = gp::BufferKind::KvCache;
          kb.layer = layer;
          kb.dtype = m.kvDtype;
          kb.bytes = alignUp(std::max<uint64_t>(
              uint64_t(kvPages) * uint64_t(pageTokens) * rowBytes, 4));
          kb.arenaOffset = top;
          top += kb.bytes;
          rp.buffers.push_back(kb);
          return;
        }
        kvBuffer(name, layer, rows * rowBytes, m.kvDtype);
      };
      std::set<int64_t> kvPlanned; // layers whose caches the walk made
      step.walk([&](Operation *op) {
        const int64_t layer = layerOf(op);
        const std::string L = std::to_string(layer);
        if (isa<AttentionDecodeOp, IndexerTopkOp>(op))
          kvPlanned.insert(layer);
        if (auto a = dyn_cast<AttentionDecodeOp>(op)) {
          cacheBuffer("kv." + L, layer, uint64_t(m.maxContext),
                      a.getKvLora() + a.getQkRope());
        } else if (auto ix = dyn_cast<IndexerTopkOp>(op)) {
          const int64_t P = ix.getKpool(), hd = ix.getHeadDim();
          if (P > 1 && m.maxContext % P)
            ::glm::rt::fail("max context ", m.maxContext,
                            " is not a multiple of the k-pool's ", P,
                            " tokens (layer ", layer,
                            "): give a --max-context that is");
          // k-pool: the pooled keys, and a ring of the pool being filled
          // (keys and compress-gate rows).
          cacheBuffer("index_keys." + L, layer, uint64_t(m.maxContext / P), hd);
          if (P > 1)
            kvBuffer("kpool_ring." + L, layer, uint64_t(2 * P * hd) * 4);
        } else if (auto k = dyn_cast<KdaDecodeOp>(op)) {
          // KDA: this rank's heads' fp32 state and conv inputs.
          auto [hb, he] = k.getShard().rangeOf(r);
          if (table.ranks == 1)
            hb = 0, he = k.getHeads();
          const uint64_t n = he - hb, hd = k.getHeadDim();
          kvBuffer("kda_state." + L, layer, n * hd * hd * 4);
          kvBuffer("kda_conv." + L, layer,
                   n * 3 * hd * uint64_t(k.getConvKernel() - 1) * 4);
        }
      });
      // The MTP layers' caches (glm.mtp): a main MLA layer's, named by
      // their layer; made by the walk above when the draft graph's ops
      // are in the step, else here (a plan without --draft keeps them).
      if (auto mtp = module->getAttrOfType<ArrayAttr>("glm.mtp"))
        for (Attribute a : mtp) {
          auto d = cast<DictionaryAttr>(a);
          const int64_t layer = intAttr(d, "layer"), P = intAttr(d, "kpool", 1),
                        hd = intAttr(d, "index_head_dim");
          if (kvPlanned.count(layer))
            continue;
          const std::string L = std::to_string(layer);
          cacheBuffer("kv." + L, layer, uint64_t(m.maxContext),
                      intAttr(d, "latent"));
          if (hd <= 0)
            continue;
          if (P > 1 && m.maxContext % P)
            ::glm::rt::fail("max context ", m.maxContext,
                            " is not a multiple of the k-pool's ", P,
                            " tokens (MTP layer ", layer,
                            "): give a --max-context that is");
          cacheBuffer("index_keys." + L, layer,
                      uint64_t(m.maxContext / std::max<int64_t>(P, 1)), hd);
          if (P > 1)
            kvBuffer("kpool_ring." + L, layer, uint64_t(2 * P * hd) * 4);
        }

      // Activations at their arena offsets (glm-plan-memory).
      uint64_t actBase = top;
      llvm::DenseMap<Value, uint32_t> bufferOf;
      auto valueBuffer = [&](Value v, uint64_t off) {
        auto t = cast<RankedTensorType>(v.getType());
        gp::BufferDef ab;
        ab.name = "act." + std::to_string(rp.buffers.size());
        ab.kind = isa<BlockArgument>(v) ? gp::BufferKind::Io
                                        : gp::BufferKind::Activation;
        ab.dtype = t.getElementType().isInteger(32) ? gp::DType::I32
                                                    : gp::DType::F32;
        uint64_t elems = 1;
        for (int64_t d : t.getShape())
          elems *= ShapedType::isDynamic(d) ? maxTokens : d;
        ab.bytes = alignUp(elems * 4);
        ab.arenaOffset = actBase + off;
        bufferOf[v] = rp.buffers.size();
        rp.buffers.push_back(ab);
      };
      uint64_t argOff = 0;
      for (BlockArgument a : body.getArguments()) {
        valueBuffer(a, argOff);
        argOff += rp.buffers.back().bytes;
      }
      // Every SSA value's buffer, before any graph names them.
      for (Operation &op : body)
        if (auto offs = op.getAttrOfType<DenseI64ArrayAttr>("glm.arena"))
          for (auto [res, off] : llvm::zip(op.getResults(), offs.asArrayRef()))
            valueBuffer(res, off);
      RankState st{rp, bufferOf};
      st.maxTokens = maxTokens;
      st.maxContext = m.maxContext;
      st.contextScratch = &contextScratch;
      for (const gp::BufferDef &bd : rp.buffers)
        st.top = std::max(st.top, bd.arenaOffset + bd.bytes);
      const uint64_t activationEnd = st.top;
      ArrayAttr roles = pack.getRoles();
      for (auto [wb, b] : llvm::zip(rp.weights, use.bindings)) {
        st.weightOffset.try_emplace(wb.tensor, wb.bufferOffset);
        const std::string role =
            b.role >= 0 && size_t(b.role) < roles.size()
                ? cast<StringAttr>(roles[b.role]).str()
                : std::string("data");
        st.roleOffset.try_emplace({wb.tensor, role}, wb.bufferOffset);
        st.rangeOffset.try_emplace({wb.file, wb.offset}, wb.bufferOffset);
      }
      for (auto &[key, at] : banks)
        st.expertBank[key] = at;
      st.kvSlots = kvSlots;
      st.kvPageTokens = pageTokens;
      st.kvPages = kvPages;
      // The Io rows: token ids (the step's argument), positions and KV
      // slots, which the runtime writes before each step.
      auto ioRows = [&](const char *name) {
        gp::BufferDef b;
        b.name = name;
        b.kind = gp::BufferKind::Io;
        b.dtype = gp::DType::I32;
        b.bytes = alignUp(uint64_t(maxTokens) * 4);
        b.arenaOffset = alignUp(st.top);
        st.top = b.arenaOffset + b.bytes;
        rp.buffers.push_back(b);
        return uint32_t(rp.buffers.size() - 1);
      };
      if (body.getNumArguments() > 0) {
        st.ioTokens = bufferOf.lookup(body.getArgument(0));
        rp.buffers[st.ioTokens].name = "io.tokens";
      }
      // With a draft graph: each draft row's hidden row in the last step.
      if (body.getNumArguments() > 1)
        rp.buffers[bufferOf.lookup(body.getArgument(1))].name =
            "io.draft_rows";
      st.ioPositions = ioRows("io.positions");
      st.ioSlots = ioRows("io.slots");
      st.ioLogitRows = -1;
      if (llvm::any_of(buckets, [](const Bucket &b) { return b.prefill; })) {
        gp::BufferDef b;
        b.name = "io.logit_rows";
        b.kind = gp::BufferKind::Io;
        b.dtype = gp::DType::I32;
        b.bytes = alignUp(8);
        b.arenaOffset = alignUp(st.top);
        st.top = b.arenaOffset + b.bytes;
        rp.buffers.push_back(b);
        st.ioLogitRows = int64_t(rp.buffers.size() - 1);
      }
      // Paged KV: each slot's page table, [slots][max_context / page]
      // int32 page numbers the runtime writes (kv::SlotRows).
      if (pageTokens) {
        gp::BufferDef b;
        b.name = "io.pages";
        b.kind = gp::BufferKind::Io;
        b.dtype = gp::DType::I32;
        b.bytes = alignUp(uint64_t(kvSlots) *
                          uint64_t(m.maxContext / pageTokens) * 4);
        b.arenaOffset = alignUp(st.top);
        st.top = b.arenaOffset + b.bytes;
        rp.buffers.push_back(b);
        st.ioPages = uint32_t(rp.buffers.size() - 1);
      }
      // The logits the step leaves for the host's sampler.
      // The draft graph's sample (after glm.draft_begin) leaves its
      // logits in io.draft_logits.
      bool afterDraft = false;
      for (Operation &op : body) {
        afterDraft |= isa<DraftBeginOp>(op);
        auto sop = dyn_cast<SampleOp>(op);
        if (sop && bufferOf.count(sop.getLogits())) {
          gp::BufferDef &lb = rp.buffers[bufferOf.lookup(sop.getLogits())];
          lb.name = afterDraft ? "io.draft_logits" : "io.logits";
          lb.kind = gp::BufferKind::Io;
        }
      }
      for (auto [i, bd] : llvm::enumerate(rp.buffers))
        if (bd.kind == gp::BufferKind::KvCache) {
          if (bd.name.rfind("kv.", 0) == 0)
            st.kvOf[bd.layer] = uint32_t(i);
          else if (bd.name.rfind("index_keys.", 0) == 0)
            st.keysOf[bd.layer] = uint32_t(i);
          else
            st.stateOf[bd.name] = uint32_t(i);
        }
      for (auto [i, bk] : llvm::enumerate(buckets))
        rp.graphs.push_back(buildGraph(module, symbols, body, bk, use,
                                       kernelIndex, plan, layers, st, i, r));
      st.finishOpLocal();
      rowBytesOfRank.push_back(activationEnd - actBase + st.rowScratch +
                               st.opLocalBytes);
      localContextOfRank.push_back(st.opLocalContextBytes(contextScratch));
      planMaxTokens = maxTokens;
      plan.ranks.push_back(std::move(rp));
    }
    return plan;
  }

  void annotate(ModuleOp module, const gp::Plan &plan,
                const glmc::BindingTable &table) {
    OpBuilder b(&getContext());
    SmallVector<int64_t> bindings, perToken, expert, weights;
    for (auto [rp, use] : llvm::zip(plan.ranks, table.perRank)) {
      bindings.push_back(rp.weights.size());
      perToken.push_back(rp.bytesPerToken);
      expert.push_back(use.expertBytesPerToken);
      weights.push_back(use.weightBytes);
    }
    module->setAttr(
        "glm.plan_summary",
        b.getDictionaryAttr({
            b.getNamedAttr("ranks", b.getI64IntegerAttr(plan.numRanks)),
            b.getNamedAttr("kernels",
                           b.getI64IntegerAttr(plan.kernels.size())),
            b.getNamedAttr("bindings", b.getDenseI64ArrayAttr(bindings)),
            b.getNamedAttr("weight_bytes", b.getDenseI64ArrayAttr(weights)),
            b.getNamedAttr("bytes_per_token",
                           b.getDenseI64ArrayAttr(perToken)),
            b.getNamedAttr("expert_bytes_per_token",
                           b.getDenseI64ArrayAttr(expert)),
            b.getNamedAttr("active_bytes", b.getI64IntegerAttr(
                                               table.activeBytesPerToken)),
            b.getNamedAttr("pack_bytes",
                           b.getI64IntegerAttr(table.packBytes)),
        }));
  }
#endif
};

} // namespace
