// HttpServer: an asynchronous HTTP/1.1 server on Boost.Beast / Asio. A fixed, small pool of
// threads runs one io_context for every connection (no thread per connection); each connection
// runs on its own strand, so its handlers never run concurrently.
//
// Per connection: keep-alive (HTTP/1.1 default, "Connection: close" honoured), request bodies
// (Content-Length or chunked) up to max_body_bytes (413 over it), headers up to
// max_header_bytes (431), and timeouts: header_timeout for receiving a request's header (a
// slow sender is cut off; 408), idle_timeout for a keep-alive connection to start its next
// request, for the body, and for the client to take each write. Malformed requests get 400
// and the connection is closed. Pipelined requests are served in order. A HEAD request's
// response carries the headers (and Content-Length) of the handler's response, never its body.
//
// The handler gets each request with an HttpExchange, through which it answers, now or later
// and from any thread: one plain response, or a chunked stream (Server-Sent Events). While a
// response is pending the connection watches its socket, so a client that disconnects is seen
// at once and the exchange's close callback runs (the front end cancels the request).
//
// Request ids: every response carries an X-Request-Id header, the request's own X-Request-Id
// when it sent one, else an id the server made (32 hex digits); the handler gets the same in
// HttpRequest::request_id. A request refused before its header was read gets a fresh id.
//
// Thread-safety: HttpExchange is thread-safe; the handler runs on the connection's strand and
// must not block. Start / Stop / the destructor from one thread.
#ifndef KVSERVE_HTTP_HTTP_SERVER_H_
#define KVSERVE_HTTP_HTTP_SERVER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "http/http_metrics.h"

namespace kvserve {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (HttpServer::port() says which)
  int num_threads = 2;
  size_t max_body_bytes = 8u << 20;  // 413 above; a 10 MB prompt is refused at once
  size_t max_header_bytes = 16u << 10;
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration idle_timeout = absl::Seconds(60);
};

struct HttpRequest {
  std::string method;                                        // "GET", "POST", ...
  std::string path;                                          // the target without its query string
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  std::string peer;  // "ip:port"
  // X-Request-Id as sent, or one the server generated when it sent none; echoed in the response.
  std::string request_id;

  // The first header named `name` (lower case), or "" when there is none.
  absl::string_view Header(absl::string_view name) const;
};

// Header fields of a response beyond those the server writes itself.
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

class HttpConnection;
struct HttpServerLife;

// One request's response side. Every method may be called from any thread; the work runs on
// the connection's strand. Exactly one of Respond / StartStream..EndStream should be used; a
// call after the connection closed is ignored.
class HttpExchange {
 public:
  HttpExchange(std::weak_ptr<HttpConnection> connection, std::shared_ptr<HttpServerLife> life);

  // `headers`: more header fields, e.g. {{"Allow", "GET, HEAD"}} with a 405.
  void Respond(int status, absl::string_view content_type, std::string body,
               HttpHeaders headers = {});
  // Status line and headers of a chunked response (e.g. "text/event-stream").
  void StartStream(int status, absl::string_view content_type);
  void WriteChunk(std::string data);
  void EndStream();

  // Runs `fn` on the connection's strand (dropped when the connection or server is gone).
  void Post(std::function<void()> fn);
  // Runs `fn` on the strand after `delay` (dropped when the connection or server is gone).
  void RunAfter(absl::Duration delay, std::function<void()> fn);
  // Called once if the client goes away before the response ended: on the strand, or at once
  // on the calling thread when it is already gone.
  void SetCloseCallback(std::function<void()> callback);

 private:
  friend class HttpConnection;
  // The connection closed while this exchange was pending: runs the close callback.
  void NotifyClosed();

  const std::weak_ptr<HttpConnection> connection_;
  const std::shared_ptr<HttpServerLife> life_;
  std::mutex close_mu_;
  bool closed_ = false;                   // guarded by close_mu_
  std::function<void()> close_callback_;  // guarded by close_mu_
};

using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<HttpExchange>)>;

class HttpServer {
 public:
  // Binds, listens and starts the threads. INVALID_ARGUMENT when the address cannot be bound.
  // `metrics` may be null; it must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           HttpHandler handler,
                                                           HttpMetrics* metrics);
  ~HttpServer();  // Stop()

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Stops accepting, closes every connection and joins the threads. Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_HTTP_HTTP_SERVER_H_
