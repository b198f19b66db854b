//===- tcp_comm.cpp - the control plane: ranks joined over TCP ------------===//
#include "runtime/dist/tcp_comm.h"

#include "runtime/base/error.h"
#include "runtime/base/numbers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace glm::rt::dist {
namespace {

// Wire format: a 24-byte header {type, aux, the sender's step, length} in
// host byte order (all ranks of a plan run the same build on the same
// architecture), then the payload.
enum MsgType : uint32_t {
  kHello = 1,     // peer -> 0: rank, world, hash, pid, label, host
  kWelcome = 2,   // 0 -> peer: pids and hosts of every rank
  kRefuse = 3,    // 0 -> peer: why it may not join (a sentence)
  kAbort = 4,     // any: the run stops (a sentence naming the culprit)
  kHeartbeat = 5,
  kData = 6,      // aux: collective number
  kBye = 7,       // the sender finished cleanly
};
struct Header {
  uint32_t type, aux;
  int64_t step;
  uint64_t len;
};
constexpr uint64_t kMaxPayload = 1ull << 36;

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
int64_t secondsToNs(double s) { return (int64_t)(s * 1e9); }

std::string hostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0)
    return "?";
  return buf;
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// Reads exactly n bytes before `deadlineNs`; false on EOF/error/timeout.
bool readFull(int fd, void *buf, size_t n, int64_t deadlineNs) {
  char *p = (char *)buf;
  while (n > 0) {
    int64_t left = deadlineNs - nowNs();
    if (left <= 0)
      return false;
    pollfd pfd{fd, POLLIN, 0};
    int pr = poll(&pfd, 1, (int)std::min<int64_t>(left / 1000000 + 1, 200));
    if (pr < 0 && errno != EINTR)
      return false;
    if (pr <= 0)
      continue;
    ssize_t got = recv(fd, p, n, 0);
    if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
      return false;
    if (got > 0) {
      p += got;
      n -= (size_t)got;
    }
  }
  return true;
}

/// Writes all bytes; gives up (false) when no byte moves for `stallNs` or
/// `abandon()` says so. With `skipIfFull` nothing is written (false) when
/// the socket cannot take the first byte right now.
/// How a write ended: a peer that died shows up here as a reset or broken
/// pipe, often before its reader sees the end of the stream, and must be named
/// as such rather than as a stall.
enum class WriteEnd { Sent, Closed, Stalled };

constexpr const char *kConnectionClosed =
    ": its connection closed (the process exited or was killed); exiting";

