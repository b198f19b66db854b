//===- moe_trellis_twin.cpp - CPU twin of the moe_trellis family ----------===//
//
// One launch of codegen/templates/moe_trellis.cuh (stage gu or down, full
// grid or persistent path) on the host: the same units (distinct routed
// experts in first-appearance order, then the shared experts), the same
// scratch slots and layouts (gate/up split-k partials, act, down partials),
// the same fp32 element arithmetic (su scaling, fp16 hi + lo activation
// split, split-k sums in chunk order, Hadamard butterflies, SwiGLU, routing
// weights, the ordered slot/group reduction, H * signs.out, accumulate), so
// that stage down of the twin reads the act that stage gu of the twin wrote.
//
// What differs from CUDA, and the tolerance it gives: the tensor cores add
// the exact products w * hi and w * lo of one warp item in fp32 in hardware
// order; the twin adds them in fp64 and rounds each of the two sums to fp32
// once (HiLoSum). Everything after those item sums is the kernel's fp32
// arithmetic in the kernel's order (expf is the host's: <= 2 ulp apart).
// Measured against float64 the kernel stays within 1e-4 of max|out| on
// GLM-5.3 shapes (tests/gpu/moe_trellis_gpu_test.cpp); CUDA against this
// twin is held to max|cuda - twin| <= 2e-5 * max|twin| there, i.e. fp32
// accumulation error of up to 384 k16 steps per item, not a format error.
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/families.h"
#include "runtime/twins/twin_common.h"

#include "runtime/base/parallel.h"

#include <array>
#include <cmath>
#include <vector>

namespace glm::rt::twins {

namespace {

// GLM_MOE_TRELLIS_PARAMS, in order.
enum MoeArg {
  kXh,
  kIds,
  kRouteW,
  kTiles,
  kWidths,
  kGuSvh,
  kGuSuBlock,
  kDownSuh,
  kDownSvBlock,
  kDownSvh,
  kSignsOut,
  kScratch,
  kCounters,
  kOut,
  kBatch,
  kTopk,
  kNRouted,
  kNShared,
  kHidden,
  kInter,
  kXhRowStride,
  kXhSlotStride,
  kXhProjStride,
  kGuSI,
  kGuSI8,
  kDownSI,
  kDownSJ8,
  kGuSplit,
  kDownGroup,
  kAccumulate,
  kSwigluLimit,
  kNumArgs
};

/// A unit: one distinct expert and the slot q = b*(topk + n_shared) + k of
/// every batch row that chose it (-1 = not chosen), with its weight.
struct Unit {
  int e = 0;
  std::array<int, 8> q{};
  std::array<float, 8> w{};
};

/// findUnit/buildUnitTable: routed ids in [0, n_routed) in first
/// appearance over the row-major [batch][topk] ids, then the shared experts
/// (slot topk + j, weight 1); a row's slot is its first k of that expert.
std::vector<Unit> moeUnits(const int *ids, const float *routeW, int batch,
                           int topk, int nRouted, int nShared) {
  std::vector<Unit> units;
  const int nSlot = topk + nShared;
  for (int t = 0; t < batch * topk; ++t) {
    const int id = ids[t];
    if (id < 0 || id >= nRouted)
      continue;
    bool seen = false;
    for (const Unit &u : units)
      seen |= u.e == id;
    if (seen)
      continue;
    Unit u;
    u.e = id;
    for (int b = 0; b < 8; ++b) {
      u.q[b] = -1;
      u.w[b] = 0.0f;
      if (b >= batch)
        continue;
      for (int k = 0; k < topk; ++k)
        if (ids[b * topk + k] == id) {
          u.q[b] = b * nSlot + k;
          u.w[b] = routeW[b * topk + k];
          break;
        }
    }
    units.push_back(u);
  }
  for (int j = 0; j < nShared; ++j) {
    Unit u;
    u.e = nRouted + j;
    for (int b = 0; b < 8; ++b) {
      u.q[b] = b < batch ? b * nSlot + topk + j : -1;
      u.w[b] = b < batch ? 1.0f : 0.0f;
    }
    units.push_back(u);
  }
  return units;
}

struct MoeLaunch {
  const Launch &l;
  int wmask = 0, batchT = 1, svt = 0;
  trellis::Codebook cb = trellis::Codebook::Mcg;
  bool e4m3 = false, down = false, persist = false;
  int batch, topk, nRouted, nShared, hidden, inter, split, group;
  int sum = 0; // template sum (stage down): 0 f32, 1 fixed, 2 fixed_out
  int nSlot, Q, nBlk, eTot;
  const unsigned char *const *tiles;
  const unsigned char *widths;
  float *scratch;

