//===- footprints_helper.cpp - footprints of the helper kernel families ---===//
//
// One function per family of kHelperTwins (footprint.h), each reading like
// its twin in twin_norm_rope.cpp, twin_dsa.cpp, twin_mla.cpp, twin_moe.cpp
// and twin_misc.cpp. B is the launch's rows (grid.y, or grid.z where the
// twin says so); KV caches and key caches count one slot of maxCtx rows.
//
//===----------------------------------------------------------------------===//
#include "codegen/mla_prefill_abi.h"
#include "runtime/twins/footprint_util.h"

#include "codegen/templates/flash_math.cuh"
#include "codegen/templates/indexer_scores_mma.cuh"
#include "codegen/templates/kv_cache.cuh"
#include "codegen/templates/mla_split_layout.cuh"
#include "codegen/templates/moe_entries.cuh"

#include <limits>
#include <map>
#include <string>

namespace glm::rt::twins {

using namespace fp;

namespace {

/// Bytes of the helpers' `dt` storage code (0 f32, 1 f16, 2 bf16, 3 E4M3).
int dtBytes(const Reach &r, size_t k) {
  const Wide dt = r.raw(k);
  r.require(dt >= 0 && dt <= 3, k, "is ", int64_t(dt),
            ", not a storage code 0..3");
  return dt == 0 ? 4 : dt == 3 ? 1 : 2;
}

/// A [rows, in] weight W (storage `kDt`) with its scale (`kSk`: 0 none,
/// 1 FP8 block-128, 2 row, 3 MXFP8), as hx::ldWT indexes them.
void weightWithScale(Reach &r, size_t kW, size_t kDt, size_t kScale, size_t kSk,
                     Wide rows, Wide in) {
  r.need(kW, rows * in, dtBytes(r, kDt));
  const Wide sk = r.raw(kSk);
  r.require(sk >= 0 && sk <= 3, kSk, "is ", int64_t(sk),
            ", not a scale kind 0..3");
  if (sk == 1)
    r.need(kScale, ceilDiv(rows, 128) * ceilDiv(in, 128), 4);
  else if (sk == 2)
    r.need(kScale, rows, 4);
  else if (sk == 3)
    r.need(kScale, rows && in ? (rows - 1) * (in / 32) + (in - 1) / 32 + 1 : 0,
           1);
  else
    r.opt(kScale, 0, 1);
}

/// Bytes of one row of `n` values of a KV cache in the launch's form (its
/// `kv` template argument, templates/kv_cache.cuh); refuses the shapes the
/// form's kernels do not take: a bf16 or e4m3 writer stages the row in
/// kv::kStageMax floats of shared memory, and e4m3 rows keep their fp32
/// scale aligned (n a multiple of 4).
Wide kvRow(const Reach &r, size_t k, Wide n, bool writer) {
  const int kv = r.l.kvForm();
  if (writer && kv != glm::kv::kF32)
    r.require(n <= glm::kv::kStageMax, k, "is ", int64_t(n),
              " values a row, over the ", glm::kv::kStageMax,
              " a bf16/e4m3 cache writer stages");
  if (kv == glm::kv::kE4m3)
    r.require(n % 4 == 0, k, "is ", int64_t(n),
              " values a row, not a multiple of 4 (e4m3 rows end in an "
              "aligned fp32 scale)");
  return glm::kv::rowBytes(kv, (long long)n);
}

/// The MLA head list (EmitPlan: this rank's heads of H): `n` int32 head
/// numbers, each < H, as the footprints' B * H rows assume.
void headList(Reach &r, size_t k, Wide n, Wide H) {
  if (r.table(k, n, 4, true))
    for (Wide i = 0; i < n; ++i)
      r.indexAt(k, i, 0, H, "a head of H");
}

/// Expert ids from a plan table (the shared experts' table of zeros; a
/// router's ids are data): each < `hi` (negative ids are skipped).
void expertIds(Reach &r, size_t k, Wide n, Wide hi) {
  if (r.table(k, n, 4, false))
    for (Wide i = 0; i < n; ++i)
      if (const Wide v = r.i32At(k, i); v >= hi)
        r.badEntry(k, i, "(an expert id) is ", int64_t(v), ", past the ",
                   int64_t(hi), " experts the launch holds");
}

// (table, dt, rowScale, tok, x, d); grid (ceil(d/T), B): row tok[b].
void embedTokensFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), d = r.at(5), n = std::min(d, r.coveredX());
  const Wide rows = r.ioIndex(3, IoIndex::Row);
  r.need(0, B ? span(rows, d, n) : 0, dtBytes(r, 1));
  r.opt(2, B && n ? rows : 0, 4);
  r.indexed(0);
  r.indexed(2);
  r.need(3, B, 4);
  r.need(4, span(B, d, n), 4);
}

// (x, w, y, n, eps, xs, ys); grid (G, B).
void rmsNormRowsFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), n = r.at(3);
  r.need(0, span(B, r.at(5), n), 4);
  r.need(1, B ? n : 0, 4);
  r.need(2, span(B, r.at(6), n), 4);
}

// (x, delta, xout, w, y, n, eps); grid (G, B), rows n apart.
void addRmsNormFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), n = r.at(5);
  for (size_t k : {0, 1, 2, 4})
    r.need(k, B * n, 4);
  r.need(3, B ? n : 0, 4);
}

// (x, dim, stride, rowStride, pos, theta); grid (vectors, B).
void ropeRowsFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), V = r.grid(0);
  const Wide pairs = std::min(r.at(1) / 2, r.block(0));
  const Wide stride = r.at(2), rowStride = r.at(3);
  r.need(0,
         B && V && pairs ? (B - 1) * rowStride + (V - 1) * stride + 2 * pairs
                         : 0,
         4);
  r.need(4, B, 4);
  r.ioIndex(4, IoIndex::Position); // rotation angles only
}

// (kva, normW, cache, seq, pos, kvr, dr, maxCtx, eps, theta, pages,
// pageShift); grid (1, B).
void kvStoreFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), kvr = r.at(5), dr = r.at(6), ctx = r.at(7);
  const Wide lat = kvr + dr;
  r.need(0, B * lat, 4);
  r.need(1, B ? kvr : 0, 4);
  r.slotRows(2, 3, 10, 11, B ? ctx : 0, kvRow(r, 5, lat, true));
  r.kvRows(2);
  r.positionsIn(4, 7, ctx);
  r.need(3, B, 4);
  r.need(4, B, 4);
}

// (k, w, bias, keys, seq, pos, hd, dr, maxCtx, theta, pages, pageShift);
// grid (1, B).
void indexKeyStoreFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), hd = r.at(6), dr = r.at(7), ctx = r.at(8);
  r.require(dr <= hd, 7, "is ", int64_t(dr), ", over hd ", int64_t(hd));
  r.need(0, B * hd, 4);
  r.need(1, B ? hd : 0, 4);
  r.need(2, B ? hd : 0, 4);
  r.slotRows(3, 4, 10, 11, B ? ctx : 0, kvRow(r, 6, hd, true));
  r.kvRows(3);
  r.positionsIn(5, 8, ctx);
  r.need(4, B, 4);
  r.need(5, B, 4);
}

// (sel, nsel, pos, maxCtx); grid (n, B): positions < maxCtx.
void dsaIotaFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), ctx = r.at(3);
  r.need(0, B * ctx, 4);
  r.need(1, B, 4);
  r.need(2, B, 4);
  r.positionsIn(2, 3, ctx);
}

