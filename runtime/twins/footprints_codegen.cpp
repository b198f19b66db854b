//===- footprints_codegen.cpp - footprints of the codegen kernel families -===//
//
// One function per family of kCodegenTwins: the elements its twin (and its
// CUDA kernel) index from each pointer, as functions of the launch's
// integers, template arguments, grid and block (footprint.h). Each reads
// like the twin it bounds; the preconditions a twin checks (the kernel's
// traps) are checked here too, naming the argument.
//
//===----------------------------------------------------------------------===//
#include "codegen/dense_gemv_abi.h"
#include "codegen/gemm_dense_abi.h"
#include "runtime/twins/footprint_util.h"

#include <limits>

namespace glm::rt::twins {

using namespace fp;

namespace {

// (x, positions, batch, heads, row_stride, head_stride, offset, theta)
void ropeFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide pairs = std::min<Wide>(r.targ("rope_dim") / 2, r.block(0));
  const Wide batch = std::min(r.at(2), r.grid(1));
  const Wide heads = std::min(r.at(3), r.grid(0));
  const Wide rows = r.at(4), hs = r.at(5), off = r.at(6);
  r.need(0,
         heads && batch && pairs
             ? (batch - 1) * rows + (heads - 1) * hs + off + 2 * pairs
             : 0,
         4);
  r.need(1, batch, 4);
  r.ioIndex(1, IoIndex::Position); // rotation angles only
}

// (ids, table, scale, out, batch, hidden, row_begin, rows)
void embedFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const std::string &fmt = l.targ("format");
  const int eb = fmt == "f32" ? 4 : fmt == "fp8_row" ? 1 : 2;
  const Wide batch = std::min(r.at(4), r.grid(1));
  const Wide full = r.at(5), hidden = std::min(full, r.coveredX());
  r.raw(6); // row_begin: ids outside [row_begin, +rows) give zeros
  const Wide rows = r.at(7);
  r.need(0, batch, 4);
  r.ioIndex(0, IoIndex::Row); // the kernel zeroes ids outside its rows
  r.need(1, batch ? span(rows, full, hidden) : 0, eb);
  if (fmt == "fp8_row")
    r.need(2, batch && hidden ? rows : 0, 4);
  else
    r.opt(2, 0, 4);
  r.need(3, span(batch, full, hidden), 4);
}

// (x, add, w, y, rows, n, x_stride, eps)
void rmsNormFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide rows = std::min(r.at(4), r.grid(0)), n = r.at(5);
  r.need(0, span(rows, r.at(6), n), 4);
  r.opt(1, rows * n, 4);
  r.need(2, rows ? n : 0, storageBytes(storageArg(r, "wt")));
  r.need(3, rows * n, 4);
}

// (x, pre, post, y, rows, n, pre_stride, post_stride)
void hadamardFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide rows = r.at(4), n = r.at(5);
  r.require(n % 128 == 0, 5, "is ", int64_t(n), ", not a multiple of 128");
  const Wide per = n / 128;
  const Wide blocks = std::min(rows * per, r.grid(0) * (r.block(0) / 32));
  const Wide rowsHit = ceilDiv(blocks, per);
  const int vb = storageBytes(storageArg(r, "vt"));
  r.need(0, blocks * 128, 4);
  r.opt(1, span(rowsHit, r.at(6), std::min(n, blocks * 128)), vb);
  r.opt(2, span(rowsHit, r.at(7), std::min(n, blocks * 128)), vb);
  r.need(3, blocks * 128, 4);
}

