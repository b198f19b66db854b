//===- plan.h - the plan as plain C++ structs, and its reader/writer ------===//
//
// The one contract between glmc and glm-engine. The compiler (emit-plan) fills
// a glm::plan::Plan and calls serializePlan/writePlan; the runtime calls
// readPlan, which verifies the flatbuffer once (identifier, schema major,
// runtime ABI, indices in range, pack hashes) and returns plain structs, so no
// runtime code touches flatbuffers. The schema is plans/plan.fbs; field units
// are documented there and repeated here. Needs no MLIR and no CUDA.
//
// Thread-safety: all functions are pure or write only their outputs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace glm::plan {

/// Schema version of plans this build writes. A reader accepts any minor of
/// its own major (minor versions only append fields).
constexpr uint32_t kPlanSchemaMajor = 1;
constexpr uint32_t kPlanSchemaMinor = 6; // 1.1: decoded_weights, repeat,
                                          // rows_per_launch, row_bytes;
                                          // 1.2: decode graphs list the
                                          // CUDA executor's codegen
                                          // launches (moe_trellis, trellis
                                          // rotations, router/indexer/MLP
                                          // GEMVs); 1.3: checksum trailer;
                                          // 1.4: Load graphs, buffer init
                                          // bytes and relocations;
                                          // 1.5: programmatic_launch;
                                          // 1.6: Draft graphs (MTP)
/// Kernel-argument and buffer conventions between the plan's kernels and the
/// runtime; bump when a template's parameter list or meaning changes.
constexpr uint32_t kRuntimeAbi = 1;
/// The compiler a plan names (Plan::compilerVersion) and `--version` prints.
constexpr const char *kCompilerVersion = "glmc 0.1";
/// `--version` of glmc and glm-engine: the release and the plan formats they
/// read and write.
inline std::string versionText() {
  return std::string(kCompilerVersion) + " (plan schema " +
         std::to_string(kPlanSchemaMajor) + "." +
         std::to_string(kPlanSchemaMinor) + ", runtime ABI " +
         std::to_string(kRuntimeAbi) + ")";
}
/// The flatbuffer file_identifier and file extension.
constexpr const char *kPlanFileIdentifier = "GLMP";
constexpr const char *kPlanFileExtension = "glmplan";
/// Since schema 1.3 a plan file is the flatbuffer followed by a 16-byte
/// trailer: this magic, then the xxh64 (seed 0, little-endian) of every byte
/// before the trailer. The flatbuffer Verifier only proves offsets in bounds;
/// the checksum catches a flipped byte in a value (a binding offset, an eps,
/// a kernel's PTX) that would otherwise run with wrong numbers.
constexpr const char *kPlanChecksumMagic = "GLMPXH64";
constexpr size_t kPlanTrailerBytes = 16;

// Enums mirror plan.fbs value for value (checked by static_assert in
// plan_writer.cpp). Append only.
enum class BufferKind : uint8_t { Weight, Activation, KvCache, Scratch, Io };
enum class WeightTransform : uint8_t { RawCopy, Bf16ToF32, F16ToF32, ToF32 };
/// Bytes a binding of `length` source bytes writes into its buffer (ToF32:
/// the least it writes, from F32 bytes; the runtime checks the rest).
uint64_t transformedBytes(WeightTransform t, uint64_t length);
enum class WeightTag : uint8_t {
  TrellisHalf, SideVector, Dense, TrellisTensor, Norm, Other
};
enum class Projection : uint8_t {
  None, Gate, Up, Down, QA, QB, KvA, KvB, O, IndexerQB, IndexerK,
  IndexerWeights, Router, Embed, LmHead
};
enum class GraphKind : uint8_t { Decode, Prefill, Load, Draft };
enum class OpKind : uint16_t {
  Embed, RmsNorm, Rope, Hadamard, DenseGemv, ExpertGemv, Router,
  MlaAttention, IndexerTopk, AllReduce, AllGather, LmHead, Argmax, Copy, Add,
  Reduce, Other
};
enum class DType : uint8_t { F32, F16, BF16, E4M3, I32, I64, U8 };
enum class CollectiveKind : uint8_t { AllReduce, AllGather, Broadcast };
enum class LayerKind : uint8_t { Dense, Moe, Head };
enum class ArgKind : uint8_t { Buffer, I32, I64, F32, Runtime, F64 };