// (qi, keys, wts, score, seq, pos, nh, hd, maxCtx, headScale, dotScale,
// pages, pageShift). Template pool: keys and scores have ctx / pool rows
// (paged keys only at pool 1).
void indexerScoresCtxFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), nh = r.at(6), hd = r.at(7),
             ctx = r.at(8) / l.targIntOr("pool", 1);
  r.need(0, B * nh * hd, 4);
  r.require(r.null(11) || l.targIntOr("pool", 1) == 1, 11,
            "pages a k-pool's pooled keys; only pool-1 keys are paged");
  r.slotRows(1, 4, 11, 12, B ? ctx : 0, kvRow(r, 7, hd, false));
  r.kvRows(1);
  r.positionsIn(5, 8, r.at(8));
  r.need(2, B * nh, 4);
  r.need(3, B * ctx, 8);
  r.need(4, B, 4);
  r.need(5, B, 4);
}

// indexer_scores_ctx's arguments (pool 1); grid (gx, B), 256 threads,
// dynamic shared memory indexerMmaSmemBytes at least; shapes the kernel
// takes (indexerMmaTakes: else it would write nothing).
void indexerScoresMmaFp(const Launch &l, Footprint &f) {
  indexerScoresCtxFp(l, f);
  Reach r(l, f);
  const Wide nh = r.at(6), hd = r.at(7), nt = r.block(0);
  r.require(glm::indexerMmaTakes(int(nh), int(hd), int(nt)), 6, "is ",
            int64_t(nh), " heads of ", int64_t(hd), " dims at ", int64_t(nt),
            " threads: indexer_scores_mma takes 256 threads, nh a power of "
            "two 2..128, hd 32..128 in 32s");
  const Wide smem = glm::indexerMmaSmemBytes(l.kvForm(), int(nt));
  r.require(Wide(l.smemBytes) >= smem, 0, "dynamic shared memory ",
            int64_t(l.smemBytes), " bytes is under the kernel's ",
            int64_t(smem));
}

// (scoreAll, pos, k, flagsAll, selAll, nsel, maxCtx); grid (1, B).
// Template pool: scores and flags have ctx / pool rows, sel ctx.
void dsaSelectFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), ctx = r.at(6), pc = ctx / l.targIntOr("pool", 1);
  r.at(2);
  r.need(0, B * pc, 8);
  r.need(1, B, 4);
  r.need(3, B * pc, 4);
  r.need(4, B * ctx, 4);
  r.need(5, B, 4);
  r.positionsIn(1, 6, ctx);
}

/// The MLA head table: grid.x blocks read `entries` heads (plan data < H).
// mla_attn(qAll, kvBT, cache, seq, selAll, nselp, pAll, maxCtx, ovAll,
// heads, H, dn, dr, dv, kvr, scale); grid (nHeads, B).
void mlaAttnFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), nHeads = r.grid(0), ctx = r.at(7);
  const Wide H = r.at(10), dn = r.at(11), dr = r.at(12), dv = r.at(13),
             kvr = r.at(14);
  const Wide rows = nHeads ? B * H : 0;
  r.need(0, rows * (dn + dr), 4);
  r.need(1, rows ? kvr * H * (dn + dv) : 0, 4);
  r.need(2, rows ? ctx * kvRow(r, 14, kvr + dr, false) : 0, 1);
  r.perSlot(2, 3);
  r.kvRows(2);
  r.need(3, rows ? B : 0, 4);
  r.need(4, rows ? B * ctx : 0, 4);
  r.need(5, rows ? B : 0, 4);
  r.need(6, rows * ctx, 8);
  r.need(8, rows * dv, 4);
  r.need(9, B ? nHeads : 0, 4);
  headList(r, 9, B ? nHeads : 0, H);
}

// mla_qabs(qAll, W, dt, scale, sk, heads, qabsAll, H, dn, dr, dv, kvr);
// grid (nHeads * ceil(kvr/32), B).
void mlaQabsFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1);
  const Wide H = r.at(7), dn = r.at(8), dr = r.at(9), dv = r.at(10),
             kvr = r.at(11, 1);
  const Wide chunks = ceilDiv(kvr, 32), nHeads = ceilDiv(r.grid(0), chunks);
  const Wide rows = nHeads ? B * H : 0;
  r.need(0, rows * (dn + dr), 4);
  weightWithScale(r, 1, 2, 3, 4, rows ? H * (dn + dv) : 0, kvr);
  r.need(5, B ? nHeads : 0, 4);
  headList(r, 5, B ? nHeads : 0, H);
  // A chunk writes its 32 lanes; the last is partial unless kvr % 32 == 0.
  r.need(6, rows * kvr, 4);
}

// mla_core(qAll, qabsAll, cache, seq, selAll, nselp, pAll, maxCtx, ctxAll,
// heads, H, dn, dr, kvr, scale, pages, pageShift); grid (nHeads, B).
void mlaCoreFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), nHeads = r.grid(0), ctx = r.at(7);
  const Wide H = r.at(10), dn = r.at(11), dr = r.at(12), kvr = r.at(13, 4);
  r.require(kvr % 4 == 0 && kvr / 4 <= r.block(0), 13, "is ", int64_t(kvr),
            "; the kernel needs a multiple of 4 of at most 4 x block");
  const Wide rows = nHeads ? B * H : 0;
  r.need(0, rows * (dn + dr), 4);
  r.need(1, rows * kvr, 4);
  // 4-value loads of a row (float4, or 8 and 4 bytes of bf16 and e4m3)
  // stay aligned when a row is whole 4-value groups.
  if (r.l.kvForm() != glm::kv::kF32)
    r.require((kvr + dr) % 4 == 0, 12, "is ", int64_t(dr),
              "; a bf16/e4m3 cache needs kvr + dr a multiple of 4");
  r.slotRows(2, 3, 15, 16, rows ? ctx : 0, kvRow(r, 13, kvr + dr, false));
  r.kvRows(2);
  r.need(3, rows ? B : 0, 4);
  r.need(4, rows ? B * ctx : 0, 4);
  r.need(5, rows ? B : 0, 4);
  r.need(6, rows * ctx, 4);
  r.need(8, rows * kvr, 4);
  r.need(9, B ? nHeads : 0, 4);
  headList(r, 9, B ? nHeads : 0, H);
}

// The split decode attention (templates/mla_split_layout.cuh).
// mla_scores(qAll, qabsAll, cache, seq, selAll, nselp, pAll, maxCtx, heads,
// nh, H, dn, dr, kvr, scale, pages, pageShift); grid (scoreGridX, B), 256
// threads, dynamic shared memory scoreSmem(kvr, dr).
void mlaScoresFp(const Launch &l, Footprint &f) {
  namespace ms = glm::mla_split;
  Reach r(l, f);
  const Wide B = r.grid(1), ctx = r.at(7), nh = r.at(9, 1), H = r.at(10),
             dn = r.at(11), dr = r.at(12), kvr = r.at(13, 1);
  r.require(kvr <= ms::kMaxKvr, 13, "is ", int64_t(kvr), "; the kernel holds ",
            ms::kMaxKvr, " channels of q_abs a warp");
  r.require(dr <= ms::kMaxRope, 12, "is ", int64_t(dr), "; the kernel holds ",
            ms::kMaxRope, " channels of q_pe a warp");
  r.require(r.block(0) == ms::kScoreThreads, 8, "is spread over ",
            int64_t(r.block(0)), " threads; the kernel takes ",
            ms::kScoreThreads);
  r.require(r.grid(0) % ms::scoreHeadBlocks(nh) == 0, 9, "is ", int64_t(nh),
            " heads, which the grid's ", int64_t(r.grid(0)),
            " blocks do not split into whole blocks of ", ms::kScoreHeads);
  r.require(Wide(l.smemBytes) >= ms::scoreSmem(kvr, dr), 0,
            "dynamic shared memory ", int64_t(l.smemBytes),
            " bytes is under the kernel's ", int64_t(ms::scoreSmem(kvr, dr)));
  const Wide rows = B * H;
  r.need(0, rows * (dn + dr), 4);
  r.need(1, rows * kvr, 4);
  r.slotRows(2, 3, 15, 16, B ? ctx : 0, kvRow(r, 13, kvr + dr, false));
  r.kvRows(2);
  r.need(3, B, 4);
  r.need(4, B * ctx, 4);
  r.need(5, B, 4);
  r.need(6, rows * ctx, 4);
  r.need(8, B ? nh : 0, 4);
  headList(r, 8, B ? nh : 0, H);
}

