// ddprun-rdzv's HTTP side with real tools: promtool checks the exposition, a real Prometheus
// server scrapes it with the token, and junk, slow and oversized requests, unknown paths and
// many connections leave the server (and its gRPC side) serving.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/loopback.h"
#include "tests/testing/rdzv_daemon.h"
#include "tests/testing/reserved_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using testing::BinPath;
using testing::CountMatches;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadFile;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitUntil;
using testing::WriteFile;
using namespace std::chrono_literals;

constexpr char kToken[] = "metrics-test-token";

// Every read in these tests gives up after 5 s rather than hang the test.
constexpr int kReadTimeoutS = 5;

int Connect(int port) { return testing::ConnectLoopback(port, kReadTimeoutS); }

std::string Exchange(int port, const std::string& raw) {
  return testing::LoopbackExchange(port, raw, kReadTimeoutS);
}

struct Response {
  int status = 0;
  std::string head;
  std::string body;
};

Response Get(int port, const std::string& path, const std::string& headers = "") {
  const std::string answer = Exchange(
      port, "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + headers + "\r\n");
  Response r;
  const size_t end = answer.find("\r\n\r\n");
  if (answer.size() < 12 || end == std::string::npos) return r;
  r.status = std::atoi(answer.substr(9, 3).c_str());
  r.head = answer.substr(0, end);
  r.body = answer.substr(end + 4);
  return r;
}

std::string Bearer() { return std::string("Authorization: Bearer ") + kToken + "\r\n"; }

class MetricsTest : public ::testing::Test {
 protected:
  // The rendezvous token of the test's daemon and agents.
  virtual std::string Token() const { return kToken; }
  // More flags for the daemon.
  virtual std::vector<std::string> ExtraFlags() const { return {}; }

  void SetUp() override {
    daemon_ = testing::RdzvDaemon::WithHttp(Token(), ExtraFlags());
    ASSERT_FALSE(daemon_->endpoint().empty()) << daemon_->error();
    http_port_ = daemon_->http_port();
    ASSERT_GT(http_port_, 0) << daemon_->output() << daemon_->error();
  }

  // Two agents of run "watched", --max-restarts=1; rank 1 fails once. The workers report steps
  // (the one they resume from, then the ones they start) as ddp-train does, so that each agent's
  // goodput ledger sees its recovery complete.
  std::vector<std::unique_ptr<Subprocess>> StartJob() {
    const std::string worker = dir_.File("w.sh");
    WriteFile(worker,
              "#!/bin/sh\n[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ] && exit 3\n"
              "for s in 0 1 2; do echo \"{\\\"pid\\\":$$,\\\"step\\\":$s}\" > "
              "\"$DDPRUN_PROGRESS_FILE\"; done\n"
              "while [ ! -e " +
                  dir_.File("go") + " ]; do sleep 0.05; done\n",
              0755);
    std::vector<std::unique_ptr<Subprocess>> agents;
    for (int i = 0; i < 2; ++i) {
      agents.push_back(std::make_unique<Subprocess>(
          std::vector<std::string>{BinPath("ddprun"), "--nnodes=2", "--nproc-per-node=1",
                                   "--max-restarts=1", "--rdzv-backend=c10d",
                                   "--rdzv-endpoint=" + daemon_->endpoint(), "--rdzv-id=watched",
                                   "--rdzv-conf=keep_alive_interval=0.3", "--no-python", worker},
          std::map<std::string, std::string>{{"DDPRUN_RDZV_TOKEN", Token()}}));
    }
    return agents;
  }

  bool JobRestartedAndRunning() {
    const Response r = Get(http_port_, "/metrics", Bearer());
    return CountMatches(r.body, "ddprun_rdzv_run_round\\{run_id=\"watched\"\\} 2") == 1 &&
           CountMatches(r.body, "ddprun_rdzv_run_nodes\\{run_id=\"watched\"\\} 2") == 1;
  }

  TempDir dir_;
  std::unique_ptr<testing::RdzvDaemon> daemon_;
  int http_port_ = 0;
};

TEST_F(MetricsTest, PromtoolAcceptsTheMetricsAndARealPrometheusScrapesThem) {
  auto agents = StartJob();
  ASSERT_TRUE(WaitUntil(
      [&] {
        return JobRestartedAndRunning() && CountMatches(Get(http_port_, "/metrics", Bearer()).body,
                                                        "ddprun_rdzv_heartbeats_total [1-9]") == 1;
      },
      30s))
      << Get(http_port_, "/metrics", Bearer()).body;
  const Response metrics = Get(http_port_, "/metrics", Bearer());
  ASSERT_EQ(metrics.status, 200);
  EXPECT_THAT(metrics.head, HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(metrics.body, HasSubstr("ddprun_rdzv_restarts_total{cause=\"worker_failure\"} 1"));
  EXPECT_THAT(metrics.body, HasSubstr("ddprun_rdzv_run_restarts_used{run_id=\"watched\"} 1"));
  EXPECT_THAT(metrics.body, HasSubstr("ddprun_rdzv_failure_to_restart_seconds_count 1"));
  EXPECT_THAT(metrics.body, HasSubstr("ddprun_rdzv_round_completion_seconds_count 2"));
  EXPECT_EQ(CountMatches(metrics.body, "ddprun_rdzv_heartbeats_total [1-9]"), 1) << metrics.body;
  // Each agent's goodput ledger sent its recovery from the failure: the failing node's and the
  // other's, both cold.
  Response recovered;
  EXPECT_TRUE(WaitUntil(
      [&] {
        recovered = Get(http_port_, "/metrics", Bearer());
        return recovered.body.find(
                   "ddprun_rdzv_recoveries_total{run_id=\"watched\",mode=\"cold\","
                   "cause=\"worker_exit\"} 1\n") != std::string::npos &&
               recovered.body.find(
                   "ddprun_rdzv_recoveries_total{run_id=\"watched\",mode=\"cold\","
                   "cause=\"remote_failure\"} 1\n") != std::string::npos;
      },
      15s))
      << recovered.body;
  EXPECT_THAT(recovered.body, HasSubstr("ddprun_rdzv_recovery_seconds_count{run_id=\"watched\","
                                        "mode=\"cold\",phase=\"first_step\"} 2\n"));
  EXPECT_EQ(
      CountMatches(recovered.body, "ddprun_rdzv_effective_training_ratio\\{run_id=\"watched\""), 1)
      << "two agents on one host: one node";

  if (access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "promtool missing (prometheus)";
  WriteFile(dir_.File("metrics.txt"), metrics.body);
  Subprocess promtool(
      {"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + dir_.File("metrics.txt")});
  auto st = promtool.Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << promtool.out() << promtool.err();

  // A real Prometheus, scraping every 200 ms with the token from a file.
  int port = 0;
  {
    testing::ReservedPort free_port;  // released for Prometheus to bind
    port = free_port.port();
  }
  ASSERT_GT(port, 0);
  WriteFile(dir_.File("token"), kToken);
  WriteFile(dir_.File("prometheus.yml"),
            "global:\n  scrape_interval: 200ms\n  scrape_timeout: 150ms\n"
            "scrape_configs:\n  - job_name: ddprun-rdzv\n"
            "    authorization:\n      credentials_file: " +
                dir_.File("token") +
                "\n"
                "    static_configs:\n      - targets: ['127.0.0.1:" +
                std::to_string(http_port_) + "']\n");
  Subprocess prometheus({"/usr/bin/prometheus", "--config.file=" + dir_.File("prometheus.yml"),
                         "--storage.tsdb.path=" + dir_.File("tsdb"),
                         "--web.listen-address=127.0.0.1:" + std::to_string(port)});
  std::string answer;
  const bool scraped = WaitUntil(
      [&] {
        answer =
            Get(port, "/api/v1/query?query=ddprun_rdzv_run_nodes%7Brun_id%3D%22watched%22%7D").body;
        const auto j = nlohmann::json::parse(answer, nullptr, false);
        return !j.is_discarded() && j.value("status", "") == "success" &&
               !j["data"]["result"].empty() && j["data"]["result"][0]["value"][1] == "2";
      },
      60s);
  EXPECT_TRUE(scraped) << answer << prometheus.err().substr(0, 3000);
  WriteFile(dir_.File("go"), "");
  ASSERT_TRUE(testing::ExpectAllExit(agents, 0, 30s));
}

TEST_F(MetricsTest, AWrongOrMissingTokenGets401AndShowsNothing) {
  auto agents = StartJob();
  ASSERT_TRUE(WaitUntil([&] { return JobRestartedAndRunning(); }, 30s));
  for (const std::string& headers : {std::string(""), std::string("Authorization: Bearer nope\r\n"),
                                     std::string("Cookie: ddprun_session=guess\r\n")}) {
    for (const char* path : {"/", "/metrics"}) {
      const Response r = Get(http_port_, path, headers);
      EXPECT_EQ(r.status, 401) << path << " " << headers;
      EXPECT_THAT(r.body, Not(HasSubstr("watched"))) << path;
      EXPECT_THAT(r.body, Not(HasSubstr(kToken))) << path;
    }
  }
  // The login form: a wrong token is refused; the right one sets a session cookie (not the
  // token) that opens the page.
  auto login = [&](const std::string& token) {
    const std::string body = "token=" + token;
    return Exchange(http_port_,
                    "POST /login HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    "Content-Type: application/x-www-form-urlencoded\r\n"
                    "Content-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body);
  };
  EXPECT_THAT(login("nope"), HasSubstr("HTTP/1.1 401"));
  const std::string ok = login(kToken);
  EXPECT_THAT(ok, HasSubstr("HTTP/1.1 303"));
  std::smatch cookie;
  ASSERT_TRUE(std::regex_search(ok, cookie, std::regex("Set-Cookie: (ddprun_session=[0-9a-f]+)")))
      << ok;
  EXPECT_THAT(ok, Not(HasSubstr(kToken)));
  const Response page = Get(http_port_, "/", "Cookie: " + cookie[1].str() + "\r\n");
  EXPECT_EQ(page.status, 200);
  EXPECT_THAT(page.body, HasSubstr("run watched"));
  EXPECT_THAT(page.body, Not(HasSubstr(kToken)));
  EXPECT_EQ(CountMatches(page.body, "<tr class=\"member\">"), 2) << page.body;
  EXPECT_THAT(page.body, HasSubstr("worker_failure"));
  // The agents' own timelines reached the server: the failing agent's step names its cause.
  EXPECT_TRUE(WaitUntil(
      [&] {
        const std::string body = Get(http_port_, "/", "Cookie: " + cookie[1].str() + "\r\n").body;
        return body.find("failure_detected") != std::string::npos &&
               body.find("worker_exit: exited 3") != std::string::npos &&
               body.find("workers_started") != std::string::npos;
      },
      10s))
      << Get(http_port_, "/", "Cookie: " + cookie[1].str() + "\r\n").body;
  WriteFile(dir_.File("go"), "");
  ASSERT_TRUE(testing::ExpectAllExit(agents, 0, 30s));
}

// The server's side of the goodput ledger: the "recovered" timeline steps an agent sends after
// a recovery (here rdzv-test-agent's, through the real ReportStep call) show in /metrics,
// which promtool accepts, and on the page; garbage sent beside them changes nothing.
TEST_F(MetricsTest, RecoveriesTheAgentsReportShowInTheMetricsAndOnThePage) {
  const std::string recovered =
      R"({"ts_ms":1700000000123,"run_id":"ledger","node":"n<1>","step":"recovered","round":2,)"
      R"("mode":"in-process","cause":"worker_exit","detect_ms":0,"stop_ms":12,)"
      R"("rendezvous_ms":40,"start_ms":55,"restore_ms":900,"first_step_ms":1250,)"
      R"("steps_lost":4,"restored_step":57,"effective_ratio":0.934})";
  // A recovery whose every number is bad: it counts, without them.
  const std::string bad_fields =
      R"({"step":"recovered","node":"n2","round":2,"mode":"warm","cause":"cosmic_ray",)"
      R"("stop_ms":-5,"first_step_ms":1e300,"steps_lost":"many","effective_ratio":2})";
  Subprocess agent(
      {BinPath("rdzv-test-agent"), "--endpoint", daemon_->endpoint(), "--run", "ledger", "--nnodes",
       "1", "--step", recovered, "--step", "{not json", "--step", bad_fields, "--step",
       R"({"step":"recovered","node":"n3","effective_ratio":NaN})", "--step",
       R"({"step":["recovered"]})"},
      {{"DDPRUN_RDZV_TOKEN", kToken}});
  ASSERT_TRUE(agent.WaitForOutputContains("STEPS SENT 5", 10s)) << agent.out() << agent.err();
  const std::string run = "run_id=\"ledger\"";
  Response metrics;
  ASSERT_TRUE(WaitUntil(
      [&] {
        metrics = Get(http_port_, "/metrics", Bearer());
        return metrics.body.find("cause=\"other\"} 1\n") != std::string::npos;
      },
      10s))
      << metrics.body;
  EXPECT_THAT(metrics.body, HasSubstr("ddprun_rdzv_recoveries_total{" + run +
                                      ",mode=\"in-process\",cause=\"worker_exit\"} 1\n"));
  EXPECT_THAT(metrics.body, HasSubstr("ddprun_rdzv_recoveries_total{" + run +
                                      ",mode=\"other\",cause=\"other\"} 1\n"));
  EXPECT_EQ(CountMatches(metrics.body, "ddprun_rdzv_recoveries_total\\{"), 2) << metrics.body;
  EXPECT_THAT(metrics.body, HasSubstr("ddprun_rdzv_recovery_seconds_bucket{" + run +
                                      ",mode=\"in-process\",phase=\"first_step\",le=\"2.5\"} 1\n"));
  EXPECT_THAT(metrics.body, HasSubstr("ddprun_rdzv_recovery_seconds_sum{" + run +
                                      ",mode=\"in-process\",phase=\"restore\"} 0.9\n"));
  EXPECT_THAT(metrics.body, Not(HasSubstr("mode=\"other\",phase=")));
  EXPECT_THAT(metrics.body, HasSubstr("ddprun_rdzv_recovery_steps_lost_total{" + run +
                                      ",mode=\"in-process\"} 4\n"));
  EXPECT_THAT(metrics.body,
              HasSubstr("ddprun_rdzv_effective_training_ratio{" + run + ",node=\"n<1>\"} 0.934\n"));
  EXPECT_EQ(CountMatches(metrics.body, "ddprun_rdzv_effective_training_ratio\\{"), 1)
      << metrics.body;

  const Response page = Get(http_port_, "/", Bearer());
  EXPECT_EQ(page.status, 200) << page.head << daemon_->output() << daemon_->error();
  EXPECT_THAT(page.body, HasSubstr("Recoveries"));
  EXPECT_THAT(page.body, HasSubstr("<td>n&lt;1&gt;</td><td>2</td><td>in-process</td>"
                                   "<td>worker_exit</td>"));
  EXPECT_THAT(page.body, HasSubstr("<td>+1.2 s</td><td>4</td><td>57</td>"));
  EXPECT_THAT(page.body, HasSubstr("<td>n&lt;1&gt;</td><td>93.4%</td>"));
  EXPECT_THAT(page.body, HasSubstr("<td>cosmic_ray</td>"));

  if (access("/usr/bin/promtool", X_OK) == 0) {
    WriteFile(dir_.File("recoveries.txt"), metrics.body);
    Subprocess promtool(
        {"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + dir_.File("recoveries.txt")});
    auto st = promtool.Wait(30s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 0) << promtool.out() << promtool.err();
  }
  agent.Signal(SIGTERM);  // leaves the run
  auto st = agent.Wait(10s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << agent.out() << agent.err();
}

TEST_F(MetricsTest, JunkSlowOversizedAndManyConnectionsLeaveTheServerServing) {
  auto agents = StartJob();
  ASSERT_TRUE(WaitUntil([&] { return JobRestartedAndRunning(); }, 30s));
  // Junk, an unknown path, another method, a huge header.
  EXPECT_THAT(Exchange(http_port_, "\x16\x03\x01 garbage\r\n\r\n"), Not(HasSubstr(" 200 ")));
  EXPECT_EQ(Get(http_port_, "/admin", Bearer()).status, 404);
  EXPECT_THAT(Exchange(http_port_, "DELETE /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
                                       Bearer() + "\r\n"),
              HasSubstr(" 405 "));
  EXPECT_THAT(Exchange(http_port_, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " +
                                       std::string(100000, 'a') + "\r\n\r\n"),
              Not(HasSubstr(" 200 ")));
  // Many connections at once, and slow ones: a byte a second.
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    const int fd = Connect(http_port_);
    if (fd >= 0) idle.push_back(fd);
  }
  std::thread slow([&] {
    const int fd = Connect(http_port_);
    const std::string request = "GET /metrics HTTP/1.1\r\n";
    for (size_t i = 0; i < request.size() && i < 4; ++i) {
      if (send(fd, &request[i], 1, MSG_NOSIGNAL) < 0) break;
      std::this_thread::sleep_for(1s);
    }
    close(fd);
  });
  for (int fd : idle) close(fd);
  // Still serving, over HTTP and gRPC, while the slow client dribbles.
  EXPECT_TRUE(WaitUntil([&] { return Get(http_port_, "/metrics", Bearer()).status == 200; }, 10s));
  Subprocess status(
      {BinPath("ddprun"), "status", "--rdzv-endpoint=" + daemon_->endpoint(), "--rdzv-id=watched"},
      {{"DDPRUN_RDZV_TOKEN", kToken}});
  auto st = status.Wait(20s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << status.err();
  slow.join();
  WriteFile(dir_.File("go"), "");
  ASSERT_TRUE(testing::ExpectAllExit(agents, 0, 30s)) << "the job was not disturbed";
}

// A connection to 127.0.0.1:port from the loopback address `from` ("127.0.0.2"), or -1.
int ConnectFrom(const std::string& from, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, from.c_str(), &local.sin_addr);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Issue 28 (12), slowloris: 16 connections from each of four addresses (64 in all, the whole
// connection limit) send a request's headers a byte a second and never finish them. Each is cut
// off within the request timeout (10 s), and then a real request, from an address that had its
// 16 connections taken, is answered while the slow clients keep trying.
TEST_F(MetricsTest, SlowClientsAreCutOffAndTheirAddressIsServedAgain) {
  const std::string headers = "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(64, 'a');
  struct Slow {
    int fd;
    std::optional<std::chrono::steady_clock::time_point> cut_at;
  };
  std::vector<Slow> slow;
  for (const char* from : {"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"}) {
    for (int i = 0; i < 16; ++i) {
      const int fd = ConnectFrom(from, http_port_);
      ASSERT_GE(fd, 0) << from;
      slow.push_back({fd, std::nullopt});
    }
  }
  const auto start = std::chrono::steady_clock::now();
  std::mutex mu;
  bool stop = false;
  std::thread dribble([&] {
    for (size_t byte = 0; byte < headers.size(); ++byte) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stop) break;
        for (Slow& s : slow) {
          if (s.cut_at.has_value()) continue;
          char ch;
          const ssize_t got = recv(s.fd, &ch, 1, MSG_DONTWAIT);
          if (got == 0 || (got < 0 && errno != EAGAIN) ||
              send(s.fd, &headers[byte], 1, MSG_NOSIGNAL) < 0) {
            s.cut_at = std::chrono::steady_clock::now();
          }
        }
      }
      // The attack itself is a byte a second; this sleep is its pace, not a wait for a result.
      std::this_thread::sleep_for(1s);
    }
  });
  // Meanwhile the address's slots are all taken: a request from it is refused.
  EXPECT_EQ(Get(http_port_, "/metrics", Bearer()).status, 0);
  // Within the request timeout (and room for a loaded host) a request from it is answered.
  const bool served =
      WaitUntil([&] { return Get(http_port_, "/metrics", Bearer()).status == 200; }, 16s);
  const double served_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The dribbling thread notices a cut at its next byte.
  const bool all_cut = WaitUntil(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return std::all_of(slow.begin(), slow.end(),
                           [](const Slow& s) { return s.cut_at.has_value(); });
      },
      5s);
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  dribble.join();
  for (const Slow& s : slow) close(s.fd);
  EXPECT_TRUE(served) << "no answer within 16 s while slow clients held the connections";
  EXPECT_GE(served_s, 8.0) << "the slow clients held the address until cut off";
  EXPECT_TRUE(all_cut) << "every slow connection was cut off by the server";
}

// A daemon whose status-page logins last 2 s.
class ShortSessionTest : public MetricsTest {
 protected:
  std::vector<std::string> ExtraFlags() const override { return {"--http-session-lifetime=2"}; }
};

// Issue 28 (21): every login is its own random session, which opens the page (not /metrics)
// until it expires; unknown and expired sessions get 401.
TEST_F(ShortSessionTest, EachLoginIsItsOwnSessionThatExpires) {
  auto login = [&] {
    const std::string body = std::string("token=") + kToken;
    const std::string answer =
        Exchange(http_port_,
                 "POST /login HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body);
    std::smatch m;
    EXPECT_TRUE(std::regex_search(answer, m, std::regex("Set-Cookie: (ddprun_session=[0-9a-f]+)")))
        << answer;
    EXPECT_THAT(answer, HasSubstr("Max-Age=2;"));
    return m.size() > 1 ? "Cookie: " + m[1].str() + "\r\n" : std::string();
  };
  const std::string first = login();
  const auto first_at = std::chrono::steady_clock::now();
  const std::string second = login();
  ASSERT_FALSE(first.empty());
  EXPECT_NE(first, second);
  EXPECT_EQ(Get(http_port_, "/", first).status, 200);
  EXPECT_EQ(Get(http_port_, "/", second).status, 200);
  EXPECT_EQ(Get(http_port_, "/metrics", first).status, 401) << "a session opens the page only";
  EXPECT_EQ(Get(http_port_, "/", "Cookie: ddprun_session=" + std::string(48, 'a') + "\r\n").status,
            401);
  // Expired after its 2 s.
  ASSERT_TRUE(WaitUntil([&] { return Get(http_port_, "/", first).status == 401; }, 10s));
  EXPECT_GE(std::chrono::steady_clock::now() - first_at, 1900ms);
  EXPECT_EQ(Get(http_port_, "/", first).status, 401);
  const Response page = Get(http_port_, "/", first);
  EXPECT_THAT(page.body, HasSubstr("wants its rendezvous token")) << "the login form again";
}

// A daemon on loopback without a token (a browser started from the command line sends no
// header), for the page as a person sees it.
class StatusPageTest : public MetricsTest {
 protected:
  std::string Token() const override { return ""; }
};

// The status page in a real browser (headless Chromium) while a 2-agent job runs after a
// restart: the run, its two members and the restart's cause are on the page; the screenshot
// is kept in BUILD/test-artifacts/status-page.png.
TEST_F(StatusPageTest, HeadlessChromiumShowsTheRunItsMembersAndTheRestart) {
  const std::string chromium = "/usr/bin/chromium";
  if (access(chromium.c_str(), X_OK) != 0) GTEST_SKIP() << "chromium missing";
  auto agents = StartJob();
  ASSERT_TRUE(WaitUntil([&] { return JobRestartedAndRunning(); }, 30s));
  const std::string url = "http://127.0.0.1:" + std::to_string(http_port_) + "/";
  const std::vector<std::string> browser = {chromium,
                                            "--headless=new",
                                            "--no-sandbox",
                                            "--disable-gpu",
                                            "--no-first-run",
                                            "--user-data-dir=" + dir_.File("chromium"),
                                            "--window-size=1280,720"};
  std::vector<std::string> dump = browser;
  dump.push_back("--dump-dom");
  dump.push_back(url);
  Subprocess dom(dump);
  auto st = dom.Wait(90s);
  ASSERT_TRUE(st.has_value()) << "chromium did not finish";
  ASSERT_EQ(st->exit_code, 0) << dom.err().substr(0, 2000);
  EXPECT_THAT(dom.out(), HasSubstr("run watched"));
  EXPECT_EQ(CountMatches(dom.out(), "<tr class=\"member\">"), 2) << dom.out();
  EXPECT_THAT(dom.out(), HasSubstr("worker_failure"));
  EXPECT_THAT(dom.out(), HasSubstr("running"));
  EXPECT_THAT(dom.out(), HasSubstr("failure_detected"));

  const std::string artifacts = BinPath("../test-artifacts");
  std::filesystem::create_directories(artifacts);
  const std::string png = artifacts + "/status-page.png";
  std::filesystem::remove(png);
  std::vector<std::string> shot = browser;
  shot.push_back("--screenshot=" + png);
  shot.push_back(url);
  Subprocess screenshot(shot);
  st = screenshot.Wait(90s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << screenshot.err().substr(0, 2000);
  const std::string image = ReadFile(png);
  EXPECT_GT(image.size(), 10000u) << png;
  EXPECT_EQ(image.substr(0, 4), "\x89PNG") << png;
  WriteFile(dir_.File("go"), "");
  ASSERT_TRUE(testing::ExpectAllExit(agents, 0, 30s));
}

// The agent that hosts the embedded server serves the same HTTP side
// (--rdzv-conf=http_port=P).
TEST(EmbeddedServerHttpTest, TheHostingAgentServesMetricsForTheRun) {
  TempDir dir;
  int rdzv_port = 0, http_port = 0;
  {
    testing::ReservedPort a, b;  // released for the agent to bind
    rdzv_port = a.port();
    http_port = b.port();
  }
  const std::string worker = dir.File("w.sh");
  WriteFile(worker, "#!/bin/sh\nwhile [ ! -e " + dir.File("go") + " ]; do sleep 0.05; done\n",
            0755);
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> argv = {BinPath("ddprun"), "--nnodes=2", "--rdzv-backend=c10d",
                                     "--rdzv-endpoint=127.0.0.1:" + std::to_string(rdzv_port),
                                     "--rdzv-id=embedded"};
    if (i == 0) argv.push_back("--rdzv-conf=is_host=1,http_port=" + std::to_string(http_port));
    argv.push_back("--no-python");
    argv.push_back(worker);
    agents.push_back(std::make_unique<Subprocess>(
        argv, std::map<std::string, std::string>{{"DDPRUN_RDZV_TOKEN", kToken}}));
    if (i == 0) {
      ASSERT_TRUE(WaitUntil(
          [&] { return agents[0]->err().find("serving /metrics") != std::string::npos; }, 10s))
          << agents[0]->err();
    }
  }
  std::string body;
  EXPECT_TRUE(WaitUntil(
      [&] {
        body = Get(http_port, "/metrics", Bearer()).body;
        return body.find("ddprun_rdzv_run_nodes{run_id=\"embedded\"} 2") != std::string::npos;
      },
      30s))
      << body;
  EXPECT_EQ(Get(http_port, "/metrics").status, 401);
  WriteFile(dir.File("go"), "");
  ASSERT_TRUE(testing::ExpectAllExit(agents, 0, 30s));
}

TEST_F(MetricsTest, ATakenHttpPortExitsTwoNamingIt) {
  Subprocess second(
      {BinPath("ddprun-rdzv"), "--port=0", "--http-port=" + std::to_string(http_port_)});
  auto st = second.Wait(10s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 2) << second.err();
  EXPECT_THAT(second.err(), HasSubstr("--http-port=" + std::to_string(http_port_)));
}

}  // namespace
}  // namespace ddprun
