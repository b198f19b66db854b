//===- launch_bounds_test.cpp - kernel launches stay inside their buffers -===//
//
// The launch-bounds check (runtime/exec/launch_bounds.h) and the family
// footprints it rests on (runtime/twins/footprint.h), on compiled plans:
//  - every launch of the tiny hf / EXL3 / exlr8 packs and of the goldens at
//    1 to 4 ranks passes the check (no false positive);
//  - footprints are not too small: each of those launches also runs its
//    twin with every pointer argument copied into a fresh mapping of
//    exactly its footprint, once ending at a PROT_NONE page and once
//    starting after one, so a twin touching a byte outside its footprint
//    faults (the handler names the launch and exits);
//  - damaged plans (an int raised or negative, an offset moved, a buffer
//    swapped, a kind changed, a null where a buffer is needed) are refused
//    by PlanExecutor::load() naming the op, kernel and argument;
//  - so are indices from anywhere but the runtime's Io rows (KV slots,
//    positions, token ids) and writers of those rows;
//  - so are damaged tables of the plan (a head out of range, a tile
//    relocation whose tiles run past the weights, a width the kernel was
//    not built for, a raw address, a table a kernel or binding could
//    write), naming the entry; vocab_gather on a hand-built plan.
//
//===----------------------------------------------------------------------===//
#include "plan_test_util.h"

#include "runtime/exec/cpu_backend.h"
#include "runtime/exec/launch_bounds.h"
#include "runtime/exec/plan_executor.h"
#include "runtime/twins/footprint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <set>
#include <sys/mman.h>
#include <tuple>
#include <unistd.h>

namespace gp = glm::plan;
namespace twins = glm::rt::twins;
using namespace glm::rt;
using plan_test::compilePlan;
using plan_test::tinyPack;