// (x, w, scale, y, batch, in, out, out_stride, accumulate)
void denseGemvFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const std::string &fmt = l.targ("format");
  const std::string &sc = l.targ("scale");
  const int sb = sc == "f32" ? 4 : 2;
  const Wide batch = std::min<Wide>(r.at(4), r.targ("batch"));
  const Wide in = r.at(5, 1), out = r.at(6);
  r.require(in % 128 == 0, 5, "is ", int64_t(in), ", not a multiple of 128");
  const Wide warps = std::max<Wide>(r.block(0) / 32, 1);
  r.require(r.grid(0) > 0, 0, "is launched on an empty grid");
  // Rows per block as the kernel derives them from the grid.
  const Wide R = codegen::denseGemvRowsPerBlock(
      (long long)out, (long long)r.grid(0), int(warps), l.targIntOr("rows", 1));
  const Wide rows = std::min(out, r.grid(0) * R);
  r.need(0, rows ? batch * in : 0, 4);
  r.need(1, rows * in, fmt == "bf16" ? 2 : 1);
  if (fmt == "fp8_block")
    r.need(2, ceilDiv(rows, 128) * ceilDiv(in, 128), sb);
  else if (fmt == "fp8_row")
    r.need(2, rows, sb);
  else if (fmt == "mxfp8")
    r.need(2, rows * (in / 32), 1);
  else
    r.opt(2, 0, 1);
  r.need(3, span(batch, r.at(7), rows), l.sumMode() == 2 ? 8 : 4);
}

// (x, w, scale, y, batch, in, out, out_stride, accumulate): dense_gemv's
// list; blocks of bm rows x gemmDenseBlockCols columns.
void gemmDenseFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const std::string &fmt = l.targ("format");
  const std::string &sc = l.targ("scale");
  const int sb = sc == "f32" ? 4 : 2;
  const Wide bm = r.targ("bm");
  const Wide bn = codegen::gemmDenseBlockCols(int(bm), int(r.block(0)));
  const Wide in = r.at(5, 1), out = r.at(6);
  r.require(in % 128 == 0, 5, "is ", int64_t(in), ", not a multiple of 128");
  r.require(bn > 0, 0, "is launched on a block of ", int64_t(r.block(0)),
            " threads");
  const Wide rows = std::min(r.at(4), r.grid(1) * bm);
  const Wide cols = std::min(out, r.grid(0) * bn);
  const Wide hit = rows > 0 && cols > 0;
  r.need(0, hit ? rows * in : 0, 4);
  r.need(1, hit ? cols * in : 0, fmt == "bf16" ? 2 : 1);
  if (fmt == "fp8_block")
    r.need(2, hit ? ceilDiv(cols, 128) * (in / 128) : 0, sb);
  else if (fmt == "fp8_row")
    r.need(2, hit ? cols : 0, sb);
  else if (fmt == "mxfp8")
    r.need(2, hit ? cols * (in / 32) : 0, 1);
  else
    r.opt(2, 0, 1); // BF16: no scale (dense_gemv's null)
  r.need(3, hit ? span(rows, r.at(7), cols) : 0, 4);
  r.opt(9, 2, 4); // the row window {first, last}, or null
}

// (x, w, y, in, out)
void denseGemvF32Fp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide in = r.at(3);
  const Wide rows = std::min(r.at(4), r.grid(0) * (r.block(0) / 32));
  r.need(0, rows ? in : 0, 4);
  r.need(1, rows * in, 4);
  r.need(2, rows, l.targ("out") == "f64" ? 8 : 4);
}

// (xh, tiles, z, batch, in, out, sI, sI8, sJ8)
void denseGemvTrellisFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide batch = std::min<Wide>(r.at(3), r.targ("batch"));
  const Wide in = r.at(4), out = r.at(5);
  const Wide cols =
      std::min(out / 16, r.grid(0) * std::max<Wide>(r.block(0) / 32, 0));
  const Wide rows = in / 16;
  r.need(0, cols ? span(batch, in, 16 * rows) : 0, 4);
  r.need(1, tileSpan(rows, cols, r.at(6), r.at(7), r.at(8)) * 32, r.targ("K"));
  r.need(2, rows ? span(batch, out, 16 * cols) : 0, 4);
}

