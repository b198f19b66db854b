//===- plan_executor.cpp - the one executor: runs what the plan says ------===//
#include "runtime/exec/plan_executor.h"

#include "runtime/exec/launch_bounds.h"
#include "runtime/base/error.h"
#include "runtime/base/numeric.h"
#include "runtime/base/progress.h"
#include "runtime/dist/comm.h"
#include "runtime/formats/safetensors.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace glm::rt::exec {

namespace gp = glm::plan;

std::string TraceEvent::json() const {
  std::ostringstream o;
  auto q = [&](const std::string &s) {
    o << '"';
    for (char c : s) {
      if (c == '"' || c == '\\')
        o << '\\' << c;
      else if ((unsigned char)c < 0x20)
        o << ' ';
      else
        o << c;
    }
    o << '"';
  };
  o << "{\"rank\":" << rank << ",\"graph\":";
  q(graph);
  o << ",\"op\":";
  q(op);
  o << ",\"kernel\":";
  q(kernel);
  o << ",\"grid\":[" << dims.gridX << ',' << dims.gridY << ',' << dims.gridZ
    << "],\"block\":[" << dims.blockX << ',' << dims.blockY << ','
    << dims.blockZ << "],\"bytes\":" << bytes << '}';
  return o.str();
}

void checkCollectiveDtype(const gp::CollectiveDef &c) {
  const bool ok = c.dtype == gp::DType::F32 ||
                  (c.dtype == gp::DType::I64 &&
                   c.kind == gp::CollectiveKind::AllReduce);
  check(ok, gp::collectiveKindName(c.kind), " of ", gp::dtypeName(c.dtype),
        " elements: this runtime moves f32 collectives and i64 all-reduces; "
        "re-plan with this glmc");
}

namespace {

/// sum[i] += part[i] for n elements of the collective's dtype (f32 in rank
/// order; i64 exact).
void addInto(gp::DType t, void *sum, const void *part, size_t n) {
  if (t == gp::DType::I64) {
    long long *s = static_cast<long long *>(sum);
    const long long *p = static_cast<const long long *>(part);
    for (size_t i = 0; i < n; ++i)
      s[i] += p[i];
  } else {
    float *s = static_cast<float *>(sum);
    const float *p = static_cast<const float *>(part);
    for (size_t i = 0; i < n; ++i)
      s[i] += p[i];
  }
}

/// All-reduce and all-gather over ranks of this process, in rank order.
class InProcess final : public Collectives {
public:
  void run(const gp::CollectiveDef &c, const std::vector<Backend *> &bs,
           const std::vector<uint64_t> &at) override {
    checkCollectiveDtype(c);
    const size_t n = c.elements, N = bs.size();
    if (N <= 1)
      return;
    if (c.kind == gp::CollectiveKind::AllReduce) {
      const size_t bytes = n * (c.dtype == gp::DType::I64 ? 8 : 4);
      std::vector<unsigned char> sum(bytes), part(bytes);
      bs[0]->read(at[0], sum.data(), bytes);
      for (size_t r = 1; r < N; ++r) {
        bs[r]->read(at[r], part.data(), bytes);
        addInto(c.dtype, sum.data(), part.data(), n);
      }
      for (size_t r = 0; r < N; ++r)
        bs[r]->write(at[r], sum.data(), bytes);
    } else if (c.kind == gp::CollectiveKind::AllGather) {
      std::vector<float> part(n);
      for (size_t r = 0; r < N; ++r) {
        bs[r]->read(at[r] + r * n * 4, part.data(), n * 4);
        for (size_t o = 0; o < N; ++o)
          if (o != r)
            bs[o]->write(at[o] + r * n * 4, part.data(), n * 4);
      }
    } else {
      fail("collective kind ", gp::collectiveKindName(c.kind),
           " is not run by this runtime; re-plan with this glmc");
    }
  }
};

/// The same collectives with one rank per process, through a HostComm.
class OverHostComm final : public Collectives {
public:
  explicit OverHostComm(dist::HostComm *c) : comm_(c) {}
  void run(const gp::CollectiveDef &c, const std::vector<Backend *> &bs,
           const std::vector<uint64_t> &at) override {
    check(bs.size() == 1, "host-comm collectives: one local rank per "
          "process");
    checkCollectiveDtype(c);
    const size_t n = c.elements, N = size_t(comm_->size());
    const size_t me = size_t(comm_->rank());
    if (N <= 1)
      return;
    const size_t bytes = n * (c.dtype == gp::DType::I64 ? 8 : 4);
    std::vector<unsigned char> mine(bytes), all(bytes * N);
    const uint64_t from = c.kind == gp::CollectiveKind::AllGather
                              ? at[0] + me * bytes
                              : at[0];
    bs[0]->read(from, mine.data(), bytes);
    comm_->allGather(mine.data(), all.data(), bytes);
    if (c.kind == gp::CollectiveKind::AllReduce) {
      // Rank order, as InProcess sums: the same bits for any transport.
      std::vector<unsigned char> sum(all.begin(), all.begin() + bytes);
      for (size_t r = 1; r < N; ++r)
        addInto(c.dtype, sum.data(), all.data() + r * bytes, n);
      bs[0]->write(at[0], sum.data(), bytes);
    } else if (c.kind == gp::CollectiveKind::AllGather) {
      bs[0]->write(at[0], all.data(), bytes * N);
    } else {
      fail("collective kind ", gp::collectiveKindName(c.kind),
           " is not run by this runtime; re-plan with this glmc");
    }
  }

private:
  dist::HostComm *comm_;
};

} // namespace

