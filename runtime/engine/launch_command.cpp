//===- launch_command.cpp - `glm-engine launch`: the ranks of one host ----===//
//
// Starts N processes of this binary, `run ... --rank r --world N
// --coordinator 127.0.0.1:PORT` (plus --device for the cuda backend),
// forwards rank 0's stdout and stderr, prefixes the other ranks' stderr with
// "[rank r] " and discards their stdout. When a rank fails, the others
// notice through the control plane and exit on their own; whatever is still
// running after --grace seconds is killed, and launch fails with one line
// naming the first rank that failed and how. Ranks die with launch
// (PR_SET_PDEATHSIG), so no rank outlives it.
//
//===----------------------------------------------------------------------===//
#include "runtime/engine/commands.h"

#include "runtime/base/error.h"
#include "runtime/base/cli_numbers.h"
#include "runtime/dist/tcp_comm.h"
#include "runtime/engine/setup.h"

#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <sstream>
#include <vector>

namespace glm::rt {
namespace {

struct LaunchOptions {
  int sparks = 0;
  std::string devices;
  double grace = 5;
  int port = 0;
};

volatile sig_atomic_t gInterrupted = 0;
void onSignal(int sig) { gInterrupted = sig; }

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int errFd = -1;       // stderr pipe
  std::string partial;  // an unfinished stderr line
  std::string lastLine; // the last complete one (its error message)
  bool running = true;
  int status = 0;
};

std::string describeStatus(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" +
           strsignal(sig) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

bool failed(int status) {
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

std::string selfExe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  check(n > 0, "launch: cannot find this executable (/proc/self/exe): ",
        std::strerror(errno));
  return std::string(buf, n);
}

/// The value of `--name V` or `--name=V` among the forwarded arguments.
std::string findOption(const std::vector<std::string> &args,
                       const std::string &name, const std::string &dflt) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == name && i + 1 < args.size())
      return args[i + 1];
    if (args[i].rfind(name + "=", 0) == 0)
      return args[i].substr(name.size() + 1);
  }
  return dflt;
}

std::vector<int> parseDevices(const std::string &s, int n) {
  std::vector<int> out;
  if (s.empty()) {
    for (int r = 0; r < n; ++r)
      out.push_back(r);
    return out;
  }
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::optional<int64_t> v = parseInt64(item);
    check(v && *v >= 0 && *v <= 1023, "--devices \"", s,
          "\": expected comma-separated GPU ordinals in 0..1023, e.g. "
          "0,1,2,3");
    out.push_back((int)*v);
  }
  check((int)out.size() == n, "--devices lists ", out.size(),
        " GPUs for --sparks ", n, "; give one per rank");
  return out;
}

/// Forwards complete stderr lines ("[rank r] " before ranks > 0; rank 0's
/// bytes pass as they come, so its progress bar still redraws in place).
void forward(Child &c, const char *data, size_t len, bool eof) {
  if (c.rank == 0)
    fwrite(data, 1, len, stderr);
  c.partial.append(data, len);
  size_t at = 0, nl;
  while ((nl = c.partial.find('\n', at)) != std::string::npos) {
    if (c.rank > 0)
      std::fprintf(stderr, "[rank %d] %.*s\n", c.rank, (int)(nl - at),
                   c.partial.data() + at);
    if (nl > at)
      c.lastLine = c.partial.substr(at, nl - at);
    at = nl + 1;
  }
  c.partial.erase(0, at);
  if (eof && !c.partial.empty()) {
    if (c.rank > 0)
      std::fprintf(stderr, "[rank %d] %s\n", c.rank, c.partial.c_str());
    c.lastLine = c.partial;
    c.partial.clear();
  }
  std::fflush(stderr);
}

