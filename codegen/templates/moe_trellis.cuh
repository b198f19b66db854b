// moe_trellis.cuh - the MoE layer decode step in two wide launches.
//
// Replaces the one-block-per-(half, expert) expert_gemv_trellis for decode:
// work is cut into one-warp items so that thousands of warps stream the
// trellis bytes at once, and every 16x16 tile is decoded by one warp straight
// from registers into an mma.sync m16n8k16 A fragment (weights as A, the
// activations as B), with fp32 accumulation in the tensor cores.
//
//   STAGE 0 (gate/up): item = (unit u, half h, projection p, k-chunk s).
//     z_s = x_u[rows of chunk s] . T  (128 outputs), stored as a split-k
//     partial. The last item of (u, h) to finish (integer arrival counter)
//     sums the partials in fixed order and computes
//     act = H(SiLU(H(g)*svh) * H(u)*svh * down.suh) / 128   (per batch row).
//   STAGE 1 (down): item = (unit u, 128-column block blk, half group g).
//     z = act . Td over the group's halves, scaled by sv_block * w (exlr8) or
//     H(z) * svh * w (EXL3), stored per (blk, slot, group). The last item of
//     blk sums them in fixed order (slot, then group), optionally applies
//     exlr8's H * signs.out, and writes (or adds to) out.
//   Both orders are fixed and the counters are integers, so results are
//   bit-reproducible run to run regardless of which warp finishes last.
//
// Units: the distinct routed experts of the batch (first appearance in
// expert_ids, row-major), then the n_shared shared experts (weight 1, every
// row). A unit decodes its weights once for all batch rows that chose it.
// Activations enter the tensor cores as fp16 hi + lo pairs (x = hi + lo,
// |x| < 65504), so products carry ~22 bits of x; weights are exact fp16
// (E4M3-rounded values are a subset). Trellis decode per exl3-format.md
// §1-2 (16-bit tail-biting windows, MSB-first words, m16n8k16 order); the
// E4M3 step per exlr8-format.md §5.5.
//
// ---------------------------------------------------------------- ABI ----
// Template: moeTrellis<WMASK, CB, E4M3, BATCH, SVT, STAGE, PIPE, MINBLOCKS,
//                      THREADS>
//   WMASK   bit K set = width K allowed (a non-null half of another width
//           traps: a launch never skips bytes silently)
//   CB      0 3inst, 1 mcg, 2 mul1;  E4M3 exlr8 rounding on/off
//   BATCH   1..8 (template bound on the runtime batch)
//   SVT     side-vector storage 0 f32, 1 f16, 2 bf16
//   STAGE   0 gate/up, 1 down (same parameter list for both launches);
//           2 / 3: the same stages with the persistent path compiled in
//           (spec stage gu_persist / down_persist). Without it a grid
//           below the full one traps: the persistent path more than
//           doubles NVRTC time and is not the default (docs/perf.md)
//   PIPE    0: next tile row prefetched into registers; 2..8: per-warp
//           shared-memory ring of PIPE rows filled by cp.async (static
//           smem PIPE * 256 * Kmax bytes per warp, <= 32 KB per block)
//   MINBLOCKS  min resident blocks per SM in the entry's __launch_bounds__
//           (0 = none): caps registers for occupancy
//   SUM     stage down's sums (fixed_point.cuh): 0 fp32; 1 every stored
//           partial (a down group's scaled z) rounded to fixed point, the
//           down partials int64 (MoeTrellisDims::sum: twice the floats) and
//           the tail's sum exact, out = fromFixed(sum) then H * signs_out
//           (+ out); 2 the int64 sum written to out reinterpreted as long
//           long [batch][hidden] (signs_out must be null). With every down
//           group on one rank (the shard rule's pairs of halves, down_group
//           <= 2) the sum is the same bits at every rank count.
// Dynamic shared memory: E4M3 instances with THREADS >= 256 on stages 0/1
// decode part of every tile through a 64 KB table and need
// moeTrellisDynSmem() bytes (codegen/moe_trellis_abi.h; the launcher raises
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES); every other instance
// needs none. See "E4M3 byte table" below.
// Runtime parameters (GLM_MOE_TRELLIS_PARAMS, in order):
//   xh        f32 rotated input: x(b, slot k, proj p) at
//             xh + b*xh_row_stride + k*xh_slot_stride + p*xh_proj_stride
//             (exlr8: H(x*signs.in)/sqrt128 shared, strides (hidden,0,0);
//             EXL3: per slot and projection; shared expert j uses slot
//             topk + j)
//   expert_ids, route_w   [batch][topk] router output (id < 0 = empty)
//   tiles     [(e*3 + p)*16 + h] first tile of half h of projection p
//             (0 gate, 1 up, 2 down) of expert e, e < Etot = n_routed +
//             n_shared (shared experts after the routed ones); null = half
//             not on this rank (all three of (e, h) must agree)
//             Tile pointers are 16-byte aligned (cp.async with PIPE > 0);
//             a half's 8 tile columns of one tile row are contiguous (true
//             of exlr8 halves and EXL3 row-major tensors).
//   widths    [(e*3 + p)*16 + h] K of that half (u8)
//   gu_svh    SVT [(p*Etot + e)*inter + 128h + j]
//   gu_su_block SVT [(p*Etot + e)*(hidden/128) + blk] (null = 1, EXL3)
//   down_suh  SVT [e*inter + 128h + j]
//   down_sv_block SVT [e*(hidden/128) + blk] (exlr8; null = 1)
//   down_svh  SVT [e*hidden + o] (EXL3: H(z)*svh per expert; null = exlr8)
//   signs_out f32 [hidden]: exlr8's final H * signs.out per 128-block in
//             the kernel (null = leave the sum in the pre-Hadamard domain,
//             e.g. before a cross-rank all-reduce, or EXL3)
//   scratch   f32, MoeTrellisDims::scratchFloats() elements (see below;
//             codegen/moe_trellis_abi.h); both launches of a step share it
//   counters  int, MoeTrellisDims::counterInts() elements, zero before the
//             first launch; every completed launch leaves them zero again
//             (after a failed launch, zero them again)
//   out       f32 [batch][hidden]; accumulate != 0 adds the result
//   batch, topk, n_routed, n_shared, hidden, inter (= 16*128)
//   xh_row_stride, xh_slot_stride, xh_proj_stride   (elements)
//   gu_sI, gu_sI8, down_sI, down_sJ8   tile strides (TileStrides in
//             glm_common.cuh; exlr8 8,64,8,64; EXL3 inter/16, inter/2,
//             hidden/16, 8)
//   gu_split  k-chunks per gate/up half, divides hidden/16 (e.g. 16)
//   down_group halves per down item, divides 16 (e.g. 4)
//   accumulate
//   swiglu_limit  GLM-5.3-Flash's SwiGLU clamp (gate <= l, up in [-l, l]);
//             0 = none
// Launch stage 0 then stage 1 on one stream (graph-capturable; nothing
// depends on host-side routing). batch*topk <= 64.
// Grid (x only), Umax = batch*topk + n_shared. The full grid (one item per
// warp, THREADS/32 items per block; MoeTrellisDims with persistBlocks 0):
//   stage 0: ceil(Umax*16*2*gu_split / (THREADS/32))
//   stage 1: ceil(Umax*(hidden/128)*(16/down_group) / (THREADS/32))
// Any smaller grid takes the PERSISTENT path (STAGE 2/3 only; see "persistent path" below;
// e.g. SMs x resident blocks per SM): warp w streams items w, w + W, ...
// of the owned halves through one cp.async ring. It needs PIPE >= 2,
// down_group == 1 and Umax <= 72 (else it traps); scratch slots, counters
// and the reduction order are those of the full grid (at down_group 1), so
// results do not depend on the grid.
// Scratch, Q = batch*(topk + n_shared) slots, q = b*(topk+n_shared) + k:
//   [0, A)  gate/up partials [q][p][h][s][128],   A = Q*2*16*gu_split*128
//   [A, B)  act [q][h][128],                       B = A + Q*16*128
//   [B, ..) down partials [blk][q][g][128], Q*hidden*(16/down_group) floats
// Counters: Umax*16 (stage 0, per (u, h)) then hidden/128 (stage 1).
// -------------------------------------------------------------------------
#pragma once