/// The dtype the safetensors header of `path` gives the tensor holding the
/// bytes of `w` (F32, F16 or BF16).
DType PlanExecutor::storedDtype(const std::string &path,
                                const gp::WeightBinding &w) {
  auto it = headers_.find(path);
  if (it == headers_.end())
    it = headers_
             .emplace(path, SafetensorsFile::open(path,
                                                  /*allowTruncatedData=*/true))
             .first;
  for (const TensorView &t : it->second->tensors())
    if (w.offset >= t.fileOffset && w.offset + w.length <= t.fileOffset + t.byteSize) {
      check(t.dtype == DType::F32 || t.dtype == DType::F16 ||
                t.dtype == DType::BF16,
            path, ": tensor ", t.name, " (bound as ", w.tensor, ") is ",
            dtypeName(t.dtype), "; side vectors must be F32, F16 or BF16");
      return t.dtype;
    }
  fail(path, ": no tensor holds bytes [", w.offset, ", +", w.length,
       ") bound as ", w.tensor, "; the pack index does not match its files "
       "(glmc verify PACK)");
}

std::unique_ptr<Collectives> inProcessCollectives() {
  return std::make_unique<InProcess>();
}

std::unique_ptr<Collectives> hostCommCollectives(dist::HostComm *comm) {
  return std::make_unique<OverHostComm>(comm);
}

struct PlanExecutor::RankState {
  const gp::RankPlan *rp = nullptr;
  std::unique_ptr<Backend> backend;
  uint64_t base = 0; // arena address
  std::map<std::string, uint32_t> io; // Io buffer name -> index
  uint64_t address(uint32_t buffer, uint64_t offset) const {
    return base + rp->buffers[buffer].arenaOffset + offset;
  }
  const gp::GraphDef *graph(gp::GraphKind kind, uint32_t size) const {
    for (const gp::GraphDef &g : rp->graphs)
      if (g.kind == kind && (kind == gp::GraphKind::Load || g.size == size))
        return &g;
    return nullptr;
  }
  uint32_t ioBuffer(const char *name) const {
    auto it = io.find(name);
    check(it != io.end(), "plan rank ", rp->rank, " has no Io buffer '",
          name, "'; it was written by a glmc whose plans this runtime "
          "cannot execute: re-plan with this glmc");
    return it->second;
  }
};

PlanExecutor::PlanExecutor(std::shared_ptr<const gp::Plan> plan,
                           std::string packDir, std::vector<uint32_t> ranks,
                           std::vector<std::unique_ptr<Backend>> backends,
                           std::unique_ptr<Collectives> collectives)
    : plan_(std::move(plan)), packDir_(std::move(packDir)),
      collectives_(std::move(collectives)) {
  check(!ranks.empty() && ranks.size() == backends.size(),
        "plan executor: ", ranks.size(), " ranks but ", backends.size(),
        " backends");
  for (size_t i = 0; i < ranks.size(); ++i) {
    check(ranks[i] < plan_->ranks.size(), "plan has ", plan_->ranks.size(),
          " ranks; rank ", ranks[i], " asked for");
    auto st = std::make_unique<RankState>();
    st->rp = &plan_->ranks[ranks[i]];
    st->backend = std::move(backends[i]);
    for (uint32_t b = 0; b < st->rp->buffers.size(); ++b)
      if (st->rp->buffers[b].kind == gp::BufferKind::Io)
        st->io[st->rp->buffers[b].name] = b;
    ranks_.push_back(std::move(st));
  }
}

PlanExecutor::~PlanExecutor() = default;

