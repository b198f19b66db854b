//===- twin_mla.cpp - twins of the absorbed MLA families ------------------===//
//
// mla_attn (fp64, one launch), mla_qabs, mla_core (or its split:
// mla_scores, mla_softmax, mla_values) and mla_out (fp32
// products, warp and block sums in the kernels' orders). The order of a
// kernel's sums depends on its path (the chunked path when hx::vecOk, else
// the scalar one) and its block size; each twin walks the same lanes, warps
// and row groups. Only the softmax's exp (fp64) may differ from CUDA's in a
// last bit.
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/helper_twins.h"
#include "runtime/twins/kv_rows.h"
#include "codegen/templates/mla_split_layout.cuh"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace glm::rt::twins {

// mla_attn(qAll, kvBT, cache, seq, selAll, nselp, pAll, maxCtx, ovAll,
// heads, H, dn, dr, dv, kvr, scale); grid (nHeads, B); template kv: the
// cache's form (kv_rows.h).
void mlaAttnTwin(const Launch &l) {
  const float *qAll = l.ptr<const float>(0), *kvBT = l.ptr<const float>(1);
  const void *cache = l.ptr<const void>(2);
  const int *seq = l.ptr<const int>(3), *selAll = l.ptr<const int>(4),
            *nselp = l.ptr<const int>(5);
  double *pAll = l.ptr<double>(6);
  const int maxCtx = l.i32(7);
  float *ovAll = l.ptr<float>(8);
  const int *heads = l.ptr<const int>(9);
  const int H = l.i32(10), dn = l.i32(11), dr = l.i32(12), dv = l.i32(13),
            kvr = l.i32(14);
  const double scale = l.args.at(15).f;
  const int lat = kvr + dr, R = H * (dn + dv);
  std::vector<double> qabs(kvr), ctx(kvr);
  KvRows rows(cache, l.kvForm(), lat);
  for (uint32_t b = 0; b < l.grid[1]; ++b)
    for (uint32_t bx = 0; bx < l.grid[0]; ++bx) {
      const int h = heads[bx], n = nselp[b];
      const float *qn = qAll + ((int64_t)b * H + h) * (dn + dr), *qp = qn + dn;
      const int64_t r0 = (int64_t)seq[b] * maxCtx;
      const int *sel = selAll + (int64_t)b * maxCtx;
      double *p = pAll + ((int64_t)b * H + h) * maxCtx;
      for (int c = 0; c < kvr; ++c) {
        double a = 0;
        for (int i = 0; i < dn; ++i)
          a += (double)kvBT[(int64_t)c * R + (int64_t)h * (dn + dv) + i] *
               (double)qn[i];
        qabs[c] = a;
      }
      for (int j = 0; j < n; ++j) {
        const float *ent = rows.row(r0 + sel[j]);
        double a = 0, bb = 0;
        for (int c = 0; c < kvr; ++c)
          a += (double)ent[c] * qabs[c];
        for (int c = 0; c < dr; ++c)
          bb += (double)ent[kvr + c] * (double)qp[c];
        p[j] = (a + bb) * scale;
      }
      double mx = n > 0 ? p[0] : 0.0;
      for (int j = 1; j < n; ++j)
        mx = p[j] > mx ? p[j] : mx;
      for (int j = 0; j < n; ++j)
        p[j] = std::exp(p[j] - mx);
      double sum = 0;
      for (int j = 0; j < n; ++j)
        sum += p[j];
      for (int j = 0; j < n; ++j)
        p[j] /= sum;
      for (int c = 0; c < kvr; ++c) {
        double a = 0;
        for (int j = 0; j < n; ++j)
          a += p[j] * (double)rows.row(r0 + sel[j])[c];
        ctx[c] = a;
      }
      float *ov = ovAll + (int64_t)b * H * dv;
      for (int j = 0; j < dv; ++j) {
        const int64_t row = (int64_t)h * (dn + dv) + dn + j;
        double a = 0;
        for (int c = 0; c < kvr; ++c)
          a += (double)kvBT[(int64_t)c * R + row] * ctx[c];
        ov[(int64_t)h * dv + j] = (float)a;
      }
    }
}