// (xh, tiles, svh, scratch, counters, y, batch, in, out, y_stride,
//  out_valid, sI, sI8, sJ8, split)
void denseTrellisFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide NW = r.block(0) / 32;
  r.require(NW >= 1 && r.block(0) % 32 == 0, 14,
            "cannot split over a block "
            "of ",
            int64_t(r.block(0)), " threads");
  const Wide batch = r.at(6, 1), in = r.at(7, 16), out = r.at(8, 128);
  const Wide yStride = r.at(9), valid = r.at(10), split = r.at(14, 1);
  r.require(batch <= r.targ("batch"), 6, "is over the kernel's batch ",
            r.targ("batch"));
  r.require(in % 16 == 0, 7, "is ", int64_t(in), ", not a multiple of 16");
  r.require(out % 128 == 0, 8, "is ", int64_t(out), ", not a multiple of 128");
  r.require(split >= NW && split % NW == 0 && split <= in / 16, 14, "is ",
            int64_t(split), "; it must be a multiple of the ", int64_t(NW),
            " warps and at most in/16");
  r.require(valid <= out && yStride >= valid, 10, "is ", int64_t(valid),
            ", over out or y_stride");
  const Wide nBlk = out / 128, nSB = split / NW;
  r.need(0, batch * in, 4);
  r.need(1, tileSpan(in / 16, 8 * nBlk, r.at(11), r.at(12), r.at(13)) * 32,
         r.targ("K"));
  r.opt(2, out, 4);
  const Wide sumBytes = l.sumMode() ? 8 : 4; // int64 partials / output
  r.need(3, nSB > 1 ? nBlk * nSB * batch * 128 : 0, sumBytes);
  r.need(4, nSB > 1 ? nBlk : 0, 4);
  r.need(5, span(batch, yStride, valid), l.sumMode() == 2 ? 8 : 4);
}

/// gemm_trellis / gemm_trellis_grouped: in and out as the kernels need them.
void gemmShape(const Reach &r, size_t kIn, size_t kOut) {
  const Wide in = r.at(kIn, 32), out = r.at(kOut, 16);
  r.require(in % 32 == 0, kIn, "is ", int64_t(in), ", not a multiple of 32");
  r.require(out % 16 == 0, kOut, "is ", int64_t(out), ", not a multiple of 16");
}

// (xh, tiles, z, m, in, out, x_stride, z_stride, accumulate, sI, sI8, sJ8)
void gemmTrellisFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  gemmShape(r, 4, 5);
  const Wide BM = r.targ("bm"), BN = r.block(0);
  const Wide m = r.at(3), in = r.at(4), out = r.at(5);
  const Wide nCol = std::min(r.grid(0), ceilDiv(out, BN));
  const Wide nRow = std::min(r.grid(1), ceilDiv(m, BM));
  const Wide rows = std::min(m, nRow * BM), cols = std::min(out, nCol * BN);
  const int xb = l.targ("xt") == "f16" ? 2 : 4;
  r.need(0, cols ? span(rows, r.at(6), in) : 0, xb);
  r.need(
      1,
      rows ? tileSpan(in / 16, ceilDiv(cols, 16), r.at(9), r.at(10), r.at(11)) *
                 32
           : 0,
      r.targ("K"));
  r.need(2, span(rows, r.at(7), cols), 4);
}

