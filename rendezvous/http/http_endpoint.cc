#include "rendezvous/http/http_endpoint.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/strings.h"
#include "rendezvous/auth/token.h"

namespace ddprun::rendezvous {

using SteadyTime = std::chrono::steady_clock::time_point;

// Cuts off connections whose request is not answered within the request timeout, counted from
// the connection's start or the end of its previous request. libmicrohttpd tells it when a
// connection starts and closes (and calls CLOSED before it closes the socket, so a socket shut
// down here under the lock is still the connection's); shutdown(2) makes libmicrohttpd's next
// read see the end and close the connection itself. Thread-safe: libmicrohttpd's thread calls
// Started, RequestDone and Closed while the watchdog's own thread runs.
class RequestWatchdog {
 public:
  explicit RequestWatchdog(std::chrono::milliseconds timeout)
      : timeout_(timeout), thread_([this] { Run(); }) {}
  ~RequestWatchdog() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }

  void Started(MHD_Connection* connection, int fd) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    connections_[connection] = Entry{fd, std::chrono::steady_clock::now() + timeout_, false};
  }
  void RequestDone(MHD_Connection* connection) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = connections_.find(connection);
    if (it != connections_.end()) it->second.deadline = std::chrono::steady_clock::now() + timeout_;
  }
  void Closed(MHD_Connection* connection) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    connections_.erase(connection);
  }

 private:
  struct Entry {
    int fd;
    SteadyTime deadline;
    bool cut;
  };

  void Run() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    while (!stopping_) {
      const SteadyTime now = std::chrono::steady_clock::now();
      SteadyTime next = now + timeout_;
      for (auto& [connection, entry] : connections_) {
        if (entry.cut) continue;
        if (entry.deadline <= now) {
          shutdown(entry.fd, SHUT_RDWR);
          entry.cut = true;
        } else if (entry.deadline < next) {
          next = entry.deadline;
        }
      }
      // Started() wakes nothing: a new deadline is never earlier than now + timeout_, which is
      // at most what this wait is for.
      mu_.AwaitWithDeadline(absl::Condition(&stopping_),
                            absl::FromChrono(std::chrono::system_clock::now() + (next - now)));
    }
  }

  const std::chrono::milliseconds timeout_;
  absl::Mutex mu_;
  std::map<MHD_Connection*, Entry> connections_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

struct HttpEndpoint::Request {
  std::string method;
  std::string path;
  std::string authorization;
  std::string cookie;
  std::string body;  // the login form's, at most kMaxBody bytes
};

