//===- GlmDialect.cpp - glm dialect registration and verifiers ------------===//
//
// Registers the glm ops, types and attributes, prints and parses trellis
// widths, and verifies what the ODS types cannot express: widths in the
// allowed set, tile multiples, consistent shapes, rank counts, owned halves.
//
//===----------------------------------------------------------------------===//
#include "glm/GlmDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include <sstream>

using namespace mlir;
using namespace mlir::glm;

#include "glm/GlmOpsDialect.cpp.inc"
#include "glm/GlmEnums.cpp.inc"

//===----------------------------------------------------------------------===//
// Custom directives: trellis width (twice the bits; `?` = per part) and the
// E4M3 flag.
//===----------------------------------------------------------------------===//

static ParseResult parseWidth(AsmParser &parser, unsigned &twiceBits) {
  if (succeeded(parser.parseOptionalQuestion())) {
    twiceBits = 0;
    return success();
  }
  double bits = 0;
  SMLoc loc = parser.getCurrentLocation();
  int64_t whole = 0;
  OptionalParseResult isInt = parser.parseOptionalInteger(whole);
  if (isInt.has_value()) {
    if (failed(*isInt))
      return failure();
    bits = static_cast<double>(whole);
  } else if (parser.parseFloat(bits)) {
    return failure();
  }
  double twice = bits * 2;
  if (twice < 1 || twice > 64 || twice != static_cast<int>(twice))
    return parser.emitError(loc) << "width " << bits
                                 << " is not a whole or half number of bits";
  twiceBits = static_cast<unsigned>(twice);
  return success();
}

static void printWidth(AsmPrinter &printer, unsigned twiceBits) {
  if (twiceBits == 0)
    printer << "?";
  else if (twiceBits % 2 == 0)
    printer << twiceBits / 2;
  else
    printer << twiceBits / 2 << ".5";
}

static ParseResult parseE4m3(AsmParser &parser, bool &e4m3) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef kw;
  if (parser.parseKeyword(&kw))
    return failure();
  if (kw != "e4m3" && kw != "fp16")
    return parser.emitError(loc) << "expected 'e4m3' or 'fp16', got '" << kw
                                 << "'";
  e4m3 = kw == "e4m3";
  return success();
}

static void printE4m3(AsmPrinter &printer, bool e4m3) {
  printer << (e4m3 ? "e4m3" : "fp16");
}

#define GET_ATTRDEF_CLASSES
#include "glm/GlmAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "glm/GlmOpsTypes.cpp.inc"

#define GET_OP_CLASSES
#include "glm/GlmOps.cpp.inc"

void GlmDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "glm/GlmAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "glm/GlmOpsTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "glm/GlmOps.cpp.inc"
      >();
}

/// A number as people write it: 2.5, 9, 0.001 (not 2.500000e+00).
static std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

bool mlir::glm::isAllowedWidth(int64_t twiceBits, Codebook codebook) {
  if (twiceBits % 2 == 0)
    return twiceBits >= 2 && twiceBits <= 16;
  return codebook == Codebook::Mul1 && twiceBits >= 3 && twiceBits <= 7;
}

//===----------------------------------------------------------------------===//
// Types and attributes
//===----------------------------------------------------------------------===//

LogicalResult TrellisType::verify(function_ref<InFlightDiagnostic()> emitError,
                                  unsigned twiceBits, Codebook codebook,
                                  TileOrder, bool) {
  if (twiceBits != 0 && !isAllowedWidth(twiceBits, codebook))
    return emitError() << "trellis width " << num(twiceBits / 2.0)
                       << " is not allowed for codebook "
                       << stringifyCodebook(codebook)
                       << " (K = 1..8; 1.5, 2.5, 3.5 with mul1 only)";
  return success();
}

double DenseType::getBitsPerWeight() const {
  switch (getFormat()) {
  case DenseFormat::F32:
    return 32;
  case DenseFormat::F16:
  case DenseFormat::BF16:
    return 16;
  case DenseFormat::Fp8Block128:
    return 8 + 32.0 / (128 * 128);
  case DenseFormat::Fp8Row:
    return 8;
  case DenseFormat::Mxfp8:
    return 8 + 8.0 / 32;
  case DenseFormat::Int4:
    return 4 + 16.0 / 32;
  }
  return 0;
}

