//===- tokenizer.cpp - byte-level BPE from a Hugging Face tokenizer.json --===//
//
// The pipeline mirrors `tokenizers`: added-token split, pre-tokenizer steps,
// BPE with a rank-ordered merge queue (lowest rank first, leftmost on ties),
// ByteLevel decoding. Results of BPE are cached per pre-token.
//
//===----------------------------------------------------------------------===//
#include "runtime/serve/tokenizer.h"

#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/json_numbers.h"
#include "runtime/serve/json_bounds.h"
#include "runtime/serve/unicode.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <queue>
#include <sstream>

namespace glm::rt {

using json = nlohmann::json;

namespace {
struct ByteMap {
  char32_t toChar[256];
  std::unordered_map<char32_t, uint8_t> toByte;
  ByteMap() {
    // Printable Latin-1 bytes stand for themselves; the rest are shifted to
    // 256 + n in byte order (the GPT-2 convention).
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) ||
                  (b >= 174 && b <= 255);
      toChar[b] = keep ? char32_t(b) : char32_t(256 + n++);
      toByte[toChar[b]] = uint8_t(b);
    }
  }
};
const ByteMap &byteMap() {
  static const ByteMap m;
  return m;
}

const char *kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                           "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
} // namespace

char32_t byteToChar(uint8_t b) { return byteMap().toChar[b]; }
int charToByte(char32_t c) {
  auto it = byteMap().toByte.find(c);
  return it == byteMap().toByte.end() ? -1 : it->second;
}

std::unique_ptr<Tokenizer> Tokenizer::fromFile(const std::string &path,
                                               int64_t modelVocab) {
  check(std::filesystem::exists(path), path,
        ": cannot open the tokenizer file; the pack needs a "
        "tokenizer.json (or pass token ids instead of text)");
  return fromJson(readFileBounded(path, kMaxTokenizerBytes, "tokenizer.json"),
                  path, modelVocab);
}

static bool getBool(const json &j, const char *key, bool dflt) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? dflt : it->get<bool>();
}