#include "fixed_point.cuh"
#include "trellis_tile.cuh"

#define GLM_MOE_TRELLIS_PARAMS                                                 \
  const float *__restrict__ xh, const int *__restrict__ expert_ids,            \
      const float *__restrict__ route_w,                                       \
      const unsigned char *const *__restrict__ tiles,                          \
      const unsigned char *__restrict__ widths, const void *gu_svh,            \
      const void *gu_su_block, const void *down_suh, const void *down_sv_block, \
      const void *down_svh, const float *__restrict__ signs_out,              \
      float *__restrict__ scratch, int *__restrict__ counters,                 \
      float *__restrict__ out, int batch, int topk, int n_routed,              \
      int n_shared, int hidden, int inter, int xh_row_stride,                  \
      int xh_slot_stride, int xh_proj_stride, int gu_sI, int gu_sI8,           \
      int down_sI, int down_sJ8, int gu_split, int down_group, int accumulate,  \
      float swiglu_limit
#define GLM_MOE_TRELLIS_ARGS                                                   \
  xh, expert_ids, route_w, tiles, widths, gu_svh, gu_su_block, down_suh,       \
      down_sv_block, down_svh, signs_out, scratch, counters, out, batch, topk, \
      n_routed, n_shared, hidden, inter, xh_row_stride, xh_slot_stride,        \
      xh_proj_stride, gu_sI, gu_sI8, down_sI, down_sJ8, gu_split, down_group,  \
      accumulate, swiglu_limit

namespace glm {

// ------------------------------------------------------------- units ----

/// One unit (a distinct expert) as every lane of a warp sees it.
template <int BATCH> struct MoeUnit {
  int e;            // expert index into the tables (shared after routed)
  int slot[BATCH];  // q = b*(topk + n_shared) + k of row b, -1 = not chosen
  float w[BATCH];   // routing weight of row b
  int nUnits;       // routed distinct experts + n_shared
};

/// Finds unit u of this launch's routing. Returns false when u >= nUnits.
/// Needs batch*topk <= 64 (checked by the caller).
template <int BATCH>
__device__ __forceinline__ bool findUnit(int u, const int *ids,
                                         const float *routeW, int batch,
                                         int topk, int nRouted, int nShared,
                                         MoeUnit<BATCH> &un) {
  const int lane = threadIdx.x & 31, ne = batch * topk;
  auto valid = [&](int id) { return id >= 0 && id < nRouted ? id : -1; };
  const int id0 = lane < ne ? valid(ids[lane]) : -1;
  const int id1 = lane + 32 < ne ? valid(ids[lane + 32]) : -1;
  bool f0 = id0 >= 0, f1 = id1 >= 0; // first appearance
  for (int t = 0; t < 32 && t < ne; ++t) {
    const int o = __shfl_sync(0xFFFFFFFFu, id0, t);
    f0 &= !(t < lane && o == id0);
    f1 &= o != id1;
  }
  for (int t = 0; t + 32 < ne; ++t) {
    const int o = __shfl_sync(0xFFFFFFFFu, id1, t);
    f1 &= !(t < lane && o == id1);
  }
  const u32 m0 = __ballot_sync(0xFFFFFFFFu, f0);
  const u32 m1 = __ballot_sync(0xFFFFFFFFu, f1);
  const int n0 = __popc(m0), nRoutedUnits = n0 + __popc(m1);
  un.nUnits = nRoutedUnits + nShared;
  const int nSlot = topk + nShared;
  if (u >= un.nUnits)
    return false;
  if (u >= nRoutedUnits) {
    const int j = u - nRoutedUnits;
    un.e = nRouted + j;
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      un.slot[b] = b < batch ? b * nSlot + topk + j : -1;
      un.w[b] = 1.0f;
    }
    return true;
  }
  u32 m = u < n0 ? m0 : m1;
  for (int i = u < n0 ? u : u - n0; i > 0; --i)
    m &= m - 1;
  const int pos = __ffs(m) - 1;
  un.e = __shfl_sync(0xFFFFFFFFu, u < n0 ? id0 : id1, pos);
  const u64 hit = u64(__ballot_sync(0xFFFFFFFFu, id0 == un.e)) |
                  (u64(__ballot_sync(0xFFFFFFFFu, id1 == un.e)) << 32);
#pragma unroll
  for (int b = 0; b < BATCH; ++b) {
    un.slot[b] = -1;
    un.w[b] = 0.0f;
    if (b < batch) {
      const u64 row = (hit >> (b * topk)) & ((u64(1) << topk) - 1);
      if (row) {
        const int k = __ffsll((long long)row) - 1;
        un.slot[b] = b * nSlot + k;
        un.w[b] = routeW[b * topk + k];
      }
    }
  }
  return true;
}

/// Adds n items to an integer arrival counter; true in the one
/// lane-uniform warp that completes it (it then owns the reduction and
/// resets the counter).
__device__ __forceinline__ bool arriveItems(int *counter, int n,
                                            int expected) {
  __threadfence();
  __syncwarp();
  int old = 0;
  if ((threadIdx.x & 31) == 0)
    old = atomicAdd(counter, n);
  old = __shfl_sync(0xFFFFFFFFu, old, 0);
  if (old != expected - n)
    return false;
  __threadfence();
  if ((threadIdx.x & 31) == 0)
    *counter = 0;
  return true;
}

// ------------------------------------------------- E4M3 byte table ----
// E4M3 instances of 256+ thread blocks (full grid) decode
// GLM_MOE_TRELLIS_TABLE_PAIRS of every lane's 4 state pairs per tile through
// the 64 KB state -> E4M3 byte table of trellis_tile.cuh (glmTrellisTable,
// dynamic shared memory, followed by the table's mbarrier: the launcher
// passes moeTrellisDynSmem() bytes; less traps). Two such blocks share an SM
// (16 warps, as the register cap allows). The table is computed once per
// module and codebook into global memory by the first launch's block 0 (the
// ALU decode itself, so the table equals it bit for bit); later blocks copy
// it with cp.async, which arrive on the mbarrier, so a warp waits only
// before its first decode. Measured on the H200 (docs/perf.md, "moe_trellis
// decode table"): 2 pairs is the best split at 256 threads (random-bank
// LDS.U8 make more pairs LSU-bound), ~3 % faster than the ALU decode at 256
// threads but not faster than the 128-thread default, which stays ALU.
#ifndef GLM_MOE_TRELLIS_TABLE_PAIRS
#define GLM_MOE_TRELLIS_TABLE_PAIRS 2
#endif
/// Dynamic shared memory of a table instance: table + mbarrier.
constexpr unsigned kMoeTableSmem = 65536 + 16;

__host__ __device__ constexpr int moeTablePairs(bool e4m3, int threads,
                                                int stage) {
  return e4m3 && threads >= 256 && stage < 2 ? GLM_MOE_TRELLIS_TABLE_PAIRS : 0;
}

__device__ __align__(16) u32 glmMoeE4m3Table[3][16384];
__device__ int glmMoeE4m3Ready[3];

__device__ __forceinline__ void moeTableWait(u64 *bar) {
  const u32 a = static_cast<u32>(__cvta_generic_to_shared(bar));
  u32 done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
                 "selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(a)
                 : "memory");
}