namespace {

constexpr size_t kMaxBody = 4096;
constexpr char kCookieName[] = "ddprun_session";

// A request's state across libmicrohttpd's calls (its body comes in pieces).
struct Pending {
  std::string body;
  bool too_long = false;
};

std::string Header(MHD_Connection* c, MHD_ValueKind kind, const char* name) {
  const char* v = MHD_lookup_connection_value(c, kind, name);
  return v == nullptr ? "" : v;
}

// The value of `name` in a Cookie header ("a=1; ddprun_session=...").
std::string CookieValue(const std::string& cookies, absl::string_view name) {
  for (absl::string_view part : absl::StrSplit(cookies, ';')) {
    part = absl::StripLeadingAsciiWhitespace(part);
    if (absl::StartsWith(part, name) && part.size() > name.size() && part[name.size()] == '=') {
      return std::string(part.substr(name.size() + 1));
    }
  }
  return "";
}

// The `token` field of an application/x-www-form-urlencoded body.
std::string FormToken(const std::string& body) {
  for (absl::string_view field : absl::StrSplit(body, '&')) {
    if (absl::StartsWith(field, "token=")) {
      std::string value(field.substr(6));
      for (char& ch : value) {
        if (ch == '+') ch = ' ';
      }
      value.resize(MHD_http_unescape(value.data()));
      return value;
    }
  }
  return "";
}

const char kLoginPage[] =
    "<!doctype html><html><head><meta charset=\"utf-8\"><title>ddprun-rdzv: sign in</title>"
    "<style>body{font:15px system-ui,sans-serif;margin:3em}input{font:inherit;padding:.3em}"
    "</style></head><body><h1>ddprun-rdzv</h1><p>This server wants its rendezvous token.</p>"
    "<form method=\"post\" action=\"/login\"><input type=\"password\" name=\"token\" "
    "autocomplete=\"current-password\" size=\"40\" autofocus> <input type=\"submit\" "
    "value=\"Sign in\"></form></body></html>";

MHD_Result Send(MHD_Connection* connection, const HttpEndpoint::Reply& reply) {
  MHD_Response* response = MHD_create_response_from_buffer(
      reply.body.size(), const_cast<char*>(reply.body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, "Content-Type", reply.content_type.c_str());
  MHD_add_response_header(response, "Cache-Control", "no-store");
  MHD_add_response_header(response, "X-Content-Type-Options", "nosniff");
  if (!reply.set_cookie.empty()) {
    MHD_add_response_header(response, "Set-Cookie", reply.set_cookie.c_str());
  }
  if (!reply.location.empty())
    MHD_add_response_header(response, "Location", reply.location.c_str());
  if (reply.status == 401) MHD_add_response_header(response, "WWW-Authenticate", "Bearer");
  const MHD_Result r = MHD_queue_response(connection, reply.status, response);
  MHD_destroy_response(response);
  return r;
}

MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url, const char* method,
                     const char* /*version*/, const char* upload_data, size_t* upload_data_size,
                     void** con_cls) {
  auto* endpoint = static_cast<const HttpEndpoint*>(cls);
  if (*con_cls == nullptr) {  // the headers are in; the body (if any) follows
    *con_cls = new Pending();
    return MHD_YES;
  }
  auto* pending = static_cast<Pending*>(*con_cls);
  if (*upload_data_size > 0) {
    if (pending->body.size() + *upload_data_size > kMaxBody) {
      pending->too_long = true;
    } else {
      pending->body.append(upload_data, *upload_data_size);
    }
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (pending->too_long) {
    HttpEndpoint::Reply reply;
    reply.status = 413;
    reply.body = "request body too large\n";
    return Send(connection, reply);
  }
  HttpEndpoint::Request request;
  request.method = method;
  request.path = url;
  request.authorization = Header(connection, MHD_HEADER_KIND, "Authorization");
  request.cookie = Header(connection, MHD_HEADER_KIND, "Cookie");
  request.body = std::move(pending->body);
  return Send(connection, endpoint->Handle(request));
}

void OnCompleted(void* cls, MHD_Connection* connection, void** con_cls,
                 MHD_RequestTerminationCode /*code*/) {
  static_cast<RequestWatchdog*>(cls)->RequestDone(connection);
  delete static_cast<Pending*>(*con_cls);
  *con_cls = nullptr;
}

void OnConnection(void* cls, MHD_Connection* connection, void** /*socket_context*/,
                  MHD_ConnectionNotificationCode code) {
  auto* watchdog = static_cast<RequestWatchdog*>(cls);
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info != nullptr) watchdog->Started(connection, info->connect_fd);
  } else {
    watchdog->Closed(connection);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const HttpOptions& options,
                                                                  Render metrics, Render page) {
  std::unique_ptr<HttpEndpoint> endpoint(new HttpEndpoint());
  endpoint->options_ = options;
  endpoint->metrics_ = std::move(metrics);
  endpoint->page_ = std::move(page);
  endpoint->watchdog_ = std::make_unique<RequestWatchdog>(options.request_timeout);
  RequestWatchdog* watchdog = endpoint->watchdog_.get();
  const std::string where = FormatHostPort(options.host, options.port);
  sockaddr_storage addr{};
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
  if (options.host.find(':') != std::string::npos) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&addr);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(options.port));
    if (inet_pton(AF_INET6, options.host.c_str(), &a6->sin6_addr) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--http-host=", options.host, ": not an IPv6 or IPv4 address"));
    }
    flags |= MHD_USE_IPv6;
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&addr);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(options.port));
    if (inet_pton(AF_INET, options.host.c_str(), &a4->sin_addr) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--http-host=", options.host, ": not an IPv4 or IPv6 address"));
    }
  }
  endpoint->daemon_ =
      MHD_start_daemon(flags, static_cast<uint16_t>(options.port), nullptr, nullptr, &OnRequest,
                       endpoint.get(), MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&addr),  //
                       MHD_OPTION_CONNECTION_LIMIT, 64u,                                          //
                       MHD_OPTION_PER_IP_CONNECTION_LIMIT, 16u,                                   //
                       MHD_OPTION_CONNECTION_TIMEOUT, 10u,                                        //
                       MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<size_t>(32 * 1024),
                       MHD_OPTION_NOTIFY_COMPLETED, &OnCompleted, watchdog,    //
                       MHD_OPTION_NOTIFY_CONNECTION, &OnConnection, watchdog,  //
                       MHD_OPTION_END);
  if (endpoint->daemon_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--http-port=", options.port, ": cannot listen on ", where, " (is the port in use?)"));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(endpoint->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  endpoint->port_ = info != nullptr ? info->port : options.port;
  return endpoint;
}