// mla_softmax(pAll, nselp, maxCtx, heads, H, inv); grid (nHeads, B).
void mlaSoftmaxFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), nHeads = r.grid(0), ctx = r.at(2), H = r.at(4);
  const Wide rows = nHeads ? B * H : 0;
  r.need(0, rows * ctx, 4);
  r.need(1, rows ? B : 0, 4);
  r.need(3, B ? nHeads : 0, 4);
  headList(r, 3, B ? nHeads : 0, H);
  r.need(5, rows, 4);
}

// mla_values(cache, seq, selAll, nselp, pAll, inv, maxCtx, ctxAll, heads,
// nh, H, dr, kvr, pages, pageShift); grid (valueGridX, B), 256 threads.
void mlaValuesFp(const Launch &l, Footprint &f) {
  namespace ms = glm::mla_split;
  Reach r(l, f);
  const Wide B = r.grid(1), ctx = r.at(6), nh = r.at(9, 1), H = r.at(10),
             dr = r.at(11), kvr = r.at(12, 1);
  r.require(r.block(0) == ms::kValueThreads, 9, "is spread over ",
            int64_t(r.block(0)), " threads; the kernel takes ",
            ms::kValueThreads);
  r.require(r.grid(0) == ms::valueGridX(nh, kvr), 12, "is ", int64_t(kvr),
            " columns of ", int64_t(nh), " heads: the grid needs ",
            int64_t(ms::valueGridX(nh, kvr)), " blocks, not ",
            int64_t(r.grid(0)));
  const Wide rows = B * H;
  r.slotRows(0, 1, 13, 14, B ? ctx : 0, kvRow(r, 12, kvr + dr, false));
  r.kvRows(0);
  r.need(1, B, 4);
  r.need(2, B * ctx, 4);
  r.need(3, B, 4);
  r.need(4, rows * ctx, 4);
  r.need(5, rows, 4);
  r.need(7, rows * kvr, 4);
  r.need(8, B ? nh : 0, 4);
  headList(r, 8, B ? nh : 0, H);
}

// mla_prefill(qAll, qabsAll, cache, seq, selAll, nselp, pAll, maxCtx,
// ctxAll, heads, nh, H, dn, dr, kvr, scale, pStride, pages, pageShift); grid
// (ceil(nh / (16 * block / 64)), B), dynamic shared memory mlaPrefillSmem
// (mla_prefill_abi.h).
void mlaPrefillFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), ctx = r.at(7), nh = r.at(10, 1), H = r.at(11),
             dn = r.at(12), dr = r.at(13), kvr = r.at(14, 16),
             pStride = r.at(16, 1); // the kernel takes at most pStride keys
  const int threads = int(r.block(0));
  r.require(threads == 64 || threads == 128 || threads == 256, 10,
            "is spread over ", threads,
            " threads; the kernel takes 64 per "
            "16 heads, 64 to 256");
  r.require(kvr % 16 == 0 && kvr / 16 == l.targIntOr("vt", 0), 14, "is ",
            int64_t(kvr), "; the kernel's vt is ", l.targIntOr("vt", 0),
            " (kvr / 16)");
  r.require(dr % 4 == 0 && dr <= glm::codegen::kMlaPrefillMaxRope, 13, "is ",
            int64_t(dr), "; rows of whole 4-value groups, at most ",
            int64_t(glm::codegen::kMlaPrefillMaxRope),
            " (q's rope steps the kernel holds)");
  r.require(Wide(l.smemBytes) >= glm::codegen::mlaPrefillSmem(threads, kvr, dr),
            0, "dynamic shared memory ", int64_t(l.smemBytes),
            " bytes is under the kernel's ",
            int64_t(glm::codegen::mlaPrefillSmem(threads, kvr, dr)));
  const Wide covered = std::min<Wide>(
      nh, r.grid(0) * glm::codegen::mlaPrefillHeadsPerBlock(threads));
  const Wide rows = covered ? B * H : 0;
  r.need(0, rows * (dn + dr), 4);
  r.need(1, rows * kvr, 4);
  if (l.templateArgs && l.templateArgs->count("keys") &&
      l.templateArgs->at("keys") == "rows16") {
    // mla_rows16's buffer of the chunk's slot (selections index its rows).
    r.need(
        2,
        rows ? Wide(glm::rows16::bytes(int64_t(ctx), int64_t(kvr), int64_t(dr)))
             : 0,
        1);
    r.ioIndex(3, IoIndex::Slot); // the slots, unread: rows16 is the slot's
    r.opt(17, 0, 4);             // and so are the pages
  } else {
    r.slotRows(2, 3, 17, 18, rows ? ctx : 0, kvRow(r, 14, kvr + dr, false));
    r.kvRows(2);
  }
  r.need(3, rows ? B : 0, 4);
  r.need(4, rows ? B * ctx : 0, 4);
  r.need(5, rows ? B : 0, 4);
  r.need(6, rows * pStride, 4);
  r.need(8, rows * kvr, 4);
  r.need(9, B ? covered : 0, 4);
  headList(r, 9, B ? covered : 0, H);
}

// mla_rows16(cache, seq, pos, R, maxCtx, kvr, dr, rows16, pages, pageShift);
// grid (ceil(maxCtx / 8)), 256 threads: rows 0 .. pos[R - 1] of slot seq[0].
void mlaRows16Fp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide R = r.at(3), ctx = r.at(4), kvr = r.at(5, 16), dr = r.at(6);
  r.require(r.block(0) == 32 * glm::rows16::kRowsPerBlock, 0, "is spread over ",
            int64_t(r.block(0)),
            " threads; the kernel "
            "takes a warp per row, ",
            32 * glm::rows16::kRowsPerBlock);
  r.require(kvr % 16 == 0, 5, "is ", int64_t(kvr),
            "; mla_prefill's value rows are whole 16-column tiles");
  r.require(dr % 4 == 0 && kvr + dr <= glm::codegen::kMlaPrefillMaxLatent, 6,
            "is ", int64_t(dr), "; rows of whole 4-value groups of at most ",
            int64_t(glm::codegen::kMlaPrefillMaxLatent) - int64_t(kvr),
            " rope values");
  const bool any = R > 0 && r.grid(0) > 0 && ctx > 0;
  r.slotRows(0, 1, 8, 9, any ? ctx : 0, kvRow(r, 5, kvr + dr, false));
  r.kvRows(0);
  r.need(1, any ? 1 : 0, 4);
  r.need(2, any ? R : 0, 4);
  r.positionsIn(2, 4, ctx);
  r.need(7,
         any ? Wide(glm::rows16::bytes(int64_t(ctx), int64_t(kvr), int64_t(dr)))
             : 0,
         1);
}