/// Fills glmTrellisTable: every thread copies (or, before the table exists
/// in global memory, computes) its 16-byte chunks and arrives once on bar.
template <int CB, int THREADS>
__device__ __forceinline__ void moeTableSetup(u64 *bar) {
  u32 dyn;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
  if (dyn < kMoeTableSmem)
    __trap(); // launched without the table's shared memory
  const int tid = threadIdx.x;
  int ready;
  asm volatile("ld.acquire.gpu.b32 %0, [%1];"
               : "=r"(ready)
               : "l"(&glmMoeE4m3Ready[CB])
               : "memory");
  const u32 barA = static_cast<u32>(__cvta_generic_to_shared(bar));
  if (tid == 0)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(barA),
                 "r"(THREADS)
                 : "memory");
  __syncthreads();
  u32 *tab = reinterpret_cast<u32 *>(glmTrellisTable);
  u32 *glob = glmMoeE4m3Table[CB];
  if (ready) {
    for (int c = tid; c < 4096; c += THREADS) {
      const u32 sa = static_cast<u32>(__cvta_generic_to_shared(tab + 4 * c));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa),
                   "l"(glob + 4 * c)
                   : "memory");
    }
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(
                     barA)
                 : "memory");
  } else {
    for (int c = tid; c < 4096; c += THREADS) {
      const uint4 q = make_uint4(
          e4m3TableWord<CB>(4 * c), e4m3TableWord<CB>(4 * c + 1),
          e4m3TableWord<CB>(4 * c + 2), e4m3TableWord<CB>(4 * c + 3));
      *reinterpret_cast<uint4 *>(tab + 4 * c) = q;
      if (blockIdx.x == 0)
        *reinterpret_cast<uint4 *>(glob + 4 * c) = q;
    }
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(barA)
                 : "memory");
  }
  if (blockIdx.x == 0) { // publish the table this block computed
    __threadfence();
    if (__syncthreads_and(!ready) && tid == 0)
      asm volatile("st.release.gpu.b32 [%0], %1;" ::"l"(&glmMoeE4m3Ready[CB]),
                   "r"(1)
                   : "memory");
  }
}

// -------------------------------------------------------- gate / up ----

/// acc[nb][c] += x . T over tile rows [i0, i0 + nRows) of one gate/up half.
template <int K, int CB, bool E4M3, int BATCH, int SVT, int PIPE, int TP>
__device__ __forceinline__ void
guRows(const u8 *half, TileStrides st, int i0, int nRows,
       const float *const (&xp)[kNB(BATCH)], const void *suBlock, bool lo,
       u32 *ring, float (&acc)[kNB(BATCH)][8][4]) {
  typedef typename StorageOf<SVT>::type SV;
  constexpr int NB = kNB(BATCH), W = TileLane<K>::kWords;
  const u32 *base = reinterpret_cast<const u32 *>(half);
  const SV *su = static_cast<const SV *>(suBlock);
  decodeRows<K, CB, E4M3, NB, PIPE, TP>(
      nRows, [&](int i) { return base + tileIndex(i0 + i, 0, st) * W; },
      [&](int i, float (&r)[NB][4]) {
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
          loadX4(xp[nb] ? xp[nb] + 16 * (i0 + i) : nullptr, r[nb]);
      },
      [&](int i, const float (&r)[NB][4], u32 (&b)[NB][2]) {
        const float s = optAt(su, (i0 + i) >> 3);
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          b[nb][0] = splitHiLo(r[nb][0] * s, r[nb][1] * s, lo);
          b[nb][1] = splitHiLo(r[nb][2] * s, r[nb][3] * s, lo);
        }
      },
      ring, acc);
}

/// Dispatches a runtime K to the specialisations WMASK allows; others trap.
#define GLM_MOE_DISPATCH_K(WMASK, k, CALL)                                     \
  switch (k) {                                                                 \
  case 1: if ((WMASK) & 0x002) { CALL(1); } else __trap(); break;              \
  case 2: if ((WMASK) & 0x004) { CALL(2); } else __trap(); break;              \
  case 3: if ((WMASK) & 0x008) { CALL(3); } else __trap(); break;              \
  case 4: if ((WMASK) & 0x010) { CALL(4); } else __trap(); break;              \
  case 5: if ((WMASK) & 0x020) { CALL(5); } else __trap(); break;              \
  case 6: if ((WMASK) & 0x040) { CALL(6); } else __trap(); break;              \
  case 7: if ((WMASK) & 0x080) { CALL(7); } else __trap(); break;              \
  case 8: if ((WMASK) & 0x100) { CALL(8); } else __trap(); break;              \
  default: __trap();                                                           \
  }

/// Highest width in a width mask (sizes the cp.async ring).
__host__ __device__ constexpr int kMaxWidth(int m) {
  return m >= 0x100 ? 8 : m >= 0x80 ? 7 : m >= 0x40 ? 6 : m >= 0x20 ? 5
       : m >= 0x10 ? 4 : m >= 0x08 ? 3 : m >= 0x04 ? 2 : 1;
}

/// Per-warp cp.async ring of PIPE rows of 8 tiles at the widest K.
template <int WMASK, int PIPE, int THREADS> struct MoeRing {
  static constexpr int kWords = PIPE ? PIPE * 8 * 8 * kMaxWidth(WMASK) : 1;
  static_assert(THREADS / 32 * kWords * 4 <= 32768,
                "cp.async ring over 32 KB: fewer stages or threads");
};

/// Last item of (u, h): sums the valid split-k partials of gate and up in
/// slot order, output Hadamard * svh, SwiGLU * down.suh, input Hadamard of
/// down -> act[q][h].
template <int BATCH, int SVT, class ValidFn>
__device__ __forceinline__ void
guFinish(const int (&q)[BATCH], int e, int h, int split, int eTot, int inter,
         const float *guPart, float *act, const void *gu_svh,
         const void *down_suh, float swiglu_limit, ValidFn valid) {
  typedef typename StorageOf<SVT>::type SV;
  const int lane = threadIdx.x & 31;
  const SV *svh = static_cast<const SV *>(gu_svh);
  const SV *dsuh = static_cast<const SV *>(down_suh);
#pragma unroll 1
  for (int b = 0; b < BATCH; ++b) {
    if (q[b] < 0)
      continue;
    float gu[2][4];
#pragma unroll
    for (int pp = 0; pp < 2; ++pp) {
      const float *src = guPart + (((long long)q[b] * 2 + pp) * 16 + h) *
                                      split * 128 + 4 * lane;
      float4 sum = __ldcg(reinterpret_cast<const float4 *>(src));
      for (int ss = 1; ss < split; ++ss) {
        if (!valid(pp, ss))
          continue;
        const float4 v =
            __ldcg(reinterpret_cast<const float4 *>(src + ss * 128));
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      }
      float v[4] = {sum.x, sum.y, sum.z, sum.w};
      hadamard128Warp(v, lane);
#pragma unroll
      for (int t = 0; t < 4; ++t)
        gu[pp][t] = v[t] * kInvSqrt128 *
                    optAt(svh, (long long)(pp * eTot + e) * inter + 128 * h +
                                   4 * lane + t);
    }
    float a[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      float gg = gu[0][t], uu = gu[1][t];
      clampSwiglu(gg, uu, swiglu_limit);
      a[t] = gg / (1.0f + expf(-gg)) * uu *
             optAt(dsuh, (long long)e * inter + 128 * h + 4 * lane + t);
    }
    hadamard128Warp(a, lane);
    float4 o = make_float4(a[0] * kInvSqrt128, a[1] * kInvSqrt128,
                           a[2] * kInvSqrt128, a[3] * kInvSqrt128);
    *reinterpret_cast<float4 *>(act + ((long long)q[b] * 16 + h) * 128 +
                                4 * lane) = o;
  }
}