/// Takes launch's own options given after PLAN (`--grace`, `--devices`;
/// `--port` too unless the ranks serve, where it is the HTTP port) out of
/// the ranks' arguments into `o`: the command line is parsed as a prefix
/// command, so everything from PLAN on arrives here.
void takeLaunchOptions(std::vector<std::string> &fwd, LaunchOptions &o,
                       bool serve) {
  for (size_t i = 0; i < fwd.size();) {
    std::string name = fwd[i], value;
    const size_t eq = name.find('=');
    const bool joined = name.rfind("--", 0) == 0 && eq != std::string::npos;
    if (joined) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const bool ours = name == "--grace" || name == "--devices" ||
                      (name == "--port" && !serve);
    if (!ours) {
      ++i;
      continue;
    }
    size_t used = 1;
    if (!joined) {
      check(i + 1 < fwd.size(), "launch: ", name, " needs a value");
      value = fwd[i + 1];
      used = 2;
    }
    if (name == "--grace")
      o.grace = parseNumberIn(value, 0, 3600, "launch --grace");
    else if (name == "--devices")
      o.devices = value;
    else
      o.port = int(parseIntIn(value, 1, 65535, "launch --port"));
    fwd.erase(fwd.begin() + long(i), fwd.begin() + long(i + used));
  }
}