// mla_qabs(qAll, W, dt, scale, sk, heads, qabsAll, H, dn, dr, dv, kvr);
// grid (nHeads * ceil(kvr/32), B), block nt (1..8 warps).
void mlaQabsTwin(const Launch &l) {
  const float *qAll = l.ptr<const float>(0);
  const void *W = l.ptr<const void>(1);
  const int dt = l.i32(2);
  const void *scale = l.ptr<const void>(3);
  const int sk = l.i32(4);
  const int *heads = l.ptr<const int>(5);
  float *qabsAll = l.ptr<float>(6);
  const int H = l.i32(7), dn = l.i32(8), dr = l.i32(9), dv = l.i32(10),
            kvr = l.i32(11);
  const int nt = (int)l.block[0], nw = nt / 32;
  const int chunks = (kvr + 31) / 32;
  const bool vec = hx::vecOk(W, dt, sk, kvr);
  for (uint32_t b = 0; b < l.grid[1]; ++b)
    for (uint32_t bx = 0; bx < l.grid[0]; ++bx) {
      const int h = heads[bx / chunks], cbase = (int)(bx % chunks) * 32;
      const float *qn = qAll + ((int64_t)b * H + h) * (dn + dr);
      const int64_t o0 = (int64_t)h * (dn + dv);
      float *out = qabsAll + ((int64_t)b * H + h) * kvr + cbase;
      float part[8][32] = {};
      if (vec) {
        // Thread t: chunk t % P (N columns), rows t/P, t/P + R, .. in order.
        const int N = dt == 3 ? 16 : dt == 0 ? 4 : 8, P = 32 / N, R = nt / P;
        std::vector<float> acc((size_t)nt * N, 0.0f);
        for (int t = 0; t < nt; ++t) {
          const int chunk = t % P, rl = t / P, c0 = cbase + chunk * N;
          for (int r = rl; r < dn; r += R)
            for (int k = 0; k < N; ++k)
              acc[(size_t)t * N + k] +=
                  hx::ldWT(W, dt, scale, sk, o0 + r, c0 + k, kvr) * qn[r];
        }
        // The shuffle fold over each warp's row lanes (offsets P .. 16).
        for (int w = 0; w < nw; ++w) {
          float *a = acc.data() + (size_t)32 * w * N; // [lane][N]
          std::vector<float> nb(32 * (size_t)N);
          for (int off = P; off < 32; off <<= 1) {
            for (int lane = 0; lane < 32; ++lane)
              for (int k = 0; k < N; ++k)
                nb[(size_t)lane * N + k] =
                    a[(size_t)lane * N + k] + a[(size_t)(lane ^ off) * N + k];
            std::memcpy(a, nb.data(), nb.size() * sizeof(float));
          }
          for (int lane = 0; lane < P; ++lane)
            for (int k = 0; k < N; ++k)
              part[w][lane * N + k] = a[(size_t)lane * N + k];
        }
        for (int lane = 0; lane < 32; ++lane) {
          float s = 0.0f;
          for (int k = 0; k < nw; ++k)
            s += part[k][lane];
          out[lane] = s;
        }
        continue;
      }
      for (int lane = 0; lane < 32; ++lane) {
        const int c = cbase + lane;
        if (c >= kvr)
          continue;
        float s = 0.0f;
        for (int w = 0; w < nw; ++w) {
          float a = 0.0f;
          for (int i = w; i < dn; i += nw)
            a += hx::ldWT(W, dt, scale, sk, o0 + i, c, kvr) * qn[i];
          s += a;
        }
        out[lane] = s;
      }
    }
}

