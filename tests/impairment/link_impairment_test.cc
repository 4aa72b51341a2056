// NetHosts::Impair (tests/testing/net_hosts.h), which the false-detection soak
// (bench/spares/netem_soak.cc) stands on: a link impaired with "loss 10% delay 50ms 50ms" loses
// and delays UDP datagrams as netem does (tc netem where the kernel has it, else the user-space
// FrameRelay), measured by round trips between two namespaced hosts (udp_rtt.py). Root only.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/testing/net_hosts.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using testing::NetHosts;
using testing::Subprocess;
using namespace std::chrono_literals;

struct RoundTrips {
  double loss = 0;
  std::vector<double> rtt_ms;  // sorted
  double Quantile(double q) const { return rtt_ms[static_cast<size_t>(q * (rtt_ms.size() - 1))]; }
};

// N datagrams from host 1 to an echo on host 2 and back.
RoundTrips Measure(const NetHosts& hosts, int n) {
  const std::string script = testing::SourcePath("tests/impairment/udp_rtt.py");
  Subprocess echo(hosts.On(2, {testing::SystemPython(), script, "echo", "7000"}));
  Subprocess send(hosts.On(
      1, {testing::SystemPython(), script, "send", hosts.Address(2), "7000", std::to_string(n)}));
  RoundTrips r;
  if (!send.Wait(120s)) return r;
  const nlohmann::json j = nlohmann::json::parse(send.out(), nullptr, false);
  if (j.is_discarded() || j["rtt_ms"].empty()) {
    ADD_FAILURE() << "no round trips: " << send.out() << send.err();
    return r;
  }
  r.loss = 1 - j["received"].get<double>() / j["sent"].get<double>();
  r.rtt_ms = j["rtt_ms"].get<std::vector<double>>();
  return r;
}

class LinkImpairmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Root and namespaces are this test's subject: without them it fails, never skips.
    ASSERT_EQ(NetHosts::Unavailable(), "");
  }
};

TEST_F(LinkImpairmentTest, TenPercentLossAndFiftyPlusMinusFiftyMillisecondsEachWay) {
  NetHosts hosts(2);
  ASSERT_EQ(hosts.error(), "");
  for (int h = 1; h <= 2; ++h) {
    absl::StatusOr<std::string> used = hosts.Impair(h, "loss 10% delay 50ms 50ms");
    ASSERT_TRUE(used.ok()) << used.status();
  }
  const RoundTrips r = Measure(hosts, 1000);
  ASSERT_FALSE(r.rtt_ms.empty());
  // A round trip crosses two impaired links: 1 - 0.9^2 = 19 % lost (sd 1.2 % at 1000).
  EXPECT_GT(r.loss, 0.12);
  EXPECT_LT(r.loss, 0.27);
  // The sum of two uniform delays in [0, 100] ms: median 100, 1st percentile 14 ms, 90th 155 ms
  // (the bounds leave room for the Python ends being late on a loaded machine).
  EXPECT_GT(r.Quantile(0.5), 80);
  EXPECT_LT(r.Quantile(0.5), 160);
  EXPECT_LT(r.Quantile(0.01), 40);
  EXPECT_LT(r.Quantile(0.9), 300);
}

TEST_F(LinkImpairmentTest, AnUnimpairedLinkLosesAndDelaysNothing) {
  NetHosts hosts(2);
  ASSERT_EQ(hosts.error(), "");
  const RoundTrips r = Measure(hosts, 300);
  ASSERT_FALSE(r.rtt_ms.empty());
  EXPECT_LT(r.loss, 0.02);
  EXPECT_LT(r.Quantile(0.5), 20);
}

TEST_F(LinkImpairmentTest, NetemArgumentsItCannotHonourAreRefused) {
  NetHosts hosts(1);
  ASSERT_EQ(hosts.error(), "");
  for (const char* bad :
       {"loss 10", "delay 50ms 50ms distribution normal", "rate 1mbit", "delay 10ms 20ms"}) {
    EXPECT_FALSE(hosts.Impair(1, bad, NetHosts::Impairer::kRelay).ok()) << bad;
  }
}

}  // namespace
}  // namespace ddprun