int launch(LaunchOptions o, std::vector<std::string> fwd) {
  const int n = o.sparks;
  // What each rank runs: `run` (the default) or `serve` (rank 0 answers
  // HTTP, the others follow its requests).
  std::string command = "run";
  if (!fwd.empty() && (fwd[0] == "run" || fwd[0] == "serve")) {
    command = fwd[0];
    fwd.erase(fwd.begin());
  }
  takeLaunchOptions(fwd, o, command == "serve");
  for (const char *own : {"--rank", "--world", "--coordinator", "--device",
                          "--sparks"})
    check(findOption(fwd, own, "\x01") == "\x01", "launch sets ", own,
          " for each rank itself; leave it out (--sparks N is launch's)");
  // PLAN is the first positional argument forwarded to the ranks.
  std::string plan;
  for (size_t i = 0; i < fwd.size(); ++i) {
    if (fwd[i] == "-" || fwd[i].rfind("-", 0) != 0) {
      plan = fwd[i];
      break;
    }
    if (fwd[i].find('=') == std::string::npos && i + 1 < fwd.size() &&
        fwd[i] != "--greedy")
      ++i; // an option's value
  }
  const std::string backend =
      effectiveBackend(findOption(fwd, "--backend", ""), plan);
  std::vector<int> devices;
  if (backend == "cuda")
    devices = parseDevices(o.devices, n);
  else
    check(o.devices.empty(), "--devices needs --backend cuda");
  if (backend == "reference") {
    // Every rank holds its own fp32 copy: check all n of them before any
    // starts (ranks checking one by one could each fit and together not).
    // A pack this cannot open is left to the ranks to report.
    std::unique_ptr<Pack> pack;
    try {
      PackOpenOptions po;
      po.manifest = findOption(fwd, "--manifest", "");
      pack = Pack::open(findOption(fwd, "--pack", ""), po);
      if (!pack->config())
        pack.reset();
      else
        pack->weights(); // throws when the manifest choice is the plan's
    } catch (const Error &) {
      pack.reset();
    }
    if (pack)
      checkCpuBackendMemory(*pack, n);
  }
  const std::string exe = selfExe();
  // launch listens for rank 0 and hands it the socket: a port picked,
  // released and passed on could be taken by another socket in between.
  int port = o.port;
  const int listenFd = dist::listenLoopback(port);
  const std::string coord = "127.0.0.1:" + std::to_string(port);

  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t self = getpid();
  std::vector<Child> kids(n);
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> args = {exe, command};
    args.insert(args.end(), fwd.begin(), fwd.end());
    for (const std::string &a :
         {std::string("--sparks"), std::to_string(n), std::string("--rank"),
          std::to_string(r), std::string("--world"), std::to_string(n),
          std::string("--coordinator"), coord})
      args.push_back(a);
    if (!devices.empty()) {
      args.push_back("--device");
      args.push_back(std::to_string(devices[r]));
    }
    int pipeFds[2] = {-1, -1};
    check(pipe2(pipeFds, O_CLOEXEC) == 0, "launch: pipe: ",
          std::strerror(errno));
    pid_t pid = fork();
    check(pid >= 0, "launch: fork: ", std::strerror(errno));
    if (pid == 0) {
      // The rank dies with launch, whatever kills launch.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != self)
        _exit(1);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      if (r > 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
      }
      dup2(pipeFds[1], 2);
      if (r == 0) {
        const int fd = dup(listenFd); // without close-on-exec
        setenv(dist::kCoordinatorFdEnv, std::to_string(fd).c_str(), 1);
      } else {
        unsetenv(dist::kCoordinatorFdEnv);
      }
      // NVLink multicast stays off (it is unavailable on the hosts we run).
      setenv("NCCL_NVLS_ENABLE", "0", 1);
      std::vector<char *> argv;
      for (std::string &a : args)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(exe.c_str(), argv.data());
      std::fprintf(stderr, "glm-engine launch: cannot run %s: %s\n",
                   exe.c_str(), std::strerror(errno));
      _exit(127);
    }
    kids[r].rank = r;
    kids[r].pid = pid;
    close(pipeFds[1]);
    kids[r].errFd = pipeFds[0];
  }
  close(listenFd); // rank 0 holds it now

  using Clock = std::chrono::steady_clock;
  int firstFailed = -1;
  std::string why;
  Clock::time_point killAt = Clock::time_point::max();
  bool serveStopping = false;
  auto running = [&] {
    for (const Child &c : kids)
      if (c.running || c.errFd >= 0)
        return true;
    return false;
  };
  while (running()) {
    std::vector<pollfd> pfds;
    for (const Child &c : kids)
      if (c.errFd >= 0)
        pfds.push_back({c.errFd, POLLIN, 0});
    if (pfds.empty())
      usleep(20000);
    else
      poll(pfds.data(), pfds.size(), 20);
    for (Child &c : kids) {
      if (c.errFd < 0)
        continue;
      pollfd p{c.errFd, POLLIN, 0};
      if (poll(&p, 1, 0) <= 0)
        continue;
      char buf[4096];
      ssize_t got = read(c.errFd, buf, sizeof buf);
      if (got > 0) {
        forward(c, buf, (size_t)got, false);
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        forward(c, nullptr, 0, true);
        close(c.errFd);
        c.errFd = -1;
      }
    }
    // Reap; of failures seen in one sweep, a rank killed by a signal is the
    // likelier cause (the others exit 1 when they notice it).
    int sweepFailed = -1;
    for (Child &c : kids) {
      if (!c.running)
        continue;
      int st = 0;
      if (waitpid(c.pid, &st, WNOHANG) != c.pid)
        continue;
      c.running = false;
      c.status = st;
      if (failed(st) && firstFailed < 0 &&
          (sweepFailed < 0 ||
           (WIFSIGNALED(st) && !WIFSIGNALED(kids[sweepFailed].status))))
        sweepFailed = c.rank;
    }
    if (sweepFailed >= 0 && firstFailed < 0) {
      firstFailed = sweepFailed;
      why = "rank " + std::to_string(firstFailed) + " (pid " +
            std::to_string(kids[firstFailed].pid) + ") " +
            describeStatus(kids[firstFailed].status);
      killAt = Clock::now() + std::chrono::milliseconds((int64_t)(o.grace *
                                                                  1000));
    }
    if (gInterrupted && why.empty() && command == "serve" &&
        !serveStopping) {
      // A server stops cleanly: rank 0 stops listening and tells the other
      // ranks to end (serve_ranks.h); they get --grace seconds to.
      serveStopping = true;
      if (kids[0].running)
        kill(kids[0].pid, SIGTERM);
      killAt = Clock::now() + std::chrono::milliseconds((int64_t)(o.grace *
                                                                  1000));
    }
    if (gInterrupted && why.empty() && !serveStopping) {
      why = std::string("interrupted by ") + strsignal(gInterrupted);
      for (Child &c : kids)
        if (c.running)
          kill(c.pid, SIGTERM);
      killAt = Clock::now() + std::chrono::milliseconds((int64_t)(o.grace *
                                                                  1000));
    }
    if (Clock::now() >= killAt) {
      for (Child &c : kids)
        if (c.running)
          kill(c.pid, SIGKILL);
      killAt = Clock::time_point::max();
    }
  }
  std::fflush(stderr);
  if (!why.empty()) {
    // A rank that exited with an error said why (often: which peer died).
    const std::string prefix = "glm-engine: error: ";
    std::string reason;
    if (firstFailed >= 0) {
      const std::string &last = kids[firstFailed].lastLine;
      if (WIFEXITED(kids[firstFailed].status) && last.rfind(prefix, 0) == 0)
        reason = "; its error: " + last.substr(prefix.size());
    }
    int others = 0;
    for (const Child &c : kids)
      others += c.rank != firstFailed && failed(c.status);
    fail("launch: ", why, " (", n, " ranks, coordinator ", coord, ")",
         others ? "; the other ranks were stopped" : "", reason);
  }
  return 0;
}

} // namespace