namespace {

const char *kGoldens = GLM_TEST_DATA_DIR "/../oracle/goldens";

/// What the fault handler prints: the launch being probed.
char gProbing[512];

void onFault(int) {
  const char head[] = "\nlaunch_bounds_test: a twin touched memory outside "
                      "its footprint while probing ";
  (void)!::write(2, head, sizeof head - 1);
  (void)!::write(2, gProbing, ::strnlen(gProbing, sizeof gProbing));
  (void)!::write(2, "\n", 1);
  ::_exit(3);
}

/// `bytes` at the end (or the start) of a mapping fenced by PROT_NONE pages.
class Fenced {
public:
  Fenced(const void *src, uint64_t bytes, bool atEnd) {
    const size_t page = size_t(::sysconf(_SC_PAGESIZE));
    const size_t body = (bytes + page - 1) / page * page;
    size_ = body + 2 * page;
    base_ =
        static_cast<uint8_t *>(::mmap(nullptr, size_, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    check(base_ != MAP_FAILED, "mmap of ", size_, " bytes failed");
    ::mprotect(base_, page, PROT_NONE);
    ::mprotect(base_ + page + body, page, PROT_NONE);
    data_ = base_ + page + (atEnd ? body - bytes : 0);
    std::memcpy(data_, src, bytes);
  }
  ~Fenced() { ::munmap(base_, size_); }
  Fenced(const Fenced &) = delete;
  Fenced &operator=(const Fenced &) = delete;
  void *data() const { return data_; }

private:
  uint8_t *base_ = nullptr, *data_ = nullptr;
  size_t size_ = 0;
};

/// The CPU backend, each launch first probed: the twin run on fenced
/// copies of its footprints (results thrown away), then the real launch.
class FencedBackend final : public exec::Backend {
public:
  FencedBackend(const gp::Plan &p, std::set<std::string> &probed)
      : plan_(p), inner_(exec::makeCpuBackend(p)), probed_(probed) {}
  std::string name() const override { return "cpu"; }
  uint64_t allocateArena(uint64_t bytes) override {
    return inner_->allocateArena(bytes);
  }
  void write(uint64_t a, const void *src, size_t n) override {
    inner_->write(a, src, n);
  }
  void read(uint64_t a, void *dst, size_t n) override {
    inner_->read(a, dst, n);
  }
  void prepareKernel(uint32_t index, const gp::KernelDef &k) override {
    inner_->prepareKernel(index, k);
  }
  void synchronize() override {}
  void fillRandomWords(uint64_t, uint64_t, uint64_t, uint32_t) override {
    FAIL() << "the probe backend fills no random weights";
  }
  void setLaunchTiming(bool) override {}
  std::vector<double> takeLaunchTimes() override { return {}; }

  void launch(uint32_t kernel, const gp::LaunchDims &dims,
              const std::vector<exec::ResolvedArg> &args, bool) override {
    const gp::KernelDef &k = plan_.kernels[kernel];
    twins::Launch l;
    l.family = k.templateName;
    l.templateArgs = &k.templateArgs;
    l.grid[0] = dims.gridX, l.grid[1] = dims.gridY, l.grid[2] = dims.gridZ;
    l.block[0] = dims.blockX, l.block[1] = dims.blockY;
    l.block[2] = dims.blockZ;
    l.smemBytes = dims.smemBytes;
    l.args.resize(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i].kind == gp::ArgKind::Buffer)
        l.args[i].p = reinterpret_cast<void *>(args[i].address);
      l.args[i].i = args[i].i;
      l.args[i].f = args[i].kind == gp::ArgKind::F64 ? args[i].d : args[i].f;
    }
    const twins::FootprintEntry *e = twins::findFootprint(k.templateName);
    check(e != nullptr, "no footprint for ", k.templateName);
    const twins::Footprint f = twins::footprintOf(*e, l);
    for (bool atEnd : {true, false}) {
      std::vector<std::unique_ptr<Fenced>> fences;
      twins::Launch g = l;
      for (size_t i = 0; i < args.size(); ++i)
        if (e->signature[i] == 'p' && l.args[i].p && !f.indexed[i]) {
          fences.push_back(
              std::make_unique<Fenced>(l.args[i].p, f.bytes[i], atEnd));
          g.args[i].p = fences.back()->data();
        }
      std::snprintf(gProbing, sizeof gProbing,
                    "kernel %s (family %s), footprints %s their fences",
                    k.name.c_str(), k.templateName.c_str(),
                    atEnd ? "ending at" : "starting after");
      twins::findTwin(k.templateName)(g);
    }
    gProbing[0] = 0;
    probed_.insert(k.templateName);
    inner_->launch(kernel, dims, args, false);
  }

private:
  const gp::Plan &plan_;
  std::unique_ptr<exec::Backend> inner_;
  std::set<std::string> &probed_;
};

/// Loads `plan` on fenced CPU backends and runs decode steps at positions
/// 0..4 (and a batch-2 step when the plan has that graph).
void probePlan(std::shared_ptr<gp::Plan> plan, const std::string &dir,
               std::set<std::string> &probed) {
  EXPECT_NO_THROW(exec::checkLaunchBounds(*plan));
  struct sigaction sa = {};
  sa.sa_handler = onFault;
  struct sigaction oldSegv, oldBus;
  ::sigaction(SIGSEGV, &sa, &oldSegv);
  ::sigaction(SIGBUS, &sa, &oldBus);
  std::vector<uint32_t> ranks;
  std::vector<std::unique_ptr<exec::Backend>> backends;
  for (uint32_t r = 0; r < plan->numRanks; ++r) {
    ranks.push_back(r);
    backends.push_back(std::make_unique<FencedBackend>(*plan, probed));
  }
  exec::PlanExecutor e(plan, dir, ranks, std::move(backends),
                       exec::inProcessCollectives());
  e.load();
  for (int32_t pos = 0; pos < 5; ++pos)
    e.step({1 + pos}, {pos}, {0});
  for (const gp::GraphDef &g : plan->ranks[0].graphs)
    if (g.kind == gp::GraphKind::Decode && g.size == 2)
      e.step({7, 8}, {5, 6}, {0, 0});
  ::sigaction(SIGSEGV, &oldSegv, nullptr);
  ::sigaction(SIGBUS, &oldBus, nullptr);
}

TEST(LaunchBounds, FootprintsHoldEveryLaunchOfCompiledPlans) {
  std::set<std::string> probed;
  const std::string hf = tinyPack("hf"), exl3 = tinyPack("exl3"),
                    exlr8 = tinyPack("exlr8");
  probePlan(compilePlan(hf, 1, "", {1, 2}), hf, probed);
  probePlan(compilePlan(hf, 2), hf, probed);
  probePlan(compilePlan(exl3, 1), exl3, probed);
  probePlan(compilePlan(exl3, 2), exl3, probed);
  probePlan(compilePlan(exlr8, 1, "mixed"), exlr8, probed);
  probePlan(compilePlan(exlr8, 3, "mixed"), exlr8, probed);
  for (const char *g : {"glm_dsa_a", "glm_dsa_b"}) {
    const std::string dir = std::string(kGoldens) + "/" + g;
    probePlan(compilePlan(dir, 1), dir, probed);
    probePlan(compilePlan(dir, g[8] == 'a' ? 2 : 4), dir, probed);
  }
  std::string list;
  for (const std::string &f : probed)
    list += " " + f;
  std::printf("[ bounds ] %zu families probed:%s\n", probed.size(),
              list.c_str());
  EXPECT_GE(probed.size(), 15u);
}

// ---------------------------------------------------------- damaged plans
class DamagedPlan : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(tinyPack("hf"));
    plan_ = new std::shared_ptr<gp::Plan>(compilePlan(*dir_, 1));
    trellisDir_ = new std::string(tinyPack("exlr8"));
    trellisPlan_ =
        new std::shared_ptr<gp::Plan>(compilePlan(*trellisDir_, 1, "mixed"));
  }
  static void TearDownTestSuite() {
    delete plan_;
    delete dir_;
    delete trellisPlan_;
    delete trellisDir_;
  }
  /// A copy of the compiled plan to damage.
  std::shared_ptr<gp::Plan> copy() {
    return std::make_shared<gp::Plan>(**plan_);
  }
  /// A copy of the exlr8 plan (its expert tile tables) to damage; later
  /// expectRefused calls load it from its pack.
  std::shared_ptr<gp::Plan> copyTrellis() {
    dir = *trellisDir_;
    return std::make_shared<gp::Plan>(**trellisPlan_);
  }
  /// Rank 0's buffer whose name ends with `suffix`.
  static uint32_t bufferNamed(const gp::Plan &p, const std::string &suffix) {
    const auto &bs = p.ranks[0].buffers;
    for (uint32_t b = 0; b < bs.size(); ++b)
      if (bs[b].name.size() >= suffix.size() &&
          bs[b].name.compare(bs[b].name.size() - suffix.size(), suffix.size(),
                             suffix) == 0)
        return b;
    fail("no buffer named *", suffix);
  }
  /// The first op of rank 0 (in check order) passing buffer `b` as its
  /// argument `arg`: the op a damaged table is refused at.
  static gp::OpDef &firstReader(gp::Plan &p, uint32_t b,
                                const std::string &arg) {
    for (gp::GraphDef &g : p.ranks[0].graphs)
      for (gp::OpDef &op : g.ops)
        for (const gp::ArgDef &a : op.args)
          if (op.kernel >= 0 && a.kind == gp::ArgKind::Buffer &&
              a.buffer == int32_t(b) && a.name == arg)
            return op;
    fail("no op reads buffer ", b, " as ", arg);
  }
  /// The first op of rank 0 running family `family` with an argument
  /// named `arg`; sets `index` to that argument's position.
  static gp::OpDef &findOp(gp::Plan &p, const std::string &family,
                           const std::string &arg, size_t &index) {
    for (gp::GraphDef &g : p.ranks[0].graphs)
      for (gp::OpDef &op : g.ops)
        if (op.kernel >= 0 && p.kernels[op.kernel].templateName == family)
          for (size_t i = 0; i < op.args.size(); ++i)
            if (op.args[i].name == arg) {
              index = i;
              return op;
            }
    fail("no ", family, " op with argument ", arg);
  }
  /// load() of `p` throws an Error naming op, kernel and argument.
  void expectRefused(std::shared_ptr<gp::Plan> p, const gp::OpDef &op,
                     const std::string &arg, const std::string &also = "") {
    std::vector<std::unique_ptr<exec::Backend>> backends;
    backends.push_back(exec::makeCpuBackend(*p));
    exec::PlanExecutor e(p, dir.empty() ? *dir_ : dir, {0}, std::move(backends),
                         exec::inProcessCollectives());
    try {
      e.load();
      ADD_FAILURE() << "load() accepted the damaged plan (" << op.name << ", "
                    << arg << ")";
    } catch (const Error &x) {
      const std::string m = x.what();
      EXPECT_NE(m.find("op '" + op.name + "'"), std::string::npos) << m;
      EXPECT_NE(m.find(p->kernels[op.kernel].name), std::string::npos) << m;
      EXPECT_NE(m.find("'" + arg + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("re-plan with this glmc"), std::string::npos) << m;
      if (!also.empty())
        EXPECT_NE(m.find(also), std::string::npos) << m;
    }
  }
  std::string dir; // the pack of the plan being damaged, "" = hf
  static std::string *dir_, *trellisDir_;
  static std::shared_ptr<gp::Plan> *plan_, *trellisPlan_;
};
std::string *DamagedPlan::dir_ = nullptr;
std::string *DamagedPlan::trellisDir_ = nullptr;
std::shared_ptr<gp::Plan> *DamagedPlan::plan_ = nullptr;
std::shared_ptr<gp::Plan> *DamagedPlan::trellisPlan_ = nullptr;

