//===- launch_bounds.cpp - every launch of a plan stays inside its buffers ===//
//
// Resolves each op's arguments the way PlanExecutor::runGraph does (buffer
// + offset + j * rowsPerLaunch * rowBytes, immediates, Runtime "batch" =
// rows per launch, Runtime "null"), asks the family's footprint what the
// launch may touch (handing it the plan's table contents to check), and
// holds every pointer to its buffer; then holds the tables and the
// runtime's Io index rows read-only.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/launch_bounds.h"

#include "runtime/base/error.h"
#include "runtime/twins/footprint.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace glm::rt::exec {

namespace gp = glm::plan;

namespace {

/// Any non-null address: footprints only ask whether a pointer is null.
void *const kSomeBuffer = reinterpret_cast<void *>(uintptr_t(256));

const char *kindName(gp::ArgKind k) {
  switch (k) {
  case gp::ArgKind::Buffer:
    return "a buffer";
  case gp::ArgKind::I32:
    return "an i32";
  case gp::ArgKind::I64:
    return "an i64";
  case gp::ArgKind::F32:
    return "an f32";
  case gp::ArgKind::F64:
    return "an f64";
  case gp::ArgKind::Runtime:
    return "a runtime value";
  }
  return "an unknown kind";
}

const char *paramName(char c) {
  switch (c) {
  case 'p':
    return "a pointer";
  case 'i':
    return "an int";
  case 'l':
    return "a 64-bit int";
  case 'f':
    return "a float";
  default:
    return "a double";
  }
}

/// The runtime's Io index rows: a buffer name, the indices it holds and
/// their bound.
struct IoRows {
  const char *name;
  twins::IoIndex what;
  int64_t IoBounds::*bound;
};
constexpr IoRows kIoRows[] = {
    {"io.slots", twins::IoIndex::Slot, &IoBounds::slots},
    {"io.positions", twins::IoIndex::Position, &IoBounds::positions},
    {"io.tokens", twins::IoIndex::Row, &IoBounds::tokens},
    {"io.draft_rows", twins::IoIndex::Row, &IoBounds::draftRows},
    {"io.pages", twins::IoIndex::Page, &IoBounds::pages},
};

const IoRows *ioRowsOf(const gp::BufferDef &b) {
  if (b.kind != gp::BufferKind::Io)
    return nullptr;
  for (const IoRows &r : kIoRows)
    if (b.name == r.name)
      return &r;
  return nullptr;
}

/// One op of one graph of one rank: what its messages name.
struct Site {
  const gp::RankPlan &rp;
  const std::string graph;
  const gp::OpDef &op;
  const gp::KernelDef &k;

  template <class... Parts> [[noreturn]] void fail(Parts &&...parts) const {
    rt::fail("plan rank ", rp.rank, ", graph ", graph, ", op '", op.name,
             "' (kernel ", k.name, "): ", std::forward<Parts>(parts)...,
             "; the plan is damaged (altered and re-signed?) or was written "
             "by another glmc: re-plan with this glmc");
  }
  std::string arg(size_t i) const {
    const std::string &n = op.args[i].name;
    return "argument " + std::to_string(i) +
           (n.empty() ? std::string() : " '" + n + "'");
  }
};

/// One rank's relocations per buffer, sorted by position (a tile table
/// holds one per expert half: looked up by binary search).
class Relocations {
public:
  explicit Relocations(const gp::RankPlan &rp)
      : rp(rp), sorted_(rp.buffers.size()) {
    for (size_t b = 0; b < rp.buffers.size(); ++b) {
      for (const gp::Relocation &r : rp.buffers[b].relocations)
        sorted_[b].push_back(&r);
      std::sort(sorted_[b].begin(), sorted_[b].end(),
                [](auto *x, auto *y) { return x->at < y->at; });
    }
  }
  /// The first relocation of buffer b whose 8 bytes end after `at`.
  const gp::Relocation *from(size_t b, uint64_t at) const {
    const auto &v = sorted_[b];
    auto it = std::lower_bound(
        v.begin(), v.end(), at,
        [](const gp::Relocation *r, uint64_t a) { return r->at + 8 <= a; });
    return it == v.end() ? nullptr : *it;
  }
  const gp::RankPlan &rp;

private:
  std::vector<std::vector<const gp::Relocation *>> sorted_;
};

/// The plan's tables as one launch (repeat j) reads them: each buffer
/// argument's init bytes from its address, relocations patched in at load
/// (PlanExecutor::load()), zero past the init bytes.
class PlanTables final : public twins::Tables {
public:
  PlanTables(const Relocations &relocs, const IoBounds &io,
             const gp::OpDef &op, uint32_t perLaunch)
      : relocs_(relocs), io_(io), op_(op), perLaunch_(perLaunch) {}
  uint32_t repeat = 0;

