//===- command_line.h - command lines people can paste back ---------------===//
//
// Hints that print a command (a re-plan, a smaller context) build it from
// words, quote it for a POSIX shell and change only the options they mean
// to: what the user typed (--manifest, --arch, --width ...) is kept, so the
// printed command works when pasted. Pure functions; thread-safe.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

namespace glm::rt {

/// One word for a POSIX shell: as is when it has only characters no shell
/// treats specially, else in single quotes ('it'\''s').
std::string shellQuote(const std::string &word);

/// The words quoted and joined by spaces: one pasteable command line.
std::string shellJoin(const std::vector<std::string> &words);

/// Splits a line into words the way a shell would for the quoting
/// shellJoin writes (plain words, '...', "..." and backslash escapes).
std::vector<std::string> shellSplit(const std::string &line);

/// `words` without any occurrence of the option named by one of `names`
/// (`--name VALUE`, `--name=VALUE`; a flag alone when `takesValue` is
/// false) and with `names[0] VALUE` (or the flag) appended; `value` is
/// ignored for flags.
std::vector<std::string> withOption(std::vector<std::string> words,
                                    std::initializer_list<const char *> names,
                                    const std::string &value,
                                    bool takesValue = true);

/// `words` without any occurrence of the option named by one of `names`.
std::vector<std::string>
withoutOption(std::vector<std::string> words,
              std::initializer_list<const char *> names,
              bool takesValue = true);

} // namespace glm::rt
