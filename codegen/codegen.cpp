//===- codegen.cpp - kernel families, names and instantiation units -------===//
//
// The family table is the single place that says which template parameters a
// kernel family takes and which values are legal; the kernel's runtime
// parameter list is read from the family's ARGS macro in its template, so
// the template stays the one source of the kernel ABI.
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "runtime/base/error.h"
#include "runtime/base/hash.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <sstream>

namespace glm::codegen {

namespace {

std::vector<std::string> range(int lo, int hi) {
  std::vector<std::string> v;
  for (int i = lo; i <= hi; ++i)
    v.push_back(std::to_string(i));
  return v;
}

TemplateParam intParam(std::string name, std::string tag,
                       std::vector<std::string> allowed) {
  TemplateParam p;
  p.name = std::move(name);
  p.tag = std::move(tag);
  p.allowed = std::move(allowed);
  return p;
}

TemplateParam enumParam(std::string name, std::string tag,
                        std::map<std::string, std::string> cxx) {
  TemplateParam p;
  p.name = std::move(name);
  p.tag = std::move(tag);
  for (const auto &kv : cxx)
    p.allowed.push_back(kv.first);
  p.cxx = std::move(cxx);
  return p;
}

TemplateParam boolParam(std::string name) {
  TemplateParam p = intParam(name, name, {"0", "1"});
  p.boolean = true;
  p.cxx = {{"0", "false"}, {"1", "true"}};
  return p;
}

TemplateParam widthsParam() {
  TemplateParam p;
  p.name = "widths";
  p.tag = "k";
  p.digitSet = true;
  return p;
}

TemplateParam codebookParam() {
  return enumParam("codebook", "", {{"3inst", "0"}, {"mcg", "1"}, {"mul1", "2"}});
}
TemplateParam storageParam(std::string name, std::string tag) {
  return enumParam(std::move(name), std::move(tag),
                   {{"f32", "0"}, {"f16", "1"}, {"bf16", "2"}});
}
/// How a split GEMV sums its units (templates/fixed_point.cuh): f32 as
/// before; fixed = exact int64 sums of per-unit fixed-point partials, fp32
/// out; fixed_out = the same sums written as int64 (for an int64 all-reduce).
TemplateParam sumParam() {
  TemplateParam p = enumParam("sum", "sum",
                              {{"f32", "0"}, {"fixed", "1"}, {"fixed_out", "2"}});
  p.defaultValue = "f32";
  return p;
}
/// dense_gemv: rows per warp when the grid gives a block more rows than
/// warps (dense_gemv_abi.h), and how weights are loaded.
TemplateParam rowsParam() {
  TemplateParam p = intParam("rows", "r", {"1", "2", "4"});
  p.defaultValue = "1";
  return p;
}
TemplateParam loadsParam() {
  TemplateParam p = enumParam("loads", "", {{"cached", "0"}, {"stream", "1"}});
  p.defaultValue = "cached";
  return p;
}
/// The KV cache's storage form (templates/kv_cache.cuh, glmc compile
/// --kv-dtype f32|bf16|fp8): the families that write or read a latent
/// cache or index-key cache. f32 is the default, so those kernels keep
/// their names.
TemplateParam kvParam() {
  TemplateParam p =
      enumParam("kv", "kv", {{"f32", "0"}, {"bf16", "1"}, {"e4m3", "2"}});
  p.defaultValue = "f32";
  return p;
}
TemplateParam threadsParam(std::vector<std::string> allowed) {
  return intParam("threads", "t", std::move(allowed));
}

FamilyInfo family(std::string name, std::string function,
                  std::vector<TemplateParam> params,
                  std::string threads = "threads") {
  FamilyInfo f;
  f.family = name;
  f.header = name + ".cuh";
  f.function = std::move(function);
  std::string upper = name;
  for (char &c : upper)
    c = char(std::toupper(static_cast<unsigned char>(c)));
  f.paramsMacro = "GLM_" + upper + "_PARAMS";
  f.argsMacro = "GLM_" + upper + "_ARGS";
  f.params = std::move(params);
  f.threadsParam = std::move(threads);
  return f;
}

/// The spec's value of `p`, or its default when the spec leaves it out.
const std::string &argValue(const KernelSpec &spec, const TemplateParam &p) {
  auto it = spec.args.find(p.name);
  return it == spec.args.end() ? p.defaultValue : it->second;
}

} // namespace

std::string macroBody(const std::string &text, const std::string &macro) {
  const std::string key = "#define " + macro;
  size_t at = text.find(key);
  if (at == std::string::npos)
    return "";
  at += key.size();
  std::string body;
  // The definition runs to the first line that does not end in '\'.
  while (at < text.size()) {
    size_t eol = text.find('\n', at);
    if (eol == std::string::npos)
      eol = text.size();
    std::string line = text.substr(at, eol - at);
    bool cont = !line.empty() && line.back() == '\\';
    if (cont)
      line.pop_back();
    body += line + " ";
    at = eol + 1;
    if (!cont)
      break;
  }
  return body;
}

namespace {

/// The parameter names listed by `#define MACRO a, b, c` in `text`.
std::vector<std::string> macroNames(const std::string &text,
                                    const std::string &macro) {
  const std::string body = macroBody(text, macro);
  std::vector<std::string> names;
  std::stringstream ss(body);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t");
    size_t e = item.find_last_not_of(" \t");
    if (b != std::string::npos)
      names.push_back(item.substr(b, e - b + 1));
  }
  return names;
}

std::vector<FamilyInfo> buildFamilies() {
  const std::vector<std::string> batch = range(1, 8);
  std::vector<FamilyInfo> f;
  f.push_back(family("expert_gemv_trellis", "glm::expertGemvTrellis",
                     {widthsParam(), codebookParam(), boolParam("e4m3"),
                      intParam("batch", "b", batch),
                      storageParam("sv", "sv"), threadsParam({"128", "256"})}));
  // The MoE decode step in two launches (stage gu, then down) over one
  // parameter list; see moe_trellis.cuh for the ABI and table layouts.
  f.push_back(family("moe_trellis", "glm::moeTrellis",
                     {widthsParam(), codebookParam(), boolParam("e4m3"),
                      intParam("batch", "b", batch),
                      storageParam("sv", "sv"),
                      enumParam("stage", "",
                                {{"gu", "0"},
                                 {"down", "1"},
                                 {"gu_persist", "2"},
                                 {"down_persist", "3"}}),
                      intParam("pipe", "p", {"0", "2", "3", "4", "6"}),
                      intParam("minblocks", "m", {"0", "2", "3", "4", "5",
                                                  "6", "8", "12", "16"}),
                      sumParam(), threadsParam({"32", "64", "128", "256"})}));
  f.back().minBlocksParam = "minblocks";
  f.push_back(family("moe_reduce", "glm::moeReduce",
                     {threadsParam({"128", "256", "512"})}));
  f.push_back(family("dense_gemv", "glm::denseGemv",
                     {enumParam("format", "",
                                {{"bf16", "0"}, {"fp8_block", "1"},
                                 {"fp8_row", "2"}, {"mxfp8", "3"}}),
                      enumParam("scale", "s",
                                {{"none", "0"}, {"f32", "0"}, {"f16", "1"},
                                 {"bf16", "2"}}),
                      intParam("batch", "b", batch), sumParam(),
                      rowsParam(), loadsParam(),
                      threadsParam({"128", "256"})}));
  f.push_back(family("dense_gemv_f32", "glm::denseGemvF32",
                     {enumParam("out", "o", {{"f32", "0"}, {"f64", "1"}}),
                      threadsParam({"128", "256"})}));
  f.push_back(family("dense_gemv_trellis", "glm::denseGemvTrellis",
                     {intParam("K", "k", range(1, 8)), codebookParam(),
                      boolParam("e4m3"), intParam("batch", "b", batch),
                      threadsParam({"128", "256"})}));
  // Dense trellis decode GEMV, split-k over one-warp items with a fixed-
  // order reduction; see dense_trellis.cuh for the ABI.
  f.push_back(family("dense_trellis", "glm::denseTrellis",
                     {intParam("K", "k", range(1, 8)), codebookParam(),
                      boolParam("e4m3"), intParam("batch", "b", batch),
                      intParam("pipe", "p", {"0", "2", "3", "4", "6"}),
                      intParam("minblocks", "m",
                               {"0", "2", "3", "4", "6", "8", "12", "16"}),
                      sumParam(), threadsParam({"32", "64", "128", "256"})}));
  f.back().minBlocksParam = "minblocks";
  f.push_back(family("hadamard128", "glm::hadamard128",
                     {storageParam("vt", "v"), threadsParam({"128", "256"})}));
  f.push_back(family("rms_norm", "glm::rmsNorm",
                     {storageParam("wt", "w"),
                      threadsParam({"256", "512", "1024"})}));
  f.push_back(family("rope", "glm::rope",
                     {intParam("rope_dim", "d", {"16", "32", "64", "128"})},
                     /*threads=*/""));
  f.push_back(family("embed", "glm::embed",
                     {enumParam("format", "",
                                {{"f32", "0"}, {"f16", "1"}, {"bf16", "2"},
                                 {"fp8_row", "3"}}),
                      threadsParam({"128", "256"})}));
  f.push_back(family("router", "glm::router",
                     {intParam("experts", "e",
                               {"4", "8", "16", "32", "64", "128", "256",
                                "288", "384", "512"}),
                      intParam("topk", "k", range(1, 16)),
                      threadsParam({"128", "256", "512"})}));
  f.push_back(family("mla_decode", "glm::mlaDecode",
                     {intParam("lora", "l", {"32", "64", "128", "256", "512"}),
                      intParam("rope", "r", {"16", "32", "64"}),
                      enumParam("kv", "kv", {{"bf16", "0"}, {"e4m3", "1"}}),
                      intParam("heads", "h", {"1", "2", "4", "8", "16"}),
                      threadsParam({"128", "256"})}));
  f.push_back(family("indexer_scores", "glm::indexerScores",
                     {intParam("head_dim", "d", {"32", "64", "128"}),
                      intParam("n_heads", "h",
                               {"1", "2", "4", "8", "16", "32", "64"}),
                      storageParam("kt", "k"), threadsParam({"128", "256"})}));
  f.push_back(family("topk", "glm::topkSelect",
                     {threadsParam({"256", "512", "1024"})}));
  f.push_back(family("argmax", "glm::argmax",
                     {threadsParam({"256", "512", "1024"})}));
  // Prefill GEMM on trellis weights (tensor cores), xh fp32 or fp16;
  // block tile bm tokens x threads output columns.
  f.push_back(family("gemm_trellis", "glm::gemmTrellis",
                     {intParam("K", "k", range(1, 8)), codebookParam(),
                      boolParam("e4m3"),
                      enumParam("xt", "x", {{"f32", "0"}, {"f16", "1"}}),
                      intParam("bm", "m", {"64", "128"}),
                      threadsParam({"128", "256"})}));
  // Prefill GEMM on the BF16 and FP8 dense formats (tensor cores, x as
  // bf16 hi + mid + lo or fp16 hi + lo): dense_gemv's runtime parameters, so
  // a plan swaps one for the other keeping its arguments; format and scale
  // as dense_gemv's. Block tile bm tokens x 64 * threads / bm outputs
  // (gemm_dense_abi.h).
  f.push_back(family("gemm_dense", "glm::gemmDense",
                     {enumParam("format", "",
                                {{"bf16", "0"}, {"fp8_block", "1"},
                                 {"fp8_row", "2"}, {"mxfp8", "3"}}),
                      enumParam("scale", "s",
                                {{"none", "0"}, {"f32", "0"}, {"f16", "1"},
                                 {"bf16", "2"}}),
                      intParam("bm", "m", {"64", "128"}),
                      threadsParam({"128", "256"})}));
  // Its grouped form: many expert halves (per-half widths) in one launch.
  // halves > 1: a block adds that many items (one expert row block's
  // halves) in registers and stores once (the MoE prefill's down GEMM).
  TemplateParam halves = intParam("halves", "h", range(1, 32));
  halves.defaultValue = "1";
  f.push_back(family("gemm_trellis_grouped", "glm::gemmTrellisGrouped",
                     {widthsParam(), codebookParam(), boolParam("e4m3"),
                      enumParam("xt", "x", {{"f32", "0"}, {"f16", "1"}}),
                      intParam("bm", "m", {"64", "96", "128"}), halves,
                      threadsParam({"128", "256"})}));
  // The CUDA executor's helper families (embedding, norms, stores, DSA,
  // absorbed MLA, routing, MoE glue, fills). Their only template parameter
  // is the block size; runtime parameters and launch shapes are the
  // executor's. Compiled with --fmad=false: their fp64 sums and fp32
  // products round exactly as the CPU twins (runtime/twins/) do.
  {
    const std::vector<std::string> any = {"128", "256", "512", "1024"};
    std::vector<std::string> warps; // 32, 64, .., 1024
    for (int t = 32; t <= 1024; t += 32)
      warps.push_back(std::to_string(t));
    const std::vector<std::string> upTo256(warps.begin(), warps.begin() + 8);
    const std::vector<std::string> pow2 = {"64", "128", "256", "512", "1024"};
    // `more`: template parameters before the block size (the template's
    // order), for the helpers that take any.
    auto helper = [&](std::string name, std::string fn,
                      std::vector<std::string> threads,
                      std::vector<TemplateParam> more = {}) {
      more.push_back(threadsParam(std::move(threads)));
      f.push_back(family(std::move(name), "glm::" + std::move(fn),
                         std::move(more)));
      f.back().nvrtcExtra = {"--fmad=false"};
    };
    // GLM-5.3-Flash's k-pool indexer: candidates of `pool` tokens (1: the
    // plain DSA indexer, whose kernel names and ABI stay as they were).
    TemplateParam pool = intParam("pool", "p", {"1", "2", "4", "8"});
    pool.defaultValue = "1";
    helper("embed_tokens", "embedTokens", any);
    helper("rms_norm_rows", "rmsNormRows", {"256", "512", "1024"});
    helper("add_rms_norm", "addRmsNorm", {"256", "512", "1024"});
    helper("rope_rows", "ropeRows", warps); // block = max(32, dim/2)
    // The cache writers and readers take the cache's storage form (kv).
    const TemplateParam kv = kvParam();
    helper("kv_store", "kvStore", pow2, {kv});
    helper("index_key_store", "indexKeyStore", pow2, {kv});
    helper("dsa_iota", "dsaIota", any);
    helper("indexer_scores_ctx", "indexerScoresCtx", any, {pool, kv});
    // The plain indexer's scores of a prefill chunk on tensor cores (its
    // ABI; the query rows split fp16 hi + lo), 8 warps.
    helper("indexer_scores_mma", "indexerScoresMma", {"256"}, {kv});
    helper("dsa_select", "dsaSelect", {"256", "512", "1024"}, {pool});
    helper("mla_attn", "mlaAttn", any, {kv});
    helper("mla_qabs", "mlaQabs", upTo256);
    helper("mla_core", "mlaCore", {"256", "512", "1024"}, {kv});
    // mla_core split in three (mla_split_layout.cuh): the decode step's.
    helper("mla_scores", "mlaScores", {"256"}, {kv});
    helper("mla_softmax", "mlaSoftmax", {"256", "512", "1024"});
    helper("mla_values", "mlaValues", {"256"}, {kv});
    // A prefill chunk's attention on tensor cores: 64 threads per 16 heads,
    // vt = kvr / 16 column tiles (mla_prefill.cuh, mla_prefill_abi.h).
    // keys = rows16: the keys and values come from mla_rows16's fp16 rows
    // of the chunk's slot (mla_rows16_layout.cuh) instead of the cache.
    TemplateParam keys = enumParam("keys", "", {{"cache", "0"}, {"rows16", "1"}});
    keys.defaultValue = "cache";
    helper("mla_prefill", "mlaPrefill", {"64", "128", "256"},
           {kv, keys, intParam("vt", "v", range(1, 32))});
    // The chunk's selectable cache rows in those fp16 forms, once a chunk.
    helper("mla_rows16", "mlaRows16", {"256"}, {kv});
    // Its per-head projections (q_abs, the head outputs) as 3xTF32 GEMMs
    // over the chunk's rows: w = which side W's rows are (mla_proj.cuh), the
    // weight's stored dtype and scale form.
    helper("mla_proj", "mlaProj", {"128"},
           {enumParam("w", "", {{"kn", "0"}, {"nk", "1"}}),
            enumParam("dt", "", {{"f32", "0"}, {"f16", "1"}, {"bf16", "2"},
                                 {"e4m3", "3"}}),
            enumParam("sk", "", {{"none", "0"}, {"block", "1"}, {"row", "2"},
                                 {"mx", "3"}})});
    helper("mla_out", "mlaOut", {"128", "256", "512"});
    helper("transpose", "transpose", any);
    // The two helper GEMV sums that feed an all-reduce take a sum mode.
    for (const char *name : {"gemv_any", "reduce_units"}) {
      const std::string fn = name[0] == 'g' ? "glm::gemvAny" : "glm::reduceUnits";
      f.push_back(family(name, fn, {sumParam(), threadsParam(any)}));
      f.back().nvrtcExtra = {"--fmad=false"};
    }
    helper("route", "route", warps); // block = E rounded up to 32
    helper("swiglu", "swiglu", any);
    helper("hf_expert_act", "hfExpertAct", any);
    helper("hf_expert_down", "hfExpertDown", any);
    helper("exl3_expert_in", "exl3ExpertIn", any);
    helper("moe_exl3_in", "moeExl3In", any);
    helper("onehot", "onehot", any);
    helper("vocab_gather", "vocabGather", any);
    helper("sum_parts", "sumParts", any);
    helper("fill_random", "fillRandom", any);
    helper("fill_f32", "fillF32", any);
    helper("fixed_to_f32", "fixedToF32", any);
    // MoE prefill glue around gemm_trellis_grouped (exlr8): sort the
    // step's entries by expert and build the GEMM items (one block; its
    // per-warp tables are static shared memory, so at most 16 warps),
    // gather the fp16 GEMM input, the SwiGLU between the GEMMs, the
    // weighted sum per row. ABIs and the chain in moe_group.cuh.
    helper("moe_group", "moeGroup", {"256", "512"});
    helper("moe_gather", "moeGather", any);
    helper("moe_act", "moeAct", any);
    helper("moe_combine", "moeCombine", any);
    // GLM-5.3-Flash decode: the mHC site's pre and post sides (S streams),
    // one KDA token (ROWS state rows per thread, in registers), the k-pool
    // store. ABIs in their templates.
    // Streams 1..4 (GLM-5.3-Flash has 4): at 8 streams the H200 differed
    // from the twin in some Sinkhorn coefficients (tests/gpu
    // flash_decode_gpu_test, session 12), unexplained, so 8 is not offered.
    const TemplateParam streams = intParam("streams", "s", range(1, 4));
    helper("mhc_mix", "mhcMix", any, {streams});
    helper("mhc_post", "mhcPost", any, {streams});
    helper("mhc_head", "mhcHead", any, {streams}); // the streams' mean
    helper("kda_decode", "kdaDecode", {"128", "256", "512"},
           {intParam("rows", "r", {"4", "8", "16", "32", "64", "128"})});
    helper("kpool_store", "kpoolStore", pow2, {kv});
    // GLM-5.3-Flash prefill of one KDA layer over a prompt: kda_prep (the
    // per-token conv, norms and gates of kda_decode, written out), then
    // kda_chunk (the delta rule over chunks of C tokens on tensor cores,
    // tf32 or 3xTF32, and the gated norm, or kda_gnorm after it). ABIs in
    // their templates.
    helper("kda_prep", "kdaPrep", {"128", "256", "512"});
    // vsplit: blocks a head (v columns), for heads fewer than the SMs;
    // past 1 kda_gnorm applies the gated norm after it.
    TemplateParam vsplit = intParam("vsplit", "v", {"1", "2", "4"});
    vsplit.defaultValue = "1";
    helper("kda_chunk", "kdaChunk", {"128", "256"},
           {intParam("chunk", "c", {"16", "32"}),
            enumParam("mma", "", {{"tf32", "1"}, {"tf32x3", "3"}}), vsplit});
    helper("kda_gnorm", "kdaGnorm", {"128", "256"});
  }
  const auto &templates = embeddedTemplates();
  for (FamilyInfo &fi : f) {
    auto it = templates.find(fi.header);
    if (it != templates.end())
      fi.kernelParams = macroNames(it->second, fi.argsMacro);
  }
  return f;
}

std::string knownFamilies() {
  std::string s;
  for (const FamilyInfo &f : families())
    s += (s.empty() ? "" : ", ") + f.family;
  return s;
}

std::string joined(const std::vector<std::string> &v) {
  std::string s;
  for (const std::string &x : v)
    s += (s.empty() ? "" : "|") + x;
  return s;
}

/// "234" -> bit mask, or 0 when not ascending distinct digits 1..8.
int widthMask(const std::string &v) {
  if (v.empty() || v.size() > 8)
    return 0;
  int mask = 0, last = 0;
  for (char c : v) {
    int k = c - '0';
    if (k <= last || k > 8)
      return 0;
    mask |= 1 << k;
    last = k;
  }
  return mask;
}

std::string cxxArg(const TemplateParam &p, const std::string &v) {
  if (p.digitSet)
    return std::to_string(widthMask(v));
  auto it = p.cxx.find(v);
  return it == p.cxx.end() ? v : it->second;
}

std::string namePiece(const TemplateParam &p, const std::string &v) {
  if (p.boolean)
    return v == "1" ? p.tag : "no" + p.tag;
  return p.tag + v;
}

} // namespace