const char *bufferKindName(BufferKind k);   // "weight", "activation", ...
const char *weightTagName(WeightTag t);     // "trellis_half", ...
const char *projectionName(Projection p);   // "none", "gate", ...
const char *graphKindName(GraphKind k);     // "decode" | "prefill"
const char *opKindName(OpKind k);           // "embed", "expert_gemv", ...
const char *dtypeName(DType t);             // "f32", "bf16", ...
const char *collectiveKindName(CollectiveKind k); // "all_reduce", ...
const char *layerKindName(LayerKind k);     // "dense" | "moe" | "head"
const char *argKindName(ArgKind k);         // "buffer", "i32", ...
uint32_t dtypeBytes(DType t);

/// Sorted key/value strings (template arguments, compile options).
using KeyValues = std::map<std::string, std::string>;

/// CUDA launch shape: blocks, threads, dynamic shared memory bytes. An op's
/// launch with gridX == 0 means "use the kernel's default".
struct LaunchDims {
  uint32_t gridX = 0, gridY = 1, gridZ = 1;
  uint32_t blockX = 0, blockY = 1, blockZ = 1;
  uint32_t smemBytes = 0;
  bool operator==(const LaunchDims &o) const;
};

struct ModelMeta {
  std::string modelType;     // "glm_moe_dsa" | "glm5_next"
  std::string architecture;  // config architectures[0]
  std::string layout;        // "hf" | "exl3" | "exlr8"
  std::string manifest;      // exlr8 manifest name/path, "" = none
  int64_t hiddenSize = 0;    // elements
  int64_t numLayers = 0;     // decoder layers (MTP excluded)
  int64_t vocabSize = 0;     // tokens
  std::vector<int64_t> eosTokenIds;
  int64_t padTokenId = -1;   // -1 = none
  std::string tokenizerFile = "tokenizer.json"; // relative to the pack
  std::string chatTemplateFile;                 // "" = inside tokenizer
  float temperature = 1.0f;  // sampling default
  float topP = 1.0f;         // sampling default
  int64_t maxContext = 0;    // tokens the KV cache is sized for
  DType kvDtype = DType::BF16;
  uint64_t activeWeightBytes = 0; // weight bytes per decoded token, all ranks
  bool operator==(const ModelMeta &o) const;
};

/// A device address patched into a buffer at load (schema 1.4): the
/// address of buffers[buffer] + offset, as 8 little-endian bytes at `at`.
struct Relocation {
  uint64_t at = 0;
  uint32_t buffer = 0;
  uint64_t offset = 0;
  bool operator==(const Relocation &o) const;
};

struct BufferDef {
  std::string name;          // unique per rank
  uint64_t bytes = 0;        // size
  uint64_t arenaOffset = 0;  // offset in the rank's arena (256-aligned)
  BufferKind kind = BufferKind::Activation;
  DType dtype = DType::U8;
  int32_t layer = -1;
  /// Contents at load (1.4): copied to the buffer's start, rest zero; then
  /// the relocations are patched in. Empty = no initial contents.
  std::vector<uint8_t> init;
  std::vector<Relocation> relocations;
  bool operator==(const BufferDef &o) const;
};

struct WeightBinding {
  std::string file;          // pack file, relative to the pack directory
  uint64_t offset = 0;       // absolute file offset, bytes
  uint64_t length = 0;       // bytes
  uint32_t buffer = 0;       // index into RankPlan::buffers
  uint64_t bufferOffset = 0; // bytes inside that buffer
  WeightTransform transform = WeightTransform::RawCopy;
  WeightTag tag = WeightTag::Other;
  std::string tensor;        // HF tensor name ("" for derived ranges)
  int32_t layer = -1;        // -1 = embed/lm_head/final norm
  int32_t expert = -1;       // -1 = none, -2 = shared expert
  Projection projection = Projection::None;
  int32_t half = -1;         // exlr8 half 0..15, -1 = whole tensor
  uint8_t widthX2 = 0;       // trellis K times 2 (K3 = 6), 0 = not trellis
  bool operator==(const WeightBinding &o) const;
};

struct KernelBinary {
  std::string arch;            // "sm_90" | "sm_121"
  std::string ptx;             // PTX text
  std::vector<uint8_t> cubin;  // CUBIN (empty = JIT the PTX)
  bool operator==(const KernelBinary &o) const;
};

