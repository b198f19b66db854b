//===- helper_twins.cpp - twins of the helper kernel families
//-----------------===//
//
// The table of the executor's helper families and the device helpers their
// twins share (helper_twins.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/helper_twins.h"

#include "runtime/base/numeric.h"

#include <cmath>
#include <cstring>

namespace glm::rt::twins {

const TwinEntry kHelperTwins[] = {
    {"embed_tokens", embedTokensTwin},
    {"rms_norm_rows", rmsNormRowsTwin},
    {"add_rms_norm", addRmsNormTwin},
    {"rope_rows", ropeRowsTwin},
    {"kv_store", kvStoreTwin},
    {"index_key_store", indexKeyStoreTwin},
    {"dsa_iota", dsaIotaTwin},
    {"indexer_scores_ctx", indexerScoresCtxTwin},
    {"indexer_scores_mma", indexerScoresMmaTwin},
    {"dsa_select", dsaSelectTwin},
    {"mla_attn", mlaAttnTwin},
    {"mla_qabs", mlaQabsTwin},
    {"mla_core", mlaCoreTwin},
    {"mla_scores", mlaScoresTwin},
    {"mla_softmax", mlaSoftmaxTwin},
    {"mla_values", mlaValuesTwin},
    {"mla_prefill", mlaPrefillTwin},
    {"mla_rows16", mlaRows16Twin},
    {"mla_proj", mlaProjTwin},
    {"mla_out", mlaOutTwin},
    {"transpose", transposeTwin},
    {"gemv_any", gemvAnyTwin},
    {"reduce_units", reduceUnitsTwin},
    {"route", routeTwin},
    {"swiglu", swigluTwin},
    {"hf_expert_act", hfExpertActTwin},
    {"hf_expert_down", hfExpertDownTwin},
    {"exl3_expert_in", exl3ExpertInTwin},
    {"moe_exl3_in", moeExl3InTwin},
    {"onehot", onehotTwin},
    {"vocab_gather", vocabGatherTwin},
    {"sum_parts", sumPartsTwin},
    {"fill_random", fillRandomTwin},
    {"fill_f32", fillF32Twin},
    {"fixed_to_f32", fixedToF32Twin},
    {"moe_group", moeGroupTwin},
    {"moe_gather", moeGatherTwin},
    {"moe_act", moeActTwin},
    {"moe_combine", moeCombineTwin},
    {"mhc_mix", mhcMixTwin},
    {"mhc_post", mhcPostTwin},
    {"mhc_head", mhcHeadTwin},
    {"kda_decode", kdaDecodeTwin},
    {"kpool_store", kpoolStoreTwin},
    {"kda_prep", kdaPrepTwin},
    {"kda_chunk", kdaChunkTwin},
    {"kda_gnorm", kdaGnormTwin},
    {nullptr, nullptr},
};

namespace hx {

float ldAny(const void *p, int64_t i, int dt) {
  switch (dt) {
  case 0:
    return static_cast<const float *>(p)[i];
  case 1: {
    const float v = halfToFloat(static_cast<const uint16_t *>(p)[i]);
    return std::isnan(v) ? std::copysign(bitsToFloat(0x7fc00000u), v) : v;
  }
  case 2:
    return bf16ToFloat(static_cast<const uint16_t *>(p)[i]);
  default: {
    const float v = e4m3ToFloat(static_cast<const uint8_t *>(p)[i]);
    return std::isnan(v) ? std::copysign(bitsToFloat(0x7fc00000u), v) : v;
  }
  }
}

float e8m0Scale(uint8_t e) { return std::ldexp(1.0f, int(e) - 127); }

float ldWT(const void *w, int dt, const void *scale, int sk, int64_t o,
           int64_t i, int64_t in) {
  float v = ldAny(w, o * in + i, dt);
  if (sk == 1)
    v *= static_cast<const float *>(
        scale)[(o >> 7) * ((in + 127) >> 7) + (i >> 7)];
  else if (sk == 2)
    v *= static_cast<const float *>(scale)[o];
  else if (sk == 3)
    v *= e8m0Scale(
        static_cast<const uint8_t *>(scale)[o * (in / 32) + (i >> 5)]);
  return v;
}

bool vecOk(const void *w, int dt, int sk, int in) {
  const int eb = dt == 0 ? 4 : dt == 3 ? 1 : 2;
  return dt >= 0 && dt <= 3 && (dt < 3 ? sk == 0 : sk >= 1 && sk <= 3) &&
         (reinterpret_cast<uintptr_t>(w) & 15) == 0 && (in * eb) % 16 == 0 &&
         in % 32 == 0;
}

double blockSumD(std::vector<double> v) {
  for (size_t s = v.size() / 2; s > 0; s >>= 1)
    for (size_t t = 0; t < s; ++t)
      v[t] += v[t + s];
  return v.empty() ? 0.0 : v[0];
}

/// Butterfly over 32 lanes (offsets 16 .. 1): every lane the same value.
static double butterflyD(double *a) {
  double b[32];
  for (int o = 16; o > 0; o >>= 1) {
    for (int l = 0; l < 32; ++l)
      b[l] = a[l] + a[l ^ o];
    std::memcpy(a, b, sizeof b);
  }
  return a[0];
}

double blockSumFixedD(const std::vector<double> &v) {
  const size_t nw = v.size() / 32;
  double wsum[32] = {};
  for (size_t w = 0; w < nw; ++w) {
    double a[32];
    std::memcpy(a, v.data() + 32 * w, sizeof a);
    wsum[w] = butterflyD(a);
  }
  return butterflyD(wsum); // lanes past the last warp hold 0.0
}

float warpSumF(const float *lanes) {
  float a[32], b[32];
  std::memcpy(a, lanes, sizeof a);
  for (int o = 16; o > 0; o >>= 1) {
    for (int l = 0; l < 32; ++l)
      b[l] = a[l] + a[l ^ o];
    std::memcpy(a, b, sizeof b);
  }
  return a[0];
}

void ropePair(float *p, int i, int dim, int pos, double theta) {
  const double invFreq = std::pow(theta, -2.0 * (double)i / (double)dim);
  const double angle = (double)pos * invFreq;
  const double c = std::cos(angle), s = std::sin(angle);
  const double a = p[2 * i], bb = p[2 * i + 1];
  p[2 * i] = (float)(a * c - bb * s);
  p[2 * i + 1] = (float)(bb * c + a * s);
}

} // namespace hx
} // namespace glm::rt::twins