template <int WMASK, int CB, bool E4M3, int BATCH, int SVT, int PIPE,
          int THREADS, int TP>
__device__ __forceinline__ void
moeGateUp(u32 (*ring)[MoeRing<WMASK, PIPE, THREADS>::kWords], u64 *tabBar,
          GLM_MOE_TRELLIS_PARAMS) {
  typedef typename StorageOf<SVT>::type SV;
  constexpr int NB = kNB(BATCH);
  const int lane = threadIdx.x & 31, j4 = lane & 3, g = lane >> 2;
  const long long item =
      (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int s = int(item % gu_split);
  const int p = int(item / gu_split % 2);
  const int h = int(item / (2LL * gu_split) % 16);
  const int u = int(item / (32LL * gu_split));
  if (u >= batch * topk + n_shared)
    return;
  MoeUnit<BATCH> un;
  if (!findUnit<BATCH>(u, expert_ids, route_w, batch, topk, n_routed,
                       n_shared, un))
    return;
  const int e = un.e, eTot = n_routed + n_shared, nBlk = hidden / 128;
  const u8 *gate = tiles[(e * 3 + 0) * 16 + h];
  const u8 *up = tiles[(e * 3 + 1) * 16 + h];
  const u8 *down = tiles[(e * 3 + 2) * 16 + h];
  if (!gate || !up || !down)
    return; // not on this rank: no item of (u, h) counts
  const u8 *half = p == 0 ? gate : up;
  const int rowsPer = hidden / 16 / gu_split;
  const int nSlot = topk + n_shared, Q = batch * nSlot;
  float *guPart = scratch;
  float *act = scratch + (long long)Q * 32 * gu_split * 128;

  // This lane's B-fragment batch rows and their inputs.
  const float *xp[NB];
  const bool lo = g & 1;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    const int b = (g >> 1) + 4 * nb;
    xp[nb] = nullptr;
#pragma unroll
    for (int bb = 0; bb < BATCH; ++bb)
      if (bb == b && un.slot[bb] >= 0)
        xp[nb] = xh + (long long)b * xh_row_stride +
                 (long long)(un.slot[bb] - b * nSlot) * xh_slot_stride +
                 (long long)p * xh_proj_stride + 2 * j4;
  }
  const void *su =
      gu_su_block
          ? static_cast<const SV *>(gu_su_block) + (long long)(p * eTot + e) * nBlk
          : nullptr;
  float acc[NB][8][4];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
      for (int t = 0; t < 4; ++t)
        acc[nb][c][t] = 0.0f;
  const TileStrides st{gu_sI, gu_sI8, 0};
  const int k = widths[(e * 3 + p) * 16 + h];
#define GLM_GU(KK)                                                             \
  guRows<KK, CB, E4M3, BATCH, SVT, PIPE, TP>(                                  \
      half, st, s * rowsPer, rowsPer, xp, su, lo, ring[threadIdx.x >> 5], acc)
  if (TP > 0)
    moeTableWait(tabBar);
  GLM_MOE_DISPATCH_K(WMASK, k, GLM_GU)
#undef GLM_GU

  // D fragment: row b = j4 (+4), columns 16c + g (+8): hi + lo.
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    const int b = j4 + 4 * nb;
#pragma unroll
    for (int bb = 0; bb < BATCH; ++bb) {
      if (bb != b || un.slot[bb] < 0)
        continue;
      float *dst = guPart +
                   ((((long long)un.slot[bb] * 2 + p) * 16 + h) * gu_split + s) *
                       128;
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        dst[16 * c + g] = acc[nb][c][0] + acc[nb][c][1];
        dst[16 * c + g + 8] = acc[nb][c][2] + acc[nb][c][3];
      }
    }
  }
  if (!arriveItems(&counters[u * 16 + h], 1, 2 * gu_split))
    return;

  // Last item of (u, h): reduce the split-k partials in order, output
  // Hadamard * svh, SwiGLU * down.suh, input Hadamard of down.
  guFinish<BATCH, SVT>(un.slot, e, h, gu_split, eTot, inter, guPart, act,
                       gu_svh, down_suh, swiglu_limit,
                       [](int, int) { return true; });
}

// -------------------------------------------------------------- down ----

/// acc[nb][c] += act . T over the 8 tile rows of one down half, output
/// columns 128*blk .. +128.
template <int K, int CB, bool E4M3, int BATCH, int PIPE, int TP>
__device__ __forceinline__ void
downHalf(const u8 *half, TileStrides st, int blk,
         const float *const (&ap)[kNB(BATCH)], bool lo, u32 *ring,
         float (&acc)[kNB(BATCH)][8][4]) {
  constexpr int NB = kNB(BATCH), W = TileLane<K>::kWords;
  const u32 *base = reinterpret_cast<const u32 *>(half);
  decodeRows<K, CB, E4M3, NB, PIPE, TP>(
      8, [&](int r) { return base + tileIndex(r, 8 * blk, st) * W; },
      [&](int r, float (&x)[NB][4]) {
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
          loadX4(ap[nb] ? ap[nb] + 16 * r : nullptr, x[nb]);
      },
      [&](int, const float (&x)[NB][4], u32 (&b)[NB][2]) {
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          b[nb][0] = splitHiLo(x[nb][0], x[nb][1], lo);
          b[nb][1] = splitHiLo(x[nb][2], x[nb][3], lo);
        }
      },
      ring, acc);
}

/// One down partial value: fp32, or (SUM > 0) its fixed-point int64 at
/// the same index of the partials reinterpreted as long long.
template <int SUM>
__device__ __forceinline__ void storeDownPart(float *part, long long i,
                                              float v) {
  if (SUM)
    reinterpret_cast<long long *>(part)[i] = toFixed(v);
  else
    part[i] = v;
}

/// The down tail's running sum of this lane's 4 columns of one row.
template <int SUM> struct DownSum {
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  long long f[4] = {0, 0, 0, 0};
  __device__ __forceinline__ void add(const float *part, long long i) {
    if (SUM) {
      const long long *p = reinterpret_cast<const long long *>(part) + i;
#pragma unroll
      for (int t = 0; t < 4; ++t)
        f[t] += __ldcg(p + t);
    } else {
      const float4 x = __ldcg(reinterpret_cast<const float4 *>(part + i));
      v[0] += x.x, v[1] += x.y, v[2] += x.z, v[3] += x.w;
    }
  }
  /// out[b][128 blk + 4 lane ..] = sum (then H * signs_out) (+ out).
  __device__ __forceinline__ void store(float *out, int b, int hidden, int blk,
                                        const float *signs_out,
                                        int accumulate) {
    const int lane = threadIdx.x & 31;
    const long long o = (long long)b * hidden + 128 * blk + 4 * lane;
    if (SUM == 2) {
      long long *d = reinterpret_cast<long long *>(out) + o;
#pragma unroll
      for (int t = 0; t < 4; ++t)
        d[t] = accumulate ? d[t] + f[t] : f[t];
      return;
    }
    if (SUM)
#pragma unroll
      for (int t = 0; t < 4; ++t)
        v[t] = fromFixed(f[t]);
    if (signs_out) {
      hadamard128Warp(v, lane);
#pragma unroll
      for (int t = 0; t < 4; ++t)
        v[t] *= kInvSqrt128 * signs_out[128 * blk + 4 * lane + t];
    }
    float4 *p = reinterpret_cast<float4 *>(out + o);
    float4 r = make_float4(v[0], v[1], v[2], v[3]);
    if (accumulate) {
      const float4 old = *p;
      r.x += old.x, r.y += old.y, r.z += old.z, r.w += old.w;
    }
    *p = r;
  }
};

template <int WMASK, int CB, bool E4M3, int BATCH, int SVT, int PIPE,
          int THREADS, int TP, int SUM>