Backend &PlanExecutor::backend(size_t local) {
  return *ranks_.at(local)->backend;
}

void PlanExecutor::uploadBindings() {
  // Weight bindings: byte ranges of the pack files, file by file.
  uint64_t total = 0;
  for (auto &st : ranks_)
    for (const gp::WeightBinding &w : st->rp->weights)
      total += w.length;
  Progress progress("loading weights", total, "B");
  std::vector<char> buf;
  std::vector<float> wide;
  for (auto &st : ranks_) {
    std::map<std::string, std::vector<const gp::WeightBinding *>> byFile;
    for (const gp::WeightBinding &w : st->rp->weights)
      byFile[w.file].push_back(&w);
    for (auto &[file, ws] : byFile) {
      const std::string path = packDir_ + "/" + file;
      // A device or FIFO in place of a pack file would block or never end.
      std::error_code ec;
      check(std::filesystem::is_regular_file(path, ec), path,
            ": the pack file this plan binds (", ws.size(), " ranges) is "
            "missing or not a regular file; is --pack the pack the plan was "
            "compiled for?");
      std::ifstream in(path, std::ios::binary);
      check(bool(in), path, ": cannot open the pack file this plan binds (",
            ws.size(), " ranges); is --pack the pack the plan was compiled "
            "for?");
      std::sort(ws.begin(), ws.end(), [](auto *a, auto *b) {
        return a->offset < b->offset;
      });
      for (const gp::WeightBinding *w : ws) {
        buf.resize(w->length);
        in.seekg((std::streamoff)w->offset);
        in.read(buf.data(), (std::streamsize)w->length);
        check(in.gcount() == (std::streamsize)w->length, path, ": ",
              w->tensor.empty() ? std::string("a bound range")
                                : "tensor " + w->tensor,
              " [", w->offset, ", +", w->length,
              ") lies past the end of the file: the pack is truncated "
              "(run glmc verify on it)");
        const uint64_t dst = st->address(w->buffer, w->bufferOffset);
        if (w->transform == gp::WeightTransform::RawCopy) {
          st->backend->write(dst, buf.data(), w->length);
        } else {
          // Stored floats widened to fp32 on the host (exact).
          DType dt = DType::F32;
          if (w->transform == gp::WeightTransform::Bf16ToF32)
            dt = DType::BF16;
          else if (w->transform == gp::WeightTransform::F16ToF32)
            dt = DType::F16;
          else if (w->transform == gp::WeightTransform::ToF32)
            dt = storedDtype(path, *w);
          else
            fail(path, ": binding of ", w->tensor, " asks for transform ",
                 int(w->transform), ", which this runtime does not have; "
                 "re-plan with this glmc");
          const size_t es = dt == DType::F32 ? 4 : 2;
          wide.resize(w->length / es);
          for (size_t i = 0; i < wide.size(); ++i) {
            if (es == 4) {
              std::memcpy(&wide[i], buf.data() + 4 * i, 4);
              continue;
            }
            uint16_t h;
            std::memcpy(&h, buf.data() + 2 * i, 2);
            wide[i] = dt == DType::BF16 ? bf16ToFloat(h) : halfToFloat(h);
          }
          const gp::BufferDef &bd = st->rp->buffers[w->buffer];
          check(w->bufferOffset + wide.size() * 4 <= bd.bytes, path,
                ": binding of ", w->tensor, " widens to ", wide.size() * 4,
                " bytes, past the end of buffer '", bd.name,
                "': the pack's dtype differs from the plan's; re-plan");
          st->backend->write(dst, wide.data(), wide.size() * 4);
        }
        progress.advance(w->length);
      }
    }
  }
  progress.finish();
}

void PlanExecutor::useRandomWeights(uint64_t seed) {
  check(!loaded_, "plan executor: useRandomWeights() after load()");
  randomWeights_ = true;
  seed_ = seed;
}

