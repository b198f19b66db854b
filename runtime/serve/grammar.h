//===- grammar.h - grammar-constrained decoding: JSON and GLM tool calls --===//
//
// What `response_format` (json_object, json_schema) and a forced
// `tool_choice` (required, a named function) make the model's output be,
// enforced token by token: before each sampling step every token whose
// bytes would take the output out of the grammar's language gets logit
// -inf (runtime/gen/sampler.h's TokenConstraint hook).
//
// The recognizer is a byte-level pushdown automaton (a stack of frames: an
// object, an array, a string, a number, a literal set such as an enum or a
// markup tag), run as a small set of configurations so that `anyOf` needs
// no lookahead. Every configuration knows its distance: the fewest bytes
// that complete the output. That gives termination within the token budget:
// a token is allowed only if, after it, the distance plus the end token
// still fits the tokens left (every byte is a token of a byte-level BPE
// vocabulary, so a completion of d bytes takes at most d tokens). A random
// model therefore still ends with one complete, parseable value. Whitespace
// between JSON tokens is allowed in runs of at most kMaxWhitespaceRun bytes,
// numbers have at most 15 integer and 15 fraction digits and 3 exponent
// digits, containers nest at most kMaxNesting deep, and the output starts
// with its first JSON token (no leading white space) and ends with it.
//
// The spec (Grammar::fromJsonObject/fromSchema/fromTools) is canonical JSON
// text: rank 0 of a multi-process plan sends it with the request and every
// rank builds the same constraint from it, so all ranks mask alike.
//
// Thread-safety: Grammar and Vocabulary are immutable after construction;
// a Recognizer or a constraint belongs to one sequence.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/base/error.h"
#include "runtime/gen/sampler.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace glm::rt {

class Tokenizer;

namespace grammar {

using ojson = nlohmann::ordered_json;

constexpr int kMaxWhitespaceRun = 16; // bytes of insignificant white space
constexpr int kMaxNesting = 24;       // open objects/arrays (and calls)
constexpr int kMaxEnum = 64;          // enum values, properties, tools

/// A request the grammar cannot express: `path` is where in the request
/// (e.g. "response_format.json_schema.schema.properties.a"), `keyword` what.
class Unsupported : public Error {
public:
  Unsupported(const std::string &path, const std::string &keyword,
              const std::string &why);
  std::string path, keyword;
};

struct Node;
struct Tool;

/// A compiled output language. Immutable.
class Grammar {
public:
  /// Any one JSON object (response_format json_object).
  static std::string jsonObjectSpec();
  /// A JSON value valid against `schema` (response_format json_schema);
  /// throws Unsupported naming the first keyword outside the subset
  /// (type, properties, required, additionalProperties (bool), enum,
  /// const, items, minItems, maxItems, anyOf; title, description,
  /// default, examples, $schema, $id and $comment are annotations).
  /// `path` prefixes the paths in messages.
  static std::string jsonSchemaSpec(const ojson &schema,
                                    const std::string &path);
  /// One or more GLM tool calls (`parallel`: up to 16, else one) of the
  /// given tools (OpenAI function objects: name, parameters): the keys are
  /// the parameters' properties, the required ones all present, values of
  /// string properties raw text without '<', others JSON per the property
  /// schema (unsupported keywords there are not enforced). A function
  /// without properties is called without arguments.
  static std::string toolCallSpec(const ojson &functions, bool parallel);

  /// Compiles a spec made by the functions above; throws Unsupported.
  explicit Grammar(const std::string &spec);
  ~Grammar();

  const std::string &spec() const { return spec_; }

  // Internal, shared with the recognizer.
  std::vector<Node> nodes;
  std::vector<std::vector<std::string>> groups; // literal sets
  std::vector<Tool> tools;
  int root = -1;       // JSON mode: the value's node; -1: tool calls
  int maxCalls = 1;    // tool mode
  bool noLt = false;   // tool mode: no '<' in JSON strings of arguments
  int namesGroup = -1; // tool names
  int64_t minCallLen = 0;

private:
  std::string spec_;
};

/// One configuration of the pushdown automaton (internal).
struct Frame {
  uint8_t kind, phase;
  uint16_t aux;
  uint32_t node;
  uint64_t mask;
  bool operator==(const Frame &o) const {
    return kind == o.kind && phase == o.phase && aux == o.aux &&
           node == o.node && mask == o.mask;
  }
};
struct Config {
  std::vector<Frame> stack;
  uint8_t ws = 0; // white space bytes in a row
  bool operator==(const Config &o) const {
    return ws == o.ws && stack == o.stack;
  }
};

/// The byte-level recognizer of a grammar's language.
class Recognizer {
public:
  explicit Recognizer(std::shared_ptr<const Grammar> g);
  /// Feeds bytes; on a byte outside the language returns false and leaves
  /// the recognizer dead (every later feed fails).
  bool feed(std::string_view bytes);
  /// Fewest bytes that complete the output; 0: complete (the end may
  /// come); -1: dead.
  int64_t distance() const;
  bool complete() const { return distance() == 0; }
  bool dead() const { return configs_.empty(); }
  /// Identifies the state (equal keys: equal futures), for caches.
  std::string key() const;

private:
  friend class TokenMask;
  std::shared_ptr<const Grammar> g_;
  std::vector<Config> configs_;
};

/// A tokenizer's vocabulary as the masks see it: each token's bytes (the
/// text the server shows; special tokens only where they are GLM markup),
/// sorted so that tokens sharing a prefix share its recognizer steps.
class Vocabulary {
public:
  Vocabulary(const Tokenizer &tok, std::vector<int64_t> endIds);
  int64_t size() const { return int64_t(bytes_.size()); }
  const std::string &bytes(int64_t id) const { return bytes_[size_t(id)]; }
  bool isEnd(int64_t id) const;

  std::vector<std::string> bytes_; // per id; "" = never allowed
  std::vector<int32_t> sorted_;    // ids with bytes, by bytes
  std::vector<uint16_t> lcp_;      // common prefix with the previous one
  std::vector<int64_t> endIds_;
  size_t longest_ = 0;
};

/// Builds the constraints of one tokenizer (the vocabulary is made at the
/// first constrained request). Thread-safe.
class ConstraintBuilder {
public:
  ConstraintBuilder(const Tokenizer &tok, std::vector<int64_t> endIds);
  /// The factory SamplingParams::constraint takes, for a spec made by
  /// Grammar's functions; throws Unsupported / Error.
  std::function<std::unique_ptr<TokenConstraint>()>
  factory(const std::string &spec) const;
  std::shared_ptr<const Vocabulary> vocabulary() const;

private:
  const Tokenizer &tok_;
  std::vector<int64_t> endIds_;
  mutable std::once_flag once_;
  mutable std::shared_ptr<const Vocabulary> vocab_;
};

/// The TokenConstraint of one sequence (exposed for tests and the
/// mask-cost measurement).
std::unique_ptr<TokenConstraint>
makeConstraint(std::shared_ptr<const Grammar> g,
               std::shared_ptr<const Vocabulary> v);

} // namespace grammar
} // namespace glm::rt