int launchRanks(int sparks, const std::string &devices,
                std::vector<std::string> rankArgs) {
  LaunchOptions o;
  o.sparks = sparks;
  o.devices = devices;
  return launch(o, std::move(rankArgs));
}

void addLaunchCommand(CLI::App &app, int &rc) {
  auto o = std::make_shared<LaunchOptions>();
  CLI::App *sub = app.add_subcommand(
      "launch",
      "Run a plan on N rank processes of this host, one per Spark/GPU");
  sub->footer(
      "Usage: glm-engine launch --sparks N [launch options] PLAN --pack DIR "
      "[run options]\n"
      "       glm-engine launch --sparks N [launch options] serve PLAN --pack "
      "DIR [serve options]  (rank 0 serves HTTP, every rank runs the plan)\n"
      "Every argument launch does not know (PLAN, --pack, --backend, "
      "--tokens, --max-new, --dump-logits, --rank-timeout, ...; see "
      "`glm-engine run --help`) is passed to each rank, which runs\n"
      "  glm-engine run ... --sparks N --rank r --world N "
      "--coordinator 127.0.0.1:PORT [--device d]\n"
      "Rank 0's stdout/stderr are forwarded as they are (it prints the "
      "tokens and writes --dump-logits); the other ranks' stderr lines get a "
      "\"[rank r]\" prefix and their stdout is discarded. With --backend "
      "reference the ranks combine their units in a fixed order, so tokens "
      "and logits equal a 1-rank run's; the plan backends (cpu, cuda) sum the "
      "ranks' partials in rank order (the same greedy tokens, logits within "
      "fp32 rounding).\n"
      "When a rank fails or stops responding (--rank-timeout, default 30 s) "
      "the others exit naming it; launch kills what is left after --grace "
      "seconds and exits 1 naming the first rank that failed.\n"
      "Across hosts, start each rank yourself:\n"
      "  glm-engine run PLAN --pack DIR --rank R --world N "
      "--coordinator HOST0:PORT [--backend cuda --device D]");
  sub->add_option("--sparks", o->sparks,
                  "Number of rank processes to start (the plan's Spark "
                  "count; with PLAN `-` the ranks to split the pack over)")
      ->required()
      ->check(cliInt(1, 64));
  sub->add_option("--devices", o->devices,
                  "--backend cuda: GPU ordinal of each rank, comma-separated "
                  "(default 0,1,...,N-1)");
  sub->add_option("--grace", o->grace,
                  "Seconds the other ranks get to exit on their own after "
                  "one failed, before they are killed")
      ->check(cliNumber(0, 3600))
      ->capture_default_str();
  sub->add_option("--port", o->port,
                  "Coordinator port on 127.0.0.1 (default: a free one)")
      ->check(cliInt(1, 65535));
  sub->allow_extras();
  // Everything from the first positional (PLAN, or `serve`) on is the
  // ranks': `launch --sparks 2 serve PLAN --port 8080` gives serve its port.
  sub->prefix_command();
  sub->callback([o, sub, &rc] {
    std::vector<std::string> fwd = sub->remaining();
    check(!fwd.empty(), "launch: give PLAN --pack DIR and the run options "
          "(see glm-engine launch --help)");
    rc = launch(*o, fwd);
  });
}

} // namespace glm::rt