void PlanExecutor::fillBindingsRandom() {
  uint64_t total = 0;
  for (auto &st : ranks_)
    for (const gp::WeightBinding &w : st->rp->weights)
      total += w.length;
  Progress progress("random weights", total, "B");
  for (auto &st : ranks_) {
    uint64_t index = 0;
    for (const gp::WeightBinding &w : st->rp->weights) {
      // Widened bindings fill their fp32 destination (the same bytes the
      // upload would write).
      uint64_t bytes = w.length;
      if (w.transform == gp::WeightTransform::Bf16ToF32 ||
          w.transform == gp::WeightTransform::F16ToF32)
        bytes = w.length * 2;
      else if (w.transform == gp::WeightTransform::ToF32)
        bytes = storedDtype(packDir_ + "/" + w.file, w) == DType::F32
                    ? w.length
                    : w.length * 2;
      const gp::BufferDef &bd = st->rp->buffers[w.buffer];
      check(w.bufferOffset + bytes <= bd.bytes, "binding of ", w.tensor,
            " (", bytes, " bytes) runs past the end of buffer '", bd.name,
            "': re-plan");
      // Whole aligned words inside the range; the rest stays zero (a valid
      // value of every dtype).
      const uint64_t from = st->address(w.buffer, w.bufferOffset);
      const uint64_t first = (from + 3) / 4 * 4;
      const uint64_t end = from + bytes;
      if (end >= first + 4)
        st->backend->fillRandomWords(
            first, (end - first) / 4,
            seed_ * 0x9E3779B97F4A7C15ull + (uint64_t(st->rp->rank) << 40) +
                index,
            kRandomWeightMask);
      ++index;
      progress.advance(w.length);
    }
  }
  for (auto &st : ranks_)
    st->backend->synchronize();
  progress.finish();
}

void PlanExecutor::bindThread() {
  for (auto &st : ranks_)
    st->backend->bindThread();
}

void PlanExecutor::load() {
  check(!loaded_, "plan executor: load() called twice");
  checkLaunchBounds(*plan_); // damaged launches: refused before any byte moves
  io_ = ioBounds(*plan_);
  if (io_.pageTokens) {
    // Identity tables (today's layout) while the pages last; past them the
    // slots wrap onto pages the runtime must assign before it uses them.
    const int64_t per = io_.positions / io_.pageTokens;
    pageTables_.resize(size_t(io_.slots * per));
    for (size_t i = 0; i < pageTables_.size(); ++i)
      pageTables_[i] = int32_t(int64_t(i) % io_.pages);
    pagesDirty_ = true;
  }
  // Every kernel a graph of these ranks launches must be launchable.
  for (auto &st : ranks_) {
    std::vector<bool> used(plan_->kernels.size());
    for (const gp::GraphDef &g : st->rp->graphs)
      for (const gp::OpDef &o : g.ops)
        if (o.kernel >= 0)
          used[o.kernel] = true;
    st->base = st->backend->allocateArena(st->rp->arenaBytes);
    for (uint32_t k = 0; k < used.size(); ++k)
      if (used[k])
        st->backend->prepareKernel(k, plan_->kernels[k]);
    // Initial contents with their relocations patched in.
    for (const gp::BufferDef &b : st->rp->buffers) {
      if (b.init.empty())
        continue;
      std::vector<uint8_t> bytes = b.init;
      for (const gp::Relocation &r : b.relocations) {
        const uint64_t a = st->address(r.buffer, r.offset);
        for (int i = 0; i < 8; ++i)
          bytes[r.at + i] = uint8_t(a >> (8 * i));
      }
      st->backend->write(st->base + b.arenaOffset, bytes.data(),
                         bytes.size());
    }
  }
  if (randomWeights_)
    fillBindingsRandom();
  else
    uploadBindings();
  std::vector<const gp::GraphDef *> load;
  bool any = false;
  for (auto &st : ranks_) {
    load.push_back(st->graph(gp::GraphKind::Load, 0));
    any |= load.back() != nullptr;
  }
  if (any) {
    static const gp::GraphDef empty{gp::GraphKind::Load, 0, {}};
    for (auto &g : load)
      if (!g)
        g = &empty;
    runGraph(load.data(), 0);
  }
  loaded_ = true;
}