  bool known(size_t k) const override {
    const gp::ArgDef &a = op_.args[k];
    return a.kind == gp::ArgKind::Buffer && a.buffer >= 0 &&
           !buffer(k).init.empty();
  }
  uint64_t size(size_t k) const override {
    const uint64_t n = buffer(k).init.size(), at = start(k);
    return at < n ? n - at : 0;
  }
  bool read(size_t k, uint64_t at, void *dst, size_t n) const override {
    const uint64_t from = start(k) + at;
    const gp::Relocation *r = relocs_.from(op_.args[k].buffer, from);
    if (r && r->at < from + n)
      return false; // an address, not known before the arena is
    std::memcpy(dst, buffer(k).init.data() + from, n);
    return true;
  }
  twins::TablePointer pointer(size_t k, uint64_t at) const override {
    const uint64_t from = start(k) + at;
    const gp::Relocation *r = relocs_.from(op_.args[k].buffer, from);
    twins::TablePointer p;
    if (!r || r->at != from)
      return p;
    p.relocated = true;
    const auto &bufs = relocs_.rp.buffers;
    if (r->buffer < bufs.size() && r->offset <= bufs[r->buffer].bytes)
      p.room = bufs[r->buffer].bytes - r->offset;
    p.target = "buffer " + std::to_string(r->buffer) +
               (r->buffer < bufs.size() ? " '" + bufs[r->buffer].name + "'"
                                        : std::string()) +
               " + " + std::to_string(r->offset);
    return p;
  }
  std::string name(size_t k) const override {
    const gp::ArgDef &a = op_.args[k];
    const uint64_t at = start(k);
    return "buffer " + std::to_string(a.buffer) + " '" + buffer(k).name + "'" +
           (at ? " + " + std::to_string(at) : std::string());
  }
  int64_t ioBound(size_t k, twins::IoIndex what) const override {
    const gp::ArgDef &a = op_.args[k];
    if (a.kind != gp::ArgKind::Buffer || a.buffer < 0)
      return 0;
    const IoRows *r = ioRowsOf(buffer(k));
    return r && r->what == what ? io_.*(r->bound) : 0;
  }

private:
  const gp::BufferDef &buffer(size_t k) const {
    return relocs_.rp.buffers[op_.args[k].buffer];
  }
  /// The argument's byte in its buffer at this repeat (runGraph's).
  uint64_t start(size_t k) const {
    const gp::ArgDef &a = op_.args[k];
    return a.offset + uint64_t(repeat) * perLaunch_ * a.rowBytes;
  }
  const Relocations &relocs_;
  const IoBounds &io_;
  const gp::OpDef &op_;
  uint32_t perLaunch_;
};

/// " n=4096 xs=4096 ..." of a launch (what a damaged integer shows in).
std::string integers(const Site &s, const twins::Launch &l, const char *sig) {
  std::string out;
  for (size_t i = 0; sig[i]; ++i)
    if (sig[i] == 'i' || sig[i] == 'l')
      out +=
          " " +
          (s.op.args[i].name.empty() ? std::to_string(i) : s.op.args[i].name) +
          "=" + std::to_string(l.args[i].i);
  return out;
}

/// Checks one op; returns its footprint (which arguments it reads as
/// tables of the plan, which as the runtime's Io index rows).
twins::Footprint checkOp(const Relocations &relocs, const IoBounds &io,
                         const Site &s, uint32_t rows,
                         std::vector<ByteRegion> *regions = nullptr) {
  const gp::OpDef &op = s.op;
  const twins::FootprintEntry *e = twins::findFootprint(s.k.templateName);
  if (!e)
    s.fail("kernel family '", s.k.templateName,
           "' is not one this runtime knows");
  const size_t n = std::strlen(e->signature);
  if (op.args.size() != n)
    s.fail(op.args.size(), " arguments, but family ", e->family, " takes ", n);
  const gp::LaunchDims dims = op.launch.gridX ? op.launch : s.k.launch;
  const uint32_t perLaunch = op.rowsPerLaunch ? op.rowsPerLaunch : rows;

  twins::Launch l;
  l.family = s.k.templateName;
  l.templateArgs = &s.k.templateArgs;
  l.grid[0] = dims.gridX, l.grid[1] = dims.gridY, l.grid[2] = dims.gridZ;
  l.block[0] = dims.blockX, l.block[1] = dims.blockY, l.block[2] = dims.blockZ;
  l.smemBytes = dims.smemBytes;
  l.args.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const gp::ArgDef &a = op.args[i];
    const char c = e->signature[i];
    twins::Arg &v = l.args[i];
    bool ok = false;
    switch (a.kind) {
    case gp::ArgKind::Buffer:
      ok = c == 'p';
      if (ok && a.buffer >= 0 && size_t(a.buffer) >= s.rp.buffers.size())
        s.fail(s.arg(i), " names buffer ", a.buffer, " of the rank's ",
               s.rp.buffers.size());
      v.p = a.buffer < 0 ? nullptr : kSomeBuffer;
      break;
    case gp::ArgKind::I32:
      // The kernel receives the low 32 bits (the CUDA backend's int32_t).
      ok = c == 'i';
      if (ok && (a.i < std::numeric_limits<int32_t>::min() ||
                 a.i > int64_t(std::numeric_limits<uint32_t>::max())))
        s.fail(s.arg(i), " = ", a.i, " does not fit 32 bits");
      v.i = int32_t(uint32_t(a.i));
      break;
    case gp::ArgKind::I64:
      ok = c == 'l';
      v.i = a.i;
      break;
    case gp::ArgKind::F32:
      ok = c == 'f';
      v.f = a.f;
      break;
    case gp::ArgKind::F64:
      ok = c == 'd';
      v.f = a.d;
      break;
    case gp::ArgKind::Runtime:
      if (a.name == "batch") {
        ok = c == 'i';
        v.i = perLaunch;
      } else if (a.name == "null") {
        ok = c == 'p';
      } else {
        s.fail(s.arg(i), " asks for the runtime value '", a.name,
               "', which this runtime does not supply");
      }
      break;
    }
    if (!ok)
      s.fail(s.arg(i), " is ", kindName(a.kind), " where family ", e->family,
             " takes ", paramName(c));
  }

