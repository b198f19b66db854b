//===- plan_reader.cpp - verify a plan once, then hand out plain structs --===//
//
// Order of checks: file identifier, checksum trailer (a flipped byte
// anywhere), flatbuffer Verifier (every offset and
// length in bounds), schema major, runtime ABI, pack hashes, then indices and
// extents (validatePlan). Each refusal names the file, expected vs found and
// the re-plan command. After this nothing in the runtime re-checks the bytes.
//
//===----------------------------------------------------------------------===//
#include "plans/plan.h"
#include "plans/engine_image.h"
#include "plans/plan_generated.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/numbers.h"
#include "runtime/base/hash.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace glm::plan {

namespace fbs = glm::plan::fb;

std::string replanHint(const std::string &packDir, uint32_t sparks,
                       const std::string &planPath) {
  std::ostringstream os;
  os << "re-plan with: glmc compile " << (packDir.empty() ? "PACK" : packDir)
     << " --sparks " << (sparks ? std::to_string(sparks) : std::string("N"))
     << " -o " << (planPath.empty() ? "PLAN" : planPath);
  return os.str();
}

namespace {

std::string s(const flatbuffers::String *v) {
  return v ? std::string(v->c_str(), v->size()) : std::string();
}

std::vector<std::string>
strs(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>> *v) {
  std::vector<std::string> out;
  if (v)
    for (const flatbuffers::String *x : *v)
      out.push_back(s(x));
  return out;
}

KeyValues
keyValues(const flatbuffers::Vector<flatbuffers::Offset<fbs::KeyValueDef>> *v) {
  KeyValues out;
  if (v)
    for (const fbs::KeyValueDef *kv : *v)
      out[s(kv->key())] = s(kv->value());
  return out;
}

template <class T> std::vector<T> vec(const flatbuffers::Vector<T> *v) {
  return v ? std::vector<T>(v->begin(), v->end()) : std::vector<T>();
}

LaunchDims launch(const fbs::LaunchDef *l) {
  LaunchDims d;
  if (l) {
    d.gridX = l->grid_x(); d.gridY = l->grid_y(); d.gridZ = l->grid_z();
    d.blockX = l->block_x(); d.blockY = l->block_y(); d.blockZ = l->block_z();
    d.smemBytes = l->smem();
  }
  return d;
}

ModelMeta model(const fbs::ModelMetaDef *m) {
  ModelMeta o;
  o.modelType = s(m->model_type());
  o.architecture = s(m->architecture());
  o.layout = s(m->layout());
  o.manifest = s(m->manifest());
  o.hiddenSize = m->hidden_size();
  o.numLayers = m->num_layers();
  o.vocabSize = m->vocab_size();
  o.eosTokenIds = vec(m->eos_token_ids());
  o.padTokenId = m->pad_token_id();
  o.tokenizerFile = s(m->tokenizer_file());
  o.chatTemplateFile = s(m->chat_template_file());
  o.temperature = m->temperature();
  o.topP = m->top_p();
  o.maxContext = m->max_context();
  o.kvDtype = DType(m->kv_dtype());
  o.activeWeightBytes = m->active_weight_bytes();
  return o;
}

KernelDef kernel(const fbs::KernelDef *k) {
  KernelDef o;
  o.name = s(k->name());
  o.templateName = s(k->template_name());
  o.templateArgs = keyValues(k->template_args());
  o.source = s(k->source());
  o.sourceHash = s(k->source_hash());
  o.cacheKey = s(k->cache_key());
  o.nvrtcOptions = strs(k->nvrtc_options());
  if (k->binaries())
    for (const fbs::KernelBinaryDef *b : *k->binaries()) {
      KernelBinary kb;
      kb.arch = s(b->arch());
      if (b->ptx())
        kb.ptx.assign(b->ptx()->begin(), b->ptx()->end());
      kb.cubin = vec(b->cubin());
      o.binaries.push_back(std::move(kb));
    }
  o.launch = launch(k->launch());
  return o;
}

OpDef op(const fbs::OpDef *x) {
  OpDef o;
  o.kind = OpKind(x->kind());
  o.name = s(x->name());
  o.kernel = x->kernel();
  o.collective = x->collective();
  o.inputs = vec(x->inputs());
  o.outputs = vec(x->outputs());
  o.layer = x->layer();
  o.bytesRead = x->bytes_read();
  o.predictedNs = x->predicted_ns();
  o.launch = launch(x->launch());
  if (x->args())
    for (const fbs::ArgDef *a : *x->args()) {
      ArgDef d;
      d.kind = ArgKind(a->kind());
      d.buffer = a->buffer();
      d.offset = a->offset();
      d.i = a->i();
      d.f = a->f();
      d.name = s(a->name());
      d.rowBytes = a->row_bytes();
      d.d = a->d();
      o.args.push_back(std::move(d));
    }
  o.decodedWeights = x->decoded_weights();
  o.repeat = x->repeat();
  o.rowsPerLaunch = x->rows_per_launch();
  o.programmaticLaunch = x->programmatic_launch();
  return o;
}

RankPlan rank(const fbs::RankPlanDef *r) {
  RankPlan o;
  o.rank = r->rank();
  o.arenaBytes = r->arena_bytes();
  o.weightBytes = r->weight_bytes();
  o.activationBytes = r->activation_bytes();
  o.kvBytes = r->kv_bytes();
  o.bytesPerToken = r->bytes_per_token();
  if (r->buffers())
    for (const fbs::BufferDef *b : *r->buffers()) {
      BufferDef d{s(b->name()), b->bytes(),        b->arena_offset(),
                  BufferKind(b->kind()), DType(b->dtype()), b->layer(),
                  {},          {}};
      if (b->init())
        d.init.assign(b->init()->begin(), b->init()->end());
      if (b->relocations())
        for (const fbs::RelocationDef *rl : *b->relocations())
          d.relocations.push_back({rl->at(), rl->buffer(), rl->offset()});
      o.buffers.push_back(std::move(d));
    }
  if (r->weights()) {
    o.weights.reserve(r->weights()->size());
    for (const fbs::WeightBindingDef *w : *r->weights()) {
      WeightBinding b;
      b.file = s(w->file());
      b.offset = w->offset();
      b.length = w->length();
      b.buffer = w->buffer();
      b.bufferOffset = w->buffer_offset();
      b.transform = WeightTransform(w->transform());
      b.tag = WeightTag(w->tag());
      b.tensor = s(w->tensor());
      b.layer = w->layer();
      b.expert = w->expert();
      b.projection = Projection(w->projection());
      b.half = w->half();
      b.widthX2 = w->width_x2();
      o.weights.push_back(std::move(b));
    }
  }
  if (r->graphs())
    for (const fbs::GraphDef *g : *r->graphs()) {
      // A graph kind of a later minor is one this runtime never runs.
      if (uint8_t(g->kind()) > uint8_t(GraphKind::Draft))
        continue;
      GraphDef d;
      d.kind = GraphKind(g->kind());
      d.size = g->size();
      if (g->ops())
        for (const fbs::OpDef *x : *g->ops())
          d.ops.push_back(op(x));
      o.graphs.push_back(std::move(d));
    }
  if (r->collectives())
    for (const fbs::CollectiveDef *c : *r->collectives())
      o.collectives.push_back(CollectiveDef{
          CollectiveKind(c->kind()), DType(c->dtype()), c->elements(),
          c->layer(), s(c->order()), c->buffer()});
  if (r->layers())
    for (const fbs::LayerSummaryDef *l : *r->layers())
      o.layers.push_back(LayerSummary{l->layer(), LayerKind(l->kind()),
                                      l->bytes_per_token(), l->predicted_ns(),
                                      strs(l->kernels()), strs(l->ops())});
  return o;
}

} // namespace