__device__ __forceinline__ void
moeDown(u32 (*ring)[MoeRing<WMASK, PIPE, THREADS>::kWords],
        float (*zs)[BATCH][128], u64 *tabBar, GLM_MOE_TRELLIS_PARAMS) {
  typedef typename StorageOf<SVT>::type SV;
  constexpr int NB = kNB(BATCH);
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31, j4 = lane & 3, g = lane >> 2;
  const int nBlk = hidden / 128, nGroup = 16 / down_group;
  const long long item = (long long)blockIdx.x * (THREADS / 32) + warp;
  const int gi = int(item % nGroup);
  const int blk = int(item / nGroup % nBlk);
  const int u = int(item / ((long long)nGroup * nBlk));
  if (u >= batch * topk + n_shared)
    return;
  MoeUnit<BATCH> un;
  if (!findUnit<BATCH>(u, expert_ids, route_w, batch, topk, n_routed,
                       n_shared, un))
    return;
  const int e = un.e;
  const int nSlot = topk + n_shared, Q = batch * nSlot;
  const float *act = scratch + (long long)Q * 32 * gu_split * 128;
  float *downPart = const_cast<float *>(act) + (long long)Q * 16 * 128;

  float acc[NB][8][4];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
      for (int t = 0; t < 4; ++t)
        acc[nb][c][t] = 0.0f;
  const bool lo = g & 1;
  const TileStrides st{down_sI, 0, down_sJ8};
  for (int h = gi * down_group; h < (gi + 1) * down_group; ++h) {
    const u8 *half = tiles[(e * 3 + 2) * 16 + h];
    if (!half || !tiles[(e * 3 + 0) * 16 + h] || !tiles[(e * 3 + 1) * 16 + h])
      continue;
    const float *ap[NB];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const int b = (g >> 1) + 4 * nb;
      ap[nb] = nullptr;
#pragma unroll
      for (int bb = 0; bb < BATCH; ++bb)
        if (bb == b && un.slot[bb] >= 0)
          ap[nb] = act + ((long long)un.slot[bb] * 16 + h) * 128 + 2 * j4;
    }
    const int k = widths[(e * 3 + 2) * 16 + h];
#define GLM_DN(KK)                                                             \
  downHalf<KK, CB, E4M3, BATCH, PIPE, TP>(half, st, blk, ap, lo, ring[warp],   \
                                          acc)
    if (TP > 0)
      moeTableWait(tabBar);
    GLM_MOE_DISPATCH_K(WMASK, k, GLM_DN)
#undef GLM_DN
  }

  // Scale and store the partial of every row of the unit.
  const SV *svb = static_cast<const SV *>(down_sv_block);
  const SV *svh = static_cast<const SV *>(down_svh);
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    const int b = j4 + 4 * nb;
#pragma unroll
    for (int bb = 0; bb < BATCH; ++bb) {
      if (bb != b || un.slot[bb] < 0)
        continue;
      if (svh) {
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          zs[warp][bb][16 * c + g] = acc[nb][c][0] + acc[nb][c][1];
          zs[warp][bb][16 * c + g + 8] = acc[nb][c][2] + acc[nb][c][3];
        }
      } else {
        const float sc =
            optAt(svb, (long long)e * nBlk + blk) * un.w[bb];
        const long long dst =
            (((long long)blk * Q + un.slot[bb]) * nGroup + gi) * 128;
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          storeDownPart<SUM>(downPart, dst + 16 * c + g,
                             (acc[nb][c][0] + acc[nb][c][1]) * sc);
          storeDownPart<SUM>(downPart, dst + 16 * c + g + 8,
                             (acc[nb][c][2] + acc[nb][c][3]) * sc);
        }
      }
    }
  }
  if (svh) {
    __syncwarp();
#pragma unroll 1
    for (int b = 0; b < BATCH; ++b) {
      if (un.slot[b] < 0)
        continue;
      float v[4];
#pragma unroll
      for (int t = 0; t < 4; ++t)
        v[t] = zs[warp][b][4 * lane + t];
      hadamard128Warp(v, lane);
      const long long dst =
          (((long long)blk * Q + un.slot[b]) * nGroup + gi) * 128;
#pragma unroll
      for (int t = 0; t < 4; ++t)
        storeDownPart<SUM>(
            downPart, dst + 4 * lane + t,
            v[t] * kInvSqrt128 *
                toFloat<SV>(
                    svh[(long long)e * hidden + 128 * blk + 4 * lane + t]) *
                un.w[b]);
    }
  }
  if (!arriveItems(&counters[(batch * topk + n_shared) * 16 + blk], 1,
                   un.nUnits * nGroup))
    return;

  // Last item of blk: sum over slots (ascending) and groups (ascending).
  for (int b = 0; b < batch; ++b) {
    DownSum<SUM> sum;
    for (int k = 0; k < nSlot; ++k) {
      if (k < topk) { // empty slot, or a repeat of an earlier slot's id
        const int id = expert_ids[b * topk + k];
        bool skip = id < 0 || id >= n_routed;
        for (int k2 = 0; k2 < k; ++k2)
          skip |= expert_ids[b * topk + k2] == id;
        if (skip)
          continue;
      }
      const long long src =
          ((long long)blk * Q + b * nSlot + k) * nGroup * 128 + 4 * lane;
      for (int gg = 0; gg < nGroup; ++gg)
        sum.add(downPart, src + gg * 128);
    }
    sum.store(out, b, hidden, blk, signs_out, accumulate);
  }
}

// ------------------------------------------------- persistent path ----
//
// Taken when the grid is smaller than the one-item-per-warp grid: warp w of
// W = gridDim.x * THREADS/32 takes items w, w + W, w + 2W, ... of the N
// items of the stage, counted over the units' OWNED halves only (so a TP
// rank's warps all have work), and streams their tile rows through one
// cp.async ring that runs across item boundaries (the next item's first
// rows are in flight while the current one decodes; no per-item prologue).
// Concurrent warps work on neighbouring items, as in the one-item-per-warp
// grid. Every item stores its own partial in the same slots as the full
// grid; the stage tails sum them in the same fixed order, so the results
// do not depend on the grid (and are bit-reproducible). The unit table
// (routing dedupe, owned halves) is built once per block.

/// Units of the launch as one block sees them (built once per block).
constexpr int kMoeMaxUnits = 72; // batch*topk <= 64, n_shared <= 8
template <int BATCH> struct MoeUnitTable {
  int n;                          // units
  int e[kMoeMaxUnits];            // expert index
  int mask[kMoeMaxUnits];         // owned halves (gate, up and down present)
  int before[kMoeMaxUnits + 1];   // owned halves of the units before u
  signed char k[kMoeMaxUnits][BATCH]; // slot of row b in its row, -1 none
  float w[kMoeMaxUnits][BATCH];
};

