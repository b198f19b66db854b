//===- executor.cpp - the CUDA backend: one decode step on one GPU --------===//
#include "runtime/cuda/executor.h"

#include "codegen/codegen.h"
#include "plans/plan.h"
#include "runtime/base/error.h"
#include "runtime/base/progress.h"
#include "runtime/cpu/forward.h"
#include "runtime/cpu/model_weights.h"
#include "runtime/cpu/sampler.h"
#include "runtime/cuda/cuda_api.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

namespace glm::rt::cuda {
namespace {

constexpr unsigned kBlock = 256;

unsigned blocksFor(int64_t n, unsigned per = kBlock) {
  return (unsigned)std::max<int64_t>(1, (n + per - 1) / per);
}

/// Kernel parameters by value (pointers, ints, doubles).
class KArgs {
public:
  template <class T> KArgs &operator<<(T v) {
    static_assert(sizeof(T) <= 8, "scalar kernel parameters only");
    uint64_t s = 0;
    std::memcpy(&s, &v, sizeof v);
    slots_.push_back(s);
    return *this;
  }
  std::vector<void *> pointers() {
    std::vector<void *> p;
    for (auto &s : slots_)
      p.push_back(&s);
    return p;
  }

private:
  std::vector<uint64_t> slots_;
};

/// A weight matrix/vector on the device (fp32).
DeviceBuffer uploadF32(const std::vector<float> &v, Progress *bar) {
  DeviceBuffer b(std::max<size_t>(4, v.size() * sizeof(float)));
  if (!v.empty())
    b.upload(v.data(), v.size() * sizeof(float));
  if (bar)
    bar->advance(v.size() * sizeof(float));
  return b;
}

struct DevLayer {
  DeviceBuffer inputNorm, postNorm, qA, qANorm, qB, kvA, kvANorm, kvB, o;
  bool fullIndexer = false;
  DeviceBuffer wqB, wk, kNormW, kNormB, weightsProj;
  bool moe = false;
  DeviceBuffer router, routerBias;
  DeviceBuffer gate, up, down;          // routed experts, contiguous [E, ...]
  DeviceBuffer sGate, sUp, sDown;       // shared expert or dense MLP
  int64_t sWidth = 0;                   // its width
  DeviceBuffer latent;                  // [maxContext, kv_lora + dr]
  DeviceBuffer indexKeys;               // [maxContext, hd] (full layers)
};

} // namespace

struct CudaForward::Impl {
  CudaDevice dev;
  CUcontext ctx = nullptr;
  ModelConfig cfg;
  int64_t maxContext = 0, pos = 0;
  std::string arch;
  int planUsed = 0;
  std::vector<std::unique_ptr<Module>> modules;
  CUfunction gemvF32 = nullptr, gemvF64 = nullptr;
  unsigned gemvThreads = 256;
  std::map<std::string, CUfunction> fx; // helper kernels by name
  std::vector<DevLayer> layers;
  DeviceBuffer embed, finalNorm, lmHead;
  // Scratch.
  DeviceBuffer x, h, qa, q, kva, qi, k, wts, score, flags, sel, nsel, p, ov,
      contrib, rlogits, experts, expW, act, part, logits;

  explicit Impl(int device) : dev(device) {
    GLM_CU(cuCtxGetCurrent(&ctx));
    arch = dev.arch();
  }

  void call(const char *name, unsigned gx, unsigned gy, unsigned bx,
            unsigned smem, KArgs a) {
    auto it = fx.find(name);
    check(it != fx.end(), "cuda executor: no kernel ", name);
    auto p = a.pointers();
    launch(it->second, gx, gy, 1, bx, smem, nullptr, p.data());
  }
  void gemv(const DeviceBuffer &w, const DeviceBuffer &xin, CUdeviceptr y,
            int64_t rows, int64_t cols, bool f64 = false) {
    KArgs a;
    a << xin.ptr() << w.ptr() << y << (int)cols << (int)rows;
    auto p = a.pointers();
    launch(f64 ? gemvF64 : gemvF32, blocksFor(rows, gemvThreads / 32), 1, 1,
           gemvThreads, 0, nullptr, p.data());
  }

