//===- launch_bounds.cpp - every launch of a plan stays inside its buffers ===//
//
// Resolves each op's arguments the way PlanExecutor::runGraph does (buffer
// + offset + j * rowsPerLaunch * rowBytes, immediates, Runtime "batch" =
// rows per launch, Runtime "null"), asks the family's footprint what the
// launch may touch, and holds every pointer to its buffer.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/launch_bounds.h"

#include "runtime/base/error.h"
#include "runtime/twins/footprint.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

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

void checkOp(const gp::Plan &plan, const Site &s, uint32_t rows) {
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

  twins::Footprint f;
  try {
    f = twins::footprintOf(*e, l);
  } catch (const twins::BadLaunchArg &b) {
    s.fail(s.arg(b.arg < n ? b.arg : 0), " ", b.what(), " (grid ", dims.gridX,
           "x", dims.gridY, "x", dims.gridZ, ", block ", dims.blockX, ")");
  } catch (const Error &x) {
    s.fail(x.what());
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
  }
}

} // namespace

void checkLaunchBounds(const gp::Plan &plan) {
  for (const gp::RankPlan &rp : plan.ranks)
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
        checkOp(plan, Site{rp, gname, op, plan.kernels[op.kernel]}, rows);
      }
    }
}

} // namespace glm::rt::exec
