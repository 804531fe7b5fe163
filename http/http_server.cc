#include "http/http_server.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <deque>
#include <mutex>
#include <optional>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "http/error_mapping.h"

namespace kvserve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

// Shared by the server and every exchange: once `running` is false nothing is posted to the
// io_context any more (it may be gone).
struct HttpServerLife {
  explicit HttpServerLife(net::io_context* context) : io_context(context) {}
  std::mutex mu;
  bool running = true;
  net::io_context* io_context;
};

namespace {

std::chrono::steady_clock::duration ToChrono(absl::Duration duration) {
  return absl::ToChronoNanoseconds(duration);
}

// 128 random bits in hex: an id no two requests share in practice.
std::string NewRequestId() {
  thread_local absl::BitGen gen;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen), absl::Uniform<uint64_t>(gen));
}

std::string ErrorBody(int status, absl::string_view message) {
  HttpError error;
  error.http_status = status;
  error.type = "invalid_request_error";
  error.message = std::string(message);
  return ErrorJson(error);
}

}  // namespace

absl::string_view HttpRequest::Header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return {};
}

// One TCP connection; every member is used on its strand only (stream_'s executor).
class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(tcp::socket socket, const HttpServerOptions& options, const HttpHandler* handler,
                 HttpMetrics* metrics, std::shared_ptr<HttpServerLife> life)
      : stream_(std::move(socket)),
        options_(options),
        handler_(handler),
        metrics_(metrics),
        life_(std::move(life)) {}

  ~HttpConnection() {
    if (streaming_ && metrics_ != nullptr) metrics_->StreamClosed();
  }

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadHeader(); });
  }

  net::any_io_executor executor() { return stream_.get_executor(); }

  // Response side (on the strand, through HttpExchange).
  void Respond(int status, absl::string_view content_type, std::string body,
               const HttpHeaders& headers = {}) {
    if (closed_ || response_started_ || !in_exchange_) return;
    response_started_ = true;
    response_complete_ = true;
    std::string bytes = StatusLine(status, content_type);
    for (const auto& [name, value] : headers) absl::StrAppend(&bytes, name, ": ", value, "\r\n");
    absl::StrAppend(&bytes, "Content-Length: ", body.size(), "\r\n\r\n");
    if (!head_) bytes += body;  // HEAD: the length GET would send, no body
    Record(status);
    Enqueue(std::move(bytes));
  }

  void StartStream(int status, absl::string_view content_type) {
    if (closed_ || response_started_ || !in_exchange_) return;
    response_started_ = true;
    streaming_ = true;
    if (metrics_ != nullptr) metrics_->StreamOpened();
    std::string bytes = StatusLine(status, content_type);
    bytes += "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";
    Record(status);
    Enqueue(std::move(bytes));
  }

  void WriteChunk(std::string data) {
    if (closed_ || !streaming_ || response_complete_ || data.empty() || head_) return;
    std::string bytes = absl::StrCat(absl::Hex(data.size()), "\r\n");
    bytes += data;
    bytes += "\r\n";
    Enqueue(std::move(bytes));
  }

  void EndStream() {
    if (closed_ || !streaming_ || response_complete_) return;
    response_complete_ = true;
    EndStreamMetric();
    Enqueue(head_ ? "" : "0\r\n\r\n");
  }

 private:
  void EndStreamMetric() {
    if (streaming_ && metrics_ != nullptr) metrics_->StreamClosed();
    streaming_ = false;
  }

  std::string StatusLine(int status, absl::string_view content_type) const {
    return absl::StrCat("HTTP/1.1 ", status, " ",
                        std::string(bhttp::obsolete_reason(static_cast<bhttp::status>(status))),
                        "\r\nServer: kvserve\r\nContent-Type: ", content_type,
                        "\r\nX-Request-Id: ", request_id_,
                        "\r\nConnection: ", keep_alive_ ? "keep-alive" : "close", "\r\n");
  }

  void Record(int status) {
    if (metrics_ != nullptr) metrics_->RecordResponse(path_, status);
  }

  void ReadHeader() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(options_.max_header_bytes));
    parser_->body_limit(options_.max_body_bytes);
    reading_ = true;
    stream_.expires_after(
        ToChrono(first_request_ ? options_.header_timeout : options_.idle_timeout));
    bhttp::async_read_header(
        stream_, buffer_, *parser_,
        beast::bind_front_handler(&HttpConnection::OnHeader, shared_from_this()));
  }

  // Answers a request the server itself refuses and closes the connection afterwards.
  void Refuse(int status, absl::string_view message) {
    reading_ = false;
    keep_alive_ = false;
    in_exchange_ = true;
    head_ = false;
    path_ = "";
    request_id_.clear();
    if (parser_.has_value() && parser_->is_header_done()) {
      request_id_ = std::string(parser_->get()["x-request-id"]);
    }
    if (request_id_.empty()) request_id_ = NewRequestId();
    Respond(status, "application/json", ErrorBody(status, message));
  }

  void OnHeader(beast::error_code ec, size_t /*bytes*/) {
    reading_ = false;
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset) {
      Close();
      return;
    }
    if (ec == bhttp::error::header_limit) {
      Refuse(431, "request header fields too large");
      return;
    }
    if (ec == bhttp::error::body_limit) {
      Refuse(413, absl::StrCat("body: larger than ", options_.max_body_bytes, " bytes"));
      return;
    }
    if (ec) {
      Refuse(400, absl::StrCat("malformed HTTP request: ", ec.message()));
      return;
    }
    first_request_ = false;
    if (parser_->is_done()) {
      Dispatch();
      return;
    }
    if (absl::EqualsIgnoreCase(std::string(parser_->get()[bhttp::field::expect]), "100-continue")) {
      Enqueue("HTTP/1.1 100 Continue\r\n\r\n");
    }
    reading_ = true;
    stream_.expires_after(ToChrono(options_.idle_timeout));
    bhttp::async_read(stream_, buffer_, *parser_,
                      beast::bind_front_handler(&HttpConnection::OnBody, shared_from_this()));
  }

  void OnBody(beast::error_code ec, size_t /*bytes*/) {
    reading_ = false;
    if (ec == beast::error::timeout || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted) {
      Close();
      return;
    }
    if (ec == bhttp::error::body_limit) {
      Refuse(413, absl::StrCat("body: larger than ", options_.max_body_bytes, " bytes"));
      return;
    }
    if (ec) {
      Refuse(400, absl::StrCat("malformed HTTP request body: ", ec.message()));
      return;
    }
    Dispatch();
  }

  void Dispatch() {
    bhttp::request<bhttp::string_body> message = parser_->release();
    parser_.reset();
    HttpRequest request;
    request.method = std::string(message.method_string());
    const absl::string_view target(message.target().data(), message.target().size());
    request.path = std::string(target.substr(0, target.find('?')));
    for (const auto& field : message) {
      request.headers.emplace_back(absl::AsciiStrToLower(std::string(field.name_string())),
                                   std::string(field.value()));
    }
    request.body = std::move(message.body());
    request.request_id = std::string(request.Header("x-request-id"));
    if (request.request_id.empty()) request.request_id = NewRequestId();
    request_id_ = request.request_id;
    beast::error_code ec;
    const tcp::endpoint remote = stream_.socket().remote_endpoint(ec);
    if (!ec) request.peer = absl::StrCat(remote.address().to_string(), ":", remote.port());
    keep_alive_ = message.keep_alive();
    head_ = message.method() == bhttp::verb::head;
    path_ = request.path;
    response_started_ = false;
    response_complete_ = false;
    in_exchange_ = true;
    stream_.expires_never();
    exchange_ = std::make_shared<HttpExchange>(weak_from_this(), life_);
    if (buffer_.size() == 0) {
      Watch();  // its pending read keeps the connection alive
    } else {
      // Pipelined bytes already wait, so there is nothing to watch: no read is pending, and the
      // exchange holds the connection weakly. Keep it alive until the response is done.
      pending_self_ = shared_from_this();
    }
    (*handler_)(std::move(request), exchange_);
  }

  // A read while the response is pending: it ends with an error when the client disconnects,
  // or with the bytes of a pipelined request (kept in buffer_ for the next parse).
  void Watch() {
    watching_ = true;
    stream_.async_read_some(
        buffer_.prepare(4096),
        beast::bind_front_handler(&HttpConnection::OnWatch, shared_from_this()));
  }

  void OnWatch(beast::error_code ec, size_t bytes) {
    watching_ = false;
    if (!ec) {
      buffer_.commit(bytes);
      if (!in_exchange_) ReadHeader();
      return;
    }
    if (ec == net::error::operation_aborted && !in_exchange_ && !closed_) {
      ReadHeader();  // cancelled by ResponseDone
      return;
    }
    Close();  // the client is gone (or half-closed: it cannot send another request either)
  }

  void Enqueue(std::string bytes) {
    if (closed_) return;
    writes_.push_back(std::move(bytes));
    if (!write_in_flight_) WriteNext();
  }

  void WriteNext() {
    write_in_flight_ = true;
    stream_.expires_after(ToChrono(options_.idle_timeout));
    net::async_write(stream_, net::buffer(writes_.front()),
                     beast::bind_front_handler(&HttpConnection::OnWrite, shared_from_this()));
  }

  void OnWrite(beast::error_code ec, size_t /*bytes*/) {
    write_in_flight_ = false;
    if (closed_) {  // Close() left the buffer this write read from; it can go now
      writes_.clear();
      return;
    }
    if (reading_) {
      stream_.expires_after(ToChrono(options_.idle_timeout));
    } else {
      stream_.expires_never();
    }
    if (ec) {
      Close();
      return;
    }
    writes_.pop_front();
    if (!writes_.empty()) {
      WriteNext();
      return;
    }
    if (response_complete_ && in_exchange_) ResponseDone();
  }

  void ResponseDone() {
    const std::shared_ptr<HttpConnection> self = std::move(pending_self_);
    in_exchange_ = false;
    exchange_.reset();
    if (!keep_alive_) {
      LingerClose();
      return;
    }
    if (watching_) {
      beast::error_code ignored;
      stream_.socket().cancel(ignored);  // OnWatch then reads the next request
    } else {
      ReadHeader();
    }
  }

  // Half-closes and discards what the client still sends for a moment before closing, so the
  // client reads the response instead of a reset (e.g. a 413 while it is still sending).
  void LingerClose() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(std::chrono::seconds(2));
    Drain();
  }

  void Drain() {
    stream_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) {
                                self->Close();
                              } else {
                                self->Drain();
                              }
                            });
  }

  void Close() {
    const std::shared_ptr<HttpConnection> self = std::move(pending_self_);
    if (closed_) return;
    closed_ = true;
    if (streaming_ && !response_complete_) EndStreamMetric();
    std::shared_ptr<HttpExchange> exchange = std::move(exchange_);
    const bool pending = in_exchange_ && !response_complete_;
    in_exchange_ = false;
    // A write in flight still reads from writes_.front(): that buffer stays until its OnWrite.
    writes_.erase(write_in_flight_ ? writes_.begin() + 1 : writes_.begin(), writes_.end());
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    if (pending && exchange != nullptr) exchange->NotifyClosed();
  }

  friend class HttpExchange;

  beast::tcp_stream stream_;
  const HttpServerOptions& options_;
  const HttpHandler* const handler_;
  HttpMetrics* const metrics_;
  const std::shared_ptr<HttpServerLife> life_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::shared_ptr<HttpExchange> exchange_;
  // This connection, while it answers a request with pipelined bytes behind it (see Dispatch).
  std::shared_ptr<HttpConnection> pending_self_;
  std::string path_;
  std::string request_id_;  // the exchange's X-Request-Id
  std::deque<std::string> writes_;
  char scratch_[4096];
  bool first_request_ = true;
  bool reading_ = false;
  bool keep_alive_ = true;
  bool head_ = false;  // the request being answered is a HEAD: headers only
  bool in_exchange_ = false;
  bool response_started_ = false;
  bool response_complete_ = false;
  bool streaming_ = false;
  bool watching_ = false;
  bool write_in_flight_ = false;
  bool closed_ = false;
};