/// Fills T in three dependent global round trips (the routing ids; the
/// routing weights and the half tables; nothing else), all threads of the
/// block in parallel: the same units, order and slots as findUnit.
template <int BATCH>
__device__ __forceinline__ void
buildUnitTable(MoeUnitTable<BATCH> &T, const int *ids, const float *routeW,
               const u8 *const *tiles, int batch, int topk, int nRouted,
               int nShared) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __shared__ int nRoutedUnits;
  if (warp == 0) { // distinct routed experts in first-appearance order
    const int ne = batch * topk;
    auto valid = [&](int id) { return id >= 0 && id < nRouted ? id : -1; };
    const int id0 = lane < ne ? valid(ids[lane]) : -1;
    const int id1 = lane + 32 < ne ? valid(ids[lane + 32]) : -1;
    bool f0 = id0 >= 0, f1 = id1 >= 0;
    for (int t = 0; t < 32 && t < ne; ++t) {
      const int o = __shfl_sync(0xFFFFFFFFu, id0, t);
      f0 &= !(t < lane && o == id0);
      f1 &= o != id1;
    }
    for (int t = 0; t + 32 < ne; ++t) {
      const int o = __shfl_sync(0xFFFFFFFFu, id1, t);
      f1 &= !(t < lane && o == id1);
    }
    const u32 m0 = __ballot_sync(0xFFFFFFFFu, f0);
    const u32 m1 = __ballot_sync(0xFFFFFFFFu, f1);
    const u32 below = (1u << lane) - 1u;
    const int n0 = __popc(m0), nr = n0 + __popc(m1);
    if (f0)
      T.e[__popc(m0 & below)] = id0;
    if (f1)
      T.e[n0 + __popc(m1 & below)] = id1;
    for (int j = lane; j < nShared; j += 32)
      T.e[nr + j] = nRouted + j;
    if (lane == 0) {
      nRoutedUnits = nr;
      T.n = nr + nShared;
    }
  }
  __syncthreads();
  const int n = T.n, nr = nRoutedUnits;
  for (int i = threadIdx.x; i < n * BATCH; i += blockDim.x) {
    const int u = i / BATCH, b = i - u * BATCH;
    int k = -1;
    float w = 0.0f;
    if (b < batch) {
      if (u >= nr) {
        k = topk + (u - nr), w = 1.0f;
      } else {
        for (int kk = 0; kk < topk; ++kk)
          if (ids[b * topk + kk] == T.e[u]) { // first slot of the row
            k = kk, w = routeW[b * topk + kk];
            break;
          }
      }
    }
    T.k[u][b] = (signed char)k;
    T.w[u][b] = w;
  }
  for (int i = threadIdx.x; i < n * 16; i += blockDim.x) {
    const int u = i >> 4, h = i & 15, e = T.e[u];
    const bool own = (tiles[(e * 3 + 0) * 16 + h] != nullptr) &
                     (tiles[(e * 3 + 1) * 16 + h] != nullptr) &
                     (tiles[(e * 3 + 2) * 16 + h] != nullptr);
    // The 16 lanes of a half warp share u (n * 16 items: a last, partial
    // warp has exactly its low half).
    const u32 bal = __ballot_sync(
        i - lane + 32 <= n * 16 ? 0xFFFFFFFFu : 0x0000FFFFu, own);
    if (h == 0)
      T.mask[u] = int((bal >> (lane & 16)) & 0xFFFFu);
  }
  __syncthreads();
  if (warp == 0) {
    int run = 0;
    for (int u0 = 0; u0 < n; u0 += 32) {
      const int u = u0 + lane;
      const int c = u < n ? __popc(T.mask[u]) : 0;
      int incl = c;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int o = __shfl_up_sync(0xFFFFFFFFu, incl, d);
        if (lane >= d)
          incl += o;
      }
      if (u < n)
        T.before[u] = run + incl - c;
      run += __shfl_sync(0xFFFFFFFFu, incl, 31);
    }
    if (lane == 0)
      T.before[n] = run;
  }
  __syncthreads();
}

/// The unit whose owned halves (times `scale` items each) hold item c.
template <int BATCH>
__device__ __forceinline__ int unitOf(const MoeUnitTable<BATCH> &T,
                                      long long c, int scale) {
  int lo = 0, hi = T.n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if ((long long)T.before[mid] * scale <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// Index of the r-th set bit of m.
__device__ __forceinline__ int nthBit(u32 m, int r) {
  for (; r > 0; --r)
    m &= m - 1;
  return __ffs(m) - 1;
}

/// Issue side of one item: the half's words, its width and first tile.
struct MoeDesc {
  const u32 *half;
  int K, i0, j0;
};

/// acc[nb] += B . T over one ring row of width K.
template <int K, int CB, bool E4M3, int NB>
__device__ __forceinline__ void ringRowMma(const u32 *src,
                                           const u32 (&b)[NB][2],
                                           float (&acc)[NB][8][4]) {
  constexpr int NL = TileLane<K>::kLoad, W = TileLane<K>::kWords;
  const LaneMap<K> map(threadIdx.x & 31);
  u32 v[8][NL];
#pragma unroll
  for (int c = 0; c < 8; ++c)
#pragma unroll
    for (int l = 0; l < NL; ++l)
      v[c][l] = src[c * W + map.off[l]];
  mmaRow<K, CB, E4M3, NB>(v, map.shift, b, acc);
}

/// Streams the tile rows of items c0, c0 + step, ... (count items, R rows
/// each) through the warp's ring (PIPE rows; PIPE - 1 in flight across item
/// boundaries, so an item starts with its first rows already loaded).
///   info(c)           item description (shared-memory lookups only)
///   desc(info)        MoeDesc of the item (global table loads; called one
///                     item ahead of its first issue)
///   loadX(info, r, x) this lane's activations of row r (scaled)
///   flush(c, acc)     stores item c's partial and arrives
template <int WMASK, int CB, bool E4M3, int NB, int PIPE, class InfoFn,
          class DescFn, class XFn, class FlushFn>
__device__ __forceinline__ void
moeStream(long long c0, long long step, int count, int R, TileStrides st,
          InfoFn info, DescFn desc, XFn loadX, FlushFn flush, u32 *ring,
          int *ringK) {
  constexpr int kSlot = 64 * kMaxWidth(WMASK); // words of a row at Kmax
  constexpr int D = PIPE < 2 ? 2 : PIPE;
  const int lane = threadIdx.x & 31, g = lane >> 2;
  const bool lo = g & 1;
  const int nRows = count * R;
  if (nRows <= 0)
    return;
  float acc[NB][8][4];
  auto zero = [&] {
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int t = 0; t < 4; ++t)
          acc[nb][c][t] = 0.0f;
  };
  zero();
  // Issue side.
  int iItem = 0, iRow = 0, iSlot = 0, issued = 0;
  MoeDesc dCur = desc(info(c0));
  MoeDesc dNext = dCur;
  if (count > 1)
    dNext = desc(info(c0 + step));
  auto issue = [&] {
    if (issued < nRows) {
      const int K = dCur.K, chunks = 16 * K; // 8 tiles * 8K words / 4
      const u32 *row =
          dCur.half + tileIndex(dCur.i0 + iRow, dCur.j0, st) * (8 * K);
      u32 *dst = ring + iSlot * kSlot;
      for (int q = lane; q < chunks; q += 32) {
        const unsigned sa =
            static_cast<unsigned>(__cvta_generic_to_shared(dst + 4 * q));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa),
                     "l"(row + 4 * q));
      }
      if (lane == 0)
        ringK[iSlot] = K;
      ++issued;
      iSlot = iSlot + 1 == D ? 0 : iSlot + 1;
      if (++iRow == R) {
        iRow = 0;
        ++iItem;
        dCur = dNext;
        if (iItem + 1 < count)
          dNext = desc(info(c0 + (iItem + 1) * step));
      }
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
#pragma unroll
  for (int i = 0; i < D - 1; ++i)
    issue();
  // Compute side.
  int cItem = 0, cRow = 0, cSlot = 0;
  auto xInfo = info(c0);
  float xCur[NB][4], xNext[NB][4];
  loadX(xInfo, 0, xCur);
  for (int t = 0; t < nRows; ++t) {
    issue();
    asm volatile("cp.async.wait_group %0;\n" ::"n"(D - 1));
    __syncwarp();
    const int K = ringK[cSlot];
    const u32 *src = ring + cSlot * kSlot;
    u32 b[NB][2];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      b[nb][0] = splitHiLo(xCur[nb][0], xCur[nb][1], lo);
      b[nb][1] = splitHiLo(xCur[nb][2], xCur[nb][3], lo);
    }
    const auto rowInfo = xInfo; // the item of row t
    if (t + 1 < nRows) {
      if (cRow + 1 == R) {
        xInfo = info(c0 + (cItem + 1) * step);
        loadX(xInfo, 0, xNext);
      } else {
        loadX(xInfo, cRow + 1, xNext);
      }
    }
#define GLM_ROW(KK) ringRowMma<KK, CB, E4M3, NB>(src, b, acc)
    GLM_MOE_DISPATCH_K(WMASK, K, GLM_ROW)
#undef GLM_ROW
    __syncwarp(); // the slot is refilled by the next issue
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        xCur[nb][i] = xNext[nb][i];
    cSlot = cSlot + 1 == D ? 0 : cSlot + 1;
    if (++cRow == R) {
      cRow = 0;
      flush(rowInfo, acc);
      zero();
      ++cItem;
    }
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
}

template <int WMASK, int CB, bool E4M3, int BATCH, int SVT, int PIPE,
          int THREADS>
__device__ __forceinline__ void
moeGateUpPersistent(u32 *ring, int *ringK, MoeUnitTable<BATCH> &T,
                    GLM_MOE_TRELLIS_PARAMS) {
  typedef typename StorageOf<SVT>::type SV;
  constexpr int NB = kNB(BATCH);
  const int lane = threadIdx.x & 31, j4 = lane & 3, g = lane >> 2;
  const int eTot = n_routed + n_shared, nBlk = hidden / 128;
  const int nSlot = topk + n_shared, Q = batch * nSlot;
  const int rowsPer = hidden / 16 / gu_split;
  float *guPart = scratch;
  float *act = scratch + (long long)Q * 32 * gu_split * 128;
  const int nItems = T.before[T.n] * 2 * gu_split;
  struct Info {
    int u, h, p, s;
  };
  auto info = [&](long long c) {
    Info f;
    const int o = int(c) / (2 * gu_split), seg = int(c) / gu_split;
    f.p = seg & 1;
    f.s = int(c) - seg * gu_split;
    f.u = unitOf(T, o, 1);
    f.h = nthBit(T.mask[f.u], int(o - T.before[f.u]));
    return f;
  };
  auto desc = [&](const Info &f) {
    const int e = T.e[f.u], i = (e * 3 + f.p) * 16 + f.h;
    return MoeDesc{reinterpret_cast<const u32 *>(tiles[i]), int(widths[i]),
                   f.s * rowsPer, 0};
  };
  const SV *suAll = static_cast<const SV *>(gu_su_block);
  auto loadX = [&](const Info &f, int r, float (&x)[NB][4]) {
    const int i = f.s * rowsPer + r, e = T.e[f.u];
    const float su =
        suAll ? toFloat<SV>(suAll[(long long)(f.p * eTot + e) * nBlk + (i >> 3)])
              : 1.0f;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const int b = (g >> 1) + 4 * nb;
      const int k = b < BATCH && b < batch ? T.k[f.u][b < BATCH ? b : 0] : -1;
      const float *p =
          k < 0 ? nullptr
                : xh + (long long)b * xh_row_stride +
                      (long long)k * xh_slot_stride +
                      (long long)f.p * xh_proj_stride + 2 * j4 + 16 * i;
      loadX4(p, x[nb]);
#pragma unroll
      for (int t = 0; t < 4; ++t)
        x[nb][t] *= su;
    }
  };
  auto flush = [&](const Info &f, const float (&acc)[NB][8][4]) {
    const int sFirst = f.s;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const int b = j4 + 4 * nb;
      if (b >= BATCH || b >= batch)
        continue;
      const int k = T.k[f.u][b < BATCH ? b : 0];
      if (k < 0)
        continue;
      float *dst = guPart + ((((long long)(b * nSlot + k) * 2 + f.p) * 16 +
                              f.h) * gu_split + sFirst) * 128;
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        dst[16 * c + g] = acc[nb][c][0] + acc[nb][c][1];
        dst[16 * c + g + 8] = acc[nb][c][2] + acc[nb][c][3];
      }
    }
    if (!arriveItems(&counters[f.u * 16 + f.h], 1, 2 * gu_split))
      return;
    int q[BATCH];