// mla_proj(x, xStride, xHead, W, dt, scale, sk, wHead, wRow0, in, heads, y,
// yStride, yHead, R, K, N); grid (nh * ceil(N / 64), ceil(R / 64)), 128
// threads. H = xStride / xHead = yStride / yHead heads a row; W holds H
// heads of wHead rows of `in` values.
void mlaProjFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide xStride = r.at(1), xHead = r.at(2, 1), wHead = r.at(7),
             wRow0 = r.at(8), in = r.at(9), yStride = r.at(12),
             yHead = r.at(13, 1), R = r.at(14), K = r.at(15), N = r.at(16, 1);
  const bool rowsAreOutputs = l.targ("w") == "nk";
  static const std::map<std::string, int> kDt = {
      {"f32", 0}, {"f16", 1}, {"bf16", 2}, {"e4m3", 3}};
  static const std::map<std::string, int> kSk = {
      {"none", 0}, {"block", 1}, {"row", 2}, {"mx", 3}};
  r.require(r.raw(4) == kDt.at(l.targ("dt")), 4, "is ", int64_t(r.raw(4)),
            "; the kernel was built for dt ", l.targ("dt"));
  r.require(r.raw(6) == kSk.at(l.targ("sk")), 6, "is ", int64_t(r.raw(6)),
            "; the kernel was built for sk ", l.targ("sk"));
  r.require(r.block(0) == 128, 14, "runs on ", int64_t(r.block(0)),
            " threads; the kernel takes 128");
  r.require(K % 4 == 0 && xStride % 4 == 0 && xHead % 4 == 0, 15, "is ",
            int64_t(K), " (x strides ", int64_t(xStride), ", ", int64_t(xHead),
            "); 16-byte rows need multiples of 4");
  r.require(xStride % xHead == 0 && yStride % yHead == 0 &&
                xStride / xHead == yStride / yHead,
            1, "is ", int64_t(xStride),
            "; x and y rows must hold the same whole number of heads");
  const Wide H = xStride / xHead, nb = ceilDiv(N, 64);
  r.require(xHead >= K && yHead >= N, 2, "is ", int64_t(xHead),
            "; a head's inputs and outputs must fit its stride");
  r.require(wRow0 + (rowsAreOutputs ? N : K) <= wHead &&
                in >= (rowsAreOutputs ? K : N),
            8, "is ", int64_t(wRow0), "; a head's weight rows must fit ",
            int64_t(wHead), " rows of ", int64_t(in));
  r.require(r.grid(0) % nb == 0, 16, "is ", int64_t(N),
            "; grid x must be whole heads of ", int64_t(nb), " blocks");
  r.require(r.grid(1) * 64 >= R, 14, "is ", int64_t(R), "; ",
            int64_t(r.grid(1)), " row blocks of 64 do not cover it");
  const Wide nh = r.grid(0) / nb, rows = nh ? R : 0;
  r.need(0, rows * xStride, 4);
  weightWithScale(r, 3, 4, 5, 6, rows ? H * wHead : 0, in);
  r.need(10, rows ? nh : 0, 4);
  headList(r, 10, rows ? nh : 0, H);
  r.need(11, rows * yStride, 4);
}

// mla_out(W, dt, scale, sk, ctxAll, heads, ovAll, H, dn, dv, kvr); grid
// (nHeads * ceil(dv / (warps * 4)), B).
void mlaOutFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1);
  const Wide H = r.at(7), dn = r.at(8), dv = r.at(9, 1), kvr = r.at(10);
  const Wide rowsB = (r.block(0) / 32) * 4;
  r.require(rowsB > 0, 9, "is spread over a block without a warp");
  const Wide per = ceilDiv(dv, rowsB), nHeads = ceilDiv(r.grid(0), per);
  const Wide rows = nHeads ? B * H : 0;
  weightWithScale(r, 0, 1, 2, 3, rows ? H * (dn + dv) : 0, kvr);
  r.need(4, rows * kvr, 4);
  r.need(5, B ? nHeads : 0, 4);
  headList(r, 5, B ? nHeads : 0, H);
  r.need(6, rows * dv, 4);
}

// transpose(src, dst, rows, cols); grid (ceil(rows*cols/T)).
void transposeFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide n = r.at(2) * r.at(3), m = std::min(n, r.coveredX());
  r.need(0, m ? n : 0, 4);
  r.need(1, m, 4);
}

// gemv_any(x, xs, w, dt, scale, sk, y, ys, in, out); grid
// (ceil(out / warps), B), a warp per row.
void gemvAnyFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), in = r.at(8);
  const Wide rows = std::min(r.at(9), r.grid(0) * (r.block(0) / 32));
  r.need(0, rows ? span(B, r.at(1), in) : 0, 4);
  weightWithScale(r, 2, 3, 4, 5, B ? rows : 0, in);
  r.need(6, span(B, r.at(7), rows), l.sumMode() == 2 ? 8 : 4);
}

// reduce_units(part, units, n, out); grid (ceil(n/T), B).
void reduceUnitsFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), units = r.at(1), n = r.at(2);
  const Wide m = std::min(n, r.coveredX());
  r.need(0, span(B * units, n, m), 8);
  r.need(3, span(B, n, m), l.sumMode() == 2 ? 8 : 4);
}

// route(logitsAll, bias, E, k, normalize, scale, expertsAll, weightsAll);
// grid (1, B).
void routeFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), E = r.at(2), k = r.at(3);
  r.need(0, B * E, 4);
  r.opt(1, B ? E : 0, 4);
  r.need(6, B * k, 4);
  r.need(7, B * k, 4);
}

// swiglu(g, u, gs, act, n, own); grid (ceil(n/T), B).
void swigluFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), n = r.at(4), m = std::min(n, r.coveredX());
  r.need(0, span(B, r.at(2), m), 4);
  r.need(1, span(B, r.at(2), m), 4);
  r.need(3, span(B, n, m), 4);
  r.opt(5, B ? ceilDiv(m, 128) : 0, 1);
}

// hf_expert_act(gate, up, dt, x, ids, stride, I, d, own, halves, ownE, act);
// grid (ceil(I/T), U, B). With ids, rows of expert ids[b*U + u] (data;
// expert 0 counted); without, the bank's first rows and own row ownE.
void hfExpertActFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide U = r.grid(1), B = r.grid(2);
  const Wide I = r.at(6), d = r.at(7), halves = r.at(9);
  const Wide m = std::min(I, r.coveredX());
  r.at(5);
  const bool ids = !r.null(4);
  const Wide ownE = ids ? 0 : r.raw(10);
  const bool any = U && B && m && (ids || ownE >= 0);
  const int eb = dtBytes(r, 2);
  r.need(0, any ? m * d : 0, eb);
  r.need(1, any ? m * d : 0, eb);
  r.need(3, any ? B * d : 0, 4);
  r.opt(4, U * B, 4);
  r.opt(8, any ? ownE * halves + ceilDiv(m, 128) : 0, 1);
  r.need(11, span(B * U, I, m), 8);
  if (ids)
    for (size_t k : {0, 1, 8})
      r.indexed(k);
}