HttpExchange::HttpExchange(std::weak_ptr<HttpConnection> connection,
                           std::shared_ptr<HttpServerLife> life)
    : connection_(std::move(connection)), life_(std::move(life)) {}

void HttpExchange::Post(std::function<void()> fn) {
  std::shared_ptr<HttpConnection> connection = connection_.lock();
  if (connection == nullptr) return;
  std::lock_guard<std::mutex> lock(life_->mu);
  if (!life_->running) return;
  net::post(connection->executor(), std::move(fn));
}

void HttpExchange::RunAfter(absl::Duration delay, std::function<void()> fn) {
  Post([connection = connection_, delay, fn = std::move(fn)]() mutable {
    auto c = connection.lock();
    if (c == nullptr) return;
    auto timer = std::make_shared<net::steady_timer>(c->executor());
    timer->expires_after(ToChrono(delay));
    timer->async_wait([timer, fn = std::move(fn)](beast::error_code ec) {
      if (!ec) fn();
    });
  });
}

void HttpExchange::Respond(int status, absl::string_view content_type, std::string body,
                           HttpHeaders headers) {
  Post([connection = connection_, status, type = std::string(content_type), body = std::move(body),
        headers = std::move(headers)]() mutable {
    if (auto c = connection.lock()) c->Respond(status, type, std::move(body), headers);
  });
}