  // A repeated launch whose table argument moves per launch reads other
  // entries each time: every repeat is checked, the widest footprint kept.
  PlanTables tables(relocs, io, op, perLaunch);
  twins::Footprint f;
  const uint32_t repeats = std::max<uint32_t>(op.repeat, 1);
  for (uint32_t j = 0; j < repeats; ++j) {
    tables.repeat = j;
    twins::Footprint fj;
    try {
      fj = twins::footprintOf(*e, l, &tables);
    } catch (const twins::BadLaunchArg &b) {
      s.fail(s.arg(b.arg < n ? b.arg : 0), " ", b.what(),
             repeats > 1 ? " (launch " + std::to_string(j + 1) + " of " +
                               std::to_string(repeats) + ")"
                         : std::string(),
             " (grid ", dims.gridX, "x", dims.gridY, "x", dims.gridZ,
             ", block ", dims.blockX, ")");
    } catch (const Error &x) {
      s.fail(x.what());
    }
    if (j == 0) {
      f = fj;
    } else {
      for (size_t i = 0; i < n; ++i)
        f.bytes[i] = std::max(f.bytes[i], fj.bytes[i]);
    }
    bool moves = false;
    for (size_t i = 0; i < n; ++i)
      moves |= f.table[i] && op.args[i].rowBytes != 0;
    if (!moves)
      break;
  }