/// gemm_trellis_grouped's items when they are a table of the plan
/// (GemmItem, 32 bytes: tiles @0, z_off @8, row_start @16, rows @20,
/// x_col @24, k @28; usually built on the device after routing, then
/// data): an item with tiles and rows > 0 reads min(rows, bm) rows of xh
/// (through row_ids when set) and writes them to z at z_off; a width
/// outside the kernel's writes NaN there instead of reading tiles.
void groupedItems(Reach &r, Wide items, Wide cols, int xb) {
  const Wide BM = r.targ("bm"), in = r.at(5), xStride = r.at(7);
  const Wide zStride = r.at(8);
  const Wide reach =
      tileSpan(in / 16, ceilDiv(cols, 16), r.at(10), r.at(11), r.at(12)) * 32;
  const int mask = widthMask(r);
  for (Wide i = 0; i < items; ++i) {
    const TablePointer t = r.pointerAt(2, i, 32 * i);
    const Wide rows = r.i32Field(2, i, 32, 20);
    if (!t.relocated || rows <= 0)
      continue;
    const Wide m = std::min(rows, BM), zOff = r.i64Field(2, i, 32, 8);
    const Wide start = r.i32Field(2, i, 32, 16);
    const Wide xCol = r.i32Field(2, i, 32, 24), K = r.i32Field(2, i, 32, 28);
    if (zOff < 0 || start < 0 || xCol < 0)
      r.badEntry(2, i, "has z_off ", int64_t(zOff), ", row_start ",
                 int64_t(start), ", x_col ", int64_t(xCol),
                 ": offsets must be at least 0");
    r.grow(3, zOff + span(m, zStride, cols), 4);
    if (K >= 1 && K <= 8 && (mask >> K & 1))
      r.through(2, i, t, reach * K,
                "item " + std::to_string(int64_t(i)) + "'s tiles");
    if (r.null(1)) {
      r.grow(0, (start + m - 1) * xStride + xCol + in, xb);
      continue;
    }
    r.grow(1, start + m, 4);
    if (!r.table(1, start + m, 4, false))
      continue; // row ids written at run time: data
    Wide last = 0;
    for (Wide j = start; j < start + m; ++j)
      last =
          std::max(last, r.indexAt(1, j, 0, std::numeric_limits<int32_t>::max(),
                                   "an xh row"));
    r.grow(0, last * xStride + xCol + in, xb);
  }
}

// (xh, row_ids, items, z, n_items, in, out, x_stride, z_stride, accumulate,
//  sI, sI8, sJ8): rows, columns of z and tiles come from the items.
void gemmTrellisGroupedFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  gemmShape(r, 5, 6);
  const Wide items = std::min(r.grid(0), r.at(4));
  const Wide cols = std::min(r.at(6), r.grid(1) * r.block(0));
  r.nonneg({7, 8, 10, 11, 12});
  const int xb = l.targ("xt") == "f16" ? 2 : 4;
  r.need(0, items && cols ? r.at(5) : 0, xb);
  r.opt(1, 0, 4);
  r.need(2, items * 32, 1);
  r.need(3, items ? cols : 0, 4);
  for (size_t k : {0, 1, 3})
    r.indexed(k);
  if (cols && r.table(2, items, 32, false))
    groupedItems(r, items, cols, xb);
}

/// The trellis expert tables (EmitPlan's ExpertTables) of `experts`
/// experts, halves h < `halves`: entry (e*3 + p)*16 + h of `kTiles` is the
/// first tile of projection p's half h (a relocation, null when the half
/// is not on this rank), of `kWidths` its K. A kernel runs a half whose
/// three pointers are set: gate/up read tileSpan(hidden/16, 8, gu_sI,
/// gu_sI8, 0) tiles, down tileSpan(8, 8*hidden/128, down_sI, 0, down_sJ8),
/// 32*K bytes each, through the pointer; K must be one the kernel was
/// built for (else it leaves shared memory unwritten, or traps).
void expertTables(Reach &r, size_t kTiles, size_t kWidths, Wide experts,
                  Wide halves, Wide hidden, size_t kGuSI, size_t kDownSI) {
  const Wide entries = experts && halves ? (experts * 3 - 1) * 16 + halves : 0;
  const bool tiles = r.table(kTiles, entries, 8, true);
  if (!r.table(kWidths, entries, 1, true) || !tiles)
    return;
  const int mask = widthMask(r);
  const Wide gu = tileSpan(hidden / 16, 8, r.at(kGuSI), r.at(kGuSI + 1), 0);
  const Wide down =
      tileSpan(8, 8 * (hidden / 128), r.at(kDownSI), 0, r.at(kDownSI + 1));
  static const char *const kProj[] = {"gate", "up", "down"};
  for (Wide e = 0; e < experts; ++e)
    for (Wide h = 0; h < halves; ++h) {
      TablePointer p[3];
      bool owned = true;
      for (int j = 0; j < 3; ++j) {
        const Wide idx = (e * 3 + j) * 16 + h;
        p[j] = r.pointerAt(kTiles, idx, idx * 8);
        owned &= p[j].relocated;
      }
      if (!owned)
        continue;
      for (int j = 0; j < 3; ++j) {
        const Wide idx = (e * 3 + j) * 16 + h;
        const std::string what = std::string(kProj[j]) + " half " +
                                 std::to_string(int64_t(h)) + " of expert " +
                                 std::to_string(int64_t(e));
        const Wide K = r.u8At(kWidths, idx);
        if (K < 1 || K > 8 || !(mask >> K & 1))
          r.badEntry(kWidths, idx, "(", what, ") is width ", int64_t(K),
                     ", not one of the kernel's widths '", r.l.targ("widths"),
                     "'");
        r.through(kTiles, idx, p[j], (j < 2 ? gu : down) * 32 * K, what);
      }
    }
}

