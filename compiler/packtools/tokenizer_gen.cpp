//===- tokenizer_gen.cpp - tokenizer and template files of synthetic models
//===//
//
// The tiny tokenizer is learned here, deterministically, from a built-in text:
// byte-level BPE over the GPT-2 byte-to-unicode alphabet, words split by an
// ASCII rendering of the GLM-4 pre-tokenizer regex (the tokenizer.json
// carries the real Unicode regex), merges chosen by highest pair count with
// ties broken by the smaller pair. Same code, same bytes, every run.
//
//===----------------------------------------------------------------------===//
#include "compiler/packtools/tokenizer_gen.h"
#include "runtime/base/error.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <map>
#include <set>

namespace glmc {

using glm::rt::check;
using glm::rt::fail;
using ojson = nlohmann::ordered_json;

namespace {

/// GLM-4's split pattern (tiktoken pat_str of ChatGLM4Tokenizer, also the
/// Split pre-tokenizer of GLM-4.5+ tokenizer.json files).
const char *const kGlmSplitRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/// The training text: plain English and a little code, so merges cover
/// common words, indentation and punctuation runs.
const char *const kCorpus = R"CORPUS(
The quick brown fox jumps over the lazy dog. The dog did not mind, and the fox
went on with the rest of the day. In the morning the weather was clear and the
roads were quiet; by the evening the town was full of people who wanted to talk
about the game, the market, the new bridge and the price of bread.
A model reads a sequence of tokens and predicts the next one. When the context
is long, the attention layer selects the most relevant positions and ignores the
rest. The router of a mixture of experts sends each token to a few experts, and
the shared expert sees every token. Quantization stores each weight in a few
bits; the decoder rebuilds the values from a small codebook and a trellis state.
Please write a short answer. What is the weather in Paris today? It is sunny
and warm, with a light wind from the west. Tomorrow there will be some rain in
the afternoon, so take an umbrella if you go out. Thank you for asking!
The user asked the assistant to call a tool with two arguments: the city and
the number of days. The tool returned a list of values, and the assistant then
wrote the final answer in one sentence. This is how a tool call works in the
chat template: the name, then each key and its value, then the end tag.
def forward(self, hidden_states, position_ids=None):
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    hidden_states = self.self_attn(hidden_states, position_ids)
    hidden_states = residual + hidden_states
    return hidden_states

for (int i = 0; i < n; ++i) {
  if (values[i] > max_value)
    max_value = values[i];
}
return max_value;

class Tokenizer:
    def __init__(self, vocab, merges):
        self.vocab = vocab
        self.merges = merges

    def encode(self, text):
        tokens = []
        for word in self.split(text):
            tokens.extend(self.bpe(word))
        return tokens

{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}
import numpy as np
x = np.zeros((128, 256), dtype=np.float32)
print("hello world", x.shape, 2024, 3.14159)
There are 12 months in a year, 7 days in a week, 24 hours in a day and 60
minutes in an hour. The answer is 42. The first number is 1000 and the second
number is 2048; their sum is 3048 and their product is 2048000.
)CORPUS";

/// GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for
/// themselves, the rest move to U+0100 onwards in byte order.
std::vector<std::string> byteAlphabet() {
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
           (b >= 0xAE && b <= 0xFF);
  };
  auto utf8 = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += (char)cp;
    } else {
      s += (char)(0xC0 | (cp >> 6));
      s += (char)(0x80 | (cp & 0x3F));
    }
    return s;
  };
  std::vector<std::string> out(256);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b)
    out[b] = utf8(printable(b) ? (uint32_t)b : next++);
  return out;
}