HttpEndpoint::~HttpEndpoint() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

bool HttpEndpoint::Authorized(const Request& request) const {
  if (options_.token.empty()) return true;
  if (!request.authorization.empty() && BearerHasToken(request.authorization, options_.token)) {
    return true;
  }
  // A login session opens the page only; /metrics wants the token itself.
  return request.path == "/" && SessionValid(CookieValue(request.cookie, kCookieName));
}

std::string HttpEndpoint::NewSession() const {
  constexpr size_t kMaxSessions = 1024;
  const SteadyTime now = std::chrono::steady_clock::now();
  std::string session = RandomHex(24);
  absl::MutexLock lock(&sessions_mu_);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = it->second <= now ? sessions_.erase(it) : std::next(it);
  }
  if (sessions_.size() >= kMaxSessions) {
    auto oldest =
        std::min_element(sessions_.begin(), sessions_.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    sessions_.erase(oldest);
  }
  sessions_[session] = now + options_.session_lifetime;
  return session;
}

bool HttpEndpoint::SessionValid(const std::string& session) const {
  if (session.empty()) return false;
  const SteadyTime now = std::chrono::steady_clock::now();
  absl::MutexLock lock(&sessions_mu_);
  // The ids are random (192 bits) and looked up, not compared to one secret: a lookup's timing
  // tells an attacker nothing useful about an id they have not guessed.
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return false;
  if (it->second <= now) {
    sessions_.erase(it);
    return false;
  }
  return true;
}

HttpEndpoint::Reply HttpEndpoint::Handle(const Request& request) const {
  Reply reply;
  if (request.method == "POST" && request.path == "/login") {
    if (options_.token.empty() || SecureEquals(FormToken(request.body), options_.token)) {
      reply.status = 303;
      reply.location = "/";
      reply.set_cookie = absl::StrCat(kCookieName, "=", NewSession(),
                                      "; Path=/; Max-Age=", options_.session_lifetime.count(),
                                      "; HttpOnly; SameSite=Strict");
      return reply;
    }
    reply.status = 401;
    reply.content_type = "text/html; charset=utf-8";
    reply.body = kLoginPage;
    return reply;
  }
  if (request.method != "GET" && request.method != "HEAD") {
    reply.status = 405;
    reply.body = "only GET\n";
    return reply;
  }
  if (request.path != "/" && request.path != "/metrics") {
    reply.status = 404;
    reply.body = "not found: try / or /metrics\n";
    return reply;
  }
  if (!Authorized(request)) {
    reply.status = 401;
    if (request.path == "/") {
      reply.content_type = "text/html; charset=utf-8";
      reply.body = kLoginPage;
    } else {
      reply.body = "401: this server wants its token (Authorization: Bearer ...)\n";
    }
    return reply;
  }
  if (request.path == "/metrics") {
    reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
    reply.body = metrics_();
  } else {
    reply.content_type = "text/html; charset=utf-8";
    reply.body = page_();
  }
  return reply;
}

}  // namespace ddprun::rendezvous