LogicalResult ShardAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                ShardKind, int64_t ranks, int64_t units,
                                int64_t layer) {
  if (ranks < 1)
    return emitError() << "rank count must be at least 1, got " << ranks;
  if (units < 1)
    return emitError() << "unit count must be at least 1, got " << units;
  if (layer < -1)
    return emitError() << "layer must be -1 (no layer) or more, got " << layer;
  return success();
}

int64_t ShardAttr::ownerOf(int64_t expert, int64_t unit) const {
  int64_t n = getRanks();
  switch (getKind()) {
  case ShardKind::Replicated:
    return -1;
  case ShardKind::Halves: {
    // Pairs of halves round-robin, offset by the layer: a pair is what one
    // moe_trellis down item (down_group <= 2) or a 16-row dense_trellis
    // chunk reads, so its fixed-point partial is one rank's at every N.
    const int64_t pairs = (getUnits() + 1) / 2;
    return (pairs * expert + unit / 2 + std::max<int64_t>(getLayer(), 0)) % n;
  }
  case ShardKind::Heads:
  case ShardKind::Vocab:
    for (int64_t r = 0; r < n; ++r)
      if (unit < rangeOf(r).second)
        return r;
    return n - 1;
  }
  return -1;
}

std::pair<int64_t, int64_t> ShardAttr::rangeOf(int64_t rank) const {
  int64_t n = getRanks(), u = getUnits();
  if (getKind() == ShardKind::Replicated)
    return {0, u};
  return {rank * u / n, (rank + 1) * u / n};
}

//===----------------------------------------------------------------------===//
// Module-level symbols
//===----------------------------------------------------------------------===//

LogicalResult PackOp::verify() {
  if (!llvm::is_contained({"hf", "exl3", "exlr8"}, getLayout()))
    return emitOpError() << "layout must be hf, exl3 or exlr8, got '"
                         << getLayout() << "'";
  return success();
}

/// The glm.pack of the module around `op`, if any.
static PackOp findPack(Operation *op) {
  Operation *module = op->getParentOp();
  if (!module || module->getNumRegions() != 1 || module->getRegion(0).empty())
    return {};
  for (Operation &o : module->getRegion(0).front())
    if (auto pack = dyn_cast<PackOp>(o))
      return pack;
  return {};
}

/// Checks (file, offset, length, role) quadruples against the pack tables.
static LogicalResult verifyRanges(Operation *op, ArrayRef<int64_t> ranges,
                                  StringRef what) {
  if (ranges.size() % 4 != 0)
    return op->emitOpError() << what << " must hold (file, offset, length, "
                             << "role) quadruples, got " << ranges.size()
                             << " values";
  PackOp pack = findPack(op);
  int64_t files = pack ? pack.getFiles().size() : INT64_MAX;
  int64_t roles = pack ? pack.getRoles().size() : INT64_MAX;
  for (size_t i = 0; i < ranges.size(); i += 4) {
    if (ranges[i] < 0 || ranges[i] >= files)
      return op->emitOpError() << what << " entry " << i / 4 << " names file "
                               << ranges[i] << " but the pack lists " << files;
    if (ranges[i + 1] < 0 || ranges[i + 2] <= 0)
      return op->emitOpError() << what << " entry " << i / 4 << " has offset "
                               << ranges[i + 1] << " and length "
                               << ranges[i + 2];
    if (ranges[i + 3] < 0 || ranges[i + 3] >= roles)
      return op->emitOpError() << what << " entry " << i / 4 << " names role "
                               << ranges[i + 3] << " but the pack lists "
                               << roles;
  }
  return success();
}

LogicalResult WeightOp::verify() {
  if (getShape().empty() || llvm::any_of(getShape(), [](int64_t d) {
        return d <= 0;
      }))
    return emitOpError() << "shape must be non-empty and positive";
  if (getRanges().empty())
    return emitOpError() << "weight '" << getName() << "' has no byte range";
  if (auto t = dyn_cast<TrellisType>(getType())) {
    if (!t.isResolved())
      return emitOpError() << "dense trellis weight '" << getName()
                           << "' needs a resolved width";
    if (getShape().size() != 2 || getShape()[0] % 16 || getShape()[1] % 16)
      return emitOpError() << "trellis weight shape must be 2-D in 16x16 "
                           << "tiles, got [" << getShape() << "]";
  }
  return verifyRanges(*this, getRanges(), "ranges");
}

