// kda_chunk.cuh - chunked KDA prefill of one GLM-5.3-Flash KDA layer over
// the T prompt tokens of one sequence: the delta rule of kda_decode over
// chunks of C tokens in its WY form (runtime/cpu/flash_ops.h kdaChunked),
// on tensor cores (mma.sync m16n8k8 tf32, fp32 accumulate; sm_80 and later,
// no wgmma: the same code runs on sm_90 and sm_121), then kda_decode's
// gated RMS norm. Inputs are kda_prep's outputs; the fp32 recurrent state
// is read before the first token and written after the last, in
// kda_decode's layout, so decode continues from it.
//
// Launch: grid (n, V), block THREADS (128 or 256), dynamic shared memory
// 4·fm::kdaChunkSmemFloats(C, dk, dv / V) bytes (<= 78 KB at C = 32,
// dk = dv = 128, V = 1: the caller raises
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES past 48 KB; the kernel
// traps on less). Templates C (16 or 32), SPLIT (1: operands rounded to
// tf32; 3: 3xTF32, each operand x = hi + lo with hi = tf32(x),
// lo = tf32(x − hi), products hi·hi + hi·lo + lo·hi: near fp32), V (1, 2,
// 4 blocks a head), THREADS.
// Codegen family kda_chunk: chunk = C, mma = tf32 (SPLIT 1) | tf32x3 (3),
// vsplit = V (default 1), threads; the plan records the launch's smemBytes
// (the CUDA backend raises the attribute itself). Typical: chunk 32, tf32,
// 256 threads; vsplit 2 when n heads leave SMs idle (64 heads, 132 SMs).
// Block (hl, y): local head hl = blockIdx.x, v columns [y·dv/V, (y+1)·dv/V)
// of it (the columns of S, δ and O are independent; every block of a head
// repeats the chunk's gates and Akk, Aqk); it walks the chunks in order,
// S in registers (warp w owns the block's v columns 16w .. 16w + 15 of Sᵀ,
// so dv/V <= 16·THREADS/32), the next chunk's rows prefetched to L2.
// Activations (packed as kda_prep writes them; head hl at hl·dk etc.):
//   q, k  [T, n·dk] fp32  q̂ (already times dk^-1/2) and k̂
//   v     [T, n·dv] fp32
//   g     [T, n·dk] fp32  log-decay (kda_prep: fm::kdaLogGate), in (lower, 0)
//   beta  [T, n]    fp32
//   gate  [T, gs]   fp32  output gate pre-activation g_b(g_a h), at hl·dv
// Weight: oNorm [dv] (wdt: 0 f32, 1 f16, 2 bf16, 3 e4m3).
// State: state [slots, n, dk, dv] fp32, S[a][c] at a·dv + c, slot seq[0];
//   pos[0] == 0: the sequence starts here (S reads as zeros; null pos: it
//   continues, as kda_decode).
// Output: out [T, os] fp32, head hl at hl·dv (os >= n·dv: a rank's heads
//   inside full-width rows of all H heads, or packed with os = n·dv);
//   with V > 1 the un-normalised O (gate, oNorm, eps unread): kda_gnorm
//   then applies step 5 to the rows, in place.
// Scalars: T, dk (8..128, a multiple of 8), dv (a multiple of 16·V,
// dv/V <= 16·warps), eps (the output norm's).
//
// One chunk of m <= C tokens, Γ_t the running fp32 sum of g over the chunk
// (t inclusive), all exponentials fm::expF, products and sums fp32 with no
// contraction (--fmad=false) except inside the MMAs:
//   1. r = Γ_{min(C/2, m) − 1} per channel (the chunk's middle, so that
//      every factor e^{±(Γ − r)} below stays finite: |Γ − r| <= 5·C/2 <= 80
//      for g > −5; C = 64 could overflow, hence C <= 32. The softplus
//      gate (lower = 0, unused by the checkpoints) must stay above −5 a
//      token as well);
//      Akk[t][i] = β_t·Σ_c (k_t e^{Γt−r})(k_i e^{r−Γi}) for i < t, else 0;
//      Aqk[t][i] = Σ_c (q_t e^{Γt−r})(k_i e^{r−Γi}) for i <= t, else 0.
//   2. k_t e^{Γt} = (k_t e^{Γt−r})·e^{r}, q_t e^{Γt} likewise, and
//      k_i e^{Γm−Γi} = (k_i e^{r−Γi})·e^{Γm−r} (fp32, Γm the last token's);
//      W = (k_t e^{Γt})·S0 and O = (q_t e^{Γt})·S0 (MMA with S0 from the
//      registers); δ_t = β_t·(v_t − W_t) (fp32);
//   3. δ_t = δ_t − Akk[t][i]·δ_i for i = 0 .. t−1 in order, t = 1 .. C−1
//      (fp32, one thread per v column): the unit lower-triangular solve;
//   4. O += Aqkᵀ-weighted δ (MMA into the same accumulators); S = S·e^{Γm}
//      per key row (fp32), then S += Σ_i (k_i e^{Γm−Γi}) δ_iᵀ (MMA);
//   5. the gated norm of each token's O as kda_decode: warp per token,
//      lane sums of o² over c = lane, lane + 32, .., butterfly;
//      out = (oNorm·(o·(1/sqrt(ss/dv + eps))))·sigmoid(gate).
// The twin (runtime/twins/twin_flash.cpp) repeats every fp32 step and
// rounds each MMA operand as cvt.rna.tf32 does, summing the products in
// fp64: CUDA differs from it by the MMAs' fp32 accumulation only.
#pragma once

