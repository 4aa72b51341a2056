// HttpEndpoint: the read-only HTTP side of a rendezvous server, served by libmicrohttpd (no
// HTTP parsing of ours): GET /metrics (Prometheus's text format) and GET / (the status page).
//
// Bounded so that no client can hurt the rendezvous behind it: its own thread, at most 64
// connections (16 per address), 10 s per idle connection (a client sending one byte a second
// is dropped), 32 KiB per request, GET and the login POST only; the pages are rendered by the
// rendezvous's loop, which a slow client never holds.
//
// With a token: /metrics wants "Authorization: Bearer TOKEN" (Prometheus's
// authorization.credentials_file); the page wants that header or the session cookie that the
// login form (POST /login, the token in its body) sets. A wrong or missing token gets 401 and
// nothing else; the token never appears in a page, a cookie or a URL.
#ifndef DDPRUN_RENDEZVOUS_HTTP_HTTP_ENDPOINT_H_
#define DDPRUN_RENDEZVOUS_HTTP_HTTP_ENDPOINT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

struct MHD_Daemon;

namespace ddprun::rendezvous {

struct HttpOptions {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  int port = 0;                    // 0: the kernel picks one; port() tells which
  std::string token;               // empty: no authentication
};

class HttpEndpoint {
 public:
  using Render = std::function<std::string()>;
  // Errors: kInvalidArgument naming the address when it cannot be bound (a port in use).
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const HttpOptions& options,
                                                             Render metrics, Render page);
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  int port() const { return port_; }

  // For libmicrohttpd's callback.
  struct Request;
  struct Reply {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
    std::string set_cookie;
    std::string location;  // a redirect
  };
  Reply Handle(const Request& request) const;

 private:
  HttpEndpoint() = default;
  bool Authorized(const Request& request) const;

  HttpOptions options_;
  Render metrics_;
  Render page_;
  std::string session_;  // the login cookie's value: random, not derived from the token
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_HTTP_HTTP_ENDPOINT_H_