  for (size_t i = 0; i < n; ++i) {
    if (e->signature[i] != 'p')
      continue;
    if (!l.args[i].p) {
      if (!f.nullable[i])
        s.fail(s.arg(i), " is null, but ", e->family, " reads or writes it (",
               f.bytes[i], " bytes)");
      continue;
    }
    const gp::ArgDef &a = op.args[i];
    const gp::BufferDef &b = s.rp.buffers[a.buffer];
    // KV cache rows are read and written in one storage form (glmc compile
    // --kv-dtype): the buffer the compiler sized for it, not another's.
    if (f.kvForm[i] >= 0) {
      static const gp::DType kForms[] = {gp::DType::F32, gp::DType::BF16,
                                         gp::DType::E4M3};
      const gp::DType want = kForms[f.kvForm[i]];
      if (b.dtype != want)
        s.fail(s.arg(i), " holds KV cache rows the kernel stores as ",
               gp::dtypeName(want), ", but buffer ", a.buffer, " '", b.name,
               "' is ", gp::dtypeName(b.dtype),
               " (a plan compiled with another --kv-dtype; recompile it)");
    }
    // The last repeat reads the furthest rows (runGraph's addresses).
    using Wide = unsigned __int128;
    const Wide start = Wide(a.offset) + Wide(op.repeat ? op.repeat - 1 : 0) *
                                            perLaunch * a.rowBytes;
    const Wide end = start + f.bytes[i];
    if (end > b.bytes)
      s.fail(s.arg(i), " reaches bytes [", uint64_t(start), ", ",
             end >> 64 ? std::string("2^64+") : std::to_string(uint64_t(end)),
             ") of buffer ", a.buffer, " '", b.name, "', which holds ", b.bytes,
             " bytes",
             op.repeat > 1 ? " (launch " + std::to_string(op.repeat) + " of " +
                                 std::to_string(op.repeat) + ")"
                           : std::string(),
             "; the launch's integers:", integers(s, l, e->signature),
             ", grid ", dims.gridX, "x", dims.gridY, "x", dims.gridZ,
             ", block ", dims.blockX);
    if (regions && f.bytes[i] > 0)
      regions->push_back({uint32_t(a.buffer), a.offset,
                          f.indexed[i] ? b.bytes : uint64_t(end)});
  }
  return f;
}

/// A buffer read as a table of the plan, and the first launch reading it.
struct TableUse {
  Site site;
  size_t arg;
};

using CheckedOps = std::vector<std::pair<Site, twins::Footprint>>;