/// ASCII rendering of kGlmSplitRegex (the training text is ASCII).
std::vector<std::string> splitWords(const std::string &t) {
  std::vector<std::string> out;
  size_t i = 0, n = t.size();
  auto isL = [](char c) { return std::isalpha((unsigned char)c) != 0; };
  auto isN = [](char c) { return std::isdigit((unsigned char)c) != 0; };
  auto isS = [](char c) { return std::isspace((unsigned char)c) != 0; };
  auto isNl = [](char c) { return c == '\r' || c == '\n'; };
  while (i < n) {
    size_t s = i;
    char c = t[i];
    if (c == '\'') {
      static const char *const kSuffix[] = {"ll", "re", "ve", "s",
                                            "t",  "m",  "d"};
      bool matched = false;
      for (const char *suf : kSuffix) {
        size_t k = std::char_traits<char>::length(suf);
        bool ok = i + 1 + k <= n;
        for (size_t j = 0; ok && j < k; ++j)
          ok = std::tolower((unsigned char)t[i + 1 + j]) == suf[j];
        if (ok) {
          out.push_back(t.substr(i, 1 + k));
          i += 1 + k;
          matched = true;
          break;
        }
      }
      if (matched)
        continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (isL(c) ||
        (!isNl(c) && !isL(c) && !isN(c) && i + 1 < n && isL(t[i + 1]))) {
      ++i;
      while (i < n && isL(t[i]))
        ++i;
      out.push_back(t.substr(s, i - s));
      continue;
    }
    // \p{N}{1,3}
    if (isN(c)) {
      while (i < n && isN(t[i]) && i - s < 3)
        ++i;
      out.push_back(t.substr(s, i - s));
      continue;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*"
    size_t j = i + (c == ' ' ? 1 : 0);
    if (j < n && !isS(t[j]) && !isL(t[j]) && !isN(t[j])) {
      i = j;
      while (i < n && !isS(t[i]) && !isL(t[i]) && !isN(t[i]))
        ++i;
      while (i < n && isNl(t[i]))
        ++i;
      out.push_back(t.substr(s, i - s));
      continue;
    }
    // \s*[\r\n]+ | \s+(?!\S) | \s+
    size_t e = i;
    while (e < n && isS(t[e]))
      ++e;
    size_t lastNl = std::string::npos;
    for (size_t k = i; k < e; ++k)
      if (isNl(t[k]))
        lastNl = k;
    if (lastNl != std::string::npos) {
      i = lastNl + 1;
    } else if (e < n && e - i > 1) {
      i = e - 1; // leave one space to prefix the next word
    } else {
      i = e;
    }
    out.push_back(t.substr(s, i - s));
  }
  return out;
}

struct Bpe {
  std::vector<std::string> vocab; // id -> token
  std::vector<std::pair<std::string, std::string>> merges;
};

const Bpe &tinyBpe() {
  static const Bpe bpe = [] {
    Bpe b;
    std::vector<std::string> alpha = byteAlphabet();
    b.vocab = alpha;
    std::set<std::string> known(alpha.begin(), alpha.end());
    std::map<std::string, long> counts;
    for (const std::string &w : splitWords(kCorpus))
      ++counts[w];
    std::vector<std::pair<std::vector<std::string>, long>> words;
    for (const auto &kv : counts) {
      std::vector<std::string> syms;
      for (unsigned char ch : kv.first)
        syms.push_back(alpha[ch]);
      words.push_back({std::move(syms), kv.second});
    }
    while ((int64_t)b.vocab.size() < kTinyBpeVocab) {
      std::map<std::pair<std::string, std::string>, long> pairs;
      for (const auto &w : words)
        for (size_t i = 0; i + 1 < w.first.size(); ++i)
          pairs[{w.first[i], w.first[i + 1]}] += w.second;
      check(!pairs.empty(), "tokenizer_gen: the built-in text supports only ",
            b.vocab.size(), " BPE tokens");
      auto best = pairs.begin();
      for (auto it = pairs.begin(); it != pairs.end(); ++it)
        if (it->second > best->second)
          best = it; // map order breaks ties: the smaller pair wins
      const auto pr = best->first;
      std::string merged = pr.first + pr.second;
      b.merges.push_back(pr);
      if (known.insert(merged).second)
        b.vocab.push_back(merged);
      for (auto &w : words) {
        std::vector<std::string> next;
        for (size_t i = 0; i < w.first.size(); ++i) {
          if (i + 1 < w.first.size() && w.first[i] == pr.first &&
              w.first[i + 1] == pr.second) {
            next.push_back(merged);
            ++i;
          } else {
            next.push_back(w.first[i]);
          }
        }
        w.first = std::move(next);
      }
    }
    return b;
  }();
  return bpe;
}

} // namespace

const std::vector<std::string> &glmSpecialTokens() {
  static const std::vector<std::string> kTokens = {
      "<|endoftext|>",   "[MASK]",          "[gMASK]",
      "[sMASK]",         "<sop>",           "<eop>",
      "<|system|>",      "<|user|>",        "<|assistant|>",
      "<|observation|>", "<think>",         "</think>",
      "<tool_call>",     "</tool_call>",    "<arg_key>",
      "</arg_key>",      "<arg_value>",     "</arg_value>",
      "<tool_response>", "</tool_response>"};
  return kTokens;
}

std::vector<std::pair<std::string, int64_t>>
specialTokenIds(const std::string &preset) {
  std::vector<std::pair<std::string, int64_t>> out;
  const auto &toks = glmSpecialTokens();
  // GLM-5.3-Flash ships GLM-5.3's tokenizer; flash-tiny the tiny one.
  if (preset == "glm53" || preset == "flash") {
    // shared/specs/glm53-architecture.md §4: 154820..154829, <think> 154841,
    // </think> 154842. The tool tokens follow </think> in GLM-4.5's order
    // (<tool_call> </tool_call> <tool_response> </tool_response> <arg_key>
    // </arg_key> <arg_value> </arg_value>); UNSURE for GLM-5.3.
    const std::map<std::string, int64_t> ids = {
        {"<|endoftext|>", 154820},   {"[MASK]", 154821},
        {"[gMASK]", 154822},         {"[sMASK]", 154823},
        {"<sop>", 154824},           {"<eop>", 154825},
        {"<|system|>", 154826},      {"<|user|>", 154827},
        {"<|assistant|>", 154828},   {"<|observation|>", 154829},
        {"<think>", 154841},         {"</think>", 154842},
        {"<tool_call>", 154843},     {"</tool_call>", 154844},
        {"<tool_response>", 154845}, {"</tool_response>", 154846},
        {"<arg_key>", 154847},       {"</arg_key>", 154848},
        {"<arg_value>", 154849},     {"</arg_value>", 154850}};
    for (const auto &t : toks)
      out.push_back({t, ids.at(t)});
    return out;
  }
  check(preset == "tiny" || preset == "flash-tiny", "unknown preset \"",
        preset, "\" (expected tiny, glm53, flash-tiny or flash)");
  for (size_t i = 0; i < toks.size(); ++i)
    out.push_back({toks[i], kTinyBpeVocab + (int64_t)i});
  return out;
}

int64_t specialTokenId(const std::string &preset, const std::string &token) {
  for (const auto &kv : specialTokenIds(preset))
    if (kv.first == token)
      return kv.second;
  fail("no special token ", token, " in preset ", preset);
}

std::string tokenizerJson(const std::string &preset) {
  const Bpe &bpe = tinyBpe();
  ojson added = ojson::array();
  for (const auto &kv : specialTokenIds(preset))
    added.push_back({{"id", kv.second},
                     {"content", kv.first},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  ojson vocab = ojson::object();
  for (size_t i = 0; i < bpe.vocab.size(); ++i)
    vocab[bpe.vocab[i]] = i;
  ojson merges = ojson::array();
  for (const auto &m : bpe.merges) // byte-level tokens never hold a space
    merges.push_back(m.first + " " + m.second);
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", ojson::array({{{"type", "Split"},
                                       {"pattern", {{"Regex", kGlmSplitRegex}}},
                                       {"behavior", "Isolated"},
                                       {"invert", false}},
                                      {{"type", "ByteLevel"},
                                       {"add_prefix_space", false},
                                       {"trim_offsets", true},
                                       {"use_regex", false}}})}};
  j["post_processor"] = {{"type", "ByteLevel"},
                         {"add_prefix_space", true},
                         {"trim_offsets", false},
                         {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}};
  return j.dump(2) + "\n";
}