const std::vector<FamilyInfo> &families() {
  static const std::vector<FamilyInfo> f = buildFamilies();
  return f;
}

const FamilyInfo &familyInfo(const std::string &name) {
  for (const FamilyInfo &f : families())
    if (f.family == name)
      return f;
  rt::fail("codegen: unknown kernel family '", name, "' (known: ",
           knownFamilies(), ")");
}

void validateSpec(const KernelSpec &spec) {
  const FamilyInfo &f = familyInfo(spec.family);
  for (const TemplateParam &p : f.params) {
    rt::check(spec.args.count(p.name) || !p.defaultValue.empty(),
              "codegen: kernel family '", spec.family,
              "' needs template argument '", p.name, "'");
    const std::string &v = argValue(spec, p);
    if (p.digitSet) {
      rt::check(widthMask(v) != 0, "codegen: ", spec.family, ": ", p.name,
                " = '", v,
                "' is not a set of widths 1..8 in ascending digits (\"234\")");
    } else {
      rt::check(std::find(p.allowed.begin(), p.allowed.end(), v) !=
                    p.allowed.end(),
                "codegen: ", spec.family, ": ", p.name, " = '", v,
                "' is not supported (allowed: ", joined(p.allowed), ")");
    }
  }
  for (const auto &kv : spec.args) {
    bool known = std::any_of(f.params.begin(), f.params.end(),
                             [&](const TemplateParam &p) {
                               return p.name == kv.first;
                             });
    rt::check(known, "codegen: ", spec.family,
              " has no template parameter '", kv.first, "'");
  }
  if (spec.family == "dense_gemv" || spec.family == "gemm_dense") {
    const std::string &fmt = spec.args.at("format");
    const bool scaled = fmt == "fp8_block" || fmt == "fp8_row";
    rt::check(scaled == (spec.args.at("scale") != "none"), "codegen: ",
              spec.family, " format ", fmt,
              scaled ? " needs a scale dtype (f32|f16|bf16)"
                     : " takes scale = none");
  }
  if (spec.family == "gemm_trellis_grouped") {
    // XStage: a step's bm x 32 inputs in whole 8-value chunks a thread.
    const int bm = std::stoi(spec.args.at("bm"));
    const int threads = std::stoi(spec.args.at("threads"));
    rt::check(bm * 4 % threads == 0, "codegen: gemm_trellis_grouped bm ", bm,
              " with ", threads,
              " threads: bm x 32 inputs must split into whole 8-value chunks "
              "a thread (bm 96 takes 128 threads)");
  }
  if (spec.family == "dense_trellis") {
    // The per-warp cp.async ring is static shared memory (<= 32 KB).
    const int k = std::stoi(spec.args.at("K"));
    const int pipe = std::stoi(spec.args.at("pipe"));
    const int warps = std::stoi(spec.args.at("threads")) / 32;
    rt::check(warps * pipe * 256 * k <= 32768, "codegen: dense_trellis K", k,
              " pipe ", pipe, " threads ", warps * 32,
              " needs a cp.async ring over 32 KB per block; use fewer pipe "
              "stages or threads");
  }
  for (const std::string &a : spec.archs)
    rt::check(a == "sm_90" || a == "sm_121" || a == "sm_120" ||
                  a == "sm_100" || a == "sm_89" || a == "sm_80",
              "codegen: unsupported arch '", a,
              "' (use sm_121 for DGX Spark, sm_90 for Hopper)");
}