struct KernelDef {
  std::string name;          // extern "C" entry; encodes its parameters
  std::string templateName;  // family, "expert_gemv_trellis"
  KeyValues templateArgs;
  std::string source;        // CUDA C++ instantiation unit
  std::string sourceHash;    // xxh64 hex of source
  std::string cacheKey;      // xxh64 hex of source+options+arch+nvrtc
  std::vector<std::string> nvrtcOptions;
  std::vector<KernelBinary> binaries; // one per target arch
  LaunchDims launch;         // default launch shape
  bool operator==(const KernelDef &o) const;
};

struct ArgDef {
  ArgKind kind = ArgKind::Buffer;
  int32_t buffer = -1;       // Buffer: index into RankPlan::buffers
  uint64_t offset = 0;       // Buffer: bytes inside the buffer
  int64_t i = 0;             // I32/I64 immediate
  float f = 0.0f;            // F32 immediate
  std::string name;          // Runtime: "position", "batch", ...; else label
  /// Buffer: bytes per token row; launch j of a repeated op reads
  /// offset + j * rowsPerLaunch * rowBytes (0 = same pointer every launch).
  uint64_t rowBytes = 0;
  double d = 0.0;            // F64 immediate (1.4)
  bool operator==(const ArgDef &o) const;
};

struct OpDef {
  OpKind kind = OpKind::Other;
  std::string name;          // "l3.moe.experts"
  int32_t kernel = -1;       // index into Plan::kernels, -1 = none
  int32_t collective = -1;   // index into RankPlan::collectives, -1 = none
  std::vector<uint32_t> inputs;  // buffer indices read
  std::vector<uint32_t> outputs; // buffer indices written
  int32_t layer = -1;
  uint64_t bytesRead = 0;    // weight bytes read per step
  uint64_t predictedNs = 0;  // at Plan::bandwidthGBps
  LaunchDims launch;         // overrides the kernel's when gridX != 0
  std::vector<ArgDef> args;  // kernel arguments in parameter order
  uint64_t decodedWeights = 0; // trellis weights decoded per step
  uint32_t repeat = 1;       // launches per step (prefill via a GEMV kernel)
  uint32_t rowsPerLaunch = 0; // tokens per launch, 0 = the graph's size
  /// May start while the previous kernel runs; its entry waits (1.5).
  bool programmaticLaunch = false;
  bool operator==(const OpDef &o) const;
};

struct GraphDef {
  GraphKind kind = GraphKind::Decode;
  uint32_t size = 1;         // decode: batch; prefill: chunk tokens
  std::vector<OpDef> ops;    // execution order
  bool operator==(const GraphDef &o) const;
};

struct CollectiveDef {
  CollectiveKind kind = CollectiveKind::AllReduce;
  DType dtype = DType::F32;
  uint64_t elements = 0;     // per token row of a rank's contribution
  int32_t layer = -1;
  std::string order = "rank-order fp32 sum";
  int32_t buffer = -1;       // in-place buffer (RankPlan::buffers)
  bool operator==(const CollectiveDef &o) const;
};

struct LayerSummary {
  int32_t layer = 0;         // -1 = embed, numLayers = head
  LayerKind kind = LayerKind::Dense;
  uint64_t bytesPerToken = 0; // weight bytes per decoded token on this rank
  uint64_t predictedNs = 0;   // at Plan::bandwidthGBps
  std::vector<std::string> kernels; // fused kernel names, execution order
  std::vector<std::string> ops;     // op names, execution order
  bool operator==(const LayerSummary &o) const;
};

struct RankPlan {
  uint32_t rank = 0;
  uint64_t arenaBytes = 0;
  uint64_t weightBytes = 0;     // Weight buffers
  uint64_t activationBytes = 0; // Activation + Scratch + Io buffers
  uint64_t kvBytes = 0;         // KvCache buffers
  uint64_t bytesPerToken = 0;   // weight bytes read per decoded token
  std::vector<BufferDef> buffers;
  std::vector<WeightBinding> weights;
  std::vector<GraphDef> graphs;  // sorted by (kind, size)
  std::vector<CollectiveDef> collectives;
  std::vector<LayerSummary> layers; // sorted by layer
  bool operator==(const RankPlan &o) const;
};