std::unique_ptr<Tokenizer> Tokenizer::fromJson(const std::string &text,
                                               const std::string &name,
                                               int64_t modelVocab) {
  auto t = std::unique_ptr<Tokenizer>(new Tokenizer());
  t->name_ = name;
  json j;
  checkJsonDepth(text, name + ":", "; the tokenizer file is damaged");
  try {
    j = json::parse(text);
  } catch (const std::exception &e) {
    fail(name, ": not valid JSON (", e.what(), ")");
  }
  try {
    const json &model = j.at("model");
    std::string type = model.value("type", "BPE");
    check(type == "BPE", name, ": model type '", type,
          "' is not supported (only byte-level BPE)");
    check(!model.contains("dropout") || model["dropout"].is_null() ||
              model["dropout"].get<double>() == 0.0,
          name, ": BPE dropout is not supported at inference");
    auto noString = [&](const char *k) {
      check(!model.contains(k) || model[k].is_null() ||
                model[k].get<std::string>().empty(),
            name, ": BPE option '", k, "' is not supported");
    };
    noString("continuing_subword_prefix");
    noString("end_of_word_suffix");
    t->ignoreMerges_ = getBool(model, "ignore_merges", false);
    t->byteFallback_ = getBool(model, "byte_fallback", false);

    // Every id indexes the id -> token table: one outside the model's
    // vocabulary (or a non-integer, or one that does not fit 32 bits) would
    // be an out-of-bounds write or wrap to another token.
    const int64_t idLimit =
        modelVocab > 0 ? modelVocab : kMaxIdsWithoutModel;
    const std::string allowed =
        modelVocab > 0 ? "integers in 0.." + std::to_string(modelVocab - 1) +
                             " (the model's vocab_size is " +
                             std::to_string(modelVocab) + ")"
                       : "integers in 0.." + std::to_string(idLimit - 1);
    auto idOf = [&](const json &v, const char *what,
                    const std::string &token) {
      std::optional<int64_t> id = jsonIntIn(v, 0, idLimit - 1);
      check(id.has_value(), name, ": ", what, " '", token, "' has id ",
            v.dump(), "; token ids must be ", allowed,
            ". The tokenizer file is damaged or belongs to another model");
      return (int32_t)*id;
    };
    int32_t maxId = -1;
    for (auto it = model.at("vocab").begin(); it != model.at("vocab").end();
         ++it) {
      int32_t id = idOf(it.value(), "token", it.key());
      t->vocab_[it.key()] = id;
      maxId = std::max(maxId, id);
    }
    for (const auto &a : j.value("added_tokens", json::array())) {
      const json &c = a.value("content", json());
      maxId = std::max(maxId, idOf(a.at("id"), "added token",
                                   c.is_string() ? c.get<std::string>()
                                                 : c.dump()));
    }
    // With the model's vocabulary known, the tokenizer spans all of it, so
    // the server and the CLI accept the same prompt ids (an id the
    // tokenizer has no text for decodes to nothing).
    t->vocabSize_ = modelVocab > 0 ? (int32_t)modelVocab : maxId + 1;
    t->idToToken_.assign(size_t(t->vocabSize_), std::string());
    for (const auto &[tok, id] : t->vocab_)
      t->idToToken_[size_t(id)] = tok;

    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      auto it = t->vocab_.find(model["unk_token"].get<std::string>());
      if (it != t->vocab_.end())
        t->unkId_ = it->second;
    }

    int32_t rank = 0;
    for (const auto &m : model.value("merges", json::array())) {
      std::string a, b;
      if (m.is_string()) {
        std::string s = m.get<std::string>();
        size_t sp = s.find(' ');
        check(sp != std::string::npos, name, ": merge '", s,
              "' is not two tokens separated by a space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        check(m.is_array() && m.size() == 2, name,
              ": a merge must be \"a b\" or [\"a\", \"b\"]");
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      }
      auto ia = t->vocab_.find(a), ib = t->vocab_.find(b),
           ic = t->vocab_.find(a + b);
      check(ia != t->vocab_.end() && ib != t->vocab_.end() &&
                ic != t->vocab_.end(),
            name, ": merge #", rank, " ('", a, "' '", b,
            "') names a token missing from the vocab");
      uint64_t key =
          (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
      t->merges_.emplace(key, std::make_pair(rank, ic->second));
      ++rank;
    }

    for (const auto &a : j.value("added_tokens", json::array())) {
      AddedToken at;
      at.id = (int32_t)a.at("id").get<int64_t>(); // checked above
      at.content = a.at("content").get<std::string>();
      at.special = getBool(a, "special", false);
      at.lstrip = getBool(a, "lstrip", false);
      at.rstrip = getBool(a, "rstrip", false);
      at.singleWord = getBool(a, "single_word", false);
      at.normalized = getBool(a, "normalized", !at.special);
      check(!at.content.empty(), name, ": added token ", at.id,
            " has empty content");
      t->addedById_[at.id] = t->added_.size();
      t->addedByContent_[at.content] = at.id;
      t->idToToken_[size_t(at.id)] = at.content;
      t->added_.push_back(at);
    }

    const json &norm = j.value("normalizer", json());
    check(norm.is_null(), name, ": normalizer '",
          norm.is_object() ? norm.value("type", "?") : std::string("?"),
          "' is not supported (byte-level BPE files have none)");

    // Pre-tokenizer: a Sequence of Split / ByteLevel steps, or one of them.
    std::vector<json> steps;
    const json &pre = j.value("pre_tokenizer", json());
    if (pre.is_object() && pre.value("type", "") == "Sequence") {
      for (const auto &s : pre.at("pretokenizers"))
        steps.push_back(s);
    } else if (!pre.is_null()) {
      steps.push_back(pre);
    }
    for (const json &s : steps) {
      std::string st = s.value("type", "");
      PreStep step;
      if (st == "Split") {
        step.kind = PreStep::Split;
        const json &pat = s.at("pattern");
        if (pat.contains("Regex"))
          step.regex = std::make_shared<Regex>(pat["Regex"].get<std::string>());
        else
          step.literal = pat.at("String").get<std::string>();
        step.behavior = s.value("behavior", "Isolated");
        step.invert = getBool(s, "invert", false);
        static const char *kBehaviors[] = {"Removed", "Isolated",
                                           "MergedWithPrevious",
                                           "MergedWithNext", "Contiguous"};
        bool known = false;
        for (const char *b : kBehaviors)
          known |= step.behavior == b;
        check(known, name, ": Split behavior '", step.behavior, "' is unknown");
      } else if (st == "ByteLevel") {
        step.kind = PreStep::ByteLevel;
        step.addPrefixSpace = getBool(s, "add_prefix_space", false);
        if (getBool(s, "use_regex", true))
          step.regex = std::make_shared<Regex>(kGpt2Pattern);
        t->byteLevel_ = true;
      } else {
        fail(name, ": pre-tokenizer '", st,
             "' is not supported (Split and ByteLevel are)");
      }
      t->pre_.push_back(step);
    }

    const json &dec = j.value("decoder", json());
    if (dec.is_object()) {
      std::string dt = dec.value("type", "");
      check(dt == "ByteLevel", name, ": decoder '", dt,
            "' is not supported (ByteLevel is)");
      t->byteDecoder_ = true;
    }
  } catch (const Error &) {
    throw;
  } catch (const std::exception &e) {
    fail(name, ": malformed tokenizer.json (", e.what(), ")");
  }
  return t;
}

