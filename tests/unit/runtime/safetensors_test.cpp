//===- safetensors_test.cpp - reader validation, writer layout, checkpoints
//-===//
//
// Round trips every dtype through SafetensorsWriter and SafetensorsFile,
// checks that each kind of damaged file ends in an Error naming the file,
// and exercises alignment padding and multi-file checkpoints.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/base/numeric.h"
#include "runtime/formats/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace fs = std::filesystem;
using namespace glm::rt;

namespace {

std::string tmpDir(const std::string &name) {
  fs::path p = fs::temp_directory_path() /
               ("glm_st_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeAll(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), (std::streamsize)bytes.size());
}

/// A raw safetensors file from a header text and a data section.
std::string rawFile(const std::string &header, const std::string &data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[i] = (char)(n >> (8 * i));
  return out + header + data;
}

/// Expects open() to throw an Error whose message names the file and
/// contains `needle`.
void expectOpenError(const std::string &path, const std::string &needle,
                     bool allowTruncated = false) {
  try {
    SafetensorsFile::open(path, allowTruncated);
    FAIL() << "no error for " << path << " (expected \"" << needle << "\")";
  } catch (const Error &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

} // namespace

TEST(Safetensors, RoundTripsEveryDType) {
  std::string dir = tmpDir("dtypes");
  std::vector<float> f = {0.5f, -1.25f, 3.0f, 0.0f, 1e-3f, -7.5f};
  std::vector<double> d = {1.5, -2.25};
  std::vector<uint16_t> h = {floatToHalf(0.5f), floatToHalf(-3.0f)};
  std::vector<uint8_t> e4 = {floatToE4m3(1.5f), floatToE4m3(-448.f)};
  std::vector<uint8_t> e5 = {0x3C, 0xC4}; // 1.0, -4.0
  std::vector<int64_t> i64 = {-5, 1ll << 40};
  std::vector<uint64_t> u64 = {7, 9};
  std::vector<int32_t> i32 = {-100000, 3};
  std::vector<uint32_t> u32 = {4000000000u};
  std::vector<int16_t> i16 = {-300, 300};
  std::vector<uint16_t> u16 = {65535};
  std::vector<int8_t> i8 = {-128, 127, 0};
  std::vector<uint8_t> u8 = {255, 1};
  std::vector<uint8_t> bl = {1, 0, 1};
  std::string path = dir + "/all.safetensors";
  SafetensorsWriter v;
  v.setMetadata("format", "pt");
  v.addF32("f32", {2, 3}, f);
  v.add("f64", DType::F64, {2}, d.data(), 16);
  v.add("f16", DType::F16, {2}, h.data(), 4);
  v.addBF16("bf16", {3}, {1.0f, -0.375f, 2.5f});
  v.add("e4m3", DType::F8_E4M3, {2}, e4.data(), 2);
  v.add("e5m2", DType::F8_E5M2, {2}, e5.data(), 2);
  v.add("i64", DType::I64, {2}, i64.data(), 16);
  v.add("u64", DType::U64, {2}, u64.data(), 16);
  v.add("i32", DType::I32, {1, 2}, i32.data(), 8);
  v.add("u32", DType::U32, {1}, u32.data(), 4);
  v.add("i16", DType::I16, {2}, i16.data(), 4);
  v.add("u16", DType::U16, {1}, u16.data(), 2);
  v.add("i8", DType::I8, {3}, i8.data(), 3);
  v.add("u8", DType::U8, {2}, u8.data(), 2);
  v.add("bool", DType::BOOL, {3}, bl.data(), 3);
  std::vector<float> none;
  v.addF32("empty", {0, 4}, none);
  v.addF32("scalar", {}, {42.0f});
  v.write(path);

  auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->tensors().size(), 17u);
  EXPECT_EQ(file->headerSize() % 8, 0u);
  EXPECT_EQ(file->get("f32").toFloat(), f);
  EXPECT_EQ(file->get("f32").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(file->get("f64").toFloat(), (std::vector<float>{1.5f, -2.25f}));
  EXPECT_EQ(file->get("f16").toFloat(), (std::vector<float>{0.5f, -3.0f}));
  EXPECT_EQ(file->get("bf16").toFloat(),
            (std::vector<float>{1.0f, -0.375f, 2.5f}));
  EXPECT_EQ(file->get("e4m3").toFloat(), (std::vector<float>{1.5f, -448.f}));
  EXPECT_EQ(file->get("e5m2").toFloat(), (std::vector<float>{1.0f, -4.0f}));
  EXPECT_EQ(file->get("i64").toFloat(),
            (std::vector<float>{-5.f, (float)(1ll << 40)}));
  EXPECT_EQ(file->get("u64").toFloat(), (std::vector<float>{7.f, 9.f}));
  EXPECT_EQ(file->get("i32").toFloat(), (std::vector<float>{-100000.f, 3.f}));
  EXPECT_EQ(file->get("u32").toFloat(), (std::vector<float>{4e9f}));
  EXPECT_EQ(file->get("i16").toFloat(), (std::vector<float>{-300.f, 300.f}));
  EXPECT_EQ(file->get("u16").toFloat(), (std::vector<float>{65535.f}));
  EXPECT_EQ(file->get("i8").toFloat(),
            (std::vector<float>{-128.f, 127.f, 0.f}));
  EXPECT_EQ(file->get("u8").toFloat(), (std::vector<float>{255.f, 1.f}));
  EXPECT_EQ(file->get("bool").toFloat(), (std::vector<float>{1.f, 0.f, 1.f}));
  EXPECT_EQ(file->get("empty").numel(), 0);
  EXPECT_EQ(file->get("scalar").toFloat(), (std::vector<float>{42.f}));
  EXPECT_EQ(file->get("scalar").shape.size(), 0u);
  // fileOffset + bytes() are the same memory as data.
  const TensorView &t = file->get("i32");
  EXPECT_EQ(file->bytes(t.fileOffset, t.byteSize), t.data);
  EXPECT_THROW(file->bytes(file->fileSize() - 2, 4), Error);
  EXPECT_THROW(file->get("nope"), Error);
  EXPECT_EQ(file->find("nope"), nullptr);
}

TEST(Safetensors, WriterIsDeterministic) {
  std::string dir = tmpDir("determ");
  auto make = [&](const std::string &path) {
    SafetensorsWriter w(4096);
    w.setMetadata("b", "2");
    w.setMetadata("a", "1");
    w.addF32("z", {3}, {1, 2, 3});
    w.addBF16("a", {2, 2}, {1, 2, 3, 4});
    w.write(path);
  };
  make(dir + "/one.safetensors");
  make(dir + "/two.safetensors");
  EXPECT_EQ(readAll(dir + "/one.safetensors"),
            readAll(dir + "/two.safetensors"));
}

TEST(Safetensors, AlignmentPadsAndSkipsPadEntries) {
  std::string dir = tmpDir("align");
  const uint64_t align = 65536;
  SafetensorsWriter w(align);
  w.setMetadata("widths", "2,3,4");
  std::vector<float> a(1000, 1.0f), b(77, 2.0f), c(5, 3.0f);
  w.addF32("a", {1000}, a);
  w.addF32("b", {77}, b);
  w.addF32("c", {5}, c);
  uint64_t offB = w.fileOffsetOf("b");
  EXPECT_EQ(offB % align, 0u);
  std::string path = dir + "/aligned.safetensors";
  w.write(path);
  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->tensors().size(), 3u); // no __pad.* listed
  for (const auto &t : f->tensors()) {
    EXPECT_EQ(t.fileOffset % align, 0u) << t.name;
    EXPECT_EQ(t.name.rfind("__pad", 0), std::string::npos);
  }
  EXPECT_EQ(f->get("b").fileOffset, offB);
  EXPECT_EQ(f->get("c").toFloat(), c);
  // The raw header does carry the padding entries.
  std::string raw = readAll(path);
  EXPECT_NE(raw.find("\"__pad.0\""), std::string::npos);
  // The header is padded to a multiple of 8 with spaces.
  EXPECT_EQ(f->headerSize() % 8, 0u);
  EXPECT_EQ(raw[f->headerSize() - 1] == ' ' || raw[f->headerSize() - 1] == '}',
            true);

  // Header-only write: same header, no data; opens with allowTruncatedData.
  SafetensorsWriter h(align);
  h.setMetadata("widths", "2,3,4");
  h.addHeaderOnly("a", DType::F32, {1000});
  h.addF32("b", {77}, b);
  h.addHeaderOnly("c", DType::F32, {5});
  EXPECT_THROW(h.write(dir + "/bad.safetensors"), Error);
  std::string hpath = dir + "/header.safetensors";
  h.write(hpath, /*headerOnly=*/true);
  EXPECT_EQ(readAll(hpath), raw.substr(0, f->headerSize()));
  expectOpenError(hpath, "truncated");
  auto ho = SafetensorsFile::open(hpath, /*allowTruncatedData=*/true);
  EXPECT_EQ(ho->get("b").fileOffset, offB);
  EXPECT_EQ(ho->get("b").data, nullptr);
  EXPECT_THROW(ho->get("b").toFloat(), Error);
}

TEST(Safetensors, ReaderSkipsForeignPadEntries) {
  std::string dir = tmpDir("foreignpad");
  std::string data(16, '\0');
  float one = 1.0f;
  std::memcpy(&data[8], &one, 4);
  std::string hdr =
      R"({"__pad.0":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
      R"("x":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  std::string path = dir + "/p.safetensors";
  writeAll(path, rawFile(hdr, data));
  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->tensors().size(), 1u);
  EXPECT_EQ(f->get("x").toFloat(), std::vector<float>{1.0f});
  // Padding still may not overlap a tensor.
  std::string bad =
      R"({"__pad.0":{"dtype":"U8","shape":[10],"data_offsets":[0,10]},)"
      R"("x":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  writeAll(path, rawFile(bad, data));
  expectOpenError(path, "overlap");
}

TEST(Safetensors, EveryValidationErrorNamesTheFile) {
  std::string dir = tmpDir("errors");
  std::string p = dir + "/bad.safetensors";
  const std::string data(16, '\0');
  auto entry = [](const std::string &name, const std::string &dtype,
                  const std::string &shape, int b, int e) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":[" + std::to_string(b) + "," + std::to_string(e) +
           "]}";
  };
  // Truncated: shorter than the 8-byte length.
  writeAll(p, std::string("\x10\x00\x00", 3));
  expectOpenError(p, "truncated");
  // Empty file.
  writeAll(p, "");
  expectOpenError(p, "truncated");
  // Header length beyond the file.
  {
    std::string f = rawFile("{}", "");
    f[0] = (char)200;
    writeAll(p, f);
    expectOpenError(p, "past the end");
  }
  // Header length above 100 MB.
  {
    std::string f = rawFile("{}", "");
    f[4] = 1; // 2^32 + 2
    writeAll(p, f);
    expectOpenError(p, "100 MB");
  }
  // Header length < 2.
  {
    std::string f = rawFile("{", "xxxx");
    writeAll(p, f);
    expectOpenError(p, "too small");
  }
  // Bad JSON.
  writeAll(p, rawFile("{\"a\":", data));
  expectOpenError(p, "not valid JSON");
  // Not an object.
  writeAll(p, rawFile("[1,2]", data));
  expectOpenError(p, "JSON object");
  // Unknown dtype.
  writeAll(p, rawFile("{" + entry("w", "F4", "[2]", 0, 1) + "}", data));
  expectOpenError(p, "unknown dtype");
  expectOpenError(p, "tensor w");
  // Shape x dtype != length.
  writeAll(p, rawFile("{" + entry("w", "F32", "[3]", 0, 8) + "}", data));
  expectOpenError(p, "tensor w: shape [3]");
  // Negative shape entry.
  writeAll(p, rawFile("{" + entry("w", "F32", "[-1]", 0, 8) + "}", data));
  expectOpenError(p, "non-negative");
  // Offsets out of range (beyond the data section).
  writeAll(p, rawFile("{" + entry("w", "F32", "[4]", 8, 24) + "}", data));
  expectOpenError(p, "past the data section");
  // begin > end.
  writeAll(p, rawFile("{" + entry("w", "F32", "[0]", 8, 4) + "}", data));
  expectOpenError(p, "begin after end");
  // Overlap.
  writeAll(p, rawFile("{" + entry("a", "F32", "[2]", 0, 8) + "," +
                          entry("b", "F32", "[2]", 4, 12) + "}",
                      data));
  expectOpenError(p, "overlap");
  // Non-string metadata.
  writeAll(p, rawFile("{\"__metadata__\":{\"k\":3}}", data));
  expectOpenError(p, "__metadata__ key \"k\"");
  writeAll(p, rawFile("{\"__metadata__\":[1]}", data));
  expectOpenError(p, "__metadata__");
  // Missing data_offsets.
  writeAll(p, rawFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", data));
  expectOpenError(p, "data_offsets");
  // Truncated data (a valid header, data cut short).
  writeAll(p, rawFile("{" + entry("w", "F32", "[4]", 0, 16) + "}",
                      data.substr(0, 10)));
  expectOpenError(p, "truncated");
  // A file that is not there.
  expectOpenError(dir + "/missing.safetensors", "cannot open");
}

TEST(Safetensors, RandomCorruptionNeverCrashes) {
  std::string dir = tmpDir("fuzz");
  SafetensorsWriter w;
  w.setMetadata("k", "v");
  w.addF32("a", {4, 4}, std::vector<float>(16, 1.0f));
  w.addBF16("b", {8}, std::vector<float>(8, 2.0f));
  std::string good = dir + "/good.safetensors";
  w.write(good);
  std::string bytes = readAll(good);
  std::mt19937 rng(7);
  std::string p = dir + "/fuzz.safetensors";
  int errors = 0;
  for (int i = 0; i < 400; ++i) {
    std::string b = bytes;
    size_t pos = rng() % std::min<size_t>(b.size(), 200);
    b[pos] = (char)(rng() & 0xFF);
    if (i % 3 == 0)
      b.resize(rng() % b.size());
    writeAll(p, b);
    try {
      auto f = SafetensorsFile::open(p);
      for (const auto &t : f->tensors())
        (void)t.toFloat();
    } catch (const Error &e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(errors, 0);
}

TEST(SafetensorsCheckpoint, SingleFileDirAndIndex) {
  std::string dir = tmpDir("ckpt");
  // Single model.safetensors in a directory.
  {
    SafetensorsWriter w;
    w.addF32("x", {2}, {1, 2});
    w.write(dir + "/single/model.safetensors");
    auto c = SafetensorsCheckpoint::open(dir + "/single");
    EXPECT_EQ(c.names(), std::vector<std::string>{"x"});
    EXPECT_EQ(c.fileOf("x"), "model.safetensors");
    auto c2 = SafetensorsCheckpoint::open(dir + "/single/model.safetensors");
    EXPECT_EQ(c2.get("x").toFloat(), (std::vector<float>{1, 2}));
  }
  // Two shards and an index.
  std::string sh = dir + "/sharded";
  {
    SafetensorsWriter a, b;
    a.addF32("model.a", {1}, {3});
    a.addF32("model.b", {1}, {4});
    b.addF32("model.c", {2}, {5, 6});
    a.write(sh + "/model-00001-of-00002.safetensors");
    b.write(sh + "/model-00002-of-00002.safetensors");
    writeAll(sh + "/model.safetensors.index.json",
             R"({"metadata":{"total_size":16},"weight_map":{)"
             R"("model.a":"model-00001-of-00002.safetensors",)"
             R"("model.b":"model-00001-of-00002.safetensors",)"
             R"("model.c":"model-00002-of-00002.safetensors"}})");
    auto c = SafetensorsCheckpoint::open(sh);
    EXPECT_EQ(c.files().size(), 2u);
    EXPECT_EQ(c.names().size(), 3u);
    EXPECT_EQ(c.fileOf("model.c"), "model-00002-of-00002.safetensors");
    EXPECT_EQ(c.get("model.c").toFloat(), (std::vector<float>{5, 6}));
    EXPECT_EQ(c.find("model.z"), nullptr);
    EXPECT_THROW(c.get("model.z"), Error);
    // Opening the index file itself works too.
    auto c2 = SafetensorsCheckpoint::open(sh + "/model.safetensors.index.json");
    EXPECT_EQ(c2.get("model.a").toFloat(), (std::vector<float>{3}));
  }
  // Index mapping a tensor its file lacks.
  {
    writeAll(
        sh + "/model.safetensors.index.json",
        R"({"weight_map":{"model.q":"model-00001-of-00002.safetensors"}})");
    try {
      SafetensorsCheckpoint::open(sh);
      FAIL();
    } catch (const Error &e) {
      std::string m = e.what();
      EXPECT_NE(m.find("model.q"), std::string::npos) << m;
      EXPECT_NE(m.find("model-00001-of-00002.safetensors"), std::string::npos);
    }
  }
  // Index mapping a missing file.
  {
    writeAll(
        sh + "/model.safetensors.index.json",
        R"({"weight_map":{"model.a":"model-00009-of-00009.safetensors"}})");
    try {
      SafetensorsCheckpoint::open(sh);
      FAIL();
    } catch (const Error &e) {
      std::string m = e.what();
      EXPECT_NE(m.find("model-00009-of-00009.safetensors"), std::string::npos);
      EXPECT_NE(m.find("missing"), std::string::npos) << m;
    }
  }
  // A bare directory of shards without an index opens all of them.
  {
    fs::remove(sh + "/model.safetensors.index.json");
    auto c = SafetensorsCheckpoint::open(sh);
    EXPECT_EQ(c.names().size(), 3u);
  }
  // An empty directory says what it expected.
  {
    fs::create_directories(dir + "/empty");
    try {
      SafetensorsCheckpoint::open(dir + "/empty");
      FAIL();
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("model.safetensors"),
                std::string::npos);
    }
  }
}