struct Plan {
  uint32_t schemaMajor = kPlanSchemaMajor;
  uint32_t schemaMinor = kPlanSchemaMinor;
  uint32_t runtimeAbi = kRuntimeAbi;
  std::string compilerVersion;
  std::string configHash;    // xxh64 hex of config.json
  std::string manifestHash;  // "" = no manifest
  std::string indexHash;     // content hash of the pack index
  std::vector<std::string> targetArchs; // "sm_121", "sm_90"
  ModelMeta model;
  uint32_t numRanks = 1;
  double bandwidthGBps = 273.0; // target bandwidth, 1e9 bytes/s
  uint64_t memoryPerRank = 0;   // budget checked at compile, bytes
  std::vector<KernelDef> kernels; // shared by all ranks
  std::vector<RankPlan> ranks;
  KeyValues compileOptions;
  bool operator==(const Plan &o) const;
};

/// A graph's name in traces and in `glmc inspect`: "decode.B",
/// "prefill.T", "load".
std::string graphName(const GraphDef &g);

/// Time to read `bytes` at `gbps` (1e9 bytes/s), in ns (rounded up).
uint64_t predictNs(uint64_t bytes, double gbps);

/// Adds `k` to plan.kernels unless a kernel with the same name and source
/// hash exists; returns its index. Identical instances share one kernel.
int32_t addKernel(Plan &plan, KernelDef k);

/// Fills the derived fields the compiler need not compute by hand: per rank
/// weight/activation/kv bytes and arena size (from buffers), each op's
/// predictedNs (from bytesRead at plan.bandwidthGBps), bytesPerToken and the
/// layer summaries (from the smallest decode graph), model.activeWeightBytes
/// (sum over ranks), sorted graphs. Idempotent.
void finalizePlan(Plan &plan);

/// Checks indices (buffers, kernels, collectives), buffer extents inside the
/// arena and binding extents inside buffers; throws glm::rt::Error naming
/// `source`. readPlan calls it; the compiler may call it before writing.
void validatePlan(const Plan &plan, const std::string &source);

/// Serializes deterministically: same plan, identical bytes (no timestamps,
/// maps sorted, no flatbuffer deduplication that depends on hashing order).
std::vector<uint8_t> serializePlan(const Plan &plan);
/// serializePlan + write to `path`; throws Error naming the file.
void writePlan(const Plan &plan, const std::string &path);

/// What the reader checks beyond the format. Empty hash = not checked.
struct ReadExpectations {
  std::string configHash;
  std::string manifestHash;
  std::string indexHash;
  std::string packDir;       // for messages ("PACK" if empty)
  uint32_t runtimeAbi = kRuntimeAbi;
  /// Options the printed re-plan command changes (e.g. the --manifest the
  /// runtime was given instead of the plan's).
  std::vector<std::pair<std::string, std::string>> replanOverrides;
};

/// Parses and verifies plan bytes; `source` names the file in errors.
/// Throws glm::rt::Error on a corrupt buffer, another identifier, another
/// schema major (or a newer minor's unknown required data), another runtime
/// ABI or a hash mismatch, each with the re-plan command.
Plan parsePlan(const uint8_t *data, size_t size, const std::string &source,
               const ReadExpectations &expect = {});
/// Reads `path` and calls parsePlan.
Plan readPlan(const std::string &path, const ReadExpectations &expect = {});

/// "re-plan with: glmc compile PACK --sparks N -o PLAN" with what is known
/// (for a plan too damaged to read its recorded command).
std::string replanHint(const std::string &packDir, uint32_t sparks,
                       const std::string &planPath);

/// Options a re-plan changes: {"--sparks", "4"}, {"--max-context", "8192"}.
using OptionOverrides = std::vector<std::pair<std::string, std::string>>;

/// The `glmc compile` command that makes this plan again, pasteable: the
/// command the plan records (compile option `command`) with PACK replaced by
/// `packDir` and -o by `planPath` (each when non-empty) and `overrides`
/// applied; for plans that record none, one built from the options they
/// record (sparks, manifest, archs, max context, KV dtype, tunings).
std::string replanCommand(const KeyValues &compileOptions,
                          const std::vector<std::string> &targetArchs,
                          uint32_t sparks, const std::string &packDir,
                          const std::string &planPath,
                          const OptionOverrides &overrides = {});
std::string replanCommand(const Plan &plan, const std::string &packDir,
                          const std::string &planPath,
                          const OptionOverrides &overrides = {});

} // namespace glm::plan
