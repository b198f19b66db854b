//===- tokenizer.h - byte-level BPE from a Hugging Face tokenizer.json ----===//
//
// Encodes and decodes exactly as the `tokenizers` library does for byte-level
// BPE files (GPT-2, Llama-3 and GLM families): added/special tokens are split
// out first (leftmost-longest), the pre-tokenizer splits the rest (Split regex
// with Unicode classes, ByteLevel), BPE merges by rank, and the ByteLevel
// decoder maps characters back to bytes. Unsupported features (normalizers,
// other models) are refused at load time with a message, never approximated.
// Thread-safe after construction (encode/decode may run concurrently).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/serve/regex.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace glm::rt {

class Tokenizer {
public:
  /// Ids above this are refused when the model's vocabulary is not known:
  /// far above any real tokenizer (GLM-5.3: 154,880) and small enough that
  /// the id -> token table stays a few hundred MB at most.
  static constexpr int64_t kMaxIdsWithoutModel = int64_t(1) << 24;

  /// Reads a tokenizer.json file; errors name the file and the field.
  /// `modelVocab` (config.json's vocab_size, 0 = unknown) bounds every id:
  /// a token id outside [0, modelVocab) is refused naming the token.
  static std::unique_ptr<Tokenizer> fromFile(const std::string &path,
                                             int64_t modelVocab = 0);
  /// Parses tokenizer.json text; `name` is used in error messages.
  static std::unique_ptr<Tokenizer> fromJson(const std::string &text,
                                             const std::string &name,
                                             int64_t modelVocab = 0);

  /// Token ids of text (added and special tokens in the text are recognised;
  /// no BOS/EOS is added: chat templates write those).
  std::vector<int32_t> encode(std::string_view text) const;
  /// Text of ids as `tokenizers` decodes it (invalid UTF-8 -> U+FFFD).
  std::string decode(const std::vector<int32_t> &ids,
                     bool skipSpecial = false) const;
  /// Raw bytes one token stands for (streaming decoders join these and emit
  /// complete UTF-8 only). Empty for unknown ids.
  std::string tokenBytes(int32_t id) const;

  /// Id of a token string (added tokens first), or -1.
  int32_t tokenId(std::string_view token) const;
  /// The token string of an id ("" when unknown).
  std::string tokenString(int32_t id) const;
  bool isSpecial(int32_t id) const;
  /// Ids are 0..vocabSize()-1: the model's vocab_size when fromFile/fromJson
  /// got it, else one past the largest id of the file.
  int32_t vocabSize() const { return vocabSize_; }

private:
  struct AddedToken {
    int32_t id;
    std::string content;
    bool special, lstrip, rstrip, singleWord, normalized;
  };
  struct PreStep {
    enum Kind { Split, ByteLevel } kind;
    std::shared_ptr<Regex> regex;
    std::string literal; // Split with a String pattern
    std::string behavior = "Isolated";
    bool invert = false;
    bool addPrefixSpace = false;
  };
  struct Segment {
    std::string text;
    int32_t added; // -1: ordinary text
  };

  void splitAdded(std::vector<Segment> &segs, bool normalizedSet) const;
  void preTokenize(const std::string &text,
                   std::vector<std::string> &pieces) const;
  void bpe(const std::string &piece, std::vector<int32_t> &out) const;
  void splitWith(const PreStep &step, const std::string &s,
                 std::vector<std::string> &out) const;

  std::string name_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> idToToken_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::vector<AddedToken> added_;
  std::unordered_map<std::string, int32_t> addedByContent_;
  std::unordered_map<int32_t, size_t> addedById_;
  std::vector<PreStep> pre_;
  bool byteLevel_ = false;   // pre-tokenizer maps bytes to characters
  bool byteDecoder_ = false; // decoder is ByteLevel
  bool ignoreMerges_ = false;
  int32_t unkId_ = -1;
  bool byteFallback_ = false;
  int32_t vocabSize_ = 0;

  mutable std::mutex cacheMutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

/// The GPT-2 byte -> character map used by ByteLevel (byte b is shown as a
/// printable character so every token is valid text).
char32_t byteToChar(uint8_t b);
/// Inverse of byteToChar; -1 for characters outside the map.
int charToByte(char32_t c);

} // namespace glm::rt