namespace {

/// The score of one selected latent row (mla_core, mla_scores): lanes over
/// channels c = lane + 32k in order, warp butterflies, the fp64 sum of the
/// two parts times the scale.
float mlaScore(const float *ent, const float *qs, const float *qp, int kvr,
               int dr, double scale) {
  float a[32], r[32];
  for (int lane = 0; lane < 32; ++lane) {
    a[lane] = r[lane] = 0.0f;
    for (int c = lane; c < kvr; c += 32)
      a[lane] += ent[c] * qs[c];
    for (int c = lane; c < dr; c += 32)
      r[lane] += ent[kvr + c] * qp[c];
  }
  return (float)(((double)hx::warpSumF(a) + (double)hx::warpSumF(r)) * scale);
}

/// The fp64 softmax over p[0, n) by a block of nt threads (mla_core,
/// mla_softmax: mlaSoftmaxWeights): the weights written over the scores,
/// float(1 / sum) returned.
float mlaSoftmaxWeights(float *p, int n, int nt) {
  double mx = -1e300;
  for (int j = 0; j < n; ++j)
    mx = std::max(mx, (double)p[j]);
  std::vector<double> s(nt, 0.0);
  for (int j = 0; j < n; ++j) {
    const double e = std::exp((double)p[j] - mx);
    p[j] = (float)e;
    s[j % nt] += e;
  }
  return (float)(1.0 / hx::blockSumFixedD(s));
}

} // namespace

// mla_core(qAll, qabsAll, cache, seq, selAll, nselp, pAll, maxCtx, ctxAll,
// heads, H, dn, dr, kvr, scale, pages, pageShift); grid (nHeads, B), block nt;
// template kv: the cache's form (kv_rows.h).
void mlaCoreTwin(const Launch &l) {
  constexpr int kTile = 1024; // hx::kMlaTile
  const float *qAll = l.ptr<const float>(0), *qabsAll = l.ptr<const float>(1);
  const void *cache = l.ptr<const void>(2);
  const int *seq = l.ptr<const int>(3), *selAll = l.ptr<const int>(4),
            *nselp = l.ptr<const int>(5);
  float *pAll = l.ptr<float>(6);
  const int maxCtx = l.i32(7);
  float *ctxAll = l.ptr<float>(8);
  const int *heads = l.ptr<const int>(9);
  const int H = l.i32(10), dn = l.i32(11), dr = l.i32(12), kvr = l.i32(13);
  const double scale = l.args.at(14).f;
  const int nt = (int)l.block[0], lat = kvr + dr;
  const int cv = kvr / 4, G = nt / cv;
  KvRows rows(cache, l.kvForm(), lat);
  for (uint32_t b = 0; b < l.grid[1]; ++b)
    for (uint32_t bx = 0; bx < l.grid[0]; ++bx) {
      const int h = heads[bx], n = nselp[b];
      const float *qp = qAll + ((int64_t)b * H + h) * (dn + dr) + dn;
      const float *qs = qabsAll + ((int64_t)b * H + h) * kvr;
      const glm::kv::SlotRows r0 = slotRowsOf(l, 15, seq[b], maxCtx);
      const int *sel = selAll + (int64_t)b * maxCtx;
      float *p = pAll + ((int64_t)b * H + h) * maxCtx;
      std::vector<const float *> ents(n); // the selected rows' values
      for (int j = 0; j < n; ++j)
        ents[j] = rows.row(r0(sel[j]));
      for (int j = 0; j < n; ++j)
        p[j] = mlaScore(ents[j], qs, qp, kvr, dr, scale);
      const float inv = mlaSoftmaxWeights(p, n, nt);
      // ctx: thread (col, grp) sums rows j = grp, grp + G, .. of each tile.
      std::vector<float> part((size_t)G * kvr, 0.0f);
      for (int grp = 0; grp < G; ++grp)
        for (int col = 0; col < cv; ++col) {
          float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          for (int j0 = 0; j0 < n; j0 += kTile) {
            const int m = std::min(n - j0, kTile);
            for (int j = grp; j < m; j += G) {
              const float pv = p[j0 + j];
              const float *v = ents[j0 + j] + 4 * col;
              for (int q = 0; q < 4; ++q)
                acc[q] += pv * v[q];
            }
          }
          for (int q = 0; q < 4; ++q)
            part[(size_t)grp * kvr + 4 * col + q] = acc[q];
        }
      float *ctx = ctxAll + ((int64_t)b * H + h) * kvr;
      for (int c = 0; c < kvr; ++c) {
        float a = 0.0f;
        for (int g = 0; g < G; ++g)
          a += part[(size_t)g * kvr + c];
        ctx[c] = a * inv;
      }
    }
}

