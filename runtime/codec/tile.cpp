//===- tile.cpp - trellis tile bit streams, pack/unpack and decode --------===//
//
// A tile is a circular stream of 256·K bits (exl3-format.md §1.3, §2.2, §9):
// LE int16 words viewed as uint32 words read MSB-first; position t's state is
// the 16 stream bits ending at its end bit, wrapping round the stream.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/parallel.h"
#include "runtime/codec/trellis.h"

#include "runtime/base/error.h"

#include <array>

namespace glm::rt::trellis {

int positionEndBit(Width w, int t) {
  int tb = w.twiceBits;
  if (!(tb & 1))
    return (t + 1) * (tb / 2);
  // Half-integer K = KA + 1/2: even positions carry KA bits, odd KA + 1.
  int ka = tb / 2;
  return (t & 1) ? ((t + 1) / 2) * tb : (t / 2) * tb + ka;
}

int positionBits(Width w, int t) {
  return positionEndBit(w, t) - (t ? positionEndBit(w, t - 1) : 0);
}

namespace {
/// Start bit of each position's 16-bit window, for every width (index
/// twiceBits), computed once.
struct WindowStarts {
  std::array<std::array<int16_t, 256>, 17> start{};
  WindowStarts() {
    for (int tb = 2; tb <= 16; ++tb) {
      Width w{tb};
      int n = w.streamBits();
      for (int t = 0; t < 256; ++t)
        start[tb][t] = (int16_t)((positionEndBit(w, t) - 16 + n) % n);
    }
  }
};
} // namespace

static const int16_t *windowStarts(Width w) {
  static const WindowStarts ws;
  check(w.twiceBits >= 2 && w.twiceBits <= 16,
        "trellis width out of range (twice the bits = ", w.twiceBits, ")");
  return ws.start[w.twiceBits].data();
}

void unpackTileStates(const uint16_t *words, Width w, uint16_t states[256]) {
  const int16_t *starts = windowStarts(w);
  int nw = w.streamBits() / 32;
  uint32_t u[65]; // K <= 8: at most 64 uint32 words, plus the wrap copy
  for (int i = 0; i < nw; ++i)
    u[i] = (uint32_t)words[2 * i] | ((uint32_t)words[2 * i + 1] << 16);
  u[nw] = u[0];
  for (int t = 0; t < 256; ++t) {
    int s = starts[t], i = s >> 5, o = s & 31;
    // Stream bit s is bit 63 − o of the 64-bit pair; the window is 16 bits.
    uint64_t c = ((uint64_t)u[i] << 32) | u[i + 1];
    states[t] = (uint16_t)(c >> (48 - o));
  }
}

void packTile(const uint16_t states[256], Width w, uint16_t *words) {
  windowStarts(w); // validates the width
  int nw = w.streamBits() / 32;
  uint32_t u[64] = {};
  for (int t = 0; t < 256; ++t) {
    int end = positionEndBit(w, t), nb = positionBits(w, t);
    uint32_t sym = states[t] & ((1u << nb) - 1);
    for (int b = 0; b < nb; ++b) {
      int p = end - nb + b;
      u[p >> 5] |= ((sym >> (nb - 1 - b)) & 1u) << (31 - (p & 31));
    }
  }
  for (int i = 0; i < nw; ++i) {
    words[2 * i] = (uint16_t)(u[i] & 0xFFFF);
    words[2 * i + 1] = (uint16_t)(u[i] >> 16);
  }
}

void decodeTile(const uint16_t *words, Width w, Codebook cb, bool e4m3,
                float out[256]) {
  checkWidth(w, cb);
  const float *table = codebookFloatTable(cb, e4m3);
  uint16_t states[256];
  unpackTileStates(words, w, states);
  for (int t = 0; t < 256; ++t)
    out[permRow(t) * 16 + permCol(t)] = table[states[t]];
}

int64_t tileIndex(TileOrder order, int64_t rows, int64_t cols, int64_t ti,
                  int64_t tj) {
  if (order == TileOrder::RowMajor)
    return ti * (cols / 16) + tj;
  // [cols/128 blocks][rows/16][8]
  return (tj >> 3) * (rows / 16) * 8 + ti * 8 + (tj & 7);
}

static void checkShape(int64_t rows, int64_t cols, TileOrder order) {
  check(rows > 0 && cols > 0 && rows % 16 == 0 && cols % 16 == 0,
        "trellis matrix shape ", rows, " x ", cols,
        " is not a positive multiple of 16 on both sides");
  check(order == TileOrder::RowMajor || order == TileOrder::InMajor128,
        "invalid trellis tile order ", (int)order);
  check(order != TileOrder::InMajor128 || cols % 128 == 0,
        "trellis matrix ", rows, " x ", cols,
        ": in-major-128 tile order needs the output side to be a multiple of "
        "128");
}

void decodeMatrix(const uint16_t *tileWords, int64_t rows, int64_t cols,
                  Width w, Codebook cb, bool e4m3, TileOrder order, float *q) {
  checkShape(rows, cols, order);
  checkWidth(w, cb);
  int64_t tilesR = rows / 16, tilesC = cols / 16;
  int64_t wpt = w.wordsPerTile();
  const float *table = codebookFloatTable(cb, e4m3);
  glm::rt::parallelFor(
      tilesR * tilesC, 256, 0, [&](int64_t begin, int64_t end, int) {
        uint16_t states[256];
        for (int64_t k = begin; k < end; ++k) {
          int64_t ti = k / tilesC, tj = k % tilesC;
          int64_t idx = tileIndex(order, rows, cols, ti, tj);
          unpackTileStates(tileWords + idx * wpt, w, states);
          float *base = q + ti * 16 * cols + tj * 16;
          for (int t = 0; t < 256; ++t)
            base[permRow(t) * cols + permCol(t)] = table[states[t]];
        }
      });
}

} // namespace glm::rt::trellis