/// Holds `buffers` read-only: each may be passed to a launch only as an
/// argument `reads(footprint, i)` accepts (which arguments a kernel writes
/// is not in the plan: any other is refused), and no weight binding,
/// collective or other buffer sharing its arena bytes may write it.
/// `refuse(buffer, why...)` throws.
template <class Reads, class Refuse>
void holdReadOnly(const gp::RankPlan &rp, const std::set<uint32_t> &buffers,
                  const CheckedOps &ops, Reads reads, Refuse refuse) {
  for (const auto &[site, f] : ops)
    for (size_t i = 0; i < site.op.args.size(); ++i) {
      const gp::ArgDef &a = site.op.args[i];
      if (a.kind != gp::ArgKind::Buffer || a.buffer < 0 || reads(f, i) ||
          !buffers.count(uint32_t(a.buffer)))
        continue;
      refuse(uint32_t(a.buffer), "graph ", site.graph, ", op '", site.op.name,
             "' (kernel ", site.k.name, ") passes it as ", site.arg(i),
             ", which may write it");
    }
  for (const gp::WeightBinding &w : rp.weights)
    if (buffers.count(w.buffer))
      refuse(w.buffer, "the binding of ", w.file, " @", w.offset,
             " writes it at load");
  for (size_t c = 0; c < rp.collectives.size(); ++c) {
    const int32_t b = rp.collectives[c].buffer;
    if (b >= 0 && buffers.count(uint32_t(b)))
      refuse(uint32_t(b), "collective ", c, " works in place on it");
  }
  for (uint32_t b : buffers) {
    const gp::BufferDef &tb = rp.buffers[b];
    for (size_t o = 0; o < rp.buffers.size(); ++o) {
      const gp::BufferDef &ob = rp.buffers[o];
      if (o == b || !ob.bytes || !tb.bytes)
        continue;
      if (ob.arenaOffset < tb.arenaOffset + tb.bytes &&
          tb.arenaOffset < ob.arenaOffset + ob.bytes)
        refuse(b, "buffer ", o, " '", ob.name,
               "' shares its bytes in the arena");
    }
  }
}

/// A table's contents are its init bytes only if nothing else writes
/// them, and the runtime's Io index rows hold only what the runtime
/// bounded (IoBounds) only if nothing else writes them.
void holdTablesAndIoRows(const gp::RankPlan &rp,
                         const std::map<uint32_t, TableUse> &tables,
                         const CheckedOps &ops) {
  auto refuseTable = [&](uint32_t b, auto &&...why) {
    const TableUse &u = tables.at(b);
    u.site.fail(u.site.arg(u.arg), " reads buffer ", b, " '",
                rp.buffers[b].name, "' as a table of the plan, but ", why...,
                ": the table would not hold its init bytes");
  };
  std::set<uint32_t> tableBuffers;
  for (const auto &[b, use] : tables) {
    if (rp.buffers[b].kind == gp::BufferKind::Io)
      refuseTable(b, "it is an Io buffer the runtime writes");
    tableBuffers.insert(b);
  }
  holdReadOnly(
      rp, tableBuffers, ops,
      [](const twins::Footprint &f, size_t i) { return bool(f.table[i]); },
      refuseTable);

  std::set<uint32_t> ioBuffers;
  for (size_t b = 0; b < rp.buffers.size(); ++b)
    if (ioRowsOf(rp.buffers[b]))
      ioBuffers.insert(uint32_t(b));
  holdReadOnly(
      rp, ioBuffers, ops,
      [](const twins::Footprint &f, size_t i) { return bool(f.io[i]); },
      [&](uint32_t b, auto &&...why) {
        rt::fail("plan rank ", rp.rank, ": buffer ", b, " '",
                 rp.buffers[b].name, "' holds the runtime's ",
                 twins::ioIndexName(ioRowsOf(rp.buffers[b])->what),
                 ", which kernels index memory by, but ", why...,
                 "; the plan is damaged (altered and re-signed?) or was "
                 "written by another glmc: re-plan with this glmc");
      });
}

} // namespace

std::vector<std::vector<ByteRegion>> opRegions(const gp::Plan &plan,
                                               const gp::RankPlan &rp,
                                               const gp::GraphDef &g) {
  const Relocations relocs(rp);
  const IoBounds io = ioBounds(plan);
  const uint32_t rows = g.kind == gp::GraphKind::Load ? 0 : g.size;
  const std::string gname = gp::graphName(g);
  std::vector<std::vector<ByteRegion>> out(g.ops.size());
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const gp::OpDef &op = g.ops[i];
    if (op.kernel < 0) {
      std::vector<uint32_t> bufs = op.inputs;
      bufs.insert(bufs.end(), op.outputs.begin(), op.outputs.end());
      if (op.collective >= 0 && size_t(op.collective) < rp.collectives.size() &&
          rp.collectives[op.collective].buffer >= 0)
        bufs.push_back(uint32_t(rp.collectives[op.collective].buffer));
      for (uint32_t b : bufs)
        if (b < rp.buffers.size())
          out[i].push_back({b, 0, rp.buffers[b].bytes});
      continue;
    }
    check(size_t(op.kernel) < plan.kernels.size(), "plan rank ", rp.rank,
          ", graph ", gname, ", op '", op.name, "' uses kernel ", op.kernel,
          " of ", plan.kernels.size(), ": the plan is damaged");
    Site s{rp, gname, op, plan.kernels[op.kernel]};
    checkOp(relocs, io, s, rows, &out[i]);
  }
  return out;
}