// hf_expert_down(down, dt, act, ids, wts, stride, I, d, U, part, slots,
// slotBase); grid (ceil(d/T), Y = units * chunks, B).
void hfExpertDownFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide Y = r.grid(1), B = r.grid(2);
  const Wide I = r.at(6), d = r.at(7), U = r.at(8);
  const Wide slots = r.at(10), base = r.at(11);
  r.at(5);
  // A unit's rows split in 128-channel chunks: none without channels.
  r.require(I > 0 || Y == 0, 6, "is 0 on a grid of ", int64_t(Y), " chunks");
  const Wide chunks = ceilDiv(I, 128), units = ceilDiv(Y, chunks);
  const Wide m = std::min(d, r.coveredX());
  const bool any = Y && B && m;
  r.need(0, any ? m * I : 0, dtBytes(r, 1));
  r.need(2, any ? ((B - 1) * U + units) * I : 0, 8);
  r.opt(3, any ? (B - 1) * U + units : 0, 4);
  r.opt(4, any ? (B - 1) * U + units : 0, 4);
  r.need(9, any ? ((B - 1) * slots + base + Y - 1) * d + m : 0, 8);
  if (!r.null(3))
    r.indexed(0);
}

// exl3_expert_in(x, suh, ids, xh, d, E, B); grid (ceil(d/T), K, P*B):
// z = p*B + b.
void exl3ExpertInFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide K = r.grid(1), Z = r.grid(2);
  const Wide d = r.at(4), E = r.at(5), Bn = r.at(6, 1);
  const Wide m = std::min(d, r.coveredX());
  const Wide rows = std::min(Bn, Z), P = ceilDiv(Z, Bn);
  const bool any = K && m;
  r.need(0, any ? span(rows, d, m) : 0, 4);
  r.need(1, any ? span(P * E, d, m) : 0, 4);
  r.need(2, any ? rows * K : 0, 4);
  expertIds(r, 2, any ? rows * K : 0, E);
  r.need(3, any ? span(Z * K, d, m) : 0, 4);
}

// moe_exl3_in(x, suh, ids, xh, d, eTot, nRouted, topk, B); grid
// (ceil(d/T), slots, 2B): slot k < topk is routed (ids), else shared
// expert nRouted + k - topk.
void moeExl3InFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide S = r.grid(1), Z = r.grid(2);
  const Wide d = r.at(4), eTot = r.at(5), nRouted = r.at(6), topk = r.at(7);
  const Wide Bn = r.at(8, 1);
  r.require(Z <= 2 * Bn, 8, "is ", int64_t(Bn), ", below half of grid.z ",
            int64_t(Z));
  r.require(S <= topk || nRouted + S - topk <= eTot, 5, "is ", int64_t(eTot),
            ", below the ", int64_t(nRouted + S - topk),
            " experts the shared slots reach");
  const Wide m = std::min(d, r.coveredX());
  const Wide rows = std::min(Bn, Z), P = ceilDiv(Z, Bn);
  const bool any = S && m;
  r.need(0, any ? span(rows, d, m) : 0, 4);
  r.need(1, any ? span(P * eTot, d, m) : 0, 4);
  r.need(2, any ? rows * std::min(topk, S) : 0, 4);
  expertIds(r, 2, any ? rows * std::min(topk, S) : 0, eTot);
  r.need(3, any ? span((rows * S - 1) * 2 + P, d, m) : 0, 4);
}

// onehot(X, nb, n, c0); grid (ceil(n/T), nb).
void onehotFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide rows = std::min(r.grid(1), r.at(1)), n = r.at(2);
  r.need(0, span(rows, n, std::min(n, r.coveredX())), 4);
}

// vocab_gather(g, vb, B, maxCount, out, V); grid (ceil(maxCount/T), N, B):
// slice r holds vb[r+1] - vb[r] <= maxCount columns at vb[r] < V (the
// plan's table of N + 1 int64 bounds, checked here).
void vocabGatherFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide N = r.grid(1), Bz = r.grid(2);
  const Wide B = r.at(2), cnt = r.at(3), V = r.at(5);
  r.require(Bz <= B, 2, "is ", int64_t(B), ", below grid.z ", int64_t(Bz));
  const Wide m = std::min(cnt, r.coveredX());
  const bool any = N && Bz && m;
  r.need(0, any ? ((N - 1) * B + Bz - 1) * cnt + m : 0, 4);
  r.need(1, any ? N + 1 : 0, 8);
  r.need(4, any ? Bz * V : 0, 4);
  if (any && r.table(1, N + 1, 8, true))
    for (Wide s = 0; s < N; ++s) {
      const Wide beg = r.i64At(1, s), end = r.i64At(1, s + 1);
      if (beg < 0)
        r.badEntry(1, s, "(the start of slice ", int64_t(s), ") is ",
                   int64_t(beg), ", below 0");
      if (end < beg || end - beg > cnt)
        r.badEntry(1, s + 1, "(the end of slice ", int64_t(s), ") is ",
                   int64_t(end), ": the slice from ", int64_t(beg),
                   " must hold 0..", int64_t(cnt), " (maxCount) columns");
      if (end > V)
        r.badEntry(1, s + 1, "(the end of slice ", int64_t(s), ") is ",
                   int64_t(end), ", past the vocabulary of ", int64_t(V));
    }
}

// sum_parts(parts, np, n, out); grid (ceil(n/T)).
void sumPartsFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide n = r.at(2), m = std::min(n, r.coveredX());
  r.need(0, span(r.at(1), n, m), 4);
  r.need(3, m, 4);
}

// fill_random(p, n, seed, mask) and fill_f32(p, n, v): a grid-stride loop.
void fillFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  r.need(0, r.at(1), 4);
}

// fixed_to_f32(x, post, y, rows, n): a warp per 128-column block.
void fixedToF32Fp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide n = r.at(4), perRow = ceilDiv(n, 128);
  const Wide blocks = std::min(r.at(3) * perRow, r.grid(0) * (r.block(0) / 32));
  const Wide rows = ceilDiv(blocks, perRow ? perRow : 1);
  r.need(0, rows * n, 8);
  r.opt(1, blocks ? n : 0, 4);
  r.need(2, rows * n, 4);
}

// ---- MoE prefill glue (twin_moe_prefill.cpp; the chain in moe_group.cuh).
// Positions i < N and entries q < N are checked by the kernels, so a
// row t = q / U stays below ceil(N / U) and a position read from entry_of
// below N: the device-written order, entry_of and items index nothing past
// these footprints.

/// T*U as the kernels compute it (int).
Wide entries(Reach &r, size_t kRows, Wide rows, Wide perRow) {
  const Wide n = rows * perRow;
  r.require(n <= std::numeric_limits<int32_t>::max(), kRows, "is ",
            int64_t(rows), ": ", int64_t(n), " entries overflow an int");
  return n;
}

