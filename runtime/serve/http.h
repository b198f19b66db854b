//===- http.h - a small HTTP/1.1 server on POSIX sockets ------------------===//
//
// Enough HTTP for an OpenAI-compatible API: one thread per connection (with a
// cap), keep-alive, Content-Length bodies with size limits (conflicting
// lengths are refused: a proxy may have framed the request differently),
// chunked responses for server-sent events (close-delimited for HTTP/1.0
// clients, which do not know chunked encoding), and detection of clients
// that went away (so their generation can be cancelled). Bad requests get a 4xx
// and the connection is closed; nothing a client sends can stop the server.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace glm::rt {

struct HttpRequest {
  std::string method, target, path, version;
  std::vector<std::pair<std::string, std::string>> headers; // names lowercase
  std::string body;
  /// Header value by lowercase name, "" when absent.
  std::string header(const std::string &name) const;
};

/// Writes one response on a connection. Not thread-safe: one per request.
class HttpResponder {
public:
  explicit HttpResponder(int fd) : fd_(fd) {}
  /// A complete response with Content-Length.
  bool send(int status, const std::string &contentType, const std::string &body,
            const std::vector<std::pair<std::string, std::string>> &extra = {});
  /// Starts a streamed response (for text/event-stream): chunked for
  /// HTTP/1.1, and for HTTP/1.0 a body that ends when the connection closes.
  bool beginChunked(int status, const std::string &contentType);
  /// One chunk; false when the client is gone.
  bool writeChunk(const std::string &data);
  bool endChunked();
  /// True when the peer closed the connection or it failed (non-blocking).
  bool clientGone();
  bool started() const { return started_; }
  /// Added to the response's headers (e.g. CORS), whatever sends it.
  std::vector<std::pair<std::string, std::string>> headers;
  bool keepAlive = true;
  /// The request came as HTTP/1.0: no chunked encoding in the reply.
  bool http10 = false;

private:
  bool writeAll(const std::string &data);
  int fd_;
  bool started_ = false;
  bool gone_ = false;
};

using HttpHandler = std::function<void(const HttpRequest &, HttpResponder &)>;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (see HttpServer::port)
  size_t maxHeaderBytes = 64 << 10; // larger headers: 431
  size_t maxBodyBytes = 16 << 20;   // larger bodies: 413
  int maxConnections = 256;         // more at once: 503
  int idleTimeoutSec = 60;          // keep-alive / slow client limit
};

class HttpServer {
public:
  HttpServer(HttpOptions opt, HttpHandler handler);
  ~HttpServer();
  /// Binds and listens; throws glm::rt::Error naming host:port.
  void listen();
  int port() const { return port_; }
  /// Accepts until stop(); returns after open connections have finished.
  void serve();
  /// Thread- and signal-safe request to stop serving.
  void stop() { stop_ = true; }

private:
  void handleConnection(int fd);
  HttpOptions opt_;
  HttpHandler handler_;
  int listenFd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> open_{0};
};

/// Reason phrase of a status code.
const char *httpReason(int status);

} // namespace glm::rt
