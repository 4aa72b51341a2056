// The agent's side of the preflight (launcher/preflight/) on loopback: a ProbeListener answering
// ProbePeer (round trip and both directions' throughput), a probe of a port nobody listens on,
// a stranger that is not a probe, and the CPU GEMM's figure.
#include <arpa/inet.h>
#include <errno.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>

#include "launcher/preflight/compute_probe.h"
#include "launcher/preflight/pair_probe.h"
#include "launcher/preflight/preflight_runner.h"
#include "launcher/preflight/probe_listener.h"
#include "tests/testing/free_port.h"

namespace ddprun::launcher {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

std::chrono::steady_clock::time_point Later() { return std::chrono::steady_clock::now() + 30s; }

TEST(ProbeTest, APeerProbeMeasuresBothDirectionsAndTheRoundTrip) {
  absl::StatusOr<std::unique_ptr<ProbeListener>> listener = ProbeListener::Start();
  ASSERT_TRUE(listener.ok()) << listener.status();
  ASSERT_GT((*listener)->port(), 0);
  const auto start = std::chrono::steady_clock::now();
  const rendezvous::PairProbe p =
      ProbePeer({"peer", "127.0.0.1", (*listener)->port()}, 100ms, Later());
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.peer_node_id, "peer");
  EXPECT_GT(p.rtt_ms, 0);
  EXPECT_LT(p.rtt_ms, 100);
  EXPECT_GT(p.send_mbps, 100) << "loopback moves far more than 100 Mbit/s";
  EXPECT_GT(p.recv_mbps, 100);
  EXPECT_GE(took, 200ms) << "100 ms each way";
  EXPECT_LT(took, 3s);
  // The IPv6 loopback reaches the same listener (it listens on every address).
  EXPECT_EQ(ProbePeer({"peer", "::1", (*listener)->port()}, 50ms, Later()).error, "");
}

TEST(ProbeTest, APortNobodyListensOnIsAnErrorWithoutFigures) {
  const rendezvous::PairProbe p =
      ProbePeer({"gone", "127.0.0.1", testing::FreeLoopbackPort()}, 100ms, Later());
  EXPECT_THAT(p.error, HasSubstr("connect 127.0.0.1:"));
  EXPECT_THAT(p.error, HasSubstr("refused"));
  EXPECT_EQ(p.send_mbps, 0);
  EXPECT_EQ(p.rtt_ms, 0);
}

TEST(ProbeTest, AStrangerIsClosedAndTheListenerStillAnswersProbes) {
  absl::StatusOr<std::unique_ptr<ProbeListener>> listener = ProbeListener::Start();
  ASSERT_TRUE(listener.ok()) << listener.status();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons((*listener)->port());
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const char junk[] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(send(fd, junk, sizeof(junk) - 1, 0), static_cast<ssize_t>(sizeof(junk) - 1));
  char buf[16];
  // Closed without a word: an orderly end, or a reset (the junk it did not read).
  const ssize_t n = recv(fd, buf, sizeof(buf), 0);
  EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << n << " " << strerror(errno);
  close(fd);
  EXPECT_EQ(ProbePeer({"peer", "127.0.0.1", (*listener)->port()}, 50ms, Later()).error, "");
}

TEST(ProbeTest, APeerThatStopsAnsweringCostsTheBudgetNotMore) {
  // A listener that accepts (the kernel's backlog) and never answers.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const auto start = std::chrono::steady_clock::now();
  const rendezvous::PairProbe p =
      ProbePeer({"mute", "127.0.0.1", ntohs(addr.sin_port)}, 100ms, start + 1500ms);
  const auto took = std::chrono::steady_clock::now() - start;
  close(fd);
  EXPECT_THAT(p.error, HasSubstr("deadline")) << p.error;
  EXPECT_EQ(p.send_mbps, 0);
  EXPECT_GE(took, 1400ms);
  EXPECT_LT(took, 2500ms) << "the budget bounds it, not the 3 s a read may wait";
  EXPECT_THAT(ProbePeer({"mute", "127.0.0.1", 1}, 100ms, start).error,
              HasSubstr("budget was spent"));
}

TEST(ProbeTest, TheGemmMeasuresAFigureAndARunReportsItsTargets) {
  const double gflops = CpuGemmGflops();
  EXPECT_GT(gflops, 0.01);
  EXPECT_LT(gflops, 10000);
  absl::StatusOr<std::unique_ptr<ProbeListener>> listener = ProbeListener::Start();
  ASSERT_TRUE(listener.ok()) << listener.status();
  rendezvous::PreflightRequest request;
  request.generation = 4;
  request.probe_time = 50ms;
  request.targets = {{"a", "127.0.0.1", (*listener)->port()},
                     {"b", "127.0.0.1", testing::FreeLoopbackPort()}};
  const rendezvous::PreflightReport r = MeasurePreflight(request, 0.25);
  EXPECT_EQ(r.generation, 4);
  EXPECT_GT(r.cpu_gflops, 0);
  ASSERT_EQ(r.pairs.size(), 2u);
  EXPECT_EQ(r.pairs[0].error, "");
  EXPECT_NE(r.pairs[1].error, "");
  EXPECT_EQ(r.health_check_s, 0.25);
  EXPECT_GT(r.elapsed_s, 0.3) << "three GEMM blocks of 100 ms of CPU time";
}

}  // namespace
}  // namespace ddprun::launcher