// The split decode attention (mla_split_layout.cuh): mla_core's scores,
// softmax and weighted sums as three launches.
//
// mla_scores(qAll, qabsAll, cache, seq, selAll, nselp, pAll, maxCtx, heads,
// nh, H, dn, dr, kvr, scale, pages, pageShift); grid (scoreGridX, B).
void mlaScoresTwin(const Launch &l) {
  namespace ms = glm::mla_split;
  const float *qAll = l.ptr<const float>(0), *qabsAll = l.ptr<const float>(1);
  const void *cache = l.ptr<const void>(2);
  const int *seq = l.ptr<const int>(3), *selAll = l.ptr<const int>(4),
            *nselp = l.ptr<const int>(5);
  float *pAll = l.ptr<float>(6);
  const int maxCtx = l.i32(7);
  const int *heads = l.ptr<const int>(8);
  const int nh = l.i32(9), H = l.i32(10), dn = l.i32(11), dr = l.i32(12),
            kvr = l.i32(13);
  const double scale = l.args.at(14).f;
  const int lat = kvr + dr, headBlocks = int(ms::scoreHeadBlocks(nh));
  const int64_t covered =
      int64_t(l.grid[0] / uint32_t(headBlocks)) * ms::kScoreRows;
  KvRows rows(cache, l.kvForm(), lat);
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const int n = nselp[b];
    if (n > covered)
      throw std::runtime_error("mla_scores: row " + std::to_string(b) +
                               " selects " + std::to_string(n) +
                               " rows, more than the grid's " +
                               std::to_string(covered) + " (the kernel traps)");
    const glm::kv::SlotRows r0 = slotRowsOf(l, 15, seq[b], maxCtx);
    const int *sel = selAll + (int64_t)b * maxCtx;
    for (int hi = 0; hi < nh && hi < headBlocks * ms::kScoreHeads; ++hi) {
      const int h = heads[hi];
      const float *qp = qAll + ((int64_t)b * H + h) * (dn + dr) + dn;
      const float *qs = qabsAll + ((int64_t)b * H + h) * kvr;
      float *p = pAll + ((int64_t)b * H + h) * maxCtx;
      for (int j = 0; j < n; ++j)
        p[j] = mlaScore(rows.row(r0(sel[j])), qs, qp, kvr, dr, scale);
    }
  }
}

// mla_softmax(pAll, nselp, maxCtx, heads, H, inv); grid (nHeads, B).
void mlaSoftmaxTwin(const Launch &l) {
  float *pAll = l.ptr<float>(0);
  const int *nselp = l.ptr<const int>(1);
  const int maxCtx = l.i32(2);
  const int *heads = l.ptr<const int>(3);
  const int H = l.i32(4);
  float *inv = l.ptr<float>(5);
  const int nt = (int)l.block[0];
  for (uint32_t b = 0; b < l.grid[1]; ++b)
    for (uint32_t bx = 0; bx < l.grid[0]; ++bx) {
      const int h = heads[bx], n = nselp[b];
      inv[(int64_t)b * H + h] =
          mlaSoftmaxWeights(pAll + ((int64_t)b * H + h) * maxCtx, n, nt);
    }
}