  explicit MoeLaunch(const Launch &launch) : l(launch) {
    check(l.args.size() == kNumArgs, "twin of moe_trellis: ", l.args.size(),
          " arguments, the family takes ", int(kNumArgs));
    wmask = widthMaskArg(l);
    cb = codebookArg(l);
    e4m3 = boolArg(l, "e4m3");
    batchT = l.targInt("batch");
    svt = storageId(l, "sv");
    const std::string &stage = l.targ("stage");
    check(stage == "gu" || stage == "down" || stage == "gu_persist" ||
              stage == "down_persist",
          "twin of moe_trellis: unknown stage '", stage, "'");
    down = stage.rfind("down", 0) == 0;
    persist = stage.find("_persist") != std::string::npos;
    batch = l.i32(kBatch), topk = l.i32(kTopk), nRouted = l.i32(kNRouted);
    nShared = l.i32(kNShared), hidden = l.i32(kHidden), inter = l.i32(kInter);
    split = l.i32(kGuSplit), group = l.i32(kDownGroup);
    sum = l.sumMode();
    check(!(sum == 2 && down && l.args[kSignsOut].p),
          "twin of moe_trellis: sum=fixed_out with signs_out (the output "
          "Hadamard follows the all-reduce): CUDA traps");
    // The kernel's trap conditions.
    check(inter == 16 * 128 && hidden > 0 && hidden % 128 == 0 && batch >= 1 &&
              batch <= batchT && batch * topk <= 64 && split >= 1 &&
              (hidden / 16) % split == 0 && group >= 1 && 16 % group == 0 &&
              nShared >= 0 && topk >= 0,
          "twin of moe_trellis: launch violates the kernel's preconditions "
          "(inter ",
          inter, ", hidden ", hidden, ", batch ", batch, " of ", batchT,
          ", topk ", topk, ", gu_split ", split, ", down_group ", group,
          "): CUDA traps");
    nSlot = topk + nShared;
    Q = batch * nSlot;
    nBlk = hidden / 128;
    eTot = nRouted + nShared;
    tiles = l.ptr<const unsigned char *const>(kTiles);
    widths = l.ptr<const unsigned char>(kWidths);
    scratch = l.ptr<float>(kScratch);
  }
  float *guPart() const { return scratch; }
  float *act() const { return scratch + int64_t(Q) * 32 * split * 128; }
  float *downPart() const { return act() + int64_t(Q) * 16 * 128; }
  const unsigned char *tile(int e, int p, int h) const {
    return tiles[(e * 3 + p) * 16 + h];
  }
  bool owned(int e, int h) const {
    return tile(e, 0, h) && tile(e, 1, h) && tile(e, 2, h);
  }
  /// The width of a half; a width outside WMASK traps in CUDA.
  int width(int e, int p, int h) const {
    const int k = widths[(e * 3 + p) * 16 + h];
    check(k >= 1 && k <= 8 && (wmask >> k & 1), "twin of moe_trellis: half ", h,
          " of projection ", p, " of expert ", e, " has width ", k,
          ", not in the kernel's widths ", l.targ("widths"), ": CUDA traps");
    return k;
  }
};

/// Stage gu for unit `un`, half h: the split-k partials of gate and up
/// (moeGateUp's stores) and the last item's act (its tail).
void gateUpHalf(const MoeLaunch &m, const Unit &un, int h) {
  const Launch &l = m.l;
  const float *xh = l.ptr<const float>(kXh);
  const int e = un.e, rowsPer = m.hidden / 16 / m.split;
  const int rowStride = l.i32(kXhRowStride), slotStride = l.i32(kXhSlotStride),
            projStride = l.i32(kXhProjStride);
  const void *suAll = l.args[kGuSuBlock].p;
  float w[256];
  for (int p = 0; p < 2; ++p) {
    const unsigned char *half = m.tile(e, p, h);
    const int k = m.width(e, p, h);
    for (int s = 0; s < m.split; ++s) {
      HiLoSum acc[8][128];
      for (int i = s * rowsPer; i < (s + 1) * rowsPer; ++i) {
        const float su =
            optAt(suAll, m.svt, int64_t(p * m.eTot + e) * m.nBlk + (i >> 3));
        // This tile row's scaled activations, split as the B fragments.
        float hi[8][16], lo[8][16];
        for (int b = 0; b < m.batch; ++b) {
          if (un.q[b] < 0)
            continue;
          const float *x = xh + int64_t(b) * rowStride +
                           int64_t(un.q[b] - b * m.nSlot) * slotStride +
                           int64_t(p) * projStride + 16 * i;
          for (int r = 0; r < 16; ++r)
            splitHiLo(x[r] * su, hi[b][r], lo[b][r]);
        }
        for (int c = 0; c < 8; ++c) {
          decodeTileAt(half, tileIndex(i, c, l.i32(kGuSI), l.i32(kGuSI8), 0), k,
                       m.cb, m.e4m3, w);
          for (int b = 0; b < m.batch; ++b) {
            if (un.q[b] < 0)
              continue;
            for (int col = 0; col < 16; ++col) {
              HiLoSum &a = acc[b][16 * c + col];
              for (int r = 0; r < 16; ++r) {
                a.hi += double(w[16 * r + col]) * hi[b][r];
                a.lo += double(w[16 * r + col]) * lo[b][r];
              }
            }
          }
        }
      }
      for (int b = 0; b < m.batch; ++b) {
        if (un.q[b] < 0)
          continue;
        float *dst =
            m.guPart() +
            (((int64_t(un.q[b]) * 2 + p) * 16 + h) * m.split + s) * 128;
        for (int j = 0; j < 128; ++j)
          dst[j] = acc[b][j].value();
      }
    }
  }

  // The tail (moeGateUp after arriveLast / guFinish): split-k partials in
  // chunk order, output Hadamard * svh, SwiGLU * down.suh, input Hadamard.
  const void *svh = l.args[kGuSvh].p, *dsuh = l.args[kDownSuh].p;
  for (int b = 0; b < m.batch; ++b) {
    const int q = un.q[b];
    if (q < 0)
      continue;
    float gu[2][128];
    for (int p = 0; p < 2; ++p) {
      const float *src =
          m.guPart() + ((int64_t(q) * 2 + p) * 16 + h) * m.split * 128;
      float v[128];
      for (int j = 0; j < 128; ++j) {
        float sum = src[j];
        for (int s = 1; s < m.split; ++s)
          sum += src[s * 128 + j];
        v[j] = sum;
      }
      hadamard128F32(v);
      for (int j = 0; j < 128; ++j)
        gu[p][j] =
            v[j] * kInvSqrt128 *
            optAt(svh, m.svt, int64_t(p * m.eTot + e) * m.inter + 128 * h + j);
    }
    float a[128];
    for (int j = 0; j < 128; ++j) {
      float g = gu[0][j], u = gu[1][j];
      clampSwiglu(g, u, l.f32(kSwigluLimit));
      a[j] = g / (1.0f + std::exp(-g)) * u *
             optAt(dsuh, m.svt, int64_t(e) * m.inter + 128 * h + j);
    }
    hadamard128F32(a);
    float *dst = m.act() + (int64_t(q) * 16 + h) * 128;
    for (int j = 0; j < 128; ++j)
      dst[j] = a[j] * kInvSqrt128;
  }
}

/// Stage down for unit `un`, output block blk, halves [h0, h1): the scaled
/// partial of every row of the unit at down-partial group gi of `nGroup`.
void downItem(const MoeLaunch &m, const Unit &un, int blk, int h0, int h1,
              int gi, int nGroup) {
  const Launch &l = m.l;
  const int e = un.e;
  HiLoSum acc[8][128];
  float w[256];
  for (int h = h0; h < h1; ++h) {
    if (!m.owned(e, h))
      continue;
    const unsigned char *half = m.tile(e, 2, h);
    const int k = m.width(e, 2, h);
    for (int r = 0; r < 8; ++r) {
      float hi[8][16], lo[8][16];
      for (int b = 0; b < m.batch; ++b) {
        if (un.q[b] < 0)
          continue;
        const float *x = m.act() + (int64_t(un.q[b]) * 16 + h) * 128 + 16 * r;
        for (int rr = 0; rr < 16; ++rr)
          splitHiLo(x[rr], hi[b][rr], lo[b][rr]);
      }
      for (int c = 0; c < 8; ++c) {
        decodeTileAt(
            half, tileIndex(r, 8 * blk + c, l.i32(kDownSI), 0, l.i32(kDownSJ8)),
            k, m.cb, m.e4m3, w);
        for (int b = 0; b < m.batch; ++b) {
          if (un.q[b] < 0)
            continue;
          for (int col = 0; col < 16; ++col) {
            HiLoSum &a = acc[b][16 * c + col];
            for (int rr = 0; rr < 16; ++rr) {
              a.hi += double(w[16 * rr + col]) * hi[b][rr];
              a.lo += double(w[16 * rr + col]) * lo[b][rr];
            }
          }
        }
      }
    }
  }
  const void *svb = l.args[kDownSvBlock].p, *svh = l.args[kDownSvh].p;
  for (int b = 0; b < m.batch; ++b) {
    const int q = un.q[b];
    if (q < 0)
      continue;
    const int64_t dst = ((int64_t(blk) * m.Q + q) * nGroup + gi) * 128;
    float v[128];
    if (svh) { // EXL3: H(z) * svh * w
      for (int j = 0; j < 128; ++j)
        v[j] = acc[b][j].value();
      hadamard128F32(v);
      for (int j = 0; j < 128; ++j)
        v[j] = v[j] * kInvSqrt128 *
               storageAt(svh, m.svt, int64_t(e) * m.hidden + 128 * blk + j) *
               un.w[b];
    } else { // exlr8: z * sv_block * w (pre-Hadamard)
      const float sc = optAt(svb, m.svt, int64_t(e) * m.nBlk + blk) * un.w[b];
      for (int j = 0; j < 128; ++j)
        v[j] = acc[b][j].value() * sc;
    }
    for (int j = 0; j < 128; ++j)
      if (m.sum) // the partials are int64 (storeDownPart)
        reinterpret_cast<long long *>(m.downPart())[dst + j] = toFixed(v[j]);
      else
        m.downPart()[dst + j] = v[j];
  }
}

/// Stage down's tail for output block blk: rows, slots ascending (empty
/// slots and repeats of an earlier slot's expert skipped), the partials of
/// each slot in `parts` order, then H * signs.out, then out (+=).
template <class PartsFn>
void downTail(const MoeLaunch &m, int blk, PartsFn parts) {
  const Launch &l = m.l;
  const int *ids = l.ptr<const int>(kIds);
  const float *signs = l.ptr<const float>(kSignsOut);
  float *out = l.ptr<float>(kOut);
  const bool accumulate = l.i32(kAccumulate) != 0;
  for (int b = 0; b < m.batch; ++b) {
    float v[128] = {};
    long long fx[128] = {};
    for (int k = 0; k < m.nSlot; ++k) {
      if (k < m.topk) {
        const int id = ids[b * m.topk + k];
        bool skip = id < 0 || id >= m.nRouted;
        for (int k2 = 0; k2 < k; ++k2)
          skip |= ids[b * m.topk + k2] == id;
        if (skip)
          continue;
      }
      parts(b, k, v, fx);
    }
    float *o = out + int64_t(b) * m.hidden + 128 * blk;
    if (m.sum == 2) {
      long long *d = reinterpret_cast<long long *>(out) + int64_t(b) * m.hidden +
                     128 * blk;
      for (int j = 0; j < 128; ++j)
        d[j] = accumulate ? d[j] + fx[j] : fx[j];
      continue;
    }
    if (m.sum)
      for (int j = 0; j < 128; ++j)
        v[j] = fromFixed(fx[j]);
    if (signs) {
      hadamard128F32(v);
      for (int j = 0; j < 128; ++j)
        v[j] *= kInvSqrt128 * signs[128 * blk + j];
    }
    for (int j = 0; j < 128; ++j)
      o[j] = accumulate ? v[j] + o[j] : v[j];
  }
}

} // namespace

void moeTrellisTwin(const Launch &l) {
  const MoeLaunch m(l);
  const int warps = int(l.block[0]) / 32;
  check(warps >= 1 && l.block[0] % 32 == 0, "twin of moe_trellis: block ",
        l.block[0], " is not whole warps");
  const int *ids = l.ptr<const int>(kIds);
  const std::vector<Unit> units = moeUnits(
      ids, l.ptr<const float>(kRouteW), m.batch, m.topk, m.nRouted, m.nShared);
  const int maxUnits = m.batch * m.topk + m.nShared;
  const int64_t items = m.down ? int64_t(maxUnits) * m.nBlk * (16 / m.group)
                               : int64_t(maxUnits) * 32 * m.split;
  const bool full = int64_t(l.grid[0]) >= (items + warps - 1) / warps;
  check(full || (m.persist && l.targInt("pipe") >= 2 && maxUnits <= 72 &&
                 m.group == 1),
        "twin of moe_trellis: a grid of ", l.grid[0],
        " blocks is below the one-item-per-warp grid and the launch cannot "
        "take the persistent path (stage ",
        l.targ("stage"), ", pipe ", l.targ("pipe"), ", ", maxUnits,
        " units, down_group ", m.group, "): CUDA traps");
  // moeTablePairs: E4M3 instances of 256+ threads on stages gu/down decode
  // through a shared-memory table (moeTrellisDynSmem bytes, else a trap).
  if (full && m.e4m3 && warps * 32 >= 256 && !m.persist)
    check(l.smemBytes >= 65536 + 16,
          "twin of moe_trellis: the E4M3 decode-table instance needs ",
          65536 + 16, " bytes of dynamic shared memory, the launch passes ",
          l.smemBytes, ": CUDA traps");
  const int nU = int(units.size());

  if (!m.down) {
    parallelFor(int64_t(nU) * 16, 1, 0, [&](int64_t b0, int64_t b1, int) {
      for (int64_t it = b0; it < b1; ++it) {
        const Unit &un = units[it / 16];
        const int h = int(it % 16);
        if (m.owned(un.e, h))
          gateUpHalf(m, un, h);
      }
    });
    return;
  }

  // Down: every item stores its partial, then each block's tail sums them.
  // Full grid: items (unit, blk, group of down_group halves), groups of no
  // owned half store zeros; persistent path: (unit, blk, owned half).
  const int nGroup = 16 / m.group;
  const int perUnit = m.persist && !full ? 16 : nGroup;
  int owned = 0;
  for (const Unit &un : units)
    for (int h = 0; h < 16; ++h)
      owned += m.owned(un.e, h);
  float *out = l.ptr<float>(kOut);
  if (full ? nU == 0 : owned == 0) {
    // Full grid without units: no item arrives, out is left as it is.
    // Persistent path without owned halves: out = 0 (+ out).
    if (!full && l.i32(kAccumulate) == 0) {
      if (m.sum == 2)
        std::fill_n(reinterpret_cast<long long *>(out),
                    int64_t(m.batch) * m.hidden, 0LL);
      else
        std::fill(out, out + int64_t(m.batch) * m.hidden, 0.0f);
    }
    return;
  }
  parallelFor(
      int64_t(nU) * m.nBlk * perUnit, 1, 0, [&](int64_t b0, int64_t b1, int) {
        for (int64_t it = b0; it < b1; ++it) {
          const Unit &un = units[it / (int64_t(m.nBlk) * perUnit)];
          const int blk = int(it / perUnit % m.nBlk);
          const int g = int(it % perUnit);
          if (full)
            downItem(m, un, blk, g * m.group, (g + 1) * m.group, g, nGroup);
          else if (m.owned(un.e, g))
            downItem(m, un, blk, g, g + 1, g, 16);
        }
      });
  parallelFor(m.nBlk, 1, 0, [&](int64_t b0, int64_t b1, int) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const float *base = m.downPart() + blk * m.Q * int64_t(perUnit) * 128;
      downTail(m, int(blk), [&](int b, int k, float *v, long long *fx) {
        const int64_t at = int64_t(b * m.nSlot + k) * perUnit * 128;
        const float *src = base + at;
        const long long *srcFx = reinterpret_cast<const long long *>(
                                     m.downPart()) +
                                 blk * m.Q * int64_t(perUnit) * 128 + at;
        auto add = [&](int p) { // partial p of the slot
          for (int j = 0; j < 128; ++j)
            if (m.sum)
              fx[j] += srcFx[p * 128 + j];
            else
              v[j] += src[p * 128 + j];
        };
        if (full) {
          for (int g = 0; g < nGroup; ++g)
            add(g);
          return;
        }
        // Persistent: the owned halves of the slot's unit, ascending.
        const Unit *un = nullptr;
        for (const Unit &x : units)
          if (x.q[b] == b * m.nSlot + k)
            un = &x;
        if (!un)
          return;
        for (int h = 0; h < 16; ++h)
          if (m.owned(un->e, h))
            add(h);
      });
    }
  });
}

} // namespace glm::rt::twins