IoBounds ioBounds(const gp::Plan &plan) {
  IoBounds io;
  // Compile option `key` as an integer in [lo, hi], or `dflt` without it.
  auto option = [&](const char *key, long long lo, long long hi,
                    const char *what, long long dflt) {
    auto it = plan.compileOptions.find(key);
    if (it == plan.compileOptions.end())
      return dflt;
    const std::string &v = it->second;
    char *end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    check(!v.empty() && *end == 0 && n >= lo && n <= hi,
          "plan compile option ", key, " '", v, "' is not ", what, " (", lo,
          "..", hi, "): the plan is damaged (altered and re-signed?) or was "
          "written by another glmc; re-plan with this glmc");
    return n;
  };
  io.slots = option("kv_slots", 1, 1 << 20, "a KV slot count", 1);
  io.pageTokens = option("kv_page_tokens", 64, 1 << 20, "a page's tokens", 0);
  io.pages = option("kv_pages", 2, 1ll << 30, "a KV page count", 0);
  check((io.pageTokens == 0) == (io.pages == 0) &&
            (io.pageTokens & (io.pageTokens - 1)) == 0 &&
            (!io.pageTokens || (plan.model.maxContext % io.pageTokens == 0 &&
                                io.pages >= plan.model.maxContext /
                                                    io.pageTokens +
                                                1)),
        "plan compile options kv_page_tokens and kv_pages (", io.pageTokens,
        ", ", io.pages, ") are not a paged KV cache of the plan's ",
        plan.model.maxContext, "-token context: the plan is damaged or was "
        "written by another glmc; re-plan with this glmc");
  io.positions = plan.model.maxContext;
  io.tokens = plan.model.vocabSize;
  for (const gp::RankPlan &rp : plan.ranks)
    for (const gp::GraphDef &g : rp.graphs)
      io.draftRows = std::max<int64_t>(io.draftRows, g.size);
  return io;
}

void checkLaunchBounds(const gp::Plan &plan) {
  const IoBounds io = ioBounds(plan);
  for (const gp::RankPlan &rp : plan.ranks) {
    const Relocations relocs(rp);
    CheckedOps ops;
    std::map<uint32_t, TableUse> tables;
    for (const gp::GraphDef &g : rp.graphs) {
      // runGraph's rows: the decode batch; the Load graph runs with 0.
      const uint32_t rows = g.kind == gp::GraphKind::Load ? 0 : g.size;
      const std::string gname = gp::graphName(g);
      for (const gp::OpDef &op : g.ops) {
        if (op.kernel < 0)
          continue;
        if (size_t(op.kernel) >= plan.kernels.size())
          rt::fail("plan rank ", rp.rank, ", graph ", gname, ", op '", op.name,
                   "' uses kernel ", op.kernel, " of ", plan.kernels.size(),
                   ": the plan is damaged; re-plan "
                   "with this glmc");
        Site s{rp, gname, op, plan.kernels[op.kernel]};
        twins::Footprint f = checkOp(relocs, io, s, rows);
        for (size_t i = 0; i < f.table.size(); ++i)
          if (f.table[i])
            tables.emplace(uint32_t(op.args[i].buffer), TableUse{s, i});
        ops.emplace_back(std::move(s), std::move(f));
      }
    }
    holdTablesAndIoRows(rp, tables, ops);
  }
}

} // namespace glm::rt::exec