/// moe_group's expert tables: entry (e*3 + p)*16 + h (e < eTot, h < H) of
/// `kTiles` becomes the tiles of the items of half h of projection p of
/// expert e (null: not on this rank), of `kWidths` their K. The GEMMs of
/// the chain read through a non-null one with the exlr8 strides: a gate/up
/// half tileSpan(hidden/16, 8, 8, 64, 0) tiles, a down half tileSpan(8,
/// hidden/16, 8, 0, 64), 32*K bytes each, K in 1..8 (a K outside a GEMM's
/// widths gives NaN outputs and reads nothing).
void prefillExpertTables(Reach &r, size_t kTiles, size_t kWidths, Wide eTot,
                         Wide H, Wide hidden) {
  const Wide n = eTot && H ? (eTot * 3 - 1) * 16 + H : 0;
  const bool tiles = r.table(kTiles, n, 8, true);
  if (!r.table(kWidths, n, 1, true) || !tiles)
    return;
  const Wide gu = tileSpan(hidden / 16, 8, 8, 64, 0);
  const Wide down = tileSpan(8, hidden / 16, 8, 0, 64);
  static const char *const kProj[] = {"gate", "up", "down"};
  for (Wide e = 0; e < eTot; ++e)
    for (int p = 0; p < 3; ++p)
      for (Wide h = 0; h < H; ++h) {
        const Wide idx = (e * 3 + p) * 16 + h;
        const TablePointer t = r.pointerAt(kTiles, idx, idx * 8);
        if (!t.relocated)
          continue;
        const std::string what = std::string(kProj[p]) + " half " +
                                 std::to_string(int64_t(h)) + " of expert " +
                                 std::to_string(int64_t(e));
        const Wide K = r.u8At(kWidths, idx);
        if (K < 1 || K > 8)
          r.badEntry(kWidths, idx, "(", what, ") is width ", int64_t(K),
                     ", not 1..8");
        r.through(kTiles, idx, t, (p < 2 ? gu : down) * 32 * K, what);
      }
}

// moe_group(expert_ids, T, topk, E, S, H, BM, tiles, widths, hidden, inter,
// order, entry_of, gu_items, down_items, NB); one block.
void moeGroupFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide T = r.at(1), topk = r.at(2), E = r.at(3), S = r.at(4);
  const Wide H = r.at(5), BM = r.at(6, 1), hidden = r.at(9), inter = r.at(10);
  const Wide NB = r.at(15);
  const Wide eTot = E + S, N = entries(r, 1, T, topk + S);
  r.require(eTot <= kMoeGroupMaxExperts, 3, "is ", int64_t(E),
            ": E + S = ", int64_t(eTot), " experts, over the ",
            kMoeGroupMaxExperts, " moe_group sorts");
  r.require(H <= 16, 5, "is ", int64_t(H), ", over 16 halves");
  r.require(hidden % 128 == 0, 9, "is ", int64_t(hidden),
            ", not a multiple of 128");
  r.require(inter == 128 * H, 10, "is ", int64_t(inter),
            ", not 128*H = ", int64_t(128 * H));
  r.require(NB >= ceilDiv(N, BM) + eTot, 15, "is ", int64_t(NB),
            ", below ceil(N/BM) + E + S = ", int64_t(ceilDiv(N, BM) + eTot),
            " item slots (the kernel traps)");
  const Wide n = eTot && H ? (eTot * 3 - 1) * 16 + H : 0;
  r.need(0, T * topk, 4);
  r.need(7, n, 8);
  r.need(8, n, 1);
  r.need(11, N, 4);
  r.need(12, N, 4);
  r.need(13, NB * 2 * H * 32, 1);
  r.need(14, H * NB * 32, 1);
  prefillExpertTables(r, 7, 8, eTot, H, hidden);
}

// moe_gather(xh, expert_ids, order, gu_su_block, X, N, topk, E, S, hidden);
// grid (N, ceil(hidden / (2*THREADS))), 4 elements a thread.
void moeGatherFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide N = r.at(5), topk = r.at(6), E = r.at(7), S = r.at(8);
  const Wide hidden = r.at(9), U = topk + S;
  r.require(hidden % 128 == 0, 9, "is ", int64_t(hidden),
            ", not a multiple of 128");
  r.require(U >= 1 || N == 0, 6, "and S give rows no entry (N = ", int64_t(N),
            ")");
  const Wide rows = std::min(N, r.grid(0));
  const Wide cols = std::min(2 * hidden, r.grid(1) * r.block(0) * 4);
  const Wide tRows = rows && cols ? ceilDiv(N, U) : 0;
  r.need(0, span(tRows, hidden, std::min(hidden, cols)), 4);
  r.need(1, tRows * topk, 4);
  r.need(2, cols ? rows : 0, 4);
  // A thread's columns run over gate's hidden then up's: past the first
  // hidden the up rows of the table are read whole.
  r.opt(3,
        !tRows          ? 0
        : cols > hidden ? 2 * (E + S) * (hidden / 128)
                        : span(E + S, hidden / 128, ceilDiv(cols, 128)),
        4);
  r.need(4, span(rows, 2 * hidden, cols), 2);
}

// moe_act(Zgu, expert_ids, order, tiles, gu_svh, down_suh, act, zd, N, topk,
// E, S, inter, hidden, swiglu_limit); grid (N, ceil(H*32 / THREADS)), a
// warp per half; every entry's threads zero its zd row.
void moeActFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide N = r.at(8), topk = r.at(9), E = r.at(10), S = r.at(11);
  const Wide inter = r.at(12), hidden = r.at(13);
  const Wide U = topk + S, eTot = E + S;
  r.require(inter % 128 == 0, 12, "is ", int64_t(inter),
            ", not a multiple of 128");
  r.require(hidden % 4 == 0, 13, "is ", int64_t(hidden),
            ", not a multiple of 4");
  r.require(U >= 1 || N == 0, 9, "and S give rows no entry (N = ", int64_t(N),
            ")");
  const Wide rows = std::min(N, r.grid(0));
  const Wide halves =
      std::min({inter / 128, Wide(16), r.grid(1) * (r.block(0) / 32)});
  const Wide tRows = rows ? ceilDiv(N, U) : 0;
  const Wide n = rows && halves && eTot ? (eTot - 1) * 48 + halves : 0;
  r.need(0, halves ? span(rows, 2 * inter, inter + 128 * halves) : 0, 4);
  r.need(1, tRows * topk, 4);
  r.need(2, rows, 4);
  r.need(3, n, 8);
  r.opt(4, rows && halves ? span(2 * eTot, inter, 128 * halves) : 0, 4);
  r.opt(5, rows && halves ? span(eTot, inter, 128 * halves) : 0, 4);
  r.need(6, span(rows, inter, 128 * halves), 2);
  r.need(7, rows * hidden, 4);
  r.table(3, n, 8, true); // tested for null only
}

// moe_combine(zd, entry_of, expert_ids, route_w, down_sv_block, out, T,
// topk, E, S, hidden, accumulate); grid (T, ceil(hidden / (4*THREADS))).
void moeCombineFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide T = r.at(6), topk = r.at(7), E = r.at(8), S = r.at(9);
  const Wide hidden = r.at(10), U = topk + S;
  r.raw(11);
  const Wide N = entries(r, 6, T, U);
  r.require(hidden % 128 == 0, 10, "is ", int64_t(hidden),
            ", not a multiple of 128");
  const Wide rows = std::min(T, r.grid(0));
  const Wide cols = std::min(hidden, r.grid(1) * r.block(0) * 4);
  const bool any = rows && cols;
  r.need(0, any ? span(N, hidden, cols) : 0, 4);
  r.need(1, any ? rows * U : 0, 4);
  r.need(2, any ? rows * topk : 0, 4);
  r.need(3, any ? rows * topk : 0, 4);
  r.opt(4, any ? span(E + S, hidden / 128, ceilDiv(cols, 128)) : 0, 4);
  r.need(5, span(rows, hidden, cols), 4);
}

// ---- GLM-5.3-Flash decode (twin_flash.cpp).