uint64_t WeightOp::getByteSize() {
  uint64_t sum = 0;
  ArrayRef<int64_t> r = getRanges();
  for (size_t i = 2; i < r.size(); i += 4)
    sum += r[i];
  return sum;
}

int64_t WeightOp::getNumElements() {
  int64_t n = 1;
  for (int64_t d : getShape())
    n *= d;
  return n;
}

LogicalResult ExpertsOp::verify() {
  if (getExperts() < 1 || getShared() < 0 || getHalves() < 1)
    return emitOpError() << "needs experts >= 1, shared >= 0, halves >= 1; got "
                         << getExperts() << ", " << getShared() << ", "
                         << getHalves();
  if (getHalves() != (getInter() + 127) / 128)
    return emitOpError() << "halves must be ceil(inter / 128) = "
                         << (getInter() + 127) / 128 << ", got "
                         << getHalves();
  if (getPartsPerProj() != 1 && getPartsPerProj() != getHalves())
    return emitOpError() << "parts_per_proj must be 1 or halves ("
                         << getHalves() << "), got " << getPartsPerProj();
  auto trellis = dyn_cast<TrellisType>(getType());
  if (trellis && (getInter() % (16 * getPartsPerProj()) || getHidden() % 16))
    return emitOpError() << "trellis parts must be whole 16x16 tiles: inter "
                         << getInter() << " in " << getPartsPerProj()
                         << " parts, hidden " << getHidden();
  int64_t parts = getNumParts();
  if (static_cast<int64_t>(getParts().size()) != parts * kPartFields)
    return emitOpError() << "expects " << parts << " parts ("
                         << parts * kPartFields << " values), got "
                         << getParts().size() << " values";
  if (getSides().size() % 4)
    return emitOpError() << "sides must hold quadruples, got "
                         << getSides().size() << " values";
  int64_t sides = getSides().size() / 4;
  ArrayRef<int64_t> p = getParts();
  for (int64_t i = 0; i < parts; ++i) {
    const int64_t *row = &p[i * kPartFields];
    if (row[2] <= 0 || row[1] < 0)
      return emitOpError() << "part " << i << " has offset " << row[1]
                           << " and length " << row[2];
    if (row[3] < 0 || row[3] > row[4] || row[4] > sides)
      return emitOpError() << "part " << i << " names sides [" << row[3]
                           << ", " << row[4] << ") of " << sides;
  }
  if (auto widths = getWidths()) {
    if (static_cast<int64_t>(widths->size()) != parts)
      return emitOpError() << "expects " << parts << " widths, got "
                           << widths->size();
    Codebook cb = trellis ? trellis.getCodebook() : Codebook::Mul1;
    for (auto [i, w] : llvm::enumerate(*widths))
      if (!isAllowedWidth(w, cb))
        return emitOpError() << "part " << i << " has width " << num(w / 2.0)
                             << ", not allowed for codebook "
                             << stringifyCodebook(cb);
  }
  return success();
}