void PlanExecutor::runGraph(const gp::GraphDef *const *graphs, uint32_t rows) {
  bindThread();
  const size_t R = ranks_.size();
  std::vector<size_t> next(R, 0);
  std::vector<ResolvedArg> args;
  // Each rank runs its ops up to its next collective; then the collective
  // runs over all ranks (the plan lists the same collectives in the same
  // order on every rank).
  for (;;) {
    int32_t pending = -1;
    for (size_t r = 0; r < R; ++r) {
      RankState &st = *ranks_[r];
      const gp::GraphDef &g = *graphs[r];
      const std::string gname = gp::graphName(g);
      for (; next[r] < g.ops.size(); ++next[r]) {
        const gp::OpDef &op = g.ops[next[r]];
        if (op.collective >= 0)
          break;
        check(op.kernel >= 0, "op '", op.name, "' of rank ", st.rp->rank,
              " (graph ", gname, ") has no kernel: glmc found no kernel "
              "for it when compiling (see its warnings), so this plan cannot "
              "be executed; --backend reference runs the pack without a plan");
        const gp::KernelDef &k = plan_->kernels[op.kernel];
        gp::LaunchDims dims = op.launch.gridX ? op.launch : k.launch;
        const uint32_t perLaunch = op.rowsPerLaunch ? op.rowsPerLaunch : rows;
        for (uint32_t j = 0; j < op.repeat; ++j) {
          args.clear();
          for (const gp::ArgDef &a : op.args) {
            ResolvedArg v;
            v.kind = a.kind;
            switch (a.kind) {
            case gp::ArgKind::Buffer:
              v.address = a.buffer < 0
                              ? 0
                              : st.address(a.buffer, a.offset) +
                                    uint64_t(j) * perLaunch * a.rowBytes;
              break;
            case gp::ArgKind::I32:
            case gp::ArgKind::I64:
              v.i = a.i;
              break;
            case gp::ArgKind::F32:
              v.f = a.f;
              break;
            case gp::ArgKind::F64:
              v.d = a.d;
              break;
            case gp::ArgKind::Runtime:
              if (a.name == "batch") {
                v.kind = gp::ArgKind::I32;
                v.i = perLaunch;
              } else if (a.name == "null") {
                v.kind = gp::ArgKind::Buffer;
              } else {
                fail("op '", op.name, "' of rank ", st.rp->rank,
                     " asks for the runtime value '", a.name,
                     "', which this runtime does not supply: the plan is "
                     "from a glmc whose graphs are not executable; re-plan "
                     "with this glmc");
              }
              break;
            }
            args.push_back(v);
          }
          st.backend->launch(uint32_t(op.kernel), dims, args,
                             op.programmaticLaunch);
          ++launches_;
          if (profiled_ && r == 0)
            profiled_->emplace_back(op.name, k.name);
          if (trace_)
            trace_({st.rp->rank, gname, op.name, k.name, dims, op.bytesRead});
        }
      }
      if (next[r] < g.ops.size()) {
        const int32_t c = g.ops[next[r]].collective;
        check(pending < 0 || pending == c, "plan ranks disagree on the next "
              "collective (", pending, " vs ", c, "): re-plan");
        pending = c;
      } else {
        check(pending < 0, "rank ", st.rp->rank, " of graph ", gname,
              " ended while other ranks wait in collective ", pending,
              ": re-plan");
      }
    }
    if (pending < 0)
      return;
    std::vector<Backend *> bs;
    std::vector<uint64_t> at;
    // CollectiveDef::elements counts one token row; this step moves `rows`.
    gp::CollectiveDef c = ranks_[0]->rp->collectives[pending];
    c.elements *= std::max<uint32_t>(rows, 1);
    for (size_t r = 0; r < R; ++r) {
      RankState &st = *ranks_[r];
      const gp::OpDef &op = graphs[r]->ops[next[r]];
      const gp::CollectiveDef &cr = st.rp->collectives[op.collective];
      check(cr.kind == c.kind && cr.elements * std::max<uint32_t>(rows, 1) ==
                    c.elements && cr.buffer >= 0,
            "rank ", st.rp->rank, " collective '", op.name,
            "' differs from rank ", ranks_[0]->rp->rank, "'s: re-plan");
      if (!collectives_->onDeviceStreams())
        st.backend->synchronize();
      bs.push_back(st.backend.get());
      at.push_back(st.address(uint32_t(cr.buffer), 0));
      if (trace_)
        trace_({st.rp->rank, gp::graphName(*graphs[r]), op.name,
                gp::collectiveKindName(cr.kind), {}, op.bytesRead});
      ++launches_;
      ++next[r];
    }
    collectives_->run(c, bs, at);
  }
}

std::vector<uint8_t> PlanExecutor::readBuffer(size_t local, uint32_t buffer) {
  bindThread();
  RankState &st = *ranks_.at(local);
  check(buffer < st.rp->buffers.size(), "rank ", st.rp->rank, " has no buffer ",
        buffer);
  st.backend->synchronize();
  std::vector<uint8_t> out(st.rp->buffers[buffer].bytes);
  st.backend->read(st.address(buffer, 0), out.data(), out.size());
  return out;
}

std::vector<const gp::GraphDef *>
PlanExecutor::graphsOf(gp::GraphKind kind, uint32_t rows) const {
  std::vector<const gp::GraphDef *> graphs;
  for (auto &st : ranks_) {
    const gp::GraphDef *g = st->graph(kind, rows);
    if (kind == gp::GraphKind::Draft)
      check(g != nullptr, "the plan has no MTP draft graph of ", rows,
            " row(s) (rank ", st->rp->rank, "); re-plan with glmc compile "
            "--draft mtp (and --decode-batches including ", rows, ")");
    check(g != nullptr, "the plan has no decode graph of batch ", rows,
          " (rank ", st->rp->rank, "); re-plan with --decode-batches "
          "including ", rows);
    graphs.push_back(g);
  }
  return graphs;
}