// mhc_mix(X, mRaw, base, scale, wdt, ssParts, nParts, u, coef, d, rmsEps,
// hcEps, iters); grid (G, B), template streams.
void mhcMixFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), S = r.targ("streams"), M = (2 + S) * S;
  const Wide nParts = r.at(6), d = r.at(9);
  r.at(12);
  r.require(S >= 1 && S <= 4, 0, "streams=", int64_t(S), " is not 1..4");
  const int wb = dtBytes(r, 4);
  r.need(0, B * S * d, 4);
  r.need(1, B * M, 4);
  r.need(2, B ? M : 0, wb);
  r.need(3, B ? 3 : 0, wb);
  r.opt(5, B * nParts, 8);
  r.need(7, B * d, 4);
  r.need(8, B * M, 4);
}

// mhc_post(y, ys, X, coef, Xout, ssParts, d); grid (G, B).
void mhcPostFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), G = r.grid(0), S = r.targ("streams");
  const Wide M = (2 + S) * S, d = r.at(6), ys = r.at(1);
  r.require(S >= 1 && S <= 4, 0, "streams=", int64_t(S), " is not 1..4");
  r.require(ys >= d, 1, "is ", int64_t(ys), ", under d ", int64_t(d));
  r.need(0, G && d ? span(B, ys, d) : 0, 4);
  r.opt(2, G ? B * S * d : 0, 4);
  r.need(3, G ? B * M : 0, 4);
  r.need(4, G ? B * S * d : 0, 4);
  r.opt(5, B * G, 8);
}

// mhc_head(X, out, d); grid (ceil(d/T), B).
void mhcHeadFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), S = r.targ("streams"), d = r.at(2);
  const Wide m = std::min(d, r.coveredX());
  r.require(S >= 1 && S <= 8, 0, "streams=", int64_t(S), " is not 1..8");
  r.need(0, m ? span(B, S * d, (S - 1) * d + m) : 0, 4);
  r.need(1, span(B, d, m), 4);
}

// kda_decode(q, k, v, f, gate, ins, bRaw, bs, convQ, convK, convV, aLog,
// dtBias, oNorm, wdt, convState, state, seq, pos, out, h0, dk, dv, K, lower,
// eps); grid (n, B): heads h0 .. h0+n of the weights, slots seq[b] (data).
void kdaDecodeFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide n = r.grid(0), B = r.grid(1), ins = r.at(5), bs = r.at(7);
  const Wide h0 = r.at(20), dk = r.at(21, 1), dv = r.at(22, 1), K = r.at(23, 1);
  const Wide nt = r.block(0), rows = r.targ("rows");
  const Wide dvr = (dv + 31) / 32 * 32, RG = dvr <= nt ? nt / dvr : 0;
  r.require(dk <= 256, 21, "is ", int64_t(dk), ", over 256");
  r.require(dv <= 256 && RG > 0, 22, "is ", int64_t(dv),
            ": over 256 or wider than the block");
  r.require(ceilDiv(dk, RG) <= rows, 21, "is ", int64_t(dk), ": more than ",
            int64_t(rows), " state rows per thread");
  r.require(K <= 8, 23, "is ", int64_t(K), ", over 8 taps");
  const int wb = dtBytes(r, 14);
  const Wide rowsB = n ? B : 0, H = B ? h0 + n : 0;
  for (size_t k : {0, 1, 3})
    r.need(k, rowsB ? span(B, ins, n * dk) : 0, 4);
  for (size_t k : {2, 4})
    r.need(k, rowsB ? span(B, ins, n * dv) : 0, 4);
  r.need(6, rowsB ? span(B, bs, n) : 0, 4);
  r.need(8, H * dk * K, wb);
  r.need(9, H * dk * K, wb);
  r.need(10, H * dv * K, wb);
  r.need(11, H, wb);
  r.need(12, H * dk, wb);
  r.need(13, rowsB ? dv : 0, wb);
  r.need(15, rowsB ? n * (2 * dk + dv) * (K - 1) : 0, 4);
  r.need(16, rowsB ? n * dk * dv : 0, 4);
  r.need(17, rowsB, 4);
  r.perSlot(15, 17);
  r.perSlot(16, 17);
  r.opt(18, rowsB, 4);
  if (!r.null(18))
    r.ioIndex(18, IoIndex::Position); // pos == 0: a fresh sequence
  r.need(19, rowsB * n * dv, 4);
}

// kpool_store(k, w, bias, gateIn, gs, ape, adt, ring, poolKeys, seq, pos,
// hd, P, maxCtx); grid (1, B): slots seq[b], pools pos[b] / P (data).
void kpoolStoreFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide B = r.grid(1), gs = r.at(4), hd = r.at(11, 1), P = r.at(12, 1),
             ctx = r.at(13, 1);
  r.require(ctx % P == 0, 13, "is ", int64_t(ctx), ", not a multiple of P ",
            int64_t(P));
  r.require(gs >= hd, 4, "is ", int64_t(gs), ", under hd ", int64_t(hd));
  const int ab = dtBytes(r, 6);
  r.need(0, B * hd, 4);
  r.need(1, B ? hd : 0, 4);
  r.need(2, B ? hd : 0, 4);
  r.need(3, B ? span(B, gs, hd) : 0, 4);
  r.need(5, B ? P * hd : 0, ab);
  r.need(7, B ? 2 * P * hd : 0, 4);
  r.need(8, B ? ctx / P * kvRow(r, 11, hd, true) : 0, 1);
  r.need(9, B, 4);
  r.need(10, B, 4);
  r.perSlot(7, 9);
  r.perSlot(8, 9); // pool pos[b] / P of the slot
  r.kvRows(8);
  r.positionsIn(10, 13, ctx);
}

// ---- GLM-5.3-Flash KDA prefill (twin_flash.cpp).

// kda_prep(q, k, v, f, ins, bRaw, bs, convQ, convK, convV, aLog, dtBias,
// wdt, convState, seq, pos, qo, ko, vo, go, betaO, T, h0, dk, dv, K,
// lower); grid (n, ceil(T/8)): heads h0 .. h0+n, tokens 8·grid.y (at most
// T), one sequence in slot seq[0] (data).
void kdaPrepFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide n = r.grid(0), ins = r.at(4), bs = r.at(6), T = r.at(21);
  const Wide h0 = r.at(22), dk = r.at(23, 1), dv = r.at(24, 1), K = r.at(25, 1);
  r.require(dk <= 256, 23, "is ", int64_t(dk), ", over 256");
  r.require(dv <= 256, 24, "is ", int64_t(dv), ", over 256");
  r.require(K <= 8, 25, "is ", int64_t(K), ", over 8 taps");
  const int wb = dtBytes(r, 12);
  // Rows the blocks read and write: their tokens, and block 0 the last
  // K−1 rows for the conv state.
  const Wide blocks = n ? r.grid(1) : 0;
  const Wide rows = blocks ? T : 0, H = n ? h0 + n : 0;
  for (size_t k : {0, 1, 3})
    r.need(k, rows ? span(rows, ins, n * dk) : 0, 4);
  r.need(2, rows ? span(rows, ins, n * dv) : 0, 4);
  r.need(5, rows ? span(rows, bs, n) : 0, 4);
  r.need(7, H * dk * K, wb);
  r.need(8, H * dk * K, wb);
  r.need(9, H * dv * K, wb);
  r.need(10, H, wb);
  r.need(11, H * dk, wb);
  r.need(13, blocks ? n * (2 * dk + dv) * (K - 1) : 0, 4);
  r.need(14, blocks ? 1 : 0, 4);
  r.opt(15, blocks ? 1 : 0, 4);
  r.perSlot(13, 14);
  if (!r.null(15))
    r.ioIndex(15, IoIndex::Position); // pos == 0: a fresh sequence
  for (size_t k : {16, 17, 19})
    r.need(k, rows * n * dk, 4);
  r.need(18, rows * n * dv, 4);
  r.need(20, rows * n, 4);
}