void HttpExchange::StartStream(int status, absl::string_view content_type) {
  Post([connection = connection_, status, type = std::string(content_type)] {
    if (auto c = connection.lock()) c->StartStream(status, type);
  });
}

void HttpExchange::WriteChunk(std::string data) {
  Post([connection = connection_, data = std::move(data)]() mutable {
    if (auto c = connection.lock()) c->WriteChunk(std::move(data));
  });
}

void HttpExchange::EndStream() {
  Post([connection = connection_] {
    if (auto c = connection.lock()) c->EndStream();
  });
}

void HttpExchange::SetCloseCallback(std::function<void()> callback) {
  std::function<void()> run_now;
  {
    std::lock_guard<std::mutex> lock(close_mu_);
    if (closed_) {
      run_now = std::move(callback);
    } else {
      close_callback_ = std::move(callback);
    }
  }
  if (run_now) run_now();
}

void HttpExchange::NotifyClosed() {
  std::function<void()> callback;
  {
    std::lock_guard<std::mutex> lock(close_mu_);
    closed_ = true;
    callback = std::move(close_callback_);
  }
  if (callback) callback();
}

struct HttpServer::Impl {
  explicit Impl(const HttpServerOptions& server_options, HttpHandler server_handler,
                HttpMetrics* server_metrics)
      : options(server_options),
        handler(std::move(server_handler)),
        metrics(server_metrics),
        acceptor(io_context),
        life(std::make_shared<HttpServerLife>(&io_context)) {}