#pragma unroll
    for (int b = 0; b < BATCH; ++b)
      q[b] = b < batch && T.k[f.u][b] >= 0 ? b * nSlot + T.k[f.u][b] : -1;
    guFinish<BATCH, SVT>(q, T.e[f.u], f.h, gu_split, eTot, inter, guPart, act,
                         gu_svh, down_suh, swiglu_limit,
                         [](int, int) { return true; });
  };
  const TileStrides st{gu_sI, gu_sI8, 0};
  const int W = gridDim.x * (THREADS / 32);
  const int w = blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
  moeStream<WMASK, CB, E4M3, NB, PIPE>(w, W, w < nItems ? (nItems - 1 - w) / W + 1 : 0,
                                       rowsPer, st, info, desc, loadX, flush,
                                       ring, ringK);
}

template <int WMASK, int CB, bool E4M3, int BATCH, int SVT, int PIPE,
          int THREADS, int SUM>
__device__ __forceinline__ void
moeDownPersistent(u32 *ring, int *ringK, float (*zs)[128],
                  MoeUnitTable<BATCH> &T, GLM_MOE_TRELLIS_PARAMS) {
  typedef typename StorageOf<SVT>::type SV;
  constexpr int NB = kNB(BATCH);
  const int lane = threadIdx.x & 31, j4 = lane & 3, g = lane >> 2;
  const int nBlk = hidden / 128, nSlot = topk + n_shared, Q = batch * nSlot;
  const float *act = scratch + (long long)Q * 32 * gu_split * 128;
  float *downPart = const_cast<float *>(act) + (long long)Q * 16 * 128;
  const int owned = T.before[T.n];
  const int nItems = owned * nBlk;
  if (owned == 0) { // no half on this rank: no tail runs, out = 0 (+ out)
    if (!accumulate)
      for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
           i < (long long)batch * hidden; i += (long long)gridDim.x * blockDim.x)
        if (SUM == 2)
          reinterpret_cast<long long *>(out)[i] = 0;
        else
          out[i] = 0.0f;
    return;
  }
  struct Info {
    int u, blk, h;
  };
  auto info = [&](long long c) {
    Info f;
    f.u = unitOf(T, c, nBlk);
    const long long rel = c - (long long)T.before[f.u] * nBlk;
    // Column blocks fastest: neighbouring warps read neighbouring 8-row
    // blocks of one half (contiguous in exlr8 halves).
    const int rank = int(rel) / nBlk;
    f.blk = int(rel) - rank * nBlk;
    f.h = nthBit(T.mask[f.u], rank);
    return f;
  };
  auto desc = [&](const Info &f) {
    const int i = (T.e[f.u] * 3 + 2) * 16 + f.h;
    return MoeDesc{reinterpret_cast<const u32 *>(tiles[i]), int(widths[i]), 0,
                   8 * f.blk};
  };
  auto loadX = [&](const Info &f, int r, float (&x)[NB][4]) {
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const int b = (g >> 1) + 4 * nb;
      const int k = b < BATCH && b < batch ? T.k[f.u][b < BATCH ? b : 0] : -1;
      loadX4(k < 0 ? nullptr
                   : act + ((long long)(b * nSlot + k) * 16 + f.h) * 128 +
                         2 * j4 + 16 * r,
             x[nb]);
    }
  };
  const SV *svb = static_cast<const SV *>(down_sv_block);
  const SV *svh = static_cast<const SV *>(down_svh);
  auto flush = [&](const Info &f, const float (&acc)[NB][8][4]) {
    const int u = f.u, e = T.e[u], blk = f.blk, hFirst = f.h;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const int b = j4 + 4 * nb;
      if (b >= BATCH || b >= batch)
        continue;
      const int k = T.k[u][b < BATCH ? b : 0];
      if (k < 0)
        continue;
      if (svh) {
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          zs[b][16 * c + g] = acc[nb][c][0] + acc[nb][c][1];
          zs[b][16 * c + g + 8] = acc[nb][c][2] + acc[nb][c][3];
        }
      } else {
        const float sc = optAt(svb, (long long)e * nBlk + blk) *
                         T.w[u][b < BATCH ? b : 0];
        const long long dst =
            (((long long)blk * Q + b * nSlot + k) * 16 + hFirst) * 128;
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          storeDownPart<SUM>(downPart, dst + 16 * c + g,
                             (acc[nb][c][0] + acc[nb][c][1]) * sc);
          storeDownPart<SUM>(downPart, dst + 16 * c + g + 8,
                             (acc[nb][c][2] + acc[nb][c][3]) * sc);
        }
      }
    }
    if (svh) {
      __syncwarp();
      for (int b = 0; b < batch && b < BATCH; ++b) {
        const int k = T.k[u][b];
        if (k < 0)
          continue;
        float v[4];
#pragma unroll
        for (int t = 0; t < 4; ++t)
          v[t] = zs[b][4 * lane + t];
        hadamard128Warp(v, lane);
        const long long dst =
            (((long long)blk * Q + b * nSlot + k) * 16 + hFirst) * 128;
#pragma unroll
        for (int t = 0; t < 4; ++t)
          storeDownPart<SUM>(
              downPart, dst + 4 * lane + t,
              v[t] * kInvSqrt128 *
                  toFloat<SV>(
                      svh[(long long)e * hidden + 128 * blk + 4 * lane + t]) *
                  T.w[u][b]);
      }
      __syncwarp(); // zs is reused by the next flush
    }
    if (!arriveItems(&counters[(batch * topk + n_shared) * 16 + blk],
                     1, owned))
      return;
    // Last item of blk: rows, then slots, then owned halves ascending.
    for (int b = 0; b < batch; ++b) {
      DownSum<SUM> sum;
      for (int k = 0; k < nSlot; ++k) {
        int uu = -1;
        for (int x = 0; x < T.n; ++x)
          if (T.k[x][b < BATCH ? b : 0] == k)
            uu = x;
        if (uu < 0) // empty slot or a repeat of an earlier slot's id
          continue;
        const long long src =
            ((long long)blk * Q + b * nSlot + k) * 16 * 128 + 4 * lane;
        for (u32 mm = T.mask[uu]; mm; mm &= mm - 1)
          sum.add(downPart, src + (__ffs(mm) - 1) * 128);
      }
      sum.store(out, b, hidden, blk, signs_out, accumulate);
    }
  };
  const TileStrides st{down_sI, 0, down_sJ8};
  const int W = gridDim.x * (THREADS / 32);
  const int w = blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
  moeStream<WMASK, CB, E4M3, NB, PIPE>(w, W, w < nItems ? (nItems - 1 - w) / W + 1 : 0,
                                       8, st, info, desc, loadX, flush, ring,
                                       ringK);
}