// Splits every ordinary segment around occurrences of the added tokens of one
// set (normalized or not), leftmost-longest.
void Tokenizer::splitAdded(std::vector<Segment> &segs,
                           bool normalizedSet) const {
  std::vector<const AddedToken *> set;
  for (const auto &a : added_)
    if (a.normalized == normalizedSet)
      set.push_back(&a);
  if (set.empty())
    return;
  std::vector<Segment> out;
  auto isWordChar = [](char32_t c) {
    return c == '_' || unicodeInMask(c, unicodeCategoryMask("L") |
                                            unicodeCategoryMask("N"));
  };
  for (auto &seg : segs) {
    if (seg.added >= 0) {
      out.push_back(std::move(seg));
      continue;
    }
    const std::string &s = seg.text;
    size_t textStart = 0; // start of the pending ordinary text
    size_t pos = 0;
    while (pos < s.size()) {
      const AddedToken *best = nullptr;
      for (const AddedToken *a : set)
        if (s.compare(pos, a->content.size(), a->content) == 0 &&
            (!best || a->content.size() > best->content.size()))
          best = a;
      if (best && best->singleWord) {
        std::u32string before =
            decodeUtf8(s.substr(textStart, pos - textStart));
        std::u32string after =
            decodeUtf8(s.substr(pos + best->content.size(), 4));
        if ((!before.empty() && isWordChar(before.back())) ||
            (!after.empty() && isWordChar(after.front())))
          best = nullptr;
      }
      if (!best) {
        ++pos;
        continue;
      }
      size_t mBegin = pos, mEnd = pos + best->content.size();
      if (best->lstrip) {
        while (mBegin > textStart && std::isspace(uint8_t(s[mBegin - 1])))
          --mBegin;
      }
      if (best->rstrip) {
        while (mEnd < s.size() && std::isspace(uint8_t(s[mEnd])))
          ++mEnd;
      }
      if (mBegin > textStart)
        out.push_back({s.substr(textStart, mBegin - textStart), -1});
      out.push_back({best->content, best->id});
      pos = textStart = mEnd;
    }
    if (textStart < s.size())
      out.push_back({s.substr(textStart), -1});
  }
  segs = std::move(out);
}