bool PlanExecutor::canCapture() const {
  return graphs_ && !trace_ && collectives_->onDeviceStreams();
}

void PlanExecutor::runDecode(uint32_t rows, bool graph) {
  check(loaded_, "plan executor: a step before load()");
  runCaptured(decodeGraphs(rows), rows, rows, graph);
}

void PlanExecutor::runCaptured(const std::vector<const gp::GraphDef *> &graphs,
                               uint32_t rows, uint32_t key, bool graph) {
  bindThread();
  if (!graph || !canCapture()) {
    runGraph(graphs.data(), rows);
    return;
  }
  if (std::find(captured_.begin(), captured_.end(), key) ==
      captured_.end()) {
    size_t began = 0;
    for (auto &st : ranks_)
      began += st->backend->beginCapture();
    if (began == 0) { // backends without graphs: launch op by op
      graphs_ = false;
      runGraph(graphs.data(), rows);
      return;
    }
    check(began == ranks_.size(), "plan executor: some backends of this "
          "process capture CUDA graphs and some do not");
    runGraph(graphs.data(), rows);
    for (auto &st : ranks_)
      st->backend->endCapture(key);
    captured_.push_back(key);
  }
  for (auto &st : ranks_)
    st->backend->replay(key);
}

std::vector<PlanExecutor::LaunchTime>
PlanExecutor::profileDecode(uint32_t rows) {
  bindThread();
  check(loaded_, "plan executor: profileDecode() before load()");
  return profileGraphs(decodeGraphs(rows), rows);
}

std::vector<PlanExecutor::LaunchTime>
PlanExecutor::profilePrefill(uint32_t chunk) {
  bindThread();
  check(loaded_, "plan executor: profilePrefill() before load()");
  std::vector<const gp::GraphDef *> graphs;
  for (auto &st : ranks_) {
    graphs.push_back(st->graph(gp::GraphKind::Prefill, chunk));
    check(graphs.back() != nullptr, "rank ", st->rp->rank,
          " has no prefill graph of ", chunk, " tokens");
  }
  return profileGraphs(graphs, chunk);
}

std::vector<PlanExecutor::LaunchTime>
PlanExecutor::profileGraphs(const std::vector<const gp::GraphDef *> &graphs,
                            uint32_t rows) {
  std::vector<std::pair<std::string, std::string>> names;
  for (auto &st : ranks_)
    st->backend->synchronize();
  Backend &b0 = *ranks_[0]->backend;
  b0.takeLaunchTimes(); // drop anything recorded before
  b0.setLaunchTiming(true);
  profiled_ = &names;
  try {
    runGraph(graphs.data(), rows);
  } catch (...) {
    profiled_ = nullptr;
    b0.setLaunchTiming(false);
    throw;
  }
  profiled_ = nullptr;
  const std::vector<double> ms = b0.takeLaunchTimes();
  b0.setLaunchTiming(false);
  check(ms.size() == names.size(), "plan executor: the backend timed ",
        ms.size(), " launches of ", names.size());
  std::vector<LaunchTime> out;
  for (size_t i = 0; i < ms.size(); ++i)
    out.push_back({names[i].first, names[i].second, ms[i]});
  return out;
}

uint64_t PlanExecutor::decodeWeightBytes(uint32_t rows) const {
  uint64_t bytes = 0;
  for (const gp::OpDef &op : decodeGraphs(rows)[0]->ops)
    bytes += op.bytesRead;
  return bytes;
}

