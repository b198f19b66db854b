//===- json_bounds.h - JSON nesting limits for untrusted text -------------===//
//
// nlohmann's parser and destructor do not recurse, but everything that walks
// the result does (template values, tojson, replies, tokenizer configs). So
// text from a client or a pack is refused past kMaxJsonDepth levels before
// it is parsed: one request nested 100,000 deep must not crash the server.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace glm::rt {

/// Deepest nesting accepted. Real tool schemas and tokenizer configs nest a
/// few levels.
constexpr int kMaxJsonDepth = 64;
/// Brackets/braces open at the deepest point of `text` outside strings (a
/// scan, no recursion; malformed text is left to the parser).
int jsonNestingDepth(const std::string &text);
/// Throws Error "<what> nests N levels deep (at most 64)<advice>" when `text`
/// nests deeper than kMaxJsonDepth.
void checkJsonDepth(const std::string &text, const std::string &what,
                    const std::string &advice = "");
/// ordered_json::parse after checkJsonDepth; else whatever parse throws.
nlohmann::ordered_json parseJsonBounded(const std::string &text,
                                        const std::string &what);

} // namespace glm::rt