void Tokenizer::splitWith(const PreStep &step, const std::string &s,
                          std::vector<std::string> &out) const {
  // Mark the pattern matches, then apply the split behaviour.
  struct Part {
    size_t b, e;
    bool match;
  };
  std::vector<Part> parts;
  std::basic_string<size_t> offs;
  if (step.regex) {
    std::u32string cps = decodeUtf8(s, &offs);
    size_t from = 0, mb, me;
    size_t last = 0;
    // One budget for the whole piece: the pack's pattern is operator data
    // and must not hang a request (RegexBudgetError names the pattern).
    Regex::Budget budget = Regex::Budget::forText(cps.size());
    auto next = [&] {
      try {
        return step.regex->search(cps, from, mb, me, budget);
      } catch (const RegexBudgetError &e) {
        fail(name_, ": ", e.what(),
             "; fix the pre_tokenizer pattern of this tokenizer file (the "
             "model's original tokenizer.json does not need this)");
      }
    };
    while (from <= cps.size() && next()) {
      if (me == mb) { // empty match: move on
        from = mb + 1;
        continue;
      }
      if (mb > last)
        parts.push_back({offs[last], offs[mb], false});
      parts.push_back({offs[mb], offs[me], true});
      last = from = me;
    }
    if (last < cps.size())
      parts.push_back({offs[last], s.size(), false});
  } else {
    size_t last = 0, p;
    while (!step.literal.empty() &&
           (p = s.find(step.literal, last)) != std::string::npos) {
      if (p > last)
        parts.push_back({last, p, false});
      parts.push_back({p, p + step.literal.size(), true});
      last = p + step.literal.size();
    }
    if (last < s.size())
      parts.push_back({last, s.size(), false});
  }
  if (step.invert)
    for (auto &p : parts)
      p.match = !p.match;
  const std::string &bh = step.behavior;
  std::vector<std::pair<size_t, size_t>> res;
  bool prevMatch = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part &p = parts[i];
    if (bh == "Removed") {
      if (!p.match)
        res.push_back({p.b, p.e});
    } else if (bh == "Isolated") {
      res.push_back({p.b, p.e});
    } else if (bh == "MergedWithPrevious") {
      if (p.match && !res.empty() && !prevMatch)
        res.back().second = p.e;
      else
        res.push_back({p.b, p.e});
    } else if (bh == "MergedWithNext") {
      if (!p.match && i > 0 && parts[i - 1].match && !res.empty())
        res.back().second = p.e;
      else
        res.push_back({p.b, p.e});
    } else { // Contiguous
      if (p.match && prevMatch && !res.empty())
        res.back().second = p.e;
      else
        res.push_back({p.b, p.e});
    }
    prevMatch = p.match;
  }
  for (auto [b, e] : res)
    if (e > b)
      out.push_back(s.substr(b, e - b));
}

void Tokenizer::preTokenize(const std::string &text,
                            std::vector<std::string> &pieces) const {
  pieces.assign(1, text);
  for (const PreStep &step : pre_) {
    std::vector<std::string> next;
    for (std::string &p : pieces) {
      if (step.kind == PreStep::ByteLevel) {
        if (step.addPrefixSpace && (p.empty() || p[0] != ' '))
          p.insert(p.begin(), ' ');
        if (step.regex)
          splitWith(step, p, next);
        else
          next.push_back(std::move(p));
      } else {
        splitWith(step, p, next);
      }
    }
    pieces = std::move(next);
  }
}