TEST_F(DamagedPlan, UndamagedLoads) {
  EXPECT_NO_THROW(exec::checkLaunchBounds(*copy()));
  EXPECT_NO_THROW(exec::checkLaunchBounds(*copyTrellis()));
}

TEST_F(DamagedPlan, RaisedIntIsRefused) {
  auto p = copy();
  size_t i = 0;
  gp::OpDef &op = findOp(*p, "rms_norm_rows", "n", i);
  op.args[i].i *= 64;
  // Named by the pointer it pushes out of its buffer, the value shown.
  expectRefused(p, op, "x", " n=" + std::to_string(op.args[i].i) + " ");
}

TEST_F(DamagedPlan, RaisedMaxContextIsRefused) {
  auto p = copy();
  size_t i = 0;
  gp::OpDef &op = findOp(*p, "kv_store", "maxCtx", i);
  op.args[i].i += 1;
  expectRefused(p, op, "cache", "which holds");
}

TEST_F(DamagedPlan, NegativeIntIsRefused) {
  auto p = copy();
  size_t i = 0;
  gp::OpDef &op = findOp(*p, "dense_gemv", "out_stride", i);
  op.args[i].i = -5;
  expectRefused(p, op, "out_stride", "at least 0");
}

TEST_F(DamagedPlan, MovedOffsetIsRefused) {
  auto p = copy();
  size_t i = 0;
  gp::OpDef &op = findOp(*p, "dense_gemv", "w", i);
  // Still inside the buffer (what validatePlan holds), but the rows are not.
  op.args[i].offset = p->ranks[0].buffers[op.args[i].buffer].bytes - 16;
  expectRefused(p, op, "w", "which holds");
}

