//===- fake_engine_server.cpp - glm-serve-test: serve tests without a model ===//
//
// Test-only CLI. `tokenize FILE TEXTFILE` and `decode FILE IDS` expose the
// tokenizer to the Python parity tests.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/serve/jinja.h"
#include "runtime/serve/tokenizer.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <sstream>

using namespace glm::rt;
using json = nlohmann::json;

static std::string readFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  check(bool(f), path, ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// tokenize TOKENIZER LINES.json: input is a JSON array of strings; prints a
// JSON array of {ids, decoded} per string.
static int cmdTokenize(const std::string &tokPath, const std::string &inPath) {
  auto tok = Tokenizer::fromFile(tokPath);
  json in = json::parse(readFile(inPath));
  json out = json::array();
  for (const auto &s : in) {
    // A string is encoded; {"ids": [...]} is decoded as given.
    std::vector<int32_t> ids =
        s.is_string() ? tok->encode(s.get<std::string>())
                      : s.at("ids").get<std::vector<int32_t>>();
    out.push_back({{"ids", ids},
                   {"decoded", tok->decode(ids)},
                   {"decoded_skip", tok->decode(ids, true)}});
  }
  std::cout << out.dump() << "\n";
  return 0;
}

// render TEMPLATE CASES.json: CASES is a JSON array of context objects; prints
// a JSON array of {"text": ...} or {"error": ...} per case.
static int cmdRender(const std::string &tplPath, const std::string &inPath) {
  jinja::Template tpl(readFile(tplPath), tplPath);
  auto in = nlohmann::ordered_json::parse(readFile(inPath));
  json out = json::array();
  for (const auto &ctx : in) {
    try {
      out.push_back({{"text", tpl.render(jinja::fromJson(ctx))}});
    } catch (const Error &e) {
      out.push_back({{"error", e.what()}});
    }
  }
  std::cout << out.dump() << "\n";
  return 0;
}

int main(int argc, char **argv) {
  try {
    std::vector<std::string> a(argv + 1, argv + argc);
    if (a.size() == 3 && a[0] == "tokenize")
      return cmdTokenize(a[1], a[2]);
    if (a.size() == 3 && a[0] == "render")
      return cmdRender(a[1], a[2]);
    std::cerr << "usage: glm-serve-test tokenize TOKENIZER.json IN.json\n"
                 "       glm-serve-test render TEMPLATE.jinja CASES.json\n";
    return 2;
  } catch (const std::exception &e) {
    std::cerr << "glm-serve-test: " << e.what() << "\n";
    return 1;
  }
}