void PlanExecutor::writeIoRows(const std::vector<int32_t> &tokens,
                               const std::vector<int32_t> &positions,
                               const std::vector<int32_t> &slots) {
  bindThread();
  const uint32_t rows = uint32_t(tokens.size());
  check(positions.size() == rows && slots.size() == rows,
        "plan executor: a step needs one position and slot per token");
  // Kernels index caches and tables by these (IoBounds): a value past its
  // bound would address another buffer's bytes.
  for (uint32_t r = 0; r < rows; ++r) {
    check(slots[r] >= 0 && slots[r] < io_.slots, "plan executor: KV slot ",
          slots[r], " is outside the plan's ", io_.slots, " slot(s) (glmc "
          "compile --kv-slots N holds N sequences at once); re-plan with more");
    check(positions[r] >= 0 && positions[r] < io_.positions,
          "plan executor: position ", positions[r], " is outside the plan's ",
          io_.positions, "-token context");
    check(tokens[r] >= 0 && tokens[r] < io_.tokens, "plan executor: token id ",
          tokens[r], " is outside the plan's vocabulary of ", io_.tokens);
  }
  if (pagesDirty_) {
    for (auto &st : ranks_) {
      const uint32_t b = st->ioBuffer("io.pages");
      check(st->rp->buffers[b].bytes >= pageTables_.size() * 4, "Io buffer "
            "io.pages holds fewer than the slots' ", pageTables_.size(),
            " page numbers: re-plan");
      st->backend->write(st->address(b, 0), pageTables_.data(),
                         pageTables_.size() * 4);
    }
    pagesDirty_ = false;
  }
  for (auto &st : ranks_)
    for (auto [name, v] : {std::pair{"io.tokens", &tokens},
                           std::pair{"io.positions", &positions},
                           std::pair{"io.slots", &slots}}) {
      uint32_t b = st->ioBuffer(name);
      check(st->rp->buffers[b].bytes >= rows * 4ull, "Io buffer ", name,
            " holds fewer than ", rows, " rows: re-plan");
      st->backend->write(st->address(b, 0), v->data(), rows * 4ull);
    }
}

void PlanExecutor::setPageTable(int32_t slot,
                                const std::vector<int32_t> &pages) {
  check(io_.pageTokens > 0, "plan executor: a page table for a plan "
        "without paged KV (glmc compile --kv-page-tokens)");
  const int64_t per = io_.positions / io_.pageTokens;
  check(slot >= 0 && slot < io_.slots, "plan executor: KV slot ", slot,
        " is outside the plan's ", io_.slots, " slot(s)");
  check(int64_t(pages.size()) == per, "plan executor: slot ", slot, "'s page "
        "table has ", pages.size(), " entries; the plan's context is ", per,
        " pages of ", io_.pageTokens, " tokens");
  // Kernels address cache rows through these: a page past the pool would
  // be another buffer's bytes.
  for (int32_t p : pages)
    check(p >= 0 && p < io_.pages, "plan executor: page ", p,
          " in slot ", slot, "'s page table is outside the plan's ",
          io_.pages, " KV pages");
  std::copy(pages.begin(), pages.end(), pageTables_.begin() + slot * per);
  pagesDirty_ = true;
}

void PlanExecutor::writeLogitRows(int32_t first, int32_t last) {
  bindThread();
  const int32_t window[2] = {first, last};
  for (auto &st : ranks_) {
    auto it = st->io.find("io.logit_rows");
    if (it != st->io.end())
      st->backend->write(st->address(it->second, 0), window, sizeof window);
  }
}

std::vector<float> PlanExecutor::readLogits(uint32_t rows,
                                           const char *buffer,
                                           uint32_t first) {
  bindThread();
  RankState &st = *ranks_[0];
  st.backend->synchronize();
  const uint64_t V = uint64_t(plan_->model.vocabSize);
  const uint32_t lb = st.ioBuffer(buffer);
  check(st.rp->buffers[lb].bytes >= (first + rows) * V * 4, "Io buffer ",
        buffer, " holds fewer than ", first + rows, " rows of ", V,
        " logits: re-plan");
  std::vector<float> logits(rows * V);
  st.backend->read(st.address(lb, first * V * 4), logits.data(),
                   logits.size() * 4);
  return logits;
}

std::vector<uint32_t> PlanExecutor::prefillChunks() const {
  std::vector<uint32_t> c;
  for (const gp::GraphDef &g : ranks_[0]->rp->graphs)
    if (g.kind == gp::GraphKind::Prefill)
      c.push_back(g.size);
  std::sort(c.begin(), c.end());
  return c;
}

void PlanExecutor::runPrefill(uint32_t chunk) {
  check(loaded_, "plan executor: runPrefill() before load()");
  std::vector<const gp::GraphDef *> graphs;
  for (auto &st : ranks_) {
    graphs.push_back(st->graph(gp::GraphKind::Prefill, chunk));
    check(graphs.back() != nullptr, "rank ", st->rp->rank,
          " has no prefill graph of ", chunk, " tokens");
  }
  writeLogitRows(0, int32_t(chunk) - 1);
  runGraph(graphs.data(), chunk);
}