std::string tokenizerConfigJson(const std::string &preset) {
  ojson dec = ojson::object();
  std::vector<std::string> extra;
  for (const auto &kv : specialTokenIds(preset)) {
    dec[std::to_string(kv.second)] = {
        {"content", kv.first}, {"lstrip", false},      {"normalized", false},
        {"rstrip", false},     {"single_word", false}, {"special", true}};
    if (kv.first != "<|endoftext|>")
      extra.push_back(kv.first);
  }
  ojson j;
  j["added_tokens_decoder"] = dec;
  j["additional_special_tokens"] = extra;
  j["clean_up_tokenization_spaces"] = false;
  j["do_lower_case"] = false;
  j["eos_token"] = "<|endoftext|>";
  j["pad_token"] = "<|endoftext|>";
  j["model_max_length"] =
      preset == "glm53" || preset == "flash" ? 1048576 : 4096;
  j["padding_side"] = "left";
  j["remove_space"] = false;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  return j.dump(2) + "\n";
}

std::string generationConfigJson(const std::vector<int64_t> &eosIds,
                                 int64_t padId) {
  ojson j;
  j["_from_model_config"] = true;
  j["eos_token_id"] = eosIds;
  j["pad_token_id"] = padId;
  j["temperature"] = 1.0;
  j["top_p"] = 0.95;
  return j.dump(2) + "\n";
}

