// mla_rows16.cuh - a prefill chunk's selectable cache rows in the fp16
// forms mla_prefill's tensor cores take, once per chunk (layout:
// mla_rows16_layout.cuh). mla_prefill converted each gathered row per tile,
// for every query row that selected it: at GLM-5.3's shape a chunk's 2048
// rows each select up to 2048 keys, so a cache row went through the
// conversion (widen, max, scale, round) up to 4096 times a layer, and that
// conversion, not the gather, was the kernel's time (docs/perf.md, session
// 19). mla_prefill<keys = rows16> then only copies halves.
//
// ABI: (cache, seq, pos, R, maxCtx, kvr, dr, rows16, pages, pageShift); the
// cache [slots][maxCtx] rows (paged: kv::SlotRows) of kvr + dr values in
// form KV (kv_cache.cuh), the chunk's
// slot seq[0] (a prefill chunk has one), its rows' positions pos[0..R-1],
// ascending: rows 0 .. pos[R - 1] (at most maxCtx - 1) are the ones its
// selections can name. Grid (ceil(maxCtx / 8)), 256 threads: a warp a row,
// blocks past the last row return. Each row gets the bits mla_prefill's
// per-tile conversion gives it (mp::KeyTile::storeRow): the key row over
// all kvr + dr values with scale exponents in [-126, 100], the value row
// over the first kvr with [-15, 0].
#pragma once

#include "mla_prefill.cuh"
#include "mla_rows16_layout.cuh"

#define GLM_MLA_ROWS16_PARAMS                                                  \
  const void *cache, const int *seq, const int *pos, int R, int maxCtx,        \
      int kvr, int dr, void *rows16, const int *pages, int pageShift
#define GLM_MLA_ROWS16_ARGS                                                    \
  cache, seq, pos, R, maxCtx, kvr, dr, rows16, pages, pageShift

namespace glm {

template <int KV, int THREADS>
__device__ __forceinline__ void mlaRows16(GLM_MLA_ROWS16_PARAMS) {
  static_assert(THREADS == 32 * rows16::kRowsPerBlock,
                "a warp a row, kRowsPerBlock warps");
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x * rows16::kRowsPerBlock + (threadIdx.x >> 5);
  const int last = min(pos[R - 1], maxCtx - 1);
  if (t > last)
    return;
  const int lat = kvr + dr, kh = (int)rows16::keyHalves(kvr, dr);
  const int c4 = kh >> 2; // 4-value chunks of a key row (zero past lat)
  const kv::Row<KV> r = kv::row<KV>(
      cache, kv::slotRows(pages, pageShift, seq[0], maxCtx)(t), lat);
  constexpr int CH = mp::kMaxSteps * 16 / 128; // chunks of 128 values a row
  float4 f[CH];
  float mk = 0.0f, mv = 0.0f;
#pragma unroll
  for (int u = 0; u < CH; ++u) {
    const int c = lane + 32 * u;
    f[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (c < c4 && 4 * c < lat)
      f[u] = r.four(4 * c);
    const float m4 = fmaxf(fmaxf(fabsf(f[u].x), fabsf(f[u].y)),
                           fmaxf(fabsf(f[u].z), fabsf(f[u].w)));
    mk = fmaxf(mk, m4);
    if (4 * c < kvr)
      mv = fmaxf(mv, m4);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    mk = fmaxf(mk, __shfl_xor_sync(0xffffffffu, mk, o));
    mv = fmaxf(mv, __shfl_xor_sync(0xffffffffu, mv, o));
  }
  const int ek = mp::scaleExp(mk, rows16::kKeyLo, rows16::kKeyHi);
  const int ev = mp::scaleExp(mv, rows16::kValueLo, rows16::kValueHi);
  const float uk = ldexpf(1.0f, ek), uv = ldexpf(1.0f, ev);
  unsigned char *base = (unsigned char *)rows16;
  unsigned short *keys = (unsigned short *)base + (long long)t * kh;
  unsigned short *vals =
      (unsigned short *)(base + rows16::valueOffset(maxCtx, kvr, dr)) +
      (long long)t * kvr;
#pragma unroll
  for (int u = 0; u < CH; ++u) {
    const int c = lane + 32 * u;
    if (c < c4)
      *(uint2 *)(keys + 4 * c) = make_uint2(mp::pack(f[u].x * uk, f[u].y * uk),
                                            mp::pack(f[u].z * uk, f[u].w * uk));
    if (4 * c < kvr)
      *(uint2 *)(vals + 4 * c) = make_uint2(mp::pack(f[u].x * uv, f[u].y * uv),
                                            mp::pack(f[u].z * uv, f[u].w * uv));
  }
  if (lane == 0) {
    ((float *)(base + rows16::keyScaleOffset(maxCtx, kvr, dr)))[t] =
        ldexpf(1.0f, -ek);
    ((float *)(base + rows16::valueScaleOffset(maxCtx, kvr, dr)))[t] =
        ldexpf(1.0f, -ev);
  }
}

} // namespace glm