template <class Abandon>
WriteEnd writeFull(int fd, const char *p, size_t n, int64_t stallNs,
                   bool skipIfFull, Abandon abandon) {
  int64_t last = nowNs();
  bool started = false;
  while (n > 0) {
    ssize_t put = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (put > 0) {
      p += put;
      n -= (size_t)put;
      last = nowNs();
      started = true;
      continue;
    }
    if (put < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return WriteEnd::Closed;
    if (!started && skipIfFull)
      return WriteEnd::Stalled;
    if (nowNs() - last > stallNs || abandon())
      return WriteEnd::Stalled;
    pollfd pfd{fd, POLLOUT, 0};
    poll(&pfd, 1, 100);
  }
  return WriteEnd::Sent;
}

std::vector<char> frame(uint32_t type, uint32_t aux, const void *data,
                        size_t len, int64_t step = -1) {
  std::vector<char> buf(sizeof(Header) + len);
  Header h{type, aux, step, (uint64_t)len};
  std::memcpy(buf.data(), &h, sizeof h);
  if (len)
    std::memcpy(buf.data() + sizeof h, data, len);
  return buf;
}

/// Handshake-time send (before the threads run).
bool sendFrame(int fd, uint32_t type, const std::string &payload,
               double timeout) {
  std::vector<char> f = frame(type, 0, payload.data(), payload.size());
  return writeFull(fd, f.data(), f.size(), secondsToNs(timeout), false,
                   [] { return false; }) == WriteEnd::Sent;
}

bool readFrame(int fd, Header &h, std::string &payload, int64_t deadlineNs) {
  if (!readFull(fd, &h, sizeof h, deadlineNs) || h.len > (1u << 20))
    return false;
  payload.assign(h.len, '\0');
  return readFull(fd, payload.data(), h.len, deadlineNs);
}

// Little writers/readers for the handshake payloads.
template <class T> void put(std::string &s, T v) {
  s.append((const char *)&v, sizeof v);
}
void putStr(std::string &s, const std::string &v) {
  put<uint32_t>(s, (uint32_t)v.size());
  s += v;
}
struct Reader {
  const std::string &s;
  size_t at = 0;
  bool ok = true;
  template <class T> T get() {
    T v{};
    if (at + sizeof v > s.size()) {
      ok = false;
      return v;
    }
    std::memcpy(&v, s.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string str() {
    uint32_t n = get<uint32_t>();
    if (!ok || at + n > s.size()) {
      ok = false;
      return "";
    }
    std::string v = s.substr(at, n);
    at += n;
    return v;
  }
};

addrinfo *resolve(const std::string &host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo *res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                       &res);
  check(rc == 0 && res, "cannot resolve the coordinator host \"", host,
        "\": ", gai_strerror(rc), "; give --coordinator HOST:PORT with a "
        "name or address every rank can reach");
  return res;
}

} // namespace

void parseHostPort(const std::string &s, std::string &host, int &port,
                   const char *what, bool allowZero) {
  size_t colon = s.rfind(':');
  check(colon != std::string::npos && colon > 0 && colon + 1 < s.size(),
        what, " \"", s, "\": expected HOST:PORT, e.g. 10.0.0.1:29400");
  host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  port = (int)parseIntIn(s.substr(colon + 1), allowZero ? 0 : 1, 65535,
                         std::string(what) + " \"" + s + "\": the port");
}

int listenLoopback(int &port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  check(fd >= 0, "cannot create a socket: ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  socklen_t len = sizeof a;
  if (bind(fd, (sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0 ||
      getsockname(fd, (sockaddr *)&a, &len) != 0) {
    int e = errno;
    close(fd);
    fail("cannot listen on 127.0.0.1:", port, ": ", std::strerror(e),
         port ? "; choose another --port (or none: a free one)" : "");
  }
  port = ntohs(a.sin_port);
  return fd;
}

TcpHostComm::TcpHostComm(const TcpConfig &c)
    : rank_(c.rank), world_(c.world), cfg_(c), peers_(c.world) {
  peers_[rank_].pid = getpid();
  peers_[rank_].host = hostName();
}

std::unique_ptr<TcpHostComm> TcpHostComm::join(const TcpConfig &c) {
  check(c.world >= 1 && c.world <= 1024, "--world ", c.world,
        " is not in 1..1024");
  check(c.rank >= 0 && c.rank < c.world, "--rank ", c.rank,
        " is not in 0..", c.world - 1, " (--world ", c.world, ")");
  check(c.timeout > 0, "--rank-timeout must be > 0 seconds");
  std::unique_ptr<TcpHostComm> comm(new TcpHostComm(c));
  if (c.world > 1) {
    if (c.rank == 0)
      comm->joinAsRoot();
    else
      comm->joinAsPeer();
    comm->startThreads();
  }
  return comm;
}

void TcpHostComm::joinAsRoot() {
  std::string host;
  int port = 0;
  parseHostPort(cfg_.coordinator, host, port, "--coordinator",
                /*allowZero=*/cfg_.listenFd < 0);
  int lfd = -1;
  if (cfg_.listenFd >= 0) {
    // launch's socket: it must be listening on the coordinator's port.
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    int accepting = 0;
    socklen_t alen = sizeof accepting;
    const bool ok =
        getsockname(cfg_.listenFd, (sockaddr *)&a, &len) == 0 &&
        getsockopt(cfg_.listenFd, SOL_SOCKET, SO_ACCEPTCONN, &accepting,
                   &alen) == 0 &&
        accepting &&
        (a.ss_family == AF_INET
             ? ntohs(((sockaddr_in *)&a)->sin_port)
             : ntohs(((sockaddr_in6 *)&a)->sin6_port)) == port;
    check(ok, "rank 0: ", kCoordinatorFdEnv, "=", cfg_.listenFd,
          " is not a socket listening on ", cfg_.coordinator,
          " (it is set by `glm-engine launch` for the rank 0 it starts; "
          "unset it when starting a rank by hand)");
    lfd = cfg_.listenFd;
  } else {
    addrinfo *res = resolve(host, port, true);
    std::string bindErr;
    for (addrinfo *a = res; a && lfd < 0; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC,
                      a->ai_protocol);
      if (fd < 0)
        continue;
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
        lfd = fd;
      } else {
        bindErr = std::strerror(errno);
        close(fd);
      }
    }
    freeaddrinfo(res);
    check(lfd >= 0, "rank 0 cannot listen on ", cfg_.coordinator, ": ",
          bindErr, "; choose a free port of this host in --coordinator");
    if (port == 0) {
      // The system's choice: the other ranks need it, so say it.
      sockaddr_storage a{};
      socklen_t len = sizeof a;
      check(getsockname(lfd, (sockaddr *)&a, &len) == 0,
            "rank 0: cannot read the port it listens on: ",
            std::strerror(errno));
      port = a.ss_family == AF_INET ? ntohs(((sockaddr_in *)&a)->sin_port)
                                    : ntohs(((sockaddr_in6 *)&a)->sin6_port);
      const bool v6 = host.find(':') != std::string::npos;
      cfg_.coordinator =
          (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
      std::fprintf(stderr,
                   "glm-engine rank 0: coordinator listening on %s (start "
                   "the other ranks with --coordinator %s)\n",
                   cfg_.coordinator.c_str(), cfg_.coordinator.c_str());
      std::fflush(stderr);
    }
  }

  std::vector<int> joined; // ranks
  auto refuseAll = [&](const std::string &msg) {
    for (int r : joined)
      sendFrame(peers_[r].fd, kAbort, msg, 2);
    close(lfd);
    fail(msg, "; exiting");
  };
  const int64_t deadline = nowNs() + secondsToNs(cfg_.joinTimeout);
  while ((int)joined.size() < world_ - 1) {
    if (nowNs() > deadline) {
      std::ostringstream missing;
      for (int r = 1; r < world_; ++r)
        if (peers_[r].fd < 0)
          missing << (missing.tellp() ? ", " : "") << r;
      refuseAll("rank 0: only " + std::to_string(joined.size() + 1) +
                " of " + std::to_string(world_) + " ranks joined at " +
                cfg_.coordinator + " within " +
                std::to_string((int)cfg_.joinTimeout) +
                " s (missing: rank " + missing.str() +
                "); start every rank with --world " +
                std::to_string(world_) + " --coordinator " +
                cfg_.coordinator);
    }
    pollfd pfd{lfd, POLLIN, 0};
    if (poll(&pfd, 1, 200) <= 0)
      continue;
    int fd = accept(lfd, nullptr, nullptr);
    if (fd < 0)
      continue;
    setNoDelay(fd);
    Header h{};
    std::string pl;
    if (!readFrame(fd, h, pl, nowNs() + secondsToNs(10)) || h.type != kHello) {
      close(fd); // not a rank (a port scan, a stale client): ignore it
      continue;
    }
    Reader rd{pl};
    int r = rd.get<int32_t>(), w = rd.get<int32_t>();
    uint64_t hash = rd.get<uint64_t>();
    int64_t pid = rd.get<int64_t>();
    std::string label = rd.str(), phost = rd.str();
    if (!rd.ok) {
      close(fd);
      continue;
    }
    std::string who = "rank " + std::to_string(r) + " (pid " +
                      std::to_string(pid) + " on " + phost + ")";
    std::string why;
    if (w != world_)
      why = who + " was started with --world " + std::to_string(w) +
            " but rank 0 with --world " + std::to_string(world_) +
            "; start every rank with the same --world";
    else if (r <= 0 || r >= world_)
      why = who + " has a rank outside 1.." + std::to_string(world_ - 1);
    else if (peers_[r].fd >= 0)
      why = who + " joined, but rank " + std::to_string(r) +
            " already had (pid " + std::to_string(peers_[r].pid) +
            "); give every process its own --rank";
    else if (hash != cfg_.planHash)
      why = who + " runs " + label + " but rank 0 runs " + cfg_.planLabel +
            "; every rank needs the same PLAN, pack, --manifest and "
            "--backend";
    if (!why.empty()) {
      sendFrame(fd, kRefuse, why, 2);
      close(fd);
      refuseAll(why);
    }
    peers_[r].fd = fd;
    peers_[r].pid = pid;
    peers_[r].host = phost;
    joined.push_back(r);
  }
  close(lfd);
  std::string welcome;
  for (int r = 0; r < world_; ++r) {
    put<int64_t>(welcome, peers_[r].pid);
    putStr(welcome, peers_[r].host);
  }
  for (int r : joined)
    check(sendFrame(peers_[r].fd, kWelcome, welcome, cfg_.timeout),
          "rank 0: ", describe(r), " went away while the ranks joined");
}

void TcpHostComm::joinAsPeer() {
  std::string host;
  int port = 0;
  parseHostPort(cfg_.coordinator, host, port, "--coordinator", true);
  check(port != 0, "rank ", rank_, ": --coordinator ", cfg_.coordinator,
        " has port 0, which only rank 0 may take (it then prints the port "
        "it listens on); give the other ranks that port");
  const int64_t deadline = nowNs() + secondsToNs(cfg_.joinTimeout);
  std::string lastErr = "no attempt";
  int fd = -1;
  while (fd < 0) {
    check(nowNs() < deadline, "rank ", rank_, ": cannot reach rank 0 at ",
          cfg_.coordinator, " within ", (int)cfg_.joinTimeout, " s (",
          lastErr, "); start rank 0 with --coordinator ", cfg_.coordinator);
    addrinfo *res = resolve(host, port, false);
    for (addrinfo *a = res; a && fd < 0; a = a->ai_next) {
      int s = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (s < 0)
        continue;
      // Nonblocking connect so an unreachable host cannot hang us.
      fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
      int rc = connect(s, a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd pfd{s, POLLOUT, 0};
        int err = ETIMEDOUT;
        socklen_t el = sizeof err;
        if (poll(&pfd, 1, 1000) > 0)
          getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc == 0) {
        fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK);
        fd = s;
      } else {
        lastErr = std::strerror(errno);
        close(s);
      }
    }
    freeaddrinfo(res);
    if (fd < 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  setNoDelay(fd);
  peers_[0].fd = fd;
  std::string hello;
  put<int32_t>(hello, rank_);
  put<int32_t>(hello, world_);
  put<uint64_t>(hello, cfg_.planHash);
  put<int64_t>(hello, peers_[rank_].pid);
  putStr(hello, cfg_.planLabel);
  putStr(hello, peers_[rank_].host);
  check(sendFrame(fd, kHello, hello, cfg_.timeout), "rank ", rank_,
        ": rank 0 at ", cfg_.coordinator, " closed the connection");
  Header h{};
  std::string pl;
  check(readFrame(fd, h, pl, deadline), "rank ", rank_,
        ": rank 0 at ", cfg_.coordinator,
        " closed the connection or did not complete the join within ",
        (int)cfg_.joinTimeout, " s; exiting");
  if (h.type == kRefuse || h.type == kAbort)
    fail(pl, "; exiting");
  check(h.type == kWelcome, "rank ", rank_, ": unexpected reply from ",
        cfg_.coordinator, " (is it a glm-engine rank 0?)");
  Reader rd{pl};
  for (int r = 0; r < world_; ++r) {
    int64_t pid = rd.get<int64_t>();
    std::string hst = rd.str();
    if (r != rank_) {
      peers_[r].pid = pid;
      peers_[r].host = hst;
    }
  }
  check(rd.ok, "rank ", rank_, ": malformed welcome from rank 0");
}

void TcpHostComm::startThreads() {
  for (int r = 0; r < world_; ++r)
    multiHost_ |= peers_[r].host != peers_[rank_].host;
  int64_t now = nowNs();
  for (int r : activePeers()) {
    peers_[r].lastSeenNs = now;
    peers_[r].reader = std::thread([this, r] { readerLoop(r); });
  }
  heartbeat_ = std::thread([this] { heartbeatLoop(); });
}

std::vector<int> TcpHostComm::activePeers() const {
  std::vector<int> out;
  for (int r = 0; r < world_; ++r)
    if (r != rank_ && peers_[r].fd >= 0)
      out.push_back(r);
  return out;
}

std::string TcpHostComm::describe(int r) const {
  std::string s = "rank " + std::to_string(r) + " (pid " +
                  std::to_string(peers_[r].pid);
  if (multiHost_)
    s += " on " + peers_[r].host;
  return s + ")";
}

std::string TcpHostComm::stepText(int64_t step) const {
  return step < 0 ? "startup (before its first step)"
                  : "step " + std::to_string(step);
}

void TcpHostComm::readerLoop(int r) {
  Peer &p = peers_[r];
  std::vector<char> buf;
  size_t have = 0;
  while (!stop_) {
    pollfd pfd{p.fd, POLLIN, 0};
    int pr = poll(&pfd, 1, 100);
    if (pr <= 0)
      continue;
    if (buf.size() - have < 65536)
      buf.resize(std::max<size_t>(buf.size() * 2, have + 65536));
    ssize_t got = recv(p.fd, buf.data() + have, buf.size() - have, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (got <= 0) {
      if (!p.left && !stop_)
        failWith(describe(r) + " stopped responding during " +
                     stepText(p.step) +
                     kConnectionClosed,
                 r);
      return;
    }
    have += (size_t)got;
    p.lastSeenNs = nowNs();
    size_t at = 0;
    while (have - at >= sizeof(Header)) {
      Header h;
      std::memcpy(&h, buf.data() + at, sizeof h);
      if (h.len > kMaxPayload) {
        failWith(describe(r) + " sent a malformed message; exiting", r);
        return;
      }
      if (have - at < sizeof h + h.len)
        break;
      const char *pl = buf.data() + at + sizeof h;
      p.step = h.step;
      switch (h.type) {
      case kHeartbeat:
        break;
      case kData: {
        std::lock_guard<std::mutex> lk(mu_);
        p.inbox.emplace_back(h.aux, std::vector<char>(pl, pl + h.len));
        cv_.notify_all();
        break;
      }
      case kBye: {
        std::lock_guard<std::mutex> lk(mu_);
        p.left = true;
        cv_.notify_all();
        break;
      }
      case kAbort:
        failWith(std::string(pl, h.len), r);
        break;
      default:
        break;
      }
      at += sizeof h + h.len;
    }
    std::memmove(buf.data(), buf.data() + at, have - at);
    have -= at;
  }
}

void TcpHostComm::heartbeatLoop() {
  const int64_t timeoutNs = secondsToNs(cfg_.timeout);
  const auto interval = std::chrono::milliseconds(
      std::clamp<int64_t>((int64_t)(cfg_.timeout * 100), 20, 1000));
  while (!stop_) {
    for (int r : activePeers())
      if (!peers_[r].left)
        trySendMsg(r, kHeartbeat, 0, nullptr, 0);
    if (!failing_) {
      int64_t now = nowNs();
      for (int r : activePeers()) {
        Peer &p = peers_[r];
        if (!p.left && now - p.lastSeenNs > timeoutNs) {
          std::ostringstream os;
          os << describe(r) << " stopped responding during "
             << stepText(p.step) << ": nothing heard from it for "
             << cfg_.timeout << " s (--rank-timeout); exiting";
          failWith(os.str(), r);
          break;
        }
      }
    }
    // Short naps so that the destructor's join does not wait a whole beat.
    for (auto slept = std::chrono::milliseconds(0); slept < interval && !stop_;
         slept += std::chrono::milliseconds(20))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool TcpHostComm::trySendMsg(int r, uint32_t type, uint32_t aux,
                             const void *data, size_t len) {
  Peer &p = peers_[r];
  std::unique_lock<std::timed_mutex> lk(p.writeMu, std::defer_lock);
  if (!lk.try_lock_for(std::chrono::milliseconds(200)))
    return false;
  std::vector<char> f = frame(type, aux, data, len, step_);
  return writeFull(p.fd, f.data(), f.size(), secondsToNs(cfg_.timeout),
                   type == kHeartbeat, [] { return false; }) == WriteEnd::Sent;
}

void TcpHostComm::sendMsg(int r, uint32_t type, uint32_t aux,
                          const void *data, size_t len) {
  Peer &p = peers_[r];
  std::unique_lock<std::timed_mutex> lk(p.writeMu);
  std::vector<char> f = frame(type, aux, data, len, step_);
  WriteEnd end = writeFull(p.fd, f.data(), f.size(),
                           secondsToNs(cfg_.timeout), false,
                           [this] { return failing_.load(); });
  lk.unlock();
  if (end != WriteEnd::Sent && !failing_) {
    std::ostringstream os;
    os << describe(r) << " stopped responding during " << stepText(p.step);
    if (end == WriteEnd::Closed)
      os << kConnectionClosed;
    else
      os << ": it took no data for " << cfg_.timeout
         << " s (--rank-timeout); exiting";
    failWith(os.str(), r);
  }
  if (end != WriteEnd::Sent)
    throwError();
}

void TcpHostComm::failWith(const std::string &message, int culprit) {
  if (failing_.exchange(true))
    return;
  // Tell the others before waking our own caller, so the message is on its
  // way before this process can exit.
  for (int r : activePeers())
    if (r != culprit && !peers_[r].left)
      trySendMsg(r, kAbort, 0, message.data(), message.size());
  std::lock_guard<std::mutex> lk(mu_);
  error_ = message;
  cv_.notify_all();
}

void TcpHostComm::throwError() {
  // failWith sets the message right after telling the peers.
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, std::chrono::seconds(5), [&] { return !error_.empty(); });
  throw Error(error_.empty() ? "the ranks stopped" : error_);
}

std::string TcpHostComm::healthError() {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

void TcpHostComm::checkHealthy() {
  if (failing_)
    throwError();
}

std::vector<char> TcpHostComm::waitData(int r, const char *what) {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    if (!error_.empty())
      throw Error(error_);
    Peer &p = peers_[r];
    if (!p.inbox.empty()) {
      auto [seq, data] = std::move(p.inbox.front());
      p.inbox.pop_front();
      if (seq != seq_) {
        lk.unlock();
        failWith(describe(r) + " is at collective #" + std::to_string(seq) +
                     ", rank " + std::to_string(rank_) + " at #" +
                     std::to_string(seq_) +
                     " (the ranks run different inputs); exiting",
                 -1);
        throwError();
      }
      return data;
    }
    if (p.left) {
      lk.unlock();
      failWith(describe(r) + " finished while rank " +
                   std::to_string(rank_) + " waited for it in " + what +
                   " (the ranks run different inputs); exiting",
               -1);
      throwError();
    }
    cv_.wait_for(lk, std::chrono::milliseconds(100));
  }
}

void TcpHostComm::allGather(const void *send, void *recv, size_t bytes) {
  checkHealthy();
  char *out = (char *)recv;
  if (bytes)
    std::memcpy(out + (size_t)rank_ * bytes, send, bytes);
  if (world_ == 1)
    return;
  auto wrongSize = [&](int r, size_t got, size_t want) {
    failWith(describe(r) + " sent " + std::to_string(got) +
                 " bytes for collective #" + std::to_string(seq_) +
                 ", rank " + std::to_string(rank_) + " expected " +
                 std::to_string(want) +
                 " (the ranks run different inputs); exiting",
             -1);
    throwError();
  };
  if (rank_ == 0) {
    for (int r = 1; r < world_; ++r) {
      std::vector<char> d = waitData(r, "a collective");
      if (d.size() != bytes)
        wrongSize(r, d.size(), bytes);
      if (bytes)
        std::memcpy(out + (size_t)r * bytes, d.data(), bytes);
    }
    for (int r = 1; r < world_; ++r)
      sendMsg(r, kData, seq_, out, bytes * world_);
  } else {
    sendMsg(0, kData, seq_, send, bytes);
    std::vector<char> d = waitData(0, "a collective");
    if (d.size() != bytes * world_)
      wrongSize(0, d.size(), bytes * world_);
    if (bytes)
      std::memcpy(out, d.data(), d.size());
  }
  ++seq_;
}

void TcpHostComm::barrier() { allGather(nullptr, nullptr, 0); }

void TcpHostComm::abort(const std::string &message) {
  if (world_ > 1)
    failWith(message, -1);
}

void TcpHostComm::finish() {
  if (finished_.exchange(true) || world_ == 1)
    return;
  if (!failing_)
    for (int r : activePeers())
      trySendMsg(r, kBye, 0, nullptr, 0);
}

TcpHostComm::~TcpHostComm() {
  if (world_ > 1 && !finished_ && !failing_)
    abort(describe(rank_) + " stopped during " + stepText(step_) +
          " without finishing; exiting");
  stop_ = true;
  if (heartbeat_.joinable())
    heartbeat_.join();
  for (Peer &p : peers_) {
    if (p.reader.joinable())
      p.reader.join();
    if (p.fd >= 0) {
      shutdown(p.fd, SHUT_WR);
      close(p.fd);
    }
  }
}

} // namespace glm::rt::dist