std::string chatTemplateJinja() {
  // GLM conventions (shared/specs/glm53-architecture.md §4): [gMASK]<sop>,
  // role tokens, <think>…</think>, tools under "# Tools", calls as
  // <tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>,
  // results under <|observation|><tool_response>…</tool_response>.
  return R"JINJA([gMASK]<sop>
{%- if tools -%}
<|system|>
# Tools

You may call one or more functions to assist with the user query.

Function signatures, one JSON object per line, within <tools></tools>:
<tools>
{% for tool in tools %}
{{ tool | tojson }}
{% endfor %}
</tools>

For each call, write the function name and every argument as:
<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>...</tool_call>
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'system' -%}
<|system|>{{ m.content }}
{%- elif m.role == 'user' -%}
<|user|>{{ m.content }}
{%- elif m.role == 'assistant' -%}
<|assistant|>
{%- if m.reasoning_content -%}
<think>{{ m.reasoning_content }}</think>
{%- else -%}
<think></think>
{%- endif -%}
{%- if m.content -%}
{{ m.content }}
{%- endif -%}
{%- if m.tool_calls -%}
{%- for tc in m.tool_calls -%}
{%- set fn = tc.function if tc.function is defined else tc -%}
<tool_call>{{ fn.name }}
{%- if fn.arguments is mapping -%}
{%- for k, v in fn.arguments.items() -%}
<arg_key>{{ k }}</arg_key><arg_value>{{ v if v is string else v | tojson }}</arg_value>
{%- endfor -%}
{%- else -%}
{{ fn.arguments }}
{%- endif -%}
</tool_call>
{%- endfor -%}
{%- endif -%}
{%- elif m.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}
<|observation|>
{%- endif -%}
<tool_response>{{ m.content }}</tool_response>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|assistant|>
{%- if enable_thinking is defined and not enable_thinking -%}
</think>
{%- else -%}
<think>
{%- endif -%}
{%- endif -%}
)JINJA";
}

} // namespace glmc