  void Accept() {
    acceptor.async_accept(
        net::make_strand(io_context), [this](beast::error_code ec, tcp::socket socket) {
          if (!acceptor.is_open()) return;
          if (!ec) {
            beast::error_code ignored;
            socket.set_option(tcp::no_delay(true), ignored);
            std::make_shared<HttpConnection>(std::move(socket), options, &handler, metrics, life)
                ->Start();
          }
          Accept();
        });
  }

  const HttpServerOptions options;
  const HttpHandler handler;
  HttpMetrics* const metrics;
  net::io_context io_context;
  tcp::acceptor acceptor;
  std::shared_ptr<HttpServerLife> life;
  std::vector<std::thread> threads;
  bool stopped = false;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              HttpHandler handler,
                                                              HttpMetrics* metrics) {
  auto impl = std::make_unique<Impl>(options, std::move(handler), metrics);
  const std::string address = absl::StrCat(options.host, ":", options.port);
  beast::error_code ec;
  tcp::resolver resolver(impl->io_context);
  const std::string host(absl::StripSuffix(absl::StripPrefix(options.host, "["), "]"));
  auto endpoints =
      resolver.resolve(host, std::to_string(options.port), tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve ", address, ": ", ec.message()));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on ", address, ": ", ec.message()));
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(impl)));
  server->port_ = server->impl_->acceptor.local_endpoint().port();
  server->impl_->Accept();
  for (int i = 0; i < std::max(1, options.num_threads); ++i) {
    server->impl_->threads.emplace_back([impl = server->impl_.get()] { impl->io_context.run(); });
  }
  return server;
}

void HttpServer::Stop() {
  if (impl_ == nullptr || impl_->stopped) return;
  impl_->stopped = true;
  {
    std::lock_guard<std::mutex> lock(impl_->life->mu);
    impl_->life->running = false;
  }
  net::post(impl_->io_context, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
  });
  impl_->io_context.stop();
  for (std::thread& thread : impl_->threads) thread.join();
  impl_->threads.clear();
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace kvserve
