// The settings the agent's rendezvous is built from: what --rdzv-conf and the restart mode make
// of the run's timeouts.
#include "launcher/rdzv/rendezvous_setup.h"

#include <chrono>

#include "gtest/gtest.h"

namespace ddprun::launcher {
namespace {

using std::chrono::milliseconds;

LaunchOptions C10d(RestartMode mode) {
  LaunchOptions o;
  o.rdzv_endpoint = "10.9.9.9:29400";  // not this host: nothing is bound or resolved
  o.restart_mode = mode;
  o.rdzv_conf["last_call_timeout"] = "7";
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
  told.rdzv_conf["failure_last_call_timeout"] = "2.5";
  auto explicit_wait = MakeC10dSettings(told, host);
  ASSERT_TRUE(explicit_wait.ok()) << explicit_wait.status();
  EXPECT_EQ(explicit_wait->timeouts.failure_last_call_timeout, milliseconds(2500));

  told.rdzv_conf["failure_last_call_timeout"] = "-1";
  EXPECT_FALSE(MakeC10dSettings(told, host).ok());
}

TEST(RendezvousSetupTest, EtcdGetsTheSameTimeouts) {
  LaunchOptions o = C10d(RestartMode::kInProcess);
  o.rdzv_endpoint = "10.9.9.9:2379";
  auto etcd = MakeEtcdSettings(o);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  EXPECT_EQ(etcd->timeouts.failure_last_call_timeout, milliseconds(0));
}

}  // namespace
}  // namespace ddprun::launcher