// (xh, expert_ids, route_w, tiles, widths, gu_svh, gu_su_block, down_suh,
//  down_sv_block, down_svh, partial, batch, topk, hidden, inter,
//  xh_row_stride, xh_slot_stride, xh_proj_stride, gu_sI, gu_sI8, down_sI,
//  down_sJ8); grid (halves, experts).
void expertGemvTrellisFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide nH = r.grid(0), nE = r.grid(1);
  r.require(nH <= 16, 3, "is read for ", int64_t(nH), " halves, over 16");
  const Wide batch = std::min({r.at(11), Wide(r.targ("batch")), Wide(8)});
  const Wide topk = r.at(12), hidden = r.at(13), inter = r.at(14);
  r.require(hidden % 128 == 0, 13, "is ", int64_t(hidden),
            ", not a multiple of 128");
  r.require(128 * nH <= inter, 14, "is ", int64_t(inter), ", below ",
            int64_t(nH), " halves of 128");
  const Wide nBlk = hidden / 128, entries = nE ? (nE * 3 - 1) * 16 + nH : 0;
  const Wide slots = batch * topk;
  const int sv = storageBytes(storageArg(r, "sv"));
  r.need(0,
         slots ? r.at(17) + (batch - 1) * r.at(15) + (topk - 1) * r.at(16) +
                     hidden
               : 0,
         4);
  r.need(1, slots, 4);
  r.need(2, slots, 4);
  r.need(3, nH ? entries : 0, 8);
  r.need(4, nH ? entries : 0, 1);
  r.opt(5, 2 * nE * inter, sv);
  r.opt(6, 2 * nE * nBlk, sv);
  r.opt(7, nE * inter, sv);
  r.opt(8, nE * nBlk, sv);
  r.opt(9, nE * hidden, sv);
  r.need(10, slots && nH ? ((slots - 1) * 16 + nH) * hidden : 0, 4);
  r.nonneg({18, 19, 20, 21});
  // The shared experts' launch reads tables of ids 0 and weights 1 (any
  // value is safe: the kernel compares ids with its expert).
  r.table(1, slots, 4, false);
  r.table(2, slots, 4, false);
  expertTables(r, 3, 4, nE, nH, hidden, 18, 20);
}

// (partial, expert_ids, tiles, out, batch, topk, hidden, accumulate)
void moeReduceFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide rows = std::min(r.at(4), r.grid(1)), topk = r.at(5);
  const Wide hidden = r.at(6), cols = std::min(hidden, r.coveredX());
  r.need(0, rows * topk && cols ? (rows * topk * 16 - 1) * hidden + cols : 0,
         4);
  r.need(1, cols ? rows * topk : 0, 4);
  r.need(2, rows * topk && cols ? 16 : 0, 8); // expert 0's gate halves
  r.indexed(2);
  r.need(3, span(rows, hidden, cols), 4);
  // The tile table, tested for null only, indexed by the ids: when they
  // are a plan table (the shared experts' zeros), by these ids.
  r.table(2, rows * topk && cols ? 16 : 0, 8, true);
  if (cols && r.table(1, rows * topk, 4, false)) {
    Wide top = -1;
    for (Wide i = 0; i < rows * topk; ++i)
      top = std::max(top, r.i32At(1, i));
    if (top >= 0) {
      r.table(2, top * 48 + 16, 8, true);
      r.grow(2, top * 48 + 16, 8);
    }
  }
}