TEST_F(DamagedPlan, SwappedBufferIsRefused) {
  auto p = copy();
  size_t i = 0;
  gp::OpDef &op = findOp(*p, "add_rms_norm", "y", i);
  uint32_t tokens = 0;
  for (uint32_t b = 0; b < p->ranks[0].buffers.size(); ++b)
    if (p->ranks[0].buffers[b].name == "io.tokens")
      tokens = b;
  op.args[i].buffer = int32_t(tokens);
  op.args[i].offset = 0;
  expectRefused(p, op, "y", "io.tokens");
}

TEST_F(DamagedPlan, BufferIndexOutOfRangeIsRefused) {
  auto p = copy();
  size_t i = 0;
  gp::OpDef &op = findOp(*p, "rms_norm_rows", "x", i);
  op.args[i].buffer = int32_t(p->ranks[0].buffers.size() + 3);
  expectRefused(p, op, "x");
}

TEST_F(DamagedPlan, ChangedKindIsRefused) {
  auto p = copy();
  size_t i = 0;
  gp::OpDef &op = findOp(*p, "rms_norm_rows", "n", i);
  op.args[i].kind = gp::ArgKind::I64;
  expectRefused(p, op, "n", "takes an int");
}

TEST_F(DamagedPlan, NullWhereABufferIsNeededIsRefused) {
  auto p = copy();
  size_t i = 0;
  gp::OpDef &op = findOp(*p, "rms_norm_rows", "w", i);
  op.args[i].kind = gp::ArgKind::Runtime;
  op.args[i].name = "null";
  expectRefused(p, op, "null", "is null");
}

