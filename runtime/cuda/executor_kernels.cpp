//===- executor_kernels.cpp - fp64-accumulating helper kernels ------------===//
//
// The CUDA executor's small kernels that have no codegen family yet (fp32
// activations, fp64 sums): norms, RoPE, DSA scores and selection, absorbed
// MLA attention, routing, SwiGLU parts and the ordered unit reduction. Each
// mirrors one step of runtime/cpu/forward.cpp with the same summation order
// (sequential where the CPU is sequential) and is compiled with
// --fmad=false, so the results equal the reference executor's except for
// the last bits of exp/pow/sin/cos. They are per-token decode kernels;
// speed comes later from the codegen families.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/executor.h"

namespace glm::rt::cuda {

const char *executorKernelSource() {
  return R"CUDA(
#define GLM_X extern "C" __global__ void

// y = w * x / sqrt(mean(x^2) + eps); y may alias x. Block of any size.
GLM_X glmx_rms_norm(const float *x, const float *w, float *y, int n,
                    double eps) {
  __shared__ double inv;
  if (threadIdx.x == 0) {
    double ss = 0;
    for (int i = 0; i < n; ++i)
      ss += (double)x[i] * (double)x[i];
    inv = 1.0 / sqrt(ss / (double)n + eps);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    y[i] = (float)((double)w[i] * ((double)x[i] * inv));
}

// LayerNorm with affine weight and bias (biased variance).
GLM_X glmx_layer_norm(const float *x, const float *w, const float *b,
                      float *y, int n, double eps) {
  __shared__ double mean, inv;
  if (threadIdx.x == 0) {
    double m = 0;
    for (int i = 0; i < n; ++i)
      m += x[i];
    m /= (double)n;
    double var = 0;
    for (int i = 0; i < n; ++i) {
      double d = (double)x[i] - m;
      var += d * d;
    }
    var /= (double)n;
    mean = m;
    inv = 1.0 / sqrt(var + eps);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    y[i] = (float)(((double)x[i] - mean) * inv * (double)w[i] + (double)b[i]);
}

// Interleaved RoPE on `count` vectors x + v*stride, first `dim` values.
// Grid (count), block >= dim/2.
GLM_X glmx_rope(float *x, int dim, int stride, int pos, double theta) {
  const int i = threadIdx.x;
  if (i >= dim / 2)
    return;
  float *p = x + (long long)blockIdx.x * stride;
  double invFreq = pow(theta, -2.0 * (double)i / (double)dim);
  double angle = (double)pos * invFreq;
  double c = cos(angle), s = sin(angle);
  double a = p[2 * i], b = p[2 * i + 1];
  p[2 * i] = (float)(a * c - b * s);
  p[2 * i + 1] = (float)(b * c + a * s);
}

// sel = 0..T-1 (dense attention while T <= index_topk).
GLM_X glmx_iota(int *sel, int *nsel, int T) {
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < T;
       t += gridDim.x * blockDim.x)
    sel[t] = t;
  if (blockIdx.x == 0 && threadIdx.x == 0)
    *nsel = T;
}

// I(t) = sum_h w_h * headScale * ReLU(q_h . k_t * dotScale), one thread
// per key t.
GLM_X glmx_indexer_scores(const float *qi, const float *keys,
                          const double *wts, double *score, int T, int nh,
                          int hd, double headScale, double dotScale) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T)
    return;
  const float *kt = keys + (long long)t * hd;
  double acc = 0;
  for (int h = 0; h < nh; ++h) {
    double d = 0;
    for (int i = 0; i < hd; ++i)
      d += (double)qi[h * hd + i] * (double)kt[i];
    double v = d * dotScale;
    acc += wts[h] * headScale * (v > 0.0 ? v : 0.0);
  }
  score[t] = acc;
}

// The k largest scores (ties: lower position) in ascending position order.
// One block; flags is scratch [T].
GLM_X glmx_dsa_select(const double *score, int T, int k, int *flags,
                      int *sel, int *nsel) {
  for (int t = threadIdx.x; t < T; t += blockDim.x) {
    const double st = score[t];
    int rank = 0;
    for (int u = 0; u < T && rank < k; ++u) {
      const double su = score[u];
      rank += (su > st || (su == st && u < t)) ? 1 : 0;
    }
    flags[t] = rank < k;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int n = 0;
    for (int t = 0; t < T; ++t)
      if (flags[t])
        sel[n++] = t;
    *nsel = n;
  }
}

// Absorbed MLA attention for head blockIdx.x over the selected latent rows:
// qabs = W_UK^T q_nope, p = softmax((c.qabs + kpe.q_pe) * scale),
// ctx = sum p c, ov = W_UV ctx. q_pe is already roped. Dynamic shared
// memory: 2 * kvr doubles; p is global scratch [H, pStride].
GLM_X glmx_mla_attn(const float *q, const float *kvB, const float *cache,
                    const int *sel, const int *nselp, double *pAll,
                    int pStride, float *ov, int dn, int dr, int dv, int kvr,
                    double scale) {
  extern __shared__ double sh[];
  double *qabs = sh, *ctx = sh + kvr;
  __shared__ double mx, sum;
  const int h = blockIdx.x, lat = kvr + dr, n = *nselp;
  const float *qn = q + (long long)h * (dn + dr), *qp = qn + dn;
  double *p = pAll + (long long)h * pStride;
  for (int c = threadIdx.x; c < kvr; c += blockDim.x) {
    double a = 0;
    for (int i = 0; i < dn; ++i)
      a += (double)kvB[((long long)h * (dn + dv) + i) * kvr + c] *
           (double)qn[i];
    qabs[c] = a;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float *ent = cache + (long long)sel[j] * lat;
    double a = 0, b = 0;
    for (int c = 0; c < kvr; ++c)
      a += (double)ent[c] * qabs[c];
    for (int c = 0; c < dr; ++c)
      b += (double)ent[kvr + c] * (double)qp[c];
    p[j] = (a + b) * scale;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double m = p[0];
    for (int j = 1; j < n; ++j)
      m = p[j] > m ? p[j] : m;
    mx = m;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += blockDim.x)
    p[j] = exp(p[j] - mx);
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    for (int j = 0; j < n; ++j)
      s += p[j];
    sum = s;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += blockDim.x)
    p[j] /= sum;
  __syncthreads();
  for (int c = threadIdx.x; c < kvr; c += blockDim.x) {
    double a = 0;
    for (int j = 0; j < n; ++j)
      a += p[j] * (double)cache[(long long)sel[j] * lat + c];
    ctx[c] = a;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < dv; j += blockDim.x) {
    const float *wr = kvB + ((long long)h * (dn + dv) + dn + j) * kvr;
    double a = 0;
    for (int c = 0; c < kvr; ++c)
      a += (double)wr[c] * ctx[c];
    ov[(long long)h * dv + j] = (float)a;
  }
}