// (xh, expert_ids, route_w, tiles, widths, gu_svh, gu_su_block, down_suh,
//  down_sv_block, down_svh, signs_out, scratch, counters, out, batch, topk,
//  n_routed, n_shared, hidden, inter, xh_row_stride, xh_slot_stride,
//  xh_proj_stride, gu_sI, gu_sI8, down_sI, down_sJ8, gu_split, down_group,
//  accumulate): both stages share the parameter list (moe_trellis.cuh).
void moeTrellisFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide batch = r.at(14, 1), topk = r.at(15), nRouted = r.at(16);
  const Wide nShared = r.at(17), hidden = r.at(18, 128), inter = r.at(19);
  const Wide split = r.at(27, 1), group = r.at(28, 1);
  r.require(batch <= r.targ("batch"), 14, "is over the kernel's batch ",
            r.targ("batch"));
  r.require(batch * topk <= 64, 15, "makes batch*topk ", int64_t(batch * topk),
            ", over 64");
  r.require(inter == 16 * 128, 19, "is ", int64_t(inter), ", not 2048");
  r.require(hidden % 128 == 0, 18, "is ", int64_t(hidden),
            ", not a multiple of 128");
  r.require((hidden / 16) % split == 0, 27, "does not divide hidden/16");
  r.require(16 % group == 0, 28, "does not divide 16");
  r.require(r.block(0) >= 32 && r.block(0) % 32 == 0, 11,
            "is used by a block of ", int64_t(r.block(0)),
            " threads, not whole warps");
  const Wide eTot = nRouted + nShared, nSlot = topk + nShared;
  const Wide Q = batch * nSlot, nBlk = hidden / 128;
  const int sv = storageBytes(storageArg(r, "sv"));
  r.need(0, r.at(22) + (batch - 1) * r.at(20) + (nSlot - 1) * r.at(21) + hidden,
         4);
  r.need(1, batch * topk, 4);
  r.need(2, batch * topk, 4);
  r.need(3, eTot * 48, 8);
  r.need(4, eTot * 48, 1);
  r.opt(5, 2 * eTot * inter, sv);
  r.opt(6, 2 * eTot * nBlk, sv);
  r.opt(7, eTot * inter, sv);
  r.opt(8, eTot * nBlk, sv);
  r.opt(9, eTot * hidden, sv);
  r.opt(10, hidden, 4);
  const Wide fixedParts = l.sumMode() ? 2 : 1; // int64 down partials
  r.need(11,
         Q * 32 * split * 128 + Q * 16 * 128 +
             Q * hidden * (16 / group) * fixedParts,
         4);
  r.need(12, (batch * topk + nShared) * 16 + nBlk, 4);
  r.need(13, batch * hidden, l.sumMode() == 2 ? 8 : 4);
  r.nonneg({23, 24, 25, 26});
  r.table(1, batch * topk, 4, false); // ids outside [0, n_routed) skipped
  r.table(2, batch * topk, 4, false);
  expertTables(r, 3, 4, eTot, 16, hidden, 23, 25);
}

// (logits, bias, ids, weights, batch, experts, scale, renorm)
void routerFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide batch = std::min(r.at(4), r.grid(0)), experts = r.at(5);
  // Above the template's experts the kernel returns without a write.
  const Wide rows = experts > r.targ("experts") ? 0 : batch;
  r.need(0, rows * experts, 4);
  r.opt(1, rows ? experts : 0, 4);
  r.need(2, rows * r.targ("topk"), 4);
  r.need(3, rows * r.targ("topk"), 4);
}

// (scores, len, sel, nsel, batch, score_stride, sel_stride, k): a row holds
// len[b] <= score_stride scores.
void topkFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide batch = std::min(r.at(4), r.grid(0)), ss = r.at(5);
  r.need(0, batch * ss, 4);
  r.need(1, batch, 4);
  r.need(2, span(batch, r.at(6), r.at(7)), 4);
  r.need(3, batch, 4);
}