TEST_F(DamagedPlan, RepeatPastTheRowsIsRefused) {
  auto p = copy();
  size_t i = 0;
  gp::OpDef &op = findOp(*p, "rms_norm_rows", "x", i);
  op.repeat = 1000;
  op.rowsPerLaunch = 1;
  expectRefused(p, op, "x", "launch 1000 of 1000");
}

// ------------------------------------------- damaged tables of the plan
// The numbers kernels read from the plan's own tables (init bytes and
// relocations): refused naming the entry.

TEST_F(DamagedPlan, HeadOutOfRangeIsRefused) {
  auto p = copy();
  const uint32_t t = bufferNamed(*p, ".heads.0-4");
  gp::BufferDef &b = p->ranks[0].buffers[t];
  const int32_t four = 4; // H = 4: heads are 0..3
  std::memcpy(b.init.data() + 2 * 4, &four, 4);
  expectRefused(p, firstReader(*p, t, "heads"), "heads",
                "entry 2 of table buffer " + std::to_string(t) +
                    " 'scratch.table.heads.0-4' (a head of H) is 4, outside "
                    "[0, 4)");
}

TEST_F(DamagedPlan, NegativeHeadIsRefused) {
  auto p = copy();
  const uint32_t t = bufferNamed(*p, ".heads.0-4");
  const int32_t minus = -1;
  std::memcpy(p->ranks[0].buffers[t].init.data(), &minus, 4);
  expectRefused(p, firstReader(*p, t, "heads"), "heads", "entry 0");
}

TEST_F(DamagedPlan, AddressInAHeadTableIsRefused) {
  auto p = copy();
  const uint32_t t = bufferNamed(*p, ".heads.0-4");
  p->ranks[0].buffers[t].relocations.push_back({8, 0, 0});
  expectRefused(p, firstReader(*p, t, "heads"), "heads",
                "entry 2 of table buffer " + std::to_string(t) +
                    " 'scratch.table.heads.0-4' holds a device address");
}

TEST_F(DamagedPlan, HeadsFromABufferWithoutInitBytesAreRefused) {
  auto p = copy();
  const uint32_t t = bufferNamed(*p, ".heads.0-4");
  gp::OpDef &op = firstReader(*p, t, "heads");
  // A scratch buffer of activations: what heads would hold is run-time data.
  for (gp::ArgDef &a : op.args)
    if (a.name == "heads")
      a.buffer = int32_t(bufferNamed(*p, "mla_qabs"));
  expectRefused(p, op, "heads", "holds no table of the plan");
}

TEST_F(DamagedPlan, TablePassedToAnotherArgumentIsRefused) {
  auto p = copy();
  const uint32_t t = bufferNamed(*p, ".heads.0-4");
  const gp::OpDef &reader = firstReader(*p, t, "heads");
  // dsa_select's counts, 4 bytes: inside the table's buffer, but an
  // argument the kernel writes.
  size_t i = 0;
  gp::OpDef &op = findOp(*p, "dsa_select", "nsel", i);
  op.args[i].buffer = int32_t(t);
  op.args[i].offset = 0;
  op.args[i].rowBytes = 0;
  expectRefused(p, reader, "heads", "passes it as argument 5 'nsel'");
}

