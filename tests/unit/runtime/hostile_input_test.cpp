//===- hostile_input_test.cpp - bounded numbers, files, ids and configs ---===//
//
// Regression tests of issue 18's holes below the CLI: the one bounded number
// parser (and its CLI11 validators), the one bounded file reader, tokenizer
// ids outside the vocabulary, config.json values of the wrong type or range,
// the context arithmetic of a huge --max-new, SHA-256 and the value checks
// of tensors no checksum covers.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/cli_numbers.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/host_memory.h"
#include "runtime/base/numbers.h"
#include "runtime/base/sha256.h"
#include "runtime/cpu/generator.h"
#include "runtime/formats/pack_checks.h"
#include "runtime/model/config.h"
#include "runtime/serve/tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>

#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace glm::rt;

namespace {

std::string tmpDir(const std::string &name) {
  fs::path p = fs::temp_directory_path() /
               ("glm_hostile_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

/// The message of the Error `fn` throws ("" when it throws none).
template <class Fn> std::string errorOf(Fn &&fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

} // namespace

//===----------------------------------------------------------------------===//
// Numbers
//===----------------------------------------------------------------------===//

TEST(BoundedNumbers, IntegersAreExactOrRefused) {
  EXPECT_EQ(parseInt64("0"), 0);
  EXPECT_EQ(parseInt64("-12"), -12);
  EXPECT_EQ(parseInt64("+7"), 7);
  EXPECT_EQ(parseInt64("9223372036854775807"),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(parseInt64("-9223372036854775808"),
            std::numeric_limits<int64_t>::min());
  for (const char *bad : {"", "-", "9223372036854775808",
                          "-9223372036854775809", "99999999999999999999",
                          " 5", "5 ", "1.0", "1e3", "0x10", "nan", "12a"})
    EXPECT_FALSE(parseInt64(bad).has_value()) << bad;
  EXPECT_EQ(errorOf([] { parseIntIn("70000", 0, 65535, "--port"); }),
            "--port: \"70000\" is not an integer in 0..65535");
}

TEST(BoundedNumbers, FloatsAreFiniteOrRefused) {
  EXPECT_EQ(parseFinite("0.5"), 0.5);
  EXPECT_EQ(parseFinite("1e-3"), 1e-3);
  EXPECT_EQ(parseFinite("-2"), -2.0);
  for (const char *bad : {"nan", "NaN", "inf", "-inf", "1e400", "0x1p3",
                          " 1", "1 ", "", "1,5", "infinity"})
    EXPECT_FALSE(parseFinite(bad).has_value()) << bad;
  EXPECT_EQ(errorOf([] { parseNumberIn("nan", 0, 1e6, "--memory-per-spark"); }),
            "--memory-per-spark: \"nan\" is not a finite number in [0, 1e+06]");
}

TEST(BoundedNumbers, ContextArithmeticDoesNotOverflow) {
  EXPECT_FALSE(addChecked(std::numeric_limits<int64_t>::max(), 1));
  EXPECT_EQ(addChecked(3, 4), 7);
  EXPECT_FALSE(mulChecked(int64_t(1) << 40, int64_t(1) << 30));
}

/// The validators every numeric flag uses: what `--port 70000`,
/// `--max-queue -1` and `--memory-per-spark nan` used to slip through.
TEST(BoundedNumbers, CliValidatorsRefuseOutOfRangeText) {
  auto parse = [](std::vector<std::string> args) {
    CLI::App app;
    int port = 8080;
    size_t queue = 64;
    double mem = 104;
    int64_t maxNew = 16;
    app.add_option("--port", port)->check(cliInt(0, 65535));
    app.add_option("--max-queue", queue)->check(cliInt(0, 4096));
    app.add_option("--memory-per-spark", mem)->check(cliNumber(0, 1 << 20));
    app.add_option("--max-new", maxNew)->check(cliInt(0));
    std::vector<std::string> argv = {"prog"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<const char *> cs;
    for (auto &a : argv)
      cs.push_back(a.c_str());
    try {
      app.parse((int)cs.size(), cs.data());
    } catch (const CLI::ParseError &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(parse({"--port", "70000"}), "");
  EXPECT_NE(parse({"--port", "-1"}), "");
  EXPECT_NE(parse({"--max-queue", "-1"}), "");
  EXPECT_NE(parse({"--memory-per-spark", "nan"}), "");
  EXPECT_NE(parse({"--memory-per-spark", "inf"}), "");
  EXPECT_NE(parse({"--max-new", "9223372036854775808"}), "");
  EXPECT_NE(parse({"--port", "80.5"}), "");
  EXPECT_EQ(parse({"--port", "65535", "--max-queue", "0",
                   "--memory-per-spark", "0", "--max-new",
                   "9223372036854775807"}),
            "");
  EXPECT_NE(parse({"--port", "70000"}).find("not an integer in 0..65535"),
            std::string::npos);
}

TEST(BoundedNumbers, HugeMaxNewIsRefusedNotRunForever) {
  ModelConfig c;
  c.vocabSize = 8;
  SamplingParams sp;
  sp.maxNew = std::numeric_limits<int64_t>::max();
  int steps = 0;
  std::string err = errorOf([&] {
    runGeneration(c, 4096, {1, 2, 3}, sp, {}, nullptr, [&](int64_t) {
      ++steps;
      return std::vector<float>(8, 0.0f);
    });
  });
  EXPECT_NE(err.find("exceeds the context of 4096 tokens"), std::string::npos)
      << err;
  EXPECT_EQ(steps, 0);
}

TEST(BoundedNumbers, HostMemoryOverrideIsBounded) {
  // "inf" and 1e30 GiB overflowed the conversion to bytes (undefined);
  // "nan" and "12x" were ignored or read as 12.
  ::setenv("GLM_HOST_MEMORY_GIB", "2", 1);
  EXPECT_EQ(availableHostMemory(), 2ull << 30);
  for (const char *v : {"inf", "nan", "1e30", "-1", "12x"}) {
    ::setenv("GLM_HOST_MEMORY_GIB", v, 1);
    EXPECT_EQ(errorOf([] { availableHostMemory(); }),
              std::string("GLM_HOST_MEMORY_GIB (GiB of host memory): \"") + v +
                  "\" is not a finite number in " +
                  rangeText(0.0, double(1 << 20)));
  }
  ::unsetenv("GLM_HOST_MEMORY_GIB");
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

TEST(BoundedFiles, RefusesDevicesPipesDirectoriesAndOversizedFiles) {
  std::string d = tmpDir("files");
  std::string e = errorOf([] { readFileBounded("/dev/zero", 1 << 20, "a plan"); });
  EXPECT_EQ(e, "/dev/zero: a plan must be a regular file, not a device; give "
               "the path of the file itself");
  e = errorOf([&] { readFileBounded(d, 1 << 20, "the manifest"); });
  EXPECT_NE(e.find("not a directory"), std::string::npos) << e;
  std::string fifo = d + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  e = errorOf([&] { readFileBounded(fifo, 1 << 20, "tokenizer.json"); });
  EXPECT_NE(e.find("not a pipe"), std::string::npos) << e;

  // A 30 GB sparse file: refused by its size before anything is allocated.
  std::string sparse = d + "/sparse.glmplan";
  { std::ofstream(sparse) << "x"; }
  fs::resize_file(sparse, 30ull << 30);
  e = errorOf([&] { readFileBounded(sparse, kMaxPlanBytes, "a plan"); });
  EXPECT_NE(e.find(sparse + ": a plan is 32212254720 bytes (30 GiB), more "
                   "than the 2 GiB"),
            std::string::npos)
      << e;

  std::string ok = d + "/config.json";
  { std::ofstream(ok) << "{\"a\": 1}"; }
  EXPECT_EQ(readFileBounded(ok, 64, "the model config"), "{\"a\": 1}");
  e = errorOf([&] { readFileBounded(ok, 4, "the model config"); });
  EXPECT_NE(e.find("more than the 4 bytes"), std::string::npos) << e;
  e = errorOf([&] { readFileBounded(d + "/none", 4, "the model config"); });
  EXPECT_NE(e.find("cannot open the model config"), std::string::npos) << e;
  fs::remove_all(d);
}

TEST(BoundedFiles, SafetensorsOpenRefusesAPipeWithoutBlocking) {
  // A FIFO in place of a pack file blocked verify, compile and run in
  // open() (no writer ever comes).
  std::string d = tmpDir("st-fifo");
  std::string fifo = d + "/model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string e = errorOf([&] { SafetensorsFile::open(fifo); });
  EXPECT_EQ(e, fifo + ": not a regular file (a device, pipe or directory); a "
                      "safetensors file must be the file itself");
  e = errorOf([] { SafetensorsFile::open("/dev/zero"); });
  EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;
  fs::remove_all(d);
}

TEST(BoundedFiles, ConfigAndTokenizerReadersUseTheBound) {
  EXPECT_NE(errorOf([] { loadModelConfig("/dev/zero"); }).find("not a device"),
            std::string::npos);
  EXPECT_NE(errorOf([] { Tokenizer::fromFile("/dev/zero"); }).find(
                "not a device"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// Tokenizer ids
//===----------------------------------------------------------------------===//

namespace {
std::string tokenizerWith(const std::string &addedId) {
  return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
            "merges": ["a b"]},
            "added_tokens": [{"id": )" +
         addedId + R"(, "content": "<x>", "special": true}]})";
}
} // namespace

TEST(TokenizerIds, OutOfRangeOrNonIntegerIdsAreRefusedByName) {
  // 2^31 used to crash (negative index), 2^32 to wrap to id 0.
  for (const char *id : {"2147483648", "4294967296", "-1", "1.5", "\"3\"",
                         "18446744073709551615", "true"}) {
    std::string e = errorOf(
        [&] { Tokenizer::fromJson(tokenizerWith(id), "pack/tokenizer.json"); });
    EXPECT_NE(e.find("pack/tokenizer.json: added token '<x>' has id "),
              std::string::npos)
        << id << ": " << e;
    EXPECT_NE(e.find("token ids must be integers in 0.."), std::string::npos)
        << e;
  }
  // Within the model's vocabulary only.
  std::string e = errorOf([] {
    Tokenizer::fromJson(tokenizerWith("600"), "tokenizer.json", 512);
  });
  EXPECT_EQ(e, "tokenizer.json: added token '<x>' has id 600; token ids must "
               "be integers in 0..511 (the model's vocab_size is 512). The "
               "tokenizer file is damaged or belongs to another model");
  auto tok = Tokenizer::fromJson(tokenizerWith("500"), "tokenizer.json", 512);
  // The tokenizer spans the model's vocabulary: the server accepts the same
  // prompt ids as the CLI.
  EXPECT_EQ(tok->vocabSize(), 512);
  EXPECT_EQ(tok->tokenId("<x>"), 500);
  EXPECT_EQ(tok->decode({511, 2}), "ab");
}

//===----------------------------------------------------------------------===//
// config.json validation by key
//===----------------------------------------------------------------------===//

namespace {
std::string tinyConfig(const std::function<void(nlohmann::json &)> &edit) {
  nlohmann::json j = {
      {"model_type", "glm_moe_dsa"}, {"hidden_size", 128},
      {"num_hidden_layers", 2},      {"vocab_size", 512},
      {"intermediate_size", 256},    {"moe_intermediate_size", 64},
      {"n_routed_experts", 4},       {"n_shared_experts", 1},
      {"num_experts_per_tok", 2},    {"first_k_dense_replace", 1},
      {"num_attention_heads", 2},    {"q_lora_rank", 64},
      {"kv_lora_rank", 64},          {"qk_nope_head_dim", 32},
      {"qk_rope_head_dim", 16},      {"v_head_dim", 32},
      {"eos_token_id", {1, 2}},      {"rope_theta", 10000.0}};
  edit(j);
  return j.dump();
}
std::string configError(const std::function<void(nlohmann::json &)> &edit) {
  return errorOf([&] { parseModelConfig(tinyConfig(edit), "p/config.json"); });
}
} // namespace

TEST(ConfigValidation, WrongTypesAndRangesAreRefusedByKey) {
  EXPECT_EQ(configError([](nlohmann::json &) {}), "");
  EXPECT_EQ(configError([](auto &j) { j["eos_token_id"] = "x"; }),
            "p/config.json: key \"eos_token_id\" is \"x\"; allowed: a token "
            "id or a list of token ids in 0..511");
  EXPECT_EQ(configError([](auto &j) { j["eos_token_id"] = {1, 512}; }),
            "p/config.json: key \"eos_token_id\" is [1,512]; allowed: a token "
            "id or a list of token ids in 0..511");
  EXPECT_EQ(configError([](auto &j) { j["num_experts_per_tok"] = 0; }),
            "p/config.json: key \"num_experts_per_tok\" is 0; allowed: an "
            "integer in 1..4");
  EXPECT_EQ(configError([](auto &j) { j["num_experts_per_tok"] = -1; }),
            "p/config.json: key \"num_experts_per_tok\" is -1; allowed: an "
            "integer in 1..4");
  EXPECT_EQ(configError([](auto &j) { j["rope_theta"] = -1; }),
            "p/config.json: key \"rope_theta\" is -1; allowed: a finite "
            "number in (1, 1e+12]");
  EXPECT_EQ(configError([](auto &j) { j["hidden_size"] = 4294967296ull * 4; }),
            "p/config.json: key \"hidden_size\" is 17179869184; allowed: an "
            "integer in 1..1048576");
  EXPECT_EQ(configError([](auto &j) { j["num_hidden_layers"] = 2.5; }),
            "p/config.json: key \"num_hidden_layers\" is 2.5; allowed: an "
            "integer in 1..65536");
  EXPECT_EQ(configError([](auto &j) { j["norm_topk_prob"] = "yes"; }),
            "p/config.json: key \"norm_topk_prob\" is \"yes\"; allowed: true "
            "or false");
  EXPECT_EQ(configError([](auto &j) { j["rms_norm_eps"] = 0; }),
            "p/config.json: key \"rms_norm_eps\" is 0; allowed: a finite "
            "number in (0, 1]");
  EXPECT_EQ(configError([](auto &j) { j["mlp_layer_types"] = {"dense", "x"}; }),
            "p/config.json: key \"mlp_layer_types\" is \"x\"; allowed: a list "
            "of \"dense\" or \"sparse\"");
  EXPECT_EQ(configError([](auto &j) { j.erase("vocab_size"); }),
            "p/config.json: missing integer key \"vocab_size\" (allowed: an "
            "integer in 1..16777216)");
}

TEST(ConfigValidation, KeysWithOneSupportedValueAreCheckedForEveryExecutor) {
  // Compile and the plan executor used to ignore these keys: scoring_func
  // "softmax" or hidden_act "gelu" ran sigmoid routing and SiLU; only the
  // reference forward refused them, and not when given another type.
  EXPECT_EQ(configError([](auto &j) { j["scoring_func"] = "softmax"; }),
            "p/config.json: key \"scoring_func\" is \"softmax\"; allowed: "
            "\"sigmoid\" (the only router scoring glmc runs)");
  EXPECT_EQ(configError([](auto &j) { j["scoring_func"] = {"sigmoid"}; }),
            "p/config.json: key \"scoring_func\" is [\"sigmoid\"]; allowed: "
            "\"sigmoid\" (the only router scoring glmc runs)");
  EXPECT_EQ(configError([](auto &j) { j["hidden_act"] = 5; }),
            "p/config.json: key \"hidden_act\" is 5; allowed: \"silu\" (the "
            "only MLP activation glmc runs)");
  EXPECT_NE(configError([](auto &j) { j["topk_method"] = "greedy"; })
                .find("key \"topk_method\" is \"greedy\"; allowed: "
                      "\"noaux_tc\""),
            std::string::npos);
  EXPECT_EQ(configError([](auto &j) {
              j["rope_parameters"] = {{"rope_theta", 1e4}, {"rope_type", "yarn"}};
            }),
            "p/config.json: key \"rope_type\" is \"yarn\"; allowed: "
            "\"default\" (only default RoPE)");
  EXPECT_EQ(configError([](auto &j) { j["n_group"] = "x"; }),
            "p/config.json: key \"n_group\" is \"x\"; allowed: an integer in "
            "1..65536");
  EXPECT_EQ(configError([](auto &j) { j["n_group"] = 8, j["topk_group"] = 4; }),
            "p/config.json: key \"topk_group\" is 4; allowed: n_group (8): "
            "grouped expert routing is not supported");
  EXPECT_EQ(configError([](auto &j) { j["attention_bias"] = true; }),
            "p/config.json: key \"attention_bias\" is true; allowed: false "
            "(attention biases are not supported)");
  EXPECT_EQ(configError([](auto &j) { j["attention_bias"] = "no"; }),
            "p/config.json: key \"attention_bias\" is \"no\"; allowed: true "
            "or false");
  EXPECT_EQ(configError([](auto &j) { j["num_key_value_heads"] = 1; }),
            "p/config.json: key \"num_key_value_heads\" is 1; allowed: an "
            "integer in 2..2");
  EXPECT_EQ(configError([](auto &j) { j["rope_interleave"] = false; }),
            "p/config.json: key \"rope_interleave\" is false; allowed: true "
            "(only interleaved RoPE is implemented)");
  EXPECT_EQ(configError([](auto &j) { j["indexer_rope_interleave"] = 0; }),
            "p/config.json: key \"indexer_rope_interleave\" is 0; allowed: "
            "true or false");
  EXPECT_EQ(configError([](auto &j) { j["moe_layer_freq"] = 2; }),
            "p/config.json: key \"moe_layer_freq\" is 2; allowed: an integer "
            "in 1..1");
  // The values GLM-5.3 and GLM-5.3-Flash ship.
  EXPECT_EQ(configError([](auto &j) {
              j["hidden_act"] = "silu", j["scoring_func"] = "sigmoid";
              j["topk_method"] = "noaux_tc", j["n_group"] = 1;
              j["topk_group"] = 1, j["attention_bias"] = false;
              j["num_key_value_heads"] = 2, j["rope_scaling"] = nullptr;
              j["rope_interleave"] = true, j["moe_layer_freq"] = 1;
              j["rope_parameters"] = {{"rope_theta", 8e6},
                                      {"rope_type", "default"}};
            }),
            "");
}

//===----------------------------------------------------------------------===//
// SHA-256 and value checks
//===----------------------------------------------------------------------===//

TEST(Sha256, MatchesFips180Vectors) {
  auto hex = [](const std::string &s) {
    Sha256 h;
    h.update(s.data(), s.size());
    return h.hexDigest();
  };
  EXPECT_EQ(hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 m; // one million 'a', fed in uneven pieces
  std::string chunk(997, 'a');
  size_t left = 1000000;
  while (left) {
    size_t n = std::min(left, chunk.size());
    m.update(chunk.data(), n);
    left -= n;
  }
  EXPECT_EQ(m.hexDigest(),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

namespace {
TensorView viewOf(DType t, std::vector<uint8_t> &bytes, int64_t n,
                  const std::string &name) {
  TensorView v;
  v.name = name;
  v.dtype = t;
  v.shape = {n};
  v.data = bytes.data();
  v.byteSize = bytes.size();
  return v;
}
} // namespace

TEST(ValueChecks, SignsMustBeExactlyPlusOrMinusOne) {
  std::vector<uint8_t> b = {0x80, 0x3F, 0x80, 0xBF}; // bf16 +1, -1
  EXPECT_EQ(checkSigns(viewOf(DType::BF16, b, 2, "signs.in")), "");
  b[0] = 0x81; // 1.0078125: a damaged mantissa bit
  EXPECT_NE(checkSigns(viewOf(DType::BF16, b, 2, "signs.in")).find(
                "element 0 is 1.00781 (not exactly +1 or -1 in BF16)"),
            std::string::npos);
  std::vector<uint8_t> i8 = {1, 0xFF, 1};
  EXPECT_EQ(checkSigns(viewOf(DType::I8, i8, 3, "signs.out")), "");
  i8[2] = 0;
  EXPECT_NE(checkSigns(viewOf(DType::I8, i8, 3, "signs.out")), "");
}

TEST(ValueChecks, NormsAndBiasesMustBeFiniteAndInRange) {
  std::vector<float> f = {1.0f, 0.97f, 1.02f};
  std::vector<uint8_t> b((uint8_t *)f.data(), (uint8_t *)f.data() + 12);
  EXPECT_EQ(checkPlainValues("model.layers.0.input_layernorm.weight",
                             viewOf(DType::F32, b, 3, "input_layernorm.weight")),
            "");
  f[1] = 3e5f;
  std::memcpy(b.data(), f.data(), 12);
  EXPECT_NE(checkPlainValues("model.layers.0.input_layernorm.weight",
                             viewOf(DType::F32, b, 3, "x"))
                .find("element 1 is 300000; a norm weight or bias must be "
                      "finite and within +-1024"),
            std::string::npos);
  f[1] = std::nanf("");
  std::memcpy(b.data(), f.data(), 12);
  EXPECT_NE(checkPlainValues("mlp.gate.e_score_correction_bias",
                             viewOf(DType::F32, b, 3, "x")),
            "");
}
