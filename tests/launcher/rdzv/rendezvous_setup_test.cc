// The settings the agent's rendezvous is built from: what --rdzv-conf and the restart mode make
// of the run's timeouts.
#include "launcher/rdzv/rendezvous_setup.h"

#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::launcher {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

LaunchOptions C10d(RestartMode mode) {
  LaunchOptions o;
  o.rdzv_endpoint = "10.9.9.9:29400";  // not this host: nothing is bound or resolved
  o.restart_mode = mode;
  o.rdzv.timeouts.last_call_timeout = std::chrono::seconds(7);
  return o;
}

TEST(RendezvousSetupTest, InProcessSurvivorsReformWithoutALastCallUnlessTold) {
  const HostInfo host;
  auto cold = MakeC10dSettings(C10d(RestartMode::kCold), host);
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_EQ(cold->timeouts.last_call_timeout, milliseconds(7000));
  EXPECT_FALSE(cold->timeouts.failure_last_call_timeout.has_value());  // last_call_timeout

  auto in_process = MakeC10dSettings(C10d(RestartMode::kInProcess), host);
  ASSERT_TRUE(in_process.ok()) << in_process.status();
  EXPECT_EQ(in_process->timeouts.last_call_timeout, milliseconds(7000));
  EXPECT_EQ(in_process->timeouts.failure_last_call_timeout, milliseconds(0));

  LaunchOptions told = C10d(RestartMode::kInProcess);
  told.rdzv.timeouts.failure_last_call_timeout = milliseconds(2500);
  auto explicit_wait = MakeC10dSettings(told, host);
  ASSERT_TRUE(explicit_wait.ok()) << explicit_wait.status();
  EXPECT_EQ(explicit_wait->timeouts.failure_last_call_timeout, milliseconds(2500));

  // A bad value never gets this far: --rdzv-conf is parsed once, with the command line.
  EXPECT_FALSE(ParseRdzvConf({{"failure_last_call_timeout", "-1"}}).ok());
}

TEST(RendezvousSetupTest, EtcdGetsTheSameTimeouts) {
  LaunchOptions o = C10d(RestartMode::kInProcess);
  o.rdzv_endpoint = "10.9.9.9:2379";
  auto etcd = MakeEtcdSettings(o);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  EXPECT_EQ(etcd->timeouts.failure_last_call_timeout, milliseconds(0));
}

// etcd serves the liveness path too (its coordinator agent hosts the receiver): it carries the
// mode as c10d does.
TEST(RendezvousSetupTest, EtcdCarriesTheLivenessModeAsC10dDoes) {
  LaunchOptions o = C10d(RestartMode::kCold);
  o.rdzv_endpoint = "10.9.9.9:2379";
  for (const auto mode : {rendezvous::LivenessMode::kOn, rendezvous::LivenessMode::kAuto,
                          rendezvous::LivenessMode::kOff}) {
    o.rdzv.liveness = mode;
    auto etcd = MakeEtcdSettings(o);
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    EXPECT_EQ(etcd->timeouts.liveness.mode, mode);
    auto c10d = MakeC10dSettings(o, HostInfo{});
    ASSERT_TRUE(c10d.ok()) << c10d.status();
    EXPECT_EQ(c10d->timeouts.liveness.mode, mode);
  }
}

// Unset, a multi-node run has the liveness path in auto (the detector decides a member's loss
// only while a spare stands ready, design §3a), a single node none; on every backend.
TEST(RendezvousSetupTest, LivenessIsAutoForSeveralNodesUnlessSaidOtherwise) {
  LaunchOptions o = C10d(RestartMode::kCold);
  o.min_nodes = 1;
  o.max_nodes = 3;
  auto unset = MakeC10dSettings(o, HostInfo{});
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_EQ(unset->timeouts.liveness.mode, rendezvous::LivenessMode::kAuto);
  o.max_nodes = 1;
  auto single = MakeC10dSettings(o, HostInfo{});
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->timeouts.liveness.mode, rendezvous::LivenessMode::kOff);
  o.max_nodes = 3;
  o.rdzv.liveness = rendezvous::LivenessMode::kOn;
  auto three = MakeC10dSettings(o, HostInfo{});
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->timeouts.liveness.mode, rendezvous::LivenessMode::kOn);
  o.rdzv.liveness = rendezvous::LivenessMode::kOff;
  auto off = MakeC10dSettings(o, HostInfo{});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->timeouts.liveness.mode, rendezvous::LivenessMode::kOff);
  o.rdzv.liveness.reset();
  o.rdzv_endpoint = "10.9.9.9:2379";
  auto etcd = MakeEtcdSettings(o);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  EXPECT_EQ(etcd->timeouts.liveness.mode, rendezvous::LivenessMode::kAuto);
}

// A static job of several nodes: node 0 hosts at MASTER_ADDR on MASTER_PORT + 1 (whatever the
// addresses say), the others only join, and nobody fails over (node 0 comes back there).
TEST(RendezvousSetupTest, StaticNodeZeroHostsOnTheNextPortAndIsAwaited) {
  LaunchOptions o;
  o.rdzv_backend = RdzvBackend::kStatic;
  o.min_nodes = o.max_nodes = 3;
  o.master_addr = "10.9.9.9";
  o.master_port = 29500;
  o.rdzv.timeouts.keep_alive_interval = milliseconds(500);
  for (int rank : {0, 2}) {
    o.node_rank = rank;
    auto s = MakeStaticSettings(o);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->endpoint_host, "10.9.9.9");
    EXPECT_EQ(s->endpoint_port, 29501);
    EXPECT_EQ(s->host_here, rank == 0);
    EXPECT_EQ(s->must_host, rank == 0);
    EXPECT_EQ(s->host_loss, rendezvous::HostLoss::kAwaitReturn);
    EXPECT_EQ(s->timeouts.keep_alive_interval, milliseconds(500));  // the c10d keys apply
  }
  o.rdzv.static_port = 31000;
  auto moved = MakeStaticSettings(o);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->endpoint_port, 31000);

  o.rdzv.static_port.reset();
  o.master_port = 65535;
  auto no_port = MakeStaticSettings(o);
  ASSERT_FALSE(no_port.ok());
  EXPECT_EQ(no_port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_port.status().message().find("static_port"), std::string::npos);
}

// A c10d endpoint list: the first hosts the run, the others are where it may be served after a
// failover, on the first one's port unless they name their own.
TEST(RendezvousSetupTest, AnEndpointListNamesWhereAMovedRunIsServed) {
  LaunchOptions o = C10d(RestartMode::kCold);
  o.rdzv_id = "job";
  o.rdzv_endpoint = "10.9.9.9:29555,10.9.9.10,[fd00::3]:30000";
  auto s = MakeC10dSettings(o, HostInfo{});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->run_id, "job");
  EXPECT_EQ(s->endpoint_host, "10.9.9.9");
  EXPECT_EQ(s->endpoint_port, 29555);
  EXPECT_EQ(s->other_endpoints, (std::vector<std::string>{"10.9.9.10:29555", "[fd00::3]:30000"}));
  o.rdzv_endpoint = "10.9.9.9,bad host";
  auto bad = MakeC10dSettings(o, HostInfo{});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--rdzv-endpoint"), std::string::npos);
}

}  // namespace
}  // namespace ddprun::launcher