void validatePlan(const Plan &plan, const std::string &source) {
  auto bad = [&](auto &&...parts) {
    rt::fail(source, ": invalid plan: ", parts...,
             "; the plan is corrupt or from a broken compiler: re-plan "
             "with: ",
             replanCommand(plan, "", source));
  };
  if (plan.ranks.size() != plan.numRanks)
    bad("num_ranks is ", plan.numRanks, " but ", plan.ranks.size(),
        " rank plans are stored");
  // The server counts tokens in int: a larger context was truncated
  // (2^32 + 100 served as 100).
  if (plan.model.maxContext < 0 || plan.model.maxContext > rt::kMaxContextTokens)
    bad("max_context is ", plan.model.maxContext, " tokens, outside 0..",
        rt::kMaxContextTokens);
  for (size_t ri = 0; ri < plan.ranks.size(); ++ri) {
    const RankPlan &r = plan.ranks[ri];
    if (r.rank != ri)
      bad("rank plan ", ri, " says it is rank ", r.rank);
    const size_t nbuf = r.buffers.size();
    for (const BufferDef &b : r.buffers)
      if (b.arenaOffset + b.bytes < b.arenaOffset ||
          b.arenaOffset + b.bytes > r.arenaBytes)
        bad("rank ", ri, " buffer '", b.name, "' [", b.arenaOffset, ", +",
            b.bytes, ") lies outside the arena of ", r.arenaBytes, " bytes");
    for (const BufferDef &b : r.buffers) {
      if (b.init.size() > b.bytes)
        bad("rank ", ri, " buffer '", b.name, "' has ", b.init.size(),
            " init bytes but holds ", b.bytes);
      for (const Relocation &rl : b.relocations) {
        if (rl.at % 8 != 0 || rl.at + 8 > b.init.size())
          bad("rank ", ri, " buffer '", b.name, "' relocation at byte ",
              rl.at, " is unaligned or outside its ", b.init.size(),
              " init bytes");
        if (rl.buffer >= nbuf || rl.offset > r.buffers[rl.buffer].bytes)
          bad("rank ", ri, " buffer '", b.name, "' relocation at byte ",
              rl.at, " points to buffer ", rl.buffer, " + ", rl.offset,
              " outside the rank's ", nbuf, " buffers");
      }
    }
    for (const WeightBinding &w : r.weights) {
      // A pack file is named relative to --pack: a damaged name must not
      // reach outside it (a FIFO or device there would block the load).
      const std::filesystem::path fp(w.file);
      bool inside = !w.file.empty() && fp.is_relative();
      for (const auto &part : fp)
        inside &= part != "..";
      if (!inside)
        bad("rank ", ri, " binding of '", w.file, "' @", w.offset,
            " names no file inside the pack directory");
      if (w.buffer >= nbuf)
        bad("rank ", ri, " binding of ", w.file, " @", w.offset,
            " targets buffer ", w.buffer, " of ", nbuf);
      const BufferDef &b = r.buffers[w.buffer];
      if (w.transform > WeightTransform::ToF32)
        bad("rank ", ri, " binding of ", w.file, " @", w.offset,
            " has an unknown transform ", int(w.transform));
      const uint64_t dst = transformedBytes(w.transform, w.length);
      if (dst < w.length || w.bufferOffset + dst < w.bufferOffset ||
          w.bufferOffset + dst > b.bytes)
        bad("rank ", ri, " binding of ", w.file, " @", w.offset, " (",
            w.length, " bytes) overflows buffer '", b.name, "' (", b.bytes,
            " bytes) at offset ", w.bufferOffset);
    }
    for (const GraphDef &g : r.graphs)
      for (const OpDef &o : g.ops) {
        if (o.kernel >= 0 && size_t(o.kernel) >= plan.kernels.size())
          bad("rank ", ri, " op '", o.name, "' uses kernel ", o.kernel, " of ",
              plan.kernels.size());
        // A programmatic launch overlaps the previous kernel: only safe when
        // the kernel waits for it before touching memory.
        if (o.programmaticLaunch &&
            (o.kernel < 0 || plan.kernels[o.kernel].source.find(
                                 "glm::programmaticEntry();") ==
                                 std::string::npos))
          bad("rank ", ri, " op '", o.name, "' is a programmatic launch of ",
              o.kernel < 0 ? std::string("no kernel")
                           : "kernel " + plan.kernels[o.kernel].name +
                                 ", whose source does not wait for the "
                                 "previous kernel (grid_dependency.cuh)");
        if (o.collective >= 0 && size_t(o.collective) >= r.collectives.size())
          bad("rank ", ri, " op '", o.name, "' uses collective ",
              o.collective, " of ", r.collectives.size());
        for (uint32_t b : o.inputs)
          if (b >= nbuf)
            bad("rank ", ri, " op '", o.name, "' reads buffer ", b, " of ",
                nbuf);
        for (uint32_t b : o.outputs)
          if (b >= nbuf)
            bad("rank ", ri, " op '", o.name, "' writes buffer ", b, " of ",
                nbuf);
        if (o.repeat == 0)
          bad("rank ", ri, " op '", o.name, "' is launched 0 times");
        for (const ArgDef &a : o.args) {
          if (a.kind != ArgKind::Buffer)
            continue;
          // The last launch of a repeated op reads the furthest row.
          const unsigned __int128 last =
              (unsigned __int128)a.offset +
              (unsigned __int128)(o.repeat - 1) * o.rowsPerLaunch * a.rowBytes;
          if (a.buffer < 0 || size_t(a.buffer) >= nbuf ||
              last > r.buffers[a.buffer].bytes)
            bad("rank ", ri, " op '", o.name, "' argument '", a.name,
                "' points at buffer ", a.buffer, " + ", a.offset,
                " (launch ", o.repeat, " at +", uint64_t(last), ")");
        }
      }
    for (const CollectiveDef &c : r.collectives)
      if (c.buffer >= 0 && size_t(c.buffer) >= nbuf)
        bad("rank ", ri, " collective of layer ", c.layer, " uses buffer ",
            c.buffer, " of ", nbuf);
  }
}

