//===- trellis_tile_test.cpp - bit streams, permutation, tile decode ------===//
//
// Checks the tile layer of the trellis codec against independent statements
// of the spec: the §2.3 permutation table, the §2.2 int16 view of the stream,
// exlr8 §5 step 3's state formula, and both tile orders of a matrix.
//
//===----------------------------------------------------------------------===//
#include "runtime/codec/trellis.h"

#include "runtime/base/error.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

using namespace glm::rt;
using namespace glm::rt::trellis;

namespace {
const double kAllWidths[] = {1, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8};

/// The §2.3 table written out: e -> (row offset, col offset) from r0, c0.
TEST(TrellisTile, PermutationMatchesSpecTable) {
  const int rowAdd[8] = {0, 1, 8, 9, 0, 1, 8, 9};
  const int colAdd[8] = {0, 0, 0, 0, 8, 8, 8, 8};
  std::set<int> cells;
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 8; ++e) {
      int t = 8 * lane + e;
      int r0 = 2 * (lane % 4), c0 = lane / 4;
      EXPECT_EQ(permRow(t), r0 + rowAdd[e]) << t;
      EXPECT_EQ(permCol(t), c0 + colAdd[e]) << t;
      cells.insert(permRow(t) * 16 + permCol(t));
    }
  EXPECT_EQ(cells.size(), 256u); // a bijection onto the 16x16 tile
}

TEST(TrellisTile, PositionBits) {
  for (int k = 1; k <= 8; ++k)
    for (int t = 0; t < 256; ++t) {
      EXPECT_EQ(positionEndBit(Width::bits(k), t), (t + 1) * k);
      EXPECT_EQ(positionBits(Width::bits(k), t), k);
    }
  for (int ka = 1; ka <= 3; ++ka) {
    Width w{2 * ka + 1};
    for (int t = 0; t < 256; ++t) {
      int end = t % 2 == 0 ? (t / 2) * (2 * ka + 1) + ka
                           : ((t + 1) / 2) * (2 * ka + 1);
      EXPECT_EQ(positionEndBit(w, t), end);
      EXPECT_EQ(positionBits(w, t), t % 2 ? ka + 1 : ka);
    }
    EXPECT_EQ(positionEndBit(w, 255), w.streamBits());
  }
}

/// The stream as the §2.2 int16 statement gives it: stream bits [32w, 32w+16)
/// are e[2w+1] MSB-first, [32w+16, 32w+32) are e[2w] MSB-first.
int streamBit(const std::vector<uint16_t> &e, int p) {
  int w = p / 32, o = p % 32;
  uint16_t word = o < 16 ? e[2 * w + 1] : e[2 * w];
  return (word >> (15 - o % 16)) & 1;
}
void setStreamBit(std::vector<uint16_t> &e, int p, int v) {
  int w = p / 32, o = p % 32;
  uint16_t &word = o < 16 ? e[2 * w + 1] : e[2 * w];
  word = (uint16_t)(word | (v << (15 - o % 16)));
}

/// The state of position t by the spec's rule: 16 bits ending at its end
/// bit, circular, read MSB-first.
uint16_t refState(const std::vector<uint16_t> &e, Width w, int t) {
  int n = w.streamBits(), end = positionEndBit(w, t);
  uint32_t s = 0;
  for (int b = 16; b >= 1; --b)
    s = (s << 1) | streamBit(e, ((end - b) % n + n) % n);
  return (uint16_t)s;
}

TEST(TrellisTile, UnpackMatchesSpecRuleForAnyBits) {
  std::mt19937 rng(1);
  for (double k : kAllWidths) {
    Width w = Width::fromDouble(k);
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<uint16_t> e(w.wordsPerTile());
      for (auto &x : e)
        x = (uint16_t)rng();
      uint16_t st[256];
      unpackTileStates(e.data(), w, st);
      for (int t = 0; t < 256; ++t)
        ASSERT_EQ(st[t], refState(e, w, t)) << "K=" << k << " t=" << t;
      // Any bit pattern re-packs to itself.
      std::vector<uint16_t> again(w.wordsPerTile(), 0xAAAA);
      packTile(st, w, again.data());
      ASSERT_EQ(again, e) << "K=" << k;
    }
  }
}

/// exlr8 §5 step 3 for integer K: state_j = Σ field[(j−i) mod 256] << iK.
TEST(TrellisTile, UnpackMatchesExlr8Formula) {
  std::mt19937 rng(2);
  for (int k = 1; k <= 8; ++k) {
    Width w = Width::bits(k);
    std::vector<uint16_t> e(w.wordsPerTile());
    for (auto &x : e)
      x = (uint16_t)rng();
    std::vector<uint32_t> field(256);
    for (int j = 0; j < 256; ++j)
      for (int b = 0; b < k; ++b)
        field[j] = (field[j] << 1) | streamBit(e, j * k + b);
    uint16_t st[256];
    unpackTileStates(e.data(), w, st);
    for (int j = 0; j < 256; ++j) {
      uint32_t s = 0;
      for (int i = 0; i * k < 16; ++i)
        s += field[((j - i) % 256 + 256) % 256] << (i * k);
      ASSERT_EQ(st[j], (uint16_t)(s & 0xFFFF)) << "K=" << k << " j=" << j;
    }
  }
}