void Tokenizer::bpe(const std::string &piece, std::vector<int32_t> &out) const {
  {
    std::lock_guard<std::mutex> lock(cacheMutex_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  // Symbols: one per byte (byte-level) or per character.
  std::vector<std::string> chars;
  if (byteLevel_) {
    for (unsigned char b : piece) {
      std::string c;
      appendUtf8(c, byteToChar(b));
      chars.push_back(c);
    }
  } else {
    std::basic_string<size_t> offs;
    std::u32string cps = decodeUtf8(piece, &offs);
    for (size_t i = 0; i < cps.size(); ++i)
      chars.push_back(piece.substr(offs[i], offs[i + 1] - offs[i]));
  }
  std::vector<int32_t> result;
  std::string word;
  for (auto &c : chars)
    word += c;
  auto whole = vocab_.find(word);
  if (ignoreMerges_ && whole != vocab_.end()) {
    result.push_back(whole->second);
  } else {
    struct Sym {
      int32_t id;
      int prev, next;
      bool alive;
    };
    std::vector<Sym> syms;
    for (const std::string &c : chars) {
      auto it = vocab_.find(c);
      if (it != vocab_.end()) {
        syms.push_back({it->second, 0, 0, true});
      } else if (byteFallback_) {
        for (unsigned char b : c) {
          char buf[8];
          snprintf(buf, sizeof buf, "<0x%02X>", b);
          auto bt = vocab_.find(buf);
          if (bt != vocab_.end())
            syms.push_back({bt->second, 0, 0, true});
          else if (unkId_ >= 0)
            syms.push_back({unkId_, 0, 0, true});
        }
      } else if (unkId_ >= 0) {
        syms.push_back({unkId_, 0, 0, true});
      } // else: dropped, as the reference does without an unk token
    }
    int n = int(syms.size());
    for (int i = 0; i < n; ++i) {
      syms[i].prev = i - 1;
      syms[i].next = i + 1 < n ? i + 1 : -1;
    }
    struct Cand {
      int32_t rank;
      int pos;
      int32_t newId;
      bool operator<(const Cand &o) const { // max-heap: invert
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    auto lookup = [&](int32_t a,
                      int32_t b) -> const std::pair<int32_t, int32_t> * {
      auto it = merges_.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
      return it == merges_.end() ? nullptr : &it->second;
    };
    std::priority_queue<Cand> q;
    for (int i = 0; i + 1 < n; ++i)
      if (auto m = lookup(syms[i].id, syms[i + 1].id))
        q.push({m->first, i, m->second});
    while (!q.empty()) {
      Cand c = q.top();
      q.pop();
      Sym &l = syms[c.pos];
      if (!l.alive || l.next < 0)
        continue;
      Sym &r = syms[l.next];
      auto m = lookup(l.id, r.id);
      if (!m || m->second != c.newId)
        continue; // stale entry
      l.id = c.newId;
      r.alive = false;
      l.next = r.next;
      if (r.next >= 0)
        syms[r.next].prev = c.pos;
      if (l.prev >= 0)
        if (auto pm = lookup(syms[l.prev].id, l.id))
          q.push({pm->first, l.prev, pm->second});
      if (l.next >= 0)
        if (auto nm = lookup(l.id, syms[l.next].id))
          q.push({nm->first, c.pos, nm->second});
    }
    for (int i = 0; i >= 0 && i < n; i = syms[i].next)
      result.push_back(syms[i].id);
  }
  out.insert(out.end(), result.begin(), result.end());
  std::lock_guard<std::mutex> lock(cacheMutex_);
  if (cache_.size() > 100000)
    cache_.clear();
  cache_.emplace(piece, std::move(result));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<Segment> segs{{std::string(text), -1}};
  splitAdded(segs, false);
  splitAdded(segs, true);
  std::vector<int32_t> ids;
  std::vector<std::string> pieces;
  for (const Segment &s : segs) {
    if (s.added >= 0) {
      ids.push_back(s.added);
      continue;
    }
    preTokenize(s.text, pieces);
    for (const std::string &p : pieces)
      bpe(p, ids);
  }
  return ids;
}

std::string Tokenizer::tokenString(int32_t id) const {
  if (id < 0 || id >= vocabSize_)
    return "";
  return idToToken_[size_t(id)];
}

std::string Tokenizer::tokenBytes(int32_t id) const {
  if (id < 0 || id >= vocabSize_)
    return "";
  const std::string &tok = idToToken_[size_t(id)];
  if (!byteDecoder_)
    return tok;
  // Every character must map back to a byte; otherwise the token's own UTF-8
  // is used (added tokens with text outside the byte alphabet).
  std::string bytes;
  for (char32_t c : decodeUtf8(tok)) {
    int b = charToByte(c);
    if (b < 0)
      return tok;
    bytes += char(b);
  }
  return bytes;
}

std::string Tokenizer::decode(const std::vector<int32_t> &ids,
                              bool skipSpecial) const {
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocabSize_ || idToToken_[size_t(id)].empty())
      continue;
    if (skipSpecial && isSpecial(id))
      continue;
    if (!byteDecoder_ && !first)
      bytes += ' ';
    bytes += tokenBytes(id);
    first = false;
  }
  return sanitizeUtf8(bytes);
}

int32_t Tokenizer::tokenId(std::string_view token) const {
  auto a = addedByContent_.find(std::string(token));
  if (a != addedByContent_.end())
    return a->second;
  auto v = vocab_.find(std::string(token));
  return v == vocab_.end() ? -1 : v->second;
}

bool Tokenizer::isSpecial(int32_t id) const {
  auto it = addedById_.find(id);
  return it != addedById_.end() && added_[it->second].special;
}

} // namespace glm::rt