Plan parsePlan(const uint8_t *data, size_t size, const std::string &source,
               const ReadExpectations &expect) {
  const std::string hint = [&] {
    return replanHint(expect.packDir, 0, source);
  }();
  rt::check(size >= 8, source, ": not a glmc plan (", size,
            " bytes is too short); ", hint);
  if (!flatbuffers::BufferHasIdentifier(data, kPlanFileIdentifier)) {
    std::string found(reinterpret_cast<const char *>(data) + 4, 4);
    for (char &c : found)
      if (c < 32 || c > 126)
        c = '?';
    // A file that is not named like a plan is more likely the wrong
    // argument (a config, a pack file) than a damaged plan: do not suggest
    // writing a plan over it.
    const std::string ext = std::string(".") + kPlanFileExtension;
    const bool namedLikePlan =
        source.size() >= ext.size() &&
        source.compare(source.size() - ext.size(), ext.size(), ext) == 0;
    rt::fail(source, ": not a glmc plan (file identifier '", found,
             "', expected '", kPlanFileIdentifier, "'); ",
             namedLikePlan
                 ? hint
                 : "give the ." + std::string(kPlanFileExtension) +
                       " file that glmc compile wrote (glmc compile PACK "
                       "--sparks N -o PLAN." +
                       kPlanFileExtension + ")");
  }
  // Schema 1.3+: the last 16 bytes are the checksum trailer (plan.h). A
  // missing trailer is a cut-off file or a plan from before 1.3.
  const bool hasTrailer =
      size >= 8 + kPlanTrailerBytes &&
      std::memcmp(data + size - kPlanTrailerBytes, kPlanChecksumMagic, 8) == 0;
  rt::check(hasTrailer, source,
            ": corrupt or truncated plan (its checksum trailer is missing: "
            "the file was cut short, or written by a glmc older than plan "
            "schema 1.3); ",
            hint);
  size -= kPlanTrailerBytes;
  uint64_t recorded = 0;
  for (int i = 0; i < 8; ++i)
    recorded |= uint64_t(data[size + 8 + i]) << (8 * i);
  const uint64_t actual = rt::xxh64(data, size);
  rt::check(actual == recorded, source, ": corrupt plan (its bytes hash to ",
            rt::hex64(actual), " but glmc recorded ", rt::hex64(recorded),
            ": the file changed after it was written); ", hint);
  flatbuffers::Verifier verifier(data, size, /*max_depth=*/64,
                                 /*max_tables=*/1u << 30);
  if (!fbs::VerifyPlanDefBuffer(verifier))
    rt::fail(source, ": corrupt or truncated plan (flatbuffer verification "
                     "failed); ",
             hint);
  const fbs::PlanDef *p = fbs::GetPlanDef(data);
  const uint32_t sparks = p->num_ranks();
  // The plan verified: its recorded command re-plans with what the user
  // chose (manifest, archs, width, tunings) kept.
  const std::string fullHint =
      "re-plan with: " + replanCommand(keyValues(p->compile_options()),
                                       strs(p->target_archs()), sparks,
                                       expect.packDir, source,
                                       expect.replanOverrides);
  if (p->schema_major() != kPlanSchemaMajor)
    rt::fail(source, ": plan schema version ", p->schema_major(), ".",
             p->schema_minor(), " is not supported (this build reads ",
             kPlanSchemaMajor, ".x, up to ", kPlanSchemaMajor, ".",
             kPlanSchemaMinor, " fully); ", fullHint);
  if (p->runtime_abi() != expect.runtimeAbi)
    rt::fail(source, ": plan was compiled for runtime ABI ", p->runtime_abi(),
             " but this runtime has ABI ", expect.runtimeAbi, " (plan from ",
             s(p->compiler_version()), "); ", fullHint);
  auto checkHash = [&](const char *what, const std::string &want,
                       const flatbuffers::String *got) {
    if (!want.empty() && s(got) != want)
      rt::fail(source, ": the pack's ", what,
               " changed since this plan was compiled (plan has ", s(got),
               ", pack has ", want, "); ", fullHint);
  };
  checkHash("config.json", expect.configHash, p->config_hash());
  checkHash("manifest", expect.manifestHash, p->manifest_hash());
  checkHash("index", expect.indexHash, p->index_hash());

  Plan o;
  o.schemaMajor = p->schema_major();
  o.schemaMinor = p->schema_minor();
  o.runtimeAbi = p->runtime_abi();
  o.compilerVersion = s(p->compiler_version());
  o.configHash = s(p->config_hash());
  o.manifestHash = s(p->manifest_hash());
  o.indexHash = s(p->index_hash());
  o.targetArchs = strs(p->target_archs());
  o.model = model(p->model());
  o.numRanks = p->num_ranks();
  o.bandwidthGBps = p->bandwidth_gbps();
  o.memoryPerRank = p->memory_per_rank();
  if (p->kernels())
    for (const fbs::KernelDef *k : *p->kernels())
      o.kernels.push_back(kernel(k));
  if (p->ranks())
    for (const fbs::RankPlanDef *r : *p->ranks())
      o.ranks.push_back(rank(r));
  o.compileOptions = keyValues(p->compile_options());
  validatePlan(o, source);
  return o;
}

Plan readPlan(const std::string &path, const ReadExpectations &expect) {
  rt::check(std::filesystem::exists(path), path,
            ": cannot open the plan (no such file?); ",
            replanHint(expect.packDir, 0, path));
  std::string bytes = rt::readFileBounded(path, rt::kMaxPlanBytes, "a plan");
  // An engine executable (glmc compile --emit engine) carries its plan.
  // Its bytes start wherever the executable ended; flatbuffers reads them
  // as aligned scalars (UBSan: a misaligned Vector), so they get storage of
  // their own, aligned as the heap aligns it.
  if (auto e = findEmbeddedPlan(bytes, path)) {
    const std::string plan = bytes.substr(e->offset, e->size);
    return parsePlan(reinterpret_cast<const uint8_t *>(plan.data()), plan.size(),
                     path + " (the plan inside this engine)", expect);
  }
  return parsePlan(reinterpret_cast<const uint8_t *>(bytes.data()),
                   bytes.size(), path, expect);
}

} // namespace glm::plan