// The runtime's Io index rows (KV slots, positions, token ids): a kernel
// indexing memory by them reads them from those buffers only, and nothing
// else writes them (the seed-6 plan fuzz case: kv_store's positions from
// an activation wrote past the cache).
TEST_F(DamagedPlan, IndicesFromAnotherBufferAreRefused) {
  for (auto [family, arg, io] :
       {std::tuple{"kv_store", "pos", "io.positions"},
        std::tuple{"kv_store", "seq", "io.slots"},
        std::tuple{"mla_scores", "seq", "io.slots"},
        std::tuple{"mla_values", "seq", "io.slots"},
        std::tuple{"dsa_select", "pos", "io.positions"},
        std::tuple{"embed_tokens", "tok", "io.tokens"}}) {
    SCOPED_TRACE(std::string(family) + " " + arg);
    auto p = copy();
    size_t i = 0;
    gp::OpDef &op = findOp(*p, family, arg, i);
    op.args[i].buffer = int32_t(bufferNamed(*p, "mla_qabs"));
    op.args[i].offset = 0;
    expectRefused(p, op, arg, std::string("must be the runtime's ") +
                                  (std::string(io) == "io.tokens"
                                       ? "token ids"
                                       : std::string(io) == "io.slots"
                                             ? "KV slots"
                                             : "positions"));
  }
}

TEST_F(DamagedPlan, WriterOfTheRuntimesIndicesIsRefused) {
  auto p = copy();
  size_t i = 0;
  gp::OpDef &op = findOp(*p, "dsa_select", "nsel", i);
  op.args[i].buffer = int32_t(bufferNamed(*p, "io.positions"));
  op.args[i].offset = 0;
  op.args[i].rowBytes = 0;
  expectRefused(p, op, "nsel", "holds the runtime's positions");
}

TEST_F(DamagedPlan, CacheOfFewerSlotsThanTheRuntimeWritesIsRefused) {
  auto p = copy();
  // One more slot than the caches hold: the first launch writing one (the
  // indexer's keys) past its end.
  const int64_t slots = exec::ioBounds(*p).slots;
  p->compileOptions["kv_slots"] = std::to_string(slots + 1);
  size_t i = 0;
  expectRefused(p, findOp(*p, "index_key_store", "keys", i), "keys",
                "which holds");
  p->compileOptions["kv_slots"] = "lots";
  EXPECT_THROW(exec::checkLaunchBounds(*p), Error);
}

TEST_F(DamagedPlan, TableBoundToAWeightIsRefused) {
  auto p = copy();
  const uint32_t t = bufferNamed(*p, ".heads.0-4");
  p->ranks[0].weights[0].buffer = t;
  p->ranks[0].weights[0].bufferOffset = 0;
  expectRefused(p, firstReader(*p, t, "heads"), "heads", "writes it at load");
}

TEST_F(DamagedPlan, TableSharingArenaBytesIsRefused) {
  auto p = copy();
  const uint32_t t = bufferNamed(*p, ".heads.0-4");
  const uint32_t other = bufferNamed(*p, "mla_qabs");
  p->ranks[0].buffers[t].arenaOffset =
      p->ranks[0].buffers[other].arenaOffset + 64;
  expectRefused(p, firstReader(*p, t, "heads"), "heads",
                "shares its bytes in the arena");
}

/// The last relocation of the exlr8 plan's tile table, its entry index.
static gp::Relocation &lastTile(gp::Plan &p, uint32_t t, size_t &entry) {
  auto &rs = p.ranks[0].buffers[t].relocations;
  gp::Relocation *last = &rs.at(0);
  for (gp::Relocation &r : rs)
    if (r.at > last->at)
      last = &r;
  entry = last->at / 8;
  return *last;
}

TEST_F(DamagedPlan, TilePointerRunningPastItsBufferIsRefused) {
  auto p = copyTrellis();
  const uint32_t t = bufferNamed(*p, ".tiles");
  size_t entry = 0;
  gp::Relocation &r = lastTile(*p, t, entry);
  // Still inside the weight buffer (what the reader checks), but the tiles
  // of the half run 64 bytes from its end.
  r.offset = p->ranks[0].buffers[r.buffer].bytes - 64;
  expectRefused(p, firstReader(*p, t, "tiles"), "tiles",
                "entry " + std::to_string(entry) + " of table buffer " +
                    std::to_string(t));
  try {
    exec::checkLaunchBounds(*p);
  } catch (const Error &x) {
    EXPECT_NE(std::string(x.what()).find("the buffer ends 64 bytes after it"),
              std::string::npos)
        << x.what();
  }
}