// contrib[h*d + r] = o[r, h*dv : (h+1)*dv] . ov[h]; grid (ceil(d/B), H).
GLM_X glmx_head_out(const float *o, const float *ov, double *contrib, int d,
                    int H, int dv) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x, h = blockIdx.y;
  if (r >= d)
    return;
  const float *wr = o + (long long)r * H * dv + (long long)h * dv;
  const float *v = ov + (long long)h * dv;
  double a = 0;
  for (int j = 0; j < dv; ++j)
    a += (double)wr[j] * (double)v[j];
  contrib[(long long)h * d + r] = a;
}

// x[i] += (float)(sum over units u in order of part[u*n + i]).
GLM_X glmx_reduce_add(const double *part, int units, int n, float *x) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  double s = 0;
  for (int u = 0; u < units; ++u)
    s += part[(long long)u * n + i];
  x[i] = x[i] + (float)s;
}

// Sigmoid router: top k of sigmoid(l) + bias (ties: lower id), sorted by
// expert id, weights renormalised and scaled. One thread; E <= 1024.
GLM_X glmx_route(const double *logits, const float *bias, int E, int k,
                 int normalize, double scale, int *experts,
                 double *weights) {
  __shared__ double s[1024], ch[1024];
  __shared__ unsigned char taken[1024];
  if (threadIdx.x != 0)
    return;
  for (int e = 0; e < E; ++e) {
    s[e] = 1.0 / (1.0 + exp(-logits[e]));
    ch[e] = s[e] + (bias ? (double)bias[e] : 0.0);
    taken[e] = 0;
  }
  if (k > E)
    k = E;
  int pick[64];
  for (int kk = 0; kk < k; ++kk) {
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (!taken[e] && (best < 0 || ch[e] > ch[best]))
        best = e;
    taken[best] = 1;
    pick[kk] = best;
  }
  for (int a = 1; a < k; ++a) // ascending expert id
    for (int b = a; b > 0 && pick[b - 1] > pick[b]; --b) {
      int t = pick[b];
      pick[b] = pick[b - 1];
      pick[b - 1] = t;
    }
  double sum = 0;
  for (int kk = 0; kk < k; ++kk)
    sum += s[pick[kk]];
  for (int kk = 0; kk < k; ++kk) {
    experts[kk] = pick[kk];
    weights[kk] = (normalize ? s[pick[kk]] / (sum + 1e-20) : s[pick[kk]]) *
                  scale;
  }
}

// act[u*width + j] = SiLU(gate_j . x) * (up_j . x) for unit u (expert
// ids[u], or the only matrix when ids is null). Thread per (j, u).
GLM_X glmx_swiglu_act(const float *gate, const float *up, const float *x,
                      const int *ids, long long expertStride, int width,
                      int d, double *act) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, u = blockIdx.y;
  if (j >= width)
    return;
  const long long base = (ids ? (long long)ids[u] : 0) * expertStride +
                         (long long)j * d;
  double g = 0, v = 0;
  for (int i = 0; i < d; ++i)
    g += (double)gate[base + i] * (double)x[i];
  for (int i = 0; i < d; ++i)
    v += (double)up[base + i] * (double)x[i];
  act[(long long)u * width + j] = g / (1.0 + exp(-g)) * v;
}

// part[(slotBase + u*chunks + ch)*d + r] = w_u * sum over the 128-channel
// chunk ch of down[r, j] * act[u, j]. Grid (ceil(d/B), units*chunks).
GLM_X glmx_swiglu_down(const float *down, const double *act, const int *ids,
                       const double *wts, long long expertStride, int width,
                       int d, double *part, int slotBase) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  const int chunks = (width + 127) / 128;
  const int u = blockIdx.y / chunks, ch = blockIdx.y % chunks;
  if (r >= d)
    return;
  const int begin = ch * 128;
  const int count = width - begin < 128 ? width - begin : 128;
  const float *row = down + (ids ? (long long)ids[u] : 0) * expertStride +
                     (long long)r * width + begin;
  const double *a = act + (long long)u * width + begin;
  double s = 0;
  for (int j = 0; j < count; ++j)
    s += (double)row[j] * a[j];
  part[((long long)slotBase + (long long)u * chunks + ch) * d + r] =
      (wts ? wts[u] : 1.0) * s;
}
)CUDA";
}

} // namespace glm::rt::cuda
