//===- http.cpp - a small HTTP/1.1 server on POSIX sockets ----------------===//
//
// The accept loop polls so stop() takes effect within a fraction of a second;
// connection threads are detached and counted, and serve() waits for them.
// Writes use MSG_NOSIGNAL so a vanished client is an error code, not SIGPIPE.
//
//===----------------------------------------------------------------------===//
#include "runtime/serve/http.h"

#include "runtime/base/error.h"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace glm::rt {

std::string HttpRequest::header(const std::string &name) const {
  for (const auto &[k, v] : headers)
    if (k == name)
      return v;
  return "";
}

const char *httpReason(int status) {
  switch (status) {
  case 100:
    return "Continue";
  case 200:
    return "OK";
  case 204:
    return "No Content";
  case 400:
    return "Bad Request";
  case 401:
    return "Unauthorized";
  case 403:
    return "Forbidden";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 408:
    return "Request Timeout";
  case 411:
    return "Length Required";
  case 413:
    return "Payload Too Large";
  case 415:
    return "Unsupported Media Type";
  case 422:
    return "Unprocessable Entity";
  case 429:
    return "Too Many Requests";
  case 431:
    return "Request Header Fields Too Large";
  case 500:
    return "Internal Server Error";
  case 501:
    return "Not Implemented";
  case 503:
    return "Service Unavailable";
  default:
    return "Unknown";
  }
}

bool HttpResponder::writeAll(const std::string &data) {
  if (gone_)
    return false;
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      gone_ = true;
      return false;
    }
    off += size_t(n);
  }
  return true;
}

bool HttpResponder::send(
    int status, const std::string &contentType, const std::string &body,
    const std::vector<std::pair<std::string, std::string>> &extra) {
  started_ = true;
  std::string h =
      "HTTP/1.1 " + std::to_string(status) + " " + httpReason(status) + "\r\n";
  // RFC 9110 15.3.5: a 204 has no content (and so no length or type).
  if (status != 204)
    h += "Content-Type: " + contentType +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  h += std::string("Connection: ") + (keepAlive ? "keep-alive" : "close") +
       "\r\n";
  for (const auto &[k, v] : headers)
    h += k + ": " + v + "\r\n";
  for (const auto &[k, v] : extra)
    h += k + ": " + v + "\r\n";
  return writeAll(h + "\r\n" + (status == 204 ? std::string() : body));
}

bool HttpResponder::beginChunked(int status, const std::string &contentType) {
  started_ = true;
  std::string extra;
  for (const auto &[k, v] : headers)
    extra += k + ": " + v + "\r\n";
  if (http10) {
    // RFC 9112 6.3: without Content-Length or chunking, closing the
    // connection is what ends the body.
    keepAlive = false;
    return writeAll("HTTP/1.1 " + std::to_string(status) + " " +
                    httpReason(status) + "\r\nContent-Type: " + contentType +
                    "\r\nCache-Control: no-cache\r\nConnection: close\r\n" +
                    extra + "\r\n");
  }
  return writeAll("HTTP/1.1 " + std::to_string(status) + " " +
                  httpReason(status) + "\r\nContent-Type: " + contentType +
                  "\r\nCache-Control: no-cache\r\nTransfer-Encoding: "
                  "chunked\r\nConnection: " +
                  (keepAlive ? "keep-alive" : "close") + "\r\n" + extra +
                  "\r\n");
}

bool HttpResponder::writeChunk(const std::string &data) {
  if (data.empty())
    return !clientGone();
  if (http10)
    return writeAll(data);
  char len[32];
  snprintf(len, sizeof len, "%zx\r\n", data.size());
  return writeAll(len + data + "\r\n");
}

bool HttpResponder::endChunked() {
  return http10 || writeAll("0\r\n\r\n"); // HTTP/1.0: the close ends it
}

bool HttpResponder::clientGone() {
  if (gone_)
    return true;
  char c;
  ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 ||
      (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
    gone_ = true;
  return gone_;
}

HttpServer::HttpServer(HttpOptions opt, HttpHandler handler)
    : opt_(std::move(opt)), handler_(std::move(handler)) {}

HttpServer::~HttpServer() {
  if (listenFd_ >= 0)
    close(listenFd_);
}

void HttpServer::listen() {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  std::string port = std::to_string(opt_.port);
  int rc = getaddrinfo(opt_.host.c_str(), port.c_str(), &hints, &res);
  check(rc == 0, "serve: cannot resolve host '", opt_.host,
        "': ", gai_strerror(rc));
  std::string lastErr = "no address";
  for (addrinfo *a = res; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0)
      continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listenFd_ = fd;
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &len);
      port_ = ss.ss_family == AF_INET6
                  ? ntohs(reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_port)
                  : ntohs(reinterpret_cast<sockaddr_in *>(&ss)->sin_port);
      break;
    }
    lastErr = strerror(errno);
    close(fd);
  }
  freeaddrinfo(res);
  check(listenFd_ >= 0, "serve: cannot listen on ", opt_.host, ":", opt_.port,
        " (", lastErr, "); pick another --port or --host");
}

