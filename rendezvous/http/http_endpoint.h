// HttpEndpoint: the read-only HTTP side of a rendezvous server, served by libmicrohttpd (no
// HTTP parsing of ours): GET /metrics (Prometheus's text format) and GET / (the status page).
//
// Bounded so that no client can hurt the rendezvous behind it: its own thread, at most 64
// connections (16 per address), 10 s per idle connection, and `request_timeout` (10 s) for a
// whole request, from the connection's start (or the end of the one before) to its answer: a
// client sending one byte a second is cut off then (libmicrohttpd's own timeout counts idle time
// only, which such a client resets; a watchdog thread shuts those connections down). 32 KiB per
// request, GET and the login POST only; the pages are rendered by the rendezvous's loop, which a
// slow client never holds.
//
// With a token: /metrics wants "Authorization: Bearer TOKEN" (Prometheus's
// authorization.credentials_file); the page wants that header or a session cookie that the
// login form (POST /login, the token in its body) sets. Each login gets its own random session
// that expires after `session_lifetime` (12 h) and opens the page only, not /metrics; at most
// 1024 sessions live at once (the oldest goes). A wrong or missing token, or an unknown or
// expired session, gets 401 and nothing else; the token never appears in a page, a cookie or a
// URL.
//
// Thread-safety: Handle runs on libmicrohttpd's thread; the sessions are guarded by sessions_mu_,
// everything else is set by Start() and then only read.
#ifndef DDPRUN_RENDEZVOUS_HTTP_HTTP_ENDPOINT_H_
#define DDPRUN_RENDEZVOUS_HTTP_HTTP_ENDPOINT_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

struct MHD_Daemon;
struct MHD_Connection;

namespace ddprun::rendezvous {

class RequestWatchdog;  // http_endpoint.cc

struct HttpOptions {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  int port = 0;                    // 0: the kernel picks one; port() tells which
  std::string token;               // empty: no authentication
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::seconds session_lifetime{12 * 3600};
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
  std::string NewSession() const ABSL_LOCKS_EXCLUDED(sessions_mu_);
  bool SessionValid(const std::string& session) const ABSL_LOCKS_EXCLUDED(sessions_mu_);

  HttpOptions options_;
  Render metrics_;
  Render page_;
  // Login cookies' values (random, not derived from the token) -> when each expires.
  mutable absl::Mutex sessions_mu_;
  mutable std::map<std::string, std::chrono::steady_clock::time_point> sessions_
      ABSL_GUARDED_BY(sessions_mu_);
  std::unique_ptr<RequestWatchdog> watchdog_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_HTTP_HTTP_ENDPOINT_H_