// kda_chunk(q, k, v, g, beta, gate, gs, oNorm, wdt, state, seq, pos, out,
// T, dk, dv, eps, os); grid (n, V), templates chunk, mma, vsplit V, threads;
// dynamic shared memory 4·fm::kdaChunkSmemFloats(chunk, dk, dv / V) bytes
// at least; one sequence in slot seq[0] (data).
void kdaChunkFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide n = r.grid(0), gs = r.at(6), T = r.at(13), dk = r.at(14, 8),
             dv = r.at(15, 16), C = r.targ("chunk"), nt = r.block(0);
  const Wide V = l.targIntOr("vsplit", 1);
  r.require(C == 16 || C == 32, 0, "chunk=", int64_t(C), " is not 16 or 32");
  r.require(V == 1 || V == 2 || V == 4, 0, "vsplit=", int64_t(V),
            " is not 1, 2 or 4");
  r.require(r.grid(1) == V, 0, "grid.y ", int64_t(r.grid(1)), " is not vsplit ",
            int64_t(V));
  r.require(dk <= 128 && dk % 8 == 0, 14, "is ", int64_t(dk),
            ": over 128 or not a multiple of 8");
  r.require(dv % (16 * V) == 0 && dv / V <= nt / 2, 15, "is ", int64_t(dv),
            ": not a multiple of 16·vsplit or over 16 columns a warp");
  r.require(gs >= n * dv, 6, "is ", int64_t(gs), ", under n·dv ",
            int64_t(n * dv));
  const Wide os = r.at(17);
  r.require(os >= n * dv, 17, "is ", int64_t(os), ", under n·dv ",
            int64_t(n * dv));
  const Wide smem =
      4 * Wide(fm::kdaChunkSmemFloats(int(C), int(dk), int(dv / V)));
  r.require(Wide(l.smemBytes) >= smem, 0, "dynamic shared memory ",
            int64_t(l.smemBytes), " bytes is under the kernel's ",
            int64_t(smem));
  const int wb = dtBytes(r, 8);
  const Wide rows = n ? T : 0;
  for (size_t k : {0, 1, 3})
    r.need(k, rows * n * dk, 4);
  r.need(2, rows * n * dv, 4);
  r.need(4, rows * n, 4);
  r.need(5, rows ? span(rows, gs, n * dv) : 0, 4);
  r.need(7, n ? dv : 0, wb);
  r.need(9, n ? n * dk * dv : 0, 4);
  r.need(10, n ? 1 : 0, 4);
  r.opt(11, n ? 1 : 0, 4);
  r.perSlot(9, 10);
  if (!r.null(11))
    r.ioIndex(11, IoIndex::Position); // pos == 0: a fresh sequence
  r.need(12, rows ? span(rows, os, n * dv) : 0, 4);
}

// kda_gnorm(o, gate, gs, oNorm, wdt, out, n, dv, eps); grid (ceil(n /
// warps), rows).
void kdaGnormFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide rows = r.grid(1), gs = r.at(2), n = r.at(6), dv = r.at(7);
  const Wide heads = std::min(n, r.grid(0) * (r.block(0) / 32));
  r.require(gs >= n * dv, 2, "is ", int64_t(gs), ", under n·dv ",
            int64_t(n * dv));
  const int wb = dtBytes(r, 4);
  const Wide used = heads && dv ? rows : 0;
  r.need(0, used ? span(used, n * dv, heads * dv) : 0, 4);
  r.need(1, used ? span(used, gs, heads * dv) : 0, 4);
  r.need(3, used ? dv : 0, wb);
  r.need(5, used ? span(used, n * dv, heads * dv) : 0, 4);
}

} // namespace

const FootprintEntry kHelperFootprints[] = {
    {"embed_tokens", "pipppi", embedTokensFp},
    {"rms_norm_rows", "pppidii", rmsNormRowsFp},
    {"add_rms_norm", "pppppid", addRmsNormFp},
    {"rope_rows", "piiipd", ropeRowsFp},
    {"kv_store", "pppppiiiddpi", kvStoreFp},
    {"index_key_store", "ppppppiiidpi", indexKeyStoreFp},
    {"dsa_iota", "pppi", dsaIotaFp},
    {"indexer_scores_ctx", "ppppppiiiddpi", indexerScoresCtxFp},
    {"indexer_scores_mma", "ppppppiiiddpi", indexerScoresMmaFp},
    {"dsa_select", "ppipppi", dsaSelectFp},
    {"mla_attn", "pppppppippiiiiid", mlaAttnFp},
    {"mla_qabs", "ppipippiiiii", mlaQabsFp},
    {"mla_core", "pppppppippiiiidpi", mlaCoreFp},
    {"mla_scores", "pppppppipiiiiidpi", mlaScoresFp},
    {"mla_softmax", "ppipip", mlaSoftmaxFp},
    {"mla_values", "ppppppippiiiipi", mlaValuesFp},
    {"mla_prefill", "pppppppippiiiiidipi", mlaPrefillFp},
    {"mla_rows16", "pppiiiippi", mlaRows16Fp},
    {"mla_proj", "piipipiiiippiiiii", mlaProjFp},
    {"mla_out", "pipipppiiii", mlaOutFp},
    {"transpose", "ppli", transposeFp},
    {"gemv_any", "pipipipiii", gemvAnyFp},
    {"reduce_units", "piip", reduceUnitsFp},
    {"route", "ppiiidpp", routeFp},
    {"swiglu", "ppipipd", swigluFp},
    {"hf_expert_act", "ppippliipiipd", hfExpertActFp},
    {"hf_expert_down", "pipppliiipii", hfExpertDownFp},
    {"exl3_expert_in", "ppppiii", exl3ExpertInFp},
    {"moe_exl3_in", "ppppiiiii", moeExl3InFp},
    {"onehot", "piii", onehotFp},
    {"vocab_gather", "ppiipi", vocabGatherFp},
    {"sum_parts", "piip", sumPartsFp},
    {"fill_random", "plli", fillFp},
    {"fill_f32", "plf", fillFp},
    {"fixed_to_f32", "pppii", fixedToF32Fp},
    {"moe_group", "piiiiiippiippppi", moeGroupFp},
    {"moe_gather", "pppppiiiii", moeGatherFp},
    {"moe_act", "ppppppppiiiiiif", moeActFp},
    {"moe_combine", "ppppppiiiiii", moeCombineFp},
    {"mhc_mix", "ppppipippiddi", mhcMixFp},
    {"mhc_post", "pippppi", mhcPostFp},
    {"mhc_head", "ppi", mhcHeadFp},
    {"kda_decode", "pppppipippppppipppppiiiiff", kdaDecodeFp},
    {"kpool_store", "ppppipippppiii", kpoolStoreFp},
    {"kda_prep", "ppppipipppppippppppppiiiiif", kdaPrepFp},
    {"kda_chunk", "ppppppipippppiiifi", kdaChunkFp},
    {"kda_gnorm", "ppipipiif", kdaGnormFp},
    {nullptr, nullptr, nullptr},
};

} // namespace glm::rt::twins
