//===- pack_checks.h - checks the pack layouts share (private) ------------===//
//
// What verify() of every layout (and the cpu load path, where it is cheap)
// applies to bytes the format itself does not checksum: value checks of
// tensors stored as plain floats (norm weights, biases: finite and in a
// plausible range), exlr8's hidden-side signs (exactly +-1 in their
// encoding), and the coverage bookkeeping of safetensors files (the header
// is structure, the gaps between tensors are padding no reader uses).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/formats/pack.h"
#include "runtime/formats/safetensors.h"

#include <string>

namespace glm::rt {

/// Checks the values of a tensor stored without a checksum, by what its HF
/// name says it is: "" when plausible, else a sentence naming the first bad
/// element and what is allowed. Norm weights and biases must be finite and
/// within +-kMaxNormValue (a damaged exponent byte lands far outside);
/// other plain tensors finite and within +-kMaxPlainValue.
std::string checkPlainValues(const std::string &hfName, const TensorView &t);

/// exlr8 signs.in / signs.out: every element exactly +1 or -1 in its
/// encoding (a float dtype: the exact bit patterns of +-1.0; an integer
/// dtype: 1 or -1). "" when so, else a sentence naming the first other one.
std::string checkSigns(const TensorView &t);

/// Records a safetensors file's header as structure (it was parsed and
/// every entry checked at open) and the bytes of its data section that no
/// tensor covers (alignment padding, `__pad.*` entries) as padding.
void coverSafetensorsLayout(VerifyReport &rep, const std::string &rel,
                            const SafetensorsFile &f);

/// The largest magnitude accepted for a norm weight or bias, and for any
/// other tensor stored as plain floats.
inline constexpr double kMaxNormValue = 1024;
inline constexpr double kMaxPlainValue = 65504; // the largest fp16
/// KDA's A_log: the forget gate multiplies by exp(A_log), so beyond +-20 the
/// rate under/overflows what an fp32 gate can use (trained values are
/// log(1..16)).
inline constexpr double kMaxALogValue = 20;

/// Tensors a release ships beside the causal LM that glmc recognises by
/// name and does not run yet: the vision tower (model.visual.*) and the MTP
/// layers (layer index num_hidden_layers ..). Readers skip them in the
/// architecture check and say so in VerifyReport::notes.
enum class ExtraTensor : uint8_t { None, Vision, Mtp };
ExtraTensor classifyExtraTensor(const ModelConfig &cfg,
                                const std::string &hfName, int layer);

/// The MTP layers a pack stores (any tensor of expectedMtpTensors for layer
/// num_hidden_layers + m present) must be whole: every tensor of that layer
/// present with the shape config.json implies (and the optional own
/// embed_tokens / shared_head.head, when stored, too). A pack that stores no
/// MTP layer passes. Adds issues to `rep`.
void checkMtpLayers(const Pack &pack, const ModelConfig &cfg,
                    VerifyReport &rep);

/// Counts extra tensors and adds one note per kind to a report.
struct ExtraTensorNotes {
  int64_t vision = 0, mtp = 0;
  std::vector<int64_t> mtpLayers;
  /// Classifies and counts; true when `hfName` is an extra tensor.
  bool add(const ModelConfig &cfg, const std::string &hfName, int layer);
  void report(VerifyReport &rep) const;
};

} // namespace glm::rt