LogicalResult ManifestOp::verify() {
  if (getLayers().size() != getWidths().size())
    return emitOpError() << "lists " << getLayers().size() << " layers but "
                         << getWidths().size() << " width tables";
  for (auto [layer, table] : llvm::zip(getLayers(), getWidths())) {
    auto widths = dyn_cast<DenseI32ArrayAttr>(table);
    if (!widths)
      return emitOpError() << "width table of layer " << layer
                           << " must be array<i32: ...>";
    for (int32_t w : widths.asArrayRef())
      if (!llvm::is_contained(getAvailable(), w))
        return emitOpError() << "layer " << layer << " asks for width "
                             << num(w / 2.0) << " but the pack stores only ["
                             << getAvailable() << "] (twice the bits)";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Model-level ops
//===----------------------------------------------------------------------===//

/// Last dimension of a 2-D tensor value, or kDynamic.
static int64_t lastDim(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return t.getShape().back();
}

static bool known(int64_t d) { return d != ShapedType::kDynamic; }

static LogicalResult verifyShard(Operation *op, std::optional<ShardAttr> shard,
                                 ArrayRef<ShardKind> kinds, int64_t units) {
  if (!shard)
    return success();
  if (!llvm::is_contained(kinds, shard->getKind()))
    return op->emitOpError() << "cannot be sharded by "
                             << stringifyShardKind(shard->getKind());
  if (shard->getKind() != ShardKind::Replicated && shard->getUnits() != units)
    return op->emitOpError() << "shard has " << shard->getUnits()
                             << " units but the op has " << units;
  return success();
}

LogicalResult RmsNormOp::verify() {
  if (getEps().convertToDouble() <= 0)
    return emitOpError() << "eps must be positive, got "
                         << num(getEps().convertToDouble());
  return success();
}

LogicalResult MlaOp::verify() {
  if (getHeads() < 1 || getKvLora() < 1 || getQLora() < 1 || getVHead() < 1)
    return emitOpError() << "heads, q_lora, kv_lora and v_head must be "
                         << "positive";
  if (getQkRope() % 2)
    return emitOpError() << "interleaved RoPE needs an even qk_rope, got "
                         << getQkRope();
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "result type " << getResult().getType()
                         << " differs from input type "
                         << getInput().getType();
  return verifyShard(*this, getShard(), {ShardKind::Heads}, getHeads());
}

LogicalResult DsaIndexerOp::verify() {
  bool isInt = cast<RankedTensorType>(getInput().getType())
                   .getElementType()
                   .isInteger(32);
  if (getKind() == IndexerKind::Full) {
    const size_t want = getKpool() > 1 ? 7 : 5;
    if (getWeights().size() != want)
      return emitOpError() << "full indexer needs " << want
                           << " weights (wq_b, wk, k_norm, k_norm_bias, "
                              "weights_proj"
                           << (want == 7 ? ", kpool gate, kpool ape" : "")
                           << "), got " << getWeights().size();
    if (isInt)
      return emitOpError() << "full indexer reads hidden states (f32)";
  } else {
    if (!getWeights().empty())
      return emitOpError() << "shared indexer has no weights, got "
                           << getWeights().size();
    if (!isInt)
      return emitOpError() << "shared indexer reuses a selection (i32)";
  }
  if (getTopk() < 1 || getHeads() < 1)
    return emitOpError() << "topk and heads must be positive, got "
                         << getTopk() << ", " << getHeads();
  if (getKpool() < 1 || getTopk() % getKpool())
    return emitOpError() << "kpool " << getKpool()
                         << " must be positive and divide topk " << getTopk();
  if (getRope() % 2 || getRope() > getHeadDim())
    return emitOpError() << "rope dims " << getRope()
                         << " must be even and at most head_dim "
                         << getHeadDim();
  return success();
}

LogicalResult RouterOp::verify() {
  if (getTopK() < 1 || getTopK() > getExperts())
    return emitOpError() << "top_k " << getTopK()
                         << " must be in [1, experts = " << getExperts()
                         << "]";
  for (Value r : {getIndices(), getWeights()})
    if (known(lastDim(r)) && lastDim(r) != getTopK())
      return emitOpError() << "result has " << lastDim(r)
                           << " columns, expected top_k = " << getTopK();
  if (getScale().convertToDouble() <= 0)
    return emitOpError() << "scale must be positive";
  return success();
}

static LogicalResult verifySwigluLimit(Operation *op,
                                       std::optional<APFloat> limit) {
  if (limit && !(limit->convertToDouble() > 0))
    return op->emitOpError() << "swiglu_limit must be positive, got "
                             << limit->convertToDouble();
  return success();
}

LogicalResult MoeOp::verify() {
  if (getIndices().getType().getShape() != getWeights().getType().getShape())
    return emitOpError() << "indices " << getIndices().getType()
                         << " and weights " << getWeights().getType()
                         << " differ in shape";
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "result type must equal input type";
  if (getShard() && getShard()->getKind() != ShardKind::Halves)
    return emitOpError() << "experts are sharded by halves";
  return verifySwigluLimit(*this, getSwigluLimit());
}

LogicalResult KdaOp::verify() {
  if (getHeads() < 1 || getHeadDim() < 1 || getConvKernel() < 1)
    return emitOpError() << "heads, head_dim and conv_kernel must be "
                         << "positive";
  if (getWeights().size() != 15)
    return emitOpError() << "needs 15 weights (q, k, v, q_conv, k_conv, "
                            "v_conv, f_a, f_b, dt_bias, A_log, b, g_a, g_b, "
                            "o_norm, o), got "
                         << getWeights().size();
  if (auto lb = getLowerBound(); lb && !(lb->convertToDouble() < 0))
    return emitOpError() << "lower_bound must be negative (a log decay), got "
                         << lb->convertToDouble();
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "result type " << getResult().getType()
                         << " differs from input type "
                         << getInput().getType();
  return verifyShard(*this, getShard(), {ShardKind::Heads}, getHeads());
}

/// Rows of streams·width: the mHC ops' stream tensors.
static LogicalResult verifyStreams(Operation *op, Value streams, Value one,
                                   int64_t S) {
  if (S < 1)
    return op->emitOpError() << "streams must be positive, got " << S;
  int64_t wide = lastDim(streams), narrow = lastDim(one);
  if (!ShapedType::isDynamic(wide) && !ShapedType::isDynamic(narrow) &&
      wide != S * narrow)
    return op->emitOpError() << S << " streams of width " << narrow
                             << " need " << S * narrow << " columns, got "
                             << wide;
  return success();
}

LogicalResult HcStreamsOp::verify() {
  return verifyStreams(*this, getResult(), getInput(), getStreams());
}

LogicalResult HcHeadOp::verify() {
  return verifyStreams(*this, getInput(), getResult(), getStreams());
}

LogicalResult HcPreOp::verify() {
  if (getSite() != "attn" && getSite() != "ffn")
    return emitOpError() << "site must be \"attn\" or \"ffn\", got \""
                         << getSite() << "\"";
  if (getSinkhornIters() < 1)
    return emitOpError() << "sinkhorn_iters must be positive";
  const int64_t S = getStreams();
  // The layout mhc_mix writes and mhc_post reads (codegen/templates).
  if (!ShapedType::isDynamic(lastDim(getMix())) &&
      lastDim(getMix()) != (2 + S) * S)
    return emitOpError() << "mix holds pre (" << S << "), post (" << S
                         << ") and comb (" << S * S << "): " << (2 + S) * S
                         << " columns, got " << lastDim(getMix());
  return verifyStreams(*this, getInput(), getResult(), S);
}

LogicalResult HcPostOp::verify() {
  const int64_t S = getStreams();
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "result type must equal the streams' type";
  if (!ShapedType::isDynamic(lastDim(getMix())) &&
      lastDim(getMix()) != (2 + S) * S)
    return emitOpError() << "mix must have " << (2 + S) * S
                         << " columns ([pre | post | comb])";
  return verifyStreams(*this, getInput(), getUpdate(), S);
}

LogicalResult MlpOp::verify() {
  if (getInter() < 1)
    return emitOpError() << "inter must be positive";
  if (failed(verifySwigluLimit(*this, getSwigluLimit())))
    return failure();
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "result type must equal input type";
  if (getShard() && getShard()->getKind() != ShardKind::Halves)
    return emitOpError() << "a dense MLP is sharded by halves";
  return success();
}

LogicalResult LmHeadOp::verify() {
  return verifyShard(*this, getShard(), {ShardKind::Vocab},
                     lastDim(getResult()));
}

LogicalResult SampleOp::verify() {
  double t = getTemperature().convertToDouble(),
         p = getTopP().convertToDouble();
  if (t < 0 || p <= 0 || p > 1)
    return emitOpError() << "needs temperature >= 0 and top_p in (0, 1], got "
                         << num(t) << ", " << num(p);
  return success();
}

//===----------------------------------------------------------------------===//
// Kernel-level ops
//===----------------------------------------------------------------------===//

LogicalResult FusedExpertGemvOp::verify() {
  if (getDenseFormat().has_value() == getCodebook().has_value())
    return emitOpError() << "needs either a codebook (trellis experts) or a "
                         << "dense_format, not both or neither";
  if (getCodebook() && getWidths().empty())
    return emitOpError() << "trellis experts need at least one width";
  for (int32_t w : getWidths())
    if (!getCodebook() || !isAllowedWidth(w, *getCodebook()))
      return emitOpError() << "width " << num(w / 2.0) << " is not allowed"
                           << (getCodebook() ? " for codebook " : "")
                           << (getCodebook() ? stringifyCodebook(*getCodebook())
                                             : StringRef());
  // Only trellis experts rotate by Hadamard-128 blocks; dense (HF) experts
  // take any hidden size.
  if (getCodebook() && getHidden() % 128)
    return emitOpError() << "hidden " << getHidden()
                         << " must be a multiple of 128 (Hadamard blocks)";
  if (getHalves() != (getInter() + 127) / 128)
    return emitOpError() << "halves must be ceil(inter / 128) = "
                         << (getInter() + 127) / 128 << ", got "
                         << getHalves();
  if (getTopK() < 1 || getTopK() > getExperts())
    return emitOpError() << "top_k " << getTopK() << " must be in [1, "
                         << getExperts() << "]";
  if (known(lastDim(getIndices())) && lastDim(getIndices()) != getTopK())
    return emitOpError() << "indices have " << lastDim(getIndices())
                         << " columns, expected top_k = " << getTopK();
  if (known(lastDim(getInput())) && lastDim(getInput()) != getHidden())
    return emitOpError() << "input has " << lastDim(getInput())
                         << " columns, expected hidden = " << getHidden();
  ShardAttr shard = getShard();
  if (shard.getKind() != ShardKind::Halves || shard.getUnits() != getHalves())
    return emitOpError() << "shard must be by halves with units = "
                         << getHalves();
  if (shard.getLayer() != getLayer())
    return emitOpError() << "shard layer " << shard.getLayer()
                         << " differs from op layer " << getLayer();
  return verifySwigluLimit(*this, getSwigluLimit());
}

LogicalResult DenseGemvOp::verify() {
  if (getOut() < 1 || getIn() < 1)
    return emitOpError() << "out and in must be positive";
  if (known(lastDim(getInput())) && lastDim(getInput()) != getIn())
    return emitOpError() << "input has " << lastDim(getInput())
                         << " columns, weight has in = " << getIn();
  if (known(lastDim(getResult())) && lastDim(getResult()) != getOut())
    return emitOpError() << "result has " << lastDim(getResult())
                         << " columns, weight has out = " << getOut();
  if (isa<TrellisType>(getFormat()) && (getOut() % 16 || getIn() % 16))
    return emitOpError() << "trellis weight [" << getOut() << ", " << getIn()
                         << "] is not made of 16x16 tiles";
  if (auto shard = getShard()) {
    if (shard->getKind() == ShardKind::Halves)
      return emitOpError() << "dense_gemv is sharded by heads or vocab";
    int64_t dim = getSplitOut() ? getOut() : getIn();
    if (shard->getKind() != ShardKind::Replicated && dim % shard->getUnits())
      return emitOpError() << "split dimension " << dim
                           << " is not a multiple of " << shard->getUnits()
                           << " units";
  }
  return success();
}

LogicalResult AttentionDecodeOp::verify() {
  int64_t h = getHeads();
  if (known(lastDim(getQ())) &&
      lastDim(getQ()) != h * (getQkNope() + getQkRope()))
    return emitOpError() << "q has " << lastDim(getQ()) << " columns, expected"
                         << " heads x (qk_nope + qk_rope) = "
                         << h * (getQkNope() + getQkRope());
  if (known(lastDim(getKv())) && lastDim(getKv()) != getKvLora() + getQkRope())
    return emitOpError() << "kv has " << lastDim(getKv())
                         << " columns, expected kv_lora + qk_rope = "
                         << getKvLora() + getQkRope();
  if (known(lastDim(getResult())) && lastDim(getResult()) != h * getVHead())
    return emitOpError() << "result has " << lastDim(getResult())
                         << " columns, expected heads x v_head = "
                         << h * getVHead();
  if (getQkRope() % 2)
    return emitOpError() << "interleaved RoPE needs an even qk_rope";
  return verifyShard(*this, getShard(), {ShardKind::Heads}, h);
}

LogicalResult IndexerTopkOp::verify() {
  // The k-pool (GLM-5.3-Flash) adds its compress gate and position bias.
  const size_t want = getKpool() > 1 ? 7 : 5;
  if (getKpool() < 1)
    return emitOpError() << "kpool must be positive, got " << getKpool();
  if (getWeights().size() != want)
    return emitOpError() << "needs " << want << " weights, got "
                         << getWeights().size();
  if (getKpool() > 1 && getTopk() % getKpool())
    return emitOpError() << "topk " << getTopk()
                         << " is not a multiple of kpool " << getKpool();
  if (getTopk() < 1 || getRope() % 2 || getRope() > getHeadDim())
    return emitOpError() << "needs topk >= 1 and an even rope <= head_dim";
  return success();
}

LogicalResult KdaDecodeOp::verify() {
  const int64_t H = getHeads(), hd = getHeadDim();
  if (H < 1 || hd < 1 || getConvKernel() < 1)
    return emitOpError() << "heads, head_dim and conv_kernel must be "
                         << "positive";
  if (getWeights().size() != 6)
    return emitOpError() << "needs 6 weights (q_conv, k_conv, v_conv, "
                            "dt_bias, A_log, o_norm), got "
                         << getWeights().size();
  if (auto lb = getLowerBound(); lb && !(lb->convertToDouble() < 0))
    return emitOpError() << "lower_bound must be negative (a log decay), got "
                         << lb->convertToDouble();
  for (Value v : {getQ(), getK(), getV(), getF(), getGate(), getResult()})
    if (known(lastDim(v)) && lastDim(v) != H * hd)
      return emitOpError() << "q, k, v, f, gate and the result have heads · "
                              "head_dim = "
                           << H * hd << " columns, got " << lastDim(v);
  if (known(lastDim(getB())) && lastDim(getB()) != H)
    return emitOpError() << "b has one column per head (" << H << "), got "
                         << lastDim(getB());
  return verifyShard(*this, getShard(), {ShardKind::Heads}, H);
}

LogicalResult GatherRowsOp::verify() {
  if (getTable().getType() != getResult().getType())
    return emitOpError() << "result must have the table's type";
  return success();
}

LogicalResult MtpInputOp::verify() {
  auto e = cast<RankedTensorType>(getEmbedded().getType());
  if (getHidden().getType() != e)
    return emitOpError() << "embedded and hidden rows must share one type";
  const int64_t d = e.getShape().back();
  const int64_t out = cast<RankedTensorType>(getResult().getType()).getShape().back();
  if (!ShapedType::isDynamic(d) && !ShapedType::isDynamic(out) && out != 2 * d)
    return emitOpError() << "result must have twice the input's columns ("
                         << 2 * d << "), got " << out;
  if (getEps().convertToDouble() <= 0)
    return emitOpError() << "eps must be positive";
  return success();
}

LogicalResult CarryRowsOp::verify() {
  if (getDest().getType() != getSrc().getType() ||
      getResult().getType() != getDest().getType())
    return emitOpError() << "dest, src and result must share one type";
  return success();
}

LogicalResult AddRmsNormOp::verify() {
  Type t = getInput().getType();
  if (getResidual().getType() != t || getSum().getType() != t ||
      getNormed().getType() != t)
    return emitOpError() << "operands and results must share one type";
  if (getEps().convertToDouble() <= 0)
    return emitOpError() << "eps must be positive";
  return success();
}

LogicalResult AllReduceOp::verify() {
  if (getRanks() < 1)
    return emitOpError() << "rank count must be at least 1, got "
                         << getRanks();
  return success();
}

LogicalResult AllGatherOp::verify() {
  if (getRanks() < 1)
    return emitOpError() << "rank count must be at least 1, got "
                         << getRanks();
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "gathers full-width slices: input and result "
                         << "types must match";
  return success();
}