void HttpServer::serve() {
  while (!stop_) {
    pollfd p{listenFd_, POLLIN, 0};
    int r = poll(&p, 1, 200);
    if (r <= 0)
      continue;
    int fd = accept(listenFd_, nullptr, nullptr);
    if (fd < 0)
      continue;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (open_ >= opt_.maxConnections) {
      HttpResponder r(fd);
      r.keepAlive = false;
      r.send(503, "application/json",
             R"({"error": {"message": "too many connections", "type": )"
             R"("server_error", "param": null, "code": null}})");
      close(fd);
      continue;
    }
    ++open_;
    std::thread([this, fd] {
      try {
        handleConnection(fd);
      } catch (...) {
        // A connection never takes the server down.
      }
      close(fd);
      --open_;
    }).detach();
  }
  // Let running requests finish (their clients see the end of stream).
  for (int i = 0; i < 600 && open_ > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

static std::string lower(std::string s) {
  for (auto &c : s)
    c = char(std::tolower(uint8_t(c)));
  return s;
}

static std::string trim(const std::string &s) {
  size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos)
    return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

void HttpServer::handleConnection(int fd) {
  std::string buf;
  auto error = [&](int status, const std::string &msg) {
    HttpResponder r(fd);
    r.keepAlive = false;
    std::string type = status >= 500 ? "server_error" : "invalid_request_error";
    r.send(status, "application/json",
           "{\"error\": {\"message\": \"" + msg + "\", \"type\": \"" + type +
               "\", \"param\": null, \"code\": null}}");
  };
  auto fill = [&]() {
    // Poll in short steps so an idle keep-alive connection notices stop().
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::seconds(opt_.idleTimeoutSec);
    while (true) {
      pollfd p{fd, POLLIN, 0};
      int r = poll(&p, 1, 200);
      if (r > 0)
        break;
      if (r < 0 && errno != EINTR)
        return false;
      if (stop_ || std::chrono::steady_clock::now() > deadline)
        return false;
    }
    char tmp[16384];
    ssize_t n;
    do {
      n = recv(fd, tmp, sizeof tmp, 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0)
      return false;
    buf.append(tmp, size_t(n));
    return true;
  };
  while (!stop_) {
    size_t hdrEnd;
    while ((hdrEnd = buf.find("\r\n\r\n")) == std::string::npos) {
      if (buf.size() > opt_.maxHeaderBytes)
        return error(431, "request headers too large");
      if (!fill())
        return; // closed, timed out or failed between requests
    }
    if (hdrEnd > opt_.maxHeaderBytes)
      return error(431, "request headers too large");
    HttpRequest req;
    std::string head = buf.substr(0, hdrEnd);
    buf.erase(0, hdrEnd + 4);
    size_t lineEnd = head.find("\r\n");
    std::string line = head.substr(0, lineEnd);
    size_t s1 = line.find(' '), s2 = line.rfind(' ');
    if (s1 == std::string::npos || s2 == s1)
      return error(400, "malformed request line");
    req.method = line.substr(0, s1);
    req.target = line.substr(s1 + 1, s2 - s1 - 1);
    req.version = line.substr(s2 + 1);
    if (req.version.rfind("HTTP/1.", 0) != 0)
      return error(400, "unsupported HTTP version");
    req.path = req.target.substr(0, req.target.find('?'));
    size_t pos = lineEnd == std::string::npos ? head.size() : lineEnd + 2;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      if (e == std::string::npos)
        e = head.size();
      std::string h = head.substr(pos, e - pos);
      size_t colon = h.find(':');
      if (colon == std::string::npos)
        return error(400, "malformed header line");
      req.headers.emplace_back(lower(trim(h.substr(0, colon))),
                               trim(h.substr(colon + 1)));
      pos = e + 2;
    }
    if (!req.header("transfer-encoding").empty())
      return error(501, "chunked request bodies are not supported; send "
                        "Content-Length");
    // Every Content-Length value (repeated headers, or one header with a
    // comma list) must be the same number (RFC 9110 8.6): a request that
    // two parsers would frame differently is refused, not guessed at.
    std::vector<std::string> lengths;
    for (const auto &[k, v] : req.headers) {
      if (k != "content-length")
        continue;
      size_t from = 0;
      while (true) {
        size_t comma = v.find(',', from);
        lengths.push_back(trim(v.substr(from, comma - from)));
        if (comma == std::string::npos)
          break;
        from = comma + 1;
      }
    }
    size_t length = 0;
    for (const std::string &cl : lengths) {
      if (cl.empty() || cl.size() > 19 ||
          cl.find_first_not_of("0123456789") != std::string::npos)
        return error(400, "bad Content-Length");
      if (cl != lengths[0])
        return error(400, "conflicting Content-Length headers");
    }
    if (!lengths.empty()) {
      unsigned long long v = strtoull(lengths[0].c_str(), nullptr, 10);
      if (v > opt_.maxBodyBytes)
        return error(413, "request body larger than " +
                              std::to_string(opt_.maxBodyBytes) + " bytes");
      length = size_t(v);
    }
    if (lower(req.header("expect")) == "100-continue" && buf.size() < length) {
      const char *cont = "HTTP/1.1 100 Continue\r\n\r\n";
      ::send(fd, cont, strlen(cont), MSG_NOSIGNAL);
    }
    while (buf.size() < length)
      if (!fill())
        return;
    req.body = buf.substr(0, length);
    buf.erase(0, length);
    HttpResponder resp(fd);
    std::string conn = lower(req.header("connection"));
    resp.http10 = req.version == "HTTP/1.0";
    resp.keepAlive =
        conn != "close" && (req.version == "HTTP/1.1" || conn == "keep-alive");
    handler_(req, resp);
    if (!resp.started())
      resp.send(500, "application/json",
                R"({"error": {"message": "no response", "type": )"
                R"("server_error", "param": null, "code": null}})");
    if (!resp.keepAlive || resp.clientGone())
      return;
  }
}

} // namespace glm::rt
