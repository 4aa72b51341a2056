// rendezvous/http/http_endpoint: a real endpoint on a kernel-chosen loopback port, spoken to
// over raw sockets: the two pages, their headers, bad methods and paths, the token and the
// login sessions (tampered, expired, on the wrong page), oversized bodies, bad addresses, a
// port in use, and the watchdog cutting a client that never finishes its request.
#include "rendezvous/http/http_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"

namespace ddprun::rendezvous {
namespace {

constexpr char kToken[] = "tok+en/with%&=chars";

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};  // no test waits longer for an answer
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
  return fd;
}

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

Response Parse(const std::string& raw) {
  Response r;
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  std::vector<std::string> lines = absl::StrSplit(raw.substr(0, end), "\r\n");
  std::vector<std::string> status_line = absl::StrSplit(lines[0], ' ');
  if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &r.status)) return r;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    r.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  r.body = raw.substr(end + 4);
  return r;
}

// One request on a fresh connection; `headers` are extra "Name: value\r\n" lines.
Response Request(int port, const std::string& method, const std::string& path,
                 const std::string& headers = "", const std::string& body = "") {
  const int fd = Connect(port);
  std::string request = absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: localhost\r\n",
                                     "Connection: close\r\n", headers);
  if (!body.empty() || method == "POST") {
    absl::StrAppend(&request, "Content-Length: ", body.size(), "\r\n");
  }
  absl::StrAppend(&request, "\r\n", body);
  EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  Response r = Parse(ddprun::testing::ReadUntilEof(fd));
  close(fd);
  return r;
}

std::string Bearer(const std::string& token) {
  return absl::StrCat("Authorization: Bearer ", token, "\r\n");
}

class HttpEndpointTest : public ::testing::Test {
 protected:
  std::unique_ptr<HttpEndpoint> Start(HttpOptions options = {}) {
    absl::StatusOr<std::unique_ptr<HttpEndpoint>> endpoint = HttpEndpoint::Start(
        options,
        [this] {
          ++metrics_calls_;
          return std::string("ddprun_rdzv_round 3\n");
        },
        [] { return std::string("<html>the run</html>"); });
    EXPECT_TRUE(endpoint.ok()) << endpoint.status();
    if (!endpoint.ok()) return nullptr;
    EXPECT_GT((*endpoint)->port(), 0);
    return *std::move(endpoint);
  }
  std::unique_ptr<HttpEndpoint> StartWithToken(
      std::chrono::seconds lifetime = std::chrono::seconds(3600)) {
    HttpOptions options;
    options.token = kToken;
    options.session_lifetime = lifetime;
    return Start(options);
  }
  // POST /login with the form's token field; the session cookie set ("" when none).
  static std::string Login(int port, const std::string& form_body, int* status = nullptr) {
    Response r = Request(port, "POST", "/login",
                         "Content-Type: application/x-www-form-urlencoded\r\n", form_body);
    if (status != nullptr) *status = r.status;
    const std::string& cookie = r.headers["set-cookie"];
    return cookie.substr(0, cookie.find(';'));
  }

  std::atomic<int> metrics_calls_{0};
};