std::vector<float> PlanExecutor::prefill(const std::vector<int32_t> &tokens,
                                         int32_t start, int32_t slot,
                                         bool lastRowOnly) {
  check(loaded_, "plan executor: prefill() before load()");
  const uint32_t n = uint32_t(tokens.size());
  check(n > 0, "plan executor: an empty prefill chunk");
  uint32_t C = 0;
  for (uint32_t c : prefillChunks())
    if (c >= n) {
      C = c;
      break;
    }
  check(C > 0, "plan executor: no prefill graph holds ", n, " tokens");
  check(int64_t(start) + C <= plan_->model.maxContext, "plan executor: a ",
        C, "-token prefill chunk at position ", start, " passes the ",
        plan_->model.maxContext, "-token KV cache");
  check(n == C || !recurrentState(), "plan executor: a ", n,
        "-token prompt chunk would run in the ", C, "-token prefill graph "
        "with ", C - n, " padding rows, and this plan's KDA state "
        "(GLM-5.3-Flash) would take them as tokens: give whole chunks (",
        [&] {
          std::string s;
          for (uint32_t c : prefillChunks())
            s += (s.empty() ? "" : ", ") + std::to_string(c);
          return s;
        }(),
        " tokens) and the rest token by token");
  std::vector<const gp::GraphDef *> graphs;
  for (auto &st : ranks_) {
    graphs.push_back(st->graph(gp::GraphKind::Prefill, C));
    check(graphs.back() != nullptr, "rank ", st->rp->rank,
          " has no prefill graph of ", C, " tokens");
  }
  // Padding rows: the first token again, at the following positions.
  std::vector<int32_t> tok(C, tokens[0]), pos(C), slots(C, slot);
  std::copy(tokens.begin(), tokens.end(), tok.begin());
  for (uint32_t j = 0; j < C; ++j)
    pos[j] = start + int32_t(j);
  writeIoRows(tok, pos, slots);
  // Only the rows whose logits come back: the LM head is a chunk's largest
  // GEMM (29 ms of a 2048-token chunk of GLM-5.3 on the H200).
  writeLogitRows(lastRowOnly ? int32_t(n) - 1 : 0, int32_t(n) - 1);
  runGraph(graphs.data(), C);
  return lastRowOnly ? readLogits(1, "io.logits", n - 1) : readLogits(n);
}

bool PlanExecutor::recurrentState() const {
  for (const gp::RankPlan &rp : plan_->ranks)
    for (const gp::BufferDef &b : rp.buffers)
      if (b.kind == gp::BufferKind::KvCache &&
          b.name.rfind("kda_state.", 0) == 0)
        return true;
  return false;
}

std::vector<float> PlanExecutor::step(const std::vector<int32_t> &tokens,
                                      const std::vector<int32_t> &positions,
                                      const std::vector<int32_t> &slots) {
  check(loaded_, "plan executor: step() before load()");
  const uint32_t B = uint32_t(tokens.size());
  check(B > 0 && positions.size() == B && slots.size() == B,
        "plan executor: a step needs one position and slot per token");
  decodeGraphs(B); // names the missing bucket before any write
  writeIoRows(tokens, positions, slots);
  runDecode(B, true);
  return readLogits(B);
}

bool PlanExecutor::hasDraft() const {
  for (const gp::GraphDef &g : ranks_[0]->rp->graphs)
    if (g.kind == gp::GraphKind::Draft)
      return true;
  return false;
}

std::vector<float> PlanExecutor::draft(const std::vector<int32_t> &tokens,
                                       const std::vector<int32_t> &positions,
                                       const std::vector<int32_t> &slots,
                                       const std::vector<int32_t> &hiddenRows) {
  check(loaded_, "plan executor: draft() before load()");
  const uint32_t B = uint32_t(tokens.size());
  check(B > 0 && positions.size() == B && slots.size() == B &&
            hiddenRows.size() == B,
        "plan executor: a draft needs one position, slot and hidden row per "
        "token");
  graphsOf(gp::GraphKind::Draft, B); // names a missing graph before writes
  for (int32_t h : hiddenRows)
    check(h >= 0 && h < io_.draftRows, "plan executor: hidden row ", h,
          " is outside the plan's largest step of ", io_.draftRows, " rows");
  writeIoRows(tokens, positions, slots);
  for (auto &st : ranks_)
    st->backend->write(st->address(st->ioBuffer("io.draft_rows"), 0),
                       hiddenRows.data(), B * 4ull);
  runDraft(B);
  return readLogits(B, "io.draft_logits");
}

void PlanExecutor::runDraft(uint32_t rows) {
  check(loaded_, "plan executor: a draft before load()");
  // Draft graphs are recorded apart from the decode buckets of their size.
  runCaptured(graphsOf(gp::GraphKind::Draft, rows), rows, (1u << 16) | rows,
              true);
}

} // namespace glm::rt::exec
