//===- command_line.cpp - command lines people can paste back -------------===//
//
// Shell quoting and option replacement for the commands hints print.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/command_line.h"

#include <cstring>

namespace glm::rt {

std::string shellQuote(const std::string &word) {
  static const char kSafe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRST"
                              "UVWXYZ0123456789_-+=/.,:@%";
  bool safe = !word.empty();
  for (char c : word)
    safe &= c != '\0' && std::strchr(kSafe, c) != nullptr;
  // `=` is safe inside a word but not as its first character in every
  // shell context that matters here; a leading `=` is rare enough to quote.
  if (safe && word[0] != '=')
    return word;
  std::string out = "'";
  for (char c : word)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string shellJoin(const std::vector<std::string> &words) {
  std::string out;
  for (const std::string &w : words)
    out += (out.empty() ? "" : " ") + shellQuote(w);
  return out;
}

std::vector<std::string> shellSplit(const std::string &line) {
  std::vector<std::string> out;
  std::string cur;
  bool inWord = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (inWord)
        out.push_back(cur);
      cur.clear();
      inWord = false;
      continue;
    }
    inWord = true;
    if (c == '\'') {
      for (++i; i < line.size() && line[i] != '\''; ++i)
        cur += line[i];
    } else if (c == '"') {
      for (++i; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\' && i + 1 < line.size() &&
            std::strchr("\\\"$`", line[i + 1]))
          ++i;
        cur += line[i];
      }
    } else if (c == '\\' && i + 1 < line.size()) {
      cur += line[++i];
    } else {
      cur += c;
    }
  }
  if (inWord)
    out.push_back(cur);
  return out;
}

static bool isOption(const std::string &word,
                     std::initializer_list<const char *> names,
                     bool &inlineValue) {
  for (const char *n : names) {
    const size_t len = std::strlen(n);
    if (word == n) {
      inlineValue = false;
      return true;
    }
    if (word.size() > len && word.compare(0, len, n) == 0 && word[len] == '=') {
      inlineValue = true;
      return true;
    }
  }
  return false;
}

std::vector<std::string>
withoutOption(std::vector<std::string> words,
              std::initializer_list<const char *> names, bool takesValue) {
  std::vector<std::string> out;
  for (size_t i = 0; i < words.size(); ++i) {
    bool inlineValue = false;
    if (i > 0 && isOption(words[i], names, inlineValue)) {
      if (takesValue && !inlineValue)
        ++i; // its value
      continue;
    }
    out.push_back(std::move(words[i]));
  }
  return out;
}

std::vector<std::string> withOption(std::vector<std::string> words,
                                    std::initializer_list<const char *> names,
                                    const std::string &value, bool takesValue) {
  std::vector<std::string> out =
      withoutOption(std::move(words), names, takesValue);
  out.push_back(*names.begin());
  if (takesValue)
    out.push_back(value);
  return out;
}

} // namespace glm::rt