#include "flash_math.cuh"
#include "helper_common.cuh"

#define GLM_KDA_CHUNK_PARAMS                                                   \
  const float *q, const float *k, const float *v, const float *g,              \
      const float *beta, const float *gate, int gs, const void *oNorm,         \
      int wdt, float *state, const int *seq, const int *pos, float *out,       \
      int T, int dk, int dv, float eps, int os
#define GLM_KDA_CHUNK_ARGS                                                     \
  q, k, v, g, beta, gate, gs, oNorm, wdt, state, seq, pos, out, T, dk, dv,     \
      eps, os

namespace glm {
namespace kc {

/// x rounded to tf32 (nearest, ties away), its 13 low mantissa bits zero
/// (masked: the MMA ignores them, 3xTF32's x − hi needs them zero).
__device__ __forceinline__ unsigned tf32Bits(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r & 0xffffe000u;
}

/// Asks L2 for the 128-byte lines of the chunk of rows [r0, r1) (rows < T)
/// that one block reads: q, k, g (dk floats a row), v, gate (dv floats),
/// one line per 32 floats, spread over the block's threads. A hint only:
/// the next chunk's loads then wait on L2, not DRAM.
__device__ __forceinline__ void
prefetchRows(const float *q, const float *k, const float *g, const float *v,
             const float *gate, int gs, long long ldk, long long ldv, int hl,
             int dk, int dv, int r0, int r1, int tid, int nthreads) {
  const int lk = (dk + 31) / 32, lv = (dv + 31) / 32;
  const int per = 3 * lk + (gate ? 2 : 1) * lv; // gate null: not read
  for (int idx = tid; idx < (r1 - r0) * per; idx += nthreads) {
    const long long row = r0 + idx / per;
    const int x = idx % per;
    const float *p;
    if (x < 3 * lk)
      p = (x < lk       ? q
           : x < 2 * lk ? k
                        : g) +
          row * ldk + (long long)hl * dk + 32 * (x % lk);
    else if (x < 3 * lk + lv)
      p = v + row * ldv + (long long)hl * dv + 32 * (x - 3 * lk);
    else
      p = gate + row * gs + (long long)hl * dv + 32 * (x - 3 * lk - lv);
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
  }
}

__device__ __forceinline__ void mma1688(float c[4], const unsigned a[4],
                                        unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// c += A·B on one 16x8x8 tile from fp32 fragments: a = (row g, k t),
/// (g+8, t), (g, t+4), (g+8, t+4); b = (k t, col g), (k t+4, col g), with
/// g = lane / 4, t = lane % 4. SPLIT 3 adds the lo·hi and hi·lo products
/// first (they are the small ones).
template <int SPLIT>
__device__ __forceinline__ void mmaF(float c[4], const float a[4],
                                     const float b[2]) {
  unsigned ah[4], bh[2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    ah[i] = tf32Bits(a[i]);
  bh[0] = tf32Bits(b[0]);
  bh[1] = tf32Bits(b[1]);
  if (SPLIT == 3) {
    unsigned al[4], bl[2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      al[i] = tf32Bits(a[i] - __uint_as_float(ah[i]));
    bl[0] = tf32Bits(b[0] - __uint_as_float(bh[0]));
    bl[1] = tf32Bits(b[1] - __uint_as_float(bh[1]));
    mma1688(c, al, bh[0], bh[1]);
    mma1688(c, ah, bl[0], bl[1]);
  }
  mma1688(c, ah, bh[0], bh[1]);
}

} // namespace kc

template <int C, int SPLIT, int V, int THREADS>
__device__ __forceinline__ void kdaChunk(GLM_KDA_CHUNK_PARAMS) {
  static_assert(C == 16 || C == 32, "C: 16 or 32 tokens a chunk");
  static_assert(SPLIT == 1 || SPLIT == 3, "SPLIT: 1 (tf32) or 3 (3xTF32)");
  static_assert(V == 1 || V == 2 || V == 4, "V: 1, 2 or 4 blocks a head");
  static_assert(THREADS == 128 || THREADS == 256, "THREADS: 128 or 256");
  constexpr int W = THREADS / 32, kMaxDk = 128, NT = kMaxDk / 8;
  constexpr int CT = C / 8; // token tiles of 8
  extern __shared__ __align__(16) float kdaChunkSmem[];
  unsigned smemBytes;
  asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(smemBytes));
  if (dk < 8 || dk > kMaxDk || dk % 8 || dv < 16 * V || dv % (16 * V) ||
      dv / V > 16 * W ||
      smemBytes < 4u * (unsigned)fm::kdaChunkSmemFloats(C, dk, dv / V))
    __trap(); // the footprint refuses such launches first
  const int dvb = dv / V, c0 = blockIdx.y * dvb; // this block's v columns
  const int sk = fm::kdaChunkStrideK(dk), sd = fm::kdaChunkStrideV(dvb),
            sa = fm::kdaChunkStrideA(C);
  float *X0 = kdaChunkSmem;  // (C,dk) q e^{Γ−r}, then q e^{Γ}
  float *X1 = X0 + C * sk;   // (C,dk) k e^{Γ−r}, then k e^{Γ}
  float *X2 = X1 + C * sk;   // (C,dk) k e^{r−Γ}, then k e^{Γm−Γ}
  float *D = X2 + C * sk;    // (C,dv) δ, then O
  float *Akk = D + C * sd;   // (C,C)
  float *Aqk = Akk + C * sa; // (C,C)
  float *bet = Aqk + C * sa; // (C)
  float *en = bet + C;       // (dk) e^{Γm}
  float *er = en + dk;       // (dk) e^{r}
  float *el = er + dk;       // (dk) e^{Γm−r}
  const int hl = blockIdx.x, n = gridDim.x;
  const int t = threadIdx.x, lane = t & 31, w = t >> 5;
  const int gq = lane >> 2, tq = lane & 3;
  const int pg = (gq >> 1) + 4 * (gq & 1); // channel of S column gq
  const bool fresh = pos && pos[0] == 0;
  const long long slot = seq[0];
  const long long ldk = (long long)n * dk, ldv = (long long)n * dv;
  const int nk = dk / 8, r0 = 16 * w;
  const bool mine = r0 < dvb; // this warp owns v columns c0 + r0 .. +15
  // (dk, dvb) at row stride dv: the block's columns of S.
  float *S = state + ((slot * n + hl) * (long long)dk) * dv + c0;

  // The first chunk's rows on their way to L2 while S loads.
  kc::prefetchRows(q, k, g, v, V == 1 ? gate : nullptr, gs, ldk, ldv, hl, dk,
                   dv, 0, T < C ? T : C, t, THREADS);

  // Sᵀ (dv, dk) in registers: s[nt][e] is v column r0 + gq (+8 for e >= 2)
  // and key row 8nt + tq (+4 for odd e), so that s[kk] is also the A
  // fragment of the k-step kk (channel = k index).
  float s[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = r0 + gq + (e & 2 ? 8 : 0), a = 8 * nt + tq + (e & 1) * 4;
      s[nt][e] = mine && nt < nk && !fresh ? S[(long long)a * dv + c] : 0.0f;
    }

  for (int t0 = 0; t0 < T; t0 += C) {
    const int m = T - t0 < C ? T - t0 : C;
    __syncthreads(); // the last chunk's tiles are read
    // The next chunk's rows, while this one computes.
    if (t0 + C < T)
      kc::prefetchRows(q, k, g, v, V == 1 ? gate : nullptr, gs, ldk, ldv, hl,
                       dk, dv, t0 + C, t0 + 2 * C < T ? t0 + 2 * C : T, t,
                       THREADS);
    // 1. Γ per channel, the pairwise operands: two threads a channel
    // (`half` 0 takes tokens 0 .. C/2−1, 1 the rest), each with the whole
    // running sum; half 0 keeps e^{r}, e^{Γm−r} and e^{Γm} for step 2.
    for (int idx = t; idx < 2 * dk; idx += THREADS) {
      const int half = idx < dk ? 0 : 1, ch = idx - half * dk;
      float gam[C];
      float acc = 0.0f;
#pragma unroll
      for (int i = 0; i < C; ++i) {
        if (i < m)
          acc = acc + g[(t0 + i) * ldk + (long long)hl * dk + ch];
        gam[i] = acc;
      }
      const float r = gam[C / 2 - 1];
#pragma unroll
      for (int i = 0; i < C; ++i) {
        if ((i < C / 2) != (half == 0))
          continue;
        float xq = 0.0f, xk = 0.0f, xr = 0.0f;
        if (i < m) {
          const long long at = (t0 + i) * ldk + (long long)hl * dk + ch;
          const float up = fm::expF(gam[i] - r), dn = fm::expF(r - gam[i]);
          xq = q[at] * up;
          xk = k[at] * up;
          xr = k[at] * dn;
        }
        X0[i * sk + ch] = xq;
        X1[i * sk + ch] = xk;
        X2[i * sk + ch] = xr;
      }
      if (half == 0) {
        er[ch] = fm::expF(r);
        el[ch] = fm::expF(gam[C - 1] - r);
        en[ch] = fm::expF(gam[C - 1]);
      }
    }
    if (t < C)
      bet[t] = t < m ? beta[(long long)(t0 + t) * n + hl] : 0.0f;
    __syncthreads();
    // Akk (task < C/16·CT) and Aqk: 16 x 8 tiles over dk.
    for (int task = w; task < 2 * (C / 16) * CT; task += W) {
      const int which = task / ((C / 16) * CT), rest = task % ((C / 16) * CT);
      const int mt = rest / CT, j = rest % CT;
      const float *L = which == 0 ? X1 : X0;
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int kk = 0; kk < nk; ++kk) {
        const int ch = 8 * kk + tq;
        const float a[4] = {L[(16 * mt + gq) * sk + ch],
                            L[(16 * mt + gq + 8) * sk + ch],
                            L[(16 * mt + gq) * sk + ch + 4],
                            L[(16 * mt + gq + 8) * sk + ch + 4]};
        const float b[2] = {X2[(8 * j + gq) * sk + ch],
                            X2[(8 * j + gq) * sk + ch + 4]};
        kc::mmaF<SPLIT>(c, a, b);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tt = 16 * mt + gq + (e & 2 ? 8 : 0),
                  ii = 8 * j + 2 * tq + (e & 1);
        if (which == 0)
          Akk[tt * sa + ii] = ii < tt ? bet[tt] * c[e] : 0.0f;
        else
          Aqk[tt * sa + ii] = ii <= tt ? c[e] : 0.0f;
      }
    }
    __syncthreads();
    // The chunk-start operands (all factors <= 1), rescaled in place per
    // channel: q e^{Γ} = (q e^{Γ−r})·e^{r}, k e^{Γm−Γ} = (k e^{r−Γ})·e^{Γm−r}.
    for (int idx = t; idx < 2 * dk; idx += THREADS) {
      const int half = idx < dk ? 0 : 1, ch = idx - half * dk;
#pragma unroll
      for (int i = half * (C / 2); i < (half + 1) * (C / 2); ++i) {
        X0[i * sk + ch] = X0[i * sk + ch] * er[ch];
        X1[i * sk + ch] = X1[i * sk + ch] * er[ch];
        X2[i * sk + ch] = X2[i * sk + ch] * el[ch];
      }
    }
    __syncthreads();
    // 2. W and the state part of O, (dv, C) per warp: A = Sᵀ registers.
    float oa[CT][4];
#pragma unroll
    for (int j = 0; j < CT; ++j)
      oa[j][0] = oa[j][1] = oa[j][2] = oa[j][3] = 0.0f;
    if (mine) {
      float wa[CT][4];
#pragma unroll
      for (int j = 0; j < CT; ++j)
        wa[j][0] = wa[j][1] = wa[j][2] = wa[j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < NT; ++kk) {
        if (kk >= nk)
          continue;
        const float a[4] = {s[kk][0], s[kk][2], s[kk][1], s[kk][3]};
        const int ch = 8 * kk + tq;
#pragma unroll
        for (int j = 0; j < CT; ++j) {
          const float bk[2] = {X1[(8 * j + gq) * sk + ch],
                               X1[(8 * j + gq) * sk + ch + 4]};
          const float bq[2] = {X0[(8 * j + gq) * sk + ch],
                               X0[(8 * j + gq) * sk + ch + 4]};
          kc::mmaF<SPLIT>(wa[j], a, bk);
          kc::mmaF<SPLIT>(oa[j], a, bq);
        }
      }
#pragma unroll
      for (int j = 0; j < CT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int tt = 8 * j + 2 * tq + (e & 1),
                    c = r0 + gq + (e & 2 ? 8 : 0);
          D[tt * sd + c] =
              tt < m ? bet[tt] *
                           (v[(t0 + tt) * ldv + (long long)hl * dv + c0 + c] -
                            wa[j][e])
                     : 0.0f;
        }
    }
    __syncthreads();
    // 3. The unit lower-triangular solve, one thread per v column, δ in
    // registers (unrolled: row tt's early terms overlap row tt−1's; the
    // rows past m are zeros and stay so).
    if (t < dvb) {
      float d[C];
#pragma unroll
      for (int i = 0; i < C; ++i)
        d[i] = D[i * sd + t];
#pragma unroll
      for (int tt = 1; tt < C; ++tt) {
        float x = d[tt];
#pragma unroll
        for (int i = 0; i < tt; ++i)
          x = x - Akk[tt * sa + i] * d[i];
        d[tt] = x;
      }
#pragma unroll
      for (int i = 1; i < C; ++i)
        D[i * sd + t] = d[i];
    }
    __syncthreads();
    // 4. O += δ·Aqkᵀ; S = S·e^{Γm} + Σ_i (k_i e^{Γm−Γi}) δ_iᵀ.
    if (mine) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        if (nt < nk)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            s[nt][e] = s[nt][e] * en[8 * nt + tq + (e & 1) * 4];
#pragma unroll
      for (int ks = 0; ks < CT; ++ks) {
        const int i = 8 * ks + tq;
        const float a[4] = {D[i * sd + r0 + gq], D[i * sd + r0 + gq + 8],
                            D[(i + 4) * sd + r0 + gq],
                            D[(i + 4) * sd + r0 + gq + 8]};
#pragma unroll
        for (int j = 0; j < CT; ++j) {
          const float b[2] = {Aqk[(8 * j + gq) * sa + i],
                              Aqk[(8 * j + gq) * sa + i + 4]};
          kc::mmaF<SPLIT>(oa[j], a, b);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          if (nt >= nk)
            continue;
          const float b[2] = {X2[i * sk + 8 * nt + pg],
                              X2[(i + 4) * sk + 8 * nt + pg]};
          kc::mmaF<SPLIT>(s[nt], a, b);
        }
      }
    }
    __syncthreads(); // δ is read
    if (mine)
#pragma unroll
      for (int j = 0; j < CT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int tt = 8 * j + 2 * tq + (e & 1),
                    c = r0 + gq + (e & 2 ? 8 : 0);
          D[tt * sd + c] = oa[j][e];
        }
    __syncthreads();
    // 5. The gated RMS norm, a warp per token; with several blocks a head,
    // their O columns as they are (kda_gnorm normalises the rows).
    if (V > 1) {
      for (int tt = w; tt < m; tt += W)
        for (int c = lane; c < dvb; c += 32)
          out[(t0 + tt) * os + (long long)hl * dv + c0 + c] = D[tt * sd + c];
      continue;
    }
    for (int tt = w; tt < m; tt += W) {
      const float *o = D + tt * sd;
      float ss = 0.0f;
      for (int c = lane; c < dv; c += 32)
        ss = ss + o[c] * o[c];
      ss = hx::warpSumF(ss);
      const float inv = 1.0f / fm::sqrtF(ss / (float)dv + eps);
      const long long row = t0 + tt;
      for (int c = lane; c < dv; c += 32) {
        const float gv = gate[row * gs + (long long)hl * dv + c];
        out[row * os + (long long)hl * dv + c] =
            (hx::ldAny(oNorm, c, wdt) * (o[c] * inv)) * fm::sigmoidF(gv);
      }
    }
  }
  if (mine)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      if (nt < nk)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = r0 + gq + (e & 2 ? 8 : 0),
                    a = 8 * nt + tq + (e & 1) * 4;
          S[(long long)a * dv + c] = s[nt][e];
        }
}

} // namespace glm