TEST_F(HttpEndpointTest, ServesMetricsAndThePageRenderedPerRequest) {
  auto endpoint = Start();
  ASSERT_NE(endpoint, nullptr);
  Response metrics = Request(endpoint->port(), "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.body, "ddprun_rdzv_round 3\n");
  EXPECT_EQ(metrics.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(metrics.headers["cache-control"], "no-store");
  EXPECT_EQ(metrics.headers["x-content-type-options"], "nosniff");
  Request(endpoint->port(), "GET", "/metrics");
  EXPECT_EQ(metrics_calls_.load(), 2);

  Response page = Request(endpoint->port(), "GET", "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.body, "<html>the run</html>");
  EXPECT_EQ(page.headers["content-type"], "text/html; charset=utf-8");

  Response head = Request(endpoint->port(), "HEAD", "/metrics");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
}

TEST_F(HttpEndpointTest, OtherPathsAndMethodsAreRefused) {
  auto endpoint = Start();
  ASSERT_NE(endpoint, nullptr);
  for (const char* path : {"/metrics/", "/index.html", "//metrics", "/metricsx", "/..%2fmetrics"}) {
    Response r = Request(endpoint->port(), "GET", path);
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(r.body, "not found: try / or /metrics\n") << path;
  }
  for (const char* method : {"PUT", "DELETE", "OPTIONS"}) {
    Response r = Request(endpoint->port(), method, "/metrics");
    EXPECT_EQ(r.status, 405) << method;
    EXPECT_EQ(r.body, "only GET\n");
  }
  EXPECT_EQ(Request(endpoint->port(), "POST", "/metrics", "", "x=1").status, 405);
  EXPECT_EQ(metrics_calls_.load(), 0) << "nothing refused was rendered";
  // A query string is not part of the path (Prometheus may add one).
  EXPECT_EQ(Request(endpoint->port(), "GET", "/metrics?name=x").status, 200);
}

TEST_F(HttpEndpointTest, WithATokenMetricsWantsExactlyThatBearer) {
  auto endpoint = StartWithToken();
  ASSERT_NE(endpoint, nullptr);
  const int port = endpoint->port();
  const std::string token = kToken;
  for (const std::string& header :
       {std::string(""), Bearer(token + "x"), Bearer(token.substr(1)),
        Bearer("Tok+en/with%&=chars"), absl::StrCat("Authorization: Basic ", token, "\r\n"),
        absl::StrCat("Authorization: ", token, "\r\n")}) {
    Response r = Request(port, "GET", "/metrics", header);
    EXPECT_EQ(r.status, 401) << header;
    EXPECT_EQ(r.headers["www-authenticate"], "Bearer");
    EXPECT_FALSE(absl::StrContains(r.body, token)) << "the token never appears in a page";
  }
  EXPECT_EQ(metrics_calls_.load(), 0);
  Response ok = Request(port, "GET", "/metrics", Bearer(token));
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, "ddprun_rdzv_round 3\n");
}

TEST_F(HttpEndpointTest, PageWithoutTheTokenIsTheLoginForm) {
  auto endpoint = StartWithToken();
  ASSERT_NE(endpoint, nullptr);
  Response r = Request(endpoint->port(), "GET", "/");
  EXPECT_EQ(r.status, 401);
  EXPECT_TRUE(absl::StrContains(r.body, "<form method=\"post\" action=\"/login\">")) << r.body;
  EXPECT_EQ(Request(endpoint->port(), "GET", "/", Bearer(kToken)).body, "<html>the run</html>");
}

TEST_F(HttpEndpointTest, LoginSessionOpensThePageOnlyNotMetrics) {
  auto endpoint = StartWithToken();
  ASSERT_NE(endpoint, nullptr);
  const int port = endpoint->port();
  int status = 0;
  // The token URL-encoded as a browser sends it: '+' '/' '%' '&' '=' escaped.
  const std::string cookie = Login(port, "token=tok%2Ben%2Fwith%25%26%3Dchars", &status);
  EXPECT_EQ(status, 303);
  ASSERT_TRUE(absl::StartsWith(cookie, "ddprun_session=")) << cookie;
  EXPECT_EQ(cookie.size(), 15u + 48u) << "192 random bits in hex";
  EXPECT_FALSE(absl::StrContains(cookie, "tok")) << "the cookie is not derived from the token";

  Response r = Request(port, "POST", "/login", "", "token=tok%2Ben%2Fwith%25%26%3Dchars");
  EXPECT_EQ(r.headers["location"], "/");
  const std::string& set_cookie = r.headers["set-cookie"];
  EXPECT_TRUE(absl::StrContains(set_cookie, "; Path=/; Max-Age=3600; HttpOnly; SameSite=Strict"))
      << set_cookie;
  EXPECT_NE(set_cookie.substr(0, set_cookie.find(';')), cookie) << "each login its own session";

  const std::string header = absl::StrCat("Cookie: other=1; ", cookie, "\r\n");
  EXPECT_EQ(Request(port, "GET", "/", header).status, 200);
  EXPECT_EQ(Request(port, "GET", "/metrics", header).status, 401);
}

TEST_F(HttpEndpointTest, WrongOrTamperedLoginsAndSessionsAreRefused) {
  auto endpoint = StartWithToken();
  ASSERT_NE(endpoint, nullptr);
  const int port = endpoint->port();
  int status = 0;
  for (const char* body :
       {"token=wrong", "", "token=", "tok=x", "token=tok+en%2Fwith%25%26%3Dchars",
        "token=tok%2Ben%2Fwith%25%26%3Dchars%20"}) {
    EXPECT_EQ(Login(port, body, &status), "") << body;
    EXPECT_EQ(status, 401) << body;
  }
  const std::string cookie = Login(port, "token=tok%2Ben%2Fwith%25%26%3Dchars");
  ASSERT_FALSE(cookie.empty());
  std::string tampered = cookie;
  tampered.back() = tampered.back() == '0' ? '1' : '0';
  for (const std::string& c :
       {tampered, cookie.substr(0, cookie.size() - 1), cookie + "0", std::string("ddprun_session="),
        std::string("xddprun_session=") + cookie.substr(15)}) {
    EXPECT_EQ(Request(port, "GET", "/", absl::StrCat("Cookie: ", c, "\r\n")).status, 401) << c;
  }
}

TEST_F(HttpEndpointTest, ExpiredSessionIsRefused) {
  auto endpoint = StartWithToken(std::chrono::seconds(0));  // every session expires at once
  ASSERT_NE(endpoint, nullptr);
  int status = 0;
  const std::string cookie =
      Login(endpoint->port(), "token=tok%2Ben%2Fwith%25%26%3Dchars", &status);
  EXPECT_EQ(status, 303);
  ASSERT_FALSE(cookie.empty());
  EXPECT_EQ(Request(endpoint->port(), "GET", "/", absl::StrCat("Cookie: ", cookie, "\r\n")).status,
            401);
}

TEST_F(HttpEndpointTest, At1024SessionsTheOldestGoes) {
  auto endpoint = StartWithToken();
  ASSERT_NE(endpoint, nullptr);
  const std::string form = "token=tok%2Ben%2Fwith%25%26%3Dchars";
  const std::string first = Login(endpoint->port(), form);
  const std::string second = Login(endpoint->port(), form);
  for (int i = 2; i < 1024; ++i) ASSERT_NE(Login(endpoint->port(), form), "");
  auto page = [&](const std::string& cookie) {
    return Request(endpoint->port(), "GET", "/", absl::StrCat("Cookie: ", cookie, "\r\n")).status;
  };
  EXPECT_EQ(page(first), 200) << "1024 sessions fit";
  const std::string newest = Login(endpoint->port(), form);
  EXPECT_EQ(page(first), 401) << "the 1025th login pushed out the oldest";
  EXPECT_EQ(page(second), 200);
  EXPECT_EQ(page(newest), 200);
}

TEST_F(HttpEndpointTest, SeventeenthConnectionFromOneAddressIsClosedAtOnce) {
  auto endpoint = Start();
  ASSERT_NE(endpoint, nullptr);
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) idle.push_back(Connect(endpoint->port()));
  // Each of the 16 is accepted and kept (it gets an answer once it asks).
  const int extra = Connect(endpoint->port());
  char byte;
  EXPECT_EQ(recv(extra, &byte, 1, 0), 0) << "the 17th is closed without an answer";
  close(extra);
  const std::string get = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(send(idle[0], get.data(), get.size(), MSG_NOSIGNAL), static_cast<ssize_t>(get.size()));
  EXPECT_EQ(Parse(ddprun::testing::ReadUntilEof(idle[0])).status, 200);
  for (int fd : idle) close(fd);
}

TEST_F(HttpEndpointTest, WithoutATokenLoginIsNotNeededButHarmless) {
  auto endpoint = Start();
  ASSERT_NE(endpoint, nullptr);
  int status = 0;
  Login(endpoint->port(), "token=anything", &status);
  EXPECT_EQ(status, 303);
}

TEST_F(HttpEndpointTest, OversizedLoginBodyIsRefused) {
  auto endpoint = StartWithToken();
  ASSERT_NE(endpoint, nullptr);
  int status = 0;
  EXPECT_EQ(Login(endpoint->port(),
                  "token=tok%2Ben%2Fwith%25%26%3Dchars&pad=" + std::string(5000, 'x'), &status),
            "");
  EXPECT_EQ(status, 413);
  // At the limit it is still read.
  const std::string form = "token=tok%2Ben%2Fwith%25%26%3Dchars&pad=";
  EXPECT_NE(Login(endpoint->port(), form + std::string(4096 - form.size(), 'x'), &status), "");
  EXPECT_EQ(status, 303);
}

TEST_F(HttpEndpointTest, BadAddressesAndAPortInUseAreErrorsNamingThem) {
  HttpOptions bad;
  bad.host = "not-an-address";
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> e = HttpEndpoint::Start(bad, nullptr, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e.status().message(), "--http-host=not-an-address: not an IPv4 or IPv6 address");
  bad.host = "::gg";
  e = HttpEndpoint::Start(bad, nullptr, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "--http-host=::gg: not an IPv6 or IPv4 address");

  auto first = Start();
  ASSERT_NE(first, nullptr);
  HttpOptions same;
  same.port = first->port();
  e = HttpEndpoint::Start(same, nullptr, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e.status().message(),
            absl::StrCat("--http-port=", first->port(),
                         ": cannot listen on 127.0.0.1:", first->port(), " (is the port in use?)"));
}

TEST_F(HttpEndpointTest, ClientThatNeverFinishesItsRequestIsCutAtTheRequestTimeout) {
  HttpOptions options;
  options.request_timeout = std::chrono::milliseconds(300);
  auto endpoint = Start(options);
  ASSERT_NE(endpoint, nullptr);
  const int fd = Connect(endpoint->port());
  const auto start = std::chrono::steady_clock::now();
  // A slow client: one byte of the header every 50 ms keeps libmicrohttpd's idle timer (10 s)
  // from ever firing; only the whole-request deadline ends it. The pause is the client's
  // behaviour under test, not a wait for a condition.
  const std::string partial =
      "GET /metrics HTTP/1.1\r\nX-Slow: "
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
  bool cut = false;
  for (char ch : partial) {
    if (send(fd, &ch, 1, MSG_NOSIGNAL) != 1) {
      cut = true;
      break;
    }
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 50) > 0) {  // the server closed its side
      char c;
      if (recv(fd, &c, 1, MSG_DONTWAIT) <= 0) {
        cut = true;
        break;
      }
    }
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  close(fd);
  EXPECT_TRUE(cut) << "still connected after sending " << partial.size() << " bytes";
  EXPECT_GE(elapsed, std::chrono::milliseconds(250));
  EXPECT_LT(elapsed, std::chrono::seconds(3));
  EXPECT_EQ(metrics_calls_.load(), 0);
  // The endpoint still serves others.
  EXPECT_EQ(Request(endpoint->port(), "GET", "/metrics").status, 200);
}

}  // namespace
}  // namespace ddprun::rendezvous