// mla_values(cache, seq, selAll, nselp, pAll, inv, maxCtx, ctxAll, heads,
// nh, H, dr, kvr, pages, pageShift); grid (valueGridX, B).
void mlaValuesTwin(const Launch &l) {
  namespace ms = glm::mla_split;
  const void *cache = l.ptr<const void>(0);
  const int *seq = l.ptr<const int>(1), *selAll = l.ptr<const int>(2),
            *nselp = l.ptr<const int>(3);
  const float *pAll = l.ptr<const float>(4), *inv = l.ptr<const float>(5);
  const int maxCtx = l.i32(6);
  float *ctxAll = l.ptr<float>(7);
  const int *heads = l.ptr<const int>(8);
  const int nh = l.i32(9), H = l.i32(10), dr = l.i32(11), kvr = l.i32(12);
  const int G = ms::kValueGroups;
  const int64_t headBlocks = ms::valueHeadBlocks(nh);
  const int64_t cols = int64_t(l.grid[0]) / std::max<int64_t>(headBlocks, 1) *
                       ms::kValueCols;
  KvRows rows(cache, l.kvForm(), kvr + dr);
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const int n = nselp[b];
    const glm::kv::SlotRows r0 = slotRowsOf(l, 13, seq[b], maxCtx);
    const int *sel = selAll + (int64_t)b * maxCtx;
    std::vector<const float *> ents(n);
    for (int j = 0; j < n; ++j)
      ents[j] = rows.row(r0(sel[j]));
    for (int hi = 0; hi < nh && hi < headBlocks * ms::kValueHeads; ++hi) {
      const int h = heads[hi];
      const float *p = pAll + ((int64_t)b * H + h) * maxCtx;
      float *ctx = ctxAll + ((int64_t)b * H + h) * kvr;
      for (int c = 0; c < kvr && c < cols; ++c) {
        float a = 0.0f;
        for (int g = 0; g < G; ++g) {
          float acc = 0.0f;
          for (int j = g; j < n; j += G)
            acc += p[j] * ents[j][c];
          a += acc;
        }
        ctx[c] = a * inv[(int64_t)b * H + h];
      }
    }
  }
}

// mla_out(W, dt, scale, sk, ctxAll, heads, ovAll, H, dn, dv, kvr); grid
// (nHeads * ceil(dv / (nt/32 * 4)), B).
void mlaOutTwin(const Launch &l) {
  constexpr int kRows = 4; // hx::kMlaOutRows
  const void *W = l.ptr<const void>(0);
  const int dt = l.i32(1);
  const void *scale = l.ptr<const void>(2);
  const int sk = l.i32(3);
  const float *ctxAll = l.ptr<const float>(4);
  const int *heads = l.ptr<const int>(5);
  float *ovAll = l.ptr<float>(6);
  const int H = l.i32(7), dn = l.i32(8), dv = l.i32(9), kvr = l.i32(10);
  const int nw = (int)l.block[0] / 32, rowsB = nw * kRows;
  const int per = (dv + rowsB - 1) / rowsB;
  const bool vec = hx::vecOk(W, dt, sk, kvr);
  const int MB = dt == 0 ? 2 : 4;
  for (uint32_t b = 0; b < l.grid[1]; ++b)
    for (uint32_t bx = 0; bx < l.grid[0]; ++bx) {
      const int h = heads[bx / per];
      const float *ctx = ctxAll + ((int64_t)b * H + h) * kvr;
      for (int w = 0; w < nw; ++w) {
        const int j0 = (int)(bx % per) * rowsB + w * kRows;
        if (j0 >= dv)
          continue;
        const int nr = std::min(dv - j0, kRows);
        const int64_t o0 = (int64_t)h * (dn + dv) + dn + j0;
        for (int r = 0; r < nr; ++r) {
          float a[32];
          for (int lane = 0; lane < 32; ++lane) {
            a[lane] = 0.0f;
            if (vec) {
              // Columns 4*lane + 128m in order; the groups past kvr add
              // zeros (as the kernel's cleared registers do).
              for (int c0 = 4 * lane; c0 < kvr; c0 += 128 * MB)
                for (int m = 0; m < MB; ++m) {
                  const int c = c0 + 128 * m;
                  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f}, x[4] = {0, 0, 0, 0};
                  if (c < kvr)
                    for (int q = 0; q < 4; ++q) {
                      v[q] = hx::ldWT(W, dt, scale, sk, o0 + r, c + q, kvr);
                      x[q] = ctx[c + q];
                    }
                  a[lane] +=
                      v[0] * x[0] + v[1] * x[1] + v[2] * x[2] + v[3] * x[3];
                }
            } else {
              for (int c = lane; c < kvr; c += 32)
                a[lane] += hx::ldWT(W, dt, scale, sk, o0 + r, c, kvr) * ctx[c];
            }
          }
          ovAll[(int64_t)b * H * dv + (int64_t)h * dv + j0 + r] =
              hx::warpSumF(a);
        }
      }
    }
}

} // namespace glm::rt::twins