std::string kernelName(const KernelSpec &spec) {
  validateSpec(spec);
  const FamilyInfo &f = familyInfo(spec.family);
  std::string name = "glm_" + f.family;
  for (const TemplateParam &p : f.params)
    if (p.defaultValue.empty() || argValue(spec, p) != p.defaultValue)
      name += "_" + namePiece(p, argValue(spec, p));
  return name;
}

std::string generateSource(const KernelSpec &spec) {
  const std::string name = kernelName(spec); // validates
  const FamilyInfo &f = familyInfo(spec.family);
  std::string targs;
  for (const TemplateParam &p : f.params)
    targs += (targs.empty() ? "" : ", ") + cxxArg(p, argValue(spec, p));
  std::ostringstream os;
  os << "// " << name << ": generated by glmc codegen from template "
     << f.header << ".\n// Template arguments:";
  for (const TemplateParam &p : f.params)
    os << " " << p.name << "=" << argValue(spec, p);
  // The family's header first: nvrtcOptionsFor reads it as the unit's family.
  os << "\n#include \"" << f.header
     << "\"\n#include \"grid_dependency.cuh\"\n\n";
  os << "extern \"C\" __global__ void";
  if (!f.threadsParam.empty()) {
    os << " __launch_bounds__(" << spec.args.at(f.threadsParam);
    if (!f.minBlocksParam.empty() && spec.args.at(f.minBlocksParam) != "0")
      os << ", " << spec.args.at(f.minBlocksParam);
    os << ")";
  }
  os << "\n" << name << "(" << f.paramsMacro << ") {\n";
  // Every kernel may be launched programmatically (grid_dependency.cuh).
  os << "  glm::programmaticEntry();\n";
  os << "  " << f.function << "<" << targs << ">(" << f.argsMacro << ");\n";
  os << "}\n";
  return os.str();
}