/// One-item-per-warp grids (the original path); smaller grids take the
/// persistent path.
__device__ __forceinline__ long long moeFullGrid(int stage, int units,
                                                 int hidden, int gu_split,
                                                 int down_group, int warps) {
  const long long items =
      stage == 0 ? (long long)units * 32 * gu_split
                 : (long long)units * (hidden / 128) * (16 / down_group);
  return (items + warps - 1) / warps;
}

template <int WMASK, int CB, bool E4M3, int BATCH, int SVT, int STAGE,
          int PIPE, int MINBLOCKS, int SUM, int THREADS>
__device__ __forceinline__ void moeTrellis(GLM_MOE_TRELLIS_PARAMS) {
  (void)MINBLOCKS; // __launch_bounds__(THREADS, MINBLOCKS) on the entry
  static_assert(SUM >= 0 && SUM <= 2, "sum: f32, fixed or fixed_out");
  static_assert(WMASK != 0 && (WMASK & ~0x1FE) == 0, "widths: K in 1..8");
  static_assert(CB >= 0 && CB <= 2, "codebook: 3inst, mcg or mul1");
  static_assert(BATCH >= 1 && BATCH <= 8, "batch 1..8");
  static_assert(STAGE >= 0 && STAGE <= 3,
                "stage: 0 gate/up, 1 down (+2: persistent path compiled in)");
  constexpr int kStage = STAGE & 1;
  constexpr bool kPersist = (STAGE & 2) != 0;
  static_assert(PIPE == 0 || (PIPE >= 2 && PIPE <= 8), "pipe: 0 or 2..8");
  static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 512,
                "THREADS: 1..16 warps");
  // Preconditions the launcher guarantees; a violation traps (never wrong
  // numbers): 16 halves of 128, whole 128-blocks, splits that divide.
  if (inter != 16 * 128 || hidden % 128 != 0 || batch < 1 || batch > BATCH ||
      batch * topk > 64 || gu_split < 1 || (hidden / 16) % gu_split != 0 ||
      down_group < 1 || 16 % down_group != 0 ||
      (SUM == 2 && kStage == 1 && signs_out))
    __trap();
  constexpr int kRing = MoeRing<WMASK, PIPE, THREADS>::kWords;
  constexpr int kWarps = THREADS / 32;
  __shared__ __align__(16) u32 ring[kWarps][kRing];
  // EXL3 output Hadamard of the down stage (one float per stage 0).
  __shared__ float zs[kStage == 1 ? kWarps : 1][kStage == 1 ? BATCH : 1][128];
  const int units = batch * topk + n_shared;
  if ((long long)gridDim.x >=
      moeFullGrid(kStage, units, hidden, gu_split, down_group, kWarps)) {
    constexpr int TP = moeTablePairs(E4M3, THREADS, STAGE);
    // The table's mbarrier sits after the table (no static shared memory).
    u64 *tabBar = reinterpret_cast<u64 *>(glmTrellisTable + 65536);
    if (TP > 0)
      moeTableSetup<CB, THREADS>(tabBar);
    if (kStage == 0)
      moeGateUp<WMASK, CB, E4M3, BATCH, SVT, PIPE, THREADS, TP>(
          ring, tabBar, GLM_MOE_TRELLIS_ARGS);
    else
      moeDown<WMASK, CB, E4M3, BATCH, SVT, PIPE, THREADS, TP, SUM>(
          ring, reinterpret_cast<float(*)[BATCH][128]>(zs), tabBar,
          GLM_MOE_TRELLIS_ARGS);
    if (TP > 0) // no warp leaves while table copies into its block land
      moeTableWait(tabBar);
    return;
  }
  // Persistent path: more units than the table holds, or down groups of
  // more than one half, trap (the launcher guarantees both).
  // It needs a cp.async ring (pipe >= 2) and a STAGE 2/3 build.
  if (!kPersist || PIPE < 2 || units > kMoeMaxUnits || down_group != 1)
    __trap();
  if constexpr (kPersist && PIPE >= 2) {
  __shared__ MoeUnitTable<BATCH> table;
  __shared__ int ringK[kWarps][8];
  buildUnitTable<BATCH>(table, expert_ids, route_w, tiles, batch, topk,
                        n_routed, n_shared);
  const int warp = threadIdx.x >> 5;
  if (kStage == 0)
    moeGateUpPersistent<WMASK, CB, E4M3, BATCH, SVT, PIPE, THREADS>(
        ring[warp], ringK[warp], table, GLM_MOE_TRELLIS_ARGS);
  else
    moeDownPersistent<WMASK, CB, E4M3, BATCH, SVT, PIPE, THREADS, SUM>(
        ring[warp], ringK[warp],
        reinterpret_cast<float(*)[128]>(&zs[kStage == 1 ? warp : 0][0][0]),
        table, GLM_MOE_TRELLIS_ARGS);
  }
}

} // namespace glm
