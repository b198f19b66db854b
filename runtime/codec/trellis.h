//===- trellis.h - the EXL3 / exlr8 trellis codec on the CPU --------------===//
//
// The reference implementation of everything a trellis pack stores: codebooks
// (3INST, MCG, MUL1) from their closed forms, 16-bit tail-biting windows for
// K = 1..8 and the half-integer MUL1 widths 1.5/2.5/3.5, the m16n8k16
// tensor-core permutation, tile pack/unpack, block Hadamard-128, reconstruction
// W = diag(suh)·H·Q·H·diag(svh) in exllamav3's order, E4M3 rounding at the
// exlr8 point, and a Hessian-free tail-biting two-pass Viterbi encoder.
// Facts: shared/specs/exl3-format.md §1–3, §7, §9; exlr8-format.md §5.
//
// Thread-safety: every function is pure or writes only its outputs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <vector>

namespace glm::rt::trellis {

enum class Codebook : uint8_t { ThreeInst = 0, Mcg = 1, Mul1 = 2 };
const char *codebookName(Codebook cb); // "3inst" | "mcg" | "mul1"
/// Parses "3inst"/"mcg"/"mul1" (case-insensitive); throws Error otherwise.
Codebook parseCodebook(const char *name);

/// Bits per weight. Integer K = 1..8, or K = KA + 1/2 (KA = 1..3, MUL1 only):
/// stored as twice the width so 2.5 is exact.
struct Width {
  int twiceBits = 8; // K = twiceBits / 2
  static Width bits(int k) { return Width{2 * k}; }
  /// From a float width (2, 3.5, ...); throws Error if not representable.
  static Width fromDouble(double k);
  double value() const { return twiceBits / 2.0; }
  bool isHalfInteger() const { return twiceBits & 1; }
  /// int16 words per 16x16 tile = 16·K; bytes per tile = 32·K.
  int wordsPerTile() const { return 8 * twiceBits; }
  int bytesPerTile() const { return 16 * twiceBits; }
  /// Bits of the tile's circular stream = 256·K.
  int streamBits() const { return 128 * twiceBits; }
  bool operator==(Width o) const { return twiceBits == o.twiceBits; }
};

constexpr int kTilePositions = 256;

/// fp16 bit pattern of codebook value for a 16-bit state (closed forms).
uint16_t codebookHalfBits(Codebook cb, uint32_t state);
/// The 65536-entry fp16 table of a codebook (built once, thread-safe).
const uint16_t *codebookTable(Codebook cb);
/// Codebook value as float, optionally followed by the exlr8 E4M3 rounding.
float codebookValue(Codebook cb, uint32_t state, bool e4m3 = false);
/// The 65536 codebook values as floats (after E4M3 rounding when `e4m3`);
/// built once, thread-safe. Handy for executors that decode by table lookup.
const float *codebookFloatTable(Codebook cb, bool e4m3);
/// Standard deviation of the codebook over all states (the RMS an encoder
/// scales its targets to): 1.24371088 for 3INST/MCG, ~1.0003 for MUL1.
double codebookStd(Codebook cb);
/// Throws Error unless `w` is a valid width (K = 1..8, or 1.5/2.5/3.5) usable
/// with `cb` (half-integer widths are MUL1 only). `what` names the tensor.
void checkWidth(Width w, Codebook cb, const char *what = "trellis tensor");

/// Trellis position t (0..255) -> row (input, k offset) and column (output,
/// n offset) inside the 16x16 tile (the m16n8k16 B-fragment order).
inline int permRow(int t) {
  int lane = t >> 3, e = t & 7;
  return 2 * (lane & 3) + (e & 1) + 8 * ((e >> 1) & 1);
}
inline int permCol(int t) {
  int lane = t >> 3, e = t & 7;
  return (lane >> 2) + 8 * (e >> 2);
}

/// Bit index (exclusive end) in the tile stream of position t's symbol.
int positionEndBit(Width w, int t);
/// Number of bits of position t's symbol (K, or KA / KA+1 for half widths).
int positionBits(Width w, int t);

/// Unpacks one tile: `words` holds wordsPerTile() little-endian int16 as
/// stored; writes the 16-bit state of each of the 256 positions.
void unpackTileStates(const uint16_t *words, Width w, uint16_t states[256]);
/// Packs one tile from its 256 states (only each position's own low bits are
/// stored; a consistent circular path reproduces the states exactly).
void packTile(const uint16_t states[256], Width w, uint16_t *words);

/// Decodes one tile to a 16x16 row-major block (out[row*16 + col]).
void decodeTile(const uint16_t *words, Width w, Codebook cb, bool e4m3,
                float out[256]);

/// How tiles are ordered in a trellis blob of a (rows x cols) matrix
/// (rows = input side k, cols = output side n).
enum class TileOrder : uint8_t {
  RowMajor = 0,     // EXL3 and exlr8 gate/up halves: tile (i, j) at i*(cols/16)+j
  InMajor128 = 1,   // exlr8 down halves / side-2 slices: [cols/128][rows/16][8]
};

/// Index of tile (ti, tj) (rows 16ti.., cols 16tj..) in a blob of the given
/// order. InMajor128 needs cols % 128 == 0.
int64_t tileIndex(TileOrder order, int64_t rows, int64_t cols, int64_t ti,
                  int64_t tj);

/// Decodes a whole blob into Q (rows x cols, row-major). `tileWords` must hold
/// (rows/16)·(cols/16)·wordsPerTile() int16 words. Multi-threaded.
void decodeMatrix(const uint16_t *tileWords, int64_t rows, int64_t cols,
                  Width w, Codebook cb, bool e4m3, TileOrder order, float *q);

/// In place: each 128-row block of every column times H128/sqrt(128)
/// (left multiply by block-diagonal H). rows % 128 == 0.
void hadamardRows(float *m, int64_t rows, int64_t cols);
/// In place: each 128-column block of every row times H128/sqrt(128)
/// (right multiply). cols % 128 == 0.
void hadamardCols(float *m, int64_t rows, int64_t cols);

/// W = diag(suh)·H·Q·H·diag(svh) in exllamav3's order (rows of Q by H, scale
/// rows by suh, columns by H, scale columns by svh), in place on q (rows x
/// cols, in x out). suh: rows floats, svh: cols floats.
void reconstructInPlace(float *q, int64_t rows, int64_t cols, const float *suh,
                        const float *svh);

/// Result of quantizing one matrix (rows x cols, in x out).
struct Quantized {
  std::vector<uint16_t> tileWords; // in the requested TileOrder
  std::vector<float> suh;          // rows (fp16-representable values)
  std::vector<float> svh;          // cols (fp16-representable values)
};

struct EncodeOptions {
  Width width = Width::bits(4);
  Codebook codebook = Codebook::Mcg;
  bool e4m3 = false;            // apply the exlr8 rounding inside Viterbi
  TileOrder order = TileOrder::RowMajor;
  uint64_t seed = 0;            // random sign seed
  int threads = 0;              // 0 = hardware concurrency
  /// Optional fixed input-side signs (exlr8: per-layer signs.in shared by all
  /// experts). Empty = random from seed.
  std::vector<float> inSigns, outSigns;
};

/// Hessian-free quantization (exl3-format.md §7.3): signs, Hadamard both
/// sides, scale to the codebook RMS, tail-biting two-pass Viterbi per tile.
/// `w` is rows x cols (in x out), row-major. rows, cols % 128 == 0.
Quantized quantizeMatrix(const float *w, int64_t rows, int64_t cols,
                         const EncodeOptions &opt);

/// Viterbi on one tile: targets in trellis-position order (target[t] for
/// position t); writes the chosen circular states and returns the squared
/// error. Exposed for tests.
double viterbiTile(const float target[256], Width w, Codebook cb, bool e4m3,
                   uint16_t states[256]);

/// The Viterbi DP kernel in use: "avx512", "avx2" or "portable" (the best the
/// CPU supports is chosen at run time).
const char *viterbiKernel();
/// Forces a kernel ("auto" = best available) for tests and benchmarks;
/// returns false (and changes nothing) when the CPU lacks it.
bool setViterbiKernel(const char *name);

} // namespace glm::rt::trellis