std::vector<std::string> nvrtcOptions() {
  std::vector<std::string> o = {"--std=c++17", "-DGLM_NVRTC=1"};
  // Experiments only (e.g. --Ofast-compile=min measured against the
  // default): space-separated options appended to every build. They are
  // part of the cache key and of the plan's recorded options.
  if (const char *extra = std::getenv("GLM_NVRTC_EXTRA_OPTIONS")) {
    std::istringstream is(extra);
    for (std::string w; is >> w;)
      o.push_back(w);
  }
  return o;
}

std::vector<std::string> nvrtcOptionsFor(const std::string &source) {
  std::vector<std::string> o = nvrtcOptions();
  // The unit's family: the template named by its first #include.
  const std::string key = "#include \"";
  const size_t at = source.find(key);
  if (at == std::string::npos)
    return o;
  const size_t b = at + key.size(), e = source.find('"', b);
  if (e == std::string::npos)
    return o;
  const std::string header = source.substr(b, e - b);
  for (const FamilyInfo &f : families())
    if (f.header == header) {
      o.insert(o.end(), f.nvrtcExtra.begin(), f.nvrtcExtra.end());
      break;
    }
  return o;
}

bool builtByThisCodegen(const glm::plan::KernelDef &k) {
  std::string archs;
  for (const glm::plan::KernelBinary &b : k.binaries)
    archs += (archs.empty() ? "" : ",") + b.arch;
  return k.cacheKey == cacheKey(k.source, k.nvrtcOptions, archs, nvrtcVersion());
}