TEST_F(DamagedPlan, RawAddressInATileTableIsRefused) {
  auto p = copyTrellis();
  const uint32_t t = bufferNamed(*p, ".tiles");
  gp::BufferDef &b = p->ranks[0].buffers[t];
  // A relocated entry without its relocation, its init bytes an address.
  size_t entry = 0;
  lastTile(*p, t, entry);
  b.relocations.erase(std::remove_if(b.relocations.begin(), b.relocations.end(),
                                     [&](const gp::Relocation &r) {
                                       return r.at == entry * 8;
                                     }),
                      b.relocations.end());
  const uint64_t raw = 0x7f0000001000ull;
  std::memcpy(b.init.data() + entry * 8, &raw, 8);
  expectRefused(p, firstReader(*p, t, "tiles"), "tiles",
                "entry " + std::to_string(entry) + " of table buffer " +
                    std::to_string(t) + " '" + b.name +
                    "' holds a raw address");
}

TEST_F(DamagedPlan, WidthTheKernelWasNotBuiltForIsRefused) {
  auto p = copyTrellis();
  const uint32_t t = bufferNamed(*p, ".tiles"), w = bufferNamed(*p, ".widths");
  size_t entry = 0;
  lastTile(*p, t, entry);
  p->ranks[0].buffers[w].init.at(entry) = 9;
  expectRefused(p, firstReader(*p, w, "widths"), "widths",
                "entry " + std::to_string(entry) + " of table buffer " +
                    std::to_string(w));
}

/// A one-op plan of vocab_gather (no compiled plan gathers the
/// vocabulary): g [2][1][100], bounds {0, 100, 150}, out [1][150].
std::shared_ptr<gp::Plan> vocabGatherPlan(const std::vector<int64_t> &vb) {
  auto p = std::make_shared<gp::Plan>();
  gp::KernelDef k;
  k.name = "glm_vocab_gather_t128";
  k.templateName = "vocab_gather";
  k.launch = {1, 2, 1, 128, 1, 1, 0};
  p->kernels.push_back(k);
  gp::RankPlan &rp = p->ranks.emplace_back();
  auto buffer = [&](const char *name, uint64_t bytes) {
    gp::BufferDef b;
    b.name = name;
    b.bytes = bytes;
    b.arenaOffset = rp.arenaBytes;
    b.kind = gp::BufferKind::Scratch;
    rp.arenaBytes += (bytes + 255) / 256 * 256;
    rp.buffers.push_back(b);
    return int32_t(rp.buffers.size() - 1);
  };
  const int32_t g = buffer("g", 2 * 100 * 4), t = buffer("table.vb", 24),
                out = buffer("out", 150 * 4);
  rp.buffers[t].init.resize(24);
  std::memcpy(rp.buffers[t].init.data(), vb.data(), 24);
  gp::OpDef op;
  op.name = "head.gather";
  op.kernel = 0;
  auto buf = [](int32_t b, const char *n) {
    gp::ArgDef a;
    a.buffer = b;
    a.name = n;
    return a;
  };
  auto i32 = [](int64_t v, const char *n) {
    gp::ArgDef a;
    a.kind = gp::ArgKind::I32;
    a.i = v;
    a.name = n;
    return a;
  };
  op.args = {buf(g, "g"),          buf(t, "vb"),    i32(1, "B"),
             i32(100, "maxCount"), buf(out, "out"), i32(150, "V")};
  rp.graphs.push_back({gp::GraphKind::Decode, 1, {op}});
  return p;
}

TEST(LaunchBoundsTables, SliceBoundPastTheVocabIsRefused) {
  EXPECT_NO_THROW(exec::checkLaunchBounds(*vocabGatherPlan({0, 100, 150})));
  try {
    exec::checkLaunchBounds(*vocabGatherPlan({0, 100, 151}));
    ADD_FAILURE() << "accepted a slice past the vocabulary";
  } catch (const Error &x) {
    const std::string m = x.what();
    for (const char *part :
         {"plan rank 0, graph decode.1, op 'head.gather' (kernel "
          "glm_vocab_gather_t128): argument 1 'vb' entry 2 of table buffer 1 "
          "'table.vb' (the end of slice 1) is 151, past the vocabulary of 150",
          "re-plan with this glmc"})
      EXPECT_NE(m.find(part), std::string::npos) << m;
  }
}

} // namespace