  /// The kernel of `spec`: from the plan when it carries a CUBIN for this
  /// arch under the same name and source, else compiled with NVRTC.
  CUfunction codegenKernel(const codegen::KernelSpec &spec,
                           const std::vector<plan::KernelDef> &planKernels) {
    const std::string name = codegen::kernelName(spec);
    const std::string source = codegen::generateSource(spec);
    std::vector<char> image;
    for (const plan::KernelDef &k : planKernels) {
      if (k.name != name || k.source != source)
        continue;
      for (const auto &b : k.binaries)
        if (b.arch == arch && !b.cubin.empty()) {
          image.assign(b.cubin.begin(), b.cubin.end());
          ++planUsed;
        }
    }
    if (image.empty()) {
      codegen::CompiledKernel c =
          codegen::compileWithNvrtc(source, name, arch);
      image.assign(c.cubin.begin(), c.cubin.end());
    }
    modules.push_back(std::make_unique<Module>(image));
    return modules.back()->function(name);
  }
};

CudaForward::CudaForward(const cpu::ModelWeights &w, int64_t maxContext,
                         const std::vector<plan::KernelDef> &planKernels,
                         int device)
    : impl_(std::make_unique<Impl>(device)) {
  Impl &m = *impl_;
  const ModelConfig &c = w.config;
  m.cfg = c;
  m.maxContext = maxContext;
  check(c.numExpertsPerTok <= 64 && c.numRoutedExperts <= 1024,
        "cuda executor: at most 1024 routed experts and 64 per token are "
        "supported (config has ", c.numRoutedExperts, " and ",
        c.numExpertsPerTok, ")");

  // Kernels.
  for (const char *out : {"f32", "f64"}) {
    codegen::KernelSpec s;
    s.family = "dense_gemv_f32";
    s.args["out"] = out;
    s.args["threads"] = std::to_string(m.gemvThreads);
    s.archs = {m.arch};
    (std::string(out) == "f32" ? m.gemvF32 : m.gemvF64) =
        m.codegenKernel(s, planKernels);
  }
  std::vector<char> helpers =
      compileCubin(executorKernelSource(), m.arch, {"--fmad=false"});
  m.modules.push_back(std::make_unique<Module>(helpers));
  for (const char *n :
       {"glmx_rms_norm", "glmx_layer_norm", "glmx_rope", "glmx_iota",
        "glmx_indexer_scores", "glmx_dsa_select", "glmx_mla_attn",
        "glmx_head_out", "glmx_reduce_add", "glmx_route", "glmx_swiglu_act",
        "glmx_swiglu_down"})
    m.fx[n] = m.modules.back()->function(n);

  // Weights.
  uint64_t total = 0;
  auto add = [&](const std::vector<float> &v) { total += v.size() * 4; };
  add(w.embed.data);
  add(w.finalNorm);
  add(w.lmHead.data);
  for (const cpu::LayerWeights &L : w.layers) {
    for (auto *v : {&L.inputNorm, &L.postNorm, &L.qANorm, &L.kvANorm,
                    &L.routerBias})
      add(*v);
    for (auto *mm : {&L.qA, &L.qB, &L.kvA, &L.kvB, &L.o, &L.router})
      add(mm->data);
    for (const cpu::MlpWeights *e : {&L.dense, &L.shared})
      for (auto *mm : {&e->gate, &e->up, &e->down})
        add(mm->data);
    for (const cpu::MlpWeights &e : L.experts)
      for (auto *mm : {&e.gate, &e.up, &e.down})
        add(mm->data);
  }
  Progress bar("uploading weights to " + deviceName(), total, "bytes");
  m.embed = uploadF32(w.embed.data, &bar);
  m.finalNorm = uploadF32(w.finalNorm, &bar);
  m.lmHead = uploadF32(w.lmHead.data, &bar);
  const int64_t d = c.hiddenSize, dr = c.qkRopeHeadDim,
                lat = c.kvLoraRank + dr;
  int64_t maxAct = 1, maxSlots = 1;
  for (const cpu::LayerWeights &L : w.layers) {
    DevLayer D;
    D.inputNorm = uploadF32(L.inputNorm, &bar);
    D.postNorm = uploadF32(L.postNorm, &bar);
    D.qA = uploadF32(L.qA.data, &bar);
    D.qANorm = uploadF32(L.qANorm, &bar);
    D.qB = uploadF32(L.qB.data, &bar);
    D.kvA = uploadF32(L.kvA.data, &bar);
    D.kvANorm = uploadF32(L.kvANorm, &bar);
    D.kvB = uploadF32(L.kvB.data, &bar);
    D.o = uploadF32(L.o.data, &bar);
    D.fullIndexer = L.fullIndexer;
    if (L.fullIndexer) {
      D.wqB = uploadF32(L.indexer.wqB.data, nullptr);
      D.wk = uploadF32(L.indexer.wk.data, nullptr);
      D.kNormW = uploadF32(L.indexer.kNormW, nullptr);
      D.kNormB = uploadF32(L.indexer.kNormB, nullptr);
      D.weightsProj = uploadF32(L.indexer.weightsProj.data, nullptr);
      D.indexKeys = DeviceBuffer(maxContext * c.indexHeadDim * 4);
    }
    D.moe = L.moe;
    const cpu::MlpWeights &sm = L.moe ? L.shared : L.dense;
    D.sWidth = sm.gate.rows;
    if (D.sWidth > 0) {
      D.sGate = uploadF32(sm.gate.data, &bar);
      D.sUp = uploadF32(sm.up.data, &bar);
      D.sDown = uploadF32(sm.down.data, &bar);
    }
    int64_t slots = cpu::numChunks(D.sWidth);
    maxAct = std::max(maxAct, D.sWidth);
    if (L.moe) {
      D.router = uploadF32(L.router.data, &bar);
      D.routerBias = uploadF32(L.routerBias, &bar);
      std::vector<float> g, u, dn;
      for (const cpu::MlpWeights &e : L.experts) {
        g.insert(g.end(), e.gate.data.begin(), e.gate.data.end());
        u.insert(u.end(), e.up.data.begin(), e.up.data.end());
        dn.insert(dn.end(), e.down.data.begin(), e.down.data.end());
      }
      D.gate = uploadF32(g, &bar);
      D.up = uploadF32(u, &bar);
      D.down = uploadF32(dn, &bar);
      slots += c.numExpertsPerTok * cpu::numChunks(c.moeIntermediateSize);
      maxAct = std::max(maxAct, c.numExpertsPerTok * c.moeIntermediateSize);
    }
    maxSlots = std::max(maxSlots, slots);
    D.latent = DeviceBuffer(maxContext * lat * 4);
    m.layers.push_back(std::move(D));
  }
  bar.finish();

  const int64_t H = c.numHeads, dn = c.qkNopeHeadDim, dv = c.vHeadDim;
  const int64_t nh = std::max<int64_t>(1, c.indexNHeads),
                hd = std::max<int64_t>(1, c.indexHeadDim);
  auto f32 = [](int64_t n) { return DeviceBuffer(std::max<int64_t>(1, n) * 4); };
  auto f64 = [](int64_t n) { return DeviceBuffer(std::max<int64_t>(1, n) * 8); };
  m.x = f32(d);
  m.h = f32(d);
  m.qa = f32(c.qLoraRank);
  m.q = f32(H * (dn + dr));
  m.kva = f32(lat);
  m.qi = f32(nh * hd);
  m.k = f32(hd);
  m.wts = f64(nh);
  m.score = f64(maxContext);
  m.flags = f32(maxContext);
  m.sel = f32(maxContext);
  m.nsel = f32(1);
  m.p = f64(H * maxContext);
  m.ov = f32(H * dv);
  m.contrib = f64(H * d);
  m.rlogits = f64(c.numRoutedExperts);
  m.experts = f32(c.numExpertsPerTok);
  m.expW = f64(c.numExpertsPerTok);
  m.act = f64(maxAct);
  m.part = f64(maxSlots * d);
  m.logits = f32(c.vocabSize);
}

CudaForward::~CudaForward() = default;

void CudaForward::reset() { impl_->pos = 0; }
int64_t CudaForward::length() const { return impl_->pos; }
const ModelConfig &CudaForward::config() const { return impl_->cfg; }
int CudaForward::planKernelsUsed() const { return impl_->planUsed; }
std::string CudaForward::deviceName() const {
  return impl_->dev.name() + " (" + impl_->arch + ")";
}

std::vector<float> CudaForward::step(int64_t token) {
  Impl &m = *impl_;
  const ModelConfig &c = m.cfg;
  check(token >= 0 && token < c.vocabSize, "token id ", token,
        " is outside the vocabulary [0, ", c.vocabSize, ")");
  check(m.pos < m.maxContext, "the sequence is full: ", m.maxContext,
        " tokens of context (raise --max-context)");
  GLM_CU(cuCtxSetCurrent(m.ctx));
  const int d = (int)c.hiddenSize, H = (int)c.numHeads,
            dn = (int)c.qkNopeHeadDim, dr = (int)c.qkRopeHeadDim,
            dv = (int)c.vHeadDim, kvr = (int)c.kvLoraRank, lat = kvr + dr,
            qlr = (int)c.qLoraRank, pos = (int)m.pos, T = pos + 1;
  const double eps = c.rmsNormEps, theta = c.ropeTheta;
  const double scale = 1.0 / std::sqrt((double)(dn + dr));
  GLM_CU(cuMemcpyDtoD(m.x.ptr(), m.embed.ptr() + (CUdeviceptr)token * d * 4,
                      (size_t)d * 4));
  bool haveSel = false;
  for (int64_t l = 0; l < c.numLayers; ++l) {
    DevLayer &L = m.layers[l];
    m.call("glmx_rms_norm", 1, 1, kBlock, 0,
           KArgs() << m.x.ptr() << L.inputNorm.ptr() << m.h.ptr() << d << eps);
    m.gemv(L.qA, m.h, m.qa.ptr(), qlr, d);
    m.call("glmx_rms_norm", 1, 1, kBlock, 0,
           KArgs() << m.qa.ptr() << L.qANorm.ptr() << m.qa.ptr() << qlr
                   << eps);
    m.gemv(L.qB, m.qa, m.q.ptr(), (int64_t)H * (dn + dr), qlr);
    m.gemv(L.kvA, m.h, m.kva.ptr(), lat, d);
    CUdeviceptr cur = L.latent.ptr() + (CUdeviceptr)pos * lat * 4;
    m.call("glmx_rms_norm", 1, 1, kBlock, 0,
           KArgs() << m.kva.ptr() << L.kvANorm.ptr() << cur << kvr << eps);
    GLM_CU(cuMemcpyDtoD(cur + (CUdeviceptr)kvr * 4,
                        m.kva.ptr() + (CUdeviceptr)kvr * 4, (size_t)dr * 4));
    m.call("glmx_rope", 1, 1, (unsigned)std::max(32, dr / 2), 0,
           KArgs() << (cur + (CUdeviceptr)kvr * 4) << dr << lat << pos
                   << theta);

    // DSA selection.
    if (L.fullIndexer) {
      const int nh = (int)c.indexNHeads, hd = (int)c.indexHeadDim;
      m.gemv(L.wqB, m.qa, m.qi.ptr(), (int64_t)nh * hd, qlr);
      m.call("glmx_rope", (unsigned)nh, 1, (unsigned)std::max(32, dr / 2), 0,
             KArgs() << m.qi.ptr() << dr << hd << pos << theta);
      m.gemv(L.wk, m.h, m.k.ptr(), hd, d);
      m.call("glmx_layer_norm", 1, 1, kBlock, 0,
             KArgs() << m.k.ptr() << L.kNormW.ptr() << L.kNormB.ptr()
                     << m.k.ptr() << hd << 1e-6);
      m.call("glmx_rope", 1, 1, (unsigned)std::max(32, dr / 2), 0,
             KArgs() << m.k.ptr() << dr << hd << pos << theta);
      GLM_CU(cuMemcpyDtoD(L.indexKeys.ptr() + (CUdeviceptr)pos * hd * 4,
                          m.k.ptr(), (size_t)hd * 4));
      if (T <= c.indexTopk) {
        m.call("glmx_iota", blocksFor(T), 1, kBlock, 0,
               KArgs() << m.sel.ptr() << m.nsel.ptr() << T);
      } else {
        m.gemv(L.weightsProj, m.h, m.wts.ptr(), nh, d, /*f64=*/true);
        m.call("glmx_indexer_scores", blocksFor(T), 1, kBlock, 0,
               KArgs() << m.qi.ptr() << L.indexKeys.ptr() << m.wts.ptr()
                       << m.score.ptr() << T << nh << hd
                       << 1.0 / std::sqrt((double)nh)
                       << 1.0 / std::sqrt((double)hd));
        m.call("glmx_dsa_select", 1, 1, 1024, 0,
               KArgs() << m.score.ptr() << T << (int)c.indexTopk
                       << m.flags.ptr() << m.sel.ptr() << m.nsel.ptr());
      }
      haveSel = true;
    } else if (c.indexNHeads == 0) {
      m.call("glmx_iota", blocksFor(T), 1, kBlock, 0,
             KArgs() << m.sel.ptr() << m.nsel.ptr() << T);
      haveSel = true;
    }
    check(haveSel, "layer ", l,
          " is a shared indexer layer with no full layer before it");

    // Attention (absorbed MLA), o_proj per head, ordered reduction.
    m.call("glmx_rope", (unsigned)H, 1, (unsigned)std::max(32, dr / 2), 0,
           KArgs() << (m.q.ptr() + (CUdeviceptr)dn * 4) << dr << (dn + dr)
                   << pos << theta);
    m.call("glmx_mla_attn", (unsigned)H, 1, kBlock,
           (unsigned)(2 * kvr * sizeof(double)),
           KArgs() << m.q.ptr() << L.kvB.ptr() << L.latent.ptr()
                   << m.sel.ptr() << m.nsel.ptr() << m.p.ptr()
                   << (int)m.maxContext << m.ov.ptr() << dn << dr << dv << kvr
                   << scale);
    m.call("glmx_head_out", blocksFor(d), (unsigned)H, kBlock, 0,
           KArgs() << L.o.ptr() << m.ov.ptr() << m.contrib.ptr() << d << H
                   << dv);
    m.call("glmx_reduce_add", blocksFor(d), 1, kBlock, 0,
           KArgs() << m.contrib.ptr() << H << d << m.x.ptr());

    // MLP: SwiGLU units in global order (routed ascending, then shared).
    m.call("glmx_rms_norm", 1, 1, kBlock, 0,
           KArgs() << m.x.ptr() << L.postNorm.ptr() << m.h.ptr() << d << eps);
    int slots = 0;
    if (L.moe) {
      const int E = (int)c.numRoutedExperts, K = (int)c.numExpertsPerTok,
                I = (int)c.moeIntermediateSize;
      m.gemv(L.router, m.h, m.rlogits.ptr(), E, d, /*f64=*/true);
      m.call("glmx_route", 1, 1, 32, 0,
             KArgs() << m.rlogits.ptr() << L.routerBias.ptr() << E << K
                     << (int)c.normTopkProb << c.routedScalingFactor
                     << m.experts.ptr() << m.expW.ptr());
      const long long stride = (long long)I * d;
      m.call("glmx_swiglu_act", blocksFor(I), (unsigned)K, kBlock, 0,
             KArgs() << L.gate.ptr() << L.up.ptr() << m.h.ptr()
                     << m.experts.ptr() << stride << I << d << m.act.ptr());
      const int chunks = (int)cpu::numChunks(I);
      m.call("glmx_swiglu_down", blocksFor(d), (unsigned)(K * chunks),
             kBlock, 0,
             KArgs() << L.down.ptr() << m.act.ptr() << m.experts.ptr()
                     << m.expW.ptr() << stride << I << d << m.part.ptr()
                     << 0);
      slots = K * chunks;
    }
    if (L.sWidth > 0) {
      const int I = (int)L.sWidth, chunks = (int)cpu::numChunks(I);
      m.call("glmx_swiglu_act", blocksFor(I), 1, kBlock, 0,
             KArgs() << L.sGate.ptr() << L.sUp.ptr() << m.h.ptr()
                     << CUdeviceptr(0) << 0LL << I << d << m.act.ptr());
      m.call("glmx_swiglu_down", blocksFor(d), (unsigned)chunks, kBlock, 0,
             KArgs() << L.sDown.ptr() << m.act.ptr() << CUdeviceptr(0)
                     << CUdeviceptr(0) << 0LL << I << d << m.part.ptr()
                     << slots);
      slots += chunks;
    }
    if (slots > 0)
      m.call("glmx_reduce_add", blocksFor(d), 1, kBlock, 0,
             KArgs() << m.part.ptr() << slots << d << m.x.ptr());
  }
  m.call("glmx_rms_norm", 1, 1, kBlock, 0,
         KArgs() << m.x.ptr() << m.finalNorm.ptr() << m.h.ptr() << d << eps);
  m.gemv(m.lmHead, m.h, m.logits.ptr(), c.vocabSize, d);
  std::vector<float> logits(c.vocabSize);
  m.logits.download(logits.data(), logits.size() * 4); // synchronizes
  m.pos = T;
  return logits;
}

namespace {

class CudaGenerator : public Generator {
public:
  CudaGenerator(std::unique_ptr<CudaForward> fwd, int64_t maxContext)
      : fwd_(std::move(fwd)), maxContext_(maxContext) {}

