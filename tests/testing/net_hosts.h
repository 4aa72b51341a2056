// Several hosts on one machine for multi-host tests: a network namespace per host, each with
// its own address on a private bridge, and its own host name (a UTS namespace per process
// started on it). The bridge lives in a namespace of its own too, so the machine's network is
// never touched and no packet can leave: addresses are 10.213.0.N inside the test's
// namespaces only. Needs root (and iproute2, util-linux's unshare); Unavailable() says why not.
#ifndef DDPRUN_TESTS_TESTING_NET_HOSTS_H_
#define DDPRUN_TESTS_TESTING_NET_HOSTS_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/testing/frame_relay.h"

namespace ddprun::testing {

class NetHosts {
 public:
  // "" when the harness can run here, else the reason (for GTEST_SKIP).
  static std::string Unavailable();

  // Hosts 1..n: namespace "<prefix>-hN", address 10.213.0.N/24, host name "nN".
  explicit NetHosts(int n);
  ~NetHosts();  // deletes every namespace it made (their links go with them)
  NetHosts(const NetHosts&) = delete;
  NetHosts& operator=(const NetHosts&) = delete;

  // Empty when every host is up; else what failed.
  const std::string& error() const { return error_; }
  int size() const { return n_; }
  std::string Address(int host) const;
  std::string Name(int host) const;
  // The host's network namespace ("<prefix>-hN"): `ip netns pids` lists what runs on it.
  std::string Namespace(int host) const { return Ns(host); }
  // `argv` as run on `host`: in its network namespace, with its host name.
  std::vector<std::string> On(int host, const std::vector<std::string>& argv) const;
  // Takes the host's link down (a cut cable: packets are lost, no connection is reset) / up.
  void Cut(int host);
  void Heal(int host);
  // Another address on the host's link, e.g. "10.213.0.102/24" (in the bridge's subnet, so
  // every host reaches it).
  void AddAddress(int host, const std::string& cidr);

  // How Impair() impairs a link: the kernel's netem qdisc, or the user-space stand-in
  // (frame_relay.h) for kernels without sch_netem; kAuto: netem when the kernel has it.
  enum class Impairer { kAuto, kNetem, kRelay };
  // Impairs every frame the host sends (its link's egress) as `tc qdisc add dev eth0 root
  // netem ARGS` does, e.g. "loss 10% delay 50ms 50ms". Only egress: a packet between two
  // hosts then crosses exactly one impaired link, so each direction of every path sees ARGS.
  // Returns what was used ("netem" or "relay"), or why it cannot be done (kNetem on a kernel
  // without sch_netem names the missing CONFIG_NET_SCH_NETEM).
  absl::StatusOr<std::string> Impair(int host, const std::string& netem_args,
                                     Impairer how = Impairer::kAuto);
  // Limits the host's link to `rate` ("100mbit", tc's units) both ways, with a token bucket
  // (sch_tbf) on each end of its cable: eth0 in the host (what it sends) and its port on the
  // switch (what it receives). "" when done, else what tc said.
  std::string LimitRate(int host, const std::string& rate);
  // Lifts LimitRate's limit from `host`'s link: "" or what went wrong.
  std::string ClearRate(int host);
  // Frames the relay of Impair(host) passed and dropped (the host's egress); nullopt for a
  // host not impaired by the relay.
  std::optional<FrameRelay::Counts> ImpairedCounts(int host) const;
  // The UDP flows the relay of Impair(host) delivered to the host, with their longest silence
  // at its door; empty for a host not impaired by the relay.
  std::vector<FrameRelay::UdpFlow> UdpFlowsTo(int host) const;
  // False when a relay's threads could not be made real-time (see frame_relay.h).
  bool RelaysRealtime() const;

 private:
  std::string Ns(int host) const;
  std::string SwitchNs() const { return prefix_ + "-sw"; }
  bool Run(const std::string& command);  // records the first failure in error_

  const int n_;
  std::string prefix_;
  std::string error_;
  std::map<int, std::unique_ptr<FrameRelay>> relays_;  // by host; stopped before the namespaces go
};

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_NET_HOSTS_H_