TEST(TrellisTile, PackUnpackIdentityForCircularPaths) {
  std::mt19937 rng(3);
  for (double k : kAllWidths) {
    Width w = Width::fromDouble(k);
    for (int rep = 0; rep < 20; ++rep) {
      // Random symbols written into the stream independently of packTile.
      std::vector<uint16_t> e(w.wordsPerTile(), 0);
      for (int t = 0; t < 256; ++t) {
        int nb = positionBits(w, t), end = positionEndBit(w, t);
        uint32_t sym = rng() & ((1u << nb) - 1);
        for (int b = 0; b < nb; ++b)
          setStreamBit(e, end - nb + b, (sym >> (nb - 1 - b)) & 1);
      }
      uint16_t states[256];
      for (int t = 0; t < 256; ++t)
        states[t] = refState(e, w, t);
      std::vector<uint16_t> packed(w.wordsPerTile());
      packTile(states, w, packed.data());
      ASSERT_EQ(packed, e) << "K=" << k;
      uint16_t back[256];
      unpackTileStates(packed.data(), w, back);
      for (int t = 0; t < 256; ++t)
        ASSERT_EQ(back[t], states[t]) << "K=" << k << " t=" << t;
    }
  }
}

TEST(TrellisTile, DecodeTilePlacesValuesByPermutation) {
  std::mt19937 rng(4);
  for (bool e4m3 : {false, true})
    for (int c = 0; c < 3; ++c) {
      Codebook cb = (Codebook)c;
      Width w = cb == Codebook::Mul1 ? Width::fromDouble(2.5) : Width::bits(3);
      std::vector<uint16_t> e(w.wordsPerTile());
      for (auto &x : e)
        x = (uint16_t)rng();
      float out[256];
      decodeTile(e.data(), w, cb, e4m3, out);
      for (int t = 0; t < 256; ++t)
        ASSERT_EQ(out[permRow(t) * 16 + permCol(t)],
                  codebookValue(cb, refState(e, w, t), e4m3));
    }
  std::vector<uint16_t> e(Width::fromDouble(1.5).wordsPerTile());
  float out[256];
  EXPECT_THROW(decodeTile(e.data(), Width::fromDouble(1.5), Codebook::Mcg,
                          false, out),
               Error);
}

void checkMatrixOrder(TileOrder order, int64_t rows, int64_t cols) {
  std::mt19937 rng(5);
  Width w = Width::bits(2);
  int64_t tiles = rows / 16 * (cols / 16), wpt = w.wordsPerTile();
  std::vector<uint16_t> blob(tiles * wpt);
  for (auto &x : blob)
    x = (uint16_t)rng();
  std::vector<float> q(rows * cols);
  decodeMatrix(blob.data(), rows, cols, w, Codebook::Mcg, false, order,
               q.data());
  std::set<int64_t> used;
  for (int64_t ti = 0; ti < rows / 16; ++ti)
    for (int64_t tj = 0; tj < cols / 16; ++tj) {
      int64_t idx;
      if (order == TileOrder::RowMajor) {
        idx = ti * (cols / 16) + tj;
      } else { // [b = cols/128][r = rows/16][c = 8]
        int64_t b = tj / 8, c = tj % 8;
        idx = (b * (rows / 16) + ti) * 8 + c;
      }
      EXPECT_EQ(tileIndex(order, rows, cols, ti, tj), idx);
      used.insert(idx);
      float tile[256];
      decodeTile(blob.data() + idx * wpt, w, Codebook::Mcg, false, tile);
      for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c)
          ASSERT_EQ(q[(ti * 16 + r) * cols + tj * 16 + c], tile[r * 16 + c]);
    }
  EXPECT_EQ((int64_t)used.size(), tiles);
}

TEST(TrellisTile, DecodeMatrixRowMajor) {
  checkMatrixOrder(TileOrder::RowMajor, 64, 48);
  checkMatrixOrder(TileOrder::RowMajor, 512, 1024); // multi-threaded size
}

TEST(TrellisTile, DecodeMatrixInMajor128) {
  checkMatrixOrder(TileOrder::InMajor128, 128, 384);
  checkMatrixOrder(TileOrder::InMajor128, 512, 1024);
}

TEST(TrellisTile, DecodeMatrixRejectsBadShapes) {
  std::vector<uint16_t> blob(16 * 2 * 100);
  std::vector<float> q(64 * 64);
  EXPECT_THROW(decodeMatrix(blob.data(), 20, 16, Width::bits(2), Codebook::Mcg,
                            false, TileOrder::RowMajor, q.data()),
               Error);
  EXPECT_THROW(decodeMatrix(blob.data(), 16, 48, Width::bits(2), Codebook::Mcg,
                            false, TileOrder::InMajor128, q.data()),
               Error);
}
} // namespace