  GenerationResult generate(const std::vector<int64_t> &prompt,
                            const SamplingParams &params,
                            const TokenCallback &onToken,
                            std::vector<float> *logitsOut) override {
    std::lock_guard<std::mutex> lock(mu_); // one device sequence at a time
    fwd_->reset();
    return runGeneration(fwd_->config(), maxContext_, prompt, params, onToken,
                         logitsOut,
                         [&](int64_t token) { return fwd_->step(token); });
  }
  const ModelConfig &config() const override { return fwd_->config(); }
  int64_t maxContext() const override { return maxContext_; }
  std::string backendName() const override { return "cuda"; }

private:
  std::unique_ptr<CudaForward> fwd_;
  int64_t maxContext_;
  std::mutex mu_;
};

} // namespace

std::unique_ptr<Generator>
makeCudaGenerator(std::shared_ptr<const cpu::ModelWeights> weights,
                  const cpu::TpLayout &tp, int64_t maxContext,
                  const std::vector<plan::KernelDef> &planKernels) {
  check(tp.ranks == 1, "--backend cuda runs one rank for now; this plan has ",
        tp.ranks, " ranks and launching one process per GPU is not "
        "implemented yet (use a 1-Spark plan, --sparks 1 or --backend cpu)");
  check(CudaDevice::count() > 0,
        "--backend cuda: no CUDA device is visible (use --backend cpu)");
  auto fwd = std::make_unique<CudaForward>(*weights, maxContext, planKernels);
  return std::make_unique<CudaGenerator>(std::move(fwd), maxContext);
}

} // namespace glm::rt::cuda
