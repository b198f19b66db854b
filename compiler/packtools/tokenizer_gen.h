//===- tokenizer_gen.h - tokenizer and template files of synthetic models -===//
//
// Private to glm_packtools (synth_hf.cpp and its tests). Builds a small
// byte-level BPE tokenizer.json that Hugging Face `tokenizers` loads (GPT-2
// byte-to-unicode alphabet, GLM-4 split regex, merges learned from a built-in
// English + code text), GLM special tokens, tokenizer_config.json,
// generation_config.json and a GLM-style chat_template.jinja.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace glmc {

/// The GLM special tokens in the order of their ids (<|endoftext|> first).
const std::vector<std::string> &glmSpecialTokens();

/// Tokens of the learned byte-level BPE vocabulary (256 bytes + merges) of
/// the tiny tokenizer; special tokens follow at ids kTinyBpeVocab...
constexpr int64_t kTinyBpeVocab = 476;

/// (token, id) of every special token: contiguous after the BPE vocabulary
/// for "tiny"; GLM-5.3's published ids for "glm53".
std::vector<std::pair<std::string, int64_t>>
specialTokenIds(const std::string &preset);
/// Id of one special token of a preset; throws Error when unknown.
int64_t specialTokenId(const std::string &preset, const std::string &token);

/// tokenizer.json text (the BPE model is the tiny one for every preset; the
/// special tokens take the preset's ids).
std::string tokenizerJson(const std::string &preset);
std::string tokenizerConfigJson(const std::string &preset);
std::string generationConfigJson(const std::vector<int64_t> &eosIds,
                                 int64_t padId);
std::string chatTemplateJinja();

} // namespace glmc