// (vals, idx_in, out_val, out_idx, batch, n, in_stride, out_stride,
//  index_offset)
void argmaxFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide batch = std::min(r.at(4), r.grid(0)), n = r.at(5);
  r.need(0, span(batch, r.at(6), n), 4);
  r.opt(1, span(batch, r.at(6), n), 4);
  r.need(2, span(batch, r.at(7), 1), 4);
  r.need(3, span(batch, r.at(7), 1), 4);
}

// (q, w, keys, len, scores, batch, score_stride, qk_scale): a row scores
// len[b] <= score_stride keys.
void indexerScoresFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide dim = r.targ("head_dim"), nh = r.targ("n_heads");
  const Wide batch = std::min(r.at(5), r.grid(1)), ss = r.at(6);
  const Wide keys = std::min(ss, r.grid(0) * (r.block(0) / 32) * 4);
  r.need(0, batch * nh * dim, 4);
  r.need(1, batch * nh, 4);
  r.need(2, batch ? keys * dim : 0, storageBytes(storageArg(r, "kt")));
  r.need(3, batch, 4);
  r.need(4, span(batch, ss, keys), 4);
}

// (q_lat, q_pe, cache, cache_scale, sel, nsel, o_lat, batch, heads,
//  max_sel, softmax_scale): cache rows are the selections (data).
void mlaDecodeFp(const Launch &l, Footprint &f) {
  Reach r(l, f);
  const Wide lora = r.targ("lora"), rope = r.targ("rope");
  const Wide batch = std::min(r.at(7), r.grid(1)), all = r.at(8);
  const Wide heads = std::min(all, r.grid(0) * r.targ("heads"));
  const Wide maxSel = r.at(9);
  const Wide rows = batch && heads ? (batch - 1) * all + heads : 0;
  const bool e4m3 = l.targ("kv") == "e4m3";
  r.need(0, rows * lora, 4);
  r.need(1, rows * rope, 4);
  r.need(2, rows && maxSel ? lora + rope : 0, e4m3 ? 1 : 2);
  r.opt(3, e4m3 && rows && maxSel ? 1 : 0, 4);
  r.indexed(2);
  r.indexed(3);
  r.need(4, batch * maxSel, 4);
  r.need(5, batch, 4);
  r.need(6, rows * lora, 4);
}

} // namespace

const FootprintEntry kCodegenFootprints[] = {
    {"moe_trellis", "ppppppppppppppiiiiiiiiiiiiiiiif", moeTrellisFp},
    {"expert_gemv_trellis", "pppppppppppiiiiiiiiiiif", expertGemvTrellisFp},
    {"moe_reduce", "ppppiiii", moeReduceFp},
    {"dense_trellis", "ppppppiiiiiiiii", denseTrellisFp},
    {"dense_gemv_trellis", "pppiiiiii", denseGemvTrellisFp},
    {"hadamard128", "ppppiiii", hadamardFp},
    {"dense_gemv", "ppppiiiii", denseGemvFp},
    {"dense_gemv_f32", "pppii", denseGemvF32Fp},
    {"gemm_trellis", "pppiiiiiiiii", gemmTrellisFp},
    {"gemm_trellis_grouped", "ppppiiiiiiiii", gemmTrellisGroupedFp},
    {"gemm_dense", "ppppiiiiip", gemmDenseFp},
    {"embed", "ppppiiii", embedFp},
    {"rms_norm", "ppppiiif", rmsNormFp},
    {"rope", "ppiiiiif", ropeFp},
    {"router", "ppppiifi", routerFp},
    {"topk", "ppppiiii", topkFp},
    {"argmax", "ppppiiiii", argmaxFp},
    {"indexer_scores", "pppppiif", indexerScoresFp},
    {"mla_decode", "pppppppiiif", mlaDecodeFp},
    {nullptr, nullptr, nullptr},
};

} // namespace glm::rt::twins