std::string cacheKey(const std::string &source,
                     const std::vector<std::string> &options,
                     const std::string &arch, const std::string &nvrtcVer) {
  rt::Xxh64 h;
  auto add = [&](const std::string &s) {
    uint64_t n = s.size();
    h.update(&n, sizeof n); // length-prefixed: no ambiguity between fields
    h.update(s.data(), s.size());
  };
  add(source);
  for (const std::string &o : options)
    add(o);
  add(arch);
  add(nvrtcVer);
  // The embedded templates are part of what the source means.
  for (const auto &[file, text] : embeddedTemplates()) {
    add(file);
    add(text);
  }
  return rt::hex64(h.digest());
}

glm::plan::KernelDef buildKernel(const KernelSpec &spec, bool compile,
                                 const CompileOptions &opt) {
  glm::plan::KernelDef k;
  k.name = kernelName(spec);
  k.templateName = spec.family;
  k.templateArgs = spec.args;
  k.source = generateSource(spec);
  k.sourceHash = rt::hex64(rt::xxh64(k.source.data(), k.source.size()));
  k.nvrtcOptions = nvrtcOptionsFor(k.source);
  const FamilyInfo &f = familyInfo(spec.family);
  if (!f.threadsParam.empty())
    k.launch.blockX = uint32_t(std::stoul(spec.args.at(f.threadsParam)));
  else if (spec.family == "rope")
    k.launch.blockX = uint32_t(std::stoul(spec.args.at("rope_dim")) / 2);
  std::string keyArchs;
  for (const std::string &a : spec.archs)
    keyArchs += (keyArchs.empty() ? "" : ",") + a;
  k.cacheKey = cacheKey(k.source, k.nvrtcOptions, keyArchs, nvrtcVersion());
  if (compile && nvrtcAvailable())
    for (const std::string &arch : spec.archs) {
      CompiledKernel c = compileWithNvrtc(k.source, k.name, arch, opt);
      k.binaries.push_back({arch, std::move(c.ptx), std::move(c.cubin)});
    }
  return k;
}

} // namespace glm::codegen
